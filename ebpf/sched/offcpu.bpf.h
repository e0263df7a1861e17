/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/offcpu.bpf.h: context switches and the off-CPU intervals they
 * open and close (on_sched_switch).
 *
 * In: sched_switch's arguments (prev leaving in a raw state, next coming
 * in) and the threads' states (state.bpf.h). A thread leaving opens an
 * interval (when, why: fold_raw_state) and asks for its stack there
 * (places.bpf.h); a thread coming back closes it. Out: one offcpu_event in
 * `events` per interval of at least offcpu_min_ns, with its waker
 * (wakeups.bpf.h wrote it); shorter ones are added to the thread's folded
 * runs (fold_short), sent as folded_events once they reach fold_flush_ns
 * or fold_span_ns, or when a wait from another place or waker comes; waits
 * from offcpu_min_ns up to fold_same_max_ns (record's) are summed per place,
 * waker and reason in four runs a thread (fold_by_place; the run with the
 * oldest last wait is sent to make room), sent as folded_events
 * (FOLDED_BY_PLACE); a dying thread's last switch sends its totals
 * (thread_end_event) and runs, and deletes its state.
 */
#ifndef __SCHED_OFFCPU_BPF_H
#define __SCHED_OFFCPU_BPF_H

#define TASK_INTERRUPTIBLE 0x1
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_DEAD 0x80
#define TASK_NOLOAD 0x400

/* Why a thread left the CPU, from the raw task state. */
static __always_inline __u32 fold_raw_state(bool preempt, unsigned long state)
{
	if (preempt || state == 0)
		return OFFCPU_PREEMPTED;
	if (state & TASK_NOLOAD /* idle kernel threads */)
		return OFFCPU_OTHER;
	if (state & TASK_INTERRUPTIBLE)
		return OFFCPU_SLEEPING;
	if (state & TASK_UNINTERRUPTIBLE)
		return OFFCPU_BLOCKED;
	return OFFCPU_OTHER;
}

/* For tid, off-CPU since t->off_ts, woken at t->wake_ts and back at `end`:
 * the time its wakeup took to land, from being sent (sched_waking) to its
 * enqueue (sched_wakeup), when both were seen for this interval; else 0.
 * The kernel's run delay (schedstat) counts from the enqueue. A wakeup sent
 * to an idle CPU lands when that CPU has woken: timed from the sending,
 * the server of why.rs's fdatasync test had 12 us a wait more run delay
 * than its schedstat counted (15.1 ms against 5.8 over 787 waits), and on
 * a VM that time is the host's, running the idle vCPU again (/proc/stat's
 * steal grew 20-50 ms over those runs). Before the waker's fields are
 * written (wake_ts last), the enqueue is not trusted either. */
static __always_inline __u64 landing(const struct thread_state *t, __u64 end)
{
	__u64 q = t->queued_ts, w = t->wake_ts;

	if (w < t->off_ts || w > end || q < w || q < t->off_ts || q > end)
		return 0;
	return q - w;
}

static __always_inline __u32 cap_u32(__u64 v)
{
	return v > 0xffffffffULL ? 0xffffffffU : (__u32)v;
}

/* Send the thread's short waits an interrupt woke, a run over the same
 * span as its others, and reset them. */
static __always_inline void flush_folded_irq(__u32 tid, struct thread_state *t)
{
	if (!t->irq_count[0] && !t->irq_count[1])
		return;
	struct folded_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		/* Kept: the next flush (or the end of the recording) carries them. */
		count_drop(DROP_EVENTS_FULL);
		return;
	}
	e->kind = RECORD_FOLDED;
	e->pid = t->pid;
	e->tid = tid;
	e->delay_ns = 0;
	e->first_ns = t->short_first;
	e->last_ns = t->short_last;
	e->ns[OFFCPU_PREEMPTED] = 0;
	e->count[OFFCPU_PREEMPTED] = 0;
	e->ns[OFFCPU_SLEEPING] = t->irq_ns[0];
	e->count[OFFCPU_SLEEPING] = t->irq_count[0];
	e->ns[OFFCPU_BLOCKED] = t->irq_ns[1];
	e->count[OFFCPU_BLOCKED] = t->irq_count[1];
	e->ns[OFFCPU_OTHER] = 0;
	e->count[OFFCPU_OTHER] = 0;
	e->wait_ns = t->irq_wait_ns;
	e->waker_pid = 0;
	e->waker_tid = 0;
	e->waker_kind = FOLD_WAKER_IRQ;
	e->landing_ns = cap_u32(t->irq_land_ns);
	e->stack_id = t->irq_stack_id;
	e->flags = 0;
	e->_pad = 0;
	t->irq_ns[0] = 0;
	t->irq_ns[1] = 0;
	t->irq_count[0] = 0;
	t->irq_count[1] = 0;
	t->irq_wait_ns = 0;
	t->irq_land_ns = 0;
	t->irq_stack_id = 0;
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
}

