//! Integration tests of what real programs showed wrong: stacks, names and
//! markers checked against oracles sysprof does not produce: the kernel's
//! disk accounting, the workloads' own clocks, objdump and readelf, the
//! call chains written in the workloads' source. Real kernel, real BPF, root.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sysprof_tests::*;

fn leaf(stack: &[(String, String)]) -> &str {
    stack.last().map(|(n, _)| n.as_str()).unwrap_or("")
}

/// A JIT-compiled BPF program's kallsyms name: `bpf_prog_<16 hex digits>_<name>`.
fn bpf_program_name(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("bpf_prog_")?;
    let (tag, prog) = rest.split_once('_')?;
    (tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit())).then_some(prog)
}

/// Whether `name` is a function defined at the top level of sysprof's
/// eBPF sources (`ebpf/*.c`, `ebpf/*.h` and the runtimes' `ebpf/*/*.h`), or
/// the kernel's 15-character cut of one.
fn defined_in_ebpf(name: &str) -> bool {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf");
    let list = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect()
    };
    let sources: Vec<String> = list(&dir)
        .into_iter()
        .flat_map(|p| if p.is_dir() { list(&p) } else { vec![p] })
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "h"))
        .filter(|p| !p.ends_with("vmlinux.h"))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    sources.iter().flat_map(|s| s.lines()).any(|line| {
        if line.starts_with(|c: char| c.is_whitespace() || "/*#}".contains(c)) {
            return false;
        }
        // A definition: a type, then the function's name before the
        // line's first `(` (not a macro such as `SEC(...)`).
        let Some(open) = line.find('(') else {
            return false;
        };
        let head = &line[..open];
        let word = &head[head.rfind(|c: char| !ident(c)).map_or(0, |i| i + 1)..];
        let before = head[..head.len() - word.len()].trim_end();
        let typed = before.ends_with(|c: char| ident(c) || c == '*');
        typed && (word == name || (name.len() == 15 && word.starts_with(name)))
    })
}

/// The check above knows sysprof's programs, their subprograms and
/// callbacks, and nothing else.
#[test]
fn ebpf_function_names_are_known() {
    for name in [
        "sample_cpu_clock",
        "on_sched_switch",
        "on_block_complete",
        "walk_stack",
        "send_new_stack",
        "unwind_step",
        "hash_step",
        "fold_short",
        "python_frames",
        "hotspot_frame",
        "v8_frame",
    ] {
        assert!(defined_in_ebpf(name), "{name}");
    }
    for name in ["SEC", "bpf_loop", "not_a_program", "unwind"] {
        assert!(!defined_in_ebpf(name), "{name}");
    }
}

