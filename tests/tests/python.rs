//! Integration tests of Python frames: real CPython interpreters, real BPF,
//! as root, one at a time. The oracle is the script's own CPU clock per
//! function (`time.thread_time_ns` around each call), never the profiler.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use sysprof_tests::*;

const SIGTERM: i32 = 15;

fn names(stack: &[(String, String)]) -> Vec<&str> {
    stack.iter().map(|(n, _)| n.as_str()).collect()
}

/// The interpreters to check, oldest first, the newest last: pyenv's 3.8,
/// 3.9 and 3.10 (frame objects), Debian's (3.11, the distribution's
/// default, always there), pyenv's 3.11, 3.12 and 3.13, where installed,
/// and Debian sid's 3.14 (installed under target/ by `test`'s first call;
/// said loudly, a failure in CI, where it cannot be).
fn interpreters(test: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pyenv: Vec<PathBuf> = std::fs::read_dir("/root/.pyenv/versions")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    pyenv.sort();
    for minor in ["3.8", "3.9", "3.10", "debian", "3.11", "3.12", "3.13"] {
        if minor == "debian" {
            found.push(PathBuf::from("/usr/bin/python3"));
            continue;
        }
        match pyenv.iter().find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{minor}."))
        }) {
            Some(p) => found.push(p.join("bin/python3")),
            None => eprintln!(
                "python: no pyenv CPython {minor} under /root/.pyenv/versions: NOT CHECKED"
            ),
        }
    }
    found.extend(cpython_314(test));
    found
}

