//! Perl processes for the kernel's walk (`ebpf/runtimes/perl.bpf.h`): which
//! processes run Perl, and where.
//!
//! In: a Perl binary as one process maps it (the registry finds it among
//! the process's mappings). Out: a [`PerlRuntime`], and its kernel entry:
//! the CPython walk's, its fields holding Perl's offsets as `PY_WALK_PERL`
//! says.

use std::sync::Arc;

use crate::bpf::abi::{PythonProcess, PY_WALK_PERL};
use crate::runtimes::perl::binary::PerlBinary;

/// A Perl binary as one process maps it.
#[derive(Debug, Clone)]
pub struct PerlRuntime {
    /// What the binary is.
    pub binary: Arc<PerlBinary>,
    /// Where the binary's address 0 lands in the process.
    pub base: u64,
}

impl PerlRuntime {
    /// Whether `addr` (a process address) is in one of the run loops.
    pub fn in_run_loop(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        self.binary.run_loops.iter().any(|&(s, e)| a >= s && a < e)
    }

    /// The kernel's entry for this process (the field names are CPython's:
    /// `ebpf/runtimes/perl.bpf.h` says what each holds for Perl).
    pub fn entry(&self) -> PythonProcess {
        let l = self.binary.layout;
        PythonProcess {
            tss_addr: self.base.wrapping_add(self.binary.curinterp),
            version: l.si_cxix as u32,
            tsd_offset: l.cx_retop,
            tstate_frame: l.interp_curstackinfo,
            cframe_current: l.interp_curcop,
            tstate_native_tid: self.binary.interp_size,
            frame_code: l.cx_cv,
            frame_previous: l.si_prev,
            frame_instr: l.cx_oldcop,
            frame_owner: l.si_cxstack,
            frame_is_entry: l.si_cxsubix,
            code_firstlineno: l.cop_line,
            code_filename: l.cop_file,
            code_qualname: l.cx_old_cxsubix,
            code_linetable: l.interp_phase,
            code_read_at: l.cv_stash as u16,
            tstate_pthread: l.interp_origfilename,
            flags: PY_WALK_PERL,
        }
    }
}
