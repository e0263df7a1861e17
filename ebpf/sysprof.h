/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sysprof.h: every record the kernel side sends to userspace, and the keys
 * of the maps userspace reads. Shared by every ebpf .bpf.c file and mirrored in
 * userspace/src/bpf/abi.rs; the test `abi_matches_c_header` compiles this
 * header with the host C compiler and checks every size and offset, so the
 * two sides cannot drift. Fixed-width types only, no kernel headers.
 */
#ifndef __SYSPROF_H
#define __SYSPROF_H

#define TASK_COMM_LEN 16
/* The kernel's default kernel.perf_event_max_stack. */
#define MAX_STACK_DEPTH 127

/* Record kinds, the first field of every ring buffer record. */
#define RECORD_SAMPLE 1

/* sample_event.flags */
#define SAMPLE_FLAG_KSTACK_FAILED 1
#define SAMPLE_FLAG_USTACK_FAILED 2

/* Indexes into the per-CPU `drops` array: why a record or part of it was lost. */
#define DROP_RINGBUF_FULL 0   /* bpf_ringbuf_reserve failed: the whole sample is lost */
#define DROP_KSTACK 1         /* bpf_get_stack(kernel) failed: sample kept, no kernel stack */
#define DROP_USTACK 2         /* bpf_get_stack(user) failed: sample kept, no user stack */
#define DROP_MAX 3

/* One cpu-clock sample: who ran, where, and how much CPU it had used so far. */
struct sample_event {
	__u32 kind;             /* RECORD_SAMPLE */
	__u32 cpu;
	__u64 time_ns;          /* CLOCK_MONOTONIC, bpf_ktime_get_ns() */
	__u64 sum_exec_runtime; /* task->se.sum_exec_runtime, ns */
	__u32 pid;              /* tgid */
	__u32 tid;
	__u32 flags;            /* SAMPLE_FLAG_* */
	__u32 kstack_len;       /* number of valid entries in kstack */
	__u32 ustack_len;       /* number of valid entries in ustack */
	__u32 _pad;
	__u8 comm[TASK_COMM_LEN];
	__u64 kstack[MAX_STACK_DEPTH];
	__u64 ustack[MAX_STACK_DEPTH];
};

#endif /* __SYSPROF_H */
