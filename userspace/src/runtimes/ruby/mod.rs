//! Ruby 3.1 (CRuby as a shared libruby: Debian's): what its library is,
//! where one process maps it, its iseqs read from the process, and its
//! frames put into stacks where the VM ran them.
//!
//! In: libraries whose name may be libruby's (from the runtimes registry),
//! the kernel's chain of (iseq, instruction index) pairs beside each sample
//! (`ebpf/runtimes/ruby.bpf.h`), the process's memory. Out: the kernel's
//! entry of a process, and its stacks with Ruby methods and blocks in place
//! of the VM's `vm_exec_core` frames.
//!
//! `binary` reads the library, `process` places it in one process and
//! writes its kernel entry, `read` reads an iseq, `frames` merges them.

pub mod binary;
pub mod frames;
pub mod process;
pub mod read;
