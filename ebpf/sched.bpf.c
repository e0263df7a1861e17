// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sched.bpf.c: why threads are not running, and block I/O.
 *
 * sched_switch records, per thread, when and in which state it left the CPU
 * and its stacks there; sched_waking records who woke it, with the waker's
 * stacks; when the thread runs again one offcpu_event goes to the `events`
 * ring if the interval lasted at least offcpu_min_ns, else its length is
 * added to the thread's folded totals for its reason, sent as one
 * folded_event once they reach fold_flush_ns. Every switch is counted, so
 * totals stay exact whatever is dropped. A thread's last switch (it died)
 * sends its totals and deletes its state, so the map holds live threads only.
 *
 * Stacks are sent inline as stack_events (see sysprof.h), once per process
 * and content (send_scratch), and only the words they use: each thread
 * caches, per slot (preempted, waiting, waking or starting a request), the
 * user context of the last stack it used there, and reuses its id without
 * walking; a walk whose stack its process already sent refers to that.
 *
 * Block requests are keyed by the request itself (raw tracepoints pass it)
 * from creation to their final completion, so concurrent requests for the
 * same sector never overwrite each other; a request merged into another is
 * forgotten, partial completions wait for the last one.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sysprof.h"

#define PF_KTHREAD 0x00200000
#define TASK_INTERRUPTIBLE 0x1
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_DEAD 0x80
#define TASK_NOLOAD 0x400
#define REQ_OP_MASK 0xff
#define CALL_SITE_WAKEUP 1
#define CALL_SITE_IO 2

const volatile __u32 targ_tgid = 0;
/* The profiler's own process (see sched_tracked()). */
const volatile __u32 self_tgid = 0;
const volatile __u64 offcpu_min_ns = 100000;
/* Folded short waits of a thread are sent once they add up to this, or
 * once the first of them is this old (so a window's totals arrive in it). */
const volatile __u64 fold_flush_ns = 10000000;
const volatile __u64 fold_span_ns = 1000000000;
/* A folded run whose waits were this long before their wakeups is sent when
 * a wait with another waker comes, so it keeps its waker; a shorter one
 * becomes FOLD_WAKER_MIXED. At least ten folded waits per record. */
const volatile __u64 fold_waker_min_ns = 1000000;
const volatile __u64 wakeup_bytes = 64 * 1024;
/* Set by userspace on kernels >= 5.18, where sched_switch passes prev_state. */
const volatile bool has_prev_state_arg = false;
/* on_block_start is attached to block_io_start (6.5+), which fires once per
 * request, rather than block_rq_insert, which fires again on a requeue. */
const volatile bool start_fires_once = false;
/* Dwarf mode: bytes of user stack copied with each stack (0: frame pointers). */
const volatile __u32 stack_copy = 0;
/* Unwind user stacks in the kernel; the tables are the sampler's (the
 * loader hands this object the sampler's unwind_rows and unwind_processes). */
const volatile __u32 kernel_unwind = 0;

/* The main thread's short stacks are copied by copy_main_stack. */
#define USTACK_NO_EXTENT
#include "ustack.bpf.h"
#include "unwind.bpf.h"
#include "runtimes/python.bpf.h"

struct io_start {
	__u64 ts;
	__u64 issue_ts;
	__u64 stack_id;
	__u64 sector;
	__u32 pid;
	__u32 tid;
	__u32 bytes;
	__u32 dev;
	__u32 cmd_flags;
	__u32 flags;            /* IO_START_AT_ISSUE */
	__u8 comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

/* Preallocated (allocated as threads appear, one in a run was lost to an
 * empty allocation cache beside pgbench): sized by userspace from the
 * threads the machine has, 16,384 to 65,536 entries of ~0.4 KiB. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* A zeroed thread_state to insert new threads from: the struct is too
 * large for the BPF stack. Never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} empty_state SEC(".maps");

/* In-flight block requests by `struct request *`: sized by userspace from
 * what the machine's block devices can hold in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct io_start);
} io_starts SEC(".maps");

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

/* Per CPU and program (switch, waking, block start, block issue): a kernel
 * stack being read. One entry per program: a program interrupted by an
 * interrupt that runs another must not share its buffer (a request issued
 * from a disk's completion, inside a task's block_io_start, overwrote the
 * record being built there: its id was kept for a stack never sent). */
struct kstack_buf {
	__u64 ip[MAX_STACK_DEPTH];
};

#define KBUF_SWITCH 0
#define KBUF_WAKING 1
#define KBUF_BLOCK 2
#define KBUF_ISSUE 3
#define KBUFS 4

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBUFS);
	__type(key, __u32);
	__type(value, struct kstack_buf);
} kstack_bufs SEC(".maps");

/* Per-CPU sequence numbers of stack records. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stack_seq SEC(".maps");

/* Shared stacks by content (STACK_SHARED): the hash of a stack's words,
 * its process and mm; and how many were inserted ([0], by this side) and
 * deleted ([1], by userspace, once their process is gone), so an insert
 * past STACK_SHARED_MAX, which would fail after the record said it was
 * shared, is not tried. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* per stack shared, not 2.6 MB up front */
	__uint(max_entries, STACK_SHARED_MAX);
	__type(key, __u64);
	__type(value, __u8);
} stack_ids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} stack_ids_used SEC(".maps");

