//! The tracer's records as they arrive: stack records kept per thread for
//! the records that follow, off-CPU intervals, folded short waits, block
//! I/O requests, threads' ends and the kernel's per-thread state at a stop.
//!
//! In: [`EventRecord`]s. Out: the window's off-CPU intervals, waits and
//! requests with their stacks resolved ([`super::stacks`]); the stats of
//! what arrived and what was missing.

use super::samples::event_path;
use super::*;

impl Collector {
    /// One record of the scheduler/I-O tracer's ring, `bytes` long.
    pub fn handle_event_bytes(&mut self, e: EventRecord<'_>, bytes: usize) {
        self.window.stats.tracer_bytes += bytes as u64;
        self.handle_event(e);
    }

    /// One record of the scheduler/I-O tracer's ring.
    pub fn handle_event(&mut self, e: EventRecord<'_>) {
        match e {
            EventRecord::Stack(e, view) => self.handle_stack(e, view),
            EventRecord::OffCpu(e) => self.handle_offcpu(e),
            EventRecord::Io(e) => self.handle_io(e),
            EventRecord::Folded(e) => self.handle_folded(e),
            EventRecord::ThreadEnd(e) => self.handle_thread_end(e),
        }
    }

    /// A thread's stacks at one place: unwound now (with the mappings its
    /// process has now), the tracing path cut, kept for the events to come.
    fn handle_stack(&mut self, e: &StackEvent, view: StackView<'_>) {
        self.window.stats.stack_records += 1;
        if e.flags & (STACK_KSTACK_FAILED | STACK_USTACK_FAILED) != 0 {
            self.window.stats.stack_read_failures += 1;
        }
        if e.flags & abi::STACK_HANDOVER_SKIPPED != 0 {
            self.window.stats.handovers_skipped += 1;
        }
        let mut runtime_frames: Box<[_]> = Box::new([]);
        let user: Box<[u64]> = match view.user {
            UserStack::KernelUnwound(k) => {
                // What the kernel walked; or, where it handed over, the copy
                // unwound here (from the leaf) under the runtimes' chain it read.
                self.unwind_in_kernel(e.pid, &k);
                // Its runtimes' frames keyed in a table of its own: the
                // record outlives the window.
                let mut own = std::mem::take(&mut self.record_frames);
                own.clear();
                let merged = self.followers.readers.merge(
                    self.followers.unwinders.as_ref(),
                    e.pid,
                    &self.unwound,
                    crate::runtimes::chain::KernelChain::from_walk(k.python, k.python_end),
                    &mut own,
                    &mut self.merged,
                );
                let user = match merged {
                    Some(_) => {
                        runtime_frames = own.entries();
                        self.merged.as_slice().into()
                    }
                    None => {
                        self.say_python_unread(e.pid);
                        self.unwound.as_slice().into()
                    }
                };
                self.record_frames = own;
                user
            }
            UserStack::Copy { regs, stack } => {
                self.unwind_copy(e.pid, regs, stack);
                self.say_python_unread(e.pid);
                self.unwound.as_slice().into()
            }
            UserStack::Frames(frames) => frames.into(),
        };
        // A JVM that sleeps is seldom sampled: its switch-outs look for its interpreter too.
        self.look_for_interpreter(e.pid, crate::sys::clock::monotonic_ns());
        let kernel: Box<[u64]> = self.kernel.cut_tracing(view.kstack).into();
        let interrupt = self.kernel.interrupt_part(&kernel);
        let user_regs = Regs {
            ip: e.user_ip,
            sp: e.user_sp,
            bp: e.user_bp,
        };
        self.stacks.insert(
            e.pid,
            e.tid,
            e.slot,
            StoredStack {
                id: e.id,
                user,
                kernel,
                user_regs,
                interrupt,
                runtime_frames,
                interned: Default::default(),
            },
        );
    }

