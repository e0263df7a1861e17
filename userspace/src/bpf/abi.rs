//! Rust mirror of `ebpf/sysprof.h`, the records the kernel side sends.
//!
//! In: raw bytes of one ring buffer record. Out: a borrowed, typed view
//! ([`SampleView`], [`EventRecord`], decoded in `abi/decode.rs`) that never copies
//! stacks. The layouts here are checked against the C header by
//! `abi_matches_c_header` (in `abi/tests.rs`), which
//! compiles the header with the host C compiler and compares every size,
//! offset and constant. Lengths read from a record are clamped to what the
//! record holds, never trusted.

/// `TASK_COMM_LEN`
pub const TASK_COMM_LEN: usize = 16;
/// `MAX_STACK_DEPTH`: entries per stack in a record.
pub const MAX_STACK_DEPTH: usize = 127;

/// `RECORD_SAMPLE`
pub const RECORD_SAMPLE: u32 = 1;
/// `RECORD_OFFCPU`
pub const RECORD_OFFCPU: u32 = 2;
/// `RECORD_IO`
pub const RECORD_IO: u32 = 3;
/// `RECORD_STACK`
pub const RECORD_STACK: u32 = 4;
/// `RECORD_FOLDED`
pub const RECORD_FOLDED: u32 = 5;
/// `RECORD_THREAD_END`
pub const RECORD_THREAD_END: u32 = 6;

/// `OFFCPU_PREEMPTED`
pub const OFFCPU_PREEMPTED: u32 = 0;
/// `OFFCPU_SLEEPING`
pub const OFFCPU_SLEEPING: u32 = 1;
/// `OFFCPU_BLOCKED`
pub const OFFCPU_BLOCKED: u32 = 2;
/// `OFFCPU_OTHER`
pub const OFFCPU_OTHER: u32 = 3;
/// `OFFCPU_REASONS`
pub const OFFCPU_REASONS: usize = 4;
/// A folded run's waits were only preemptions: no waker.
pub const FOLD_WAKER_UNSET: u32 = 0;
/// A folded run's waits ended with no wakeup seen.
pub const FOLD_WAKER_UNSEEN: u32 = 1;
/// One task (`waker_pid`, `waker_tid`) woke a folded run's waits.
pub const FOLD_WAKER_TASK: u32 = 2;
/// Interrupts woke a folded run's waits.
pub const FOLD_WAKER_IRQ: u32 = 3;
/// Several wakers, none with enough waited time for a run of its own.
pub const FOLD_WAKER_MIXED: u32 = 4;

/// `OFFCPU_END_INFERRED`
pub const OFFCPU_END_INFERRED: u32 = 1;
/// `OFFCPU_START_UNSEEN`: the thread left the CPU before it was first seen
/// (before tracing began, or it is new); the start is its creation, clipped
/// to the range.
pub const OFFCPU_START_UNSEEN: u32 = 2;
/// `OFFCPU_WAKER_TASK`: the tracer saw the wakeup run in task context.
pub const OFFCPU_WAKER_TASK: u32 = 4;
/// `OFFCPU_WAKER_IRQ`: the tracer saw the wakeup run in an interrupt.
pub const OFFCPU_WAKER_IRQ: u32 = 8;

/// `SAMPLE_FLAG_KSTACK_FAILED`
pub const SAMPLE_FLAG_KSTACK_FAILED: u32 = 1;
/// `SAMPLE_FLAG_USTACK_FAILED`
pub const SAMPLE_FLAG_USTACK_FAILED: u32 = 2;
/// `SAMPLE_FLAG_USER_REGS`
pub const SAMPLE_FLAG_USER_REGS: u32 = 4;
/// User frames unwound in the kernel follow the record (see sysprof.h).
pub const SAMPLE_FLAG_KERNEL_UNWOUND: u32 = 8;
/// `user_ip/sp/bp` hold the leaf's user registers (no hand-over).
pub const SAMPLE_FLAG_LEAF_REGS: u32 = 16;
/// `SAMPLE_FLAG_HANDOVER_SKIPPED`: a hand-over sent without its stack copy
/// (the ring was over half full); the stack ends where the kernel's
/// walk did.
pub const SAMPLE_FLAG_HANDOVER_SKIPPED: u32 = 32;