/* Kernel-unwind mode builds each stack record here, one buffer per kind of
 * place (KBUF_*: a wakeup from an interrupt can run inside a switch's
 * program on the same CPU), and sends only the frames used. */
struct stack_scratch {
	struct stack_event e;
	/* the user part (at most UNWIND_MAX_FRAMES words), then the kernel's */
	__u64 frames[UNWIND_MAX_FRAMES + MAX_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBUFS);
	__type(key, __u32);
	__type(value, struct stack_scratch);
} stack_scratch SEC(".maps");

/* A stack record with its user stack copy, built here and sent at the size
 * copied (a reservation is of a fixed size: every copy took the ring room of
 * the largest). One per CPU and KBUF_* place (cpu * KBUFS + place); too large
 * for a per-CPU map's value. */
struct copy_scratch {
	struct stack_event e;
	/* the copy, padded to 8 bytes, then the kernel stack */
	__u8 copy[MAX_STACK_COPY + MAX_STACK_DEPTH * sizeof(__u64)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by userspace: KBUFS per possible CPU, with a copy */
	__type(key, __u32);
	__type(value, struct copy_scratch);
} copy_scratch SEC(".maps");

#include "drops.bpf.h"

/* Wake the reader when a record of `size` bytes takes the data waiting in
 * the ring past a multiple of wakeup_bytes: once a watermark's worth, not
 * at every record past it (a reader that could take no more was woken by
 * every switch; see sample.bpf.c's wakeup_flag). `reserved`: the record is
 * in the ring already (reserved, not yet submitted) and counted in what
 * waits. */
static __always_inline long submit_flags(__u64 size, bool reserved)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 before = reserved && avail >= size ? avail - size : avail;
	__u64 w = wakeup_bytes ? wakeup_bytes : 1;

	return before / w != (before + size) / w ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline bool tracked(__u32 tgid)
{
	return !targ_tgid || tgid == targ_tgid;
}

/* Whether a thread's switches and wakeups are traced: the profiler's own
 * are not. Their waits are the rings' reader and the collector waiting for
 * records, hundreds a second: a third of a busy recording's thread data,
 * fed to the ring they are woken by. Its CPU samples are kept (the sampler
 * has no such filter), and so is its block I/O (a completion without its
 * start would count as a loss), so what it costs still shows. */
static __always_inline bool sched_tracked(__u32 tgid)
{
	return tracked(tgid) && !(self_tgid && tgid == self_tgid);
}

static __always_inline __u64 next_stack_id(void)
{
	__u32 zero = 0;
	__u64 *seq = bpf_map_lookup_elem(&stack_seq, &zero);

	if (!seq)
		return 0;
	*seq += 1;
	return (*seq << 12) | (bpf_get_smp_processor_id() & 0xfff);
}

/* A stack record was lost (counted); stack ids are never this. */
#define STACK_DROPPED ((__u64)-1)

/* One step of hashing a stack record's words (bpf_loop: one iteration
 * verified, not 1,151). */
struct hash_walk {
	__u64 *words;
	__u64 h;
};

static long hash_step(__u32 i, void *ctx)
{
	struct hash_walk *w = ctx;

	if (i >= UNWIND_MAX_FRAMES + MAX_STACK_DEPTH)
		return 1;
	w->h = (w->h ^ w->words[i]) * 0x100000001b3ULL;
	w->h ^= w->h >> 29;
	return 0;
}

/* Send the record built in `sc` (its `words` after the header, `size`
 * bytes in all) once per process and content: a stack any thread of the
 * process sent before is referred to by its content's hash, and not sent.
 * On a switch-heavy server most switches are at a few places (a backend
 * waiting for its client, for a lock, for the disk), reached by many
 * threads: the per-thread cache sent each of them per thread and after
 * every other place the thread went in between. Returns the id, or
 * STACK_DROPPED. A global function, verified once: inlined at its three
 * call sites in each program it tripled the tracer's verification. */
__noinline __u64 send_scratch(struct stack_scratch *sc, __u32 words, __u64 size)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 zero = 0;

	if (!sc)
		return STACK_DROPPED;
	/* Bounded again here: a global function's arguments are any value. */
	if (size > sizeof(*sc))
		size = sizeof(*sc);
	struct hash_walk w = { .words = sc->frames };

	w.h = 0xcbf29ce484222325ULL ^ ((__u64)sc->e.pid << 32) ^ sc->e.flags;
	/* Read, not loaded: the verifier lets no pointer into arithmetic. */
	__u64 mm = (__u64)BPF_CORE_READ(task, mm);

	w.h = (w.h ^ mm) * 0x100000001b3ULL;
	w.h = (w.h ^ ((__u64)sc->e.ustack_len << 32 | sc->e.kstack_len)) * 0x100000001b3ULL;
	w.h = (w.h ^ ((__u64)sc->e.py_len << 32 | (__u64)sc->e.py_end << 16 | sc->e.unwind_end)) * 0x100000001b3ULL;
	if (words > UNWIND_MAX_FRAMES + MAX_STACK_DEPTH)
		words = UNWIND_MAX_FRAMES + MAX_STACK_DEPTH;
	bpf_loop(words, hash_step, &w, 0);
	__u64 id = w.h | STACK_ID_SHARED;

