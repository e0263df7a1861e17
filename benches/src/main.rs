//! `cargo xtask bench`: sysprof side by side with `perf record` and samply.
//!
//! In: the workloads in `benches/workloads/*.c` (built here with gcc),
//! `py.py` (by Debian's python3, and by a copy sysprof does not take for an
//! interpreter), `work.php` (the same by Debian's php8.2), `work.pl` (by
//! Debian's perl), `work.rb` (by Debian's ruby) and `Work.java`
//! (built here with javac), the
//! profilers (sysprof from this workspace; perf and samply found on PATH or
//! installed). Out: one table on stdout and `target/bench/results.{md,json}`.
//! Every figure is a median over alternating runs (A B C … A B C …) with min
//! and max. Nothing here asserts a number: the goals live in the table.
//!
//! Per workload × configuration it measures: the workload's slowdown (its
//! own elapsed time vs. no profiler); the extra machine CPU per second of
//! workload (busy time from `/proc/stat`, which also sees what the kernel
//! spends on behalf of the profiler); the profiler's own CPU time and peak
//! RSS; the BPF programs' run time (`kernel.bpf_stats_enabled`, in a
//! separate run, since the statistics cost a clock read per program run);
//! samples expected vs. written and lost; the time from the stop signal to
//! the profile written; bytes per sample. A ten-second recording of every
//! CPU busy gives the end-to-end figures the goals are stated for, and a
//! goals table compares the medians with the issue's targets. `micro`
//! measures the userspace hot path offline in samples per second.

mod agent;
mod depth;
mod iostorm;
mod kernel_cost;
mod length;
mod micro;
mod pgbench;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde_json::json;

/// sysprof side by side with perf and samply: every figure a median of
/// alternating runs, written to target/bench/results.{md,json}.
#[derive(Parser)]
#[command(name = "cargo xtask bench", bin_name = "cargo xtask bench")]
struct Args {
    /// One run per configuration and shorter workloads (a smoke run, not figures to quote).
    #[arg(long)]
    quick: bool,
    /// Only the offline userspace benchmarks (no root needed).
    #[arg(long)]
    micro: bool,
    /// Only the agent section.
    #[arg(long)]
    agent: bool,
    /// Only these workloads, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = ["cpu", "switch", "fork", "io", "python", "python3.14", "php", "perl", "ruby", "go", "java", "compiler", "build", "long", "agent", "depth", "length", "pgbench", "iostorm"])]
    only: Vec<String>,
    /// Run the agent this many minutes beside a fork storm and report its memory and CPU over time.
    #[arg(long, value_name = "MINUTES", num_args = 0..=1, default_missing_value = "60")]
    soak: Option<u64>,
}

