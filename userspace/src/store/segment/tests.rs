//! The segment format's tests, with the recordings the store's and the
//! exporters' tests use, and the VERSION 2 fixture's content.
use super::*;
use crate::model::recording::*;
use crate::model::stack_tree::NO_PARENT;

pub(crate) fn sample_recording(start_ns: u64) -> Recording {
    let mut rec = Recording {
        start_ns,
        end_ns: start_ns + 10_000_000_000,
        start_wall_ms: 1.7e12,
        interval_ms: 52.6,
        ..Default::default()
    };
    rec.libs.push(LibRecord {
        path: "/usr/bin/x".into(),
        name: "x".into(),
        build_id: Some(vec![1, 2, 3]),
    });
    rec.frames.push(FrameRecord {
        lib: 0,
        address: 0x1234,
        kind: FrameKind::Native,
        symbols: Default::default(),
    });
    rec.frames.push(FrameRecord {
        lib: NO_LIB,
        address: 0x99,
        kind: FrameKind::Native,
        symbols: Default::default(),
    });
    let a = rec.stacks.child(NO_PARENT, 0);
    let b = rec.stacks.child(a, 1);
    let samples = ThreadSamples {
        time_ns: vec![
            start_ns + 5000,
            start_ns + 52_000_000,
            start_ns + 104_000_000,
        ],
        stack: vec![a, b, b],
        cpu_delta_ns: vec![1000, 2000, 3000],
        cpu: vec![0; 3],
    };
    rec.processes.push(ProcessRecord {
        folded: 0,
        pid: 7,
        name: "x".into(),
        exe: None,
        cmdline: "x --y".into(),
        start_ns: None,
        end_ns: None,
        cgroup: None,
        profiler: false,
        threads: vec![ThreadRecord {
            tid: 7,
            name: "x".into(),
            start_ns: None,
            end_ns: None,
            samples,
            off_cpu: OffCpuSamples {
                time_ns: vec![start_ns.saturating_sub(3_000_000), start_ns + 7_000_000],
                stack: vec![a, b],
                duration_ns: vec![5_000_000, 1000],
            },
            markers: vec![
                MarkerRecord::OffCpu {
                    start_ns: start_ns.saturating_sub(3_000_000),
                    end_ns: start_ns + 2_000_000,
                    reason: OffCpuReason::Sleeping,
                    run_delay_ns: Some(4000),
                    landing_ns: 0,
                    waker: None,
                    cpus: (0, 1),
                    waker_stack: Some(b),
                },
                MarkerRecord::Io {
                    start_ns: start_ns + 1000,
                    issue_ns: start_ns + 2000,
                    done_ns: start_ns + 9000,
                    device: crate::model::short_name::short_name("sda"),
                    op: IoOp::Read,
                    flags: 0,
                    bytes: 4096,
                    sector: 8,
                    error: 0,
                    stack: None,
                },
            ],
            switches: None,
        }],
    });
    rec.counters.push(CounterRecord {
        name: "CPU usage".into(),
        category: "CPU".into(),
        description: String::new(),
        pid: 0,
        time_ns: vec![start_ns + 1000, start_ns + 2000],
        count: vec![1.0, 2.0],
        base: None,
    });
    rec
}

