//! The in-kernel unwinder's shared budgets against a hostile local user:
//! table rows, process entries, and a process with more executable mappings
//! than an entry holds; and the rows' kernel memory, taken as tables need it. The attacker runs as `nobody`; the victim is root's
//! and is judged by its own call chain and its own CPU time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sysprof_tests::*;

/// Samples per second of CPU at the default frequency.
const HZ: f64 = 999.0;

/// Build `libstep.so` from chainstep.c and copy it to `n` distinct files.
fn step_libraries(dir: &Path, n: usize) -> Vec<PathBuf> {
    let src = workspace_root().join("tests/workloads/chainstep.c");
    let lib = dir.join("libstep.so");
    let status = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(status.success(), "building libstep.so failed");
    (0..n)
        .map(|i| {
            let p = dir.join(format!("libstep{i}.so"));
            std::fs::copy(&lib, &p).unwrap();
            p
        })
        .collect()
}

/// The `kernel unwinding:` line of a `record -v` stderr.
fn kernel_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("sysprof: kernel unwinding:"))
        .unwrap_or("")
}

/// Check that a process with 304 executable mappings (304 distinct
/// libraries, more than the 256 an entry of the kernel's process map
/// holds) keeps whole stacks: a chain through every library, 64 frames of
/// the program below it, judged against the chain the workload runs (the
/// thread root, manylibs_thread, descend x 65, step x 304, bottom). At least
/// 95% of the samples in bottom must be whole, none may end "outside any
/// code", and the thread must have its samples (its own CPU time at 999 Hz).
#[test]
fn more_mappings_than_an_entry_holds_stay_whole() {
    if !can_record("more_mappings_than_an_entry_holds_stay_whole") {
        return;
    }
    let dir = scratch("more_mappings_than_an_entry_holds_stay_whole");
    let libs = step_libraries(&dir, 304);
    let exe = build_c(
        "manylibs",
        &dir.join("manylibs"),
        &["-O2", "-fomit-frame-pointer", "-ldl"],
    );
    let out_path = dir.join("out.json.gz");
    let mut args: Vec<&str> = vec!["--no-off-cpu", "--", exe.to_str().unwrap(), "2.0"];
    args.extend(libs.iter().map(|l| l.to_str().unwrap()));
    let out = record(&args, &out_path);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    assert_eq!(field(&out.stdout, "libs"), Some(304));
    let cpu_ms = field(&out.stdout, "cpu_ms").expect("the workload's CPU time");
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the manylibs thread");
    let (mut whole, mut outside, mut counted) = (0, 0, 0);
    let mut example = None;
    for s in t.on_cpu_stacks(&profile.categories()) {
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        if !names.contains(&"bottom") && !names.iter().any(|n| n.starts_with("[truncated")) {
            continue;
        }
        counted += 1;
        outside += names.iter().any(|n| n.contains("outside any code")) as usize;
        let root = names.iter().position(|n| *n == "start_thread");
        let ok = root.is_some_and(|r| {
            let rest = &names[r + 1..];
            let descends = rest.iter().skip(1).take_while(|n| **n == "descend").count();
            let steps = rest
                .iter()
                .skip(1 + descends)
                .take_while(|n| **n == "step")
                .count();
            rest.first() == Some(&"manylibs_thread")
                && descends == 65
                && steps == 304
                && rest.get(1 + descends + steps) == Some(&"bottom")
        });
        if ok {
            whole += 1;
        } else if example.is_none() {
            example = Some(names.iter().map(|n| n.to_string()).collect::<Vec<_>>());
        }
    }
    eprintln!(
        "manylibs: {whole} of {counted} whole, {outside} outside any code, cpu {cpu_ms} ms; {}",
        kernel_line(&stderr)
    );
    assert!(
        kernel_line(&stderr).contains("mappings_cut=")
            && !kernel_line(&stderr).contains("mappings_cut=0"),
        "the entry was cut: {}",
        kernel_line(&stderr)
    );
    assert!(
        counted as f64 >= cpu_ms as f64 * HZ / 1000.0 * 0.93,
        "{counted} samples for {cpu_ms} ms of CPU"
    );
    // The one window left: samples in the first milliseconds after the
    // last dlopen, before the sideband brings its mappings and the entry is
    // rewritten, walk an entry that is neither new nor cut yet (14 of 1999,
    // all in the first 14 ms, once in three runs; an open defect). Before
    // the cut entry handed over, 833 of 875 ended so.
    assert!(
        outside * 100 <= counted,
        "{outside} of {counted} stacks end outside any code"
    );
    assert!(
        whole * 100 >= counted * 95,
        "{whole} of {counted} whole; e.g. {:?}",
        example.map(|e| e.join(";"))
    );
}

