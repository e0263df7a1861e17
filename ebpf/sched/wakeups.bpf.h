/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/wakeups.bpf.h: who woke a thread (on_sched_waking) and when the
 * wakeup landed (on_sched_wakeup).
 *
 * In: the wakee (a thread whose off-CPU interval is open, or seen now for
 * the first time: offcpu.bpf.h's first_seen) and the waker, the current
 * task, or an interrupt (on_interrupt_stack). Out: the waker's pid, tid,
 * comm and stack id in the wakee's state, then wake_ts last (the switch
 * back in trusts the waker fields once it sees it), and queued_ts at the
 * enqueue: read by offcpu.bpf.h when the interval closes. A task waker's
 * stack comes through places.bpf.h; an interrupt's is its kernel stack,
 * cached per CPU here (`irq_cache`).
 */
#ifndef __SCHED_WAKEUPS_BPF_H
#define __SCHED_WAKEUPS_BPF_H

/* Per CPU: the kernel stack last sent from an interrupt (hash, id). */
struct irq_stack_cache {
	__u64 hash;
	__u64 id;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct irq_stack_cache);
} irq_cache SEC(".maps");

/* The size of the current task's kernel stack (THREAD_SIZE): the pages of
 * its vmapped area (16 KiB on x86_64, 32 KiB with KASAN), 16 KiB when the
 * stack is not vmapped. Exact, because vmalloc puts areas one guard page
 * apart: a CPU's interrupt stack can begin 20 KiB after a task's stack, and
 * a looser bound (32 KiB was used) took wakeups from that interrupt stack
 * for the task's own (CI saw a disk completion "woken by sysprof"). */
static __always_inline __u64 task_stack_size(struct task_struct *task)
{
	if (bpf_core_field_exists(task->stack_vm_area)) {
		struct vm_struct *area = BPF_CORE_READ(task, stack_vm_area);
		__u32 pages = area ? BPF_CORE_READ(area, nr_pages) : 0;

		if (pages)
			return (__u64)pages * 4096;
	}
	return 16384;
}

/* Whether the current context is an interrupt's: on x86_64 hard
 * interrupts (and the softirqs run on their exit) use per-CPU interrupt
 * stacks, never the task's. Where the traced code runs is told by the
 * raw tracepoint's `ctx`, the argument array the kernel's trace stub built
 * on the traced code's stack. Not by the address of a variable of this
 * program: since Linux 6.13 the x86 JIT may give a tracing program a
 * per-CPU stack of its own, and then every wakeup looked like an
 * interrupt's (found on 6.18: task wakeups lost their waker's user stack,
 * and every folded wait was charged to "an interrupt"). */
static __always_inline bool on_interrupt_stack(void *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 here = (__u64)ctx;
	__u64 stack = (__u64)task->stack;

	if (here < stack || here >= stack + task_stack_size(task))
		return true;
	/* On the task's own stack: a system call, a fault, or an interrupt
	 * that came from user mode, which x86_64 runs there. The registers
	 * the entry saved tell them apart: an interrupt stores a negative
	 * orig_ax (its vector's complement, or -1), a system call its
	 * number, a fault its error code. */
	if (task->flags & PF_KTHREAD)
		return false;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	return (long)regs->orig_ax < 0;
}

/* The stack of a wakeup from an interrupt: kernel only, cached per CPU. */
static __always_inline __u64 interrupt_stack(void *ctx)
{
	__u32 zero = 0, len = 0;
	__u64 hash = 0;
	struct irq_stack_cache *c = bpf_map_lookup_elem(&irq_cache, &zero);
	struct kstack_buf *b = read_kstack(ctx, KBUF_WAKING, &len, &hash);

	if (!c || !b)
		return 0;
	if (c->id && c->hash == hash)
		return c->id;
	c->hash = hash;
	c->id = send_kstack(b, len, 0, 0, STACK_SLOT_INTERRUPT, KBUF_WAKING);
	return c->id;
}

/* Who woke a sleeping thread we track. Runs in the waker's context; for a
 * wakeup from an interrupt that is the interrupted task, whose kernel stack
 * shows the interrupt: userspace tells the two apart. */
SEC("raw_tracepoint/sched_waking")
int on_sched_waking(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *p = (struct task_struct *)((__u64 *)ctx)[0];
	__u32 wakee = BPF_CORE_READ(p, pid);
	struct thread_state *t = bpf_map_lookup_elem(&threads, &wakee);

	/* Still in its sleep's state here: TASK_WAKING is set after this. A
	 * wakee still on its CPU (woken between saying it sleeps and leaving)
	 * never left: nothing to open. */
	if (!t && !BPF_CORE_READ(p, on_cpu))
		t = first_seen(p, wakee, fold_raw_state(false, BPF_CORE_READ(p, __state)), bpf_get_smp_processor_id());
	if (!t || !t->off_ts)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	__u32 waker_tid = (__u32)pid_tgid;

	bool irq = on_interrupt_stack(ctx);

	t->waker_pid = pid_tgid >> 32;
	t->waker_tid = waker_tid;
	t->waker_irq = irq;
	bpf_get_current_comm(t->waker_comm, sizeof(t->waker_comm));
	/* The waker's stacks are the costly part; a wakee that slept less
	 * than offcpu_min_ns is folded with its waker's ids only: skip them. */
	if (now - t->off_ts >= offcpu_min_ns && !irq) {
		struct stack_request *r = stack_request_for(KBUF_WAKING);

		if (r) {
			r->pid = pid_tgid >> 32;
			r->tid = waker_tid;
			r->slot = STACK_SLOT_CALL;
			r->what = CALL_SITE_WAKEUP;
			r->cache_tid = waker_tid;
			r->target_tid = wakee;
			r->now = now;
			/* Writes the id, then wake_ts; last (a tail call). */
			stack_then_finish(ctx, r, KBUF_WAKING,
					  waker_tid ? bpf_map_lookup_elem(&threads, &waker_tid) : NULL);
			return 0;
		}
		t->waker_stack_id = 0;
	} else if (now - t->off_ts >= offcpu_min_ns) {
		/* The interrupted task is no waker: its user context means
		 * nothing here, and its cached stacks stay its own. */
		t->waker_stack_id = interrupt_stack(ctx);
	} else {
		t->waker_stack_id = 0;
	}
	/* Last: the switch-in trusts the waker fields once it sees this. */
	t->wake_ts = now;
	return 0;
}

/* A wakee is on a run queue: runnable from now, as the kernel's run delay
 * counts it (see landing). Runs where the wakeup lands: the waker's
 * context, or the wakee's CPU when it was sent there. */
SEC("raw_tracepoint/sched_wakeup")
int on_sched_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *p = (struct task_struct *)((__u64 *)ctx)[0];
	__u32 wakee = BPF_CORE_READ(p, pid);
	struct thread_state *t = bpf_map_lookup_elem(&threads, &wakee);

	if (t && t->off_ts)
		t->queued_ts = bpf_ktime_get_ns();
	return 0;
}

#endif /* __SCHED_WAKEUPS_BPF_H */
