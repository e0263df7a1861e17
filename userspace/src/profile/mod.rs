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
pub mod validate;

mod markers;
mod meta;
pub(crate) mod schema;
mod tables;
mod threads;
pub mod warnings;

use rustc_hash::FxHashMap;

use crate::model::recording::{CounterRecord, Recording};

pub use meta::{breakpad_id, HostInfo};
pub use schema::Profile;
use threads::{build_cpu_track, build_machine_track, build_thread, initial_threads, TrackFacts, MACHINE_PID};

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
}

/// Per-CPU tracks use tids from here up (real tids stay below 2^22).
pub const CPU_TRACK_TID_BASE: u32 = 10_000_000;

/// The profile of `rec`, ready to write: `meta`, `libs` and counters are
/// built now; each thread's tables are built as it is serialized and
/// dropped once written ([`ProfileOut`]).
///
/// `focus_pid` is the process the user asked about (the command of `record
/// -- CMD`): its main thread opens selected. See `threads::initial_threads`.
pub fn build_profile<'a>(rec: &'a Recording, host: &HostInfo, focus_pid: Option<u32>) -> ProfileOut<'a> {
    let ms = |ns: u64| ms_since(rec, ns);
    let mut main_thread_index: FxHashMap<u32, usize> = FxHashMap::default();
    let mut tracks = Vec::new();
    for p in &rec.processes {
        for t in &p.threads {
            if t.tid == p.pid || !main_thread_index.contains_key(&p.pid) {
                main_thread_index.insert(p.pid, tracks.len());
            }
            tracks.push(TrackFacts { pid: Some(p.pid), main: t.tid == p.pid, profiler: p.profiler, cpu_samples: t.samples.time_ns.len() });
        }
    }
    for _ in &rec.cpu_tracks {
        tracks.push(TrackFacts { pid: None, main: false, profiler: false, cpu_samples: 0 });
    }
    // Counters with nothing to draw are left out (see `counter_draws_something`);
    // the machine's hang under a track of their own, which opens visible.
    let drawn: Vec<&CounterRecord> = rec.counters.iter().filter(|c| meta::counter_draws_something(c)).collect();
    let machine = drawn.iter().any(|c| c.pid == 0).then(|| {
        tracks.push(TrackFacts { pid: None, main: true, profiler: false, cpu_samples: 0 });
        tracks.len() - 1
    });
    let (visible, selected) = initial_threads(&tracks, focus_pid);
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
        meta: meta::build_meta(rec, host, visible, selected, &ms),
        libs: rec.libs.iter().map(meta::lib_json).collect(),
        threads: ThreadsOut { rec, machine: machine.is_some() },
        pages: [],
        counters,
        profiler_overhead: [],
    }
}

/// A profile as it is written: the fields of [`Profile`], in its order,
/// with threads built one at a time while serialized ([`ThreadsOut`]). A
/// thread's tables (strings, frames, funcs, stacks, per thread, as the
/// format wants) took most of `record`'s peak memory when every thread's
/// were held at once: 140 of 155 MB of heap for 20 s beside a fork loop
/// (10,600 processes), found with heaptrack.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileOut<'a> {
    meta: schema::Meta,
    libs: Vec<serde_json::Value>,
    threads: ThreadsOut<'a>,
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
    /// Whether the machine's track is written (it has counters to draw).
    machine: bool,
}

impl serde::Serialize for ThreadsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let rec = self.rec;
        let ms = |ns: u64| ms_since(rec, ns);
        let count = rec.processes.iter().map(|p| p.threads.len()).sum::<usize>() + rec.cpu_tracks.len() + usize::from(self.machine);
        let mut seq = serializer.serialize_seq(Some(count))?;
        for p in &rec.processes {
            for t in &p.threads {
                seq.serialize_element(&build_thread(rec, p, t, &ms))?;
            }
        }
        for (cpu, markers) in &rec.cpu_tracks {
            seq.serialize_element(&build_cpu_track(rec, *cpu, markers, &ms))?;
        }
        if self.machine {
            seq.serialize_element(&build_machine_track())?;
        }
        seq.end()
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
