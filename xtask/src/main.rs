//! `cargo xtask`: the project's chores that are not plain cargo commands.
//!
//! - `build-ebpf [--check]`: compile every `ebpf/*.bpf.c` with clang-19 into
//!   the committed `ebpf/*.bpf.o`; with `--check`, fail if a committed object
//!   differs from a fresh build. Installs clang-19, llvm-19 and libbpf-dev
//!   with apt-get when they are missing and we are root.
//! - `test [--no-root-tests] [--repeat N] [--beside busy|build]`: everything
//!   CI runs: the eBPF freshness check, unit tests, a release build, then the
//!   root-only integration tests one at a time; ends with one `N passed, M
//!   failed, K skipped` line. `--repeat N` runs the integration tests N times
//!   and lists every test that failed in any round (flake hunting);
//!   `--beside` runs them beside a load xtask starts and stops itself (one
//!   busy CPU, or a compiler loop), as users' machines are.
//! - `bench`: the benchmarks in `benches/` (see docs/benchmarks.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

const CLANG: &str = "clang-19";
const STRIP: &str = "llvm-strip-19";

/// The project's chores that are not plain cargo commands.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about)]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Compile ebpf/*.bpf.c with clang-19 into the committed ebpf/*.bpf.o.
    BuildEbpf {
        /// Fail if a committed object differs from a fresh build instead of replacing it.
        #[arg(long)]
        check: bool,
    },
    /// Run everything CI runs (as root: the integration tests load real BPF).
    Test {
        /// Run only what needs no root (refused under CI=true: CI must run everything).
        #[arg(long)]
        no_root_tests: bool,
        /// Run the integration tests this many times and report every test that failed in any round.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
        /// Run the integration tests beside a load: `busy` (one CPU spinning)
        /// or `build` (a compiler loop: a new cc1 every few hundred ms).
        #[arg(long, value_enum)]
        beside: Option<Load>,
    },
    /// Benchmarks side by side with perf and samply (`cargo xtask bench --help` lists the harness's options).
    #[command(disable_help_flag = true)]
    Bench {
        /// Arguments for the bench harness.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Task::BuildEbpf { check } => build_ebpf(check),
        Task::Test {
            no_root_tests,
            repeat,
            beside,
        } => test(no_root_tests, repeat, beside),
        Task::Bench { args } => bench(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, the whole chain of causes; no backtrace.
            eprintln!("xtask: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Make sure clang-19, llvm-strip-19 and the libbpf headers are installed.
fn ensure_toolchain() -> Result<()> {
    let headers = Path::new("/usr/include/bpf/bpf_helpers.h").exists();
    if have(CLANG) && have(STRIP) && headers {
        return Ok(());
    }
    let install = "apt-get -o DPkg::Lock::Timeout=600 update && apt-get -o DPkg::Lock::Timeout=600 install -y clang-19 llvm-19 libbpf-dev";
    if !is_root() || !have("apt-get") {
        bail!("the eBPF toolchain is missing: run `sudo sh -c '{install}'` (Debian/Ubuntu), then try again");
    }
    eprintln!("xtask: installing the eBPF toolchain: {install}");
    run(Command::new("sh").arg("-c").arg(format!(
        "DEBIAN_FRONTEND=noninteractive {install} >/dev/null"
    )))
    .context("installing clang-19, llvm-19 and libbpf-dev")
}

/// The programs the integration tests run (workloads built with gcc, a JIT
/// workload in node, a JVM and its compiler, objcopy/readelf/nm for stripped
/// binaries, python3 as a debuginfod server and a Python workload,
/// PostgreSQL and its pgbench, PHP and Composer, Perl's json_pp, Ruby's
/// rdoc), installed with apt-get when missing (rbspy, from crates.io, is
/// built by the test that uses it: tests/src/tools.rs).
fn ensure_test_tools() -> Result<()> {
    let needed = [
        ("gcc", "gcc libc6-dev"),
        ("node", "nodejs"),
        ("javac", "default-jdk-headless"),
        ("python3", "python3"),
        ("objcopy", "binutils"),
        ("readelf", "binutils"),
        ("nm", "binutils"),
        ("go", "golang-go"),
        // A server under load beside `record -a` (tests/tests/server.rs).
        ("pgbench", "postgresql"),
        // PHP and a program in it (tests/tests/php.rs).
        ("php8.2", "php8.2-cli"),
        ("composer", "composer"),
        // Perl's tools and standard modules (tests/tests/perl.rs).
        ("json_pp", "perl"),
        // Ruby and a program in it (tests/tests/ruby.rs).
        ("rdoc", "ruby"),
    ];
    let mut packages: Vec<&str> = needed
        .iter()
        .filter(|(tool, _)| !have(tool))
        .map(|(_, p)| *p)
        .collect();
    packages.dedup();
    if packages.is_empty() {
        return Ok(());
    }
    // Another apt run (unattended upgrades at boot) holds its lock: wait for it.
    let install = format!("apt-get -o DPkg::Lock::Timeout=600 update && apt-get -o DPkg::Lock::Timeout=600 install -y {}", packages.join(" "));
    if !have("apt-get") {
        bail!(
            "the integration tests need {}: install them (Debian: `{install}`), then try again",
            packages.join(", ")
        );
    }
    eprintln!("xtask: installing what the integration tests run: {install}");
    run(Command::new("sh").arg("-c").arg(format!(
        "DEBIAN_FRONTEND=noninteractive {install} >/dev/null"
    )))
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
        .args([
            "-target",
            "bpf",
            "-mcpu=v3",
            "-g",
            "-O2",
            "-Wall",
            "-Werror",
            target_arch_define(),
        ])
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

/// Where the eBPF sources are compiled, whatever the checkout's path.
/// clang-19's BTF for sched.bpf.c depends on the length of the compilation
/// directory's path, even with -ffile-prefix-map (measured: from
/// /tmp/ab/ebpf, /tmp/abc/ebpf and /tmp/ci/ebpf one object; from
/// /tmp/abcd/ebpf, /work/main/ebpf and longer ones another, the order of
/// some BTF types differing), so a fresh clone in a short path failed the
/// freshness check. One fixed directory gives one object everywhere.
const EBPF_BUILD_DIR: &str = "/tmp/sysprof-ebpf-build";

/// The fixed build directory, made if missing (ours, a real directory, not
/// a link), locked against a concurrent build, with `sources` copied in.
fn ebpf_build_dir(sources: &[PathBuf]) -> Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(EBPF_BUILD_DIR);
    let _ = std::fs::create_dir(&dir);
    let meta = std::fs::symlink_metadata(&dir)?;
    // /proc/self belongs to our effective user.
    let me = std::fs::metadata("/proc/self")?.uid();
    if !meta.is_dir() || meta.uid() != me {
        bail!("{EBPF_BUILD_DIR} is not a directory of ours: remove it and try again");
    }
    let lock = std::fs::File::create(dir.join(".lock"))?;
    lock.lock()?;
    let src_dir = dir.join("ebpf");
    let _ = std::fs::remove_dir_all(&src_dir);
    std::fs::create_dir_all(&src_dir)?;
    let ebpf = root().join("ebpf");
    for s in sources {
        // Headers in folders of `ebpf/` (a runtime's, `runtimes/`) keep
        // their place, as the sources include them by that path.
        let to = src_dir.join(s.strip_prefix(&ebpf).expect("a source under ebpf/"));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(s, to)?;
    }
    Ok((src_dir, lock))
}

fn build_ebpf(check: bool) -> Result<()> {
    ensure_toolchain()?;
    let ebpf = root().join("ebpf");
    let mut stale = Vec::new();
    // The programs and headers of `ebpf/`, and the headers of its folders
    // (one level: `runtimes/`).
    let mut inputs: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(&ebpf)? {
        let path = entry?.path();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path)? {
                let inner = inner?.path();
                if inner.to_string_lossy().ends_with(".h") {
                    inputs.push(inner);
                }
            }
        } else if path.to_string_lossy().ends_with(".bpf.c")
            || path.to_string_lossy().ends_with(".h")
        {
            inputs.push(path);
        }
    }
    let (build_dir, _lock) = ebpf_build_dir(&inputs)?;
    let tmp = PathBuf::from(EBPF_BUILD_DIR).join("out");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let mut sources: Vec<PathBuf> = inputs
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .map(|p| build_dir.join(p.file_name().unwrap()))
        .collect();
    sources.sort();
    for src in &sources {
        let name = src
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".bpf.c", ".bpf.o");
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
        eprintln!(
            "xtask: {} eBPF object(s) are fresh and reproducible",
            sources.len()
        );
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    // No incremental caches: a one-off build gains nothing from them, and
    // they were 637 MB of the test build's 4.7 GB (CI ran out of disk).
    c.env("CARGO_INCREMENTAL", "0");
    c
}

/// What a run of `cargo test` reported.
#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    /// Per test: (rounds passed, rounds failed).
    per_test: BTreeMap<String, (u32, u32)>,
}