/// Most user frames the in-kernel unwinder sends.
pub const UNWIND_MAX_FRAMES: usize = 1024;
/// Most executable mappings of one process the in-kernel unwinder knows.
pub const UNWIND_MAX_MAPPINGS: usize = 256;
/// `UnwindMapping::table_start` of a table still being built.
pub const UNWIND_TABLE_PENDING: u32 = 0xffff_ffff;
/// `UnwindMapping::table_start` of code only userspace can walk (JIT code with a jitdump).
pub const UNWIND_TABLE_USERSPACE: u32 = 0xffff_fffe;
/// `UnwindProcess::flags`: more executable mappings than an entry holds.
pub const UNWIND_PROCESS_CUT: u32 = 1;
/// In a user stack walked in the kernel, after an interpreted Java frame's
/// address: `JAVA_FRAME_TAG | Method*`, then its bytecode pointer.
pub const JAVA_FRAME_TAG: u64 = 0x2000_0000_0000_0000;
/// A compiled Java frame is three words too: its address, `JAVA_FRAME_TAG |
/// Method*` (read at sample time from its nmethod), then
/// `JAVA_COMPILED_BLOB |` its compile id's low bits `|` the code blob's address.
pub const JAVA_COMPILED_BLOB: u64 = 0x4000_0000_0000_0000;
/// A V8 JavaScript frame is four words: its address, `V8_FRAME_TAG |` its
/// function's SharedFunctionInfo (tagged), that object's
/// name-or-scope-info word as the kernel read it, then the JSFunction
/// (tagged; its code says what was inlined there).
pub const V8_FRAME_TAG: u64 = 0x6000_0000_0000_0000;
/// V8's tagged heap pointers: `(word & V8_HEAP_OBJECT_TAG_MASK) == V8_HEAP_OBJECT_TAG`.
pub const V8_HEAP_OBJECT_TAG: u64 = 1;
/// See [`V8_HEAP_OBJECT_TAG`].
pub const V8_HEAP_OBJECT_TAG_MASK: u64 = 3;
/// Where the low 14 bits of its nmethod's compile id are, in that word.
pub const JAVA_COMPILE_ID_SHIFT: u32 = 47;
/// The compile id's bits kept.
pub const JAVA_COMPILE_ID_MASK: u64 = 0x3fff;
/// Words of the `unwind_refused` bitmap (one bit per pid).
pub const UNWIND_REFUSED_WORDS: usize = 65536;
/// How the in-kernel walk ended: the thread's outermost frame.
pub const UNWIND_END_ROOT: u32 = 0;
/// No tables for the process yet.
pub const UNWIND_END_NO_PROCESS: u32 = 1;
/// A mapping's table still being built.
pub const UNWIND_END_PENDING: u32 = 2;
/// A return address outside every executable mapping.
pub const UNWIND_END_BAD_ADDRESS: u32 = 3;
/// A rule the tables cannot express.
pub const UNWIND_END_UNSUPPORTED: u32 = 4;
/// The stack could not be read.
pub const UNWIND_END_READ_FAILED: u32 = 5;
/// No rule and no usable frame pointer.
pub const UNWIND_END_NO_INFO: u32 = 6;
/// `UNWIND_MAX_FRAMES` reached.
pub const UNWIND_END_MAX_FRAMES: u32 = 7;
/// Code only userspace can walk: handed over.
pub const UNWIND_END_USERSPACE: u32 = 8;
/// No entry: its user's share of the process map was full; handed over.
pub const UNWIND_END_REFUSED: u32 = 9;
/// How many `UNWIND_END_*` there are.
pub const UNWIND_ENDS: usize = 10;

