//! Unit tests of the collector: records in, a window's recording out.

use super::*;
use crate::model::recording::InterruptKind;

const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000d40 T asm_common_interrupt
ffffffff81100000 t try_to_wake_up
ffffffff81100400 T __schedule
ffffffff81100900 T schedule
ffffffff81100a00 T do_nanosleep
ffffffff81300000 T __traceiter_sched_switch
ffffffff81300100 T bpf_trace_run4
ffffffff81500000 T common_interrupt
ffffffff81600000 T blk_mq_complete_request
ffffffff81700000 T ksys_read
ffffffffc0001000 t bpf_prog_6deef7357e7b4530_on_sched_switch\t[bpf]
";

fn collector(filter: PidFilter) -> Collector {
    let mut c = Collector::new(
        filter,
        CollectorOptions {
            off_cpu: true,
            ..Default::default()
        },
    );
    c.set_kernel_symbols(Arc::new(KernelSymbols::parse(KALLSYMS)));
    c
}

fn range(start: u64, end: u64) -> WindowRange {
    WindowRange {
        start_ns: start,
        end_ns: end,
        start_wall_ms: 0.0,
        interval_ms: 1.0,
        continuous: false,
    }
}

fn mmap(time: u64, pid: u32, path: &str) -> MmapEvent {
    MmapEvent {
        time,
        pid,
        start: 0x40_0000,
        len: 0x1000,
        pgoff: 0x2000,
        path: path.into(),
        build_id: None,
        inode: None,
    }
}

/// (`runtime` is exact at `time`: the scheduler updated it then.)
fn sample(
    c: &mut Collector,
    time: u64,
    pid: u32,
    tid: u32,
    runtime: u64,
    ustack: &[u64],
    kstack: &[u64],
) {
    sample_updated_at(c, time, pid, tid, runtime, time, ustack, kstack);
}

/// A sample whose `runtime` the scheduler last updated at `exec_start` (its clock).
#[allow(clippy::too_many_arguments)]
fn sample_updated_at(
    c: &mut Collector,
    time: u64,
    pid: u32,
    tid: u32,
    runtime: u64,
    exec_start: u64,
    ustack: &[u64],
    kstack: &[u64],
) {
    c.handle_sample(&SampleView {
        cpu: 0,
        time_ns: time,
        sum_exec_runtime: runtime,
        exec_start,
        pid,
        tid,
        flags: 0,
        comm: b"app",
        kstack,
        user: UserStack::Frames(ustack),
    });
}

/// A stack record of `tid` (frame-pointer mode).
fn stack_record(c: &mut Collector, pid: u32, tid: u32, id: u64, user: &[u64], kernel: &[u64]) {
    let e = StackEvent {
        kind: abi::RECORD_STACK,
        flags: 0,
        id,
        pid,
        tid,
        kstack_len: kernel.len() as u32,
        ustack_len: user.len() as u32,
        stack_size: 0,
        slot: abi::STACK_SLOT_WAITED,
        unwind_end: 0,
        py_len: 0,
        py_end: 0,
        user_ip: 0,
        user_sp: 0,
        user_bp: 0,
    };
    let view = StackView {
        kstack: kernel,
        user: UserStack::Frames(user),
    };
    c.handle_event(EventRecord::Stack(&e, view));
}

/// A kernel's run of short waits of thread 50/51, woken by task 60/61.
fn folded_run(
    first_ns: u64,
    last_ns: u64,
    ns: [u64; 4],
    count: [u32; 4],
    wait_ns: u64,
    stack_id: u64,
) -> FoldedEvent {
    FoldedEvent {
        kind: abi::RECORD_FOLDED,
        pid: 50,
        tid: 51,
        delay_ns: 0,
        first_ns,
        last_ns,
        ns,
        count,
        wait_ns,
        waker_pid: 60,
        waker_tid: 61,
        waker_kind: abi::FOLD_WAKER_TASK,
        landing_ns: 0,
        stack_id,
        flags: 0,
        _pad: 0,
    }
}

fn off_cpu(pid: u32, tid: u32, state: u32, start: u64, end: u64, stack_id: u64) -> OffCpuEvent {
    OffCpuEvent {
        kind: abi::RECORD_OFFCPU,
        state,
        start_ns: start,
        end_ns: end,
        wake_ns: 0,
        pid,
        tid,
        cpu_out: 0,
        cpu_in: 1,
        waker_pid: 0,
        waker_tid: 0,
        stack_id,
        waker_stack_id: 0,
        comm: *b"sleeper\0\0\0\0\0\0\0\0\0",
        waker_comm: [0; TASK_COMM_LEN],
        flags: 0,
        landing_ns: 0,
    }
}

/// (library path, library-relative address) of each frame of a thread's sample, root first.
fn frames_of(r: &Recording, pid: u32, tid: u32, i: usize) -> Vec<(String, u64)> {
    let t = r
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap()
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .unwrap();
    let mut keys = Vec::new();
    r.stacks.path(t.samples.stack[i], &mut keys);
    keys.iter()
        .map(|&k| {
            let f = &r.frames[k as usize];
            let lib = if f.lib == NO_LIB {
                "?".to_string()
            } else {
                r.libs[f.lib as usize].path.clone()
            };
            (lib, f.address)
        })
        .collect()
}

/// Function names of a stack node, root first.
fn names(r: &Recording, node: u32) -> Vec<String> {
    let mut keys = Vec::new();
    r.stacks.path(node, &mut keys);
    keys.iter()
        .map(|&k| {
            r.frames[k as usize]
                .symbols
                .funcs
                .first()
                .map(|f| f.name.clone())
                .unwrap_or_else(|| "?".into())
        })
        .collect()
}

/// A thread's off-CPU samples: each one's frame names and duration.
fn off_cpu_of(r: &Recording, t: &ThreadRecord) -> Vec<(Vec<String>, u64)> {
    t.off_cpu
        .stack
        .iter()
        .zip(&t.off_cpu.duration_ns)
        .map(|(&s, &d)| (names(r, s), d))
        .collect()
}

fn thread(r: &Recording, pid: u32, tid: u32) -> &ThreadRecord {
    r.processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap()
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .unwrap()
}

/// Check that samples are resolved with the mappings their process had
/// at the sample's time (even when records arrive out of order), that an
/// exec replaces the mappings, that a forked child inherits its parent's,
/// and that return addresses are looked up one byte back, the user frame
/// the thread entered the kernel at as it is.
#[test]
fn replay_resolves_with_mappings_of_the_moment() {
    let mut c = collector(PidFilter::All);
    // Arrives before the mapping it needs, but is later in time.
    sample(&mut c, 200, 10, 10, 1000, &[0x40_0010, 0x40_0100], &[]);
    c.handle_sideband(SidebandEvent::Mmap(mmap(100, 10, "/nonexistent/a")));
    c.handle_sideband(SidebandEvent::Comm {
        time: 300,
        pid: 10,
        tid: 10,
        name: "b".into(),
        exec: true,
    });
    c.handle_sideband(SidebandEvent::Mmap(mmap(301, 10, "/nonexistent/b")));
    sample(
        &mut c,
        400,
        10,
        10,
        1200,
        &[0x40_0010, 0x40_0100],
        &[0xffff_ffff_8110_0410],
    );
    c.handle_sideband(SidebandEvent::Fork {
        time: 500,
        pid: 11,
        ppid: 10,
        tid: 11,
    });
    sample(&mut c, 600, 11, 11, 80, &[0x40_0020], &[]);
    c.handle_sideband(SidebandEvent::Exit {
        time: 700,
        pid: 11,
        tid: 11,
    });
    let r = c.finish_window(range(0, 1000));

    let a = "/nonexistent/a".to_string();
    let b = "/nonexistent/b".to_string();
    assert_eq!(
        frames_of(&r, 10, 10, 0),
        vec![(a.clone(), 0x20ff), (a, 0x2010)]
    );
    let after_exec = frames_of(&r, 10, 10, 1);
    // In a kernel-mode sample the user "leaf" is the instruction the thread
    // entered the kernel at (or the one after its system call): looked up
    // as it is, not as a return address.
    assert_eq!(after_exec[..2], [(b.clone(), 0x20ff), (b.clone(), 0x2010)]);
    assert_eq!(
        names(&r, thread(&r, 10, 10).samples.stack[1])
            .last()
            .unwrap(),
        "__schedule",
        "kernel frames named from the snapshot"
    );
    assert_eq!(frames_of(&r, 11, 11, 0), vec![(b, 0x2020)]);

    let p10 = r.processes.iter().find(|p| p.pid == 10).unwrap();
    assert_eq!(p10.name, "b", "named by the exec'd command");
    let p11 = r.processes.iter().find(|p| p.pid == 11).unwrap();
    assert_eq!((p11.start_ns, p11.end_ns), (Some(500), Some(700)));
    // Thread 10 had no baseline: first delta 0, then the difference.
    assert_eq!(p10.threads[0].samples.cpu_delta_ns, vec![0, 200]);
    // Thread 11 was forked during the recording: its baseline is 0.
    assert_eq!(p11.threads[0].samples.cpu_delta_ns, vec![80]);
    assert!(
        r.warnings.iter().any(|w| w.contains("/nonexistent/a")),
        "{:?}",
        r.warnings
    );
}

