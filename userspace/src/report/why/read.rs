//! Reading a profile for `--why`: its threads' facts and its CPUs' slices.
//!
//! In: a profile's JSON (its tracks' off-CPU, short-wait and block I/O
//! markers, their on-CPU samples' times and leaf functions, the per-CPU
//! tracks' `OnCpu` slices, `meta.interval` and `meta.categories`). Out:
//! [`Threads`], by tid, each thread's waits (sorted, apart), short runs
//! and block requests, and per CPU the slices of the threads that held it,
//! read half an interval earlier; the wakers with no track of their own
//! as their wakees' markers name them. [`Reader`] takes the tracks one at
//! a time (`report --why` streams the file) and `meta` at the end;
//! [`Threads::read`] hands it a whole parsed profile.

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;

use crate::profile::schema::{MarkerStr, MarkerView};

use super::{Threads, MAX_STEPS};

/// One off-CPU interval of a thread, in profile ms.
#[derive(Debug, Clone)]
pub(super) struct Wait {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) reason: String,
    /// When it was woken (the wakeup sent): `end` less its run-queue delay
    /// and its wakeup's landing.
    pub(super) wake: f64,
    /// When that wakeup put it on a run queue: `end` less its run-queue
    /// delay. Between the two the wakeup was on its way to the thread's
    /// CPU (an idle one waking; on a VM, the host running it again).
    pub(super) queued: f64,
    pub(super) waker_tid: Option<u32>,
    /// "task", "hard IRQ", "softirq", or None when no waker was seen.
    pub(super) context: Option<String>,
    /// The CPU it left (where a preempted thread waits) and the one it ran
    /// on again (where a woken one waits).
    pub(super) cpu_out: Option<u32>,
    pub(super) cpu_in: Option<u32>,
}

/// A stretch a thread ran on a CPU, as the per-CPU tracks show it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slice {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) tid: u32,
}

/// A run of a thread's short waits: their sum over a span, per waker.
#[derive(Debug, Clone)]
pub(super) struct ShortRun {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) count: f64,
    /// Their off-CPU time, ms.
    pub(super) off_cpu: f64,
    /// Of it, the time before their wakeups, ms.
    pub(super) waited: f64,
    /// Of the rest, the time their wakeups took to land on a run queue, ms.
    pub(super) landing: f64,
    /// Its span less the thread's long waits in it, ms: where its short
    /// waits can lie (see [`free_time`]).
    pub(super) free: f64,
    pub(super) waker_tid: Option<u32>,
    /// "task", "interrupt", "several", "not seen" or "none".
    pub(super) context: String,
}

/// What the report needs of one thread.
#[derive(Debug, Default)]
pub(super) struct ThreadFacts {
    pub(super) pid: u32,
    pub(super) comm: String,
    pub(super) process: String,
    /// Sorted by start; non-overlapping.
    pub(super) waits: Vec<Wait>,
    /// Sorted by start; they may overlap each other and the waits.
    pub(super) short: Vec<ShortRun>,
    /// The longest span of a run in `short`.
    pub(super) short_span: f64,
    /// (start, end, device id: an index into `Threads::devices` plus one)
    /// of the block requests it issued, sorted by start.
    pub(super) io: Vec<(f64, f64, u16)>,
    /// The longest of `io`.
    pub(super) io_span: f64,
    /// On-CPU sample times and their leaf functions (indexes into
    /// [`Threads`]' leaf names).
    pub(super) samples: Vec<(f64, u32)>,
}

/// The devices block requests name, each once: an id is an index into
/// `names` plus one (looked up by name: a profile anyone wrote may name a
/// device per request).
#[derive(Default)]
struct Devices {
    names: Vec<String>,
    ids: FxHashMap<String, usize>,
}

impl ThreadFacts {
    /// The block requests that may have been in flight at some time after
    /// `from` and before `to` (those that started from the longest one's
    /// length before `from`, up to `to`): each caller's own test picks
    /// among them. Searched, not scanned: a wait woken by an interrupt
    /// looked through all its thread's requests, 19 % of `--why`'s time
    /// for pgbench's client.
    pub(super) fn io_near(&self, from: f64, to: f64) -> &[(f64, f64, u16)] {
        let first = self.io.partition_point(|r| r.0 < from - self.io_span);
        let end = self.io.partition_point(|r| r.0 < to);
        &self.io[first..end.max(first)]
    }
}

