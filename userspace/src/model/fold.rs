//! Brief processes of one name, folded into one track.
//!
//! In: processes that ended, taken out of a merge one window at a time
//! ([`super::merge::Merger::take_ended`]), or a compacted bucket's
//! ([`fold_within`]). Out: those that stay tracks of their own, and at the
//! end one process per name standing for all the brief processes of that
//! name (their samples, off-CPU time and markers joined in time order, on
//! one thread; [`ProcessRecord::folded`] says how many). A track folded
//! before joins its name's.
//!
//! Why: an hour of the agent's store beside a fork storm holds 2.6 million
//! processes that each lived about a millisecond. As one track each, `show`
//! took 4 GB and 77 s and wrote a 308-MiB profile that no browser opens
//! (`sysprof show --since 15:40 --until 17:00` of the bench's soak store, at
//! 80e961b), for 109,121 samples. A name run thousands of times is one thing
//! to a reader ("the build ran cc1 2,000 times"), as in perf's `--sort comm`;
//! a name run a few times keeps a track per process, with its pid (a user
//! looking for one short process still finds it). So a name's first
//! [`FOLD_AFTER`] brief processes are held; the next one folds them all into
//! the name's track, and every later one joins it. What is held and how many
//! names get a track of their own are bounded too, for names an attacker
//! can make up by the million.

use rustc_hash::FxHashMap;

use super::merge::sort_thread;
use super::recording::{
    MarkerRecord, OffCpuSamples, ProcessRecord, Recording, ShortWaker, ThreadRecord,
};

/// A process is brief when it started and ended less than this apart.
pub const BRIEF_NS: u64 = 1_000_000_000;
/// A name's brief processes keep tracks of their own up to this many.
pub const FOLD_AFTER: usize = 16;
/// Brief processes held as tracks of their own, at most (across names):
/// past it, each new one folds its name's.
pub const MAX_HELD: usize = 10_000;
/// Names with a folded track, at most; past it, one more track takes the
/// brief processes of every other name.
pub const MAX_GROUPS: usize = 1_000;
/// The name of that last track.
pub const OTHER_NAMES: &str = "[brief processes of other names]";
/// Between a folded track's name and its count of processes.
pub const COUNT_SEPARATOR: &str = " ×";
/// On a folded track, what each member has one of (its off-CPU time at one
/// stack, its run of short waits) is summed per this span: 2.6 million
/// processes have 2.6 million runs of short waits.
pub const COARSE_NS: u64 = 1_000_000_000;

/// The folding of one range's processes; see the module doc.
#[derive(Default)]
pub struct Folder {
    held: FxHashMap<GroupKey, Vec<ProcessRecord>>,
    held_count: usize,
    groups: FxHashMap<GroupKey, Group>,
    /// Where each folded thread went, when asked for ([`fold_within`]: the
    /// wakers it names are moved there too).
    moved: Option<Moved>,
}

/// A track's processes: one name in one cgroup (`show --container` and the
/// exporters' container and unit labels keep theirs).
type GroupKey = (String, Option<String>);

/// Each folded thread by (pid, tid): its lifetime and its track's (pid,
/// tid). A pid reused within a run has several.
type Moved = FxHashMap<(u32, u32), Vec<(u64, u64, (u32, u32))>>;

/// What folding did, for the summary line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Folded {
    /// Brief processes folded.
    pub processes: u64,
    /// Tracks they were folded into.
    pub tracks: u64,
}

/// One name's folded track, and how many processes it stands for.
struct Group {
    track: ProcessRecord,
    members: u64,
    /// Its members' off-CPU time and runs of short waits, per [`COARSE_NS`].
    sums: SpanSums,
}

impl Default for Group {
    fn default() -> Group {
        Group {
            track: ProcessRecord::default(),
            members: 0,
            sums: SpanSums::new(COARSE_NS),
        }
    }
}

/// Off-CPU time and runs of short waits of one thread, summed per span of
/// time as they are added: one off-CPU entry per (span, stack), one run per
/// (span, waker), the first one's time, durations and counts added (totals
/// kept, the timeline the span's). Used where one entry each is more than
/// a reader needs: a folded track's members (both), a compacted store
/// segment's waits (runs only: `model::coarse` says why).
pub struct SpanSums {
    span_ns: u64,
    /// Where in the off-CPU columns each (span, stack) is summed.
    off_cpu_at: FxHashMap<(u64, u32), usize>,
    /// Where in the markers each (span, waker)'s run is.
    runs_at: FxHashMap<(u64, ShortWaker), usize>,
}

