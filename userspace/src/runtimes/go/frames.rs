//! A goroutine's labels into its stacks: the pair the kernel read beside a
//! stack named and put at the stack's root; and a Go stack made whole where
//! the walk reached Go's first frame.
//!
//! In: a stack's native user frames (leaf first, perhaps ending in a cut),
//! the pairs the kernel wrote (`ebpf/runtimes/go.bpf.h`: the goroutine's
//! id; the label map and its hash seed, or from Go 1.24 the labelMap and
//! its list's fingerprint), the process's memory. Out: the same frames with
//! the goroutine's frame and the labels' frame
//! ([`super::read::labels_frame`]) at the root, as raw keys into the
//! window's [`RuntimeFrames`]: every stack of a goroutine with the same
//! labels (its samples, its waits, the wakeups and requests it made) then
//! lies under one node the profile can be split by, and under it one per
//! goroutine, which the outputs take out again.
//! Maps are read once per process, address and seed into their own
//! [`CodeCache`].

use crate::bpf::abi::GO_GOROUTINE_MARK;
use crate::model::goroutine_labels::goroutine_name;
use crate::model::recording::FrameKind;
use crate::model::stack_end::StackEnd;
use crate::runtimes::chain::{KernelChain, KernelPyFrame};
use crate::runtimes::frames::{CodeCache, CodeInfo, RuntimeFrames};
use crate::runtimes::go::process::GoRuntime;
use crate::runtimes::go::read::{labels_frame, read_labels, read_list_labels};
use crate::runtimes::python::read::CodeError;

/// `stack` into `out` with the labels' frame of `chain` at its root.
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    go: &GoRuntime,
    maps: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    out.clear();
    out.extend_from_slice(stack);
    let mut labels = None;
    for pair in chain.pairs.chunks_exact(2) {
        let pair = KernelPyFrame::from_words(pair[0], pair[1]);
        if pair.code == 0 && pair.marks == GO_GOROUTINE_MARK {
            // Under the labels' frame: the goroutine's own root.
            let id = pair.instr;
            let info = maps.get_or_make(pid, id, GOROUTINE_IDENTITY, || goroutine_frame(id));
            if let Some(info) = info {
                out.push(frames.key(&info, 0));
            }
        } else {
            labels = Some(pair);
        }
    }
    let Some(pair) = labels else {
        return;
    };
    let mut replaced = false;
    let mut gone = false;
    let info = maps.get_or_read(pid, pair.code, pair.fingerprint, || {
        let read = if go.binary.labels_are_a_list() {
            read_list_labels(pid, pair.code, pair.fingerprint)
        } else {
            read_labels(pid, pair.code, pair.fingerprint)
        };
        replaced = matches!(read, Err(CodeError::Replaced));
        gone = matches!(read, Err(CodeError::Gone));
        read.ok().map(|labels| labels_frame(&labels))
    });
    if gone {
        maps.process_ended(pid);
    }
    maps.replaced += u64::from(replaced);
    let info = info.or_else(|| {
        // Still a labels frame, saying so: the stack is not one of a
        // goroutine without labels. Kept per process under address 0.
        maps.unresolved += 1;
        maps.get_or_read(pid, 0, 0, || Some(unread_labels()))
    });
    if let Some(info) = info {
        out.push(frames.key(&info, 0));
    }
}

/// The identity a goroutine's frame is kept under in the maps' cache, with
/// its id as the address: a label map's address is a heap pointer (Go's
/// heap starts at 0xc000000000), far above any goroutine count.
const GOROUTINE_IDENTITY: u32 = 0x6f72_6f00;

/// The frame of goroutine `id`.
fn goroutine_frame(id: u64) -> CodeInfo {
    CodeInfo {
        kind: FrameKind::Goroutine,
        qualname: goroutine_name(id).into(),
        filename: "".into(),
        first_line: 0,
        line_table: Box::new([]),
    }
}

/// Go clears the frame pointer in its first frame (`runtime.goexit` under a
/// goroutine, `runtime.mstart` under a thread's own stack): a walk that
/// goes on from there finds no caller, or a copy of the stack ends, and
/// calls the stack cut. `stack` (leaf first, perhaps ending in a cut) loses
/// that cut where the frame before it is Go's first.
///
/// A walk can also go on past Go's first frame into frames that are not
/// the thread's: a new M's `runtime.clone` starts `runtime.mstart` on the
/// new stack with the parent's frame pointer still in its register, and
/// `mstart0` saves it, so a frame-pointer walk from the new thread climbs
/// into whatever the parent's stack held when it was made (`newm1`,
/// `newm`, `startm`, ... and then garbage, "return address outside any
/// code"; 120-190 of 7,400 samples of the Go test's off-CPU stacks). Go's
/// own traceback stops at these functions (TOPFRAME); so does this: the
/// stack ends at the first return address in one of them, the leaf
/// excepted (a leaf in `runtime.mcall` is still on the goroutine's stack,
/// its callers real).
///
/// The collector asks for each user stack of a Go process it unwound or the
/// kernel walked.
pub fn whole_at_root(go: &GoRuntime, stack: &mut Vec<u64>) {
    let first_root = stack
        .iter()
        .skip(1)
        .position(|&a| StackEnd::from_raw_key(a).is_none() && go.is_root(a));
    if let Some(i) = first_root {
        // `i` counts from the frame after the leaf: keep the root itself.
        stack.truncate(i + 2);
        return;
    }
    if let [.., root, cut] = stack[..] {
        if StackEnd::from_raw_key(cut).is_some() && go.is_root(root) {
            stack.pop();
        }
    }
}

