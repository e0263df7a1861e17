//! `sysprof agent`: the capture session of `record`, cut into windows
//! forever, each window finished and handed to the store (and exporters).
//!
//! In: [`AgentArgs`] (and the config file, [`config`]). Out: a segment in
//! the store every `--window` seconds, a health line every few minutes,
//! exit 0 on SIGTERM/SIGINT once the window in progress is stored; exit 2
//! with one line when the configuration or the store is unusable.
//!
//! Flow: one thread runs the event loop ([`CaptureSession::run_bounded`]) and, at
//! each window's end (aligned to the wall clock, so windows of all hosts
//! line up), cuts the capture and finishes the window in the collector
//! (replay, unwinding, names from caches that outlive the window). The
//! finished [`Recording`] goes to the store thread over a small bounded
//! channel: encoding, compression, fsync, retention and compaction never
//! delay draining the rings, and a store that cannot keep up drops windows
//! (counted, said) rather than grow memory. Nothing of a finished window
//! stays in the collector ([`crate::collector`] forgets what ended). What
//! the agent says about itself (health line, metrics) is in `health.rs`.

pub mod config;
mod health;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

use crate::binaries::elf::ElfLimits;
use crate::capture::{CaptureOptions, CaptureSession, Polling};
use crate::cli::AgentArgs;
use crate::collector::{Collector, CollectorOptions, PidFilter, WindowRange};
use crate::error::RecordError;
use crate::log::ErrorLog;
use crate::model::recording::Recording;
use crate::store::segment::WindowSpan;
use crate::store::Store;
use crate::sys::clock::clock_anchor;
use crate::sys::process::{configure_malloc, process_cpu_seconds, release_freed_memory, rss_bytes};
use crate::units::human_duration;
use config::AgentConfig;
pub use health::AgentCounters;
use health::{health_line, metrics_text};

/// Records (sideband events, samples, intervals, requests) one window may
/// hold before it is ended early: each costs about 500 bytes while the
/// window is open and finished (measured: a fork storm of 1,600 processes a
/// second filled 10-s windows with 110,000 records and took the agent's
/// RSS past 110 MB; ended at 40,000 records, 71 MB).
const MAX_WINDOW_RECORDS: usize = 20_000;

/// How often the agent reads its cgroup's memory, and at what share of the
/// limit it sheds (cuts the window, drops its caches): at most once per
/// [`SHED_INTERVAL`], so memory the caches do not hold (the BPF maps) cannot
/// cut every window.
const PRESSURE_CHECK: Duration = Duration::from_secs(1);
const SHED_AT_PERCENT: u64 = 85;
const SHED_INTERVAL: Duration = Duration::from_secs(30);

/// [`SHED_AT_PERCENT`], or `SYSPROF_SHED_AT_PERCENT` (1-100): the
/// integration test sets it low to see a shed without starving the agent.
fn shed_at_percent() -> u64 {
    std::env::var("SYSPROF_SHED_AT_PERCENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|p| (1..=100).contains(p))
        .unwrap_or(SHED_AT_PERCENT)
}
/// Windows an exporter may owe before it gives up the oldest: a day of
/// 10-s windows (they wait on disk, in the store, not in memory).
const EXPORT_BACKLOG_WINDOWS: usize = 8640;
/// At shutdown, how long exporters may go on sending what is stored.
const EXPORT_GRACE: Duration = Duration::from_secs(5);
/// Windows waiting for the store thread at most; more are dropped.
const STORE_QUEUE: usize = 4;
/// Windows in a row without a new address after which the symbolizer's
/// parsed binaries are freed.
const SYMBOLIZER_IDLE_WINDOWS: u32 = 3;

/// Run the agent; returns its exit status.
pub fn run(args: AgentArgs) -> Result<i32, RecordError> {
    let cfg = AgentConfig::resolve(&args).map_err(|e| RecordError::BadOption(e.into()))?;
    configure_malloc();
    let store = Store::open(&cfg.store, true).map_err(|e| RecordError::Store {
        source: e.into(),
        hint: "give another with --store",
    })?;
    crate::sys::process::raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RecordError::EventLoop)?;
    runtime.block_on(Box::pin(agent(cfg, store)))
}

