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
//!
//! In: a [`Recording`], the machine's facts, the process asked about.
//! Out: a [`Profile`] to serialize. The format is `schema`; a thread's
//! tables are built in `tables`, its track in `threads`, its markers in
//! `markers`, `meta`, libs and counters in `meta`; which warnings Profile
//! Info lists, [`warnings`]. Reading a profile back
//! is [`input`], writing the file [`output`], folded stacks [`folded`],
//! checking one [`validate`].

pub mod folded;
pub mod input;
pub mod output;
pub mod spill;
pub mod validate;

mod json_numbers;
mod markers;
mod meta;
pub(crate) mod schema;
mod tables;
mod thread_names;
mod threads;
pub mod warnings;

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::model::merge::TrackKey;
use crate::model::recording::{CounterRecord, ProcessRecord, Recording};

pub use meta::{breakpad_id, HostInfo};
pub use schema::Profile;
use threads::{build_cpu_track, build_machine_track, build_thread, initial_threads, TrackFacts};
pub use threads::{is_machine_track, MACHINE_PID, OLD_MACHINE_PID};

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
    /// Interpreted code (Python functions).
    pub const INTERPRETED: u32 = 6;
    /// Interpreted Java methods.
    pub const JAVA: u32 = 7;
    /// The Java category's subcategory of a method HotSpot's interpreter
    /// ran (0, Other: a stored frame that did not say which).
    pub const JAVA_INTERPRETED: u32 = 1;
    /// The Java category's subcategory of a method HotSpot compiled.
    pub const JAVA_COMPILED: u32 = 2;
    /// JavaScript functions (V8's).
    pub const JAVASCRIPT: u32 = 8;
    /// PHP functions.
    pub const PHP: u32 = 9;
    /// Perl subs.
    pub const PERL: u32 = 10;
    /// Ruby methods and blocks.
    pub const RUBY: u32 = 11;
}

/// Per-CPU tracks use tids from here up (real tids stay below 2^22).
pub const CPU_TRACK_TID_BASE: u32 = 10_000_000;

/// The profile of `rec`, ready to write: `meta`, `libs` and counters are
/// built now; each thread's tables are built as it is serialized and
/// dropped once written ([`ProfileOut`]).
///
/// `focus_pid` is the process the user asked about (the command of `record
/// -- CMD`): its main thread opens selected, unless it barely ran. See
/// `threads::initial_threads`.
pub fn build_profile<'a>(
    rec: &'a Recording,
    host: &HostInfo,
    focus_pid: Option<u32>,
) -> ProfileOut<'a> {
    build_after(rec, None, host, focus_pid, &[])
}

/// [`build_profile`] for the threads that follow `before` (those a
/// [`ProfileWriter`] wrote already): thread indexes count from there, and
/// which threads open visible is chosen among all of them.
fn build_after<'a>(
    rec: &'a Recording,
    spill: Option<&'a spill::Spill>,
    host: &HostInfo,
    focus_pid: Option<u32>,
    before: &[TrackFacts],
) -> ProfileOut<'a> {
    let ms = |ns: u64| ms_since(rec, ns);
    let mut main_thread_index: FxHashMap<u32, usize> = FxHashMap::default();
    let mut tracks: Vec<TrackFacts> = before.to_vec();
    for p in &rec.processes {
        for t in &p.threads {
            if t.tid == p.pid || !main_thread_index.contains_key(&p.pid) {
                main_thread_index.insert(p.pid, tracks.len());
            }
            let mut facts = TrackFacts::of(p, t);
            facts.cpu_samples +=
                spill.map_or(0, |s| s.samples_of(TrackKey::of(p.pid, p.start_ns, t)));
            tracks.push(facts);
        }
    }
    for _ in &rec.cpu_tracks {
        tracks.push(TrackFacts {
            pid: None,
            main: false,
            named_like_process: false,
            profiler: false,
            cpu_samples: 0,
        });
    }
    // Counters with nothing to draw are left out (see `counter_draws_something`);
    // the machine's hang under a track of their own, which opens visible.
    let drawn: Vec<&CounterRecord> = rec
        .counters
        .iter()
        .filter(|c| meta::counter_draws_something(c))
        .collect();
    // The CPUs' tracks are the machine's too: written with it.
    let machine = threads::has_machine_track(rec).then(|| {
        tracks.push(TrackFacts {
            pid: None,
            main: true,
            named_like_process: false,
            profiler: false,
            cpu_samples: 0,
        });
        tracks.len() - 1
    });
    let (visible, selected) = initial_threads(&tracks, focus_pid, rec.whole_system);
    let counters: Vec<serde_json::Value> = drawn
        .iter()
        .filter_map(|c| {
            let (pid, main) = match c.pid {
                0 => (MACHINE_PID.to_string(), machine?),
                pid => (pid.to_string(), *main_thread_index.get(&pid)?),
            };
            Some(meta::counter_json(c, &pid, main, rec.interval_ms, &ms))
        })
        .collect();
    ProfileOut {
        threads: ThreadsOut {
            rec,
            machine: machine.is_some(),
            spill,
        },
        meta: meta::build_meta(rec, host, visible, selected, &ms),
        libs: rec.libs.iter().map(meta::lib_json).collect(),
        pages: [],
        counters,
        profiler_overhead: [],
    }
}