/// The labels frame of a goroutine whose label map could not be read (freed
/// before it was read, or no map any more).
fn unread_labels() -> CodeInfo {
    CodeInfo {
        kind: FrameKind::GoLabels,
        qualname: "[labels not read: the goroutine's label map was gone before it was read]".into(),
        filename: "".into(),
        first_line: 0,
        line_table: Box::new([]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::go::binary::{GoBinary, GoOffsets};
    use std::sync::Arc;

    /// A Go executable mapped at 0x1000 whose `runtime.mstart` is
    /// [0x500, 0x520) and `runtime.goexit` [0x600, 0x610) in the file.
    fn go() -> GoRuntime {
        let offsets = GoOffsets {
            g_m: 48,
            m_curg: 192,
            g_labels: 360,
            g_goid: 152,
        };
        GoRuntime {
            binary: Arc::new(GoBinary {
                version: "go1.19.8".into(),
                g_from_fsbase: -8,
                offsets,
                roots: vec![(0x500, 0x520), (0x600, 0x610)],
            }),
            base: 0x1000,
        }
    }

    #[test]
    fn a_go_stack_ends_at_its_first_frame() {
        let go = go();
        let cut = StackEnd::BadReturnAddress.raw_key().unwrap();
        // A new M's walk that went on past mstart into its parent's frames.
        let mut climbed = vec![0x1900, 0x1910, 0x1508, 0x1a00, 0x1b00, cut];
        whole_at_root(&go, &mut climbed);
        assert_eq!(climbed, [0x1900, 0x1910, 0x1508]);
        // A walk that stopped right after goexit is whole there.
        let mut stopped = vec![0x1900, 0x1605, cut];
        whole_at_root(&go, &mut stopped);
        assert_eq!(stopped, [0x1900, 0x1605]);
        // A cut elsewhere stays, and so does a leaf in a root function with
        // callers (its callers are the goroutine's).
        let mut short = vec![0x1900, 0x1910, cut];
        whole_at_root(&go, &mut short);
        assert_eq!(short, [0x1900, 0x1910, cut]);
        let mut leaf = vec![0x1505, 0x1910, 0x1920];
        whole_at_root(&go, &mut leaf);
        assert_eq!(leaf, [0x1505, 0x1910, 0x1920]);
    }

    /// Check that the kernel's goroutine pair becomes a goroutine frame at
    /// the root (the labels', read from the process, would come after it),
    /// named by its id, also for a process found gone (nothing is read for
    /// it), and that a stack with no pairs is left as it is.
    #[test]
    fn a_goroutines_id_is_a_frame_at_the_root() {
        use crate::bpf::abi::PY_SEGMENT_END;
        use crate::runtimes::frames::RUNTIME_KEY_BASE;
        let go = go();
        let (mut maps, mut frames, mut out) =
            (CodeCache::default(), RuntimeFrames::default(), Vec::new());
        maps.process_ended(7);
        let stack = [0x1900, 0x1605];
        let pairs = [GO_GOROUTINE_MARK | PY_SEGMENT_END, 42];
        let chain = KernelChain {
            pairs: &pairs,
            whole: true,
        };
        merge(&stack, chain, 7, &go, &mut maps, &mut frames, &mut out);
        assert_eq!(out.len(), 3, "{out:x?}");
        assert_eq!(out[..2], stack);
        let index = (out[2] & !RUNTIME_KEY_BASE) as u32;
        assert_eq!(frames.kind_at(index), Some(FrameKind::Goroutine));
        let name = &frames.at(index).unwrap()[0].0.qualname;
        assert_eq!(&**name, "[goroutine 42]");
        // The same goroutine again: the same frame.
        let mut again = Vec::new();
        merge(&stack, chain, 7, &go, &mut maps, &mut frames, &mut again);
        assert_eq!(again, out);
        let none = KernelChain {
            pairs: &[],
            whole: true,
        };
        merge(&stack, none, 7, &go, &mut maps, &mut frames, &mut again);
        assert_eq!(again, stack);
    }
}
