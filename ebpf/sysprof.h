/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sysprof.h: every record the kernel side sends to userspace, and the
 * values of the maps userspace reads. Shared by every ebpf .bpf.c file and
 * mirrored in userspace/src/bpf/abi.rs; the test `abi_matches_c_header`
 * compiles this header with the host C compiler and checks every size and
 * offset, so the two sides cannot drift. Fixed-width types only, no kernel
 * headers.
 *
 * Stacks travel inline in the ring, never through a stack-trace map (whose
 * hash buckets collide and lose stacks under load): a stack is sent once
 * per process and content as a stack_event (STACK_SHARED: its id is a hash
 * of its words, kept by the tracer until userspace says its process is
 * gone), or, past STACK_SHARED_MAX, once per thread and distinct context;
 * the events that need one refer to it by id. Userspace keeps the shared
 * ones by id and the last few others of each thread, which is every stack
 * the kernel side can still refer to.
 */
#ifndef __SYSPROF_H
#define __SYSPROF_H

#define TASK_COMM_LEN 16
/* The kernel's default kernel.perf_event_max_stack. */
#define MAX_STACK_DEPTH 127

/* Record kinds, the first field of every ring buffer record. */
#define RECORD_SAMPLE 1
#define RECORD_OFFCPU 2
#define RECORD_IO 3
#define RECORD_STACK 4
#define RECORD_FOLDED 5
#define RECORD_THREAD_END 6

/* Why a thread left the CPU (offcpu_event.state), folded from its state. */
#define OFFCPU_PREEMPTED 0 /* still runnable: preempted or yielded */
#define OFFCPU_SLEEPING 1  /* TASK_INTERRUPTIBLE */
#define OFFCPU_BLOCKED 2   /* TASK_UNINTERRUPTIBLE: usually I/O */
#define OFFCPU_OTHER 3     /* stopped, traced, parked, idle kernel thread */
#define OFFCPU_REASONS 4

/* sample_event.flags */
#define SAMPLE_FLAG_KSTACK_FAILED 1
#define SAMPLE_FLAG_USTACK_FAILED 2
#define SAMPLE_FLAG_USER_REGS 4   /* user_regs are valid (dwarf mode, user task) */
#define SAMPLE_FLAG_KERNEL_UNWOUND 8 /* ustack_len user frames, unwound in the kernel,
                                        follow the record; unwind_end says why the walk
                                        ended. With SAMPLE_FLAG_USER_REGS too, the walk
                                        handed over to userspace: user_regs are the next
                                        frame's and the stack copy starts
                                        UNWIND_MAX_FRAMES * 8 bytes after the record. */
#define SAMPLE_FLAG_LEAF_REGS 16  /* user_ip/sp/bp are the leaf's (kernel unwinding, no hand-over) */
#define SAMPLE_FLAG_HANDOVER_SKIPPED 32 /* a hand-over sent without its stack copy: the
                                           ring was over half full (the reader behind);
                                           the stack ends where the kernel's walk did */

/* A thread caches one stack per slot (stack_event.slot): where it was
 * last preempted, where it last blocked or slept, where it last woke
 * another thread or started a request. */
#define STACK_SLOT_PREEMPTED 0
#define STACK_SLOT_WAITED 1
#define STACK_SLOT_CALL 2
#define STACK_SLOTS 3
/* A kernel stack read in an interrupt (tid 0), cached per CPU: the low 12
 * bits of its id. */
#define STACK_SLOT_INTERRUPT 3

/* stack_event.flags */
#define STACK_KERNEL_THREAD 1     /* no user part (a kernel thread, or an interrupt) */
#define STACK_USER_REGS 2         /* dwarf mode: user regs and a stack copy follow */
#define STACK_KSTACK_FAILED 4
#define STACK_USTACK_FAILED 8
#define STACK_KERNEL_UNWOUND 16   /* ustack_len user frames, unwound in the kernel,
                                     follow the record; unwind_end says how it ended.
                                     With STACK_USER_REGS: the walk handed over (see
                                     struct stack_event) */
#define STACK_HANDOVER_SKIPPED 32 /* as SAMPLE_FLAG_HANDOVER_SKIPPED: the walk so far,
                                     without a copy, the events ring being over
                                     half full */

#define STACK_SHARED 64           /* sent once for every thread of its process: the tracer
                                     keeps its content's hash (its id) in `stack_ids`, and any
                                     thread of the process that is at the same stack refers to
                                     it by that id; userspace keeps it for as long */
/* A shared stack's id: a hash of its content, with this bit (no sequence id has it). */
#define STACK_ID_SHARED 0x8000000000000000ULL
/* Stacks the tracer keeps shared at most; past that, stacks are sent per place as before. */
#define STACK_SHARED_MAX 32768
/* Preempted stacks remembered as seen once (sched/stacks.bpf.h). */
#define PREEMPTED_SEEN_MAX 16384
/* Places remembered beyond each thread's last (place_ids in sched/places.bpf.h). */
#define PLACE_IDS_MAX 8192
/* Bytes at the top of a user stack that are part of its place. */
#define PLACE_TOP_BYTES 128
/* blkio_event.flags: the request's flags when it was created (REQ_*). */
#define IO_PREFLUSH 1   /* a cache flush before the data (an fsync's empty request has only this) */
#define IO_FUA 2
#define IO_SYNC 4
#define IO_META 8
#define IO_READAHEAD 16
#define IO_START_AT_ISSUE 32 /* created without block_io_start/insert (flushes, direct issue) */

