//! The agent's exporters against consumers nobody here wrote: Google's
//! `go tool pprof`, the official OpenTelemetry protocol classes (PyPI
//! `opentelemetry-proto` with `grpcio`) in a receiver on loopback, and a
//! Pyroscope ingest API receiver whose profiles `go tool pprof` decodes.
//! Oracles: the split workload's own per-function CPU time, its pid and
//! thread name, the windows the store holds, the agent's RSS over time.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sysprof_tests::*;

const SIGTERM: i32 = 15;

/// `go tool pprof -top` flat sample counts per function, over `files`.
fn pprof_top(
    go: &std::path::Path,
    files: &[std::path::PathBuf],
    extra: &[&str],
) -> HashMap<String, f64> {
    let out = Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodefraction=0",
            "-nodecount=100000",
            "-sample_index=samples",
        ])
        .args(extra)
        .args(files)
        .output()
        .expect("go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = HashMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 6 && f[1].ends_with('%') {
            if let Ok(v) = f[0].parse::<f64>() {
                m.insert(f[5..].join(" "), v);
            }
        }
    }
    m
}

/// Run the split workload for `secs` of CPU; returns (pid, its output).
fn run_split(exe: &std::path::Path, secs: &str) -> (u64, std::process::Output) {
    let out = Command::new(exe).arg(secs).output().unwrap();
    assert!(out.status.success());
    (field(&out.stdout, "pid").unwrap(), out)
}

/// Check that `--pprof-dir` writes one gzip profile.proto per window that
/// `go tool pprof` reads, whose samples of the splitter thread (found by its
/// `thread` label) split 3:1 between the two functions like the workload's
/// own CPU time (±5%), with pid, build-id'd mappings and three sample types.
#[test]
fn pprof_files_read_by_go_tool_pprof_give_the_split() {
    if !can_record("pprof_files_read_by_go_tool_pprof_give_the_split") {
        return;
    }
    let Some(go) = go_tool("pprof_files_read_by_go_tool_pprof_give_the_split") else {
        return;
    };
    let dir = scratch("export-pprof");
    let exe = build_c("split", &dir.join("split"), &[]);
    let store = dir.join("store");
    let pprof_dir = dir.join("pprof");
    let agent = Agent::start(
        &store,
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
    let (_pid, _) = run_split(&exe, "3.0");
    agent.wait_for_window_ending_after(wall_ms() + 200.0, Duration::from_secs(20));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&pprof_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    assert!(files.len() >= 3, "a file per window: {files:?}");
    let top = pprof_top(&go, &files, &["-tagfocus=thread=splitter"]);
    let (three, one) = (
        top.get("hot_three").copied().unwrap_or(0.0),
        top.get("hot_one").copied().unwrap_or(0.0),
    );
    eprintln!(
        "pprof: hot_three {three}, hot_one {one}, ratio {:.2}",
        three / one.max(1.0)
    );
    assert!(three + one >= 1200.0, "3 s at 499 Hz: {three} + {one}");
    assert!(
        (2.85..=3.15).contains(&(three / one)),
        "ratio {:.2} is not 3 ± 5%",
        three / one
    );
    // Every window's file at once (pprof merges them): which windows hold
    // the workload depends on where the window boundaries fell.
    let raw = Command::new(&go)
        .args(["tool", "pprof", "-raw"])
        .args(&files)
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout);
    // `-raw` prints the sample types as one line, the default one tagged
    // `[dflt]`: "samples/count[dflt] cpu/nanoseconds off_cpu/nanoseconds".
    let types: Vec<&str> = raw
        .lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]"))
        .collect();
    assert_eq!(
        types,
        ["samples/count", "cpu/nanoseconds", "off_cpu/nanoseconds"],
        "three sample types: {}",
        &raw[..raw.len().min(400)]
    );
    // Mappings carry build ids: the split binary's is the one its ELF note holds.
    let build_id = String::from_utf8_lossy(
        &Command::new("readelf")
            .args(["-n"])
            .arg(&exe)
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
    .expect("split has a build id");
    let mappings: Vec<&str> = raw
        .lines()
        .skip_while(|l| !l.starts_with("Mappings"))
        .collect();
    assert!(
        mappings
            .iter()
            .any(|l| l.contains(exe.to_str().unwrap()) && l.contains(&build_id)),
        "split's mapping with build id {build_id}: {mappings:?}"
    );
    assert!(
        mappings.iter().any(|l| l.contains("[kernel.kallsyms]")),
        "kernel mapping: {mappings:?}"
    );
}

