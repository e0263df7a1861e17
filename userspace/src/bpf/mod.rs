//! Loading the eBPF side and reading what it sends.
//!
//! In: the committed `ebpf/sample.bpf.o` (embedded in the binary), the
//! sampling frequency and an optional pid filter. Out: a [`Sampler`] whose
//! ring buffer yields raw sample records (decoded by [`abi`]), and the drop
//! counters the kernel side kept. Loading uses aya; CO-RE relocations are
//! resolved against `/sys/kernel/btf/vmlinux`.

pub mod abi;

use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::PerfEvent;
use aya::{Ebpf, EbpfLoader};

use crate::error::RecordError;

/// The sampler object, built by `cargo xtask build-ebpf`.
static SAMPLE_BPF_OBJECT: &[u8] = include_bytes_aligned!("../../../ebpf/sample.bpf.o");

/// `include_bytes!` with 8-byte alignment, which ELF parsing needs.
macro_rules! include_bytes_aligned {
    ($path:expr) => {{
        #[repr(C, align(8))]
        struct Aligned<B: ?Sized>(B);
        static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!($path));
        &ALIGNED.0
    }};
}
use include_bytes_aligned;

/// Options for the kernel side.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Only sample this process (0: every process).
    pub target_tgid: u32,
    /// Size of the sample ring buffer in bytes (a power of two).
    pub ring_bytes: u32,
    /// Bytes waiting in the ring before the kernel wakes the reader; the
    /// reader also drains on a timer, so this only bounds the latency.
    pub wakeup_bytes: u64,
    /// Dwarf mode: bytes of user stack copied per sample (0: frame pointers).
    pub stack_copy: u32,
}

/// The loaded and attached cpu-clock sampler. Its sample records arrive in
/// the [`RingBuf`] that [`Sampler::start`] returns beside it.
pub struct Sampler {
    // Keeps programs and links alive; dropping it detaches everything.
    _ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
}

/// Per-reason totals of what the kernel side lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelDrops {
    /// Samples lost whole because the ring buffer was full.
    pub ring_full: u64,
    /// Samples kept without their kernel stack.
    pub kernel_stack: u64,
    /// Samples kept without their user stack.
    pub user_stack: u64,
}