/* blkio_event.op: the kernel's REQ_OP_* */
#define IO_OP_READ 0
#define IO_OP_WRITE 1
#define IO_OP_FLUSH 2
#define IO_OP_DISCARD 3
#define IO_OP_SECURE_ERASE 5
#define IO_OP_WRITE_ZEROES 9

/* Bytes of user stack copied per sample in dwarf mode: at most this much. */
#define MAX_STACK_COPY 32768
/* Copy sizes are multiples of this; the copy is read by halves, to pieces of
 * STACK_COPY_TAIL, and then to the byte where the stack stops being readable
 * (ustack.bpf.h copy_user_stack_max, copy_last_piece). */
#define STACK_COPY_CHUNK 512
#define STACK_COPY_TAIL 64

/* The in-kernel unwinder (unwind.bpf.h): tables compiled by userspace from
 * each binary's .eh_frame, rows of all binaries in one array (`unwind_rows`),
 * per process its executable mappings (`unwind_processes`, key tgid). */
#define UNWIND_MAX_FRAMES 1024
/* The rows array is cut into chunks of this many rows (2 MiB), each its own
 * map in `unwind_rows`, created by userspace when rows first go there: the
 * kernel memory is what the tables take, not the whole budget up front. */
#define UNWIND_CHUNK_SHIFT 18
#define UNWIND_CHUNK_ROWS (1u << UNWIND_CHUNK_SHIFT)
#define UNWIND_MAX_MAPPINGS 256   /* executable mappings per process */
/* unwind_mapping.table_start for a mapping whose table is still being built. */
#define UNWIND_TABLE_PENDING 0xffffffffu
/* ... for code only userspace can walk (JIT code described by a jitdump). */
#define UNWIND_TABLE_USERSPACE 0xfffffffeu
/* ... for a JVM's code heap (java_code.heap[the mapping's bias]): frames
 * walked by their code blobs' own frame sizes. */
#define UNWIND_TABLE_HOTSPOT 0xfffffffdu
/* unwind_process.flags: the process has more executable mappings than an
 * entry holds (those cut are its smallest): an address in no listed
 * mapping may be code, and the walk hands over to userspace there. */
#define UNWIND_PROCESS_CUT 1
/* An interpreted Java frame (a frame whose address lies in the process's
 * java_interp range) is three words in the frame array: its address, then
 * JAVA_FRAME_TAG | the Method* it runs, then its bytecode pointer; read at
 * fp + 8 * JAVA_FRAME_METHOD_SLOT and fp + 8 * JAVA_FRAME_BCP_SLOT (HotSpot's
 * x86_64 interpreter frame: frame::interpreter_frame_method_offset -3,
 * interpreter_frame_bcp_offset -8, JDK 8 to 26). No user address has bit 61. */
#define JAVA_FRAME_TAG 0x2000000000000000ULL
/* A compiled Java frame (in a HotSpot code blob with a frame) is three
 * words too: its address, JAVA_FRAME_TAG | the Method* its nmethod runs
 * (CompiledMethod::_method, read at sample time: the JVM reuses code
 * addresses), then JAVA_COMPILED_BLOB | the blob's address | its
 * nmethod's compile id's low 14 bits << JAVA_COMPILE_ID_SHIFT (so that
 * what userspace reads of the blob later is known to be that nmethod's). */
#define JAVA_COMPILED_BLOB 0x4000000000000000ULL
#define JAVA_COMPILE_ID_SHIFT 47
#define JAVA_COMPILE_ID_MASK 0x3fffULL
#define JAVA_FRAME_METHOD_SLOT -3
#define JAVA_FRAME_BCP_SLOT -8
/* ... and the caller's stack pointer before the interpreter or an adapter
 * extended it (frame::interpreter_frame_sender_sp_offset -1): a compiled
 * caller's frame begins there, not right above the interpreter frame. */
#define JAVA_FRAME_SENDER_SP_SLOT -1
/* A JavaScript frame of V8 (a frame walked by frame pointer, in code
 * without unwind rows, whose context slot holds a heap object) is four
 * words: its address, V8_FRAME_TAG | its function's SharedFunctionInfo
 * (a tagged pointer), then that object's name-or-scope-info word, read at
 * the sample: V8 moves and frees objects, and userspace names the frame
 * only if what it reads there later is the same; then the JSFunction
 * (a tagged pointer), whose optimized code tells userspace what was
 * inlined at the frame's address. No user address has bits 61 and 62,
 * and JAVA_FRAME_TAG's third word never has bit 61. */
