//! Waits and off-CPU time summed for the store's compacted segments.
//!
//! In: a recording merged from a finished bucket's windows (the store's
//! compaction), its brief processes already folded ([`super::fold::fold_within`]). Out: the same recording with each thread's off-CPU
//! intervals shorter than [`KEEP_WAIT_NS`] and its runs of short waits
//! summed per (minute, waker) into runs of waits, and its off-CPU entries
//! (the call tree's weights) shorter than that summed per
//! ([`OFF_CPU_SPAN_NS`], stack); samples, I/O requests and long waits as
//! they were.
//!
//! Why: a host's store is mostly its waits, not its samples. Ten minutes of
//! an idle 2-CPU VM at the agent's 19 Hz held 2 markers and 2 off-CPU
//! entries per sample (kernel threads and daemons waking every few ms):
//! 77 bytes a sample, where the issue asks 8. The windows of the current
//! bucket keep every wait (`report --why` of a recent incident reads each
//! one); once compacted, a minute's waits of one thread are a few runs per
//! waker, their counts and times kept whole (what `report --why` sums),
//! their timeline the minute's. The off-CPU entries are summed over a
//! shorter span, each sum centred where its waits were: `show`'s range
//! cuts an entry as one wait, so a range that begins or ends inside a span
//! moves at most that span's off-CPU time of a thread at one stack to one
//! side of the cut (summed per minute at the first wait, a range of a
//! minute's second half lost all of it); a thread whose waits fill the
//! span has entries as long as the span, cut in proportion.

use rustc_hash::FxHashMap;

use super::fold::SpanSums;
use super::recording::{
    InterruptKind, MarkerRecord, OffCpuReason, OffCpuSamples, Recording, ShortWaker, Waker,
};

/// The span waits are summed over in a compacted segment.
pub const SUM_SPAN_NS: u64 = 60_000_000_000;

/// Off-CPU intervals this long or longer keep their own marker: a stall
/// stays visible, where it was, in an old segment. Not less: an idle
/// host's kernel workers sleep 1-5 s at a time, three such markers a
/// second on this VM (a 1-s bound kept 85 in a compacted half-minute).
pub const KEEP_WAIT_NS: u64 = 10_000_000_000;

/// The span a compacted segment sums a thread's off-CPU entries over, per
/// stack: the agent's window. In a compacted 3-minute segment of the agent
/// beside a CPU-bound program and a `cargo build`, 6,811 entries were 2,809
/// summed per second, 1,325 per 10 s, 1,016 per minute: most of the saving
/// is in the first seconds, and a cut's error grows with the span.
pub const OFF_CPU_SPAN_NS: u64 = 10_000_000_000;

/// Sum `rec`'s waits per [`SUM_SPAN_NS`] and its off-CPU entries per
/// [`OFF_CPU_SPAN_NS`]; see the module doc.
pub fn coarsen(rec: &mut Recording) {
    sum_waits(rec);
    sum_off_cpu(rec);
}

/// Sum each thread's off-CPU entries shorter than [`KEEP_WAIT_NS`] per
/// ([`OFF_CPU_SPAN_NS`], stack), each sum centred where its waits were
/// (their time-weighted middle, within the first's start and the last's
/// end), in time order; longer ones as they were.
///
/// Centred, not at the first wait: two stacks a thread waits at in turn
/// would otherwise both lie in the span's first half, and a cut through
/// the span would give that half the whole span's time.
pub fn sum_off_cpu(rec: &mut Recording) {
    let mut at: FxHashMap<(u64, u32), usize> = FxHashMap::default();
    let mut sums: Vec<OffCpuSum> = Vec::new();
    for p in &mut rec.processes {
        for t in &mut p.threads {
            at.clear();
            sums.clear();
            let was = std::mem::take(&mut t.off_cpu);
            let mut kept = OffCpuSamples::default();
            for ((&time, &stack), &duration) in
                was.time_ns.iter().zip(&was.stack).zip(&was.duration_ns)
            {
                if duration >= KEEP_WAIT_NS {
                    kept.time_ns.push(time);
                    kept.stack.push(stack);
                    kept.duration_ns.push(duration);
                    continue;
                }
                let i = *at
                    .entry((time / OFF_CPU_SPAN_NS, stack))
                    .or_insert_with(|| {
                        sums.push(OffCpuSum {
                            stack,
                            first_ns: time,
                            last_end_ns: time,
                            ..Default::default()
                        });
                        sums.len() - 1
                    });
                let sum = &mut sums[i];
                sum.first_ns = sum.first_ns.min(time);
                sum.last_end_ns = sum.last_end_ns.max(time.saturating_add(duration));
                sum.duration_ns += duration;
                sum.weighted_middle += u128::from(time) * u128::from(duration)
                    + u128::from(duration) * u128::from(duration) / 2;
            }
            for sum in &sums {
                kept.time_ns.push(sum.start_ns());
                kept.stack.push(sum.stack);
                kept.duration_ns.push(sum.duration_ns);
            }
            let mut order: Vec<usize> = (0..kept.time_ns.len()).collect();
            order.sort_by_key(|&i| (kept.time_ns[i], kept.stack[i]));
            t.off_cpu = OffCpuSamples {
                time_ns: order.iter().map(|&i| kept.time_ns[i]).collect(),
                stack: order.iter().map(|&i| kept.stack[i]).collect(),
                duration_ns: order.iter().map(|&i| kept.duration_ns[i]).collect(),
            };
        }
    }
}

