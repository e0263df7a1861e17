//! What a finished recording holds: the collector's output and the profile
//! writer's input.
//!
//! Processes own threads; threads own their samples as columns. Stacks are
//! one prefix tree over frame indices shared by all threads; frames are
//! (library, library-relative address) with what symbolication found.

use super::short_name::{DeviceName, TaskName};
use super::stack_tree::StackTree;
use super::symbols::AddrInfo;

pub use super::frame_kind::FrameKind;

/// The library index of frames in no known library.
pub const NO_LIB: u32 = u32::MAX;

/// A library (a binary file, or the kernel) that frames point into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibRecord {
    /// Path as the process saw it.
    pub path: String,
    /// File name.
    pub name: String,
    /// GNU build id.
    pub build_id: Option<Vec<u8>>,
}

/// One distinct code address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameRecord {
    /// Index into [`Recording::libs`], or [`NO_LIB`] for an address in no known mapping.
    pub lib: u32,
    /// Address relative to the library (file offset for user code, offset
    /// from `_text` for the kernel), or the absolute address without a library.
    pub address: u64,
    /// What it is.
    pub kind: FrameKind,
    /// What symbolication found (empty `funcs` when unresolved).
    pub symbols: AddrInfo,
}

impl FrameRecord {
    /// A frame that is no code, in no library, named `name`: a pseudo
    /// frame, a goroutine's labels or id.
    pub fn named(kind: FrameKind, name: String) -> FrameRecord {
        FrameRecord {
            lib: NO_LIB,
            address: 0,
            kind,
            symbols: AddrInfo {
                funcs: vec![super::symbols::FuncAtAddr {
                    name,
                    file: None,
                    line: None,
                    start_line: None,
                }],
                ..AddrInfo::default()
            },
        }
    }

    /// Kernel code.
    pub fn is_kernel(&self) -> bool {
        self.kind == FrameKind::Kernel
    }

    /// Not code: a leaf that names why a thread was off-CPU, or a frame
    /// that says where frames are missing.
    pub fn is_pseudo(&self) -> bool {
        self.kind.is_pseudo()
    }

    /// Whether it is a runtime's own frame: a Python function, a Java
    /// method or a JavaScript function, named from the runtime's objects.
    pub fn is_interpreted(&self) -> bool {
        self.kind.is_interpreted()
    }

    /// Whether it is a Java method read from HotSpot (interpreted or
    /// compiled).
    pub fn is_java(&self) -> bool {
        self.kind.is_java()
    }

    /// Whether it is a JavaScript function read from V8.
    pub fn is_interpreted_javascript(&self) -> bool {
        self.kind == FrameKind::JavaScript
    }

    /// The name of code no symbol covers: `lib+0xOFF` (the library's file
    /// name and the address within it) wherever the library is known, as
    /// functions found only by their unwind entries are named; a bare
    /// `0xADDR` only for an address in no known mapping. One scheme for the
    /// profile, folded stacks and the report.
    pub fn unknown_code_name(&self, libs: &[LibRecord]) -> String {
        match (self.lib != NO_LIB)
            .then(|| libs.get(self.lib as usize))
            .flatten()
        {
            Some(lib) => format!("{}+{:#x}", lib.name, self.address),
            None => format!("{:#x}", self.address),
        }
    }
}

/// Off-CPU time of one thread, as weighted samples (columns of equal length).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffCpuSamples {
    /// When the interval started (switched out), ns.
    pub time_ns: Vec<u64>,
    /// Stack at switch-out, ending in a leaf that names the reason.
    pub stack: Vec<u32>,
    /// How long it lasted, ns.
    pub duration_ns: Vec<u64>,
}

/// A woken wait's run-queue delay (from its wakeup's enqueue to running)
/// from this long on is shown apart from the wait: its own marker and, in
/// its off-CPU sample's stack, its own leaf ([`RUN_DELAY_FRAME_NAME`]) under
/// the reason's. 0.1 ms: the kernel's fold threshold; shorter, a bar would
/// not show at a wait's end (10-40 us is most waits' on an idle machine).
pub const RUN_DELAY_APART_MIN_NS: u64 = 100_000;

/// Whether a wait's run delay is shown apart from it (the one rule for the
/// collector's samples and the profile's markers): a woken wait's, from
/// [`RUN_DELAY_APART_MIN_NS`] on; a preemption is all run delay.
pub fn run_delay_shown_apart(reason: OffCpuReason, run_delay_ns: u64) -> bool {
    reason != OffCpuReason::Preempted && run_delay_ns >= RUN_DELAY_APART_MIN_NS
}

