//! Unit tests of the report: its histograms, its counts on small
//! hand-made threads, and the golden profile's report.

use std::path::Path;

use super::histogram::Log2Histogram;
use super::read::ThreadRead;
use super::*;
use crate::profile::schema::{
    Category, FrameTable, FuncTable, Meta, ResourceTable, Samples, StackTable,
};

/// Check that the log2 buckets are BCC's: 0-1, 2-3, 4-7, ...
#[test]
fn histogram_buckets_are_powers_of_two() {
    let mut h = Log2Histogram::default();
    for us in [0.0, 1.9, 2.0, 3.0, 4.0, 7.9, 8.0, 1000.0] {
        h.add(us);
    }
    assert_eq!(h.counts[..4], [2, 2, 2, 1]);
    assert_eq!(h.counts[9], 1, "1000 µs is in 512 -> 1023");
    assert_eq!(h.total(), 8);
    let mut text = String::new();
    h.write(&mut text, "usecs");
    assert!(text.contains("512 -> 1023"), "{text}");
    assert_eq!(text.lines().count(), 1 + 10);
}

fn thread(
    stacks: &[(Option<u32>, u32)],
    frames: &[(u32, u32)],
    funcs: &[&str],
    samples: &[u32],
) -> Thread {
    let mut strings: Vec<String> = funcs.iter().map(|s| s.to_string()).collect();
    strings.push("libx.so".into());
    Thread {
        name: "t".into(),
        pid: "7".into(),
        tid: 8,
        process_name: Some("proc".into()),
        stack_table: StackTable {
            prefix: stacks.iter().map(|s| s.0).collect(),
            frame: stacks.iter().map(|s| s.1).collect(),
            ..Default::default()
        },
        frame_table: FrameTable {
            func: frames.iter().map(|f| f.0).collect(),
            category: frames.iter().map(|f| Some(f.1)).collect(),
            ..Default::default()
        },
        func_table: FuncTable {
            name: (0..funcs.len() as u32).collect(),
            resource: vec![0; funcs.len()],
            ..Default::default()
        },
        resource_table: ResourceTable {
            name: vec![funcs.len() as u32],
            ..Default::default()
        },
        samples: Samples {
            stack: samples.iter().map(|&s| Some(s)).collect(),
            ..Default::default()
        },
        string_array: strings,
        ..Default::default()
    }
}

fn meta() -> Meta {
    let cat = |n: &str| Category {
        name: n.into(),
        ..Default::default()
    };
    Meta {
        interval: 1.0,
        profiling_start_time: Some(0.0),
        profiling_end_time: Some(10.0),
        categories: vec![
            cat("Other"),
            cat("Idle"),
            cat("User"),
            cat("Kernel"),
            cat("Off-CPU"),
        ],
        ..Default::default()
    }
}

/// Check self and total on a small tree: main -> a -> a (recursion) and
/// main -> b, with 3 samples in the inner a and 1 in b.
#[test]
fn self_and_total_count_each_function_once_per_sample() {
    // funcs: 0 main, 1 a, 2 b; frames: one per func, user category.
    let t = thread(
        &[(None, 0), (Some(0), 1), (Some(1), 1), (Some(0), 2)],
        &[(0, 2), (1, 2), (2, 2)],
        &["main", "a", "b"],
        &[2, 2, 2, 3],
    );
    let profile = Profile {
        meta: meta(),
        threads: vec![t],
        ..Default::default()
    };
    assert!(profile.threads[0].consistent());
    let filter = Filter {
        pids: vec![],
        tids: vec![],
        comm: None,
    };
    let text = text::report(&profile, &filter, 10, Path::new("p.json"));
    let line = |title: &str, func: &str| -> String {
        let section = text
            .split("## ")
            .find(|s| s.starts_with(title))
            .unwrap_or_else(|| panic!("{text}"));
        section
            .lines()
            .find(|l| l.ends_with(&format!(" {func} [libx.so]")))
            .unwrap_or_else(|| panic!("{func} in {section}"))
            .to_string()
    };
    let columns = |l: String| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    assert_eq!(
        columns(line("Top functions by self", "a")),
        "75.0% 75.0% 3",
        "{text}"
    );
    assert_eq!(
        columns(line("Top functions by total", "main")),
        "100.0% 0.0% 4",
        "{text}"
    );
    assert_eq!(
        columns(line("Top functions by total", "b")),
        "25.0% 25.0% 1",
        "{text}"
    );
    let folded = folded::folded(&profile, &filter);
    assert_eq!(folded, "proc;main;a;a 3\nproc;main;b 1\n");
    let other = Filter {
        pids: vec![9],
        tids: vec![],
        comm: None,
    };
    assert!(text::report(&profile, &other, 10, Path::new("p.json")).contains("no thread matches"));
}

