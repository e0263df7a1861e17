//! Loading the eBPF side and reading what it sends.
//!
//! In: the committed `ebpf/sample.bpf.o` and `ebpf/sched.bpf.o` (embedded
//! in the binary), the sampling frequency and an optional pid filter. Out: a
//! [`Sampler`] and a [`Tracer`] whose ring buffers yield raw records
//! (decoded by [`abi`]), and the drop counters the kernel side kept. Loading
//! uses aya; CO-RE relocations are resolved against `/sys/kernel/btf/vmlinux`.

pub mod abi;
pub mod unwind_maps;

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
    /// With kernel unwinding, only where the kernel hands a sample over.
    pub stack_copy: u32,
    /// With kernel unwinding, bytes copied per sample until the walker is
    /// in (`sample_first`; 0: frame pointers).
    pub first_stack_copy: u32,
    /// Unwind user stacks in the kernel, with room for this many table rows
    /// (0: do not).
    pub kernel_unwind_rows: u32,
    /// Entries of the process map (`unwind_processes`).
    pub kernel_unwind_processes: u32,
    /// Pin the unwind maps here for the tracer to share.
    pub share_unwind_maps: Option<std::path::PathBuf>,
}

/// The cpu-clock sampler. Its sample records arrive in the [`RingBuf`] that
/// [`Sampler::load`] returns beside it.
pub struct Sampler {
    // Keeps programs and links alive; dropping it detaches everything.
    ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
    frequency: u64,
    unwind_maps: Option<unwind_maps::KernelUnwindMaps>,
    /// How long each step of its load took (see [`LoadTimes`]).
    pub load_times: LoadTimes,
    /// The program on the cpu-clock events: `sample_cpu_clock`, or with
    /// kernel unwinding `sample_first` until the walker is in.
    entry: &'static str,
    /// `sample_first` is on the events and the walker not yet loaded.
    walker_pending: bool,
}

