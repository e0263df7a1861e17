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
#define RECORD_OFFCPU 2
#define RECORD_IO 3
#define RECORD_USTACK 4

/* Ids of user stacks copied at switch-out (dwarf mode) have this bit set, so
 * they never collide with ids of the `stacks` map. */
#define USTACK_ID_FLAG 0x40000000

/* Why a thread left the CPU (offcpu_event.state), folded from prev_state. */
#define OFFCPU_PREEMPTED 0 /* still runnable: preempted or yielded */
#define OFFCPU_SLEEPING 1  /* TASK_INTERRUPTIBLE */
#define OFFCPU_BLOCKED 2   /* TASK_UNINTERRUPTIBLE: usually I/O */
#define OFFCPU_OTHER 3     /* stopped, traced, parked, idle kernel thread */

/* sample_event.flags */
#define SAMPLE_FLAG_KSTACK_FAILED 1
#define SAMPLE_FLAG_USTACK_FAILED 2
#define SAMPLE_FLAG_USER_REGS 4   /* user_regs are valid (dwarf mode, user task) */

/* Bytes of user stack copied per sample in dwarf mode: at most this much. */
#define MAX_STACK_COPY 32768
/* The copy goes in pieces of this size; the piece that crosses the top of the
 * stack is retried in pieces of STACK_COPY_TAIL. */
#define STACK_COPY_CHUNK 512
#define STACK_COPY_TAIL 64

/* Indexes into the per-CPU `drops` array: why a record or part of it was lost. */
#define DROP_RINGBUF_FULL 0   /* bpf_ringbuf_reserve failed: the whole sample is lost */
#define DROP_KSTACK 1         /* bpf_get_stack(kernel) failed: sample kept, no kernel stack */
#define DROP_USTACK 2         /* bpf_get_stack(user) failed: sample kept, no user stack */
#define DROP_EVENTS_FULL 3    /* off-CPU or I/O record lost: events ring full */
#define DROP_STACKID 4        /* bpf_get_stackid failed: interval kept without that stack */
#define DROP_STATE_FULL 5     /* a state map was full: that interval or request is not seen */
#define DROP_MAX 6

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
	__u32 ustack_len;       /* number of valid entries in ustack (frame-pointer walk) */
	__u32 stack_size;       /* dwarf mode: bytes of user stack copied after the record */
	__u8 comm[TASK_COMM_LEN];
	__u64 user_ip;          /* dwarf mode: user registers at the sample */
	__u64 user_sp;          /* (for a sample in the kernel: where it entered) */
	__u64 user_bp;
	__u64 kstack[MAX_STACK_DEPTH];
	__u64 ustack[MAX_STACK_DEPTH];
	/* dwarf mode: followed by the reserved copy size of user stack bytes
	 * starting at user_sp, of which stack_size are valid. */
};

/* One off-CPU interval of a thread, emitted when it runs again and the
 * interval lasted at least offcpu_min_ns; shorter ones are folded into the
 * next emitted record (short_count, short_ns) so totals stay exact. */
struct offcpu_event {
	__u32 kind;             /* RECORD_OFFCPU */
	__u32 state;            /* OFFCPU_* */
	__u64 start_ns;         /* switched out */
	__u64 end_ns;           /* switched in again */
	__u64 wake_ns;          /* woken up; 0 if no wakeup was seen (preempted) */
	__u64 short_ns;         /* total length of folded shorter intervals */
	__u32 pid;
	__u32 tid;
	__u32 cpu_out;
	__u32 cpu_in;
	__u32 waker_pid;
	__u32 waker_tid;
	__s32 kstack_id;        /* in the stacks map; < 0 if not captured */
	__s32 ustack_id;
	__s32 waker_kstack_id;
	__s32 waker_ustack_id;
	__u32 short_count;      /* folded shorter intervals */
	__u32 _pad;
	__u8 comm[TASK_COMM_LEN];
	__u8 waker_comm[TASK_COMM_LEN];
};

/* One block I/O request, emitted at completion, attributed to the task that
 * started it. */
struct blkio_event {
	__u32 kind;             /* RECORD_IO */
	__u32 dev;              /* kernel dev_t: major << 20 | minor */
	__u64 sector;
	__u64 start_ns;         /* request created (block_io_start / block_rq_insert) */
	__u64 issue_ns;         /* sent to the device; 0 if not seen */
	__u64 done_ns;          /* completed */
	__u32 bytes;
	__s32 error;
	__u32 pid;
	__u32 tid;
	__s32 kstack_id;
	__s32 ustack_id;
	__u8 comm[TASK_COMM_LEN];
	__u8 rwbs[8];           /* "R", "W", "FWS", ... as blktrace spells it */
};

/* Dwarf mode: the user registers and top of the user stack of a thread as
 * it left the CPU, followed by the copied bytes (the copy size is reserved,
 * `size` of them are valid). Sent once per distinct user context; off-CPU
 * records refer to it by `id` in their ustack_id. */
struct ustack_event {
	__u32 kind;             /* RECORD_USTACK */
	__u32 id;               /* USTACK_ID_FLAG | sequence number */
	__u32 pid;
	__u32 tid;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 size;
	__u32 _pad;
};

/* Per-thread scheduler state and totals (map `threads`, key tid): where it
 * is off-CPU right now, and its switch counts. Read at the end for the
 * totals and for intervals still open when recording stops. */
struct thread_state {
	__u64 off_ts;           /* switched out at; 0 while running */
	__u64 voluntary;        /* switches while blocking or sleeping */
	__u64 involuntary;      /* switches while runnable (preempted) */
	__u64 short_count;      /* folded intervals not yet carried by a record */
	__u64 short_ns;
	__u32 pid;
	__u32 off_state;        /* OFFCPU_* of the open interval */
	__u32 off_cpu;          /* CPU it left */
	__s32 kstack_id;        /* stacks at switch-out */
	__s32 ustack_id;
	__u32 _pad;
	/* The last wakeup while off-CPU (sched_waking); wake_ts is written last. */
	__u64 wake_ts;
	__u32 waker_pid;
	__u32 waker_tid;
	__s32 waker_kstack_id;
	__s32 waker_ustack_id;
	__u8 waker_comm[TASK_COMM_LEN];
	/* Kernel-private: the last switch-out's user context and stacks, reused
	 * when the thread leaves the CPU again from the same place. */
	__u64 cache_ip;
	__u64 cache_sp;
	__u64 cache_bp;
	__u32 cache_state;
	__s32 cache_kstack_id;
	__s32 cache_ustack_id;
	__u32 _pad2;
};

#endif /* __SYSPROF_H */
