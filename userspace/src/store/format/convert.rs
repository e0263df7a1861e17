//! The store's types from and to the engine's, field by field.
//!
//! In: a [`Recording`] (moved, nothing copied but the stack tree's
//! columns). Out: a [`StoredRecording`]; and back, with the stack tree
//! rebuilt and checked. The struct literals are exhaustive on purpose: a
//! field added to either side does not compile until someone decides where
//! (and in which format version) it is stored.

use super::*;
use crate::model::recording::{
    CounterRecord, FrameRecord, InterruptKind, IoOp, LibRecord, MarkerRecord, OffCpuReason,
    OffCpuSamples, ProcessRecord, Recording, RecordingStats, ShortWaker, SliceKind, ThreadRecord,
    ThreadSamples, UnwindStats, Waker,
};
use crate::model::short_name::short_name;
use crate::model::stack_tree::{StackTree, NO_PARENT};
use crate::model::symbols::{AddrInfo, FuncAtAddr};

// ---- from the model ----

impl From<Recording> for StoredRecording {
    fn from(r: Recording) -> StoredRecording {
        let (parent, key) = r.stacks.columns();
        let back = parent
            .iter()
            .enumerate()
            .map(|(n, &p)| if p == NO_PARENT { 0 } else { n as u32 - p })
            .collect();
        StoredRecording {
            start_ns: r.start_ns,
            start_wall_ms: r.start_wall_ms,
            end_ns: r.end_ns,
            interval_ms: r.interval_ms,
            stacks: StoredStacks {
                back,
                key: key.to_vec(),
            },
            processes: r.processes.into_iter().map(StoredProcess::from).collect(),
            libs: r
                .libs
                .into_iter()
                .map(|l| StoredLib {
                    path: l.path,
                    name: l.name,
                    build_id: l.build_id,
                })
                .collect(),
            frames: r.frames.into_iter().map(StoredFrame::from).collect(),
            stats: r.stats.into(),
            warnings: r.warnings,
            counters: r.counters.into_iter().map(StoredCounter::from).collect(),
            cpu_tracks: r
                .cpu_tracks
                .into_iter()
                .map(|(cpu, ms)| (cpu, ms.into_iter().map(StoredMarker::from).collect()))
                .collect(),
            off_cpu: r.off_cpu,
            notes: r.notes,
        }
    }
}

impl From<FrameRecord> for StoredFrame {
    fn from(f: FrameRecord) -> StoredFrame {
        let (kernel, pseudo) = (f.is_kernel(), f.is_pseudo());
        let s = f.symbols;
        StoredFrame {
            lib: f.lib,
            address: f.address,
            kernel,
            symbols: StoredAddrInfo {
                symbol_start: s.symbol_start,
                symbol_offset: s.symbol_offset,
                symbol_size: s.symbol_size,
                funcs: s
                    .funcs
                    .into_iter()
                    .map(|f| StoredFunc {
                        name: f.name,
                        file: f.file,
                        line: f.line,
                    })
                    .collect(),
            },
            pseudo,
        }
    }
}

impl From<ProcessRecord> for StoredProcess {
    fn from(p: ProcessRecord) -> StoredProcess {
        StoredProcess {
            pid: p.pid,
            name: p.name,
            exe: p.exe,
            cmdline: p.cmdline,
            start_ns: p.start_ns,
            end_ns: p.end_ns,
            cgroup: p.cgroup,
            profiler: p.profiler,
            threads: p.threads.into_iter().map(StoredThread::from).collect(),
        }
    }
}

impl From<ThreadRecord> for StoredThread {
    fn from(t: ThreadRecord) -> StoredThread {
        let (s, o) = (t.samples, t.off_cpu);
        StoredThread {
            tid: t.tid,
            name: t.name,
            start_ns: t.start_ns,
            end_ns: t.end_ns,
            samples: StoredSamples {
                time_ns: s.time_ns,
                stack: s.stack,
                cpu_delta_ns: s.cpu_delta_ns,
                cpu: s.cpu,
            },
            off_cpu: StoredOffCpu {
                time_ns: o.time_ns,
                stack: o.stack,
                duration_ns: o.duration_ns,
            },
            markers: t.markers.into_iter().map(StoredMarker::from).collect(),
            switches: t.switches,
        }
    }
}

