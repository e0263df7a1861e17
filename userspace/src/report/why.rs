//! `sysprof report --why ID`: where a thread's off-CPU time went, charged
//! along the chain of who woke it.
//!
//! In: a profile's JSON (its off-CPU markers with reason, waker thread,
//! waker context and run delay; its block I/O markers; its on-CPU sample
//! times and stacks) and a tid or pid, with an optional time range. Out: the
//! thread's off-CPU total and a blame table that sums to it exactly, and its
//! longest waits each with where their time went; as text or as JSON.
//!
//! The charge of a wait of thread T (from its start to its wakeup; the rest,
//! up to when T ran again, is T's own run-queue delay) follows its waker W
//! over that span: the parts of the span W itself spent waiting are charged
//! along W's own waits and wakers, recursively, and the rest of the span W
//! was running. A wait ended from an interrupt is charged to the block I/O
//! request T had in flight (by device) if there was one, else to a timer
//! (hard IRQ) or a softirq; a wait with no waker seen, a waker not in the
//! profile, a cycle, or a chain deeper than [`MAX_DEPTH`] ends at what is
//! known. Every piece of T's waiting lands in exactly one row.
//!
//! Between the wakeup (sent by the waker) and T's enqueue on a run queue,
//! the wakeup was on its way to T's CPU: an idle CPU waking to an
//! interrupt, on a VM the host running that vCPU again. Neither the waker
//! nor a run queue held T then (the kernel's run delay starts at the
//! enqueue): "waking its CPU", T's own. Charged to the waker, it was the
//! waker's running (a round-trip server's 700 ms against its 629 ms of CPU
//! time); as run delay, three times what T's schedstat counts.
//!
//! A thread's run-queue delay (from its wakeup's enqueue, or its
//! preemption, to when it ran) is charged to whoever held the CPU it waited for meanwhile, as
//! the profile's per-CPU tracks show them (`record -a` writes them; sample
//! resolution), each by its overlap: "holding its CPU". A track's slice runs
//! from a thread's first sample on the CPU to an interval past its last;
//! the thread took the CPU up to an interval before its first sample and
//! left it up to one after its last, so each slice is read half an
//! interval earlier: [first − I/2, last + I/2], unbiased. Read as written,
//! spinners pinned to one CPU charged the one after each waiter 12 % more
//! than it ran, and the one before it 12 % less (the tracer's exact switch
//! times say each held a third); half-way, within 1 %. The gaps that
//! rounding leaves around the thread's own slices (it was not running)
//! go to the holder after them (at the wait's end: before), if under an
//! interval. What no
//! other thread's slice covers (the CPU idle, or not sampled, or no per-CPU
//! tracks) stays the thread's own "runnable".
//!
//! Waits shorter than the recording's marker threshold (`--off-cpu-threshold`,
//! 1 ms by default) come as runs: their sum over a span, per waker
//! (`ShortWaits` markers). A run's time before its wakeups is charged to
//! what its waker did over the part of the span asked for, less the waker's
//! own waits on the chain (a waker is not waiting for the thread it is
//! about to wake: in a round trip, the two take turns), scaled to the run's
//! time; its time after them is the thread's run-queue delay, charged to
//! the threads that held the CPUs it ran on over the span, by how long each
//! held them (the run says neither its CPU nor its moments). That is an
//! estimate, where markers are exact: it assumes the waits were spread
//! evenly over the span.

use rustc_hash::FxHashMap;
use serde_json::Value;

/// How many wakers deep a chain is followed.
pub const MAX_DEPTH: usize = 12;

/// One off-CPU interval of a thread, in profile ms.
#[derive(Debug, Clone)]
struct Wait {
    start: f64,
    end: f64,
    reason: String,
    /// When it was woken (the wakeup sent): `end` less its run-queue delay
    /// and its wakeup's landing.
    wake: f64,
    /// When that wakeup put it on a run queue: `end` less its run-queue
    /// delay. Between the two the wakeup was on its way to the thread's
    /// CPU (an idle one waking; on a VM, the host running it again).
    queued: f64,
    waker_tid: Option<u32>,
    /// "task", "hard IRQ", "softirq", or None when no waker was seen.
    context: Option<String>,
    /// The CPU it left (where a preempted thread waits) and the one it ran
    /// on again (where a woken one waits).
    cpu_out: Option<u32>,
    cpu_in: Option<u32>,
}

/// A stretch a thread ran on a CPU, as the per-CPU tracks show it.
#[derive(Debug, Clone, Copy)]
struct Slice {
    start: f64,
    end: f64,
    tid: u32,
}

/// A run of a thread's short waits: their sum over a span, per waker.
#[derive(Debug, Clone)]
struct ShortRun {
    start: f64,
    end: f64,
    count: f64,
    /// Their off-CPU time, ms.
    off_cpu: f64,
    /// Of it, the time before their wakeups, ms.
    waited: f64,
    /// Of the rest, the time their wakeups took to land on a run queue, ms.
    landing: f64,
    waker_tid: Option<u32>,
    /// "task", "interrupt", "several", "not seen" or "none".
    context: String,
}

/// Calls of the charging functions one wait (or short run) may make: short
/// runs charge along their wakers' runs, which branch at every level. At
/// 200,000, counting only the activity reads, `--why` of pgbench's client
/// beside PostgreSQL did not end in 10 minutes; now a short run's charge
/// counts as one, and the 10 s take 15.8 s (ARCHITECTURE 25). With a
/// thread's activity over a span remembered ([`Memo`]) most calls
/// are reads: at 20,000, 0.7 % of that client's waiting was still cut
/// there (31 % before); at 100,000, none, in 11.4 s.
const MAX_STEPS: usize = 100_000;

/// Bytes [`Memo`] may hold: when full, it forgets every span and starts
/// again. A span's entry is ~60 bytes and 16 a culprit; pgbench's client's
/// 10 s kept ~400,000 spans. Unbudgeted, with each culprit stored whole,
/// that was 300-400 MB more than the profile's own parse.
const MEMO_BYTES: usize = 64 << 20;

/// A thread over a span, for one thread asked about: (the chain's first
/// tid, the tid, the span's start and end as bits). Kept for one chain's
/// root only: another root's chains cut other threads as cycles (a
/// thread's own wait was charged to its own running).
type SpanOf = (u32, u32, u64, u64);

/// What [`Threads::charge_activity`] found per thread and span, kept for
/// the next chain that reaches the same: its culprits interned (a few
/// hundred distinct ones, against hundreds of thousands of spans), within
/// [`MEMO_BYTES`].
#[derive(Default)]
struct Memo {
    spans: FxHashMap<SpanOf, Box<[(u32, f64)]>>,
    culprits: Vec<Culprit>,
    ids: FxHashMap<Culprit, u32>,
    /// The spans' boxed entries' heap bytes (with malloc's header each).
    boxed: usize,
    /// The interned culprits' bytes, both copies (never forgotten: a few
    /// hundred).
    interned: usize,
}

impl Memo {
    /// Add what was kept for `key` to `out`; false if nothing was.
    fn read(&self, key: &SpanOf, out: &mut FxHashMap<Culprit, f64>) -> bool {
        let Some(known) = self.spans.get(key) else {
            return false;
        };
        for &(id, ms) in known.iter() {
            *out.entry(self.culprits[id as usize].clone()).or_default() += ms;
        }
        true
    }

    /// What it holds, in bytes: the table at its capacity (a slot and a
    /// control byte each), the entries, the culprits.
    fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<SpanOf>() + std::mem::size_of::<Box<[(u32, f64)]>>() + 1;
        self.spans.capacity() * slot + self.boxed + self.interned
    }

    /// Keep `its` for `key`, forgetting every span first (the table's
    /// memory too) if that would pass [`MEMO_BYTES`].
    fn keep(&mut self, key: SpanOf, its: &FxHashMap<Culprit, f64>) {
        let size = 16 + its.len() * std::mem::size_of::<(u32, f64)>();
        if self.bytes() + size > MEMO_BYTES {
            self.spans = FxHashMap::default();
            self.boxed = 0;
        }
        let entry: Box<[(u32, f64)]> = its
            .iter()
            .map(|(c, &ms)| {
                let id = match self.ids.get(c) {
                    Some(&id) => id,
                    None => {
                        let id = self.culprits.len() as u32;
                        self.culprits.push(c.clone());
                        self.ids.insert(c.clone(), id);
                        let one = std::mem::size_of::<Culprit>()
                            + c.device.as_ref().map_or(0, |d| d.len() + 16);
                        self.interned += 2 * one + 8;
                        id
                    }
                };
                (id, ms)
            })
            .collect();
        self.boxed += size;
        self.spans.insert(key, entry);
    }
}