/// A recording that holds every stored type and every enum variant,
/// its times in whole µs (so it comes back exactly): the content of the
/// committed VERSION 2 fixture, tests/data/segment-v2.seg.
pub(crate) fn fixture_recording() -> Recording {
    use crate::model::symbols::{AddrInfo, FuncAtAddr};
    let start_ns = 3_000_000_000;
    let mut rec = sample_recording(start_ns);
    rec.libs.push(LibRecord {
        path: "[kernel.kallsyms]".into(),
        name: "kernel".into(),
        build_id: None,
    });
    rec.frames.push(FrameRecord {
        lib: 1,
        address: 0xffff_0000,
        kind: FrameKind::Kernel,
        symbols: AddrInfo {
            symbol_start: 0xfff0_0000,
            symbol_offset: 0x10,
            symbol_size: Some(64),
            funcs: vec![
                FuncAtAddr {
                    name: "outer".into(),
                    file: Some("a.c".into()),
                    line: Some(12),
                    start_line: None,
                },
                FuncAtAddr {
                    name: "inlined".into(),
                    file: None,
                    line: None,
                    start_line: None,
                },
            ],
        },
    });
    rec.frames.push(FrameRecord {
        lib: NO_LIB,
        address: 0,
        kind: FrameKind::Missing,
        symbols: Default::default(),
    });
    let c = rec.stacks.child(NO_PARENT, 2);
    let d = rec.stacks.child(c, 3);
    let p = &mut rec.processes[0];
    p.exe = Some("/usr/bin/x".into());
    p.start_ns = Some(start_ns - 1_000_000);
    p.end_ns = Some(start_ns + 9_000_000_000);
    p.cgroup = Some("/system.slice/x.service".into());
    let t = &mut p.threads[0];
    t.start_ns = Some(start_ns + 2_000);
    t.end_ns = Some(start_ns + 8_000_000_000);
    t.switches = Some((5, 6));
    t.markers.push(MarkerRecord::OffCpu {
        start_ns: start_ns + 20_000_000,
        end_ns: start_ns + 30_000_000,
        reason: OffCpuReason::Blocked,
        run_delay_ns: None,
        landing_ns: 0,
        waker: Some(Waker {
            pid: 9,
            tid: 10,
            name: crate::model::short_name::short_name("w"),
            interrupt: None,
        }),
        cpus: (2, 3),
        waker_stack: None,
    });
    for (i, (reason, kind)) in [
        (OffCpuReason::Preempted, InterruptKind::Hard),
        (OffCpuReason::Other, InterruptKind::Soft),
        (OffCpuReason::Sleeping, InterruptKind::Unknown),
    ]
    .into_iter()
    .enumerate()
    {
        let s = start_ns + 40_000_000 + i as u64 * 1_000_000;
        t.markers.push(MarkerRecord::OffCpu {
            start_ns: s,
            end_ns: s + 500_000,
            reason,
            run_delay_ns: Some(7_000),
            landing_ns: 0,
            waker: Some(Waker {
                pid: 0,
                tid: 0,
                name: crate::model::short_name::short_name("swapper"),
                interrupt: Some(kind),
            }),
            cpus: (1, 1),
            waker_stack: Some(d),
        });
    }
    for (i, op) in [
        IoOp::Write,
        IoOp::Flush,
        IoOp::Discard,
        IoOp::SecureErase,
        IoOp::WriteZeroes,
        IoOp::Other(17),
    ]
    .into_iter()
    .enumerate()
    {
        let s = start_ns + 50_000_000 + i as u64 * 1_000_000;
        t.markers.push(MarkerRecord::Io {
            start_ns: s,
            issue_ns: s + 3_000,
            done_ns: s + 90_000,
            device: crate::model::short_name::short_name("nvme0n1"),
            op,
            flags: 5,
            bytes: 512,
            sector: 1 << 33,
            error: -5,
            stack: Some(c),
        });
    }
    p.threads.push(ThreadRecord {
        tid: 8,
        name: "worker".into(),
        start_ns: None,
        end_ns: None,
        samples: ThreadSamples {
            time_ns: vec![start_ns + 1_000, start_ns + 3_000],
            stack: vec![d, c],
            cpu_delta_ns: vec![0, 7_000],
            cpu: vec![3, 1],
        },
        off_cpu: OffCpuSamples::default(),
        markers: Vec::new(),
        switches: None,
    });
    rec.processes.push(ProcessRecord {
        folded: 0,
        pid: 1,
        name: "init".into(),
        exe: None,
        cmdline: String::new(),
        start_ns: None,
        end_ns: None,
        cgroup: None,
        profiler: true,
        threads: Vec::new(),
    });
    rec.cpu_tracks.push((
        0,
        vec![
            MarkerRecord::OnCpu {
                start_ns: start_ns + 1_000,
                end_ns: start_ns + 9_000,
                pid: 7,
                tid: 7,
                name: "x (x, 7)".into(),
                kind: SliceKind::User,
            },
            MarkerRecord::OnCpu {
                start_ns: start_ns + 10_000,
                end_ns: start_ns + 19_000,
                pid: 0,
                tid: 0,
                name: "swapper".into(),
                kind: SliceKind::Idle,
            },
        ],
    ));
    rec.cpu_tracks.push((
        3,
        vec![MarkerRecord::OnCpu {
            start_ns: start_ns + 4_000,
            end_ns: start_ns + 5_000,
            pid: 2,
            tid: 2,
            name: "kthreadd".into(),
            kind: SliceKind::Kernel,
        }],
    ));
    rec.counters.push(CounterRecord {
        name: "Memory".into(),
        category: "Memory".into(),
        description: "RSS, bytes".into(),
        pid: 7,
        time_ns: vec![start_ns + 5_000],
        count: vec![-4096.5],
        // Not stored: a level read back is not known.
        base: None,
    });
    rec.stats = RecordingStats {
        samples: 1,
        samples_kept: 2,
        lost_samples: 3,
        kernel_stack_failures: 4,
        user_stack_failures: 5,
        handovers_skipped: 0,
        tracepoint_runs_missed: 0,
        lost_sideband: 6,
        malformed: 7,
        off_cpu_intervals: 8,
        off_cpu_folded: 9,
        off_cpu_end_inferred: 10,
        io_requests: 11,
        lost_events: 12,
        lost_stacks: 13,
        stack_records: 14,
        stack_read_failures: 15,
        stacks_not_kept: 16,
        lost_state: 17,
        io_untracked: 18,
        processes_without_data: 19,
        python_frames_unnamed: 0,
        js_frames_unnamed: 0,
        python_codes_replaced: 0,
        tracer_bytes: 0,
        samples_ring_peak: 0,
        events_ring_peak: 0,
        unwind: UnwindStats {
            unwinds: 20,
            reached_root: 21,
            copy_exhausted: 22,
            copy_exhausted_in_profiler: 23,
            no_unwind_info: 24,
            bad_return_address: 25,
            unwind_ns: 26,
            unwinds_here: 0,
            copied_bytes: 0,
            copy_exhausted_at_size: 0,
        },
    };
    rec.warnings = vec!["a warning".into()];
    rec.notes = vec!["a note".into(), "another".into()];
    rec.off_cpu = true;
    rec
}

