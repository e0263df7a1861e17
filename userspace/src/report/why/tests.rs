//! Tests of `report --why`: small profiles, charged by hand.

use super::*;
use serde_json::Value;

fn thread(pid: u32, tid: u32, name: &str, markers: Vec<(f64, f64, Value)>) -> Value {
    serde_json::json!({
        "pid": pid.to_string(), "tid": tid, "name": name, "processName": "p",
        "markers": {
            "data": markers.iter().map(|m| m.2.clone()).collect::<Vec<_>>(),
            "startTime": markers.iter().map(|m| m.0).collect::<Vec<_>>(),
            "endTime": markers.iter().map(|m| m.1).collect::<Vec<_>>(),
        },
        "samples": { "length": 0, "stack": [], "time": [] },
    })
}

fn off(reason: &str, run_delay: f64, waker: Option<u32>, context: Option<&str>) -> Value {
    serde_json::json!({ "type": "OffCpu", "reason": reason, "runDelay": run_delay, "wakerTid": waker, "wakerContext": context })
}

/// A per-CPU track of CPU `n` with these slices (OnCpu or CpuIdle data).
fn cpu_track(n: u32, slices: Vec<(f64, f64, Value)>) -> Value {
    let mut t = thread(
        0,
        crate::profile::CPU_TRACK_TID_BASE + n,
        &format!("CPU {n}"),
        slices,
    );
    t["pid"] = crate::profile::MACHINE_PID.into();
    t
}

/// A slice of `tid` running.
fn on(tid: u32) -> Value {
    serde_json::json!({ "type": "OnCpu", "tid": tid })
}

/// Check that `why` charges `ms` to `tid` as `what`.
fn assert_charged(why: &Why, tid: u32, what: &str, ms: f64) {
    let got = charged(why, tid, what);
    assert!(
        (got - ms).abs() < 1e-9,
        "{tid} {what}: {got} ms, not {ms}: {:?}",
        why.blame
    );
}

/// The ms `why` charges to `tid` as `what`.
fn charged(why: &Why, tid: u32, what: &str) -> f64 {
    why.blame
        .iter()
        .filter(|(c, _)| c.tid == tid && c.what == what)
        .map(|(_, ms)| ms)
        .sum()
}

/// A waker with no track of its own is named as the markers of the
/// threads it woke name it, not as "tid N (not recorded)"; one no
/// marker names stays so.
#[test]
fn wakers_without_a_track_are_named_by_their_wakees_markers() {
    let mut woken = off("sleeping", 0.0, Some(77), Some("task"));
    woken["waker"] = "kworker/u8:3 (pid 77, tid 77)".into();
    woken["wakerPid"] = "77".into();
    // A waker of short waits only, named by their marker.
    let short = serde_json::json!({ "type": "ShortWaits", "count": 3, "offCpu": 0.3,
        "waker": "server (pid 90, tid 91)", "wakerPid": "90", "wakerTid": 91, "wakerContext": "task" });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [thread(1, 1, "client", vec![(0.0, 10.0, woken), (20.0, 30.0, off("sleeping", 0.0, Some(78), Some("task"))), (40.0, 41.0, short)])],
    });
    let threads = Threads::read(&profile);
    assert_eq!(
        threads.describe(77),
        "kworker/u8:3 (77/77, no track of its own)"
    );
    assert_eq!(threads.describe(91), "server (90/91, no track of its own)");
    assert_eq!(threads.describe(78), "tid 78 (not recorded)");
    let why = threads.why(&[1], 0.0, 100.0, 5);
    assert!(
        why.blame
            .iter()
            .any(|(c, _)| c.tid == 77 && c.what == "running"),
        "{:?}",
        why.blame
    );
}

