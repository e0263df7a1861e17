//! sysprof: a system-wide Linux profiler. eBPF programs sample every CPU;
//! this crate loads them, collects what they send with the perf sideband
//! and `/proc`, symbolicates, and writes a Firefox Profiler profile.
//!
//! Modules by pipeline stage: [`capture`] runs [`bpf`] (kernel side, ring
//! buffers) and [`sideband`] (mappings, processes, counters) and feeds the
//! [`collector`], which uses [`unwind`] (DWARF unwinding of copied user
//! stacks) and [`symbolize`] and finishes each window as a recording for a
//! sink: the [`profile`] writer. [`record`] runs that pipeline as one window
//! for the `record` command parsed by [`cli`].
#![deny(missing_docs)]

pub mod agent;
pub mod binaries;
pub mod bpf;
pub mod capture;
pub mod cli;
pub mod collector;
pub mod error;
pub mod escape;
pub mod export;
pub mod log;
pub mod model;
pub mod profile;
pub mod record;
pub mod report;
pub mod sampling;
pub mod show;
pub mod sideband;
pub mod sock_diag;
pub mod store;
pub mod summary;
pub mod symbolize;
pub mod sys;
pub mod units;
pub mod unwind;
pub mod view;
