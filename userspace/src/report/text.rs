//! The text report: what the profile's threads add up to, and the tables
//! and histograms that show it.
//!
//! In: a profile's `meta`, then the threads the filter admits, one at a
//! time as they are read, and how many rows a table shows. Out: the
//! report's text, built in two named steps: a [`Tally`] of the admitted
//! threads (per process, per function, per thread's waits, per waker, per
//! device; names copied, so no thread is held), then one section per table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rustc_hash::FxHashMap;

use crate::profile::schema::{MarkerData, Meta, Thread};

use super::counts::{count_stacks, func_totals, off_cpu_reason, Categories, StackCounts};
use super::histogram::Log2Histogram;
use super::read::ThreadRead;
use super::Filter;

/// Threads whose histograms are drawn, at most: each is a dozen lines.
const MAX_HISTOGRAMS: usize = 5;

/// Per process: name, threads, CPU samples, kernel CPU µs, off-CPU ms.
#[derive(Default)]
struct ProcessRow {
    name: String,
    threads: usize,
    cpu_samples: u64,
    idle_samples: u64,
    cpu_delta_us: f64,
    off_cpu_ms: f64,
}

/// Per thread, for the off-CPU and run-queue tables.
struct ThreadRow {
    label: String,
    off_cpu_by_reason: BTreeMap<String, f64>,
    run_delays_us: Vec<f64>,
}

/// Functions across threads, by (name, library), with their CPU samples
/// as columns. The names are owned: the threads are read one at a time and
/// dropped.
#[derive(Default)]
struct Functions {
    ids: FxHashMap<String, FxHashMap<String, usize>>,
    keys: Vec<(String, String)>,
    self_samples: Vec<u64>,
    total_samples: Vec<u64>,
}

impl Functions {
    fn id(&mut self, name: &str, lib: &str) -> usize {
        if let Some(&id) = self.ids.get(name).and_then(|by_lib| by_lib.get(lib)) {
            return id;
        }
        let id = self.keys.len();
        self.ids
            .entry(name.to_string())
            .or_default()
            .insert(lib.to_string(), id);
        self.keys.push((name.to_string(), lib.to_string()));
        self.self_samples.push(0);
        self.total_samples.push(0);
        id
    }
}

/// What the admitted threads add up to, for the sections to show.
#[derive(Default)]
struct Tally {
    processes: BTreeMap<u32, ProcessRow>,
    threads: Vec<ThreadRow>,
    functions: Functions,
    /// Per waker: wakeups and the milliseconds they ended.
    wakers: FxHashMap<String, (u64, f64)>,
    io_by_device: BTreeMap<String, Log2Histogram>,
    /// CPU samples of every process but the idle one.
    cpu_samples_all: u64,
    off_cpu_markers: u64,
}

impl Tally {
    /// Count one admitted thread.
    fn add(&mut self, t: &Thread, cats: &Categories) {
        let pid = t.pid().unwrap_or(0);
        let counts = count_stacks(t, cats);
        self.add_to_process(t, pid, &counts);
        if pid != 0 {
            self.cpu_samples_all = self.cpu_samples_all.saturating_add(counts.cpu_samples);
            self.add_functions(t, &counts, cats);
        }
        self.add_waits(t, &counts);
    }

    /// The thread's samples into its process's row.
    fn add_to_process(&mut self, t: &Thread, pid: u32, counts: &StackCounts) {
        let row = self.processes.entry(pid).or_default();
        if row.name.is_empty() || t.tid() == Some(pid) {
            row.name = t.process_name().to_string();
        }
        row.threads += 1;
        row.cpu_samples = row.cpu_samples.saturating_add(counts.cpu_samples);
        row.idle_samples = row.idle_samples.saturating_add(counts.idle_samples);
        row.cpu_delta_us += counts.cpu_delta_us;
        row.off_cpu_ms += counts.off_cpu_ms.values().sum::<f64>();
    }

