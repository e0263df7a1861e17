//! The chain of an interpreter's frames the kernel reads beside a native
//! stack (CPython's, PHP's, Perl's: `ebpf/runtimes/python.bpf.h`, `php.bpf.h`, `perl.bpf.h`), and
//! its frames put where the interpreter's loop ran them.
//!
//! In: a sample's native user frames (leaf first, perhaps ending in a cut),
//! the pairs of words the kernel wrote per interpreted frame (leaf first:
//! the function's object and fingerprint, a segment's end, an instruction
//! or line), what the runtime says of a native address (its loop; its own
//! steps between two of its frames) and how it keys a frame. Out: the
//! stack with each native frame of the loop replaced by the frames that
//! call of it ran, as raw keys.
//!
//! The pairing, leaf first: the k-th loop frame of the native stack runs
//! the k-th segment of the chain (a segment ends at the frame a C-level
//! call of the loop began with). One loop frame more than segments is a
//! call entering or leaving the loop: the leaf-most stays a native frame.
//! Segments left over (the native walk stopped short) go below the native
//! frames, before the cut, so the callers are kept. Where a runtime's own
//! steps lie between two of its segments (CPython before 3.11), they go.
//! A chain the kernel cut short (its frame budget spent, a frame it could
//! not read) lacks its root-ward segments: its segments pair one to one
//! with the leaf-most loop frames, and the loop frames left over stay
//! native (no call entering the loop is guessed, no segment dropped).
//! One loop frame fewer than segments, in a whole stack, where the leaf-most
//! segment may be idle (Perl's sort comparator while the sort compares in
//! C): that segment goes; where the runtime pushes a segment before entering
//! its loop (Ruby's), that segment goes at the leaf, above the native frames
//! about to run it.

use crate::bpf::abi::{PY_ADDR_BITS, PY_FP_MUL};
use crate::model::stack_end::StackEnd;

/// A code object's fingerprint from its header's words, as the kernel
/// mixes them (`py_fingerprint` in `ebpf/runtimes/python.bpf.h`).
pub fn fingerprint(qualname: u64, filename: u64, linetable: u64, first_line: u32) -> u32 {
    let mut h = qualname;
    h = (h ^ filename).wrapping_mul(PY_FP_MUL);
    h = (h ^ linetable).wrapping_mul(PY_FP_MUL);
    h = (h ^ first_line as u64).wrapping_mul(PY_FP_MUL);
    (h >> 32) as u32
}

/// One Python frame as the kernel wrote it: the code object's address, its
/// fingerprint, the instruction, and whether it ends a C-level eval call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPyFrame {
    /// The code object (`_PyInterpreterFrame.f_code`).
    pub code: u64,
    /// Its fingerprint when the kernel read it.
    pub fingerprint: u32,
    /// The instruction pointer.
    pub instr: u64,
    /// The last frame of one C-level call of the eval loop.
    pub segment_end: bool,
    /// The code word's other low bits: a runtime's mark on the frame (PHP:
    /// `PHP_FRAME_EVAL`).
    pub marks: u64,
}

impl KernelPyFrame {
    /// Split the pair of words the kernel wrote.
    pub fn from_words(code_word: u64, instr_word: u64) -> Self {
        let addr = (1u64 << PY_ADDR_BITS) - 1;
        KernelPyFrame {
            code: code_word & addr & !7,
            fingerprint: ((code_word >> PY_ADDR_BITS) << 16 | (instr_word >> PY_ADDR_BITS)) as u32,
            instr: instr_word & addr,
            segment_end: code_word & crate::bpf::abi::PY_SEGMENT_END != 0,
            marks: code_word & 6,
        }
    }
}

/// The chain the kernel read beside a stack: its pairs of words, leaf
/// first, and whether it reached its root (not cut short by the kernel's
/// frame budget or a frame it could not read).
#[derive(Debug, Clone, Copy)]
pub struct KernelChain<'a> {
    /// Two words per frame.
    pub pairs: &'a [u64],
    /// Down to its root.
    pub whole: bool,
}

