//! Command-line arguments, in perf's conventions.
//!
//! In: argv. Out: a [`Cli`] with one variant per subcommand. Stage one of
//! two: these are raw values; the commands check them (the sampling
//! options with [`crate::sampling::SamplingOptions::check`]) and turn them
//! into the configured pipeline.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use crate::sampling::{CallGraph, SamplingOptions, Tracing};

/// The version `--version` prints: the crate's and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SYSPROF_GIT_COMMIT"),
    ")"
);

/// sysprof: a system-wide profiler writing Firefox Profiler profiles.
#[derive(Debug, Parser)]
#[command(name = "sysprof", version = VERSION, about, propagate_version = true)]
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
    /// Profile every process continuously into a local store (and exporters),
    /// a window every --window seconds, until SIGTERM or SIGINT.
    Agent(Box<AgentArgs>),
    /// Write a profile of a past time range from the agent's store.
    Show(ShowArgs),
    /// Open a profile in the Firefox Profiler: serve it on 127.0.0.1 and
    /// open the browser at it (or print the link), until Ctrl-C.
    View(ViewArgs),
    /// Print a profile's top functions, off-CPU time, wakers, I/O latency
    /// and run-queue delay in the terminal (or its stacks, folded).
    Report(ReportArgs),
    /// Write the man pages into a directory, or a shell's completions to
    /// stdout (see docs/recording.md).
    Generate {
        /// man (sysprof.1 and a page per subcommand), bash, zsh, fish or elvish.
        what: Generate,
        /// Where the man pages go.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Check that a profile file is structurally valid.
    Validate {
        /// The profile (.json or .json.gz).
        path: PathBuf,
    },
}

/// What `sysprof generate` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[expect(
    missing_docs,
    reason = "a doc comment on a variant would become its help text and change `--help`"
)]
pub enum Generate {
    Man,
    Bash,
    Zsh,
    Fish,
    Elvish,
}

/// What `sysprof show --format` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[expect(
    missing_docs,
    reason = "a doc comment on a variant would become its help text and change `--help`"
)]
pub enum ShowFormat {
    Firefox,
    Folded,
    Pprof,
}

/// What `sysprof report --format` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[expect(
    missing_docs,
    reason = "a doc comment on a variant would become its help text and change `--help`"
)]
pub enum ReportFormat {
    Text,
    Folded,
    Json,
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
    /// `-` writes uncompressed JSON to stdout (the command's own stdout then
    /// goes to stderr); a device or FIFO (`/dev/null`) is written through,
    /// never replaced.
    #[arg(short = 'o', long = "output", default_value = "profile.json.gz")]
    pub output: PathBuf,
    /// What is traced and how stacks are walked (the agent takes the same flags).
    #[command(flatten)]
    pub capture: CaptureArgs,
    /// Process entries of the in-kernel unwinder (tests shrink it to fill
    /// it cheaply).
    #[arg(long = "unwind-processes", default_value_t = crate::unwind::kernel::DEFAULT_PROCESS_ENTRIES, hide = true)]
    pub unwind_processes: u32,
    /// Records a window holds before it is finished and the next begun
    /// (tests shrink it to cut a short recording into many windows).
    #[arg(long = "window-records", default_value_t = crate::sampling::RECORD_WINDOW_RECORDS, hide = true)]
    pub window_records: usize,
    /// Fetch missing debug files from the debuginfod servers in
    /// DEBUGINFOD_URLS (the default when it is set), for at most 10 s in all.
    #[arg(long = "debuginfod", conflicts_with = "no_debuginfod")]
    pub debuginfod: bool,
    /// Fetch nothing from debuginfod, even with DEBUGINFOD_URLS set.
    #[arg(long = "no-debuginfod")]
    pub no_debuginfod: bool,
    /// Add one track per CPU showing which thread ran when (the default
    /// with -a: `report --why` charges run-queue waits to who held the CPU).
    #[arg(long = "per-cpu", conflicts_with = "no_per_cpu")]
    pub per_cpu: bool,
    /// No per-CPU tracks, even with -a.
    #[arg(long = "no-per-cpu")]
    pub no_per_cpu: bool,
    /// Print no live status line.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Also print when recording begins (programs attached) and every
    /// total (samples, losses, unwinding) as key=value.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// When the profile is written, open it in the Firefox Profiler (as `sysprof view`).
    #[arg(long = "open")]
    pub open: bool,
    /// The command to run and profile (with its descendants; with -a, the whole system until it exits).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// What `record` and the agent both trace and how they walk stacks:
/// declared once, flattened into both commands and into the agent's config
/// file (whose keys are these long names). Unset values take the defaults of
/// [`crate::sampling`], the same for both.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct CaptureArgs {
    /// How user stacks are walked: dwarf (in the kernel, with tables compiled
    /// from each binary's .eh_frame: whole stacks at any depth, without frame
    /// pointers), dwarf-copy (copy the top of the stack, unwind it here; the
    /// old way, for comparison) or fp (frame pointers only) [default: dwarf].
    #[arg(long = "call-graph", value_enum)]
    pub call_graph: Option<CallGraph>,
    /// Bytes of user stack copied for unwinding here: per sample with
    /// dwarf-copy; with dwarf only for off-CPU stacks and the first samples of a
    /// process whose tables are not loaded yet (a multiple of 512, at most
    /// 32768) [default: 16384].
    #[arg(long = "stack-size")]
    pub stack_size: Option<u32>,
    /// Most MiB of kernel memory for the in-kernel unwinder's tables (8
    /// bytes per row: libc takes 0.2, rustc's two libraries 20), taken in
    /// 2-MiB chunks as tables need it [default: 64].
    #[arg(long = "unwind-table-mb")]
    pub unwind_table_mb: Option<u32>,
    /// Off-CPU intervals at least this long (ms) get a marker of their own
    /// (with their waker); shorter ones are summed per thread and waker, in
    /// the kernel per place (the agent sums them in the kernel, without a
    /// stack each) [default: 1].
    #[arg(long = "off-cpu-threshold")]
    #[serde(rename = "off-cpu-threshold")]
    pub off_cpu_threshold_ms: Option<f64>,
    /// Do not trace context switches (off-CPU time, wakers, run-queue delay).
    #[arg(long = "no-off-cpu")]
    pub no_off_cpu: bool,
    /// Do not trace block I/O requests.
    #[arg(long = "no-io")]
    pub no_io: bool,
    /// Do not ask running JVMs for their perf maps (which names their
    /// compiled methods: HotSpot's attach, a SIGQUIT and a file in their /tmp).
    #[arg(long = "no-jvm-attach")]
    pub no_jvm_attach: bool,
}