impl SpanSums {
    /// Sums over spans of `span_ns` (at least 1 ns).
    pub fn new(span_ns: u64) -> SpanSums {
        SpanSums {
            span_ns: span_ns.max(1),
            off_cpu_at: FxHashMap::default(),
            runs_at: FxHashMap::default(),
        }
    }

    /// Add an off-CPU interval to `into`, summed with its span's at `stack`.
    pub fn add_off_cpu(&mut self, into: &mut OffCpuSamples, time: u64, stack: u32, duration: u64) {
        match self.off_cpu_at.get(&(time / self.span_ns, stack)) {
            Some(&j) => {
                into.time_ns[j] = into.time_ns[j].min(time);
                into.duration_ns[j] += duration;
            }
            None => {
                self.off_cpu_at
                    .insert((time / self.span_ns, stack), into.time_ns.len());
                into.time_ns.push(time);
                into.stack.push(stack);
                into.duration_ns.push(duration);
            }
        }
    }

    /// Add a marker to `into`: a run of short waits summed with its span's
    /// of the same waker, any other marker as it is.
    pub fn add_marker(&mut self, into: &mut Vec<MarkerRecord>, m: MarkerRecord) {
        let MarkerRecord::ShortWaits {
            start_ns,
            end_ns,
            count,
            off_cpu_ns,
            waited_ns,
            landing_ns,
            waker,
        } = m
        else {
            into.push(m);
            return;
        };
        let key = (start_ns / self.span_ns, waker);
        if let Some(MarkerRecord::ShortWaits {
            start_ns: s,
            end_ns: e,
            count: c,
            off_cpu_ns: o,
            waited_ns: w,
            landing_ns: l,
            ..
        }) = self.runs_at.get(&key).and_then(|&j| into.get_mut(j))
        {
            *s = (*s).min(start_ns);
            *e = (*e).max(end_ns);
            *c = c.saturating_add(count);
            *o += off_cpu_ns;
            *w += waited_ns;
            *l += landing_ns;
            return;
        }
        self.runs_at.insert(key, into.len());
        into.push(m);
    }
}

/// Whether `p` is brief: known start and end, less than [`BRIEF_NS`] apart;
/// the profiler itself never is.
pub fn is_brief(p: &ProcessRecord) -> bool {
    !p.profiler
        && matches!((p.start_ns, p.end_ns), (Some(s), Some(e)) if e.saturating_sub(s) < BRIEF_NS)
}

/// Fold `rec`'s brief processes that began and ended inside its range, as
/// `show` folds a range's: the store's compaction of a bucket (a fork
/// storm's minute is 70,000 processes of one name, most of its bytes).
/// One that began before the range keeps its track, as its part in the
/// segments before does. The folded processes' counters go with them (a
/// folded track's would be one member's, the memory of a millisecond's
/// process).
pub fn fold_within(rec: &mut Recording) -> Folded {
    let mut folder = Folder {
        moved: Some(FxHashMap::default()),
        ..Folder::default()
    };
    let mut kept = Vec::new();
    // Began and ended inside: a window's process may end after its cut (the
    // sideband's rest is applied), and its next window has it again.
    let (start, end) = (rec.start_ns, rec.end_ns);
    for p in std::mem::take(&mut rec.processes) {
        if p.start_ns.is_some_and(|s| s >= start) && p.end_ns.is_some_and(|e| e <= end) {
            kept.extend(folder.add(p));
        } else {
            kept.push(p);
        }
    }
    let mut moved = folder.moved.take().unwrap_or_default();
    let (held, groups, folded) = folder.finish();
    kept.extend(held);
    // A thread kept on its own is where it was (a reused pid is not moved).
    for p in &kept {
        for t in &p.threads {
            note_thread(&mut moved, p, t, (p.pid, t.tid));
        }
    }
    kept.extend(groups);
    // A wait a folded process ended names its track as its waker: a fork
    // loop's waits, each ended by another child, are then one run a minute
    // (`model::coarse` sums runs per waker), and the waker has a name. Only
    // where one thread of that (pid, tid) lived during the wait.
    for t in kept.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        for m in &mut t.markers {
            let (from, to, pid, tid) = match m {
                MarkerRecord::OffCpu {
                    start_ns,
                    end_ns,
                    waker: Some(w),
                    ..
                } => (*start_ns, *end_ns, &mut w.pid, &mut w.tid),
                MarkerRecord::ShortWaits {
                    start_ns,
                    end_ns,
                    waker: ShortWaker::Task { pid, tid },
                    ..
                } => (*start_ns, *end_ns, pid, tid),
                _ => continue,
            };
            let Some(lives) = moved.get(&(*pid, *tid)) else {
                continue;
            };
            let mut during = lives.iter().filter(|l| l.0 <= to && from <= l.1);
            if let (Some(&(_, _, track)), None) = (during.next(), during.next()) {
                (*pid, *tid) = track;
            }
        }
    }
    kept.sort_by_key(|p| (p.pid, p.start_ns));
    rec.processes = kept;
    rec.keep_counters_of_own_processes();
    folded
}

