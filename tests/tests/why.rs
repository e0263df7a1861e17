//! `sysprof report --why`: a thread's off-CPU time charged along the chain
//! of its wakers, checked against workloads that time themselves.
//!
//! Oracles: waitchain's own clocks (the client's round trips less its CPU
//! time, the holder's blocked time in its reads less its run-queue delay
//! from schedstat, and its CPU time while it holds the lock, the napper's
//! schedstat run delay) and spinners' (threads that never sleep, so every
//! wait of theirs is for a CPU).

use std::process::Command;

use serde_json::Value;
use sysprof_tests::*;

const SIGTERM: i32 = 15;

/// `sysprof report FILE --why ID --format json [EXTRA]`, parsed.
fn why(path: &std::path::Path, id: u64) -> Value {
    why_in(path, id, &[])
}

fn why_in(path: &std::path::Path, id: u64, extra: &[&str]) -> Value {
    let out = Command::new(sysprof_bin())
        .args(["report", "--format", "json", "--why", &id.to_string()])
        .args(extra)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "report --why {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report --why {id} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The ms of `blame` entries of `tid` (any tid when None) whose `what` is in `whats`.
fn blamed(report: &Value, tid: Option<u64>, whats: &[&str]) -> f64 {
    report["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| {
            tid.is_none_or(|t| b["tid"] == t) && whats.contains(&b["what"].as_str().unwrap())
        })
        .map(|b| b["ms"].as_f64().unwrap())
        .sum()
}

