//! Asking sampled JVMs for their perf maps while they run, so their compiled
//! methods have names (see [`crate::runtimes::hotspot::attach`]).
//!
//! In: processes that map `libjvm.so` (from their mappings), the samples
//! that show them running, the collector's periodic tick and each window's
//! end. Out: requests on threads of their own (a JVM takes milliseconds to
//! write its map; the drain loop must not wait), at most one at a time per
//! JVM, the first as soon as it is sampled, the next ones ever further apart
//! (0.5 s, 1 s, 2 s, … at most a minute: most methods are compiled early,
//! and each answer gives the kernel the frame sizes of the new ones); at a
//! window's end one more, waited for, so the window's frames are named.
//! A JVM that could not be asked is said once as a warning and not asked
//! again. The same thread then reads the map and each compiled method's
//! prologue ([`crate::runtimes::hotspot::frame_sizes`]): the frame sizes the kernel's walker
//! needs to go on below compiled Java frames, handed to the unwinders.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::runtimes::hotspot::attach::AttachError;
use crate::runtimes::hotspot::frame_sizes::JitFrames;

/// What a request gives: the JVM's compiled frames (and, at a window's
/// end, its threads' full names), or why it was not asked, and how long it
/// took (the JVM's map written, its prologues read).
type Answer = (
    u32,
    Result<(JitFrames, Option<ThreadNames>), AttachError>,
    Duration,
);

/// A JVM's threads' full names by tid.
type ThreadNames = FxHashMap<u32, String>;

/// The first interval between two requests to one JVM, and the longest.
const FIRST_INTERVAL: Duration = Duration::from_millis(500);
const LONGEST_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a JVM not ready to be asked (no SIGQUIT handler yet) is tried
/// again: a look at its /proc status, nothing sent. Its hot loop may start
/// a few ms after the handler is in, and every sample until its first
/// answer is cut below the leaf.
const NOT_YET_RETRY: Duration = Duration::from_millis(20);
/// How soon after its last request a JVM whose stacks are cut in code the
/// kernel has no frame size for is asked again: at least this, and at least
/// [`CUT_RETRY_PER_ASK`] times as long as that request took (the JVM writes
/// its whole map each time: what asking costs it stays under 1/20 of one
/// of its threads while its compiler keeps making new code). Measured
/// here: 1.5-2 ms per request for a small program, so 25-40 ms. With a
/// fixed 250 ms (and 100 ms between looks at a starting JVM) 3 % of the
/// test's hot samples were cut here and 11 % in a CI run; now 1-2 %.
const CUT_RETRY_MIN: Duration = Duration::from_millis(25);
const CUT_RETRY_PER_ASK: u32 = 20;

#[derive(Debug)]
struct Jvm {
    sampled: bool,
    pending: bool,
    next: Option<Instant>,
    interval: Duration,
    /// Not asked again (it failed, or must not be asked).
    warned: bool,
    /// Why it was not asked yet (no SIGQUIT handler), said if it never is.
    not_yet: Option<String>,
    /// It wrote its map at least once.
    answered: bool,
    /// Why it could not be asked, said at the window's end (where what its
    /// frames got without its map is known).
    failed: Option<String>,
    /// The process exec'd or exited: said and forgotten at the window's end.
    gone: bool,
    /// When it was last asked.
    asked: Option<Instant>,
    /// How soon after `asked` a cut stack asks again: from the last
    /// request's duration, doubled after each answer that brought no new
    /// code (cuts that more asking does not mend cost it nothing more).
    cut_retry: Duration,
    /// What its last answer held: (methods, its rows' addresses summed), to tell
    /// whether an answer brought new code.
    last: Option<(usize, u64)>,
    /// Its libjvm's tables, once the unwinders know them: its own flags
    /// say whether it may be asked.
    hotspot: Option<HotSpotAt>,
    /// Its threads' full names, from its last answer that had them.
    names: ThreadNames,
    /// When its threads' names are asked for next, and the interval after.
    names_next: Option<Instant>,
    names_interval: Duration,
}