/// `STACK_SLOT_PREEMPTED`
pub const STACK_SLOT_PREEMPTED: u32 = 0;
/// `STACK_SLOT_WAITED`
pub const STACK_SLOT_WAITED: u32 = 1;
/// `STACK_SLOT_CALL`
pub const STACK_SLOT_CALL: u32 = 2;
/// `STACK_SLOTS`
pub const STACK_SLOTS: usize = 3;
/// `STACK_SLOT_INTERRUPT`: a kernel stack read in an interrupt, cached per CPU.
pub const STACK_SLOT_INTERRUPT: u32 = 3;

/// `STACK_KERNEL_THREAD`
pub const STACK_KERNEL_THREAD: u32 = 1;
/// `STACK_USER_REGS`
pub const STACK_USER_REGS: u32 = 2;
/// `STACK_KSTACK_FAILED`
pub const STACK_KSTACK_FAILED: u32 = 4;
/// `STACK_USTACK_FAILED`
pub const STACK_USTACK_FAILED: u32 = 8;
/// `STACK_HANDOVER_SKIPPED`: the kernel's walk so far without a copy to
/// hand over (the events ring was over half full).
pub const STACK_HANDOVER_SKIPPED: u32 = 32;
/// `STACK_SHARED`: sent once for every thread of its process; its id (a
/// hash of its content, with [`STACK_ID_SHARED`]) is referred to by any of
/// them for the rest of the session.
pub const STACK_SHARED: u32 = 64;
/// `STACK_ID_SHARED`: the bit of a shared stack's id.
pub const STACK_ID_SHARED: u64 = 0x8000_0000_0000_0000;
/// `STACK_SHARED_MAX`: shared stacks the tracer keeps at most.
pub const STACK_SHARED_MAX: u32 = 32768;
/// User frames unwound in the kernel follow the record.
pub const STACK_KERNEL_UNWOUND: u32 = 16;

/// `IO_PREFLUSH`
pub const IO_PREFLUSH: u32 = 1;
/// `IO_FUA`
pub const IO_FUA: u32 = 2;
/// `IO_SYNC`
pub const IO_SYNC: u32 = 4;
/// `IO_META`
pub const IO_META: u32 = 8;
/// `IO_READAHEAD`
pub const IO_READAHEAD: u32 = 16;
/// `IO_START_AT_ISSUE`
pub const IO_START_AT_ISSUE: u32 = 32;

/// `IO_OP_READ`
pub const IO_OP_READ: u32 = 0;
/// `IO_OP_WRITE`
pub const IO_OP_WRITE: u32 = 1;
/// `IO_OP_FLUSH`
pub const IO_OP_FLUSH: u32 = 2;
/// `IO_OP_DISCARD`
pub const IO_OP_DISCARD: u32 = 3;
/// `IO_OP_SECURE_ERASE`
pub const IO_OP_SECURE_ERASE: u32 = 5;
/// `IO_OP_WRITE_ZEROES`
pub const IO_OP_WRITE_ZEROES: u32 = 9;

/// `MAX_STACK_COPY`: most user stack bytes a dwarf-mode record carries.
pub const MAX_STACK_COPY: usize = 32768;
/// `STACK_COPY_CHUNK`: the copy size is a multiple of this.
pub const STACK_COPY_CHUNK: usize = 512;

/// `DROP_RINGBUF_FULL`
pub const DROP_RINGBUF_FULL: u32 = 0;
/// `DROP_KSTACK`
pub const DROP_KSTACK: u32 = 1;
/// `DROP_USTACK`
pub const DROP_USTACK: u32 = 2;
/// `DROP_EVENTS_FULL`
pub const DROP_EVENTS_FULL: u32 = 3;
/// `DROP_STACK_RECORD`
pub const DROP_STACK_RECORD: u32 = 4;
/// `DROP_STATE_FULL`
pub const DROP_STATE_FULL: u32 = 5;
/// `DROP_IO_UNTRACKED`
pub const DROP_IO_UNTRACKED: u32 = 6;
/// `DROP_MAX`
pub const DROP_MAX: u32 = 7;

