//! What a CPython interpreter binary is: its version, where `_PyRuntime`
//! and the eval loop are, and the layout of the structures the kernel walks
//! and userspace reads for each version this build knows.
//!
//! In: an [`ElfReader`] over a mapped file (read as an attacker wrote it:
//! symbol tables within the section limit, the version word through the
//! load segments). Out: a [`PythonBinary`] for a CPython 3.8 to 3.14
//! interpreter (the executable itself, as Debian's `/usr/bin/python3.11`,
//! or `libpythonX.Y.so`, as pyenv's `--enable-shared` builds), an error
//! that names the version for another CPython, nothing for other files.
//!
//! The version: 3.11+ say it (`Py_Version`); 3.8 to 3.10 by the C API
//! each added, which every build exports (`PyCode_NewWithPosOnlyArgs` 3.8,
//! `PyFrame_GetCode` 3.9, `PyAIter_Check` 3.10).
//!
//! The offsets are CPython's own structure layouts for x86_64 default (GIL)
//! builds, per minor version, checked against the interpreters on this
//! machine (3.8.18, 3.9.18, 3.10.13, 3.11.2, 3.11.7, 3.12.1, 3.13.0) with
//! ctypes reading their own memory (`tests/oracles/python_layout.py` for 3.8-3.10);
//! 3.14's from `offsetof` on Debian sid's libpython3.14-dev 3.14.10 headers
//! (`Py_BUILD_CORE`), run against that build. A patch release keeps them
//! (CPython freezes a minor version's internal layout once it is
//! released). 3.13 and 3.14 also publish them (`_Py_DebugOffsets` at the
//! start of `_PyRuntime`): a file's are checked against the table as it is
//! read ([`super::debug_offsets`]), so a free-threaded build or one laid
//! out otherwise is refused, not misread.

use crate::binaries::elf::{vaddr_to_offset, ElfReader};

/// How a frame says which instruction it runs.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Instr {
    /// 3.11+: a pointer into the code object's bytecode, which starts
    /// `PyLayout::code_bytecode` bytes into it.
    Pointer,
    /// 3.8, 3.9: `f_lasti`, the instruction's offset in bytes.
    LastiBytes,
    /// 3.10: `f_lasti`, in code units (2 bytes).
    LastiUnits,
}

/// The format of a code object's line table.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum LineFormat {
    /// 3.11+: the location table (`Objects/locations.md`).
    Locations,
    /// 3.8, 3.9: `co_lnotab`, (bytes, lines) increments.
    Lnotab,
    /// 3.10: `co_linetable`, (bytes, lines) ranges.
    Linetable310,
}

