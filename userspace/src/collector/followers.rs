//! The one owner of what follows each running process as its records
//! arrive: the unwinders' copy of its address space (and its kernel entry)
//! and what the runtimes read of its memory, with one clock of exits.
//!
//! In: a process's fork, exec, exit and mappings as the sideband tells them
//! ([`super::Collector`]'s `process_event`, one call each here), and between
//! the agent's windows which pids still exist. Out: the unwinders and the
//! runtimes' readers, kept in step: an exec forgets what was read of the old
//! image at once; an exit stops the kernel's entry and the runtimes' asking
//! at once and forgets the unwinder's entry and the code objects once the
//! process's last samples are in (at the first exit [`KEEP_EXITED_NS`] or
//! more after it, unless the pid was reused meanwhile). Thread names and a
//! JVM's requests are kept to the window's end by their readers.
//!
//! The replay's own view of a process (names, mappings and threads in time
//! order, its cgroup and JIT identity) is the process table's
//! ([`super::process`]): it follows the window's records, not their arrival.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::binaries::BinaryIndex;
use crate::runtimes::{RuntimeReaders, Runtimes};
use crate::unwind::Unwinders;

/// How long an exited process's unwinders and code objects stay: its last
/// samples may still be queued (seconds of them in the agent, which drains
/// lazily; forgotten at the exit itself, a third of one run's stacks lost
/// their Python frames, read again from a process that was gone).
const KEEP_EXITED_NS: u64 = 2_000_000_000;

/// What follows each running process; see the module doc.
pub(super) struct Followers {
    /// Per process, its mappings' unwinders and its kernel entry (None when
    /// user stacks are not unwound here).
    pub unwinders: Option<Unwinders<Runtimes>>,
    /// What the runtimes read from processes to name their frames.
    pub readers: RuntimeReaders,
    /// Exits in order, (time, pid), to forget once their samples are in.
    exits: VecDeque<(u64, u32)>,
    /// Each exited pid's exit time, while it waits: a pid forked or exec'd
    /// again meanwhile is another process, not forgotten with the old.
    exited_at: FxHashMap<u32, u64>,
}

impl Followers {
    /// Nothing followed yet; `dwarf`: user stacks are unwound here, from
    /// copies of `stack_size` bytes at most (0: not said).
    pub fn new(dwarf: bool, stack_size: usize) -> Followers {
        Followers {
            unwinders: dwarf.then(|| {
                let mut u = Unwinders::new();
                u.set_copy_size(stack_size);
                u
            }),
            readers: RuntimeReaders::default(),
            exits: VecDeque::new(),
            exited_at: FxHashMap::default(),
        }
    }

    /// `child` was forked from `parent`: it starts with its parent's
    /// mappings and no code objects (any kept under its pid are a former
    /// process's; what is kept to the window's end, thread names and JVM
    /// requests, follows the window instead).
    pub fn forked(&mut self, parent: u32, child: u32, time_ns: u64) {
        self.exited_at.remove(&child);
        if let Some(u) = self.unwinders.as_mut() {
            u.fork(parent, child, time_ns);
        }
        self.readers.forget(child);
    }

    /// `pid` exec'd at `time_ns`: its old image's mappings and objects are
    /// gone. Returns its new image's mappings seen before the exec's record
    /// (`Unwinders::exec`), which the caller tells again (`mapped`): what
    /// the runtime readers learnt of them went with the old image's.
    pub fn exec(&mut self, pid: u32, time_ns: u64) -> Vec<(u64, (u64, u64, u64), BinaryIndex)> {
        self.exited_at.remove(&pid);
        let kept = match self.unwinders.as_mut() {
            Some(u) => u.exec(pid, time_ns),
            None => Vec::new(),
        };
        self.readers.ended(pid);
        self.readers.forget(pid);
        kept
    }