/// `PY_MAX_PROCESSES`
pub const PY_MAX_PROCESSES: u32 = 16384;
/// `PY_MAX_FRAMES`
pub const PY_MAX_FRAMES: usize = 128;
/// `PY_FRAME_READ`
pub const PY_FRAME_READ: u16 = 80;
/// `PY_NO_OFFSET`
pub const PY_NO_OFFSET: u16 = 0xffff;
/// `PY_SEGMENT_END`
pub const PY_SEGMENT_END: u64 = 1;
/// `PY_ADDR_BITS`: a frame pair's words hold an address below, half a
/// fingerprint above.
pub const PY_ADDR_BITS: u32 = 48;
/// `PY_CODE_READ_AT`
pub const PY_CODE_READ_AT: u16 = 64;
/// `PY_CODE_READ`
pub const PY_CODE_READ: u16 = 80;
/// `PY_FP_MUL`
pub const PY_FP_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// `PY_END_NONE`
pub const PY_END_NONE: u16 = 0;
/// `PY_END_ROOT`
pub const PY_END_ROOT: u16 = 1;
/// `PY_END_NO_THREAD`
pub const PY_END_NO_THREAD: u16 = 2;
/// `PY_END_READ_FAILED`
pub const PY_END_READ_FAILED: u16 = 3;
/// `PY_END_MAX_FRAMES`
pub const PY_END_MAX_FRAMES: u16 = 4;

/// `struct python_process`: where a CPython process keeps each thread's
/// state and how its frames are laid out (map `python_procs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonProcess {
    /// Address of `_PyRuntime`'s `autoTSSkey`.
    pub tss_addr: u64,
    /// `PY_VERSION_HEX >> 16`.
    pub version: u32,
    /// glibc's `specific_1stblock` from fsbase.
    pub tsd_offset: u16,
    /// `PyThreadState`: cframe or current_frame.
    pub tstate_frame: u16,
    /// `_PyCFrame.current_frame`, or `PY_NO_OFFSET`.
    pub cframe_current: u16,
    /// `PyThreadState.native_thread_id`.
    pub tstate_native_tid: u16,
    /// Frame: code object.
    pub frame_code: u16,
    /// Frame: previous frame.
    pub frame_previous: u16,
    /// Frame: instruction pointer.
    pub frame_instr: u16,
    /// Frame: owner.
    pub frame_owner: u16,
    /// Frame: 3.11's is_entry, or `PY_NO_OFFSET`.
    pub frame_is_entry: u16,
    /// Code object: `co_firstlineno` (the fingerprint's fields, each
    /// within `PY_CODE_READ_AT..PY_CODE_READ_AT + PY_CODE_READ - 8`).
    pub code_firstlineno: u16,
    /// Code object: `co_filename`.
    pub code_filename: u16,
    /// Code object: `co_qualname`.
    pub code_qualname: u16,
    /// Code object: `co_linetable`.
    pub code_linetable: u16,
    /// Padding.
    pub _pad: [u16; 3],
}

// SAFETY: plain old data.
unsafe impl aya::Pod for PythonProcess {}