/// Check that markers whose texts are indexes into their thread's strings
/// (`unique-string`, as the writer writes them) read as those texts: the
/// waker named, the wait's reason, context and what it waited on, the
/// request's device; a text the table holds with a control character is
/// escaped, as names are; an index past the table reads as not there.
#[test]
fn texts_written_as_string_indexes_are_read_as_texts() {
    let strings = [
        "sleeping",
        "kworker/u8:3 (pid 77, tid 77)",
        "task",
        "a\npipe",
        "vdb",
        "odd\x1b[2J",
        "server (pid 90, tid 91)",
    ];
    let mut woken = off("?", 0.0, Some(77), None);
    woken["reason"] = 0.into();
    woken["waker"] = 1.into();
    woken["wakerPid"] = "77".into();
    woken["wakerContext"] = 2.into();
    woken["waitedOn"] = 3.into();
    let mut odd = off("?", 0.0, None, None);
    odd["reason"] = 5.into();
    odd["waitedOn"] = 99.into();
    let io = serde_json::json!({ "type": "BlockIo", "device": 4 });
    let short = serde_json::json!({ "type": "ShortWaits", "count": 3, "offCpu": 0.3,
        "waker": 6, "wakerPid": "90", "wakerTid": 91, "wakerContext": 2 });
    let mut client = thread(
        1,
        1,
        "client",
        vec![
            (0.0, 10.0, woken),
            (20.0, 30.0, odd),
            (40.0, 41.0, io),
            (50.0, 51.0, short),
        ],
    );
    client["stringArray"] = strings.to_vec().into();
    let profile = serde_json::json!({ "meta": { "categories": [] }, "threads": [client] });
    let threads = Threads::read(&profile);
    assert_eq!(
        threads.describe(77),
        "kworker/u8:3 (77/77, no track of its own)"
    );
    assert_eq!(threads.describe(91), "server (90/91, no track of its own)");
    let facts = &threads.threads[&1];
    let waits: Vec<(&str, Option<&str>)> = facts
        .waits
        .iter()
        .map(|w| (w.reason.as_str(), w.context.as_deref()))
        .collect();
    assert_eq!(
        waits,
        [("sleeping on a\\npipe", Some("task")), ("odd\\e[2J", None)]
    );
    // The short waits' context read through the table: a task's.
    assert_eq!(
        facts
            .short
            .iter()
            .map(|r| r.context.as_str())
            .collect::<Vec<_>>(),
        ["task"]
    );
    assert_eq!(facts.io.len(), 1);
    assert_eq!(threads.devices[facts.io[0].2 as usize - 1], "vdb");
}

/// Check that a wait drawn to its enqueue, its run delay a marker of
/// its own after it (`offCpu` says the whole wait), is read whole: its
/// delay charged to who held the CPU, the rest to its waker, and the
/// `RunDelay` marker not taken for another wait.
#[test]
fn a_wait_drawn_apart_from_its_run_delay_is_read_whole() {
    let mut blocked = off("blocked (uninterruptible)", 3.7, Some(2), Some("task"));
    blocked["offCpu"] = 4.1.into();
    blocked["cpuIn"] = 1.into();
    let delay =
        serde_json::json!({ "type": "RunDelay", "after": "blocked (uninterruptible)", "cpu": 1 });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(1.0, 1.4, blocked), (1.4, 5.1, delay)]),
            thread(1, 2, "server", vec![]),
            thread(1, 3, "spinner", vec![]),
            cpu_track(1, vec![(0.0, 10.0, on(3))]),
        ],
    });
    let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
    assert!((why.off_cpu_ms - 4.1).abs() < 1e-9, "{}", why.off_cpu_ms);
    assert_eq!(why.waits, 1);
    assert_charged(&why, 3, "holding its CPU", 3.7);
    assert_charged(&why, 2, "running", 0.4);
}

/// Check a wakeup's landing: a client woken by a server at 8 ms whose
/// wakeup reached its run queue at 9 (and ran at 10), and a run of
/// short waits with 0.2 ms of landing, charge that time to the client's
/// "waking its CPU", not to the server's running (what it did while
/// the wakeup landed) nor to the client's run queue.
#[test]
fn a_wakeups_landing_is_the_wakees_own() {
    let mut woken = off("sleeping", 1.0, Some(2), Some("task"));
    woken["wakeupLanding"] = 1.0.into();
    let short = serde_json::json!({ "type": "ShortWaits", "count": 4, "offCpu": 1.0,
        "waited": 0.5, "landing": 0.2, "wakerTid": 2, "wakerContext": "task" });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 10.0, woken), (20.0, 30.0, short)]),
            thread(1, 2, "server", vec![]),
        ],
    });
    let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
    assert_charged(&why, 1, "waking its CPU", 1.2);
    assert_charged(&why, 2, "running", 8.0 + 0.5);
    assert_charged(&why, 1, "runnable", 1.0 + 0.3);
    assert!((why.off_cpu_ms - 11.0).abs() < 1e-9, "{}", why.off_cpu_ms);
}