impl Sampler {
    /// Load the sampler and attach it to a cpu-clock event on every online CPU.
    pub fn start(opts: &SamplerOptions) -> Result<(Sampler, RingBuf<MapData>), RecordError> {
        let mut ebpf = EbpfLoader::new()
            .override_global("targ_tgid", &opts.target_tgid, true)
            .override_global("wakeup_bytes", &opts.wakeup_bytes, true)
            .override_global("stack_copy", &opts.stack_copy, true)
            .map_max_entries("samples", opts.ring_bytes)
            .load(SAMPLE_BPF_OBJECT)
            .map_err(|e| RecordError::from_bpf_load("sample.bpf.o", &e))?;
        let program: &mut PerfEvent = ebpf
            .program_mut("sample_cpu_clock")
            .ok_or_else(|| RecordError::Internal("sample_cpu_clock missing from object".into()))?
            .try_into()
            .map_err(|e| RecordError::Internal(format!("sample_cpu_clock: {e}")))?;
        program.load().map_err(|e| RecordError::from_program_load("sample_cpu_clock", &e))?;
        for cpu in online_cpus()? {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(opts.frequency),
                    false,
                )
                .map_err(|e| RecordError::PerfEvent {
                    what: format!("cpu-clock sampling on CPU {cpu}"),
                    source: std::io::Error::other(e.to_string()),
                })?;
        }
        let ring = RingBuf::try_from(take(&mut ebpf, "samples")?)
            .map_err(|e| RecordError::Internal(format!("samples ring: {e}")))?;
        let drops = PerCpuArray::try_from(take(&mut ebpf, "drops")?)
            .map_err(|e| RecordError::Internal(format!("drops map: {e}")))?;
        Ok((Sampler { _ebpf: ebpf, drops }, ring))
    }

    /// Sum the per-CPU drop counters.
    pub fn drops(&self) -> KernelDrops {
        let sum = |reason: u32| -> u64 {
            self.drops.get(&reason, 0).map(|v| v.iter().sum()).unwrap_or(0)
        };
        KernelDrops {
            ring_full: sum(abi::DROP_RINGBUF_FULL),
            kernel_stack: sum(abi::DROP_KSTACK),
            user_stack: sum(abi::DROP_USTACK),
        }
    }
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, RecordError> {
    ebpf.take_map(name)
        .ok_or_else(|| RecordError::Internal(format!("map {name} missing from object")))
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> Result<Vec<u32>, RecordError> {
    aya::util::online_cpus().map_err(|(path, e)| RecordError::Internal(format!("{path}: {e}")))
}

/// The scheduler and block I/O tracer object, built by `cargo xtask build-ebpf`.
static SCHED_BPF_OBJECT: &[u8] = include_bytes_aligned!("../../../ebpf/sched.bpf.o");

/// Options for the scheduler and I/O tracer.
#[derive(Debug, Clone)]
pub struct TracerOptions {
    /// Only trace this process (0: every process).
    pub target_tgid: u32,
    /// Trace context switches and wakeups.
    pub off_cpu: bool,
    /// Trace block I/O requests.
    pub io: bool,
    /// Off-CPU intervals shorter than this are folded into totals, not sent one by one.
    pub off_cpu_min_ns: u64,
    /// Size of the events ring buffer in bytes (a power of two).
    pub ring_bytes: u32,
    /// Dwarf mode: bytes of user stack copied at switch-out (0: frame pointers).
    pub stack_copy: u32,
}

/// The loaded and attached scheduler/I/O tracer. Its records arrive in the
/// [`RingBuf`] that [`Tracer::start`] returns beside it.
pub struct Tracer {
    _ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
    stacks: aya::maps::StackTraceMap<MapData>,
    threads: aya::maps::HashMap<MapData, u32, abi::ThreadState>,
}

/// What the tracer lost, per reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TracerDrops {
    /// Off-CPU and I/O records lost because the events ring was full.
    pub events_full: u64,
    /// Stacks that could not be captured (intervals kept without them).
    pub stack_ids: u64,
    /// Intervals or requests not seen because a state map was full.
    pub state_full: u64,
}

impl Tracer {
    /// Load the tracer and attach what `opts` asks for.
    pub fn start(opts: &TracerOptions) -> Result<(Tracer, RingBuf<MapData>), RecordError> {
        ensure_tracefs();
        let wakeup = (opts.ring_bytes as u64 / 16).max(4096);
        let mut ebpf = EbpfLoader::new()
            .override_global("targ_tgid", &opts.target_tgid, true)
            .override_global("offcpu_min_ns", &opts.off_cpu_min_ns, true)
            .override_global("stack_copy", &opts.stack_copy, true)
            .override_global("wakeup_bytes", &wakeup, true)
            .override_global("has_prev_state_arg", &(kernel_at_least(5, 18) as u8), true)
            .map_max_entries("events", opts.ring_bytes)
            .load(SCHED_BPF_OBJECT)
            .map_err(|e| RecordError::from_bpf_load("sched.bpf.o", &e))?;
        if opts.off_cpu {
            // Raw tracepoints skip building the trace record: cheaper on the
            // hottest events there are. Classic tracepoints where they fail.
            for (raw, classic, name) in [
                ("on_sched_switch_raw", "on_sched_switch", "sched_switch"),
                ("on_sched_waking_raw", "on_sched_waking", "sched_waking"),
            ] {
                if let Err(raw_err) = attach_raw_tracepoint(&mut ebpf, raw, name) {
                    attach_tracepoint(&mut ebpf, classic, "sched", &[name]).map_err(|e| match e {
                        RecordError::PerfEvent { what, source } => RecordError::PerfEvent {
                            what,
                            source: std::io::Error::other(format!("{source} (raw tracepoint: {raw_err})")),
                        },
                        other => other,
                    })?;
                }
            }
        }
        let mut wanted: Vec<(&str, &str, &[&str])> = Vec::new();
        if opts.io {
            wanted.push(("on_block_start", "block", &["block_io_start", "block_rq_insert"]));
            wanted.push(("on_block_issue", "block", &["block_rq_issue"]));
            wanted.push(("on_block_rq_complete", "block", &["block_rq_complete"]));
        }
        for (prog, category, names) in wanted {
            attach_tracepoint(&mut ebpf, prog, category, names)?;
        }
        let ring = RingBuf::try_from(take(&mut ebpf, "events")?)
            .map_err(|e| RecordError::Internal(format!("events ring: {e}")))?;
        let drops = PerCpuArray::try_from(take(&mut ebpf, "drops")?)
            .map_err(|e| RecordError::Internal(format!("drops map: {e}")))?;
        let stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "stacks")?)
            .map_err(|e| RecordError::Internal(format!("stacks map: {e}")))?;
        let threads = aya::maps::HashMap::try_from(take(&mut ebpf, "threads")?)
            .map_err(|e| RecordError::Internal(format!("threads map: {e}")))?;
        Ok((Tracer { _ebpf: ebpf, drops, stacks, threads }, ring))
    }

    /// Sum the per-CPU drop counters.
    pub fn drops(&self) -> TracerDrops {
        let sum = |reason: u32| -> u64 { self.drops.get(&reason, 0).map(|v| v.iter().sum()).unwrap_or(0) };
        TracerDrops {
            events_full: sum(abi::DROP_EVENTS_FULL),
            stack_ids: sum(abi::DROP_STACKID),
            state_full: sum(abi::DROP_STATE_FULL),
        }
    }

    /// The stack with this id, leaf first, or None if it was evicted.
    pub fn stack(&self, id: i32) -> Option<Vec<u64>> {
        if id < 0 {
            return None;
        }
        let trace = self.stacks.get(&(id as u32), 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }

    /// Every thread's scheduler state: switch totals, open off-CPU interval.
    pub fn thread_states(&self) -> Vec<(u32, abi::ThreadState)> {
        self.threads.iter().filter_map(Result::ok).collect()
    }
}