/// `struct sample_event`: one cpu-clock sample.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SampleEvent {
    /// `RECORD_SAMPLE`.
    pub kind: u32,
    /// CPU.
    pub cpu: u32,
    /// CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    /// The task's CPU time so far, ns, as of `exec_start`.
    pub sum_exec_runtime: u64,
    /// When the scheduler last updated `sum_exec_runtime`, on its own clock (ns).
    pub exec_start: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `SAMPLE_FLAG_*`.
    pub flags: u32,
    /// Valid entries of `kstack`.
    pub kstack_len: u32,
    /// Valid entries of `ustack`.
    pub ustack_len: u32,
    /// Dwarf mode: valid stack bytes after the record.
    pub stack_size: u32,
    /// `SAMPLE_FLAG_KERNEL_UNWOUND`: `UNWIND_END_*`.
    pub unwind_end: u32,
    /// CPython frame pairs after the `ustack_len` frames.
    pub py_len: u16,
    /// `PY_END_*`.
    pub py_end: u16,
    /// Thread name.
    pub comm: [u8; TASK_COMM_LEN],
    /// Dwarf mode: user registers.
    pub user_ip: u64,
    /// Dwarf mode: user stack pointer.
    pub user_sp: u64,
    /// Dwarf mode: user frame pointer.
    pub user_bp: u64,
    /// Kernel return addresses, leaf first.
    pub kstack: [u64; MAX_STACK_DEPTH],
    /// User return addresses (frame-pointer walk), leaf first.
    pub ustack: [u64; MAX_STACK_DEPTH],
}

/// `struct stack_event`: a thread's stacks at one place. The header only:
/// the words it uses follow it in the record (user part, then the kernel
/// stack; the C header says the order per mode).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackEvent {
    /// `RECORD_STACK`.
    pub kind: u32,
    /// `STACK_*`.
    pub flags: u32,
    /// Id events refer to, with the thread id.
    pub id: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel frames, after the user part.
    pub kstack_len: u32,
    /// User frames (frame pointers, or walked in the kernel), first in the tail.
    pub ustack_len: u32,
    /// Dwarf mode: valid stack bytes after the record.
    pub stack_size: u32,
    /// `STACK_SLOT_*`: the thread's cached stack it replaces.
    pub slot: u32,
    /// `STACK_KERNEL_UNWOUND`: `UNWIND_END_*`.
    pub unwind_end: u32,
    /// CPython frame pairs after the `ustack_len` frames.
    pub py_len: u16,
    /// `PY_END_*`.
    pub py_end: u16,
    /// User instruction pointer.
    pub user_ip: u64,
    /// User stack pointer.
    pub user_sp: u64,
    /// User frame pointer.
    pub user_bp: u64,
}

/// `struct offcpu_event`: one off-CPU interval of a thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffCpuEvent {
    /// `RECORD_OFFCPU`.
    pub kind: u32,
    /// `OFFCPU_*`.
    pub state: u32,
    /// Switched out, ns.
    pub start_ns: u64,
    /// Switched in again, ns.
    pub end_ns: u64,
    /// Woken, ns; 0 if no wakeup was seen.
    pub wake_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU it left.
    pub cpu_out: u32,
    /// CPU it came back on.
    pub cpu_in: u32,
    /// Waker's process id.
    pub waker_pid: u32,
    /// Waker's thread id.
    pub waker_tid: u32,
    /// Stack record of `tid` where it left the CPU (0: none).
    pub stack_id: u64,
    /// Stack record of `waker_tid` at the wakeup (0: none).
    pub waker_stack_id: u64,
    /// Thread name.
    pub comm: [u8; TASK_COMM_LEN],
    /// Waker's name.
    pub waker_comm: [u8; TASK_COMM_LEN],
    /// `OFFCPU_END_INFERRED`.
    pub flags: u32,
    /// From `wake_ns` to the wakee's enqueue, ns, when both were seen: the
    /// wakeup on its way to the wakee's CPU; runnable only after it.
    pub landing_ns: u32,
}

/// `struct folded_event`: a thread's short off-CPU intervals, summed per reason.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldedEvent {
    /// `RECORD_FOLDED`.
    pub kind: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Padding.
    pub _pad: u32,
    /// Start of the first folded interval, ns.
    pub first_ns: u64,
    /// End of the last, ns.
    pub last_ns: u64,
    /// Time per reason (`OFFCPU_*`), ns.
    pub ns: [u64; OFFCPU_REASONS],
    /// Intervals per reason.
    pub count: [u32; OFFCPU_REASONS],
    /// Of the waits not preempted, the time before their wakeup, ns (the
    /// rest of `ns` was runnable).
    pub wait_ns: u64,
    /// Their waker (`FOLD_WAKER_TASK`): process id.
    pub waker_pid: u32,
    /// Their waker: thread id.
    pub waker_tid: u32,
    /// `FOLD_WAKER_*`.
    pub waker_kind: u32,
    /// Of the rest of `ns`, the time from their wakeups to their
    /// enqueues, ns (see [`OffCpuEvent::landing_ns`]).
    pub landing_ns: u32,
    /// Stack record of `tid` where its waits (not its preemptions) left
    /// the CPU, when they all left from one place; 0: several, or none.
    pub stack_id: u64,
}

