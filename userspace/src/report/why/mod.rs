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
//!
//! The parts: [`read`] turns the profile into each thread's facts (its
//! waits, short runs, block requests and samples, and the per-CPU
//! slices); [`wait`] charges one wait or short run; [`waker`] follows a
//! waker over a span (its own waits, recursively, remembered in
//! [`memo`]); [`queue`] charges run-queue time to the CPUs' holders;
//! [`blame`] is what they pass around (a culprit as one word, a step's
//! sums as a short list); [`render`] writes the answer as text or JSON.

mod blame;
mod memo;
mod queue;
mod read;
mod render;
mod wait;
mod waker;

#[cfg(test)]
mod tests;

use rustc_hash::FxHashMap;

use blame::{Blame, Key, NO_DEVICE};
use memo::Memo;
pub(crate) use read::Reader;
use read::{Slice, ThreadFacts};
pub use render::{render_json, render_text};

/// How many wakers deep a chain is followed.
pub const MAX_DEPTH: usize = 12;

/// Calls of the charging functions one wait (or short run) may make: short
/// runs charge along their wakers' runs, which branch at every level. At
/// 200,000, counting only the activity reads, `--why` of pgbench's client
/// beside PostgreSQL did not end in 10 minutes; now a short run's charge
/// counts as one, and the 10 s take 15.8 s (ARCHITECTURE 25). With a
/// thread's activity over a span remembered ([`Memo`]) most calls
/// are reads: at 20,000, 0.7 % of that client's waiting was still cut
/// there (31 % before); at 100,000, none, in 11.4 s.
const MAX_STEPS: usize = 100_000;

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
    /// The samples' leaf function names, escaped, each once.
    leaf_names: Vec<String>,
    /// The devices block requests name, interned: a [`Key`]'s device id
    /// is an index here plus one.
    devices: Vec<String>,
    /// Charging calls left for the wait being charged (see [`MAX_STEPS`]).
    steps: std::cell::Cell<usize>,
    /// What [`Threads::charge_activity`] found for a thread over a span,
    /// by (tid, span's ends' bits): computed once, read again by every
    /// other chain that reaches the same thread over the same span (see
    /// [`MEMO_BYTES`](memo::MEMO_BYTES)).
    memo: std::cell::RefCell<Memo>,
    /// Whether the charge under way was cut short (the chain too deep, the
    /// budget spent): what it found then is not kept in `memo`.
    cut: std::cell::Cell<bool>,
    /// Lists of spans to reuse (see [`Threads::charge_short`]).
    span_lists: std::cell::RefCell<Vec<Vec<(f64, f64)>>>,
    /// Sums to reuse (see `waker.rs`' `take_blame`).
    blame_lists: std::cell::RefCell<Vec<Blame>>,
}

impl Threads {
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
        for &(time, leaf) in &t.samples {
            if spans.iter().any(|&(a, b)| time >= a && time <= b) {
                let name = self
                    .leaf_names
                    .get(leaf as usize)
                    .map_or("", String::as_str);
                *counts.entry(name).or_default() += 1;
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
        let mut blame: FxHashMap<Key, f64> = FxHashMap::default();
        let mut each: Vec<(f64, f64, String, Vec<(Culprit, f64)>)> = Vec::new();
        for &tid in tids {
            for w in self.each_wait_keyed(tid, from, to) {
                why.waits += 1;
                why.off_cpu_ms += w.end - w.start;
                for &(c, ms) in &w.blame {
                    *blame.entry(c).or_default() += ms;
                }
                each.push((w.start, w.end - w.start, w.reason, self.culprits(w.blame)));
            }
            for (count, off_cpu, run) in self.each_short_run_keyed(tid, from, to) {
                why.waits += count;
                why.off_cpu_ms += off_cpu;
                for (c, ms) in run.blame {
                    *blame.entry(c).or_default() += ms;
                }
            }
        }
        why.blame = self.culprits(blame.into_iter().collect());
        each.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.total_cmp(&y.0)));
        each.truncate(longest);
        why.longest = each;
        why
    }

    /// The waits of `tid` (those over the marker threshold: short ones
    /// are sums) between `from` and `to`, each with where its time went.
    pub fn each_wait(&self, tid: u32, from: f64, to: f64) -> Vec<WaitBlame> {
        self.each_wait_keyed(tid, from, to)
            .into_iter()
            .map(|w| WaitBlame {
                start: w.start,
                end: w.end,
                reason: w.reason,
                blame: self.culprits(w.blame),
            })
            .collect()
    }

    /// [`Threads::each_wait`] with its culprits as keys.
    fn each_wait_keyed(&self, tid: u32, from: f64, to: f64) -> Vec<KeyedWait> {
        let Some(t) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for w in &t.waits {
            let (a, b) = (w.start.max(from), w.end.min(to));
            if a >= b {
                continue;
            }
            let mut own = Blame::default();
            let mut chain = vec![tid];
            self.steps.set(MAX_STEPS);
            self.charge_wait(tid, w, a, b, &mut chain, &mut own);
            out.push(KeyedWait {
                start: a,
                end: b,
                reason: w.reason.clone(),
                blame: own.into_entries(),
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
        self.each_short_run_keyed(tid, from, to)
            .into_iter()
            .map(|(count, off_cpu, w)| {
                let blame = self.culprits(w.blame);
                (
                    count,
                    off_cpu,
                    WaitBlame {
                        start: w.start,
                        end: w.end,
                        reason: w.reason,
                        blame,
                    },
                )
            })
            .collect()
    }

    /// [`Threads::each_short_run`] with its culprits as keys.
    fn each_short_run_keyed(&self, tid: u32, from: f64, to: f64) -> Vec<(usize, f64, KeyedWait)> {
        let Some(t) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in &t.short {
            let Some((a, b, share)) = self.short_overlap(tid, r, from, to) else {
                continue;
            };
            let count = (r.count * share).round() as usize;
            let mut own = Blame::default();
            let mut chain = vec![tid];
            self.steps.set(MAX_STEPS);
            self.charge_short(tid, r, a, b, share, &mut chain, &mut own);
            out.push((
                count,
                r.off_cpu * share,
                KeyedWait {
                    start: a,
                    end: b,
                    reason: format!("short waits ({count})"),
                    blame: own.into_entries(),
                },
            ));
        }
        out
    }
}

/// A [`WaitBlame`] as the charging makes it: its culprits as keys.
struct KeyedWait {
    start: f64,
    end: f64,
    reason: String,
    blame: Vec<(Key, f64)>,
}

impl Threads {
    /// `keyed` as the answer says it: each key a [`Culprit`], largest
    /// first, ties by culprit.
    fn culprits(&self, keyed: Vec<(Key, f64)>) -> Vec<(Culprit, f64)> {
        let mut v: Vec<(Culprit, f64)> = keyed
            .into_iter()
            .map(|(k, ms)| {
                let device = match k.device() {
                    NO_DEVICE => None,
                    id => self.devices.get(id as usize - 1).cloned(),
                };
                let what = k.what().text();
                (
                    Culprit {
                        tid: k.tid(),
                        what,
                        device,
                    },
                    ms,
                )
            })
            .collect();
        v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        v
    }
}
