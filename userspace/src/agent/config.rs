//! The agent's settings: flags over the config file over defaults.
//!
//! In: [`AgentArgs`] and, if present, `/etc/sysprof/agent.toml` (or
//! `--config FILE`), whose keys are the long flag names
//! (`frequency = 19`, `retain-size = "1GiB"`, `no-io = true`), read into an
//! [`AgentArgs`] too. Out: an [`AgentConfig`] with every value checked (the
//! sampling options by [`SamplingOptions::check`], as `record`'s), or a
//! [`ConfigError`]: one line saying which value is wrong and what would be right.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::AgentArgs;
use crate::sampling::{SamplingError, SamplingOptions, Tracing};
use crate::units::{parse_duration, parse_size};

/// Where the config file is read from when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/sysprof/agent.toml";
/// Where the store is when neither flag nor file says.
pub const DEFAULT_STORE: &str = "/var/lib/sysprof";

/// Why the agent's settings are unusable; each names the setting by its
/// long name (a flag or a config file key) and says what would be right.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists (or was named) and cannot be read.
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not TOML, or has an unknown key or a value of the wrong type.
    #[error("config file {} ({position}): {cause}; its keys are the agent's long flag names (see `sysprof agent --help`)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where in it (toml's "at line 1, column 1").
        position: String,
        /// What is wrong there.
        cause: String,
    },
    /// Samples per second out of range.
    #[error("frequency {0}: use 1 to 10000 samples per second")]
    Frequency(u64),
    /// Window length out of range.
    #[error("window {0}: use 1 to 3600 seconds")]
    Window(f64),
    /// Not a size.
    #[error("retain-size: {0}")]
    RetainSize(#[source] crate::units::ParseError),
    /// Not a duration.
    #[error("retain-age: {0}")]
    RetainAge(#[source] crate::units::ParseError),
    /// A sampling option out of range.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// Health lines more often than every second.
    #[error("health-interval {0}: at least 1 second")]
    HealthInterval(f64),
    /// An OTLP header without `=`.
    #[error("otlp-header {0:?}: write it KEY=VALUE")]
    OtlpHeader(String),
    /// Not a socket address.
    #[error("metrics {0:?}: give an address and port, like 127.0.0.1:9465")]
    Metrics(String),
    /// Not an http(s) URL.
    #[error("otlp-endpoint {0:?}: give a URL, http://HOST:4317 or https://HOST:4317")]
    OtlpEndpoint(String),
    /// Not an http(s) URL.
    #[error("pyroscope-url {0:?}: give a URL, like http://HOST:4040")]
    PyroscopeUrl(String),
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
    /// How stacks are walked, and the off-CPU threshold (intervals shorter
    /// than it are folded in the kernel).
    pub sampling: SamplingOptions,
    /// What is traced besides samples.
    pub tracing: Tracing,
    /// Name code from DWARF too, not only from symbol tables.
    pub dwarf_names: bool,
    /// How often the health line is printed.
    pub health_interval: Duration,
    /// Print a stats line per window.
    pub verbose: bool,
    /// Exporters.
    pub export: ExportConfig,
}

/// The config file at `path` (all unset when it is absent and need not exist).
fn read_file_config(path: &Path, must_exist: bool) -> Result<AgentArgs, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
            return Ok(AgentArgs::default())
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    toml::from_str(&text).map_err(|e| {
        // toml's message spans lines (position, the line quoted, a caret, the cause): keep the position and the cause.
        let message = e.to_string();
        let lines: Vec<&str> = message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let mut position = lines
            .first()
            .copied()
            .unwrap_or("")
            .trim_start_matches("TOML parse error ")
            .to_string();
        if e.span().is_some_and(|s| s.is_empty()) {
            // A value refused inside the flattened flags has lost its place
            // (serde saw it through a buffer): find the key that fails alone.
            position = match failing_key_line(&text, e.message()) {
                Some(line) => format!("at line {line}"),
                None => "its line not known".into(),
            };
        }
        let cause = lines.last().copied().unwrap_or("").to_string();
        ConfigError::Parse {
            path: path.to_path_buf(),
            position,
            cause,
        }
    })
}

