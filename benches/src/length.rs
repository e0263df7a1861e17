//! The recording-length section of `cargo xtask bench`: does `record -a`
//! cost memory in proportion to how long it runs?
//!
//! In: the sysprof binary and perf, if installed. Out: a markdown table and
//! JSON: for `sysprof record -a` and `perf record -a -g`, each run for a
//! short and a long time beside a fork loop (`/bin/true` as fast as a shell
//! starts it, ~600-1000 processes a second here) and a spinner, the peak
//! RSS (VmHWM polled from `/proc` every 20 ms), the time from SIGINT to
//! the profiler's exit (stop → written), the file's size,
//! and the long run's peak over the short one's; then `validate` and
//! `report` on the long recording's file, their peak RSS and time. Nothing
//! is asserted.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

/// A fork loop and a spinner, each in its own process group, stopped on drop.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Result<Load> {
        let mut children = Vec::new();
        for script in ["while :; do /bin/true; done", "while :; do :; done"] {
            children.push(
                Command::new("sh")
                    .args(["-c", script])
                    .process_group(0)
                    .stdin(Stdio::null())
                    .spawn()
                    .context("starting the load")?,
            );
        }
        Ok(Load(children))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: kill(2) of the process group this child leads.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// VmHWM of `pid` in MB, if it is still there.
fn peak_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Time a profiler is given to start (load its programs, read `/proc`)
/// before its `secs` of recording are counted.
const STARTUP: Duration = Duration::from_secs(3);

