//! Rust mirror of `ebpf/sysprof.h`, the records the kernel side sends.
//!
//! In: raw bytes of one ring buffer record. Out: a borrowed, typed view
//! ([`SampleView`]) that never copies the stacks. The layouts here are
//! checked against the C header by `abi_matches_c_header`, which compiles
//! the header with the host C compiler and compares every size and offset.

/// `TASK_COMM_LEN`
pub const TASK_COMM_LEN: usize = 16;
/// `MAX_STACK_DEPTH`: entries per stack in a sample record.
pub const MAX_STACK_DEPTH: usize = 127;
/// `RECORD_SAMPLE`
pub const RECORD_SAMPLE: u32 = 1;
/// `SAMPLE_FLAG_KSTACK_FAILED`
pub const SAMPLE_FLAG_KSTACK_FAILED: u32 = 1;
/// `SAMPLE_FLAG_USTACK_FAILED`
pub const SAMPLE_FLAG_USTACK_FAILED: u32 = 2;
/// `SAMPLE_FLAG_USER_REGS`
pub const SAMPLE_FLAG_USER_REGS: u32 = 4;
/// `MAX_STACK_COPY`: most user stack bytes a dwarf-mode sample carries.
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
/// `DROP_STACKID`
pub const DROP_STACKID: u32 = 4;
/// `DROP_STATE_FULL`
pub const DROP_STATE_FULL: u32 = 5;
/// `DROP_MAX`
pub const DROP_MAX: u32 = 6;
/// `RECORD_OFFCPU`
pub const RECORD_OFFCPU: u32 = 2;
/// `RECORD_IO`
pub const RECORD_IO: u32 = 3;
/// `RECORD_USTACK`
pub const RECORD_USTACK: u32 = 4;
/// `USTACK_ID_FLAG`: set in ids of copied user stacks.
pub const USTACK_ID_FLAG: u32 = 0x4000_0000;

/// `struct ustack_event`: a thread's user registers and stack at switch-out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UstackEvent {
    /// `RECORD_USTACK`.
    pub kind: u32,
    /// `USTACK_ID_FLAG | sequence`.
    pub id: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer.
    pub sp: u64,
    /// User frame pointer.
    pub bp: u64,
    /// Valid stack bytes after the record.
    pub size: u32,
    /// Padding.
    pub _pad: u32,
}
/// `OFFCPU_PREEMPTED`
pub const OFFCPU_PREEMPTED: u32 = 0;
/// `OFFCPU_SLEEPING`
pub const OFFCPU_SLEEPING: u32 = 1;
/// `OFFCPU_BLOCKED`
pub const OFFCPU_BLOCKED: u32 = 2;
/// `OFFCPU_OTHER`
pub const OFFCPU_OTHER: u32 = 3;

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
    /// Total length of folded shorter intervals, ns.
    pub short_ns: u64,
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
    /// Kernel stack id at switch-out (< 0: none).
    pub kstack_id: i32,
    /// User stack id at switch-out (< 0: none).
    pub ustack_id: i32,
    /// Waker's kernel stack id.
    pub waker_kstack_id: i32,
    /// Waker's user stack id.
    pub waker_ustack_id: i32,
    /// Folded shorter intervals.
    pub short_count: u32,
    /// Padding.
    pub _pad: u32,
    /// Thread name.
    pub comm: [u8; TASK_COMM_LEN],
    /// Waker's name.
    pub waker_comm: [u8; TASK_COMM_LEN],
}

