//! Ruby frames into stacks: the chain the kernel read beside a sample's
//! native stack, named and put where the VM's loop (`vm_exec_core`) ran it.
//!
//! In: a sample's native user frames, the (iseq, instruction index) pairs
//! the kernel read (`ebpf/runtimes/ruby.bpf.h`), the process's Ruby
//! ([`RubyRuntime`]). Out: the stack with each `vm_exec_core` frame
//! replaced by the Ruby methods and blocks that call of it ran
//! ([`crate::runtimes::chain`]), as raw keys into the window's
//! [`RuntimeFrames`], each with the line its instruction is on. Iseqs are
//! read once per process, address and fingerprint into their own
//! [`CodeCache`].

use crate::runtimes::chain::{merge_segments, ChainRuntime, KernelChain, KernelPyFrame};
use crate::runtimes::frames::{CodeCache, RuntimeFrames, UNNAMED_FRAME_KEY};
use crate::runtimes::python::read::CodeError;
use crate::runtimes::ruby::process::RubyRuntime;
use crate::runtimes::ruby::read::{line_at, read_iseq};

/// Ruby's VM loop runs its frames.
impl ChainRuntime for RubyRuntime {
    fn in_loop(&self, addr: u64) -> bool {
        self.in_vm_loop(addr)
    }

    /// A segment is pushed (its first frame, VM_FRAME_FLAG_FINISH) before
    /// `rb_vm_exec` enters the loop that runs it: sampled in between (7 %
    /// of the samples of a block `Integer#times` calls), the leaf-most
    /// segment has no loop frame yet. It is Ruby's current frame (what
    /// `caller` and rbspy say runs), so it goes at the leaf, above the C
    /// code entering it. (Dropped instead, its time went to the method
    /// calling the C function: RDoc's `get_tk` 1-3 points above rbspy's.)
    fn pushed_before_its_loop(&self) -> bool {
        true
    }
}

/// Merge the Ruby `chain` (leaf first) into `stack` (native user frames,
/// leaf first, perhaps ending in a cut key), writing the result to `out`.
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    ruby: &RubyRuntime,
    codes: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    let key = |frame: &KernelPyFrame| {
        let mut replaced = false;
        let info = codes.get_or_read(pid, frame.code, frame.fingerprint, || {
            let read = read_iseq(pid, frame.code, frame.fingerprint, ruby.binary.layout);
            replaced = matches!(read, Err(CodeError::Replaced));
            read.ok()
        });
        codes.replaced += u64::from(replaced);
        match info {
            Some(info) => {
                let line = line_at(&info, frame.instr);
                frames.key(&info, line)
            }
            None => {
                codes.unresolved += 1;
                UNNAMED_FRAME_KEY
            }
        }
    };
    merge_segments(stack, chain.pairs, chain.whole, ruby, key, out);
}
