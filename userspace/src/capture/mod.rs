//! A capture session: everything that runs while recording, for `record`
//! and the agent alike.
//!
//! In: [`CaptureOptions`]. Out: records handed to a [`Collector`] as they
//! arrive: the perf sideband (mappings, exec, fork, exit), samples from the
//! sampler's ring, scheduler and I/O records from the tracer's ring, and
//! counters polled from `/proc`. The order of the start matters: the
//! sideband opens before `/proc` is read (no gap for new processes), the
//! clock anchor is read before the sampler attaches (no sample precedes the
//! recording's start), the sampler attaches before the tracer loads and
//! `/proc` is read when what runs already is recorded (`sample_first`:
//! the first sample comes after the sampler's verification alone), after
//! them for a command (its range starts with it), and the kernel's symbols
//! are read once every program is loaded (so our programs' frames get
//! their own names). A thread of its
//! own reads the rings (`pump`): the event loop ([`CaptureSession::run_bounded`])
//! hands what it read to the collector until a future the caller gives
//! completes (a deadline, a signal, the end of a command) or a window is full,
//! and the rings are read meanwhile however long the collector takes.

mod pump;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};

use crate::bpf::{abi, Sampler, SamplerOptions, Tracer, TracerDrops, TracerOptions};
use crate::collector::Collector;
use crate::error::RecordError;
use crate::sideband::counters::CounterPoller;
use crate::sideband::{proc_snapshot, Sideband};
use crate::symbolize::kernel::KernelSymbols;

/// How often the rings are drained and counters read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Polling {
    /// The reader reads the sample and event rings at least this often
    /// (the kernel also wakes it when a ring is 1/`wakeup_divisor` full).
    pub rings: Duration,
    /// And the sideband rings (512 KiB per CPU, no wakeups): the reader
    /// wakes every min(`rings`, `sideband`), and the event loop hands what
    /// it read over at least every max of the two.
    pub sideband: Duration,
    /// Read counters from /proc.
    pub counters: Duration,
    /// Least bytes of each ring (`record` sizes them for a burst on a busy
    /// machine; the agent at 19 Hz needs far less).
    pub ring_min_bytes: u32,
    /// Seconds of samples from every CPU the sample ring holds.
    pub ring_seconds: f64,
    /// The kernel wakes the reader when a ring is 1/N full.
    pub wakeup_divisor: u32,
}

impl Polling {
    /// `record`: fine-grained counters, rings drained often.
    pub const RECORD: Polling = Polling {
        rings: Duration::from_millis(20),
        sideband: Duration::from_millis(50),
        counters: Duration::from_millis(100),
        // The pump empties the rings every 20 ms or at 1/16 full: the most
        // one read took (`-v`'s samples_ring_peak and events_ring_peak) in
        // six recordings beside pgbench and beside an I/O storm was 0.29-
        // 0.37 MiB of samples and 0.36-0.94 MiB of the tracer's records,
        // once the tracer's ring went to the pump as it attached (it waited
        // for the `/proc` snapshot before: 4.5-5.6 MiB) and the pump ran
        // above the loaders (1.0-1.6 MiB in their first 0.2 s before). 4 MiB
        // is four times the most; each ring's pages count twice in the
        // resident set (the kernel maps them twice).
        ring_min_bytes: 4 << 20,
        ring_seconds: 0.5,
        wakeup_divisor: 16,
    };
    /// The agent: a handful of wakeups a second is its CPU budget.
    pub const AGENT: Polling = Polling {
        rings: Duration::from_millis(1000),
        // 512 KiB per CPU: a fork storm of 1000 processes a second writes
        // about 375 KiB per CPU per second.
        sideband: Duration::from_millis(500),
        counters: Duration::from_millis(5000),
        ring_min_bytes: 1 << 20,
        // Drained every second, or when half full.
        ring_seconds: 1.0,
        wakeup_divisor: 2,
    };
}

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Start sampling as soon as the sampler is loaded, before the tracer
    /// and the `/proc` snapshot (what runs already is what is recorded:
    /// `-a`, `-p`, the agent); else once everything is loaded (`record --
    /// CMD`, whose command starts after: its range then starts with it).
    pub sample_first: bool,
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Filter in the kernel to this process (0: every process).
    pub target_tgid: u32,
    /// Dwarf mode: user stack bytes copied per sample (0: frame pointers);
    /// with kernel unwinding only where the kernel hands a sample over.
    pub stack_copy: u32,
    /// Unwind in the kernel with this many rows of tables (0: do not).
    pub kernel_unwind_rows: u32,
    /// Entries of the in-kernel unwinder's process map.
    pub kernel_unwind_processes: u32,
    /// Trace context switches and wakeups.
    pub off_cpu: bool,
    /// Trace block I/O.
    pub io: bool,
    /// Off-CPU intervals shorter than this are folded in the kernel.
    pub off_cpu_min_ns: u64,
    /// Read `/proc` for every process at start (else only `target_pids`).
    pub snapshot_all: bool,
    /// The processes to read from `/proc` when not all.
    pub target_pids: Vec<u32>,
    /// Polling intervals and ring sizes.
    pub polling: Polling,
}

