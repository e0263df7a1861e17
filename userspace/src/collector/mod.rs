//! The collector: raw kernel records in, a [`Recording`] out.
//!
//! While recording, one `handle_*` per record kind stores what arrives:
//! samples go into columns with their raw stacks interned in a prefix tree
//! (no allocation per sample once the tree is warm), sideband events into a
//! list, and every mapped binary is opened at once (see
//! [`crate::symbolize::binaries`]). [`Collector::finish`] then replays
//! samples and sideband events in timestamp order, so each sample's
//! addresses are resolved with the mappings its process had at that moment,
//! derives per-thread CPU deltas, symbolicates each distinct address once,
//! and returns the [`Recording`].

pub mod recording;
mod sched;
pub mod stack_tree;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::bpf::abi::{
    IoEvent, OffCpuEvent, UstackEvent, USTACK_ID_FLAG, SampleView, ThreadState as KernelThreadState, SAMPLE_FLAG_KSTACK_FAILED, SAMPLE_FLAG_USTACK_FAILED,
    TASK_COMM_LEN,
};
use crate::sideband::proc_snapshot::ProcSnapshot;
use crate::sideband::{MmapEvent, SidebandEvent};
use crate::symbolize::binaries::{BinaryIndex, Binaries};
use crate::symbolize::{self, AddrInfo, Symbolicator};
use recording::*;
use stack_tree::{NodeIndex, StackTree, NO_PARENT};

use crate::unwind::{UnwindEnd, Unwinders};

/// Raw stack keys that are not addresses: where DWARF unwinding stopped
/// early (placed at the root end of the stack). No code lives at 1 or 2.
const TRUNCATED_COPY_EXHAUSTED: u64 = 1;
const TRUNCATED_NO_UNWIND_INFO: u64 = 2;

/// Kernel addresses on x86_64 and arm64 have the top bit set.
const KERNEL_ADDR_MIN: u64 = 0x8000_0000_0000_0000;

/// Which processes end up in the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidFilter {
    /// Every process (`record -a`).
    All,
    /// These processes and every process they start during the recording.
    Tree(Vec<u32>),
}

/// Samples as columns, in arrival order.
#[derive(Debug, Default)]
struct SampleColumns {
    time_ns: Vec<u64>,
    pid: Vec<u32>,
    tid: Vec<u32>,
    cpu: Vec<u32>,
    runtime_ns: Vec<u64>,
    raw_stack: Vec<NodeIndex>,
}

/// Accumulates everything recorded; see the module doc.
pub struct Collector {
    filter: PidFilter,
    samples: SampleColumns,
    raw_stacks: StackTree,
    /// Latest comm seen in a sample per tid, to name threads whose COMM event we missed.
    sample_comm: FxHashMap<u32, [u8; TASK_COMM_LEN]>,
    sideband: Vec<(SidebandEvent, Option<BinaryIndex>)>,
    snapshot: ProcSnapshot,
    snapshot_binaries: Vec<Vec<BinaryIndex>>,
    binaries: Binaries,
    stats: RecordingStats,
    warnings: Vec<String>,
    off_cpu: Vec<OffCpuEvent>,
    io: Vec<IoEvent>,
    stacks_by_id: FxHashMap<i32, Vec<u64>>,
    switches: FxHashMap<u32, KernelThreadState>,
    counters: Vec<CounterRecord>,
    notes: Vec<String>,
    options: CollectorOptions,
    /// Processes sampled since the last [`Collector::take_recent_pids`].
    recent_pids: FxHashSet<u32>,
    /// Dwarf mode: live per-process unwinders, kept up to date by the sideband.
    unwinders: Option<Unwinders>,
    /// jitdump files processes mapped (JITs map them so profilers find them).
    jitdumps: FxHashMap<u32, BinaryIndex>,
    /// cgroup of each process, read when it was first seen.
    cgroups: FxHashMap<u32, String>,
    /// Processes with anonymous executable memory (JIT code): their
    /// (uid, in-namespace pid), read when the mapping was first seen.
    jit_processes: FxHashMap<u32, Option<(u32, u32)>>,
    /// Reused buffer for one unwound stack.
    unwound: Vec<u64>,
}

/// What the collector makes of scheduler data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectorOptions {
    /// Off-CPU intervals at least this long get a marker.
    pub marker_min_ns: u64,
    /// Build one track per CPU with on-CPU slices.
    pub per_cpu: bool,
    /// Off-CPU tracking was on (samples are then weighted by time).
    pub off_cpu: bool,
    /// Fetch missing debug files from debuginfod servers.
    pub debuginfod: bool,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        CollectorOptions { marker_min_ns: 1_000_000, per_cpu: false, off_cpu: false, debuginfod: false }
    }
}

impl Collector {
    /// A collector keeping the processes `filter` selects.
    pub fn new(filter: PidFilter) -> Collector {
        Collector {
            filter,
            samples: SampleColumns::default(),
            raw_stacks: StackTree::new(),
            sample_comm: FxHashMap::default(),
            sideband: Vec::new(),
            snapshot: ProcSnapshot::default(),
            snapshot_binaries: Vec::new(),
            binaries: Binaries::new(),
            stats: RecordingStats::default(),
            warnings: Vec::new(),
            off_cpu: Vec::new(),
            io: Vec::new(),
            stacks_by_id: FxHashMap::default(),
            switches: FxHashMap::default(),
            counters: Vec::new(),
            notes: Vec::new(),
            options: CollectorOptions::default(),
            recent_pids: FxHashSet::default(),
            unwinders: None,
            jit_processes: FxHashMap::default(),
            cgroups: FxHashMap::default(),
            jitdumps: FxHashMap::default(),
            unwound: Vec::with_capacity(128),
        }
    }

    /// Unwind user stacks copied by the kernel (dwarf mode) as they arrive.
    /// Sideband events must then be handled before the samples they precede.
    pub fn enable_dwarf_unwinding(&mut self) {
        let mut u = Unwinders::new();
        add_snapshot_mappings(&mut u, &self.snapshot, &self.snapshot_binaries);
        self.unwinders = Some(u);
    }

