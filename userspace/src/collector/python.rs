//! Python frames into stacks: the chain the kernel read beside a sample's
//! native stack, named and put where the interpreter runs it.
//!
//! In: a sample's native user frames (leaf first, perhaps ending in a cut),
//! the (code object, instruction) pairs the kernel read, and the process's
//! interpreter ([`PythonRuntime`]). Out: the same stack with each native
//! frame of the eval loop replaced by the Python frames that call of it was
//! running, as raw keys ([`PY_KEY_BASE`] | index) into the window's
//! [`PythonFrames`] (name, file, line), which replay turns into frames. The
//! table is JavaScript's and Java's too, whose compiled frames are one key
//! each with the functions inlined into them ([`RuntimeFrame`]).
//!
//! Code objects are read from the process as the samples arrive (they may
//! be freed soon after), once per process, address and fingerprint (what
//! the kernel read of the object with its address: a freed object's
//! address reused by another code object is another key, and the old one,
//! read too late, is refused, not named as the new), into a cache with a
//! byte budget, dropped for a process at its exec and 2 s after its exit.
//!
//! The pairing, leaf first: the k-th eval-loop frame of the native stack
//! runs the k-th segment of the chain (a segment ends at the frame a C-level
//! call of the eval loop began with). One eval frame more than segments is
//! a call entering or leaving the loop: the leaf-most stays a native frame.
//! Segments left over (the native walk stopped short) go below the native
//! frames, before the cut, so the Python callers are kept.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::stack_end::StackEnd;
use crate::symbolize::python::{read_code, CodeError, CodeInfo, KernelPyFrame};
use crate::unwind::python::PythonRuntime;

/// Raw keys of Python frames: above every user address, below the kernel's.
pub(super) const PY_KEY_BASE: u64 = 0x4000_0000_0000_0000;
const PY_KEY_MASK: u64 = 0xc000_0000_0000_0000;

/// The raw key of the root frame of a stack whose CPython's version this
/// build does not read: after the cuts' keys (1..=8), where no code lives.
pub(super) const PY_NOT_READ_KEY: u64 = 9;

/// The raw key of a Python frame whose code object could not be named (it
/// was freed and its address reused before it was read, or its memory is
/// unreadable): kept in its place, so the caller chain stays true.
pub(super) const PY_UNNAMED_KEY: u64 = 10;

/// Whether a raw key is a Python frame's.
pub(super) fn is_python_key(key: u64) -> bool {
    key & PY_KEY_MASK == PY_KEY_BASE
}

/// How long an exited process's code objects stay: its last samples may still be queued.
const KEEP_EXITED_NS: u64 = 2_000_000_000;

/// Bytes of code objects' names and line tables kept, all processes.
const CODE_CACHE_BYTES: usize = 16 << 20;

/// One machine frame of an interpreter or a JIT, as named: its function
/// (code object, line) and, where a JIT compiler inlined others into the
/// code at that address, theirs after it, outermost first (so the frame
/// becomes one profile frame per function, the inlined ones marked by
/// their inline depth, as native inlined functions are).
pub(super) type RuntimeFrame = Arc<[(Arc<CodeInfo>, u32)]>;

/// The Python frames a window's stacks refer to (and the JavaScript and
/// Java ones, which share the table): [`RuntimeFrame`]s.
#[derive(Debug, Default)]
pub(super) struct PythonFrames {
    names: Vec<RuntimeFrame>,
    /// By (code object, line) of each function, outermost first.
    index: FxHashMap<Box<[(usize, u32)]>, u32>,
    /// A lookup's index key (reused: no allocation per frame).
    probe: Vec<(usize, u32)>,
}

impl PythonFrames {
    /// The raw key of `code` at `line`.
    pub(super) fn key(&mut self, code: &Arc<CodeInfo>, line: u32) -> u64 {
        self.key_of(std::slice::from_ref(&(code.clone(), line)))
    }

    /// The raw key of one machine frame's functions, outermost first (one,
    /// or a compiled function and those inlined into it at that address).
    pub(super) fn key_of(&mut self, functions: &[(Arc<CodeInfo>, u32)]) -> u64 {
        self.probe.clear();
        self.probe
            .extend(functions.iter().map(|(c, l)| (Arc::as_ptr(c) as usize, *l)));
        let i = match self.index.get(self.probe.as_slice()) {
            Some(&i) => i,
            None => {
                let i = self.names.len() as u32;
                self.names.push(functions.into());
                self.index.insert(self.probe.as_slice().into(), i);
                i
            }
        };
        PY_KEY_BASE | i as u64
    }

    /// The frame of a raw key.
    pub(super) fn get(&self, key: u64) -> Option<&RuntimeFrame> {
        self.names.get((key & !PY_KEY_MASK) as usize)
    }

    /// Forget every frame (a table reused for one record's stack).
    pub(super) fn clear(&mut self) {
        self.names.clear();
        self.index.clear();
    }

