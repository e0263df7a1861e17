//! Markers: a thread's off-CPU waits (colored by what ended them), its
//! short waits summed per waker, its block I/O; a CPU's slices.
//!
//! In: the recording's marker records of one track, the track's table
//! builder (a marker's stack is a stack of its thread), and its off-CPU
//! samples (a wait's own stack: what it waited on, from its kernel
//! functions, `model::wait_kind`). Out: the track's
//! [`Markers`] columns, sorted by start, and the `markerSchema` that tells
//! the Firefox Profiler how to show each kind.

use crate::model::recording::{
    run_delay_shown_apart, IoOp, MarkerRecord, OffCpuReason, OffCpuSamples, Recording, ShortWaker,
    SliceKind, ThreadSamples, Waker, NO_SECTOR,
};
use crate::model::short_name::DeviceName;
use crate::model::stack_tree::NO_PARENT;

use super::category;
use super::schema::{Cause, MarkerData, MarkerText, Markers};
use super::tables::ThreadTables;

/// A track's markers from its records `list`, sorted by start, their
/// stacks made stacks of `tables` (`idle`: the idle task's track), with a
/// Go thread's runs of one goroutine from its `samples` and its waits'
/// goroutines where `goroutines` says the recording has any
/// ([`has_goroutines`], asked once per recording, not per track).
pub(super) fn build_markers(
    rec: &Recording,
    list: &[MarkerRecord],
    (samples, waits, goroutines): (Option<&ThreadSamples>, Option<&OffCpuSamples>, bool),
    tables: &mut ThreadTables,
    idle: bool,
    ms: &dyn Fn(u64) -> f64,
) -> Markers {
    // A Go thread's runs of one goroutine, merged in by start.
    let runs = samples
        .filter(|_| goroutines)
        .map(|s| goroutine_runs(rec, s))
        .unwrap_or_default();
    // A marker a record, two for a wait whose run delay is drawn apart:
    // columns grown by doubling held up to twice a busy server's markers
    // at the end, copied at each step.
    let delays_apart = list.iter().filter(|r| delay_apart(r).is_some()).count();
    let mut m = markers_with_room(list.len() + delays_apart + runs.len());
    let mut runs = runs.into_iter().peekable();
    let mut push_runs_to = |m: &mut Markers, tables: &mut ThreadTables, until: u64| {
        while let Some(run) = runs.next_if(|r| r.start_ns <= until) {
            let name = tables.strings.intern(GOROUTINE_MARKER_NAME);
            let data = MarkerData::Goroutine {
                goroutine: run.goroutine,
                labels: run.labels.map(|f| goroutine_labels_text(rec, f)),
                samples: run.samples,
            };
            push(
                m,
                name,
                category::OTHER,
                (ms(run.start_ns), ms(run.end_ns)),
                data,
            );
        }
    };
    let maker = MarkerMaker {
        rec,
        list,
        idle,
        waited_on: waited_on(rec, list, waits),
        goroutines: waits
            .filter(|_| goroutines)
            .map(|w| wait_goroutines(rec, w))
            .unwrap_or_default(),
        requests: io_requests(list),
        names: Default::default(),
        texts: Default::default(),
        goroutines_seen: goroutines,
    };
    let mut sorted: Vec<&MarkerRecord> = list.iter().collect();
    sorted.sort_by_key(|r| marker_start(r));
    for r in sorted {
        push_runs_to(&mut m, tables, marker_start(r));
        // A wait whose run delay is long enough to see is drawn as two
        // markers: the wait to its wakeup's enqueue, then the delay.
        if let (
            Some(delay),
            MarkerRecord::OffCpu {
                end_ns,
                reason,
                cpus,
                ..
            },
        ) = (delay_apart(r), r)
        {
            let queued = end_ns.saturating_sub(delay);
            let (name, cat, start, _, mut data) = maker.marker_of(r, tables);
            if let MarkerData::OffCpu { off_cpu, .. } = &mut data {
                *off_cpu = Some(end_ns.saturating_sub(start) as f64 / 1e6);
            }
            push(&mut m, name, cat, (ms(start), ms(queued)), data);
            let delay_data = MarkerData::RunDelay {
                after: tables.strings.intern(reason.label()),
                cpu: cpus.1,
                color: COLOR_CPU,
            };
            let span = (ms(queued), ms(*end_ns));
            let delay_name = tables.strings.intern(RUN_DELAY_MARKER_NAME);
            push(&mut m, delay_name, cat, span, delay_data);
            continue;
        }
        let (name, cat, start, end, data) = maker.marker_of(r, tables);
        let span = holding_its_sum(r, (ms(start), ms(end)), ms(rec.end_ns));
        push(&mut m, name, cat, span, data);
    }
    push_runs_to(&mut m, tables, u64::MAX);
    m
}

