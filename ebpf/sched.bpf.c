// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sched.bpf.c: why threads are not running, and block I/O.
 *
 * sched_switch records, per thread, when and in which state it left the CPU
 * with its kernel and user stacks (as ids in the `stacks` map, so each
 * distinct stack is stored once); sched_waking records who woke it, with the
 * waker's stacks; when the thread runs again one offcpu_event goes to the
 * `events` ring if the interval lasted at least offcpu_min_ns, else it is
 * folded into per-thread totals carried by the next record. Every switch is
 * counted in `threads`, so totals stay exact whatever is dropped. State is
 * updated in place, never deleted, to keep map operations per switch few.
 *
 * Block requests are keyed by (dev, sector) from start to completion and
 * emitted as one io_event, attributed to the task that started them.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sysprof.h"

#define PF_KTHREAD 0x00200000
/* The prev_state bit __trace_sched_switch_state reports for preemption. */
#define TASK_REPORT_MAX 0x100

const volatile __u32 targ_tgid = 0;
const volatile __u64 offcpu_min_ns = 100000;
const volatile __u64 wakeup_bytes = 64 * 1024;
/* Set by userspace on kernels >= 5.18, where sched_switch passes prev_state. */
const volatile bool has_prev_state_arg = false;
/* Dwarf mode: bytes of user stack copied at switch-out (0: frame pointers). */
const volatile __u32 stack_copy = 0;

#include "ustack.bpf.h"



struct io_key {
	__u32 dev;
	__u32 _pad;
	__u64 sector;
};

struct io_start {
	__u64 ts;
	__u64 issue_ts;
	__u32 pid;
	__u32 tid;
	__s32 kstack_id;
	__s32 ustack_id;
	__u32 bytes;
	__u32 _pad;
	__u8 comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct io_key);
	__type(value, struct io_start);
} io_starts SEC(".maps");

/* Sequence numbers of copied user stacks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ustack_seq SEC(".maps");

#include "drops.bpf.h"

static __always_inline long submit_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									       : BPF_RB_NO_WAKEUP;
}

static __always_inline bool tracked(__u32 tgid)
{
	return !targ_tgid || tgid == targ_tgid;
}

/* Kernel and user stack ids of the current task; -1 when absent. */
static __always_inline void current_stacks(void *ctx, __s32 *kid, __s32 *uid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	long id;

	id = bpf_get_stackid(ctx, &stacks, 0);
	if (id < 0)
		count_drop(DROP_STACKID);
	*kid = id;
	if (BPF_CORE_READ(task, flags) & PF_KTHREAD) {
		*uid = -1;
		return;
	}
	id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	/* -EFAULT: no user stack to walk (e.g. exiting task); not a loss. */
	if (id < 0 && id != -14)
		count_drop(DROP_STACKID);
	*uid = id;
}

/* Dwarf mode: the kernel stack by id, and the user registers and stack bytes
 * sent as a ustack_event whose id becomes the user stack id. Falls back to
 * the frame-pointer walk if the ring is full. */
static __always_inline void copy_switch_out_stack(void *ctx, __u32 tid, __u64 ip, __u64 sp, __u64 bp, __s32 *kid, __s32 *uid)
{
	__u32 zero = 0;
	__u32 *seq = bpf_map_lookup_elem(&ustack_seq, &zero);
	struct ustack_event *e;
	long id;

	id = bpf_get_stackid(ctx, &stacks, 0);
	if (id < 0)
		count_drop(DROP_STACKID);
	*kid = id;
	if (!seq)
		goto fallback;
	e = bpf_ringbuf_reserve(&events, sizeof(*e) + stack_copy, 0);
	if (!e)
		goto fallback;
	e->kind = RECORD_USTACK;
	e->id = USTACK_ID_FLAG | (__sync_fetch_and_add(seq, 1) & (USTACK_ID_FLAG - 1));
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->tid = tid;
	e->ip = ip;
	e->sp = sp;
	e->bp = bp;
	e->_pad = 0;
	e->size = copy_user_stack((__u8 *)(e + 1), sp);
	*uid = e->id;
	bpf_ringbuf_submit(e, submit_flags());
	return;
fallback:
	id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (id < 0 && id != -14)
		count_drop(DROP_STACKID);
	*uid = id;
}

