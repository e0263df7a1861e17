//! Integration tests of off-CPU, wakeup, run-queue, block I/O and counter
//! recording: real kernel, real BPF, as root, one at a time. Oracles: the
//! workloads' own clocks, /proc/PID/task/TID/status, /proc/stat and
//! /sys/block/DEV/stat.

use serde_json::Value;
use sysprof_tests::*;

fn leaf(stack: &[(String, String)]) -> &str {
    stack.last().map(|(n, _)| n.as_str()).unwrap_or("")
}

/// Its off-CPU reason frame, a woken wait's run delay included.
fn reason(stack: &[(String, String)]) -> Option<&str> {
    off_cpu_reason(stack.iter().map(|(n, _)| n.as_str()))
}

/// Check that a thread sleeping 40 × 25 ms has off-CPU time within ±5% of
/// the wall time it measured itself, in stacks that hold the user function
/// that slept and the kernel's nanosleep path, with reason "sleeping", and
/// one marker per sleep.
#[test]
fn sleeping_thread_off_cpu_time_matches_its_clock() {
    if !can_record("sleeping_thread_off_cpu_time_matches_its_clock") {
        return;
    }
    let dir = scratch("sleeper");
    let exe = build_c("sleeper", &dir.join("sleeper"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "40"], &out_path);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let slept_ns = field(&out.stdout, "slept_ns").unwrap() as f64;
    let longest_ms = field(&out.stdout, "longest_ns").unwrap() as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile.thread(pid, tid).expect("the sleeper thread");
    assert_eq!(t.name(), "sleeper");
    let stacks = t.stacks(&cats);
    let weights = t.weights();
    let mut off_ms = 0.0;
    let mut sleeping_with_stack = 0;
    let mut sleeping = 0;
    for (s, w) in stacks.iter().zip(&weights) {
        if leaf(s).starts_with("[off-CPU") {
            off_ms += w;
        }
        if reason(s) == Some("[off-CPU: sleeping]") {
            sleeping += 1;
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            let user = names.iter().position(|n| *n == "sleep_loop");
            let kernel = names.iter().position(|n| n.contains("nanosleep"));
            if matches!((user, kernel), (Some(u), Some(k)) if u < k) {
                sleeping_with_stack += 1;
            }
        }
    }
    let err = (off_ms * 1e6 - slept_ns).abs() / slept_ns;
    eprintln!("sleeper: off-CPU {off_ms:.1} ms vs slept {:.1} ms ({:.2}%); {sleeping_with_stack}/{sleeping} sleeping stacks hold sleep_loop above nanosleep", slept_ns / 1e6, err * 100.0);
    assert!(err <= 0.05, "off-CPU time off by {:.1}%", err * 100.0);
    assert!(
        sleeping >= 38,
        "one sleeping interval per nanosleep: {sleeping}"
    );
    assert!(
        sleeping_with_stack * 100 >= sleeping * 95,
        "stacks show sleep_loop and the kernel sleep path: {sleeping_with_stack} of {sleeping}"
    );
    let markers: Vec<_> = t
        .markers()
        .into_iter()
        .filter(|(_, d)| d["type"] == "OffCpu" && d["reason"] == "sleeping")
        .collect();
    assert!(
        (38..=42).contains(&markers.len()),
        "one marker per 25 ms sleep: {}",
        markers.len()
    );
    for (_, d) in &markers {
        let len = d["endTime"].as_f64().unwrap() - d["startTime"].as_f64().unwrap();
        assert!(
            (24.0..=longest_ms + 1.0).contains(&len),
            "a marker lasts one sleep (25 to {longest_ms:.1} ms by the sleeper's clock): {len}"
        );
    }
}

