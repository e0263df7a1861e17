//! Exporters: finished windows in the wire formats fleets' stores take.
//!
//! In: windows as the store holds them ([`StoreFeed`]: the store thread's
//! index and a wake-up per window written). Out: pprof files ([`pprof`],
//! [`PprofDir`]), OTLP profiles requests ([`otlp`]), Pyroscope pushes
//! ([`pyroscope`]), and counters for the health line and the Prometheus
//! endpoint ([`metrics`]). Each destination runs [`spawn_delivery`] on its
//! own thread, reading windows back from the store: the store is the
//! queue, so a window that could not be sent is retried from disk, not
//! held in memory. What every format shares is here: the host's labels
//! and a process's container or unit.

mod error;
pub mod metrics;
pub mod otlp;
pub mod pprof;
pub mod pyroscope;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::model::recording::{ProcessRecord, Recording};
use crate::store::{ReadError, SegmentInfo, Store};
pub use error::{ExportError, SendError};

/// What identifies this host in every export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    /// The host name (`host.name`, Pyroscope's `hostname`).
    pub host_name: String,
}

impl Labels {
    /// This host's.
    pub fn local() -> Labels {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Labels {
            host_name: if name.is_empty() {
                "localhost".into()
            } else {
                name
            },
        }
    }
}

pub use crate::model::cgroup::CgroupIdentity;

/// The container or unit of `p`, from its cgroup.
pub fn cgroup_identity(p: &ProcessRecord) -> Option<CgroupIdentity> {
    p.cgroup.as_deref().and_then(CgroupIdentity::of_path)
}

/// The service a process belongs to, as OpenTelemetry's `service.name` and
/// Pyroscope's `service_name`: its systemd unit (without `.service`), else
/// its container, else its executable's name.
pub fn service_name(p: &ProcessRecord) -> String {
    match cgroup_identity(p) {
        Some(CgroupIdentity::Unit(u)) => u
            .trim_end_matches(".service")
            .trim_end_matches(".scope")
            .to_string(),
        Some(CgroupIdentity::Container(id)) => {
            format!("container-{}", CgroupIdentity::short_id(&id))
        }
        // A track the store folded is named for its processes (`true`),
        // not for how many there were in one compacted run.
        None => p.base_name().to_string(),
    }
}

/// A destination for finished windows.
pub trait Exporter: Send {
    /// Short name: `pprof`, `otlp`, `pyroscope` (cursor file, health line, metrics).
    fn name(&self) -> &'static str;
    /// Send one recording (a window, or a compacted run of them). Returns
    /// the bytes sent; a transient error is retried later with backoff, a
    /// permanent one drops the window.
    fn send(&mut self, rec: &Recording) -> Result<u64, SendError>;
}

/// What one exporter did.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Windows delivered.
    pub sent: AtomicU64,
    /// Attempts that failed (each retried).
    pub failed: AtomicU64,
    /// Windows given up: the backlog was full, the store lost them first,
    /// or the destination refused them for good (a permanent error).
    pub dropped: AtomicU64,
    /// Bytes sent.
    pub bytes: AtomicU64,
    /// Windows stored and not delivered yet.
    pub backlog: AtomicU64,
}

/// What the store thread shares with the exporters: its index of the store
/// and a wake-up for each window written.
#[derive(Debug, Default)]
pub struct StoreFeed {
    /// The segments, as the store thread knows them.
    pub index: Mutex<Vec<SegmentInfo>>,
    /// Bumped at each change; exporters wait on it.
    pub generation: Mutex<u64>,
    /// Notified with `generation`.
    pub changed: Condvar,
    /// Set when the agent stops.
    pub stopping: AtomicBool,
}

impl StoreFeed {
    /// Publish `index` and wake the exporters.
    pub fn publish(&self, index: &[SegmentInfo]) {
        *self.index.lock().unwrap_or_else(|e| e.into_inner()) = index.to_vec();
        *self.generation.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.changed.notify_all();
    }
}

/// Longest wait between retries of a failing destination.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The store's file that keeps exporter `name`'s cursor (the wall-clock
/// end of the last window it delivered, ms).
fn cursor_name(name: &str) -> String {
    format!(".export-{name}.cursor")
}

