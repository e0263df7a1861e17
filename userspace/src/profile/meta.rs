//! The profile's `meta` and its global parts: the machine, the libraries,
//! the counters.
//!
//! In: the recording, the machine's facts ([`HostInfo`]), the tracks that
//! open visible and selected. Out: [`Meta`], `libs` and `counters` as the
//! format wants them, and the Breakpad id of a build id.

use crate::model::recording::{CounterRecord, LibRecord, Recording};
use crate::sys::hex::hex;

use super::schema::{Category, Meta};
use super::PREPROCESSED_PROFILE_VERSION;

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
    /// Whose binaries' warnings the reader wants listed: root's, and the
    /// user's who ran sysprof (through sudo, theirs too); others are counted.
    pub viewers: Vec<u32>,
}

impl HostInfo {
    /// Read the running machine's facts.
    pub fn current(arguments: String) -> HostInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_name = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
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
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| kb * 1024)
        });
        HostInfo {
            cpu_name,
            logical_cpus: crate::bpf::online_cpus()
                .map(|c| c.len() as u32)
                .unwrap_or(1),
            physical_cpus: (!cores.is_empty()).then_some(cores.len() as u32),
            main_memory,
            kernel_release: crate::error::kernel_release(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            arguments,
            viewers: current_viewers(),
        }
    }
}

/// Root, the effective user, and the user sudo was run by.
fn current_viewers() -> Vec<u32> {
    // SAFETY: geteuid cannot fail.
    let mut uids = vec![0, unsafe { libc::geteuid() }];
    if let Some(uid) = std::env::var("SUDO_UID").ok().and_then(|u| u.parse().ok()) {
        uids.push(uid);
    }
    uids.dedup();
    uids
}

/// `meta`: the recording's times, the machine, the categories and marker
/// schema, and what the recording lost or warned of.
pub(super) fn build_meta(
    rec: &Recording,
    host: &HostInfo,
    visible: Vec<usize>,
    selected: Vec<usize>,
    ms: &dyn Fn(u64) -> f64,
) -> Meta {
    let mut extra_entries: Vec<serde_json::Value> = Vec::new();
    for n in &rec.notes {
        extra_entries.push(serde_json::json!({ "label": "Note", "format": "string", "value": n }));
    }
    let (shown, others) = super::warnings::split(&rec.warnings, &host.viewers);
    for w in shown {
        extra_entries
            .push(serde_json::json!({ "label": "Warning", "format": "string", "value": w }));
    }
    if others > 0 {
        extra_entries.push(serde_json::json!({ "label": "Warnings about other users' binaries", "format": "integer", "value": others }));
    }
    let st = &rec.stats;
    extra_entries.push(serde_json::json!({ "label": "Samples lost", "format": "integer", "value": st.lost_samples }));
    extra_entries.push(serde_json::json!({ "label": "Scheduler/I/O records lost", "format": "integer", "value": st.lost_events }));
    extra_entries.push(serde_json::json!({ "label": "Stacks lost", "format": "integer", "value": st.lost_stacks + st.stacks_not_kept }));
    extra_entries.push(serde_json::json!({ "label": "Processes that lived and died unsampled", "format": "integer", "value": st.processes_without_data }));
    let category = |name: &str, color: &'static str| Category {
        color: color.into(),
        name: name.to_string(),
        subcategories: vec!["Other".into()],
    };
    Meta {
        version: 24,
        preprocessed_profile_version: PREPROCESSED_PROFILE_VERSION,
        product: format!("sysprof {} on {}", env!("CARGO_PKG_VERSION"), host.hostname),
        interval: rec.interval_ms,
        start_time: rec.start_wall_ms,
        start_time_as_clock_monotonic_nanoseconds_since_boot: rec.start_ns,
        profiling_start_time: Some(0.0),
        profiling_end_time: Some(ms(rec.end_ns)),
        end_time: rec
            .main_process_ended
            .then(|| rec.start_wall_ms + ms(rec.end_ns)),
        process_type: 0,
        stackwalk: 1,
        debug: false,
        platform: "Linux".into(),
        oscpu: format!("Linux {}", host.kernel_release),
        toolkit: "".into(),
        cpu_name: host.cpu_name.clone(),
        logical_cpus: host.logical_cpus,
        physical_cpus: host.physical_cpus.unwrap_or(host.logical_cpus),
        main_memory: host.main_memory,
        arguments: host.arguments.clone(),
        symbolicated: true,
        paused_ranges: Vec::new(),
        uses_only_one_stack_type: true,
        source_code_is_not_on_searchfox: true,
        keep_profile_thread_order: false,
        initial_visible_threads: visible,
        initial_selected_threads: selected,
        sample_units: serde_json::json!({ "time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs" }),
        // In the order of `super::category`.
        categories: vec![
            category("Other", "grey"),
            category("Idle", "transparent"),
            category("User", "yellow"),
            category("Kernel", "orange"),
            category("Off-CPU", "purple"),
            category("I/O", "blue"),
            category("Python", "green"),
            Category {
                // Its frames' subcategory says which (`super::category::JAVA_*`).
                subcategories: vec!["Other".into(), "Interpreted".into(), "Compiled".into()],
                ..category("Java", "lightblue")
            },
            category("JavaScript", "magenta"),
            category("PHP", "brown"),
            category("Perl", "lightred"),
            category("Ruby", "red"),
        ],
        marker_schema: super::markers::marker_schema(),
        extra: serde_json::json!([{ "label": "sysprof", "entries": extra_entries }]),
        extensions: serde_json::json!({ "length": 0, "baseURL": [], "id": [], "name": [] }),
    }
}