/// The leaf of a woken wait's run delay, under its reason's leaf (so a
/// reason's frame still holds the whole wait, and the inverted call tree
/// sums what waited for a CPU after its wakeups).
pub const RUN_DELAY_FRAME_NAME: &str = "[off-CPU: woken, waiting for a CPU]";

/// Why a thread was off-CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum OffCpuReason {
    /// Still runnable: preempted, waiting for a CPU.
    Preempted,
    /// Interruptible sleep (S).
    Sleeping,
    /// Uninterruptible (D), usually I/O.
    Blocked,
    /// Stopped, traced, parked, idle.
    Other,
}

impl OffCpuReason {
    /// Short name, as shown in markers.
    pub fn label(self) -> &'static str {
        match self {
            OffCpuReason::Preempted => "preempted (runnable)",
            OffCpuReason::Sleeping => "sleeping",
            OffCpuReason::Blocked => "blocked (uninterruptible)",
            OffCpuReason::Other => "other",
        }
    }

    /// The leaf frame's name in off-CPU stacks.
    pub fn frame_name(self) -> &'static str {
        match self {
            OffCpuReason::Preempted => "[off-CPU: preempted, waiting for a CPU]",
            OffCpuReason::Sleeping => "[off-CPU: sleeping]",
            OffCpuReason::Blocked => "[off-CPU: blocked, uninterruptible (I/O)]",
            OffCpuReason::Other => "[off-CPU: other state]",
        }
    }
}

/// Who woke a thread.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Waker {
    /// The waking task, or for an interrupt the task it interrupted.
    pub pid: u32,
    /// Its thread id.
    pub tid: u32,
    /// Its name.
    pub name: TaskName,
    /// Set when the wakeup came from an interrupt, not from the task, or
    /// when that is unknown (`InterruptKind::Unknown`: its stack was lost).
    pub interrupt: Option<InterruptKind>,
}

impl Waker {
    /// As shown in markers: "pinger (pid 12, tid 13)" or
    /// "an interrupt (while sysprof ran, pid 5, tid 5)".
    pub fn label(&self) -> String {
        match self.interrupt {
            None => format!("{} (pid {}, tid {})", self.name, self.pid, self.tid),
            Some(InterruptKind::Unknown) => {
                format!("{} (pid {}, tid {}), or an interrupt while it ran (the waker's stack was lost)", self.name, self.pid, self.tid)
            }
            Some(kind) if self.pid == 0 => format!("{} (while the CPU was idle)", kind.label()),
            Some(kind) => format!(
                "{} (while {} ran, pid {}, tid {})",
                kind.label(),
                self.name,
                self.pid,
                self.tid
            ),
        }
    }
}

/// Who woke a run of short waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ShortWaker {
    /// Only preemptions: nobody (all of it was runnable).
    Nobody,
    /// Their wakeups were not seen.
    Unseen,
    /// One task woke each of them.
    Task {
        /// Its process.
        pid: u32,
        /// Its thread.
        tid: u32,
    },
    /// Interrupts (timers, devices).
    Interrupt,
    /// Several wakers, none with a run of its own.
    Several,
}

impl ShortWaker {
    /// As shown in markers, after "woken by": "tid 13 (pid 12)", "an
    /// interrupt", "nobody (preempted)" (not "—", which read as a field left
    /// empty: "woken by — (preempted)").
    pub fn label(&self) -> String {
        match self {
            ShortWaker::Nobody => "nobody (preempted)".into(),
            ShortWaker::Unseen => "a waker not seen".into(),
            ShortWaker::Task { pid, tid } => format!("tid {tid} (pid {pid})"),
            ShortWaker::Interrupt => "an interrupt".into(),
            ShortWaker::Several => "several threads".into(),
        }
    }

    /// Where it came from: "task", "interrupt", "several", "not seen", "none".
    pub fn context(&self) -> &'static str {
        match self {
            ShortWaker::Nobody => "none",
            ShortWaker::Unseen => "not seen",
            ShortWaker::Task { .. } => "task",
            ShortWaker::Interrupt => "interrupt",
            ShortWaker::Several => "several",
        }
    }
}

