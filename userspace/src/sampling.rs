//! How stacks are sampled: the options `record` and `agent` share, their
//! one check, and the engine's options built from them for both.
//!
//! In: `--call-graph`, `--stack-size`, `--unwind-table-mb` and
//! `--off-cpu-threshold` as given (`record`'s flags; the agent's flags over
//! its config file over defaults). Out: a checked [`SamplingOptions`] and
//! what the capture needs from it (bytes of stack to copy, rows of kernel
//! unwind table), or a [`SamplingError`] naming the value and what would be
//! right; from an [`Engine`] (those options, what is traced, who runs it)
//! the collector and the capture session's options.

use serde::Deserialize;

use crate::binaries::elf::ElfLimits;
use crate::bpf::abi::MAX_STACK_COPY;
use crate::capture::{CaptureOptions, Polling};
use crate::collector::{Collector, CollectorOptions, PidFilter};

/// Records (samples, sideband events, off-CPU intervals, requests) a
/// recording's window holds before it is finished and a new one begun: each
/// takes ~500 bytes until finished (measured: `record -a` beside a fork
/// loop grew 3 MB/s, 263 MB in 60 s, all of it one window), several times
/// what the finished window keeps of it. About a second of a machine beside
/// a fork loop; a quiet machine's short recordings stay one window. With
/// 100,000 a window's raw records and its finishing were the peak: `record
/// -a` beside a fork loop and a spinner peaked at 181 MB for 10 s and 354 MB
/// for 60 s; with 10,000, 126 and 156 MB, at the same CPU (8.1 vs 7.6 s
/// for 20 s), and the end wrote 60 s in 1.9 s instead of 2.5 s for 20 s.
pub const RECORD_WINDOW_RECORDS: usize = 10_000;

/// How user stacks are walked (`--call-graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
// No doc comments on the variants: one would become its help text and
// change `--help` (the flags' help says what each is).
pub enum CallGraph {
    // Frame pointers only.
    Fp,
    // In the kernel, with tables compiled from each binary's .eh_frame.
    #[default]
    Dwarf,
    // Copy the top of the stack, unwind it here.
    DwarfCopy,
}

impl CallGraph {
    /// Whether stacks are unwound by DWARF (in the kernel or here), so that
    /// user stack is copied for the samples the kernel cannot unwind.
    pub fn dwarf(self) -> bool {
        self != CallGraph::Fp
    }
}

/// The sampling options, as given; [`SamplingOptions::check`] says whether
/// they make sense.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingOptions {
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied per sample that is unwound here.
    pub stack_size: u32,
    /// MiB of kernel memory for the in-kernel unwinder's tables.
    pub unwind_table_mb: u32,
    /// Off-CPU intervals at least this long (ms) get a marker (shorter ones
    /// are folded in the kernel).
    pub off_cpu_threshold_ms: f64,
}

/// A sampling option out of range. Its text names the option without
/// dashes (`stack-size 100: ...`): the agent's may come from its config
/// file; `record` puts `--` before it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// The stack copy is not a multiple of 512 within what the kernel side copies.
    #[error("stack-size {0}: use a multiple of 512 between 512 and {MAX_STACK_COPY}")]
    StackSize(u32),
    /// The kernel unwind tables would be empty or absurdly large.
    #[error("unwind-table-mb {0}: use 1 to 4096")]
    UnwindTableMb(u32),
    /// The threshold is negative, not a number, or over an hour.
    #[error("off-cpu-threshold: a number of milliseconds from 0 to 3600000")]
    OffCpuThreshold,
}

/// A [`SamplingError`] in a command-line flag: said with the flag's `--`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--{0}")]
pub struct BadFlag(pub SamplingError);

impl SamplingOptions {
    /// What `record` and the agent use where nothing is said.
    pub const DEFAULT: SamplingOptions = SamplingOptions {
        call_graph: CallGraph::Dwarf,
        stack_size: 16384,
        unwind_table_mb: 64,
        off_cpu_threshold_ms: 1.0,
    };

    /// Check every value, whatever the call graph (a value out of range is
    /// a mistake even where this mode does not use it).
    pub fn check(&self) -> Result<(), SamplingError> {
        if self.stack_size == 0
            || self.stack_size as usize > MAX_STACK_COPY
            || self.stack_size % 512 != 0
        {
            return Err(SamplingError::StackSize(self.stack_size));
        }
        if !(1..=4096).contains(&self.unwind_table_mb) {
            return Err(SamplingError::UnwindTableMb(self.unwind_table_mb));
        }
        if !(self.off_cpu_threshold_ms >= 0.0 && self.off_cpu_threshold_ms < 3.6e6) {
            return Err(SamplingError::OffCpuThreshold);
        }
        Ok(())
    }