/// How long loading took, per step: an object (its maps and BTF) or a
/// program (the kernel's verifier): the wait before recording starts.
pub type LoadTimes = Vec<(&'static str, std::time::Duration)>;

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
    /// Load the sampler (not attached yet: see [`Sampler::attach`]).
    pub fn load(opts: &SamplerOptions) -> Result<(Sampler, RingBuf<MapData>), RecordError> {
        let mut loader = EbpfLoader::new();
        if let Some(dir) = &opts.share_unwind_maps {
            loader
                .map_pin_path("unwind_rows", dir.join("unwind_rows"))
                .map_pin_path("unwind_processes", dir.join("unwind_processes"))
                .map_pin_path("unwind_refused", dir.join("unwind_refused"))
                .map_pin_path("python_procs", dir.join("python_procs"));
        }
        let mut load_times = LoadTimes::new();
        let object_started = std::time::Instant::now();
        let mut ebpf = loader
            .override_global("targ_tgid", &opts.target_tgid, true)
            .override_global("wakeup_bytes", &opts.wakeup_bytes, true)
            .override_global("stack_copy", &opts.stack_copy, true)
            .override_global("first_stack_copy", &opts.first_stack_copy, true)
            .override_global(
                "kernel_unwind",
                &((opts.kernel_unwind_rows > 0) as u32),
                true,
            )
            .map_max_entries("samples", opts.ring_bytes)
            .map_max_entries(
                "unwind_rows",
                (opts.kernel_unwind_rows as usize)
                    .div_ceil(unwind_maps::UNWIND_CHUNK_ROWS)
                    .max(1) as u32,
            )
            .map_max_entries("unwind_processes", opts.kernel_unwind_processes.max(1))
            .map_max_entries("python_procs", opts.kernel_unwind_processes.max(1))
            // Every mode builds its sample here before sending it.
            .map_max_entries("sample_scratch", possible_cpus()?)
            .load(SAMPLE_BPF_OBJECT)
            .map_err(|e| RecordError::from_bpf_load("sample.bpf.o", &e))?;
        load_times.push(("sample.bpf.o", object_started.elapsed()));
        // With kernel unwinding, the walker is most of the verifier's time:
        // the events get a program that copies stacks, and the walker joins
        // it later (load_walker).
        let entry = if opts.kernel_unwind_rows > 0 {
            "sample_first"
        } else {
            "sample_cpu_clock"
        };
        let verify_started = std::time::Instant::now();
        perf_program(&mut ebpf, entry)?
            .load()
            .map_err(|e| RecordError::from_program_load(entry, &e))?;
        load_times.push((entry, verify_started.elapsed()));
        let mut unwind_maps = None;
        if opts.kernel_unwind_rows > 0 {
            let exec: &mut aya::programs::RawTracePoint = ebpf
                .program_mut("forget_exec_mappings")
                .ok_or_else(|| RecordError::no_program("forget_exec_mappings"))?
                .try_into()
                .map_err(RecordError::program("forget_exec_mappings"))?;
            let verify_started = std::time::Instant::now();
            exec.load()
                .map_err(|e| RecordError::from_program_load("forget_exec_mappings", &e))?;
            load_times.push(("forget_exec_mappings", verify_started.elapsed()));
            exec.attach("sched_process_exec")
                .map_err(RecordError::program("forget_exec_mappings, attaching it"))?;
            let rows = match take(&mut ebpf, "unwind_rows")? {
                aya::maps::Map::ArrayOfMaps(m) => m,
                _ => {
                    return Err(RecordError::BpfMissing {
                        what: "map unwind_rows as an array of maps".into(),
                    })
                }
            };
            let rows = unwind_maps::RowsMapping::new(rows, opts.kernel_unwind_rows as usize)
                .map_err(|e| RecordError::map("unwind_rows, mapping its tables")(e.into()))?;
            let processes = aya::maps::HashMap::try_from(take(&mut ebpf, "unwind_processes")?)
                .map_err(RecordError::map("unwind_processes"))?;
            let refused = aya::maps::Array::try_from(take(&mut ebpf, "unwind_refused")?)
                .map_err(RecordError::map("unwind_refused"))?;
            let python = aya::maps::HashMap::try_from(take(&mut ebpf, "python_procs")?)
                .map_err(RecordError::map("python_procs"))?;
            unwind_maps = Some(unwind_maps::KernelUnwindMaps {
                rows,
                processes,
                refused,
                python,
                process_capacity: opts.kernel_unwind_processes.max(1),
            });
        }
        let ring =
            RingBuf::try_from(take(&mut ebpf, "samples")?).map_err(RecordError::map("samples"))?;
        let drops =
            PerCpuArray::try_from(take(&mut ebpf, "drops")?).map_err(RecordError::map("drops"))?;
        Ok((
            Sampler {
                ebpf,
                drops,
                frequency: opts.frequency,
                unwind_maps,
                load_times,
                entry,
                walker_pending: entry == "sample_first",
            },
            ring,
        ))
    }

    /// Whether the walker is still to be loaded ([`Sampler::load_walker`]).
    pub fn walker_pending(&self) -> bool {
        self.walker_pending
    }

    /// Verify the in-kernel walker and hand the events over to it: from the
    /// next tick on, stacks are walked in the kernel (until now they were
    /// copied). Fails on kernels without `bpf_loop` (before 5.17): stacks
    /// are then copied for the whole recording, and the unwind maps are
    /// let go (nobody walks with them).
    pub fn load_walker(&mut self) -> Result<(), RecordError> {
        self.walker_pending = false;
        let result = self.try_load_walker();
        if result.is_err() {
            self.unwind_maps = None;
        }
        result
    }

    fn try_load_walker(&mut self) -> Result<(), RecordError> {
        let verify_started = std::time::Instant::now();
        let program = perf_program(&mut self.ebpf, "sample_cpu_clock")?;
        program
            .load()
            .map_err(|e| RecordError::from_program_load("sample_cpu_clock", &e))?;
        self.load_times
            .push(("sample_cpu_clock", verify_started.elapsed()));
        let fd = program
            .fd()
            .map_err(RecordError::program("sample_cpu_clock"))?
            .try_clone()
            .map_err(|e| RecordError::program("sample_cpu_clock, its fd")(e.into()))?;
        let map = self
            .ebpf
            .map_mut("walker")
            .ok_or_else(|| RecordError::no_map("walker"))?;
        let mut walker =
            aya::maps::ProgramArray::try_from(map).map_err(RecordError::map("walker"))?;
        walker
            .set(0, &fd, 0)
            .map_err(RecordError::map("walker, putting the walker in place"))
    }

    /// Attach the sampler to a cpu-clock event on every online CPU: samples
    /// start now, the CPUs' ticks spread evenly over a period.
    pub fn attach(&mut self) -> Result<(), RecordError> {
        let program = perf_program(&mut self.ebpf, self.entry)?;
        let cpus = online_cpus()?;
        // A CPU's ticks keep the phase its event was opened at. Opened back
        // to back, every CPU ticked within 0.1 ms of the others, and a
        // thread woken by one CPU's sample ran on another across that
        // CPU's tick, every tick: the reader, at its raised priority, took
        // 29 ticks in 30 ms from a spinner it ran beside 14 % of the time.
        // Spread, such a run must last half a period (2 CPUs) to reach the
        // next CPU's tick.
        let period_ns = 1_000_000_000 / self.frequency.max(1);
        let first_ns = crate::sys::clock::monotonic_ns();
        for (i, &cpu) in cpus.iter().enumerate() {
            let at_ns = first_ns + period_ns * i as u64 / cpus.len() as u64;
            let now_ns = crate::sys::clock::monotonic_ns();
            if at_ns > now_ns {
                std::thread::sleep(std::time::Duration::from_nanos(at_ns - now_ns));
            }
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(self.frequency),
                    false,
                )
                .map_err(|e| {
                    let text = crate::error::error_chain(&e);
                    if crate::error::is_permission_denied(&e) {
                        return RecordError::NotPermitted {
                            what: format!("cpu-clock sampling on CPU {cpu}"),
                            paranoid: crate::error::paranoid(),
                        };
                    }
                    RecordError::PerfEvent {
                        what: format!("cpu-clock sampling on CPU {cpu}"),
                        source: std::io::Error::other(text),
                    }
                })?;
        }
        Ok(())
    }

    /// The in-kernel unwinder's maps, for the collector to fill (once).
    pub fn take_unwind_maps(&mut self) -> Option<unwind_maps::KernelUnwindMaps> {
        self.unwind_maps.take()
    }

    /// Sum the per-CPU drop counters.
    pub fn drops(&self) -> KernelDrops {
        let sum = |reason: u32| -> u64 {
            self.drops
                .get(&reason, 0)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        };
        KernelDrops {
            ring_full: sum(abi::DROP_RINGBUF_FULL),
            kernel_stack: sum(abi::DROP_KSTACK),
            user_stack: sum(abi::DROP_USTACK),
        }
    }
}

