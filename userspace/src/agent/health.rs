//! What the agent says about itself: its counters, the health line on
//! stderr and the Prometheus text of `--metrics`.
//!
//! In: [`AgentCounters`] (updated by the window loop and the store thread),
//! the exporters' counters, the collector's retained sizes and this
//! process's CPU time and RSS. Out: one health line (`sysprof agent: up
//! ...`) and the metrics text, both from the same numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::collector::Collector;
use crate::sys::process::{bpf_map_memory, process_cpu_seconds, rss_bytes};
use crate::units::human_duration;

/// What the agent has done, for the health line (and the metrics endpoint).
#[derive(Debug, Default)]
pub struct AgentCounters {
    /// Windows finished.
    pub windows: AtomicU64,
    /// Windows in the store.
    pub stored: AtomicU64,
    /// Windows the store could not write.
    pub store_failed: AtomicU64,
    /// Windows dropped because the store thread was behind.
    pub dropped: AtomicU64,
    /// On-CPU samples in finished windows.
    pub samples: AtomicU64,
    /// Records lost in the kernel or on the way.
    pub lost: AtomicU64,
    /// Every window's stats summed: the health line says the losses by
    /// kind from them, as `show` does. "269 samples, 700 lost" read as
    /// samples lost, where 700 were off-CPU records and stacks.
    pub losses: std::sync::Mutex<crate::model::recording::RecordingStats>,
    /// Bytes the store holds.
    pub store_bytes: AtomicU64,
    /// Segment files in the store.
    pub store_files: AtomicU64,
    /// Segments removed by retention.
    pub retention_removed: AtomicU64,
    /// What the in-kernel unwinder refused, per uid (process entries and
    /// tables), all time.
    pub unwind_refusals: std::sync::Mutex<Vec<(u32, crate::unwind::kernel::UidRefusals)>>,
    /// Times memory pressure (its cgroup near its limit) cut a window and
    /// dropped the caches.
    pub memory_sheds: AtomicU64,
}