/// Check that the ponger's off-CPU markers name the pinger (tid and name) as
/// their waker, and that each thread's context switch count in the profile
/// matches /proc/PID/task/TID/status, read while the thread is parked at the
/// end of its work, plus the few switches of its exit.
#[test]
fn wakers_are_named_and_switch_counts_match_proc() {
    if !can_record("wakers_are_named_and_switch_counts_match_proc") {
        return;
    }
    let dir = scratch("pingpong");
    let exe = build_c("pingpong", &dir.join("pingpong"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "300"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let pinger = field(&out.stdout, "pinger_tid").unwrap();
    let ponger = field(&out.stdout, "ponger_tid").unwrap();
    let profile = Profile::load(&out_path);
    let tp = profile.thread(pid, ponger).expect("ponger");
    let markers: Vec<Value> = tp
        .markers()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d["type"] == "OffCpu")
        .collect();
    let by_pinger = markers
        .iter()
        .filter(|d| {
            d["wakerTid"].as_u64() == Some(pinger)
                && d["waker"].as_str().unwrap().starts_with("pinger")
        })
        .count();
    eprintln!(
        "pingpong: {by_pinger} of {} ponger off-CPU markers woken by pinger ({pinger})",
        markers.len()
    );
    assert!(
        markers.len() >= 270,
        "one ≥1 ms wait per round: {}",
        markers.len()
    );
    assert!(
        by_pinger * 100 >= markers.len() * 95,
        "the waker is the pinger"
    );
    // The waker's stack is its wakeup in write(2), not an interrupt's: the
    // pipe's kernel path. (On Linux 6.13+ the tracer once took every
    // wakeup for an interrupt's.) Its user frames come only where the
    // kernel's walk gets through: a waker's stack is never a 32-KiB copy.
    let in_write = markers
        .iter()
        .filter(|d| {
            d["wakerTid"].as_u64() == Some(pinger)
                && d["waker"].as_str().unwrap().starts_with("pinger")
        })
        .filter_map(|d| d["cause"]["stack"].as_u64())
        .filter(|&s| tp.stack_names(s).iter().any(|n| n.contains("pipe_write")))
        .count();
    eprintln!("pingpong: {in_write} of {by_pinger} wakeups by the pinger have its pipe write in their stack");
    assert!(
        in_write * 100 >= by_pinger * 90,
        "the waker's stacks are its pipe write: {in_write} of {by_pinger}"
    );
    for (who, tid) in [("pinger", pinger), ("ponger", ponger)] {
        let expected = field(&out.stdout, &format!("{who}_switches")).unwrap() as f64;
        let t = profile.thread(pid, tid).unwrap();
        let cs = &t.t["contextSwitches"];
        let got = (cs["voluntary"].as_u64().unwrap() + cs["involuntary"].as_u64().unwrap()) as f64;
        eprintln!("pingpong: {who} switches: profile {got}, /proc {expected}");
        // The oracle is read while both threads are parked; after it each
        // thread is released and exits, which adds a switch /proc can never
        // show (the final one away from the dead thread) and, when the exit
        // wakes the joining main thread, a preemption. Measured here: +1 or
        // +2 in every run; up to 4 allowed, never fewer than the oracle.
        let extra = got - expected;
        assert!(
            (0.0..=4.0).contains(&extra),
            "{who}: {got} in the profile vs {expected} in /proc before its exit"
        );
    }
}

/// Check that 200 O_DIRECT 4 KiB reads from a loop device nothing else
/// touches give exactly as many read markers on that device as
/// /sys/block/DEV/stat counts (each on the reading thread, 4096 bytes,
/// non-zero latency), and that the device's read counter adds up to exactly
/// the bytes sysfs counts. The recording's window contains the workload's
/// whole run, and nothing else does I/O on the device, so both are exact.
#[test]
fn direct_reads_become_io_markers_and_counters_match_sysfs() {
    if !can_record("direct_reads_become_io_markers_and_counters_match_sysfs") {
        return;
    }
    let dir = scratch("odirect");
    let exe = build_c("odirect", &dir.join("odirect"), &[]);
    let disk = LoopDevice::through_page_cache(&dir, 16);
    let out_path = dir.join("p.json.gz");
    let before = disk.stat();
    let out = record(
        &[
            "--",
            exe.to_str().unwrap(),
            disk.path.to_str().unwrap(),
            "200",
        ],
        &out_path,
    );
    let sysfs = disk.stat().since(&before);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let on_disk = |d: &Value| d["type"] == "BlockIo" && d["device"] == disk.name.as_str();
    let all: Vec<Value> = profile
        .threads()
        .iter()
        .flat_map(|t| t.markers())
        .map(|(_, d)| d)
        .filter(on_disk)
        .collect();
    let t = profile.thread(pid, tid).expect("the reading thread");
    let reads: Vec<Value> = t
        .markers()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| on_disk(d) && d["op"].as_str().unwrap().starts_with("read"))
        .collect();
    eprintln!(
        "odirect: {} markers on {} ({} reads by the reader), sysfs {sysfs:?}",
        all.len(),
        disk.name,
        reads.len()
    );
    assert_eq!(
        sysfs.reads, 200,
        "the workload made 200 reads and nothing else read {}",
        disk.name
    );
    // One marker per request sysfs counts, but for those the summary says
    // were seen at one end only; said, never silent, and at most 4 of the
    // 200. The device completes its requests in its worker, not in an
    // interrupt that may land in this VM's PID 1, whose context no BPF
    // program sees (42 of 200 lost so in a CI run with direct I/O under
    // the loop). The summary counts every device's: beside a compiler
    // loop, vda's requests open at the start or end too.
    let stats = stats_line(&out);
    let untracked = stat(&out, "io_untracked");
    let requests = sysfs.reads + sysfs.writes + sysfs.discards + sysfs.flushes;
    let unseen = requests.saturating_sub(all.len() as u64);
    assert!(
        all.len() as u64 <= requests && unseen <= untracked && unseen <= 4,
        "one marker per request sysfs counts, the rest said: {stats}"
    );
    assert!(
        reads.len() as u64 + untracked >= 200 && reads.len() <= 200,
        "every read is a marker on the reading thread, or said: {} of 200",
        reads.len()
    );
    for d in &reads {
        let latency = d["endTime"].as_f64().unwrap() - d["startTime"].as_f64().unwrap();
        assert!(latency > 0.0, "non-zero latency: {d}");
        assert_eq!(d["bytes"], 4096, "{d}");
    }
    let counters = profile.json["counters"].as_array().unwrap();
    let c = counters
        .iter()
        .find(|c| c["name"] == format!("Disk read: {}", disk.name))
        .expect("a read counter for the device");
    let counted: f64 = c["samples"]["count"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .sum();
    eprintln!(
        "odirect: counter {counted} bytes, sysfs {} bytes",
        sysfs.read_sectors * 512
    );
    assert_eq!(
        counted,
        (sysfs.read_sectors * 512) as f64,
        "the counter adds up to what sysfs counted"
    );
}

/// Spin `n` threads for `d`; returns once they stopped spinning, with the
/// threads still alive (their CPU time is read from their schedstat, which
/// vanishes with them) and a closure that lets them end.
fn spin_threads(n: usize, d: std::time::Duration) -> impl FnOnce() {
    let spun = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
    let (release, parked) = std::sync::mpsc::channel::<()>();
    let parked = std::sync::Arc::new(std::sync::Mutex::new(parked));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (spun, parked) = (spun.clone(), parked.clone());
            std::thread::spawn(move || {
                let end = std::time::Instant::now() + d;
                let mut x = 1u64;
                while std::time::Instant::now() < end {
                    for i in 0..10_000u64 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(i),
                        );
                    }
                }
                spun.wait();
                let _ = parked.lock().unwrap().recv();
            })
        })
        .collect();
    if n == 0 {
        std::thread::sleep(d);
    }
    spun.wait();
    move || {
        drop(release);
        for h in handles {
            h.join().unwrap();
        }
    }
}

/// All CPUs' steal time so far, in USER_HZ ticks (/proc/stat's eighth column).
fn steal_jiffies() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    stat.lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// USER_HZ, the unit of /proc/stat: 100 on every architecture Linux has
/// (the kernel fixes it for userspace, whatever its own HZ).
fn clock_ticks() -> u64 {
    100
}

