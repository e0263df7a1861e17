//! pprof: a window (or any recording) as a gzip-compressed `profile.proto`.
//!
//! In: a [`Recording`] and the host's [`Labels`]. Out: the bytes of a
//! `perftools.profiles.Profile`, gzip-compressed, as `go tool pprof`,
//! Pyroscope, Parca and Grafana read it. Sample types: `samples/count`,
//! `cpu/nanoseconds` (each on-CPU sample weighs one sampling period) and
//! `off_cpu/nanoseconds` (each off-CPU interval its length), so backends
//! show off-CPU time apart; `cpu` is the default. Samples with the same
//! stack and labels are added up (pprof keeps no timestamps: that is what
//! the store and OTLP are for). Labels: `pid`, `tid` (numbers), `thread`,
//! `process`, `container` or `unit`, and a Go goroutine's pprof labels as
//! its program set them and its id as the number `goroutine` (its labels
//! and id frames are no locations; Pyroscope's profiles leave the id out:
//! each label set is a series there). One location per distinct frame, its
//! inlined calls as several lines (innermost first, as pprof wants);
//! mappings carry build ids; functions file names and lines.
//!
//! The messages are prost's, declared in [`proto`] with the field numbers
//! of the published `profile.proto` (the wire contract): prost does the
//! encoding; declaring them here spares a `protoc` at build time.

use std::io::Write;

use rustc_hash::FxHashMap;

use super::Labels;
use crate::model::recording::{Recording, NO_LIB};
use crate::model::stack_tree::NO_PARENT;

/// `perftools.profiles` messages, as published in google/pprof's `proto/profile.proto`.
#[allow(missing_docs)]
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The string table: index 0 is "".
struct Strings(crate::model::strings::Interner);

impl Strings {
    fn new() -> Strings {
        let mut s = Strings(Default::default());
        s.get("");
        s
    }

    fn get(&mut self, v: &str) -> i64 {
        self.0.intern(v) as i64
    }
}

/// Which part of a recording to turn into a profile: one process
/// (Pyroscope wants a series per service) or all.
pub type ProcessFilter<'a> = &'a dyn Fn(&crate::model::recording::ProcessRecord) -> bool;

/// `rec` as a pprof Profile (all processes).
pub fn build(rec: &Recording, labels: &Labels) -> proto::Profile {
    build_filtered(rec, labels, &|_| true, Goroutines::Labelled)
}

/// Whether a Go sample's goroutine id becomes its label `goroutine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goroutines {
    /// Each sample labelled with its goroutine (pprof files, OTLP).
    Labelled,
    /// Not labelled: a store that makes a series of each label set
    /// (Pyroscope) would make one per goroutine.
    Left,
}

/// `rec` as a pprof Profile, with the processes `keep` accepts.
pub fn build_filtered(
    rec: &Recording,
    labels: &Labels,
    keep: ProcessFilter<'_>,
    goroutines: Goroutines,
) -> proto::Profile {
    let mut tables = Tables::new(rec);
    tables.goroutines = goroutines;
    let s = &mut tables.strings;
    let sample_type = vec![
        value_type(s, "samples", "count"),
        value_type(s, "cpu", "nanoseconds"),
        value_type(s, "off_cpu", "nanoseconds"),
    ];
    let period_type = value_type(s, "cpu", "nanoseconds");
    let period = (rec.interval_ms * 1e6).round() as i64;
    let sums = sum_samples(rec, keep, period);
    let samples = tables.samples(&sums, labels);
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: tables.mappings,
        location: tables.locations,
        function: tables.functions,
        string_table: tables.strings.0.take_strings(),
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: (rec.start_wall_ms * 1e6) as i64,
        duration_nanos: rec.end_ns.saturating_sub(rec.start_ns) as i64,
        period_type: Some(period_type),
        period,
        comment: Vec::new(),
        default_sample_type: 1,
    }
}

fn value_type(s: &mut Strings, t: &str, u: &str) -> proto::ValueType {
    proto::ValueType {
        r#type: s.get(t),
        unit: s.get(u),
    }
}

/// Samples with equal stack and labels added up: (process, thread, stack)
/// -> [samples, on-CPU ns, off-CPU ns].
type Sums = FxHashMap<(u32, u32, u32), [i64; 3]>;

/// The samples of the processes `keep` accepts, added up by
/// (process, thread, stack); each on-CPU sample weighs `period` ns.
fn sum_samples(rec: &Recording, keep: ProcessFilter<'_>, period: i64) -> Sums {
    let mut sums: Sums = FxHashMap::default();
    for (pi, p) in rec.processes.iter().enumerate() {
        if !keep(p) {
            continue;
        }
        for (ti, t) in p.threads.iter().enumerate() {
            for &s in &t.samples.stack {
                let v = sums.entry((pi as u32, ti as u32, s)).or_default();
                v[0] += 1;
                v[1] += period;
            }
            for (&s, &d) in t.off_cpu.stack.iter().zip(&t.off_cpu.duration_ns) {
                sums.entry((pi as u32, ti as u32, s)).or_default()[2] += d as i64;
            }
        }
    }
    sums
}