    /// Processes sampled since the previous call (for per-process counters).
    pub fn take_recent_pids(&mut self) -> Vec<u32> {
        self.recent_pids.drain().collect()
    }

    /// Set what to make of scheduler data.
    pub fn set_options(&mut self, options: CollectorOptions) {
        self.options = options;
    }

    /// One off-CPU interval (with folded shorter ones).
    pub fn handle_offcpu(&mut self, e: &OffCpuEvent) {
        self.stats.off_cpu_intervals += 1;
        self.stats.off_cpu_folded += e.short_count as u64;
        self.off_cpu.push(*e);
    }

    /// One block I/O request.
    pub fn handle_io(&mut self, e: &IoEvent) {
        self.stats.io_requests += 1;
        self.io.push(*e);
    }

    /// Dwarf mode: a thread's user stack copied at switch-out; unwound now,
    /// with the mappings its process has, and kept under its id.
    pub fn handle_user_stack(&mut self, e: &UstackEvent, stack: &[u8]) {
        let Some(u) = self.unwinders.as_mut() else { return };
        let mut out = Vec::with_capacity(32);
        match u.unwind(&self.binaries, e.pid, (e.ip, e.sp, e.bp), stack, &mut out, 127) {
            UnwindEnd::Root => {}
            UnwindEnd::StackCopyExhausted => out.push(TRUNCATED_COPY_EXHAUSTED),
            UnwindEnd::NoUnwindInfo => out.push(TRUNCATED_NO_UNWIND_INFO),
        }
        self.stacks_by_id.insert(e.id as i32, out);
    }

    /// Stack ids of the kernel's stacks map that the recorded intervals and
    /// requests refer to (copied user stacks are already here).
    pub fn stack_ids(&self) -> Vec<i32> {
        let mut ids: FxHashSet<i32> = FxHashSet::default();
        for e in &self.off_cpu {
            ids.extend([e.kstack_id, e.ustack_id, e.waker_kstack_id, e.waker_ustack_id]);
        }
        for e in &self.io {
            ids.extend([e.kstack_id, e.ustack_id]);
        }
        ids.into_iter().filter(|&i| i >= 0 && (i as u32 & USTACK_ID_FLAG) == 0).collect()
    }

    /// The stacks behind [`Collector::stack_ids`] (leaf first); ids missing
    /// here were evicted and count as lost stacks.
    pub fn handle_stacks(&mut self, stacks: FxHashMap<i32, Vec<u64>>) {
        self.stacks_by_id.extend(stacks);
    }

    /// Per-thread context switch totals, read at the end.
    pub fn handle_thread_states(&mut self, switches: Vec<(u32, KernelThreadState)>) {
        self.switches = switches.into_iter().collect();
    }

    /// Counter tracks polled during the recording.
    pub fn handle_counters(&mut self, counters: Vec<CounterRecord>) {
        self.counters.extend(counters);
    }

    /// A note for the profile's log.
    pub fn note(&mut self, n: String) {
        self.notes.push(n);
    }

    /// Kernel-side losses of the scheduler/I/O tracer.
    pub fn handle_tracer_losses(&mut self, events: u64, stacks: u64, state: u64) {
        self.stats.lost_events += events;
        self.stats.lost_stacks += stacks;
        self.stats.lost_state += state;
    }

    /// Samples received so far.
    pub fn sample_count(&self) -> u64 {
        self.stats.samples
    }

    /// Processes that already ran at start, from `/proc`.
    pub fn handle_snapshot(&mut self, snapshot: ProcSnapshot) {
        self.snapshot_binaries = snapshot
            .processes
            .iter()
            .map(|p| p.mappings.iter().map(|m| self.binaries.intern(m)).collect())
            .collect();
        for p in &snapshot.processes {
            if let Some(c) = &p.cgroup {
                self.cgroups.insert(p.pid, c.clone());
            }
        }
        if let Some(u) = self.unwinders.as_mut() {
            add_snapshot_mappings(u, &snapshot, &self.snapshot_binaries);
        }
        self.snapshot = snapshot;
    }

    /// One cpu-clock sample. Allocation-free once the stack tree holds the stack.
    pub fn handle_sample(&mut self, s: &SampleView<'_>) {
        self.stats.samples += 1;
        if s.flags & SAMPLE_FLAG_KSTACK_FAILED != 0 {
            self.stats.kernel_stack_failures += 1;
        }
        if s.flags & SAMPLE_FLAG_USTACK_FAILED != 0 {
            self.stats.user_stack_failures += 1;
        }
        // Root is the pid (so equal addresses in different processes never
        // share a node), then user frames outermost first, then kernel frames.
        let mut node = self.raw_stacks.child(NO_PARENT, s.pid as u64);
        match (s.user_regs, self.unwinders.as_mut()) {
            (Some(regs), Some(u)) => {
                self.unwound.clear();
                let end = u.unwind(&self.binaries, s.pid, regs, s.stack, &mut self.unwound, 127);
                match end {
                    UnwindEnd::Root => {}
                    UnwindEnd::StackCopyExhausted => node = self.raw_stacks.child(node, TRUNCATED_COPY_EXHAUSTED),
                    UnwindEnd::NoUnwindInfo => node = self.raw_stacks.child(node, TRUNCATED_NO_UNWIND_INFO),
                }
                for &addr in self.unwound.iter().rev() {
                    if addr != 0 && addr < KERNEL_ADDR_MIN {
                        node = self.raw_stacks.child(node, addr);
                    }
                }
            }
            _ => {
                for &addr in s.ustack.iter().rev() {
                    if addr != 0 && addr < KERNEL_ADDR_MIN {
                        node = self.raw_stacks.child(node, addr);
                    }
                }
            }
        }
        for &addr in s.kstack.iter().rev() {
            if addr >= KERNEL_ADDR_MIN {
                node = self.raw_stacks.child(node, addr);
            }
        }
        self.samples.time_ns.push(s.time_ns);
        self.samples.pid.push(s.pid);
        self.samples.tid.push(s.tid);
        self.samples.cpu.push(s.cpu);
        self.recent_pids.insert(s.pid);
        self.samples.runtime_ns.push(s.sum_exec_runtime);
        self.samples.raw_stack.push(node);
        let mut comm = [0u8; TASK_COMM_LEN];
        comm[..s.comm.len()].copy_from_slice(s.comm);
        if self.sample_comm.get(&s.tid) != Some(&comm) {
            self.sample_comm.insert(s.tid, comm);
        }
    }