/// Check the machine CPU usage counter against the kernel's per-task CPU
/// accounting (every task's schedstat, an oracle independent of the
/// /proc/stat jiffies the counter reads) over three phases of known, different
/// load: idle, one spinning thread, one per CPU. A counter stuck at any value
/// fails at least one phase.
#[test]
fn cpu_usage_counter_follows_the_load() {
    if !can_record("cpu_usage_counter_follows_the_load") {
        return;
    }
    let dir = scratch("cpuusage");
    let out_path = dir.join("p.json.gz");
    let ncpu = std::thread::available_parallelism().unwrap().get();
    let phase = std::time::Duration::from_millis(1500);
    let rec = record_started(
        &["-a", "-q", "--no-off-cpu", "--no-io", "-d", "60"],
        &out_path,
    );
    // (start ns, end ns, busy % of all CPUs per the kernel's task accounting)
    let mut phases = Vec::new();
    for spinners in [0, 1, ncpu] {
        // Tasks that start and end inside a phase are in no reading of
        // /proc, but their CPU is in the counter: CI once saw 93 % against
        // 70 % beside a compiler. A phase in which tasks other than the
        // spinners were created (the kernel's last pid moved more) is
        // measured again; the oracle holds for what stays.
        for attempt in 1.. {
            let (p0, t0, c0, s0) = (
                last_pid(),
                monotonic_ns(),
                all_tasks_cpu_ns(),
                steal_jiffies(),
            );
            let release = spin_threads(spinners, phase);
            let (t1, c1, p1, s1) = (
                monotonic_ns(),
                all_tasks_cpu_ns(),
                last_pid(),
                steal_jiffies(),
            );
            release();
            let others = p1.wrapping_sub(p0).saturating_sub(spinners as u64);
            if others == 0 || attempt == 5 {
                // Steal (the host ran something else) is busy in the counter
                // and in no task's runtime: its share of the phase, in points.
                let steal = (s1 - s0) as f64 * 1e9 / clock_ticks() as f64 * 100.0
                    / ((t1 - t0) as f64 * ncpu as f64);
                eprintln!("cpu usage, {spinners} spinner(s): attempt {attempt}, {others} other tasks created, steal {steal:.1} points");
                phases.push((
                    spinners,
                    t0,
                    t1,
                    cpu_ns_between(&c0, &c1) as f64 * 100.0 / ((t1 - t0) as f64 * ncpu as f64),
                    others,
                    steal,
                ));
                break;
            }
        }
    }
    // SAFETY: a plain kill(2) of our own child: SIGTERM ends the recording.
    unsafe { kill(rec.id() as i32, 15) };
    let out = wait_with_timeout(rec, std::time::Duration::from_secs(30), "sysprof record -a");
    assert_success(&out);
    let profile = Profile::load(&out_path);
    let t0 = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let ms = |ns: u64| (ns as f64 - t0 as f64) / 1e6;
    let counters = profile.json["counters"].as_array().unwrap();
    // The machine's counters hang under the machine's own track, which opens visible.
    let cpu = counters
        .iter()
        .find(|c| c["name"] == "CPU usage" && c["pid"] == "0")
        .expect("machine CPU usage counter");
    let machine = profile.json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t["pid"] == "0" && t["name"] == "Machine")
        .expect("the machine's track");
    assert_eq!(cpu["mainThreadIndex"], machine);
    assert!(
        profile.json["meta"]["initialVisibleThreads"]
            .as_array()
            .unwrap()
            .contains(&machine.into()),
        "the machine's track opens visible"
    );
    let times: Vec<f64> = cpu["samples"]["time"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let counts: Vec<f64> = cpu["samples"]["count"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // Written as busy CPU-ms per interval, which the front end divides by the
    // interval into a share (its `rate` shown as a percentage).
    assert_eq!(cpu["display"]["tooltipRows"][0]["source"], "rate");
    for (spinners, start, end, oracle, others, steal) in phases {
        // Each value covers (previous sample, this sample]: keep those inside the phase.
        let inside: Vec<f64> = (1..times.len())
            .filter(|&i| times[i - 1] >= ms(start) && times[i] <= ms(end))
            .map(|i| counts[i] / (times[i] - times[i - 1]) * 100.0)
            .collect();
        let avg = inside.iter().sum::<f64>() / inside.len().max(1) as f64;
        eprintln!("cpu usage, {spinners} spinner(s): counter {avg:.1}% over {} samples, task accounting {oracle:.1}%", inside.len());
        assert!(
            inside.len() >= 10,
            "{spinners} spinners: only {} counter samples inside the phase",
            inside.len()
        );
        // Jiffies (the counter) vs. exact task runtimes (the oracle): ticks
        // quantize each 100 ms sample, and interrupt time is busy in
        // /proc/stat but in no task's runtime. Measured differences stay
        // under 1 point; a stuck or wrong counter is off by 25 or more.
        // Where other tasks came and went in every attempt (beside a
        // compiler loop), their CPU is in the counter and in no reading
        // the oracle has: there the oracle is a floor (65.8 % against a
        // counter of 100 % beside gcc), and the counter a percentage.
        if others == 0 {
            assert!(avg - oracle <= 5.0 + steal && oracle - avg <= 5.0, "{spinners} spinners: counter {avg:.1}% vs task accounting {oracle:.1}% (steal {steal:.1} points)");
        } else {
            assert!(avg >= oracle - 5.0 && avg <= 101.0, "{spinners} spinners, {others} other tasks came and went: counter {avg:.1}% vs at least {oracle:.1}% by task accounting");
        }
    }
}

/// A spinner thread's own measurements (see spinners.c).
struct Spinner {
    tid: u64,
    /// schedstat run_delay over its run, ns.
    run_delay_ns: f64,
    /// schedstat pcount over its run: the times it was put on a CPU, each
    /// the end of one wait.
    waits: u64,
    /// Wall time minus its own CPU time between in_t0 and in_t1, ns.
    off_cpu_ns: f64,
    /// Just before and after its two schedstat reads: every wait counted
    /// in `run_delay_ns` lies in [t0, t1].
    t0_ns: u64,
    t1_ns: u64,
    /// Just after and before them: every wait in [in_t0, in_t1] is counted.
    in_t0_ns: u64,
    in_t1_ns: u64,
}

/// The `spinner=TID key=value...` lines of the spinners workload.
fn spinner_oracles(stdout: &[u8]) -> Vec<Spinner> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with("spinner="))
        .map(|l| {
            let kv: std::collections::HashMap<&str, u64> = l
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k, v.parse().unwrap()))
                .collect();
            Spinner {
                tid: kv["spinner"],
                run_delay_ns: kv["run_delay_ns"] as f64,
                waits: kv["waits"],
                off_cpu_ns: kv["wall_minus_cpu_ns"] as f64,
                t0_ns: kv["t0_ns"],
                t1_ns: kv["t1_ns"],
                in_t0_ns: kv["in_t0_ns"],
                in_t1_ns: kv["in_t1_ns"],
            }
        })
        .collect()
}

