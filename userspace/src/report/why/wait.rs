//! Charging one wait, or one run of short waits, of a thread.
//!
//! In: a marked wait (its reason, waker, context, wakeup and enqueue
//! times, CPUs) or a short run's share over a span, and the chain of
//! threads followed so far. Out: its pieces by culprit: the run-queue
//! delay to the CPUs' holders, the wakeup's landing the thread's own,
//! and the time before the wakeup to the waker (followed), the I/O
//! request in flight, a timer, a softirq, or what ends the chain.

use super::blame::{Blame, Key, What, NO_DEVICE};
use super::read::{free_time, ShortRun, Wait};
use super::{Threads, MAX_DEPTH};

impl Threads {
    /// Charge `[a, b]` of wait `w` of thread `tid`.
    pub(super) fn charge_wait(
        &self,
        tid: u32,
        w: &Wait,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut Blame,
    ) {
        if w.reason.starts_with("preempted") {
            self.charge_queue(tid, w.cpu_out, a, b, out);
            return;
        }
        // Woken at `wake`, on a run queue from `queued`, runnable from
        // then until it ran; in between its wakeup was landing.
        let queued = w.queued.clamp(a, b);
        let wake = w.wake.clamp(a, queued);
        self.charge_queue(tid, w.cpu_in, queued, b, out);
        out.put(Key::new(tid, What::WakingCpu, NO_DEVICE), queued - wake);
        let (a, b) = (a, wake);
        if a >= b {
            return;
        }
        match (w.context.as_deref(), w.waker_tid) {
            (Some("task"), Some(waker)) if waker != tid => {
                if chain.contains(&waker) {
                    out.put(Key::new(waker, What::Cycle, NO_DEVICE), b - a);
                } else if chain.len() > MAX_DEPTH {
                    self.cut.set(true);
                    out.put(Key::new(waker, What::TooDeep, NO_DEVICE), b - a);
                } else if !self.threads.contains_key(&waker) {
                    // A waker with no track (not recorded): it ran to wake us.
                    out.put(Key::new(waker, What::Running, NO_DEVICE), b - a);
                } else {
                    self.charge_waker(waker, tid, &[(a, b)], b - a, 0.0, 0.0, chain, out);
                }
            }
            (Some("hard IRQ" | "softirq"), _) => {
                let t = &self.threads[&tid];
                // The request it had in flight when woken, if any.
                let io = t
                    .io_near(w.start, w.wake)
                    .iter()
                    .filter(|(s, e, _)| *s < w.wake && *e >= w.start)
                    .max_by(|x, y| x.1.total_cmp(&y.1));
                match io {
                    Some((_, _, device)) => out.put(Key::new(tid, What::Io, *device), b - a),
                    None if w.context.as_deref() == Some("hard IRQ") => {
                        out.put(Key::new(tid, What::Timer, NO_DEVICE), b - a)
                    }
                    None => out.put(Key::new(tid, What::Softirq, NO_DEVICE), b - a),
                }
            }
            _ => out.put(Key::new(tid, What::UnknownWaker, NO_DEVICE), b - a),
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
    pub(super) fn between_long_waits(&self, tid: u32, a: f64, b: f64, spans: &mut Vec<(f64, f64)>) {
        let t = &self.threads[&tid];
        spans.clear();
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
    }

    /// Charge `share` of run `r` of thread `tid` (its part in `[a, b]`):
    /// after the wakeups, its run-queue delay; before, what the waker did
    /// over `[a, b]`, less its waits on the chain, scaled to that time.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn charge_short(
        &self,
        tid: u32,
        r: &ShortRun,
        a: f64,
        b: f64,
        share: f64,
        chain: &mut Vec<u32>,
        out: &mut Blame,
    ) {
        let steps = self.steps.get();
        if steps == 0 {
            self.cut.set(true);
            out.put(Key::new(tid, What::TooDeep, NO_DEVICE), r.off_cpu * share);
            return;
        }
        self.steps.set(steps - 1);
        let waited = r.waited.min(r.off_cpu) * share;
        let landing = r.landing.min(r.off_cpu - r.waited.min(r.off_cpu)) * share;
        // The spans' list comes from a pool: a chain makes millions of them
        // (pgbench's client's 8 s: 2.9 million short runs' charges), each
        // alive only while its run is charged.
        let mut spans = self.span_lists.borrow_mut().pop().unwrap_or_default();
        self.between_long_waits(tid, a, b, &mut spans);
        self.charge_short_over(tid, r, a, b, share, waited, landing, &spans, chain, out);
        self.span_lists.borrow_mut().push(spans);
    }

    /// [`Threads::charge_short`]'s work once its spans are known.
    #[allow(clippy::too_many_arguments)]
    fn charge_short_over(
        &self,
        tid: u32,
        r: &ShortRun,
        a: f64,
        b: f64,
        share: f64,
        waited: f64,
        landing: f64,
        spans: &[(f64, f64)],
        chain: &mut Vec<u32>,
        out: &mut Blame,
    ) {
        // After the wakeups: landing, then waiting for a CPU, whoever woke it.
        self.charge_queue_spread(tid, spans, r.off_cpu * share - waited - landing, chain, out);
        out.put(Key::new(tid, What::WakingCpu, NO_DEVICE), landing);
        if r.context == "task" && r.waker_tid.is_some_and(|w| w != tid && chain.contains(&w)) {
            // Woken by a thread already on the chain: this thread's waits
            // took turns with that thread's running, not with its waiting:
            // the cycle's. Its run delays after them were its CPUs' (in a
            // round trip the server waits for a CPU while its client waits
            // for it); charged as a cycle's they were dropped with it.
            out.put(
                Key::new(r.waker_tid.unwrap_or(tid), What::Cycle, NO_DEVICE),
                waited,
            );
            return;
        }
        if waited <= 0.0 {
            return;
        }
        match (r.context.as_str(), r.waker_tid) {
            ("task", Some(waker)) if waker != tid => {
                if chain.contains(&waker) {
                    out.put(Key::new(waker, What::Cycle, NO_DEVICE), waited);
                } else if chain.len() > MAX_DEPTH {
                    self.cut.set(true);
                    out.put(Key::new(waker, What::TooDeep, NO_DEVICE), waited);
                } else if !self.threads.contains_key(&waker) || b <= a {
                    out.put(Key::new(waker, What::Running, NO_DEVICE), waited);
                } else {
                    // The wakee's own running over the spans: the time
                    // they hold less its waits there (this run's part).
                    let held: f64 = spans.iter().map(|(a, b)| b - a).sum();
                    self.charge_waker(
                        waker,
                        tid,
                        spans,
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
                    .io_near(a, b)
                    .iter()
                    .filter(|(s, e, _)| *s < b && *e > a)
                    .max_by(|x, y| (x.1.min(b) - x.0.max(a)).total_cmp(&(y.1.min(b) - y.0.max(a))));
                match io {
                    Some((_, _, device)) => out.put(Key::new(tid, What::Io, *device), waited),
                    None => out.put(Key::new(tid, What::Interrupt, NO_DEVICE), waited),
                }
            }
            ("several", _) => out.put(Key::new(tid, What::SeveralWakers, NO_DEVICE), waited),
            ("none", _) => self.charge_queue_spread(tid, spans, waited, chain, out),
            _ => out.put(Key::new(tid, What::UnknownWaker, NO_DEVICE), waited),
        }
    }
}

impl Threads {
    /// The part of thread `tid`'s run `r` in `[from, to]`: (start, end,
    /// share of the run). The share is of the run's time outside the
    /// thread's long waits ([`ShortRun::free`]), where its short waits lay;
    /// of its span where that is nothing (its span is under a long wait's
    /// rounding).
    pub(super) fn short_overlap(
        &self,
        tid: u32,
        r: &ShortRun,
        from: f64,
        to: f64,
    ) -> Option<(f64, f64, f64)> {
        let (a, b) = overlap(r, from, to)?;
        if r.end <= r.start {
            return Some((a, b, 1.0));
        }
        let uniform = (b - a) / (r.end - r.start);
        let share = match self.threads.get(&tid) {
            Some(t) if r.free > (r.end - r.start) * 1e-6 => {
                (free_time(&t.waits, a, b) / r.free).min(1.0)
            }
            _ => uniform,
        };
        Some((a, b, share))
    }
}

/// The part of run `r` in `[from, to]`: (start, end).
fn overlap(r: &ShortRun, from: f64, to: f64) -> Option<(f64, f64)> {
    let (a, b) = (r.start.max(from), r.end.min(to));
    if r.end <= r.start {
        // One instant: in or out.
        return (r.start >= from && r.start <= to).then_some((r.start, r.start));
    }
    (a < b).then_some((a, b))
}
