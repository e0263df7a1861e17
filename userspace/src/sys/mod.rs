//! The bottom layer: what sysprof asks of the operating system directly,
//! with its `unsafe` in one place. In: libc and `/proc/self`. Out: the
//! clock, random names, this process's resources (its cgroup's memory too), the online CPUs, a
//! directory held open and files replaced whole in it; a spawned command held between its fork and exec; hex of bytes;
//! another process's memory; the kernel's text files read whole; a mapped file's pages let go.

pub mod atomic_file;
pub mod cgroup_memory;
pub mod clock;
pub mod cpus;
pub mod dir;
pub mod exec_gate;
pub mod file_pages;
pub mod hex;
pub mod kernel_text;
pub mod memory;
pub mod process;
pub mod random;