	if (bpf_map_lookup_elem(&stack_ids, &id))
		return id;
	__u32 one_key = 1;
	__u64 *used = bpf_map_lookup_elem(&stack_ids_used, &zero);
	__u64 *freed = bpf_map_lookup_elem(&stack_ids_used, &one_key);
	/* Room kept for records of other CPUs between the check and their insert. */
	bool share = used && freed && *used - *freed < STACK_SHARED_MAX - 64;

	if (share) {
		sc->e.id = id;
		sc->e.flags |= STACK_SHARED;
	}
	if (bpf_ringbuf_output(&events, sc, size, submit_flags(size, false))) {
		count_drop(DROP_STACK_RECORD);
		return STACK_DROPPED;
	}
	/* Inserted once the record is in the ring, ahead of any record that
	 * finds it; another CPU that sent the same stack meanwhile has inserted
	 * it already (its record is as good as ours). */
	__u8 one = 1;

	if (share && !bpf_map_update_elem(&stack_ids, &id, &one, BPF_NOEXIST))
		__sync_fetch_and_add(used, 1);
	return sc->e.id;
}


/* Kernel-unwind mode: walk the user stack here and send the frames; 0
 * where the walk hands over (tables not loaded yet, JIT code only userspace
 * can walk, an address the entry does not cover): the caller then sends a
 * copy, as without kernel unwinding. */
static __always_inline __u64 send_unwound_stack(void *ctx, __u32 pid, __u32 tid, __u32 slot, __u64 ip, __u64 sp, __u64 bp, __u32 kbuf)
{
	struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);
	__u64 regs[3] = { ip, sp, bp }, size;
	struct py_out py = {};
	__u32 n, end;
	long len;

	if (!sc)
		return 0;
	n = unwind_user(pid, regs, sc->frames, &end, stack_copy != 0);
	if (n > UNWIND_MAX_FRAMES)
		n = UNWIND_MAX_FRAMES;
	py.at = n;
	python_frames(&py, pid, tid, bpf_get_current_task(), (struct unwind_frames *)sc->frames);
	__u32 flags = STACK_KERNEL_UNWOUND;

	/* The caller's copy is 32 KiB, the room of many intervals: with the
	 * reader behind (the ring over half full) the walk so far goes alone,
	 * a cut stack said as such (handovers_skipped), and the ring keeps its
	 * room for the intervals themselves. */
	/* A waker's stack is the context of a wakeup, not a sample: it is
	 * never handed over as a copy, and ends where the walk did (its end
	 * says why). Waking is the hottest path there is: beside a fork loop,
	 * new processes' wakeups (their tables still pending) sent a copy
	 * each, and the ring passed half full. */
	if (stack_copy && unwind_hands_over(end, n, pid) && kbuf != KBUF_WAKING) {
		if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) <= bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2)
			return 0;
		flags |= STACK_HANDOVER_SKIPPED;
	}
	if (n > UNWIND_MAX_FRAMES)
		n = UNWIND_MAX_FRAMES;
	sc->e.kind = RECORD_STACK;
	sc->e.id = next_stack_id();
	sc->e.flags = flags;
	sc->e.pid = pid;
	sc->e.tid = tid;
	sc->e.ustack_len = n;
	sc->e.stack_size = 0;
	sc->e.slot = slot;
	sc->e.unwind_end = end;
	sc->e.py_len = py.n;
	sc->e.py_end = py.end;
	sc->e.user_ip = ip;
	sc->e.user_sp = sp;
	sc->e.user_bp = bp;
	__u32 used = n + 2 * (py.n & (PY_MAX_FRAMES * 2 - 1));

	if (used > UNWIND_MAX_FRAMES)
		used = UNWIND_MAX_FRAMES;
	len = bpf_get_stack(ctx, &sc->frames[used], MAX_STACK_DEPTH * sizeof(__u64), 0);
	if (len < 0) {
		sc->e.flags |= STACK_KSTACK_FAILED;
		count_drop(DROP_KSTACK);
		len = 0;
	}
	sc->e.kstack_len = len / sizeof(__u64);
	size = sizeof(sc->e) + (__u64)(used + sc->e.kstack_len) * sizeof(__u64);
	if (size > sizeof(*sc))
		size = sizeof(*sc);
	return send_scratch(sc, used + sc->e.kstack_len, size);
}

/* The main thread's stack (main_stack_extent), copied into cs in one read
 * to just past its top; 0 where that does not apply (then copy_user_stack
 * copies stack_copy bytes). A function of its own, verified once: inlined
 * at each of send_stack's call sites, its length (known only at run time)
 * made the verifier keep every path apart (3 s more of load, measured). */
__noinline __u32 copy_main_stack(struct copy_scratch *cs, __u64 sp)
{
	if (!cs)
		return 0;
	__u32 extent = main_stack_extent(sp) & (MAX_STACK_COPY - 1);

	if (extent && !bpf_probe_read_user(cs->copy, extent, (void *)sp))
		return extent;
	return 0;
}

