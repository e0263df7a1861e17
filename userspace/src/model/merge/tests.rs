//! The merge's tests: frames interned by hash, clipping, thread parts
//! taken out and put back, and the processes taken out as they end.

use super::*;

fn thread(tid: u32, start_ns: Option<u64>, end_ns: Option<u64>) -> ThreadRecord {
    ThreadRecord {
        tid,
        name: "brief".into(),
        start_ns,
        end_ns,
        samples: ThreadSamples::default(),
        off_cpu: OffCpuSamples::default(),
        markers: Vec::new(),
        switches: None,
    }
}

fn process(pid: u32, t: ThreadRecord) -> ProcessRecord {
    ProcessRecord {
        folded: 0,
        pid,
        name: "brief".into(),
        exe: None,
        cmdline: String::new(),
        start_ns: t.start_ns,
        end_ns: t.end_ns,
        cgroup: None,
        profiler: false,
        threads: vec![t],
    }
}

/// Check that a frame is found by its hash only when the frame at that
/// hash's index is equal: one whose hash another frame had first gets
/// a row of its own, found again by value; equal frames share one.
#[test]
fn frames_with_one_hash_stay_apart() {
    use std::hash::BuildHasher;
    let frame = |address: u64| FrameRecord {
        lib: NO_LIB,
        address,
        kind: FrameKind::Native,
        symbols: Default::default(),
    };
    let (mut by_hash, mut by_value, mut frames) =
        (FxHashMap::default(), FxHashMap::default(), Vec::new());
    assert_eq!(
        super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(1)),
        0
    );
    // A collision, made: frame 2's hash points at frame 1's row.
    by_hash.insert(rustc_hash::FxBuildHasher.hash_one(frame(2)), 0);
    assert_eq!(
        super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(2)),
        1
    );
    assert_eq!(
        super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(2)),
        1
    );
    assert_eq!(
        super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(1)),
        0
    );
    assert_eq!(
        super::intern_frame(&mut by_hash, &mut by_value, &mut frames, frame(3)),
        2
    );
    assert_eq!(frames, vec![frame(1), frame(2), frame(3)]);
}

/// Check that clipping keeps a process that no sample caught but that
/// started or ended inside the range, and drops one that lived wholly
/// outside it or has neither data nor a lifetime there.
#[test]
fn clip_keeps_unsampled_processes_that_lived_in_the_range() {
    let mut rec = Recording {
        start_ns: 0,
        end_ns: 10_000,
        ..Default::default()
    };
    rec.processes = vec![
        process(1, thread(1, Some(2_000), Some(2_020))),
        process(2, thread(2, None, Some(4_500))),
        process(3, thread(3, Some(100), Some(200))),
        process(4, thread(4, None, None)),
    ];
    rec.clip(1_000, 5_000);
    let kept: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
    assert_eq!(kept, vec![1, 2]);
}

/// Check that the merger takes out only what ended by the cut (its
/// threads joined across windows, sorted) with its counters, keeps what
/// still runs or ended later, and finishes with the rest.
#[test]
fn a_part_put_back_comes_first_and_columns_are_in_time_order() {
    let mut t = thread(1, None, None);
    t.samples = ThreadSamples {
        time_ns: vec![30],
        stack: vec![3],
        cpu_delta_ns: vec![3],
        cpu: vec![0],
    };
    t.off_cpu = OffCpuSamples {
        time_ns: vec![25],
        stack: vec![2],
        duration_ns: vec![1],
    };
    let mut earlier = ThreadPart::default();
    earlier.samples = ThreadSamples {
        time_ns: vec![10, 20],
        stack: vec![1, 2],
        cpu_delta_ns: vec![1, 2],
        cpu: vec![1, 1],
    };
    // An interval recorded at its end: out of start order.
    earlier.off_cpu = OffCpuSamples {
        time_ns: vec![26, 5],
        stack: vec![9, 8],
        duration_ns: vec![2, 3],
    };
    earlier.prepend_to(&mut t);
    assert_eq!(t.samples.time_ns, vec![10, 20, 30]);
    assert_eq!(t.samples.stack, vec![1, 2, 3]);
    assert_eq!(t.off_cpu.time_ns, vec![5, 25, 26]);
    assert_eq!(t.off_cpu.stack, vec![8, 2, 9]);
    assert_eq!(t.off_cpu.duration_ns, vec![3, 1, 2]);
}