/// The window the fixture holds.
pub(crate) fn fixture_span() -> WindowSpan {
    WindowSpan {
        start_ms: 1.7e12,
        end_ms: 1.7e12 + 10_000.0,
    }
}

/// Check that the store's own types encode a recording without short
/// waits or start lines to the very bytes the VERSION 2 code wrote
/// (VERSION 3 only added a marker variant at the end; VERSION 4 the
/// additions after the recording, here an empty list, one byte; VERSION 5
/// the landings after them, here their count and a 0 for each; VERSION 6
/// the frames' kinds, their count and a byte each; VERSIONs 7 to 11
/// and 13 only more kinds; VERSION 12 other numbers, the same once [`predict`] is
/// undone): the
/// fixture's header, and its payload once decompressed (zstd's output may change with its version;
/// what it decompresses to may not). The fixture was written at commit
/// c9f9c20 (postcard of the engine's `Recording`) by
/// `encode(fixture_recording(), vec![fixture_span()], 0, 3)`.
#[test]
fn stored_types_encode_as_version_2_did() {
    let old = fixture_bytes();
    let (_, new) = encode(fixture_recording(), vec![fixture_span()], 0, 3).unwrap();
    let (old_header, at) = decode_header(&old, old.len() as u64).unwrap();
    let (new_header, new_at) = decode_header(&new, new.len() as u64).unwrap();
    assert_eq!(new[..8], old[..8], "magic");
    assert_eq!(new[8..10], VERSION.to_le_bytes(), "version");
    assert_eq!(old[8..10], 2u16.to_le_bytes(), "the fixture's version");
    let raw = |b: &[u8], h: &SegmentHeader| zstd::bulk::decompress(b, h.raw_len as usize).unwrap();
    let (new_raw, old_raw) = (
        raw(&new[new_at..], &new_header),
        raw(&old[at..], &old_header),
    );
    let (mut stored, tail_bytes): (StoredRecording, &[u8]) =
        postcard::take_from_bytes(&new_raw).unwrap();
    let predicted_len = new_raw.len() - tail_bytes.len();
    unpredict(&mut stored);
    let unpredicted = postcard::to_stdvec(&stored).unwrap();
    assert_eq!(
        unpredicted[..],
        old_raw[..],
        "payload, its numbers as VERSION 2 coded them"
    );
    let new_raw = [&unpredicted[..], &new_raw[predicted_len..]].concat();
    let with_landing = fixture_recording()
        .processes
        .iter()
        .flat_map(|p| &p.threads)
        .flat_map(|t| &t.markers)
        .filter(|m| {
            matches!(
                m,
                MarkerRecord::OffCpu { .. } | MarkerRecord::ShortWaits { .. }
            )
        })
        .count();
    assert!((1..128).contains(&with_landing), "a one-byte count");
    let mut tail = vec![0u8, with_landing as u8];
    tail.extend(std::iter::repeat_n(0u8, with_landing));
    let frames = &fixture_recording().frames;
    assert!((1..128).contains(&frames.len()), "a one-byte count");
    tail.push(frames.len() as u8);
    tail.extend(frames.iter().map(|f| f.kind as u8));
    // No folded track.
    tail.push(0);
    assert_eq!(
        new_raw[old_raw.len()..],
        tail[..],
        "the additions (no start lines), the landings (all 0), the frames' kinds and the folded tracks (none)"
    );
    assert_eq!(
        (new_raw.len() as u64, new_header.samples, new_header.lost),
        (
            old_header.raw_len + tail.len() as u64,
            old_header.samples,
            old_header.lost
        )
    );
    assert_eq!(new_header.windows, old_header.windows);
}

