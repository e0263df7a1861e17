//! A recording's windows: each finished when full, merged into those before
//! it, what has ended written into the output at once, and what still runs
//! kept on disk until its thread is written.
//!
//! In: the collector at each cut (a window's end) and at the stop. Out: the
//! profile written as the recording goes and finished at its end, with
//! what the summary says of it ([`Written`]); the missing-symbols counts of
//! every window.

use std::path::Path;

use super::{output_error, Timing};
use crate::capture::CaptureSession;
use crate::collector::{Collector, WindowRange};
use crate::error::RecordError;
use crate::model::merge::Merger;
use crate::model::recording::Recording;
use crate::profile::output::{OutputFile, Stream};
use crate::profile::spill::Spill;
use crate::profile::{HostInfo, ProfileWriter};
use crate::summary::MissingSymbols;

/// The windows of one recording and the output they are written into.
pub(super) struct Windows {
    /// Windows are merged as they finish; processes that ended a window
    /// earlier are written into the output then and forgotten.
    merger: Option<Merger>,
    /// Records of what still runs wait on disk for their thread's writing.
    spill: Option<Spill>,
    spill_errors: Vec<String>,
    spill_dir: std::path::PathBuf,
    missing_symbols: MissingSymbols,
    writer: ProfileWriter<Stream>,
    /// A write that failed: the end fails on the same file, said there, once.
    write_failed: Option<std::io::Error>,
    previous_cut_ns: u64,
    window_start_ns: u64,
    /// The session's start, on the monotonic clock and the wall clock (ms).
    start: (u64, f64),
    interval_ms: f64,
    /// Windows so far, the one being recorded included.
    pub count: usize,
}

/// What was written, for the summary.
pub(super) struct Written {
    /// The last window merged into the others, as written.
    pub recording: Recording,
    /// Processes and threads written before the end (not in `recording`).
    pub processes_and_threads: (usize, usize),
    /// Bytes of the output.
    pub bytes: u64,
    /// The host as the profile's meta says it.
    pub host: HostInfo,
    /// Code without names, over every window.
    pub missing_symbols: MissingSymbols,
}

impl Windows {
    /// The first window, starting with the session; the output's writer opened.
    pub fn new(
        output: &OutputFile,
        session: &CaptureSession,
        frequency: u64,
    ) -> Result<Windows, RecordError> {
        let spill_dir = match output.path().parent() {
            Some(d) if output.is_file() => {
                if d.as_os_str().is_empty() {
                    Path::new(".").to_path_buf()
                } else {
                    d.to_path_buf()
                }
            }
            _ => std::env::temp_dir(),
        };
        let writer = ProfileWriter::new(output.stream()?).map_err(|e| output_error(output, e))?;
        Ok(Windows {
            merger: None,
            spill: None,
            spill_errors: Vec::new(),
            spill_dir,
            missing_symbols: MissingSymbols::default(),
            writer,
            write_failed: None,
            previous_cut_ns: session.start_ns,
            window_start_ns: session.start_ns,
            start: (session.start_ns, session.start_wall_ms),
            interval_ms: 1000.0 / frequency as f64,
            count: 1,
        })
    }

    fn range(&self, end_ns: u64, continuous: bool) -> WindowRange {
        let (start_ns, start_wall_ms) = self.start;
        WindowRange {
            start_ns: self.window_start_ns,
            end_ns,
            start_wall_ms: start_wall_ms + (self.window_start_ns - start_ns) as f64 / 1e6,
            interval_ms: self.interval_ms,
            continuous,
        }
    }

