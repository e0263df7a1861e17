//! The start of a capture session: the sampler first, sampling at once,
//! then the rest beside it.
//!
//! In: [`CaptureOptions`] and the collector. Out: a running
//! [`CaptureSession`]: the sideband open, the `/proc` snapshot read (on a
//! thread of its own, from the start), the sampler attached, the rings'
//! reader running, the tracer loaded (on a thread of its own) beside the
//! running processes' unwind tables, the kernel's symbols read once every
//! program is loaded. What each step waits for is
//! said in [`CaptureSession::start`] and where it happens.

use std::sync::Arc;
use std::time::Duration;

use super::{pump, CaptureOptions, CaptureSession, Losses, PUMP_BUDGET_BYTES};
use crate::bpf::{abi, BpfRing, Sampler, SamplerOptions, Tracer, TracerOptions};
use crate::collector::Collector;
use crate::error::RecordError;
use crate::sideband::counters::CounterPoller;
use crate::sideband::{proc_snapshot, Sideband};
use crate::symbolize::kernel::KernelSymbols;

/// The nice of the threads that load the programs: the verifier's work is
/// the wait before the first sample, and a second more before off-CPU data.
const LOAD_NICE: i32 = -10;

/// The sampler loaded, before sampling starts, and what the tracer needs
/// to be loaded beside it.
struct LoadedSampler {
    sampler: Sampler,
    samples: BpfRing,
    /// The private bpffs the sampler pinned its unwind maps in, for the
    /// tracer to walk stacks with (None: the tracer copies them).
    shared: Option<crate::bpf::SharedMapDir>,
    /// The sampler's ring size.
    ring_bytes: u32,
}

/// The tracer as loaded, with its ring when the reader has not taken it yet.
type LoadedTracer = Option<(Tracer, Option<BpfRing>)>;

impl CaptureSession {
    /// Start capturing into `collector` (which gets the `/proc` snapshot and
    /// the kernel's symbols). Must run inside a tokio runtime.
    ///
    /// Sampling starts as soon as the sampler is verified: the tracer's
    /// programs (most of the start's verifier time), the `/proc` snapshot
    /// and the running processes' unwind tables come after, while the rings'
    /// reader already runs (samples taken before a process's tables are
    /// loaded hand their stacks over, as a new process's do). Beside
    /// pgbench, loading everything first put 1.5-3 s between the launch
    /// and the first sample, 6-10 s beside busy builds.
    pub fn start(
        opts: &CaptureOptions,
        collector: &mut Collector,
    ) -> Result<CaptureSession, RecordError> {
        let cpus = crate::bpf::online_cpus()?;
        let mut sideband = Sideband::open(&cpus)?;
        // The `/proc` snapshot from here, beside the programs' verification:
        // read after the sampler attached, it took 40-315 ms beside an I/O
        // storm, and a running process's stacks are copies until its
        // entry is written from it (see `unwind` `sync_kernel_waiting`).
        // After the sideband opened, so nothing that starts is missed.
        let snapshot = spawn_snapshot(opts);
        // From here the machine's processes come and go into the sideband:
        // it is read every 10 ms while the sampler loads (no wakeups are
        // waited for), then by the pump.
        let mut startup_peaks = pump::RingPeaks::default();
        let rings = pump::Rings {
            samples: None,
            events: None,
            sideband: &mut sideband,
            peaks: &mut startup_peaks,
        };
        // The verifier runs on the loading thread: beside a busy server at
        // nice 0 it waited its turn behind every runnable thread (0.9 s to
        // the first sample beside pgbench and two spinners; 0.2 s quiet).
        let (loaded, pumped) = pump::while_busy(
            rings,
            Duration::from_millis(10),
            opts.polling.startup_hold_bytes,
            || {
                let _raised = crate::sys::process::RaisedPriority::new(LOAD_NICE);
                Self::load_sampler(opts, collector, &cpus)
            },
        );
        let LoadedSampler {
            mut sampler,
            samples,
            shared,
            ring_bytes,
        } = loaded?;
        // The recording starts here: nothing sampled precedes it.
        let mut anchor = (0.0, 0);
        let mut counters = CounterPoller::new(&cpus);
        if opts.sample_first {
            anchor = start_sampling(&mut sampler, collector, &mut counters)?;
        }
        // The reader runs from here either way: with sampling waiting (`record
        // -- CMD`), the tracer's ring attaches below and would otherwise sit
        // unread through the `/proc` snapshot and the tables (4.5-5.6 MiB
        // beside pgbench, more than `record`'s least ring).
        let period = opts.polling.rings.min(opts.polling.sideband);
        let owned = pump::OwnedRings {
            samples,
            events: None,
            sideband,
            peaks: pump::RingPeaks::default(),
        };
        let pump = pump::Pump::start(
            owned,
            pumped,
            period,
            (opts.polling.startup_hold_bytes, PUMP_BUDGET_BYTES),
        )
        .map_err(|source| ring_poll("the rings' reader", source))?;
        // The rest: the tracer loads on a thread of its own (the verifier's
        // work, per program) beside the `/proc` snapshot.
        let tracer_opts = tracer_options(opts, ring_bytes, shared.as_ref());
        let loaded = load_the_rest(
            collector,
            &mut sampler,
            tracer_opts.as_ref(),
            &pump,
            snapshot,
        );
        drop(shared);
        let tracer = match loaded? {
            Some((tracer, events)) => {
                if let Some(events) = events {
                    pump.add_events(events)
                        .map_err(|source| ring_poll("the tracer's ring", source))?;
                }
                collector.tracing_started(crate::sys::clock::monotonic_ns());
                Some(tracer)
            }
            None => None,
        };
        // Every program is loaded: the kernel lists their functions now.
        // Taken once the pump has every ring: read from kallsyms, the
        // snapshot took 0.1-0.25 s beside pgbench, whose switches fill the
        // tracer's ring by ~1 MiB in that (a few ms from the file a
        // recording of this boot kept).
        let kernel = match KernelSymbols::snapshot() {
            Ok(k) => Arc::new(k),
            Err(e) => {
                collector.warn(format!("kernel frames stay unnamed: {e}"));
                Arc::new(KernelSymbols::default())
            }
        };
        collector.set_kernel_symbols(kernel);
        // A command's range starts here, after the last of the loading (the
        // kallsyms snapshot above, read from kallsyms, took 0.1 s and put
        // the range's start that far before the command's).
        if !opts.sample_first {
            anchor = start_sampling(&mut sampler, collector, &mut counters)?;
        }
        let (start_wall_ms, start_ns) = anchor;
        Ok(CaptureSession {
            pump: Some(pump),
            sampler: Some(sampler),
            tracer,
            counters,
            decode_errors: 0,
            polling: opts.polling,
            reported: Losses::default(),
            start_ns,
            start_wall_ms,
        })
    }