impl From<MarkerRecord> for StoredMarker {
    fn from(m: MarkerRecord) -> StoredMarker {
        match m {
            MarkerRecord::OffCpu {
                start_ns,
                end_ns,
                reason,
                run_delay_ns,
                landing_ns: _,
                waker,
                cpus,
                waker_stack,
            } => StoredMarker::OffCpu {
                start_ns,
                end_ns,
                reason: reason.into(),
                // The landing goes apart (`StoredLandings`, format 5).
                run_delay_ns,
                waker: waker.map(StoredWaker::from),
                cpus,
                waker_stack,
            },
            MarkerRecord::Io {
                start_ns,
                issue_ns,
                done_ns,
                device,
                op,
                flags,
                bytes,
                sector,
                error,
                stack,
            } => StoredMarker::Io {
                start_ns,
                issue_ns,
                done_ns,
                device: device.to_string(),
                op: op.into(),
                flags,
                bytes,
                sector,
                error,
                stack,
            },
            MarkerRecord::OnCpu {
                start_ns,
                end_ns,
                pid,
                tid,
                name,
                kind,
            } => StoredMarker::OnCpu {
                start_ns,
                end_ns,
                pid,
                tid,
                name,
                kind: kind.into(),
            },
            MarkerRecord::ShortWaits {
                start_ns,
                end_ns,
                count,
                off_cpu_ns,
                waited_ns,
                landing_ns: _,
                waker,
            } => StoredMarker::ShortWaits {
                start_ns,
                end_ns,
                count,
                off_cpu_ns,
                waited_ns,
                waker: waker.into(),
            },
        }
    }
}

impl From<OffCpuReason> for StoredOffCpuReason {
    fn from(r: OffCpuReason) -> StoredOffCpuReason {
        match r {
            OffCpuReason::Preempted => StoredOffCpuReason::Preempted,
            OffCpuReason::Sleeping => StoredOffCpuReason::Sleeping,
            OffCpuReason::Blocked => StoredOffCpuReason::Blocked,
            OffCpuReason::Other => StoredOffCpuReason::Other,
        }
    }
}

impl From<Waker> for StoredWaker {
    fn from(w: Waker) -> StoredWaker {
        StoredWaker {
            pid: w.pid,
            tid: w.tid,
            name: w.name.to_string(),
            interrupt: w.interrupt.map(|k| match k {
                InterruptKind::Hard => StoredInterruptKind::Hard,
                InterruptKind::Soft => StoredInterruptKind::Soft,
                InterruptKind::Unknown => StoredInterruptKind::Unknown,
            }),
        }
    }
}

impl From<IoOp> for StoredIoOp {
    fn from(op: IoOp) -> StoredIoOp {
        match op {
            IoOp::Read => StoredIoOp::Read,
            IoOp::Write => StoredIoOp::Write,
            IoOp::Flush => StoredIoOp::Flush,
            IoOp::Discard => StoredIoOp::Discard,
            IoOp::SecureErase => StoredIoOp::SecureErase,
            IoOp::WriteZeroes => StoredIoOp::WriteZeroes,
            IoOp::Other(n) => StoredIoOp::Other(n),
        }
    }
}

impl From<SliceKind> for StoredSliceKind {
    fn from(kind: SliceKind) -> StoredSliceKind {
        match kind {
            SliceKind::User => StoredSliceKind::User,
            SliceKind::Kernel => StoredSliceKind::Kernel,
            SliceKind::Idle => StoredSliceKind::Idle,
        }
    }
}

impl From<ShortWaker> for StoredShortWaker {
    fn from(w: ShortWaker) -> StoredShortWaker {
        match w {
            ShortWaker::Nobody => StoredShortWaker::Nobody,
            ShortWaker::Unseen => StoredShortWaker::Unseen,
            ShortWaker::Task { pid, tid } => StoredShortWaker::Task { pid, tid },
            ShortWaker::Interrupt => StoredShortWaker::Interrupt,
            ShortWaker::Several => StoredShortWaker::Several,
        }
    }
}

