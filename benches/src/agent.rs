//! The agent section of `cargo xtask bench`, and its `--soak` mode.
//!
//! In: the sysprof binary and the cpu, switch and fork workloads and a
//! compiler loop (gcc -O2 -c in a loop: a new cc1 every ~0.12 s). Out: a
//! markdown table and JSON: per workload, the agent (defaults: 19 Hz,
//! 10 s windows) running beside it for a minute after it settled: its own
//! CPU in steady state (`/proc/PID/stat` utime + stime over the workload's
//! run, which includes threads that ended), the machine's extra CPU (busy
//! time from `/proc/stat` against the same workload without the agent),
//! its peak RSS (VmHWM over its whole life) and RSS at the end, the samples
//! stored, and bytes per sample in compacted segments. Then the time
//! `sysprof show --since 1h` takes over everything stored. `--soak` runs
//! the agent for an hour beside a fork storm and prints RSS every minute.
//! Nothing is asserted: the goals table compares medians with the issue's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;

/// Compaction bucket for the bench's stores: a minute, so a minute's run
/// yields compacted segments (a real store's ten-minute buckets amortize
/// names over more samples still: the figure is an upper bound).
const BENCH_BUCKET_S: &str = "60";

fn status_kb(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(f64::NAN)
}

/// A workload run in a loop until `secs` pass.
struct LoopedWorkload {
    name: String,
    argv: Vec<String>,
}