/// The labels a Go goroutine's labels frame carries; None for any other frame.
pub(super) fn go_labels(
    frame: &crate::model::recording::FrameRecord,
) -> Option<Vec<(String, String)>> {
    if frame.kind != crate::model::recording::FrameKind::GoLabels {
        return None;
    }
    let name = &frame.symbols.funcs.first()?.name;
    crate::model::goroutine_labels::parse_labels(name)
}

/// The label a Go sample's goroutine id is under (a number).
pub(super) const GOROUTINE_LABEL: &str = "goroutine";

/// A label with a string value.
fn str_label(s: &mut Strings, k: i64, v: &str) -> proto::Label {
    proto::Label {
        key: k,
        str: s.get(v),
        num: 0,
        num_unit: 0,
    }
}

/// A label with a number value.
fn num_label(k: i64, num: i64) -> proto::Label {
    proto::Label {
        key: k,
        str: 0,
        num,
        num_unit: 0,
    }
}

/// The profile's tables as they fill: strings, mappings, functions and
/// locations, each interned once, in the order first used.
struct Tables<'r> {
    rec: &'r Recording,
    strings: Strings,
    mappings: Vec<proto::Mapping>,
    mapping_of_lib: FxHashMap<u32, u64>,
    functions: Vec<proto::Function>,
    function_of: FxHashMap<(String, Option<String>, Option<u32>), u64>,
    locations: Vec<proto::Location>,
    location_of_frame: FxHashMap<u32, u64>,
    /// Which libraries have a named frame.
    lib_named: Vec<bool>,
    goroutines: Goroutines,
}

impl<'r> Tables<'r> {
    fn new(rec: &'r Recording) -> Tables<'r> {
        // Which libraries have a named frame (one pass; not one per mapping).
        let mut lib_named = vec![false; rec.libs.len()];
        for f in rec
            .frames
            .iter()
            .filter(|f| f.lib != NO_LIB && !f.symbols.funcs.is_empty())
        {
            if let Some(n) = lib_named.get_mut(f.lib as usize) {
                *n = true;
            }
        }
        Tables {
            rec,
            goroutines: Goroutines::Labelled,
            strings: Strings::new(),
            mappings: Vec::new(),
            mapping_of_lib: FxHashMap::default(),
            functions: Vec::new(),
            function_of: FxHashMap::default(),
            locations: Vec::new(),
            location_of_frame: FxHashMap::default(),
            lib_named,
        }
    }

    /// The samples of `sums`, ordered by (process, thread, stack), with
    /// their locations and labels.
    fn samples(&mut self, sums: &Sums, labels: &Labels) -> Vec<proto::Sample> {
        let rec = self.rec;
        let mut keys: Vec<(u32, u32, u32)> = sums.keys().copied().collect();
        keys.sort_unstable();
        let mut samples = Vec::with_capacity(keys.len());
        let keys_of_labels = LabelKeys::new(&mut self.strings, labels);
        let mut path = Vec::new();
        for key in keys {
            let (pi, ti, node) = key;
            let p = &rec.processes[pi as usize];
            let t = &p.threads[ti as usize];
            path.clear();
            let mut goroutine_labels = None;
            let mut goroutine = None;
            let mut n = node;
            while n != NO_PARENT {
                let f = rec.stacks.key(n) as u32;
                let frame = &rec.frames[f as usize];
                // A goroutine's labels and id are the sample's, not frames.
                if frame.kind == crate::model::recording::FrameKind::Goroutine {
                    goroutine = crate::model::goroutine_labels::goroutine_of_frame(frame);
                } else {
                    match go_labels(frame) {
                        Some(labels) => goroutine_labels = Some(labels),
                        None => path.push(f),
                    }
                }
                n = rec.stacks.parent(n);
            }
            // Leaf first.
            let location_id: Vec<u64> = path.iter().map(|&f| self.location_for(f)).collect();
            let mut label = keys_of_labels.labels(&mut self.strings, p, t);
            for (k, v) in goroutine_labels.into_iter().flatten() {
                let key = self.strings.get(&k);
                label.push(str_label(&mut self.strings, key, &v));
            }
            if let Some(id) = goroutine.filter(|_| self.goroutines == Goroutines::Labelled) {
                let key = self.strings.get(GOROUTINE_LABEL);
                label.push(num_label(key, id as i64));
            }
            samples.push(proto::Sample {
                location_id,
                value: sums[&key].to_vec(),
                label,
            });
        }
        samples
    }

    /// The location of frame `f`, made the first time.
    fn location_for(&mut self, f: u32) -> u64 {
        if let Some(&id) = self.location_of_frame.get(&f) {
            return id;
        }
        let frame = &self.rec.frames[f as usize];
        let mapping_id = if frame.lib == NO_LIB || frame.is_pseudo() {
            0
        } else {
            self.mapping_for(frame.lib)
        };
        // Innermost first: pprof lists the inlined calls before their caller.
        let line = frame
            .symbols
            .funcs
            .iter()
            .rev()
            .map(|fa| proto::Line {
                function_id: self.function_for(fa),
                line: fa.line.unwrap_or(0) as i64,
                column: 0,
            })
            .collect();
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            address: if frame.is_pseudo() { 0 } else { frame.address },
            line,
            is_folded: false,
        });
        self.location_of_frame.insert(f, id);
        id
    }

    /// The mapping of library `lib_index`, made the first time.
    fn mapping_for(&mut self, lib_index: u32) -> u64 {
        if let Some(&id) = self.mapping_of_lib.get(&lib_index) {
            return id;
        }
        let lib = &self.rec.libs[lib_index as usize];
        let id = self.mappings.len() as u64 + 1;
        let named = self.lib_named[lib_index as usize];
        self.mappings.push(proto::Mapping {
            id,
            memory_start: 0,
            memory_limit: 0,
            file_offset: 0,
            filename: self.strings.get(&lib.path),
            build_id: self.strings.get(
                &lib.build_id
                    .as_deref()
                    .map(crate::sys::hex::hex)
                    .unwrap_or_default(),
            ),
            has_functions: named,
            has_filenames: named,
            has_line_numbers: named,
            has_inline_frames: named,
        });
        self.mapping_of_lib.insert(lib_index, id);
        id
    }

    /// The function `fa` is in, made the first time.
    fn function_for(&mut self, fa: &crate::model::symbols::FuncAtAddr) -> u64 {
        // A Python function is also told apart by its first line.
        let key = (fa.name.clone(), fa.file.clone(), fa.start_line);
        if let Some(&id) = self.function_of.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name = self.strings.get(&fa.name);
        let start_line = fa.start_line.unwrap_or(0) as i64;
        self.functions.push(proto::Function {
            id,
            name,
            system_name: name,
            filename: self.strings.get(fa.file.as_deref().unwrap_or("")),
            start_line,
        });
        self.function_of.insert(key, id);
        id
    }
}

