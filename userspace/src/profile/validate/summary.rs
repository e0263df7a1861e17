//! What the validator keeps of a thread: the tables and columns it must
//! have ([`TABLES`]), and per column a summary gathered element by element.
//!
//! In: a column's elements one at a time (from `parse`). Out: a
//! [`ThreadSummary`] of [`TableSummary`]s of [`ColumnSummary`]s, which
//! `thread` checks: lengths, the largest index, the first bad element.

/// The tables a thread must have, and the columns each must have.
pub(super) const TABLES: &[(&str, &[&str])] = &[
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
pub(super) struct ColumnSummary {
    /// Elements.
    pub(super) len: usize,
    /// The largest integer, where it first is.
    pub(super) max: Option<(usize, i64)>,
    /// The first negative integer, and the first below -1.
    pub(super) first_negative: Option<(usize, i64)>,
    pub(super) first_below_minus_one: Option<(usize, i64)>,
    /// The first null.
    pub(super) first_null: Option<usize>,
    /// The first element neither an integer nor null, as shown.
    pub(super) first_other: Option<(usize, String)>,
    /// Markers' payloads: the largest `cause.stack`, where it first is,
    /// and the first that is not an index.
    pub(super) max_cause_stack: Option<(usize, i64)>,
    pub(super) first_bad_cause_stack: Option<(usize, String)>,
    /// The first integer not below its own position (a stack prefix
    /// must point backwards).
    pub(super) first_not_backwards: Option<(usize, i64)>,
    /// Elements that are numbers.
    pub(super) numbers: usize,
    /// Where the numbers first go down, as they stand and added up.
    pub(super) first_unsorted: Option<(usize, f64, f64)>,
    pub(super) first_unsorted_sum: Option<(usize, f64, f64)>,
    last: Option<f64>,
    sum: f64,
    last_sum: Option<f64>,
}

impl ColumnSummary {
    pub(super) fn integer(&mut self, x: i64) {
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

    pub(super) fn number(&mut self, v: f64) {
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

    pub(super) fn other(&mut self, shown: impl FnOnce() -> String) {
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
pub(super) fn wanted_columns(table: usize) -> impl Iterator<Item = &'static str> {
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
pub(super) struct TableSummary {
    pub(super) length: Option<u64>,
    pub(super) columns: Vec<Option<ColumnSummary>>,
}

/// A thread as the validator sees it, gathered as it is parsed.
#[derive(Default, Debug)]
pub struct ThreadSummary {
    pub(super) object: bool,
    pub(super) name_shown: String,
    pub(super) name_string: bool,
    pub(super) pid_string: bool,
    /// The pid, when a string (cut to 64 characters).
    pub(super) pid: Option<String>,
    pub(super) process_name_string: bool,
    pub(super) tid_number: bool,
    /// `stringArray`'s length (0 when it is none).
    pub(super) strings: usize,
    /// Per table of [`TABLES`], its summary when the thread has it.
    pub(super) tables: Vec<Option<TableSummary>>,
}

impl ThreadSummary {
    pub(super) fn table(&self, name: &str) -> Option<&TableSummary> {
        let i = TABLES.iter().position(|(n, _)| *n == name)?;
        self.tables.get(i)?.as_ref()
    }

    pub(super) fn column(&self, table: &str, column: &str) -> Option<&ColumnSummary> {
        let i = TABLES.iter().position(|(n, _)| *n == table)?;
        let j = wanted_columns(i).position(|c| c == column)?;
        self.tables.get(i)?.as_ref()?.columns.get(j)?.as_ref()
    }
}
