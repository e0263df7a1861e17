/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/places.bpf.h: which stack a thread gets at one of the tracer's
 * places (preempted, waiting, waking another, starting a request), and the
 * programs that find it (walk_stack) and walk it (send_new_stack).
 *
 * In: a stack_request, filled by the place's program (offcpu.bpf.h's
 * switch_out, wakeups.bpf.h's on_sched_waking, block.bpf.h's
 * start_request), then stack_then_finish: a kernel thread's stack is read
 * there; a user thread's in walk_stack, tail-called (verified once, not in
 * each place's program). A thread at the place it was at before reuses
 * that stack's id (its state's per-slot cache, then `place_ids`) without
 * walking; else walk_stack tail-calls send_new_stack and stacks.bpf.h
 * sends one. Out: finish_stack writes the id
 * where the request says: the leaving thread's state, the wakee's (then
 * its wake_ts), or the request's entry in `io_starts`.
 */
#ifndef __SCHED_PLACES_BPF_H
#define __SCHED_PLACES_BPF_H

#define CALL_SITE_WAKEUP 1
#define CALL_SITE_IO 2

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

/* walk_stack (0) and send_new_stack (1), put here by userspace once
 * verified. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
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

/* A user thread's place (see known_user_stack): whose, in which slot, doing
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

/* Per CPU and place (KBUF_*): the place walk_stack found, which
 * send_new_stack walks when it is new (a tail call passes nothing but the
 * context). In a map, not on a frame, as the stack is 512 bytes for a
 * program and the functions it calls. One entry per place, as
 * stack_scratch, since a wakeup's program can run inside a switch's on
 * the same CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBUFS);
	__type(key, __u32);
	__type(value, struct place_key);
} place_keys SEC(".maps");

/* The thread's per-slot cache of `r` now holds place `k` and its id. */
static __always_inline void remember_place(struct stack_request *r, struct place_key *k, __u64 id)
{
	struct thread_state *t = r->cache_tid ? bpf_map_lookup_elem(&threads, &r->cache_tid) : NULL;
	struct stack_cache *c = stack_cache_of(t, r);

	if (c) {
		c->ip = k->ip;
		c->sp = k->sp;
		c->bp = k->bp;
		c->what = r->what;
		c->context = k->context;
		c->id = id;
	}
}

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

/* Where a walk wanted only for its hash (known_user_stack) writes its frames. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct unwind_frames);
	__uint(max_entries, 1);
} py_hash_frames SEC(".maps");

/* Where the current user thread is, in *k (the place key), and its stack
 * id there if one was sent before (0: a place not known, to be walked by
 * send_new_stack). A thread that does the same thing from the same place
 * as before in that slot reuses the stack sent then: the common case on a
 * switch-heavy machine, where walking (or copying) stacks is the tracer's
 * main cost. The place is the user context (ip, sp, bp), found without
 * walking anything. One slot per kind of place, so a thread that
 * alternates between being preempted in one place and sleeping in another
 * keeps both; its last place per slot in its state, places before that in
 * place_ids. `*user` says whether the thread has user registers at all. */
