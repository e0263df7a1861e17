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
//! The pairing of the chain's segments with the eval loop's native
//! frames is [`crate::runtimes::chain`]'s. Before 3.11 each Python frame is
//! a segment of its own, and the interpreter's steps from one eval call to
//! the next ([`crate::runtimes::python::binary::CALL_PATH`]) are left out
//! between two of them.

use std::sync::Arc;

use crate::runtimes::frames::{CodeCache, RuntimeFrames, UNNAMED_FRAME_KEY};

use crate::runtimes::chain::{merge_segments, ChainRuntime, KernelChain};
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
        let (mut replaced, mut ended) = (false, false);
        let code = self.get_or_read(pid, frame.code, frame.fingerprint, || {
            let read = read_code(
                pid,
                frame.code,
                frame.fingerprint,
                py.binary.layout,
                py.code_type(),
            );
            replaced = matches!(read, Err(CodeError::Replaced | CodeError::Freed));
            ended = matches!(read, Err(CodeError::Gone));
            read.ok()
        });
        self.replaced += u64::from(replaced);
        if ended {
            self.process_ended(pid);
        }
        code
    }
}

/// CPython's eval loop runs its frames; before 3.11 its call path lies
/// between them.
impl ChainRuntime for PythonRuntime {
    fn in_loop(&self, addr: u64) -> bool {
        self.in_eval_loop(addr)
    }
    fn between(&self, addr: u64) -> bool {
        self.in_call_path(addr)
    }
}

/// Merge the Python `chain` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`
/// ([`merge_segments`]).
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    py: &PythonRuntime,
    codes: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    let key = |frame: &KernelPyFrame| match codes.code(pid, frame, py) {
        Some(info) => {
            let index = py.binary.layout.instruction_index(frame.code, frame.instr);
            frames.key(&info, info.line(index))
        }
        None => {
            codes.unresolved += 1;
            UNNAMED_FRAME_KEY
        }
    };
    merge_segments(stack, chain.pairs, chain.whole, py, key, out);
}