impl<'a> KernelChain<'a> {
    /// The chain of `pairs` whose walk ended as `end` says (`PY_END_*`):
    /// cut short where its frame budget was spent or a frame could not be
    /// read.
    pub fn from_walk(pairs: &'a [u64], end: u16) -> Self {
        use crate::bpf::abi::{PY_END_MAX_FRAMES, PY_END_READ_FAILED};
        KernelChain {
            pairs,
            whole: !matches!(end, PY_END_MAX_FRAMES | PY_END_READ_FAILED),
        }
    }
}

/// What a runtime says of the native frames around its chain.
pub trait ChainRuntime {
    /// `addr` (a process address) is in the loop that runs its frames.
    fn in_loop(&self, addr: u64) -> bool;
    /// `addr` is one of its own steps from one loop call to the next.
    fn between(&self, _addr: u64) -> bool {
        false
    }
    /// A segment ending in `frame` may not be running: its frames stay
    /// between calls a C loop makes (Perl's MULTICALL subs: a sort's
    /// comparator while the sort compares in C).
    fn may_be_idle(&self, _frame: &KernelPyFrame) -> bool {
        false
    }
    /// A leaf-most segment with no loop frame of its own is the runtime's
    /// current one, pushed before the loop that runs it was entered (or
    /// about to be): it goes at the leaf, above the native frames setting
    /// its run up (Ruby's, whose frame is pushed before `rb_vm_exec`).
    fn pushed_before_its_loop(&self) -> bool {
        false
    }
}