    /// One sideband event; dispatches to the handler for its kind.
    pub fn handle_sideband(&mut self, e: SidebandEvent) {
        // A new process: note its cgroup while it runs (it may be gone by the end).
        if let SidebandEvent::Fork { pid, ppid, tid, .. } = &e {
            if pid != ppid && tid == pid {
                if let Some(c) = crate::sideband::proc_snapshot::read_cgroup(*pid) {
                    self.cgroups.insert(*pid, c);
                }
            }
        }
        if let Some(u) = self.unwinders.as_mut() {
            match &e {
                SidebandEvent::Comm { pid, exec: true, .. } => u.exec(*pid),
                SidebandEvent::Fork { pid, ppid, tid, .. } if pid != ppid && tid == pid => u.fork(*ppid, *pid),
                SidebandEvent::Exit { time, pid, tid } if tid == pid => u.exit(*pid, *time),
                _ => {}
            }
        }
        match e {
            SidebandEvent::Mmap(m) => self.handle_mmap2(m),
            other => self.sideband.push((other, None)),
        }
    }

    /// An executable mapping: open its file now, while the process lives.
    pub fn handle_mmap2(&mut self, m: MmapEvent) {
        let binary = self.binaries.intern(&m);
        if is_anonymous(&m.path) {
            self.jit_processes.entry(m.pid).or_insert_with(|| symbolize::perfmap::process_identity(m.pid));
        }
        let file_name = m.path.rsplit('/').next().unwrap_or("");
        if file_name.starts_with("jit-") && file_name.ends_with(".dump") {
            self.jitdumps.insert(m.pid, binary);
        }
        if let Some(u) = self.unwinders.as_mut() {
            u.add_mapping(m.pid, m.start, m.len, m.pgoff, binary);
        }
        self.sideband.push((SidebandEvent::Mmap(m), Some(binary)));
    }

    /// Totals of what was lost outside the collector (kernel drops, perf ring losses).
    pub fn handle_losses(&mut self, lost_samples: u64, lost_sideband: u64, malformed: u64) {
        self.stats.lost_samples += lost_samples;
        self.stats.lost_sideband += lost_sideband;
        self.stats.malformed += malformed;
    }

    /// A warning to show at the end and keep in the profile.
    pub fn warn(&mut self, w: String) {
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    /// Replay, symbolicate and return the recording.
    pub fn finish(mut self, start_ns: u64, start_wall_ms: f64, end_ns: u64, interval_ms: f64) -> Recording {
        let mut replay = Replay::new(&self);
        replay.seed_from_snapshot(&self.snapshot, &self.snapshot_binaries);

        // Merge sideband and samples in time order. At equal times, sideband
        // first: a mapping reported at t serves a sample at t.
        self.sideband.sort_by_key(|(e, _)| e.time());
        // (time, kind, index): kind 0 = sample, 1 = off-CPU interval, 2 = I/O.
        let mut order: Vec<(u64, u8, u32)> = Vec::with_capacity(self.samples.time_ns.len() + self.off_cpu.len() + self.io.len());
        order.extend(self.samples.time_ns.iter().enumerate().map(|(i, &t)| (t, 0, i as u32)));
        order.extend(self.off_cpu.iter().enumerate().map(|(i, e)| (e.start_ns, 1, i as u32)));
        order.extend(self.io.iter().enumerate().map(|(i, e)| (e.start_ns, 2, i as u32)));
        order.sort_unstable();
        let mut side = self.sideband.iter().peekable();
        for &(t, kind, i) in &order {
            while let Some((e, b)) = side.next_if(|(e, _)| e.time() <= t) {
                replay.apply(e, *b);
            }
            match kind {
                0 => replay.sample(&self, i as usize),
                1 => replay.off_cpu(&self, &self.off_cpu[i as usize]),
                _ => replay.io(&self, &self.io[i as usize]),
            }
        }
        for (e, b) in side {
            replay.apply(e, *b);
        }
        replay.finish_switches(&self, end_ns);
        let cpu_tracks = if self.options.per_cpu { replay.cpu_tracks(&self, &order, interval_ms) } else { Vec::new() };
        self.stats.lost_stacks += replay.missing_stacks;

        let Replay { processes, frame_keys, stacks, .. } = replay;
        let mut warnings = std::mem::take(&mut self.warnings);
        if let Some(u) = self.unwinders.take() {
            self.stats.unwind = u.stats;
            for f in u.failures {
                warnings.push(format!("cannot read unwind information of {f}; its frames are walked by frame pointer"));
            }
        }
        let jit = JitSources { processes: &self.jit_processes, dumps: &self.jitdumps };
        let (libs, frames) = symbolicate(&mut self.binaries, &frame_keys, &jit, self.options.debuginfod, &mut warnings);
        let mut processes = finish_processes(processes, &self.filter, &self.sample_comm);
        self.stats.samples_kept = processes.iter().flat_map(|p| &p.threads).map(|t| t.samples.time_ns.len() as u64).sum();
        for p in &mut processes {
            // Containers move processes after they start: the latest word wins.
            p.cgroup = crate::sideband::proc_snapshot::read_cgroup(p.pid).or_else(|| self.cgroups.get(&p.pid).cloned());
        }
        Recording {
            counters: std::mem::take(&mut self.counters),
            cpu_tracks,
            off_cpu: self.options.off_cpu,
            notes: std::mem::take(&mut self.notes),
            start_ns,
            start_wall_ms,
            end_ns,
            interval_ms,
            processes,
            libs,
            frames,
            stacks,
            stats: self.stats,
            warnings,
        }
    }
}

/// Give the unwinders the mappings of the processes read from /proc.
fn add_snapshot_mappings(u: &mut Unwinders, snapshot: &ProcSnapshot, binaries: &[Vec<BinaryIndex>]) {
    for (p, bins) in snapshot.processes.iter().zip(binaries) {
        for (m, &b) in p.mappings.iter().zip(bins) {
            u.add_mapping(p.pid, m.start, m.len, m.pgoff, b);
        }
    }
}

/// A mapping in a process's address space during replay.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    binary: BinaryIndex,
    /// Anonymous memory (JIT code): frames are named from the perf map.
    anon: bool,
}