/// Check that the kernel frame an interrupt stopped (right below its
/// entry) is looked up as it is: a timer at `schedule`'s first byte is in
/// `schedule`, not in `__schedule` before it; other return addresses one
/// byte back, as ever.
#[test]
fn the_kernel_instruction_an_interrupt_stopped_is_named_as_it_is() {
    let mut c = collector(PidFilter::All);
    c.handle_sideband(SidebandEvent::Mmap(mmap(100, 10, "/nonexistent/a")));
    // Leaf first: the interrupt's handler, its entry, the instruction it
    // stopped (schedule's first), the caller's return address (the first
    // byte after a call at do_nanosleep's first: one back is do_nanosleep).
    let kernel = [
        0xffff_ffff_8150_0010,
        0xffff_ffff_8100_0d60,
        0xffff_ffff_8110_0900,
        0xffff_ffff_8110_0a01,
    ];
    sample(&mut c, 200, 10, 10, 1000, &[0x40_0100], &kernel);
    let r = c.finish_window(range(0, 1000));
    let got = names(&r, thread(&r, 10, 10).samples.stack[0]);
    assert_eq!(
        got[got.len() - 4..],
        [
            "do_nanosleep",
            "schedule",
            "asm_common_interrupt",
            "common_interrupt"
        ],
        "{got:?}"
    );
}

/// Check that a Tree filter keeps the root and the processes it forks,
/// and nothing else.
#[test]
fn tree_filter_follows_forks() {
    let mut c = collector(PidFilter::Tree(vec![20]));
    sample(&mut c, 100, 20, 20, 0, &[0x1234], &[]);
    sample(&mut c, 100, 30, 30, 0, &[0x1234], &[]);
    c.handle_sideband(SidebandEvent::Fork {
        time: 150,
        pid: 21,
        ppid: 20,
        tid: 21,
    });
    c.handle_sideband(SidebandEvent::Fork {
        time: 150,
        pid: 31,
        ppid: 30,
        tid: 31,
    });
    sample(&mut c, 200, 21, 21, 0, &[0x1234], &[]);
    sample(&mut c, 200, 31, 31, 0, &[0x1234], &[]);
    let r = c.finish_window(range(0, 1000));
    let pids: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![20, 21]);
}

/// Check that an off-CPU interval's stack ends where the thread left the
/// CPU: the tracepoint path and the BPF program read with it are cut, the
/// user frames are under the kernel's, and the reason is the leaf.
#[test]
fn off_cpu_stacks_end_where_the_thread_left_the_cpu() {
    let mut c = collector(PidFilter::All);
    let (bpf, traceiter, run4) = (
        0xffff_ffff_c000_1010,
        0xffff_ffff_8130_0010,
        0xffff_ffff_8130_0110,
    );
    let (sched, schedule, nanosleep) = (
        0xffff_ffff_8110_0410,
        0xffff_ffff_8110_0910,
        0xffff_ffff_8110_0a10,
    );
    stack_record(
        &mut c,
        40,
        41,
        7 << 12,
        &[0x7000, 0x7100],
        &[bpf, run4, traceiter, sched, schedule, nanosleep],
    );
    c.handle_offcpu(&off_cpu(
        40,
        41,
        abi::OFFCPU_SLEEPING,
        100,
        2_000_100,
        7 << 12,
    ));
    let r = c.finish_window(range(0, 3_000_000));
    let t = thread(&r, 40, 41);
    assert_eq!(t.off_cpu.duration_ns, vec![2_000_000]);
    let n = names(&r, t.off_cpu.stack[0]);
    assert_eq!(
        &n[2..],
        [
            "do_nanosleep",
            "schedule",
            "__schedule",
            "[off-CPU: sleeping]"
        ],
        "{n:?}"
    );
    assert_eq!(n.len(), 6, "two user frames (unnamed here) above: {n:?}");
    assert!(matches!(
        t.markers[..],
        [MarkerRecord::OffCpu {
            reason: OffCpuReason::Sleeping,
            ..
        }]
    ));
    assert_eq!(r.stats.stacks_not_kept, 0);
}

/// Check that a wait the tracer did not see begin (the thread was first seen
/// off the CPU, its start its creation) begins no earlier than the thread's
/// last sample before the wait's end, whatever the order its record and the
/// samples are handled in, and when the thread ran again before tracing was
/// said to begin (that is said after the programs run); that a sample
/// before the thread's creation (a reused tid's) does not move its start
/// earlier; and that a thread sampling never saw keeps its wait from its
/// creation.
#[test]
fn a_wait_begun_before_tracing_begins_after_the_threads_last_sample() {
    let mut c = collector(PidFilter::All);
    c.tracing_started(150_000_000);
    let unseen = |tid: u32, end: u64| OffCpuEvent {
        flags: abi::OFFCPU_START_UNSEEN,
        ..off_cpu(40, tid, abi::OFFCPU_SLEEPING, 5, end, 0)
    };
    c.handle_offcpu(&unseen(41, 160_000_000));
    c.handle_offcpu(&unseen(42, 160_000_000));
    c.handle_offcpu(&unseen(43, 130_000_000));
    // Created at 100 ms: the 13-ms sample was an earlier thread's.
    c.handle_offcpu(&OffCpuEvent {
        start_ns: 100_000_000,
        ..unseen(44, 160_000_000)
    });
    sample(&mut c, 13_000_000, 40, 44, 1, &[0x7000], &[]);
    for t in [13_000_000, 140_000_000] {
        sample(&mut c, t, 40, 41, t, &[0x7000], &[]);
    }
    for t in [13_000_000, 120_000_000, 140_000_000] {
        sample(&mut c, t, 40, 43, t, &[0x7000], &[]);
    }
    let r = c.finish_window(range(0, 200_000_000));
    let waited = |tid: u32| {
        let t = thread(&r, 40, tid);
        let start = t.markers.iter().find_map(|m| match m {
            MarkerRecord::OffCpu { start_ns, .. } => Some(*start_ns),
            _ => None,
        });
        (start, t.off_cpu.duration_ns.clone())
    };
    assert_eq!(waited(41), (Some(140_000_000), vec![20_000_000]));
    assert_eq!(waited(42), (Some(5), vec![159_999_995]));
    assert_eq!(waited(43), (Some(120_000_000), vec![10_000_000]));
    assert_eq!(waited(44), (Some(100_000_000), vec![60_000_000]));
}