/// One run of a profiler that records until SIGINT: (peak RSS MB, stop →
/// written ms, file bytes). Stop → written is from the SIGINT to its exit.
fn run(argv: &[String], secs: u64, out: &Path) -> Result<(f64, f64, u64)> {
    let _ = std::fs::remove_file(out);
    let _load = Load::start()?;
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the profiler")?;
    let mut peak = 0.0f64;
    let mut stopped: Option<Instant> = None;
    let status = loop {
        if let Some(mb) = peak_mb(child.id()) {
            peak = peak.max(mb);
        }
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if stopped.is_none() && started.elapsed() >= STARTUP + Duration::from_secs(secs) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            stopped = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // perf ends a recording on SIGINT by writing its file and raising the
    // signal again: killed by the SIGINT it was sent is its normal end.
    use std::os::unix::process::ExitStatusExt;
    let ended_by_our_sigint = stopped.is_some()
        && status.signal() == Some(libc::SIGINT)
        && std::fs::metadata(out).is_ok_and(|m| m.len() > 0);
    anyhow::ensure!(
        status.success() || ended_by_our_sigint,
        "{} exited with {status}",
        argv[0]
    );
    let stop_to_written_ms = stopped
        .map(|s| s.elapsed().as_secs_f64() * 1e3)
        .unwrap_or(f64::NAN);
    Ok((
        peak,
        stop_to_written_ms,
        std::fs::metadata(out).map(|m| m.len()).unwrap_or(0),
    ))
}

/// Run `argv` to its end: (peak RSS MB, seconds).
fn measure(argv: &[String]) -> Result<(f64, f64)> {
    let started = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the tool")?;
    let mut peak = 0.0f64;
    let status = loop {
        if let Some(mb) = peak_mb(child.id()) {
            peak = peak.max(mb);
        }
        if let Some(s) = child.try_wait()? {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    anyhow::ensure!(status.success(), "{} exited with {status}", argv.join(" "));
    Ok((peak, started.elapsed().as_secs_f64()))
}

/// `sysprof validate` and `sysprof report` on the long recording's file:
/// a markdown paragraph and JSON.
fn read_back(sysprof: &Path, file: &Path) -> (String, serde_json::Value) {
    let size_mb = std::fs::metadata(file)
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0);
    let mut md = format!("\nReading the long recording's file back ({size_mb:.1} MB), the machine quiet: peak RSS (VmHWM every 20 ms) and time.\n\n| command | peak RSS MB | seconds |\n|---|---:|---:|\n");
    let mut rows = Vec::new();
    for args in [
        &["validate"][..],
        &["report"][..],
        &["report", "--format", "folded"][..],
    ] {
        let mut argv = vec![sysprof.display().to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.push(file.display().to_string());
        let name = format!("sysprof {}", args.join(" "));
        match measure(&argv) {
            Ok((peak, secs)) => {
                md += &format!("| `{name}` | {peak:.0} | {secs:.2} |\n");
                rows.push(json!({ "command": name, "peak_rss_mb": peak, "seconds": secs, "file_mb": size_mb }));
            }
            Err(e) => md += &format!("| `{name}` | failed: {e:#} | |\n"),
        }
    }
    (md, json!(rows))
}

/// The section: see the module doc.
pub fn section(
    sysprof: &Path,
    perf: Option<&str>,
    work: &Path,
    quick: bool,
) -> (String, serde_json::Value) {
    let (short, long) = (10u64, if quick { 30 } else { 60 });
    let mut md = format!(
        "\n## Recording length: `record -a` for {short} s and {long} s beside a fork loop and a spinner\n\n\
         Peak RSS: VmHWM polled every 20 ms. Each profiler runs until SIGINT, 3 s longer than the duration (its start); \
         stop → written: from the SIGINT to its exit. \
         One run each.\n\n\
         | profiler | peak RSS MB, {short} s | peak RSS MB, {long} s | {long} s / {short} s | stop→written ms, {short} s | stop→written ms, {long} s | file MB, {long} s |\n\
         |---|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut rows = Vec::new();
    let sysprof_out = work.join("length.json.gz");
    let perf_out = work.join("length.perf.data");
    let mut profilers: Vec<(&str, Box<dyn Fn(u64) -> Vec<String>>, &Path)> = vec![(
        "sysprof record -a",
        Box::new(|_: u64| {
            vec![
                sysprof.display().to_string(),
                "record".into(),
                "-a".into(),
                "-q".into(),
                "-o".into(),
                sysprof_out.display().to_string(),
            ]
        }),
        &sysprof_out,
    )];
    if let Some(perf) = perf {
        let (perf, data) = (perf.to_string(), perf_out.display().to_string());
        profilers.push((
            "perf record -a -g",
            Box::new(move |_: u64| {
                let mut v = vec![perf.clone()];
                v.extend(["record", "-q", "-a", "-g", "-F", "999", "-o"].map(String::from));
                v.push(data.clone());
                v
            }),
            &perf_out,
        ));
    }
    let mut read_back_md = String::new();
    let mut read_back_rows = json!([]);
    for (name, argv, out) in &profilers {
        eprintln!("bench: length: {name} for {short} s and {long} s");
        match (run(&argv(short), short, out), run(&argv(long), long, out)) {
            (Ok(a), Ok(b)) => {
                md += &format!(
                    "| {name} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.1} |\n",
                    a.0,
                    b.0,
                    b.0 / a.0,
                    a.1,
                    b.1,
                    b.2 as f64 / 1e6
                );
                rows.push(json!({ "profiler": name, "short_s": short, "long_s": long, "peak_rss_mb": [a.0, b.0], "stop_to_written_ms": [a.1, b.1], "file_bytes": [a.2, b.2] }));
                if *out == sysprof_out.as_path() {
                    (read_back_md, read_back_rows) = read_back(sysprof, out);
                }
            }
            (a, b) => {
                let e = a
                    .err()
                    .or(b.err())
                    .map(|e| format!("{e:#}"))
                    .unwrap_or_default();
                eprintln!("bench: length: {name} failed: {e}");
                md += &format!("| {name} | failed: {e} | | | | | |\n");
            }
        }
    }
    let _ = std::fs::remove_file(&perf_out);
    md += &read_back_md;
    (
        md,
        json!({ "recordings": rows, "read_back": read_back_rows }),
    )
}