/// The name of the markers of a thread's runs of one Go goroutine.
const GOROUTINE_MARKER_NAME: &str = "Goroutine";

/// A thread's consecutive on-CPU samples of one Go goroutine with the same labels.
#[derive(Debug, Clone, Copy, PartialEq)]
struct GoroutineRun {
    /// From a sampling interval before its first sample (the time that
    /// sample stands for; not before the thread's sample before it, nor the
    /// recording) to its last sample.
    start_ns: u64,
    end_ns: u64,
    goroutine: u64,
    /// The goroutine's labels frame, if it has labels.
    labels: Option<u32>,
    samples: u32,
}

/// The runs of one goroutine in a thread's on-CPU samples (Go keeps a
/// goroutine's id where the profile cannot: a sample has no field for it,
/// and a frame would split the call tree per goroutine). A run ends where
/// the goroutine or its labels change (a server's goroutine labelled per
/// request: a run per request), where a sample has none (the scheduler, a
/// thread's own stack), or where two samples lie more than two sampling
/// intervals apart (it may have stopped between).
fn goroutine_runs(rec: &Recording, samples: &ThreadSamples) -> Vec<GoroutineRun> {
    let mut runs: Vec<GoroutineRun> = Vec::new();
    let interval = (rec.interval_ms * 1e6) as u64;
    let mut of_node: rustc_hash::FxHashMap<u32, Option<(u64, Option<u32>)>> = Default::default();
    let mut last_ns = 0;
    for (&node, &t) in samples.stack.iter().zip(&samples.time_ns) {
        let g = *of_node
            .entry(node)
            .or_insert_with(|| goroutine_and_labels(rec, node));
        match (g, runs.last_mut()) {
            (Some((id, labels)), Some(run))
                if run.goroutine == id
                    && run.labels == labels
                    && run.end_ns == last_ns
                    && t <= last_ns + 2 * interval =>
            {
                run.end_ns = t;
                run.samples += 1;
            }
            (Some((goroutine, labels)), _) => runs.push(GoroutineRun {
                // Not before the recording, nor the thread's sample before.
                start_ns: t.saturating_sub(interval).max(last_ns).max(rec.start_ns),
                end_ns: t,
                goroutine,
                labels,
                samples: 1,
            }),
            (None, _) => {}
        }
        last_ns = t;
    }
    runs
}

/// The goroutine of the stack at `node` and its labels frame (the
/// goroutine frame's parent, where it has labels).
fn goroutine_and_labels(rec: &Recording, node: u32) -> Option<(u64, Option<u32>)> {
    use crate::model::recording::FrameKind;
    let mut n = node;
    while n != NO_PARENT && (n as usize) < rec.stacks.len() {
        let f = rec.stacks.key(n) as u32;
        let frame = rec.frames.get(f as usize)?;
        if frame.kind == FrameKind::Goroutine {
            let id = crate::model::goroutine_labels::goroutine_of_frame(frame)?;
            let parent = rec.stacks.parent(n);
            let labels = (parent != NO_PARENT)
                .then(|| rec.stacks.key(parent) as u32)
                .filter(|&l| {
                    rec.frames
                        .get(l as usize)
                        .is_some_and(|f| f.kind == FrameKind::GoLabels)
                });
            return Some((id, labels));
        }
        n = rec.stacks.parent(n);
    }
    None
}

/// A labels frame's labels as a marker shows them: `handler="alpha"`.
fn goroutine_labels_text(rec: &Recording, frame: u32) -> String {
    let name = rec.frames[frame as usize]
        .symbols
        .funcs
        .first()
        .map_or("", |f| f.name.as_str());
    name.strip_prefix("[labels: ")
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name)
        .to_string()
}

/// The thread's requests, for the waits they ended: (created, completed, index).
fn io_requests(list: &[MarkerRecord]) -> Vec<(u64, u64, usize)> {
    list.iter()
        .enumerate()
        .filter_map(|(i, m)| match m {
            MarkerRecord::Io {
                start_ns, done_ns, ..
            } => Some((*start_ns, *done_ns, i)),
            _ => None,
        })
        .collect()
}

/// A marker's parts: its name (in the track's strings), category, start
/// and end (ns), and payload.
type MarkerParts = (u32, u32, u64, u64, MarkerData);

/// What a marker's name is made of: each name is written and interned once
/// per track, not once per marker (a busy disk's 44,000 requests in 8 s
/// were as many names formatted and looked up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NameKey {
    OffCpu(OffCpuReason, Option<&'static str>),
    Io(IoOp, DeviceName),
    ShortWaits,
}

