/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/stacks.bpf.h: the stack records (stack_event of sysprof.h) the
 * tracer's places send, and the buffers they are built in.
 *
 * In: a thread's user registers (current_user_regs) and the place's
 * buffer (KBUF_*: switch, waking, block start, block issue; one each per
 * CPU, as an interrupt's program can run inside another's). Out: a record
 * in `events` and its id (0 or STACK_DROPPED: none sent, counted). A user
 * stack is walked here (send_unwound_stack: walk.bpf.h, the native frames
 * then the Python ones), or copied for userspace (send_stack, with
 * stack_copy), or read by frame pointers; a kernel thread's or an
 * interrupt's is its kernel stack alone (read_kstack, send_kstack). send_scratch sends a record once
 * per process and content (STACK_SHARED), remembered in `stack_ids`, which
 * userspace empties of processes that are gone; a preempted thread's stack
 * only from its second time (the first, as the thread's own:
 * `preempted_seen`).
 */
#ifndef __SCHED_STACKS_BPF_H
#define __SCHED_STACKS_BPF_H

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

/* Preempted threads' stacks seen once, by the id they would be shared
 * under (see send_scratch), least recently seen out: ~1 MB, preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PREEMPTED_SEEN_MAX);
	__type(key, __u64);
	__type(value, __u8);
} preempted_seen SEC(".maps");

/* Kernel-unwind mode builds each stack record here, one buffer per kind of
 * place (KBUF_*: a wakeup from an interrupt can run inside a switch's
 * program on the same CPU), and sends only the frames used. */
struct stack_scratch {
	struct stack_event e;
	/* the user part (at most UNWIND_MAX_FRAMES words), then the kernel's;
	 * room past UNWIND_MAX_FRAMES for a runtime chain's longest read
	 * (runtime_chain_after) */
	__u64 frames[UNWIND_MAX_FRAMES + (MAX_STACK_DEPTH > 2 * PY_MAX_FRAMES ? MAX_STACK_DEPTH : 2 * PY_MAX_FRAMES)];
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
	/* the copy, padded to 8 bytes, then the kernel stack, then (a walk
	 * handed over) its runtimes' chain */
	__u8 copy[MAX_STACK_COPY + MAX_STACK_DEPTH * sizeof(__u64) + 2 * PY_MAX_FRAMES * sizeof(__u64)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by userspace: KBUFS per possible CPU, with a copy */
	__type(key, __u32);
	__type(value, struct copy_scratch);
} copy_scratch SEC(".maps");

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
/* send_unwound_stack: the walk hands over; what it read is in the place's
 * stack_scratch (runtime_chain_after). Not an id either. */
#define STACK_HANDED_OVER ((__u64)-2)

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
 * every other place the thread went in between. A preempted thread's
 * stack is sent as its own the first time, shared from the second (see
 * `preempted_seen` below). Returns the id, or
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
	/* A preempted thread's stack is shared from its second time: preemption
	 * comes at any instruction, and most such stacks are never seen again
	 * (beside pgbench, 93 % of the stacks shared, ~1,000 a second, each kept
	 * by userspace for the life of its process: the table was full at ~30 s,
	 * after which no stack was shared at all). The first time it is its
	 * thread's own; where a thread is preempted again and again (a loop's
	 * few instructions), it is shared, and its place remembered, from the
	 * next. (Never shared, those places were walked each time: the tracer's
	 * bytes went 52 -> 93 MB in 24 s.) */
	if (sc->e.slot == STACK_SLOT_PREEMPTED && !bpf_map_lookup_elem(&preempted_seen, &id)) {
		__u8 seen = 1;

		bpf_map_update_elem(&preempted_seen, &id, &seen, BPF_ANY);
		if (bpf_ringbuf_output(&events, sc, size, submit_flags(size, false))) {
			count_drop(DROP_STACK_RECORD);
			return STACK_DROPPED;
		}
		return sc->e.id;
	}
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

/* Kernel-unwind mode: walk the user stack here and send the frames;
 * STACK_HANDED_OVER where the walk hands over (tables not loaded yet, code
 * only userspace can walk, an address the entry does not cover): the caller
 * then sends a copy, as without kernel unwinding, and after it the runtimes'
 * chain the walk read (left in sc: its frames, its counts in sc->e); 0 where
 * nothing was walked. */
static __always_inline __u64 send_unwound_stack(void *ctx, __u32 pid, __u32 tid, __u32 slot, __u64 ip, __u64 sp, __u64 bp, __u32 kbuf)
{
	struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);
	__u32 flags = STACK_KERNEL_UNWOUND;
	struct walked w = {};
	__u64 size;
	long len;

