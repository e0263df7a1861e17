//! A structural validator for processed profiles.
//!
//! In: a profile as JSON. Out: every problem found, as text: columns whose
//! length differs from the table's `length`, indexes out of range (strings,
//! frames, funcs, resources, libs, native symbols, stacks), stack prefixes
//! that do not point backwards, sample times out of order. Used by the
//! tests on every recorded profile and by `sysprof validate`, which parse
//! it as it is read ([`Validator`]): each thread is summarized as it is
//! parsed (a column's length, its largest index, its first bad element;
//! [`ThreadSummary`]) and checked at its end, so no element is held. On a
//! 21-MiB profile (41,286 threads) that took 3.8 s and 121 MB as one
//! `Value` a thread, 1.9 s and 19 MB this way.

use serde_json::Value;

/// A samples table's absolute times, from `time` or by adding up `timeDeltas`.
pub fn sample_times(samples: &Value) -> Option<Vec<f64>> {
    let len = samples["length"].as_u64()? as usize;
    let times: Vec<f64> = if let Some(t) = samples["time"].as_array() {
        t.iter().filter_map(Value::as_f64).collect()
    } else {
        let mut acc = 0.0;
        samples["timeDeltas"]
            .as_array()?
            .iter()
            .filter_map(Value::as_f64)
            .map(|d| {
                acc += d;
                acc
            })
            .collect()
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
    /// Each thread's pid, by runs (see [`ThreadPids`]).
    thread_pids: ThreadPids,
    /// `counters`, summarized, to be checked once every thread is read (at
    /// most [`MAX_COUNTERS`]); whether it was not an array.
    counters: Vec<(usize, crate::profile::input::CounterSummary)>,
    counters_seen: usize,
    counters_not_array: bool,
    /// Problems found past [`MAX_PROBLEMS`].
    more: u64,
}

/// Problems said one by one, at most; the rest are counted.
const MAX_PROBLEMS: usize = 100;

/// Counters checked, at most (a profile writes one per process and kind).
const MAX_COUNTERS: usize = 100_000;

/// Each thread's pid for the counters' check, as runs of threads of one pid
/// (a process's threads are written together) over an interned list: a
/// file of millions of threads costs its runs, at most [`MAX_PID_RUNS`] of
/// them and [`MAX_PIDS`] distinct pids; past either, pids are not known.
#[derive(Default)]
struct ThreadPids {
    /// (first thread, pid's index in `pids` or `u32::MAX` for none).
    runs: Vec<(u32, u32)>,
    pids: Vec<String>,
    index: rustc_hash::FxHashMap<String, u32>,
    overflow: bool,
}

const MAX_PID_RUNS: usize = 1 << 20;
const MAX_PIDS: usize = 1 << 16;

impl ThreadPids {
    fn push(&mut self, thread: usize, pid: Option<&str>) {
        if self.overflow {
            return;
        }
        let id = match pid {
            None => u32::MAX,
            Some(p) => match self.index.get(p) {
                Some(&id) => id,
                None if self.pids.len() < MAX_PIDS => {
                    let id = self.pids.len() as u32;
                    self.pids.push(p.to_string());
                    self.index.insert(p.to_string(), id);
                    id
                }
                None => {
                    self.overflow = true;
                    return;
                }
            },
        };
        if self.runs.last().map(|r| r.1) != Some(id) {
            if self.runs.len() >= MAX_PID_RUNS {
                self.overflow = true;
                return;
            }
            self.runs.push((thread as u32, id));
        }
    }

    /// Thread `i`'s pid (its inner None: it has none); None when not known.
    fn get(&self, i: usize) -> Option<Option<&str>> {
        if self.overflow {
            return None;
        }
        let at = self
            .runs
            .partition_point(|r| r.0 as usize <= i)
            .checked_sub(1)?;
        let id = self.runs[at].1;
        Some((id != u32::MAX).then(|| self.pids[id as usize].as_str()))
    }
}

impl Validator {
    /// Parse and check a profile from `deserializer` (a reader's or a value's).
    pub fn read<'de, D: serde::Deserializer<'de>>(
        &mut self,
        deserializer: D,
    ) -> Result<(), D::Error> {
        self.shape = crate::profile::input::read_threads(deserializer, self)?;
        Ok(())
    }

    /// The threads read, and every problem found (none: it is well formed).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        self.check_counters();
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
                (d.value as usize >= bound).then(|| {
                    format!(
                        "{}: {}[{}] = {} is out of range 0..{bound}",
                        d.thread, d.column, d.index, d.value
                    )
                })
            })
            .collect();
        self.push(late);
        head.append(&mut self.problems);
        if self.more > 0 {
            head.push(format!("and {} more problems", self.more));
        }
        (self.threads, head)
    }

    /// Check one thread, summarized as it was parsed.
    fn check_thread(&mut self, t: &ThreadSummary) {
        let ti = self.threads;
        self.threads += 1;
        if !t.object {
            // A bomb of `0,0,…` parses on: one problem each, not fifteen,
            // and only counted once the list is full.
            if self.problems.len() < MAX_PROBLEMS {
                self.push(vec![format!("thread {ti} is not an object")]);
            } else {
                self.more += 1;
            }
            self.thread_pids.push(ti, None);
            return;
        }
        let prefix = format!("thread {ti} ({})", t.name_shown);
        let mut problems = Vec::new();
        let mut p = |msg: String| problems.push(format!("{prefix}: {msg}"));
        let strings = t.strings;
        let mut len = std::collections::HashMap::new();
        for (table, columns) in TABLES {
            let Some(n) = t.table(table).and_then(|tb| tb.length) else {
                p(format!("{table}.length is missing"));
                continue;
            };
            len.insert(*table, n as usize);
            for c in *columns {
                match t.column(table, c) {
                    Some(col) if col.len == n as usize => {}
                    Some(col) => p(format!(
                        "{table}.{c} has {} entries, length is {n}",
                        col.len
                    )),
                    None => p(format!("{table}.{c} is missing")),
                }
            }
        }
        let mut deferred: Vec<Deferred> = Vec::new();
        let mut check =
            |column: &'static str, bound: Bound, nullable: bool, p: &mut dyn FnMut(String)| {
                let (table, field) = column.split_once('.').expect("table.column");
                let Some(col) = t.column(table, field) else {
                    return;
                };
                if let Some((i, shown)) = &col.first_other {
                    p(format!("{column}[{i}] = {shown} is not an index"));
                }
                if let (Some(i), false) = (col.first_null, nullable) {
                    p(format!("{column}[{i}] = null is not an index"));
                }
                let minus_one_allowed = column == "funcTable.resource";
                let negative = col
                    .first_negative
                    .filter(|&(_, x)| !(minus_one_allowed && x == -1))
                    .or(col.first_below_minus_one);
                if let Some((i, x)) = negative {
                    match bound {
                        Bound::Known(b) => p(format!("{column}[{i}] = {x} is out of range 0..{b}")),
                        Bound::Libs | Bound::Categories => {
                            p(format!("{column}[{i}] = {x} is not an index"))
                        }
                    }
                }
                match (col.max, bound) {
                    (Some((i, x)), Bound::Known(b)) if x >= 0 && x as usize >= b => {
                        p(format!("{column}[{i}] = {x} is out of range 0..{b}"))
                    }
                    (Some((index, value)), Bound::Libs | Bound::Categories) if value >= 0 => {
                        deferred.push(Deferred {
                            thread: prefix.clone(),
                            column,
                            index,
                            value,
                            bound,
                        });
                    }
                    _ => {}
                }
            };
        let l = |name: &str| Bound::Known(len.get(name).copied().unwrap_or(0));
        let known = |n: Option<usize>, otherwise: Bound| n.map_or(otherwise, Bound::Known);
        let (libs, categories) = (
            known(self.libs, Bound::Libs),
            known(self.categories, Bound::Categories),
        );
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
        if let Some(col) = t.column("stackTable", "prefix") {
            if let Some((i, x)) = col.first_not_backwards {
                p(format!(
                    "stackTable.prefix[{i}] = {x} does not point backwards"
                ));
            }
            if let Some((i, shown)) = &col.first_other {
                p(format!("stackTable.prefix[{i}] = {shown} is not an index"));
            }
            if let Some((i, x)) = col.first_negative {
                p(format!("stackTable.prefix[{i}] = {x} is not an index"));
            }
        }
        if let Some(col) = t.column("markers", "data") {
            let stacks = len.get("stackTable").copied().unwrap_or(0);
            if let Some((i, x)) = col.max_cause_stack.filter(|&(_, x)| x as usize >= stacks) {
                p(format!(
                    "markers.data[{i}].cause.stack = {x} is out of range 0..{stacks}"
                ));
            }
            if let Some((i, shown)) = &col.first_bad_cause_stack {
                p(format!(
                    "markers.data[{i}].cause.stack = {shown} is not an index"
                ));
            }
        }
        // The times: `time`, or else `timeDeltas` added up, of the table's length.
        let samples_len = t
            .table("samples")
            .and_then(|tb| tb.length)
            .map(|n| n as usize);
        let times = match (
            t.column("samples", "time"),
            t.column("samples", "timeDeltas"),
        ) {
            (Some(c), _) => Some((c, c.first_unsorted)),
            (None, Some(c)) => Some((c, c.first_unsorted_sum)),
            (None, None) => None,
        };
        match times {
            Some((c, unsorted)) if Some(c.numbers) == samples_len => {
                if let Some((i, a, b)) = unsorted {
                    p(format!("samples.time is not sorted at {i}: {a} > {b}"));
                }
            }
            _ => p("samples has neither time nor timeDeltas of its length".into()),
        }
        for (key, is) in [
            ("pid", t.pid_string),
            ("name", t.name_string),
            ("processName", t.process_name_string),
        ] {
            if !is {
                p(format!("{key} is not a string"));
            }
        }
        if !t.tid_number {
            p("tid is not a number".into());
        }
        self.push(problems);
        self.deferred.append(&mut deferred);
        self.thread_pids.push(ti, t.pid.as_deref());
    }

    /// The counters' cross-references: each counter's `mainThreadIndex` a
    /// thread of its own `pid` (the front end draws a counter under that
    /// thread's process, and fails on one that is not there), its samples'
    /// columns of their length. Checked once every thread is read.
    fn check_counters(&mut self) {
        // Said as found: past MAX_PROBLEMS each is only counted.
        let mut problems = Vec::new();
        if self.counters_not_array {
            problems.push("counters is not an array".to_string());
        }
        let threads = self.threads;
        for (i, c) in std::mem::take(&mut self.counters) {
            self.push(std::mem::take(&mut problems));
            let prefix = format!("counter {i} ({:?})", c.name.as_deref().unwrap_or("?"));
            if !c.object {
                problems.push(format!("counter {i} is not an object"));
                continue;
            }
            match c.main_thread {
                Some(m) if (m as usize) < threads => {
                    // Unknown past the table's bounds: not said.
                    if let Some(of) = self.thread_pids.get(m as usize) {
                        if c.pid.is_none() || of != c.pid.as_deref() {
                            problems.push(format!(
                                "{prefix}: pid {:?} but its mainThreadIndex {m} is a thread of pid {}",
                                c.pid.as_deref().unwrap_or("none"),
                                of.unwrap_or("none")
                            ));
                        }
                    }
                }
                Some(m) => problems.push(format!(
                    "{prefix}: mainThreadIndex {m} is out of range 0..{threads}"
                )),
                None => problems.push(format!("{prefix}: mainThreadIndex is not an index")),
            }
            for (column, n) in [("time", c.time_len), ("count", c.count_len)] {
                if n.is_none() || n != c.length {
                    problems.push(format!(
                        "{prefix}: samples.{column} has {} entries, length is {}",
                        n.map_or("no".to_string(), |n| n.to_string()),
                        c.length.map_or("missing".to_string(), |n| n.to_string())
                    ));
                }
            }
        }
        if self.counters_seen > MAX_COUNTERS {
            problems.push(format!(
                "{} counters past the first {MAX_COUNTERS} not checked",
                self.counters_seen - MAX_COUNTERS
            ));
        }
        self.push(problems);
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

/// The validator reads threads as summaries (any shape is checked, none
/// refused by a type) and keeps `meta` and `libs` for their counts.
impl crate::profile::input::ThreadSink for Validator {
    type Thread = ThreadSummary;

    fn thread(&mut self, t: ThreadSummary) -> bool {
        self.check_thread(&t);
        true
    }

    fn keeps(&self, key: &str) -> bool {
        matches!(key, "meta" | "libs")
    }

    fn streams_counters(&self) -> bool {
        true
    }

    fn counter(&mut self, counter: Option<crate::profile::input::CounterSummary>) {
        match counter {
            None => self.counters_not_array = true,
            Some(c) => {
                if self.counters.len() < MAX_COUNTERS {
                    self.counters.push((self.counters_seen, c));
                }
                self.counters_seen += 1;
            }
        }
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

/// The tables a thread must have, and the columns each must have.
const TABLES: &[(&str, &[&str])] = &[
    (
        "frameTable",
        &[
            "address",
            "inlineDepth",
            "category",
            "subcategory",
            "func",
            "nativeSymbol",
            "innerWindowID",
            "line",
            "column",
        ],
    ),
    (
        "funcTable",
        &[
            "name",
            "isJS",
            "relevantForJS",
            "resource",
            "fileName",
            "lineNumber",
            "columnNumber",
        ],
    ),
    ("resourceTable", &["lib", "name", "host", "type"]),
    (
        "nativeSymbols",
        &["libIndex", "address", "name", "functionSize"],
    ),
    ("stackTable", &["prefix", "frame"]),
    ("samples", &["stack", "threadCPUDelta"]),
    (
        "markers",
        &["category", "data", "endTime", "name", "phase", "startTime"],
    ),
];

/// What the checks need of a column, gathered element by element as it
/// is parsed: no element is kept, so a thread of a million samples costs
/// its columns' count, not a `Value` each (which made `validate` three
/// times slower than `report`, and its peak a thread's worth of them).
#[derive(Default, Debug)]
pub struct ColumnSummary {
    /// Elements.
    len: usize,
    /// The largest integer, where it first is.
    max: Option<(usize, i64)>,
    /// The first negative integer, and the first below -1.
    first_negative: Option<(usize, i64)>,
    first_below_minus_one: Option<(usize, i64)>,
    /// The first null.
    first_null: Option<usize>,
    /// The first element neither an integer nor null, as shown.
    first_other: Option<(usize, String)>,
    /// Markers' payloads: the largest `cause.stack`, where it first is,
    /// and the first that is not an index.
    max_cause_stack: Option<(usize, i64)>,
    first_bad_cause_stack: Option<(usize, String)>,
    /// The first integer not below its own position (a stack prefix
    /// must point backwards).
    first_not_backwards: Option<(usize, i64)>,
    /// Elements that are numbers.
    numbers: usize,
    /// Where the numbers first go down, as they stand and added up.
    first_unsorted: Option<(usize, f64, f64)>,
    first_unsorted_sum: Option<(usize, f64, f64)>,
    last: Option<f64>,
    sum: f64,
    last_sum: Option<f64>,
}

impl ColumnSummary {
    fn integer(&mut self, x: i64) {
        let i = self.len;
        if self.max.is_none_or(|(_, m)| x > m) {
            self.max = Some((i, x));
        }
        if x < 0 && self.first_negative.is_none() {
            self.first_negative = Some((i, x));
        }
        if x < -1 && self.first_below_minus_one.is_none() {
            self.first_below_minus_one = Some((i, x));
        }
        if x >= 0 && x as usize >= i && self.first_not_backwards.is_none() {
            self.first_not_backwards = Some((i, x));
        }
        self.number(x as f64);
    }

    fn number(&mut self, v: f64) {
        let i = self.len;
        self.numbers += 1;
        if let Some(last) = self.last {
            if v < last && self.first_unsorted.is_none() {
                self.first_unsorted = Some((i - 1, last, v));
            }
        }
        self.last = Some(v);
        self.sum += v;
        if let Some(last) = self.last_sum {
            if self.sum < last && self.first_unsorted_sum.is_none() {
                self.first_unsorted_sum = Some((i - 1, last, self.sum));
            }
        }
        self.last_sum = Some(self.sum);
    }

    fn other(&mut self, shown: impl FnOnce() -> String) {
        if self.first_other.is_none() {
            self.first_other = Some((self.len, shown()));
        }
    }
}

/// The time columns a samples table may have besides those it must.
const SAMPLE_TIMES: &[&str] = &["time", "timeDeltas"];

/// The columns kept of table `table` (an index into [`TABLES`]): those it
/// must have, and for samples its times. Each has a slot; others are
/// skipped as they are parsed, so a thread costs the same whatever keys a
/// file adds.
fn wanted_columns(table: usize) -> impl Iterator<Item = &'static str> {
    let times = if TABLES[table].0 == "samples" {
        SAMPLE_TIMES
    } else {
        &[]
    };
    TABLES[table].1.iter().chain(times).copied()
}

/// A table: its `length` (when a non-negative integer) and, per column of
/// [`wanted_columns`], its summary when it is an array. A key given twice
/// counts as its last (as `JSON.parse`, and so the Firefox Profiler, reads it).
#[derive(Default, Debug)]
pub struct TableSummary {
    length: Option<u64>,
    columns: Vec<Option<ColumnSummary>>,
}

/// A thread as the validator sees it, gathered as it is parsed.
#[derive(Default, Debug)]
pub struct ThreadSummary {
    object: bool,
    name_shown: String,
    name_string: bool,
    pid_string: bool,
    /// The pid, when a string (cut to 64 characters).
    pid: Option<String>,
    process_name_string: bool,
    tid_number: bool,
    /// `stringArray`'s length (0 when it is none).
    strings: usize,
    /// Per table of [`TABLES`], its summary when the thread has it.
    tables: Vec<Option<TableSummary>>,
}

impl ThreadSummary {
    fn table(&self, name: &str) -> Option<&TableSummary> {
        let i = TABLES.iter().position(|(n, _)| *n == name)?;
        self.tables.get(i)?.as_ref()
    }

    fn column(&self, table: &str, column: &str) -> Option<&ColumnSummary> {
        let i = TABLES.iter().position(|(n, _)| *n == table)?;
        let j = wanted_columns(i).position(|c| c == column)?;
        self.tables.get(i)?.as_ref()?.columns.get(j)?.as_ref()
    }
}

impl<'de> serde::Deserialize<'de> for ThreadSummary {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ThreadVisitor)
    }
}