    /// The raw stack of stack record `id` of `tid`, interned under `pid`;
    /// a "not available" frame when the record was lost (id 0) or is no
    /// longer kept (counted).
    fn stack_ref(&mut self, pid: u32, tid: u32, id: u64) -> NodeIndex {
        match self.stacks.get(tid, id) {
            Some(s) => match s.interned.get() {
                Some((w, p, node)) if w == self.windows_finished && p == pid => node,
                _ if !s.runtime_frames.is_empty() => {
                    // Its runtimes' keys are the record's: this window's instead.
                    self.scratch.clear();
                    for &k in s.user.iter() {
                        let frame = frames::is_runtime_key(k)
                            .then(|| {
                                s.runtime_frames
                                    .get((k & !frames::RUNTIME_KEY_BASE) as usize)
                            })
                            .flatten();
                        self.scratch.push(match frame {
                            Some((f, kind)) => self.window.runtime_frames.key_as(f, *kind),
                            None => k,
                        });
                    }
                    let node = Self::intern_thread_raw(
                        &mut self.window,
                        pid,
                        event_path(tid),
                        &self.scratch,
                        &s.kernel,
                    );
                    s.interned.set(Some((self.windows_finished, pid, node)));
                    node
                }
                _ => {
                    let node = Self::intern_thread_raw(
                        &mut self.window,
                        pid,
                        event_path(tid),
                        &s.user,
                        &s.kernel,
                    );
                    s.interned.set(Some((self.windows_finished, pid, node)));
                    node
                }
            },
            None => {
                if id != 0 {
                    self.window.stats.stacks_not_kept += 1;
                }
                let root = self.window.raw.child(NO_PARENT, pid as u64);
                self.window
                    .raw
                    .child(root, StackEnd::NotAvailable.raw_key().expect("a cut"))
            }
        }
    }

    /// One off-CPU interval.
    pub fn handle_offcpu(&mut self, e: &OffCpuEvent) {
        self.window.stats.off_cpu_intervals += 1;
        if e.flags & abi::OFFCPU_END_INFERRED != 0 {
            self.window.stats.off_cpu_end_inferred += 1;
        }
        let stack = self.stack_ref(e.pid, e.tid, e.stack_id);
        let waker = if e.wake_ns == 0 {
            None
        } else {
            let stored = self.stacks.get(e.waker_tid, e.waker_stack_id);
            let interrupt = stored.and_then(|s| s.interrupt);
            if self.window.waker_comm.len() < window::MAX_WAKER_NAMES {
                self.window.waker_comm.insert(e.waker_tid, e.waker_comm);
            }
            let waker = Waker {
                pid: e.waker_pid,
                tid: e.waker_tid,
                name: crate::model::short_name::task_name(&e.waker_comm),
                // The stack tells an interrupt from the task it
                // interrupted, and which kind. Without one (lost, or not
                // taken: a wakeup before the switch-out), the tracer's
                // judgment says task or interrupt; without that, say so.
                interrupt: match stored {
                    Some(_) => interrupt.map(|(kind, _)| kind),
                    None if e.flags & abi::OFFCPU_WAKER_TASK != 0 => None,
                    None => Some(InterruptKind::Unknown),
                },
            };
            let node = match (stored, interrupt) {
                // An interrupt's stack is its own frames only: below its
                // entry lies whatever task it happened to interrupt.
                (Some(s), Some((_, end))) => {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(&s.kernel[..end]);
                    Self::intern_raw(&mut self.window, e.waker_pid, &[], &self.scratch)
                }
                _ => self.stack_ref(e.waker_pid, e.waker_tid, e.waker_stack_id),
            };
            Some((waker, node))
        };
        self.window.off_cpu.push(OffCpuRecord {
            start_ns: e.start_ns,
            end_ns: e.end_ns,
            wake_ns: e.wake_ns,
            landing_ns: e.landing_ns as u64,
            pid: e.pid,
            tid: e.tid,
            cpu_out: e.cpu_out,
            cpu_in: e.cpu_in,
            reason: OffCpuReason::from_abi(e.state),
            stack,
            waker,
            comm: e.comm,
            start_unseen: e.flags & abi::OFFCPU_START_UNSEEN != 0,
        });
    }

