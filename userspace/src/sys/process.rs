//! This process's own resources, through libc: open-file limit, malloc
//! arenas and trimming, CPU time and resident memory. In: nothing. Out:
//! the figures the agent's health line and the benchmarks report.

/// Raise the open-file limit to its maximum: every mapped binary is kept open.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid pointers to a local rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// One glibc malloc arena. By default each thread that allocates
/// gets its own (up to 8 per CPU), and memory freed in one is kept for that
/// thread: the agent's threads (collector, symbolizer, store, one per
/// exporter) allocate in bursts once per window, never contend, and would
/// otherwise each hold their worst window's heap. Measured beside the
/// exporters' receivers, steady RSS about 69 -> 66 MB (SYSPROF_TIMING lines).
pub fn limit_malloc_arenas() {
    // SAFETY: mallopt has no preconditions; M_ARENA_MAX is a glibc parameter.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
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
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024;
    (kb("VmRSS:"), kb("VmHWM:"))
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