/// Structure offsets of one CPython minor version (bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct PyLayout {
    /// 11 for 3.11.
    pub minor: u8,
    /// 3.8-3.10: frames are heap objects (`PyFrameObject`), each run by an
    /// eval call of its own (the kernel's `PY_WALK_FRAME_OBJECTS`).
    pub frame_objects: bool,
    /// `_PyRuntime` -> the `Py_tss_t` of `autoTSSkey` (`{int init; int key}`).
    pub runtime_tss: u64,
    /// `PyThreadState` -> `cframe` (3.11, 3.12), `current_frame` (3.13) or
    /// `frame` (3.8-3.10).
    pub tstate_frame: u16,
    /// `_PyCFrame` -> `current_frame`, if the version has a cframe.
    pub cframe_current: Option<u16>,
    /// `PyThreadState.native_thread_id` (3.11+).
    pub tstate_native_tid: Option<u16>,
    /// `PyThreadState.thread_id` (its `pthread_self`), the thread's check
    /// where there is no native id (3.8-3.10).
    pub tstate_pthread: Option<u16>,
    /// `_PyInterpreterFrame.f_code` (`f_executable` from 3.13; in 3.14 a
    /// tagged reference, its low bits masked off by the kernel).
    pub frame_code: u16,
    /// `_PyInterpreterFrame.previous`.
    pub frame_previous: u16,
    /// `_PyInterpreterFrame.prev_instr` (`instr_ptr` in 3.13), or
    /// `PyFrameObject.f_lasti`.
    pub frame_instr: u16,
    /// What `frame_instr` holds.
    pub instr: Instr,
    /// `_PyInterpreterFrame.owner` (a byte; 3.11+).
    pub frame_owner: Option<u16>,
    /// 3.11's `_PyInterpreterFrame.is_entry` (a byte).
    pub frame_is_entry: Option<u16>,
    /// `PyCodeObject.co_firstlineno` (an int).
    pub code_firstlineno: u64,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u64,
    /// `PyCodeObject.co_name`.
    pub code_name: u64,
    /// `PyCodeObject.co_qualname` (`co_name` before 3.11, which has none).
    pub code_qualname: u64,
    /// `PyCodeObject.co_linetable` (bytes; `co_lnotab` in 3.8, 3.9).
    pub code_linetable: u64,
    /// Its format.
    pub lines: LineFormat,
    /// Where the kernel reads the fingerprint's fields from (each within
    /// `PY_CODE_READ - 8` bytes after).
    pub code_read_at: u16,
    /// `PyCodeObject.co_code_adaptive`: where the bytecode starts (3.11+).
    pub code_bytecode: u64,
    /// `PyCodeObject.co_code`, a bytes object (before 3.11): its size ends
    /// the last line of a `co_lnotab`.
    pub code_code: Option<u64>,
    /// `PyObject.ob_type`.
    pub ob_type: u64,
    /// `PyASCIIObject.length`.
    pub str_length: u64,
    /// `PyASCIIObject.state` (bits: interned 2, kind 3, compact 1, ascii 1).
    pub str_state: u64,
    /// Where a compact ASCII string's characters start.
    pub str_ascii_data: u64,
    /// Where a compact non-ASCII string's characters start.
    pub str_compact_data: u64,
    /// `PyVarObject.ob_size` of a bytes object.
    pub bytes_size: u64,
    /// `PyBytesObject.ob_sval`.
    pub bytes_data: u64,
    /// `_PyRuntime.interpreters.head`: the main interpreter's state.
    pub runtime_interp_head: u64,
    /// `PyInterpreterState.modules` (`imports.modules` from 3.12): `sys.modules`.
    pub interp_modules: u64,
    /// `PyHeapTypeObject.ht_cached_keys`: the keys a class's instances share.
    pub heaptype_cached_keys: u64,
    /// Whether `threading`'s names are read (the three fields above and the
    /// dict layouts of `threads_read`: 3.11+).
    pub names_threads: bool,
}

impl PyLayout {
    /// Bytes of a code object read to name it: every field used.
    pub fn code_header_bytes(&self) -> u64 {
        let fields = [
            self.ob_type,
            self.code_firstlineno,
            self.code_filename,
            self.code_name,
            self.code_qualname,
            self.code_linetable,
            self.code_code.unwrap_or(0),
        ];
        fields.into_iter().max().unwrap_or(0) + 8
    }

    /// The index in code units (2 bytes) of the instruction a frame of
    /// `code` says it runs with `instr` (negative: none started yet).
    pub fn instruction_index(&self, code: u64, instr: u64) -> i64 {
        match self.instr {
            Instr::Pointer => {
                (instr as i64).wrapping_sub(code.wrapping_add(self.code_bytecode) as i64) / 2
            }
            Instr::LastiBytes => (instr as u32 as i32 as i64).div_euclid(2),
            Instr::LastiUnits => instr as u32 as i32 as i64,
        }
    }
}

/// The layout 3.8 to 3.10 share but for their thread-state key's place
/// and `f_lasti`'s (measured as the module doc says).
const fn frame_objects(
    minor: u8,
    runtime_tss: u64,
    frame_instr: u16,
    instr: Instr,
    lines: LineFormat,
) -> PyLayout {
    PyLayout {
        minor,
        frame_objects: true,
        runtime_tss,
        tstate_frame: 24,
        cframe_current: None,
        tstate_native_tid: None,
        tstate_pthread: Some(176),
        frame_code: 32,
        frame_previous: 24,
        frame_instr,
        instr,
        frame_owner: None,
        frame_is_entry: None,
        code_firstlineno: 40,
        code_filename: 104,
        code_name: 112,
        code_qualname: 112,
        code_linetable: 120,
        lines,
        code_read_at: 40,
        code_bytecode: 0,
        code_code: Some(48),
        ob_type: 8,
        str_length: 16,
        str_state: 32,
        str_ascii_data: 48,
        str_compact_data: 72,
        bytes_size: 16,
        bytes_data: 32,
        runtime_interp_head: 0,
        interp_modules: 0,
        heaptype_cached_keys: 0,
        names_threads: false,
    }
}

