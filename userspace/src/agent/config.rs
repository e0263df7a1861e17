//! The agent's settings: flags over the config file over defaults.
//!
//! In: [`AgentArgs`] and, if present, `/etc/sysprof/agent.toml` (or
//! `--config FILE`), whose keys are the long flag names
//! (`frequency = 19`, `retain-size = "1GiB"`, `no-io = true`). Out: an
//! [`AgentConfig`] with every value checked, or one line saying which value
//! is wrong and what would be right. Also the parsers of sizes (`512MiB`)
//! and durations (`7d`) that `show` uses for `--since`.

use crate::units::{parse_duration, parse_size};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::AgentArgs;

/// Where the config file is read from when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/sysprof/agent.toml";
/// Where the store is when neither flag nor file says.
pub const DEFAULT_STORE: &str = "/var/lib/sysprof";

/// Off-CPU intervals shorter than this are folded in the kernel by default
/// (summed per thread and reason, no stack, no event each). Chosen from
/// `cargo xtask bench` (agent section, switch workload): see the README.
pub const DEFAULT_OFF_CPU_THRESHOLD_MS: f64 = 1.0;

/// The config file, as written. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileConfig {
    frequency: Option<u64>,
    window: Option<f64>,
    store: Option<PathBuf>,
    retain_size: Option<String>,
    retain_age: Option<String>,
    off_cpu_threshold: Option<f64>,
    call_graph: Option<String>,
    stack_size: Option<u32>,
    unwind_table_mb: Option<u32>,
    no_off_cpu: Option<bool>,
    no_io: Option<bool>,
    health_interval: Option<f64>,
    pprof_dir: Option<PathBuf>,
    otlp_endpoint: Option<String>,
    otlp_ca: Option<PathBuf>,
    otlp_header: Option<Vec<String>>,
    pyroscope_url: Option<String>,
    pyroscope_user: Option<String>,
    pyroscope_password: Option<String>,
    pyroscope_token: Option<String>,
    pyroscope_tenant: Option<String>,
    metrics: Option<String>,
}

/// Where finished windows are sent besides the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExportConfig {
    /// Write each window as a gzip pprof file here.
    pub pprof_dir: Option<PathBuf>,
    /// OTLP gRPC endpoint (`http://host:4317`, `https://...`).
    pub otlp_endpoint: Option<String>,
    /// CA bundle for an `https://` OTLP endpoint (default: the system's roots).
    pub otlp_ca: Option<PathBuf>,
    /// Extra gRPC metadata, (key, value).
    pub otlp_headers: Vec<(String, String)>,
    /// Pyroscope server URL.
    pub pyroscope_url: Option<String>,
    /// Pyroscope basic auth user and password.
    pub pyroscope_basic: Option<(String, String)>,
    /// Pyroscope bearer token.
    pub pyroscope_token: Option<String>,
    /// Pyroscope tenant (`X-Scope-OrgID`).
    pub pyroscope_tenant: Option<String>,
    /// Serve Prometheus metrics on this address.
    pub metrics: Option<std::net::SocketAddr>,
}

/// Everything the agent runs with, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Length of a window.
    pub window: Duration,
    /// The store directory.
    pub store: PathBuf,
    /// Most bytes the store keeps.
    pub retain_size: u64,
    /// Oldest data the store keeps.
    pub retain_age: Duration,
    /// Off-CPU intervals shorter than this (ms) are folded in the kernel.
    pub off_cpu_threshold_ms: f64,
    /// DWARF unwinding of copied user stacks (else frame pointers).
    pub dwarf: bool,
    /// Unwind in the kernel, with tables of this many rows (0: do not).
    pub kernel_unwind_rows: u32,
    /// User stack bytes copied per sample (DWARF mode).
    pub stack_size: u32,
    /// Trace context switches.
    pub off_cpu: bool,
    /// Trace block I/O.
    pub io: bool,
    /// How often the health line is printed.
    pub health_interval: Duration,
    /// Print a stats line per window.
    pub verbose: bool,
    /// Exporters.
    pub export: ExportConfig,
}

