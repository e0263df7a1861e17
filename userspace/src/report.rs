//! `sysprof report`: a profile read back and answered in the terminal, for
//! servers with no browser (what `perf report --stdio`, BCC's `runqlat` and
//! `biolatency` answer, from one file).
//!
//! In: a processed profile (`.json` or `.json.gz`) from `record` or `show`,
//! and filters (pids, tids, a command name). Out: text on stdout (or `-o`):
//! CPU per process; the top functions by self and by total CPU samples; off-CPU
//! time per thread by reason; the top wakers; block I/O latency per device and
//! run-queue delay per thread as log2 histograms. `--format folded` writes the
//! CPU samples as collapsed stacks instead (flamegraph.pl, inferno).
//!
//! The profile is read into columns, as it is written: each thread's tables
//! stay arrays of indexes, samples are counted per stack index first, and only
//! distinct stacks are walked, so a report costs one pass over the samples and
//! one over the distinct stacks. Only what sysprof's writer defines is read
//! (meta's interval and categories; per thread the stack, frame, func and
//! resource tables, samples, markers and strings); the categories are looked
//! up by name, so a profile whose category order differs still reads right.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::cli::ReportArgs;
use crate::error::RecordError;
use crate::profile::output::OutputFile;

/// Threads whose histograms are drawn, at most: each is a dozen lines.
const MAX_HISTOGRAMS: usize = 5;

/// Width of a histogram's bar, in characters (as BCC draws them).
const BAR_WIDTH: usize = 40;

/// Print the report `args` asks for; returns the exit status.
pub fn run(args: ReportArgs) -> Result<i32, RecordError> {
    let profile = load(&args.path)?;
    let filter = Filter { pids: args.pids.clone(), tids: args.tids.clone(), comm: args.comm.clone() };
    if !profile.threads.iter().any(|t| filter.admits(t)) {
        return Err(RecordError::Usage(format!(
            "no thread in {} matches {}; `sysprof report {}` without it lists the processes",
            args.path.display(),
            match filter.describe() {
                d if d.is_empty() => "anything".to_string(),
                d => d,
            },
            args.path.display()
        )));
    }
    let text = match args.format {
        crate::cli::ReportFormat::Folded => folded(&profile, &filter),
        crate::cli::ReportFormat::Text => report(&profile, &filter, args.top.max(1), &args.path),
    };
    match &args.output {
        Some(path) => {
            let out = OutputFile::create(path)?;
            out.commit_with(|w| std::io::Write::write_all(w, text.as_bytes()))?;
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is the reader's choice, not an error.
            if let Err(e) = stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(RecordError::Internal(format!("cannot write the report: {e}")));
                }
            }
        }
    }
    Ok(0)
}

// ---------------------------------------------------------------------------
// The profile, as far as the report reads it.

/// The parts of a processed profile the report reads.
#[derive(Deserialize)]
struct ProfileFile {
    meta: Meta,
    threads: Vec<ThreadFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    interval: f64,
    #[serde(default)]
    profiling_start_time: Option<f64>,
    #[serde(default)]
    profiling_end_time: Option<f64>,
    #[serde(default)]
    categories: Vec<Category>,
}

