// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sample.bpf.c: the cpu-clock sampler. Attached by userspace to one software
 * cpu-clock perf event per online CPU; on every tick it records the running
 * task (pid, tid, comm), its kernel and user stacks (frame pointers) and its
 * total CPU time into the `samples` ring buffer. In dwarf mode it also
 * copies the user registers and the top of the user stack, which userspace
 * unwinds with the binaries' .eh_frame (most distribution code has no frame
 * pointers). In kernel-unwind mode it walks the user stack itself with
 * the tables userspace loaded (unwind.bpf.h) and sends the return
 * addresses, handing over to userspace (registers and a stack copy) only
 * where a process's tables are not there yet; until userspace has that
 * walker verified, `sample_first` copies stacks instead, so sampling starts
 * without waiting for the verifier. Every failure is counted in
 * the per-CPU `drops` array so userspace can report exactly what was lost.
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
/* Unwind user stacks in the kernel with the tables in unwind_rows. */
const volatile __u32 kernel_unwind = 0;
/* Kernel-unwind mode, until the walker is in: bytes of each thread's stack
 * copied (a multiple of STACK_COPY_CHUNK; 0 walks frame pointers). Less
 * than a hand-over's: every sample of that first half second or so is
 * copied, and the reader holds what the collector, busy loading, has yet
 * to take, up to a budget; copies of 32 KiB from two CPUs filled it in a
 * second beside an I/O storm, and then the tracer's ring overflowed. */
const volatile __u32 first_stack_copy = 0;

#include "ustack.bpf.h"
#include "unwind.bpf.h"
#include "runtimes/python.bpf.h"
#include "walk.bpf.h"

/* Kernel-unwind mode builds each sample here, then sends only the part
 * used: most stacks are far shallower than UNWIND_MAX_FRAMES. */
struct sample_scratch {
	struct sample_event e;
	__u64 frames[UNWIND_MAX_FRAMES];
	__u8 copy[MAX_STACK_COPY];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sample_scratch);
	__uint(max_entries, 1); /* sized by userspace: one per possible CPU */
} sample_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024); /* resized by userspace to the CPUs and rate */
} samples SEC(".maps");

#include "drops.bpf.h"

/* The fields every mode fills: who, when, and the kernel stack. */
static __always_inline void fill_sample(struct bpf_perf_event_data *ctx, struct sample_event *e, struct task_struct *task, __u64 pid_tgid)
{
	long len;

	e->kind = RECORD_SAMPLE;
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = bpf_ktime_get_ns();
	e->sum_exec_runtime = BPF_CORE_READ(task, se.sum_exec_runtime);
	e->exec_start = BPF_CORE_READ(task, se.exec_start);
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->flags = 0;
	e->stack_size = 0;
	e->unwind_end = 0;
	e->py_len = 0;
	e->py_end = 0;
	e->ustack_len = 0;
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
}

/* The user registers: the sample's if it interrupted user code, else
 * those saved when the task entered the kernel. */
/* The user registers: ip, sp, bp; and r13, where HotSpot's interpreter
 * keeps the bytecode pointer of the method it runs (the frame's copy is
 * only updated at calls). */
static __always_inline __u64 user_regs(struct bpf_perf_event_data *ctx, __u64 regs[3])
{
	/* User addresses have the top bit clear. */
	if ((long)ctx->regs.ip >= 0) {
		regs[0] = ctx->regs.ip;
		regs[1] = ctx->regs.sp;
		regs[2] = ctx->regs.bp;
		return ctx->regs.r13;
	} else {
		struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		regs[0] = PT_REGS_IP_CORE(r);
		regs[1] = PT_REGS_SP_CORE(r);
		regs[2] = PT_REGS_FP_CORE(r);
		return BPF_CORE_READ(r, r13);
	}
}

/* Wake the reader when a record of `size` bytes, not yet in the ring,
 * takes the data waiting there past a multiple of wakeup_bytes: once a
 * watermark's worth, not at every record past it. A reader that could take
 * no more (its collector busy loading) was woken by every sample, and ran,
 * at its raised priority, on the other CPU across that CPU's next tick: 29
 * of a spinner's ticks in 30 ms were the reader's, which ran 14 % of that
 * time. Every multiple, not the first only: a crossing two CPUs' records
 * hid from each other is caught at the next. */
static __always_inline __u64 wakeup_flag(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA);
	__u64 w = wakeup_bytes ? wakeup_bytes : 1;

	return avail / w != (avail + size) / w ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* When a hand-over last woke the reader (bpf_ktime_get_ns; racy between
 * CPUs, which costs at most an extra wakeup). */
__u64 handover_woken_ns = 0;
/* A hand-over wakes the reader at most this often: it only hastens the
 * tables of a process the reader reads within its period anyway, and a
 * wakeup per hand-over (every sample of a process without tables, all of
 * them while the walker loads) is the bias above. */