/// Names that only the tracing path or a BPF program has.
fn is_tracing_frame(name: &str) -> bool {
    bpf_program_name(name).is_some()
        || [
            "bpf_trace_run",
            "__bpf_trace_",
            "__traceiter_",
            "trace_call_bpf",
            "perf_trace_",
            "__stop_runtime_ptr",
        ]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Every stack of a thread's markers (waker and issuing stacks), as names root first.
fn marker_stacks(t: &ThreadView<'_>, categories: &[String]) -> Vec<Vec<String>> {
    let strings = t.t["stringArray"].as_array().unwrap();
    let m = &t.t["markers"];
    (0..m["length"].as_u64().unwrap() as usize)
        .filter_map(|i| m["data"][i]["cause"]["stack"].as_u64())
        .map(|s| {
            let mut out = Vec::new();
            let mut node = Some(s);
            while let Some(n) = node {
                let frame = t.t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
                let func = t.t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                out.push(
                    strings[t.t["funcTable"]["name"][func].as_u64().unwrap() as usize]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
                node = t.t["stackTable"]["prefix"][n as usize].as_u64();
            }
            out.reverse();
            let _ = categories;
            out
        })
        .collect()
}

/// Record the whole machine while `work` runs; returns the profile and the stats line.
fn record_all_while(dir: &std::path::Path, work: impl FnOnce()) -> (Profile, String) {
    let out_path = dir.join("all.json.gz");
    let rec = record_started(&["-a", "-q"], &out_path);
    work();
    // Ctrl-C once the work is done: a fixed duration could end first on a
    // loaded machine.
    send_signal(&rec, 2);
    let out = wait_with_timeout(rec, Duration::from_secs(120), "sysprof record -a");
    assert_success(&out);
    (Profile::load(&out_path), stats_line(&out))
}

/// Check, in a system-wide recording with off-CPU and I/O on while threads
/// sleep, wake each other and read a disk, that no stack holds a frame of
/// the tracing path or of a BPF program (sysprof's own programs run in
/// every one of those contexts), that off-CPU stacks end in __schedule
/// (where a thread leaves the CPU), and that every sample, marker and
/// counter lies inside the range the profile states.
#[test]
fn stacks_end_where_threads_were_and_everything_lies_in_the_range() {
    if !can_record("stacks_end_where_threads_were_and_everything_lies_in_the_range") {
        return;
    }
    let dir = scratch("truth-frames");
    let pingpong = build_c("pingpong", &dir.join("pingpong"), &[]);
    let odirect = build_c("odirect", &dir.join("odirect"), &[]);
    let disk = LoopDevice::new(&dir, 16);
    let (profile, stats) = record_all_while(&dir, || {
        let a = Command::new(&pingpong)
            .arg("300")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let b = Command::new(&odirect)
            .arg(&disk.path)
            .arg("300")
            .arg("500")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let _ = a.wait_with_output();
        let _ = b.wait_with_output();
    });
    let cats = profile.categories();
    let end = profile.json["meta"]["profilingEndTime"].as_f64().unwrap();
    let (mut off_cpu, mut at_schedule, mut marker_stacks_seen) = (0, 0, 0);
    for t in profile.threads() {
        for (s, at) in t.stacks(&cats).iter().zip(t.times()) {
            // Times are rebuilt by summing timeDeltas in floating point (as the
            // Firefox Profiler does): a sample at the very end came out
            // 3389.6730000000002 against an end of 3389.673. A nanosecond of slack.
            assert!(
                (-1e-6..=end + 1e-6).contains(&at),
                "sample at {at} ms outside [0, {end}] in {}",
                t.name()
            );
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            if leaf(s).starts_with("[off-CPU") {
                assert!(
                    !names.iter().any(|n| is_tracing_frame(n)),
                    "tracing frame in an off-CPU stack of {}: {names:?}",
                    t.name()
                );
                // The frame above the reason: where the thread left the CPU
                // (a woken wait's run-delay leaf is below its reason's).
                let reason_depth = if leaf(s) == RUN_DELAY_LEAF { 2 } else { 1 };
                if let Some(above) = names.iter().rev().nth(reason_depth) {
                    if s.iter().any(|(_, c)| c == "Kernel") {
                        off_cpu += 1;
                        at_schedule += usize::from(*above == "__schedule");
                    }
                }
            } else if let Some((n, prog)) =
                names.iter().find_map(|n| Some((n, bpf_program_name(n)?)))
            {
                // A sample can land in a BPF program that runs with
                // interrupts on: it must carry the name of one of
                // sysprof's programs or of a function in them (the JIT
                // names each subprogram and bpf_loop callback apart: a
                // sample in the walker's `unwind_step` failed a list of
                // the programs alone).
                assert!(defined_in_ebpf(prog), "{n}: no such function in ebpf/");
            }
        }
        for names in marker_stacks(&t, &cats) {
            marker_stacks_seen += 1;
            assert!(
                !names.iter().any(|n| is_tracing_frame(n)),
                "tracing frame in a marker stack of {}: {names:?}",
                t.name()
            );
        }
        let m = &t.t["markers"];
        for i in 0..m["length"].as_u64().unwrap() as usize {
            let (s, e) = (
                m["startTime"][i].as_f64().unwrap(),
                m["endTime"][i].as_f64().unwrap(),
            );
            assert!(
                0.0 <= s && s <= e && e <= end,
                "marker [{s}, {e}] outside [0, {end}] in {}",
                t.name()
            );
        }
    }
    for c in profile.json["counters"].as_array().unwrap() {
        for v in c["samples"]["time"].as_array().unwrap() {
            let v = v.as_f64().unwrap();
            assert!(
                (0.0..=end).contains(&v),
                "counter {} at {v} outside [0, {end}]",
                c["name"]
            );
        }
    }
    eprintln!("frames: {at_schedule} of {off_cpu} off-CPU stacks end in __schedule; {marker_stacks_seen} marker stacks; {stats}");
    // Enough stacks for the share below to mean something. Rows, not waits:
    // the waits of one place and waker under the marker threshold are summed
    // in the kernel into runs of up to 10 ms (ARCHITECTURE 25): the round
    // trips and reads gave 464-479 off-CPU rows, 1,109-1,152 when each wait
    // over 0.1 ms was sent alone.
    assert!(off_cpu >= 300 && marker_stacks_seen >= 300, "the workloads slept, woke and read: {off_cpu} off-CPU stacks, {marker_stacks_seen} marker stacks");
    assert!(
        at_schedule * 100 >= off_cpu * 99,
        "{at_schedule} of {off_cpu} off-CPU stacks end in __schedule"
    );
}

/// Which diskstat counter a marker's operation counts in.
fn stat_group(op: &str) -> &'static str {
    match op.split(' ').next().unwrap() {
        "read" => "reads",
        "discard" => "discards",
        "flush" => "flushes",
        // Writes, write-zeroes and secure erase count as writes.
        _ => "writes",
    }
}

/// Check that I/O markers per operation equal the kernel's own counts in
/// /sys/block/DEV/stat (completed reads, writes, discards, flushes) on a
/// device nothing else touches, while two threads read the same sectors at
/// once, a third writes and fdatasync()s (each sync a cache flush and an
/// empty preflush write) and ranges are discarded: exact.
#[test]
fn io_markers_per_operation_equal_diskstats() {
    if !can_record("io_markers_per_operation_equal_diskstats") {
        return;
    }
    let dir = scratch("truth-io");
    let exe = build_c("blkio", &dir.join("blkio"), &[]);
    let disk = LoopDevice::through_page_cache(&dir, 32);
    let before = disk.stat();
    let (profile, stats) = record_all_while(&dir, || {
        let out = Command::new(&exe)
            .arg(&disk.path)
            .args(["300", "25", "6"])
            .output()
            .unwrap();
        assert!(out.status.success(), "blkio failed: {out:?}");
    });
    let sysfs = disk.stat().since(&before);
    let mut markers: BTreeMap<&str, u64> = BTreeMap::new();
    let mut bytes_read = 0;
    for t in profile.threads() {
        for (_, d) in t.markers() {
            if d["type"] == "BlockIo" && d["device"] == disk.name.as_str() {
                *markers
                    .entry(stat_group(d["op"].as_str().unwrap()))
                    .or_default() += 1;
                if d["op"].as_str().unwrap().starts_with("read") {
                    bytes_read += d["bytes"].as_u64().unwrap();
                }
            }
        }
    }
    eprintln!("io: markers {markers:?}, sysfs {sysfs:?}; {stats}");
    assert_eq!(
        sysfs.reads, 600,
        "two threads × 300 reads, nothing else read the device"
    );
    assert!(
        sysfs.flushes >= 1 && sysfs.discards >= 6,
        "the workload flushed and discarded: {sysfs:?}"
    );
    // Exact, but for requests whose completion no program saw (on this VM
    // the kernel runs none in its PID 1's context; the device completes in
    // its worker, so a completion lands there only by a rare chance: see
    // LoopDevice::through_page_cache). sysprof counts each of
    // those (io_untracked, said on the summary); a marker too many, a
    // loss it did not count, or a loss of more than 1% fails.
    let untracked: u64 = stats
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("io_untracked="))
        .and_then(|v| v.parse().ok())
        .expect("io_untracked in the stats");
    let mut missing = 0;
    for (op, kernel) in [
        ("reads", sysfs.reads),
        ("writes", sysfs.writes),
        ("flushes", sysfs.flushes),
        ("discards", sysfs.discards),
    ] {
        let seen = markers.get(op).copied().unwrap_or(0);
        assert!(
            seen <= kernel,
            "{seen} {op} markers, but the kernel completed {kernel}"
        );
        missing += kernel - seen;
    }
    assert!(
        missing <= untracked,
        "{missing} requests without a marker, {untracked} counted as untracked"
    );
    assert!(
        missing * 100 <= sysfs.reads,
        "{missing} requests without a marker"
    );
    if missing == 0 {
        assert_eq!(
            bytes_read,
            sysfs.read_sectors * 512,
            "read markers carry every byte read"
        );
    } else {
        assert!(
            bytes_read < sysfs.read_sectors * 512,
            "read markers carry no byte more than was read"
        );
    }
}