/// Check that with more spinning threads than CPUs their off-CPU time is
/// "preempted" and adds up, per thread, to the time the kernel says it
/// waited for a CPU (schedstat's run_delay, read by the thread before and
/// after it spun), and that their markers carry a run delay. A spinner can
/// be preempted while it reads schedstat (on a loaded machine it is: 4.7 ms
/// once), so the profile's preempted time is clipped to two spans: the one
/// just inside the reads (every wait there is counted: it cannot exceed
/// run_delay) and the one just outside them (every counted wait is there:
/// it cannot fall short of run_delay). The number of waits is checked the
/// same way against schedstat's pcount (the times the thread was put on a
/// CPU), so a single lost wait fails the test whatever its length.
/// (Wall time minus CPU time is printed beside: on a VM it also holds the
/// time the host ran another guest's vCPU while the thread was running,
/// which is no wait in this one.)
#[test]
fn preempted_spinners_off_cpu_time_matches_their_run_delay() {
    if !can_record("preempted_spinners_off_cpu_time_matches_their_run_delay") {
        return;
    }
    let dir = scratch("spinners");
    let exe = build_c("spinners", &dir.join("spinners"), &[]);
    let ncpu = std::thread::available_parallelism().unwrap().get();
    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--", exe.to_str().unwrap(), &(ncpu + 1).to_string(), "2.0"],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let oracles = spinner_oracles(&out.stdout);
    assert_eq!(oracles.len(), ncpu + 1, "every spinner reported");
    let profile = Profile::load(&out_path);
    let start_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let cats = profile.categories();
    let mut total = 0;
    let mut preempted_with_delay = 0;
    let mut total_run_delay_ms = 0.0;
    let ms = |t_ns: u64| (t_ns - start_ns) as f64 / 1e6;
    for o in oracles {
        let t = profile.thread(pid, o.tid).expect("a spinner thread");
        assert_eq!(t.name(), "spinner");
        // Off-CPU time by reason, its intervals clipped to [lo, hi].
        let by_reason_in = |lo: f64, hi: f64| {
            let mut by_reason: std::collections::BTreeMap<String, f64> = Default::default();
            for ((s, w), at) in t.stacks(&cats).iter().zip(t.weights()).zip(t.times()) {
                let leaf = leaf(s);
                if leaf.starts_with("[off-CPU") {
                    let inside = (at + w).min(hi) - at.max(lo);
                    *by_reason.entry(leaf.to_string()).or_default() += inside.max(0.0);
                }
            }
            by_reason
        };
        const PREEMPTED: &str = "[off-CPU: preempted, waiting for a CPU]";
        let (outer, inner) = (
            by_reason_in(ms(o.t0_ns), ms(o.t1_ns)),
            by_reason_in(ms(o.in_t0_ns), ms(o.in_t1_ns)),
        );
        let preempted_outer = outer.get(PREEMPTED).copied().unwrap_or(0.0);
        let preempted_inner = inner.get(PREEMPTED).copied().unwrap_or(0.0);
        let off_inner: f64 = inner.values().sum();
        let (oracle_ms, run_delay_ms) = (o.off_cpu_ns / 1e6, o.run_delay_ns / 1e6);
        eprintln!(
            "spinner {}: preempted {preempted_inner:.1} ms inside its reads, {preempted_outer:.1} ms outside them; run_delay {run_delay_ms:.1} ms over {} waits, own clocks {oracle_ms:.1} ms; {inner:?}",
            o.tid, o.waits
        );
        total_run_delay_ms += run_delay_ms;
        assert!(
            off_inner - preempted_inner <= 1.0,
            "while it spins a spinner only waits for a CPU: {inner:?}"
        );
        // Its waits, each ended by a switch in: an off-CPU marker is one,
        // a run of folded short waits counts them. Those that end inside
        // the reads are all in pcount; pcount's are all outside them.
        let waits_ending_in = |lo: f64, hi: f64, whole_run: bool| -> u64 {
            t.markers()
                .iter()
                .map(|(_, d)| {
                    let (start, end) = (
                        d["startTime"].as_f64().unwrap_or(f64::NAN),
                        d["endTime"].as_f64().unwrap_or(f64::NAN),
                    );
                    match d["type"].as_str() {
                        Some("OffCpu") if end >= lo && end <= hi => 1,
                        // A run's waits end between its start and its end.
                        Some("ShortWaits")
                            if (whole_run && start >= lo && end <= hi)
                                || (!whole_run && end >= lo && start <= hi) =>
                        {
                            d["count"].as_u64().unwrap_or(0)
                        }
                        _ => 0,
                    }
                })
                .sum()
        };
        let (waits_inner, waits_outer) = (
            waits_ending_in(ms(o.in_t0_ns), ms(o.in_t1_ns), true),
            waits_ending_in(ms(o.t0_ns), ms(o.t1_ns), false),
        );
        eprintln!("spinner {}: {waits_inner} waits end inside its reads, {waits_outer} outside them; pcount {}", o.tid, o.waits);
        assert!(
            waits_inner <= o.waits && waits_outer >= o.waits,
            "spinner {}: {waits_inner} waits end inside its schedstat reads and {waits_outer} outside them vs pcount {}; {}",
            o.tid,
            o.waits,
            stats_line(&out)
        );
        // The scheduler times a wait with its run queue's clock, read when
        // __schedule starts (and on another CPU's queue when the thread
        // moves), the profile with the switch's own: they differ by a few
        // microseconds a wait, the profile's always the shorter (2-19 us a
        // wait over 120 spinners here; 4 ms of 200 waits at most). So 25 us
        // a wait, and NTP's slew of the monotonic clock (0.2 %). A lost
        // wait is caught by the count above.
        let slack = run_delay_ms * 0.002 + o.waits as f64 * 0.025 + 1.0;
        assert!(
            preempted_inner <= run_delay_ms + slack && preempted_outer >= run_delay_ms - slack,
            "spinner {}: preempted {preempted_inner:.1} ms inside its schedstat reads and {preempted_outer:.1} ms outside them vs run_delay {run_delay_ms:.1} ms over {} waits (own clocks {oracle_ms:.1} ms); {}",
            o.tid,
            o.waits,
            stats_line(&out)
        );
        let (lo, hi) = (ms(o.in_t0_ns), ms(o.in_t1_ns));
        for (_, d) in t.markers() {
            // Inside the span it spun: before it a spinner waits for its
            // start and after it for its join (sleeping, rightly; seen in
            // 1 of 3 runs beside a busy CPU).
            let inside = d["startTime"].as_f64().is_some_and(|s| s >= lo)
                && d["endTime"].as_f64().is_some_and(|e| e <= hi);
            if d["type"] != "OffCpu" || !inside {
                continue;
            }
            total += 1;
            if d["reason"] == "preempted (runnable)" && d["runDelay"].as_f64().unwrap() > 0.0 {
                preempted_with_delay += 1;
            }
        }
    }
    eprintln!(
        "spinners: {preempted_with_delay} of {total} off-CPU markers preempted with a run delay"
    );
    // One spinner more than CPUs for 2 s: about 2 s of waiting among them.
    // Not each: the balancer can leave one alone on a CPU for most of it
    // (54 ms of run delay once, 1 run in 6, on this VM's 6.18 kernel).
    assert!(
        total_run_delay_ms >= 500.0,
        "the spinners must compete for the CPUs: {total_run_delay_ms:.1} ms waiting among them"
    );
    assert!(total >= 10, "spinners wait for a CPU: {total} markers");
    assert!(
        preempted_with_delay == total,
        "every marker of a spinner is a preemption with a run delay"
    );
}

