//! Helpers for the integration tests: build C workloads, run `sysprof
//! record` as a child process, and read the profile it wrote.
//!
//! The tests compare what the profile says against oracles the profiler
//! does not produce: the workloads' own measurements, `/proc`, the source.
//!
//! By what they are for: [`run`] (sysprof and workloads as child
//! processes), [`profile`] (a written profile read back), [`oracles`] (what
//! the kernel counts), [`cgroup`], [`disk`], [`elf`], [`agent`], [`tools`]
//! (outside tools and servers). Everything is re-exported at the crate's
//! root, as the tests use it.

pub mod agent;
pub mod cgroup;
pub mod disk;
pub mod elf;
pub mod oracles;
pub mod profile;
pub mod run;
pub mod tools;

pub use agent::*;
pub use cgroup::*;
pub use disk::*;
pub use elf::*;
pub use oracles::*;
pub use profile::*;
pub use run::*;
pub use tools::*;