#define HANDOVER_WAKE_NS (10 * 1000 * 1000ULL)

/* When each process last exec'd (bpf_ktime_get_ns), for recently_started,
 * and its real uid then: userspace charges the process's unwind entry to
 * that uid without reading /proc/PID/status (~25 us a new process). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct exec_record);
	__uint(max_entries, 8192);
} exec_times SEC(".maps");

/* A process without an entry hands its samples over (with a 32 KiB copy)
 * only in its first seconds, while userspace has yet to write the entry,
 * or when userspace refused it one (`unwind_refused`): processes that were
 * running before a `record -- CMD` never get one, and copying their every
 * sample would fill the ring for nothing. */
#define HANDOVER_WINDOW_NS 2000000000ULL

static __always_inline int recently_started(struct task_struct *task, __u32 tgid)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 start = BPF_CORE_READ(task, group_leader, start_time);
	struct exec_record *exec = bpf_map_lookup_elem(&exec_times, &tgid);

	return now - start < HANDOVER_WINDOW_NS || (exec && now - exec->ns < HANDOVER_WINDOW_NS);
}

/* Kernel-unwind mode: walk the user stack here, send what was used. */
static __always_inline int sample_unwinding(struct bpf_perf_event_data *ctx, struct task_struct *task, __u64 pid_tgid)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_scratch *sc = bpf_map_lookup_elem(&sample_scratch, &cpu);
	__u64 size, regs[3], wake, r13;
	struct walked w = {};
	__u32 n, copied, what;

	if (!sc) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}
	fill_sample(ctx, &sc->e, task, pid_tgid);
	size = sizeof(sc->e);
	wake = BPF_RB_NO_WAKEUP;
	/* Kernel threads have no user stack: an empty one is not a failure. */
	if (!(BPF_CORE_READ(task, flags) & 0x00200000 /* PF_KTHREAD */)) {
		__u32 tgid = pid_tgid >> 32;
		int hand_over = stack_copy && (bpf_map_lookup_elem(&unwind_processes, &tgid) || recently_started(task, tgid) ||
					       process_refused(tgid));

		r13 = user_regs(ctx, regs);
		/* The leaf's registers: userspace matches an unreadable stack
		 * with one its thread had in the same system call. */
		sc->e.user_ip = regs[0];
		sc->e.user_sp = regs[1];
		sc->e.user_bp = regs[2];
		sc->e.flags |= SAMPLE_FLAG_LEAF_REGS;
		what = walk_user_stack(&samples, tgid, (__u32)pid_tgid, regs, sc->frames, hand_over, true, &w);
		n = w.n;
		/* Sampled in the interpreter itself: its bytecode pointer is the
		 * register's (userspace takes it only if it lies in the method).
		 * A compiled leaf's third word is its blob, kept. */
		if (n >= 3 && (sc->frames[1] >> 61) == (JAVA_FRAME_TAG >> 61) &&
		    !(sc->frames[2] & JAVA_COMPILED_BLOB) && r13 < (1ULL << 47))
			sc->frames[2] = r13;
		sc->e.flags |= SAMPLE_FLAG_KERNEL_UNWOUND;
		sc->e.ustack_len = n;
		sc->e.unwind_end = w.end;
		sc->e.py_len = w.py.n;
		sc->e.py_end = w.py.end;
		size += (__u64)walked_words(&w) * sizeof(__u64);
		/* Userspace goes on from where the walk stopped, with a copy,
		 * unless the reader is behind (walk.bpf.h). */
		if (what == WALK_CUT) {
			sc->e.flags |= SAMPLE_FLAG_HANDOVER_SKIPPED;
		} else if (what == WALK_HAND_OVER) {
			sc->e.flags &= ~SAMPLE_FLAG_LEAF_REGS;
			sc->e.flags |= SAMPLE_FLAG_USER_REGS;
			sc->e.user_ip = regs[0];
			sc->e.user_sp = regs[1];
			sc->e.user_bp = regs[2];
			copied = copy_user_stack(sc->copy, regs[1]);
			if (copied > MAX_STACK_COPY)
				copied = MAX_STACK_COPY;
			if (!copied) {
				sc->e.flags |= SAMPLE_FLAG_USTACK_FAILED;
				count_drop(DROP_USTACK);
			}
			sc->e.stack_size = copied;
			size = sizeof(sc->e) + sizeof(sc->frames) + copied;
			/* Wake the reader now: it loads the missing tables when it
			 * reads the sideband, so the process's next samples walk here. */
			if (w.end != UNWIND_END_USERSPACE) {
				__u64 now = bpf_ktime_get_ns();

				if (now - handover_woken_ns >= HANDOVER_WAKE_NS) {
					handover_woken_ns = now;
					wake = BPF_RB_FORCE_WAKEUP;
				}
			}
		}
	}
	/* The verifier must see this bound: clang, which can prove it from
	 * the copy's, would drop it without the barrier. */
	asm volatile("" : "+r"(size));
	if (size > sizeof(*sc))
		size = sizeof(*sc);
	if (wake != BPF_RB_FORCE_WAKEUP)
		wake = wakeup_flag(size);
	if (bpf_ringbuf_output(&samples, sc, size, wake))
		count_drop(DROP_RINGBUF_FULL);
	return 0;
}