/// A text its markers repeat, interned once per track: formatting a
/// waker's label or a request's operation for each of a busy server's
/// 100,000 markers cost a string each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum TextKey {
    Waker(Waker),
    WokenBy(Waker),
    ShortWaker(ShortWaker),
    Device(DeviceName),
    Op(IoOp, u32),
}

/// What a track's markers are made with: its records, what each off-CPU
/// wait waited on ([`waited_on`]) and its I/O requests ([`io_requests`]).
struct MarkerMaker<'a> {
    rec: &'a Recording,
    list: &'a [MarkerRecord],
    idle: bool,
    waited_on: rustc_hash::FxHashMap<u64, &'static str>,
    /// The Go goroutine of each wait that had one, by its start.
    goroutines: rustc_hash::FxHashMap<u64, u64>,
    requests: Vec<(u64, u64, usize)>,
    names: std::cell::RefCell<rustc_hash::FxHashMap<NameKey, u32>>,
    texts: std::cell::RefCell<rustc_hash::FxHashMap<TextKey, u32>>,
    /// Whether the recording has a goroutine's frame at all (else no stack
    /// is walked looking for one).
    goroutines_seen: bool,
}

impl MarkerMaker<'_> {
    /// The marker of record `r`; a stack it carries is made a stack of
    /// `tables`.
    fn marker_of(&self, r: &MarkerRecord, tables: &mut ThreadTables) -> MarkerParts {
        match r {
            MarkerRecord::OffCpu { .. } => self.off_cpu(r, tables),
            MarkerRecord::Io { .. } => self.io(r, tables),
            MarkerRecord::ShortWaits { .. } => self.short_waits(r, tables),
            MarkerRecord::OnCpu { .. } => on_cpu(r, tables),
        }
    }

    /// The name `key` stands for, in `tables`' strings.
    fn name(&self, key: NameKey, tables: &mut ThreadTables) -> u32 {
        if let Some(&index) = self.names.borrow().get(&key) {
            return index;
        }
        let text = match key {
            // What it waited on in the name too: the Marker Chart gives
            // each name a row (locks apart from pipes), the table shows it.
            NameKey::OffCpu(reason, Some(on)) => format!("Off-CPU: {} on {on}", reason.label()),
            NameKey::OffCpu(reason, None) => format!("Off-CPU: {}", reason.label()),
            NameKey::Io(op, device) => format!("I/O {} {device}", op.name()),
            // One name, so the Marker Chart draws them on one row (it
            // gives each name its own); the count is in the label.
            NameKey::ShortWaits => "Off-CPU: short waits".to_string(),
        };
        let index = tables.strings.intern(&text);
        self.names.borrow_mut().insert(key, index);
        index
    }

    /// The index in `tables`' strings of the text `key` stands for.
    fn text(&self, key: TextKey, tables: &mut ThreadTables) -> u32 {
        if let Some(&index) = self.texts.borrow().get(&key) {
            return index;
        }
        let text = match &key {
            TextKey::Waker(w) => w.label(),
            TextKey::WokenBy(w) => format!(", woken by {}", w.label()),
            // By name where the recording knows it, as long waits' wakers.
            TextKey::ShortWaker(waker) => match waker {
                ShortWaker::Task { pid, tid } => match self.rec.waker_names.get(tid) {
                    Some(name) => format!("{name} (pid {pid}, tid {tid})"),
                    None => waker.label(),
                },
                _ => waker.label(),
            },
            TextKey::Device(d) => d.to_string(),
            TextKey::Op(op, flags) => op_text(*op, *flags),
        };
        let index = tables.strings.intern(&text);
        self.texts.borrow_mut().insert(key, index);
        index
    }

    /// A record's stack as a marker's `cause`.
    fn cause(&self, stack: &Option<u32>, tables: &mut ThreadTables) -> Option<Cause> {
        stack.map(|node| Cause {
            stack: tables.stack_for(self.rec, node, self.idle),
        })
    }

    /// The Go goroutine a record's stack is of, where it is one's.
    fn goroutine_of(&self, stack: &Option<u32>) -> Option<u64> {
        if !self.goroutines_seen {
            return None;
        }
        crate::model::goroutine_labels::goroutine_of_stack(self.rec, (*stack)?)
    }

    /// The request whose completion ended a wait, as the marker says it.
    fn ended_by(
        &self,
        start: u64,
        end: u64,
        run_delay: Option<u64>,
        landing: u64,
    ) -> Option<String> {
        // Woken at the request's completion: the last one in flight then.
        let wake = end.saturating_sub(run_delay.unwrap_or(0) + landing);
        let (_, _, i) = self
            .requests
            .iter()
            .filter(|(s, d, _)| *s < wake && *d >= start && *d <= wake)
            .max_by_key(|(_, d, _)| *d)?;
        match &self.list[*i] {
            MarkerRecord::Io {
                device, op, sector, ..
            } if *sector == NO_SECTOR => Some(format!("{} {device}", op.name())),
            MarkerRecord::Io {
                device,
                op,
                bytes,
                sector,
                ..
            } => Some(format!(
                "{} {device}, {}B at sector {sector}",
                op.name(),
                thousands(*bytes as u64)
            )),
            _ => None,
        }
    }

    /// An off-CPU wait's marker.
    fn off_cpu(&self, r: &MarkerRecord, tables: &mut ThreadTables) -> MarkerParts {
        let MarkerRecord::OffCpu {
            start_ns,
            end_ns,
            reason,
            run_delay_ns,
            landing_ns,
            waker,
            cpus,
            waker_stack,
        } = r
        else {
            unreachable!("an off-CPU record");
        };
        let waited_on = &self.waited_on;
        (
            self.name(
                NameKey::OffCpu(*reason, waited_on.get(start_ns).copied()),
                tables,
            ),
            category::OFF_CPU,
            *start_ns,
            *end_ns,
            MarkerData::OffCpu {
                reason: tables.strings.intern(reason.label()),
                run_delay: run_delay_ns.map(|d| d as f64 / 1e6),
                off_cpu: None,
                wakeup_landing: (*landing_ns > 0).then(|| *landing_ns as f64 / 1e6),
                woken_by: waker
                    .as_ref()
                    .map(|w| self.text(TextKey::WokenBy(w.clone()), tables)),
                waker: waker
                    .as_ref()
                    .map(|w| MarkerText::Index(self.text(TextKey::Waker(w.clone()), tables))),
                // An interrupt has no waker task: the task it interrupted is in the label.
                waker_pid: waker
                    .as_ref()
                    .filter(|w| w.interrupt.is_none())
                    .map(|w| w.pid),
                waker_tid: waker
                    .as_ref()
                    .filter(|w| w.interrupt.is_none())
                    .map(|w| w.tid),
                waker_context: waker.as_ref().map(|w| {
                    tables.strings.intern(match w.interrupt {
                        None => "task",
                        Some(crate::model::recording::InterruptKind::Hard) => "hard IRQ",
                        Some(crate::model::recording::InterruptKind::Soft) => "softirq",
                        Some(crate::model::recording::InterruptKind::Unknown) => {
                            "unknown (stack lost)"
                        }
                    })
                }),
                cpu_out: cpus.0,
                cpu_in: cpus.1,
                waited_on: waited_on.get(start_ns).map(|on| tables.strings.intern(on)),
                color: off_cpu_color(*reason, waker.as_ref()),
                request: waker
                    .as_ref()
                    .filter(|w| w.interrupt.is_some())
                    .and_then(|_| self.ended_by(*start_ns, *end_ns, *run_delay_ns, *landing_ns)),
                cause: self.cause(waker_stack, tables),
                goroutine: self.goroutines.get(start_ns).copied(),
                waker_goroutine: self.goroutine_of(waker_stack),
            },
        )
    }

    /// A block I/O request's marker.
    fn io(&self, r: &MarkerRecord, tables: &mut ThreadTables) -> MarkerParts {
        let MarkerRecord::Io {
            start_ns,
            issue_ns,
            done_ns,
            device,
            op,
            flags,
            bytes,
            sector,
            error,
            stack,
        } = r
        else {
            unreachable!("an I/O record");
        };
        (
            self.name(NameKey::Io(*op, *device), tables),
            category::IO,
            *start_ns,
            *done_ns,
            MarkerData::Io {
                device: MarkerText::Index(self.text(TextKey::Device(*device), tables)),
                op: self.text(TextKey::Op(*op, *flags), tables),
                bytes: *bytes as u64,
                sector: (*sector != NO_SECTOR).then_some(*sector),
                queue_time: issue_ns.saturating_sub(*start_ns) as f64 / 1e6,
                service_time: done_ns.saturating_sub(*issue_ns) as f64 / 1e6,
                error: (*error != 0).then_some(*error),
                cause: self.cause(stack, tables),
                goroutine: self.goroutine_of(stack),
            },
        )
    }

    /// The marker of a run of short waits summed for one waker.
    fn short_waits(&self, r: &MarkerRecord, tables: &mut ThreadTables) -> MarkerParts {
        let MarkerRecord::ShortWaits {
            start_ns,
            end_ns,
            count,
            off_cpu_ns,
            waited_ns,
            landing_ns,
            waker,
        } = r
        else {
            unreachable!("a short-waits record");
        };
        (
            self.name(NameKey::ShortWaits, tables),
            category::OFF_CPU,
            *start_ns,
            *end_ns,
            MarkerData::ShortWaits {
                count: *count,
                off_cpu: *off_cpu_ns as f64 / 1e6,
                waited: (*waited_ns > 0).then(|| *waited_ns as f64 / 1e6),
                landing: (*landing_ns > 0).then(|| *landing_ns as f64 / 1e6),
                waker: self.text(TextKey::ShortWaker(*waker), tables),
                waker_pid: match waker {
                    ShortWaker::Task { pid, .. } => Some(*pid),
                    _ => None,
                },
                waker_tid: match waker {
                    ShortWaker::Task { tid, .. } => Some(*tid),
                    _ => None,
                },
                waker_context: tables.strings.intern(waker.context()),
                color: match waker {
                    ShortWaker::Task { .. } => COLOR_THREAD,
                    ShortWaker::Interrupt => COLOR_INTERRUPT,
                    ShortWaker::Nobody => COLOR_CPU,
                    ShortWaker::Unseen | ShortWaker::Several => COLOR_UNKNOWN,
                },
            },
        )
    }
}

