//! Reading one ring buffer record: the records of [`super`] as borrowed
//! views, and the ABI's codes as the model's words.
//!
//! In: raw bytes of one record. Out: a [`SampleView`] or an [`EventRecord`]
//! that never copies stacks, with the user stack decoded once into the mode
//! it came in ([`UserStack`]); `from_abi` for off-CPU reasons, I/O operations
//! and how a walk ended ([`StackEnd`]). Lengths read from a record are
//! clamped to what the record holds, never trusted.

use super::*;
use crate::model::stack_end::StackEnd;

/// A thread's user registers as the kernel read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Regs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// How a record's user stack came: the one mode its flags and fields encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStack<'a> {
    /// Return addresses walked by frame pointer in the kernel, leaf first.
    Frames(&'a [u64]),
    /// Dwarf mode: the registers and the copied stack from sp up, to unwind here.
    Copy {
        /// The user registers at the sample.
        regs: Regs,
        /// The copied user stack from sp up.
        stack: &'a [u8],
    },
    /// Kernel unwinding: the frames the kernel walked.
    KernelUnwound(KernelUnwound<'a>),
}

/// A user stack the kernel unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelUnwound<'a> {
    /// The user frames it walked, leaf first.
    pub frames: &'a [u64],
    /// How the walk ended (`UNWIND_END_*`; [`StackEnd::from_abi`] says what it means).
    pub end: u32,
    /// Where the kernel handed over: the registers of that frame and the
    /// copied stack from its sp up, for userspace to walk on.
    pub handover: Option<(Regs, &'a [u8])>,
    /// Without a hand-over: the leaf's user registers.
    pub leaf: Option<Regs>,
    /// CPython frames the kernel read: pairs of (code object address, with
    /// `PY_SEGMENT_END` in bit 0; instruction pointer), leaf first.
    pub python: &'a [u64],
    /// How the Python walk ended (`PY_END_*`).
    pub python_end: u16,
}

impl<'a> UserStack<'a> {
    /// Frame-pointer mode's addresses; empty in the other modes.
    pub fn frames(&self) -> &'a [u64] {
        match self {
            UserStack::Frames(f) => f,
            _ => &[],
        }
    }
}

/// A decoded record of the scheduler/I-O tracer's ring.
#[derive(Clone, Copy)]
pub enum EventRecord<'a> {
    /// An off-CPU interval.
    OffCpu(&'a OffCpuEvent),
    /// A block I/O request.
    Io(&'a IoEvent),
    /// A thread's stacks; with the valid user stack bytes in dwarf mode.
    Stack(&'a StackEvent, StackView<'a>),
    /// Folded short intervals.
    Folded(&'a FoldedEvent),
    /// A thread's end.
    ThreadEnd(&'a ThreadEndEvent),
}

/// The valid parts of a [`StackEvent`].
#[derive(Debug, Clone, Copy)]
pub struct StackView<'a> {
    /// Kernel return addresses, leaf first.
    pub kstack: &'a [u64],
    /// The user stack, in the mode it came in (a walk that handed over: as
    /// a sample's hand-over, with no frames walked).
    pub user: UserStack<'a>,
}

fn view<T>(bytes: &[u8], kind: u32) -> Result<&T, DecodeError> {
    if bytes.len() < std::mem::size_of::<T>() {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
        });
    }
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0 {
        return Err(DecodeError::Misaligned);
    }
    // SAFETY: length and alignment checked; T is a repr(C) POD record.
    Ok(unsafe { &*(bytes.as_ptr() as *const T) })
}

fn kind_of(bytes: &[u8]) -> Result<u32, DecodeError> {
    match bytes.get(0..4) {
        Some(k) => Ok(u32::from_ne_bytes(k.try_into().expect("4 bytes"))),
        None => Err(DecodeError::Short {
            kind: 0,
            len: bytes.len(),
        }),
    }
}

