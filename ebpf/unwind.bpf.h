/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * unwind.bpf.h: DWARF unwinding of user stacks in the kernel, from tables
 * userspace compiled out of each binary's .eh_frame (unwind/tables.rs).
 *
 * In: the user registers of a task (ip, sp, bp), its process's executable
 * mappings (`unwind_processes`, written by userspace from the perf
 * sideband) and the rows of every binary (`unwind_rows`). Out: up to
 * UNWIND_MAX_FRAMES addresses, leaf first, and how the walk ended.
 *
 * Per frame: the mapping holding the address (binary search over the
 * process's mappings), the row for it (binary search over the binary's
 * rows), then CFA = rsp or rbp + offset, the return address at CFA-8 and
 * the caller's rbp where the row says it was saved, read from user memory.
 * The frames go one bpf_loop() iteration each, so the verifier checks one
 * frame's work, not a thousand. A mapping without a table (JIT code) or an
 * address without a row walks one frame by the code at the address where
 * it is an `add $n, %rsp; ret` epilogue (CPython's perf trampolines), else
 * by frame pointer; every later
 * address must lie in an executable mapping, so a frame pointer that is no
 * frame pointer ends the walk instead of inventing callers. Where the
 * tables are not there yet (a process that just started), or where only
 * userspace has them (JIT code a jitdump describes), the walk stops and, if
 * a stack copy is configured, hands over to userspace with the registers
 * of the frame it reached.
 */
#ifndef __UNWIND_BPF_H
#define __UNWIND_BPF_H

/* One chunk of rows (row idx is chunk idx >> UNWIND_CHUNK_SHIFT, at idx's
 * low bits in it). */
struct unwind_chunk {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* userspace writes the rows through a mapping */
	/* Sizes, not types: clang gives the struct only as a forward
	 * declaration here, which the loader cannot size. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct unwind_row));
	__uint(max_entries, UNWIND_CHUNK_ROWS);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 1); /* sized by userspace: the table budget in chunks */
	__array(values, struct unwind_chunk);
} unwind_rows SEC(".maps");

/* Row idx of the tables, or NULL (its chunk not created: no table there). */
static __always_inline struct unwind_row *unwind_row_at(__u32 idx)
{
	__u32 chunk = idx >> UNWIND_CHUNK_SHIFT, at = idx & (UNWIND_CHUNK_ROWS - 1);
	void *rows = bpf_map_lookup_elem(&unwind_rows, &chunk);

	if (!rows)
		return NULL;
	return bpf_map_lookup_elem(rows, &at);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* 8 KiB per process, only for those that exist */
	__type(key, __u32);
	__type(value, struct unwind_process);
	__uint(max_entries, 16384); /* userspace may set another size before load */
} unwind_processes SEC(".maps");

/* One bit per pid (tgid): set by userspace for a process it gave no entry
 * because its user's share of `unwind_processes` was full, or whose entry
 * it evicted for another user's process. Such a process is no process that
 * just started: its samples hand over to userspace whatever its age. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, UNWIND_REFUSED_WORDS);
} unwind_refused SEC(".maps");

static __always_inline int process_refused(__u32 tgid)
{
	__u32 word = tgid / 64;
	__u64 *bits;

	if (word >= UNWIND_REFUSED_WORDS)
		return 0;
	bits = bpf_map_lookup_elem(&unwind_refused, &word);
	return bits && (*bits >> (tgid % 64)) & 1;
}

/* The walk's state, on the caller's stack, shared with each iteration:
 * scalars only, as the verifier forgets what pointers were kept in memory
 * a global function may have written (struct ustack_loop keeps them). */
struct ustack_walk {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 n;
	__u32 end;
	__u32 return_address; /* ip came from the stack: look up ip - 1 (inside the call) */
	__u32 may_hand_over;  /* a stack copy is configured: stop where tables are missing */
	__u32 no_process_end; /* without an entry: UNWIND_END_NO_PROCESS or _REFUSED */
	__u32 _pad;           /* named: a global function reads the whole struct */
	__u64 sender_sp;      /* an interpreted frame's caller's unextended sp (0: none) */
	__u64 blob;           /* the HotSpot code blob of this frame (0: none), from hotspot_frame */
};

/* A walk's frame array, as a type: a global function's pointer argument
 * is checked against its type's size. */
struct unwind_frames {
	__u64 f[UNWIND_MAX_FRAMES];
};

/* What each iteration of the walk's loop gets: the state, and the pointers
 * the frame's work needs beside it. */
struct ustack_loop {
	struct unwind_process *proc;
	struct unwind_frames *frames;
	struct ustack_walk s;
};

/* A binary search of a process's mappings (sorted by start) for the last
 * one starting at or below an address, one step per bpf_loop() iteration:
 * the verifier checks one step (an unrolled search, or a scan, of 256 took
 * it seconds in the tracer, whose programs reach the walk along many paths),
 * and a frame costs at most 9 steps however many mappings there are. */
struct mapping_search {
	struct unwind_process *p;
	__u64 ip;
	__u32 lo;
	__u32 hi;
};

static long unwind_mapping_step(__u64 i, struct mapping_search *c)
{
	__u32 mid;

	if (c->lo >= c->hi)
		return 1;
	mid = c->lo + (c->hi - c->lo) / 2;
	if (c->p->m[mid & (UNWIND_MAX_MAPPINGS - 1)].start <= c->ip)
		c->lo = mid + 1;
	else
		c->hi = mid;
	return 0;
}

/* Copy the mapping of p holding ip into *out; 0 if there is none. Copied,
 * not pointed to: the rest of the frame's work then sees the same state
 * whichever mapping it was. */
static __always_inline int unwind_find_mapping(struct unwind_process *p, __u64 ip, struct unwind_mapping *out)
{
	struct mapping_search c = { .p = p, .ip = ip, .lo = 0, .hi = p->count };
	struct unwind_mapping *m;

	if (c.hi > UNWIND_MAX_MAPPINGS)
		c.hi = UNWIND_MAX_MAPPINGS;
	bpf_loop(10, unwind_mapping_step, &c, 0);
	if (c.lo == 0)
		return 0;
	m = &p->m[(c.lo - 1) & (UNWIND_MAX_MAPPINGS - 1)];
	if (ip >= m->end)
		return 0;
	*out = *m;
	return 1;
}

/* Whether an address in no mapping of the process's entry may be code:
 * the entry was written moments ago (see wake_until_ms) and may lack
 * libraries mapped since, or it lists only some of its mappings. */
static __always_inline int process_may_miss_code(__u32 tgid)
{
	struct unwind_process *p = bpf_map_lookup_elem(&unwind_processes, &tgid);
	__u32 now_ms = bpf_ktime_get_ns() / 1000000;

	return p && ((p->flags & UNWIND_PROCESS_CUT) || (__s32)(p->wake_until_ms - now_ms) > 0);
}

/* Whether a walk that ended so hands over to userspace: where the tables
 * are not loaded yet, where only userspace has them, for a process refused
 * an entry, and at an address in no mapping the entry lists when that may
 * be code (at the leaf, in a process whose entry is new, or whose entry was
 * cut): deeper in an older process it is no code, and a copy would be sent
 * for nothing. */
static __always_inline int unwind_hands_over(__u32 end, __u32 n, __u32 tgid)
{
	return end == UNWIND_END_NO_PROCESS || end == UNWIND_END_PENDING || end == UNWIND_END_USERSPACE ||
	       end == UNWIND_END_REFUSED || (end == UNWIND_END_BAD_ADDRESS && (n == 0 || process_may_miss_code(tgid)));
}

/* A binary search for the last row at or below pc, one step per bpf_loop()
 * iteration (the verifier checks one step, not 33 unrolled ones). */
struct row_search {
	__u32 start;
	__u32 pc;
	__u32 lo;
	__u32 hi;
};

static long unwind_search_step(__u64 i, struct row_search *c)
{
	__u32 mid, idx;
	struct unwind_row *r;

	if (c->lo >= c->hi)
		return 1;
	mid = c->lo + (c->hi - c->lo) / 2;
	idx = c->start + mid;
	r = unwind_row_at(idx);
	if (!r) {
		c->lo = 0; /* not found */
		c->hi = 0;
		return 1;
	}
	if (r->pc <= c->pc)
		c->lo = mid + 1;
	else
		c->hi = mid;
	return 0;
}

/* The last row of table [start, start + len) at or below pc, or NULL. */
static __always_inline struct unwind_row *unwind_find_row(__u32 start, __u32 len, __u32 pc)
{
	struct row_search c = { .start = start, .pc = pc, .lo = 0, .hi = len };
	__u32 idx;

	bpf_loop(33, unwind_search_step, &c, 0);
	if (c.lo == 0)
		return NULL;
	idx = start + c.lo - 1;
	return unwind_row_at(idx);
}

/* If the instruction at ip is `add $imm8, %rsp; ret` (48 83 c4 imm8 c3),
 * the return address is at sp + imm8 whatever the code before it did, and
 * rbp is still the caller's: the CFA is sp + imm8 + 8, returned; else 0.
 * That is CPython's perf trampoline (`-X perf`, `-X perf_jit`: sub $8,
 * %rsp; call *%rcx; add $8, %rsp; ret), copied into anonymous memory
 * thousands of times with neither CFI nor a frame pointer, and every
 * Python call goes through one. Exact, as it reads the code, not a guess. */
static __always_inline __u32 epilogue_cfa_offset(__u64 ip)
{
	__u64 code = 0;

	if (bpf_probe_read_user(&code, sizeof(code), (void *)ip))
		return 0;
	if ((code & 0xff87ffffffULL) != 0xc300c48348ULL) /* imm8 ≥ 0, 8-aligned */
		return 0;
	return ((code >> 24) & 0xff) + 8;
}

#include "runtimes/hotspot.bpf.h"
#include "runtimes/v8.bpf.h"

/* One frame of the walk: 0 to go on, 1 where it ended (s->end says why).
 * A global function, so the verifier checks it once per program with
 * unknown inputs instead of once per state the loop's callback reaches it
 * in; the process entry and the frame array come as arguments, as a
 * global function cannot follow pointers kept in memory. */
__noinline long unwind_frame(struct ustack_walk *s, struct unwind_process *proc, struct unwind_frames *frames)
{
	struct unwind_mapping found, *m = NULL;
	struct unwind_row *row = NULL;
	__u64 ip, sp, bp, cfa, ra = 0;
	__u32 kind = ROW_NONE, slot = 0, off8 = 0, epilogue = 0;

	if (!s || !frames)
		return 1;
	ip = s->ip;
	sp = s->sp;
	bp = s->bp;

	if (!proc) {
		if (s->may_hand_over) {
			s->end = s->no_process_end;
			return 1;
		}
	} else if (unwind_find_mapping(proc, ip, &found)) {
		/* (Caching the last frame's mapping here, as callers are mostly
		 * in the same binary, made the tracer's programs take 0.4 s more
		 * to verify.) */
		m = &found;
	}
	/* An address in no mapping the entry lists: below the leaf, no code
	 * (the walk went wrong) or code mapped since the entry was written;
	 * at the leaf, the latter or JIT code. Userspace, which knows every
	 * mapping, tells them apart when the walk can hand over. */
	if (!m && (s->n > 0 || (proc && s->may_hand_over))) {
		s->end = proc ? UNWIND_END_BAD_ADDRESS : s->no_process_end;
		return 1;
	}
	if (m && m->table_start == UNWIND_TABLE_PENDING && s->may_hand_over) {
		s->end = UNWIND_END_PENDING;
		return 1;
	}
	/* Code without rows (JIT code) that returns right away: walked here,
	 * even where a jitdump's tables would have it handed over. */
	if (m && m->table_start == UNWIND_TABLE_HOTSPOT)
		epilogue = hotspot_frame(s, proc, m->bias, ip - s->return_address, sp);
	else if (m && (m->table_len == 0 || m->table_start >= UNWIND_TABLE_USERSPACE))
		epilogue = epilogue_cfa_offset(ip);
	if (m && m->table_start == UNWIND_TABLE_USERSPACE && s->may_hand_over && !epilogue) {
		s->end = UNWIND_END_USERSPACE;
		return 1;
	}
	if (s->n >= UNWIND_MAX_FRAMES) {
		s->end = UNWIND_END_MAX_FRAMES;
		return 1;
	}
	frames->f[s->n & (UNWIND_MAX_FRAMES - 1)] = ip;
	s->n++;
	if (!proc) {
		s->end = s->no_process_end;
		return 1;
	}
	/* HotSpot's interpreter keeps rbp as the frame pointer of the method
	 * it runs: the Method* and bytecode pointer are in its frame. Read
	 * now, while the frame exists; userspace names the method. */
	if (ip >= proc->java_interp_start && ip < proc->java_interp_end && s->n + 2 <= UNWIND_MAX_FRAMES)
		java_frame(s, frames, bp);
	/* A compiled method's frame: its Method* read now, not named later
	 * from a perf map by its address, which the JVM reuses for other
	 * methods as it frees and compiles code. */
	else if (epilogue && s->blob && proc->java_code.method_at && s->n + 2 <= UNWIND_MAX_FRAMES)
		compiled_java_frame(s, frames, proc);

	if (m && m->table_len && m->table_start < UNWIND_TABLE_USERSPACE) {
		__u64 pc = ip - s->return_address - m->bias;

		if (pc <= 0xffffffffULL)
			row = unwind_find_row(m->table_start, m->table_len, (__u32)pc);
		if (row) {
			kind = row->kind & 7;
			slot = row->rbp_slot;
			off8 = row->cfa_off8 | ((__u32)(row->kind >> 3) << 16);
		}
	}

	switch (kind) {
	case ROW_END:
		s->end = UNWIND_END_ROOT;
		return 1;
	case ROW_UNSUPPORTED:
		s->end = UNWIND_END_UNSUPPORTED;
		return 1;
	case ROW_SIGNAL: {
		/* struct rt_sigframe after the handler returned into the
		 * trampoline: sp is at its ucontext, whose mcontext holds the
		 * interrupted registers (x86_64 ABI: rbp at +120, rsp at +160,
		 * rip at +168). */
		__u64 regs[7];

		if (bpf_probe_read_user(regs, sizeof(regs), (void *)(sp + 120))) {
			s->end = UNWIND_END_READ_FAILED;
			return 1;
		}
		s->bp = regs[0];
		s->sp = regs[5];
		s->ip = regs[6];
		/* The interrupted instruction itself, not a return address. */
		s->return_address = 0;
		if (!s->ip) {
			s->end = UNWIND_END_ROOT;
			return 1;
		}
		return 0;
	}
	case ROW_CFA_RSP:
		cfa = sp + ((__u64)off8 << 3);
		break;
	case ROW_CFA_RBP:
		cfa = bp + ((__u64)off8 << 3);
		break;
	case ROW_PLT:
		cfa = sp + 8 + ((ip & 15) >= slot ? 8 : 0);
		slot = 0;
		break;
	default:
		/* No rule (JIT code, or code without CFI): the code itself
		 * (above: its epilogue, or its HotSpot blob's frame size, with
		 * the slot of the caller's rbp in the low bits), else a frame
		 * pointer frame, if rbp looks like one. */
		if (epilogue) {
			cfa = sp + (epilogue & ~7u);
			slot = epilogue & 7;
			break;
		}
		/* In HotSpot's code heap rbp may equal sp: a frame that pushed
		 * nothing after its `push rbp; mov rbp, rsp` (the arraycopy
		 * stubs, in StubRoutines, where a sorting thread spends 2 % of
		 * its samples: each was cut there). Elsewhere rbp must lie
		 * above sp: V8's frames are read at rbp - 16, below sp there. */
		if (bp < sp || (bp == sp && !(m && m->table_start == UNWIND_TABLE_HOTSPOT)) || (bp & 7)) {
			s->end = UNWIND_END_NO_INFO;
			return 1;
		}
		/* V8 keeps a frame pointer in all its code (its builtins and
		 * what it compiles, neither with unwind rows): the frame's
		 * function is in the frame, read now. */
		if (proc->v8.function_at && s->n + 2 <= UNWIND_MAX_FRAMES)
			v8_frame(s, frames, proc, bp);
		cfa = bp + 16;
		slot = 2;
		break;
	}

	/* The stack grows down: a caller's frame lies above. */
	if (cfa <= sp) {
		s->end = UNWIND_END_NO_INFO;
		return 1;
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8))) {
		s->end = UNWIND_END_READ_FAILED;
		return 1;
	}
	/* A compiled Java method's caller is code of the JVM's heaps (compiled,
	 * interpreter, stubs). A leaf whose frame's size says otherwise runs
	 * an intrinsic that pushed a word (C2's string comparison keeps a
	 * count on the stack inside its loop): the return address is a word
	 * up. Taken only where that word returns into the heaps. */
	if (!s->return_address && s->blob && proc && (ra < proc->java_code.low || ra >= proc->java_code.end)) {
		__u64 up = 0;

		if (!bpf_probe_read_user(&up, sizeof(up), (void *)cfa) && up >= proc->java_code.low &&
		    up < proc->java_code.end) {
			cfa += 8;
			ra = up;
		}
	}
	if (slot && bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa - ((__u64)slot << 3)))) {
		s->end = UNWIND_END_READ_FAILED;
		return 1;
	}
	if (!ra) {
		s->end = UNWIND_END_ROOT;
		return 1;
	}
	s->ip = ra;
	/* Above an interpreted frame, the caller's frame begins where its
	 * sp was before the interpreter (or the adapter calling it) pushed
	 * arguments and locals: a compiled caller's frame size counts from
	 * there. Taken only if it lies above, and within 1 MiB. */
	s->sp = s->sender_sp > cfa && s->sender_sp - cfa < (1 << 20) ? s->sender_sp : cfa;
	s->sender_sp = 0;
	s->bp = bp;
	s->return_address = 1;
	return 0;
}

