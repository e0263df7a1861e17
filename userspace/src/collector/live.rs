//! What the collector keeps between windows besides the window's data, and
//! letting it go.
//!
//! In: the process table after a window's replay, the time of the window's
//! end. Out: each process's cgroup as of the window's end; in the agent,
//! processes found gone ended, and binaries, unwind data, names and per-pid
//! side tables of processes that are gone forgotten; the symbolizer let go
//! when idle; the sizes of what is kept, for the agent's health line.

use rustc_hash::FxHashSet;

use super::{Collector, WindowRange};
use crate::binaries::BinaryIndex;

/// How long the agent trusts a process's cgroup as read.
const CGROUP_REFRESH_NS: u64 = 60_000_000_000;
/// Every how many windows the agent looks in /proc for processes whose exit it missed.
const GONE_CHECK_WINDOWS: u64 = 6;

impl Collector {
    /// Between the agent's windows: whatever belongs to processes that are
    /// gone goes, so memory follows what runs now, not what ever ran.
    /// Processes whose exit was never seen (sideband lost) are found by
    /// their absence from `/proc` and ended (reported by the next window);
    /// binaries no live process maps are closed, with their unwind data
    /// and names; per-pid side tables follow the process table.
    pub(super) fn forget_the_gone(&mut self, now_ns: u64) {
        // Exits are seen in the sideband; looking for the ones it lost costs
        // a lookup per process, so only every few windows.
        let look = self.windows_finished % GONE_CHECK_WINDOWS == 0;
        let exists = |pid: u32| !look || pid == 0 || std::path::Path::new(&format!("/proc/{pid}")).exists();
        for (&pid, p) in self.table.processes.iter_mut() {
            if p.end_ns.is_none() && !exists(pid) {
                p.end_ns = Some(now_ns);
            }
        }
        let known = |pid: &u32| self.table.processes.contains_key(pid);
        self.cgroups.retain(|pid, _| known(pid));
        self.jit_processes.retain(|pid, _| known(pid));
        self.jitdumps.retain(|pid, _| known(pid));
        let mut live: FxHashSet<BinaryIndex> = FxHashSet::default();
        self.table.live_binaries(&mut live);
        live.extend(self.jitdumps.values().copied());
        if let Some(u) = self.unwinders.as_mut() {
            u.retain_processes(|pid| self.table.processes.contains_key(&pid) || exists(pid));
            u.live_binaries(&mut live);
        }
        let released = self.binaries.release_unused(&live);
        if let Some(u) = self.unwinders.as_mut() {
            u.forget_binaries(&released);
        }
        self.names.forget(&released);
        if self.symbolicator_since.elapsed() > std::time::Duration::from_secs(3600) {
            self.symbolicator = crate::symbolize::Symbolicator::new();
            self.symbolicator_since = std::time::Instant::now();
        }
    }

    /// Let the symbolizer go if the last `windows` windows found every name
    /// in the name cache: its thread ends and what it mapped and parsed of
    /// binaries is freed. The agent asks after each window: while new
    /// addresses keep coming the parsed binaries are worth keeping
    /// (re-reading a compressed debug file each window cost the agent 2%
    /// of a CPU); once the hot addresses are all named, keeping every
    /// parsed binary mapped would only cost tens of MB of resident memory.
    /// Returns whether it was released.
    pub fn release_symbolizer_if_idle(&mut self, windows: u32) -> bool {
        if self.names.idle_windows < windows || !self.symbolicator.is_running() {
            return false;
        }
        self.symbolicator = crate::symbolize::Symbolicator::new();
        self.symbolicator_since = std::time::Instant::now();
        true
    }

    /// Sizes of what the collector keeps between windows, for the agent's
    /// health line: (processes, open binaries, bytes of cached names).
    pub fn retained(&self) -> (usize, usize, usize) {
        (self.table.processes.len(), self.binaries.open_count(), self.names.bytes())
    }

    /// A process's cgroup as of the window's end. Containers move processes
    /// after they start, so the latest word wins: a recording reads it again
    /// at its end; the agent at most every [`CGROUP_REFRESH_NS`] (reading
    /// every process's cgroup every window was a tenth of its CPU time).
    pub(super) fn cgroup_now(&self, pid: u32, range: &WindowRange) -> Option<String> {
        let cached = self.cgroups.get(&pid);
        let fresh = cached.is_some_and(|(_, at)| range.continuous && range.end_ns.saturating_sub(*at) < CGROUP_REFRESH_NS);
        if fresh {
            return cached.and_then(|c| c.0.clone());
        }
        crate::sideband::proc_snapshot::read_cgroup(pid).or_else(|| cached.and_then(|c| c.0.clone()))
    }
}
