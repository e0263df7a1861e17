//! The process entries in `unwind_processes`: each process's executable
//! mappings with their bias and table, shared out per uid.
//!
//! In: a process's mappings as (start, end, bias, binary, walked in
//! userspace only, bias known), from [`crate::unwind::Unwinders`]. Out: its
//! entry written (or deleted), or the process refused one and marked in
//! `unwind_refused` so the kernel hands its samples over.

use super::{KernelTables, SYSTEM_UID};
use crate::binaries::BinaryIndex;
use crate::bpf::abi::{
    PythonProcess, UnwindMapping, UnwindProcess, UNWIND_MAX_MAPPINGS, UNWIND_PROCESS_CUT,
    UNWIND_REFUSED_WORDS, UNWIND_TABLE_USERSPACE,
};

/// A process with an entry: whose it is, and when it was last sampled.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) uid: u32,
    /// [`KernelTables::sample_clock`] at its last sample (or its admission).
    pub(super) last_sampled: u64,
}

/// The real uid of `pid` (its user, whatever it exec'd or made itself
/// non-dumpable), or `u32::MAX` if it is gone.
fn process_uid(pid: u32) -> u32 {
    let status =
        crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX)
}

/// How long after its entry is written a process's hand-overs wake the reader.
const NEW_PROCESS_WAKE_MS: u64 = 100;

impl KernelTables {
    /// Write `pid`'s entry: `mappings` as (start, end, bias, binary, walked
    /// in userspace only, bias known), or delete it when there are none.
    pub(in crate::unwind) fn write_process(
        &mut self,
        pid: u32,
        mappings: &mut Vec<(u64, u64, u64, BinaryIndex, bool, bool)>,
        java_interpreter: Option<(u64, u64)>,
        java_code: Option<crate::bpf::abi::HotSpotCode>,
        v8: Option<crate::bpf::abi::V8Frames>,
    ) {
        if mappings.is_empty() {
            self.remove_process(pid);
            return;
        }
        let mut flags = 0;
        if mappings.len() > UNWIND_MAX_MAPPINGS {
            // The largest stay (the program, libc, the big libraries, where
            // most code runs); the walk hands over to userspace at an
            // address in the rest, which the entry says it lacks.
            self.stats.mappings_cut += 1;
            mappings.sort_unstable_by_key(|m| (std::cmp::Reverse(m.1 - m.0), m.0));
            mappings.truncate(UNWIND_MAX_MAPPINGS);
            flags = UNWIND_PROCESS_CUT;
        }
        mappings.sort_unstable_by_key(|m| m.0);
        if !self.entries.contains_key(&pid) && !self.admit(pid) {
            return;
        }
        // Processes that just started map libraries for a while after their
        // entry is first written: their hand-overs wake us for 100 ms.
        let wake_until_ms =
            (crate::sys::clock::monotonic_ns() / 1_000_000 + NEW_PROCESS_WAKE_MS) as u32;
        let mut entry = UnwindProcess {
            count: mappings.len() as u32,
            wake_until_ms,
            flags,
            _pad: 0,
            java_interp_start: java_interpreter.map_or(0, |r| r.0),
            java_interp_end: java_interpreter.map_or(0, |r| r.1),
            java_code: java_code.unwrap_or_default(),
            v8: v8.unwrap_or_default(),
            m: [UnwindMapping::default(); UNWIND_MAX_MAPPINGS],
        };
        for (slot, &(start, end, bias, binary, userspace, bias_known)) in
            entry.m.iter_mut().zip(mappings.iter())
        {
            let (table_start, table_len) = match (userspace, bias_known) {
                (true, _) => (UNWIND_TABLE_USERSPACE, 0),
                (false, false) => (0, 0),
                (false, true) => self.table_of(binary),
            };
            *slot = UnwindMapping {
                start,
                end,
                bias,
                table_start,
                table_len,
            };
        }
        self.stats.process_writes += 1;
        // The map full all the same (the count is ours, the map the
        // kernel's): the process hands over, as one refused.
        if self.maps.processes.insert(pid, entry, 0).is_err() {
            self.stats.process_write_failures += 1;
            let uid = self.uncharge(pid).unwrap_or(u32::MAX);
            self.refuse(pid, uid);
            return;
        }
        if self.refused.remove(&pid).is_some() {
            self.mark_refused(pid, false);
        }
    }

