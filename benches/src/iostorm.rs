//! The I/O-storm section of `cargo xtask bench`: the test suite's I/O-heavy
//! program alone and under each system-wide profiler, as the pgbench
//! section runs a server.
//!
//! In: the sysprof binary, perf if installed, `tests/workloads/iostorm.c`
//! (two threads' O_DIRECT reads of one block, a thread's fdatasyncs, a
//! pipe round trip; the same program `nothing_is_lost_beside_an_io_storm`
//! runs), compiled here, and a loop device made for the section (through
//! the page cache, so a read is a block request the host's disk does not
//! slow; detached at the end). Out: the pgbench section's table (its
//! throughput the storm's reads a second) and JSON. Nothing is asserted.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::pgbench::{alternate, configurations, table};

/// A loop device over a file of `work`, detached on drop.
struct Loop {
    device: String,
}

impl Loop {
    fn attach(work: &Path) -> Result<Loop> {
        let backing = work.join("iostorm.img");
        std::fs::write(&backing, vec![7u8; 16 << 20])?;
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=off"])
            .arg(&backing)
            .output()
            .context("losetup (util-linux)")?;
        if !out.status.success() {
            bail!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(Loop {
            device: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Run the storm for `secs`: its block reads a second.
fn storm(exe: &Path, device: &str, synced: &Path, secs: u64) -> Result<f64> {
    let out = Command::new(exe)
        .arg(device)
        .arg(secs.to_string())
        .arg(synced)
        .output()
        .context("running iostorm")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "iostorm failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let reads: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("reads=")?.trim().parse().ok())
        .with_context(|| format!("no reads= in iostorm's output: {text}"))?;
    Ok(reads / secs as f64)
}

/// The section: see the module doc.
pub fn section(
    sysprof: &Path,
    perf: Option<&str>,
    work: &Path,
    root: &Path,
    quick: bool,
) -> (String, serde_json::Value) {
    let mut md = String::from("\n## An I/O storm beside each profiler\n\n");
    let exe = work.join("iostorm");
    let built = Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(root.join("tests/workloads/iostorm.c"))
        .arg("-o")
        .arg(&exe)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        md += "Not run: compiling tests/workloads/iostorm.c failed\n";
        return (md, json!(null));
    }
    let disk = match Loop::attach(work) {
        Ok(d) => d,
        Err(e) => {
            md += &format!("Not run: {e:#}\n");
            return (md, json!(null));
        }
    };
    let (rounds, secs) = if quick { (2, 6) } else { (3, 8) };
    let stderr_path = work.join("iostorm.stderr");
    let synced = work.join("iostorm.synced");
    let configs = configurations(
        sysprof,
        perf,
        &work.join("iostorm.json.gz"),
        &work.join("iostorm.perf.data"),
    );
    let (runs, failures) = alternate(&configs, rounds, &stderr_path, || {
        storm(&exe, &disk.device, &synced, secs)
    });
    drop(disk);
    md += &format!(
        "The test suite's I/O storm (`tests/workloads/iostorm.c`: two threads' O_DIRECT reads of one 4-KiB block \
         of a loop device, a thread's fdatasyncs, a pipe round trip), {secs} s each, alternating rounds ({rounds}); \
         the profiler starts first and is stopped by SIGINT after the storm ends. Columns as the pgbench table's; \
         throughput: the storm's reads a second.\n\n\
         | configuration | reads/s | vs alone | profiler CPU ms | while recording ms | peak RSS MB | lost | first sample ms | attached ms | ring bytes / switch |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let (table_md, rows) = table(&configs, &runs, "reads_per_s");
    md += &table_md;
    for f in &failures {
        md += &format!("\nFailed: {f}\n");
    }
    (md, json!({ "rows": rows }))
}
