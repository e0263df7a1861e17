//! The CPUs that are online: one ring, one sideband event, one perf event
//! each. In: `/sys/devices/system/cpu/online`. Out: their numbers.

/// The online CPUs, by number.
pub fn online() -> std::io::Result<Vec<u32>> {
    aya::util::online_cpus()
        .map_err(|(path, e)| std::io::Error::new(e.kind(), format!("{path}: {e}")))
}