    /// Bytes of user stack the kernel side copies per sample (0: none).
    pub fn stack_copy(&self) -> u32 {
        if self.call_graph.dwarf() {
            self.stack_size
        } else {
            0
        }
    }

    /// Rows of the in-kernel unwinder's tables (0: it is not used).
    pub fn kernel_unwind_rows(&self) -> u32 {
        if self.call_graph == CallGraph::Dwarf {
            unwind_table_rows(self.unwind_table_mb)
        } else {
            0
        }
    }

    /// The threshold in ns.
    pub fn off_cpu_threshold_ns(&self) -> u64 {
        (self.off_cpu_threshold_ms * 1e6) as u64
    }
}

/// What the engine traces besides samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracing {
    /// Context switches and wakeups (off-CPU time, wakers, run-queue delay).
    pub off_cpu: bool,
    /// Block I/O requests.
    pub io: bool,
    /// Ask the JVMs sampled for their perf maps.
    pub jvm_attach: bool,
}

/// What a recording asks of the engine that the agent does not.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordScope {
    /// Every process (`-a`).
    pub all: bool,
    /// The processes named (`-p`), with their descendants.
    pub pids: Vec<u32>,
    /// A command is run: sampling starts with it, once everything is loaded.
    pub command: bool,
    /// One track per CPU.
    pub per_cpu: bool,
    /// Fetch missing debug files from debuginfod.
    pub debuginfod: bool,
    /// Process entries of the in-kernel unwinder (`--unwind-processes`).
    pub unwind_processes: u32,
}

/// Who runs the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// `sysprof record`.
    Record(RecordScope),
    /// `sysprof agent`: every process, short-lived ones kept, less read of
    /// each binary.
    Agent {
        /// Name code from DWARF too, not only from symbol tables.
        dwarf_names: bool,
    },
}

/// Off-CPU intervals shorter than this are folded in the kernel by
/// `record` (summed per reason into one run a thread): bounds the event
/// rate on switch-heavy machines. Longer waits under the marker threshold
/// are summed in the kernel per place, waker and reason, in a few runs a
/// thread (`fold_same_max_ns`; the run with the oldest last wait is sent
/// to make room). The agent
/// folds everything under its marker threshold instead: it keeps no
/// off-CPU samples of shorter waits.
const RECORD_OFF_CPU_EMIT_NS: u64 = 100_000;

/// The agent names code from symbol tables only unless `--dwarf-names`
/// (`dwarf_names = true`): blazesym's parsed DWARF was 12-19 MB of its peak
/// beside each of the bench's loads (compiler loop 74.9 → 60.4 MB, a JVM
/// 79.1 → 60.1, `cargo xtask bench --agent --quick`), for inlined frames and
/// lines a fleet's store rarely needs. With it:
/// the most DWARF (all sections, decompressed) the agent reads from one
/// file; a file with more is named from its symbol tables (no inlined calls
/// or lines), with one warning. blazesym's working set grows with the DWARF
/// it reads and the agent holds it while new addresses keep coming: beside a
/// test binary of 131 MB (mostly DWARF) its RSS peaked at 116 MB. 32 MiB
/// admits the debug files of libc (libc6-dbg) and of a CPython build.
const AGENT_MAX_DWARF_BYTES: u64 = 32 << 20;

/// The engine's options, made in one place for `record` and the agent:
/// the collector's and the capture session's, from the sampling options,
/// what is traced and who runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Engine {
    /// How stacks are sampled (checked).
    pub sampling: SamplingOptions,
    /// Samples per second per CPU.
    pub frequency: u64,
    /// What is traced besides samples.
    pub tracing: Tracing,
    /// Who runs it.
    pub role: Role,
}

impl Engine {
    /// The collector, empty.
    pub fn collector(&self) -> Collector {
        let marker_min_ns = self.sampling.off_cpu_threshold_ns();
        let dwarf = self.sampling.call_graph.dwarf();
        // What a copy is cut at where userspace unwinds every copy (the
        // kernel's hand-overs have limits of their own).
        let copy_size = match self.sampling.call_graph {
            CallGraph::DwarfCopy => self.sampling.stack_size as usize,
            _ => 0,
        };
        let (off_cpu, jvm_attach) = (self.tracing.off_cpu, self.tracing.jvm_attach);
        match &self.role {
            Role::Record(scope) => Collector::new(
                if scope.all {
                    PidFilter::All
                } else {
                    PidFilter::Tree(scope.pids.clone())
                },
                CollectorOptions {
                    marker_min_ns,
                    per_cpu: scope.per_cpu,
                    off_cpu,
                    debuginfod: scope.debuginfod,
                    dwarf,
                    keep_short_lived: false,
                    elf_limits: ElfLimits::default(),
                    jvm_attach,
                    table_workers: 2,
                    stack_size: copy_size,
                },
            ),
            Role::Agent { dwarf_names } => Collector::new(
                PidFilter::All,
                CollectorOptions {
                    marker_min_ns,
                    per_cpu: false,
                    off_cpu,
                    debuginfod: false,
                    dwarf,
                    keep_short_lived: true,
                    elf_limits: ElfLimits {
                        max_dwarf_total_bytes: AGENT_MAX_DWARF_BYTES,
                        dwarf: *dwarf_names,
                        ..ElfLimits::default()
                    },
                    jvm_attach,
                    table_workers: 1,
                    stack_size: copy_size,
                },
            ),
        }
    }