/// Check the chain of a request: a client waits on a server over a pipe,
/// the server waits on a mutex a holder keeps while it reads a disk with
/// O_DIRECT and computes; recorded at the default marker threshold (most
/// of the holder's reads are shorter). `report --why CLIENT` must account for the
/// client's own off-CPU time (within 2 %, every ms once), charge at least
/// 60 % of it to the holder, and split the holder's part between its reads
/// (on the device) and its computing within 10 points of the holder's own
/// measurement. The napper, which only sleeps on a timer, is charged to the
/// timer and to its own run-queue delay (as its schedstat says), nothing else.
#[test]
fn a_request_is_charged_along_its_chain_to_the_disk_and_the_cpu() {
    if !can_record("a_request_is_charged_along_its_chain_to_the_disk_and_the_cpu") {
        return;
    }
    let dir = scratch("why-chain");
    let exe = build_c("waitchain", &dir.join("waitchain"), &[]);
    let disk = LoopDevice::new(&dir, 16);
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--",
            exe.to_str().unwrap(),
            disk.path.to_str().unwrap(),
            "200",
            "4",
            "2",
        ],
        &out_path,
    );
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("waitchain printed no {k}"));
    let (client, holder, napper) = (f("client"), f("holder"), f("napper"));
    let client_wait_ms = f("client_wait_ns") as f64 / 1e6;
    let (holder_blocked_ms, holder_cpu_ms) = (
        f("holder_blocked_ns") as f64 / 1e6,
        f("holder_cpu_ns") as f64 / 1e6,
    );

    // Over the client's loop only (its start-up and exit are waits too,
    // preempted beside a busy CPU: 12.7 ms of them once), in profile ms.
    let profile = Profile::load(&out_path);
    let anchor_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let ms = |ns: u64| format!("{:.3}", (ns as f64 - anchor_ns) / 1e6);
    let r = why_in(
        &out_path,
        client,
        &[
            "--from",
            &ms(f("client_t0_ns")),
            "--to",
            &ms(f("client_t1_ns")),
        ],
    );
    let off_cpu = r["off_cpu_ms"].as_f64().unwrap();
    let total: f64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["ms"].as_f64().unwrap())
        .sum();
    let holder_ms = blamed(&r, Some(holder), &["running", "I/O", "runnable"]);
    let (io, running) = (
        blamed(&r, Some(holder), &["I/O"]),
        blamed(&r, Some(holder), &["running"]),
    );
    eprintln!(
        "why: client off-CPU {off_cpu:.1} ms (its own clocks {client_wait_ms:.1}), blame sums to {total:.1}; holder {holder_ms:.1} ms: I/O {io:.1}, running {running:.1} \
         (its own: blocked {holder_blocked_ms:.1}, CPU {holder_cpu_ms:.1}); blame {}",
        r["blame"]
    );
    assert!(
        (total - off_cpu).abs() < 1e-6 * off_cpu.max(1.0),
        "every ms charged once: {total} of {off_cpu}"
    );
    // Steal time (a vCPU the host did not run) is in neither its CPU clock
    // nor its waits: its own clocks may be up to the machine's above.
    let steal_ms = f("client_steal_ns") as f64 / 1e6;
    assert!(
        off_cpu <= client_wait_ms * 1.02 && off_cpu >= (client_wait_ms - steal_ms) * 0.98,
        "the client's off-CPU time {off_cpu:.1} ms vs its own clocks {client_wait_ms:.1} ms (steal {steal_ms:.0} ms)"
    );
    assert!(
        holder_ms >= off_cpu * 0.6,
        "the holder carries {holder_ms:.1} of {off_cpu:.1} ms"
    );
    let devices: Vec<&str> = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["what"] == "I/O")
        .filter_map(|b| b["device"].as_str())
        .collect();
    assert!(
        !devices.is_empty() && devices.iter().all(|d| *d == disk.name),
        "the I/O is on {}: {devices:?}",
        disk.name
    );
    let (share, own_share) = (
        io / (io + running),
        holder_blocked_ms / (holder_blocked_ms + holder_cpu_ms),
    );
    // Its "blocked" is wall less CPU less run delay: steal while it computed
    // is in it, and is running to sysprof (CI: 32.6 % against 44.6 %, its
    // running 85 ms above its CPU time). The floor allows the machine's steal.
    let own_floor = ((holder_blocked_ms - steal_ms).max(0.0)) / (holder_blocked_ms + holder_cpu_ms);
    assert!(
        share <= own_share + 0.10 && share >= own_floor - 0.10,
        "the holder's reads are {:.1} % of its part, {:.1} % by its own clocks ({:.1} % less the machine's steal, {steal_ms:.0} ms)",
        share * 100.0,
        own_share * 100.0,
        own_floor * 100.0
    );

    // Over its naps only, as its own clocks measured them.
    let n = why_in(
        &out_path,
        napper,
        &[
            "--from",
            &ms(f("napper_t0_ns")),
            "--to",
            &ms(f("napper_t1_ns")),
        ],
    );
    let off_cpu = n["off_cpu_ms"].as_f64().unwrap();
    let (timer, queued, landing, unseen) = (
        blamed(&n, Some(napper), &["timer"]),
        blamed(&n, Some(napper), &["runnable"]),
        blamed(&n, Some(napper), &["waking its CPU"]),
        blamed(&n, Some(napper), &["unknown waker"]),
    );
    let run_delay_ms = f("napper_run_delay_ns") as f64 / 1e6;
    let late_ms = f("napper_late_ns") as f64 / 1e6;
    eprintln!(
        "why: napper off-CPU {off_cpu:.1} ms: timer {timer:.1}, runnable {queued:.1}, waking its CPU {landing:.1}, no waker seen {unseen:.1} (its schedstat run delay {run_delay_ms:.1}, its naps {late_ms:.1} late); {}",
        n["blame"]
    );
    // Its timer, its wakeups' landing and a CPU; beside a busy CPU a few of
    // its waits end with no wakeup traced (their end inferred: 2 % seen),
    // said as such.
    let other = off_cpu - timer - queued - landing - unseen;
    // What is not its timer is its naps' lateness (the timer's expiry to
    // running again, by its own clock) at most: a woken napper can wait a
    // busy CPU's whole slice.
    assert!(
        timer >= off_cpu - late_ms - unseen - 1.0 && other <= 1.0,
        "the napper waits on its timer and for a CPU ({late_ms:.1} ms late): {}",
        n["blame"]
    );
    assert!(
        unseen <= off_cpu * 0.05,
        "{unseen:.1} ms of {off_cpu:.1} with no waker seen"
    );
    let waits = n["waits"].as_f64().unwrap();
    let slack = (run_delay_ms * 0.25).max(2.0);
    // sysprof times a wait's run delay from its enqueue, as schedstat does;
    // before it, from the waking, the wakeup was landing on the napper's
    // CPU (an interrupt between CPUs: beside a busy CPU on this VM, 37 us a
    // wait, 8.3 ms in 226 naps, once counted as run delay). So schedstat
    // bounds its run delay from below (a wait whose wakeup went unseen holds
    // its run delay too, not split out). Not from above: a wakeup that
    // preempts the CPU's task tells the kernel to skip its next clock update
    // (wakeup_preempt's rq_clock_skip_update), so schedstat's run delay for
    // it ends at the enqueue's clock, not at the switch (CI: 11.7 ms seen
    // against schedstat's 7.8 in 255 naps, 15 us a nap, on a loaded VM). The
    // naps' own lateness bounds both together from above: a nap is woken no
    // earlier than its timer expires, and runs again no later than it reads
    // its clock. (Its rare preemptions, microseconds, are runnable time
    // outside its naps: 1 ms is allowed.)
    assert!(
        queued + unseen >= run_delay_ms - slack && queued + landing <= late_ms + 1.0,
        "its run-queue delay {queued:.1} ms (its wakeups' landing {landing:.1} ms, {unseen:.1} ms with no wakeup seen) in {waits} waits vs schedstat {run_delay_ms:.1} ms and its naps' lateness {late_ms:.1} ms"
    );

    // What each waited on, by construction of the workload: the client
    // reads its replies from a pipe, the napper sleeps on a timer ("timer"), the
    // holder's blocked waits are its O_DIRECT reads, the server waits on
    // the holder's mutex (and on the pipe for the next request). Over each
    // thread's off-CPU markers that are no preemption, by their time.
    let waited_on = |tid: u64| -> (f64, std::collections::HashMap<String, f64>) {
        let t = profile
            .threads()
            .into_iter()
            .find(|t| t.tid() == tid)
            .unwrap_or_else(|| panic!("no track of {tid}"));
        let mut by_kind: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
        let mut total = 0.0;
        for (_, d) in t.markers() {
            let reason = d["reason"].as_str().unwrap_or("");
            if d["type"] != "OffCpu" || reason.starts_with("preempted") {
                continue;
            }
            let ms = d["endTime"].as_f64().unwrap() - d["startTime"].as_f64().unwrap();
            total += ms;
            let kind = d["waitedOn"].as_str().unwrap_or("(none)");
            *by_kind.entry(format!("{reason}: {kind}")).or_default() += ms;
        }
        (total, by_kind)
    };
    let share = |by: &std::collections::HashMap<String, f64>, total: f64, kinds: &[&str]| -> f64 {
        by.iter()
            .filter(|(k, _)| kinds.iter().any(|w| k.ends_with(&format!(": {w}"))))
            .map(|(_, ms)| ms)
            .sum::<f64>()
            / total.max(f64::MIN_POSITIVE)
    };
    let server = f("server");
    for (tid, who, kinds) in [
        (client, "client", &["pipe"][..]),
        (napper, "napper", &["timer"]),
        (server, "server", &["lock (futex)", "pipe"]),
    ] {
        let (total, by) = waited_on(tid);
        eprintln!("why: {who} waited on: {by:?} of {total:.1} ms");
        assert!(
            total > 0.0 && share(&by, total, kinds) >= 0.9,
            "the {who} waited on {kinds:?}: {by:?} of {total:.1} ms"
        );
    }
    let (_, by) = waited_on(server);
    assert!(
        by.keys().any(|k| k.ends_with(": lock (futex)")),
        "the server waited on the holder's mutex: {by:?}"
    );
    let (_, by) = waited_on(holder);
    let blocked: f64 = by
        .iter()
        .filter(|(k, _)| k.starts_with("blocked"))
        .map(|(_, ms)| ms)
        .sum();
    let on_disk = by
        .get("blocked (uninterruptible): disk I/O")
        .copied()
        .unwrap_or(0.0);
    eprintln!("why: holder waited on: {by:?}");
    // Its reads are mostly shorter than the threshold: some runs (a quick
    // disk) have none long enough for a marker of its own, and nothing
    // to check here (said); the blame above charged them all the same.
    if blocked == 0.0 {
        eprintln!("why: NOTE the holder had no blocked wait over the threshold: what they waited on is not checked in this run");
    }
    assert!(
        on_disk >= 0.9 * blocked,
        "the holder's blocked waits are its reads: {on_disk:.1} of {blocked:.1} ms on disk I/O: {by:?}"
    );
}