/// A CPU track's slice: a thread on it, or idle.
fn on_cpu(r: &MarkerRecord, tables: &mut ThreadTables) -> MarkerParts {
    let MarkerRecord::OnCpu {
        start_ns,
        end_ns,
        pid,
        tid,
        name,
        kind,
    } = r
    else {
        unreachable!("an on-CPU record");
    };
    let name = tables.strings.intern(name);
    (
        name,
        match kind {
            SliceKind::User => category::USER,
            SliceKind::Kernel => category::KERNEL,
            SliceKind::Idle => category::IDLE,
        },
        *start_ns,
        *end_ns,
        match kind {
            // The marker's name is the thread's, and the label's text.
            SliceKind::Idle => MarkerData::CpuIdle { thread: name },
            _ => MarkerData::OnCpu {
                thread: name,
                pid: *pid,
                tid: *tid,
            },
        },
    )
}

/// A marker's span `(start, end)` in ms, its end moved later where a run of
/// short waits' off-CPU sum (in ns) would not fit in it as written: times
/// are rounded to the microsecond, sums not, and 137 of 5,845 runs beside
/// pgbench said more off-CPU time than their span, by up to 1 µs. Not past
/// the recording's end `last` (its start earlier there instead, not before
/// 0: by a microsecond or two, which may put it before a marker sorted
/// before it). In whole microseconds, exact however long the recording (a double's
/// 1e-6 margin was not, past two hours).
pub(super) fn holding_its_sum(r: &MarkerRecord, (start, end): (f64, f64), last: f64) -> (f64, f64) {
    let MarkerRecord::ShortWaits { off_cpu_ns, .. } = r else {
        return (start, end);
    };
    let us = |ms: f64| (ms * 1e3).round() as i64;
    let sum_us = off_cpu_ns.div_ceil(1000) as i64;
    let (start_us, end_us) = (us(start), us(end));
    if end_us - start_us >= sum_us {
        return (start, end);
    }
    let new_end = (start_us + sum_us).min(us(last).max(end_us));
    let new_start = start_us.min(new_end - sum_us).max(0);
    (new_start as f64 / 1e3, new_end as f64 / 1e3)
}

