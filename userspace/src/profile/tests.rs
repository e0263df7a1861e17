//! Unit tests of the writer on a small hand-made recording.

use super::*;
use crate::model::recording::*;
use crate::model::stack_tree::{StackTree, NO_PARENT};
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
        kernel: false,
        symbols: AddrInfo { funcs: vec![FuncAtAddr { name: "[off-CPU: sleeping]".into(), file: None, line: None }], ..AddrInfo::default() },
        pseudo: true,
    });
    let work = rec.processes[1].threads[0].samples.stack[0];
    let sleeping = rec.stacks.child(work, pseudo as u64);
    let t = &mut rec.processes[1].threads[0];
    t.off_cpu = OffCpuSamples { time_ns: vec![2_500_000], stack: vec![sleeping], duration_ns: vec![25_000_000] };
    t.switches = Some((3, 1));
    t.start_ns = Some(100_000);
    t.end_ns = Some(3_400_000);
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 2_500_000,
        end_ns: 27_500_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: Some(50_000),
        waker: Some(Waker { pid: 7, tid: 8, name: "waker".into(), interrupt: None }),
        cpus: (0, 1),
        waker_stack: Some(work),
    });
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: 1_200_000,
        end_ns: 1_300_000,
        reason: OffCpuReason::Sleeping,
        run_delay_ns: None,
        waker: Some(Waker { pid: 9, tid: 9, name: "irq".into(), interrupt: Some(InterruptKind::Hard) }),
        cpus: (1, 1),
        waker_stack: None,
    });
    t.markers.push(MarkerRecord::OffCpu { start_ns: 1_250_000, end_ns: 1_260_000, reason: OffCpuReason::Sleeping, run_delay_ns: None, waker: None, cpus: (0, 0), waker_stack: None });
    t.markers.push(MarkerRecord::Io {
        start_ns: 1_000_000,
        issue_ns: 1_100_000,
        done_ns: 1_900_000,
        device: "sda".into(),
        op: IoOp::Write,
        flags: io_flags::IO_SYNC | io_flags::IO_FUA,
        bytes: 4096,
        sector: 2048,
        error: 0,
        stack: Some(work),
    });
    t.markers.push(MarkerRecord::Io { start_ns: 2_000_000, issue_ns: 2_000_000, done_ns: 2_100_000, device: "nvme0n1".into(), op: IoOp::Flush, flags: io_flags::IO_PREFLUSH, bytes: 0, sector: 0, error: -5, stack: None });
    let thread = |tid: u32, name: &str| ThreadRecord {
        tid,
        name: name.into(),
        start_ns: None,
        end_ns: None,
        samples: ThreadSamples { time_ns: vec![2_200_000], stack: vec![work], cpu_delta_ns: vec![1_000], cpu: vec![1] },
        off_cpu: Default::default(),
        markers: Vec::new(),
        switches: None,
    };
    rec.processes.push(ProcessRecord {
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
            MarkerRecord::OnCpu { start_ns: 2_000_000, end_ns: 2_400_000, pid: 42, tid: 42, name: "app (app, 42)".into(), kind: SliceKind::User },
            MarkerRecord::OnCpu { start_ns: 1_000_000, end_ns: 2_000_000, pid: 0, tid: 0, name: "swapper/1".into(), kind: SliceKind::Idle },
        ],
    ));
    rec.counters.push(CounterRecord { name: "Memory".into(), category: "Memory".into(), description: "RSS, bytes".into(), pid: 42, time_ns: vec![1_000_000, 2_000_000], count: vec![4096.0, -1024.0] });
    rec.counters.push(CounterRecord { name: "CPU usage".into(), category: "CPU".into(), description: "busy CPUs".into(), pid: 0, time_ns: vec![1_000_000], count: vec![1.5] });
    rec.counters.push(CounterRecord { name: "gone".into(), category: "Bandwidth".into(), description: "of no process".into(), pid: 12345, time_ns: vec![1], count: vec![1.0] });
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
    json.replace(&format!("sysprof {} on", env!("CARGO_PKG_VERSION")), "sysprof VERSION on").replace(&format!("\"arch\":\"{}\"", std::env::consts::ARCH), "\"arch\":\"ARCH\"")
}

/// Check that the writer writes exactly the bytes it wrote before the
/// refactor (the golden file) for a recording that uses every part of the
/// format: a refactor must not change a single byte of a profile.
/// `SYSPROF_BLESS=1` rewrites the golden file (only when the format is
/// meant to change).
#[test]
fn writes_the_golden_bytes() {
    let rec = full_recording();
    let json = normalized(&serde_json::to_string(&build_profile(&rec, &host(), Some(42))).unwrap());
    if std::env::var_os("SYSPROF_BLESS").is_some() {
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/src/profile/testdata/full_recording.json"), &json).unwrap();
        return;
    }
    assert_eq!(validate::validate(&serde_json::from_str(&json).unwrap()), Vec::<String>::new());
    assert!(json == GOLDEN, "the profile's bytes changed; first difference at byte {}", json.bytes().zip(GOLDEN.bytes()).position(|(a, b)| a != b).unwrap_or(json.len().min(GOLDEN.len())));
}
