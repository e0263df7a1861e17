//! V8 (node and its embedders): its build's `v8dbg_` constants, its
//! JavaScript functions read from the process, and its frames put into
//! stacks.
//!
//! In: binaries whose name says they may embed V8 (from the runtimes
//! registry, [`crate::runtimes::Runtimes`]), the kernel's walk of its
//! frames. Out: the kernel entry's frame constants, and stacks with
//! JavaScript functions by name.
//!
//! `binary` reads the constants, `process` is one process's, `read` reads
//! functions and scripts, `frames` merges them into stacks.

pub mod binary;
pub mod frames;
pub mod process;
pub mod read;