/// The block device a file lives on, as the kernel names the disk
/// (`vda` for a file on `/dev/vda` or on a partition of it).
fn disk_of(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let (major, minor) = (libc_major(dev), libc_minor(dev));
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}"))
        .unwrap_or_else(|e| panic!("no block device {major}:{minor} under /sys/dev/block: {e}"));
    let disk = if sys.join("partition").exists() {
        sys.parent().unwrap().to_path_buf()
    } else {
        sys
    };
    disk.file_name().unwrap().to_string_lossy().into_owned()
}

fn libc_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

fn libc_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

/// Check that a request's wait on a server's fdatasync is charged to the
/// disk, at the default marker threshold, where most of the server's waits
/// in its syncs are too short for a marker each (`syncserve`: 64 KiB
/// written and synced per request, ~0.2 ms a sync here). Every sync lies
/// inside one of the client's waits. Of the client's off-CPU time over its
/// requests, `report --why CLIENT` must charge to I/O on the file's disk
/// at least 80 % of the time the server was blocked in its fdatasyncs
/// (less its wakeups' landing on an idle CPU, at most 15 % of it), and
/// no more than all of its time off the CPU in them; the blame must sum to
/// the client's off-CPU time.
///
/// The server's own clocks bound its blocked time: its syncs' wall time
/// less its CPU time (CLOCK_THREAD_CPUTIME_ID) and less its run delay
/// (schedstat), which is its "runnable", not the disk's; less, too, the
/// VM's steal over the run (/proc/stat), which its CPU clock leaves out
/// and a tracer sees as running: this I/O ping-pong wakes idle vCPUs
/// hundreds of times a second, and the host's delay in running them came
/// to 30 ms of a 140-ms run. Counted as the disk's, run delay and steal
/// failed the bound (CI at 8f8823e: 85 of 119.6 ms). Those short waits
/// came as runs per waker; the server's, woken by turns by the client (its
/// next request) and by the disk's completions, were once one run of
/// "several wakers" (20 of 79 ms of the client's wait, 47 % of the sync
/// time charged to the disk).
#[test]
fn fdatasync_waits_are_charged_to_the_disk_at_the_default_threshold() {
    let test = "fdatasync_waits_are_charged_to_the_disk_at_the_default_threshold";
    if !can_record(test) {
        return;
    }
    let dir = scratch("why-fdatasync");
    let exe = build_c("syncserve", &dir.join("syncserve"), &[]);
    let data = dir.join("data");
    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--", exe.to_str().unwrap(), data.to_str().unwrap(), "300"],
        &out_path,
    );
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("syncserve printed no {k}"));
    let client = f("client");
    let sync_wait_ms = f("sync_wait_ns") as f64 / 1e6;
    let sync_ms = f("sync_ns") as f64 / 1e6;
    let sync_run_delay_ms = f("sync_run_delay_ns") as f64 / 1e6;
    let steal_ms = f("steal_ns") as f64 / 1e6;
    let sync_blocked_ms = (sync_wait_ms - sync_run_delay_ms - steal_ms).max(0.0);
    let server_run_delay_ms = f("server_run_delay_ns") as f64 / 1e6;
    let disk = disk_of(&data);
    let profile = Profile::load(&out_path);
    let anchor_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let ms = |ns: u64| format!("{:.3}", (ns as f64 - anchor_ns) / 1e6);
    let r = why_in(
        &out_path,
        client,
        &[
            "--from",
            &ms(f("client_t0_ns")),
            "--to",
            &ms(f("client_t1_ns")),
        ],
    );
    let off_cpu = r["off_cpu_ms"].as_f64().unwrap();
    let total: f64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["ms"].as_f64().unwrap())
        .sum();
    let on_disk: f64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["what"] == "I/O" && b["device"] == disk.as_str())
        .map(|b| b["ms"].as_f64().unwrap())
        .sum();
    let several = blamed(&r, None, &["several wakers"]);
    eprintln!(
        "why: client off-CPU {off_cpu:.1} ms, blame sums to {total:.1}; I/O on {disk} {on_disk:.1} ms, several wakers {several:.1}; \
         the server's fdatasyncs {sync_ms:.1} ms, {sync_wait_ms:.1} of them off-CPU, {sync_run_delay_ms:.1} of those runnable, steal {steal_ms:.0}: \
         blocked at least {sync_blocked_ms:.1}; the server runnable {server_run_delay_ms:.1} over its loop; blame {}",
        r["blame"]
    );
    assert!(
        (total - off_cpu).abs() <= 0.02 * off_cpu.max(1.0),
        "every ms charged once: {total} of {off_cpu}"
    );
    // The server's wakeups' landing ("waking its CPU": from the disk's
    // interrupt sending the wakeup to the server's enqueue on its idle
    // vCPU) is in the oracle's blocked time, since schedstat's run delay
    // starts at the enqueue, but it is not the disk's. It is measured by
    // the profiler alone, so it is bounded: a few % of the blocked time
    // here (0.9-3.6 ms of 31-58); the disk's share is asked of the rest.
    let server_landing: f64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["what"] == "waking its CPU" && b["tid"].as_u64() == Some(f("server")))
        .map(|b| b["ms"].as_f64().unwrap())
        .sum();
    assert!(
        server_landing <= 0.15 * sync_blocked_ms,
        "{server_landing:.1} ms of the client's wait charged to the server's wakeups landing, of its {sync_blocked_ms:.1} ms blocked in fdatasync: {}",
        r["blame"]
    );
    assert!(
        on_disk >= 0.8 * (sync_blocked_ms - server_landing),
        "{on_disk:.1} ms of the client's wait charged to {disk}, of the server's {sync_blocked_ms:.1} ms blocked in fdatasync ({server_landing:.1} of them its wakeups' landing): {}",
        r["blame"]
    );
    assert!(
        on_disk <= sync_wait_ms * 1.02,
        "{on_disk:.1} ms of the client's wait charged to {disk}, more than the server's {sync_wait_ms:.1} ms off-CPU in fdatasync: {}",
        r["blame"]
    );
}

