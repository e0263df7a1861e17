//! Replay of scheduler and block I/O records: off-CPU intervals become
//! weighted samples and markers (those under the marker threshold are
//! summed per thread and waker into short-waits markers), the kernel's
//! folded short waits become weighted samples per reason and a short-waits
//! marker each (its runs of one place's longer waits, `by_place`, are
//! summed into those of their waker instead), I/O requests become markers,
//! and per-CPU tracks are derived from the samples.
//!
//! In: a window's [`OffCpuRecord`]s, [`FoldedRecord`]s and [`IoRecord`]s in
//! time order (merged with samples and sideband by
//! [`super::Collector::finish_window`]), each with its raw stacks. Out:
//! fields of the replay's per-thread data.

use super::replay::{PseudoFrame, Replay};
use super::WindowData;
use crate::bpf::abi::{comm_str, TASK_COMM_LEN};
use crate::model::recording::{
    run_delay_shown_apart, IoOp, MarkerRecord, OffCpuReason, ShortWaker, SliceKind, Waker,
};
use crate::model::short_name::{short_name, DeviceName};
use crate::model::stack_tree::{NodeIndex, NO_PARENT};

/// One off-CPU interval, its stacks interned as raw stacks of the window.
#[derive(Debug, Clone)]
pub(super) struct OffCpuRecord {
    pub start_ns: u64,
    pub end_ns: u64,
    pub wake_ns: u64,
    /// From `wake_ns` to the enqueue, when seen: runnable only after it.
    pub landing_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu_out: u32,
    pub cpu_in: u32,
    pub reason: OffCpuReason,
    /// Where it left the CPU (raw node; NO_PARENT when unknown).
    pub stack: NodeIndex,
    /// Who woke it, and the waker's raw stack at the wakeup.
    pub waker: Option<(Waker, NodeIndex)>,
    pub comm: [u8; TASK_COMM_LEN],
    /// The tracer first saw the thread off the CPU (asleep since before
    /// tracing, or new and not run yet): `start_ns` is its creation,
    /// bounded at the window's finish by its last sample before tracing
    /// began.
    pub start_unseen: bool,
}

/// Short waits of a thread, summed per reason, and who woke them.
#[derive(Debug, Clone, Copy)]
pub(super) struct FoldedRecord {
    pub pid: u32,
    pub tid: u32,
    /// Start of the first folded wait.
    pub first_ns: u64,
    /// End of the last folded wait: where the folded time is placed.
    pub last_ns: u64,
    pub ns: [u64; 4],
    pub count: u32,
    /// Of `ns`, the time before the wakeups.
    pub wait_ns: u64,
    /// Of the rest, the time from the wakeups to their enqueues.
    pub landing_ns: u64,
    /// Of the rest, the run delays long enough to be drawn apart
    /// ([`run_delay_shown_apart`]): a run of one place's waits only.
    pub delay_ns: u64,
    /// A run of one place's waits over the kernel's fold threshold
    /// (`FOLDED_BY_PLACE`): summed with its waker's other short waits, as
    /// those waits sent alone are, not a marker of its own.
    pub by_place: bool,
    pub waker: ShortWaker,
    /// Where its waits (not its preemptions) left the CPU, when they all
    /// left from one place (raw node; NO_PARENT: several, or not known).
    pub stack: NodeIndex,
}

/// Waits longer than the kernel folds but shorter than a marker, of one
/// thread and one waker, being summed into a [`MarkerRecord::ShortWaits`]
/// (a thread has one run per waker open at a time).
#[derive(Debug, Clone, Copy)]
pub(super) struct ShortRun {
    start_ns: u64,
    end_ns: u64,
    count: u32,
    off_cpu_ns: u64,
    waited_ns: u64,
    landing_ns: u64,
    waker: ShortWaker,
}

