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

use rustc_hash::FxHashMap;

use super::recording::*;
use super::stack_tree::NO_PARENT;

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

/// One recording of `windows`; see the module doc. Empty input, empty output.
pub fn merge(mut windows: Vec<Recording>) -> Recording {
    windows.sort_by(|a, b| a.start_wall_ms.total_cmp(&b.start_wall_ms));
    if windows.len() == 1 {
        return windows.pop().expect("one");
    }
    let mut merger = Merger::default();
    for w in windows {
        merger.add(w);
    }
    merger.finish()
}

/// Windows merged one at a time, oldest first (what [`merge`] does with a
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
}

impl Merger {
    /// Merge the next window (windows come oldest first).
    pub fn add(&mut self, w: Recording) {
        let out = &mut self.out;
        let base = *self.base.get_or_insert_with(|| {
            out.start_ns = w.start_ns;
            out.start_wall_ms = w.start_wall_ms;
            out.end_ns = w.start_ns;
            out.interval_ms = w.interval_ms;
            (w.start_ns, w.start_wall_ms)
        });
        // This window's times on the first window's clock.
        let shift = |t: u64| -> u64 {
            let wall_delta_ns = ((w.start_wall_ms - base.1) * 1e6).round() as i64;
            let mono_delta = w.start_ns as i64 - base.0 as i64;
            // Same boot: the monotonic clock already agrees (to NTP slew).
            let delta = if (wall_delta_ns - mono_delta).abs() < 1_000_000_000 {
                0
            } else {
                wall_delta_ns - mono_delta
            };
            (t as i64 + delta).max(0) as u64
        };
        out.end_ns = out.end_ns.max(shift(w.end_ns));
        self.last_start_ns = shift(w.start_ns);
        out.off_cpu |= w.off_cpu;
        let libs = &mut self.libs;
        let lib_map: Vec<u32> = w
            .libs
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
            .collect();
        let frame_map: Vec<u32> = w
            .frames
            .into_iter()
            .map(|mut f| {
                if f.lib != NO_LIB {
                    f.lib = lib_map.get(f.lib as usize).copied().unwrap_or(NO_LIB);
                }
                intern_frame(
                    &mut self.frame_by_hash,
                    &mut self.frame_by_value,
                    &mut out.frames,
                    f,
                )
            })
            .collect();
        // Stacks: each node re-interned once (parents come first).
        let mut node_map: Vec<u32> = vec![NO_PARENT; w.stacks.len()];
        for n in 0..w.stacks.len() as u32 {
            let parent = w.stacks.parent(n);
            let new_parent = if parent == NO_PARENT {
                NO_PARENT
            } else {
                node_map[parent as usize]
            };
            let frame = frame_map[w.stacks.key(n) as usize];
            node_map[n as usize] = out.stacks.child(new_parent, frame as u64);
        }
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
        for mut c in w.counters {
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
        for (cpu, markers) in w.cpu_tracks {
            self.cpu_tracks
                .entry(cpu)
                .or_default()
                .extend(markers.into_iter().map(|mut m| {
                    shift_marker(&mut m, &shift, &node);
                    m
                }));
        }
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
fn merge_process(into: &mut ProcessRecord, p: ProcessRecord) {
    if !p.name.is_empty() {
        into.name = p.name;
    }
    into.exe = p.exe.or(into.exe.take());
    if !p.cmdline.is_empty() {
        into.cmdline = p.cmdline;
    }
    into.end_ns = p.end_ns.or(into.end_ns);
    into.cgroup = p.cgroup.or(into.cgroup.take());
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
                x.end_ns = t.end_ns.or(x.end_ns);
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
    into.unwind.no_unwind_info += s.unwind.no_unwind_info;
    into.unwind.bad_return_address += s.unwind.bad_return_address;
    into.unwind.unwind_ns += s.unwind.unwind_ns;
    into.unwind.unwinds_here += s.unwind.unwinds_here;
}

impl Recording {
    /// Keep only what lies in [start_ns, end_ns] (this recording's clock):
    /// samples outside go, intervals and markers are cut to the range.
    pub fn clip(&mut self, start_ns: u64, end_ns: u64) {
        let inside = |t: u64| t >= start_ns && t <= end_ns;
        for p in &mut self.processes {
            for t in &mut p.threads {
                let s = &mut t.samples;
                let keep: Vec<bool> = s.time_ns.iter().map(|&x| inside(x)).collect();
                retain_by(&mut s.time_ns, &keep);
                retain_by(&mut s.stack, &keep);
                retain_by(&mut s.cpu_delta_ns, &keep);
                retain_by(&mut s.cpu, &keep);
                let o = &mut t.off_cpu;
                for i in 0..o.time_ns.len() {
                    let (a, b) = (
                        o.time_ns[i].max(start_ns),
                        (o.time_ns[i] + o.duration_ns[i]).min(end_ns),
                    );
                    o.time_ns[i] = a;
                    o.duration_ns[i] = b.saturating_sub(a);
                }
                let keep: Vec<bool> = o
                    .time_ns
                    .iter()
                    .zip(&o.duration_ns)
                    .map(|(&x, &d)| inside(x) && (d > 0 || x < end_ns))
                    .collect();
                retain_by(&mut o.time_ns, &keep);
                retain_by(&mut o.stack, &keep);
                retain_by(&mut o.duration_ns, &keep);
                t.markers.retain_mut(|m| clip_marker(m, start_ns, end_ns));
            }
            // A thread that started or ended in the range stays even without
            // data: the agent keeps a process of a few milliseconds that no
            // sample caught by its lifetime, and `show` must not lose it
            // (seen beside a compiler loop: 1 of 5 such processes gone).
            let lived_here =
                |t: &ThreadRecord| t.start_ns.is_some_and(inside) || t.end_ns.is_some_and(inside);
            p.threads.retain(|t| {
                !t.samples.time_ns.is_empty()
                    || !t.off_cpu.time_ns.is_empty()
                    || !t.markers.is_empty()
                    || lived_here(t)
            });
        }
        self.processes.retain(|p| !p.threads.is_empty());
        for c in &mut self.counters {
            let keep: Vec<bool> = c.time_ns.iter().map(|&x| inside(x)).collect();
            // A level's changes before the first kept sample move into its base.
            if let Some(base) = c.base.as_mut() {
                let first = keep.iter().position(|&k| k).unwrap_or(keep.len());
                *base += c.count.iter().take(first).sum::<f64>();
            }
            retain_by(&mut c.time_ns, &keep);
            retain_by(&mut c.count, &keep);
        }
        self.counters.retain(|c| !c.time_ns.is_empty());
        for (_, markers) in &mut self.cpu_tracks {
            markers.retain_mut(|m| clip_marker(m, start_ns, end_ns));
        }
        self.start_wall_ms += (start_ns as f64 - self.start_ns as f64).max(0.0) / 1e6;
        self.start_ns = self.start_ns.max(start_ns);
        self.end_ns = self.end_ns.min(end_ns).max(self.start_ns);
    }

    /// Keep only the processes `keep` accepts.
    pub fn retain_processes(&mut self, keep: impl Fn(&ProcessRecord) -> bool) {
        self.processes.retain(|p| keep(p));
        let pids: rustc_hash::FxHashSet<u32> = self.processes.iter().map(|p| p.pid).collect();
        self.counters
            .retain(|c| c.pid == 0 || pids.contains(&c.pid));
    }

    /// Samples in the recording (on-CPU).
    pub fn sample_count(&self) -> u64 {
        self.processes
            .iter()
            .flat_map(|p| &p.threads)
            .map(|t| t.samples.time_ns.len() as u64)
            .sum()
    }
}

fn retain_by<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// Cut a marker to [start, end]; false if nothing of it is left.
fn clip_marker(m: &mut MarkerRecord, start: u64, end: u64) -> bool {
    let (s, e) = match m {
        MarkerRecord::OffCpu {
            start_ns, end_ns, ..
        }
        | MarkerRecord::OnCpu {
            start_ns, end_ns, ..
        }
        | MarkerRecord::ShortWaits {
            start_ns, end_ns, ..
        } => (start_ns, end_ns),
        MarkerRecord::Io {
            start_ns, done_ns, ..
        } => (start_ns, done_ns),
    };
    if *e < start || *s > end {
        return false;
    }
    // Short waits are sums over their span: what is cut keeps its share.
    let kept = if *s < start || *e > end {
        let span = (*e - *s).max(1) as f64;
        ((*e).min(end) - (*s).max(start)) as f64 / span
    } else {
        1.0
    };
    *s = (*s).max(start);
    *e = (*e).min(end);
    match m {
        MarkerRecord::Io { issue_ns, .. } => *issue_ns = (*issue_ns).clamp(start, end),
        MarkerRecord::ShortWaits {
            off_cpu_ns,
            waited_ns,
            landing_ns,
            ..
        } if kept < 1.0 => {
            *off_cpu_ns = (*off_cpu_ns as f64 * kept) as u64;
            *waited_ns = (*waited_ns as f64 * kept) as u64;
            *landing_ns = (*landing_ns as f64 * kept) as u64;
        }
        _ => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32, start_ns: Option<u64>, end_ns: Option<u64>) -> ThreadRecord {
        ThreadRecord {
            tid,
            name: "brief".into(),
            start_ns,
            end_ns,
            samples: ThreadSamples::default(),
            off_cpu: OffCpuSamples::default(),
            markers: Vec::new(),
            switches: None,
        }
    }

    fn process(pid: u32, t: ThreadRecord) -> ProcessRecord {
        ProcessRecord {
            pid,
            name: "brief".into(),
            exe: None,
            cmdline: String::new(),
            start_ns: t.start_ns,
            end_ns: t.end_ns,
            cgroup: None,
            profiler: false,
            threads: vec![t],
        }
    }

    /// Check that a frame is found by its hash only when the frame at that
    /// hash's index is equal: one whose hash another frame had first gets
    /// a row of its own, found again by value; equal frames share one.
    #[test]
    fn frames_with_one_hash_stay_apart() {
        use std::hash::BuildHasher;
        let frame = |address: u64| FrameRecord {
            lib: NO_LIB,
            address,
            kernel: false,
            symbols: Default::default(),
            pseudo: false,
        };
        let (mut by_hash, mut by_value, mut frames) =
            (FxHashMap::default(), FxHashMap::default(), Vec::new());
        assert_eq!(
            super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(1)),
            0
        );
        // A collision, made: frame 2's hash points at frame 1's row.
        by_hash.insert(rustc_hash::FxBuildHasher.hash_one(frame(2)), 0);
        assert_eq!(
            super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(2)),
            1
        );
        assert_eq!(
            super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(2)),
            1
        );
        assert_eq!(
            super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(1)),
            0
        );
        assert_eq!(
            super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(3)),
            2
        );
        assert_eq!(frames, vec![frame(1), frame(2), frame(3)]);
    }

    /// Check that clipping keeps a process that no sample caught but that
    /// started or ended inside the range, and drops one that lived wholly
    /// outside it or has neither data nor a lifetime there.
    #[test]
    fn clip_keeps_unsampled_processes_that_lived_in_the_range() {
        let mut rec = Recording {
            start_ns: 0,
            end_ns: 10_000,
            ..Default::default()
        };
        rec.processes = vec![
            process(1, thread(1, Some(2_000), Some(2_020))),
            process(2, thread(2, None, Some(4_500))),
            process(3, thread(3, Some(100), Some(200))),
            process(4, thread(4, None, None)),
        ];
        rec.clip(1_000, 5_000);
        let kept: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
        assert_eq!(kept, vec![1, 2]);
    }

    /// Check that the merger takes out only what ended by the cut (its
    /// threads joined across windows, sorted) with its counters, keeps what
    /// still runs or ended later, and finishes with the rest.
    #[test]
    fn a_part_put_back_comes_first_and_columns_are_in_time_order() {
        let mut t = thread(1, None, None);
        t.samples = ThreadSamples {
            time_ns: vec![30],
            stack: vec![3],
            cpu_delta_ns: vec![3],
            cpu: vec![0],
        };
        t.off_cpu = OffCpuSamples {
            time_ns: vec![25],
            stack: vec![2],
            duration_ns: vec![1],
        };
        let mut earlier = ThreadPart::default();
        earlier.samples = ThreadSamples {
            time_ns: vec![10, 20],
            stack: vec![1, 2],
            cpu_delta_ns: vec![1, 2],
            cpu: vec![1, 1],
        };
        // An interval recorded at its end: out of start order.
        earlier.off_cpu = OffCpuSamples {
            time_ns: vec![26, 5],
            stack: vec![9, 8],
            duration_ns: vec![2, 3],
        };
        earlier.prepend_to(&mut t);
        assert_eq!(t.samples.time_ns, vec![10, 20, 30]);
        assert_eq!(t.samples.stack, vec![1, 2, 3]);
        assert_eq!(t.off_cpu.time_ns, vec![5, 25, 26]);
        assert_eq!(t.off_cpu.stack, vec![8, 2, 9]);
        assert_eq!(t.off_cpu.duration_ns, vec![3, 1, 2]);
    }

    #[test]
    fn parts_are_taken_from_threads_and_cpus_that_have_enough() {
        let short = |at: u64| MarkerRecord::ShortWaits {
            start_ns: at,
            end_ns: at + 1,
            count: 1,
            off_cpu_ns: 1,
            waited_ns: 1,
            landing_ns: 0,
            waker: ShortWaker::Nobody,
        };
        let mut busy = thread(1, Some(10), None);
        busy.markers = (0..5).map(short).collect();
        let mut quiet = thread(2, None, None);
        quiet.markers = vec![short(7)];
        let mut p = process(1, busy);
        p.threads.push(quiet);
        let mut m = Merger::default();
        m.add(Recording {
            processes: vec![p],
            cpu_tracks: vec![(0, (0..3).map(short).collect()), (1, vec![short(9)])],
            ..Default::default()
        });
        let mut taken = m.take_parts(3);
        taken.sort_by_key(|(o, _)| format!("{o:?}"));
        let owners: Vec<TrackKey> = taken.iter().map(|(o, _)| *o).collect();
        assert_eq!(
            owners,
            vec![
                TrackKey::Cpu(0),
                TrackKey::Thread {
                    pid: 1,
                    process_start_ns: Some(10),
                    tid: 1,
                    thread_start_ns: Some(10),
                },
            ]
        );
        assert_eq!(
            taken[1].1.markers,
            (0..5).map(short).collect::<Vec<_>>(),
            "in their order"
        );
        // What is left: the quiet thread's and CPU 1's, and nothing twice.
        assert!(m.take_parts(3).is_empty());
        let rest = m.finish();
        let left: usize = rest.processes[0]
            .threads
            .iter()
            .map(|t| t.markers.len())
            .sum();
        assert_eq!(left, 1);
        assert_eq!(
            rest.cpu_tracks
                .iter()
                .map(|(_, m)| m.len())
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
    }

    #[test]
    fn take_ended_takes_only_what_ended_by_the_cut() {
        // Each window's one stack: node 0, one frame.
        let window = |start: u64, end: u64, processes: Vec<ProcessRecord>| {
            let mut stacks = super::super::stack_tree::StackTree::new();
            stacks.child(NO_PARENT, 0);
            Recording {
                start_ns: start,
                start_wall_ms: start as f64 / 1e6,
                end_ns: end,
                processes,
                frames: vec![FrameRecord {
                    lib: NO_LIB,
                    address: 0x10,
                    kernel: false,
                    symbols: Default::default(),
                    pseudo: false,
                }],
                stacks,
                counters: vec![CounterRecord {
                    name: "CPU".into(),
                    category: "CPU".into(),
                    description: String::new(),
                    pid: 1,
                    time_ns: vec![start],
                    count: vec![1.0],
                    base: None,
                }],
                ..Default::default()
            }
        };
        let with_sample = |mut t: ThreadRecord, at: u64| {
            t.samples = ThreadSamples {
                time_ns: vec![at],
                stack: vec![0],
                cpu_delta_ns: vec![0],
                cpu: vec![0],
            };
            t
        };
        let mut m = Merger::default();
        // Process 1 runs in both windows and ends in the second; process 2
        // ended in the first; process 3 runs on.
        let mut p1 = process(1, with_sample(thread(1, Some(10), None), 100));
        p1.end_ns = None;
        m.add(window(
            0,
            1_000,
            vec![
                p1,
                process(2, thread(2, Some(20), Some(500))),
                process(3, thread(3, Some(30), None)),
            ],
        ));
        let mut p1 = process(1, with_sample(thread(1, Some(10), Some(1_500)), 1_200));
        p1.start_ns = Some(10);
        m.add(window(1_000, 2_000, vec![p1]));
        let (taken, counters) = m.take_ended(1_000);
        assert_eq!(
            taken.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![2],
            "only what ended by the cut"
        );
        assert!(counters.is_empty(), "process 2 has no counter");
        let (taken, counters) = m.take_ended(2_000);
        assert_eq!(taken.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1]);
        assert_eq!(
            taken[0].threads[0].samples.time_ns,
            vec![100, 1_200],
            "one thread, both windows' samples"
        );
        assert_eq!(counters.len(), 1);
        assert_eq!(
            counters[0].time_ns,
            vec![0, 1_000],
            "its counter from both windows"
        );
        let rest = m.finish();
        assert_eq!(
            rest.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![3]
        );
        assert!(rest.counters.is_empty());
        assert_eq!((rest.start_ns, rest.end_ns), (0, 2_000));
    }
}
