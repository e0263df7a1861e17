//! A goroutine's labels into its stacks: the pair the kernel read beside a
//! stack named and put at the stack's root; and a Go stack made whole where
//! the walk reached Go's first frame.
//!
//! In: a stack's native user frames (leaf first, perhaps ending in a cut),
//! the pair the kernel wrote (`ebpf/runtimes/go.bpf.h`: the label map and
//! its hash seed), the process's memory. Out: the same frames with one
//! more at the root, the labels' frame ([`super::read::labels_frame`]), as
//! a raw key into the window's [`RuntimeFrames`]: every stack of a
//! goroutine with the same labels (its samples, its waits, the wakeups and
//! requests it made) then lies under one node the profile can be split by.
//! Maps are read once per process, address and seed into their own
//! [`CodeCache`].

use crate::model::recording::FrameKind;
use crate::model::stack_end::StackEnd;
use crate::runtimes::chain::{KernelChain, KernelPyFrame};
use crate::runtimes::frames::{CodeCache, CodeInfo, RuntimeFrames};
use crate::runtimes::go::process::GoRuntime;
use crate::runtimes::go::read::{labels_frame, read_labels};
use crate::runtimes::python::read::CodeError;

/// `stack` into `out` with the labels' frame of `chain` at its root.
pub fn merge(
    stack: &[u64],
    chain: KernelChain<'_>,
    pid: u32,
    maps: &mut CodeCache,
    frames: &mut RuntimeFrames,
    out: &mut Vec<u64>,
) {
    out.clear();
    out.extend_from_slice(stack);
    let [code, instr] = match chain.pairs {
        [c, i, ..] => [*c, *i],
        _ => return,
    };
    let pair = KernelPyFrame::from_words(code, instr);
    let mut replaced = false;
    let mut gone = false;
    let info = maps.get_or_read(pid, pair.code, pair.fingerprint, || {
        let read = read_labels(pid, pair.code, pair.fingerprint);
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

/// Go clears the frame pointer in its first frame (`runtime.goexit` under a
/// goroutine, `runtime.mstart` under a thread's own stack): a walk that
/// goes on from there finds no caller, or a copy of the stack ends, and
/// calls the stack cut. `stack` (leaf first, perhaps ending in a cut) loses
/// that cut where the frame before it is Go's first (the collector asks
/// for each user stack of a Go process it unwound or the kernel walked).
pub fn whole_at_root(go: &GoRuntime, stack: &mut Vec<u64>) {
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