/// A profile as it is written: the fields of [`Profile`], threads first
/// (so that a [`ProfileWriter`] can write threads before the rest is
/// known), with threads built one at a time while serialized
/// ([`ThreadsOut`]). A thread's tables (strings, frames, funcs, stacks, per
/// thread, as the format wants) took most of `record`'s peak memory when
/// every thread's were held at once: 140 of 155 MB of heap for 20 s beside
/// a fork loop (10,600 processes), found with heaptrack.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileOut<'a> {
    threads: ThreadsOut<'a>,
    meta: schema::Meta,
    libs: Vec<serde_json::Value>,
    pages: [(); 0],
    counters: Vec<serde_json::Value>,
    profiler_overhead: [(); 0],
}

impl ProfileOut<'_> {
    /// The profile as a JSON value tree (tests and small tools).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("serializable")
    }
}

/// The threads of a recording, in the order `build_profile` counted them
/// (each process's threads, the CPU tracks, the machine's track), each
/// built when serialized.
pub struct ThreadsOut<'a> {
    rec: &'a Recording,
    /// Whether the machine's track is written (it has counters to draw, or
    /// CPU tracks to hold).
    machine: bool,
    /// Where the records taken out of `rec` while recording are: each
    /// process's are put back before it (and only while it) is built.
    spill: Option<&'a spill::Spill>,
}

impl ThreadsOut<'_> {
    /// How many threads there are.
    fn len(&self) -> usize {
        self.rec
            .processes
            .iter()
            .map(|p| p.threads.len())
            .sum::<usize>()
            + self.rec.cpu_tracks.len()
            + usize::from(self.machine)
    }

    /// Build each thread in turn and hand it to `each`; `io` says a
    /// spill's read failing as `each`'s error.
    fn each<E>(
        &self,
        io: impl Fn(std::io::Error) -> E,
        mut each: impl FnMut(&schema::Thread) -> Result<(), E>,
    ) -> Result<(), E> {
        let rec = self.rec;
        let ms = |ns: u64| ms_since(rec, ns);
        // Once per recording, not per thread (a scan of every frame).
        let goroutines = markers::has_goroutines(rec);
        for p in &rec.processes {
            // A process with records kept on disk is built from a copy
            // with them put back: one process's at a time in memory.
            let restored;
            let p = match self.spill.filter(|s| {
                p.threads
                    .iter()
                    .any(|t| s.holds(TrackKey::of(p.pid, p.start_ns, t)))
            }) {
                None => p,
                Some(spill) => {
                    let mut whole = p.clone();
                    for t in &mut whole.threads {
                        spill
                            .load_before(TrackKey::of(p.pid, p.start_ns, t), t)
                            .map_err(&io)?
                            .prepend_to(t);
                    }
                    restored = whole;
                    &restored
                }
            };
            let names = thread_names::thread_names(rec, p);
            for (t, name) in p.threads.iter().zip(names) {
                each(&build_thread(rec, (p, t), name, goroutines, &ms))?;
            }
        }
        for (cpu, markers) in &rec.cpu_tracks {
            match self.spill {
                Some(spill) if spill.holds(TrackKey::Cpu(*cpu)) => {
                    let whole = spill
                        .cpu_markers(TrackKey::Cpu(*cpu), markers)
                        .map_err(&io)?;
                    each(&build_cpu_track(rec, *cpu, &whole, &ms))?
                }
                _ => each(&build_cpu_track(rec, *cpu, markers, &ms))?,
            }
        }
        if self.machine {
            each(&build_machine_track(rec, &ms))?;
        }
        Ok(())
    }
}

impl serde::Serialize for ThreadsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        self.each(<S::Error as serde::ser::Error>::custom, |t| {
            seq.serialize_element(t)
        })?;
        seq.end()
    }
}

