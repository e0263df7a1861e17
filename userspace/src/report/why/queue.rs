//! Run-queue time, charged to whoever held the CPU meanwhile.
//!
//! In: a span a thread spent runnable on a known CPU (a marked wait's
//! run delay, a preemption), or a short run's run-queue time somewhere
//! in its spans, and the per-CPU slices. Out: "holding its CPU" pieces
//! for the threads those slices show, by their overlap (a short run's
//! spread over the CPUs it ran on), and the rest the thread's own
//! "runnable".

use super::blame::{Blame, Key, What, NO_DEVICE};
use super::{Slice, Threads};

impl Threads {
    /// Charge `[a, b]`, which thread `tid` spent runnable on `cpu`, to the
    /// threads the CPU's track shows running then; the rest to its own
    /// run queue.
    pub(super) fn charge_queue(&self, tid: u32, cpu: Option<u32>, a: f64, b: f64, out: &mut Blame) {
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
                    out.put(Key::new(s.tid, What::HoldingCpu, NO_DEVICE), ms);
                    held += ms;
                }
                covered = covered.max(to);
                last_holder = Some(s.tid);
            }
            let trail = b - covered;
            if let Some(holder) = last_holder.filter(|_| trail > 0.0 && trail <= self.interval) {
                out.put(Key::new(holder, What::HoldingCpu, NO_DEVICE), trail);
                held += trail;
            }
        }
        out.put(
            Key::new(tid, What::Runnable, NO_DEVICE),
            ((b - a) - held).max(0.0),
        );
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
        out: &mut Blame,
    ) {
        if ms <= 0.0 {
            return;
        }
        // The CPUs it ran on in the spans, or all of them if none: one
        // pass over each CPU's slices in the spans sums its holders and
        // sees whether the thread was among them (this was three passes,
        // a quarter of `--why`'s time beside pgbench). A few threads held
        // them: lists summed in place (see `blame`), each CPU's added in
        // the order the CPUs come, as before.
        let (mut mine, mut others, mut here) = (Blame::default(), Blame::default(), Vec::new());
        let mut ran_anywhere = false;
        for slices in self.cpus.values() {
            let mut ran = false;
            for &(a, b) in spans {
                for (t, ms) in overlapping(slices, a, b) {
                    // The threads on the chain were waiting (for this
                    // one, in the end): their slices here are the
                    // estimate's spread, not holders of its CPU.
                    if t == tid {
                        ran = true;
                    } else if ms > 0.0 && !chain.contains(&t) {
                        here.push((t, ms));
                    }
                }
            }
            ran_anywhere |= ran;
            let into = if ran { &mut mine } else { &mut others };
            for (t, ms) in here.drain(..) {
                into.add(Key::new(t, What::HoldingCpu, NO_DEVICE), ms);
            }
        }
        let mut held: Vec<(u32, f64)> = (if ran_anywhere { mine } else { others })
            .into_entries()
            .into_iter()
            .map(|(k, ms)| (k.tid(), ms))
            .collect();
        let total: f64 = held.iter().map(|(_, v)| v).sum();
        if total <= 0.0 {
            out.put(Key::new(tid, What::Runnable, NO_DEVICE), ms);
            return;
        }
        held.sort_unstable_by_key(|&(t, _)| t);
        for (holder, w) in held {
            out.put(
                Key::new(holder, What::HoldingCpu, NO_DEVICE),
                ms * w / total,
            );
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