/// Off-CPU time of a thread by reason, ms, its intervals clipped to [lo, hi] ms.
fn off_cpu_by_reason(
    t: &ThreadView<'_>,
    cats: &[String],
    lo: f64,
    hi: f64,
) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    for ((s, w), at) in t.stacks(cats).iter().zip(t.weights()).zip(t.times()) {
        if leaf(s).starts_with("[off-CPU") {
            // A woken wait's run delay is its own entry (RUN_DELAY_LEAF).
            *by.entry(leaf(s).to_string()).or_default() += ((at + w).min(hi) - at.max(lo)).max(0.0);
        }
    }
    by
}

/// Check that a thread doing only short pipe waits (tens of µs, below the
/// 100 µs under which waits are folded without a stack) shows them as
/// "sleeping", and that its off-CPU time adds up to what its own clocks say
/// (wall time minus its CPU time): short waits keep their reason. What is
/// not sleeping is the time it waited for a CPU, judged against its own
/// schedstat run_delay: on a loaded machine (a spinner on one CPU) a third
/// of its off-CPU time was preemption, and saying so is the truth.
#[test]
fn short_pipe_waits_are_sleeping() {
    if !can_record("short_pipe_waits_are_sleeping") {
        return;
    }
    let dir = scratch("truth-pipes");
    let exe = build_c("pipewaits", &dir.join("pipewaits"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "20000"], &out_path);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let (t0, t1, oracle) = (
        field(&out.stdout, "t0_ns").unwrap(),
        field(&out.stdout, "t1_ns").unwrap(),
        field(&out.stdout, "off_cpu_ns").unwrap() as f64 / 1e6,
    );
    let waits = field(&out.stdout, "waits").unwrap() as f64;
    let run_delay = field(&out.stdout, "run_delay_ns").unwrap() as f64 / 1e6;
    let steal = field(&out.stdout, "steal_ns").unwrap() as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let start = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let t = profile.thread(pid, tid).expect("the waiter thread");
    let by = off_cpu_by_reason(
        &t,
        &profile.categories(),
        (t0 - start) as f64 / 1e6,
        (t1 - start) as f64 / 1e6,
    );
    let total: f64 = by.values().sum();
    let sleeping = by.get("[off-CPU: sleeping]").copied().unwrap_or(0.0);
    let woken = by.get(RUN_DELAY_LEAF).copied().unwrap_or(0.0);
    let preempted = by
        .get("[off-CPU: preempted, waiting for a CPU]")
        .copied()
        .unwrap_or(0.0);
    let folded = t
        .stacks(&profile.categories())
        .iter()
        .filter(|s| {
            s.first()
                .is_some_and(|(n, _)| n.starts_with("[short off-CPU"))
        })
        .count();
    eprintln!(
        "pipes: off-CPU {total:.1} ms ({sleeping:.1} sleeping, {preempted:.1} preempted), own clocks {oracle:.1} ms over {waits} waits ({:.2} µs a wait apart), run delay {run_delay:.1} ms, steal {steal:.0} ms; {folded} folded samples; {by:?}",
        (total - oracle) * 1e3 / waits
    );
    assert!(oracle >= 50.0, "the waiter waited: {oracle:.1} ms");
    assert!(folded >= 1, "its waits were short enough to be folded");
    // Sleeping and waiting for a CPU are all there is. Preemption is at
    // most the kernel's run delay (which also counts the wait for a CPU
    // after each wake-up, inside a sleeping interval), so what is sleeping
    // is at least the rest: within 5% of the total and 1 ms (edges of the
    // span). Idle, that is "all but 5% sleeping"; all of it called
    // preempted, or blocked, fails either way.
    let allowance = total * 0.05 + 1.0;
    assert!(
        sleeping + preempted + woken >= total - allowance,
        "only sleeping and waiting for a CPU (preempted, or woken): {by:?}"
    );
    assert!(
        preempted + woken <= run_delay + allowance,
        "waited for a CPU {:.1} ms (preempted, or woken), more than its run delay {run_delay:.1} ms: {by:?}",
        preempted + woken
    );
    assert!(sleeping >= total - run_delay - allowance, "short pipe waits are sleeping: {sleeping:.1} of {total:.1} ms, run delay {run_delay:.1} ms: {by:?}");
    // An interval runs from tracepoint to tracepoint; the thread's clocks
    // count it back on the CPU from when the scheduler picked it, a little
    // earlier (and sysprof's own work at the switch as its CPU time): about
    // 1.3 µs a wait here, which 20000 waits of 20 µs make visible (2.3-3.3
    // µs since the tracer keeps each short wait's waker). Losing the folded
    // waits (most of them) or their reason would be off by far more. Steal
    // time (a vCPU the host did not run) is in neither the thread's CPU
    // clock nor its off-CPU intervals, so its own clocks can be up to the
    // machine's steal above the truth (CI once saw 1,840 ms against 1,415).
    // After a wakeup that preempts (the idle task, mostly) the kernel skips
    // the rq clock's update, so the clock starts at the enqueue: CI's
    // round trips in why.rs were 3.3 µs a wait over their own clocks.
    let margin = oracle * 0.02 + waits * 0.005;
    assert!(
        total <= oracle + margin && total >= oracle - steal - margin,
        "off-CPU {total:.1} ms vs {oracle:.1} ms by its own clocks over {waits} waits (steal {steal:.0} ms)"
    );
}