    /// One block I/O request.
    pub fn handle_io(&mut self, e: &IoEvent) {
        self.window.stats.io_requests += 1;
        let stack = self.stack_ref(e.pid, e.tid, e.stack_id);
        self.window.io.push(IoRecord {
            pid: e.pid,
            tid: e.tid,
            dev: e.dev,
            sector: e.sector,
            start_ns: e.start_ns,
            issue_ns: e.issue_ns,
            done_ns: e.done_ns,
            bytes: e.bytes,
            error: e.error,
            op: IoOp::from_abi(e.op),
            flags: e.flags,
            stack,
        });
    }

    /// Short off-CPU waits of a thread, summed per reason.
    pub fn handle_folded(&mut self, e: &FoldedEvent) {
        self.window.stats.off_cpu_folded += e.count.iter().map(|&c| c as u64).sum::<u64>();
        let waker = match e.waker_kind {
            abi::FOLD_WAKER_TASK => ShortWaker::Task {
                pid: e.waker_pid,
                tid: e.waker_tid,
            },
            abi::FOLD_WAKER_IRQ => ShortWaker::Interrupt,
            abi::FOLD_WAKER_MIXED => ShortWaker::Several,
            abi::FOLD_WAKER_UNSEEN => ShortWaker::Unseen,
            _ => ShortWaker::Nobody,
        };
        // Where its waits left the CPU, when one place (a kept stack; one
        // no longer kept is counted and drawn as such).
        let stack = if e.stack_id != 0 {
            self.stack_ref(e.pid, e.tid, e.stack_id)
        } else {
            NO_PARENT
        };
        self.window.folded.push(FoldedRecord {
            stack,
            pid: e.pid,
            tid: e.tid,
            first_ns: e.first_ns,
            last_ns: e.last_ns,
            ns: e.ns,
            count: e.count.iter().sum(),
            wait_ns: e.wait_ns,
            landing_ns: e.landing_ns as u64,
            delay_ns: e.delay_ns as u64,
            by_place: e.flags & abi::FOLDED_BY_PLACE != 0,
            waker,
        });
    }

    /// A thread's last switch, with its switch totals.
    pub fn handle_thread_end(&mut self, e: &ThreadEndEvent) {
        self.window.switch_totals.push(*e);
        self.stacks.thread_ended(e.tid, e.time_ns);
    }

