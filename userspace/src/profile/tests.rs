//! Unit tests of the writer on a small hand-made recording.

use super::*;
use crate::model::recording::*;
use crate::model::stack_tree::{StackTree, NO_PARENT};
use crate::model::symbols::{AddrInfo, FuncAtAddr};

fn func(name: &str, line: u32) -> FuncAtAddr {
    FuncAtAddr {
        name: name.into(),
        file: Some("/src/app.c".into()),
        line: Some(line),
        start_line: None,
    }
}

/// Two processes, an inlined call, a kernel frame, an unresolved frame.
fn recording() -> Recording {
    let libs = vec![
        LibRecord {
            path: "/usr/bin/app".into(),
            name: "app".into(),
            build_id: Some((1..=20).collect()),
        },
        LibRecord {
            path: "[kernel.kallsyms]".into(),
            name: "[kernel.kallsyms]".into(),
            build_id: None,
        },
    ];
    let frames = vec![
        // 0: main
        FrameRecord {
            lib: 0,
            address: 0x1100,
            kind: FrameKind::Native,
            symbols: AddrInfo {
                symbol_start: 0x1100,
                symbol_offset: 0,
                symbol_size: Some(0x40),
                funcs: vec![func("main", 10)],
            },
        },
        // 1: work with helper inlined into it
        FrameRecord {
            lib: 0,
            address: 0x1210,
            kind: FrameKind::Native,
            symbols: AddrInfo {
                symbol_start: 0x1200,
                symbol_offset: 0x10,
                symbol_size: None,
                funcs: vec![func("work", 20), func("helper", 5)],
            },
        },
        // 2: kernel
        FrameRecord {
            lib: 1,
            address: 0x5000,
            kind: FrameKind::Kernel,
            symbols: AddrInfo {
                symbol_start: 0,
                symbol_offset: 8,
                symbol_size: None,
                funcs: vec![FuncAtAddr {
                    name: "do_syscall_64".into(),
                    file: None,
                    line: None,
                    start_line: None,
                }],
            },
        },
        // 3: unresolved
        FrameRecord {
            lib: NO_LIB,
            address: 0xdead,
            kind: FrameKind::Native,
            symbols: AddrInfo::default(),
        },
    ];
    let mut stacks = StackTree::new();
    let main = stacks.child(NO_PARENT, 0);
    let work = stacks.child(main, 1);
    let sys = stacks.child(work, 2);
    let lost = stacks.child(NO_PARENT, 3);
    let samples = ThreadSamples {
        time_ns: vec![1_000_000, 2_000_000, 3_000_000],
        stack: vec![work, sys, work],
        cpu_delta_ns: vec![0, 1_000_000, 2_500],
        cpu: vec![0; 3],
    };
    let thread = |tid: u32, name: &str, samples: ThreadSamples| ThreadRecord {
        tid,
        name: name.into(),
        start_ns: None,
        end_ns: None,
        samples,
        off_cpu: Default::default(),
        markers: Vec::new(),
        switches: None,
    };
    Recording {
        start_ns: 500_000,
        start_wall_ms: 1_700_000_000_000.0,
        end_ns: 4_000_000,
        interval_ms: 1.0,
        processes: vec![
            ProcessRecord {
                folded: 0,
                pid: 0,
                name: "swapper".into(),
                exe: None,
                cmdline: String::new(),
                start_ns: None,
                end_ns: None,
                cgroup: None,
                profiler: false,
                threads: vec![thread(
                    0,
                    "swapper/0",
                    ThreadSamples {
                        time_ns: vec![1_500_000],
                        stack: vec![sys],
                        cpu_delta_ns: vec![0],
                        cpu: vec![0; 1],
                    },
                )],
            },
            ProcessRecord {
                folded: 0,
                pid: 42,
                name: "app".into(),
                exe: Some("/usr/bin/app".into()),
                cmdline: "app".into(),
                start_ns: Some(0),
                end_ns: Some(3_500_000),
                cgroup: None,
                profiler: false,
                threads: vec![
                    thread(42, "app", samples),
                    thread(
                        43,
                        "worker",
                        ThreadSamples {
                            time_ns: vec![2_000_000],
                            stack: vec![lost],
                            cpu_delta_ns: vec![7_000],
                            cpu: vec![0; 1],
                        },
                    ),
                ],
            },
        ],
        libs,
        frames,
        stacks,
        stats: RecordingStats::default(),
        warnings: Vec::new(),
        ..Recording::default()
    }
}

fn host() -> HostInfo {
    HostInfo {
        cpu_name: "Test CPU".into(),
        logical_cpus: 2,
        physical_cpus: Some(2),
        main_memory: Some(1 << 30),
        kernel_release: "6.1.0".into(),
        hostname: "h".into(),
        arguments: "sysprof record -a".into(),
        viewers: vec![0],
    }
}

fn stack_names(t: &serde_json::Value, sample: usize) -> Vec<(String, u64, u64)> {
    let s = &t["stringArray"];
    let mut node = t["samples"]["stack"][sample].as_u64();
    let mut out = Vec::new();
    while let Some(n) = node {
        let f = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
        let func = t["frameTable"]["func"][f].as_u64().unwrap() as usize;
        let name = s[t["funcTable"]["name"][func].as_u64().unwrap() as usize]
            .as_str()
            .unwrap()
            .to_string();
        out.push((
            name,
            t["frameTable"]["inlineDepth"][f].as_u64().unwrap(),
            t["frameTable"]["category"][f].as_u64().unwrap(),
        ));
        node = t["stackTable"]["prefix"][n as usize].as_u64();
    }
    out.reverse();
    out
}