/// The line (from 1) of the top-level key of a config file that makes the
/// error `message`: the key refused on its own with that very message,
/// found as a key (bare, quoted or dotted) or as a table's header. None
/// when no key says so.
fn failing_key_line(text: &str, message: &str) -> Option<usize> {
    let table: toml::Table = text.parse().ok()?;
    let key = table.into_iter().find_map(|(k, v)| {
        let mut one = toml::Table::new();
        one.insert(k.clone(), v);
        let lone = toml::Value::Table(one).try_into::<AgentArgs>().err()?;
        (lone.message() == message).then_some(k)
    })?;
    let names_key = |rest: &str| {
        let rest = rest.trim_start();
        rest.starts_with('=') || rest.starts_with('.') || rest.starts_with(']')
    };
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches('[').trim_start();
            [format!("\"{key}\""), format!("'{key}'"), key.clone()]
                .iter()
                .any(|k| l.strip_prefix(k.as_str()).is_some_and(names_key))
        })
        .map(|i| i + 1)
}

impl AgentConfig {
    /// Flags over the file over defaults, checked.
    pub fn resolve(args: &AgentArgs) -> Result<AgentConfig, ConfigError> {
        let file = match &args.config {
            Some(p) => read_file_config(p, true)?,
            None => read_file_config(Path::new(DEFAULT_CONFIG), false)?,
        };
        let frequency = args.frequency.or(file.frequency).unwrap_or(19);
        if !(1..=10_000).contains(&frequency) {
            return Err(ConfigError::Frequency(frequency));
        }
        let window = args.window.or(file.window).unwrap_or(10.0);
        if !(1.0..=3600.0).contains(&window) {
            return Err(ConfigError::Window(window));
        }
        let retain_size = match args.retain_size.as_deref().or(file.retain_size.as_deref()) {
            Some(s) => parse_size(s).map_err(ConfigError::RetainSize)?,
            None => 1 << 30,
        };
        let retain_age = match args.retain_age.as_deref().or(file.retain_age.as_deref()) {
            Some(s) => parse_duration(s).map_err(ConfigError::RetainAge)?,
            None => Duration::from_secs(7 * 86400),
        };
        let capture = args.capture.over(&file.capture);
        let sampling = capture.sampling();
        sampling.check()?;
        let health = args
            .health_interval
            .or(file.health_interval)
            .unwrap_or(300.0);
        if !(health >= 1.0 && health.is_finite()) {
            return Err(ConfigError::HealthInterval(health));
        }
        let mut headers = Vec::new();
        for h in args.otlp_headers.iter().chain(&file.otlp_headers) {
            let (k, v) = h
                .split_once('=')
                .ok_or_else(|| ConfigError::OtlpHeader(h.clone()))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let metrics = match args.metrics.clone().or(file.metrics) {
            Some(a) => Some(a.parse().map_err(|_| ConfigError::Metrics(a))?),
            None => None,
        };
        let pyroscope_user = args.pyroscope_user.clone().or(file.pyroscope_user);
        let pyroscope_password = args
            .pyroscope_password
            .clone()
            .or(file.pyroscope_password)
            .or_else(|| std::env::var("SYSPROF_PYROSCOPE_PASSWORD").ok());
        let export = ExportConfig {
            pprof_dir: args.pprof_dir.clone().or(file.pprof_dir),
            otlp_endpoint: args.otlp_endpoint.clone().or(file.otlp_endpoint),
            otlp_ca: args.otlp_ca.clone().or(file.otlp_ca),
            otlp_headers: headers,
            pyroscope_url: args.pyroscope_url.clone().or(file.pyroscope_url),
            pyroscope_basic: pyroscope_user.map(|u| (u, pyroscope_password.unwrap_or_default())),
            pyroscope_token: args
                .pyroscope_token
                .clone()
                .or(file.pyroscope_token)
                .or_else(|| std::env::var("SYSPROF_PYROSCOPE_TOKEN").ok()),
            pyroscope_tenant: args.pyroscope_tenant.clone().or(file.pyroscope_tenant),
            metrics,
        };
        if let Some(u) = &export.otlp_endpoint {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(ConfigError::OtlpEndpoint(u.clone()));
            }
        }
        if let Some(u) = &export.pyroscope_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(ConfigError::PyroscopeUrl(u.clone()));
            }
        }
        Ok(AgentConfig {
            frequency,
            window: Duration::from_secs_f64(window),
            store: args
                .store
                .clone()
                .or(file.store)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STORE)),
            retain_size,
            retain_age,
            sampling,
            tracing: capture.tracing(),
            dwarf_names: args.dwarf_names || file.dwarf_names,
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

    /// Check that the file's values apply, flags win over them, and an
    /// unknown key is one line naming the file.
    #[test]
    fn flags_over_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("sysprof-agent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.toml");
        std::fs::write(
            &f,
            "frequency = 49\nretain-size = \"64MiB\"\nno-io = true\nstore = \"/srv/prof\"\n",
        )
        .unwrap();
        let c =
            AgentConfig::resolve(&args(&["--config", f.to_str().unwrap(), "-F", "29"])).unwrap();
        assert_eq!(c.frequency, 29, "the flag wins");
        assert_eq!(c.retain_size, 64 << 20, "from the file");
        assert!(!c.tracing.io);
        assert_eq!(c.store, PathBuf::from("/srv/prof"));
        assert_eq!(c.window, Duration::from_secs(10), "the default");
        std::fs::write(&f, "frequncy = 49\n").unwrap();
        let e = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agent.toml") && e.contains("frequncy") && !e.contains('\n'),
            "{e}"
        );
        // Keys of the flags both commands share (flattened in) keep their line too.
        for (text, line, cause) in [
            ("frequency = 49\n\nstak-size = 512\n", 3, "stak-size"),
            ("window = 20\nno-io = 1\n", 2, "expected a boolean"),
            (
                "# the sampling\n\"stack-size\" = \"big\"\n",
                2,
                "expected u32",
            ),
            ("a-unknown = 1\nno-io = 3\n", 2, "expected a boolean"),
            ("window = 20\n\n[call-graph]\nx = 1\n", 3, "unknown variant"),
            ("window = 20\n'no-io' = 3\n", 2, "expected a boolean"),
            ("window = 20\nno-io.x = 3\n", 2, "expected a boolean"),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()]))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("(at line {line}")) && e.contains(cause),
                "{text:?}: {e}"
            );
        }
        let e = AgentConfig::resolve(&args(&[
            "--config",
            dir.join("missing.toml").to_str().unwrap(),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing.toml"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that the file's keys whose names differ from the fields
    /// (off-cpu-threshold, otlp-header) and the call graph reach the
    /// settings, and that keys no flag of the file has (verbose, config) are refused.
    #[test]
    fn file_keys_are_the_long_flag_names() {
        let dir = std::env::temp_dir().join(format!("sysprof-agent-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.toml");
        std::fs::write(&f, "off-cpu-threshold = 2.5\notlp-header = [\"A=b\"]\ncall-graph = \"dwarf-copy\"\nstack-size = 8192\nno-off-cpu = true\n").unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap();
        assert_eq!(c.sampling.off_cpu_threshold_ms, 2.5);
        assert_eq!(c.export.otlp_headers, [("a".to_string(), "b".to_string())]);
        assert_eq!(
            (
                c.sampling.call_graph,
                c.sampling.stack_copy(),
                c.sampling.kernel_unwind_rows()
            ),
            (crate::sampling::CallGraph::DwarfCopy, 8192, 0)
        );
        assert!(!c.tracing.off_cpu && c.tracing.io);
        for key in ["verbose = true", "config = \"/x\""] {
            std::fs::write(&f, key).unwrap();
            let e = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap_err();
            assert!(matches!(e, ConfigError::Parse { .. }), "{key}: {e}");
        }
        std::fs::write(&f, "stack-size = 100\n").unwrap();
        let e = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "stack-size 100: use a multiple of 512 between 512 and {}",
                crate::bpf::abi::MAX_STACK_COPY
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that the example config of packaging/ is read as it says:
    /// with its exporter lines uncommented, every exporter is configured.
    #[test]
    fn the_packaged_example_parses() {
        let example = include_str!("../../../packaging/agent.toml");
        let dir =
            std::env::temp_dir().join(format!("sysprof-agent-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.toml");
        std::fs::write(&f, example).unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap();
        assert_eq!(
            (c.frequency, c.window, c.retain_size),
            (19, Duration::from_secs(10), 1 << 30)
        );
        assert_eq!(c.export.metrics, Some("127.0.0.1:9465".parse().unwrap()));
        let uncommented: String = example
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|l| l.contains(" = "))
                    .unwrap_or(l)
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&f, uncommented).unwrap();
        let c = AgentConfig::resolve(&args(&["--config", f.to_str().unwrap()])).unwrap();
        assert!(
            c.export.pprof_dir.is_some()
                && c.export.otlp_endpoint.is_some()
                && c.export.pyroscope_url.is_some()
        );
        assert_eq!(c.export.otlp_headers.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