    /// The thread's funcs' self and total samples into the functions across
    /// threads, by (name, library).
    fn add_functions(&mut self, t: &Thread, counts: &StackCounts, cats: &Categories) {
        let functions = &mut self.functions;
        let (self_by_func, total_by_func) = func_totals(t, &counts.cpu, cats.idle);
        for (f, (&own, &total)) in self_by_func.iter().zip(&total_by_func).enumerate() {
            if total > 0 {
                let g = functions.id(t.func_name(f as u32), &t.func_library(f as u32));
                functions.self_samples[g] = functions.self_samples[g].saturating_add(own);
                functions.total_samples[g] = functions.total_samples[g].saturating_add(total);
            }
        }
    }

    /// The thread's off-CPU time by reason, its run-queue delays, its
    /// wakers and its block I/O.
    fn add_waits(&mut self, t: &Thread, counts: &StackCounts) {
        let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
        for (&stack, &ms) in &counts.off_cpu_ms {
            let leaf = t.frame_table.func[t.stack_table.frame[stack as usize] as usize];
            *by_reason
                .entry(off_cpu_reason(t.func_name(leaf)).to_string())
                .or_default() += ms;
        }
        let mut run_delays_us = Vec::new();
        for (i, data) in t.markers.data.iter().enumerate() {
            let span = match (t.markers.start_time[i], t.markers.end_time[i]) {
                (Some(s), Some(e)) => (e - s).max(0.0),
                _ => 0.0,
            };
            match data {
                Some(MarkerData::OffCpu {
                    run_delay,
                    waker,
                    off_cpu,
                    ..
                }) => {
                    // A wait drawn to its enqueue says its whole length apart.
                    let span = off_cpu.map_or(span, |whole| span.max(whole));
                    self.off_cpu_markers += 1;
                    if let Some(d) = run_delay {
                        run_delays_us.push(d * 1e3);
                    }
                    // No waker written (or the dash of older profiles): no
                    // wakeup (preempted), or one not seen.
                    // An index past the thread's strings (a damaged
                    // profile) names a waker not known, not none.
                    let waker = match waker.as_ref().map(|w| w.resolve(&t.string_array)) {
                        None | Some(Some("—")) => {
                            "(none seen: preempted, or woken before the wait was traced)"
                        }
                        Some(None) => "?",
                        Some(Some(w)) => w,
                    };
                    if !self.wakers.contains_key(waker) {
                        self.wakers.insert(waker.to_string(), (0, 0.0));
                    }
                    let w = self.wakers.get_mut(waker).expect("inserted");
                    w.0 += 1;
                    w.1 += span;
                }
                Some(MarkerData::Io { device, .. }) => {
                    let device = device.resolve(&t.string_array).unwrap_or("?");
                    if !self.io_by_device.contains_key(device) {
                        self.io_by_device
                            .insert(device.to_string(), Log2Histogram::default());
                    }
                    self.io_by_device
                        .get_mut(device)
                        .expect("inserted")
                        .add(span * 1e3);
                }
                _ => {}
            }
        }
        if !by_reason.is_empty() || !run_delays_us.is_empty() {
            let label = format!(
                "{} ({}) pid {} tid {}",
                t.name,
                t.process_name(),
                t.pid().unwrap_or(0),
                t.tid().unwrap_or(0)
            );
            self.threads.push(ThreadRow {
                label,
                off_cpu_by_reason: by_reason,
                run_delays_us,
            });
        }
    }
}

/// The text report, built a thread at a time ([`TextReport::add`]) from
/// threads read one by one, then written ([`TextReport::finish`]).
pub(super) struct TextReport {
    cats: Categories,
    tally: Tally,
}

impl TextReport {
    /// A report of a profile whose categories are `cats`.
    pub(super) fn new(cats: Categories) -> TextReport {
        TextReport {
            cats,
            tally: Tally::default(),
        }
    }

    /// Count a thread the filter admits.
    pub(super) fn add(&mut self, t: &Thread) {
        self.tally.add(t, &self.cats);
    }

    /// The report's text, `top` rows a table.
    pub(super) fn finish(self, meta: &Meta, filter: &Filter, top: usize, path: &Path) -> String {
        let tally = self.tally;
        let mut out = String::new();
        write_header(&mut out, meta, &tally, filter, path);
        if tally.processes.is_empty() {
            let _ = writeln!(&mut out, "# no thread matches the filter");
            return out;
        }
        write_processes(&mut out, &tally.processes, top);
        if tally.cpu_samples_all > 0 {
            write_functions(&mut out, &tally.functions, tally.cpu_samples_all, top);
        }
        write_off_cpu(&mut out, &tally.threads, top);
        write_wakers(&mut out, tally.wakers, tally.off_cpu_markers, top);
        write_io(&mut out, &tally.io_by_device);
        write_run_queue(&mut out, &tally.threads, top);
        out
    }
}