    /// The frames, in key order.
    pub(super) fn names(&self) -> &[RuntimeFrame] {
        &self.names
    }

    /// The key `key` of `from` has here (a stack carried to the next window).
    pub(super) fn carry(&mut self, from: &PythonFrames, key: u64) -> u64 {
        match from.get(key) {
            Some(f) => self.key_of(f),
            None => StackEnd::NotAvailable.raw_key().expect("a cut"),
        }
    }
}

/// What a cache of objects read from processes holds, by its size.
pub(super) trait Held {
    /// Bytes held.
    fn bytes(&self) -> usize;
}

impl Held for CodeInfo {
    fn bytes(&self) -> usize {
        CodeInfo::bytes(self)
    }
}

/// Objects read from processes' memory (Python code objects, Java
/// methods), per process, address and identity (the fingerprint the
/// kernel read with the address, where it reads one), within
/// [`CODE_CACHE_BYTES`]; what could not be read is remembered as such.
#[derive(Debug)]
pub(super) struct CodeCache<T = CodeInfo> {
    by_pid: FxHashMap<u32, FxHashMap<(u64, u32), Option<Arc<T>>>>,
    bytes: usize,
    /// Exits in order, (time, pid): forgotten 2 s later.
    exited: std::collections::VecDeque<(u64, u32)>,
    /// Frames whose object could not be read or was none (counted).
    pub(super) unresolved: u64,
    /// Objects (once each, not per frame) freed after their sample (their
    /// address reused by another one, or not yet): a name refused, not lent.
    pub(super) replaced: u64,
}

impl<T> Default for CodeCache<T> {
    fn default() -> Self {
        CodeCache {
            by_pid: FxHashMap::default(),
            bytes: 0,
            exited: Default::default(),
            unresolved: 0,
            replaced: 0,
        }
    }
}

impl CodeCache<CodeInfo> {
    /// `pid`'s code object of `frame`, read on first use.
    fn code(
        &mut self,
        pid: u32,
        frame: &KernelPyFrame,
        py: &PythonRuntime,
    ) -> Option<Arc<CodeInfo>> {
        let mut replaced = false;
        let code = self.get_or_read(pid, frame.code, frame.fingerprint, || {
            let read = read_code(
                pid,
                frame.code,
                frame.fingerprint,
                py.binary.layout,
                py.code_type(),
            );
            replaced = matches!(read, Err(CodeError::Replaced | CodeError::Freed));
            read.ok()
        });
        self.replaced += u64::from(replaced);
        code
    }
}

impl<T: Held> CodeCache<T> {
    /// `pid`'s object at `addr` of `identity`, read with `read` on first
    /// use. Past the budget every process's objects are dropped and read
    /// again as used.
    pub(super) fn get_or_read(
        &mut self,
        pid: u32,
        addr: u64,
        identity: u32,
        read: impl FnOnce() -> Option<T>,
    ) -> Option<Arc<T>> {
        if let Some(known) = self.by_pid.get(&pid).and_then(|m| m.get(&(addr, identity))) {
            return known.clone();
        }
        let read = read().map(Arc::new);
        let size = read.as_ref().map_or(16, |c| c.bytes() + 16);
        if self.bytes + size > CODE_CACHE_BYTES {
            self.by_pid.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.by_pid
            .entry(pid)
            .or_default()
            .insert((addr, identity), read.clone());
        read
    }

    /// `pid`'s object at `addr` of `identity` if known: `Some(None)` where
    /// it was found unreadable or none; never reads.
    pub(super) fn get(&self, pid: u32, addr: u64, identity: u32) -> Option<Option<Arc<T>>> {
        self.by_pid.get(&pid)?.get(&(addr, identity)).cloned()
    }

    /// `pid`'s object at `addr` of `identity` is `object` now (read anew).
    pub(super) fn put(
        &mut self,
        pid: u32,
        addr: u64,
        identity: u32,
        object: Option<T>,
    ) -> Option<Arc<T>> {
        self.forget_one(pid, addr, identity);
        self.get_or_read(pid, addr, identity, || object)
    }

    /// `pid` exited at `time_ns`: its code objects are forgotten once its
    /// last samples are in (those of processes that exited 2 s before go
    /// now). Forgotten at the exit itself, the samples still in the ring
    /// (seconds of them in the agent, which drains lazily) read them again
    /// from a process that is gone: a third of one run's stacks lost their
    /// Python frames so.
    pub(super) fn exited(&mut self, pid: u32, time_ns: u64) {
        self.exited.push_back((time_ns, pid));
        while let Some(&(t, old)) = self.exited.front() {
            if time_ns.saturating_sub(t) < KEEP_EXITED_NS {
                break;
            }
            self.exited.pop_front();
            self.forget(old);
        }
    }

    /// One entry forgotten: its object was found to be another's since.
    pub(super) fn forget_one(&mut self, pid: u32, addr: u64, identity: u32) {
        if let Some(old) = self
            .by_pid
            .get_mut(&pid)
            .and_then(|m| m.remove(&(addr, identity)))
        {
            self.bytes = self
                .bytes
                .saturating_sub(old.as_ref().map_or(16, |c| c.bytes() + 16));
        }
    }

    /// `pid` exec'd: its code objects are gone with its old image.
    pub(super) fn forget(&mut self, pid: u32) {
        if let Some(m) = self.by_pid.remove(&pid) {
            self.bytes = self.bytes.saturating_sub(
                m.values()
                    .map(|c| c.as_ref().map_or(16, |c| c.bytes() + 16))
                    .sum(),
            );
        }
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forget every object read (read again as used); the exits and counts stay.
    pub(super) fn clear(&mut self) {
        self.by_pid = FxHashMap::default();
        self.bytes = 0;
    }

    /// The counts since the last call: (frames unnamed, objects replaced).
    pub(super) fn take_counts(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.unresolved),
            std::mem::take(&mut self.replaced),
        )
    }
}