/// A block request's sector when it has none: the kernel's position of a
/// request that addresses no sector (a flush), `(sector_t)-1`.
pub const NO_SECTOR: u64 = u64::MAX;

/// What a block request did, from its operation and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum IoOp {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Cache flush.
    Flush,
    /// Discard.
    Discard,
    /// Secure erase.
    SecureErase,
    /// Write zeroes.
    WriteZeroes,
    /// Anything else (zoned-device and driver-private operations): the raw REQ_OP.
    Other(u32),
}

impl IoOp {
    /// Short name: read, write, flush, discard, secure-erase, write-zeroes, op N.
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            IoOp::Read => "read".into(),
            IoOp::Write => "write".into(),
            IoOp::Flush => "flush".into(),
            IoOp::Discard => "discard".into(),
            IoOp::SecureErase => "secure-erase".into(),
            IoOp::WriteZeroes => "write-zeroes".into(),
            IoOp::Other(n) => format!("op {n}").into(),
        }
    }
}

/// The bits of a block request's flags (the BPF ABI's `IO_*`, which
/// `bpf::abi` checks equal): recordings and store segments hold them as is.
pub mod io_flags {
    /// A cache flush before the write.
    pub const IO_PREFLUSH: u32 = 1;
    /// Forced unit access.
    pub const IO_FUA: u32 = 2;
    /// Synchronous.
    pub const IO_SYNC: u32 = 4;
    /// Filesystem metadata.
    pub const IO_META: u32 = 8;
    /// Read-ahead.
    pub const IO_READAHEAD: u32 = 16;
}

/// The flags of a block request, as words appended to `out`: "preflush,
/// sync" (no list is built: one per request of a busy disk's markers).
pub fn write_io_flag_names(out: &mut String, flags: u32) {
    use io_flags::*;
    let mut first = true;
    for (flag, name) in [
        (IO_PREFLUSH, "preflush"),
        (IO_FUA, "fua"),
        (IO_SYNC, "sync"),
        (IO_META, "meta"),
        (IO_READAHEAD, "readahead"),
    ] {
        if flags & flag != 0 {
            if !first {
                out.push_str(", ");
            }
            out.push_str(name);
            first = false;
        }
    }
}

/// Who ran in a per-CPU slice, for its category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SliceKind {
    /// A user process.
    User,
    /// A kernel thread.
    Kernel,
    /// The idle task.
    Idle,
}

/// A marker on a thread's track.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum MarkerRecord {
    /// An off-CPU interval at least as long as the marker threshold.
    OffCpu {
        /// Switched out, ns.
        start_ns: u64,
        /// Running again, ns.
        end_ns: u64,
        /// Why.
        reason: OffCpuReason,
        /// From wakeup (or preemption) to running again, ns; `None` when
        /// not known: no wakeup was seen (it came before the wait was
        /// traced, or the thread still slept when the recording ended).
        run_delay_ns: Option<u64>,
        /// Before that delay, from the wakeup to its enqueue on the run
        /// queue, ns (0: not seen): the wakeup on its way to an idle CPU
        /// (on a VM, the host running that vCPU again). Neither waited for
        /// the waker nor runnable: the kernel counts run delay from the
        /// enqueue.
        landing_ns: u64,
        /// Who woke it, if a wakeup was seen.
        waker: Option<Waker>,
        /// CPU it left and CPU it came back on.
        cpus: (u32, u32),
        /// The waker's stack at the wakeup.
        waker_stack: Option<u32>,
    },
    /// A block I/O request issued by this thread.
    Io {
        /// Created, ns.
        start_ns: u64,
        /// Issued to the device, ns.
        issue_ns: u64,
        /// Completed, ns.
        done_ns: u64,
        /// Device name (sda, nvme0n1, ...).
        device: DeviceName,
        /// What it did.
        op: IoOp,
        /// `IO_*` flags of the request.
        flags: u32,
        /// Bytes.
        bytes: u32,
        /// First sector; [`NO_SECTOR`] for a request at none (a flush).
        sector: u64,
        /// Error (negative errno) or 0.
        error: i32,
        /// The issuing stack.
        stack: Option<u32>,
    },
    /// Off-CPU waits shorter than the marker threshold, summed over a span
    /// per waker: what `report --why` charges short round trips to.
    ShortWaits {
        /// Start of the first, ns.
        start_ns: u64,
        /// End of the last, ns.
        end_ns: u64,
        /// How many waits.
        count: u32,
        /// Their off-CPU time, ns (less than the span: it ran in between).
        off_cpu_ns: u64,
        /// Of it, the time before their wakeups, ns; the rest was
        /// runnable (preemptions, and run-queue delay after the wakeups).
        waited_ns: u64,
        /// Of the rest, the time their wakeups took to land on a run
        /// queue, ns (see `OffCpu`'s `landing_ns`).
        landing_ns: u64,
        /// Who woke them.
        waker: ShortWaker,
    },
    /// A thread running on a CPU (per-CPU tracks).
    OnCpu {
        /// First sample of the slice, ns.
        start_ns: u64,
        /// End of the slice, ns.
        end_ns: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// "thread name (process name, tid)".
        name: String,
        /// User process, kernel thread or idle.
        kind: SliceKind,
    },
}