/// 3.13's, which 3.14's differs from in a few fields.
const LAYOUT_313: PyLayout = PyLayout {
    frame_objects: false,
    minor: 13,
    runtime_tss: 0x870,
    tstate_frame: 72,
    cframe_current: None,
    tstate_native_tid: Some(160),
    tstate_pthread: None,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    instr: Instr::Pointer,
    frame_owner: Some(70),
    frame_is_entry: None,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    lines: LineFormat::Locations,
    code_read_at: 64,
    code_bytecode: 200,
    code_code: None,
    ob_type: 8,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 40,
    str_compact_data: 56,
    bytes_size: 16,
    bytes_data: 32,
    runtime_interp_head: 632,
    interp_modules: 7656,
    heaptype_cached_keys: 880,
    names_threads: true,
};

const LAYOUTS: [PyLayout; 7] = [
    frame_objects(8, 0x570, 104, Instr::LastiBytes, LineFormat::Lnotab),
    frame_objects(9, 0x248, 104, Instr::LastiBytes, LineFormat::Lnotab),
    frame_objects(10, 0x248, 96, Instr::LastiUnits, LineFormat::Linetable310),
    PyLayout {
        frame_objects: false,
        minor: 11,
        runtime_tss: 0x250,
        tstate_frame: 56,
        cframe_current: Some(8),
        tstate_native_tid: Some(160),
        tstate_pthread: None,
        frame_code: 32,
        frame_previous: 48,
        frame_instr: 56,
        instr: Instr::Pointer,
        frame_owner: Some(69),
        frame_is_entry: Some(68),
        code_firstlineno: 72,
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_linetable: 136,
        lines: LineFormat::Locations,
        code_read_at: 64,
        code_bytecode: 184,
        code_code: None,
        ob_type: 8,
        str_length: 16,
        str_state: 32,
        str_ascii_data: 48,
        str_compact_data: 72,
        bytes_size: 16,
        bytes_data: 32,
        runtime_interp_head: 40,
        interp_modules: 888,
        heaptype_cached_keys: 872,
        names_threads: true,
    },
    PyLayout {
        frame_objects: false,
        minor: 12,
        runtime_tss: 0x608,
        tstate_frame: 56,
        cframe_current: Some(0),
        tstate_native_tid: Some(144),
        tstate_pthread: None,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        instr: Instr::Pointer,
        frame_owner: Some(70),
        frame_is_entry: None,
        code_firstlineno: 68,
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_linetable: 136,
        lines: LineFormat::Locations,
        code_read_at: 64,
        code_bytecode: 192,
        code_code: None,
        ob_type: 8,
        str_length: 16,
        str_state: 32,
        str_ascii_data: 40,
        str_compact_data: 56,
        bytes_size: 16,
        bytes_data: 32,
        runtime_interp_head: 40,
        interp_modules: 944,
        heaptype_cached_keys: 880,
        names_threads: true,
    },
    LAYOUT_313,
    // 3.14: 3.13's but where its headers say otherwise (`offsetof` with
    // `Py_BUILD_CORE` on libpython3.14-dev 3.14.10).
    PyLayout {
        minor: 14,
        runtime_tss: 0x920,
        frame_owner: Some(74),
        code_bytecode: 208,
        runtime_interp_head: 808,
        interp_modules: 7688,
        ..LAYOUT_313
    },
];

/// The versions read, as said to users.
pub const SUPPORTED: &str = "3.8 to 3.14";

/// The layout of CPython 3.`minor`, if this build knows it.
pub fn layout(minor: u8) -> Option<&'static PyLayout> {
    LAYOUTS.iter().find(|l| l.minor == minor)
}

