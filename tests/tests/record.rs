//! Integration tests of `sysprof record`: real kernel, real BPF, as root,
//! one at a time (`--test-threads=1`: they share the machine's CPUs and
//! kernel state). Each checks the profile against an oracle the profiler
//! does not produce, and every profile goes through the structural validator.

use std::process::{Command, Stdio};
use std::time::Duration;

use sysprof_tests::*;

fn names(stack: &[(String, String)]) -> Vec<&str> {
    stack.iter().map(|(n, _)| n.as_str()).collect()
}

/// Check that a 3:1 split of thread CPU time between two functions shows up
/// as a 3:1 split of samples (±10%), in the named thread with the right pid
/// and tid, with the caller directly above each hot function; and that the
/// thread's summed threadCPUDelta matches its own CPU clock (within a few sampling periods).
#[test]
fn cpu_split_between_functions_matches_the_workload() {
    if !can_record("cpu_split_between_functions_matches_the_workload") {
        return;
    }
    let dir = scratch("split");
    let exe = build_c("split", &dir.join("split"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "2.0"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("the workload printed its pid");
    let cpu_ns = field(&out.stdout, "cpu_ns").expect("the workload printed its CPU time");
    let profile = Profile::load(&out_path);
    let cats = profile.categories();

    let threads = profile.process_threads(pid);
    assert!(
        !threads.is_empty(),
        "process {pid} is missing from the profile"
    );
    let t = threads
        .iter()
        .find(|t| t.name() == "splitter")
        .unwrap_or_else(|| {
            panic!(
                "no thread named splitter in {pid}: {:?}",
                threads.iter().map(|t| t.name()).collect::<Vec<_>>()
            )
        });
    assert_eq!(t.process_name(), "split");
    assert_ne!(t.tid(), pid, "the splitter is not the main thread");

    let stacks = t.on_cpu_stacks(&cats);
    let (mut three, mut one, mut cut) = (0usize, 0usize, 0u64);
    for s in &stacks {
        let n = names(s);
        for (hot, count) in [("hot_three", &mut three), ("hot_one", &mut one)] {
            if let Some(i) = n.iter().position(|f| *f == hot) {
                // Cut right below the leaf only where the kernel's walk went
                // without its hand-over (the reader behind, beside a
                // compiler loop: the new process's first samples), counted.
                if i == 1 && n[0].starts_with("[truncated") {
                    cut += 1;
                } else {
                    assert!(
                        i > 0 && n[i - 1] == "worker",
                        "{hot} must be called by worker: {n:?}"
                    );
                }
                *count += 1;
            }
        }
    }
    let skipped = stat(&out, "handovers_skipped");
    assert!(
        cut <= skipped,
        "{cut} stacks cut below the leaf, {skipped} hand-overs skipped (-v's stats)"
    );
    let ratio = three as f64 / one.max(1) as f64;
    eprintln!("split: hot_three {three} samples, hot_one {one}, ratio {ratio:.2} (expected 3.00)");
    assert!(
        three + one >= stacks.len() * 9 / 10,
        "most samples are in the hot functions: {three}+{one} of {}",
        stacks.len()
    );
    // The split is of the thread's own CPU time, so preemption cannot skew
    // it; ~2000 samples at a fixed period leave well under 5% of noise.
    assert!(
        three + one >= 1500,
        "2 s of CPU at 999 Hz: {} samples in the hot functions",
        three + one
    );
    assert!(
        (2.85..=3.15).contains(&ratio),
        "ratio {ratio:.2} is not 3 ± 5%"
    );

    // The thread starts during the recording, so its deltas add up to its
    // CPU time at its last sample (exact there, not a tick stale, but from a
    // first sample that can be): its whole CPU time, exit included, can only
    // be ahead, by that staleness (up to a tick, 4 ms at HZ=250) and the
    // work after its last sample: a few of its periods (1 ms) on a busy
    // machine, where a tick samples whoever runs. 10 ms are allowed. The
    // deltas can run ahead of the kernel's count by the time since it last
    // changed (the scheduler's clock leaves out a VM's steal time, the
    // samples' does not): a tick and a period, 5 ms the other way.
    let delta_ns = t.cpu_delta_us() as f64 * 1000.0;
    let behind_ms = (cpu_ns as f64 - delta_ns) / 1e6;
    eprintln!(
        "split: threadCPUDelta sum {:.3} ms, its own clock {:.3} ms",
        delta_ns / 1e6,
        cpu_ns as f64 / 1e6
    );
    assert!(
        (-5.0..=10.0).contains(&behind_ms),
        "threadCPUDelta sum {delta_ns} ns vs its own clock {cpu_ns} ns: {behind_ms:.3} ms behind"
    );
}

/// Check that a thread spending its time in read(2) has stacks holding both
/// its user function and the kernel's read path, each in its category.
#[test]
fn syscall_stacks_hold_kernel_and_user_frames() {
    if !can_record("syscall_stacks_hold_kernel_and_user_frames") {
        return;
    }
    let dir = scratch("syscalls");
    let exe = build_c("syscalls", &dir.join("syscalls"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "1.5"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let threads = profile.process_threads(pid);
    let t = threads
        .iter()
        .find(|t| t.name() == "reader")
        .expect("thread named reader");
    let stacks = t.on_cpu_stacks(&cats);
    let both = stacks
        .iter()
        .filter(|s| {
            let user = s.iter().position(|(n, c)| n == "read_loop" && c == "User");
            let kernel = s
                .iter()
                .position(|(n, c)| n.contains("read") && n != "read_loop" && c == "Kernel");
            matches!((user, kernel), (Some(u), Some(k)) if u < k)
        })
        .count();
    eprintln!(
        "syscalls: {both} of {} samples hold read_loop above a kernel read frame",
        stacks.len()
    );
    assert!(
        stacks.len() >= 1000,
        "1.5 s of its own CPU time in reads at 999 Hz: {} samples",
        stacks.len()
    );
    // The thread only loops on read(2): a sample outside the kernel's read
    // path lands in the loop's own few instructions or the syscall entry
    // and exit. 95-98% is what a correct profile shows.
    assert!(
        both * 100 >= stacks.len() * 90,
        "{both} of {} samples have read_loop above a kernel read frame",
        stacks.len()
    );
}

/// Check that a process that starts and exits during a system-wide
/// recording appears with its name, pid, exit time and symbolicated frames,
/// with as many samples as its CPU time calls for (±15%).
#[test]
fn short_lived_process_is_named_and_symbolicated() {
    if !can_record("short_lived_process_is_named_and_symbolicated") {
        return;
    }
    let dir = scratch("shortlived");
    let exe = build_c("spin", &dir.join("shortlived"), &[]);
    let out_path = dir.join("p.json.gz");
    let rec = record_started(&["-a", "-d", "2.5", "-q"], &out_path);
    let (steal_before, wall_before) = (steal_ms(), wall_ms());
    let w = Command::new(&exe).arg("0.4").output().unwrap();
    let (steal, wall) = (steal_ms() - steal_before, wall_ms() - wall_before);
    let pid = field(&w.stdout, "pid").unwrap();
    let cpu_ns = field(&w.stdout, "cpu_ns").unwrap() as f64;
    let out = rec.wait_with_output().unwrap();
    assert_success(&out);
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let threads = profile.process_threads(pid);
    assert_eq!(
        threads.len(),
        1,
        "process {pid} has one thread in the profile"
    );
    let t = &threads[0];
    assert_eq!(t.process_name(), "shortlived");
    assert_eq!(t.tid(), pid);
    assert!(t.t["isMainThread"].as_bool().unwrap());
    assert!(t.t["processShutdownTime"].is_number(), "exit time recorded");
    assert!(
        t.t["processStartupTime"].as_f64().unwrap() > 0.0,
        "start time is within the recording"
    );
    let stacks = t.on_cpu_stacks(&cats);
    let named = stacks
        .iter()
        .filter(|s| names(s).contains(&"short_lived_spin"))
        .count();
    eprintln!(
        "shortlived: {named} of {} samples in short_lived_spin",
        stacks.len()
    );
    let expected = cpu_ns / 1e9 * 999.0;
    eprintln!(
        "shortlived: {} samples for {:.0} ms of CPU (expected {expected:.0})",
        stacks.len(),
        cpu_ns / 1e6
    );
    assert!(
        expected >= 100.0,
        "the workload got too little CPU to judge: {cpu_ns} ns"
    );
    // cpu-clock fires every 1/999 s of the CPU's time; the workload's CPU
    // time includes its start (before exec's mappings) and exit, a few ms.
    // Steal is not in its CPU time, but a stolen stretch still ends in a
    // sample: up to the machine's share of steal over its run more.
    let steal_share = steal / (2.0 * wall.max(1.0));
    assert!(
        (stacks.len() as f64 - expected).abs() <= expected * (0.05 + steal_share),
        "samples {} vs CPU time × 999 Hz = {expected:.0} (steal {steal:.0} ms over {wall:.0} ms)",
        stacks.len()
    );
    assert!(
        named * 100 >= stacks.len() * 95,
        "≥95% of samples symbolicated to short_lived_spin: {named} of {}",
        stacks.len()
    );
    let libs = profile.json["libs"].as_array().unwrap();
    let lib = libs
        .iter()
        .find(|l| l["path"].as_str() == exe.to_str())
        .expect("the workload is in libs");
    assert_eq!(
        lib["codeId"].as_str().map(str::len),
        Some(40),
        "the build id is recorded: {lib}"
    );
}

/// Check that -p records only the given process, with as many samples
/// (±3%) as the CPU time it used inside the recording's own time range
/// calls for at 999 Hz; the CPU time comes from its schedstat, polled every
/// 5 ms during the run and interpolated at the profile's start and end.
#[test]
fn pid_filter_records_only_that_process() {
    if !can_record("pid_filter_records_only_that_process") {
        return;
    }
    let dir = scratch("pidfilter");
    let exe = build_c("spin", &dir.join("spin"), &[]);
    let mut w = Command::new(&exe)
        .arg("4")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = w.id() as u64;
    std::thread::sleep(Duration::from_millis(200));
    let out_path = dir.join("p.json");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut readings = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let t = monotonic_ns();
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat")) {
                    readings.push((
                        t,
                        s.split_whitespace().next().unwrap().parse::<u64>().unwrap(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            readings
        })
    };
    let steal_before = steal_ms();
    let out = record(&["-p", &pid.to_string(), "-d", "1.5"], &out_path);
    let steal = steal_ms() - steal_before;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let readings = poller.join().unwrap();
    let _ = w.kill();
    let _ = w.wait();
    assert_success(&out);
    let profile = Profile::load(&out_path);
    // Processes only: the machine's counters have a track of their own.
    let pids: std::collections::BTreeSet<u64> = profile
        .threads()
        .iter()
        .map(|t| t.pid())
        .filter(|&p| p != u64::MAX)
        .collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![pid]);
    let t = profile.thread(pid, pid).unwrap();
    let on_cpu = t.on_cpu_stacks(&profile.categories()).len() as f64;
    let start = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let end = start + (profile.json["meta"]["profilingEndTime"].as_f64().unwrap() * 1e6) as u64;
    let cpu_at = |t: u64| -> f64 {
        let i = readings.partition_point(|r| r.0 <= t);
        assert!(
            i > 0 && i < readings.len(),
            "schedstat was polled around {t}"
        );
        let ((t0, c0), (t1, c1)) = (readings[i - 1], readings[i]);
        c0 as f64 + (c1 as f64 - c0 as f64) * (t - t0) as f64 / (t1 - t0) as f64
    };
    let expected = (cpu_at(end) - cpu_at(start)) / 1e9 * 999.0;
    eprintln!("pid filter: {on_cpu} samples, {expected:.0} expected from its CPU time inside the recording");
    // It ran (beside a busy CPU it got 0.98 s of the 1.5 s).
    assert!(
        expected >= 500.0,
        "the target ran: {expected:.0} samples expected"
    );
    // Measured within 0.5%; the schedstat poll brackets each end by 5 ms.
    // Steal (the host ran another vCPU) is not in schedstat, but a stolen
    // stretch still ends in a sample: up to the machine's share of it more.
    let steal_share = steal / (2.0 * 1500.0);
    assert!(
        (on_cpu - expected).abs() <= expected * (0.03 + steal_share),
        "{on_cpu} samples vs {expected:.0} expected (steal {steal:.0} ms)"
    );
}

/// Check that SIGTERM stops an open-ended recording and the profile is
/// still written, complete, under its final name.
#[test]
fn sigterm_stops_recording_and_writes_the_profile() {
    if !can_record("sigterm_stops_recording_and_writes_the_profile") {
        return;
    }
    let dir = scratch("sigterm");
    let out_path = dir.join("p.json.gz");
    // Signalled once it records (a fixed sleep raced the attach on a loaded
    // machine: SIGTERM before the handler is installed ends it by the signal).
    let child = record_started(&["-a", "-q"], &out_path);
    std::thread::sleep(Duration::from_millis(1000));
    unsafe_kill(child.id(), 15);
    let out = wait_with_timeout(child, Duration::from_secs(20), "sysprof after SIGTERM");
    assert_success(&out);
    let profile = Profile::load(&out_path);
    assert!(
        profile
            .threads()
            .iter()
            .map(|t| t.sample_count())
            .sum::<usize>()
            > 500
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "p.json.gz")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file is left behind: {leftovers:?}"
    );
}

fn unsafe_kill(pid: u32, sig: i32) {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

/// Check that a binary deleted while it runs still symbolicates (it was
/// opened when mapped), and one whose library is truncated mid-recording
/// gives a profile with unresolved frames and a warning, not a crash.
#[test]
fn deleted_and_truncated_binaries_still_give_a_profile() {
    if !can_record("deleted_and_truncated_binaries_still_give_a_profile") {
        return;
    }
    let dir = scratch("badbinaries");
    let deleted = build_c("spin", &dir.join("deleted_spin"), &[]);
    let lib = dir.join("libspin.so");
    build_c("libspin", &lib, &["-shared", "-fPIC"]);
    let user = build_c(
        "spin",
        &dir.join("lib_user"),
        &[
            "-DSPIN_IN_LIB",
            &format!("-L{}", dir.display()),
            "-lspin",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    let out_path = dir.join("p.json.gz");
    let rec = record_started(&["-a", "-d", "2.5", "-q"], &out_path);
    let a = Command::new(&deleted)
        .arg("1.2")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let b = Command::new(&user)
        .arg("1.2")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (pid_a, pid_b) = (a.id() as u64, b.id() as u64);
    std::thread::sleep(Duration::from_millis(400));
    std::fs::remove_file(&deleted).unwrap();
    // Truncating a mapped library: the process may die of SIGBUS, which is fine.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_len(64)
        .unwrap();
    let _ = a.wait_with_output();
    let _ = b.wait_with_output();
    let out = rec.wait_with_output().unwrap();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let profile = Profile::load(&out_path);
    let cats = profile.categories();

    let ta = profile
        .thread(pid_a, pid_a)
        .expect("the deleted binary's process is in the profile");
    let sa = ta.on_cpu_stacks(&cats);
    let named = sa
        .iter()
        .filter(|s| names(s).contains(&"short_lived_spin"))
        .count();
    assert!(
        sa.len() >= 500,
        "1.2 s of CPU at 999 Hz: {} samples of the deleted binary",
        sa.len()
    );
    assert!(
        named * 100 >= sa.len() * 95,
        "the deleted binary still symbolicates: {named} of {}",
        sa.len()
    );

    let tb = profile
        .thread(pid_b, pid_b)
        .expect("the truncated library's user is in the profile");
    let sb = tb.on_cpu_stacks(&cats);
    // It ran ~0.4 s of wall time before the truncation (and may have died of
    // SIGBUS after), beside the deleted binary's spinner: idle, about 400
    // samples; beside a busy CPU, 195 were seen. What follows are shares, so
    // it needs enough samples for them to mean something, not a rate.
    assert!(
        sb.len() >= 50,
        "{} samples of the truncated library's user",
        sb.len()
    );
    let resolved = sb.iter().filter(|s| names(s).contains(&"lib_spin")).count();
    // Code no symbol covers is named by its library and offset.
    let hex = sb
        .iter()
        .filter(|s| s.iter().any(|(n, _)| n.starts_with("libspin.so+0x")))
        .count();
    eprintln!(
        "truncated lib: {resolved} resolved, {hex} with hex frames of {}; stderr: {stderr}",
        sb.len()
    );
    assert_eq!(resolved, 0, "a truncated library cannot be symbolicated");
    assert!(
        hex * 10 >= sb.len() * 9,
        "its frames keep their library and a hex offset: {hex} of {}",
        sb.len()
    );
    assert!(
        stderr.contains("warning") && stderr.contains("libspin.so"),
        "a warning names the library: {stderr}"
    );
}

/// Check that an unknown pid and an unwritable output path give one clear
/// line and exit code 2, before anything is recorded.
#[test]
fn bad_requests_exit_2_with_one_clear_line() {
    let dir = scratch("badrequests");
    let out = record(&["-p", "999999999"], &dir.join("p.json"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no process with pid 999999999"), "{err}");

    let out = record(
        &["-a", "-d", "1"],
        std::path::Path::new("/nonexistent-dir/p.json"),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("cannot write /nonexistent-dir/p.json") && err.contains("-o"),
        "{err}"
    );
}

/// Check that `record -- CMD`'s range starts with the command, not with the
/// loading before it (0.4-0.8 s of verifier time that the profile showed
/// greyed out): the profile's start (its CLOCK_MONOTONIC anchor plus
/// `profilingStartTime`) lies before the command's own first reading of
/// that clock, by at most 100 ms (its fork, exec and dynamic loading).
/// The command's end ended the recording: `meta.endTime` (the front end's
/// "Main process ended") is the range's end.
#[test]
fn the_range_starts_with_the_command() {
    if !can_record("the_range_starts_with_the_command") {
        return;
    }
    let dir = scratch("range-start");
    let exe = build_c("spin", &dir.join("spin"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--no-io", "--", exe.to_str().unwrap(), "0.3"], &out_path);
    assert_success(&out);
    let command_start_ns = field(&out.stdout, "start_ns").expect("spin printed its start");
    let profile = Profile::load(&out_path);
    let meta = &profile.json["meta"];
    let anchor_ns = meta["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .expect("the profile's clock anchor");
    let start_ns = anchor_ns + meta["profilingStartTime"].as_f64().unwrap_or(0.0) * 1e6;
    // The command's end ended the recording: the front end's "Main
    // process ended" is the range's end.
    let ended = meta["endTime"]
        .as_f64()
        .expect("endTime: the command ended");
    let range_end =
        meta["startTime"].as_f64().unwrap() + meta["profilingEndTime"].as_f64().unwrap();
    assert!(
        (ended - range_end).abs() < 1.0,
        "endTime {ended}, range end {range_end}"
    );
    let lead_ms = (command_start_ns as f64 - start_ns) / 1e6;
    eprintln!("range start: {lead_ms:.1} ms before the command's main()");
    assert!(
        (0.0..=100.0).contains(&lead_ms),
        "the profile starts {lead_ms:.1} ms before the command did"
    );
    // Its CPU counter starts with it too: a base at its start, so the first
    // share covers its first 100 ms (the graph was blank for 200 ms, until
    // a second reading of a process first seen at the first).
    let pid = field(&out.stdout, "pid").expect("spin printed its pid");
    let counter = profile.json["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Process CPU" && c["pid"] == pid.to_string())
        .cloned()
        .expect("the command's CPU counter");
    let first_ms = counter["samples"]["time"][0]
        .as_f64()
        .expect("a first counter sample");
    let command_ms = (command_start_ns as f64 - anchor_ns) / 1e6;
    eprintln!(
        "the command's CPU counter starts at {first_ms:.1} ms, the command at {command_ms:.1} ms"
    );
    assert!(
        first_ms <= command_ms + 1.0,
        "the CPU counter starts {:.1} ms after the command",
        first_ms - command_ms
    );
}

/// Check that `record -a` samples at its full rate from its first
/// millisecond: a spinner that ran before sysprof started has, in each whole
/// 250-ms slice of the range, the samples its own CPU time there gives at
/// 999 Hz, within 10 % (its CPU time read from its own log of
/// CLOCK_THREAD_CPUTIME_ID against CLOCK_MONOTONIC, so the slices it was
/// preempted in count as such). Nothing may be lost or missing while
/// sysprof is still starting (the first slice had 40 % of the rate when
/// the tracer's load came after the range's start). Stopped by its
/// duration, the profile says no main process ended (`meta.endTime`).
#[test]
fn all_cpus_are_sampled_at_full_rate_from_the_start() {
    if !can_record("all_cpus_are_sampled_at_full_rate_from_the_start") {
        return;
    }
    let dir = scratch("full-rate");
    let exe = build_c("cpulog", &dir.join("cpulog"), &[]);
    let out_path = dir.join("p.json.gz");
    let log_path = dir.join("cpu.log");
    let spinner = Command::new(&exe)
        .arg("6")
        .arg(&log_path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = record(&["-a", "-F", "999", "-d", "1.6", "--no-io"], &out_path);
    let log = wait_with_timeout(spinner, Duration::from_secs(30), "cpulog");
    assert_success(&out);
    let pid = field(&log.stdout, "pid").unwrap();
    // (CLOCK_MONOTONIC, its CPU time) readings, 2 ms apart.
    let readings: Vec<(f64, f64)> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (at, cpu) = l.strip_prefix("at_ns=")?.split_once(" cpu_ns=")?;
            Some((at.parse().ok()?, cpu.parse().ok()?))
        })
        .collect();
    let cpu_at = |t: f64| -> f64 {
        let i = readings
            .partition_point(|r| r.0 <= t)
            .clamp(1, readings.len() - 1);
        let ((t0, c0), (t1, c1)) = (readings[i - 1], readings[i]);
        c0 + (c1 - c0) * ((t - t0) / (t1 - t0)).clamp(0.0, 1.0)
    };

    let profile = Profile::load(&out_path);
    let meta = &profile.json["meta"];
    // `-a` stopped by its duration: no main process, none said ended.
    assert!(meta.get("endTime").is_none(), "endTime {}", meta["endTime"]);
    let anchor_ns = meta["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let (start_ms, end_ms) = (
        meta["profilingStartTime"].as_f64().unwrap_or(0.0),
        meta["profilingEndTime"].as_f64().unwrap(),
    );
    let slices = ((end_ms - start_ms) / 250.0).floor() as usize;
    let t = profile.thread(pid, pid).expect("the spinner's thread");
    let mut counts = vec![0usize; slices];
    // On-CPU samples only: its waits for a CPU beside a busy one are
    // samples too (their stacks end in an off-CPU frame).
    let on_cpu = t
        .stacks(&profile.categories())
        .into_iter()
        .map(|s| s.last().is_none_or(|(_, c)| c != "Off-CPU" && c != "I/O"));
    for (time, on) in t.times().into_iter().zip(on_cpu) {
        let slice = ((time - start_ms) / 250.0).floor();
        if on && slice >= 0.0 && (slice as usize) < slices {
            counts[slice as usize] += 1;
        }
    }
    let expected: Vec<f64> = (0..slices)
        .map(|i| {
            let from = anchor_ns + (start_ms + i as f64 * 250.0) * 1e6;
            (cpu_at(from + 250e6) - cpu_at(from)) / 1e6 * 0.999
        })
        .collect();
    eprintln!("full rate: the spinner's samples per 250 ms {counts:?}, its own CPU time gives {expected:.0?}; {}", stats_line(&out));
    assert!(slices >= 5, "1.6 s recorded: {slices} whole slices");
    assert!(
        readings.first().is_some_and(|r| r.0 < anchor_ns)
            && readings
                .last()
                .is_some_and(|r| r.0 > anchor_ns + end_ms * 1e6),
        "the spinner ran all through the recording"
    );
    for (i, (&n, &e)) in counts.iter().zip(&expected).enumerate() {
        assert!((n as f64 - e).abs() <= e * 0.1 + 2.0, "slice {i} ({}-{} ms): {n} samples, its CPU time gives {e:.0}: {counts:?} vs {expected:.0?}", i * 250, i * 250 + 250);
    }
}

/// Check that a recording cut into many windows (a hidden option shrinks
/// them to 400 records; long or busy recordings are cut at 100,000) is the
/// recording of one: the splitter's 3:1 split, one splitter thread whose
/// threadCPUDelta sum is its own CPU clock (no sample lost or counted twice
/// at a cut), and a sleeper's off-CPU time within 5 % of its own clock, one
/// marker per 25-ms sleep, none cut in two where a window ended (none
/// shorter than a sleep) and none joined (none longer than the sleeper's
/// own longest sleep: a loaded machine wakes some late).
#[test]
fn a_recording_cut_into_windows_is_one_recording() {
    if !can_record("a_recording_cut_into_windows_is_one_recording") {
        return;
    }
    let dir = scratch("windows");
    let split = build_c("split", &dir.join("split"), &[]);
    let sleeper = build_c("sleeper", &dir.join("sleeper"), &[]);
    let out_path = dir.join("p.json.gz");
    let windows = |out: &std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        stderr
            .lines()
            .find_map(|l| {
                l.strip_prefix("sysprof: ")?
                    .split_once(" windows of at most")?
                    .0
                    .parse::<u32>()
                    .ok()
            })
            .unwrap_or(1)
    };

    let out = record(
        &[
            "--window-records",
            "400",
            "--",
            split.to_str().unwrap(),
            "2.0",
        ],
        &out_path,
    );
    assert_success(&out);
    let n = windows(&out);
    assert!(
        n >= 4,
        "2 s at 999 Hz in windows of 400 records: {n} windows"
    );
    let pid = field(&out.stdout, "pid").expect("the workload printed its pid");
    let cpu_ns = field(&out.stdout, "cpu_ns").expect("the workload printed its CPU time");
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let splitters: Vec<_> = profile
        .process_threads(pid)
        .into_iter()
        .filter(|t| t.name() == "splitter")
        .collect();
    assert_eq!(splitters.len(), 1, "one splitter thread over {n} windows");
    let t = &splitters[0];
    let (mut three, mut one) = (0usize, 0usize);
    for s in t.on_cpu_stacks(&cats) {
        let n = names(&s);
        three += usize::from(n.contains(&"hot_three"));
        one += usize::from(n.contains(&"hot_one"));
    }
    let ratio = three as f64 / one.max(1) as f64;
    let delta_ns = t.cpu_delta_us() as f64 * 1000.0;
    let behind_ms = (cpu_ns as f64 - delta_ns) / 1e6;
    eprintln!("windows: {n}; hot_three {three}, hot_one {one}, ratio {ratio:.2}; threadCPUDelta {:.1} ms vs its clock {:.1} ms", delta_ns / 1e6, cpu_ns as f64 / 1e6);
    assert!(
        three + one >= 1500,
        "2 s of CPU at 999 Hz: {} samples in the hot functions",
        three + one
    );
    assert!(
        (2.85..=3.15).contains(&ratio),
        "ratio {ratio:.2} is not 3 ± 5%"
    );
    assert!(
        (-5.0..=10.0).contains(&behind_ms),
        "threadCPUDelta sum {delta_ns} ns vs its own clock {cpu_ns} ns: {behind_ms:.3} ms behind"
    );

    let out = record(
        &[
            "--window-records",
            "40",
            "--",
            sleeper.to_str().unwrap(),
            "40",
        ],
        &out_path,
    );
    assert_success(&out);
    let n = windows(&out);
    assert!(n >= 4, "40 sleeps in windows of 40 records: {n} windows");
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let slept_ns = field(&out.stdout, "slept_ns").unwrap() as f64;
    let longest_ms = field(&out.stdout, "longest_ns").unwrap() as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile.thread(pid, tid).expect("the sleeper thread");
    let off_ms = t.off_cpu_ms(&cats);
    let err = (off_ms * 1e6 - slept_ns).abs() / slept_ns;
    let markers = t.sleeping_markers();
    eprintln!(
        "windows: {n}; sleeper off-CPU {off_ms:.1} ms vs slept {:.1} ms; {} sleeping markers",
        slept_ns / 1e6,
        markers.len()
    );
    assert!(
        err <= 0.05,
        "off-CPU time off by {:.1}% over {n} windows",
        err * 100.0
    );
    assert!(
        (38..=42).contains(&markers.len()),
        "one marker per 25 ms sleep over {n} windows: {}",
        markers.len()
    );
    for (_, d) in &markers {
        let len = d["endTime"].as_f64().unwrap() - d["startTime"].as_f64().unwrap();
        assert!((24.0..=longest_ms + 1.0).contains(&len), "a marker lasts a sleep (25 to {longest_ms:.1} ms by the sleeper's clock): none cut at a window's end, none joined: {len}");
    }
}

/// Check that the records `record` keeps on disk between windows (markers,
/// off-CPU samples) come back whole, for a process written as it ended and
/// for one written at the end: two sleepers one after the other (100 and then 80 sleeps of 25 ms,
/// each timed by its own clock), recorded in windows of 40 records, are
/// each one sleeping marker a sleep (within 2), each a sleep long, their
/// off-CPU time within 5 % of the time they slept; and the summary says
/// records were kept on disk (at least one thread's 64), so the check is
/// of that path.
#[test]
fn markers_kept_on_disk_come_back_whole() {
    if !can_record("markers_kept_on_disk_come_back_whole") {
        return;
    }
    let dir = scratch("spilled-markers");
    let sleeper = build_c("sleeper", &dir.join("sleeper"), &[]);
    let out_path = dir.join("p.json.gz");
    let s = sleeper.to_str().unwrap();
    let script = format!("{s} 100 && {s} 80");
    let out = record(
        &["--window-records", "40", "--", "sh", "-c", &script],
        &out_path,
    );
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let spilled: u64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("sysprof: ")?
                .split_once(" records of running threads kept on disk")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        spilled >= 64,
        "no thread's records were kept on disk ({spilled}): the check would not be of that path\n{stderr}"
    );
    // Each sleeper's pid=, tid=, slept_ns=, longest_ns=, in order.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let values: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split_once('=').and_then(|(_, v)| v.trim().parse().ok()))
        .collect();
    assert_eq!(values.len(), 8, "two sleepers' four fields each: {text}");
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    for (block, sleeps) in values.chunks(4).zip([100usize, 80]) {
        let (pid, tid, slept_ns, longest_ms) =
            (block[0], block[1], block[2] as f64, block[3] as f64 / 1e6);
        let t = profile.thread(pid, tid).expect("the sleeper thread");
        let markers = t.sleeping_markers();
        let off_ms = t.off_cpu_ms(&cats);
        let err = (off_ms * 1e6 - slept_ns).abs() / slept_ns;
        eprintln!(
            "sleeper {pid}: {} sleeping markers for {sleeps} sleeps; off-CPU {off_ms:.1} ms vs slept {:.1} ms; {spilled} records kept on disk",
            markers.len(),
            slept_ns / 1e6
        );
        assert!(
            (sleeps - 2..=sleeps + 2).contains(&markers.len()),
            "sleeper {pid}: {} sleeping markers for {sleeps} sleeps",
            markers.len()
        );
        for (_, d) in &markers {
            let len = d["endTime"].as_f64().unwrap() - d["startTime"].as_f64().unwrap();
            assert!(
                (24.0..=longest_ms + 1.0).contains(&len),
                "sleeper {pid}: a marker lasts a sleep (25 to {longest_ms:.1} ms): {len}"
            );
        }
        assert!(
            err <= 0.05,
            "sleeper {pid}: off-CPU time off by {:.1}%",
            err * 100.0
        );
    }
}

/// Check that processes written into the file as they end (`record` writes
/// what ended a window before the last cut, while it goes on recording) are
/// each there once, whole: 40 processes that each spin 30 ms of their own
/// CPU time, one after another, recorded in windows of 300 records, are 40
/// tracks (by pid), each named and with at least half its 30 samples at
/// 999 Hz, in a profile the validator accepts (checked by `Profile::load`).
#[test]
fn processes_written_as_they_end_are_each_there_once() {
    if !can_record("processes_written_as_they_end_are_each_there_once") {
        return;
    }
    let dir = scratch("written-early");
    let brief = build_c("brief", &dir.join("brief"), &[]);
    let out_path = dir.join("p.json.gz");
    let script = format!("for i in $(seq 40); do {} 30; done", brief.display());
    let out = record(
        &["--window-records", "300", "--", "sh", "-c", &script],
        &out_path,
    );
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let windows = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("sysprof: ")?
                .split_once(" windows of at most")?
                .0
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(1);
    let pids: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("pid=")?.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 40, "every brief process said its pid");
    let profile = Profile::load(&out_path);
    let mut short = Vec::new();
    for &pid in &pids {
        let tracks = profile.process_threads(pid);
        assert_eq!(
            tracks.len(),
            1,
            "process {pid}: one track, written once ({windows} windows): {}",
            tracks.len()
        );
        let t = &tracks[0];
        if t.sample_count() < 15 || t.name() != "brief" {
            short.push((pid, t.name().to_string(), t.sample_count()));
        }
    }
    eprintln!(
        "written early: {} processes over {windows} windows; short or unnamed: {short:?}",
        pids.len()
    );
    assert!(
        windows >= 4,
        "1.2 s of CPU at 999 Hz in windows of 300 records: {windows} windows"
    );
    assert!(
        short.is_empty(),
        "each process has its samples and its name: {short:?}"
    );
}

/// Check that nothing is lost at default settings with both CPUs busy and
/// 50 new processes a second: no sample, off-CPU or I/O record, stack,
/// process event or tracepoint run lost (the stats line's counters the
/// summary's loss line is made of), both CPUs sampled at the full rate
/// (≥ 90 % of 2 × 5 s × 999 Hz), at most 1 % of the samples with their
/// hand-over skipped (a cut stack, not a loss), and the new processes all there.
#[test]
fn nothing_is_lost_at_defaults_on_a_busy_machine() {
    if !can_record("nothing_is_lost_at_defaults_on_a_busy_machine") {
        return;
    }
    let dir = scratch("no-loss");
    let out_path = dir.join("p.json.gz");
    let count_path = dir.join("spawned");
    // One line appended per process spawned (an append is never seen half done).
    let spawner_script = format!(
        "while :; do /bin/true; echo >> {}; sleep 0.02; done",
        count_path.display()
    );
    let mut load: Vec<std::process::Child> = [
        "while :; do :; done",
        "while :; do :; done",
        spawner_script.as_str(),
    ]
    .iter()
    .map(|s| Command::new("sh").args(["-c", s]).spawn().unwrap())
    .collect();
    let spawned_so_far = || {
        std::fs::read(&count_path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count() as u64)
    };
    std::thread::sleep(Duration::from_millis(500));
    let recording = record_started(&["-a", "-d", "5"], &out_path);
    let steal_before = steal_ms();
    // Those spawned well inside the recording's 5 s.
    let before = spawned_so_far();
    std::thread::sleep(Duration::from_millis(4500));
    let after = spawned_so_far();
    let out = wait_with_timeout(recording, Duration::from_secs(60), "sysprof record");
    let steal_s = (steal_ms() - steal_before) / 1e3;
    for c in &mut load {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_success(&out);
    let stats = stats_line(&out);
    eprintln!("no loss: {stats}");
    for key in [
        "lost_samples",
        "lost_events",
        "lost_stacks",
        "lost_state",
        "tracepoint_runs_missed",
        "lost_sideband",
        "malformed",
    ] {
        assert_eq!(
            stat(&out, key),
            0,
            "{key} at defaults beside two spinners and 50 processes a second: {stats}"
        );
    }
    let samples = stat(&out, "samples");
    // A skipped hand-over is no lost sample: the sample is kept with the
    // stack the kernel walked, its cut said (the ring was past half full
    // when a new process's sample would have sent a 32-KiB copy). Zero
    // here in most runs; 22-47 of ~9,900 in some fresh-clone and busy runs
    // (a known flake, on issue 21): at most 1 % of the samples.
    let skipped = stat(&out, "handovers_skipped");
    assert!(skipped * 100 <= samples, "handovers_skipped {skipped} of {samples} samples at defaults beside two spinners and 50 processes a second: {stats}");
    // A stolen stretch of a vCPU (its host ran something else) gives it one
    // sample, not one a ms: the CPU time the host gave, not the wall's.
    assert!(
        samples as f64 >= 0.9 * (2.0 * 5.0 - steal_s) * 999.0,
        "both CPUs sampled at 999 Hz for 5 s, less {steal_s:.2} s stolen: {samples}"
    );
    let profile = Profile::load(&out_path);
    let trues = profile
        .threads()
        .iter()
        .filter(|t| t.process_name() == "true")
        .count() as u64;
    let spawned = after.saturating_sub(before);
    eprintln!("no loss: {samples} samples; {trues} 'true' processes in the profile, {spawned} spawned while recording");
    assert!(spawned >= 100, "the spawner ran: {spawned}");
    assert!(
        trues >= spawned,
        "every process spawned while recording is in the profile: {trues} of {spawned}"
    );
}

/// Check that `record -a`'s memory follows what is running, not how long
/// it records (issue 21): beside a fork loop and a spinner, the peak
/// resident set of a 60-s recording (VmHWM from `/proc`, not sysprof's own
/// figure) is within 1.6 times a 10-s one's. The 60-s recording sees six
/// times the processes (each written out once it has ended).
#[test]
fn a_long_recording_needs_no_more_memory_than_a_short_one() {
    if !can_record("a_long_recording_needs_no_more_memory_than_a_short_one") {
        return;
    }
    let dir = scratch("length");
    let mut load: Vec<std::process::Child> = ["while :; do /bin/true; done", "while :; do :; done"]
        .iter()
        .map(|s| Command::new("sh").args(["-c", s]).spawn().unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut runs = Vec::new();
    for secs in [10u64, 60] {
        let out_path = dir.join(format!("p{secs}.json.gz"));
        let child = Command::new(sysprof_bin())
            .args(["record", "-v", "-a", "-d", &secs.to_string(), "-o"])
            .arg(&out_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running sysprof");
        let (out, peak_mib) =
            wait_with_peak_rss(child, Duration::from_secs(secs + 120), "sysprof record");
        assert_success(&out);
        // From the summary line (`…, 39444 processes, …`): loading a
        // profile of 35,000 processes here takes minutes.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let processes: usize = stderr
            .lines()
            .find_map(|l| {
                l.split(", ")
                    .find_map(|part| part.strip_suffix(" processes")?.parse().ok())
            })
            .unwrap_or_else(|| panic!("the summary says how many processes: {stderr}"));
        eprintln!(
            "length: {secs} s: peak RSS {peak_mib:.1} MiB, {processes} processes; {}",
            stats_line(&out)
        );
        runs.push((secs, peak_mib, processes));
    }
    for c in &mut load {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (short, long) = (runs[0], runs[1]);
    assert!(
        long.2 > 3 * short.2,
        "the fork loop ran through the long recording: {} vs {} processes",
        long.2,
        short.2
    );
    // Six times the length and the processes, at most 1.6 times the peak:
    // 1.28-1.51x measured (b5bd5dc and later, quiet and in CI; the heap
    // kept between windows since `record` keeps its freed memory, issue 38);
    // memory that grew with the length (issue 21) was several times.
    assert!(
        long.1 <= 1.6 * short.1,
        "peak RSS of 60 s of `record -a` beside a fork loop {:.1} MiB, of 10 s {:.1} MiB: {:.2}x (at most 1.6x)",
        long.1,
        short.1,
        long.1 / short.1
    );
}

/// Check that no sample claims more CPU than time passed: with a process
/// spinning since before `record -a` began (its thread's CPU time read from
/// `/proc` before the programs loaded), every thread's samples in order
/// have a `threadCPUDelta` no larger than the time since its previous
/// sample, the first since the profile's start, give or take one
/// scheduler tick (the kernel's count between ticks, 10 ms at HZ=100).
/// Before the bases were read again at the sampler's attach, the spinner's
/// first sample claimed the 0.8 s of CPU it had while sysprof loaded, in
/// a 1-ms interval.
#[test]
fn no_sample_claims_more_cpu_than_time_passed() {
    if !can_record("no_sample_claims_more_cpu_than_time_passed") {
        return;
    }
    let dir = scratch("record-cpu-claims");
    let spin = build_c("spin", &dir.join("spin"), &[]);
    let _ = sysprof_bin(); // built first: the spinner must outlast the recording
    let mut spinner = std::process::Command::new(&spin)
        .arg("120")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out_path = dir.join("claims.json.gz");
    let out = record(&["-a", "-d", "1.5"], &out_path);
    let early = spinner.try_wait().unwrap();
    if early.is_some() {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut spinner.stdout.take().unwrap(), &mut s).unwrap();
        panic!("the spinner ended before the recording did: {early:?}: {s}");
    }
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert_success(&out);
    let profile = Profile::load(&out_path);
    const TICK_SLACK_MS: f64 = 10.0;
    let (mut checked, mut spinner_samples) = (0usize, 0usize);
    let mut worst: Option<(f64, String)> = None;
    for t in profile.threads() {
        let deltas = match t.t["samples"]["threadCPUDelta"].as_array() {
            Some(d) => d.clone(),
            None => continue,
        };
        let times = t.times();
        let mut previous = 0.0f64;
        for (i, d) in deltas.iter().enumerate() {
            let Some(us) = d.as_f64() else { continue };
            let claimed_ms = us / 1000.0;
            let passed_ms = times[i] - previous;
            let excess = claimed_ms - passed_ms;
            if worst.as_ref().is_none_or(|(w, _)| excess > *w) {
                worst = Some((excess, format!("{} ({}/{}) sample {i} at {:.3} ms: {claimed_ms:.3} ms of CPU in {passed_ms:.3} ms", t.name(), t.pid(), t.tid(), times[i])));
            }
            if us > 0.0 {
                previous = times[i];
            }
            checked += 1;
            if t.pid() == spinner.id() as u64 {
                spinner_samples += 1;
            }
        }
    }
    assert!(
        spinner_samples >= 200,
        "the spinner ({}) has {spinner_samples} samples; threads: {:?}",
        spinner.id(),
        profile
            .threads()
            .iter()
            .map(|t| (t.pid(), t.name().to_string(), t.sample_count()))
            .collect::<Vec<_>>()
    );
    let (excess, at) = worst.expect("samples");
    eprintln!(
        "{checked} samples checked; the largest claim over the time passed: {excess:.3} ms, {at}"
    );
    assert!(
        excess <= TICK_SLACK_MS,
        "a sample claims more CPU than time passed: {at}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Check that samples taken before the in-kernel walker is verified are
/// whole: `record -a` samples with a program that copies stacks (verified
/// in a few ms) while the walker (~20 ms of the verifier) is loaded, and
/// userspace unwinds those copies. A spinner built without frame pointers,
/// running before the recording: every one of its samples earlier than the
/// walker's verification time (from `-v`'s load times: the walker is
/// verified after the sampler is attached, so no sample before that time
/// was walked by it) reaches `_start` through `main` and the spinning
/// function, and there are samples in that span (the spinner has a CPU of
/// its own on two). Since the walker's steps are global functions
/// (ARCHITECTURE 37) that span is ~20 ms, not 130-300: a few samples (5 of
/// a quiet run), so at least one is asked for.
#[test]
fn samples_before_the_walker_is_in_are_whole() {
    if !can_record("samples_before_the_walker_is_in_are_whole") {
        return;
    }
    let dir = scratch("record-before-walker");
    let spin = build_c("spin", &dir.join("spin"), &["-O2", "-fomit-frame-pointer"]);
    let _ = sysprof_bin();
    let mut spinner = std::process::Command::new(&spin)
        .arg("60")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out_path = dir.join("first.json.gz");
    // The walker is in within ~8 ms of the sampler now (its verifying
    // went from ~100 ms to ~4): at 999 Hz that window held 0-7 of the
    // spinner's samples; at 10 kHz it holds tens.
    let out = record(&["-a", "-d", "1", "-F", "10000"], &out_path);
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert_success(&out);
    let walker_ms = walker_ms(&out.stderr);
    let profile = Profile::load(&out_path);
    let categories = profile.categories();
    let (mut early, mut whole) = (0usize, 0usize);
    let mut broken = Vec::new();
    for t in profile.process_threads(spinner.id() as u64) {
        let times = t.times();
        for (i, s) in t.stacks(&categories).iter().enumerate() {
            // On-CPU samples: a wait for a CPU has no user stack to walk.
            let on_cpu = s.last().is_none_or(|(_, c)| c != "Off-CPU" && c != "I/O");
            if times[i] >= walker_ms || !on_cpu {
                continue;
            }
            early += 1;
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            if names.first() == Some(&"_start")
                && names.contains(&"main")
                && names.contains(&"short_lived_spin")
            {
                whole += 1;
            } else if broken.len() < 5 {
                broken.push(names.join(" > "));
            }
        }
    }
    eprintln!(
        "{whole} of {early} spinner samples in the first {walker_ms:.1} ms (before the walker) whole"
    );
    assert!(
        early >= 1,
        "{early} spinner samples before the walker was in ({walker_ms:.1} ms): {}",
        stats_line(&out)
    );
    assert_eq!(whole, early, "stacks not whole: {broken:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Check that the user frame a thread entered the kernel at (an interrupt
/// that preempted it, a page fault) is named by the function holding that
/// instruction, not the one before it in memory: `repentry`'s two threads,
/// on one CPU, preempt each other inside a `rep stosb` that is their
/// function's first instruction, and `before_entry`, laid out right before
/// it, never runs (the program's own layout is the oracle).
#[test]
fn the_instruction_a_thread_entered_the_kernel_at_is_named_as_it_is() {
    if !can_record("the_instruction_a_thread_entered_the_kernel_at_is_named_as_it_is") {
        return;
    }
    let dir = scratch("record-kernel-entry");
    let exe = build_c("repentry", &dir.join("repentry"), &["-mno-red-zone"]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "2"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("repentry's pid");
    let profile = Profile::load(&out_path);
    let categories = profile.categories();
    let (mut entered_at_entry, mut on_cpu, mut misnamed) = (0usize, 0usize, Vec::new());
    for t in profile.process_threads(pid) {
        for s in t.stacks(&categories) {
            let names = names(&s);
            if names.contains(&"before_entry") {
                misnamed.push(names.join(" > "));
                continue;
            }
            let Some(at) = names.iter().position(|n| *n == "fill_at_entry") else {
                continue;
            };
            if s[at + 1..].iter().any(|(_, c)| c == "Kernel") {
                entered_at_entry += 1;
            } else {
                on_cpu += 1;
            }
        }
    }
    eprintln!(
        "repentry: {entered_at_entry} stacks entered the kernel at fill_at_entry's first instruction, \
         {on_cpu} ran in it, {} named before_entry",
        misnamed.len()
    );
    assert!(
        misnamed.is_empty(),
        "{} stacks name a function that never ran: {:#?}",
        misnamed.len(),
        &misnamed[..misnamed.len().min(3)]
    );
    // Two threads on one CPU for 2 s: ~250 preemptions each at 250 Hz.
    assert!(
        entered_at_entry >= 50,
        "{entered_at_entry} stacks in the kernel from fill_at_entry: {}",
        stats_line(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Check that a process in a container's cgroup is labelled with the
/// container id in its process name, and carries its cgroup path.
#[test]
fn processes_in_a_container_cgroup_are_labelled() {
    if !can_record("processes_in_a_container_cgroup_are_labelled") {
        return;
    }
    // cgroup v2, unified or hybrid.
    let base = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .find(|b| std::path::Path::new(&format!("{b}/cgroup.procs")).exists())
        .expect("a cgroup v2 hierarchy");
    let id = "5a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let cg = format!("{base}/docker-{id}.scope");
    let _ = std::fs::create_dir(&cg);
    let dir = scratch("container");
    let exe = build_c("spin", &dir.join("contained"), &[]);
    let mut w = std::process::Command::new(&exe)
        .arg("2")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = w.id() as u64;
    std::fs::write(format!("{cg}/cgroup.procs"), pid.to_string())
        .expect("moving the workload into the cgroup");
    let out_path = dir.join("p.json.gz");
    let out = record(&["-p", &pid.to_string(), "-d", "0.5"], &out_path);
    let _ = w.kill();
    let _ = w.wait();
    let _ = std::fs::remove_dir(&cg);
    assert_success(&out);
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, pid).expect("the contained process");
    eprintln!(
        "container: processName {:?}, cgroup {}",
        t.process_name(),
        t.t["cgroup"]
    );
    assert_eq!(t.process_name(), "contained [container 5a1b2c3d4e5f]");
    assert!(t.t["cgroup"]
        .as_str()
        .unwrap()
        .ends_with(&format!("docker-{id}.scope")));
}