/// Check the run queue: a thread preempted on CPU 1 for 10-30 ms and
/// woken at 50 for a run delay of 4 ms on CPU 0 charges those spans to
/// the CPUs' slices (read half an interval earlier), the rounding gaps
/// next to its own slices to the holders beside them, and what no
/// slice covers (CPU 0 idle 51-53) to its own queue.
#[test]
fn run_queue_waits_are_charged_to_the_cpus_holders() {
    let mut preempted = off("preempted (runnable)", 20.0, None, None);
    preempted["cpuOut"] = 1.into();
    preempted["cpuIn"] = 1.into();
    let mut woken = off("sleeping", 4.0, Some(9), Some("hard IRQ"));
    woken["cpuOut"] = 1.into();
    woken["cpuIn"] = 0.into();
    let idle = serde_json::json!({ "type": "CpuIdle" });
    let profile = serde_json::json!({
        "meta": { "categories": [], "interval": 1.0 },
        "threads": [
            thread(1, 1, "waiter", vec![(10.0, 30.0, preempted), (40.0, 54.0, woken)]),
            thread(1, 2, "a", vec![]),
            thread(1, 3, "b", vec![]),
            // Read as [x - 0.5, y - 0.5]: the waiter's own slice ends at
            // 10.2 (a gap to a's at 10.5 that is a's), a 10.5-20.5,
            // b 20.5-29.7 (a trailing gap of 0.3 that is b's).
            cpu_track(1, vec![(5.0, 10.7, on(1)), (11.0, 21.0, on(2)), (21.0, 30.2, on(3)), (30.5, 40.0, on(1))]),
            // 50-51 a, 51-53 idle, 53-54 b.
            cpu_track(0, vec![(50.5, 51.5, on(2)), (51.5, 53.5, idle), (53.5, 60.5, on(3))]),
        ],
    });
    let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
    // a: 10-20.5 (its lead gap 10-10.5 included) and 50-51; b: 20.5-30
    // (its trailing gap 29.7-30 included) and 53-54.
    assert_charged(&why, 2, "holding its CPU", 11.5);
    assert_charged(&why, 3, "holding its CPU", 10.5);
    assert_charged(&why, 1, "timer", 10.0);
    assert_charged(&why, 1, "runnable", 2.0);
    let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
    assert!(
        (total - why.off_cpu_ms).abs() < 1e-9,
        "{total} vs {}",
        why.off_cpu_ms
    );
}

/// Check a short run's run-queue time: 3 of its 4 ms were runnable
/// (1 before its wakeup, by a thread with no track), charged to the
/// threads that held the CPU it ran on over its span, by how long:
/// thread 3 held CPU 0 6 ms of it and thread 4 2 ms (CPU 1, where it
/// did not run, does not count).
#[test]
fn short_waits_queue_is_charged_to_the_cpus_holders() {
    let profile = serde_json::json!({
        "meta": { "categories": [], "interval": 1.0 },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 10.0, short(5, 4.0, 1.0, Some(9), "task"))]),
            thread(1, 3, "a", vec![]),
            thread(1, 4, "b", vec![]),
            thread(1, 5, "c", vec![]),
            // Read half an interval earlier: 1 on 0-2, 3 on 2-8, 4 on 8-10.
            cpu_track(0, vec![(0.5, 2.5, on(1)), (2.5, 8.5, on(3)), (8.5, 10.5, on(4))]),
            cpu_track(1, vec![(0.5, 10.5, on(5))]),
        ],
    });
    let why = Threads::read(&profile).why(&[1], 0.0, 10.0, 5);
    let get = |tid: u32, what: &str| charged(&why, tid, what);
    assert_charged(&why, 3, "holding its CPU", 2.25);
    assert_charged(&why, 4, "holding its CPU", 0.75);
    assert_eq!(get(5, "holding its CPU"), 0.0, "{:?}", why.blame);
    assert_charged(&why, 9, "running", 1.0);
    assert!((why.off_cpu_ms - 4.0).abs() < 1e-9, "{}", why.off_cpu_ms);
}

