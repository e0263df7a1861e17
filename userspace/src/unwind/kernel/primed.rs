//! Where each primed process is: a command `record` spawns held at its exec
//! and given its runtime's entry before it (ARCHITECTURE decision 88).
//!
//! In: what the sideband and the spawn say of such a process (held at its
//! gate, exec'd, a mapping seen, an entry written, gone). Out: whether its
//! entry is to stay as primed at a write, and whether its runtime's entry
//! outlives an exec. No kernel map here: [`super::KernelTables`] acts on the
//! answers, so the sequences can be checked without BPF.

use rustc_hash::FxHashMap;

/// Where a primed process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Primed {
    /// Held between its fork and its exec: its mappings are its parent's.
    Held,
    /// Its exec seen, its new mappings not yet.
    Execed,
}

/// The primed processes, by pid.
#[derive(Debug, Default)]
pub(in crate::unwind) struct PrimedProcesses(FxHashMap<u32, Primed>);

impl PrimedProcesses {
    /// `pid` was given its runtime's entry before its exec, and waits at
    /// its gate.
    pub(super) fn hold(&mut self, pid: u32) {
        self.0.insert(pid, Primed::Held);
    }

    /// Whether `pid` waits at its gate (held, not exec'd yet).
    pub(super) fn is_held(&self, pid: u32) -> bool {
        self.0.get(&pid) == Some(&Primed::Held)
    }

    /// Whether `pid`'s entry is to stay as primed at this write: held
    /// before its exec (its mappings are its parent's), or exec'd with no
    /// mapping seen yet (the exec's record comes before its image's
    /// mappings, and a drain may fall between them). Once its mappings
    /// are there it is an entry like any other, and forgotten here.
    pub(super) fn keeps(&mut self, pid: u32, has_mappings: bool) -> bool {
        match self.0.get(&pid) {
            Some(Primed::Held) => true,
            Some(Primed::Execed) if !has_mappings => true,
            Some(Primed::Execed) => {
                self.0.remove(&pid);
                false
            }
            None => false,
        }
    }

    /// `pid` exec'd: true if it was held for this exec (its runtime's entry
    /// stays until the one from its new mappings replaces it); any other
    /// exec (a second one, or of a process never primed) forgets it.
    pub(super) fn exec(&mut self, pid: u32) -> bool {
        if self.is_held(pid) {
            self.0.insert(pid, Primed::Execed);
            true
        } else {
            self.0.remove(&pid);
            false
        }
    }

    /// `pid` is gone, or its entry removed for good.
    pub(super) fn forget(&mut self, pid: u32) {
        self.0.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the path of a command held at its gate: its entry stays
    /// through writes from its parent's mappings, through its exec and a
    /// write before its image's mappings, and is an entry like any other
    /// from the first write that has them.
    #[test]
    fn a_held_command_keeps_its_entry_until_its_image_is_mapped() {
        let mut p = PrimedProcesses::default();
        p.hold(7);
        assert!(p.is_held(7));
        assert!(p.keeps(7, true), "held: its mappings are its parent's");
        assert!(p.keeps(7, false));
        assert!(
            p.exec(7),
            "the exec it was held for keeps the runtime entry"
        );
        assert!(!p.is_held(7));
        assert!(p.keeps(7, false), "exec'd, its image not mapped yet");
        assert!(!p.keeps(7, true), "its new mappings are there");
        assert!(!p.keeps(7, false), "forgotten once written whole");
        assert!(!p.exec(7), "a second exec is any process's");
    }

    /// Check that a process never primed is never kept, and that its exec
    /// takes its runtime's entry away.
    #[test]
    fn a_process_not_primed_is_not_kept() {
        let mut p = PrimedProcesses::default();
        assert!(!p.is_held(3));
        assert!(!p.keeps(3, false));
        assert!(!p.keeps(3, true));
        assert!(!p.exec(3));
        p.hold(4);
        assert!(!p.keeps(3, false), "one pid's state is not another's");
    }

    /// Check that a second exec after the held one (before the new image
    /// was written) forgets the process: the runtime primed was the first
    /// image's.
    #[test]
    fn a_second_exec_forgets_the_primed_runtime() {
        let mut p = PrimedProcesses::default();
        p.hold(9);
        assert!(p.exec(9));
        assert!(!p.exec(9));
        assert!(!p.keeps(9, false));
    }

    /// Check that a process gone while held or exec'd is forgotten, and a
    /// pid reused after is not taken for it.
    #[test]
    fn a_process_gone_is_forgotten() {
        let mut p = PrimedProcesses::default();
        p.hold(5);
        p.forget(5);
        assert!(!p.is_held(5));
        assert!(!p.keeps(5, false));
        p.hold(6);
        assert!(p.exec(6));
        p.forget(6);
        assert!(!p.keeps(6, false));
        assert!(!p.exec(6));
    }
}
