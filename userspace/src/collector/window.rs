//! Finishing a window: what one window received, replayed into a [`Recording`].
//!
//! In: the [`WindowData`] the `handle_*` entry points filled, the process
//! table as the previous window left it, and the [`WindowRange`]. Out: the
//! window's [`Recording`] (processes and threads with their samples,
//! off-CPU samples and markers, libraries and named frames, stats); in a
//! continuous capture, what ended after the cut carried into the next
//! window's data ([`carry_late`]). The replay itself is [`super::replay`]
//! and [`super::sched`]; naming frames is [`super::symbolicate`].

use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use super::replay::{Replay, ThreadData};
use super::sched::{FoldedRecord, IoRecord, OffCpuRecord};
use super::{jit_names, symbolicate, Collector, PidFilter, WindowRange};
use crate::binaries::BinaryIndex;
use crate::bpf::abi::{self, ThreadEndEvent, TASK_COMM_LEN};
use crate::model::recording::*;
use crate::model::stack_tree::{NodeIndex, StackTree, NO_PARENT};
use crate::sideband::SidebandEvent;

/// Samples as columns, in arrival order.
#[derive(Debug, Default)]
pub(super) struct SampleColumns {
    pub(super) time_ns: Vec<u64>,
    pub(super) pid: Vec<u32>,
    pub(super) tid: Vec<u32>,
    pub(super) cpu: Vec<u32>,
    /// The task's CPU time as the scheduler last updated it (a tick, a switch).
    pub(super) runtime_ns: Vec<u64>,
    /// The task's CPU time exactly at the sample, plus an unknown offset
    /// that is the same for every sample (see `runtime_clock`).
    pub(super) runtime_clock_ns: Vec<u64>,
    pub(super) raw_stack: Vec<NodeIndex>,
}

/// Everything one window received.
#[derive(Debug, Default)]
pub(super) struct WindowData {
    pub(super) samples: SampleColumns,
    /// Raw stacks: a pid root, user addresses outermost first, kernel addresses.
    pub(super) raw: StackTree,
    /// Whole raw stacks by a hash of their addresses: the node interned
    /// last for that hash (checked against the tree before it is taken).
    pub(super) raw_paths: FxHashMap<u64, NodeIndex>,
    /// Each thread's last new raw stack, whose outer frames its next shares.
    pub(super) thread_paths: FxHashMap<u32, super::samples::ThreadPath>,
    /// Latest comm seen in a sample per tid, to name threads whose COMM event we missed.
    pub(super) sample_comm: FxHashMap<u32, [u8; TASK_COMM_LEN]>,
    /// The comm of each task seen waking a thread (from its off-CPU
    /// records), to name the wakers of short waits: at most [`MAX_WAKER_NAMES`].
    pub(super) waker_comm: FxHashMap<u32, [u8; TASK_COMM_LEN]>,
    pub(super) sideband: Vec<(SidebandEvent, Option<BinaryIndex>)>,
    pub(super) off_cpu: Vec<OffCpuRecord>,
    pub(super) folded: Vec<FoldedRecord>,
    pub(super) io: Vec<IoRecord>,
    /// Switch totals: of threads that ended (at their end), and of the
    /// live ones at the end of a recording (time u64::MAX).
    pub(super) switch_totals: Vec<ThreadEndEvent>,
    pub(super) counters: Vec<CounterRecord>,
    pub(super) notes: Vec<String>,
    pub(super) warnings: Vec<String>,
    pub(super) stats: RecordingStats,
    /// The runtimes' frames the raw stacks refer to.
    pub(super) runtime_frames: crate::runtimes::frames::RuntimeFrames,
}

/// Order keys of a window's replay.
pub(super) const ORDER_SAMPLE: u8 = 0;
pub(super) const ORDER_OFF_CPU: u8 = 1;
pub(super) const ORDER_IO: u8 = 2;
pub(super) const ORDER_FOLDED: u8 = 3;

