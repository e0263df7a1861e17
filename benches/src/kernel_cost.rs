//! What sysprof's BPF programs cost in the kernel beside a workload: the
//! side of its overhead that no profiler's own CPU shows (a program runs in
//! the context of whatever switched, woke or issued a request, and is
//! charged to it), and what the workload's slowdown is made of.
//!
//! In: sysprof's `record` command and its "recording" line, the workload.
//! Out: for each program sysprof holds, its runs a second, its nanoseconds
//! a run and its milliseconds of CPU a second, over the workload's run
//! (from sysprof's "recording" line to the workload's end), read from the
//! kernel's own statistics (`BPF_ENABLE_STATS`, `bpf_prog_info`'s
//! `run_time_ns` and `run_cnt`). One run of its own, after the alternating
//! rounds: the statistics time every run of every BPF program on the
//! machine (two clock reads each), which the rounds' throughput must not
//! pay. A tail-called program's time is its caller's.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// One program's cost over the workload's run.
#[derive(Debug, Clone)]
pub(crate) struct ProgramCost {
    /// As the kernel keeps it (15 bytes at most).
    pub(crate) name: String,
    pub(crate) runs_per_s: f64,
    pub(crate) ns_per_run: f64,
    pub(crate) ms_per_s: f64,
}

/// The loaded programs among `ids`: (name, runs, run time) by id, the
/// kernel's counts since its statistics were first turned on (frozen while
/// they are off).
pub(crate) fn program_stats(ids: &HashSet<u32>) -> HashMap<u32, (String, u64, Duration)> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| ids.contains(&p.id()))
        .map(|p| {
            let name = p.name_as_str().unwrap_or("?").to_string();
            (p.id(), (name, p.run_count(), p.run_time()))
        })
        .collect()
}

/// The ids of the BPF programs process `pid` holds: its descriptors'
/// `prog_id` in `/proc/PID/fdinfo` (a program's and a link's say it), so
/// another process's programs (an agent running beside the bench) are not
/// counted as this run's.
pub(crate) fn programs_of(pid: u32) -> HashSet<u32> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|id| id.trim().parse().ok())
        })
        .collect()
}

/// The CPUs online (the programs run on each, whatever this process's
/// affinity).
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a value of the system.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize
}

/// `argv` with the path after its `-o` replaced by `output`.
pub(crate) fn with_output(argv: &[String], output: &Path) -> Vec<String> {
    let mut argv = argv.to_vec();
    if let Some(i) = argv.iter().position(|a| a == "-o") {
        if let Some(path) = argv.get_mut(i + 1) {
            *path = output.display().to_string();
        }
    }
    argv
}

/// Run `argv` (sysprof recording until SIGINT, saying `ready_line` once it
/// records) beside `workload` with the kernel's BPF statistics on: the
/// costs of the programs it holds, the costliest first.
pub(crate) fn measure(
    argv: &[String],
    ready_line: Option<&str>,
    stderr_path: &Path,
    workload: impl FnOnce() -> Result<f64>,
) -> Result<Vec<ProgramCost>> {
    // The statistics stay on while this descriptor is open.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("BPF_ENABLE_STATS (root and a 5.8 kernel needed)")?;
    let costs = RefCell::new(Vec::new());
    super::pgbench::profiled_pid(argv, ready_line, stderr_path, |pid| {
        let ids = programs_of(pid);
        let start = program_stats(&ids);
        let started = Instant::now();
        let throughput = workload();
        let end = program_stats(&ids);
        let secs = started.elapsed().as_secs_f64();
        let mut out: Vec<ProgramCost> = end
            .into_iter()
            .filter_map(|(id, (name, runs, time))| {
                let (_, runs0, time0) = start.get(&id)?;
                let runs = runs.saturating_sub(*runs0);
                let ns = time.saturating_sub(*time0).as_nanos() as f64;
                (runs > 0).then(|| ProgramCost {
                    name,
                    runs_per_s: runs as f64 / secs,
                    ns_per_run: ns / runs as f64,
                    ms_per_s: ns / 1e6 / secs,
                })
            })
            .collect();
        out.sort_by(|a, b| b.ms_per_s.total_cmp(&a.ms_per_s));
        *costs.borrow_mut() = out;
        throughput
    })?;
    let costs = costs.into_inner();
    anyhow::ensure!(
        !costs.is_empty(),
        "no program of sysprof's ran while the workload did"
    );
    Ok(costs)
}

/// The costs as a paragraph of the bench's markdown, against `cpus` CPUs.
pub(crate) fn markdown(costs: &[ProgramCost], cpus: usize, workload: &str) -> String {
    let total: f64 = costs.iter().map(|c| c.ms_per_s).sum();
    format!(
        "\nsysprof's BPF programs in the kernel beside {workload} (one more `record -a` run with the kernel's \
         BPF run-time statistics on, from \"recording\" to the workload's end; a tail call's time is its caller's): {} — \
         {total:.0} ms of CPU a second in all, {:.1} % of the {cpus} CPUs, charged to the tasks they ran beside.\n",
        costs
            .iter()
            // Those that ran only at the start (a process's exec) say nothing a second.
            .filter(|c| c.ms_per_s >= 0.05)
            .map(|c| format!(
                "{} {:.0} ns × {:.0}/s = {:.1} ms/s",
                c.name, c.ns_per_run, c.runs_per_s, c.ms_per_s
            ))
            .collect::<Vec<_>>()
            .join(", "),
        total / (10.0 * cpus as f64),
    )
}

/// The costs as JSON.
pub(crate) fn json(costs: &[ProgramCost]) -> serde_json::Value {
    serde_json::Value::Array(
        costs
            .iter()
            .map(|c| {
                serde_json::json!({
                    "program": c.name, "runs_per_s": c.runs_per_s,
                    "ns_per_run": c.ns_per_run, "ms_per_s": c.ms_per_s,
                })
            })
            .collect(),
    )
}
