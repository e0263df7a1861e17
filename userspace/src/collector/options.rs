//! What the collector is asked to keep and make, and of which time range.
//!
//! In: the command's settings (`record`'s flags, the agent's config). Out:
//! [`PidFilter`], [`CollectorOptions`] for [`super::Collector::new`], and a
//! [`WindowRange`] for each [`super::Collector::finish_window`].

/// Which processes end up in the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidFilter {
    /// Every process (`record -a`).
    All,
    /// These processes and every process they start during the recording.
    Tree(Vec<u32>),
}

/// What the collector makes of what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectorOptions {
    /// Off-CPU intervals at least this long get a marker.
    pub marker_min_ns: u64,
    /// Build one track per CPU with on-CPU slices.
    pub per_cpu: bool,
    /// Off-CPU tracking was on (samples are then weighted by time).
    pub off_cpu: bool,
    /// Fetch missing debug files from debuginfod servers.
    pub debuginfod: bool,
    /// User stacks arrive as copies to unwind with DWARF (else as addresses).
    pub dwarf: bool,
    /// Keep every process that started in a window, even one without a
    /// sample or event (the agent: short-lived processes are its blind spot).
    pub keep_short_lived: bool,
    /// What reading one binary may cost (the agent reads less DWARF).
    pub elf_limits: crate::binaries::elf::ElfLimits,
    /// Ask the JVMs sampled for their perf maps.
    pub jvm_attach: bool,
    /// Threads compiling the in-kernel unwinder's large tables: `record`
    /// two, so rustc's driver and LLVM arrive side by side; the agent one,
    /// so it holds one large table's making at a time (each is ~30 MB for
    /// a moment: its CFI, its rows and their ranges).
    pub table_workers: usize,
    /// Bytes of a user stack's copy with `--call-graph dwarf-copy`,
    /// `--stack-size` (0: another mode, or not said).
    pub stack_size: usize,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        CollectorOptions {
            marker_min_ns: 1_000_000,
            per_cpu: false,
            off_cpu: false,
            debuginfod: false,
            dwarf: false,
            keep_short_lived: false,
            elf_limits: Default::default(),
            jvm_attach: false,
            table_workers: 2,
            stack_size: 0,
        }
    }
}

/// The time range a window covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRange {
    /// CLOCK_MONOTONIC ns of its start.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns of its end.
    pub end_ns: u64,
    /// Wall clock at `start_ns`, ms since the Unix epoch.
    pub start_wall_ms: f64,
    /// Sampling interval, ms.
    pub interval_ms: f64,
    /// Capture goes on after this window (the agent). Then each record
    /// belongs to the window in which it ends: an interval that began in
    /// an earlier window is kept whole, and what ends after `end_ns` (read
    /// from the rings after the window was cut) is carried into the next
    /// window. Otherwise (a recording) everything is cut to the range.
    pub continuous: bool,
}