/// A run of short waits is closed once it spans this long, or once its
/// waits add up to [`SHORT_RUN_MAX_NS`] (the kernel's `fold_span_ns` and
/// `fold_flush_ns`): a run is charged as if its waits were spread evenly
/// over its span, so a run must not hold both sides of a change (a 1-s run
/// across two phases of a round-trip test put a quarter of one phase's
/// time in the other).
const SHORT_RUN_SPAN_NS: u64 = 1_000_000_000;
const SHORT_RUN_MAX_NS: u64 = 10_000_000;

/// One block request, its issuing stack interned as a raw stack.
#[derive(Debug, Clone)]
pub(super) struct IoRecord {
    pub pid: u32,
    pub tid: u32,
    pub dev: u32,
    pub sector: u64,
    pub start_ns: u64,
    pub issue_ns: u64,
    pub done_ns: u64,
    pub bytes: u32,
    pub error: i32,
    pub op: IoOp,
    pub flags: u32,
    pub stack: NodeIndex,
}

impl Replay<'_> {
    /// One off-CPU interval: its weighted samples (a long run delay apart),
    /// and a marker, or, under `marker_min_ns`, a short wait of its waker's run.
    pub(super) fn off_cpu(&mut self, w: &WindowData, e: &OffCpuRecord, marker_min_ns: u64) {
        if !self.table.tracks(e.pid) {
            return;
        }
        let resolved = self.resolve_raw(w, e.pid, e.stack);
        let stack = self.pseudo(resolved, PseudoFrame::OffCpu(e.reason));
        let duration = e.end_ns.saturating_sub(e.start_ns);
        let marked = duration >= marker_min_ns;
        // The waker's stack goes only into a marker: a short wait keeps who
        // woke it, not where (most waits beside a server are short).
        let waker = e.waker.as_ref().map(|(waker, raw)| {
            let node = if marked {
                self.resolve_raw(w, waker.pid, *raw)
            } else {
                NO_PARENT
            };
            (waker.clone(), (node != NO_PARENT).then_some(node))
        });
        let t = self.table.process(e.pid).thread(e.tid);
        if t.name.is_empty() {
            t.name = comm_str(&e.comm);
        }
        // A woken wait's long run delay is a sample of its own, under a
        // leaf of its own below the reason's: in the call tree a blocked
        // wait that mostly waited for a CPU no longer counts as I/O only.
        let queued = match (e.wake_ns, e.reason) {
            (0, _) | (_, OffCpuReason::Preempted) => None,
            (wake, _) => Some(wake + e.landing_ns),
        }
        .filter(|&q| q > e.start_ns && run_delay_shown_apart(e.reason, e.end_ns.saturating_sub(q)));
        let delay_stack = queued.map(|_| self.pseudo(stack, PseudoFrame::RunDelay));
        let data = self.thread(e.pid, e.tid);
        data.off_cpu.time_ns.push(e.start_ns);
        data.off_cpu.stack.push(stack);
        match (queued, delay_stack) {
            (Some(q), Some(delay_stack)) => {
                data.off_cpu.duration_ns.push(q - e.start_ns);
                data.off_cpu.time_ns.push(q);
                data.off_cpu.stack.push(delay_stack);
                data.off_cpu.duration_ns.push(e.end_ns - q);
            }
            _ => data.off_cpu.duration_ns.push(duration),
        }
        if marked {
            data.markers.push(off_cpu_marker(e, waker));
        } else {
            // Too short for a marker: summed per waker, so `report --why`
            // still knows who these waits were for.
            let run = short_wait(e, duration, waker.as_ref().map(|(w, _)| w));
            self.add_short(e.pid, e.tid, run);
        }
    }

    /// Add one short wait (or a run of them) to its thread's run; close
    /// the run first when it spans too long, or when its waker differs and
    /// it has enough waited time to stand alone.
    fn add_short(&mut self, pid: u32, tid: u32, w: ShortRun) {
        // One run per thread and waker at a time: here, unlike in the
        // kernel, there is room for all of them, so wakers that take turns
        // (a disk's interrupt and a flush worker, for fsync) keep their own.
        let key = (pid, tid, w.waker);
        if let Some(run) = self.short_runs.get_mut(&key) {
            let too_long = w.end_ns.saturating_sub(run.start_ns) > SHORT_RUN_SPAN_NS
                || run.off_cpu_ns >= SHORT_RUN_MAX_NS;
            if !too_long {
                // A kernel's run of one place (sent at its last wait) may
                // have begun before the waits added so far.
                run.start_ns = run.start_ns.min(w.start_ns);
                run.end_ns = run.end_ns.max(w.end_ns);
                run.count += w.count;
                run.off_cpu_ns += w.off_cpu_ns;
                run.waited_ns += w.waited_ns;
                run.landing_ns += w.landing_ns;
                return;
            }
            let done = *run;
            self.short_runs.remove(&key);
            self.close_short(pid, tid, done);
        }
        self.short_runs.insert(key, w);
    }

    fn close_short(&mut self, pid: u32, tid: u32, r: ShortRun) {
        self.thread(pid, tid)
            .markers
            .push(MarkerRecord::ShortWaits {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                count: r.count,
                off_cpu_ns: r.off_cpu_ns,
                waited_ns: r.waited_ns,
                landing_ns: r.landing_ns,
                waker: r.waker,
            });
    }

    /// Close every thread's run of short waits: the window is done.
    pub(super) fn close_short_runs(&mut self) {
        let mut runs: Vec<((u32, u32, ShortWaker), ShortRun)> = self.short_runs.drain().collect();
        runs.sort_unstable_by_key(|((pid, tid, _), r)| (*pid, *tid, r.start_ns));
        for ((pid, tid, _), r) in runs {
            self.close_short(pid, tid, r);
        }
    }

    pub(super) fn folded(&mut self, w: &WindowData, e: &FoldedRecord) {
        if !self.table.tracks(e.pid) {
            return;
        }
        let place = (e.stack != NO_PARENT).then(|| self.resolve_raw(w, e.pid, e.stack));
        for (reason, &ns) in e.ns.iter().enumerate() {
            if ns == 0 {
                continue;
            }
            let reason = OffCpuReason::from_abi(reason as u32);
            // The waits under the stack they left from; preemptions (from
            // anywhere) and waits from several places under a pseudo root.
            let parent = match place {
                Some(node) if reason != OffCpuReason::Preempted => node,
                _ => self.pseudo(NO_PARENT, PseudoFrame::ShortWaits),
            };
            let leaf = self.pseudo(parent, PseudoFrame::OffCpu(reason));
            // A run of one place's waits sums their long run delays apart:
            // under their own leaf, as a wait sent alone draws its own.
            let apart = match reason {
                OffCpuReason::Preempted => 0,
                _ => e.delay_ns.min(ns),
            };
            let delay_leaf = (apart > 0).then(|| self.pseudo(leaf, PseudoFrame::RunDelay));
            let data = self.thread(e.pid, e.tid);
            data.off_cpu.time_ns.push(e.last_ns);
            data.off_cpu.stack.push(leaf);
            data.off_cpu.duration_ns.push(ns - apart);
            if let Some(delay_leaf) = delay_leaf {
                data.off_cpu.time_ns.push(e.last_ns);
                data.off_cpu.stack.push(delay_leaf);
                data.off_cpu.duration_ns.push(apart);
            }
        }
        let off_cpu_ns: u64 = e.ns.iter().sum();
        if off_cpu_ns > 0 {
            let run = ShortRun {
                start_ns: e.first_ns.min(e.last_ns),
                end_ns: e.last_ns,
                count: e.count,
                off_cpu_ns,
                waited_ns: e.wait_ns.min(off_cpu_ns),
                landing_ns: e.landing_ns.min(off_cpu_ns - e.wait_ns.min(off_cpu_ns)),
                waker: e.waker,
            };
            if e.by_place {
                // One place's share of its waker's waits: many runs hold
                // one or two (beside pgbench, 30,770 of 50,609 as markers
                // of their own), where the waker's run holds them all.
                self.add_short(e.pid, e.tid, run);
            } else {
                // The kernel's runs under its fold threshold are already
                // one waker's, closed at its flush: a marker each.
                self.close_short(e.pid, e.tid, run);
            }
        }
    }

    pub(super) fn io(&mut self, w: &WindowData, e: &IoRecord) {
        if !self.table.tracks(e.pid) {
            return;
        }
        let node = self.resolve_raw(w, e.pid, e.stack);
        self.thread(e.pid, e.tid).markers.push(MarkerRecord::Io {
            start_ns: e.start_ns,
            issue_ns: if e.issue_ns != 0 {
                e.issue_ns
            } else {
                e.start_ns
            },
            done_ns: e.done_ns,
            device: device_name(e.dev),
            op: e.op,
            flags: e.flags,
            bytes: e.bytes,
            sector: e.sector,
            error: e.error,
            stack: (node != NO_PARENT).then_some(node),
        });
    }

    /// One track per CPU: runs of consecutive samples of the same thread.
    /// Sample resolution (one interval), not exact switch times. Where a CPU
    /// has no sample for longer than two intervals and the window lost no
    /// sample, it ran something sampling cannot see: its idle task, on
    /// machines (VMs) where idle is not sampled on every CPU (here, CPU 1's,
    /// for BPF and perf alike). Those stretches are idle slices named
    /// "idle (no samples)", not holes; with samples lost they stay holes.
    pub(super) fn cpu_tracks(
        &self,
        w: &WindowData,
        order: &[(u64, u8, u32)],
        interval_ms: f64,
        range: (u64, u64),
    ) -> Vec<(u32, Vec<MarkerRecord>)> {
        let interval_ns = (interval_ms * 1e6) as u64;
        let mut tracks: std::collections::BTreeMap<u32, Vec<MarkerRecord>> = Default::default();
        let mut open: rustc_hash::FxHashMap<u32, (u32, u32, u64, u64)> = Default::default(); // cpu -> (pid, tid, start, last)
        let label = |pid: u32, tid: u32| -> (String, SliceKind) {
            let p = self.table.processes.get(&pid);
            let t = p
                .and_then(|p| p.threads.get(&tid))
                .map(|t| t.name.clone())
                .unwrap_or_default();
            // Its name only: display_name's last resort, "pid N", would say
            // the pid twice ("x of pid 7 (pid 7, tid 9)").
            let pn = p
                .map(|p| p.display_name(pid))
                .filter(|n| *n != format!("pid {pid}"))
                .unwrap_or_default();
            let kind = match (pid, p.is_some_and(|p| p.kernel)) {
                (0, _) => SliceKind::Idle,
                (_, true) => SliceKind::Kernel,
                _ => SliceKind::User,
            };
            if pid == 0 {
                ("idle".to_string(), kind)
            } else {
                (slice_name(&t, &pn, pid, tid), kind)
            }
        };
        let close = |tracks: &mut std::collections::BTreeMap<u32, Vec<MarkerRecord>>,
                     cpu: u32,
                     (pid, tid, start, last): (u32, u32, u64, u64),
                     next: u64| {
            let (name, kind) = label(pid, tid);
            tracks.entry(cpu).or_default().push(MarkerRecord::OnCpu {
                start_ns: start,
                // An interval past the last sample, not past the range (a
                // slice ending after the recording was drawn outside it),
                // nor past the next slice's first sample on this CPU (the
                // sampling interval's jitter drew half of a busy CPU's
                // slices over the next, up to 0.18 ms: two threads at once).
                end_ns: (last + interval_ns).min(next).min(range.1.max(start)),
                pid,
                tid,
                name,
                kind,
            });
        };
        for &(t, kind, i) in order {
            if kind != super::window::ORDER_SAMPLE {
                continue;
            }
            let i = i as usize;
            let (cpu, pid, tid) = (w.samples.cpu[i], w.samples.pid[i], w.samples.tid[i]);
            match open.get_mut(&cpu) {
                Some(cur) if cur.1 == tid && t <= cur.3 + 2 * interval_ns => cur.3 = t,
                _ => {
                    if let Some(prev) = open.insert(cpu, (pid, tid, t, t)) {
                        close(&mut tracks, cpu, prev, t);
                    }
                }
            }
        }
        for (cpu, cur) in open {
            close(&mut tracks, cpu, cur, u64::MAX);
        }
        if w.stats.lost_samples == 0 {
            for markers in tracks.values_mut() {
                fill_unsampled(markers, interval_ns, range);
            }
        }
        tracks.into_iter().collect()
    }
}

