//! The stacks the scheduler/I-O tracer sent, kept per thread until the
//! events that refer to them arrive.
//!
//! In: stack records (a thread's kernel stack read in a tracepoint, and its
//! user stack as return addresses or unwound from a copy), and later
//! references to them by (tid, id) from off-CPU intervals, wakeups and
//! block requests. Out: the referenced stack, kernel part without the
//! tracing path, user part unwound, ready to intern.
//!
//! The kernel side caches one stack per thread and slot (where it was last
//! preempted, where it last waited, where it last woke another thread or
//! started a request) and mostly refers to those, or to ones it just
//! replaced; so the last few stacks of each slot of each thread are kept.
//! Not always: a thread can have many block requests in flight, each
//! started from another place, and their completions refer to stacks its
//! later ones replaced (beside pgbench, 5 in a recording, all in its first
//! second, while the tables of the running processes load and stacks are
//! sent as per-thread copies). So the stacks pushed out of a slot are kept
//! a while longer, the last `RETIRED_MAX` of them over all threads: memory
//! is bounded by the live threads and that constant, whatever the
//! recording's length.
//!
//! Most stacks are *shared* (`STACK_SHARED`): sent once per process and
//! content, referred to by any of its threads for the rest of the session
//! by an id that is the content's hash. Those are kept by id until their
//! process has ended; the kernel keeps at most `STACK_SHARED_MAX` of them,
//! which bounds this side too.
//!
//! A preempted thread's stack is its own the first time the kernel sees it
//! (ARCHITECTURE 95): hundreds a second on a busy server, each referred to
//! only by the interval its thread's next switch-in closes, which comes
//! before the thread's next preemption. So that slot keeps its last two,
//! and what they push out is dropped, not retired: it would push out of
//! the retired stacks the ones still referred to (requests in flight, runs
//! of short waits).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::bpf::abi::{
    Regs, STACK_ID_SHARED, STACK_SLOTS, STACK_SLOT_INTERRUPT, STACK_SLOT_PREEMPTED,
};

/// Stacks kept per thread and slot: the cached one and those it replaced
/// (a wakee can refer to its waker's stack, a request to its submitter's,
/// after newer ones were sent; measured at 300k switches/s and 8k requests
/// per second, two kept lost one reference in 50).
const PER_SLOT: usize = 4;
/// Stacks kept per CPU for interrupts: completions come in bursts.
const PER_CPU_INTERRUPT: usize = 16;
/// Stacks pushed out of a thread's slot or a CPU's interrupt stacks, kept
/// still (the most recent, over all threads and CPUs): ~2 MB at most. Only
/// per-thread stacks are pushed out, and the tracer sends those only while
/// a process's tables load (or past its shared table's size): beside
/// pgbench, ~2,100 in the first 1.5 s, none after; preempted stacks,
/// which it sends per thread the first time, are never retired.
const RETIRED_MAX: usize = 4096;
/// Stacks kept of a thread's preempted slot (see the module's doc).
const PER_PREEMPTED_SLOT: usize = 2;

/// One stack record, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredStack {
    pub id: u64,
    /// User return addresses, leaf first; a truncation marker may end it.
    pub user: Box<[u64]>,
    /// Kernel return addresses, leaf first, tracing path cut.
    pub kernel: Box<[u64]>,
    /// The user registers where the thread entered the kernel.
    pub user_regs: Regs,
    /// When the kernel stack ran in an interrupt: which kind, and how many
    /// of its frames are the interrupt's (worked out once, when it arrives).
    pub interrupt: Option<(crate::model::recording::InterruptKind, usize)>,
    /// The runtimes' frames its `user` refers to: a runtime's key there is
    /// an index into this, re-keyed into each window's frames as interned.
    pub runtime_frames: Box<[crate::runtimes::frames::KindedFrame]>,
    /// Its raw stack as last interned: (window number, pid, node). Events
    /// refer to the same stack record many times; it is interned once per
    /// window and process.
    pub interned: std::cell::Cell<Option<(u64, u32, u32)>>,
}

/// The CPU a stack record was sent from: the low 12 bits of its id.
fn cpu_of(id: u64) -> u32 {
    (id & 0xfff) as u32
}

