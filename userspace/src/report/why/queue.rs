//! Run-queue time, charged to whoever held the CPU meanwhile.
//!
//! In: a span a thread spent runnable on a known CPU (a marked wait's
//! run delay, a preemption), or a short run's run-queue time somewhere
//! in its spans, and the per-CPU slices. Out: "holding its CPU" pieces
//! for the threads those slices show, by their overlap (a short run's
//! spread over the CPUs it ran on), and the rest the thread's own
//! "runnable".

use rustc_hash::FxHashMap;

use super::{Slice, Threads};

impl Threads {
    /// Charge `[a, b]`, which thread `tid` spent runnable on `cpu`, to the
    /// threads the CPU's track shows running then; the rest to its own
    /// run queue.
    pub(super) fn charge_queue(
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
    pub(super) fn charge_queue_spread(
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
