//! The collector: raw kernel records in, one [`Recording`] per window out.
//!
//! While recording, one `handle_*` per record kind stores what arrives in
//! the current window: samples as columns with their raw stacks interned in
//! a prefix tree (no allocation per sample once the tree is warm), sideband
//! events in a list, scheduler and I/O records with their stacks resolved
//! from the thread's recent stack records ([`stacks`]). Every mapped binary
//! is opened as soon as it is mapped ([`crate::binaries`]), and
//! user stacks copied by the kernel are unwound as they arrive.
//!
//! [`Collector::finish_window`] replays the window ([`replay`], [`sched`]):
//! samples, intervals and requests merged with the sideband in time order,
//! so each stack is resolved with the mappings its process had at that
//! moment; then it symbolicates each distinct frame once ([`symbolicate`])
//! and returns the window as a [`Recording`]. What outlives a window stays:
//! processes and their mappings ([`process`]), open binaries, unwinders,
//! recent stacks of live threads. `record` finishes one window at the end;
//! the agent finishes one every `--window` seconds.

mod process;
mod replay;
mod sched;
mod stacks;
mod symbolicate;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::bpf::abi::{
    self, EventRecord, FoldedEvent, IoEvent, OffCpuEvent, SampleView, StackEvent, StackView, ThreadEndEvent,
    ThreadState as KernelThreadState, SAMPLE_FLAG_KSTACK_FAILED, SAMPLE_FLAG_USTACK_FAILED, STACK_KSTACK_FAILED,
    STACK_USTACK_FAILED, TASK_COMM_LEN,
};
use crate::sideband::proc_snapshot::ProcSnapshot;
use crate::sideband::{MmapEvent, SidebandEvent};
use crate::binaries::{BinaryIndex, Binaries};
use crate::symbolize::kernel::{InterruptKind, KernelSymbols};
use crate::bpf::abi::{KernelUnwound, Regs, UserStack};
use crate::model::stack_end::StackEnd;
use crate::unwind::Unwinders;
use process::{is_anonymous, ProcessTable};
use crate::model::recording::*;
use replay::{Replay, ThreadData};
use sched::{FoldedRecord, IoRecord, OffCpuRecord};
use crate::model::stack_tree::{NodeIndex, StackTree, NO_PARENT};
use stacks::{StoredStack, ThreadStacks};

/// Ends a user stack in `out` with the raw key of its cut ([`StackEnd::raw_key`]:
/// placed at the root end, where no code lives), nothing for a whole stack.
fn push_cut(out: &mut Vec<u64>, end: StackEnd) {
    out.extend(end.raw_key());
}

/// Kernel addresses on x86_64 and arm64 have the top bit set.
const KERNEL_ADDR_MIN: u64 = 0x8000_0000_0000_0000;

/// How long the agent trusts a process's cgroup as read.
const CGROUP_REFRESH_NS: u64 = 60_000_000_000;
/// Every how many windows the agent looks in /proc for processes whose exit it missed.
const GONE_CHECK_WINDOWS: u64 = 6;

/// Longest the start waits for the running processes' unwind tables.
const KERNEL_TABLES_AT_START: std::time::Duration = std::time::Duration::from_secs(3);

/// Most frames kept of one user stack.
const MAX_USER_FRAMES: usize = 127;

/// Which processes end up in the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidFilter {
    /// Every process (`record -a`).
    All,
    /// These processes and every process they start during the recording.
    Tree(Vec<u32>),
}

/// What the collector makes of what it receives.
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
    /// User stacks arrive as copies to unwind with DWARF (else as addresses).
    pub dwarf: bool,
    /// Keep every process that started in a window, even one without a
    /// sample or event (the agent: short-lived processes are its blind spot).
    pub keep_short_lived: bool,
    /// What reading one binary may cost (the agent reads less DWARF).
    pub elf_limits: crate::binaries::elf::ElfLimits,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        CollectorOptions {
            marker_min_ns: 1_000_000,
            per_cpu: false,
            off_cpu: false,
            debuginfod: false,
            dwarf: false,
            keep_short_lived: false,
            elf_limits: Default::default(),
        }
    }
}

/// The time range a window covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRange {
    /// CLOCK_MONOTONIC ns of its start.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns of its end.
    pub end_ns: u64,
    /// Wall clock at `start_ns`, ms since the Unix epoch.
    pub start_wall_ms: f64,
    /// Sampling interval, ms.
    pub interval_ms: f64,
    /// Capture goes on after this window (the agent). Then each record
    /// belongs to the window in which it ends: an interval that began in
    /// an earlier window is kept whole, and what ends after `end_ns` (read
    /// from the rings after the window was cut) is carried into the next
    /// window. Otherwise (a recording) everything is cut to the range.
    pub continuous: bool,
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

