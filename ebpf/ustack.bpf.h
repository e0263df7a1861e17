/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ustack.bpf.h: copying the top of a user stack for DWARF unwinding in
 * userspace. Included by sample.bpf.c and sched.bpf.c, each of which defines
 * the `stack_copy` size it was configured with.
 */
#ifndef __USTACK_BPF_H
#define __USTACK_BPF_H

/* Bytes copied past the top of a stack: the main thread's argc and first
 * argv pointers, a thread's descriptor, where an unwinder that reads one
 * word too far finds memory. */
#define STACK_TOP_MARGIN 128

/* How much of the current task's user stack from sp is worth copying: up to
 * a little past the top of the stack sp is on, where that top is known and
 * less than `limit` (the copy's size) above sp; 0 anywhere else (a signal
 * stack, a coroutine's, a deep stack): all of `limit` is copied there. Two tops
 * are known without a walk:
 * - the main thread's, mm->start_stack, where argc is (above lie argv and
 *   the environment, no frames);
 * - a thread's, its thread pointer (fsbase): glibc and musl put the thread's
 *   descriptor at the top of the thread's stack mapping, its static TLS just
 *   below, and the stack below that, so no frame of the thread lies above
 *   its fsbase. Elsewhere (a Go M's, whose fsbase is in its heap-allocated
 *   m; a thread sharing its parent's) fsbase is outside the stack sp is on:
 *   below sp, or above the whole of it, and the copy still holds every
 *   frame there.
 * A new process's stack is a few hundred bytes deep, and copies of 16-32
 * KiB each were the rings' bulk beside a fork loop (~40 MB/s); so were a
 * busy thread's, whose copy ran on through its TLS to the end of its
 * mapping: beside an I/O storm, 5,322 copies of 8-13 KiB (44 MB) while the
 * running processes' tables loaded, where its frames took under 1 KiB. A
 * process that moves its start_stack (prctl, with CAP_SYS_RESOURCE) or
 * points its fsbase into its own stack only cuts its own stacks. */
static __always_inline __u32 stack_extent(__u64 sp, __u32 limit)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 top = BPF_CORE_READ(task, mm, start_stack);

	if (top > sp && top - sp + STACK_TOP_MARGIN < limit)
		return (__u32)(top - sp + STACK_TOP_MARGIN);
	top = BPF_CORE_READ(task, thread.fsbase);
	if (top > sp && top - sp + STACK_TOP_MARGIN < limit)
		return (__u32)(top - sp + STACK_TOP_MARGIN);
	return 0;
}

/* The next piece of a stack copy: `size` bytes at dst + copied, if they
 * fit within limit and can be read. Returns the new length. Written without
 * a branch: the verifier follows one path through all the pieces, where an
 * if per piece (or per chunk of a loop) made a state per outcome, down to
 * the end of the caller (the sampler took 60,000 verified instructions,
 * ~100 ms of load, for its copy). */
static __always_inline __u32 copy_piece(__u8 *dst, __u64 sp, __u32 copied, __u32 limit, __u32 size)
{
	__s64 room = (__s64)limit - (__s64)copied - (__s64)size;
	__u64 fits, read;
	long err;

	/* Barriers on each value a mask is made of, or clang turns the masks
	 * back into compares and branches. */
	asm volatile("" : "+r"(room));
	fits = ~(__u64)(room >> 63);
	asm volatile("" : "+r"(fits));
	size &= (__u32)fits;
	err = bpf_probe_read_user(dst + copied, size, (void *)(sp + copied));
	asm volatile("" : "+r"(err));
	read = ~(__u64)(err >> 63);
	asm volatile("" : "+r"(read));
	return copied + (size & (__u32)read);
}

/* The last piece: STACK_COPY_TAIL bytes if they fit and read, else the
 * bytes left to where the stack stops being readable. The pieces before
 * end at a multiple of 64 bytes from sp, and sp is any multiple of 8: where
 * the stack's top is followed by a page that cannot be read (a guard page,
 * the untouched heap page above a Go M's system stack), up to 56 bytes
 * below that top were left out, and there lie the outermost return
 * addresses (Go's mstart, makecontext's __start_context): half of the
 * samples on such a stack ended "copy exhausted" (tests/workloads/ctxtop.c).
 * A page ends at a multiple of 64, so what is left to it from dst + copied
 * is -(sp + copied) mod 64 bytes. No branch, as in copy_piece. */