const FREQ: u32 = 999;
/// Time given to a system-wide profiler to attach before the workload starts.
const SETTLE: Duration = Duration::from_millis(1000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Profiler {
    None,
    Sysprof,
    SysprofCommand,
    Perf,
    Samply,
}

#[derive(Debug, Clone)]
struct Config {
    name: &'static str,
    profiler: Profiler,
    args: Vec<String>,
}

#[derive(Debug, Clone)]
struct Workload {
    name: &'static str,
    argv: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Run {
    elapsed_ms: f64,
    busy_ms_per_s: f64,
    /// Machine busy CPU ms over the workload's run (not per second: a
    /// profiler that slows a wakeup-bound workload lowers its rate).
    busy_ms: f64,
    profiler_cpu_ms: f64,
    profiler_rss_mb: f64,
    bpf_ms: Option<f64>,
    expected: f64,
    written: Option<f64>,
    lost: Option<f64>,
    stop_to_written_ms: f64,
    bytes: f64,
    /// sysprof in dwarf mode: user stacks unwound per second of unwinding.
    unwinds_per_s: Option<f64>,
    /// sysprof: scheduler/I-O records and thread states lost (0 when the
    /// summary line names none).
    sched_lost: Option<f64>,
    /// With BPF statistics: (program, runs, run time ns).
    bpf_programs: Vec<(String, u64, u64)>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let quick = args.quick;
    let only_micro = args.micro;
    let reps = if quick { 1 } else { 3 };
    let only: Option<Vec<String>> = (!args.only.is_empty()).then(|| args.only.clone());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir)?;

    if only_micro {
        let (md, micro) = micro_section(quick);
        println!("{md}");
        std::fs::write(out_dir.join("results.md"), &md)?;
        std::fs::write(
            out_dir.join("results.json"),
            serde_json::to_string_pretty(&json!({ "micro": micro }))?,
        )?;
        return Ok(());
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "the system-wide benchmarks need root (BPF, perf -a): run `sudo -E cargo xtask bench`"
        );
    }
    let only_agent = args.agent;
    let soak_minutes = args.soak;

    let work = out_dir.join("work");
    std::fs::create_dir_all(&work)?;
    let bin = |name: &str| -> Result<PathBuf> {
        let out = work.join(name);
        let src = root.join("benches/workloads").join(format!("{name}.c"));
        let ok = Command::new("gcc")
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-pthread"])
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .status()?;
        if !ok.success() {
            bail!("compiling {} failed", src.display());
        }
        Ok(out)
    };
    let io_file = work.join("io.data");
    if std::fs::metadata(&io_file).map(|m| m.len()).unwrap_or(0) < 256 << 20 {
        let mut f = std::fs::File::create(&io_file)?;
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 3) as u8).collect();
        for _ in 0..256 {
            std::io::Write::write_all(&mut f, &chunk)?;
        }
        f.sync_all()?;
    }
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let workloads = vec![
        Workload {
            name: "cpu",
            argv: vec![s(bin("cpu")?), if quick { "150" } else { "300" }.into()],
        },
        Workload {
            name: "switch",
            argv: vec![
                s(bin("switch")?),
                if quick { "150000" } else { "400000" }.into(),
            ],
        },
        Workload {
            name: "fork",
            argv: vec![s(bin("fork")?), if quick { "800" } else { "2000" }.into()],
        },
        Workload {
            name: "io",
            argv: vec![
                s(bin("io")?),
                s(io_file.clone()),
                if quick { "10000" } else { "40000" }.into(),
            ],
        },
    ];
    // Python: the same fixed work (a 10-frame Python chain under every
    // sample) by Debian's python3, whose frames sysprof reads, and by a copy
    // under a name it does not take for an interpreter (native frames only).
    let mut workloads = workloads;
    match std::fs::canonicalize("/usr/bin/python3") {
        Ok(python) => {
            let native = work.join("interp-native");
            std::fs::copy(&python, &native)?;
            let script = s(root.join("benches/workloads/py.py"));
            let rounds = if quick { "12000" } else { "30000" }.to_string();
            workloads.push(Workload { name: "python", argv: vec![s(python), script.clone(), rounds.clone()] });
            workloads.push(Workload { name: "python-native", argv: vec![s(native), script, rounds] });
        }
        Err(e) => eprintln!("bench: no /usr/bin/python3 ({e}): the python workloads are skipped; install it with `apt-get install python3`"),
    }
    // CPython 3.14 (Debian sid's, as the tests install it under target/;
    // installed here when missing): the same work, by it and by a copy
    // under a name not Python's (its standard library found through
    // PYTHONHOME, as the copy is not beside it).
    let py314 = root.join("target/cpython-3.14/usr/bin/python3.14");
    if !py314.exists() {
        let _ = Command::new("python3")
            .arg(root.join("tests/tools/debian_cpython.py"))
            .arg("3.14")
            .arg(root.join("target/cpython-3.14"))
            .stdout(std::process::Stdio::null())
            .status();
    }
    if py314.exists() {
        let native = work.join("interp-314-native");
        std::fs::copy(&py314, &native)?;
        let home = format!(
            "PYTHONHOME={}",
            root.join("target/cpython-3.14/usr").display()
        );
        let script = s(root.join("benches/workloads/py.py"));
        let rounds = if quick { "12000" } else { "30000" }.to_string();
        workloads.push(Workload {
            name: "python3.14",
            argv: vec![s(py314), script.clone(), rounds.clone()],
        });
        workloads.push(Workload {
            name: "python3.14-native",
            argv: vec!["env".into(), home, s(native), script, rounds],
        });
    } else {
        eprintln!("bench: no CPython 3.14 under target/cpython-3.14 (tests/tools/debian_cpython.py could not install it from Debian's sid): the python3.14 workloads are skipped");
    }
    // PHP: the same, by Debian's php8.2 (its frames read) and by a copy
    // under a name not PHP's.
    match std::fs::canonicalize("/usr/bin/php8.2") {
        Ok(php) => {
            let native = work.join("interp-php-native");
            std::fs::copy(&php, &native)?;
            let script = s(root.join("benches/workloads/work.php"));
            let rounds = if quick { "120000" } else { "300000" }.to_string();
            let argv = |bin: &Path| vec![s(bin.to_path_buf()), "-n".into(), script.clone(), rounds.clone()];
            workloads.push(Workload { name: "php", argv: argv(&php) });
            workloads.push(Workload { name: "php-native", argv: argv(&native) });
        }
        Err(e) => eprintln!("bench: no /usr/bin/php8.2 ({e}): the php workloads are skipped; install it with `apt-get install php8.2-cli`"),
    }
    // Perl: the same, by Debian's perl (its subs read) and by a copy under
    // a name not Perl's.
    match std::fs::canonicalize("/usr/bin/perl") {
        Ok(perl) => {
            let native = work.join("interp-plx-native");
            std::fs::copy(&perl, &native)?;
            let script = s(root.join("benches/workloads/work.pl"));
            let rounds = if quick { "32000" } else { "80000" }.to_string();
            let argv = |bin: &Path| vec![s(bin.to_path_buf()), script.clone(), rounds.clone()];
            workloads.push(Workload { name: "perl", argv: argv(&perl) });
            workloads.push(Workload { name: "perl-native", argv: argv(&native) });
        }
        Err(e) => eprintln!("bench: no /usr/bin/perl ({e}): the perl workloads are skipped; install it with `apt-get install perl`"),
    }
    // Ruby: the same, by Debian's ruby (its frames read) and by the same
    // ruby loading a copy of its libruby under a name not Ruby's (the
    // loader finds it through a link of libruby's soname; the mapping, and
    // so sysprof, sees the copy's own name).
    match std::fs::canonicalize("/usr/bin/ruby") {
        Ok(ruby) => {
            let lib = Path::new("/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1");
            let dir = work.join("interp-rb-native");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            std::fs::copy(lib, dir.join("librbnative.so"))?;
            std::os::unix::fs::symlink("librbnative.so", dir.join("libruby-3.1.so.3.1"))?;
            let script = s(root.join("benches/workloads/work.rb"));
            let rounds = if quick { "45000" } else { "110000" }.to_string();
            workloads.push(Workload { name: "ruby", argv: vec![s(ruby.clone()), script.clone(), rounds.clone()] });
            workloads.push(Workload {
                name: "ruby-native",
                argv: vec!["env".into(), format!("LD_LIBRARY_PATH={}", dir.display()), s(ruby), script, rounds],
            });
        }
        Err(e) => eprintln!("bench: no /usr/bin/ruby ({e}): the ruby workloads are skipped; install it with `apt-get install ruby`"),
    }
    // Go: the same labelled work, built as it is (its goroutines' labels
    // read) and with its `.go.buildinfo` renamed (not taken for Go: no
    // labels read).
    match go_workloads(&root, &work, quick) {
        Ok(go) => workloads.extend(go),
        Err(e) => eprintln!("bench: the go workloads are skipped ({e:#}); install Go with `apt-get install golang-go`"),
    }
    // A JVM (no flags): fixed work in compiled Java code, for the JVM's
    // slowdown and the BPF time per sample in it (sysprof also asks it for
    // its perf map while it runs).
    let javac = Command::new("javac")
        .arg("-d")
        .arg(&work)
        .arg(root.join("benches/workloads/Work.java"))
        .status();
    match javac {
        Ok(st) if st.success() => {
            let rounds = if quick { "8000" } else { "20000" }.to_string();
            workloads.push(Workload { name: "java", argv: vec!["java".into(), "-cp".into(), s(work.clone()), "Work".into(), rounds] });
        }
        _ => eprintln!("bench: javac failed or is missing: the java workload is skipped; install it with `apt-get install default-jdk-headless`"),
    }

    // A `cargo build` from clean: rustc's driver and LLVM (350 MB of
    // binaries) to name and unwind, build scripts and proc macros coming and
    // going. A small crate of dependencies sysprof's own build left in
    // cargo's cache (its lock file pins them), built offline (17 s here).
    let crate_dir = work.join("cargo-build");
    std::fs::create_dir_all(crate_dir.join("src"))?;
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        "[package]\nname = \"bench-build\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nserde_json = \"1\"\nclap = { version = \"4\", features = [\"derive\"] }\n\n[workspace]\n",
    )?;
    std::fs::write(
        crate_dir.join("src/main.rs"),
        "fn main() { println!(\"{}\", serde_json::json!({\"ok\": true})); }\n",
    )?;
    std::fs::copy(root.join("Cargo.lock"), crate_dir.join("Cargo.lock"))?;
    let target = crate_dir.join("target");
    let cargo_build_script = format!(
        "rm -rf '{}' && cargo build --release --offline -q --manifest-path '{}' --target-dir '{}'",
        target.display(),
        crate_dir.join("Cargo.toml").display(),
        target.display()
    );
    let cargo_build: Vec<String> = vec!["sh".into(), "-c".into(), cargo_build_script.clone()];
    let compile_once: Vec<String> = ["gcc", "-O2", "-pthread", "-c"]
        .into_iter()
        .map(String::from)
        .chain([
            s(root.join("tests/workloads/waitchain.c")),
            "-o".into(),
            s(work.join("cc.o")),
        ])
        .collect();
    // What a build machine runs, for `record` as for the agent: a compiler
    // loop (a new cc1 each ~0.12 s, fixed work) and a cargo build.
    // Both print "elapsed_ms=" as the bench's own workloads do.
    let timed = |script: String| -> Vec<String> {
        vec!["sh".into(), "-c".into(), format!("s=$(date +%s%N); {script} || exit 1; e=$(date +%s%N); echo elapsed_ms=$(( (e - s) / 1000000 ))")]
    };
    workloads.push(Workload {
        name: "compiler",
        argv: timed(format!(
            "i=0; while [ $i -lt {} ]; do {} || exit 1; i=$((i+1)); done",
            if quick { 15 } else { 40 },
            compile_once.join(" ")
        )),
    });
    workloads.push(Workload {
        name: "build",
        argv: timed(cargo_build_script),
    });

    // Built beside this program (`cargo xtask bench` builds both), in
    // whatever target directory cargo was given.
    let sysprof = std::env::current_exe()?.with_file_name("sysprof");
    // The agent runs its workloads in a loop for a minute each: the cpu
    // workload's fixed work, the switch and fork runs as above.
    // The cpu workload runs as one process for the whole minute (its timed
    // mode): "steady state" is one program running, not a new one each second.
    let agent_bins: Vec<(&'static str, Vec<String>)> = workloads
        .iter()
        .filter(|w| ["cpu", "switch", "fork"].contains(&w.name))
        .map(|w| {
            (
                w.name,
                if w.name == "cpu" {
                    vec![w.argv[0].clone(), if quick { "20s" } else { "60s" }.into()]
                } else {
                    w.argv.clone()
                },
            )
        })
        .collect();
    // And a compiler loop, what a build machine runs: a new cc1 every
    // ~0.12 s, each a new process with large binaries to name and unwind.
    let mut agent_bins = agent_bins;
    agent_bins.push(("compiler loop", compile_once.clone()));
    // And a `cargo build` from clean, again and again.
    agent_bins.push(("cargo build", cargo_build.clone()));
    // And a JVM, run again and again: its interpreted and compiled frames
    // named (the agent reads its methods, asks it for its perf map, and
    // writes its compiled methods' frame sizes into the kernel's tables).
    if let Some(java) = workloads.iter().find(|w| w.name == "java") {
        agent_bins.push(("jvm", java.argv.clone()));
    }
    if let Some(minutes) = soak_minutes {
        let fork = agent_bins
            .iter()
            .find(|b| b.0 == "fork")
            .map(|b| b.1.clone())
            .expect("the fork workload");
        let md = agent::soak(&sysprof, &work, &fork, minutes)?;
        println!("{md}");
        std::fs::write(out_dir.join("soak.md"), &md)?;
        return Ok(());
    }
    if only_agent {
        let (md, v, g) = agent::section(&sysprof, &work, &agent_bins, quick);
        let md = agent_goals(&g) + &md;
        println!("{md}");
        std::fs::write(out_dir.join("results.md"), &md)?;
        std::fs::write(
            out_dir.join("results.json"),
            serde_json::to_string_pretty(&json!({ "agent": v }))?,
        )?;
        return Ok(());
    }
    let workloads: Vec<Workload> = workloads
        .into_iter()
        .filter(|w| {
            only.as_ref().is_none_or(|o| {
                o.iter()
                    .any(|n| n == w.name.split('-').next().unwrap_or(w.name))
            })
        })
        .collect();
    let perf = find_perf();
    let samply = find_samply();
    let f = FREQ.to_string();
    let mut configs = vec![Config {
        name: "none",
        profiler: Profiler::None,
        args: vec![],
    }];
    configs.push(Config {
        name: "sysprof -a",
        profiler: Profiler::Sysprof,
        args: vec!["-a".into()],
    });
    configs.push(Config {
        name: "sysprof -a --call-graph fp",
        profiler: Profiler::Sysprof,
        args: vec!["-a".into(), "--call-graph".into(), "fp".into()],
    });
    // Before the in-kernel unwinder: a 16 KiB stack copy per sample, unwound here.
    configs.push(Config {
        name: "sysprof -a --call-graph dwarf-copy",
        profiler: Profiler::Sysprof,
        args: vec!["-a".into(), "--call-graph".into(), "dwarf-copy".into()],
    });
    configs.push(Config {
        name: "sysprof -a --no-off-cpu --no-io",
        profiler: Profiler::Sysprof,
        args: vec!["-a".into(), "--no-off-cpu".into(), "--no-io".into()],
    });
    // Like samply: only the workload's processes (bytes per sample compare like for like).
    configs.push(Config {
        name: "sysprof record -- CMD",
        profiler: Profiler::SysprofCommand,
        args: vec![],
    });
    // What samply writes (samples and stacks, no off-CPU or I/O markers):
    // bytes per sample like for like.
    configs.push(Config {
        name: "sysprof record --no-off-cpu --no-io -- CMD",
        profiler: Profiler::SysprofCommand,
        args: vec!["--no-off-cpu".into(), "--no-io".into()],
    });
    match &perf {
        Some(_) => {
            configs.push(Config { name: "perf -a -g", profiler: Profiler::Perf, args: vec!["-a".into(), "-g".into(), "-F".into(), f.clone()] });
            configs.push(Config { name: "perf -a --call-graph dwarf", profiler: Profiler::Perf, args: vec!["-a".into(), "--call-graph".into(), "dwarf".into(), "-F".into(), f.clone()] });
            configs.push(Config { name: "perf -a -e sched:sched_switch -g", profiler: Profiler::Perf, args: vec!["-a".into(), "-e".into(), "sched:sched_switch".into(), "-g".into()] });
        }
        None => eprintln!("bench: perf not found and not installed, skipping its configurations: install it with `apt-get install linux-perf`"),
    }
    match &samply {
        Some(_) => configs.push(Config {
            name: "samply record",
            profiler: Profiler::Samply,
            args: vec![],
        }),
        None => eprintln!(
            "bench: samply not found, skipping it: install it with `cargo install --locked samply`"
        ),
    }
    // samply refuses to record above paranoid level 1, even as root.
    let paranoid_before =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let _ = std::fs::write("/proc/sys/kernel/perf_event_paranoid", "1");

    // The timed runs keep kernel.bpf_stats_enabled off: with it on, every
    // program run also reads the clock twice, which on a switch-heavy
    // machine is a cost of the measurement, not of the profiler.
    let mut runs: BTreeMap<(&str, &str), Vec<Run>> = BTreeMap::new();
    for rep in 0..reps {
        for w in &workloads {
            for c in &configs {
                if c.name.contains("sched:sched_switch") && w.name != "switch" {
                    continue;
                }
                eprintln!("bench: rep {}/{reps} {} × {}", rep + 1, w.name, c.name);
                let r = match c.profiler {
                    Profiler::Samply => run_samply(
                        &[
                            samply.as_deref().unwrap(),
                            "record",
                            "--save-only",
                            "--no-open",
                            "-r",
                            &FREQ.to_string(),
                            "-o",
                        ],
                        w,
                        &work,
                        "samply.json.gz",
                    ),
                    Profiler::SysprofCommand => {
                        let mut argv =
                            vec![sysprof.to_str().unwrap(), "record", "-q", "-v", "-F", &f];
                        argv.extend(c.args.iter().map(String::as_str));
                        argv.push("-o");
                        run_samply(&argv, w, &work, "sysprof-cmd.json.gz")
                    }
                    _ => run_system_wide(c, w, &sysprof, perf.as_deref(), &work, false),
                };
                match r {
                    Ok(r) => runs.entry((w.name, c.name)).or_default().push(r),
                    Err(e) => eprintln!("bench: {} × {} failed: {e:#}", w.name, c.name),
                }
            }
        }
    }
    // One more run per sysprof system-wide configuration with BPF statistics
    // on, for the programs' run time alone.
    let stats_before =
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let mut bpf_ms: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut bpf_md = String::from(
        "\n## BPF programs (the separate run with `kernel.bpf_stats_enabled=1`)\n\n| workload | configuration | program | runs | ns/run | ms |\n|---|---|---|---:|---:|---:|\n",
    );
    for w in &workloads {
        for c in configs.iter().filter(|c| c.profiler == Profiler::Sysprof) {
            eprintln!("bench: BPF run time, {} × {}", w.name, c.name);
            match run_system_wide(c, w, &sysprof, perf.as_deref(), &work, true) {
                Ok(Run {
                    bpf_ms: Some(ms),
                    bpf_programs,
                    ..
                }) => {
                    bpf_ms.insert((w.name, c.name), ms);
                    for (name, runs, ns) in bpf_programs.iter().filter(|p| p.1 > 0) {
                        bpf_md += &format!(
                            "| {} | {} | {name} | {runs} | {:.0} | {:.1} |\n",
                            w.name,
                            c.name,
                            *ns as f64 / *runs as f64,
                            *ns as f64 / 1e6
                        );
                    }
                }
                Ok(_) => eprintln!(
                    "bench: no BPF run time for {} × {} (no program of sysprof's ran)",
                    w.name, c.name
                ),
                Err(e) => eprintln!("bench: {} × {} failed: {e:#}", w.name, c.name),
            }
        }
    }
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_before.trim());

    // A ten-second recording with every CPU busy: the end-to-end goals (stop
    // to written, peak RSS) are stated for it.
    let long = Workload {
        name: "cpu 10 s",
        argv: vec![s(bin("cpu")?), "10s".into()],
    };
    let long_configs: Vec<&Config> = configs
        .iter()
        .filter(|c| {
            matches!(c.profiler, Profiler::Sysprof | Profiler::Perf) && !c.name.contains("sched:")
        })
        .collect();
    let mut long_runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    if only.as_ref().is_none_or(|o| o.iter().any(|n| n == "long")) {
        for rep in 0..reps.min(2) {
            for c in &long_configs {
                eprintln!(
                    "bench: rep {}/{} {} × {}",
                    rep + 1,
                    reps.min(2),
                    long.name,
                    c.name
                );
                match run_system_wide(c, &long, &sysprof, perf.as_deref(), &work, false) {
                    Ok(r) => long_runs.entry(c.name).or_default().push(r),
                    Err(e) => eprintln!("bench: {} × {} failed: {e:#}", long.name, c.name),
                }
            }
        }
    }
    let _ = std::fs::write(
        "/proc/sys/kernel/perf_event_paranoid",
        paranoid_before.trim(),
    );

    let mut md = String::new();
    md += "\n## Workloads side by side (median [min–max] over alternating runs, 999 Hz)\n\n";
    md += "Extra machine CPU: busy time from `/proc/stat` minus the same workload's without a profiler, per second \
           of the workload and over its whole run (a profiler that slows a wakeup-bound workload lowers the rate \
           while adding work). Samples expected: CPUs × seconds recorded × 999 Hz (system-wide; idle \
           CPUs are sampled as the idle task, on this VM at about half the rate), or the workload's busy threads × \
           elapsed × 999 Hz (per command). \
           Lost: samples, and for sysprof also scheduler/I-O records. BPF ms: a separate run with \
           `kernel.bpf_stats_enabled=1`. A per-command profiler's CPU includes the workload it reaps.\n\n";
    md += "| workload | configuration | slowdown | extra machine CPU ms/s | extra machine CPU ms/run | profiler CPU ms | peak RSS MB | BPF ms | samples expected / written (lost) | stop→written ms | bytes/sample |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let mut rows = Vec::new();
    let mut medians: BTreeMap<(&str, &str), Medians> = BTreeMap::new();
    for w in &workloads {
        let Some(base) = runs.get(&(w.name, "none")) else {
            continue;
        };
        let base_elapsed = median(base.iter().map(|r| r.elapsed_ms));
        let base_busy = median(base.iter().map(|r| r.busy_ms_per_s));
        let base_busy_run = median(base.iter().map(|r| r.busy_ms));
        for c in &configs {
            let Some(rs) = runs.get(&(w.name, c.name)) else {
                continue;
            };
            let slow: Vec<f64> = rs.iter().map(|r| r.elapsed_ms / base_elapsed).collect();
            let extra: Vec<f64> = rs.iter().map(|r| r.busy_ms_per_s - base_busy).collect();
            let extra_run: Vec<f64> = rs.iter().map(|r| r.busy_ms - base_busy_run).collect();
            let bpf = bpf_ms.get(&(w.name, c.name)).copied();
            let p = profiler_columns(rs, c.profiler == Profiler::None);
            md += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                w.name,
                c.name,
                fmt_stat(&slow, 3),
                fmt_stat(&extra, 0),
                fmt_stat(&extra_run, 0),
                p[0],
                p[1],
                bpf.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into()),
                p[2],
                p[3],
                p[4],
            );
            let m = Medians::of(rs, &slow, &extra, &extra_run);
            rows.push(json!({
                "workload": w.name, "configuration": c.name,
                "slowdown": m.slowdown, "extra_cpu_ms_per_s": m.extra_per_s, "extra_cpu_ms_per_run": m.extra_per_run, "bpf_ms": bpf,
                "runs": rs.iter().map(run_json).collect::<Vec<_>>(),
            }));
            medians.insert((w.name, c.name), m);
        }
    }
    md += "\n## A 10 s recording, every CPU busy (`cpu 10s`; median [min–max])\n\n";
    md += "| configuration | profiler CPU ms | peak RSS MB | samples expected / written (lost) | stop→written ms | bytes/sample |\n|---|---:|---:|---:|---:|---:|\n";
    let mut long_rows = Vec::new();
    for c in &long_configs {
        let Some(rs) = long_runs.get(c.name) else {
            continue;
        };
        let p = profiler_columns(rs, false);
        md += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            c.name, p[0], p[1], p[2], p[3], p[4]
        );
        long_rows.push(
            json!({ "configuration": c.name, "runs": rs.iter().map(run_json).collect::<Vec<_>>() }),
        );
        medians.insert((long.name, c.name), Medians::of(rs, &[], &[], &[]));
    }
    md += "\n## DWARF unwinding in sysprof (median unwinds per second of unwinding time)\n\n| workload | configuration | unwinds/s |\n|---|---|---:|\n";
    for w in &workloads {
        for c in &configs {
            let Some(rs) = runs.get(&(w.name, c.name)) else {
                continue;
            };
            let v: Vec<f64> = rs.iter().filter_map(|r| r.unwinds_per_s).collect();
            if !v.is_empty() {
                md += &format!("| {} | {} | {} |\n", w.name, c.name, fmt_stat(&v, 0));
            }
        }
    }
    let (depth_md, depth_json) = if only.as_ref().is_none_or(|o| o.iter().any(|n| n == "depth")) {
        depth::section(&sysprof, perf.as_deref(), &work, quick)
    } else {
        (String::new(), json!(null))
    };
    let (agent_md, agent_json, agent_g) =
        if only.as_ref().is_none_or(|o| o.iter().any(|n| n == "agent")) {
            agent::section(&sysprof, &work, &agent_bins, quick)
        } else {
            (String::new(), json!(null), agent::AgentGoals::none())
        };
    let (length_md, length_json) = if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "length"))
    {
        length::section(&sysprof, perf.as_deref(), &work, quick)
    } else {
        (String::new(), json!(null))
    };
    md += &length_md;
    let (pgbench_md, pgbench_json) = if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "pgbench"))
    {
        pgbench::section(&sysprof, perf.as_deref(), &work, quick)
    } else {
        (String::new(), json!(null))
    };
    md += &pgbench_md;
    let (iostorm_md, iostorm_json) = if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "iostorm"))
    {
        iostorm::section(&sysprof, perf.as_deref(), &work, &root, quick)
    } else {
        (String::new(), json!(null))
    };
    md += &iostorm_md;
    // The offline stage runs last: a large bench process would otherwise
    // hand its peak RSS to every profiler it spawns (ru_maxrss survives exec).
    let (micro_md, micro) = micro_section(quick);
    let goals_md = goals(&medians, &micro) + &agent_goals(&agent_g);
    let results = json!({ "micro": micro, "workloads": rows, "long_recording": long_rows, "agent": agent_json, "depth": depth_json, "length": length_json, "pgbench": pgbench_json, "iostorm": iostorm_json });
    let md = goals_md + &micro_md + &md + &depth_md + &agent_md + &bpf_md;
    println!("{md}");
    std::fs::write(out_dir.join("results.md"), &md)?;
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    eprintln!("bench: wrote {}", out_dir.join("results.md").display());
    Ok(())
}