impl LoopedWorkload {
    fn run_for(&self, secs: f64) -> Result<u32> {
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let mut runs = 0;
        while Instant::now() < until {
            let out = Command::new(&self.argv[0]).args(&self.argv[1..]).output()?;
            if !out.status.success() {
                bail!(
                    "workload {} failed: {}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            runs += 1;
        }
        Ok(runs)
    }
}

struct RunningAgent {
    child: Child,
    log: PathBuf,
}

impl Drop for RunningAgent {
    /// A row that failed midway does not leave its agent running (nor its
    /// cgroup, which cannot be removed while the agent is in it). After
    /// [`RunningAgent::stop`] the child is reaped and this does nothing.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl RunningAgent {
    /// The agent, in the memory cgroup whose `cgroup.procs` is `procs`
    /// from before it runs when one is given.
    fn start(
        sysprof: &Path,
        store: &Path,
        log: &Path,
        extra: &[&str],
        procs: Option<&Path>,
    ) -> Result<RunningAgent> {
        let mut command = Command::new(sysprof);
        if let Some(procs) = procs {
            sysprof_tests::join_cgroup_at_exec(&mut command, procs);
        }
        let child = command
            .args(["agent", "--store"])
            .arg(store)
            .args(["--health-interval", "60"])
            .args(extra)
            .env("SYSPROF_STORE_BUCKET_SECONDS", BENCH_BUCKET_S)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()?;
        let a = RunningAgent {
            child,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&a.log)
            .unwrap_or_default()
            .contains("recording every process")
        {
            if Instant::now() > deadline {
                bail!(
                    "the agent did not start: {}",
                    std::fs::read_to_string(&a.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(a)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, wait; returns its log.
    fn stop(mut self) -> Result<String> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait()?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !status.success() {
            bail!("the agent exited with {status}: {log}");
        }
        Ok(log)
    }
}

/// Samples and bytes of the store's compacted segments, from `show --list`.
fn compacted(sysprof: &Path, store: &Path) -> (f64, f64, f64, f64) {
    let out = Command::new(sysprof)
        .args(["show", "--list", "--store"])
        .arg(store)
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let (mut s1, mut b1, mut s_all, mut b_all) = (0.0, 0.0, 0.0, 0.0);
    for l in text.lines().filter(|l| l.ends_with(".seg")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        // from(2) to(2) windows samples processes bytes file
        if f.len() < 9 {
            continue;
        }
        let samples: f64 = f[5].parse().unwrap_or(0.0);
        let bytes: f64 = f[7].parse().unwrap_or(0.0);
        s_all += samples;
        b_all += bytes;
        if l.ends_with(".L1.seg") {
            s1 += samples;
            b1 += bytes;
        }
    }
    (s1, b1, s_all, b_all)
}

/// The kinds `show --list --sizes` names, in its order.
const KINDS: [&str; 9] = [
    "samples",
    "off-CPU",
    "waits",
    "I/O",
    "CPU slices",
    "frames",
    "stacks",
    "names",
    "other",
];

/// The compacted segments' bytes a sample per kind, as table cells
/// ("all | samples | off-CPU | ..."), from `show --list --sizes`; None if it
/// has no compacted segment.
fn kinds(sysprof: &Path, store: &Path) -> Option<String> {
    let out = Command::new(sysprof)
        .args(["show", "--list", "--sizes", "--store"])
        .arg(store)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "compacted (N files, M samples): T bytes per sample: samples 4.0, off-CPU 5.0, ..."
    let line = text.lines().find(|l| l.starts_with("compacted ("))?;
    let (head, parts) = line.split_once(" bytes per sample: ")?;
    let total = head.rsplit(' ').next()?;
    let mut cells = vec![total.to_string()];
    for kind in KINDS {
        let v = parts
            .split(", ")
            .find_map(|p| p.strip_prefix(kind).map(str::trim))
            .unwrap_or("–");
        cells.push(v.to_string());
    }
    Some(cells.join(" | "))
}

/// What the agent section measured against the goals (NaN: not
/// measured).
pub struct AgentGoals {
    /// Agent CPU, % of one CPU, beside the cpu workload.
    pub cpu_pct: f64,
    /// Peak RSS, MB, the highest over the workloads.
    pub peak_rss_mb: f64,
    /// Bytes per sample compacted, the highest over the workloads.
    pub bytes_per_sample: f64,
    /// Its cgroup at rest, MiB, the highest over the workloads.
    pub cgroup_at_rest_mib: f64,
    /// Its cgroup's peak beside a cargo build, MiB.
    pub cgroup_peak_build_mib: f64,
    /// The anonymous and kernel part of its cgroup at most beside a cargo
    /// build (page cache left out: the kernel drops it at the limit), MiB.
    pub unreclaimable_peak_build_mib: f64,
    /// Its cgroup's peak, MiB, the highest over the workloads.
    pub cgroup_peak_mib: f64,
}

impl AgentGoals {
    /// Nothing measured.
    pub fn none() -> AgentGoals {
        AgentGoals {
            cpu_pct: f64::NAN,
            peak_rss_mb: f64::NAN,
            bytes_per_sample: f64::NAN,
            cgroup_at_rest_mib: f64::NAN,
            cgroup_peak_build_mib: f64::NAN,
            unreclaimable_peak_build_mib: f64::NAN,
            cgroup_peak_mib: f64::NAN,
        }
    }
}

/// The agent section: (markdown, JSON, what it measured for the goals).
pub fn section(
    sysprof: &Path,
    work: &Path,
    bins: &[(&'static str, Vec<String>)],
    quick: bool,
) -> (String, serde_json::Value, AgentGoals) {
    let secs = if quick { 20.0 } else { 60.0 };
    let settle = Duration::from_secs(if quick { 12 } else { 25 });
    // A store per workload: compaction merges what one 60-s bucket holds,
    // and a shared store had each row count the workloads before it (the
    // cpu row's bytes a sample stood alone; the JVM's held every build's).
    let stores: Vec<PathBuf> = (0..bins.len() + 2)
        .map(|i| work.join(format!("agent-store-{i}")))
        .collect();
    let _ = std::fs::remove_dir_all(work.join("agent-store"));
    let mut kinds_md = String::new();
    let mut md = format!(
        "\n## The agent (`sysprof agent` defaults: 19 Hz, DWARF stacks, off-CPU and I/O, 10 s windows), beside each workload for {secs:.0} s after {} s to settle\n\n\
         Agent CPU: its utime + stime over the workload's run (`/proc/PID/stat`, all threads). New processes: \
         `/proc/stat`'s `processes` (forks and new threads) over the run; µs per new process: the agent's CPU above the cpu row's (no new \
         processes there) over them. Extra machine CPU: \
         busy time from `/proc/stat` minus the same workload's without the agent. Peak RSS: VmHWM over the agent's \
         whole life, start included; RSS: at the end of the run. Cgroup: the agent started in a memory cgroup of its own \
         (as a unit's `MemoryMax` counts it: anonymous, page cache and kernel memory, its BPF maps included), MiB at rest \
         (after settling, nothing running), at the end of the run, its peak over the agent's whole life, the highest of its anonymous plus kernel memory (what dropping page cache cannot give back; read every 200 ms over the run), and the kernel \
         memory at the end (v1 `memory.kmem.usage_in_bytes`, v2 `memory.stat` kernel). Bytes/sample: compacted segments (buckets of \
         {BENCH_BUCKET_S} s here; a real store's 10 minutes amortize names further) and all segments.\n\n\
         | workload | agent CPU % of one CPU | new processes /s | agent CPU µs per new process | extra machine CPU % of one CPU | peak RSS MB | RSS at end MB | cgroup at rest MiB | cgroup at end MiB | cgroup peak MiB | anon + kernel peak MiB | kernel at end MiB | samples stored | bytes/sample compacted | bytes/sample all |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        settle.as_secs()
    );
    let mut rows = Vec::new();
    let mut md_skip_note = String::new();
    let mut wire = String::new();
    let (mut cpu_goal, mut rss_goal, mut bps_goal) = (f64::NAN, 0.0f64, f64::NAN);
    let (mut cgroup_peak_goal, mut cgroup_rest_goal, mut cgroup_build_goal) =
        (f64::NAN, f64::NAN, f64::NAN);
    let mut unreclaimable_build_goal = f64::NAN;
    // With every exporter on, beside the cpu and switch workloads: receivers
    // on loopback (the test suite's), and the bytes each format put on the wire.
    let receivers = Receivers::start(work);
    let mut runs: Vec<(String, Vec<String>, Vec<String>)> = bins
        .iter()
        .map(|(n, a)| (n.to_string(), a.clone(), Vec::new()))
        .collect();
    match &receivers {
        Ok(r) => {
            for (n, a) in bins.iter().filter(|(n, _)| matches!(*n, "cpu" | "switch")) {
                runs.push((format!("{n} + exporters"), a.clone(), r.agent_args.clone()));
            }
        }
        Err(e) => md_skip_note = format!("\n**The exporters rows were not run**: {e:#}.\n"),
    }
    // A first start after sysprof is installed or rebuilt compiles the
    // unwind tables of everything running and writes them to its cache
    // (unwind/kernel/cache.rs); every later start reads them. The rows are
    // the steady state: a start of its own warms the cache first, and its
    // cost is said apart.
    let warm_store = work.join("agent-store-warm-up");
    let _ = std::fs::remove_dir_all(&warm_store);
    match RunningAgent::start(
        sysprof,
        &warm_store,
        &work.join("agent-warm-up.log"),
        &[],
        None,
    ) {
        Ok(agent) => {
            let pid = agent.pid();
            std::thread::sleep(settle);
            let cpu_ms = super::process_cpu_ms(pid).unwrap_or(f64::NAN);
            let _ = agent.stop();
            md_skip_note += &format!(
                "
Before the rows, a start of the agent warmed its unwind-table cache: {cpu_ms:.0} ms of CPU over its first {} s (the first start after an install or a rebuild pays this once).
",
                settle.as_secs()
            );
        }
        Err(e) => {
            md_skip_note += &format!(
                "
The warm-up start failed: {e:#}.
"
            )
        }
    }
    for (i, (name, argv, extra)) in runs.iter().enumerate() {
        let name = name.as_str();
        let Some(store) = stores.get(i) else { break };
        let _ = std::fs::remove_dir_all(store);
        let w = LoopedWorkload {
            name: name.to_string(),
            argv: argv.clone(),
        };
        let r = (|| -> Result<serde_json::Value> {
            // Without the agent.
            let b0 = crate::busy_ms();
            let t0 = Instant::now();
            w.run_for(secs)?;
            let base_pct = (crate::busy_ms() - b0) / t0.elapsed().as_secs_f64() / 10.0;
            let log = work.join(format!("agent-{name}.log"));
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            // Its own memory cgroup, limited far above what it takes: what
            // a unit's MemoryMax is held against (BPF maps included).
            let cgroup = sysprof_tests::MemoryCgroup::make(
                &format!("sysprof-bench-agent-{}", std::process::id()),
                1 << 30,
            );
            let agent = RunningAgent::start(
                sysprof,
                store,
                &log,
                &extra,
                cgroup.as_ref().map(|c| c.procs()).as_deref(),
            )?;
            let pid = agent.pid();
            std::thread::sleep(settle);
            let mib = |b: u64| b as f64 / 1048576.0;
            let at_rest = cgroup.as_ref().map(|c| (mib(c.usage()), mib(c.kernel())));
            let c0 = super::process_cpu_ms(pid).unwrap_or(f64::NAN);
            let b0 = crate::busy_ms();
            let f0 = processes_started();
            let t0 = Instant::now();
            let (ran, unreclaimable_peak) =
                with_unreclaimable_peak(cgroup.as_ref(), || w.run_for(secs));
            ran?;
            let elapsed = t0.elapsed().as_secs_f64();
            let busy_pct = (crate::busy_ms() - b0) / elapsed / 10.0;
            let agent_pct = (super::process_cpu_ms(pid).unwrap_or(f64::NAN) - c0) / elapsed / 10.0;
            let forks = processes_started().saturating_sub(f0) as f64;
            // What a new process costs the agent: its CPU above the cpu
            // row's (the first: the steady floor, one CPU-bound program and
            // no new processes), over the processes started meanwhile.
            let per_process_us = (forks / elapsed >= 1.0 && !cpu_goal.is_nan())
                .then(|| (agent_pct - cpu_goal).max(0.0) * elapsed * 10.0 * 1000.0 / forks);
            let rss_end = status_kb(pid, "VmRSS:") / 1024.0;
            let cg_end = cgroup.as_ref().map(|c| (mib(c.usage()), mib(c.kernel())));
            // 0: a v2 kernel without memory.peak (before 5.19), not measured.
            let cg_peak = cgroup
                .as_ref()
                .map(|c| c.peak())
                .filter(|&p| p > 0)
                .map(mib);
            // VmHWM only grows while the process lives: its whole life's peak.
            let peak_mb = status_kb(pid, "VmHWM:") / 1024.0;
            if !extra.is_empty() {
                if let Ok(r) = &receivers {
                    wire += &r.wire_line(name);
                }
            }
            let log = agent.stop()?;
            drop(cgroup);
            let stored: f64 = log
                .lines()
                .last()
                .and_then(|l| l.split(';').find(|p| p.contains(" samples,")))
                .and_then(|p| p.split_whitespace().next().and_then(|n| n.parse().ok()))
                .unwrap_or(f64::NAN);
            let (s1, b1, s_all, b_all) = compacted(sysprof, store);
            if let Some(k) = kinds(sysprof, store) {
                kinds_md += &format!("| {name} | {k} |\n");
            }
            let extra = busy_pct - base_pct;
            let one = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
            md += &format!(
                "| {name} | {agent_pct:.3} | {:.1} | {} | {extra:.2} | {peak_mb:.1} | {rss_end:.1} | {} | {} | {} | {} | {} | {stored:.0} | {} | {:.1} |\n",
                forks / elapsed,
                per_process_us.map_or("–".to_string(), |us| format!("{us:.0}")),
                one(at_rest.map(|m| m.0)),
                one(cg_end.map(|m| m.0)),
                one(cg_peak),
                one(unreclaimable_peak.map(mib)),
                one(cg_end.map(|m| m.1)),
                if s1 > 0.0 { format!("{:.1}", b1 / s1) } else { "–".into() },
                b_all / s_all.max(1.0)
            );
            if let Some(peak) = cg_peak {
                cgroup_peak_goal = cgroup_peak_goal.max(peak);
                if name == "cargo build" {
                    cgroup_build_goal = peak;
                    unreclaimable_build_goal = unreclaimable_peak.map_or(f64::NAN, mib);
                }
            }
            if let Some((rest, _)) = at_rest {
                cgroup_rest_goal = cgroup_rest_goal.max(rest);
            }
            if name == "cpu" {
                cpu_goal = agent_pct;
            }
            rss_goal = rss_goal.max(peak_mb);
            if s1 > 0.0 {
                bps_goal = if bps_goal.is_nan() {
                    b1 / s1
                } else {
                    bps_goal.max(b1 / s1)
                };
            }
            Ok(
                json!({ "workload": name, "agent_cpu_pct": agent_pct, "new_processes_per_s": forks / elapsed,
                       "agent_cpu_us_per_new_process": per_process_us, "extra_machine_cpu_pct": extra, "peak_rss_mb": peak_mb,
                       "cgroup_at_rest_mib": at_rest.map(|m| m.0), "cgroup_kernel_at_rest_mib": at_rest.map(|m| m.1),
                       "cgroup_end_mib": cg_end.map(|m| m.0), "cgroup_kernel_end_mib": cg_end.map(|m| m.1),
                       "cgroup_peak_mib": cg_peak, "cgroup_anon_kernel_peak_mib": unreclaimable_peak.map(mib),
                       "rss_end_mb": rss_end, "samples_stored": stored, "compacted_samples": s1, "compacted_bytes": b1,
                       "all_samples": s_all, "all_bytes": b_all }),
            )
        })();
        match r {
            Ok(v) => rows.push(v),
            Err(e) => eprintln!("bench: agent × {name} failed: {e:#}"),
        }
    }
    md += &md_skip_note;
    if !kinds_md.is_empty() {
        md += &format!(
            "\nWhat a compacted sample's bytes hold, per kind (`sysprof show --list --sizes` of each workload's store: \
             each part of a segment compressed alone, scaled to the segment's bytes), bytes per sample:\n\n\
             | workload | all | {} |\n|---|---:|{}\n{kinds_md}",
            KINDS.join(" | "),
            "---:|".repeat(KINDS.len())
        );
    }
    if !wire.is_empty() {
        md += &format!(
            "\nBytes on the wire per window (10 s; `sysprof_export_bytes_total` / `sysprof_windows_exported_total` of the agent's `--metrics`): \
             pprof files (gzip), OTLP (protobuf before tonic's gzip), Pyroscope (gzip pprof per process, summed).\n\n\
             | run | pprof B/window | OTLP B/window | Pyroscope B/window |\n|---|---:|---:|---:|\n{wire}"
        );
    }
    drop(receivers);
    // show --since 1h over everything stored, store by store.
    let (mut samples, mut bytes, mut show_s, mut ok) = (0.0, 0.0, 0.0, true);
    for store in stores.iter().filter(|s| s.exists()) {
        let (_, _, n, b) = compacted(sysprof, store);
        samples += n;
        bytes += b;
        let out = work.join("agent-show.json.gz");
        let t = Instant::now();
        ok &= Command::new(sysprof)
            .args(["show", "--since", "1h", "--store"])
            .arg(store)
            .arg("-o")
            .arg(&out)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        show_s += t.elapsed().as_secs_f64();
    }
    // An hour of this 2-CPU machine at 19 Hz: every CPU sampled (the idle task too).
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let hour_samples = 19.0 * 3600.0 * ncpu;
    md += &format!(
        "\n`sysprof show --since 1h` over each workload's store ({samples:.0} samples, {:.0} KiB): {show_s:.2} s{}; at that rate an hour of this machine \
         ({hour_samples:.0} samples) takes about {:.1} s (`--soak` measures it on a real hour).\n",
        bytes / 1024.0,
        if ok { "" } else { " (**failed**)" },
        show_s * hour_samples / samples.max(1.0),
    );
    (
        md,
        json!({ "runs": rows, "show_seconds": show_s, "show_samples": samples }),
        AgentGoals {
            cpu_pct: cpu_goal,
            peak_rss_mb: rss_goal,
            bytes_per_sample: bps_goal,
            cgroup_at_rest_mib: cgroup_rest_goal,
            cgroup_peak_build_mib: cgroup_build_goal,
            unreclaimable_peak_build_mib: unreclaimable_build_goal,
            cgroup_peak_mib: cgroup_peak_goal,
        },
    )
}

/// `--soak`: the agent beside a fork storm for `minutes`, RSS and CPU every
/// minute; ends with `show --since 1h` over the hour.
pub fn soak(sysprof: &Path, work: &Path, fork: &[String], minutes: u64) -> Result<String> {
    let store = work.join("soak-store");
    let _ = std::fs::remove_dir_all(&store);
    // Its own memory cgroup, limited far above what it takes, as in the
    // agent section: the curve is what a unit's MemoryMax is held against.
    let cgroup = sysprof_tests::MemoryCgroup::make(
        &format!("sysprof-bench-soak-{}", std::process::id()),
        1 << 30,
    );
    let agent = RunningAgent::start(
        sysprof,
        &store,
        &work.join("soak.log"),
        &[],
        cgroup.as_ref().map(|c| c.procs()).as_deref(),
    )?;
    let pid = agent.pid();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm = {
        let stop = stop.clone();
        let argv = fork.to_vec();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if Command::new(&argv[0]).args(&argv[1..]).output().is_ok() {
                    n += 1;
                }
            }
            n
        })
    };
    let mut md = format!("\n## Soak: the agent beside a fork storm for {minutes} min\n\n| minute | RSS MB | peak RSS MB | agent CPU % (that minute) | cgroup MiB | anon MiB | page cache MiB | kernel MiB | highest anon + kernel that minute MiB | store files | store MiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mib = |b: u64| b as f64 / 1048576.0;
    let cg = |f: &dyn Fn(&sysprof_tests::MemoryCgroup) -> u64| {
        cgroup
            .as_ref()
            .map_or("–".to_string(), |c| format!("{:.1}", mib(f(c))))
    };
    let mut last_cpu = super::process_cpu_ms(pid).unwrap_or(0.0);
    for m in 1..=minutes {
        let ((), minute_peak) = with_unreclaimable_peak(cgroup.as_ref(), || {
            std::thread::sleep(Duration::from_secs(60))
        });
        let cpu = super::process_cpu_ms(pid).unwrap_or(f64::NAN);
        let files = std::fs::read_dir(&store).map(|d| d.count()).unwrap_or(0);
        let bytes: u64 = std::fs::read_dir(&store)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        let line = format!(
            "| {m} | {:.1} | {:.1} | {:.3} | {} | {} | {} | {} | {} | {files} | {:.1} |\n",
            status_kb(pid, "VmRSS:") / 1024.0,
            status_kb(pid, "VmHWM:") / 1024.0,
            (cpu - last_cpu) / 60_000.0 * 100.0,
            cg(&|c| c.usage()),
            cg(&|c| c.stat("anon")),
            cg(&|c| c.stat("file")),
            cg(&|c| c.kernel()),
            minute_peak.map_or("–".to_string(), |p| format!("{:.1}", mib(p))),
            bytes as f64 / 1048576.0
        );
        eprint!("soak: {line}");
        md += &line;
        last_cpu = cpu;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let storms = storm.join().unwrap_or(0);
    let log = agent.stop()?;
    let (peak, ooms) = cgroup
        .as_ref()
        .map_or((0, 0), |c| (c.peak(), c.oom_kills()));
    drop(cgroup);
    let t = Instant::now();
    let out = work.join("soak-show.json.gz");
    let ok = Command::new(sysprof)
        .args(["show", "--since", "1h", "--store"])
        .arg(&store)
        .arg("-o")
        .arg(&out)
        .output()?
        .status
        .success();
    let shown = t.elapsed().as_secs_f64();
    // And `report` of what `show` wrote: the hour read back.
    let report = if ok {
        let t = Instant::now();
        let mut child = Command::new(sysprof)
            .arg("report")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let rss = super::PeakRss::watch(child.id());
        let done = child.wait()?.success();
        format!(
            " `sysprof report` of it ({:.1} MiB): {:.2} s, peak RSS {:.1} MB{}.",
            std::fs::metadata(&out).map_or(0.0, |m| mib(m.len())),
            t.elapsed().as_secs_f64(),
            rss.finish(),
            if done { "" } else { " (**failed**)" }
        )
    } else {
        String::new()
    };
    md += &format!(
        "\nFork storm runs: {storms} (each {} processes). Cgroup peak over the whole soak: {:.1} MiB, OOM kills {ooms}. `sysprof show --since 1h`: {shown:.2} s{}.{report} Last health line: `{}`\n",
        fork.get(1).cloned().unwrap_or_default(),
        mib(peak),
        if ok { "" } else { " (**failed**)" },
        log.lines().last().unwrap_or("")
    );
    Ok(md)
}

/// `run()`, with the highest anonymous plus kernel memory its cgroup held
/// meanwhile (read every 200 ms): the part of `memory.peak` the kernel
/// cannot reclaim by dropping page cache, which a limit must leave room for.
fn with_unreclaimable_peak<T>(
    cgroup: Option<&sysprof_tests::MemoryCgroup>,
    run: impl FnOnce() -> T,
) -> (T, Option<u64>) {
    let Some(cgroup) = cgroup else {
        return (run(), None);
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut peak = cgroup.unreclaimable();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                peak = peak.max(cgroup.unreclaimable());
            }
            peak
        });
        let value = run();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (value, poller.join().ok())
    })
}

/// The test suite's receivers (tests/receivers), on loopback, for the
/// exporters rows: Pyroscope's ingest API (Python's standard library) and
/// OTLP (the official classes in the tests' venv, target/test-venv; made
/// by the export tests). Killed when dropped.
struct Receivers {
    children: Vec<Child>,
    agent_args: Vec<String>,
    metrics: u16,
}

impl Receivers {
    fn start(work: &Path) -> Result<Receivers> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace")
            .to_path_buf();
        // The tests' venv, made from PyPI when missing or incomplete (it
        // held only py-spy when the python tests made it first).
        let Some(venv) = sysprof_tests::otel_python("bench: the agent's exporters rows") else {
            bail!("no OTLP receiver: a venv with opentelemetry-proto and grpcio could not be made in target/test-venv");
        };
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
        };
        let (otlp, pyro, metrics) = (port()?, port()?, port()?);
        let pprof_dir = work.join("agent-pprof");
        let _ = std::fs::remove_dir_all(&pprof_dir);
        let got = work.join("agent-pyroscope");
        let _ = std::fs::remove_dir_all(&got);
        let mut r = Receivers {
            children: Vec::new(),
            agent_args: Vec::new(),
            metrics,
        };
        for (python, script, args) in [
            (
                venv.clone(),
                "otlp_receiver.py",
                vec![otlp.to_string(), "/dev/null".into()],
            ),
            (
                PathBuf::from("python3"),
                "pyroscope_receiver.py",
                vec![pyro.to_string(), got.display().to_string()],
            ),
        ] {
            let mut child = Command::new(&python)
                .arg(root.join("tests/receivers").join(script))
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
                &mut line,
            )?;
            r.children.push(child);
            if line.trim() != "ready" {
                bail!("{script} did not start");
            }
        }
        r.agent_args = vec![
            "--pprof-dir".into(),
            pprof_dir.display().to_string(),
            "--otlp-endpoint".into(),
            format!("http://127.0.0.1:{otlp}"),
            "--pyroscope-url".into(),
            format!("http://127.0.0.1:{pyro}"),
            "--metrics".into(),
            format!("127.0.0.1:{metrics}"),
        ];
        Ok(r)
    }

    /// A table row: bytes per window of each exporter, from the agent's metrics.
    fn wire_line(&self, name: &str) -> String {
        let text = (|| -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics))?;
            std::io::Write::write_all(&mut s, b"GET /metrics HTTP/1.0\r\n\r\n")?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut s, &mut text)?;
            Ok(text)
        })()
        .unwrap_or_default();
        let value = |metric: &str, exporter: &str| {
            let key = format!("{metric}{{exporter=\"{exporter}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let per_window = |e: &str| {
            let (bytes, windows) = (
                value("sysprof_export_bytes_total", e),
                value("sysprof_windows_exported_total", e),
            );
            if windows > 0.0 {
                format!("{:.0} ({windows:.0} windows)", bytes / windows)
            } else {
                "–".into()
            }
        };
        format!(
            "| {name} | {} | {} | {} |\n",
            per_window("pprof"),
            per_window("otlp"),
            per_window("pyroscope")
        )
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Processes (and threads) the kernel has started since boot: `/proc/stat`'s
/// `processes` line; 0 if unreadable.
fn processes_started() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("processes "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}