/// The report of the threads `filter` admits, `top` rows a table, from a
/// profile held whole.
#[cfg(test)]
pub(super) fn report(
    profile: &crate::profile::schema::Profile,
    filter: &Filter,
    top: usize,
    path: &Path,
) -> String {
    let mut r = TextReport::new(Categories::of(&profile.meta));
    for t in profile.threads.iter().filter(|t| filter.admits(t)) {
        r.add(t);
    }
    r.finish(&profile.meta, filter, top, path)
}

/// The first line: the file, its length, what it holds and the filter.
fn write_header(out: &mut String, meta: &Meta, tally: &Tally, filter: &Filter, path: &Path) {
    let duration_ms = match (meta.profiling_start_time, meta.profiling_end_time) {
        (Some(s), Some(e)) if e > s => e - s,
        _ => 0.0,
    };
    let _ = writeln!(
        out,
        "# {}: {:.2} s, {} processes, {} threads, {} CPU samples every {:.3} ms{}",
        crate::escape::path(path),
        duration_ms / 1e3,
        tally.processes.len(),
        tally.processes.values().map(|p| p.threads).sum::<usize>(),
        tally.cpu_samples_all,
        meta.interval,
        match filter.describe() {
            d if d.is_empty() => String::new(),
            d => format!(" (only {d})"),
        }
    );
}

/// CPU per process.
fn write_processes(out: &mut String, processes: &BTreeMap<u32, ProcessRow>, top: usize) {
    let _ = writeln!(out, "\n## CPU by process (samples; CPU ms as the kernel accounted it for the sampled intervals)");
    let _ = writeln!(
        out,
        "{:>9} {:>7} {:>10} {:>11} {:>8}  {:<7} process",
        "samples", "share", "CPU ms", "off-CPU ms", "threads", "pid"
    );
    let mut rows: Vec<(&u32, &ProcessRow)> = processes.iter().collect();
    rows.sort_by(|a, b| {
        (b.1.cpu_samples + b.1.idle_samples)
            .cmp(&(a.1.cpu_samples + a.1.idle_samples))
            .then(a.0.cmp(b.0))
    });
    let all_samples: u64 = processes
        .values()
        .map(|p| p.cpu_samples + p.idle_samples)
        .sum();
    for (pid, p) in rows.iter().take(top) {
        let n = p.cpu_samples + p.idle_samples;
        let name = if **pid == 0 {
            format!("{} (idle)", p.name)
        } else {
            p.name.clone()
        };
        let _ = writeln!(
            out,
            "{n:>9} {:>6.1}% {:>10.1} {:>11.1} {:>8}  {pid:<7} {name}",
            percent(n, all_samples),
            p.cpu_delta_us / 1e3,
            p.off_cpu_ms,
            p.threads
        );
    }
    if rows.len() > top {
        let _ = writeln!(
            out,
            "{:>9} ({} more processes; --top N shows more)",
            "",
            rows.len() - top
        );
    }
}

/// The top functions by self and by total samples.
fn write_functions(out: &mut String, functions: &Functions, cpu_samples_all: u64, top: usize) {
    let func_keys = &functions.keys;
    let by = |column: &Vec<u64>, other: &Vec<u64>, title: &str, out: &mut String| {
        let mut order: Vec<usize> = (0..func_keys.len()).filter(|&i| column[i] > 0).collect();
        order.sort_by(|&a, &b| {
            column[b]
                .cmp(&column[a])
                .then(func_keys[a].cmp(&func_keys[b]))
        });
        let _ = writeln!(
            out,
            "\n## Top functions by {title} (of {cpu_samples_all} CPU samples, idle left out)"
        );
        let _ = writeln!(
            out,
            "{:>7} {:>7} {:>9}  function [library]",
            if title == "self" { "self" } else { "total" },
            if title == "self" { "total" } else { "self" },
            "samples"
        );
        for &i in order.iter().take(top) {
            let (name, lib) = (func_keys[i].0.as_str(), func_keys[i].1.as_str());
            let lib = lib.rsplit('/').next().unwrap_or(lib);
            // `[kernel.kallsyms]`, `[vdso]` are bracketed already.
            let lib = if lib.starts_with('[') {
                lib.to_string()
            } else if lib.is_empty() {
                String::new()
            } else {
                format!("[{lib}]")
            };
            let _ = writeln!(
                out,
                "{:>6.1}% {:>6.1}% {:>9}  {name}{}",
                percent(column[i], cpu_samples_all),
                percent(other[i], cpu_samples_all),
                column[i],
                if lib.is_empty() {
                    String::new()
                } else {
                    format!(" {lib}")
                }
            );
        }
    };
    by(
        &functions.self_samples,
        &functions.total_samples,
        "self",
        out,
    );
    by(
        &functions.total_samples,
        &functions.self_samples,
        "total",
        out,
    );
}

