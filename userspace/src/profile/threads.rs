//! Tracks: one per thread, one per CPU, and which of them open visible.
//!
//! In: the recording's processes and threads (samples, off-CPU samples,
//! markers) and per-CPU slices. Out: each track's [`Thread`], its samples
//! merged in time order, and the tracks the Firefox Profiler shows and
//! selects when the profile opens.

use crate::model::recording::{MarkerRecord, ProcessRecord, Recording, ThreadRecord};

use super::markers::build_markers;
use super::schema::{process_display_name, Markers, Samples, Thread};
use super::tables::ThreadTables;
use super::{micros, CPU_TRACK_TID_BASE};

/// Tracks shown when a system-wide profile opens, at most: the busiest
/// threads fill a screen; the rest are one click away in the track menu.
const MAX_INITIAL_VISIBLE: usize = 15;

/// A thread with fewer CPU samples than this share (%) of the busiest
/// thread's opens hidden, unless it is the command's.
const IDLE_PERCENT_OF_BUSIEST: usize = 5;

/// What [`initial_threads`] needs to know of a thread.
#[derive(Clone)]
pub(super) struct TrackFacts {
    /// None for a track of the machine's (a CPU's, the machine counters').
    pub(super) pid: Option<u32>,
    pub(super) main: bool,
    /// A thread named as its process is (`comm` cut to 15 bytes): the
    /// program's own, not a runtime's helper (`C2 CompilerThre`, `GC Thread#0`).
    pub(super) named_like_process: bool,
    pub(super) profiler: bool,
    pub(super) cpu_samples: usize,
}

impl TrackFacts {
    /// The facts of thread `t` of process `p`.
    pub(super) fn of(p: &ProcessRecord, t: &ThreadRecord) -> TrackFacts {
        TrackFacts {
            pid: Some(p.pid),
            main: t.tid == p.pid,
            named_like_process: !t.name.is_empty()
                && p.name.as_bytes().starts_with(t.name.as_bytes())
                && (t.name.len() == p.name.len() || t.name.len() >= 15),
            profiler: p.profiler,
            cpu_samples: t.samples.time_ns.len(),
        }
    }
}