/// Check a chain: a client waits 100 ms on a server (woken 1 ms late),
/// the server waits on a holder for 60 ms of it, the holder reads a
/// disk for 40 of those and runs 20; the rest the server ran. Every ms
/// lands once, the I/O on its device, the timer sleep on the timer.
#[test]
fn a_wait_is_charged_along_its_chain() {
    let io = serde_json::json!({ "type": "BlockIo", "device": "vda" });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 100.0, off("sleeping", 1.0, Some(2), Some("task"))), (200.0, 210.0, off("sleeping", 0.0, None, Some("hard IRQ")))]),
            thread(2, 2, "server", vec![(10.0, 70.0, off("sleeping", 0.0, Some(3), Some("task")))]),
            thread(2, 3, "holder", vec![(15.0, 55.0, off("blocked (uninterruptible)", 0.5, None, Some("hard IRQ"))), (14.0, 56.0, io)]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 1000.0, 5);
    assert_eq!(why.waits, 2);
    assert!((why.off_cpu_ms - 110.0).abs() < 1e-9);
    assert_charged(&why, 1, "runnable", 1.0);
    assert_charged(&why, 1, "timer", 10.0);
    // The server ran 0-10 and 70-99 of the client's wait: 39 ms.
    assert_charged(&why, 2, "running", 39.0);
    // The holder: I/O 15-54.5 (its wakeup 0.5 ms before it ran), runnable 0.5, running the rest of 10-70.
    assert_charged(&why, 3, "I/O", 39.5);
    assert!(why
        .blame
        .iter()
        .any(|(c, _)| c.what == "I/O" && c.device.as_deref() == Some("vda")));
    assert_charged(&why, 3, "runnable", 0.5);
    assert_charged(&why, 3, "running", 20.0);
    let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
    assert!(
        (total - why.off_cpu_ms).abs() < 1e-9,
        "every ms once: {total} vs {}",
        why.off_cpu_ms
    );
    assert_eq!(why.longest[0].1, 100.0);
}

fn short(count: u32, off_cpu: f64, waited: f64, waker: Option<u32>, context: &str) -> Value {
    serde_json::json!({ "type": "ShortWaits", "count": count, "offCpu": off_cpu, "waited": waited, "wakerTid": waker, "wakerContext": context })
}