/// Run `exe args` as nobody in the background; returns once it printed `ready` (a line starting so).
fn start_as_nobody(exe: &Path, args: &[&str], ready: &str) -> (Child, String) {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("setpriv (util-linux) runs commands as another user");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.starts_with(ready) {
            break;
        }
    }
    assert!(said.contains(ready), "the attacker never got ready: {said}");
    // Let the rest of its output go nowhere.
    std::thread::spawn(move || for _ in lines {});
    (child, said)
}

/// What a 150-frame root victim (recurse.c: 512 bytes of locals a frame,
/// beyond any stack copy) got: (whole stacks, samples in bottom, stderr,
/// the profile's warnings).
fn record_victim(
    dir: &Path,
    extra: &[&str],
    seconds: &str,
    link: &[&str],
) -> (usize, usize, String, Vec<String>) {
    let mut flags = vec!["-O2", "-fomit-frame-pointer"];
    flags.extend_from_slice(link);
    let exe = build_c("recurse", &dir.join("recurse"), &flags);
    let out_path = dir.join("victim.json.gz");
    let mut args: Vec<&str> = vec!["-a", "--no-off-cpu"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", exe.to_str().unwrap(), seconds, "150"]);
    let out = record(&args, &out_path);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let (mut whole, mut counted) = (0, 0);
    let mut example = None;
    for t in profile
        .process_threads(pid)
        .into_iter()
        .filter(|t| t.name().starts_with("recurse"))
    {
        for s in t.on_cpu_stacks(&profile.categories()) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            if !names.contains(&"bottom") && !names.iter().any(|n| n.starts_with("[truncated")) {
                continue;
            }
            counted += 1;
            let root = names.iter().position(|n| *n == "start_thread");
            let ok = root.is_some_and(|r| {
                let rest = &names[r + 1..];
                let descends = rest.iter().skip(1).take_while(|n| **n == "descend").count();
                rest.first() == Some(&"recurse_thread")
                    && descends == 150
                    && rest.get(1 + descends) == Some(&"bottom")
            });
            if ok {
                whole += 1;
            } else if example.is_none() {
                example = Some(
                    names
                        .iter()
                        .rev()
                        .take(3)
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(";"),
                );
            }
        }
    }
    eprintln!(
        "victim: {whole} of {counted} whole (e.g. a cut one ends {example:?}); {}",
        stats_line(&out)
    );
    let others = profile.json["meta"]["extra"][0]["entries"]
        .as_array()
        .and_then(|e| {
            e.iter()
                .find(|e| e["label"] == "Warnings about other users' binaries")
        })
        .and_then(|e| e["value"].as_u64())
        .unwrap_or(0);
    let warnings = profile_warnings(&profile);
    eprintln!("victim: profile warnings {warnings:?}; {others} about other users' binaries");
    // Profile Info lists what concerns root (who recorded): warnings about
    // nobody's files are counted, not listed.
    assert!(
        !warnings.iter().any(|w| w.contains("/nobody/")),
        "nobody's files are not listed: {warnings:?}"
    );
    (whole, counted, stderr, warnings)
}

