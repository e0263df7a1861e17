//! The rings, drained by a thread of their own.
//!
//! In: the sampler's ring, the tracer's ring and the sideband, owned by the
//! pump's thread for the whole session (and lent, before it starts, while
//! `/proc` is read and the programs load). Out: [`Pumped`], the records read
//! so far, copied as they came, which the event loop takes and hands to the
//! collector at its own pace, and gives back emptied for the next reads.
//!
//! Why: the event loop both read the rings and fed the collector, so
//! whenever the collector was busy (a window finished, merged and written;
//! a burst of new processes' stacks unwound) nothing was read, and
//! half-second rings overflowed. Measured beside a fork loop and a spinner:
//! `record -a -d 20` cut into 3 windows lost 2,569 samples and 7,707 process
//! events, where the same recording as one window lost no sample; a 4-s
//! recording lost 3,002 process events while the programs loaded. The copy
//! is all this thread does (no decoding, no unwinding), it is woken by the
//! kernel at the rings' watermarks as the event loop was, and it runs at a
//! higher priority than what is profiled, so a busy machine does not starve
//! it. What it holds is bounded ([`Pump::start`]'s budgets: a larger one
//! until the event loop's first take, while the recording starts): past it
//! the kernel drops, and counts, as before.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::bpf::BpfRing;
use crate::sideband::{Sideband, SidebandEvent};

/// Records of one ring, copied: each starts 8-aligned, as in the ring
/// (the decoders view records in place and check their alignment).
#[derive(Default)]
pub(super) struct Records {
    words: Vec<u64>,
    /// (first word, length in bytes) of each record.
    spans: Vec<(usize, usize)>,
}

impl Records {
    /// Copy a record that came as `first` then `rest` (a record that
    /// wrapped past the ring's end; `rest` is empty otherwise).
    fn push_parts(&mut self, first: &[u8], rest: &[u8]) {
        let len = first.len() + rest.len();
        let start = self.words.len();
        self.words.resize(start + len.div_ceil(8), 0);
        // SAFETY: the words just added are plain u64s, viewed as the bytes
        // they hold (u8 has no alignment); the length is within them.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr().add(start) as *mut u8, len)
        };
        dst[..first.len()].copy_from_slice(first);
        dst[first.len()..].copy_from_slice(rest);
        self.spans.push((start, len));
    }

    /// The records, in the order read.
    pub(super) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|&(start, len)| {
            // SAFETY: `push` wrote `len` bytes from word `start`, inside `words`.
            unsafe { std::slice::from_raw_parts(self.words.as_ptr().add(start) as *const u8, len) }
        })
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8 + self.spans.len() * 16
    }

    fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Emptied, its capacity kept up to [`SPARE_MAX_BYTES`].
    fn clear(&mut self) {
        self.words.clear();
        self.spans.clear();
        self.words.shrink_to(SPARE_MAX_BYTES / 8);
        self.spans.shrink_to(SPARE_MAX_BYTES / 16);
    }
}

/// Most bytes of capacity each of a spare [`Pumped`]'s buffers keeps: its
/// records' buffers refill in place at the event loop's pace instead of
/// growing from nothing at each take (beside a compiler loop the agent's
/// pump spent 4.6 % of the agent's CPU in `malloc`, and its page faults,
/// regrowing them); a burst larger than this is given back to the system
/// (at 1 MiB, the spare held 3.2 MB of `record -a`'s peak heap beside
/// pgbench, heaptrack).
const SPARE_MAX_BYTES: usize = 256 << 10;

/// What was read from the rings while the collector was busy.
#[derive(Default)]
pub(super) struct Pumped {
    /// Sideband events, in the order read (each read sorted by time).
    pub(super) sideband: Vec<SidebandEvent>,
    pub(super) samples: Records,
    pub(super) events: Records,
}

impl Pumped {
    pub(super) fn is_empty(&self) -> bool {
        self.sideband.is_empty() && self.samples.is_empty() && self.events.is_empty()
    }

