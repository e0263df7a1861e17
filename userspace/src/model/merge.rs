//! Windows into one recording, and a recording cut to a range or to some
//! processes: what `show` and the store's compaction do with windows.
//!
//! In: finished [`Recording`]s (windows of the agent, in any order, maybe
//! from several boots). Out: one [`Recording`] holding them all: libraries
//! and frames deduplicated, stacks re-interned in one prefix tree, a
//! process that spans windows one process (its threads' columns joined),
//! counters joined per series, totals added. Times are kept on the first
//! window's monotonic clock; a window from another boot (another clock) is
//! placed by its wall-clock anchor. [`Merger`] does the same a window at a
//! time and gives back the processes that ended (`record` writes them out
//! as it goes).

mod clip;

use rustc_hash::FxHashMap;

use super::recording::*;
use super::stack_tree::{StackTree, NO_PARENT};

/// Which track records belong to: a thread (its process and itself by id and
/// start, as a merge tells them apart) or a CPU's track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackKey {
    /// A thread of a process.
    Thread {
        /// The process's id.
        pid: u32,
        /// The process's start, if known.
        process_start_ns: Option<u64>,
        /// The thread's id.
        tid: u32,
        /// The thread's start, if it began during the recording.
        thread_start_ns: Option<u64>,
    },
    /// The track of this CPU.
    Cpu(u32),
}

impl TrackKey {
    /// The track of thread `t` of process `pid` started at `process_start_ns`.
    pub fn of(pid: u32, process_start_ns: Option<u64>, t: &ThreadRecord) -> TrackKey {
        TrackKey::Thread {
            pid,
            process_start_ns,
            tid: t.tid,
            thread_start_ns: t.start_ns,
        }
    }
}

/// A thread's columns and markers over some span: what [`Merger::take_parts`]
/// takes out, kept elsewhere, and joined back in time order.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadPart {
    /// CPU samples.
    pub samples: ThreadSamples,
    /// Off-CPU samples.
    pub off_cpu: OffCpuSamples,
    /// Markers.
    pub markers: Vec<MarkerRecord>,
}

impl ThreadPart {
    /// Take `t`'s columns and markers out of it.
    pub fn take(t: &mut ThreadRecord) -> ThreadPart {
        ThreadPart {
            samples: std::mem::take(&mut t.samples),
            off_cpu: std::mem::take(&mut t.off_cpu),
            markers: std::mem::take(&mut t.markers),
        }
    }

    /// Empty columns with room for these many records of each kind.
    pub fn with_capacity(samples: usize, off_cpu: usize, markers: usize) -> ThreadPart {
        let mut part = ThreadPart::default();
        let s = &mut part.samples;
        s.time_ns.reserve_exact(samples);
        s.stack.reserve_exact(samples);
        s.cpu_delta_ns.reserve_exact(samples);
        s.cpu.reserve_exact(samples);
        let o = &mut part.off_cpu;
        o.time_ns.reserve_exact(off_cpu);
        o.stack.reserve_exact(off_cpu);
        o.duration_ns.reserve_exact(off_cpu);
        part.markers.reserve_exact(markers);
        part
    }

    /// Add `later`'s records after these.
    pub fn append(&mut self, later: ThreadPart) {
        let (s, l) = (&mut self.samples, later.samples);
        s.time_ns.extend(l.time_ns);
        s.stack.extend(l.stack);
        s.cpu_delta_ns.extend(l.cpu_delta_ns);
        s.cpu.extend(l.cpu);
        let (o, l) = (&mut self.off_cpu, later.off_cpu);
        o.time_ns.extend(l.time_ns);
        o.stack.extend(l.stack);
        o.duration_ns.extend(l.duration_ns);
        self.markers.extend(later.markers);
    }

    /// Put these records before `t`'s own, sorted by time as a merge
    /// finishes a thread.
    pub fn prepend_to(mut self, t: &mut ThreadRecord) {
        self.append(ThreadPart::take(t));
        t.samples = self.samples;
        t.off_cpu = self.off_cpu;
        t.markers = self.markers;
        sort_thread(t);
    }
}

