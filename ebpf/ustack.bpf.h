/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ustack.bpf.h: copying the top of a user stack for DWARF unwinding in
 * userspace. Included by sample.bpf.c and sched.bpf.c, each of which defines
 * the `stack_copy` size it was configured with.
 */
#ifndef __USTACK_BPF_H
#define __USTACK_BPF_H

/* Bytes copied past the top of the main thread's stack: argc and the first
 * argv pointers, where an unwinder that reads one word too far finds memory. */
#define STACK_TOP_MARGIN 128

/* How much of the current task's user stack from sp is worth copying when
 * sp is on the main thread's stack, less than stack_copy below its top
 * (mm->start_stack, where argc is: above lie argv and the environment, no
 * frames): up to a little past that top. 0 anywhere else (a thread's
 * stack, a signal stack, a coroutine's, a deep stack): all of stack_copy
 * is copied there. A new process's stack is a few hundred bytes deep, and
 * copies of 16-32 KiB each were the rings' bulk beside a fork loop (~40
 * MB/s). A process that moves its start_stack (prctl, with
 * CAP_SYS_RESOURCE) only cuts its own stacks. */
static __always_inline __u32 main_stack_extent(__u64 sp)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 top = BPF_CORE_READ(task, mm, start_stack);

	if (top > sp && top - sp + STACK_TOP_MARGIN < stack_copy)
		return (__u32)(top - sp + STACK_TOP_MARGIN);
	return 0;
}

/* Copy the user stack from sp up: on the main thread's stack, to just past
 * its top in one read (main_stack_extent; that memory is all mapped; unless
 * the includer defines USTACK_NO_EXTENT and does that itself); otherwise
 * stack_copy bytes in chunks, stopping at the first that cannot be
 * read (the top of the stack) after retrying it in smaller pieces. Returns
 * the number of bytes copied into dst (at most limit). The chunked
 * loops keep limit, a constant at load, as their bound: a bound only
 * known at run time made the verifier walk every count of both loops
 * (seconds of load, measured). */
static __always_inline __u32 copy_user_stack_max(__u8 *dst, __u64 sp, __u32 limit)
{
	__u32 copied = 0;
#ifndef USTACK_NO_EXTENT
	__u32 extent = main_stack_extent(sp) & (MAX_STACK_COPY - 1);

	if (extent && !bpf_probe_read_user(dst, extent, (void *)sp))
		return extent;
#endif
	for (int i = 0; i < MAX_STACK_COPY / STACK_COPY_CHUNK; i++) {
		if (copied + STACK_COPY_CHUNK > limit || copied > MAX_STACK_COPY - STACK_COPY_CHUNK)
			return copied;
		if (bpf_probe_read_user(dst + copied, STACK_COPY_CHUNK, (void *)(sp + copied)))
			break;
		copied += STACK_COPY_CHUNK;
	}
	for (int i = 0; i < STACK_COPY_CHUNK / STACK_COPY_TAIL; i++) {
		if (copied + STACK_COPY_TAIL > limit || copied > MAX_STACK_COPY - STACK_COPY_TAIL)
			return copied;
		if (bpf_probe_read_user(dst + copied, STACK_COPY_TAIL, (void *)(sp + copied)))
			break;
		copied += STACK_COPY_TAIL;
	}
	return copied;
}

/* copy_user_stack_max with the includer's configured `stack_copy`. */
static __always_inline __u32 copy_user_stack(__u8 *dst, __u64 sp)
{
	return copy_user_stack_max(dst, sp, stack_copy);
}

#endif /* __USTACK_BPF_H */