/// The run-delay markers' name: one row of the Marker Chart holds them all.
const RUN_DELAY_MARKER_NAME: &str = "Waiting for a CPU";

/// "read (sync, readahead)": the request's operation and its flags (a
/// flush's preflush flag says nothing more than "flush"), written in one
/// string.
fn op_text(op: crate::model::recording::IoOp, flags: u32) -> String {
    use crate::model::recording::{io_flags::IO_PREFLUSH, write_io_flag_names, IoOp};
    let flags = if op == IoOp::Flush {
        flags & !IO_PREFLUSH
    } else {
        flags
    };
    let mut text = String::with_capacity(32);
    text.push_str(&op.name());
    if flags != 0 {
        let bare = text.len();
        text.push_str(" (");
        write_io_flag_names(&mut text, flags);
        if text.len() == bare + 2 {
            text.truncate(bare);
        } else {
            text.push(')');
        }
    }
    text
}

/// The run delay of `r`, a wait whose delay is drawn as a marker of its
/// own after it ([`run_delay_shown_apart`]); None for any other record.
fn delay_apart(r: &MarkerRecord) -> Option<u64> {
    match r {
        MarkerRecord::OffCpu {
            reason,
            run_delay_ns: Some(delay),
            ..
        } if run_delay_shown_apart(*reason, *delay) => Some(*delay),
        _ => None,
    }
}