/* Send the thread's folded short waits and reset them. */
static __always_inline void flush_folded(__u32 tid, struct thread_state *t)
{
	flush_folded_irq(tid, t);
	if (t->irq_count[0] || t->irq_count[1])
		return; /* the ring is full: all of the run waits for the next flush */
	if (!t->short_count[0] && !t->short_count[1] && !t->short_count[2] && !t->short_count[3]) {
		t->short_first = 0;
		t->short_last = 0;
		return;
	}
	struct folded_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		/* Kept: the next flush (or the end of the recording) carries them. */
		count_drop(DROP_EVENTS_FULL);
		return;
	}
	e->kind = RECORD_FOLDED;
	e->pid = t->pid;
	e->tid = tid;
	e->delay_ns = 0;
	e->first_ns = t->short_first;
	e->last_ns = t->short_last;
	for (int i = 0; i < OFFCPU_REASONS; i++) {
		e->ns[i] = t->short_ns[i];
		e->count[i] = t->short_count[i];
		t->short_ns[i] = 0;
		t->short_count[i] = 0;
	}
	e->wait_ns = t->short_wait_ns;
	e->waker_pid = t->short_waker_pid;
	e->waker_tid = t->short_waker_tid;
	e->waker_kind = t->short_waker_kind;
	e->landing_ns = cap_u32(t->short_land_ns);
	e->stack_id = t->short_stack_id;
	e->flags = 0;
	e->_pad = 0;
	t->short_first = 0;
	t->short_last = 0;
	t->short_wait_ns = 0;
	t->short_land_ns = 0;
	t->short_stack_id = 0;
	t->short_waker_pid = 0;
	t->short_waker_tid = 0;
	t->short_waker_kind = FOLD_WAKER_UNSET;
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
}

/* Fold tid's short interval ending at `end` into its run. Not inlined:
 * the switch program's own frame is near the stack limit; and global, so
 * the verifier checks it once, not at every state the switch program
 * reaches it in (it was 8,600 of that program's 12,400 verified
 * instructions; 5,300 in all now). */
