/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ustack.bpf.h: copying the top of a user stack for DWARF unwinding in
 * userspace. Included by sample.bpf.c and sched.bpf.c, each of which defines
 * the `stack_copy` size it was configured with.
 */
#ifndef __USTACK_BPF_H
#define __USTACK_BPF_H

/* Copy the user stack from sp up, in chunks; stop at the first that cannot
 * be read (the top of the stack), after retrying it in smaller pieces.
 * Returns the number of bytes copied into dst (at most stack_copy). */
static __always_inline __u32 copy_user_stack(__u8 *dst, __u64 sp)
{
	__u32 copied = 0;

	for (int i = 0; i < MAX_STACK_COPY / STACK_COPY_CHUNK; i++) {
		if (copied + STACK_COPY_CHUNK > stack_copy || copied > MAX_STACK_COPY - STACK_COPY_CHUNK)
			return copied;
		if (bpf_probe_read_user(dst + copied, STACK_COPY_CHUNK, (void *)(sp + copied)))
			break;
		copied += STACK_COPY_CHUNK;
	}
	for (int i = 0; i < STACK_COPY_CHUNK / STACK_COPY_TAIL; i++) {
		if (copied + STACK_COPY_TAIL > stack_copy || copied > MAX_STACK_COPY - STACK_COPY_TAIL)
			return copied;
		if (bpf_probe_read_user(dst + copied, STACK_COPY_TAIL, (void *)(sp + copied)))
			break;
		copied += STACK_COPY_TAIL;
	}
	return copied;
}

#endif /* __USTACK_BPF_H */