/// One (span, stack)'s off-CPU entries as they are summed.
#[derive(Default)]
struct OffCpuSum {
    stack: u32,
    first_ns: u64,
    last_end_ns: u64,
    duration_ns: u64,
    /// Σ each entry's middle × its duration.
    weighted_middle: u128,
}

impl OffCpuSum {
    /// Where the sum starts: centred on its entries' time-weighted middle,
    /// within the first's start and the last's end.
    fn start_ns(&self) -> u64 {
        if self.duration_ns == 0 {
            return self.first_ns;
        }
        let middle = (self.weighted_middle / u128::from(self.duration_ns)) as u64;
        let latest = self
            .last_end_ns
            .saturating_sub(self.duration_ns)
            .max(self.first_ns);
        middle
            .saturating_sub(self.duration_ns / 2)
            .clamp(self.first_ns, latest)
    }
}

/// Sum `rec`'s waits per [`SUM_SPAN_NS`]; see the module doc.
pub fn sum_waits(rec: &mut Recording) {
    for p in &mut rec.processes {
        for t in &mut p.threads {
            let mut sums = SpanSums::new(SUM_SPAN_NS);
            let mut markers = std::mem::take(&mut t.markers);
            markers.sort_by_key(MarkerRecord::start_ns);
            for m in markers {
                sums.add_marker(&mut t.markers, as_run(m));
            }
            t.markers.sort_by_key(MarkerRecord::start_ns);
        }
    }
}

