//! PHP processes for the kernel's walk (`ebpf/runtimes/php.bpf.h`): which
//! processes run PHP, and where.
//!
//! In: a PHP binary as one process maps it (the registry finds it among the
//! process's mappings). Out: a [`PhpRuntime`], and its kernel entry: the
//! CPython walk's, its fields holding PHP's offsets as `PY_WALK_PHP` says.

use std::sync::Arc;

use crate::bpf::abi::{PythonProcess, PY_NO_OFFSET, PY_WALK_PHP};
use crate::runtimes::php::binary::PhpBinary;

/// A PHP binary as one process maps it.
#[derive(Debug, Clone)]
pub struct PhpRuntime {
    /// What the binary is.
    pub binary: Arc<PhpBinary>,
    /// Where the binary's address 0 lands in the process.
    pub base: u64,
}

impl PhpRuntime {
    /// Whether `addr` (a process address) is in the VM's loop.
    pub fn in_vm_loop(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        let (s, e) = self.binary.execute_ex;
        a >= s && a < e
    }

    /// The kernel's entry for this process (the field names are CPython's:
    /// `ebpf/runtimes/php.bpf.h` says what each holds for PHP).
    pub fn entry(&self) -> PythonProcess {
        let l = self.binary.layout;
        PythonProcess {
            tss_addr: self
                .base
                .wrapping_add(self.binary.executor_globals)
                .wrapping_add(l.eg_current_execute_data),
            version: 0,
            tsd_offset: 0,
            tstate_frame: 0,
            cframe_current: PY_NO_OFFSET,
            tstate_native_tid: PY_NO_OFFSET,
            frame_code: l.ex_func,
            frame_previous: l.ex_prev,
            frame_instr: l.ex_opline,
            frame_owner: l.ex_call_info,
            frame_is_entry: l.opline_lineno,
            code_firstlineno: l.op_line_start as u16,
            code_filename: l.op_filename as u16,
            code_qualname: l.fn_name as u16,
            code_linetable: PY_NO_OFFSET,
            code_read_at: 0,
            tstate_pthread: PY_NO_OFFSET,
            flags: PY_WALK_PHP,
        }
    }
}
