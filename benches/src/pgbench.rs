//! The server section of `cargo xtask bench`: PostgreSQL's own pgbench
//! (8 clients, 2 threads) alone and under each system-wide profiler.
//!
//! In: the sysprof binary, perf if installed, PostgreSQL from Debian's
//! packages (installed with apt when missing; its first cluster started for
//! the section and stopped again if it was down). Out: a markdown table and
//! JSON, per configuration over alternating rounds: pgbench's throughput
//! and its change from alone, the profiler's own CPU (wait4's rusage, its
//! children included) and peak RSS (VmHWM), what it lost (sysprof's stats
//! line; perf's "lost" chunks and samples), and for sysprof the time from
//! its launch to its first sample and to everything attached, and its
//! loading per BPF object and program (the verifier's time). One more
//! sysprof run with the kernel's BPF statistics on: what each of its
//! programs costs in the kernel ([`kernel_cost`]). Then
//! `sysprof report --why` of pgbench's main thread in the last sysprof
//! recording: its wall time, CPU and peak RSS, and the share of the
//! thread's waiting it left as "waiting (chain too deep)". Nothing is
//! asserted.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::kernel_cost;
use serde_json::json;

/// The scratch database's name (the tests use the same one).
const DATABASE: &str = "sysprof_bench";

/// The first cluster, running; stopped on drop if it was started here.
struct Cluster {
    version: String,
    name: String,
    started_here: bool,
}

impl Cluster {
    fn start() -> Result<Cluster> {
        if Command::new("pgbench").arg("--version").output().is_err() {
            super::install_with_apt("postgresql");
        }
        let listed = Command::new("pg_lsclusters")
            .arg("--no-header")
            .output()
            .context("pg_lsclusters (PostgreSQL from Debian's packages)")?;
        let text = String::from_utf8_lossy(&listed.stdout).into_owned();
        let fields: Vec<&str> = text
            .lines()
            .next()
            .context("no PostgreSQL cluster (pg_lsclusters lists none)")?
            .split_whitespace()
            .collect();
        if fields.len() < 4 {
            bail!("pg_lsclusters: {text}");
        }
        let mut cluster = Cluster {
            version: fields[0].into(),
            name: fields[1].into(),
            started_here: false,
        };
        if fields[3] != "online" {
            let ok = Command::new("pg_ctlcluster")
                .args([&cluster.version, &cluster.name, "start"])
                .status()?
                .success();
            if !ok {
                bail!(
                    "pg_ctlcluster {} {} start failed",
                    cluster.version,
                    cluster.name
                );
            }
            cluster.started_here = true;
        }
        let exists = as_postgres(
            "psql",
            &[
                "-tAc",
                &format!("select 1 from pg_database where datname = '{DATABASE}'"),
            ],
        )?;
        if String::from_utf8_lossy(&exists.stdout).trim() != "1" {
            as_postgres("createdb", &[DATABASE])?;
            as_postgres("pgbench", &["-i", "-q", "-s", "5", DATABASE])?;
        }
        Ok(cluster)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started_here {
            let _ = Command::new("pg_ctlcluster")
                .args([&self.version, &self.name, "stop"])
                .status();
        }
    }
}