/// The warnings of a profile's meta (Profile Info).
fn profile_warnings(profile: &Profile) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("label").and_then(|l| l.as_str()) == Some("Warning") {
                    out.extend(m.get("value").and_then(|v| v.as_str()).map(str::to_string));
                }
                m.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&profile.json["meta"], &mut out);
    out
}

/// A file of `rows` unwind rows: functions of 1,000 rows each (ordinary
/// FDEs of ~2 KiB, as a big real library has; one FDE of a million rows
/// is refused whole by the CFI reader's per-entry cap), whose CFA
/// alternates between two offsets at every instruction (one row each), as
/// a library. The first function is named `name`.
fn many_rows_library(dir: &Path, name: &str, rows: usize) -> PathBuf {
    let src = many_rows_source(dir, name, rows);
    let lib = dir.join(format!("lib{name}.so"));
    let status = Command::new("gcc")
        .args(["-shared", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(status.success(), "assembling {name} failed");
    lib
}

/// Make `path` nobody's.
fn give_to_nobody(path: &Path) {
    let status = Command::new("chown")
        .args(["65534:65534"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Check that a user cannot take the table budget from root: nobody holds
/// four files of its own mapped whose `.eh_frame` compiles to 1,000,000
/// rows each (the whole 32 MiB budget's 4,194,304 rows, less what root's
/// processes use) while root records a 150-frame victim, whose stacks no
/// copy holds and whose program has 20,000 rows of its own (so it needs
/// room, as libpython would). The victim must come out whole in at least
/// 95% of its samples in bottom, with the samples its 3 s of CPU time give
/// at 999 Hz, and the refusal must be said for uid 65534.
#[test]
fn a_user_cannot_take_the_table_budget_from_root() {
    if !can_record("a_user_cannot_take_the_table_budget_from_root") {
        return;
    }
    let dir = scratch("a_user_cannot_take_the_table_budget_from_root");
    let theirs = dir.join("nobody");
    std::fs::create_dir(&theirs).unwrap();
    give_to_nobody(&theirs);
    // Four files (distinct, so four tables) of one assembly.
    let one = many_rows_library(&theirs, "rows", 1_000_000);
    let libs: Vec<PathBuf> = (0..4)
        .map(|i| {
            let l = theirs.join(format!("librows{i}.so"));
            std::fs::copy(&one, &l).unwrap();
            give_to_nobody(&l);
            l
        })
        .collect();
    let pad = many_rows_source(&dir, "pad", 20_000);
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hold = build_c("holdlibs", &theirs.join("holdlibs"), &["-ldl"]);
    let mut args = vec!["120"];
    args.extend(libs.iter().map(|l| l.to_str().unwrap()));
    let (mut attacker, said) = start_as_nobody(&hold, &args, "held=");
    assert!(
        said.contains("held=4"),
        "the attacker holds its four files: {said}"
    );
    let (whole, counted, stderr, warnings) = record_victim(
        &dir,
        &["--unwind-table-mb", "32"],
        "3.0",
        &[pad.to_str().unwrap()],
    );
    let _ = attacker.kill();
    let _ = attacker.wait();
    eprintln!("{}", kernel_line(&stderr));
    assert!(
        counted as f64 >= 3.0 * HZ * 0.93,
        "{counted} samples for 3 s of CPU"
    );
    assert!(whole * 100 >= counted * 95, "{whole} of {counted} whole");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("kernel unwinding refused")
                && l.contains("uid 65534:")
                && !l.contains("uid 65534: 0 processes, 0 tables")),
        "the refusal is said, for uid 65534: {stderr}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("uid 65534: ") && w.contains("tables")),
        "the profile says it: {warnings:?}"
    );
    assert!(
        stderr.contains("librows0.so"),
        "-v lists every warning, nobody's files' too: {stderr}"
    );
}

/// Check that a user cannot take the process map from root: with the map
/// shrunk to 1024 entries (a quarter for any uid but root's), nobody runs
/// 1,100 sleeping processes that map a page executable every 2 s while
/// root records a 150-frame victim. The victim must come out whole in at
/// least 95% of its samples in bottom, with the samples its 3 s of CPU
/// give, and at least the 844 processes past nobody's quarter must be
/// counted as refused for uid 65534.
#[test]
fn a_user_cannot_take_the_process_map_from_root() {
    if !can_record("a_user_cannot_take_the_process_map_from_root") {
        return;
    }
    let dir = scratch("a_user_cannot_take_the_process_map_from_root");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let forks = build_c("mapforks", &dir.join("mapforks"), &[]);
    let (mut attacker, said) = start_as_nobody(&forks, &["1100", "120"], "started=");
    assert!(
        said.contains("started=1100"),
        "the attacker runs its processes: {said}"
    );
    // Every child has mapped its page once.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (whole, counted, stderr, warnings) =
        record_victim(&dir, &["--unwind-processes", "1024"], "3.0", &[]);
    // Its children die with it (PR_SET_PDEATHSIG).
    let _ = attacker.kill();
    let _ = attacker.wait();
    eprintln!("{}", kernel_line(&stderr));
    eprintln!(
        "{}",
        stderr
            .lines()
            .find(|l| l.contains("kernel unwinding refused"))
            .unwrap_or("no refusals")
    );
    assert!(
        counted as f64 >= 3.0 * HZ * 0.93,
        "{counted} samples for 3 s of CPU"
    );
    assert!(whole * 100 >= counted * 95, "{whole} of {counted} whole");
    let refused = nobodys_refused_processes(&stderr);
    assert!(
        refused >= 1100 - 256,
        "nobody's processes past its quarter are counted as refused: {refused}; {stderr}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("uid 65534: ") && w.contains("processes got no entry")),
        "the profile says it: {warnings:?}"
    );
}

/// The processes of uid 65534 (nobody) the kernel unwinder refused an
/// entry, from `record`'s "kernel unwinding refused: uid 65534: N processes"
/// line (0 without one).
fn nobodys_refused_processes(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.contains("kernel unwinding refused"))
        .find_map(|l| l.split("uid 65534: ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Check that processes a user execs during the recording are charged to
/// that user: their real uid comes from the kernel at their exec (not from
/// `/proc/PID/status`), and a wrong one (root's, or the gid) would let
/// them past the user's quarter. With 64 entries, nobody's quarter is 16:
/// of the 41 processes nobody execs (a shell and 40 `sleep`s), at least 25
/// must be refused, counted against uid 65534.
#[test]
fn processes_a_user_execs_are_charged_to_that_user() {
    if !can_record("processes_a_user_execs_are_charged_to_that_user") {
        return;
    }
    let dir = scratch("processes_a_user_execs_are_charged_to_that_user");
    let out_path = dir.join("execs.json.gz");
    let nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups \
                  sh -c 'for i in $(seq 40); do sleep 3 & done; wait'";
    let out = record(
        &[
            "-a",
            "--no-off-cpu",
            "--unwind-processes",
            "64",
            "--",
            "sh",
            "-c",
            nobody,
        ],
        &out_path,
    );
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{}", kernel_line(&stderr));
    let refused = nobodys_refused_processes(&stderr);
    assert!(
        refused >= 41 - 16,
        "nobody's exec'd processes past its quarter are refused as nobody's: {refused}; {stderr}"
    );
}

/// Check that a process refused an entry (its user holds its quarter of
/// the process map) hands its samples over to userspace instead of being
/// taken for one that just started: with the map shrunk to 1024 entries
/// (nobody's quarter: 256), nobody holds 300 sleeping processes, then runs
/// `deep` (six small frames, -O2 -fomit-frame-pointer) for 2 s of CPU while
/// root records. At least 95% of deep's samples must hold the whole chain
/// to the thread root (the source's chain), with the samples its CPU time
/// gives; none may say "just started"; the kernel's walks say `refused`,
/// and userspace walked (at least 90% of) them over the kernel's rows.
#[test]
fn a_process_refused_an_entry_hands_over() {
    if !can_record("a_process_refused_an_entry_hands_over") {
        return;
    }
    let dir = scratch("a_process_refused_an_entry_hands_over");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let forks = build_c("mapforks", &dir.join("mapforks"), &[]);
    let deep = build_c("deep", &dir.join("deep"), &["-O2", "-fomit-frame-pointer"]);
    let (mut attacker, said) = start_as_nobody(&forks, &["300", "120"], "started=");
    assert!(
        said.contains("started=300"),
        "the attacker runs its processes: {said}"
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    let out_path = dir.join("out.json.gz");
    let rec = record_started(
        &[
            "-a",
            "--no-off-cpu",
            "--unwind-processes",
            "1024",
            "-d",
            "120",
        ],
        &out_path,
    );
    // Each of nobody's sleepers asks for its entry as its mappings change
    // (every 2 s): after two of those periods its quarter is taken (without
    // the wait, a busy machine once let deep in first: 0 walks refused).
    std::thread::sleep(std::time::Duration::from_secs(4));
    let ran = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&deep)
        .arg("2.0")
        .output()
        .expect("setpriv");
    let _ = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status();
    let out = wait_with_timeout(rec, std::time::Duration::from_secs(120), "sysprof record");
    let _ = attacker.kill();
    let _ = attacker.wait();
    assert_success(&out);
    assert!(ran.status.success(), "deep ran");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let (pid, tid) = (
        field(&ran.stdout, "pid").unwrap(),
        field(&ran.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the deep thread");
    const CHAIN: [&str; 6] = ["level1", "level2", "level3", "level4", "level5", "level6"];
    let stacks = t.on_cpu_stacks(&profile.categories());
    let (mut whole, mut just_started) = (0, 0);
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        just_started += names.iter().any(|n| n.contains("just started")) as usize;
        let Some(root) = names
            .iter()
            .position(|n| *n == "start_thread" || *n == "clone3" || n.starts_with("__clone"))
        else {
            continue;
        };
        let Some(i1) = names.iter().position(|n| *n == "level1") else {
            continue;
        };
        if i1 > root && names.get(i1 - 1) == Some(&"deep") && names[i1..].starts_with(&CHAIN) {
            whole += 1;
        }
    }
    let line = kernel_line(&stderr);
    // The walks' own count: after "walks:", where each key is one word.
    let walks = line.split(" walks: ").nth(1).unwrap_or("");
    let refused_walks = walks
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("refused="))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    // Its stacks are walked in userspace over the rows the kernel would
    // have walked (the binary's table is the system's, in the array).
    let walked_by_rows = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("handed_over_walked_by_rows="))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    eprintln!(
        "refused deep: {whole} of {} whole, {just_started} 'just started'; {line}",
        stacks.len()
    );
    assert!(
        stacks.len() as f64 >= 2.0 * HZ * 0.93,
        "{} samples for 2 s of CPU",
        stacks.len()
    );
    assert_eq!(
        just_started, 0,
        "a refused process is no process that just started"
    );
    assert!(refused_walks > 0, "the kernel's walks say refused: {line}");
    assert!(
        walked_by_rows * 100 >= stacks.len() * 90,
        "deep's {} handed-over stacks walked over the rows: {walked_by_rows}",
        stacks.len()
    );
    assert!(
        whole * 100 >= stacks.len() * 95,
        "{whole} of {} whole",
        stacks.len()
    );
}

/// Rows of one chunk of the unwinder's table array (UNWIND_CHUNK_ROWS).
const CHUNK_ROWS: u64 = 1 << 18;

/// The kernel memory of `pid`'s unwind-row chunks (arrays of CHUNK_ROWS
/// 8-byte rows) and of all its maps, bytes.
fn chunk_and_total_bytes(pid: u32) -> (u64, u64) {
    let maps = kernel_maps(pid);
    let chunks = maps
        .iter()
        .filter(|(kind, entries, _)| *kind == 2 && *entries == CHUNK_ROWS)
        .map(|m| m.2)
        .sum();
    (chunks, maps.iter().map(|m| m.2).sum())
}

/// Poll `pid`'s chunk memory for up to `secs` until `done` holds; the last value.
fn chunks_until(pid: u32, secs: u64, done: impl Fn(u64) -> bool) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let (chunks, _) = chunk_and_total_bytes(pid);
        if done(chunks) || std::time::Instant::now() > deadline {
            return chunks;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Check that the unwind tables take kernel memory as they are used, not
/// the budget up front, and give it back: at the default 64 MiB budget,
/// `record -a` on this machine holds chunks for what its processes' tables
/// take (the kernel's own `memlock` of the maps, from fdinfo: at most half
/// of the budget, where the whole array was allocated before); a process
/// that maps a library of 2,000,000 rows (15.3 MiB of rows) adds that,
/// within two 2-MiB chunks either way (the room the chunks at rest had is
/// filled first); once it exits, the chunks
/// its table took are freed again.
#[test]
fn unwind_tables_take_kernel_memory_as_they_are_used() {
    if !can_record("unwind_tables_take_kernel_memory_as_they_are_used") {
        return;
    }
    let dir = scratch("unwind_tables_take_kernel_memory_as_they_are_used");
    let big = many_rows_library(&dir, "bigrows", 2_000_000);
    let hold = build_c("holdlibs", &dir.join("holdlibs"), &["-ldl"]);
    let out_path = dir.join("memory.json.gz");
    // Exited processes' tables go between windows: small windows, so that
    // an idle machine's recording finishes some every second.
    let rec = record_started(&["-a", "--window-records", "200"], &out_path);
    let pid = rec.id();
    // The tables of what runs are compiled on a worker after attaching.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (at_rest, total_at_rest) = chunk_and_total_bytes(pid);
    let mut holder = Command::new(&hold)
        .arg("60")
        .arg(&big)
        .stdout(Stdio::piped())
        .spawn()
        .expect("holdlibs");
    let mut line = String::new();
    let mut reader = BufReader::new(holder.stdout.take().unwrap());
    while !line.contains("held=") {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("holdlibs ended before holding its library");
        }
    }
    let big_bytes = 2_000_000u64 * 8;
    let holding = chunks_until(pid, 20, |c| c >= at_rest + big_bytes);
    let _ = holder.kill();
    let _ = holder.wait();
    let after = chunks_until(pid, 30, |c| c + big_bytes - 2 * CHUNK_ROWS * 8 <= holding);
    send_signal(&rec, 2);
    let out = rec.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "unwind chunks: at rest {:.1} MiB (all maps {:.1} MiB), holding the library {:.1} MiB, after it exited {:.1} MiB; {}",
        mib(at_rest),
        mib(total_at_rest),
        mib(holding),
        mib(after),
        kernel_line(&stderr)
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        at_rest > 0,
        "the tables of what runs are in the kernel: {stderr}"
    );
    // This VM's processes' tables take 7-10 MiB (16 with a headless
    // Chromium running beside); the array was 64, all of it up front.
    assert!(
        at_rest <= (64 << 20) / 2,
        "{:.1} MiB of chunks at rest: the budget up front?",
        mib(at_rest)
    );
    // The new table first fills the room the chunks at rest have (the last
    // one's end, a freed table's place): 1.2 MiB here with a PostgreSQL
    // cluster running beside (26.1 MiB holding, from 12.0); up to two chunks.
    assert!(
        holding + 2 * CHUNK_ROWS * 8 >= at_rest + big_bytes
            && holding <= at_rest + big_bytes + 2 * CHUNK_ROWS * 8,
        "holding a {:.1}-MiB table: {:.1} MiB of chunks from {:.1}",
        mib(big_bytes),
        mib(holding),
        mib(at_rest)
    );
    assert!(
        after + big_bytes - 2 * CHUNK_ROWS * 8 <= holding,
        "its table's chunks were freed when it exited: {:.1} MiB after, {:.1} holding",
        mib(after),
        mib(holding)
    );
}
