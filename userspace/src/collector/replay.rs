//! Replaying one window: samples, intervals and requests merged with the
//! sideband in time order, each stack resolved with the mappings its
//! process had at that moment.
//!
//! In: a window's [`WindowData`] (samples as columns, raw stacks as a prefix
//! tree of absolute addresses under a pid root, scheduler and I/O records
//! with their raw stacks) and the persistent [`ProcessTable`]. Out: per
//! thread, its samples, off-CPU samples and markers as columns of stack
//! nodes over [`FrameKey`]s (library + library-relative address), ready to
//! be symbolicated. A raw stack is resolved once per process mapping epoch.

use rustc_hash::FxHashMap;

use super::process::ProcessTable;
use crate::model::recording::{MarkerRecord, OffCpuSamples, ThreadSamples};
use crate::model::stack_tree::{NodeIndex, StackTree, NO_PARENT};
use super::{
    WindowData, KERNEL_ADDR_MIN, TRUNCATED_BAD_RETURN_ADDRESS, TRUNCATED_COPY_EXHAUSTED, TRUNCATED_MAX_DEPTH, TRUNCATED_NO_UNWIND_INFO,
    TRUNCATED_STACK_UNREADABLE, TRUNCATED_TABLES_NOT_READY, TRUNCATED_UNSUPPORTED_RULE,
};

/// A frame before symbolication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FrameKey {
    /// A binary, or one of [`KERNEL_BINARY`], [`PSEUDO_BINARY`], [`JIT_BINARY`].
    pub binary: u32,
    /// File offset in the binary; the absolute address for kernel and JIT
    /// code; a [`PseudoFrame`] for pseudo frames.
    pub address: u64,
    /// For JIT frames only (absolute addresses mean something per process).
    pub pid: u32,
}

/// `FrameKey::binary` for code in anonymous memory or in no known mapping:
/// named from the process's perf map or jitdump, `address` absolute, `pid` set.
pub(super) const JIT_BINARY: u32 = u32::MAX - 3;
/// `FrameKey::binary` for kernel addresses.
pub(super) const KERNEL_BINARY: u32 = u32::MAX - 1;
/// `FrameKey::binary` for pseudo frames; the address is a [`PseudoFrame`].
pub(super) const PSEUDO_BINARY: u32 = u32::MAX - 2;

/// Frames that are not code: why a thread was off-CPU, where a stack ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum PseudoFrame {
    Preempted = 0,
    Sleeping = 1,
    Blocked = 2,
    Other = 3,
    ShortWaits = 4,
    StackCopyExhausted = 5,
    NoUnwindInfo = 6,
    BadReturnAddress = 7,
    StackNotKept = 8,
    TablesNotReady = 9,
    StackUnreadable = 10,
    UnsupportedRule = 11,
    MaxDepth = 12,
}

impl PseudoFrame {
    pub fn from_address(a: u64) -> PseudoFrame {
        match a {
            0 => PseudoFrame::Preempted,
            1 => PseudoFrame::Sleeping,
            2 => PseudoFrame::Blocked,
            3 => PseudoFrame::Other,
            5 => PseudoFrame::StackCopyExhausted,
            6 => PseudoFrame::NoUnwindInfo,
            7 => PseudoFrame::BadReturnAddress,
            8 => PseudoFrame::StackNotKept,
            9 => PseudoFrame::TablesNotReady,
            10 => PseudoFrame::StackUnreadable,
            11 => PseudoFrame::UnsupportedRule,
            12 => PseudoFrame::MaxDepth,
            _ => PseudoFrame::ShortWaits,
        }
    }

    /// The off-CPU leaf of a reason.
    pub fn of_reason(reason: crate::model::recording::OffCpuReason) -> PseudoFrame {
        use crate::model::recording::OffCpuReason;
        match reason {
            OffCpuReason::Preempted => PseudoFrame::Preempted,
            OffCpuReason::Sleeping => PseudoFrame::Sleeping,
            OffCpuReason::Blocked => PseudoFrame::Blocked,
            OffCpuReason::Other => PseudoFrame::Other,
        }
    }

