/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * python.bpf.h: the CPython frame chain of the sampled thread, read in the
 * kernel at the sample, next to its native stack.
 *
 * In: `python_procs` (tgid -> where the interpreter keeps its per-thread
 * state and the offsets of its structures, written by userspace from the
 * binary it maps: runtimes/python/binary.rs) and the task's fsbase. Out: up to
 * PY_MAX_FRAMES (code object, instruction pointer) pairs, leaf first, in
 * the sample's frame array after its native frames; userspace names the
 * code objects from the process's memory and puts the frames where the
 * interpreter's native eval frames are. PHP's, Perl's and Ruby's chains are
 * walked by the same entry and state (php.bpf.h, perl.bpf.h, ruby.bpf.h;
 * a Go program's goroutine labels: go.bpf.h).
 *
 * The thread's state is its own, not the GIL holder's: CPython keeps it
 * under a pthread key (`autoTSSkey`), which glibc stores in the thread's
 * descriptor at fsbase. The state read is checked to be this thread's
 * (its native_thread_id; before 3.11, its pthread_self, which is fsbase),
 * so a wrong layout gives no Python frames, never another thread's. Every
 * read is of the thread's own memory; a read that fails ends the chain
 * (PY_END_READ_FAILED).
 *
 * Two shapes of frame chain: 3.11+'s _PyInterpreterFrame, several to one
 * C-level call of the eval loop (ended by is_entry or, 3.12+, a shim frame
 * the C stack owns), and 3.8-3.10's PyFrameObject (PY_WALK_FRAME_OBJECTS),
 * one to each call, its instruction the int f_lasti.
 */
#ifndef __PYTHON_BPF_H
#define __PYTHON_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* per Python process, not 2 MB up front */
	__type(key, __u32);
	__type(value, struct python_process);
	__uint(max_entries, PY_MAX_PROCESSES);
} python_procs SEC(".maps");

/* The walk's state, shared with each bpf_loop() iteration. It lives in map
 * memory, whose contents the verifier does not track: on the caller's
 * stack every field was a value it followed from step to step (a count,
 * the statement's tag bits, a comparison's outcome), no step's state
 * repeated another's, and it checked each step thousands of times over:
 * 6,000 states and 110 ms of verifying, and 100+ MiB of kernel memory
 * charged to the loader's cgroup, for each of the three programs that walk
 * (kernel 6.18; ARCHITECTURE 79). */
struct py_walk_state {
	__u64 frame;       /* the next frame to read (_PyInterpreterFrame, PyFrameObject, zend_execute_data) */
	__u64 hash;        /* of every (code, instruction) of the chain */
	/* Perl's (perl.bpf.h): the interpreter, the stack info walked, where
	 * its context array starts, the statement the next sub is at. */
	__u64 interp;
	__u64 si;
	__u64 base;
	__u64 cop;
	__u32 at;          /* next free slot of frames */
	__u32 n;           /* pairs written */
	__u32 end;         /* PY_END_* */
	/* Perl's: pairs written of the stack info, stack infos followed. */
	__u32 seg;
	__u32 stackinfos;
	/* Only the chain's hash is wanted: no fingerprints read. */
	__u32 hash_only;
};

/* One frame's first bytes, read at once: every field the walk needs lies
 * in them (below PY_FRAME_READ or PY_FRAME_OBJECT_READ); then the code
 * object's bytes its fingerprint is made of. 136: a word at any offset
 * masked to 127 stays inside. */
struct py_frame_buf {
	__u8 b[136];
	struct py_walk_state s;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct py_frame_buf);
	__uint(max_entries, 1);
} py_frame_buf SEC(".maps");

/* The walk: pointers on the caller's stack (a pointer stored in map memory
 * comes back as a number), everything else in the CPU's py_frame_buf. */
struct py_walk {
	struct python_process *p;
	__u64 *frames;     /* the record's frame array (a scratch one when only the hash is wanted) */
	__u8 *buf;         /* py_frame_buf's bytes */
	struct py_walk_state *s;
};

static __always_inline __u64 py_word(struct py_walk *w, __u16 off)
{
	return *(__u64 *)(w->buf + (off & 127));
}

/* A word of the code object's bytes read at code_read_at. */
static __always_inline __u64 py_code_word(struct py_walk *w, __u16 off)
{
	return *(__u64 *)(w->buf + ((off - w->p->code_read_at) & 127));
}

/* The code object's fingerprint: its name, file and line table objects
 * and first line, mixed (runtimes/python/read.rs computes the same from what
 * it reads). 0 when it cannot be read: userspace then names nothing. */