/// The next multiple of `window` on the wall clock after `now_ms`, at least
/// half a window away (a first window shorter than that is merged into the next).
fn next_boundary_ms(now_ms: f64, window: Duration) -> f64 {
    let w = window.as_secs_f64() * 1e3;
    let mut b = (now_ms / w).ceil() * w;
    if b - now_ms < w / 2.0 {
        b += w;
    }
    b
}

async fn agent(cfg: AgentConfig, store: Store) -> Result<i32, RecordError> {
    let stale = store.remove_stale_temporaries();
    let marker_min_ns = cfg.sampling.off_cpu_threshold_ns();
    let mut collector = Collector::new(
        PidFilter::All,
        CollectorOptions {
            marker_min_ns,
            per_cpu: false,
            off_cpu: cfg.off_cpu,
            debuginfod: false,
            dwarf: cfg.sampling.call_graph.dwarf(),
            keep_short_lived: true,
            elf_limits: ElfLimits {
                max_dwarf_total_bytes: AGENT_MAX_DWARF_BYTES,
                dwarf: cfg.dwarf_names,
                ..ElfLimits::default()
            },
            jvm_attach: cfg.jvm_attach,
            table_workers: 1,
        },
    );
    let capture = CaptureOptions {
        sample_first: true,
        frequency: cfg.frequency,
        target_tgid: 0,
        stack_copy: cfg.sampling.stack_copy(),
        kernel_unwind_rows: cfg.sampling.kernel_unwind_rows(),
        kernel_unwind_processes: crate::unwind::kernel::DEFAULT_PROCESS_ENTRIES,
        off_cpu: cfg.off_cpu,
        io: cfg.io,
        off_cpu_min_ns: marker_min_ns,
        snapshot_all: true,
        target_pids: Vec::new(),
        polling: Polling::AGENT,
    };
    let labels = crate::export::Labels::local();
    let mut exporters: Vec<Box<dyn crate::export::Exporter>> = Vec::new();
    let e = &cfg.export;
    if let Some(dir) = &e.pprof_dir {
        exporters.push(Box::new(
            crate::export::PprofDir::new(dir, labels.clone(), cfg.retain_size, cfg.retain_age)
                .map_err(|e| RecordError::BadOption(e.into()))?,
        ));
    }
    if let Some(url) = &e.otlp_endpoint {
        exporters.push(Box::new(
            crate::export::otlp::OtlpClient::new(
                url,
                e.otlp_ca.as_deref(),
                &e.otlp_headers,
                labels.clone(),
            )
            .map_err(|e| RecordError::BadOption(e.into()))?,
        ));
    }
    if let Some(url) = &e.pyroscope_url {
        exporters.push(Box::new(
            crate::export::pyroscope::PyroscopeClient::new(
                url,
                e.pyroscope_basic.clone(),
                e.pyroscope_token.clone(),
                e.pyroscope_tenant.clone(),
                labels.clone(),
            )
            .map_err(|e| RecordError::BadOption(e.into()))?,
        ));
    }
    let counters = Arc::new(AgentCounters::default());
    let feed = Arc::new(crate::export::StoreFeed::default());
    let started_wall = clock_anchor().0;
    let mut deliveries = Vec::new();
    let mut export_counters: Vec<(&'static str, Arc<crate::export::ExportCounters>)> = Vec::new();
    for exporter in exporters {
        let c = Arc::new(crate::export::ExportCounters::default());
        export_counters.push((exporter.name(), c.clone()));
        deliveries.push(crate::export::spawn_delivery(
            exporter,
            store.clone(),
            feed.clone(),
            c,
            started_wall,
            EXPORT_BACKLOG_WINDOWS,
        ));
    }
    if let Some(addr) = cfg.export.metrics {
        let (c, ex) = (counters.clone(), export_counters.clone());
        let render: crate::export::metrics::Render = Arc::new(move || metrics_text(&c, &ex));
        crate::export::metrics::serve(addr, render)
            .map_err(|e| RecordError::BadOption(e.into()))?;
    }
    let mut session = CaptureSession::start(&capture, &mut collector)?;
    // Loading parsed the kernel's BTF (tens of MB, freed since).
    release_freed_memory();
    let (store_tx, store_thread) =
        spawn_store_thread(store.clone(), cfg.clone(), counters.clone(), feed.clone());
    eprintln!(
        "sysprof agent: recording every process at {} Hz into {} (windows of {} s; keeping {} or {}, whichever is less){}",
        cfg.frequency,
        crate::escape::path(store.dir()),
        cfg.window.as_secs_f64(),
        crate::units::human_bytes(cfg.retain_size),
        human_duration(cfg.retain_age),
        if stale > 0 { format!("; removed {stale} unfinished files of a previous run") } else { String::new() },
    );

    let mut sigint = signal(SignalKind::interrupt()).map_err(RecordError::Signals)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(RecordError::Signals)?;
    let started = Instant::now();
    let mut last_health = Instant::now();
    let mut errors = ErrorLog::default();
    let interval_ms = 1000.0 / cfg.frequency as f64;
    let (mut window_start_ns, mut window_start_wall) = (session.start_ns, session.start_wall_ms);
    let mut boundary_ms = next_boundary_ms(window_start_wall, cfg.window);
    let mut cpu_at_health = process_cpu_seconds();
    let memory = crate::sys::cgroup_memory::CgroupMemory::of_self();
    let shed_percent = shed_at_percent();
    let mut last_shed: Option<Instant> = None;
    loop {
        // Near its cgroup's limit (the BPF maps' kernel memory included),
        // the agent cuts the window (its records stored, not held) and drops
        // its caches rather than be OOM-killed with the window in progress.
        let pressured = std::cell::Cell::new(None);
        let pressure = async {
            let Some(m) = memory
                .as_ref()
                .filter(|_| last_shed.is_none_or(|t| t.elapsed() >= SHED_INTERVAL))
            else {
                return std::future::pending().await;
            };
            loop {
                tokio::time::sleep(PRESSURE_CHECK).await;
                if let Some(r) = m
                    .reading()
                    .filter(|r| r.working_set > r.limit / 100 * shed_percent)
                {
                    pressured.set(Some(r));
                    return;
                }
            }
        };
        // Sleep on the monotonic clock until the wall-clock boundary.
        let (now_wall, _) = clock_anchor();
        let wait = Duration::from_secs_f64(((boundary_ms - now_wall) / 1e3).max(0.0));
        let deadline = tokio::time::Instant::now() + wait;
        let ended = session
            .run_bounded(
                &mut collector,
                async {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => false,
                        _ = sigint.recv() => true,
                        _ = sigterm.recv() => true,
                        _ = pressure => false,
                    }
                },
                MAX_WINDOW_RECORDS,
                None,
                |_, _| {},
            )
            .await?;
        // None: the window is full before its time (a fork storm); it ends
        // now and the next one runs to the same boundary.
        let (stop, early) = match ended {
            Some(stop) => (stop, pressured.get().is_some()),
            None => (false, true),
        };
        let timing = std::env::var_os("SYSPROF_TIMING")
            .is_some()
            .then(|| (Instant::now(), process_cpu_seconds()));
        let end_ns = session.cut(&mut collector);
        let (wall_now, mono_now) = clock_anchor();
        let end_wall = wall_now - (mono_now.saturating_sub(end_ns)) as f64 / 1e6;
        let range = WindowRange {
            start_ns: window_start_ns,
            end_ns,
            start_wall_ms: window_start_wall,
            interval_ms,
            continuous: true,
        };
        let rec = collector.finish_window(range);
        collector.release_symbolizer_if_idle(SYMBOLIZER_IDLE_WINDOWS);
        if let Some((at, cpu)) = timing {
            let (rss, peak) = rss_bytes();
            eprintln!(
                "sysprof agent: timing: window finished in {:.1} ms ({:.1} ms of CPU); {} processes; RSS {:.1} MB (peak {:.1} MB)",
                at.elapsed().as_secs_f64() * 1e3,
                (process_cpu_seconds() - cpu) * 1e3,
                rec.processes.len(),
                rss as f64 / 1048576.0,
                peak as f64 / 1048576.0
            );
        }
        counters.windows.fetch_add(1, Ordering::Relaxed);
        counters
            .samples
            .fetch_add(rec.stats.samples_kept, Ordering::Relaxed);
        counters
            .lost
            .fetch_add(rec.stats.lost_total(), Ordering::Relaxed);
        if let Ok(mut l) = counters.losses.lock() {
            crate::model::merge::add_stats(&mut l, &rec.stats);
        }
        if let Ok(mut r) = counters.unwind_refusals.lock() {
            *r = collector.kernel_refusals();
        }
        if cfg.verbose {
            eprintln!(
                "sysprof agent: window {:.0}-{:.0}: {}",
                window_start_wall,
                end_wall,
                crate::summary::stats_line(&rec)
            );
        }
        for w in &rec.warnings {
            errors.say(format!("warning: {w}"));
        }
        let span = WindowSpan {
            start_ms: window_start_wall,
            end_ms: end_wall,
        };
        match store_tx.try_send((rec, span)) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                errors.say("the store is behind (slow disk?): a window was dropped".into());
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                return Err(RecordError::Internal(
                    "the store thread ended unexpectedly".into(),
                ));
            }
        }
        if let Some(r) = pressured.get() {
            let dropped = collector.shed_caches();
            release_freed_memory();
            last_shed = Some(Instant::now());
            counters.memory_sheds.fetch_add(1, Ordering::Relaxed);
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            errors.say(format!(
                "memory at {:.0} of its cgroup's {:.0} MiB limit (kernel memory of its BPF maps included): the window was cut short and {:.1} MiB of caches dropped",
                mib(r.working_set),
                mib(r.limit),
                mib(dropped as u64)
            ));
        }
        (window_start_ns, window_start_wall) = (end_ns, end_wall);
        if !early {
            boundary_ms += cfg.window.as_secs_f64() * 1e3;
        }
        if boundary_ms < end_wall {
            // Suspended or far behind: realign instead of finishing empty windows in a burst.
            boundary_ms = next_boundary_ms(end_wall, cfg.window);
        }
        if stop {
            break;
        }
        if last_health.elapsed() >= cfg.health_interval {
            let cpu = process_cpu_seconds();
            let share = (cpu - cpu_at_health) / last_health.elapsed().as_secs_f64() * 100.0;
            eprintln!(
                "{}",
                crate::escape::escape(&health_line(
                    &counters,
                    started.elapsed(),
                    share,
                    &collector,
                    &export_counters
                ))
            );
            cpu_at_health = cpu;
            last_health = Instant::now();
        }
    }
    // The window in progress was finished above: let the store write it,
    // then give the exporters a few seconds to send what they still can
    // (the rest stays in the store, and their cursors say where to resume).
    drop(store_tx);
    let _ = store_thread.join();
    drop(session);
    feed.stopping.store(true, Ordering::Relaxed);
    feed.changed.notify_all();
    let deadline = Instant::now() + EXPORT_GRACE;
    for d in deliveries {
        while !d.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!(
        "{}",
        crate::escape::escape(&health_line(
            &counters,
            started.elapsed(),
            process_cpu_seconds() / started.elapsed().as_secs_f64() * 100.0,
            &collector,
            &export_counters
        ))
    );
    Ok(0)
}

