//! Command-line arguments, in perf's conventions.
//!
//! In: argv. Out: a [`Cli`] with one variant per subcommand. Stage one of
//! two: these are raw values; [`crate::record::RecordPlan`] checks them and
//! turns them into the configured pipeline.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// sysprof: a system-wide profiler writing Firefox Profiler profiles.
#[derive(Debug, Parser)]
#[command(name = "sysprof", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record CPU samples with stacks into a profile.
    Record(RecordArgs),
    /// Check that a profile file is structurally valid.
    Validate {
        /// The profile (.json or .json.gz).
        path: PathBuf,
    },
}

/// `sysprof record` options.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// Record every process on every CPU.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Record only these processes (comma-separated pids).
    #[arg(short = 'p', long = "pid", value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Samples per second per CPU.
    #[arg(short = 'F', long = "frequency", default_value_t = 999, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub frequency: u64,
    /// Stop after this many seconds (default: until Ctrl-C or the command exits).
    #[arg(short = 'd', long = "duration")]
    pub duration: Option<f64>,
    /// Where to write the profile; gzip-compressed when it ends in .gz.
    #[arg(short = 'o', long = "output", default_value = "profile.json.gz")]
    pub output: PathBuf,
    /// How user stacks are walked: dwarf (copy the stack, unwind with .eh_frame;
    /// works without frame pointers) or fp (frame pointers, cheaper).
    #[arg(long = "call-graph", default_value = "dwarf", value_parser = ["fp", "dwarf"])]
    pub call_graph: String,
    /// Bytes of user stack copied per sample with --call-graph dwarf
    /// (a multiple of 512, at most 32768).
    #[arg(long = "stack-size", default_value_t = 16384)]
    pub stack_size: u32,
    /// Do not trace context switches (off-CPU time, wakers, run-queue delay).
    #[arg(long = "no-off-cpu")]
    pub no_off_cpu: bool,
    /// Do not trace block I/O requests.
    #[arg(long = "no-io")]
    pub no_io: bool,
    /// Off-CPU intervals at least this long (ms) get a marker.
    #[arg(long = "off-cpu-threshold", default_value_t = 1.0)]
    pub off_cpu_threshold_ms: f64,
    /// Fetch missing debug files from the debuginfod servers in DEBUGINFOD_URLS.
    #[arg(long = "debuginfod")]
    pub debuginfod: bool,
    /// Add one track per CPU showing which thread ran when.
    #[arg(long = "per-cpu")]
    pub per_cpu: bool,
    /// Print no live status line.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Also print every total (samples, losses, unwinding) as key=value.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// The command to run and profile (with its descendants; with -a, the whole system until it exits).
    #[arg(last = true)]
    pub command: Vec<String>,
}