/// Medians of one workload × configuration, for the goals.
#[derive(Debug, Clone, Copy)]
struct Medians {
    slowdown: f64,
    extra_per_s: f64,
    extra_per_run: f64,
    /// (min, max) of the three above, to tell a difference from noise.
    slowdown_range: (f64, f64),
    extra_per_s_range: (f64, f64),
    extra_per_run_range: (f64, f64),
    lost: f64,
    stop_to_written_ms: f64,
    rss_mb: f64,
    bytes_per_sample: f64,
}

impl Medians {
    fn of(rs: &[Run], slow: &[f64], extra: &[f64], extra_run: &[f64]) -> Medians {
        Medians {
            slowdown: median(slow.iter().copied()),
            extra_per_s: median(extra.iter().copied()),
            extra_per_run: median(extra_run.iter().copied()),
            slowdown_range: range(slow),
            extra_per_s_range: range(extra),
            extra_per_run_range: range(extra_run),
            lost: median(
                rs.iter()
                    .map(|r| r.lost.unwrap_or(f64::NAN) + r.sched_lost.unwrap_or(0.0)),
            ),
            stop_to_written_ms: median(rs.iter().map(|r| r.stop_to_written_ms)),
            rss_mb: median(rs.iter().map(|r| r.profiler_rss_mb)),
            bytes_per_sample: median(
                rs.iter()
                    .filter_map(|r| r.written.filter(|w| *w > 0.0).map(|w| r.bytes / w)),
            ),
        }
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// The issue's goals, each with the figures it compares and whether it is
/// met. A comparison with a peer is "yes" when our median is at most
/// theirs, "within noise" when it is higher but the two min–max ranges
/// overlap, and "no" otherwise.
fn goals(m: &BTreeMap<(&str, &str), Medians>, micro: &serde_json::Value) -> String {
    type Stat = Option<(f64, (f64, f64))>;
    let mut md = String::from("## Goals (medians of the tables below)\n\n| goal | sysprof | reference | met |\n|---|---:|---:|:---:|\n");
    // A comparison with a peer, both with their min–max range.
    let versus = |md: &mut String, goal: &str, ours: Stat, theirs: Stat, prec: usize| {
        let cell = |x: Stat| {
            x.map(|(v, (lo, hi))| format!("{v:.prec$} [{lo:.prec$}–{hi:.prec$}]"))
                .unwrap_or_else(|| "–".into())
        };
        let verdict = match (ours, theirs) {
            (Some((a, _)), Some((b, _))) if a <= b => "yes",
            (Some((_, (a_lo, _))), Some((_, (_, b_hi)))) if a_lo <= b_hi => "within noise",
            (Some(_), Some(_)) => "**no**",
            _ => "not measured",
        };
        *md += &format!(
            "| {goal} | {} | {} | {verdict} |\n",
            cell(ours),
            cell(theirs)
        );
    };
    // A figure against a fixed target.
    let target = |md: &mut String,
                  goal: &str,
                  ours: Option<f64>,
                  reference: f64,
                  prec: usize,
                  ok: &dyn Fn(f64, f64) -> bool| {
        let verdict = match ours {
            Some(a) if ok(a, reference) => "yes",
            Some(_) => "**no**",
            None => "not measured",
        };
        *md += &format!(
            "| {goal} | {} | {reference:.prec$} | {verdict} |\n",
            ours.map(|v| format!("{v:.prec$}"))
                .unwrap_or_else(|| "–".into())
        );
    };
    let pair = |w: &str, c: &str, f: fn(&Medians) -> (f64, (f64, f64))| {
        m.get(&(w, c)).map(f).filter(|v| !v.0.is_nan())
    };
    let get =
        |w: &str, c: &str, f: fn(&Medians) -> f64| m.get(&(w, c)).map(f).filter(|v| !v.is_nan());
    let slowdown = |x: &Medians| (x.slowdown, x.slowdown_range);
    let per_s = |x: &Medians| (x.extra_per_s, x.extra_per_s_range);
    let per_run = |x: &Medians| (x.extra_per_run, x.extra_per_run_range);
    let at_most = |a: f64, b: f64| a <= b;
    let below = |a: f64, b: f64| a < b;
    for (ours, theirs) in [
        ("sysprof -a --call-graph fp", "perf -a -g"),
        ("sysprof -a", "perf -a --call-graph dwarf"),
    ] {
        versus(
            &mut md,
            &format!("cpu: slowdown, `{ours}` ≤ `{theirs}`"),
            pair("cpu", ours, slowdown),
            pair("cpu", theirs, slowdown),
            3,
        );
        versus(
            &mut md,
            &format!("cpu: extra CPU ms/s, `{ours}` ≤ `{theirs}`"),
            pair("cpu", ours, per_s),
            pair("cpu", theirs, per_s),
            0,
        );
        target(
            &mut md,
            &format!("cpu: samples lost, `{ours}`"),
            get("cpu", ours, |x| x.lost),
            0.0,
            0,
            &at_most,
        );
    }
    let sched = "perf -a -e sched:sched_switch -g";
    versus(
        &mut md,
        &format!("switch: extra CPU ms/s, `sysprof -a` ≤ `{sched}`"),
        pair("switch", "sysprof -a", per_s),
        pair("switch", sched, per_s),
        0,
    );
    versus(
        &mut md,
        &format!("switch: extra CPU ms/run, `sysprof -a` ≤ `{sched}`"),
        pair("switch", "sysprof -a", per_run),
        pair("switch", sched, per_run),
        0,
    );
    target(
        &mut md,
        "switch: samples and scheduler records lost, `sysprof -a`",
        get("switch", "sysprof -a", |x| x.lost),
        0.0,
        0,
        &at_most,
    );
    target(
        &mut md,
        "10 s recording: stop→written ms, `sysprof -a`, under",
        get("cpu 10 s", "sysprof -a", |x| x.stop_to_written_ms),
        1000.0,
        0,
        &below,
    );
    target(
        &mut md,
        "10 s recording: peak RSS MB, `sysprof -a`, under",
        get("cpu 10 s", "sysprof -a", |x| x.rss_mb),
        150.0,
        1,
        &below,
    );
    let slowest = micro.as_array().and_then(|a| {
        a.iter()
            .filter(|s| s["name"].as_str().is_some_and(|n| n.contains("(samples)")))
            .filter_map(|s| s["per_second"].as_f64())
            .reduce(f64::min)
    });
    target(
        &mut md,
        "offline: slowest stage, samples/s, at least",
        slowest,
        200_000.0,
        0,
        &|a, b| a >= b,
    );
    let like = "sysprof record --no-off-cpu --no-io -- CMD";
    for w in ["cpu", "switch", "fork", "io"] {
        let samply = get(w, "samply record", |x| x.bytes_per_sample);
        match samply {
            Some(b) => target(
                &mut md,
                &format!("{w}: bytes/sample, `{like}`, at most samply's"),
                get(w, like, |x| x.bytes_per_sample),
                b,
                0,
                &at_most,
            ),
            None => md += &format!("| {w}: bytes/sample vs samply | – | – | not measured |\n"),
        }
    }
    md + "\nBytes per sample are compared like for like: samply writes samples and user stacks, so sysprof without its \
          off-CPU and I/O markers (it still writes kernel stacks, which samply does not have). With markers (the \
          default) a short or I/O-heavy recording carries far more than samples; the tables show both, and the 10 s \
          recording shows what they cost on a busy machine.\n\n"
}

/// `MemoryMax` of the packaged unit (`packaging/sysprof-agent.service`),
/// MiB; NaN if it cannot be read.
fn unit_memory_max_mib() -> f64 {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/sysprof-agent.service");
    std::fs::read_to_string(unit)
        .ok()
        .and_then(|u| {
            let v = u
                .lines()
                .find_map(|l| l.trim().strip_prefix("MemoryMax="))?;
            let (digits, unit) =
                v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
            let n: f64 = digits.parse().ok()?;
            Some(match unit {
                "G" => n * 1024.0,
                "M" => n,
                "K" => n / 1024.0,
                "" => n / 1048576.0,
                _ => return None,
            })
        })
        .unwrap_or(f64::NAN)
}

/// The agent's goals (issues 11 and 44): its CPU on the cpu workload, its
/// peak RSS on any workload, bytes per sample once compacted, its cgroup's
/// memory at rest and beside a build.
fn agent_goals(g: &agent::AgentGoals) -> String {
    let row = |goal: &str, v: f64, target: f64, prec: usize| {
        let verdict = if v.is_nan() {
            "not measured"
        } else if v <= target {
            "yes"
        } else {
            "**no**"
        };
        format!(
            "| {goal} | {} | {target:.prec$} | {verdict} |\n",
            if v.is_nan() {
                "–".into()
            } else {
                format!("{v:.prec$}")
            }
        )
    };
    let mut md = String::from(
        "\n## Agent goals\n\n| goal | sysprof agent | target | met |\n|---|---:|---:|:---:|\n",
    );
    md += &row(
        "agent CPU, % of one CPU, steady state beside the cpu workload, at most",
        g.cpu_pct,
        0.1,
        3,
    );
    md += &row(
        "agent peak RSS MB (any workload), at most",
        g.peak_rss_mb,
        50.0,
        1,
    );
    md += &row(
        "bytes per sample in the store, compacted, at most",
        g.bytes_per_sample,
        8.0,
        1,
    );
    md += &row(
        "agent's memory cgroup at rest MiB (BPF maps included), at most",
        g.cgroup_at_rest_mib,
        64.0,
        1,
    );
    md += &row(
        "agent's memory cgroup peak beside a cargo build MiB, at most",
        g.cgroup_peak_build_mib,
        100.0,
        1,
    );
    md += &row(
        "the same, anonymous + kernel memory only (page cache left out) MiB, at most",
        g.unreclaimable_peak_build_mib,
        100.0,
        1,
    );
    md += &row(
        "agent's memory cgroup peak, any workload, MiB, within the unit's MemoryMax",
        g.cgroup_peak_mib,
        unit_memory_max_mib(),
        1,
    );
    md
}

/// Profiler CPU, peak RSS, samples, stop→written and bytes/sample cells.
fn profiler_columns(rs: &[Run], no_profiler: bool) -> [String; 5] {
    if no_profiler {
        return ["–".into(), "–".into(), "–".into(), "–".into(), "–".into()];
    }
    let opt = |f: &dyn Fn(&Run) -> Option<f64>, prec: usize| {
        let v: Vec<f64> = rs.iter().filter_map(f).collect();
        if v.is_empty() {
            "–".to_string()
        } else {
            fmt_stat(&v, prec)
        }
    };
    let col = |v: Vec<f64>, prec: usize| fmt_stat(&v, prec);
    [
        col(rs.iter().map(|r| r.profiler_cpu_ms).collect(), 0),
        col(rs.iter().map(|r| r.profiler_rss_mb).collect(), 1),
        format!(
            "{:.0} / {} ({})",
            median(rs.iter().map(|r| r.expected)),
            opt(&|r| r.written, 0),
            opt(&|r| r.lost.map(|l| l + r.sched_lost.unwrap_or(0.0)), 0)
        ),
        col(rs.iter().map(|r| r.stop_to_written_ms).collect(), 0),
        opt(&|r| r.written.filter(|w| *w > 0.0).map(|w| r.bytes / w), 0),
    ]
}

fn run_json(r: &Run) -> serde_json::Value {
    json!({
        "elapsed_ms": r.elapsed_ms, "busy_ms_per_s": r.busy_ms_per_s, "busy_ms": r.busy_ms, "profiler_cpu_ms": r.profiler_cpu_ms,
        "profiler_rss_mb": r.profiler_rss_mb, "bpf_ms": r.bpf_ms, "expected": r.expected, "written": r.written,
        "lost": r.lost, "sched_lost": r.sched_lost, "stop_to_written_ms": r.stop_to_written_ms, "bytes": r.bytes,
        "unwinds_per_s": r.unwinds_per_s,
    })
}

fn micro_section(quick: bool) -> (String, serde_json::Value) {
    let micro = micro::run(quick);
    let mut md = String::from(
        "## Userspace hot path (offline, synthetic stream)\n\n| stage | per second |\n|---|---:|\n",
    );
    for (k, v) in &micro {
        md += &format!("| {k} | {v:.0} |\n");
    }
    (
        md,
        json!(micro
            .iter()
            .map(|(k, v)| json!({"name": k, "per_second": v}))
            .collect::<Vec<_>>()),
    )
}

/// The Go workloads: `benches/workloads/work.go` built by Debian's Go (the
/// bench does not install it), as it is ("go") and with its `.go.buildinfo`
/// section renamed by objcopy ("go-native": the same code and layout, not
/// taken for a Go program, so no labels read).
fn go_workloads(root: &Path, work: &Path, quick: bool) -> Result<Vec<Workload>> {
    let go = which("go").context("no go on PATH")?;
    let src = work.join("go-work");
    std::fs::create_dir_all(&src)?;
    std::fs::copy(root.join("benches/workloads/work.go"), src.join("main.go"))?;
    std::fs::write(src.join("go.mod"), "module work\ngo 1.19\n")?;
    let labelled = work.join("go-work.bin");
    let built = Command::new(&go)
        .args(["build", "-o"])
        .arg(&labelled)
        .arg(".")
        .current_dir(&src)
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", work.join("go-cache"))
        .status()?;
    anyhow::ensure!(built.success(), "go build failed");
    let native = work.join("go-work-native.bin");
    let renamed = Command::new("objcopy")
        .arg("--rename-section")
        .arg(".go.buildinfo=.go.notinfo")
        .arg(&labelled)
        .arg(&native)
        .status()?;
    anyhow::ensure!(renamed.success(), "objcopy failed");
    let rounds = if quick { "4000" } else { "10000" }.to_string();
    let s = |p: &Path| p.display().to_string();
    Ok(vec![
        Workload {
            name: "go",
            argv: vec![s(&labelled), rounds.clone()],
        },
        Workload {
            name: "go-native",
            argv: vec![s(&native), rounds],
        },
    ])
}

fn which(tool: &str) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// perf on PATH; installed from Debian's `linux-perf` when missing and
/// SYSPROF_BENCH_NO_INSTALL is unset.
fn find_perf() -> Option<String> {
    if let Some(p) = which("perf") {
        return Some(p);
    }
    install_with_apt("linux-perf");
    which("perf")
}

/// `apt-get install` a Debian package, unless SYSPROF_BENCH_NO_INSTALL is set.
fn install_with_apt(package: &str) {
    if std::env::var_os("SYSPROF_BENCH_NO_INSTALL").is_some() || which("apt-get").is_none() {
        return;
    }
    eprintln!("bench: installing {package} with `apt-get install -y {package}`");
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "apt-get update -qq && apt-get install -y -qq {package}"
        ))
        .status();
}