    /// The capture session's options.
    pub fn capture(&self) -> CaptureOptions {
        let marker_min_ns = self.sampling.off_cpu_threshold_ns();
        let mut options = CaptureOptions {
            sample_first: true,
            frequency: self.frequency,
            target_tgid: 0,
            stack_copy: self.sampling.stack_copy(),
            kernel_unwind_rows: self.sampling.kernel_unwind_rows(),
            kernel_unwind_processes: crate::unwind::kernel::DEFAULT_PROCESS_ENTRIES,
            off_cpu: self.tracing.off_cpu,
            io: self.tracing.io,
            off_cpu_min_ns: marker_min_ns,
            fold_same_max_ns: 0,
            run_delay_apart_ns: crate::model::recording::RUN_DELAY_APART_MIN_NS,
            snapshot_all: true,
            target_pids: Vec::new(),
            polling: Polling::AGENT,
        };
        if let Role::Record(scope) = &self.role {
            // A command's range starts with it (it runs once everything is loaded).
            options.sample_first = !scope.command;
            // Only a single -p process can be filtered in the kernel; a
            // command's descendants are only known later, so those are
            // filtered in the collector.
            if scope.pids.len() == 1 && !scope.all {
                options.target_tgid = scope.pids[0];
            }
            options.kernel_unwind_processes = scope
                .unwind_processes
                .clamp(16, crate::unwind::kernel::DEFAULT_PROCESS_ENTRIES * 4);
            options.off_cpu_min_ns = RECORD_OFF_CPU_EMIT_NS.min(marker_min_ns);
            // Longer waits under the marker threshold: summed per place and
            // waker while a run is free or theirs (ARCHITECTURE 25).
            options.fold_same_max_ns = marker_min_ns;
            options.snapshot_all = scope.all;
            options.target_pids = scope.pids.clone();
            options.polling = Polling::RECORD;
        }
        options
    }
}

/// Rows of unwind table that `mb` MiB hold.
pub fn unwind_table_rows(mb: u32) -> u32 {
    (mb as u64 * (1 << 20) / std::mem::size_of::<crate::unwind::tables::Row>() as u64)
        .min(u32::MAX as u64 - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(
        stack_size: u32,
        unwind_table_mb: u32,
        off_cpu_threshold_ms: f64,
    ) -> SamplingOptions {
        SamplingOptions {
            call_graph: CallGraph::Dwarf,
            stack_size,
            unwind_table_mb,
            off_cpu_threshold_ms,
        }
    }

    /// Check that each value out of range is refused with the option's name
    /// and the range that works, and that the defaults pass.
    #[test]
    fn out_of_range_values_are_named() {
        assert_eq!(options(16384, 64, 1.0).check(), Ok(()));
        assert_eq!(
            options(100, 64, 1.0).check(),
            Err(SamplingError::StackSize(100))
        );
        assert_eq!(
            options(0, 64, 1.0).check(),
            Err(SamplingError::StackSize(0))
        );
        assert_eq!(
            options(MAX_STACK_COPY as u32 + 512, 64, 1.0).check(),
            Err(SamplingError::StackSize(MAX_STACK_COPY as u32 + 512))
        );
        assert_eq!(
            options(512, 0, 1.0).check(),
            Err(SamplingError::UnwindTableMb(0))
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 3.6e6] {
            assert_eq!(
                options(512, 1, bad).check(),
                Err(SamplingError::OffCpuThreshold),
                "{bad}"
            );
        }
        assert_eq!(
            SamplingError::StackSize(100).to_string(),
            format!("stack-size 100: use a multiple of 512 between 512 and {MAX_STACK_COPY}")
        );
    }

    /// Check that frame pointers copy no stack and load no kernel tables,
    /// and that only in-kernel DWARF takes tables.
    #[test]
    fn what_each_call_graph_uses() {
        let mut o = options(8192, 64, 1.0);
        assert_eq!(
            (o.stack_copy(), o.kernel_unwind_rows()),
            (8192, unwind_table_rows(64))
        );
        o.call_graph = CallGraph::DwarfCopy;
        assert_eq!((o.stack_copy(), o.kernel_unwind_rows()), (8192, 0));
        o.call_graph = CallGraph::Fp;
        assert_eq!((o.stack_copy(), o.kernel_unwind_rows()), (0, 0));
    }
}