/// `struct thread_end_event`: a thread's last switch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadEndEvent {
    /// `RECORD_THREAD_END`.
    pub kind: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Padding.
    pub _pad: u32,
    /// When, ns.
    pub time_ns: u64,
    /// Voluntary switches during the recording.
    pub voluntary: u64,
    /// Involuntary switches during the recording.
    pub involuntary: u64,
}

/// `struct blkio_event`: one block I/O request.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoEvent {
    /// `RECORD_IO`.
    pub kind: u32,
    /// Kernel dev_t of the disk (major << 20 | minor).
    pub dev: u32,
    /// First sector.
    pub sector: u64,
    /// Created, ns.
    pub start_ns: u64,
    /// Issued to the device, ns (0 if never).
    pub issue_ns: u64,
    /// Completed, ns.
    pub done_ns: u64,
    /// Size in bytes.
    pub bytes: u32,
    /// Non-zero: failed.
    pub error: i32,
    /// Submitting process.
    pub pid: u32,
    /// Submitting thread.
    pub tid: u32,
    /// `IO_OP_*`.
    pub op: u32,
    /// `IO_*` flags.
    pub flags: u32,
    /// Stack record of `tid` where it created the request (0: none).
    pub stack_id: u64,
    /// Submitter's name.
    pub comm: [u8; TASK_COMM_LEN],
}

/// `struct thread_state`: a thread's scheduler state and switch totals.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadState {
    /// Switched out at, ns; 0 while running.
    pub off_ts: u64,
    /// Switches while blocking or sleeping.
    pub voluntary: u64,
    /// Switches while runnable (preempted).
    pub involuntary: u64,
    /// Folded intervals not sent yet, per reason: time, ns.
    pub short_ns: [u64; OFFCPU_REASONS],
    /// Their counts.
    pub short_count: [u32; OFFCPU_REASONS],
    /// Start of the first of them.
    pub short_first: u64,
    /// End of the last.
    pub short_last: u64,
    /// Process id.
    pub pid: u32,
    /// `OFFCPU_*` of the open interval.
    pub off_state: u32,
    /// CPU it left.
    pub off_cpu: u32,
    /// `OFFCPU_START_UNSEEN` when the open interval began before the thread
    /// was first seen.
    pub off_flags: u32,
    /// Its CPU time when it left, ns.
    pub off_runtime: u64,
    /// Stack record where it left the CPU.
    pub stack_id: u64,
    /// Last wakeup while off-CPU, ns.
    pub wake_ts: u64,
    /// Waker's process id.
    pub waker_pid: u32,
    /// Waker's thread id.
    pub waker_tid: u32,
    /// Waker's stack record.
    pub waker_stack_id: u64,
    /// Waker's name.
    pub waker_comm: [u8; TASK_COMM_LEN],
    /// The folded run's waited time (before the wakeups), ns.
    pub short_wait_ns: u64,
    /// The folded run's waker (`FOLD_WAKER_TASK`): process id.
    pub short_waker_pid: u32,
    /// The folded run's waker: thread id.
    pub short_waker_tid: u32,
    /// `FOLD_WAKER_*`.
    pub short_waker_kind: u32,
    /// The last wakeup came from an interrupt.
    pub waker_irq: u32,
    /// The last wakeup came before its switch-out.
    pub wake_early: u32,
    /// Padding.
    pub _pad_state: u32,
    /// The folded run's waits an interrupt woke, sleeping and blocked: time, ns.
    pub irq_ns: [u64; 2],
    /// Their time before their wakeups, ns.
    pub irq_wait_ns: u64,
    /// Their counts.
    pub irq_count: [u32; 2],
    /// When the last wakeup put it on a run queue, ns (`sched_wakeup`).
    pub queued_ts: u64,
    /// The folded run's landing times, ns.
    pub short_land_ns: u64,
    /// The interrupts' run's.
    pub irq_land_ns: u64,
    /// The folded run's place (see [`FoldedEvent::stack_id`]).
    pub short_stack_id: u64,
    /// The interrupts' run's.
    pub irq_stack_id: u64,
    /// Kernel-private: the last stack sent per slot.
    pub cache: [StackCache; STACK_SLOTS],
}