/// samply on PATH or in ~/.cargo/bin; installed with cargo when missing
/// and SYSPROF_BENCH_NO_INSTALL is unset.
fn find_samply() -> Option<String> {
    if let Some(p) = which("samply") {
        return Some(p);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cargo_bin = format!("{home}/.cargo/bin/samply");
    if Path::new(&cargo_bin).exists() {
        return Some(cargo_bin);
    }
    if std::env::var_os("SYSPROF_BENCH_NO_INSTALL").is_some() {
        return None;
    }
    eprintln!(
        "bench: installing samply with `cargo install --locked samply` (a few minutes, once)"
    );
    let ok = Command::new("cargo")
        .args(["install", "--locked", "samply"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    (ok && Path::new(&cargo_bin).exists()).then_some(cargo_bin)
}

/// Busy jiffies of the whole machine (everything but idle and iowait).
pub(crate) fn busy_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy = cpu
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, v)| v)
        .sum::<f64>();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    busy * 1000.0 / hz
}

fn parse_field(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{key}="))
            .and_then(|v| v.trim().parse().ok())
    })
}

fn run_workload(w: &Workload) -> Result<(f64, f64)> {
    let out = Command::new(&w.argv[0]).args(&w.argv[1..]).output()?;
    if !out.status.success() {
        bail!(
            "workload {} failed: {}",
            w.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let elapsed = parse_field(&text, "elapsed_ms").context("workload printed no elapsed_ms")?;
    Ok((elapsed, 0.0))
}

/// Watches a process's peak RSS: VmHWM of its own address space, polled
/// until it exits. (ru_maxrss would include the bench's own peak, which a
/// spawned child inherits through exec.)
struct PeakRss {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    poller: std::thread::JoinHandle<f64>,
}

impl PeakRss {
    fn watch(pid: u32) -> PeakRss {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        let poller = std::thread::spawn(move || {
            let mut peak_kb = 0f64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(v) = s.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
                        peak_kb = peak_kb.max(
                            v.trim()
                                .trim_end_matches("kB")
                                .trim()
                                .parse()
                                .unwrap_or(0.0),
                        );
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            peak_kb
        });
        PeakRss { done, poller }
    }

    /// Peak RSS in MB.
    fn finish(self) -> f64 {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        self.poller.join().unwrap_or(0.0) / 1024.0
    }
}

/// CPU time of a process, all its threads including the ended ones, ms.
pub(crate) fn process_cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state is field 3, utime 14 and stime 15 (1-based).
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz * 1e3)
}