__noinline int fold_short(__u32 tid, struct thread_state *t, __u64 end)
{
	if (!t)
		return 0;
	__u64 delta = end - t->off_ts;
	__u32 reason = t->off_state & (OFFCPU_REASONS - 1);

	if (reason != OFFCPU_PREEMPTED) {
		/* A preemption has no waker: all of it is runnable. */
		bool woken = t->wake_ts >= t->off_ts && t->wake_ts <= end;
		__u32 kind = !woken ? FOLD_WAKER_UNSEEN : t->waker_irq ? FOLD_WAKER_IRQ : FOLD_WAKER_TASK;
		__u32 waker_tid = kind == FOLD_WAKER_TASK ? t->waker_tid : 0;

		if (kind == FOLD_WAKER_IRQ && (reason == OFFCPU_SLEEPING || reason == OFFCPU_BLOCKED)) {
			__u32 slot = (reason - OFFCPU_SLEEPING) & 1;

			/* One place per run, as one waker: see the task run's below. */
			if ((t->irq_count[0] || t->irq_count[1]) && t->irq_stack_id != t->stack_id) {
				if (t->irq_ns[0] + t->irq_ns[1] >= fold_waker_min_ns)
					flush_folded_irq(tid, t);
				if (t->irq_count[0] || t->irq_count[1])
					t->irq_stack_id = 0;
			}
			if (!t->irq_count[0] && !t->irq_count[1])
				t->irq_stack_id = t->stack_id;
			t->irq_ns[slot] += delta;
			t->irq_count[slot] += 1;
			t->irq_wait_ns += t->wake_ts - t->off_ts;
			t->irq_land_ns += landing(t, end);
			if (!t->short_first)
				t->short_first = t->off_ts;
			t->short_last = end;
			t->off_ts = 0;
			t->off_flags = 0;
			if (t->irq_ns[0] + t->irq_ns[1] + t->short_ns[0] + t->short_ns[1] + t->short_ns[2] + t->short_ns[3] >=
				    fold_flush_ns ||
			    end - t->short_first >= fold_span_ns)
				flush_folded(tid, t);
			return 0;
		}

		if (t->short_first && t->short_waker_kind != FOLD_WAKER_UNSET &&
		    (t->short_waker_kind != kind || t->short_waker_tid != waker_tid)) {
			if (t->short_wait_ns >= fold_waker_min_ns) {
				flush_folded(tid, t);
			} else {
				t->short_waker_kind = FOLD_WAKER_MIXED;
				t->short_waker_pid = 0;
				t->short_waker_tid = 0;
			}
		}
		if (t->short_waker_kind == FOLD_WAKER_UNSET) {
			t->short_waker_kind = kind;
			t->short_waker_tid = waker_tid;
			t->short_waker_pid = kind == FOLD_WAKER_TASK ? t->waker_pid : 0;
		}
		/* Its waits keep the place they left the CPU from while they
		 * all left from one: a run of at least fold_waker_min_ns is sent
		 * when a wait from another place comes, a shorter one loses its
		 * place (0). Without it, every wait under offcpu_min_ns was
		 * "[short off-CPU waits: no stack]" in the profile: half of `ls
		 * -R`'s. Preemptions do not count: they come from anywhere. */
		__u64 waits_ns = t->short_ns[OFFCPU_SLEEPING] + t->short_ns[OFFCPU_BLOCKED] + t->short_ns[OFFCPU_OTHER];
		bool waits = t->short_count[OFFCPU_SLEEPING] || t->short_count[OFFCPU_BLOCKED] ||
			     t->short_count[OFFCPU_OTHER];

		if (waits && t->short_stack_id != t->stack_id) {
			if (waits_ns >= fold_waker_min_ns) {
				flush_folded(tid, t);
				waits = t->short_count[OFFCPU_SLEEPING] || t->short_count[OFFCPU_BLOCKED] ||
					t->short_count[OFFCPU_OTHER];
			}
			if (waits)
				t->short_stack_id = 0;
		}
		if (!waits)
			t->short_stack_id = t->stack_id;
		t->short_wait_ns += woken ? t->wake_ts - t->off_ts : delta;
		t->short_land_ns += landing(t, end);
	}
	if (!t->short_first)
		t->short_first = t->off_ts;
	t->short_last = end;
	t->short_ns[reason] += delta;
	t->short_count[reason] += 1;
	t->off_ts = 0;
	t->off_flags = 0;
	if (t->irq_ns[0] + t->irq_ns[1] + t->short_ns[0] + t->short_ns[1] + t->short_ns[2] + t->short_ns[3] >=
		    fold_flush_ns ||
	    end - t->short_first >= fold_span_ns)
		flush_folded(tid, t);
	return 0;
}

/* Whether userspace has read the events ring for the last time: place runs
 * then stay in their map, where it reads them (a run sent after that read
 * was lost uncounted, its waits ended before the recording's end). */
static __always_inline bool place_runs_frozen(void)
{
	__u32 zero = 0;
	__u32 *frozen = bpf_map_lookup_elem(&place_runs_frozen_at_end, &zero);

	return frozen && *frozen;
}

/* Send one of tid's place runs and free its slot: true when sent. Not
 * sent (the ring full, or the recording's end read), it is kept; its
 * caller counts it when it is lost. */
