/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* HotSpot's frames for the native walker (included by unwind.bpf.h, whose
 * walk calls these where a frame is in the JVM's interpreter or code heap).
 *
 * In: the walk's state (struct ustack_walk), the process's entry (its
 * interpreter's range and code heaps, written by userspace from libjvm's
 * own tables: userspace/src/runtimes/hotspot/). Out: an interpreted frame's
 * Method* and bytecode pointer, a compiled frame's Method* and code blob,
 * after the frame's address in the frame array (JAVA_FRAME_TAG words), and
 * a compiled frame's size from its code blob. */

#ifndef __HOTSPOT_BPF_H
#define __HOTSPOT_BPF_H

/* The Method* and bytecode pointer of the interpreted Java frame whose
 * frame pointer is fp, after its address: the two words JAVA_FRAME_TAG
 * describes. Nothing is added if they cannot be read or are no pointers.
 * Its caller's unextended stack pointer goes to s->sender_sp. */
__noinline int java_frame(struct ustack_walk *s, struct unwind_frames *frames, __u64 fp)
{
	__u64 w[1 + JAVA_FRAME_SENDER_SP_SLOT - JAVA_FRAME_BCP_SLOT];
	__u64 method, bcp;

	if (!s || !frames || fp < 8 * (__u64)(-JAVA_FRAME_BCP_SLOT) ||
	    bpf_probe_read_user(w, sizeof(w), (void *)(fp + 8 * JAVA_FRAME_BCP_SLOT)))
		return 0;
	s->sender_sp = w[JAVA_FRAME_SENDER_SP_SLOT - JAVA_FRAME_BCP_SLOT];
	method = w[JAVA_FRAME_METHOD_SLOT - JAVA_FRAME_BCP_SLOT];
	bcp = w[0];
	if (!method || (method | bcp) >= (1ULL << 47) || (method & 7) || s->n + 2 > UNWIND_MAX_FRAMES)
		return 0;
	frames->f[s->n & (UNWIND_MAX_FRAMES - 1)] = JAVA_FRAME_TAG | method;
	frames->f[(s->n + 1) & (UNWIND_MAX_FRAMES - 1)] = bcp;
	s->n += 2;
	return 0;
}

/* The Method* of the compiled Java frame whose code blob is s->blob,
 * after its address: JAVA_FRAME_TAG | Method*, then JAVA_COMPILED_BLOB |
 * its compile id's low bits | the blob (where a bytecode pointer would be). Other
 * blobs with frames (runtime stubs, adapters) have something else there:
 * only what looks like a pointer goes out, and userspace takes it only if
 * it reads as a method. */
__noinline int compiled_java_frame(struct ustack_walk *s, struct unwind_frames *frames,
					   struct unwind_process *p)
{
	__u64 method = 0, id = 0;
	__s32 compile_id = 0;

	if (!s || !frames || !p || s->n + 2 > UNWIND_MAX_FRAMES ||
	    bpf_probe_read_user(&method, sizeof(method), (void *)(s->blob + p->java_code.method_at)))
		return 0;
	if (!method || method >= (1ULL << 47) || (method & 7) || s->blob >= (1ULL << 47))
		return 0;
	if (p->java_code.compile_id_at &&
	    !bpf_probe_read_user(&compile_id, sizeof(compile_id), (void *)(s->blob + p->java_code.compile_id_at)))
		id = ((__u64)(__u32)compile_id & JAVA_COMPILE_ID_MASK) << JAVA_COMPILE_ID_SHIFT;
	frames->f[s->n & (UNWIND_MAX_FRAMES - 1)] = JAVA_FRAME_TAG | method;
	frames->f[(s->n + 1) & (UNWIND_MAX_FRAMES - 1)] = JAVA_COMPILED_BLOB | id | s->blob;
	s->n += 2;
	return 0;
}

/* One segment-map hop back toward a block's first segment, per bpf_loop()
 * iteration (the verifier checks one hop, not HOTSPOT_MAX_HOPS). */
struct hotspot_hops {
	__u64 segmap;
	__u64 idx;
	__u32 found;
};

static long hotspot_hop(__u64 i, struct hotspot_hops *c)
{
	__u8 hop = 0;

	if (bpf_probe_read_user(&hop, 1, (void *)(c->segmap + c->idx)))
		return 1;
	if (hop == 0) {
		c->found = 1;
		return 1;
	}
	if (hop == 0xff || hop > c->idx)
		return 1;
	c->idx -= hop;
	return 0;
}

