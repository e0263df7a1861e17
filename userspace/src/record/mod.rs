//! `sysprof record`: one capture session, one profile file.
//!
//! In: [`RecordArgs`]. Out: the profile at `-o`, a one-line summary (and a
//! second line only when something was lost). The output is created first
//! (fail before recording); the command, if any, starts once sampling runs.
//! Ctrl-C, SIGTERM, `-d`, the end of the command and the end of every `-p`
//! target all stop recording the same way: drain what is buffered, detach,
//! then finish the window and write it.
//!
//! A recording that holds more than [`crate::sampling::RECORD_WINDOW_RECORDS`] records is
//! cut into windows as the agent's is: each is finished (replayed,
//! symbolicated: columns and names) when full, what ended in it forgotten
//! by the collector, and merged into the windows before it
//! ([`crate::model::merge::Merger`], as `show` merges the agent's). The
//! processes that ended before the previous cut are then written into the
//! output ([`crate::profile::ProfileWriter`]) and dropped. Memory then
//! follows what is still running (and the threads that run on), not every
//! process that came and went; the end writes only the rest.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

use crate::capture::CaptureSession;
use crate::cli::RecordArgs;
use crate::collector::Collector;
use crate::error::RecordError;
use crate::profile::output::OutputFile;
use crate::profile::HostInfo;
use crate::sampling::{BadFlag, Engine, RecordScope, Role};

mod closing;
mod dpkg_owners;
mod windows;
use closing::{missing_symbols_line, print_summary};
use std::os::fd::AsFd;
use windows::Windows;

/// How `record` ended.
#[derive(Debug)]
enum Stop {
    Duration,
    Signal,
    /// The command ended (with its status, if it could be read).
    Command(Option<std::process::ExitStatus>),
    /// Every `-p` target exited.
    TargetsGone,
}

/// Check the arguments that clap cannot: what was asked makes sense.
fn check_args(args: &RecordArgs) -> Result<(), RecordError> {
    if !args.all_cpus && args.pids.is_empty() && args.command.is_empty() {
        return Err(RecordError::Usage(
            "say what to record: -a for the whole system, -p PID, or -- COMMAND".into(),
        ));
    }
    if !args.pids.is_empty() && !args.command.is_empty() {
        return Err(RecordError::Usage(
            "use either -p or a command, not both".into(),
        ));
    }
    for &pid in &args.pids {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(RecordError::UnknownPid(pid));
        }
    }
    args.capture
        .sampling()
        .check()
        .map_err(|e| RecordError::BadOption(BadFlag(e).into()))?;
    if let Some(d) = args.duration {
        // Duration::from_secs_f64 panics past u64 seconds; ten years is a bound no one meets.
        if !(d > 0.0 && d.is_finite() && d <= 315_360_000.0) {
            return Err(RecordError::Usage(format!(
                "-d {d}: the duration must be a number of seconds above 0 and at most 315360000"
            )));
        }
    }
    Ok(())
}

/// Record as `args` says; returns the exit status: the command's, when it
/// ran to its end (as perf does), else 0.
pub fn run(args: RecordArgs) -> Result<i32, RecordError> {
    check_args(&args)?;
    let output = OutputFile::create(&args.output)?;
    if args.open && !output.is_file() {
        return Err(RecordError::Usage(format!(
            "--open needs a file to open, not {}; name one with -o",
            crate::escape::path(&args.output)
        )));
    }
    crate::sys::process::raise_fd_limit();
    crate::sys::process::configure_malloc(crate::sys::process::MallocUse::Recording);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RecordError::EventLoop)?;
    // Boxed: the recording future holds the collector and the capture
    // session; on the stack it would make our own stacks deeper than the
    // copy that unwinds them when sysprof profiles itself.
    let open = args.open;
    let (status, path, tokio_signals) = runtime.block_on(Box::pin(record(args, output)))?;
    drop(runtime);
    if open {
        // Served until Ctrl-C; the command's status stays sysprof's.
        reinstate_signals(&tokio_signals);
        crate::view::serve(&path, true, 0)?;
    }
    Ok(status)
}

