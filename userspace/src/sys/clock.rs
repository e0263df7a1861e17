//! The one clock: CLOCK_MONOTONIC in ns, as the BPF programs and the perf
//! sideband stamp every record, and its anchor to the wall clock. In:
//! nothing. Out: times every layer shares.

/// CLOCK_MONOTONIC now, ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time, ns (what `SYSPROF_TIMING` says a step
/// cost the thread that ran it).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The whole process's CPU time, ns (every thread's, those that ended too).
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC ns for a time given as CLOCK_BOOTTIME ns (as /proc's
/// process start times are, in ticks): the clocks differ by the time the
/// machine was suspended.
pub fn boottime_to_monotonic_ns(boottime_ns: u64) -> u64 {
    let mono = monotonic_ns();
    let boot = clock_ns(libc::CLOCK_BOOTTIME);
    boottime_ns.saturating_sub(boot.saturating_sub(mono))
}

/// One (wall clock ms, monotonic ns) pair read together: monotonic is read
/// on both sides of the wall clock and averaged.
pub fn clock_anchor() -> (f64, u64) {
    let m1 = monotonic_ns();
    let wall = clock_ns(libc::CLOCK_REALTIME);
    let m2 = monotonic_ns();
    (wall as f64 / 1e6, m1 + (m2 - m1) / 2)
}