/// Off-CPU time by reason, per thread.
fn write_off_cpu(out: &mut String, threads: &[ThreadRow], top: usize) {
    let mut off: Vec<&ThreadRow> = threads
        .iter()
        .filter(|t| !t.off_cpu_by_reason.is_empty())
        .collect();
    if !off.is_empty() {
        let total = |t: &ThreadRow| t.off_cpu_by_reason.values().sum::<f64>();
        off.sort_by(|a, b| total(b).total_cmp(&total(a)));
        let _ = writeln!(out, "\n## Off-CPU time by reason, per thread (ms; every wait, the short ones summed in the kernel)");
        for t in off.iter().take(top) {
            let reasons: Vec<String> = t
                .off_cpu_by_reason
                .iter()
                .map(|(r, ms)| format!("{r} {ms:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "{:>10.1}  {}: {}",
                total(t),
                t.label,
                reasons.join(", ")
            );
        }
        if off.len() > top {
            let _ = writeln!(out, "{:>10} ({} more threads)", "", off.len() - top);
        }
    }
}

/// The top wakers.
fn write_wakers(
    out: &mut String,
    wakers: FxHashMap<String, (u64, f64)>,
    off_cpu_markers: u64,
    top: usize,
) {
    if !wakers.is_empty() {
        let mut order: Vec<(String, (u64, f64))> = wakers.into_iter().collect();
        order.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        let _ = writeln!(
            out,
            "\n## Top wakers (of {off_cpu_markers} waits long enough for a marker)"
        );
        let _ = writeln!(out, "{:>9} {:>12}  waker", "wakeups", "woken ms");
        for (waker, (n, ms)) in order.iter().take(top) {
            let _ = writeln!(out, "{n:>9} {ms:>12.1}  {waker}");
        }
    }
}

/// Block I/O latency per device.
fn write_io(out: &mut String, io_by_device: &BTreeMap<String, Log2Histogram>) {
    if !io_by_device.is_empty() {
        let _ = writeln!(
            out,
            "\n## Block I/O latency per device, from creation to completion (as biolatency -Q)"
        );
        for (device, h) in io_by_device {
            let _ = writeln!(out, "\ndevice {device}: {} requests", h.total());
            h.write(out, "usecs");
        }
    }
}

/// Run-queue delay per thread, for the threads that waited most.
fn write_run_queue(out: &mut String, threads: &[ThreadRow], top: usize) {
    let mut delayed: Vec<&ThreadRow> = threads
        .iter()
        .filter(|t| !t.run_delays_us.is_empty())
        .collect();
    if !delayed.is_empty() {
        let total = |t: &ThreadRow| t.run_delays_us.iter().sum::<f64>();
        delayed.sort_by(|a, b| total(b).total_cmp(&total(a)));
        let shown = top.min(MAX_HISTOGRAMS);
        let _ = writeln!(out, "\n## Run-queue delay per thread, after waits long enough for a marker (as runqlat -P; the {shown} threads that waited most)");
        for t in delayed.iter().take(shown) {
            let mut h = Log2Histogram::default();
            t.run_delays_us.iter().for_each(|&us| h.add(us));
            let _ = writeln!(
                out,
                "\n{}: {} waits, {:.1} ms of them runnable, waiting for a CPU",
                t.label,
                h.total(),
                total(t) / 1e3
            );
            h.write(out, "usecs");
        }
    }
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}