impl Collector {
    /// Replay, symbolicate and return the window's recording; what outlives
    /// the window stays for the next one.
    pub fn finish_window(&mut self, range: WindowRange) -> Recording {
        if std::env::var_os("SYSPROF_DEBUG_SIZES").is_some() {
            self.print_sizes();
        }
        let mut w = std::mem::take(&mut self.window);

        // Merge sideband and data in time order. At equal times, sideband
        // first: a mapping reported at t serves a sample at t.
        w.sideband.sort_by_key(|(e, _)| e.time());
        if range.continuous {
            // What ended after the cut is the next window's.
            self.window = carry_late(&mut w, range.end_ns);
        }
        // The agent's windows take what came late from the ones before; not
        // what predates its first: the tracer and the sideband attach a
        // moment before it, and `show` drew the samples, requests and exits
        // of processes gone by then at negative times (down to -133 ms).
        // A recording's last window (not continuous) also takes what the
        // windows before it carried over: its floor is the first's start.
        let floor = *self.first_start_ns.get_or_insert(range.start_ns);
        self.since_sampled_running(&mut w);
        clip_to_range(&mut w, &range, floor);
        let order = replay_order(&w, &range, floor);
        let mut replay = Replay::new(&mut self.table, &self.kernel);
        replay_in_order(&mut replay, &w, &order, self.options.marker_min_ns);
        let cpu_tracks = if self.options.per_cpu {
            replay.cpu_tracks(
                &w,
                &order,
                range.interval_ms,
                (range.start_ns, range.end_ns),
            )
        } else {
            Vec::new()
        };

        let Replay {
            frame_keys,
            stacks,
            threads,
            ..
        } = replay;
        let mut warnings = self.take_stats_and_warnings(&mut w, range.continuous);
        self.give_jit_frames();
        let jit = jit_names::JitSources(&self.table);
        let (libs, frames) = symbolicate::symbolicate(
            &mut self.binaries,
            &mut self.symbolicator,
            &mut self.names,
            &self.kernel,
            &frame_keys,
            &jit,
            &w.runtime_frames,
            self.options.debuginfod,
            self.options.elf_limits,
            &mut warnings,
        );
        self.read_python_thread_names(true);
        let processes = self.window_processes(threads, &w.sample_comm, &range);
        let waker_names = short_waker_names(&processes, &w.waker_comm, &w.sample_comm);
        self.count_reported(&processes, &mut w.stats);
        self.forget_reported(&range);
        Recording {
            counters: w.counters,
            cpu_tracks,
            off_cpu: self.options.off_cpu,
            whole_system: matches!(self.filter, PidFilter::All),
            // Known once the recording stopped (`record` sets it).
            main_process_ended: false,
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
            waker_names,
        }
    }