fn attr_value(v: &Value) -> Value {
    v.get("stringValue")
        .cloned()
        .or_else(|| {
            v.get("intValue").and_then(|i| {
                i.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .map(Value::from)
            })
        })
        .unwrap_or(Value::Null)
}

/// Per request: (window start ms from its profiles, samples of `pid`'s
/// splitter thread in hot_three and hot_one with their timestamps).
struct OtlpSeen {
    window_starts: Vec<u64>,
    three: Vec<u64>,
    one: Vec<u64>,
    thread_names: Vec<String>,
}

fn read_otlp(path: &std::path::Path, pid: u64) -> OtlpSeen {
    let mut seen = OtlpSeen {
        window_starts: Vec::new(),
        three: Vec::new(),
        one: Vec::new(),
        thread_names: Vec::new(),
    };
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let req: Value = serde_json::from_str(line).unwrap();
        let d = &req["dictionary"];
        let strings: Vec<&str> = d["stringTable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let idx = |v: &Value| v.as_i64().unwrap_or(0) as usize;
        let func_name = |f: usize| strings[idx(&d["functionTable"][f]["nameStrindex"])];
        let stack_funcs = |s: usize| -> Vec<&str> {
            d["stackTable"][s]["locationIndices"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .flat_map(|l| {
                            d["locationTable"][idx(l)]["lines"]
                                .as_array()
                                .cloned()
                                .unwrap_or_default()
                        })
                        .map(|ln| func_name(idx(&ln["functionIndex"])))
                        .collect()
                })
                .unwrap_or_default()
        };
        let attr = |i: usize| {
            let a = &d["attributeTable"][i];
            (
                strings[idx(&a["keyStrindex"])].to_string(),
                attr_value(&a["value"]),
            )
        };
        let mut starts = Vec::new();
        for rp in req["resourceProfiles"].as_array().unwrap() {
            let attrs: HashMap<String, Value> = rp["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap().to_string(),
                        attr_value(&kv["value"]),
                    )
                })
                .collect();
            for sp in rp["scopeProfiles"].as_array().unwrap() {
                for p in sp["profiles"].as_array().unwrap() {
                    starts.push(
                        p["timeUnixNano"].as_str().unwrap().parse::<u64>().unwrap() / 1_000_000,
                    );
                    if attrs.get("process.pid") != Some(&Value::from(pid as i64))
                        || strings[idx(&p["sampleType"]["typeStrindex"])] != "samples"
                    {
                        continue;
                    }
                    for s in p["samples"].as_array().unwrap() {
                        let funcs = stack_funcs(idx(&s["stackIndex"]));
                        let ts: Vec<u64> = s["timestampsUnixNano"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|t| t.as_str().unwrap().parse().unwrap())
                                    .collect()
                            })
                            .unwrap_or_default();
                        for a in s["attributeIndices"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                        {
                            let (k, v) = attr(idx(&a));
                            if k == "thread.name" {
                                seen.thread_names.push(v.as_str().unwrap_or("").to_string());
                            }
                        }
                        if funcs.contains(&"hot_three") {
                            seen.three.extend(ts);
                        } else if funcs.contains(&"hot_one") {
                            seen.one.extend(ts);
                        }
                    }
                }
            }
        }
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), 1, "one window per request: {starts:?}");
        seen.window_starts.push(starts[0]);
    }
    seen
}