/* The stacks of the current task (prev) as it leaves the CPU, into t's
 * kstack_id/ustack_id: reused from t's cache when it leaves from the same
 * user context (ip, sp, bp) in the same state as last time, which is the
 * common case on a switch-heavy machine; walking two stacks is the tracer's
 * main cost otherwise. */
static __always_inline void switch_out_stacks(void *ctx, __u32 tid, __u32 state, struct thread_state *t)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (task->flags & PF_KTHREAD) {
		current_stacks(ctx, &t->kstack_id, &t->ustack_id);
		return;
	}
	/* A BTF pointer: plain loads (checked by the verifier), not three
	 * bpf_probe_read_kernel calls on every switch. */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u64 ip = PT_REGS_IP(regs), sp = PT_REGS_SP(regs), bp = PT_REGS_FP(regs);

	if (t->cache_ip == ip && t->cache_sp == sp && t->cache_bp == bp && t->cache_state == state &&
	    t->cache_kstack_id >= 0) {
		t->kstack_id = t->cache_kstack_id;
		t->ustack_id = t->cache_ustack_id;
		return;
	}
	if (stack_copy)
		copy_switch_out_stack(ctx, tid, ip, sp, bp, &t->kstack_id, &t->ustack_id);
	else
		current_stacks(ctx, &t->kstack_id, &t->ustack_id);
	t->cache_ip = ip;
	t->cache_sp = sp;
	t->cache_bp = bp;
	t->cache_state = state;
	t->cache_kstack_id = t->kstack_id;
	t->cache_ustack_id = t->ustack_id;
}

/* From the raw task state (the raw tracepoint's argument). */
static __always_inline __u32 fold_raw_state(bool preempt, unsigned long state)
{
	if (preempt || state == 0)
		return OFFCPU_PREEMPTED;
	if (state & 0x400 /* TASK_NOLOAD: idle kernel threads */)
		return OFFCPU_OTHER;
	if (state & 1 /* TASK_INTERRUPTIBLE */)
		return OFFCPU_SLEEPING;
	if (state & 2 /* TASK_UNINTERRUPTIBLE */)
		return OFFCPU_BLOCKED;
	return OFFCPU_OTHER;
}

/* From the classic tracepoint's prev_state, as __trace_sched_switch_state reports it. */
static __always_inline __u32 fold_state(long prev_state)
{
	if (prev_state == 0 || (prev_state & TASK_REPORT_MAX))
		return OFFCPU_PREEMPTED;
	if (prev_state & 1)
		return OFFCPU_SLEEPING;
	if (prev_state & 2)
		return OFFCPU_BLOCKED;
	return OFFCPU_OTHER;
}

/* One context switch from prev to next, in prev's context. `state` is
 * already folded; `next_comm` points to next's name in kernel memory. */