/// Check that a woken thread's run delay is the one the kernel counts: the
/// server of `syncserve` (woken by turns by its client's requests and by
/// the disk's completions, ~800 times) must carry, on its off-CPU markers
/// that end inside its loop (`--off-cpu-threshold 0`: every wait one), the
/// run delay its own schedstat counted over the loop, within 5 us a wait
/// (a switch's tracepoint comes a pick after the run queue's clock is
/// read) and 2 %. A wakeup is sent (sched_waking) and then lands on the
/// wakee's run queue (sched_wakeup), on another CPU after an interrupt to
/// it: timed from the sending, the profile's run delay was 12 us a wait
/// longer than the kernel's (9.6-11.0 ms over 784-884 waits; 4.4 ms by
/// schedstat on an idle VM), and that time was taken from the I/O the
/// thread was blocked on.
#[test]
fn woken_threads_run_delay_matches_their_schedstat() {
    if !can_record("woken_threads_run_delay_matches_their_schedstat") {
        return;
    }
    let dir = scratch("woken-run-delay");
    let exe = build_c("syncserve", &dir.join("syncserve"), &[]);
    let data = dir.join("data");
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--off-cpu-threshold",
            "0",
            "--",
            exe.to_str().unwrap(),
            data.to_str().unwrap(),
            "300",
        ],
        &out_path,
    );
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("syncserve printed no {k}"));
    let (pid, server) = (f("pid"), f("server"));
    let run_delay_ms = f("server_run_delay_ns") as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let start_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let ms = |t_ns: u64| (t_ns as f64 - start_ns as f64) / 1e6;
    let (lo, hi) = (ms(f("server_t0_ns")), ms(f("server_t1_ns")));
    let t = profile.thread(pid, server).expect("the server thread");
    let (mut profile_ms, mut waits, mut short_runs) = (0.0, 0u64, 0u64);
    for (_, d) in t.markers() {
        let end = d["endTime"].as_f64().unwrap_or(f64::NAN);
        match d["type"].as_str() {
            Some("OffCpu") if end >= lo && end <= hi => {
                profile_ms += d["runDelay"].as_f64().unwrap_or(0.0);
                waits += 1;
            }
            Some("ShortWaits") => short_runs += 1,
            _ => {}
        }
    }
    eprintln!(
        "server: run delay {profile_ms:.2} ms over {waits} waits in the profile, {run_delay_ms:.2} ms by its schedstat ({:+.1} us a wait)",
        1e3 * (profile_ms - run_delay_ms) / waits.max(1) as f64
    );
    assert_eq!(short_runs, 0, "at threshold 0 every wait is a marker");
    assert!(
        waits >= 500,
        "the server waits at every request and sync: {waits} waits"
    );
    let slack = 0.005 * waits as f64 + 0.02 * run_delay_ms + 0.5;
    assert!(
        (profile_ms - run_delay_ms).abs() <= slack,
        "the server's run delay: {profile_ms:.2} ms in the profile over {waits} waits, {run_delay_ms:.2} ms by its schedstat; {}",
        stats_line(&out)
    );
}

/// Check that a wait's run delay is drawn apart from the wait: `latewaker`'s
/// sleeper (nice 19, pinned beside a nice-0 spinner) sleeps 2 ms 150 times
/// and after each wakeup waits ~3.6 ms behind the spinner. At the default
/// threshold, each of its sleeps ending inside its loop must be an
/// "Off-CPU: sleeping" marker drawn to the wakeup's enqueue, followed at
/// once by a "Waiting for a CPU" marker to the wait's end (its `offCpu`),
/// as long as its `runDelay`; and the run delay the profile shows over the
/// loop (those markers, the delays under 0.1 ms left inside their waits,
/// preemptions) must be the sleeper's own schedstat run delay within 2 %
/// and 5 us a wait, most of it (75 %; 93 % here, the rest preemptions
/// while it works) in the drawn-apart markers. Before,
/// each sleep was one "sleeping" bar 5.6 ms long, of which 2 ms slept. The
/// call tree must hold the same run delay under its own leaf below
/// "[off-CPU: sleeping]" (within 1 %).
#[test]
fn a_woken_threads_wait_for_a_cpu_is_drawn_apart() {
    if !can_record("a_woken_threads_wait_for_a_cpu_is_drawn_apart") {
        return;
    }
    let dir = scratch("late-waker");
    let exe = build_c("latewaker", &dir.join("latewaker"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "150"], &out_path);
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("latewaker printed no {k}"));
    let (pid, sleeper) = (f("pid"), f("sleeper"));
    let run_delay_ms = f("run_delay_ns") as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let start_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let ms = |t_ns: u64| (t_ns as f64 - start_ns as f64) / 1e6;
    let (lo, hi) = (ms(f("t0_ns")), ms(f("t1_ns")));
    let t = profile.thread(pid, sleeper).expect("the sleeper thread");
    let markers = t.markers();
    let delays: Vec<(f64, f64)> = markers
        .iter()
        .filter(|(name, d)| d["type"] == "RunDelay" && name == "Waiting for a CPU")
        .map(|(_, d)| {
            (
                d["startTime"].as_f64().unwrap(),
                d["endTime"].as_f64().unwrap(),
            )
        })
        .collect();
    let (mut sleeps, mut split, mut drawn_apart_ms, mut profile_ms) = (0, 0, 0.0, 0.0);
    for (_, d) in &markers {
        let (start, end) = (
            d["startTime"].as_f64().unwrap(),
            d["endTime"].as_f64().unwrap(),
        );
        if !(end >= lo && end <= hi) {
            continue;
        }
        match (d["type"].as_str(), d["reason"].as_str()) {
            (Some("OffCpu"), Some("preempted (runnable)")) => profile_ms += end - start,
            (Some("OffCpu"), Some("sleeping")) => {
                sleeps += 1;
                let delay = d["runDelay"].as_f64().unwrap_or(0.0);
                profile_ms += delay;
                let drawn_end = d["drawnEndTime"].as_f64().unwrap();
                if drawn_end == end {
                    assert!(
                        delay < 0.1,
                        "a run delay of {delay} ms left inside its wait"
                    );
                    continue;
                }
                split += 1;
                // Drawn to the enqueue, then its delay to the wait's end
                // (the profile's times are in whole microseconds).
                assert!(
                    (end - delay - drawn_end).abs() < 2e-3,
                    "a wait [{start}, {end}] with {delay} ms of run delay drawn to {drawn_end}"
                );
                assert!(
                    delays
                        .iter()
                        .any(|&(s, e)| (s - drawn_end).abs() < 1e-6 && (e - end).abs() < 2e-3),
                    "no \"Waiting for a CPU\" marker over [{drawn_end}, {end}]"
                );
                drawn_apart_ms += delay;
            }
            (Some("ShortWaits"), _) => profile_ms += d["offCpu"].as_f64().unwrap_or(0.0),
            _ => {}
        }
    }
    eprintln!(
        "latewaker: {sleeps} sleeps, {split} drawn apart from their run delay ({drawn_apart_ms:.1} ms); run delay {profile_ms:.1} ms in the profile, {run_delay_ms:.1} ms by its schedstat"
    );
    assert!(sleeps >= 145, "one marker per sleep: {sleeps} of 150");
    let slack = 0.005 * sleeps as f64 + 0.02 * run_delay_ms + 0.5;
    assert!(
        (profile_ms - run_delay_ms).abs() <= slack,
        "the sleeper's run delay: {profile_ms:.2} ms in the profile, {run_delay_ms:.2} ms by its schedstat; {}",
        stats_line(&out)
    );
    // The call tree splits them alike: under the sleep's leaf, its own.
    let cats = profile.categories();
    let mut in_tree_ms = 0.0;
    for ((s, w), at) in t.stacks(&cats).iter().zip(t.weights()).zip(t.times()) {
        if leaf(s) == RUN_DELAY_LEAF && at >= lo && at + w <= hi {
            assert_eq!(
                reason(s),
                Some("[off-CPU: sleeping]"),
                "under its reason: {s:?}"
            );
            in_tree_ms += w;
        }
    }
    eprintln!("latewaker: {in_tree_ms:.1} ms under {RUN_DELAY_LEAF}");
    assert!(
        (in_tree_ms - drawn_apart_ms).abs() <= 0.01 * drawn_apart_ms + 0.5,
        "{in_tree_ms:.1} ms under {RUN_DELAY_LEAF} in the call tree, {drawn_apart_ms:.1} ms in markers"
    );
    assert!(
        drawn_apart_ms >= 0.75 * run_delay_ms,
        "{drawn_apart_ms:.1} ms of its {run_delay_ms:.1} ms run delay drawn apart ({split} of {sleeps} sleeps)"
    );
}