/// One recording of `windows` (see the module doc; empty input, empty
/// output), without Go goroutines' id frames: each goroutine's stacks join
/// those of its labels (or none). The
/// store's compaction keeps an old bucket this way: a Go server's hundreds
/// of goroutines would otherwise each keep a copy of every stack it ran.
pub fn merge_without_goroutines(mut windows: Vec<Recording>) -> Recording {
    windows.sort_by(|a, b| a.start_wall_ms.total_cmp(&b.start_wall_ms));
    let mut merger = Merger {
        drop_goroutines: true,
        ..Merger::default()
    };
    for w in windows {
        merger.add(w);
    }
    merger.finish()
}

/// Windows merged one at a time, oldest first (what [`merge_without_goroutines`] does with a
/// sorted list), so that a caller can take finished processes out between
/// windows ([`Merger::take_ended`]) and hold only what is still running:
/// `record` writes those out as it goes.
#[derive(Default)]
pub struct Merger {
    /// Everything merged but the processes, counters and CPU tracks (kept
    /// in the maps below until [`Merger::finish`]).
    out: Recording,
    /// The first window's (monotonic ns, wall ms): every time is on its clock.
    base: Option<(u64, f64)>,
    libs: FxHashMap<(String, Option<Vec<u8>>), u32>,
    /// A merged frame's index by its hash: the frames themselves live once,
    /// in `out.frames` (keyed by value, every frame and its names were held
    /// twice: the map's key and the table's row).
    frame_by_hash: FxHashMap<u64, u32>,
    /// Frames whose hash an unequal frame had first (rare).
    frame_by_value: FxHashMap<FrameRecord, u32>,
    processes: FxHashMap<(u32, Option<u64>), ProcessRecord>,
    counters: FxHashMap<(u32, String), CounterRecord>,
    cpu_tracks: std::collections::BTreeMap<u32, Vec<MarkerRecord>>,
    /// The start of the window added last, on the first window's clock.
    last_start_ns: u64,
    /// Leave Go goroutines' id frames out ([`merge_without_goroutines`]).
    drop_goroutines: bool,
}

/// In a window's frame map: a frame left out (its stack nodes are their parents).
const DROPPED: u32 = u32::MAX;

impl Merger {
    /// Merge the next window (windows come oldest first).
    pub fn add(&mut self, w: Recording) {
        let base = self.base_for(&w);
        let shift = shift_of(base, &w);
        self.out.end_ns = self.out.end_ns.max(shift(w.end_ns));
        self.last_start_ns = shift(w.start_ns);
        self.out.off_cpu |= w.off_cpu;
        self.out.whole_system |= w.whole_system;
        self.out.main_process_ended |= w.main_process_ended;
        let lib_map = self.add_libs(&w.libs);
        let frame_map = self.add_frames(w.frames, &lib_map);
        let node_map = self.add_stacks(&w.stacks, &frame_map);
        let node = |n: u32| node_map[n as usize];
        for mut p in w.processes {
            shift_process(&mut p, &shift, &node);
            let key = (p.pid, p.start_ns);
            match self.processes.get_mut(&key) {
                Some(existing) => merge_process(existing, p),
                None => {
                    self.processes.insert(key, p);
                }
            }
        }
        self.add_counters(w.counters, &shift);
        for (cpu, markers) in w.cpu_tracks {
            self.cpu_tracks
                .entry(cpu)
                .or_default()
                .extend(markers.into_iter().map(|mut m| {
                    shift_marker(&mut m, &shift, &node);
                    m
                }));
        }
        let out = &mut self.out;
        add_stats(&mut out.stats, &w.stats);
        for x in w.warnings {
            if !out.warnings.contains(&x) {
                out.warnings.push(x);
            }
        }
        for x in w.notes {
            if !out.notes.contains(&x) {
                out.notes.push(x);
            }
        }
        out.waker_names.extend(w.waker_names);
    }

    /// The first window's (monotonic ns, wall ms), `w`'s if it is the first
    /// (the merged recording then starts with it).
    fn base_for(&mut self, w: &Recording) -> (u64, f64) {
        let out = &mut self.out;
        *self.base.get_or_insert_with(|| {
            out.start_ns = w.start_ns;
            out.start_wall_ms = w.start_wall_ms;
            out.end_ns = w.start_ns;
            out.interval_ms = w.interval_ms;
            (w.start_ns, w.start_wall_ms)
        })
    }