/// The threads that open visible and the one that opens selected. Left to
/// itself the Firefox Profiler shows and selects the busiest threads, and
/// in a system-wide profile that is often sysprof itself. Visible: every
/// thread of the focus process (the recorded command), the busiest others
/// with CPU samples up to [`MAX_INITIAL_VISIBLE`] (each with at least
/// [`IDLE_PERCENT_OF_BUSIEST`] of the busiest thread's), and the per-CPU tracks
/// (asked for by name); never the profiler's own threads or the idle task
/// (kept in the profile, shown from the track menu). Selected: the focus
/// process's main thread (or its busiest thread named as it); where that
/// barely ran, the process's busiest thread; where all of them barely ran,
/// the busiest thread it started (not with `whole_system`: there another
/// process need not be the command's); without a focus, the busiest
/// visible thread.
pub(super) fn initial_threads(
    tracks: &[TrackFacts],
    focus_pid: Option<u32>,
    whole_system: bool,
) -> (Vec<usize>, Vec<usize>) {
    let focus = |t: &TrackFacts| focus_pid.is_some() && t.pid == focus_pid;
    let mut busiest: Vec<usize> = (0..tracks.len())
        .filter(|&i| {
            let t = &tracks[i];
            !t.profiler && t.pid.is_some_and(|p| p != 0) && t.cpu_samples > 0 && !focus(t)
        })
        .collect();
    busiest.sort_by_key(|&i| std::cmp::Reverse(tracks[i].cpu_samples));
    // The Firefox Profiler's own rule where a profile names none
    // (`computeDefaultVisibleThreads`): a thread with under 5 % of the
    // busiest one's samples is idle. pyenv's shims ran 14 `bash` tracks of
    // 1-17 samples each beside a command's 952, each opening full height.
    let busiest_samples = (0..tracks.len())
        .filter(|&i| !tracks[i].profiler && tracks[i].pid.is_some_and(|p| p != 0))
        .map(|i| tracks[i].cpu_samples)
        .max()
        .unwrap_or(0);
    busiest.retain(|&i| tracks[i].cpu_samples * 100 >= busiest_samples * IDLE_PERCENT_OF_BUSIEST);
    let focused: Vec<usize> = (0..tracks.len()).filter(|&i| focus(&tracks[i])).collect();
    let room = MAX_INITIAL_VISIBLE.saturating_sub(focused.len());
    let mut visible: Vec<usize> = focused
        .iter()
        .copied()
        .chain(busiest.iter().copied().take(room))
        .collect();
    if visible.is_empty() {
        // Nothing ran: show the processes there are, still not the profiler.
        visible = (0..tracks.len())
            .filter(|&i| tracks[i].pid.is_some() && !tracks[i].profiler)
            .collect();
    }
    // The machine's and the CPUs' tracks always (asked for by name).
    visible.extend((0..tracks.len()).filter(|&i| tracks[i].pid.is_none()));
    visible.sort_unstable();
    visible.dedup();
    // The command's thread that ran most of its own code: its main thread,
    // unless a thread named as the program ran more (a JVM's launcher
    // waits in JLI_Launch while the thread running main() works; its
    // compiler and GC threads are not the program).
    let command = focused
        .iter()
        .copied()
        .filter(|&i| tracks[i].main || tracks[i].named_like_process)
        .max_by_key(|&i| (tracks[i].cpu_samples, tracks[i].main))
        .or_else(|| focused.first().copied());
    // Where that thread barely ran on a CPU (it waits in `pthread_join`; a
    // shell script, `make`, `npm run` or a pyenv shim waits for its
    // children): the command's busiest thread (a JVM's compiler, where its
    // program barely ran: where its CPU went), else, where all of its
    // threads barely ran, the busiest other thread, which is one the
    // command started unless the whole system was recorded (then it stays
    // on the command, which may be one that waits on purpose: a server,
    // `sleep`). The Firefox Profiler's rule for idle, as above. The
    // command's tracks stay visible.
    let idle = |i: &usize| tracks[*i].cpu_samples * 100 < busiest_samples * IDLE_PERCENT_OF_BUSIEST;
    let its_busiest = focused
        .iter()
        .copied()
        .max_by_key(|&i| tracks[i].cpu_samples)
        .filter(|i| !idle(i));
    let busiest_other = busiest
        .first()
        .copied()
        .filter(|i| visible.contains(i) && command.is_some() && !whole_system);
    let selected = command
        .filter(|i| !idle(i))
        .or(its_busiest)
        .or(busiest_other)
        .or(command)
        .or_else(|| busiest.first().copied())
        .or_else(|| visible.iter().copied().find(|&i| tracks[i].pid.is_some()))
        .or_else(|| visible.first().copied());
    (visible, selected.into_iter().collect())
}