/// Paths the kernel gives anonymous executable memory.
fn is_anonymous(path: &str) -> bool {
    path.is_empty() || path.starts_with("//anon") || path.starts_with("[anon")
}

#[derive(Debug)]
struct ThreadState {
    name: String,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
    last_runtime: Option<u64>,
    samples: ThreadSamples,
    off_cpu: OffCpuSamples,
    markers: Vec<MarkerRecord>,
    switches: Option<(u64, u64)>,
}

#[derive(Debug)]
struct ProcessState {
    comm: String,
    exe: Option<String>,
    cmdline: String,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
    /// Sorted by start, non-overlapping.
    mappings: Vec<Mapping>,
    /// Bumped whenever `mappings` changes, to invalidate resolved stacks.
    epoch: u32,
    /// Set by exec: the next file mapping is the new executable.
    awaiting_exe: bool,
    threads: FxHashMap<u32, ThreadState>,
    /// Tracked by the pid filter.
    tracked: bool,
}

impl ProcessState {
    fn new(comm: String, tracked: bool) -> ProcessState {
        ProcessState {
            comm,
            exe: None,
            cmdline: String::new(),
            start_ns: None,
            end_ns: None,
            mappings: Vec::new(),
            epoch: 0,
            awaiting_exe: false,
            threads: FxHashMap::default(),
            tracked,
        }
    }

    fn thread(&mut self, tid: u32) -> &mut ThreadState {
        let comm = &self.comm;
        self.threads.entry(tid).or_insert_with(|| ThreadState {
            name: comm.clone(),
            start_ns: None,
            end_ns: None,
            last_runtime: None,
            samples: ThreadSamples::default(),
            off_cpu: OffCpuSamples::default(),
            markers: Vec::new(),
            switches: None,
        })
    }

    fn add_mapping(&mut self, m: Mapping) {
        self.mappings.retain(|o| o.end <= m.start || o.start >= m.end);
        let at = self.mappings.partition_point(|o| o.start < m.start);
        self.mappings.insert(at, m);
        self.epoch = self.epoch.wrapping_add(1);
    }

    fn lookup(&self, addr: u64) -> Option<&Mapping> {
        let at = self.mappings.partition_point(|o| o.start <= addr);
        let m = self.mappings.get(at.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

/// A frame before symbolication: (library or NO_LIB/KERNEL, address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FrameKey {
    binary: u32,
    address: u64,
    /// For JIT frames only (absolute addresses mean something per process).
    pid: u32,
}

/// `FrameKey::binary` for code in anonymous memory or in no known mapping:
/// named from the process's perf map or jitdump, `address` absolute, `pid` set.
const JIT_BINARY: u32 = u32::MAX - 3;

/// `FrameKey::binary` for kernel addresses.
const KERNEL_BINARY: u32 = u32::MAX - 1;
/// `FrameKey::binary` for pseudo frames naming an off-CPU reason; the
/// address is a [`PseudoFrame`] value.
const PSEUDO_BINARY: u32 = u32::MAX - 2;

/// Leaf frames that are not code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum PseudoFrame {
    Preempted = 0,
    Sleeping = 1,
    Blocked = 2,
    Other = 3,
    Folded = 4,
    StackCopyExhausted = 5,
    NoUnwindInfo = 6,
}

impl PseudoFrame {
    fn from_address(a: u64) -> PseudoFrame {
        match a {
            0 => PseudoFrame::Preempted,
            1 => PseudoFrame::Sleeping,
            2 => PseudoFrame::Blocked,
            3 => PseudoFrame::Other,
            5 => PseudoFrame::StackCopyExhausted,
            6 => PseudoFrame::NoUnwindInfo,
            _ => PseudoFrame::Folded,
        }
    }

    fn name(self) -> &'static str {
        match self {
            PseudoFrame::Preempted => OffCpuReason::Preempted.frame_name(),
            PseudoFrame::Sleeping => OffCpuReason::Sleeping.frame_name(),
            PseudoFrame::Blocked => OffCpuReason::Blocked.frame_name(),
            PseudoFrame::Other => OffCpuReason::Other.frame_name(),
            PseudoFrame::Folded => "[off-CPU: short intervals, no stack]",
            PseudoFrame::StackCopyExhausted => "[truncated: user stack copy exhausted (--stack-size)]",
            PseudoFrame::NoUnwindInfo => "[truncated: no unwind information]",
        }
    }
}

struct Replay {
    processes: FxHashMap<u32, ProcessState>,
    tracking_all: bool,
    frame_keys: Vec<FrameKey>,
    frame_index: FxHashMap<FrameKey, u32>,
    stacks: StackTree,
    /// raw stack node -> (process epoch, resolved node)
    resolved: FxHashMap<NodeIndex, (u32, NodeIndex)>,
    path: Vec<u64>,
    /// Stack ids referenced but absent from the stacks map.
    missing_stacks: u64,
}