/// The JVMs of the machine (or of the recorded processes) and their requests.
#[derive(Debug)]
pub struct Jvms {
    jvms: FxHashMap<u32, Jvm>,
    done_tx: Sender<Answer>,
    done_rx: Receiver<Answer>,
    /// Compiled frames that arrived, for the unwinders ([`Jvms::take_frames`]).
    frames: Vec<(u32, JitFrames)>,
    /// The thread names of JVMs forgotten at this window's end: its
    /// threads are named after that ([`Jvms::full_name`]).
    departed: FxHashMap<u32, ThreadNames>,
}

impl Default for Jvms {
    fn default() -> Self {
        let (done_tx, done_rx) = channel();
        Jvms {
            jvms: FxHashMap::default(),
            done_tx,
            done_rx,
            frames: Vec::new(),
            departed: FxHashMap::default(),
        }
    }
}

/// A libjvm's structure-table symbols and where its address 0 lies in a JVM.
type HotSpotAt = (
    std::sync::Arc<crate::runtimes::hotspot::binary::HotSpotSymbols>,
    u64,
);

/// Ask JVM `pid` for its perf map, then read its compiled methods' frames;
/// `with_names`: then its threads' names too (a second request, on its own
/// schedule: it prints every thread's stack at a safepoint).
fn ask(
    pid: u32,
    hotspot: Option<HotSpotAt>,
    with_names: bool,
) -> Result<(JitFrames, Option<ThreadNames>), AttachError> {
    let at = hotspot.as_ref().map(|(s, b)| (&**s, *b));
    crate::runtimes::hotspot::attach::write_perf_map(pid, at)?;
    // A JVM that answered the first request answers this one; a failure
    // here costs the names only.
    let names = with_names
        .then(|| crate::runtimes::hotspot::attach::thread_names(pid, at).ok())
        .flatten()
        .map(|v| v.into_iter().collect());
    Ok((ask_frames(pid), names))
}

/// Read JVM `pid`'s perf map (just written) and its compiled methods' frames.
fn ask_frames(pid: u32) -> JitFrames {
    let (uid, ns_pid) = match crate::binaries::perfmap::process_identity(pid) {
        Some((u, n)) => (Some(u), n),
        None => (None, pid),
    };
    // The map is checked as any perf map is (owner, regular file, size).
    let frames = match crate::binaries::perfmap::load(uid, ns_pid, &format!("/proc/{pid}/root")) {
        Ok(map) => crate::runtimes::hotspot::frame_sizes::frames(&map, |addr, buf| {
            crate::sys::memory::read_process(pid, addr, buf).is_ok()
        }),
        Err(_) => JitFrames::default(),
    };
    frames
}

/// How soon after a request that took `took` a cut stack asks again: see
/// [`CUT_RETRY_MIN`]; `before` after an answer that brought nothing new
/// (`same`) doubles.
fn cut_retry(before: Duration, same: bool, answered_before: bool, took: Duration) -> Duration {
    if same {
        (before * 2).min(LONGEST_INTERVAL)
    } else if answered_before {
        (took * CUT_RETRY_PER_ASK).clamp(CUT_RETRY_MIN, LONGEST_INTERVAL)
    } else {
        // The first request also started its attach listener (41 ms here,
        // against 2 ms for the next ones): not what asking costs.
        CUT_RETRY_MIN
    }
}

/// A JVM's perf map is asked for while it runs: an exec or an exit ends that.
impl crate::runtimes::RuntimeReader for Jvms {
    fn ended(&mut self, pid: u32) {
        self.gone(pid);
    }
    /// A JVM is forgotten at the window's end after its end, when a
    /// request still out has answered.
    fn forget(&mut self, _: u32) {}
    fn held_bytes(&self) -> usize {
        0
    }
    fn shed(&mut self) {}
}

impl Jvms {
    /// `pid` mapped `path`: a JVM if it is HotSpot's library.
    pub fn mapped(&mut self, pid: u32, path: &str) {
        if path.rsplit('/').next() == Some("libjvm.so") {
            // A JVM under the pid of one gone (a pid reused within a
            // window) is another JVM: asked afresh. (The old one's full
            // thread names go with it; no request of it is still out.)
            if self.jvms.get(&pid).is_some_and(|j| j.gone && !j.pending) {
                self.jvms.remove(&pid);
            }
            self.jvms.entry(pid).or_insert(Jvm {
                sampled: false,
                pending: false,
                next: None,
                interval: FIRST_INTERVAL,
                warned: false,
                not_yet: None,
                answered: false,
                failed: None,
                gone: false,
                asked: None,
                cut_retry: CUT_RETRY_MIN,
                last: None,
                hotspot: None,
                names: ThreadNames::default(),
                names_next: None,
                names_interval: FIRST_INTERVAL,
            });
        }
    }