#[test]
fn parts_are_taken_from_threads_and_cpus_that_have_enough() {
    let short = |at: u64| MarkerRecord::ShortWaits {
        start_ns: at,
        end_ns: at + 1,
        count: 1,
        off_cpu_ns: 1,
        waited_ns: 1,
        landing_ns: 0,
        waker: ShortWaker::Nobody,
    };
    let mut busy = thread(1, Some(10), None);
    busy.markers = (0..5).map(short).collect();
    let mut quiet = thread(2, None, None);
    quiet.markers = vec![short(7)];
    let mut p = process(1, busy);
    p.threads.push(quiet);
    let mut m = Merger::default();
    m.add(Recording {
        processes: vec![p],
        cpu_tracks: vec![(0, (0..3).map(short).collect()), (1, vec![short(9)])],
        ..Default::default()
    });
    let mut taken = m.take_parts(3);
    taken.sort_by_key(|(o, _)| format!("{o:?}"));
    let owners: Vec<TrackKey> = taken.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        owners,
        vec![
            TrackKey::Cpu(0),
            TrackKey::Thread {
                pid: 1,
                process_start_ns: Some(10),
                tid: 1,
                thread_start_ns: Some(10),
            },
        ]
    );
    assert_eq!(
        taken[1].1.markers,
        (0..5).map(short).collect::<Vec<_>>(),
        "in their order"
    );
    // What is left: the quiet thread's and CPU 1's, and nothing twice.
    assert!(m.take_parts(3).is_empty());
    let rest = m.finish();
    let left: usize = rest.processes[0]
        .threads
        .iter()
        .map(|t| t.markers.len())
        .sum();
    assert_eq!(left, 1);
    assert_eq!(
        rest.cpu_tracks
            .iter()
            .map(|(_, m)| m.len())
            .collect::<Vec<_>>(),
        vec![0, 1]
    );
}

#[test]
fn take_ended_takes_only_what_ended_by_the_cut() {
    // Each window's one stack: node 0, one frame.
    let window = |start: u64, end: u64, processes: Vec<ProcessRecord>| {
        let mut stacks = super::super::stack_tree::StackTree::new();
        stacks.child(NO_PARENT, 0);
        Recording {
            start_ns: start,
            start_wall_ms: start as f64 / 1e6,
            end_ns: end,
            processes,
            frames: vec![FrameRecord {
                lib: NO_LIB,
                address: 0x10,
                kind: FrameKind::Native,
                symbols: Default::default(),
            }],
            stacks,
            counters: vec![CounterRecord {
                name: "CPU".into(),
                category: "CPU".into(),
                description: String::new(),
                pid: 1,
                time_ns: vec![start],
                count: vec![1.0],
                base: None,
            }],
            ..Default::default()
        }
    };
    let with_sample = |mut t: ThreadRecord, at: u64| {
        t.samples = ThreadSamples {
            time_ns: vec![at],
            stack: vec![0],
            cpu_delta_ns: vec![0],
            cpu: vec![0],
        };
        t
    };
    let mut m = Merger::default();
    // Process 1 runs in both windows and ends in the second; process 2
    // ended in the first; process 3 runs on.
    let mut p1 = process(1, with_sample(thread(1, Some(10), None), 100));
    p1.end_ns = None;
    m.add(window(
        0,
        1_000,
        vec![
            p1,
            process(2, thread(2, Some(20), Some(500))),
            process(3, thread(3, Some(30), None)),
        ],
    ));
    let mut p1 = process(1, with_sample(thread(1, Some(10), Some(1_500)), 1_200));
    p1.start_ns = Some(10);
    m.add(window(1_000, 2_000, vec![p1]));
    let (taken, counters) = m.take_ended(1_000);
    assert_eq!(
        taken.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![2],
        "only what ended by the cut"
    );
    assert!(counters.is_empty(), "process 2 has no counter");
    let (taken, counters) = m.take_ended(2_000);
    assert_eq!(taken.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        taken[0].threads[0].samples.time_ns,
        vec![100, 1_200],
        "one thread, both windows' samples"
    );
    assert_eq!(counters.len(), 1);
    assert_eq!(
        counters[0].time_ns,
        vec![0, 1_000],
        "its counter from both windows"
    );
    let rest = m.finish();
    assert_eq!(
        rest.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![3]
    );
    assert!(rest.counters.is_empty());
    assert_eq!((rest.start_ns, rest.end_ns), (0, 2_000));
}