impl MarkerRecord {
    /// When it starts, ns.
    pub fn start_ns(&self) -> u64 {
        match self {
            MarkerRecord::OffCpu { start_ns, .. }
            | MarkerRecord::Io { start_ns, .. }
            | MarkerRecord::OnCpu { start_ns, .. }
            | MarkerRecord::ShortWaits { start_ns, .. } => *start_ns,
        }
    }
}

/// A counter track: a value over time.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterRecord {
    /// Name ("CPU usage", "Memory", "Disk read: sda", ...).
    pub name: String,
    /// Category shown by the Firefox Profiler ("CPU", "Memory", "Bandwidth").
    pub category: String,
    /// What it measures, with its unit.
    pub description: String,
    /// Process it belongs to (0 for the machine).
    pub pid: u32,
    /// Sample times, ns.
    pub time_ns: Vec<u64>,
    /// Values: for category "Memory", the change since the previous sample
    /// (the Firefox Profiler accumulates them); otherwise the value itself.
    pub count: Vec<f64>,
    /// For category "Memory": the level before the first sample's change,
    /// so the level at sample i is `base + count[0..=i]` summed; None where
    /// it is not known (read from the store, which keeps the changes only).
    pub base: Option<f64>,
}

/// Samples of one thread, as columns of equal length, sorted by time.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThreadSamples {
    /// CLOCK_MONOTONIC ns.
    pub time_ns: Vec<u64>,
    /// Node in [`Recording::stacks`].
    pub stack: Vec<u32>,
    /// CPU time the thread used since its previous sample, ns.
    pub cpu_delta_ns: Vec<u64>,
    /// The CPU it ran on.
    pub cpu: Vec<u32>,
}

/// One thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadRecord {
    /// Thread id.
    pub tid: u32,
    /// Latest `comm`.
    pub name: String,
    /// Creation time if it was created during the recording (ns).
    pub start_ns: Option<u64>,
    /// Exit time if it exited during the recording (ns).
    pub end_ns: Option<u64>,
    /// Its samples.
    pub samples: ThreadSamples,
    /// Its off-CPU intervals (empty unless off-CPU tracking is on).
    pub off_cpu: OffCpuSamples,
    /// Markers: off-CPU intervals, I/O requests.
    pub markers: Vec<MarkerRecord>,
    /// (voluntary, involuntary) context switches during the recording.
    pub switches: Option<(u64, u64)>,
}

/// One process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessRecord {
    /// Process id.
    pub pid: u32,
    /// Name: the executable's file name, else the main thread's `comm`; a
    /// folded track's is `NAME ×N` ([`ProcessRecord::base_name`] gives NAME).
    pub name: String,
    /// Path of the executable, if known.
    pub exe: Option<String>,
    /// Command line, if known.
    pub cmdline: String,
    /// Start time (ns), if known.
    pub start_ns: Option<u64>,
    /// Exit time if it exited during the recording (ns).
    pub end_ns: Option<u64>,
    /// Its cgroup path, if not the root.
    pub cgroup: Option<String>,
    /// It is the profiler itself (this sysprof, recording or as the agent).
    pub profiler: bool,
    /// Threads, main thread first.
    pub threads: Vec<ThreadRecord>,
    /// Brief processes of one name this track stands for, folded into it
    /// ([`crate::model::fold`]); 0 for a process of its own.
    pub folded: u64,
}

impl ProcessRecord {
    /// The name its processes had: for a folded track, its name less the
    /// count [`crate::model::fold`] put after it.
    pub fn base_name(&self) -> &str {
        if self.folded == 0 {
            return &self.name;
        }
        self.name
            .strip_suffix(self.folded.to_string().as_str())
            .and_then(|n| n.strip_suffix(crate::model::fold::COUNT_SEPARATOR))
            .unwrap_or(&self.name)
    }
}

