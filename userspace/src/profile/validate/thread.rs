//! The checks of one thread, on its summary: each table's columns of its
//! length, each index column within what it points into, stack prefixes
//! pointing backwards, markers' cause stacks, sample times in order, the
//! thread's own fields of their types.
//!
//! In: a [`ThreadSummary`], and the libraries' and categories' counts when
//! they were read before it. Out: the thread's problems, in that order, and
//! the indexes into libraries or categories still to check ([`Deferred`])
//! once those counts are read.

use std::collections::HashMap;

use super::summary::{ThreadSummary, TABLES};
use super::{Bound, Deferred, Validator, MAX_PROBLEMS};

impl Validator {
    /// Check one thread, summarized as it was parsed.
    pub(super) fn check_thread(&mut self, t: &ThreadSummary) {
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
        let mut check = ThreadCheck {
            t,
            prefix: format!("thread {ti} ({})", t.name_shown),
            problems: Vec::new(),
            deferred: Vec::new(),
            len: HashMap::new(),
        };
        check.lengths();
        check.indexes(self.libs, self.categories);
        check.stack_prefixes();
        check.cause_stacks();
        check.sample_times();
        check.fields();
        self.push(check.problems);
        self.deferred.append(&mut check.deferred);
        self.thread_pids.push(ti, t.pid.as_deref());
    }
}

/// One thread being checked: what each step found so far.
struct ThreadCheck<'a> {
    t: &'a ThreadSummary,
    /// How each of its problems begins: the thread's index and name.
    prefix: String,
    problems: Vec<String>,
    deferred: Vec<Deferred>,
    /// Each table's `length`, where it has one.
    len: HashMap<&'static str, usize>,
}

