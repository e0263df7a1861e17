//! The profile writer: a [`Recording`] in, a Firefox Profiler *processed
//! profile* out (`preprocessedProfileVersion` 55, which the current Firefox
//! Profiler upgrades on load).
//!
//! Written here rather than with `fxprof-processed-profile` because that
//! crate only writes unsymbolicated native frames (addresses for a later
//! symbol server) or bare labels; a system-wide profile must carry names
//! resolved at record time (kallsyms, binaries of exited processes), with
//! one frame per (address, inline depth) and one func per symbol.
//!
//! Each thread gets its own string, frame, func, resource, native-symbol
//! and stack tables, as version 55 requires; `libs` is global.

pub mod folded;
pub mod input;
pub mod output;
pub mod validate;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::recording::{
    CounterRecord, FrameRecord, LibRecord, MarkerRecord, ProcessRecord, Recording, SliceKind, ThreadRecord, NO_LIB,
};
use crate::model::stack_tree::NO_PARENT;

/// The processed profile format version we write.
pub const PREPROCESSED_PROFILE_VERSION: u32 = 55;

/// Category indexes in `meta.categories`.
pub mod category {
    /// Grey, the default.
    pub const OTHER: u32 = 0;
    /// The idle loop (`swapper`).
    pub const IDLE: u32 = 1;
    /// User-space code.
    pub const USER: u32 = 2;
    /// Kernel code.
    pub const KERNEL: u32 = 3;
    /// Off-CPU time and its markers.
    pub const OFF_CPU: u32 = 4;
    /// Block I/O markers.
    pub const IO: u32 = 5;
}

/// Per-CPU tracks use tids from here up (real tids stay below 2^22).
pub const CPU_TRACK_TID_BASE: u32 = 10_000_000;

/// Facts about the machine for `meta`.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    /// `model name` from /proc/cpuinfo.
    pub cpu_name: String,
    /// Online logical CPUs.
    pub logical_cpus: u32,
    /// Physical cores, if known.
    pub physical_cpus: Option<u32>,
    /// Total memory, bytes.
    pub main_memory: Option<u64>,
    /// `uname -r`.
    pub kernel_release: String,
    /// Host name.
    pub hostname: String,
    /// The command line that recorded.
    pub arguments: String,
}

impl HostInfo {
    /// Read the running machine's facts.
    pub fn current(arguments: String) -> HostInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_name = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let mut cores = std::collections::BTreeSet::new();
        let mut phys = String::new();
        for l in cpuinfo.lines() {
            if let Some((k, v)) = l.split_once(':') {
                match k.trim() {
                    "physical id" => phys = v.trim().to_string(),
                    "core id" => {
                        cores.insert((phys.clone(), v.trim().to_string()));
                    }
                    _ => {}
                }
            }
        }
        let main_memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            m.lines().find_map(|l| l.strip_prefix("MemTotal:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map(|kb| kb * 1024)
        });
        HostInfo {
            cpu_name,
            logical_cpus: crate::bpf::online_cpus().map(|c| c.len() as u32).unwrap_or(1),
            physical_cpus: (!cores.is_empty()).then_some(cores.len() as u32),
            main_memory,
            kernel_release: crate::error::kernel_release(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default(),
            arguments,
        }
    }
}

/// The profile, ready to serialize. Threads, with their columns and
/// markers, stay typed structs: a `serde_json::Value` tree would hold each
/// number as a 32-byte value and each marker as a map of strings, which on an
/// I/O-heavy recording (tens of thousands of markers) doubled peak RSS and
/// the time to write.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    meta: serde_json::Value,
    libs: Vec<serde_json::Value>,
    threads: Vec<Thread>,
    pages: [(); 0],
    counters: Vec<serde_json::Value>,
    profiler_overhead: [(); 0],
}

impl Profile {
    /// The profile as a JSON value tree (tests and small tools).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("serializable")
    }
}