/// Note in `moved` that thread `t` of `p`, over its lifetime (its
/// process's where its own is not known), is now at `to` (pid, tid).
fn note_thread(moved: &mut Moved, p: &ProcessRecord, t: &ThreadRecord, to: (u32, u32)) {
    let from = t.start_ns.or(p.start_ns).unwrap_or(0);
    let until = t.end_ns.or(p.end_ns).unwrap_or(u64::MAX);
    moved
        .entry((p.pid, t.tid))
        .or_default()
        .push((from, until, to));
}

impl Folder {
    /// Take `p`, which ended: given back if it stays a track of its own (it
    /// is not brief), else held or folded. A track folded before (a
    /// compacted store segment's) joins its name's track at once, with the
    /// processes of that name held so far.
    pub fn add(&mut self, p: ProcessRecord) -> Option<ProcessRecord> {
        if p.folded == 0 && !is_brief(&p) {
            return Some(p);
        }
        let name: GroupKey = (p.base_name().to_string(), p.cgroup.clone());
        if let Some(group) = self.groups.get_mut(&name) {
            group.absorb(p, self.moved.as_mut());
            return None;
        }
        let folded_before = p.folded > 0;
        let held = self.held.entry(name.clone()).or_default();
        held.push(p);
        self.held_count += 1;
        if folded_before || held.len() > FOLD_AFTER || self.held_count > MAX_HELD {
            let members = self.held.remove(&name).unwrap_or_default();
            self.held_count -= members.len();
            let key = if self.groups.len() < MAX_GROUPS || self.groups.contains_key(&name) {
                name
            } else {
                (OTHER_NAMES.to_string(), name.1)
            };
            let group = self.groups.entry(key).or_default();
            for m in members {
                group.absorb(m, self.moved.as_mut());
            }
        }
        None
    }

    /// The processes still held (tracks of their own), one per folded
    /// name, and what was folded.
    pub fn finish(self) -> (Vec<ProcessRecord>, Vec<ProcessRecord>, Folded) {
        let held: Vec<ProcessRecord> = self.held.into_values().flatten().collect();
        let mut folded = Folded::default();
        let mut groups = Vec::new();
        for ((name, _), group) in self.groups {
            folded.processes = folded.processes.saturating_add(group.members);
            folded.tracks += 1;
            groups.push(group.finish(&name));
        }
        (held, groups, folded)
    }
}