/* The record's fields, none of its stacks. */
static __always_inline void stack_event_header(struct stack_event *e, __u32 flags, __u32 pid, __u32 tid, __u32 slot, __u64 ip, __u64 sp, __u64 bp)
{
	e->kind = RECORD_STACK;
	e->id = next_stack_id();
	e->flags = flags;
	e->pid = pid;
	e->tid = tid;
	e->kstack_len = 0;
	e->ustack_len = 0;
	e->stack_size = 0;
	e->slot = slot;
	e->unwind_end = 0;
	e->py_len = 0;
	e->py_end = 0;
	e->user_ip = ip;
	e->user_sp = sp;
	e->user_bp = bp;
}

/* The kernel stack into `at` (room for MAX_STACK_DEPTH words); its length. */
static __always_inline __u32 read_kernel_part(void *ctx, struct stack_event *e, __u64 *at)
{
	long len = bpf_get_stack(ctx, at, MAX_STACK_DEPTH * sizeof(__u64), 0);

	if (len < 0) {
		e->flags |= STACK_KSTACK_FAILED;
		count_drop(DROP_KSTACK);
		return 0;
	}
	e->kstack_len = len / sizeof(__u64);
	return e->kstack_len;
}

/* Send the kernel and user stacks of the current task as a stack_event;
 * returns its id, or 0 if the ring was full. */
static __always_inline __u64 send_stack(void *ctx, __u32 pid, __u32 tid, __u32 slot, __u64 ip, __u64 sp, __u64 bp, __u32 kbuf)
{
	if (kernel_unwind) {
		__u64 id = send_unwound_stack(ctx, pid, tid, slot, ip, sp, bp, kbuf);

		if (id)
			return id == STACK_DROPPED ? 0 : id;
	}
	if (!stack_copy) {
		/* Frame pointers: the user frames, then the kernel's after them. */
		struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);

		if (!sc) {
			count_drop(DROP_STACK_RECORD);
			return 0;
		}
		stack_event_header(&sc->e, 0, pid, tid, slot, ip, sp, bp);
		long len = bpf_get_stack(ctx, sc->frames, MAX_STACK_DEPTH * sizeof(__u64), BPF_F_USER_STACK);
		__u32 used = 0;

		if (len < 0) {
			sc->e.flags |= STACK_USTACK_FAILED;
			count_drop(DROP_USTACK);
		} else {
			used = (len / sizeof(__u64)) & 0xff;
			if (used > MAX_STACK_DEPTH)
				used = MAX_STACK_DEPTH;
		}
		sc->e.ustack_len = used;
		__u32 klen = read_kernel_part(ctx, &sc->e, &sc->frames[used]);
		__u64 size = sizeof(sc->e) + (__u64)(used + klen) * sizeof(__u64);

		if (size > sizeof(*sc))
			size = sizeof(*sc);
		__u64 id = send_scratch(sc, used + klen, size);

		return id == STACK_DROPPED ? 0 : id;
	}
	/* With a copy: built in this CPU's scratch, sent at the size copied,
	 * the kernel stack after it. */
	__u32 key = bpf_get_smp_processor_id() * KBUFS + kbuf;
	struct copy_scratch *cs = bpf_map_lookup_elem(&copy_scratch, &key);

	if (!cs) {
		count_drop(DROP_STACK_RECORD);
		return 0;
	}
	struct stack_event *e = &cs->e;

	stack_event_header(e, STACK_USER_REGS, pid, tid, slot, ip, sp, bp);
	__u32 copied = copy_main_stack(cs, sp);

	if (!copied)
		copied = copy_user_stack(cs->copy, sp);
	e->stack_size = copied;
	if (!e->stack_size) {
		e->flags |= STACK_USTACK_FAILED;
		count_drop(DROP_USTACK);
	}
	__u32 padded = (copied + 7) & ~7U;

	if (padded > MAX_STACK_COPY)
		padded = MAX_STACK_COPY;
	__u32 klen = read_kernel_part(ctx, e, (__u64 *)&cs->copy[padded]);
	__u64 size = sizeof(*e) + padded + (__u64)klen * sizeof(__u64);

	if (size > sizeof(*cs))
		size = sizeof(*cs);
	if (bpf_ringbuf_output(&events, cs, size, submit_flags(size, false))) {
		count_drop(DROP_STACK_RECORD);
		return 0;
	}
	return e->id;
}

/* One step of hashing a kernel stack (bpf_loop: the verifier checks one
 * step, not MAX_STACK_DEPTH unrolled ones in each program reading one). */
struct kstack_hash {
	__u64 *ip;
	__u64 len;
	__u64 h;
};

static long kstack_hash_step(__u32 i, struct kstack_hash *c)
{
	if (i >= c->len || i >= MAX_STACK_DEPTH)
		return 1;
	c->h = (c->h ^ c->ip[i]) * 0x100000001b3ULL;
	return 0;
}

/* Read the current kernel stack into the per-CPU buffer `which`; returns
 * the buffer and its length (entries) and a hash of it, which is what
 * identifies a kernel thread's or an interrupt's place (no user context). */
