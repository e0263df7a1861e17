//! A written Firefox profile read back: threads, samples, stacks with
//! their frames, markers, and the reason frames of off-CPU stacks.

use std::path::Path;

use serde_json::Value;

/// The leaf of a woken wait's run delay (0.1 ms or more), under its
/// reason's leaf (sysprof's `RUN_DELAY_FRAME_NAME`).
pub const RUN_DELAY_LEAF: &str = "[off-CPU: woken, waiting for a CPU]";

/// An off-CPU stack's reason frame (`[off-CPU: sleeping]`...), given its
/// frame names root first: its leaf, or the frame above a run-delay leaf
/// (the end of the same wait). None for an on-CPU stack.
pub fn off_cpu_reason<'a>(names: impl DoubleEndedIterator<Item = &'a str>) -> Option<&'a str> {
    let mut rev = names.rev();
    let leaf = rev.next()?;
    let reason = if leaf == RUN_DELAY_LEAF {
        rev.next()?
    } else {
        leaf
    };
    reason.starts_with("[off-CPU").then_some(reason)
}

/// A written profile.
pub struct Profile {
    /// The JSON.
    pub json: Value,
}

/// One frame of a sample's stack ([`ThreadView::stack_views`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameView {
    /// Its function's name.
    pub name: String,
    /// Its category's name.
    pub category: String,
    /// Its function's file ("" for none).
    pub file: String,
    /// 0 for a machine frame's own function; 1, 2, ... for the functions
    /// a compiler inlined into it, innermost deepest.
    pub inline_depth: u64,
    /// Its subcategory's name within its category (`meta.categories[c].subcategories`).
    pub subcategory: String,
    /// Native code's library path, the frame's address and its symbol's
    /// start (both relative to the library), where the profile has them.
    pub native: Option<(String, u64, u64)>,
    /// The frame's line, where it has one.
    pub line: Option<u64>,
    /// Its function's first line, where it has one.
    pub first_line: Option<u64>,
    /// Its function's resource's name: a library's name, or `JIT (...)` for
    /// JIT code other than a Java method (`JIT (perf-PID.map)` for the stubs
    /// a JVM's perf map names); "" for none, Java methods included.
    pub resource: String,
}

/// One thread of a profile, with helpers to walk its samples.
pub struct ThreadView<'a> {
    /// The thread's JSON.
    pub t: &'a Value,
}

/// `json` with its markers' `unique-string` fields (as `meta.markerSchema`
/// says) replaced by the texts they index in their thread's
/// `stringArray`, as the Firefox Profiler shows them; the tests read
/// texts. Panics on a field of that format that is not an index of one of
/// the thread's strings: the front end would show "(empty)" there.
fn with_marker_texts(mut json: Value) -> Value {
    let mut indexed: std::collections::HashMap<String, Vec<String>> = Default::default();
    for schema in json["meta"]["markerSchema"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for field in schema["fields"].as_array().into_iter().flatten() {
            if field["format"] == "unique-string" {
                indexed
                    .entry(schema["name"].as_str().unwrap().to_string())
                    .or_default()
                    .push(field["key"].as_str().unwrap().to_string());
            }
        }
    }
    for t in json["threads"].as_array_mut().into_iter().flatten() {
        // Taken out while its markers are read, and put back.
        let taken = std::mem::take(&mut t["stringArray"]);
        let strings = taken.as_array().map(Vec::as_slice).unwrap_or(&[]);
        let name = t["name"].clone();
        for d in t["markers"]["data"].as_array_mut().into_iter().flatten() {
            let Some(keys) = d["type"].as_str().and_then(|k| indexed.get(k)) else {
                continue;
            };
            for key in keys {
                let Some(v) = d.get_mut(key.as_str()) else {
                    continue;
                };
                let text = v
                    .as_u64()
                    .and_then(|i| strings.get(i as usize))
                    .filter(|s| s.is_string())
                    .unwrap_or_else(|| {
                        panic!(
                            "{name}: marker field {key} = {v} is not one of its {} strings",
                            strings.len()
                        )
                    })
                    .clone();
                *v = text;
            }
        }
        t["stringArray"] = taken;
    }
    json
}