/// Check that a compaction's merge leaves Go goroutines' id frames out:
/// each goroutine's samples land on the stack its labels frame roots, the
/// same node for two goroutines, and no goroutine frame is kept.
#[test]
fn compaction_joins_goroutines_stacks() {
    use crate::model::goroutine_labels::{goroutine_name, labels_name};
    let window = |start_ns: u64, goroutine: u64| {
        let mut t = thread(7, None, None);
        t.samples = ThreadSamples {
            time_ns: vec![start_ns + 1_000_000, start_ns + 2_000_000],
            stack: vec![0, 0],
            cpu_delta_ns: vec![1_000_000; 2],
            cpu: vec![0; 2],
        };
        let mut rec = Recording {
            start_ns,
            end_ns: start_ns + 1_000_000_000,
            start_wall_ms: start_ns as f64 / 1e6,
            interval_ms: 1.0,
            processes: vec![process(7, t)],
            ..Default::default()
        };
        rec.frames.push(FrameRecord {
            lib: NO_LIB,
            address: 0x1000,
            kind: FrameKind::Native,
            symbols: Default::default(),
        });
        let pseudo = FrameRecord::named;
        let l = rec.frames.len() as u64;
        let labels = [("handler".to_string(), "alpha".to_string())];
        rec.frames
            .push(pseudo(FrameKind::GoLabels, labels_name(&labels)));
        rec.frames
            .push(pseudo(FrameKind::Goroutine, goroutine_name(goroutine)));
        let root = rec.stacks.child(NO_PARENT, l);
        let g = rec.stacks.child(root, l + 1);
        let leaf = rec.stacks.child(g, 0);
        let bare = rec.stacks.child(NO_PARENT, 0);
        rec.processes[0].threads[0].samples.stack = vec![leaf, bare];
        rec
    };
    let (a, b) = (window(1_000_000_000, 17), window(2_000_000_000, 18));
    let samples = a.sample_count() + b.sample_count();
    let merged = merge_without_goroutines(vec![a, b]);
    assert_eq!(merged.sample_count(), samples);
    assert!(merged.frames.iter().all(|f| f.kind != FrameKind::Goroutine));
    let labelled: Vec<u32> = merged.processes[0].threads[0]
        .samples
        .stack
        .iter()
        .copied()
        .filter(|&n| {
            let parent = merged.stacks.parent(n);
            parent != NO_PARENT
                && merged.frames[merged.stacks.key(parent) as usize].kind == FrameKind::GoLabels
        })
        .collect();
    assert_eq!(
        labelled.len(),
        2,
        "{:?}",
        merged.processes[0].threads[0].samples
    );
    assert_eq!(labelled[0], labelled[1], "one node for both goroutines");
}

/// Check that a folded track keeps its name and count when its first
/// member's own record (the same pid and start) comes from another
/// window, whichever comes first, and that two tracks under one key count
/// their members together. Before, the member's record renamed the track
/// `brief`, cut its span to its own and took its cgroup, and a track
/// joining a member lost its count.
#[test]
fn a_folded_track_keeps_its_count_beside_its_first_members_record() {
    let window = |p: ProcessRecord| Recording {
        start_ns: 0,
        end_ns: 10_000,
        processes: vec![p],
        ..Default::default()
    };
    // The track's span outlasts its first member's; its cgroup is the one
    // its members share.
    let track = |members: u64| {
        let mut p = process(7, thread(7, Some(1_000), Some(5_000)));
        p.cgroup = Some("/a".into());
        crate::model::fold::label_track(&mut p, "brief", members);
        p
    };
    let member = || {
        let mut p = process(7, thread(7, Some(1_000), Some(1_010)));
        p.cmdline = "brief --once".into();
        p
    };
    for (first, second, members) in [
        (track(40), member(), 40),
        (member(), track(40), 40),
        (track(40), track(2), 42),
    ] {
        let mut m = Merger::default();
        m.add(window(first));
        m.add(window(second));
        let out = m.finish();
        assert_eq!(out.processes.len(), 1);
        let p = &out.processes[0];
        assert_eq!(
            (p.name.as_str(), p.folded, p.base_name()),
            (format!("brief ×{members}").as_str(), members, "brief")
        );
        assert!(
            p.cmdline.starts_with(&format!("{members} brief processes")),
            "{}",
            p.cmdline
        );
        assert_eq!(p.threads[0].name, p.name);
        assert_eq!((p.end_ns, p.threads[0].end_ns), (Some(5_000), Some(5_000)));
        assert_eq!(p.cgroup.as_deref(), Some("/a"));
    }
}
