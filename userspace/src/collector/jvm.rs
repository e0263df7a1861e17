//! Asking sampled JVMs for their perf maps while they run, so their compiled
//! methods have names (see [`crate::symbolize::jvm`]).
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
//! prologue ([`crate::unwind::jvm`]): the frame sizes the kernel's walker
//! needs to go on below compiled Java frames, handed to the unwinders.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::symbolize::jvm::AttachError;
use crate::unwind::jvm::JitFrames;

/// What a request gives: the JVM's compiled frames, or why it was not asked.
type Answer = (u32, Result<JitFrames, AttachError>);

/// The first interval between two requests to one JVM, and the longest.
const FIRST_INTERVAL: Duration = Duration::from_millis(500);
const LONGEST_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a JVM not ready to be asked (no SIGQUIT handler yet) is tried again.
const NOT_YET_RETRY: Duration = Duration::from_millis(100);
/// How soon after its last request a JVM whose stacks are cut in code the
/// kernel has no frame size for is asked again.
const CUT_RETRY: Duration = Duration::from_millis(250);

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
    /// The process exec'd or exited: said and forgotten at the window's end.
    gone: bool,
    /// When it was last asked.
    asked: Option<Instant>,
}

/// The JVMs of the machine (or of the recorded processes) and their requests.
#[derive(Debug)]
pub(super) struct Jvms {
    jvms: FxHashMap<u32, Jvm>,
    done_tx: Sender<Answer>,
    done_rx: Receiver<Answer>,
    /// Compiled frames that arrived, for the unwinders ([`Jvms::take_frames`]).
    frames: Vec<(u32, JitFrames)>,
}

impl Default for Jvms {
    fn default() -> Self {
        let (done_tx, done_rx) = channel();
        Jvms { jvms: FxHashMap::default(), done_tx, done_rx, frames: Vec::new() }
    }
}

/// Ask JVM `pid` for its perf map, then read its compiled methods' frames.
fn ask(pid: u32) -> Result<JitFrames, AttachError> {
    crate::symbolize::jvm::write_perf_map(pid)?;
    let (uid, ns_pid) = match crate::binaries::perfmap::process_identity(pid) {
        Some((u, n)) => (Some(u), n),
        None => (None, pid),
    };
    // The map is checked as any perf map is (owner, regular file, size).
    let frames = match crate::binaries::perfmap::load(uid, ns_pid, &format!("/proc/{pid}/root")) {
        Ok(map) => crate::unwind::jvm::frames(&map, |addr, buf| crate::sys::memory::read_process(pid, addr, buf).is_ok()),
        Err(_) => JitFrames::default(),
    };
    Ok(frames)
}

impl Jvms {
    /// `pid` mapped `path`: a JVM if it is HotSpot's library.
    pub(super) fn mapped(&mut self, pid: u32, path: &str) {
        if path.rsplit('/').next() == Some("libjvm.so") {
            self.jvms.entry(pid).or_insert(Jvm { sampled: false, pending: false, next: None, interval: FIRST_INTERVAL, warned: false, not_yet: None, answered: false, gone: false, asked: None });
        }
    }

    /// `pid` was sampled.
    pub(super) fn sampled(&mut self, pid: u32) {
        if let Some(j) = self.jvms.get_mut(&pid) {
            j.sampled = true;
        }
    }

    /// A stack of `pid` was cut where the kernel had no unwind rule: if it
    /// is a JVM that answered before, its new methods are asked for soon
    /// (at most every [`CUT_RETRY`]), not at the next doubling.
    pub(super) fn stack_cut(&mut self, pid: u32) {
        if let Some(j) = self.jvms.get_mut(&pid).filter(|j| j.answered && !j.warned && !j.gone) {
            let soon = j.asked.map_or_else(Instant::now, |t| t + CUT_RETRY);
            if j.next.is_none_or(|t| t > soon) {
                j.next = Some(soon);
            }
        }
    }

    /// `pid` exec'd or exited: no JVM any more (forgotten at the window's
    /// end, when a request still out has answered).
    pub(super) fn gone(&mut self, pid: u32) {
        if let Some(j) = self.jvms.get_mut(&pid) {
            j.gone = true;
        }
    }

    /// Start the requests that are due (all of the sampled ones with
    /// `now_all`); returns the warnings of those that failed since.
    pub(super) fn tick(&mut self, now_all: bool) -> Vec<String> {
        let now = Instant::now();
        for (&pid, j) in self.jvms.iter_mut() {
            if !j.sampled || j.pending || j.warned || j.gone || !(now_all || j.next.is_none_or(|t| now >= t)) {
                continue;
            }
            j.pending = true;
            j.asked = Some(now);
            j.next = Some(now + j.interval);
            j.interval = (j.interval * 2).min(LONGEST_INTERVAL);
            let tx = self.done_tx.clone();
            let spawned = std::thread::Builder::new().name("sysprof-jvm".into()).spawn(move || {
                let _ = tx.send((pid, ask(pid)));
            });
            if spawned.is_err() {
                j.pending = false;
            }
        }
        self.collect(None)
    }

    /// Results that arrived (waiting until `deadline` for all pending ones):
    /// the warnings of failures, once per JVM.
    fn collect(&mut self, deadline: Option<Instant>) -> Vec<String> {
        let mut warnings = Vec::new();
        loop {
            let next = match deadline {
                Some(d) if self.jvms.values().any(|j| j.pending) => self.done_rx.recv_timeout(d.saturating_duration_since(Instant::now())).ok(),
                _ => self.done_rx.try_recv().ok(),
            };
            let Some((pid, result)) = next else { break };
            let Some(j) = self.jvms.get_mut(&pid) else { continue };
            j.pending = false;
            match result {
                Ok(frames) => {
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
                        warnings.push(format!("JVM pid {pid}: its compiled methods stay unnamed: {e}"));
                    }
                    j.warned = true;
                }
            }
        }
        warnings
    }

    /// The compiled frames of the JVMs that answered since the last call.
    pub(super) fn take_frames(&mut self) -> Vec<(u32, JitFrames)> {
        std::mem::take(&mut self.frames)
    }

    /// At a window's end: ask every sampled JVM once more and wait for the
    /// answers, at most `wait`.
    pub(super) fn refresh(&mut self, wait: Duration) -> Vec<String> {
        let mut warnings = self.tick(true);
        warnings.extend(self.collect(Some(Instant::now() + wait)));
        // JVMs that are gone, and never were ready to be asked, say why.
        for (pid, j) in &self.jvms {
            if j.gone && !j.answered && !j.warned {
                if let Some(e) = &j.not_yet {
                    warnings.push(format!("JVM pid {pid}: its compiled methods stay unnamed: {e}"));
                }
            }
        }
        self.jvms.retain(|_, j| !j.gone || j.pending);
        warnings
    }
}