/// Check that OTLP requests, decoded by the official generated classes in a
/// receiver on loopback, carry the workload's process (by pid), thread name,
/// stacks through both hot functions in its 3:1 split (±5%), and every
/// sample's timestamp inside the workload's run.
#[test]
fn otlp_requests_decode_with_the_official_classes() {
    if !can_record("otlp_requests_decode_with_the_official_classes") {
        return;
    }
    let Some(python) = otel_python("otlp_requests_decode_with_the_official_classes") else {
        return;
    };
    let dir = scratch("export-otlp");
    let exe = build_c("split", &dir.join("split"), &[]);
    let port = free_port();
    let out = dir.join("otlp.jsonl");
    let _receiver = Receiver::start(
        &python,
        "otlp_receiver.py",
        &[&port.to_string(), out.to_str().unwrap()],
    );
    let store = dir.join("store");
    let endpoint = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        &store,
        &[
            "--window",
            "1",
            "-F",
            "499",
            "--health-interval",
            "3600",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-header",
            "x-tenant=test",
        ],
        &[],
    );
    let t0 = (wall_ms() * 1e6) as u64;
    let (pid, _) = run_split(&exe, "3.0");
    let t1 = (wall_ms() * 1e6) as u64;
    agent.wait_for_window_ending_after(wall_ms() + 200.0, Duration::from_secs(20));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let seen = read_otlp(&out, pid);
    let (three, one) = (seen.three.len() as f64, seen.one.len() as f64);
    eprintln!(
        "otlp: {} requests; hot_three {three}, hot_one {one}, ratio {:.2}",
        seen.window_starts.len(),
        three / one.max(1.0)
    );
    assert!(three + one >= 1200.0, "3 s at 499 Hz: {three} + {one}");
    assert!(
        (2.85..=3.15).contains(&(three / one)),
        "ratio {:.2} is not 3 ± 5%",
        three / one
    );
    assert!(
        seen.thread_names.iter().any(|n| n == "splitter"),
        "thread.name: {:?}",
        seen.thread_names
    );
    for &t in seen.three.iter().chain(&seen.one) {
        assert!(
            t >= t0 && t <= t1,
            "a sample at {t} outside the workload's run [{t0}, {t1}]"
        );
    }
}

/// Check that with the backend down at start and again for a while, every
/// window the store holds arrives exactly once when it is back.
#[test]
fn otlp_backend_down_then_back_gets_every_window_once() {
    if !can_record("otlp_backend_down_then_back_gets_every_window_once") {
        return;
    }
    let Some(python) = otel_python("otlp_backend_down_then_back_gets_every_window_once") else {
        return;
    };
    let dir = scratch("export-otlp-outage");
    let port = free_port();
    let out = dir.join("otlp.jsonl");
    let store = dir.join("store");
    let endpoint = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        &store,
        &[
            "--window",
            "1",
            "--health-interval",
            "3600",
            "--otlp-endpoint",
            &endpoint,
        ],
        &[],
    );
    std::thread::sleep(Duration::from_secs(4));
    let receiver = Receiver::start(
        &python,
        "otlp_receiver.py",
        &[&port.to_string(), out.to_str().unwrap()],
    );
    std::thread::sleep(Duration::from_secs(5));
    drop(receiver);
    std::thread::sleep(Duration::from_secs(5));
    let _receiver = Receiver::start(
        &python,
        "otlp_receiver.py",
        &[&port.to_string(), out.to_str().unwrap()],
    );
    std::thread::sleep(Duration::from_secs(10));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let mut stored: Vec<u64> = store_segments(&store).iter().map(|s| s.1 as u64).collect();
    stored.sort_unstable();
    let mut got = read_otlp(&out, 0).window_starts;
    got.sort_unstable();
    let mut dedup = got.clone();
    dedup.dedup();
    eprintln!(
        "outage: {} windows stored, {} requests received ({} distinct); {}",
        stored.len(),
        got.len(),
        dedup.len(),
        stderr.lines().last().unwrap_or("")
    );
    assert_eq!(got.len(), dedup.len(), "a window arrived twice: {got:?}");
    // The same start, to the ms: the store names a segment by its start
    // cut to whole ms, OTLP carries it in ns through an f64 (1.8e18 ns has
    // 256 ns steps), so a start of x.9999 ms may read as x+1.
    let same =
        dedup.len() == stored.len() && dedup.iter().zip(&stored).all(|(a, b)| a.abs_diff(*b) <= 1);
    assert!(
        same,
        "every stored window arrives once:\n  got    {dedup:?}\n  stored {stored:?}"
    );
    let last = stderr.lines().last().unwrap_or("");
    let failed: u64 = last
        .split("otlp: ")
        .nth(1)
        .and_then(|r| r.split(" failed").next())
        .and_then(|r| r.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        failed >= 1,
        "the failed attempts are counted in the health line: {last}"
    );
}

