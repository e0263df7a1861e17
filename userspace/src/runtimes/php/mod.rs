//! PHP 8.2 (non-thread-safe builds: Debian's CLI, FPM and CGI): what its
//! binary is, where one process maps it, its functions read from the
//! process, and its frames put into stacks where the VM ran them.
//!
//! In: binaries whose name may be PHP's (from the runtimes registry), the
//! kernel's chain of (function, line) pairs beside each sample
//! (`ebpf/runtimes/php.bpf.h`), the process's memory. Out: the kernel's
//! entry of a process, and its stacks with PHP functions in place of the
//! VM's `execute_ex` frames.
//!
//! `binary` reads the executable, `process` places it in one process and
//! writes its kernel entry, `read` reads a function, `frames` merges them.

pub mod binary;
pub mod frames;
pub mod process;
pub mod read;
