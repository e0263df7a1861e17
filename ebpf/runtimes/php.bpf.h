/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * php.bpf.h: the PHP (8.x, non-thread-safe builds: the CLI's, FPM's) call
 * chain of the sampled process, read in the kernel beside its native
 * stack, by the CPython walk's entry and state (python.bpf.h): a process
 * runs one interpreter or the other, and PY_WALK_PHP in its entry says
 * which, and that its fields hold PHP's offsets (runtimes/php/process.rs):
 *
 *   tss_addr          &executor_globals.current_execute_data
 *   frame_instr       zend_execute_data.opline
 *   frame_code        zend_execute_data.func
 *   frame_owner       zend_execute_data.This.u1.type_info (the call's flags)
 *   frame_previous    zend_execute_data.prev_execute_data
 *   code_qualname     zend_function.common.function_name
 *   code_filename     zend_op_array.filename (line_start, line_end after it)
 *   frame_is_entry    zend_op.lineno
 *
 * In: that entry. Out: per user function's frame, leaf first, the pair
 * {zend_function | PY_SEGMENT_END, the line of its opline}, each word's
 * top bits carrying half of the function's fingerprint (its name, file and
 * first line: userspace names a function only if it still has the same).
 * A frame the VM entered from C (ZEND_CALL_TOP: the script's, a callback's
 * from array_map or usort) ends a segment: one native execute_ex call runs
 * each. Internal functions' frames (strlen, array_map) are left to the
 * native stack, where their C code runs. Every read is of the process's
 * own memory; a frame that cannot be read ends the chain, a function that
 * cannot be read is kept, unnamed. The executor's state is the main
 * thread's (a non-thread-safe PHP runs scripts there): another thread of
 * the process (an extension's) gets no PHP frames.
 */
#ifndef __PHP_BPF_H
#define __PHP_BPF_H

static long php_step(__u64 i, struct py_walk *w)
{
	struct python_process *p = w->p;
	__u64 ex = w->s->frame, func, line_word = 0, head[2] = {}, tail[2] = {}, h;
	__u32 info, line = 0;
	bool known;

	if (!ex) {
		w->s->end = PY_END_ROOT;
		return 1;
	}
	if (w->s->at + 1 >= UNWIND_MAX_FRAMES) {
		w->s->end = PY_END_MAX_FRAMES;
		return 1;
	}
	if (bpf_probe_read_user(w->buf, PHP_FRAME_READ, (void *)ex)) {
		w->s->end = PY_END_READ_FAILED;
		return 1;
	}
	func = py_word(w, p->frame_code);
	info = (__u32)py_word(w, p->frame_owner);
	w->s->frame = py_word(w, p->frame_previous);
	if (bpf_probe_read_user(&line_word, sizeof(line), (void *)(py_word(w, p->frame_instr) + p->frame_is_entry)) == 0)
		line = (__u32)line_word;
	w->s->hash = (w->s->hash ^ func ^ ((__u64)line << 17)) * 0x100000001b3ULL;
	if (!func)
		return 0;
	/* {type, arg_flags, fn_flags} then function_name; filename, line_start,
	 * line_end. A function that cannot be read keeps its place (and the end
	 * of its segment) with no fingerprint: userspace names it unnamed. */
	known = !bpf_probe_read_user(head, sizeof(head), (void *)func) &&
		!bpf_probe_read_user(tail, sizeof(tail), (void *)(func + p->code_filename));
	if (known && (__u8)head[0] != PHP_USER_FUNCTION && (__u8)head[0] != PHP_EVAL_CODE)
		return 0; /* an internal function: its C code is in the native stack */
	/* The running frame's opline is saved only before a call or what may
	 * throw (the VM keeps it in a register): a frame just set up may hold
	 * another's. A line outside the function's [line_start, line_end] is
	 * none (0). */
	if (!known || line < (__u32)tail[1] || line > (__u32)(tail[1] >> 32))
		line = 0;
	__u64 addr = (1ULL << PY_ADDR_BITS) - 1;
	h = head[1];
	h = (h ^ tail[0]) * PY_FP_MUL;
	h = h * PY_FP_MUL; /* no line table: its word 0 */
	h = (h ^ (__u32)tail[1]) * PY_FP_MUL;
	h = known ? h >> 32 : 0;
	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] =
		(func & addr & ~7ULL) | (h >> 16) << PY_ADDR_BITS | ((info & PHP_CALL_TOP) ? PY_SEGMENT_END : 0) |
		((known && (__u8)head[0] == PHP_EVAL_CODE) ? PHP_FRAME_EVAL : 0);
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] = line | (h & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n++;
	return 0;
}

#endif /* __PHP_BPF_H */