fn read_cursor(store: &Store, name: &str) -> Option<f64> {
    store.read_small(&cursor_name(name))?.trim().parse().ok()
}

fn write_cursor(store: &Store, name: &str, ms: f64) {
    let _ = store.replace_small(&cursor_name(name), format!("{ms:.3}\n").as_bytes());
}

/// Deliver every window the store gets, in order, with `exporter`, from
/// its own thread: off the sampling path, one window in memory at a time
/// (a slow or hung destination holds up only itself, and never grows
/// memory), retried with exponential backoff while it fails. What is not
/// delivered stays in the store: a destination down for an hour gets that
/// hour when it is back, as far as the store still holds it and the
/// backlog (`max_backlog` windows) allows; what falls out of either is
/// counted as dropped. The cursor survives restarts; a first start sends
/// from `start_ms` on.
pub fn spawn_delivery(
    exporter: Box<dyn Exporter>,
    store: Store,
    feed: Arc<StoreFeed>,
    counters: Arc<ExportCounters>,
    start_ms: f64,
    max_backlog: usize,
) -> std::thread::JoinHandle<()> {
    let name = exporter.name();
    std::thread::Builder::new()
        .name(format!("sysprof-{name}"))
        .spawn(move || {
            Delivery {
                cursor: read_cursor(&store, name).unwrap_or(start_ms),
                exporter,
                store,
                feed,
                counters,
                max_backlog,
                name,
                backoff: Duration::from_secs(1),
                errors: crate::log::ErrorLog::default(),
                seen_generation: 0,
            }
            .run()
        })
        .expect("spawning an exporter thread")
}

/// One exporter's delivery thread: what [`spawn_delivery`] runs.
struct Delivery {
    exporter: Box<dyn Exporter>,
    store: Store,
    feed: Arc<StoreFeed>,
    counters: Arc<ExportCounters>,
    max_backlog: usize,
    name: &'static str,
    /// The wall-clock end of the last window delivered (or given up), ms.
    cursor: f64,
    /// The wait before the next try while the destination fails.
    backoff: Duration,
    errors: crate::log::ErrorLog,
    /// The store feed's generation last seen.
    seen_generation: u64,
}

impl Delivery {
    /// Deliver until the agent stops and nothing is left to send (or a
    /// send fails as it stops).
    fn run(mut self) {
        loop {
            let stopping = self.feed.stopping.load(Ordering::Relaxed);
            let mut pending = self.pending();
            self.drop_over_backlog(&mut pending);
            let Some(seg) = pending.first().cloned() else {
                if stopping {
                    return;
                }
                self.wait_for_window();
                continue;
            };
            let Some(rec) = self.read(&seg) else {
                continue;
            };
            if self.send(&seg, rec, stopping).is_break() {
                return;
            }
        }
    }

    /// The windows of segment `s` not delivered yet.
    fn undelivered(&self, s: &SegmentInfo) -> usize {
        s.header
            .windows
            .iter()
            .filter(|w| w.end_ms > self.cursor + 0.5)
            .count()
    }

    /// The segments with windows not delivered yet, oldest first; their
    /// windows counted as the backlog.
    fn pending(&self) -> Vec<SegmentInfo> {
        let index = self
            .feed
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut pending: Vec<SegmentInfo> = Store::select(&index, f64::NEG_INFINITY, f64::INFINITY)
            .into_iter()
            .filter(|s| self.undelivered(s) > 0)
            .collect();
        pending.sort_by(|a, b| a.header.start_ms.total_cmp(&b.header.start_ms));
        let windows: usize = pending.iter().map(|s| self.undelivered(s)).sum();
        self.counters
            .backlog
            .store(windows as u64, Ordering::Relaxed);
        pending
    }

    /// Over the backlog: give up the oldest.
    fn drop_over_backlog(&mut self, pending: &mut Vec<SegmentInfo>) {
        let windows: usize = pending.iter().map(|s| self.undelivered(s)).sum();
        if windows <= self.max_backlog {
            return;
        }
        let mut over = windows - self.max_backlog;
        while over > 0 && !pending.is_empty() {
            let s = pending.remove(0);
            let n = self.undelivered(&s);
            self.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
            over = over.saturating_sub(n);
            self.cursor = s.header.end_ms;
        }
        write_cursor(&self.store, self.name, self.cursor);
        self.errors.say(format!(
            "{}: the backlog is over {} windows; the oldest were dropped",
            self.name, self.max_backlog
        ));
    }