/// Check that a short run's waker is read only where the run's waits
/// can lie: not over the thread's own long waits, which their markers
/// charge exactly. A client's run of short waits over 0-100 holds its
/// 20-ms wait at 40-60, while the server was preempted: that 20 ms is
/// the server's run queue, once; the short waits' 30 ms are the
/// server's running around it, not 24 of running and 6 more of its
/// run queue.
#[test]
fn short_waits_are_not_charged_to_what_their_long_waits_were() {
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 100.0, short(100, 30.0, 30.0, Some(2), "task")), (40.0, 60.0, off("sleeping", 0.0, Some(2), Some("task")))]),
            thread(2, 2, "server", vec![(40.0, 60.0, off("preempted", 20.0, None, None))]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 100.0, 5);
    assert!((why.off_cpu_ms - 50.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    assert_charged(&why, 2, "running", 30.0);
    assert_charged(&why, 2, "runnable", 20.0);
}

/// Check that a run of short waits is spread over the time its thread
/// was not in a long wait, not over its whole span. A server preempted
/// over 0-50 (a long wait for a CPU) made its 20 ms of short, disk-woken
/// waits in 50-100, where its client waited for it: spread over 0-100,
/// half were read into the preemption, and the client's wait had 10 ms of
/// the server's I/O and 40 of its "running" (it ran 30).
#[test]
fn short_waits_lie_outside_their_threads_long_waits() {
    let io = serde_json::json!({ "type": "BlockIo", "device": "vdb" });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(50.0, 100.0, off("sleeping", 0.0, Some(2), Some("task")))]),
            thread(2, 2, "server", vec![
                (0.0, 50.0, off("preempted", 50.0, None, None)),
                (0.0, 100.0, short(100, 20.0, 20.0, None, "interrupt")),
                (0.0, 100.0, io),
            ]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 100.0, 5);
    assert!((why.off_cpu_ms - 50.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    assert!(
        why.blame.iter().any(|(c, ms)| c.tid == 2
            && c.what == "I/O"
            && c.device.as_deref() == Some("vdb")
            && (ms - 20.0).abs() < 1e-9),
        "{:?}",
        why.blame
    );
    assert_charged(&why, 2, "running", 30.0);
}

/// Ten threads that each wake all the others over one span: every
/// chain branches nine ways at each level. Followed path by path, the
/// budget ran out and part of the wait was "chain too deep" (pgbench's
/// client, 31 %); each thread's activity over the span is charged once
/// and read again, and all of it is someone's running.
#[test]
fn a_mesh_of_wakers_is_charged_whole() {
    let n = 10u32;
    let threads: Vec<Value> = (1..=n)
        .map(|tid| {
            let runs = (1..=n)
                .filter(|&w| w != tid)
                .map(|w| (0.0, 100.0, short(50, 2.0, 2.0, Some(w), "task")))
                .collect();
            thread(tid, tid, "mesh", runs)
        })
        .collect();
    let profile = serde_json::json!({ "meta": { "categories": [] }, "threads": threads });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 100.0, 5);
    assert!((why.off_cpu_ms - 18.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    let deep: f64 = why
        .blame
        .iter()
        .filter(|(c, _)| c.what == "waiting (chain too deep)")
        .map(|(_, ms)| ms)
        .sum();
    assert_eq!(deep, 0.0, "{:?}", why.blame);
    let running: f64 = (2..=n).map(|tid| charged(&why, tid, "running")).sum();
    assert!((running - 18.0).abs() < 1e-9, "{:?}", why.blame);
    // Each other thread ran 82 of its 100 ms: 2 ms each in truth. A
    // thread's activity is remembered as the first chain that reached
    // it saw it, that chain's threads cut as cycles: the last reached
    // keep more of their own running (1.67-2.38 ms here).
    for tid in 2..=n {
        let ms = charged(&why, tid, "running");
        assert!((1.5..2.5).contains(&ms), "{tid}: {:?}", why.blame);
    }
}

/// A round trip in short waits where the server also waits for a CPU
/// after the client's requests wake it: that run delay is the server's
/// CPUs' (here its own run queue: no per-CPU tracks), not the cycle's.
/// Charged whole as a cycle, it was dropped and the client's wait went
/// all to the server's running.
/// What a thread's activity was is kept per thread asked about: for
/// another, the chain's cycles are other threads. Kept across them, a
/// thread's own short waits were charged to its own running (1 and 2
/// woken by 3, 3 by 2: for 1, 3 waited on 2 running; for 2, on itself).
/// And the threads on the chain hold none of the CPUs a waker waited
/// for: they were waiting.
#[test]
fn a_chain_is_charged_for_its_own_thread() {
    let slices: Vec<(f64, f64, Value)> = (0..10)
        .map(|i| {
            let t = [1, 2, 3][i % 3];
            (i as f64 * 10.0, i as f64 * 10.0 + 10.0, on(t))
        })
        .collect();
    let profile = serde_json::json!({
        "meta": { "categories": [], "interval": 1.0 },
        "threads": [
            thread(1, 1, "a", vec![(0.0, 100.0, short(100, 10.0, 10.0, Some(3), "task"))]),
            thread(2, 2, "b", vec![(0.0, 100.0, short(100, 10.0, 10.0, Some(3), "task"))]),
            thread(3, 3, "c", vec![(0.0, 100.0, short(100, 50.0, 30.0, Some(2), "task"))]),
            cpu_track(0, slices),
        ],
    });
    let threads = Threads::read(&profile);
    let first = threads.why(&[1], 0.0, 100.0, 5);
    assert!(charged(&first, 2, "running") > 0.0, "{:?}", first.blame);
    assert_eq!(
        charged(&first, 1, "holding its CPU"),
        0.0,
        "{:?}",
        first.blame
    );
    let runs = threads.each_short_run(2, 0.0, 100.0);
    assert_eq!(runs.len(), 1);
    let own: Vec<_> = runs[0].2.blame.iter().filter(|(c, _)| c.tid == 2).collect();
    assert!(
        own.is_empty(),
        "2's waits charged to 2: {:?}",
        runs[0].2.blame
    );
}

#[test]
fn a_waker_waiting_for_a_cpu_is_not_a_cycle() {
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 100.0, short(1000, 60.0, 50.0, Some(2), "task"))]),
            thread(2, 2, "server", vec![(0.0, 100.0, short(1000, 30.0, 20.0, Some(1), "task"))]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 100.0, 5);
    // The server over the span: 10 ms runnable, 20 waiting for the
    // client (the cycle, left out), 70 running of which 10 after the
    // client's wakeups (out of its running first): 60 and 10 share
    // the client's 50 ms waited.
    assert_charged(&why, 2, "running", 50.0 * 60.0 / 70.0);
    assert_charged(&why, 2, "runnable", 50.0 * 10.0 / 70.0);
    assert_charged(&why, 1, "runnable", 10.0);
}