/// The marker of an off-CPU interval long enough to have one.
fn off_cpu_marker(e: &OffCpuRecord, waker: Option<(Waker, Option<NodeIndex>)>) -> MarkerRecord {
    // Runnable from its wakeup's enqueue, or from the start when
    // preempted; a sleep whose wakeup was not seen has no known
    // delay (CI's -a runs showed "run delays" of whole sleeps
    // still going at the end, 0.45 s on an idle machine).
    let runnable_since = match (e.wake_ns, e.reason) {
        (0, OffCpuReason::Preempted) => Some(e.start_ns),
        (0, _) => None,
        (wake, _) => Some(wake + e.landing_ns),
    };
    let (waker, waker_stack) = match waker {
        Some((w, s)) => (Some(w), s),
        None => (None, None),
    };
    MarkerRecord::OffCpu {
        start_ns: e.start_ns,
        end_ns: e.end_ns,
        reason: e.reason,
        run_delay_ns: runnable_since.map(|since| e.end_ns.saturating_sub(since)),
        landing_ns: if e.wake_ns == 0 { 0 } else { e.landing_ns },
        waker,
        cpus: (e.cpu_out, e.cpu_in),
        waker_stack,
    }
}

/// An off-CPU interval too short for a marker, as a run of one short wait
/// of its waker's.
fn short_wait(e: &OffCpuRecord, duration: u64, waker: Option<&Waker>) -> ShortRun {
    let waited = match (e.reason, e.wake_ns) {
        (OffCpuReason::Preempted, _) => 0,
        (_, 0) => duration,
        (_, wake) => wake.saturating_sub(e.start_ns).min(duration),
    };
    let short_waker = match (waker, e.reason) {
        (_, OffCpuReason::Preempted) => ShortWaker::Nobody,
        (None, _) => ShortWaker::Unseen,
        // Its stack was lost: a task or an interrupt, not known.
        (Some(w), _) if w.interrupt == Some(crate::model::recording::InterruptKind::Unknown) => {
            ShortWaker::Unseen
        }
        (Some(w), _) if w.interrupt.is_some() => ShortWaker::Interrupt,
        (Some(w), _) => ShortWaker::Task {
            pid: w.pid,
            tid: w.tid,
        },
    };
    ShortRun {
        start_ns: e.start_ns,
        end_ns: e.end_ns,
        count: 1,
        off_cpu_ns: duration,
        waited_ns: waited,
        landing_ns: match (e.reason, e.wake_ns) {
            (OffCpuReason::Preempted, _) | (_, 0) => 0,
            _ => e.landing_ns.min(duration - waited),
        },
        waker: short_waker,
    }
}

