//! `cargo xtask`: the project's chores that are not plain cargo commands.
//!
//! - `build-ebpf [--check]`: compile every `ebpf/*.bpf.c` with clang-19 into
//!   the committed `ebpf/*.bpf.o`; with `--check`, fail if a committed object
//!   differs from a fresh build. Installs clang-19, llvm-19 and libbpf-dev
//!   with apt-get when they are missing and we are root.
//! - `test`: everything CI runs: the eBPF freshness check, unit tests, a
//!   release build, then the root-only integration tests one at a time.
//! - `bench`: the benchmarks in `benches/` (see the README's Benchmarks section).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const CLANG: &str = "clang-19";
const STRIP: &str = "llvm-strip-19";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-ebpf") => build_ebpf(args.iter().any(|a| a == "--check")),
        Some("test") => test(&args[1..]),
        Some("bench") => bench(&args[1..]),
        _ => bail!("usage: cargo xtask build-ebpf [--check] | test [--no-root-tests] | bench [--quick]"),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Make sure clang-19, llvm-strip-19 and the libbpf headers are installed.
fn ensure_toolchain() -> Result<()> {
    let headers = Path::new("/usr/include/bpf/bpf_helpers.h").exists();
    if have(CLANG) && have(STRIP) && headers {
        return Ok(());
    }
    let install = "apt-get update && apt-get install -y clang-19 llvm-19 libbpf-dev";
    if !is_root() || !have("apt-get") {
        bail!("the eBPF toolchain is missing: run `sudo sh -c '{install}'` (Debian/Ubuntu), then try again");
    }
    eprintln!("xtask: installing the eBPF toolchain: {install}");
    run(Command::new("sh").arg("-c").arg(format!("DEBIAN_FRONTEND=noninteractive {install} >/dev/null")))
        .context("installing clang-19, llvm-19 and libbpf-dev")
}

/// The programs the integration tests run (workloads built with gcc, a JIT
/// workload in node, objcopy/readelf/nm for stripped binaries, python3 as a
/// debuginfod server), installed with apt-get when missing.
fn ensure_test_tools() -> Result<()> {
    let needed = [("gcc", "gcc libc6-dev"), ("node", "nodejs"), ("python3", "python3"), ("objcopy", "binutils"), ("readelf", "binutils"), ("nm", "binutils")];
    let mut packages: Vec<&str> = needed.iter().filter(|(tool, _)| !have(tool)).map(|(_, p)| *p).collect();
    packages.dedup();
    if packages.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get update && apt-get install -y {}", packages.join(" "));
    if !have("apt-get") {
        bail!("the integration tests need {}: install them (Debian: `{install}`), then try again", packages.join(", "));
    }
    eprintln!("xtask: installing what the integration tests run: {install}");
    run(Command::new("sh").arg("-c").arg(format!("DEBIAN_FRONTEND=noninteractive {install} >/dev/null")))
        .with_context(|| format!("installing {}", packages.join(" ")))
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn target_arch_define() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "-D__TARGET_ARCH_arm64",
        _ => "-D__TARGET_ARCH_x86",
    }
}

/// Compile one program reproducibly: no absolute paths in the object, and
/// DWARF stripped (BTF and BTF.ext stay; they carry the CO-RE relocations).
fn compile(src: &Path, out: &Path) -> Result<()> {
    let ebpf = src.parent().expect("ebpf dir");
    run(Command::new(CLANG)
        .current_dir(ebpf)
        // -mcpu=v3: atomic fetch-and-add (kernel 5.12+; we need 5.15 for bpf_task_pt_regs).
        .args(["-target", "bpf", "-mcpu=v3", "-g", "-O2", "-Wall", "-Werror", target_arch_define()])
        // No trailing slash: the compilation directory itself must be mapped too,
        // or its absolute path stays in the BTF line info.
        .arg(format!("-ffile-prefix-map={}=.", ebpf.display()))
        .arg("-I.")
        .arg("-c")
        .arg(src.file_name().expect("file name"))
        .arg("-o")
        .arg(out))?;
    run(Command::new(STRIP).arg("-g").arg(out))
}

fn build_ebpf(check: bool) -> Result<()> {
    ensure_toolchain()?;
    let ebpf = root().join("ebpf");
    let tmp = std::env::temp_dir().join(format!("sysprof-ebpf-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mut stale = Vec::new();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&ebpf)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for src in &sources {
        let name = src.file_name().unwrap().to_string_lossy().replace(".bpf.c", ".bpf.o");
        let fresh = tmp.join(&name);
        compile(src, &fresh)?;
        let committed = ebpf.join(&name);
        let same = std::fs::read(&committed).ok() == Some(std::fs::read(&fresh)?);
        if check {
            if !same {
                stale.push(name);
            }
        } else if !same {
            std::fs::copy(&fresh, &committed)?;
            eprintln!("xtask: rebuilt ebpf/{name}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    if !stale.is_empty() {
        bail!(
            "committed eBPF objects differ from a fresh build: {}; run `cargo xtask build-ebpf` and commit them",
            stale.join(", ")
        );
    }
    if check {
        eprintln!("xtask: {} eBPF object(s) are fresh and reproducible", sources.len());
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Run a `cargo test`, echoing its output and adding up its "test result" lines.
fn run_tests(cmd: &mut Command, totals: &mut (u64, u64)) -> Result<()> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().with_context(|| format!("running {cmd:?}"))?;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |what: &str| -> u64 {
                rest.split(';').find_map(|p| p.trim().strip_suffix(what)).and_then(|n| n.trim().rsplit(' ').next()?.parse().ok()).unwrap_or(0)
            };
            totals.0 += count("passed");
            totals.1 += count("failed");
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn test(args: &[String]) -> Result<()> {
    build_ebpf(true)?;
    let mut totals = (0, 0);
    let result = (|| {
        run_tests(cargo().args(["test", "--workspace", "--exclude", "sysprof-tests"]), &mut totals)?;
        run(cargo().args(["build", "--release", "-p", "sysprof"]))?;
        if args.iter().any(|a| a == "--no-root-tests") {
            eprintln!("xtask: SKIPPING the integration tests (--no-root-tests): they need root and BPF");
            return Ok(());
        }
        if !is_root() {
            bail!("the integration tests record with real BPF and need root: run `sudo -E cargo xtask test` (or pass --no-root-tests to run only the unit tests)");
        }
        ensure_test_tools()?;
        let bin = root().join("target/release/sysprof");
        run_tests(
            cargo().env("SYSPROF_BIN", &bin).args(["test", "-p", "sysprof-tests", "--tests", "--", "--test-threads=1"]),
            &mut totals,
        )
    })();
    // One closing line with every test counted, whatever happened.
    println!("{} passed, {} failed", totals.0, totals.1);
    result
}

fn bench(args: &[String]) -> Result<()> {
    run(cargo().args(["build", "--release", "-p", "sysprof", "-p", "sysprof-benches"]))?;
    run(cargo().arg("run").args(["--release", "-q", "-p", "sysprof-benches", "--"]).args(args))
}