/// What the report needs of one thread.
#[derive(Debug, Default)]
struct ThreadFacts {
    pid: u32,
    comm: String,
    process: String,
    /// Sorted by start; non-overlapping.
    waits: Vec<Wait>,
    /// Sorted by start; they may overlap each other and the waits.
    short: Vec<ShortRun>,
    /// The longest span of a run in `short`.
    short_span: f64,
    /// (start, end, device) of the block requests it issued.
    io: Vec<(f64, f64, String)>,
    /// On-CPU sample times and their leaf function names.
    samples: Vec<(f64, String)>,
}

/// What a piece of time was: someone running, someone runnable, a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Culprit {
    /// The thread whose running, run queue, wait or request it was.
    pub tid: u32,
    /// "running", "runnable", "holding its CPU" (the thread that ran on
    /// the CPU a runnable one waited for), "waking its CPU" (its wakeup on
    /// the way to its run queue: an idle CPU waking), "I/O", "timer", "softirq", "interrupt" (a
    /// short wait's: timer or device), "several wakers", "unknown waker",
    /// "waiting (cycle)", "waiting (chain too deep)".
    pub what: &'static str,
    /// The device of an "I/O" piece.
    pub device: Option<String>,
}

/// A thread's off-CPU time and where it went.
#[derive(Debug, Default)]
pub struct Why {
    /// Off-CPU time in the range, ms.
    pub off_cpu_ms: f64,
    /// Waits in the range.
    pub waits: usize,
    /// Where it went, largest first; sums to `off_cpu_ms`.
    pub blame: Vec<(Culprit, f64)>,
    /// The longest waits: (start, ms, reason, their own blame, largest first).
    pub longest: Vec<(f64, f64, String, Vec<(Culprit, f64)>)>,
}

/// One wait of a thread (or one run of its short waits), in profile ms,
/// with where its time went.
#[derive(Debug, Clone)]
pub struct WaitBlame {
    /// Its start, in the range asked for.
    pub start: f64,
    /// Its end (when the thread ran again; a run's span's end), in the
    /// range asked for.
    pub end: f64,
    /// Why it left the CPU ("sleeping", "blocked (uninterruptible)", ...);
    /// a run's: "short waits (N)", N its waits in the range, rounded (0
    /// when the range holds a sliver of a run).
    pub reason: String,
    /// Largest first; sums to `end - start`, a run's to its off-CPU time
    /// in the range.
    pub blame: Vec<(Culprit, f64)>,
}

/// The threads of a profile, by tid, as `--why` reads them.
pub struct Threads {
    threads: FxHashMap<u32, ThreadFacts>,
    /// Wakers with no track of their own (no sample, no wait recorded), as
    /// the markers of those they woke name them: tid → (pid, name).
    named_by_wakees: FxHashMap<u32, (u32, String)>,
    /// Per CPU, its threads' slices (idle left out), sorted by start; empty
    /// without per-CPU tracks.
    cpus: FxHashMap<u32, Vec<Slice>>,
    /// The sampling interval, ms (`meta.interval`).
    interval: f64,
    /// Charging calls left for the wait being charged (see [`MAX_STEPS`]).
    steps: std::cell::Cell<usize>,
    /// What [`Threads::charge_activity`] found for a thread over a span,
    /// by (tid, span's ends' bits): computed once, read again by every
    /// other chain that reaches the same thread over the same span (see
    /// [`MEMO_BYTES`]).
    memo: std::cell::RefCell<Memo>,
    /// Whether the charge under way was cut short (the chain too deep, the
    /// budget spent): what it found then is not kept in `memo`.
    cut: std::cell::Cell<bool>,
}

impl Threads {
    /// Read them from a profile's JSON; tracks of no process are skipped.
    pub fn read(profile: &Value) -> Threads {
        let categories: Vec<&str> = profile["meta"]["categories"]
            .as_array()
            .map(|c| c.iter().map(|c| c["name"].as_str().unwrap_or("")).collect())
            .unwrap_or_default();
        let mut threads = FxHashMap::default();
        let mut named_by_wakees = FxHashMap::default();
        let mut cpus = FxHashMap::default();
        let interval = profile["meta"]["interval"].as_f64().unwrap_or(1.0).max(0.0);
        for t in profile["threads"].as_array().into_iter().flatten() {
            wakers_named(t, &mut named_by_wakees);
            read_cpu_track(t, interval, &mut cpus);
            let machine = crate::profile::is_machine_track(t["processType"].as_str().unwrap_or(""));
            let (Some(pid), Some(tid)) = (
                t["pid"]
                    .as_str()
                    .filter(|_| !machine)
                    .and_then(|p| p.parse().ok()),
                t["tid"].as_u64(),
            ) else {
                continue;
            };
            let text = |v: &Value| crate::escape::escape(v.as_str().unwrap_or("")).into_owned();
            let mut facts = ThreadFacts {
                pid,
                comm: text(&t["name"]),
                process: text(&t["processName"]),
                ..Default::default()
            };
            read_markers(t, &mut facts);
            read_samples(t, &categories, &mut facts);
            threads.insert(tid as u32, facts);
        }
        named_by_wakees.retain(|tid, _| !threads.contains_key(tid));
        Threads {
            threads,
            named_by_wakees,
            cpus,
            interval,
            steps: std::cell::Cell::new(MAX_STEPS),
            memo: Default::default(),
            cut: std::cell::Cell::new(false),
        }
    }

