//! CPython 3.8–3.14: what an interpreter binary is, where one process
//! maps it, its code objects and threads read from the process, and its
//! frames put into stacks where the eval loop ran them.
//!
//! In: binaries whose name may be an interpreter's (from the runtimes
//! registry, [`crate::runtimes::Runtimes`]), the kernel's chain of
//! (code object, instruction) pairs beside each sample, the process's
//! memory. Out: the kernel's `python_procs` entry of a process, and its
//! stacks with Python frames in place of the eval loop's.
//!
//! `binary` reads the interpreter's file (`debug_offsets` checks a 3.13
//! file's table against the offsets CPython exports), `process` places it in one
//! process, `read` reads code objects, `frames` merges them into stacks,
//! `threads_read` and `threads` name threads as `threading` named them.

pub mod binary;
pub mod debug_offsets;
pub mod frames;
pub mod process;
pub mod read;
pub mod threads;
pub mod threads_read;