    /// The tracer's per-thread states at the end of a recording: switch
    /// totals of the live threads, their folded waits not sent yet, and
    /// their intervals still open at `end_ns` (closed there, so off-CPU
    /// time adds up).
    pub fn handle_thread_states(
        &mut self,
        states: &[(u32, KernelThreadState)],
        place_runs: &[(u32, abi::PlaceRuns)],
        end_ns: u64,
    ) {
        // Runs of one place's waits: a live thread's while its state claims
        // them (an entry left by a tid's earlier thread, whose death was not
        // seen, is not its), a thread's that died after the ring's last read
        // with the pid they were kept with; none begun after the end. A run
        // that goes on past the end (these are read after the stop) keeps
        // the share of its sums before it (`window::clip_to_range`).
        let has_runs: rustc_hash::FxHashMap<u32, bool> = states
            .iter()
            .map(|(tid, st)| (*tid, st.has_place_runs != 0))
            .collect();
        for (tid, runs) in place_runs {
            if has_runs.get(tid) == Some(&false) {
                continue;
            }
            for run in runs.r.iter().filter(|r| r.count > 0 && r.first_ns < end_ns) {
                self.handle_folded(&run.to_event(runs.pid, *tid));
            }
        }
        for (tid, st) in states {
            self.window.switch_totals.push(ThreadEndEvent {
                kind: abi::RECORD_THREAD_END,
                pid: st.pid,
                tid: *tid,
                _pad: 0,
                time_ns: u64::MAX,
                voluntary: st.voluntary,
                involuntary: st.involuntary,
            });
            // The thread's run of short waits, and of waits an interrupt
            // woke, over one span: not this recording's if begun after its
            // end (it was drawn as a marker of no length at the end, holding
            // all its waits: up to 114 µs of them beside pgbench).
            let run_in_range = st.short_first < end_ns;
            if run_in_range && st.short_count.iter().any(|&c| c > 0) {
                self.handle_folded(&FoldedEvent {
                    kind: abi::RECORD_FOLDED,
                    pid: st.pid,
                    tid: *tid,
                    delay_ns: 0,
                    first_ns: st.short_first,
                    last_ns: st.short_last,
                    ns: st.short_ns,
                    count: st.short_count,
                    wait_ns: st.short_wait_ns,
                    waker_pid: st.short_waker_pid,
                    waker_tid: st.short_waker_tid,
                    waker_kind: st.short_waker_kind,
                    landing_ns: st.short_land_ns.min(u32::MAX as u64) as u32,
                    stack_id: st.short_stack_id,
                    flags: 0,
                    _pad: 0,
                });
            }
            if run_in_range && st.irq_count.iter().any(|&c| c > 0) {
                // The run's waits an interrupt woke, over the same span.
                self.handle_folded(&FoldedEvent {
                    kind: abi::RECORD_FOLDED,
                    pid: st.pid,
                    tid: *tid,
                    delay_ns: 0,
                    first_ns: st.short_first,
                    last_ns: st.short_last,
                    ns: [0, st.irq_ns[0], st.irq_ns[1], 0],
                    count: [0, st.irq_count[0], st.irq_count[1], 0],
                    wait_ns: st.irq_wait_ns,
                    waker_pid: 0,
                    waker_tid: 0,
                    waker_kind: abi::FOLD_WAKER_IRQ,
                    landing_ns: st.irq_land_ns.min(u32::MAX as u64) as u32,
                    stack_id: st.irq_stack_id,
                    flags: 0,
                    _pad: 0,
                });
            }
            if st.off_ts != 0 && st.off_ts < end_ns {
                // As the tracer's close_interval decides: a wakeup of this
                // interval, not of an earlier one nor after the end.
                let waker = st.wake_ts >= st.off_ts && st.wake_ts != 0 && st.wake_ts <= end_ns;
                // And, as it says too, whether the waker ran as a task or
                // an interrupt (without its stack, else "unknown").
                let waker_kind = match (waker, st.waker_irq != 0) {
                    (false, _) => 0,
                    (true, true) => abi::OFFCPU_WAKER_IRQ,
                    (true, false) => abi::OFFCPU_WAKER_TASK,
                };
                self.handle_offcpu(&OffCpuEvent {
                    kind: abi::RECORD_OFFCPU,
                    state: st.off_state,
                    start_ns: st.off_ts,
                    end_ns,
                    wake_ns: if waker { st.wake_ts } else { 0 },
                    pid: st.pid,
                    tid: *tid,
                    cpu_out: st.off_cpu,
                    cpu_in: st.off_cpu,
                    waker_pid: if waker { st.waker_pid } else { 0 },
                    waker_tid: if waker { st.waker_tid } else { 0 },
                    stack_id: st.stack_id,
                    waker_stack_id: if waker { st.waker_stack_id } else { 0 },
                    comm: [0; TASK_COMM_LEN],
                    waker_comm: st.waker_comm,
                    // An inferred end's flag is set only as its interval
                    // closes: one seen open here is not that interval's.
                    flags: (st.off_flags & !abi::OFFCPU_END_INFERRED) | waker_kind,
                    landing_ns: if waker {
                        st.landing(end_ns).min(u32::MAX as u64) as u32
                    } else {
                        0
                    },
                });
            }
        }
    }
}