    /// Nothing to send: wait for the next window.
    fn wait_for_window(&mut self) {
        let mut g = self
            .feed
            .generation
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *g == self.seen_generation {
            g = self
                .feed
                .changed
                .wait_timeout(g, Duration::from_secs(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        self.seen_generation = *g;
    }

    /// The recording of `seg`, cut to what was not delivered yet; None if
    /// it cannot be read now (gone: the next listing has it) or ever
    /// (damaged: given up).
    fn read(&mut self, seg: &SegmentInfo) -> Option<Recording> {
        let mut rec = match self.store.read(seg) {
            Ok(r) => r,
            // Replaced by compaction: the next listing has it.
            Err(ReadError::Gone) => {
                std::thread::sleep(Duration::from_millis(100));
                return None;
            }
            Err(ReadError::Bad(why)) => {
                self.counters
                    .dropped
                    .fetch_add(seg.header.windows.len() as u64, Ordering::Relaxed);
                self.errors.say(format!(
                    "{}: skipping {}: {why}",
                    self.name,
                    seg.path.display()
                ));
                self.delivered_up_to(seg);
                return None;
            }
        };
        // A compacted run some of whose windows were delivered already.
        if seg.header.start_ms < self.cursor {
            let ns =
                |ms: f64| (rec.start_ns as f64 + (ms - rec.start_wall_ms) * 1e6).max(0.0) as u64;
            let (a, b) = (ns(self.cursor), rec.end_ns);
            rec.clip(a, b);
        }
        Some(rec)
    }

    /// Move the cursor past `seg`, on disk too.
    fn delivered_up_to(&mut self, seg: &SegmentInfo) {
        self.cursor = seg.header.end_ms;
        write_cursor(&self.store, self.name, self.cursor);
    }

    /// Send `rec`, the undelivered part of `seg`; Break if it failed as
    /// the agent stops.
    fn send(
        &mut self,
        seg: &SegmentInfo,
        rec: Recording,
        stopping: bool,
    ) -> std::ops::ControlFlow<()> {
        let name = self.name;
        let n = self.undelivered(seg) as u64;
        match self.exporter.send(&rec) {
            Ok(bytes) => {
                self.counters.sent.fetch_add(n, Ordering::Relaxed);
                self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                self.delivered_up_to(seg);
                self.backoff = Duration::from_secs(1);
            }
            // Sending it again would fail the same way: give it up
            // rather than hold up every window behind it forever.
            Err(e) if !e.is_transient() => {
                self.counters.dropped.fetch_add(n, Ordering::Relaxed);
                self.errors.say(format!("{name}: {e}; the window was dropped (sending it again would fail the same way)"));
                self.delivered_up_to(seg);
                self.backoff = Duration::from_secs(1);
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.errors.say(format!(
                    "{name}: {e}; retrying in up to {} s",
                    MAX_BACKOFF.as_secs()
                ));
                if stopping {
                    return std::ops::ControlFlow::Break(());
                }
                // Wait out the backoff, or until the agent stops.
                let until = std::time::Instant::now() + self.backoff;
                while std::time::Instant::now() < until
                    && !self.feed.stopping.load(Ordering::Relaxed)
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// `--pprof-dir`: each window as `<start ms>-<end ms>.pb.gz`, written to a
/// hidden temporary and renamed; the directory is kept within the store's
/// retention limits (oldest files first).
pub struct PprofDir {
    dir: std::path::PathBuf,
    labels: Labels,
    max_bytes: u64,
    max_age: Duration,
}

impl PprofDir {
    /// Write into `dir` (created mode 0700 if missing).
    pub fn new(
        dir: &std::path::Path,
        labels: Labels,
        max_bytes: u64,
        max_age: Duration,
    ) -> Result<PprofDir, ExportError> {
        // The files hold every process's command lines and stacks: as the store.
        crate::store::private_dir(dir, "the pprof directory")?;
        Ok(PprofDir {
            dir: dir.to_path_buf(),
            labels,
            max_bytes,
            max_age,
        })
    }

    fn retain(&self) {
        let mut files: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> =
            std::fs::read_dir(&self.dir)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().ends_with(".pb.gz"))
                        .filter_map(|e| {
                            let m = e.metadata().ok()?;
                            Some((m.modified().ok()?, m.len(), e.path()))
                        })
                        .collect()
                })
                .unwrap_or_default();
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let now = std::time::SystemTime::now();
        for (t, len, path) in files {
            let old = now.duration_since(t).is_ok_and(|age| age > self.max_age);
            if total <= self.max_bytes && !old {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

impl Exporter for PprofDir {
    fn name(&self) -> &'static str {
        "pprof"
    }

    fn send(&mut self, rec: &Recording) -> Result<u64, SendError> {
        let bytes = pprof::encode_gzip(rec, &self.labels);
        let end = rec.start_wall_ms + rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e6;
        let path = self.dir.join(format!(
            "{:013}-{:013}.pb.gz",
            rec.start_wall_ms.max(0.0) as u64,
            end.max(0.0) as u64
        ));
        if let Err(e) = crate::sys::atomic_file::write(&path, ".pb.gz", &bytes) {
            // A full disk frees up; a directory made read-only is fixed.
            return Err(SendError::Transient(format!(
                "cannot write {}: {e}",
                path.display()
            )));
        }
        self.retain();
        Ok(bytes.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exporter that answers from a script (then Ok) and notes the
    /// window of each call.
    struct Scripted {
        answers: std::collections::VecDeque<Result<u64, SendError>>,
        calls: Arc<Mutex<Vec<f64>>>,
    }

    impl Exporter for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }

        fn send(&mut self, rec: &Recording) -> Result<u64, SendError> {
            self.calls.lock().unwrap().push(rec.start_wall_ms);
            self.answers.pop_front().unwrap_or(Ok(1))
        }
    }

    /// Two windows in a fresh store, delivered by an exporter that answers
    /// `answers` first; returns its calls (by window start) and counters
    /// once the second window is delivered.
    fn deliver(
        name: &str,
        answers: Vec<Result<u64, SendError>>,
    ) -> (Vec<f64>, Arc<ExportCounters>) {
        let d =
            std::env::temp_dir().join(format!("sysprof-delivery-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let store = Store::open(&d, true).unwrap();
        let t0 = 1_800_000_000_000.0;
        let mut index = Vec::new();
        for i in 0..2u64 {
            let mut r =
                crate::store::segment::tests::sample_recording(1_000_000_000 + i * 10_000_000_000);
            r.start_wall_ms = t0 + i as f64 * 10_000.0;
            let span = crate::store::segment::WindowSpan {
                start_ms: r.start_wall_ms,
                end_ms: r.start_wall_ms + 10_000.0,
            };
            index.push(store.write(r, vec![span], 0).unwrap());
        }
        let feed = Arc::new(StoreFeed::default());
        feed.publish(&index);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let counters = Arc::new(ExportCounters::default());
        let exporter = Box::new(Scripted {
            answers: answers.into(),
            calls: calls.clone(),
        });
        let thread = spawn_delivery(exporter, store, feed.clone(), counters.clone(), 0.0, 100);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while calls.lock().unwrap().last() != Some(&(t0 + 10_000.0))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        feed.stopping.store(true, Ordering::Relaxed);
        feed.publish(&index);
        thread.join().unwrap();
        let _ = std::fs::remove_dir_all(&d);
        let calls = calls.lock().unwrap().clone();
        (calls, counters)
    }

    /// Check that a window refused for good (a permanent error) is sent
    /// once, counted as dropped, not as a failed attempt, and that the next
    /// window is delivered after it; and that a transient error is counted
    /// as a failed attempt and the same window sent again until it goes.
    #[test]
    fn permanent_errors_drop_the_window_and_transient_ones_retry_it() {
        let t0 = 1_800_000_000_000.0;
        let (calls, c) = deliver(
            "permanent",
            vec![Err(SendError::Permanent(
                "x answered 400 Bad Request".into(),
            ))],
        );
        assert_eq!(
            calls,
            vec![t0, t0 + 10_000.0],
            "the refused window is not sent again"
        );
        assert_eq!(
            (
                c.sent.load(Ordering::Relaxed),
                c.dropped.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed)
            ),
            (1, 1, 0)
        );

        let (calls, c) = deliver(
            "transient",
            vec![Err(SendError::Transient(
                "x answered 503 Service Unavailable".into(),
            ))],
        );
        assert_eq!(
            calls,
            vec![t0, t0, t0 + 10_000.0],
            "the window that failed is sent again"
        );
        assert_eq!(
            (
                c.sent.load(Ordering::Relaxed),
                c.dropped.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed)
            ),
            (2, 0, 1)
        );
    }

    /// Check that a pprof directory others can write, a symlink and another
    /// user's directory are refused, and a private one taken.
    #[test]
    fn pprof_dirs_others_can_write_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sysprof-pprofdir-{}", std::process::id()));
        let labels = || Labels {
            host_name: "h".into(),
        };
        let private = dir.join("private");
        assert!(PprofDir::new(&private, labels(), 1 << 20, Duration::from_secs(60)).is_ok());
        let open = dir.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = PprofDir::new(&open, labels(), 1 << 20, Duration::from_secs(60))
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("can be written by others") && e.contains("--pprof-dir"),
            "{e}"
        );
        let link = dir.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let e = PprofDir::new(&link, labels(), 1 << 20, Duration::from_secs(60))
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("is a symlink"), "{e}");
        // Another user's directory (only root can make one to test with).
        if unsafe { libc::geteuid() } == 0 {
            let theirs = dir.join("theirs");
            std::fs::create_dir_all(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = PprofDir::new(&theirs, labels(), 1 << 20, Duration::from_secs(60))
                .err()
                .expect("refused")
                .to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that a Go goroutine's labels frame (the root of its stacks)
    /// becomes its samples' labels in pprof and their attributes in OTLP,
    /// not a location, on-CPU and off-CPU alike; the stack under it keeps
    /// its frames; a stack without one gets none.
    #[test]
    fn go_labels_are_the_samples_labels_not_a_frame() {
        use crate::model::goroutine_labels::labels_name;
        use crate::model::recording::{FrameKind, FrameRecord};
        let mut rec = crate::store::segment::tests::sample_recording(1_000_000_000);
        let labels = [
            ("handler".to_string(), "alpha".to_string()),
            ("user".to_string(), "u 1".to_string()),
        ];
        rec.frames.push(FrameRecord::named(
            FrameKind::GoLabels,
            labels_name(&labels),
        ));
        let root = rec.stacks.child(crate::model::stack_tree::NO_PARENT, 2);
        let under = rec.stacks.child(root, 0);
        let t = &mut rec.processes[0].threads[0];
        t.samples.stack[0] = under;
        t.off_cpu.stack[0] = under;

        let p = pprof::build(&rec, &Labels::local());
        let string = |i: i64| p.string_table[i as usize].as_str();
        let labelled: Vec<_> = p
            .sample
            .iter()
            .filter(|s| s.label.iter().any(|l| string(l.key) == "handler"))
            .collect();
        assert_eq!(labelled.len(), 1, "one stack with labels: {:?}", p.sample);
        let s = labelled[0];
        assert_eq!(s.value[0], 1, "one on-CPU sample");
        assert!(s.value[2] > 0, "its off-CPU time");
        assert_eq!(s.location_id.len(), 1, "frame 0 alone, no labels location");
        let got: Vec<(&str, &str)> = s
            .label
            .iter()
            .filter(|l| l.str != 0 && ["handler", "user"].contains(&string(l.key)))
            .map(|l| (string(l.key), string(l.str)))
            .collect();
        assert_eq!(got, [("handler", "alpha"), ("user", "u 1")]);
        assert!(p
            .function
            .iter()
            .all(|f| !string(f.name).starts_with("[labels")));
        assert!(
            p.sample.len() > 1,
            "the stacks without labels are samples of their own"
        );

        let req = otlp::build(&rec, &Labels::local());
        let d = req.dictionary.as_ref().unwrap();
        let attr = |i: i32| {
            let kv = &d.attribute_table[i as usize];
            (
                d.string_table[kv.key_strindex as usize].clone(),
                kv.value.clone(),
            )
        };
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        assert_eq!(profiles.len(), 2, "on-CPU and off-CPU");
        for profile in profiles {
            let with: Vec<_> = profile
                .samples
                .iter()
                .filter(|s| s.attribute_indices.iter().any(|&i| attr(i).0 == "handler"))
                .collect();
            assert_eq!(with.len(), 1, "{:?}", profile.samples);
            let stack = &d.stack_table[with[0].stack_index as usize];
            assert_eq!(stack.location_indices.len(), 1, "no labels location");
            let keys: Vec<String> = with[0]
                .attribute_indices
                .iter()
                .map(|&i| attr(i).0)
                .collect();
            assert!(keys.contains(&"user".to_string()), "{keys:?}");
        }
        assert!(d
            .function_table
            .iter()
            .all(|f| !d.string_table[f.name_strindex as usize].starts_with("[labels")));
    }
    /// Check that a Go goroutine's id frame (under its labels frame)
    /// becomes its samples' `goroutine` label in pprof and attribute in
    /// OTLP beside the labels, not a location, and that Pyroscope's
    /// profiles leave it out (each label set is a series there).
    #[test]
    fn goroutine_ids_are_labels_except_for_pyroscope() {
        use crate::model::goroutine_labels::{goroutine_name, labels_name};
        use crate::model::recording::{FrameKind, FrameRecord};
        let mut rec = crate::store::segment::tests::sample_recording(1_000_000_000);
        let pseudo = FrameRecord::named;
        let labels = [("handler".to_string(), "alpha".to_string())];
        let l = rec.frames.len() as u64;
        rec.frames
            .push(pseudo(FrameKind::GoLabels, labels_name(&labels)));
        rec.frames
            .push(pseudo(FrameKind::Goroutine, goroutine_name(17)));
        let root = rec.stacks.child(crate::model::stack_tree::NO_PARENT, l);
        let goroutine = rec.stacks.child(root, l + 1);
        let under = rec.stacks.child(goroutine, 0);
        let t = &mut rec.processes[0].threads[0];
        t.samples.stack[0] = under;
        t.off_cpu.stack[0] = under;

        for (goroutines, want) in [
            (pprof::Goroutines::Labelled, Some(17)),
            (pprof::Goroutines::Left, None),
        ] {
            let p = pprof::build_filtered(&rec, &Labels::local(), &|_| true, goroutines);
            let string = |i: i64| p.string_table[i as usize].as_str();
            let s = p
                .sample
                .iter()
                .find(|s| s.label.iter().any(|l| string(l.key) == "handler"))
                .expect("the labelled stack's sample");
            assert_eq!(s.location_id.len(), 1, "frame 0 alone: {s:?}");
            let id = s
                .label
                .iter()
                .find(|l| string(l.key) == "goroutine")
                .map(|l| l.num);
            assert_eq!(id, want, "{goroutines:?}: {s:?}");
            assert!(p
                .function
                .iter()
                .all(|f| !string(f.name).starts_with("[goroutine")));
        }

        let req = otlp::build(&rec, &Labels::local());
        let d = req.dictionary.as_ref().unwrap();
        let attr = |i: i32| {
            let kv = &d.attribute_table[i as usize];
            (
                d.string_table[kv.key_strindex as usize].clone(),
                format!("{:?}", kv.value),
            )
        };
        for profile in &req.resource_profiles[0].scope_profiles[0].profiles {
            let with: Vec<_> = profile
                .samples
                .iter()
                .filter(|s| s.attribute_indices.iter().any(|&i| attr(i).0 == "handler"))
                .collect();
            assert_eq!(with.len(), 1, "{:?}", profile.samples);
            let stack = &d.stack_table[with[0].stack_index as usize];
            assert_eq!(stack.location_indices.len(), 1, "no goroutine location");
            let goroutine: Vec<String> = with[0]
                .attribute_indices
                .iter()
                .map(|&i| attr(i))
                .filter(|(k, _)| k == "goroutine")
                .map(|(_, v)| v)
                .collect();
            assert!(
                goroutine.len() == 1 && goroutine[0].contains("IntValue(17)"),
                "{goroutine:?}"
            );
        }
    }
}