/// A CPython interpreter in a file: addresses in the file's address space.
#[derive(Debug)]
pub struct PythonBinary {
    /// `PY_VERSION_HEX` (0x030b07f0 for 3.11.7; before 3.11, which do not
    /// say it, the minor version's: 0x030a0000).
    pub version: u32,
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `PyCode_Type`: every code object's `ob_type`.
    pub code_type: u64,
    /// The eval loop (`_PyEval_EvalFrameDefault` and its `.cold` part, by
    /// its symbol or, without one, found by the loop's jumps into it):
    /// [start, end) ranges.
    pub eval: Vec<(u64, u64)>,
    /// The version's structure layout.
    pub layout: &'static PyLayout,
    /// Before 3.11: the functions ([`CALL_PATH`]) a Python function's call
    /// of another passes through from one eval call to the next, by their
    /// symbols: [start, end) ranges.
    pub call_path: Vec<(u64, u64)>,
}

/// Whether symbol `name` is function `of` or a compiler's clone or part of
/// it (`function_code_fastcall.isra.0`, `call_function.cold`).
fn is_clone_of(name: &[u8], of: &str) -> bool {
    name.strip_prefix(of.as_bytes())
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'.')
}

/// What CPython 3.8-3.10 run between a Python function's call and the
/// callee's own eval call (`call_function` -> `_PyObject_Vectorcall` ->
/// `_PyFunction_Vectorcall` -> `function_code_fastcall` or `_PyEval_Vector`
/// -> `_PyEval_EvalFrame`): the steps 3.11+ take inside the eval loop, with
/// no native frame. Between two Python frames they are left out, so a
/// stack reads as 3.11+'s do; a C function between (`builtin_sorted`, a C
/// extension's, `PyObject_Call`) stays. By symbol: a build without these
/// (a stripped one) keeps them.
pub const CALL_PATH: [&str; 11] = [
    "call_function",
    "_PyObject_Vectorcall",
    "_PyObject_VectorcallTstate",
    "_PyFunction_Vectorcall",
    "function_code_fastcall",
    "method_vectorcall",
    "_PyEval_EvalCode",
    "_PyEval_EvalCodeWithName",
    "_PyEval_Vector",
    "_PyEval_EvalFrame",
    "PyEval_EvalFrameEx",
];

/// Whether a mapped file may be a CPython interpreter, by its name
/// (`python3.11`, `libpython3.12.so.1.0`): only those are read, so the
/// symbol tables of every other library are not. An interpreter embedded
/// in a program under another name is not found.
pub fn may_be_python(file_name: &str) -> bool {
    file_name.starts_with("python") || file_name.starts_with("libpython")
}

/// Why a CPython interpreter's frames are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A version this build has no layout for: its stacks say so in their
    /// root frame.
    #[error("{0}")]
    Version(String),
    /// A file that claims to be one but lacks what the walk needs.
    #[error("{0}")]
    Damaged(String),
}

impl From<&str> for NotRead {
    fn from(why: &str) -> Self {
        NotRead::Damaged(why.to_string())
    }
}