static long unwind_step(__u64 i, struct ustack_loop *l)
{
	long done = unwind_frame(&l->s, l->proc, l->frames);

	/* The verifier knows nothing of a global function's result, and a
	 * callback must return 0 or 1: clang, which knows it is, would drop
	 * the test without this barrier. */
	asm volatile("" : "+r"(done));
	return done ? 1 : 0;
}

/* Walk the user stack of the current task from (ip, sp, bp) into frames.
 * Returns the number of frames; *end says why it stopped, and on a hand
 * over *regs are the registers of the frame it stopped at. */
static __always_inline __u32 unwind_user(__u32 tgid, __u64 regs[3], __u64 *frames, __u32 *end, __u32 may_hand_over)
{
	struct ustack_loop l = {
		.frames = (struct unwind_frames *)frames,
		.s = {
			.ip = regs[0],
			.sp = regs[1],
			.bp = regs[2],
			.end = UNWIND_END_MAX_FRAMES,
			.may_hand_over = may_hand_over,
		},
	};

	l.proc = bpf_map_lookup_elem(&unwind_processes, &tgid);
	l.s.no_process_end = !l.proc && process_refused(tgid) ? UNWIND_END_REFUSED : UNWIND_END_NO_PROCESS;
	bpf_loop(UNWIND_MAX_FRAMES + 1, unwind_step, &l, 0);
	*end = l.s.end;
	regs[0] = l.s.ip;
	regs[1] = l.s.sp;
	regs[2] = l.s.bp;
	return l.s.n;
}

#endif /* __UNWIND_BPF_H */