    /// The tids `id` names: the thread with that tid, else every thread of
    /// the process with that pid.
    pub fn resolve(&self, id: u32) -> Vec<u32> {
        if self.threads.contains_key(&id) {
            return vec![id];
        }
        let mut tids: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.pid == id)
            .map(|(&tid, _)| tid)
            .collect();
        tids.sort_unstable();
        tids
    }

    /// "comm (process, pid/tid)".
    pub fn describe(&self, tid: u32) -> String {
        match self.threads.get(&tid) {
            Some(t) => format!("{} ({}, {}/{tid})", t.comm, t.process, t.pid),
            // Named as its wakees' markers name it: it woke them, and
            // had no sample or wait of its own in the profile.
            None => match self.named_by_wakees.get(&tid) {
                Some((pid, name)) => format!("{name} ({pid}/{tid}, no track of its own)"),
                None => format!("tid {tid} (not recorded)"),
            },
        }
    }

    /// (pid, comm) of a thread, if in the profile.
    pub fn identity(&self, tid: u32) -> Option<(u32, &str)> {
        self.threads.get(&tid).map(|t| (t.pid, t.comm.as_str()))
    }

    /// The most sampled leaf functions of `tid` between `from` and `to`.
    pub fn top_leaves(&self, tid: u32, spans: &[(f64, f64)], n: usize) -> Vec<(String, usize)> {
        let Some(t) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let mut counts: FxHashMap<&str, usize> = FxHashMap::default();
        for (time, leaf) in &t.samples {
            if spans.iter().any(|&(a, b)| *time >= a && *time <= b) {
                *counts.entry(leaf).or_default() += 1;
            }
        }
        let mut v: Vec<(String, usize)> = counts
            .into_iter()
            .map(|(k, c)| (k.to_string(), c))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// Where the off-CPU time of `tids` between `from` and `to` went.
    pub fn why(&self, tids: &[u32], from: f64, to: f64, longest: usize) -> Why {
        let mut why = Why::default();
        let mut blame: FxHashMap<Culprit, f64> = FxHashMap::default();
        let mut each: Vec<(f64, f64, String, Vec<(Culprit, f64)>)> = Vec::new();
        for &tid in tids {
            for w in self.each_wait(tid, from, to) {
                why.waits += 1;
                why.off_cpu_ms += w.end - w.start;
                for (c, ms) in &w.blame {
                    *blame.entry(c.clone()).or_default() += ms;
                }
                each.push((w.start, w.end - w.start, w.reason, w.blame));
            }
            for (count, off_cpu, run) in self.each_short_run(tid, from, to) {
                why.waits += count;
                why.off_cpu_ms += off_cpu;
                for (c, ms) in run.blame {
                    *blame.entry(c).or_default() += ms;
                }
            }
        }
        why.blame = sorted(blame);
        each.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.total_cmp(&y.0)));
        each.truncate(longest);
        why.longest = each;
        why
    }

    /// The waits of `tid` (those over the marker threshold: short ones
    /// are sums) between `from` and `to`, each with where its time went.
    pub fn each_wait(&self, tid: u32, from: f64, to: f64) -> Vec<WaitBlame> {
        let Some(t) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for w in &t.waits {
            let (a, b) = (w.start.max(from), w.end.min(to));
            if a >= b {
                continue;
            }
            let mut own: FxHashMap<Culprit, f64> = FxHashMap::default();
            let mut chain = vec![tid];
            self.steps.set(MAX_STEPS);
            self.charge_wait(tid, w, a, b, &mut chain, &mut own);
            out.push(WaitBlame {
                start: a,
                end: b,
                reason: w.reason.clone(),
                blame: sorted(own),
            });
        }
        out
    }

    /// The runs of short waits of `tid` (those under the marker threshold,
    /// summed per waker over a span) between `from` and `to`, each with
    /// where its time went, how many waits it holds there and their
    /// off-CPU time (its share of the run's; the blame sums to it, not to
    /// the span).
    pub fn each_short_run(&self, tid: u32, from: f64, to: f64) -> Vec<(usize, f64, WaitBlame)> {
        let Some(t) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in &t.short {
            let Some((a, b, share)) = overlap(r, from, to) else {
                continue;
            };
            let count = (r.count * share).round() as usize;
            let mut own: FxHashMap<Culprit, f64> = FxHashMap::default();
            let mut chain = vec![tid];
            self.steps.set(MAX_STEPS);
            self.charge_short(tid, r, a, b, share, &mut chain, &mut own);
            out.push((
                count,
                r.off_cpu * share,
                WaitBlame {
                    start: a,
                    end: b,
                    reason: format!("short waits ({count})"),
                    blame: sorted(own),
                },
            ));
        }
        out
    }

    /// Charge `[a, b]` of wait `w` of thread `tid`.
    fn charge_wait(
        &self,
        tid: u32,
        w: &Wait,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut FxHashMap<Culprit, f64>,
    ) {
        let mut put = |what: &'static str, who: u32, device: Option<String>, ms: f64| {
            if ms > 0.0 {
                *out.entry(Culprit {
                    tid: who,
                    what,
                    device,
                })
                .or_default() += ms;
            }
        };
        if w.reason.starts_with("preempted") {
            self.charge_queue(tid, w.cpu_out, a, b, &mut put);
            return;
        }
        // Woken at `wake`, on a run queue from `queued`, runnable from
        // then until it ran; in between its wakeup was landing.
        let queued = w.queued.clamp(a, b);
        let wake = w.wake.clamp(a, queued);
        self.charge_queue(tid, w.cpu_in, queued, b, &mut put);
        put("waking its CPU", tid, None, queued - wake);
        let (a, b) = (a, wake);
        if a >= b {
            return;
        }
        match (w.context.as_deref(), w.waker_tid) {
            (Some("task"), Some(waker)) if waker != tid => {
                if chain.contains(&waker) {
                    put("waiting (cycle)", waker, None, b - a);
                } else if chain.len() > MAX_DEPTH {
                    self.cut.set(true);
                    put("waiting (chain too deep)", waker, None, b - a);
                } else if !self.threads.contains_key(&waker) {
                    // A waker with no track (not recorded): it ran to wake us.
                    put("running", waker, None, b - a);
                } else {
                    self.charge_waker(waker, tid, &[(a, b)], b - a, 0.0, 0.0, chain, out);
                }
            }
            (Some("hard IRQ" | "softirq"), _) => {
                let t = &self.threads[&tid];
                // The request it had in flight when woken, if any.
                let io =
                    t.io.iter()
                        .filter(|(s, e, _)| *s < w.wake && *e >= w.start)
                        .max_by(|x, y| x.1.total_cmp(&y.1));
                match io {
                    Some((_, _, device)) => put("I/O", tid, Some(device.clone()), b - a),
                    None if w.context.as_deref() == Some("hard IRQ") => {
                        put("timer", tid, None, b - a)
                    }
                    None => put("softirq", tid, None, b - a),
                }
            }
            _ => put("unknown waker", tid, None, b - a),
        }
    }

    /// Charge `[a, b]`, which thread `tid` spent runnable on `cpu`, to the
    /// threads the CPU's track shows running then; the rest to its own
    /// run queue.
    fn charge_queue(
        &self,
        tid: u32,
        cpu: Option<u32>,
        a: f64,
        b: f64,
        put: &mut impl FnMut(&'static str, u32, Option<String>, f64),
    ) {
        let mut held = 0.0;
        if let Some(slices) = cpu.and_then(|c| self.cpus.get(&c)) {
            // Slices of one CPU do not overlap: from the first ending after
            // `a`, those starting before `b`. The thread's own slices there
            // are sampling's lag (it was not running): gaps, as the CPU's
            // unsampled stretches are.
            let first = slices.partition_point(|s| s.end <= a);
            let mut covered = a;
            let mut last_holder = None;
            for s in slices[first..].iter().take_while(|s| s.start < b) {
                if s.tid == tid {
                    continue;
                }
                let (from, to) = (s.start.max(a), s.end.min(b));
                let gap = from - covered;
                let lead = if gap > 0.0 && gap <= self.interval {
                    gap
                } else {
                    0.0
                };
                let ms = to - from + lead;
                if ms > 0.0 && held + ms <= (b - a) * (1.0 + 1e-12) {
                    put("holding its CPU", s.tid, None, ms);
                    held += ms;
                }
                covered = covered.max(to);
                last_holder = Some(s.tid);
            }
            let trail = b - covered;
            if let Some(holder) = last_holder.filter(|_| trail > 0.0 && trail <= self.interval) {
                put("holding its CPU", holder, None, trail);
                held += trail;
            }
        }
        put("runnable", tid, None, ((b - a) - held).max(0.0));
    }

    /// Charge `ms` of thread `tid`'s run-queue time somewhere in `spans`
    /// (a short run's: its CPU and moments are not known) to the threads
    /// that held the CPUs it ran on there (all CPUs if it ran on none), by
    /// how long each held them: an estimate, as the run's other charges
    /// are. Without per-CPU tracks, or nobody else on them, its own queue.
    fn charge_queue_spread(
        &self,
        tid: u32,
        spans: &[(f64, f64)],
        ms: f64,
        chain: &[u32],
        put: &mut impl FnMut(&'static str, u32, Option<String>, f64),
    ) {
        if ms <= 0.0 {
            return;
        }
        let ran_on = |slices: &&Vec<Slice>| {
            spans
                .iter()
                .any(|&(a, b)| overlapping(slices, a, b).any(|(t, _)| t == tid))
        };
        let mine: Vec<&Vec<Slice>> = self.cpus.values().filter(ran_on).collect();
        let cpus: Vec<&Vec<Slice>> = if mine.is_empty() {
            self.cpus.values().collect()
        } else {
            mine
        };
        let mut held: FxHashMap<u32, f64> = FxHashMap::default();
        for slices in cpus {
            for &(a, b) in spans {
                for (t, ms) in overlapping(slices, a, b) {
                    // The threads on the chain were waiting (for this
                    // one, in the end): their slices here are the
                    // estimate's spread, not holders of its CPU.
                    if t != tid && ms > 0.0 && !chain.contains(&t) {
                        *held.entry(t).or_default() += ms;
                    }
                }
            }
        }
        let total: f64 = held.values().sum();
        if total <= 0.0 {
            put("runnable", tid, None, ms);
            return;
        }
        let mut holders: Vec<(u32, f64)> = held.into_iter().collect();
        holders.sort_unstable_by_key(|&(t, _)| t);
        for (holder, w) in holders {
            put("holding its CPU", holder, None, ms * w / total);
        }
    }

    /// Charge `[a, b]` of thread `tid`'s time: its waits inside it along
    /// their own chains, its short waits' share likewise, the rest as
    /// running. Charged once per thread and span and remembered: other
    /// chains reaching the same span read what the first one found (its
    /// cycles cut as that chain's; ARCHITECTURE 25), which is what keeps
    /// a server's many-way chains (pgbench's) within the budget.
    fn charge_activity(
        &self,
        tid: u32,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut FxHashMap<Culprit, f64>,
    ) {
        let key = (
            chain.first().copied().unwrap_or(tid),
            tid,
            a.to_bits(),
            b.to_bits(),
        );
        if self.memo.borrow().read(&key, out) {
            return;
        }
        let steps = self.steps.get();
        if steps == 0 {
            self.cut.set(true);
            *out.entry(Culprit {
                tid,
                what: "waiting (chain too deep)",
                device: None,
            })
            .or_default() += b - a;
            return;
        }
        self.steps.set(steps - 1);
        let cut_before = self.cut.replace(false);
        let mut its: FxHashMap<Culprit, f64> = FxHashMap::default();
        self.activity_of(tid, a, b, chain, &mut its);
        let cut_here = self.cut.get();
        self.cut.set(cut_before || cut_here);
        if !cut_here {
            self.memo.borrow_mut().keep(key, &its);
        }
        for (c, ms) in its {
            *out.entry(c).or_default() += ms;
        }
    }

    /// [`Threads::charge_activity`]'s work, not remembered.
    fn activity_of(
        &self,
        tid: u32,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut FxHashMap<Culprit, f64>,
    ) {
        let t = &self.threads[&tid];
        let mut waited = 0.0;
        let first = t.waits.partition_point(|w| w.end <= a);
        for w in t.waits[first..].iter().take_while(|w| w.start < b) {
            let (x, y) = (w.start.max(a), w.end.min(b));
            if x < y {
                waited += y - x;
                self.charge_wait(tid, w, x, y, chain, out);
            }
        }
        // Short waits fill what the long ones left, at most.
        let left = ((b - a) - waited).max(0.0);
        let mut short: FxHashMap<Culprit, f64> = FxHashMap::default();
        let first = t.short.partition_point(|r| r.start < a - t.short_span);
        for r in t.short[first..].iter().take_while(|r| r.start <= b) {
            if let Some((x, y, share)) = overlap(r, a, b) {
                self.charge_short(tid, r, x, y, share, chain, &mut short);
            }
        }
        let short_ms: f64 = short.values().sum();
        let scale = if short_ms > left {
            left / short_ms
        } else {
            1.0
        };
        for (c, ms) in short {
            *out.entry(c).or_default() += ms * scale;
        }
        let running = left - short_ms.min(left);
        if running > 0.0 {
            *out.entry(Culprit {
                tid,
                what: "running",
                device: None,
            })
            .or_default() += running;
        }
    }

    /// Charge `ms` to what `waker` did over `spans`: its activity there,
    /// less its waits for threads already on the chain, scaled to `ms`. A
    /// waker is not waiting on the chain while it is about to wake it:
    /// such waits are a short run's spread over its span (in a round trip
    /// the two take turns), and only when nothing else is left is the time
    /// a cycle's.
    ///
    /// `ran_on` is the wakee's time in `spans` after its wakeups (their
    /// landing and its run-queue delay, a short run's sums). The waker had
    /// just sent those wakeups: it was running then, not waiting, so when
    /// its activity over the span is more than `ms`, the excess comes out
    /// of its running first, up to `ran_on`, and only the rest is scaled
    /// down evenly. Scaled evenly, a server's fdatasyncs were charged
    /// 72-81 % of the time the server was blocked in them
    /// (`fdatasync_waits_are_charged_to_the_disk_at_the_default_threshold`):
    /// its running after each reply, while the client's wakeup landed,
    /// diluted its disk time.
    ///
    /// `wakee_ran` is the wakee's own time on a CPU in `spans`. The waker's
    /// wakeups from the wakee were sent while the wakee ran, and landed
    /// while it went on running: before any of its running, the excess
    /// comes out of the waker's landing (and its wait for a CPU the wakee
    /// held), up to `wakee_ran`. On a VM whose idle vCPUs wake in ~12 µs, a
    /// round-trip server's landing overlapped its client's write and read
    /// by most of that, and taken out of its running instead, the server
    /// was charged 260-305 ms of the 400 ms it computed inside the client's
    /// waits.
    #[allow(clippy::too_many_arguments)]
    fn charge_waker(
        &self,
        waker: u32,
        wakee: u32,
        spans: &[(f64, f64)],
        ms: f64,
        ran_on: f64,
        wakee_ran: f64,
        chain: &mut Vec<u32>,
        out: &mut FxHashMap<Culprit, f64>,
    ) {
        let mut its: FxHashMap<Culprit, f64> = FxHashMap::default();
        chain.push(waker);
        for &(a, b) in spans {
            self.charge_activity(waker, a, b, chain, &mut its);
        }
        chain.pop();
        let total: f64 = its.values().sum();
        let mut rest: f64 = its
            .iter()
            .filter(|(c, _)| c.what != "waiting (cycle)")
            .map(|(_, v)| v)
            .sum();
        if total <= 0.0 {
            *out.entry(Culprit {
                tid: waker,
                what: "running",
                device: None,
            })
            .or_default() += ms;
            return;
        }
        let keep_cycles = rest <= total * 1e-9;
        if !keep_cycles && rest > ms {
            let mut overlap = wakee_ran.max(0.0);
            for c in [
                Culprit {
                    tid: waker,
                    what: "waking its CPU",
                    device: None,
                },
                Culprit {
                    tid: wakee,
                    what: "holding its CPU",
                    device: None,
                },
            ] {
                if let Some(v) = its.get_mut(&c) {
                    let cut = (rest - ms).min(overlap).min(*v);
                    *v -= cut;
                    rest -= cut;
                    overlap -= cut;
                }
            }
        }
        if !keep_cycles && rest > ms {
            let own_running = Culprit {
                tid: waker,
                what: "running",
                device: None,
            };
            if let Some(running) = its.get_mut(&own_running) {
                let cut = (rest - ms).min(ran_on.max(0.0)).min(*running);
                *running -= cut;
                rest -= cut;
            }
        }
        let scale = ms / if keep_cycles { total } else { rest };
        for (c, v) in its {
            if keep_cycles || c.what != "waiting (cycle)" {
                *out.entry(c).or_default() += v * scale;
            }
        }
    }

    /// `[a, b]` less thread `tid`'s own waits long enough for a marker
    /// each: where its short waits can lie. A short run's span holds the
    /// thread's long waits too, and those are charged exactly by their
    /// markers; read over them, what its waker did there (and who held its
    /// CPUs, for the run's queue time) was charged twice.
    /// A round-trip server preempted beside two spinners: the client's
    /// short waits took 270 ms of the server's "runnable" when the server
    /// was runnable 197 ms in all, and its running got 382 of the 477 ms it
    /// ran. The whole span if the long waits cover it.
    fn between_long_waits(&self, tid: u32, a: f64, b: f64) -> Vec<(f64, f64)> {
        let t = &self.threads[&tid];
        let mut spans = Vec::new();
        let mut from = a;
        let first = t.waits.partition_point(|w| w.end <= a);
        for w in t.waits[first..].iter().take_while(|w| w.start < b) {
            if w.start > from {
                spans.push((from, w.start));
            }
            from = from.max(w.end);
        }
        if from < b {
            spans.push((from, b));
        }
        if spans.is_empty() {
            spans.push((a, b));
        }
        spans
    }

    /// Charge `share` of run `r` of thread `tid` (its part in `[a, b]`):
    /// after the wakeups, its run-queue delay; before, what the waker did
    /// over `[a, b]`, less its waits on the chain, scaled to that time.
    #[allow(clippy::too_many_arguments)]
    fn charge_short(
        &self,
        tid: u32,
        r: &ShortRun,
        a: f64,
        b: f64,
        share: f64,
        chain: &mut Vec<u32>,
        out: &mut FxHashMap<Culprit, f64>,
    ) {
        let mut put = |what: &'static str, who: u32, device: Option<String>, ms: f64| {
            if ms > 0.0 {
                *out.entry(Culprit {
                    tid: who,
                    what,
                    device,
                })
                .or_default() += ms;
            }
        };
        let steps = self.steps.get();
        if steps == 0 {
            self.cut.set(true);
            put("waiting (chain too deep)", tid, None, r.off_cpu * share);
            return;
        }
        self.steps.set(steps - 1);
        let waited = r.waited.min(r.off_cpu) * share;
        let landing = r.landing.min(r.off_cpu - r.waited.min(r.off_cpu)) * share;
        let spans = self.between_long_waits(tid, a, b);
        // After the wakeups: landing, then waiting for a CPU, whoever woke it.
        self.charge_queue_spread(
            tid,
            &spans,
            r.off_cpu * share - waited - landing,
            chain,
            &mut put,
        );
        put("waking its CPU", tid, None, landing);
        if r.context == "task" && r.waker_tid.is_some_and(|w| w != tid && chain.contains(&w)) {
            // Woken by a thread already on the chain: this thread's waits
            // took turns with that thread's running, not with its waiting:
            // the cycle's. Its run delays after them were its CPUs' (in a
            // round trip the server waits for a CPU while its client waits
            // for it); charged as a cycle's they were dropped with it.
            put("waiting (cycle)", r.waker_tid.unwrap_or(tid), None, waited);
            return;
        }
        if waited <= 0.0 {
            return;
        }
        match (r.context.as_str(), r.waker_tid) {
            ("task", Some(waker)) if waker != tid => {
                if chain.contains(&waker) {
                    put("waiting (cycle)", waker, None, waited);
                } else if chain.len() > MAX_DEPTH {
                    self.cut.set(true);
                    put("waiting (chain too deep)", waker, None, waited);
                } else if !self.threads.contains_key(&waker) || b <= a {
                    put("running", waker, None, waited);
                } else {
                    // The wakee's own running over the spans: the time
                    // they hold less its waits there (this run's part).
                    let held: f64 = spans.iter().map(|(a, b)| b - a).sum();
                    self.charge_waker(
                        waker,
                        tid,
                        &spans,
                        waited,
                        r.off_cpu * share - waited,
                        (held - r.off_cpu * share).max(0.0),
                        chain,
                        out,
                    );
                }
            }
            ("interrupt", _) => {
                let t = &self.threads[&tid];
                let io = t
                    .io
                    .iter()
                    .filter(|(s, e, _)| *s < b && *e > a)
                    .max_by(|x, y| (x.1.min(b) - x.0.max(a)).total_cmp(&(y.1.min(b) - y.0.max(a))));
                match io {
                    Some((_, _, device)) => put("I/O", tid, Some(device.clone()), waited),
                    None => put("interrupt", tid, None, waited),
                }
            }
            ("several", _) => put("several wakers", tid, None, waited),
            ("none", _) => self.charge_queue_spread(tid, &spans, waited, chain, &mut put),
            _ => put("unknown waker", tid, None, waited),
        }
    }
}

