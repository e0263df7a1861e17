// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sample.bpf.c: the cpu-clock sampler. Attached by userspace to one software
 * cpu-clock perf event per online CPU; on every tick it records the running
 * task (pid, tid, comm), its kernel and user stacks (frame pointers) and its
 * total CPU time into the `samples` ring buffer. In dwarf mode it also
 * copies the user registers and the top of the user stack, which userspace
 * unwinds with the binaries' .eh_frame (most distribution code has no frame
 * pointers). Every failure is counted in the per-CPU `drops` array so
 * userspace can report exactly what was lost.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sysprof.h"

/* Set by userspace before load; 0 means "every process". Filtering here,
 * not in userspace, keeps `record -p` cheap on a busy machine. */
const volatile __u32 targ_tgid = 0;
/* Wake the reader only once this much data waits; it also drains on a timer.
 * A wakeup per sample would cost a reader context switch per sample. */
const volatile __u64 wakeup_bytes = 256 * 1024;
/* Dwarf mode: bytes of user stack to copy (a multiple of STACK_COPY_CHUNK,
 * at most MAX_STACK_COPY); 0 walks frame pointers in the kernel instead.
 * Frozen in .rodata, so the verifier sees the reservation size as constant. */
const volatile __u32 stack_copy = 0;

#include "ustack.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024); /* resized by userspace to the CPUs and rate */
} samples SEC(".maps");

#include "drops.bpf.h"

SEC("perf_event")
int sample_cpu_clock(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct task_struct *task;
	struct sample_event *e;
	long len;

	if (targ_tgid && tgid != targ_tgid)
		return 0;

	/* A constant-size reservation keeps the verifier simple and needs no
	 * scratch copy; userspace reads only the valid part of each stack. */
	e = bpf_ringbuf_reserve(&samples, sizeof(*e) + stack_copy, 0);
	if (!e) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}

	task = (struct task_struct *)bpf_get_current_task();
	e->kind = RECORD_SAMPLE;
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = bpf_ktime_get_ns();
	e->sum_exec_runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
	e->pid = tgid;
	e->tid = (__u32)pid_tgid;
	e->flags = 0;
	e->stack_size = 0;
	e->user_ip = 0;
	e->user_sp = 0;
	e->user_bp = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	len = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	if (len < 0) {
		e->flags |= SAMPLE_FLAG_KSTACK_FAILED;
		count_drop(DROP_KSTACK);
		len = 0;
	}
	e->kstack_len = len / sizeof(__u64);

	len = 0;
	/* Kernel threads have no user stack: an empty one is not a failure. */
	if (BPF_CORE_READ(task, flags) & 0x00200000 /* PF_KTHREAD */) {
		/* nothing */
	} else if (stack_copy) {
		/* The sample's registers if it interrupted user code, else the
		 * registers saved when the task entered the kernel. */
		if ((long)ctx->regs.ip >= 0) {
			/* User addresses have the top bit clear: it interrupted user code. */
			e->user_ip = ctx->regs.ip;
			e->user_sp = ctx->regs.sp;
			e->user_bp = ctx->regs.bp;
		} else {
			struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

			e->user_ip = PT_REGS_IP_CORE(regs);
			e->user_sp = PT_REGS_SP_CORE(regs);
			e->user_bp = PT_REGS_FP_CORE(regs);
		}
		e->flags |= SAMPLE_FLAG_USER_REGS;
		e->stack_size = copy_user_stack((__u8 *)(e + 1), e->user_sp);
		if (!e->stack_size) {
			e->flags |= SAMPLE_FLAG_USTACK_FAILED;
			count_drop(DROP_USTACK);
		}
	} else {
		len = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
		if (len < 0) {
			e->flags |= SAMPLE_FLAG_USTACK_FAILED;
			count_drop(DROP_USTACK);
			len = 0;
		}
	}
	e->ustack_len = len / sizeof(__u64);

	bpf_ringbuf_submit(e, bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= wakeup_bytes ?
				 BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