/// How many times the kernel skipped a run of the program behind `fd`
/// because it was already running on that CPU (an interrupt's tracepoint
/// inside the same program): `recursion_misses` in its fdinfo (Linux 5.12+),
/// counted whether or not BPF statistics are on. 0 where it is not said.
fn recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use std::os::fd::AsRawFd;
    fdinfo_recursion_misses(
        &std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
            .unwrap_or_default(),
    )
}

fn fdinfo_recursion_misses(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("recursion_misses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The perf_event program `name` of `ebpf`.
fn perf_program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut PerfEvent, RecordError> {
    ebpf.program_mut(name)
        .ok_or_else(|| RecordError::no_program(name))?
        .try_into()
        .map_err(RecordError::program(name))
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, RecordError> {
    ebpf.take_map(name).ok_or_else(|| RecordError::no_map(name))
}

/// A private bpffs mount, where the sampler's loader pins the unwind maps
/// and the tracer's loader opens them: aya gives every object its own maps,
/// and a pinned path is the one way it offers to hand one object's map to
/// another. Dropped once both are loaded: the pins are removed and the
/// mount detached; the maps live on in the programs that use them.
pub struct SharedMapDir {
    dir: std::path::PathBuf,
}

impl SharedMapDir {
    /// Mount a fresh bpffs on a new directory of our own.
    pub fn new() -> std::io::Result<SharedMapDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = if std::path::Path::new("/run").is_dir() {
            std::path::PathBuf::from("/run")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "sysprof-bpf-{}",
            crate::sys::random::random_suffix()
        ));
        // mkdir fails on anything already there (a symlink planted by a
        // local user included); nobody but root can enter it.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        // SAFETY: mounting a new bpffs instance on a directory we created.
        let r = unsafe {
            libc::mount(
                c"bpf".as_ptr(),
                path.as_ptr(),
                c"bpf".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(SharedMapDir { dir })
    }

    /// The directory the loaders pin in.
    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for SharedMapDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if let Ok(path) = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()) {
            // SAFETY: unmounting what new() mounted.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How many CPUs there can be (`bpf_get_smp_processor_id()` is below it).
fn possible_cpus() -> Result<u32, RecordError> {
    aya::util::nr_cpus()
        .map(|n| n as u32)
        .map_err(|(path, source)| RecordError::Cpus {
            path: path.to_string(),
            source,
        })
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> Result<Vec<u32>, RecordError> {
    crate::sys::cpus::online().map_err(|source| RecordError::Cpus {
        path: "the online CPUs".into(),
        source,
    })
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
    /// Off-CPU intervals shorter than this are folded into per-reason totals.
    pub off_cpu_min_ns: u64,
    /// Size of the events ring buffer in bytes (a power of two).
    pub ring_bytes: u32,
    /// Dwarf mode: bytes of user stack copied with each stack (0: frame pointers).
    pub stack_copy: u32,
    /// Wake the reader when the ring is this fraction (1/N) full.
    pub wakeup_divisor: u32,
    /// Unwind user stacks in the kernel with the sampler's tables, pinned
    /// here by the sampler's loader.
    pub kernel_unwind: Option<std::path::PathBuf>,
}

/// The loaded and attached scheduler/I/O tracer. Its records arrive in the
/// [`RingBuf`] that [`Tracer::start`] returns beside it.
pub struct Tracer {
    ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
    threads: aya::maps::HashMap<MapData, u32, abi::ThreadState>,
    /// `io_starts`: in-flight requests by `struct request *`; only counted
    /// here, so its value (`struct io_start`, 72 bytes) stays opaque.
    io_starts: aya::maps::HashMap<MapData, u64, [u64; 9]>,
    /// `stack_ids`: shared stacks' ids (`STACK_SHARED`), kept until their
    /// process is gone; `stack_ids_used[1]` counts those deleted here.
    stack_ids: aya::maps::HashMap<MapData, u64, u8>,
    stack_ids_used: aya::maps::Array<MapData, u64>,
    shared_forgotten: u64,
    /// How long each step of its load took.
    pub load_times: LoadTimes,
}

/// What the tracer lost, per reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TracerDrops {
    /// Off-CPU, I/O and folded records lost because the events ring was full.
    pub events_full: u64,
    /// Stack records lost (the events they belong to keep no stack).
    pub stack_records: u64,
    /// Stacks that could not be read (kernel or user).
    pub stack_reads: u64,
    /// Threads or requests not seen because a state map was full.
    pub state_full: u64,
    /// Requests seen at one end only (see `RecordingStats::io_untracked`).
    pub io_untracked: u64,
    /// Program runs the kernel skipped (see `RecordingStats::tracepoint_runs_missed`).
    pub runs_missed: u64,
}

impl TracerDrops {
    /// What was lost since `earlier` (drop counters only grow).
    pub fn since(self, earlier: TracerDrops) -> TracerDrops {
        TracerDrops {
            events_full: self.events_full.saturating_sub(earlier.events_full),
            stack_records: self.stack_records.saturating_sub(earlier.stack_records),
            stack_reads: self.stack_reads.saturating_sub(earlier.stack_reads),
            state_full: self.state_full.saturating_sub(earlier.state_full),
            io_untracked: self.io_untracked.saturating_sub(earlier.io_untracked),
            runs_missed: self.runs_missed.saturating_sub(earlier.runs_missed),
        }
    }
}

/// Entries of the tracer's thread map: four times the threads the machine
/// has now (`/proc/loadavg`'s count of scheduling entities), 16,384 to
/// 65,536. A thread past them is not traced, counted as `lost_state`.
fn thread_entries() -> u32 {
    let threads = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            l.split_whitespace()
                .nth(3)?
                .split_once('/')?
                .1
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(u32::MAX / 4);
    threads
        .saturating_mul(4)
        .clamp(16384, 65536)
        .next_power_of_two()
}

/// Entries of the tracer's request map: what the block devices can hold
/// (each device's `nr_requests` times its hardware queues), twice, 4,096 to
/// 65,536. A request past them is counted as `lost_state`.
fn request_entries() -> u32 {
    let mut total = 0u64;
    for dev in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = dev.path();
        let depth: u64 = std::fs::read_to_string(path.join("queue/nr_requests"))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let queues = std::fs::read_dir(path.join("mq"))
            .map(|d| d.count() as u64)
            .unwrap_or(1)
            .max(1);
        total = total.saturating_add(depth.saturating_mul(queues));
    }
    total.saturating_mul(2).clamp(4096, 65536) as u32
}

impl Tracer {
    /// Load the tracer and attach what `opts` asks for.
    pub fn start(opts: &TracerOptions) -> Result<(Tracer, RingBuf<MapData>), RecordError> {
        let wakeup = (opts.ring_bytes as u64 / opts.wakeup_divisor.max(1) as u64).max(4096);
        let mut loader = EbpfLoader::new();
        if let Some(dir) = &opts.kernel_unwind {
            loader
                .map_pin_path("unwind_rows", dir.join("unwind_rows"))
                .map_pin_path("unwind_processes", dir.join("unwind_processes"))
                .map_pin_path("unwind_refused", dir.join("unwind_refused"))
                .map_pin_path("python_procs", dir.join("python_procs"));
        }
        let mut load_times = LoadTimes::new();
        let object_started = std::time::Instant::now();
        let mut ebpf = loader
            .override_global(
                "kernel_unwind",
                &(opts.kernel_unwind.is_some() as u32),
                true,
            )
            .override_global("targ_tgid", &opts.target_tgid, true)
            .override_global("self_tgid", &std::process::id(), true)
            .override_global("offcpu_min_ns", &opts.off_cpu_min_ns, true)
            .override_global("stack_copy", &opts.stack_copy, true)
            .override_global("wakeup_bytes", &wakeup, true)
            .override_global("has_prev_state_arg", &(kernel_at_least(5, 18) as u8), true)
            .override_global("start_fires_once", &(kernel_at_least(6, 5) as u8), true)
            .map_max_entries("events", opts.ring_bytes)
            // Both preallocated, in the kernel memory of sysprof's cgroup:
            // 27 and 9 MB at 65,536 entries each, the most they may hold.
            .map_max_entries("threads", thread_entries())
            .map_max_entries("io_starts", request_entries())
            // Stack records with a copy are built in a scratch per CPU and place.
            .map_max_entries(
                "copy_scratch",
                if opts.stack_copy > 0 {
                    // sched.bpf.c's KBUFS places: switch, waking, block start, block issue.
                    possible_cpus()? * 4
                } else {
                    1
                },
            )
            .load(SCHED_BPF_OBJECT)
            .map_err(|e| RecordError::from_bpf_load("sched.bpf.o", &e))?;
        load_times.push(("sched.bpf.o", object_started.elapsed()));
        let mut wanted: Vec<(&str, &[&str])> = Vec::new();
        if opts.off_cpu {
            wanted.push(("on_sched_switch", &["sched_switch"]));
            wanted.push(("on_sched_waking", &["sched_waking"]));
            wanted.push(("on_sched_wakeup", &["sched_wakeup"]));
        }
        if opts.io {
            // block_io_start exists since 6.5; before, a request is first
            // seen when it is inserted (or issued directly).
            wanted.push(("on_block_start", &["block_io_start", "block_rq_insert"]));
            wanted.push(("on_block_issue", &["block_rq_issue"]));
            wanted.push(("on_block_merge", &["block_rq_merge"]));
            wanted.push(("on_block_complete", &["block_rq_complete"]));
        }
        // The four places that take stacks tail-call one walker
        // (sched.bpf.c walk_stack), verified once beside them and put in
        // place before any of them runs.
        let mut verified: Vec<&'static str> = wanted.iter().map(|(p, _)| *p).collect();
        if !wanted.is_empty() {
            verified.push("walk_stack");
        }
        load_times.extend(verify_in_parallel(&mut ebpf, &verified)?);
        if !wanted.is_empty() {
            put_walker_in_place(&mut ebpf)?;
        }
        for (prog, names) in wanted {
            attach_raw_tracepoint(&mut ebpf, prog, names)?;
        }
        let ring =
            RingBuf::try_from(take(&mut ebpf, "events")?).map_err(RecordError::map("events"))?;
        let drops =
            PerCpuArray::try_from(take(&mut ebpf, "drops")?).map_err(RecordError::map("drops"))?;
        let threads = aya::maps::HashMap::try_from(take(&mut ebpf, "threads")?)
            .map_err(RecordError::map("threads"))?;
        let io_starts = aya::maps::HashMap::try_from(take(&mut ebpf, "io_starts")?)
            .map_err(RecordError::map("io_starts"))?;
        let stack_ids = aya::maps::HashMap::try_from(take(&mut ebpf, "stack_ids")?)
            .map_err(RecordError::map("stack_ids"))?;
        let stack_ids_used = aya::maps::Array::try_from(take(&mut ebpf, "stack_ids_used")?)
            .map_err(RecordError::map("stack_ids_used"))?;
        Ok((
            Tracer {
                ebpf,
                drops,
                threads,
                io_starts,
                stack_ids,
                stack_ids_used,
                shared_forgotten: 0,
                load_times,
            },
            ring,
        ))
    }

    /// Delete shared stacks whose process is gone, so their room in the
    /// kernel's table serves new ones (a fork storm's processes would fill
    /// it in seconds and stacks would be sent per place again).
    pub fn forget_shared(&mut self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        for id in ids {
            if self.stack_ids.remove(id).is_ok() {
                self.shared_forgotten += 1;
            }
        }
        // Written by this side only; the kernel only reads it.
        let _ = self.stack_ids_used.set(1, self.shared_forgotten, 0);
    }

    /// Sum the per-CPU drop counters.
    pub fn drops(&self) -> TracerDrops {
        let sum = |reason: u32| -> u64 {
            self.drops
                .get(&reason, 0)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        };
        TracerDrops {
            events_full: sum(abi::DROP_EVENTS_FULL),
            stack_records: sum(abi::DROP_STACK_RECORD),
            stack_reads: sum(abi::DROP_KSTACK) + sum(abi::DROP_USTACK),
            state_full: sum(abi::DROP_STATE_FULL),
            io_untracked: sum(abi::DROP_IO_UNTRACKED),
            runs_missed: self
                .ebpf
                .programs()
                .filter_map(|(_, p)| p.fd().ok())
                .map(|fd| recursion_misses(std::os::fd::AsFd::as_fd(fd)))
                .sum(),
        }
    }

    /// Every live thread's scheduler state: switch totals, open off-CPU
    /// interval, folded waits not sent yet.
    pub fn thread_states(&self) -> Vec<(u32, abi::ThreadState)> {
        self.threads.iter().filter_map(Result::ok).collect()
    }

    /// Requests started and not seen to complete: still in flight, or
    /// their completion was missed. Read when the recording ends, when
    /// none of them will get a marker.
    pub fn requests_open(&self) -> u64 {
        self.io_starts.keys().filter(Result::is_ok).count() as u64
    }
}

/// Load (the kernel verifies) the raw tracepoint programs `progs`, each on
/// a thread of its own: the verifier works per program, one after another
/// on the loading thread they took 0.4 s of a quiet machine's start (on 2
/// CPUs, in parallel, about the longest one's). How long each took.
fn verify_in_parallel(ebpf: &mut Ebpf, progs: &[&'static str]) -> Result<LoadTimes, RecordError> {
    for prog in progs {
        if ebpf.program(prog).is_none() {
            return Err(RecordError::no_program(prog));
        }
    }
    let chosen: Vec<(&'static str, &mut aya::programs::Program)> = ebpf
        .programs_mut()
        .filter_map(|(name, p)| progs.iter().find(|&&w| w == name).map(|&w| (w, p)))
        .collect();
    std::thread::scope(|scope| {
        let verifying: Vec<_> = chosen
            .into_iter()
            .map(|(name, program)| {
                let verify = move || -> Result<(&'static str, std::time::Duration), RecordError> {
                    let p: &mut aya::programs::RawTracePoint =
                        program.try_into().map_err(RecordError::program(name))?;
                    let started = std::time::Instant::now();
                    p.load()
                        .map_err(|e| RecordError::from_program_load(name, &e))?;
                    Ok((name, started.elapsed()))
                };
                std::thread::Builder::new()
                    .name("sysprof-verify".into())
                    .spawn_scoped(scope, verify)
            })
            .collect();
        verifying
            .into_iter()
            .map(|handle| match handle {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(RecordError::Internal("a program's load panicked".into()))
                }),
                Err(e) => Err(RecordError::Internal(format!(
                    "no thread to load a program: {e}"
                ))),
            })
            .collect()
    })
}

/// Put the loaded `walk_stack` in the tracer's `stack_walker` array.
fn put_walker_in_place(ebpf: &mut Ebpf) -> Result<(), RecordError> {
    let fd = ebpf
        .program("walk_stack")
        .ok_or_else(|| RecordError::no_program("walk_stack"))?
        .fd()
        .and_then(|fd| fd.try_clone().map_err(Into::into))
        .map_err(RecordError::program("walk_stack"))?;
    let map = ebpf
        .map_mut("stack_walker")
        .ok_or_else(|| RecordError::no_map("stack_walker"))?;
    aya::maps::ProgramArray::try_from(map)
        .map_err(RecordError::map("stack_walker"))?
        .set(0, &fd, 0)
        .map_err(RecordError::map(
            "stack_walker, putting the stack walker in place",
        ))
}

/// Attach the loaded `prog` to the first raw tracepoint of `names` that exists.
fn attach_raw_tracepoint(ebpf: &mut Ebpf, prog: &str, names: &[&str]) -> Result<(), RecordError> {
    let p: &mut aya::programs::RawTracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| RecordError::no_program(prog))?
        .try_into()
        .map_err(RecordError::program(prog))?;
    let mut last_err = None;
    for name in names {
        match p.attach(name) {
            Ok(_) => return Ok(()),
            Err(e) => last_err = Some((name, e)),
        }
    }
    let (name, e) = last_err.expect("at least one name");
    let text = crate::error::error_chain(&e);
    if crate::error::is_permission_denied(&e) {
        return Err(RecordError::NotPermitted {
            what: format!("attaching to the tracepoint {name}"),
            paranoid: crate::error::paranoid(),
        });
    }
    Err(RecordError::PerfEvent {
        what: format!("the tracepoint {}", names.join(" or ")),
        source: std::io::Error::other(format!("{name}: {text}")),
    })
}

/// Whether the running kernel is at least major.minor.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = crate::error::kernel_release();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

#[cfg(test)]
mod tests {
    /// Check that a program's skipped runs are read from its fdinfo as the
    /// kernel prints it (and that a kernel without the line gives 0).
    #[test]
    fn recursion_misses_are_read_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t17\nrun_cnt:\t0\nrecursion_misses:\t42\nverified_insns:\t931\n";
        assert_eq!(super::fdinfo_recursion_misses(info), 42);
        assert_eq!(super::fdinfo_recursion_misses("prog_type:\t17\n"), 0);
    }
}