/// Check that a backend that accepts and never answers costs the agent no
/// memory: its anonymous memory grows no more than that of a control agent
/// with no exporter, beside it on the same machine, over the same time,
/// while windows pile up to be sent; and the store keeps every window.
///
/// Memory is read every second and the medians of the first and last
/// fifteen seconds compared, per agent. What else moves an agent's memory
/// moves both: the symbolizer holds parsed debug files while new addresses
/// keep coming and frees them after idle windows (a swing of 10-30 MB over
/// tens of seconds; beside a compiler loop a lone agent went 48.7 -> 65.4 MB
/// with no window kept), and the allocator keeps some freed pages. Peaks
/// caught those swings at different moments in the two agents: beside a
/// compiler loop the hung one's peak rose 52.3 -> 69.4 MB and its
/// control's fell 63.6 -> 62.6, where over 120 s, read every 5 s, both rose
/// alike (41.8 -> 53.9 and 37.7 -> 49.9 MB). The median of a phase is its
/// level, not its highest swing. Windows held
/// in memory would be the hung agent's alone. Beside both a process naps
/// 20 µs at a time (~20,000 waits a second at a fifth of a CPU) and every
/// wait is kept (`--off-cpu-threshold 0`), so that a window weighs over a
/// megabyte: an agent that kept all 40 windows in memory grew 47 -> 90 MB,
/// over 20 MB more than its control; 12 MB more is allowed.
#[test]
fn a_hung_backend_does_not_grow_memory() {
    if !can_record("a_hung_backend_does_not_grow_memory") {
        return;
    }
    let Some(python) = otel_python("a_hung_backend_does_not_grow_memory") else {
        return;
    };
    let dir = scratch("export-hung");
    let port = free_port();
    let _hung = Receiver::start(
        &python,
        "otlp_receiver.py",
        &[&port.to_string(), "/dev/null", "--hang"],
    );
    let store = dir.join("store");
    let endpoint = format!("http://127.0.0.1:{port}");
    let metrics = free_port();
    let naps = build_c("naps", &dir.join("naps"), &[]);
    let _load = Background::start(&naps, &["20"]);
    let common = [
        "--window",
        "1",
        "-F",
        "99",
        "--off-cpu-threshold",
        "0",
        "--health-interval",
        "3600",
    ];
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let mut args = common.to_vec();
    args.extend(["--otlp-endpoint", &endpoint, "--metrics", &metrics_addr]);
    let agent = Agent::start(&store, &args, &[]);
    let control = Agent::start(&dir.join("control-store"), &common, &[]);
    let pids = [agent.pid(), control.pid()];
    let medians_over = |secs: u64| {
        let mut readings: [Vec<u64>; 2] = Default::default();
        for _ in 0..secs {
            std::thread::sleep(Duration::from_secs(1));
            for (r, pid) in readings.iter_mut().zip(pids) {
                r.push(anon_rss_kib(pid));
            }
        }
        readings.map(|mut r| {
            r.sort_unstable();
            r[r.len() / 2]
        })
    };
    let early = medians_over(15);
    std::thread::sleep(Duration::from_secs(12));
    let late = medians_over(15);
    let scrape = |_: ()| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
        std::io::Write::write_all(&mut s, b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut s, &mut text).unwrap();
        text
    };
    let text = scrape(());
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let backlog = value("sysprof_export_backlog_windows{exporter=\"otlp\"}");
    let stored = value("sysprof_windows_stored_total");
    let growth = |i: usize| late[i] as i64 - early[i] as i64;
    eprintln!(
        "hung backend: anonymous RSS median {} -> {} KiB (0-15 s, 27-42 s), control {} -> {} KiB; backlog {backlog} windows; {stored} stored",
        early[0], late[0], early[1], late[1]
    );
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "exit after a hung backend: {stderr}");
    let (status, stderr) = control.stop_with(SIGTERM);
    assert!(status.success(), "the control agent: {stderr}");
    assert!(stored >= 35.0, "windows go on being stored: {stored}");
    assert!(
        backlog >= 25.0,
        "the windows wait in the store: backlog {backlog}"
    );
    assert!(
        growth(0) <= growth(1) + 12 * 1024,
        "with a hung backend the anonymous RSS grew {} KiB (medians), the control's {} KiB",
        growth(0),
        growth(1)
    );
}