/// Check that an index past its table is refused before anything reads it.
#[test]
fn out_of_range_indexes_are_refused() {
    let t = thread(&[(None, 5)], &[(0, 2)], &["main"], &[0]);
    assert!(!t.consistent());
    let t = thread(&[(Some(0), 0)], &[(0, 2)], &["main"], &[0]);
    assert!(!t.consistent(), "a prefix must point backwards");
    let t = thread(&[(None, 0)], &[(0, 2)], &["main"], &[1]);
    assert!(!t.consistent());
    for bad in [f64::NAN, f64::INFINITY, -1.0, 1e300] {
        let mut t = thread(&[(None, 0)], &[(0, 2)], &["main"], &[0]);
        t.samples.weight = Some(vec![bad]);
        assert!(!t.consistent(), "weight {bad}");
    }
}

/// Check that durations no profile should hold (huge, negative, NaN)
/// land in the histogram's end buckets instead of overflowing.
#[test]
fn absurd_durations_do_not_overflow_the_histogram() {
    let mut h = Log2Histogram::default();
    for us in [1e30, f64::MAX, -5.0, f64::NAN, u64::MAX as f64] {
        h.add(us);
    }
    let mut text = String::new();
    h.write(&mut text, "usecs");
    assert_eq!(h.total(), 5);
    assert!(
        text.contains("4611686018427387904 -> 9223372036854775807"),
        "{text}"
    );
}

/// Check that the report and the folded stacks of the profile writer's
/// golden profile are what they were before the report read through the
/// writer's schema (stored beside it), whole and filtered by a command
/// name that runs in a container (its track shows `nginx [container
/// ...]`). `SYSPROF_BLESS=1` rewrites them.
#[test]
fn the_golden_profile_reports_as_before() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/profile/testdata/");
    let profile = load(&Path::new(dir).join("full_recording.json")).unwrap();
    let all = Filter {
        pids: vec![],
        tids: vec![],
        comm: None,
    };
    let nginx = Filter {
        pids: vec![],
        tids: vec![],
        comm: Some("nginx".into()),
    };
    let text = [
        text::report(&profile, &all, 10, Path::new("golden.json")),
        folded::folded(&profile, &all),
        text::report(&profile, &nginx, 10, Path::new("golden.json")),
        folded::folded(&profile, &nginx),
    ]
    .join("\n----\n");
    let expected = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/profile/testdata/full_recording.report.txt"
    );
    if std::env::var_os("SYSPROF_BLESS").is_some() {
        std::fs::write(expected, &text).unwrap();
        return;
    }
    assert!(
        folded::folded(&profile, &nginx)
            .starts_with("nginx [container abababababab];main;work;helper 1\n"),
        "{text}"
    );
    assert_eq!(text, std::fs::read_to_string(expected).unwrap());
    // What `sysprof report` writes, reading the file a thread at a time, is the same.
    let path = Path::new(dir).join("full_recording.json");
    let streamed = |filter: &Filter, format| report_file(&path, filter, format, 10).unwrap();
    let (text_all, matched) = streamed(&all, crate::cli::ReportFormat::Text);
    assert!(matched);
    assert_eq!(text_all, text::report(&profile, &all, 10, &path));
    assert_eq!(
        streamed(&nginx, crate::cli::ReportFormat::Folded),
        (folded::folded(&profile, &nginx), true)
    );
    let nobody = Filter {
        pids: vec![999_999],
        tids: vec![],
        comm: None,
    };
    assert!(!streamed(&nobody, crate::cli::ReportFormat::Text).1);
    // A profile whose categories stand elsewhere (counted first as
    // sysprof's writer places them, then again by its meta) reads the same.
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let categories = json["meta"]["categories"].as_array_mut().unwrap();
    let n = categories.len() as u64;
    categories.reverse();
    for t in json["threads"].as_array_mut().unwrap() {
        for c in t["frameTable"]["category"].as_array_mut().unwrap() {
            if let Some(i) = c.as_u64() {
                *c = (n - 1 - i).into();
            }
        }
    }
    let moved =
        std::env::temp_dir().join(format!("sysprof-report-moved-{}.json", std::process::id()));
    std::fs::write(&moved, json.to_string()).unwrap();
    let (text_moved, _) = report_file(&moved, &all, crate::cli::ReportFormat::Text, 10).unwrap();
    assert_eq!(text_moved, text::report(&profile, &all, 10, &moved));
    assert_eq!(
        report_file(&moved, &nginx, crate::cli::ReportFormat::Folded, 10).unwrap(),
        (folded::folded(&profile, &nginx), true)
    );
    let _ = std::fs::remove_file(&moved);
}