impl ThreadCheck<'_> {
    fn problem(&mut self, msg: String) {
        self.problems.push(format!("{}: {msg}", self.prefix));
    }

    /// Each table's `length`, and each of its columns of that length.
    fn lengths(&mut self) {
        let t = self.t;
        for (table, columns) in TABLES {
            let Some(n) = t.table(table).and_then(|tb| tb.length) else {
                self.problem(format!("{table}.length is missing"));
                continue;
            };
            self.len.insert(*table, n as usize);
            for c in *columns {
                match t.column(table, c) {
                    Some(col) if col.len == n as usize => {}
                    Some(col) => self.problem(format!(
                        "{table}.{c} has {} entries, length is {n}",
                        col.len
                    )),
                    None => self.problem(format!("{table}.{c} is missing")),
                }
            }
        }
    }

    /// A table's length as the bound of the indexes into it.
    fn bound(&self, table: &str) -> Bound {
        Bound::Known(self.len.get(table).copied().unwrap_or(0))
    }

    /// Each index column within the table (or strings, libraries,
    /// categories) it points into; `libs` and `categories` are their
    /// counts when already read.
    fn indexes(&mut self, libs: Option<usize>, categories: Option<usize>) {
        let known = |n: Option<usize>, otherwise: Bound| n.map_or(otherwise, Bound::Known);
        let (libs, categories) = (
            known(libs, Bound::Libs),
            known(categories, Bound::Categories),
        );
        let strings = Bound::Known(self.t.strings);
        self.index("frameTable.func", self.bound("funcTable"), false);
        self.index("frameTable.nativeSymbol", self.bound("nativeSymbols"), true);
        self.index("frameTable.category", categories, true);
        self.index("funcTable.name", strings, false);
        self.index("funcTable.resource", self.bound("resourceTable"), false);
        self.index("funcTable.fileName", strings, true);
        self.index("resourceTable.lib", libs, true);
        self.index("resourceTable.name", strings, false);
        self.index("nativeSymbols.libIndex", libs, false);
        self.index("nativeSymbols.name", strings, false);
        self.index("stackTable.frame", self.bound("frameTable"), false);
        self.index("samples.stack", self.bound("stackTable"), true);
        self.index("markers.name", strings, false);
    }

    /// One index column (`table.column`): integers only (nulls where
    /// `nullable`), none negative, none past `bound` (deferred when the
    /// bound is not read yet).
    fn index(&mut self, column: &'static str, bound: Bound, nullable: bool) {
        let (table, field) = column.split_once('.').expect("table.column");
        let Some(col) = self.t.column(table, field) else {
            return;
        };
        if let Some((i, shown)) = &col.first_other {
            self.problem(format!("{column}[{i}] = {shown} is not an index"));
        }
        if let (Some(i), false) = (col.first_null, nullable) {
            self.problem(format!("{column}[{i}] = null is not an index"));
        }
        let minus_one_allowed = column == "funcTable.resource";
        let negative = col
            .first_negative
            .filter(|&(_, x)| !(minus_one_allowed && x == -1))
            .or(col.first_below_minus_one);
        if let Some((i, x)) = negative {
            match bound {
                Bound::Known(b) => {
                    self.problem(format!("{column}[{i}] = {x} is out of range 0..{b}"))
                }
                Bound::Libs | Bound::Categories => {
                    self.problem(format!("{column}[{i}] = {x} is not an index"))
                }
            }
        }
        match (col.max, bound) {
            (Some((i, x)), Bound::Known(b)) if x >= 0 && x as usize >= b => {
                self.problem(format!("{column}[{i}] = {x} is out of range 0..{b}"))
            }
            (Some((index, value)), Bound::Libs | Bound::Categories) if value >= 0 => {
                self.deferred.push(Deferred {
                    thread: self.prefix.clone(),
                    column,
                    index,
                    value,
                    bound,
                });
            }
            _ => {}
        }
    }

    /// `stackTable.prefix`: indexes (or null) of earlier stacks only.
    fn stack_prefixes(&mut self) {
        let Some(col) = self.t.column("stackTable", "prefix") else {
            return;
        };
        if let Some((i, x)) = col.first_not_backwards {
            self.problem(format!(
                "stackTable.prefix[{i}] = {x} does not point backwards"
            ));
        }
        if let Some((i, shown)) = &col.first_other {
            self.problem(format!("stackTable.prefix[{i}] = {shown} is not an index"));
        }
        if let Some((i, x)) = col.first_negative {
            self.problem(format!("stackTable.prefix[{i}] = {x} is not an index"));
        }
    }

    /// Markers' `data[i].cause.stack`: stacks of this thread.
    fn cause_stacks(&mut self) {
        let Some(col) = self.t.column("markers", "data") else {
            return;
        };
        let stacks = self.len.get("stackTable").copied().unwrap_or(0);
        if let Some((i, x)) = col.max_cause_stack.filter(|&(_, x)| x as usize >= stacks) {
            self.problem(format!(
                "markers.data[{i}].cause.stack = {x} is out of range 0..{stacks}"
            ));
        }
        if let Some((i, shown)) = &col.first_bad_cause_stack {
            self.problem(format!(
                "markers.data[{i}].cause.stack = {shown} is not an index"
            ));
        }
    }

    /// The times: `time`, or else `timeDeltas` added up, of the table's length.
    fn sample_times(&mut self) {
        let t = self.t;
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
                    self.problem(format!("samples.time is not sorted at {i}: {a} > {b}"));
                }
            }
            _ => self.problem("samples has neither time nor timeDeltas of its length".into()),
        }
    }

    /// The thread's own fields: `pid`, `name` and `processName` strings,
    /// `tid` a number.
    fn fields(&mut self) {
        let t = self.t;
        for (key, is) in [
            ("pid", t.pid_string),
            ("name", t.name_string),
            ("processName", t.process_name_string),
        ] {
            if !is {
                self.problem(format!("{key} is not a string"));
            }
        }
        if !t.tid_number {
            self.problem("tid is not a number".into());
        }
    }
}
