//! Samples as they arrive: their user stacks unwound (in the kernel, or
//! here from a copy), runtime frames merged in, interned into the window's
//! stack tree with the sample's columns.
//!
//! In: the sampler's records ([`SampleView`]). Out: the window's sample
//! columns and raw stack tree; stats of what could not be unwound or read;
//! a process whose interpreter is not read yet looked at again. The
//! unwinding steps serve the tracer's stack records too ([`super::events`]).

use super::*;
use crate::model::stack_tree::StackTree;

impl Collector {
    /// A user stack the kernel unwound, into `self.unwound` with a
    /// truncation marker where it stopped early; where the kernel handed over
    /// (the process's tables not loaded yet), the copied rest is unwound here.
    pub(super) fn unwind_in_kernel(&mut self, pid: u32, k: &KernelUnwound<'_>) {
        self.unwound.clear();
        self.unwound.extend_from_slice(k.frames);
        let Some(u) = self.followers.unwinders.as_mut() else {
            return;
        };
        u.kernel_walked(pid, k.end);
        // The kernel sends registers and a copy only where it hands over. At
        // an address its entry did not cover: code mapped since, or no code
        // (then the walk ends there, as the kernel said); the leaf is kept.
        let handover = k.handover.filter(|(regs, _)| {
            k.end != abi::UNWIND_END_BAD_ADDRESS || k.frames.is_empty() || u.is_code(pid, regs.ip)
        });
        if let Some((regs, stack)) = handover {
            // As deep as the kernel walks: a copy of 32 KiB may hold hundreds of small frames.
            let end = u.unwind(
                &self.binaries,
                pid,
                regs,
                stack,
                &mut self.unwound,
                abi::UNWIND_MAX_FRAMES.max(MAX_USER_FRAMES + k.frames.len()),
            );
            push_cut(&mut self.unwound, end);
            u.go_whole_at_root(pid, &mut self.unwound);
            return;
        }
        // A walk that ended in a program's entry function (hand-written
        // `_start` without CFI) reached the bottom whatever it read below.
        let at_entry = k
            .frames
            .last()
            .is_some_and(|&a| k.frames.len() > 1 && u.is_entry(pid, a));
        let end = if at_entry {
            StackEnd::Root
        } else {
            StackEnd::from_abi(k.end)
        };
        // Counted as the copy unwinder counts its own stacks.
        u.count_kernel_end(end);
        push_cut(&mut self.unwound, end);
        // A walk goes on past Go's first frame: the stack is whole there.
        u.go_whole_at_root(pid, &mut self.unwound);
    }

    /// Whether a kernel stack is a thread's exit (`do_exit`): from there it
    /// never returns to user mode, so the user registers it entered the
    /// kernel with belong to its last system call.
    pub(super) fn is_exiting(&self, kstack: &[u64]) -> bool {
        kstack
            .iter()
            .any(|&a| self.kernel.lookup(a).is_some_and(|s| s.name == "do_exit"))
    }

    /// A sample of an exiting thread whose user stack could not be read (its
    /// memory being freed): the stack the thread had at a switch-out with the
    /// same user registers, if one is kept. Only at exit: the registers are
    /// then those of the thread's last system call, and a switch-out with the
    /// same ones was in it (elsewhere two calls from different callers could
    /// share an ip and sp, and the stack would be another call's).
    pub(super) fn recover_unreadable(&mut self, tid: u32, leaf_regs: Option<Regs>) {
        let Some(regs) = leaf_regs else { return };
        let cut = self.unwound.last().copied() == StackEnd::Unreadable.raw_key();
        if let Some(user) = self.stacks.user_stack_at(tid, regs).filter(|_| cut) {
            self.unwound.clear();
            self.unwound.extend_from_slice(user);
            if let Some(u) = self.followers.unwinders.as_mut() {
                u.recovered_from_switch();
            }
        }
    }

    /// Unwind a user stack copied by the kernel into `self.unwound`, leaf
    /// first, ending with a truncation marker when it stopped early.
    pub(super) fn unwind_copy(&mut self, pid: u32, regs: Regs, stack: &[u8]) {
        self.unwound.clear();
        let Some(u) = self.followers.unwinders.as_mut() else {
            return;
        };
        let end = u.unwind(
            &self.binaries,
            pid,
            regs,
            stack,
            &mut self.unwound,
            MAX_USER_FRAMES,
        );
        push_cut(&mut self.unwound, end);
        if let Some(u) = self.followers.unwinders.as_ref() {
            u.go_whole_at_root(pid, &mut self.unwound);
        }
    }

    /// End the unwound user stack of `pid` with a root frame saying its
    /// Python frames were not read, when it runs a CPython of a version this
    /// build does not read (a warning says which): the stack then does not
    /// pass for one of a program without Python.
    pub(super) fn say_python_unread(&mut self, pid: u32) {
        if !self.unwound.is_empty()
            && self
                .followers
                .unwinders
                .as_ref()
                .is_some_and(|u| u.python_unread(pid))
        {
            self.unwound.push(frames::PY_NOT_READ_KEY);
        }
    }