/// Recent stacks of every thread.
#[derive(Debug, Default)]
pub(super) struct ThreadStacks {
    by_tid: FxHashMap<u32, [VecDeque<StoredStack>; STACK_SLOTS]>,
    /// Stacks read in interrupts, per CPU (the kernel side caches one per CPU).
    interrupts: FxHashMap<u32, VecDeque<StoredStack>>,
    /// Threads that ended, with when: forgotten once a window closed after that.
    ended: Vec<(u32, u64)>,
    /// Shared stacks by id (see the module's doc).
    shared: FxHashMap<u64, StoredStack>,
    /// The ids of each process's shared stacks.
    shared_of: FxHashMap<u32, Vec<u64>>,
    /// Stacks pushed out of their queue, by id (ids are unique: a CPU's
    /// sequence number and the CPU), oldest first in `retired_order`.
    retired: FxHashMap<u64, StoredStack>,
    retired_order: VecDeque<u64>,
}

impl ThreadStacks {
    /// Keep a stack record of `tid` in `slot`.
    pub fn insert(&mut self, pid: u32, tid: u32, slot: u32, stack: StoredStack) {
        if stack.id & STACK_ID_SHARED != 0 {
            // Two CPUs may send one new stack at once: kept once.
            let id = stack.id;
            if let std::collections::hash_map::Entry::Vacant(v) = self.shared.entry(id) {
                v.insert(stack);
                self.shared_of.entry(pid).or_default().push(id);
            }
            return;
        }
        let (q, keep) = if slot == STACK_SLOT_INTERRUPT {
            (
                self.interrupts.entry(cpu_of(stack.id)).or_default(),
                PER_CPU_INTERRUPT,
            )
        } else if slot == STACK_SLOT_PREEMPTED {
            let slots = self.by_tid.entry(tid).or_default();
            (&mut slots[slot as usize], PER_PREEMPTED_SLOT)
        } else {
            let slots = self.by_tid.entry(tid).or_default();
            (&mut slots[(slot as usize).min(STACK_SLOTS - 1)], PER_SLOT)
        };
        let pushed_out = if q.len() >= keep { q.pop_front() } else { None };
        q.push_back(stack);
        match pushed_out {
            Some(_) if slot == STACK_SLOT_PREEMPTED => {}
            Some(old) => self.retire(old),
            None => {}
        }
    }

    /// Keep `stack`, pushed out of its queue, among the last `RETIRED_MAX`.
    fn retire(&mut self, stack: StoredStack) {
        if self.retired_order.len() == RETIRED_MAX {
            if let Some(oldest) = self.retired_order.pop_front() {
                self.retired.remove(&oldest);
            }
        }
        self.retired_order.push_back(stack.id);
        self.retired.insert(stack.id, stack);
    }

    /// The stack `id` of `tid`, if it is still kept.
    /// A whole user stack `tid` had when it entered the kernel with these
    /// registers: while it stays in the kernel its user stack cannot change,
    /// so a stack recorded at a switch-out in the same system call is the one
    /// a sample taken later in it has (when that sample cannot read it: the
    /// process exiting and its memory being freed).
    pub fn user_stack_at(&self, tid: u32, regs: Regs) -> Option<&[u64]> {
        let slots = self.by_tid.get(&tid)?;
        slots
            .iter()
            .flat_map(|q| q.iter().rev())
            // Not one with Python frames: their keys are the record's own.
            .find(|s| {
                s.user_regs == regs
                    && !s.user.is_empty()
                    && s.user.last().is_some_and(|&a| a > 0x1000)
                    && s.runtime_frames.is_empty()
            })
            .map(|s| &*s.user)
    }

    pub fn get(&self, tid: u32, id: u64) -> Option<&StoredStack> {
        if id == 0 {
            return None;
        }
        if id & STACK_ID_SHARED != 0 {
            return self.shared.get(&id);
        }
        let of_thread = self.by_tid.get(&tid).and_then(|slots| {
            slots
                .iter()
                .flat_map(|q| q.iter().rev())
                .find(|s| s.id == id)
        });
        of_thread
            .or_else(|| {
                self.interrupts
                    .get(&cpu_of(id))?
                    .iter()
                    .rev()
                    .find(|s| s.id == id)
            })
            .or_else(|| self.retired.get(&id))
    }

