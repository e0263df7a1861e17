//! Python threads by the names `threading` gave them.
//!
//! In: at each window's end, the CPython processes that ran in it (their
//! [`PythonRuntime`]). Out: for a (pid, tid), the name the program gave
//! the thread (`threading.Thread(name="hasher")`), which the window's
//! thread list takes where the kernel's name is only inherited (CPython
//! before 3.14 never sets it: every thread is "python3") or is the given
//! name cut at 15 bytes (3.14 sets it). Read for 3.11+ (whose dict
//! layouts `threads_read` knows); 3.8-3.10's threads keep the kernel's names.
//!
//! The names are read from the interpreter's memory
//! ([`crate::runtimes::python::threads_read`]) of the processes whose Python
//! code was sampled since the last read, every 250 ms and at each window's
//! end: `threading._active` is looked up once per process (retried, less
//! and less often, until the program imports `threading`), then read. A
//! thread that started and ended between two reads is not in `_active` at
//! either and keeps the kernel's name. Names stay for the process's life
//! (a thread's last window may end after it left `_active`), within
//! [`MAX_PROCESSES`] processes and [`MAX_THREADS`] names each.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::runtimes::python::process::PythonRuntime;
use crate::runtimes::python::threads_read::{Interpreter, Process};

/// Processes whose names are kept, at most (each a few names).
const MAX_PROCESSES: usize = 4096;

/// Names kept per process, at most.
const MAX_THREADS: usize = 4096;

/// Longest wait before looking for `threading` again in a process that
/// had not imported it, ns.
const LONGEST_RETRY_NS: u64 = 8_000_000_000;

/// First wait, ns.
const FIRST_RETRY_NS: u64 = 250_000_000;

#[derive(Debug)]
struct Named {
    /// Which interpreter (its binary and base): an exec, or the pid reused,
    /// is another one.
    runtime: (usize, u64),
    /// `threading._active`, once found.
    active: Option<u64>,
    /// When to look for it again, and the wait after that.
    retry_at: u64,
    retry: u64,
    names: FxHashMap<u32, String>,
}

/// The names of CPython processes' threads.
#[derive(Debug, Default)]
pub struct PythonThreadNames {
    by_pid: FxHashMap<u32, Named>,
    /// Processes whose Python frames were sampled since the last read:
    /// only those are read (a host's idle interpreters cost nothing).
    sampled: FxHashSet<u32>,
}

impl PythonThreadNames {
    /// `pid`'s Python code ran (a sample with its frames).
    pub fn sampled(&mut self, pid: u32) {
        self.sampled.insert(pid);
    }

    /// The processes sampled since the last call.
    pub fn take_sampled(&mut self) -> Vec<u32> {
        self.sampled.drain().collect()
    }

    /// Read `pid`'s thread names now (`now_ns`, for the retries), its
    /// interpreter being `py`.
    pub fn refresh(&mut self, pid: u32, py: &PythonRuntime, now_ns: u64) {
        if !py.binary.layout.names_threads {
            return;
        }
        let identity = (Arc::as_ptr(&py.binary) as usize, py.base);
        if self.by_pid.get(&pid).is_some_and(|n| n.runtime != identity) {
            self.by_pid.remove(&pid);
        }
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= MAX_PROCESSES {
            return;
        }
        let named = self.by_pid.entry(pid).or_insert(Named {
            runtime: identity,
            active: None,
            retry_at: 0,
            retry: FIRST_RETRY_NS,
            names: FxHashMap::default(),
        });
        let memory = Process(pid);
        let interp = Interpreter {
            memory: &memory,
            layout: py.binary.layout,
            runtime: py.base.wrapping_add(py.binary.runtime),
        };
        let active = match named.active {
            Some(a) => a,
            None if now_ns < named.retry_at => return,
            None => match interp.find_active() {
                Ok(a) => {
                    named.active = Some(a);
                    a
                }
                Err(_) => {
                    // Not imported yet, or not readable now: later, less often.
                    named.retry_at = now_ns.saturating_add(named.retry);
                    named.retry = (named.retry * 2).min(LONGEST_RETRY_NS);
                    return;
                }
            },
        };
        match interp.thread_names(active) {
            Ok(found) => {
                for (tid, name) in found {
                    if named.names.len() < MAX_THREADS || named.names.contains_key(&tid) {
                        named.names.insert(tid, name);
                    }
                }
            }
            // The dict moved (a program that rebinds `threading._active`):
            // look it up again.
            Err(_) => named.active = None,
        }
    }

    /// The name `pid`'s thread `tid` was given, where the kernel's
    /// (`comm`) is only the process's (`process_comm`, inherited) or that
    /// name cut: never for the main thread ("MainThread" says less than
    /// the program's name).
    pub fn name(&self, pid: u32, tid: u32, comm: &str, process_comm: &str) -> Option<&str> {
        if tid == pid {
            return None;
        }
        let name = self.by_pid.get(&pid)?.names.get(&tid)?;
        let inherited = comm == process_comm;
        let cut = comm.len() == crate::bpf::abi::TASK_COMM_LEN - 1 && name.starts_with(comm);
        (!name.is_empty() && (inherited || cut) && name != comm).then_some(name.as_str())
    }

    /// Forget the processes `gone` says have ended.
    pub fn forget(&mut self, gone: impl Fn(u32) -> bool) {
        self.by_pid.retain(|&pid, _| !gone(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(names: &[(u32, &str)]) -> PythonThreadNames {
        let mut n = PythonThreadNames::default();
        n.by_pid.insert(
            10,
            Named {
                runtime: (0, 0),
                active: None,
                retry_at: 0,
                retry: FIRST_RETRY_NS,
                names: names.iter().map(|&(t, s)| (t, s.to_string())).collect(),
            },
        );
        n
    }

    /// The name `threading` gave is taken where the kernel's is inherited
    /// or its first 15 bytes (3.14), never over a name the thread set
    /// itself another way, and never for the main thread.
    #[test]
    fn given_names_replace_only_inherited_or_cut_ones() {
        let n = with(&[
            (10, "MainThread"),
            (11, "hasher"),
            (12, "compressor-with-a-long-name"),
            (13, "pool-1"),
        ]);
        assert_eq!(n.name(10, 10, "python3", "python3"), None);
        assert_eq!(n.name(10, 11, "python3", "python3"), Some("hasher"));
        assert_eq!(
            n.name(10, 12, "compressor-with", "python3"),
            Some("compressor-with-a-long-name")
        );
        assert_eq!(n.name(10, 13, "io-worker", "python3"), None);
        assert_eq!(n.name(10, 14, "python3", "python3"), None);
        assert_eq!(n.name(11, 11, "python3", "python3"), None);
    }
}
