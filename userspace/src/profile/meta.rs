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

/// `meta`: the recording's times, the machine, the categories and marker
/// schema, and what the recording lost or warned of.
pub(super) fn build_meta(rec: &Recording, host: &HostInfo, visible: Vec<usize>, selected: Vec<usize>, ms: &dyn Fn(u64) -> f64) -> Meta {
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
    let category = |name: &str, color: &'static str| Category { color: color.into(), name: name.to_string(), subcategories: vec!["Other".into()] };
    Meta {
        version: 24,
        preprocessed_profile_version: PREPROCESSED_PROFILE_VERSION,
        product: format!("sysprof {} on {}", env!("CARGO_PKG_VERSION"), host.hostname),
        interval: rec.interval_ms,
        start_time: rec.start_wall_ms,
        start_time_as_clock_monotonic_nanoseconds_since_boot: rec.start_ns,
        profiling_start_time: Some(0.0),
        profiling_end_time: Some(ms(rec.end_ns)),
        end_time: rec.start_wall_ms + ms(rec.end_ns),
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

pub(super) fn counter_json(c: &CounterRecord, main_thread_index: usize, ms: &dyn Fn(u64) -> f64) -> serde_json::Value {
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