/// Decode one record of the tracer's ring.
pub fn decode_event(bytes: &[u8]) -> Result<EventRecord<'_>, DecodeError> {
    let kind = kind_of(bytes)?;
    match kind {
        RECORD_OFFCPU => view::<OffCpuEvent>(bytes, kind).map(EventRecord::OffCpu),
        RECORD_IO => view::<IoEvent>(bytes, kind).map(EventRecord::Io),
        RECORD_FOLDED => view::<FoldedEvent>(bytes, kind).map(EventRecord::Folded),
        RECORD_THREAD_END => view::<ThreadEndEvent>(bytes, kind).map(EventRecord::ThreadEnd),
        RECORD_STACK => {
            let e = view::<StackEvent>(bytes, kind)?;
            let tail = &bytes[std::mem::size_of::<StackEvent>()..];
            // The user part first, then the kernel's (see `struct stack_event`).
            // Both flags: a walk that handed over, sent as a copy with the
            // runtimes' chain it read after the kernel stack.
            let handed_over = e.flags & (STACK_KERNEL_UNWOUND | STACK_USER_REGS)
                == STACK_KERNEL_UNWOUND | STACK_USER_REGS;
            let (user, kernel_at) = if e.flags & STACK_KERNEL_UNWOUND != 0 && !handed_over {
                let (frames, python) = kernel_frames(tail, e.ustack_len, e.py_len);
                let user = UserStack::KernelUnwound(KernelUnwound {
                    frames,
                    end: e.unwind_end,
                    handover: None,
                    leaf: None,
                    python,
                    python_end: e.py_end,
                });
                (user, (frames.len() + python.len()) * 8)
            } else if e.flags & STACK_USER_REGS != 0 {
                let regs = Regs {
                    ip: e.user_ip,
                    sp: e.user_sp,
                    bp: e.user_bp,
                };
                let size = (e.stack_size as usize).min(tail.len());
                (
                    UserStack::Copy {
                        regs,
                        stack: &tail[..size],
                    },
                    size.next_multiple_of(8),
                )
            } else {
                let frames = words(tail, e.ustack_len as usize, MAX_STACK_DEPTH);
                (UserStack::Frames(frames), frames.len() * 8)
            };
            let kstack = words(
                tail.get(kernel_at..).unwrap_or_default(),
                e.kstack_len as usize,
                MAX_STACK_DEPTH,
            );
            let user = match user {
                UserStack::Copy { regs, stack } if handed_over => {
                    let chain_at = kernel_at + kstack.len() * 8;
                    let python = match tail.get(chain_at..) {
                        Some(chain) => kernel_frames(chain, 0, e.py_len).1,
                        None => &[],
                    };
                    UserStack::KernelUnwound(KernelUnwound {
                        frames: &[],
                        end: e.unwind_end,
                        handover: Some((regs, stack)),
                        leaf: None,
                        python,
                        python_end: e.py_end,
                    })
                }
                other => other,
            };
            Ok(EventRecord::Stack(e, StackView { kstack, user }))
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// A NUL-terminated name as a string.
pub fn comm_str(comm: &[u8]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..len]).into_owned()
}

/// A borrowed view of one sample record: only the valid parts of its stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleView<'a> {
    /// CPU.
    pub cpu: u32,
    /// CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    /// The task's CPU time so far, ns, as the scheduler last updated it.
    pub sum_exec_runtime: u64,
    /// When the scheduler last updated `sum_exec_runtime`, on its own clock.
    pub exec_start: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `SAMPLE_FLAG_*`.
    pub flags: u32,
    /// Thread name, without NUL.
    pub comm: &'a [u8],
    /// Kernel return addresses, leaf first.
    pub kstack: &'a [u64],
    /// The user stack, in the mode it came in.
    pub user: UserStack<'a>,
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the record kind needs.
    #[error("record of {len} bytes is too short for kind {kind}")]
    Short {
        /// Record kind.
        kind: u32,
        /// Bytes available.
        len: usize,
    },
    /// Not 8-byte aligned.
    #[error("record is not 8-byte aligned")]
    Misaligned,
    /// A kind this build does not know.
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
}

/// `n` words (at most `max`) at the start of `bytes`, as many as it holds.
fn words(bytes: &[u8], n: usize, max: usize) -> &[u64] {
    let n = n.min(max).min(bytes.len() / 8);
    // An empty slice's pointer need not be aligned (a default `&[u8]`'s is 1).
    if n == 0 {
        return &[];
    }
    // SAFETY: every tail offset used is a multiple of 8 from an 8-aligned
    // record (its header's size is a multiple of 8), and it holds n u64s.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const u64, n) }
}

/// The frames the kernel walked, at the start of a record's tail: `n`
/// native return addresses, then `py` Python pairs, each clamped to what
/// the tail and the frame array hold.
fn kernel_frames(tail: &[u8], n: u32, py: u16) -> (&[u64], &[u64]) {
    let n = (n as usize).min(UNWIND_MAX_FRAMES).min(tail.len() / 8);
    let py = (2 * py as usize)
        .min(2 * PY_MAX_FRAMES)
        .min(UNWIND_MAX_FRAMES - n)
        .min(tail.len() / 8 - n)
        & !1;
    if n + py == 0 {
        return (&[], &[]);
    }
    // SAFETY: the tail starts 8-aligned (records are, and the record's size
    // is a multiple of 8) and holds n + py u64s.
    let words = unsafe { std::slice::from_raw_parts(tail.as_ptr() as *const u64, n + py) };
    words.split_at(n)
}