/// Check that the written profile is valid and carries the thread, process,
/// timing and meta fields the format requires.
#[test]
fn writes_valid_profile_with_threads_and_meta() {
    let p = build_profile(&recording(), &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    assert_eq!(p["meta"]["preprocessedProfileVersion"], 55);
    assert_eq!(
        p["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"],
        500_000
    );
    assert_eq!(p["meta"]["symbolicated"], true);
    assert_eq!(p["meta"]["sampleUnits"]["threadCPUDelta"], "µs");
    assert_eq!(p["meta"]["logicalCPUs"], 2);
    let threads = p["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 3);
    let app = &threads[1];
    assert_eq!(
        (
            app["pid"].as_str(),
            app["tid"].as_u64(),
            app["name"].as_str()
        ),
        (Some("42"), Some(42), Some("app"))
    );
    assert_eq!(app["isMainThread"], true);
    assert_eq!(threads[2]["isMainThread"], false);
    assert_eq!(threads[2]["processName"], "app");
    assert_eq!(app["processShutdownTime"], 3.0);
    assert_eq!(
        app["samples"]["timeDeltas"],
        serde_json::json!([0.5, 1.0, 1.0])
    );
    assert_eq!(
        validate::sample_times(&app["samples"]),
        Some(vec![0.5, 1.5, 2.5])
    );
    assert_eq!(
        app["samples"]["threadCPUDelta"],
        serde_json::json!([0, 1000, 2])
    );
}

/// Check that a profile says "main process ended" (the front end's words
/// for `meta.endTime`) only where the recording stopped because its command
/// (or every `-p` process) ended, at the recording's end; not where a
/// duration or a signal ended it, nor for `-a`, which has no main process.
#[test]
fn only_a_recording_its_command_ended_says_when_the_main_process_ended() {
    let mut rec = recording();
    rec.main_process_ended = true;
    let ended = build_profile(&rec, &host(), None).to_value();
    // The recording's end, from its start in wall-clock time.
    let end = rec.start_wall_ms + (rec.end_ns - rec.start_ns) as f64 / 1e6;
    assert!(
        (ended["meta"]["endTime"].as_f64().expect("endTime") - end).abs() < 1e-3,
        "{}",
        ended["meta"]
    );
    rec.main_process_ended = false;
    let stopped = build_profile(&rec, &host(), None).to_value();
    assert!(
        stopped["meta"].get("endTime").is_none(),
        "{}",
        stopped["meta"]
    );
    assert_eq!(
        stopped["meta"]["profilingEndTime"],
        ended["meta"]["profilingEndTime"]
    );
    assert_eq!(validate::validate(&stopped), Vec::<String>::new());
}

/// Check that an inlined call becomes a second frame at the same address
/// with inlineDepth 1, that funcs are shared across frames of one symbol,
/// and categories follow user/kernel/idle.
#[test]
fn inlined_functions_get_their_own_frames_and_funcs() {
    let p = build_profile(&recording(), &host(), None).to_value();
    let app = &p["threads"][1];
    assert_eq!(
        stack_names(app, 1),
        vec![
            ("main".into(), 0, category::USER as u64),
            ("work".into(), 0, category::USER as u64),
            ("helper".into(), 1, category::USER as u64),
            ("do_syscall_64".into(), 0, category::KERNEL as u64),
        ]
    );
    let frames = &app["frameTable"];
    let (work, helper) = (1usize, 2usize);
    assert_eq!(
        frames["address"][work], frames["address"][helper],
        "same address, two depths"
    );
    assert_eq!(
        frames["nativeSymbol"][work], frames["nativeSymbol"][helper],
        "one native symbol for both"
    );
    assert_eq!(
        app["funcTable"]["length"], 4,
        "main, work, helper, do_syscall_64 once each"
    );
    let idle = &p["threads"][0];
    assert!(stack_names(idle, 0)
        .iter()
        .all(|(_, _, c)| *c == category::IDLE as u64));
}

/// Check that Python functions are told apart by file and first line (two
/// `main`s of two files, a getter and a setter of one name are four funcs,
/// each with its first line), while a native function whose addresses'
/// lines lie in two files stays one func.
#[test]
fn interpreted_functions_are_keyed_by_file_and_first_line() {
    let py = |name: &str, file: &str, start: u32, line: u32| FrameRecord {
        lib: NO_LIB,
        address: 0,
        kind: FrameKind::Python,
        symbols: AddrInfo {
            funcs: vec![FuncAtAddr {
                name: name.into(),
                file: Some(file.into()),
                line: Some(line),
                start_line: Some(start),
            }],
            ..AddrInfo::default()
        },
    };
    let native = |file: &str, address: u64| FrameRecord {
        lib: 0,
        address,
        kind: FrameKind::Native,
        symbols: AddrInfo {
            symbol_start: 0x1000,
            symbol_offset: address - 0x1000,
            symbol_size: None,
            funcs: vec![FuncAtAddr {
                name: "native".into(),
                file: Some(file.into()),
                line: Some(1),
                start_line: None,
            }],
        },
    };
    let mut rec = recording();
    let base = rec.frames.len() as u64;
    rec.frames.extend([
        py("main", "/a.py", 3, 4),
        py("main", "/b.py", 3, 5),
        py("Box.v", "/a.py", 9, 11),
        py("Box.v", "/a.py", 16, 18),
        py("main", "/a.py", 3, 6),
        native("/x.c", 0x1004),
        native("/x.h", 0x1008),
    ]);
    let mut stacks = Vec::new();
    for i in 0..7 {
        stacks.push(rec.stacks.child(NO_PARENT, base + i));
    }
    let n = stacks.len();
    rec.processes[1].threads[0].samples = ThreadSamples {
        time_ns: (1..=n as u64).map(|i| i * 100_000).collect(),
        stack: stacks,
        cpu_delta_ns: vec![0; n],
        cpu: vec![0; n],
    };
    let p = build_profile(&rec, &host(), None).to_value();
    let app = &p["threads"][1];
    let (funcs, strings) = (&app["funcTable"], app["stringArray"].as_array().unwrap());
    let mut found: Vec<(String, String, Option<u64>)> = (0..funcs["length"].as_u64().unwrap()
        as usize)
        .map(|i| {
            let file = funcs["fileName"][i]
                .as_u64()
                .map(|s| strings[s as usize].as_str().unwrap().to_string())
                .unwrap_or_default();
            (
                strings[funcs["name"][i].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string(),
                file,
                funcs["lineNumber"][i].as_u64(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("Box.v".into(), "/a.py".into(), Some(9)),
            ("Box.v".into(), "/a.py".into(), Some(16)),
            ("main".into(), "/a.py".into(), Some(3)),
            ("main".into(), "/b.py".into(), Some(3)),
            ("native".into(), "/x.c".into(), None),
        ]
    );
}

/// Check that an unresolved address in no library keeps a bare hex name,
/// and that samples sharing a stack share the stack table row.
#[test]
fn unresolved_frames_keep_hex_address() {
    let p = build_profile(&recording(), &host(), None).to_value();
    let worker = &p["threads"][2];
    assert_eq!(
        stack_names(worker, 0),
        vec![("0xdead".into(), 0, category::USER as u64)]
    );
    assert_eq!(worker["funcTable"]["resource"][0], -1);
    let app = &p["threads"][1];
    assert_eq!(app["samples"]["stack"][0], app["samples"]["stack"][2]);
}

/// Check the Breakpad id derivation from an ELF build id (GUID byte order, age 0).
#[test]
fn breakpad_id_swaps_guid_fields() {
    let id: Vec<u8> = (1..=20).collect();
    assert_eq!(breakpad_id(Some(&id)), "0403020106050807090A0B0C0D0E0F100");
    assert_eq!(breakpad_id(None), "000000000000000000000000000000000");
    let p = build_profile(&recording(), &host(), None).to_value();
    assert_eq!(
        p["libs"][0]["codeId"],
        "0102030405060708090a0b0c0d0e0f1011121314"
    );
}

/// Check that with off-CPU tracking, on- and off-CPU samples are merged in
/// time order and weighted in ms (interval vs. duration), off-CPU samples
/// carry no CPU delta, and an off-CPU marker carries its fields and the
/// waker's stack as its cause.
#[test]
fn off_cpu_samples_are_weighted_and_markers_carry_fields() {
    let mut rec = recording();
    rec.off_cpu = true;
    let pseudo = rec.frames.len() as u32;
    rec.frames.push(FrameRecord {
        lib: NO_LIB,
        address: 0,
        kind: FrameKind::OffCpu,
        symbols: AddrInfo {
            funcs: vec![FuncAtAddr {
                name: "[off-CPU: sleeping]".into(),
                file: None,
                line: None,
                start_line: None,
            }],
            ..AddrInfo::default()
        },
    });
    let work = rec.processes[1].threads[0].samples.stack[0];
    let sleeping = rec.stacks.child(work, pseudo as u64);
    let t = &mut rec.processes[1].threads[0];
    t.off_cpu = OffCpuSamples {
        time_ns: vec![2_500_000],
        stack: vec![sleeping],
        duration_ns: vec![25_000_000],
    };
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 2_500_000,
        end_ns: 27_500_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: Some(50_000),
        landing_ns: 0,
        waker: Some(Waker {
            pid: 7,
            tid: 8,
            name: crate::model::short_name::short_name("waker"),
            interrupt: None,
        }),
        cpus: (0, 1),
        waker_stack: Some(work),
    });
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let app = &p["threads"][1];
    assert_eq!(app["samples"]["weightType"], "tracing-ms");
    assert_eq!(
        validate::sample_times(&app["samples"]),
        Some(vec![0.5, 1.5, 2.0, 2.5])
    );
    assert_eq!(
        app["samples"]["weight"],
        serde_json::json!([1.0, 1.0, 25.0, 1.0])
    );
    assert_eq!(app["samples"]["threadCPUDelta"][2], 0);
    let names = stack_names(app, 2);
    assert_eq!(
        names.last().unwrap(),
        &(
            "[off-CPU: sleeping]".to_string(),
            0,
            category::OFF_CPU as u64
        )
    );
    let m = &app["markers"];
    assert_eq!(m["length"], 1);
    let data = &m["data"][0];
    assert_eq!(
        (
            data["type"].as_str(),
            marker_text(app, &data["reason"]),
            data["wakerTid"].as_u64()
        ),
        (Some("OffCpu"), Some("sleeping"), Some(8))
    );
    assert_eq!(data["runDelay"], 0.05);
    assert_eq!(m["startTime"][0], 2.0);
    assert_eq!(m["endTime"][0], 27.0);
    let cause = data["cause"]["stack"].as_u64().unwrap() as usize;
    assert!(
        app["stackTable"]["frame"].as_array().unwrap().len() > cause,
        "the cause is a stack of this thread"
    );
    let schema = p["meta"]["markerSchema"].as_array().unwrap();
    assert!(schema.iter().any(|s| s["name"] == "OffCpu"
        && s["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["key"] == "runDelay")));
}

/// Check that a blocked wait with 3.7 ms of run delay is drawn as two
/// markers: the blocking to the wakeup's enqueue (saying the whole wait
/// apart), then "Waiting for a CPU" to the end; that a delay under 0.1 ms
/// and a preemption stay one marker (`report::why`'s tests read a split
/// wait back whole).
#[test]
fn a_long_run_delay_is_drawn_apart_from_the_wait() {
    let mut rec = recording();
    rec.off_cpu = true;
    let waker = Some(Waker {
        pid: 7,
        tid: 8,
        name: crate::model::short_name::short_name("waker"),
        interrupt: None,
    });
    let wait = |start_ns: u64, end_ns: u64, reason, delay_ns: u64| MarkerRecord::OffCpu {
        start_ns,
        end_ns,
        reason,
        run_delay_ns: Some(delay_ns),
        landing_ns: 0,
        waker: waker.clone(),
        cpus: (0, 1),
        waker_stack: None,
    };
    let t = &mut rec.processes[1].threads[0];
    t.markers
        .push(wait(1_500_000, 5_600_000, OffCpuReason::Blocked, 3_700_000));
    t.markers
        .push(wait(6_500_000, 8_500_000, OffCpuReason::Sleeping, 99_999));
    t.markers.push(wait(
        9_500_000,
        12_500_000,
        OffCpuReason::Preempted,
        3_000_000,
    ));
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let app = &p["threads"][1];
    let m = &app["markers"];
    let strings = app["stringArray"].as_array().unwrap();
    let rows: Vec<(String, f64, f64, Option<f64>)> = (0..m["length"].as_u64().unwrap() as usize)
        .map(|i| {
            (
                strings[m["name"][i].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string(),
                m["startTime"][i].as_f64().unwrap(),
                m["endTime"][i].as_f64().unwrap(),
                m["data"][i]["offCpu"].as_f64(),
            )
        })
        .collect();
    // The profile starts 0.5 ms into the recording's clock.
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let expect = [
        ("Off-CPU: blocked (uninterruptible)", 1.0, 1.4, Some(4.1)),
        ("Waiting for a CPU", 1.4, 5.1, None),
        ("Off-CPU: sleeping", 6.0, 8.0, None),
        ("Off-CPU: preempted (runnable)", 9.0, 12.0, None),
    ];
    assert_eq!(rows.len(), expect.len(), "{rows:?}");
    for (row, want) in rows.iter().zip(expect) {
        assert!(
            row.0 == want.0
                && close(row.1, want.1)
                && close(row.2, want.2)
                && match (row.3, want.3) {
                    (Some(a), Some(b)) => close(a, b),
                    (a, b) => a.is_none() && b.is_none(),
                },
            "{row:?} against {want:?}"
        );
    }
    assert_eq!(m["data"][1]["type"], "RunDelay");
    assert_eq!(
        marker_text(app, &m["data"][1]["after"]),
        Some("blocked (uninterruptible)")
    );
    assert_eq!(m["data"][1]["color"], "red");
    assert_eq!(m["data"][1]["cpu"], 1);
    assert_eq!(m["data"][0]["color"], "orange");
    // The columns are made at their size: four records, one drawn apart
    // (five markers: grown one at a time, columns would hold eight).
    let mut tables = super::tables::ThreadTables::default();
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut list = rec.processes[1].threads[0].markers.clone();
    list.push(wait(13_000_000, 14_000_000, OffCpuReason::Sleeping, 0));
    let built =
        super::markers::build_markers(&rec, &list, (None, None, false), &mut tables, false, &ms);
    assert_eq!(built.length, 5);
    assert_eq!(built.data.capacity(), 5);
    assert_eq!(built.name.capacity(), 5);
    assert_eq!(built.start_time.capacity(), 5);
}

/// Check that Java frames carry how they ran as the Java category's
/// subcategory: an interpreted method Interpreted, a compiled frame and the
/// method inlined into it Compiled, a stored frame that did not say Other.
#[test]
fn java_frames_say_interpreted_or_compiled() {
    let mut rec = recording();
    rec.frames[0].kind = FrameKind::JavaInterpreted;
    rec.frames[1].kind = FrameKind::JavaCompiled;
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let java = p["meta"]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["name"] == "Java")
        .unwrap();
    let subcategories = &p["meta"]["categories"][java]["subcategories"];
    let t = &p["threads"][1];
    let ft = &t["frameTable"];
    let name_of = |frame: usize| {
        let func = ft["func"][frame].as_u64().unwrap() as usize;
        t["stringArray"][t["funcTable"]["name"][func].as_u64().unwrap() as usize]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut seen = std::collections::BTreeMap::new();
    for frame in 0..ft["length"].as_u64().unwrap() as usize {
        if ft["category"][frame].as_u64() == Some(java as u64) {
            let sub = ft["subcategory"][frame].as_u64().unwrap() as usize;
            seen.insert(
                name_of(frame),
                subcategories[sub].as_str().unwrap().to_string(),
            );
        }
    }
    let want: std::collections::BTreeMap<String, String> = [
        ("main", "Interpreted"),
        ("work", "Compiled"),
        ("helper", "Compiled"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(seen, want);
    // A stored frame that said only Java.
    rec.frames[0].kind = FrameKind::Java;
    let p = build_profile(&rec, &host(), None).to_value();
    let ft = &p["threads"][1]["frameTable"];
    let main = (0..ft["length"].as_u64().unwrap() as usize).find(|&f| {
        ft["category"][f].as_u64() == Some(java as u64)
            && ft["inlineDepth"][f] == 0
            && ft["subcategory"][f] == 0
    });
    assert!(main.is_some(), "an untold Java frame is Other");
}

/// Check that a flush, which the kernel places at no sector (`(sector_t)-1`),
/// is said without one: its marker has no sector field (it showed
/// 18446744073709551615), and a wait it ended names it "flush vda".
#[test]
fn a_flush_is_said_without_a_sector() {
    let mut rec = recording();
    rec.off_cpu = true;
    let t = &mut rec.processes[1].threads[0];
    t.markers.push(MarkerRecord::Io {
        start_ns: 3_000_000,
        issue_ns: 3_000_000,
        done_ns: 4_900_000,
        device: crate::model::short_name::short_name("vda"),
        op: IoOp::Flush,
        flags: 0,
        bytes: 0,
        sector: NO_SECTOR,
        error: 0,
        stack: None,
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 3_050_000,
        end_ns: 5_000_000,
        reason: OffCpuReason::Blocked,
        run_delay_ns: Some(100_000),
        landing_ns: 0,
        waker: Some(Waker {
            pid: 0,
            tid: 0,
            name: crate::model::short_name::short_name("swapper/1"),
            interrupt: Some(InterruptKind::Hard),
        }),
        cpus: (0, 0),
        waker_stack: None,
    });
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let data = p["threads"][1]["markers"]["data"].as_array().unwrap();
    let flush = data
        .iter()
        .find(|d| d["type"] == "BlockIo")
        .expect("the flush");
    assert_eq!(marker_text(&p["threads"][1], &flush["op"]), Some("flush"));
    assert!(flush.get("sector").is_none(), "{flush}");
    let wait = data
        .iter()
        .find(|d| d["type"] == "OffCpu")
        .expect("the wait");
    assert_eq!(wait["request"].as_str(), Some("flush vda"));
}

/// Check that a wait an interrupt ended names the thread's request that
/// completed just before its wakeup, and is colored as blocked (I/O); a
/// wait another thread ended names no request and is colored as such; a
/// short-waits marker carries its sums and its waker.
#[test]
fn waits_name_the_request_that_ended_them_and_are_colored() {
    let mut rec = recording();
    rec.off_cpu = true;
    let t = &mut rec.processes[1].threads[0];
    let io = |start_ns: u64, done_ns: u64, sector: u64| MarkerRecord::Io {
        start_ns,
        issue_ns: start_ns,
        done_ns,
        device: crate::model::short_name::short_name("vda"),
        op: IoOp::Read,
        flags: 0,
        bytes: 4096,
        sector,
        error: 0,
        stack: None,
    };
    // Two requests in flight; the second completes at 4.9 ms, the wakeup.
    t.markers.push(io(3_000_000, 4_000_000, 8));
    t.markers.push(io(3_100_000, 4_900_000, 16));
    t.markers.push(io(3_200_000, 6_000_000, 24));
    let irq = Some(Waker {
        pid: 0,
        tid: 0,
        name: crate::model::short_name::short_name("swapper/1"),
        interrupt: Some(InterruptKind::Hard),
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 3_050_000,
        end_ns: 5_000_000,
        reason: OffCpuReason::Blocked,
        run_delay_ns: Some(50_000),
        landing_ns: 0,
        waker: irq,
        cpus: (0, 0),
        waker_stack: None,
    });
    let task = Some(Waker {
        pid: 7,
        tid: 8,
        name: crate::model::short_name::short_name("waker"),
        interrupt: None,
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 7_000_000,
        end_ns: 9_000_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: Some(0),
        landing_ns: 0,
        waker: task,
        cpus: (0, 0),
        waker_stack: None,
    });
    t.markers.push(MarkerRecord::ShortWaits {
        start_ns: 10_000_000,
        end_ns: 12_000_000,
        count: 30,
        off_cpu_ns: 900_000,
        waited_ns: 600_000,
        landing_ns: 0,
        waker: ShortWaker::Task { pid: 7, tid: 8 },
    });
    // Its waker by name, as a long wait's: the recording knows it.
    rec.waker_names.insert(8, "pinger".into());
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let data: Vec<&serde_json::Value> = p["threads"][1]["markers"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["type"] != "BlockIo")
        .collect();
    assert_eq!(
        (data[0]["request"].as_str(), data[0]["color"].as_str()),
        (Some("read vda, 4,096B at sector 16"), Some("orange"))
    );
    assert_eq!(
        (data[1]["request"].as_str(), data[1]["color"].as_str()),
        (None, Some("blue"))
    );
    let short = data[2];
    assert_eq!(
        (
            short["type"].as_str(),
            short["count"].as_u64(),
            short["offCpu"].as_f64(),
            short["waited"].as_f64()
        ),
        (Some("ShortWaits"), Some(30), Some(0.9), Some(0.6))
    );
    assert_eq!(
        (
            short["wakerTid"].as_u64(),
            short["wakerPid"].as_str(),
            marker_text(&p["threads"][1], &short["wakerContext"]),
            short["color"].as_str()
        ),
        (Some(8), Some("7"), Some("task"), Some("blue"))
    );
    assert_eq!(
        marker_text(&p["threads"][1], &short["waker"]),
        Some("pinger (pid 7, tid 8)")
    );
    let schema = p["meta"]["markerSchema"].as_array().unwrap();
    assert!(schema
        .iter()
        .filter(|s| s["name"] == "OffCpu" || s["name"] == "ShortWaits")
        .all(|s| s["colorField"] == "color"));
}

/// [`recording`] with everything else the writer turns into JSON: a
/// container's process, the profiler's own, off-CPU samples and markers of
/// every kind (with and without a waker, an interrupt), block I/O with
/// flags, a per-CPU track, counters, notes, warnings and lost counts.
fn full_recording() -> Recording {
    let mut rec = recording();
    rec.off_cpu = true;
    let pseudo = rec.frames.len() as u32;
    rec.frames.push(FrameRecord {
        lib: NO_LIB,
        address: 0,
        kind: FrameKind::OffCpu,
        symbols: AddrInfo {
            funcs: vec![FuncAtAddr {
                name: "[off-CPU: sleeping]".into(),
                file: None,
                line: None,
                start_line: None,
            }],
            ..AddrInfo::default()
        },
    });
    let work = rec.processes[1].threads[0].samples.stack[0];
    let sleeping = rec.stacks.child(work, pseudo as u64);
    let t = &mut rec.processes[1].threads[0];
    t.off_cpu = OffCpuSamples {
        time_ns: vec![2_500_000],
        stack: vec![sleeping],
        duration_ns: vec![25_000_000],
    };
    t.switches = Some((3, 1));
    t.start_ns = Some(100_000);
    t.end_ns = Some(3_400_000);
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 2_500_000,
        end_ns: 27_500_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: Some(50_000),
        landing_ns: 0,
        waker: Some(Waker {
            pid: 7,
            tid: 8,
            name: crate::model::short_name::short_name("waker"),
            interrupt: None,
        }),
        cpus: (0, 1),
        waker_stack: Some(work),
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 1_200_000,
        end_ns: 1_300_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: None,
        landing_ns: 0,
        waker: Some(Waker {
            pid: 9,
            tid: 9,
            name: crate::model::short_name::short_name("irq"),
            interrupt: Some(InterruptKind::Hard),
        }),
        cpus: (1, 1),
        waker_stack: None,
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 1_250_000,
        end_ns: 1_260_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: None,
        landing_ns: 0,
        waker: None,
        cpus: (0, 0),
        waker_stack: None,
    });
    t.markers.push(MarkerRecord::Io {
        start_ns: 1_000_000,
        issue_ns: 1_100_000,
        done_ns: 1_900_000,
        device: crate::model::short_name::short_name("sda"),
        op: IoOp::Write,
        flags: io_flags::IO_SYNC | io_flags::IO_FUA,
        bytes: 4096,
        sector: 2048,
        error: 0,
        stack: Some(work),
    });
    t.markers.push(MarkerRecord::Io {
        start_ns: 2_000_000,
        issue_ns: 2_000_000,
        done_ns: 2_100_000,
        device: crate::model::short_name::short_name("nvme0n1"),
        op: IoOp::Flush,
        flags: io_flags::IO_PREFLUSH,
        bytes: 0,
        sector: 0,
        error: -5,
        stack: None,
    });
    t.markers.push(MarkerRecord::ShortWaits {
        start_ns: 2_200_000,
        end_ns: 2_900_000,
        count: 12,
        off_cpu_ns: 360_000,
        waited_ns: 300_000,
        landing_ns: 0,
        waker: ShortWaker::Task { pid: 9, tid: 9 },
    });
    t.markers.push(MarkerRecord::ShortWaits {
        start_ns: 2_300_000,
        end_ns: 2_400_000,
        count: 2,
        off_cpu_ns: 20_000,
        waited_ns: 20_000,
        landing_ns: 0,
        waker: ShortWaker::Interrupt,
    });
    let thread = |tid: u32, name: &str| ThreadRecord {
        tid,
        name: name.into(),
        start_ns: None,
        end_ns: None,
        samples: ThreadSamples {
            time_ns: vec![2_200_000],
            stack: vec![work],
            cpu_delta_ns: vec![1_000],
            cpu: vec![1],
        },
        off_cpu: Default::default(),
        markers: Vec::new(),
        switches: None,
    };
    rec.processes.push(ProcessRecord {
        folded: 0,
        pid: 77,
        name: "nginx".into(),
        exe: Some("/usr/sbin/nginx".into()),
        cmdline: "nginx -g daemon off;".into(),
        start_ns: None,
        end_ns: None,
        cgroup: Some(format!("/system.slice/docker-{}.scope", "ab".repeat(32))),
        profiler: false,
        threads: vec![thread(77, "nginx")],
    });
    rec.processes.push(ProcessRecord {
        folded: 0,
        pid: 90,
        name: "sysprof".into(),
        exe: None,
        cmdline: String::new(),
        start_ns: None,
        end_ns: None,
        cgroup: Some("/system.slice/sysprof.service".into()),
        profiler: true,
        threads: vec![thread(90, "sysprof"), thread(91, "sysprof-collect")],
    });
    rec.cpu_tracks.push((
        1,
        vec![
            MarkerRecord::OnCpu {
                start_ns: 2_000_000,
                end_ns: 2_400_000,
                pid: 42,
                tid: 42,
                name: "app (pid 42, tid 42)".into(),
                kind: SliceKind::User,
            },
            MarkerRecord::OnCpu {
                start_ns: 1_000_000,
                end_ns: 2_000_000,
                pid: 0,
                tid: 0,
                name: "swapper/1".into(),
                kind: SliceKind::Idle,
            },
        ],
    ));
    rec.counters.push(CounterRecord {
        name: "Memory".into(),
        category: "Memory".into(),
        description: "RSS, bytes".into(),
        pid: 42,
        time_ns: vec![1_000_000, 2_000_000],
        count: vec![4096.0, -1024.0],
        base: Some(1_048_576.0),
    });
    rec.counters.push(CounterRecord {
        name: "CPU usage".into(),
        category: "CPU".into(),
        description: "busy CPUs".into(),
        pid: 0,
        time_ns: vec![1_000_000, 2_000_000, 3_500_000],
        count: vec![1.5, 50.0, 25.0],
        base: None,
    });
    rec.counters.push(CounterRecord {
        name: "Disk read: vda".into(),
        category: "Bandwidth".into(),
        description: "read".into(),
        pid: 0,
        time_ns: vec![1_000_000, 2_000_000],
        count: vec![0.0, 8192.0],
        base: None,
    });
    rec.counters.push(CounterRecord {
        name: "Disk write: vda".into(),
        category: "Bandwidth".into(),
        description: "written".into(),
        pid: 0,
        time_ns: vec![1_000_000, 2_000_000],
        count: vec![0.0, 4096.0],
        base: None,
    });
    rec.counters.push(CounterRecord {
        name: "Process CPU".into(),
        category: "CPU".into(),
        description: "one sample".into(),
        pid: 42,
        time_ns: vec![1_000_000],
        count: vec![30.0],
        base: None,
    });
    rec.counters.push(CounterRecord {
        name: "gone".into(),
        category: "Bandwidth".into(),
        description: "of no process".into(),
        pid: 12345,
        time_ns: vec![1],
        count: vec![1.0],
        base: None,
    });
    rec.notes.push("a note".into());
    rec.warnings.push("a warning".into());
    rec.stats.lost_samples = 3;
    rec.stats.lost_stacks = 2;
    rec.stats.stacks_not_kept = 1;
    rec
}

/// The golden profile of [`full_recording`], written by the writer before
/// its schema moved into `schema.rs`, with the version and architecture
/// replaced by placeholders.
const GOLDEN: &str = include_str!("testdata/full_recording.json");

/// `json` with this build's version and architecture as placeholders.
fn normalized(json: &str) -> String {
    json.replace(
        &format!("sysprof {} on", env!("CARGO_PKG_VERSION")),
        "sysprof VERSION on",
    )
    .replace(
        &format!("\"arch\":\"{}\"", std::env::consts::ARCH),
        "\"arch\":\"ARCH\"",
    )
}

/// Check that the writer writes exactly the bytes it wrote before the
/// refactor (the golden file) for a recording that uses every part of the
/// format: a refactor must not change a single byte of a profile.
/// `SYSPROF_BLESS=1` rewrites the golden file (only when the format is
/// meant to change).
#[test]
fn writes_the_golden_bytes() {
    let rec = full_recording();
    let bytes = ProfileWriter::new(Vec::new())
        .unwrap()
        .finish(&rec, None, &host(), Some(42))
        .unwrap();
    let json = normalized(&String::from_utf8(bytes).unwrap());
    // The file and the value tree the other tests read are one profile.
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).unwrap(),
        serde_json::from_str::<serde_json::Value>(&normalized(
            &build_profile(&rec, &host(), Some(42))
                .to_value()
                .to_string()
        ))
        .unwrap()
    );
    if std::env::var_os("SYSPROF_BLESS").is_some() {
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/profile/testdata/full_recording.json"
            ),
            &json,
        )
        .unwrap();
        return;
    }
    assert_eq!(
        validate::validate(&serde_json::from_str(&json).unwrap()),
        Vec::<String>::new()
    );
    assert!(
        json == GOLDEN,
        "the profile's bytes changed; first difference at byte {}",
        json.bytes()
            .zip(GOLDEN.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(json.len().min(GOLDEN.len()))
    );
}

/// Check that a process written before the rest (as `record` writes what
/// ended between windows) gives the same profile as one written at once:
/// the same threads, by (pid, tid), with the same tables; its counter under
/// its own thread; the same threads open visible and selected; valid.
#[test]
fn a_process_written_early_is_the_same_profile() {
    let rec = full_recording();
    let whole = build_profile(&rec, &host(), Some(42)).to_value();
    let mut rest = rec.clone();
    let at = rest.processes.iter().position(|p| p.pid == 42).unwrap();
    let early = vec![rest.processes.remove(at)];
    let (counters, kept): (Vec<CounterRecord>, Vec<CounterRecord>) =
        rest.counters.drain(..).partition(|c| c.pid == 42);
    rest.counters = kept;
    let mut w = ProfileWriter::new(Vec::new()).unwrap();
    w.write_ended(&rest, &early, &counters).unwrap();
    assert_eq!(w.written(), (1, early[0].threads.len()));
    let streamed: serde_json::Value =
        serde_json::from_slice(&w.finish(&rest, None, &host(), Some(42)).unwrap()).unwrap();
    assert_eq!(validate::validate(&streamed), Vec::<String>::new());

    let threads = |p: &serde_json::Value| -> Vec<serde_json::Value> {
        p["threads"].as_array().unwrap().clone()
    };
    let key = |t: &serde_json::Value| (t["pid"].to_string(), t["tid"].to_string());
    let (a, b) = (threads(&whole), threads(&streamed));
    assert_eq!(a.len(), b.len());
    assert_eq!(b[0]["pid"], "42", "the process written early comes first");
    for t in &a {
        let same = b
            .iter()
            .find(|u| key(u) == key(t))
            .unwrap_or_else(|| panic!("thread {:?} is missing", key(t)));
        assert_eq!(same, t, "thread {:?} differs", key(t));
    }
    // Indexes into threads, compared by the thread they name.
    let named = |p: &serde_json::Value, field: &str| -> Vec<(String, String)> {
        let ts = threads(p);
        let mut v: Vec<_> = p["meta"][field]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| key(&ts[i.as_u64().unwrap() as usize]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        named(&whole, "initialVisibleThreads"),
        named(&streamed, "initialVisibleThreads")
    );
    assert_eq!(
        named(&whole, "initialSelectedThreads"),
        named(&streamed, "initialSelectedThreads")
    );
    let counters = |p: &serde_json::Value| -> Vec<(String, (String, String))> {
        let ts = threads(p);
        let mut v: Vec<_> = p["counters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].to_string(),
                    key(&ts[c["mainThreadIndex"].as_u64().unwrap() as usize]),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert!(
        counters(&whole).iter().any(|c| c.1 .0 == "\"42\""),
        "the test has a counter of the process written early"
    );
    assert_eq!(counters(&whole), counters(&streamed));
    let mut meta = streamed["meta"].clone();
    meta["initialVisibleThreads"] = whole["meta"]["initialVisibleThreads"].clone();
    meta["initialSelectedThreads"] = whole["meta"]["initialSelectedThreads"].clone();
    assert_eq!(meta, whole["meta"]);
    assert_eq!(streamed["libs"], whole["libs"]);
}

/// Check that every counter says what it measures in the front end's own
/// terms: its own `display` (so the upgraders leave it), a `number` column
/// only for a memory level (no invented operation counts; see
/// `memory_counters_say_their_level_where_it_is_known`), a label no other
/// counter of its process has, disk
/// reads and writes told apart, and a CPU share written as busy ms per
/// interval that the front end's `rate` turns back into the kernel's share.
#[test]
fn counters_say_what_they_measure() {
    let rec = full_recording();
    let p = build_profile(&rec, &host(), Some(42)).to_value();
    let counters = p["counters"].as_array().unwrap();
    assert!(!counters.is_empty());
    let mut labels = std::collections::HashSet::new();
    for c in counters {
        assert!(
            c["samples"].get("number").is_none() || c["category"] == "Memory",
            "no invented operation counts: {c}"
        );
        assert!(c.get("color").is_none(), "the colour is display's");
        let rows = c["display"]["tooltipRows"]
            .as_array()
            .unwrap_or_else(|| panic!("{} has tooltip rows", c["name"]));
        assert!(!rows.is_empty());
        assert!(
            rows.iter().all(|r| r.get("labelKey").is_none()),
            "our labels, not the front end's translations"
        );
        assert!(
            labels.insert((c["pid"].to_string(), c["display"]["label"].to_string())),
            "two counters of one process share the label {}",
            c["display"]["label"]
        );
    }
    let by_name = |n: &str| {
        counters
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("counter {n}"))
    };
    let read = by_name("Disk read: vda");
    let write = by_name("Disk write: vda");
    assert_eq!(read["display"]["label"], "Disk read: vda");
    assert_eq!(write["display"]["label"], "Disk write: vda");
    assert_eq!(read["display"]["tooltipRows"][0]["label"], "Read speed");
    assert_eq!(write["display"]["tooltipRows"][0]["label"], "Write speed");
    assert_eq!(
        read["display"]["tooltipRows"][0]["format"]["unit"],
        "bytes-per-second"
    );
    assert_eq!(
        read["samples"]["count"],
        serde_json::json!([0.0, 8192.0]),
        "bytes as the kernel counted them"
    );
    // The share back from what the front end computes: count / dt.
    let cpu = by_name("CPU usage");
    let (t, c) = (
        cpu["samples"]["time"].as_array().unwrap(),
        cpu["samples"]["count"].as_array().unwrap(),
    );
    for (i, pct) in [(1, 50.0), (2, 25.0)] {
        let dt = t[i].as_f64().unwrap() - t[i - 1].as_f64().unwrap();
        let share = c[i].as_f64().unwrap() / dt;
        assert!(
            (share - pct / 100.0).abs() < 1e-9,
            "sample {i}: {share} vs {pct}%"
        );
    }
    assert_eq!(cpu["display"]["tooltipRows"][0]["source"], "rate");
    assert_eq!(
        cpu["display"]["tooltipRows"][0]["format"]["unit"],
        "percent"
    );
}

/// Check that the machine's counters hang under a track of their own that
/// opens visible (under the idle task they were hidden), and that a counter
/// with nothing to draw (one sample, or of no process in the profile) is
/// left out rather than shown blank.
#[test]
fn machine_counters_open_visible_and_blank_ones_are_left_out() {
    let rec = full_recording();
    let p = build_profile(&rec, &host(), Some(42)).to_value();
    let threads = p["threads"].as_array().unwrap();
    let machine = threads
        .iter()
        .position(|t| t["pid"] == MACHINE_PID && t["name"] == "Machine")
        .expect("the machine's track");
    assert_eq!(threads[machine]["isMainThread"], true);
    assert!(p["meta"]["initialVisibleThreads"]
        .as_array()
        .unwrap()
        .contains(&machine.into()));
    assert!(
        !p["meta"]["initialSelectedThreads"]
            .as_array()
            .unwrap()
            .contains(&machine.into()),
        "the command's thread opens selected"
    );
    let counters = p["counters"].as_array().unwrap();
    for name in ["CPU usage", "Disk read: vda", "Disk write: vda"] {
        let c = counters.iter().find(|c| c["name"] == name).unwrap();
        assert_eq!(
            (c["pid"].as_str(), c["mainThreadIndex"].as_u64()),
            (Some(MACHINE_PID), Some(machine as u64)),
            "{name}"
        );
    }
    let names: Vec<&str> = counters
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"Process CPU"),
        "one sample draws nothing: {names:?}"
    );
    assert!(!names.contains(&"gone"), "of no process: {names:?}");
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    // Without machine counters or CPU tracks there is no machine track.
    let mut quiet = full_recording();
    quiet.counters.retain(|c| c.pid != 0);
    quiet.cpu_tracks.clear();
    let q = build_profile(&quiet, &host(), Some(42)).to_value();
    let q_threads = q["threads"].as_array().unwrap();
    assert!(!q_threads
        .iter()
        .any(|t| t["processType"] == "default" || t["name"] == "Machine"));
    // The idle task is then its process's main thread, as any other.
    let idle = q_threads.iter().find(|t| t["pid"] == "0").unwrap();
    assert_eq!(idle["isMainThread"], true);
}

/// Check that code no symbol covers is named one way wherever its library
/// is known, `lib+0xOFF` (never a bare hex with a library attached), in the
/// profile and in folded stacks alike.
#[test]
fn unknown_code_is_named_by_its_library() {
    let mut rec = full_recording();
    let unknown = rec.frames.len() as u64;
    rec.frames.push(FrameRecord {
        lib: 0,
        address: 0x442f,
        kind: FrameKind::Native,
        symbols: AddrInfo::default(),
    });
    let node = rec.stacks.child(NO_PARENT, unknown);
    let t = &mut rec.processes[1].threads[0].samples;
    t.time_ns.push(3_200_000);
    t.stack.push(node);
    t.cpu_delta_ns.push(1_000);
    t.cpu.push(0);
    let p = build_profile(&rec, &host(), Some(42)).to_value();
    let mut seen = false;
    for t in p["threads"].as_array().unwrap() {
        let strings = t["stringArray"].as_array().unwrap();
        let funcs = &t["funcTable"];
        for i in 0..funcs["length"].as_u64().unwrap() as usize {
            let name = strings[funcs["name"][i].as_u64().unwrap() as usize]
                .as_str()
                .unwrap();
            let bare_hex = name
                .strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(
                !(bare_hex && funcs["resource"][i] != -1),
                "bare hex {name} with a library in {}",
                t["name"]
            );
            seen |= name == "app+0x442f";
        }
    }
    assert!(seen, "the unsymbolized frame is named app+0x442f");
    let mut folded = Vec::new();
    folded::write_folded(&rec, &mut folded).unwrap();
    assert!(String::from_utf8(folded).unwrap().contains("app+0x442f"));
}

/// Check that the waker's and a CPU slice's pid and tid use the front
/// end's `pid` and `tid` formats (a name beside the number, not "1,263"),
/// the pid as a string (it is looked up by the threads' string pids) and
/// the tid as a number (threads' tids are numbers).
#[test]
fn pids_and_tids_in_markers_are_shown_as_such() {
    let p = build_profile(&full_recording(), &host(), Some(42)).to_value();
    let schema = p["meta"]["markerSchema"].as_array().unwrap();
    let format = |marker: &str, key: &str| {
        let s = schema.iter().find(|s| s["name"] == marker).unwrap();
        s["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["key"] == key)
            .unwrap()["format"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (format("OffCpu", "wakerPid"), format("OffCpu", "wakerTid")),
        ("pid".into(), "tid".into())
    );
    assert_eq!(
        (format("OnCpu", "pid"), format("OnCpu", "tid")),
        ("pid".into(), "tid".into())
    );
    // A waker is shown once, by `waker`'s text: its pid and tid are hidden.
    for marker in ["OffCpu", "ShortWaits"] {
        let fields = schema.iter().find(|s| s["name"] == marker).unwrap()["fields"]
            .as_array()
            .unwrap();
        let hidden = |key: &str| fields.iter().find(|f| f["key"] == key).unwrap()["hidden"] == true;
        assert!(hidden("wakerPid") && hidden("wakerTid"), "{marker}");
        assert!(!hidden("waker"), "{marker}");
    }
    let app = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == 42)
        .unwrap();
    let woken = app["markers"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["wakerTid"] == 8)
        .expect("the marker woken by tid 8");
    assert_eq!(woken["wakerPid"], "7");
    assert_eq!(
        app["tid"], 42,
        "threads' tids are numbers, as the markers' are"
    );
    assert!(
        app["pid"].is_string(),
        "threads' pids are strings, as the markers' are"
    );
}

/// A JVM launched by `record -- java`: its main thread waits in
/// JLI_Launch, the thread running main() (named as the process) works, and
/// a compiler thread works more. The profile opens on the thread running
/// main(); a program whose main thread works opens on that.
#[test]
fn the_command_opens_on_its_busiest_thread_named_as_it() {
    use super::threads::{initial_threads, TrackFacts};
    let track = |main: bool, named: bool, cpu: usize| TrackFacts {
        pid: Some(100),
        main,
        named_like_process: named,
        profiler: false,
        cpu_samples: cpu,
    };
    // Launcher (main, 2 samples), main() thread (900), C2 compiler (1,500).
    let jvm = [
        track(true, true, 2),
        track(false, true, 900),
        track(false, false, 1500),
    ];
    let (_, selected) = initial_threads(&jvm, Some(100), false);
    assert_eq!(selected, vec![1], "the thread running main()");
    // A program whose main thread does the work, beside a worker named as it.
    let plain = [track(true, true, 800), track(false, true, 300)];
    let (_, selected) = initial_threads(&plain, Some(100), false);
    assert_eq!(selected, vec![0], "its main thread");
    // Nothing sampled: the main thread.
    let idle = [track(false, true, 0), track(true, true, 0)];
    let (_, selected) = initial_threads(&idle, Some(100), false);
    assert_eq!(selected, vec![1], "the main thread when nothing ran");
}

/// `record -- ./script.sh`: the script's shell waits in `wait4` (3
/// samples) while its `gzip` child works (900): the profile opens on gzip,
/// and the script's track stays visible. A program whose main thread waits
/// for its worker opens on the worker. A command that ran a little more
/// than the Firefox Profiler's idle rule (5 % of the busiest) keeps it, and
/// so does one recorded with the whole system.
#[test]
fn a_command_that_barely_ran_opens_on_the_thread_that_ran_most() {
    use super::threads::{initial_threads, TrackFacts};
    let track = |pid: u32, main: bool, cpu: usize| TrackFacts {
        pid: Some(pid),
        main,
        named_like_process: main,
        profiler: false,
        cpu_samples: cpu,
    };
    let script = [
        track(100, true, 3),
        track(101, true, 900),
        track(102, true, 40),
    ];
    let (visible, selected) = initial_threads(&script, Some(100), false);
    assert_eq!(selected, vec![1], "gzip, the child that ran");
    assert!(
        visible.contains(&0),
        "the script stays visible: {visible:?}"
    );
    // The whole system recorded (`record -a -- CMD`): another process need
    // not be the command's child, and the command stays selected.
    let (_, selected) = initial_threads(&script, Some(100), true);
    assert_eq!(selected, vec![0], "the command, with -a");
    // A program whose main thread waits in pthread_join for its worker
    // (not named as it): the worker.
    let joined = [
        track(100, true, 1),
        TrackFacts {
            main: false,
            ..track(100, false, 700)
        },
        track(101, true, 900),
    ];
    let (_, selected) = initial_threads(&joined, Some(100), false);
    assert_eq!(
        selected,
        vec![1],
        "its worker, not another process's thread"
    );
    let busy_enough = [track(100, true, 46), track(101, true, 900)];
    let (_, selected) = initial_threads(&busy_enough, Some(100), false);
    assert_eq!(selected, vec![0], "the command, at 5.1 % of the busiest");
    // The profiler's own threads are never chosen, nor counted as the
    // busiest: counted, 50,000 samples would make gzip's 900 idle too.
    let mut with_profiler = script.to_vec();
    with_profiler.push(TrackFacts {
        profiler: true,
        ..track(500, true, 50_000)
    });
    let (_, selected) = initial_threads(&with_profiler, Some(100), false);
    assert_eq!(selected, vec![1]);
}

/// `record -- python3 ...` under pyenv: the shims' `bash` children ran a
/// few samples each beside the command's 952. The command's threads open
/// visible whatever they ran; another thread only with 5 % of the busiest
/// thread's samples (the Firefox Profiler's own rule), so the shims wait
/// in the track menu and a busy neighbour does not.
#[test]
fn threads_that_barely_ran_open_hidden() {
    use super::threads::{initial_threads, TrackFacts};
    let track = |pid: u32, cpu: usize| TrackFacts {
        pid: Some(pid),
        main: true,
        named_like_process: true,
        profiler: false,
        cpu_samples: cpu,
    };
    let mut tracks = vec![track(100, 952), track(100, 0)];
    tracks.extend((0..14).map(|i| track(200 + i, 1 + i as usize)));
    tracks.push(track(300, 48));
    tracks.push(track(301, 47));
    let (visible, selected) = initial_threads(&tracks, Some(100), false);
    assert_eq!(selected, vec![0]);
    assert_eq!(visible, vec![0, 1, 16], "{visible:?}");
    // System-wide (no command): the same rule among all.
    let (visible, _) = initial_threads(&tracks, None, false);
    assert_eq!(visible, vec![0, 16], "{visible:?}");
}

/// Tooltips say nothing empty: no "Woken by —" for a preempted wait, no
/// "Error: 0" on a request that succeeded, no "Before the wakeups: 0s";
/// the waker's pid is labelled once ("Waker: PID: 7", not "Waker pid:
/// PID: 7"); a request's size is written as the front end writes bytes.
#[test]
fn tooltips_leave_out_empty_fields() {
    use super::schema::{MarkerData, MarkerText};
    let schema = super::markers::marker_schema();
    let text = serde_json::to_string(&schema).unwrap();
    assert!(
        !text.contains("Waker pid") && !text.contains("Waker tid"),
        "{text}"
    );
    // The payloads, as serialized, their texts indexes into the thread's
    // strings (`unique-string`).
    let strings = [
        "preempted (runnable)",
        "sleeping",
        "srv (pid 7, tid 8)",
        ", woken by srv (pid 7, tid 8)",
    ];
    let off = serde_json::to_value(MarkerData::OffCpu {
        reason: 0,
        run_delay: Some(1.0),
        off_cpu: None,
        wakeup_landing: None,
        waker: None,
        woken_by: None,
        waker_pid: None,
        waker_tid: None,
        waker_context: None,
        cpu_out: 0,
        cpu_in: 1,
        waited_on: None,
        color: "grey",
        request: None,
        cause: None,
        goroutine: None,
        waker_goroutine: None,
    })
    .unwrap();
    assert!(off.get("waker").is_none(), "{off}");
    // The titles, as the front end fills a label (`marker-schema.ts`
    // `parseLabel`: a missing field is empty): a preemption's ends at its
    // reason, a woken wait's names its waker.
    let off_schema = schema
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "OffCpu")
        .unwrap();
    // A field of the `unique-string` format is looked up in the strings.
    let format_of = |key: &str| -> String {
        off_schema["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["key"] == key)
            .map(|f| f["format"].as_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let fill = |label: &str, data: &serde_json::Value| -> String {
        let mut out = String::new();
        let mut rest = label;
        while let Some(at) = rest.find("{marker.data.") {
            out.push_str(&rest[..at]);
            let key_end = rest[at..].find('}').unwrap() + at;
            let key = &rest[at + "{marker.data.".len()..key_end];
            if let Some(v) = data.get(key) {
                out.push_str(&match (format_of(key).as_str(), v.as_u64()) {
                    ("unique-string", Some(i)) => strings[i as usize].to_string(),
                    ("unique-string", None) => panic!("{key} = {v} is not a string index"),
                    _ => v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string()),
                });
            }
            rest = &rest[key_end + 1..];
        }
        out + rest
    };
    let tooltip = off_schema["tooltipLabel"].as_str().unwrap();
    assert_eq!(fill(tooltip, &off), "Off-CPU: preempted (runnable)");
    // Short waits' wakers read after "woken by", none as a dash (it read
    // as a field left empty: "woken by — (preempted)").
    use crate::model::recording::ShortWaker;
    for waker in [
        ShortWaker::Nobody,
        ShortWaker::Unseen,
        ShortWaker::Interrupt,
        ShortWaker::Several,
        ShortWaker::Task { pid: 7, tid: 8 },
    ] {
        let label = waker.label();
        assert!(
            !label.is_empty() && !label.contains('—'),
            "woken by {label}"
        );
    }
    let mut woken = off.clone();
    woken["reason"] = 1.into();
    woken["waker"] = 2.into();
    woken["wokenBy"] = 3.into();
    assert_eq!(
        fill(tooltip, &woken),
        "Off-CPU: sleeping, woken by srv (pid 7, tid 8)"
    );
    let io = serde_json::to_value(MarkerData::Io {
        device: MarkerText::Index(0),
        op: 1,
        bytes: 8192,
        sector: Some(1),
        queue_time: 0.1,
        service_time: 0.2,
        error: None,
        cause: None,
        goroutine: None,
    })
    .unwrap();
    assert!(io.get("error").is_none(), "{io}");
    let short = serde_json::to_value(MarkerData::ShortWaits {
        count: 3,
        off_cpu: 0.3,
        waited: None,
        landing: None,
        waker: 0,
        waker_pid: None,
        waker_tid: None,
        waker_context: 1,
        color: "grey",
    })
    .unwrap();
    assert!(short.get("waited").is_none(), "{short}");
    assert_eq!(super::markers::thousands(8192), "8,192");
    assert_eq!(super::markers::thousands(999), "999");
    assert_eq!(super::markers::thousands(1_234_567), "1,234,567");
}

/// Check that what `report --why` reads back ([`MarkerView`]) is what the
/// writer's [`MarkerData`] writes, field by field: a key renamed on one
/// side only comes back missing here.
#[test]
fn marker_view_reads_what_marker_data_writes() {
    use super::schema::{MarkerData, MarkerStr, MarkerText, MarkerView};
    use serde::Deserialize;
    let strings: Vec<serde_json::Value> = [
        "sleeping",
        "srv (pid 7, tid 8)",
        ", woken by srv (pid 7, tid 8)",
        "task",
        "a pipe",
        "vda",
        "read",
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    let text = |f: Option<MarkerStr<'_>>| f.and_then(|f| f.resolve(&strings)).map(str::to_string);
    // An off-CPU marker's texts, written as indexes or (before) as texts.
    let off_texts =
        ["sleeping", "srv (pid 7, tid 8)", "task", "a pipe"].map(|t| Some(t.to_string()));
    let off = serde_json::to_value(MarkerData::OffCpu {
        reason: 0,
        run_delay: Some(1.5),
        off_cpu: Some(9.0),
        wakeup_landing: Some(0.25),
        waker: Some(MarkerText::Index(1)),
        woken_by: Some(2),
        waker_pid: Some(7),
        waker_tid: Some(8),
        waker_context: Some(3),
        cpu_out: 1,
        cpu_in: 0,
        waited_on: Some(4),
        color: "blue",
        request: None,
        cause: None,
        goroutine: None,
        waker_goroutine: None,
    })
    .unwrap();
    let MarkerView::OffCpu {
        reason,
        off_cpu,
        run_delay,
        wakeup_landing,
        waker,
        waker_pid,
        waker_tid,
        waker_context,
        cpu_out,
        cpu_in,
        waited_on,
    } = MarkerView::deserialize(&off).unwrap()
    else {
        panic!("not an off-CPU view: {off}");
    };
    assert_eq!(
        [
            text(reason),
            text(waker),
            text(waker_context),
            text(waited_on)
        ],
        off_texts
    );
    assert_eq!(
        (
            off_cpu,
            run_delay,
            wakeup_landing,
            waker_pid,
            waker_tid,
            cpu_out,
            cpu_in
        ),
        (
            Some(9.0),
            Some(1.5),
            Some(0.25),
            Some("7"),
            Some(8),
            Some(1),
            Some(0)
        )
    );
    let short = serde_json::to_value(MarkerData::ShortWaits {
        count: 3,
        off_cpu: 0.3,
        waited: Some(0.1),
        landing: Some(0.05),
        waker: 1,
        waker_pid: Some(7),
        waker_tid: Some(8),
        waker_context: 3,
        color: "blue",
    })
    .unwrap();
    assert_eq!(
        MarkerView::deserialize(&short).unwrap(),
        MarkerView::ShortWaits {
            count: Some(3.0),
            off_cpu: Some(0.3),
            waited: Some(0.1),
            landing: Some(0.05),
            waker: Some(MarkerStr::Index(1)),
            waker_pid: Some("7"),
            waker_tid: Some(8),
            waker_context: Some(MarkerStr::Index(3)),
        }
    );
    let io = serde_json::to_value(MarkerData::Io {
        device: MarkerText::Index(5),
        op: 6,
        bytes: 8192,
        sector: Some(1),
        queue_time: 0.1,
        service_time: 0.2,
        error: None,
        cause: None,
        goroutine: None,
    })
    .unwrap();
    let MarkerView::Io { device } = MarkerView::deserialize(&io).unwrap() else {
        panic!("not an I/O view: {io}");
    };
    assert_eq!(text(device), Some("vda".into()));
    let slice = serde_json::json!({"type": "OnCpu", "thread": 0, "pid": "1", "tid": 1});
    assert_eq!(MarkerView::deserialize(&slice).unwrap(), MarkerView::Other);
    // Profiles written before held the texts themselves: read as they are.
    let old = serde_json::json!({"type": "OffCpu", "reason": "sleeping", "waker": "srv (pid 7, tid 8)",
        "wakerContext": "task", "waitedOn": "a pipe"});
    let MarkerView::OffCpu {
        reason,
        waker,
        waker_context,
        waited_on,
        ..
    } = MarkerView::deserialize(&old).unwrap()
    else {
        panic!("not an off-CPU view: {old}");
    };
    assert_eq!(
        [
            text(reason),
            text(waker),
            text(waker_context),
            text(waited_on)
        ],
        off_texts
    );
    let old_io = serde_json::json!({"type": "BlockIo", "device": "vdb"});
    let MarkerView::Io { device } = MarkerView::deserialize(&old_io).unwrap() else {
        panic!("not an I/O view: {old_io}");
    };
    assert_eq!(text(device), Some("vdb".into()));
    // An index past the strings names nothing (a lying profile).
    assert_eq!(MarkerStr::Index(7).resolve(&strings), None);
    // The typed profile `report` reads takes either too.
    let typed: MarkerData = serde_json::from_value(io).unwrap();
    let MarkerData::Io { device, .. } = typed else {
        panic!("not an I/O payload");
    };
    let owned: Vec<String> = strings
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert_eq!(device.resolve(&owned), Some("vda"));
    let typed: MarkerData = serde_json::from_value(old_io).unwrap();
    let MarkerData::Io { device, .. } = typed else {
        panic!("not an I/O payload");
    };
    assert_eq!(device.resolve(&[]), Some("vdb"));
    assert_eq!(MarkerText::Index(99).resolve(&owned), None);
}

/// Check that every marker of a whole profile writes its texts as its
/// schema says: a `unique-string` field an index into its thread's
/// strings (the front end looks it up; a text there would show as
/// "(empty)"), a `string` field a text. The recording has every kind of
/// marker the writer makes but goroutines' and run delays drawn apart.
#[test]
fn marker_texts_are_what_their_schema_says() {
    let rec = full_recording();
    let p = build_profile(&rec, &host(), None).to_value();
    let schema = super::markers::marker_schema();
    let mut formats = std::collections::HashMap::new();
    for s in schema.as_array().unwrap() {
        for f in s["fields"].as_array().unwrap() {
            formats.insert(
                (
                    s["name"].as_str().unwrap().to_string(),
                    f["key"].as_str().unwrap().to_string(),
                ),
                f["format"].as_str().unwrap().to_string(),
            );
        }
    }
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for t in p["threads"].as_array().unwrap() {
        let strings = t["stringArray"].as_array().unwrap();
        for d in t["markers"]["data"].as_array().unwrap() {
            let kind = d["type"].as_str().unwrap().to_string();
            for (key, v) in d.as_object().unwrap() {
                if key == "type" || key == "cause" {
                    continue;
                }
                let format = formats
                    .get(&(kind.clone(), key.clone()))
                    .unwrap_or_else(|| panic!("{kind}.{key} is not in the schema"));
                match format.as_str() {
                    "unique-string" => {
                        let i = v
                            .as_u64()
                            .unwrap_or_else(|| panic!("{kind}.{key} = {v}: not an index"));
                        let text = strings[i as usize].as_str().unwrap();
                        assert!(!text.is_empty(), "{kind}.{key} names an empty string");
                        *seen.entry(kind.clone()).or_default() += 1;
                    }
                    "string" | "pid" => assert!(v.is_string(), "{kind}.{key} = {v}: not a string"),
                    _ => assert!(
                        !v.is_string(),
                        "{kind}.{key} = {v}: a string where {format} is"
                    ),
                }
            }
        }
    }
    for kind in ["OffCpu", "ShortWaits", "BlockIo", "OnCpu", "CpuIdle"] {
        assert!(
            seen.contains_key(kind),
            "no {kind} marker's text was checked: {seen:?}"
        );
    }
}

/// Check what the Firefox Profiler orders global tracks by
/// (`_getDefaultGlobalTrackOrder`: its parent process, `processType`
/// "default", first; the others by their main thread's CPU): in a
/// system-wide profile the machine's track is the only "default" one, the
/// CPUs' tracks are under it (its pid), and its row's samples carry the
/// machine's busy CPU as its "CPU usage" counter read it.
#[test]
fn the_machine_and_its_cpus_come_first() {
    let rec = full_recording();
    assert!(!rec.cpu_tracks.is_empty(), "the recording has CPU tracks");
    let p = build_profile(&rec, &host(), None).to_value();
    let threads = p["threads"].as_array().unwrap();
    let default: Vec<(&str, &str)> = threads
        .iter()
        .filter(|t| t["processType"] == "default")
        .map(|t| (t["pid"].as_str().unwrap(), t["name"].as_str().unwrap()))
        .collect();
    // The machine's pid is the kernel's, 0, which the front end does not
    // write under the track's name ("PID: machine" it did write).
    assert_eq!(MACHINE_PID, "0");
    let machine_pid = threads
        .iter()
        .filter(|t| t["pid"] == MACHINE_PID && t["processType"] == "default");
    assert_eq!(
        default.len(),
        machine_pid.clone().count(),
        "only the machine's tracks are the parent process: {default:?}"
    );
    // The idle task's thread joins them, and does not lead them: one main
    // thread for pid 0, the machine's.
    let pid0_main: Vec<&str> = threads
        .iter()
        .filter(|t| t["pid"] == MACHINE_PID && t["isMainThread"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(pid0_main, ["Machine"]);
    assert!(threads
        .iter()
        .any(|t| t["pid"] == MACHINE_PID && t["name"] == "swapper/0"));
    let cpus = machine_pid
        .clone()
        .filter(|t| t["name"].as_str().unwrap().starts_with("CPU "))
        .count();
    assert_eq!(
        cpus,
        rec.cpu_tracks.len(),
        "every CPU track under the machine"
    );
    let mains: Vec<&serde_json::Value> =
        machine_pid.filter(|t| t["isMainThread"] == true).collect();
    assert_eq!(mains.len(), 1, "one row for the machine");
    // Its samples: the counter's busy share times each reading's span, µs.
    let usage = rec
        .counters
        .iter()
        .find(|c| c.pid == 0 && c.name == "CPU usage")
        .unwrap();
    let want: u64 = (1..usage.time_ns.len())
        .map(|i| {
            let span_us = (usage.time_ns[i] - usage.time_ns[i - 1]) as f64 / 1e3;
            (usage.count[i] / 100.0 * span_us).round() as u64
        })
        .sum();
    let got: u64 = mains[0]["samples"]["threadCPUDelta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .sum();
    assert!(want > 0, "the test's counter says the machine was busy");
    assert_eq!(got, want);
    assert_eq!(
        mains[0]["samples"]["length"].as_u64().unwrap() as usize,
        usage.time_ns.len() - 1,
        "one sample per reading after the first"
    );
    assert_eq!(validate::validate(&p), Vec::<String>::new());
}

/// Check that a memory counter whose level is known carries it (`number`:
/// the level at each sample) under a tooltip row that says it, and one whose
/// level is not known (read back from the store) says only what the line
/// is: its change from the lowest point in view.
#[test]
fn memory_counters_say_their_level_where_it_is_known() {
    let rec = full_recording();
    let p = build_profile(&rec, &host(), Some(42)).to_value();
    let c = p["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Memory")
        .unwrap()
        .clone();
    assert_eq!(
        c["samples"]["number"],
        serde_json::json!([1_052_672.0, 1_051_648.0])
    );
    let rows = c["display"]["tooltipRows"].as_array().unwrap();
    assert_eq!(rows[0]["source"], "sample-number");
    assert_eq!(rows[0]["label"], "Resident");
    assert!(rows
        .iter()
        .all(|r| r["label"] != "In use, above the lowest point in view"));
    let mut unknown = full_recording();
    for c in &mut unknown.counters {
        c.base = None;
    }
    let q = build_profile(&unknown, &host(), Some(42)).to_value();
    let c = q["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Memory")
        .unwrap();
    assert!(c["samples"].get("number").is_none());
    let rows = c["display"]["tooltipRows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["source"] != "sample-number"));
    assert_eq!(rows[0]["label"], "Above the lowest point in view");
}

/// Check that a native function whose DWARF file is relative (the path a
/// distribution's build wrote, `./csu/../csu/libc-start.c`) has no file,
/// so the front end names its library; an absolute one keeps it; both keep
/// their frames' lines.
#[test]
fn relative_build_paths_give_way_to_the_library() {
    let native = |name: &str, file: &str, address: u64| FrameRecord {
        lib: 0,
        address,
        kind: FrameKind::Native,
        symbols: AddrInfo {
            symbol_start: address,
            symbol_offset: 0,
            symbol_size: None,
            funcs: vec![FuncAtAddr {
                name: name.into(),
                file: Some(file.into()),
                line: Some(7),
                start_line: None,
            }],
        },
    };
    let mut rec = recording();
    let base = rec.frames.len() as u64;
    rec.frames.extend([
        native(
            "__libc_start_main_impl",
            "./csu/../csu/libc-start.c",
            0x2000,
        ),
        native("mine", "/src/mine.c", 0x3000),
    ]);
    let stacks: Vec<u32> = (0..2)
        .map(|i| rec.stacks.child(NO_PARENT, base + i))
        .collect();
    rec.processes[1].threads[0].samples = ThreadSamples {
        time_ns: vec![100_000, 200_000],
        stack: stacks,
        cpu_delta_ns: vec![0; 2],
        cpu: vec![0; 2],
    };
    let p = build_profile(&rec, &host(), None).to_value();
    let app = &p["threads"][1];
    let (funcs, strings) = (&app["funcTable"], app["stringArray"].as_array().unwrap());
    let file_of = |name: &str| {
        let i = (0..funcs["length"].as_u64().unwrap() as usize)
            .find(|&i| strings[funcs["name"][i].as_u64().unwrap() as usize] == name)
            .unwrap();
        funcs["fileName"][i]
            .as_u64()
            .map(|s| strings[s as usize].as_str().unwrap().to_string())
    };
    assert_eq!(file_of("__libc_start_main_impl"), None);
    assert_eq!(file_of("mine"), Some("/src/mine.c".to_string()));
    let lines = app["frameTable"]["line"].as_array().unwrap();
    assert!(
        lines.iter().filter(|l| l.as_u64() == Some(7)).count() >= 2,
        "lines kept"
    );
}

/// Check that a Go goroutine's id frame is no frame of the profile (the
/// call tree would split once per goroutine) and goes instead to what its
/// stacks are of: a `Goroutine` marker per run of its samples on the
/// thread with the same labels, its waits' `goroutine` and their wakers'
/// `wakerGoroutine`.
#[test]
fn goroutines_are_markers_and_fields_not_frames() {
    use crate::model::goroutine_labels::{goroutine_name, labels_name};
    let mut rec = recording();
    rec.off_cpu = true;
    let pseudo = FrameRecord::named;
    let labels = [("handler".to_string(), "alpha".to_string())];
    let other = [("handler".to_string(), "beta".to_string())];
    let l = rec.frames.len() as u64;
    rec.frames
        .push(pseudo(FrameKind::GoLabels, labels_name(&labels)));
    rec.frames
        .push(pseudo(FrameKind::Goroutine, goroutine_name(17)));
    rec.frames
        .push(pseudo(FrameKind::Goroutine, goroutine_name(18)));
    rec.frames
        .push(pseudo(FrameKind::OffCpu, "[off-CPU: sleeping]".into()));
    rec.frames
        .push(pseudo(FrameKind::GoLabels, labels_name(&other)));
    let under = |rec: &mut Recording, labels: u64, goroutine: u64| {
        let root = rec.stacks.child(NO_PARENT, labels);
        let g = rec.stacks.child(root, goroutine);
        let main = rec.stacks.child(g, 0);
        rec.stacks.child(main, 1)
    };
    let (w17, w18) = (under(&mut rec, l, l + 1), under(&mut rec, l, l + 2));
    let w17_beta = under(&mut rec, l + 4, l + 1);
    let sleeping = rec.stacks.child(w17, l + 3);
    let t = &mut rec.processes[1].threads[0];
    // Samples at 1, 2 and 3 ms: goroutine 17, the same with other labels,
    // then goroutine 18.
    t.samples.stack = vec![w17, w17_beta, w18];
    t.off_cpu = OffCpuSamples {
        time_ns: vec![2_500_000],
        stack: vec![sleeping],
        duration_ns: vec![300_000],
    };
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 2_500_000,
        end_ns: 2_800_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: None,
        landing_ns: 0,
        waker: None,
        cpus: (0, 0),
        waker_stack: Some(w17),
    });
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let app = &p["threads"][1];
    let names: Vec<String> = stack_names(app, 0).into_iter().map(|n| n.0).collect();
    assert_eq!(
        names,
        ["[labels: handler=\"alpha\"]", "main", "work", "helper"]
    );
    assert!(
        !app["stringArray"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s.as_str().unwrap().starts_with("[goroutine")),
        "no goroutine frame: {}",
        app["stringArray"]
    );
    // Samples of both goroutines under one labels node.
    assert_eq!(app["samples"]["stack"][0], app["samples"]["stack"][3]);
    let m = &app["markers"];
    let of_type = |ty: &str| -> Vec<usize> {
        (0..m["length"].as_u64().unwrap() as usize)
            .filter(|&i| m["data"][i]["type"] == ty)
            .collect()
    };
    let runs: Vec<(f64, f64, u64, u64, &str)> = of_type("Goroutine")
        .into_iter()
        .map(|i| {
            let d = &m["data"][i];
            (
                m["startTime"][i].as_f64().unwrap(),
                m["endTime"][i].as_f64().unwrap(),
                d["goroutine"].as_u64().unwrap(),
                d["samples"].as_u64().unwrap(),
                d["labels"].as_str().unwrap_or(""),
            )
        })
        .collect();
    // Times from the recording's start at 0.5 ms; a run from an interval
    // before its first sample, or the recording's start.
    assert_eq!(
        runs,
        [
            (0.0, 0.5, 17, 1, "handler=\"alpha\""),
            (0.5, 1.5, 17, 1, "handler=\"beta\""),
            (1.5, 2.5, 18, 1, "handler=\"alpha\"")
        ]
    );
    let waits = of_type("OffCpu");
    assert_eq!(waits.len(), 1);
    let d = &m["data"][waits[0]];
    assert_eq!(
        (d["goroutine"].as_u64(), d["wakerGoroutine"].as_u64()),
        (Some(17), Some(17)),
        "{d}"
    );
    let starts: Vec<f64> = m["startTime"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "sorted: {starts:?}"
    );
}

/// Check that a run of short waits' marker holds its off-CPU sum as
/// written: its times are rounded to the microsecond and the sum is not,
/// so a run of 56.812 µs written from 1.987 to 2.043 ms is drawn to 2.044
/// (as ten hours in), and one that would pass the recording's end starts
/// earlier instead; one that fits, and any other marker, keep their span.
#[test]
fn a_run_of_short_waits_is_drawn_long_enough_for_its_sum() {
    let short = |off_cpu_ns: u64| MarkerRecord::ShortWaits {
        start_ns: 0,
        end_ns: 0,
        count: 2,
        off_cpu_ns,
        waited_ns: 0,
        landing_ns: 0,
        waker: ShortWaker::Interrupt,
    };
    let held = |r: &MarkerRecord, span| super::markers::holding_its_sum(r, span, 1e9);
    assert_eq!(held(&short(56_812), (1.987, 2.043)), (1.987, 2.044));
    // As `ms_since` writes times ten hours in: whole microseconds / 1e3.
    let (start, end) = (36_000_001_987.0 / 1e3, 36_000_002_043.0 / 1e3);
    assert_eq!(
        held(&short(56_812), (start, end)),
        (start, 36_000_002_044.0 / 1e3)
    );
    assert_eq!(held(&short(56_000), (1.987, 2.043)), (1.987, 2.043));
    assert_eq!(held(&short(56_000), (start, end)), (start, end));
    assert_eq!(held(&short(500), (4.0, 4.0)), (4.0, 4.001));
    // At the recording's end (830.043 ms), earlier instead.
    assert_eq!(
        super::markers::holding_its_sum(&short(795_200), (829.249, 830.043), 830.043),
        (829.247, 830.043)
    );
    // At both ends of a recording of 1 µs: not before 0 either.
    assert_eq!(
        super::markers::holding_its_sum(&short(2_000), (0.0, 0.001), 0.001),
        (0.0, 0.001)
    );
    let slice = MarkerRecord::OnCpu {
        start_ns: 0,
        end_ns: 0,
        pid: 1,
        tid: 1,
        name: "x".into(),
        kind: SliceKind::User,
    };
    assert_eq!(held(&slice, (1.0, 1.0)), (1.0, 1.0));
}

/// A marker's text field `v` of thread `t`, as the writer writes one: an
/// index into its strings (`unique-string`); None for a text or anything
/// else.
fn marker_text<'a>(t: &'a serde_json::Value, v: &'a serde_json::Value) -> Option<&'a str> {
    t["stringArray"][v.as_u64()? as usize].as_str()
}
