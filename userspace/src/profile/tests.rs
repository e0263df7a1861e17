//! Unit tests of the writer on a small hand-made recording.

use super::*;
use crate::model::recording::*;
use crate::model::stack_tree::StackTree;
use crate::model::symbols::{AddrInfo, FuncAtAddr};

fn func(name: &str, line: u32) -> FuncAtAddr {
    FuncAtAddr { name: name.into(), file: Some("/src/app.c".into()), line: Some(line) }
}

/// Two processes, an inlined call, a kernel frame, an unresolved frame.
fn recording() -> Recording {
    let libs = vec![
        LibRecord { path: "/usr/bin/app".into(), name: "app".into(), build_id: Some((1..=20).collect()) },
        LibRecord { path: "[kernel.kallsyms]".into(), name: "[kernel.kallsyms]".into(), build_id: None },
    ];
    let frames = vec![
        // 0: main
        FrameRecord { lib: 0, address: 0x1100, kernel: false, symbols: AddrInfo { symbol_start: 0x1100, symbol_offset: 0, symbol_size: Some(0x40), funcs: vec![func("main", 10)] }, pseudo: false },
        // 1: work with helper inlined into it
        FrameRecord { lib: 0, address: 0x1210, kernel: false, symbols: AddrInfo { symbol_start: 0x1200, symbol_offset: 0x10, symbol_size: None, funcs: vec![func("work", 20), func("helper", 5)] }, pseudo: false },
        // 2: kernel
        FrameRecord { lib: 1, address: 0x5000, kernel: true, symbols: AddrInfo { symbol_start: 0, symbol_offset: 8, symbol_size: None, funcs: vec![FuncAtAddr { name: "do_syscall_64".into(), file: None, line: None }] }, pseudo: false },
        // 3: unresolved
        FrameRecord { lib: NO_LIB, address: 0xdead, kernel: false, symbols: AddrInfo::default(), pseudo: false },
    ];
    let mut stacks = StackTree::new();
    let main = stacks.child(NO_PARENT, 0);
    let work = stacks.child(main, 1);
    let sys = stacks.child(work, 2);
    let lost = stacks.child(NO_PARENT, 3);
    let samples = ThreadSamples { time_ns: vec![1_000_000, 2_000_000, 3_000_000], stack: vec![work, sys, work], cpu_delta_ns: vec![0, 1_000_000, 2_500], cpu: vec![0; 3] };
    let thread = |tid: u32, name: &str, samples: ThreadSamples| ThreadRecord { tid, name: name.into(), start_ns: None, end_ns: None, samples, off_cpu: Default::default(), markers: Vec::new(), switches: None };
    Recording {
        start_ns: 500_000,
        start_wall_ms: 1_700_000_000_000.0,
        end_ns: 4_000_000,
        interval_ms: 1.0,
        processes: vec![
            ProcessRecord { pid: 0, name: "swapper".into(), exe: None, cmdline: String::new(), start_ns: None, end_ns: None, cgroup: None, profiler: false,
                threads: vec![thread(0, "swapper/0", ThreadSamples { time_ns: vec![1_500_000], stack: vec![sys], cpu_delta_ns: vec![0], cpu: vec![0; 1] })] },
            ProcessRecord { pid: 42, name: "app".into(), exe: Some("/usr/bin/app".into()), cmdline: "app".into(), start_ns: Some(0), end_ns: Some(3_500_000), cgroup: None, profiler: false,
                threads: vec![thread(42, "app", samples), thread(43, "worker", ThreadSamples { time_ns: vec![2_000_000], stack: vec![lost], cpu_delta_ns: vec![7_000], cpu: vec![0; 1] })] },
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
    HostInfo { cpu_name: "Test CPU".into(), logical_cpus: 2, physical_cpus: Some(2), main_memory: Some(1 << 30), kernel_release: "6.1.0".into(), hostname: "h".into(), arguments: "sysprof record -a".into() }
}

fn stack_names(t: &serde_json::Value, sample: usize) -> Vec<(String, u64, u64)> {
    let s = &t["stringArray"];
    let mut node = t["samples"]["stack"][sample].as_u64();
    let mut out = Vec::new();
    while let Some(n) = node {
        let f = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
        let func = t["frameTable"]["func"][f].as_u64().unwrap() as usize;
        let name = s[t["funcTable"]["name"][func].as_u64().unwrap() as usize].as_str().unwrap().to_string();
        out.push((name, t["frameTable"]["inlineDepth"][f].as_u64().unwrap(), t["frameTable"]["category"][f].as_u64().unwrap()));
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
    assert_eq!(p["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"], 500_000);
    assert_eq!(p["meta"]["symbolicated"], true);
    assert_eq!(p["meta"]["sampleUnits"]["threadCPUDelta"], "µs");
    assert_eq!(p["meta"]["logicalCPUs"], 2);
    let threads = p["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 3);
    let app = &threads[1];
    assert_eq!((app["pid"].as_str(), app["tid"].as_u64(), app["name"].as_str()), (Some("42"), Some(42), Some("app")));
    assert_eq!(app["isMainThread"], true);
    assert_eq!(threads[2]["isMainThread"], false);
    assert_eq!(threads[2]["processName"], "app");
    assert_eq!(app["processShutdownTime"], 3.0);
    assert_eq!(app["samples"]["timeDeltas"], serde_json::json!([0.5, 1.0, 1.0]));
    assert_eq!(validate::sample_times(&app["samples"]), Some(vec![0.5, 1.5, 2.5]));
    assert_eq!(app["samples"]["threadCPUDelta"], serde_json::json!([0, 1000, 2]));
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
    assert_eq!(frames["address"][work], frames["address"][helper], "same address, two depths");
    assert_eq!(frames["nativeSymbol"][work], frames["nativeSymbol"][helper], "one native symbol for both");
    assert_eq!(app["funcTable"]["length"], 4, "main, work, helper, do_syscall_64 once each");
    let idle = &p["threads"][0];
    assert!(stack_names(idle, 0).iter().all(|(_, _, c)| *c == category::IDLE as u64));
}

/// Check that an unresolved address keeps a hex name and no library, and
/// that samples sharing a stack share the stack table row.
#[test]
fn unresolved_frames_keep_hex_address() {
    let p = build_profile(&recording(), &host(), None).to_value();
    let worker = &p["threads"][2];
    assert_eq!(stack_names(worker, 0), vec![("0xdead".into(), 0, category::USER as u64)]);
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
    assert_eq!(p["libs"][0]["codeId"], "0102030405060708090a0b0c0d0e0f1011121314");
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
        kernel: false,
        symbols: AddrInfo { funcs: vec![FuncAtAddr { name: "[off-CPU: sleeping]".into(), file: None, line: None }], ..AddrInfo::default() },
        pseudo: true,
    });
    let work = rec.processes[1].threads[0].samples.stack[0];
    let sleeping = rec.stacks.child(work, pseudo as u64);
    let t = &mut rec.processes[1].threads[0];
    t.off_cpu = OffCpuSamples { time_ns: vec![2_500_000], stack: vec![sleeping], duration_ns: vec![25_000_000] };
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 2_500_000,
        end_ns: 27_500_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: Some(50_000),
        waker: Some(Waker { pid: 7, tid: 8, name: "waker".into(), interrupt: None }),
        cpus: (0, 1),
        waker_stack: Some(work),
    });
    let p = build_profile(&rec, &host(), None).to_value();
    assert_eq!(validate::validate(&p), Vec::<String>::new());
    let app = &p["threads"][1];
    assert_eq!(app["samples"]["weightType"], "tracing-ms");
    assert_eq!(validate::sample_times(&app["samples"]), Some(vec![0.5, 1.5, 2.0, 2.5]));
    assert_eq!(app["samples"]["weight"], serde_json::json!([1.0, 1.0, 25.0, 1.0]));
    assert_eq!(app["samples"]["threadCPUDelta"][2], 0);
    let names = stack_names(app, 2);
    assert_eq!(names.last().unwrap(), &("[off-CPU: sleeping]".to_string(), 0, category::OFF_CPU as u64));
    let m = &app["markers"];
    assert_eq!(m["length"], 1);
    let data = &m["data"][0];
    assert_eq!((data["type"].as_str(), data["reason"].as_str(), data["wakerTid"].as_u64()), (Some("OffCpu"), Some("sleeping"), Some(8)));
    assert_eq!(data["runDelay"], 0.05);
    assert_eq!(m["startTime"][0], 2.0);
    assert_eq!(m["endTime"][0], 27.0);
    let cause = data["cause"]["stack"].as_u64().unwrap() as usize;
    assert!(app["stackTable"]["frame"].as_array().unwrap().len() > cause, "the cause is a stack of this thread");
    let schema = p["meta"]["markerSchema"].as_array().unwrap();
    assert!(schema.iter().any(|s| s["name"] == "OffCpu" && s["fields"].as_array().unwrap().iter().any(|f| f["key"] == "runDelay")));
}