/// Field by field (a recording has no `PartialEq`: its stack tree's index).
pub(crate) fn assert_same(a: &Recording, b: &Recording) {
    assert_eq!(
        (
            a.start_ns,
            a.start_wall_ms,
            a.end_ns,
            a.interval_ms,
            a.off_cpu
        ),
        (
            b.start_ns,
            b.start_wall_ms,
            b.end_ns,
            b.interval_ms,
            b.off_cpu
        )
    );
    assert_eq!(a.processes, b.processes);
    assert_eq!(a.libs, b.libs);
    assert_eq!(a.frames, b.frames);
    assert_eq!(a.stacks.columns(), b.stacks.columns());
    assert_eq!(a.stats, b.stats);
    assert_eq!((&a.warnings, &a.notes), (&b.warnings, &b.notes));
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.cpu_tracks, b.cpu_tracks);
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segment-v2.seg"),
    )
    .unwrap()
}

/// Check that the VERSION 2 segment committed as a fixture (written by
/// the code before the store had its own types) still decodes to the
/// recording it was made from, header included.
#[test]
fn version_2_fixture_still_decodes() {
    let (header, rec) = decode(&fixture_bytes()).unwrap();
    assert_eq!(header.windows, vec![fixture_span()]);
    assert_eq!(
        (header.level, header.samples, header.processes, header.lost),
        (0, 5, 2, 3 + 6 + 7 + 12 + 13 + 17)
    );
    assert_same(&rec, &fixture_recording());
}