/// wait4 with resource usage: (CPU ms, peak RSS MB from `rss`).
fn wait_rusage(child: &mut Child, rss: PeakRss) -> Result<(f64, f64)> {
    let mut status = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pid and out-pointers.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    let peak = rss.finish();
    if r < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Ok((tv(ru.ru_utime) + tv(ru.ru_stime), peak))
}

/// (name, run_cnt, run_time_ns) of the BPF programs process `owner` holds
/// whose names start with one of `prefixes` (names are cut to 15
/// characters), as the kernel counts them since its statistics were
/// turned on.
fn bpf_programs(prefixes: &[&str], owner: u32) -> Vec<(String, u64, u64)> {
    kernel_cost::program_stats(&kernel_cost::programs_of(owner))
        .into_values()
        .filter(|(name, ..)| prefixes.iter().any(|pre| name.starts_with(pre)))
        .map(|(name, runs, time)| (name, runs, time.as_nanos() as u64))
        .collect()
}

/// One run of a workload under a system-wide profiler (or none). With
/// `bpf_stats`, the run also reads the BPF programs' run time.
fn run_system_wide(
    c: &Config,
    w: &Workload,
    sysprof: &Path,
    perf: Option<&str>,
    work: &Path,
    bpf_stats: bool,
) -> Result<Run> {
    let output = work.join(match c.profiler {
        Profiler::Sysprof => "out.json.gz",
        _ => "perf.data",
    });
    let _ = std::fs::remove_file(&output);
    let log = work.join("profiler.log");
    let mut child = match c.profiler {
        Profiler::None => None,
        Profiler::Sysprof => Some(
            Command::new(sysprof)
                .arg("record")
                .args(&c.args)
                .args(["-F", &FREQ.to_string(), "-q", "-v", "-o"])
                .arg(&output)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()?,
        ),
        Profiler::Perf => Some(
            Command::new(perf.unwrap())
                .arg("record")
                .args(&c.args)
                .arg("-o")
                .arg(&output)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()?,
        ),
        Profiler::Samply | Profiler::SysprofCommand => {
            unreachable!("they launch the workload themselves")
        }
    };
    std::thread::sleep(SETTLE);
    let started = Instant::now();
    let busy0 = busy_ms();
    let (elapsed_ms, _) = match run_workload(w) {
        Ok(r) => r,
        Err(e) => {
            // Not left running: a profiler from a failed run would load
            // every later one (and its BPF programs would be counted).
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(e);
        }
    };
    let busy1 = busy_ms();
    let window_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut run = Run {
        elapsed_ms,
        busy_ms_per_s: (busy1 - busy0) / window_ms * 1000.0,
        busy_ms: busy1 - busy0,
        ..Default::default()
    };
    let Some(mut child) = child.take() else {
        return Ok(run);
    };
    if bpf_stats && c.profiler == Profiler::Sysprof {
        // sample_cpu_cloc or sample_first (whose tail call to it counts as
        // its own), on_sched_*, on_block_*.
        let progs = bpf_programs(&["sample_", "on_sched", "on_block"], child.id());
        if !progs.is_empty() {
            run.bpf_ms = Some(progs.iter().map(|p| p.2).sum::<u64>() as f64 / 1e6);
            run.bpf_programs = progs;
        }
    }
    let stop = Instant::now();
    let watch = PeakRss::watch(child.id());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (cpu, rss) = wait_rusage(&mut child, watch)?;
    run.stop_to_written_ms = stop.elapsed().as_secs_f64() * 1e3;
    run.profiler_cpu_ms = cpu;
    run.profiler_rss_mb = rss;
    run.bytes = std::fs::metadata(&output)
        .map(|m| m.len() as f64)
        .unwrap_or(0.0);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    // Every CPU at every tick; idle CPUs are sampled too (as the idle task)
    // but, on this VM, at about half the rate, so an idle stretch shows as
    // fewer written than expected without a loss.
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    run.expected = FREQ as f64 * ncpu * (SETTLE.as_secs_f64() + window_ms / 1e3);
    match c.profiler {
        Profiler::Sysprof => {
            // `record -v`: "sysprof: stats: samples=9991 kept=9991 lost_samples=0 …"
            let stats = stats_values(&text);
            run.written = stats.get("kept").copied();
            run.lost = stats.get("lost_samples").copied();
            if let Some(&secs) = stats.get("seconds") {
                run.expected = FREQ as f64 * ncpu * secs;
            }
            run.sched_lost = Some(
                ["lost_events", "lost_stacks", "lost_state"]
                    .iter()
                    .filter_map(|k| stats.get(*k))
                    .sum(),
            );
            run.unwinds_per_s = stats.get("unwinds_per_s").copied();
        }
        Profiler::Perf => {
            // "[ perf record: Captured and wrote 1.234 MB perf.data (12345 samples) ]"
            run.written = text
                .lines()
                .find(|l| l.contains("samples) ]"))
                .and_then(|l| number_before(l, " samples)"));
            run.lost = Some(
                // "Processed N events and lost M chunks!" (perf loses whole chunks)
                text.lines()
                    .filter_map(|l| l.find("lost ").and_then(|i| first_number(&l[i..])))
                    .sum::<f64>()
                    + 0.0,
            );
            if c.args.iter().any(|a| a.starts_with("sched:")) {
                run.expected = f64::NAN;
            }
        }
        _ => {}
    }
    if run.written.is_none() {
        eprintln!("bench: no sample count found in the profiler's output:\n{text}");
    }
    Ok(run)
}