	if (!sc)
		return 0;
	/* The walk's registers in the record's (set again below: the walk
	 * leaves there the frame it stopped at), not on this frame: the
	 * stack is 512 bytes for a program and what it calls, python_frames
	 * and a runtime's step under it among them (places.bpf.h). */
	sc->e.user_ip = ip;
	sc->e.user_sp = sp;
	sc->e.user_bp = bp;
	/* The caller's copy is 32 KiB, the room of many intervals: with the
	 * reader behind the walk so far goes alone (walk.bpf.h), and the ring
	 * keeps its room for the intervals themselves. A waker's stack is the
	 * context of a wakeup, not a sample: it is never handed over as a
	 * copy, and ends where the walk did (its end says why). Waking is the
	 * hottest path there is: beside a fork loop, new processes' wakeups
	 * (their tables still pending) sent a copy each, and the ring passed
	 * half full. */
	switch (walk_user_stack(&events, pid, tid, &sc->e.user_ip, sc->frames, stack_copy != 0, kbuf != KBUF_WAKING, &w)) {
	case WALK_HAND_OVER:
		/* The mark runtime_chain_after looks for: no sent record's flags
		 * are this alone. */
		sc->e.flags = STACK_USER_REGS;
		sc->e.ustack_len = w.n;
		sc->e.unwind_end = w.end;
		sc->e.py_len = w.py.n;
		sc->e.py_end = w.py.end;
		return STACK_HANDED_OVER;
	case WALK_CUT:
		flags |= STACK_HANDOVER_SKIPPED;
		break;
	}
	sc->e.kind = RECORD_STACK;
	sc->e.id = next_stack_id();
	sc->e.flags = flags;
	sc->e.pid = pid;
	sc->e.tid = tid;
	sc->e.ustack_len = w.n;
	sc->e.stack_size = 0;
	sc->e.slot = slot;
	sc->e.unwind_end = w.end;
	sc->e.py_len = w.py.n;
	sc->e.py_end = w.py.end;
	sc->e.user_ip = ip;
	sc->e.user_sp = sp;
	sc->e.user_bp = bp;
	__u32 used = walked_words(&w);

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

/* A stack whose top is known (stack_extent), copied into cs in one read
 * to just past its top; 0 where that does not apply (then copy_user_stack
 * copies stack_copy bytes). A function of its own, verified once: inlined
 * at each of send_stack's call sites, its length (known only at run time)
 * made the verifier keep every path apart (3 s more of load, measured). */
__noinline __u32 copy_stack_to_top(struct copy_scratch *cs, __u64 sp)
{
	if (!cs)
		return 0;
	__u32 extent = stack_extent(sp, stack_copy) & (MAX_STACK_COPY - 1);

	if (extent && !bpf_probe_read_user(cs->copy, extent, (void *)sp))
		return extent;
	return 0;
}

/* The runtimes' chain (Go's goroutine and labels, Python's frames...) of a
 * walk that handed over, from the place's stack_scratch into the copy's
 * record at byte `at` (after its kernel stack), the record marked as walked
 * and handed over (STACK_KERNEL_UNWOUND with STACK_USER_REGS; ustack_len 0:
 * userspace unwinds the copy from the leaf, as the sampler's hand-overs), a
 * chain or not: userspace counts each hand-over as the sampler's. Returns the
 * bytes added. Without it a new process's first waits, before its
 * tables load, were in no goroutine: 3-18 of a Go sleeper's ~300 beside a
 * compiler loop, and all of a process whose tables did not fit. Only after a
 * walk that handed over (its mark, taken here); a global function, verified
 * once: inlined, send_new_stack's frame passed the 512-byte stack limit. */
__noinline __u32 runtime_chain_after(struct copy_scratch *cs, __u32 kbuf, __u32 at)
{
	struct stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &kbuf);

	if (!cs || !sc || sc->e.flags != STACK_USER_REGS)
		return 0;
	sc->e.flags = 0;
	__u32 from = sc->e.ustack_len, pairs = sc->e.py_len, end = sc->e.py_end;

	/* Every runtime's reader stops at UNWIND_MAX_FRAMES; these bounds are
	 * the verifier's, and keep the read in sc->frames whatever was written. */
	if (from > UNWIND_MAX_FRAMES || pairs > PY_MAX_FRAMES || at > MAX_STACK_COPY + MAX_STACK_DEPTH * sizeof(__u64)) {
		pairs = 0;
		end = PY_END_READ_FAILED;
	}
	__u32 bytes = pairs * 2 * sizeof(__u64);

	if (bytes && bpf_probe_read_kernel(&cs->copy[at], bytes, &sc->frames[from])) {
		bytes = pairs = 0;
		end = PY_END_READ_FAILED;
	}
	cs->e.flags |= STACK_KERNEL_UNWOUND;
	cs->e.unwind_end = sc->e.unwind_end;
	cs->e.py_len = pairs;
	cs->e.py_end = end;
	return bytes;
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

		if (id && id != STACK_HANDED_OVER)
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
	__u32 copied = copy_stack_to_top(cs, sp);

	if (!copied)
		copied = copy_user_stack(cs->copy, sp);
	/* Never past the copy's room (the verifier sees a last piece of up to
	 * 127 bytes): what is sent and what the header says stay one length. */
	if (copied > MAX_STACK_COPY)
		copied = MAX_STACK_COPY;
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

	if (kernel_unwind)
		size += runtime_chain_after(cs, kbuf, padded + klen * sizeof(__u64));

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

#endif /* __SCHED_STACKS_BPF_H */
