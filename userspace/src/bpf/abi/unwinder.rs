//! The in-kernel unwinder's part of the ABI: the tables, process entries
//! and runtime descriptions userspace writes into its maps, and the
//! constants its walk and its frame words use (`ebpf/sysprof.h`, checked
//! with the rest by `abi_matches_c_header`).
//!
//! In: nothing (declarations). Out: the `#[repr(C)]` mirrors of
//! `struct unwind_mapping`, `unwind_process`, `unwind_row`,
//! `python_process`, `hotspot_heap`, `hotspot_code`, `v8_frames`, and the
//! `UNWIND_*`, `ROW_*`, `JAVA_*`, `V8_*`, `PY_*` and `HOTSPOT_*` constants.

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

/// `PY_MAX_PROCESSES`
pub const PY_MAX_PROCESSES: u32 = 16384;
/// `PY_MAX_FRAMES`
pub const PY_MAX_FRAMES: usize = 128;
/// `PY_FRAME_READ`
pub const PY_FRAME_READ: u16 = 80;
/// `PY_FRAME_OBJECT_READ`
pub const PY_FRAME_OBJECT_READ: u16 = 112;
/// `PY_WALK_FRAME_OBJECTS`
pub const PY_WALK_FRAME_OBJECTS: u16 = 1;
/// `PY_WALK_PHP`
pub const PY_WALK_PHP: u16 = 2;
/// `PHP_FRAME_READ`
pub const PHP_FRAME_READ: u16 = 64;
/// `PHP_USER_FUNCTION`
pub const PHP_USER_FUNCTION: u8 = 2;
/// `PHP_EVAL_CODE`
pub const PHP_EVAL_CODE: u8 = 4;
/// `PHP_FRAME_EVAL`
pub const PHP_FRAME_EVAL: u64 = 2;
/// `PHP_CALL_TOP`
pub const PHP_CALL_TOP: u32 = 1 << 17;
/// `PY_WALK_PERL`
pub const PY_WALK_PERL: u16 = 4;
/// `PY_WALK_RUBY`
pub const PY_WALK_RUBY: u16 = 8;
/// `PY_WALK_GO`
pub const PY_WALK_GO: u16 = 16;
/// `GO_HMAP_HASH0`
pub const GO_HMAP_HASH0: u64 = 12;
/// `GO_GOROUTINE_MARK`
pub const GO_GOROUTINE_MARK: u64 = 2;
/// `PY_WALK_GO_LABEL_LIST`
pub const PY_WALK_GO_LABEL_LIST: u16 = 32;
/// `GO_LIST_MAX_LABELS`
pub const GO_LIST_MAX_LABELS: u64 = 64;
/// `GO_LIST_PRINT_LABELS`
pub const GO_LIST_PRINT_LABELS: u64 = 2;
/// `RUBY_CFP_READ`
pub const RUBY_CFP_READ: u16 = 40;
/// `RUBY_MAX_MODULE_ID`
pub const RUBY_MAX_MODULE_ID: u64 = 4096;
/// `PERL_CX_SIZE`
pub const PERL_CX_SIZE: u64 = 104;
/// `PERL_CXT_SUB`
pub const PERL_CXT_SUB: u8 = 9;
/// `PERL_CXT_FORMAT`
pub const PERL_CXT_FORMAT: u8 = 10;
/// `PERL_CXT_EVAL`
pub const PERL_CXT_EVAL: u8 = 11;
/// `PERL_CXP_EVALBLOCK`
pub const PERL_CXP_EVALBLOCK: u8 = 0x40;
/// `PERL_CXP_SUB_RE_FAKE`
pub const PERL_CXP_SUB_RE_FAKE: u8 = 0x80;
/// `PERL_CXP_MULTICALL`
pub const PERL_CXP_MULTICALL: u8 = 0x10;
/// `PERL_CXP_TRY`
pub const PERL_CXP_TRY: u8 = 0x80;
/// `PERL_PHASE_RUN`
pub const PERL_PHASE_RUN: u32 = 4;
/// `PERL_LINE_MULTICALL`
pub const PERL_LINE_MULTICALL: u64 = 1 << 35;
/// `PERL_MAX_STACKINFOS`
pub const PERL_MAX_STACKINFOS: u32 = 8;
/// `PERL_FRAME_EVAL`
pub const PERL_FRAME_EVAL: u64 = 2;
/// `PERL_FRAME_MAIN`
pub const PERL_FRAME_MAIN: u64 = 4;
/// `PY_NO_OFFSET`
pub const PY_NO_OFFSET: u16 = 0xffff;
/// `PY_SEGMENT_END`
pub const PY_SEGMENT_END: u64 = 1;
/// `PY_ADDR_BITS`: a frame pair's words hold an address below, half a
/// fingerprint above.
pub const PY_ADDR_BITS: u32 = 48;
/// `PY_CODE_READ`
pub const PY_CODE_READ: u16 = 96;
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
    /// `PyThreadState.native_thread_id`, or `PY_NO_OFFSET` (before 3.11).
    pub tstate_native_tid: u16,
    /// Frame: code object.
    pub frame_code: u16,
    /// Frame: previous frame.
    pub frame_previous: u16,
    /// Frame: instruction pointer.
    pub frame_instr: u16,
    /// Frame: owner, or `PY_NO_OFFSET` (before 3.11).
    pub frame_owner: u16,
    /// Frame: 3.11's is_entry, or `PY_NO_OFFSET`.
    pub frame_is_entry: u16,
    /// Code object: `co_firstlineno` (the fingerprint's fields, each
    /// within `code_read_at..code_read_at + PY_CODE_READ - 8`).
    pub code_firstlineno: u16,
    /// Code object: `co_filename`.
    pub code_filename: u16,
    /// Code object: `co_qualname`.
    pub code_qualname: u16,
    /// Code object: `co_linetable` (`co_lnotab` in 3.8 and 3.9).
    pub code_linetable: u16,
    /// Where the fingerprint's `PY_CODE_READ` bytes are read from.
    pub code_read_at: u16,
    /// `PyThreadState.thread_id` (before 3.11), or `PY_NO_OFFSET`.
    pub tstate_pthread: u16,
    /// `PY_WALK_*`.
    pub flags: u16,
}

// SAFETY: plain old data.
unsafe impl aya::Pod for PythonProcess {}

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

/// `struct exec_record`: a process's last exec, as `exec_times` holds it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecRecord {
    /// Monotonic ns of the exec.
    pub ns: u64,
    /// The real uid it exec'd as.
    pub uid: u32,
    /// Zero.
    pub _pad: u32,
}

// SAFETY: plain old data, every bit pattern valid.
unsafe impl aya::Pod for ExecRecord {}

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