/// Check that a thread doing only O_DIRECT reads shows its waits as
/// "blocked" (uninterruptible, I/O), short ones included, except where its
/// own schedstat says it waited for a CPU (a loaded machine preempts it:
/// 1.8 ms of 33 ms once), and that its waits for the disk are never said to
/// be woken by an unrelated task: a completion comes from an interrupt (or
/// a kernel thread), never from the process it interrupted.
#[test]
fn direct_reads_are_blocked_and_woken_by_interrupts() {
    if !can_record("direct_reads_are_blocked_and_woken_by_interrupts") {
        return;
    }
    let dir = scratch("truth-blocked");
    let exe = build_c("odirect", &dir.join("odirect"), &[]);
    let disk = LoopDevice::new(&dir, 16);
    let out_path = dir.join("p.json.gz");
    // Every wait gets a marker with its waker (a threshold of 10 µs).
    let out = record(
        &[
            "--off-cpu-threshold",
            "0.01",
            "--",
            exe.to_str().unwrap(),
            disk.path.to_str().unwrap(),
            "300",
        ],
        &out_path,
    );
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let run_delay_ms = field(&out.stdout, "run_delay_ns").unwrap() as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let start_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    // Up to the instant before it read its run delay: every wait for a CPU
    // there is in that run delay.
    let t_end = (field(&out.stdout, "t_end_ns").unwrap() - start_ns) as f64 / 1e6;
    let t = profile.thread(pid, tid).expect("the reading thread");
    let by = off_cpu_by_reason(&t, &profile.categories(), f64::MIN, t_end);
    let total: f64 = by.values().sum();
    let blocked = by
        .get("[off-CPU: blocked, uninterruptible (I/O)]")
        .copied()
        .unwrap_or(0.0);
    let preempted = by
        .get("[off-CPU: preempted, waiting for a CPU]")
        .copied()
        .unwrap_or(0.0);
    let woken = by.get(RUN_DELAY_LEAF).copied().unwrap_or(0.0);
    let blocked_markers: Vec<Value> = t
        .markers()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d["type"] == "OffCpu" && d["reason"] == "blocked (uninterruptible)")
        .collect();
    let from_interrupts = blocked_markers
        .iter()
        .filter(|d| d["wakerContext"] == "hard IRQ" || d["wakerContext"] == "softirq")
        .count();
    let by_tasks: Vec<&str> = blocked_markers
        .iter()
        .filter(|d| d["wakerContext"] == "task")
        .map(|d| d["waker"].as_str().unwrap())
        .collect();
    // A waker whose stack was lost (a full ring, on a loaded machine) may be
    // an interrupt or the task it interrupted: the profile says "unknown"
    // then (it said "task", naming whatever ran, before), and the marker
    // gives no waker pid.
    let unknown: Vec<&Value> = blocked_markers
        .iter()
        .filter(|d| d["wakerContext"] == "unknown (stack lost)")
        .collect();
    for d in &unknown {
        assert!(
            d["wakerPid"].is_null() && d["waker"].as_str().unwrap().contains("or an interrupt"),
            "an unknown waker is not named as the waker: {d}"
        );
    }
    eprintln!(
        "blocked: {blocked:.1} of {total:.1} ms off-CPU, {preempted:.1} ms preempted (own run delay {run_delay_ms:.1} ms); {} blocked markers, {from_interrupts} woken from interrupts, {} unknown (stack lost), by tasks: {:?}; {}",
        blocked_markers.len(),
        unknown.len(),
        by_tasks.iter().take(5).collect::<Vec<_>>(),
        stats_line(&out)
    );
    assert!(
        blocked_markers.len() >= 250,
        "300 reads, each a blocked wait: {}",
        blocked_markers.len()
    );
    // Preempted time is time it was runnable: never more than its run delay
    // (short waits folded per reason may sit up to a fold's end off: 1 ms).
    assert!(
        preempted + woken <= run_delay_ms + 1.0,
        "waited for a CPU {:.1} ms (preempted, or woken) but its own run delay is {run_delay_ms:.1} ms: {by:?}",
        preempted + woken
    );
    assert!(
        blocked >= (total - preempted - woken) * 0.95,
        "its waits are blocked, or waits for a CPU: {by:?}"
    );
    // A task waker of a disk wait can only be a kernel thread (a loop
    // device's worker, a softirq thread): never a user process.
    for w in &by_tasks {
        assert!(
            w.starts_with("kworker") || w.starts_with("ksoftirqd") || w.starts_with("kloop"),
            "a disk wait woken by the task {w}"
        );
    }
    let known = blocked_markers.len() - unknown.len();
    assert!(
        from_interrupts * 100 >= known * 50,
        "completions wake from interrupts: {from_interrupts} of {known} with a known context"
    );
}

