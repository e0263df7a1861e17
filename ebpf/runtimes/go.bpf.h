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
 *   tstate_native_tid runtime.g.goid
 *
 * The g in the thread's TLS may be the M's own (g0, gsignal: the scheduler,
 * a signal handler); the goroutine the M runs is its curg, kept through a
 * system call (a blocking read, a futex) and nil while the M looks for
 * work: a thread with no goroutine gets no pair. A goroutine's labels are a
 * *labelMap (a pointer to a map[string]string) that pprof never changes once
 * set (new labels are a new map), and each map has its own random hash seed
 * (hmap.hash0).
 *
 * Go 1.24 made the labels a list sorted by key (PY_WALK_GO_LABEL_LIST:
 * labelMap{Set{List []Label}}, each Label two strings): there is no seed,
 * so the fingerprint is the list's pointer and length and the first
 * GO_LIST_PRINT_LABELS labels' four words (each string's pointer and
 * length), mixed. A labelMap and its list freed and their memory reused
 * by another goroutine's labels of the same strings' addresses (string
 * constants: the same labels) are the only reuse it does not tell apart.
 *
 * In: that entry, the task's fsbase. Out: at most two pairs. First the
 * goroutine's id, {GO_GOROUTINE_MARK | PY_SEGMENT_END, goid} (address 0,
 * which no label map has): a number, read as it is now, nothing to check
 * later. Then its labels, {the map (hmap; Go 1.24+: the labelMap) |
 * PY_SEGMENT_END, 0}, the seed's (fingerprint's) halves in the words' top
 * bits as a code object's fingerprint is: userspace reads the map later
 * and names it only if it still has that seed (a map freed and its memory
 * reused never lends its labels). A goroutine without labels gets no
 * second pair. Both are mixed into the stack's hash, so a thread's cached
 * stack is sent again when it leaves the CPU at the same place for another
 * goroutine. Every read is of the thread's own memory. A pair that does
 * not fit after the native frames is left out (PY_END_MAX_FRAMES): a
 * stack of 1,021 native frames or more keeps its leaf but not its
 * goroutine or labels (the walk could keep room for them, at the cost of
 * its root-most frames, already cut there: not done).
 */
#ifndef __GO_BPF_H
#define __GO_BPF_H

/* A Go 1.24+ label list's fingerprint (runtimes/go/read.rs computes the
 * same from what it reads): 0 for no labels, or a list that cannot be read
 * or no pprof user makes. */
static __always_inline __u32 go_list_fingerprint(__u64 labels)
{
	__u64 list[2], words[4 * GO_LIST_PRINT_LABELS] = {};
	__u64 h;
	int i;

	if (bpf_probe_read_user(list, sizeof(list), (void *)labels) || !list[0] || !list[1] ||
	    list[1] > GO_LIST_MAX_LABELS)
		return 0;
	if (bpf_probe_read_user(words, list[1] >= GO_LIST_PRINT_LABELS ? sizeof(words) : 4 * 8,
				(void *)list[0]))
		return 0;
	h = (list[0] ^ list[1]) * PY_FP_MUL;
	for (i = 0; i < 4 * GO_LIST_PRINT_LABELS; i++)
		h = (h ^ words[i]) * PY_FP_MUL;
	return (h >> 32) | 1;
}

/* Two words at the walk's next free slots, its chain one pair longer;
 * false (the walk ended as reaching the array's end, as the other
 * runtimes' readers end) where they would not fit. Unchecked, the pairs of
 * a stack of 1,021 native frames or more (the walk keeps up to 1,024)
 * wrapped over its leaf frames. The index goes through an opaque copy
 * after the check: knowing the bound, clang drops the second word's mask,
 * and the verifier then cannot bound it. */
static __always_inline bool go_pair(struct py_walk *w, __u64 first, __u64 second)
{
	__u32 at = w->s->at;

	if (at + 1 >= UNWIND_MAX_FRAMES) {
		w->s->end = PY_END_MAX_FRAMES;
		return false;
	}
	asm volatile("" : "+r"(at));
	w->frames[at & (UNWIND_MAX_FRAMES - 1)] = first;
	w->frames[(at + 1) & (UNWIND_MAX_FRAMES - 1)] = second;
	w->s->at = at + 2;
	w->s->n += 1;
	return true;
}

static __always_inline void go_labels(struct py_walk *w, struct task_struct *task)
{
	struct python_process *p = w->p;
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
	__u64 g = 0, m = 0, curg = 0, labels = 0, hmap = 0, goid = 0;
	__u32 hash0 = 0;

	w->s->end = PY_END_READ_FAILED;
	if (!fsbase || bpf_probe_read_user(&g, sizeof(g), (void *)(fsbase + (__s64)p->tss_addr)))
		return;
	w->s->end = PY_END_NO_THREAD;
	if (!g || bpf_probe_read_user(&m, sizeof(m), (void *)(g + p->tstate_frame)) || !m ||
	    bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + p->cframe_current)) || !curg)
		return;
	w->s->end = PY_END_ROOT;
	if (p->tstate_native_tid != PY_NO_OFFSET &&
	    !bpf_probe_read_user(&goid, sizeof(goid), (void *)(curg + p->tstate_native_tid)) && goid) {
		goid &= (1ULL << PY_ADDR_BITS) - 1;
		if (!go_pair(w, GO_GOROUTINE_MARK | PY_SEGMENT_END, goid))
			return;
		w->s->hash = (w->s->hash ^ goid ^ GO_GOROUTINE_MARK) * 0x100000001b3ULL;
	}
	if (bpf_probe_read_user(&labels, sizeof(labels), (void *)(curg + p->frame_code)) || !labels)
		return;
	if (p->flags & PY_WALK_GO_LABEL_LIST) {
		hash0 = go_list_fingerprint(labels);
		if (!hash0)
			return;
		hmap = labels;
	} else if (bpf_probe_read_user(&hmap, sizeof(hmap), (void *)labels) || !hmap ||
		   bpf_probe_read_user(&hash0, sizeof(hash0), (void *)(hmap + GO_HMAP_HASH0))) {
		return;
	}
	hmap &= (1ULL << PY_ADDR_BITS) - 1;
	if (!go_pair(w, (hmap & ~7ULL) | (__u64)(hash0 >> 16) << PY_ADDR_BITS | PY_SEGMENT_END,
		     (__u64)(hash0 & 0xffff) << PY_ADDR_BITS))
		return;
	w->s->hash = (w->s->hash ^ hmap ^ hash0) * 0x100000001b3ULL;
}

#endif /* __GO_BPF_H */
