//! What the collector keeps between windows besides the window's data, and
//! letting it go.
//!
//! In: sideband events as they arrive (and the `/proc` snapshot's
//! mappings); the process table after a window's replay, the time of the
//! window's end. Out: what is kept of each process as its records arrive
//! (its cgroup, JIT identity and jitdump in the table; its mappings, fork,
//! exec and exit told to their followers: `super::followers`), each process's cgroup as of the
//! window's end; in the agent,
//! processes found gone ended, and binaries, unwind data, names and per-pid
//! side tables of processes that are gone forgotten; the symbolizer let go
//! when idle; the sizes of what is kept, for the agent's health line.

use rustc_hash::FxHashSet;

use super::process::{is_anonymous, is_new_process};
use super::{Collector, WindowRange};
use crate::binaries::BinaryIndex;
use crate::sideband::SidebandEvent;

/// How long the agent trusts a process's cgroup as read.
const CGROUP_REFRESH_NS: u64 = 60_000_000_000;
/// Every how many windows the agent looks in /proc for processes whose exit it missed.
const GONE_CHECK_WINDOWS: u64 = 6;

impl Collector {
    /// A sideband event as it arrives: the one place it changes what is kept
    /// of a process beside the window's replay, that is the process's
    /// [`LiveProcess`](super::process::LiveProcess) in the table and its
    /// [`Followers`](super::followers::Followers) (the unwinders' copy of its
    /// address space, what the runtimes read of it). Both must follow now: a new
    /// process's cgroup is read while it runs, and samples are unwound as
    /// they arrive. The table's names, mappings and threads follow in the
    /// window's replay instead ([`super::process::ProcessTable::apply`]), in
    /// time order with the samples, which arrive from other rings.
    pub(super) fn process_event(&mut self, e: &SidebandEvent, binary: Option<BinaryIndex>) {
        match e {
            SidebandEvent::Mmap(m) => {
                if let Some(binary) = binary {
                    self.mapped(m.pid, m.time, (m.start, m.len, m.pgoff), &m.path, binary);
                }
            }
            SidebandEvent::Fork {
                time,
                pid,
                ppid,
                tid,
            } if is_new_process(*pid, *ppid, *tid) => {
                // Note its cgroup while it runs (it may be gone by the end).
                // A child starts in its parent's cgroup: take the parent's
                // when known (a fork storm would otherwise cost a /proc read each).
                let inherited = self.table.live_of(*ppid).and_then(|l| l.cgroup.clone());
                let entry = inherited.unwrap_or_else(|| {
                    (
                        crate::sideband::proc_snapshot::read_cgroup(*pid),
                        crate::sys::clock::monotonic_ns(),
                    )
                });
                self.table.live(*pid).cgroup = Some(entry);
                self.followers.forked(*ppid, *pid, *time);
            }
            SidebandEvent::Comm {
                time,
                pid,
                exec: true,
                ..
            } => {
                // Mappings of the new image read before the exec's record
                // (another CPU's ring, an earlier read) are told again:
                // the exec took what was noted of them with the old image's.
                for (t, mapping, binary) in self.followers.exec(*pid, *time) {
                    let path = self.binaries.get(binary).path.clone();
                    self.mapped(*pid, t, mapping, &path, binary);
                }
            }
            SidebandEvent::Exit { time, pid, tid } if tid == pid => {
                self.followers.exited(*pid, *time);
            }
            _ => {}
        }
    }

    /// `pid` mapped `binary` at `mapped_ns` (0: at start, from `/proc`;
    /// else as the mapping arrives), `mapping` its (start, length, file
    /// offset): noted if it is JIT code or a jitdump, and told to the
    /// unwinders.
    pub(super) fn mapped(
        &mut self,
        pid: u32,
        mapped_ns: u64,
        mapping: (u64, u64, u64),
        path: &str,
        binary: BinaryIndex,
    ) {
        if is_anonymous(path) {
            self.table
                .live(pid)
                .jit_identity
                .get_or_insert_with(|| crate::binaries::perfmap::process_identity(pid));
        }
        if self.options.jvm_attach {
            self.followers.readers.jvms.mapped(pid, path);
        }
        let jitdump = crate::unwind::is_jitdump(path);
        if jitdump {
            self.table.live(pid).jitdump = Some(binary);
        }
        self.followers
            .mapped(pid, mapped_ns, mapping, binary, jitdump);
    }

