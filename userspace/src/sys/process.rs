//! This process's own resources, through libc: open-file limit, malloc
//! arenas and trimming, CPU time and resident memory. In: nothing. Out:
//! the figures the agent's health line and the benchmarks report.

/// Raise the open-file limit to its maximum: every mapped binary is kept open.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to a local rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// How glibc's malloc is set for what the process is (see [`configure_malloc`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MallocUse {
    /// The agent: lives for weeks in a memory budget; trimmed each window.
    LongLived,
    /// `record`: a recording of seconds or minutes, whose peak RSS is
    /// what counts, and whose windows reuse what the one before freed.
    Recording,
}

/// glibc's malloc for the process `use_` says.
///
/// One arena: by default each thread that allocates gets its own (up to 8
/// per CPU), and memory freed in one is kept for that thread: the agent's
/// threads (collector, symbolizer, store, one per exporter) allocate in
/// bursts once per window, never contend, and would otherwise each hold
/// their worst window's heap. Measured beside the exporters' receivers,
/// steady RSS about 69 -> 66 MB (SYSPROF_TIMING lines).
///
/// Fixed mmap and trim thresholds: glibc raises its mmap threshold to the
/// largest block freed (up to 32 MiB), after which a window's large buffers
/// (kernel symbols, symbol tables, ring copies) come from the heap and stay
/// in it until a trim, so RSS peaked at a window's sum of them. The agent
/// (256 KiB and 1 MiB): beside a compiler loop its peak RSS (VmRSS every
/// 30 ms, 2 runs each) went 53.6 and 50.5 -> 46.9 and 47.5 MB; its CPU
/// beside a spinner did not change measurably (0.14 vs 0.21 % in 10-ms
/// ticks over 90 s). `record` (4 MiB and 8 MiB, and no trim per window):
/// each window's columns and stack tree of a few MiB were mapped, faulted
/// in page by page and unmapped again, and each window's trim gave back
/// what the next faulted in again: `record -a -d 8` beside pgbench took
/// 60,000-64,000 minor faults; 27,000-30,000 with these, its peak RSS the
/// same (79-83 MB), its CPU 1.18-1.30 -> 1.05-1.06 s (GLIBC_TUNABLES runs,
/// two rounds each). A clean `cargo build` beside 256 KiB and 1 MiB: peak
/// RSS 340 -> 260 and 270 MB (no arena per thread).
pub fn configure_malloc(use_: MallocUse) {
    let (mmap_threshold, trim_threshold) = match use_ {
        MallocUse::LongLived => (256 << 10, 1 << 20),
        MallocUse::Recording => (4 << 20, 8 << 20),
    };
    // SAFETY: mallopt has no preconditions; these are glibc parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim_threshold);
    }
}

/// Give the kernel back the heap memory freed since (glibc keeps it
/// otherwise, and a long-lived agent's RSS would be its worst moment's).
pub fn release_freed_memory() {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
}

/// This process's own CPU time (user + system), seconds.
pub fn process_cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident memory now and at its peak, bytes, from /proc/self/status.
pub fn rss_bytes() -> (u64, u64) {
    let status = crate::sys::kernel_text::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// The kernel memory of the BPF maps this process holds, bytes, and how
/// many maps: each map once (by its id), its `memlock` from
/// `/proc/self/fdinfo` (since Linux 6.4 what the map uses; before, what it
/// was charged at creation). Memory the process's cgroup pays and RSS does
/// not show: most of the agent's.
pub fn bpf_map_memory() -> (u64, usize) {
    let mut seen = std::collections::BTreeMap::new();
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return (0, 0);
    };
    for fd in fds.flatten() {
        let is_map = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-map");
        if !is_map {
            continue;
        }
        let info = crate::sys::kernel_text::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        if let Some((id, bytes)) = map_fdinfo(&info) {
            seen.insert(id, bytes);
        }
    }
    (seen.values().sum(), seen.len())
}

/// A BPF map's id and memlock bytes from its fdinfo text.
fn map_fdinfo(info: &str) -> Option<(u64, u64)> {
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("map_id:")?, field("memlock:")?))
}

/// The calling thread at nice `nice` (if allowed) until dropped, then at
/// its nice before.
pub struct RaisedPriority(Option<i32>);

impl RaisedPriority {
    /// Raise the calling thread's priority to nice `nice`; the guard must be
    /// dropped on the same thread.
    pub fn new(nice: i32) -> RaisedPriority {
        // SAFETY: getpriority has no preconditions; errno is cleared first
        // since -1 is a valid nice value.
        let before = unsafe {
            *libc::__errno_location() = 0;
            let n = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
            (*libc::__errno_location() == 0).then_some(n)
        };
        RaisedPriority(before.filter(|&b| b > nice && raise_thread_priority(nice)))
    }
}

impl Drop for RaisedPriority {
    fn drop(&mut self) {
        if let Some(before) = self.0 {
            raise_thread_priority(before);
        }
    }
}

/// Run the calling thread at a higher scheduling priority (nice `nice`, a
/// negative number) if allowed; without CAP_SYS_NICE it stays as it was.
/// For short, cheap work that must not wait behind what is profiled.
pub fn raise_thread_priority(nice: i32) -> bool {
    // SAFETY: gettid has no preconditions; setpriority with PRIO_PROCESS
    // and a thread id changes only that thread (Linux's per-thread nice).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0
    }
}

#[cfg(test)]
mod bpf_map_tests {
    /// A map's fdinfo gives its id and memlock; another file's none.
    #[test]
    fn map_fdinfo_reads_id_and_memlock() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1053\nmap_type:\t2\nkey_size:\t4\nvalue_size:\t8\nmax_entries:\t1\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t328\nmap_id:\t27\nfrozen:\t0\n";
        assert_eq!(super::map_fdinfo(info), Some((27, 328)));
        assert_eq!(super::map_fdinfo("pos:\t0\nflags:\t0\n"), None);
    }
}