#define V8_FRAME_TAG 0x6000000000000000ULL
#define V8_HEAP_OBJECT_TAG 1ULL   /* V8's tagged pointers: (word & 3) == 1 */
#define V8_HEAP_OBJECT_TAG_MASK 3ULL
/* Words of `unwind_refused`, one bit per pid up to the kernel's
 * PID_MAX_LIMIT (4194304): no number of processes can fill it. */
#define UNWIND_REFUSED_WORDS 65536

/* unwind_row.kind, as userspace/src/unwind/tables.rs compiles them */
#define ROW_NONE 0        /* no rule: try the frame pointer */
#define ROW_CFA_RSP 1     /* CFA = rsp + 8 * cfa_off8 */
#define ROW_CFA_RBP 2     /* CFA = rbp + 8 * cfa_off8 */
#define ROW_PLT 3         /* CFA = rsp + 8, + 8 if (rip & 15) >= rbp_slot */
#define ROW_SIGNAL 4      /* a signal trampoline: registers in the ucontext at rsp */
#define ROW_END 5         /* return address undefined: the thread's outermost frame */
#define ROW_UNSUPPORTED 6 /* a rule no row expresses */

/* sample_event.unwind_end: how the in-kernel walk ended */
#define UNWIND_END_ROOT 0         /* the outermost frame (or a zero return address) */
#define UNWIND_END_NO_PROCESS 1   /* no tables for the process yet (it just started) */
#define UNWIND_END_PENDING 2      /* the table of a mapping is still being built */
#define UNWIND_END_BAD_ADDRESS 3  /* a return address outside every executable mapping */
#define UNWIND_END_UNSUPPORTED 4  /* a rule the tables cannot express */
#define UNWIND_END_READ_FAILED 5  /* the stack could not be read (not resident) */
#define UNWIND_END_NO_INFO 6      /* no rule and no usable frame pointer */
#define UNWIND_END_MAX_FRAMES 7   /* UNWIND_MAX_FRAMES reached */
#define UNWIND_END_USERSPACE 8    /* code only userspace can walk: handed over */
#define UNWIND_END_REFUSED 9      /* no entry: its user's share of the process map was full
                                     (or it was evicted for another's): handed over */
#define UNWIND_ENDS 10

struct unwind_row {
	__u32 pc;               /* the file's virtual address the row starts at */
	__u8 kind;              /* ROW_* in bits 0-2; bits 3-7: cfa_off8's bits 16-20 */
	__u8 rbp_slot;          /* caller's rbp saved at CFA - 8 * rbp_slot; 0: unchanged */
	__u16 cfa_off8;
};

struct unwind_mapping {
	__u64 start;            /* executable mapping, process addresses */
	__u64 end;
	__u64 bias;             /* process address - file address */
	__u32 table_start;      /* first row in unwind_rows; UNWIND_TABLE_PENDING, _USERSPACE */
	__u32 table_len;        /* rows; 0: no table (frame pointers only) */
};

/* HotSpot's code cache, for walking compiled frames by their blob's own
 * frame size (read at the sample, so a method compiled a moment ago, or
 * freed and its place reused, is walked as it is now): up to
 * HOTSPOT_HEAPS code heaps (non-nmethods, profiled, non-profiled), each
 * with its segment map (a byte per segment: 0 at a block's first, else how
 * many segments back to hop, 0xff free), and where the fields of a
 * CodeBlob are, from the JVM's own vmStructs tables. */
#define HOTSPOT_HEAPS 3
#define HOTSPOT_HEAPS_ROOM 4      /* heap[] entries: a power of two, for the verifier */
#define HOTSPOT_MAX_HOPS 64       /* segment-map hops to a block's start */
#define HOTSPOT_MAX_FRAME_WORDS 65536

struct hotspot_heap {
	__u64 low;              /* the heap's reserved range, [low, end); 0: none */
	__u64 end;
	__u64 segmap;           /* its segment map's first byte */
	__u32 log2_segment;     /* segment size, log2 */
	__u32 _pad;
};

struct hotspot_code {
	struct hotspot_heap heap[HOTSPOT_HEAPS_ROOM]; /* the last one unused */
	__u64 low;               /* the heaps' union, [low, end) */
	__u64 end;
	__u16 block_header;      /* sizeof(HeapBlock): the blob follows */
	__u16 frame_size_at;     /* CodeBlob::_frame_size (int, words, return address included) */
	__u16 frame_complete_at; /* CodeBlob::_frame_complete_offset (int, bytes after code begin) */
	__u16 code_begin_at;     /* CodeBlob::_code_begin (address) */
	__u16 method_at;         /* CompiledMethod::_method (Method*); 0: not read */
	__u16 compile_id_at;     /* nmethod::_compile_id (int); 0: not read */
	__u16 _pad[2];
};

/* Where a V8 frame and objects keep what the walker reads (the v8dbg_
 * constants of the process's binary, read by userspace): offsets from the
 * frame pointer, and within a JSFunction and a SharedFunctionInfo
 * (from the object's address, tag removed). function_at 0: not V8. */
struct v8_frames {
	__s32 marker_at;        /* v8dbg_off_fp_context_or_frame_type: -8 */
	__s32 function_at;      /* v8dbg_off_fp_function: -16 */
	__u32 shared_at;        /* JSFunction::shared */
	__u32 name_at;          /* SharedFunctionInfo::name_or_scope_info */
};

/* A process's last exec (sample.bpf.c's exec_times). */
struct exec_record {
	__u64 ns;               /* bpf_ktime_get_ns() at the exec */
	__u32 uid;              /* its real uid then */
	__u32 _pad;
};

struct unwind_process {
	__u32 count;            /* mappings, sorted by start */
	__u32 wake_until_ms;    /* bpf_ktime_get_ns() / 1e6 (truncated) until which a walk
	                           that hands over wakes the reader: the entry was just
	                           written, libraries may be mapped since */
	__u32 flags;            /* UNWIND_PROCESS_CUT */
	__u32 _pad;
	__u64 java_interp_start; /* HotSpot's template interpreter, [start, end); 0: none */
	__u64 java_interp_end;
	struct hotspot_code java_code; /* heap[0].low 0: not a JVM, or not read */
	struct v8_frames v8;
	struct unwind_mapping m[UNWIND_MAX_MAPPINGS];
};

/* CPython frames (runtimes/python.bpf.h): pairs {code object | PY_SEGMENT_END,
 * instruction pointer} after a sample's native frames, leaf first. Each
 * word's top 16 bits (above every user address) carry half of the code
 * object's fingerprint (PY_FP_*), read with it: userspace names a code
 * object only if what it reads later has the same, so a freed object whose
 * address another reuses never lends its name. */
#define PY_MAX_PROCESSES 16384
#define PY_MAX_FRAMES 128         /* per sample */
#define PY_FRAME_READ 80          /* bytes of a _PyInterpreterFrame (3.11+) read at once */
#define PY_FRAME_OBJECT_READ 112  /* bytes of a PyFrameObject (3.8-3.10) read at once */
#define PY_NO_OFFSET 0xffff
#define PY_OWNED_BY_CSTACK 3      /* 3.12+: the shim frame a C-level eval call starts with (3.12, 3.13:
				   * FRAME_OWNED_BY_CSTACK; 3.14 renumbers, CSTACK is 4, and gives the
				   * shim the new FRAME_OWNED_BY_INTERPRETER, 3) */