fn read_file_config(path: &Path, must_exist: bool) -> Result<FileConfig, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => return Ok(FileConfig::default()),
        Err(e) => return Err(format!("cannot read the config file {}: {e}", path.display())),
    };
    toml::from_str(&text).map_err(|e| {
        // toml's message spans lines (position, the line quoted, a caret, the cause): keep the position and the cause.
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let position = lines.first().copied().unwrap_or("").trim_start_matches("TOML parse error ");
        let cause = lines.last().copied().unwrap_or("");
        format!("config file {} ({position}): {cause}; its keys are the agent's long flag names (see `sysprof agent --help`)", path.display())
    })
}

impl AgentConfig {
    /// Flags over the file over defaults, checked.
    pub fn resolve(args: &AgentArgs) -> Result<AgentConfig, String> {
        let file = match &args.config {
            Some(p) => read_file_config(p, true)?,
            None => read_file_config(Path::new(DEFAULT_CONFIG), false)?,
        };
        let frequency = args.frequency.or(file.frequency).unwrap_or(19);
        if !(1..=10_000).contains(&frequency) {
            return Err(format!("frequency {frequency}: use 1 to 10000 samples per second"));
        }
        let window = args.window.or(file.window).unwrap_or(10.0);
        if !(1.0..=3600.0).contains(&window) {
            return Err(format!("window {window}: use 1 to 3600 seconds"));
        }
        let retain_size = match args.retain_size.as_deref().or(file.retain_size.as_deref()) {
            Some(s) => parse_size(s).map_err(|e| format!("retain-size: {e}"))?,
            None => 1 << 30,
        };
        let retain_age = match args.retain_age.as_deref().or(file.retain_age.as_deref()) {
            Some(s) => parse_duration(s).map_err(|e| format!("retain-age: {e}"))?,
            None => Duration::from_secs(7 * 86400),
        };
        let off_cpu_threshold_ms = args.off_cpu_threshold_ms.or(file.off_cpu_threshold).unwrap_or(DEFAULT_OFF_CPU_THRESHOLD_MS);
        if !(0.0..3.6e6).contains(&off_cpu_threshold_ms) {
            return Err("off-cpu-threshold: a number of milliseconds from 0 to 3600000".into());
        }
        let call_graph = args.call_graph.clone().or(file.call_graph).unwrap_or_else(|| "dwarf".into());
        if !["dwarf", "dwarf-copy", "fp"].contains(&call_graph.as_str()) {
            return Err(format!("call-graph {call_graph:?}: use dwarf, dwarf-copy or fp"));
        }
        let unwind_table_mb = args.unwind_table_mb.or(file.unwind_table_mb).unwrap_or(64);
        if !(1..=4096).contains(&unwind_table_mb) {
            return Err(format!("unwind-table-mb {unwind_table_mb}: use 1 to 4096"));
        }
        let stack_size = args.stack_size.or(file.stack_size).unwrap_or(16384);
        if stack_size == 0 || stack_size as usize > crate::bpf::abi::MAX_STACK_COPY || stack_size % 512 != 0 {
            return Err(format!("stack-size {stack_size}: use a multiple of 512 between 512 and {}", crate::bpf::abi::MAX_STACK_COPY));
        }
        let health = args.health_interval.or(file.health_interval).unwrap_or(300.0);
        if !(health >= 1.0 && health.is_finite()) {
            return Err(format!("health-interval {health}: at least 1 second"));
        }
        let mut headers = Vec::new();
        for h in args.otlp_headers.iter().chain(file.otlp_header.iter().flatten()) {
            let (k, v) = h.split_once('=').ok_or_else(|| format!("otlp-header {h:?}: write it KEY=VALUE"))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let metrics = match args.metrics.clone().or(file.metrics) {
            Some(a) => Some(a.parse().map_err(|_| format!("metrics {a:?}: give an address and port, like 127.0.0.1:9465"))?),
            None => None,
        };
        let pyroscope_user = args.pyroscope_user.clone().or(file.pyroscope_user);
        let pyroscope_password = args.pyroscope_password.clone().or(file.pyroscope_password).or_else(|| std::env::var("SYSPROF_PYROSCOPE_PASSWORD").ok());
        let export = ExportConfig {
            pprof_dir: args.pprof_dir.clone().or(file.pprof_dir),
            otlp_endpoint: args.otlp_endpoint.clone().or(file.otlp_endpoint),
            otlp_ca: args.otlp_ca.clone().or(file.otlp_ca),
            otlp_headers: headers,
            pyroscope_url: args.pyroscope_url.clone().or(file.pyroscope_url),
            pyroscope_basic: pyroscope_user.map(|u| (u, pyroscope_password.unwrap_or_default())),
            pyroscope_token: args.pyroscope_token.clone().or(file.pyroscope_token).or_else(|| std::env::var("SYSPROF_PYROSCOPE_TOKEN").ok()),
            pyroscope_tenant: args.pyroscope_tenant.clone().or(file.pyroscope_tenant),
            metrics,
        };
        if let Some(u) = &export.otlp_endpoint {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!("otlp-endpoint {u:?}: give a URL, http://HOST:4317 or https://HOST:4317"));
            }
        }
        if let Some(u) = &export.pyroscope_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!("pyroscope-url {u:?}: give a URL, like http://HOST:4040"));
            }
        }
        Ok(AgentConfig {
            frequency,
            window: Duration::from_secs_f64(window),
            store: args.store.clone().or(file.store).unwrap_or_else(|| PathBuf::from(DEFAULT_STORE)),
            retain_size,
            retain_age,
            off_cpu_threshold_ms,
            dwarf: call_graph != "fp",
            kernel_unwind_rows: if call_graph == "dwarf" { crate::record::unwind_table_rows(unwind_table_mb) } else { 0 },
            stack_size,
            off_cpu: !(args.no_off_cpu || file.no_off_cpu == Some(true)),
            io: !(args.no_io || file.no_io == Some(true)),
            health_interval: Duration::from_secs_f64(health),
            verbose: args.verbose,
            export,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> AgentArgs {
        let mut full = vec!["sysprof", "agent"];
        full.extend(argv);
        match crate::cli::Cli::parse_from(full).command {
            crate::cli::Command::Agent(a) => *a,
            _ => unreachable!(),
        }
    }

    /// Check sizes and durations in the units people write, and that
    /// nonsense is refused with the units that would work.
    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("1 parsec").unwrap_err().contains("MiB"));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(604800));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5m").is_err());
    }

    /// Check that the file's values apply, flags win over them, and an
    /// unknown key is one line naming the file.
    #[test]
    fn flags_over_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("sysprof-agent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.toml");
        std::fs::write(&f, "frequency = 49\nretain-size = \"64MiB\"\nno-io = true\nstore = \"/srv/prof\"\n").unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap(), "-F", "29"])).unwrap();
        assert_eq!(c.frequency, 29, "the flag wins");
        assert_eq!(c.retain_size, 64 << 20, "from the file");
        assert!(!c.io);
        assert_eq!(c.store, PathBuf::from("/srv/prof"));
        assert_eq!(c.window, Duration::from_secs(10), "the default");
        std::fs::write(&f, "frequncy = 49\n").unwrap();
        let e = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert!(e.contains("agent.toml") && e.contains("frequncy") && !e.contains('\n'), "{e}");
        let e = AgentConfig::resolve(&args(&["--config", dir.join("missing.toml").to_str().unwrap()])).unwrap_err();
        assert!(e.contains("missing.toml"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that the example config of packaging/ is read as it says:
    /// with its exporter lines uncommented, every exporter is configured.
    #[test]
    fn the_packaged_example_parses() {
        let example = include_str!("../../../packaging/agent.toml");
        let dir = std::env::temp_dir().join(format!("sysprof-agent-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.toml");
        std::fs::write(&f, example).unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap();
        assert_eq!((c.frequency, c.window, c.retain_size), (19, Duration::from_secs(10), 1 << 30));
        assert_eq!(c.export.metrics, Some("127.0.0.1:9465".parse().unwrap()));
        let uncommented: String = example.lines().map(|l| l.strip_prefix("# ").filter(|l| l.contains(" = ")).unwrap_or(l)).collect::<Vec<_>>().join("\n");
        std::fs::write(&f, uncommented).unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap();
        assert!(c.export.pprof_dir.is_some() && c.export.otlp_endpoint.is_some() && c.export.pyroscope_url.is_some());
        assert_eq!(c.export.otlp_headers.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