impl ThreadState {
    /// For the interval open since `off_ts`, woken at `wake_ts`, up to
    /// `end`: how long its wakeup took to land on a run queue, ns, when its
    /// enqueue was seen (sched.bpf.c `landing`); else 0.
    pub fn landing(&self, end: u64) -> u64 {
        let (q, w) = (self.queued_ts, self.wake_ts);
        if w < self.off_ts || w > end || q < w || q < self.off_ts || q > end {
            0
        } else {
            q - w
        }
    }
}

/// `struct stack_cache`: kernel-private.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCache {
    /// User ip.
    pub ip: u64,
    /// User sp.
    pub sp: u64,
    /// User bp.
    pub bp: u64,
    /// Stack record id.
    pub id: u64,
    /// Off-CPU state or call site.
    pub what: u32,
    /// Padding.
    pub _pad: u32,
    /// Hash of what tells places with the same registers apart (Python
    /// chain, JVM interpreter, top of the user stack); 0: a kernel thread.
    pub context: u64,
}

// SAFETY: plain old data, every bit pattern valid.
unsafe impl aya::Pod for ThreadState {}

/// `struct unwind_mapping`: one executable mapping for the in-kernel unwinder.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindMapping {
    /// First address, in the process.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// Process address minus file address.
    pub bias: u64,
    /// First row of its table in `unwind_rows`, or `UNWIND_TABLE_PENDING`.
    pub table_start: u32,
    /// Rows (0: no table).
    pub table_len: u32,
}

/// `HOTSPOT_HEAPS`
pub const HOTSPOT_HEAPS: usize = 3;
/// `HOTSPOT_HEAPS_ROOM`: entries of `hotspot_code.heap`.
pub const HOTSPOT_HEAPS_ROOM: usize = 4;
/// `HOTSPOT_MAX_HOPS`
pub const HOTSPOT_MAX_HOPS: usize = 64;
/// `HOTSPOT_MAX_FRAME_WORDS`
pub const HOTSPOT_MAX_FRAME_WORDS: usize = 65536;
/// `UNWIND_TABLE_HOTSPOT`: a JVM code heap's mapping, walked by its blobs' frame sizes.
pub const UNWIND_TABLE_HOTSPOT: u32 = 0xffff_fffd;

/// `struct hotspot_heap`: one code heap of a JVM and its segment map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotSpotHeap {
    /// The heap's reserved range, `[low, end)`; 0: none.
    pub low: u64,
    /// End of the range.
    pub end: u64,
    /// Its segment map's first byte.
    pub segmap: u64,
    /// Segment size, log2.
    pub log2_segment: u32,
    /// Zero.
    pub _pad: u32,
}