static __always_inline struct kstack_buf *read_kstack(void *ctx, __u32 which, __u32 *len, __u64 *hash)
{
	struct kstack_buf *b = bpf_map_lookup_elem(&kstack_bufs, &which);
	long n;

	if (!b)
		return NULL;
	n = bpf_get_stack(ctx, b->ip, sizeof(b->ip), 0);
	if (n <= 0) {
		count_drop(DROP_KSTACK);
		return NULL;
	}
	*len = (n / sizeof(__u64)) & 0xff;
	struct kstack_hash c = { .ip = b->ip, .len = *len, .h = 0xcbf29ce484222325ULL };

	bpf_loop(MAX_STACK_DEPTH, kstack_hash_step, &c, 0);
	*hash = c.h;
	return b;
}

/* Send a kernel stack read by read_kstack (no user part); returns its id. */
static __always_inline __u64 send_kstack(struct kstack_buf *b, __u32 len, __u32 pid, __u32 tid, __u32 slot, __u32 kbuf)
{
	/* Built in the place's scratch and sent at the length read. */
	struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);

	if (!sc) {
		count_drop(DROP_STACK_RECORD);
		return 0;
	}
	stack_event_header(&sc->e, STACK_KERNEL_THREAD, pid, tid, slot, 0, 0, 0);
	sc->e.kstack_len = len > MAX_STACK_DEPTH ? MAX_STACK_DEPTH : len;
	__builtin_memcpy(sc->frames, b->ip, sizeof(b->ip));
	__u64 size = sizeof(sc->e) + (__u64)sc->e.kstack_len * sizeof(__u64);

	if (size > sizeof(*sc))
		size = sizeof(*sc);
	__u64 id = send_scratch(sc, sc->e.kstack_len, size);

	return id == STACK_DROPPED ? 0 : id;
}

/* The current task's user registers (saved where it entered the kernel). */
static __always_inline bool current_user_regs(__u64 *ip, __u64 *sp, __u64 *bp)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (task->flags & PF_KTHREAD) {
		*ip = *sp = *bp = 0;
		return false;
	}
	/* A BTF pointer: plain loads checked by the verifier, not three
	 * bpf_probe_read_kernel calls on every switch. */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	*ip = PT_REGS_IP(regs);
	*sp = PT_REGS_SP(regs);
	*bp = PT_REGS_FP(regs);
	return true;
}

/* What a tracer program asks of a stack (stack_then_finish): whose stack,
 * at which place, which thread's state caches it, and what to do with its
 * id, which finish_stack does where the id is known: in the program itself
 * for a kernel thread, in walk_stack for a user thread. One per CPU and
 * place (KBUF_*); a place's program never nests in itself. */
struct stack_request {
	__u64 now;              /* a wakeup: its time (wake_ts, written last) */
	__u64 rq;               /* a request: its key in io_starts */
	__u32 pid;
	__u32 tid;
	__u32 slot;             /* STACK_SLOT_* */
	__u32 what;             /* the off-CPU state, or CALL_SITE_* */
	__u32 cache_tid;        /* whose thread state caches the stack (0: none) */
	__u32 target_tid;       /* a switch: the thread leaving; a wakeup: the wakee */
	__u32 below;            /* stack_pending before this request (see there) */
	__u32 at_issue;         /* a request first seen at issue */
	struct io_start io;     /* a request: its start, sent to io_starts with the id */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBUFS);
	__type(key, __u32);
	__type(value, struct stack_request);
} stack_requests SEC(".maps");

/* Per CPU: the place (KBUF_* + 1; 0: none) whose request walk_stack is
 * to serve. A tail call passes nothing but the context, so the caller
 * writes its place here. An interrupt between that write and walk_stack's
 * read can run another place's program on this CPU, which writes its own:
 * each request keeps the value it found (`below`) and walk_stack puts it
 * back as soon as it has read its own, so nested requests unwind in order. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stack_pending SEC(".maps");

/* walk_stack, put here by userspace once verified. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stack_walker SEC(".maps");

/* Do what `r` asked with the stack id `id` (0: none). `place` is a constant
 * in the tracer programs (the verifier keeps one branch) and read from the
 * request in walk_stack. */
static __always_inline void finish_stack(struct stack_request *r, __u32 place, __u64 id)
{
	if (place == KBUF_SWITCH) {
		struct thread_state *t = bpf_map_lookup_elem(&threads, &r->target_tid);

		if (t)
			t->stack_id = id;
	} else if (place == KBUF_WAKING) {
		struct thread_state *t = bpf_map_lookup_elem(&threads, &r->target_tid);

		if (t) {
			t->waker_stack_id = id;
			/* Last: the switch-in trusts the waker fields once it sees this. */
			t->wake_ts = r->now;
		}
	} else {
		__u64 key = r->rq;

		r->io.stack_id = id;
		if (start_fires_once && !r->at_issue) {
			/* A request (the same `struct request`, reused) can only start
			 * again after it ended: an entry still here is a request whose
			 * completion the program never saw. Rare (7 of 12,000 reads
			 * after 2 ms sleeps, the loop request and the one under it
			 * together; the kernel counts no recursion miss); counted, and
			 * replaced so that this request gets its own times. */
			if (bpf_map_lookup_elem(&io_starts, &key))
				count_drop(DROP_IO_UNTRACKED);
			if (bpf_map_update_elem(&io_starts, &key, &r->io, BPF_ANY))
				count_drop(DROP_STATE_FULL);
			return;
		}
		/* NOEXIST: a requeued request keeps its first start. */
		if (bpf_map_update_elem(&io_starts, &key, &r->io, BPF_NOEXIST) && !bpf_map_lookup_elem(&io_starts, &key))
			count_drop(DROP_STATE_FULL);
	}
}

