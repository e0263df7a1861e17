//! Go programs: the pprof labels (`runtime/pprof.Do`,
//! `SetGoroutineLabels`) of the goroutine each sample, switch and request
//! ran, read in the kernel beside the native stack.
//!
//! In: executables the runtimes registry finds mapped (a Go program says
//! so in its `.go.buildinfo` section), the kernel's pair beside each stack
//! (the goroutine's label map and its hash seed: `ebpf/runtimes/go.bpf.h`),
//! the process's memory. Out: the kernel's entry of a Go process, and its
//! stacks with a root frame naming the goroutine's labels.
//!
//! `binary` reads the executable, `process` places it in one process and
//! writes its kernel entry, `read` reads a label map, `frames` puts its
//! frame at the stack's root. Go's own frames need nothing of this layer:
//! Go keeps frame pointers and its symbols name them.

pub mod binary;
pub mod frames;
pub mod process;
pub mod read;