impl CaptureArgs {
    /// These flags laid over `under` (the agent's config file): a value
    /// given here wins; a `no-` given in either holds.
    pub fn over(&self, under: &CaptureArgs) -> CaptureArgs {
        CaptureArgs {
            call_graph: self.call_graph.or(under.call_graph),
            stack_size: self.stack_size.or(under.stack_size),
            unwind_table_mb: self.unwind_table_mb.or(under.unwind_table_mb),
            off_cpu_threshold_ms: self.off_cpu_threshold_ms.or(under.off_cpu_threshold_ms),
            no_off_cpu: self.no_off_cpu || under.no_off_cpu,
            no_io: self.no_io || under.no_io,
            no_jvm_attach: self.no_jvm_attach || under.no_jvm_attach,
        }
    }

    /// The sampling options, the defaults where unset (to check, then to
    /// configure the capture with).
    pub fn sampling(&self) -> SamplingOptions {
        let d = SamplingOptions::DEFAULT;
        SamplingOptions {
            call_graph: self.call_graph.unwrap_or(d.call_graph),
            stack_size: self.stack_size.unwrap_or(d.stack_size),
            unwind_table_mb: self.unwind_table_mb.unwrap_or(d.unwind_table_mb),
            off_cpu_threshold_ms: self.off_cpu_threshold_ms.unwrap_or(d.off_cpu_threshold_ms),
        }
    }

    /// What is traced besides samples.
    pub fn tracing(&self) -> Tracing {
        Tracing {
            off_cpu: !self.no_off_cpu,
            io: !self.no_io,
            jvm_attach: !self.no_jvm_attach,
        }
    }
}