/* The cache entry of `t` (NULL: none) for `r`'s slot. */
static __always_inline struct stack_cache *stack_cache_of(struct thread_state *t, struct stack_request *r)
{
	__u32 slot = r->slot;

	if (!t)
		return NULL;
	if (slot >= STACK_SLOTS)
		slot = STACK_SLOT_CALL;
	return &t->cache[slot];
}

/* A kernel thread's stack id at `r`'s place: its kernel stack, which is
 * also what identifies the place (no user context). Cached in `t`. */
static __always_inline __u64 kernel_thread_stack(void *ctx, struct stack_request *r, struct thread_state *t, __u32 kbuf)
{
	__u32 len = 0;
	__u64 hash = 0;
	struct kstack_buf *b = read_kstack(ctx, kbuf, &len, &hash);
	struct stack_cache *c = stack_cache_of(t, r);

	if (!b)
		return 0;
	if (c && c->id && c->ip == hash && !c->sp && !c->bp && c->what == r->what && !c->context)
		return c->id;
	__u64 id = send_kstack(b, len, r->pid, r->tid, r->slot, kbuf);

	if (c) {
		c->ip = hash;
		c->sp = 0;
		c->bp = 0;
		c->what = r->what;
		c->context = 0;
		c->id = id;
	}
	return id;
}

/* A user thread's place (see user_stack_at): whose, in which slot, doing
 * what, and its user context. */
struct place_key {
	__u32 tid;
	__u32 what;     /* slot << 16 | the request's `what` */
	__u64 born;     /* the thread's start time: a reused tid is another thread */
	__u64 mm;       /* its address space: after an exec, another program */
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 context;  /* as stack_cache's */
};

/* The stack ids of the places threads were at before their last, by
 * place, least recently used out. A server's thread goes round a few
 * places (a backend: its client's socket, the WAL's lock, the disk); the
 * thread's own one-place cache saw it leave each and walked it again on
 * return: beside pgbench, 29 % of switch-outs and 38 % of wakeups walked
 * their stack, 17 us each, 0.8 s of CPU in 5 s. Preallocated by the
 * kernel (an LRU map always is): ~1 MB. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PLACE_IDS_MAX);
	__type(key, struct place_key);
	__type(value, __u64);
} place_ids SEC(".maps");

/* A hash of the PLACE_TOP_BYTES at the top of a user stack (0: not
 * readable), read into the place's scratch buffer, which a walk overwrites
 * after. */
static __always_inline __u64 stack_top_hash(__u64 sp, __u32 kbuf)
{
	struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);
	__u64 h = 0xcbf29ce484222325ULL;

	if (!sc || bpf_probe_read_user(sc->frames, PLACE_TOP_BYTES, (void *)sp))
		return 0;
	for (int i = 0; i < PLACE_TOP_BYTES / 8; i++)
		h = (h ^ sc->frames[i]) * 0x100000001b3ULL;
	return h;
}

/* The current user thread's stack id at `r`'s place (walk_stack only).
 * A thread that does the same thing from the same place as before in
 * that slot reuses the stack sent then: the common case on a switch-heavy
 * machine, where walking (or copying) stacks is the tracer's main cost.
 * The place is the user context (ip, sp, bp), found without walking
 * anything. One slot per kind of place, so a thread that alternates
 * between being preempted in one place and sleeping in another keeps both;
 * its last place per slot in its state, places before that in place_ids. */
static __always_inline __u64 user_stack_at(void *ctx, struct stack_request *r, __u32 kbuf)
{
	__u64 ip, sp, bp;

	if (!current_user_regs(&ip, &sp, &bp))
		return 0;
	/* A Python thread's native place is the same wherever in its Python
	 * code it is (Python calls do not nest C frames): its chain is part
	 * of the place. Hashed without being kept: one read per frame. */
	struct py_out py = {};

	if (kernel_unwind)
		python_frames(&py, r->pid, r->tid, bpf_get_current_task(), NULL);
	__u64 context = py.hash;
	/* A JVM's stacks read before its interpreter was known have no Java
	 * methods: once it is, the same place is read again. */
	if (kernel_unwind) {
		struct unwind_process *up = bpf_map_lookup_elem(&unwind_processes, &r->pid);

		if (up)
			context ^= up->java_interp_start;
	}
	/* Two places can have the same registers: the same call into libc at
	 * the same depth from two functions (nap_a and nap_b in the tests'
	 * places.c, or a handler called from two loops). What sits at the
	 * top of the stack tells them apart: the return addresses into the
	 * callers, and the locals of the frames there. */
	context ^= stack_top_hash(sp, kbuf);
	struct thread_state *t = r->cache_tid ? bpf_map_lookup_elem(&threads, &r->cache_tid) : NULL;
	struct stack_cache *c = stack_cache_of(t, r);

	if (c && c->id && c->ip == ip && c->sp == sp && c->bp == bp && c->what == r->what && c->context == context)
		return c->id;
	struct task_struct *task = bpf_get_current_task_btf();
	struct place_key k = {
		.tid = r->tid,
		.what = r->slot << 16 | (r->what & 0xffff),
		.born = task->start_time,
		.mm = (__u64)BPF_CORE_READ(task, mm),
		.ip = ip,
		.sp = sp,
		.bp = bp,
		.context = context,
	};
	__u64 *known = r->tid ? bpf_map_lookup_elem(&place_ids, &k) : NULL;
	__u64 id = known ? *known : 0;

	if (!id) {
		id = send_stack(ctx, r->pid, r->tid, r->slot, ip, sp, bp, kbuf);
		/* Only a shared stack: userspace keeps it while the process
		 * lives, where it keeps a thread's others only while newer ones
		 * of its slot are few. 0: none sent (counted), walked again. */
		if ((id & STACK_ID_SHARED) && r->tid)
			bpf_map_update_elem(&place_ids, &k, &id, BPF_ANY);
	}
	if (c) {
		c->ip = ip;
		c->sp = sp;
		c->bp = bp;
		c->what = r->what;
		c->context = context;
		c->id = id;
	}
	return id;
}

