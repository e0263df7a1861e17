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
mod exporting;
mod health;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

use crate::capture::CaptureSession;
use crate::cli::AgentArgs;
use crate::collector::Collector;
use crate::collector::WindowRange;
use crate::error::RecordError;
use crate::log::ErrorLog;
use crate::model::recording::Recording;
use crate::sampling::{Engine, Role};
use crate::store::segment::WindowSpan;
use crate::store::Store;
use crate::sys::clock::clock_anchor;
use crate::sys::process::{
    configure_malloc, process_cpu_seconds, release_freed_memory, rss_bytes, MallocUse,
};
use crate::units::human_duration;
use config::AgentConfig;
use exporting::Exporting;
use health::health_line;
pub use health::AgentCounters;

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
/// Windows waiting for the store thread at most; more are dropped.
const STORE_QUEUE: usize = 4;
/// Windows in a row without a new address after which the symbolizer's
/// parsed binaries are freed.
const SYMBOLIZER_IDLE_WINDOWS: u32 = 3;

/// Run the agent; returns its exit status.
pub fn run(args: AgentArgs) -> Result<i32, RecordError> {
    let cfg = AgentConfig::resolve(&args).map_err(|e| RecordError::BadOption(e.into()))?;
    configure_malloc(MallocUse::LongLived);
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
    let engine = Engine {
        sampling: cfg.sampling,
        frequency: cfg.frequency,
        tracing: cfg.tracing,
        role: Role::Agent {
            dwarf_names: cfg.dwarf_names,
        },
    };
    let mut collector = engine.collector();
    let counters = Arc::new(AgentCounters::default());
    let exporting = Exporting::start(&cfg, &store, &counters)?;
    let mut session = CaptureSession::start(&engine.capture(), &mut collector)?;
    // Loading parsed the kernel's BTF (tens of MB, freed since).
    release_freed_memory();
    let (store_tx, store_thread) = spawn_store_thread(
        store.clone(),
        cfg.clone(),
        counters.clone(),
        exporting.feed.clone(),
    );
    say_started(&cfg, &store, stale);
    let mut sigint = signal(SignalKind::interrupt()).map_err(RecordError::Signals)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(RecordError::Signals)?;
    let mut windows = Windows {
        cfg: &cfg,
        counters: &counters,
        store_tx,
        errors: ErrorLog::default(),
        start: (session.start_ns, session.start_wall_ms),
        boundary_ms: next_boundary_ms(session.start_wall_ms, cfg.window),
    };
    let mut memory = MemoryWatch::of_self();
    let mut health = Health::new();
    loop {
        // Near its cgroup's limit (the BPF maps' kernel memory included),
        // the agent cuts the window (its records stored, not held) and drops
        // its caches rather than be OOM-killed with the window in progress.
        let pressured = std::cell::Cell::new(None);
        let deadline = windows.deadline();
        let ended = session
            .run_bounded(
                &mut collector,
                async {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => false,
                        _ = sigint.recv() => true,
                        _ = sigterm.recv() => true,
                        _ = memory.pressure(&pressured) => false,
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
        let end_wall = windows.finish(&mut collector, end_ns, timing)?;
        if let Some(r) = pressured.get() {
            memory.shed(&mut collector, r, &counters, &mut windows.errors);
        }
        windows.advance(end_ns, end_wall, early);
        if stop {
            break;
        }
        health.say_if_due(
            cfg.health_interval,
            &counters,
            &collector,
            &exporting.counters,
        );
    }
    // The window in progress was finished above: let the store write it,
    // then give the exporters a few seconds to send what they still can
    // (the rest stays in the store, and their cursors say where to resume).
    drop(windows);
    let _ = store_thread.join();
    drop(session);
    exporting.finish();
    health.say_last(&counters, &collector, &exporting.counters);
    Ok(0)
}

/// The agent's first line: what it records, where to, for how long.
fn say_started(cfg: &AgentConfig, store: &Store, stale: u64) {
    eprintln!(
        "sysprof agent: recording every process at {} Hz into {} (windows of {} s; keeping {} or {}, whichever is less){}",
        cfg.frequency,
        crate::escape::path(store.dir()),
        cfg.window.as_secs_f64(),
        crate::units::human_bytes(cfg.retain_size),
        human_duration(cfg.retain_age),
        if stale > 0 { format!("; removed {stale} unfinished files of a previous run") } else { String::new() },
    );
}

/// The agent's windows: when each ends, and what is done with it once
/// finished (counted, said, handed to the store thread).
struct Windows<'a> {
    cfg: &'a AgentConfig,
    counters: &'a AgentCounters,
    store_tx: std::sync::mpsc::SyncSender<(Recording, WindowSpan)>,
    errors: ErrorLog,
    /// The window in progress's start: monotonic ns, wall-clock ms.
    start: (u64, f64),
    /// Where it ends on the wall clock (ms).
    boundary_ms: f64,
}

impl Windows<'_> {
    /// When the window in progress ends, on the monotonic clock.
    fn deadline(&self) -> tokio::time::Instant {
        let (now_wall, _) = clock_anchor();
        let wait = Duration::from_secs_f64(((self.boundary_ms - now_wall) / 1e3).max(0.0));
        tokio::time::Instant::now() + wait
    }

    /// The window was cut at `end_ns`: finish it in the collector, count
    /// it, hand it to the store. Returns its end on the wall clock.
    /// `timing` (with `SYSPROF_TIMING`): when and at what CPU time the cut began.
    fn finish(
        &mut self,
        collector: &mut Collector,
        end_ns: u64,
        timing: Option<(Instant, f64)>,
    ) -> Result<f64, RecordError> {
        let (window_start_ns, window_start_wall) = self.start;
        let (wall_now, mono_now) = clock_anchor();
        let end_wall = wall_now - (mono_now.saturating_sub(end_ns)) as f64 / 1e6;
        let range = WindowRange {
            start_ns: window_start_ns,
            end_ns,
            start_wall_ms: window_start_wall,
            interval_ms: 1000.0 / self.cfg.frequency as f64,
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
        self.count(collector, &rec);
        if self.cfg.verbose {
            eprintln!(
                "sysprof agent: window {:.0}-{:.0}: {}",
                window_start_wall,
                end_wall,
                crate::summary::stats_line(&rec)
            );
        }
        for w in &rec.warnings {
            self.errors.say(format!("warning: {w}"));
        }
        let span = WindowSpan {
            start_ms: window_start_wall,
            end_ms: end_wall,
        };
        match self.store_tx.try_send((rec, span)) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                self.errors
                    .say("the store is behind (slow disk?): a window was dropped".into());
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                return Err(RecordError::Internal(
                    "the store thread ended unexpectedly".into(),
                ));
            }
        }
        Ok(end_wall)
    }

    /// A finished window's totals into the agent's counters.
    fn count(&self, collector: &Collector, rec: &Recording) {
        let counters = self.counters;
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
    }

    /// The next window starts where this one ended; it ends at the next
    /// boundary, or at the same one when this one ended early.
    fn advance(&mut self, end_ns: u64, end_wall: f64, early: bool) {
        self.start = (end_ns, end_wall);
        if !early {
            self.boundary_ms += self.cfg.window.as_secs_f64() * 1e3;
        }
        if self.boundary_ms < end_wall {
            // Suspended or far behind: realign instead of finishing empty windows in a burst.
            self.boundary_ms = next_boundary_ms(end_wall, self.cfg.window);
        }
    }
}