    /// The session's first part: the sampler loaded, not yet sampling.
    fn load_sampler(
        opts: &CaptureOptions,
        collector: &mut Collector,
        cpus: &[u32],
    ) -> Result<LoadedSampler, RecordError> {
        // `record`: half a second of samples from every CPU (at least 4 MiB,
        // at most 256): the reader competes for the CPUs with what it
        // profiles, and a quarter second was lost to a busy machine's
        // scheduling (measured: 400-800 of 6000 samples lost with 8
        // runnable threads on 2 CPUs). The agent drains once a second.
        // With kernel unwinding a sample carries its frames (a deep stack is
        // a few hundred bytes of addresses), not a stack copy.
        let ring_for = |per_sample: u64| -> u32 {
            let record_bytes =
                (std::mem::size_of::<abi::SampleEvent>() as u64 + per_sample + 8) * opts.frequency;
            let min = opts.polling.ring_min_bytes as u64;
            let want = (cpus.len() as f64 * record_bytes as f64 * opts.polling.ring_seconds) as u64;
            want.next_power_of_two().clamp(min, (256 << 20).max(min)) as u32
        };
        let ring_bytes = ring_for(if opts.kernel_unwind_rows > 0 {
            1024
        } else {
            opts.stack_copy as u64
        });
        // The tracer walks off-CPU stacks with the sampler's tables: the two
        // objects share the maps through a private bpffs. Without one (no
        // mount allowed) the tracer copies stacks as before.
        let mut shared = if opts.kernel_unwind_rows > 0 && (opts.off_cpu || opts.io) {
            match crate::bpf::SharedMapDir::new() {
                Ok(d) => Some(d),
                Err(e) => {
                    collector.warn(format!("off-CPU stacks are copied, not unwound in the kernel: cannot mount a bpffs to share the tables ({e})"));
                    None
                }
            }
        } else {
            None
        };
        let mut sampler_opts = SamplerOptions {
            frequency: opts.frequency,
            target_tgid: opts.target_tgid,
            ring_bytes,
            wakeup_bytes: ring_bytes as u64 / opts.polling.wakeup_divisor.max(1) as u64,
            // Handed-over samples are few (a process's first milliseconds) and
            // sent at their size: they get the deepest copy there is.
            stack_copy: if opts.kernel_unwind_rows > 0 && opts.stack_copy > 0 {
                abi::MAX_STACK_COPY as u32
            } else {
                opts.stack_copy
            },
            // Until the walker is in, every sample is a copy: the user's
            // size, at most 8 KiB (two CPUs' copies of 32 KiB filled the
            // reader's budget while the collector loaded beside an I/O
            // storm, and the tracer's ring overflowed).
            first_stack_copy: opts.stack_copy.min(8192) / abi::STACK_COPY_CHUNK as u32
                * abi::STACK_COPY_CHUNK as u32,
            kernel_unwind_rows: opts.kernel_unwind_rows,
            kernel_unwind_processes: opts.kernel_unwind_processes,
            share_unwind_maps: shared.as_ref().map(|d| d.path().to_path_buf()),
        };
        let (sampler, samples) = match Sampler::load(&sampler_opts) {
            // A kernel without bpf_loop (before 5.17) rejects the walker:
            // stacks are then copied and unwound here, as before.
            Err(e) if sampler_opts.kernel_unwind_rows > 0 => {
                collector.warn(format!(
                    "user stacks are copied and unwound here, not in the kernel: {e}"
                ));
                sampler_opts.kernel_unwind_rows = 0;
                sampler_opts.stack_copy = opts.stack_copy;
                sampler_opts.share_unwind_maps = None;
                sampler_opts.ring_bytes = ring_for(opts.stack_copy as u64);
                sampler_opts.wakeup_bytes =
                    sampler_opts.ring_bytes as u64 / opts.polling.wakeup_divisor.max(1) as u64;
                shared = None;
                Sampler::load(&sampler_opts)?
            }
            other => other?,
        };
        Ok(LoadedSampler {
            sampler,
            samples,
            shared,
            ring_bytes,
        })
    }
}