/// One metric: its name, type, help, and samples (labels, value).
type Metric = (&'static str, &'static str, &'static str, Vec<(String, f64)>);

const COUNTER: &str = "counter";
const GAUGE: &str = "gauge";

/// The Prometheus text of the agent's counters.
pub(super) fn metrics_text(
    c: &AgentCounters,
    exporters: &[(&'static str, Arc<crate::export::ExportCounters>)],
) -> String {
    let mut out = String::new();
    let metrics = agent_metrics(c)
        .into_iter()
        .chain(export_metrics(exporters))
        .chain(own_metrics());
    for (name, kind, help, samples) in metrics {
        crate::export::metrics::metric(&mut out, name, kind, help, &samples);
    }
    out
}

/// A sample without labels.
fn unlabelled(v: f64) -> Vec<(String, f64)> {
    vec![(String::new(), v)]
}

/// The window loop's and the store's counters.
fn agent_metrics(c: &AgentCounters) -> Vec<Metric> {
    let v = |a: &AtomicU64| unlabelled(a.load(Ordering::Relaxed) as f64);
    let refusals = c
        .unwind_refusals
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    // The finished windows' unwinding in userspace: the part of the agent's
    // CPU that new processes cost most (ARCHITECTURE 86).
    let unwound = c
        .losses
        .lock()
        .map(|l| (l.unwind.unwinds_here, l.unwind.unwind_ns))
        .unwrap_or_default();
    let per_uid = |f: fn(&crate::unwind::kernel::UidRefusals) -> u64| -> Vec<(String, f64)> {
        refusals
            .iter()
            .map(|(uid, r)| (format!("uid=\"{uid}\""), f(r) as f64))
            .collect()
    };
    vec![
        (
            "sysprof_samples_total",
            COUNTER,
            "On-CPU samples in finished windows.",
            v(&c.samples),
        ),
        (
            "sysprof_lost_records_total",
            COUNTER,
            "Records lost in the kernel or on the way (samples, events, stacks, sideband).",
            v(&c.lost),
        ),
        (
            "sysprof_windows_total",
            COUNTER,
            "Windows finished.",
            v(&c.windows),
        ),
        (
            "sysprof_memory_sheds_total",
            COUNTER,
            "Times the agent's cgroup neared its memory limit: a window cut short, caches dropped.",
            v(&c.memory_sheds),
        ),
        (
            "sysprof_windows_stored_total",
            COUNTER,
            "Windows written to the store.",
            v(&c.stored),
        ),
        (
            "sysprof_windows_store_failed_total",
            COUNTER,
            "Windows the store could not write.",
            v(&c.store_failed),
        ),
        (
            "sysprof_windows_dropped_total",
            COUNTER,
            "Windows dropped because the store was behind.",
            v(&c.dropped),
        ),
        (
            "sysprof_unwind_entries_refused_total",
            COUNTER,
            "Processes the in-kernel unwinder gave no entry (their uid held its share, or evicted for another uid's), by uid: their stacks are unwound from copies.",
            per_uid(|r| r.entries),
        ),
        (
            "sysprof_unwind_tables_refused_total",
            COUNTER,
            "Unwind tables refused or evicted for want of room in the table budget, by the uid they are charged to: their frames are unwound from copies.",
            per_uid(|r| r.tables),
        ),
        (
            "sysprof_stacks_unwound_in_userspace_total",
            COUNTER,
            "Stacks the kernel handed over (a process whose entry or tables were not written yet, JIT code, a refused process) and the agent unwound from their copies.",
            unlabelled(unwound.0 as f64),
        ),
        (
            "sysprof_userspace_unwind_seconds_total",
            COUNTER,
            "Time the agent spent unwinding those copies (the unwinding's own wall clock).",
            unlabelled(unwound.1 as f64 / 1e9),
        ),
        (
            "sysprof_store_bytes",
            GAUGE,
            "Bytes the store holds.",
            v(&c.store_bytes),
        ),
        (
            "sysprof_store_files",
            GAUGE,
            "Segment files in the store.",
            v(&c.store_files),
        ),
    ]
}

/// The exporters' counters, one sample per exporter.
fn export_metrics(exporters: &[(&'static str, Arc<crate::export::ExportCounters>)]) -> Vec<Metric> {
    let per = |f: fn(&crate::export::ExportCounters) -> &AtomicU64| -> Vec<(String, f64)> {
        exporters
            .iter()
            .map(|(n, e)| {
                (
                    format!("exporter=\"{n}\""),
                    f(e).load(Ordering::Relaxed) as f64,
                )
            })
            .collect()
    };
    vec![
        (
            "sysprof_windows_exported_total",
            COUNTER,
            "Windows delivered by each exporter.",
            per(|e| &e.sent),
        ),
        (
            "sysprof_export_failures_total",
            COUNTER,
            "Failed attempts to deliver (each retried).",
            per(|e| &e.failed),
        ),
        (
            "sysprof_windows_export_dropped_total",
            COUNTER,
            "Windows an exporter gave up (backlog full, gone from the store, or refused for good).",
            per(|e| &e.dropped),
        ),
        (
            "sysprof_export_backlog_windows",
            GAUGE,
            "Windows stored and not delivered yet.",
            per(|e| &e.backlog),
        ),
        (
            "sysprof_export_bytes_total",
            COUNTER,
            "Bytes each exporter sent.",
            per(|e| &e.bytes),
        ),
    ]
}

/// What this process costs: CPU time, memory, BPF maps.
fn own_metrics() -> Vec<Metric> {
    let cpu = process_cpu_seconds();
    let rss = rss_bytes().0;
    let (map_bytes, maps) = bpf_map_memory();
    vec![
        (
            "sysprof_agent_cpu_seconds_total",
            COUNTER,
            "CPU time the agent used (user and system).",
            unlabelled(cpu),
        ),
        (
            "sysprof_agent_resident_bytes",
            GAUGE,
            "The agent's resident memory.",
            unlabelled(rss as f64),
        ),
        (
            "sysprof_agent_bpf_map_bytes",
            GAUGE,
            "Kernel memory of the agent's BPF maps (their memlock in /proc/PID/fdinfo): its cgroup pays it, RSS does not show it.",
            unlabelled(map_bytes as f64),
        ),
        (
            "sysprof_agent_bpf_maps",
            GAUGE,
            "BPF maps the agent holds.",
            unlabelled(maps as f64),
        ),
    ]
}

/// The health line's part on what the in-kernel unwinder refused, and whom
/// (empty when nothing was).
fn refusals_part(refusals: &[(u32, crate::unwind::kernel::UidRefusals)]) -> String {
    if refusals.is_empty() {
        return String::new();
    }
    format!(
        "; kernel unwinder refused (stacks copied instead) {}",
        crate::unwind::kernel::refusals_text(refusals)
    )
}

/// "nothing lost", or "lost N samples, M off-CPU/I-O records and K stacks, …".
fn lost_text(c: &AgentCounters) -> String {
    let parts = c
        .losses
        .lock()
        .map(|st| crate::summary::lost_parts(&st, false))
        .unwrap_or_default();
    if parts.is_empty() {
        "nothing lost".to_string()
    } else {
        format!("lost {}", parts.join(", "))
    }
}

/// The health line: what was stored, lost and kept, and what it cost.
pub(super) fn health_line(
    c: &AgentCounters,
    up: Duration,
    cpu_pct: f64,
    collector: &Collector,
    exporters: &[(&'static str, Arc<crate::export::ExportCounters>)],
) -> String {
    let (rss, peak) = rss_bytes();
    let (map_bytes, maps) = bpf_map_memory();
    let (processes, binaries, names) = collector.retained();
    format!(
        "sysprof agent: up {}; windows: {} stored, {} failed, {} dropped; {} samples, {}; store {} in {} files ({} removed by retention); \
         RSS {} (peak {}); BPF maps {} in {maps}; {} memory sheds; CPU {:.3}% of one CPU; tracking {} processes, {} binaries, {} of names",
        human_duration(up),
        c.stored.load(Ordering::Relaxed),
        c.store_failed.load(Ordering::Relaxed),
        c.dropped.load(Ordering::Relaxed),
        c.samples.load(Ordering::Relaxed),
        lost_text(c),
        crate::units::human_bytes(c.store_bytes.load(Ordering::Relaxed)),
        c.store_files.load(Ordering::Relaxed),
        c.retention_removed.load(Ordering::Relaxed),
        crate::units::human_bytes(rss),
        crate::units::human_bytes(peak),
        crate::units::human_bytes(map_bytes),
        c.memory_sheds.load(Ordering::Relaxed),
        cpu_pct,
        processes,
        binaries,
        crate::units::human_bytes(names as u64),
    ) + &refusals_part(&c.unwind_refusals.lock().map(|r| r.clone()).unwrap_or_default())
        + &exporters
        .iter()
        .map(|(n, e)| {
            format!(
                "; {n}: {} sent, {} failed, {} dropped, {} waiting",
                e.sent.load(Ordering::Relaxed),
                e.failed.load(Ordering::Relaxed),
                e.dropped.load(Ordering::Relaxed),
                e.backlog.load(Ordering::Relaxed)
            )
        })
        .collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that what the kernel unwinder refused reaches the metrics, per
    /// uid, and the health line's part; and that nothing is said when
    /// nothing was refused.
    #[test]
    fn unwind_refusals_reach_the_metrics_and_the_health_line() {
        use crate::unwind::kernel::UidRefusals;
        let c = AgentCounters::default();
        assert_eq!(refusals_part(&c.unwind_refusals.lock().unwrap()), "");
        *c.unwind_refusals.lock().unwrap() = vec![
            (
                65534,
                UidRefusals {
                    entries: 845,
                    tables: 2,
                },
            ),
            (
                1000,
                UidRefusals {
                    entries: 0,
                    tables: 1,
                },
            ),
        ];
        let text = metrics_text(&c, &[]);
        assert!(
            text.contains("sysprof_unwind_entries_refused_total{uid=\"65534\"} 845\n"),
            "{text}"
        );
        assert!(
            text.contains("sysprof_unwind_tables_refused_total{uid=\"65534\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("sysprof_unwind_tables_refused_total{uid=\"1000\"} 1\n"),
            "{text}"
        );
        let part = refusals_part(&c.unwind_refusals.lock().unwrap());
        assert_eq!(part, "; kernel unwinder refused (stacks copied instead) uid 65534: 845 processes, 2 tables; uid 1000: 0 processes, 1 tables");
    }

    /// Check the whole metrics text, byte for byte: every metric's help,
    /// type and samples, in order (the agent's own CPU, memory and BPF
    /// maps vary: only their values are left out).
    #[test]
    fn metrics_text_is_every_counter_in_order() {
        use crate::unwind::kernel::UidRefusals;
        let c = AgentCounters::default();
        for (i, a) in [
            &c.samples,
            &c.lost,
            &c.windows,
            &c.memory_sheds,
            &c.stored,
            &c.store_failed,
            &c.dropped,
            &c.store_bytes,
            &c.store_files,
        ]
        .into_iter()
        .enumerate()
        {
            a.store(100 + i as u64, Ordering::Relaxed);
        }
        *c.unwind_refusals.lock().unwrap() = vec![(
            1000,
            UidRefusals {
                entries: 3,
                tables: 4,
            },
        )];
        {
            let mut l = c.losses.lock().unwrap();
            l.unwind.unwinds_here = 2000;
            l.unwind.unwind_ns = 26_000_000;
        }
        let exporters: Vec<(&'static str, Arc<crate::export::ExportCounters>)> = ["otlp", "pprof"]
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let e = crate::export::ExportCounters::default();
                for (j, a) in [&e.sent, &e.failed, &e.dropped, &e.backlog, &e.bytes]
                    .into_iter()
                    .enumerate()
                {
                    a.store((10 * i + j) as u64, Ordering::Relaxed);
                }
                (n, Arc::new(e))
            })
            .collect();
        let text = metrics_text(&c, &exporters);
        let own = text
            .find("# HELP sysprof_agent_cpu_seconds_total")
            .expect("the agent's own metrics come last");
        let (counters, own) = text.split_at(own);
        assert_eq!(counters, EXPECTED);
        let own: Vec<&str> = own
            .lines()
            .map(|l| {
                if l.starts_with('#') {
                    l
                } else {
                    l.split(' ').next().unwrap()
                }
            })
            .collect();
        assert_eq!(own, OWN);
    }

    /// What `metrics_text_is_every_counter_in_order` expects, but the
    /// agent's own metrics.
    const EXPECTED: &str = "\
# HELP sysprof_samples_total On-CPU samples in finished windows.\n\
# TYPE sysprof_samples_total counter\n\
sysprof_samples_total 100\n\
# HELP sysprof_lost_records_total Records lost in the kernel or on the way (samples, events, stacks, sideband).\n\
# TYPE sysprof_lost_records_total counter\n\
sysprof_lost_records_total 101\n\
# HELP sysprof_windows_total Windows finished.\n\
# TYPE sysprof_windows_total counter\n\
sysprof_windows_total 102\n\
# HELP sysprof_memory_sheds_total Times the agent's cgroup neared its memory limit: a window cut short, caches dropped.\n\
# TYPE sysprof_memory_sheds_total counter\n\
sysprof_memory_sheds_total 103\n\
# HELP sysprof_windows_stored_total Windows written to the store.\n\
# TYPE sysprof_windows_stored_total counter\n\
sysprof_windows_stored_total 104\n\
# HELP sysprof_windows_store_failed_total Windows the store could not write.\n\
# TYPE sysprof_windows_store_failed_total counter\n\
sysprof_windows_store_failed_total 105\n\
# HELP sysprof_windows_dropped_total Windows dropped because the store was behind.\n\
# TYPE sysprof_windows_dropped_total counter\n\
sysprof_windows_dropped_total 106\n\
# HELP sysprof_unwind_entries_refused_total Processes the in-kernel unwinder gave no entry (their uid held its share, or evicted for another uid's), by uid: their stacks are unwound from copies.\n\
# TYPE sysprof_unwind_entries_refused_total counter\n\
sysprof_unwind_entries_refused_total{uid=\"1000\"} 3\n\
# HELP sysprof_unwind_tables_refused_total Unwind tables refused or evicted for want of room in the table budget, by the uid they are charged to: their frames are unwound from copies.\n\
# TYPE sysprof_unwind_tables_refused_total counter\n\
sysprof_unwind_tables_refused_total{uid=\"1000\"} 4\n\
# HELP sysprof_stacks_unwound_in_userspace_total Stacks the kernel handed over (a process whose entry or tables were not written yet, JIT code, a refused process) and the agent unwound from their copies.\n\
# TYPE sysprof_stacks_unwound_in_userspace_total counter\n\
sysprof_stacks_unwound_in_userspace_total 2000\n\
# HELP sysprof_userspace_unwind_seconds_total Time the agent spent unwinding those copies (the unwinding's own wall clock).\n\
# TYPE sysprof_userspace_unwind_seconds_total counter\n\
sysprof_userspace_unwind_seconds_total 0.026\n\
# HELP sysprof_store_bytes Bytes the store holds.\n\
# TYPE sysprof_store_bytes gauge\n\
sysprof_store_bytes 107\n\
# HELP sysprof_store_files Segment files in the store.\n\
# TYPE sysprof_store_files gauge\n\
sysprof_store_files 108\n\
# HELP sysprof_windows_exported_total Windows delivered by each exporter.\n\
# TYPE sysprof_windows_exported_total counter\n\
sysprof_windows_exported_total{exporter=\"otlp\"} 0\n\
sysprof_windows_exported_total{exporter=\"pprof\"} 10\n\
# HELP sysprof_export_failures_total Failed attempts to deliver (each retried).\n\
# TYPE sysprof_export_failures_total counter\n\
sysprof_export_failures_total{exporter=\"otlp\"} 1\n\
sysprof_export_failures_total{exporter=\"pprof\"} 11\n\
# HELP sysprof_windows_export_dropped_total Windows an exporter gave up (backlog full, gone from the store, or refused for good).\n\
# TYPE sysprof_windows_export_dropped_total counter\n\
sysprof_windows_export_dropped_total{exporter=\"otlp\"} 2\n\
sysprof_windows_export_dropped_total{exporter=\"pprof\"} 12\n\
# HELP sysprof_export_backlog_windows Windows stored and not delivered yet.\n\
# TYPE sysprof_export_backlog_windows gauge\n\
sysprof_export_backlog_windows{exporter=\"otlp\"} 3\n\
sysprof_export_backlog_windows{exporter=\"pprof\"} 13\n\
# HELP sysprof_export_bytes_total Bytes each exporter sent.\n\
# TYPE sysprof_export_bytes_total counter\n\
sysprof_export_bytes_total{exporter=\"otlp\"} 4\n\
sysprof_export_bytes_total{exporter=\"pprof\"} 14\n\
";

    /// The agent's own metrics, values left out.
    const OWN: &[&str] = &[
        "# HELP sysprof_agent_cpu_seconds_total CPU time the agent used (user and system).",
        "# TYPE sysprof_agent_cpu_seconds_total counter",
        "sysprof_agent_cpu_seconds_total",
        "# HELP sysprof_agent_resident_bytes The agent's resident memory.",
        "# TYPE sysprof_agent_resident_bytes gauge",
        "sysprof_agent_resident_bytes",
        "# HELP sysprof_agent_bpf_map_bytes Kernel memory of the agent's BPF maps (their memlock in /proc/PID/fdinfo): its cgroup pays it, RSS does not show it.",
        "# TYPE sysprof_agent_bpf_map_bytes gauge",
        "sysprof_agent_bpf_map_bytes",
        "# HELP sysprof_agent_bpf_maps BPF maps the agent holds.",
        "# TYPE sysprof_agent_bpf_maps gauge",
        "sysprof_agent_bpf_maps",
    ];
}
