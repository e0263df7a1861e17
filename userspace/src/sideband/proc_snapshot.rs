//! The processes that already run when recording starts, read from `/proc`.
//!
//! In: `/proc` (through the procfs crate). Out: a [`ProcSnapshot`] with, per
//! process, its name, executable, command line, start time, threads (name and
//! CPU time so far, the baseline for `threadCPUDelta`) and executable file
//! mappings as [`MmapEvent`]s. Processes that vanish while being read are
//! skipped: they were exiting anyway. A command line is read only up to
//! [`MAX_CMDLINE_BYTES`]: any user can give a process megabytes of
//! arguments, and thousands of such processes would otherwise be held (and
//! copied into every window) at that size.

use procfs::process::{MMapPath, Process};

use super::MmapEvent;

/// One process as `/proc` showed it at start.
#[derive(Debug, Clone)]
pub struct SnapshotProcess {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// `comm` of the main thread.
    pub comm: String,
    /// The executable's path, if readable.
    pub exe: Option<String>,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
    /// Start time, CLOCK_MONOTONIC-like nanoseconds since boot.
    pub start_ns: u64,
    /// Threads: (tid, comm, CPU time so far in ns).
    pub threads: Vec<(u32, String, u64)>,
    /// Executable file mappings.
    pub mappings: Vec<MmapEvent>,
    /// Its cgroup, if not the root.
    pub cgroup: Option<String>,
}

/// Most bytes of a command line read and kept (`ps` shows 4 KiB too, by
/// default); a longer one ends in "…".
pub const MAX_CMDLINE_BYTES: usize = 4096;

/// Everything read from `/proc` at start.
#[derive(Debug, Default, Clone)]
pub struct ProcSnapshot {
    /// Every process that could be read.
    pub processes: Vec<SnapshotProcess>,
    /// CLOCK_MONOTONIC when the reading began: each thread's CPU time was
    /// at least its read value by then.
    pub taken_ns: u64,
}

/// Read every process, or only `only` (and their threads) when given.
pub fn snapshot(only: Option<&[u32]>) -> ProcSnapshot {
    let taken_ns = crate::sys::clock::monotonic_ns();
    let ticks = procfs::ticks_per_second().max(1);
    let mut processes = Vec::new();
    let candidates: Vec<Process> = match only {
        Some(pids) => pids
            .iter()
            .filter_map(|&p| Process::new(p as i32).ok())
            .collect(),
        None => match procfs::process::all_processes() {
            Ok(all) => all.filter_map(Result::ok).collect(),
            Err(_) => Vec::new(),
        },
    };
    for proc in candidates {
        if let Some(p) = read_process(&proc, ticks) {
            processes.push(p);
        }
    }
    ProcSnapshot {
        processes,
        taken_ns,
    }
}

fn read_process(proc: &Process, ticks: u64) -> Option<SnapshotProcess> {
    let stat = proc.stat().ok()?;
    let pid = proc.pid as u32;
    let exe = proc.exe().ok().map(|p| p.to_string_lossy().into_owned());
    let cmdline = read_cmdline(pid);
    let mut threads = Vec::new();
    if let Ok(tasks) = proc.tasks() {
        for task in tasks.flatten() {
            let comm = task.stat().map(|s| s.comm).unwrap_or_default();
            let cpu_ns = thread_cpu_ns(pid, task.tid as u32).unwrap_or(0);
            threads.push((task.tid as u32, comm, cpu_ns));
        }
    }
    let mut mappings = Vec::new();
    if let Ok(maps) = proc.maps() {
        for m in maps {
            if !m.perms.contains(procfs::process::MMPermissions::EXECUTE) {
                continue;
            }
            let path = match &m.pathname {
                MMapPath::Path(p) => p.to_string_lossy().into_owned(),
                MMapPath::Vdso => "[vdso]".to_string(),
                // JIT code: named later from the process's perf map.
                MMapPath::Anonymous => "//anon".to_string(),
                _ => continue,
            };
            mappings.push(MmapEvent {
                time: 0,
                pid,
                start: m.address.0,
                len: m.address.1 - m.address.0,
                pgoff: m.offset,
                path,
                build_id: None,
                inode: Some((m.dev.0 as u32, m.dev.1 as u32, m.inode)),
            });
        }
    }
    Some(SnapshotProcess {
        pid,
        ppid: stat.ppid as u32,
        comm: stat.comm,
        exe,
        cmdline,
        start_ns: stat.starttime.saturating_mul(1_000_000_000) / ticks,
        threads,
        mappings,
        cgroup: read_cgroup(pid),
    })
}

/// `pid`'s command line, arguments joined by spaces: one bounded read of
/// `/proc/PID/cmdline` (the kernel copies no more than is asked for),
/// cut to [`MAX_CMDLINE_BYTES`] on a character boundary.
pub fn read_cmdline(pid: u32) -> String {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let mut bytes = Vec::with_capacity(MAX_CMDLINE_BYTES + 1);
    if file
        .take(MAX_CMDLINE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return String::new();
    }
    join_cmdline(&bytes)
}

/// NUL-separated arguments (of which at most [`MAX_CMDLINE_BYTES`] are
/// kept) joined by spaces.
fn join_cmdline(bytes: &[u8]) -> String {
    let cut = bytes.len() > MAX_CMDLINE_BYTES;
    let bytes = &bytes[..bytes.len().min(MAX_CMDLINE_BYTES)];
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    let mut line: String = String::from_utf8_lossy(bytes).replace('\0', " ");
    if cut {
        // The lossy conversion may have grown it (a cut character is U+FFFD).
        let mut end = line.len().min(MAX_CMDLINE_BYTES);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

/// The cgroup a process is in: the unified (v2) path, or on a v1-only or
/// hybrid system the first controller path that is not the root.
pub fn read_cgroup(pid: u32) -> Option<String> {
    let text = crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let v2 = text.lines().find_map(|l| l.strip_prefix("0::"));
    v2.filter(|p| *p != "/")
        .or_else(|| paths.iter().copied().find(|p| *p != "/"))
        .map(str::to_string)
}

/// A thread's CPU time so far, from `/proc/PID/task/TID/schedstat` (ns).
pub fn thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let text = crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that command lines are joined by spaces and cut at the limit,
    /// on a character boundary, with a mark that they were.
    #[test]
    fn command_lines_are_bounded() {
        assert_eq!(join_cmdline(b"sleep\x0010\0"), "sleep 10");
        assert_eq!(join_cmdline(b""), "");
        let mut long = b"x\0".to_vec();
        long.extend("é".repeat(MAX_CMDLINE_BYTES).as_bytes());
        let line = join_cmdline(&long[..MAX_CMDLINE_BYTES + 1]);
        assert!(
            line.ends_with('…') && line.starts_with("x é"),
            "{}",
            &line[..10]
        );
        assert!(
            line.len() <= MAX_CMDLINE_BYTES + '…'.len_utf8(),
            "{}",
            line.len()
        );
        // Our own, read from /proc, is what we were started with.
        let own: Vec<String> = std::env::args().collect();
        let joined = own.join(" ");
        if joined.len() < MAX_CMDLINE_BYTES {
            assert_eq!(read_cmdline(std::process::id()), joined);
        }
    }
}