#define PY_TAG_BITS 7ULL          /* low bits of f_executable that are no address: 3.14's _PyStackRef
				   * tags (Py_TAG_BITS, 3 in a default build); a code object is aligned */
#define PY_SEGMENT_END 1          /* in the code word: the last frame of one C-level eval call */
#define PY_ADDR_BITS 48           /* of each word: the address; above: the fingerprint's half */
#define PY_CODE_READ 96           /* the code object's bytes read for its fingerprint, from code_read_at */
#define PY_WALK_FRAME_OBJECTS 1   /* python_process.flags: 3.8-3.10's heap frames (PyFrameObject):
				   * each run by a C-level eval call of its own, the
				   * instruction an int (f_lasti), no owner byte */
#define PY_WALK_PHP 2             /* python_process.flags: a PHP process (runtimes/php.bpf.h) */
#define PHP_FRAME_READ 64         /* bytes of a zend_execute_data read at once */
#define PHP_USER_FUNCTION 2       /* zend_function.type of a PHP function (1: internal) */
#define PHP_EVAL_CODE 4           /* ... of eval()'s code */
#define PHP_CALL_TOP (1 << 17)    /* ZEND_CALL_TOP: a frame the VM was entered for from C */
#define PHP_FRAME_EVAL 2          /* in the code word: eval()'s code (freed once run: named so) */
#define PY_WALK_PERL 4            /* python_process.flags: a Perl process (runtimes/perl.bpf.h) */
#define PERL_CX_SIZE 104          /* a PERL_CONTEXT's bytes (5.36), all read at once */
#define PERL_CXT_SUB 9            /* PERL_CONTEXT.cx_type & 0xf: a sub's call */
#define PERL_CXT_FORMAT 10        /* ... a format's (called as a sub is) */
#define PERL_CXT_EVAL 11          /* ... an eval (string or block) or a require */
#define PERL_CXP_EVALBLOCK 0x40   /* cx_type of an eval's: eval {} (or try, or call_sv's own) */
#define PERL_CXP_SUB_RE_FAKE 0x80 /* cx_type of a sub's: the stand-in of a regex code block */
#define PERL_CXP_MULTICALL 0x10   /* cx_type of a sub's: called again and again by a C loop */
#define PERL_CXP_TRY 0x80         /* cx_type of an eval's: a try block */
#define PERL_PHASE_RUN 4          /* the interpreter's Iphase running the program */
#define PERL_LINE_MULTICALL (1ULL << 35) /* in a Perl sub's line word: a MULTICALL sub */
#define PERL_MAX_STACKINFOS 8     /* nested run loops (sort blocks, handlers, DESTROY) followed */
#define PERL_FRAME_EVAL 2         /* in the code word: an eval's or require's code, named by its file */
#define PERL_FRAME_MAIN 4         /* in the code word: the main program, named by its file */
#define PY_WALK_RUBY 8            /* python_process.flags: a Ruby process (runtimes/ruby.bpf.h) */
#define RUBY_CFP_READ 40          /* bytes of an rb_control_frame_t read at once (pc .. ep) */
#define RUBY_FRAME_MAGIC_MASK 0x7fff0001ULL  /* ep[0]: the frame's type */
#define RUBY_FRAME_MAGIC_DUMMY 0x79990001ULL /* ... a thread's bottom frame, running nothing */
#define RUBY_FRAME_FLAG_FINISH 0x20ULL       /* ep[0]: the first frame a C-level vm_exec ran */
#define RUBY_FRAME_FLAG_CFRAME 0x80ULL       /* ep[0]: a C method's or C block's frame */
#define RUBY_MAX_MODULE_ID 4096   /* a TLS module id above is no glibc's */
#define PY_WALK_GO 16             /* python_process.flags: a Go program (runtimes/go.bpf.h) */
#define GO_GOROUTINE_MARK 2       /* in the code word of a pair whose address is 0: the instruction word is a goroutine id */
#define GO_HMAP_HASH0 12          /* runtime.hmap.hash0's offset (Go 1.0-1.23: count, flags, B, noverflow before it) */
#define PY_WALK_GO_LABEL_LIST 32  /* python_process.flags with PY_WALK_GO: labels are a sorted list (Go 1.24+:
				   * labelMap{Set{List []Label{Key, Value string}}}), not a map */