/// Check that a CPU's slice ends at the next slice's first sample when that
/// comes less than a sampling interval after its last (the interval's
/// jitter): a CPU never shows two threads at once.
#[test]
fn a_cpus_slices_do_not_overlap() {
    let mut c = Collector::new(
        PidFilter::All,
        CollectorOptions {
            per_cpu: true,
            ..Default::default()
        },
    );
    c.set_kernel_symbols(Arc::new(KernelSymbols::parse(KALLSYMS)));
    for t in [0, 1_000_000, 2_000_000] {
        sample(&mut c, t, 40, 41, t, &[0x7000], &[]);
    }
    for t in [2_900_000, 3_900_000] {
        sample(&mut c, t, 40, 42, t, &[0x7000], &[]);
    }
    let r = c.finish_window(range(0, 10_000_000));
    let slices: Vec<(u32, u64, u64)> = r
        .cpu_tracks
        .iter()
        .flat_map(|(_, m)| m)
        .filter_map(|m| match m {
            MarkerRecord::OnCpu {
                tid,
                start_ns,
                end_ns,
                ..
            } if *tid != 0 => Some((*tid, *start_ns, *end_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(slices, vec![(41, 0, 2_900_000), (42, 2_900_000, 4_900_000)]);
}

/// Check that a wakeup whose stack runs under an interrupt entry is said to
/// come from the interrupt, with only the interrupt's frames, and a
/// wakeup by a task names the task with its whole stack.
#[test]
fn wakers_from_interrupts_are_not_the_interrupted_task() {
    let mut c = collector(PidFilter::All);
    let (wake, blk, common, asm, read) = (
        0xffff_ffff_8110_0010,
        0xffff_ffff_8160_0010,
        0xffff_ffff_8150_0010,
        0xffff_ffff_8100_0d50,
        0xffff_ffff_8170_0010,
    );
    stack_record(&mut c, 40, 41, 1 << 12, &[0x7000], &[0xffff_ffff_8110_0410]);
    // The interrupt arrived while pid 90 was in read(2).
    stack_record(
        &mut c,
        90,
        91,
        2 << 12,
        &[0x9000],
        &[0xffff_ffff_c000_1010, wake, blk, common, asm, read],
    );
    // A task wakeup by pid 95.
    stack_record(
        &mut c,
        95,
        96,
        3 << 12,
        &[0x9500],
        &[0xffff_ffff_c000_1010, wake, read],
    );
    let mut by_irq = off_cpu(40, 41, abi::OFFCPU_BLOCKED, 100, 5_000_000, 1 << 12);
    (
        by_irq.wake_ns,
        by_irq.waker_pid,
        by_irq.waker_tid,
        by_irq.waker_stack_id,
    ) = (4_000_000, 90, 91, 2 << 12);
    by_irq.waker_comm[..7].copy_from_slice(b"sysprof");
    let mut by_task = off_cpu(40, 41, abi::OFFCPU_SLEEPING, 6_000_000, 9_000_000, 1 << 12);
    (
        by_task.wake_ns,
        by_task.waker_pid,
        by_task.waker_tid,
        by_task.waker_stack_id,
    ) = (8_000_000, 95, 96, 3 << 12);
    by_task.waker_comm[..6].copy_from_slice(b"pinger");
    c.handle_offcpu(&by_irq);
    c.handle_offcpu(&by_task);
    let r = c.finish_window(range(0, 10_000_000));
    let t = thread(&r, 40, 41);
    let markers: Vec<(&Waker, Vec<String>)> = t
        .markers
        .iter()
        .map(|m| match m {
            MarkerRecord::OffCpu {
                waker: Some(w),
                waker_stack: Some(s),
                ..
            } => (w, names(&r, *s)),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(markers[0].0.interrupt, Some(InterruptKind::Hard));
    assert_eq!(
        markers[0].0.label(),
        "an interrupt (while sysprof ran, pid 90, tid 91)"
    );
    assert_eq!(
        markers[0].1,
        [
            "asm_common_interrupt",
            "common_interrupt",
            "blk_mq_complete_request",
            "try_to_wake_up"
        ]
    );
    assert_eq!(markers[1].0.interrupt, None);
    assert_eq!(markers[1].0.label(), "pinger (pid 95, tid 96)");
    assert_eq!(
        markers[1].1[1..],
        ["ksys_read", "try_to_wake_up"],
        "the task's user frame, then its kernel path"
    );
}

/// Check that folded short waits keep their reason: one weighted sample per
/// reason, each ending in that reason, adding up to the folded time; and
/// one ShortWaits marker with their waker and their time before it.
#[test]
fn short_waits_keep_their_reason() {
    let mut c = collector(PidFilter::All);
    c.handle_folded(&folded_run(10, 900, [300, 200, 0, 0], [3, 4, 0, 0], 150, 0));
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 50, 51);
    let mut got = off_cpu_of(&r, t);
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                vec![
                    "[short off-CPU waits: no stack]".to_string(),
                    "[off-CPU: preempted, waiting for a CPU]".to_string()
                ],
                300
            ),
            (
                vec![
                    "[short off-CPU waits: no stack]".to_string(),
                    "[off-CPU: sleeping]".to_string()
                ],
                200
            ),
        ]
    );
    assert_eq!(r.stats.off_cpu_folded, 7);
    assert_eq!(
        t.markers,
        vec![MarkerRecord::ShortWaits {
            start_ns: 10,
            end_ns: 900,
            count: 7,
            off_cpu_ns: 500,
            waited_ns: 150,
            landing_ns: 0,
            waker: ShortWaker::Task { pid: 60, tid: 61 }
        }]
    );
}

/// Check that the kernel's runs of one place's waits (FOLDED_BY_PLACE) are
/// drawn under that place, their long run delays under their own leaf below
/// the reason's, and summed into their waker's run of short waits with the
/// others of that waker (one marker for two places' runs, starting at the
/// earlier run's first wait though it came second), as the waits sent
/// alone were: as markers of their own, most held one wait.
#[test]
fn runs_of_one_places_waits_join_their_wakers_run() {
    let mut c = collector(PidFilter::All);
    let read = 0xffff_ffff_8170_0010;
    let nanosleep = 0xffff_ffff_8110_0a10;
    stack_record(&mut c, 50, 51, 1 << 12, &[], &[0xffff_ffff_8110_0410, read]);
    stack_record(
        &mut c,
        50,
        51,
        2 << 12,
        &[],
        &[0xffff_ffff_8110_0410, nanosleep],
    );
    let by_place = |first_ns, last_ns, ns, count, wait_ns, delay_ns, stack_id| FoldedEvent {
        delay_ns,
        flags: abi::FOLDED_BY_PLACE,
        landing_ns: 40,
        ..folded_run(
            first_ns,
            last_ns,
            [0, ns, 0, 0],
            [0, count, 0, 0],
            wait_ns,
            stack_id,
        )
    };
    // Sent at its last wait (600), after the nanosleep run began at 200.
    c.handle_folded(&by_place(300, 600, 2_000, 5, 1_500, 300, 1 << 12));
    c.handle_folded(&by_place(200, 800, 1_000, 2, 900, 0, 2 << 12));
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 50, 51);
    let got = off_cpu_of(&r, t);
    let sleeping = "[off-CPU: sleeping]".to_string();
    let delay = crate::model::recording::RUN_DELAY_FRAME_NAME.to_string();
    // (the frame the waits left from, the leaves below it, the weight)
    let mut shapes: Vec<(String, Vec<String>, u64)> = got
        .iter()
        .map(|(n, d)| {
            let place = n.iter().find(|f| *f == "ksys_read" || *f == "do_nanosleep");
            let leaves = n
                .iter()
                .skip_while(|f| !f.starts_with("[off-CPU"))
                .cloned()
                .collect();
            (place.cloned().unwrap_or_default(), leaves, *d)
        })
        .collect();
    shapes.sort();
    // The read run: its 2,000 ns less its 300 of long run delays under
    // read, the 300 under the run-delay leaf below them; the nanosleep run
    // whole under nanosleep.
    assert_eq!(
        shapes,
        vec![
            ("do_nanosleep".to_string(), vec![sleeping.clone()], 1_000),
            ("ksys_read".to_string(), vec![sleeping.clone()], 1_700),
            ("ksys_read".to_string(), vec![sleeping, delay], 300),
        ],
        "{got:?}"
    );
    assert_eq!(r.stats.off_cpu_folded, 7);
    assert_eq!(
        t.markers,
        vec![MarkerRecord::ShortWaits {
            start_ns: 200,
            end_ns: 800,
            count: 7,
            off_cpu_ns: 3_000,
            waited_ns: 2_400,
            landing_ns: 80,
            waker: ShortWaker::Task { pid: 60, tid: 61 }
        }]
    );
    assert_eq!(r.stats.stacks_not_kept, 0);
}

/// Check that the runs of one place's waits left in the kernel at the end
/// are read with the threads' states, a run ending past the end clipped
/// to it (with the share of its sums its span keeps: 700 ns over 100-1,200,
/// 572 up to 1,000) and one begun after it left out; that a thread that died after
/// the ring's last read keeps its runs (under the pid they were kept
/// with); and that an entry its live thread's state does not claim (left
/// by a tid's earlier thread, whose death was not seen) is not read as
/// that thread's.
#[test]
fn place_runs_left_at_the_end_are_read_with_their_thread() {
    let mut c = collector(PidFilter::All);
    let run = abi::PlaceRun {
        first_ns: 100,
        last_ns: 1_200,
        ns: 700,
        wait_ns: 600,
        waker_pid: 60,
        waker_tid: 61,
        waker_kind: abi::FOLD_WAKER_TASK,
        reason: abi::OFFCPU_BLOCKED,
        count: 3,
        ..Default::default()
    };
    let mut runs = abi::PlaceRuns {
        pid: 50,
        ..Default::default()
    };
    runs.r[2] = run;
    // Begun after the end: not this recording's.
    runs.r[0] = abi::PlaceRun {
        first_ns: 1_100,
        last_ns: 1_300,
        count: 9,
        ..run
    };
    let state = |tid: u32, has_place_runs: u32| {
        (
            tid,
            abi::ThreadState {
                pid: 50,
                has_place_runs,
                ..Default::default()
            },
        )
    };
    c.handle_thread_states(
        &[state(51, 1), state(52, 0)],
        &[(51, runs), (52, runs), (53, runs)],
        1_000,
    );
    let r = c.finish_window(range(0, 1000));
    for tid in [51, 53] {
        let t = thread(&r, 50, tid);
        assert_eq!(t.off_cpu.duration_ns, vec![572], "tid {tid}");
        assert_eq!(t.off_cpu.time_ns, vec![1_000], "tid {tid}");
        assert_eq!(
            names(&r, t.off_cpu.stack[0]).last().map(String::as_str),
            Some("[off-CPU: blocked, uninterruptible (I/O)]")
        );
    }
    assert_eq!(r.stats.off_cpu_folded, 6);
    let other = r
        .processes
        .iter()
        .flat_map(|p| &p.threads)
        .find(|t| t.tid == 52);
    assert!(other.is_none_or(|t| t.off_cpu.duration_ns.is_empty()));
}

/// Check that a wait still open at the end, read with its thread's state
/// after the stop, is made as the tracer makes one: its waker a task where
/// the tracer saw a task wake it (none of its stack kept: not "unknown"),
/// no waker for a wakeup after the end, and no inferred end (the tracer
/// sets that flag only as it closes an interval).
#[test]
fn a_wait_read_after_the_stop_keeps_its_tracers_judgments() {
    let mut c = collector(PidFilter::All);
    let state = |tid: u32, wake_ts: u64| {
        (
            tid,
            abi::ThreadState {
                pid: 90,
                off_state: abi::OFFCPU_SLEEPING,
                off_ts: 100,
                off_flags: abi::OFFCPU_END_INFERRED,
                wake_ts,
                waker_pid: 95,
                waker_tid: 96,
                ..Default::default()
            },
        )
    };
    c.handle_thread_states(
        &[state(91, 2_500_000), state(92, 3_500_000)],
        &[],
        3_000_000,
    );
    let r = c.finish_window(range(0, 3_000_000));
    assert_eq!(r.stats.off_cpu_end_inferred, 0);
    let waker_of = |tid: u32| {
        let t = thread(&r, 90, tid);
        match &t.markers[..] {
            [MarkerRecord::OffCpu { waker, .. }] => waker.clone(),
            other => panic!("tid {tid}: {other:?}"),
        }
    };
    let woken = waker_of(91).expect("a waker seen before the end");
    assert_eq!((woken.pid, woken.tid, woken.interrupt), (95, 96, None));
    assert_eq!(waker_of(92), None);
}

/// Check that a thread's own run of short waits, read with its state after
/// the stop, keeps only what came before the end: its marker ends there
/// with the share of its sums its span keeps (the waits of 800-1,200 ns, a
/// recording ending at 1,000: half), not a marker of no length at the end
/// holding them all; and that a run begun after the end is not this
/// recording's.
#[test]
fn a_threads_short_waits_read_after_the_stop_keep_what_came_before_the_end() {
    let mut c = collector(PidFilter::All);
    let state = |tid: u32, first: u64, last: u64| {
        let mut st = abi::ThreadState {
            pid: 70,
            short_first: first,
            short_last: last,
            short_wait_ns: 200,
            short_waker_pid: 80,
            short_waker_tid: 81,
            short_waker_kind: abi::FOLD_WAKER_TASK,
            ..Default::default()
        };
        st.short_ns[abi::OFFCPU_BLOCKED as usize] = 400;
        st.short_count[abi::OFFCPU_BLOCKED as usize] = 4;
        (tid, st)
    };
    c.handle_thread_states(
        &[state(71, 800, 1_200), state(72, 1_100, 1_300)],
        &[],
        1_000,
    );
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 70, 71);
    assert_eq!(t.off_cpu.duration_ns, vec![200]);
    assert_eq!(t.off_cpu.time_ns, vec![1_000]);
    let short: Vec<_> = t
        .markers
        .iter()
        .filter_map(|m| match m {
            MarkerRecord::ShortWaits {
                start_ns,
                end_ns,
                count,
                off_cpu_ns,
                waited_ns,
                ..
            } => Some((*start_ns, *end_ns, *count, *off_cpu_ns, *waited_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(short, vec![(800, 1_000, 2, 200, 100)]);
    let later = r
        .processes
        .iter()
        .flat_map(|p| &p.threads)
        .find(|t| t.tid == 72);
    assert!(later.is_none_or(|t| t.off_cpu.duration_ns.is_empty() && t.markers.is_empty()));
}

/// Check that a run of short waits sent in the ring that straddles a
/// recording's end keeps the share of its sums before it (it was left out
/// whole), and one wholly after it is left out.
#[test]
fn a_run_of_short_waits_sent_across_the_end_keeps_its_share_before_it() {
    let mut c = collector(PidFilter::All);
    c.handle_folded(&folded_run(
        800,
        1_200,
        [0, 400, 0, 0],
        [0, 4, 0, 0],
        200,
        0,
    ));
    c.handle_folded(&folded_run(
        1_100,
        1_300,
        [0, 400, 0, 0],
        [0, 4, 0, 0],
        200,
        0,
    ));
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 50, 51);
    assert_eq!(t.off_cpu.duration_ns, vec![200]);
    assert_eq!(t.off_cpu.time_ns, vec![1_000]);
}

/// Check that folded short waits from one place are drawn under that
/// place's stack (read(2) here), each reason its leaf, while their
/// preemptions (which come from anywhere) stay under the pseudo root.
#[test]
fn short_waits_from_one_place_keep_its_stack() {
    let mut c = collector(PidFilter::All);
    let read = 0xffff_ffff_8170_0010;
    stack_record(&mut c, 50, 51, 1 << 12, &[], &[0xffff_ffff_8110_0410, read]);
    c.handle_folded(&folded_run(
        10,
        900,
        [300, 200, 100, 0],
        [3, 4, 1, 0],
        150,
        1 << 12,
    ));
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 50, 51);
    let mut got = off_cpu_of(&r, t);
    got.sort();
    let leaf = |reason: &str| format!("[off-CPU: {reason}]");
    let mut by_leaf: Vec<(String, bool, u64)> = got
        .iter()
        .map(|(n, d)| {
            let under_read = n.iter().any(|f| f == "ksys_read");
            (n.last().cloned().unwrap_or_default(), under_read, *d)
        })
        .collect();
    by_leaf.sort();
    assert_eq!(
        by_leaf,
        vec![
            (leaf("blocked, uninterruptible (I/O)"), true, 100),
            (leaf("preempted, waiting for a CPU"), false, 300),
            (leaf("sleeping"), true, 200),
        ],
        "{got:?}"
    );
    assert_eq!(r.stats.stacks_not_kept, 0);
}

/// Check that a run of folded waits reported after a window's end, carried
/// into the next window, keeps its place's stack there (it was left
/// pointing into the first window's stacks).
#[test]
fn folded_waits_carried_over_a_cut_keep_their_stack() {
    let mut c = collector(PidFilter::All);
    let read = 0xffff_ffff_8170_0010;
    // Other stacks first, so the run's node is deep in this window's tree.
    stack_record(
        &mut c,
        50,
        52,
        2 << 12,
        &[],
        &[0xffff_ffff_8110_0a10, 0xffff_ffff_8110_0910],
    );
    c.handle_offcpu(&off_cpu(50, 52, abi::OFFCPU_SLEEPING, 100, 900, 2 << 12));
    stack_record(&mut c, 50, 51, 1 << 12, &[], &[0xffff_ffff_8110_0410, read]);
    c.handle_folded(&folded_run(
        800,
        1500,
        [0, 200, 0, 0],
        [0, 4, 0, 0],
        150,
        1 << 12,
    ));
    // An agent's window: what ended after its cut is carried on.
    let first = c.finish_window(WindowRange {
        continuous: true,
        ..range(0, 1000)
    });
    assert!(
        first.processes.iter().all(|p| p
            .threads
            .iter()
            .all(|t| t.tid != 51 || t.off_cpu.stack.is_empty())),
        "reported after the cut: the next window's"
    );
    let r = c.finish_window(range(1000, 2000));
    let t = thread(&r, 50, 51);
    let got: Vec<Vec<String>> = t.off_cpu.stack.iter().map(|&s| names(&r, s)).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].iter().any(|f| f == "ksys_read")
            && got[0].last().is_some_and(|l| l == "[off-CPU: sleeping]"),
        "{got:?}"
    );
}