/* The registers and a copy of limit bytes of the stack (frame pointers
 * where limit is 0), sent at their size, for userspace to unwind: dwarf
 * mode's samples, and kernel-unwind mode's until the walker is verified
 * and in `walker` (the walker takes the verifier 130-140 ms; this, a few:
 * sampling starts that much sooner). In the latter, a reader behind by a
 * quarter of the ring gets the kernel stack alone (cut_when_behind). */
static __always_inline int sample_copying(struct bpf_perf_event_data *ctx, struct task_struct *task, __u64 pid_tgid,
					  __u32 limit, int cut_when_behind)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_scratch *sc = bpf_map_lookup_elem(&sample_scratch, &cpu);
	__u64 size, regs[3];
	__u32 copied;
	long len;

	if (!sc) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}
	fill_sample(ctx, &sc->e, task, pid_tgid);
	size = sizeof(sc->e);
	if (BPF_CORE_READ(task, flags) & 0x00200000 /* PF_KTHREAD */) {
		/* nothing */
	} else if (limit && cut_when_behind &&
		   bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 4) {
		/* The reader is behind: the kernel stack alone, said as a cut
		 * stack (handovers_skipped), rather than a lost sample. */
		sc->e.flags |= SAMPLE_FLAG_HANDOVER_SKIPPED;
	} else if (limit) {
		user_regs(ctx, regs);
		sc->e.user_ip = regs[0];
		sc->e.user_sp = regs[1];
		sc->e.user_bp = regs[2];
		sc->e.flags |= SAMPLE_FLAG_USER_REGS;
		/* Right after the event: the copy path's layout. The frames and
		 * copy areas are contiguous, room for MAX_STACK_COPY. */
		copied = copy_user_stack_max((__u8 *)sc->frames, regs[1], limit);
		if (copied > MAX_STACK_COPY)
			copied = MAX_STACK_COPY;
		if (!copied) {
			sc->e.flags |= SAMPLE_FLAG_USTACK_FAILED;
			count_drop(DROP_USTACK);
		}
		sc->e.stack_size = copied;
		size += copied;
	} else {
		len = bpf_get_stack(ctx, sc->e.ustack, sizeof(sc->e.ustack), BPF_F_USER_STACK);
		if (len < 0) {
			sc->e.flags |= SAMPLE_FLAG_USTACK_FAILED;
			count_drop(DROP_USTACK);
			len = 0;
		}
		sc->e.ustack_len = len / sizeof(__u64);
	}
	/* The verifier must see this bound: clang, which can prove it from
	 * the copy's, would drop it without the barrier. */
	asm volatile("" : "+r"(size));
	if (size > sizeof(*sc))
		size = sizeof(*sc);
	if (bpf_ringbuf_output(&samples, sc, size, wakeup_flag(size)))
		count_drop(DROP_RINGBUF_FULL);
	return 0;
}

/* The walker (sample_cpu_clock), put here by userspace once verified. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} walker SEC(".maps");

/* Kernel-unwind mode's program on the cpu-clock events: the walker once
 * userspace has put it in `walker` (one tail call, no re-attach, so no
 * tick is sampled twice or missed at the switch), copies before. */
SEC("perf_event")
int sample_first(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (targ_tgid && (__u32)(pid_tgid >> 32) != targ_tgid)
		return 0;
	bpf_tail_call(ctx, &walker, 0);
	return sample_copying(ctx, (struct task_struct *)bpf_get_current_task(), pid_tgid, first_stack_copy, 1);
}

SEC("perf_event")
int sample_cpu_clock(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct task_struct *task;

	if (targ_tgid && tgid != targ_tgid)
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	if (kernel_unwind)
		return sample_unwinding(ctx, task, pid_tgid);
	return sample_copying(ctx, task, pid_tgid, stack_copy, 0);
}

/* An exec replaces every mapping: its old tables must not walk the new
 * program's stacks. Userspace writes the new ones from the sideband.
 * A raw tracepoint: it attaches by name, with no tracefs (minimal VMs and
 * containers boot without it mounted); it runs in the exec'ing task. */
SEC("raw_tracepoint/sched_process_exec")
int forget_exec_mappings(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct exec_record rec = {
		.ns = bpf_ktime_get_ns(),
		/* The low half: the real uid, as /proc/PID/status's first. */
		.uid = (__u32)bpf_get_current_uid_gid(),
	};

	bpf_map_delete_elem(&unwind_processes, &tgid);
	bpf_map_update_elem(&exec_times, &tgid, &rec, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
