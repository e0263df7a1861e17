//! The sampler: the cpu-clock perf events on every CPU, the stack walker in
//! the kernel, and their drop counters.
//!
//! In: [`SamplerOptions`] (frequency, pid filter, ring size, stack copy,
//! the in-kernel unwinder's table sizes). Out: a loaded [`Sampler`] and
//! the ring its samples arrive in; attached with [`Sampler::attach`], its
//! walker loaded after the first samples ([`Sampler::load_walker`]); the
//! unwinder's maps for the collector to fill; [`KernelDrops`].

use aya::maps::{MapData, PerCpuArray};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::{Ebpf, EbpfLoader};

use super::{
    abi, include_bytes_aligned, online_cpus, perf_program, possible_cpus, take, unwind_maps,
    BpfRing, LoadTimes,
};
use crate::error::RecordError;

/// The sampler object, built by `cargo xtask build-ebpf`.
static SAMPLE_BPF_OBJECT: &[u8] = include_bytes_aligned!("../../../ebpf/sample.bpf.o");

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

/// The cpu-clock sampler. Its sample records arrive in the [`BpfRing`] that
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
    pub fn load(opts: &SamplerOptions) -> Result<(Sampler, BpfRing), RecordError> {
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
        let unwind_maps = if opts.kernel_unwind_rows > 0 {
            Some(kernel_unwinding(&mut ebpf, opts, &mut load_times)?)
        } else {
            None
        };
        let ring = BpfRing::new(take(&mut ebpf, "samples")?)
            .map_err(|e| RecordError::ring("samples", e))?;
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

/// With kernel unwinding: the program that forgets an exec'd process's
/// mappings, loaded and attached, and the unwinder's maps taken out of the
/// object for the collector to fill.
fn kernel_unwinding(
    ebpf: &mut Ebpf,
    opts: &SamplerOptions,
    load_times: &mut LoadTimes,
) -> Result<unwind_maps::KernelUnwindMaps, RecordError> {
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
    let rows = match take(ebpf, "unwind_rows")? {
        aya::maps::Map::ArrayOfMaps(m) => m,
        _ => {
            return Err(RecordError::BpfMissing {
                what: "map unwind_rows as an array of maps".into(),
            })
        }
    };
    let rows = unwind_maps::RowsMapping::new(rows, opts.kernel_unwind_rows as usize)
        .map_err(|e| RecordError::map("unwind_rows, mapping its tables")(e.into()))?;
    let processes = aya::maps::HashMap::try_from(take(ebpf, "unwind_processes")?)
        .map_err(RecordError::map("unwind_processes"))?;
    let refused = aya::maps::Array::try_from(take(ebpf, "unwind_refused")?)
        .map_err(RecordError::map("unwind_refused"))?;
    let python = aya::maps::HashMap::try_from(take(ebpf, "python_procs")?)
        .map_err(RecordError::map("python_procs"))?;
    let execs = aya::maps::HashMap::try_from(take(ebpf, "exec_times")?)
        .map_err(RecordError::map("exec_times"))?;
    Ok(unwind_maps::KernelUnwindMaps {
        rows,
        processes,
        refused,
        python,
        execs,
        process_capacity: opts.kernel_unwind_processes.max(1),
    })
}