    /// What the collector holds, on stderr (`SYSPROF_DEBUG_SIZES`).
    fn print_sizes(&self) {
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
            self.table.processes.values().filter(|p| p.live.cgroup.is_some()).count(),
            self.stacks.sizes(),
        );
    }

    /// The window's warnings, with what the unwinders and the runtimes'
    /// readers have to say of it (their counts go to `w`'s stats); the JVMs
    /// sampled are asked for their perf maps.
    fn take_stats_and_warnings(&mut self, w: &mut WindowData, continuous: bool) -> Vec<String> {
        let mut warnings = std::mem::take(&mut w.warnings);
        // CPython's, PHP's, Perl's, Ruby's and Go's labels, in the same counts (their readers
        // are alike).
        let (python_unnamed, python_replaced) = self.followers.readers.python.take_counts();
        let (php_unnamed, php_replaced) = self.followers.readers.php.take_counts();
        let (perl_unnamed, perl_replaced) = self.followers.readers.perl.take_counts();
        let (ruby_unnamed, ruby_replaced) = self.followers.readers.ruby.take_counts();
        let (go_unnamed, go_replaced) = self.followers.readers.go.take_counts();
        (w.stats.python_frames_unnamed, w.stats.python_codes_replaced) = (
            python_unnamed + php_unnamed + perl_unnamed + ruby_unnamed + go_unnamed,
            python_replaced + php_replaced + perl_replaced + ruby_replaced + go_replaced,
        );
        w.stats.js_frames_unnamed =
            std::mem::take(&mut self.followers.readers.js.functions.unresolved);
        if let Some(u) = self.followers.unwinders.as_mut() {
            w.stats.unwind = u.take_stats();
            warnings.extend(u.take_warnings());
        }
        // The JVMs sampled write their perf maps now, for this window's
        // frames (a recording waits longer: it is its only window).
        let java = &self.followers.readers.java;
        warnings.extend(self.followers.readers.jvms.refresh(
            if continuous {
                Duration::from_millis(500)
            } else {
                Duration::from_secs(3)
            },
            |pid| java.names_compiled(pid),
        ));
        self.followers.readers.java.window_done();
        warnings
    }

    /// The stats of what the window reports: processes that came and went
    /// without data in it, samples kept.
    fn count_reported(&self, processes: &[ProcessRecord], stats: &mut RecordingStats) {
        let reported: FxHashSet<u32> = processes.iter().map(|p| p.pid).collect();
        stats.processes_without_data = self
            .table
            .processes
            .iter()
            .filter(|(pid, p)| {
                p.tracked && p.start_ns.is_some() && p.end_ns.is_some() && !reported.contains(pid)
            })
            .count() as u64;
        stats.samples_kept = processes
            .iter()
            .flat_map(|p| &p.threads)
            .map(|t| t.samples.time_ns.len() as u64)
            .sum();
    }

    /// The window is reported: forget what ended in it.
    fn forget_reported(&mut self, range: &WindowRange) {
        // A new window's raw stacks start from an empty tree.
        self.windows_finished += 1;
        // What ended in this window has been reported: forget it.
        let gone = self
            .table
            .processes
            .iter()
            .filter(|(_, p)| p.end_ns.is_some_and(|e| e < range.end_ns))
            .map(|(&pid, _)| pid);
        self.stacks
            .forget_processes(gone, &mut self.shared_stacks_forgotten);
        self.table.prune(range.end_ns);
        self.stacks.prune(range.end_ns);
        if range.continuous {
            self.forget_the_gone(range.end_ns);
        }
    }

    /// The window's processes: those with data, and with a pid filter every
    /// thread of the chosen processes (an idle thread is worth seeing there);
    /// main thread first, sorted by pid and tid.
    fn window_processes(
        &self,
        mut threads: FxHashMap<(u32, u32), ThreadData>,
        sample_comm: &FxHashMap<u32, [u8; TASK_COMM_LEN]>,
        range: &WindowRange,
    ) -> Vec<ProcessRecord> {
        let keep_idle = matches!(self.filter, PidFilter::Tree(_));
        let in_window =
            |t: Option<u64>| t.is_some_and(|t| t >= range.start_ns && t <= range.end_ns);
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
                let short_lived = self.options.keep_short_lived
                    && tid == pid
                    && (in_window(p.start_ns) || in_window(p.end_ns));
                if !seen
                    && !short_lived
                    && !(keep_idle
                        && (started_here
                            || matches!(&self.filter, PidFilter::Tree(r) if r.contains(&pid))))
                {
                    continue;
                }
                let mut data = data.unwrap_or_default();
                sort_off_cpu(&mut data.off_cpu);
                let mut name = state.map(|t| t.name.clone()).unwrap_or_default();
                if name.is_empty() {
                    name = sample_comm
                        .get(&tid)
                        .map(|c| abi::comm_str(c))
                        .unwrap_or_default();
                }
                // A JVM's thread by the name it gave it, not the kernel's
                // 15 bytes of it ("C2 CompilerThre").
                if let Some(full) = self.followers.readers.jvms.full_name(pid, tid, &name) {
                    name = full.to_string();
                } else if let Some(given) = self
                    .followers
                    .readers
                    .python_threads
                    .name(pid, tid, &name, &p.comm)
                {
                    // A Python thread by the name `threading` gave it.
                    name = given.to_string();
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
                folded: 0,
            });
        }
        out.sort_by_key(|p| p.pid);
        out
    }
}