/// Check that VERSION 12 stores the samples of a thread that ran between
/// them as zeros after its first (their time the interval, their CPU time
/// the time since the sample before) and a frame's symbol start as 0 where
/// it is the frame less its offset, and that they decode as they were.
#[test]
fn predicted_numbers_are_zero_where_the_prediction_holds() {
    let mut rec = sample_recording(5_000_000_000);
    let interval_ns = (rec.interval_ms * 1e6) as u64;
    let t = &mut rec.processes[0].threads[0];
    let first = t.samples.stack[0];
    t.samples.time_ns = (0..20)
        .map(|k| 5_000_000_000 + 3_000 + k * interval_ns)
        .collect();
    t.samples.cpu_delta_ns = vec![interval_ns; 20];
    t.samples.stack = vec![first; 20];
    t.samples.cpu = vec![1; 20];
    let f = &mut rec.frames[0];
    f.symbols.symbol_start = f.address - 0x40;
    f.symbols.symbol_offset = 0x40;
    let mut stored = StoredRecording::from(rec.clone());
    times_to_deltas(&mut stored);
    predict(&mut stored);
    let s = &stored.processes[0].threads[0].samples;
    assert!(s.time_ns[1..].iter().all(|&x| x == 0), "{:?}", s.time_ns);
    assert!(
        s.cpu_delta_ns[1..].iter().all(|&x| x == 0),
        "{:?}",
        s.cpu_delta_ns
    );
    assert_eq!(stored.frames[0].symbols.symbol_start, 0);
    let (_, bytes) = encode(rec.clone(), vec![fixture_span()], 0, 3).unwrap();
    let (_, back) = decode(&bytes).unwrap();
    assert_same(&back, &rec);
}

/// Check that a segment's bytes by kind add up to the file and that each
/// kind the recording holds has some: what `show --list --sizes` says.
#[test]
fn part_sizes_add_up_to_the_file() {
    let rec = sample_recording(5_000_000_000);
    let (_, bytes) = encode(rec, vec![fixture_span()], 1, 6).unwrap();
    let p = part_sizes(&bytes).unwrap();
    assert!(
        (p.total() - bytes.len() as f64).abs() < 1.0,
        "{p:?} against {}",
        bytes.len()
    );
    assert!(
        p.samples > 0.0 && p.frames > 0.0 && p.stacks > 0.0 && p.names > 0.0,
        "{p:?}"
    );
    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    assert!(part_sizes(&damaged).is_err());
}

/// Check that a segment of another format version is refused with one
/// line that names the version found and the one this sysprof reads.
#[test]
fn unknown_version_is_refused_by_version() {
    let mut bytes = fixture_bytes();
    let next = VERSION + 1;
    bytes[8..10].copy_from_slice(&next.to_le_bytes());
    let e = decode(&bytes).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("segment format version {next}, this sysprof reads 2 to {VERSION}")
    );
}

/// Check that Python functions' first lines (what tells two functions of
/// one name and file apart) come back from a segment, and that an
/// addition naming a frame the recording lacks is refused.
#[test]
fn start_lines_round_trip() {
    let mut rec = fixture_recording();
    let named = rec
        .frames
        .iter()
        .position(|f| !f.symbols.funcs.is_empty())
        .expect("a named frame");
    rec.frames[named].symbols.funcs[0].start_line = Some(41);
    let (_, bytes) = encode(rec.clone(), vec![fixture_span()], 0, 3).unwrap();
    let (_, back) = decode(&bytes).unwrap();
    assert_eq!(back.frames[named].symbols.funcs[0].start_line, Some(41));
    assert_same(&back, &rec);
    let mut bad = crate::store::format::StoredAdditions {
        start_lines: vec![(rec.frames.len() as u32, 0, 1)],
    };
    assert!(!bad.clone().apply(&mut rec));
    bad.start_lines = vec![(0, 99, 1)];
    assert!(!bad.apply(&mut rec));
}

