//! The names threads that never named themselves show: after the function
//! their thread started in.
//!
//! In: a process of the recording (its threads' names and sampled stacks)
//! and the recording's frames. Out: each thread's track name. A thread
//! keeps the kernel's name (or the one its runtime gave it, as a JVM's)
//! unless it is not the process's main thread and still bears the
//! process's name: a program's helper threads that nobody named. Node's are
//! all "node" (its worker threads, V8's platform workers, the inspector's
//! I/O thread, the delayed-task scheduler): six tracks a user could not
//! tell apart. Their stacks can: the function over `start_thread` is the
//! routine the thread was started with (`node::worker::Worker::StartThread`,
//! `node::PlatformWorkerThread`). Such a thread is named
//! `node (Worker::StartThread)`, numbered in the order the threads appear
//! where several share a name (`… #1`, `… #2`). One whose stacks do not
//! reach its start (it never ran whole while recorded), or whose routine
//! no symbol names (`pgbench+0xfb30` in a stripped program), is
//! `node (tid N)`: not the main thread's name.

use rustc_hash::FxHashMap;

use crate::model::recording::{ProcessRecord, Recording, ThreadRecord};
use crate::model::stack_tree::NO_PARENT;

/// Samples of a thread looked at for its start routine, at most (spread
/// over its samples): the routine is the same in every whole stack.
const SAMPLES_LOOKED_AT: usize = 64;

/// Functions that start threads for others (glibc's, musl's).
const THREAD_STARTERS: &[&str] = &["start_thread", "start"];

/// Start routines that only call the one a program gave (C++'s
/// `std::thread`, Rust's, GLib's): the function under them names the thread.
const TRAMPOLINES: &[&str] = &[
    "std::execute_native_thread_routine",
    "std::sys::pal::unix::thread::Thread::new::thread_start",
    "g_thread_proxy",
];

/// Each of `p`'s threads' track name, in `p.threads`' order.
pub(super) fn thread_names(rec: &Recording, p: &ProcessRecord) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(p.threads.len());
    // How many threads were given each derived name, for numbering.
    let mut derived: FxHashMap<String, Vec<usize>> = FxHashMap::default();
    for (i, t) in p.threads.iter().enumerate() {
        if !unnamed(p, t) {
            names.push(t.name.clone());
            continue;
        }
        match start_routine(rec, t) {
            // Named as its routine is: the routine says nothing more.
            Some(routine) if routine == t.name => names.push(t.name.clone()),
            Some(routine) => {
                let name = format!("{} ({routine})", t.name);
                derived.entry(name.clone()).or_default().push(i);
                names.push(name);
            }
            None => names.push(format!("{} (tid {})", t.name, t.tid)),
        }
    }
    for (name, threads) in derived {
        if threads.len() < 2 {
            continue;
        }
        let mut threads = threads;
        threads.sort_by_key(|&i| (p.threads[i].start_ns.unwrap_or(0), p.threads[i].tid));
        for (n, i) in threads.into_iter().enumerate() {
            names[i] = format!("{} #{})", &name[..name.len() - 1], n + 1);
        }
    }
    names
}

/// Whether `t` is a helper thread nobody named: not the main thread, and
/// named as its process is (the kernel's name, cut at 15 bytes).
fn unnamed(p: &ProcessRecord, t: &ThreadRecord) -> bool {
    t.tid != p.pid && !t.name.is_empty() && t.name == p.name
}

