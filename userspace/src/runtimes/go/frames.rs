//! A goroutine's labels into its stacks: the pair the kernel read beside a
//! stack named and put at the stack's root.
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
use crate::runtimes::chain::{KernelChain, KernelPyFrame};
use crate::runtimes::frames::{CodeCache, CodeInfo, RuntimeFrames};
use crate::runtimes::go::read::{labels_frame, read_labels};
use crate::runtimes::python::read::CodeError;

/// Append the labels' frame of `chain` to `stack` into `out` (the stack as
/// it is when the goroutine has no labels).
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