    /// The window is full and was cut at `end_ns`: finish it, merge it,
    /// write what ended before the previous cut, spill what still runs.
    pub fn cut(&mut self, collector: &mut Collector, end_ns: u64) {
        let range = self.range(end_ns, true);
        let merged = self.merger.get_or_insert_with(Merger::default);
        // Seconds of work beside a fork storm: the rings' reader keeps
        // them drained meanwhile (see `capture`).
        let window = collector.finish_window(range);
        self.missing_symbols.add(&window);
        merged.add(window);
        // What ended before the previous cut has nothing more to come: a
        // record drained late is still in the window of its time.
        if self.write_failed.is_none() {
            let (mut processes, counters) = merged.take_ended(self.previous_cut_ns);
            if let Some(spill) = self.spill.as_mut() {
                restore_parts(spill, &mut processes, &mut self.spill_errors);
            }
            if let Err(e) = self
                .writer
                .write_ended(merged.tables(), &processes, &counters)
            {
                self.write_failed = Some(e);
            }
        }
        let spill = self
            .spill
            .get_or_insert_with(|| Spill::new(&self.spill_dir));
        for (owner, part) in merged.take_parts(SPILL_MIN_RECORDS) {
            spill.put(owner, &part);
        }
        // What the window's raw records took is not given back to the
        // kernel: the next window reuses it (`sys::process::MallocUse`).
        self.count += 1;
        self.previous_cut_ns = end_ns;
        self.window_start_ns = end_ns;
    }

    /// The recording stopped at `end_ns`: its last window finished and
    /// merged into the others.
    pub fn last(&mut self, collector: &mut Collector, end_ns: u64, timing: &Timing) -> Recording {
        let last = collector.finish_window(self.range(end_ns, false));
        self.missing_symbols.add(&last);
        timing.mark("replay, resolve and symbolicate");
        let recording = match self.merger.take() {
            None => last,
            Some(mut m) => {
                m.add(last);
                m.finish()
            }
        };
        timing.mark("merge the windows");
        recording
    }

    /// Write what is still running and the profile's end into `output`,
    /// and commit it.
    pub fn finish(
        self,
        mut recording: Recording,
        output: OutputFile,
        focus: Option<u32>,
        verbose: bool,
        timing: &Timing,
    ) -> Result<Written, RecordError> {
        let host = HostInfo::current(std::env::args().collect::<Vec<_>>().join(" "));
        let processes_and_threads = self.writer.written();
        if let Some(spill) = &self.spill {
            recording.warnings.extend(spill.fallback.clone());
            if verbose {
                let (records, markers, bytes) = spill.totals();
                eprintln!(
                    "sysprof: {records} records of running threads kept on disk until written ({markers} markers of them; {:.1} MB)",
                    bytes as f64 / 1e6
                );
            }
        }
        recording.warnings.extend(self.spill_errors);
        let stream = match self.write_failed {
            Some(e) => Err(e),
            None => self
                .writer
                .finish(&recording, self.spill.as_ref(), &host, focus),
        };
        let stream = stream.map_err(|e| output_error(&output, e))?;
        timing.mark("write what is still running, meta and libs");
        let bytes = output.commit_stream(stream)?;
        timing.mark("finish the compression, sync and rename");
        Ok(Written {
            recording,
            processes_and_threads,
            bytes,
            host,
            missing_symbols: self.missing_symbols,
        })
    }
}

/// A thread or CPU track with fewer records (samples, off-CPU samples,
/// markers) than this keeps them in memory between windows: a chunk of its
/// own on disk would cost more than it saves.
const SPILL_MIN_RECORDS: usize = 64;

/// Put back into `processes` (ended, about to be written) the records their
/// threads had spilled; a spill that cannot be read back is said in `errors`.
fn restore_parts(
    spill: &mut Spill,
    processes: &mut [crate::model::recording::ProcessRecord],
    errors: &mut Vec<String>,
) {
    use crate::model::merge::TrackKey;
    for p in processes {
        for t in &mut p.threads {
            let owner = TrackKey::of(p.pid, p.start_ns, t);
            if let Err(e) = spill.restore_into(owner, t) {
                errors.push(format!(
                    "samples and markers of {} (pid {}, tid {}) before the last window were lost: their file could not be read back ({e})",
                    t.name, p.pid, t.tid
                ));
            }
        }
    }
}