    /// Intern a raw stack: `pid` root, then the user frames (leaf first in
    /// `user`, stored outermost first), then the kernel frames (leaf first).
    pub(super) fn intern_raw(
        window: &mut WindowData,
        pid: u32,
        user: &[u64],
        kernel: &[u64],
    ) -> NodeIndex {
        Self::intern_thread_raw(window, pid, 0, user, kernel)
    }

    /// [`Self::intern_raw`] for thread `tid` (0: none; its event stacks
    /// under [`event_path`]), whose last new stack's path is kept for its next.
    ///
    /// A stack seen before in this window is found by one lookup of its
    /// whole hash and a walk up its path, not a lookup per frame: beside
    /// pgbench that lookup per frame was a tenth of the event loop's CPU.
    /// A new one shares its outer frames with the thread's last new stack
    /// (the same loop, a different leaf): those nodes are taken from that
    /// path, and only the frames past where the two part are looked up.
    pub(super) fn intern_thread_raw(
        window: &mut WindowData,
        pid: u32,
        tid: u32,
        user: &[u64],
        kernel: &[u64],
    ) -> NodeIndex {
        let is_user = |a: &&u64| **a != 0 && **a < KERNEL_ADDR_MIN;
        let is_kernel = |a: &&u64| **a >= KERNEL_ADDR_MIN;
        use std::hash::Hasher;
        let mut hasher = rustc_hash::FxHasher::default();
        hasher.write_u32(pid);
        for &addr in user.iter().filter(is_user) {
            hasher.write_u64(addr);
        }
        // No separator: user and kernel addresses never overlap.
        for &addr in kernel.iter().filter(is_kernel) {
            hasher.write_u64(addr);
        }
        let hash = hasher.finish();
        let raw = &mut window.raw;
        if let Some(&node) = window.raw_paths.get(&hash) {
            let mut at = node;
            let mut same = true;
            // Up from the leaf: kernel frames leaf first, user frames leaf
            // first, the pid at the root.
            for &addr in kernel
                .iter()
                .filter(is_kernel)
                .chain(user.iter().filter(is_user))
            {
                if at == NO_PARENT || at as usize >= raw.len() || raw.key(at) != addr {
                    same = false;
                    break;
                }
                at = raw.parent(at);
            }
            if same
                && at != NO_PARENT
                && (at as usize) < raw.len()
                && raw.key(at) == pid as u64
                && raw.parent(at) == NO_PARENT
            {
                return node;
            }
        }
        let frames = user
            .iter()
            .rev()
            .filter(is_user)
            .chain(kernel.iter().rev().filter(is_kernel))
            .copied();
        let room = window.thread_paths.len() < MAX_THREAD_PATHS;
        let node = match window.thread_paths.get_mut(&tid) {
            Some(last) if tid != 0 => last.extend(raw, pid, frames),
            _ if tid != 0 && room => {
                let mut last = ThreadPath::default();
                let node = last.extend(raw, pid, frames);
                window.thread_paths.insert(tid, last);
                node
            }
            _ => {
                let mut node = raw.child(NO_PARENT, pid as u64);
                for addr in frames {
                    node = raw.child(node, addr);
                }
                node
            }
        };
        window.raw_paths.insert(hash, node);
        node
    }

