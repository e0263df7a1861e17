//! Replaying one window: samples, intervals and requests merged with the
//! sideband in time order, each stack resolved with the mappings its
//! process had at that moment.
//!
//! In: a window's [`WindowData`] (samples as columns, raw stacks as a prefix
//! tree of absolute addresses under a pid root, scheduler and I/O records
//! with their raw stacks), the persistent [`ProcessTable`] and the kernel's
//! symbols (which of its frames are an interrupt's entry). Out: per
//! thread, its samples, off-CPU samples and markers as columns of stack
//! nodes over [`FrameKey`]s (library + library-relative address), ready to
//! be symbolicated. A raw stack is resolved once per process mapping epoch.

use rustc_hash::FxHashMap;

use super::process::ProcessTable;
use super::WindowData;
use crate::binaries::BinaryIndex;
use crate::model::recording::OffCpuReason;
use crate::model::recording::{MarkerRecord, OffCpuSamples, ThreadSamples};
use crate::model::stack_end::StackEnd;
use crate::model::stack_tree::{NodeIndex, StackTree, NO_PARENT};
use crate::runtimes::frames::RawFrame;
use crate::symbolize::kernel::{FrameClass, KernelSymbols};

/// A frame before symbolication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum FrameKey {
    /// Code in a mapped binary, at this file offset.
    Binary { binary: BinaryIndex, offset: u64 },
    /// Kernel code, at this absolute address.
    Kernel(u64),
    /// Code in anonymous memory or in no known mapping, at this absolute
    /// address of process `pid`: named from its perf map or jitdump.
    Jit { pid: u32, address: u64 },
    /// A runtime's function at a line (Python, Java, JavaScript, with
    /// those inlined into it): an index into the window's
    /// [`crate::runtimes::frames::RuntimeFrames`].
    Runtime(u32),
    /// Not code: why a thread was off-CPU, where a stack ends.
    Pseudo(PseudoFrame),
    /// The one frame of a sample with no usable frame at all.
    Empty,
}

impl FrameKey {
    /// The address symbolication looks up: the file offset in its binary,
    /// the absolute address for kernel and JIT code, 0 for what is no code.
    pub fn address(self) -> u64 {
        match self {
            FrameKey::Binary { offset, .. } => offset,
            FrameKey::Kernel(a) | FrameKey::Jit { address: a, .. } => a,
            FrameKey::Pseudo(_) | FrameKey::Runtime(_) | FrameKey::Empty => 0,
        }
    }
}

/// Frames that are not code: why a thread was off-CPU, where a stack ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum PseudoFrame {
    /// The off-CPU leaf of a reason.
    OffCpu(OffCpuReason),
    /// A woken wait's run delay, under its reason's leaf.
    RunDelay,
    /// The root of short off-CPU waits, summed without their stacks.
    ShortWaits,
    /// Where a user stack was cut ([`StackEnd::Root`] is no frame).
    End(StackEnd),
    /// The root of a stack of a CPython this build does not read.
    PythonNotRead,
    /// A Python frame whose code object could not be named.
    PythonUnnamed,
}

impl PseudoFrame {
    /// What kind of frame it is.
    pub fn kind(self) -> crate::model::recording::FrameKind {
        use crate::model::recording::FrameKind;
        match self {
            PseudoFrame::OffCpu(_) | PseudoFrame::RunDelay | PseudoFrame::ShortWaits => {
                FrameKind::OffCpu
            }
            PseudoFrame::End(_) | PseudoFrame::PythonNotRead | PseudoFrame::PythonUnnamed => {
                FrameKind::Missing
            }
        }
    }

    /// The frame's name in the profile.
    pub fn name(self) -> &'static str {
        match self {
            PseudoFrame::OffCpu(r) => r.frame_name(),
            PseudoFrame::RunDelay => crate::model::recording::RUN_DELAY_FRAME_NAME,
            PseudoFrame::ShortWaits => "[short off-CPU waits: no stack]",
            PseudoFrame::End(e) => e.frame_name(),
            PseudoFrame::PythonNotRead => {
                "[no Python frames: a CPython version sysprof does not read (3.8-3.14 are)]"
            }
            PseudoFrame::PythonUnnamed => {
                "[Python, PHP, Perl or Ruby frame: its code object, function, sub or iseq was gone before it was read]"
            }
        }
    }
}

/// A window's data of one thread.
#[derive(Debug, Default)]
pub(super) struct ThreadData {
    pub samples: ThreadSamples,
    pub off_cpu: OffCpuSamples,
    pub markers: Vec<MarkerRecord>,
}

