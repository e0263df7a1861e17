//! PHP frames into stacks: the chain the kernel read beside a sample's
//! native stack, named and put where the VM's loop (`execute_ex`) ran it.
//!
//! In: a sample's native user frames, the (function, line) pairs the kernel
//! read (`ebpf/runtimes/php.bpf.h`), the process's PHP ([`PhpRuntime`]).
//! Out: the stack with each `execute_ex` frame replaced by the PHP
//! functions that call of it ran ([`crate::runtimes::chain`]), as raw keys
//! into the window's [`RuntimeFrames`]. Functions are read once per
//! process, address and fingerprint into their own [`CodeCache`].

use crate::bpf::abi::PHP_FRAME_EVAL;
use crate::model::recording::FrameKind;
use crate::runtimes::chain::{merge_segments, ChainRuntime, KernelChain, KernelPyFrame};
use crate::runtimes::frames::CodeInfo;
use crate::runtimes::frames::{CodeCache, RuntimeFrames, UNNAMED_FRAME_KEY};
use crate::runtimes::php::process::PhpRuntime;
use crate::runtimes::php::read::read_function;
use crate::runtimes::python::read::CodeError;

/// What names a frame of `eval()`'s code.
fn eval_code() -> CodeInfo {
    CodeInfo {
        kind: FrameKind::Php,
        qualname: "{eval}".into(),
        filename: "".into(),
        first_line: 0,
        line_table: Box::new([]),
    }
}

/// PHP's VM loop runs its frames.
impl ChainRuntime for PhpRuntime {
    fn in_loop(&self, addr: u64) -> bool {
        self.in_vm_loop(addr)
    }
}

/// Merge the PHP `chain` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`.
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    php: &PhpRuntime,
    codes: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    let key = |frame: &KernelPyFrame| {
        let mut replaced = false;
        // eval()'s code is freed once run, before it could be read: the
        // kernel said what it was. Kept per process under address 0.
        let info = if frame.marks & PHP_FRAME_EVAL != 0 {
            codes.get_or_read(pid, 0, 0, || Some(eval_code()))
        } else {
            codes.get_or_read(pid, frame.code, frame.fingerprint, || {
                let read = read_function(pid, frame.code, frame.fingerprint, php.binary.layout);
                replaced = matches!(read, Err(CodeError::Replaced));
                read.ok()
            })
        };
        codes.replaced += u64::from(replaced);
        match info {
            // The kernel read the line from the frame's opline.
            Some(info) => frames.key(&info, frame.instr as u32),
            None => {
                codes.unresolved += 1;
                UNNAMED_FRAME_KEY
            }
        }
    };
    merge_segments(stack, chain.pairs, chain.whole, php, key, out);
}
