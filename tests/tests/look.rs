//! Record, then look: `sysprof report` against workloads with known CPU
//! splits, sleeps and I/O; the summary's shape; which threads the profile
//! opens on; the command's exit status as sysprof's.
//!
//! The oracles are the workloads' own clocks and `/sys/block/DEV/stat`; where a
//! report's number is a count of what the profile holds, it is checked
//! against this crate's own reading of the profile (a second implementation
//! of the format, not sysprof's).

use std::process::{Command, Output};

use sysprof_tests::*;

/// `sysprof report ARGS`.
fn report(args: &[&str]) -> Output {
    Command::new(sysprof_bin())
        .arg("report")
        .args(args)
        .output()
        .expect("running sysprof report")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "sysprof report failed ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The rows of the section whose title starts with `title`.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let start = text
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no section {title:?} in:\n{text}"));
    text[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// In a functions table, the (first %, second %, samples) of `func`.
fn function_row(rows: &[&str], func: &str) -> (f64, f64, u64) {
    let row = rows
        .iter()
        .find(|l| l.split_whitespace().nth(3) == Some(func))
        .unwrap_or_else(|| panic!("{func} is not in:\n{}", rows.join("\n")));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap();
    (pct(cols[0]), pct(cols[1]), cols[2].parse().unwrap())
}

/// Check that the top functions by total CPU of a thread that splits its own
/// CPU time 3:1 between hot_three and hot_one (by CLOCK_THREAD_CPUTIME_ID)
/// show 75% and 25% within 2 points; that the sample counts equal what the
/// profile holds (read here); and that `--format folded` carries the same
/// samples.
#[test]
fn report_shows_the_cpu_split_of_a_workload() {
    if !can_record("report_shows_the_cpu_split_of_a_workload") {
        return;
    }
    let dir = scratch("look-split");
    let exe = build_c("split", &dir.join("split"), &[]);
    let path = dir.join("p.json.gz");
    // 3 s at 1999 Hz: ~6000 samples, so a share is known to a fraction of a point.
    let out = record(&["-F", "1999", "--", exe.to_str().unwrap(), "3.0"], &path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&path);
    let tid = profile
        .process_threads(pid)
        .iter()
        .find(|t| t.name() == "splitter")
        .expect("the splitter thread")
        .tid();
    let text = stdout(&report(&[
        path.to_str().unwrap(),
        "--tid",
        &tid.to_string(),
        "--top",
        "10",
    ]));
    println!("{text}");
    let totals = section(&text, "Top functions by total");
    let (three, _, three_n) = function_row(&totals, "hot_three");
    let (one, _, one_n) = function_row(&totals, "hot_one");
    eprintln!("report: hot_three {three}% ({three_n}), hot_one {one}% ({one_n})");
    assert!(
        three_n + one_n >= 4000,
        "3 s at 1999 Hz: {three_n} + {one_n} samples"
    );
    assert!(
        (three - 75.0).abs() <= 2.0,
        "hot_three {three}% of the thread's CPU, the workload spent 75%"
    );
    assert!(
        (one - 25.0).abs() <= 2.0,
        "hot_one {one}% of the thread's CPU, the workload spent 25%"
    );

    // The same counts, from this crate's reading of the profile.
    let cats = profile.categories();
    let t = profile.thread(pid, tid).expect("the splitter thread");
    let on_cpu = t.on_cpu_stacks(&cats);
    let holding = |f: &str| {
        on_cpu
            .iter()
            .filter(|s| s.iter().any(|(n, _)| n == f))
            .count() as u64
    };
    assert_eq!(three_n, holding("hot_three"), "samples under hot_three");
    assert_eq!(one_n, holding("hot_one"), "samples under hot_one");
    let header = text.lines().next().unwrap();
    assert!(
        header.contains(&format!("{} CPU samples", on_cpu.len())),
        "the header counts the thread's samples: {header}"
    );

    let folded = stdout(&report(&[
        path.to_str().unwrap(),
        "--tid",
        &tid.to_string(),
        "--format",
        "folded",
    ]));
    let mut folded_three = 0;
    let mut folded_all = 0;
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("`stack count` lines");
        let n: u64 = n.parse().unwrap();
        assert!(
            stack.starts_with("split;"),
            "the process name comes first: {line}"
        );
        folded_all += n;
        if stack.split(';').any(|f| f == "hot_three") {
            folded_three += n;
        }
    }
    assert_eq!(folded_three, three_n, "folded stacks under hot_three");
    assert_eq!(
        folded_all,
        on_cpu.len() as u64,
        "every CPU sample of the thread is folded"
    );
}

/// Check the off-CPU table against a thread that sleeps 40 × 25 ms (its own
/// CLOCK_MONOTONIC sum), and that every sleep appears among the wakers and
/// in the thread's run-queue delay histogram.
#[test]
fn report_shows_off_cpu_time_by_reason_and_wakers() {
    if !can_record("report_shows_off_cpu_time_by_reason_and_wakers") {
        return;
    }
    let dir = scratch("look-sleeper");
    let exe = build_c("sleeper", &dir.join("sleeper"), &[]);
    let path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "40"], &path);
    assert_success(&out);
    let tid = field(&out.stdout, "tid").unwrap();
    let slept_ms = field(&out.stdout, "slept_ns").unwrap() as f64 / 1e6;
    let text = stdout(&report(&[path.to_str().unwrap()]));
    println!("{text}");
    let rows = section(&text, "Off-CPU time by reason");
    let row = rows
        .iter()
        .find(|l| l.contains(&format!(" tid {tid}:")))
        .unwrap_or_else(|| panic!("no row for tid {tid}:\n{text}"));
    let sleeping: f64 = row
        .split(": ")
        .nth(1)
        .and_then(|r| r.split(", ").find_map(|p| p.strip_prefix("sleeping ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sleeping time in {row}"));
    eprintln!("report: sleeping {sleeping:.1} ms, the workload slept {slept_ms:.1} ms");
    assert!(
        (sleeping - slept_ms).abs() <= slept_ms * 0.05,
        "sleeping {sleeping:.1} ms vs {slept_ms:.1} ms slept"
    );

    // The sleeper's own wakers (timer interrupts), not the "none seen" row.
    let own = stdout(&report(&[
        path.to_str().unwrap(),
        "--tid",
        &tid.to_string(),
    ]));
    let count = |none_seen: bool| -> u64 {
        section(&own, "Top wakers")
            .iter()
            .skip(1)
            .filter(|l| l.contains("(none seen") == none_seen)
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    };
    let (wakeups, unseen) = (count(false), count(true));
    // Not all 40 are seen: a wakeup, or the switch that ends a wait, in the
    // context of this VM's PID 1 runs no BPF program (CI: 39 of 40; beside
    // a compiler loop 34 and 36, with 0 and 4 sleeps in no row at all: two
    // waits then read as one). An open loss of sysprof's, named for the
    // bounded-at-scale issue; a report that lost its wakers would show none.
    assert!(wakeups >= 30, "the 25 ms sleeps end in wakeups seen with their waker: {wakeups} ({unseen} none seen)\n{own}");
    let histogram = text
        .split("## Run-queue delay")
        .nth(1)
        .expect("a run-queue section");
    let (label, counts) = histogram
        .split_once(&format!(" tid {tid}: "))
        .expect("the sleeper's histogram");
    let _ = label;
    let n: u64 = counts.split_whitespace().next().unwrap().parse().unwrap();
    // A run-queue delay for every wait whose wakeup was seen (a wait whose
    // wakeup was lost, above, has none: its runnable time is unknown; how
    // many may be lost is bounded there, not again here).
    assert!(
        n >= wakeups.min(40),
        "a run-queue delay per sleep woken: {n} delays, {wakeups} wakeups seen"
    );
}