impl From<CounterRecord> for StoredCounter {
    fn from(c: CounterRecord) -> StoredCounter {
        StoredCounter {
            name: c.name,
            category: c.category,
            description: c.description,
            pid: c.pid,
            time_ns: c.time_ns,
            count: c.count,
        }
    }
}

impl From<RecordingStats> for StoredStats {
    fn from(s: RecordingStats) -> StoredStats {
        let u = s.unwind;
        StoredStats {
            samples: s.samples,
            samples_kept: s.samples_kept,
            lost_samples: s.lost_samples,
            kernel_stack_failures: s.kernel_stack_failures,
            user_stack_failures: s.user_stack_failures,
            lost_sideband: s.lost_sideband,
            malformed: s.malformed,
            off_cpu_intervals: s.off_cpu_intervals,
            off_cpu_folded: s.off_cpu_folded,
            off_cpu_end_inferred: s.off_cpu_end_inferred,
            io_requests: s.io_requests,
            lost_events: s.lost_events,
            lost_stacks: s.lost_stacks,
            stack_records: s.stack_records,
            stack_read_failures: s.stack_read_failures,
            stacks_not_kept: s.stacks_not_kept,
            lost_state: s.lost_state,
            io_untracked: s.io_untracked,
            processes_without_data: s.processes_without_data,
            unwind: StoredUnwindStats {
                unwinds: u.unwinds,
                reached_root: u.reached_root,
                copy_exhausted: u.copy_exhausted,
                copy_exhausted_in_profiler: u.copy_exhausted_in_profiler,
                no_unwind_info: u.no_unwind_info,
                bad_return_address: u.bad_return_address,
                unwind_ns: u.unwind_ns,
            },
        }
    }
}

// ---- to the model ----

impl StoredStacks {
    /// The tree, or None if a parent does not precede its child.
    fn into_tree(self) -> Option<StackTree> {
        let parent: Option<Vec<u32>> = self
            .back
            .iter()
            .enumerate()
            .map(|(n, &b)| match b {
                0 => Some(NO_PARENT),
                b => (n as u32).checked_sub(b),
            })
            .collect();
        parent.and_then(|p| StackTree::from_columns(p, self.key))
    }
}

impl StoredRecording {
    /// The recording this holds (its times already back in ns); None if
    /// its stack tree is not one (a parent that does not precede its child).
    pub fn into_model(self) -> Option<Recording> {
        Some(Recording {
            start_ns: self.start_ns,
            start_wall_ms: self.start_wall_ms,
            end_ns: self.end_ns,
            interval_ms: self.interval_ms,
            stacks: self.stacks.into_tree()?,
            processes: self
                .processes
                .into_iter()
                .map(StoredProcess::into_model)
                .collect(),
            libs: self
                .libs
                .into_iter()
                .map(|l| LibRecord {
                    path: l.path,
                    name: l.name,
                    build_id: l.build_id,
                })
                .collect(),
            frames: self
                .frames
                .into_iter()
                .map(StoredFrame::into_model)
                .collect(),
            stats: self.stats.into_model(),
            warnings: self.warnings,
            // Not in the store's format: short waits' wakers by tid only.
            waker_names: Default::default(),
            counters: self
                .counters
                .into_iter()
                .map(StoredCounter::into_model)
                .collect(),
            cpu_tracks: self
                .cpu_tracks
                .into_iter()
                .map(|(cpu, ms)| (cpu, ms.into_iter().map(StoredMarker::into_model).collect()))
                .collect(),
            off_cpu: self.off_cpu,
            // Not kept: it only chooses the thread that opens first for a
            // command's recording, and what the store keeps is read back
            // without a command.
            whole_system: false,
            // The agent's recordings end with its windows, not a process.
            main_process_ended: false,
            notes: self.notes,
        })
    }
}