/// Empty marker columns with room for `n` markers.
fn markers_with_room(n: usize) -> Markers {
    let mut m = Markers::default();
    m.name.reserve_exact(n);
    m.category.reserve_exact(n);
    m.start_time.reserve_exact(n);
    m.end_time.reserve_exact(n);
    m.phase.reserve_exact(n);
    m.data.reserve_exact(n);
    m
}

fn push(m: &mut Markers, name: u32, category: u32, (start, end): (f64, f64), data: MarkerData) {
    m.name.push(name);
    m.category.push(category);
    m.start_time.push(Some(start));
    m.end_time.push(Some(end));
    m.phase.push(1); // interval
    m.data.push(Some(data));
    m.length += 1;
}

/// What each off-CPU marker's wait waited on, by its start: the kernel
/// functions of the off-CPU sample that starts with it (the same interval).
/// Only the markers' starts are looked up, not every short wait's.
fn waited_on(
    rec: &Recording,
    list: &[MarkerRecord],
    waits: Option<&OffCpuSamples>,
) -> rustc_hash::FxHashMap<u64, &'static str> {
    let mut out = rustc_hash::FxHashMap::default();
    let Some(waits) = waits else {
        return out;
    };
    let starts: rustc_hash::FxHashSet<u64> = list
        .iter()
        .filter_map(|m| match m {
            // A preempted thread waited for a CPU, whatever it was doing.
            MarkerRecord::OffCpu {
                start_ns, reason, ..
            } if *reason != OffCpuReason::Preempted => Some(*start_ns),
            _ => None,
        })
        .collect();
    if starts.is_empty() {
        return out;
    }
    let mut names: Vec<&str> = Vec::new();
    // Most waits share a few stacks (the same sleep in the same loop):
    // each stack is classified once, not once per wait (string matching of
    // every kernel frame was a third of building a server's markers).
    let mut by_stack: rustc_hash::FxHashMap<u32, Option<&'static str>> =
        rustc_hash::FxHashMap::default();
    for (&t, &stack) in waits.time_ns.iter().zip(&waits.stack) {
        if !starts.contains(&t) || out.contains_key(&t) {
            continue;
        }
        if let Some(&known) = by_stack.get(&stack) {
            if let Some(kind) = known {
                out.insert(t, kind);
            }
            continue;
        }
        names.clear();
        let mut node = stack;
        while node != NO_PARENT && (node as usize) < rec.stacks.len() {
            if let Some(f) = rec.frames.get(rec.stacks.key(node) as usize) {
                if f.is_kernel() {
                    // Inlined functions innermost first, as the stack runs.
                    names.extend(f.symbols.funcs.iter().rev().map(|s| s.name.as_str()));
                }
            }
            node = rec.stacks.parent(node);
        }
        names.reverse();
        let kind = crate::model::wait_kind::classify(&names);
        by_stack.insert(stack, kind);
        if let Some(kind) = kind {
            out.insert(t, kind);
        }
    }
    out
}

/// Whether any frame of `rec` is a Go goroutine's.
pub(super) fn has_goroutines(rec: &Recording) -> bool {
    rec.frames
        .iter()
        .any(|f| f.kind == crate::model::recording::FrameKind::Goroutine)
}

/// The Go goroutine of each of a thread's waits whose stack has one, by
/// the wait's start (its off-CPU sample's time).
fn wait_goroutines(rec: &Recording, waits: &OffCpuSamples) -> rustc_hash::FxHashMap<u64, u64> {
    let mut out = rustc_hash::FxHashMap::default();
    for (&t, &stack) in waits.time_ns.iter().zip(&waits.stack) {
        if let Some(g) = crate::model::goroutine_labels::goroutine_of_stack(rec, stack) {
            out.insert(t, g);
        }
    }
    out
}

fn marker_start(r: &MarkerRecord) -> u64 {
    r.start_ns()
}

// What ended a wait, as the marker chart colors it (the front end's
// GraphColor names); the schema's descriptions say the same.
/// Another thread woke it.
const COLOR_THREAD: &str = "blue";
/// It was blocked uninterruptibly (I/O, mostly).
const COLOR_BLOCKED: &str = "orange";
/// An interrupt woke it: a timer or a device.
const COLOR_INTERRUPT: &str = "green";
/// It waited for a CPU (preempted).
const COLOR_CPU: &str = "red";
/// Nobody seen.
const COLOR_UNKNOWN: &str = "grey";

fn off_cpu_color(reason: OffCpuReason, waker: Option<&Waker>) -> &'static str {
    match (reason, waker) {
        (OffCpuReason::Preempted, _) => COLOR_CPU,
        (OffCpuReason::Blocked, _) => COLOR_BLOCKED,
        (_, Some(w)) if w.interrupt.is_some() => COLOR_INTERRUPT,
        (_, Some(_)) => COLOR_THREAD,
        (_, None) => COLOR_UNKNOWN,
    }
}

