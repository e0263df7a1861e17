//! Processes and threads as the collector knows them, across windows.
//!
//! In: the `/proc` snapshot at start and sideband events (mmap, exec,
//! rename, fork, exit) in time order. Out: for any moment of the replay,
//! each process's name, executable, mappings and threads, and whether the
//! pid filter keeps it. This state outlives a window: a window's replay
//! starts from where the previous one left it, and exited processes are
//! forgotten once a window has reported them ([`ProcessTable::prune`]),
//! with what the collector noted of them as their records arrived
//! ([`LiveProcess`]: cgroup, JIT identity, jitdump), so one removal forgets
//! everything the collector keeps of a pid.

use rustc_hash::FxHashMap;

use super::PidFilter;
use crate::binaries::BinaryIndex;
use crate::sideband::proc_snapshot::ProcSnapshot;
use crate::sideband::SidebandEvent;

/// A mapping in a process's address space.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub binary: BinaryIndex,
    /// Anonymous memory (JIT code): frames are named from the perf map.
    pub anon: bool,
}

/// Paths the kernel gives anonymous executable memory.
pub(super) fn is_anonymous(path: &str) -> bool {
    path.is_empty() || path.starts_with("//anon") || path.starts_with("[anon")
}

/// A thread's CPU time as its samples tell it, for each sample's delta.
///
/// Each sample carries the scheduler's `sum_exec_runtime`, stale by up to a
/// tick, and [`super::runtime_clock`], exact but shifted by an offset between
/// two clocks. Between two samples on one CPU the exact difference is used;
/// across CPUs (whose scheduler clocks need not agree), and from a base
/// that is not a sample, the stale value is: the thread's CPU time is then
/// at least that. So deltas add up to the exact time at the last sample, less
/// at most one tick, and never fall behind what the kernel itself counted.
/// Nor do they run ahead of it by more than the time since its count was
/// last seen to change: in a VM the scheduler's clock leaves out the time
/// the host ran something else (steal), the samples' clock does not, and
/// that difference must not pile up.
///
/// And no delta is more than the time since the thread's previous sample
/// (the first: since its base was known): a thread cannot run longer than
/// time passed. The kernel's count can say more when it was stale at the
/// previous sample (a move to another CPU, whose delta is that count's, just
/// after the host stole the vCPU for tens of ms): one sample in CI claimed
/// 29 ms of CPU 19 ms after the one before. What does not fit is kept owed,
/// not dropped: later samples with room take it through the kernel's count.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CpuTime {
    /// What the deltas so far add up to, from the base; None: no base known.
    accounted: Option<u64>,
    /// When the base was known (the thread had no more CPU time then than
    /// `accounted`): the first sample's delta is at most the time since.
    known_at: u64,
    /// (`runtime_clock`, time, CPU) at the latest sample.
    last: Option<(u64, u64, u32)>,
    /// (runtime, a time before the kernel's update to it): its CPU time now
    /// is at most that runtime plus the time since.
    updated_after: Option<(u64, u64)>,
}

impl CpuTime {
    /// From `cpu_ns`, known at `at_ns`: at its start (0) or when the
    /// recording began.
    pub(super) fn since(cpu_ns: u64, at_ns: u64) -> Self {
        CpuTime {
            accounted: Some(cpu_ns),
            known_at: at_ns,
            last: None,
            updated_after: None,
        }
    }

    /// The delta of a sample with (`runtime`, `clock`) at `time` on `cpu`.
    /// The first sample of a thread with no base gives 0.
    pub(super) fn advance(&mut self, runtime: u64, clock: u64, time: u64, cpu: u32) -> u64 {
        let previous_time = self.last.map(|(_, t, _)| t);
        if self.updated_after.is_none_or(|(r, _)| r != runtime) {
            self.updated_after = previous_time.map(|t| (runtime, t));
        }
        let Some(accounted) = self.accounted else {
            *self = CpuTime {
                accounted: Some(runtime),
                last: Some((clock, time, cpu)),
                ..*self
            };
            return 0;
        };
        let exact = match self.last {
            // Never more than the wall time between the two samples.
            Some((last_clock, last_time, last_cpu)) if last_cpu == cpu && time >= last_time => {
                let d = clock.wrapping_sub(last_clock) as i64;
                (d >= 0).then(|| (d as u64).min(time - last_time))
            }
            _ => None,
        };
        let mut delta = exact.unwrap_or(0);
        if let Some((_, after)) = self.updated_after {
            let at_most = runtime + time.saturating_sub(after);
            delta = delta.min(at_most.saturating_sub(accounted));
        }
        let since = time.saturating_sub(self.last.map_or(self.known_at, |(_, t, _)| t));
        let delta = delta.max(runtime.saturating_sub(accounted)).min(since);
        self.accounted = Some(accounted + delta);
        if exact.is_some() || self.last.is_none_or(|(_, last_time, _)| time >= last_time) {
            self.last = Some((clock, time, cpu));
        }
        delta
    }
}