/// `struct hotspot_code`: a JVM's code cache as the kernel's walker reads
/// it (frame sizes of compiled methods and stubs from their blobs).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotSpotCode {
    /// The code heaps.
    pub heap: [HotSpotHeap; HOTSPOT_HEAPS_ROOM],
    /// The heaps' union: lowest `low`.
    pub low: u64,
    /// Highest `end`.
    pub end: u64,
    /// `sizeof(HeapBlock)`.
    pub block_header: u16,
    /// `CodeBlob::_frame_size`.
    pub frame_size_at: u16,
    /// `CodeBlob::_frame_complete_offset`.
    pub frame_complete_at: u16,
    /// `CodeBlob::_code_begin`.
    pub code_begin_at: u16,
    /// `CompiledMethod::_method` (`nmethod::_method` from JDK 23); 0: not read.
    pub method_at: u16,
    /// `nmethod::_compile_id`; 0: not read.
    pub compile_id_at: u16,
    /// Room to the struct's 8-byte alignment, as the C header has it.
    pub _pad: [u16; 2],
}

/// `struct v8_frames`: where the walker reads a V8 frame's function, from
/// the process's own `v8dbg_` constants.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V8Frames {
    /// The frame's context-or-type slot, from its frame pointer (-8).
    pub marker_at: i32,
    /// The frame's JSFunction slot, from its frame pointer (-16); 0: not V8.
    pub function_at: i32,
    /// `JSFunction::shared` within the object.
    pub shared_at: u32,
    /// `SharedFunctionInfo::name_or_scope_info` within the object.
    pub name_at: u32,
}

/// `struct unwind_process`: a process's executable mappings, sorted.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UnwindProcess {
    /// Valid entries of `m`.
    pub count: u32,
    /// Monotonic ms (truncated to 32 bits) until which a walk that hands
    /// over wakes the reader.
    pub wake_until_ms: u32,
    /// `UNWIND_PROCESS_CUT`.
    pub flags: u32,
    /// Zero.
    pub _pad: u32,
    /// HotSpot's template interpreter, `[start, end)`; 0, 0: none.
    pub java_interp_start: u64,
    /// End of the interpreter's code.
    pub java_interp_end: u64,
    /// Its code cache (`heap[0].low` 0: none).
    pub java_code: HotSpotCode,
    /// Where V8 keeps a frame's function (`function_at` 0: not V8).
    pub v8: V8Frames,
    /// The mappings, by start address.
    pub m: [UnwindMapping; UNWIND_MAX_MAPPINGS],
}

// SAFETY: plain old data, every bit pattern valid.
unsafe impl aya::Pod for UnwindProcess {}

/// One row, as `struct unwind_row` in `ebpf/sysprof.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Row {
    /// First address (the file's own, ELF virtual address) the row applies to.
    pub pc: u32,
    /// `ROW_*` in the low 3 bits; the high 5 are bits 16-20 of the CFA
    /// offset / 8 (frames over 512 KiB: rustc has a 527 KiB one).
    pub kind: u8,
    /// The caller's frame pointer is saved at CFA - 8 * this (0: unchanged).
    /// For `ROW_PLT`: the low 4 bits of the address from which 8 more
    /// bytes are on the stack.
    pub rbp_slot: u8,
    /// CFA = register + 8 * this (bits 0-15).
    pub cfa_off8: u16,
}

/// No rule here (between functions, hand-written code without CFI): the
/// walker tries the frame pointer.
pub const ROW_NONE: u8 = 0;
/// CFA = rsp + offset.
pub const ROW_CFA_RSP: u8 = 1;
/// CFA = rbp + offset.
pub const ROW_CFA_RBP: u8 = 2;
/// A PLT entry: CFA = rsp + 8, plus 8 from the threshold in `rbp_slot` on
/// (the expression every linker emits for `.plt`).
pub const ROW_PLT: u8 = 3;
/// A signal trampoline (`__restore_rt`): the interrupted registers are in
/// the `ucontext` at rsp.
pub const ROW_SIGNAL: u8 = 4;
/// The return address is undefined: the outermost frame of the thread.
pub const ROW_END: u8 = 5;
/// A rule no row can express (another DWARF expression, a register other
/// than rsp or rbp for the CFA, a return address not at CFA-8): the walk
/// stops here and says why.
pub const ROW_UNSUPPORTED: u8 = 6;

mod decode;
pub use decode::*;

#[cfg(test)]
mod tests;