    /// The merged index of each of a window's libraries, added if new.
    fn add_libs(&mut self, window_libs: &[LibRecord]) -> Vec<u32> {
        let (out, libs) = (&mut self.out, &mut self.libs);
        window_libs
            .iter()
            .map(|l| {
                let next = out.libs.len() as u32;
                *libs
                    .entry((l.path.clone(), l.build_id.clone()))
                    .or_insert_with(|| {
                        out.libs.push(l.clone());
                        next
                    })
            })
            .collect()
    }

    /// The merged index of each of a window's frames (their libraries
    /// mapped by `lib_map`), added if new.
    fn add_frames(&mut self, frames: Vec<FrameRecord>, lib_map: &[u32]) -> Vec<u32> {
        frames
            .into_iter()
            .map(|mut f| {
                if self.drop_goroutines && f.kind == super::recording::FrameKind::Goroutine {
                    return DROPPED;
                }
                if f.lib != NO_LIB {
                    f.lib = lib_map.get(f.lib as usize).copied().unwrap_or(NO_LIB);
                }
                intern_frame(
                    &mut self.frame_by_hash,
                    &mut self.frame_by_value,
                    &mut self.out.frames,
                    f,
                )
            })
            .collect()
    }

    /// The merged node of each of a window's stack nodes (their frames
    /// mapped by `frame_map`).
    fn add_stacks(&mut self, stacks: &StackTree, frame_map: &[u32]) -> Vec<u32> {
        // Stacks: each node re-interned once (parents come first).
        let mut node_map: Vec<u32> = vec![NO_PARENT; stacks.len()];
        for n in 0..stacks.len() as u32 {
            let parent = stacks.parent(n);
            let new_parent = if parent == NO_PARENT {
                NO_PARENT
            } else {
                node_map[parent as usize]
            };
            let frame = frame_map[stacks.key(n) as usize];
            node_map[n as usize] = if frame == DROPPED {
                new_parent
            } else {
                self.out.stacks.child(new_parent, frame as u64)
            };
        }
        node_map
    }

    /// A window's counters, joined to their series.
    fn add_counters(&mut self, counters: Vec<CounterRecord>, shift: &impl Fn(u64) -> u64) {
        for mut c in counters {
            c.time_ns.iter_mut().for_each(|t| *t = shift(*t));
            match self.counters.get_mut(&(c.pid, c.name.clone())) {
                Some(e) => {
                    e.time_ns.extend(c.time_ns);
                    e.count.extend(c.count);
                }
                None => {
                    self.counters.insert((c.pid, c.name.clone()), c);
                }
            }
        }
    }

    /// Where the window added last starts, on the merged clock: with
    /// windows added oldest first, what ended before it has nothing more to
    /// come ([`Merger::take_ended`]'s cut).
    pub fn last_start_ns(&self) -> u64 {
        self.last_start_ns
    }

    /// The merged libraries, frames and stacks (and times, totals,
    /// warnings): what a process taken out by [`Merger::take_ended`] is
    /// written with. Its `processes`, `counters` and `cpu_tracks` are empty
    /// until [`Merger::finish`].
    pub fn tables(&self) -> &Recording {
        &self.out
    }

    /// Take out the processes that ended at or before `before_ns` (every
    /// thread too), threads sorted as [`Merger::finish`] sorts them, with the
    /// counters of their pids (unless another process still held has that
    /// pid). No later window adds to them when `before_ns` is a cut a
    /// window earlier than the last one added: a record drained late still
    /// belongs to the window of its time.
    pub fn take_ended(&mut self, before_ns: u64) -> (Vec<ProcessRecord>, Vec<CounterRecord>) {
        let ended = |p: &ProcessRecord| {
            p.end_ns.is_some_and(|e| e <= before_ns)
                && p.threads
                    .iter()
                    .all(|t| t.end_ns.is_none_or(|e| e <= before_ns))
        };
        let keys: Vec<(u32, Option<u64>)> = self
            .processes
            .iter()
            .filter(|(_, p)| ended(p))
            .map(|(k, _)| *k)
            .collect();
        let mut taken: Vec<ProcessRecord> = keys
            .iter()
            .filter_map(|k| self.processes.remove(k))
            .collect();
        for p in &mut taken {
            finish_process(p);
        }
        taken.sort_by_key(|p| (p.pid, p.start_ns));
        let held: rustc_hash::FxHashSet<u32> = self.processes.keys().map(|k| k.0).collect();
        let mut counters = Vec::new();
        for p in &taken {
            if held.contains(&p.pid) {
                continue;
            }
            let names: Vec<(u32, String)> = self
                .counters
                .keys()
                .filter(|k| k.0 == p.pid)
                .cloned()
                .collect();
            counters.extend(names.iter().filter_map(|k| self.counters.remove(k)));
        }
        counters.sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
        (taken, counters)
    }

