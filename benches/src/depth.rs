//! `cargo xtask bench --only depth`: how much of a deep program's stacks each
//! way of unwinding recovers, and what the in-kernel unwinder's tables cost.
//!
//! In: a small crate with serde, serde_json and regex (written here, its
//! dependencies fetched from crates.io once), built clean with `cargo build`
//! under `sysprof record -a` (in-kernel DWARF), `sysprof record -a
//! --call-graph dwarf-copy` (16 KiB copies unwound in userspace) and `perf
//! record -a --call-graph dwarf,32768`, alternating. Out: per configuration
//! the share of rustc's samples whose stack reaches its thread's root
//! (`clone3`/`start_thread` for threads, `_start`/`_dl_start_user` for the
//! main thread), and for sysprof the same without the samples taken while an
//! exiting (or exec'ing) rustc's memory is being freed, when no user stack
//! exists to walk; then the tables' build time and size for libc,
//! libpython3 and rustc's two big libraries. Nothing asserts a number.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::json;

/// Frames a whole stack starts with (root first).
const ROOTS: [&str; 5] = [
    "_start",
    "clone3",
    "__clone3",
    "start_thread",
    "_dl_start_user",
];

fn write_crate(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"depthcrate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n\
         serde = { version = \"1\", features = [\"derive\"] }\nserde_json = \"1\"\nregex = \"1\"\n\n[workspace]\n",
    )?;
    std::fs::write(
        dir.join("src/main.rs"),
        "use serde::{Deserialize, Serialize};\n#[derive(Serialize, Deserialize, Debug)]\nstruct Point { x: i32, y: i32, name: String }\n\
         fn main() {\n    let re = regex::Regex::new(r\"(\\d+),(\\d+)\").unwrap();\n    let c = re.captures(\"3,4\").unwrap();\n    \
         let p = Point { x: c[1].parse().unwrap(), y: c[2].parse().unwrap(), name: \"p\".into() };\n    \
         println!(\"{}\", serde_json::to_string(&p).unwrap());\n}\n",
    )?;
    let ok = Command::new("cargo")
        .arg("fetch")
        .current_dir(dir)
        .status()
        .context("cargo fetch")?;
    if !ok.success() {
        bail!("cargo fetch failed (crates.io unreachable?)");
    }
    Ok(())
}

/// (whole, all, whole without teardown samples, all without them) of sysprof's folded rustc stacks.
fn classify_folded(folded: &str) -> (u64, u64, u64, u64) {
    let (mut whole, mut all, mut whole_live, mut all_live) = (0, 0, 0, 0);
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.first() != Some(&"rustc") {
            continue;
        }
        let is_whole = frames.get(1).is_some_and(|f| ROOTS.contains(f));
        let teardown = frames
            .iter()
            .any(|f| *f == "do_exit_[k]" || *f == "__x64_sys_execve_[k]");
        all += n;
        whole += n * is_whole as u64;
        if !teardown {
            all_live += n;
            whole_live += n * is_whole as u64;
        }
    }
    (whole, all, whole_live, all_live)
}

/// (whole, all) of `perf script -F comm,sym` output for rustc: each sample
/// a block of frames, leaf first, the root last.
fn classify_perf(script: &str) -> (u64, u64) {
    let (mut whole, mut all) = (0, 0);
    for block in script.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if head.split_whitespace().next() != Some("rustc") {
            continue;
        }
        let root = lines
            .next_back()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("");
        all += 1;
        whole += ROOTS
            .iter()
            .any(|r| root == *r || root.starts_with(&format!("{r}+"))) as u64;
    }
    (whole, all)
}

fn cargo_clean(dir: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir.join("target"));
    Ok(())
}

