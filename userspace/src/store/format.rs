//! The store's own types for a segment's payload, apart from the engine's.
//!
//! In: a [`Recording`](crate::model::recording::Recording) (the collector's output, which may grow a field or a
//! counter at any time). Out: a [`StoredRecording`] that postcard encodes
//! as segment format VERSION 3, followed by [`StoredAdditions`] (VERSION 4),
//! [`StoredLandings`] (VERSION 5), [`StoredKinds`] (VERSION 6) and
//! [`StoredFolded`] (VERSION 14), and back, checked.
//!
//! Why separate types: postcard writes fields in declaration order with
//! neither names nor a count, so a field added to the engine's structs
//! (an unwinder counter in [`UnwindStats`](crate::model::recording::UnwindStats)) would silently change what a
//! segment means and make every stored one decode wrong. Here each type
//! mirrors, field for field and variant for variant in the same order,
//! what VERSION 3 holds (tests/data/segment-v2.seg was written by the code
//! before these types existed, and must still decode: VERSION 3 only added
//! the `ShortWaits` marker, as the last variant, so VERSION 2's bytes mean
//! the same). A change to these types is a change of the format: it needs
//! a new [`super::segment::VERSION`].
//!
//! Times are held as the model's ns here; [`super::segment`] turns them into
//! µs differences in place before encoding (the same fields, other units).

use serde::{Deserialize, Serialize};

use crate::model::recording::{FrameKind, Recording, NO_LIB};

mod convert;

/// A recording as a segment holds it ([`Recording`](crate::model::recording::Recording)'s fields, in its order).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredRecording {
    pub start_ns: u64,
    pub start_wall_ms: f64,
    pub end_ns: u64,
    pub interval_ms: f64,
    pub processes: Vec<StoredProcess>,
    pub libs: Vec<StoredLib>,
    pub frames: Vec<StoredFrame>,
    pub stacks: StoredStacks,
    pub stats: StoredStats,
    pub warnings: Vec<String>,
    pub counters: Vec<StoredCounter>,
    pub cpu_tracks: Vec<(u32, Vec<StoredMarker>)>,
    pub off_cpu: bool,
    pub notes: Vec<String>,
}

/// What VERSION 4 adds, encoded after the [`StoredRecording`] in the same
/// payload (so VERSION 2 and 3 payloads, which end there, decode as they
/// are, with none of it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredAdditions {
    /// Functions' first lines, where they identify the function (Python):
    /// (frame index, inline depth, line).
    pub start_lines: Vec<(u32, u32, u32)>,
}

impl StoredAdditions {
    /// What `rec` holds beyond VERSION 3.
    pub fn of(rec: &crate::model::recording::Recording) -> StoredAdditions {
        let mut start_lines = Vec::new();
        for (i, f) in rec.frames.iter().enumerate() {
            for (depth, func) in f.symbols.funcs.iter().enumerate() {
                if let Some(line) = func.start_line {
                    start_lines.push((i as u32, depth as u32, line));
                }
            }
        }
        StoredAdditions { start_lines }
    }

    /// Put them into `rec`; false when one names a frame it does not have.
    pub fn apply(self, rec: &mut crate::model::recording::Recording) -> bool {
        for (frame, depth, line) in self.start_lines {
            match rec
                .frames
                .get_mut(frame as usize)
                .and_then(|f| f.symbols.funcs.get_mut(depth as usize))
            {
                Some(func) => func.start_line = Some(line),
                None => return false,
            }
        }
        true
    }
}

/// What VERSION 5 adds, encoded after the [`StoredAdditions`]: each
/// wakeup's landing (`MarkerRecord::OffCpu`'s and `ShortWaits`' `landing_ns`:
/// from the wakeup to its enqueue, the wakee's own, not run delay), in µs,
/// one per such marker of every thread in order (processes, their threads,
/// their markers). Before it, a stored marker's run delay held its landing
/// and a short-wait run's landing was in its runnable rest; payloads
/// without it decode so.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredLandings {
    pub landing_us: Vec<u64>,
}

/// The landing of a marker that has one, as a mutable place.
fn landing_of(m: &mut crate::model::recording::MarkerRecord) -> Option<&mut u64> {
    use crate::model::recording::MarkerRecord;
    match m {
        MarkerRecord::OffCpu { landing_ns, .. } | MarkerRecord::ShortWaits { landing_ns, .. } => {
            Some(landing_ns)
        }
        MarkerRecord::Io { .. } | MarkerRecord::OnCpu { .. } => None,
    }
}