    /// Emptied, to be filled again ([`Pump::give_back`]).
    pub(super) fn clear(&mut self) {
        self.sideband.clear();
        self.sideband
            .shrink_to(SPARE_MAX_BYTES / std::mem::size_of::<SidebandEvent>());
        self.samples.clear();
        self.events.clear();
    }

    fn bytes(&self) -> usize {
        self.samples.bytes()
            + self.events.bytes()
            + self.sideband.len() * (std::mem::size_of::<SidebandEvent>() + 64)
    }
}

/// The most bytes one read took from each ring: how full it came to be
/// (the reader empties a ring at each read), what its size is checked
/// against (`-v`'s stats line).
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct RingPeaks {
    pub(super) samples: usize,
    pub(super) events: usize,
}

/// The rings lent to a reader.
pub(super) struct Rings<'a> {
    pub(super) samples: Option<&'a mut BpfRing>,
    pub(super) events: Option<&'a mut BpfRing>,
    pub(super) sideband: &'a mut Sideband,
    pub(super) peaks: &'a mut RingPeaks,
}

impl Rings<'_> {
    /// One read of every ring, unless `into` already holds `budget` bytes
    /// (the kernel then drops what does not fit, and counts it). Samples
    /// and the tracer's records are read before the sideband: every record
    /// copied here is covered by a sideband read that follows it, so the
    /// event loop can hand the sideband over first (a sample is unwound
    /// with the mappings its process had at its time).
    pub(super) fn read(&mut self, into: &mut Pumped, budget: usize) {
        if into.bytes() >= budget {
            return;
        }
        if let Some(samples) = self.samples.as_mut() {
            let read = samples.drain(|a, b| into.samples.push_parts(a, b));
            self.peaks.samples = self.peaks.samples.max(read);
        }
        if let Some(events) = self.events.as_mut() {
            let read = events.drain(|a, b| into.events.push_parts(a, b));
            self.peaks.events = self.peaks.events.max(read);
        }
        self.sideband.drain(&mut |e| into.sideband.push(e));
    }
}

/// Nice value of the pump's thread: it only copies, so its priority costs
/// what is profiled little; above the loaders' (`LOAD_NICE`, -10), whose
/// verifier work on the same CPUs delayed its reads in a recording's first
/// 0.2 s (the rings' fullest then: 0.8-1.6 MiB, steady 0.3-0.6).
const PUMP_NICE: i32 = -20;

/// Run `work` while a thread of its own reads `rings` every `period` into
/// memory (at most `budget` bytes); returns what `work` returned and what
/// was read, the last read made after `work` ended.
pub(super) fn while_busy<R>(
    mut rings: Rings<'_>,
    period: Duration,
    budget: usize,
    work: impl FnOnce() -> R,
) -> (R, Pumped) {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let pump = std::thread::Builder::new()
            .name("sysprof-pump".into())
            .spawn_scoped(scope, || {
                crate::sys::process::raise_thread_priority(PUMP_NICE);
                let mut pumped = Pumped::default();
                loop {
                    let last = done.load(Ordering::Acquire);
                    rings.read(&mut pumped, budget);
                    if last {
                        return pumped;
                    }
                    std::thread::park_timeout(period);
                }
            });
        let out = work();
        done.store(true, Ordering::Release);
        let pumped = match pump {
            Ok(handle) => {
                handle.thread().unpark();
                handle.join().unwrap_or_default()
            }
            // No thread (out of threads): the rings are read afterwards, as before.
            Err(_) => Pumped::default(),
        };
        (out, pumped)
    })
}

/// The rings, owned.
pub(super) struct OwnedRings {
    pub(super) samples: BpfRing,
    pub(super) events: Option<BpfRing>,
    pub(super) sideband: Sideband,
    pub(super) peaks: RingPeaks,
}

impl OwnedRings {
    pub(super) fn lend(&mut self) -> Rings<'_> {
        Rings {
            samples: Some(&mut self.samples),
            events: self.events.as_mut(),
            sideband: &mut self.sideband,
            peaks: &mut self.peaks,
        }
    }
}