/// Thread `t` of process `p`'s track, named `name` (see
/// [`super::thread_names`]).
pub(super) fn build_thread(
    rec: &Recording,
    (p, t): (&ProcessRecord, &ThreadRecord),
    name: String,
    goroutines: bool,
    ms: &dyn Fn(u64) -> f64,
) -> Thread {
    let idle = p.pid == 0;
    let mut tables = ThreadTables::default();
    let on = &t.samples;
    let off = &t.off_cpu;
    let n = on.time_ns.len() + off.time_ns.len();
    let mut samples = Samples {
        length: n,
        weight_type: if rec.off_cpu { "tracing-ms" } else { "samples" }.into(),
        ..Default::default()
    };
    samples.stack.reserve(n);
    samples.time_deltas.reserve(n);
    let mut last_us = 0i64;
    let mut push_time = |samples: &mut Samples, ns: u64| {
        let us = micros(ns as i64 - rec.start_ns as i64);
        samples.time_deltas.push((us - last_us) as f64 / 1e3);
        last_us = us;
    };
    let mut cpu_delta = Vec::with_capacity(n);
    let mut weights = rec.off_cpu.then(|| Vec::with_capacity(n));
    // To the microsecond, as every time in the file: 999 Hz's period
    // written whole was 17 characters a sample (1.001001001001001).
    let interval_ms = (rec.interval_ms * 1e3).round() / 1e3;
    // Merge on-CPU and off-CPU samples by time. With off-CPU tracking every
    // sample is weighted in ms: on-CPU ones by the sampling interval,
    // off-CPU ones by the interval's length, so the call tree adds up to time.
    let (mut i, mut j) = (0, 0);
    while i < on.time_ns.len() || j < off.time_ns.len() {
        let take_on =
            j >= off.time_ns.len() || (i < on.time_ns.len() && on.time_ns[i] <= off.time_ns[j]);
        if take_on {
            samples
                .stack
                .push(Some(tables.stack_for(rec, on.stack[i], idle)));
            push_time(&mut samples, on.time_ns[i]);
            cpu_delta.push(Some(on.cpu_delta_ns[i] / 1000));
            if let Some(w) = weights.as_mut() {
                w.push(interval_ms);
            }
            i += 1;
        } else {
            samples
                .stack
                .push(Some(tables.stack_for(rec, off.stack[j], idle)));
            push_time(&mut samples, off.time_ns[j]);
            cpu_delta.push(Some(0));
            if let Some(w) = weights.as_mut() {
                w.push(off.duration_ns[j] as f64 / 1e6);
            }
            j += 1;
        }
    }
    samples.weight = weights;
    samples.thread_cpu_delta = Some(cpu_delta);
    let markers = build_markers(
        rec,
        &t.markers,
        (Some(&t.samples), Some(&t.off_cpu), goroutines),
        &mut tables,
        idle,
        ms,
    );
    let start = |ns: Option<u64>| ns.map(|v| ms(v).max(0.0)).unwrap_or(0.0);
    // The idle task shares pid 0 with the machine's track, which leads.
    let is_main = t.tid == p.pid && !(idle && has_machine_track(rec));
    // The container or service shows in the track's process name; the
    // profiler says what it is, so nobody takes it for the workload.
    let process_name = process_display_name(&p.name, p.cgroup.as_deref(), p.profiler);
    Thread {
        name,
        pid: p.pid.to_string(),
        tid: t.tid,
        // Not "default": the front end puts "default" processes (its
        // parent process) first, and that is the machine's track; the
        // processes follow it, busiest first.
        process_type: PROCESS_TYPE.into(),
        process_name: Some(process_name),
        process_executable: p.exe.clone(),
        is_main_thread: is_main,
        process_startup_time: start(p.start_ns),
        process_shutdown_time: p.end_ns.map(ms),
        register_time: start(t.start_ns),
        unregister_time: t.end_ns.map(ms),
        paused_ranges: Vec::new(),
        show_markers_in_timeline: !t.markers.is_empty(),
        context_switches: t
            .switches
            .map(|(v, i)| serde_json::json!({ "voluntary": v, "involuntary": i })),
        cgroup: p.cgroup.clone(),
        frame_table: tables.frames,
        func_table: tables.funcs,
        resource_table: tables.resources,
        native_symbols: tables.symbols,
        stack_table: tables.stacks,
        samples,
        markers,
        string_array: tables.strings.into_strings(),
    }
}

/// One track per CPU: its on-CPU slices as markers, no samples.
pub(super) fn build_cpu_track(
    rec: &Recording,
    cpu: u32,
    markers: &[MarkerRecord],
    ms: &dyn Fn(u64) -> f64,
) -> Thread {
    let mut tables = ThreadTables::default();
    let markers = build_markers(rec, markers, (None, None, false), &mut tables, false, ms);
    // Under the machine's track (its pid): the front end lists a process's
    // tracks under it, and puts the machine first (see track_of_no_process).
    let mut t = track_of_no_process(
        format!("CPU {cpu}"),
        MACHINE_PID,
        CPU_TRACK_TID_BASE + cpu,
        "Machine",
        tables,
        markers,
    );
    t.show_markers_in_timeline = true;
    t
}

