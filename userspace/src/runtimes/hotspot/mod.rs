//! HotSpot JVMs: what `libjvm.so` exports, its interpreted frames' methods
//! and its compiled frames' sizes, the JVM's perf map asked for through its
//! attach mechanism, and its frames put into stacks.
//!
//! In: binaries named `libjvm.so` (from the runtimes registry,
//! [`crate::runtimes::Runtimes`]), the JVM's memory and perf map, the
//! kernel's walk of its frames. Out: the kernel entry's interpreter range
//! and code heaps, rows for its compiled methods, and stacks with Java
//! methods by name.
//!
//! `binary` reads libjvm's exports, `read` reads methods and code blobs,
//! `attach` asks a JVM to write its perf map, `perf_maps` decides when,
//! `process` is one JVM's, `frame_sizes` turns compiled methods' prologues into unwind rows,
//! `frames` merges the methods into stacks.

pub mod attach;
pub mod binary;
pub mod frame_sizes;
pub mod frames;
pub mod perf_maps;
pub mod process;
pub mod read;