/// Check that a recording with short-wait runs of every waker kind comes
/// back from a segment as it went in, its times and sums in µs.
#[test]
fn short_waits_round_trip() {
    let mut rec = fixture_recording();
    let markers = &mut rec.processes[0].threads[0].markers;
    for (i, waker) in [
        ShortWaker::Nobody,
        ShortWaker::Unseen,
        ShortWaker::Task { pid: 9, tid: 10 },
        ShortWaker::Interrupt,
        ShortWaker::Several,
    ]
    .into_iter()
    .enumerate()
    {
        let start = 3_060_000_000 + i as u64 * 1_000_000;
        markers.push(MarkerRecord::ShortWaits {
            start_ns: start,
            end_ns: start + 900_000,
            count: 40 + i as u32,
            off_cpu_ns: 300_000,
            waited_ns: 120_000,
            landing_ns: 0,
            waker,
        });
    }
    let (_, bytes) = encode(rec.clone(), vec![fixture_span()], 0, 3).unwrap();
    let (_, back) = decode(&bytes).unwrap();
    assert_same(&back, &rec);
}

/// Check that wakeups' landings come back from a segment apart from the
/// run delay, in µs (rounded as times are), for off-CPU markers and
/// short-wait runs alike; and that landings that do not match the markers
/// with one in number are refused.
#[test]
fn landings_round_trip_apart_from_run_delay() {
    let mut rec = fixture_recording();
    let markers = &mut rec.processes[0].threads[0].markers;
    let mut landings = 0;
    for m in markers.iter_mut() {
        if let MarkerRecord::OffCpu { landing_ns, .. } = m {
            landings += 1;
            *landing_ns = 12_345 * landings;
        }
    }
    assert!(landings > 1, "the fixture has off-CPU markers");
    markers.push(MarkerRecord::ShortWaits {
        start_ns: 3_060_000_000,
        end_ns: 3_060_900_000,
        count: 40,
        off_cpu_ns: 300_000,
        waited_ns: 120_000,
        landing_ns: 40_400,
        waker: ShortWaker::Task { pid: 9, tid: 10 },
    });
    let (_, bytes) = encode(rec.clone(), vec![fixture_span()], 0, 3).unwrap();
    let (_, back) = decode(&bytes).unwrap();
    let landing_and_delay = |r: &Recording| -> Vec<(u64, Option<u64>)> {
        r.processes[0].threads[0]
            .markers
            .iter()
            .filter_map(|m| match m {
                MarkerRecord::OffCpu {
                    landing_ns,
                    run_delay_ns,
                    ..
                } => Some((*landing_ns, *run_delay_ns)),
                MarkerRecord::ShortWaits { landing_ns, .. } => Some((*landing_ns, None)),
                _ => None,
            })
            .collect()
    };
    let want: Vec<(u64, Option<u64>)> = landing_and_delay(&rec)
        .into_iter()
        .map(|(l, d)| ((l + 500) / 1000 * 1000, d))
        .collect();
    assert_eq!(landing_and_delay(&back), want);
    assert_eq!(want.last(), Some(&(40_000, None)));
    let mut short = crate::store::format::StoredLandings::of(&mut rec.clone());
    short.landing_us.pop();
    assert!(!short.apply(&mut rec.clone()));
    let mut long = crate::store::format::StoredLandings::of(&mut rec.clone());
    long.landing_us.push(1);
    assert!(!long.apply(&mut rec));
}

/// Check that a recording whose times are whole µs comes back as it went
/// in (intervals that began before the window included), header too;
/// and that times in ns come back within half a µs, with sums of CPU
/// time within half a µs however many samples add up.
#[test]
fn times_round_to_microseconds_and_sums_hold() {
    let mut rec = sample_recording(5_000_000_000);
    let t = &mut rec.processes[0].threads[0];
    t.samples.time_ns = (0..1000)
        .map(|i| 5_000_000_000 + i * 52_631_579 + (i * 7919) % 1000)
        .collect();
    t.samples.cpu_delta_ns = (0..1000)
        .map(|i| 52_000_000 + (i * 104_729) % 999)
        .collect();
    t.samples.stack = vec![0; 1000];
    t.samples.cpu = vec![1; 1000];
    let want_sum: u64 = t.samples.cpu_delta_ns.iter().sum();
    let want_times = t.samples.time_ns.clone();
    let (_, bytes) = encode(
        rec,
        vec![WindowSpan {
            start_ms: 0.0,
            end_ms: 1.0,
        }],
        0,
        3,
    )
    .unwrap();
    let (_, back) = decode(&bytes).unwrap();
    let t = &back.processes[0].threads[0];
    let sum: u64 = t.samples.cpu_delta_ns.iter().sum();
    assert!(sum.abs_diff(want_sum) <= 500, "{sum} vs {want_sum}");
    for (a, b) in t.samples.time_ns.iter().zip(&want_times) {
        assert!(a.abs_diff(*b) <= 500, "{a} vs {b}");
    }
}