static __always_inline __u64 known_user_stack(struct stack_request *r, __u32 kbuf, struct place_key *k, bool *user)
{
	__u64 ip, sp, bp;

	*user = false;
	if (!current_user_regs(&ip, &sp, &bp))
		return 0;
	*user = true;
	/* A Python thread's native place is the same wherever in its Python
	 * code it is (Python calls do not nest C frames): its chain is part
	 * of the place. Hashed without being kept: one read per frame. */
	struct py_out py = {.hash_only = 1};
	__u32 zero = 0;
	struct unwind_frames *scratch = bpf_map_lookup_elem(&py_hash_frames, &zero);

	if (kernel_unwind && scratch)
		python_frames(&py, r->pid, r->tid, bpf_get_current_task(), scratch);
	__u64 context = py.hash;
	/* A JVM's stacks read before its interpreter was known have no Java
	 * methods: once it is, the same place is read again. So too a stack
	 * handed over as a copy because its process's tables were not loaded
	 * yet: the place kept the copy for as long as the thread came back
	 * there, and a copy then carried no runtime frames (beside a compiler
	 * loop, a Go program's sleeper had its first 1.1 s of sleeps, 107 of
	 * 294, in no goroutine). A copy carries them now (runtime_chain_after),
	 * but the walked record is what the tables are for. The process's
	 * mapping count (+ 1: none is not an entry) changes as its tables
	 * come, and with it the place. (A user address is below
	 * bit 47: the count goes above.) */
	if (kernel_unwind) {
		struct unwind_process *up = bpf_map_lookup_elem(&unwind_processes, &r->pid);

		if (up)
			context ^= up->java_interp_start ^ ((__u64)(up->count + 1) << 48);
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

	k->tid = r->tid;
	k->what = r->slot << 16 | (r->what & 0xffff);
	k->born = task->start_time;
	k->mm = (__u64)BPF_CORE_READ(task, mm);
	k->ip = ip;
	k->sp = sp;
	k->bp = bp;
	k->context = context;
	__u64 *known = r->tid ? bpf_map_lookup_elem(&place_ids, k) : NULL;
	__u64 id = known ? *known : 0;

	if (id)
		remember_place(r, k, id);
	return id;
}

/* Tail-call slot `walker` of stack_walker for `r` at `place`, the place
 * pushed on this CPU's stack_pending (see there). Does not return where
 * the tail call is made; where it fails (a slot not in place: never, once
 * loaded) the request finishes with no stack, counted. */
static __always_inline void hand_to_walker(void *ctx, struct stack_request *r, __u32 place, __u32 walker)
{
	__u32 zero = 0;
	__u32 *pending = bpf_map_lookup_elem(&stack_pending, &zero);

	if (pending) {
		r->below = *pending;
		*pending = place + 1;
		bpf_tail_call(ctx, &stack_walker, walker);
		*pending = r->below;
	}
	count_drop(DROP_STACK_RECORD);
	finish_stack(r, place, 0);
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

	if (task->flags & PF_KTHREAD) {
		finish_stack(r, place, kernel_thread_stack(ctx, r, cache, place));
		return;
	}
	hand_to_walker(ctx, r, place, 0);
}

/* Pop this CPU's pending place (see stack_pending) with its request and
 * place key: the place's number, or KBUFS for none (a request without a
 * key is finished here, with no stack). */
static __always_inline __u32 pop_pending(struct stack_request **req, struct place_key **key)
{
	__u32 zero = 0;
	__u32 *pending = bpf_map_lookup_elem(&stack_pending, &zero);

	if (!pending)
		return KBUFS;
	__u32 place = *pending - 1;

	if (place >= KBUFS)
		return KBUFS;
	struct stack_request *r = bpf_map_lookup_elem(&stack_requests, &place);

	if (!r)
		return KBUFS;
	*pending = r->below;
	struct place_key *k = bpf_map_lookup_elem(&place_keys, &place);

	if (!k) {
		finish_stack(r, place, 0);
		return KBUFS;
	}
	*req = r;
	*key = k;
	return place;
}

/* The first of the two programs that take a user thread's stack for the
 * tracer's four places (see stack_then_finish): the stack id of a place
 * known before, else a tail call to send_new_stack with the place in
 * place_keys. Two programs, because the kernel counts a program's frame
 * and those of the functions it calls against one 512-byte stack: the
 * place's hash calls python_frames (208 bytes, and a runtime's step
 * under it, up to 96), and the walk's state beside it took walk_stack to
 * 352 bytes; 6.18's verifier refused the sum ("combined stack size of 3
 * calls is 544"). A tail call starts a frame of its own. */
SEC("raw_tracepoint")
int walk_stack(struct bpf_raw_tracepoint_args *ctx)
{
	struct stack_request *r = NULL;
	struct place_key *k = NULL;
	__u32 place = pop_pending(&r, &k);

	if (place >= KBUFS || !r || !k)
		return 0;
	bool user = false;
	__u64 id = known_user_stack(r, place, k, &user);

	if (id || !user)
		finish_stack(r, place, id);
	else
		hand_to_walker(ctx, r, place, 1);
	return 0;
}

/* The second: walk (or copy) the stack at the place walk_stack found new,
 * send it, and remember it for the thread's next time there. */
SEC("raw_tracepoint")
int send_new_stack(struct bpf_raw_tracepoint_args *ctx)
{
	struct stack_request *r = NULL;
	struct place_key *k = NULL;
	__u32 place = pop_pending(&r, &k);

	if (place >= KBUFS || !r || !k)
		return 0;
	__u64 id = send_stack(ctx, r->pid, r->tid, r->slot, k->ip, k->sp, k->bp, place);

	/* Only a shared stack: userspace keeps it while the process lives,
	 * where it keeps a thread's others only while newer ones of its slot
	 * are few. 0: none sent (counted), walked again. */
	if ((id & STACK_ID_SHARED) && r->tid)
		bpf_map_update_elem(&place_ids, k, &id, BPF_ANY);
	remember_place(r, k, id);
	finish_stack(r, place, id);
	return 0;
}

/* This CPU's request for `place`. */
static __always_inline struct stack_request *stack_request_for(__u32 place)
{
	return bpf_map_lookup_elem(&stack_requests, &place);
}

#endif /* __SCHED_PLACES_BPF_H */