impl Profile {
    /// Read a `.json` or `.json.gz` profile and check it with the structural
    /// validator; panics with every problem found.
    pub fn load(path: &Path) -> Profile {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("no profile at {}: {e}", path.display()));
        let json: Value = if bytes.starts_with(&[0x1f, 0x8b]) {
            serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).expect("gzip JSON")
        } else {
            serde_json::from_slice(&bytes).expect("JSON")
        };
        let problems = sysprof::profile::validate::validate(&json);
        assert!(
            problems.is_empty(),
            "the profile is malformed:\n{}",
            problems.join("\n")
        );
        Profile {
            json: with_marker_texts(json),
        }
    }

    /// The recorded range's end on CLOCK_MONOTONIC, ns ([`crate::monotonic_ns`]'s
    /// clock): the start the profile gives on that clock plus its range's
    /// length. Panics on a profile without them.
    pub fn range_end_monotonic_ns(&self) -> u64 {
        let meta = &self.json["meta"];
        let start_ns = meta["startTimeAsClockMonotonicNanosecondsSinceBoot"]
            .as_u64()
            .expect("meta.startTimeAsClockMonotonicNanosecondsSinceBoot");
        let end_ms = meta["profilingEndTime"]
            .as_f64()
            .expect("meta.profilingEndTime");
        start_ns + (end_ms * 1e6) as u64
    }

    /// Every thread.
    pub fn threads(&self) -> Vec<ThreadView<'_>> {
        self.json["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| ThreadView { t })
            .collect()
    }

    /// The thread with this tid in process pid.
    pub fn thread(&self, pid: u64, tid: u64) -> Option<ThreadView<'_>> {
        self.threads()
            .into_iter()
            .find(|t| t.pid() == pid && t.tid() == tid)
    }

    /// Threads of process pid.
    pub fn process_threads(&self, pid: u64) -> Vec<ThreadView<'_>> {
        self.threads()
            .into_iter()
            .filter(|t| t.pid() == pid)
            .collect()
    }
}

