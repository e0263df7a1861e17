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

use crate::bpf::abi;
use crate::capture::{CaptureOptions, CaptureSession};
use crate::cli::RecordArgs;
use crate::collector::{Collector, CollectorOptions, PidFilter, WindowRange};
use crate::error::RecordError;
use crate::model::merge::Merger;
use crate::model::recording::Recording;
use crate::profile::output::OutputFile;
use crate::profile::spill::Spill;
use crate::profile::{HostInfo, ProfileWriter};
use crate::sampling::{BadFlag, CallGraph};
use std::os::fd::AsFd;

/// Off-CPU intervals shorter than this are folded in the kernel (summed per
/// reason, no stack): bounds the event rate on switch-heavy machines.
const OFF_CPU_EMIT_NS: u64 = 100_000;

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
    args.sampling()
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
    crate::sys::process::configure_malloc();
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
    let sampling = args.sampling();
    // Only a single -p process can be filtered in the kernel; a command's
    // descendants are only known later, so those are filtered in the collector.
    let target_tgid = if args.pids.len() == 1 && !args.all_cpus {
        args.pids[0]
    } else {
        0
    };
    let filter = if args.all_cpus {
        PidFilter::All
    } else {
        PidFilter::Tree(args.pids.clone())
    };
    let marker_min_ns = sampling.off_cpu_threshold_ns();
    let debuginfod_on =
        args.debuginfod || (!args.no_debuginfod && crate::symbolize::debuginfod_configured());
    let mut collector = Collector::new(
        filter,
        CollectorOptions {
            marker_min_ns,
            per_cpu: args.per_cpu || (args.all_cpus && !args.no_per_cpu),
            off_cpu: !args.no_off_cpu,
            debuginfod: debuginfod_on,
            dwarf: sampling.call_graph.dwarf(),
            keep_short_lived: false,
            elf_limits: Default::default(),
            jvm_attach: !args.no_jvm_attach,
            table_workers: 2,
        },
    );
    let capture = CaptureOptions {
        // A command's range starts with it (it runs once everything is loaded).
        sample_first: args.command.is_empty(),
        frequency: args.frequency,
        target_tgid,
        stack_copy: sampling.stack_copy(),
        kernel_unwind_rows: sampling.kernel_unwind_rows(),
        kernel_unwind_processes: args
            .unwind_processes
            .clamp(16, crate::unwind::kernel::DEFAULT_PROCESS_ENTRIES * 4),
        off_cpu: !args.no_off_cpu,
        io: !args.no_io,
        off_cpu_min_ns: OFF_CPU_EMIT_NS.min(marker_min_ns),
        snapshot_all: args.all_cpus,
        target_pids: args.pids.clone(),
        polling: crate::capture::Polling::RECORD,
    };
    let attaching_ns = crate::sys::clock::monotonic_ns();
    let mut session = CaptureSession::start(&capture, &mut collector)?;
    let started_ns = crate::sys::clock::monotonic_ns();
    // The range began when sampling did, before the tracer was attached.
    let sampling_for = Duration::from_nanos(started_ns.saturating_sub(session.start_ns));
    let session_start_ns = session.start_ns;
    if args.verbose {
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

    let mut child = None;
    let mut command_pid = None;
    if !args.command.is_empty() {
        let mut command = tokio::process::Command::new(&args.command[0]);
        command.args(&args.command[1..]);
        if output.is_stdout() {
            // The profile owns stdout: the command's output goes to stderr
            // rather than into the JSON.
            if let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() {
                command.stdout(std::process::Stdio::from(stderr));
            }
        }
        let c = command.spawn().map_err(|source| RecordError::Spawn {
            command: args.command[0].clone(),
            source,
        })?;
        command_pid = c.id();
        if !args.all_cpus {
            // The command and its descendants are what we record.
            collector.track(command_pid.unwrap_or(0));
        }
        child = Some(c);
    }

    let mut sigint = signal(SignalKind::interrupt()).map_err(RecordError::Signals)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(RecordError::Signals)?;
    // `-d` counts from the range's start.
    let deadline = args.duration.map(|d| {
        tokio::time::Instant::now() + Duration::from_secs_f64(d).saturating_sub(sampling_for)
    });
    let targets = if args.all_cpus {
        Vec::new()
    } else {
        args.pids.clone()
    };
    let until = async {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let child_exit = async {
            match child.as_mut() {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        // -p: stop when every target is gone, as perf does.
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
    };
    let show_status = !args.quiet && std::io::stderr().is_terminal();
    let interval_ms = 1000.0 / args.frequency as f64;
    let (start_ns, start_wall_ms) = (session.start_ns, session.start_wall_ms);
    let wall_of = |ns: u64| start_wall_ms + (ns - start_ns) as f64 / 1e6;
    tokio::pin!(until);
    // Windows are merged as they finish; processes that ended a window
    // earlier are written into the output then and forgotten.
    let mut merger: Option<Merger> = None;
    // Records of what still runs wait on disk for their thread's writing.
    let mut spill: Option<Spill> = None;
    let mut spill_errors: Vec<String> = Vec::new();
    let spill_dir = match output.path().parent() {
        Some(d) if output.is_file() => {
            if d.as_os_str().is_empty() {
                Path::new(".").to_path_buf()
            } else {
                d.to_path_buf()
            }
        }
        _ => std::env::temp_dir(),
    };
    let mut missing_symbols = crate::summary::MissingSymbols::default();
    let mut writer = ProfileWriter::new(output.stream()?).map_err(|e| output_error(&output, e))?;
    let mut write_failed = None;
    let mut previous_cut_ns = start_ns;
    let mut window_count = 1;
    let mut window_start_ns = start_ns;
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
        let range = WindowRange {
            start_ns: window_start_ns,
            end_ns,
            start_wall_ms: wall_of(window_start_ns),
            interval_ms,
            continuous: true,
        };
        let merged = merger.get_or_insert_with(Merger::default);
        // Seconds of work beside a fork storm: the rings' reader keeps
        // them drained meanwhile (see `capture`).
        let window = collector.finish_window(range);
        missing_symbols.add(&window);
        merged.add(window);
        // What ended before the previous cut has nothing more to come: a
        // record drained late is still in the window of its time.
        if write_failed.is_none() {
            let (mut processes, counters) = merged.take_ended(previous_cut_ns);
            if let Some(spill) = spill.as_mut() {
                restore_parts(spill, &mut processes, &mut spill_errors);
            }
            if let Err(e) = writer.write_ended(merged.tables(), &processes, &counters) {
                // The end will fail on the same file: said there, once.
                write_failed = Some(e);
            }
        }
        let spill = spill.get_or_insert_with(|| Spill::new(&spill_dir));
        for (owner, part) in merged.take_parts(SPILL_MIN_RECORDS) {
            spill.put(owner, &part);
        }
        // What the window's raw records took goes back to the kernel.
        crate::sys::process::release_freed_memory();
        window_count += 1;
        previous_cut_ns = end_ns;
        window_start_ns = end_ns;
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
    let range = WindowRange {
        start_ns: window_start_ns,
        end_ns,
        start_wall_ms: wall_of(window_start_ns),
        interval_ms,
        continuous: false,
    };
    let last = collector.finish_window(range);
    missing_symbols.add(&last);
    timing.mark("replay, resolve and symbolicate");
    let mut recording = match merger {
        None => last,
        Some(mut m) => {
            m.add(last);
            m.finish()
        }
    };
    timing.mark("merge the windows");
    if args.verbose && window_count > 1 {
        eprintln!(
            "sysprof: {window_count} windows of at most {} records, merged",
            args.window_records
        );
    }
    if args.verbose {
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
    let host = HostInfo::current(std::env::args().collect::<Vec<_>>().join(" "));
    // The process the user named opens selected: the command, or a single -p.
    let focus = command_pid.or_else(|| (args.pids.len() == 1).then(|| args.pids[0]));
    let path = output.path().to_path_buf();
    let is_file = output.is_file();
    let (written_processes, written_threads) = writer.written();
    if let Some(spill) = &spill {
        recording.warnings.extend(spill.fallback.clone());
        if args.verbose {
            let (records, markers, bytes) = spill.totals();
            eprintln!(
                "sysprof: {records} records of running threads kept on disk until written ({markers} markers of them; {:.1} MB)",
                bytes as f64 / 1e6
            );
        }
    }
    recording.warnings.extend(spill_errors);
    let stream = match write_failed {
        Some(e) => Err(e),
        None => writer.finish(&recording, spill.as_ref(), &host, focus),
    };
    let stream = stream.map_err(|e| output_error(&output, e))?;
    timing.mark("write what is still running, meta and libs");
    let bytes = output.commit_stream(stream)?;
    timing.mark("finish the compression, sync and rename");

    // Other users' binaries' warnings are counted (-v lists them): on a
    // shared machine they would bury the user's own.
    let (shown, others) = if args.verbose {
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
    print_summary(
        &recording,
        (written_processes, written_threads),
        &path,
        is_file,
        bytes,
        stopped.elapsed(),
        &args,
    );
    if let Some(line) = missing_symbols_line(&missing_symbols, debuginfod_on) {
        eprintln!("sysprof: {line}");
    }
    Ok((exit_status(&stop, &args), path, tokio_signals))
}

/// A thread or CPU track with fewer records (samples, off-CPU samples,
/// markers) than this keeps them in memory between windows: a chunk of its
/// own on disk would cost more than it saves.
const SPILL_MIN_RECORDS: usize = 64;

/// Put back into `processes` (ended, about to be written) the records their
/// threads had spilled; a spill that cannot be read back is said in `errors`.
fn restore_parts(
    spill: &mut Spill,
    processes: &mut [crate::model::recording::ProcessRecord],
    errors: &mut Vec<String>,
) {
    use crate::model::merge::TrackKey;
    for p in processes {
        for t in &mut p.threads {
            let owner = TrackKey::of(p.pid, p.start_ns, t);
            if let Err(e) = spill.restore_into(owner, t) {
                errors.push(format!(
                    "samples and markers of {} (pid {}, tid {}) before the last window were lost: their file could not be read back ({e})",
                    t.name, p.pid, t.tid
                ));
            }
        }
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

/// The summary: one line with what was recorded and where it went; a second
/// only when something was lost, saying what and what helps; with `-v`, every
/// total as `key=value` (what scripts and the benchmarks read).
///
/// `written` counts the processes and threads written out during the
/// recording (no longer in `rec`).
fn print_summary(
    rec: &Recording,
    written: (usize, usize),
    path: &Path,
    is_file: bool,
    bytes: u64,
    write_time: Duration,
    args: &RecordArgs,
) {
    let st = &rec.stats;
    let threads: usize = written.1 + rec.processes.iter().map(|p| p.threads.len()).sum::<usize>();
    let shown = if path.as_os_str() == "-" {
        "stdout".to_string()
    } else {
        crate::escape::path(path)
    };
    eprintln!(
        "sysprof: {:.2} s, {} samples, {} processes, {threads} threads; wrote {shown} ({}) in {:.2} s{}",
        (rec.end_ns - rec.start_ns) as f64 / 1e9,
        st.samples_kept,
        written.0 + rec.processes.len(),
        crate::units::human_bytes(bytes),
        write_time.as_secs_f64(),
        if is_file { crate::escape::open_hint(path) } else { String::new() },
    );
    let lost = crate::summary::lost_parts(st, true);
    let mut said = Vec::new();
    if !lost.is_empty() {
        said.push(format!("lost {}", lost.join(", ")));
    }
    // Not a ring's loss, but requests the profile cannot show: say so, or a
    // run whose completions the kernel did not trace "lost nothing".
    if st.io_untracked > 0 {
        said.push(format!(
            "{} block I/O requests seen at one end only (begun before the recording, in flight at its end, or completed where tracing cannot see): no marker",
            st.io_untracked
        ));
    }
    // Stacks cut by the copy's end: a few are normal (deep recursion); past
    // one in a hundred the picture is missing its callers.
    let u = st.unwind;
    let cut = u.copy_exhausted - u.copy_exhausted_in_profiler;
    if args.call_graph == CallGraph::DwarfCopy
        && cut * 100 > u.unwinds
        && args.stack_size as usize != abi::MAX_STACK_COPY
    {
        said.push(format!(
            "{cut} of {} user stacks cut at the {}-byte copy (--stack-size {} reaches deeper)",
            u.unwinds,
            args.stack_size,
            abi::MAX_STACK_COPY
        ));
    }
    if !said.is_empty() {
        eprintln!("sysprof: {}", said.join("; "));
    }
    if args.verbose {
        eprintln!("sysprof: {}", crate::summary::stats_line(rec));
    }
}

/// What the summary says of code without names, when at least 1 % of the
/// user samples ran in it: the binaries (at least 0.5 % each, three at
/// most) and how to get their names here (debuginfod, the distribution's
/// debug packages). None when there is nothing worth saying.
fn missing_symbols_line(m: &crate::summary::MissingSymbols, debuginfod_on: bool) -> Option<String> {
    let all: u64 = m.by_binary.values().sum();
    if m.user_samples == 0 || all * 100 < m.user_samples {
        return None;
    }
    let worst = m.worst(0.5);
    let shown: Vec<String> = worst
        .iter()
        .take(3)
        .map(|(path, _, pct)| format!("{} ({pct:.1}%)", crate::escape::escape(path)))
        .collect();
    let paths: Vec<&str> = worst
        .iter()
        .take(3)
        .map(|(path, _, _)| path.as_str())
        .collect();
    let owners = debian_packages_of(&paths);
    let packages: Vec<String> = paths
        .iter()
        .filter_map(|path| owners.get(*path))
        .map(|p| format!("{p}-dbgsym"))
        .fold(Vec::new(), |mut v: Vec<String>, p| {
            // Two binaries of one package: the package once.
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    let mut how = Vec::new();
    if debuginfod_on {
        how.push("debuginfod (DEBUGINFOD_URLS) gave none for them".to_string());
    } else {
        how.push(format!(
            "set DEBUGINFOD_URLS={} and sysprof fetches their debug files",
            debuginfod_server_hint()
        ));
    }
    if !packages.is_empty() {
        how.push(format!(
            "or install {} (Debian's debian-debug archive)",
            crate::escape::escape(&packages.join(" "))
        ));
    }
    Some(format!(
        "{:.1}% of user samples ran in code without symbols: {}; {}",
        all as f64 * 100.0 / m.user_samples as f64,
        shown.join(", "),
        how.join(", ")
    ))
}

/// Where dpkg keeps each installed package's file list (`NAME[:ARCH].list`).
const DPKG_INFO_DIR: &str = "/var/lib/dpkg/info";

/// A file list larger than this is not read (the largest on a desktop is
/// a few MB; the directory is root's, the bound is against a broken one).
const DPKG_LIST_MAX_BYTES: u64 = 64 << 20;

/// The packages holding `paths`, from dpkg's file lists, where dpkg is the
/// package manager; a merged /usr's file is also looked for where the
/// package put it (`/usr/bin/gzip` is `/bin/gzip` to dpkg). Returns path →
/// package for those one package holds.
///
/// Read here rather than through `dpkg-query -S`: that parses dpkg's
/// status database and every list for each call, 134 ms of CPU against
/// ~20 ms here (8.3 MB of lists on this VM), and it ran at the end of every
/// recording with unsymbolized samples (5 % of a 10-s `record -a`'s CPU
/// beside pgbench). Diversions are not followed: a diverted binary's
/// package is its list's.
fn debian_packages_of(paths: &[&str]) -> std::collections::HashMap<String, String> {
    let mut owners = std::collections::HashMap::new();
    if paths.is_empty() {
        return owners;
    }
    let Ok(dir) = std::fs::read_dir(DPKG_INFO_DIR) else {
        return owners;
    };
    // path asked → the packages found holding it (two: shared, none named).
    let mut found: std::collections::HashMap<&str, Vec<String>> = Default::default();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(package) = name.to_str().and_then(dpkg_list_package) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || meta.len() > DPKG_LIST_MAX_BYTES {
            continue;
        }
        let Ok(list) = std::fs::read(entry.path()) else {
            continue;
        };
        for path in listed(&list, paths) {
            let holders = found.entry(path).or_default();
            if !holders.iter().any(|h| h == package) {
                holders.push(package.to_string());
            }
        }
    }
    for (path, mut holders) in found {
        if holders.len() == 1 {
            owners.insert(path.to_string(), holders.pop().unwrap_or_default());
        }
    }
    owners
}

/// The package a dpkg file list's name names: "libc6:amd64.list" → "libc6";
/// None for dpkg's other files (`.md5sums`, `.postinst`, …).
fn dpkg_list_package(file_name: &str) -> Option<&str> {
    let stem = file_name.strip_suffix(".list")?;
    let package = stem.split(':').next()?;
    (!package.is_empty()).then_some(package)
}

/// The `paths` a dpkg file list (one path a line) holds, each as asked: a
/// line equal to the path, or to the path without a merged /usr's `/usr`.
fn listed<'p>(list: &[u8], paths: &[&'p str]) -> Vec<&'p str> {
    let mut held = Vec::new();
    for line in list.split(|&b| b == b'\n') {
        for &path in paths {
            let bytes = path.as_bytes();
            if (line == bytes || bytes.strip_prefix(b"/usr") == Some(line)) && !held.contains(&path)
            {
                held.push(path);
            }
        }
    }
    held
}

/// The distribution's debuginfod server (from /etc/os-release), else a
/// placeholder the user fills in.
fn debuginfod_server_hint() -> &'static str {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let id = release
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .unwrap_or("")
        .trim_matches('"');
    match id {
        "debian" => "https://debuginfod.debian.net",
        "ubuntu" => "https://debuginfod.ubuntu.com",
        "fedora" => "https://debuginfod.fedoraproject.org",
        "arch" => "https://debuginfod.archlinux.org",
        _ => "<your distribution's debuginfod server>",
    }
}

/// `SYSPROF_TIMING=1` prints how long each step after the stop takes, and
/// the resident memory after it (now and peak, from /proc/self/status).
struct Timing {
    on: bool,
    last: std::cell::Cell<Instant>,
}

impl Timing {
    fn new() -> Timing {
        Timing {
            on: std::env::var_os("SYSPROF_TIMING").is_some(),
            last: std::cell::Cell::new(Instant::now()),
        }
    }

    fn mark(&self, what: &str) {
        if self.on {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let mb = |key: &str| {
                let kb = status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
                kb.map(|kb| format!("{:.1}", kb / 1024.0))
                    .unwrap_or_else(|| "?".into())
            };
            eprintln!(
                "sysprof: timing: {what}: {:.1} ms, RSS {} MB (peak {} MB)",
                self.last.get().elapsed().as_secs_f64() * 1e3,
                mb("VmRSS:"),
                mb("VmHWM:")
            );
        }
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
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
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

    /// Check that a dpkg file list's name gives its package (arch cut),
    /// that dpkg's other files give none, and that a list holds a path as
    /// written or under a merged /usr, never a longer or shorter one.
    #[test]
    fn reads_dpkg_file_lists() {
        assert_eq!(
            dpkg_list_package("python3.11-minimal.list"),
            Some("python3.11-minimal")
        );
        assert_eq!(dpkg_list_package("libc6:amd64.list"), Some("libc6"));
        assert_eq!(dpkg_list_package("libc6:amd64.md5sums"), None);
        assert_eq!(dpkg_list_package(".list"), None);
        let list =
            b"/.\n/bin\n/bin/gzip\n/usr/lib/x86_64-linux-gnu/libz.so.1.2.13\n/usr/bin/gzipx\n";
        let asked = [
            "/usr/bin/gzip",
            "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
            "/usr/bin/gzi",
            "/bin",
        ];
        assert_eq!(
            listed(list, &asked),
            vec![
                "/bin",
                "/usr/bin/gzip",
                "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
            ]
        );
        assert!(listed(b"", &asked).is_empty());
    }

    /// Check the lists' answer against `dpkg-query -S` (the oracle) for a
    /// binary and a library every Debian has, through a merged /usr.
    #[test]
    fn dpkg_lists_name_the_package_dpkg_query_names() {
        if !std::path::Path::new(DPKG_INFO_DIR).is_dir() {
            eprintln!("SKIPPED: no {DPKG_INFO_DIR} (not a dpkg system)");
            return;
        }
        let paths = ["/usr/bin/gzip", "/usr/lib/x86_64-linux-gnu/libc.so.6"];
        let ours = debian_packages_of(&paths);
        let mut checked = 0;
        for path in paths {
            if !std::path::Path::new(path).exists() {
                eprintln!("not checked: no {path} here");
                continue;
            }
            // dpkg lists a merged /usr's file where the package put it.
            let out = std::process::Command::new("dpkg-query")
                .args(["-S", path, path.strip_prefix("/usr").unwrap_or(path)])
                .output()
                .expect("dpkg-query runs where dpkg's lists are");
            let text = String::from_utf8_lossy(&out.stdout);
            let oracle = text
                .lines()
                .next()
                .and_then(|l| l.split(':').next())
                .unwrap_or_default()
                .trim();
            assert!(!oracle.is_empty(), "dpkg-query -S {path}: {text}");
            assert_eq!(ours.get(path).map(String::as_str), Some(oracle), "{path}");
            checked += 1;
        }
        assert!(checked > 0, "neither {paths:?} is here to check");
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
                    abi::MAX_STACK_COPY
                )
            )
        );
    }
}