/// Everything one window received.
#[derive(Debug, Default)]
struct WindowData {
    samples: SampleColumns,
    /// Raw stacks: a pid root, user addresses outermost first, kernel addresses.
    raw: StackTree,
    /// Latest comm seen in a sample per tid, to name threads whose COMM event we missed.
    sample_comm: FxHashMap<u32, [u8; TASK_COMM_LEN]>,
    sideband: Vec<(SidebandEvent, Option<BinaryIndex>)>,
    off_cpu: Vec<OffCpuRecord>,
    folded: Vec<FoldedRecord>,
    io: Vec<IoRecord>,
    /// Switch totals: of threads that ended (at their end), and of the
    /// live ones at the end of a recording (time u64::MAX).
    switch_totals: Vec<ThreadEndEvent>,
    counters: Vec<CounterRecord>,
    notes: Vec<String>,
    warnings: Vec<String>,
    stats: RecordingStats,
}

/// Order keys of a window's replay.
const ORDER_SAMPLE: u8 = 0;
const ORDER_OFF_CPU: u8 = 1;
const ORDER_IO: u8 = 2;
const ORDER_FOLDED: u8 = 3;

/// Accumulates what is recorded; see the module doc.
pub struct Collector {
    options: CollectorOptions,
    filter: PidFilter,
    window: WindowData,
    // What outlives a window.
    table: ProcessTable,
    binaries: Binaries,
    unwinders: Option<Unwinders>,
    kernel: Arc<KernelSymbols>,
    stacks: ThreadStacks,
    /// jitdump files processes mapped (JITs map them so profilers find them).
    jitdumps: FxHashMap<u32, BinaryIndex>,
    /// cgroup of each process, read when it was first seen.
    cgroups: FxHashMap<u32, (Option<String>, u64)>,
    /// Windows finished, for what is done every few windows.
    windows_finished: u64,
    /// Processes with anonymous executable memory (JIT code): their
    /// (uid, in-namespace pid), read when the mapping was first seen.
    jit_processes: FxHashMap<u32, Option<(u32, u32)>>,
    /// Processes sampled since the last [`Collector::take_recent_pids`].
    recent_pids: FxHashSet<u32>,
    /// Samples received, all windows.
    samples_total: u64,
    /// Names binaries' addresses; its parsed files stay cached between windows.
    symbolicator: crate::symbolize::Symbolicator,
    /// When the symbolizer thread was started (it is restarted hourly, so
    /// what it caches of files long gone is freed).
    symbolicator_since: std::time::Instant,
    /// Names found in earlier windows.
    names: symbolicate::NameCache,
    /// Reused buffer for one unwound stack.
    unwound: Vec<u64>,
    /// Reused buffer for one raw stack.
    scratch: Vec<u64>,
}

impl Collector {
    /// A collector keeping the processes `filter` selects.
    pub fn new(filter: PidFilter, options: CollectorOptions) -> Collector {
        Collector {
            table: ProcessTable::new(&filter),
            options,
            filter,
            window: WindowData::default(),
            binaries: Binaries::new(),
            unwinders: options.dwarf.then(Unwinders::new),
            kernel: Arc::new(KernelSymbols::default()),
            stacks: ThreadStacks::default(),
            jitdumps: FxHashMap::default(),
            cgroups: FxHashMap::default(),
            windows_finished: 0,
            jit_processes: FxHashMap::default(),
            recent_pids: FxHashSet::default(),
            samples_total: 0,
            symbolicator: crate::symbolize::Symbolicator::new(),
            symbolicator_since: std::time::Instant::now(),
            names: symbolicate::NameCache::default(),
            unwound: Vec::with_capacity(128),
            scratch: Vec::with_capacity(256),
        }
    }

    /// The kernel's symbols, read while our BPF programs are loaded: they
    /// cut the tracing path from stacks, tell interrupts from tasks, and
    /// name kernel frames.
    pub fn set_kernel_symbols(&mut self, kernel: Arc<KernelSymbols>) {
        self.kernel = kernel;
    }

    /// Keep `pid` (and what it starts) too: the command `record` started.
    pub fn track(&mut self, pid: u32) {
        if let PidFilter::Tree(pids) = &mut self.filter {
            pids.push(pid);
            self.table.track(pid);
        }
    }

    /// Processes sampled since the previous call (for per-process counters).
    pub fn take_recent_pids(&mut self) -> Vec<u32> {
        self.recent_pids.drain().collect()
    }

    /// Records the current window holds (what its memory grows with).
    pub fn window_records(&self) -> usize {
        let w = &self.window;
        w.sideband.len() + w.samples.time_ns.len() + w.off_cpu.len() + w.io.len() + w.folded.len()
    }

    /// Samples received so far, all windows.
    pub fn sample_count(&self) -> u64 {
        self.samples_total
    }

    /// Processes that already ran at start, from `/proc`.
    pub fn handle_snapshot(&mut self, snapshot: ProcSnapshot) {
        let bins: Vec<Vec<BinaryIndex>> =
            snapshot.processes.iter().map(|p| p.mappings.iter().map(|m| self.binaries.intern(m)).collect()).collect();
        for (p, b) in snapshot.processes.iter().zip(&bins) {
            self.cgroups.insert(p.pid, (p.cgroup.clone(), crate::sys::clock::monotonic_ns()));
            for (m, &binary) in p.mappings.iter().zip(b) {
                if is_anonymous(&m.path) {
                    self.jit_processes.entry(p.pid).or_insert_with(|| crate::binaries::perfmap::process_identity(p.pid));
                }
                if crate::unwind::is_jitdump(&m.path) {
                    self.jitdumps.insert(p.pid, binary);
                }
            }
        }
        if let Some(u) = self.unwinders.as_mut() {
            for (p, b) in snapshot.processes.iter().zip(&bins) {
                for (m, &binary) in p.mappings.iter().zip(b) {
                    u.add_mapping(p.pid, m.start, m.len, m.pgoff, binary);
                    if crate::unwind::is_jitdump(&m.path) {
                        u.add_jitdump(p.pid, binary);
                    }
                }
            }
        }
        self.table.seed(&snapshot, &bins);
    }