static __always_inline __u32 py_fingerprint(struct py_walk *w, __u64 code)
{
	struct python_process *p = w->p;
	__u64 h;

	if (bpf_probe_read_user(w->buf, PY_CODE_READ, (void *)(code + p->code_read_at)))
		return 0;
	h = py_code_word(w, p->code_qualname);
	h = (h ^ py_code_word(w, p->code_filename)) * PY_FP_MUL;
	h = (h ^ py_code_word(w, p->code_linetable)) * PY_FP_MUL;
	h = (h ^ (__u32)py_code_word(w, p->code_firstlineno)) * PY_FP_MUL;
	return h >> 32;
}

static long py_step(__u64 i, struct py_walk *w)
{
	struct python_process *p = w->p;
	__u64 code, previous, instr;
	__u8 owner = 0, entry;
	int objects = p->flags & PY_WALK_FRAME_OBJECTS;
	long failed;

	if (!w->s->frame) {
		w->s->end = PY_END_ROOT;
		return 1;
	}
	if (w->s->at + 1 >= UNWIND_MAX_FRAMES) {
		w->s->end = PY_END_MAX_FRAMES;
		return 1;
	}
	if (objects)
		failed = bpf_probe_read_user(w->buf, PY_FRAME_OBJECT_READ, (void *)w->s->frame);
	else
		failed = bpf_probe_read_user(w->buf, PY_FRAME_READ, (void *)w->s->frame);
	if (failed) {
		w->s->end = PY_END_READ_FAILED;
		return 1;
	}
	/* 3.14's f_executable is a tagged reference: the tag masked off (a
	 * no-op before, where it is a plain pointer). */
	code = py_word(w, p->frame_code) & ~PY_TAG_BITS;
	previous = py_word(w, p->frame_previous);
	instr = py_word(w, p->frame_instr);
	if (objects)
		instr = (__u32)instr; /* f_lasti: an int, -1 before the first instruction */
	if (p->frame_owner != PY_NO_OFFSET)
		owner = w->buf[p->frame_owner & 127];
	/* Before 3.11 each frame is run by an eval call of its own. */
	entry = objects || (p->frame_is_entry != PY_NO_OFFSET && w->buf[p->frame_is_entry & 127]);
	w->s->frame = previous;
	w->s->hash = (w->s->hash ^ code ^ (instr << 17) ^ owner) * 0x100000001b3ULL;
	/* 3.12+: the frame a C-level eval call starts with is a shim owned by
	 * the C stack; it ends the segment of the frames above it. */
	if (owner == PY_OWNED_BY_CSTACK) {
		if (w->s->n)
			w->frames[(w->s->at - 2) & (UNWIND_MAX_FRAMES - 1)] |= PY_SEGMENT_END;
		return 0;
	}
	/* After the frame's fields are out of the buffer: it is reused. */
	__u64 fp = w->s->hash_only ? 0 : py_fingerprint(w, code);
	__u64 addr = (1ULL << PY_ADDR_BITS) - 1;

	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] = (code & addr) | (fp >> 16) << PY_ADDR_BITS | (entry ? PY_SEGMENT_END : 0);
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] = (instr & addr) | (fp & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n++;
	return 0;
}

#include "php.bpf.h"
#include "perl.bpf.h"
#include "ruby.bpf.h"
#include "go.bpf.h"

/* The thread's PyThreadState, or 0 when it has none (a thread Python
 * does not know, an interpreter not started yet) or it cannot be read. */
static __always_inline __u64 py_thread_state(struct python_process *p, struct task_struct *task, __u32 tid)
{
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
	__u32 tss[2] = {}; /* Py_tss_t: {int _is_initialized; pthread_key_t _key} */
	__u64 tstate = 0, pthread = 0;
	__s32 native_tid = 0;

	if (!fsbase || bpf_probe_read_user(tss, sizeof(tss), (void *)p->tss_addr) || !tss[0] || tss[1] >= 32)
		return 0;
	/* glibc: struct pthread's specific_1stblock[32] of {seq, data}. */
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)(fsbase + p->tsd_offset + 16 * (__u64)tss[1] + 8)) || !tstate)
		return 0;
	if (p->tstate_native_tid != PY_NO_OFFSET) {
		if (bpf_probe_read_user(&native_tid, sizeof(native_tid), (void *)(tstate + p->tstate_native_tid)) ||
		    native_tid != (__s32)tid)
			return 0;
		return tstate;
	}
	/* Before 3.11: the state's pthread_self, on glibc the thread's fsbase. */
	if (p->tstate_pthread == PY_NO_OFFSET ||
	    bpf_probe_read_user(&pthread, sizeof(pthread), (void *)(tstate + p->tstate_pthread)) || pthread != fsbase)
		return 0;
	return tstate;
}

/* Where a walk writes, and what it found. */
struct py_out {
	__u32 at;   /* in: the first free slot of frames */
	__u32 n;    /* out: pairs written */
	__u32 end;  /* out: PY_END_* */
	__u32 hash_only; /* in: only the hash is wanted (frames: scratch) */
	__u64 hash; /* out: identifies the chain (0 for none) */
};