static __always_inline bool flush_place_run(__u32 tid, struct thread_state *t, struct place_run *r)
{
	if (place_runs_frozen())
		return false;
	struct folded_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e)
		return false;
	__u32 reason = r->reason & (OFFCPU_REASONS - 1);

	e->kind = RECORD_FOLDED;
	e->pid = t->pid;
	e->tid = tid;
	e->delay_ns = cap_u32(r->delay_ns);
	e->first_ns = r->first_ns;
	e->last_ns = r->last_ns;
	for (int i = 0; i < OFFCPU_REASONS; i++) {
		e->ns[i] = 0;
		e->count[i] = 0;
	}
	e->ns[reason] = r->ns;
	e->count[reason] = r->count;
	e->wait_ns = r->wait_ns;
	e->waker_pid = r->waker_pid;
	e->waker_tid = r->waker_tid;
	e->waker_kind = r->waker_kind;
	e->landing_ns = cap_u32(r->land_ns);
	e->stack_id = r->stack_id;
	e->flags = FOLDED_BY_PLACE;
	e->_pad = 0;
	r->count = 0;
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
	return true;
}

/* Send all of tid's place runs and forget them (it is dying); a run the
 * ring has no room for is counted lost. After the recording's end is read,
 * they stay, with the pid they were of, for userspace to read. Global:
 * verified once. */
__noinline int flush_place_runs(__u32 tid, struct thread_state *t)
{
	if (!t || !t->has_place_runs || place_runs_frozen())
		return 0;
	struct place_runs *p = bpf_map_lookup_elem(&place_runs, &tid);

	if (p) {
		for (int i = 0; i < PLACE_RUNS; i++) {
			if (p->r[i].count && !flush_place_run(tid, t, &p->r[i]))
				count_drop(DROP_EVENTS_FULL);
		}
	}
	bpf_map_delete_elem(&place_runs, &tid);
	t->has_place_runs = 0;
	return 0;
}

/* tid's place runs, written empty at its first (over what a thread of the
 * same tid left, should its death not have been seen); NULL when the map
 * is full (its waits are then sent alone). */
static __always_inline struct place_runs *place_runs_of(__u32 tid, struct thread_state *t)
{
	__u32 zero = 0;
	struct place_runs *p;

	if (t->has_place_runs) {
		p = bpf_map_lookup_elem(&place_runs, &tid);
		if (p)
			return p;
	}
	struct place_runs *empty = bpf_map_lookup_elem(&empty_place_runs, &zero);

	if (!empty)
		return NULL;
	bpf_map_update_elem(&place_runs, &tid, empty, BPF_ANY);
	p = bpf_map_lookup_elem(&place_runs, &tid);
	if (p) {
		p->pid = t->pid;
		t->has_place_runs = 1;
	}
	return p;
}

/* A wait (not a preemption) from offcpu_min_ns up to fold_same_max_ns ends
 * at `end`: added (1) to the thread's run of waits from its place, with its
 * waker and reason, or to a free run, or to the run with the oldest last
 * wait once that is sent to make room; 0, and it is sent alone, when it has
 * no place, the map or the ring is full, or the recording's end was read. Beside `pgbench -c 8 -j 2` most
 * waits are 0.1-1 ms: a backend's for its client, woken in turn by its
 * pgbench thread, other backends and interrupts; each pgbench thread's for
 * four backends. Sent one by one they were most of the events ring's
 * records (141,776 in 5 s, 6,289 of them over 1 ms), and one run per thread
 * closed at every change of waker. A run is sent once it holds
 * fold_flush_ns, when another wait of the thread's this function sees comes
 * fold_span_ns after the run's first, when a wait from another place comes
 * and the run's place is the thread's own (leave_thread_place), or when the
 * thread dies; userspace reads what is left at the end. Global: verified
 * once. */