static __always_inline int handle_switch(void *ctx, __u32 prev, __u32 next, __u32 state, const void *next_comm)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id();
	struct thread_state *t;

	/* The switch runs in prev's context: current is prev. Only this CPU
	 * touches prev's state now, so plain updates are safe. */
	if (prev) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;

		if (tracked(tgid)) {
			t = bpf_map_lookup_elem(&threads, &prev);
			if (!t) {
				struct thread_state zero = { .pid = tgid, .cache_kstack_id = -1 };

				bpf_map_update_elem(&threads, &prev, &zero, BPF_NOEXIST);
				t = bpf_map_lookup_elem(&threads, &prev);
			}
			if (t) {
				if (state == OFFCPU_PREEMPTED)
					t->involuntary++;
				else
					t->voluntary++;
				t->off_state = state;
				t->off_cpu = cpu;
				switch_out_stacks(ctx, prev, state, t);
				t->off_ts = now;
			} else {
				count_drop(DROP_STATE_FULL);
			}
		}
	}

	if (!next)
		return 0;
	t = bpf_map_lookup_elem(&threads, &next);
	if (!t || !t->off_ts)
		return 0;
	__u64 delta = now - t->off_ts;

	if (delta < offcpu_min_ns) {
		t->short_count++;
		t->short_ns += delta;
		t->off_ts = 0;
		return 0;
	}
	struct offcpu_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		t->off_ts = 0;
		return 0;
	}
	e->kind = RECORD_OFFCPU;
	e->state = t->off_state;
	e->start_ns = t->off_ts;
	e->end_ns = now;
	e->tid = next;
	e->pid = t->pid;
	e->cpu_out = t->off_cpu;
	e->cpu_in = cpu;
	e->kstack_id = t->kstack_id;
	e->ustack_id = t->ustack_id;
	e->_pad = 0;
	bpf_probe_read_kernel(e->comm, TASK_COMM_LEN, next_comm);
	/* Carry and reset the folded intervals. */
	e->short_count = t->short_count;
	e->short_ns = t->short_ns;
	t->short_count = 0;
	t->short_ns = 0;
	/* A wakeup older than this interval belongs to an earlier one. */
	if (t->wake_ts >= t->off_ts) {
		e->wake_ns = t->wake_ts;
		e->waker_pid = t->waker_pid;
		e->waker_tid = t->waker_tid;
		e->waker_kstack_id = t->waker_kstack_id;
		e->waker_ustack_id = t->waker_ustack_id;
		__builtin_memcpy(e->waker_comm, t->waker_comm, TASK_COMM_LEN);
	} else {
		e->wake_ns = 0;
		e->waker_pid = 0;
		e->waker_tid = 0;
		e->waker_kstack_id = -1;
		e->waker_ustack_id = -1;
		__builtin_memset(e->waker_comm, 0, TASK_COMM_LEN);
	}
	t->off_ts = 0;
	bpf_ringbuf_submit(e, submit_flags());
	return 0;
}

/* The classic tracepoint: the kernel builds a trace record first (comms
 * copied, state folded for printing); used where raw tracepoints are not. */
SEC("tracepoint/sched/sched_switch")
int on_sched_switch(struct trace_event_raw_sched_switch *ctx)
{
	return handle_switch(ctx, ctx->prev_pid, ctx->next_pid, fold_state(ctx->prev_state), ctx->next_comm);
}

/* The raw tracepoint: the bare arguments (preempt, prev, next, prev_state),
 * no record built. It is the cheaper of the two on a switch-heavy machine:
 * this runs hundreds of thousands of times a second. */
SEC("raw_tracepoint/sched_switch")
int on_sched_switch_raw(struct bpf_raw_tracepoint_args *ctx)
{
	/* Plain loads: args[] is a flexible array, nothing to relocate. */
	__u64 *args = (__u64 *)ctx;
	bool preempt = args[0];
	struct task_struct *prev = (struct task_struct *)args[1];
	struct task_struct *next = (struct task_struct *)args[2];
	/* prev_state is an argument since 5.18; before, read the task's state. */
	unsigned long raw = has_prev_state_arg ? args[3] : BPF_CORE_READ(prev, __state);

	/* prev is current: its tid without a kernel read. */
	return handle_switch(ctx, (__u32)bpf_get_current_pid_tgid(), BPF_CORE_READ(next, pid), fold_raw_state(preempt, raw),
			     __builtin_preserve_access_index(&next->comm));
}

/* Who woke a sleeping thread we track. Runs in the waker's context (for an
 * interrupt, the interrupted task: its kernel stack shows the interrupt). */
