//! The stacks the scheduler/I-O tracer sent, kept per thread until the
//! events that refer to them arrive.
//!
//! In: stack records (a thread's kernel stack read in a tracepoint, and its
//! user stack as return addresses or unwound from a copy), and later
//! references to them by (tid, id) from off-CPU intervals, wakeups and
//! block requests. Out: the referenced stack, kernel part without the
//! tracing path, user part unwound, ready to intern.
//!
//! The kernel side caches one switch-out stack and one wakeup-or-request
//! stack per thread and refers only to those or to ones it just sent, so a
//! few per thread are every stack that can still be referred to: memory is
//! bounded by the live threads, whatever the recording's length.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Stacks kept per thread: the kernel side's two cached ones and the two
/// sent before them (a wakee can refer to its waker's stack after the
/// waker sent a newer one).
const PER_THREAD: usize = 4;

/// One stack record, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredStack {
    pub id: u64,
    /// User return addresses, leaf first; a truncation marker may end it.
    pub user: Box<[u64]>,
    /// Kernel return addresses, leaf first, tracing path cut.
    pub kernel: Box<[u64]>,
}

/// Recent stacks of every thread.
#[derive(Debug, Default)]
pub(super) struct ThreadStacks {
    by_tid: FxHashMap<u32, VecDeque<StoredStack>>,
    /// Threads that ended, with when: forgotten once a window closed after that.
    ended: Vec<(u32, u64)>,
}

impl ThreadStacks {
    /// Keep a stack record of `tid`.
    pub fn insert(&mut self, tid: u32, stack: StoredStack) {
        let q = self.by_tid.entry(tid).or_default();
        if q.len() == PER_THREAD {
            q.pop_front();
        }
        q.push_back(stack);
    }

    /// The stack `id` of `tid`, if it is still kept.
    pub fn get(&self, tid: u32, id: u64) -> Option<&StoredStack> {
        if id == 0 {
            return None;
        }
        self.by_tid.get(&tid)?.iter().rev().find(|s| s.id == id)
    }

    /// `tid` ended at `time_ns`: its stacks go after the window that holds
    /// its end (requests it started may still complete until then).
    pub fn thread_ended(&mut self, tid: u32, time_ns: u64) {
        self.ended.push((tid, time_ns));
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

    fn stack(id: u64) -> StoredStack {
        StoredStack { id, user: vec![id].into(), kernel: Box::new([]) }
    }

    /// Check that the last few stacks of a thread are found by id, older
    /// ones and id 0 are not, and an ended thread's stacks go at the first
    /// prune after its end.
    #[test]
    fn keeps_recent_stacks_per_thread() {
        let mut s = ThreadStacks::default();
        for id in 1..=6 {
            s.insert(7, stack(id));
        }
        assert!(s.get(7, 2).is_none(), "only the last {PER_THREAD} are kept");
        assert_eq!(s.get(7, 3).unwrap().id, 3);
        assert_eq!(s.get(7, 6).unwrap().id, 6);
        assert!(s.get(7, 0).is_none());
        assert!(s.get(8, 6).is_none());
        s.thread_ended(7, 100);
        s.prune(100);
        assert!(s.get(7, 6).is_some(), "not before its end's window closed");
        s.prune(101);
        assert!(s.get(7, 6).is_none());
        assert!(s.by_tid.is_empty());
    }
}