/// Merge the chain's `pairs` (leaf first; `whole`: down to its root, not
/// cut short by the kernel) into `stack` (native user frames, leaf first,
/// perhaps ending in a cut key), writing the result to `out`; `key` names
/// each of the chain's frames.
pub fn merge_segments(
    stack: &[u64],
    pairs: &[u64],
    whole: bool,
    runtime: &impl ChainRuntime,
    mut key: impl FnMut(&KernelPyFrame) -> u64,
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
    let is_loop = |depth: usize, addr: u64| {
        runtime.in_loop(if depth == 0 {
            addr
        } else {
            addr.wrapping_sub(1)
        })
    };
    let loops = native
        .iter()
        .enumerate()
        .filter(|&(d, &a)| is_loop(d, a))
        .count();
    // One loop too few, the leaf-most segment one that may not be running,
    // a whole stack: that segment is not running (its frames are kept
    // between calls), and goes; or it is about to run, and goes at the leaf.
    let mut at_leaf = None;
    if whole && !cut && loops > 0 && loops + 1 == segments.len() {
        let (_, end) = segments[0];
        let outermost = KernelPyFrame::from_words(pairs[2 * end - 2], pairs[2 * end - 1]);
        if runtime.may_be_idle(&outermost) {
            segments.remove(0);
        } else if runtime.pushed_before_its_loop() {
            at_leaf = Some(segments.remove(0));
        }
    }
    let skip = usize::from(whole && loops == segments.len() + 1);
    let mut next_segment = 0;
    let mut seen = 0;
    // Where the native frames after the last segment placed start in `out`.
    let mut after_segment: Option<usize> = None;
    let mut push_segment = |s: (usize, usize), out: &mut Vec<u64>| {
        for i in s.0..s.1 {
            out.push(key(&KernelPyFrame::from_words(
                pairs[2 * i],
                pairs[2 * i + 1],
            )));
        }
    };
    if let Some(s) = at_leaf {
        push_segment(s, out);
    }
    for (depth, &addr) in native.iter().enumerate() {
        if is_loop(depth, addr) {
            seen += 1;
            if seen > skip && next_segment < segments.len() {
                // The runtime's own steps between its caller's segment and
                // this one (all return addresses) go.
                if let Some(from) = after_segment {
                    let mut kept = from;
                    for i in from..out.len() {
                        if !runtime.between(out[i].wrapping_sub(1)) {
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
    // The native walk stopped short of the callers' loop frames: their
    // frames go below what it found, before the cut.
    if cut || loops > 0 {
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
    use crate::bpf::abi::PY_SEGMENT_END;

    /// A runtime whose loop lies at [0x1000, 0x2000) and whose frames with
    /// bit 35 of their instruction word set may be idle.
    struct Loop;
    impl ChainRuntime for Loop {
        fn in_loop(&self, addr: u64) -> bool {
            (0x1000..0x2000).contains(&addr)
        }
        fn may_be_idle(&self, frame: &KernelPyFrame) -> bool {
            frame.instr & (1 << 35) != 0
        }
    }

    /// Check that a segment that may be idle goes where the native stack has
    /// no loop for it (a sort comparing in C between two calls of its
    /// comparator), and stays where it has one (the comparator running).
    #[test]
    fn an_idle_segment_goes_only_without_its_loop() {
        // Leaf first: the comparator (idle, ending its segment), then the
        // caller and the main program.
        let pairs = [0x7000 | PY_SEGMENT_END, 1 << 35, 0x8000, 0, 0x9000, 0];
        let key = |f: &KernelPyFrame| f.code;
        let mut out = Vec::new();
        // In C (0x50: the sort's compare loop), one run loop below it.
        merge_segments(&[0x50, 0x1500, 0x60], &pairs, true, &Loop, key, &mut out);
        assert_eq!(out, vec![0x50, 0x8000, 0x9000, 0x60]);
        // The comparator running: two loops, two segments.
        merge_segments(
            &[0x1400, 0x50, 0x1500, 0x60],
            &pairs,
            true,
            &Loop,
            key,
            &mut out,
        );
        assert_eq!(out, vec![0x7000, 0x50, 0x8000, 0x9000, 0x60]);
        // Not idle: kept, below the native frames (as before).
        let busy = [0x7000 | PY_SEGMENT_END, 0, 0x8000, 0, 0x9000, 0];
        merge_segments(&[0x50, 0x1500, 0x60], &busy, true, &Loop, key, &mut out);
        assert!(out.contains(&0x7000), "{out:x?}");
    }

    /// Check that a chain the kernel cut short pairs its segments with the
    /// leaf-most loop frames and leaves the root-ward loop frame native,
    /// where a whole chain one segment short would take the leaf-most loop
    /// frame for a call entering the loop.
    #[test]
    fn a_cut_chain_pairs_from_the_leaf() {
        // Two segments (leaf first), three loop frames in the native stack.
        let pairs = [0x7000 | PY_SEGMENT_END, 0, 0x8000 | PY_SEGMENT_END, 0];
        let native = [0x1100, 0x50, 0x1200, 0x60, 0x1300, 0x70];
        let key = |f: &KernelPyFrame| f.code;
        let mut out = Vec::new();
        merge_segments(&native, &pairs, false, &Loop, key, &mut out);
        assert_eq!(out, vec![0x7000, 0x50, 0x8000, 0x60, 0x1300, 0x70]);
        // Taken for whole, the leaf-most loop frame would stay a native
        // frame entering the loop, and each segment shift toward the root.
        merge_segments(&native, &pairs, true, &Loop, key, &mut out);
        assert_eq!(out, vec![0x1100, 0x50, 0x7000, 0x60, 0x8000, 0x70]);
    }

    /// A runtime whose segments are pushed before their loop frames.
    struct Pushed;
    impl ChainRuntime for Pushed {
        fn in_loop(&self, addr: u64) -> bool {
            (0x1000..0x2000).contains(&addr)
        }
        fn pushed_before_its_loop(&self) -> bool {
            true
        }
    }

    /// Check that a leaf-most segment pushed before its loop was entered
    /// goes at the leaf, above the native frames entering it, and the rest
    /// pair with their loops.
    #[test]
    fn a_segment_pushed_before_its_loop_goes_at_the_leaf() {
        // A block (leaf) and its caller's segment; one loop frame (the
        // caller's): the leaf is in the C code calling the block.
        let pairs = [0x7000 | PY_SEGMENT_END, 0, 0x8000 | PY_SEGMENT_END, 0];
        let native = [0x50, 0x60, 0x1300, 0x70];
        let key = |f: &KernelPyFrame| f.code;
        let mut out = Vec::new();
        merge_segments(&native, &pairs, true, &Pushed, key, &mut out);
        assert_eq!(out, vec![0x7000, 0x50, 0x60, 0x8000, 0x70]);
    }
}