struct State {
    rings: OwnedRings,
    pumped: Pumped,
    /// The buffers the event loop handed back, emptied: the next take's.
    spare: Option<Pumped>,
}

struct Shared {
    state: Mutex<State>,
    done: AtomicBool,
    /// The most bytes held for the event loop: `startup_budget` until its
    /// first take, then `budget` (`Pump::start`).
    budget: AtomicUsize,
    steady_budget: usize,
    /// Told when records are waiting.
    ready: tokio::sync::Notify,
    /// Written to wake the thread at once (the end).
    wake: OwnedFd,
    /// What the thread waits on: the rings' fds and `wake`.
    epoll: Epoll,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it (none is expected) leaves plain buffers.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The pump's thread and what it shares with the event loop.
pub(super) struct Pump {
    /// None once stopped.
    shared: Option<Arc<Shared>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pump {
    /// Start reading `rings` (woken by the kernel at their watermarks, and
    /// every `period` for the sideband, which sends no wakeups), holding at
    /// most `startup_budget` bytes until the event loop's first take (the
    /// recording starting: nothing is taken while the rest loads), then
    /// `budget`; `pumped` is what was read before.
    pub(super) fn start(
        rings: OwnedRings,
        pumped: Pumped,
        period: Duration,
        (startup_budget, budget): (usize, usize),
    ) -> std::io::Result<Pump> {
        // SAFETY: eventfd has no preconditions; the fd is owned from here.
        let wake = unsafe {
            let fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        let mut fds = vec![rings.samples.as_raw_fd(), wake.as_raw_fd()];
        fds.extend(rings.events.as_ref().map(|e| e.as_raw_fd()));
        let epoll = Epoll::new(&fds)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rings,
                pumped,
                spare: None,
            }),
            done: AtomicBool::new(false),
            budget: AtomicUsize::new(startup_budget),
            steady_budget: budget,
            ready: tokio::sync::Notify::new(),
            wake,
            epoll,
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sysprof-pump".into())
                .spawn(move || {
                    crate::sys::process::raise_thread_priority(PUMP_NICE);
                    let timeout_ms = period.as_millis().clamp(1, i32::MAX as u128) as i32;
                    while !shared.done.load(Ordering::Acquire) {
                        shared.epoll.wait(timeout_ms);
                        let waiting = {
                            let mut state = shared.lock();
                            let State { rings, pumped, .. } = &mut *state;
                            let budget = shared.budget.load(Ordering::Relaxed);
                            rings.lend().read(pumped, budget);
                            !pumped.is_empty()
                        };
                        if waiting {
                            shared.ready.notify_one();
                        }
                    }
                })?
        };
        Ok(Pump {
            shared: Some(shared),
            thread: Some(thread),
        })
    }

    /// Read the tracer's ring too, from now on (it is loaded after sampling
    /// began).
    pub(super) fn add_events(&self, events: BpfRing) -> std::io::Result<()> {
        let shared = self.shared();
        shared.epoll.add(events.as_raw_fd())?;
        shared.lock().rings.events = Some(events);
        Ok(())
    }

    /// Completes when records are waiting (or were, since the last take).
    pub(super) async fn ready(&self) {
        self.shared().ready.notified().await
    }

    /// What was read so far (to be given back, emptied, when handed over).
    pub(super) fn take(&self) -> Pumped {
        let shared = self.shared();
        shared.budget.store(shared.steady_budget, Ordering::Relaxed);
        let mut state = shared.lock();
        let next = state.spare.take().unwrap_or_default();
        std::mem::replace(&mut state.pumped, next)
    }

    /// What was read so far and what the rings hold now (a cut: everything
    /// up to now).
    pub(super) fn take_all(&self) -> Pumped {
        let shared = self.shared();
        let mut state = shared.lock();
        let State {
            rings,
            pumped,
            spare,
        } = &mut *state;
        rings
            .lend()
            .read(pumped, shared.budget.load(Ordering::Relaxed));
        shared.budget.store(shared.steady_budget, Ordering::Relaxed);
        std::mem::replace(pumped, spare.take().unwrap_or_default())
    }