/// What is known of a thread across windows.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadState {
    pub name: String,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    /// Its CPU time so far, the base of its samples' deltas.
    pub cpu_time: CpuTime,
    /// That base was read from `/proc` before the recording began (it ran
    /// already), so it is read again once sampling starts.
    pub cpu_base_early: bool,
    /// (voluntary, involuntary) context switches, when known.
    pub switches: Option<(u64, u64)>,
}

/// What is known of a process across windows.
#[derive(Debug, Clone)]
pub(super) struct ProcessState {
    /// The main thread's name, as `ps` shows it.
    pub comm: String,
    pub exe: Option<String>,
    pub cmdline: String,
    pub ppid: u32,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    /// Sorted by start, non-overlapping.
    pub mappings: Vec<Mapping>,
    /// Bumped whenever `mappings` changes, to invalidate resolved stacks.
    pub epoch: u32,
    /// Set by exec: the next file mapping is the new executable.
    pub awaiting_exe: bool,
    pub threads: FxHashMap<u32, ThreadState>,
    /// Kept by the pid filter.
    pub tracked: bool,
    /// A kernel thread (kthreadd or one of its children).
    pub kernel: bool,
    /// What is kept of it as its records arrive, not replayed.
    pub live: LiveProcess,
}

/// What the collector keeps of a process as its records arrive, beside the
/// state the window's replay builds: read while the process runs (it may
/// be gone by the window's end), and forgotten with its table entry. The
/// unwinders keep their own copy of its address space (`crate::unwind`),
/// told in the same place ([`super::Collector`]'s `process_event`).
#[derive(Debug, Clone, Default)]
pub(super) struct LiveProcess {
    /// Its cgroup as read, and when (CLOCK_MONOTONIC ns).
    pub cgroup: Option<(Option<String>, u64)>,
    /// Set once it maps anonymous executable memory (JIT code): its (uid,
    /// in-namespace pid) as read then, to find its perf map.
    pub jit_identity: Option<Option<(u32, u32)>>,
    /// The jitdump file it mapped (JITs map them so profilers find them).
    pub jitdump: Option<BinaryIndex>,
}

/// Whether a fork is a new process (not a thread, not the idle task).
pub(super) fn is_new_process(pid: u32, ppid: u32, tid: u32) -> bool {
    pid != ppid && tid == pid
}

impl ProcessState {
    fn new(tracked: bool) -> ProcessState {
        ProcessState {
            comm: String::new(),
            exe: None,
            cmdline: String::new(),
            ppid: 0,
            start_ns: None,
            end_ns: None,
            mappings: Vec::new(),
            epoch: 0,
            awaiting_exe: false,
            threads: FxHashMap::default(),
            tracked,
            kernel: false,
            live: LiveProcess::default(),
        }
    }

    pub fn thread(&mut self, tid: u32) -> &mut ThreadState {
        let comm = &self.comm;
        self.threads.entry(tid).or_insert_with(|| ThreadState {
            name: comm.clone(),
            ..Default::default()
        })
    }

