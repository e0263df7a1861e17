//! sysprof: a system-wide Linux profiler. eBPF programs sample every CPU;
//! this crate loads them, collects what they send with the perf sideband
//! and `/proc`, symbolicates, and writes a Firefox Profiler profile.
//!
//! Modules by pipeline stage: [`bpf`] (kernel side, ring buffers) and
//! [`sideband`] (mappings, processes) feed the [`collector`], which uses
//! [`unwind`] (DWARF unwinding of copied user stacks) and [`symbolize`] and
//! hands a recording to the [`profile`] writer; [`record`]
//! runs that pipeline for the `record` command parsed by [`cli`].
#![deny(missing_docs)]

pub mod bpf;
pub mod cli;
pub mod collector;
pub mod error;
pub mod profile;
pub mod record;
pub mod sideband;
pub mod symbolize;
pub mod unwind;