/// Check short waits: a client in round trips with a server (runs of
/// short waits each way) is charged, before its wakeups, to the
/// server's running (not to the server's own waits for the client),
/// and after them to its own run queue; a range takes its share of a
/// run; interrupts go to the request in flight; every ms once.
#[test]
fn short_waits_are_charged_to_their_waker() {
    let io = serde_json::json!({ "type": "BlockIo", "device": "vdb" });
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 100.0, short(1000, 60.0, 50.0, Some(2), "task")), (200.0, 300.0, short(10, 8.0, 6.0, None, "interrupt")), (190.0, 310.0, io)]),
            thread(2, 2, "server", vec![(0.0, 100.0, short(1000, 30.0, 30.0, Some(1), "task")), (40.0, 50.0, off("sleeping", 0.0, Some(3), Some("task")))]),
            thread(3, 3, "third", vec![]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 0.0, 1000.0, 5);
    let get = |tid: u32, what: &str| charged(&why, tid, what);
    assert!((why.off_cpu_ms - 68.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    assert_eq!(why.waits, 1010);
    assert_charged(&why, 1, "runnable", 12.0);
    // Over 0-100 the server waited 10 ms on the third thread (which ran
    // then), 30 on the client (dropped: a cycle), and ran 60. Of that
    // 70, 20 is more than the client's 50 ms waited; the 10 ms after
    // the client's wakeups the server ran on (it had just woken it):
    // out of its running first. The client's 50 ms go 50:10.
    assert!(
        (get(2, "running") - 50.0 * 50.0 / 60.0).abs() < 1e-9,
        "{:?}",
        why.blame
    );
    assert!(
        (get(3, "running") - 50.0 * 10.0 / 60.0).abs() < 1e-9,
        "{:?}",
        why.blame
    );
    assert!(
        why.blame.iter().any(|(c, ms)| c.what == "I/O"
            && c.device.as_deref() == Some("vdb")
            && (ms - 6.0).abs() < 1e-9),
        "{:?}",
        why.blame
    );
    let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
    assert!(
        (total - why.off_cpu_ms).abs() < 1e-9,
        "every ms once: {total} vs {}",
        why.off_cpu_ms
    );
    // Half the first run's span: half its time.
    let half = threads.why(&[1], 0.0, 50.0, 5);
    assert!((half.off_cpu_ms - 30.0).abs() < 1e-9, "{}", half.off_cpu_ms);
}

/// Check that a waker's landing that overlapped its wakee's running is
/// not charged to the wakee's waits, before any of the waker's running
/// is. A round trip over 0-100 ms on a VM whose idle vCPUs wake slowly:
/// the client waited 50 ms for the server (then 25 landing, 5 runnable)
/// and ran 20; the server ran 50, waited 25 for the client (a cycle),
/// landed 20 and was runnable 5. Of the server's 75 ms, 25 are more than
/// the client's 50: its landing overlapped the client's 20 ms of running
/// (it was woken by the client's write, and the client went on to its
/// read), then 5 of its running came after its replies.
#[test]
fn a_wakers_landing_over_its_wakees_running_is_not_the_wakees_wait() {
    let run = |count: u32, off_cpu: f64, waited: f64, landing: f64, waker: u32| {
        serde_json::json!({ "type": "ShortWaits", "count": count, "offCpu": off_cpu,
            "waited": waited, "landing": landing, "wakerTid": waker, "wakerContext": "task" })
    };
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "client", vec![(0.0, 100.0, run(1000, 80.0, 50.0, 25.0, 2))]),
            thread(2, 2, "server", vec![(0.0, 100.0, run(1000, 50.0, 25.0, 20.0, 1))]),
        ],
    });
    let why = Threads::read(&profile).why(&[1], 0.0, 1000.0, 5);
    assert!((why.off_cpu_ms - 80.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    assert_charged(&why, 1, "waking its CPU", 25.0);
    assert_charged(&why, 1, "runnable", 5.0);
    assert_charged(&why, 2, "running", 45.0);
    assert_charged(&why, 2, "runnable", 5.0);
    assert_charged(&why, 2, "waking its CPU", 0.0);
}

/// Check that a cycle of wakers ends the chain instead of looping, and
/// that a range cuts the waits.
#[test]
fn cycles_end_the_chain_and_ranges_cut() {
    let profile = serde_json::json!({
        "meta": { "categories": [] },
        "threads": [
            thread(1, 1, "a", vec![(0.0, 10.0, off("sleeping", 0.0, Some(2), Some("task")))]),
            thread(1, 2, "b", vec![(0.0, 10.0, off("sleeping", 0.0, Some(1), Some("task")))]),
        ],
    });
    let threads = Threads::read(&profile);
    let why = threads.why(&[1], 2.0, 6.0, 1);
    assert!((why.off_cpu_ms - 4.0).abs() < 1e-9);
    assert_eq!(
        why.blame,
        vec![(
            Culprit {
                tid: 1,
                what: "waiting (cycle)",
                device: None
            },
            4.0
        )]
    );
    assert_eq!(threads.resolve(1), vec![1], "a tid first");
    assert_eq!(threads.resolve(7), Vec::<u32>::new());
}

/// Check that the requests searched near a span are every request a scan
/// of them all finds in flight there: long and short, overlapping, at the
/// span's very ends.
#[test]
fn requests_near_a_span_hold_every_one_in_flight_there() {
    let mut t = read::ThreadFacts::default();
    let mut x = 7u64;
    for _ in 0..500 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let start = (x >> 40) as f64 / 1000.0;
        let len = if x % 17 == 0 {
            400.0
        } else {
            ((x >> 20) % 50) as f64 / 10.0
        };
        t.io.push((start, start + len, 1));
    }
    t.io.sort_by(|x, y| x.0.total_cmp(&y.0));
    t.io_span = t.io.iter().map(|r| r.1 - r.0).fold(0.0, f64::max);
    let (first_start, first_end) = (t.io[0].0, t.io[0].1);
    for (a, b) in [
        (0.0, 1.0),
        (100.0, 100.5),
        (5000.0, 9000.0),
        (first_end, first_end + 1.0),
        (first_start - 1.0, first_start),
        (-5.0, 0.0),
    ] {
        let near = t.io_near(a, b);
        for r in &t.io {
            let in_flight = r.0 < b && r.1 > a;
            let at_wake = r.0 < b && r.1 >= a;
            if in_flight || at_wake {
                assert!(
                    near.iter().any(|n| n == r),
                    "{r:?} in flight in [{a}, {b}] not found"
                );
            }
        }
    }
}
