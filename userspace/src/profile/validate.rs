//! A structural validator for processed profiles.
//!
//! In: a profile as JSON. Out: every problem found, as text: columns whose
//! length differs from the table's `length`, indexes out of range (strings,
//! frames, funcs, resources, libs, native symbols, stacks), stack prefixes
//! that do not point backwards, sample times out of order. Used by the
//! tests on every recorded profile and by `sysprof validate`, which parse
//! it as it is read ([`Validator`]): one thread at a time is held.

use serde_json::Value;

/// A samples table's absolute times, from `time` or by adding up `timeDeltas`.
pub fn sample_times(samples: &Value) -> Option<Vec<f64>> {
    let len = samples["length"].as_u64()? as usize;
    let times: Vec<f64> = if let Some(t) = samples["time"].as_array() {
        t.iter().filter_map(Value::as_f64).collect()
    } else {
        let mut acc = 0.0;
        samples["timeDeltas"].as_array()?.iter().filter_map(Value::as_f64).map(|d| {
            acc += d;
            acc
        }).collect()
    };
    (times.len() == len).then_some(times)
}

/// Check a whole profile held as a value; an empty list means it is well
/// formed.
pub fn validate(profile: &Value) -> Vec<String> {
    let mut v = Validator::default();
    match v.read(profile) {
        Ok(()) => v.finish().1,
        Err(e) => vec![format!("not a profile: {e}")],
    }
}

/// The bound of an index column: known when its thread is read, or only
/// once the whole profile was (our files write `threads` before `meta` and
/// `libs`, so a thread is checked before the counts it refers to are read).
#[derive(Clone, Copy)]
enum Bound {
    Known(usize),
    Libs,
    Categories,
}

/// The largest index a thread's column holds into the libraries or the
/// categories, checked when their counts are known.
struct Deferred {
    thread: String,
    column: &'static str,
    index: usize,
    value: i64,
    bound: Bound,
}

/// A profile checked as it is parsed: each thread is checked as it is read
/// and dropped, so what is held is one thread at a time (a 100-MiB profile
/// inflates to a gigabyte of JSON, several as a `Value`).
#[derive(Default)]
pub struct Validator {
    problems: Vec<String>,
    threads: usize,
    shape: crate::profile::input::ThreadsShape,
    version: bool,
    libs: Option<usize>,
    categories: Option<usize>,
    deferred: Vec<Deferred>,
    /// Problems found past [`MAX_PROBLEMS`].
    more: u64,
}

/// Problems said one by one, at most; the rest are counted.
const MAX_PROBLEMS: usize = 100;

impl Validator {
    /// Parse and check a profile from `deserializer` (a reader's or a value's).
    pub fn read<'de, D: serde::Deserializer<'de>>(&mut self, deserializer: D) -> Result<(), D::Error> {
        self.shape = crate::profile::input::read_threads(deserializer, self)?;
        Ok(())
    }

