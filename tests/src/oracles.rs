//! What the kernel says, as the oracles: every task's CPU time
//! (`schedstat`), steal time, clocks, a process's resident memory and
//! peak (`/proc/PID/status`), its executable mappings; and how far a
//! sampled share may stand from a measured one.

use std::process::Output;

/// How far the share of `n` samples that fell in one of two functions may
/// stand from the share of CPU time the workload measured for it
/// (`expected`): each sample lands there with that chance, so the share
/// spreads binomially by sqrt(p(1-p)/n); four of those (passed by chance
/// once in 16,000) and a point for what is not chance (samples on a call's
/// edge). For 2,000 samples at 0.75: 0.049. A fixed 0.02 was two of them,
/// and failed CI by 0.004 (0.771 vs 0.747 of 1,959).
pub fn share_tolerance(expected: f64, n: u64) -> f64 {
    let p = expected.clamp(0.0, 1.0);
    0.01 + 4.0 * (p * (1.0 - p) / n.max(1) as f64).sqrt()
}

/// The machine's steal time so far (a vCPU its host did not run), in
/// milliseconds, from /proc/stat's `cpu` line (USER_HZ, 100 everywhere).
pub fn steal_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let jiffies: u64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    jiffies as f64 * 10.0
}

/// CLOCK_MONOTONIC now, ns (the clock of the profile's timestamps).
pub fn monotonic_ns() -> u64 {
    sysprof::sys::clock::monotonic_ns()
}

/// CPU time of every task on the machine so far, by tid (the first field of
/// every `/proc/PID/task/TID/schedstat`, the kernel's per-task accounting), ns.
pub fn all_tasks_cpu_ns() -> std::collections::HashMap<u64, u64> {
    let mut tasks_cpu = std::collections::HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return tasks_cpu;
    };
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<u64>() else {
                continue;
            };
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                tasks_cpu.insert(
                    tid,
                    s.split_whitespace()
                        .next()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0),
                );
            }
        }
    }
    tasks_cpu
}

/// CPU time all tasks used between two [`all_tasks_cpu_ns`] readings, ns:
/// per task, so a task that exits in between takes only its last stretch
/// with it, not everything it had used before.
pub fn cpu_ns_between(
    before: &std::collections::HashMap<u64, u64>,
    after: &std::collections::HashMap<u64, u64>,
) -> u64 {
    after
        .iter()
        .map(|(tid, &ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// The largest resident set of any child this process has waited for, MiB.
pub fn children_peak_rss_mib() -> f64 {
    let mut ru: [i64; 18] = [0; 18];
    extern "C" {
        fn getrusage(who: i32, usage: *mut i64) -> i32;
    }
    // SAFETY: struct rusage is 18 longs on 64-bit Linux; RUSAGE_CHILDREN = -1.
    unsafe { getrusage(-1, ru.as_mut_ptr()) };
    // ru_maxrss (KiB) follows the two timevals (4 longs).
    ru[4] as f64 / 1024.0
}

/// Wall clock now, ms since the epoch.
pub fn wall_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The anonymous part of a process's resident memory (heap, anonymous
/// maps), in KiB: what holding data costs, without the file-backed pages
/// (program text, mapped debug files, BPF ring buffers) whose residency
/// follows what runs and what the kernel keeps in its page cache.
pub fn anon_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The peak resident set (`VmHWM`, KiB) in /proc/PID/status; None once the
/// process is gone (a zombie has none).
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Wait for `child` (its output piped) at most `timeout`, reading its peak
/// resident set (VmHWM) from `/proc` every 20 ms: (its output, the last
/// peak read, MiB). The kernel's figure, not the program's own.
pub fn wait_with_peak_rss(
    mut child: std::process::Child,
    timeout: std::time::Duration,
    what: &str,
) -> (Output, f64) {
    use std::io::Read;
    let peak_kib = vm_hwm_kib;
    // The pipes are read as the child writes, so a full pipe cannot stall it.
    let pipe_reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = pipe_reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = pipe_reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + timeout;
    let mut peak = 0u64;
    let status = loop {
        // Read before asking whether it ended: a zombie has no VmHWM left.
        if let Some(kib) = peak_kib(child.id()) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {timeout:?}; killed. stderr: {}",
                String::from_utf8_lossy(&stderr.join().unwrap_or_default())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (out, peak as f64 / 1024.0)
}

/// `pid`'s BPF maps as the kernel accounts them, once per map id (from
/// `/proc/PID/fdinfo` of its map descriptors): (map type, max entries,
/// memlock bytes).
pub fn kernel_maps(pid: u32) -> Vec<(u64, u64, u64)> {
    let mut by_id = std::collections::BTreeMap::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_map = std::fs::read_link(fd.path())
            .is_ok_and(|t| t.to_string_lossy() == "anon_inode:bpf-map");
        if !is_map {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let get = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(kind), Some(entries), Some(bytes)) = (
            get("map_id:"),
            get("map_type:"),
            get("max_entries:"),
            get("memlock:"),
        ) {
            by_id.insert(id, (kind, entries, bytes));
        }
    }
    by_id.into_values().collect()
}
