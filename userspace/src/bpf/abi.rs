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

/// `STACK_SLOT_PREEMPTED`
pub const STACK_SLOT_PREEMPTED: u32 = 0;
/// `STACK_SLOT_WAITED`
pub const STACK_SLOT_WAITED: u32 = 1;
/// `STACK_SLOT_CALL`
pub const STACK_SLOT_CALL: u32 = 2;
/// `STACK_SLOTS`
pub const STACK_SLOTS: usize = 3;
/// `PLACE_RUNS`: runs of waits a thread keeps apart by place and waker.
pub const PLACE_RUNS: usize = 4;
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
/// User frames unwound in the kernel follow the record; with
/// `STACK_USER_REGS`, the walk handed over: the copy, the kernel stack, then
/// the runtimes' chain it read.
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
    /// CPython frame pairs after the `ustack_len` frames (a walk that
    /// handed over: after the copy and the kernel stack).
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
    /// Of the rest of `ns` (after the wakeups), the run delays of waits
    /// whose own was at least `run_delay_apart_ns`, ns: drawn apart. A run
    /// of one place's waits ([`PlaceRun`]) only.
    pub delay_ns: u32,
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
    /// `FOLDED_BY_PLACE`.
    pub flags: u32,
    /// Padding.
    pub _pad: u32,
}

/// `folded_event.flags`: a run of one place, waker and reason
/// ([`PlaceRun`]), whose waits userspace sums with the others of their waker.
pub const FOLDED_BY_PLACE: u32 = 1;

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
    /// It has an entry in the `place_runs` map.
    pub has_place_runs: u32,
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

/// `struct place_runs`: a thread's runs of waits from `offcpu_min_ns` up
/// to `fold_same_max_ns` not sent yet, summed per place, waker and reason.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlaceRuns {
    /// The thread's process.
    pub pid: u32,
    /// Padding.
    pub _pad: u32,
    /// Free while `count` is 0.
    pub r: [PlaceRun; PLACE_RUNS],
}

// SAFETY: plain old data, `#[repr(C)]` of integers with no padding (the
// ABI test checks its size against the header's).
unsafe impl aya::Pod for PlaceRuns {}

/// `struct place_run`: a thread's waits from one place, with one waker and
/// reason, not sent yet.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlaceRun {
    /// Where they left the CPU (a stack record, shared or the thread's own).
    pub stack_id: u64,
    /// Start of the first, ns.
    pub first_ns: u64,
    /// End of the last, ns.
    pub last_ns: u64,
    /// Off-CPU time, ns.
    pub ns: u64,
    /// Of it, before their wakeups, ns.
    pub wait_ns: u64,
    /// From their wakeups to their enqueues, ns.
    pub land_ns: u64,
    /// Run delays of at least `run_delay_apart_ns` each, ns.
    pub delay_ns: u64,
    /// Waker's process id (`FOLD_WAKER_TASK`).
    pub waker_pid: u32,
    /// Waker's thread id (`FOLD_WAKER_TASK`).
    pub waker_tid: u32,
    /// `FOLD_WAKER_*`.
    pub waker_kind: u32,
    /// `OFFCPU_*`.
    pub reason: u32,
    /// Waits summed; 0: the slot is free.
    pub count: u32,
    /// Padding.
    pub _pad: u32,
}

impl PlaceRun {
    /// The run as the record the kernel sends for it (its span as kept:
    /// what lies past the recording's end is cut by the window).
    pub fn to_event(&self, pid: u32, tid: u32) -> FoldedEvent {
        let reason = self.reason as usize & (OFFCPU_REASONS - 1);
        let mut ns = [0; OFFCPU_REASONS];
        let mut count = [0; OFFCPU_REASONS];
        ns[reason] = self.ns;
        count[reason] = self.count;
        FoldedEvent {
            kind: RECORD_FOLDED,
            pid,
            tid,
            delay_ns: self.delay_ns.min(u32::MAX as u64) as u32,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            ns,
            count,
            wait_ns: self.wait_ns,
            waker_pid: self.waker_pid,
            waker_tid: self.waker_tid,
            waker_kind: self.waker_kind,
            landing_ns: self.land_ns.min(u32::MAX as u64) as u32,
            stack_id: self.stack_id,
            flags: FOLDED_BY_PLACE,
            _pad: 0,
        }
    }
}

impl ThreadState {
    /// For the interval open since `off_ts`, woken at `wake_ts`, up to
    /// `end`: how long its wakeup took to land on a run queue, ns, when its
    /// enqueue was seen (ebpf/sched/offcpu.bpf.h `landing`); else 0.
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

mod unwinder;
pub use unwinder::*;

mod decode;
pub use decode::*;

#[cfg(test)]
mod tests;