impl Collector {
    /// A wait that began before the tracer first saw its thread (its start
    /// is the thread's creation, or, for a new thread not run yet, when it
    /// became runnable) began no earlier than the thread's last sample
    /// before the wait's end among those taken before tracing began:
    /// sampling saw it run then. Never earlier than its start: a reused
    /// tid's older samples predate the new thread's creation. Taken here,
    /// with the window's every sample handled. (A bound by the latest
    /// sample before `tracing_started` alone, which comes well after the
    /// programs run, was later than the wait's end: beside pgbench every
    /// busy thread's first wait claimed the ~150 ms before the tracer
    /// attached, over its own samples, 11 threads, 1.65 s of off-CPU time
    /// that was not.)
    fn since_sampled_running(&self, w: &mut WindowData) {
        for o in w.off_cpu.iter_mut().filter(|o| o.start_unseen) {
            // Before the wait's end: tracing is said to have begun once
            // the tracer's loader returned, after its programs ran.
            let ran = self
                .sampled_before_tracing
                .get(&o.tid)
                .and_then(|times| times.iter().filter(|&&t| t < o.end_ns).max());
            if let Some(&ran) = ran {
                o.start_ns = o.start_ns.max(ran);
            }
        }
    }
}

/// Clip what reaches before the window's floor (its first start) or past
/// its end to fit: intervals and runs of short waits.
fn clip_to_range(w: &mut WindowData, range: &WindowRange, floor: u64) {
    // A recording's intervals are clipped to its range (one still open
    // at the end was closed there); requests must have completed in it.
    // The agent's start at its first window's (the floor).
    for o in &mut w.off_cpu {
        if !range.continuous {
            o.end_ns = o.end_ns.min(range.end_ns);
        }
        o.start_ns = o.start_ns.max(floor);
    }
    // A run of short waits (the kernel's span up to a second) starts no
    // earlier than the floor, as intervals do, and a recording's ends no
    // later than its end, as its intervals do: a run that straddles the end
    // (sent after it, or read with the threads' states after the stop)
    // held the waits that came after the end too, and one from the ring
    // was left out whole. It keeps the share of its sums its span keeps.
    for f in &mut w.folded {
        if f.first_ns < floor && f.last_ns > floor {
            keep_share(
                f,
                (f.last_ns - floor) as f64 / (f.last_ns - f.first_ns) as f64,
            );
            f.first_ns = floor;
        }
        if !range.continuous && f.first_ns < range.end_ns && f.last_ns > range.end_ns {
            keep_share(
                f,
                (range.end_ns - f.first_ns) as f64 / (f.last_ns - f.first_ns) as f64,
            );
            f.last_ns = range.end_ns;
        }
    }
}

/// Scale a run of short waits' sums to the share `kept` of its span.
fn keep_share(f: &mut FoldedRecord, kept: f64) {
    f.ns = f.ns.map(|ns| (ns as f64 * kept) as u64);
    f.wait_ns = (f.wait_ns as f64 * kept) as u64;
    f.landing_ns = (f.landing_ns as f64 * kept) as u64;
    f.delay_ns = (f.delay_ns as f64 * kept) as u64;
    f.count = (f.count as f64 * kept).ceil() as u32;
}

/// The window's samples, intervals, requests and folded waits in the order
/// of their replay: (time, `ORDER_*` kind, index in its list), sorted.
/// Left out: what falls outside the window (from `floor` to its end), and
/// intervals clipped to nothing.
fn replay_order(w: &WindowData, range: &WindowRange, floor: u64) -> Vec<(u64, u8, u32)> {
    let inside = |t: u64| t <= range.end_ns && t >= floor;
    let mut order: Vec<(u64, u8, u32)> =
        Vec::with_capacity(w.samples.time_ns.len() + w.off_cpu.len() + w.io.len() + w.folded.len());
    order.extend(
        w.samples
            .time_ns
            .iter()
            .enumerate()
            .filter(|(_, &t)| inside(t))
            .map(|(i, &t)| (t, ORDER_SAMPLE, i as u32)),
    );
    order.extend(
        w.off_cpu
            .iter()
            .enumerate()
            .filter(|(_, o)| o.start_ns < o.end_ns)
            .map(|(i, o)| (o.start_ns, ORDER_OFF_CPU, i as u32)),
    );
    order.extend(
        w.io.iter()
            .enumerate()
            .filter(|(_, e)| inside(e.done_ns) && inside(e.start_ns))
            .map(|(i, e)| (e.start_ns, ORDER_IO, i as u32)),
    );
    order.extend(
        w.folded
            .iter()
            .enumerate()
            .filter(|(_, f)| inside(f.last_ns))
            .map(|(i, f)| (f.last_ns, ORDER_FOLDED, i as u32)),
    );
    order.sort_unstable();
    order
}

