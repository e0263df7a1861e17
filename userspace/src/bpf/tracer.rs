//! The tracer: context switches, wakeups and block I/O requests, with
//! their stacks, from raw tracepoints.
//!
//! In: [`TracerOptions`] (what to trace, the pid filter, the off-CPU
//! threshold folded in the kernel, the ring size, the sampler's unwind maps
//! to walk stacks with). Out: a running [`Tracer`] and the ring its records
//! arrive in; its drop counters ([`TracerDrops`]), its per-thread state and
//! open requests (for the end of a recording), shared stacks forgotten on
//! demand.

use aya::maps::{MapData, PerCpuArray};
use aya::{Ebpf, EbpfLoader};

use super::{
    abi, include_bytes_aligned, kernel_at_least, possible_cpus, recursion_misses, take, BpfRing,
    LoadTimes,
};
use crate::error::RecordError;

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
    /// Waits from `off_cpu_min_ns` up to this are summed per place, waker
    /// and reason in a few runs per thread (0: each is sent alone).
    pub fold_same_max_ns: u64,
    /// Of those, a run delay from this long on is summed apart.
    pub run_delay_apart_ns: u64,
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
/// [`BpfRing`] that [`Tracer::start`] returns beside it.
pub struct Tracer {
    ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
    threads: aya::maps::HashMap<MapData, u32, abi::ThreadState>,
    place_runs: aya::maps::HashMap<MapData, u32, abi::PlaceRuns>,
    place_runs_frozen: aya::maps::Array<MapData, u32>,
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
    let threads = crate::sys::kernel_text::read_to_string("/proc/loadavg")
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
    pub fn start(opts: &TracerOptions) -> Result<(Tracer, BpfRing), RecordError> {
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
            .override_global("fold_same_max_ns", &opts.fold_same_max_ns, true)
            .override_global("run_delay_apart_ns", &opts.run_delay_apart_ns, true)
            .override_global("stack_copy", &opts.stack_copy, true)
            .override_global("wakeup_bytes", &wakeup, true)
            .override_global("has_prev_state_arg", &(kernel_at_least(5, 18) as u8), true)
            .override_global("start_fires_once", &(kernel_at_least(6, 5) as u8), true)
            .map_max_entries("events", opts.ring_bytes)
            // Both preallocated, in the kernel memory of sysprof's cgroup:
            // 27 and 9 MB at 65,536 entries each, the most they may hold.
            .map_max_entries("threads", thread_entries())
            // 328 bytes a thread, for `record` only: the agent sums no
            // such waits (5.4 MB at 16,384 entries).
            .map_max_entries(
                "place_runs",
                if opts.fold_same_max_ns > 0 {
                    thread_entries()
                } else {
                    1
                },
            )
            .map_max_entries("io_starts", request_entries())
            // Stack records with a copy are built in a scratch per CPU and place.
            .map_max_entries(
                "copy_scratch",
                if opts.stack_copy > 0 {
                    // sched/stacks.bpf.h's KBUFS places: switch, waking, block start, block issue.
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
        // (sched/places.bpf.h walk_stack, which tail-calls send_new_stack
        // for a place not known), verified once beside them and put in
        // place before any of them runs.
        let mut verified: Vec<&'static str> = wanted.iter().map(|(p, _)| *p).collect();
        if !wanted.is_empty() {
            verified.extend(STACK_WALKERS);
        }
        load_times.extend(verify_in_parallel(&mut ebpf, &verified)?);
        if !wanted.is_empty() {
            put_walker_in_place(&mut ebpf)?;
        }
        for (prog, names) in wanted {
            attach_raw_tracepoint(&mut ebpf, prog, names)?;
        }
        let ring =
            BpfRing::new(take(&mut ebpf, "events")?).map_err(|e| RecordError::ring("events", e))?;
        let drops =
            PerCpuArray::try_from(take(&mut ebpf, "drops")?).map_err(RecordError::map("drops"))?;
        let threads = aya::maps::HashMap::try_from(take(&mut ebpf, "threads")?)
            .map_err(RecordError::map("threads"))?;
        let place_runs = aya::maps::HashMap::try_from(take(&mut ebpf, "place_runs")?)
            .map_err(RecordError::map("place_runs"))?;
        let place_runs_frozen =
            aya::maps::Array::try_from(take(&mut ebpf, "place_runs_frozen_at_end")?)
                .map_err(RecordError::map("place_runs_frozen_at_end"))?;
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
                place_runs,
                place_runs_frozen,
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

    /// Keep the runs of waits summed by place and waker in their map from
    /// now on, for [`Tracer::place_runs`]: called before the ring's last
    /// read (a run sent after it would be lost, and not counted).
    pub fn freeze_place_runs(&mut self) -> Result<(), aya::maps::MapError> {
        self.place_runs_frozen.set(0, 1, 0)
    }

    /// Every thread's runs of waits summed by place and waker, not sent
    /// yet.
    pub fn place_runs(&self) -> Vec<(u32, abi::PlaceRuns)> {
        self.place_runs.iter().filter_map(Result::ok).collect()
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

/// The programs of the tracer's `stack_walker` array, at their index:
/// two, as a program and the functions it calls share one 512-byte stack
/// (sched/places.bpf.h).
const STACK_WALKERS: [&str; 2] = ["walk_stack", "send_new_stack"];

/// Put the loaded stack walkers in the tracer's `stack_walker` array.
fn put_walker_in_place(ebpf: &mut Ebpf) -> Result<(), RecordError> {
    let mut fds = Vec::with_capacity(STACK_WALKERS.len());
    for name in STACK_WALKERS {
        let fd = ebpf
            .program(name)
            .ok_or_else(|| RecordError::no_program(name))?
            .fd()
            .and_then(|fd| fd.try_clone().map_err(Into::into))
            .map_err(RecordError::program(name))?;
        fds.push(fd);
    }
    let map = ebpf
        .map_mut("stack_walker")
        .ok_or_else(|| RecordError::no_map("stack_walker"))?;
    let mut walkers =
        aya::maps::ProgramArray::try_from(map).map_err(RecordError::map("stack_walker"))?;
    for (index, fd) in fds.iter().enumerate() {
        walkers.set(index as u32, fd, 0).map_err(RecordError::map(
            "stack_walker, putting the stack walkers in place",
        ))?;
    }
    Ok(())
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