/// Check that waits too short to be sent one by one (under 0.1 ms: the
/// kernel sums them) keep the stack they left the CPU with: the client of
/// `roundtrips` (3,000 round trips with a server process that computes
/// 20 us each) waits only in its read(2) of the reply, so at least 90 % of
/// its off-CPU time over its loop that is no preemption must be under a
/// stack through its `main` and the kernel's read path, none of it under
/// "[short off-CPU waits: no stack]" but what came from several places.
/// Before, all of it was there (the kernel's folded sums carried no stack).
#[test]
fn short_waits_keep_the_stack_they_left_from() {
    if !can_record("short_waits_keep_the_stack_they_left_from") {
        return;
    }
    let dir = scratch("short-waits-stack");
    let exe = build_c("roundtrips", &dir.join("roundtrips"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--", exe.to_str().unwrap(), "3000", "20", "10", "300"],
        &out_path,
    );
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("roundtrips printed no {k}"));
    let client = f("client");
    let profile = Profile::load(&out_path);
    let start_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_u64()
        .unwrap();
    let ms = |t_ns: u64| (t_ns as f64 - start_ns as f64) / 1e6;
    let (lo, hi) = (ms(f("p1_t0_ns")), ms(f("p1_t1_ns")));
    let t = profile
        .threads()
        .into_iter()
        .find(|t| t.tid() == client)
        .expect("the client's track");
    let cats = profile.categories();
    let (mut waits, mut placed, mut unplaced) = (0.0, 0.0, 0.0);
    for ((s, w), at) in t.stacks(&cats).iter().zip(t.weights()).zip(t.times()) {
        let leaf = leaf(s);
        if !leaf.starts_with("[off-CPU") || leaf.contains("preempted") || at < lo || at > hi {
            continue;
        }
        waits += w;
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        if names.contains(&"main") && names.iter().any(|n| n.contains("read")) {
            placed += w;
        }
        if names.contains(&"[short off-CPU waits: no stack]") {
            unplaced += w;
        }
    }
    eprintln!(
        "client: {waits:.1} ms of waits over its loop, {placed:.1} under main's read, {unplaced:.1} with no stack; {}",
        stats_line(&out)
    );
    assert!(waits >= 50.0, "3,000 round trips wait: {waits:.1} ms");
    assert!(
        placed >= 0.9 * waits,
        "{placed:.1} of {waits:.1} ms of the client's short waits under its read ({unplaced:.1} with no stack)"
    );
}

/// Off-CPU samples, I/O markers, off-CPU markers and the weight type of the
/// reading thread in a recording of 100 O_DIRECT reads from `disk`, each
/// after a 2 ms sleep, with `flags`.
fn direct_reads_with(
    flags: &[&str],
    exe: &std::path::Path,
    disk: &LoopDevice,
    out_path: &std::path::Path,
) -> (usize, usize, usize, String) {
    let mut args = flags.to_vec();
    args.extend([
        "--",
        exe.to_str().unwrap(),
        disk.path.to_str().unwrap(),
        "100",
        "2000",
    ]);
    let out = record(&args, out_path);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(out_path);
    let t = profile
        .thread(pid, tid)
        .expect("the reading thread is in the profile");
    let off_cpu = t
        .stacks(&profile.categories())
        .iter()
        .filter(|s| leaf(s).starts_with("[off-CPU"))
        .count();
    let markers = t.markers();
    let io = markers
        .iter()
        .filter(|(_, d)| d["type"] == "BlockIo")
        .count();
    let off = markers
        .iter()
        .filter(|(_, d)| d["type"] == "OffCpu")
        .count();
    (
        off_cpu,
        io,
        off,
        format!(
            "{}; {}",
            t.t["samples"]["weightType"].as_str().unwrap(),
            stats_line(&out)
        ),
    )
}

/// Check that --no-off-cpu and --no-io turn the tracing off: a thread that
/// sleeps 2 ms before each of 100 disk reads has off-CPU samples, off-CPU
/// markers and I/O markers without the flags, none of them (and unweighted
/// samples) with both, and each flag turns off only its own part.
#[test]
fn off_cpu_and_io_can_be_turned_off() {
    if !can_record("off_cpu_and_io_can_be_turned_off") {
        return;
    }
    let dir = scratch("nooffcpu");
    let exe = build_c("odirect", &dir.join("odirect"), &[]);
    let disk = LoopDevice::through_page_cache(&dir, 16);
    let (off_cpu, io, off_markers, weight) =
        direct_reads_with(&[], &exe, &disk, &dir.join("on.json.gz"));
    eprintln!("tracing on: {off_cpu} off-CPU samples, {io} I/O markers, {off_markers} off-CPU markers, weights {weight}");
    // 95, not 100: a completion can still land where no program runs (in
    // the context of this VM's PID 1; see LoopDevice::through_page_cache).
    // Such a loss is counted: its request starts again with its entry
    // still there, or the entry is left at the end (io_untracked).
    let untracked = |stats: &str| {
        stats
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("io_untracked="))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap()
    };
    assert!(
        off_cpu >= 100 && io >= 95 && off_markers >= 100,
        "the control run must see the sleeps and the reads: {io} I/O markers; {weight}"
    );
    assert!(
        io + untracked(&weight) >= 100,
        "a read without a marker is counted: {io} I/O markers; {weight}"
    );
    assert!(weight.starts_with("tracing-ms;"), "{weight}");
    let (off_cpu, io, off_markers, weight) = direct_reads_with(
        &["--no-off-cpu", "--no-io"],
        &exe,
        &disk,
        &dir.join("off.json.gz"),
    );
    eprintln!("tracing off: {off_cpu} off-CPU samples, {io} I/O markers, {off_markers} off-CPU markers, weights {weight}");
    assert_eq!((off_cpu, io, off_markers), (0, 0, 0), "{weight}");
    assert!(weight.starts_with("samples;"), "{weight}");
    // Each flag alone turns off only its own part.
    let (off_cpu, io, _, stats) =
        direct_reads_with(&["--no-io"], &exe, &disk, &dir.join("noio.json.gz"));
    assert!(
        off_cpu >= 100 && io == 0,
        "--no-io: {off_cpu} off-CPU samples, {io} I/O markers; {stats}"
    );
    let (off_cpu, io, _, stats) =
        direct_reads_with(&["--no-off-cpu"], &exe, &disk, &dir.join("nooff.json.gz"));
    // The same allowance, each loss counted as untracked.
    assert!(
        off_cpu == 0 && io >= 95 && io + untracked(&stats) >= 100,
        "--no-off-cpu: {off_cpu} off-CPU samples, {io} I/O markers; {stats}"
    );
}

