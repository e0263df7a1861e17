//! Integration tests for what a user hands sysprof and where its output goes:
//! `-o` naming a device, stdout or a FIFO (written through, never
//! replaced); `report` and `validate` given a gzip bomb or a 200,000-deep
//! stack; a binary whose path holds a newline and terminal escapes, which
//! must reach no terminal or log raw. The oracles are the device node's
//! `stat`, the child's peak resident set (`wait4`'s, from a small forking
//! helper), the numbers
//! the tests built into their own profiles, and the raw bytes of stderr.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sysprof_tests::*;

/// Run `cmd` to its end (killed after `timeout`), returning its output and
/// its peak resident set in KiB: `wait4`'s `ru_maxrss`, read by
/// `tests/workloads/maxrss.c`, which forks and runs it. Not the test
/// process's own `wait4` of the command, nor its /proc VmHWM: a command
/// that ends within a millisecond (a refusal at the first byte) gives
/// /proc no reading, and `ru_maxrss` keeps across an exec what the process
/// it was spawned from had resident, so from the test process it was the
/// test's own peak (beside a compiler loop, a `report` refusing a bomb at
/// once "peaked" at 73 MiB). From the small helper it is the command's.
fn run_measured(cmd: &mut Command, timeout: Duration) -> (Output, u64) {
    static HELPER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let helper = HELPER.get_or_init(|| {
        let dir = scratch("inputs-maxrss");
        build_c("maxrss", &dir.join("maxrss"), &[])
    });
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let report = helper.with_file_name(format!("peak-{run}"));
    let mut wrapped = Command::new(helper);
    wrapped
        .arg(&report)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    let what = format!("{cmd:?}");
    // The helper's own /proc peak, which this reads too, is not the command's.
    let (out, _) = wait_with_peak_rss(wrapped.spawn().expect("spawn"), timeout, &what);
    let peak: u64 = std::fs::read_to_string(&report)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("maxrss wrote no peak for {what} ({})", out.status));
    let _ = std::fs::remove_file(&report);
    (out, peak)
}

/// Check that `record -a -o /dev/null` writes through the device and
/// never replaces it: /dev/null is the same character device (same rdev
/// and inode) before and after, and sysprof exits 0.
#[test]
fn output_to_dev_null_leaves_the_device() {
    if !can_record("output_to_dev_null_leaves_the_device") {
        return;
    }
    let before = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(
        before.file_type().is_char_device(),
        "/dev/null is not a device before the test: {before:?}"
    );
    let out = record(&["-a", "-d", "1", "-q"], Path::new("/dev/null"));
    let after = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(
        after.file_type().is_char_device(),
        "/dev/null was replaced: {after:?}"
    );
    assert_eq!(
        (after.rdev(), after.ino()),
        (before.rdev(), before.ino()),
        "/dev/null is another node now"
    );
    assert_success(&out);
}

/// Check that `-o -` writes the profile itself to stdout: what comes out
/// parses as JSON and passes the structural validator, with samples.
#[test]
fn output_dash_is_a_profile_on_stdout() {
    if !can_record("output_dash_is_a_profile_on_stdout") {
        return;
    }
    let dir = scratch("inputs-stdout");
    let exe = build_c("spin", &dir.join("spin"), &[]);
    let out = Command::new(sysprof_bin())
        .args(["record", "-q", "-o", "-", "--"])
        .arg(&exe)
        .arg("0.3")
        .output()
        .unwrap();
    assert_success(&out);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(300)])
        )
    });
    let problems = sysprof::profile::validate::validate(&json);
    assert!(problems.is_empty(), "{problems:?}");
    let samples: u64 = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["samples"]["length"].as_u64().unwrap())
        .sum();
    assert!(samples > 0, "no samples in the profile on stdout");
    // The command's own output went to stderr, not into the JSON.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pid="),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Check that a FIFO named with -o is written through to its reader (a
/// valid profile arrives) and is still a FIFO afterwards.
#[test]
fn output_fifo_is_written_through() {
    if !can_record("output_fifo_is_written_through") {
        return;
    }
    let dir = scratch("inputs-fifo");
    let fifo = dir.join("p.json");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let f = fifo.clone();
    // The reader opens late: sysprof records first and waits for it at the end.
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::read(&f).unwrap()
    });
    let child = Command::new(sysprof_bin())
        .args(["record", "-q", "-a", "-d", "0.5", "-o"])
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_timeout(child, Duration::from_secs(60), "record into a FIFO");
    assert_success(&out);
    let bytes = reader.join().unwrap();
    let json: Value = serde_json::from_slice(&bytes).expect("the FIFO carried JSON");
    assert!(sysprof::profile::validate::validate(&json).is_empty());
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );
}