/// Replay the window's records in `order`, each after the sideband events
/// up to its time; then the rest of the sideband, the runs of short waits
/// closed, and the threads' switch totals.
fn replay_in_order(
    replay: &mut Replay<'_>,
    w: &WindowData,
    order: &[(u64, u8, u32)],
    marker_min_ns: u64,
) {
    let mut side = w.sideband.iter().peekable();
    for &(t, kind, i) in order {
        while let Some((e, b)) = side.next_if(|(e, _)| e.time() <= t) {
            replay.table.apply(e, *b);
        }
        match kind {
            ORDER_SAMPLE => replay.sample(w, i as usize),
            ORDER_OFF_CPU => replay.off_cpu(w, &w.off_cpu[i as usize], marker_min_ns),
            ORDER_IO => replay.io(w, &w.io[i as usize]),
            _ => replay.folded(w, &w.folded[i as usize]),
        }
    }
    for (e, b) in side {
        replay.table.apply(e, *b);
    }
    replay.close_short_runs();
    // After the sideband: a thread's state is the one its fork made.
    for e in &w.switch_totals {
        replay.table.process(e.pid).thread(e.tid).switches = Some((e.voluntary, e.involuntary));
    }
}

/// Move what ended after `end_ns` out of `w` into a new window: samples
/// taken after it, intervals and requests that ended after it, folded
/// waits reported after it, with their raw stacks re-interned.
pub(super) fn carry_late(w: &mut WindowData, end_ns: u64) -> WindowData {
    let mut next = WindowData::default();
    let mut path = Vec::new();
    let runtime_frames = std::mem::take(&mut w.runtime_frames);
    let mut move_node = |raw: &StackTree, next: &mut WindowData, node: NodeIndex| -> NodeIndex {
        if node == NO_PARENT {
            return NO_PARENT;
        }
        raw.path(node, &mut path);
        path.iter().fold(NO_PARENT, |p, &k| {
            let k = if crate::runtimes::frames::is_runtime_key(k) {
                next.runtime_frames.carry(&runtime_frames, k)
            } else {
                k
            };
            next.raw.child(p, k)
        })
    };
    let s = &w.samples;
    let late: Vec<usize> = (0..s.time_ns.len())
        .filter(|&i| s.time_ns[i] > end_ns)
        .collect();
    if !late.is_empty() {
        for &i in &late {
            let node = move_node(&w.raw, &mut next, s.raw_stack[i]);
            let n = &mut next.samples;
            n.time_ns.push(s.time_ns[i]);
            n.pid.push(s.pid[i]);
            n.tid.push(s.tid[i]);
            n.cpu.push(s.cpu[i]);
            n.runtime_ns.push(s.runtime_ns[i]);
            n.runtime_clock_ns.push(s.runtime_clock_ns[i]);
            n.raw_stack.push(node);
        }
        // Out of this window's replay: its filter drops samples after the end.
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.off_cpu)
        .into_iter()
        .partition(|o| o.end_ns <= end_ns);
    w.off_cpu = keep;
    for mut o in late {
        o.stack = move_node(&w.raw, &mut next, o.stack);
        if let Some((_, node)) = o.waker.as_mut() {
            *node = move_node(&w.raw, &mut next, *node);
        }
        next.off_cpu.push(o);
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.io)
        .into_iter()
        .partition(|e| e.done_ns <= end_ns);
    w.io = keep;
    for mut e in late {
        e.stack = move_node(&w.raw, &mut next, e.stack);
        next.io.push(e);
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.folded)
        .into_iter()
        .partition(|f| f.last_ns <= end_ns);
    w.folded = keep;
    for mut f in late {
        // Its place's raw stack is this window's: the next one's instead
        // (left as it was, a run carried over a cut indexed the next
        // window's stacks with this one's node: an agent with 1-s windows
        // died of it, out of bounds).
        f.stack = move_node(&w.raw, &mut next, f.stack);
        next.folded.push(f);
    }
    let (keep, late): (Vec<_>, Vec<_>) = std::mem::take(&mut w.switch_totals)
        .into_iter()
        .partition(|e| e.time_ns <= end_ns);
    w.switch_totals = keep;
    next.switch_totals = late;
    next.sample_comm = w.sample_comm.clone();
    w.runtime_frames = runtime_frames;
    next
}