fn as_postgres(program: &str, args: &[&str]) -> Result<std::process::Output> {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", program])
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("{program}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out)
}

/// pgbench for `secs`: its throughput (transactions a second, without the
/// initial connection time).
fn pgbench(secs: u64) -> Result<f64> {
    let out = as_postgres(
        "pgbench",
        &["-c", "8", "-j", "2", "-T", &secs.to_string(), DATABASE],
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {text}"))
}

/// One configuration's run.
#[derive(Default, Clone)]
pub(crate) struct Run {
    /// The workload's throughput (pgbench's tps; the storm's reads a second).
    pub(crate) tps: f64,
    cpu_ms: f64,
    /// The profiler's CPU up to the moment pgbench ended (its threads'
    /// utime + stime, before SIGINT): what it took while the server ran,
    /// apart from what it does after the stop (sysprof writes the profile,
    /// perf flushes its buffers; perf's reading is a later command).
    recording_cpu_ms: Option<f64>,
    rss_mb: f64,
    lost: f64,
    first_sample_ms: Option<f64>,
    attached_ms: Option<f64>,
    bytes_per_switch: Option<f64>,
    /// sysprof's BPF objects and programs, each one's loading (the
    /// programs': the kernel's verifier, mostly), from `-v`'s "loaded" line.
    pub(crate) load_ms: Vec<(String, f64)>,
}

/// Start `argv` (a profiler recording until SIGINT), let it attach, run
/// `workload` beside it (its throughput: pgbench's tps, the I/O storm's
/// reads a second), stop it.
pub(crate) fn profiled(
    argv: &[String],
    ready_line: Option<&str>,
    stderr_path: &Path,
    workload: impl FnOnce() -> Result<f64>,
) -> Result<Run> {
    profiled_pid(argv, ready_line, stderr_path, |_| workload())
}

/// [`profiled`], the workload told the profiler's pid.
pub(crate) fn profiled_pid(
    argv: &[String],
    ready_line: Option<&str>,
    stderr_path: &Path,
    workload: impl FnOnce(u32) -> Result<f64>,
) -> Result<Run> {
    let launched = Instant::now();
    let mut child: Child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr_path)?)
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?;
    let rss = super::PeakRss::watch(child.id());
    // Attached: sysprof says so; perf is given a second.
    match ready_line {
        Some(line) => loop {
            if std::fs::read_to_string(stderr_path).is_ok_and(|s| s.contains(line)) {
                break;
            }
            if launched.elapsed() > Duration::from_secs(60) || child.try_wait()?.is_some() {
                bail!(
                    "{} did not start: {}",
                    argv[0],
                    std::fs::read_to_string(stderr_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        },
        None => std::thread::sleep(Duration::from_secs(1)),
    }
    let tps = workload(child.id());
    let recording_cpu_ms = super::process_cpu_ms(child.id());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (cpu_ms, rss_mb) = super::wait_rusage(&mut child, rss)?;
    let mut said = String::new();
    std::fs::File::open(stderr_path)?.read_to_string(&mut said)?;
    Ok(Run {
        tps: tps?,
        cpu_ms,
        recording_cpu_ms,
        rss_mb,
        ..Run::default()
    }
    .with_losses(&said))
}

impl Run {
    /// The workload's run with no profiler: its throughput alone.
    pub(crate) fn alone(tps: f64) -> Run {
        Run {
            tps,
            ..Run::default()
        }
    }

    /// What the profiler's stderr says it lost, and when sysprof started.
    fn with_losses(mut self, said: &str) -> Run {
        let stats = super::stats_values(said);
        if !stats.is_empty() {
            self.lost = [
                "lost_samples",
                "lost_events",
                "lost_stacks",
                "lost_state",
                "lost_sideband",
            ]
            .iter()
            .map(|k| stats.get(*k).copied().unwrap_or(0.0))
            .sum();
            // The tracer's ring bytes per switch it saw (each switch of a
            // thread that ran again: an interval sent or folded).
            let switches = stats.get("off_cpu_intervals").copied().unwrap_or(0.0)
                + stats.get("off_cpu_folded").copied().unwrap_or(0.0);
            self.bytes_per_switch = stats
                .get("tracer_bytes")
                .filter(|_| switches > 0.0)
                .map(|b| b / switches);
        } else {
            // perf: "Processed N events and lost M chunks!" and "N samples lost".
            self.lost = said
                .lines()
                .filter_map(|l| {
                    super::number_before(l, " chunks")
                        .or_else(|| super::number_before(l, " samples lost"))
                })
                .sum::<f64>()
                + 0.0; // an empty sum is -0
        }
        for l in said.lines() {
            if let Some(rest) = l.strip_prefix("sysprof: recording; sampling from ") {
                self.first_sample_ms = super::first_number(rest);
                self.attached_ms = rest
                    .split("attached in ")
                    .nth(1)
                    .and_then(super::first_number);
            }
            if let Some(rest) = l.strip_prefix("sysprof: loaded (ms): ") {
                self.load_ms = rest
                    .split(", ")
                    .filter_map(|part| {
                        let (name, ms) = part.rsplit_once(' ')?;
                        Some((name.to_string(), ms.parse().ok()?))
                    })
                    .collect();
            }
        }
        self
    }
}

/// The section: see the module doc.
pub fn section(
    sysprof: &Path,
    perf: Option<&str>,
    work: &Path,
    quick: bool,
) -> (String, serde_json::Value) {
    let mut md = String::from(
        "\n## A server under load: pgbench (8 clients, 2 threads) beside each profiler\n\n",
    );
    let cluster = match Cluster::start() {
        Ok(c) => c,
        Err(e) => {
            md += &format!("Not run: {e:#}\n");
            return (md, json!(null));
        }
    };
    let (rounds, secs) = if quick { (2, 8) } else { (3, 10) };
    let stderr_path = work.join("pgbench.stderr");
    let sysprof_out = work.join("pgbench.json.gz");
    let perf_out = work.join("pgbench.perf.data");
    let configs = configurations(sysprof, perf, &sysprof_out, &perf_out);
    let (runs, mut failures) = alternate(&configs, rounds, &stderr_path, || pgbench(secs));
    // Its own output: `report --why` below reads the last timed round's.
    let costs = match &configs[1] {
        (_, Some(argv), ready) => {
            let argv = kernel_cost::with_output(argv, &work.join("pgbench-bpf-stats.json.gz"));
            kernel_cost::measure(&argv, *ready, &stderr_path, || pgbench(secs))
        }
        _ => Err(anyhow::anyhow!("no sysprof configuration")),
    };
    drop(cluster);
    md += &format!(
        "Alternating rounds ({rounds}), pgbench -T {secs} each; the profiler starts first and is stopped by SIGINT after pgbench ends. \
         Median [min–max]. CPU: the profiler's own (rusage, its children included), over its whole run; \
         while recording: its threads' CPU (/proc/PID/stat) up to pgbench's end, before the stop; \
         lost: what its summary says it lost (sysprof: samples, off-CPU/I-O records, stacks, thread states, sideband; \
         perf: lost chunks and samples). First sample / attached: from sysprof's launch.\n\n\
         Ring bytes / switch: sysprof's tracer ring over the switches it saw (sent as intervals or folded), stack records included.\n\n\
         | configuration | tps | vs alone | profiler CPU ms | while recording ms | peak RSS MB | lost | first sample ms | attached ms | ring bytes / switch |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let (table_md, rows) = table(&configs, &runs, "tps");
    md += &table_md;
    let loads = load_medians(&runs[1]);
    if !loads.is_empty() {
        let total: f64 = loads.iter().map(|(_, ms)| ms).sum();
        md += &format!(
            "\nsysprof's loading beside pgbench, per BPF object and program (ms, median of {} runs; a program's is \
             the kernel verifying it; some load side by side, so the sum is CPU, not wall time): {} — {total:.0} summed.\n",
            runs[1].len(),
            loads
                .iter()
                .map(|(name, ms)| format!("{name} {ms:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let costs_json = match &costs {
        Ok(c) => {
            md += &kernel_cost::markdown(c, kernel_cost::online_cpus(), "pgbench");
            kernel_cost::json(c)
        }
        Err(e) => {
            failures.push(format!("the BPF programs' kernel cost: {e:#}"));
            json!(null)
        }
    };
    let why = match why_of_pgbench(sysprof, &sysprof_out) {
        Ok(w) => {
            md += &format!(
                "\n`sysprof report --why` of pgbench's main thread (pid {}) in the last sysprof recording \
                 ({:.0} ms off-CPU): {:.2} s wall, {:.0} ms CPU, {:.0} MB peak RSS; \
                 {:.1} % of its waiting left as \"waiting (chain too deep)\".\n",
                w.pid, w.off_cpu_ms, w.secs, w.cpu_ms, w.rss_mb, w.too_deep_percent
            );
            json!({
                "pid": w.pid, "off_cpu_ms": w.off_cpu_ms, "secs": w.secs, "cpu_ms": w.cpu_ms,
                "peak_rss_mb": w.rss_mb, "chain_too_deep_percent": w.too_deep_percent,
            })
        }
        Err(e) => {
            failures.push(format!("report --why: {e:#}"));
            json!(null)
        }
    };
    for f in &failures {
        md += &format!("\nFailed: {f}\n");
    }
    (
        md,
        json!({ "rows": rows, "why": why, "kernel_cost": costs_json }),
    )
}

/// A profiler's configuration: its name, its command (none: the workload
/// alone) and the line that says it is recording (none: given a second).
pub(crate) type Config = (&'static str, Option<Vec<String>>, Option<&'static str>);

/// The configurations each server workload runs under, alone first, then
/// sysprof (second: its loading is read from `runs[1]`), then perf's.
pub(crate) fn configurations(
    sysprof: &Path,
    perf: Option<&str>,
    sysprof_out: &Path,
    perf_out: &Path,
) -> Vec<Config> {
    // Every profiler records until SIGINT.
    let mut configs: Vec<Config> = vec![
        ("alone", None, None),
        (
            "sysprof record -a",
            Some(vec![
                sysprof.display().to_string(),
                "record".into(),
                "-a".into(),
                "-v".into(),
                "-o".into(),
                sysprof_out.display().to_string(),
            ]),
            Some("sysprof: recording;"),
        ),
    ];
    if let Some(perf) = perf {
        let out = perf_out.display().to_string();
        configs.push((
            "perf record -a -g",
            Some(vec![
                perf.into(),
                "record".into(),
                "-a".into(),
                "-g".into(),
                "-o".into(),
                out.clone(),
            ]),
            None,
        ));
        configs.push((
            "perf sched record -a -g",
            Some(vec![
                perf.into(),
                "sched".into(),
                "record".into(),
                "-a".into(),
                "-g".into(),
                "-o".into(),
                out,
            ]),
            None,
        ));
    }
    configs
}

/// Run `workload` alone and under each of `configs`, one after the other,
/// `rounds` times: each configuration's runs, and what failed.
pub(crate) fn alternate(
    configs: &[Config],
    rounds: usize,
    stderr_path: &Path,
    workload: impl Fn() -> Result<f64>,
) -> (Vec<Vec<Run>>, Vec<String>) {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); configs.len()];
    let mut failures = Vec::new();
    for _ in 0..rounds {
        for (i, (name, argv, ready)) in configs.iter().enumerate() {
            let run = match argv {
                None => workload().map(Run::alone),
                Some(argv) => profiled(argv, *ready, stderr_path, &workload),
            };
            match run {
                Ok(r) => runs[i].push(r),
                Err(e) => failures.push(format!("{name}: {e:#}")),
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    (runs, failures)
}

/// The rows of a section's table (markdown, then JSON), one per
/// configuration that ran, its throughput against `runs[0]`'s (alone).
pub(crate) fn table(
    configs: &[Config],
    runs: &[Vec<Run>],
    throughput_key: &str,
) -> (String, Vec<serde_json::Value>) {
    let alone = super::median(runs[0].iter().map(|r| r.tps));
    let mut md = String::new();
    let mut rows = Vec::new();
    for ((name, ..), rs) in configs.iter().zip(runs) {
        if rs.is_empty() {
            continue;
        }
        let col = |f: &dyn Fn(&Run) -> Option<f64>, prec: usize| {
            let v: Vec<f64> = rs.iter().filter_map(f).collect();
            if v.is_empty() {
                "—".to_string()
            } else {
                super::fmt_stat(&v, prec)
            }
        };
        let change: Vec<f64> = rs.iter().map(|r| (r.tps / alone - 1.0) * 100.0).collect();
        let profiled = *name != "alone";
        md += &format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            col(&|r| Some(r.tps), 0),
            if profiled {
                format!("{} %", super::fmt_stat(&change, 1))
            } else {
                "—".into()
            },
            if profiled {
                col(&|r| Some(r.cpu_ms), 0)
            } else {
                "—".into()
            },
            col(&|r| r.recording_cpu_ms, 0),
            if profiled {
                col(&|r| Some(r.rss_mb), 1)
            } else {
                "—".into()
            },
            if profiled {
                col(&|r| Some(r.lost), 0)
            } else {
                "—".into()
            },
            col(&|r| r.first_sample_ms, 0),
            col(&|r| r.attached_ms, 0),
            col(&|r| r.bytes_per_switch, 0),
        );
        let mut row = json!({
            "configuration": name,
            "profiler_cpu_ms": rs.iter().map(|r| r.cpu_ms).collect::<Vec<_>>(),
            "recording_cpu_ms": rs.iter().map(|r| r.recording_cpu_ms).collect::<Vec<_>>(),
            "peak_rss_mb": rs.iter().map(|r| r.rss_mb).collect::<Vec<_>>(),
            "lost": rs.iter().map(|r| r.lost).collect::<Vec<_>>(),
            "first_sample_ms": rs.iter().map(|r| r.first_sample_ms).collect::<Vec<_>>(),
            "attached_ms": rs.iter().map(|r| r.attached_ms).collect::<Vec<_>>(),
            "bytes_per_switch": rs.iter().map(|r| r.bytes_per_switch).collect::<Vec<_>>(),
            "load_ms": rs.iter().map(|r| r.load_ms.iter().map(|(n, ms)| (n.clone(), json!(ms))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
        });
        row[throughput_key] = json!(rs.iter().map(|r| r.tps).collect::<Vec<_>>());
        rows.push(row);
    }
    (md, rows)
}

/// Each object's and program's median loading time over `runs`, the
/// slowest first.
fn load_medians(runs: &[Run]) -> Vec<(String, f64)> {
    let mut names: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.load_ms.iter().map(|(n, _)| n.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut medians: Vec<(String, f64)> = names
        .into_iter()
        .map(|name| {
            let times = runs
                .iter()
                .filter_map(|r| r.load_ms.iter().find(|(n, _)| n == name).map(|(_, ms)| *ms));
            (name.to_string(), super::median(times))
        })
        .collect();
    medians.sort_by(|a, b| b.1.total_cmp(&a.1));
    medians
}

/// What `report --why` of pgbench's main thread cost and left uncharged.
struct WhyRun {
    pid: u64,
    off_cpu_ms: f64,
    secs: f64,
    cpu_ms: f64,
    rss_mb: f64,
    too_deep_percent: f64,
}

/// Run `sysprof report PROFILE --why PID --format json` on the thread of
/// `profile` named pgbench whose tid is its pid (pgbench's main thread).
fn why_of_pgbench(sysprof: &Path, profile: &Path) -> Result<WhyRun> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(profile)?).read_to_string(&mut text)?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let pid = json["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| {
            t["processName"] == "pgbench"
                && t["pid"].as_str().and_then(|p| p.parse::<u64>().ok()) == t["tid"].as_u64()
        })
        .and_then(|t| t["tid"].as_u64())
        .context("no pgbench main thread in the profile")?;
    drop(json);
    let out_path = profile.with_extension("why.json");
    let started = Instant::now();
    let mut child = Command::new(sysprof)
        .arg("report")
        .arg(profile)
        .args(["--why", &pid.to_string(), "--format", "json"])
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(Stdio::null())
        .spawn()?;
    let rss = super::PeakRss::watch(child.id());
    let (cpu_ms, rss_mb) = super::wait_rusage(&mut child, rss)?;
    let secs = started.elapsed().as_secs_f64();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path)?)
        .context("report --why printed no JSON")?;
    let off_cpu_ms = report["off_cpu_ms"].as_f64().context("no off_cpu_ms")?;
    let too_deep: f64 = report["blame"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["what"] == "waiting (chain too deep)")
        .filter_map(|b| b["ms"].as_f64())
        .sum::<f64>()
        + 0.0; // an empty sum is -0
    Ok(WhyRun {
        pid,
        off_cpu_ms,
        secs,
        cpu_ms,
        rss_mb,
        too_deep_percent: 100.0 * too_deep / off_cpu_ms.max(f64::MIN_POSITIVE),
    })
}
