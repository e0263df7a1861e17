/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched/block.bpf.h: block I/O requests, from their start to their final
 * completion.
 *
 * In: the block raw tracepoints (block_io_start or block_rq_insert,
 * block_rq_issue, block_rq_merge, block_rq_complete), each passing the
 * `struct request *`, which keys `io_starts` (state.bpf.h). A request's
 * start (who, where, how much) is written there with its stack's id
 * (places.bpf.h, slot STACK_SLOT_CALL); its issue time is added; a merged
 * request is forgotten. Out: one blkio_event in `events` at the last
 * completion, which deletes the entry.
 */
#ifndef __SCHED_BLOCK_BPF_H
#define __SCHED_BLOCK_BPF_H

#define REQ_OP_MASK 0xff

static __always_inline __u32 request_dev(struct request *rq)
{
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);

	if (!disk)
		return 0;
	return (BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor);
}

static __always_inline __u32 io_flags(__u32 cmd_flags)
{
	__u32 f = 0;

	if (cmd_flags & (1U << 18))
		f |= IO_PREFLUSH;
	if (cmd_flags & (1U << 17))
		f |= IO_FUA;
	if (cmd_flags & (1U << 11))
		f |= IO_SYNC;
	if (cmd_flags & (1U << 12))
		f |= IO_META;
	if (cmd_flags & (1U << 19))
		f |= IO_READAHEAD;
	return f;
}

/* A request is created in the context of the task submitting it (or, for
 * flushes and requests issued directly, first seen at issue). */
static __always_inline int start_request(void *ctx, struct request *rq, bool at_issue, __u32 kbuf)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u32 pid = pid_tgid >> 32;

	if (!tracked(pid))
		return 0;
	struct stack_request *r = stack_request_for(kbuf);

	if (!r) {
		count_drop(DROP_STATE_FULL);
		return 0;
	}
	struct io_start *s = &r->io;

	s->ts = bpf_ktime_get_ns();
	s->issue_ts = at_issue ? s->ts : 0;
	s->stack_id = 0;
	s->pid = pid;
	s->tid = tid;
	s->bytes = BPF_CORE_READ(rq, __data_len);
	s->sector = BPF_CORE_READ(rq, __sector);
	s->dev = request_dev(rq);
	s->cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	s->flags = at_issue ? IO_START_AT_ISSUE : 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	r->rq = (__u64)rq;
	r->at_issue = at_issue;
	r->pid = pid;
	r->tid = tid;
	r->slot = STACK_SLOT_CALL;
	r->what = CALL_SITE_IO;
	r->cache_tid = tid;
	r->target_tid = tid;
	/* Last: the request goes to io_starts with its stack's id, after a
	 * tail call for a user thread's. */
	stack_then_finish(ctx, r, kbuf, tid ? bpf_map_lookup_elem(&threads, &tid) : NULL);
	return 0;
}

/* block_io_start (6.5+) or block_rq_insert (before): the request exists.
 * Userspace attaches one of the two. */
SEC("raw_tracepoint/block_io_start")
int on_block_start(struct bpf_raw_tracepoint_args *ctx)
{
	return start_request(ctx, (struct request *)((__u64 *)ctx)[0], false, KBUF_BLOCK);
}

/* Sent to the device. A request never started (flush requests, direct
 * issue, or started before we attached) starts here. */
SEC("raw_tracepoint/block_rq_issue")
int on_block_issue(struct bpf_raw_tracepoint_args *ctx)
{
	struct request *rq = (struct request *)((__u64 *)ctx)[0];
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s)
		return start_request(ctx, rq, true, KBUF_ISSUE);
	if (!s->issue_ts)
		s->issue_ts = bpf_ktime_get_ns();
	return 0;
}

/* Merged into another request: it will never complete on its own. */
SEC("raw_tracepoint/block_rq_merge")
int on_block_merge(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 key = ((__u64 *)ctx)[0];

	bpf_map_delete_elem(&io_starts, &key);
	return 0;
}

/* Completed, wholly or in part (args: rq, error, nr_bytes). Fires before
 * the request's remaining length shrinks; the last call completes it. A
 * write with a flush sequence completes twice (data, then the sequence's
 * end with nothing left): it is sent at the first, forgotten after. */
SEC("raw_tracepoint/block_rq_complete")
int on_block_complete(struct bpf_raw_tracepoint_args *ctx)
{
	/* Plain loads: args[] is a flexible array, nothing to relocate. */
	__u64 *args = (__u64 *)ctx;
	struct request *rq = (struct request *)args[0];
	__u32 nr_bytes = (__u32)args[2];
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_starts, &key);

	if (!s) {
		/* Started before we attached (or its start was lost); a flush
		 * sequence's second completion has no bytes and is no loss, and
		 * with a pid filter other processes' requests are not ours. */
		if (nr_bytes && !targ_tgid)
			count_drop(DROP_IO_UNTRACKED);
		return 0;
	}
	if (nr_bytes < BPF_CORE_READ(rq, __data_len))
		return 0;
	struct blkio_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_EVENTS_FULL);
		bpf_map_delete_elem(&io_starts, &key);
		return 0;
	}
	e->kind = RECORD_IO;
	e->dev = s->dev;
	e->sector = s->sector;
	e->start_ns = s->ts;
	e->issue_ns = s->issue_ts;
	e->done_ns = bpf_ktime_get_ns();
	e->bytes = s->bytes;
	e->error = (__s32)args[1];
	e->pid = s->pid;
	e->tid = s->tid;
	e->op = s->cmd_flags & REQ_OP_MASK;
	e->flags = io_flags(s->cmd_flags) | s->flags;
	e->stack_id = s->stack_id;
	__builtin_memcpy(e->comm, s->comm, TASK_COMM_LEN);
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e), true));
	bpf_map_delete_elem(&io_starts, &key);
	return 0;
}

#endif /* __SCHED_BLOCK_BPF_H */
