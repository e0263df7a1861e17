/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ruby.bpf.h: the Ruby (CRuby 3.1, its shared libruby: Debian's) control
 * frames of the sampled thread, read in the kernel beside its native
 * stack, by the CPython walk's entry and state (python.bpf.h): a process
 * runs one interpreter or the other, and PY_WALK_RUBY in its entry says
 * which, and that its fields hold Ruby's offsets (runtimes/ruby/process.rs):
 *
 *   tss_addr          the GOT slot where ld.so put libruby's TLS module id
 *                     (the DTPMOD64 relocation of ruby_current_ec)
 *   tsd_offset        ruby_current_ec's offset in that module's TLS block
 *   tstate_frame      rb_execution_context_t.cfp
 *   cframe_current    rb_execution_context_t.vm_stack
 *   tstate_native_tid rb_execution_context_t.vm_stack_size (in VALUEs)
 *   frame_instr       rb_control_frame_t.pc
 *   frame_code        rb_control_frame_t.iseq
 *   frame_previous    rb_control_frame_t.ep (ep[0]: the frame's flags)
 *   frame_owner       sizeof(rb_control_frame_t)
 *   frame_is_entry    rb_iseq_t.body
 *   code_linetable    rb_iseq_constant_body.iseq_encoded
 *   code_filename     ... location.pathobj
 *   code_qualname     ... location.label
 *   code_firstlineno  ... location.first_lineno (a Fixnum)
 *
 * The thread's execution context is its own: ruby_current_ec is a
 * thread-local of libruby (general-dynamic: its block found through the
 * thread's DTV, at fsbase + 8 on glibc), so a thread Ruby does not run (its
 * timer thread, a C library's) has none and gets no Ruby frames, and a
 * thread waiting without the GVL still has its own.
 *
 * In: that entry, the task's fsbase. Out: per Ruby-level frame, leaf first
 * (from ec->cfp up to the end of the VM stack, where control frames grow
 * down), the pair {iseq | PY_SEGMENT_END, the instruction's index in the
 * iseq (pc - iseq_encoded, in VALUEs)}, each word's top bits carrying half
 * of the iseq's fingerprint (its label, path, code and first line:
 * userspace names an iseq only if it still has the same). A frame with
 * VM_FRAME_FLAG_FINISH ends a segment: one native vm_exec_core call runs
 * each. C methods' and C blocks' frames (VM_FRAME_FLAG_CFRAME) are left to
 * the native stack, where their C code runs, as are the thread's dummy
 * bottom frames. Every read is of the thread's own memory; a frame that
 * cannot be read ends the chain, an iseq that cannot be read is kept,
 * unnamed.
 */
#ifndef __RUBY_BPF_H
#define __RUBY_BPF_H

static long ruby_step(__u64 i, struct py_walk *w)
{
	struct python_process *p = w->p;
	__u64 cfp = w->s->frame, pc, iseq, flags = 0, body = 0, code = 0, index = 0, fp = 0;

	/* w->s->base: the end of the VM stack, above the thread's first frame. */
	if (!cfp || cfp >= w->s->base) {
		w->s->end = PY_END_ROOT;
		return 1;
	}
	if (w->s->at + 1 >= UNWIND_MAX_FRAMES) {
		w->s->end = PY_END_MAX_FRAMES;
		return 1;
	}
	if (bpf_probe_read_user(w->buf, RUBY_CFP_READ, (void *)cfp) ||
	    bpf_probe_read_user(&flags, sizeof(flags), (void *)py_word(w, p->frame_previous))) {
		w->s->end = PY_END_READ_FAILED;
		return 1;
	}
	pc = py_word(w, p->frame_instr);
	iseq = py_word(w, p->frame_code);
	w->s->frame = cfp + p->frame_owner;
	w->s->hash = (w->s->hash ^ iseq ^ (pc << 17) ^ flags) * 0x100000001b3ULL;
	if ((flags & RUBY_FRAME_FLAG_CFRAME) || (flags & RUBY_FRAME_MAGIC_MASK) == RUBY_FRAME_MAGIC_DUMMY || !pc || !iseq) {
		/* C code (its frames are in the native stack) or nothing running:
		 * it keeps no place. One with FINISH (the dummy bottom frame, the
		 * pc-less frame rb_vm_call_cfunc pushes) lies under a frame that
		 * has it already; marking the frame above keeps that so. */
		if ((flags & RUBY_FRAME_FLAG_FINISH) && w->s->n)
			w->frames[(w->s->at - 2) & (UNWIND_MAX_FRAMES - 1)] |= PY_SEGMENT_END;
		return 0;
	}
	__u64 addr = (1ULL << PY_ADDR_BITS) - 1;
	/* The iseq's body, then the body's words its fingerprint is
	 * made of; the buffer then holds them (the frame's are used). */
	if (!w->s->hash_only && !bpf_probe_read_user(&body, sizeof(body), (void *)(iseq + p->frame_is_entry)) && body) {
		fp = py_fingerprint(w, body);
		code = py_code_word(w, p->code_linetable);
		if (fp && pc >= code && pc - code < (1ULL << 32) * 8)
			index = (pc - code) / 8;
	}
	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] =
		(iseq & addr & ~7ULL) | (fp >> 16) << PY_ADDR_BITS | ((flags & RUBY_FRAME_FLAG_FINISH) ? PY_SEGMENT_END : 0);
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] = index | (fp & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n++;
	return 0;
}

/* The thread's execution context, read through its DTV: 0 when it has none
 * (a thread Ruby does not run) or it cannot be read. Sets w->s->frame (the
 * leaf-most control frame) and w->s->base (the end of its VM stack). */
static __always_inline __u32 ruby_enter(struct py_walk *w, struct task_struct *task)
{
	struct python_process *p = w->p;
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
	__u64 module = 0, dtv = 0, slots = 0, block = 0, ec = 0, stack = 0, size = 0, cfp = 0;

	if (!fsbase || bpf_probe_read_user(&module, sizeof(module), (void *)p->tss_addr) || !module ||
	    module > RUBY_MAX_MODULE_ID)
		return PY_END_READ_FAILED;
	/* glibc's tcbhead_t.dtv, its length in the entry before it (a thread
	 * made before a dlopen'd libruby has a shorter one), then
	 * dtv[module].pointer.val (16-byte entries): the module's TLS block, or
	 * TLS_DTV_UNALLOCATED (-1) in a thread that never touched it. */
	if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(fsbase + 8)) || !dtv ||
	    bpf_probe_read_user(&slots, sizeof(slots), (void *)(dtv - 16)) || module > slots ||
	    bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 16 * module)) || !block || block == ~0ULL ||
	    bpf_probe_read_user(&ec, sizeof(ec), (void *)(block + p->tsd_offset)) || !ec)
		return PY_END_NO_THREAD;
	if (bpf_probe_read_user(&stack, sizeof(stack), (void *)(ec + p->cframe_current)) ||
	    bpf_probe_read_user(&size, sizeof(size), (void *)(ec + p->tstate_native_tid)) ||
	    bpf_probe_read_user(&cfp, sizeof(cfp), (void *)(ec + p->tstate_frame)) || size > (1ULL << 32))
		return PY_END_READ_FAILED;
	w->s->frame = cfp;
	w->s->base = stack + size * 8;
	return PY_END_NONE;
}

#endif /* __RUBY_BPF_H */