/// A gzip file of about 1 MiB that inflates to 1 GiB of a valid-looking
/// JSON array (what a bomb for a JSON reader looks like: it parses on).
/// Made of 1,024 gzip members of 1 MiB each (gzip allows concatenated
/// members), so the test compresses 3 MiB, not 1 GiB.
fn gzip_bomb(path: &Path) {
    let member = |data: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, data).unwrap();
        enc.finish().unwrap()
    };
    let chunk = "0,".repeat(1 << 19);
    let middle = member(chunk.as_bytes());
    let mut file = member(format!("{{\"threads\":[{chunk}").as_bytes());
    for _ in 0..1022 {
        file.extend_from_slice(&middle);
    }
    file.extend(member(format!("{chunk}0]}}").as_bytes()));
    std::fs::write(path, file).unwrap();
}

/// A gzip file of about 1 MiB that inflates to 1 GiB of one string under
/// a key no reader keeps (`{"x":"aaa…`): what parses on in any reader.
fn gzip_string_bomb(path: &Path) {
    let member = |data: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, data).unwrap();
        enc.finish().unwrap()
    };
    let middle = member(&vec![b'a'; 1 << 20]);
    let mut file = member(b"{\"x\":\"");
    for _ in 0..1024 {
        file.extend_from_slice(&middle);
    }
    file.extend(member(b"\"}"));
    std::fs::write(path, file).unwrap();
}

/// Check that `report` and `validate` refuse two 1 MiB gzip bombs (1 GiB
/// of JSON each: a threads array of zeros, and one string) with one line,
/// and that each one's peak RSS (see `run_measured`) stays under the
/// 64 MiB limit: they are read as they are inflated, and what was read
/// is not held. Where the reader parses on (validate, and report of the
/// string) the line names the limit; report stops at the first zero, which
/// is not a thread.
#[test]
fn gzip_bombs_are_refused_in_bounded_memory() {
    let dir = scratch("inputs-bomb");
    let (zeros, string) = (dir.join("zeros.json.gz"), dir.join("string.json.gz"));
    gzip_bomb(&zeros);
    gzip_string_bomb(&string);
    for bomb in [&zeros, &string] {
        let size = std::fs::metadata(bomb).unwrap().len();
        for sub in ["report", "validate"] {
            let started = Instant::now();
            let (out, peak_kib) = run_measured(
                Command::new(sysprof_bin()).arg(sub).arg(bomb),
                Duration::from_secs(120),
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "{sub} of {} ({size} bytes): {:.2} s, peak RSS {} MiB: {stderr}",
                bomb.display(),
                started.elapsed().as_secs_f64(),
                peak_kib / 1024
            );
            assert!(!out.status.success(), "{sub} accepted the bomb");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            let limit_said =
                stderr.contains("inflates past 6") && stderr.contains("MiB (64 times its");
            if sub == "report" && bomb == &zeros {
                assert!(
                    limit_said || stderr.contains("not a processed profile"),
                    "the refusal says why: {stderr}"
                );
            } else {
                assert!(limit_said, "the limit is said: {stderr}");
            }
            assert!(peak_kib > 0, "{sub}'s peak could not be read");
            assert!(
                peak_kib < 64 * 1024,
                "{sub} peaked at {} MiB",
                peak_kib / 1024
            );
        }
    }
}