__noinline int fold_by_place(__u32 tid, struct thread_state *t, __u64 end)
{
	if (!t)
		return 0;
	__u32 reason = t->off_state & (OFFCPU_REASONS - 1);
	__u64 id = t->stack_id;

	/* A preemption's place is where it ran, rarely the same twice. A
	 * place of the thread's own (not shared: pgbench's, sent as a copy
	 * while its tables loaded, and reused since) is kept too: its runs are
	 * sent when a wait from elsewhere comes (leave_thread_place). */
	if (reason == OFFCPU_PREEMPTED || !id || place_runs_frozen())
		return 0;
	struct place_runs *p = place_runs_of(tid, t);

	if (!p)
		return 0;
	bool woken = t->wake_ts >= t->off_ts && t->wake_ts <= end;
	__u32 kind = !woken ? FOLD_WAKER_UNSEEN : t->waker_irq ? FOLD_WAKER_IRQ : FOLD_WAKER_TASK;
	__u32 waker_tid = kind == FOLD_WAKER_TASK ? t->waker_tid : 0;
	int same = -1, free = -1, oldest = 0;
	__u64 oldest_ns = ~0ULL;

	for (int i = 0; i < PLACE_RUNS; i++) {
		struct place_run *r = &p->r[i];

		if (r->count && end - r->first_ns >= fold_span_ns)
			flush_place_run(tid, t, r);
		if (!r->count) {
			if (free < 0)
				free = i;
		} else if (r->stack_id == id && r->waker_kind == kind && r->waker_tid == waker_tid &&
			   r->reason == reason) {
			same = i;
		} else if (r->last_ns < oldest_ns) {
			oldest_ns = r->last_ns;
			oldest = i;
		}
	}
	int slot = same >= 0 ? same : free;

	if (slot < 0) {
		/* The run that went longest without a wait makes room: kept, a
		 * waker that comes once in a while (another backend) held its
		 * slot for up to fold_span_ns while the frequent ones were sent
		 * alone (7 in 10 of the waits a run could take, beside pgbench). */
		struct place_run *lru = &p->r[oldest & (PLACE_RUNS - 1)];

		if (!flush_place_run(tid, t, lru))
			return 0; /* the ring is full: this wait goes alone, or is counted lost */
		slot = oldest;
	}
	struct place_run *r = &p->r[slot & (PLACE_RUNS - 1)];

	if (!r->count) {
		r->stack_id = id;
		r->first_ns = t->off_ts;
		r->ns = 0;
		r->wait_ns = 0;
		r->land_ns = 0;
		r->delay_ns = 0;
		r->waker_pid = kind == FOLD_WAKER_TASK ? t->waker_pid : 0;
		r->waker_tid = waker_tid;
		r->waker_kind = kind;
		r->reason = reason;
	}
	r->ns += end - t->off_ts;
	r->count += 1;
	r->last_ns = end;
	if (woken) {
		__u64 land = landing(t, end);
		/* Runnable from its enqueue (or, not seen, its wakeup) on. */
		__u64 queued = land ? t->queued_ts : t->wake_ts;

		r->wait_ns += t->wake_ts - t->off_ts;
		r->land_ns += land;
		if (end - queued >= run_delay_apart_ns)
			r->delay_ns += end - queued;
	} else {
		r->wait_ns += end - t->off_ts;
	}
	t->off_ts = 0;
	t->off_flags = 0;
	if (r->ns >= fold_flush_ns)
		flush_place_run(tid, t, r);
	return 1;
}

/* A wait (not a preemption) ends: when one of the thread's folded runs
 * (woken by tasks, or by interrupts, or a place run) has a place other
 * than this wait's,
 * and that place is a stack sent for this thread alone (not shared: a copy
 * handed over while the process's tables load, or the shared table full),
 * the runs go now. Userspace keeps only a thread's last few such stacks per
 * slot; a run that stayed open while long waits, or the other run's short
 * ones, came from other places named a stack replaced since (beside
 * pgbench: up to 75 of ~94,000 switches' places "no longer kept", all in
 * the first second, while the backends' tables loaded). fold_short's own
 * rule (a long run sent, a short one losing its place) sees only the run it
 * adds to. A shared place is kept while its process lives: its runs stay
 * open. Global: the verifier checks flush_folded here once. */
__noinline int leave_thread_place(__u32 tid, struct thread_state *t)
{
	if (!t)
		return 0;
	__u64 id = t->stack_id;
	bool run_elsewhere = t->short_stack_id && !(t->short_stack_id & STACK_ID_SHARED) && t->short_stack_id != id;
	bool irq_elsewhere = t->irq_stack_id && !(t->irq_stack_id & STACK_ID_SHARED) && t->irq_stack_id != id;

	if (run_elsewhere || irq_elsewhere)
		flush_folded(tid, t);
	if (!t->has_place_runs)
		return 0;
	struct place_runs *p = bpf_map_lookup_elem(&place_runs, &tid);

	if (!p)
		return 0;
	for (int i = 0; i < PLACE_RUNS; i++) {
		struct place_run *r = &p->r[i];

		if (r->count && !(r->stack_id & STACK_ID_SHARED) && r->stack_id != id)
			flush_place_run(tid, t, r);
	}
	return 0;
}