/// Load `prog` and attach it to the first of `names` (in `category`) that exists.
fn attach_tracepoint(ebpf: &mut Ebpf, prog: &str, category: &str, names: &[&str]) -> Result<(), RecordError> {
    let p: &mut aya::programs::TracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| RecordError::Internal(format!("{prog} missing from sched.bpf.o")))?
        .try_into()
        .map_err(|e| RecordError::Internal(format!("{prog}: {e}")))?;
    p.load().map_err(|e| RecordError::from_program_load(prog, &e))?;
    let mut last_err = None;
    for name in names {
        match p.attach(category, name) {
            Ok(_) => return Ok(()),
            Err(e) => last_err = Some(format!("{category}:{name}: {e}")),
        }
    }
    Err(RecordError::PerfEvent {
        what: format!("the tracepoint {}", names.join(" or ")),
        source: std::io::Error::other(format!(
            "{}; is tracefs mounted at /sys/kernel/tracing? (`mount -t tracefs nodev /sys/kernel/tracing`)",
            last_err.unwrap_or_default()
        )),
    })
}

/// Load `prog` and attach it to the raw tracepoint `name`.
fn attach_raw_tracepoint(ebpf: &mut Ebpf, prog: &str, name: &str) -> Result<(), String> {
    let p: &mut aya::programs::RawTracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| format!("{prog} missing from sched.bpf.o"))?
        .try_into()
        .map_err(|e| format!("{prog}: {e}"))?;
    p.load().map_err(|e| RecordError::from_program_load(prog, &e).to_string())?;
    p.attach(name).map(|_| ()).map_err(|e| format!("{name}: {e}"))
}

/// Whether the running kernel is at least major.minor.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = crate::error::kernel_release();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

/// Mount tracefs at /sys/kernel/tracing when it is missing: tracepoints are
/// attached by the ids it lists.
fn ensure_tracefs() {
    let dir = std::path::Path::new("/sys/kernel/tracing");
    if dir.join("events").exists() || std::path::Path::new("/sys/kernel/debug/tracing/events").exists() {
        return;
    }
    // SAFETY: valid NUL-terminated strings; failure is reported by attach.
    unsafe {
        libc::mount(c"nodev".as_ptr(), c"/sys/kernel/tracing".as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null());
    }
}