pub(super) fn lib_json(l: &LibRecord) -> serde_json::Value {
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

/// One counter as the front end reads it, with its own `display`: the
/// upgraders from version 55 fill `display` (graph, label, tooltip rows)
/// only where it is missing, and their defaults are what a user tripped
/// over (every disk counter labelled "Bandwidth" with "read/write operations
/// since the previous sample: 1", CPU shown as a bare "Process CPU: 30").
/// No `number` column: it is optional (v43) and the kernel gives no count
/// of operations per sample. A percentage counter is written as CPU
/// milliseconds per interval, which the front end's `rate` divides back
/// into the kernel's own share (its `percent` format takes a ratio).
/// `main_thread` is the thread its track hangs under and `pid` that
/// track's process.
pub(super) fn counter_json(
    c: &CounterRecord,
    pid: &str,
    main_thread: usize,
    interval_ms: f64,
    ms: &dyn Fn(u64) -> f64,
) -> serde_json::Value {
    let time: Vec<f64> = c.time_ns.iter().map(|&t| ms(t)).collect();
    let kind = CounterKind::of(c);
    let count: Vec<f64> = match kind {
        CounterKind::CpuShare { .. } => (0..c.count.len())
            .map(|i| {
                // The interval the front end divides by: the written times'
                // difference (the first sample's is the profile's interval).
                let dt = if i == 0 {
                    interval_ms
                } else {
                    time[i] - time[i - 1]
                };
                c.count[i] / 100.0 * dt
            })
            .collect(),
        _ => c.count.clone(),
    };
    let mut samples = serde_json::json!({
        "length": c.time_ns.len(),
        "time": time,
        "count": count,
    });
    // A level's own value at each sample, for the tooltip's "In use" (the
    // front end draws the changes accumulated from the lowest point in view).
    if let (CounterKind::Memory { .. }, Some(base)) = (kind, c.base) {
        let mut level = base;
        let number: Vec<f64> = c
            .count
            .iter()
            .map(|d| {
                level += d;
                level.max(0.0).round()
            })
            .collect();
        samples["number"] = number.into();
    }
    serde_json::json!({
        "name": c.name,
        "category": c.category,
        "description": c.description,
        "pid": pid,
        "mainThreadIndex": main_thread,
        "samples": samples,
        "display": kind.display(c),
    })
}

/// Whether a counter's track would draw anything: the front end zeroes the
/// first sample (it has no interval), draws a memory graph whose changes
/// are all zero as nothing and a rate of zero as nothing. A `show` of a
/// short range keeps one or two samples of a process's counters: blank
/// tracks, which are left out.
pub(super) fn counter_draws_something(c: &CounterRecord) -> bool {
    c.count.len() >= 2 && c.count[1..].iter().any(|&v| v != 0.0)
}

/// What a counter measures, for how it is drawn and told.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CounterKind {
    /// A share of CPU time in % ("CPU usage" of the machine, "Process CPU").
    CpuShare { machine: bool },
    /// A change in bytes in use ("Memory", "RSS").
    Memory { machine: bool },
    /// Bytes moved per interval ("Disk read: vda", "Disk write: vda").
    Transfer { write: bool },
    /// Events per interval (cycles, instructions), or anything else.
    Events,
}

