//! Integration tests of Go's goroutine labels: Debian's Go 1.19, real BPF,
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
    let src = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(
        workspace_root().join("tests/workloads/golabels.go"),
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
    let read = |path: &Path| {
        let f = std::fs::File::open(path).unwrap();
        sysprof::runtimes::go::binary::read(
            &sysprof::binaries::elf::ElfReader::new(&f, Default::default()),
            "golabels",
        )
    };
    let with = read(&build_golabels(&go, &dir, "with-dwarf", ""))
        .unwrap()
        .expect("a Go executable");
    let without = build_golabels(&go, &dir, "without-dwarf", "-w");
    let elf = std::fs::read(&without).unwrap();
    assert!(
        elf_sections(&elf)
            .iter()
            .all(|(n, _)| !n.contains("debug_info")),
        "-w left DWARF"
    );
    let without = read(&without);
    eprintln!("go: {with:?}; without DWARF: {without:?}");
    assert!(with.version.starts_with("go1.19"), "{}", with.version);
    assert_eq!(with.g_from_fsbase, -8);
    let without = without.unwrap().expect("a Go executable");
    assert_eq!(without.offsets, with.offsets, "the table against the DWARF");
    // A file that is no Go program is not one.
    let f = std::fs::File::open("/bin/sh").unwrap();
    let sh = sysprof::runtimes::go::binary::read(
        &sysprof::binaries::elf::ElfReader::new(&f, Default::default()),
        "sh",
    );
    assert_eq!(sh, Ok(None));
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
                samples = ms(total)
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
/// process), the split of on-CPU samples between `handler` values is the
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
    let dir = scratch("go-labels");
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
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let mut handler: HashMap<String, u64> = HashMap::new();
    let (mut labelled, mut spin_under) = (0u64, HashMap::<String, u64>::new());
    let mut sleeper_ms = 0.0;
    for t in profile.process_threads(pid) {
        for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
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
    let (theirs, their_samples) = pprof_tag_shares(&go, &pprof, "handler");
    eprintln!(
        "go labels: {labelled} labelled stacks; handler {handler:?} of {total}, pprof {theirs:?} of {their_samples}; \
         main.spin leaf under {spin_under:?}; sleeper off-CPU {sleeper_ms:.1} ms (measured {slept_ms:.1})"
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

/// Check Go's own tests of its labels, run under sysprof: the
/// `runtime/pprof` package's `TestCPUProfileLabel` (one goroutine hogging
/// the CPU inside `pprof.Do(..., Labels("key", "value"))`) and
/// `TestLabelRace` (ten goroutines at a time, each labelled for a
/// millisecond: a fresh label map each, freed soon after), compiled from
/// Debian's Go sources. Go's tests check Go's own profile of the run (every
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
    let dir = scratch("go-pprof-tests");
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
