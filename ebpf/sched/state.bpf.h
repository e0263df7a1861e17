/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/state.bpf.h: the tracer's shared maps and each thread's state
 * (included by sched.bpf.c before the other sched/ headers).
 *
 * Holds the `events` ring every record goes to (and submit_flags, when
 * a record wakes its reader), `threads` (struct thread_state of sysprof.h
 * per tid: its open off-CPU interval, waker, folded short waits and stack
 * caches; read by userspace at the end), `place_runs` (a thread's runs of
 * waits summed by place and waker, also read at the end), the zeroed states
 * new threads' are inserted from, `io_starts` (in-flight block requests, written at a
 * request's start with its stack's id, read at its completion), and which
 * processes are traced (targ_tgid, self_tgid: sched.bpf.c's settings).
 */
#ifndef __SCHED_STATE_BPF_H
#define __SCHED_STATE_BPF_H

#define PF_KTHREAD 0x00200000

struct io_start {
	__u64 ts;
	__u64 issue_ts;
	__u64 stack_id;
	__u64 sector;
	__u32 pid;
	__u32 tid;
	__u32 bytes;
	__u32 dev;
	__u32 cmd_flags;
	__u32 flags;            /* IO_START_AT_ISSUE */
	__u8 comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

/* Preallocated (allocated as threads appear, one in a run was lost to an
 * empty allocation cache beside pgbench): sized by userspace from the
 * threads the machine has, 16,384 to 65,536 entries of ~0.4 KiB. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* A zeroed thread_state to insert new threads from: the struct is too
 * large for the BPF stack. Never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} empty_state SEC(".maps");

/* Each thread's runs of waits from offcpu_min_ns up to fold_same_max_ns
 * (struct place_runs; thread_state.has_place_runs says it has one), from
 * its first such wait to its death. Sized by userspace: as `threads` for
 * `record`, 1 for the agent, which sends no such runs. Preallocated, as
 * `threads` is. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct place_runs);
} place_runs SEC(".maps");

/* Set by userspace (1) before its last read of `events`: place runs stay in
 * `place_runs` from then on (sched/offcpu.bpf.h place_runs_frozen). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} place_runs_frozen_at_end SEC(".maps");

/* Zeroed place runs to insert a thread's from (too large for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct place_runs);
} empty_place_runs SEC(".maps");

/* In-flight block requests by `struct request *`: sized by userspace from
 * what the machine's block devices can hold in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct io_start);
} io_starts SEC(".maps");

/* Wake the reader when a record of `size` bytes takes the data waiting in
 * the ring past a multiple of wakeup_bytes: once a watermark's worth, not
 * at every record past it (a reader that could take no more was woken by
 * every switch; see sample.bpf.c's wakeup_flag). `reserved`: the record is
 * in the ring already (reserved, not yet submitted) and counted in what
 * waits. */
static __always_inline long submit_flags(__u64 size, bool reserved)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 before = reserved && avail >= size ? avail - size : avail;
	__u64 w = wakeup_bytes ? wakeup_bytes : 1;

	return before / w != (before + size) / w ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline bool tracked(__u32 tgid)
{
	return !targ_tgid || tgid == targ_tgid;
}

/* Whether a thread's switches and wakeups are traced: the profiler's own
 * are not. Their waits are the rings' reader and the collector waiting for
 * records, hundreds a second: a third of a busy recording's thread data,
 * fed to the ring they are woken by. Its CPU samples are kept (the sampler
 * has no such filter), and so is its block I/O (a completion without its
 * start would count as a loss), so what it costs still shows. */
static __always_inline bool sched_tracked(__u32 tgid)
{
	return tracked(tgid) && !(self_tgid && tgid == self_tgid);
}

/* tid's state, inserted zeroed (pid set) when it has none; NULL when the
 * map is full. */
static __always_inline struct thread_state *new_state(__u32 tid, __u32 tgid)
{
	__u32 zero = 0;
	struct thread_state *empty = bpf_map_lookup_elem(&empty_state, &zero);
	struct thread_state *t;

	if (!empty)
		return NULL;
	bpf_map_update_elem(&threads, &tid, empty, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (t && !t->pid)
		t->pid = tgid;
	return t;
}

#endif /* __SCHED_STATE_BPF_H */