    /// `pid` exited at `time_ns`: nothing more is asked of it; what is kept
    /// of it goes [`KEEP_EXITED_NS`] later, with any older exits due by now
    /// (oldest first, from the queue: a fork storm's exits must not each
    /// scan every process).
    pub fn exited(&mut self, pid: u32, time_ns: u64) {
        if let Some(u) = self.unwinders.as_mut() {
            u.exit(pid, time_ns);
        }
        self.readers.ended(pid);
        self.exited_at.insert(pid, time_ns);
        self.exits.push_back((time_ns, pid));
        while let Some(&(t, old)) = self.exits.front() {
            if time_ns.saturating_sub(t) < KEEP_EXITED_NS {
                break;
            }
            self.exits.pop_front();
            if self.exited_at.get(&old) == Some(&t) {
                self.exited_at.remove(&old);
                self.forget(old);
            }
        }
    }

    /// `pid` mapped `binary` at `mapped_ns` (0: before the recording):
    /// `mapping` is its (start, length, file offset); `jitdump`: the file
    /// is a JIT's jitdump.
    pub fn mapped(
        &mut self,
        pid: u32,
        mapped_ns: u64,
        mapping: (u64, u64, u64),
        binary: BinaryIndex,
        jitdump: bool,
    ) {
        if let Some(u) = self.unwinders.as_mut() {
            u.add_mapping(pid, mapped_ns, mapping, binary);
            if jitdump {
                u.add_jitdump(pid, binary);
            }
        }
    }

    /// Between the agent's windows: processes gone without their exit seen
    /// (`keep` says no) are forgotten, everything followed of them.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut gone = Vec::new();
        if let Some(u) = self.unwinders.as_mut() {
            u.retain_processes(|pid| {
                let kept = keep(pid);
                if !kept {
                    gone.push(pid);
                }
                kept
            });
        }
        for pid in gone {
            self.exited_at.remove(&pid);
            self.readers.forget(pid);
        }
        self.readers.python_threads.forget(|pid| !keep(pid));
    }

    /// Everything followed of `pid` goes.
    fn forget(&mut self, pid: u32) {
        if let Some(u) = self.unwinders.as_mut() {
            u.forget(pid);
        }
        self.readers.forget(pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::frames::CodeInfo;

    fn code() -> Option<CodeInfo> {
        Some(CodeInfo {
            kind: crate::model::recording::FrameKind::Python,
            qualname: "f".into(),
            filename: "f.py".into(),
            first_line: 1,
            line_table: Box::new([]),
        })
    }

    #[test]
    fn an_exit_forgets_once_its_samples_are_in_and_not_a_reused_pid() {
        let mut f = Followers::new(true, 0);
        f.forked(1, 10, 0);
        f.forked(1, 11, 0);
        let unwinds = |f: &Followers, pid| f.unwinders.as_ref().unwrap().runtime(pid).is_some();
        f.readers.python.get_or_read(10, 0x1000, 1, code);
        f.readers.python.get_or_read(11, 0x1000, 1, code);
        f.exited(10, 1_000_000_000);
        f.exited(11, 1_500_000_000);
        // Still naming and unwinding their queued samples.
        assert!(f.readers.python.get(10, 0x1000, 1).is_some());
        assert!(unwinds(&f, 10) && unwinds(&f, 11));
        // Pid 11 is reused by a new process, which reads its own object.
        f.forked(1, 11, 0);
        assert!(
            f.readers.python.get(11, 0x1000, 1).is_none(),
            "a new process starts empty"
        );
        f.readers.python.get_or_read(11, 0x1000, 1, code);
        // 2 s after the first exit: 10 goes; the new 11 stays past its
        // old exit's time too.
        f.exited(12, 3_000_000_000);
        assert!(f.readers.python.get(10, 0x1000, 1).is_none());
        assert!(!unwinds(&f, 10));
        f.exited(13, 3_600_000_000);
        assert!(f.readers.python.get(11, 0x1000, 1).is_some());
        assert!(unwinds(&f, 11));
    }

    #[test]
    fn an_exec_forgets_the_old_image_at_once() {
        let mut f = Followers::new(false, 0);
        f.readers.python.get_or_read(10, 0x1000, 1, code);
        f.exec(10, 0);
        assert!(f.readers.python.get(10, 0x1000, 1).is_none());
    }
}