/// A profile written as it is made: finished processes' threads first, as
/// `record` takes them out between windows ([`ProfileWriter::write_ended`]),
/// then at the end the rest of the recording ([`ProfileWriter::finish`]).
/// What is written is no longer held, so `record`'s memory follows what is
/// still running, not how long it ran. Its JSON is [`ProfileOut`]'s: the
/// `threads` key comes first in the object, which JSON allows.
pub struct ProfileWriter<W: Write> {
    out: W,
    /// The written threads, for which open visible and for thread indexes.
    written: Vec<TrackFacts>,
    /// The written processes' counters (JSON objects, comma-separated):
    /// they come after every thread in the file.
    counters: Vec<u8>,
    processes: usize,
}

impl<W: Write> ProfileWriter<W> {
    /// Start the profile on `out`.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(b"{\"threads\":[")?;
        Ok(ProfileWriter {
            out,
            written: Vec::new(),
            counters: Vec::new(),
            processes: 0,
        })
    }

    /// Processes written so far, and their threads.
    pub fn written(&self) -> (usize, usize) {
        (self.processes, self.written.len())
    }

    /// Write `processes` (taken out of a merge, with their `counters`) now;
    /// `tables` holds the libraries, frames and stacks they refer to, and
    /// the recording's start, which every later part keeps.
    pub fn write_ended(
        &mut self,
        tables: &Recording,
        processes: &[ProcessRecord],
        counters: &[CounterRecord],
    ) -> std::io::Result<()> {
        let ms = |ns: u64| ms_since(tables, ns);
        // Once for these processes, not per thread (a scan of every frame).
        let goroutines = markers::has_goroutines(tables);
        let mut main_thread_index: FxHashMap<u32, usize> = FxHashMap::default();
        for p in processes {
            let names = thread_names::thread_names(tables, p);
            for (t, name) in p.threads.iter().zip(names) {
                if t.tid == p.pid || !main_thread_index.contains_key(&p.pid) {
                    main_thread_index.insert(p.pid, self.written.len());
                }
                if !self.written.is_empty() {
                    self.out.write_all(b",")?;
                }
                let thread = build_thread(tables, (p, t), name, goroutines, &ms);
                json_numbers::to_writer(&mut self.out, &thread)?;
                self.written.push(TrackFacts::of(p, t));
            }
        }
        self.processes += processes.len();
        for c in counters.iter().filter(|c| meta::counter_draws_something(c)) {
            let Some(&main) = main_thread_index.get(&c.pid) else {
                continue;
            };
            if !self.counters.is_empty() {
                self.counters.push(b',');
            }
            json_numbers::to_writer(
                &mut self.counters,
                &meta::counter_json(c, &c.pid.to_string(), main, tables.interval_ms, &ms),
            )?;
        }
        Ok(())
    }

    /// Write the rest: `rec`'s threads after those written, then `meta`,
    /// `libs` and every counter. `rec` is what the merge finished with: its
    /// libraries are a superset of those the written threads point into,
    /// at the same indexes. Returns the writer (to finish its compression).
    /// `spill` holds records taken out of `rec`'s threads and CPU tracks
    /// while recording: they come before those still in `rec`.
    pub fn finish(
        mut self,
        rec: &Recording,
        spill: Option<&spill::Spill>,
        host: &HostInfo,
        focus_pid: Option<u32>,
    ) -> std::io::Result<W> {
        let profile = build_after(rec, spill, host, focus_pid, &self.written);
        let mut first = self.written.is_empty();
        profile.threads.each(
            |e| e,
            |t| {
                if !std::mem::take(&mut first) {
                    self.out.write_all(b",")?;
                }
                json_numbers::to_writer(&mut self.out, t).map_err(std::io::Error::from)
            },
        )?;
        self.out.write_all(b"],\"meta\":")?;
        json_numbers::to_writer(&mut self.out, &profile.meta)?;
        self.out.write_all(b",\"libs\":")?;
        json_numbers::to_writer(&mut self.out, &profile.libs)?;
        self.out.write_all(b",\"pages\":[],\"counters\":[")?;
        self.out.write_all(&self.counters)?;
        for (i, c) in profile.counters.iter().enumerate() {
            if i > 0 || !self.counters.is_empty() {
                self.out.write_all(b",")?;
            }
            json_numbers::to_writer(&mut self.out, c)?;
        }
        self.out.write_all(b"],\"profilerOverhead\":[]}")?;
        Ok(self.out)
    }
}

/// Milliseconds from the recording's start to `ns`, rounded to the
/// microsecond: the clock's nanoseconds would only lengthen every number in
/// the file.
fn ms_since(rec: &Recording, ns: u64) -> f64 {
    micros(ns as i64 - rec.start_ns as i64) as f64 / 1e3
}

/// Nanoseconds to whole microseconds, rounded to nearest.
fn micros(ns: i64) -> i64 {
    (ns + 500).div_euclid(1000)
}

#[cfg(test)]
mod tests;