static __always_inline __u32 copy_last_piece(__u8 *dst, __u64 sp, __u32 copied, __u32 limit)
{
	__u64 whole = STACK_COPY_TAIL, rest, fits, read, missed;
	__s64 room = (__s64)limit - (__s64)copied - STACK_COPY_TAIL;
	long err;

	asm volatile("" : "+r"(room));
	fits = ~(__u64)(room >> 63);
	asm volatile("" : "+r"(fits));
	whole &= fits;
	err = bpf_probe_read_user(dst + copied, whole, (void *)(sp + copied));
	asm volatile("" : "+r"(err));
	read = ~(__u64)(err >> 63);
	asm volatile("" : "+r"(read));
	whole &= read;
	/* All ones where the whole piece was not taken (whole is 0 or 64). */
	missed = (whole >> 6) - 1;
	asm volatile("" : "+r"(missed));
	rest = (0 - (sp + copied)) & (STACK_COPY_TAIL - 1);
	room = (__s64)limit - (__s64)copied - (__s64)rest;
	asm volatile("" : "+r"(room));
	fits = ~(__u64)(room >> 63);
	asm volatile("" : "+r"(fits));
	rest &= fits & missed;
	asm volatile("" : "+r"(rest));
	err = bpf_probe_read_user(dst + copied, rest, (void *)(sp + copied));
	asm volatile("" : "+r"(err));
	read = ~(__u64)(err >> 63);
	asm volatile("" : "+r"(read));
	return copied + whole + (rest & read);
}

/* Copy the user stack from sp up into dst, which has room for
 * MAX_STACK_COPY bytes: on a stack whose top is known, to just past it
 * in one read (stack_extent; that memory is all mapped; unless the
 * includer defines USTACK_NO_EXTENT and does that itself); otherwise as
 * much of the limit bytes as can be read, found by halves: a stack is
 * readable from sp up to some point (its top, or a page not in memory),
 * and pieces of 16 KiB, 8 KiB, ... 64 bytes, each taken if it fits and
 * reads, add up to that point (to 64 bytes), and the last piece to the
 * byte, in at most 11 reads. Returns the number of bytes copied (at most
 * limit and MAX_STACK_COPY). */
static __always_inline __u32 copy_user_stack_max(__u8 *dst, __u64 sp, __u32 limit)
{
	__u32 copied = 0;
#ifndef USTACK_NO_EXTENT
	__u32 extent = stack_extent(sp, limit) & (MAX_STACK_COPY - 1);

	if (extent && !bpf_probe_read_user(dst, extent, (void *)sp))
		return extent;
#endif
	_Static_assert(MAX_STACK_COPY == 32768 && STACK_COPY_TAIL == 64,
		       "the pieces below add up to MAX_STACK_COPY, the last one STACK_COPY_TAIL");
	copied = copy_piece(dst, sp, copied, limit, 16384);
	copied = copy_piece(dst, sp, copied, limit, 8192);
	copied = copy_piece(dst, sp, copied, limit, 4096);
	copied = copy_piece(dst, sp, copied, limit, 2048);
	copied = copy_piece(dst, sp, copied, limit, 1024);
	copied = copy_piece(dst, sp, copied, limit, 512);
	copied = copy_piece(dst, sp, copied, limit, 256);
	copied = copy_piece(dst, sp, copied, limit, 128);
	copied = copy_piece(dst, sp, copied, limit, 64);
	return copy_last_piece(dst, sp, copied, limit);
}

/* copy_user_stack_max with the includer's configured `stack_copy`. */
static __always_inline __u32 copy_user_stack(__u8 *dst, __u64 sp)
{
	return copy_user_stack_max(dst, sp, stack_copy);
}

#endif /* __USTACK_BPF_H */