impl Group {
    /// Join `p` into the track: its samples onto the one thread, its
    /// off-CPU intervals and runs of short waits summed into those of the
    /// same [`COARSE_NS`] span (the first one's time, durations and counts
    /// added: totals are kept, the timeline is the span's), its other
    /// markers as they are, its lifetime into the track's span. Summed as
    /// they come: 2.6 million members' runs of short waits held until the
    /// end took 400 MB.
    fn absorb(&mut self, p: ProcessRecord, moved: Option<&mut Moved>) {
        let t = &mut self.track;
        if self.members == 0 {
            t.pid = p.pid;
            t.exe = p.exe.clone();
            t.cgroup = p.cgroup.clone();
            t.start_ns = p.start_ns;
            t.threads.push(ThreadRecord {
                tid: p.pid,
                start_ns: p.start_ns,
                end_ns: p.end_ns,
                ..Default::default()
            });
        }
        if let Some(moved) = moved {
            for x in &p.threads {
                note_thread(moved, &p, x, (t.pid, t.pid));
            }
        }
        self.members = self.members.saturating_add(p.folded.max(1));
        if t.exe != p.exe {
            t.exe = None;
        }
        if t.cgroup != p.cgroup {
            t.cgroup = None;
        }
        let min = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.min(b)).or(a).or(b);
        let max = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.max(b)).or(a).or(b);
        t.start_ns = min(t.start_ns, p.start_ns);
        t.end_ns = max(t.end_ns, p.end_ns);
        let into = &mut t.threads[0];
        into.start_ns = t.start_ns;
        into.end_ns = t.end_ns;
        for x in p.threads {
            if into.name.is_empty() {
                into.name = x.name;
            }
            into.samples.time_ns.extend(x.samples.time_ns);
            into.samples.stack.extend(x.samples.stack);
            into.samples.cpu_delta_ns.extend(x.samples.cpu_delta_ns);
            into.samples.cpu.extend(x.samples.cpu);
            let off = x.off_cpu;
            for i in 0..off.time_ns.len() {
                self.sums.add_off_cpu(
                    &mut into.off_cpu,
                    off.time_ns[i],
                    off.stack[i],
                    off.duration_ns[i],
                );
            }
            for m in x.markers {
                self.sums.add_marker(&mut into.markers, m);
            }
            if let Some((v, i)) = x.switches {
                let (tv, ti) = into.switches.unwrap_or((0, 0));
                into.switches = Some((tv + v, ti + i));
            }
        }
    }

    /// The track as a process: named for what it stands for, its columns
    /// in time order (members end in any order).
    fn finish(mut self, name: &str) -> ProcessRecord {
        let t = &mut self.track;
        label_track(t, name, self.members);
        if let Some(thread) = t.threads.first_mut() {
            sort_thread(thread);
            thread.markers.sort_by_key(|m| match m {
                MarkerRecord::OffCpu { start_ns, .. }
                | MarkerRecord::Io { start_ns, .. }
                | MarkerRecord::OnCpu { start_ns, .. }
                | MarkerRecord::ShortWaits { start_ns, .. } => *start_ns,
            });
        }
        self.track
    }
}

