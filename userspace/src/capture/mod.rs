//! A capture session: everything that runs while recording, for `record`
//! and the agent alike.
//!
//! In: [`CaptureOptions`]. Out: records handed to a [`Collector`] as they
//! arrive: the perf sideband (mappings, exec, fork, exit), samples from the
//! sampler's ring, scheduler and I/O records from the tracer's ring, and
//! counters polled from `/proc`. The order of the start matters: the
//! sideband opens before `/proc` is read (no gap for new processes), the
//! clock anchor is read before the sampler attaches (no sample precedes the
//! recording's start), `/proc` is read from the start on a thread of its
//! own (its CPU times read again once sampling begins), the sampler attaches
//! before the tracer loads when what runs already is recorded
//! (`sample_first`: the first sample comes after the sampler's verification
//! alone), after them for a command (its range starts with it), and the kernel's symbols
//! are read once every program is loaded (so our programs' frames get
//! their own names). A thread of its
//! own reads the rings (`pump`): the event loop ([`CaptureSession::run_bounded`])
//! hands what it read to the collector until a future the caller gives
//! completes (a deadline, a signal, the end of a command) or a window is full,
//! and the rings are read meanwhile however long the collector takes.

mod pump;
mod start;

use std::future::Future;
use std::time::Duration;

use crate::bpf::{abi, Sampler, Tracer, TracerDrops};
use crate::collector::Collector;
use crate::error::RecordError;
use crate::sideband::counters::CounterPoller;
use crate::sideband::SidebandEvent;

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
    /// The most the reader holds while the recording starts, before the
    /// collector takes anything ([`PUMP_STARTUP_BUDGET_BYTES`] for
    /// `record`; the agent, at 19 Hz and in a memory-limited unit, keeps
    /// its steady [`PUMP_BUDGET_BYTES`]).
    pub startup_hold_bytes: usize,
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
        startup_hold_bytes: PUMP_STARTUP_BUDGET_BYTES,
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
        startup_hold_bytes: PUMP_BUDGET_BYTES,
    };
}

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Start sampling as soon as the sampler is loaded, before the tracer
    /// and the running processes' tables (what runs already is what is recorded:
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
    /// Waits from `off_cpu_min_ns` up to this are summed in the kernel per
    /// place, waker and reason, in a few runs per thread (0: none are).
    pub fold_same_max_ns: u64,
    /// Of those, a run delay from this long on is summed apart.
    pub run_delay_apart_ns: u64,
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

impl CaptureSession {
    /// Hand what the rings' reader has read to the collector.
    pub fn drain(&mut self, collector: &mut Collector) {
        let Some(mut pumped) = self.pump.as_ref().map(|p| p.take()) else {
            return;
        };
        self.hand(collector, &mut pumped);
        if let Some(p) = &self.pump {
            p.give_back(pumped);
        }
    }

    /// Hand everything up to now to the collector: what was read, and what
    /// the rings hold (a cut).
    fn drain_all(&mut self, collector: &mut Collector) {
        let Some(mut pumped) = self.pump.as_ref().map(|p| p.take_all()) else {
            return;
        };
        self.hand(collector, &mut pumped);
        if let Some(p) = &self.pump {
            p.give_back(pumped);
        }
    }

    /// Records read from the rings, to the collector: the sideband first
    /// (every record was read before a sideband read that followed it, so
    /// a sample is unwound with the mappings its process had at its time),
    /// then samples, then the tracer's records.
    fn hand(&mut self, collector: &mut Collector, pumped: &mut pump::Pumped) {
        if pumped.is_empty() {
            return;
        }
        // Each read of the rings is in time order, but not their sum: a
        // record written to one CPU's ring just after that ring was read
        // comes with the next read, after records of other CPUs written
        // later (an exec, then the mappings of a process that moved CPU).
        // Stable: a CPU's own records keep their order at equal times.
        pumped.sideband.sort_by_key(SidebandEvent::time);
        for e in pumped.sideband.drain(..) {
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
        // Runs of waits ended before now stay in the tracer's map, read
        // with the threads' states below, not sent after the ring's last read.
        if let Some(Err(e)) = self.tracer.as_mut().map(|t| t.freeze_place_runs()) {
            collector.warn(format!(
                "could not keep the tracer's last runs of waits for the end ({e}): waits of the recording's last moment may be missing"
            ));
        }
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
            self.hand(collector, &mut pumped);
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
            let place_runs = tracer.place_runs();
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
            collector.handle_thread_states(&states, &place_runs, end_ns);
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

/// The same while the recording starts, before the collector takes
/// anything: the tracer and the sampler run while the rest loads (the
/// walker, the `/proc` snapshot, the running processes' tables, 0.6-1.2 s
/// beside an I/O storm on 2 CPUs), and until a process's table is in, its
/// stacks come as copies. Beside the storm (`tests/workloads/iostorm.c`,
/// two threads reading and syncing) that was 40-117 MB read before the
/// first hand-over; past 64 MiB the reader stopped, the tracer's ring
/// filled, and CI once lost 126,293 records. The steady budget holds from
/// the event loop's first take (the buffers shrink as they are emptied).
const PUMP_STARTUP_BUDGET_BYTES: usize = 256 << 20;