/// Record into `output`; returns the exit status, where the profile went
/// and the signal actions the runtime had installed.
async fn record(
    args: RecordArgs,
    output: OutputFile,
) -> Result<(i32, std::path::PathBuf, [libc::sigaction; 2]), RecordError> {
    let debuginfod_on =
        args.debuginfod || (!args.no_debuginfod && crate::symbolize::debuginfod_configured());
    let engine = Engine {
        sampling: args.capture.sampling(),
        frequency: args.frequency,
        tracing: args.capture.tracing(),
        role: Role::Record(RecordScope {
            all: args.all_cpus,
            pids: args.pids.clone(),
            command: !args.command.is_empty(),
            per_cpu: args.per_cpu || (args.all_cpus && !args.no_per_cpu),
            debuginfod: debuginfod_on,
            unwind_processes: args.unwind_processes,
        }),
    };
    let mut collector = engine.collector();
    let (mut session, sampling_for) = start(&engine, &mut collector, args.verbose)?;
    if std::env::var_os("SYSPROF_TIMING").is_some() {
        eprintln!(
            "sysprof: timing: loaded and attached: CPU {:.1} ms on this thread, {:.1} ms in all",
            crate::sys::clock::thread_cpu_ns() as f64 / 1e6,
            crate::sys::clock::process_cpu_ns() as f64 / 1e6
        );
    }
    let (mut child, command_pid) = spawn_command(&args, &output, &mut collector)?;
    // `-d` counts from the range's start.
    let deadline = args.duration.map(|d| {
        tokio::time::Instant::now() + Duration::from_secs_f64(d).saturating_sub(sampling_for)
    });
    let targets = if args.all_cpus {
        Vec::new()
    } else {
        args.pids.clone()
    };
    let until = until_stopped(deadline, child.as_mut(), targets)?;
    tokio::pin!(until);
    let show_status = !args.quiet && std::io::stderr().is_terminal();
    let session_start_ns = session.start_ns;
    let mut windows = Windows::new(&output, &session, args.frequency)?;
    let stop = loop {
        let ended = session
            .run_bounded(
                &mut collector,
                &mut until,
                args.window_records.max(1),
                show_status.then_some(Duration::from_millis(250)),
                |samples, lost| {
                    eprint!(
                        "\r\x1b[Ksysprof: recording {:.1} s, {samples} samples, {lost} lost",
                        (crate::sys::clock::monotonic_ns().saturating_sub(session_start_ns)) as f64
                            / 1e9
                    );
                },
            )
            .await?;
        if let Some(stop) = ended {
            break stop;
        }
        // The window is full: finished now (what ended after the cut is
        // carried into the next), the recording goes on.
        let end_ns = session.cut(&mut collector);
        windows.cut(&mut collector, end_ns);
    };
    let stopped = Instant::now();
    // Recording is over: from now on Ctrl-C or SIGTERM end sysprof at once
    // (nothing half-written stays behind), whatever it is doing.
    let tokio_signals = restore_default_signals();
    if show_status {
        eprint!("\r\x1b[K");
    }
    let timing = Timing::new();
    let end_ns = session.stop(&mut collector);
    timing.mark("drain and detach");
    let mut recording = windows.last(&mut collector, end_ns, &timing);
    recording.main_process_ended = matches!(stop, Stop::Command(_) | Stop::TargetsGone);
    if args.verbose {
        if windows.count > 1 {
            eprintln!(
                "sysprof: {} windows of at most {} records, merged",
                windows.count, args.window_records
            );
        }
        say_kernel_unwinding(&collector);
    }
    // The process the user named opens selected: the command, or a single -p.
    let focus = command_pid.or_else(|| (args.pids.len() == 1).then(|| args.pids[0]));
    let (path, is_file) = (output.path().to_path_buf(), output.is_file());
    let written = windows.finish(recording, output, focus, args.verbose, &timing)?;
    say_warnings(&written.recording, args.verbose, &written.host);
    print_summary(
        &written.recording,
        written.processes_and_threads,
        &path,
        is_file,
        written.bytes,
        stopped.elapsed(),
        &args,
    );
    if let Some(line) = missing_symbols_line(&written.missing_symbols, debuginfod_on) {
        eprintln!("sysprof: {line}");
    }
    timing.mark("summary");
    drop(written);
    timing.mark("drop written");
    drop(collector);
    timing.mark("drop collector");
    Ok((exit_status(&stop, &args), path, tokio_signals))
}