/// The minor version of the interpreter `py` (11 for 3.11).
fn minor_of(py: &std::path::Path) -> u32 {
    let out = Command::new(py)
        .args(["-c", "import sys; print(sys.version_info[1])"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn script() -> PathBuf {
    workspace_root().join("tests/workloads/pysplit.py")
}

/// Check, for each interpreter, that a Python program's samples carry its
/// Python frames by name, with nothing asked of the program: the split of
/// samples between `hot_three` and `hot_one` is the split of the thread's
/// own CPU time the script measured (±3 points), each such stack holds the
/// whole chain `<module>` -> `main` -> `work` -> `hot_*` in order, with the
/// interpreter's native frames below `<module>` (down to `main` of the
/// program), no native eval-loop frame left between Python frames, and the
/// Python frames in the profile's Python category.
#[test]
fn python_frames_are_named_with_the_split_the_program_measured() {
    if !can_record("python_frames_are_named_with_the_split_the_program_measured") {
        return;
    }
    let dir = scratch("python-split");
    for py in interpreters("python_frames_are_named_with_the_split_the_program_measured") {
        let out_path = dir.join("p.json.gz");
        let out = record(
            &[
                "--",
                py.to_str().unwrap(),
                script().to_str().unwrap(),
                "split",
                "2.0",
            ],
            &out_path,
        );
        assert_success(&out);
        let pid = field(&out.stdout, "pid").expect("the script printed its pid");
        let (three_ns, one_ns) = (
            field(&out.stdout, "three_ns").unwrap() as f64,
            field(&out.stdout, "one_ns").unwrap() as f64,
        );
        let expected = three_ns / (three_ns + one_ns);
        let profile = Profile::load(&out_path);
        let cats = profile.categories();
        let threads = profile.process_threads(pid);
        let t = threads
            .first()
            .unwrap_or_else(|| panic!("{}: process {pid} is not in the profile", py.display()));
        let stacks = t.on_cpu_stacks(&cats);
        let (mut three, mut one, mut whole) = (0usize, 0usize, 0usize);
        for s in &stacks {
            let n = names(s);
            let Some(hot) = n.iter().position(|f| *f == "hot_three" || *f == "hot_one") else {
                continue;
            };
            assert_eq!(
                s[hot].1,
                "Python",
                "{}: a Python frame's category",
                py.display()
            );
            if n[hot] == "hot_three" {
                three += 1;
            } else {
                one += 1;
            }
            let chain = n.iter().position(|f| *f == "<module>").map(|m| &n[m..=hot]);
            if chain == Some(&["<module>", "main", "work", n[hot]][..]) {
                whole += 1;
            }
            assert!(
                !n.iter().any(|f| f.starts_with("_PyEval_EvalFrameDefault")),
                "{}: an eval frame between Python frames: {n:?}",
                py.display()
            );
        }
        let got = three as f64 / (three + one).max(1) as f64;
        eprintln!(
            "python {}: hot_three {three}, hot_one {one} of {} on-CPU samples: share {got:.3} vs {expected:.3} measured; {whole} whole chains",
            py.display(),
            stacks.len()
        );
        assert!(
            three + one >= 1400,
            "{}: 2 s of CPU at 999 Hz, {} samples in the hot functions",
            py.display(),
            three + one
        );
        // Measured here: within 0.004 on a quiet machine, 0.012 beside a build.
        assert!(
            (got - expected).abs() <= 0.03,
            "{}: share {got:.3} vs {expected:.3}",
            py.display()
        );
        assert!(
            whole * 100 >= (three + one) * 98,
            "{}: {whole} of {} stacks hold <module> -> main -> work -> hot_*",
            py.display(),
            three + one
        );
        // Below <module>: the interpreter's own frames, down to the program's main.
        let rooted = stacks
            .iter()
            .filter(|s| {
                names(s)
                    .first()
                    .is_some_and(|f| *f == "_start" || *f == "main" || *f == "__libc_start_main")
            })
            .count();
        assert!(
            rooted * 100 >= stacks.len() * 95,
            "{}: {rooted} of {} stacks reach the program's entry",
            py.display(),
            stacks.len()
        );
    }
}

/// The share of `hot_three` among the stacks of `pid` in the hot functions,
/// their count, and how many hold the whole chain `<module>` -> `main` ->
/// `work` -> `hot_*` in order.
fn split_of(profile: &Profile, pid: u64) -> (f64, usize, usize) {
    let cats = profile.categories();
    let (mut three, mut one, mut whole) = (0usize, 0usize, 0usize);
    for t in profile.process_threads(pid) {
        for s in t.on_cpu_stacks(&cats) {
            let n = names(&s);
            let Some(hot) = n.iter().position(|f| *f == "hot_three" || *f == "hot_one") else {
                continue;
            };
            if n[hot] == "hot_three" {
                three += 1;
            } else {
                one += 1;
            }
            let chain = n.iter().position(|f| *f == "<module>").map(|m| &n[m..=hot]);
            whole += usize::from(chain == Some(&["<module>", "main", "work", n[hot]][..]));
        }
    }
    (
        three as f64 / (three + one).max(1) as f64,
        three + one,
        whole,
    )
}

/// The measured share of `hot_three` a run of the split printed.
fn measured_share(stdout: &[u8]) -> f64 {
    let (three, one) = (
        field(stdout, "three_ns").expect("the script ran to its end") as f64,
        field(stdout, "one_ns").unwrap() as f64,
    );
    three / (three + one)
}

/// Check that a Python process already running when `record -a` starts
/// gets its Python frames from the first sample (its interpreter found from
/// the /proc snapshot): the share of `hot_three` within 3 points of the
/// share the script measured over its whole run (it splits its time the
/// same way throughout), the whole chain in ≥ 98 % of its stacks, and as
/// many samples as its CPU time while recorded (its schedstat) allows.
/// And one started once the recording runs (the newest pyenv interpreter,
/// else Debian's), found from its exec: its split and whole chains too.
#[test]
fn python_frames_of_a_process_running_before_the_recording() {
    if !can_record("python_frames_of_a_process_running_before_the_recording") {
        return;
    }
    let dir = scratch("python-before");
    let mut child = Command::new("/usr/bin/python3")
        .arg(script())
        .args(["split", "5"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let pid = field(first.as_bytes(), "pid").expect("the script printed its pid");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let cpu_ns = || {
        std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let out_path = dir.join("p.json.gz");
    let before = cpu_ns();
    let recording = record_started(&["-a", "-d", "4"], &out_path);
    let before_ms = (cpu_ns() - before) as f64 / 1e6;
    let later_py = interpreters("python_frames_of_a_process_running_before_the_recording")
        .pop()
        .expect("Debian's python3 at least");
    let later = Command::new(&later_py)
        .arg(script())
        .args(["split", "1"])
        .output()
        .unwrap();
    assert!(later.status.success());
    let out = recording.wait_with_output().unwrap();
    let cpu_ms = (cpu_ns() - before) as f64 / 1e6;
    assert_success(&out);
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let expected = measured_share(&rest);
    let profile = Profile::load(&out_path);
    let (got, hot, whole) = split_of(&profile, pid);
    eprintln!("python before record -a: share {got:.3} vs {expected:.3} measured, {whole} of {hot} whole; {cpu_ms:.0} ms of CPU from before it started ({before_ms:.0} ms while it attached) to its end");
    // Its CPU time from before the recording began (sysprof loads for a
    // moment) to after it ended bounds its samples from above; at least
    // 300 in 4 s of a busy process beside another, even beside a build.
    assert!(
        hot as f64 <= cpu_ms * 1.02 && hot >= 300,
        "{cpu_ms:.0} ms of CPU while recorded: {hot} samples in its hot functions"
    );
    assert!(
        (got - expected).abs() <= 0.03,
        "share {got:.3} vs {expected:.3}"
    );
    assert!(whole * 100 >= hot * 98, "{whole} of {hot} whole chains");
    let later_pid = field(&later.stdout, "pid").unwrap();
    let (later_expected, (later_got, later_hot, later_whole)) =
        (measured_share(&later.stdout), split_of(&profile, later_pid));
    eprintln!("python {} started during record -a: share {later_got:.3} vs {later_expected:.3} measured, {later_whole} of {later_hot} whole", later_py.display());
    assert!(
        later_hot >= 500,
        "{}: 1 s of CPU, {later_hot} samples in its hot functions",
        later_py.display()
    );
    assert!(
        (later_got - later_expected).abs() <= 0.03,
        "share {later_got:.3} vs {later_expected:.3}"
    );
    assert!(
        later_whole * 100 >= later_hot * 98,
        "{later_whole} of {later_hot} whole chains"
    );
}

/// Check that the agent stores Python frames and `show` gives them back:
/// the same names, chain and split (at 999 Hz, within 3 points of the
/// script's own measure), one sample per ms of the hot functions' CPU time
/// (±10 %).
#[test]
fn python_frames_come_back_from_the_agents_store() {
    if !can_record("python_frames_come_back_from_the_agents_store") {
        return;
    }
    let dir = scratch("python-agent");
    let store = dir.join("store");
    let agent = Agent::start(
        &store,
        &["--window", "1", "-F", "999", "--health-interval", "3600"],
        &[],
    );
    let out = Command::new("/usr/bin/python3")
        .arg(script())
        .args(["split", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    agent.wait_for_window_ending_after(wall_ms() + 200.0, std::time::Duration::from_secs(30));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let pid = field(&out.stdout, "pid").unwrap();
    let path = dir.join("show.json.gz");
    let o = show(&[
        "--store",
        store.to_str().unwrap(),
        "--since",
        "5m",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let expected = measured_share(&out.stdout);
    let (got, hot, whole) = split_of(&Profile::load(&path), pid);
    let hot_ms = (field(&out.stdout, "three_ns").unwrap() + field(&out.stdout, "one_ns").unwrap())
        as f64
        / 1e6;
    eprintln!("python from the agent's store: share {got:.3} vs {expected:.3} measured, {whole} of {hot} whole; {hot_ms:.0} ms in the hot functions by the script's clock");
    // One sample per ms of the hot functions' own CPU time, at 999 Hz.
    assert!(
        (hot as f64 - hot_ms).abs() <= hot_ms * 0.1,
        "{hot} samples in the hot functions for {hot_ms:.0} ms of their CPU"
    );
    assert!(
        (got - expected).abs() <= 0.03,
        "share {got:.3} vs {expected:.3}"
    );
    assert!(whole * 100 >= hot * 98, "{whole} of {hot} whole chains");
}

/// Check that C code a Python function calls keeps its native frames above
/// the Python frame that called it: `hashlib.sha256` over 16 MiB (OpenSSL)
/// under `hash_work`, under `work`.
#[test]
fn native_code_called_from_python_sits_above_its_caller() {
    if !can_record("native_code_called_from_python_sits_above_its_caller") {
        return;
    }
    let dir = scratch("python-hash");
    let out_path = dir.join("p.json.gz");
    let out = record(
        &[
            "--",
            "/usr/bin/python3",
            script().to_str().unwrap(),
            "hash",
            "1.0",
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile
        .process_threads(pid)
        .into_iter()
        .next()
        .expect("the python process");
    let stacks = t.on_cpu_stacks(&cats);
    let hashing: Vec<Vec<&str>> = stacks
        .iter()
        .map(|s| names(s))
        .filter(|n| n.iter().any(|f| *f == "hash_work"))
        .collect();
    let native_above = hashing
        .iter()
        .filter(|n| {
            let at = n.iter().position(|f| *f == "hash_work").unwrap();
            at + 1 < n.len()
                && n[at - 1] == "work"
                && n[at + 1..]
                    .iter()
                    .any(|f| f.to_lowercase().contains("sha256"))
        })
        .count();
    eprintln!("python hash: {} of {} on-CPU samples under hash_work, {native_above} with sha256 code above it", hashing.len(), stacks.len());
    assert!(
        hashing.len() * 10 >= stacks.len() * 8,
        "most samples hash: {} of {}",
        hashing.len(),
        stacks.len()
    );
    assert!(
        native_above * 10 >= hashing.len() * 8,
        "OpenSSL's frames above hash_work: {native_above} of {}",
        hashing.len()
    );
}

/// Check that off-CPU time carries the Python frames of the thread that
/// waited: two functions sleep from the same native place (`time.sleep`),
/// 5 ms and 15 ms at a time, and the off-CPU time under each is the time
/// the script measured around its calls (CLOCK_MONOTONIC, ±5 %): a stack
/// kept for a native place alone would give one function the other's waits.
/// Then the same where the interpreter's unwind table does not fit
/// `--unwind-table-mb 1` (the premise checked on its warning): every stack
/// is handed over as a copy, which must carry the Python frames the walk
/// read (before, none of 215 off-CPU samples of such a run had them).
#[test]
fn off_cpu_time_is_charged_to_the_python_function_that_waited() {
    if !can_record("off_cpu_time_is_charged_to_the_python_function_that_waited") {
        return;
    }
    naps_charged_to_their_functions(&[], "python-naps");
    let stderr = naps_charged_to_their_functions(&["--unwind-table-mb", "1"], "python-naps-copied");
    assert!(
        stderr.lines().any(|l| l.contains("no in-kernel unwind table for /usr/bin/python3")
            && l.contains("unwound from stack copies")),
        "the interpreter's table fit --unwind-table-mb 1: nothing was handed over; stderr: {stderr}"
    );
}

/// `pysplit.py naps` recorded with `args`: the off-CPU time under nap_a and
/// nap_b within 5 % of what the script measured. Returns sysprof's stderr.
fn naps_charged_to_their_functions(args: &[&str], scratch_name: &str) -> String {
    let dir = scratch(scratch_name);
    let out_path = dir.join("p.json.gz");
    let script = script();
    let mut all = args.to_vec();
    all.extend([
        "--",
        "/usr/bin/python3",
        script.to_str().unwrap(),
        "naps",
        "1.5",
    ]);
    let out = record(&all, &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let (a_ms, b_ms) = (
        field(&out.stdout, "nap_a_ns").unwrap() as f64 / 1e6,
        field(&out.stdout, "nap_b_ns").unwrap() as f64 / 1e6,
    );
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile
        .process_threads(pid)
        .into_iter()
        .next()
        .expect("the python process");
    let (mut got_a, mut got_b) = (0.0, 0.0);
    for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
        let n = names(s);
        if off_cpu_reason(n.iter().copied()) != Some("[off-CPU: sleeping]") {
            continue;
        }
        let chain = |f: &str| n.windows(3).any(|x| x == ["work", "naps", f]);
        if chain("nap_a") {
            got_a += w;
        } else if chain("nap_b") {
            got_b += w;
        }
    }
    eprintln!("python naps {args:?}: off-CPU under nap_a {got_a:.1} ms (measured {a_ms:.1}), nap_b {got_b:.1} ms (measured {b_ms:.1})");
    assert!(
        (got_a - a_ms).abs() <= a_ms * 0.05,
        "{args:?} nap_a: {got_a:.1} ms off-CPU vs {a_ms:.1} ms measured"
    );
    assert!(
        (got_b - b_ms).abs() <= b_ms * 0.05,
        "{args:?} nap_b: {got_b:.1} ms off-CPU vs {b_ms:.1} ms measured"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Check that `-X perf` (3.12+) and `-X perf_jit` (3.13+) keep stacks whole:
/// every Python call then goes through a trampoline copied into anonymous
/// memory with neither unwind tables nor a frame pointer (perf and samply
/// stop there), and the kernel walks it by its code (`add $8, %rsp; ret`
/// after the call). The split within 3 points of the script's measure, the
/// Python frames `<module>` -> `main` -> `work` -> `hot_*` in order (native
/// frames between them are the trampolines and the calls into them), and
/// ≥ 95 % of the on-CPU stacks reaching the program's entry.
#[test]
fn perf_trampolines_keep_python_stacks_whole() {
    if !can_record("perf_trampolines_keep_python_stacks_whole") {
        return;
    }
    let dir = scratch("python-perf");
    let mut runs = Vec::new();
    for py in interpreters("perf_trampolines_keep_python_stacks_whole")
        .into_iter()
        .filter(|p| p.starts_with("/root/.pyenv"))
    {
        let minor = minor_of(&py);
        if minor >= 12 {
            runs.push((py.clone(), "perf"));
        }
        if minor >= 13 {
            runs.push((py, "perf_jit"));
        }
    }
    if runs.is_empty() {
        eprintln!("python: no pyenv CPython 3.12 or later under /root/.pyenv/versions: -X perf NOT CHECKED");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has pyenv's 3.12 and 3.13"
        );
        return;
    }
    for (py, mode) in runs {
        let out_path = dir.join("p.json.gz");
        let out = record(
            &[
                "--",
                py.to_str().unwrap(),
                "-X",
                mode,
                script().to_str().unwrap(),
                "split",
                "1.5",
            ],
            &out_path,
        );
        assert_success(&out);
        let pid = field(&out.stdout, "pid").unwrap();
        let expected = measured_share(&out.stdout);
        let profile = Profile::load(&out_path);
        let cats = profile.categories();
        let t = profile
            .process_threads(pid)
            .into_iter()
            .next()
            .expect("the python process");
        let stacks = t.on_cpu_stacks(&cats);
        let (mut three, mut one, mut whole, mut trampolines) = (0usize, 0usize, 0usize, 0usize);
        for s in &stacks {
            let python: Vec<&str> = s
                .iter()
                .filter(|(_, c)| c == "Python")
                .map(|(n, _)| n.as_str())
                .collect();
            let Some(hot) = python
                .iter()
                .position(|f| *f == "hot_three" || *f == "hot_one")
            else {
                continue;
            };
            if python[hot] == "hot_three" {
                three += 1;
            } else {
                one += 1;
            }
            let chain = python
                .iter()
                .position(|f| *f == "<module>")
                .map(|m| &python[m..=hot]);
            whole += usize::from(chain == Some(&["<module>", "main", "work", python[hot]][..]));
            trampolines += usize::from(s.iter().any(|(n, _)| n.starts_with("py::")));
        }
        let rooted = stacks
            .iter()
            .filter(|s| {
                names(s)
                    .first()
                    .is_some_and(|f| *f == "_start" || *f == "main" || *f == "__libc_start_main")
            })
            .count();
        let got = three as f64 / (three + one).max(1) as f64;
        eprintln!(
            "python {} -X {mode}: share {got:.3} vs {expected:.3} measured; {whole} of {} whole chains, {trampolines} through a trampoline; {rooted} of {} stacks reach the entry",
            py.display(),
            three + one,
            stacks.len()
        );
        assert!(
            three + one >= 1000,
            "{} -X {mode}: {} samples in the hot functions",
            py.display(),
            three + one
        );
        // The trampolines are there (or this checks nothing about them).
        assert!(
            trampolines * 10 >= (three + one) * 9,
            "{} -X {mode}: {trampolines} stacks through a py:: trampoline",
            py.display()
        );
        assert!(
            (got - expected).abs() <= 0.03,
            "{} -X {mode}: share {got:.3} vs {expected:.3}",
            py.display()
        );
        assert!(
            whole * 100 >= (three + one) * 98,
            "{} -X {mode}: {whole} of {} whole chains",
            py.display(),
            three + one
        );
        assert!(
            rooted * 100 >= stacks.len() * 95,
            "{} -X {mode}: {rooted} of {} stacks reach the program's entry",
            py.display(),
            stacks.len()
        );
    }
}

/// Check that a CPython this build does not read never gets a wrong
/// Python frame: its on-CPU stacks are native, and end in a root frame
/// saying its Python frames were not read (≥ 95 %), and the run warns with
/// its version. Pyenv's 3.7 and 3.6 where installed (older ones are told
/// by their eval loop without the C API 3.8 added), and always a copy of
/// Debian's 3.11 whose `Py_Version` says 3.15 (a newer one, told by its
/// version).
#[test]
fn a_cpython_version_not_read_says_so_in_its_root_frame() {
    if !can_record("a_cpython_version_not_read_says_so_in_its_root_frame") {
        return;
    }
    let dir = scratch("python-old");
    let mut old: Vec<PathBuf> = ["3.7", "3.6"]
        .iter()
        .filter_map(|minor| {
            std::fs::read_dir("/root/.pyenv/versions")
                .ok()?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with(&format!("{minor}."))
                })
        })
        .map(|p| p.join("bin/python"))
        .collect();
    if old.is_empty() {
        eprintln!("python: no pyenv CPython 3.6 or 3.7 under /root/.pyenv/versions: older versions NOT CHECKED (a 3.15 is)");
    }
    old.push(claiming_version(&dir, 0x030f_00f0));
    for py in &old {
        let out_path = dir.join("p.json.gz");
        let code = "import os, time\nprint('pid=%d' % os.getpid())\ne = time.time() + 1\nwhile time.time() < e: sum(range(1000))";
        let out = record(&["--", py.to_str().unwrap(), "-c", code], &out_path);
        assert_success(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no Python frames") && stderr.contains("3.8 to 3.14"),
            "{}: no warning: {stderr}",
            py.display()
        );
        let pid = field(&out.stdout, "pid").unwrap();
        let profile = Profile::load(&out_path);
        let cats = profile.categories();
        let t = profile
            .process_threads(pid)
            .into_iter()
            .next()
            .expect("the python process");
        let stacks = t.on_cpu_stacks(&cats);
        let said = stacks
            .iter()
            .filter(|s| {
                s.first()
                    .is_some_and(|(n, _)| n.starts_with("[no Python frames: a CPython version"))
            })
            .count();
        let python = stacks
            .iter()
            .filter(|s| s.iter().any(|(_, c)| c == "Python"))
            .count();
        eprintln!("python {}: {said} of {} on-CPU stacks rooted in the not-read frame, {python} with a Python frame", py.display(), stacks.len());
        assert_eq!(
            python,
            0,
            "{}: a Python frame from an interpreter this build does not read",
            py.display()
        );
        assert!(
            stacks.len() >= 500 && said * 100 >= stacks.len() * 95,
            "{}: {said} of {} stacks say so",
            py.display(),
            stacks.len()
        );
    }
}

/// A copy of Debian's python3.11 in `dir` whose exported `Py_Version`
/// says `version` (0x030f00f0: 3.15.0): the interpreter runs as before,
/// and a profiler that reads the version sees another.
fn claiming_version(dir: &std::path::Path, version: u32) -> PathBuf {
    use sysprof::binaries::elf::{vaddr_to_offset, ElfReader};
    let real = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let mut bytes = std::fs::read(&real).unwrap();
    let file = std::fs::File::open(&real).unwrap();
    let elf = ElfReader::new(&file, Default::default());
    let (_, at, _) = elf
        .symbols_where(|n| n == b"Py_Version")
        .into_iter()
        .next()
        .expect("Py_Version in Debian's python3");
    let offset = vaddr_to_offset(&elf.segments().unwrap(), at).unwrap() as usize;
    bytes[offset..offset + 4].copy_from_slice(&version.to_le_bytes());
    let path = dir.join(format!(
        "python{}.{}",
        version >> 24,
        (version >> 16) & 0xff
    ));
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// What the source oracle (`tests/oracles/py_frames_vs_source.py`, run by
/// the profiled program's own interpreter) found in a profile.
struct SourceCheck {
    samples_with_python: u64,
    contradicted: u64,
    frames_checked: u64,
    text: String,
}

fn check_against_source(
    py: &std::path::Path,
    profile: &std::path::Path,
    pid: Option<u64>,
) -> SourceCheck {
    let oracle = workspace_root().join("tests/oracles/py_frames_vs_source.py");
    let mut cmd = Command::new(py);
    cmd.arg(&oracle).arg(profile);
    if let Some(pid) = pid {
        cmd.arg(pid.to_string());
    }
    let out = cmd.output().expect("running the source oracle");
    assert!(
        out.status.success(),
        "the source oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the oracle's JSON");
    SourceCheck {
        samples_with_python: v["samples_with_python"].as_u64().unwrap(),
        contradicted: v["samples_contradicted"].as_u64().unwrap(),
        frames_checked: v["frames_checked"].as_u64().unwrap(),
        text,
    }
}

/// Stdlib modules pydoc documents in the source check: pure Python ones
/// that 3.11, 3.12 and 3.13 all have.
const PYDOC_MODULES: &[&str] = &[
    "abc",
    "argparse",
    "ast",
    "base64",
    "bisect",
    "calendar",
    "cmd",
    "code",
    "codecs",
    "collections",
    "colorsys",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "dis",
    "doctest",
    "email",
    "enum",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "imaplib",
    "inspect",
    "io",
    "ipaddress",
    "json",
    "keyword",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mimetypes",
    "netrc",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pickle",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "pprint",
    "queue",
    "quopri",
    "random",
    "re",
    "reprlib",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "smtplib",
    "socket",
    "socketserver",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "token",
    "tokenize",
    "trace",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "xml",
    "zipfile",
    "zipimport",
];

/// Check, on programs nobody here wrote (the stdlib's `json.tool` on a
/// 9-MB file, `compileall` over copies of stdlib packages, which import,
/// compile and free code objects all along, and pydoc writing 103 stdlib
/// modules' pages), and on a two-module program
/// whose modules both define `work`, that the Python frames' names and
/// files are the source's: at most 0.5 % of the samples with Python frames
/// hold a frame whose line lies in no function of that name in that file
/// (`ast` of the file, by the program's own interpreter). Before code
/// objects were checked against the fingerprint the kernel read with them
/// and functions keyed by file and first line, json.tool's were 98 %.
/// The two-module program's `work`s are two functions, each in its own
/// file, and its property's getter and setter (one qualified name) two.
#[test]
fn python_frames_agree_with_the_programs_source() {
    if !can_record("python_frames_agree_with_the_programs_source") {
        return;
    }
    let dir = scratch("python-source");
    for py in interpreters("python_frames_agree_with_the_programs_source") {
        let who = py.display().to_string();
        // json.tool on a file the interpreter itself writes.
        let big = dir.join("big.json");
        let made = Command::new(&py)
            .arg("-c")
            .arg(
                "import json, random, sys\nrandom.seed(1)\ndef o(d):\n    return random.random() if d > 3 else {f'k{i}': [o(d + 1) for _ in range(3)] for i in range(6)}\njson.dump([o(0) for _ in range(4)], open(sys.argv[1], 'w'))",
            )
            .arg(&big)
            .status()
            .unwrap();
        assert!(made.success(), "{who}: writing the JSON input");
        let jt = dir.join("jt.json.gz");
        let out = record(
            &[
                "--",
                py.to_str().unwrap(),
                "-m",
                "json.tool",
                big.to_str().unwrap(),
                dir.join("out.json").to_str().unwrap(),
            ],
            &jt,
        );
        assert_success(&out);
        let c = check_against_source(&py, &jt, None);
        eprintln!("{who}: json.tool: {}", c.text);
        assert!(
            c.samples_with_python >= 200 && c.frames_checked >= 20,
            "{who}: json.tool: too few Python samples to judge: {}",
            c.text
        );
        assert!(
            c.contradicted as f64 <= 0.005 * c.samples_with_python as f64,
            "{who}: json.tool: frames the source contradicts: {}",
            c.text
        );

        // compileall over copies of stdlib packages (their code objects are
        // made and freed all along; its imports run and free module code).
        let stdlib = Command::new(&py)
            .arg("-c")
            .arg("import sysconfig; print(sysconfig.get_paths()['stdlib'])")
            .output()
            .unwrap();
        let stdlib = std::path::PathBuf::from(String::from_utf8_lossy(&stdlib.stdout).trim());
        let tree = dir.join("compile");
        let _ = std::fs::remove_dir_all(&tree);
        std::fs::create_dir_all(&tree).unwrap();
        for pkg in [
            "json", "email", "http", "xml", "unittest", "asyncio", "logging",
        ] {
            let status = Command::new("cp")
                .arg("-r")
                .arg(stdlib.join(pkg))
                .arg(&tree)
                .status()
                .unwrap();
            assert!(status.success(), "{who}: copying {pkg}");
        }
        let cc = dir.join("cc.json.gz");
        let out = record(
            &[
                "--",
                py.to_str().unwrap(),
                "-m",
                "compileall",
                "-f",
                "-q",
                tree.to_str().unwrap(),
            ],
            &cc,
        );
        assert_success(&out);
        let c = check_against_source(&py, &cc, None);
        eprintln!("{who}: compileall: {}", c.text);
        assert!(
            c.samples_with_python >= 50,
            "{who}: compileall: too few Python samples to judge: {}",
            c.text
        );
        assert!(
            c.contradicted as f64 <= 0.005 * c.samples_with_python as f64,
            "{who}: compileall: frames the source contradicts: {}",
            c.text
        );

        // pydoc writing the HTML pages of 103 stdlib modules: imports all
        // along, its own code and theirs (30.7 % and 99.7 % of samples
        // contradicted on 3.11 and 3.12 when the issue was filed).
        let pages = dir.join("pydoc");
        let _ = std::fs::remove_dir_all(&pages);
        std::fs::create_dir_all(&pages).unwrap();
        let pd = dir.join("pd.json.gz");
        let mut argv = vec!["--", py.to_str().unwrap(), "-m", "pydoc", "-w"];
        argv.extend(PYDOC_MODULES);
        let out = Command::new(sysprof_bin())
            .current_dir(&pages)
            .args(["record", "-v", "-o"])
            .arg(&pd)
            .args(&argv)
            .output()
            .expect("running sysprof");
        assert_success(&out);
        assert!(
            pages.join("argparse.html").exists(),
            "{who}: pydoc wrote no pages"
        );
        let c = check_against_source(&py, &pd, None);
        eprintln!("{who}: pydoc: {}", c.text);
        assert!(
            c.samples_with_python >= 1000 && c.frames_checked >= 200,
            "{who}: pydoc: too few Python samples to judge: {}",
            c.text
        );
        assert!(
            c.contradicted as f64 <= 0.005 * c.samples_with_python as f64,
            "{who}: pydoc: frames the source contradicts: {}",
            c.text
        );

        // Two modules' `work`, a getter and a setter of one name.
        let main = workspace_root().join("tests/workloads/pytwo/main.py");
        let two = dir.join("two.json.gz");
        let out = record(
            &["--", py.to_str().unwrap(), main.to_str().unwrap(), "1.5"],
            &two,
        );
        assert_success(&out);
        let pid = field(&out.stdout, "pid").expect("the script printed its pid");
        let c = check_against_source(&py, &two, Some(pid));
        eprintln!("{who}: two modules: {}", c.text);
        assert!(
            c.samples_with_python >= 500,
            "{who}: two modules: too few Python samples: {}",
            c.text
        );
        assert!(
            c.contradicted as f64 <= 0.005 * c.samples_with_python as f64,
            "{who}: two modules: frames the source contradicts: {}",
            c.text
        );
        let profile = Profile::load(&two);
        let t = profile
            .process_threads(pid)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{who}: process {pid} is not in the profile"));
        let (funcs, strings) = (&t.t["funcTable"], t.t["stringArray"].as_array().unwrap());
        let mut found: Vec<(String, String, Option<u64>)> = Vec::new();
        for i in 0..funcs["name"].as_array().unwrap().len() {
            let name = strings[funcs["name"][i].as_u64().unwrap() as usize]
                .as_str()
                .unwrap()
                .to_string();
            let file = funcs["fileName"][i]
                .as_u64()
                .map(|s| strings[s as usize].as_str().unwrap().to_string())
                .unwrap_or_default();
            found.push((name, file, funcs["lineNumber"][i].as_u64()));
        }
        let of = |name: &str, file: &str| -> Vec<Option<u64>> {
            found
                .iter()
                .filter(|(n, f, _)| n == name && f.ends_with(file))
                .map(|x| x.2)
                .collect()
        };
        assert_eq!(
            of("work", "/moda.py"),
            vec![Some(24)],
            "{who}: moda's work: {found:?}"
        );
        assert_eq!(
            of("work", "/modb.py"),
            vec![Some(29)],
            "{who}: modb's work: {found:?}"
        );
        // Before 3.11 a code object has no qualified name: `v`.
        let mut box_v = of(if minor_of(&py) >= 11 { "Box.v" } else { "v" }, "/moda.py");
        box_v.sort();
        assert_eq!(
            box_v,
            vec![Some(9), Some(16)],
            "{who}: the getter and the setter of Box.v: {found:?}"
        );
        assert_eq!(
            of("main", "/main.py"),
            vec![Some(13)],
            "{who}: main of main.py: {found:?}"
        );
        assert!(
            !of("<module>", "/main.py").is_empty(),
            "{who}: main.py's module code: {found:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The share of samples whose leaf-most Python frame is each function,
/// keyed (name, file's base name, first line), over the on-CPU samples of
/// `pid` that have a Python frame.
fn leaf_python_shares(
    profile: &Profile,
    pid: u64,
) -> (std::collections::HashMap<(String, String, u64), f64>, usize) {
    let cats = profile.categories();
    let (python, off_cpu) = (
        cats.iter().position(|c| c == "Python").unwrap() as u64,
        cats.iter().position(|c| c == "Off-CPU").unwrap() as u64,
    );
    let mut counts: std::collections::HashMap<(String, String, u64), usize> = Default::default();
    let mut total = 0;
    for t in profile.process_threads(pid) {
        let (st, ft, funcs, strings) = (
            &t.t["stackTable"],
            &t.t["frameTable"],
            &t.t["funcTable"],
            t.t["stringArray"].as_array().unwrap(),
        );
        for s in t.t["samples"]["stack"].as_array().unwrap() {
            let Some(mut node) = s.as_u64() else { continue };
            let leaf = st["frame"][node as usize].as_u64().unwrap() as usize;
            if ft["category"][leaf].as_u64() == Some(off_cpu) {
                continue;
            }
            loop {
                let frame = st["frame"][node as usize].as_u64().unwrap() as usize;
                if ft["category"][frame].as_u64() == Some(python) {
                    let f = ft["func"][frame].as_u64().unwrap() as usize;
                    let name = strings[funcs["name"][f].as_u64().unwrap() as usize]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let file = funcs["fileName"][f]
                        .as_u64()
                        .map(|i| strings[i as usize].as_str().unwrap())
                        .unwrap_or("");
                    let base = file.rsplit('/').next().unwrap_or(file).to_string();
                    *counts
                        .entry((name, base, funcs["lineNumber"][f].as_u64().unwrap_or(0)))
                        .or_default() += 1;
                    total += 1;
                    break;
                }
                match st["prefix"][node as usize].as_u64() {
                    Some(p) => node = p,
                    None => break,
                }
            }
        }
    }
    (
        counts
            .into_iter()
            .map(|(k, n)| (k, n as f64 / total.max(1) as f64))
            .collect(),
        total,
    )
}

/// The same from py-spy's raw output (`-F -f raw`: `func (file:first line);... count`, root first).
fn py_spy_shares(raw: &str) -> (std::collections::HashMap<(String, String, u64), f64>, usize) {
    let mut counts: std::collections::HashMap<(String, String, u64), usize> = Default::default();
    let mut total = 0;
    for line in raw.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        let Some((name, place)) = leaf.rsplit_once(" (") else {
            continue;
        };
        let place = place.trim_end_matches(')');
        let (file, first) = place.rsplit_once(':').unwrap_or((place, "0"));
        let base = file.rsplit('/').next().unwrap_or(file).to_string();
        *counts
            .entry((name.to_string(), base, first.parse().unwrap_or(0)))
            .or_default() += n;
        total += n;
    }
    (
        counts
            .into_iter()
            .map(|(k, n)| (k, n as f64 / total.max(1) as f64))
            .collect(),
        total,
    )
}

/// Check `json.tool` (the stdlib's, on a 44-MB file, its output to
/// /dev/null) against py-spy sampling the same run (by function, 1 kHz,
/// pausing it; sysprof at 2 kHz): each of either profiler's ten busiest
/// Python functions (by samples whose leaf-most Python frame it is, as
/// shares of the program's own samples) has the same share in the other
/// within 5.5 points (7 on a loaded machine), name, file and first line
/// alike.
#[test]
fn python_top_functions_match_py_spy_on_the_same_run() {
    // This bar was 9 points while three things were taken for sysprof's:
    // - py-spy pauses the process with ptrace for each sample, and a
    //   thread in an uninterruptible wait cannot stop until it ends; its
    //   timer then catches up, and the samples it owed land on whatever
    //   runs next. With the output in a file, json.tool's closing it
    //   flushed it (ext4's `ext4_release_file` writing back, throttled:
    //   140 ms off the CPU, sysprof's stack shows `main` -> `iobase_exit`
    //   -> `close` -> `__fput`), and py-spy gave those 140 ms to the
    //   `<module>` that ran after `main` returned: `<module>` 3.3-5.1 %
    //   against sysprof's 1.3-2.0 %. Writes held up by the page cache's
    //   dirty limits would do the same to `dump` (CI once: 16.0 % against
    //   9.7 %; not reproduced here, so not shown to be the cause). To
    //   /dev/null nothing waits, and both sample what ran;
    // - py-spy counts the wrapper's wait for "go" as busy (2.2-2.5 % of
    //   its samples, 0.5 % of sysprof's), shares are now of the program's
    //   own samples;
    // - at 500 Hz py-spy took 1,700-2,800 samples: one point was about its
    //   standard error, and the widest of forty gaps reached 3.2 by chance.
    //   At 1 kHz (and sysprof at 2 kHz) 4,600-6,500 and 7,100-9,500.
    //   A faster host ran the same input in less time (py-spy 2,900-3,400,
    //   sysprof 4,700-5,600) and gaps of 3.0-3.3 came back, with either
    //   sysprof build: the input is half as large again (18 items, was 12),
    //   py-spy 4,500-5,800 samples, sysprof 7,400-9,000.
    // On that host the gaps were still 3.0-3.3 in one interpreter-run of
    // eight or so, and not by chance (one standard error of a gap is 0.5
    // points there): py-spy's own share of `dump` moved 5.5-9.0 % over runs
    // of the same input, sysprof's 5.1-6.5 %. py-spy's blocking samples land
    // where the thread next enters the kernel (above); `--nonblocking`,
    // which does not stop it, was far worse (`_iterencode_list` 36 % against
    // 26 %: a chain read while it moves). So the bar is 4 points quiet.
    // Then, over eight interpreter-runs, every gap within 2.0 points; the
    // widest are `raw_decode`'s, sysprof 1.2-2.0 above py-spy.
    // The wrapper script's own `<module>` (it waits on stdin until py-spy
    // has attached) is not the program's, and is left out.
    // On a later host (kernel 6.18.44, HZ 250) py-spy's `dump` rose to
    // 10.7-12.6 % against sysprof's 6.3-9.7 % (4.3 points for Debian's
    // 3.11, failing CI at 4), in every interpreter, while every other
    // share stayed within 2.3. sysprof's own `dump` did not move: the build
    // before the change the failure came with (`a2d22ca`) gave 6.3 % twice on
    // 3.11, the new one 6.0-6.1. A third sampler, perf at timer interrupts
    // as sysprof samples (`python3.12 -X perf`, `perf record -F 1000
    // --call-graph dwarf`), gave `dump` 9.6 % of 3.12's json.tool, sysprof
    // 8.9-9.1, py-spy 12.1-13.0 on the same input: py-spy's, again where
    // the thread next returns to user space (`dump` writes). 3.11's gap is
    // the widest (4.2-4.7 points in four runs; the others' 2.5-3.6), and
    // 3.11 has no `-X perf` to check it by: not shown to be py-spy's alone.
    // The bar is 5.5 points.
    const SHARE_POINTS: f64 = 0.055;
    // Beside a busy CPU py-spy's shares move where sysprof's do not:
    // `_iterencode_list` 29.9-31.7 % by py-spy in four runs whose program
    // waited for a CPU (sysprof 26.6-29.2 % in the same runs; quiet, the
    // two within 2 points of each other).
    // Not shown why; likely: py-spy stops the thread with ptrace, which
    // takes effect when it next returns to user space, and a thread that
    // shares its CPU comes back from the scheduler at ticks, system calls
    // and page faults, so py-spy samples those points rather than time.
    // There the bar is wider, and said. Quiet, the program waited 1.3-2.0 % of its time
    // (py-spy and sysprof share its CPUs), beside a busy CPU 13-20 %.
    const LOADED: f64 = 0.05;
    const LOADED_SHARE_POINTS: f64 = 0.07;
    use std::io::Write;
    if !can_record("python_top_functions_match_py_spy_on_the_same_run") {
        return;
    }
    let Some(spy) = py_spy("python_top_functions_match_py_spy_on_the_same_run") else {
        return;
    };
    let dir = scratch("python-py-spy");
    let _ = sysprof_bin();
    for py in interpreters("python_top_functions_match_py_spy_on_the_same_run") {
        let who = py.display().to_string();
        let big = dir.join("big.json");
        let made = Command::new(&py)
            .arg("-c")
            .arg(
                "import json, random, sys\nrandom.seed(2)\ndef o(d):\n    return random.random() if d > 3 else {f'k{i}': [o(d + 1) for _ in range(3)] for i in range(6)}\njson.dump([o(0) for _ in range(18)], open(sys.argv[1], 'w'))",
            )
            .arg(&big)
            .status()
            .unwrap();
        assert!(made.success(), "{who}: writing the JSON input");
        let out_path = dir.join("spied.json.gz");
        let script = workspace_root().join("tests/workloads/pyspy_jsontool.py");
        let mut rec = Command::new(sysprof_bin())
            .args(["record", "-v", "-F", "2000", "-o"])
            .arg(&out_path)
            .args([
                "--",
                py.to_str().unwrap(),
                script.to_str().unwrap(),
                big.to_str().unwrap(),
                "/dev/null",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(rec.stdout.take().unwrap()).lines();
        let pid: u64 = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("pid=").and_then(|p| p.trim().parse().ok()))
            .expect("the script's pid");
        let spy_out = dir.join("spy.txt");
        let spying = Command::new(&spy)
            .args(["record", "-F", "-f", "raw", "-r", "1000", "-o"])
            .arg(&spy_out)
            .args(["--pid", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        rec.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let spied = wait_with_timeout(spying, std::time::Duration::from_secs(120), "py-spy");
        let recorded =
            wait_with_timeout(rec, std::time::Duration::from_secs(120), "sysprof record");
        assert!(
            recorded.status.success(),
            "{who}: record failed: {}",
            String::from_utf8_lossy(&recorded.stderr)
        );
        let said: Vec<String> = lines.map_while(Result::ok).collect();
        let said_ns = |key: &str| {
            said.iter()
                .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{who}: the script printed no {key}: {said:?}"))
        };
        let (cpu_ns, run_delay_ns) = (said_ns("cpu_ns="), said_ns("run_delay_ns="));
        let waited_for_cpu = run_delay_ns / (cpu_ns + run_delay_ns).max(1.0);
        let bar = if waited_for_cpu <= LOADED {
            SHARE_POINTS
        } else {
            LOADED_SHARE_POINTS
        };
        let raw = std::fs::read_to_string(&spy_out).unwrap_or_else(|e| {
            panic!(
                "{who}: no py-spy output ({e}): {}",
                String::from_utf8_lossy(&spied.stderr)
            )
        });
        // Shares of the program's own samples: py-spy counts the wrapper's
        // wait for "go" as busy (2.2-2.5 % of its samples, 0.5 % of
        // sysprof's), which left every other share of py-spy's that much
        // smaller, relatively.
        let wrapper = |m: &mut std::collections::HashMap<(String, String, u64), f64>| {
            m.retain(|k, _| k.1 != "pyspy_jsontool.py");
            let sum: f64 = m.values().sum();
            if sum > 0.0 {
                m.values_mut().for_each(|v| *v /= sum);
            }
        };
        let (mut theirs, their_n) = py_spy_shares(&raw);
        let (mut ours, our_n) = leaf_python_shares(&Profile::load(&out_path), pid);
        wrapper(&mut theirs);
        wrapper(&mut ours);
        assert!(
            their_n >= 700 && our_n >= 1000,
            "{who}: too few samples to compare: py-spy {their_n}, sysprof {our_n}"
        );
        let top = |m: &std::collections::HashMap<(String, String, u64), f64>| {
            let mut v: Vec<_> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v.into_iter().take(10).map(|(k, _)| k).collect::<Vec<_>>()
        };
        let mut report = String::new();
        let mut worst = 0.0f64;
        let mut keys = top(&theirs);
        keys.extend(top(&ours));
        keys.sort();
        keys.dedup();
        for k in &keys {
            let (a, b) = (
                ours.get(k).copied().unwrap_or(0.0),
                theirs.get(k).copied().unwrap_or(0.0),
            );
            worst = worst.max((a - b).abs());
            report.push_str(&format!(
                "  {:>5.1}% {:>5.1}%  {} ({}:{})\n",
                a * 100.0,
                b * 100.0,
                k.0,
                k.1,
                k.2
            ));
        }
        eprintln!(
            "{who}: sysprof {our_n} samples, py-spy {their_n}; waited for a CPU {:.1} % of its time (schedstat), so within {:.1} points; sysprof vs py-spy:\n{report}",
            waited_for_cpu * 100.0,
            bar * 100.0
        );
        // Every top function of either with 2 % or more is one the other
        // found too: the same name, file and first line.
        for k in top(&theirs).iter().chain(&top(&ours)) {
            if ours
                .get(k)
                .copied()
                .unwrap_or(0.0)
                .max(theirs.get(k).copied().unwrap_or(0.0))
                >= 0.02
            {
                assert!(
                    ours.contains_key(k) && theirs.contains_key(k),
                    "{who}: {k:?} is only in one profiler's samples:\n{report}"
                );
            }
        }
        assert!(
            worst <= bar,
            "{who}: a top function's share differs from py-spy's by {:.1} points:\n{report}",
            worst * 100.0
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Check, for each interpreter, that Python threads are named as the
/// program named them with `threading` (CPython before 3.14 leaves them
/// all "python3" in the kernel): every thread of `pythreads.py`, by the
/// native id and name the thread itself printed — one longer than the
/// kernel's 15 bytes, one not ASCII — is a track of that name, and the
/// main thread keeps the program's name.
#[test]
fn python_threads_are_named_as_threading_named_them() {
    let test = "python_threads_are_named_as_threading_named_them";
    if !can_record(test) {
        return;
    }
    let dir = scratch("python-threads");
    let script = workspace_root().join("tests/workloads/pythreads.py");
    // Before 3.11 the names are not read (the docs' runtimes table says so).
    for py in interpreters("python_threads_are_named_as_threading_named_them")
        .into_iter()
        .filter(|py| minor_of(py) >= 11)
    {
        let out_path = dir.join("p.json.gz");
        let out = Command::new(sysprof_bin())
            .args(["record", "--no-off-cpu", "-o"])
            .arg(&out_path)
            .arg("--")
            .arg(&py)
            .arg(&script)
            .output()
            .unwrap();
        assert_success(&out);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let pid = field(&out.stdout, "pid").expect("pythreads.py printed its pid");
        let threads: Vec<(String, u64)> = said
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("thread name=")?;
                let (name, tid) = rest.rsplit_once(" tid=")?;
                Some((name.to_string(), tid.parse().ok()?))
            })
            .collect();
        assert_eq!(
            threads.len(),
            3,
            "{}: three threads said their names: {said} {}",
            py.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let profile = Profile::load(&out_path);
        let tracks: Vec<(u64, String)> = profile
            .process_threads(pid)
            .iter()
            .map(|t| (t.tid(), t.name().to_string()))
            .collect();
        for (name, tid) in &threads {
            let track = tracks
                .iter()
                .find(|(t, _)| t == tid)
                .map(|(_, n)| n.as_str());
            assert_eq!(
                track,
                Some(name.as_str()),
                "{}: thread {tid} is named {name} by threading: {tracks:?}",
                py.display()
            );
        }
        let main = tracks
            .iter()
            .find(|(t, _)| *t == pid)
            .map(|(_, n)| n.as_str());
        assert!(
            main.is_some_and(|n| n.starts_with("python")),
            "{}: the main thread keeps the program's name: {tracks:?}",
            py.display()
        );
        eprintln!("python threads: {}: {tracks:?}", py.display());
    }
}
