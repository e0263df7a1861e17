//! `sysprof record`: runs the pipeline from arguments to profile file.
//!
//! In: [`RecordArgs`]. Out: the profile at `-o`, and one summary line. Order
//! matters: the output is created first (fail before recording), the
//! sideband opens before `/proc` is read (no gap for new processes), the
//! sampler attaches before the command starts (no missed first samples).
//! Ctrl-C, SIGTERM, `-d` and the end of the command all stop recording the
//! same way: drain what is buffered, detach, then finish and write.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};

use crate::bpf::{abi, Sampler, SamplerOptions, Tracer, TracerOptions};
use crate::cli::RecordArgs;
use crate::collector::{Collector, CollectorOptions, PidFilter};
use crate::error::RecordError;
use crate::profile::output::OutputFile;
use crate::profile::{build_profile, HostInfo};
use crate::sideband::counters::CounterPoller;
use crate::sideband::{proc_snapshot, Sideband};

/// How often the sideband rings are drained; each holds 512 KiB per CPU.
const SIDEBAND_POLL: Duration = Duration::from_millis(50);
/// How often the sample ring is drained without a wakeup from the kernel.
const SAMPLE_POLL: Duration = Duration::from_millis(20);
/// How often counters are read from /proc.
const COUNTER_POLL: Duration = Duration::from_millis(100);
/// Off-CPU intervals shorter than this are folded in the kernel (counted,
/// time summed, no stack): bounds the event rate on switch-heavy machines.
const OFF_CPU_EMIT_NS: u64 = 100_000;

/// Record as `args` says.
pub fn run(args: RecordArgs) -> Result<(), RecordError> {
    if !args.all_cpus && args.pids.is_empty() && args.command.is_empty() {
        return Err(RecordError::Usage(
            "say what to record: -a for the whole system, -p PID, or -- COMMAND".into(),
        ));
    }
    if !args.pids.is_empty() && !args.command.is_empty() {
        return Err(RecordError::Usage("use either -p or a command, not both".into()));
    }
    for &pid in &args.pids {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(RecordError::UnknownPid(pid));
        }
    }
    let dwarf = args.call_graph == "dwarf";
    if dwarf && (args.stack_size == 0 || args.stack_size as usize > abi::MAX_STACK_COPY || args.stack_size % 512 != 0) {
        return Err(RecordError::Usage(format!(
            "--stack-size {}: use a multiple of 512 between 512 and {}",
            args.stack_size,
            abi::MAX_STACK_COPY
        )));
    }
    if !(args.off_cpu_threshold_ms >= 0.0 && args.off_cpu_threshold_ms.is_finite()) {
        return Err(RecordError::Usage("--off-cpu-threshold must be a number of milliseconds >= 0".into()));
    }
    if let Some(d) = args.duration {
        if !(d > 0.0 && d.is_finite()) {
            return Err(RecordError::Usage(format!("-d {d}: the duration must be a positive number of seconds")));
        }
    }
    let output = OutputFile::create(&args.output)?;
    raise_fd_limit();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RecordError::Internal(format!("cannot start the event loop: {e}")))?;
    runtime.block_on(record(args, output))
}

/// CLOCK_MONOTONIC now, ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One (wall clock ms, monotonic ns) pair read together: monotonic is read
/// on both sides of the wall clock and averaged.
fn clock_anchor() -> (f64, u64) {
    let m1 = monotonic_ns();
    let wall = clock_ns(libc::CLOCK_REALTIME);
    let m2 = monotonic_ns();
    (wall as f64 / 1e6, m1 + (m2 - m1) / 2)
}

