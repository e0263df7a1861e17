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
//! `process`, `container` or `unit`. One location per distinct frame, its
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
    build_filtered(rec, labels, &|_| true)
}

/// `rec` as a pprof Profile, with the processes `keep` accepts.
pub fn build_filtered(rec: &Recording, labels: &Labels, keep: ProcessFilter<'_>) -> proto::Profile {
    let mut strings = Strings::new();
    let vt = |s: &mut Strings, t: &str, u: &str| proto::ValueType {
        r#type: s.get(t),
        unit: s.get(u),
    };
    let sample_type = vec![
        vt(&mut strings, "samples", "count"),
        vt(&mut strings, "cpu", "nanoseconds"),
        vt(&mut strings, "off_cpu", "nanoseconds"),
    ];
    let period_type = vt(&mut strings, "cpu", "nanoseconds");
    let period = (rec.interval_ms * 1e6).round() as i64;

    let mut mappings: Vec<proto::Mapping> = Vec::new();
    let mut mapping_of_lib: FxHashMap<u32, u64> = FxHashMap::default();
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_of: FxHashMap<(String, Option<String>, Option<u32>), u64> =
        FxHashMap::default();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut location_of_frame: FxHashMap<u32, u64> = FxHashMap::default();

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
    let mut location_for = |f: u32, strings: &mut Strings| -> u64 {
        if let Some(&id) = location_of_frame.get(&f) {
            return id;
        }
        let frame = &rec.frames[f as usize];
        let mapping_id = if frame.lib == NO_LIB || frame.pseudo {
            0
        } else {
            *mapping_of_lib.entry(frame.lib).or_insert_with(|| {
                let lib = &rec.libs[frame.lib as usize];
                let id = mappings.len() as u64 + 1;
                let named = lib_named[frame.lib as usize];
                mappings.push(proto::Mapping {
                    id,
                    memory_start: 0,
                    memory_limit: 0,
                    file_offset: 0,
                    filename: strings.get(&lib.path),
                    build_id: strings.get(
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
                id
            })
        };
        // Innermost first: pprof lists the inlined calls before their caller.
        let line = frame
            .symbols
            .funcs
            .iter()
            .rev()
            .map(|fa| {
                // A Python function is also told apart by its first line.
                let key = (fa.name.clone(), fa.file.clone(), fa.start_line);
                let function_id = *function_of.entry(key).or_insert_with(|| {
                    let id = functions.len() as u64 + 1;
                    let name = strings.get(&fa.name);
                    let start_line = fa.start_line.unwrap_or(0) as i64;
                    functions.push(proto::Function {
                        id,
                        name,
                        system_name: name,
                        filename: strings.get(fa.file.as_deref().unwrap_or("")),
                        start_line,
                    });
                    id
                });
                proto::Line {
                    function_id,
                    line: fa.line.unwrap_or(0) as i64,
                    column: 0,
                }
            })
            .collect();
        let id = locations.len() as u64 + 1;
        locations.push(proto::Location {
            id,
            mapping_id,
            address: if frame.pseudo { 0 } else { frame.address },
            line,
            is_folded: false,
        });
        location_of_frame.insert(f, id);
        id
    };

    // Samples with equal stack and labels added up: (process, thread, stack) -> values.
    let mut sums: FxHashMap<(u32, u32, u32), [i64; 3]> = FxHashMap::default();
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
    let mut keys: Vec<(u32, u32, u32)> = sums.keys().copied().collect();
    keys.sort_unstable();
    let mut samples = Vec::with_capacity(keys.len());
    let k_pid = strings.get("pid");
    let k_tid = strings.get("tid");
    let k_thread = strings.get("thread");
    let k_process = strings.get("process");
    let k_container = strings.get("container");
    let k_unit = strings.get("unit");
    let k_host = strings.get("host");
    let host = strings.get(&labels.host_name);
    let mut path = Vec::new();
    for key in keys {
        let (pi, ti, node) = key;
        let p = &rec.processes[pi as usize];
        let t = &p.threads[ti as usize];
        path.clear();
        let mut n = node;
        while n != NO_PARENT {
            path.push(rec.stacks.key(n) as u32);
            n = rec.stacks.parent(n);
        }
        // Leaf first.
        let location_id: Vec<u64> = path
            .iter()
            .map(|&f| location_for(f, &mut strings))
            .collect();
        let str_label = |s: &mut Strings, k: i64, v: &str| proto::Label {
            key: k,
            str: s.get(v),
            num: 0,
            num_unit: 0,
        };
        let mut label = vec![
            proto::Label {
                key: k_pid,
                str: 0,
                num: p.pid as i64,
                num_unit: 0,
            },
            proto::Label {
                key: k_tid,
                str: 0,
                num: t.tid as i64,
                num_unit: 0,
            },
            str_label(&mut strings, k_thread, &t.name),
            str_label(&mut strings, k_process, &p.name),
            proto::Label {
                key: k_host,
                str: host,
                num: 0,
                num_unit: 0,
            },
        ];
        match super::cgroup_identity(p) {
            Some(super::CgroupIdentity::Container(id)) => {
                label.push(str_label(&mut strings, k_container, &id))
            }
            Some(super::CgroupIdentity::Unit(u)) => label.push(str_label(&mut strings, k_unit, &u)),
            None => {}
        }
        samples.push(proto::Sample {
            location_id,
            value: sums[&key].to_vec(),
            label,
        });
    }
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.0.take_strings(),
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
