//! The one clock: CLOCK_MONOTONIC in ns, as the BPF programs and the perf
//! sideband stamp every record, and its anchor to the wall clock. In:
//! nothing. Out: times every layer shares.

/// CLOCK_MONOTONIC now, ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One (wall clock ms, monotonic ns) pair read together: monotonic is read
/// on both sides of the wall clock and averaged.
pub fn clock_anchor() -> (f64, u64) {
    let m1 = monotonic_ns();
    let wall = clock_ns(libc::CLOCK_REALTIME);
    let m2 = monotonic_ns();
    (wall as f64 / 1e6, m1 + (m2 - m1) / 2)
}