/// Attach the sampler: the recording's range starts here. Returns the
/// clock anchor (wall-clock ms, monotonic ns) of its start.
fn start_sampling(
    sampler: &mut Sampler,
    collector: &mut Collector,
    counters: &mut CounterPoller,
) -> Result<(f64, u64), RecordError> {
    sampler.attach()?;
    // The range starts once every CPU samples, not before the
    // first attach: begun before it, every recording's first
    // 25 ms were 2-4 samples short of a spinner's own clock.
    // A sample an earlier CPU took meanwhile precedes the range
    // and is left out (see `Collector::sampling_started`).
    let anchor = crate::sys::clock::clock_anchor();
    collector.sampling_started(anchor.1);
    // A baseline before anything runs, so even a short command gets deltas.
    counters.poll(crate::sys::clock::monotonic_ns(), std::iter::empty());
    Ok(anchor)
}

/// The rings' reader could not take a ring.
fn ring_poll(what: &str, source: std::io::Error) -> RecordError {
    RecordError::RingPoll {
        what: what.into(),
        source,
    }
}

/// The tracer's options, if anything is traced besides samples.
fn tracer_options(
    opts: &CaptureOptions,
    sampler_ring_bytes: u32,
    shared: Option<&crate::bpf::SharedMapDir>,
) -> Option<TracerOptions> {
    (opts.off_cpu || opts.io).then(|| TracerOptions {
        target_tgid: opts.target_tgid,
        off_cpu: opts.off_cpu,
        io: opts.io,
        off_cpu_min_ns: opts.off_cpu_min_ns,
        fold_same_max_ns: opts.fold_same_max_ns,
        run_delay_apart_ns: opts.run_delay_apart_ns,
        // Room for 256 stack records with their user stack copies:
        // a switch-heavy machine sends them in bursts (measured with
        // the agent's 1 MiB ring: 300 lost of 3000 in 30 s).
        ring_bytes: (sampler_ring_bytes / 2)
            .max(opts.polling.ring_min_bytes)
            .max((256 * opts.stack_copy).next_power_of_two()),
        stack_copy: opts.stack_copy,
        wakeup_divisor: opts.polling.wakeup_divisor,
        kernel_unwind: shared.map(|d| d.path().to_path_buf()),
    })
}