/* The current thread's stack at `place`, then what `r` asks done with its
 * id. A kernel thread's here; a user thread's in walk_stack, tail-called:
 * the walker is verified once for the four places rather than in each of
 * their programs (it was 0.6 s of a start, most of the tracer's load). Does
 * not return where the tail call is made: nothing may follow it in the
 * caller. `cache` is the state caching the stack (NULL: none); r->cache_tid
 * names it for walk_stack. */
static __always_inline void stack_then_finish(void *ctx, struct stack_request *r, __u32 place, struct thread_state *cache)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 zero = 0;

	if (task->flags & PF_KTHREAD) {
		finish_stack(r, place, kernel_thread_stack(ctx, r, cache, place));
		return;
	}
	__u32 *pending = bpf_map_lookup_elem(&stack_pending, &zero);

	if (pending) {
		r->below = *pending;
		*pending = place + 1;
		bpf_tail_call(ctx, &stack_walker, 0);
		/* Not in place (never, once loaded): no stack. */
		*pending = r->below;
	}
	count_drop(DROP_STACK_RECORD);
	finish_stack(r, place, 0);
}

/* The stack walker of the tracer's four places (see stack_then_finish). */
SEC("raw_tracepoint")
int walk_stack(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	__u32 *pending = bpf_map_lookup_elem(&stack_pending, &zero);

	if (!pending)
		return 0;
	__u32 place = *pending - 1;

	if (place >= KBUFS)
		return 0;
	struct stack_request *r = bpf_map_lookup_elem(&stack_requests, &place);

	if (!r)
		return 0;
	*pending = r->below;
	finish_stack(r, place, user_stack_at(ctx, r, place));
	return 0;
}

/* This CPU's request for `place`. */
static __always_inline struct stack_request *stack_request_for(__u32 place)
{
	return bpf_map_lookup_elem(&stack_requests, &place);
}

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
	e->_pad = 0;
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
	e->_pad = 0;
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

/* A wait (not a preemption) ends: when one of the thread's folded runs
 * (woken by tasks, or by interrupts) has a place other than this wait's,
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
	return 0;
}

/* Close tid's open interval at `end`: fold it when short, else send it. */
static __always_inline void close_interval(__u32 tid, struct thread_state *t, __u64 end, __u32 cpu, const void *comm,
					   bool comm_is_current, __u32 flags)
{
	__u64 delta = end - t->off_ts;

	if (t->off_state != OFFCPU_PREEMPTED)
		leave_thread_place(tid, t);
	if (delta < offcpu_min_ns) {
		fold_short(tid, t, end);
		return;
	}
	struct offcpu_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		t->off_ts = 0;
		t->off_flags = 0;
		return;
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
	e->flags = flags | t->off_flags;
	if (comm_is_current)
		bpf_get_current_comm(e->comm, TASK_COMM_LEN);
	else
		bpf_probe_read_kernel(e->comm, TASK_COMM_LEN, comm);
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
}

/* tid's state, inserted zeroed (pid set) when it has none; NULL when the
 * map is full. */
static __always_inline struct thread_state *new_state(__u32 tid, __u32 tgid)
{
	__u32 zero = 0;
	struct thread_state *empty = bpf_map_lookup_elem(&empty_state, &zero);
	struct thread_state *t;

	if (!empty)
		return NULL;
	bpf_map_update_elem(&threads, &tid, empty, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (t && !t->pid)
		t->pid = tgid;
	return t;
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

		close_interval(tid, t, ran < since ? now - ran : t->off_ts, cpu, 0, true, OFFCPU_END_INFERRED);
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
static __always_inline void switch_in(struct task_struct *next, __u32 tid, const void *next_comm, __u64 now, __u32 cpu)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &tid);

	if (!t)
		t = first_seen(next, tid, OFFCPU_PREEMPTED, cpu);
	if (!t || !t->off_ts)
		return;
	close_interval(tid, t, now, cpu, next_comm, false, 0);
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
		switch_in(next, next_tid, __builtin_preserve_access_index(&next->comm), now, cpu);
	if (prev_tid)
		switch_out(ctx, prev_tid, preempt, raw, now, cpu);
	return 0;
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

static __always_inline __u32 request_dev(struct request *rq)
{
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);

	if (!disk)
		return 0;
	return (BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor);
}