/// Check that Pyroscope's ingest API gets one named series per process with
/// its labels (service_name, pid, comm, hostname) and the tenant header,
/// and that the pprof of the workload's series decodes with `go tool pprof`
/// and holds its hot functions.
#[test]
fn pyroscope_ingest_gets_named_series_that_pprof_decodes() {
    if !can_record("pyroscope_ingest_gets_named_series_that_pprof_decodes") {
        return;
    }
    let Some(go) = go_tool("pyroscope_ingest_gets_named_series_that_pprof_decodes") else {
        return;
    };
    let dir = scratch("export-pyroscope");
    let exe = build_c("split", &dir.join("split"), &[]);
    let port = free_port();
    let got = dir.join("got");
    let _receiver = Receiver::start(
        std::path::Path::new("python3"),
        "pyroscope_receiver.py",
        &[&port.to_string(), got.to_str().unwrap()],
    );
    let store = dir.join("store");
    let url = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        &store,
        &[
            "--window",
            "1",
            "-F",
            "199",
            "--health-interval",
            "3600",
            "--pyroscope-url",
            &url,
            "--pyroscope-tenant",
            "team-a",
        ],
        &[],
    );
    let (pid, _) = run_split(&exe, "2.0");
    agent.wait_for_window_ending_after(wall_ms() + 200.0, Duration::from_secs(20));
    let (status, stderr) = agent.stop_with(SIGTERM);
    assert!(status.success(), "{stderr}");
    let mut ours = Vec::new();
    for e in std::fs::read_dir(&got).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            let meta: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let name = meta["query"]["name"][0].as_str().unwrap().to_string();
            assert_eq!(meta["path"], "/ingest");
            assert_eq!(meta["query"]["format"][0], "pprof");
            assert_eq!(
                meta["headers"]["x-scope-orgid"], "team-a",
                "the tenant header"
            );
            assert!(
                name.contains(".cpu{service_name=")
                    && name.contains(",pid=")
                    && name.contains(",hostname="),
                "{name}"
            );
            if name.contains(&format!(",pid={pid},")) {
                assert!(
                    name.starts_with("split.cpu{service_name=split,")
                        && name.contains(",comm=split,"),
                    "{name}"
                );
                ours.push(p.with_extension("pb.gz"));
            }
        }
    }
    assert!(!ours.is_empty(), "a series for the workload");
    let top = pprof_top(&go, &ours, &[]);
    eprintln!(
        "pyroscope: {} requests for pid {pid}; hot_three {:?}, hot_one {:?}",
        ours.len(),
        top.get("hot_three"),
        top.get("hot_one")
    );
    assert!(
        top.get("hot_three").copied().unwrap_or(0.0) > top.get("hot_one").copied().unwrap_or(0.0)
            && top.contains_key("hot_one"),
        "{top:?}"
    );
}

/// One scrape of `/metrics` on a new connection, given at most `limit`:
/// the body when the whole answer came in time, else why not; and how long it took.
fn scrape_within(port: u16, limit: Duration) -> (Result<String, String>, Duration) {
    use std::io::{Read, Write};
    let t = std::time::Instant::now();
    let result = (|| {
        let mut s = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), limit)
            .map_err(|e| format!("connect: {e}"))?;
        s.set_read_timeout(Some(limit)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)
            .map_err(|e| format!("read after {} bytes: {e}", raw.len()))?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        match text.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
            _ => Err(format!("no 200 answer: {text:?}")),
        }
    })();
    (result, t.elapsed())
}