/// Run a `cargo test`, echoing its output, adding up its "test result" lines
/// and recording each test's outcome. A failing run is reported by the
/// totals, not as an error: the caller decides what failed means.
fn run_tests(cmd: &mut Command, totals: &mut Totals) -> Result<bool> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |what: &str| -> u64 {
                rest.split(';')
                    .find_map(|p| p.trim().strip_suffix(what))
                    .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0)
            };
            totals.passed += count("passed");
            totals.failed += count("failed");
        } else if let Some(rest) = line.strip_prefix("test ") {
            if let Some((name, outcome)) = rest.rsplit_once(" ... ") {
                let entry = totals.per_test.entry(name.to_string()).or_default();
                match outcome.trim() {
                    "ok" => entry.0 += 1,
                    "FAILED" => entry.1 += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(child.wait()?.success())
}

/// Why the integration tests cannot record here, if they cannot: no root,
/// or no BTF. (No tracefs is needed: every program attaches without it, and
/// a test checks that.)
fn root_test_blocker() -> Option<String> {
    if !is_root() {
        return Some(
            "not running as root: run `sudo -E env \"PATH=$PATH\" cargo xtask test`".into(),
        );
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux): use a distribution kernel 5.15 or newer".into());
    }
    None
}

/// A load the integration tests can run beside (`--beside`).
#[derive(Clone, Copy, clap::ValueEnum)]
enum Load {
    /// One CPU spinning in user space for the whole run.
    Busy,
    /// A compiler loop: gcc -O2 over the test workloads, again and again
    /// (a new cc1 every 0.1-0.3 s: new processes, exec, mmap, page faults).
    Build,
}

/// A load running in its own process group; dropping it kills the group.
struct Beside {
    child: std::process::Child,
    scratch: PathBuf,
}

impl Beside {
    fn start(load: Load) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let scratch = std::env::temp_dir().join(format!("sysprof-beside-{}", std::process::id()));
        // Each load ends by itself once this process is gone (`kill -0`
        // fails): a run killed by SIGINT or SIGTERM never gets to Drop, and
        // a load left spinning would sit beside whatever runs next.
        let me = std::process::id();
        let script = match load {
            Load::Busy => format!("i=0; while :; do i=$((i + 1)); if [ $i -ge 200000 ]; then i=0; kill -0 {me} 2>/dev/null || exit 0; fi; done"),
            Load::Build => {
                let out = &scratch;
                std::fs::create_dir_all(out)?;
                format!(
                    "while :; do for f in {}/tests/workloads/*.c; do kill -0 {me} 2>/dev/null || exit 0; gcc -O2 -pthread -c \"$f\" -o {}/x.o 2>/dev/null; done; done",
                    root().display(),
                    out.display()
                )
            }
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            // Its own group, so that stopping it stops every gcc it started.
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .spawn()
            .context("starting the load beside the tests")?;
        eprintln!(
            "xtask: integration tests beside a load (`{}`, process group {})",
            match load {
                Load::Busy => "busy",
                Load::Build => "build",
            },
            child.id()
        );
        Ok(Beside { child, scratch })
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn test(no_root_tests: bool, repeat: u32, beside: Option<Load>) -> Result<()> {
    let ci = std::env::var_os("CI").is_some();
    if no_root_tests && ci {
        bail!(
            "--no-root-tests is refused under CI=true: CI must run the integration tests (as root)"
        );
    }
    build_ebpf(true)?;
    let mut totals = Totals::default();
    // Tests that cannot run append their name here (see tests/src/run.rs `skip`).
    let skip_log = std::env::temp_dir().join(format!("sysprof-skipped-{}", std::process::id()));
    let _ = std::fs::remove_file(&skip_log);
    let result = (|| {
        if !run_tests(
            cargo().args(["test", "--workspace", "--exclude", "sysprof-tests"]),
            &mut totals,
        )? {
            bail!("unit tests failed");
        }
        run(cargo().args(["build", "--release", "-p", "sysprof"]))?;
        if no_root_tests {
            eprintln!(
                "xtask: SKIPPING the integration tests (--no-root-tests): they need root and BPF"
            );
            return Ok(());
        }
        if let Some(why) = root_test_blocker() {
            bail!("the integration tests cannot run: {why}; `cargo xtask test --no-root-tests` runs the rest");
        }
        ensure_test_tools()?;
        // Where cargo put it: CARGO_TARGET_DIR when set (a shared build
        // directory), else the workspace's own target/.
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target"));
        let bin = root().join(target).join("release/sysprof");
        // Build the test binaries once, outside the rounds.
        run(cargo().args(["test", "-p", "sysprof-tests", "--tests", "--no-run"]))?;
        let _load = beside.map(Beside::start).transpose()?;
        let mut ok = true;
        for round in 1..=repeat {
            if repeat > 1 {
                println!("xtask: integration tests, round {round} of {repeat}");
            }
            ok &= run_tests(
                cargo()
                    .env("SYSPROF_BIN", &bin)
                    .env("SYSPROF_SKIP_LOG", &skip_log)
                    // --no-fail-fast: every suite runs in every round, so
                    // --repeat counts each test's failures over all rounds.
                    .args([
                        "test",
                        "-p",
                        "sysprof-tests",
                        "--tests",
                        "--no-fail-fast",
                        "--",
                        "--test-threads=1",
                    ]),
                &mut totals,
            )?;
        }
        if repeat > 1 {
            let flaky: Vec<String> = totals
                .per_test
                .iter()
                .filter(|(_, (_, failed))| *failed > 0)
                .map(|(name, (passed, failed))| {
                    format!("{name}: failed {failed} of {}", passed + failed)
                })
                .collect();
            println!(
                "xtask: {repeat} rounds; {}",
                if flaky.is_empty() {
                    "no test failed in any round".to_string()
                } else {
                    flaky.join("; ")
                }
            );
        }
        if !ok {
            bail!("integration tests failed");
        }
        Ok(())
    })();
    let skipped: Vec<String> = std::fs::read_to_string(&skip_log)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let _ = std::fs::remove_file(&skip_log);
    for s in &skipped {
        println!("xtask: SKIPPED {s}");
    }
    // One closing line with every test counted, whatever happened. A skipped
    // test also reported itself as passed; it is counted as skipped only.
    let skipped_count = skipped.len() as u64;
    println!(
        "{} passed, {} failed, {} skipped",
        totals.passed.saturating_sub(skipped_count),
        totals.failed,
        skipped_count
    );
    result
}

fn bench(args: &[String]) -> Result<()> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "sysprof",
        "-p",
        "sysprof-benches",
    ]))?;
    run(cargo()
        .arg("run")
        .args(["--release", "-q", "-p", "sysprof-benches", "--"])
        .args(args))
}