/// `sysprof agent` options. Every one can also be set in the config file
/// (`/etc/sysprof/agent.toml`) under its long name; flags win. The file is
/// read into this same struct (every key optional, unknown keys refused),
/// and [`crate::agent::config::AgentConfig::resolve`] lays one over the other.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct AgentArgs {
    /// Config file (default /etc/sysprof/agent.toml, if it exists).
    #[arg(long = "config")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Samples per second per CPU [default: 19].
    #[arg(short = 'F', long = "frequency")]
    pub frequency: Option<u64>,
    /// Seconds per window: what is collected is finished and stored this often [default: 10].
    #[arg(long = "window")]
    pub window: Option<f64>,
    /// Store directory [default: /var/lib/sysprof].
    #[arg(long = "store")]
    pub store: Option<PathBuf>,
    /// Most the store keeps; the oldest windows go first [default: 1GiB].
    #[arg(long = "retain-size")]
    pub retain_size: Option<String>,
    /// Oldest the store keeps (30m, 12h, 7d) [default: 7d].
    #[arg(long = "retain-age")]
    pub retain_age: Option<String>,
    /// What is traced and how stacks are walked (`record` takes the same flags).
    #[command(flatten)]
    #[serde(flatten)]
    pub capture: CaptureArgs,
    /// Name code from DWARF too (inlined functions, source lines), not only
    /// from symbol tables: 12-19 MB more beside compilers and JVMs.
    #[arg(long = "dwarf-names")]
    pub dwarf_names: bool,
    /// Seconds between health lines on stderr [default: 300].
    #[arg(long = "health-interval")]
    pub health_interval: Option<f64>,
    /// Print a stats line (key=value) for every window.
    #[arg(short = 'v', long = "verbose")]
    #[serde(skip)]
    pub verbose: bool,
    /// Also write each window as a gzip pprof file (profile.proto) in this directory.
    #[arg(long = "pprof-dir")]
    pub pprof_dir: Option<PathBuf>,
    /// Send each window as OTLP profiles over gRPC (http://HOST:4317 or https://...).
    #[arg(long = "otlp-endpoint")]
    pub otlp_endpoint: Option<String>,
    /// CA certificates (PEM) for an https OTLP endpoint [default: the system's].
    #[arg(long = "otlp-ca")]
    pub otlp_ca: Option<PathBuf>,
    /// gRPC metadata sent with every OTLP request, KEY=VALUE (repeatable).
    #[arg(long = "otlp-header")]
    #[serde(rename = "otlp-header")]
    pub otlp_headers: Vec<String>,
    /// Send each window to a Pyroscope server (http://HOST:4040).
    #[arg(long = "pyroscope-url")]
    pub pyroscope_url: Option<String>,
    /// Pyroscope basic-auth user (password from --pyroscope-password or
    /// SYSPROF_PYROSCOPE_PASSWORD).
    #[arg(long = "pyroscope-user")]
    pub pyroscope_user: Option<String>,
    /// Pyroscope basic-auth password.
    #[arg(long = "pyroscope-password")]
    pub pyroscope_password: Option<String>,
    /// Pyroscope bearer token (or SYSPROF_PYROSCOPE_TOKEN).
    #[arg(long = "pyroscope-token")]
    pub pyroscope_token: Option<String>,
    /// Pyroscope tenant, sent as X-Scope-OrgID.
    #[arg(long = "pyroscope-tenant")]
    pub pyroscope_tenant: Option<String>,
    /// Serve Prometheus metrics at this address (e.g. 127.0.0.1:9465).
    #[arg(long = "metrics")]
    pub metrics: Option<String>,
}

/// `sysprof show` options.
#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The agent's store.
    #[arg(long = "store", default_value = "/var/lib/sysprof")]
    pub store: PathBuf,
    /// Start of the range: a duration ago (30s, 10m, 2h, 1d) or a local time
    /// (03:12, 03:12:30, 2026-11-22T03:12:00).
    #[arg(long = "since", default_value = "10m")]
    pub since: String,
    /// End of the range, as --since [default: now].
    #[arg(long = "until")]
    pub until: Option<String>,
    /// Only these processes (comma-separated pids).
    #[arg(short = 'p', long = "pid", value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Only processes with this name.
    #[arg(long = "comm")]
    pub comm: Option<String>,
    /// Only processes in this container (id or its first 12 digits) or systemd unit.
    #[arg(long = "container")]
    pub container: Option<String>,
    /// Where to write [default: profile.json.gz for firefox, profile.pb.gz for pprof, stdout for folded].
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Output format: firefox (Firefox Profiler), folded (flamegraph.pl,
    /// inferno, speedscope) or pprof (gzip profile.proto).
    #[arg(long = "format", value_enum, default_value_t = ShowFormat::Firefox)]
    pub format: ShowFormat,
    /// List the windows the store holds instead.
    #[arg(long = "list")]
    pub list: bool,
    /// With --list: what the segments' bytes hold, per kind (samples,
    /// off-CPU time, waits, I/O, frames, ...), in bytes per sample, for the
    /// compacted segments and the rest.
    #[arg(long = "sizes", requires = "list")]
    pub sizes: bool,
}