/// The track machine-wide counters hang under (CPU usage, memory, disks):
/// the front end shows a counter only as part of a process whose pid has a
/// thread, and only while that process is visible. Under the idle task they
/// were hidden; here they open visible, as "Machine".
///
/// Its row draws the whole machine's CPU: one sample per reading of the
/// machine's "CPU usage" counter (`/proc/stat`), its CPU delta the busy
/// share of all CPUs over the time since the reading before, so a full
/// graph is every CPU busy. Without it the row was empty.
pub(super) fn build_machine_track(rec: &Recording, ms: &dyn Fn(u64) -> f64) -> Thread {
    let mut tables = ThreadTables::default();
    let mut samples = Samples {
        weight_type: "samples".into(),
        ..Default::default()
    };
    let mut cpu_delta = Vec::new();
    let usage = rec
        .counters
        .iter()
        .find(|c| c.pid == 0 && c.name == MACHINE_CPU_COUNTER);
    if let Some(c) = usage.filter(|c| c.time_ns.len() >= 2) {
        let stack = tables.label_stack(MACHINE_BUSY_FRAME, crate::profile::category::OTHER);
        let mut last_ms = 0.0;
        for i in 1..c.time_ns.len().min(c.count.len()) {
            let at = ms(c.time_ns[i]);
            if at < 0.0 {
                continue;
            }
            let span_us = c.time_ns[i].saturating_sub(c.time_ns[i - 1]) as f64 / 1e3;
            let busy = (c.count[i] / 100.0).clamp(0.0, 1.0);
            samples.stack.push(Some(stack));
            samples.time_deltas.push(at - last_ms);
            last_ms = at;
            cpu_delta.push(Some((busy * span_us).round() as u64));
        }
    }
    samples.length = samples.stack.len();
    let mut t = track_of_no_process(
        "Machine".to_string(),
        MACHINE_PID,
        CPU_TRACK_TID_BASE - 1,
        "Machine",
        tables,
        Default::default(),
    );
    samples.thread_cpu_delta = Some(cpu_delta);
    t.samples = samples;
    t.is_main_thread = true;
    t
}

/// The machine's counter its track's samples are read from.
pub(super) const MACHINE_CPU_COUNTER: &str = "CPU usage";

/// The one frame of the machine track's samples.
pub(super) const MACHINE_BUSY_FRAME: &str = "CPUs busy (share of all CPUs, from /proc/stat)";

/// A track with no samples that belongs to no process (a CPU's, the
/// machine's): the parts the per-CPU and machine tracks share. Their
/// process type is the front end's parent process ("default"), which it
/// lists first whatever the other processes' activity; every process's
/// tracks are [`PROCESS_TYPE`].
fn track_of_no_process(
    name: String,
    pid: &str,
    tid: u32,
    process_name: &str,
    tables: ThreadTables,
    markers: Markers,
) -> Thread {
    Thread {
        name,
        pid: pid.to_string(),
        tid,
        process_type: MACHINE_PROCESS_TYPE.into(),
        process_name: Some(process_name.to_string()),
        process_executable: None,
        is_main_thread: false,
        process_startup_time: 0.0,
        process_shutdown_time: None,
        register_time: 0.0,
        unregister_time: None,
        paused_ranges: Vec::new(),
        show_markers_in_timeline: false,
        context_switches: None,
        cgroup: None,
        frame_table: tables.frames,
        func_table: tables.funcs,
        resource_table: tables.resources,
        native_symbols: tables.symbols,
        stack_table: tables.stacks,
        samples: Samples {
            weight_type: "samples".into(),
            thread_cpu_delta: Some(Vec::new()),
            ..Default::default()
        },
        markers,
        string_array: tables.strings.into_strings(),
    }
}

/// The pid of the machine's tracks (pids are strings in the format): the
/// kernel's own, the idle task's, whose track joins them. The front end
/// writes "PID: N" under every process's name but pid 0's; the machine's
/// row read "PID: machine" when it had a pid of its own.
pub const MACHINE_PID: &str = "0";

/// Whether a track of `process_type` is one of the machine's (the front
/// end's parent process type, which no process's track has).
pub fn is_machine_track(process_type: &str) -> bool {
    process_type == MACHINE_PROCESS_TYPE
}

/// The process type of the machine's tracks.
const MACHINE_PROCESS_TYPE: &str = "default";

/// The machine's tracks' pid in profiles written before it was
/// [`MACHINE_PID`] (`report` reads those too).
pub const OLD_MACHINE_PID: &str = "machine";

/// Whether the recording has a machine track ([`build_machine_track`]):
/// CPUs' tracks to hold, or machine-wide counters to draw. Then the idle
/// task's thread (pid 0) sits under it, and is not its main thread.
pub(super) fn has_machine_track(rec: &Recording) -> bool {
    !rec.cpu_tracks.is_empty()
        || rec
            .counters
            .iter()
            .any(|c| c.pid == 0 && super::meta::counter_draws_something(c))
}

/// The process type of every process's tracks: not the front end's parent
/// process ("default", the machine's), so they sort by activity after it.
pub(super) const PROCESS_TYPE: &str = "unknown";