/// Check that `--metrics` answers every scrape within 1 s, each with
/// `sysprof_samples_total`, while 100 idle connections stay open (any the
/// agent closes is opened again) and another client sends its request head
/// one byte a second; and that the agent cuts that slow client at its
/// deadline for the whole head (a few seconds), not after each byte.
#[test]
fn metrics_answers_scrapes_beside_idle_and_slow_clients() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    if !can_record("metrics_answers_scrapes_beside_idle_and_slow_clients") {
        return;
    }
    let dir = scratch("export-metrics-flood");
    let port = free_port();
    let agent = Agent::start(
        &dir.join("store"),
        &[
            "--window",
            "1",
            "-F",
            "99",
            "--health-interval",
            "3600",
            "--metrics",
            &format!("127.0.0.1:{port}"),
        ],
        &[],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    // A connection that never sends or receives anything of ours, nonblocking.
    let open = move || {
        let c = std::net::TcpStream::connect(addr).unwrap();
        c.set_nonblocking(true).unwrap();
        c
    };
    // Closed by the agent: a read gives 0 bytes or a reset rather than "would block".
    let closed = |c: &mut std::net::TcpStream| !matches!(c.read(&mut [0u8; 64]), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock);

    // 100 idle connections, each reopened once the agent closes it.
    let idle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conns: Vec<std::net::TcpStream> = (0..100).map(|_| open()).collect();
            let mut reopened = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for c in conns.iter_mut() {
                    if closed(c) {
                        *c = open();
                        reopened += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            reopened
        })
    };
    // A client that sends its head one byte a second, reconnecting when cut;
    // it notes how long each connection lasted.
    let slow = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut lasted = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut s = open();
                let t = std::time::Instant::now();
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: "
                    .iter()
                    .chain(std::iter::repeat(&b'a'))
                {
                    if stop.load(Ordering::Relaxed) {
                        return lasted;
                    }
                    if s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    if closed(&mut s) {
                        break;
                    }
                }
                lasted.push(t.elapsed());
            }
            lasted
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let mut scrapes = Vec::new();
    for _ in 0..5 {
        scrapes.push(scrape_within(port, Duration::from_secs(1)));
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    let reopened = idle.join().unwrap();
    let lasted = slow.join().unwrap();
    let (status, stderr) = agent.stop_with(SIGTERM);
    let summary: Vec<String> = scrapes
        .iter()
        .map(|(r, t)| {
            format!(
                "{} in {:.3} s",
                if r.is_ok() { "ok" } else { "FAILED" },
                t.as_secs_f64()
            )
        })
        .collect();
    eprintln!("metrics beside 100 idle connections ({reopened} reopened after the agent closed them) and a byte-a-second client (cut after {lasted:?}): {}", summary.join(", "));
    assert!(status.success(), "{stderr}");
    for (result, took) in &scrapes {
        let body = result
            .as_ref()
            .unwrap_or_else(|e| panic!("a scrape failed after {took:?}: {e}; all: {summary:?}"));
        assert!(*took < Duration::from_secs(1), "a scrape took {took:?}");
        assert!(
            body.lines()
                .any(|l| l.starts_with("sysprof_samples_total ")),
            "no sysprof_samples_total: {body}"
        );
    }
    assert!(!lasted.is_empty(), "the byte-a-second client was never cut");
    assert!(
        lasted.iter().all(|d| *d < Duration::from_secs(5)),
        "the byte-a-second client lasted {lasted:?}"
    );
}

/// A Pyroscope endpoint that answers every request 429 with a
/// `Content-Length` of 1 GiB and sends zeros until the client hangs up;
/// the bytes it managed to send, per connection, are kept.
fn start_huge_429_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u64>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = sent.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let record = record.clone();
            std::thread::spawn(move || {
                let mut conn = conn;
                let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
                // The request: read what comes within half a second.
                let mut buf = [0u8; 64 << 10];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                let head = b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\nContent-Length: 1073741824\r\n\r\nslow down\x1b[2J";
                let mut total = 0u64;
                if conn.write_all(head).is_ok() {
                    let zeros = vec![b'z'; 1 << 20];
                    while total < 1 << 30 {
                        match conn.write(&zeros) {
                            Ok(n) if n > 0 => total += n as u64,
                            _ => break,
                        }
                    }
                }
                record.lock().unwrap().push(total);
            });
        }
    });
    (port, sent)
}