/// An off-CPU interval shorter than [`KEEP_WAIT_NS`] as a run of one wait
/// (its waker, run delay and landing kept as a run's are); anything else as
/// it is.
fn as_run(m: MarkerRecord) -> MarkerRecord {
    let MarkerRecord::OffCpu {
        start_ns,
        end_ns,
        reason,
        run_delay_ns,
        landing_ns,
        ref waker,
        ..
    } = m
    else {
        return m;
    };
    let off_cpu_ns = end_ns.saturating_sub(start_ns);
    if off_cpu_ns >= KEEP_WAIT_NS {
        return m;
    }
    // As the collector names a short wait's waker (`collector/sched.rs`).
    let waker = match (reason, waker) {
        (OffCpuReason::Preempted, _) => ShortWaker::Nobody,
        (_, None) => ShortWaker::Unseen,
        // Its stack was lost: a task or an interrupt, not known.
        (
            _,
            Some(Waker {
                interrupt: Some(InterruptKind::Unknown),
                ..
            }),
        ) => ShortWaker::Unseen,
        (
            _,
            Some(Waker {
                interrupt: Some(_), ..
            }),
        ) => ShortWaker::Interrupt,
        (_, Some(Waker { pid, tid, .. })) => ShortWaker::Task {
            pid: *pid,
            tid: *tid,
        },
    };
    // Before its wakeup it waited; after, its landing and run delay were
    // runnable (a preemption is all runnable). The landing is bounded by
    // what is left, as the collector bounds a short wait's.
    let (waited_ns, landing_ns) = match (reason, run_delay_ns) {
        (OffCpuReason::Preempted, _) => (0, 0),
        (_, None) => (off_cpu_ns, 0),
        (_, Some(delay)) => {
            let waited = off_cpu_ns.saturating_sub(delay).saturating_sub(landing_ns);
            (waited, landing_ns.min(off_cpu_ns - waited))
        }
    };
    MarkerRecord::ShortWaits {
        start_ns,
        end_ns,
        count: 1,
        off_cpu_ns,
        waited_ns,
        landing_ns,
        waker,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::recording::{IoOp, ProcessRecord, ThreadRecord};

    const MS: u64 = 1_000_000;

    fn wait(start_ns: u64, len_ns: u64, waker_tid: u32) -> MarkerRecord {
        MarkerRecord::OffCpu {
            start_ns,
            end_ns: start_ns + len_ns,
            reason: OffCpuReason::Sleeping,
            run_delay_ns: Some(MS),
            landing_ns: MS / 10,
            waker: Some(Waker {
                pid: 7,
                tid: waker_tid,
                name: crate::model::short_name::short_name("w"),
                interrupt: None,
            }),
            cpus: (0, 1),
            waker_stack: None,
        }
    }

    /// Check that a thread's waits over two minutes come out as one run per
    /// (minute, waker) with every wait's count and time kept, and that a
    /// wait of 10 s or more, an I/O request, the samples and the off-CPU
    /// entries stay as they were.
    #[test]
    fn waits_are_summed_per_minute_and_waker_with_totals_kept() {
        let mut t = ThreadRecord {
            tid: 10,
            ..Default::default()
        };
        let t0 = 1_000 * SUM_SPAN_NS;
        // 240 waits of 5 ms, one every 0.5 s for 2 minutes, two wakers in turn.
        for i in 0..240u64 {
            let at = t0 + i * 500 * MS;
            t.markers.push(wait(at, 5 * MS, 20 + (i % 2) as u32));
            t.off_cpu.time_ns.push(at);
            t.off_cpu.stack.push(3 + (i % 2) as u32);
            t.off_cpu.duration_ns.push(5 * MS);
        }
        t.markers.push(wait(t0 + 10 * MS, 20_000 * MS, 20));
        t.markers.push(MarkerRecord::ShortWaits {
            start_ns: t0 + 30 * MS,
            end_ns: t0 + 40 * MS,
            count: 4,
            off_cpu_ns: 2 * MS,
            waited_ns: MS,
            landing_ns: 0,
            waker: ShortWaker::Task { pid: 7, tid: 20 },
        });
        t.markers.push(MarkerRecord::Io {
            start_ns: t0 + 50 * MS,
            issue_ns: t0 + 51 * MS,
            done_ns: t0 + 52 * MS,
            device: crate::model::short_name::short_name("vda"),
            op: IoOp::Read,
            flags: 0,
            bytes: 4096,
            sector: 8,
            error: 0,
            stack: None,
        });
        t.samples.time_ns = vec![t0, t0 + MS];
        t.samples.stack = vec![1, 2];
        t.samples.cpu_delta_ns = vec![MS, MS];
        t.samples.cpu = vec![0, 1];
        let samples = t.samples.clone();
        let off_cpu = t.off_cpu.clone();
        let mut rec = Recording {
            processes: vec![ProcessRecord {
                pid: 10,
                threads: vec![t],
                ..Default::default()
            }],
            ..Default::default()
        };
        sum_waits(&mut rec);
        let t = &rec.processes[0].threads[0];
        assert_eq!(t.samples, samples);
        assert_eq!(t.off_cpu, off_cpu, "off-CPU entries stay one per wait");
        let runs: Vec<(ShortWaker, u32, u64, u64)> = t
            .markers
            .iter()
            .filter_map(|m| match m {
                MarkerRecord::ShortWaits {
                    waker,
                    count,
                    off_cpu_ns,
                    waited_ns,
                    ..
                } => Some((*waker, *count, *off_cpu_ns, *waited_ns)),
                _ => None,
            })
            .collect();
        // (minute, waker): 2 × 2 runs, the first holding the run of 4 too.
        assert_eq!(runs.len(), 4, "{runs:?}");
        assert_eq!(runs.iter().map(|r| r.1).sum::<u32>(), 240 + 4);
        assert_eq!(runs.iter().map(|r| r.2).sum::<u64>(), 240 * 5 * MS + 2 * MS);
        // Each 5-ms wait: 1 ms run delay and 0.1 ms landing after it waited.
        assert_eq!(
            runs.iter().map(|r| r.3).sum::<u64>(),
            240 * (5 * MS - MS - MS / 10) + MS
        );
        assert_eq!(
            runs[0],
            (
                ShortWaker::Task { pid: 7, tid: 20 },
                64,
                60 * 5 * MS + 2 * MS,
                60 * 3_900_000 + MS
            )
        );
        let long = t
            .markers
            .iter()
            .filter(|m| matches!(m, MarkerRecord::OffCpu { end_ns, start_ns, .. } if end_ns - start_ns == 20_000 * MS))
            .count();
        let io = t
            .markers
            .iter()
            .filter(|m| matches!(m, MarkerRecord::Io { .. }))
            .count();
        assert_eq!((long, io, t.markers.len()), (1, 1, 6));
        assert!(t
            .markers
            .windows(2)
            .all(|w| w[0].start_ns() <= w[1].start_ns()));
    }

    /// Check that a thread's off-CPU entries come out one per (10 s, stack)
    /// with each stack's time kept to the nanosecond, that an entry of 10 s
    /// or more stays as it was, and that a range cut through a span of a
    /// thread whose waits fill it (a kernel worker sleeping 5 ms at a time)
    /// keeps its share of the span's time: the cut's error is bounded by the
    /// span, not a minute.
    #[test]
    fn off_cpu_entries_are_summed_per_span_and_stack_with_totals_kept() {
        let mut t = ThreadRecord {
            tid: 10,
            ..Default::default()
        };
        let t0 = 1_000 * SUM_SPAN_NS;
        // 30 s of 5-ms waits 0.1 ms apart at two stacks in turn, then a 12-s wait.
        let mut at = t0;
        let mut i = 0u32;
        while at < t0 + 30_000 * MS {
            t.off_cpu.time_ns.push(at);
            t.off_cpu.stack.push(3 + i % 2);
            t.off_cpu.duration_ns.push(5 * MS);
            at += 5 * MS + MS / 10;
            i += 1;
        }
        t.off_cpu.time_ns.push(at);
        t.off_cpu.stack.push(3);
        t.off_cpu.duration_ns.push(12_000 * MS);
        let waits = t.off_cpu.clone();
        let per_stack = |o: &OffCpuSamples, stack: u32| -> u64 {
            o.stack
                .iter()
                .zip(&o.duration_ns)
                .filter(|(&s, _)| s == stack)
                .map(|(_, &d)| d)
                .sum()
        };
        let mut rec = Recording {
            start_ns: t0,
            end_ns: at + 12_000 * MS,
            processes: vec![ProcessRecord {
                pid: 10,
                threads: vec![t],
                ..Default::default()
            }],
            ..Default::default()
        };
        let whole = rec.clone();
        sum_off_cpu(&mut rec);
        let o = &rec.processes[0].threads[0].off_cpu;
        // 3 spans × 2 stacks, and the long wait.
        assert_eq!(o.time_ns.len(), 7, "{o:?}");
        for stack in [3, 4] {
            assert_eq!(per_stack(o, stack), per_stack(&waits, stack));
        }
        assert!(o.time_ns.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            (o.time_ns[6], o.duration_ns[6]),
            (at, 12_000 * MS),
            "the long wait as it was"
        );
        // A cut 5 s into the second span: what each side keeps, against
        // what the waits themselves would have kept.
        let cut = |r: &Recording, from: u64, to: u64| -> u64 {
            let mut r = r.clone();
            r.clip(from, to);
            r.processes
                .first()
                .map_or(0, |p| p.threads[0].off_cpu.duration_ns.iter().sum())
        };
        let mid = t0 + 15_000 * MS;
        for (from, to) in [(t0, mid), (mid, t0 + 30_000 * MS)] {
            let truth = cut(&whole, from, to);
            let summed = cut(&rec, from, to);
            let err = truth.abs_diff(summed);
            assert!(
                err <= 100 * MS,
                "[{from}, {to}): {summed} against the waits' {truth}"
            );
        }
    }

    /// Check that a wait becomes the run the collector would have made of
    /// it: a lost waker stack is no task's, a landing is bounded by what is
    /// left after the wait, a preemption is all runnable with no landing.
    #[test]
    fn a_wait_becomes_the_run_the_collector_makes() {
        let run = |m: MarkerRecord| match as_run(m) {
            MarkerRecord::ShortWaits {
                waker,
                off_cpu_ns,
                waited_ns,
                landing_ns,
                ..
            } => (waker, off_cpu_ns, waited_ns, landing_ns),
            other => panic!("not a run: {other:?}"),
        };
        let mut lost = wait(0, 5 * MS, 20);
        if let MarkerRecord::OffCpu { waker: Some(w), .. } = &mut lost {
            w.interrupt = Some(InterruptKind::Unknown);
        }
        assert_eq!(run(lost).0, ShortWaker::Unseen);
        // An 8-ms wait whose landing says 10 ms: at most the 8 ms are it.
        let mut late = wait(0, 8 * MS, 20);
        if let MarkerRecord::OffCpu {
            run_delay_ns,
            landing_ns,
            ..
        } = &mut late
        {
            *run_delay_ns = Some(0);
            *landing_ns = 10 * MS;
        }
        let (_, off, waited, landing) = run(late);
        assert_eq!((off, waited, landing), (8 * MS, 0, 8 * MS));
        let mut preempted = wait(0, 5 * MS, 20);
        if let MarkerRecord::OffCpu { reason, .. } = &mut preempted {
            *reason = OffCpuReason::Preempted;
        }
        assert_eq!(run(preempted), (ShortWaker::Nobody, 5 * MS, 0, 0));
    }
}