/// Decode one sample record. The record is only borrowed; nothing is copied
/// or allocated, and out-of-range stack lengths are clamped rather than trusted.
pub fn decode_sample(bytes: &[u8]) -> Result<SampleView<'_>, DecodeError> {
    let kind = kind_of(bytes)?;
    if kind != RECORD_SAMPLE {
        return Err(DecodeError::UnknownKind(kind));
    }
    let e = view::<SampleEvent>(bytes, kind)?;
    let comm_len = e.comm.iter().position(|&b| b == 0).unwrap_or(TASK_COMM_LEN);
    let tail = &bytes[std::mem::size_of::<SampleEvent>()..];
    let regs = Regs {
        ip: e.user_ip,
        sp: e.user_sp,
        bp: e.user_bp,
    };
    let user = if e.flags & SAMPLE_FLAG_KERNEL_UNWOUND != 0 {
        let (frames, python) = kernel_frames(tail, e.ustack_len, e.py_len);
        let copy = tail.get(UNWIND_MAX_FRAMES * 8..).unwrap_or(&[]);
        let stack = &copy[..(e.stack_size as usize).min(copy.len())];
        UserStack::KernelUnwound(KernelUnwound {
            frames,
            end: e.unwind_end,
            handover: (e.flags & SAMPLE_FLAG_USER_REGS != 0).then_some((regs, stack)),
            leaf: (e.flags & SAMPLE_FLAG_LEAF_REGS != 0).then_some(regs),
            python,
            python_end: e.py_end,
        })
    } else if e.flags & SAMPLE_FLAG_USER_REGS != 0 {
        UserStack::Copy {
            regs,
            stack: &tail[..(e.stack_size as usize).min(tail.len())],
        }
    } else {
        UserStack::Frames(&e.ustack[..(e.ustack_len as usize).min(MAX_STACK_DEPTH)])
    };
    Ok(SampleView {
        cpu: e.cpu,
        time_ns: e.time_ns,
        sum_exec_runtime: e.sum_exec_runtime,
        exec_start: e.exec_start,
        pid: e.pid,
        tid: e.tid,
        flags: e.flags,
        comm: &e.comm[..comm_len],
        kstack: &e.kstack[..(e.kstack_len as usize).min(MAX_STACK_DEPTH)],
        user,
    })
}

/// The model's io flag bits are the ABI's, so a request's flags pass as is.
const _: () = {
    use crate::model::recording::io_flags as model;
    assert!(
        IO_PREFLUSH == model::IO_PREFLUSH && IO_FUA == model::IO_FUA && IO_SYNC == model::IO_SYNC
    );
    assert!(IO_META == model::IO_META && IO_READAHEAD == model::IO_READAHEAD);
};

impl crate::model::recording::OffCpuReason {
    /// From the kernel's `OFFCPU_*`.
    pub fn from_abi(state: u32) -> Self {
        match state {
            OFFCPU_PREEMPTED => Self::Preempted,
            OFFCPU_SLEEPING => Self::Sleeping,
            OFFCPU_BLOCKED => Self::Blocked,
            _ => Self::Other,
        }
    }
}

impl crate::model::recording::IoOp {
    /// From the kernel's REQ_OP_*.
    pub fn from_abi(op: u32) -> Self {
        match op {
            IO_OP_READ => Self::Read,
            IO_OP_WRITE => Self::Write,
            IO_OP_FLUSH => Self::Flush,
            IO_OP_DISCARD => Self::Discard,
            IO_OP_SECURE_ERASE => Self::SecureErase,
            IO_OP_WRITE_ZEROES => Self::WriteZeroes,
            other => Self::Other(other),
        }
    }
}

impl StackEnd {
    /// From how the in-kernel walk ended (`UNWIND_END_*`). The walks that
    /// hand over (`USERSPACE`, `REFUSED`, a `BAD_ADDRESS` in code mapped
    /// since) end here only when there was nothing to hand over: with only
    /// the leaf, for lack of unwind information.
    pub fn from_abi(end: u32) -> Self {
        match end {
            UNWIND_END_ROOT => StackEnd::Root,
            UNWIND_END_BAD_ADDRESS => StackEnd::BadReturnAddress,
            UNWIND_END_NO_PROCESS | UNWIND_END_PENDING => StackEnd::TablesNotReady,
            UNWIND_END_READ_FAILED => StackEnd::Unreadable,
            UNWIND_END_UNSUPPORTED => StackEnd::UnsupportedRule,
            UNWIND_END_MAX_FRAMES => StackEnd::MaxDepth,
            // NO_INFO, and REFUSED or USERSPACE without a stack copy to hand over.
            _ => StackEnd::NoUnwindInfo,
        }
    }
}