/// `meta.markerSchema`: how the Firefox Profiler shows each kind of marker.
pub(super) fn marker_schema() -> serde_json::Value {
    let display = serde_json::json!(["marker-chart", "marker-table", "timeline-overview"]);
    // The overview above a track draws every marker as one black bar: off-CPU
    // intervals there made sleeping threads look busy (the track's graph is
    // CPU use, blank while it waits; the call tree and marker chart say
    // why), and idle CPUs look like running ones.
    let not_in_overview = serde_json::json!(["marker-chart", "marker-table"]);
    serde_json::json!([
        off_cpu_schema(&not_in_overview),
        run_delay_schema(&not_in_overview),
        short_waits_schema(&not_in_overview),
        block_io_schema(&display),
        on_cpu_schema(),
        cpu_idle_schema(&not_in_overview),
        goroutine_schema(&not_in_overview),
    ])
}

/// The schema of `Goroutine` markers: a thread's run of one Go goroutine.
fn goroutine_schema(not_in_overview: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "Goroutine",
        "display": not_in_overview,
        "chartLabel": "goroutine {marker.data.goroutine}",
        "tooltipLabel": "Goroutine {marker.data.goroutine} {marker.data.labels}",
        "tableLabel": "goroutine {marker.data.goroutine} {marker.data.labels}",
        "description": "A Go goroutine this thread ran: its consecutive CPU samples of that goroutine (read in the kernel at each sample), from a sampling interval before the first to the last, with its pprof labels. The call tree has no node per goroutine; off-CPU and I/O markers name theirs",
        "fields": [
            { "key": "goroutine", "label": "Goroutine", "format": "integer" },
            { "key": "labels", "label": "Labels", "format": "string" },
            { "key": "samples", "label": "Samples", "format": "integer" },
        ],
    })
}

/// The schema of `OffCpu` markers: a wait, why, who woke it, its delays,
/// colored by what ended it.
fn off_cpu_schema(not_in_overview: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "OffCpu",
        "display": not_in_overview,
        "chartLabel": "{marker.data.reason}",
        "tooltipLabel": "Off-CPU: {marker.data.reason}{marker.data.wokenBy}",
        "tableLabel": "{marker.data.reason}{marker.data.wokenBy}, run delay {marker.data.runDelay}",
        "description": "A thread not running: why, who woke it, how long its wakeup took to reach a run queue (an idle CPU's wakeup; on a VM, the host running that CPU again), how long it then waited for a CPU. A run-queue delay of 0.1 ms or more is drawn apart, as a \"Waiting for a CPU\" marker after this one. Colored by what ended it: blue another thread, orange blocked (I/O, mostly), green an interrupt (a timer, a device), red waiting for a CPU, grey not seen. The stack shown with it is its waker's, where the waker woke it; the wait's own stack is in the call tree, as its off-CPU sample",
        "colorField": "color",
        "fields": [
            { "key": "reason", "label": "Reason", "format": "unique-string" },
            { "key": "waitedOn", "label": "Waited on", "format": "unique-string" },
            { "key": "wakeupLanding", "label": "Wakeup to run queue", "format": "duration" },
            { "key": "runDelay", "label": "Run-queue delay", "format": "duration" },
            { "key": "offCpu", "label": "Off-CPU with the run delay", "format": "duration" },
            { "key": "waker", "label": "Woken by", "format": "unique-string" },
            { "key": "wakerPid", "label": "Waker", "format": "pid", "hidden": true },
            { "key": "wakerTid", "label": "Waker thread", "format": "tid", "hidden": true },
            { "key": "wakerContext", "label": "Woken from", "format": "unique-string" },
            { "key": "cpuOut", "label": "Left CPU", "format": "integer" },
            { "key": "cpuIn", "label": "Resumed on CPU", "format": "integer" },
            { "key": "request", "label": "Ended by request", "format": "string" },
            { "key": "goroutine", "label": "Goroutine", "format": "integer" },
            { "key": "wakerGoroutine", "label": "Waker goroutine", "format": "integer" },
            { "key": "color", "label": "Color", "format": "string", "hidden": true },
            { "key": "wokenBy", "label": "Woken by (title)", "format": "unique-string", "hidden": true },
        ],
    })
}

