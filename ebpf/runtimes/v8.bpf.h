/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* V8's frames for the native walker (included by unwind.bpf.h, whose walk
 * calls this at each frame-pointer frame of a process that embeds V8).
 *
 * In: the walk's state, the process's entry (the v8dbg_ constants'
 * offsets, written by userspace from the binary: userspace/src/runtimes/v8/).
 * Out: a JavaScript frame's SharedFunctionInfo, its name word and its
 * JSFunction after the frame's address in the frame array (V8_FRAME_TAG
 * words), which userspace names from the process's memory. */

#ifndef __V8_BPF_H
#define __V8_BPF_H

/* The JavaScript function of the V8 frame whose frame pointer is fp, after
 * its address: V8_FRAME_TAG | its SharedFunctionInfo, then that object's
 * name-or-scope-info word. Only a frame whose context slot holds a heap
 * object is a JavaScript frame (V8's other frames keep a small integer
 * there, their type); the function and its shared info must be tagged
 * heap pointers too. Userspace reads the rest, and names the frame only
 * if the object is a SharedFunctionInfo whose word is still this one.
 */
__noinline int v8_frame(struct ustack_walk *s, struct unwind_frames *frames, struct unwind_process *p, __u64 fp)
{
	__u64 marker = 0, function = 0, shared = 0, name = 0;

	if (!s || !frames || !p || s->n + 3 > UNWIND_MAX_FRAMES || fp < 64)
		return 0;
	if (bpf_probe_read_user(&marker, sizeof(marker), (void *)(fp + (__s64)p->v8.marker_at)) ||
	    (marker & V8_HEAP_OBJECT_TAG_MASK) != V8_HEAP_OBJECT_TAG)
		return 0;
	if (bpf_probe_read_user(&function, sizeof(function), (void *)(fp + (__s64)p->v8.function_at)) ||
	    (function & V8_HEAP_OBJECT_TAG_MASK) != V8_HEAP_OBJECT_TAG || function >= (1ULL << 47))
		return 0;
	if (bpf_probe_read_user(&shared, sizeof(shared), (void *)(function - 1 + p->v8.shared_at)) ||
	    (shared & V8_HEAP_OBJECT_TAG_MASK) != V8_HEAP_OBJECT_TAG || shared >= (1ULL << 47))
		return 0;
	/* A tagged pointer or small integer: never a word with the tags'
	 * bits, which userspace would take for another frame's tag. */
	if (bpf_probe_read_user(&name, sizeof(name), (void *)(shared - 1 + p->v8.name_at)) || (name >> 61))
		return 0;
	frames->f[s->n & (UNWIND_MAX_FRAMES - 1)] = V8_FRAME_TAG | shared;
	frames->f[(s->n + 1) & (UNWIND_MAX_FRAMES - 1)] = name;
	/* The JSFunction (a tagged pointer below 2^47, checked above): its
	 * code, which userspace reads, says which functions the optimizing
	 * compiler inlined where the frame is. */
	frames->f[(s->n + 2) & (UNWIND_MAX_FRAMES - 1)] = function;
	s->n += 3;
	return 0;
}

#endif /* __V8_BPF_H */