/// Check `--why`'s answer on the timeline (`--annotate`): `syncserve`
/// recorded with a marker for every wait of 0.05 ms or more (each of the
/// client's 150 round trips holds one of the server's fdatasyncs, 0.2-4 ms
/// here), the profile written again has a "Wait charged to" marker over
/// each of the client's waits in its loop, one per wait, spanning it
/// whole, colored by its largest share (orange exactly when that is the
/// disk), and the disk's shares of those marked so are no more than the
/// server's own time off the CPU in its fdatasyncs, and not none. At the
/// default threshold (1 ms) a quiet disk's syncs left the client no marked
/// wait at all (0 of 0 checked: the check could not fail).
#[test]
fn an_annotated_profile_marks_each_wait_with_where_it_went() {
    let test = "an_annotated_profile_marks_each_wait_with_where_it_went";
    if !can_record(test) {
        return;
    }
    let dir = scratch("why-annotate");
    let exe = build_c("syncserve", &dir.join("syncserve"), &[]);
    let data = dir.join("data");
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--off-cpu-threshold",
            "0.05",
            "--",
            exe.to_str().unwrap(),
            data.to_str().unwrap(),
            "150",
        ],
        &out_path,
    );
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("syncserve printed no {k}"));
    let client = f("client");
    let sync_wait_ms = f("sync_wait_ns") as f64 / 1e6;
    let disk = disk_of(&data);
    let profile = Profile::load(&out_path);
    let anchor_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let ms = |ns: u64| format!("{:.3}", (ns as f64 - anchor_ns) / 1e6);
    let (from, to) = (ms(f("client_t0_ns")), ms(f("client_t1_ns")));
    let annotated = dir.join("annotated.json.gz");
    let out = Command::new(sysprof_bin())
        .args([
            "report",
            "--why",
            &client.to_string(),
            "--from",
            &from,
            "--to",
            &to,
            "--annotate",
        ])
        .arg(&annotated)
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "report --annotate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (from, to): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let again = Profile::load(&annotated);
    let pid = f("pid");
    let markers = again.thread(pid, client).expect("the client").markers();
    let waits: Vec<(f64, f64)> = markers
        .iter()
        .filter(|(_, d)| d["type"] == "OffCpu")
        .map(|(_, d)| {
            (
                d["startTime"].as_f64().unwrap().max(from),
                d["endTime"].as_f64().unwrap().min(to),
            )
        })
        .filter(|(a, b)| a < b)
        .collect();
    // Runs of waits under the threshold: one marker each, over the run's
    // span in the range.
    let mut runs: Vec<(f64, f64)> = markers
        .iter()
        .filter(|(_, d)| d["type"] == "ShortWaits")
        .map(|(_, d)| {
            (
                d["startTime"].as_f64().unwrap().max(from),
                d["endTime"].as_f64().unwrap().min(to),
            )
        })
        .filter(|(a, b)| a < b)
        .collect();
    let (mut for_runs, charged): (Vec<&Value>, Vec<&Value>) = markers
        .iter()
        .filter(|(n, d)| n == "Wait charged to" && d["type"] == "WaitCharged")
        .map(|(_, d)| d)
        .partition(|d| d["reason"].as_str().unwrap().starts_with("short waits ("));
    assert_eq!(
        charged.len(),
        waits.len(),
        "one marker per wait in the range"
    );
    assert_eq!(
        for_runs.len(),
        runs.len(),
        "one marker per run of short waits in the range"
    );
    let start = |d: &&Value| d["startTime"].as_f64().unwrap();
    for_runs.sort_by(|x, y| start(x).total_cmp(&start(y)));
    runs.sort_by(|x, y| x.0.total_cmp(&y.0));
    for (d, (a, b)) in for_runs.iter().zip(&runs) {
        assert!(
            (start(d) - a).abs() < 1e-3 && (d["endTime"].as_f64().unwrap() - b).abs() < 1e-3,
            "{d} spans its run {a}-{b}"
        );
        let share = d["share"].as_f64().unwrap();
        assert!(
            share > 0.0 && share <= 1.0 + 1e-9,
            "{d}: a share of its waits"
        );
    }
    let mut disk_ms = 0.0;
    for (d, (a, b)) in charged.iter().zip(&waits) {
        let (s, e) = (
            d["startTime"].as_f64().unwrap(),
            d["endTime"].as_f64().unwrap(),
        );
        assert!(
            (s - a).abs() < 1e-3 && (e - b).abs() < 1e-3,
            "{d} spans its wait {a}-{b}"
        );
        let to_disk = d["chargedTo"].as_str().unwrap() == format!("I/O on {disk}");
        assert_eq!(
            d["color"] == "orange",
            to_disk,
            "orange for the disk only: {d}"
        );
        if to_disk {
            disk_ms += d["share"].as_f64().unwrap() * (e - s);
        }
    }
    eprintln!(
        "annotate: {} waits and {} runs of short waits marked, {} waits charged mostly to {disk} ({disk_ms:.1} ms of theirs)",
        charged.len(),
        for_runs.len(),
        charged.iter().filter(|d| d["color"] == "orange").count()
    );
    assert!(disk_ms > 0.0, "some wait charged mostly to {disk}");
    assert!(
        disk_ms <= sync_wait_ms * 1.02,
        "{disk_ms:.1} ms marked as {disk}'s, more than the server's {sync_wait_ms:.1} ms off-CPU in fdatasync"
    );
    assert!(
        waits.len() >= 100,
        "{} waits of the client's 150 round trips marked",
        waits.len()
    );
    // The annotated profile annotated again: the thread's markers are
    // replaced, not doubled, and the rest stay as they were.
    let twice = dir.join("twice.json.gz");
    let out = Command::new(sysprof_bin())
        .args(["report", "--why", &client.to_string(), "--annotate"])
        .arg(&twice)
        .arg(&annotated)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "report --annotate of an annotated profile: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole_run = Command::new(sysprof_bin())
        .args(["report", "--why", &client.to_string(), "--annotate"])
        .arg(dir.join("once.json.gz"))
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(whole_run.status.success());
    let count = |p: &std::path::Path| {
        let p = Profile::load(p);
        let m = p.thread(pid, client).expect("the client").markers();
        (
            m.iter().filter(|(_, d)| d["type"] == "WaitCharged").count(),
            m.iter().filter(|(_, d)| d["type"] == "OffCpu").count(),
        )
    };
    let (once, twice) = (count(&dir.join("once.json.gz")), count(&twice));
    assert_eq!(
        once, twice,
        "(wait-charged, off-CPU) markers annotated once and twice"
    );
}