    /// Give `pid` a place in the process map, charged to its uid, unless its
    /// uid holds its share (a quarter, for a uid other than root's) or the
    /// map is full and no uid holding more than it would can give one up
    /// (its least recently sampled process's). A refused process is marked
    /// so that the kernel hands its samples over.
    fn admit(&mut self, pid: u32) -> bool {
        let uid = self.uid_of(pid);
        let held = self.uid_entries.get(&uid).copied().unwrap_or(0);
        let capacity = self.maps.process_capacity;
        if uid != SYSTEM_UID && held >= (capacity / 4).max(1) {
            self.refuse(pid, uid);
            return false;
        }
        if self.entries.len() >= capacity as usize {
            let victim_uid = self
                .uid_entries
                .iter()
                .filter(|&(&u, &n)| {
                    u != SYSTEM_UID && u != uid && n > 0 && (uid == SYSTEM_UID || n > held + 1)
                })
                .max_by_key(|&(&u, &n)| (n, u))
                .map(|(&u, _)| u);
            let victim = victim_uid.and_then(|v| {
                self.entries
                    .iter()
                    .filter(|(_, e)| e.uid == v)
                    .min_by_key(|&(&p, e)| (e.last_sampled, p))
                    .map(|(&p, _)| p)
            });
            let Some(victim) = victim else {
                self.refuse(pid, uid);
                return false;
            };
            let _ = self.maps.processes.remove(&victim);
            self.remove_python(victim);
            let victim_uid = self.uncharge(victim).unwrap_or(u32::MAX);
            self.stats.process_evictions += 1;
            self.refuse(victim, victim_uid);
        }
        self.entries.insert(
            pid,
            Entry {
                uid,
                last_sampled: self.sample_clock,
            },
        );
        *self.uid_entries.entry(uid).or_default() += 1;
        true
    }

    /// Delete `pid`'s Python entry, if it has one.
    fn remove_python(&mut self, pid: u32) {
        if self.python_entries.remove(&pid) {
            let _ = self.maps.python.remove(&pid);
        }
    }

    /// `pid`'s real uid: as the kernel saw it at its exec, where the
    /// sideband saw it exec and the kernel's record is of that exec or a
    /// later one (a map lookup), else from `/proc/PID/status` (~25 us for a
    /// new process, a compiler loop's 70 a second).
    pub(in crate::unwind) fn uid_of(&self, pid: u32) -> u32 {
        if let Some(&exec_ns) = self.exec_seen.get(&pid) {
            match self.maps.execs.get(&pid, 0) {
                Ok(exec) if exec.ns >= exec_ns => return exec.uid,
                _ => {}
            }
        }
        process_uid(pid)
    }

