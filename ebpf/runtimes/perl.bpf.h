/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * perl.bpf.h: the Perl (5.36, built with MULTIPLICITY: Debian's) subs the
 * sampled process is in, read in the kernel beside its native stack from
 * its interpreter's context stacks, by the CPython walk's entry and state
 * (python.bpf.h): PY_WALK_PERL in the entry says its fields hold Perl's
 * offsets (runtimes/perl/process.rs):
 *
 *   tss_addr          &PL_curinterp (the first interpreter: the main thread's)
 *   tstate_frame      the interpreter's Icurstackinfo (PERL_SI *)
 *   cframe_current    the interpreter's Icurcop (COP *: the running statement)
 *   frame_previous    PERL_SI.si_prev
 *   frame_owner       PERL_SI.si_cxstack
 *   frame_is_entry    PERL_SI.si_cxsubix (an I32: the innermost sub, format or eval)
 *   frame_code        PERL_CONTEXT.blk_sub.cv
 *   frame_instr       PERL_CONTEXT.blk_oldcop (the caller's statement)
 *   tsd_offset        PERL_CONTEXT.blk_sub.retop (NULL: entered from C)
 *   code_qualname     PERL_CONTEXT.blk_sub.old_cxsubix (the one below it)
 *   tstate_native_tid the interpreter's size (PL_interp_size)
 *   version           PERL_SI.si_cxix (an I32: the innermost context)
 *   code_linetable    the interpreter's Iphase (PERL_PHASE_RUN: running the program)
 *   tstate_pthread    the interpreter's Iorigfilename (the main program's file)
 *   code_firstlineno  COP.cop_line
 *   code_filename     COP.cop_file (a char *: an ithreads build's)
 *   code_read_at      XPVCV.xcv_stash: start, root, gv (or name), file follow
 *
 * A Perl sub call is no C call: one run loop (Perl_runops_standard) runs a
 * whole stack of subs, whose calls are contexts (PERL_CONTEXT) in an array
 * per stack info (PERL_SI); a sort block, a tie, DESTROY or a signal
 * handler runs in a nested loop on a stack info of its own. The walk
 * follows each stack info's chain of sub, format and eval contexts
 * (si_cxsubix, then each one's old_cxsubix: loops and blocks between are
 * not read, and a context being pushed above the innermost sub, its slot
 * still holding what was there before, is never taken for one), then its
 * si_prev's. Each
 * sub's call gives a pair {CV | PY_SEGMENT_END, its line}: the line is the
 * running statement's for the innermost, for the others the statement that
 * called the one inside it (blk_oldcop of the context above); an innermost
 * sub whose statement is still its caller's (entering, leaving) has none
 * (0). A string eval or a require gives a pair of its file instead (the
 * eval's "(eval 12)", the file required), marked PERL_FRAME_EVAL, and the
 * main program ends the chain as one of its script's file, marked
 * PERL_FRAME_MAIN; the low three bits of a file's address ride in the line
 * word (bits 32-34). Each code word's top bits carry half of a
 * fingerprint: of the CV's stash, start, root and file words, or of a file
 * name's first 16 bytes; userspace names a frame only if it reads the
 * same. A sub entered from C (call_sv: a sort's comparator by name, an XS
 * module's callback, DESTROY, BEGIN; no return op) and the last frame of
 * each stack info end a segment: one native run loop ran it. Eval blocks
 * (`eval {}`, call_sv's own) and a regex code block's stand-in sub are
 * walked through, named by nothing; a context in the chain that is no sub,
 * format or eval ends its stack info's walk. Every read is of the process's own
 * memory; a context or stack info that cannot be read ends the chain. The
 * interpreter is the main thread's (another thread of a threaded program
 * runs an interpreter of its own): another thread gets no Perl frames.
 */
#ifndef __PERL_BPF_H
#define __PERL_BPF_H

/* The stack info at w->s->si: its sub contexts are walked from the innermost
 * (w->s->frame: its index, negative for none). False when it cannot be read. */
static __always_inline bool perl_enter(struct py_walk *w)
{
	struct python_process *p = w->p;
	__u64 cxstack = 0;
	__s32 index = -1;

	if (bpf_probe_read_user(&cxstack, sizeof(cxstack), (void *)(w->s->si + p->frame_owner)) ||
	    bpf_probe_read_user(&index, sizeof(index), (void *)(w->s->si + p->frame_is_entry)) || !cxstack)
		return false;
	w->s->base = cxstack;
	w->s->frame = (__u64)(__s64)index;
	return true;
}

/* Whether the context on top of the innermost stack info, above its
 * innermost sub, is a sub's (or a format's, an eval's) being pushed or
 * popped: then PL_curcop may be its statement, not the innermost sub's,
 * and w->s->cop is marked so (its bit 0: a COP is 8-aligned). A mark, not a
 * field of its own: the verifier then follows the walk once, not once
 * with each value of a flag. */
static __always_inline void perl_top(struct py_walk *w)
{
	__s32 top = -1;
	__u8 type = 0;

	if (bpf_probe_read_user(&top, sizeof(top), (void *)(w->s->si + w->p->version)) || top <= (__s64)w->s->frame ||
	    top > 65535 || bpf_probe_read_user(&type, sizeof(type), (void *)(w->s->base + (__u64)top * PERL_CX_SIZE)))
		return;
	/* A try block's context stays above the sub for its whole body. */
	if ((type & 0xf) == PERL_CXT_EVAL && (type & PERL_CXP_TRY))
		return;
	type &= 0xf;
	if (type == PERL_CXT_SUB || type == PERL_CXT_FORMAT || type == PERL_CXT_EVAL)
		w->s->cop |= 1;
}

/* The line of the statement at `cop` (0: none, or unreadable, or the
 * parser's: PL_compiling, inside the interpreter, counts the lines it has
 * read, ahead of what runs and sometimes of another file's). */
static __always_inline __u32 perl_line(struct py_walk *w, __u64 cop)
{
	__u32 line = 0;

	cop &= ~7ULL;
	if (cop && cop - w->s->interp >= w->p->tstate_native_tid)
		bpf_probe_read_user(&line, sizeof(line), (void *)(cop + w->p->code_firstlineno));
	return line;
}

/* A pair of the file the statement at w->s->cop is in: an eval's code, a
 * required file's, the main program's (`mark`). While Perl compiles, the
 * statement is PL_compiling, whose file is the one being compiled: the
 * innermost require's, not an outer one's (no file: "(eval)") nor the main
 * program's (its own, PL_origfilename). */
static __always_inline void perl_file_pair(struct py_walk *w, __u64 mark, __u32 line)
{
	__u64 file = 0, head[2] = {}, h = 0, addr = (1ULL << PY_ADDR_BITS) - 1;
	__u64 cop = w->s->cop & ~7ULL, at = cop + w->p->code_filename;

	if (cop && cop - w->s->interp < w->p->tstate_native_tid) {
		if (mark == PERL_FRAME_MAIN)
			at = w->s->interp + w->p->tstate_pthread;
		else if (w->s->n)
			at = 0;
	}
	if (cop && at && !bpf_probe_read_user(&file, sizeof(file), (void *)at) && file &&
	    !bpf_probe_read_user(head, sizeof(head), (void *)file)) {
		h = head[0];
		h = (h ^ head[1]) * PY_FP_MUL;
		h >>= 32;
	}
	/* No statement to name the main program by (an interpreter not
	 * running yet): no root frame. */
	if (!file && mark == PERL_FRAME_MAIN)
		return;
	w->s->hash = (w->s->hash ^ file ^ ((__u64)line << 17)) * 0x100000001b3ULL;
	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] = (file & addr & ~7ULL) | (h >> 16) << PY_ADDR_BITS | mark;
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] =
		line | (file & 7) << 32 | (h & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n++;
	w->s->seg++;
}

/* A pair of the sub `cv` at `line`, ending a segment when `end`; a sub a
 * C loop calls again and again (MULTICALL: a sort's comparator, List::Util's
 * blocks) keeps its context between calls, its loop gone: marked (bit
 * PERL_LINE_MULTICALL of the line word), userspace leaves its segment out
 * when the native stack has no loop for it. */
static __always_inline void perl_sub_pair(struct py_walk *w, __u64 cv, __u32 line, bool end, bool multicall)
{
	/* stash, start, root, gv or name, file: the name word left out (a
	 * sub named by its own HEK gets a GV once something asks for one). */
	__u64 body = 0, words[5] = {}, h = 0, addr = (1ULL << PY_ADDR_BITS) - 1;

	if (!bpf_probe_read_user(&body, sizeof(body), (void *)cv) && body &&
	    !bpf_probe_read_user(words, sizeof(words), (void *)(body + w->p->code_read_at))) {
		h = words[0];
		h = (h ^ words[1]) * PY_FP_MUL;
		h = (h ^ words[2]) * PY_FP_MUL;
		h = (h ^ words[4]) * PY_FP_MUL;
		h >>= 32;
	}
	w->s->hash = (w->s->hash ^ cv ^ ((__u64)line << 17)) * 0x100000001b3ULL;
	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] =
		(cv & addr & ~7ULL) | (h >> 16) << PY_ADDR_BITS | (end ? PY_SEGMENT_END : 0);
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] =
		line | (multicall ? PERL_LINE_MULTICALL : 0) | (h & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n++;
	w->s->seg++;
}

static long perl_step(__u64 i, struct py_walk *w)
{
	struct python_process *p = w->p;
	__u64 previous = 0, oldcop, cv;
	__s64 index = (__s64)w->s->frame;
	__s32 below;
	__u32 line;
	__u8 type;
	bool is_sub;

	if (w->s->at + 1 >= UNWIND_MAX_FRAMES) {
		w->s->end = PY_END_MAX_FRAMES;
		return 1;
	}
	if (index < 0) {
		/* This stack info's contexts are done: one run loop ran them. */
		if (bpf_probe_read_user(&previous, sizeof(previous), (void *)(w->s->si + p->frame_previous))) {
			w->s->end = PY_END_READ_FAILED;
			return 1;
		}
		if (!previous) {
			/* The main program roots the main stack info's segment. Out
			 * of the run phase (compiling: BEGIN; END blocks) what runs
			 * on the main stack info was called from C by the loop the
			 * main program's frame stands for: one segment with it. */
			__s32 phase = PERL_PHASE_RUN;

			bpf_probe_read_user(&phase, sizeof(phase), (void *)(w->s->interp + p->code_linetable));
			if (phase != PERL_PHASE_RUN && w->s->n)
				w->frames[(w->s->at - 2) & (UNWIND_MAX_FRAMES - 1)] &= ~(__u64)PY_SEGMENT_END;
			perl_file_pair(w, PERL_FRAME_MAIN, (w->s->n == 0 && (w->s->cop & 1)) ? 0 : perl_line(w, w->s->cop));
			w->s->end = PY_END_ROOT;
			return 1;
		}
		if (w->s->seg)
			w->frames[(w->s->at - 2) & (UNWIND_MAX_FRAMES - 1)] |= PY_SEGMENT_END;
		w->s->seg = 0;
		w->s->si = previous;
		if (++w->s->stackinfos > PERL_MAX_STACKINFOS) {
			w->s->end = PY_END_MAX_FRAMES;
			return 1;
		}
		if (!perl_enter(w)) {
			w->s->end = PY_END_READ_FAILED;
			return 1;
		}
		return 0;
	}
	/* More contexts than a stack holds: a lie, or garbage. */
	if (index > 65535 ||
	    bpf_probe_read_user(w->buf, PERL_CX_SIZE, (void *)(w->s->base + (__u64)index * PERL_CX_SIZE))) {
		w->s->end = PY_END_READ_FAILED;
		return 1;
	}
	type = w->buf[0] & 0xf;
	oldcop = py_word(w, p->frame_instr);
	below = (__s32)py_word(w, p->code_qualname);
	/* Each link goes down the stack; one that does not ends the walk of
	 * this stack info, as a context that is no sub, format or eval does. */
	w->s->frame = (below < index) ? (__u64)(__s64)below : (__u64)-1;
	is_sub = type == PERL_CXT_SUB || type == PERL_CXT_FORMAT;
	if (!is_sub && type != PERL_CXT_EVAL) {
		w->s->frame = (__u64)-1;
		return 0;
	}
	/* Walked through: a regex code block's stand-in (the sub around it is
	 * below), an eval block (it runs in the sub around it). */
	if ((type == PERL_CXT_SUB && (w->buf[0] & PERL_CXP_SUB_RE_FAKE)) ||
	    (type == PERL_CXT_EVAL && (w->buf[0] & PERL_CXP_EVALBLOCK)))
		return 0;
	/* A sub's context with no CV (being set up, or torn down): no frame. */
	cv = is_sub ? py_word(w, p->frame_code) : 0;
	if (is_sub && !cv) {
		w->s->cop = oldcop;
		return 0;
	}
	/* The innermost has no line when its statement may still be another's:
	 * its caller's (called, its first statement not begun; returning), or,
	 * with a sub's context above it being pushed or popped, the callee's. */
	line = perl_line(w, w->s->cop);
	if (w->s->n == 0 && (oldcop == w->s->cop || (w->s->cop & 1)))
		line = 0;
	if (is_sub)
		perl_sub_pair(w, cv, line, py_word(w, p->tsd_offset) == 0,
			      type == PERL_CXT_SUB && (w->buf[0] & PERL_CXP_MULTICALL));
	else
		perl_file_pair(w, PERL_FRAME_EVAL, line);
	/* The statement that called it is where the frame below it runs. */
	w->s->cop = oldcop;
	return 0;
}

#endif /* __PERL_BPF_H */