/// The schema of `RunDelay` markers: a run-queue delay drawn apart, after
/// its off-CPU wait.
fn run_delay_schema(not_in_overview: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "RunDelay",
        "display": not_in_overview,
        "chartLabel": "after {marker.data.after}",
        "tooltipLabel": "Waiting for CPU {marker.data.cpu} after {marker.data.after}",
        "tableLabel": "waiting for CPU {marker.data.cpu} after {marker.data.after}",
        "description": "The end of an off-CPU wait: woken, in its CPU's run queue until it ran (a preempted thread's whole wait is this, drawn as its off-CPU marker, red). `sysprof report --why` names who held that CPU meanwhile",
        "colorField": "color",
        "fields": [
            { "key": "after", "label": "After", "format": "unique-string" },
            { "key": "cpu", "label": "CPU", "format": "integer" },
            { "key": "color", "label": "Color", "format": "string", "hidden": true },
        ],
    })
}

/// The schema of `ShortWaits` markers: short waits summed per waker.
fn short_waits_schema(not_in_overview: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "ShortWaits",
        "display": not_in_overview,
        // "×1" reads right where "1 waits" did not (seen in the front end).
        "chartLabel": "×{marker.data.count}, {marker.data.offCpu}",
        "tooltipLabel": "Short waits ×{marker.data.count}: {marker.data.offCpu} off-CPU, woken by {marker.data.waker}",
        "tableLabel": "Short waits ×{marker.data.count}: {marker.data.offCpu} off-CPU, woken by {marker.data.waker}",
        "description": "Waits shorter than --off-cpu-threshold, summed per waker over the marker's span (which holds their running in between too). Colored as off-CPU markers: blue another thread, green interrupts, red waiting for a CPU, grey not seen or several wakers",
        "colorField": "color",
        "fields": [
            { "key": "count", "label": "Waits", "format": "integer" },
            { "key": "offCpu", "label": "Off-CPU", "format": "duration" },
            { "key": "waited", "label": "Before the wakeups", "format": "duration" },
            { "key": "landing", "label": "Wakeups to run queue", "format": "duration" },
            { "key": "waker", "label": "Woken by", "format": "unique-string" },
            { "key": "wakerPid", "label": "Waker", "format": "pid", "hidden": true },
            { "key": "wakerTid", "label": "Waker thread", "format": "tid", "hidden": true },
            { "key": "wakerContext", "label": "Woken from", "format": "unique-string" },
            { "key": "color", "label": "Color", "format": "string", "hidden": true },
        ],
    })
}

/// The schema of `BlockIo` markers: one block I/O request.
fn block_io_schema(display: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "BlockIo",
        "display": display,
        "chartLabel": "{marker.data.op} {marker.data.bytes}",
        "tooltipLabel": "{marker.data.op} {marker.data.device}: {marker.data.bytes}",
        "tableLabel": "{marker.data.op} {marker.data.device}: {marker.data.bytes}",
        "description": "One block I/O request, from creation to completion",
        "fields": [
            { "key": "device", "label": "Device", "format": "unique-string" },
            { "key": "op", "label": "Operation", "format": "unique-string" },
            { "key": "bytes", "label": "Size", "format": "bytes" },
            { "key": "sector", "label": "Sector", "format": "integer" },
            { "key": "queueTime", "label": "Queue time", "format": "duration" },
            { "key": "serviceTime", "label": "Service time", "format": "duration" },
            { "key": "error", "label": "Error", "format": "integer" },
            { "key": "goroutine", "label": "Goroutine", "format": "integer" },
        ],
    })
}

/// The schema of `OnCpu` markers: a thread on a CPU (CPU tracks).
fn on_cpu_schema() -> serde_json::Value {
    serde_json::json!({
        "name": "OnCpu",
        "display": ["marker-chart", "marker-table", "timeline-overview"],
        "chartLabel": "{marker.data.thread}",
        "tooltipLabel": "{marker.data.thread}",
        "tableLabel": "{marker.data.thread}",
        "description": "A thread ran on this CPU, as far as its samples tell (to within one sampling interval)",
        "fields": [
            { "key": "thread", "label": "Thread", "format": "unique-string" },
            { "key": "pid", "label": "pid", "format": "pid" },
            { "key": "tid", "label": "tid", "format": "tid" },
        ],
    })
}

/// The schema of `CpuIdle` markers: a CPU idle (CPU tracks).
fn cpu_idle_schema(not_in_overview: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": "CpuIdle",
        "display": not_in_overview,
        "chartLabel": "{marker.data.thread}",
        "tooltipLabel": "{marker.data.thread}",
        "tableLabel": "{marker.data.thread}",
        "description": "This CPU was idle, as far as its samples tell (to within one sampling interval)",
        "fields": [
            { "key": "thread", "label": "Idle", "format": "unique-string" },
        ],
    })
}

/// `n` with thousands separators, as the Firefox Profiler writes byte
/// counts in the same tooltip ("8,192B").
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