/// Check that --per-cpu adds one track per CPU whose on-CPU slices do not
/// overlap and, summed over the CPUs, give the spinners' CPU time (±10%).
#[test]
fn per_cpu_tracks_show_who_ran() {
    if !can_record("per_cpu_tracks_show_who_ran") {
        return;
    }
    let dir = scratch("percpu");
    let exe = build_c("spinners", &dir.join("spinners"), &[]);
    let ncpu = std::thread::available_parallelism().unwrap().get();
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--per-cpu",
            "--",
            exe.to_str().unwrap(),
            &(ncpu + 1).to_string(),
            "1.5",
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let cpu_ms = field(&out.stdout, "cpu_ns").unwrap() as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let mut spinner_ms = 0.0;
    for cpu in 0..ncpu {
        let track = profile
            .threads()
            .into_iter()
            .find(|t| t.name() == format!("CPU {cpu}"))
            .expect("a track per CPU");
        let mut last_end = f64::MIN;
        for (_, d) in track.markers() {
            let (s, e) = (
                d["startTime"].as_f64().unwrap(),
                d["endTime"].as_f64().unwrap(),
            );
            assert!(
                s >= last_end - 1.1,
                "slices on CPU {cpu} overlap: {s} < {last_end}"
            );
            last_end = e;
            if d["pid"].as_str() == Some(pid.to_string().as_str()) {
                spinner_ms += e - s;
            }
        }
    }
    eprintln!("per-cpu: spinner slices {spinner_ms:.0} ms, spinners' CPU time {cpu_ms:.0} ms");
    assert!(cpu_ms >= 1000.0, "the spinners ran: {cpu_ms:.0} ms of CPU");
    assert!(
        (spinner_ms - cpu_ms).abs() <= cpu_ms * 0.10,
        "slices {spinner_ms:.0} ms vs CPU time {cpu_ms:.0} ms"
    );
}

