//! The collector: raw kernel records in, one [`Recording`] per window out.
//!
//! While recording, one `handle_*` per record kind stores what arrives in
//! the current window: samples as columns with their raw stacks interned in
//! a prefix tree (no allocation per sample once the tree is warm), sideband
//! events in a list (and, as each arrives, what is kept of its process
//! beside the replay, in one place: [`live`], with the unwinders and the
//! runtimes' readers told through their one owner, [`followers`]),
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

mod events;
mod followers;
mod jit_names;
mod kernel_unwinding;
mod live;
mod options;
mod process;
mod replay;
mod samples;
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
use crate::model::stack_tree::{NodeIndex, NO_PARENT};
use crate::runtimes::frames::{self, KERNEL_ADDR_MIN};
use crate::runtimes::Merged;
use crate::sideband::proc_snapshot::ProcSnapshot;
#[cfg(test)]
use crate::sideband::MmapEvent;
use crate::sideband::SidebandEvent;
use crate::symbolize::kernel::{InterruptKind, KernelSymbols};
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
    /// What follows each running process: its unwinders, kernel entry and
    /// what the runtimes read of it.
    followers: followers::Followers,
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
    /// Each thread's sample times before `tracing_started` (8 bytes a
    /// sample of the loading's time, a fraction of a second beside
    /// pgbench), for the waits it did not see begin
    /// (`window::since_sampled_running`).
    sampled_before_tracing: FxHashMap<u32, Vec<u64>>,
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
            followers: followers::Followers::new(options.dwarf, options.stack_size),
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
        self.table.range_start_ns = range_start_ns;
        self.table.rebase_cpu_times(
            range_start_ns,
            crate::sideband::proc_snapshot::thread_cpu_ns,
        );
    }

    /// Tracing had begun by `time_ns` (said once the loader returned and
    /// the `/proc` snapshot was read, after the programs began to run; for
    /// `record -- CMD`, before sampling begins).
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

    /// How full the current window is, in records, each weighed by what
    /// it brings into memory: a sample or a sideband event counts one (a
    /// sample's stack may be new to the raw tree, handed-over stacks their
    /// words; an event a process's mappings), the tracer's records a
    /// quarter each (fixed-size, ~100 bytes, their stacks sent once by the
    /// kernel and interned). Beside pgbench, whose windows are nearly all
    /// the tracer's, counting them whole cut a window every 0.2 s; weighed
    /// so, `record -a -d 10` cuts 12 windows instead of ~50, its CPU 860-890
    /// → 800-840 ms (3 alternating runs each), its peak RSS 86-87 → 89-93
    /// MB. (Flat windows of 100,000 and 200,000 records saved no more than
    /// 40,000 and cost 23 and 46 MB.)
    pub fn window_records(&self) -> usize {
        let w = &self.window;
        w.sideband.len()
            + w.samples.time_ns.len()
            + (w.off_cpu.len() + w.io.len() + w.folded.len()) / 4
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
        // Read before sampling began (`CaptureSession::start` reads `/proc`
        // beside the programs' verification), its threads' CPU times are
        // read again now, as `sampling_started` does for a snapshot it
        // finds: no first sample claims CPU from before the recording.
        if self.range_start_ns > 0 && snapshot.taken_ns < self.range_start_ns {
            self.table.rebase_cpu_times(
                self.range_start_ns,
                crate::sideband::proc_snapshot::thread_cpu_ns,
            );
        }
        for (p, b) in snapshot.processes.iter().zip(&bins) {
            self.table.live(p.pid).cgroup =
                Some((p.cgroup.clone(), crate::sys::clock::monotonic_ns()));
            for (m, &binary) in p.mappings.iter().zip(b) {
                self.mapped(p.pid, 0, (m.start, m.len, m.pgoff), &m.path, binary);
            }
        }
    }

    /// The shared stacks forgotten since last asked (their processes are
    /// gone): the tracer deletes them from the kernel's table.
    pub fn take_forgotten_stacks(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.shared_stacks_forgotten)
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