/// The running capture; see the module doc.
pub struct CaptureSession {
    /// The rings, read by a thread of their own; None once stopped.
    pump: Option<pump::Pump>,
    sampler: Option<Sampler>,
    tracer: Option<Tracer>,
    counters: CounterPoller,
    decode_errors: u64,
    polling: Polling,
    /// Losses already reported to the collector (windows get the rest).
    reported: Losses,
    /// CLOCK_MONOTONIC ns when sampling started.
    pub start_ns: u64,
    /// Wall clock at `start_ns`, ms since the Unix epoch.
    pub start_wall_ms: f64,
}

/// Loss totals as the kernel and the sideband count them (they only grow).
#[derive(Debug, Clone, Copy, Default)]
struct Losses {
    samples: u64,
    sideband: u64,
    malformed: u64,
    tracer: TracerDrops,
}

/// The nice of the threads that load the programs: the verifier's work is
/// the wait before the first sample, and a second more before off-CPU data.
const LOAD_NICE: i32 = -10;

/// The sampler loaded, before sampling starts, and what the tracer needs
/// to be loaded beside it.
struct LoadedSampler {
    sampler: Sampler,
    samples: RingBuf<MapData>,
    /// The private bpffs the sampler pinned its unwind maps in, for the
    /// tracer to walk stacks with (None: the tracer copies them).
    shared: Option<crate::bpf::SharedMapDir>,
    /// The sampler's ring size.
    ring_bytes: u32,
}

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
        // From here the machine's processes come and go into the sideband:
        // it is read every 10 ms while the sampler loads (no wakeups are
        // waited for), then by the pump.
        let startup_period = Duration::from_millis(10);
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
        let (loaded, pumped) = pump::while_busy(rings, startup_period, PUMP_BUDGET_BYTES, || {
            let _raised = crate::sys::process::RaisedPriority::new(LOAD_NICE);
            Self::load_sampler(opts, collector, &cpus)
        });
        let LoadedSampler {
            mut sampler,
            samples,
            shared,
            ring_bytes,
        } = loaded?;
        // The recording starts here: nothing sampled precedes it.
        let mut anchor = (0.0, 0);
        let mut counters = CounterPoller::new(&cpus);
        let period = opts.polling.rings.min(opts.polling.sideband);
        let start_pump = |rings: pump::OwnedRings, pumped: pump::Pumped| {
            pump::Pump::start(rings, pumped, period, PUMP_BUDGET_BYTES).map_err(|source| {
                RecordError::RingPoll {
                    what: "the rings' reader".into(),
                    source,
                }
            })
        };
        let mut start_sampling =
            |sampler: &mut Sampler, collector: &mut Collector, counters: &mut CounterPoller| {
                sampler.attach()?;
                // The range starts once every CPU samples, not before the
                // first attach: begun before it, every recording's first
                // 25 ms were 2-4 samples short of a spinner's own clock.
                // A sample an earlier CPU took meanwhile precedes the range
                // and is left out (see `Collector::sampling_started`).
                anchor = crate::sys::clock::clock_anchor();
                collector.sampling_started(anchor.1);
                // A baseline before anything runs, so even a short command gets deltas.
                counters.poll(crate::sys::clock::monotonic_ns(), std::iter::empty());
                Ok::<_, RecordError>(())
            };
        if opts.sample_first {
            start_sampling(&mut sampler, collector, &mut counters)?;
        }
        // The reader runs from here either way: with sampling waiting (`record
        // -- CMD`), the tracer's ring attaches below and would otherwise sit
        // unread through the `/proc` snapshot and the tables (4.5-5.6 MiB
        // beside pgbench, more than `record`'s least ring).
        let pump = start_pump(
            pump::OwnedRings {
                samples,
                events: None,
                sideband,
                peaks: pump::RingPeaks::default(),
            },
            pumped,
        )?;
        // The rest: the tracer loads on a thread of its own (the verifier's
        // work, per program) beside the `/proc` snapshot.
        let tracer_opts = (opts.off_cpu || opts.io).then(|| TracerOptions {
            target_tgid: opts.target_tgid,
            off_cpu: opts.off_cpu,
            io: opts.io,
            off_cpu_min_ns: opts.off_cpu_min_ns,
            // Room for 256 stack records with their user stack copies:
            // a switch-heavy machine sends them in bursts (measured with
            // the agent's 1 MiB ring: 300 lost of 3000 in 30 s).
            ring_bytes: (ring_bytes / 2)
                .max(opts.polling.ring_min_bytes)
                .max((256 * opts.stack_copy).next_power_of_two()),
            stack_copy: opts.stack_copy,
            wakeup_divisor: opts.polling.wakeup_divisor,
            kernel_unwind: shared.as_ref().map(|d| d.path().to_path_buf()),
        });
        let rest = |collector: &mut Collector, sampler: &mut Sampler| {
            std::thread::scope(|scope| {
                let tracer = tracer_opts.as_ref().map(|t| {
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
                                .map_err(|source| RecordError::RingPoll {
                                    what: "the tracer's ring".into(),
                                    source,
                                })?;
                            Ok((tracer, None))
                        })
                });
                // The walker, while the tracer's programs are verified beside
                // it: until now the sampler copied stacks.
                let mut walker_failed = false;
                if sampler.walker_pending() {
                    if let Err(e) = sampler.load_walker() {
                        collector.warn(format!(
                            "user stacks are copied and unwound here, not in the kernel: {e}"
                        ));
                        walker_failed = true;
                    }
                }
                // Our own process too: the kernel unwinder needs its mappings, or
                // every sample of ours would be handed over with a stack copy.
                let mut only_pids = opts.target_pids.clone();
                only_pids.push(std::process::id());
                let only = (!opts.snapshot_all).then_some(only_pids.as_slice());
                collector.handle_snapshot(proc_snapshot::snapshot(only));
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
                        .as_ref()
                        .map(|t| Tracer::start(t).map(|(tracer, ring)| (tracer, Some(ring))))
                        .transpose(),
                };
                match (loaded, &tracer_opts) {
                    // The kernel that refused the walker refuses the tracer's
                    // too: off-CPU stacks are copied. (Not when the reader
                    // could not take the ring: a second tracer would fare
                    // no better.)
                    (Err(e), Some(t))
                        if walker_failed
                            && t.kernel_unwind.is_some()
                            && !matches!(e, RecordError::RingPoll { .. }) =>
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
        };
        let tracer = rest(collector, &mut sampler);
        drop(shared);
        let (tracer, mut events) = match tracer? {
            Some((tracer, events)) => (Some(tracer), events),
            None => (None, None),
        };
        if let Some(events) = events.take() {
            pump.add_events(events)
                .map_err(|source| RecordError::RingPoll {
                    what: "the tracer's ring".into(),
                    source,
                })?;
        }
        if tracer.is_some() {
            collector.tracing_started(crate::sys::clock::monotonic_ns());
        }
        // Every program is loaded: their frames are in kallsyms now. Read
        // once the pump has every ring: the snapshot takes 0.1-0.25 s beside
        // pgbench, whose switches fill the tracer's ring by ~1 MiB in that.
        let kernel = match KernelSymbols::snapshot() {
            Ok(k) => Arc::new(k),
            Err(e) => {
                collector.warn(format!("kernel frames stay unnamed: {e}"));
                Arc::new(KernelSymbols::default())
            }
        };
        collector.set_kernel_symbols(kernel);
        // A command's range starts here, after the last of the loading (the
        // kallsyms snapshot above took 0.1 s and put the range's start that
        // far before the command's).
        if !opts.sample_first {
            start_sampling(&mut sampler, collector, &mut counters)?;
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

    /// Hand what the rings' reader has read to the collector.
    pub fn drain(&mut self, collector: &mut Collector) {
        if let Some(p) = &self.pump {
            let pumped = p.take();
            self.hand(collector, pumped);
        }
    }

    /// Hand everything up to now to the collector: what was read, and what
    /// the rings hold (a cut).
    fn drain_all(&mut self, collector: &mut Collector) {
        if let Some(p) = &self.pump {
            let pumped = p.take_all();
            self.hand(collector, pumped);
        }
    }

    /// Records read from the rings, to the collector: the sideband first
    /// (every record was read before a sideband read that followed it, so
    /// a sample is unwound with the mappings its process had at its time),
    /// then samples, then the tracer's records.
    fn hand(&mut self, collector: &mut Collector, pumped: pump::Pumped) {
        if pumped.is_empty() {
            return;
        }
        for e in pumped.sideband {
            collector.handle_sideband(e);
        }
        collector.sync_kernel_unwinding();
        for item in pumped.samples.iter() {
            match abi::decode_sample(item) {
                Ok(s) => collector.handle_sample(&s),
                Err(_) => self.decode_errors += 1,
            }
        }
        for item in pumped.events.iter() {
            match abi::decode_event(item) {
                // The ring's own 8-byte header too: what the record took of it.
                Ok(e) => collector.handle_event_bytes(e, item.len() + 8),
                Err(_) => self.decode_errors += 1,
            }
        }
        collector.sync_kernel_unwinding();
        if let Some(tracer) = &mut self.tracer {
            tracer.forget_shared(&collector.take_forgotten_stacks());
        }
    }

    /// How long each object and program took to load (the verifier's work),
    /// the sampler's first.
    pub fn load_times(&self) -> crate::bpf::LoadTimes {
        let mut times = self
            .sampler
            .as_ref()
            .map(|s| s.load_times.clone())
            .unwrap_or_default();
        times.extend(
            self.tracer
                .as_ref()
                .map(|t| t.load_times.clone())
                .unwrap_or_default(),
        );
        times
    }

    /// Samples lost so far because the sampler's ring was full.
    pub fn lost_samples(&self) -> u64 {
        self.sampler
            .as_ref()
            .map(|s| s.drops().ring_full)
            .unwrap_or(0)
    }

    /// Drain the rings into `collector` until `until` completes (its
    /// output), or until the collector's window holds `max_records` records
    /// (None): the window is then ended early, so a fork storm cannot make
    /// one window, and the memory it takes, grow without bound. `status` is
    /// called every `status_every` (if given) with the samples so far.
    pub async fn run_bounded<T>(
        &mut self,
        collector: &mut Collector,
        until: impl Future<Output = T>,
        max_records: usize,
        status_every: Option<Duration>,
        mut status: impl FnMut(u64, u64),
    ) -> Result<Option<T>, RecordError> {
        tokio::pin!(until);
        let mut counter_tick = tokio::time::interval(self.polling.counters);
        // The reader tells when it read something; this tick is the floor.
        let mut ring_tick = tokio::time::interval(self.polling.rings.max(self.polling.sideband));
        for t in [&mut counter_tick, &mut ring_tick] {
            // Late ticks (a window being finished) are not made up in a burst.
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let mut status_tick =
            tokio::time::interval(status_every.unwrap_or(Duration::from_secs(3600)));
        enum Wake {
            Drain,
            Counters,
            Status,
        }
        loop {
            let ready = async {
                match &self.pump {
                    Some(p) => p.ready().await,
                    None => std::future::pending().await,
                }
            };
            let wake = tokio::select! {
                out = &mut until => return Ok(Some(out)),
                _ = ready => Wake::Drain,
                _ = ring_tick.tick() => Wake::Drain,
                _ = counter_tick.tick() => Wake::Counters,
                _ = status_tick.tick(), if status_every.is_some() => Wake::Status,
            };
            match wake {
                Wake::Drain => self.drain(collector),
                Wake::Counters => self.counters.poll(
                    crate::sys::clock::monotonic_ns(),
                    collector.take_recent_pids(),
                ),
                Wake::Status => status(collector.sample_count(), self.lost_samples()),
            }
            if collector.window_records() >= max_records {
                return Ok(None);
            }
        }
    }

    /// Stop now: take the last counter reading, end the recording (its end
    /// is returned), detach the sampler, drain what is buffered, close the
    /// intervals still open, count what was lost, and detach the tracer
    /// (beside the rest of the work: it waits for RCU grace periods).
    pub fn stop(mut self, collector: &mut Collector) -> u64 {
        self.counters.poll(
            crate::sys::clock::monotonic_ns(),
            collector.take_recent_pids(),
        );
        let end_ns = crate::sys::clock::monotonic_ns();
        let lost_samples = self.lost_samples();
        drop(self.sampler.take());
        // The reader ends; what it read and what the rings still hold go
        // to the collector.
        let mut sideband_losses = (0, 0);
        let mut rings = None;
        if let Some(p) = self.pump.take() {
            let (mut owned, mut pumped) = p.stop();
            owned.lend().read(&mut pumped, usize::MAX);
            sideband_losses = (owned.sideband.lost, owned.sideband.malformed);
            collector.handle_ring_peaks(owned.peaks.samples, owned.peaks.events);
            self.hand(collector, pumped);
            rings = Some(owned);
        }
        let mut tracer_drops = TracerDrops::default();
        if let Some(tracer) = self.tracer.take() {
            // Counted as the rings were last read: reading every thread's
            // state takes a syscall per thread (100 ms and more beside a
            // fork loop), and what the tracer cannot write meanwhile comes
            // after the end (it was 2,000-4,000 "lost" records of an 8-s
            // recording beside a fork loop).
            tracer_drops = tracer.drops();
            let states = tracer.thread_states();
            // The tracer still runs: a thread that left the CPU after the
            // ring's last read has its stack in the ring, not read yet, and
            // its state refers to it (a stack "not kept" at the end, beside
            // an I/O storm). Its stack records are read now; nothing else
            // of what came after the end.
            if let Some(rings) = rings.as_mut() {
                let mut after = pump::Pumped::default();
                rings.lend().read(&mut after, usize::MAX);
                for item in after.events.iter() {
                    if let Ok(e @ abi::EventRecord::Stack(..)) = abi::decode_event(item) {
                        collector.handle_event(e);
                    }
                }
            }
            collector.handle_thread_states(&states, end_ns);
            // Requests that will get no marker: counted as seen at one end.
            tracer_drops.io_untracked += tracer.requests_open();
            std::thread::spawn(move || drop(tracer));
        }
        let notes = std::mem::take(&mut self.counters.notes);
        collector.handle_counters(self.counters.take());
        for n in notes {
            collector.note(n);
        }
        self.report_losses(collector, lost_samples, tracer_drops, sideband_losses);
        end_ns
    }

    /// End a window of a capture that goes on (the agent): take a counter
    /// reading, cut at now (returned), hand over what is buffered, the
    /// window's counters and what was lost since the previous cut.
    /// Records read after the cut that belong after it are the next
    /// window's (see [`crate::collector::WindowRange::continuous`]).
    pub fn cut(&mut self, collector: &mut Collector) -> u64 {
        self.counters.poll(
            crate::sys::clock::monotonic_ns(),
            collector.take_recent_pids(),
        );
        self.counters.window_cut();
        let end_ns = crate::sys::clock::monotonic_ns();
        self.drain_all(collector);
        let notes = std::mem::take(&mut self.counters.notes);
        collector.handle_counters(self.counters.take());
        for n in notes {
            collector.note(n);
        }
        let lost_samples = self.lost_samples();
        let tracer_drops = self.tracer.as_ref().map(|t| t.drops()).unwrap_or_default();
        let sideband_losses = self
            .pump
            .as_ref()
            .map(|p| p.sideband_losses())
            .unwrap_or_default();
        if let Some(peaks) = self.pump.as_ref().map(|p| p.ring_peaks()) {
            collector.handle_ring_peaks(peaks.samples, peaks.events);
        }
        self.report_losses(collector, lost_samples, tracer_drops, sideband_losses);
        end_ns
    }

    /// Give the collector the losses not reported yet.
    /// `sideband`: (records lost, records malformed) so far.
    fn report_losses(
        &mut self,
        collector: &mut Collector,
        lost_samples: u64,
        tracer: TracerDrops,
        sideband: (u64, u64),
    ) {
        let now = Losses {
            samples: lost_samples,
            sideband: sideband.0,
            malformed: sideband.1 + self.decode_errors,
            tracer,
        };
        let r = self.reported;
        collector.handle_losses(
            now.samples.saturating_sub(r.samples),
            now.sideband.saturating_sub(r.sideband),
            now.malformed.saturating_sub(r.malformed),
            now.tracer.since(r.tracer),
        );
        self.reported = now;
    }
}

/// The most the rings' reader holds for the collector (past it the kernel
/// drops and counts): beside a fork loop and a spinner the rings carry
/// 5-20 MB a second (new processes' stacks are copies), and a window took
/// up to 3 s to finish.
const PUMP_BUDGET_BYTES: usize = 64 << 20;