/// Check that the report reads what the format allows beyond what sysprof
/// writes, as it did before it read through the writer's types: a pid as a
/// number and a tid as a string, null categories and marker payloads, a
/// marker type it does not know, parts it never reads in any shape (libs,
/// paused ranges), and the optional columns missing.
#[test]
fn reads_the_format_leniently() {
    let json = r#"{"meta":{"interval":2,"categories":[{"name":"Other"}]},"libs":[{"x":1}],"threads":[{
        "name":"t","pid":7,"tid":"8","pausedRanges":[{"startTime":1}],"nativeSymbols":{},
        "stackTable":{"prefix":[null],"frame":[0]},"frameTable":{"func":[0],"category":[null]},
        "funcTable":{"name":[0],"resource":[-1]},"resourceTable":{"name":[]},
        "samples":{"stack":[0,null]},
        "markers":{"startTime":[1,2],"endTime":[2,3],"data":[null,{"type":"Mystery","x":[1]}]},
        "stringArray":["main"]}]}"#;
    let profile: Profile = serde_json::from_str(json).unwrap();
    let t = &profile.threads[0];
    assert!(t.consistent());
    assert_eq!(
        (t.pid(), t.tid(), t.process_name()),
        (Some(7), Some(8), "t")
    );
    assert!(matches!(t.markers.data[1], Some(MarkerData::Other)));
    let all = Filter {
        pids: vec![],
        tids: vec![],
        comm: None,
    };
    assert_eq!(folded::folded(&profile, &all), "t;main 1\n");
}

/// Check that `--why` read a track at a time (the file streamed, `meta`
/// after the tracks as sysprof writes it, or before) finds what the whole
/// parse finds: the same waits, the CPUs' slices placed by the interval
/// that only `meta` says, and the samples' leaves with those the
/// categories say were off a CPU left out.
#[test]
fn why_streamed_reads_what_the_whole_parse_reads() {
    use serde_json::json;
    let track = |tid: u32, name: &str, markers: Vec<(f64, f64, serde_json::Value)>| {
        json!({
            "pid": "1", "tid": tid, "name": name, "processName": "p",
            "markers": {
                "data": markers.iter().map(|m| m.2.clone()).collect::<Vec<_>>(),
                "startTime": markers.iter().map(|m| m.0).collect::<Vec<_>>(),
                "endTime": markers.iter().map(|m| m.1).collect::<Vec<_>>(),
            },
            // Samples at 1, 2 and 3 ms: leaves "work" (CPU), "wait"
            // (Off-CPU) and "work" again.
            "samples": { "length": 3, "stack": [0, 1, 0], "time": [1.0, 2.0, 3.0] },
            "stackTable": { "length": 2, "frame": [0, 1], "prefix": [null, null] },
            "frameTable": { "length": 2, "func": [0, 1], "category": [0, 1] },
            "funcTable": { "length": 2, "name": [0, 1] },
            "stringArray": ["work", "wait"],
        })
    };
    let off = |waker: u32| json!({ "type": "OffCpu", "reason": "sleeping", "runDelay": 2.0, "wakerTid": waker, "wakerContext": "task", "cpuIn": 0 });
    let mut cpu = track(
        crate::profile::CPU_TRACK_TID_BASE,
        "CPU 0",
        vec![
            (7.0, 11.0, json!({ "type": "OnCpu", "tid": 3 })),
            (11.0, 13.0, json!({ "type": "OnCpu", "tid": 2 })),
        ],
    );
    cpu["pid"] = crate::profile::MACHINE_PID.into();
    let threads = json!([
        track(1, "client", vec![(0.0, 10.0, off(2))]),
        track(2, "server", vec![(0.0, 5.0, off(3))]),
        track(3, "helper", vec![]),
        cpu,
    ]);
    let meta =
        json!({ "interval": 2.0, "categories": [{ "name": "Other" }, { "name": "Off-CPU" }] });
    let dir = std::env::temp_dir().join(format!("sysprof-why-streamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whole = why::Threads::read(&json!({ "meta": meta, "threads": threads }));
    let expected = why::render_text(
        &whole,
        1,
        &[1],
        &whole.why(&[1], f64::NEG_INFINITY, f64::INFINITY, 5),
        10,
    );
    assert!(expected.contains("holding its CPU"), "{expected}");
    assert_eq!(
        whole.top_leaves(1, &[(0.0, 10.0)], 5),
        vec![("work".to_string(), 2)]
    );
    for (name, text) in [
        (
            "after.json",
            format!("{{\"threads\": {threads}, \"meta\": {meta}}}"),
        ),
        (
            "before.json",
            format!("{{\"meta\": {meta}, \"threads\": {threads}}}"),
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let streamed = why_threads(&path).map_err(|_| name).unwrap();
        let got = why::render_text(
            &streamed,
            1,
            &[1],
            &streamed.why(&[1], f64::NEG_INFINITY, f64::INFINITY, 5),
            10,
        );
        assert_eq!(got, expected, "{name}");
        assert_eq!(
            streamed.top_leaves(1, &[(0.0, 10.0)], 5),
            vec![("work".to_string(), 2)],
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