    /// The threads read, and every problem found (none: it is well formed).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        let mut head = Vec::new();
        if !self.version {
            head.push("meta.preprocessedProfileVersion is missing".to_string());
        }
        if self.shape != crate::profile::input::ThreadsShape::Array {
            head.push("threads is not an array".into());
        }
        let (libs, categories) = (self.libs.unwrap_or(0), self.categories.unwrap_or(0));
        let late: Vec<String> = std::mem::take(&mut self.deferred)
            .into_iter()
            .filter_map(|d| {
                let bound = match d.bound {
                    Bound::Known(b) => b,
                    Bound::Libs => libs,
                    Bound::Categories => categories,
                };
                (d.value as usize >= bound).then(|| format!("{}: {}[{}] = {} is out of range 0..{bound}", d.thread, d.column, d.index, d.value))
            })
            .collect();
        self.push(late);
        head.append(&mut self.problems);
        if self.more > 0 {
            head.push(format!("and {} more problems", self.more));
        }
        (self.threads, head)
    }

    /// Check one thread.
    fn check_thread(&mut self, t: &Value) {
        let ti = self.threads;
        self.threads += 1;
        if !t.is_object() {
            // A bomb of `0,0,…` parses on: one problem each, not fifteen.
            self.push(vec![format!("thread {ti} is not an object")]);
            return;
        }
        let prefix = format!("thread {ti} ({})", t["name"]);
        let mut problems = Vec::new();
        let mut p = |msg: String| problems.push(format!("{prefix}: {msg}"));
        let strings = t["stringArray"].as_array().map(|a| a.len()).unwrap_or(0);
        let tables = [
            ("frameTable", &["address", "inlineDepth", "category", "subcategory", "func", "nativeSymbol", "innerWindowID", "line", "column"][..]),
            ("funcTable", &["name", "isJS", "relevantForJS", "resource", "fileName", "lineNumber", "columnNumber"][..]),
            ("resourceTable", &["lib", "name", "host", "type"][..]),
            ("nativeSymbols", &["libIndex", "address", "name", "functionSize"][..]),
            ("stackTable", &["prefix", "frame"][..]),
            ("samples", &["stack", "threadCPUDelta"][..]),
            ("markers", &["category", "data", "endTime", "name", "phase", "startTime"][..]),
        ];
        let mut len = std::collections::HashMap::new();
        for (table, columns) in tables {
            let Some(n) = t[table]["length"].as_u64() else {
                p(format!("{table}.length is missing"));
                continue;
            };
            len.insert(table, n as usize);
            for c in columns {
                match t[table][c].as_array() {
                    Some(a) if a.len() == n as usize => {}
                    Some(a) => p(format!("{table}.{c} has {} entries, length is {n}", a.len())),
                    None => p(format!("{table}.{c} is missing")),
                }
            }
        }
        let mut deferred: Vec<Deferred> = Vec::new();
        let mut check = |column: &'static str, bound: Bound, nullable: bool, p: &mut dyn FnMut(String)| {
            let (table, field) = column.split_once('.').expect("table.column");
            let mut largest: Option<(usize, i64)> = None;
            for (i, v) in t[table][field].as_array().into_iter().flatten().enumerate() {
                match (v.as_i64(), bound) {
                    (Some(-1), _) if column == "funcTable.resource" => {}
                    (Some(x), Bound::Known(b)) if x >= 0 && (x as usize) < b => {}
                    (Some(x), Bound::Libs | Bound::Categories) if x >= 0 => {
                        if largest.is_none_or(|(_, m)| x > m) {
                            largest = Some((i, x));
                        }
                    }
                    (None, _) if nullable && v.is_null() => {}
                    (_, Bound::Known(b)) => p(format!("{column}[{i}] = {v} is out of range 0..{b}")),
                    (_, _) => p(format!("{column}[{i}] = {v} is not an index")),
                }
            }
            if let Some((index, value)) = largest {
                deferred.push(Deferred { thread: prefix.clone(), column, index, value, bound });
            }
        };
        let l = |name: &str| Bound::Known(len.get(name).copied().unwrap_or(0));
        let known = |n: Option<usize>, otherwise: Bound| n.map_or(otherwise, Bound::Known);
        let (libs, categories) = (known(self.libs, Bound::Libs), known(self.categories, Bound::Categories));
        let strings = Bound::Known(strings);
        check("frameTable.func", l("funcTable"), false, &mut p);
        check("frameTable.nativeSymbol", l("nativeSymbols"), true, &mut p);
        check("frameTable.category", categories, true, &mut p);
        check("funcTable.name", strings, false, &mut p);
        check("funcTable.resource", l("resourceTable"), false, &mut p);
        check("funcTable.fileName", strings, true, &mut p);
        check("resourceTable.lib", libs, true, &mut p);
        check("resourceTable.name", strings, false, &mut p);
        check("nativeSymbols.libIndex", libs, false, &mut p);
        check("nativeSymbols.name", strings, false, &mut p);
        check("stackTable.frame", l("frameTable"), false, &mut p);
        check("samples.stack", l("stackTable"), true, &mut p);
        check("markers.name", strings, false, &mut p);
        for (i, v) in t["stackTable"]["prefix"].as_array().into_iter().flatten().enumerate() {
            if let Some(x) = v.as_u64() {
                if x as usize >= i {
                    p(format!("stackTable.prefix[{i}] = {x} does not point backwards"));
                }
            } else if !v.is_null() {
                p(format!("stackTable.prefix[{i}] = {v} is not an index"));
            }
        }
        let times = sample_times(&t["samples"]);
        match &times {
            None => p("samples has neither time nor timeDeltas of its length".into()),
            Some(times) => {
                if let Some(i) = times.windows(2).position(|w| w[1] < w[0]) {
                    p(format!("samples.time is not sorted at {i}: {} > {}", times[i], times[i + 1]));
                }
            }
        }
        for key in ["pid", "name", "processName"] {
            if !t[key].is_string() {
                p(format!("{key} is not a string"));
            }
        }
        if !t["tid"].is_number() {
            p("tid is not a number".into());
        }
        self.push(problems);
        self.deferred.append(&mut deferred);
    }

    /// Keep the first [`MAX_PROBLEMS`] problems, count the rest: a file
    /// any user wrote could hold millions.
    fn push(&mut self, problems: Vec<String>) {
        for p in problems {
            if self.problems.len() < MAX_PROBLEMS {
                self.problems.push(p);
            } else {
                self.more += 1;
            }
        }
    }
}

/// The validator reads threads as values (any shape is checked, none
/// refused by a type) and keeps `meta` and `libs` for their counts.
impl crate::profile::input::ThreadSink for Validator {
    type Thread = Value;