    /// `pid` was sampled; `hotspot` gives its libjvm's tables, if known.
    pub fn sampled(&mut self, pid: u32, hotspot: impl FnOnce() -> Option<HotSpotAt>) {
        if let Some(j) = self.jvms.get_mut(&pid) {
            j.sampled = true;
            if j.hotspot.is_none() {
                j.hotspot = hotspot();
            }
        }
    }

    /// A stack of `pid` was cut where the kernel had no unwind rule: if it
    /// is a JVM that answered before, its new methods are asked for soon
    /// (see [`CUT_RETRY_MIN`]), not at the next doubling.
    pub fn stack_cut(&mut self, pid: u32) {
        if let Some(j) = self
            .jvms
            .get_mut(&pid)
            .filter(|j| j.answered && !j.warned && !j.gone)
        {
            let soon = j.asked.map_or_else(Instant::now, |t| t + j.cut_retry);
            if j.next.is_none_or(|t| t > soon) {
                j.next = Some(soon);
            }
        }
    }

    /// `pid` exec'd or exited: no JVM any more (forgotten at the window's
    /// end, when a request still out has answered).
    pub fn gone(&mut self, pid: u32) {
        if let Some(j) = self.jvms.get_mut(&pid) {
            j.gone = true;
        }
    }

    /// Start the requests that are due (all of the sampled ones with
    /// `now_all`), and take the answers that arrived.
    pub fn tick(&mut self, now_all: bool) {
        let now = Instant::now();
        for (&pid, j) in self.jvms.iter_mut() {
            if !j.sampled
                || j.pending
                || j.warned
                || j.gone
                || !(now_all || j.next.is_none_or(|t| now >= t))
            {
                continue;
            }
            // Names with the request when they are due: as requests
            // start (0.5 s, 1 s, 2 s … apart, a minute at most), not with
            // the quick ones a cut stack asks for; and at a window's end.
            let with_names = now_all || j.names_next.is_none_or(|t| now >= t);
            if with_names {
                j.names_next = Some(now + j.names_interval);
                j.names_interval = (j.names_interval * 2).min(LONGEST_INTERVAL);
            }
            j.pending = true;
            j.asked = Some(now);
            j.next = Some(now + j.interval);
            j.interval = (j.interval * 2).min(LONGEST_INTERVAL);
            let tx = self.done_tx.clone();
            let hotspot = j.hotspot.clone();
            let spawned = std::thread::Builder::new()
                .name("sysprof-jvm".into())
                .spawn(move || {
                    let started = Instant::now();
                    let answer = ask(pid, hotspot, with_names);
                    let _ = tx.send((pid, answer, started.elapsed()));
                });
            if spawned.is_err() {
                j.pending = false;
            }
        }
        self.collect(None)
    }