    /// Take out the columns and markers of every thread, and the markers of
    /// every CPU track, still held that has at least `min` records, with
    /// whose they are, in their order: `record` keeps them on disk until it
    /// writes their thread (a server's threads live the whole recording, and
    /// their records were most of what `record`'s memory grew by). What is
    /// added later follows them ([`ThreadPart::append`]).
    pub fn take_parts(&mut self, min: usize) -> Vec<(TrackKey, ThreadPart)> {
        let mut taken = Vec::new();
        for p in self.processes.values_mut() {
            for t in &mut p.threads {
                let records = t.samples.time_ns.len() + t.off_cpu.time_ns.len() + t.markers.len();
                if records >= min.max(1) {
                    taken.push((TrackKey::of(p.pid, p.start_ns, t), ThreadPart::take(t)));
                }
            }
        }
        for (&cpu, markers) in &mut self.cpu_tracks {
            if markers.len() >= min.max(1) {
                let part = ThreadPart {
                    markers: std::mem::take(markers),
                    ..Default::default()
                };
                taken.push((TrackKey::Cpu(cpu), part));
            }
        }
        taken
    }

    /// The merged recording.
    pub fn finish(self) -> Recording {
        let mut out = self.out;
        let mut processes: Vec<ProcessRecord> = self.processes.into_values().collect();
        for p in &mut processes {
            finish_process(p);
        }
        processes.sort_by_key(|p| (p.pid, p.start_ns));
        out.processes = processes;
        let mut counters: Vec<CounterRecord> = self.counters.into_values().collect();
        counters.sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
        out.counters = counters;
        out.cpu_tracks = self.cpu_tracks.into_iter().collect();
        out
    }
}

/// A window's times on the first window's clock (`base`: its monotonic ns
/// and wall ms).
fn shift_of(base: (u64, f64), w: &Recording) -> impl Fn(u64) -> u64 {
    let wall_delta_ns = ((w.start_wall_ms - base.1) * 1e6).round() as i64;
    let mono_delta = w.start_ns as i64 - base.0 as i64;
    // Same boot: the monotonic clock already agrees (to NTP slew).
    let delta = if (wall_delta_ns - mono_delta).abs() < 1_000_000_000 {
        0
    } else {
        wall_delta_ns - mono_delta
    };
    move |t: u64| (t as i64 + delta).max(0) as u64
}

/// `f`'s index in `frames`, pushed there if no equal frame is: found by
/// its hash, checked against the frame at that index.
fn intern_frame(
    by_hash: &mut FxHashMap<u64, u32>,
    by_value: &mut FxHashMap<FrameRecord, u32>,
    frames: &mut Vec<FrameRecord>,
    f: FrameRecord,
) -> u32 {
    use std::hash::BuildHasher;
    let hash = rustc_hash::FxBuildHasher.hash_one(&f);
    let next = frames.len() as u32;
    match by_hash.entry(hash) {
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(next);
            frames.push(f);
            next
        }
        std::collections::hash_map::Entry::Occupied(o) if frames[*o.get() as usize] == f => {
            *o.get()
        }
        std::collections::hash_map::Entry::Occupied(_) => match by_value.get(&f) {
            Some(&i) => i,
            None => {
                by_value.insert(f.clone(), next);
                frames.push(f);
                next
            }
        },
    }
}