/// Load and attach everything the engine needs; returns the session and how
/// long sampling ran before the rest was attached. With `-v`, says so.
fn start(
    engine: &Engine,
    collector: &mut Collector,
    verbose: bool,
) -> Result<(CaptureSession, Duration), RecordError> {
    let attaching_ns = crate::sys::clock::monotonic_ns();
    let session = CaptureSession::start(&engine.capture(), collector)?;
    let started_ns = crate::sys::clock::monotonic_ns();
    if verbose {
        // From here on everything is seen: scripts (and the tests) that
        // start a workload beside `record -a` wait for this line.
        eprintln!(
            "sysprof: recording; sampling from {} ms, everything attached in {} ms",
            session.start_ns.saturating_sub(attaching_ns) / 1_000_000,
            started_ns.saturating_sub(attaching_ns) / 1_000_000
        );
        let loads: Vec<String> = session
            .load_times()
            .iter()
            .map(|(what, d)| format!("{what} {:.1}", d.as_secs_f64() * 1e3))
            .collect();
        eprintln!("sysprof: loaded (ms): {}", loads.join(", "));
    }
    // The range began when sampling did, before the tracer was attached.
    let sampling_for = Duration::from_nanos(started_ns.saturating_sub(session.start_ns));
    Ok((session, sampling_for))
}

/// Start the command to record, if one was given (its descendants are
/// followed unless everything is); returns it and its pid.
fn spawn_command(
    args: &RecordArgs,
    output: &OutputFile,
    collector: &mut Collector,
) -> Result<(Option<tokio::process::Child>, Option<u32>), RecordError> {
    if args.command.is_empty() {
        return Ok((None, None));
    }
    let mut command = tokio::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    if output.is_stdout() {
        // The profile owns stdout: the command's output goes to stderr
        // rather than into the JSON.
        if let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() {
            command.stdout(std::process::Stdio::from(stderr));
        }
    }
    // A Go program's first waits carry its goroutine only if its runtime's
    // entry is in the kernel before it runs: the command is held at its
    // exec while it is written (from the sideband it would come one drain
    // later, ~16 ms on a quiet machine, 24-32 beside a compiler loop).
    let before_exec = command_file(&args.command[0])
        .and_then(|(file, name)| collector.runtime_before_exec(&file, &name));
    let spawned = match before_exec {
        None => command.spawn(),
        Some(python) => spawn_held(command, |pid| {
            collector.prime_before_exec(pid, python);
        }),
    };
    let child = spawned.map_err(|source| RecordError::Spawn {
        command: args.command[0].clone(),
        source,
    })?;
    let pid = child.id();
    if !args.all_cpus {
        // The command and its descendants are what we record.
        collector.track(pid.unwrap_or(0));
    }
    Ok((Some(child), pid))
}

/// The file `program` names as its exec will find it: itself if it has a
/// slash, else the first executable regular file of that name in `PATH`
/// (an empty entry the current directory, no `PATH` glibc's default, as
/// `execvp`; unlike it, a file on a `noexec` mount is taken: its exec
/// fails, or finds the next, whose entry the first drain then writes);
/// opened without blocking (a FIFO) and with its file name.
fn command_file(program: &str) -> Option<(std::fs::File, String)> {
    let open = |path: &Path| {
        let file = crate::binaries::open_regular(path.to_str()?, true).ok()?;
        let executable = crate::sys::exec_gate::may_execute(path);
        let name = path.file_name()?.to_string_lossy().into_owned();
        executable.then_some((file, name))
    };
    if program.contains('/') {
        return open(Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    std::env::split_paths(&path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                std::path::PathBuf::from(".")
            } else {
                dir
            }
        })
        .find_map(|dir| open(&dir.join(program)))
}

/// Spawn `command` held between its fork and its exec while `before_exec`
/// runs with its pid (`sys::exec_gate`): the spawn, which returns only once
/// the exec has, runs on a thread of its own meanwhile. A gate that cannot
/// be made spawns it as usual.
fn spawn_held(
    mut command: tokio::process::Command,
    before_exec: impl FnOnce(u32),
) -> std::io::Result<tokio::process::Child> {
    let Ok(gate) = crate::sys::exec_gate::ExecGate::new() else {
        return command.spawn();
    };
    // SAFETY: the gate's child side makes only async-signal-safe calls.
    unsafe {
        command.pre_exec(gate.in_child());
    }
    let runtime = tokio::runtime::Handle::current();
    let spawn = move |mut command: tokio::process::Command| {
        let _in_runtime = runtime.enter();
        command.spawn()
    };
    gate.spawn_through(command, spawn, |pid| {
        if let Some(pid) = pid {
            before_exec(pid);
        }
    })
    .unwrap_or_else(|_| Err(std::io::Error::other("the command's spawner panicked")))
}