/// Check where stacks end: the main thread of a program whose `_start` has
/// no unwind information (and leaves garbage in the frame pointer) reaches
/// `_start` as its root with no truncation label, and a thread whose frame
/// pointer leads to text where a return address should be ends in a
/// truncation label, with no frame made of that text.
#[test]
fn stacks_end_at_entry_points_and_never_in_junk() {
    if !can_record("stacks_end_at_entry_points_and_never_in_junk") {
        return;
    }
    let dir = scratch("truth-ends");
    let exe = build_c(
        "stackends",
        &dir.join("stackends"),
        &["-O2", "-fomit-frame-pointer", "-nostartfiles"],
    );
    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--no-off-cpu", "--", exe.to_str().unwrap(), "1.0"],
        &out_path,
    );
    assert_success(&out);
    let (pid, junk) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "junk_tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let main: Vec<Vec<String>> = profile
        .thread(pid, pid)
        .unwrap()
        .on_cpu_stacks(&cats)
        .into_iter()
        .map(|s| s.into_iter().map(|(n, _)| n).collect())
        .collect();
    let in_spin: Vec<&Vec<String>> = main
        .iter()
        .filter(|s| s.iter().any(|n| n == "spin_on_main"))
        .collect();
    let whole = in_spin
        .iter()
        .filter(|s| {
            s.first().map(String::as_str) == Some("_start")
                && s.get(1).map(String::as_str) == Some("c_main")
        })
        .count();
    let labelled = main
        .iter()
        .filter(|s| s.iter().any(|n| n.starts_with("[truncated")))
        .count();
    let junk_stacks: Vec<Vec<String>> = profile
        .thread(pid, junk)
        .unwrap()
        .on_cpu_stacks(&cats)
        .into_iter()
        .map(|s| s.into_iter().map(|(n, _)| n).collect())
        .collect();
    let junk_in_spin: Vec<&Vec<String>> = junk_stacks
        .iter()
        .filter(|s| s.iter().any(|n| n == "spin_under_junk"))
        .collect();
    let cut = junk_in_spin
        .iter()
        .filter(|s| {
            s.first().map(String::as_str) == Some("[truncated: return address outside any code]")
                && s.get(1).map(String::as_str) == Some("junk_frame")
        })
        .count();
    let text_frames = junk_stacks
        .iter()
        .flatten()
        .filter(|n| n.contains("695f6874") || n.contains("7465725f"))
        .count();
    eprintln!("ends: main {whole} of {} whole to _start, {labelled} labelled truncated; junk {cut} of {} cut at the junk, {text_frames} text frames", in_spin.len(), junk_in_spin.len());
    assert!(
        in_spin.len() >= 500 && junk_in_spin.len() >= 500,
        "1 s of CPU each at 999 Hz"
    );
    assert!(
        whole * 100 >= in_spin.len() * 99,
        "the main thread's stacks end at _start"
    );
    assert!(
        labelled * 100 <= main.len(),
        "a stack that reached _start is whole: {labelled} labelled"
    );
    assert!(
        cut * 100 >= junk_in_spin.len() * 99,
        "the junk ends the walk with a label"
    );
    assert_eq!(
        text_frames, 0,
        "text read as a return address never becomes a frame"
    );
}

/// (address, name) of each `<name@plt>` entry objdump shows in the PLT sections.
fn objdump_plt(exe: &std::path::Path) -> Vec<(u64, String)> {
    let out = Command::new("objdump")
        .args(["-d", "--section=.plt", "--section=.plt.sec"])
        .arg(exe)
        .output()
        .expect("objdump (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            if !name.ends_with("@plt") {
                return None;
            }
            Some((u64::from_str_radix(addr.trim(), 16).ok()?, name.to_string()))
        })
        .collect()
}