/// Build the profile.
///
/// `focus_pid` is the process the user asked about (the command of `record
/// -- CMD`): its main thread opens selected. See [`initial_threads`].
pub fn build_profile(rec: &Recording, host: &HostInfo, focus_pid: Option<u32>) -> Profile {
    // Milliseconds since the start, rounded to the microsecond: the clock's
    // nanoseconds would only lengthen every number in the file.
    let ms = |ns: u64| -> f64 { micros(ns as i64 - rec.start_ns as i64) as f64 / 1e3 };
    let mut threads = Vec::new();
    let mut main_thread_index: FxHashMap<u32, usize> = FxHashMap::default();
    let mut tracks = Vec::new();
    for p in &rec.processes {
        for t in &p.threads {
            if t.tid == p.pid || !main_thread_index.contains_key(&p.pid) {
                main_thread_index.insert(p.pid, threads.len());
            }
            tracks.push(TrackFacts { pid: Some(p.pid), main: t.tid == p.pid, profiler: p.profiler, cpu_samples: t.samples.time_ns.len() });
            threads.push(build_thread(rec, p, t, &ms));
        }
    }
    for (cpu, markers) in &rec.cpu_tracks {
        tracks.push(TrackFacts { pid: None, main: false, profiler: false, cpu_samples: 0 });
        threads.push(build_cpu_track(rec, *cpu, markers, &ms));
    }
    let (visible, selected) = initial_threads(&tracks, focus_pid);
    let counters: Vec<serde_json::Value> = rec
        .counters
        .iter()
        .filter_map(|c| {
            let main = main_thread_index.get(&c.pid).copied().or_else(|| (c.pid == 0 && !threads.is_empty()).then_some(0))?;
            Some(counter_json(c, main, &ms))
        })
        .collect();
    let mut extra_entries: Vec<serde_json::Value> = Vec::new();
    for n in &rec.notes {
        extra_entries.push(serde_json::json!({ "label": "Note", "format": "string", "value": n }));
    }
    for w in &rec.warnings {
        extra_entries.push(serde_json::json!({ "label": "Warning", "format": "string", "value": w }));
    }
    let st = &rec.stats;
    extra_entries.push(serde_json::json!({ "label": "Samples lost", "format": "integer", "value": st.lost_samples }));
    extra_entries.push(serde_json::json!({ "label": "Scheduler/I/O records lost", "format": "integer", "value": st.lost_events }));
    extra_entries.push(serde_json::json!({ "label": "Stacks lost", "format": "integer", "value": st.lost_stacks + st.stacks_not_kept }));
    extra_entries.push(serde_json::json!({ "label": "Processes that lived and died unsampled", "format": "integer", "value": st.processes_without_data }));
    let meta = serde_json::json!({
            "version": 24,
            "preprocessedProfileVersion": PREPROCESSED_PROFILE_VERSION,
            "product": format!("sysprof {} on {}", env!("CARGO_PKG_VERSION"), host.hostname),
            "interval": rec.interval_ms,
            "startTime": rec.start_wall_ms,
            "startTimeAsClockMonotonicNanosecondsSinceBoot": rec.start_ns,
            "profilingStartTime": 0.0,
            "profilingEndTime": ms(rec.end_ns),
            "endTime": rec.start_wall_ms + ms(rec.end_ns),
            "processType": 0,
            "stackwalk": 1,
            "debug": false,
            "platform": "Linux",
            "oscpu": format!("Linux {}", host.kernel_release),
            "toolkit": "",
            "CPUName": host.cpu_name,
            "logicalCPUs": host.logical_cpus,
            "physicalCPUs": host.physical_cpus.unwrap_or(host.logical_cpus),
            "mainMemory": host.main_memory,
            "arguments": host.arguments,
            "symbolicated": true,
            "pausedRanges": [],
            "usesOnlyOneStackType": true,
            "sourceCodeIsNotOnSearchfox": true,
            "keepProfileThreadOrder": false,
            "initialVisibleThreads": visible,
            "initialSelectedThreads": selected,
            "sampleUnits": { "time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs" },
            "categories": [
                { "name": "Other", "color": "grey", "subcategories": ["Other"] },
                { "name": "Idle", "color": "transparent", "subcategories": ["Other"] },
                { "name": "User", "color": "yellow", "subcategories": ["Other"] },
                { "name": "Kernel", "color": "orange", "subcategories": ["Other"] },
                { "name": "Off-CPU", "color": "purple", "subcategories": ["Other"] },
                { "name": "I/O", "color": "blue", "subcategories": ["Other"] },
            ],
            "markerSchema": marker_schema(),
            "extra": [{ "label": "sysprof", "entries": extra_entries }],
            "extensions": { "length": 0, "baseURL": [], "id": [], "name": [] },
    });
    Profile {
        meta,
        libs: rec.libs.iter().map(lib_json).collect(),
        threads,
        pages: [],
        counters,
        profiler_overhead: [],
    }
}