    /// A user stack the kernel unwound, into `self.unwound` with a
    /// truncation marker where it stopped early; where the kernel handed over
    /// (the process's tables not loaded yet), the copied rest is unwound here.
    fn unwind_in_kernel(&mut self, pid: u32, k: &KernelUnwound<'_>) {
        self.unwound.clear();
        self.unwound.extend_from_slice(k.frames);
        let Some(u) = self.unwinders.as_mut() else { return };
        u.kernel_walked(pid, k.end);
        // The kernel sends registers and a copy only where it hands over. At
        // an address its entry did not cover: code mapped since, or no code
        // (then the walk ends there, as the kernel said); the leaf is kept.
        let handover =
            k.handover.filter(|(regs, _)| k.end != abi::UNWIND_END_BAD_ADDRESS || k.frames.is_empty() || u.is_code(pid, regs.ip));
        if let Some((regs, stack)) = handover {
            // As deep as the kernel walks: a copy of 32 KiB may hold hundreds of small frames.
            let end = u.unwind(&self.binaries, pid, regs, stack, &mut self.unwound, abi::UNWIND_MAX_FRAMES.max(MAX_USER_FRAMES + k.frames.len()));
            push_cut(&mut self.unwound, end);
            return;
        }
        // A walk that ended in a program's entry function (hand-written
        // `_start` without CFI) reached the bottom whatever it read below.
        let at_entry = k.frames.last().is_some_and(|&a| k.frames.len() > 1 && u.is_entry(pid, a));
        let end = if at_entry { StackEnd::Root } else { StackEnd::from_abi(k.end) };
        // Counted as the copy unwinder counts its own stacks.
        u.count_kernel_end(end);
        push_cut(&mut self.unwound, end);
    }

    /// Whether a kernel stack is a thread's exit (`do_exit`): from there it
    /// never returns to user mode, so the user registers it entered the
    /// kernel with belong to its last system call.
    fn is_exiting(&self, kstack: &[u64]) -> bool {
        kstack.iter().any(|&a| self.kernel.lookup(a).is_some_and(|s| s.name == "do_exit"))
    }

    /// A sample of an exiting thread whose user stack could not be read (its
    /// memory being freed): the stack the thread had at a switch-out with the
    /// same user registers, if one is kept. Only at exit: the registers are
    /// then those of the thread's last system call, and a switch-out with the
    /// same ones was in it (elsewhere two calls from different callers could
    /// share an ip and sp, and the stack would be another call's).
    fn recover_unreadable(&mut self, tid: u32, leaf_regs: Option<Regs>) {
        let Some(regs) = leaf_regs else { return };
        let cut = self.unwound.last().copied() == StackEnd::Unreadable.raw_key();
        if let Some(user) = self.stacks.user_stack_at(tid, regs).filter(|_| cut) {
            self.unwound.clear();
            self.unwound.extend_from_slice(user);
            if let Some(u) = self.unwinders.as_mut() {
                u.recovered_from_switch();
            }
        }
    }

    /// Load the in-kernel unwinder's tables from now on, for every process known.
    pub fn enable_kernel_unwinding(&mut self, maps: crate::unwind::kernel::KernelUnwindMaps) {
        if let Some(u) = self.unwinders.as_mut() {
            u.enable_kernel(maps);
            // The running processes' tables before the first sample (libc's
            // and a hundred more take ~0.3 s on two threads): until then
            // their samples would each hand over a stack copy, a burst the
            // ring cannot hold while the rest of the start runs.
            u.sync_kernel_waiting(&self.binaries, std::time::Instant::now() + KERNEL_TABLES_AT_START);
        }
    }

    /// Bring the in-kernel unwinder's maps up to date with the mappings seen.
    pub fn sync_kernel_unwinding(&mut self) {
        if let Some(u) = self.unwinders.as_mut() {
            u.sync_kernel(&self.binaries);
        }
    }

    /// What the in-kernel unwinder refused, per uid, all time.
    pub fn kernel_refusals(&self) -> Vec<(u32, crate::unwind::kernel::UidRefusals)> {
        self.unwinders.as_ref().map(|u| u.kernel_refusals()).unwrap_or_default()
    }

    /// The in-kernel unwinder's table totals, if it runs.
    pub fn kernel_table_stats(&self) -> Option<crate::unwind::kernel::KernelTableStats> {
        self.unwinders.as_ref().and_then(|u| u.kernel_table_stats())
    }

