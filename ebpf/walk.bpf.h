/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * walk.bpf.h: a user stack walked in the kernel, its Python frames after
 * it, and whether userspace goes on from where the walk stopped: the one
 * sequence the sampler (sample.bpf.c sample_unwinding) and the tracer
 * (sched/stacks.bpf.h send_unwound_stack) both run. Included after
 * unwind.bpf.h and runtimes/python.bpf.h.
 *
 * In: the current thread (tgid, tid), its user registers, the record's
 * frame array (room for UNWIND_MAX_FRAMES words), whether the walk may stop
 * where only userspace can go on (a stack copy is configured), whether the
 * caller hands such a stop over, and the ring the record goes to. Out: the
 * native frames, leaf first, then the Python (code, instruction) pairs, in
 * the array; their counts and how each walk ended (struct walked); the
 * registers of the frame the walk stopped at, in regs; and what the caller
 * sends (WALK_*).
 */
#ifndef __WALK_BPF_H
#define __WALK_BPF_H

/* What the caller sends. */
#define WALK_SENT 0      /* the walk: it ended, or ends here */
#define WALK_HAND_OVER 1 /* a copy of the stack, for userspace to go on */
#define WALK_CUT 2       /* the walk so far, said as cut: the reader is behind */

struct walked {
	__u32 n;          /* native frames */
	__u32 end;        /* UNWIND_END_* */
	struct py_out py; /* the Python frames: py.n pairs after the native ones */
};

/* Words of the frame array a walk used: the native frames, then two per
 * Python frame. */
static __always_inline __u32 walked_words(const struct walked *w)
{
	return w->n + 2 * (w->py.n & (PY_MAX_FRAMES * 2 - 1));
}

/* Walk the current thread's user stack from regs into frames, then its
 * Python frames. Where the walk stops short and hands over, a copy goes
 * to userspace unless the reader is behind: a 32 KiB copy takes the room
 * of ~30 walked stacks, and once the ring is full whole records are lost;
 * past half full the walk so far goes alone, a cut stack said as such
 * (handovers_skipped). (At a quarter, a new process's first samples were
 * cut beside a compiler loop.) w: zeroed by the caller. Inlined, not a
 * global function: a global function takes no map (the ring), and its
 * frame would add to the tracer's walk_stack, at the stack limit; inlined,
 * walk_stack verifies as before (13,376 instructions processed against
 * 13,388; its frame 360 bytes, as before) and the sampler's walker in
 * fewer (the hand-over tested once, not twice). */
static __always_inline __u32 walk_user_stack(void *ring, __u32 tgid, __u32 tid, __u64 regs[3], __u64 *frames,
					     __u32 may_hand_over, bool hands_over_here, struct walked *w)
{
	w->n = unwind_user(tgid, regs, frames, &w->end, may_hand_over);
	if (w->n > UNWIND_MAX_FRAMES)
		w->n = UNWIND_MAX_FRAMES;
	w->py.at = w->n;
	python_frames(&w->py, tgid, tid, bpf_get_current_task(), (struct unwind_frames *)frames);
	if (!(may_hand_over && unwind_hands_over(w->end, w->n, tgid) && hands_over_here))
		return WALK_SENT;
	if (bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 2)
		return WALK_CUT;
	return WALK_HAND_OVER;
}

#endif /* __WALK_BPF_H */