/* Close tid's open interval at `end`: fold it when short, else send it.
 * Its name is read at `comm_addr`, or is current's where that is 0; its
 * flags are the state's (`off_flags`). A global function: the verifier
 * checks it once, not inlined at each of on_sched_switch's two calls under
 * every path to them (five arguments at most). */
__noinline int close_interval(__u32 tid, struct thread_state *t, __u64 end, __u32 cpu, __u64 comm_addr)
{
	if (!t)
		return 0;
	__u64 delta = end - t->off_ts;

	if (t->off_state != OFFCPU_PREEMPTED)
		leave_thread_place(tid, t);
	if (delta < offcpu_min_ns) {
		fold_short(tid, t, end);
		return 0;
	}
	if (delta < fold_same_max_ns && fold_by_place(tid, t, end))
		return 0;
	struct offcpu_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		t->off_ts = 0;
		t->off_flags = 0;
		return 0;
	}
	e->kind = RECORD_OFFCPU;
	e->state = t->off_state;
	e->start_ns = t->off_ts;
	e->end_ns = end;
	e->tid = tid;
	e->pid = t->pid;
	e->cpu_out = t->off_cpu;
	e->cpu_in = cpu;
	e->stack_id = t->stack_id;
	e->flags = t->off_flags;
	if (!comm_addr)
		bpf_get_current_comm(e->comm, TASK_COMM_LEN);
	else
		bpf_probe_read_kernel(e->comm, TASK_COMM_LEN, (const void *)comm_addr);
	/* A wakeup older than this interval belongs to an earlier one. */
	if (t->wake_ts >= t->off_ts && t->wake_ts <= end) {
		e->wake_ns = t->wake_ts;
		e->landing_ns = cap_u32(landing(t, end));
		e->waker_pid = t->waker_pid;
		e->waker_tid = t->waker_tid;
		e->waker_stack_id = t->waker_stack_id;
		e->flags |= t->waker_irq ? OFFCPU_WAKER_IRQ : OFFCPU_WAKER_TASK;
		__builtin_memcpy(e->waker_comm, t->waker_comm, TASK_COMM_LEN);
	} else {
		e->wake_ns = 0;
		e->waker_pid = 0;
		e->waker_tid = 0;
		e->waker_stack_id = 0;
		e->landing_ns = 0;
		__builtin_memset(e->waker_comm, 0, TASK_COMM_LEN);
	}
	t->off_ts = 0;
	t->off_flags = 0;
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
	return 0;
}

/* A thread of a tracked process seen for the first time while it is off the
 * CPU (it runs, or is woken, before any switch-out of it was traced): it
 * left the CPU before tracing began, or, if it is new, it has been runnable
 * since it was created. Its interval starts at its creation, which
 * userspace clips to the range: without it a thread asleep since before
 * the recording had nothing until it woke (the front end hatched it as
 * "no data" up to there). `state` is what it is off-CPU as (a wakee's
 * sleep, or runnable). NULL when untracked or the map is full. */
static __always_inline struct thread_state *first_seen(struct task_struct *task, __u32 tid, __u32 state, __u32 cpu)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct thread_state *t;

	if (!sched_tracked(tgid))
		return NULL;
	t = new_state(tid, tgid);
	if (!t) {
		count_drop(DROP_STATE_FULL);
		return NULL;
	}
	if (t->off_ts)
		return t;
	__u64 born = BPF_CORE_READ(task, start_time);

	t->off_state = state;
	t->off_cpu = cpu;
	t->off_runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
	t->off_flags = OFFCPU_START_UNSEEN;
	t->off_ts = born ? born : 1;
	return t;
}