    /// Results that arrived (waiting until `deadline` for all pending ones);
    /// failures are kept to be said at the window's end, once per JVM.
    fn collect(&mut self, deadline: Option<Instant>) {
        loop {
            let next = match deadline {
                Some(d) if self.jvms.values().any(|j| j.pending) => self
                    .done_rx
                    .recv_timeout(d.saturating_duration_since(Instant::now()))
                    .ok(),
                _ => self.done_rx.try_recv().ok(),
            };
            let Some((pid, result, took)) = next else {
                break;
            };
            let Some(j) = self.jvms.get_mut(&pid) else {
                continue;
            };
            j.pending = false;
            match result {
                Ok((frames, names)) => {
                    if let Some(names) = names {
                        j.names = names;
                    }
                    let held = (
                        frames.methods,
                        frames
                            .rows
                            .iter()
                            .fold(frames.base, |a, r| a.wrapping_add(u64::from(r.pc))),
                    );
                    j.cut_retry = cut_retry(j.cut_retry, j.last == Some(held), j.answered, took);
                    j.last = Some(held);
                    j.answered = true;
                    if !j.gone {
                        self.frames.push((pid, frames));
                    }
                }
                // Nothing was sent: asked again soon (a JVM installs its
                // handler a moment after it starts), without doubling.
                Err(AttachError::NotYet(e)) => {
                    j.not_yet = Some(e);
                    j.next = Some(Instant::now() + NOT_YET_RETRY);
                    j.interval = FIRST_INTERVAL;
                }
                // A JVM that could not be asked is not asked again: another
                // SIGQUIT that starts no listener would print a thread dump.
                Err(AttachError::Failed(e)) => {
                    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                        j.failed = Some(e.to_string());
                    }
                    j.warned = true;
                }
            }
        }
    }

    /// The full name of JVM `pid`'s thread `tid`, where the kernel's
    /// (`comm`, 15 bytes) is it cut: a name the JVM says that does not
    /// begin with what the kernel has is not taken.
    pub fn full_name(&self, pid: u32, tid: u32, comm: &str) -> Option<&str> {
        let names = match self.jvms.get(&pid) {
            Some(j) => &j.names,
            None => self.departed.get(&pid)?,
        };
        let full = names.get(&tid)?;
        (comm.len() == crate::bpf::abi::TASK_COMM_LEN - 1
            && full.len() > comm.len()
            && full.starts_with(comm))
        .then_some(full.as_str())
    }

    /// The compiled frames of the JVMs that answered since the last call.
    pub fn take_frames(&mut self) -> Vec<(u32, JitFrames)> {
        std::mem::take(&mut self.frames)
    }

    /// At a window's end: ask every sampled JVM once more and wait for the
    /// answers, at most `wait`.
    /// `names_compiled(pid)`: whether JVM `pid`'s compiled frames were named
    /// from its memory (what a JVM not asked still gets).
    pub fn refresh(&mut self, wait: Duration, names_compiled: impl Fn(u32) -> bool) -> Vec<String> {
        self.tick(true);
        self.collect(Some(Instant::now() + wait));
        let mut warnings = Vec::new();
        for (pid, j) in &mut self.jvms {
            if let Some(e) = j.failed.take() {
                warnings.push(if names_compiled(*pid) {
                    format!("JVM pid {pid}: not asked for its perf map ({e}): its compiled methods are named from its memory, but its stubs stay `[JIT] java` and its threads keep the kernel's 15-byte names")
                } else {
                    format!("JVM pid {pid}: its compiled methods stay unnamed: {e}")
                });
            }
        }
        // JVMs that are gone, and never were ready to be asked, say why.
        for (pid, j) in &self.jvms {
            if j.gone && !j.answered && !j.warned {
                if let Some(e) = &j.not_yet {
                    warnings.push(if names_compiled(*pid) {
                        format!("JVM pid {pid}: not asked for its perf map ({e}): its compiled methods are named from its memory, but its stubs stay `[JIT] java` and its threads keep the kernel's 15-byte names")
                    } else {
                        format!("JVM pid {pid}: its compiled methods stay unnamed: {e}")
                    });
                }
            }
        }
        self.departed.clear();
        for (&pid, j) in self.jvms.iter_mut() {
            if j.gone && !j.pending {
                self.departed.insert(pid, std::mem::take(&mut j.names));
            }
        }
        self.jvms.retain(|_, j| !j.gone || j.pending);
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JVM whose compiler makes new code is asked again within 20 times
    /// what a request costs it (never sooner than the floor); one whose
    /// answers bring nothing new is asked ever less often, up to a minute.
    #[test]
    fn cut_retry_follows_the_cost_and_backs_off() {
        let ms = Duration::from_millis;
        assert_eq!(
            cut_retry(ms(25), false, false, ms(41)),
            CUT_RETRY_MIN,
            "the first request started the listener"
        );
        assert_eq!(cut_retry(ms(25), false, true, ms(2)), ms(40));
        assert_eq!(cut_retry(ms(25), false, true, ms(1)), CUT_RETRY_MIN);
        assert_eq!(cut_retry(ms(40), true, true, ms(2)), ms(80));
        assert_eq!(cut_retry(ms(50_000), true, true, ms(2)), LONGEST_INTERVAL);
        assert_eq!(cut_retry(ms(25), false, true, ms(5_000)), LONGEST_INTERVAL);
    }
}
