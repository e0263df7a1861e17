/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * go.bpf.h: the pprof labels (runtime/pprof.Do, SetGoroutineLabels) of the
 * goroutine a Go program's thread runs, read in the kernel beside its
 * native stack, by the CPython walk's entry and state (python.bpf.h): a Go
 * program runs no interpreter, and PY_WALK_GO in its entry says its fields
 * hold Go's offsets (runtimes/go/process.rs):
 *
 *   tss_addr          where the thread's g is, from its fsbase (signed: -8
 *                     in a program without cgo, runtime.tlsg's place in the
 *                     executable's TLS block with cgo)
 *   tstate_frame      runtime.g.m
 *   cframe_current    runtime.m.curg
 *   frame_code        runtime.g.labels
 *
 * The g in the thread's TLS may be the M's own (g0, gsignal: the scheduler,
 * a signal handler); the goroutine the M runs is its curg, kept through a
 * system call (a blocking read, a futex) and nil while the M looks for
 * work: a thread with no goroutine gets no pair. A goroutine's labels are a
 * *labelMap (a pointer to a map[string]string) that pprof never changes once
 * set (new labels are a new map), and each map has its own random hash seed
 * (hmap.hash0).
 *
 * In: that entry, the task's fsbase. Out: at most one pair, {the map (hmap)
 * | PY_SEGMENT_END, 0}, the seed's halves in the words' top bits as a code
 * object's fingerprint is: userspace reads the map later and names it only
 * if it still has that seed (a map freed and its memory reused never lends
 * its labels). A goroutine without labels gets none. Every read is of the
 * thread's own memory.
 */
#ifndef __GO_BPF_H
#define __GO_BPF_H

static __always_inline void go_labels(struct py_walk *w, struct task_struct *task)
{
	struct python_process *p = w->p;
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
	__u64 g = 0, m = 0, curg = 0, labels = 0, hmap = 0;
	__u32 hash0 = 0;

	w->s->end = PY_END_READ_FAILED;
	if (!fsbase || bpf_probe_read_user(&g, sizeof(g), (void *)(fsbase + (__s64)p->tss_addr)))
		return;
	w->s->end = PY_END_NO_THREAD;
	if (!g || bpf_probe_read_user(&m, sizeof(m), (void *)(g + p->tstate_frame)) || !m ||
	    bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + p->cframe_current)) || !curg)
		return;
	w->s->end = PY_END_ROOT;
	if (bpf_probe_read_user(&labels, sizeof(labels), (void *)(curg + p->frame_code)) || !labels ||
	    bpf_probe_read_user(&hmap, sizeof(hmap), (void *)labels) || !hmap ||
	    bpf_probe_read_user(&hash0, sizeof(hash0), (void *)(hmap + GO_HMAP_HASH0)))
		return;
	hmap &= (1ULL << PY_ADDR_BITS) - 1;
	w->frames[w->s->at & (UNWIND_MAX_FRAMES - 1)] = (hmap & ~7ULL) | (__u64)(hash0 >> 16) << PY_ADDR_BITS | PY_SEGMENT_END;
	w->frames[(w->s->at + 1) & (UNWIND_MAX_FRAMES - 1)] = (__u64)(hash0 & 0xffff) << PY_ADDR_BITS;
	w->s->at += 2;
	w->s->n = 1;
	w->s->hash = (w->s->hash ^ hmap ^ hash0) * 0x100000001b3ULL;
}

#endif /* __GO_BPF_H */