/// Totals reported at the end of a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordingStats {
    /// Samples decoded.
    pub samples: u64,
    /// Samples of the processes kept (all of them with -a; the chosen
    /// processes and their children with -p or a command), in the range:
    /// not the few a CPU took before the last CPU's sampler was attached.
    pub samples_kept: u64,
    /// Samples lost in the kernel (ring buffer full).
    pub lost_samples: u64,
    /// Samples kept without a kernel stack because reading it failed.
    pub kernel_stack_failures: u64,
    /// Samples kept without a user stack because reading it failed.
    pub user_stack_failures: u64,
    /// Samples and stack records whose hand-over to userspace went without
    /// its stack copy because their ring was over half full: kept,
    /// their user stacks cut where the kernel's walk ended. Not kept by the store (its format
    /// predates it): 0 when read back.
    pub handovers_skipped: u64,
    /// Runs of the tracer's programs the kernel skipped because one was
    /// already running on that CPU (an interrupt's tracepoint inside
    /// another's: `recursion_misses` in the programs' fdinfo): each a switch,
    /// wake-up or request event never seen. Not kept by the store: 0 when
    /// read back.
    pub tracepoint_runs_missed: u64,
    /// Sideband records lost (perf ring full).
    pub lost_sideband: u64,
    /// Records that could not be decoded.
    pub malformed: u64,
    /// Off-CPU intervals recorded one by one.
    pub off_cpu_intervals: u64,
    /// Shorter off-CPU intervals folded into per-reason totals.
    pub off_cpu_folded: u64,
    /// Intervals whose switch back in was not traced (their end comes from
    /// the thread's CPU time when it next left the CPU).
    pub off_cpu_end_inferred: u64,
    /// Block I/O requests recorded.
    pub io_requests: u64,
    /// Off-CPU, I/O or folded records lost (events ring full).
    pub lost_events: u64,
    /// Stack records lost (events ring full): their events have no stack.
    pub lost_stacks: u64,
    /// Stack records received (one per distinct place a thread left the
    /// CPU, woke another or started a request).
    pub stack_records: u64,
    /// Stacks the kernel could not read (kept without them).
    pub stack_read_failures: u64,
    /// Events whose stack was no longer kept when they arrived.
    pub stacks_not_kept: u64,
    /// Threads or requests not seen because a state map was full.
    pub lost_state: u64,
    /// Requests seen at one end only, so without a marker: completed with
    /// no start seen (they began before the recording, or their start was
    /// lost), or started and never seen to complete (the completion was
    /// not traced, or they were still in flight when the recording ended).
    pub io_untracked: u64,
    /// Processes that started and exited in the window without a single
    /// sample or event (a fork storm's children, mostly): not in the profile.
    pub processes_without_data: u64,
    /// Python frames kept unnamed (`[Python frame: ...]`): their code
    /// object could not be read. Not kept by the store: 0 when read back.
    pub python_frames_unnamed: u64,
    /// Code objects (each counted once, however many frames it had) freed
    /// after their sample whose address another took: refused by their
    /// fingerprint, never named as the new one. Not kept by the store.
    pub python_codes_replaced: u64,
    /// JavaScript frames kept as their code's address (a builtin's, or
    /// `[JIT] node`): the process exited, or V8 moved or freed the
    /// function's object, before it was read. Not kept by the store.
    pub js_frames_unnamed: u64,
    /// Bytes of the tracer's records read (off-CPU, I/O, folded, stack
    /// records, thread ends): what its ring carried. Not kept by the store.
    pub tracer_bytes: u64,
    /// The most bytes one read took from the sample ring, and from the
    /// tracer's: how full each came to be, against its size. Not kept by
    /// the store.
    pub samples_ring_peak: u64,
    pub events_ring_peak: u64,
    /// User stacks unwound with DWARF (dwarf mode).
    pub unwind: UnwindStats,
}

impl RecordingStats {
    /// Everything lost in the kernel or on the way, as one total.
    pub fn lost_total(&self) -> u64 {
        self.lost_samples
            + self.lost_sideband
            + self.malformed
            + self.lost_events
            + self.lost_stacks
            + self.lost_state
            + self.tracepoint_runs_missed
    }
}