/// `struct blkio_event`: one block I/O request.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoEvent {
    /// `RECORD_IO`.
    pub kind: u32,
    /// Kernel dev_t (major << 20 | minor).
    pub dev: u32,
    /// First sector.
    pub sector: u64,
    /// Created, ns.
    pub start_ns: u64,
    /// Issued to the device, ns (0 if not seen).
    pub issue_ns: u64,
    /// Completed, ns.
    pub done_ns: u64,
    /// Size in bytes.
    pub bytes: u32,
    /// Error (negative errno) or 0.
    pub error: i32,
    /// Submitting process.
    pub pid: u32,
    /// Submitting thread.
    pub tid: u32,
    /// Submitter's kernel stack id.
    pub kstack_id: i32,
    /// Submitter's user stack id.
    pub ustack_id: i32,
    /// Submitter's name.
    pub comm: [u8; TASK_COMM_LEN],
    /// blktrace-style flags: R, W, F, S, M, ...
    pub rwbs: [u8; 8],
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
    /// Folded intervals not carried by a record yet.
    pub short_count: u64,
    /// Their total length, ns.
    pub short_ns: u64,
    /// Process id.
    pub pid: u32,
    /// `OFFCPU_*` of the open interval.
    pub off_state: u32,
    /// CPU it left.
    pub off_cpu: u32,
    /// Kernel stack id at switch-out.
    pub kstack_id: i32,
    /// User stack id at switch-out.
    pub ustack_id: i32,
    /// Padding.
    pub _pad: u32,
    /// Last wakeup while off-CPU, ns.
    pub wake_ts: u64,
    /// Waker's process id.
    pub waker_pid: u32,
    /// Waker's thread id.
    pub waker_tid: u32,
    /// Waker's kernel stack id.
    pub waker_kstack_id: i32,
    /// Waker's user stack id.
    pub waker_ustack_id: i32,
    /// Waker's name.
    pub waker_comm: [u8; TASK_COMM_LEN],
    /// Kernel-private stack cache: user ip of the last switch-out.
    pub cache_ip: u64,
    /// Its user sp.
    pub cache_sp: u64,
    /// Its user bp.
    pub cache_bp: u64,
    /// Its state.
    pub cache_state: u32,
    /// Its kernel stack id.
    pub cache_kstack_id: i32,
    /// Its user stack id.
    pub cache_ustack_id: i32,
    /// Padding.
    pub _pad2: u32,
}

// SAFETY: plain old data, every bit pattern valid.
unsafe impl aya::Pod for ThreadState {}

/// A decoded record of the `events` ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRecord<'a> {
    /// An off-CPU interval.
    OffCpu(&'a OffCpuEvent),
    /// A block I/O request.
    Io(&'a IoEvent),
    /// A copied user stack (dwarf mode) and its bytes.
    UserStack(&'a UstackEvent, &'a [u8]),
}

/// View `bytes` as a `T` after checking length and alignment.
fn view<T>(bytes: &[u8], kind: u32) -> Result<&T, DecodeError> {
    if bytes.len() < std::mem::size_of::<T>() {
        return Err(DecodeError::Short { kind, len: bytes.len() });
    }
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0 {
        return Err(DecodeError::Misaligned);
    }
    // SAFETY: length and alignment checked; T is a repr(C) POD record.
    Ok(unsafe { &*(bytes.as_ptr() as *const T) })
}

/// Decode one record of the `events` ring (off-CPU intervals and I/O).
pub fn decode_event(bytes: &[u8]) -> Result<EventRecord<'_>, DecodeError> {
    if bytes.len() < 4 {
        return Err(DecodeError::Short { kind: 0, len: bytes.len() });
    }
    let kind = u32::from_ne_bytes(bytes[0..4].try_into().expect("4 bytes"));
    match kind {
        RECORD_OFFCPU => view::<OffCpuEvent>(bytes, kind).map(EventRecord::OffCpu),
        RECORD_IO => view::<IoEvent>(bytes, kind).map(EventRecord::Io),
        RECORD_USTACK => {
            let e = view::<UstackEvent>(bytes, kind)?;
            let tail = &bytes[std::mem::size_of::<UstackEvent>()..];
            Ok(EventRecord::UserStack(e, &tail[..(e.size as usize).min(tail.len())]))
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// A NUL-padded name as text.
pub fn comm_str(comm: &[u8]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..len]).into_owned()
}

/// `struct sample_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SampleEvent {
    /// `RECORD_SAMPLE`.
    pub kind: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// `task->se.sum_exec_runtime` in nanoseconds.
    pub sum_exec_runtime: u64,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `SAMPLE_FLAG_*`.
    pub flags: u32,
    /// Valid entries in `kstack`.
    pub kstack_len: u32,
    /// Valid entries in `ustack`.
    pub ustack_len: u32,
    /// Dwarf mode: valid bytes of user stack after the record.
    pub stack_size: u32,
    /// Task name, NUL-padded.
    pub comm: [u8; TASK_COMM_LEN],
    /// Dwarf mode: user instruction pointer.
    pub user_ip: u64,
    /// Dwarf mode: user stack pointer.
    pub user_sp: u64,
    /// Dwarf mode: user frame pointer.
    pub user_bp: u64,
    /// Kernel return addresses, leaf first.
    pub kstack: [u64; MAX_STACK_DEPTH],
    /// User return addresses, leaf first.
    pub ustack: [u64; MAX_STACK_DEPTH],
}