impl ThreadView<'_> {
    /// Process id; `u64::MAX` for a track of no process (the machine's and
    /// the per-CPU tracks: pid "0" as the idle task's, but the front end's
    /// parent process type "default"; `"machine"` or `"cpus"` in older
    /// profiles), which no real pid equals.
    pub fn pid(&self) -> u64 {
        let pid = self.t["pid"].as_str().unwrap();
        match pid {
            "machine" | "cpus" => u64::MAX,
            _ if self.t["processType"] == "default" => u64::MAX,
            _ => pid.parse().unwrap(),
        }
    }
    /// Thread id.
    pub fn tid(&self) -> u64 {
        self.t["tid"].as_u64().unwrap()
    }
    /// Thread name.
    pub fn name(&self) -> &str {
        self.t["name"].as_str().unwrap()
    }
    /// Process name.
    pub fn process_name(&self) -> &str {
        self.t["processName"].as_str().unwrap()
    }
    /// Number of samples.
    pub fn sample_count(&self) -> usize {
        self.t["samples"]["length"].as_u64().unwrap() as usize
    }
    /// Sum of `threadCPUDelta` (µs).
    pub fn cpu_delta_us(&self) -> u64 {
        self.t["samples"]["threadCPUDelta"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_u64)
            .sum()
    }

    /// Each sample's time, ms since the profile's start.
    pub fn times(&self) -> Vec<f64> {
        sysprof::profile::validate::sample_times(&self.t["samples"]).expect("sample times")
    }

    /// Each sample's weight (1 when the profile is not weighted).
    pub fn weights(&self) -> Vec<f64> {
        match self.t["samples"]["weight"].as_array() {
            Some(w) => w.iter().map(|v| v.as_f64().unwrap()).collect(),
            None => vec![1.0; self.sample_count()],
        }
    }

    /// Markers as (name, data), in table order, with their `startTime` and
    /// `endTime`: for an off-CPU wait the whole wait, run delay included,
    /// also where it is drawn to its wakeup's enqueue (`drawnEndTime`, the
    /// marker's own end) and its run delay follows as a "Waiting for a CPU"
    /// marker.
    pub fn markers(&self) -> Vec<(String, Value)> {
        let strings = self.t["stringArray"].as_array().unwrap();
        let m = &self.t["markers"];
        (0..m["length"].as_u64().unwrap() as usize)
            .map(|i| {
                let name = strings[m["name"][i].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string();
                let mut data = m["data"][i].clone();
                data["startTime"] = m["startTime"][i].clone();
                data["endTime"] = m["endTime"][i].clone();
                data["drawnEndTime"] = m["endTime"][i].clone();
                // An off-CPU marker drawn to its wakeup's enqueue says the
                // whole wait apart (its run delay is a marker of its own).
                if let (Some(s), Some(whole)) =
                    (m["startTime"][i].as_f64(), data["offCpu"].as_f64())
                {
                    if data["type"] == "OffCpu" {
                        data["endTime"] = (s + whole).into();
                    }
                }
                (name, data)
            })
            .collect()
    }

    /// Stacks of on-CPU samples only (off-CPU samples end in an "[off-CPU: …]" leaf).
    pub fn on_cpu_stacks(&self, categories: &[String]) -> Vec<Vec<(String, String)>> {
        self.stacks(categories)
            .into_iter()
            .filter(|s| !s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")))
            .collect()
    }

    /// Each sample's leaf frame's library name (`libs[...].name`), None for
    /// frames in no library.
    pub fn leaf_libs(&self, profile: &Value) -> Vec<Option<String>> {
        let t = self.t;
        let libs = profile["libs"].as_array().unwrap();
        t["samples"]["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let frame = t["stackTable"]["frame"][s.as_u64()? as usize].as_u64()? as usize;
                let func = t["frameTable"]["func"][frame].as_u64()? as usize;
                let resource = t["funcTable"]["resource"][func]
                    .as_i64()
                    .filter(|&r| r >= 0)? as usize;
                let lib = t["resourceTable"]["lib"][resource].as_u64()? as usize;
                Some(libs[lib]["name"].as_str()?.to_string())
            })
            .collect()
    }

    /// The function names of stack `node` of this thread's stack table,
    /// root first (a marker's `cause.stack`).
    pub fn stack_names(&self, node: u64) -> Vec<String> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        let mut out = Vec::new();
        let mut node = Some(node);
        while let Some(n) = node {
            let frame = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
            let func = t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            out.push(
                strings[t["funcTable"]["name"][func].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            node = t["stackTable"]["prefix"][n as usize].as_u64();
        }
        out.reverse();
        out
    }

    /// Each sample's stack as (function name, line) pairs, root first (the
    /// frame's line, where the profile has one).
    pub fn stack_lines(&self) -> Vec<Vec<(String, Option<u64>)>> {
        self.sample_frames(|name, frame| {
            (
                name.to_string(),
                self.t["frameTable"]["line"][frame].as_u64(),
            )
        })
    }

    /// The off-CPU time of its samples, ms: the weights of those whose leaf
    /// is an `[off-CPU ...]` frame.
    pub fn off_cpu_ms(&self, categories: &[String]) -> f64 {
        self.stacks(categories)
            .iter()
            .zip(self.weights())
            .filter(|(s, _)| s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")))
            .map(|(_, w)| w)
            .sum()
    }

    /// Its off-CPU markers whose reason is "sleeping".
    pub fn sleeping_markers(&self) -> Vec<(String, Value)> {
        self.markers()
            .into_iter()
            .filter(|(_, d)| d["type"] == "OffCpu" && d["reason"] == "sleeping")
            .collect()
    }

    /// Each sample's stack as (function name, category name) pairs, root first.
    pub fn stacks(&self, categories: &[String]) -> Vec<Vec<(String, String)>> {
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
            )
        })
    }

    /// Each sample's stack, root first, each frame with its inline depth
    /// and, for native code, where it is (see [`FrameView`]).
    pub fn stack_views(&self, profile: &Value, categories: &[String]) -> Vec<Vec<FrameView>> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        let libs = profile["libs"].as_array().unwrap();
        self.sample_frames(|name, frame| {
            let ft = &t["frameTable"];
            let func = ft["func"][frame].as_u64().unwrap() as usize;
            let cat = ft["category"][frame].as_u64().unwrap_or(0) as usize;
            let native = ft["nativeSymbol"][frame].as_u64().and_then(|s| {
                let s = s as usize;
                let syms = &t["nativeSymbols"];
                let lib = syms["libIndex"][s].as_u64()? as usize;
                Some((
                    libs.get(lib)?["path"].as_str()?.to_string(),
                    ft["address"][frame].as_u64()?,
                    syms["address"][s].as_u64()?,
                ))
            });
            FrameView {
                name: name.to_string(),
                category: categories.get(cat).cloned().unwrap_or_default(),
                file: t["funcTable"]["fileName"][func]
                    .as_u64()
                    .and_then(|n| strings[n as usize].as_str())
                    .unwrap_or("")
                    .to_string(),
                inline_depth: ft["inlineDepth"][frame].as_u64().unwrap_or(0),
                subcategory: profile["meta"]["categories"][cat]["subcategories"]
                    [ft["subcategory"][frame].as_u64().unwrap_or(0) as usize]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                native,
                line: ft["line"][frame].as_u64(),
                first_line: t["funcTable"]["lineNumber"][func].as_u64(),
                resource: self.resource_name(func),
            }
        })
    }

    /// Each sample's stack as (function name, category name, file name)
    /// triples, root first (the file is "" for a function without one).
    pub fn stack_files(&self, categories: &[String]) -> Vec<Vec<(String, String, String)>> {
        let strings = self.t["stringArray"].as_array().unwrap();
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            let func = self.t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            let file = self.t["funcTable"]["fileName"][func]
                .as_u64()
                .and_then(|n| strings[n as usize].as_str())
                .unwrap_or("")
                .to_string();
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
                file,
            )
        })
    }

    /// The files of this thread's functions named `name`.
    pub fn func_files(&self, name: &str) -> Vec<String> {
        let strings = self.t["stringArray"].as_array().unwrap();
        let f = &self.t["funcTable"];
        (0..f["length"].as_u64().unwrap() as usize)
            .filter(|&i| strings[f["name"][i].as_u64().unwrap() as usize].as_str() == Some(name))
            .filter_map(|i| f["fileName"][i].as_u64())
            .filter_map(|n| strings[n as usize].as_str().map(str::to_string))
            .collect()
    }

    /// Each sample's stack as (function name, category name, resource
    /// name) triples, root first (the resource is "" for a frame without one).
    pub fn stack_resources(&self, categories: &[String]) -> Vec<Vec<(String, String, String)>> {
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            let func = self.t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
                self.resource_name(func),
            )
        })
    }

    /// The name of function `func`'s resource ("" for none).
    fn resource_name(&self, func: usize) -> String {
        let strings = self.t["stringArray"].as_array().unwrap();
        self.t["funcTable"]["resource"][func]
            .as_i64()
            .filter(|&r| r >= 0)
            .and_then(|r| self.t["resourceTable"]["name"][r as usize].as_u64())
            .and_then(|n| strings[n as usize].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// Each sample's stack, root first, as `describe(function name, frame index)` of each frame.
    fn sample_frames<T>(&self, describe: impl Fn(&str, usize) -> T) -> Vec<Vec<T>> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        t["samples"]["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let mut out = Vec::new();
                let mut node = s.as_u64();
                while let Some(n) = node {
                    let frame = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
                    let func = t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                    let name = strings[t["funcTable"]["name"][func].as_u64().unwrap() as usize]
                        .as_str()
                        .unwrap();
                    out.push(describe(name, frame));
                    node = t["stackTable"]["prefix"][n as usize].as_u64();
                }
                out.reverse();
                out
            })
            .collect()
    }
}

impl Profile {
    /// Category names, by index.
    pub fn categories(&self) -> Vec<String> {
        self.json["meta"]["categories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }
}
