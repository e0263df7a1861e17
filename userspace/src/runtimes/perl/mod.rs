//! Perl 5.36 (built with MULTIPLICITY: Debian's): what its binary is,
//! where one process maps it, its subs read from the process, and its
//! frames put into stacks where the run loop ran them.
//!
//! In: binaries whose name may be Perl's (from the runtimes registry), the
//! kernel's chain of (sub or file, line) pairs beside each sample
//! (`ebpf/runtimes/perl.bpf.h`), the process's memory. Out: the kernel's
//! entry of a process, and its stacks with Perl subs in place of the run
//! loop's `Perl_runops_standard` frames.
//!
//! `binary` reads the executable, `process` places it in one process and
//! writes its kernel entry, `read` reads a sub or a file name, `frames`
//! merges them.

pub mod binary;
pub mod frames;
pub mod process;
pub mod read;
