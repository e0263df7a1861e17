//! The agent's exporters: each a thread that sends the store's windows to
//! its server (or directory) as they are written, and the metrics endpoint.
//!
//! In: the agent's settings ([`ExportConfig`](super::config::ExportConfig)),
//! the store, its counters. Out: the delivery threads and their counters (for
//! the health line and `/metrics`), the feed that tells them what the store
//! holds; at shutdown, a few seconds for them to send what they still can.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::AgentConfig;
use super::health::metrics_text;
use super::AgentCounters;
use crate::error::RecordError;
use crate::export::{ExportCounters, Exporter, StoreFeed};
use crate::store::Store;
use crate::sys::clock::clock_anchor;

/// Windows an exporter may owe before it gives up the oldest: a day of
/// 10-s windows (they wait on disk, in the store, not in memory).
const EXPORT_BACKLOG_WINDOWS: usize = 8640;
/// At shutdown, how long exporters may go on sending what is stored.
const EXPORT_GRACE: Duration = Duration::from_secs(5);

/// The exporters running.
pub(super) struct Exporting {
    deliveries: Vec<std::thread::JoinHandle<()>>,
    /// Each exporter's name and counters.
    pub counters: Vec<(&'static str, Arc<ExportCounters>)>,
    /// What the store holds, published by the store thread.
    pub feed: Arc<StoreFeed>,
}

impl Exporting {
    /// Start the exporters the settings name and the metrics endpoint; an
    /// exporter that cannot be set up is a bad option.
    pub fn start(
        cfg: &AgentConfig,
        store: &Store,
        agent_counters: &Arc<AgentCounters>,
    ) -> Result<Exporting, RecordError> {
        let feed = Arc::new(StoreFeed::default());
        let started_wall = clock_anchor().0;
        let mut deliveries = Vec::new();
        let mut counters: Vec<(&'static str, Arc<ExportCounters>)> = Vec::new();
        for exporter in exporters(cfg)? {
            let c = Arc::new(ExportCounters::default());
            counters.push((exporter.name(), c.clone()));
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
            let (c, ex) = (agent_counters.clone(), counters.clone());
            let render: crate::export::metrics::Render = Arc::new(move || metrics_text(&c, &ex));
            crate::export::metrics::serve(addr, render)
                .map_err(|e| RecordError::BadOption(e.into()))?;
        }
        Ok(Exporting {
            deliveries,
            counters,
            feed,
        })
    }

    /// The store is written: tell the exporters to stop once they have sent
    /// what they can, and give them [`EXPORT_GRACE`] for it.
    pub fn finish(&self) {
        self.feed.stopping.store(true, Ordering::Relaxed);
        self.feed.changed.notify_all();
        let deadline = Instant::now() + EXPORT_GRACE;
        for d in &self.deliveries {
            while !d.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The exporters the settings name, set up.
fn exporters(cfg: &AgentConfig) -> Result<Vec<Box<dyn Exporter>>, RecordError> {
    let labels = crate::export::Labels::local();
    let mut exporters: Vec<Box<dyn Exporter>> = Vec::new();
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
    Ok(exporters)
}