    /// (threads, stacks, ended, shared stacks, their frames) held, for
    /// debugging memory.
    pub fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.by_tid.len(),
            self.by_tid
                .values()
                .flat_map(|s| s.iter())
                .map(|q| q.len())
                .sum::<usize>()
                + self.retired.len(),
            self.ended.len(),
            self.shared.len(),
            self.shared
                .values()
                .map(|s| s.user.len() + s.kernel.len())
                .sum(),
        )
    }

    /// `tid` ended at `time_ns`: its stacks go after the window that holds
    /// its end (requests it started may still complete until then).
    pub fn thread_ended(&mut self, tid: u32, time_ns: u64) {
        self.ended.push((tid, time_ns));
    }

    /// Forget the shared stacks of processes that are gone; their ids are
    /// added to `forgotten` (for the kernel's table to forget them too).
    pub fn forget_processes(&mut self, pids: impl Iterator<Item = u32>, forgotten: &mut Vec<u64>) {
        for pid in pids {
            for id in self.shared_of.remove(&pid).unwrap_or_default() {
                self.shared.remove(&id);
                forgotten.push(id);
            }
        }
    }

    /// Forget the stacks of threads that ended before `before_ns`.
    pub fn prune(&mut self, before_ns: u64) {
        let by_tid = &mut self.by_tid;
        self.ended.retain(|&(tid, t)| {
            if t < before_ns {
                by_tid.remove(&tid);
                false
            } else {
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a shared stack sent by one thread is found by any id
    /// lookup (any thread of its process refers to it), outlives every
    /// per-slot eviction, and goes, its id handed back, when its process
    /// is gone.
    #[test]
    fn shared_stacks_are_kept_per_process_until_it_is_gone() {
        let mut s = ThreadStacks::default();
        let shared = STACK_ID_SHARED | 0x1234;
        s.insert(7, 8, STACK_SLOT_WAITED_FOR_TEST, stack(shared));
        s.insert(7, 8, STACK_SLOT_WAITED_FOR_TEST, stack(shared));
        for id in 1..=20 {
            s.insert(7, 8, STACK_SLOT_WAITED_FOR_TEST, stack(id << 12));
        }
        assert_eq!(
            s.get(9, shared).map(|x| x.id),
            Some(shared),
            "another thread of the process finds it"
        );
        let mut forgotten = Vec::new();
        s.forget_processes([5].into_iter(), &mut forgotten);
        assert!(
            forgotten.is_empty() && s.get(8, shared).is_some(),
            "another process's end forgets nothing of it"
        );
        s.forget_processes([7].into_iter(), &mut forgotten);
        assert_eq!(
            forgotten,
            vec![shared],
            "its process gone: forgotten once, its id handed back"
        );
        assert!(s.get(8, shared).is_none());
    }

    fn stack(id: u64) -> StoredStack {
        StoredStack {
            id,
            user: vec![id].into(),
            kernel: Box::new([]),
            user_regs: Regs::default(),
            interrupt: None,
            runtime_frames: Box::new([]),
            interned: Default::default(),
        }
    }

    /// Check that the last stacks of each slot of a thread are found by
    /// id, however many another slot received since; id 0 is not; and an
    /// ended thread's stacks go at the first prune after its end.
    #[test]
    fn keeps_recent_stacks_per_thread_and_slot() {
        let mut s = ThreadStacks::default();
        s.insert(7, 7, 1, stack(100));
        for id in 1..=(PER_SLOT as u64 + 2) {
            s.insert(7, 7, 2, stack(id));
        }
        assert_eq!(
            s.get(7, 100).unwrap().id,
            100,
            "another slot's stack outlives this slot's churn"
        );
        assert_eq!(
            s.get(7, 2).map(|x| x.id),
            Some(2),
            "one pushed out of its slot is still kept, among the retired"
        );
        assert_eq!(s.get(7, 3).unwrap().id, 3);
        assert_eq!(
            s.get(7, PER_SLOT as u64 + 2).unwrap().id,
            PER_SLOT as u64 + 2
        );
        assert!(s.get(7, 0).is_none());
        // A stack read in an interrupt on CPU 1 is found by id whatever the tid.
        s.insert(0, 0, STACK_SLOT_INTERRUPT, stack((9 << 12) | 1));
        assert!(s.get(7, (9 << 12) | 1).is_some());
        assert!(s.get(8, 6).is_none());
        s.thread_ended(7, 100);
        s.prune(100);
        assert!(s.get(7, 3).is_some(), "not before its end's window closed");
        s.prune(101);
        assert!(s.get(7, 3).is_none());
        assert!(s.by_tid.is_empty());
    }

    /// Check that stacks pushed out of a slot (a thread with many block
    /// requests in flight, each from its own place) are still found, up to
    /// the last `RETIRED_MAX` of them, and no more are held.
    #[test]
    fn stacks_pushed_out_of_a_slot_are_kept_within_a_budget() {
        let mut s = ThreadStacks::default();
        let sent = (RETIRED_MAX + PER_SLOT + 10) as u64;
        for seq in 1..=sent {
            s.insert(7, 8, STACK_SLOT_WAITED_FOR_TEST, stack(seq << 12));
        }
        for seq in 1..=10u64 {
            assert!(s.get(8, seq << 12).is_none(), "the oldest go: {seq}");
        }
        for seq in 11..=sent {
            assert_eq!(s.get(8, seq << 12).map(|x| x.id), Some(seq << 12));
        }
        assert_eq!(s.retired.len(), RETIRED_MAX);
        assert_eq!(s.retired_order.len(), RETIRED_MAX);
    }

    /// A thread's preempted stacks: its last two are found, what they push
    /// out is gone (not among the retired, whose room stays for the other
    /// slots' stacks), and the other slots keep theirs.
    #[test]
    fn preempted_stacks_keep_the_last_two_and_retire_none() {
        let mut s = ThreadStacks::default();
        s.insert(7, 7, STACK_SLOT_WAITED_FOR_TEST, stack(100 << 12));
        for seq in 1..=50u64 {
            s.insert(7, 7, STACK_SLOT_PREEMPTED, stack(seq << 12));
        }
        assert!(s.get(7, 50 << 12).is_some() && s.get(7, 49 << 12).is_some());
        assert!(s.get(7, 48 << 12).is_none(), "pushed out: dropped");
        assert!(s.retired.is_empty(), "none retired");
        assert!(s.get(7, 100 << 12).is_some(), "another slot's kept");
    }

    /// Check that a sample's unreadable user stack is matched only with a
    /// whole stack its own thread had with the same registers: not another
    /// thread's, not one with other registers, not one cut short.
    #[test]
    fn user_stack_at_matches_thread_and_registers() {
        let mut s = ThreadStacks::default();
        let regs = Regs {
            ip: 0x7f00_0000_1234,
            sp: 0x7ffc_0000_0100,
            bp: 0,
        };
        let whole = StoredStack {
            user: vec![0x7f00_0000_1234, 0x5555_0000_0042].into(),
            user_regs: regs,
            ..stack(1)
        };
        let cut = StoredStack {
            user: vec![0x7f00_0000_1234, 2].into(),
            user_regs: Regs {
                ip: 1,
                sp: 2,
                bp: 3,
            },
            ..stack(2)
        };
        s.insert(7, 7, STACK_SLOT_WAITED_FOR_TEST, whole);
        s.insert(7, 7, 0, cut.clone());
        assert_eq!(
            s.user_stack_at(7, regs),
            Some(&[0x7f00_0000_1234u64, 0x5555_0000_0042][..])
        );
        assert_eq!(s.user_stack_at(8, regs), None, "another thread");
        assert_eq!(
            s.user_stack_at(
                7,
                Regs {
                    ip: 9,
                    sp: 9,
                    bp: 9
                }
            ),
            None,
            "other registers"
        );
        assert_eq!(
            s.user_stack_at(
                7,
                Regs {
                    ip: 1,
                    sp: 2,
                    bp: 3
                }
            ),
            None,
            "a stack that ends in a truncation marker"
        );
    }

    const STACK_SLOT_WAITED_FOR_TEST: u32 = crate::bpf::abi::STACK_SLOT_WAITED;
}
