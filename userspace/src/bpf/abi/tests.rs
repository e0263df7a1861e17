//! The ABI checked against `ebpf/sysprof.h`, and decoding against records
//! that lie about their lengths.
//!
//! In: the header (compiled with the host C compiler) and hand-made records.
//! Out: test results.

use super::*;
use std::mem::{offset_of, size_of};

/// (C expression, Rust value) pairs: every size, offset and constant of the ABI.
macro_rules! abi_items {
    ($( struct $c:ident = $r:ty { $($f:ident),* } )* ; consts { $($k:ident),* }) => {{
        let mut v: Vec<(String, usize)> = Vec::new();
        $(
            v.push((format!("sizeof(struct {})", stringify!($c)), size_of::<$r>()));
            $( v.push((format!("offsetof(struct {}, {})", stringify!($c), stringify!($f)), offset_of!($r, $f))); )*
        )*
        $( v.push((stringify!($k).to_string(), $k as usize)); )*
        v
    }};
}

/// Check that every record and constant has the same size, offsets and
/// values in `ebpf/sysprof.h` (compiled with the host C compiler) as here.
#[test]
fn abi_matches_c_header() {
    let items = abi_items!(
        struct sample_event = SampleEvent { kind, cpu, time_ns, sum_exec_runtime, exec_start, pid, tid, flags, kstack_len, ustack_len,
            stack_size, unwind_end, py_len, py_end, comm, user_ip, user_sp, user_bp, kstack, ustack }
        struct python_process = PythonProcess { tss_addr, version, tsd_offset, tstate_frame, cframe_current, tstate_native_tid,
            frame_code, frame_previous, frame_instr, frame_owner, frame_is_entry, code_firstlineno, code_filename, code_qualname, code_linetable,
            code_read_at, tstate_pthread, flags }
        struct unwind_row = Row { pc, kind, rbp_slot, cfa_off8 }
        struct unwind_mapping = UnwindMapping { start, end, bias, table_start, table_len }
        struct unwind_process = UnwindProcess { count, wake_until_ms, flags, java_interp_start, java_interp_end, java_code, v8, m }
        struct v8_frames = V8Frames { marker_at, function_at, shared_at, name_at }
        struct hotspot_heap = HotSpotHeap { low, end, segmap, log2_segment }
        struct hotspot_code = HotSpotCode { heap, low, end, block_header, frame_size_at, frame_complete_at, code_begin_at, method_at, compile_id_at }
        struct stack_event = StackEvent { kind, flags, id, pid, tid, kstack_len, ustack_len, stack_size, slot, unwind_end, py_len, py_end, user_ip, user_sp,
            user_bp }
        struct offcpu_event = OffCpuEvent { kind, state, start_ns, end_ns, wake_ns, pid, tid, cpu_out, cpu_in, waker_pid,
            waker_tid, stack_id, waker_stack_id, comm, waker_comm, flags, landing_ns }
        struct folded_event = FoldedEvent { kind, pid, tid, delay_ns, first_ns, last_ns, ns, count, wait_ns, waker_pid, waker_tid, waker_kind, landing_ns, stack_id, flags }
        struct thread_end_event = ThreadEndEvent { kind, pid, tid, time_ns, voluntary, involuntary }
        struct blkio_event = IoEvent { kind, dev, sector, start_ns, issue_ns, done_ns, bytes, error, pid, tid, op, flags,
            stack_id, comm }
        struct thread_state = ThreadState { off_ts, voluntary, involuntary, short_ns, short_count, short_first, short_last,
            pid, off_state, off_cpu, off_flags, off_runtime, stack_id, wake_ts, waker_pid, waker_tid, waker_stack_id, waker_comm, short_wait_ns, short_waker_pid, short_waker_tid, short_waker_kind, waker_irq, wake_early, irq_ns, irq_wait_ns, irq_count, queued_ts, short_land_ns, irq_land_ns, short_stack_id, irq_stack_id, cache, has_place_runs }
        struct place_runs = PlaceRuns { pid, r }
        struct place_run = PlaceRun { stack_id, first_ns, last_ns, ns, wait_ns, land_ns, delay_ns, waker_pid, waker_tid, waker_kind, reason, count }
        struct stack_cache = StackCache { ip, sp, bp, id, what, context }
        ;
        consts { TASK_COMM_LEN, MAX_STACK_DEPTH, RECORD_SAMPLE, RECORD_OFFCPU, RECORD_IO, RECORD_STACK, RECORD_FOLDED,
            RECORD_THREAD_END, STACK_SLOT_PREEMPTED, STACK_SLOT_WAITED, STACK_SLOT_CALL, STACK_SLOTS, PLACE_RUNS, FOLDED_BY_PLACE, STACK_SLOT_INTERRUPT, OFFCPU_END_INFERRED, OFFCPU_START_UNSEEN, OFFCPU_WAKER_TASK, OFFCPU_WAKER_IRQ, OFFCPU_PREEMPTED, OFFCPU_SLEEPING, OFFCPU_BLOCKED, OFFCPU_OTHER, OFFCPU_REASONS, FOLD_WAKER_UNSET, FOLD_WAKER_UNSEEN, FOLD_WAKER_TASK, FOLD_WAKER_IRQ, FOLD_WAKER_MIXED,
            SAMPLE_FLAG_KSTACK_FAILED, SAMPLE_FLAG_USTACK_FAILED, SAMPLE_FLAG_USER_REGS, SAMPLE_FLAG_HANDOVER_SKIPPED, STACK_KERNEL_THREAD,
            STACK_USER_REGS, STACK_KSTACK_FAILED, STACK_USTACK_FAILED, STACK_HANDOVER_SKIPPED, STACK_SHARED, STACK_ID_SHARED, STACK_SHARED_MAX, IO_PREFLUSH, IO_FUA, IO_SYNC, IO_META,
            IO_READAHEAD, IO_START_AT_ISSUE, IO_OP_READ, IO_OP_WRITE, IO_OP_FLUSH, IO_OP_DISCARD, IO_OP_SECURE_ERASE,
            IO_OP_WRITE_ZEROES, MAX_STACK_COPY, STACK_COPY_CHUNK, DROP_RINGBUF_FULL, DROP_KSTACK, DROP_USTACK,
            DROP_EVENTS_FULL, DROP_STACK_RECORD, DROP_STATE_FULL, DROP_IO_UNTRACKED, DROP_MAX,
            SAMPLE_FLAG_KERNEL_UNWOUND, SAMPLE_FLAG_LEAF_REGS, STACK_KERNEL_UNWOUND, UNWIND_MAX_FRAMES, UNWIND_MAX_MAPPINGS, UNWIND_TABLE_PENDING, UNWIND_END_ROOT,
            UNWIND_END_NO_PROCESS, UNWIND_END_PENDING, UNWIND_END_BAD_ADDRESS, UNWIND_END_UNSUPPORTED,
            UNWIND_END_READ_FAILED, UNWIND_END_NO_INFO, UNWIND_END_MAX_FRAMES, UNWIND_END_USERSPACE, UNWIND_END_REFUSED, UNWIND_ENDS, UNWIND_PROCESS_CUT, UNWIND_REFUSED_WORDS, UNWIND_TABLE_USERSPACE, JAVA_FRAME_TAG, JAVA_COMPILED_BLOB, JAVA_COMPILE_ID_SHIFT, JAVA_COMPILE_ID_MASK, V8_FRAME_TAG, V8_HEAP_OBJECT_TAG, V8_HEAP_OBJECT_TAG_MASK, ROW_NONE, ROW_CFA_RSP, ROW_CFA_RBP,
            ROW_PLT, ROW_SIGNAL, ROW_END, ROW_UNSUPPORTED, UNWIND_TABLE_HOTSPOT, HOTSPOT_HEAPS, HOTSPOT_HEAPS_ROOM, HOTSPOT_MAX_HOPS, HOTSPOT_MAX_FRAME_WORDS, PY_MAX_PROCESSES, PY_MAX_FRAMES, PY_FRAME_READ, PY_NO_OFFSET,
            PY_SEGMENT_END, PY_ADDR_BITS, PY_CODE_READ, PY_FRAME_OBJECT_READ, PY_WALK_FRAME_OBJECTS, PY_WALK_PHP, PHP_FRAME_READ, PHP_USER_FUNCTION, PHP_EVAL_CODE, PHP_FRAME_EVAL, PHP_CALL_TOP, PY_WALK_PERL, PY_WALK_RUBY, PY_WALK_GO, GO_GOROUTINE_MARK, GO_HMAP_HASH0, PY_WALK_GO_LABEL_LIST, GO_LIST_MAX_LABELS, GO_LIST_PRINT_LABELS, RUBY_CFP_READ, RUBY_MAX_MODULE_ID, PERL_CX_SIZE, PERL_CXT_SUB, PERL_CXT_FORMAT, PERL_CXT_EVAL, PERL_CXP_EVALBLOCK, PERL_CXP_SUB_RE_FAKE, PERL_CXP_MULTICALL, PERL_CXP_TRY, PERL_PHASE_RUN, PERL_LINE_MULTICALL, PERL_MAX_STACKINFOS, PERL_FRAME_EVAL, PERL_FRAME_MAIN, PY_FP_MUL, PY_END_NONE, PY_END_ROOT, PY_END_NO_THREAD, PY_END_READ_FAILED, PY_END_MAX_FRAMES }
    );
    let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/sysprof.h");
    let dir = std::env::temp_dir().join(format!("sysprof-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prints: String = items
        .iter()
        .map(|(c, _)| format!("  printf(\"%zu\\n\", (size_t)({c}));\n"))
        .collect();
    let src = dir.join("abi.c");
    std::fs::write(
        &src,
        format!("#include <stdio.h>\n#include <stddef.h>\n#include <linux/types.h>\n#include \"{header}\"\nint main(void) {{\n{prints}  return 0;\n}}\n"),
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
    let c: Vec<usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(c.len(), items.len());
    let mismatches: Vec<String> = items
        .iter()
        .zip(&c)
        .filter(|((_, r), c)| r != *c)
        .map(|((name, r), c)| format!("{name}: C {c}, Rust {r}"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        mismatches.is_empty(),
        "the ABI drifted:\n{}",
        mismatches.join("\n")
    );
}

/// Check that lengths larger than a record holds are clamped, and short
/// or unknown records are errors, not panics.
#[test]
fn decoding_clamps_and_rejects() {
    #[repr(C, align(8))]
    struct Buf([u8; size_of::<SampleEvent>() + 64]);
    let mut buf = Buf([0; size_of::<SampleEvent>() + 64]);
    let b = &mut buf.0;
    b[0..4].copy_from_slice(&RECORD_SAMPLE.to_ne_bytes());
    let kl = offset_of!(SampleEvent, kstack_len);
    b[kl..kl + 4].copy_from_slice(&1000u32.to_ne_bytes());
    let fl = offset_of!(SampleEvent, flags);
    b[fl..fl + 4].copy_from_slice(&SAMPLE_FLAG_USER_REGS.to_ne_bytes());
    let ss = offset_of!(SampleEvent, stack_size);
    b[ss..ss + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
    let s = decode_sample(b).unwrap();
    assert_eq!(s.kstack.len(), MAX_STACK_DEPTH);
    let UserStack::Copy { stack, .. } = s.user else {
        panic!("a sample with user registers is a stack copy")
    };
    assert_eq!(stack.len(), 64, "stack bytes clamped to the record's tail");
    assert!(matches!(
        decode_sample(&b[..100]),
        Err(DecodeError::Short { .. })
    ));
    b[0..4].copy_from_slice(&99u32.to_ne_bytes());
    assert!(matches!(decode_event(b), Err(DecodeError::UnknownKind(99))));
    assert!(decode_event(&b[..2]).is_err());
}

/// A stack record as the tracer sends it: the header, then `tail` words.
fn stack_record(
    flags: u32,
    ustack_len: u32,
    py_len: u16,
    stack_size: u32,
    kstack_len: u32,
    tail: &[u64],
) -> Vec<u64> {
    let mut e: StackEvent = unsafe { std::mem::zeroed() };
    e.kind = RECORD_STACK;
    e.flags = flags;
    e.ustack_len = ustack_len;
    e.py_len = py_len;
    e.stack_size = stack_size;
    e.kstack_len = kstack_len;
    let mut words = vec![0u64; size_of::<StackEvent>() / 8];
    // SAFETY: words holds exactly size_of::<StackEvent>() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            &e as *const _ as *const u8,
            words.as_mut_ptr() as *mut u8,
            size_of::<StackEvent>(),
        )
    };
    words.extend_from_slice(tail);
    words
}

fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64s viewed as their bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8) }
}