    /// Between the agent's windows: whatever belongs to processes that are
    /// gone goes, so memory follows what runs now, not what ever ran.
    /// Processes whose exit was never seen (sideband lost) are found by
    /// their absence from `/proc` and ended (reported by the next window);
    /// binaries no live process maps are closed, with their unwind data
    /// and names; the unwinders' processes follow the process table.
    pub(super) fn forget_the_gone(&mut self, now_ns: u64) {
        // Exits are seen in the sideband; looking for the ones it lost costs
        // a lookup per process, so only every few windows.
        let look = self.windows_finished % GONE_CHECK_WINDOWS == 0;
        let exists =
            |pid: u32| !look || pid == 0 || std::path::Path::new(&format!("/proc/{pid}")).exists();
        for (&pid, p) in self.table.processes.iter_mut() {
            if p.end_ns.is_none() && !exists(pid) {
                p.end_ns = Some(now_ns);
            }
        }
        // What the table keeps of a pid went with its entry; the followers
        // keep their own and follow it here.
        let mut live: FxHashSet<BinaryIndex> = FxHashSet::default();
        self.table.live_binaries(&mut live);
        let table = &self.table;
        self.followers
            .retain(|pid| table.processes.contains_key(&pid) || exists(pid));
        if let Some(u) = self.followers.unwinders.as_ref() {
            u.live_binaries(&mut live);
        }
        let released = self.binaries.release_unused(&live);
        if let Some(u) = self.followers.unwinders.as_mut() {
            u.forget_binaries(&released);
        }
        self.names.forget(&released);
        if self.symbolicator_since.elapsed() > SYMBOLIZER_MAX_AGE {
            self.symbolicator = crate::symbolize::Symbolicator::new();
            self.symbolicator_since = std::time::Instant::now();
        }
    }

    /// Let the symbolizer go if the last `windows` windows found every name
    /// in the name cache, or if the files it holds pass
    /// [`SYMBOLIZER_HELD_BYTES`] or [`SYMBOLIZER_HELD_FILES`]: its thread ends and what it mapped and
    /// parsed of binaries is freed. The agent asks after each window: while
    /// new addresses keep coming the parsed binaries are worth keeping
    /// (re-reading a compressed debug file each window cost the agent 2%
    /// of a CPU); once the hot addresses are all named, keeping every
    /// parsed binary mapped would only cost tens of MB of resident memory.
    /// The byte budget bounds a busy machine's: beside builds, an agent up
    /// 40 minutes had 175 MB of binaries mapped (libLLVM, librustc_driver,
    /// seven libpythons) and was never idle for three windows.
    /// Returns whether it was released.
    pub fn release_symbolizer_if_idle(&mut self, windows: u32) -> bool {
        let over = self.symbolicator.held_bytes() > SYMBOLIZER_HELD_BYTES
            || self.symbolicator.held_files() > SYMBOLIZER_HELD_FILES;
        if (self.names.idle_windows < windows && !over) || !self.symbolicator.is_running() {
            return false;
        }
        self.symbolicator = crate::symbolize::Symbolicator::new();
        self.symbolicator_since = std::time::Instant::now();
        true
    }

    /// Under memory pressure: drop what is kept between windows only to
    /// save work (names, Python code objects, Java methods, the symbolizer
    /// and its open files), all read again as needed. The bytes of it
    /// (an estimate; the symbolizer's not counted).
    pub fn shed_caches(&mut self) -> usize {
        let held = self.names.bytes() + self.followers.readers.shed();
        self.names.clear();
        self.symbolicator = crate::symbolize::Symbolicator::new();
        self.symbolicator_since = std::time::Instant::now();
        held
    }

    /// Sizes of what the collector keeps between windows, for the agent's
    /// health line: (processes, open binaries, bytes of cached names, Python code objects included).
    pub fn retained(&self) -> (usize, usize, usize) {
        (
            self.table.processes.len(),
            self.binaries.open_count(),
            self.names.bytes() + self.followers.readers.held_bytes(),
        )
    }