/// The `/proc` snapshot `opts` asks for, being read on a thread of its own
/// (with no thread to spare, read when taken).
fn spawn_snapshot(opts: &CaptureOptions) -> Snapshot {
    // Our own process too: the kernel unwinder needs its mappings, or
    // every sample of ours would be handed over with a stack copy.
    let mut only_pids = opts.target_pids.clone();
    only_pids.push(std::process::id());
    let all = opts.snapshot_all;
    let read = move || proc_snapshot::snapshot((!all).then_some(only_pids.as_slice()));
    match std::thread::Builder::new()
        .name("sysprof-proc".into())
        .spawn(read.clone())
    {
        Ok(handle) => Snapshot::Reading(handle),
        Err(_) => Snapshot::Later(Box::new(read)),
    }
}

/// The `/proc` snapshot: being read, or to be read when wanted.
enum Snapshot {
    Reading(std::thread::JoinHandle<proc_snapshot::ProcSnapshot>),
    Later(Box<dyn FnOnce() -> proc_snapshot::ProcSnapshot>),
}

impl Snapshot {
    fn take(self) -> proc_snapshot::ProcSnapshot {
        match self {
            // A panic reading /proc (none is known) leaves the running
            // processes to the sideband, as before they are seen.
            Snapshot::Reading(handle) => handle.join().unwrap_or_default(),
            Snapshot::Later(read) => read(),
        }
    }
}

/// Everything after the sampler, while it samples: the tracer on a thread
/// of its own (its ring handed to the running reader as soon as it is
/// attached), and here the walker, the `/proc` snapshot (read since the
/// start) and the kernel unwinder's tables for what runs.
fn load_the_rest(
    collector: &mut Collector,
    sampler: &mut Sampler,
    tracer_opts: Option<&TracerOptions>,
    pump: &pump::Pump,
    snapshot: Snapshot,
) -> Result<LoadedTracer, RecordError> {
    std::thread::scope(|scope| {
        let tracer = tracer_opts.map(|t| {
            std::thread::Builder::new()
                .name("sysprof-load".into())
                .spawn_scoped(scope, || {
                    crate::sys::process::raise_thread_priority(LOAD_NICE);
                    // Attached, the tracer writes at once: its ring
                    // goes to a running reader then, not after the
                    // `/proc` snapshot and the tables below (0.5 s
                    // and more beside pgbench, whose switches filled
                    // 4.5-5 of the ring's 8 MiB meanwhile).
                    let (tracer, ring) = Tracer::start(t)?;
                    pump.add_events(ring)
                        .map_err(|source| ring_poll("the tracer's ring", source))?;
                    Ok((tracer, None))
                })
        });
        // The walker, while the tracer's programs are verified beside
        // it: until now the sampler copied stacks.
        let mut walker_failed = false;
        if sampler.walker_pending() {
            // Verified at the loaders' priority: the running processes'
            // tables wait for it, and their stacks are copies meanwhile.
            let _raised = crate::sys::process::RaisedPriority::new(LOAD_NICE);
            if let Err(e) = sampler.load_walker() {
                collector.warn(format!(
                    "user stacks are copied and unwound here, not in the kernel: {e}"
                ));
                walker_failed = true;
            }
        }
        collector.handle_snapshot(snapshot.take());
        if let Some(maps) = sampler.take_unwind_maps() {
            collector.enable_kernel_unwinding(maps);
        }
        let loaded = match tracer {
            None => Ok(None),
            Some(Ok(handle)) => handle
                .join()
                .unwrap_or_else(|_| {
                    Err(RecordError::Internal("the tracer's loader panicked".into()))
                })
                .map(Some),
            // No thread to spare: loaded here.
            Some(Err(_)) => tracer_opts
                .map(|t| Tracer::start(t).map(|(tracer, ring)| (tracer, Some(ring))))
                .transpose(),
        };
        match (loaded, tracer_opts) {
            // The kernel that refused the walker refuses the tracer's
            // too: off-CPU stacks are copied. (Not when the reader
            // could not map or take the ring: a second tracer would
            // fare no better.)
            (Err(e), Some(t))
                if walker_failed
                    && t.kernel_unwind.is_some()
                    && !matches!(
                        e,
                        RecordError::RingPoll { .. } | RecordError::RingMap { .. }
                    ) =>
            {
                let copying = TracerOptions {
                    kernel_unwind: None,
                    ..t.clone()
                };
                Tracer::start(&copying).map(|(tracer, ring)| Some((tracer, Some(ring))))
            }
            (loaded, _) => loaded,
        }
    })
}