    pub fn name(self) -> &'static str {
        use crate::model::recording::OffCpuReason;
        match self {
            PseudoFrame::Preempted => OffCpuReason::Preempted.frame_name(),
            PseudoFrame::Sleeping => OffCpuReason::Sleeping.frame_name(),
            PseudoFrame::Blocked => OffCpuReason::Blocked.frame_name(),
            PseudoFrame::Other => OffCpuReason::Other.frame_name(),
            PseudoFrame::ShortWaits => "[short off-CPU waits: no stack]",
            PseudoFrame::StackCopyExhausted => "[truncated: user stack copy exhausted (--stack-size)]",
            PseudoFrame::NoUnwindInfo => "[truncated: no unwind information]",
            PseudoFrame::BadReturnAddress => "[truncated: return address outside any code]",
            PseudoFrame::StackNotKept => "[stack not available]",
            PseudoFrame::TablesNotReady => "[truncated: unwind tables not loaded yet (the process had just started)]",
            PseudoFrame::StackUnreadable => "[truncated: user stack not readable (not resident)]",
            PseudoFrame::UnsupportedRule => "[truncated: an unwind rule the kernel unwinder cannot follow]",
            PseudoFrame::MaxDepth => "[truncated: 1024 frames]",
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
    pub frame_keys: Vec<FrameKey>,
    frame_index: FxHashMap<FrameKey, u32>,
    pub stacks: StackTree,
    /// raw stack node -> (process epoch, resolved node)
    resolved: FxHashMap<NodeIndex, (u32, NodeIndex)>,
    path: Vec<u64>,
    pub threads: FxHashMap<(u32, u32), ThreadData>,
}

impl<'a> Replay<'a> {
    pub fn new(table: &'a mut ProcessTable) -> Replay<'a> {
        Replay {
            table,
            frame_keys: Vec::new(),
            frame_index: FxHashMap::default(),
            stacks: StackTree::new(),
            resolved: FxHashMap::default(),
            path: Vec::with_capacity(256),
            threads: FxHashMap::default(),
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
        let frame = self.frame(FrameKey { binary: PSEUDO_BINARY, address: p as u64, pid: 0 });
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
            let frame = self.frame(FrameKey { binary: crate::model::recording::NO_LIB, address: 0, pid: 0 });
            self.stacks.child(NO_PARENT, frame as u64)
        } else {
            node
        };
        let tid = w.samples.tid[i];
        let runtime = w.samples.runtime_ns[i];
        let t = self.table.process(pid).thread(tid);
        let delta = match t.last_runtime {
            Some(last) => runtime.saturating_sub(last),
            None => 0,
        };
        t.last_runtime = Some(runtime.max(t.last_runtime.unwrap_or(0)));
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
        let Some(state) = self.table.processes.get(&pid) else { return NO_PARENT };
        let mut node = NO_PARENT;
        let leaf = frames.len().saturating_sub(1);
        for (depth, &addr) in frames.iter().enumerate() {
            // Return addresses point after the call; look up the call itself.
            let lookup = if depth == leaf { addr } else { addr.saturating_sub(1) };
            let key = match addr {
                TRUNCATED_COPY_EXHAUSTED..=TRUNCATED_MAX_DEPTH => {
                    let pseudo = match addr {
                        TRUNCATED_COPY_EXHAUSTED => PseudoFrame::StackCopyExhausted,
                        TRUNCATED_NO_UNWIND_INFO => PseudoFrame::NoUnwindInfo,
                        TRUNCATED_BAD_RETURN_ADDRESS => PseudoFrame::BadReturnAddress,
                        TRUNCATED_TABLES_NOT_READY => PseudoFrame::TablesNotReady,
                        TRUNCATED_STACK_UNREADABLE => PseudoFrame::StackUnreadable,
                        TRUNCATED_UNSUPPORTED_RULE => PseudoFrame::UnsupportedRule,
                        TRUNCATED_MAX_DEPTH => PseudoFrame::MaxDepth,
                        _ => PseudoFrame::StackNotKept,
                    };
                    FrameKey { binary: PSEUDO_BINARY, address: pseudo as u64, pid: 0 }
                }
                a if a >= KERNEL_ADDR_MIN => FrameKey { binary: KERNEL_BINARY, address: lookup, pid: 0 },
                _ => match state.lookup(lookup) {
                    Some(m) if !m.anon => FrameKey { binary: m.binary, address: lookup - m.start + m.pgoff, pid: 0 },
                    // Anonymous memory, or in no mapping we saw: JIT code
                    // (perf maps and jitdumps name absolute addresses).
                    _ => FrameKey { binary: JIT_BINARY, address: lookup, pid },
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