/// A decoded sample borrowing its stacks from the ring buffer record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleView<'a> {
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// Thread's total CPU time so far, nanoseconds.
    pub sum_exec_runtime: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `SAMPLE_FLAG_*`.
    pub flags: u32,
    /// Task name without NUL padding.
    pub comm: &'a [u8],
    /// Kernel stack, leaf first.
    pub kstack: &'a [u64],
    /// User stack, leaf first (frame-pointer mode).
    pub ustack: &'a [u64],
    /// Dwarf mode: user (ip, sp, bp).
    pub user_regs: Option<(u64, u64, u64)>,
    /// Dwarf mode: user stack bytes from `sp` up.
    pub stack: &'a [u8],
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is shorter than its kind requires.
    #[error("record of {len} bytes is too short for kind {kind}")]
    Short {
        /// Record kind, or 0 if the kind itself was missing.
        kind: u32,
        /// Bytes received.
        len: usize,
    },
    /// The record is not 8-byte aligned, which ring buffer records always are.
    #[error("record is not 8-byte aligned")]
    Misaligned,
    /// The record's kind is unknown to this build.
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
}

/// Decode one sample record. The record is only borrowed; nothing is copied
/// or allocated, and out-of-range stack lengths are clamped rather than trusted.
pub fn decode_sample(bytes: &[u8]) -> Result<SampleView<'_>, DecodeError> {
    if bytes.len() < 4 {
        return Err(DecodeError::Short { kind: 0, len: bytes.len() });
    }
    let kind = u32::from_ne_bytes(bytes[0..4].try_into().expect("4 bytes"));
    if kind != RECORD_SAMPLE {
        return Err(DecodeError::UnknownKind(kind));
    }
    if bytes.len() < std::mem::size_of::<SampleEvent>() {
        return Err(DecodeError::Short { kind, len: bytes.len() });
    }
    if bytes.as_ptr().align_offset(std::mem::align_of::<SampleEvent>()) != 0 {
        return Err(DecodeError::Misaligned);
    }
    // SAFETY: length and alignment checked above; SampleEvent is plain old data with no
    // invalid bit patterns. Ring buffer records are 8-byte aligned.
    let e: &SampleEvent = unsafe { &*(bytes.as_ptr() as *const SampleEvent) };
    let comm_len = e.comm.iter().position(|&b| b == 0).unwrap_or(TASK_COMM_LEN);
    let klen = (e.kstack_len as usize).min(MAX_STACK_DEPTH);
    let ulen = (e.ustack_len as usize).min(MAX_STACK_DEPTH);
    let tail = &bytes[std::mem::size_of::<SampleEvent>()..];
    let stack = &tail[..(e.stack_size as usize).min(tail.len())];
    Ok(SampleView {
        cpu: e.cpu,
        time_ns: e.time_ns,
        sum_exec_runtime: e.sum_exec_runtime,
        pid: e.pid,
        tid: e.tid,
        flags: e.flags,
        comm: &e.comm[..comm_len],
        kstack: &e.kstack[..klen],
        ustack: &e.ustack[..ulen],
        user_regs: (e.flags & SAMPLE_FLAG_USER_REGS != 0).then_some((e.user_ip, e.user_sp, e.user_bp)),
        stack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Check that every size and offset of the Rust mirror equals the C
    /// header's, as compiled by the host C compiler.
    #[test]
    fn abi_matches_c_header() {
        let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/sysprof.h");
        let dir = std::env::temp_dir().join(format!("sysprof-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("abi.c");
        std::fs::write(
            &src,
            format!(
                r#"#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include "{header}"
#define F(f) printf(#f " %zu\n", offsetof(struct sample_event, f));
#define O(f) printf("offcpu." #f " %zu\n", offsetof(struct offcpu_event, f));
#define I(f) printf("io." #f " %zu\n", offsetof(struct blkio_event, f));
#define T(f) printf("state." #f " %zu\n", offsetof(struct thread_state, f));
int main(void) {{
  printf("size %zu\n", sizeof(struct sample_event));
  F(kind) F(cpu) F(time_ns) F(sum_exec_runtime) F(pid) F(tid) F(flags)
  F(kstack_len) F(ustack_len) F(stack_size) F(comm) F(user_ip) F(user_sp) F(user_bp) F(kstack) F(ustack)
  printf("SAMPLE_FLAG_USER_REGS %d\nMAX_STACK_COPY %d\nSTACK_COPY_CHUNK %d\n", SAMPLE_FLAG_USER_REGS, MAX_STACK_COPY, STACK_COPY_CHUNK);
  printf("offcpu.size %zu\nio.size %zu\nstate.size %zu\n", sizeof(struct offcpu_event), sizeof(struct blkio_event), sizeof(struct thread_state));
  O(state) O(start_ns) O(end_ns) O(wake_ns) O(short_ns) O(pid) O(tid) O(cpu_out) O(cpu_in) O(waker_pid) O(waker_tid)
  O(kstack_id) O(ustack_id) O(waker_kstack_id) O(waker_ustack_id) O(short_count) O(comm) O(waker_comm)
  I(dev) I(sector) I(start_ns) I(issue_ns) I(done_ns) I(bytes) I(error) I(pid) I(tid) I(kstack_id) I(ustack_id) I(comm) I(rwbs)
  T(off_ts) T(voluntary) T(involuntary) T(short_count) T(short_ns) T(pid) T(off_state) T(off_cpu) T(kstack_id) T(ustack_id)
  T(wake_ts) T(waker_pid) T(waker_tid) T(waker_kstack_id) T(waker_ustack_id) T(waker_comm) T(cache_ip) T(cache_sp) T(cache_bp)
  T(cache_state) T(cache_kstack_id) T(cache_ustack_id)
  printf("ustack.size %zu\nustack.ip %zu\nustack.size_field %zu\nRECORD_USTACK %d\nUSTACK_ID_FLAG %d\n", sizeof(struct ustack_event),
         offsetof(struct ustack_event, ip), offsetof(struct ustack_event, size), RECORD_USTACK, USTACK_ID_FLAG);
  printf("RECORD_OFFCPU %d\nRECORD_IO %d\nOFFCPU_PREEMPTED %d\nOFFCPU_SLEEPING %d\nOFFCPU_BLOCKED %d\nOFFCPU_OTHER %d\n", RECORD_OFFCPU, RECORD_IO, OFFCPU_PREEMPTED, OFFCPU_SLEEPING, OFFCPU_BLOCKED, OFFCPU_OTHER);
  printf("DROP_EVENTS_FULL %d\nDROP_STACKID %d\nDROP_STATE_FULL %d\n", DROP_EVENTS_FULL, DROP_STACKID, DROP_STATE_FULL);
  printf("TASK_COMM_LEN %d\nMAX_STACK_DEPTH %d\nRECORD_SAMPLE %d\n", TASK_COMM_LEN, MAX_STACK_DEPTH, RECORD_SAMPLE);
  printf("DROP_RINGBUF_FULL %d\nDROP_KSTACK %d\nDROP_USTACK %d\nDROP_MAX %d\n", DROP_RINGBUF_FULL, DROP_KSTACK, DROP_USTACK, DROP_MAX);
  printf("SAMPLE_FLAG_KSTACK_FAILED %d\nSAMPLE_FLAG_USTACK_FAILED %d\n", SAMPLE_FLAG_KSTACK_FAILED, SAMPLE_FLAG_USTACK_FAILED);
  return 0;
}}
"#
            ),
        )
        .unwrap();
        let exe = dir.join("abi");
        let status = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("the host C compiler `cc` is needed for this test");
        assert!(status.success(), "compiling the ABI probe failed");
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let c: std::collections::HashMap<&str, usize> = text
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k, v.parse().unwrap())
            })
            .collect();
        let rust = [
            ("size", size_of::<SampleEvent>()),
            ("kind", offset_of!(SampleEvent, kind)),
            ("cpu", offset_of!(SampleEvent, cpu)),
            ("time_ns", offset_of!(SampleEvent, time_ns)),
            ("sum_exec_runtime", offset_of!(SampleEvent, sum_exec_runtime)),
            ("pid", offset_of!(SampleEvent, pid)),
            ("tid", offset_of!(SampleEvent, tid)),
            ("flags", offset_of!(SampleEvent, flags)),
            ("kstack_len", offset_of!(SampleEvent, kstack_len)),
            ("ustack_len", offset_of!(SampleEvent, ustack_len)),
            ("stack_size", offset_of!(SampleEvent, stack_size)),
            ("comm", offset_of!(SampleEvent, comm)),
            ("user_ip", offset_of!(SampleEvent, user_ip)),
            ("user_sp", offset_of!(SampleEvent, user_sp)),
            ("user_bp", offset_of!(SampleEvent, user_bp)),
            ("SAMPLE_FLAG_USER_REGS", SAMPLE_FLAG_USER_REGS as usize),
            ("MAX_STACK_COPY", MAX_STACK_COPY),
            ("STACK_COPY_CHUNK", STACK_COPY_CHUNK),
            ("kstack", offset_of!(SampleEvent, kstack)),
            ("ustack", offset_of!(SampleEvent, ustack)),
            ("TASK_COMM_LEN", TASK_COMM_LEN),
            ("MAX_STACK_DEPTH", MAX_STACK_DEPTH),
            ("RECORD_SAMPLE", RECORD_SAMPLE as usize),
            ("DROP_RINGBUF_FULL", DROP_RINGBUF_FULL as usize),
            ("DROP_KSTACK", DROP_KSTACK as usize),
            ("DROP_USTACK", DROP_USTACK as usize),
            ("DROP_MAX", DROP_MAX as usize),
            ("SAMPLE_FLAG_KSTACK_FAILED", SAMPLE_FLAG_KSTACK_FAILED as usize),
            ("SAMPLE_FLAG_USTACK_FAILED", SAMPLE_FLAG_USTACK_FAILED as usize),
            ("offcpu.size", size_of::<OffCpuEvent>()),
            ("io.size", size_of::<IoEvent>()),
            ("state.size", size_of::<ThreadState>()),
            ("offcpu.state", offset_of!(OffCpuEvent, state)),
            ("offcpu.start_ns", offset_of!(OffCpuEvent, start_ns)),
            ("offcpu.end_ns", offset_of!(OffCpuEvent, end_ns)),
            ("offcpu.wake_ns", offset_of!(OffCpuEvent, wake_ns)),
            ("offcpu.short_ns", offset_of!(OffCpuEvent, short_ns)),
            ("offcpu.pid", offset_of!(OffCpuEvent, pid)),
            ("offcpu.tid", offset_of!(OffCpuEvent, tid)),
            ("offcpu.cpu_out", offset_of!(OffCpuEvent, cpu_out)),
            ("offcpu.cpu_in", offset_of!(OffCpuEvent, cpu_in)),
            ("offcpu.waker_pid", offset_of!(OffCpuEvent, waker_pid)),
            ("offcpu.waker_tid", offset_of!(OffCpuEvent, waker_tid)),
            ("offcpu.kstack_id", offset_of!(OffCpuEvent, kstack_id)),
            ("offcpu.ustack_id", offset_of!(OffCpuEvent, ustack_id)),
            ("offcpu.waker_kstack_id", offset_of!(OffCpuEvent, waker_kstack_id)),
            ("offcpu.waker_ustack_id", offset_of!(OffCpuEvent, waker_ustack_id)),
            ("offcpu.short_count", offset_of!(OffCpuEvent, short_count)),
            ("offcpu.comm", offset_of!(OffCpuEvent, comm)),
            ("offcpu.waker_comm", offset_of!(OffCpuEvent, waker_comm)),
            ("io.dev", offset_of!(IoEvent, dev)),
            ("io.sector", offset_of!(IoEvent, sector)),
            ("io.start_ns", offset_of!(IoEvent, start_ns)),
            ("io.issue_ns", offset_of!(IoEvent, issue_ns)),
            ("io.done_ns", offset_of!(IoEvent, done_ns)),
            ("io.bytes", offset_of!(IoEvent, bytes)),
            ("io.error", offset_of!(IoEvent, error)),
            ("io.pid", offset_of!(IoEvent, pid)),
            ("io.tid", offset_of!(IoEvent, tid)),
            ("io.kstack_id", offset_of!(IoEvent, kstack_id)),
            ("io.ustack_id", offset_of!(IoEvent, ustack_id)),
            ("io.comm", offset_of!(IoEvent, comm)),
            ("io.rwbs", offset_of!(IoEvent, rwbs)),
            ("state.off_ts", offset_of!(ThreadState, off_ts)),
            ("state.voluntary", offset_of!(ThreadState, voluntary)),
            ("state.involuntary", offset_of!(ThreadState, involuntary)),
            ("state.short_count", offset_of!(ThreadState, short_count)),
            ("state.short_ns", offset_of!(ThreadState, short_ns)),
            ("state.pid", offset_of!(ThreadState, pid)),
            ("state.off_state", offset_of!(ThreadState, off_state)),
            ("state.off_cpu", offset_of!(ThreadState, off_cpu)),
            ("state.kstack_id", offset_of!(ThreadState, kstack_id)),
            ("state.ustack_id", offset_of!(ThreadState, ustack_id)),
            ("state.wake_ts", offset_of!(ThreadState, wake_ts)),
            ("state.waker_pid", offset_of!(ThreadState, waker_pid)),
            ("state.waker_tid", offset_of!(ThreadState, waker_tid)),
            ("state.waker_kstack_id", offset_of!(ThreadState, waker_kstack_id)),
            ("state.waker_ustack_id", offset_of!(ThreadState, waker_ustack_id)),
            ("state.waker_comm", offset_of!(ThreadState, waker_comm)),
            ("state.cache_ip", offset_of!(ThreadState, cache_ip)),
            ("state.cache_sp", offset_of!(ThreadState, cache_sp)),
            ("state.cache_bp", offset_of!(ThreadState, cache_bp)),
            ("state.cache_state", offset_of!(ThreadState, cache_state)),
            ("state.cache_kstack_id", offset_of!(ThreadState, cache_kstack_id)),
            ("state.cache_ustack_id", offset_of!(ThreadState, cache_ustack_id)),
            ("ustack.size", size_of::<UstackEvent>()),
            ("ustack.ip", offset_of!(UstackEvent, ip)),
            ("ustack.size_field", offset_of!(UstackEvent, size)),
            ("RECORD_USTACK", RECORD_USTACK as usize),
            ("USTACK_ID_FLAG", USTACK_ID_FLAG as usize),
            ("RECORD_OFFCPU", RECORD_OFFCPU as usize),
            ("RECORD_IO", RECORD_IO as usize),
            ("OFFCPU_PREEMPTED", OFFCPU_PREEMPTED as usize),
            ("OFFCPU_SLEEPING", OFFCPU_SLEEPING as usize),
            ("OFFCPU_BLOCKED", OFFCPU_BLOCKED as usize),
            ("OFFCPU_OTHER", OFFCPU_OTHER as usize),
            ("DROP_EVENTS_FULL", DROP_EVENTS_FULL as usize),
            ("DROP_STACKID", DROP_STACKID as usize),
            ("DROP_STATE_FULL", DROP_STATE_FULL as usize),
        ];
        assert_eq!(c.len(), rust.len(), "the probe printed {text}");
        for (name, value) in rust {
            assert_eq!(c[name], value, "{name} differs between sysprof.h and abi.rs");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn record(kstack: &[u64], ustack: &[u64], comm: &[u8]) -> Vec<u64> {
        // Built in a u64 vector so the bytes are 8-byte aligned like ring records.
        let mut e: SampleEvent = unsafe { std::mem::zeroed() };
        e.kind = RECORD_SAMPLE;
        e.cpu = 1;
        e.time_ns = 42;
        e.pid = 7;
        e.tid = 8;
        e.kstack_len = kstack.len() as u32;
        e.ustack_len = ustack.len() as u32;
        e.comm[..comm.len()].copy_from_slice(comm);
        e.kstack[..kstack.len()].copy_from_slice(kstack);
        e.ustack[..ustack.len()].copy_from_slice(ustack);
        let mut words = vec![0u64; size_of::<SampleEvent>() / 8];
        unsafe {
            std::ptr::copy_nonoverlapping(
                &e as *const SampleEvent as *const u8,
                words.as_mut_ptr() as *mut u8,
                size_of::<SampleEvent>(),
            )
        };
        words
    }

    fn bytes(words: &[u64]) -> &[u8] {
        unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8) }
    }

    /// Check that a sample decodes with its stacks cut to their valid length
    /// and its comm without padding.
    #[test]
    fn decodes_valid_prefix_of_stacks() {
        let w = record(&[0xffff_ffff_8100_0000, 2], &[0x401000], b"worker");
        let s = decode_sample(bytes(&w)).unwrap();
        assert_eq!((s.pid, s.tid, s.cpu, s.time_ns), (7, 8, 1, 42));
        assert_eq!(s.comm, b"worker");
        assert_eq!(s.kstack, &[0xffff_ffff_8100_0000, 2]);
        assert_eq!(s.ustack, &[0x401000]);
    }

    /// Check that lengths larger than the arrays are clamped, not trusted.
    #[test]
    fn clamps_bogus_stack_lengths() {
        let mut w = record(&[], &[], b"x");
        let off = offset_of!(SampleEvent, kstack_len) / 4;
        let as_u32: &mut [u32] =
            unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u32, w.len() * 2) };
        as_u32[off] = 100_000;
        let s = decode_sample(bytes(&w)).unwrap();
        assert_eq!(s.kstack.len(), MAX_STACK_DEPTH);
    }

    /// Check that short and unknown records are errors, not panics.
    #[test]
    fn rejects_short_and_unknown_records() {
        assert_eq!(decode_sample(&[1, 0]), Err(DecodeError::Short { kind: 0, len: 2 }));
        assert_eq!(decode_sample(&[9, 0, 0, 0, 0, 0, 0, 0]), Err(DecodeError::UnknownKind(9)));
        assert_eq!(
            decode_sample(&[1, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::Short { kind: 1, len: 8 })
        );
    }
}