/// Check that `report --why` answers for a past incident from the agent's
/// store: the same chain (client, server, holder and its disk) recorded by
/// `sysprof agent` and written by `sysprof show` charges the client's
/// off-CPU time over its loop within 2 % of its own clocks, every ms once,
/// at least 60 % of it to the holder, the I/O on the holder's device.
#[test]
fn a_past_request_is_charged_along_its_chain_from_the_store() {
    if !can_record("a_past_request_is_charged_along_its_chain_from_the_store") {
        return;
    }
    let dir = scratch("why-show");
    let exe = build_c("waitchain", &dir.join("waitchain"), &[]);
    let disk = LoopDevice::new(&dir, 16);
    let store = dir.join("store");
    let agent = Agent::start(
        &store,
        &[
            "--window",
            "1",
            "--off-cpu-threshold",
            "0.05",
            "--health-interval",
            "3600",
        ],
        &[],
    );
    let out = Command::new(&exe)
        .args([disk.path.to_str().unwrap(), "200", "4", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "waitchain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    agent.wait_for_window_ending_after(wall_ms() + 200.0, std::time::Duration::from_secs(30));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("waitchain printed no {k}"));
    let (client, holder) = (f("client"), f("holder"));
    let client_wait_ms = f("client_wait_ns") as f64 / 1e6;
    let path = dir.join("show.json.gz");
    let o = show(&[
        "--store",
        store.to_str().unwrap(),
        "--since",
        "5m",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let profile = Profile::load(&path);
    let anchor_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let ms = |ns: u64| format!("{:.3}", (ns as f64 - anchor_ns) / 1e6);
    let r = why_in(
        &path,
        client,
        &[
            "--from",
            &ms(f("client_t0_ns")),
            "--to",
            &ms(f("client_t1_ns")),
        ],
    );
    let off_cpu = r["off_cpu_ms"].as_f64().unwrap();
    let total: f64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["ms"].as_f64().unwrap())
        .sum();
    let holder_ms = blamed(&r, Some(holder), &["running", "I/O", "runnable"]);
    eprintln!("why from show: client off-CPU {off_cpu:.1} ms (its own clocks {client_wait_ms:.1}), blame sums to {total:.1}; holder {holder_ms:.1} ms; {}", r["blame"]);
    assert!(
        (total - off_cpu).abs() < 1e-6 * off_cpu.max(1.0),
        "every ms charged once: {total} of {off_cpu}"
    );
    // Steal time (a vCPU the host did not run) is in neither its CPU clock
    // nor its waits: its own clocks may be up to the machine's above.
    let steal_ms = f("client_steal_ns") as f64 / 1e6;
    assert!(
        off_cpu <= client_wait_ms * 1.02 && off_cpu >= (client_wait_ms - steal_ms) * 0.98,
        "the client's off-CPU time {off_cpu:.1} ms vs its own clocks {client_wait_ms:.1} ms (steal {steal_ms:.0} ms)"
    );
    assert!(
        holder_ms >= off_cpu * 0.6,
        "the holder carries {holder_ms:.1} of {off_cpu:.1} ms"
    );
    let devices: Vec<&str> = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["what"] == "I/O")
        .filter_map(|b| b["device"].as_str())
        .collect();
    assert!(
        !devices.is_empty() && devices.iter().all(|d| *d == disk.name),
        "the I/O is on {}: {devices:?}",
        disk.name
    );
    // What the client waited on survives the store: its replies' pipe.
    let kinds: Vec<String> = profile
        .threads()
        .into_iter()
        .filter(|t| t.tid() == client)
        .flat_map(|t| t.markers())
        .filter(|(_, d)| d["type"] == "OffCpu" && d["reason"] == "sleeping")
        .map(|(_, d)| d["waitedOn"].as_str().unwrap_or("(none)").to_string())
        .collect();
    let pipe = kinds.iter().filter(|k| *k == "pipe").count();
    assert!(
        !kinds.is_empty() && pipe * 10 >= kinds.len() * 9,
        "the client's sleeps from the store waited on its pipe: {pipe} of {}",
        kinds.len()
    );
}

/// Check that threads that never sleep, on more threads than CPUs, have
/// every off-CPU ms charged to the run queue.
#[test]
fn preempted_spinners_are_charged_to_the_run_queue() {
    if !can_record("preempted_spinners_are_charged_to_the_run_queue") {
        return;
    }
    let dir = scratch("why-spinners");
    let exe = build_c("spinners", &dir.join("spinners"), &[]);
    let out_path = dir.join("p.json.gz");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let out = record(
        &["--", exe.to_str().unwrap(), &(cpus + 1).to_string(), "1.0"],
        &out_path,
    );
    assert_success(&out);
    let spinners: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("spinner=")?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(spinners.len(), cpus + 1, "every spinner said its tid");
    let (mut off_cpu, mut queued) = (0.0, 0.0);
    for &tid in &spinners {
        let r = why(&out_path, tid);
        off_cpu += r["off_cpu_ms"].as_f64().unwrap();
        queued += blamed(&r, Some(tid), &["runnable"]);
        eprintln!("why: spinner {tid}: {}", r["blame"]);
    }
    eprintln!("why: spinners off-CPU {off_cpu:.1} ms, runnable {queued:.1}");
    assert!(
        off_cpu >= 100.0,
        "{} spinners on {cpus} CPUs for 1 s wait for one: {off_cpu:.1} ms",
        cpus + 1
    );
    assert!(
        queued >= off_cpu * 0.97,
        "the run queue carries {queued:.1} of {off_cpu:.1} ms"
    );
}

/// Check that a runnable thread's wait is charged to whoever held its CPU:
/// four spinners pinned to one CPU, recorded with `-a` (per-CPU tracks by
/// default). Oracles, from the spinners' own schedstat: each one's run
/// delay is charged, at least 90 % of it, to threads named as holding its
/// CPU; and as the four never sleep and share one CPU, whenever one ran the
/// other three waited, so what each waiter charges one holder must be that
/// holder's CPU time (its schedstat), within 10 %, less at most the CPU's
/// steal over the run (/proc/stat): while the host runs something else the vCPU takes
/// no samples, its track shows no holder, and a waiter's time there is not
/// charged to the one that held the CPU (CI at f398504: 23.2 ms of one
/// spinner's wait in 15 ms and 2 ms gaps without a sample, "runnable",
/// 225.0 ms charged to a holder that ran 250.7).
#[test]
fn run_queue_waits_are_charged_to_the_cpus_holder() {
    if !can_record("run_queue_waits_are_charged_to_the_cpus_holder") {
        return;
    }
    let dir = scratch("why-holders");
    let exe = build_c("spinners", &dir.join("spinners"), &[]);
    let out_path = dir.join("p.json.gz");
    let cpu = std::thread::available_parallelism().unwrap().get() - 1;
    let steal_before = cpu_steal_ms(cpu);
    let out = record(
        &[
            "-a",
            "--",
            exe.to_str().unwrap(),
            "4",
            "1.0",
            &cpu.to_string(),
        ],
        &out_path,
    );
    let steal_ms = cpu_steal_ms(cpu) - steal_before;
    assert_success(&out);
    let field = |line: &str, key: &str| -> f64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    // tid -> (schedstat run delay, CPU time), ms.
    let spinners: Vec<(u64, f64, f64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("spinner="))
        .map(|l| {
            (
                field(l, "spinner") as u64,
                field(l, "run_delay_ns") / 1e6,
                field(l, "cpu_ns") / 1e6,
            )
        })
        .collect();
    assert_eq!(spinners.len(), 4, "every spinner said its tid");
    for &(tid, run_delay, _) in &spinners {
        let r = why(&out_path, tid);
        eprintln!(
            "why: spinner {tid} (run delay {run_delay:.1} ms): {}",
            r["blame"]
        );
        let held = blamed(&r, None, &["holding its CPU"]);
        assert!(
            held >= 0.9 * run_delay,
            "spinner {tid}: {held:.1} ms charged to its CPU's holders of its {run_delay:.1} ms run delay"
        );
        for &(holder, _, holder_cpu) in spinners.iter().filter(|s| s.0 != tid) {
            let ms = blamed(&r, Some(holder), &["holding its CPU"]);
            assert!(
                ms <= 1.1 * holder_cpu && ms >= 0.9 * holder_cpu - steal_ms,
                "spinner {tid} charges spinner {holder} {ms:.1} ms for holding its CPU; it ran {holder_cpu:.1} ms (CPU {cpu}'s steal {steal_ms:.0} ms)"
            );
        }
    }
}

/// CPU `cpu`'s steal time so far, ms (/proc/stat, in USER_HZ ticks).
fn cpu_steal_ms(cpu: usize) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .unwrap_or_else(|| panic!("no {name} line in /proc/stat"));
    let ticks: f64 = line
        .split_whitespace()
        .nth(8)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no steal in /proc/stat's {line}"));
    ticks * 1000.0 / per_second
}

/// Check waits too short for a marker each: a client process in round
/// trips with a server process that computes 20 µs a request (waits the
/// kernel folds), then 300 µs (waits sent, then summed by sysprof), at the
/// default threshold (1 ms). Per phase, `report --why CLIENT` over the
/// client's loop must:
/// - account for the client's off-CPU time by its own clocks (wall less
///   CPU time, within 5 %: a run's share of a range is estimated), less at
///   most the machine's steal time (which its CPU clock leaves out while it
///   ran), every ms once. Above it, 4 µs a wait more: when a wakeup
///   preempts (here mostly the idle task) the kernel skips the rq clock's
///   update in the `__schedule` that follows (`wakeup_preempt` ->
///   `rq_clock_skip_update`), so the client's CPU clock starts at its
///   enqueue, not at the switch the profile times; measured 2-3 µs a wait
///   in p1 and up to 6 in p2 here, 3.3 in CI's p1 (1335.3 ms against
///   1270.1, 5.1 %);
/// - charge the server's running with at least 90 % of the compute the
///   server did while the client waited for it (its requests times their
///   CPU time: by construction inside the client's waits), and no more
///   than the server's own CPU time over the phase plus steal;
/// - charge the client's own run queue no less than its schedstat says,
///   and that with its wakeups' landing (from the waking to the enqueue,
///   after the IPI that wakes its CPU: "waking its CPU", 10 us a wait
///   here) no more than the time from the server's clock before each
///   reply to the client's after it (which holds the wakeup, the wait for
///   a CPU and both system calls) plus that schedstat (preemptions while
///   it ran its loop: CI, beside a busy machine, 40.7 ms against replies'
///   35.4 and schedstat's 28.5);
/// - charge the server's run queue and its wakeups' landing (a request
///   reaching it) no more than, likewise, the time from the client's clock
///   before each request to the server's after it plus the server's
///   schedstat run delay;
/// - leave at most 8 % to anything else ("several wakers" where the
///   kernel's runs mixed wakers, cycles).
#[test]
fn short_round_trips_are_charged_to_the_server() {
    if !can_record("short_round_trips_are_charged_to_the_server") {
        return;
    }
    let dir = scratch("why-short");
    let exe = build_c("roundtrips", &dir.join("roundtrips"), &[]);
    let out_path = dir.join("p.json.gz");
    let phases = [("p1", 20_000u64, 20u64), ("p2", 1_500, 300)];
    let args: Vec<String> = phases
        .iter()
        .flat_map(|&(_, n, us)| [n.to_string(), us.to_string()])
        .collect();
    let mut argv = vec!["--", exe.to_str().unwrap()];
    argv.extend(args.iter().map(String::as_str));
    let out = record(&argv, &out_path);
    assert_success(&out);
    let f = |k: &str| field(&out.stdout, k).unwrap_or_else(|| panic!("roundtrips printed no {k}"));
    let (client, server) = (f("client"), f("server"));
    let profile = Profile::load(&out_path);
    let anchor_ns = profile.json["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
        .as_f64()
        .unwrap();
    let ms = |ns: u64| format!("{:.3}", (ns as f64 - anchor_ns) / 1e6);
    for (phase, requests, us) in phases {
        let key = |k: &str| f(&format!("{phase}_{k}"));
        let in_ms = |k: &str| key(k) as f64 / 1e6;
        let (client_wait_ms, client_delay_ms, server_cpu_ms, steal_ms) = (
            in_ms("client_wait_ns"),
            in_ms("client_run_delay_ns"),
            in_ms("server_cpu_ns"),
            in_ms("steal_ns"),
        );
        let client_woken_ms = in_ms("client_woken_ns");
        let computed_ms = (requests * us) as f64 / 1e3;
        let r = why_in(
            &out_path,
            client,
            &["--from", &ms(key("t0_ns")), "--to", &ms(key("t1_ns"))],
        );
        let off_cpu = r["off_cpu_ms"].as_f64().unwrap();
        let total: f64 = r["blame"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["ms"].as_f64().unwrap())
            .sum();
        let own_queue = blamed(&r, Some(client), &["runnable"]);
        let landing = blamed(&r, Some(client), &["waking its CPU"]);
        let running = blamed(&r, Some(server), &["running"]);
        let server_queue = blamed(&r, Some(server), &["runnable"]);
        let server_landing = blamed(&r, Some(server), &["waking its CPU"]);
        let (server_woken_ms, server_delay_ms) =
            (in_ms("server_woken_ns"), in_ms("server_run_delay_ns"));
        let rest = off_cpu - own_queue - landing - running - server_queue - server_landing;
        eprintln!(
            "why {phase}: client off-CPU {off_cpu:.1} ms (its own clocks {client_wait_ms:.1}, steal {steal_ms:.0}) in {} waits: server running {running:.1} \
             (computed {computed_ms:.1}, its CPU {server_cpu_ms:.1}), server runnable {server_queue:.1} and waking its CPU {server_landing:.1} (request to running {server_woken_ms:.1}, schedstat {server_delay_ms:.1}), client runnable {own_queue:.1} (schedstat {client_delay_ms:.1}, reply to running {client_woken_ms:.1}), waking its CPU {landing:.1}, \
             rest {rest:.1}; blame {}",
            r["waits"],
            r["blame"]
        );
        assert!(
            (total - off_cpu).abs() < 1e-6 * off_cpu.max(1.0),
            "{phase}: every ms charged once: {total} of {off_cpu}"
        );
        let waits = r["waits"].as_f64().unwrap();
        let skipped_clock_ms = waits * 0.004;
        assert!(
            off_cpu <= client_wait_ms * 1.05 + skipped_clock_ms + 1.0 && off_cpu >= (client_wait_ms - steal_ms) * 0.95 - 1.0,
            "{phase}: the client's off-CPU time {off_cpu:.1} ms vs its own clocks {client_wait_ms:.1} ms (steal {steal_ms:.0} ms, {waits} waits)"
        );
        assert!(
            running >= computed_ms * 0.9 && running <= (server_cpu_ms + steal_ms) * 1.02 + 1.0,
            "{phase}: the server's running {running:.1} ms vs the {computed_ms:.1} ms it computed for the client and its CPU time {server_cpu_ms:.1} ms (steal {steal_ms:.0})"
        );
        let slack = (client_delay_ms * 0.25).max(2.0);
        assert!(
            own_queue >= client_delay_ms - slack
                && own_queue + landing <= (client_woken_ms + client_delay_ms) * 1.05 + 1.0,
            "{phase}: the client's run queue {own_queue:.1} ms (its wakeups' landing {landing:.1}) vs its schedstat {client_delay_ms:.1} ms and its replies' {client_woken_ms:.1} ms to running"
        );
        assert!(
            server_queue + server_landing <= (server_woken_ms + server_delay_ms) * 1.05 + 1.0,
            "{phase}: the server's run queue {server_queue:.1} ms and its wakeups' landing {server_landing:.1} vs its requests' {server_woken_ms:.1} ms to running and its schedstat {server_delay_ms:.1}"
        );
        assert!(
            rest <= off_cpu * 0.08,
            "{phase}: {rest:.1} ms of {off_cpu:.1} went elsewhere: {}",
            r["blame"]
        );
    }
}