    fn add_mapping(&mut self, m: Mapping) {
        self.mappings
            .retain(|o| o.end <= m.start || o.start >= m.end);
        let at = self.mappings.partition_point(|o| o.start < m.start);
        self.mappings.insert(at, m);
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// The mapping containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&Mapping> {
        let at = self.mappings.partition_point(|o| o.start <= addr);
        let m = self.mappings.get(at.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// The name to show: the main thread's name, as `ps`, `top` and perf
    /// show it (`sh`, not the `dash` it runs); the executable's file name
    /// when no name was seen.
    pub fn display_name(&self, pid: u32) -> String {
        if pid == 0 {
            return "swapper".into();
        }
        if !self.comm.is_empty() {
            return self.comm.clone();
        }
        match &self.exe {
            Some(exe) => exe
                .rsplit('/')
                .next()
                .unwrap_or(exe)
                .trim_end_matches(" (deleted)")
                .to_string(),
            None => format!("pid {pid}"),
        }
    }
}

/// Every process seen, keyed by pid.
#[derive(Debug)]
pub(super) struct ProcessTable {
    pub processes: FxHashMap<u32, ProcessState>,
    tracking_all: bool,
    /// When sampling began (0: not yet): a thread forked before had CPU
    /// time before the recording, so its base is not known.
    pub range_start_ns: u64,
}

impl ProcessTable {
    pub fn new(filter: &PidFilter) -> ProcessTable {
        let mut processes = FxHashMap::default();
        if let PidFilter::Tree(pids) = filter {
            for &pid in pids {
                processes.insert(pid, ProcessState::new(true));
            }
        }
        ProcessTable {
            processes,
            tracking_all: matches!(filter, PidFilter::All),
            range_start_ns: 0,
        }
    }

    pub fn process(&mut self, pid: u32) -> &mut ProcessState {
        let all = self.tracking_all;
        self.processes
            .entry(pid)
            .or_insert_with(|| ProcessState::new(all))
    }

    /// What is kept of `pid` as its records arrive (creating its entry).
    pub fn live(&mut self, pid: u32) -> &mut LiveProcess {
        &mut self.process(pid).live
    }

    /// What is kept of `pid` as its records arrive, if it is known.
    pub fn live_of(&self, pid: u32) -> Option<&LiveProcess> {
        self.processes.get(&pid).map(|p| &p.live)
    }

    /// Keep `pid` from now on.
    pub fn track(&mut self, pid: u32) {
        self.process(pid).tracked = true;
    }

    /// Whether `pid`'s data is kept (creating its entry when every process is).
    pub fn tracks(&mut self, pid: u32) -> bool {
        if self.tracking_all {
            return true;
        }
        self.processes.get(&pid).is_some_and(|p| p.tracked)
    }

    /// Seed from the processes that ran at start.
    pub fn seed(&mut self, snap: &ProcSnapshot, binaries: &[Vec<BinaryIndex>]) {
        for (p, bins) in snap.processes.iter().zip(binaries) {
            let state = self.process(p.pid);
            state.comm = p.comm.clone();
            state.exe = p.exe.clone();
            state.cmdline = p.cmdline.clone();
            state.ppid = p.ppid;
            state.kernel = p.pid == 2 || p.ppid == 2;
            state.start_ns = Some(p.start_ns);
            for (m, &binary) in p.mappings.iter().zip(bins) {
                state.add_mapping(Mapping {
                    start: m.start,
                    end: m.start + m.len,
                    pgoff: m.pgoff,
                    binary,
                    anon: is_anonymous(&m.path),
                });
            }
            for (tid, comm, cpu_ns) in &p.threads {
                let t = state.thread(*tid);
                t.name = comm.clone();
                t.cpu_time = CpuTime::since(*cpu_ns, snap.taken_ns);
                t.cpu_base_early = true;
            }
        }
    }

    /// The threads that ran before the recording: their CPU time read again
    /// with `cpu_ns(pid, tid)` now that sampling has begun. Their bases were
    /// read with `/proc` before the programs loaded, and a thread that ran
    /// meanwhile had that CPU time in its first sample: 767-921 ms in a
    /// 1.1-ms interval, a spike that flattened every CPU graph. Read after
    /// the sampler attached, a base is at least what the thread had at the
    /// recording's start (`start_ns`), so no first sample claims more than
    /// the time since.
    pub fn rebase_cpu_times(
        &mut self,
        start_ns: u64,
        mut cpu_ns: impl FnMut(u32, u32) -> Option<u64>,
    ) -> usize {
        let mut read = 0;
        for (&pid, p) in self.processes.iter_mut() {
            for (&tid, t) in p.threads.iter_mut() {
                if !std::mem::take(&mut t.cpu_base_early) {
                    continue;
                }
                if let Some(ns) = cpu_ns(pid, tid) {
                    t.cpu_time = CpuTime::since(ns, start_ns);
                    read += 1;
                }
            }
        }
        read
    }

    /// Apply one sideband event (`binary` is the interned file of a mapping).
    pub fn apply(&mut self, e: &SidebandEvent, binary: Option<BinaryIndex>) {
        match e {
            SidebandEvent::Mmap(m) => {
                let Some(binary) = binary else { return };
                let state = self.process(m.pid);
                if state.awaiting_exe && m.path.starts_with('/') {
                    state.exe = Some(m.path.clone());
                    state.awaiting_exe = false;
                }
                state.add_mapping(Mapping {
                    start: m.start,
                    end: m.start + m.len,
                    pgoff: m.pgoff,
                    binary,
                    anon: is_anonymous(&m.path),
                });
            }
            SidebandEvent::Comm {
                pid,
                tid,
                name,
                exec,
                ..
            } => {
                let state = self.process(*pid);
                if *exec {
                    state.mappings.clear();
                    state.epoch = state.epoch.wrapping_add(1);
                    state.awaiting_exe = true;
                    state.exe = None;
                    state.comm = name.clone();
                }
                if tid == pid {
                    state.comm = name.clone();
                }
                state.thread(*tid).name = name.clone();
            }
            SidebandEvent::Fork {
                time,
                pid,
                ppid,
                tid,
            } => {
                if is_new_process(*pid, *ppid, *tid) {
                    // A new process: it starts as a copy of its parent.
                    let all = self.tracking_all;
                    let (comm, exe, cmdline, mappings, tracked, kernel) =
                        match self.processes.get(ppid) {
                            Some(p) => (
                                p.comm.clone(),
                                p.exe.clone(),
                                p.cmdline.clone(),
                                p.mappings.clone(),
                                p.tracked,
                                p.kernel,
                            ),
                            None => (String::new(), None, String::new(), Vec::new(), all, false),
                        };
                    let already = self.processes.get(pid).is_some_and(|p| p.tracked);
                    let mut state = ProcessState::new(tracked || already || all);
                    state.comm = comm;
                    state.exe = exe;
                    state.cmdline = cmdline;
                    state.mappings = mappings;
                    state.ppid = *ppid;
                    state.kernel = kernel || *ppid == 2;
                    state.start_ns = Some(*time);
                    // Noted as the fork arrived, before this replay reached it.
                    state.live = self
                        .processes
                        .get_mut(pid)
                        .map(|p| std::mem::take(&mut p.live))
                        .unwrap_or_default();
                    self.processes.insert(*pid, state);
                }
                let range_start_ns = self.range_start_ns;
                let t = self.process(*pid).thread(*tid);
                t.start_ns = Some(*time);
                // Forked before sampling began (between the sideband's
                // opening and the sampler's attach: a fork storm's
                // children, `record`'s own `/proc` reader), it ran before
                // the recording: its first sample claimed that time (26.6 ms
                // of CPU 2 ms into one). No base: that sample gives 0.
                t.cpu_time = if *time < range_start_ns {
                    CpuTime::default()
                } else {
                    CpuTime::since(0, *time)
                };
                t.cpu_base_early = false;
            }
            SidebandEvent::Exit { time, pid, tid } => {
                let state = self.process(*pid);
                state.thread(*tid).end_ns = Some(*time);
                if tid == pid {
                    state.end_ns = Some(*time);
                }
            }
        }
    }

    /// Add the binaries the processes map, and their jitdumps, to `live`.
    pub fn live_binaries(&self, live: &mut rustc_hash::FxHashSet<BinaryIndex>) {
        for p in self.processes.values() {
            live.extend(p.mappings.iter().map(|m| m.binary));
            live.extend(p.live.jitdump);
        }
    }

    /// Forget what ended before `before_ns`: processes that exited (with
    /// all that is kept of them), and exited threads of live ones. Their
    /// last window has reported them.
    pub fn prune(&mut self, before_ns: u64) {
        self.processes
            .retain(|_, p| p.end_ns.is_none_or(|e| e >= before_ns));
        for p in self.processes.values_mut() {
            p.threads
                .retain(|_, t| t.end_ns.is_none_or(|e| e >= before_ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that what was noted of a new process as its fork arrived
    /// (before the window's replay reaches the fork) survives the fork's
    /// replay, and that it goes with the process's entry once the window
    /// that reported its exit is pruned: one removal forgets the pid.
    #[test]
    fn live_process_survives_its_fork_and_goes_with_its_exit() {
        let mut table = ProcessTable::new(&PidFilter::All);
        table.process(10).comm = "parent".into();
        // As the fork arrives: its cgroup, a jitdump.
        table.live(11).cgroup = Some((Some("/c.slice".into()), 5));
        table.live(11).jitdump = Some(3);
        // The window's replay.
        table.apply(
            &SidebandEvent::Fork {
                time: 100,
                pid: 11,
                ppid: 10,
                tid: 11,
            },
            None,
        );
        let child = &table.processes[&11];
        assert_eq!(
            child.comm, "parent",
            "a child starts as a copy of its parent"
        );
        assert_eq!(child.live.cgroup, Some((Some("/c.slice".into()), 5)));
        assert_eq!(child.live.jitdump, Some(3));
        table.apply(
            &SidebandEvent::Exit {
                time: 150,
                pid: 11,
                tid: 11,
            },
            None,
        );
        table.prune(200);
        assert!(
            table.live_of(11).is_none(),
            "exited before the window's end: forgotten with all kept of it"
        );
        assert!(table.live_of(10).is_some(), "the parent lives on");
    }

    /// Check that a thread that ran before the recording gets, in its first
    /// sample, only the CPU time since its base was read again at the
    /// sampler's attach, not what it used while the programs loaded; that a
    /// thread forked during the recording keeps its exact base (0); and
    /// that a base is read again once only.
    #[test]
    fn cpu_bases_read_before_the_recording_are_read_again_at_its_start() {
        use crate::sideband::proc_snapshot::{ProcSnapshot, SnapshotProcess};
        let mut table = ProcessTable::new(&PidFilter::All);
        let snap = ProcSnapshot {
            processes: vec![SnapshotProcess {
                pid: 7,
                ppid: 1,
                comm: "busy".into(),
                exe: None,
                cmdline: String::new(),
                start_ns: 0,
                threads: vec![(7, "busy".into(), 1_000_000)],
                mappings: Vec::new(),
                cgroup: None,
            }],
            taken_ns: 0,
        };
        table.seed(&snap, &[Vec::new()]);
        table.apply(
            &SidebandEvent::Fork {
                time: 5,
                pid: 7,
                ppid: 7,
                tid: 8,
            },
            None,
        );
        // 800 ms of CPU while the programs loaded.
        let mut asked = Vec::new();
        let read = table.rebase_cpu_times(1_000_000_000, |pid, tid| {
            asked.push((pid, tid));
            Some(801_000_000)
        });
        assert_eq!(
            (read, asked),
            (1, vec![(7, 7)]),
            "only the thread seeded from /proc is read again"
        );
        assert_eq!(
            table.rebase_cpu_times(1_000_000_000, |_, _| Some(u64::MAX)),
            0,
            "once"
        );
        let t = table.process(7).thread(7);
        // Its first sample, 1 ms of CPU after the attach.
        assert_eq!(
            t.cpu_time
                .advance(802_000_000, 802_000_000, 2_000_000_000, 0),
            1_000_000
        );
        let forked = table.process(7).thread(8);
        assert_eq!(
            forked
                .cpu_time
                .advance(3_000_000, 3_000_000, 2_000_000_000, 0),
            3_000_000,
            "a thread forked since has its exact base"
        );
    }

    /// Check that a thread forked before sampling began (its record read
    /// after) has no base: its first sample claims no CPU, not what it ran
    /// before the recording; one forked after has its exact base.
    #[test]
    fn a_thread_forked_before_sampling_began_has_no_base() {
        let mut table = ProcessTable::new(&PidFilter::All);
        table.range_start_ns = 1_000_000_000;
        for (tid, time) in [(8, 900_000_000), (9, 1_100_000_000)] {
            table.apply(
                &SidebandEvent::Fork {
                    time,
                    pid: 7,
                    ppid: 7,
                    tid,
                },
                None,
            );
        }
        // 26 ms of CPU at its first sample, 2 ms into the recording.
        let before = table.process(7).thread(8);
        assert_eq!(
            before
                .cpu_time
                .advance(26_000_000, 26_000_000, 1_002_000_000, 0),
            0
        );
        assert_eq!(
            before
                .cpu_time
                .advance(27_000_000, 27_000_000, 1_003_000_000, 0),
            1_000_000,
            "from its first sample on, its deltas"
        );
        let after = table.process(7).thread(9);
        assert_eq!(
            after
                .cpu_time
                .advance(1_000_000, 1_000_000, 1_102_000_000, 0),
            1_000_000
        );
    }
}