/// Check that a stack record's tail is read in the order the tracer writes
/// it in each mode (user part, then the kernel frames after it), and that
/// lengths past the record are clamped.
#[test]
fn stack_records_carry_only_the_words_they_use() {
    assert_eq!(
        size_of::<StackEvent>(),
        72,
        "the header alone: no fixed frame arrays"
    );
    // Walked in the kernel: 2 user frames, 1 Python pair, 3 kernel frames.
    let r = stack_record(
        STACK_KERNEL_UNWOUND,
        2,
        1,
        0,
        3,
        &[0x10, 0x11, 0x7000, 0x7001, 0xff01, 0xff02, 0xff03],
    );
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    let UserStack::KernelUnwound(k) = v.user else {
        panic!("kernel-unwound")
    };
    assert_eq!(
        (k.frames, k.python, v.kstack),
        (
            &[0x10, 0x11][..],
            &[0x7000, 0x7001][..],
            &[0xff01, 0xff02, 0xff03][..]
        )
    );
    // Frame pointers: 1 user frame, 2 kernel frames.
    let r = stack_record(0, 1, 0, 0, 2, &[0x20, 0xff04, 0xff05]);
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    assert_eq!(
        (v.user.frames(), v.kstack),
        (&[0x20][..], &[0xff04, 0xff05][..])
    );
    // A copy of 12 bytes, padded to 16, then 1 kernel frame.
    let r = stack_record(
        STACK_USER_REGS,
        0,
        0,
        12,
        1,
        &[0x0102030405060708, 0x0000_0000_1112_1314, 0xff06],
    );
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    let UserStack::Copy { stack, .. } = v.user else {
        panic!("a copy")
    };
    assert_eq!((stack.len(), v.kstack), (12, &[0xff06][..]));
    // A walk that handed over: the copy, the kernel frame, then the
    // runtimes' chain (1 pair) it read, handed over with the copy.
    let r = stack_record(
        STACK_KERNEL_UNWOUND | STACK_USER_REGS,
        0,
        1,
        12,
        1,
        &[
            0x0102030405060708,
            0x0000_0000_1112_1314,
            0xff06,
            0x7000,
            0x7001,
        ],
    );
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    let UserStack::KernelUnwound(k) = v.user else {
        panic!("handed over")
    };
    let Some((_, stack)) = k.handover else {
        panic!("with its copy")
    };
    assert_eq!(
        (k.frames.len(), stack.len(), k.python, v.kstack),
        (0, 12, &[0x7000, 0x7001][..], &[0xff06][..])
    );
    // Its chain's length past the record: clamped.
    let r = stack_record(
        STACK_KERNEL_UNWOUND | STACK_USER_REGS,
        0,
        100,
        8,
        1,
        &[0x0102030405060708, 0xff06, 0x7000, 0x7001],
    );
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    let UserStack::KernelUnwound(k) = v.user else {
        panic!("handed over")
    };
    assert_eq!(k.python, &[0x7000, 0x7001][..]);
    // Lengths past the record: clamped, not read beyond it.
    let r = stack_record(0, 1000, 0, 0, 1000, &[0x20, 0xff04]);
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    assert_eq!((v.user.frames().len(), v.kstack.len()), (2, 0));
    let r = stack_record(STACK_USER_REGS, 0, 0, u32::MAX, 5, &[1, 2]);
    let Ok(EventRecord::Stack(_, v)) = decode_event(as_bytes(&r)) else {
        panic!("a stack record")
    };
    assert_eq!(v.kstack.len(), 0);
}

/// Check that each way the in-kernel walk ends means the cut it meant when
/// the collector translated the codes itself (the old table, written out).
#[test]
fn unwind_ends_translate_as_before() {
    use crate::model::stack_end::StackEnd;
    let old = [
        (UNWIND_END_ROOT, StackEnd::Root),
        (UNWIND_END_NO_PROCESS, StackEnd::TablesNotReady),
        (UNWIND_END_PENDING, StackEnd::TablesNotReady),
        (UNWIND_END_BAD_ADDRESS, StackEnd::BadReturnAddress),
        (UNWIND_END_UNSUPPORTED, StackEnd::UnsupportedRule),
        (UNWIND_END_READ_FAILED, StackEnd::Unreadable),
        (UNWIND_END_NO_INFO, StackEnd::NoUnwindInfo),
        (UNWIND_END_MAX_FRAMES, StackEnd::MaxDepth),
        (UNWIND_END_USERSPACE, StackEnd::NoUnwindInfo),
        (UNWIND_END_REFUSED, StackEnd::NoUnwindInfo),
        (99, StackEnd::NoUnwindInfo),
    ];
    for (code, end) in old {
        assert_eq!(StackEnd::from_abi(code), end, "UNWIND_END {code}");
    }
}