    /// Forget `pid`'s place (its entry gone); returns its uid.
    fn uncharge(&mut self, pid: u32) -> Option<u32> {
        let e = self.entries.remove(&pid)?;
        if let Some(n) = self.uid_entries.get_mut(&e.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.uid_entries.remove(&e.uid);
            }
        }
        Some(e.uid)
    }

    /// `pid` of `uid` has no entry for want of room: counted (once until
    /// it gets one) and marked for the kernel.
    fn refuse(&mut self, pid: u32, uid: u32) {
        if self.refused.insert(pid, uid).is_none() {
            self.stats.process_refusals += 1;
            self.refusals.entry(uid).or_default().entries += 1;
            self.mark_refused(pid, true);
        }
    }

    /// Set or clear `pid`'s bit in `unwind_refused`.
    fn mark_refused(&mut self, pid: u32, refused: bool) {
        let word = pid / 64;
        if word as usize >= UNWIND_REFUSED_WORDS {
            return;
        }
        let old = self.maps.refused.get(&word, 0).unwrap_or(0);
        let bit = 1u64 << (pid % 64);
        let new = if refused { old | bit } else { old & !bit };
        if new != old {
            let _ = self.maps.refused.set(word, new, 0);
        }
    }

    /// Where `pid`'s interpreter keeps its Python frames, for the kernel's
    /// Python walk; None removes it. Only a process holding an entry gets
    /// one (the same map size, so the same per-user shares), and it goes
    /// with the entry; but for a primed process between its exec and its
    /// new mappings (`remove_at_exec`), whose one entry stays uncharged
    /// until they are written.
    pub(in crate::unwind) fn write_python(&mut self, pid: u32, python: Option<PythonProcess>) {
        match python {
            Some(p) if self.entries.contains_key(&pid) => {
                if self.maps.python.insert(pid, p, 0).is_ok() {
                    self.python_entries.insert(pid);
                } else {
                    self.stats.python_write_failures += 1;
                }
            }
            // Without an entry it has none to remove (see `remove_process`).
            _ => self.remove_python(pid),
        }
    }

    /// Give `pid`, which has not exec'd yet, its Python-map entry for the
    /// program it is about to exec, charged a place as any entry: its
    /// first instructions then read their runtime's chain, where the
    /// sideband's mappings would only be written after the next drain
    /// (~16 ms on a quiet machine, 24-32 beside a compiler loop, for a Go
    /// program: its first waits were in no goroutine). False if refused.
    pub(in crate::unwind) fn prime_python(&mut self, pid: u32, python: PythonProcess) -> bool {
        if !self.entries.contains_key(&pid) && !self.admit(pid) {
            return false;
        }
        if self.maps.python.insert(pid, python, 0).is_err() {
            self.stats.python_write_failures += 1;
            return false;
        }
        self.python_entries.insert(pid);
        self.primed.hold(pid);
        true
    }

    /// Whether `pid`'s entry is to stay as primed at this write: held
    /// before its exec (its mappings are its parent's), or exec'd with no
    /// mapping seen yet (the exec's record comes before its image's
    /// mappings, and a drain may fall between them). Once its mappings
    /// are there, it is an entry like any other.
    pub(in crate::unwind) fn keeps_primed(&mut self, pid: u32, has_mappings: bool) -> bool {
        self.primed.keeps(pid, has_mappings)
    }

    /// A mapping of `pid`'s appeared: if it was held for its exec, the
    /// exec's record was lost (a held process maps nothing), and it is
    /// taken as exec'd.
    pub(in crate::unwind) fn mapped(&mut self, pid: u32) {
        if self.primed.is_held(pid) {
            self.remove_at_exec(pid);
        }
    }

    /// `pid` exec'd: its process entry goes (the kernel dropped it at the
    /// exec), and its Python entry too unless it was primed for this exec,
    /// in which case it stays until the entry written from the new
    /// mappings replaces it (without a gap while the binary is read).
    pub(in crate::unwind) fn remove_at_exec(&mut self, pid: u32) {
        let held = self.primed.exec(pid);
        self.remove_entries(pid, held);
    }

    /// Delete `pid`'s entry (it exited, or has no mappings left).
    pub(in crate::unwind) fn remove_process(&mut self, pid: u32) {
        self.primed.forget(pid);
        self.remove_entries(pid, false);
    }

    /// Delete `pid`'s process entry and its charge, and its Python entry
    /// unless `keep_python` (written over, or removed, at the next write).
    fn remove_entries(&mut self, pid: u32, keep_python: bool) {
        self.forget(super::rows::jit_table_index(pid));
        // Only a process charged an entry has one in either map (both are
        // written after the charge, and an entry that fails to be written
        // is uncharged): most processes never get one (pyenv's shims start
        // ~40 for each `python3`), and deleting what is not there was two
        // failing system calls at each of their execs and exits.
        if self.uncharge(pid).is_some() {
            let _ = self.maps.processes.remove(&pid);
        }
        if !keep_python {
            self.remove_python(pid);
        }
        if self.refused.remove(&pid).is_some() {
            self.mark_refused(pid, false);
        }
    }
}