impl Replay {
    fn new(c: &Collector) -> Replay {
        let mut processes = FxHashMap::default();
        let tracking_all = c.filter == PidFilter::All;
        if let PidFilter::Tree(pids) = &c.filter {
            for &pid in pids {
                processes.insert(pid, ProcessState::new(String::new(), true));
            }
        }
        Replay {
            processes,
            tracking_all,
            frame_keys: Vec::new(),
            frame_index: FxHashMap::default(),
            stacks: StackTree::new(),
            resolved: FxHashMap::default(),
            path: Vec::with_capacity(256),
            missing_stacks: 0,
        }
    }

    fn process(&mut self, pid: u32) -> &mut ProcessState {
        let all = self.tracking_all;
        self.processes.entry(pid).or_insert_with(|| ProcessState::new(String::new(), all))
    }

    fn seed_from_snapshot(&mut self, snap: &ProcSnapshot, binaries: &[Vec<BinaryIndex>]) {
        for (p, bins) in snap.processes.iter().zip(binaries) {
            let state = self.process(p.pid);
            state.comm = p.comm.clone();
            state.exe = p.exe.clone();
            state.cmdline = p.cmdline.clone();
            state.start_ns = Some(p.start_ns);
            for (m, &binary) in p.mappings.iter().zip(bins) {
                state.add_mapping(Mapping { start: m.start, end: m.start + m.len, pgoff: m.pgoff, binary, anon: is_anonymous(&m.path) });
            }
            for (tid, comm, cpu_ns) in &p.threads {
                let t = state.thread(*tid);
                t.name = comm.clone();
                t.last_runtime = Some(*cpu_ns);
            }
        }
    }