/* prev, the current task, leaves the CPU in raw state `raw`. */
static __always_inline void switch_out(void *ctx, __u32 tid, bool preempt, unsigned long raw, __u64 now, __u32 cpu)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct thread_state *t;

	if (!sched_tracked(tgid))
		return;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (raw & TASK_DEAD) {
		/* Its last switch: send its totals and forget it. */
		if (!t)
			return;
		if (t->short_first)
			flush_folded(tid, t);
		flush_place_runs(tid, t);
		struct thread_end_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

		if (e) {
			e->kind = RECORD_THREAD_END;
			e->pid = tgid;
			e->tid = tid;
			e->_pad = 0;
			e->time_ns = now;
			e->voluntary = t->voluntary + 1;
			e->involuntary = t->involuntary;
			bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
		} else {
			count_drop(DROP_EVENTS_FULL);
		}
		bpf_map_delete_elem(&threads, &tid);
		return;
	}
	if (!t) {
		t = new_state(tid, tgid);
		if (!t) {
			count_drop(DROP_STATE_FULL);
			return;
		}
	}
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 runtime = task->se.sum_exec_runtime;

	if (t->off_ts) {
		/* It ran again without a traced switch back in (the task that
		 * handed it the CPU is hidden from tracepoints on some
		 * kernels): it was off-CPU for the wall time since it left
		 * minus the CPU time it used since, up to when it ran again. */
		__u64 ran = runtime > t->off_runtime ? runtime - t->off_runtime : 0;
		__u64 since = now - t->off_ts;

		t->off_flags |= OFFCPU_END_INFERRED;
		close_interval(tid, t, ran < since ? now - ran : t->off_ts, cpu, 0);
	}
	__u32 state = fold_raw_state(preempt, raw);

	if (state == OFFCPU_PREEMPTED)
		t->involuntary++;
	else
		t->voluntary++;
	t->off_state = state;
	t->off_cpu = cpu;
	t->off_runtime = runtime;
	/* Off-CPU from now on, before the stack is walked: a wakeup from
	 * another CPU during the walk (which can take microseconds) must find
	 * the interval open, or it is lost ("no waker seen"). The switch back
	 * in cannot come before this program ends: a wakee is not enqueued
	 * anywhere until it is fully off this CPU. */
	t->stack_id = 0;
	t->off_ts = now;
	struct stack_request *r = stack_request_for(KBUF_SWITCH);

	if (!r)
		return;
	r->pid = tgid;
	r->tid = tid;
	r->slot = state == OFFCPU_PREEMPTED ? STACK_SLOT_PREEMPTED : STACK_SLOT_WAITED;
	r->what = state;
	r->cache_tid = tid;
	r->target_tid = tid;
	/* Last: a user thread's stack is walked in a tail call. */
	stack_then_finish(ctx, r, KBUF_SWITCH, t);
}

/* next runs again: close its interval. */
static __always_inline void switch_in(struct task_struct *next, __u32 tid, __u64 next_comm, __u64 now, __u32 cpu)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &tid);

	if (!t)
		t = first_seen(next, tid, OFFCPU_PREEMPTED, cpu);
	if (!t || !t->off_ts)
		return;
	close_interval(tid, t, now, cpu, next_comm);
}

/* The raw tracepoint: the bare arguments (preempt, prev, next, prev_state),
 * no trace record built; this runs hundreds of thousands of times a second
 * on a switch-heavy machine. It runs in prev's context (current is prev),
 * and only this CPU touches prev's and next's states now. */
SEC("raw_tracepoint/sched_switch")
int on_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	/* Plain loads: args[] is a flexible array, nothing to relocate. */
	__u64 *args = (__u64 *)ctx;
	bool preempt = args[0];
	struct task_struct *prev = (struct task_struct *)args[1];
	struct task_struct *next = (struct task_struct *)args[2];
	/* prev_state is an argument since 5.18; before, read the task's state. */
	unsigned long raw = has_prev_state_arg ? args[3] : BPF_CORE_READ(prev, __state);
	__u64 now = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id();
	/* prev is current: its tid without a kernel read. */
	__u32 prev_tid = (__u32)bpf_get_current_pid_tgid();
	__u32 next_tid = BPF_CORE_READ(next, pid);

	/* next first: prev's switch-out ends in a tail call when its stack is
	 * walked. The two threads' states are apart; only their records'
	 * order in the ring changes. */
	if (next_tid)
		switch_in(next, next_tid, (__u64)__builtin_preserve_access_index(&next->comm), now, cpu);
	if (prev_tid)
		switch_out(ctx, prev_tid, preempt, raw, now, cpu);
	return 0;
}

#endif /* __SCHED_OFFCPU_BPF_H */