    /// A taken [`Pumped`] back once handed over: emptied, its buffers are
    /// the next take's.
    pub(super) fn give_back(&self, mut pumped: Pumped) {
        pumped.clear();
        self.shared().lock().spare = Some(pumped);
    }

    /// The sideband's (records lost, records malformed).
    pub(super) fn sideband_losses(&self) -> (u64, u64) {
        let state = self.shared().lock();
        (state.rings.sideband.lost, state.rings.sideband.malformed)
    }

    /// How full the rings came to be so far.
    pub(super) fn ring_peaks(&self) -> RingPeaks {
        self.shared().lock().rings.peaks
    }

    /// End the thread; the rings back, with what was read and not taken.
    pub(super) fn stop(mut self) -> (OwnedRings, Pumped) {
        self.end_thread();
        let shared = self.shared.take().expect("a running pump has its state");
        // The thread, joined, dropped its reference: this is the only one.
        let shared = Arc::into_inner(shared).expect("the pump's thread has ended");
        let state = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
        (state.rings, state.pumped)
    }

    fn end_thread(&mut self) {
        if let Some(shared) = &self.shared {
            shared.done.store(true, Ordering::Release);
            let one = 1u64.to_ne_bytes();
            // SAFETY: an 8-byte write from a local to the eventfd we own.
            unsafe { libc::write(shared.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn shared(&self) -> &Shared {
        self.shared.as_ref().expect("a running pump has its state")
    }
}

impl Drop for Pump {
    /// A session dropped without `stop` (an error): the thread ends with it.
    fn drop(&mut self) {
        self.end_thread();
    }
}

/// An epoll set, edge-triggered as tokio's: a wait returns when the kernel
/// woke a ring (at its watermark) or at the timeout, not while records sit
/// in a ring that sent no wakeup.
struct Epoll(OwnedFd);

impl Epoll {
    fn new(fds: &[RawFd]) -> std::io::Result<Epoll> {
        // SAFETY: epoll_create1 has no preconditions; the fd is owned from here.
        let ep = unsafe {
            let fd = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        let epoll = Epoll(ep);
        for &fd in fds {
            epoll.add(fd)?;
        }
        Ok(epoll)
    }

    /// Wait on `fd` too (edge-triggered; allowed while another thread waits).
    fn add(&self, fd: RawFd) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: fd as u64,
        };
        // SAFETY: fd is open (owned by the caller's rings or by us), ev is a local.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait for a wakeup or `timeout_ms`.
    fn wait(&self, timeout_ms: i32) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: the buffer is a local array of the length given.
        unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a [`Pumped`] given back is empty, keeps buffers up to its
    /// budget to refill, and lets a burst's larger buffers go.
    #[test]
    fn a_spare_is_empty_and_bounded() {
        let mut p = Pumped::default();
        let record = [7u8; 100];
        for _ in 0..64 {
            p.samples.push_parts(&record, &[]);
        }
        let small = p.samples.words.capacity();
        p.clear();
        assert!(p.is_empty() && p.bytes() == 0);
        assert_eq!(p.samples.words.capacity(), small, "a small buffer is kept");
        p.samples.push_parts(&record, &[]);
        assert_eq!(p.samples.iter().next(), Some(&record[..]));
        // A record that wrapped reads back whole.
        p.samples.push_parts(&record[..30], &record[30..]);
        assert_eq!(p.samples.iter().nth(1), Some(&record[..]));
        for _ in 0..(4 * SPARE_MAX_BYTES / record.len()) {
            p.events.push_parts(&record, &[]);
        }
        assert!(p.events.words.capacity() * 8 > SPARE_MAX_BYTES);
        p.clear();
        assert!(p.events.words.capacity() * 8 <= SPARE_MAX_BYTES);
        assert!(p.events.spans.capacity() * 16 <= SPARE_MAX_BYTES);
    }
}