impl StoredFrame {
    fn into_model(self) -> FrameRecord {
        let s = self.symbols;
        FrameRecord {
            lib: self.lib,
            address: self.address,
            // The kinds told apart before VERSION 6; its kinds (or
            // `infer_kinds`) say the rest.
            kind: if self.kernel {
                FrameKind::Kernel
            } else if self.pseudo {
                FrameKind::Missing
            } else {
                FrameKind::Native
            },
            symbols: AddrInfo {
                symbol_start: s.symbol_start,
                symbol_offset: s.symbol_offset,
                symbol_size: s.symbol_size,
                // Start lines come after the recording, in VERSION 4's additions.
                funcs: s
                    .funcs
                    .into_iter()
                    .map(|f| FuncAtAddr {
                        name: f.name,
                        file: f.file,
                        line: f.line,
                        start_line: None,
                    })
                    .collect(),
            },
        }
    }
}

impl StoredProcess {
    fn into_model(self) -> ProcessRecord {
        ProcessRecord {
            pid: self.pid,
            name: self.name,
            exe: self.exe,
            cmdline: self.cmdline,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            cgroup: self.cgroup,
            profiler: self.profiler,
            threads: self
                .threads
                .into_iter()
                .map(StoredThread::into_model)
                .collect(),
            // VERSION 14's StoredFolded says which are folded.
            folded: 0,
        }
    }
}

impl StoredThread {
    fn into_model(self) -> ThreadRecord {
        let (s, o) = (self.samples, self.off_cpu);
        ThreadRecord {
            tid: self.tid,
            name: self.name,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            samples: ThreadSamples {
                time_ns: s.time_ns,
                stack: s.stack,
                cpu_delta_ns: s.cpu_delta_ns,
                cpu: s.cpu,
            },
            off_cpu: OffCpuSamples {
                time_ns: o.time_ns,
                stack: o.stack,
                duration_ns: o.duration_ns,
            },
            markers: self
                .markers
                .into_iter()
                .map(StoredMarker::into_model)
                .collect(),
            switches: self.switches,
        }
    }
}

impl StoredMarker {
    fn into_model(self) -> MarkerRecord {
        match self {
            StoredMarker::OffCpu {
                start_ns,
                end_ns,
                reason,
                run_delay_ns,
                waker,
                cpus,
                waker_stack,
            } => MarkerRecord::OffCpu {
                start_ns,
                end_ns,
                reason: reason.into_model(),
                run_delay_ns,
                landing_ns: 0,
                waker: waker.map(StoredWaker::into_model),
                cpus,
                waker_stack,
            },
            StoredMarker::Io {
                start_ns,
                issue_ns,
                done_ns,
                device,
                op,
                flags,
                bytes,
                sector,
                error,
                stack,
            } => MarkerRecord::Io {
                start_ns,
                issue_ns,
                done_ns,
                device: short_name(&device),
                op: op.into_model(),
                flags,
                bytes,
                sector,
                error,
                stack,
            },
            StoredMarker::OnCpu {
                start_ns,
                end_ns,
                pid,
                tid,
                name,
                kind,
            } => MarkerRecord::OnCpu {
                start_ns,
                end_ns,
                pid,
                tid,
                name,
                kind: kind.into_model(),
            },
            StoredMarker::ShortWaits {
                start_ns,
                end_ns,
                count,
                off_cpu_ns,
                waited_ns,
                waker,
            } => MarkerRecord::ShortWaits {
                start_ns,
                end_ns,
                count,
                off_cpu_ns,
                waited_ns,
                landing_ns: 0,
                waker: waker.into_model(),
            },
        }
    }
}

impl StoredOffCpuReason {
    fn into_model(self) -> OffCpuReason {
        match self {
            StoredOffCpuReason::Preempted => OffCpuReason::Preempted,
            StoredOffCpuReason::Sleeping => OffCpuReason::Sleeping,
            StoredOffCpuReason::Blocked => OffCpuReason::Blocked,
            StoredOffCpuReason::Other => OffCpuReason::Other,
        }
    }
}

