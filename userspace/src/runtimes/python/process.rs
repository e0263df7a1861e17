//! CPython processes for the kernel's Python walk (`ebpf/runtimes/python.bpf.h`):
//! which processes run an interpreter, and where.
//!
//! In: a process's executable mappings with the load bias of each (as the
//! kernel entries are written) and the binaries they map. Out: per process a
//! [`PythonRuntime`] (the interpreter's version, layout and eval loop at the
//! process's addresses), and its `python_procs` entry. A binary is read
//! once ([`crate::runtimes::python::binary::read`]) and only when its name says it
//! may be an interpreter.

use std::sync::Arc;

use crate::bpf::abi::{PythonProcess, PY_NO_OFFSET, PY_WALK_FRAME_OBJECTS};
use crate::runtimes::python::binary::PythonBinary;

/// glibc (x86_64, 2.34 and later): where `struct pthread` keeps the first
/// 32 thread-specific values (`specific_1stblock`, 16 bytes each: sequence,
/// value), from the thread pointer. A glibc with another layout gives no
/// Python frames, never wrong ones: the kernel checks the state it finds
/// belongs to the thread (its native_thread_id).
const GLIBC_TSD_OFFSET: u16 = 0x310;

/// An interpreter as one process maps it.
#[derive(Debug, Clone)]
pub struct PythonRuntime {
    /// What the binary is.
    pub binary: Arc<PythonBinary>,
    /// Where the binary's address 0 lands in the process.
    pub base: u64,
}

impl PythonRuntime {
    /// Whether `addr` (a process address) is in the interpreter's eval loop.
    pub fn in_eval_loop(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        self.binary.eval.iter().any(|&(s, e)| a >= s && a < e)
    }

    /// Whether `addr` (a process address) is in the steps 3.8-3.10 take
    /// from a Python call to the callee's eval call
    /// ([`crate::runtimes::python::binary::CALL_PATH`]).
    pub fn in_call_path(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        self.binary.call_path.iter().any(|&(s, e)| a >= s && a < e)
    }

    /// Where every code object's type lies in the process.
    pub fn code_type(&self) -> u64 {
        self.base.wrapping_add(self.binary.code_type)
    }

    /// The kernel's entry for this process.
    pub fn entry(&self) -> PythonProcess {
        let l = self.binary.layout;
        PythonProcess {
            tss_addr: self
                .base
                .wrapping_add(self.binary.runtime)
                .wrapping_add(l.runtime_tss),
            version: self.binary.version >> 16,
            tsd_offset: GLIBC_TSD_OFFSET,
            tstate_frame: l.tstate_frame,
            cframe_current: l.cframe_current.unwrap_or(PY_NO_OFFSET),
            tstate_native_tid: l.tstate_native_tid.unwrap_or(PY_NO_OFFSET),
            frame_code: l.frame_code,
            frame_previous: l.frame_previous,
            frame_instr: l.frame_instr,
            frame_owner: l.frame_owner.unwrap_or(PY_NO_OFFSET),
            frame_is_entry: l.frame_is_entry.unwrap_or(PY_NO_OFFSET),
            code_firstlineno: l.code_firstlineno as u16,
            code_filename: l.code_filename as u16,
            code_qualname: l.code_qualname as u16,
            code_linetable: l.code_linetable as u16,
            code_read_at: l.code_read_at,
            tstate_pthread: l.tstate_pthread.unwrap_or(PY_NO_OFFSET),
            flags: if l.frame_objects {
                PY_WALK_FRAME_OBJECTS
            } else {
                0
            },
        }
    }
}
