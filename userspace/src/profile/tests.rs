//! Unit tests of the writer on a small hand-made recording.

use super::*;
use crate::collector::recording::*;
use crate::collector::stack_tree::StackTree;
use crate::symbolize::{AddrInfo, FuncAtAddr};

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
        FrameRecord { lib: 0, address: 0x1100, kernel: false, symbols: AddrInfo { symbol_start: 0x1100, symbol_offset: 0, symbol_size: Some(0x40), funcs: vec![func("main", 10)] } },
        // 1: work with helper inlined into it
        FrameRecord { lib: 0, address: 0x1210, kernel: false, symbols: AddrInfo { symbol_start: 0x1200, symbol_offset: 0x10, symbol_size: None, funcs: vec![func("work", 20), func("helper", 5)] } },
        // 2: kernel
        FrameRecord { lib: 1, address: 0x5000, kernel: true, symbols: AddrInfo { symbol_start: 0, symbol_offset: 8, symbol_size: None, funcs: vec![FuncAtAddr { name: "do_syscall_64".into(), file: None, line: None }] } },
        // 3: unresolved
        FrameRecord { lib: NO_LIB, address: 0xdead, kernel: false, symbols: AddrInfo::default() },
    ];
    let mut stacks = StackTree::new();
    let main = stacks.child(NO_PARENT, 0);
    let work = stacks.child(main, 1);
    let sys = stacks.child(work, 2);
    let lost = stacks.child(NO_PARENT, 3);
    let samples = ThreadSamples { time_ns: vec![1_000_000, 2_000_000, 3_000_000], stack: vec![work, sys, work], cpu_delta_ns: vec![0, 1_000_000, 2_500] };
    let thread = |tid: u32, name: &str, samples: ThreadSamples| ThreadRecord { tid, name: name.into(), start_ns: None, end_ns: None, samples };
    Recording {
        start_ns: 500_000,
        start_wall_ms: 1_700_000_000_000.0,
        end_ns: 4_000_000,
        interval_ms: 1.0,
        processes: vec![
            ProcessRecord { pid: 0, name: "swapper".into(), exe: None, cmdline: String::new(), start_ns: None, end_ns: None,
                threads: vec![thread(0, "swapper/0", ThreadSamples { time_ns: vec![1_500_000], stack: vec![sys], cpu_delta_ns: vec![0] })] },
            ProcessRecord { pid: 42, name: "app".into(), exe: Some("/usr/bin/app".into()), cmdline: "app".into(), start_ns: Some(0), end_ns: Some(3_500_000),
                threads: vec![thread(42, "app", samples), thread(43, "worker", ThreadSamples { time_ns: vec![2_000_000], stack: vec![lost], cpu_delta_ns: vec![7_000] })] },
        ],
        libs,
        frames,
        stacks,
        stats: RecordingStats::default(),
        warnings: Vec::new(),
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
    let p = build_profile(&recording(), &host());
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
    assert_eq!(app["samples"]["time"], serde_json::json!([0.5, 1.5, 2.5]));
    assert_eq!(app["samples"]["threadCPUDelta"], serde_json::json!([0, 1000, 2]));
}

/// Check that an inlined call becomes a second frame at the same address
/// with inlineDepth 1, that funcs are shared across frames of one symbol,
/// and categories follow user/kernel/idle.
#[test]
fn inlined_functions_get_their_own_frames_and_funcs() {
    let p = build_profile(&recording(), &host());
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
    let p = build_profile(&recording(), &host());
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
    let p = build_profile(&recording(), &host());
    assert_eq!(p["libs"][0]["codeId"], "0102030405060708090a0b0c0d0e0f1011121314");
}