/// Tracks shown when a system-wide profile opens, at most: the busiest
/// threads fill a screen; the rest are one click away in the track menu.
const MAX_INITIAL_VISIBLE: usize = 15;

/// What [`initial_threads`] needs to know of a thread.
struct TrackFacts {
    /// None for a per-CPU track.
    pid: Option<u32>,
    main: bool,
    profiler: bool,
    cpu_samples: usize,
}

/// The threads that open visible and the one that opens selected. Left to
/// itself the Firefox Profiler shows and selects the busiest threads, and
/// in a system-wide profile that is often sysprof itself. Visible: every
/// thread of the focus process (the recorded command), the busiest others
/// with CPU samples up to [`MAX_INITIAL_VISIBLE`], and the per-CPU tracks
/// (asked for by name); never the profiler's own threads or the idle task
/// (kept in the profile, shown from the track menu). Selected: the focus
/// process's main thread, else the busiest visible thread.
fn initial_threads(tracks: &[TrackFacts], focus_pid: Option<u32>) -> (Vec<usize>, Vec<usize>) {
    let focus = |t: &TrackFacts| focus_pid.is_some() && t.pid == focus_pid;
    let mut busiest: Vec<usize> = (0..tracks.len())
        .filter(|&i| {
            let t = &tracks[i];
            !t.profiler && t.pid.is_some_and(|p| p != 0) && t.cpu_samples > 0 && !focus(t)
        })
        .collect();
    busiest.sort_by_key(|&i| std::cmp::Reverse(tracks[i].cpu_samples));
    let focused: Vec<usize> = (0..tracks.len()).filter(|&i| focus(&tracks[i])).collect();
    let room = MAX_INITIAL_VISIBLE.saturating_sub(focused.len());
    let mut visible: Vec<usize> = focused.iter().copied().chain(busiest.iter().copied().take(room)).collect();
    visible.extend((0..tracks.len()).filter(|&i| tracks[i].pid.is_none()));
    if visible.is_empty() {
        // Nothing ran: show what there is, still not the profiler.
        visible = (0..tracks.len()).filter(|&i| !tracks[i].profiler).collect();
    }
    visible.sort_unstable();
    let selected = focused
        .iter()
        .copied()
        .find(|&i| tracks[i].main)
        .or_else(|| focused.first().copied())
        .or_else(|| busiest.first().copied())
        .or_else(|| visible.first().copied());
    (visible, selected.into_iter().collect())
}