/// `sysprof view` options.
#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// The profile (.json or .json.gz).
    pub path: PathBuf,
    /// Print the link only; do not start a browser.
    #[arg(long = "no-open")]
    pub no_open: bool,
    /// Port on 127.0.0.1 to serve from [default: a free one].
    #[arg(long = "port", default_value_t = 0)]
    pub port: u16,
}

/// `sysprof report` options.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The profile (.json or .json.gz) from `record` or `show`.
    pub path: PathBuf,
    /// Rows per table.
    #[arg(long = "top", default_value_t = 20)]
    pub top: usize,
    /// Only these processes (comma-separated pids).
    #[arg(short = 'p', long = "pid", value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Only these threads (comma-separated tids).
    #[arg(short = 't', long = "tid", value_delimiter = ',')]
    pub tids: Vec<u32>,
    /// Only threads whose process or thread name is this.
    #[arg(long = "comm")]
    pub comm: Option<String>,
    /// text (tables and histograms) or folded (collapsed stacks for
    /// flamegraph.pl and inferno, one line per stack, CPU samples); json
    /// with --why.
    #[arg(long = "format", value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Where the off-CPU time of this thread (a tid), or of every thread of
    /// this process (a pid), went: charged along the chain of its wakers
    /// to someone running, a run queue, a device, a timer.
    #[arg(long = "why", value_name = "TID|PID")]
    pub why: Option<u32>,
    /// With --why: only from this time (ms into the profile).
    #[arg(long = "from", value_name = "MS", requires = "why")]
    pub from: Option<f64>,
    /// With --why: only up to this time (ms into the profile).
    #[arg(long = "to", value_name = "MS", requires = "why")]
    pub to: Option<f64>,
    /// With --why: also write the profile again here (.json or .json.gz),
    /// each of those threads' waits marked with where its time went ("Wait
    /// charged to": the disk, a thread running, a CPU's holder, a timer),
    /// to open in the Firefox Profiler (`sysprof view PATH`).
    #[arg(long = "annotate", value_name = "PATH", requires = "why")]
    pub annotate: Option<PathBuf>,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sysprof").chain(argv.iter().copied()))
    }

    /// Check that each accepted spelling of --call-graph, --format and
    /// generate's argument parses to its own value, and that anything else
    /// is clap's invalid-value error (exit 2), never a default such as Elvish.
    #[test]
    fn closed_choices_parse_or_are_refused() {
        for (word, want) in [
            ("fp", CallGraph::Fp),
            ("dwarf", CallGraph::Dwarf),
            ("dwarf-copy", CallGraph::DwarfCopy),
        ] {
            match parse(&["record", "-a", "--call-graph", word])
                .unwrap()
                .command
            {
                Command::Record(a) => assert_eq!(a.capture.sampling().call_graph, want),
                _ => unreachable!(),
            }
        }
        match parse(&["record", "-a"]).unwrap().command {
            Command::Record(a) => {
                assert_eq!(
                    a.capture.sampling().call_graph,
                    CallGraph::Dwarf,
                    "the default"
                )
            }
            _ => unreachable!(),
        }
        for (word, want) in [
            ("man", Generate::Man),
            ("bash", Generate::Bash),
            ("zsh", Generate::Zsh),
            ("fish", Generate::Fish),
            ("elvish", Generate::Elvish),
        ] {
            match parse(&["generate", word]).unwrap().command {
                Command::Generate { what, .. } => assert_eq!(what, want),
                _ => unreachable!(),
            }
        }
        match parse(&["show", "--format", "pprof"]).unwrap().command {
            Command::Show(a) => assert_eq!(a.format, ShowFormat::Pprof),
            _ => unreachable!(),
        }
        match parse(&["report", "p.json", "--format", "folded"])
            .unwrap()
            .command
        {
            Command::Report(a) => assert_eq!(a.format, ReportFormat::Folded),
            _ => unreachable!(),
        }
        for bad in [
            &["generate", "powershell"][..],
            &["record", "-a", "--call-graph", "lbr"],
            &["agent", "--call-graph", "Dwarf"],
            &["show", "--format", "json"],
            &["report", "p", "--format", "pprof"],
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{bad:?}");
            assert_eq!(e.exit_code(), 2);
        }
    }
}