/// The slices of one CPU (sorted, apart) that overlap `[a, b]`: (tid, ms
/// of overlap).
fn overlapping(slices: &[Slice], a: f64, b: f64) -> impl Iterator<Item = (u32, f64)> + '_ {
    let first = slices.partition_point(|s| s.end <= a);
    slices[first..]
        .iter()
        .take_while(move |s| s.start < b)
        .map(move |s| (s.tid, s.end.min(b) - s.start.max(a)))
}

/// The part of run `r` in `[from, to]`: (start, end, share of the run).
fn overlap(r: &ShortRun, from: f64, to: f64) -> Option<(f64, f64, f64)> {
    let (a, b) = (r.start.max(from), r.end.min(to));
    if r.end <= r.start {
        // One instant: in or out.
        return (r.start >= from && r.start <= to).then_some((r.start, r.start, 1.0));
    }
    (a < b).then(|| (a, b, (b - a) / (r.end - r.start)))
}

impl Culprit {
    /// "I/O on vda", "running", ...
    pub fn what_text(&self) -> String {
        match &self.device {
            Some(d) => format!("{} on {d}", self.what),
            None => self.what.to_string(),
        }
    }
}

/// The answer as text: the total, where it went (with the functions the
/// running parts ran), and the longest waits.
pub fn render_text(threads: &Threads, id: u32, tids: &[u32], why: &Why, top: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let who = if tids == [id] {
        threads.describe(id)
    } else {
        format!("process {id} ({} threads)", tids.len())
    };
    let _ = writeln!(s, "{who}: {:.3} ms off-CPU in {} waits (those under --off-cpu-threshold are charged from their sums per waker: an estimate)", why.off_cpu_ms, why.waits);
    if why.blame.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nwhere it went:\n{:>12}  {:>6}  {:<28}  thread (process, pid/tid)",
        "ms", "share", "what"
    );
    for (c, ms) in why.blame.iter().take(top) {
        let share = 100.0 * ms / why.off_cpu_ms.max(f64::MIN_POSITIVE);
        let _ = writeln!(
            s,
            "{ms:>12.3}  {share:>5.1}%  {:<28}  {}",
            c.what_text(),
            threads.describe(c.tid)
        );
    }
    if why.blame.len() > top {
        let rest: f64 = why.blame[top..].iter().map(|(_, ms)| ms).sum();
        let _ = writeln!(
            s,
            "{rest:>12.3}  {:>5.1}%  ({} more rows)",
            100.0 * rest / why.off_cpu_ms,
            why.blame.len() - top
        );
    }
    let _ = writeln!(
        s,
        "\nlongest waits (start ms, length, reason: where it went):"
    );
    for (start, ms, reason, own) in &why.longest {
        let parts: Vec<String> = own
            .iter()
            .take(4)
            .map(|(c, ms)| {
                format!(
                    "{ms:.3} ms {} of {}",
                    c.what_text(),
                    threads.describe(c.tid)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  {start:>10.3}  {ms:>9.3} ms  {reason}: {}",
            parts.join("; ")
        );
    }
    s
}

/// The answer as JSON: `{"tid"|"pid", "off_cpu_ms", "waits", "blame": [...],
/// "longest": [...]}`, the blame summing to `off_cpu_ms`.
pub fn render_json(threads: &Threads, id: u32, tids: &[u32], why: &Why) -> String {
    let culprit = |c: &Culprit, ms: f64| {
        let (pid, comm) = threads
            .identity(c.tid)
            .map(|(p, n)| (Some(p), Some(n)))
            .unwrap_or((None, None));
        serde_json::json!({ "pid": pid, "tid": c.tid, "comm": comm, "what": c.what, "device": c.device, "ms": ms })
    };
    let key = if tids == [id] { "tid" } else { "pid" };
    let v = serde_json::json!({
        key: id,
        "tids": tids,
        "off_cpu_ms": why.off_cpu_ms,
        "waits": why.waits,
        "blame": why.blame.iter().map(|(c, ms)| culprit(c, *ms)).collect::<Vec<_>>(),
        "longest": why.longest.iter().map(|(start, ms, reason, own)| serde_json::json!({
            "start_ms": start, "ms": ms, "reason": reason,
            "blame": own.iter().map(|(c, ms)| culprit(c, *ms)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    format!("{v}\n")
}

/// Largest first, ties by culprit.
fn sorted(m: FxHashMap<Culprit, f64>) -> Vec<(Culprit, f64)> {
    let mut v: Vec<(Culprit, f64)> = m.into_iter().collect();
    v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    v
}

/// A thread's markers: its waits and the block requests it issued.
/// The task wakers `t`'s off-CPU markers name: "name (pid P, tid T)" with
/// `wakerPid` and `wakerTid` (an interrupt's label names what it
/// interrupted, not a waker: left out).
fn wakers_named(t: &Value, out: &mut FxHashMap<u32, (u32, String)>) {
    let Some(data) = t["markers"]["data"].as_array() else {
        return;
    };
    for d in data {
        if (d["type"] != "OffCpu" && d["type"] != "ShortWaits") || d["wakerContext"] != "task" {
            continue;
        }
        let (Some(tid), Some(pid), Some(label)) = (
            d["wakerTid"].as_u64(),
            d["wakerPid"].as_str().and_then(|p| p.parse::<u32>().ok()),
            d["waker"].as_str(),
        ) else {
            continue;
        };
        let Some(name) = label.strip_suffix(&format!(" (pid {pid}, tid {tid})")) else {
            continue;
        };
        out.entry(tid as u32)
            .or_insert_with(|| (pid, crate::escape::escape(name).into_owned()));
    }
}

/// A track's markers: (data, start, end), those with both times.
fn markers_of(t: &Value) -> impl Iterator<Item = (&Value, f64, f64)> {
    let column = |key: &str| {
        t["markers"][key]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    };
    let (data, start, end) = (column("data"), column("startTime"), column("endTime"));
    data.iter()
        .zip(start)
        .zip(end)
        .filter_map(|((d, s), e)| Some((d, s.as_f64()?, e.as_f64()?)))
}

fn read_markers(t: &Value, facts: &mut ThreadFacts) {
    for (d, s, e) in markers_of(t) {
        // A wait drawn to its enqueue says its whole length apart.
        let e = match d["offCpu"].as_f64() {
            Some(whole) if d["type"] == "OffCpu" => e.max(s + whole),
            _ => e,
        };
        match d["type"].as_str() {
            Some("OffCpu") if e > s => facts.waits.push(Wait {
                start: s,
                end: e,
                reason: match (d["reason"].as_str(), d["waitedOn"].as_str()) {
                    (r, Some(on)) => format!("{} on {on}", r.unwrap_or("other")),
                    (r, None) => r.unwrap_or("other").to_string(),
                },
                wake: e
                    - d["runDelay"].as_f64().unwrap_or(0.0)
                    - d["wakeupLanding"].as_f64().unwrap_or(0.0).max(0.0),
                queued: e - d["runDelay"].as_f64().unwrap_or(0.0),
                waker_tid: d["wakerTid"].as_u64().map(|t| t as u32),
                context: d["wakerContext"].as_str().map(str::to_string),
                cpu_out: d["cpuOut"].as_u64().map(|c| c as u32),
                cpu_in: d["cpuIn"].as_u64().map(|c| c as u32),
            }),
            Some("BlockIo") => facts.io.push((
                s,
                e,
                crate::escape::escape(d["device"].as_str().unwrap_or("?")).into_owned(),
            )),
            Some("ShortWaits") if e >= s => facts.short.push(ShortRun {
                start: s,
                end: e,
                count: d["count"].as_f64().unwrap_or(0.0),
                off_cpu: d["offCpu"].as_f64().unwrap_or(0.0).max(0.0),
                waited: d["waited"].as_f64().unwrap_or(0.0).max(0.0),
                landing: d["landing"].as_f64().unwrap_or(0.0).max(0.0),
                waker_tid: d["wakerTid"].as_u64().map(|t| t as u32),
                context: d["wakerContext"].as_str().unwrap_or("not seen").to_string(),
            }),
            _ => {}
        }
    }
    facts.short.sort_by(|x, y| x.start.total_cmp(&y.start));
    facts.short_span = facts
        .short
        .iter()
        .map(|r| r.end - r.start)
        .fold(0.0, f64::max);
    facts.waits.sort_by(|x, y| x.start.total_cmp(&y.start));
    // Overlaps would be charged twice: keep each wait from the previous one's end.
    let mut last_end = f64::NEG_INFINITY;
    facts.waits.retain_mut(|w| {
        w.start = w.start.max(last_end);
        if w.start >= w.end {
            return false;
        }
        last_end = w.end;
        true
    });
}

/// A per-CPU track's slices (`OnCpu` markers; idle ones are `CpuIdle`),
/// into `cpus`; any other track adds nothing. The track is the machine's
/// (its pid, "0", or "machine" in older profiles) with tid
/// CPU_TRACK_TID_BASE + cpu.
fn read_cpu_track(t: &Value, interval: f64, cpus: &mut FxHashMap<u32, Vec<Slice>>) {
    let base = crate::profile::CPU_TRACK_TID_BASE as u64;
    let Some(cpu) = t["tid"]
        .as_u64()
        .filter(|&tid| {
            (t["pid"] == crate::profile::MACHINE_PID || t["pid"] == crate::profile::OLD_MACHINE_PID)
                && tid >= base
        })
        .map(|tid| (tid - base) as u32)
    else {
        return;
    };
    let slices = cpus.entry(cpu).or_default();
    for (d, s, e) in markers_of(t) {
        if let (Some("OnCpu"), Some(tid)) = (d["type"].as_str(), d["tid"].as_u64()) {
            if e > s {
                slices.push(Slice {
                    start: s - interval / 2.0,
                    end: e - interval / 2.0,
                    tid: tid as u32,
                });
            }
        }
    }
    slices.sort_by(|x, y| x.start.total_cmp(&y.start));
    // Kept apart: each slice from the previous one's end.
    let mut last_end = f64::NEG_INFINITY;
    slices.retain_mut(|s| {
        s.start = s.start.max(last_end);
        last_end = last_end.max(s.end);
        s.start < s.end
    });
}

/// A thread's on-CPU samples: their times and leaf function names.
fn read_samples(t: &Value, categories: &[&str], facts: &mut ThreadFacts) {
    let s = &t["samples"];
    let Some(times) = crate::profile::validate::sample_times(s) else {
        return;
    };
    let Some(stacks) = s["stack"].as_array() else {
        return;
    };
    let (stack_frame, frame_func, frame_cat, func_name, strings) = (
        t["stackTable"]["frame"].as_array(),
        t["frameTable"]["func"].as_array(),
        t["frameTable"]["category"].as_array(),
        t["funcTable"]["name"].as_array(),
        t["stringArray"].as_array(),
    );
    let leaf = |stack: u64| -> Option<(&str, &str)> {
        let frame = stack_frame?.get(stack as usize)?.as_u64()? as usize;
        let func = frame_func?.get(frame)?.as_u64()? as usize;
        let category = categories
            .get(frame_cat?.get(frame)?.as_u64()? as usize)
            .copied()
            .unwrap_or("");
        let name = strings?
            .get(func_name?.get(func)?.as_u64()? as usize)?
            .as_str()?;
        Some((name, category))
    };
    for (time, stack) in times.iter().zip(stacks) {
        let Some((name, category)) = stack.as_u64().and_then(leaf) else {
            continue;
        };
        if category != "Off-CPU" && category != "I/O" {
            facts
                .samples
                .push((*time, crate::escape::escape(name).into_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(pid: u32, tid: u32, name: &str, markers: Vec<(f64, f64, Value)>) -> Value {
        serde_json::json!({
            "pid": pid.to_string(), "tid": tid, "name": name, "processName": "p",
            "markers": {
                "data": markers.iter().map(|m| m.2.clone()).collect::<Vec<_>>(),
                "startTime": markers.iter().map(|m| m.0).collect::<Vec<_>>(),
                "endTime": markers.iter().map(|m| m.1).collect::<Vec<_>>(),
            },
            "samples": { "length": 0, "stack": [], "time": [] },
        })
    }

    fn off(reason: &str, run_delay: f64, waker: Option<u32>, context: Option<&str>) -> Value {
        serde_json::json!({ "type": "OffCpu", "reason": reason, "runDelay": run_delay, "wakerTid": waker, "wakerContext": context })
    }

    /// A per-CPU track of CPU `n` with these slices (OnCpu or CpuIdle data).
    fn cpu_track(n: u32, slices: Vec<(f64, f64, Value)>) -> Value {
        let mut t = thread(
            0,
            crate::profile::CPU_TRACK_TID_BASE + n,
            &format!("CPU {n}"),
            slices,
        );
        t["pid"] = crate::profile::MACHINE_PID.into();
        t
    }

    /// A slice of `tid` running.
    fn on(tid: u32) -> Value {
        serde_json::json!({ "type": "OnCpu", "tid": tid })
    }

    /// Check that `why` charges `ms` to `tid` as `what`.
    fn assert_charged(why: &Why, tid: u32, what: &str, ms: f64) {
        let got = charged(why, tid, what);
        assert!(
            (got - ms).abs() < 1e-9,
            "{tid} {what}: {got} ms, not {ms}: {:?}",
            why.blame
        );
    }

    /// The ms `why` charges to `tid` as `what`.
    fn charged(why: &Why, tid: u32, what: &str) -> f64 {
        why.blame
            .iter()
            .filter(|(c, _)| c.tid == tid && c.what == what)
            .map(|(_, ms)| ms)
            .sum()
    }

    /// A waker with no track of its own is named as the markers of the
    /// threads it woke name it, not as "tid N (not recorded)"; one no
    /// marker names stays so.
    #[test]
    fn wakers_without_a_track_are_named_by_their_wakees_markers() {
        let mut woken = off("sleeping", 0.0, Some(77), Some("task"));
        woken["waker"] = "kworker/u8:3 (pid 77, tid 77)".into();
        woken["wakerPid"] = "77".into();
        // A waker of short waits only, named by their marker.
        let short = serde_json::json!({ "type": "ShortWaits", "count": 3, "offCpu": 0.3,
            "waker": "server (pid 90, tid 91)", "wakerPid": "90", "wakerTid": 91, "wakerContext": "task" });
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [thread(1, 1, "client", vec![(0.0, 10.0, woken), (20.0, 30.0, off("sleeping", 0.0, Some(78), Some("task"))), (40.0, 41.0, short)])],
        });
        let threads = Threads::read(&profile);
        assert_eq!(
            threads.describe(77),
            "kworker/u8:3 (77/77, no track of its own)"
        );
        assert_eq!(threads.describe(91), "server (90/91, no track of its own)");
        assert_eq!(threads.describe(78), "tid 78 (not recorded)");
        let why = threads.why(&[1], 0.0, 100.0, 5);
        assert!(
            why.blame
                .iter()
                .any(|(c, _)| c.tid == 77 && c.what == "running"),
            "{:?}",
            why.blame
        );
    }

    /// Check that a wait drawn to its enqueue, its run delay a marker of
    /// its own after it (`offCpu` says the whole wait), is read whole: its
    /// delay charged to who held the CPU, the rest to its waker, and the
    /// `RunDelay` marker not taken for another wait.
    #[test]
    fn a_wait_drawn_apart_from_its_run_delay_is_read_whole() {
        let mut blocked = off("blocked (uninterruptible)", 3.7, Some(2), Some("task"));
        blocked["offCpu"] = 4.1.into();
        blocked["cpuIn"] = 1.into();
        let delay = serde_json::json!({ "type": "RunDelay", "after": "blocked (uninterruptible)", "cpu": 1 });
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(1.0, 1.4, blocked), (1.4, 5.1, delay)]),
                thread(1, 2, "server", vec![]),
                thread(1, 3, "spinner", vec![]),
                cpu_track(1, vec![(0.0, 10.0, on(3))]),
            ],
        });
        let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
        assert!((why.off_cpu_ms - 4.1).abs() < 1e-9, "{}", why.off_cpu_ms);
        assert_eq!(why.waits, 1);
        assert_charged(&why, 3, "holding its CPU", 3.7);
        assert_charged(&why, 2, "running", 0.4);
    }

    /// Check a wakeup's landing: a client woken by a server at 8 ms whose
    /// wakeup reached its run queue at 9 (and ran at 10), and a run of
    /// short waits with 0.2 ms of landing, charge that time to the client's
    /// "waking its CPU", not to the server's running (what it did while
    /// the wakeup landed) nor to the client's run queue.
    #[test]
    fn a_wakeups_landing_is_the_wakees_own() {
        let mut woken = off("sleeping", 1.0, Some(2), Some("task"));
        woken["wakeupLanding"] = 1.0.into();
        let short = serde_json::json!({ "type": "ShortWaits", "count": 4, "offCpu": 1.0,
            "waited": 0.5, "landing": 0.2, "wakerTid": 2, "wakerContext": "task" });
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 10.0, woken), (20.0, 30.0, short)]),
                thread(1, 2, "server", vec![]),
            ],
        });
        let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
        assert_charged(&why, 1, "waking its CPU", 1.2);
        assert_charged(&why, 2, "running", 8.0 + 0.5);
        assert_charged(&why, 1, "runnable", 1.0 + 0.3);
        assert!((why.off_cpu_ms - 11.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    }

    /// Check the run queue: a thread preempted on CPU 1 for 10-30 ms and
    /// woken at 50 for a run delay of 4 ms on CPU 0 charges those spans to
    /// the CPUs' slices (read half an interval earlier), the rounding gaps
    /// next to its own slices to the holders beside them, and what no
    /// slice covers (CPU 0 idle 51-53) to its own queue.
    #[test]
    fn run_queue_waits_are_charged_to_the_cpus_holders() {
        let mut preempted = off("preempted (runnable)", 20.0, None, None);
        preempted["cpuOut"] = 1.into();
        preempted["cpuIn"] = 1.into();
        let mut woken = off("sleeping", 4.0, Some(9), Some("hard IRQ"));
        woken["cpuOut"] = 1.into();
        woken["cpuIn"] = 0.into();
        let idle = serde_json::json!({ "type": "CpuIdle" });
        let profile = serde_json::json!({
            "meta": { "categories": [], "interval": 1.0 },
            "threads": [
                thread(1, 1, "waiter", vec![(10.0, 30.0, preempted), (40.0, 54.0, woken)]),
                thread(1, 2, "a", vec![]),
                thread(1, 3, "b", vec![]),
                // Read as [x - 0.5, y - 0.5]: the waiter's own slice ends at
                // 10.2 (a gap to a's at 10.5 that is a's), a 10.5-20.5,
                // b 20.5-29.7 (a trailing gap of 0.3 that is b's).
                cpu_track(1, vec![(5.0, 10.7, on(1)), (11.0, 21.0, on(2)), (21.0, 30.2, on(3)), (30.5, 40.0, on(1))]),
                // 50-51 a, 51-53 idle, 53-54 b.
                cpu_track(0, vec![(50.5, 51.5, on(2)), (51.5, 53.5, idle), (53.5, 60.5, on(3))]),
            ],
        });
        let why = Threads::read(&profile).why(&[1], 0.0, 100.0, 5);
        // a: 10-20.5 (its lead gap 10-10.5 included) and 50-51; b: 20.5-30
        // (its trailing gap 29.7-30 included) and 53-54.
        assert_charged(&why, 2, "holding its CPU", 11.5);
        assert_charged(&why, 3, "holding its CPU", 10.5);
        assert_charged(&why, 1, "timer", 10.0);
        assert_charged(&why, 1, "runnable", 2.0);
        let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
        assert!(
            (total - why.off_cpu_ms).abs() < 1e-9,
            "{total} vs {}",
            why.off_cpu_ms
        );
    }

    /// Check a short run's run-queue time: 3 of its 4 ms were runnable
    /// (1 before its wakeup, by a thread with no track), charged to the
    /// threads that held the CPU it ran on over its span, by how long:
    /// thread 3 held CPU 0 6 ms of it and thread 4 2 ms (CPU 1, where it
    /// did not run, does not count).
    #[test]
    fn short_waits_queue_is_charged_to_the_cpus_holders() {
        let profile = serde_json::json!({
            "meta": { "categories": [], "interval": 1.0 },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 10.0, short(5, 4.0, 1.0, Some(9), "task"))]),
                thread(1, 3, "a", vec![]),
                thread(1, 4, "b", vec![]),
                thread(1, 5, "c", vec![]),
                // Read half an interval earlier: 1 on 0-2, 3 on 2-8, 4 on 8-10.
                cpu_track(0, vec![(0.5, 2.5, on(1)), (2.5, 8.5, on(3)), (8.5, 10.5, on(4))]),
                cpu_track(1, vec![(0.5, 10.5, on(5))]),
            ],
        });
        let why = Threads::read(&profile).why(&[1], 0.0, 10.0, 5);
        let get = |tid: u32, what: &str| charged(&why, tid, what);
        assert_charged(&why, 3, "holding its CPU", 2.25);
        assert_charged(&why, 4, "holding its CPU", 0.75);
        assert_eq!(get(5, "holding its CPU"), 0.0, "{:?}", why.blame);
        assert_charged(&why, 9, "running", 1.0);
        assert!((why.off_cpu_ms - 4.0).abs() < 1e-9, "{}", why.off_cpu_ms);
    }

    /// Check a chain: a client waits 100 ms on a server (woken 1 ms late),
    /// the server waits on a holder for 60 ms of it, the holder reads a
    /// disk for 40 of those and runs 20; the rest the server ran. Every ms
    /// lands once, the I/O on its device, the timer sleep on the timer.
    #[test]
    fn a_wait_is_charged_along_its_chain() {
        let io = serde_json::json!({ "type": "BlockIo", "device": "vda" });
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 100.0, off("sleeping", 1.0, Some(2), Some("task"))), (200.0, 210.0, off("sleeping", 0.0, None, Some("hard IRQ")))]),
                thread(2, 2, "server", vec![(10.0, 70.0, off("sleeping", 0.0, Some(3), Some("task")))]),
                thread(2, 3, "holder", vec![(15.0, 55.0, off("blocked (uninterruptible)", 0.5, None, Some("hard IRQ"))), (14.0, 56.0, io)]),
            ],
        });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 0.0, 1000.0, 5);
        assert_eq!(why.waits, 2);
        assert!((why.off_cpu_ms - 110.0).abs() < 1e-9);
        assert_charged(&why, 1, "runnable", 1.0);
        assert_charged(&why, 1, "timer", 10.0);
        // The server ran 0-10 and 70-99 of the client's wait: 39 ms.
        assert_charged(&why, 2, "running", 39.0);
        // The holder: I/O 15-54.5 (its wakeup 0.5 ms before it ran), runnable 0.5, running the rest of 10-70.
        assert_charged(&why, 3, "I/O", 39.5);
        assert!(why
            .blame
            .iter()
            .any(|(c, _)| c.what == "I/O" && c.device.as_deref() == Some("vda")));
        assert_charged(&why, 3, "runnable", 0.5);
        assert_charged(&why, 3, "running", 20.0);
        let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
        assert!(
            (total - why.off_cpu_ms).abs() < 1e-9,
            "every ms once: {total} vs {}",
            why.off_cpu_ms
        );
        assert_eq!(why.longest[0].1, 100.0);
    }

    fn short(count: u32, off_cpu: f64, waited: f64, waker: Option<u32>, context: &str) -> Value {
        serde_json::json!({ "type": "ShortWaits", "count": count, "offCpu": off_cpu, "waited": waited, "wakerTid": waker, "wakerContext": context })
    }

    /// Check that a short run's waker is read only where the run's waits
    /// can lie: not over the thread's own long waits, which their markers
    /// charge exactly. A client's run of short waits over 0-100 holds its
    /// 20-ms wait at 40-60, while the server was preempted: that 20 ms is
    /// the server's run queue, once; the short waits' 30 ms are the
    /// server's running around it, not 24 of running and 6 more of its
    /// run queue.
    #[test]
    fn short_waits_are_not_charged_to_what_their_long_waits_were() {
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 100.0, short(100, 30.0, 30.0, Some(2), "task")), (40.0, 60.0, off("sleeping", 0.0, Some(2), Some("task")))]),
                thread(2, 2, "server", vec![(40.0, 60.0, off("preempted", 20.0, None, None))]),
            ],
        });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 0.0, 100.0, 5);
        assert!((why.off_cpu_ms - 50.0).abs() < 1e-9, "{}", why.off_cpu_ms);
        assert_charged(&why, 2, "running", 30.0);
        assert_charged(&why, 2, "runnable", 20.0);
    }

    /// Ten threads that each wake all the others over one span: every
    /// chain branches nine ways at each level. Followed path by path, the
    /// budget ran out and part of the wait was "chain too deep" (pgbench's
    /// client, 31 %); each thread's activity over the span is charged once
    /// and read again, and all of it is someone's running.
    #[test]
    fn a_mesh_of_wakers_is_charged_whole() {
        let n = 10u32;
        let threads: Vec<Value> = (1..=n)
            .map(|tid| {
                let runs = (1..=n)
                    .filter(|&w| w != tid)
                    .map(|w| (0.0, 100.0, short(50, 2.0, 2.0, Some(w), "task")))
                    .collect();
                thread(tid, tid, "mesh", runs)
            })
            .collect();
        let profile = serde_json::json!({ "meta": { "categories": [] }, "threads": threads });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 0.0, 100.0, 5);
        assert!((why.off_cpu_ms - 18.0).abs() < 1e-9, "{}", why.off_cpu_ms);
        let deep: f64 = why
            .blame
            .iter()
            .filter(|(c, _)| c.what == "waiting (chain too deep)")
            .map(|(_, ms)| ms)
            .sum();
        assert_eq!(deep, 0.0, "{:?}", why.blame);
        let running: f64 = (2..=n).map(|tid| charged(&why, tid, "running")).sum();
        assert!((running - 18.0).abs() < 1e-9, "{:?}", why.blame);
        // Each other thread ran 82 of its 100 ms: 2 ms each in truth. A
        // thread's activity is remembered as the first chain that reached
        // it saw it, that chain's threads cut as cycles: the last reached
        // keep more of their own running (1.67-2.38 ms here).
        for tid in 2..=n {
            let ms = charged(&why, tid, "running");
            assert!((1.5..2.5).contains(&ms), "{tid}: {:?}", why.blame);
        }
    }

    /// A round trip in short waits where the server also waits for a CPU
    /// after the client's requests wake it: that run delay is the server's
    /// CPUs' (here its own run queue: no per-CPU tracks), not the cycle's.
    /// Charged whole as a cycle, it was dropped and the client's wait went
    /// all to the server's running.
    /// What a thread's activity was is kept per thread asked about: for
    /// another, the chain's cycles are other threads. Kept across them, a
    /// thread's own short waits were charged to its own running (1 and 2
    /// woken by 3, 3 by 2: for 1, 3 waited on 2 running; for 2, on itself).
    /// And the threads on the chain hold none of the CPUs a waker waited
    /// for: they were waiting.
    #[test]
    fn a_chain_is_charged_for_its_own_thread() {
        let slices: Vec<(f64, f64, Value)> = (0..10)
            .map(|i| {
                let t = [1, 2, 3][i % 3];
                (i as f64 * 10.0, i as f64 * 10.0 + 10.0, on(t))
            })
            .collect();
        let profile = serde_json::json!({
            "meta": { "categories": [], "interval": 1.0 },
            "threads": [
                thread(1, 1, "a", vec![(0.0, 100.0, short(100, 10.0, 10.0, Some(3), "task"))]),
                thread(2, 2, "b", vec![(0.0, 100.0, short(100, 10.0, 10.0, Some(3), "task"))]),
                thread(3, 3, "c", vec![(0.0, 100.0, short(100, 50.0, 30.0, Some(2), "task"))]),
                cpu_track(0, slices),
            ],
        });
        let threads = Threads::read(&profile);
        let first = threads.why(&[1], 0.0, 100.0, 5);
        assert!(charged(&first, 2, "running") > 0.0, "{:?}", first.blame);
        assert_eq!(
            charged(&first, 1, "holding its CPU"),
            0.0,
            "{:?}",
            first.blame
        );
        let runs = threads.each_short_run(2, 0.0, 100.0);
        assert_eq!(runs.len(), 1);
        let own: Vec<_> = runs[0].2.blame.iter().filter(|(c, _)| c.tid == 2).collect();
        assert!(
            own.is_empty(),
            "2's waits charged to 2: {:?}",
            runs[0].2.blame
        );
    }

    #[test]
    fn a_waker_waiting_for_a_cpu_is_not_a_cycle() {
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 100.0, short(1000, 60.0, 50.0, Some(2), "task"))]),
                thread(2, 2, "server", vec![(0.0, 100.0, short(1000, 30.0, 20.0, Some(1), "task"))]),
            ],
        });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 0.0, 100.0, 5);
        // The server over the span: 10 ms runnable, 20 waiting for the
        // client (the cycle, left out), 70 running of which 10 after the
        // client's wakeups (out of its running first): 60 and 10 share
        // the client's 50 ms waited.
        assert_charged(&why, 2, "running", 50.0 * 60.0 / 70.0);
        assert_charged(&why, 2, "runnable", 50.0 * 10.0 / 70.0);
        assert_charged(&why, 1, "runnable", 10.0);
    }

    /// Check short waits: a client in round trips with a server (runs of
    /// short waits each way) is charged, before its wakeups, to the
    /// server's running (not to the server's own waits for the client),
    /// and after them to its own run queue; a range takes its share of a
    /// run; interrupts go to the request in flight; every ms once.
    #[test]
    fn short_waits_are_charged_to_their_waker() {
        let io = serde_json::json!({ "type": "BlockIo", "device": "vdb" });
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 100.0, short(1000, 60.0, 50.0, Some(2), "task")), (200.0, 300.0, short(10, 8.0, 6.0, None, "interrupt")), (190.0, 310.0, io)]),
                thread(2, 2, "server", vec![(0.0, 100.0, short(1000, 30.0, 30.0, Some(1), "task")), (40.0, 50.0, off("sleeping", 0.0, Some(3), Some("task")))]),
                thread(3, 3, "third", vec![]),
            ],
        });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 0.0, 1000.0, 5);
        let get = |tid: u32, what: &str| charged(&why, tid, what);
        assert!((why.off_cpu_ms - 68.0).abs() < 1e-9, "{}", why.off_cpu_ms);
        assert_eq!(why.waits, 1010);
        assert_charged(&why, 1, "runnable", 12.0);
        // Over 0-100 the server waited 10 ms on the third thread (which ran
        // then), 30 on the client (dropped: a cycle), and ran 60. Of that
        // 70, 20 is more than the client's 50 ms waited; the 10 ms after
        // the client's wakeups the server ran on (it had just woken it):
        // out of its running first. The client's 50 ms go 50:10.
        assert!(
            (get(2, "running") - 50.0 * 50.0 / 60.0).abs() < 1e-9,
            "{:?}",
            why.blame
        );
        assert!(
            (get(3, "running") - 50.0 * 10.0 / 60.0).abs() < 1e-9,
            "{:?}",
            why.blame
        );
        assert!(
            why.blame.iter().any(|(c, ms)| c.what == "I/O"
                && c.device.as_deref() == Some("vdb")
                && (ms - 6.0).abs() < 1e-9),
            "{:?}",
            why.blame
        );
        let total: f64 = why.blame.iter().map(|(_, ms)| ms).sum();
        assert!(
            (total - why.off_cpu_ms).abs() < 1e-9,
            "every ms once: {total} vs {}",
            why.off_cpu_ms
        );
        // Half the first run's span: half its time.
        let half = threads.why(&[1], 0.0, 50.0, 5);
        assert!((half.off_cpu_ms - 30.0).abs() < 1e-9, "{}", half.off_cpu_ms);
    }

    /// Check that a waker's landing that overlapped its wakee's running is
    /// not charged to the wakee's waits, before any of the waker's running
    /// is. A round trip over 0-100 ms on a VM whose idle vCPUs wake slowly:
    /// the client waited 50 ms for the server (then 25 landing, 5 runnable)
    /// and ran 20; the server ran 50, waited 25 for the client (a cycle),
    /// landed 20 and was runnable 5. Of the server's 75 ms, 25 are more than
    /// the client's 50: its landing overlapped the client's 20 ms of running
    /// (it was woken by the client's write, and the client went on to its
    /// read), then 5 of its running came after its replies.
    #[test]
    fn a_wakers_landing_over_its_wakees_running_is_not_the_wakees_wait() {
        let run = |count: u32, off_cpu: f64, waited: f64, landing: f64, waker: u32| {
            serde_json::json!({ "type": "ShortWaits", "count": count, "offCpu": off_cpu,
                "waited": waited, "landing": landing, "wakerTid": waker, "wakerContext": "task" })
        };
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "client", vec![(0.0, 100.0, run(1000, 80.0, 50.0, 25.0, 2))]),
                thread(2, 2, "server", vec![(0.0, 100.0, run(1000, 50.0, 25.0, 20.0, 1))]),
            ],
        });
        let why = Threads::read(&profile).why(&[1], 0.0, 1000.0, 5);
        assert!((why.off_cpu_ms - 80.0).abs() < 1e-9, "{}", why.off_cpu_ms);
        assert_charged(&why, 1, "waking its CPU", 25.0);
        assert_charged(&why, 1, "runnable", 5.0);
        assert_charged(&why, 2, "running", 45.0);
        assert_charged(&why, 2, "runnable", 5.0);
        assert_charged(&why, 2, "waking its CPU", 0.0);
    }

    /// Check that a cycle of wakers ends the chain instead of looping, and
    /// that a range cuts the waits.
    #[test]
    fn cycles_end_the_chain_and_ranges_cut() {
        let profile = serde_json::json!({
            "meta": { "categories": [] },
            "threads": [
                thread(1, 1, "a", vec![(0.0, 10.0, off("sleeping", 0.0, Some(2), Some("task")))]),
                thread(1, 2, "b", vec![(0.0, 10.0, off("sleeping", 0.0, Some(1), Some("task")))]),
            ],
        });
        let threads = Threads::read(&profile);
        let why = threads.why(&[1], 2.0, 6.0, 1);
        assert!((why.off_cpu_ms - 4.0).abs() < 1e-9);
        assert_eq!(
            why.blame,
            vec![(
                Culprit {
                    tid: 1,
                    what: "waiting (cycle)",
                    device: None
                },
                4.0
            )]
        );
        assert_eq!(threads.resolve(1), vec![1], "a tid first");
        assert_eq!(threads.resolve(7), Vec::<u32>::new());
    }
}