/// A merged process's threads in time order, the main thread first.
fn finish_process(p: &mut ProcessRecord) {
    for t in &mut p.threads {
        sort_thread(t);
    }
    p.threads.sort_by_key(|t| (t.tid != p.pid, t.tid));
}

fn shift_marker(m: &mut MarkerRecord, shift: &impl Fn(u64) -> u64, node: &impl Fn(u32) -> u32) {
    match m {
        MarkerRecord::OffCpu {
            start_ns,
            end_ns,
            waker_stack,
            ..
        } => {
            *start_ns = shift(*start_ns);
            *end_ns = shift(*end_ns);
            *waker_stack = waker_stack.map(node);
        }
        MarkerRecord::Io {
            start_ns,
            issue_ns,
            done_ns,
            stack,
            ..
        } => {
            *start_ns = shift(*start_ns);
            *issue_ns = shift(*issue_ns);
            *done_ns = shift(*done_ns);
            *stack = stack.map(node);
        }
        MarkerRecord::OnCpu {
            start_ns, end_ns, ..
        }
        | MarkerRecord::ShortWaits {
            start_ns, end_ns, ..
        } => {
            *start_ns = shift(*start_ns);
            *end_ns = shift(*end_ns);
        }
    }
}

fn shift_process(p: &mut ProcessRecord, shift: &impl Fn(u64) -> u64, node: &impl Fn(u32) -> u32) {
    p.start_ns = p.start_ns.map(shift);
    p.end_ns = p.end_ns.map(shift);
    for t in &mut p.threads {
        t.start_ns = t.start_ns.map(shift);
        t.end_ns = t.end_ns.map(shift);
        t.samples.time_ns.iter_mut().for_each(|x| *x = shift(*x));
        t.samples.stack.iter_mut().for_each(|s| *s = node(*s));
        t.off_cpu.time_ns.iter_mut().for_each(|x| *x = shift(*x));
        t.off_cpu.stack.iter_mut().for_each(|s| *s = node(*s));
        for m in &mut t.markers {
            shift_marker(m, shift, node);
        }
    }
}

/// Join `p`'s threads and facts into `into` (the same process, another window).
///
/// A folded track ([`ProcessRecord::folded`]) goes under a member's pid and
/// the earliest start, so it can meet that member's own record from a
/// window outside the compacted run (a late record carried past the cut):
/// the member is one of the track's, which keeps its name, count, span,
/// executable and cgroup. Two tracks under one key stand for their members
/// together (a member of both, which no fold makes, would count twice).
fn merge_process(into: &mut ProcessRecord, p: ProcessRecord) {
    let track = into.folded > 0 || p.folded > 0;
    if track {
        // The track's span covers its members', whichever comes first.
        into.end_ns = into.end_ns.max(p.end_ns);
        if p.folded > 0 {
            into.exe = p.exe.clone();
            into.cgroup = p.cgroup.clone();
        }
    } else {
        into.exe = p.exe.clone().or(into.exe.take());
        into.end_ns = p.end_ns.or(into.end_ns);
        into.cgroup = p.cgroup.clone().or(into.cgroup.take());
    }
    match (into.folded, p.folded) {
        (0, 0) => {
            if !p.name.is_empty() {
                into.name = p.name;
            }
            if !p.cmdline.is_empty() {
                into.cmdline = p.cmdline;
            }
        }
        (_, 0) => {}
        (counted, more) => {
            let base = p.base_name().to_string();
            let members = counted.saturating_add(more);
            super::fold::label_track(into, &base, members);
        }
    }
    for t in p.threads {
        match into
            .threads
            .iter_mut()
            .find(|x| x.tid == t.tid && x.start_ns == t.start_ns)
        {
            Some(x) => {
                if !t.name.is_empty() {
                    x.name = t.name;
                }
                x.end_ns = if track {
                    x.end_ns.max(t.end_ns)
                } else {
                    t.end_ns.or(x.end_ns)
                };
                x.switches = t.switches.or(x.switches);
                x.samples.time_ns.extend(t.samples.time_ns);
                x.samples.stack.extend(t.samples.stack);
                x.samples.cpu_delta_ns.extend(t.samples.cpu_delta_ns);
                x.samples.cpu.extend(t.samples.cpu);
                x.off_cpu.time_ns.extend(t.off_cpu.time_ns);
                x.off_cpu.stack.extend(t.off_cpu.stack);
                x.off_cpu.duration_ns.extend(t.off_cpu.duration_ns);
                x.markers.extend(t.markers);
            }
            None => into.threads.push(t),
        }
    }
    if into.folded > 0 {
        // A member's thread joined the track's: the track's name stays on it.
        if let Some(t) = into.threads.first_mut() {
            t.name = into.name.clone();
        }
    }
}