/// Off-CPU samples arrive in interval start order, folded totals at their
/// end; the profile needs them sorted by time.
pub(super) fn sort_off_cpu(o: &mut OffCpuSamples) {
    if o.time_ns.windows(2).all(|w| w[0] <= w[1]) {
        return;
    }
    let mut idx: Vec<usize> = (0..o.time_ns.len()).collect();
    idx.sort_by_key(|&i| o.time_ns[i]);
    o.time_ns = idx.iter().map(|&i| o.time_ns[i]).collect();
    o.stack = idx.iter().map(|&i| o.stack[i]).collect();
    o.duration_ns = idx.iter().map(|&i| o.duration_ns[i]).collect();
}

/// Most wakers of short waits named per window, and most of them read
/// from `/proc` (a waker that is no thread of the profile's).
pub(super) const MAX_WAKER_NAMES: usize = 16_384;
const MAX_WAKER_NAME_READS: usize = 1_024;

/// The names of the tasks that woke the short waits of `processes`, by
/// tid: as the profile's own threads are named, else as their off-CPU
/// records or samples named them, else as `/proc/TID/comm` says now (a
/// waker outside `record -- CMD` that never woke anyone for long), else
/// none (it exited). Bounded: [`MAX_WAKER_NAMES`] names, of them
/// [`MAX_WAKER_NAME_READS`] read.
fn short_waker_names(
    processes: &[ProcessRecord],
    waker_comm: &FxHashMap<u32, [u8; TASK_COMM_LEN]>,
    sample_comm: &FxHashMap<u32, [u8; TASK_COMM_LEN]>,
) -> std::collections::HashMap<u32, String> {
    let mut wanted: FxHashSet<u32> = FxHashSet::default();
    for t in processes.iter().flat_map(|p| &p.threads) {
        for m in &t.markers {
            if let MarkerRecord::ShortWaits {
                waker: ShortWaker::Task { tid, .. },
                ..
            } = m
            {
                if wanted.len() < MAX_WAKER_NAMES {
                    wanted.insert(*tid);
                }
            }
        }
    }
    let mut names = std::collections::HashMap::new();
    for t in processes.iter().flat_map(|p| &p.threads) {
        if wanted.remove(&t.tid) {
            names.insert(t.tid, t.name.clone());
        }
    }
    let mut reads = 0;
    let mut wanted: Vec<u32> = wanted.into_iter().collect();
    wanted.sort_unstable();
    for tid in wanted {
        let comm = waker_comm.get(&tid).or_else(|| sample_comm.get(&tid));
        let name = match comm {
            Some(c) => Some(crate::bpf::abi::comm_str(c)),
            None if reads < MAX_WAKER_NAME_READS => {
                reads += 1;
                crate::sys::kernel_text::read_to_string(format!("/proc/{tid}/comm"))
                    .ok()
                    .map(|c| c.trim_end_matches('\n').to_string())
                    .filter(|c| !c.is_empty())
            }
            None => None,
        };
        if let Some(n) = name {
            names.insert(tid, n);
        }
    }
    names
}