/// Name `track` for the `members` brief processes named `name` it stands
/// for: its name, command line and main thread's name say the count.
pub fn label_track(track: &mut ProcessRecord, name: &str, members: u64) {
    track.name = format!("{name}{COUNT_SEPARATOR}{members}");
    track.folded = members;
    track.cmdline = format!(
        "{members} brief processes named {name} (each lived under {} s), folded into one track",
        BRIEF_NS / 1_000_000_000
    );
    if let Some(thread) = track.threads.first_mut() {
        // The front end labels a process's track with its main thread's
        // name: the count shows there.
        thread.name = track.name.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief(pid: u32, name: &str, start_ns: u64, samples: &[u64]) -> ProcessRecord {
        let mut t = ThreadRecord {
            tid: pid,
            name: name.into(),
            start_ns: Some(start_ns),
            end_ns: Some(start_ns + 1_000_000),
            ..Default::default()
        };
        for &s in samples {
            t.samples.time_ns.push(s);
            t.samples.stack.push(pid);
            t.samples.cpu_delta_ns.push(1_000_000);
            t.samples.cpu.push(0);
        }
        ProcessRecord {
            pid,
            name: name.into(),
            start_ns: Some(start_ns),
            end_ns: Some(start_ns + 1_000_000),
            threads: vec![t],
            ..Default::default()
        }
    }

    /// Check that a name's first 16 brief processes keep their tracks,
    /// that the 17th folds them all into one track whose samples are every
    /// member's in time order, that long processes are never folded, and
    /// that the count is said.
    #[test]
    fn a_name_run_often_is_one_track_and_a_rare_one_keeps_its_own() {
        let mut f = Folder::default();
        let mut kept = Vec::new();
        for i in 0..40u32 {
            // Added out of time order: the folded track sorts its samples.
            let start = 1_000_000_000 + u64::from(40 - i) * 10_000_000;
            kept.extend(f.add(brief(1000 + i, "true", start, &[start + 100])));
        }
        for i in 0..5u32 {
            kept.extend(f.add(brief(5000 + i, "brief", 2_000_000_000 + u64::from(i), &[])));
        }
        let mut long = brief(7000, "true", 0, &[5]);
        long.end_ns = Some(5_000_000_000);
        kept.extend(f.add(long));
        assert_eq!(kept.len(), 1, "only the long process is given back");
        let (held, groups, folded) = f.finish();
        assert_eq!(
            folded,
            Folded {
                processes: 40,
                tracks: 1
            }
        );
        assert_eq!(
            held.len(),
            5,
            "a name seen 5 times keeps a track per process"
        );
        assert!(held.iter().all(|p| p.name == "brief"));
        assert_eq!(groups.len(), 1);
        let group = &groups[0];
        assert_eq!(group.name, "true ×40");
        assert_eq!(group.threads.len(), 1);
        let times = &group.threads[0].samples.time_ns;
        assert_eq!(times.len(), 40, "every member's sample");
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
        assert_eq!(group.start_ns, Some(1_010_000_000));
        assert_eq!(
            group.end_ns,
            Some(1_000_000_000 + 40 * 10_000_000 + 1_000_000)
        );
    }

    /// Check that on a folded track, each member's off-CPU interval at one
    /// stack and its run of short waits are summed per second, totals kept.
    #[test]
    fn a_folded_track_sums_per_second_what_each_member_has_one_of() {
        let mut f = Folder::default();
        let waker = crate::model::recording::ShortWaker::Interrupt;
        for i in 0..100u32 {
            let start = 1_000_000_000 + u64::from(i) * 20_000_000;
            let mut p = brief(1000 + i, "true", start, &[]);
            let t = &mut p.threads[0];
            t.off_cpu.time_ns.push(start + 10);
            t.off_cpu.stack.push(7);
            t.off_cpu.duration_ns.push(300_000);
            t.markers.push(MarkerRecord::ShortWaits {
                start_ns: start,
                end_ns: start + 500_000,
                count: 3,
                off_cpu_ns: 200_000,
                waited_ns: 150_000,
                landing_ns: 0,
                waker,
            });
            assert!(f.add(p).is_none());
        }
        let (_, groups, _) = f.finish();
        let t = &groups[0].threads[0];
        // 100 members 20 ms apart from 1.0 s: 50 in each of 2 seconds.
        assert_eq!(t.off_cpu.time_ns.len(), 2);
        assert_eq!(t.off_cpu.duration_ns, vec![50 * 300_000, 50 * 300_000]);
        assert!(t.off_cpu.time_ns.windows(2).all(|w| w[0] <= w[1]));
        let runs: Vec<_> = t
            .markers
            .iter()
            .filter_map(|m| match m {
                MarkerRecord::ShortWaits {
                    count,
                    off_cpu_ns,
                    waited_ns,
                    ..
                } => Some((*count, *off_cpu_ns, *waited_ns)),
                _ => None,
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                (150, 50 * 200_000, 50 * 150_000),
                (150, 50 * 200_000, 50 * 150_000)
            ]
        );
    }

    fn counter(pid: u32, name: &str) -> crate::model::recording::CounterRecord {
        crate::model::recording::CounterRecord {
            name: name.into(),
            category: String::new(),
            description: String::new(),
            pid,
            time_ns: vec![1_000_000_000],
            count: vec![1.0],
            base: None,
        }
    }

    /// Check that a compacted bucket's brief processes are folded as `show`
    /// folds them (those that began before its range keep their tracks, as
    /// do a name's first 16), that the folded members' counters go with them,
    /// and that the folded track, read again by `show`'s folder beside later
    /// processes of its name, is one track of them all, its count their sum.
    #[test]
    fn a_bucket_folded_once_folds_again_with_its_name() {
        let mut rec = Recording {
            start_ns: 1_000_000_000,
            end_ns: 3_000_000_000,
            ..Default::default()
        };
        for i in 0..40u32 {
            let start = 1_000_000_000 + u64::from(i) * 10_000_000;
            rec.processes
                .push(brief(1000 + i, "true", start, &[start + 100]));
            rec.counters.push(counter(1000 + i, "RSS"));
        }
        // Began before the range: its part before is a track of its own.
        rec.processes
            .push(brief(900, "true", 999_000_000, &[999_500_000]));
        // Ends after it (the next run has it again): kept too.
        rec.processes
            .push(brief(950, "true", 2_999_500_000, &[2_999_600_000]));
        for i in 0..3u32 {
            rec.processes
                .push(brief(5000 + i, "rare", 2_000_000_000, &[]));
        }
        rec.counters.push(counter(0, "CPU usage"));
        // The loop that ran them: each wait of it ended by one of them.
        let mut parent = brief(1, "loop", 0, &[]);
        parent.end_ns = None;
        for i in 0..40u32 {
            parent.threads[0].markers.push(MarkerRecord::ShortWaits {
                start_ns: 1_000_000_000 + u64::from(i) * 10_000_000,
                end_ns: 1_000_000_000 + u64::from(i) * 10_000_000 + 500_000,
                count: 1,
                off_cpu_ns: 500_000,
                waited_ns: 500_000,
                landing_ns: 0,
                waker: ShortWaker::Task {
                    pid: 1000 + i,
                    tid: 1000 + i,
                },
            });
        }
        rec.processes.push(parent);
        let folded = fold_within(&mut rec);
        assert_eq!(
            folded,
            Folded {
                processes: 40,
                tracks: 1
            }
        );
        let names: Vec<(&str, u64)> = rec
            .processes
            .iter()
            .map(|p| (p.name.as_str(), p.folded))
            .collect();
        assert_eq!(names.iter().filter(|n| **n == ("true", 0)).count(), 2);
        assert_eq!(names.iter().filter(|n| **n == ("rare", 0)).count(), 3);
        assert!(names.contains(&("true ×40", 40)), "{names:?}");
        assert_eq!(rec.processes.len(), 7);
        assert_eq!(rec.sample_count(), 42);
        assert_eq!(
            rec.counters.iter().map(|c| c.pid).collect::<Vec<_>>(),
            vec![0],
            "a folded member's counter is not the track's"
        );
        let track = rec.processes.iter().find(|p| p.folded > 0).unwrap();
        assert_eq!(track.base_name(), "true");
        let to = (track.pid, track.threads[0].tid);
        let parent = rec.processes.iter().find(|p| p.name == "loop").unwrap();
        let wakers: Vec<_> = parent.threads[0]
            .markers
            .iter()
            .map(|m| match m {
                MarkerRecord::ShortWaits {
                    waker: ShortWaker::Task { pid, tid },
                    ..
                } => (*pid, *tid),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            wakers,
            vec![to; 40],
            "a wait a folded process ended names the track as its waker"
        );

        // As `show` reads it: the stored track and 5 later processes of its
        // name are one track of 45.
        let mut f = Folder::default();
        let mut own = Vec::new();
        for p in rec
            .processes
            .clone()
            .into_iter()
            .filter(|p| p.name != "loop")
        {
            own.extend(f.add(p));
        }
        for i in 0..5u32 {
            let start = 3_000_000_000 + u64::from(i);
            own.extend(f.add(brief(2000 + i, "true", start, &[start + 1])));
        }
        let (held, groups, folded) = f.finish();
        assert!(own.is_empty(), "every one is brief");
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].name, "true ×47", "40 + 5 + the two at the edges");
        assert_eq!(groups[0].folded, 47);
        assert_eq!(groups[0].threads[0].samples.time_ns.len(), 47);
        assert_eq!(folded.processes, 47);
        assert_eq!(held.len(), 3, "the rare ones keep their tracks");
    }

    /// Check that a name's made-up suffix is not taken for a count: only a
    /// track folded here has its name cut back.
    #[test]
    fn only_a_folded_track_has_a_base_name_apart() {
        let p = brief(1, "true ×40", 0, &[]);
        assert_eq!(p.base_name(), "true ×40");
        let mut q = p.clone();
        q.folded = 39;
        assert_eq!(q.base_name(), "true ×40", "its count is not 39");
        q.folded = 40;
        assert_eq!(q.base_name(), "true");
    }

    /// Check that names made up by the million neither hold more than
    /// `MAX_HELD` processes nor make more than `MAX_GROUPS` + 1 tracks.
    #[test]
    fn made_up_names_are_bounded() {
        let mut f = Folder::default();
        let n = (MAX_HELD + MAX_GROUPS * 3) as u32;
        for i in 0..n {
            assert!(f.add(brief(i, &format!("n{i}"), 1_000, &[])).is_none());
            assert!(f.held_count <= MAX_HELD + 1);
        }
        let (held, groups, folded) = f.finish();
        assert!(groups.len() <= MAX_GROUPS + 1, "{} tracks", groups.len());
        assert_eq!(groups.len() as u64, folded.tracks);
        assert!(held.len() <= MAX_HELD, "{} held", held.len());
        assert_eq!(
            folded.processes as usize + held.len(),
            n as usize,
            "every process is in one track"
        );
        assert!(groups.iter().any(|p| p.name.starts_with(OTHER_NAMES)));
    }
}