impl StoredLandings {
    /// `rec`'s landings, in µs (rounded as the segment's times are).
    pub fn of(rec: &mut crate::model::recording::Recording) -> StoredLandings {
        let landing_us = rec
            .processes
            .iter_mut()
            .flat_map(|p| p.threads.iter_mut())
            .flat_map(|t| t.markers.iter_mut())
            .filter_map(landing_of)
            .map(|l| l.saturating_add(500) / 1000)
            .collect();
        StoredLandings { landing_us }
    }

    /// Put them into `rec`; false when their count is not its markers'
    /// with a landing.
    pub fn apply(self, rec: &mut crate::model::recording::Recording) -> bool {
        let mut places: Vec<&mut u64> = rec
            .processes
            .iter_mut()
            .flat_map(|p| p.threads.iter_mut())
            .flat_map(|t| t.markers.iter_mut())
            .filter_map(landing_of)
            .collect();
        if places.len() != self.landing_us.len() {
            return false;
        }
        for (place, us) in places.iter_mut().zip(self.landing_us) {
            **place = us.saturating_mul(1000);
        }
        true
    }
}

/// The stack tree as two columns: each node's distance back to its parent
/// (0 for a root; small numbers, which compress) and its key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredStacks {
    pub back: Vec<u32>,
    pub key: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredLib {
    pub path: String,
    pub name: String,
    pub build_id: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredFrame {
    pub lib: u32,
    pub address: u64,
    pub kernel: bool,
    pub symbols: StoredAddrInfo,
    pub pseudo: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredAddrInfo {
    pub symbol_start: u64,
    pub symbol_offset: u64,
    pub symbol_size: Option<u64>,
    pub funcs: Vec<StoredFunc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredFunc {
    pub name: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredProcess {
    pub pid: u32,
    pub name: String,
    pub exe: Option<String>,
    pub cmdline: String,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub cgroup: Option<String>,
    pub profiler: bool,
    pub threads: Vec<StoredThread>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredThread {
    pub tid: u32,
    pub name: String,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub samples: StoredSamples,
    pub off_cpu: StoredOffCpu,
    pub markers: Vec<StoredMarker>,
    pub switches: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSamples {
    pub time_ns: Vec<u64>,
    pub stack: Vec<u32>,
    pub cpu_delta_ns: Vec<u64>,
    pub cpu: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredOffCpu {
    pub time_ns: Vec<u64>,
    pub stack: Vec<u32>,
    pub duration_ns: Vec<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum StoredOffCpuReason {
    Preempted,
    Sleeping,
    Blocked,
    Other,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum StoredInterruptKind {
    Hard,
    Soft,
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredWaker {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub interrupt: Option<StoredInterruptKind>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum StoredIoOp {
    Read,
    Write,
    Flush,
    Discard,
    SecureErase,
    WriteZeroes,
    Other(u32),
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum StoredSliceKind {
    User,
    Kernel,
    Idle,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum StoredMarker {
    OffCpu {
        start_ns: u64,
        end_ns: u64,
        reason: StoredOffCpuReason,
        run_delay_ns: Option<u64>,
        waker: Option<StoredWaker>,
        cpus: (u32, u32),
        waker_stack: Option<u32>,
    },
    Io {
        start_ns: u64,
        issue_ns: u64,
        done_ns: u64,
        device: String,
        op: StoredIoOp,
        flags: u32,
        bytes: u32,
        sector: u64,
        error: i32,
        stack: Option<u32>,
    },
    OnCpu {
        start_ns: u64,
        end_ns: u64,
        pid: u32,
        tid: u32,
        name: String,
        kind: StoredSliceKind,
    },
    /// VERSION 3.
    ShortWaits {
        start_ns: u64,
        end_ns: u64,
        count: u32,
        off_cpu_ns: u64,
        waited_ns: u64,
        waker: StoredShortWaker,
    },
}

/// VERSION 3.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum StoredShortWaker {
    Nobody,
    Unseen,
    Task { pid: u32, tid: u32 },
    Interrupt,
    Several,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredCounter {
    pub name: String,
    pub category: String,
    pub description: String,
    pub pid: u32,
    pub time_ns: Vec<u64>,
    pub count: Vec<f64>,
}

/// [`RecordingStats`](crate::model::recording::RecordingStats) as VERSION 2 holds it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StoredStats {
    pub samples: u64,
    pub samples_kept: u64,
    pub lost_samples: u64,
    pub kernel_stack_failures: u64,
    pub user_stack_failures: u64,
    pub lost_sideband: u64,
    pub malformed: u64,
    pub off_cpu_intervals: u64,
    pub off_cpu_folded: u64,
    pub off_cpu_end_inferred: u64,
    pub io_requests: u64,
    pub lost_events: u64,
    pub lost_stacks: u64,
    pub stack_records: u64,
    pub stack_read_failures: u64,
    pub stacks_not_kept: u64,
    pub lost_state: u64,
    pub io_untracked: u64,
    pub processes_without_data: u64,
    pub unwind: StoredUnwindStats,
}

/// [`UnwindStats`](crate::model::recording::UnwindStats) as VERSION 2 holds it: a counter the unwinder adds is
/// not stored until a new version says where.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StoredUnwindStats {
    pub unwinds: u64,
    pub reached_root: u64,
    pub copy_exhausted: u64,
    pub copy_exhausted_in_profiler: u64,
    pub no_unwind_info: u64,
    pub bad_return_address: u64,
    pub unwind_ns: u64,
}

/// What VERSION 6 adds, encoded after the [`StoredLandings`]: each frame's
/// [`FrameKind`] as a byte, in the frames' order. Before it a frame had only
/// `kernel` and `pseudo` (still written, for what reads them): payloads
/// without it get kinds told as the outputs then told them
/// ([`FrameKind`]s of [`infer_kinds`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredKinds {
    pub kinds: Vec<u8>,
}

impl StoredKinds {
    /// `rec`'s frames' kinds.
    pub fn of(rec: &Recording) -> StoredKinds {
        StoredKinds {
            kinds: rec.frames.iter().map(|f| f.kind as u8).collect(),
        }
    }

    /// Put them into `rec`; false when their count is not its frames' or a
    /// byte is no kind.
    pub fn apply(self, rec: &mut Recording) -> bool {
        if self.kinds.len() != rec.frames.len() {
            return false;
        }
        for (f, b) in rec.frames.iter_mut().zip(self.kinds) {
            match FrameKind::from_u8(b) {
                Some(k) => f.kind = k,
                None => return false,
            }
        }
        true
    }
}

/// What VERSION 14 adds, encoded after the [`StoredKinds`]: the folded
/// tracks ([`crate::model::fold`], which the store's compaction makes), as
/// (process index, processes it stands for). Before it no segment held one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoredFolded {
    pub tracks: Vec<(u32, u64)>,
}

impl StoredFolded {
    /// `rec`'s folded tracks.
    pub fn of(rec: &Recording) -> StoredFolded {
        StoredFolded {
            tracks: rec
                .processes
                .iter()
                .enumerate()
                .filter(|(_, p)| p.folded > 0)
                .map(|(i, p)| (i as u32, p.folded))
                .collect(),
        }
    }

    /// Put them into `rec`; false when one names a process it does not
    /// have, the profiler's own, or stands for no process.
    pub fn apply(self, rec: &mut Recording) -> bool {
        for (i, members) in self.tracks {
            match rec.processes.get_mut(i as usize) {
                Some(p) if members > 0 && !p.profiler => p.folded = members,
                _ => return false,
            }
        }
        true
    }
}

/// The kinds of a recording stored before VERSION 6, told from what its
/// frames hold as the outputs told them then: a pseudo frame's name says
/// off-CPU or not; a user frame with a source file and no library is a
/// runtime's (Java by HotSpot's names, which end in their parameter list;
/// JavaScript by V8's script names; else Python); a frame in a `JIT (...)`
/// library is JIT code. `kernel` and `pseudo` were decoded into the kinds
/// already ([`FrameKind::Kernel`], [`FrameKind::Missing`]).
pub fn infer_kinds(rec: &mut Recording) {
    for f in rec.frames.iter_mut() {
        let first = f.symbols.funcs.first();
        f.kind = match f.kind {
            FrameKind::Missing if first.is_some_and(|x| x.name.contains("off-CPU")) => {
                FrameKind::OffCpu
            }
            FrameKind::Native if f.lib == NO_LIB && first.is_some_and(|x| x.file.is_some()) => {
                let name = first.map_or("", |x| x.name.as_str());
                let file = first.and_then(|x| x.file.as_deref()).unwrap_or("");
                if file.starts_with("node:")
                    || [".js", ".mjs", ".cjs"].iter().any(|e| file.ends_with(e))
                {
                    FrameKind::JavaScript
                } else if name.ends_with(')') {
                    FrameKind::Java
                } else {
                    FrameKind::Python
                }
            }
            FrameKind::Native
                if rec
                    .libs
                    .get(f.lib as usize)
                    .is_some_and(|l| l.name.starts_with("JIT (")) =>
            {
                FrameKind::Jit
            }
            k => k,
        };
    }
}

#[cfg(test)]
mod infer_tests;