#define GO_LIST_MAX_LABELS 64     /* a label list longer is no pprof user's (userspace: MAX_LABELS) */
#define GO_LIST_PRINT_LABELS 2    /* the labels whose words a list's fingerprint folds in (userspace: the same) */
#define PY_FP_MUL 0x9e3779b97f4a7c15ULL /* the fingerprint's multiplier (userspace: the same) */
/* sample_event.py_end: how the Python walk ended */
#define PY_END_NONE 0             /* not a Python process (py_len is 0) */
#define PY_END_ROOT 1             /* the thread's first frame */
#define PY_END_NO_THREAD 2        /* the thread has no Python state (not a Python thread) */
#define PY_END_READ_FAILED 3      /* a frame could not be read */
#define PY_END_MAX_FRAMES 4       /* PY_MAX_FRAMES, or the frame array, reached */

/* Where a CPython process keeps each thread's state and the layout of its
 * frames: written by userspace from the interpreter's binary and version.
 * With PY_WALK_PHP, a PHP process's executor and layout instead, in the
 * fields runtimes/php.bpf.h names; PY_WALK_PERL, PY_WALK_RUBY and PY_WALK_GO
 * likewise (perl.bpf.h, ruby.bpf.h, go.bpf.h). */
struct python_process {
	__u64 tss_addr;         /* &_PyRuntime's autoTSSkey (Py_tss_t {int init; int key}) */
	__u32 version;          /* PY_VERSION_HEX >> 16 (0x030b for 3.11) */
	__u16 tsd_offset;       /* glibc: struct pthread's specific_1stblock, from fsbase */
	__u16 tstate_frame;     /* PyThreadState: cframe (3.11, 3.12) or current_frame */
	__u16 cframe_current;   /* _PyCFrame.current_frame; PY_NO_OFFSET without a cframe */
	__u16 tstate_native_tid;/* PyThreadState.native_thread_id; PY_NO_OFFSET before 3.11 */
	__u16 frame_code;       /* _PyInterpreterFrame: f_code / f_executable */
	__u16 frame_previous;
	__u16 frame_instr;      /* prev_instr / instr_ptr; 3.8-3.10: f_lasti */
	__u16 frame_owner;      /* PY_NO_OFFSET before 3.11 */
	__u16 frame_is_entry;   /* 3.11's is_entry; PY_NO_OFFSET after */
	/* PyCodeObject fields the fingerprint is made of (immutable while the
	 * object lives), each within [code_read_at, +PY_CODE_READ - 8] */
	__u16 code_firstlineno; /* an int */
	__u16 code_filename;
	__u16 code_qualname;    /* co_name before 3.11 */
	__u16 code_linetable;   /* co_lnotab in 3.8 and 3.9 */
	__u16 code_read_at;     /* where the fingerprint's PY_CODE_READ bytes start */
	__u16 tstate_pthread;   /* PyThreadState.thread_id (pthread_self: fsbase), the thread's
				 * check before 3.11; PY_NO_OFFSET after */
	__u16 flags;            /* PY_WALK_* */
};

/* Indexes into the per-CPU `drops` array: why a record or part of it was lost. */
#define DROP_RINGBUF_FULL 0   /* bpf_ringbuf_reserve failed: the whole sample is lost */
#define DROP_KSTACK 1         /* reading a kernel stack failed: kept without it */
#define DROP_USTACK 2         /* reading a user stack failed: kept without it */
#define DROP_EVENTS_FULL 3    /* off-CPU, I/O or folded record lost: events ring full */
#define DROP_STACK_RECORD 4   /* a stack record lost (events ring full): events keep no stack */
#define DROP_STATE_FULL 5     /* a state map was full: that thread or request is not seen */
#define DROP_IO_UNTRACKED 6   /* a request seen at one end only: completed with no start seen, or its completion never seen */
#define DROP_MAX 7