    /// Unwind a user stack copied by the kernel into `self.unwound`, leaf
    /// first, ending with a truncation marker when it stopped early.
    fn unwind_copy(&mut self, pid: u32, regs: Regs, stack: &[u8]) {
        self.unwound.clear();
        let Some(u) = self.unwinders.as_mut() else { return };
        let end = u.unwind(&self.binaries, pid, regs, stack, &mut self.unwound, MAX_USER_FRAMES);
        push_cut(&mut self.unwound, end);
    }

    /// Intern a raw stack: `pid` root, then the user frames (leaf first in
    /// `user`, stored outermost first), then the kernel frames (leaf first).
    fn intern_raw(raw: &mut StackTree, pid: u32, user: &[u64], kernel: &[u64]) -> NodeIndex {
        let mut node = raw.child(NO_PARENT, pid as u64);
        for &addr in user.iter().rev() {
            if addr != 0 && addr < KERNEL_ADDR_MIN {
                node = raw.child(node, addr);
            }
        }
        for &addr in kernel.iter().rev() {
            if addr >= KERNEL_ADDR_MIN {
                node = raw.child(node, addr);
            }
        }
        node
    }

    /// One cpu-clock sample. Allocation-free once the stack tree holds the stack.
    pub fn handle_sample(&mut self, s: &SampleView<'_>) {
        self.samples_total += 1;
        let w = &mut self.window;
        w.stats.samples += 1;
        if s.flags & SAMPLE_FLAG_KSTACK_FAILED != 0 {
            w.stats.kernel_stack_failures += 1;
        }
        if s.flags & SAMPLE_FLAG_USTACK_FAILED != 0 {
            w.stats.user_stack_failures += 1;
        }
        let node = match s.user {
            UserStack::KernelUnwound(k) => {
                self.unwind_in_kernel(s.pid, &k);
                if StackEnd::from_abi(k.end) == StackEnd::Unreadable && self.is_exiting(s.kstack) {
                    self.recover_unreadable(s.tid, k.leaf);
                }
                Self::intern_raw(&mut self.window.raw, s.pid, &self.unwound, s.kstack)
            }
            UserStack::Copy { regs, stack } if self.unwinders.is_some() => {
                self.unwind_copy(s.pid, regs, stack);
                Self::intern_raw(&mut self.window.raw, s.pid, &self.unwound, s.kstack)
            }
            user => Self::intern_raw(&mut self.window.raw, s.pid, user.frames(), s.kstack),
        };
        let w = &mut self.window;
        w.samples.time_ns.push(s.time_ns);
        w.samples.pid.push(s.pid);
        w.samples.tid.push(s.tid);
        w.samples.cpu.push(s.cpu);
        w.samples.runtime_ns.push(s.sum_exec_runtime);
        w.samples.raw_stack.push(node);
        self.recent_pids.insert(s.pid);
        let mut comm = [0u8; TASK_COMM_LEN];
        comm[..s.comm.len()].copy_from_slice(s.comm);
        if w.sample_comm.get(&s.tid) != Some(&comm) {
            w.sample_comm.insert(s.tid, comm);
        }
    }

    /// One record of the scheduler/I-O tracer's ring.
    pub fn handle_event(&mut self, e: EventRecord<'_>) {
        match e {
            EventRecord::Stack(e, view) => self.handle_stack(e, view),
            EventRecord::OffCpu(e) => self.handle_offcpu(e),
            EventRecord::Io(e) => self.handle_io(e),
            EventRecord::Folded(e) => self.handle_folded(e),
            EventRecord::ThreadEnd(e) => self.handle_thread_end(e),
        }
    }

    /// A thread's stacks at one place: unwound now (with the mappings its
    /// process has now), the tracing path cut, kept for the events to come.
    fn handle_stack(&mut self, e: &StackEvent, view: StackView<'_>) {
        self.window.stats.stack_records += 1;
        if e.flags & (STACK_KSTACK_FAILED | STACK_USTACK_FAILED) != 0 {
            self.window.stats.stack_read_failures += 1;
        }
        let user: Box<[u64]> = match view.user {
            UserStack::KernelUnwound(k) => {
                // The tracer's walks hand nothing over: what the kernel walked is the stack.
                self.unwind_in_kernel(e.pid, &k);
                self.unwound.as_slice().into()
            }
            UserStack::Copy { regs, stack } => {
                self.unwind_copy(e.pid, regs, stack);
                self.unwound.as_slice().into()
            }
            UserStack::Frames(frames) => frames.into(),
        };
        let kernel: Box<[u64]> = self.kernel.cut_tracing(view.kstack).into();
        let interrupt = self.kernel.interrupt_part(&kernel);
        let user_regs = Regs { ip: e.user_ip, sp: e.user_sp, bp: e.user_bp };
        self.stacks.insert(e.tid, e.slot, StoredStack { id: e.id, user, kernel, user_regs, interrupt, interned: Default::default() });
    }

    /// The raw stack of stack record `id` of `tid`, interned under `pid`;
    /// a "not available" frame when the record was lost (id 0) or is no
    /// longer kept (counted).
    fn stack_ref(&mut self, pid: u32, tid: u32, id: u64) -> NodeIndex {
        match self.stacks.get(tid, id) {
            Some(s) => match s.interned.get() {
                Some((w, p, node)) if w == self.windows_finished && p == pid => node,
                _ => {
                    let node = Self::intern_raw(&mut self.window.raw, pid, &s.user, &s.kernel);
                    s.interned.set(Some((self.windows_finished, pid, node)));
                    node
                }
            },
            None => {
                if id != 0 {
                    self.window.stats.stacks_not_kept += 1;
                }
                let root = self.window.raw.child(NO_PARENT, pid as u64);
                self.window.raw.child(root, StackEnd::NotAvailable.raw_key().expect("a cut"))
            }
        }
    }

