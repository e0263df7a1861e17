//! Following a waker: what it did over the span its wakee waited for it.
//!
//! In: a thread and a span (the part of its wakee's wait before the
//! wakeup), the chain of threads already followed, and the charging
//! budget. Out: the thread's activity over the span (its own waits
//! charged along their wakers, recursively; its short runs' share; the
//! rest its running), remembered per span in [`Memo`](super::memo::Memo),
//! and scaled to the wakee's time with the waker's waits for the chain
//! (cycles) and its wakeups' landing taken out first.

use super::blame::{Blame, Key, What, NO_DEVICE};
use super::Threads;

impl Threads {
    /// Charge `[a, b]` of thread `tid`'s time: its waits inside it along
    /// their own chains, its short waits' share likewise, the rest as
    /// running. Charged once per thread and span and remembered: other
    /// chains reaching the same span read what the first one found (its
    /// cycles cut as that chain's; ARCHITECTURE 25), which is what keeps
    /// a server's many-way chains (pgbench's) within the budget.
    pub(super) fn charge_activity(
        &self,
        tid: u32,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut Blame,
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
            out.add(Key::new(tid, What::TooDeep, NO_DEVICE), b - a);
            return;
        }
        self.steps.set(steps - 1);
        let cut_before = self.cut.replace(false);
        let mut its = self.take_blame();
        self.activity_of(tid, a, b, chain, &mut its);
        let cut_here = self.cut.get();
        self.cut.set(cut_before || cut_here);
        if !cut_here {
            self.memo.borrow_mut().keep(key, its.entries());
        }
        out.add_scaled(its.entries(), 1.0);
        self.give_blame(its);
    }

    /// [`Threads::charge_activity`]'s work, not remembered.
    pub(super) fn activity_of(
        &self,
        tid: u32,
        a: f64,
        b: f64,
        chain: &mut Vec<u32>,
        out: &mut Blame,
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
        let mut short = self.take_blame();
        let first = t.short.partition_point(|r| r.start < a - t.short_span);
        for r in t.short[first..].iter().take_while(|r| r.start <= b) {
            if let Some((x, y, share)) = self.short_overlap(tid, r, a, b) {
                self.charge_short(tid, r, x, y, share, chain, &mut short);
            }
        }
        let short_ms: f64 = short.total();
        let scale = if short_ms > left {
            left / short_ms
        } else {
            1.0
        };
        out.add_scaled(short.entries(), scale);
        self.give_blame(short);
        out.put(
            Key::new(tid, What::Running, NO_DEVICE),
            left - short_ms.min(left),
        );
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
    pub(super) fn charge_waker(
        &self,
        waker: u32,
        wakee: u32,
        spans: &[(f64, f64)],
        ms: f64,
        ran_on: f64,
        wakee_ran: f64,
        chain: &mut Vec<u32>,
        out: &mut Blame,
    ) {
        let mut its = self.take_blame();
        chain.push(waker);
        for &(a, b) in spans {
            self.charge_activity(waker, a, b, chain, &mut its);
        }
        chain.pop();
        let total: f64 = its.total();
        let mut rest: f64 = its
            .entries()
            .iter()
            .filter(|(c, _)| c.what() != What::Cycle)
            .map(|(_, v)| v)
            .sum();
        if total <= 0.0 {
            out.add(Key::new(waker, What::Running, NO_DEVICE), ms);
            self.give_blame(its);
            return;
        }
        let keep_cycles = rest <= total * 1e-9;
        if !keep_cycles && rest > ms {
            let mut overlap = wakee_ran.max(0.0);
            for c in [
                Key::new(waker, What::WakingCpu, NO_DEVICE),
                Key::new(wakee, What::HoldingCpu, NO_DEVICE),
            ] {
                if let Some(v) = its.get_mut(c) {
                    let cut = (rest - ms).min(overlap).min(*v);
                    *v -= cut;
                    rest -= cut;
                    overlap -= cut;
                }
            }
        }
        if !keep_cycles && rest > ms {
            let own_running = Key::new(waker, What::Running, NO_DEVICE);
            if let Some(running) = its.get_mut(own_running) {
                let cut = (rest - ms).min(ran_on.max(0.0)).min(*running);
                *running -= cut;
                rest -= cut;
            }
        }
        let scale = ms / if keep_cycles { total } else { rest };
        for &(c, v) in its.entries() {
            if keep_cycles || c.what() != What::Cycle {
                out.add(c, v * scale);
            }
        }
        self.give_blame(its);
    }

    /// An empty [`Blame`] from the pool (a chain's every step sums its
    /// culprits in one or two; allocated afresh they were a third of the
    /// steps' cost).
    fn take_blame(&self) -> Blame {
        self.blame_lists.borrow_mut().pop().unwrap_or_default()
    }

    /// Return `b` to the pool, emptied.
    fn give_blame(&self, mut b: Blame) {
        b.clear();
        self.blame_lists.borrow_mut().push(b);
    }
}