/// The label keys' strings, and the host's name.
struct LabelKeys {
    pid: i64,
    tid: i64,
    thread: i64,
    process: i64,
    container: i64,
    unit: i64,
    host: i64,
    host_name: i64,
}

impl LabelKeys {
    fn new(s: &mut Strings, labels: &Labels) -> LabelKeys {
        LabelKeys {
            pid: s.get("pid"),
            tid: s.get("tid"),
            thread: s.get("thread"),
            process: s.get("process"),
            container: s.get("container"),
            unit: s.get("unit"),
            host: s.get("host"),
            host_name: s.get(&labels.host_name),
        }
    }

    /// The labels of a sample of thread `t` of process `p`.
    fn labels(
        &self,
        s: &mut Strings,
        p: &crate::model::recording::ProcessRecord,
        t: &crate::model::recording::ThreadRecord,
    ) -> Vec<proto::Label> {
        // A folded track (a compacted run's brief processes) has no pid or
        // tid of its own, and is named for its processes.
        let (pid, tid) = if p.folded == 0 {
            (p.pid as i64, t.tid as i64)
        } else {
            (0, 0)
        };
        let mut label = vec![
            num_label(self.pid, pid),
            num_label(self.tid, tid),
            str_label(
                s,
                self.thread,
                if p.folded == 0 {
                    &t.name
                } else {
                    p.base_name()
                },
            ),
            str_label(s, self.process, p.base_name()),
            proto::Label {
                key: self.host,
                str: self.host_name,
                num: 0,
                num_unit: 0,
            },
        ];
        match super::cgroup_identity(p) {
            Some(super::CgroupIdentity::Container(id)) => {
                label.push(str_label(s, self.container, &id))
            }
            Some(super::CgroupIdentity::Unit(u)) => label.push(str_label(s, self.unit, &u)),
            None => {}
        }
        label
    }
}

/// gzip of the encoded profile.
pub fn gzip(p: &proto::Profile) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(p);
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 3),
        flate2::Compression::new(6),
    );
    enc.write_all(&raw).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

/// `rec` as gzip-compressed pprof bytes.
pub fn encode_gzip(rec: &Recording, labels: &Labels) -> Vec<u8> {
    gzip(&build(rec, labels))
}
