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
//!
//! Here: the [`Validator`] itself, what it keeps between threads and how
//! it ends. A thread is parsed into its summary in `parse` (what is kept of
//! it is `summary`), checked in `thread`; the counters are checked in
//! `counters`.

mod counters;
mod parse;
mod summary;
mod thread;

use serde_json::Value;

use counters::ThreadPids;
pub use summary::ThreadSummary;

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

#[cfg(test)]
mod tests;