/// The agent's memory as its cgroup counts it, watched for pressure.
struct MemoryWatch {
    memory: Option<crate::sys::cgroup_memory::CgroupMemory>,
    shed_percent: u64,
    last_shed: Option<Instant>,
}

impl MemoryWatch {
    fn of_self() -> MemoryWatch {
        MemoryWatch {
            memory: crate::sys::cgroup_memory::CgroupMemory::of_self(),
            shed_percent: shed_at_percent(),
            last_shed: None,
        }
    }

    /// Ends (the reading put in `pressured`) once the cgroup's working set
    /// passes the shedding share of its limit; never without a limit, nor
    /// within [`SHED_INTERVAL`] of the last shed.
    async fn pressure(
        &self,
        pressured: &std::cell::Cell<Option<crate::sys::cgroup_memory::MemoryReading>>,
    ) {
        let Some(m) = self
            .memory
            .as_ref()
            .filter(|_| self.last_shed.is_none_or(|t| t.elapsed() >= SHED_INTERVAL))
        else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(PRESSURE_CHECK).await;
            if let Some(r) = m
                .reading()
                .filter(|r| r.working_set > r.limit / 100 * self.shed_percent)
            {
                pressured.set(Some(r));
                return;
            }
        }
    }

    /// Drop the collector's caches after a cut made by pressure `r`, and say so.
    fn shed(
        &mut self,
        collector: &mut Collector,
        r: crate::sys::cgroup_memory::MemoryReading,
        counters: &AgentCounters,
        errors: &mut ErrorLog,
    ) {
        let dropped = collector.shed_caches();
        release_freed_memory();
        self.last_shed = Some(Instant::now());
        counters.memory_sheds.fetch_add(1, Ordering::Relaxed);
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        errors.say(format!(
            "memory at {:.0} of its cgroup's {:.0} MiB limit (kernel memory of its BPF maps included): the window was cut short and {:.1} MiB of caches dropped",
            mib(r.working_set),
            mib(r.limit),
            mib(dropped as u64)
        ));
    }
}

/// The health line, every `--health-interval`.
struct Health {
    started: Instant,
    last: Instant,
    cpu_at_last: f64,
}

impl Health {
    fn new() -> Health {
        Health {
            started: Instant::now(),
            last: Instant::now(),
            cpu_at_last: process_cpu_seconds(),
        }
    }

    fn say_if_due(
        &mut self,
        interval: Duration,
        counters: &AgentCounters,
        collector: &Collector,
        exporters: &[(&'static str, Arc<crate::export::ExportCounters>)],
    ) {
        if self.last.elapsed() < interval {
            return;
        }
        let cpu = process_cpu_seconds();
        let share = (cpu - self.cpu_at_last) / self.last.elapsed().as_secs_f64() * 100.0;
        eprintln!(
            "{}",
            crate::escape::escape(&health_line(
                counters,
                self.started.elapsed(),
                share,
                collector,
                exporters
            ))
        );
        self.cpu_at_last = cpu;
        self.last = Instant::now();
    }

    /// The last health line, as the agent stops: its CPU over its whole run.
    fn say_last(
        &self,
        counters: &AgentCounters,
        collector: &Collector,
        exporters: &[(&'static str, Arc<crate::export::ExportCounters>)],
    ) {
        let up = self.started.elapsed();
        eprintln!(
            "{}",
            crate::escape::escape(&health_line(
                counters,
                up,
                process_cpu_seconds() / up.as_secs_f64() * 100.0,
                collector,
                exporters
            ))
        );
    }
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