/// Check that the block I/O histogram of a loop device nothing else uses
/// counts exactly the requests the kernel completed on it
/// (`/sys/block/DEV/stat`: reads, writes, flushes, discards).
#[test]
fn report_io_histogram_counts_what_the_disk_completed() {
    if !can_record("report_io_histogram_counts_what_the_disk_completed") {
        return;
    }
    let dir = scratch("look-io");
    let exe = build_c("blkio", &dir.join("blkio"), &[]);
    let disk = LoopDevice::through_page_cache(&dir, 32);
    let path = dir.join("p.json.gz");
    let before = disk.stat();
    let out = record(
        &[
            "-a",
            "--",
            exe.to_str().unwrap(),
            disk.path.to_str().unwrap(),
            "300",
            "25",
            "6",
        ],
        &path,
    );
    assert_success(&out);
    let done = disk.stat().since(&before);
    let text = stdout(&report(&[path.to_str().unwrap()]));
    let title = format!("device {}: ", disk.name);
    let at = text
        .find(&title)
        .unwrap_or_else(|| panic!("no histogram for {}:\n{text}", disk.name));
    let rest = &text[at + title.len()..];
    let requests: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
    let bars: u64 = rest
        .lines()
        .skip(2)
        .take_while(|l| l.contains(" -> "))
        .map(|l| {
            l.split(':')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    let kernel = done.reads + done.writes + done.flushes + done.discards;
    eprintln!(
        "report: {requests} requests on {}, histogram {bars}; sysfs {done:?}",
        disk.name
    );
    assert_eq!(
        done.reads, 600,
        "two threads × 300 reads, nothing else read the device"
    );
    // Every request the device completed, but for those the summary says
    // were seen at one end only (a completion in the context of this VM's
    // PID 1, where no program runs: see LoopDevice::through_page_cache;
    // 10 of 681 beside a busy CPU when the device completed in the disk's
    // interrupt), never silent.
    let stats = stats_line(&out);
    let untracked = stat(&out, "io_untracked");
    assert!(requests <= kernel && requests + untracked >= kernel && untracked <= kernel * 3 / 100 + 4, "the histogram counts every request the device completed, the rest said: {requests} of {kernel}; {stats}");
    assert_eq!(bars, requests, "the rows add up to the count");
}

/// Check a system-wide recording of a command: the summary is at most two
/// lines of at most 200 characters and says how to open the profile; the
/// command's thread that ran opens selected (its main thread only waits
/// for it); sysprof's own threads are in the
/// profile, named as the profiler, and not among the visible ones.
#[test]
fn summary_is_short_and_the_command_opens_first() {
    if !can_record("summary_is_short_and_the_command_opens_first") {
        return;
    }
    let dir = scratch("look-open");
    let exe = build_c("split", &dir.join("split"), &[]);
    let path = dir.join("p.json.gz");
    let child = Command::new(sysprof_bin())
        .args(["record", "-a", "-o"])
        .arg(&path)
        .args(["--", exe.to_str().unwrap(), "1.0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sysprof_pid = child.id() as u64;
    let out = wait_with_timeout(
        child,
        std::time::Duration::from_secs(120),
        "sysprof record -a -- split",
    );
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Warnings about other processes' files (a binary deleted while it
    // ran) are not the summary; on an idle machine there are none. Nor is
    // the advice on other programs' code without symbols (beside a compiler
    // loop: "14.7% of user samples ran in code without symbols: .../cc1"),
    // which must not name the command's own.
    let is_symbols_advice = |l: &str| l.contains("ran in code without symbols");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("sysprof: warning:") && !is_symbols_advice(l))
        .collect();
    for l in stderr.lines().filter(|l| is_symbols_advice(l)) {
        assert!(
            !l.contains(exe.to_str().unwrap()),
            "the command is built with its symbols: {l}"
        );
    }
    eprintln!("summary:\n{stderr}");
    assert!(
        (1..=2).contains(&lines.len()),
        "one line, two when something was lost or cut: {stderr}"
    );
    for l in &lines {
        assert!(
            l.chars().count() <= 200,
            "{} characters: {l}",
            l.chars().count()
        );
    }
    assert!(
        lines[0].contains(&format!("sysprof view {}", path.display())),
        "the summary says how to open it: {}",
        lines[0]
    );

    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&path);
    let threads = profile.threads();
    let meta = &profile.json["meta"];
    let index = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array()
            .expect("a list of thread indexes")
            .iter()
            .map(|i| i.as_u64().unwrap() as usize)
            .collect()
    };
    let selected = index(&meta["initialSelectedThreads"]);
    assert_eq!(selected.len(), 1);
    let t = &threads[selected[0]];
    assert!(
        t.pid() == pid && t.name() == "splitter",
        "the command's thread that ran is selected (its main thread waits in pthread_join), not {} ({})",
        t.name(),
        t.process_name()
    );
    let own: Vec<usize> = (0..threads.len())
        .filter(|&i| threads[i].pid() == sysprof_pid)
        .collect();
    assert!(
        !own.is_empty(),
        "sysprof's own process is kept in the profile"
    );
    assert!(
        own.iter()
            .all(|&i| threads[i].process_name().contains("profiler")),
        "and named as the profiler: {}",
        threads[own[0]].process_name()
    );
    let visible = index(&meta["initialVisibleThreads"]);
    assert!(
        own.iter().all(|i| !visible.contains(i)),
        "sysprof's threads are hidden at first"
    );
    assert!(
        visible
            .iter()
            .any(|&i| threads[i].pid() == pid && threads[i].name() == "splitter"),
        "the command's busy thread is visible"
    );
}

/// Check that the command's exit status is sysprof's, and that a death by a
/// signal is said and gives 128 + the signal, as shells do.
#[test]
fn the_commands_exit_status_is_sysprofs() {
    if !can_record("the_commands_exit_status_is_sysprofs") {
        return;
    }
    let dir = scratch("look-status");
    let run = |script: &str| {
        Command::new(sysprof_bin())
            .args(["record", "-o"])
            .arg(dir.join("p.json.gz"))
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let out = run("exit 3");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.join("p.json.gz").exists(),
        "the profile is written all the same"
    );
    let out = run("kill -TERM $$");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 15), "{stderr}");
    assert!(stderr.contains("SIGTERM"), "the signal is said: {stderr}");
    let out = run("true");
    assert_eq!(out.status.code(), Some(0));
}