/* One cpu-clock sample: who ran, where, and how much CPU it had used so far. */
struct sample_event {
	__u32 kind;             /* RECORD_SAMPLE */
	__u32 cpu;
	__u64 time_ns;          /* CLOCK_MONOTONIC, bpf_ktime_get_ns() */
	__u64 sum_exec_runtime; /* task->se.sum_exec_runtime, ns */
	__u64 exec_start;       /* task->se.exec_start: when the scheduler last brought
	                           sum_exec_runtime up to date (a tick, a switch), on its
	                           own clock: userspace adds the time since, so a
	                           thread's CPU time is exact between samples, not
	                           stale by up to a tick */
	__u32 pid;              /* tgid */
	__u32 tid;
	__u32 flags;            /* SAMPLE_FLAG_* */
	__u32 kstack_len;       /* number of valid entries in kstack */
	__u32 ustack_len;       /* number of valid entries in ustack (frame-pointer walk) */
	__u32 stack_size;       /* dwarf mode: bytes of user stack copied after the record */
	__u32 unwind_end;       /* SAMPLE_FLAG_KERNEL_UNWOUND: UNWIND_END_* */
	__u16 py_len;           /* CPython frame pairs after the ustack_len frames */
	__u16 py_end;           /* PY_END_* */
	__u8 comm[TASK_COMM_LEN];
	__u64 user_ip;          /* dwarf mode: user registers at the sample */
	__u64 user_sp;          /* (for a sample in the kernel: where it entered) */
	__u64 user_bp;
	__u64 kstack[MAX_STACK_DEPTH];
	__u64 ustack[MAX_STACK_DEPTH];
	/* dwarf mode: followed by the reserved copy size of user stack bytes
	 * starting at user_sp, of which stack_size are valid. */
};

/* The kernel and user stacks of a thread at one place: where it left the
 * CPU, where it woke another thread, where it started a block request.
 * Sent once per distinct place (the thread's state caches the last one);
 * events refer to it by (tid, id). The kernel stack is read in the tracing
 * context, so its leaf frames are the tracepoint's and ours: userspace cuts
 * them.
 *
 * The record is this header and only the words it uses (a switch-heavy
 * server sends tens of thousands a second: with fixed arrays of 127 kernel
 * and 127 user frames each record was 2 KiB, most of it zeros), in order:
 *   STACK_KERNEL_UNWOUND: ustack_len user frames, py_len Python pairs
 *     (2 words each), then kstack_len kernel frames;
 *   STACK_USER_REGS (a copy): stack_size bytes of user stack, padded to 8,
 *     then kstack_len kernel frames;
 *   both (the walk handed over: ustack_len is 0, userspace unwinds the copy
 *     from the leaf): the copy, padded to 8, kstack_len kernel frames, then
 *     py_len pairs of the runtimes' chain the walk read;
 *   otherwise: ustack_len user frames (frame pointers), then kstack_len
 *     kernel frames. */
struct stack_event {
	__u32 kind;             /* RECORD_STACK */
	__u32 flags;            /* STACK_* */
	__u64 id;               /* per-CPU sequence << 12 | cpu; never 0 */
	__u32 pid;
	__u32 tid;
	__u32 kstack_len;       /* kernel frames after the user part */
	__u32 ustack_len;       /* user frames (frame pointers, or walked in the kernel) */
	__u32 stack_size;       /* dwarf mode: valid bytes of the copy after the record */
	__u32 slot;             /* STACK_SLOT_*: which of the thread's cached stacks it replaces */
	__u32 unwind_end;       /* STACK_KERNEL_UNWOUND: UNWIND_END_* */
	__u16 py_len;           /* CPython frame pairs after the ustack_len frames */
	__u16 py_end;           /* PY_END_* */
	__u64 user_ip;          /* user registers (where the thread entered the kernel) */
	__u64 user_sp;
	__u64 user_bp;
};

/* offcpu_event.flags */
#define OFFCPU_END_INFERRED 1 /* its switch back in was not traced (some kernels hide
                                 some tasks from tracepoints): the end comes from
                                 its CPU time when it next left the CPU */
#define OFFCPU_START_UNSEEN 2 /* it left the CPU before it was first seen (before
                                 tracing began, or it is new): start_ns is when
                                 the task was created, userspace clips it to the
                                 range */
#define OFFCPU_WAKER_TASK 4   /* its waker ran in task context (the tracer's own
                                 judgment, from where the wakeup ran: for when
                                 there is no waker stack to tell) */
#define OFFCPU_WAKER_IRQ 8    /* its waker was an interrupt */

/* One off-CPU interval of a thread, sent when it runs again if it lasted at
 * least offcpu_min_ns (and, for a wait, fold_same_max_ns, or no run of its
 * place took it); shorter ones are summed per reason in folded_event. */