fn lib_json(l: &LibRecord) -> serde_json::Value {
    serde_json::json!({
        "name": l.name,
        "path": l.path,
        "debugName": l.name,
        "debugPath": l.path,
        "breakpadId": breakpad_id(l.build_id.as_deref()),
        "codeId": l.build_id.as_ref().map(|b| hex(b)),
        "arch": std::env::consts::ARCH,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Breakpad debug id of an ELF build id: its first 16 bytes as a GUID
/// (first three fields byte-swapped), upper-case, with age 0 appended.
pub fn breakpad_id(build_id: Option<&[u8]>) -> String {
    let mut g = [0u8; 16];
    if let Some(b) = build_id {
        let n = b.len().min(16);
        g[..n].copy_from_slice(&b[..n]);
    }
    g[0..4].reverse();
    g[4..6].reverse();
    g[6..8].reverse();
    format!("{}0", hex(&g).to_uppercase())
}

/// A deduplicating string table.
#[derive(Default)]
struct Strings {
    array: Vec<String>,
    index: FxHashMap<String, u32>,
}

impl Strings {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.array.len() as u32;
        self.array.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct FrameTable {
    length: usize,
    address: Vec<i64>,
    inline_depth: Vec<u32>,
    category: Vec<u32>,
    subcategory: Vec<u32>,
    func: Vec<u32>,
    native_symbol: Vec<Option<u32>>,
    #[serde(rename = "innerWindowID")]
    inner_window_id: Vec<Option<u32>>,
    line: Vec<Option<u32>>,
    column: Vec<Option<u32>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct FuncTable {
    length: usize,
    name: Vec<u32>,
    #[serde(rename = "isJS")]
    is_js: Vec<bool>,
    #[serde(rename = "relevantForJS")]
    relevant_for_js: Vec<bool>,
    resource: Vec<i64>,
    file_name: Vec<Option<u32>>,
    line_number: Vec<Option<u32>>,
    column_number: Vec<Option<u32>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct ResourceTable {
    length: usize,
    lib: Vec<Option<u32>>,
    name: Vec<u32>,
    host: Vec<Option<u32>>,
    #[serde(rename = "type")]
    kind: Vec<u32>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct NativeSymbols {
    length: usize,
    lib_index: Vec<u32>,
    address: Vec<u64>,
    name: Vec<u32>,
    function_size: Vec<Option<u64>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct StackTable {
    length: usize,
    prefix: Vec<Option<u32>>,
    frame: Vec<u32>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Samples {
    length: usize,
    stack: Vec<Option<u32>>,
    /// Milliseconds since the previous sample (the first: since the start):
    /// smaller than absolute times, and they compress better.
    time_deltas: Vec<f64>,
    weight: Option<Vec<f64>>,
    weight_type: &'static str,
    #[serde(rename = "threadCPUDelta")]
    thread_cpu_delta: Vec<Option<u64>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Markers {
    length: usize,
    category: Vec<u32>,
    data: Vec<MarkerData>,
    end_time: Vec<Option<f64>>,
    name: Vec<u32>,
    phase: Vec<u8>,
    start_time: Vec<Option<f64>>,
}

/// One marker's payload; `type` names its entry in `meta.markerSchema`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
enum MarkerData {
    OffCpu {
        reason: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_delay: Option<f64>,
        waker: String,
        waker_pid: Option<u32>,
        waker_tid: Option<u32>,
        waker_context: Option<&'static str>,
        cpu_out: u32,
        cpu_in: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
    },
    #[serde(rename = "BlockIo")]
    Io {
        device: String,
        op: String,
        bytes: u64,
        sector: u64,
        queue_time: f64,
        service_time: f64,
        error: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
    },
    OnCpu {
        thread: String,
        pid: u32,
        tid: u32,
    },
}

/// A marker's stack: an index into the thread's stack table.
#[derive(Serialize)]
struct Cause {
    stack: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Thread {
    name: String,
    pid: String,
    tid: u32,
    process_type: &'static str,
    process_name: String,
    /// The executable the process ran (its name is its command name, as ps shows).
    #[serde(skip_serializing_if = "Option::is_none")]
    process_executable: Option<String>,
    is_main_thread: bool,
    process_startup_time: f64,
    process_shutdown_time: Option<f64>,
    register_time: f64,
    unregister_time: Option<f64>,
    paused_ranges: Vec<()>,
    show_markers_in_timeline: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    context_switches: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup: Option<String>,
    frame_table: FrameTable,
    func_table: FuncTable,
    resource_table: ResourceTable,
    native_symbols: NativeSymbols,
    stack_table: StackTable,
    samples: Samples,
    markers: Markers,
    string_array: Vec<String>,
}

/// Per-thread table builder.
#[derive(Default)]
struct ThreadTables {
    strings: Strings,
    frames: FrameTable,
    funcs: FuncTable,
    resources: ResourceTable,
    symbols: NativeSymbols,
    stacks: StackTable,
    resource_of_lib: FxHashMap<u32, u32>,
    func_of: FxHashMap<(i64, u32), u32>,
    symbol_of: FxHashMap<(u32, u64), u32>,
    /// global frame -> first and last thread frame (outermost..innermost inline depth)
    frames_of: FxHashMap<u32, (u32, u32)>,
    stack_of_global: FxHashMap<u32, u32>,
    stack_index: FxHashMap<(Option<u32>, u32), u32>,
}

impl ThreadTables {
    fn resource(&mut self, libs: &[LibRecord], lib: u32) -> i64 {
        if lib == NO_LIB {
            return -1;
        }
        if let Some(&r) = self.resource_of_lib.get(&lib) {
            return r as i64;
        }
        let name = self.strings.intern(&libs[lib as usize].name);
        let r = self.resources.length as u32;
        self.resources.lib.push(Some(lib));
        self.resources.name.push(name);
        self.resources.host.push(None);
        self.resources.kind.push(1); // library
        self.resources.length += 1;
        self.resource_of_lib.insert(lib, r);
        r as i64
    }

    fn func(&mut self, resource: i64, name: &str, file: Option<&str>) -> u32 {
        let name = self.strings.intern(name);
        if let Some(&f) = self.func_of.get(&(resource, name)) {
            return f;
        }
        let file = file.map(|f| self.strings.intern(f));
        let f = self.funcs.length as u32;
        self.funcs.name.push(name);
        self.funcs.is_js.push(false);
        self.funcs.relevant_for_js.push(false);
        self.funcs.resource.push(resource);
        self.funcs.file_name.push(file);
        self.funcs.line_number.push(None);
        self.funcs.column_number.push(None);
        self.funcs.length += 1;
        self.func_of.insert((resource, name), f);
        f
    }

    fn native_symbol(&mut self, lib: u32, address: u64, name: &str, size: Option<u64>) -> Option<u32> {
        if lib == NO_LIB {
            return None;
        }
        if let Some(&s) = self.symbol_of.get(&(lib, address)) {
            return Some(s);
        }
        let name = self.strings.intern(name);
        let s = self.symbols.length as u32;
        self.symbols.lib_index.push(lib);
        self.symbols.address.push(address);
        self.symbols.name.push(name);
        self.symbols.function_size.push(size);
        self.symbols.length += 1;
        self.symbol_of.insert((lib, address), s);
        Some(s)
    }

    fn push_frame(&mut self, address: i64, depth: u32, category: u32, func: u32, sym: Option<u32>, line: Option<u32>) -> u32 {
        let i = self.frames.length as u32;
        self.frames.address.push(address);
        self.frames.inline_depth.push(depth);
        self.frames.category.push(category);
        self.frames.subcategory.push(0);
        self.frames.func.push(func);
        self.frames.native_symbol.push(sym);
        self.frames.inner_window_id.push(None);
        self.frames.line.push(line);
        self.frames.column.push(None);
        self.frames.length += 1;
        i
    }

    /// Thread frames for a global frame: one per inline depth, outermost first.
    fn frames_for(&mut self, rec: &Recording, g: u32, idle: bool) -> (u32, u32) {
        if let Some(&r) = self.frames_of.get(&g) {
            return r;
        }
        let f: &FrameRecord = &rec.frames[g as usize];
        let category = if f.pseudo {
            if f.symbols.funcs.first().is_some_and(|x| x.name.contains("off-CPU")) {
                category::OFF_CPU
            } else {
                category::OTHER
            }
        } else if idle {
            category::IDLE
        } else if f.kernel {
            category::KERNEL
        } else {
            category::USER
        };
        let resource = self.resource(&rec.libs, f.lib);
        let address = if f.pseudo { -1 } else { f.address as i64 };
        let range = if f.symbols.funcs.is_empty() {
            let name = format!("0x{:x}", f.address);
            let func = self.func(resource, &name, None);
            let i = self.push_frame(address, 0, category, func, None, None);
            (i, i)
        } else {
            let outer = &f.symbols.funcs[0];
            // Symbol start in the frame's address space: blazesym's offset is
            // relative to the looked-up address, whatever space that was in.
            let sym_start = f.address.saturating_sub(f.symbols.symbol_offset);
            let sym = if f.pseudo { None } else { self.native_symbol(f.lib, sym_start, &outer.name, f.symbols.symbol_size) };
            let mut first = None;
            let mut last = 0;
            for (depth, fa) in f.symbols.funcs.iter().enumerate() {
                let func = self.func(resource, &fa.name, fa.file.as_deref());
                last = self.push_frame(address, depth as u32, category, func, sym, fa.line);
                first.get_or_insert(last);
            }
            (first.unwrap(), last)
        };
        self.frames_of.insert(g, range);
        range
    }

    fn stack(&mut self, prefix: Option<u32>, frame: u32) -> u32 {
        if let Some(&s) = self.stack_index.get(&(prefix, frame)) {
            return s;
        }
        let s = self.stacks.length as u32;
        self.stacks.prefix.push(prefix);
        self.stacks.frame.push(frame);
        self.stacks.length += 1;
        self.stack_index.insert((prefix, frame), s);
        s
    }

    /// The thread stack for a global stack node (memoized; walks to the root once).
    fn stack_for(&mut self, rec: &Recording, node: u32, idle: bool) -> u32 {
        if let Some(&s) = self.stack_of_global.get(&node) {
            return s;
        }
        let parent = rec.stacks.parent(node);
        let mut prefix = if parent == NO_PARENT { None } else { Some(self.stack_for(rec, parent, idle)) };
        let (first, last) = self.frames_for(rec, rec.stacks.key(node) as u32, idle);
        for frame in first..=last {
            prefix = Some(self.stack(prefix, frame));
        }
        let s = prefix.expect("at least one frame");
        self.stack_of_global.insert(node, s);
        s
    }
}

/// Nanoseconds to whole microseconds, rounded to nearest.
fn micros(ns: i64) -> i64 {
    (ns + 500).div_euclid(1000)
}

fn build_thread(rec: &Recording, p: &ProcessRecord, t: &ThreadRecord, ms: &dyn Fn(u64) -> f64) -> Thread {
    let idle = p.pid == 0;
    let mut tables = ThreadTables::default();
    let on = &t.samples;
    let off = &t.off_cpu;
    let n = on.time_ns.len() + off.time_ns.len();
    let mut samples = Samples {
        length: n,
        weight_type: if rec.off_cpu { "tracing-ms" } else { "samples" },
        ..Default::default()
    };
    samples.stack.reserve(n);
    samples.time_deltas.reserve(n);
    let mut last_us = 0i64;
    let mut push_time = |samples: &mut Samples, ns: u64| {
        let us = micros(ns as i64 - rec.start_ns as i64);
        samples.time_deltas.push((us - last_us) as f64 / 1e3);
        last_us = us;
    };
    samples.thread_cpu_delta.reserve(n);
    let mut weights = rec.off_cpu.then(|| Vec::with_capacity(n));
    // Merge on-CPU and off-CPU samples by time. With off-CPU tracking every
    // sample is weighted in ms: on-CPU ones by the sampling interval,
    // off-CPU ones by the interval's length, so the call tree adds up to time.
    let (mut i, mut j) = (0, 0);
    while i < on.time_ns.len() || j < off.time_ns.len() {
        let take_on = j >= off.time_ns.len() || (i < on.time_ns.len() && on.time_ns[i] <= off.time_ns[j]);
        if take_on {
            samples.stack.push(Some(tables.stack_for(rec, on.stack[i], idle)));
            push_time(&mut samples, on.time_ns[i]);
            samples.thread_cpu_delta.push(Some(on.cpu_delta_ns[i] / 1000));
            if let Some(w) = weights.as_mut() {
                w.push(rec.interval_ms);
            }
            i += 1;
        } else {
            samples.stack.push(Some(tables.stack_for(rec, off.stack[j], idle)));
            push_time(&mut samples, off.time_ns[j]);
            samples.thread_cpu_delta.push(Some(0));
            if let Some(w) = weights.as_mut() {
                w.push(off.duration_ns[j] as f64 / 1e6);
            }
            j += 1;
        }
    }
    samples.weight = weights;
    let markers = build_markers(rec, &t.markers, &mut tables, idle, ms);
    let start = |ns: Option<u64>| ns.map(|v| ms(v).max(0.0)).unwrap_or(0.0);
    let is_main = t.tid == p.pid;
    // The container or service shows in the track's process name; the
    // profiler says what it is, so nobody takes it for the workload.
    let process_name = match p.cgroup.as_deref().and_then(crate::model::cgroup::CgroupIdentity::of_path) {
        _ if p.profiler => format!("{} (the profiler)", p.name),
        Some(label) => format!("{} [{label}]", p.name),
        None => p.name.clone(),
    };
    Thread {
        name: t.name.clone(),
        pid: p.pid.to_string(),
        tid: t.tid,
        process_type: "default",
        process_name,
        process_executable: p.exe.clone(),
        is_main_thread: is_main,
        process_startup_time: start(p.start_ns),
        process_shutdown_time: p.end_ns.map(ms),
        register_time: start(t.start_ns),
        unregister_time: t.end_ns.map(ms),
        paused_ranges: Vec::new(),
        show_markers_in_timeline: !t.markers.is_empty(),
        context_switches: t.switches.map(|(v, i)| serde_json::json!({ "voluntary": v, "involuntary": i })),
        cgroup: p.cgroup.clone(),
        frame_table: tables.frames,
        func_table: tables.funcs,
        resource_table: tables.resources,
        native_symbols: tables.symbols,
        stack_table: tables.stacks,
        samples,
        markers,
        string_array: tables.strings.array,
    }
}

/// One track per CPU: its on-CPU slices as markers, no samples.
fn build_cpu_track(rec: &Recording, cpu: u32, markers: &[MarkerRecord], ms: &dyn Fn(u64) -> f64) -> Thread {
    let mut tables = ThreadTables::default();
    let markers = build_markers(rec, markers, &mut tables, false, ms);
    Thread {
        name: format!("CPU {cpu}"),
        pid: "cpus".to_string(),
        tid: CPU_TRACK_TID_BASE + cpu,
        process_type: "default",
        process_name: "CPUs".to_string(),
        process_executable: None,
        is_main_thread: false,
        process_startup_time: 0.0,
        process_shutdown_time: None,
        register_time: 0.0,
        unregister_time: None,
        paused_ranges: Vec::new(),
        show_markers_in_timeline: true,
        context_switches: None,
        cgroup: None,
        frame_table: tables.frames,
        func_table: tables.funcs,
        resource_table: tables.resources,
        native_symbols: tables.symbols,
        stack_table: tables.stacks,
        samples: Samples { weight_type: "samples", ..Default::default() },
        markers,
        string_array: tables.strings.array,
    }
}

fn build_markers(rec: &Recording, list: &[MarkerRecord], tables: &mut ThreadTables, idle: bool, ms: &dyn Fn(u64) -> f64) -> Markers {
    let mut m = Markers::default();
    let mut sorted: Vec<&MarkerRecord> = list.iter().collect();
    sorted.sort_by_key(|r| marker_start(r));
    for r in sorted {
        let mut cause = |stack: &Option<u32>| stack.map(|node| Cause { stack: tables.stack_for(rec, node, idle) as usize });
        let (name, cat, start, end, data) = match r {
            MarkerRecord::OffCpu { start_ns, end_ns, reason, run_delay_ns, waker, cpus, waker_stack } => (
                format!("Off-CPU: {}", reason.label()),
                category::OFF_CPU,
                *start_ns,
                *end_ns,
                MarkerData::OffCpu {
                    reason: reason.label(),
                    run_delay: run_delay_ns.map(|d| d as f64 / 1e6),
                    waker: waker.as_ref().map(|w| w.label()).unwrap_or_else(|| "—".into()),
                    // An interrupt has no waker task: the task it interrupted is in the label.
                    waker_pid: waker.as_ref().filter(|w| w.interrupt.is_none()).map(|w| w.pid),
                    waker_tid: waker.as_ref().filter(|w| w.interrupt.is_none()).map(|w| w.tid),
                    waker_context: waker.as_ref().map(|w| match w.interrupt {
                        None => "task",
                        Some(crate::model::recording::InterruptKind::Hard) => "hard IRQ",
                        Some(crate::model::recording::InterruptKind::Soft) => "softirq",
                        Some(crate::model::recording::InterruptKind::Unknown) => "unknown (stack lost)",
                    }),
                    cpu_out: cpus.0,
                    cpu_in: cpus.1,
                    cause: cause(waker_stack),
                },
            ),
            MarkerRecord::Io { start_ns, issue_ns, done_ns, device, op, flags, bytes, sector, error, stack } => (
                format!("I/O {} {device}", op.name()),
                category::IO,
                *start_ns,
                *done_ns,
                MarkerData::Io {
                    device: device.clone(),
                    // A flush's preflush flag says nothing more than "flush".
                    op: match crate::model::recording::io_flag_names(if *op == crate::model::recording::IoOp::Flush { flags & !crate::model::recording::io_flags::IO_PREFLUSH } else { *flags }) {
                        f if f.is_empty() => op.name(),
                        f => format!("{} ({f})", op.name()),
                    },
                    bytes: *bytes as u64,
                    sector: *sector,
                    queue_time: issue_ns.saturating_sub(*start_ns) as f64 / 1e6,
                    service_time: done_ns.saturating_sub(*issue_ns) as f64 / 1e6,
                    error: *error,
                    cause: cause(stack),
                },
            ),
            MarkerRecord::OnCpu { start_ns, end_ns, pid, tid, name, kind } => (
                name.clone(),
                match kind {
                    SliceKind::User => category::USER,
                    SliceKind::Kernel => category::KERNEL,
                    SliceKind::Idle => category::IDLE,
                },
                *start_ns,
                *end_ns,
                MarkerData::OnCpu { thread: name.clone(), pid: *pid, tid: *tid },
            ),
        };
        m.name.push(tables.strings.intern(&name));
        m.category.push(cat);
        m.start_time.push(Some(ms(start)));
        m.end_time.push(Some(ms(end)));
        m.phase.push(1); // interval
        m.data.push(data);
        m.length += 1;
    }
    m
}

fn marker_start(r: &MarkerRecord) -> u64 {
    match r {
        MarkerRecord::OffCpu { start_ns, .. } | MarkerRecord::Io { start_ns, .. } | MarkerRecord::OnCpu { start_ns, .. } => *start_ns,
    }
}

fn marker_schema() -> serde_json::Value {
    let display = serde_json::json!(["marker-chart", "marker-table", "timeline-overview"]);
    serde_json::json!([
        {
            "name": "OffCpu",
            "display": display,
            "chartLabel": "{marker.data.reason}",
            "tooltipLabel": "Off-CPU: {marker.data.reason}, woken by {marker.data.waker}",
            "tableLabel": "{marker.data.reason}, woken by {marker.data.waker}, run delay {marker.data.runDelay}",
            "description": "A thread not running: why, who woke it, how long it then waited for a CPU",
            "fields": [
                { "key": "reason", "label": "Reason", "format": "string" },
                { "key": "runDelay", "label": "Run-queue delay", "format": "duration" },
                { "key": "waker", "label": "Woken by", "format": "string" },
                { "key": "wakerPid", "label": "Waker pid", "format": "integer" },
                { "key": "wakerTid", "label": "Waker tid", "format": "integer" },
                { "key": "wakerContext", "label": "Woken from", "format": "string" },
                { "key": "cpuOut", "label": "Left CPU", "format": "integer" },
                { "key": "cpuIn", "label": "Resumed on CPU", "format": "integer" },
            ],
        },
        {
            "name": "BlockIo",
            "display": display,
            "chartLabel": "{marker.data.op} {marker.data.bytes}",
            "tooltipLabel": "{marker.data.op} {marker.data.device}: {marker.data.bytes}",
            "tableLabel": "{marker.data.op} {marker.data.device} sector {marker.data.sector}: {marker.data.bytes}",
            "description": "One block I/O request, from creation to completion",
            "fields": [
                { "key": "device", "label": "Device", "format": "string" },
                { "key": "op", "label": "Operation", "format": "string" },
                { "key": "bytes", "label": "Size", "format": "bytes" },
                { "key": "sector", "label": "Sector", "format": "integer" },
                { "key": "queueTime", "label": "Queue time", "format": "duration" },
                { "key": "serviceTime", "label": "Service time", "format": "duration" },
                { "key": "error", "label": "Error", "format": "integer" },
            ],
        },
        {
            "name": "OnCpu",
            "display": ["marker-chart", "marker-table", "timeline-overview"],
            "chartLabel": "{marker.data.thread}",
            "tooltipLabel": "{marker.data.thread}",
            "tableLabel": "{marker.data.thread}",
            "description": "A thread running on this CPU (at sampling resolution)",
            "fields": [
                { "key": "thread", "label": "Thread", "format": "string" },
                { "key": "pid", "label": "pid", "format": "integer" },
                { "key": "tid", "label": "tid", "format": "integer" },
            ],
        },
    ])
}

fn counter_json(c: &CounterRecord, main_thread_index: usize, ms: &dyn Fn(u64) -> f64) -> serde_json::Value {
    serde_json::json!({
        "name": c.name,
        "category": c.category,
        "description": c.description,
        "color": if c.category == "Memory" { "orange" } else if c.category == "CPU" { "blue" } else { "green" },
        "pid": c.pid.to_string(),
        "mainThreadIndex": main_thread_index,
        "samples": {
            "length": c.time_ns.len(),
            "time": c.time_ns.iter().map(|&t| ms(t)).collect::<Vec<_>>(),
            "count": c.count,
            "number": vec![1; c.time_ns.len()],
        },
    })
}

#[cfg(test)]
mod tests;