    /// One off-CPU interval.
    pub fn handle_offcpu(&mut self, e: &OffCpuEvent) {
        self.window.stats.off_cpu_intervals += 1;
        if e.flags & abi::OFFCPU_END_INFERRED != 0 {
            self.window.stats.off_cpu_end_inferred += 1;
        }
        let stack = self.stack_ref(e.pid, e.tid, e.stack_id);
        let waker = if e.wake_ns == 0 {
            None
        } else {
            let stored = self.stacks.get(e.waker_tid, e.waker_stack_id);
            let interrupt = stored.and_then(|s| s.interrupt);
            let waker = Waker {
                pid: e.waker_pid,
                tid: e.waker_tid,
                name: abi::comm_str(&e.waker_comm),
                // Only the stack tells an interrupt from the task it
                // interrupted (one that arrives in user mode runs on the
                // task's stack): without it, say so rather than "task".
                interrupt: if stored.is_none() { Some(InterruptKind::Unknown) } else { interrupt.map(|(kind, _)| kind) },
            };
            let node = match (stored, interrupt) {
                // An interrupt's stack is its own frames only: below its
                // entry lies whatever task it happened to interrupt.
                (Some(s), Some((_, end))) => {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(&s.kernel[..end]);
                    Self::intern_raw(&mut self.window.raw, e.waker_pid, &[], &self.scratch)
                }
                _ => self.stack_ref(e.waker_pid, e.waker_tid, e.waker_stack_id),
            };
            Some((waker, node))
        };
        self.window.off_cpu.push(OffCpuRecord {
            start_ns: e.start_ns,
            end_ns: e.end_ns,
            wake_ns: e.wake_ns,
            pid: e.pid,
            tid: e.tid,
            cpu_out: e.cpu_out,
            cpu_in: e.cpu_in,
            reason: OffCpuReason::from_abi(e.state),
            stack,
            waker,
            comm: e.comm,
        });
    }

    /// One block I/O request.
    pub fn handle_io(&mut self, e: &IoEvent) {
        self.window.stats.io_requests += 1;
        let stack = self.stack_ref(e.pid, e.tid, e.stack_id);
        self.window.io.push(IoRecord {
            pid: e.pid,
            tid: e.tid,
            dev: e.dev,
            sector: e.sector,
            start_ns: e.start_ns,
            issue_ns: e.issue_ns,
            done_ns: e.done_ns,
            bytes: e.bytes,
            error: e.error,
            op: IoOp::from_abi(e.op),
            flags: e.flags,
            stack,
        });
    }

    /// Short off-CPU waits of a thread, summed per reason.
    pub fn handle_folded(&mut self, e: &FoldedEvent) {
        self.window.stats.off_cpu_folded += e.count.iter().map(|&c| c as u64).sum::<u64>();
        self.window.folded.push(FoldedRecord { pid: e.pid, tid: e.tid, last_ns: e.last_ns, ns: e.ns });
    }

    /// A thread's last switch, with its switch totals.
    pub fn handle_thread_end(&mut self, e: &ThreadEndEvent) {
        self.window.switch_totals.push(*e);
        self.stacks.thread_ended(e.tid, e.time_ns);
    }

    /// The tracer's per-thread states at the end of a recording: switch
    /// totals of the live threads, their folded waits not sent yet, and
    /// their intervals still open at `end_ns` (closed there, so off-CPU
    /// time adds up).
    pub fn handle_thread_states(&mut self, states: &[(u32, KernelThreadState)], end_ns: u64) {
        for (tid, st) in states {
            self.window.switch_totals.push(ThreadEndEvent {
                kind: abi::RECORD_THREAD_END,
                pid: st.pid,
                tid: *tid,
                _pad: 0,
                time_ns: u64::MAX,
                voluntary: st.voluntary,
                involuntary: st.involuntary,
            });
            if st.short_count.iter().any(|&c| c > 0) {
                self.handle_folded(&FoldedEvent {
                    kind: abi::RECORD_FOLDED,
                    pid: st.pid,
                    tid: *tid,
                    _pad: 0,
                    first_ns: st.short_first,
                    last_ns: st.short_last.min(end_ns),
                    ns: st.short_ns,
                    count: st.short_count,
                });
            }
            if st.off_ts != 0 && st.off_ts < end_ns {
                let waker = st.wake_ts >= st.off_ts && st.wake_ts != 0;
                self.handle_offcpu(&OffCpuEvent {
                    kind: abi::RECORD_OFFCPU,
                    state: st.off_state,
                    start_ns: st.off_ts,
                    end_ns,
                    wake_ns: if waker { st.wake_ts } else { 0 },
                    pid: st.pid,
                    tid: *tid,
                    cpu_out: st.off_cpu,
                    cpu_in: st.off_cpu,
                    waker_pid: if waker { st.waker_pid } else { 0 },
                    waker_tid: if waker { st.waker_tid } else { 0 },
                    stack_id: st.stack_id,
                    waker_stack_id: if waker { st.waker_stack_id } else { 0 },
                    comm: [0; TASK_COMM_LEN],
                    waker_comm: st.waker_comm,
                    flags: 0,
                    _pad: 0,
                });
            }
        }
    }