/// The replay of one window.
pub(super) struct Replay<'a> {
    pub table: &'a mut ProcessTable,
    /// What tells an interrupt's entry among kernel frames.
    kernel: &'a KernelSymbols,
    pub frame_keys: Vec<FrameKey>,
    frame_index: FxHashMap<FrameKey, u32>,
    pub stacks: StackTree,
    /// raw stack node -> (process epoch, resolved node)
    resolved: FxHashMap<NodeIndex, (u32, NodeIndex)>,
    path: Vec<u64>,
    pub threads: FxHashMap<(u32, u32), ThreadData>,
    /// Per (pid, tid, waker): the short waits being summed (see `sched`).
    pub(super) short_runs:
        FxHashMap<(u32, u32, crate::model::recording::ShortWaker), super::sched::ShortRun>,
}

impl<'a> Replay<'a> {
    pub fn new(table: &'a mut ProcessTable, kernel: &'a KernelSymbols) -> Replay<'a> {
        Replay {
            table,
            kernel,
            frame_keys: Vec::new(),
            frame_index: FxHashMap::default(),
            stacks: StackTree::new(),
            resolved: FxHashMap::default(),
            path: Vec::with_capacity(256),
            threads: FxHashMap::default(),
            short_runs: FxHashMap::default(),
        }
    }

    /// The window's data of a thread (which the process table then knows).
    pub fn thread(&mut self, pid: u32, tid: u32) -> &mut ThreadData {
        self.table.process(pid).thread(tid);
        self.threads.entry((pid, tid)).or_default()
    }

    pub fn frame(&mut self, key: FrameKey) -> u32 {
        let next = self.frame_keys.len() as u32;
        *self.frame_index.entry(key).or_insert_with(|| {
            self.frame_keys.push(key);
            next
        })
    }

    /// A pseudo frame under `parent`.
    pub fn pseudo(&mut self, parent: NodeIndex, p: PseudoFrame) -> NodeIndex {
        let frame = self.frame(FrameKey::Pseudo(p));
        self.stacks.child(parent, frame as u64)
    }

    /// One sample of the window.
    pub fn sample(&mut self, w: &WindowData, i: usize) {
        let pid = w.samples.pid[i];
        if !self.table.tracks(pid) {
            return;
        }
        let node = self.resolve_raw(w, pid, w.samples.raw_stack[i]);
        let node = if node == NO_PARENT {
            // A sample with no usable frame at all still counts, as an empty stack.
            let frame = self.frame(FrameKey::Empty);
            self.stacks.child(NO_PARENT, frame as u64)
        } else {
            node
        };
        let tid = w.samples.tid[i];
        let (time, cpu) = (w.samples.time_ns[i], w.samples.cpu[i]);
        let t = self.table.process(pid).thread(tid);
        let delta = t.cpu_time.advance(
            w.samples.runtime_ns[i],
            w.samples.runtime_clock_ns[i],
            time,
            cpu,
        );
        let data = self.thread(pid, tid);
        data.samples.time_ns.push(w.samples.time_ns[i]);
        data.samples.stack.push(node);
        data.samples.cpu_delta_ns.push(delta);
        data.samples.cpu.push(w.samples.cpu[i]);
    }

    /// A raw stack (pid root, absolute addresses root first) as a node of
    /// frames, NO_PARENT for an empty one; memoized per mapping epoch.
    pub fn resolve_raw(&mut self, w: &WindowData, pid: u32, raw: NodeIndex) -> NodeIndex {
        if raw == NO_PARENT {
            return NO_PARENT;
        }
        let epoch = self.table.process(pid).epoch;
        if let Some(&(e, node)) = self.resolved.get(&raw) {
            if e == epoch {
                return node;
            }
        }
        let mut path = std::mem::take(&mut self.path);
        w.raw.path(raw, &mut path);
        let node = self.resolve_addrs(pid, &path[1..]); // path[0] is the pid root
        self.path = path;
        self.resolved.insert(raw, (epoch, node));
        node
    }

    /// Map absolute addresses, root first, to a node of frame indices
    /// (NO_PARENT for an empty stack), with `pid`'s mappings of the moment.
    fn resolve_addrs(&mut self, pid: u32, frames: &[u64]) -> NodeIndex {
        let Some(state) = self.table.processes.get(&pid) else {
            return NO_PARENT;
        };
        let mut node = NO_PARENT;
        let leaf = frames.len().saturating_sub(1);
        for (depth, &addr) in frames.iter().enumerate() {
            let raw = RawFrame::decode(addr);
            // Return addresses point after the call; look up the call
            // itself. Not so the leaf, nor the user frame right above the
            // kernel's: that is the instruction the thread entered the
            // kernel at (a page fault's, an interrupt's, a new program's
            // entry after execve, a signal handler's first instruction), or
            // the one after a system call, in the same function; one byte
            // back named the function before it in memory whenever that
            // instruction was a function's first (a fault on entering a
            // function's page, a preemption there; a Go program's exec
            // was an unnamed `golabels+0x6157f`, the padding before its
            // entry point `_rt0_amd64_linux`).
            let entered_kernel_at = matches!(raw, RawFrame::User(_))
                && frames
                    .get(depth + 1)
                    .is_some_and(|&next| matches!(RawFrame::decode(next), RawFrame::Kernel(_)));
            // The same inside the kernel: the frame right below an
            // interrupt's entry (`asm_common_interrupt`, `asm_sysvec_*`) is
            // the instruction the interrupt stopped, a timer's at a
            // function's first byte as likely as any other.
            let is_entry = |a: u64| self.kernel.class(a) == FrameClass::HardIrqEntry;
            let interrupted_at = matches!(raw, RawFrame::Kernel(a) if !is_entry(a))
                && frames.get(depth + 1).is_some_and(
                    |&next| matches!(RawFrame::decode(next), RawFrame::Kernel(k) if is_entry(k)),
                );
            let lookup = if depth == leaf || entered_kernel_at || interrupted_at {
                addr
            } else {
                addr.saturating_sub(1)
            };
            let key = match raw {
                RawFrame::End(end) => FrameKey::Pseudo(PseudoFrame::End(end)),
                RawFrame::PythonNotRead => FrameKey::Pseudo(PseudoFrame::PythonNotRead),
                RawFrame::Unnamed => FrameKey::Pseudo(PseudoFrame::PythonUnnamed),
                RawFrame::Runtime(i) => FrameKey::Runtime(i),
                RawFrame::Kernel(_) => FrameKey::Kernel(lookup),
                RawFrame::User(_) => match state.lookup(lookup) {
                    Some(m) if !m.anon => FrameKey::Binary {
                        binary: m.binary,
                        offset: lookup - m.start + m.pgoff,
                    },
                    // Anonymous memory, or in no mapping we saw: JIT code
                    // (perf maps and jitdumps name absolute addresses).
                    _ => FrameKey::Jit {
                        pid,
                        address: lookup,
                    },
                },
            };
            let next = self.frame_keys.len() as u32;
            let frame = *self.frame_index.entry(key).or_insert_with(|| {
                self.frame_keys.push(key);
                next
            });
            node = self.stacks.child(node, frame as u64);
        }
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that every pseudo frame keeps the name it had before the
    /// stack-end vocabulary was one (the old table, written out).
    #[test]
    fn pseudo_frames_keep_their_names() {
        let old: [(PseudoFrame, &str); 14] = [
            (
                PseudoFrame::OffCpu(OffCpuReason::Preempted),
                "[off-CPU: preempted, waiting for a CPU]",
            ),
            (
                PseudoFrame::OffCpu(OffCpuReason::Sleeping),
                "[off-CPU: sleeping]",
            ),
            (
                PseudoFrame::OffCpu(OffCpuReason::Blocked),
                "[off-CPU: blocked, uninterruptible (I/O)]",
            ),
            (
                PseudoFrame::OffCpu(OffCpuReason::Other),
                "[off-CPU: other state]",
            ),
            (PseudoFrame::ShortWaits, "[short off-CPU waits: no stack]"),
            (PseudoFrame::RunDelay, "[off-CPU: woken, waiting for a CPU]"),
            (
                PseudoFrame::End(StackEnd::CopyExhausted),
                "[truncated: user stack copy exhausted (--stack-size)]",
            ),
            (
                PseudoFrame::End(StackEnd::NoUnwindInfo),
                "[truncated: no unwind information]",
            ),
            (
                PseudoFrame::End(StackEnd::BadReturnAddress),
                "[truncated: return address outside any code]",
            ),
            (
                PseudoFrame::End(StackEnd::NotAvailable),
                "[stack not available]",
            ),
            (
                PseudoFrame::End(StackEnd::TablesNotReady),
                "[truncated: unwind tables not loaded yet (the process or the recording had just started)]",
            ),
            (
                PseudoFrame::End(StackEnd::Unreadable),
                "[truncated: user stack not readable (not resident)]",
            ),
            (
                PseudoFrame::End(StackEnd::UnsupportedRule),
                "[truncated: an unwind rule the kernel unwinder cannot follow]",
            ),
            (
                PseudoFrame::End(StackEnd::MaxDepth),
                "[truncated: 1024 frames]",
            ),
        ];
        for (p, name) in old {
            assert_eq!(p.name(), name);
        }
        // The raw keys the collector used for cuts: 1..=3, 4 (not available), 5..=8.
        let raw: [(u64, StackEnd); 8] = [
            (1, StackEnd::CopyExhausted),
            (2, StackEnd::NoUnwindInfo),
            (3, StackEnd::BadReturnAddress),
            (4, StackEnd::NotAvailable),
            (5, StackEnd::TablesNotReady),
            (6, StackEnd::Unreadable),
            (7, StackEnd::UnsupportedRule),
            (8, StackEnd::MaxDepth),
        ];
        for (key, end) in raw {
            assert_eq!(end.raw_key(), Some(key));
        }
    }
}
