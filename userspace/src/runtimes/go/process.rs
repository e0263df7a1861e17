//! Go processes for the kernel's read of their goroutines' labels
//! (`ebpf/runtimes/go.bpf.h`): which processes run Go, and where.
//!
//! In: a Go executable as one process maps it (the registry finds it among
//! the process's mappings). Out: a [`GoRuntime`], and its kernel entry: the
//! CPython walk's, its fields holding Go's offsets as `PY_WALK_GO` says.

use std::sync::Arc;

use crate::bpf::abi::{PythonProcess, PY_NO_OFFSET, PY_WALK_GO, PY_WALK_GO_LABEL_LIST};
use crate::runtimes::go::binary::GoBinary;

/// A Go executable as one process maps it.
#[derive(Debug, Clone)]
pub struct GoRuntime {
    /// What the executable is.
    pub binary: Arc<GoBinary>,
    /// Where its address 0 lands in the process (0 for a non-PIE executable).
    pub base: u64,
}

impl GoRuntime {
    /// Whether `addr` (a process address: a return address, or the leaf's
    /// instruction) is in a function Go's stacks begin with.
    pub fn is_root(&self, addr: u64) -> bool {
        let a = addr.wrapping_sub(self.base);
        self.binary
            .roots
            .iter()
            .any(|&(start, end)| a >= start && a <= end)
    }

    /// The kernel's entry for this process (the field names are CPython's:
    /// `ebpf/runtimes/go.bpf.h` says what each holds for Go).
    pub fn entry(&self) -> PythonProcess {
        let o = self.binary.offsets;
        PythonProcess {
            tss_addr: self.binary.g_from_fsbase as u64,
            version: 0,
            tsd_offset: PY_NO_OFFSET,
            tstate_frame: o.g_m,
            cframe_current: o.m_curg,
            tstate_native_tid: o.g_goid,
            frame_code: o.g_labels,
            frame_previous: PY_NO_OFFSET,
            frame_instr: PY_NO_OFFSET,
            frame_owner: PY_NO_OFFSET,
            frame_is_entry: PY_NO_OFFSET,
            code_firstlineno: PY_NO_OFFSET,
            code_filename: PY_NO_OFFSET,
            code_qualname: PY_NO_OFFSET,
            code_linetable: PY_NO_OFFSET,
            code_read_at: 0,
            tstate_pthread: PY_NO_OFFSET,
            flags: if self.binary.labels_are_a_list() {
                PY_WALK_GO | PY_WALK_GO_LABEL_LIST
            } else {
                PY_WALK_GO
            },
        }
    }
}
