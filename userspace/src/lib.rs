//! sysprof: a system-wide Linux profiler. eBPF programs sample every CPU;
//! this crate loads them, collects what they send with the perf sideband
//! and `/proc`, symbolicates, and writes a Firefox Profiler profile.
//!
//! Modules by pipeline stage: `capture` runs [`bpf`] (kernel side, ring
//! buffers) and [`sideband`] (mappings, processes, counters) and feeds the
//! [`collector`], which uses [`unwind`] (DWARF unwinding of copied user
//! stacks) and [`symbolize`] and finishes each window as a recording for a
//! sink: the [`profile`] writer. [`record`] runs that pipeline as one window
//! for the `record` command parsed by [`cli`].
//!
//! Public: the modules `main.rs`, the integration and fuzz tests and the
//! benches use. The rest (capture, the store, exporters, the model, …) are
//! the crate's own; the layers and what each may use are in ARCHITECTURE.md.
#![deny(missing_docs)]
// The docs are for working on sysprof (`cargo doc --document-private-items`):
// a public module's doc may name the crate's own parts.
#![allow(rustdoc::private_intra_doc_links)]

pub mod agent;
pub mod binaries;
pub mod bpf;
pub(crate) mod capture;
pub mod cli;
pub mod collector;
pub mod error;
pub mod escape;
pub(crate) mod export;
pub(crate) mod log;
pub(crate) mod model;
pub mod profile;
pub mod record;
pub mod report;
pub mod runtimes;
pub(crate) mod sampling;
pub mod show;
pub mod sideband;
pub(crate) mod sock_diag;
pub(crate) mod store;
pub(crate) mod summary;
pub mod symbolize;
pub mod sys;
pub(crate) mod units;
pub mod unwind;
pub mod view;