impl Threads {
    /// Read them from a profile's JSON; tracks of no process are skipped.
    pub fn read(profile: &Value) -> Threads {
        let mut reader = Reader::default();
        for t in profile["threads"].as_array().into_iter().flatten() {
            reader.thread(t);
        }
        reader.finish(&profile["meta"])
    }
}

/// [`Threads`] read a track at a time (`report --why` streams the file:
/// one track is held as JSON at once, never the whole profile), then
/// finished with the profile's `meta`, which sysprof writes after its
/// tracks: what needs it waits until then (the sampling interval that
/// places the CPUs' slices, the categories that tell a leaf's samples
/// off a CPU).
#[derive(Default)]
pub(crate) struct Reader {
    threads: FxHashMap<u32, ThreadFacts>,
    named_by_wakees: FxHashMap<u32, (u32, String)>,
    cpus: FxHashMap<u32, Vec<Slice>>,
    devices: Devices,
    /// Per tid, its samples' leaves until the categories are known: (time,
    /// index in `leaf_names`, category index).
    leaves: FxHashMap<u32, Vec<(f64, u32, u32)>>,
    /// Leaf names, escaped, each once.
    leaf_names: Vec<String>,
    leaf_ids: FxHashMap<String, u32>,
}

impl Reader {
    /// One track of the profile.
    pub(crate) fn thread(&mut self, t: &Value) {
        wakers_named(t, &mut self.named_by_wakees);
        read_cpu_track(t, &mut self.cpus);
        let machine = crate::profile::is_machine_track(t["processType"].as_str().unwrap_or(""));
        let (Some(pid), Some(tid)) = (
            t["pid"]
                .as_str()
                .filter(|_| !machine)
                .and_then(|p| p.parse().ok()),
            t["tid"].as_u64(),
        ) else {
            return;
        };
        let text = |v: &Value| crate::escape::escape(v.as_str().unwrap_or("")).into_owned();
        let mut facts = ThreadFacts {
            pid,
            comm: text(&t["name"]),
            process: text(&t["processName"]),
            ..Default::default()
        };
        read_markers(t, &mut facts, &mut self.devices);
        let leaves = self.read_samples(t);
        self.leaves.insert(tid as u32, leaves);
        self.threads.insert(tid as u32, facts);
    }

    /// The threads, given the profile's `meta`.
    pub(crate) fn finish(mut self, meta: &Value) -> Threads {
        let categories: Vec<&str> = meta["categories"]
            .as_array()
            .map(|c| c.iter().map(|c| c["name"].as_str().unwrap_or("")).collect())
            .unwrap_or_default();
        let interval = meta["interval"].as_f64().unwrap_or(1.0).max(0.0);
        for (tid, leaves) in self.leaves.drain() {
            let Some(facts) = self.threads.get_mut(&tid) else {
                continue;
            };
            facts.samples = leaves
                .into_iter()
                .filter(|&(_, _, category)| {
                    let c = categories.get(category as usize).copied().unwrap_or("");
                    c != "Off-CPU" && c != "I/O"
                })
                .map(|(time, name, _)| (time, name))
                .collect();
        }
        for slices in self.cpus.values_mut() {
            place_slices(slices, interval);
        }
        self.named_by_wakees
            .retain(|tid, _| !self.threads.contains_key(tid));
        Threads {
            threads: self.threads,
            named_by_wakees: self.named_by_wakees,
            cpus: self.cpus,
            interval,
            devices: self.devices.names,
            leaf_names: self.leaf_names,
            steps: std::cell::Cell::new(MAX_STEPS),
            memo: Default::default(),
            cut: std::cell::Cell::new(false),
            span_lists: Default::default(),
            blame_lists: Default::default(),
        }
    }
}