/// Read what makes `elf` a CPython interpreter: Ok(None) for a file that
/// is none (a launcher that only links libpython, any other program),
/// Err for a CPython this build cannot walk (its version said).
pub fn read(elf: &ElfReader<'_>) -> Result<Option<PythonBinary>, NotRead> {
    let symbols = elf.symbols_where(|n| {
        matches!(
            n,
            b"_PyRuntime"
                | b"Py_Version"
                | b"PyCode_Type"
                | b"PyEval_EvalFrameEx"
                | b"PyCode_NewWithPosOnlyArgs"
                | b"PyFrame_GetCode"
                | b"PyAIter_Check"
                | b"PyFrame_GetBuiltins"
        ) || n.starts_with(b"_PyEval_EvalFrameDefault")
            || CALL_PATH.iter().any(|c| is_clone_of(n, c))
    });
    let find = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, addr, size)| (addr, size))
    };
    // An eval loop defined here: an interpreter, not a launcher.
    let has_eval =
        find("PyEval_EvalFrameEx").is_some() || find("_PyEval_EvalFrameDefault").is_some();
    let segments = elf
        .segments()
        .map_err(|e| NotRead::Damaged(e.to_string()))?;
    let (runtime, version) = match (find("_PyRuntime"), find("Py_Version")) {
        (Some((runtime, _)), Some((version_at, _))) => {
            let offset =
                vaddr_to_offset(&segments, version_at).ok_or("Py_Version lies in no segment")?;
            let bytes = elf
                .read_checked("Py_Version", offset, 4)
                .map_err(|e| NotRead::Damaged(e.to_string()))?;
            (
                runtime,
                u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")),
            )
        }
        // A 3.11+ API without Py_Version: no version to trust.
        (Some(_), None) if find("PyFrame_GetBuiltins").is_some() => {
            return Err(NotRead::Damaged(
                "a CPython with 3.11's C API but no Py_Version".into(),
            ))
        }
        // Before 3.11, which says no version: the newest C API it defines.
        (Some((runtime, _)), None) if has_eval => {
            let minor = if find("PyAIter_Check").is_some() {
                10
            } else if find("PyFrame_GetCode").is_some() {
                9
            } else if find("PyCode_NewWithPosOnlyArgs").is_some() {
                8
            } else {
                return Err(NotRead::Version(format!(
                    "CPython older than 3.8: this build reads the frames of {SUPPORTED}"
                )));
            };
            (runtime, 0x0300_0000 | minor << 16)
        }
        _ if has_eval => {
            return Err(NotRead::Version(format!(
                "CPython older than 3.8: this build reads the frames of {SUPPORTED}"
            )))
        }
        _ => return Ok(None),
    };
    let (major, minor) = (version >> 24, (version >> 16) & 0xff);
    let layout = match layout(minor as u8) {
        Some(l) if major == 3 => l,
        _ => {
            return Err(NotRead::Version(format!(
                "CPython {major}.{minor}: this build reads the frames of {SUPPORTED}"
            )))
        }
    };
    if minor >= 13 {
        super::debug_offsets::read_and_check(elf, runtime, version, layout)?;
    }
    let code_type = find("PyCode_Type")
        .map(|(a, _)| a)
        .ok_or("no PyCode_Type symbol")?;
    let mut eval: Vec<(u64, u64)> = symbols
        .iter()
        .filter(|(n, _, size)| {
            (n == "_PyEval_EvalFrameDefault" || n.starts_with("_PyEval_EvalFrameDefault.cold"))
                && *size > 0
        })
        .map(|&(_, addr, size)| (addr, addr.saturating_add(size)))
        .collect();
    eval.sort_unstable();
    eval.dedup();
    if eval.is_empty() {
        return Err("no _PyEval_EvalFrameDefault symbol".into());
    }
    if eval.len() == 1 {
        if let Some(cold) = unnamed_cold_part(elf, &segments, eval[0]) {
            eval.push(cold);
        }
    }
    let mut call_path: Vec<(u64, u64)> = if layout.frame_objects {
        symbols
            .iter()
            .filter(|(n, _, size)| {
                CALL_PATH.iter().any(|c| is_clone_of(n.as_bytes(), c)) && *size > 0
            })
            .map(|&(_, addr, size)| (addr, addr.saturating_add(size)))
            .collect()
    } else {
        Vec::new()
    };
    call_path.sort_unstable();
    call_path.dedup();
    Ok(Some(PythonBinary {
        version,
        runtime,
        code_type,
        eval,
        layout,
        call_path,
    }))
}

/// Most bytes of the eval loop scanned for jumps out of it.
const MAX_EVAL_BYTES: u64 = 1 << 20;