/// What ends the recording: the deadline, the command's end, the end of
/// every `-p` target (as perf does), SIGINT or SIGTERM; the first to come.
fn until_stopped(
    deadline: Option<tokio::time::Instant>,
    child: Option<&mut tokio::process::Child>,
    targets: Vec<u32>,
) -> Result<impl std::future::Future<Output = Stop> + '_, RecordError> {
    let mut sigint = signal(SignalKind::interrupt()).map_err(RecordError::Signals)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(RecordError::Signals)?;
    Ok(async move {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let child_exit = async {
            match child {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        let targets_gone = async {
            if targets.is_empty() {
                return std::future::pending().await;
            }
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                if targets.iter().all(|&p| !process_alive(p)) {
                    return;
                }
            }
        };
        tokio::select! {
            _ = until_deadline => Stop::Duration,
            status = child_exit => Stop::Command(status),
            _ = targets_gone => Stop::TargetsGone,
            _ = sigint.recv() => Stop::Signal,
            _ = sigterm.recv() => Stop::Signal,
        }
    })
}

/// With `-v`: the in-kernel unwinder's tables, and what it refused.
fn say_kernel_unwinding(collector: &Collector) {
    if let Some(k) = collector.kernel_table_stats() {
        eprintln!("sysprof: {}", crate::escape::escape(&k.line()));
        let refusals = collector.kernel_refusals();
        if !refusals.is_empty() {
            eprintln!(
                "sysprof: kernel unwinding refused: {}",
                crate::unwind::kernel::refusals_text(&refusals)
            );
        }
    }
}

/// The recording's warnings; other users' binaries' are counted (`-v`
/// lists them): on a shared machine they would bury the user's own.
fn say_warnings(recording: &crate::model::recording::Recording, verbose: bool, host: &HostInfo) {
    let (shown, others) = if verbose {
        (recording.warnings.iter().map(String::as_str).collect(), 0)
    } else {
        crate::profile::warnings::split(&recording.warnings, &host.viewers)
    };
    for w in shown {
        eprintln!("sysprof: warning: {}", crate::escape::warning(w));
    }
    if others > 0 {
        eprintln!("sysprof: {others} warnings about other users' binaries (-v lists them)");
    }
}

/// The one-line error for a profile that could not be written.
fn output_error(output: &OutputFile, source: std::io::Error) -> RecordError {
    RecordError::OutputNotWritable {
        path: output.path().to_path_buf(),
        source,
    }
}

/// sysprof's exit status after `stop`: the command's own when it ended (a
/// death by signal is said, and gives 128 + the signal, as shells do).
fn exit_status(stop: &Stop, args: &RecordArgs) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match stop {
        Stop::Command(Some(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(sig)) => {
                eprintln!(
                    "sysprof: {} was killed by signal {sig} ({})",
                    crate::escape::escape(&args.command[0]),
                    signal_name(sig)
                );
                128 + sig
            }
            _ => 0,
        },
        Stop::TargetsGone => {
            if !args.quiet {
                eprintln!("sysprof: stopped: every process given with -p exited");
            }
            0
        }
        _ => 0,
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// `SYSPROF_TIMING=1` prints how long each step after the stop takes, its
/// CPU (the thread that ran it, and the whole process: the gzip and
/// symbolizer threads work meanwhile) and the resident memory after it (now
/// and peak, from /proc/self/status); and the CPU spent loading and until
/// the stop. Measured by the process's own clocks, with no profiler
/// attached to it (perf's DWARF sampling of sysprof doubled its end).
struct Timing {
    on: bool,
    last: std::cell::Cell<Instant>,
    /// CPU times at the last mark: this thread's, the process's (ns).
    last_cpu: std::cell::Cell<(u64, u64)>,
}

impl Timing {
    fn new() -> Timing {
        let on = std::env::var_os("SYSPROF_TIMING").is_some();
        if on {
            eprintln!(
                "sysprof: timing: until the stop: CPU {:.1} ms on this thread, {:.1} ms in all",
                crate::sys::clock::thread_cpu_ns() as f64 / 1e6,
                crate::sys::clock::process_cpu_ns() as f64 / 1e6
            );
        }
        Timing {
            on,
            last: std::cell::Cell::new(Instant::now()),
            last_cpu: std::cell::Cell::new(Self::cpu_now()),
        }
    }

    fn cpu_now() -> (u64, u64) {
        (
            crate::sys::clock::thread_cpu_ns(),
            crate::sys::clock::process_cpu_ns(),
        )
    }

    fn mark(&self, what: &str) {
        if self.on {
            let status =
                crate::sys::kernel_text::read_to_string("/proc/self/status").unwrap_or_default();
            let mb = |key: &str| {
                let kb = status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
                kb.map(|kb| format!("{:.1}", kb / 1024.0))
                    .unwrap_or_else(|| "?".into())
            };
            let (thread, process) = Self::cpu_now();
            let (thread_was, process_was) = self.last_cpu.get();
            eprintln!(
                "sysprof: timing: {what}: {:.1} ms, CPU {:.1} ms on this thread, {:.1} ms in all, RSS {} MB (peak {} MB)",
                self.last.get().elapsed().as_secs_f64() * 1e3,
                thread.saturating_sub(thread_was) as f64 / 1e6,
                process.saturating_sub(process_was) as f64 / 1e6,
                mb("VmRSS:"),
                mb("VmHWM:")
            );
        }
        self.last_cpu.set(Self::cpu_now());
        self.last.set(Instant::now());
    }
}

/// Give SIGINT and SIGTERM back their default action; returns the actions
/// they had (tokio's handlers), for [`reinstate_signals`].
fn restore_default_signals() -> [libc::sigaction; 2] {
    let mut saved: [libc::sigaction; 2] = unsafe { std::mem::zeroed() };
    // SAFETY: valid signal numbers, a valid new action and places for the old ones.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGINT, &default, &mut saved[0]);
        libc::sigaction(libc::SIGTERM, &default, &mut saved[1]);
    }
    saved
}