/// The task wakers `t`'s off-CPU markers name: "name (pid P, tid T)" with
/// `wakerPid` and `wakerTid` (an interrupt's label names what it
/// interrupted, not a waker: left out).
fn wakers_named<'a>(t: &'a Value, out: &mut FxHashMap<u32, (u32, String)>) {
    let Some(data) = t["markers"]["data"].as_array() else {
        return;
    };
    let strings = strings_of(t);
    let text = |f: Option<MarkerStr<'a>>| f.and_then(|f| f.resolve(strings));
    for d in data {
        let (Some("task"), Some(tid), Some(pid), Some(label)) = (match view(d) {
            MarkerView::OffCpu {
                waker_context,
                waker_tid,
                waker_pid,
                waker,
                ..
            }
            | MarkerView::ShortWaits {
                waker_context,
                waker_tid,
                waker_pid,
                waker,
                ..
            } => (
                text(waker_context),
                waker_tid,
                waker_pid.and_then(|p| p.parse::<u32>().ok()),
                text(waker),
            ),
            _ => continue,
        }) else {
            continue;
        };
        let Some(name) = label.strip_suffix(&format!(" (pid {pid}, tid {tid})")) else {
            continue;
        };
        out.entry(tid)
            .or_insert_with(|| (pid, crate::escape::escape(name).into_owned()));
    }
}

/// A thread's `stringArray`, where its markers' texts are (empty where
/// there is none).
fn strings_of(t: &Value) -> &[Value] {
    t["stringArray"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A marker's payload as the profile's schema types it; `Other` where it
/// is none `--why` reads, or not what its type says.
fn view(d: &Value) -> MarkerView<'_> {
    MarkerView::deserialize(d).unwrap_or(MarkerView::Other)
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

/// A thread's markers: its waits and the block requests it issued.
fn read_markers<'a>(t: &'a Value, facts: &mut ThreadFacts, devices: &mut Devices) {
    let strings = strings_of(t);
    let text = |f: Option<MarkerStr<'a>>| f.and_then(|f| f.resolve(strings));
    for (d, s, e) in markers_of(t) {
        match view(d) {
            MarkerView::OffCpu {
                reason,
                off_cpu,
                run_delay,
                wakeup_landing,
                waker_tid,
                waker_context,
                cpu_out,
                cpu_in,
                waited_on,
                ..
            } => {
                // A wait drawn to its enqueue says its whole length apart.
                let e = off_cpu.map_or(e, |whole| e.max(s + whole));
                if e <= s {
                    continue;
                }
                let run_delay = run_delay.unwrap_or(0.0);
                // Any string of the thread's table an index points at,
                // escaped as names are: the reason and what it waited on
                // are printed; the context only compared (its known
                // values escape to themselves).
                let escaped = |f| text(f).map(crate::escape::escape);
                let reason = escaped(reason).unwrap_or("other".into());
                facts.waits.push(Wait {
                    start: s,
                    end: e,
                    reason: match escaped(waited_on) {
                        Some(on) => format!("{reason} on {on}"),
                        None => reason.into_owned(),
                    },
                    wake: e - run_delay - wakeup_landing.unwrap_or(0.0).max(0.0),
                    queued: e - run_delay,
                    waker_tid,
                    context: escaped(waker_context).map(|c| c.into_owned()),
                    cpu_out,
                    cpu_in,
                });
            }
            MarkerView::Io { device } => {
                let name = crate::escape::escape(text(device).unwrap_or("?"));
                let id = match devices.ids.get(name.as_ref()) {
                    Some(&i) => i,
                    None => {
                        devices.names.push(name.clone().into_owned());
                        let id = devices.names.len();
                        devices.ids.insert(name.into_owned(), id);
                        id
                    }
                };
                // A machine has a few devices; past u16's ids (a profile
                // naming 65,535 of them) the rest share the last.
                facts.io.push((s, e, id.min(u16::MAX as usize) as u16));
            }
            MarkerView::ShortWaits {
                count,
                off_cpu,
                waited,
                landing,
                waker_tid,
                waker_context,
                ..
            } if e >= s => facts.short.push(ShortRun {
                start: s,
                end: e,
                count: count.unwrap_or(0.0),
                off_cpu: off_cpu.unwrap_or(0.0).max(0.0),
                waited: waited.unwrap_or(0.0).max(0.0),
                landing: landing.unwrap_or(0.0).max(0.0),
                free: e - s,
                waker_tid,
                context: text(waker_context).unwrap_or("not seen").to_string(),
            }),
            _ => {}
        }
    }
    facts.io.sort_by(|x, y| x.0.total_cmp(&y.0));
    facts.io_span = facts.io.iter().map(|r| r.1 - r.0).fold(0.0, f64::max);
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
    for r in &mut facts.short {
        r.free = free_time(&facts.waits, r.start, r.end);
    }
}

/// `[a, b]` less the parts of `waits` (sorted, not overlapping) in it, ms:
/// the time a thread was not in one of its long waits, where its short
/// waits lie. A run of short waits is spread over that, not over its whole
/// span: a server preempted often (long waits for a CPU) between its short
/// fdatasyncs had them charged evenly over its preemptions too, and the
/// share that fell there was lost where a client's wait met them and left
/// as its "running" (the server blocked 40 ms, 29 % of it charged as
/// running beside two spinners).
pub(super) fn free_time(waits: &[Wait], a: f64, b: f64) -> f64 {
    let first = waits.partition_point(|w| w.end <= a);
    let covered: f64 = waits[first..]
        .iter()
        .take_while(|w| w.start < b)
        .map(|w| (w.end.min(b) - w.start.max(a)).max(0.0))
        .sum();
    ((b - a) - covered).max(0.0)
}

/// A per-CPU track's slices (`OnCpu` markers; idle ones are `CpuIdle`),
/// into `cpus`; any other track adds nothing. The track is the machine's
/// (its pid, "0", or "machine" in older profiles) with tid
/// CPU_TRACK_TID_BASE + cpu.
fn read_cpu_track(t: &Value, cpus: &mut FxHashMap<u32, Vec<Slice>>) {
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
                    start: s,
                    end: e,
                    tid: tid as u32,
                });
            }
        }
    }
}

