//! The collector: raw kernel records in, one [`Recording`] per window out.
//!
//! While recording, one `handle_*` per record kind stores what arrives in
//! the current window: samples as columns with their raw stacks interned in
//! a prefix tree (no allocation per sample once the tree is warm), sideband
//! events in a list (and, as each arrives, what is kept of its process
//! beside the replay and the unwinders told, in one place: [`live`]),
//! scheduler and I/O records with their stacks resolved
//! from the thread's recent stack records ([`stacks`]). Every mapped binary
//! is opened as soon as it is mapped ([`crate::binaries`]), and
//! user stacks copied by the kernel are unwound as they arrive (the
//! in-kernel unwinder's tables fed by [`kernel_unwinding`]). What the
//! collector is asked for is [`options`].
//!
//! [`Collector::finish_window`] ([`window`]) replays the window ([`replay`], [`sched`]):
//! samples, intervals and requests merged with the sideband in time order,
//! so each stack is resolved with the mappings its process had at that
//! moment; then it symbolicates each distinct frame once ([`symbolicate`])
//! and returns the window as a [`Recording`]. What outlives a window stays:
//! processes and their mappings ([`process`]), open binaries, unwinders,
//! recent stacks of live threads; the agent lets go of what belongs to
//! processes that are gone ([`live`]). `record` finishes one window at the
//! end; the agent finishes one every `--window` seconds.

mod jit_names;
mod kernel_unwinding;
mod live;
mod options;
mod process;
mod replay;
mod sched;
mod stacks;
mod symbolicate;
mod window;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::binaries::{Binaries, BinaryIndex};
use crate::bpf::abi::{
    self, EventRecord, FoldedEvent, IoEvent, OffCpuEvent, SampleView, StackEvent, StackView,
    ThreadEndEvent, ThreadState as KernelThreadState, SAMPLE_FLAG_KSTACK_FAILED,
    SAMPLE_FLAG_USTACK_FAILED, STACK_KSTACK_FAILED, STACK_USTACK_FAILED, TASK_COMM_LEN,
};
use crate::bpf::abi::{KernelUnwound, Regs, UserStack};
use crate::model::recording::*;
use crate::model::stack_end::StackEnd;
use crate::model::stack_tree::{NodeIndex, StackTree, NO_PARENT};
use crate::runtimes::frames::{self, KERNEL_ADDR_MIN};
use crate::runtimes::{Merged, RuntimeReaders, Runtimes};
use crate::sideband::proc_snapshot::ProcSnapshot;
#[cfg(test)]
use crate::sideband::MmapEvent;
use crate::sideband::SidebandEvent;
use crate::symbolize::kernel::{InterruptKind, KernelSymbols};
use crate::unwind::Unwinders;
pub use options::{CollectorOptions, PidFilter, WindowRange};
use process::ProcessTable;
use sched::{FoldedRecord, IoRecord, OffCpuRecord};
use stacks::{StoredStack, ThreadStacks};
use window::WindowData;

/// A task's CPU time exactly at a sample, shifted by a constant: the
/// scheduler brings `sum_exec_runtime` up to date only at a tick or a switch
/// (every 4 ms at HZ=250 for a thread that runs on), so read as is, a
/// running thread's deltas would be 0, 0, 0, 4 ms. It has run without a break
/// since `exec_start` (set at each update and when it last came on the CPU),
/// so its exact CPU time is `sum_exec_runtime + (now - exec_start)`, the
/// difference taken on the scheduler's clock. The sample's time is on
/// CLOCK_MONOTONIC, which differs from that clock by an offset that is the
/// same for every sample of a recording (up to the clocks' rate difference,
/// parts per million): that offset cancels in the difference of two samples,
/// which is all a CPU delta needs. Wrapping: the offset can have either sign.
pub(crate) fn runtime_clock(sum_exec_runtime: u64, exec_start: u64, time_ns: u64) -> u64 {
    sum_exec_runtime
        .wrapping_add(time_ns)
        .wrapping_sub(exec_start)
}