/// The eval loop's cold part when no symbol names it (GCC moves the
/// unlikely paths of `_PyEval_EvalFrameDefault` to a `.cold` block; Debian's
/// stripped python3.11 keeps no symbol for it): the function's unwind entry
/// (FDE) that most `jmp`/`jcc rel32` of the loop jump into. Decoded at
/// every byte, as the loop's instruction boundaries are unknown: stray
/// matches scatter, the ~300 real jumps all land in one FDE; at least 8 are
/// asked for. x86_64 only.
fn unnamed_cold_part(
    elf: &ElfReader<'_>,
    segments: &[crate::binaries::elf::Segment],
    (start, end): (u64, u64),
) -> Option<(u64, u64)> {
    if end - start > MAX_EVAL_BYTES {
        return None;
    }
    let offset = vaddr_to_offset(segments, start)?;
    let code = elf
        .read_checked("_PyEval_EvalFrameDefault", offset, end - start)
        .ok()?;
    let mut targets = Vec::new();
    for i in 0..code.len() {
        let (len, at) = match (code[i], code.get(i + 1)) {
            (0xe9, _) => (5, i + 1),
            (0x0f, Some(b)) if (0x80..=0x8f).contains(b) => (6, i + 2),
            _ => continue,
        };
        let Some(rel) = code.get(at..at + 4) else {
            continue;
        };
        let rel = i32::from_le_bytes(rel.try_into().expect("4 bytes")) as i64;
        let target = (start + (i + len) as u64).wrapping_add_signed(rel);
        if target < start || target >= end {
            targets.push(target);
        }
    }
    let fdes = elf.fde_ranges().ok()?;
    let mut hits: Vec<((u64, u64), usize)> = Vec::new();
    for t in targets {
        let i = fdes.partition_point(|&(s, _)| s <= t);
        let Some(&(s, e)) = i.checked_sub(1).and_then(|i| fdes.get(i)) else {
            continue;
        };
        if t < e && s != start {
            match hits.iter_mut().find(|(r, _)| *r == (s, e)) {
                Some((_, n)) => *n += 1,
                None => hits.push(((s, e), 1)),
            }
        }
    }
    hits.into_iter()
        .max_by_key(|&(_, n)| n)
        .filter(|&(_, n)| n >= 8)
        .map(|(r, _)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that each layout's offsets fit the kernel walker's reads: a
    /// frame's fields within the bytes read of it (PY_FRAME_READ, or
    /// PY_FRAME_OBJECT_READ before 3.11), below the 127 python.bpf.h masks
    /// them to; the fingerprint's code fields within the PY_CODE_READ bytes
    /// read from `code_read_at`; and that the versions are the ones named.
    #[test]
    fn layouts_fit_the_kernel_walk() {
        use crate::bpf::abi::{PY_CODE_READ, PY_FRAME_OBJECT_READ, PY_FRAME_READ};
        for l in &LAYOUTS {
            let read = if l.frame_objects {
                PY_FRAME_OBJECT_READ
            } else {
                PY_FRAME_READ
            };
            for word in [l.frame_code, l.frame_previous, l.frame_instr] {
                assert!(word + 8 <= read && word <= 127, "3.{}: {word}", l.minor);
            }
            for byte in [l.frame_owner, l.frame_is_entry].into_iter().flatten() {
                assert!(byte < read, "3.{}: {byte}", l.minor);
            }
            for field in [
                l.code_firstlineno,
                l.code_filename,
                l.code_qualname,
                l.code_linetable,
            ] {
                let at = field as u16;
                assert!(
                    at >= l.code_read_at && at + 8 <= l.code_read_at + PY_CODE_READ,
                    "3.{}: code field {at}",
                    l.minor
                );
            }
            assert_eq!(l.frame_objects, l.minor < 11);
            assert_eq!(
                l.frame_objects,
                l.tstate_native_tid.is_none() && l.tstate_pthread.is_some()
            );
            assert_eq!(layout(l.minor).map(|x| x.minor), Some(l.minor));
        }
        assert!(layout(7).is_none() && layout(15).is_none());
    }

    /// Check the 3.8-3.10 layouts against what each installed interpreter
    /// finds in its own memory (`tests/oracles/python_layout.py`, through
    /// ctypes): every offset the kernel and the code reader use.
    #[test]
    fn frame_object_layouts_match_what_each_interpreter_measures() {
        let oracle = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/oracles/python_layout.py"
        );
        let Ok(dirs) = std::fs::read_dir("/root/.pyenv/versions") else {
            eprintln!("no /root/.pyenv/versions: NOT CHECKED");
            return;
        };
        let mut checked = Vec::new();
        for d in dirs.filter_map(|e| e.ok()) {
            let name = d.file_name().to_string_lossy().into_owned();
            let Some(minor) = ["3.8.", "3.9.", "3.10."]
                .iter()
                .position(|p| name.starts_with(p))
                .map(|i| i as u8 + 8)
            else {
                continue;
            };
            let out = std::process::Command::new(d.path().join("bin/python3"))
                .arg(oracle)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let said = |field: &str| -> String {
                text.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
                    .unwrap_or_else(|| panic!("{name}: no {field} in {text}"))
                    .to_string()
            };
            let l = layout(minor).unwrap();
            assert_eq!(
                said("runtime_tss"),
                format!("['{:#x}']", l.runtime_tss),
                "{name}"
            );
            let expect = [
                ("tstate_pthread", l.tstate_pthread.unwrap() as u64),
                ("tstate_frame", l.tstate_frame as u64),
                ("frame_back", l.frame_previous as u64),
                ("frame_code", l.frame_code as u64),
                ("frame_lasti", l.frame_instr as u64),
                ("code_firstlineno", l.code_firstlineno),
                ("code_code", l.code_code.unwrap()),
                ("code_filename", l.code_filename),
                ("code_name", l.code_name),
                ("code_linetable", l.code_linetable),
            ];
            for (field, want) in expect {
                assert_eq!(said(field), want.to_string(), "{name}: {field}");
            }
            checked.push(name);
        }
        eprintln!("checked {checked:?}");
    }

    /// Check that Debian's python3.11, stripped, has its eval loop's
    /// unnamed cold part found (0x430f05-0x43455e in 3.11.2, by its FDE),
    /// so a sample there is known to run Python frames.
    #[test]
    fn the_unnamed_cold_part_of_debians_eval_loop_is_found() {
        let Ok(f) = std::fs::File::open("/usr/bin/python3.11") else {
            eprintln!("no /usr/bin/python3.11: not checked");
            return;
        };
        let p = read(&ElfReader::new(&f, Default::default()))
            .unwrap()
            .expect("a CPython");
        assert_eq!(p.layout.minor, 11);
        assert_eq!(p.eval.len(), 2, "{:x?}", p.eval);
        let (hot, cold) = if p.eval[0].1 - p.eval[0].0 > p.eval[1].1 - p.eval[1].0 {
            (p.eval[0], p.eval[1])
        } else {
            (p.eval[1], p.eval[0])
        };
        assert!(
            hot.1 - hot.0 > 40_000 && cold.1 - cold.0 > 4_000 && cold.1 - cold.0 < hot.1 - hot.0,
            "{:x?}",
            p.eval
        );
        eprintln!("eval loop {hot:x?}, cold part {cold:x?}");
    }

    /// Check that each interpreter pyenv installed is told apart: 3.8-3.14
    /// read with their own layout, older ones (and a launcher that only
    /// links libpython) never read with a wrong one: an older libpython is
    /// a version this build does not read, a launcher no interpreter.
    #[test]
    fn pyenv_interpreters_are_told_apart_by_version() {
        let Ok(dirs) = std::fs::read_dir("/root/.pyenv/versions") else {
            eprintln!("no /root/.pyenv/versions: not checked");
            return;
        };
        let mut checked = 0;
        for d in dirs.filter_map(|e| e.ok()) {
            let name = d.file_name().to_string_lossy().into_owned();
            let mut parts = name.split('.').map(|p| p.parse::<u8>().unwrap_or(0));
            let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            let Some(lib) = std::fs::read_dir(d.path().join("lib")).ok().and_then(|l| {
                l.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                    p.to_string_lossy().contains(".so.1.0")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("libpython"))
                })
            }) else {
                continue;
            };
            let f = std::fs::File::open(&lib).unwrap();
            let got = read(&ElfReader::new(&f, Default::default()));
            match got {
                Ok(Some(p)) => assert!(
                    major == 3 && (8..=14).contains(&minor) && p.layout.minor == minor,
                    "{}: read as 3.{}",
                    lib.display(),
                    p.layout.minor
                ),
                Err(NotRead::Version(why)) => assert!(
                    major < 3 || !(8..=14).contains(&minor),
                    "{}: {why}",
                    lib.display()
                ),
                other => panic!("{}: {other:?}", lib.display()),
            }
            checked += 1;
        }
        eprintln!("{checked} pyenv interpreters checked");
    }
}