struct offcpu_event {
	__u32 kind;             /* RECORD_OFFCPU */
	__u32 state;            /* OFFCPU_* */
	__u64 start_ns;         /* switched out */
	__u64 end_ns;           /* switched in again */
	__u64 wake_ns;          /* woken up (sched_waking); 0 if no wakeup was seen (preempted) */
	__u32 pid;
	__u32 tid;
	__u32 cpu_out;
	__u32 cpu_in;
	__u32 waker_pid;
	__u32 waker_tid;
	__u64 stack_id;         /* stack_event of tid where it left the CPU; 0: none */
	__u64 waker_stack_id;   /* stack_event of waker_tid at the wakeup; 0: none */
	__u8 comm[TASK_COMM_LEN];
	__u8 waker_comm[TASK_COMM_LEN];
	__u32 flags;            /* OFFCPU_END_INFERRED, OFFCPU_START_UNSEEN */
	__u32 landing_ns;       /* from wake_ns to its enqueue (sched_wakeup), when both were seen:
	                           the wakeup on its way to the wakee's CPU (see thread_state's
	                           queued_ts); runnable only from then on. Capped at 2^32-1. */
};

/* Who ended the (non-preempted) waits of a folded run. */
#define FOLD_WAKER_UNSET 0  /* only preemptions were folded: no waker */
#define FOLD_WAKER_UNSEEN 1 /* waits whose wakeup was not seen */
#define FOLD_WAKER_TASK 2   /* waker_pid/waker_tid woke each of them */
#define FOLD_WAKER_IRQ 3    /* interrupts woke them (timers, devices) */
#define FOLD_WAKER_MIXED 4  /* several wakers, none with enough time for a run of its own */

/* Off-CPU intervals shorter than offcpu_min_ns of one thread (or, with
 * FOLDED_BY_PLACE, its waits of one place, waker and reason up to
 * fold_same_max_ns: struct place_run), summed per
 * reason (OFFCPU_*), sent once they add up to fold_flush_ns (and at the
 * thread's end); the rest is read from the thread's state at the end. A
 * run holds the waits of one waker: a wait woken by another sends the run
 * first once its waited time reaches fold_waker_min_ns (else the run is
 * FOLD_WAKER_MIXED), so a thread in short round trips with one peer is
 * charged to that peer. */
struct folded_event {
	__u32 kind;             /* RECORD_FOLDED */
	__u32 pid;
	__u32 tid;
	__u32 delay_ns;         /* of the rest of ns, the run delays (enqueue to running) of waits whose own
	                           was at least run_delay_apart_ns: drawn apart, as a wait sent alone's is.
	                           A run of one place's waits (struct place_run) only; capped at 2^32-1 */
	__u64 first_ns;         /* start of the first folded interval */
	__u64 last_ns;          /* end of the last one */
	__u64 ns[OFFCPU_REASONS];
	__u32 count[OFFCPU_REASONS];
	__u64 wait_ns;          /* of the non-preempted waits, the time before their wakeup (the rest of ns was runnable) */
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 waker_kind;       /* FOLD_WAKER_* */
	__u32 landing_ns;       /* of the rest of ns, the time from their wakeups to their enqueues
	                           (see offcpu_event); capped at 2^32-1 */
	__u64 stack_id;         /* stack_event of tid where its waits (not its preemptions) left the
	                           CPU, when they all left from one place; 0: several, or none */
	__u32 flags;            /* FOLDED_BY_PLACE */
	__u32 _pad;
};

/* folded_event.flags: a run of waits from offcpu_min_ns up to fold_same_max_ns
 * of one place, waker and reason (struct place_run), not of fold_short: its
 * waits are a thread's "longer" short waits, summed with the others of their
 * waker by userspace, as those sent alone are. */
#define FOLDED_BY_PLACE 1

/* A thread's last switch: its context switch totals. Its state is then
 * deleted from the map. */
struct thread_end_event {
	__u32 kind;             /* RECORD_THREAD_END */
	__u32 pid;
	__u32 tid;
	__u32 _pad;
	__u64 time_ns;
	__u64 voluntary;
	__u64 involuntary;
};

/* One block I/O request, sent when it completes, attributed to the task
 * that created it (or, for requests created at issue, to the issuer). */
struct blkio_event {
	__u32 kind;             /* RECORD_IO */
	__u32 dev;              /* kernel dev_t of the disk: major << 20 | minor */
	__u64 sector;
	__u64 start_ns;         /* request created (block_io_start / block_rq_insert / issue) */
	__u64 issue_ns;         /* sent to the device; 0 if never (an fsync's empty request) */
	__u64 done_ns;          /* completed */
	__u32 bytes;
	__s32 error;            /* non-zero: failed (errno or blk_status_t) */
	__u32 pid;
	__u32 tid;
	__u32 op;               /* IO_OP_* (the kernel's REQ_OP_*) */
	__u32 flags;            /* IO_* */
	__u64 stack_id;         /* stack_event of tid where it was created; 0: none */
	__u8 comm[TASK_COMM_LEN];
};