/// A profile with one thread whose deepest stack is `depth` frames:
/// stack i has prefix i-1 and calls func i / 2 (so `depth / 2` distinct
/// funcs, each calling itself once); one sample at each stack in `samples`.
fn deep_profile(depth: usize, samples: &[usize]) -> Value {
    let funcs = depth / 2;
    let mut strings: Vec<String> = (0..funcs).map(|f| format!("f{f}")).collect();
    strings.push("deep".into());
    let prefix: Vec<Value> = (0..depth)
        .map(|i| if i == 0 { Value::Null } else { json!(i - 1) })
        .collect();
    let frame: Vec<usize> = (0..depth).map(|i| i / 2).collect();
    json!({
        "meta": { "interval": 1.0, "categories": [{"name": "Other"}, {"name": "User"}] },
        "threads": [{
            "name": "deep", "pid": "4242", "tid": 4242, "processName": "deep",
            "stringArray": strings,
            "stackTable": { "length": depth, "prefix": prefix, "frame": frame },
            "frameTable": { "length": funcs, "func": (0..funcs).collect::<Vec<_>>(), "category": vec![1; funcs] },
            "funcTable": { "length": funcs, "name": (0..funcs).collect::<Vec<_>>(), "resource": vec![-1; funcs] },
            "resourceTable": { "length": 0, "name": [] },
            "samples": { "length": samples.len(), "stack": samples, "time": (0..samples.len()).map(|i| i as f64).collect::<Vec<_>>() },
            "markers": { "length": 0, "startTime": [], "endTime": [], "data": [] }
        }]
    })
}

/// The samples column of each function row in the `## Top functions by
/// {title}` table of a report.
fn function_column(report: &str, title: &str) -> std::collections::HashMap<String, u64> {
    let section = report
        .split("## ")
        .find(|s| s.starts_with(&format!("Top functions by {title}")))
        .unwrap_or_else(|| panic!("no {title} table in {report}"));
    section
        .lines()
        .skip(2)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4).then(|| (w[3].to_string(), w[2].parse().unwrap()))
        })
        .collect()
}

/// Check that a 200,000-deep stack of 100,000 distinct functions, with a
/// sample at every depth (a 5 MB file: the old walk per stack took time
/// quadratic in depth), reports in bounded time with the totals the
/// profile was built with: every f has self 2 (its two frames) and total
/// 200,000 - 2f (the samples at or below its outer frame; its recursion
/// counted once). And that folded output of the leaf alone is one line
/// naming every frame, root first.
#[test]
fn a_200000_deep_stack_reports_in_linear_time() {
    let dir = scratch("inputs-deep");
    let path = dir.join("deep.json");
    let depth = 200_000;
    let every: Vec<usize> = (0..depth).collect();
    std::fs::write(
        &path,
        serde_json::to_vec(&deep_profile(depth, &every)).unwrap(),
    )
    .unwrap();
    let started = Instant::now();
    let (out, _) = run_measured(
        Command::new(sysprof_bin())
            .args(["report", "--top", "100000"])
            .arg(&path),
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "report of a 200,000-deep stack, every depth sampled ({} bytes): {:.2} s",
        std::fs::metadata(&path).unwrap().len(),
        took.as_secs_f64()
    );
    let own = function_column(&text, "self");
    let total = function_column(&text, "total");
    assert_eq!(
        (own.len(), total.len()),
        (100_000, 100_000),
        "every func has a row"
    );
    for f in 0..100_000u64 {
        let name = format!("f{f}");
        assert_eq!(
            (own[&name], total[&name]),
            (2, 200_000 - 2 * f),
            "self and total of {name}"
        );
    }

    let leaf = dir.join("leaf.json");
    std::fs::write(
        &leaf,
        serde_json::to_vec(&deep_profile(depth, &[depth - 1; 3])).unwrap(),
    )
    .unwrap();
    let (out, _) = run_measured(
        Command::new(sysprof_bin())
            .args(["report", "--format", "folded"])
            .arg(&leaf),
        Duration::from_secs(60),
    );
    assert_success(&out);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert_eq!(folded.lines().count(), 1, "one stack");
    let line = folded.lines().next().unwrap();
    assert_eq!(
        line.split(';').count(),
        200_001,
        "process name plus every frame"
    );
    assert!(
        line.starts_with("deep;f0;f0;f1;f1;f2;") && line.ends_with(";f99999;f99999 3"),
        "root first"
    );
}

/// The hostile name: a line break, a forged agent line, and escape codes
/// that set the window title and ring the bell. Its first 15 bytes (the
/// process name the kernel keeps) hold ESC, BEL and the line break too.
const HOSTILE: &str = "\x1b]0;PWNED\x07\nsysprof agent: forged\n\x1b[2J";

