//! The counters' check: each counter's `mainThreadIndex` against the pid
//! of the thread it names, and its samples' columns against their length.
//!
//! In: each thread's pid as the threads are read ([`ThreadPids`]), the
//! counters summarized as they are read. Out: the problems, once every
//! thread is read.

use super::{Validator, MAX_COUNTERS};

/// Each thread's pid for the counters' check, as runs of threads of one pid
/// (a process's threads are written together) over an interned list: a
/// file of millions of threads costs its runs, at most [`MAX_PID_RUNS`] of
/// them and [`MAX_PIDS`] distinct pids; past either, pids are not known.
#[derive(Default)]
pub(super) struct ThreadPids {
    /// (first thread, pid's index in `pids` or `u32::MAX` for none).
    pub(super) runs: Vec<(u32, u32)>,
    pub(super) pids: Vec<String>,
    index: rustc_hash::FxHashMap<String, u32>,
    overflow: bool,
}

const MAX_PID_RUNS: usize = 1 << 20;
pub(super) const MAX_PIDS: usize = 1 << 16;

impl ThreadPids {
    pub(super) fn push(&mut self, thread: usize, pid: Option<&str>) {
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
    pub(super) fn get(&self, i: usize) -> Option<Option<&str>> {
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
    /// The counters' cross-references: each counter's `mainThreadIndex` a
    /// thread of its own `pid` (the front end draws a counter under that
    /// thread's process, and fails on one that is not there), its samples'
    /// columns of their length. Checked once every thread is read.
    pub(super) fn check_counters(&mut self) {
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
}