/// A CPU's slices as [`Threads`] reads them: half an interval earlier (see
/// the module doc of `why`), sorted, apart.
fn place_slices(slices: &mut Vec<Slice>, interval: f64) {
    for s in slices.iter_mut() {
        s.start -= interval / 2.0;
        s.end -= interval / 2.0;
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

impl Reader {
    /// A thread's on-CPU samples: their times, leaf function names (as
    /// indexes into `leaf_names`) and the leaves' category indexes.
    fn read_samples(&mut self, t: &Value) -> Vec<(f64, u32, u32)> {
        let s = &t["samples"];
        let Some(times) = crate::profile::validate::sample_times(s) else {
            return Vec::new();
        };
        let Some(stacks) = s["stack"].as_array() else {
            return Vec::new();
        };
        let (stack_frame, frame_func, frame_cat, func_name, strings) = (
            t["stackTable"]["frame"].as_array(),
            t["frameTable"]["func"].as_array(),
            t["frameTable"]["category"].as_array(),
            t["funcTable"]["name"].as_array(),
            t["stringArray"].as_array(),
        );
        let leaf = |stack: u64| -> Option<(&str, u32)> {
            let frame = stack_frame?.get(stack as usize)?.as_u64()? as usize;
            let func = frame_func?.get(frame)?.as_u64()? as usize;
            let category = u32::try_from(frame_cat?.get(frame)?.as_u64()?).ok()?;
            let name = strings?
                .get(func_name?.get(func)?.as_u64()? as usize)?
                .as_str()?;
            Some((name, category))
        };
        let mut out = Vec::with_capacity(times.len());
        for (time, stack) in times.iter().zip(stacks) {
            let Some((name, category)) = stack.as_u64().and_then(leaf) else {
                continue;
            };
            let id = match self.leaf_ids.get(name) {
                Some(&id) => id,
                None => {
                    let id = self.leaf_names.len() as u32;
                    self.leaf_names
                        .push(crate::escape::escape(name).into_owned());
                    self.leaf_ids.insert(name.to_string(), id);
                    id
                }
            };
            out.push((*time, id, category));
        }
        out
    }
}