    fn thread(&mut self, t: Value) -> bool {
        self.check_thread(&t);
        true
    }

    fn keeps(&self, key: &str) -> bool {
        matches!(key, "meta" | "libs")
    }

    fn kept(&mut self, key: &str, value: Value) {
        if key == "meta" {
            self.version = value["preprocessedProfileVersion"].as_u64().is_some();
            self.categories = Some(value["categories"].as_array().map(|a| a.len()).unwrap_or(0));
        } else {
            self.libs = Some(value.as_array().map(|a| a.len()).unwrap_or(0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> Value {
        serde_json::json!({
            "meta": { "preprocessedProfileVersion": 55, "categories": [{}, {}] },
            "libs": [{}],
            "threads": [{
                "name": "t", "pid": "1", "tid": 1, "processName": "p",
                "stringArray": ["main", "lib"],
                "frameTable": { "length": 2, "address": [1, 2], "inlineDepth": [0, 0], "category": [1, 1],
                    "subcategory": [0, 0], "func": [0, 0], "nativeSymbol": [null, 0], "innerWindowID": [null, null],
                    "line": [null, null], "column": [null, null] },
                "funcTable": { "length": 1, "name": [0], "isJS": [false], "relevantForJS": [false], "resource": [0],
                    "fileName": [null], "lineNumber": [null], "columnNumber": [null] },
                "resourceTable": { "length": 1, "lib": [0], "name": [1], "host": [null], "type": [1] },
                "nativeSymbols": { "length": 1, "libIndex": [0], "address": [0], "name": [0], "functionSize": [null] },
                "stackTable": { "length": 2, "prefix": [null, 0], "frame": [0, 1] },
                "samples": { "length": 2, "stack": [1, 0], "time": [0.0, 1.0], "threadCPUDelta": [0, 1] },
                "markers": { "length": 0, "category": [], "data": [], "endTime": [], "name": [], "phase": [], "startTime": [] }
            }]
        })
    }

    /// Check that a well-formed profile passes.
    #[test]
    fn accepts_well_formed_profile() {
        assert_eq!(validate(&minimal()), Vec::<String>::new());
    }

    /// Check that a profile read as text with its threads first (as sysprof
    /// writes them, before `meta` and `libs`) is checked against the counts
    /// that come after, and that a well-formed one passes in that order.
    #[test]
    fn checks_threads_against_the_libs_and_categories_after_them() {
        let read = |v: &Value| {
            let text = format!("{{\"threads\":{},\"meta\":{},\"libs\":{}}}", v["threads"], v["meta"], v["libs"]);
            let mut validator = Validator::default();
            validator.read(&mut serde_json::Deserializer::from_str(&text)).unwrap();
            validator.finish()
        };
        assert_eq!(read(&minimal()), (1, Vec::new()));
        let mut v = minimal();
        v["threads"][0]["resourceTable"]["lib"][0] = 3.into();
        v["threads"][0]["frameTable"]["category"][1] = 2.into();
        let (threads, problems) = read(&v);
        assert_eq!(threads, 1);
        assert!(problems.iter().any(|p| p.ends_with("resourceTable.lib[0] = 3 is out of range 0..1")), "{problems:?}");
        assert!(problems.iter().any(|p| p.ends_with("frameTable.category[1] = 2 is out of range 0..2")), "{problems:?}");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    /// Check that each kind of breakage is reported.
    #[test]
    fn reports_each_kind_of_breakage() {
        type Breakage = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Breakage)> = vec![
            ("has 1 entries", Box::new(|v| v["threads"][0]["frameTable"]["func"] = serde_json::json!([0]))),
            ("frameTable.func[1]", Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 5.into())),
            ("does not point backwards", Box::new(|v| v["threads"][0]["stackTable"]["prefix"][0] = 1.into())),
            ("not sorted", Box::new(|v| v["threads"][0]["samples"]["time"][0] = 9.0.into())),
            ("neither time nor timeDeltas", Box::new(|v| v["threads"][0]["samples"]["time"] = serde_json::json!([0.0]))),
            ("resourceTable.lib[0]", Box::new(|v| v["threads"][0]["resourceTable"]["lib"][0] = 3.into())),
            ("funcTable.name[0]", Box::new(|v| v["threads"][0]["funcTable"]["name"][0] = 7.into())),
            ("samples.stack[0]", Box::new(|v| v["threads"][0]["samples"]["stack"][0] = 2.into())),
        ];
        for (needle, breakit) in cases {
            let mut v = minimal();
            breakit(&mut v);
            let problems = validate(&v);
            assert!(problems.iter().any(|p| p.contains(needle)), "expected {needle:?} in {problems:?}");
        }
    }
}