/* Walk the Python frames of the current thread into frames[out->at...].
 * A global function: its state lives in its own stack frame, not in the
 * tracepoint programs' (at their 512-byte limit),
 * and the verifier checks it once per program, with unknown inputs, not
 * once per call site's state. The task comes as a number (a global
 * function takes no kernel pointer); it is read through probe reads. */
__noinline int python_frames(struct py_out *out, __u32 tgid, __u32 tid, __u64 task_addr, struct unwind_frames *frames)
{
	struct task_struct *task = (struct task_struct *)task_addr;
	struct python_process *p = bpf_map_lookup_elem(&python_procs, &tgid);
	struct py_frame_buf *scratch;
	struct py_walk w = {};
	__u32 zero = 0;
	__u64 tstate;

	if (!out || !frames)
		return 0;
	out->n = 0;
	out->end = PY_END_NONE;
	out->hash = 0;
	if (!p)
		return 0;
	scratch = bpf_map_lookup_elem(&py_frame_buf, &zero);
	if (!scratch)
		return 0;
	w.buf = scratch->b;
	w.s = &scratch->s;
	w.p = p;
	w.frames = frames->f;
	w.s->frame = w.s->interp = w.s->si = w.s->base = w.s->cop = 0;
	w.s->hash_only = out->hash_only;
	w.s->at = out->at;
	w.s->n = w.s->seg = w.s->stackinfos = 0;
	w.s->end = PY_END_MAX_FRAMES;
	w.s->hash = 0xcbf29ce484222325ULL;
	if (p->flags & PY_WALK_PHP) {
		/* The main thread runs the script (a non-thread-safe PHP): the
		 * executor's current frame is its; another thread (an
		 * extension's) has none. */
		if (tid != tgid) {
			out->end = PY_END_NO_THREAD;
			return 0;
		}
		/* Read into the walk's state, not a local: this function's
		 * frame counts against the 512-byte stack of every program
		 * that calls it (see sched/places.bpf.h's walk_stack). */
		if (bpf_probe_read_user(&w.s->frame, sizeof(w.s->frame), (void *)p->tss_addr)) {
			out->end = PY_END_READ_FAILED;
			return 0;
		}
		bpf_loop(PY_MAX_FRAMES, php_step, &w, 0);
		goto done;
	}
	if (p->flags & PY_WALK_PERL) {
		/* The first interpreter, the main thread's (see perl.bpf.h). */
		if (tid != tgid) {
			out->end = PY_END_NO_THREAD;
			return 0;
		}
		if (bpf_probe_read_user(&w.s->interp, sizeof(w.s->interp), (void *)p->tss_addr) || !w.s->interp ||
		    bpf_probe_read_user(&w.s->si, sizeof(w.s->si), (void *)(w.s->interp + p->tstate_frame)) || !w.s->si ||
		    bpf_probe_read_user(&w.s->cop, sizeof(w.s->cop), (void *)(w.s->interp + p->cframe_current)) ||
		    !perl_enter(&w)) {
			out->end = PY_END_READ_FAILED;
			return 0;
		}
		perl_top(&w);
		bpf_loop(PY_MAX_FRAMES, perl_step, &w, 0);
		goto done;
	}
	if (p->flags & PY_WALK_GO) {
		/* The labels of the goroutine this thread runs (see go.bpf.h). */
		go_labels(&w, task);
		goto done;
	}
	if (p->flags & PY_WALK_RUBY) {
		/* Each thread's own execution context (see ruby.bpf.h). */
		__u32 failed = ruby_enter(&w, task);

		if (failed) {
			out->end = failed;
			return 0;
		}
		bpf_loop(PY_MAX_FRAMES, ruby_step, &w, 0);
		goto done;
	}
	tstate = py_thread_state(p, task, tid);
	if (!tstate) {
		out->end = PY_END_NO_THREAD;
		return 0;
	}
	if (bpf_probe_read_user(&w.s->frame, sizeof(w.s->frame), (void *)(tstate + p->tstate_frame))) {
		out->end = PY_END_READ_FAILED;
		return 0;
	}
	/* 3.11/3.12: the state points at a _PyCFrame, which points at the frame. */
	if (p->cframe_current != PY_NO_OFFSET && w.s->frame &&
	    bpf_probe_read_user(&w.s->frame, sizeof(w.s->frame), (void *)(w.s->frame + p->cframe_current))) {
		out->end = PY_END_READ_FAILED;
		return 0;
	}
	bpf_loop(PY_MAX_FRAMES, py_step, &w, 0);
done:
	out->n = w.s->n;
	out->end = w.s->end;
	out->hash = w.s->hash;
	return 0;
}

#endif /* __PYTHON_BPF_H */