/* At a compiled Java leaf, whether ip is in its method's epilogue after
 * the frame was taken down, and what is left of it (as hotspot_frame
 * returns it): C1 and C2 end a method alike, `add $n, %rsp; pop %rbp;`
 * then the return's safepoint poll (JDK 16+: `cmp 0xNN(%r15), %rsp; ja
 * slow`) and `ret`. At the `pop` the caller's rbp and the return address
 * are left (16, the rbp one slot below the return address: 2); after it
 * only the return address (8). Read from the code itself, 16 bytes, each
 * pattern whole up to its `ret`, so a `ja` in a method's body is no
 * epilogue; 0 elsewhere (the frame's size holds). JDKs before 16 poll
 * otherwise and are not matched: such a leaf ends its walk as before. */
static __always_inline __u32 hotspot_leaf_epilogue(__u64 ip)
{
	__u8 b[16] = {};

	if (bpf_probe_read_user(b, sizeof(b), (void *)ip))
		return 0;
	if (b[0] == 0xc3)
		return 8;
	if (b[0] == 0x0f && b[1] == 0x87 && b[6] == 0xc3)
		return 8;
	if (b[0] == 0x49 && b[1] == 0x3b && b[2] == 0xa7 && b[7] == 0x0f && b[8] == 0x87 && b[13] == 0xc3)
		return 8;
	if (b[0] == 0x5d &&
	    (b[1] == 0xc3 ||
	     (b[1] == 0x49 && b[2] == 0x3b && b[3] == 0xa7 && b[8] == 0x0f && b[9] == 0x87 && b[14] == 0xc3)))
		return 16 | 2;
	return 0;
}

/* The frame of the HotSpot code blob holding ip, in code heap `heap` (the
 * index its mapping's bias holds), found through the heap's segment map as the JVM
 * finds it (CodeHeap::find_start): its size in bytes (return address
 * included), ORed with the slot of the caller's saved rbp (2: just below
 * the return address, as C1, C2 and the runtime stubs save it). 0 in the
 * interpreter (walked by rbp) and where the blob is free, unreadable, or
 * has no frame of its own (frame size 0: stubs that jump). A leaf sampled
 * before its frame is complete (in the prologue) has only its return
 * address pushed: 8, no slot. Whoever runs the JVM can write its memory: what is
 * read is bounded, and a wrong size ends the walk at an address in no
 * code, never in a read outside the process. The blob of a frame that
 * has one goes to s->blob (0 otherwise). A global function: the
 * verifier checks it once per program, not at every state the walk's
 * callback reaches it in (as a static one, the walker took 0.97 s to
 * verify instead of 0.13-0.3). */
__noinline __u32 hotspot_frame(struct ustack_walk *s, struct unwind_process *p, __u64 heap, __u64 ip, __u64 sp)
{
	struct hotspot_hops c = {};
	struct hotspot_heap *h;
	__u64 blob, code_begin = 0;
	__s32 words = 0, complete = -1;
	__u32 log2, leaf;

	if (!s)
		return 0;
	s->blob = 0;
	leaf = !s->return_address;
	if (!p || (ip >= p->java_interp_start && ip < p->java_interp_end))
		return 0;
	h = &p->java_code.heap[heap & (HOTSPOT_HEAPS_ROOM - 1)];
	if (!h->low || ip < h->low || ip >= h->end)
		return 0;
	log2 = h->log2_segment & 31;
	c.segmap = h->segmap;
	c.idx = (ip - h->low) >> log2;
	bpf_loop(HOTSPOT_MAX_HOPS, hotspot_hop, &c, 0);
	if (!c.found)
		return 0;
	blob = h->low + (c.idx << log2) + p->java_code.block_header;
	if (bpf_probe_read_user(&words, sizeof(words), (void *)(blob + p->java_code.frame_size_at)) ||
	    words < 0 || words > HOTSPOT_MAX_FRAME_WORDS)
		return 0;
	/* A blob without a frame (vtable and itable stubs, which load and
	 * jump): at the leaf, the return address is at sp if what is there
	 * returns into compiled code; anything else (a stub that pushed rbp)
	 * walks by rbp. */
	if (!words) {
		__u64 ra = 0;

		if (!leaf || bpf_probe_read_user(&ra, sizeof(ra), (void *)sp))
			return 0;
		return ra >= p->java_code.low && ra < p->java_code.end ? 8 : 0;
	}
	/* A blob with a frame of its own: a compiled method's, whose Method*
	 * unwind_frame reads now, while the code is this method's. */
	s->blob = blob;
	if (leaf && p->java_code.code_begin_at &&
	    !bpf_probe_read_user(&complete, sizeof(complete), (void *)(blob + p->java_code.frame_complete_at)) &&
	    !bpf_probe_read_user(&code_begin, sizeof(code_begin), (void *)(blob + p->java_code.code_begin_at)) &&
	    complete >= 0 && ip >= code_begin && ip < code_begin + (__u64)complete)
		return 8;
	if (leaf) {
		__u32 left = hotspot_leaf_epilogue(ip);

		if (left)
			return left;
	}
	return (__u32)words * 8 | 2;
}

#endif /* __HOTSPOT_BPF_H */