#[derive(Deserialize)]
struct Category {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadFile {
    name: String,
    /// A string in the format (ours hold a number; the per-CPU tracks `cpus`).
    pid: serde_json::Value,
    tid: serde_json::Value,
    #[serde(default)]
    process_name: Option<String>,
    stack_table: StackTable,
    frame_table: FrameTable,
    func_table: FuncTable,
    resource_table: ResourceTable,
    samples: Samples,
    markers: Markers,
    string_array: Vec<String>,
}

#[derive(Deserialize)]
struct StackTable {
    prefix: Vec<Option<u32>>,
    frame: Vec<u32>,
}

#[derive(Deserialize)]
struct FrameTable {
    func: Vec<u32>,
    category: Vec<Option<u32>>,
}

#[derive(Deserialize)]
struct FuncTable {
    name: Vec<u32>,
    resource: Vec<i64>,
}

#[derive(Deserialize)]
struct ResourceTable {
    name: Vec<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Samples {
    stack: Vec<Option<u32>>,
    #[serde(default)]
    weight: Option<Vec<f64>>,
    #[serde(default)]
    weight_type: Option<String>,
    #[serde(default, rename = "threadCPUDelta")]
    thread_cpu_delta: Option<Vec<Option<f64>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Markers {
    start_time: Vec<Option<f64>>,
    end_time: Vec<Option<f64>>,
    data: Vec<Option<MarkerData>>,
}

/// The marker payloads the report reads; any other is skipped.
#[derive(Deserialize)]
#[serde(tag = "type")]
enum MarkerData {
    #[serde(rename_all = "camelCase")]
    OffCpu {
        #[serde(default)]
        run_delay: Option<f64>,
        waker: String,
    },
    BlockIo { device: String },
    #[serde(other)]
    Other,
}

/// Read and parse `path` (gzip by its magic, as the Firefox Profiler does,
/// inflated within [`crate::profile::input`]'s limit); every string in it
/// comes back with its control characters escaped, so no name reaches the
/// terminal raw, in the tables or in folded lines.
fn load(path: &Path) -> Result<ProfileFile, RecordError> {
    let bad = |what: String| RecordError::Usage(format!("{}: {what}; give a profile written by sysprof record or sysprof show", path.display()));
    let bytes = crate::profile::input::read_profile_bytes(path).map_err(|e| match e.kind() {
        // Already says what to do.
        std::io::ErrorKind::InvalidData => RecordError::Usage(e.to_string()),
        _ => RecordError::Usage(format!("{e}; give a profile written by sysprof record or sysprof show")),
    })?;
    let parsed = serde_json::from_slice(&bytes);
    let mut profile: ProfileFile = parsed.map_err(|e| bad(format!("not a processed profile ({e})")))?;
    profile.escape();
    for t in &profile.threads {
        if !t.consistent() {
            return Err(bad(format!("thread {} has tables of different lengths or indexes out of range", t.name)));
        }
    }
    Ok(profile)
}

impl ProfileFile {
    /// Escape every string a user may have chosen (names of processes,
    /// threads, functions, libraries, wakers, devices).
    fn escape(&mut self) {
        let esc = |s: &mut String| {
            if let std::borrow::Cow::Owned(e) = crate::escape::escape(s) {
                *s = e;
            }
        };
        for c in &mut self.meta.categories {
            esc(&mut c.name);
        }
        for t in &mut self.threads {
            esc(&mut t.name);
            if let Some(p) = t.process_name.as_mut() {
                esc(p);
            }
            t.string_array.iter_mut().for_each(esc);
            for d in t.markers.data.iter_mut().flatten() {
                match d {
                    MarkerData::OffCpu { waker, .. } => esc(waker),
                    MarkerData::BlockIo { device } => esc(device),
                    MarkerData::Other => {}
                }
            }
        }
    }
}

impl ThreadFile {
    /// Every index the report follows stays in its table, so reading it
    /// cannot panic whatever the file says.
    fn consistent(&self) -> bool {
        let (stacks, frames, funcs) = (self.stack_table.frame.len(), self.frame_table.func.len(), self.func_table.name.len());
        let strings = self.string_array.len();
        self.stack_table.prefix.len() == stacks
            && self.stack_table.prefix.iter().enumerate().all(|(i, p)| p.is_none_or(|p| (p as usize) < i))
            && self.stack_table.frame.iter().all(|&f| (f as usize) < frames)
            && self.frame_table.category.len() == frames
            && self.frame_table.func.iter().all(|&f| (f as usize) < funcs)
            && self.func_table.resource.len() == funcs
            && self.func_table.name.iter().all(|&s| (s as usize) < strings)
            && self.func_table.resource.iter().all(|&r| r < 0 || (r as usize) < self.resource_table.name.len())
            && self.resource_table.name.iter().all(|&s| (s as usize) < strings)
            && self.samples.stack.iter().all(|s| s.is_none_or(|s| (s as usize) < stacks))
            && self.samples.weight.as_ref().is_none_or(|w| w.len() == self.samples.stack.len() && w.iter().all(|&x| x.is_finite() && (0.0..=1e12).contains(&x)))
            && self.samples.thread_cpu_delta.as_ref().is_none_or(|d| d.len() == self.samples.stack.len())
            && self.markers.start_time.len() == self.markers.data.len()
            && self.markers.end_time.len() == self.markers.data.len()
    }

    fn pid(&self) -> Option<u32> {
        number(&self.pid)
    }

    fn tid(&self) -> Option<u32> {
        number(&self.tid)
    }

    fn process_name(&self) -> &str {
        self.process_name.as_deref().unwrap_or(&self.name)
    }

    fn func_name(&self, func: u32) -> &str {
        &self.string_array[self.func_table.name[func as usize] as usize]
    }

    fn func_library(&self, func: u32) -> &str {
        match self.func_table.resource[func as usize] {
            r if r < 0 => "",
            r => &self.string_array[self.resource_table.name[r as usize] as usize],
        }
    }

    fn leaf_category(&self, stack: u32) -> Option<u32> {
        self.frame_table.category[self.stack_table.frame[stack as usize] as usize]
    }
}

/// A pid or tid, which the format allows as a number or a string.
fn number(v: &serde_json::Value) -> Option<u32> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Which threads the report covers.
struct Filter {
    pids: Vec<u32>,
    tids: Vec<u32>,
    comm: Option<String>,
}

impl Filter {
    fn admits(&self, t: &ThreadFile) -> bool {
        let (Some(pid), Some(tid)) = (t.pid(), t.tid()) else { return false };
        if !self.pids.is_empty() && !self.pids.contains(&pid) {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&tid) {
            return false;
        }
        match &self.comm {
            // The process's name carries its container as ` [label]`.
            Some(c) => t.name == *c || t.process_name() == c || t.process_name().split(" [").next() == Some(c.as_str()),
            None => true,
        }
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        if !self.pids.is_empty() {
            parts.push(format!("pid {}", list(&self.pids)));
        }
        if !self.tids.is_empty() {
            parts.push(format!("tid {}", list(&self.tids)));
        }
        if let Some(c) = &self.comm {
            parts.push(format!("comm {c}"));
        }
        parts.join(", ")
    }
}

/// The categories the report tells apart, by their names in `meta`.
struct Categories {
    off_cpu: Option<u32>,
    idle: Option<u32>,
    kernel: Option<u32>,
}

impl Categories {
    fn of(meta: &Meta) -> Categories {
        let find = |name: &str| meta.categories.iter().position(|c| c.name == name).map(|i| i as u32);
        Categories { off_cpu: find("Off-CPU"), idle: find("Idle"), kernel: find("Kernel") }
    }
}

// ---------------------------------------------------------------------------
// What the report counts.

/// A sample's kind, from its leaf frame's category (and the idle process).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Cpu,
    Idle,
    OffCpu,
}

/// A thread's samples counted per stack index: CPU samples (with their CPU
/// time) and off-CPU milliseconds.
struct StackCounts {
    cpu: FxHashMap<u32, u64>,
    off_cpu_ms: FxHashMap<u32, f64>,
    cpu_samples: u64,
    idle_samples: u64,
    /// The kernel's CPU time for the thread's CPU samples, µs.
    cpu_delta_us: f64,
}

fn count_stacks(t: &ThreadFile, cats: &Categories) -> StackCounts {
    let mut c = StackCounts { cpu: FxHashMap::default(), off_cpu_ms: FxHashMap::default(), cpu_samples: 0, idle_samples: 0, cpu_delta_us: 0.0 };
    let idle_thread = t.pid() == Some(0);
    let traced = t.samples.weight_type.as_deref() == Some("tracing-ms");
    for (i, stack) in t.samples.stack.iter().enumerate() {
        let Some(stack) = *stack else { continue };
        let category = t.leaf_category(stack);
        let kind = if category.is_some() && category == cats.off_cpu {
            Kind::OffCpu
        } else if idle_thread || (category.is_some() && category == cats.idle) {
            Kind::Idle
        } else {
            Kind::Cpu
        };
        let weight = t.samples.weight.as_ref().map(|w| w[i]);
        match kind {
            Kind::OffCpu => *c.off_cpu_ms.entry(stack).or_default() += weight.unwrap_or(0.0),
            Kind::Cpu | Kind::Idle => {
                // With off-CPU time the weights are milliseconds: a CPU sample is one sample.
                let n = if traced { 1 } else { weight.map(|w| w.max(0.0) as u64).unwrap_or(1) };
                if kind == Kind::Idle {
                    c.idle_samples = c.idle_samples.saturating_add(n);
                } else {
                    c.cpu_samples = c.cpu_samples.saturating_add(n);
                }
                let slot = c.cpu.entry(stack).or_default();
                *slot = slot.saturating_add(n);
                c.cpu_delta_us += t.samples.thread_cpu_delta.as_ref().and_then(|d| d[i]).unwrap_or(0.0);
            }
        }
    }
    c
}

/// Per func of `t`: its self and total CPU samples over the stacks in
/// `cpu` (idle leaves left out), a recursive function counted once per
/// sample towards its total.
///
/// Linear in the stack table, however deep the stacks: samples are summed
/// per subtree of the prefix tree (prefixes point backwards, so one pass from
/// the end), then one depth-first walk keeps how often each func is on the
/// path from the root, and a node adds its subtree's samples to its func's
/// total only where it is the func's outermost frame. (Collecting each
/// stack's funcs by walking it took time quadratic in its depth: 112 s for
/// one 200,000-frame stack.)
fn func_totals(t: &ThreadFile, cpu: &FxHashMap<u32, u64>, idle: Option<u32>) -> (Vec<u64>, Vec<u64>) {
    let n = t.stack_table.frame.len();
    let funcs = t.func_table.name.len();
    let func_of = |i: usize| t.frame_table.func[t.stack_table.frame[i] as usize] as usize;
    let mut own = vec![0u64; funcs];
    let mut total = vec![0u64; funcs];
    let mut subtree = vec![0u64; n];
    for (&stack, &count) in cpu {
        if t.leaf_category(stack).is_some() && t.leaf_category(stack) == idle {
            continue;
        }
        subtree[stack as usize] = subtree[stack as usize].saturating_add(count);
        let f = func_of(stack as usize);
        own[f] = own[f].saturating_add(count);
    }
    for i in (0..n).rev() {
        if let Some(p) = t.stack_table.prefix[i] {
            subtree[p as usize] = subtree[p as usize].saturating_add(subtree[i]);
        }
    }
    // Children of each node (CSR), for the walk; only nodes with samples below.
    let sampled_child = |i: usize| t.stack_table.prefix[i].filter(|_| subtree[i] > 0).map(|p| p as usize);
    let mut first = vec![0u32; n + 1];
    for p in (0..n).filter_map(sampled_child) {
        first[p + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut children = vec![0u32; first[n] as usize];
    for (i, p) in (0..n).filter_map(|i| sampled_child(i).map(|p| (i, p))) {
        children[fill[p] as usize] = i as u32;
        fill[p] += 1;
    }
    let mut on_path = vec![0u32; funcs];
    // (node, entered): a node is pushed once to enter and once to leave.
    let mut todo: Vec<(u32, bool)> = (0..n).filter(|&i| t.stack_table.prefix[i].is_none() && subtree[i] > 0).map(|i| (i as u32, false)).collect();
    while let Some((i, entered)) = todo.pop() {
        let f = func_of(i as usize);
        if entered {
            on_path[f] -= 1;
            continue;
        }
        if on_path[f] == 0 {
            total[f] = total[f].saturating_add(subtree[i as usize]);
        }
        on_path[f] += 1;
        todo.push((i, true));
        let (a, b) = (first[i as usize] as usize, first[i as usize + 1] as usize);
        todo.extend(children[a..b].iter().map(|&c| (c, false)));
    }
    (own, total)
}

/// The reason an off-CPU leaf names: `[off-CPU: sleeping]` → `sleeping`.
fn off_cpu_reason(name: &str) -> &str {
    name.strip_prefix("[off-CPU: ").and_then(|r| r.strip_suffix(']')).unwrap_or(name)
}

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
/// as columns.
#[derive(Default)]
struct Functions<'a> {
    ids: FxHashMap<(&'a str, &'a str), usize>,
    keys: Vec<(&'a str, &'a str)>,
    self_samples: Vec<u64>,
    total_samples: Vec<u64>,
}

impl<'a> Functions<'a> {
    fn id(&mut self, key: (&'a str, &'a str)) -> usize {
        *self.ids.entry(key).or_insert_with(|| {
            self.keys.push(key);
            self.self_samples.push(0);
            self.total_samples.push(0);
            self.keys.len() - 1
        })
    }
}

/// A log2 histogram of microseconds, as BCC's tools print them.
#[derive(Default)]
struct Log2Histogram {
    counts: Vec<u64>,
}

impl Log2Histogram {
    fn add(&mut self, us: f64) {
        // Bucket 0 holds 0-1 µs, bucket k holds [2^k, 2^(k+1)).
        let v = us.max(0.0) as u64;
        // At most bucket 62, so its upper bound fits in a u64.
        let bucket = if v < 2 { 0 } else { (63 - v.leading_zeros() as usize).min(62) };
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn write(&self, out: &mut String, unit: &str) {
        let max = self.counts.iter().copied().max().unwrap_or(0).max(1);
        let first = self.counts.iter().position(|&c| c > 0).unwrap_or(0);
        let _ = writeln!(out, "     {unit:>19} : count    distribution");
        for (k, &count) in self.counts.iter().enumerate().skip(first) {
            let (lo, hi) = if k == 0 { (0u64, 1u64) } else { (1u64 << k, (1u64 << (k + 1)) - 1) };
            let bar = "*".repeat(((count as u128 * BAR_WIDTH as u128).div_ceil(max as u128)) as usize);
            let _ = writeln!(out, "     {lo:>8} -> {hi:<8} : {count:<8} |{bar:<BAR_WIDTH$}|");
        }
    }
}

// ---------------------------------------------------------------------------
// The text report.

fn report<'a>(profile: &'a ProfileFile, filter: &Filter, top: usize, path: &Path) -> String {
    let cats = Categories::of(&profile.meta);
    let interval_ms = profile.meta.interval;
    let mut processes: BTreeMap<u32, ProcessRow> = BTreeMap::new();
    let mut threads: Vec<ThreadRow> = Vec::new();
    let mut functions = Functions::default();
    let mut wakers: FxHashMap<&str, (u64, f64)> = FxHashMap::default();
    let mut io_by_device: BTreeMap<&str, Log2Histogram> = BTreeMap::new();
    let mut cpu_samples_all = 0u64;
    let mut off_cpu_markers = 0u64;

    for t in profile.threads.iter().filter(|t| filter.admits(t)) {
        let pid = t.pid().unwrap_or(0);
        let counts = count_stacks(t, &cats);
        let row = processes.entry(pid).or_default();
        if row.name.is_empty() || t.tid() == Some(pid) {
            row.name = t.process_name().to_string();
        }
        row.threads += 1;
        row.cpu_samples = row.cpu_samples.saturating_add(counts.cpu_samples);
        row.idle_samples = row.idle_samples.saturating_add(counts.idle_samples);
        row.cpu_delta_us += counts.cpu_delta_us;
        row.off_cpu_ms += counts.off_cpu_ms.values().sum::<f64>();

        // The functions' global ids for this thread's funcs, made on first use.
        let mut local: Vec<Option<usize>> = vec![None; t.func_table.name.len()];
        let mut global = |functions: &mut Functions<'a>, func: u32| -> usize {
            *local[func as usize].get_or_insert_with(|| functions.id((t.func_name(func), t.func_library(func))))
        };
        if pid != 0 {
            cpu_samples_all = cpu_samples_all.saturating_add(counts.cpu_samples);
            let (self_by_func, total_by_func) = func_totals(t, &counts.cpu, cats.idle);
            for (f, (&own, &total)) in self_by_func.iter().zip(&total_by_func).enumerate() {
                if total > 0 {
                    let g = global(&mut functions, f as u32);
                    functions.self_samples[g] = functions.self_samples[g].saturating_add(own);
                    functions.total_samples[g] = functions.total_samples[g].saturating_add(total);
                }
            }
        }

        let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
        for (&stack, &ms) in &counts.off_cpu_ms {
            let leaf = t.frame_table.func[t.stack_table.frame[stack as usize] as usize];
            *by_reason.entry(off_cpu_reason(t.func_name(leaf)).to_string()).or_default() += ms;
        }
        let mut run_delays_us = Vec::new();
        for (i, data) in t.markers.data.iter().enumerate() {
            let span = match (t.markers.start_time[i], t.markers.end_time[i]) {
                (Some(s), Some(e)) => (e - s).max(0.0),
                _ => 0.0,
            };
            match data {
                Some(MarkerData::OffCpu { run_delay, waker }) => {
                    off_cpu_markers += 1;
                    if let Some(d) = run_delay {
                        run_delays_us.push(d * 1e3);
                    }
                    // The writer's dash: no wakeup (preempted), or one not seen.
                    let waker = if waker == "—" { "(none seen: preempted, or woken before the wait was traced)" } else { waker.as_str() };
                    let w = wakers.entry(waker).or_default();
                    w.0 += 1;
                    w.1 += span;
                }
                Some(MarkerData::BlockIo { device }) => io_by_device.entry(device.as_str()).or_default().add(span * 1e3),
                _ => {}
            }
        }
        if !by_reason.is_empty() || !run_delays_us.is_empty() {
            let label = format!("{} ({}) pid {} tid {}", t.name, t.process_name(), pid, t.tid().unwrap_or(0));
            threads.push(ThreadRow { label, off_cpu_by_reason: by_reason, run_delays_us });
        }
    }

    let mut out = String::new();
    let duration_ms = match (profile.meta.profiling_start_time, profile.meta.profiling_end_time) {
        (Some(s), Some(e)) if e > s => e - s,
        _ => 0.0,
    };
    let _ = writeln!(
        out,
        "# {}: {:.2} s, {} processes, {} threads, {} CPU samples every {:.3} ms{}",
        crate::escape::path(path),
        duration_ms / 1e3,
        processes.len(),
        processes.values().map(|p| p.threads).sum::<usize>(),
        cpu_samples_all,
        interval_ms,
        match filter.describe() {
            d if d.is_empty() => String::new(),
            d => format!(" (only {d})"),
        }
    );
    if processes.is_empty() {
        let _ = writeln!(out, "# no thread matches the filter");
        return out;
    }

    // CPU per process.
    let _ = writeln!(out, "\n## CPU by process (samples; CPU ms as the kernel accounted it for the sampled intervals)");
    let _ = writeln!(out, "{:>9} {:>7} {:>10} {:>11} {:>8}  {:<7} process", "samples", "share", "CPU ms", "off-CPU ms", "threads", "pid");
    let mut rows: Vec<(&u32, &ProcessRow)> = processes.iter().collect();
    rows.sort_by(|a, b| (b.1.cpu_samples + b.1.idle_samples).cmp(&(a.1.cpu_samples + a.1.idle_samples)).then(a.0.cmp(b.0)));
    let all_samples: u64 = processes.values().map(|p| p.cpu_samples + p.idle_samples).sum();
    for (pid, p) in rows.iter().take(top) {
        let n = p.cpu_samples + p.idle_samples;
        let name = if **pid == 0 { format!("{} (idle)", p.name) } else { p.name.clone() };
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
        let _ = writeln!(out, "{:>9} ({} more processes; --top N shows more)", "", rows.len() - top);
    }

    // Functions.
    if cpu_samples_all > 0 {
        let func_keys = &functions.keys;
        let by = |column: &Vec<u64>, other: &Vec<u64>, title: &str, out: &mut String| {
            let mut order: Vec<usize> = (0..func_keys.len()).filter(|&i| column[i] > 0).collect();
            order.sort_by(|&a, &b| column[b].cmp(&column[a]).then(func_keys[a].cmp(&func_keys[b])));
            let _ = writeln!(out, "\n## Top functions by {title} (of {cpu_samples_all} CPU samples, idle left out)");
            let _ = writeln!(out, "{:>7} {:>7} {:>9}  function [library]", if title == "self" { "self" } else { "total" }, if title == "self" { "total" } else { "self" }, "samples");
            for &i in order.iter().take(top) {
                let (name, lib) = func_keys[i];
                let lib = lib.rsplit('/').next().unwrap_or(lib);
                // `[kernel.kallsyms]`, `[vdso]` are bracketed already.
                let lib = if lib.starts_with('[') { lib.to_string() } else if lib.is_empty() { String::new() } else { format!("[{lib}]") };
                let _ = writeln!(
                    out,
                    "{:>6.1}% {:>6.1}% {:>9}  {name}{}",
                    percent(column[i], cpu_samples_all),
                    percent(other[i], cpu_samples_all),
                    column[i],
                    if lib.is_empty() { String::new() } else { format!(" {lib}") }
                );
            }
        };
        by(&functions.self_samples, &functions.total_samples, "self", &mut out);
        by(&functions.total_samples, &functions.self_samples, "total", &mut out);
    }

    // Off-CPU by reason, per thread.
    let mut off: Vec<&ThreadRow> = threads.iter().filter(|t| !t.off_cpu_by_reason.is_empty()).collect();
    if !off.is_empty() {
        let total = |t: &ThreadRow| t.off_cpu_by_reason.values().sum::<f64>();
        off.sort_by(|a, b| total(b).total_cmp(&total(a)));
        let _ = writeln!(out, "\n## Off-CPU time by reason, per thread (ms; every wait, the short ones summed in the kernel)");
        for t in off.iter().take(top) {
            let reasons: Vec<String> = t.off_cpu_by_reason.iter().map(|(r, ms)| format!("{r} {ms:.1}")).collect();
            let _ = writeln!(out, "{:>10.1}  {}: {}", total(t), t.label, reasons.join(", "));
        }
        if off.len() > top {
            let _ = writeln!(out, "{:>10} ({} more threads)", "", off.len() - top);
        }
    }

    // Wakers.
    if !wakers.is_empty() {
        let mut order: Vec<(&str, (u64, f64))> = wakers.into_iter().collect();
        order.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        let _ = writeln!(out, "\n## Top wakers (of {off_cpu_markers} waits long enough for a marker)");
        let _ = writeln!(out, "{:>9} {:>12}  waker", "wakeups", "woken ms");
        for (waker, (n, ms)) in order.iter().take(top) {
            let _ = writeln!(out, "{n:>9} {ms:>12.1}  {waker}");
        }
    }

    // Block I/O latency.
    if !io_by_device.is_empty() {
        let _ = writeln!(out, "\n## Block I/O latency per device, from creation to completion (as biolatency -Q)");
        for (device, h) in &io_by_device {
            let _ = writeln!(out, "\ndevice {device}: {} requests", h.total());
            h.write(&mut out, "usecs");
        }
    }

    // Run-queue delay.
    let mut delayed: Vec<&ThreadRow> = threads.iter().filter(|t| !t.run_delays_us.is_empty()).collect();
    if !delayed.is_empty() {
        let total = |t: &ThreadRow| t.run_delays_us.iter().sum::<f64>();
        delayed.sort_by(|a, b| total(b).total_cmp(&total(a)));
        let shown = top.min(MAX_HISTOGRAMS);
        let _ = writeln!(out, "\n## Run-queue delay per thread, after waits long enough for a marker (as runqlat -P; the {shown} threads that waited most)");
        for t in delayed.iter().take(shown) {
            let mut h = Log2Histogram::default();
            t.run_delays_us.iter().for_each(|&us| h.add(us));
            let _ = writeln!(out, "\n{}: {} waits, {:.1} ms of them runnable, waiting for a CPU", t.label, h.total(), total(t) / 1e3);
            h.write(&mut out, "usecs");
        }
    }
    out
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

// ---------------------------------------------------------------------------
// Folded stacks.

/// The CPU samples (idle included, as perf's collapse does) as `process;
/// frame;...;leaf count` lines, root first; kernel frames end in `_[k]`.
/// Lines are sorted, so equal profiles give equal output.
fn folded(profile: &ProfileFile, filter: &Filter) -> String {
    let cats = Categories::of(&profile.meta);
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let clean = |s: &str| s.replace([';', '\n'], "_");
    for t in profile.threads.iter().filter(|t| filter.admits(t)) {
        let counts = count_stacks(t, &cats);
        for (&stack, &n) in &counts.cpu {
            let mut frames = Vec::new();
            let mut s = Some(stack);
            while let Some(i) = s {
                let frame = t.stack_table.frame[i as usize] as usize;
                let name = clean(t.func_name(t.frame_table.func[frame]));
                let kernel = t.frame_table.category[frame].is_some() && t.frame_table.category[frame] == cats.kernel;
                frames.push(if kernel { format!("{name}_[k]") } else { name });
                s = t.stack_table.prefix[i as usize];
            }
            frames.push(clean(t.process_name()));
            frames.reverse();
            *lines.entry(frames.join(";")).or_default() += n;
        }
    }
    let mut out = String::new();
    for (stack, n) in lines {
        let _ = writeln!(out, "{stack} {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the log2 buckets are BCC's: 0-1, 2-3, 4-7, ...
    #[test]
    fn histogram_buckets_are_powers_of_two() {
        let mut h = Log2Histogram::default();
        for us in [0.0, 1.9, 2.0, 3.0, 4.0, 7.9, 8.0, 1000.0] {
            h.add(us);
        }
        assert_eq!(h.counts[..4], [2, 2, 2, 1]);
        assert_eq!(h.counts[9], 1, "1000 µs is in 512 -> 1023");
        assert_eq!(h.total(), 8);
        let mut text = String::new();
        h.write(&mut text, "usecs");
        assert!(text.contains("512 -> 1023"), "{text}");
        assert_eq!(text.lines().count(), 1 + 10);
    }

    fn thread(stacks: &[(Option<u32>, u32)], frames: &[(u32, u32)], funcs: &[&str], samples: &[u32]) -> ThreadFile {
        let mut strings: Vec<String> = funcs.iter().map(|s| s.to_string()).collect();
        strings.push("libx.so".into());
        ThreadFile {
            name: "t".into(),
            pid: serde_json::json!("7"),
            tid: serde_json::json!(8),
            process_name: Some("proc".into()),
            stack_table: StackTable { prefix: stacks.iter().map(|s| s.0).collect(), frame: stacks.iter().map(|s| s.1).collect() },
            frame_table: FrameTable { func: frames.iter().map(|f| f.0).collect(), category: frames.iter().map(|f| Some(f.1)).collect() },
            func_table: FuncTable { name: (0..funcs.len() as u32).collect(), resource: vec![0; funcs.len()] },
            resource_table: ResourceTable { name: vec![funcs.len() as u32] },
            samples: Samples { stack: samples.iter().map(|&s| Some(s)).collect(), weight: None, weight_type: None, thread_cpu_delta: None },
            markers: Markers { start_time: vec![], end_time: vec![], data: vec![] },
            string_array: strings,
        }
    }

    fn meta() -> Meta {
        let cat = |n: &str| Category { name: n.into() };
        Meta { interval: 1.0, profiling_start_time: Some(0.0), profiling_end_time: Some(10.0), categories: vec![cat("Other"), cat("Idle"), cat("User"), cat("Kernel"), cat("Off-CPU")] }
    }

    /// Check self and total on a small tree: main -> a -> a (recursion) and
    /// main -> b, with 3 samples in the inner a and 1 in b.
    #[test]
    fn self_and_total_count_each_function_once_per_sample() {
        // funcs: 0 main, 1 a, 2 b; frames: one per func, user category.
        let t = thread(&[(None, 0), (Some(0), 1), (Some(1), 1), (Some(0), 2)], &[(0, 2), (1, 2), (2, 2)], &["main", "a", "b"], &[2, 2, 2, 3]);
        let profile = ProfileFile { meta: meta(), threads: vec![t] };
        assert!(profile.threads[0].consistent());
        let filter = Filter { pids: vec![], tids: vec![], comm: None };
        let text = report(&profile, &filter, 10, Path::new("p.json"));
        let line = |title: &str, func: &str| -> String {
            let section = text.split("## ").find(|s| s.starts_with(title)).unwrap_or_else(|| panic!("{text}"));
            section.lines().find(|l| l.ends_with(&format!(" {func} [libx.so]"))).unwrap_or_else(|| panic!("{func} in {section}")).to_string()
        };
        let columns = |l: String| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        assert_eq!(columns(line("Top functions by self", "a")), "75.0% 75.0% 3", "{text}");
        assert_eq!(columns(line("Top functions by total", "main")), "100.0% 0.0% 4", "{text}");
        assert_eq!(columns(line("Top functions by total", "b")), "25.0% 25.0% 1", "{text}");
        let folded = folded(&profile, &filter);
        assert_eq!(folded, "proc;main;a;a 3\nproc;main;b 1\n");
        let other = Filter { pids: vec![9], tids: vec![], comm: None };
        assert!(report(&profile, &other, 10, Path::new("p.json")).contains("no thread matches"));
    }

    /// Check that an index past its table is refused before anything reads it.
    #[test]
    fn out_of_range_indexes_are_refused() {
        let t = thread(&[(None, 5)], &[(0, 2)], &["main"], &[0]);
        assert!(!t.consistent());
        let t = thread(&[(Some(0), 0)], &[(0, 2)], &["main"], &[0]);
        assert!(!t.consistent(), "a prefix must point backwards");
        let t = thread(&[(None, 0)], &[(0, 2)], &["main"], &[1]);
        assert!(!t.consistent());
        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e300] {
            let mut t = thread(&[(None, 0)], &[(0, 2)], &["main"], &[0]);
            t.samples.weight = Some(vec![bad]);
            assert!(!t.consistent(), "weight {bad}");
        }
    }

    /// Check that durations no profile should hold (huge, negative, NaN)
    /// land in the histogram's end buckets instead of overflowing.
    #[test]
    fn absurd_durations_do_not_overflow_the_histogram() {
        let mut h = Log2Histogram::default();
        for us in [1e30, f64::MAX, -5.0, f64::NAN, u64::MAX as f64] {
            h.add(us);
        }
        let mut text = String::new();
        h.write(&mut text, "usecs");
        assert_eq!(h.total(), 5);
        assert!(text.contains("4611686018427387904 -> 9223372036854775807"), "{text}");
    }
}