impl CounterKind {
    fn of(c: &CounterRecord) -> CounterKind {
        let machine = c.pid == 0;
        match c.category.as_str() {
            "CPU" if c.name == "CPU usage" || c.name == "Process CPU" => {
                CounterKind::CpuShare { machine }
            }
            "Memory" => CounterKind::Memory { machine },
            "Bandwidth" => CounterKind::Transfer {
                write: c.name.starts_with("Disk write"),
            },
            _ => CounterKind::Events,
        }
    }

    /// `display` as the front end's `CounterDisplayConfig` (format 62 on;
    /// carried as is through the upgraders from 55).
    fn display(self, c: &CounterRecord) -> serde_json::Value {
        let (graph, color, weight, label, unit, rows) = match self {
            CounterKind::CpuShare { machine: true } => (
                "line-rate",
                "blue",
                10,
                "CPU usage (all CPUs)".to_string(),
                "percent",
                vec![tooltip_row("rate", "percent", "Busy share of all CPUs")],
            ),
            CounterKind::CpuShare { machine: false } => (
                "line-rate",
                "blue",
                10,
                "CPU".to_string(),
                "percent",
                vec![tooltip_row("rate", "percent", "CPU (100% = one CPU)")],
            ),
            CounterKind::Memory { machine } => (
                "line-accumulated",
                "orange",
                20,
                if machine {
                    "Memory in use".to_string()
                } else {
                    "Memory (RSS)".to_string()
                },
                "bytes",
                memory_rows(c, machine),
            ),
            CounterKind::Transfer { write } => {
                let (verb, past) = if write {
                    ("Write", "Written")
                } else {
                    ("Read", "Read")
                };
                (
                    "line-rate",
                    if write { "red" } else { "teal" },
                    if write { 31 } else { 30 },
                    c.name.clone(),
                    "bytes",
                    transfer_rows(verb, past),
                )
            }
            CounterKind::Events => (
                "line-rate",
                "grey",
                40,
                c.name.clone(),
                "",
                vec![
                    tooltip_row("rate", "number", &format!("{} per ms", c.name)),
                    tooltip_row("count", "number", "Since the previous reading"),
                ],
            ),
        };
        serde_json::json!({
            "graphType": graph,
            "unit": unit,
            "color": color,
            "markerSchemaLocation": null,
            "sortWeight": weight,
            "label": label,
            "tooltipRows": rows,
        })
    }
}

/// One row of a counter's tooltip: the value of `source` in `unit`.
fn tooltip_row(source: &str, unit: &str, label: &str) -> serde_json::Value {
    serde_json::json!({ "type": "value", "source": source, "format": { "unit": unit }, "label": label })
}

/// A memory counter's tooltip rows.
fn memory_rows(c: &CounterRecord, machine: bool) -> Vec<serde_json::Value> {
    // The level itself where it is known (`number`, see counter_json); the
    // drawn line is its change from the lowest point in view, said as such.
    let mut rows = Vec::new();
    if c.base.is_some() {
        rows.push(tooltip_row(
            "sample-number",
            "bytes",
            if machine { "In use" } else { "Resident" },
        ));
    }
    rows.push(tooltip_row(
        "accumulated",
        "bytes",
        "Above the lowest point in view",
    ));
    rows.push(tooltip_row(
        "count",
        "bytes",
        "Change since the previous reading",
    ));
    rows.push(tooltip_row("count-range", "bytes", "Range in view"));
    rows
}

/// A disk counter's tooltip rows (`verb` "Read" or "Write", `past` what
/// was moved: "Read", "Written").
fn transfer_rows(verb: &str, past: &str) -> Vec<serde_json::Value> {
    let mut selection = tooltip_row(
        "selection-total",
        "bytes",
        &format!("{past} in the selection"),
    );
    selection["requiresPreviewSelection"] = serde_json::json!(true);
    vec![
        tooltip_row("rate", "bytes-per-second", &format!("{verb} speed")),
        serde_json::json!({ "type": "separator" }),
        tooltip_row("accumulated", "bytes", &format!("{past} up to this time")),
        tooltip_row(
            "count-range",
            "bytes",
            &format!("{past} in the visible range"),
        ),
        selection,
    ]
}