/// Check that the wakers of short waits are named: one that is no thread
/// of the recording (here this test's own process, outside the filter) by
/// its `/proc/TID/comm`, one that woke a long wait by the comm its record
/// carried; a waker that is gone keeps its tid alone.
#[test]
fn the_wakers_of_short_waits_are_named() {
    let mut c = collector(PidFilter::All);
    let me = std::process::id();
    let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
    let folded = |tid: u32, waker_tid: u32| FoldedEvent {
        tid,
        waker_pid: waker_tid,
        waker_tid,
        ..folded_run(100, 900, [0, 500, 0, 0], [0, 7, 0, 0], 150, 0)
    };
    c.handle_folded(&folded(51, me));
    // A pid above the kernel's limit: no such task.
    c.handle_folded(&folded(52, 4_194_305));
    let r = c.finish_window(range(0, 1000));
    assert_eq!(
        r.waker_names.get(&me).map(String::as_str),
        Some(comm.trim_end())
    );
    assert_eq!(r.waker_names.get(&4_194_305), None);
}

/// Check that a kernel's run of short waits that began before a window's
/// range starts at the range, with the share of its sums its span keeps:
/// the agent's `show` had short-waits markers before its first window.
#[test]
fn a_run_of_short_waits_starts_no_earlier_than_the_range() {
    let mut c = collector(PidFilter::All);
    c.handle_folded(&folded_run(
        1_000_000,
        5_000_000,
        [0, 800_000, 0, 0],
        [0, 40, 0, 0],
        400_000,
        0,
    ));
    let r = c.finish_window(range(3_000_000, 10_000_000));
    let t = thread(&r, 50, 51);
    assert_eq!(
        t.markers,
        vec![MarkerRecord::ShortWaits {
            start_ns: 3_000_000,
            end_ns: 5_000_000,
            count: 20,
            off_cpu_ns: 400_000,
            waited_ns: 200_000,
            landing_ns: 0,
            waker: ShortWaker::Task { pid: 60, tid: 61 }
        }]
    );
}