/// Check that a recording comes back as it went in, header included.
#[test]
fn round_trips() {
    let rec = sample_recording(5_000_000_000);
    let span = WindowSpan {
        start_ms: 1.7e12,
        end_ms: 1.7e12 + 10_000.0,
    };
    let (h, bytes) = encode(rec.clone(), vec![span], 0, 3).unwrap();
    let (h2, back) = decode(&bytes).unwrap();
    assert_eq!(h, h2);
    assert_eq!(h.samples, 3);
    assert_eq!(back.processes, rec.processes);
    assert_eq!(back.counters, rec.counters);
    assert_eq!(back.frames, rec.frames);
    assert_eq!(back.stacks.columns(), rec.stacks.columns());
    let (h3, at) = decode_header(
        &bytes[..header_read_len(&bytes[..20]).unwrap()],
        bytes.len() as u64,
    )
    .unwrap();
    assert_eq!(h3, h);
    assert!(at < bytes.len());
}

/// Check that a folded track keeps its count through a segment (VERSION
/// 14), and a process of its own stays one.
#[test]
fn folded_tracks_round_trip() {
    let mut rec = sample_recording(5_000_000_000);
    let mut track = rec.processes[0].clone();
    track.pid = 1000;
    track.name = "true ×40".into();
    track.folded = 40;
    rec.processes.push(track);
    let span = WindowSpan {
        start_ms: 1.7e12,
        end_ms: 1.7e12 + 10_000.0,
    };
    let (_, bytes) = encode(rec.clone(), vec![span], 1, 3).unwrap();
    let (_, back) = decode(&bytes).unwrap();
    assert_eq!(back.processes, rec.processes);
    assert_eq!(
        back.processes.iter().map(|p| p.folded).collect::<Vec<_>>(),
        vec![0, 40]
    );
    assert_eq!(back.processes[1].base_name(), "true");
}

/// Check that every single flipped byte and every truncation is an
/// error, never a panic or a wrong recording.
#[test]
fn damage_is_an_error() {
    let (_, bytes) = encode(
        sample_recording(1),
        vec![WindowSpan {
            start_ms: 0.0,
            end_ms: 1.0,
        }],
        0,
        3,
    )
    .unwrap();
    for i in 0..bytes.len() {
        let mut d = bytes.clone();
        d[i] ^= 0x5a;
        assert!(decode(&d).is_err(), "byte {i} flipped went unnoticed");
    }
    for n in 0..bytes.len() {
        assert!(
            decode(&bytes[..n]).is_err(),
            "truncated to {n} went unnoticed"
        );
    }
}

/// Check that a payload whose columns are inconsistent (written by a
/// buggy or hostile writer with valid checksums) is refused.
#[test]
fn inconsistent_payload_is_refused() {
    let mut rec = sample_recording(1);
    rec.processes[0].threads[0].samples.stack[1] = 99;
    let (_, bytes) = encode(
        rec,
        vec![WindowSpan {
            start_ms: 0.0,
            end_ms: 1.0,
        }],
        0,
        3,
    )
    .unwrap();
    let e = decode(&bytes).unwrap_err().to_string();
    assert!(e.contains("stack that does not exist"), "{e}");
}