/// Run a profiler that launches the workload itself (samply, `sysprof
/// record -- CMD`): `argv` up to and including its output option.
fn run_samply(argv: &[&str], w: &Workload, work: &Path, out_name: &str) -> Result<Run> {
    let output = work.join(out_name);
    let _ = std::fs::remove_file(&output);
    let started = Instant::now();
    let busy0 = busy_ms();
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .arg(&output)
        .arg("--")
        .args(&w.argv)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(work.join("samply.log"))?)
        .spawn()?;
    let watch = PeakRss::watch(child.id());
    let stdout = child.stdout.take().unwrap();
    let mut elapsed = None;
    let mut ended = None;
    let mut busy1 = 0.0;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(v) = line.strip_prefix("elapsed_ms=") {
            elapsed = v.trim().parse().ok();
            ended = Some(Instant::now());
            busy1 = busy_ms();
        }
    }
    let (cpu, rss) = wait_rusage(&mut child, watch)?;
    let elapsed_ms: f64 = elapsed.with_context(|| {
        format!(
            "samply's workload printed no elapsed_ms; samply said: {}",
            std::fs::read_to_string(work.join("samply.log")).unwrap_or_default()
        )
    })?;
    let ended = ended.unwrap();
    let window_ms = ended.duration_since(started).as_secs_f64() * 1e3;
    let bytes = std::fs::metadata(&output)
        .map(|m| m.len() as f64)
        .unwrap_or(0.0);
    let written = samply_samples(&output);
    Ok(Run {
        elapsed_ms,
        busy_ms_per_s: (busy1 - busy0) / window_ms * 1000.0,
        busy_ms: busy1 - busy0,
        // samply reaps the workload: its rusage includes the workload's CPU.
        profiler_cpu_ms: cpu,
        profiler_rss_mb: rss,
        bpf_ms: None,
        expected: FREQ as f64 * elapsed_ms / 1e3 * thread_count(w),
        written,
        lost: None,
        stop_to_written_ms: ended.elapsed().as_secs_f64() * 1e3,
        bytes,
        unwinds_per_s: None,
        sched_lost: None,
        bpf_programs: Vec::new(),
    })
}

/// Samples in a samply profile (sum over threads).
fn samply_samples(path: &Path) -> Option<f64> {
    let f = std::fs::File::open(path).ok()?;
    let v: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(f)).ok()?;
    Some(
        v["threads"]
            .as_array()?
            .iter()
            .filter_map(|t| t["samples"]["length"].as_f64())
            .sum(),
    )
}

/// Threads that burn CPU in a workload (what samply, per process, can sample).
fn thread_count(w: &Workload) -> f64 {
    match w.name {
        "cpu" => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as f64,
        _ => 1.0,
    }
}

/// The `key=value` totals of sysprof's `-v` stats line.
fn stats_values(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("sysprof: stats: "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn number_before(line: &str, marker: &str) -> Option<f64> {
    let end = line.find(marker)?;
    let start = line[..end]
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|i| i + 1)
        .unwrap_or(0);
    line[start..end].parse().ok()
}

fn first_number(line: &str) -> Option<f64> {
    line.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt_stat(v: &[f64], prec: usize) -> String {
    let m = median(v.iter().copied());
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 {
        format!("{m:.prec$}")
    } else {
        format!("{m:.prec$} [{lo:.prec$}–{hi:.prec$}]")
    }
}