/// Check that `record --open` ends in the profile being served (the link
/// printed, a display-less machine said so) until SIGTERM, and that the
/// command's exit status is still sysprof's then.
#[test]
fn record_open_serves_the_profile_until_sigterm() {
    if !can_record("record_open_serves_the_profile_until_sigterm") {
        return;
    }
    use std::io::BufRead;
    let dir = scratch("look-record-open");
    let mut child = Command::new(sysprof_bin())
        .args(["record", "--open", "-o"])
        .arg(dir.join("p.json.gz"))
        .args(["--", "sh", "-c", "exit 3"])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("BROWSER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Read on a thread, waited for with a timeout: a sysprof that never
    // prints the link fails the test instead of hanging it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("https://profiler.firefox.com/from-url/") {
                let _ = tx.send(line);
            }
        }
    });
    let link = rx.recv_timeout(std::time::Duration::from_secs(60));
    if link.is_err() {
        // SAFETY: a plain kill(2) of our own child.
        unsafe { kill(pid, 9) };
    }
    assert!(link.is_ok(), "the link is printed");
    // SAFETY: a plain kill(2) of our own child.
    unsafe { kill(pid, 15) };
    let out = wait_with_timeout(
        child,
        std::time::Duration::from_secs(10),
        "sysprof record --open",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "SIGTERM ends the serving; the command's status stays: {stderr}"
    );
    assert!(stderr.contains("no browser started"), "{stderr}");
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