static __always_inline __u32 io_flags(__u32 cmd_flags)
{
	__u32 f = 0;

	if (cmd_flags & (1U << 18))
		f |= IO_PREFLUSH;
	if (cmd_flags & (1U << 17))
		f |= IO_FUA;
	if (cmd_flags & (1U << 11))
		f |= IO_SYNC;
	if (cmd_flags & (1U << 12))
		f |= IO_META;
	if (cmd_flags & (1U << 19))
		f |= IO_READAHEAD;
	return f;
}

/* A request is created in the context of the task submitting it (or, for
 * flushes and requests issued directly, first seen at issue). */
static __always_inline int start_request(void *ctx, struct request *rq, bool at_issue, __u32 kbuf)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u32 pid = pid_tgid >> 32;

	if (!tracked(pid))
		return 0;
	struct stack_request *r = stack_request_for(kbuf);

	if (!r) {
		count_drop(DROP_STATE_FULL);
		return 0;
	}
	struct io_start *s = &r->io;

	s->ts = bpf_ktime_get_ns();
	s->issue_ts = at_issue ? s->ts : 0;
	s->stack_id = 0;
	s->pid = pid;
	s->tid = tid;
	s->bytes = BPF_CORE_READ(rq, __data_len);
	s->sector = BPF_CORE_READ(rq, __sector);
	s->dev = request_dev(rq);
	s->cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	s->flags = at_issue ? IO_START_AT_ISSUE : 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	r->rq = (__u64)rq;
	r->at_issue = at_issue;
	r->pid = pid;
	r->tid = tid;
	r->slot = STACK_SLOT_CALL;
	r->what = CALL_SITE_IO;
	r->cache_tid = tid;
	r->target_tid = tid;
	/* Last: the request goes to io_starts with its stack's id, after a
	 * tail call for a user thread's. */
	stack_then_finish(ctx, r, kbuf, tid ? bpf_map_lookup_elem(&threads, &tid) : NULL);
	return 0;
}

/* block_io_start (6.5+) or block_rq_insert (before): the request exists.
 * Userspace attaches one of the two. */
SEC("raw_tracepoint/block_io_start")
int on_block_start(struct bpf_raw_tracepoint_args *ctx)
{
	return start_request(ctx, (struct request *)((__u64 *)ctx)[0], false, KBUF_BLOCK);
}

/* Sent to the device. A request never started (flush requests, direct
 * issue, or started before we attached) starts here. */
SEC("raw_tracepoint/block_rq_issue")
int on_block_issue(struct bpf_raw_tracepoint_args *ctx)
{
	struct request *rq = (struct request *)((__u64 *)ctx)[0];
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s)
		return start_request(ctx, rq, true, KBUF_ISSUE);
	if (!s->issue_ts)
		s->issue_ts = bpf_ktime_get_ns();
	return 0;
}

/* Merged into another request: it will never complete on its own. */
SEC("raw_tracepoint/block_rq_merge")
int on_block_merge(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 key = ((__u64 *)ctx)[0];

	bpf_map_delete_elem(&io_starts, &key);
	return 0;
}

/* Completed, wholly or in part (args: rq, error, nr_bytes). Fires before
 * the request's remaining length shrinks; the last call completes it. A
 * write with a flush sequence completes twice (data, then the sequence's
 * end with nothing left): it is sent at the first, forgotten after. */
SEC("raw_tracepoint/block_rq_complete")
int on_block_complete(struct bpf_raw_tracepoint_args *ctx)
{
	/* Plain loads: args[] is a flexible array, nothing to relocate. */
	__u64 *args = (__u64 *)ctx;
	struct request *rq = (struct request *)args[0];
	__u32 nr_bytes = (__u32)args[2];
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s) {
		/* Started before we attached (or its start was lost); a flush
		 * sequence's second completion has no bytes and is no loss, and
		 * with a pid filter other processes' requests are not ours. */
		if (nr_bytes && !targ_tgid)
			count_drop(DROP_IO_UNTRACKED);
		return 0;
	}
	if (nr_bytes < BPF_CORE_READ(rq, __data_len))
		return 0;
	struct blkio_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		bpf_map_delete_elem(&io_starts, &key);
		return 0;
	}
	e->kind = RECORD_IO;
	e->dev = s->dev;
	e->sector = s->sector;
	e->start_ns = s->ts;
	e->issue_ns = s->issue_ts;
	e->done_ns = bpf_ktime_get_ns();
	e->bytes = s->bytes;
	e->error = (__s32)args[1];
	e->pid = s->pid;
	e->tid = s->tid;
	e->op = s->cmd_flags & REQ_OP_MASK;
	e->flags = io_flags(s->cmd_flags) | s->flags;
	e->stack_id = s->stack_id;
	__builtin_memcpy(e->comm, s->comm, TASK_COMM_LEN);
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
	bpf_map_delete_elem(&io_starts, &key);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