impl StoredWaker {
    fn into_model(self) -> Waker {
        Waker {
            pid: self.pid,
            tid: self.tid,
            name: short_name(&self.name),
            interrupt: self.interrupt.map(|k| match k {
                StoredInterruptKind::Hard => InterruptKind::Hard,
                StoredInterruptKind::Soft => InterruptKind::Soft,
                StoredInterruptKind::Unknown => InterruptKind::Unknown,
            }),
        }
    }
}

impl StoredIoOp {
    fn into_model(self) -> IoOp {
        match self {
            StoredIoOp::Read => IoOp::Read,
            StoredIoOp::Write => IoOp::Write,
            StoredIoOp::Flush => IoOp::Flush,
            StoredIoOp::Discard => IoOp::Discard,
            StoredIoOp::SecureErase => IoOp::SecureErase,
            StoredIoOp::WriteZeroes => IoOp::WriteZeroes,
            StoredIoOp::Other(n) => IoOp::Other(n),
        }
    }
}

impl StoredSliceKind {
    fn into_model(self) -> SliceKind {
        match self {
            StoredSliceKind::User => SliceKind::User,
            StoredSliceKind::Kernel => SliceKind::Kernel,
            StoredSliceKind::Idle => SliceKind::Idle,
        }
    }
}

impl StoredShortWaker {
    fn into_model(self) -> ShortWaker {
        match self {
            StoredShortWaker::Nobody => ShortWaker::Nobody,
            StoredShortWaker::Unseen => ShortWaker::Unseen,
            StoredShortWaker::Task { pid, tid } => ShortWaker::Task { pid, tid },
            StoredShortWaker::Interrupt => ShortWaker::Interrupt,
            StoredShortWaker::Several => ShortWaker::Several,
        }
    }
}

impl StoredCounter {
    fn into_model(self) -> CounterRecord {
        CounterRecord {
            name: self.name,
            category: self.category,
            description: self.description,
            pid: self.pid,
            time_ns: self.time_ns,
            count: self.count,
            // The store keeps the changes only.
            base: None,
        }
    }
}

impl StoredStats {
    fn into_model(self) -> RecordingStats {
        let u = self.unwind;
        RecordingStats {
            samples: self.samples,
            samples_kept: self.samples_kept,
            lost_samples: self.lost_samples,
            kernel_stack_failures: self.kernel_stack_failures,
            user_stack_failures: self.user_stack_failures,
            // Not in the stored format: see RecordingStats::handovers_skipped.
            handovers_skipped: 0,
            python_frames_unnamed: 0,
            js_frames_unnamed: 0,
            python_codes_replaced: 0,
            tracer_bytes: 0,
            samples_ring_peak: 0,
            events_ring_peak: 0,
            tracepoint_runs_missed: 0,
            lost_sideband: self.lost_sideband,
            malformed: self.malformed,
            off_cpu_intervals: self.off_cpu_intervals,
            off_cpu_folded: self.off_cpu_folded,
            off_cpu_end_inferred: self.off_cpu_end_inferred,
            io_requests: self.io_requests,
            lost_events: self.lost_events,
            lost_stacks: self.lost_stacks,
            stack_records: self.stack_records,
            stack_read_failures: self.stack_read_failures,
            stacks_not_kept: self.stacks_not_kept,
            lost_state: self.lost_state,
            io_untracked: self.io_untracked,
            processes_without_data: self.processes_without_data,
            unwind: UnwindStats {
                unwinds: u.unwinds,
                reached_root: u.reached_root,
                copy_exhausted: u.copy_exhausted,
                copy_exhausted_in_profiler: u.copy_exhausted_in_profiler,
                no_unwind_info: u.no_unwind_info,
                bad_return_address: u.bad_return_address,
                unwind_ns: u.unwind_ns,
                // Not in the stored format: see UnwindStats::unwinds_here.
                unwinds_here: 0,
                copied_bytes: 0,
                // Nor this: see UnwindStats::copy_exhausted_at_size.
                copy_exhausted_at_size: 0,
            },
        }
    }
}