/// Check that an exporter reads only the head of an error answer, whatever
/// length it claims: against an endpoint answering 429 with a 1-GiB body,
/// the agent's peak resident set (VmHWM) stays within 64 MB of a control
/// agent's without exporters (it reached 2.14 GB when the body was read
/// whole), the server gets to send little of its gigabyte, the windows go
/// on being stored, and the warning holds no escape sequence.
#[test]
fn a_huge_error_answer_does_not_grow_the_agent() {
    if !can_record("a_huge_error_answer_does_not_grow_the_agent") {
        return;
    }
    let dir = scratch("export-huge-429");
    let (port, sent) = start_huge_429_server();
    let url = format!("http://127.0.0.1:{port}");
    let common = ["--window", "1", "-F", "99", "--health-interval", "3600"];
    let mut args = common.to_vec();
    args.extend(["--pyroscope-url", &url]);
    let agent = Agent::start(&dir.join("store"), &args, &[]);
    let control = Agent::start(&dir.join("control-store"), &common, &[]);
    let started = wall_ms();
    // The retries back off: 12 s gives several answers.
    std::thread::sleep(Duration::from_secs(12));
    let hwm = |pid: u32| vm_hwm_kib(pid).unwrap_or(0);
    let (peak, control_peak) = (hwm(agent.pid()), hwm(control.pid()));
    let stored = store_segments(&dir.join("store"))
        .iter()
        .filter(|s| s.2 >= started)
        .count();
    let (status, stderr) = agent.stop_with(SIGTERM);
    let (control_status, control_stderr) = control.stop_with(SIGTERM);
    let answers = sent.lock().unwrap().clone();
    eprintln!(
        "huge 429: agent peak {peak} KiB, control {control_peak} KiB; {} answers, bytes sent each {answers:?}; {stored} windows stored",
        answers.len()
    );
    assert!(
        status.success() && control_status.success(),
        "agent ({status}): {stderr}\ncontrol agent ({control_status}): {control_stderr}"
    );
    assert!(!answers.is_empty(), "the agent never asked the endpoint");
    assert!(
        stderr.contains("429") && !stderr.contains('\x1b'),
        "the warning says what came back, escaped: {stderr}"
    );
    assert!(
        answers.iter().all(|&b| b < 64 << 20),
        "an answer read far past its head: {answers:?}"
    );
    assert!(
        peak <= control_peak + 64 * 1024,
        "peak {peak} KiB against the control's {control_peak} KiB"
    );
    assert!(stored >= 8, "windows go on being stored: {stored}");
}

/// The kernel memory of `pid`'s BPF maps as the kernel counts it (each map
/// once by id, its `memlock` in `/proc/PID/fdinfo`), and how many maps.
fn maps_memlock(pid: u32) -> (u64, usize) {
    let maps = kernel_maps(pid);
    (maps.iter().map(|m| m.2).sum(), maps.len())
}

/// Check that the agent says the kernel memory its BPF maps hold (what its
/// cgroup pays and RSS does not show) in `/metrics` and on its health line,
/// equal to what the kernel counts for its maps (read here from its fds),
/// and that it is most of what the agent costs.
#[test]
fn the_agent_says_its_bpf_maps_kernel_memory() {
    if !can_record("the_agent_says_its_bpf_maps_kernel_memory") {
        return;
    }
    let dir = scratch("export-map-memory");
    let port = free_port();
    let agent = Agent::start(
        &dir.join("store"),
        &[
            "--window",
            "1",
            "--health-interval",
            "1",
            "--metrics",
            &format!("127.0.0.1:{port}"),
        ],
        &[],
    );
    std::thread::sleep(Duration::from_secs(3));
    let before = maps_memlock(agent.pid());
    let (body, _) = scrape_within(port, Duration::from_secs(2));
    let after = maps_memlock(agent.pid());
    let body = body.expect("a scrape");
    let value = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {body}"))
    };
    let (said, maps) = (
        value("sysprof_agent_bpf_map_bytes"),
        value("sysprof_agent_bpf_maps"),
    );
    let rss = value("sysprof_agent_resident_bytes");
    std::thread::sleep(Duration::from_millis(1500));
    let (status, stderr) = agent.stop_with(SIGTERM);
    eprintln!(
        "agent BPF maps: said {said} bytes in {maps} maps; the kernel's memlock {before:?} before and {after:?} after the scrape; RSS {rss}"
    );
    assert!(status.success(), "{stderr}");
    // Maps allocated per entry (the shared stacks, Python processes) can
    // change between the reads: the metric lies between them, within 1 %.
    let (lo, hi) = (before.0.min(after.0) as f64, before.0.max(after.0) as f64);
    assert!(
        said >= lo * 0.99 && said <= hi * 1.01,
        "said {said}, the kernel's {lo}..{hi}"
    );
    assert!(
        maps as usize >= before.1.min(after.1) && maps as usize <= before.1.max(after.1),
        "{maps} maps said, {} / {} counted",
        before.1,
        after.1
    );
    assert!(said > 1e6, "the agent's maps hold megabytes: {said}");
    assert!(
        stderr.lines().any(|l| l.contains("; BPF maps ")),
        "the health line says it: {stderr}"
    );
}