/* Per-thread scheduler state and totals (map `threads`, key tid): where it
 * is off-CPU right now, its switch counts and folded short waits. Read at
 * the end for the totals and for intervals still open when recording stops. */
/* Runs of waits a thread keeps apart by place and waker (struct place_run):
 * each of pgbench's threads waits for four backends in turn. */
#define PLACE_RUNS 4

/* A run of a thread's waits from offcpu_min_ns up to fold_same_max_ns, of
 * one place, waker and reason (fold_by_place): a slot is free while count
 * is 0. */
struct place_run {
	__u64 stack_id;         /* where they left the CPU */
	__u64 first_ns;         /* start of the first */
	__u64 last_ns;          /* end of the last */
	__u64 ns;               /* off-CPU time */
	__u64 wait_ns;          /* of it, before their wakeups */
	__u64 land_ns;          /* from their wakeups to their enqueues */
	__u64 delay_ns;         /* run delays of at least run_delay_apart_ns each */
	__u32 waker_pid;
	__u32 waker_tid;        /* FOLD_WAKER_TASK */
	__u32 waker_kind;       /* FOLD_WAKER_TASK, _IRQ or _UNSEEN */
	__u32 reason;           /* OFFCPU_SLEEPING, _BLOCKED or _OTHER */
	__u32 count;
	__u32 _pad;
};

/* A thread's place runs: the value of `place_runs` (sched/state.bpf.h),
 * apart from struct thread_state so that only `record`, which sums such
 * waits, holds their memory (328 bytes a thread). */
struct place_runs {
	__u32 pid;              /* the thread's process */
	__u32 _pad;
	struct place_run r[PLACE_RUNS];
};

struct thread_state {
	__u64 off_ts;           /* switched out at; 0 while running */
	__u64 voluntary;        /* switches while blocking or sleeping */
	__u64 involuntary;      /* switches while runnable (preempted) */
	__u64 short_ns[OFFCPU_REASONS];    /* folded intervals not sent yet */
	__u32 short_count[OFFCPU_REASONS];
	__u64 short_first;      /* start of the first of them */
	__u64 short_last;       /* end of the last */
	__u32 pid;
	__u32 off_state;        /* OFFCPU_* of the open interval */
	__u32 off_cpu;          /* CPU it left */
	__u32 off_flags;        /* OFFCPU_START_UNSEEN for the open interval;
				 * OFFCPU_END_INFERRED set as it is closed */
	__u64 off_runtime;      /* its CPU time (sum_exec_runtime) when it left */
	__u64 stack_id;         /* stack_event where it left the CPU */
	/* The last wakeup while off-CPU (sched_waking); wake_ts is written last. */
	__u64 wake_ts;
	__u32 waker_pid;
	__u32 waker_tid;
	__u64 waker_stack_id;
	__u8 waker_comm[TASK_COMM_LEN];
	/* The folded run's waker (FOLD_WAKER_*, see folded_event) and waited time. */
	__u64 short_wait_ns;
	__u32 short_waker_pid;
	__u32 short_waker_tid;
	__u32 short_waker_kind;
	__u32 waker_irq;        /* the last wakeup came from an interrupt */
	__u32 wake_early;       /* the last wakeup came before its switch-out (see on_sched_waking) */
	__u32 has_place_runs;   /* it has an entry in `place_runs` (sched/state.bpf.h) */
	/* The folded run's waits an interrupt woke (a device's completion, a
	 * timer), sleeping [0] and blocked [1]: summed apart from its other
	 * waits, sent as a run of their own over the same span, so they keep
	 * their waker whoever else woke the thread between them (a server's
	 * fdatasyncs, between requests its client wakes it for, were "several
	 * wakers"). */
	__u64 irq_ns[2];
	__u64 irq_wait_ns;
	__u32 irq_count[2];
	/* When the last wakeup put it on a run queue (sched_wakeup): from
	 * then on it is runnable, as the kernel's run delay counts it. A
	 * wakeup sent to another CPU lands there after sched_waking: on this
	 * VM 30-70 us later when that CPU was idle. */
	__u64 queued_ts;
	__u64 short_land_ns;    /* the folded run's landing times (see folded_event) */
	__u64 irq_land_ns;      /* the interrupts' run's */
	__u64 short_stack_id;   /* the folded run's place (see folded_event's stack_id) */
	__u64 irq_stack_id;     /* the interrupts' run's */
	/* Kernel-private: per slot, the user context and what it was (the
	 * off-CPU state, or 1 for a wakeup and 2 for a request) of the last
	 * stack sent, reused when it happens again from the same place. */
	struct stack_cache {
		__u64 ip;
		__u64 sp;
		__u64 bp;
		__u64 id;
		__u32 what;
		__u32 _pad;
		__u64 context;  /* a hash of what tells places with the same registers apart: the
		                   Python frame chain, the JVM's interpreter, the top of the user
		                   stack (PLACE_TOP_BYTES); 0 for a kernel thread */
	} cache[STACK_SLOTS];
};

#endif /* __SYSPROF_H */