/// One sysprof build: (whole, all, whole_live, all_live, the -v kernel unwinding line).
fn sysprof_build(
    sysprof: &Path,
    dir: &Path,
    call_graph: &str,
) -> Result<(u64, u64, u64, u64, String)> {
    cargo_clean(dir)?;
    let out = dir.join(format!("{call_graph}.json.gz"));
    let run = Command::new(sysprof)
        .args(["record", "-a", "-v", "-q", "--call-graph", call_graph, "-o"])
        .arg(&out)
        .args(["--", "cargo", "build", "--offline", "-q"])
        .current_dir(dir)
        .output()?;
    if !run.status.success() {
        bail!(
            "sysprof record failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let stderr = String::from_utf8_lossy(&run.stderr);
    let kernel_line = stderr
        .lines()
        .find(|l| l.contains("kernel unwinding:"))
        .unwrap_or("")
        .to_string();
    let report = Command::new(sysprof)
        .arg("report")
        .arg(&out)
        .args(["--comm", "rustc", "--format", "folded"])
        .output()?;
    let (w, a, wl, al) = classify_folded(&String::from_utf8_lossy(&report.stdout));
    Ok((w, a, wl, al, kernel_line))
}

fn perf_build(perf: &str, dir: &Path) -> Result<(u64, u64)> {
    cargo_clean(dir)?;
    let data = dir.join("perf.data");
    let run = Command::new(perf)
        .args([
            "record",
            "-q",
            "-a",
            "-F",
            "999",
            "--call-graph",
            "dwarf,32768",
            "-o",
        ])
        .arg(&data)
        .args(["--", "cargo", "build", "--offline", "-q"])
        .current_dir(dir)
        .output()?;
    if !run.status.success() {
        bail!(
            "perf record failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let script = Command::new(perf)
        .arg("script")
        .arg("-i")
        .arg(&data)
        .args(["--comms", "rustc", "--no-inline", "-F", "comm,ip,sym"])
        .output()?;
    let _ = std::fs::remove_file(&data);
    Ok(classify_perf(&String::from_utf8_lossy(&script.stdout)))
}

fn pct(w: u64, a: u64) -> String {
    if a == 0 {
        "–".into()
    } else {
        format!("{:.1}%", 100.0 * w as f64 / a as f64)
    }
}

/// rustc's two big libraries, from its sysroot.
fn rustc_libraries() -> Vec<PathBuf> {
    let Ok(out) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
        return Vec::new();
    };
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| {
        let n = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // (libLLVM-*.so is a linker script naming the real one.)
        let elf = std::fs::File::open(p).and_then(|mut f| {
            let mut magic = [0u8; 4];
            std::io::Read::read_exact(&mut f, &mut magic).map(|_| magic == *b"\x7fELF")
        });
        (n.starts_with("librustc_driver-") || n.starts_with("libLLVM"))
            && n.contains(".so")
            && elf.unwrap_or(false)
    });
    found.sort();
    found.dedup_by(|a, b| std::fs::canonicalize(&*a).ok() == std::fs::canonicalize(&*b).ok());
    found
}

/// The depth section: markdown and JSON.
pub fn section(
    sysprof: &Path,
    perf: Option<&str>,
    work: &Path,
    quick: bool,
) -> (String, serde_json::Value) {
    let mut md = String::from("\n## Whole stacks of a deep program: rustc in a `cargo build` (serde, serde_json, regex; debug, clean)\n\n");
    md += "Share of rustc's on-CPU samples whose stack reaches its thread's root (`clone3`/`start_thread`, `_start`). \
           \"Live\": without the samples taken inside exit or execve, while the process's memory is being freed \
           (no user stack exists then). One row per build, configurations alternating.\n\n";
    md += "| build | configuration | rustc samples | whole | whole, live |\n|---|---|---:|---:|---:|\n";
    let dir = work.join("depthcrate");
    let mut rows = Vec::new();
    if let Err(e) = write_crate(&dir) {
        md += &format!("\n(not run: {e:#})\n");
        return (md, json!({ "error": format!("{e:#}") }));
    }
    let mut kernel_lines = Vec::new();
    for round in 0..if quick { 1 } else { 3 } {
        for config in ["dwarf", "dwarf-copy", "perf"] {
            eprintln!("bench: depth round {} × {config}", round + 1);
            let result = match config {
                "perf" => match perf {
                    Some(p) => perf_build(p, &dir).map(|(w, a)| (w, a, None)),
                    None => continue,
                },
                cg => sysprof_build(sysprof, &dir, cg).map(|(w, a, wl, al, line)| {
                    if cg == "dwarf" {
                        kernel_lines.push(line);
                    }
                    (w, a, Some((wl, al)))
                }),
            };
            let name = match config {
                "dwarf" => "sysprof (in-kernel DWARF, default)",
                "dwarf-copy" => "sysprof --call-graph dwarf-copy (16 KiB)",
                _ => "perf --call-graph dwarf,32768",
            };
            match result {
                Ok((w, a, live)) => {
                    let live_pct = live
                        .map(|(wl, al)| pct(wl, al))
                        .unwrap_or_else(|| "–".into());
                    md += &format!(
                        "| {} | {name} | {a} | {} | {live_pct} |\n",
                        round + 1,
                        pct(w, a)
                    );
                    rows.push(json!({ "round": round + 1, "config": config, "samples": a, "whole": w, "live": live }));
                }
                Err(e) => md += &format!("| {} | {name} | failed: {e:#} | | |\n", round + 1),
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir.join("target"));
    if !kernel_lines.is_empty() {
        md += "\nsysprof's own account (`record -v`) of the in-kernel builds:\n\n";
        for l in &kernel_lines {
            md += &format!("    {}\n", l.trim_start_matches("sysprof: "));
        }
    }

    md += "\n## In-kernel unwind tables: build time and size\n\nOne table per file, compiled from its `.eh_frame` \
           (one thread; median of 5; the time includes reading the file), 8 bytes a row in the kernel's array.\n\n\
           | file | CFI KiB | rows | table MiB | build ms |\n|---|---:|---:|---:|---:|\n";
    let mut files: Vec<PathBuf> = vec![
        "/lib/x86_64-linux-gnu/libc.so.6".into(),
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0".into(),
    ];
    files.extend(rustc_libraries());
    let mut tables = Vec::new();
    for f in files.iter().filter(|f| f.exists()) {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let t = Instant::now();
            let r = sysprof::unwind::tables::compile_file(f, 1 << 26);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some(r);
        }
        times.sort_by(f64::total_cmp);
        match last {
            Some(Ok((table, cfi))) => {
                let rows_n = table.rows.len();
                md += &format!(
                    "| {} | {} | {rows_n} | {:.1} | {:.1} |\n",
                    f.file_name().unwrap().to_string_lossy(),
                    cfi / 1024,
                    rows_n as f64 * 8.0 / (1 << 20) as f64,
                    times[2]
                );
                tables.push(json!({ "file": f, "cfi_bytes": cfi, "rows": rows_n, "ms": times[2] }));
            }
            Some(Err(e)) => md += &format!("| {} | failed: {e} | | | |\n", f.display()),
            None => {}
        }
    }
    (md, json!({ "builds": rows, "tables": tables }))
}