    /// A process's cgroup as of the window's end. Containers move processes
    /// after they start, so the latest word wins: a recording reads it again
    /// at its end; the agent at most every [`CGROUP_REFRESH_NS`] (reading
    /// every process's cgroup every window was a tenth of its CPU time).
    pub(super) fn cgroup_now(&self, pid: u32, range: &WindowRange) -> Option<String> {
        let cached = self.table.live_of(pid).and_then(|l| l.cgroup.as_ref());
        let fresh = cached.is_some_and(|(_, at)| {
            range.continuous && range.end_ns.saturating_sub(*at) < CGROUP_REFRESH_NS
        });
        if fresh {
            return cached.and_then(|c| c.0.clone());
        }
        crate::sideband::proc_snapshot::read_cgroup(pid)
            .or_else(|| cached.and_then(|c| c.0.clone()))
    }
}

/// Bytes of binaries the symbolizer may hold (file sizes) before the agent
/// lets it go after a window. Above a build's working set, or it would
/// re-read it every window: rustc's libLLVM and librustc_driver are 280 MB
/// together; libc with its debug file is a few MB.
pub const SYMBOLIZER_HELD_BYTES: u64 = 384 << 20;

/// Most files the symbolizer holds before the agent lets it go after a
/// window. Beside a user starting 150 new binaries a second (16 KB each) it
/// held thousands, deleted ones too, far below [`SYMBOLIZER_HELD_BYTES`]:
/// the agent's VmRSS reached 259 MiB of their pages (charged to that user's
/// cgroup, pinned by the agent). A machine's usual binaries are a few hundred.
pub const SYMBOLIZER_HELD_FILES: usize = 1024;

/// Longest the symbolizer keeps what it parsed: a busy machine's agent is
/// never idle for long, and binaries it needed once stay mapped otherwise.
const SYMBOLIZER_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::super::{CollectorOptions, PidFilter};
    use super::*;
    use crate::sideband::proc_snapshot::{ProcSnapshot, SnapshotProcess};

    /// Beyond pid_max (at most 2^22): no /proc entry, so nothing here is read from /proc.
    const PARENT: u32 = 5_000_001;
    const CHILD: u32 = 5_000_002;

    fn window(start_ns: u64, end_ns: u64) -> WindowRange {
        WindowRange {
            start_ns,
            end_ns,
            start_wall_ms: 0.0,
            interval_ms: 1.0,
            continuous: true,
        }
    }

    /// Check that a new process's cgroup is the one its parent had as the
    /// fork arrived (the child has no /proc entry to read one from), and
    /// that the agent forgets it with the process once its exit was
    /// reported, while the parent's stays.
    #[test]
    fn a_child_inherits_its_parents_cgroup_and_it_goes_with_it() {
        // Short-lived processes are reported without a sample (as the agent does).
        let mut c = Collector::new(
            PidFilter::All,
            CollectorOptions {
                keep_short_lived: true,
                ..Default::default()
            },
        );
        let parent = SnapshotProcess {
            pid: PARENT,
            ppid: 1,
            comm: "parent".into(),
            exe: None,
            cmdline: String::new(),
            start_ns: 1,
            threads: vec![(PARENT, "parent".into(), 0)],
            mappings: Vec::new(),
            cgroup: Some("/system.slice/app.service".into()),
        };
        c.handle_snapshot(ProcSnapshot {
            processes: vec![parent],
            taken_ns: 0,
        });
        c.handle_sideband(SidebandEvent::Fork {
            time: 110,
            pid: CHILD,
            ppid: PARENT,
            tid: CHILD,
        });
        c.handle_sideband(SidebandEvent::Exit {
            time: 130,
            pid: CHILD,
            tid: CHILD,
        });
        let rec = c.finish_window(window(100, 200));
        let child = rec
            .processes
            .iter()
            .find(|p| p.pid == CHILD)
            .expect("the short-lived child is reported");
        assert_eq!(child.cgroup.as_deref(), Some("/system.slice/app.service"));
        assert!(
            c.table.live_of(CHILD).is_none(),
            "exited and reported: nothing of it kept"
        );
        assert!(
            c.table.live_of(PARENT).is_some_and(|l| l.cgroup.is_some()),
            "the parent's stays"
        );
    }
}