    /// One sideband event.
    pub fn handle_sideband(&mut self, e: SidebandEvent) {
        // A new process: note its cgroup while it runs (it may be gone by
        // the end). A child starts in its parent's cgroup: take the parent's
        // when known (a fork storm would otherwise cost a /proc read each).
        if let SidebandEvent::Fork { pid, ppid, tid, .. } = &e {
            if pid != ppid && tid == pid {
                let inherited = self.cgroups.get(ppid).cloned();
                let entry = inherited.unwrap_or_else(|| (crate::sideband::proc_snapshot::read_cgroup(*pid), crate::sys::clock::monotonic_ns()));
                self.cgroups.insert(*pid, entry);
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
            other => self.window.sideband.push((other, None)),
        }
    }

    /// An executable mapping: open its file now, while the process lives.
    fn handle_mmap2(&mut self, m: MmapEvent) {
        let binary = self.binaries.intern(&m);
        if is_anonymous(&m.path) {
            self.jit_processes.entry(m.pid).or_insert_with(|| crate::binaries::perfmap::process_identity(m.pid));
        }
        let jitdump = crate::unwind::is_jitdump(&m.path);
        if jitdump {
            self.jitdumps.insert(m.pid, binary);
        }
        if let Some(u) = self.unwinders.as_mut() {
            u.add_mapping(m.pid, m.start, m.len, m.pgoff, binary);
            if jitdump {
                u.add_jitdump(m.pid, binary);
            }
        }
        self.window.sideband.push((SidebandEvent::Mmap(m), Some(binary)));
    }

    /// Counter tracks polled during the window.
    pub fn handle_counters(&mut self, counters: Vec<CounterRecord>) {
        self.window.counters.extend(counters);
    }

    /// A note for the profile's log.
    pub fn note(&mut self, n: String) {
        self.window.notes.push(n);
    }

    /// A warning to show at the end and keep in the profile.
    pub fn warn(&mut self, w: String) {
        if !self.window.warnings.contains(&w) {
            self.window.warnings.push(w);
        }
    }

    /// What was lost outside the collector: samples (sampler ring full),
    /// sideband records, undecodable records, and the tracer's losses.
    pub fn handle_losses(&mut self, lost_samples: u64, lost_sideband: u64, malformed: u64, tracer: crate::bpf::TracerDrops) {
        let s = &mut self.window.stats;
        s.lost_samples += lost_samples;
        s.lost_sideband += lost_sideband;
        s.malformed += malformed;
        s.lost_events += tracer.events_full;
        s.lost_stacks += tracer.stack_records;
        s.stack_read_failures += tracer.stack_reads;
        s.lost_state += tracer.state_full;
        s.io_untracked += tracer.io_untracked;
    }

    /// Replay, symbolicate and return the window's recording; what outlives
    /// the window stays for the next one.
    pub fn finish_window(&mut self, range: WindowRange) -> Recording {
        if std::env::var_os("SYSPROF_DEBUG_SIZES").is_some() {
            eprintln!(
                "sizes: sideband {} (event {} B), samples {}, raw nodes {}, off_cpu {}, folded {}, io {}, table {} processes / {} threads / {} mappings, binaries {}, cgroups {}, stacks {:?}",
                self.window.sideband.len(),
                std::mem::size_of::<(SidebandEvent, Option<BinaryIndex>)>(),
                self.window.samples.time_ns.len(),
                self.window.raw.len(),
                self.window.off_cpu.len(),
                self.window.folded.len(),
                self.window.io.len(),
                self.table.processes.len(),
                self.table.processes.values().map(|p| p.threads.len()).sum::<usize>(),
                self.table.processes.values().map(|p| p.mappings.len()).sum::<usize>(),
                self.binaries.open_count(),
                self.cgroups.len(),
                self.stacks.sizes(),
            );
        }
        let mut w = std::mem::take(&mut self.window);
        let mut replay = Replay::new(&mut self.table);

        // Merge sideband and data in time order. At equal times, sideband
        // first: a mapping reported at t serves a sample at t.
        w.sideband.sort_by_key(|(e, _)| e.time());
        if range.continuous {
            // What ended after the cut is the next window's.
            self.window = carry_late(&mut w, range.end_ns);
        }
        let inside = |t: u64| t <= range.end_ns && (range.continuous || t >= range.start_ns);
        let mut order: Vec<(u64, u8, u32)> = Vec::with_capacity(w.samples.time_ns.len() + w.off_cpu.len() + w.io.len() + w.folded.len());
        order.extend(w.samples.time_ns.iter().enumerate().filter(|(_, &t)| inside(t)).map(|(i, &t)| (t, ORDER_SAMPLE, i as u32)));
        // A recording's intervals are clipped to its range (one still open
        // at the end was closed there); requests must have completed in it.
        if !range.continuous {
            for o in &mut w.off_cpu {
                o.end_ns = o.end_ns.min(range.end_ns);
                o.start_ns = o.start_ns.max(range.start_ns);
            }
        }
        order.extend(w.off_cpu.iter().enumerate().filter(|(_, o)| o.start_ns < o.end_ns).map(|(i, o)| (o.start_ns, ORDER_OFF_CPU, i as u32)));
        order.extend(w.io.iter().enumerate().filter(|(_, e)| inside(e.done_ns) && inside(e.start_ns)).map(|(i, e)| (e.start_ns, ORDER_IO, i as u32)));
        order.extend(w.folded.iter().enumerate().filter(|(_, f)| inside(f.last_ns)).map(|(i, f)| (f.last_ns, ORDER_FOLDED, i as u32)));
        order.sort_unstable();
        let mut side = w.sideband.iter().peekable();
        for &(t, kind, i) in &order {
            while let Some((e, b)) = side.next_if(|(e, _)| e.time() <= t) {
                replay.table.apply(e, *b);
            }
            match kind {
                ORDER_SAMPLE => replay.sample(&w, i as usize),
                ORDER_OFF_CPU => replay.off_cpu(&w, &w.off_cpu[i as usize], self.options.marker_min_ns),
                ORDER_IO => replay.io(&w, &w.io[i as usize]),
                _ => replay.folded(&w.folded[i as usize]),
            }
        }
        for (e, b) in side {
            replay.table.apply(e, *b);
        }
        // After the sideband: a thread's state is the one its fork made.
        for e in &w.switch_totals {
            replay.table.process(e.pid).thread(e.tid).switches = Some((e.voluntary, e.involuntary));
        }
        let cpu_tracks = if self.options.per_cpu { replay.cpu_tracks(&w, &order, range.interval_ms) } else { Vec::new() };

        let Replay { frame_keys, stacks, threads, .. } = replay;
        let mut warnings = std::mem::take(&mut w.warnings);
        if let Some(u) = self.unwinders.as_mut() {
            w.stats.unwind = u.take_stats();
            warnings.extend(u.take_warnings());
        }
        let jit = symbolicate::JitSources { processes: &self.jit_processes, dumps: &self.jitdumps };
        let (libs, frames) = symbolicate::symbolicate(
            &mut self.binaries,
            &mut self.symbolicator,
            &mut self.names,
            &self.kernel,
            &frame_keys,
            &jit,
            self.options.debuginfod,
            self.options.elf_limits,
            &mut warnings,
        );
        let processes = self.window_processes(threads, &w.sample_comm, &range);
        let reported: FxHashSet<u32> = processes.iter().map(|p| p.pid).collect();
        w.stats.processes_without_data = self
            .table
            .processes
            .iter()
            .filter(|(pid, p)| p.tracked && p.start_ns.is_some() && p.end_ns.is_some() && !reported.contains(pid))
            .count() as u64;
        w.stats.samples_kept = processes.iter().flat_map(|p| &p.threads).map(|t| t.samples.time_ns.len() as u64).sum();

        // A new window's raw stacks start from an empty tree.
        self.windows_finished += 1;
        // What ended in this window has been reported: forget it.
        self.table.prune(range.end_ns);
        self.stacks.prune(range.end_ns);
        if range.continuous {
            self.forget_the_gone(range.end_ns);
        }
        Recording {
            counters: w.counters,
            cpu_tracks,
            off_cpu: self.options.off_cpu,
            notes: w.notes,
            start_ns: range.start_ns,
            start_wall_ms: range.start_wall_ms,
            end_ns: range.end_ns,
            interval_ms: range.interval_ms,
            processes,
            libs,
            frames,
            stacks,
            stats: w.stats,
            warnings,
        }
    }

    /// Between the agent's windows: whatever belongs to processes that are
    /// gone goes, so memory follows what runs now, not what ever ran.
    /// Processes whose exit was never seen (sideband lost) are found by
    /// their absence from `/proc` and ended (reported by the next window);
    /// binaries no live process maps are closed, with their unwind data
    /// and names; per-pid side tables follow the process table.
    fn forget_the_gone(&mut self, now_ns: u64) {
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
    fn cgroup_now(&self, pid: u32, range: &WindowRange) -> Option<String> {
        let cached = self.cgroups.get(&pid);
        let fresh = cached.is_some_and(|(_, at)| range.continuous && range.end_ns.saturating_sub(*at) < CGROUP_REFRESH_NS);
        if fresh {
            return cached.and_then(|c| c.0.clone());
        }
        crate::sideband::proc_snapshot::read_cgroup(pid).or_else(|| cached.and_then(|c| c.0.clone()))
    }

    /// The window's processes: those with data, and with a pid filter every
    /// thread of the chosen processes (an idle thread is worth seeing there);
    /// main thread first, sorted by pid and tid.
    fn window_processes(&self, mut threads: FxHashMap<(u32, u32), ThreadData>, sample_comm: &FxHashMap<u32, [u8; TASK_COMM_LEN]>, range: &WindowRange) -> Vec<ProcessRecord> {
        let keep_idle = matches!(self.filter, PidFilter::Tree(_));
        let in_window = |t: Option<u64>| t.is_some_and(|t| t >= range.start_ns && t <= range.end_ns);
        let mut out = Vec::new();
        for (&pid, p) in &self.table.processes {
            if !p.tracked && !matches!(self.filter, PidFilter::All) {
                continue;
            }
            let mut list: Vec<ThreadRecord> = Vec::new();
            let mut tids: Vec<u32> = p.threads.keys().copied().collect();
            tids.extend(threads.keys().filter(|(tp, _)| *tp == pid).map(|&(_, t)| t));
            tids.sort_unstable();
            tids.dedup();
            for tid in tids {
                let data = threads.remove(&(pid, tid));
                let state = p.threads.get(&tid);
                let seen = data.is_some();
                let started_here = state.is_some_and(|t| t.start_ns.is_some());
                // A process that started or ended in this window is kept
                // even without a sample or event (its main thread, with its
                // lifetime): processes that live a few milliseconds are the
                // ones sampling misses, and knowing they ran is worth a
                // track. Ended counts too: one forked just before a cut and
                // exec'd after it has its name only in the later window.
                let short_lived = self.options.keep_short_lived && tid == pid && (in_window(p.start_ns) || in_window(p.end_ns));
                if !seen && !short_lived && !(keep_idle && (started_here || matches!(&self.filter, PidFilter::Tree(r) if r.contains(&pid)))) {
                    continue;
                }
                let mut data = data.unwrap_or_default();
                sort_off_cpu(&mut data.off_cpu);
                let mut name = state.map(|t| t.name.clone()).unwrap_or_default();
                if name.is_empty() {
                    name = sample_comm.get(&tid).map(|c| abi::comm_str(c)).unwrap_or_default();
                }
                list.push(ThreadRecord {
                    tid,
                    name,
                    start_ns: state.and_then(|t| t.start_ns),
                    end_ns: state.and_then(|t| t.end_ns),
                    samples: data.samples,
                    off_cpu: data.off_cpu,
                    markers: data.markers,
                    switches: state.and_then(|t| t.switches),
                });
            }
            if list.is_empty() {
                continue;
            }
            list.sort_by_key(|t| (t.tid != pid, t.tid));
            let mut name = p.display_name(pid);
            if p.comm.is_empty() {
                if let Some(c) = sample_comm.get(&pid) {
                    name = abi::comm_str(c);
                }
            }
            out.push(ProcessRecord {
                pid,
                name,
                exe: p.exe.clone(),
                cmdline: p.cmdline.clone(),
                start_ns: p.start_ns,
                end_ns: p.end_ns,
                // Containers move processes after they start: the latest word wins.
                cgroup: self.cgroup_now(pid, range),
                profiler: pid == std::process::id(),
                threads: list,
            });
        }
        out.sort_by_key(|p| p.pid);
        out
    }
}

/// Move what ended after `end_ns` out of `w` into a new window: samples
/// taken after it, intervals and requests that ended after it, folded
/// waits reported after it, with their raw stacks re-interned.
fn carry_late(w: &mut WindowData, end_ns: u64) -> WindowData {
    let mut next = WindowData::default();
    let mut path = Vec::new();
    let mut move_node = |raw: &StackTree, next_raw: &mut StackTree, node: NodeIndex| -> NodeIndex {
        if node == NO_PARENT {
            return NO_PARENT;
        }
        raw.path(node, &mut path);
        path.iter().fold(NO_PARENT, |p, &k| next_raw.child(p, k))
    };
    let s = &w.samples;
    let late: Vec<usize> = (0..s.time_ns.len()).filter(|&i| s.time_ns[i] > end_ns).collect();
    if !late.is_empty() {
        for &i in &late {
            let n = &mut next.samples;
            n.time_ns.push(s.time_ns[i]);
            n.pid.push(s.pid[i]);
            n.tid.push(s.tid[i]);
            n.cpu.push(s.cpu[i]);
            n.runtime_ns.push(s.runtime_ns[i]);
            n.raw_stack.push(move_node(&w.raw, &mut next.raw, s.raw_stack[i]));
        }
        // Out of this window's replay: its filter drops samples after the end.
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.off_cpu).into_iter().partition(|o| o.end_ns <= end_ns);
    w.off_cpu = keep;
    for mut o in late {
        o.stack = move_node(&w.raw, &mut next.raw, o.stack);
        if let Some((_, node)) = o.waker.as_mut() {
            *node = move_node(&w.raw, &mut next.raw, *node);
        }
        next.off_cpu.push(o);
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.io).into_iter().partition(|e| e.done_ns <= end_ns);
    w.io = keep;
    for mut e in late {
        e.stack = move_node(&w.raw, &mut next.raw, e.stack);
        next.io.push(e);
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.folded).into_iter().partition(|f| f.last_ns <= end_ns);
    w.folded = keep;
    next.folded = late;
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.switch_totals).into_iter().partition(|e| e.time_ns <= end_ns);
    w.switch_totals = keep;
    next.switch_totals = late;
    next.sample_comm = w.sample_comm.clone();
    next
}

/// Off-CPU samples arrive in interval start order, folded totals at their
/// end; the profile needs them sorted by time.
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

#[cfg(test)]
mod tests;