/// The last pid the kernel handed out (`/proc/loadavg`'s last field):
/// counts every task created since an earlier reading.
fn last_pid() -> u64 {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Check that block requests the profile cannot show are said on the
/// summary's second line, with the count `-v` gives as io_untracked: a
/// reader keeps O_DIRECT reads of a loop device going while `record -a`
/// starts and stops, so requests begun before the start or in flight at
/// the end exist in every run (the run is repeated, at most 5 times, until
/// one has some; that one must say so).
#[test]
fn requests_seen_at_one_end_are_said_on_the_summary() {
    if !can_record("requests_seen_at_one_end_are_said_on_the_summary") {
        return;
    }
    let dir = scratch("untracked");
    let exe = build_c("odirect", &dir.join("odirect"), &[]);
    let disk = LoopDevice::new(&dir, 16);
    let reader = Background::start(&exe, &[disk.path.to_str().unwrap(), "100000000"]);
    let mut seen = 0;
    for attempt in 1..=5 {
        let out = record(&["-a", "-d", "0.5", "--no-off-cpu"], &dir.join("p.json.gz"));
        assert_success(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let stats = stats_line(&out);
        let untracked: u64 = stats
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("io_untracked="))
            .and_then(|v| v.parse().ok())
            .expect("io_untracked in -v's stats");
        let said = stderr
            .lines()
            .find(|l| l.contains("block I/O requests seen at one end only"));
        eprintln!("attempt {attempt}: io_untracked={untracked}; said: {said:?}");
        if untracked == 0 {
            assert!(said.is_none(), "nothing untracked, nothing said: {stderr}");
            continue;
        }
        let said = said.unwrap_or_else(|| {
            panic!("{untracked} untracked requests, not said on the summary: {stderr}")
        });
        assert!(
            said.starts_with("sysprof: ")
                && said.contains(&format!("{untracked} block I/O requests")),
            "{said}"
        );
        seen += 1;
        break;
    }
    drop(reader);
    assert!(
        seen == 1,
        "5 recordings beside continuous reads, none with a request seen at one end only"
    );
}

/// Check that a thread asleep since before the recording began is off-CPU,
/// sleeping, from the recording's first moment until it woke (its own
/// CLOCK_MONOTONIC as its nanosleep returned), not blank up to its wakeup:
/// no switch-out of it was ever traced, so its interval opens at the
/// range's start (the front end hatched it as "no data" until then).
#[test]
fn a_thread_asleep_before_the_recording_is_off_cpu_from_its_start() {
    use std::io::BufRead;
    if !can_record("a_thread_asleep_before_the_recording_is_off_cpu_from_its_start") {
        return;
    }
    let dir = scratch("longnap");
    let exe = build_c("longnap", &dir.join("longnap"), &[]);
    let out_path = dir.join("p.json.gz");
    // Long enough that sysprof attaches while it sleeps, beside any load.
    let mut nap = std::process::Command::new(&exe)
        .arg("4000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(nap.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let pid = field(first.as_bytes(), "pid").expect("longnap's pid");
    let started_ns = monotonic_ns();
    let rec = record_started(&["-p", &pid.to_string(), "-d", "6", "--no-io"], &out_path);
    let attached_ms = (monotonic_ns() - started_ns) as f64 / 1e6;
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(nap.wait().unwrap().success());
    let out = rec.wait_with_output().unwrap();
    assert_success(&out);
    let woke_ns = field(rest.as_bytes(), "woke_ns").expect("longnap's wake time") as f64;
    let profile = Profile::load(&out_path);
    let meta = &profile.json["meta"];
    let anchor_ns = meta["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .expect("the profile's clock anchor");
    let start_ms = meta["profilingStartTime"].as_f64().unwrap_or(0.0);
    let woke_ms = (woke_ns - anchor_ns) / 1e6;
    assert!(woke_ms > start_ms + 50.0, "longnap woke {:.1} ms after the range began (attaching took {attached_ms:.0} ms): it must sleep longer", woke_ms - start_ms);
    let t = profile.thread(pid, pid).expect("longnap's thread");
    let naps: Vec<_> = t
        .markers()
        .into_iter()
        .filter(|(_, d)| d["type"] == "OffCpu" && d["reason"] == "sleeping")
        .collect();
    let nap_marker = naps
        .iter()
        .find(|(_, d)| d["startTime"].as_f64().unwrap() <= start_ms + 1.0);
    eprintln!(
        "range {start_ms:.1} ms, woke at {woke_ms:.1} ms; sleeping markers (start, end): {:?}",
        naps.iter()
            .map(|(_, d)| (
                d["startTime"].as_f64().unwrap(),
                d["endTime"].as_f64().unwrap()
            ))
            .collect::<Vec<_>>()
    );
    let (_, d) = nap_marker.expect("a sleeping interval from the range's start");
    let end_ms = d["endTime"].as_f64().unwrap();
    // It was switched in before it read its clock, and beside a load may be
    // preempted for a tick or two in between.
    assert!(
        (woke_ms - 20.0..=woke_ms).contains(&end_ms),
        "the sleep ends at its wakeup: marker ends {end_ms:.1} ms, it woke at {woke_ms:.1} ms"
    );
    // The samples say the same: off-CPU weight from the start to the wakeup.
    let cats = profile.categories();
    let asleep_ms: f64 = t
        .stacks(&cats)
        .iter()
        .zip(t.weights())
        .zip(t.times())
        .filter(|((s, _), time)| {
            reason(s) == Some("[off-CPU: sleeping]") && *time <= start_ms + 1.0
        })
        .map(|((_, w), _)| w)
        .sum();
    assert!(
        asleep_ms >= woke_ms - start_ms - 20.0,
        "{asleep_ms:.1} ms asleep from the start, it woke {:.1} ms in",
        woke_ms - start_ms
    );
}

/// Check that a wait's stack is the one it waited with when another place
/// looks the same: `places` sleeps from nap_a and nap_b (3 ms each), then
/// from nap_c and nap_d (200 µs each, folded in the kernel), the two of
/// each pair the same code at the same depth with the same locals, so the
/// same user registers at the system call; only their return addresses
/// differ. The tracer reuses a stack sent before for the same place
/// (ARCHITECTURE 45); the off-CPU time under each function must be the
/// time the program measured around its calls (CLOCK_MONOTONIC), within
/// 5 % (10 % and 2 ms for the short ones, whose sum folds the wakeup's
/// run delay the same way for both). Sharing one place's stack, nap_b's
/// waits were nap_a's.
#[test]
fn waits_from_look_alike_places_keep_their_own_stacks() {
    let test = "waits_from_look_alike_places_keep_their_own_stacks";
    if !can_record(test) {
        return;
    }
    let dir = scratch("places");
    let exe = build_c("places", &dir.join("places"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(&["--no-io", "--", exe.to_str().unwrap(), "1.5"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("places printed its pid");
    let measured: Vec<f64> = ["a_ns", "b_ns", "c_ns", "d_ns"]
        .iter()
        .map(|k| field(&out.stdout, k).expect("places printed its times") as f64 / 1e6)
        .collect();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile.thread(pid, pid).expect("the places thread");
    let mut got = [0.0f64; 4];
    let mut both = 0usize;
    for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
        if !s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")) {
            continue;
        }
        let under: Vec<usize> = ["nap_a", "nap_b", "nap_c", "nap_d"]
            .iter()
            .enumerate()
            .filter(|(_, f)| s.iter().any(|(n, _)| n == *f))
            .map(|(i, _)| i)
            .collect();
        match under[..] {
            [i] => got[i] += w,
            [] => {}
            _ => both += 1,
        }
    }
    eprintln!(
        "places: off-CPU ms under nap_a/b/c/d {:.1} / {:.1} / {:.1} / {:.1}, measured {:.1} / {:.1} / {:.1} / {:.1}; {}",
        got[0], got[1], got[2], got[3], measured[0], measured[1], measured[2], measured[3],
        stats_line(&out)
    );
    assert_eq!(both, 0, "no stack holds two of the naps");
    for (i, name) in ["nap_a", "nap_b", "nap_c", "nap_d"].iter().enumerate() {
        let slack = if i < 2 {
            measured[i] * 0.05
        } else {
            (measured[i] * 0.10).max(2.0)
        };
        assert!(
            (got[i] - measured[i]).abs() <= slack,
            "{name}: {:.1} ms off-CPU under it, {:.1} ms measured around its calls",
            got[i],
            measured[i]
        );
    }
}

/// Check that short waits folded in the kernel keep their place when
/// longer waits from other places come after them: `oldplace` waits 40
/// times briefly in `short_nap` (folded into one run that names its place),
/// then 3 ms each in six other functions, then ends. With
/// `--call-graph dwarf-copy` every stack is a copy sent for its thread
/// alone, as every process's are while its tables load; userspace keeps a
/// thread's last few per slot, and the run, sent when the thread ended,
/// named a stack six places old: "no longer kept", and the short waits
/// under no function (beside pgbench, up to 75 such references of ~94,000
/// switches). The oracle is the program's own clock around its short naps:
/// the off-CPU time under `short_nap` is most of it (each nap runs a few
/// µs on the CPU around its wait).
#[test]
fn folded_short_waits_keep_their_place_after_later_places() {
    let test = "folded_short_waits_keep_their_place_after_later_places";
    if !can_record(test) {
        return;
    }
    let dir = scratch("oldplace");
    let exe = build_c("oldplace", &dir.join("oldplace"), &[]);
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--no-io",
            "--call-graph",
            "dwarf-copy",
            "--",
            exe.to_str().unwrap(),
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("oldplace printed its pid");
    let measured_ms =
        field(&out.stdout, "short_ns").expect("oldplace printed its time") as f64 / 1e6;
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile.thread(pid, pid).expect("the oldplace thread");
    let mut under_short = 0.0f64;
    let mut longs = 0.0f64;
    for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
        if !s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")) {
            continue;
        }
        if s.iter().any(|(n, _)| n == "short_nap") {
            under_short += w;
        } else if s.iter().any(|(n, _)| n.starts_with("long_")) {
            longs += w;
        }
    }
    eprintln!(
        "oldplace: {under_short:.2} ms off-CPU under short_nap, {measured_ms:.2} ms measured around it; \
         {longs:.1} ms under long_1..6; {}",
        stats_line(&out)
    );
    assert_eq!(
        stat(&out, "stacks_not_kept"),
        0,
        "every wait's place still kept when referred to"
    );
    assert!(
        under_short >= measured_ms * 0.6 && under_short <= measured_ms * 1.05,
        "{under_short:.2} ms off-CPU under short_nap, {measured_ms:.2} ms measured around its calls"
    );
    assert!(
        longs >= 6.0 * 3.0 * 0.95,
        "{longs:.1} ms under the six 3-ms naps"
    );
}