/// A finished recording.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// CLOCK_MONOTONIC ns when recording started.
    pub start_ns: u64,
    /// Wall clock at `start_ns`, ms since the Unix epoch.
    pub start_wall_ms: f64,
    /// CLOCK_MONOTONIC ns when recording stopped.
    pub end_ns: u64,
    /// Sampling interval, ms.
    pub interval_ms: f64,
    /// Processes with at least one thread in the profile.
    pub processes: Vec<ProcessRecord>,
    /// Libraries: binaries, the kernel, then one per process with JIT symbols.
    pub libs: Vec<LibRecord>,
    /// Every distinct frame.
    pub frames: Vec<FrameRecord>,
    /// Stacks: a prefix tree whose keys are indices into `frames`, root = outermost caller.
    pub stacks: StackTree,
    /// Totals.
    pub stats: RecordingStats,
    /// Warnings for the user and the profile log (deduplicated).
    pub warnings: Vec<String>,
    /// Counter tracks.
    pub counters: Vec<CounterRecord>,
    /// One track per CPU with on-CPU slices (with --per-cpu).
    pub cpu_tracks: Vec<(u32, Vec<MarkerRecord>)>,
    /// True when off-CPU time was recorded (samples are then weighted in ms).
    pub off_cpu: bool,
    /// Every process was recorded (`record -a`), not only a command's or a
    /// pid's and those they started: another process is then no child of
    /// the command's (the profile's first selected thread).
    pub whole_system: bool,
    /// The recording stopped because what it followed ended (the command,
    /// or every `-p` process): its end is theirs, which the profile says as
    /// the end of its main process. Set by `record` once it stopped; false
    /// for a duration's or a signal's end, and read back from the store.
    pub main_process_ended: bool,
    /// Notes for the profile's log (not warnings: e.g. "no hardware PMU").
    pub notes: Vec<String>,
    /// The names (`comm`) of the threads that woke its short waits, by tid,
    /// those with no track of their own included (a waker outside `record
    /// -- CMD`): short waits name their waker as long ones do. Not kept by
    /// the store: empty when read back.
    pub waker_names: std::collections::HashMap<u32, String>,
}

/// Which kind of interrupt a kernel stack ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InterruptKind {
    /// A hardware interrupt handler.
    Hard,
    /// Softirq processing borrowed by whatever task ran.
    Soft,
    /// Not known: the waker's kernel stack was lost (a full ring). An
    /// interrupt that arrives in user mode runs on the task's own stack, so
    /// only that stack tells it from the task: without it the task named
    /// may just be the one an interrupt interrupted.
    Unknown,
}

impl InterruptKind {
    /// As shown in markers.
    pub fn label(self) -> &'static str {
        match self {
            InterruptKind::Hard => "an interrupt",
            InterruptKind::Soft => "a softirq",
            InterruptKind::Unknown => "the task or an interrupt",
        }
    }
}

/// Unwinding totals, for the summary and the benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Stacks unwound.
    pub unwinds: u64,
    /// Of those, reaching the thread's root.
    pub reached_root: u64,
    /// Stopped because the stack copy ended.
    pub copy_exhausted: u64,
    /// Of those, in the profiler itself (its BPF loading runs deep), which
    /// the summary does not count against the user's programs.
    pub copy_exhausted_in_profiler: u64,
    /// Of `copy_exhausted` (the profiler's own left out), copies as long
    /// as `--stack-size`: the stacks a larger copy would take deeper (the
    /// others ended where the stack's readable memory did). Not kept by the
    /// store (its format predates it): 0 when read back.
    pub copy_exhausted_at_size: u64,
    /// Stopped for lack of unwind information.
    pub no_unwind_info: u64,
    /// Stopped at a return address outside any code.
    pub bad_return_address: u64,
    /// Time spent unwinding here (in userspace), ns.
    pub unwind_ns: u64,
    /// Of `unwinds`, those unwound here from a copied stack (the rest the
    /// kernel walked, in no time of ours): what `unwind_ns` was spent on.
    /// Not kept by the store (its format predates it): 0 when read back.
    pub unwinds_here: u64,
    /// Bytes of the stack copies of `unwinds_here`: what the copies carried
    /// through the rings (a copy runs from sp to its stack's top where that
    /// is known, else to `--stack-size` or the end of readable memory). Not
    /// kept by the store: 0 when read back.
    pub copied_bytes: u64,
}