/// A CPU slice's name: its thread's, then its process's where the two
/// differ, then the ids as a waker's label ends (`pgbench (pid 7, tid 7)`,
/// `sysprof-gzip of sysprof (pid 7, tid 9)`): the two used to read
/// `postgres (postgres, 30704)` beside `pgbench (pid 7, tid 7)`.
fn slice_name(thread: &str, process: &str, pid: u32, tid: u32) -> String {
    match (thread, process) {
        ("", "") => format!("pid {pid}, tid {tid}"),
        (t, p) if p.is_empty() || t == p => format!("{t} (pid {pid}, tid {tid})"),
        ("", p) => format!("{p} (pid {pid}, tid {tid})"),
        (t, p) => format!("{t} of {p} (pid {pid}, tid {tid})"),
    }
}

/// Idle slices over the stretches of `range` longer than two intervals that
/// no slice of this CPU covers.
fn fill_unsampled(markers: &mut Vec<MarkerRecord>, interval_ns: u64, (start, end): (u64, u64)) {
    let span = |m: &MarkerRecord| match m {
        MarkerRecord::OnCpu {
            start_ns, end_ns, ..
        } => Some((*start_ns, *end_ns)),
        _ => None,
    };
    let idle = |from: u64, to: u64| MarkerRecord::OnCpu {
        start_ns: from,
        end_ns: to,
        pid: 0,
        tid: 0,
        name: "idle (no samples)".to_string(),
        kind: SliceKind::Idle,
    };
    let mut gaps = Vec::new();
    let mut covered = start;
    for (s, e) in markers.iter().filter_map(span) {
        if s > covered + 2 * interval_ns {
            gaps.push(idle(covered, s));
        }
        covered = covered.max(e);
    }
    if end > covered + 2 * interval_ns {
        gaps.push(idle(covered, end));
    }
    markers.extend(gaps);
    markers.sort_by_key(|m| span(m).map_or(0, |(s, _)| s));
}