    fn apply(&mut self, e: &SidebandEvent, binary: Option<BinaryIndex>) {
        match e {
            SidebandEvent::Mmap(m) => {
                let Some(binary) = binary else { return };
                let state = self.process(m.pid);
                if state.awaiting_exe && m.path.starts_with('/') {
                    state.exe = Some(m.path.clone());
                    state.awaiting_exe = false;
                }
                state.add_mapping(Mapping { start: m.start, end: m.start + m.len, pgoff: m.pgoff, binary, anon: is_anonymous(&m.path) });
            }
            SidebandEvent::Comm { time: _, pid, tid, name, exec } => {
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
            SidebandEvent::Fork { time, pid, ppid, tid } => {
                if pid != ppid && tid == pid {
                    // A new process: it starts as a copy of its parent.
                    let (comm, exe, cmdline, mappings, tracked) = match self.processes.get(ppid) {
                        Some(p) => (p.comm.clone(), p.exe.clone(), p.cmdline.clone(), p.mappings.clone(), p.tracked),
                        None => (String::new(), None, String::new(), Vec::new(), self.tracking_all),
                    };
                    let already = self.processes.get(pid).is_some_and(|p| p.tracked);
                    let mut state = ProcessState::new(comm, tracked || already || self.tracking_all);
                    state.exe = exe;
                    state.cmdline = cmdline;
                    state.mappings = mappings;
                    state.start_ns = Some(*time);
                    self.processes.insert(*pid, state);
                }
                let t = self.process(*pid).thread(*tid);
                t.start_ns = Some(*time);
                t.last_runtime = Some(0);
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

    fn sample(&mut self, c: &Collector, i: usize) {
        let pid = c.samples.pid[i];
        let tid = c.samples.tid[i];
        let raw = c.samples.raw_stack[i];
        if !self.processes.contains_key(&pid) {
            if !self.tracking_all {
                return;
            }
            self.process(pid);
        }
        let state = &self.processes[&pid];
        if !state.tracked {
            return;
        }
        let epoch = state.epoch;
        let node = match self.resolved.get(&raw) {
            Some(&(e, node)) if e == epoch => node,
            _ => {
                let node = self.resolve(c, pid, raw);
                self.resolved.insert(raw, (epoch, node));
                node
            }
        };
        let runtime = c.samples.runtime_ns[i];
        let t = self.processes.get_mut(&pid).expect("present").thread(tid);
        let delta = match t.last_runtime {
            Some(last) => runtime.saturating_sub(last),
            None => 0,
        };
        t.last_runtime = Some(runtime.max(t.last_runtime.unwrap_or(0)));
        t.samples.time_ns.push(c.samples.time_ns[i]);
        t.samples.stack.push(node);
        t.samples.cpu_delta_ns.push(delta);
    }

    /// Map a raw stack (pid root, absolute addresses) to frame indices.
    fn resolve(&mut self, c: &Collector, pid: u32, raw: NodeIndex) -> NodeIndex {
        let mut path = std::mem::take(&mut self.path);
        c.raw_stacks.path(raw, &mut path);
        let node = self.resolve_addrs(pid, &path[1..]); // path[0] is the pid root
        self.path = path;
        if node == NO_PARENT {
            // A sample with no usable frame at all still counts, as an empty stack.
            let frame = self.frame(FrameKey { binary: NO_LIB, address: 0, pid: 0 });
            return self.stacks.child(NO_PARENT, frame as u64);
        }
        node
    }

    fn frame(&mut self, key: FrameKey) -> u32 {
        let next = self.frame_keys.len() as u32;
        *self.frame_index.entry(key).or_insert_with(|| {
            self.frame_keys.push(key);
            next
        })
    }

    /// Map absolute addresses, root first, to a node of frame indices
    /// (NO_PARENT for an empty stack), with `pid`'s mappings of the moment.
    fn resolve_addrs(&mut self, pid: u32, frames: &[u64]) -> NodeIndex {
        let Some(state) = self.processes.get(&pid) else { return NO_PARENT };
        let mut node = NO_PARENT;
        let leaf = frames.len().saturating_sub(1);
        for (depth, &addr) in frames.iter().enumerate() {
            // Return addresses point after the call; look up the call itself.
            let lookup = if depth == leaf { addr } else { addr.saturating_sub(1) };
            let key = if addr == TRUNCATED_COPY_EXHAUSTED || addr == TRUNCATED_NO_UNWIND_INFO {
                let pseudo = if addr == TRUNCATED_COPY_EXHAUSTED { PseudoFrame::StackCopyExhausted } else { PseudoFrame::NoUnwindInfo };
                FrameKey { binary: PSEUDO_BINARY, address: pseudo as u64, pid: 0 }
            } else if addr >= KERNEL_ADDR_MIN {
                FrameKey { binary: KERNEL_BINARY, address: lookup, pid: 0 }
            } else if let Some(m) = state.lookup(lookup) {
                if m.anon {
                    FrameKey { binary: JIT_BINARY, address: lookup, pid }
                } else {
                    FrameKey { binary: m.binary, address: lookup - m.start + m.pgoff, pid: 0 }
                }
            } else {
                // Not in any mapping we saw: JIT code whose mapping was never
                // reported (or a bad frame). Perf maps and jitdumps name
                // absolute addresses, so try them; otherwise it stays hex.
                FrameKey { binary: JIT_BINARY, address: lookup, pid }
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

/// Symbolicate every distinct frame, one blazesym call per binary.
/// Where JIT frames get their names: perf maps (found by pid) and jitdump
/// files (mapped by the process).
struct JitSources<'a> {
    processes: &'a FxHashMap<u32, Option<(u32, u32)>>,
    dumps: &'a FxHashMap<u32, BinaryIndex>,
}

fn symbolicate(
    binaries: &mut Binaries,
    keys: &[FrameKey],
    jit: &JitSources<'_>,
    debuginfod: bool,
    warnings: &mut Vec<String>,
) -> (Vec<LibRecord>, Vec<FrameRecord>) {
    let symbolicator = Symbolicator::new();
    let mut by_binary: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for (i, k) in keys.iter().enumerate() {
        by_binary.entry(k.binary).or_default().push(i as u32);
    }
    let (kernel_text, kernel_build_id) = symbolize::kernel_image();
    let kernel_lib = binaries.len() as u32;
    let mut frames: Vec<FrameRecord> = keys
        .iter()
        .map(|k| match k.binary {
            KERNEL_BINARY => FrameRecord {
                lib: kernel_lib,
                address: k.address.wrapping_sub(kernel_text),
                kernel: true,
                symbols: AddrInfo::default(),
                pseudo: false,
            },
            PSEUDO_BINARY => FrameRecord {
                lib: NO_LIB,
                address: 0,
                kernel: false,
                symbols: AddrInfo {
                    funcs: vec![symbolize::FuncAtAddr {
                        name: PseudoFrame::from_address(k.address).name().to_string(),
                        file: None,
                        line: None,
                    }],
                    ..AddrInfo::default()
                },
                pseudo: true,
            },
            JIT_BINARY => FrameRecord { lib: NO_LIB, address: k.address, kernel: false, symbols: AddrInfo::default(), pseudo: false },
            b => FrameRecord { lib: b, address: k.address, kernel: false, symbols: AddrInfo::default(), pseudo: false },
        })
        .collect();
    // Build ids first: they name separate debug files.
    for i in 0..binaries.len() as u32 {
        let bin = binaries.get_mut(i);
        if bin.build_id.is_none() {
            if let Some(path) = bin.open_path() {
                if let Ok(Some(id)) = blazesym::helper::read_elf_build_id(&path) {
                    bin.build_id = Some(id.to_vec());
                }
            }
        }
    }
    // Debug files from debuginfod for sampled binaries that have none here.
    let mut fetched: FxHashMap<u32, String> = FxHashMap::default();
    if debuginfod {
        let wanted: Vec<(u32, Vec<u8>)> = by_binary
            .keys()
            .filter(|&&b| (b as usize) < binaries.len())
            .filter_map(|&b| {
                let id = binaries.get(b).build_id.clone()?;
                symbolize::build_id_debug_file(&id).is_none().then_some((b, id))
            })
            .collect();
        let (found, errors) = symbolize::fetch_debuginfod(wanted);
        fetched.extend(found);
        for e in errors {
            if !warnings.contains(&e) {
                warnings.push(e);
            }
        }
    }
    for (binary, idxs) in by_binary {
        let addrs: Vec<u64> = idxs.iter().map(|&i| keys[i as usize].address).collect();
        let result = match binary {
            NO_LIB | PSEUDO_BINARY | JIT_BINARY => continue,
            KERNEL_BINARY => symbolicator.symbolize_kernel(&addrs).map_err(|e| format!("kernel symbols: {e}")),
            b => {
                let bin = binaries.get(b);
                let debug_file =
                    bin.build_id.as_deref().and_then(symbolize::build_id_debug_file).or_else(|| fetched.get(&b).cloned());
                match (bin.open_path(), debug_file) {
                    (Some(path), Some(debug)) => symbolize::file_offsets_to_virt(&path, &addrs)
                        .and_then(|virt| symbolicator.symbolize_elf_virt(&debug, &virt))
                        .map_err(|e| format!("{} (debug file {debug}): {e}", bin.path)),
                    (Some(path), None) => {
                        symbolicator.symbolize_elf(&path, &addrs).map_err(|e| format!("{}: {e}", bin.path))
                    }
                    (None, _) => Err(format!(
                        "{}: {}",
                        bin.path,
                        bin.open_error.clone().unwrap_or_else(|| "not a file".into())
                    )),
                }
            }
        };
        match result {
            Ok(infos) => {
                for (&i, info) in idxs.iter().zip(infos) {
                    frames[i as usize].symbols = info;
                }
            }
            Err(e) => {
                let w = format!("cannot symbolize {e}; its frames keep library and address");
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
    }
    let mut libs = Vec::with_capacity(binaries.len() + 1);
    for i in 0..binaries.len() as u32 {
        let bin = binaries.get(i);
        libs.push(LibRecord { path: bin.path.clone(), name: bin.name.clone(), build_id: bin.build_id.clone() });
    }
    libs.push(LibRecord { path: "[kernel.kallsyms]".into(), name: "[kernel.kallsyms]".into(), build_id: kernel_build_id });
    symbolicate_jit(keys, &mut frames, &mut libs, jit, binaries, warnings);
    (libs, frames)
}

/// Name JIT frames from each process's perf map; each process with one gets
/// a library named after its map file.
fn symbolicate_jit(
    keys: &[FrameKey],
    frames: &mut [FrameRecord],
    libs: &mut Vec<LibRecord>,
    jit: &JitSources<'_>,
    binaries: &Binaries,
    warnings: &mut Vec<String>,
) {
    let mut warn = |w: String| {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    };
    let mut by_pid: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (i, k) in keys.iter().enumerate() {
        if k.binary == JIT_BINARY {
            by_pid.entry(k.pid).or_default().push(i);
        }
    }
    for (pid, idxs) in by_pid {
        let identity = jit.processes.get(&pid).copied().flatten().or_else(|| symbolize::perfmap::process_identity(pid));
        let (uid, ns_pid) = match identity {
            Some((u, n)) => (Some(u), n),
            None => (None, pid),
        };
        // The map lives in the process's own /tmp: through its root while it
        // runs (containers), in ours once it has exited.
        let root = format!("/proc/{pid}/root");
        let root = if std::path::Path::new(&root).exists() { root } else { String::new() };
        let mut map = match symbolize::perfmap::load(uid, ns_pid, &root) {
            Ok(m) => Some(m),
            Err(e) => {
                if !e.contains("No such file") {
                    warn(format!("perf map of pid {pid}: {e}"));
                }
                None
            }
        };
        let mut lib_path = format!("/tmp/perf-{ns_pid}.map");
        // The jitdump the process mapped: read through the descriptor opened
        // when it was mapped, so it is the file the JIT wrote.
        if let Some(bin) = jit.dumps.get(&pid).map(|&b| binaries.get(b)) {
            // Positional reads: the descriptor's offset is shared with
            // whoever read it before (the unwinder looked for ELF sections).
            let dump = bin.file.as_ref().and_then(|f| {
                use std::os::unix::fs::FileExt;
                let len = f.metadata().ok()?.len().min(512 << 20) as usize;
                let mut bytes = vec![0u8; len];
                let mut done = 0;
                while done < len {
                    match f.read_at(&mut bytes[done..], done as u64) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => done += n,
                    }
                }
                bytes.truncate(done);
                symbolize::jitdump::parse(&bytes)
            });
            match dump {
                Some(d) => {
                    let m = map.get_or_insert_with(Default::default);
                    m.symbols.extend(d.symbols);
                    m.symbols.sort_by_key(|s| s.start);
                    lib_path = bin.path.clone();
                }
                None => warn(format!("{}: not a readable jitdump file; its JIT frames stay unnamed", bin.path)),
            }
        }
        let Some(map) = map else { continue };
        let lib = libs.len() as u32;
        let lib_name = lib_path.rsplit('/').next().unwrap_or(&lib_path).to_string();
        libs.push(LibRecord { path: lib_path.clone(), name: format!("JIT ({lib_name})"), build_id: None });
        for i in idxs {
            let f = &mut frames[i];
            f.lib = lib;
            if let Some(sym) = map.lookup(keys[i].address) {
                f.symbols = AddrInfo {
                    symbol_start: sym.start,
                    symbol_offset: keys[i].address - sym.start,
                    symbol_size: Some(sym.size),
                    funcs: vec![symbolize::FuncAtAddr { name: sym.name.clone(), file: None, line: None }],
                };
            }
        }
    }
}

/// Keep tracked processes with samples (or every thread of explicitly
/// tracked ones), main thread first, sorted by pid and tid.
fn finish_processes(
    processes: FxHashMap<u32, ProcessState>,
    filter: &PidFilter,
    sample_comm: &FxHashMap<u32, [u8; TASK_COMM_LEN]>,
) -> Vec<ProcessRecord> {
    let keep_idle_threads = matches!(filter, PidFilter::Tree(_));
    let mut out = Vec::new();
    let roots: FxHashSet<u32> = match filter {
        PidFilter::Tree(p) => p.iter().copied().collect(),
        PidFilter::All => FxHashSet::default(),
    };
    for (pid, p) in processes {
        if !p.tracked {
            continue;
        }
        let mut threads: Vec<ThreadRecord> = p
            .threads
            .into_iter()
            .filter(|(_, t)| {
                !t.samples.time_ns.is_empty()
                    || !t.off_cpu.time_ns.is_empty()
                    || !t.markers.is_empty()
                    || (keep_idle_threads && (t.start_ns.is_some() || roots.contains(&pid)))
            })
            .map(|(tid, mut t)| {
                sort_off_cpu(&mut t.off_cpu);
                let name = if t.name.is_empty() {
                    sample_comm.get(&tid).map(comm_str).unwrap_or_default()
                } else {
                    t.name
                };
                ThreadRecord {
                    tid,
                    name,
                    start_ns: t.start_ns,
                    end_ns: t.end_ns,
                    samples: t.samples,
                    off_cpu: t.off_cpu,
                    markers: t.markers,
                    switches: t.switches,
                }
            })
            .collect();
        if threads.is_empty() {
            continue;
        }
        threads.sort_by_key(|t| (t.tid != pid, t.tid));
        let comm = if p.comm.is_empty() {
            sample_comm.get(&pid).map(comm_str).unwrap_or_default()
        } else {
            p.comm
        };
        let name = match (&p.exe, pid) {
            (_, 0) => "swapper".to_string(),
            (Some(exe), _) => exe.rsplit('/').next().unwrap_or(exe).trim_end_matches(" (deleted)").to_string(),
            (None, _) if !comm.is_empty() => comm,
            _ => format!("pid {pid}"),
        };
        out.push(ProcessRecord {
            pid,
            name,
            exe: p.exe,
            cmdline: p.cmdline,
            start_ns: p.start_ns,
            end_ns: p.end_ns,
            cgroup: None,
            threads,
        });
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// Off-CPU samples arrive in interval start order, except the folded
/// remainders added at the end; the profile needs them sorted by time.
fn sort_off_cpu(o: &mut OffCpuSamples) {
    if o.time_ns.windows(2).all(|w| w[0] <= w[1]) {
        return;
    }
    let mut idx: Vec<usize> = (0..o.time_ns.len()).collect();
    idx.sort_by_key(|&i| o.time_ns[i]);
    o.time_ns = idx.iter().map(|&i| o.time_ns[i]).collect();
    o.stack = idx.iter().map(|&i| o.stack[i]).collect();
    o.duration_ns = idx.iter().map(|&i| o.duration_ns[i]).collect();
}

fn comm_str(c: &[u8; TASK_COMM_LEN]) -> String {
    let len = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..len]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(time: u64, pid: u32, path: &str) -> MmapEvent {
        MmapEvent { time, pid, start: 0x40_0000, len: 0x1000, pgoff: 0x2000, path: path.into(), build_id: None, inode: None }
    }

    fn sample(c: &mut Collector, time: u64, pid: u32, tid: u32, runtime: u64, ustack: &[u64], kstack: &[u64]) {
        c.handle_sample(&SampleView {
            cpu: 0,
            time_ns: time,
            sum_exec_runtime: runtime,
            pid,
            tid,
            flags: 0,
            comm: b"app",
            kstack,
            ustack,
            user_regs: None,
            stack: &[],
        });
    }

    /// (library path, library-relative address) of each frame of a thread's sample, root first.
    fn frames_of(r: &Recording, pid: u32, tid: u32, i: usize) -> Vec<(String, u64)> {
        let t = r.processes.iter().find(|p| p.pid == pid).unwrap().threads.iter().find(|t| t.tid == tid).unwrap();
        let mut keys = Vec::new();
        r.stacks.path(t.samples.stack[i], &mut keys);
        keys.iter()
            .map(|&k| {
                let f = &r.frames[k as usize];
                let lib = if f.lib == NO_LIB { "?".to_string() } else { r.libs[f.lib as usize].path.clone() };
                (lib, f.address)
            })
            .collect()
    }

    /// Check that samples are resolved with the mappings their process had
    /// at the sample's time (even when records arrive out of order), that an
    /// exec replaces the mappings, that a forked child inherits its parent's,
    /// and that return addresses are looked up one byte back.
    #[test]
    fn replay_resolves_with_mappings_of_the_moment() {
        let mut c = Collector::new(PidFilter::All);
        // Arrives before the mapping it needs, but is later in time.
        sample(&mut c, 200, 10, 10, 1000, &[0x40_0010, 0x40_0100], &[]);
        c.handle_mmap2(mmap(100, 10, "/nonexistent/a"));
        c.handle_sideband(SidebandEvent::Comm { time: 300, pid: 10, tid: 10, name: "b".into(), exec: true });
        c.handle_mmap2(mmap(301, 10, "/nonexistent/b"));
        sample(&mut c, 400, 10, 10, 3000, &[0x40_0010, 0x40_0100], &[0xffff_ffff_8100_0010]);
        c.handle_sideband(SidebandEvent::Fork { time: 500, pid: 11, ppid: 10, tid: 11 });
        sample(&mut c, 600, 11, 11, 5000, &[0x40_0020], &[]);
        c.handle_sideband(SidebandEvent::Exit { time: 700, pid: 11, tid: 11 });
        let r = c.finish(0, 0.0, 1000, 1.0);

        let a = "/nonexistent/a".to_string();
        let b = "/nonexistent/b".to_string();
        assert_eq!(frames_of(&r, 10, 10, 0), vec![(a.clone(), 0x20ff), (a, 0x2010)]);
        let after_exec = frames_of(&r, 10, 10, 1);
        // In a kernel-mode sample the user "leaf" is where the syscall returns
        // to, so it is looked up one byte back like any return address.
        assert_eq!(after_exec[..2], [(b.clone(), 0x20ff), (b.clone(), 0x200f)]);
        assert!(r.frames[r.stacks.key(r.processes[0].threads[0].samples.stack[1]) as usize].kernel);
        assert_eq!(frames_of(&r, 11, 11, 0), vec![(b, 0x2020)]);

        let p10 = r.processes.iter().find(|p| p.pid == 10).unwrap();
        assert_eq!(p10.name, "b", "named by the exec'd executable");
        let p11 = r.processes.iter().find(|p| p.pid == 11).unwrap();
        assert_eq!((p11.start_ns, p11.end_ns), (Some(500), Some(700)));
        // Thread 10 had no baseline: first delta 0, then the difference.
        assert_eq!(p10.threads[0].samples.cpu_delta_ns, vec![0, 2000]);
        // Thread 11 was forked during the recording: its baseline is 0.
        assert_eq!(p11.threads[0].samples.cpu_delta_ns, vec![5000]);
        assert!(r.warnings.iter().any(|w| w.contains("/nonexistent/a")), "{:?}", r.warnings);
    }

    /// Check that a Tree filter keeps the root and the processes it forks,
    /// and nothing else.
    #[test]
    fn tree_filter_follows_forks() {
        let mut c = Collector::new(PidFilter::Tree(vec![20]));
        sample(&mut c, 100, 20, 20, 0, &[0x1234], &[]);
        sample(&mut c, 100, 30, 30, 0, &[0x1234], &[]);
        c.handle_sideband(SidebandEvent::Fork { time: 150, pid: 21, ppid: 20, tid: 21 });
        c.handle_sideband(SidebandEvent::Fork { time: 150, pid: 31, ppid: 30, tid: 31 });
        sample(&mut c, 200, 21, 21, 0, &[0x1234], &[]);
        sample(&mut c, 200, 31, 31, 0, &[0x1234], &[]);
        let r = c.finish(0, 0.0, 1000, 1.0);
        let pids: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![20, 21]);
    }
}