/// The store thread: write each window, then enforce retention, and
/// compact the buckets that are over. Returns its sender and handle.
fn spawn_store_thread(
    store: Store,
    cfg: AgentConfig,
    counters: Arc<AgentCounters>,
    feed: Arc<crate::export::StoreFeed>,
) -> (
    std::sync::mpsc::SyncSender<(Recording, WindowSpan)>,
    std::thread::JoinHandle<()>,
) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Recording, WindowSpan)>(STORE_QUEUE);
    let handle = std::thread::Builder::new()
        .name("sysprof-store".into())
        .spawn(move || {
            let mut errors = ErrorLog::default();
            // The store as this thread knows it: read once, then kept up
            // to date with what it writes and removes (listing a week of
            // segments every window would cost more than writing one).
            let (mut index, warnings) = store.list();
            for w in warnings {
                errors.say(w);
            }
            store.remove_superseded(&mut index);
            feed.publish(&index);
            let mut last_compaction_bucket = -1i64;
            for (rec, span) in rx {
                match store.write(rec, vec![span], 0) {
                    Ok(info) => {
                        counters.stored.fetch_add(1, Ordering::Relaxed);
                        index.push(info);
                    }
                    Err(e) => {
                        counters.store_failed.fetch_add(1, Ordering::Relaxed);
                        errors.say(e.to_string());
                    }
                }
                let bucket = (span.end_ms / crate::store::bucket_ms()).floor() as i64;
                if bucket != last_compaction_bucket {
                    last_compaction_bucket = bucket;
                    let mut warnings = Vec::new();
                    store.compact(&mut index, span.end_ms, &mut warnings);
                    for w in warnings {
                        errors.say(w);
                    }
                }
                let (wall_ms, _) = clock_anchor();
                let r = store.enforce_retention(
                    &mut index,
                    cfg.retain_size,
                    wall_ms - cfg.retain_age.as_secs_f64() * 1e3,
                );
                counters
                    .retention_removed
                    .fetch_add(r.removed, Ordering::Relaxed);
                counters.store_bytes.store(r.bytes, Ordering::Relaxed);
                counters
                    .store_files
                    .store(index.len() as u64, Ordering::Relaxed);
                feed.publish(&index);
                // The window is written and gone: what it took goes back to the kernel.
                release_freed_memory();
            }
        })
        .expect("spawning the store thread");
    (tx, handle)
}