    /// One cpu-clock sample. Allocation-free once the stack tree holds the stack.
    pub fn handle_sample(&mut self, s: &SampleView<'_>) {
        self.samples_total += 1;
        if s.time_ns < self.range_start_ns {
            self.window.stats.samples += 1;
            return;
        }
        if self.tracing_start_ns.is_some_and(|t| s.time_ns < t) {
            self.sampled_before_tracing
                .entry(s.tid)
                .or_default()
                .push(s.time_ns);
        }
        let w = &mut self.window;
        w.stats.samples += 1;
        if s.flags & SAMPLE_FLAG_KSTACK_FAILED != 0 {
            w.stats.kernel_stack_failures += 1;
        }
        if s.flags & SAMPLE_FLAG_USTACK_FAILED != 0 {
            w.stats.user_stack_failures += 1;
        }
        if s.flags & abi::SAMPLE_FLAG_HANDOVER_SKIPPED != 0 {
            w.stats.handovers_skipped += 1;
        }
        let node = match s.user {
            UserStack::KernelUnwound(k) => {
                self.unwind_in_kernel(s.pid, &k);
                let end = StackEnd::from_abi(k.end);
                if end == StackEnd::NoUnwindInfo {
                    // In a JVM: most often a method compiled since its last
                    // answer, whose frame size the kernel lacks.
                    self.followers.readers.jvms.stack_cut(s.pid);
                }
                if end == StackEnd::Unreadable && self.is_exiting(s.kstack) {
                    self.recover_unreadable(s.tid, k.leaf);
                }
                match self.followers.readers.merge(
                    self.followers.unwinders.as_ref(),
                    s.pid,
                    &self.unwound,
                    crate::runtimes::chain::KernelChain::from_walk(k.python, k.python_end),
                    &mut self.window.runtime_frames,
                    &mut self.merged,
                ) {
                    Some(merged) => {
                        if merged == Merged::Python {
                            self.followers.readers.python_threads.sampled(s.pid);
                        }
                        Self::intern_thread_raw(
                            &mut self.window,
                            s.pid,
                            s.tid,
                            &self.merged,
                            s.kstack,
                        )
                    }
                    None => {
                        self.say_python_unread(s.pid);
                        Self::intern_thread_raw(
                            &mut self.window,
                            s.pid,
                            s.tid,
                            &self.unwound,
                            s.kstack,
                        )
                    }
                }
            }
            UserStack::Copy { regs, stack } if self.followers.unwinders.is_some() => {
                self.unwind_copy(s.pid, regs, stack);
                self.say_python_unread(s.pid);
                Self::intern_thread_raw(&mut self.window, s.pid, s.tid, &self.unwound, s.kstack)
            }
            user => {
                Self::intern_thread_raw(&mut self.window, s.pid, s.tid, user.frames(), s.kstack)
            }
        };
        let w = &mut self.window;
        w.samples.time_ns.push(s.time_ns);
        w.samples.pid.push(s.pid);
        w.samples.tid.push(s.tid);
        w.samples.cpu.push(s.cpu);
        w.samples.runtime_ns.push(s.sum_exec_runtime);
        w.samples
            .runtime_clock_ns
            .push(runtime_clock(s.sum_exec_runtime, s.exec_start, s.time_ns));
        w.samples.raw_stack.push(node);
        self.recent_pids.insert(s.pid);
        let unwinders = self.followers.unwinders.as_ref();
        self.followers.readers.jvms.sampled(s.pid, || {
            unwinders
                .and_then(|u| u.java(s.pid))
                .map(|j| (j.symbols.clone(), j.base))
        });
        let mut comm = [0u8; TASK_COMM_LEN];
        comm[..s.comm.len()].copy_from_slice(s.comm);
        if w.sample_comm.get(&s.tid) != Some(&comm) {
            w.sample_comm.insert(s.tid, comm);
        }
        self.look_for_interpreter(s.pid, s.time_ns);
    }

    /// A sample or stack of JVM `pid` whose interpreter the kernel's entry
    /// lacks: look for it (every 20 ms while it is not generated yet).
    pub(super) fn look_for_interpreter(&mut self, pid: u32, now_ns: u64) {
        let Some(u) = self.followers.unwinders.as_mut() else {
            return;
        };
        let Some(java) = u.java(pid).filter(|j| j.interpreter.is_none()).cloned() else {
            return;
        };
        if let Some((range, code)) = self
            .followers
            .readers
            .java
            .find_interpreter(pid, &java, now_ns)
        {
            u.set_java_interpreter(pid, range, code);
        }
        for w in std::mem::take(&mut self.followers.readers.java.failures) {
            self.warn(w);
        }
    }
}

/// The path key of `tid`'s event stacks (waits, wakes, requests): kept
/// apart from its samples' (where it ran), as the two part near the root.
pub(super) fn event_path(tid: u32) -> u32 {
    match tid {
        0 => 0,
        tid => tid | 1 << 31,
    }
}

/// Paths a window keeps, a thread's samples' and its events' apart (a fork
/// storm's others intern frame by frame): 12 bytes a frame each, ~0.5 KiB for a usual
/// stack, a few KiB for the deepest.
const MAX_THREAD_PATHS: usize = 1024;

/// A thread's last new stack in its window's raw tree: the addresses from
/// the root down and the node of each.
#[derive(Debug, Default)]
pub(super) struct ThreadPath {
    pid: u32,
    /// The pid's root node, once known.
    root: Option<NodeIndex>,
    addrs: Vec<u64>,
    nodes: Vec<NodeIndex>,
}

impl ThreadPath {
    /// Intern `frames` (root first) under `pid` in `raw`, the frames this
    /// path shares from its root taken from it; it becomes their path.
    fn extend(
        &mut self,
        raw: &mut StackTree,
        pid: u32,
        frames: impl Iterator<Item = u64>,
    ) -> NodeIndex {
        if self.pid != pid || self.root.is_none() {
            self.pid = pid;
            self.root = Some(raw.child(NO_PARENT, pid as u64));
            self.addrs.clear();
            self.nodes.clear();
        }
        let mut node = self.root.unwrap_or(NO_PARENT);
        let mut depth = 0;
        let mut shared = true;
        for addr in frames {
            if shared && self.addrs.get(depth) == Some(&addr) {
                node = self.nodes[depth];
            } else {
                if shared {
                    shared = false;
                    self.addrs.truncate(depth);
                    self.nodes.truncate(depth);
                }
                node = raw.child(node, addr);
                self.addrs.push(addr);
                self.nodes.push(node);
            }
            depth += 1;
        }
        self.addrs.truncate(depth);
        self.nodes.truncate(depth);
        node
    }
}