/// `sda`, `nvme0n1`, … for a kernel dev_t (major << 20 | minor), looked up
/// in sysfs once per device.
fn device_name(dev: u32) -> DeviceName {
    static NAMES: std::sync::Mutex<Option<rustc_hash::FxHashMap<u32, DeviceName>>> =
        std::sync::Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    *names
        .get_or_insert_with(Default::default)
        .entry(dev)
        .or_insert_with(|| {
            let (major, minor) = (dev >> 20, dev & 0xfffff);
            crate::sys::kernel_text::read_to_string(format!(
                "/sys/dev/block/{major}:{minor}/uevent"
            ))
            .ok()
            .and_then(|u| {
                u.lines()
                    .find_map(|l| l.strip_prefix("DEVNAME=").map(short_name))
            })
            .unwrap_or_else(|| short_name(&format!("{major}:{minor}")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a slice names its thread, its process where that differs,
    /// and its ids as wakers do.
    #[test]
    fn a_slice_is_named_as_a_waker_is() {
        assert_eq!(
            slice_name("pgbench", "pgbench", 7, 7),
            "pgbench (pid 7, tid 7)"
        );
        assert_eq!(
            slice_name("sysprof-gzip", "sysprof", 7, 9),
            "sysprof-gzip of sysprof (pid 7, tid 9)"
        );
        assert_eq!(slice_name("", "postgres", 7, 8), "postgres (pid 7, tid 8)");
        assert_eq!(
            slice_name("kworker/0:1", "", 7, 8),
            "kworker/0:1 (pid 7, tid 8)"
        );
        assert_eq!(slice_name("", "", 7, 8), "pid 7, tid 8");
    }

    /// Check that stretches of a CPU's track longer than two intervals with
    /// no slice become idle slices, and shorter ones stay as they are.
    #[test]
    fn unsampled_stretches_become_idle_slices() {
        let run = |s: u64, e: u64| MarkerRecord::OnCpu {
            start_ns: s,
            end_ns: e,
            pid: 7,
            tid: 7,
            name: "t".into(),
            kind: SliceKind::User,
        };
        let mut m = vec![run(1_000, 3_000), run(4_000, 6_000), run(20_000, 30_000)];
        fill_unsampled(&mut m, 1_000, (0, 40_000));
        let spans: Vec<(u64, u64, bool)> = m
            .iter()
            .map(|m| match m {
                MarkerRecord::OnCpu {
                    start_ns,
                    end_ns,
                    kind,
                    ..
                } => (*start_ns, *end_ns, *kind == SliceKind::Idle),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            spans,
            vec![
                (1_000, 3_000, false),
                (4_000, 6_000, false),
                (6_000, 20_000, true),
                (20_000, 30_000, false),
                (30_000, 40_000, true)
            ]
        );
    }
}