/// Merge the Python `pairs` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`.
pub(super) fn merge(
    stack: &[u64],
    pairs: &[u64],
    pid: u32,
    py: &PythonRuntime,
    codes: &mut CodeCache,
    frames: &mut PythonFrames,
    out: &mut Vec<u64>,
) {
    out.clear();
    // Segments: ranges of pairs, leaf first.
    let mut segments: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let n = pairs.len() / 2;
    for i in 0..n {
        if KernelPyFrame::from_words(pairs[2 * i], pairs[2 * i + 1]).segment_end || i + 1 == n {
            segments.push((start, i + 1));
            start = i + 1;
        }
    }
    let cut = stack
        .last()
        .is_some_and(|&k| StackEnd::from_raw_key(k).is_some());
    let native = if cut {
        &stack[..stack.len() - 1]
    } else {
        stack
    };
    // A return address is the instruction after the call: look up the call.
    let is_eval = |depth: usize, addr: u64| {
        py.in_eval_loop(if depth == 0 {
            addr
        } else {
            addr.wrapping_sub(1)
        })
    };
    let evals = native
        .iter()
        .enumerate()
        .filter(|&(d, &a)| is_eval(d, a))
        .count();
    let skip = usize::from(evals == segments.len() + 1);
    let mut next_segment = 0;
    let mut seen = 0;
    let mut push_segment = |s: (usize, usize), out: &mut Vec<u64>| {
        for i in s.0..s.1 {
            let frame = KernelPyFrame::from_words(pairs[2 * i], pairs[2 * i + 1]);
            let key = match codes.code(pid, &frame, py) {
                Some(info) => {
                    let index = (frame.instr as i64).wrapping_sub(
                        frame.code.wrapping_add(py.binary.layout.code_bytecode) as i64,
                    ) / 2;
                    frames.key(&info, info.line(index))
                }
                None => {
                    codes.unresolved += 1;
                    PY_UNNAMED_KEY
                }
            };
            out.push(key);
        }
    };
    for (depth, &addr) in native.iter().enumerate() {
        if is_eval(depth, addr) {
            seen += 1;
            if seen > skip && next_segment < segments.len() {
                push_segment(segments[next_segment], out);
                next_segment += 1;
                continue;
            }
        }
        out.push(addr);
    }
    // The native walk stopped short of the callers' eval frames: their
    // Python frames go below what it found, before the cut.
    if cut || evals > 0 {
        while next_segment < segments.len() {
            push_segment(segments[next_segment], out);
            next_segment += 1;
        }
    }
    if cut {
        out.push(*stack.last().expect("a cut"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(name: &str) -> Arc<CodeInfo> {
        Arc::new(CodeInfo {
            qualname: name.into(),
            filename: "a.js".into(),
            first_line: 0,
            line_table: Box::new([]),
        })
    }

    #[test]
    fn a_compiled_frame_and_its_inlined_functions_are_one_key() {
        let (outer, inner) = (code("outer"), code("inner"));
        let mut frames = PythonFrames::default();
        let alone = frames.key(&outer, 0);
        let group = [(outer.clone(), 0), (inner.clone(), 0)];
        let inlined = frames.key_of(&group);
        // Another machine frame than the function's own, once for each use.
        assert_ne!(alone, inlined);
        assert_eq!(frames.key_of(&group), inlined);
        assert_eq!(frames.key(&outer, 0), alone);
        // The other way round is another frame: `outer` inlined into `inner`.
        assert_ne!(frames.key_of(&[(inner, 0), (outer, 0)]), inlined);
        let f = frames.get(inlined).expect("kept");
        assert_eq!(
            f.iter().map(|(c, _)| &*c.qualname).collect::<Vec<_>>(),
            ["outer", "inner"]
        );
        // Carried to the next window's table, it is the same group.
        let mut next = PythonFrames::default();
        let carried = next.carry(&frames, inlined);
        assert_eq!(next.get(carried).map(|f| f.len()), Some(2));
    }
}
