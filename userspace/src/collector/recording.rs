//! What a finished recording holds: the collector's output and the profile
//! writer's input.
//!
//! Processes own threads; threads own their samples as columns. Stacks are
//! one prefix tree over frame indices shared by all threads; frames are
//! (library, library-relative address) with what symbolication found.

use super::stack_tree::StackTree;
use crate::symbolize::AddrInfo;

/// Kernel frames use this library index (see [`Recording::kernel_lib`]).
pub const NO_LIB: u32 = u32::MAX;

/// A library (a binary file, or the kernel) that frames point into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibRecord {
    /// Path as the process saw it.
    pub path: String,
    /// File name.
    pub name: String,
    /// GNU build id.
    pub build_id: Option<Vec<u8>>,
}

/// One distinct code address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRecord {
    /// Index into [`Recording::libs`], or [`NO_LIB`] for an address in no known mapping.
    pub lib: u32,
    /// Address relative to the library (file offset for user code, offset
    /// from `_text` for the kernel), or the absolute address without a library.
    pub address: u64,
    /// True for kernel code.
    pub kernel: bool,
    /// What symbolication found (empty `funcs` when unresolved).
    pub symbols: AddrInfo,
}

/// Samples of one thread, as columns of equal length, sorted by time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadSamples {
    /// CLOCK_MONOTONIC ns.
    pub time_ns: Vec<u64>,
    /// Node in [`Recording::stacks`].
    pub stack: Vec<u32>,
    /// CPU time the thread used since its previous sample, ns.
    pub cpu_delta_ns: Vec<u64>,
}

/// One thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Thread id.
    pub tid: u32,
    /// Latest `comm`.
    pub name: String,
    /// Creation time if it was created during the recording (ns).
    pub start_ns: Option<u64>,
    /// Exit time if it exited during the recording (ns).
    pub end_ns: Option<u64>,
    /// Its samples.
    pub samples: ThreadSamples,
}

/// One process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRecord {
    /// Process id.
    pub pid: u32,
    /// Name: the executable's file name, else the main thread's `comm`.
    pub name: String,
    /// Path of the executable, if known.
    pub exe: Option<String>,
    /// Command line, if known.
    pub cmdline: String,
    /// Start time (ns), if known.
    pub start_ns: Option<u64>,
    /// Exit time if it exited during the recording (ns).
    pub end_ns: Option<u64>,
    /// Threads, main thread first.
    pub threads: Vec<ThreadRecord>,
}

/// Totals reported at the end of a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordingStats {
    /// Samples decoded.
    pub samples: u64,
    /// Samples lost in the kernel (ring buffer full).
    pub lost_samples: u64,
    /// Samples kept without a kernel stack because reading it failed.
    pub kernel_stack_failures: u64,
    /// Samples kept without a user stack because reading it failed.
    pub user_stack_failures: u64,
    /// Sideband records lost (perf ring full).
    pub lost_sideband: u64,
    /// Records that could not be decoded.
    pub malformed: u64,
}

/// A finished recording.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// CLOCK_MONOTONIC ns when recording started.
    pub start_ns: u64,
    /// Wall clock at `start_ns`, ms since the Unix epoch.
    pub start_wall_ms: f64,
    /// CLOCK_MONOTONIC ns when recording stopped.
    pub end_ns: u64,
    /// Sampling interval, ms.
    pub interval_ms: f64,
    /// Processes with at least one thread in the profile.
    pub processes: Vec<ProcessRecord>,
    /// Libraries; the last one is the kernel.
    pub libs: Vec<LibRecord>,
    /// Every distinct frame.
    pub frames: Vec<FrameRecord>,
    /// Stacks: a prefix tree whose keys are indices into `frames`, root = outermost caller.
    pub stacks: StackTree,
    /// Totals.
    pub stats: RecordingStats,
    /// Warnings for the user and the profile log (deduplicated).
    pub warnings: Vec<String>,
}

impl Recording {
    /// Index of the kernel's library.
    pub fn kernel_lib(&self) -> u32 {
        self.libs.len() as u32 - 1
    }
}
