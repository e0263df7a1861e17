//! Perl frames into stacks: the chain the kernel read beside a sample's
//! native stack, named and put where the run loop
//! (`Perl_runops_standard`) ran it.
//!
//! In: a sample's native user frames, the (sub or file, line) pairs the
//! kernel read (`ebpf/runtimes/perl.bpf.h`), the process's Perl
//! ([`PerlRuntime`]). Out: the stack with each run loop's frame replaced by
//! the subs that loop ran ([`crate::runtimes::chain`]: a stack info's
//! contexts are one segment), as raw keys into the window's
//! [`RuntimeFrames`]. Subs and files are read once per process, address and
//! fingerprint into their own [`CodeCache`].

use crate::bpf::abi::{PERL_FRAME_EVAL, PERL_FRAME_MAIN, PERL_LINE_MULTICALL};
use crate::model::recording::FrameKind;
use crate::runtimes::chain::{merge_segments, ChainRuntime, KernelChain, KernelPyFrame};
use crate::runtimes::frames::CodeInfo;
use crate::runtimes::frames::{CodeCache, RuntimeFrames, UNNAMED_FRAME_KEY};
use crate::runtimes::perl::process::PerlRuntime;
use crate::runtimes::perl::read::{read_file_frame, read_sub};
use crate::runtimes::python::read::CodeError;

/// What names an eval's frame whose file name was gone.
fn eval_code() -> CodeInfo {
    CodeInfo {
        kind: FrameKind::Perl,
        qualname: "(eval)".into(),
        filename: "".into(),
        first_line: 0,
        line_table: Box::new([]),
    }
}

/// Perl's run loop runs its subs.
impl ChainRuntime for PerlRuntime {
    fn in_loop(&self, addr: u64) -> bool {
        self.in_run_loop(addr)
    }
    fn may_be_idle(&self, frame: &KernelPyFrame) -> bool {
        frame.instr & PERL_LINE_MULTICALL != 0
    }
}

/// Where a file frame's name is kept in the cache: its address, apart from
/// the subs' (CVs) by a bit above every user address, and eval's from
/// main's.
fn file_key(addr: u64, mark: u64) -> u64 {
    addr | (mark << 56)
}

/// Merge the Perl `chain` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`.
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    perl: &PerlRuntime,
    codes: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    let key = |frame: &KernelPyFrame| {
        let mut replaced = false;
        let line = frame.instr as u32;
        let file_mark = frame.marks & (PERL_FRAME_EVAL | PERL_FRAME_MAIN);
        let info = if file_mark != 0 {
            // A file's address need not be aligned: its low bits ride in
            // the line word.
            let addr = frame.code | (frame.instr >> 32) & 7;
            let name = if file_mark & PERL_FRAME_MAIN != 0 {
                "<main>"
            } else {
                "(eval)"
            };
            let read = codes.get_or_read(pid, file_key(addr, file_mark), frame.fingerprint, || {
                let read = read_file_frame(pid, addr, frame.fingerprint, name);
                replaced = matches!(read, Err(CodeError::Replaced));
                read.ok()
            });
            // A string eval's name ("(eval 12)") is freed with its code,
            // often before it could be read: the kernel said it is an eval.
            match read {
                None if file_mark & PERL_FRAME_EVAL != 0 => {
                    replaced = false;
                    codes.get_or_read(pid, file_key(0, file_mark), 0, || Some(eval_code()))
                }
                read => read,
            }
        } else {
            codes.get_or_read(pid, frame.code, frame.fingerprint, || {
                let read = read_sub(pid, frame.code, frame.fingerprint, perl.binary.layout);
                replaced = matches!(read, Err(CodeError::Replaced));
                read.ok()
            })
        };
        codes.replaced += u64::from(replaced);
        match info {
            Some(info) => frames.key(&info, line),
            None => {
                codes.unresolved += 1;
                UNNAMED_FRAME_KEY
            }
        }
    };
    merge_segments(stack, chain.pairs, chain.whole, perl, key, out);
}