/// Ends a user stack in `out` with the raw key of its cut ([`StackEnd::raw_key`]:
/// placed at the root end, where no code lives), nothing for a whole stack.
fn push_cut(out: &mut Vec<u64>, end: StackEnd) {
    out.extend(end.raw_key());
}

/// Most frames kept of one user stack.
const MAX_USER_FRAMES: usize = 127;

/// Accumulates what is recorded; see the module doc.
pub struct Collector {
    options: CollectorOptions,
    filter: PidFilter,
    window: WindowData,
    // What outlives a window.
    table: ProcessTable,
    binaries: Binaries,
    unwinders: Option<Unwinders<Runtimes>>,
    kernel: Arc<KernelSymbols>,
    stacks: ThreadStacks,
    /// Windows finished, for what is done every few windows.
    windows_finished: u64,
    /// When the tracer was attached (sampling starts before it), and each
    /// thread's last sample before then: a thread the tracer first sees
    /// off the CPU left it after its last sample, not at its creation.
    tracing_start_ns: Option<u64>,
    /// Where the recording's range starts: every CPU sampled from here.
    range_start_ns: u64,
    sampled_before_tracing: FxHashMap<u32, u64>,
    /// Shared stacks of processes that are gone, for the tracer to delete
    /// from the kernel's table (`take_forgotten_stacks`).
    shared_stacks_forgotten: Vec<u64>,
    /// The first window's start: nothing the collector reports begins
    /// before it (the tracer runs a moment before the recording starts).
    first_start_ns: Option<u64>,
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
    /// What the runtimes read from processes to name their frames.
    readers: RuntimeReaders,
    /// Reused table for one stack record's runtime frames.
    record_frames: frames::RuntimeFrames,
    /// When Python threads' names were last read (a monotonic ns).
    py_thread_names_at: u64,
    /// Reused buffer for a stack with its runtimes' frames.
    merged: Vec<u64>,
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
            windows_finished: 0,
            shared_stacks_forgotten: Vec::new(),
            tracing_start_ns: None,
            range_start_ns: 0,
            sampled_before_tracing: FxHashMap::default(),
            first_start_ns: None,
            recent_pids: FxHashSet::default(),
            samples_total: 0,
            symbolicator: crate::symbolize::Symbolicator::new(),
            symbolicator_since: std::time::Instant::now(),
            names: symbolicate::NameCache::default(),
            unwound: Vec::with_capacity(128),
            scratch: Vec::with_capacity(256),
            readers: RuntimeReaders::default(),
            record_frames: frames::RuntimeFrames::default(),
            py_thread_names_at: 0,
            merged: Vec::with_capacity(128),
        }
    }

    /// The kernel's symbols, read while our BPF programs are loaded: they
    /// cut the tracing path from stacks, tell interrupts from tasks, and
    /// name kernel frames.
    pub fn set_kernel_symbols(&mut self, kernel: Arc<KernelSymbols>) {
        self.kernel = kernel;
    }

    /// Sampling has begun on every CPU, and the recording's range with it at
    /// `range_start_ns`: samples taken before (by a CPU attached earlier)
    /// are counted as decoded and not kept. The CPU bases of the threads
    /// that ran before are read again (see
    /// [`process::ProcessTable::rebase_cpu_times`]).
    pub fn sampling_started(&mut self, range_start_ns: u64) {
        self.range_start_ns = range_start_ns;
        self.table
            .rebase_cpu_times(crate::sideband::proc_snapshot::thread_cpu_ns);
    }

    /// The tracer was attached at `time_ns` (sampling began before it).
    pub fn tracing_started(&mut self, time_ns: u64) {
        self.tracing_start_ns = Some(time_ns);
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
        let bins: Vec<Vec<BinaryIndex>> = snapshot
            .processes
            .iter()
            .map(|p| p.mappings.iter().map(|m| self.binaries.intern(m)).collect())
            .collect();
        self.table.seed(&snapshot, &bins);
        for (p, b) in snapshot.processes.iter().zip(&bins) {
            self.table.live(p.pid).cgroup =
                Some((p.cgroup.clone(), crate::sys::clock::monotonic_ns()));
            for (m, &binary) in p.mappings.iter().zip(b) {
                self.mapped(p.pid, m.start, m.len, m.pgoff, &m.path, binary);
            }
        }
    }

    /// A user stack the kernel unwound, into `self.unwound` with a
    /// truncation marker where it stopped early; where the kernel handed over
    /// (the process's tables not loaded yet), the copied rest is unwound here.
    fn unwind_in_kernel(&mut self, pid: u32, k: &KernelUnwound<'_>) {
        self.unwound.clear();
        self.unwound.extend_from_slice(k.frames);
        let Some(u) = self.unwinders.as_mut() else {
            return;
        };
        u.kernel_walked(pid, k.end);
        // The kernel sends registers and a copy only where it hands over. At
        // an address its entry did not cover: code mapped since, or no code
        // (then the walk ends there, as the kernel said); the leaf is kept.
        let handover = k.handover.filter(|(regs, _)| {
            k.end != abi::UNWIND_END_BAD_ADDRESS || k.frames.is_empty() || u.is_code(pid, regs.ip)
        });
        if let Some((regs, stack)) = handover {
            // As deep as the kernel walks: a copy of 32 KiB may hold hundreds of small frames.
            let end = u.unwind(
                &self.binaries,
                pid,
                regs,
                stack,
                &mut self.unwound,
                abi::UNWIND_MAX_FRAMES.max(MAX_USER_FRAMES + k.frames.len()),
            );
            push_cut(&mut self.unwound, end);
            return;
        }
        // A walk that ended in a program's entry function (hand-written
        // `_start` without CFI) reached the bottom whatever it read below.
        let at_entry = k
            .frames
            .last()
            .is_some_and(|&a| k.frames.len() > 1 && u.is_entry(pid, a));
        let end = if at_entry {
            StackEnd::Root
        } else {
            StackEnd::from_abi(k.end)
        };
        // Counted as the copy unwinder counts its own stacks.
        u.count_kernel_end(end);
        push_cut(&mut self.unwound, end);
    }

    /// Whether a kernel stack is a thread's exit (`do_exit`): from there it
    /// never returns to user mode, so the user registers it entered the
    /// kernel with belong to its last system call.
    fn is_exiting(&self, kstack: &[u64]) -> bool {
        kstack
            .iter()
            .any(|&a| self.kernel.lookup(a).is_some_and(|s| s.name == "do_exit"))
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

    /// Unwind a user stack copied by the kernel into `self.unwound`, leaf
    /// first, ending with a truncation marker when it stopped early.
    fn unwind_copy(&mut self, pid: u32, regs: Regs, stack: &[u8]) {
        self.unwound.clear();
        let Some(u) = self.unwinders.as_mut() else {
            return;
        };
        let end = u.unwind(
            &self.binaries,
            pid,
            regs,
            stack,
            &mut self.unwound,
            MAX_USER_FRAMES,
        );
        push_cut(&mut self.unwound, end);
    }

    /// End the unwound user stack of `pid` with a root frame saying its
    /// Python frames were not read, when it runs a CPython of a version this
    /// build does not read (a warning says which): the stack then does not
    /// pass for one of a program without Python.
    fn say_python_unread(&mut self, pid: u32) {
        if !self.unwound.is_empty()
            && self
                .unwinders
                .as_ref()
                .is_some_and(|u| u.python_unread(pid))
        {
            self.unwound.push(frames::PY_NOT_READ_KEY);
        }
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
        if s.time_ns < self.range_start_ns {
            self.window.stats.samples += 1;
            return;
        }
        if self.tracing_start_ns.is_some_and(|t| s.time_ns < t) {
            let last = self.sampled_before_tracing.entry(s.tid).or_default();
            *last = (*last).max(s.time_ns);
        }
        let w = &mut self.window;
        w.stats.samples += 1;
        if s.flags & SAMPLE_FLAG_KSTACK_FAILED != 0 {
            w.stats.kernel_stack_failures += 1;
        }
        if s.flags & SAMPLE_FLAG_USTACK_FAILED != 0 {
            w.stats.user_stack_failures += 1;
        }
        if s.flags & abi::SAMPLE_FLAG_HANDOVER_SKIPPED != 0 {
            w.stats.handovers_skipped += 1;
        }
        let node = match s.user {
            UserStack::KernelUnwound(k) => {
                self.unwind_in_kernel(s.pid, &k);
                let end = StackEnd::from_abi(k.end);
                if end == StackEnd::NoUnwindInfo {
                    // In a JVM: most often a method compiled since its last
                    // answer, whose frame size the kernel lacks.
                    self.readers.jvms.stack_cut(s.pid);
                }
                if end == StackEnd::Unreadable && self.is_exiting(s.kstack) {
                    self.recover_unreadable(s.tid, k.leaf);
                }
                match self.readers.merge(
                    self.unwinders.as_ref(),
                    s.pid,
                    &self.unwound,
                    k.python,
                    &mut self.window.runtime_frames,
                    &mut self.merged,
                ) {
                    Some(merged) => {
                        if merged == Merged::Python {
                            self.readers.python_threads.sampled(s.pid);
                        }
                        Self::intern_raw(&mut self.window.raw, s.pid, &self.merged, s.kstack)
                    }
                    None => {
                        self.say_python_unread(s.pid);
                        Self::intern_raw(&mut self.window.raw, s.pid, &self.unwound, s.kstack)
                    }
                }
            }
            UserStack::Copy { regs, stack } if self.unwinders.is_some() => {
                self.unwind_copy(s.pid, regs, stack);
                self.say_python_unread(s.pid);
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
        w.samples
            .runtime_clock_ns
            .push(runtime_clock(s.sum_exec_runtime, s.exec_start, s.time_ns));
        w.samples.raw_stack.push(node);
        self.recent_pids.insert(s.pid);
        let unwinders = self.unwinders.as_ref();
        self.readers.jvms.sampled(s.pid, || {
            unwinders
                .and_then(|u| u.java(s.pid))
                .map(|j| (j.symbols.clone(), j.base))
        });
        let mut comm = [0u8; TASK_COMM_LEN];
        comm[..s.comm.len()].copy_from_slice(s.comm);
        if w.sample_comm.get(&s.tid) != Some(&comm) {
            w.sample_comm.insert(s.tid, comm);
        }
        self.look_for_interpreter(s.pid, s.time_ns);
    }

    /// A sample or stack of JVM `pid` whose interpreter the kernel's entry
    /// lacks: look for it (every 20 ms while it is not generated yet).
    fn look_for_interpreter(&mut self, pid: u32, now_ns: u64) {
        let Some(u) = self.unwinders.as_mut() else {
            return;
        };
        let Some(java) = u.java(pid).filter(|j| j.interpreter.is_none()).cloned() else {
            return;
        };
        if let Some((range, code)) = self.readers.java.find_interpreter(pid, &java, now_ns) {
            u.set_java_interpreter(pid, range, code);
        }
        for w in std::mem::take(&mut self.readers.java.failures) {
            self.warn(w);
        }
    }

    /// The shared stacks forgotten since last asked (their processes are
    /// gone): the tracer deletes them from the kernel's table.
    pub fn take_forgotten_stacks(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.shared_stacks_forgotten)
    }

    /// One record of the scheduler/I-O tracer's ring, `bytes` long.
    pub fn handle_event_bytes(&mut self, e: EventRecord<'_>, bytes: usize) {
        self.window.stats.tracer_bytes += bytes as u64;
        self.handle_event(e);
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
        if e.flags & abi::STACK_HANDOVER_SKIPPED != 0 {
            self.window.stats.handovers_skipped += 1;
        }
        let mut runtime_frames: Box<[_]> = Box::new([]);
        let user: Box<[u64]> = match view.user {
            UserStack::KernelUnwound(k) => {
                // The tracer's walks hand nothing over: what the kernel walked is the stack.
                self.unwind_in_kernel(e.pid, &k);
                // Its runtimes' frames keyed in a table of its own: the
                // record outlives the window.
                let mut own = std::mem::take(&mut self.record_frames);
                own.clear();
                let merged = self.readers.merge(
                    self.unwinders.as_ref(),
                    e.pid,
                    &self.unwound,
                    k.python,
                    &mut own,
                    &mut self.merged,
                );
                let user = match merged {
                    Some(_) => {
                        runtime_frames = own.names().into();
                        self.merged.as_slice().into()
                    }
                    None => {
                        self.say_python_unread(e.pid);
                        self.unwound.as_slice().into()
                    }
                };
                self.record_frames = own;
                user
            }
            UserStack::Copy { regs, stack } => {
                self.unwind_copy(e.pid, regs, stack);
                self.say_python_unread(e.pid);
                self.unwound.as_slice().into()
            }
            UserStack::Frames(frames) => frames.into(),
        };
        // A JVM that sleeps is seldom sampled: its switch-outs look for its interpreter too.
        self.look_for_interpreter(e.pid, crate::sys::clock::monotonic_ns());
        let kernel: Box<[u64]> = self.kernel.cut_tracing(view.kstack).into();
        let interrupt = self.kernel.interrupt_part(&kernel);
        let user_regs = Regs {
            ip: e.user_ip,
            sp: e.user_sp,
            bp: e.user_bp,
        };
        self.stacks.insert(
            e.pid,
            e.tid,
            e.slot,
            StoredStack {
                id: e.id,
                user,
                kernel,
                user_regs,
                interrupt,
                runtime_frames,
                interned: Default::default(),
            },
        );
    }

    /// The raw stack of stack record `id` of `tid`, interned under `pid`;
    /// a "not available" frame when the record was lost (id 0) or is no
    /// longer kept (counted).
    fn stack_ref(&mut self, pid: u32, tid: u32, id: u64) -> NodeIndex {
        match self.stacks.get(tid, id) {
            Some(s) => match s.interned.get() {
                Some((w, p, node)) if w == self.windows_finished && p == pid => node,
                _ if !s.runtime_frames.is_empty() => {
                    // Its runtimes' keys are the record's: this window's instead.
                    self.scratch.clear();
                    for &k in s.user.iter() {
                        let frame = frames::is_runtime_key(k)
                            .then(|| {
                                s.runtime_frames
                                    .get((k & !frames::RUNTIME_KEY_BASE) as usize)
                            })
                            .flatten();
                        self.scratch.push(match frame {
                            Some(f) => self.window.runtime_frames.key_of(f),
                            None => k,
                        });
                    }
                    let node =
                        Self::intern_raw(&mut self.window.raw, pid, &self.scratch, &s.kernel);
                    s.interned.set(Some((self.windows_finished, pid, node)));
                    node
                }
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
                self.window
                    .raw
                    .child(root, StackEnd::NotAvailable.raw_key().expect("a cut"))
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
            if self.window.waker_comm.len() < window::MAX_WAKER_NAMES {
                self.window.waker_comm.insert(e.waker_tid, e.waker_comm);
            }
            let waker = Waker {
                pid: e.waker_pid,
                tid: e.waker_tid,
                name: abi::comm_str(&e.waker_comm),
                // The stack tells an interrupt from the task it
                // interrupted, and which kind. Without one (lost, or not
                // taken: a wakeup before the switch-out), the tracer's
                // judgment says task or interrupt; without that, say so.
                interrupt: match stored {
                    Some(_) => interrupt.map(|(kind, _)| kind),
                    None if e.flags & abi::OFFCPU_WAKER_TASK != 0 => None,
                    None => Some(InterruptKind::Unknown),
                },
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
        // Off the CPU since before the tracer was attached: since its last
        // sample, if sampling saw it run meanwhile.
        let start_ns = match self.sampled_before_tracing.get(&e.tid) {
            Some(&ran) if e.flags & abi::OFFCPU_START_UNSEEN != 0 && ran < e.end_ns => {
                e.start_ns.max(ran)
            }
            _ => e.start_ns,
        };
        self.window.off_cpu.push(OffCpuRecord {
            start_ns,
            end_ns: e.end_ns,
            wake_ns: e.wake_ns,
            landing_ns: e.landing_ns as u64,
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
        let waker = match e.waker_kind {
            abi::FOLD_WAKER_TASK => ShortWaker::Task {
                pid: e.waker_pid,
                tid: e.waker_tid,
            },
            abi::FOLD_WAKER_IRQ => ShortWaker::Interrupt,
            abi::FOLD_WAKER_MIXED => ShortWaker::Several,
            abi::FOLD_WAKER_UNSEEN => ShortWaker::Unseen,
            _ => ShortWaker::Nobody,
        };
        // Where its waits left the CPU, when one place (a kept stack; one
        // no longer kept is counted and drawn as such).
        let stack = if e.stack_id != 0 {
            self.stack_ref(e.pid, e.tid, e.stack_id)
        } else {
            NO_PARENT
        };
        self.window.folded.push(FoldedRecord {
            stack,
            pid: e.pid,
            tid: e.tid,
            first_ns: e.first_ns,
            last_ns: e.last_ns,
            ns: e.ns,
            count: e.count.iter().sum(),
            wait_ns: e.wait_ns,
            landing_ns: e.landing_ns as u64,
            waker,
        });
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
                    wait_ns: st.short_wait_ns,
                    waker_pid: st.short_waker_pid,
                    waker_tid: st.short_waker_tid,
                    waker_kind: st.short_waker_kind,
                    landing_ns: st.short_land_ns.min(u32::MAX as u64) as u32,
                    stack_id: st.short_stack_id,
                });
            }
            if st.irq_count.iter().any(|&c| c > 0) {
                // The run's waits an interrupt woke, over the same span.
                self.handle_folded(&FoldedEvent {
                    kind: abi::RECORD_FOLDED,
                    pid: st.pid,
                    tid: *tid,
                    _pad: 0,
                    first_ns: st.short_first,
                    last_ns: st.short_last.min(end_ns),
                    ns: [0, st.irq_ns[0], st.irq_ns[1], 0],
                    count: [0, st.irq_count[0], st.irq_count[1], 0],
                    wait_ns: st.irq_wait_ns,
                    waker_pid: 0,
                    waker_tid: 0,
                    waker_kind: abi::FOLD_WAKER_IRQ,
                    landing_ns: st.irq_land_ns.min(u32::MAX as u64) as u32,
                    stack_id: st.irq_stack_id,
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
                    flags: st.off_flags,
                    landing_ns: if waker {
                        st.landing(end_ns).min(u32::MAX as u64) as u32
                    } else {
                        0
                    },
                });
            }
        }
    }

    /// One sideband event. A mapping's file is opened now, while the
    /// process lives.
    pub fn handle_sideband(&mut self, e: SidebandEvent) {
        let binary = match &e {
            SidebandEvent::Mmap(m) => Some(self.binaries.intern(m)),
            _ => None,
        };
        self.process_event(&e, binary);
        self.window.sideband.push((e, binary));
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
    pub fn handle_losses(
        &mut self,
        lost_samples: u64,
        lost_sideband: u64,
        malformed: u64,
        tracer: crate::bpf::TracerDrops,
    ) {
        let s = &mut self.window.stats;
        s.lost_samples += lost_samples;
        s.lost_sideband += lost_sideband;
        s.malformed += malformed;
        s.lost_events += tracer.events_full;
        s.lost_stacks += tracer.stack_records;
        s.stack_read_failures += tracer.stack_reads;
        s.lost_state += tracer.state_full;
        s.io_untracked += tracer.io_untracked;
        s.tracepoint_runs_missed += tracer.runs_missed;
    }

    /// The most bytes one read took from the sample and tracer rings so far.
    pub fn handle_ring_peaks(&mut self, samples: usize, events: usize) {
        let s = &mut self.window.stats;
        s.samples_ring_peak = s.samples_ring_peak.max(samples as u64);
        s.events_ring_peak = s.events_ring_peak.max(events as u64);
    }
}

#[cfg(test)]
mod tests;