/// Sort a thread's columns by time (windows may have arrived in any order).
pub fn sort_thread(t: &mut ThreadRecord) {
    let s = &mut t.samples;
    if !s.time_ns.windows(2).all(|w| w[0] <= w[1]) {
        let mut idx: Vec<usize> = (0..s.time_ns.len()).collect();
        idx.sort_by_key(|&i| s.time_ns[i]);
        s.time_ns = idx.iter().map(|&i| s.time_ns[i]).collect();
        s.stack = idx.iter().map(|&i| s.stack[i]).collect();
        s.cpu_delta_ns = idx.iter().map(|&i| s.cpu_delta_ns[i]).collect();
        s.cpu = idx.iter().map(|&i| s.cpu[i]).collect();
    }
    let o = &mut t.off_cpu;
    if !o.time_ns.windows(2).all(|w| w[0] <= w[1]) {
        let mut idx: Vec<usize> = (0..o.time_ns.len()).collect();
        idx.sort_by_key(|&i| o.time_ns[i]);
        o.time_ns = idx.iter().map(|&i| o.time_ns[i]).collect();
        o.stack = idx.iter().map(|&i| o.stack[i]).collect();
        o.duration_ns = idx.iter().map(|&i| o.duration_ns[i]).collect();
    }
}

/// Add a window's totals to a sum.
pub fn add_stats(into: &mut RecordingStats, s: &RecordingStats) {
    into.samples += s.samples;
    into.samples_kept += s.samples_kept;
    into.lost_samples += s.lost_samples;
    into.kernel_stack_failures += s.kernel_stack_failures;
    into.user_stack_failures += s.user_stack_failures;
    into.handovers_skipped += s.handovers_skipped;
    into.python_frames_unnamed += s.python_frames_unnamed;
    into.js_frames_unnamed += s.js_frames_unnamed;
    into.python_codes_replaced += s.python_codes_replaced;
    into.tracer_bytes += s.tracer_bytes;
    into.samples_ring_peak = into.samples_ring_peak.max(s.samples_ring_peak);
    into.events_ring_peak = into.events_ring_peak.max(s.events_ring_peak);
    into.tracepoint_runs_missed += s.tracepoint_runs_missed;
    into.lost_sideband += s.lost_sideband;
    into.malformed += s.malformed;
    into.off_cpu_intervals += s.off_cpu_intervals;
    into.off_cpu_folded += s.off_cpu_folded;
    into.off_cpu_end_inferred += s.off_cpu_end_inferred;
    into.io_requests += s.io_requests;
    into.lost_events += s.lost_events;
    into.lost_stacks += s.lost_stacks;
    into.stack_records += s.stack_records;
    into.stack_read_failures += s.stack_read_failures;
    into.stacks_not_kept += s.stacks_not_kept;
    into.lost_state += s.lost_state;
    into.io_untracked += s.io_untracked;
    into.processes_without_data += s.processes_without_data;
    into.unwind.unwinds += s.unwind.unwinds;
    into.unwind.reached_root += s.unwind.reached_root;
    into.unwind.copy_exhausted += s.unwind.copy_exhausted;
    into.unwind.copy_exhausted_in_profiler += s.unwind.copy_exhausted_in_profiler;
    into.unwind.copy_exhausted_at_size += s.unwind.copy_exhausted_at_size;
    into.unwind.no_unwind_info += s.unwind.no_unwind_info;
    into.unwind.bad_return_address += s.unwind.bad_return_address;
    into.unwind.unwind_ns += s.unwind.unwind_ns;
    into.unwind.unwinds_here += s.unwind.unwinds_here;
    into.unwind.copied_bytes += s.unwind.copied_bytes;
}

#[cfg(test)]
mod tests;
