//! Ruby processes for the kernel's walk (`ebpf/runtimes/ruby.bpf.h`):
//! which processes run Ruby, and where.
//!
//! In: a libruby as one process maps it (the registry finds it among the
//! process's mappings). Out: a [`RubyRuntime`], and its kernel entry: the
//! CPython walk's, its fields holding Ruby's offsets as `PY_WALK_RUBY` says.

use std::sync::Arc;

use crate::bpf::abi::{PythonProcess, PY_NO_OFFSET, PY_WALK_RUBY};
use crate::runtimes::ruby::binary::RubyBinary;

/// A libruby as one process maps it.
#[derive(Debug, Clone)]
pub struct RubyRuntime {
    /// What the library is.
    pub binary: Arc<RubyBinary>,
    /// Where the library's address 0 lands in the process.
    pub base: u64,
}

impl RubyRuntime {
    /// Whether `addr` (a process address) is in the VM's loop.
    pub fn in_vm_loop(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        let (s, e) = self.binary.vm_exec_core;
        a >= s && a < e
    }

    /// The kernel's entry for this process (the field names are CPython's:
    /// `ebpf/runtimes/ruby.bpf.h` says what each holds for Ruby).
    pub fn entry(&self) -> PythonProcess {
        let l = self.binary.layout;
        PythonProcess {
            tss_addr: self.base.wrapping_add(self.binary.ec_module_slot),
            version: 0x0301,
            tsd_offset: self.binary.ec_tls_offset,
            tstate_frame: l.ec_cfp,
            cframe_current: l.ec_vm_stack,
            tstate_native_tid: l.ec_vm_stack_size,
            frame_code: l.cfp_iseq,
            frame_previous: l.cfp_ep,
            frame_instr: l.cfp_pc,
            frame_owner: l.cfp_size,
            frame_is_entry: l.iseq_body,
            code_firstlineno: l.body_first_lineno as u16,
            code_filename: l.body_pathobj as u16,
            code_qualname: l.body_label as u16,
            code_linetable: l.body_iseq_encoded as u16,
            code_read_at: 0,
            tstate_pthread: PY_NO_OFFSET,
            flags: PY_WALK_RUBY,
        }
    }
}