async fn record(args: RecordArgs, output: OutputFile) -> Result<(), RecordError> {
    let dwarf = args.call_graph == "dwarf";
    let cpus = crate::bpf::online_cpus()?;
    let mut sideband = Sideband::open(&cpus)?;

    // Only a single -p process can be filtered in the kernel; a command's
    // descendants are only known later, so those are filtered in the collector.
    let target_tgid = if args.pids.len() == 1 && !args.all_cpus { args.pids[0] } else { 0 };
    let filter = if args.all_cpus { PidFilter::All } else { PidFilter::Tree(args.pids.clone()) };
    let collector_options = CollectorOptions {
        marker_min_ns: (args.off_cpu_threshold_ms * 1e6) as u64,
        per_cpu: args.per_cpu,
        off_cpu: !args.no_off_cpu,
        debuginfod: args.debuginfod,
    };
    let mut collector = Collector::new(filter.clone());
    collector.set_options(collector_options);
    let snapshot_pids = if args.all_cpus { None } else { Some(args.pids.as_slice()) };
    if dwarf {
        collector.enable_dwarf_unwinding();
    }
    collector.handle_snapshot(proc_snapshot::snapshot(snapshot_pids));

    // A quarter second of samples from every CPU, at least 8 MiB.
    let stack_copy = if dwarf { args.stack_size } else { 0 };
    let record_bytes = (std::mem::size_of::<abi::SampleEvent>() as u64 + stack_copy as u64 + 8) * args.frequency;
    let ring_bytes = ((cpus.len() as u64 * record_bytes / 4).next_power_of_two()).clamp(8 << 20, 1 << 30) as u32;
    let opts = SamplerOptions { frequency: args.frequency, target_tgid, ring_bytes, wakeup_bytes: ring_bytes as u64 / 16, stack_copy };
    let (sampler, ring) = Sampler::start(&opts)?;
    let tracer = if args.no_off_cpu && args.no_io {
        None
    } else {
        let marker_ns = (args.off_cpu_threshold_ms * 1e6) as u64;
        Some(Tracer::start(&TracerOptions {
            target_tgid,
            off_cpu: !args.no_off_cpu,
            io: !args.no_io,
            off_cpu_min_ns: OFF_CPU_EMIT_NS.min(marker_ns),
            ring_bytes: ring_bytes / 2,
            stack_copy,
        })?)
    };
    let (tracer, events) = match tracer {
        Some((t, r)) => (Some(t), Some(r)),
        None => (None, None),
    };
    let mut counters = CounterPoller::new(&cpus);
    // A baseline before anything runs, so even a short command gets deltas.
    counters.poll(monotonic_ns(), std::iter::empty());
    let (start_wall_ms, start_ns) = clock_anchor();
    let started = Instant::now();

    let mut child = None;
    if !args.command.is_empty() {
        let c = tokio::process::Command::new(&args.command[0])
            .args(&args.command[1..])
            .spawn()
            .map_err(|source| RecordError::Spawn { command: args.command[0].clone(), source })?;
        if !args.all_cpus {
            // The command and its descendants are what we record.
            collector = Collector::new(PidFilter::Tree(vec![c.id().unwrap_or(0)]));
            collector.set_options(collector_options);
            if dwarf {
                collector.enable_dwarf_unwinding();
            }
        }
        child = Some(c);
    }

    // SAFETY: the RingBuf owns its map fd, which stays open for as long as
    // the AsyncFd holds the RingBuf.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| e.into_parts().1)
        .map_err(|e| RecordError::Internal(format!("cannot poll the sample ring buffer: {e}")))?;
    // SAFETY: as for the sample ring.
    let mut events = match events {
        Some(r) => Some(unsafe { AsyncFd::register(r) }.map_err(|e| e.into_parts().1).map_err(|e| {
            RecordError::Internal(format!("cannot poll the events ring buffer: {e}"))
        })?),
        None => None,
    };
    let mut counter_tick = tokio::time::interval(COUNTER_POLL);
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| RecordError::Internal(e.to_string()))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| RecordError::Internal(e.to_string()))?;
    let mut side_tick = tokio::time::interval(SIDEBAND_POLL);
    let mut sample_tick = tokio::time::interval(SAMPLE_POLL);
    let mut status_tick = tokio::time::interval(Duration::from_millis(250));
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + Duration::from_secs_f64(d));
    let show_status = !args.quiet && std::io::stderr().is_terminal();
    let mut decode_errors = 0u64;
    let mut child_status = None;

    loop {
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
        let events_ready = async {
            match events.as_mut() {
                Some(e) => Some(e.readable_mut().await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(guard) = events_ready => {
                let mut guard = guard.map_err(|e| RecordError::Internal(format!("events ring: {e}")))?;
                sideband.drain(&mut |e| collector.handle_sideband(e));
                drain_events(guard.get_inner_mut(), &mut collector, &mut decode_errors);
                guard.clear_ready();
            }
            _ = counter_tick.tick() => counters.poll(monotonic_ns(), collector.take_recent_pids()),
            guard = ring.readable_mut() => {
                let mut guard = guard.map_err(|e| RecordError::Internal(format!("sample ring: {e}")))?;
                // Mappings first: a sample is unwound with what its process had mapped.
                sideband.drain(&mut |e| collector.handle_sideband(e));
                drain_samples(guard.get_inner_mut(), &mut collector, &mut decode_errors);
                guard.clear_ready();
            }
            _ = sample_tick.tick() => {
                sideband.drain(&mut |e| collector.handle_sideband(e));
                drain_samples(ring.get_mut(), &mut collector, &mut decode_errors);
                if let Some(e) = events.as_mut() {
                    drain_events(e.get_mut(), &mut collector, &mut decode_errors);
                }
            }
            _ = side_tick.tick() => sideband.drain(&mut |e| collector.handle_sideband(e)),
            _ = status_tick.tick(), if show_status => {
                eprint!("\r\x1b[Ksysprof: recording {:.1} s, {} samples, {} lost",
                    started.elapsed().as_secs_f64(), collector.sample_count(), sampler.drops().ring_full);
            }
            _ = until_deadline => break,
            status = child_exit => { child_status = status; break; }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        }
    }
    let end_ns = monotonic_ns();
    let stopped = Instant::now();
    if show_status {
        eprint!("\r\x1b[K");
    }

    // SYSPROF_TIMING=1 prints how long each step after the stop takes, and
    // the resident memory after it (now and peak, from /proc/self/status).
    let timing = std::env::var_os("SYSPROF_TIMING").is_some();
    let mut mark = {
        let mut last = Instant::now();
        move |what: &str| {
            if timing {
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                let mb = |key: &str| {
                    let kb = status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
                    kb.map(|kb| format!("{:.1}", kb / 1024.0)).unwrap_or_else(|| "?".into())
                };
                eprintln!(
                    "sysprof: timing: {what}: {:.1} ms, RSS {} MB (peak {} MB)",
                    last.elapsed().as_secs_f64() * 1e3,
                    mb("VmRSS:"),
                    mb("VmHWM:")
                );
            }
            last = Instant::now();
        }
    };
    // Drain what is buffered, then detach before the slow part.
    sideband.drain(&mut |e| collector.handle_sideband(e));
    drain_samples(ring.get_mut(), &mut collector, &mut decode_errors);
    if let Some(e) = events.as_mut() {
        drain_events(e.get_mut(), &mut collector, &mut decode_errors);
    }
    sideband.drain(&mut |e| collector.handle_sideband(e));
    counters.poll(monotonic_ns(), collector.take_recent_pids());
    let drops = sampler.drops();
    drop(ring);
    drop(sampler);
    mark("drain and detach the sampler");
    if let Some(tracer) = tracer {
        // Intervals still open at the stop end there, so off-CPU time adds up.
        let states = tracer.thread_states();
        for (tid, st) in &states {
            // A dead task's last switch-out (state "other") never ends.
            if st.off_ts == 0 || st.off_ts >= end_ns || st.off_state == abi::OFFCPU_OTHER {
                continue;
            }
            collector.handle_offcpu(&abi::OffCpuEvent {
                kind: abi::RECORD_OFFCPU,
                state: st.off_state,
                start_ns: st.off_ts,
                end_ns,
                wake_ns: 0,
                short_ns: 0,
                pid: st.pid,
                tid: *tid,
                cpu_out: st.off_cpu,
                cpu_in: st.off_cpu,
                waker_pid: 0,
                waker_tid: 0,
                kstack_id: st.kstack_id,
                ustack_id: st.ustack_id,
                waker_kstack_id: -1,
                waker_ustack_id: -1,
                short_count: 0,
                _pad: 0,
                comm: [0; abi::TASK_COMM_LEN],
                waker_comm: [0; abi::TASK_COMM_LEN],
            });
        }
        let stacks = collector.stack_ids().into_iter().filter_map(|id| Some((id, tracer.stack(id)?))).collect();
        collector.handle_stacks(stacks);
        collector.handle_thread_states(states);
        let d = tracer.drops();
        collector.handle_tracer_losses(d.events_full, d.stack_ids, d.state_full);
        mark("read the tracer's maps");
        // Detaching tracepoints waits for RCU grace periods (tens of ms
        // each): let that happen beside the rest of the work.
        std::thread::spawn(move || drop(tracer));
    }
    drop(events);
    mark("drop the events ring");
    let notes = std::mem::take(&mut counters.notes);
    collector.handle_counters(counters.finish());
    for n in notes {
        collector.note(n);
    }
    collector.handle_losses(drops.ring_full, sideband.lost, sideband.malformed + decode_errors);
    if let (Some(c), None) = (child.as_mut(), child_status) {
        // Stopped by a signal or -d while the command still runs: leave it be,
        // as perf does, but do not wait for it.
        let _ = c.id();
    }

    let interval_ms = 1000.0 / args.frequency as f64;
    let recording = collector.finish(start_ns, start_wall_ms, end_ns, interval_ms);
    mark("replay, resolve and symbolicate");
    let host = HostInfo::current(std::env::args().collect::<Vec<_>>().join(" "));
    let profile = build_profile(&recording, &host);
    mark("build the profile");
    let path = output.path().to_path_buf();
    let bytes = output.commit(&profile)?;
    mark("write the profile");
    let write_time = stopped.elapsed();

    for w in &recording.warnings {
        eprintln!("sysprof: warning: {w}");
    }
    let stats = recording.stats;
    let threads: usize = recording.processes.iter().map(|p| p.threads.len()).sum();
    let seconds = (end_ns - start_ns) as f64 / 1e9;
    let mut lost = format!("{} lost", stats.lost_samples);
    if stats.kernel_stack_failures + stats.user_stack_failures > 0 {
        lost += &format!(
            ", {} without kernel stack, {} without user stack",
            stats.kernel_stack_failures, stats.user_stack_failures
        );
    }
    if !args.no_off_cpu {
        lost += &format!("; {} off-CPU intervals (+{} short folded)", stats.off_cpu_intervals, stats.off_cpu_folded);
    }
    if !args.no_io {
        lost += &format!(", {} I/O requests", stats.io_requests);
    }
    if stats.lost_events + stats.lost_stacks + stats.lost_state > 0 {
        lost += &format!(
            ", {} scheduler/I/O records lost, {} stacks lost, {} untracked for full maps",
            stats.lost_events, stats.lost_stacks, stats.lost_state
        );
    }
    let u = stats.unwind;
    if u.unwinds > 0 {
        lost += &format!(
            "; {} user stacks unwound ({:.0}% to the thread root, {} cut by --stack-size, {} for lack of unwind info; {:.0} unwinds/s)",
            u.unwinds,
            u.reached_root as f64 * 100.0 / u.unwinds as f64,
            u.copy_exhausted,
            u.no_unwind_info,
            u.unwinds as f64 / (u.unwind_ns.max(1) as f64 / 1e9)
        );
    }
    if stats.lost_sideband + stats.malformed > 0 {
        lost += &format!(", {} sideband records lost, {} malformed", stats.lost_sideband, stats.malformed);
    }
    eprintln!(
        "sysprof: {seconds:.2} s, {} samples ({lost}), {} processes, {threads} threads; wrote {} ({}) {:.2} s after stop; \
         open it at https://profiler.firefox.com (Load a profile from file)",
        stats.samples_kept,
        recording.processes.len(),
        path.display(),
        human_bytes(bytes),
        write_time.as_secs_f64(),
    );
    Ok(())
}

fn drain_samples(ring: &mut aya::maps::RingBuf<aya::maps::MapData>, collector: &mut Collector, errors: &mut u64) {
    while let Some(item) = ring.next() {
        match abi::decode_sample(&item) {
            Ok(s) => collector.handle_sample(&s),
            Err(_) => *errors += 1,
        }
    }
}

fn drain_events(ring: &mut aya::maps::RingBuf<aya::maps::MapData>, collector: &mut Collector, errors: &mut u64) {
    while let Some(item) = ring.next() {
        match abi::decode_event(&item) {
            Ok(abi::EventRecord::OffCpu(e)) => collector.handle_offcpu(e),
            Ok(abi::EventRecord::Io(e)) => collector.handle_io(e),
            Ok(abi::EventRecord::UserStack(e, stack)) => collector.handle_user_stack(e, stack),
            Err(_) => *errors += 1,
        }
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// Raise the open-file limit to its maximum: every mapped binary is kept open.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid pointers to a local rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Read and validate a profile file; returns its thread count.
pub fn validate_file(path: &Path) -> Result<usize, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let json: serde_json::Value = if bytes.starts_with(&[0x1f, 0x8b]) {
        serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..]))
    } else {
        serde_json::from_slice(&bytes)
    }
    .map_err(|e| format!("{} is not a JSON profile: {e}", path.display()))?;
    let problems = crate::profile::validate::validate(&json);
    if problems.is_empty() {
        Ok(json["threads"].as_array().map(|t| t.len()).unwrap_or(0))
    } else {
        Err(format!("{} is malformed: {}", path.display(), problems.join("; ")))
    }
}