/// A copy of deep (with DWARF) whose .debug_info claims to inflate to 1 TiB,
/// so sysprof warns about it by path, at `dir/HOSTILE`.
fn hostile_binary(dir: &Path) -> PathBuf {
    let full = build_c(
        "deep",
        &dir.join("deep.full"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let mut elf = std::fs::read(&full).unwrap();
    let s = elf_section(&elf, ".debug_info");
    let at = elf.len().next_multiple_of(8) as u64;
    elf.resize(at as usize, 0);
    elf.extend(zlib_chdr(1 << 40));
    elf.extend_from_slice(&[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    let len = elf.len() as u64 - at;
    set_elf_section(&mut elf, &s, s.flags | SHF_COMPRESSED, at, len);
    let exe = dir.join(HOSTILE);
    std::fs::write(&exe, elf).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// Panic unless `bytes` holds no control byte other than line ends, and
/// no line that starts as a forged agent line.
fn assert_no_raw_control(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Some(i) = bytes
        .iter()
        .position(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
    {
        panic!("{what} holds raw byte {:#04x} at {i}: {text:?}", bytes[i]);
    }
    assert!(
        !text.lines().any(|l| l.starts_with("sysprof agent: forged")),
        "{what} holds a forged line: {text}"
    );
}

/// Check that a binary whose path holds a newline, ESC and BEL, and which
/// sysprof warns about, reaches stderr, `report` and folded output only
/// escaped: no raw control byte, no forged line, and the warning is there
/// (its escaped path proves the name was printed, not dropped).
#[test]
fn hostile_names_reach_no_terminal_raw() {
    if !can_record("hostile_names_reach_no_terminal_raw") {
        return;
    }
    let dir = scratch("inputs-names");
    let exe = hostile_binary(&dir);
    let out_path = dir.join("p.json");
    let mut child = record_started(&["-a", "-d", "3", "--no-off-cpu"], &out_path);
    let w = Command::new(&exe)
        .arg("1")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(w.success());
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&stderr));
    assert_no_raw_control("record's stderr", &stderr);
    let said = String::from_utf8_lossy(&stderr);
    assert!(
        said.contains("\\e]0;PWNED\\x07\\nsysprof agent: forged\\n")
            && said.contains("DWARF not read"),
        "the warning names the binary, escaped: {said}"
    );

    let report = Command::new(sysprof_bin())
        .arg("report")
        .arg(&out_path)
        .output()
        .unwrap();
    assert_success(&report);
    assert_no_raw_control("report", &report.stdout);
    assert!(
        String::from_utf8_lossy(&report.stdout).contains("\\e]0;PWNED\\x07"),
        "the hostile process is in the report, escaped"
    );
    let folded = Command::new(sysprof_bin())
        .args(["report", "--format", "folded"])
        .arg(&out_path)
        .output()
        .unwrap();
    assert_success(&folded);
    assert_no_raw_control("folded", &folded.stdout);
    // `;` is the folded separator: the name's own became `_`.
    assert!(
        String::from_utf8_lossy(&folded.stdout)
            .lines()
            .any(|l| l.starts_with("\\e]0_PWNED\\x07")),
        "its folded lines start with the escaped name"
    );
}

/// Check that the agent's log gets the same warning escaped: the agent
/// records while the hostile binary runs, its stderr holds the warning
/// with the escaped path and no raw control byte or forged line. (With
/// `--dwarf-names`: without it the agent reads no DWARF, and the binary's
/// bomb gives no warning.)
#[test]
fn hostile_names_reach_the_agent_log_escaped() {
    if !can_record("hostile_names_reach_the_agent_log_escaped") {
        return;
    }
    let dir = scratch("inputs-names-agent");
    let exe = hostile_binary(&dir);
    let store = dir.join("store");
    let agent = Agent::start(
        &store,
        &["--window", "1", "--health-interval", "1", "--dwarf-names"],
        &[],
    );
    let w = Command::new(&exe)
        .arg("1.5")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(w.success());
    agent.wait_for_window_ending_after(wall_ms() + 500.0, Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent.stderr().contains("DWARF not read") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, log) = agent.stop_with(15);
    assert_no_raw_control("the agent's log", log.as_bytes());
    assert!(
        log.contains("\\e]0;PWNED\\x07\\nsysprof agent: forged\\n")
            && log.contains("DWARF not read"),
        "the warning names the binary, escaped: {log}"
    );
}