/// Put back the actions [`restore_default_signals`] replaced: tokio
/// installs its handler once per process, so a later runtime (`--open`'s
/// server) would otherwise never see SIGINT or SIGTERM and die of them.
fn reinstate_signals(saved: &[libc::sigaction; 2]) {
    // SAFETY: actions read from the kernel for these very signals.
    unsafe {
        libc::sigaction(libc::SIGINT, &saved[0], std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &saved[1], std::ptr::null_mut());
    }
}

/// Whether process `pid` exists (and is not a zombie waiting for its parent).
fn process_alive(pid: u32) -> bool {
    match crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// Why a file is not a valid profile (`sysprof validate`).
#[derive(Debug, thiserror::Error)]
pub enum InvalidProfile {
    /// It cannot be read (its message names it).
    #[error(transparent)]
    Read(#[from] crate::profile::input::ReadError),
    /// It is not JSON.
    #[error("{} is not a JSON profile: {source}", path.display())]
    NotJson {
        /// The file.
        path: std::path::PathBuf,
        /// Where the parser stopped.
        #[source]
        source: serde_json::Error,
    },
    /// It is JSON, not in the processed profile format.
    #[error("{} is malformed: {}", path.display(), problems.join("; "))]
    Malformed {
        /// The file.
        path: std::path::PathBuf,
        /// Each problem found.
        problems: Vec<String>,
    },
}

/// Read and validate a profile file; returns its thread count. It is
/// checked as it is inflated and parsed, a thread at a time.
pub fn validate_file(path: &Path) -> Result<usize, InvalidProfile> {
    // Gzip inflated within a limit; a FIFO or device refused.
    let reader = crate::profile::input::open_profile(path)?;
    let watch = reader.watch();
    let mut validator = crate::profile::validate::Validator::default();
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let parsed = validator.read(&mut de).and_then(|()| de.end());
    if let Err(source) = parsed {
        return Err(match watch.error(&source) {
            Some(e) => InvalidProfile::Read(e),
            None => InvalidProfile::NotJson {
                path: path.to_path_buf(),
                source,
            },
        });
    }
    match validator.finish() {
        (threads, problems) if problems.is_empty() => Ok(threads),
        (_, problems) => Err(InvalidProfile::Malformed {
            path: path.to_path_buf(),
            problems,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> RecordArgs {
        let mut full = vec!["sysprof", "record"];
        full.extend(argv);
        match crate::cli::Cli::parse_from(full).command {
            crate::cli::Command::Record(a) => a,
            _ => unreachable!(),
        }
    }

    /// Check that durations and thresholds a Duration cannot hold, and
    /// nonsense combinations, are usage errors (exit 2), never panics.
    #[test]
    fn rejects_what_cannot_be_recorded() {
        for bad in [
            &["-a", "-d", "1e19"][..],
            &["-a", "-d", "inf"],
            &["-a", "-d", "0"],
            &["-a", "-d=-3"],
            &["-a", "--off-cpu-threshold", "1e300"],
            &[],
        ] {
            let e = check_args(&args(bad)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
            assert_eq!(e.to_string().lines().count(), 1);
        }
        assert!(check_args(&args(&["-a", "-d", "2.5"])).is_ok());
        let e = check_args(&args(&["-a", "--stack-size", "100"])).unwrap_err();
        assert_eq!(
            (e.exit_code(), e.to_string()),
            (
                2,
                format!(
                    "--stack-size 100: use a multiple of 512 between 512 and {}",
                    crate::bpf::abi::MAX_STACK_COPY
                )
            )
        );
    }
}