/// The agent names code from symbol tables only unless `--dwarf-names`
/// (`dwarf_names = true`): blazesym's parsed DWARF was 12-19 MB of its peak
/// beside each of the bench's loads (compiler loop 74.9 → 60.4 MB, a JVM
/// 79.1 → 60.1, `cargo xtask bench --agent --quick`), for inlined frames and
/// lines a fleet's store rarely needs. With it:
/// the most DWARF (all sections, decompressed) the agent reads from one
/// file; a file with more is named from its symbol tables (no inlined calls
/// or lines), with one warning. blazesym's working set grows with the DWARF
/// it reads and the agent holds it while new addresses keep coming: beside a
/// test binary of 131 MB (mostly DWARF) its RSS peaked at 116 MB. 32 MiB
/// admits the debug files of libc (libc6-dbg) and of a CPython build.
const AGENT_MAX_DWARF_BYTES: u64 = 32 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that windows end on multiples of the window length on the wall
    /// clock, and a first window is never shorter than half of one.
    #[test]
    fn boundaries_align_to_the_wall_clock() {
        let w = Duration::from_secs(10);
        assert_eq!(next_boundary_ms(1_000_001_000.0, w), 1_000_010_000.0);
        assert_eq!(
            next_boundary_ms(1_000_008_000.0, w),
            1_000_020_000.0,
            "2 s left: merged into the next"
        );
        assert_eq!(next_boundary_ms(1_000_000_000.0, w), 1_000_010_000.0);
    }
}