static __always_inline int on_wakeup(void *ctx, __u32 wakee)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &wakee);

	if (!t || !t->off_ts)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	t->waker_pid = pid_tgid >> 32;
	t->waker_tid = (__u32)pid_tgid;
	bpf_get_current_comm(t->waker_comm, sizeof(t->waker_comm));
	/* Walking the waker's stacks is the costly part; a wakee that slept
	 * less than offcpu_min_ns is most likely folded, so skip it there.
	 * (Its waker's pid, tid and name are still recorded.) */
	if (now - t->off_ts >= offcpu_min_ns) {
		current_stacks(ctx, &t->waker_kstack_id, &t->waker_ustack_id);
	} else {
		t->waker_kstack_id = -1;
		t->waker_ustack_id = -1;
	}
	/* Last: the switch-in trusts the waker fields once it sees this. */
	t->wake_ts = now;
	return 0;
}

SEC("tracepoint/sched/sched_waking")
int on_sched_waking(struct trace_event_raw_sched_wakeup_template *ctx)
{
	return on_wakeup(ctx, ctx->pid);
}

SEC("raw_tracepoint/sched_waking")
int on_sched_waking_raw(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *p = (struct task_struct *)((__u64 *)ctx)[0];

	return on_wakeup(ctx, BPF_CORE_READ(p, pid));
}

static __always_inline int start_request(void *ctx, __u32 dev, __u64 sector, __u32 bytes, bool issued)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct io_key key = { .dev = dev, .sector = sector };
	struct io_start s = {
		.ts = bpf_ktime_get_ns(),
		.pid = pid_tgid >> 32,
		.tid = (__u32)pid_tgid,
		.bytes = bytes,
	};

	if (!tracked(s.pid))
		return 0;
	if (issued)
		s.issue_ts = s.ts;
	bpf_get_current_comm(s.comm, sizeof(s.comm));
	current_stacks(ctx, &s.kstack_id, &s.ustack_id);
	if (bpf_map_update_elem(&io_starts, &key, &s, BPF_ANY))
		count_drop(DROP_STATE_FULL);
	return 0;
}

/* The request is created, in the context of the task submitting it:
 * block_io_start on 6.5+ kernels, block_rq_insert before (userspace attaches
 * one of the two). */
SEC("tracepoint/block/block_io_start")
int on_block_start(struct trace_event_raw_block_rq *ctx)
{
	return start_request(ctx, ctx->dev, ctx->sector, ctx->bytes, false);
}

/* Sent to the device. A request issued directly, never inserted, starts here. */
SEC("tracepoint/block/block_rq_issue")
int on_block_issue(struct trace_event_raw_block_rq *ctx)
{
	struct io_key key = { .dev = ctx->dev, .sector = ctx->sector };
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s)
		return start_request(ctx, ctx->dev, ctx->sector, ctx->bytes, true);
	if (!s->issue_ts)
		s->issue_ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int on_block_done(__u32 dev, __u64 sector, int error, const void *rwbs)
{
	struct io_key key = { .dev = dev, .sector = sector };
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s)
		return 0;
	struct blkio_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		bpf_map_delete_elem(&io_starts, &key);
		return 0;
	}
	e->kind = RECORD_IO;
	e->dev = dev;
	e->sector = sector;
	e->start_ns = s->ts;
	e->issue_ns = s->issue_ts;
	e->done_ns = bpf_ktime_get_ns();
	e->bytes = s->bytes;
	e->error = error;
	e->pid = s->pid;
	e->tid = s->tid;
	e->kstack_id = s->kstack_id;
	e->ustack_id = s->ustack_id;
	__builtin_memcpy(e->comm, s->comm, TASK_COMM_LEN);
	bpf_probe_read_kernel(e->rwbs, sizeof(e->rwbs), rwbs);
	bpf_ringbuf_submit(e, submit_flags());
	bpf_map_delete_elem(&io_starts, &key);
	return 0;
}

/* The request completed (with its error, which block_io_done lacks). */
SEC("tracepoint/block/block_rq_complete")
int on_block_rq_complete(struct trace_event_raw_block_rq_completion *ctx)
{
	return on_block_done(ctx->dev, ctx->sector, ctx->error, ctx->rwbs);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