/// Check that waits the kernel sent but too short for a marker are summed
/// per thread and waker: one run per waker, each its own even when wakers
/// take turns, preemptions (no waker) apart.
/// Check a wakeup's landing (from its sending to its enqueue): a marker's
/// run delay counts from the enqueue, as the kernel's does, and the marker
/// and a run of short waits keep the landing apart.
#[test]
fn a_wakeups_landing_is_kept_apart_from_the_run_delay() {
    let mut c = collector(PidFilter::All);
    let wait = |start: u64, end: u64, wake: u64, landing: u32| {
        let mut e = off_cpu(50, 51, abi::OFFCPU_SLEEPING, start, end, 0);
        (e.wake_ns, e.waker_pid, e.waker_tid, e.landing_ns) = (wake, 60, 61, landing);
        e.flags |= abi::OFFCPU_WAKER_TASK;
        e
    };
    // 4 ms: woken at 3, on a run queue at 3.5, running at 5.
    c.handle_offcpu(&wait(1_000_000, 5_000_000, 3_000_000, 500_000));
    // Two 0.5-ms waits, woken at 0.3 ms, landing 0.05 ms later.
    for t in [10_000_000u64, 11_000_000] {
        c.handle_offcpu(&wait(t, t + 500_000, t + 300_000, 50_000));
    }
    let r = c.finish_window(range(0, 100_000_000));
    let got: Vec<(Option<u64>, u64)> = thread(&r, 50, 51)
        .markers
        .iter()
        .filter_map(|m| match m {
            MarkerRecord::OffCpu {
                run_delay_ns,
                landing_ns,
                ..
            } => Some((*run_delay_ns, *landing_ns)),
            MarkerRecord::ShortWaits {
                off_cpu_ns,
                waited_ns,
                landing_ns,
                ..
            } => Some((Some(off_cpu_ns - waited_ns - landing_ns), *landing_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        [(Some(1_500_000), 500_000), (Some(300_000), 100_000)],
        "(run delay, landing) of the marker, then of the short waits' run"
    );
}

/// Check that a woken wait's run delay of 0.1 ms or more is a sample of
/// its own, under "[off-CPU: woken, waiting for a CPU]" below the reason's
/// leaf, the wait before it keeping the reason's leaf; the two weigh the
/// whole wait. A run delay under 0.1 ms, a preemption and a wait whose
/// wakeup was not seen stay one sample.
#[test]
fn a_woken_waits_run_delay_is_a_sample_under_its_own_leaf() {
    let mut c = collector(PidFilter::All);
    let wait = |state: u32, start: u64, end: u64, wake: u64, landing: u32| {
        let mut e = off_cpu(50, 51, state, start, end, 0);
        if wake > 0 {
            (e.wake_ns, e.waker_pid, e.waker_tid, e.landing_ns) = (wake, 60, 61, landing);
            e.flags |= abi::OFFCPU_WAKER_TASK;
        }
        e
    };
    // Blocked 1-1.4 ms, its wakeup landing 0.05 ms later, then 3.65 ms in the queue.
    c.handle_offcpu(&wait(
        abi::OFFCPU_BLOCKED,
        1_000_000,
        5_100_000,
        1_400_000,
        50_000,
    ));
    // 0.09 ms in the queue: one sample.
    c.handle_offcpu(&wait(
        abi::OFFCPU_SLEEPING,
        6_000_000,
        8_090_000,
        8_000_000,
        0,
    ));
    // Preempted, and a sleep whose wakeup was not seen: one sample each.
    c.handle_offcpu(&wait(abi::OFFCPU_PREEMPTED, 9_000_000, 12_000_000, 0, 0));
    c.handle_offcpu(&wait(abi::OFFCPU_SLEEPING, 13_000_000, 15_000_000, 0, 0));
    let r = c.finish_window(range(0, 100_000_000));
    let t = thread(&r, 50, 51);
    let got: Vec<(u64, u64, Vec<String>)> = (0..t.off_cpu.time_ns.len())
        .map(|i| {
            (
                t.off_cpu.time_ns[i],
                t.off_cpu.duration_ns[i],
                names(&r, t.off_cpu.stack[i]),
            )
        })
        .collect();
    // No stack was sent: each is under "[stack not available]".
    let s = |v: &[&str]| {
        std::iter::once("[stack not available]")
            .chain(v.iter().copied())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        got,
        [
            (
                1_000_000,
                450_000,
                s(&["[off-CPU: blocked, uninterruptible (I/O)]"])
            ),
            (
                1_450_000,
                3_650_000,
                s(&[
                    "[off-CPU: blocked, uninterruptible (I/O)]",
                    "[off-CPU: woken, waiting for a CPU]"
                ])
            ),
            (6_000_000, 2_090_000, s(&["[off-CPU: sleeping]"])),
            (
                9_000_000,
                3_000_000,
                s(&["[off-CPU: preempted, waiting for a CPU]"])
            ),
            (13_000_000, 2_000_000, s(&["[off-CPU: sleeping]"])),
        ]
    );
}

#[test]
fn waits_under_the_marker_threshold_are_summed_per_waker() {
    let mut c = collector(PidFilter::All);
    let wake_read = 0xffff_ffff_8110_0010;
    for (n, waker) in [61u32, 62, 63].into_iter().enumerate() {
        stack_record(
            &mut c,
            60,
            waker,
            (n as u64 + 1) << 12,
            &[0x9500],
            &[0xffff_ffff_c000_1010, wake_read],
        );
    }
    let wait = |start: u64, end: u64, wake: u64, reason: u32, waker: u32| {
        let mut e = off_cpu(50, 51, reason, start, end, 0);
        if waker != 0 {
            (e.wake_ns, e.waker_pid, e.waker_tid, e.waker_stack_id) =
                (wake, 60, waker, (waker as u64 - 60) << 12);
        }
        e
    };
    // 0.5 ms waits (under the 1 ms marker threshold), woken by 61 at 0.4 ms.
    let mut t = 1_000_000;
    for _ in 0..4 {
        c.handle_offcpu(&wait(t, t + 500_000, t + 400_000, abi::OFFCPU_SLEEPING, 61));
        t += 1_000_000;
    }
    c.handle_offcpu(&wait(t, t + 200_000, 0, abi::OFFCPU_PREEMPTED, 0));
    t += 1_000_000;
    // Another waker, then a third, then the first again: each its own run.
    c.handle_offcpu(&wait(t, t + 500_000, t + 400_000, abi::OFFCPU_SLEEPING, 62));
    t += 1_000_000;
    c.handle_offcpu(&wait(t, t + 500_000, t + 400_000, abi::OFFCPU_SLEEPING, 63));
    t += 1_000_000;
    c.handle_offcpu(&wait(t, t + 500_000, t + 400_000, abi::OFFCPU_SLEEPING, 61));
    let r = c.finish_window(range(0, 100_000_000));
    let mut runs: Vec<(u32, u64, u64, ShortWaker)> = thread(&r, 50, 51)
        .markers
        .iter()
        .filter_map(|m| match m {
            MarkerRecord::ShortWaits {
                count,
                off_cpu_ns,
                waited_ns,
                waker,
                ..
            } => Some((*count, *off_cpu_ns, *waited_ns, *waker)),
            _ => None,
        })
        .collect();
    runs.sort_by_key(|r| (r.0, r.1));
    assert_eq!(
        runs,
        vec![
            (1, 200_000, 0, ShortWaker::Nobody),
            (1, 500_000, 400_000, ShortWaker::Task { pid: 60, tid: 62 }),
            (1, 500_000, 400_000, ShortWaker::Task { pid: 60, tid: 63 }),
            (
                5,
                2_500_000,
                2_000_000,
                ShortWaker::Task { pid: 60, tid: 61 }
            ),
        ]
    );
}

/// Check that nothing lies outside a recording's range: samples before its
/// start or after its end are left out, intervals are clipped to it.
#[test]
fn everything_lies_inside_the_range() {
    let mut c = collector(PidFilter::All);
    for t in [50, 150, 950, 1050] {
        sample(&mut c, t, 60, 60, t, &[0x1234], &[]);
    }
    c.handle_offcpu(&off_cpu(60, 60, abi::OFFCPU_SLEEPING, 500, 1500, 0));
    let r = c.finish_window(range(100, 1000));
    let t = thread(&r, 60, 60);
    assert_eq!(t.samples.time_ns, vec![150, 950]);
    assert_eq!(
        (t.off_cpu.time_ns.clone(), t.off_cpu.duration_ns.clone()),
        (vec![500], vec![500])
    );
}

/// Check that a running thread's CPU deltas are exact between samples
/// though the scheduler updates its CPU time only at ticks: a thread that
/// runs on from its start at 0, sampled every 1,000 ns with a tick every
/// 4,000 (and the scheduler's clock 5,000 ahead of the samples'), gets
/// 1,000 per sample, not 0, 0, 0, 4,000; none more than the time since the
/// sample before; and the tick its first sample missed once it has room.
#[test]
fn cpu_deltas_are_exact_between_ticks() {
    let mut c = collector(PidFilter::All);
    c.handle_sideband(SidebandEvent::Fork {
        time: 0,
        pid: 80,
        ppid: 1,
        tid: 80,
    });
    c.handle_sideband(SidebandEvent::Mmap(mmap(1, 80, "/nonexistent/spin")));
    const AHEAD: u64 = 5_000;
    for time in (1_000..=9_000).step_by(1_000) {
        let last_tick = time / 4_000 * 4_000;
        sample_updated_at(
            &mut c,
            time,
            80,
            80,
            last_tick,
            last_tick + AHEAD,
            &[0x40_0010],
            &[],
        );
    }
    // It leaves the CPU at 10,000 (counted: 10,000), comes back at 14,000
    // and is sampled 500 later.
    sample_updated_at(
        &mut c,
        14_500,
        80,
        80,
        10_000,
        14_000 + AHEAD,
        &[0x40_0010],
        &[],
    );
    let r = c.finish_window(range(0, 20_000));
    let deltas = &thread(&r, 80, 80).samples.cpu_delta_ns;
    // The first is as the scheduler last updated it (0 at 1,000, a tick
    // stale); from there on exact. The tick at 4,000 would make up the
    // first's 1,000, but 2,000 in 1,000 of time is more than ran: it is
    // owed until the kernel's count shows it and a sample has room (the
    // last: 1,500 ran since 9,000, owed 500 of it; 500 stays owed, 10,000
    // of the 10,500 it ran, as the kernel counted).
    assert_eq!(
        deltas,
        &vec![0, 1_000, 1_000, 1_000, 1_000, 1_000, 1_000, 1_000, 1_000, 2_000]
    );
    assert_eq!(deltas.iter().sum::<u64>(), 10_000);
}

/// Check that a window starts from where the previous one left the
/// processes (mappings, names, CPU-time bases), and that a process that
/// exited is forgotten after the window that reported it.
#[test]
fn windows_carry_process_state_and_forget_the_dead() {
    let mut c = collector(PidFilter::All);
    c.handle_sideband(SidebandEvent::Comm {
        time: 10,
        pid: 70,
        tid: 70,
        name: "server".into(),
        exec: true,
    });
    c.handle_sideband(SidebandEvent::Mmap(mmap(11, 70, "/nonexistent/server")));
    sample(&mut c, 100, 70, 70, 1000, &[0x40_0010], &[]);
    c.handle_sideband(SidebandEvent::Fork {
        time: 150,
        pid: 71,
        ppid: 70,
        tid: 71,
    });
    c.handle_sideband(SidebandEvent::Exit {
        time: 200,
        pid: 71,
        tid: 71,
    });
    let first = c.finish_window(WindowRange {
        continuous: true,
        ..range(0, 1000)
    });
    assert_eq!(first.processes.len(), 1, "pid 71 had no data");
    sample(&mut c, 1100, 70, 70, 1800, &[0x40_0020], &[]);
    let second = c.finish_window(WindowRange {
        continuous: true,
        ..range(1000, 2000)
    });
    assert_eq!(
        frames_of(&second, 70, 70, 0),
        vec![("/nonexistent/server".to_string(), 0x2020)]
    );
    assert_eq!(second.processes[0].name, "server");
    assert_eq!(
        second.processes[0].threads[0].samples.cpu_delta_ns,
        vec![800],
        "the CPU-time base carried over"
    );
    assert!(
        !c.table.processes.contains_key(&71),
        "exited in the first window: forgotten"
    );
}

/// Check that in continuous windows (the agent) what ended after a window's
/// end (read from the rings after the cut) goes to the next window whole,
/// with its stack, and an interval that began before a window is kept whole
/// in the window where it ends: nothing is lost or counted twice at the seam.
#[test]
fn continuous_windows_carry_what_ended_after_the_cut() {
    let mut c = collector(PidFilter::All);
    c.handle_sideband(SidebandEvent::Comm {
        time: 10,
        pid: 80,
        tid: 80,
        name: "w".into(),
        exec: true,
    });
    sample(&mut c, 900, 80, 80, 1000, &[0x1234], &[]);
    sample(&mut c, 1100, 80, 80, 2000, &[0x5678], &[]);
    c.handle_offcpu(&off_cpu(80, 80, abi::OFFCPU_SLEEPING, 950, 1200, 0));
    let first = c.finish_window(WindowRange {
        continuous: true,
        ..range(0, 1000)
    });
    let t = thread(&first, 80, 80);
    assert_eq!(t.samples.time_ns, vec![900]);
    assert!(
        t.off_cpu.time_ns.is_empty(),
        "the interval ended after the cut"
    );
    let second = c.finish_window(WindowRange {
        continuous: true,
        ..range(1000, 2000)
    });
    let t = thread(&second, 80, 80);
    assert_eq!(t.samples.time_ns, vec![1100]);
    assert_eq!(
        (t.off_cpu.time_ns.clone(), t.off_cpu.duration_ns.clone()),
        (vec![950], vec![250]),
        "kept whole where it ended"
    );
    assert_eq!(
        frames_of(&second, 80, 80, 0).len(),
        1,
        "the carried sample kept its stack"
    );
}

/// Check that a user stack the kernel walked ends, at its root, in the
/// frame that names how the walk ended, with the names and the mapping from
/// `UNWIND_END_*` the profiles had before the stack-end vocabulary was one
/// (written out here), and that the unwinder counts each end as before.
#[test]
fn kernel_walks_end_in_the_frame_that_says_why() {
    let cases: [(u32, Option<&str>); 10] = [
        (abi::UNWIND_END_ROOT, None),
        (
            abi::UNWIND_END_NO_PROCESS,
            Some("[truncated: unwind tables not loaded yet (the process or the recording had just started)]"),
        ),
        (
            abi::UNWIND_END_PENDING,
            Some("[truncated: unwind tables not loaded yet (the process or the recording had just started)]"),
        ),
        (
            abi::UNWIND_END_BAD_ADDRESS,
            Some("[truncated: return address outside any code]"),
        ),
        (
            abi::UNWIND_END_UNSUPPORTED,
            Some("[truncated: an unwind rule the kernel unwinder cannot follow]"),
        ),
        (
            abi::UNWIND_END_READ_FAILED,
            Some("[truncated: user stack not readable (not resident)]"),
        ),
        (
            abi::UNWIND_END_NO_INFO,
            Some("[truncated: no unwind information]"),
        ),
        (abi::UNWIND_END_MAX_FRAMES, Some("[truncated: 1024 frames]")),
        (
            abi::UNWIND_END_USERSPACE,
            Some("[truncated: no unwind information]"),
        ),
        (
            abi::UNWIND_END_REFUSED,
            Some("[truncated: no unwind information]"),
        ),
    ];
    let mut c = Collector::new(
        PidFilter::All,
        CollectorOptions {
            dwarf: true,
            ..Default::default()
        },
    );
    c.set_kernel_symbols(Arc::new(KernelSymbols::parse(KALLSYMS)));
    c.handle_sideband(SidebandEvent::Mmap(mmap(1, 30, "/nonexistent/k")));
    for (i, &(end, _)) in cases.iter().enumerate() {
        let user = UserStack::KernelUnwound(KernelUnwound {
            frames: &[0x40_0010, 0x40_0100],
            end,
            handover: None,
            leaf: None,
            python: &[],
            python_end: 0,
        });
        c.handle_sample(&SampleView {
            cpu: 0,
            time_ns: 10 + i as u64,
            sum_exec_runtime: 0,
            exec_start: 10 + i as u64,
            pid: 30,
            tid: 30,
            flags: abi::SAMPLE_FLAG_KERNEL_UNWOUND,
            comm: b"app",
            kstack: &[],
            user,
        });
    }
    let r = c.finish_window(range(0, 1000));
    let t = thread(&r, 30, 30);
    for (i, &(end, marker)) in cases.iter().enumerate() {
        let n = names(&r, t.samples.stack[i]);
        match marker {
            Some(m) => assert_eq!((n.len(), n[0].as_str()), (3, m), "UNWIND_END {end}"),
            None => assert_eq!(
                n.len(),
                2,
                "UNWIND_END {end}: a whole stack has no marker: {n:?}"
            ),
        }
    }
    let u = r.stats.unwind;
    assert_eq!(
        (
            u.unwinds,
            u.reached_root,
            u.bad_return_address,
            u.copy_exhausted,
            u.no_unwind_info
        ),
        (10, 1, 1, 1, 7)
    );
}

/// Check that a thread that moves to a CPU whose scheduler clock is far
/// from the first's gets its deltas from the kernel's own count there, not
/// from the two clocks' difference: nothing invented, nothing lost.
#[test]
fn cpu_deltas_across_cpus_do_not_compare_their_clocks() {
    let mut t = super::process::CpuTime::since(0, 0);
    // CPU 0: its clock 5,000 ahead; exact 1,000 between samples.
    assert_eq!(
        t.advance(0, super::runtime_clock(0, 5_000, 1_000), 1_000, 0),
        0
    );
    assert_eq!(
        t.advance(0, super::runtime_clock(0, 5_000, 2_000), 2_000, 0),
        1_000
    );
    // CPU 1, its clock 900,000 ahead (updated at 2,500): compared, the
    // clocks would say it ran -897,500. The kernel counted 2,500 when it
    // moved: 1,500 more than accounted (it ran from 0: its first sample's
    // count was stale), but only 1,000 passed since the sample before;
    // 500 is owed.
    assert_eq!(
        t.advance(2_500, super::runtime_clock(2_500, 902_500, 3_000), 3_000, 1),
        1_000
    );
    // On CPU 1 again: exact, 1,000.
    assert_eq!(
        t.advance(2_500, super::runtime_clock(2_500, 902_500, 4_000), 4_000, 1),
        1_000
    );
    // It ran on to 5,000 (counted then: 5,000), paused, and ran again from
    // 6,500: sampled at 7,000, 1,500 ran since (exact), and the kernel's
    // count (5,000) is 2,000 more than accounted (3,000): what it ran from
    // 4,000 to 5,000, and 1,000 owed (the 500 of the move, and the first
    // sample's stale count). Nothing invented.
    assert_eq!(
        t.advance(5_000, super::runtime_clock(5_000, 906_500, 7_000), 7_000, 1),
        2_000
    );
}

/// Check that where the scheduler's clock runs slower than the samples'
/// (a VM whose host ran something else: steal time), the deltas do not run
/// ahead of the kernel's own count by more than the time since it changed.
#[test]
fn cpu_deltas_do_not_run_ahead_of_the_kernel_by_steal() {
    let mut t = super::process::CpuTime::since(0, 0);
    // Runs on CPU 0 from 0; samples every 1,000; ticks every 4,000 of wall
    // time, but the scheduler's clock counts only half of it (steal).
    let mut total = 0;
    for time in (1_000..=40_000u64).step_by(1_000) {
        let tick = time / 4_000 * 4_000;
        let (runtime, exec_start) = (tick / 2, tick / 2);
        total += t.advance(
            runtime,
            super::runtime_clock(runtime, exec_start, time),
            time,
            0,
        );
        let true_cpu = time / 2;
        assert!(
            total <= true_cpu + 4_000,
            "at {time}: {total} accounted, the kernel's count is {runtime}"
        );
    }
    assert!(total >= 20_000 - 4_000, "{total}");
}

/// Stale perf maps in /tmp of processes that were gone before their user
/// was known (left by earlier processes with the same pid) are not read,
/// and say so in one line, not one per pid.
#[test]
fn perf_maps_of_gone_processes_are_ignored_in_one_line() {
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    // Two pids no process has (checked just before use).
    let gone: Vec<u32> = (1..pid_max)
        .rev()
        .filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .take(2)
        .collect();
    let maps: Vec<String> = gone.iter().map(|p| format!("/tmp/perf-{p}.map")).collect();
    for m in &maps {
        // A symbol covering the sampled address: read, it would name it.
        std::fs::write(m, "7f0000001000 100 stale_jit_function\n").unwrap();
    }
    let mut c = collector(PidFilter::All);
    for (i, &pid) in gone.iter().enumerate() {
        // In no mapping: a JIT frame, named from the pid's perf map if trusted.
        sample(
            &mut c,
            100 + i as u64,
            pid,
            pid,
            1000,
            &[0x7f00_0000_1010],
            &[],
        );
    }
    let r = c.finish_window(range(0, 1000));
    for m in &maps {
        let _ = std::fs::remove_file(m);
    }
    let about: Vec<&String> = r
        .warnings
        .iter()
        .filter(|w| w.contains("perf map"))
        .collect();
    assert_eq!(about.len(), 1, "one line for both: {:?}", r.warnings);
    assert!(
        about[0].starts_with("2 perf map(s) of processes gone before their user was known ignored"),
        "{}",
        about[0]
    );
    for &pid in &gone {
        let names = frames_of(&r, pid, pid, 0);
        assert!(
            names.iter().all(|(n, _)| !n.contains("stale_jit_function")),
            "pid {pid}'s frame named from a file nobody vouched for: {names:?}"
        );
    }
}

/// A raw stack interned twice is one node, found again by its whole hash;
/// a remembered node that is not the stack (a stale or colliding entry) is
/// never taken for it; stacks that differ in their pid, a frame or their
/// depth stay apart, and every path reads back as it was given.
#[test]
fn raw_stacks_are_found_whole_and_checked() {
    let mut w = window::WindowData::default();
    let k1 = 0xffff_ffff_8110_0400u64;
    let k2 = 0xffff_ffff_8110_0900u64;
    // Leaf first, with the zeros and misplaced addresses intern_raw drops.
    let user = [0x401_020u64, 0, 0x401_010, k1];
    let kernel = [k2, k1, 0x401_000];
    let a = Collector::intern_raw(&mut w, 7, &user, &kernel);
    let len = w.raw.len();
    assert_eq!(
        w.raw_paths.get(&single_hash(&w, a)),
        Some(&a),
        "remembered whole"
    );
    assert_eq!(Collector::intern_raw(&mut w, 7, &user, &kernel), a);
    assert_eq!(w.raw.len(), len, "nothing new for a stack seen before");
    assert_eq!(w.raw_paths.len(), 1);
    let mut path = Vec::new();
    w.raw.path(a, &mut path);
    assert_eq!(path, vec![7, 0x401_010, 0x401_020, k1, k2]);

    let other_pid = Collector::intern_raw(&mut w, 8, &user, &kernel);
    let shorter = Collector::intern_raw(&mut w, 7, &user[..1], &kernel);
    let other_leaf = Collector::intern_raw(&mut w, 7, &user, &[k1]);
    for n in [other_pid, shorter, other_leaf] {
        assert_ne!(n, a);
    }
    w.raw.path(shorter, &mut path);
    assert_eq!(path, vec![7, 0x401_020, k1, k2]);

    // Every remembered node replaced by another stack's: each stack is
    // still its own.
    let wrong: Vec<u64> = w.raw_paths.keys().copied().collect();
    for hash in wrong {
        w.raw_paths.insert(hash, other_pid);
    }
    assert_eq!(Collector::intern_raw(&mut w, 7, &user, &kernel), a);
    assert_eq!(
        Collector::intern_raw(&mut w, 7, &user[..1], &kernel),
        shorter
    );
    // And a node past the tree's end (a tree replaced under the memo).
    for v in w.raw_paths.values_mut() {
        *v = u32::MAX - 1;
    }
    assert_eq!(Collector::intern_raw(&mut w, 7, &user, &[k1]), other_leaf);

    // A stack of nothing but its pid, behind an entry out of range; and a
    // user frame whose address is the pid: only the root may be the pid.
    let mut w = window::WindowData::default();
    let bare = Collector::intern_raw(&mut w, 7, &[], &[]);
    let deep = Collector::intern_raw(&mut w, 7, &[7], &[]);
    assert_ne!(bare, deep);
    for v in w.raw_paths.values_mut() {
        *v = u32::MAX - 1;
    }
    assert_eq!(Collector::intern_raw(&mut w, 7, &[], &[]), bare);
    for v in w.raw_paths.values_mut() {
        *v = deep;
    }
    assert_eq!(Collector::intern_raw(&mut w, 7, &[], &[]), bare);
    assert_eq!(Collector::intern_raw(&mut w, 7, &[7], &[]), deep);
}

/// The one key of a window's memo that names `node` (the test's stacks
/// are remembered once each).
fn single_hash(w: &window::WindowData, node: NodeIndex) -> u64 {
    let keys: Vec<u64> = w
        .raw_paths
        .iter()
        .filter(|(_, &n)| n == node)
        .map(|(&k, _)| k)
        .collect();
    assert_eq!(keys.len(), 1, "one memo entry for the stack");
    keys[0]
}

/// Stacks interned through their threads' last paths are the stacks
/// given: every node reads back as its pid and frames, equal stacks are
/// one node and others are not, against a map of whole stacks, whatever
/// the threads, pids and shared outer frames (a thread whose process
/// changes at an exec included).
#[test]
fn thread_paths_intern_the_stacks_given() {
    let mut w = window::WindowData::default();
    let mut seen: std::collections::HashMap<Vec<u64>, NodeIndex> = Default::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let kernel_base = 0xffff_ffff_8100_0000u64;
    let mut path = Vec::new();
    for _ in 0..5000 {
        let tid = next(6) as u32; // 0: no thread's path
        let pid = 100 + next(3) as u32;
        // Outer frames from a small set so that threads share and part.
        let depth = next(12) as usize;
        let user: Vec<u64> = (0..depth).map(|_| 0x40_0000 + next(4) * 0x10).collect();
        let kernel: Vec<u64> = (0..next(3)).map(|_| kernel_base + next(3) * 0x10).collect();
        let node = Collector::intern_thread_raw(&mut w, pid, tid, &user, &kernel);
        let mut want = vec![pid as u64];
        want.extend(user.iter().rev());
        want.extend(kernel.iter().rev());
        w.raw.path(node, &mut path);
        assert_eq!(path, want, "tid {tid}");
        let before = *seen.entry(want.clone()).or_insert(node);
        assert_eq!(before, node, "one node per stack: {want:x?}");
    }
    let distinct: std::collections::HashSet<NodeIndex> = seen.values().copied().collect();
    assert_eq!(
        distinct.len(),
        seen.len(),
        "different stacks, different nodes"
    );
    assert!(w.thread_paths.len() <= 5, "thread 0 keeps no path");
}