/// The routine `t` was started with, shortened ([`short_name`]), from the
/// stacks of its samples: the most frequent, so one torn stack does not
/// name it.
fn start_routine(rec: &Recording, t: &ThreadRecord) -> Option<String> {
    let stacks: Vec<u32> = spread(&t.samples.stack)
        .chain(spread(&t.off_cpu.stack))
        .collect();
    let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
    let mut path = Vec::new();
    for stack in stacks {
        path.clear();
        let mut node = stack;
        // Root last; bounded by the tree (every parent is an earlier node).
        while node != NO_PARENT && (node as usize) < rec.stacks.len() {
            path.push(node);
            node = rec.stacks.parent(node);
        }
        let funcs = path.iter().rev().filter_map(|&node| {
            let frame = rec.frames.get(rec.stacks.key(node) as usize)?;
            if frame.kind == crate::model::recording::FrameKind::Goroutine {
                return None;
            }
            Some(frame.symbols.funcs.first()?.name.as_str())
        });
        // Code no symbol names (`pgbench+0xfb30`) names no thread.
        if let Some(routine) = routine_of(funcs).filter(|r| !r.contains("+0x")) {
            *seen.entry(routine).or_default() += 1;
        }
    }
    let (routine, _) = seen
        .into_iter()
        .max_by_key(|&(name, n)| (n, std::cmp::Reverse(name)))?;
    Some(short_name(routine))
}

/// The function over the thread starter in `funcs` (root first), past
/// trampolines.
fn routine_of<'a>(funcs: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut after_starter = false;
    for name in funcs {
        if after_starter {
            if TRAMPOLINES.contains(&name) {
                continue;
            }
            return Some(name);
        }
        after_starter = THREAD_STARTERS.contains(&name);
    }
    None
}

/// Up to [`SAMPLES_LOOKED_AT`] of `stacks`, spread over them.
fn spread(stacks: &[u32]) -> impl Iterator<Item = u32> + '_ {
    let step = stacks.len().div_ceil(SAMPLES_LOOKED_AT).max(1);
    stacks.iter().step_by(step).copied()
}

/// A function's name short enough for a track: no parameters, no
/// anonymous namespaces, no lambdas, the last two scopes
/// (`node::worker::Worker::StartThread(v8::…)::{lambda(void*)#1}::_FUN(void*)`
/// is `Worker::StartThread`).
pub(super) fn short_name(name: &str) -> String {
    let name = name.replace("(anonymous namespace)::", "");
    // Up to the parameters (the first parenthesis outside template brackets).
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth <= 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &name[..end];
    let scopes: Vec<&str> = split_scopes(head);
    let keep = scopes.len().saturating_sub(2);
    let short = scopes[keep..].join("::");
    if short.is_empty() {
        name.to_string()
    } else {
        short
    }
}

/// `head` split at `::` outside template brackets.
fn split_scopes(head: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let bytes = head.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b':' if depth <= 0 && bytes.get(i + 1) == Some(&b':') => {
                out.push(&head[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&head[start..]);
    out.retain(|s| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_routines_are_named_short() {
        for (full, short) in [
            (
                "node::worker::Worker::StartThread(v8::FunctionCallbackInfo<v8::Value> const&)::{lambda(void*)#1}::_FUN(void*)",
                "Worker::StartThread",
            ),
            ("node::(anonymous namespace)::PlatformWorkerThread(void*)", "node::PlatformWorkerThread"),
            (
                "node::WorkerThreadsTaskRunner::DelayedTaskScheduler::Start()::{lambda(void*)#1}::_FUN(void*)",
                "DelayedTaskScheduler::Start",
            ),
            ("node::inspector::(anonymous namespace)::StartIoThreadMain(void*)", "inspector::StartIoThreadMain"),
            ("worker", "worker"),
            ("std::vector<a::b>::run(int)", "vector<a::b>::run"),
            ("(", "("),
        ] {
            assert_eq!(short_name(full), short, "{full}");
        }
    }

    #[test]
    fn the_routine_is_over_the_thread_starter_past_trampolines() {
        let stack = ["clone3", "start_thread", "worker_main", "uv_cond_wait"];
        assert_eq!(routine_of(stack.into_iter()), Some("worker_main"));
        let stack = [
            "clone3",
            "start_thread",
            "std::execute_native_thread_routine",
            "Pool::run",
        ];
        assert_eq!(routine_of(stack.into_iter()), Some("Pool::run"));
        assert_eq!(routine_of(["_start", "main", "work"].into_iter()), None);
    }
}
