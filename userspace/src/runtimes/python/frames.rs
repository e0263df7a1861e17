//! Python frames into stacks: the chain the kernel read beside a sample's
//! native stack, named and put where the interpreter runs it.
//!
//! In: a sample's native user frames (leaf first, perhaps ending in a cut),
//! the (code object, instruction) pairs the kernel read, and the process's
//! interpreter ([`PythonRuntime`]). Out: the same stack with each native
//! frame of the eval loop replaced by the Python frames that call of it was
//! running, as raw keys ([`crate::runtimes::frames::RUNTIME_KEY_BASE`] |
//! index) into the window's
//! [`RuntimeFrames`] (name, file, line), which replay turns into frames. The
//! table is JavaScript's and Java's too, whose compiled frames are one key
//! each with the functions inlined into them
//! ([`crate::runtimes::frames::RuntimeFrame`]).
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
//! frames, before the cut, so the Python callers are kept. Before 3.11 each
//! Python frame is a segment of its own, and the interpreter's steps from
//! one eval call to the next ([`crate::runtimes::python::binary::CALL_PATH`])
//! are left out between two of them.

use std::sync::Arc;

use crate::runtimes::frames::{CodeCache, RuntimeFrames, UNNAMED_FRAME_KEY};

use crate::model::stack_end::StackEnd;
use crate::runtimes::python::process::PythonRuntime;
use crate::runtimes::python::read::{read_code, CodeError, CodeInfo, KernelPyFrame};

/// CPython's reader is its cache of code objects.
impl crate::runtimes::RuntimeReader for CodeCache<CodeInfo> {
    fn forget(&mut self, pid: u32) {
        CodeCache::forget(self, pid);
    }
    fn held_bytes(&self) -> usize {
        self.bytes()
    }
    fn shed(&mut self) {
        self.clear();
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

/// Merge the Python `pairs` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`.
pub fn merge(
    stack: &[u64],
    pairs: &[u64],
    pid: u32,
    py: &PythonRuntime,
    codes: &mut CodeCache,
    frames: &mut RuntimeFrames,
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
    // Where the native frames after the last segment placed start in `out`.
    let mut after_segment: Option<usize> = None;
    let mut push_segment = |s: (usize, usize), out: &mut Vec<u64>| {
        for i in s.0..s.1 {
            let frame = KernelPyFrame::from_words(pairs[2 * i], pairs[2 * i + 1]);
            let key = match codes.code(pid, &frame, py) {
                Some(info) => {
                    let index = py.binary.layout.instruction_index(frame.code, frame.instr);
                    frames.key(&info, info.line(index))
                }
                None => {
                    codes.unresolved += 1;
                    UNNAMED_FRAME_KEY
                }
            };
            out.push(key);
        }
    };
    for (depth, &addr) in native.iter().enumerate() {
        if is_eval(depth, addr) {
            seen += 1;
            if seen > skip && next_segment < segments.len() {
                // Before 3.11: the interpreter's own steps between a Python
                // caller and this callee (all return addresses) go.
                if let Some(from) = after_segment {
                    let mut kept = from;
                    for i in from..out.len() {
                        if !py.in_call_path(out[i].wrapping_sub(1)) {
                            out[kept] = out[i];
                            kept += 1;
                        }
                    }
                    out.truncate(kept);
                }
                push_segment(segments[next_segment], out);
                after_segment = Some(out.len());
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