/// Check names: samples in a PLT stub are named `symbol@plt` at the
/// address objdump gives that stub (not the `_init` before the PLT); a
/// function with a hidden internal name and a public alias at the same
/// address is named by the alias (as nm shows both); a process started as
/// `sh` is named `sh`, whatever executable it runs, which stays in the profile.
#[test]
fn plt_stubs_aliases_and_processes_are_named_as_tools_name_them() {
    if !can_record("plt_stubs_aliases_and_processes_are_named_as_tools_name_them") {
        return;
    }
    let dir = scratch("truth-names");
    build_c(
        "libnoop",
        &dir.join("libnoop.so"),
        &["-shared", "-fPIC", "-O2"],
    );
    let exe = build_c(
        "names",
        &dir.join("names"),
        &[
            "-O2",
            &format!("-L{}", dir.display()),
            "-lnoop",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    let nm = String::from_utf8(Command::new("nm").arg(&exe).output().unwrap().stdout).unwrap();
    let addr_of = |sym: &str| {
        nm.lines()
            .find(|l| l.ends_with(&format!(" {sym}")))
            .map(|l| l.split(' ').next().unwrap().to_string())
    };
    assert!(
        addr_of("__names_hot_impl").is_some()
            && addr_of("__names_hot_impl") == addr_of("names_hot"),
        "the alias shares the address:\n{nm}"
    );
    let plt = objdump_plt(&exe);
    assert!(
        plt.iter().any(|(_, n)| n == "noop@plt"),
        "objdump shows noop@plt: {plt:?}"
    );
    // `sh -c 'exec ...'`: the shell execs into names, so the sh process is named sh until then.
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--no-off-cpu",
            "--",
            "sh",
            "-c",
            &format!("{} 0.7; true", exe.display()),
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile.thread(pid, pid).expect("the names process");
    let stacks = t.on_cpu_stacks(&cats);
    let plt_samples = stacks.iter().filter(|s| leaf(s).ends_with("@plt")).count();
    let init_samples = stacks.iter().filter(|s| leaf(s) == "_init").count();
    let hot = stacks.iter().filter(|s| leaf(s) == "names_hot").count();
    let internal = stacks
        .iter()
        .filter(|s| s.iter().any(|(n, _)| n == "__names_hot_impl"))
        .count();
    eprintln!("names: {plt_samples} samples in PLT stubs, {init_samples} in _init, {hot} in names_hot, {internal} under its internal name");
    assert!(
        plt_samples >= 20,
        "the loop spends time in noop's stub: {plt_samples}"
    );
    assert_eq!(init_samples, 0, "no PLT sample is named _init");
    assert!(
        hot >= 300 && internal == 0,
        "the public alias names the function: {hot} vs {internal}"
    );
    // Every @plt frame of the executable sits at the address objdump gives
    // its stub. Other libraries' stubs are named too (libc's
    // `_dl_allocate_tls@plt`, met by a sample before the shell exec'd):
    // objdump of this executable does not know them.
    let names_resource = |frame: usize| {
        let func = t.t["frameTable"]["func"][frame].as_u64()? as usize;
        let resource = t.t["funcTable"]["resource"][func]
            .as_i64()
            .filter(|&r| r >= 0)? as usize;
        let name = t.t["resourceTable"]["name"][resource].as_u64()? as usize;
        t.t["stringArray"][name].as_str().map(|s| s == "names")
    };
    let plt_frames: Vec<(String, u64)> = frame_addresses(&t, |n| n.ends_with("@plt"))
        .into_iter()
        .filter(|&(_, _, frame)| names_resource(frame) == Some(true))
        .map(|(name, addr, _)| (name, addr))
        .collect();
    assert!(!plt_frames.is_empty());
    for (name, addr) in plt_frames {
        let stub = plt
            .iter()
            .filter(|(a, _)| *a <= addr)
            .max_by_key(|(a, _)| *a)
            .unwrap_or_else(|| panic!("{name} at {addr:#x} before every stub"));
        assert_eq!(
            stub.1, name,
            "{name} at {addr:#x} is objdump's {} at {:#x}",
            stub.1, stub.0
        );
        assert!(addr < stub.0 + 16);
    }
    // The shell: named sh (as ps names it), its executable kept.
    let shell = profile
        .threads()
        .into_iter()
        .find(|t| t.process_name() == "sh")
        .expect("a process named sh");
    let exe_path = shell.t["processExecutable"].as_str().unwrap_or("");
    assert!(
        exe_path.ends_with("dash") || exe_path.ends_with("/sh") || exe_path.ends_with("bash"),
        "its executable is kept: {exe_path:?}"
    );
}

/// (function name, library-relative address, frame index) of the frames of `t` whose name matches.
fn frame_addresses(t: &ThreadView<'_>, pick: impl Fn(&str) -> bool) -> Vec<(String, u64, usize)> {
    let strings = t.t["stringArray"].as_array().unwrap();
    let ft = &t.t["frameTable"];
    (0..ft["length"].as_u64().unwrap() as usize)
        .filter_map(|i| {
            let func = ft["func"][i].as_u64()? as usize;
            let name = strings[t.t["funcTable"]["name"][func].as_u64()? as usize].as_str()?;
            if !pick(name) {
                return None;
            }
            Some((name.to_string(), ft["address"][i].as_i64()? as u64, i))
        })
        .collect()
}

/// The FDE ranges readelf shows for `exe`: (pc_begin, pc_end).
fn readelf_fdes(exe: &std::path::Path) -> Vec<(u64, u64)> {
    let out = Command::new("readelf")
        .args(["--debug-dump=frames"])
        .arg(exe)
        .output()
        .expect("readelf (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" FDE cie=") && l.contains("pc="))
        .filter_map(|l| {
            let pc = l.split("pc=").nth(1)?;
            let (a, b) = pc.split_once("..")?;
            Some((
                u64::from_str_radix(a.trim(), 16).ok()?,
                u64::from_str_radix(b.trim(), 16).ok()?,
            ))
        })
        .collect()
}

/// Check that a stripped binary's unresolved addresses are grouped by the
/// function that contains them, as its FDEs (readelf) say: every frame in
/// it is named `binary+0xSTART` with START an FDE's start, the frames of one
/// function share one name, and its six-function chain is six nodes.
#[test]
fn stripped_frames_are_grouped_by_function() {
    if !can_record("stripped_frames_are_grouped_by_function") {
        return;
    }
    let dir = scratch("truth-fde");
    let full = build_c(
        "deep",
        &dir.join("deep.full"),
        &["-O2", "-fomit-frame-pointer", "-Wl,--build-id=none"],
    );
    let exe = dir.join("deep");
    assert!(Command::new("objcopy")
        .arg("--strip-all")
        .arg(&full)
        .arg(&exe)
        .status()
        .unwrap()
        .success());
    let fdes = readelf_fdes(&exe);
    assert!(fdes.len() >= 6, "readelf shows the FDEs: {fdes:?}");
    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--no-off-cpu", "--", exe.to_str().unwrap(), "1.0"],
        &out_path,
    );
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the deep thread");
    // A frame in no library at all is junk. One was seen once in about 15
    // runs (`0x129b6f`, --repeat 3 round 3; not reproduced in 12 reruns):
    // an open defect, in the note. More than one fails.
    let unnamed: Vec<(String, u64)> = frame_addresses(&t, |n| n.starts_with("0x"))
        .into_iter()
        .map(|(n, a, _)| (n, a))
        .collect();
    assert!(unnamed.len() <= 1, "frames in no library: {unnamed:?}");
    if !unnamed.is_empty() {
        eprintln!("fde: one frame in no library: {unnamed:?}");
    }
    let frames = frame_addresses(&t, |n| n.starts_with("deep+0x"));
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (name, addr, _) in &frames {
        let start = u64::from_str_radix(name.strip_prefix("deep+0x").unwrap(), 16).unwrap();
        // GNU ld's layout: file offsets of code equal its addresses.
        let fde = fdes
            .iter()
            .find(|(b, e)| *b <= *addr && *addr < *e)
            .unwrap_or_else(|| panic!("{addr:#x} in no FDE"));
        assert_eq!(
            start, fde.0,
            "{name} for {addr:#x}: its FDE starts at {:#x}",
            fde.0
        );
        *names.entry(name.clone()).or_default() += 1;
    }
    let stacks = t.on_cpu_stacks(&profile.categories());
    let longest = stacks
        .iter()
        .map(|s| s.iter().filter(|(n, _)| n.starts_with("deep+0x")).count())
        .max()
        .unwrap_or(0);
    eprintln!(
        "fde: {} frames in {} functions; longest chain {longest} functions; {:?}",
        frames.len(),
        names.len(),
        names
    );
    // Each frame is named by the start of the FDE that holds it (checked
    // above), so addresses of one function share one name.
    assert!(
        stacks.len() >= 500 && frames.len() >= 7 && names.len() >= 7,
        "deep, level1..level6 sampled"
    );
    assert!(
        longest >= 7,
        "deep -> level1..level6: one node per function"
    );
}

/// Check that stacks unwind through JIT code that keeps no frame pointer,
/// with the unwind table its jitdump's unwinding-info record carries (as
/// Python's -X perf_jit writes them): hot_spin <- jit_trampoline <-
/// run_jit <- main, in at least 95% of samples (the source's call chain).
#[test]
fn jit_code_unwinds_with_its_jitdump_tables() {
    if !can_record("jit_code_unwinds_with_its_jitdump_tables") {
        return;
    }
    let dir = scratch("truth-jit");
    let exe = build_c("jit", &dir.join("jit"), &["-O2", "-fomit-frame-pointer"]);
    let out_path = dir.join("p.json.gz");
    let out = Command::new(sysprof_bin())
        .current_dir(&dir)
        .args(["record", "-v", "--no-off-cpu", "-o"])
        .arg(&out_path)
        .args(["--", exe.to_str().unwrap(), "1.0"])
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, pid).unwrap();
    let stacks: Vec<Vec<String>> = t
        .on_cpu_stacks(&profile.categories())
        .into_iter()
        .map(|s| s.into_iter().map(|(n, _)| n).collect())
        .collect();
    let in_hot: Vec<&Vec<String>> = stacks
        .iter()
        .filter(|s| s.iter().any(|n| n == "hot_spin"))
        .collect();
    let chain = ["main", "run_jit", "jit_trampoline", "hot_spin"];
    let whole = in_hot
        .iter()
        .filter(|s| {
            s.windows(4).any(|w| w == chain) && s.first().map(String::as_str) == Some("_start")
        })
        .count();
    eprintln!(
        "jit: {whole} of {} hot samples unwind through the JIT code to _start; {}",
        in_hot.len(),
        stats_line(&out)
    );
    assert!(
        in_hot.len() >= 800,
        "1 s of CPU at 999 Hz: {}",
        in_hot.len()
    );
    assert!(
        whole * 100 >= in_hot.len() * 95,
        "{whole} of {} whole",
        in_hot.len()
    );
}

/// Check that the per-CPU tracks put each slice in the category of what
/// ran: Idle for the idle task, Kernel for kernel threads, User for
/// processes (the spinners); and that there are idle slices when
/// `/proc/stat` says the CPUs idled.
#[test]
fn per_cpu_slices_are_idle_kernel_or_user() {
    if !can_record("per_cpu_slices_are_idle_kernel_or_user") {
        return;
    }
    let dir = scratch("truth-percpu");
    let (profile, idle_ms) = {
        let out_path = dir.join("p.json.gz");
        let spin = build_c("spin", &dir.join("spin"), &[]);
        let rec = record_started(&["-a", "-q", "--per-cpu", "-d", "2"], &out_path);
        // Idle time while it records (its start-up, before, may idle a
        // CPU for a second: 1,470 ms counted so once, beside a spinner).
        let (started, idle_before) = (std::time::Instant::now(), idle_cpu_ms());
        // A user process spins; the machine otherwise idles (kernel threads
        // wake now and then) unless other work keeps every CPU busy.
        let _ = Command::new(&spin).arg("0.5").output();
        std::thread::sleep(Duration::from_millis(1600).saturating_sub(started.elapsed()));
        let idle_ms = idle_cpu_ms() - idle_before;
        let out = wait_with_timeout(rec, Duration::from_secs(30), "sysprof --per-cpu");
        assert_success(&out);
        (Profile::load(&out_path), idle_ms)
    };
    let cats = profile.categories();
    let mut by_cat: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for t in profile
        .threads()
        .into_iter()
        .filter(|t| t.name().starts_with("CPU "))
    {
        let m = &t.t["markers"];
        for i in 0..m["length"].as_u64().unwrap() as usize {
            let cat = cats[m["category"][i].as_u64().unwrap() as usize].clone();
            let d = &m["data"][i];
            // Idle stretches are their own type, which the track's overview
            // leaves out (checked below); a running thread's pid is a string,
            // as the front end's `pid` format wants it.
            let idle = d["type"] == "CpuIdle";
            let pid: u64 = if idle {
                0
            } else {
                d["pid"]
                    .as_str()
                    .expect("a slice's pid is a string")
                    .parse()
                    .unwrap()
            };
            let expected = if pid == 0 {
                "Idle"
            } else if profile.threads().iter().any(|p| {
                p.t["pid"] != "cpus"
                    && p.t["pid"] != "machine"
                    && p.t["processType"] != "default"
                    && p.pid() == pid
                    && p.process_name().starts_with("spin")
            }) {
                "User"
            } else {
                &cat
            };
            if cat != expected {
                wrong.push(format!("{} as {cat}", d["thread"]));
            }
            *by_cat.entry(cat).or_default() += 1;
        }
    }
    // The overview above a track draws every marker it lists as one black
    // bar: busy slices only, so an idle CPU does not look like a busy one.
    let display = |name: &str| {
        let schema = profile.json["meta"]["markerSchema"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned();
        schema.map(|s| s["display"].to_string()).unwrap_or_default()
    };
    assert!(
        display("OnCpu").contains("timeline-overview")
            && !display("CpuIdle").contains("timeline-overview")
            && display("CpuIdle").contains("marker-chart"),
        "busy slices in the overview, idle ones in the chart only: OnCpu {}, CpuIdle {}",
        display("OnCpu"),
        display("CpuIdle")
    );
    let kthreads = profile
        .threads()
        .iter()
        .filter(|t| {
            t.t["pid"] != "cpus"
                && (t.process_name().starts_with("kworker") || t.process_name().starts_with("rcu_"))
        })
        .count();
    eprintln!("per-cpu slices by category: {by_cat:?}; CPUs idle {idle_ms:.0} ms while recording; {kthreads} kernel threads in the profile; wrong: {wrong:?}");
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(
        by_cat.get("User").copied().unwrap_or(0) >= 1,
        "the spinner ran: {by_cat:?}"
    );
    // Idle slices where the kernel says the CPUs idled while it recorded
    // (beside a busy machine they may not have: 1 idle slice in a run
    // beside a spinner).
    if idle_ms >= 200.0 {
        assert!(
            by_cat.get("Idle").copied().unwrap_or(0) >= 1,
            "the CPUs idled {idle_ms:.0} ms: {by_cat:?}"
        );
    }
    if kthreads > 0 {
        assert!(
            by_cat.get("Kernel").copied().unwrap_or(0) >= 1,
            "kernel threads ran: their slices are Kernel: {by_cat:?}"
        );
    }
}

/// Idle time of all CPUs so far, ms (`/proc/stat`'s idle and iowait).
fn idle_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { sysconf(2) } as f64; // _SC_CLK_TCK
    (cpu[3] + cpu[4]) / hz * 1e3
}

extern "C" {
    fn sysconf(name: i32) -> i64;
}