struct ThreadVisitor;

impl<'de> serde::de::Visitor<'de> for ThreadVisitor {
    type Value = ThreadSummary;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a thread")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<ThreadSummary, A::Error> {
        let mut t = ThreadSummary {
            object: true,
            name_shown: "null".into(),
            tables: TABLES.iter().map(|_| None).collect(),
            ..Default::default()
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "name" | "pid" | "processName" | "tid" => {
                    let v: Scalar = map.next_value()?;
                    match &*key {
                        "name" => {
                            t.name_string = matches!(v, Scalar::Str(_));
                            t.name_shown = v.shown();
                        }
                        "pid" => {
                            t.pid_string = matches!(v, Scalar::Str(_));
                            if let Scalar::Str(pid) = &v {
                                t.pid = Some(pid.chars().take(64).collect());
                            }
                        }
                        "processName" => t.process_name_string = matches!(v, Scalar::Str(_)),
                        _ => t.tid_number = matches!(v, Scalar::Number),
                    }
                }
                "stringArray" => {
                    let mut c = ColumnSummary::default();
                    t.strings = if map.next_value_seed(ColumnSeed(&mut c))? {
                        c.len
                    } else {
                        0
                    };
                }
                table if TABLES.iter().any(|(n, _)| *n == table) => {
                    let i = TABLES
                        .iter()
                        .position(|(n, _)| *n == table)
                        .expect("a table of TABLES");
                    t.tables[i] = Some(map.next_value_seed(TableSeed(i))?);
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(t)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<ThreadSummary, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(ThreadSummary::default())
    }

    crate::profile::input::scalars_give!(ThreadSummary, ThreadSummary::default());
}

/// A thread's scalar field: a string (kept to be shown, cut), a number, or
/// anything else (skipped).
enum Scalar {
    Str(String),
    Number,
    Other,
}

impl Scalar {
    /// As the problem names the thread: JSON, as `Value` shows it.
    fn shown(&self) -> String {
        match self {
            Scalar::Str(s) => Value::String(s.chars().take(200).collect()).to_string(),
            Scalar::Number => "a number".into(),
            Scalar::Other => "null".into(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(s.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Scalar, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Scalar, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// A table object (of [`TABLES`]' index): `length` and each wanted column
/// that is an array, summarized.
struct TableSeed(usize);

impl<'de> serde::de::DeserializeSeed<'de> for TableSeed {
    type Value = TableSummary;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<TableSummary, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TableSeed {
    type Value = TableSummary;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TableSummary, A::Error> {
        let mut t = TableSummary {
            length: None,
            columns: wanted_columns(self.0).map(|_| None).collect(),
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "length" {
                let mut c = ColumnSummary::default();
                let v = map.next_value_seed(ElementSeed(&mut c))?;
                t.length = v.filter(|&x| x >= 0).map(|x| x as u64);
            } else if let Some(j) = wanted_columns(self.0).position(|c| c == key) {
                let mut c = ColumnSummary::default();
                t.columns[j] = map.next_value_seed(ColumnSeed(&mut c))?.then_some(c);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(t)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<TableSummary, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(TableSummary::default())
    }

    crate::profile::input::scalars_give!(TableSummary, TableSummary::default());
}

/// A column: true when it is an array, each element summarized.
struct ColumnSeed<'a>(&'a mut ColumnSummary);

impl<'de> serde::de::DeserializeSeed<'de> for ColumnSeed<'_> {
    type Value = bool;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ColumnSeed<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element_seed(ElementSeed(&mut *self.0))?.is_some() {
            self.0.len += 1;
        }
        Ok(true)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(false)
    }

    crate::profile::input::scalars_give!(bool, false);
}

/// One element of a column, added to its summary (at position `len`, which
/// the caller then advances); returns it when it is an integer.
struct ElementSeed<'a>(&'a mut ColumnSummary);

impl<'de> serde::de::DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = Option<i64>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ElementSeed<'_> {
    type Value = Option<i64>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column's element")
    }

    fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<Option<i64>, E> {
        self.0.integer(x);
        Ok(Some(x))
    }

    fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Option<i64>, E> {
        match i64::try_from(x) {
            Ok(x) => self.visit_i64(x),
            Err(_) => {
                self.0.number(x as f64);
                self.0.other(|| x.to_string());
                Ok(None)
            }
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Option<i64>, E> {
        self.0.number(v);
        self.0.other(|| Value::from(v).to_string());
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<i64>, E> {
        if self.0.first_null.is_none() {
            self.0.first_null = Some(self.0.len);
        }
        Ok(None)
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Option<i64>, E> {
        self.0.other(|| b.to_string());
        Ok(None)
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Option<i64>, E> {
        self.0
            .other(|| Value::String(s.chars().take(100).collect()).to_string());
        Ok(None)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<i64>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        self.0.other(|| "an array".into());
        Ok(None)
    }

    /// An object: a marker's payload, whose `cause.stack` (the stack the
    /// front end draws in its tooltip and sidebar) is kept to be checked.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<i64>, A::Error> {
        let at = self.0.len;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != "cause" {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let cause: Value = map.next_value()?;
            let Some(stack) = cause.get("stack") else {
                continue;
            };
            match stack.as_i64().filter(|&x| x >= 0) {
                Some(x) if self.0.max_cause_stack.is_none_or(|(_, m)| x > m) => {
                    self.0.max_cause_stack = Some((at, x));
                }
                None if !stack.is_null() && self.0.first_bad_cause_stack.is_none() => {
                    let shown: String = stack.to_string().chars().take(100).collect();
                    self.0.first_bad_cause_stack = Some((at, shown));
                }
                _ => {}
            }
        }
        self.0.other(|| "an object".into());
        Ok(None)
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

    /// Threads' pids are kept as runs: looked up by thread, none for a
    /// thread without one, unknown past the table's bounds.
    #[test]
    fn thread_pids_are_kept_as_runs() {
        let mut t = ThreadPids::default();
        for (i, pid) in [Some("1"), Some("1"), None, Some("2"), Some("1")]
            .iter()
            .enumerate()
        {
            t.push(i, *pid);
        }
        assert_eq!(t.runs.len(), 4);
        assert_eq!(t.pids.len(), 2);
        let got: Vec<_> = (0..5).map(|i| t.get(i)).collect();
        assert_eq!(
            got,
            vec![
                Some(Some("1")),
                Some(Some("1")),
                Some(None),
                Some(Some("2")),
                Some(Some("1"))
            ]
        );
        let mut many = ThreadPids::default();
        for i in 0..=MAX_PIDS {
            many.push(i, Some(&i.to_string()));
        }
        assert_eq!(many.get(0), None, "past its bounds a pid is not known");
    }

    /// Check that a well-formed profile passes, and what the format allows
    /// does too: a func with no resource (-1), a thread's samples as
    /// deltas.
    #[test]
    fn accepts_well_formed_profile() {
        assert_eq!(validate(&minimal()), Vec::<String>::new());
        // A marker whose cause is a stack of its thread; a counter under
        // a thread of its own pid.
        let mut v = minimal();
        v["threads"][0]["markers"] = serde_json::json!({ "length": 1, "category": [0],
            "data": [{ "type": "OffCpu", "cause": { "tid": 1, "stack": 1, "time": 0.0 } }],
            "endTime": [1.0], "name": [0], "phase": [1], "startTime": [0.0] });
        v["counters"] = serde_json::json!([{ "name": "CPU usage", "pid": "1", "mainThreadIndex": 0,
            "samples": { "length": 2, "time": [0.0, 1.0], "count": [0.0, 1.0] } }]);
        assert_eq!(validate(&v), Vec::<String>::new());
        let mut v = minimal();
        v["threads"][0]["funcTable"]["resource"][0] = (-1).into();
        let s = &mut v["threads"][0]["samples"];
        s.as_object_mut().unwrap().remove("time");
        s["timeDeltas"] = serde_json::json!([0.5, 1.0]);
        assert_eq!(validate(&v), Vec::<String>::new());
    }

    /// Check that a profile read as text with its threads first (as sysprof
    /// writes them, before `meta` and `libs`) is checked against the counts
    /// that come after, and that a well-formed one passes in that order.
    #[test]
    fn checks_threads_against_the_libs_and_categories_after_them() {
        let read = |v: &Value| {
            let text = format!(
                "{{\"threads\":{},\"meta\":{},\"libs\":{}}}",
                v["threads"], v["meta"], v["libs"]
            );
            let mut validator = Validator::default();
            validator
                .read(&mut serde_json::Deserializer::from_str(&text))
                .unwrap();
            validator.finish()
        };
        assert_eq!(read(&minimal()), (1, Vec::new()));
        let mut v = minimal();
        v["threads"][0]["resourceTable"]["lib"][0] = 3.into();
        v["threads"][0]["frameTable"]["category"][1] = 2.into();
        let (threads, problems) = read(&v);
        assert_eq!(threads, 1);
        assert!(
            problems
                .iter()
                .any(|p| p.ends_with("resourceTable.lib[0] = 3 is out of range 0..1")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.ends_with("frameTable.category[1] = 2 is out of range 0..2")),
            "{problems:?}"
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    /// Check that a key given twice counts as its last, as `JSON.parse`
    /// reads it (a broken table after a good one is found, a table after
    /// it that is none makes it missing), and that keys the checks do not
    /// read cost nothing however many there are.
    #[test]
    fn a_repeated_key_counts_as_its_last() {
        let read = |thread_extra: &str| {
            let v = minimal();
            let thread = v["threads"][0].to_string();
            let text = format!(
                "{{\"threads\":[{},{thread_extra}}}],\"meta\":{},\"libs\":{}}}",
                &thread[..thread.len() - 1],
                v["meta"],
                v["libs"]
            );
            let mut validator = Validator::default();
            validator
                .read(&mut serde_json::Deserializer::from_str(&text))
                .unwrap();
            validator.finish().1
        };
        let problems = read(r#""stackTable":{"length":2,"prefix":[1,0],"frame":[9,9]}"#);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("does not point backwards")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("stackTable.frame[0] = 9 is out of range")),
            "{problems:?}"
        );
        let problems = read(r#""stackTable":null"#);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("stackTable.length is missing")),
            "{problems:?}"
        );
        let problems = read(
            r#""funcTable":{"length":1,"name":[0],"isJS":[false],"relevantForJS":[false],"resource":[0],"fileName":[null],"lineNumber":[null],"columnNumber":[null],"name":[7]}"#,
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("funcTable.name[0] = 7 is out of range")),
            "{problems:?}"
        );
        let many: String = (0..10_000).map(|i| format!(r#""x{i}":[1,2],"#)).collect();
        let problems = read(&format!(
            r#""markers":{{{many}"length":0,"category":[],"data":[],"endTime":[],"name":[],"phase":[],"startTime":[]}}"#
        ));
        assert_eq!(problems, Vec::<String>::new());
    }

    /// Check that each kind of breakage is reported.
    #[test]
    fn reports_each_kind_of_breakage() {
        type Breakage = Box<dyn Fn(&mut Value)>;
        let with_marker = |v: &mut Value, cause: Value| {
            v["threads"][0]["markers"] = serde_json::json!({ "length": 1, "category": [0],
                "data": [{ "type": "OffCpu", "cause": cause }], "endTime": [1.0], "name": [0],
                "phase": [1], "startTime": [0.0] });
        };
        let with_counter = |v: &mut Value, pid: &str, main: u64, times: Value| {
            v["counters"] = serde_json::json!([{ "name": "CPU usage", "pid": pid, "mainThreadIndex": main,
                "samples": { "length": 2, "time": times, "count": [0.0, 1.0] } }]);
        };
        let cases: Vec<(&str, Breakage)> = vec![
            (
                "markers.data[0].cause.stack = 2 is out of range 0..2",
                Box::new(move |v| with_marker(v, serde_json::json!({ "tid": 1, "stack": 2, "time": 0.0 }))),
            ),
            (
                "markers.data[0].cause.stack = \"a\" is not an index",
                Box::new(move |v| with_marker(v, serde_json::json!({ "stack": "a" }))),
            ),
            (
                "counter 0 (\"CPU usage\"): mainThreadIndex 1 is out of range 0..1",
                Box::new(move |v| with_counter(v, "1", 1, serde_json::json!([0.0, 1.0]))),
            ),
            (
                "counter 0 (\"CPU usage\"): pid \"7\" but its mainThreadIndex 0 is a thread of pid 1",
                Box::new(move |v| with_counter(v, "7", 0, serde_json::json!([0.0, 1.0]))),
            ),
            (
                "counter 0 (\"CPU usage\"): samples.time has 1 entries, length is 2",
                Box::new(move |v| with_counter(v, "1", 0, serde_json::json!([0.0]))),
            ),
            (
                "counters is not an array",
                Box::new(|v| v["counters"] = 5.into()),
            ),
            (
                "counter 0 is not an object",
                Box::new(|v| v["counters"] = serde_json::json!([0])),
            ),
            (
                "has 1 entries",
                Box::new(|v| v["threads"][0]["frameTable"]["func"] = serde_json::json!([0])),
            ),
            (
                "frameTable.func[1]",
                Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 5.into()),
            ),
            (
                "does not point backwards",
                Box::new(|v| v["threads"][0]["stackTable"]["prefix"][0] = 1.into()),
            ),
            (
                "not sorted",
                Box::new(|v| v["threads"][0]["samples"]["time"][0] = 9.0.into()),
            ),
            (
                "neither time nor timeDeltas",
                Box::new(|v| v["threads"][0]["samples"]["time"] = serde_json::json!([0.0])),
            ),
            (
                "resourceTable.lib[0]",
                Box::new(|v| v["threads"][0]["resourceTable"]["lib"][0] = 3.into()),
            ),
            (
                "funcTable.name[0]",
                Box::new(|v| v["threads"][0]["funcTable"]["name"][0] = 7.into()),
            ),
            (
                "samples.stack[0]",
                Box::new(|v| v["threads"][0]["samples"]["stack"][0] = 2.into()),
            ),
            (
                "frameTable.func[1] = 0.5 is not an index",
                Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 0.5.into()),
            ),
            (
                "funcTable.resource[0] = -2 is out of range",
                Box::new(|v| v["threads"][0]["funcTable"]["resource"][0] = (-2).into()),
            ),
            (
                "stackTable.prefix[1] = -1 is not an index",
                Box::new(|v| v["threads"][0]["stackTable"]["prefix"][1] = (-1).into()),
            ),
            (
                "frameTable.func[0] = null is not an index",
                Box::new(|v| v["threads"][0]["frameTable"]["func"][0] = Value::Null),
            ),
            (
                "stackTable.length is missing",
                Box::new(|v| v["threads"][0]["stackTable"]["length"] = "2".into()),
            ),
            (
                "name is not a string",
                Box::new(|v| v["threads"][0]["name"] = 3.into()),
            ),
            (
                "funcTable.name[0] = 0 is out of range 0..0",
                Box::new(|v| v["threads"][0]["stringArray"] = Value::Null),
            ),
            (
                "samples.time is not sorted at 0",
                Box::new(|v| {
                    let s = &mut v["threads"][0]["samples"];
                    s.as_object_mut().unwrap().remove("time");
                    s["timeDeltas"] = serde_json::json!([1.0, -0.5]);
                }),
            ),
        ];
        for (needle, breakit) in cases {
            let mut v = minimal();
            breakit(&mut v);
            let problems = validate(&v);
            assert!(
                problems.iter().any(|p| p.contains(needle)),
                "expected {needle:?} in {problems:?}"
            );
        }
    }
}
