// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sched.bpf.c: why threads are not running, and block I/O.
 *
 * sched_switch records, per thread, when and in which state it left the CPU
 * and its stacks there; sched_waking records who woke it, with the waker's
 * stacks; when the thread runs again one offcpu_event goes to the `events`
 * ring if the interval lasted at least offcpu_min_ns, else its length is
 * added to the thread's folded totals for its reason, sent as one
 * folded_event once they reach fold_flush_ns; from offcpu_min_ns up to
 * fold_same_max_ns (record's marker threshold) a wait is added to the
 * thread's run of its place, waker and reason (place_runs), sent as a
 * folded_event too. Every switch is counted, so
 * totals stay exact whatever is dropped. A thread's last switch (it died)
 * sends its totals and deletes its state, so the map holds live threads only.
 *
 * Stacks are sent inline as stack_events (see sysprof.h), once per process
 * and content (send_scratch), and only the words they use: each thread
 * caches, per slot (preempted, waiting, waking or starting a request), the
 * user context of the last stack it used there, and reuses its id without
 * walking; a walk whose stack its process already sent refers to that.
 *
 * Block requests are keyed by the request itself (raw tracepoints pass it)
 * from creation to their final completion, so concurrent requests for the
 * same sector never overwrite each other; a request merged into another is
 * forgotten, partial completions wait for the last one.
 *
 * By concern, in sched/: state.bpf.h (the shared maps, each thread's
 * state), stacks.bpf.h (stack records), places.bpf.h (which stack a place
 * gets; the walk_stack program), offcpu.bpf.h (switches, off-CPU
 * intervals, folded waits), wakeups.bpf.h (wakers, wakeup landing),
 * block.bpf.h (block I/O). This file holds the settings userspace writes
 * before load, the includes and the license.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "sysprof.h"

const volatile __u32 targ_tgid = 0;
/* The profiler's own process (see sched_tracked()). */
const volatile __u32 self_tgid = 0;
const volatile __u64 offcpu_min_ns = 100000;
/* Folded short waits of a thread are sent once they add up to this, or
 * once the first of them is this old (so a window's totals arrive in it). */
const volatile __u64 fold_flush_ns = 10000000;
const volatile __u64 fold_span_ns = 1000000000;
/* A folded run whose waits were this long before their wakeups is sent when
 * a wait with another waker comes, so it keeps its waker; a shorter one
 * becomes FOLD_WAKER_MIXED. At least ten folded waits per record. */
const volatile __u64 fold_waker_min_ns = 1000000;
/* Waits from offcpu_min_ns up to this (record: its marker threshold) are
 * summed per place, waker and reason in four runs per thread (place_runs;
 * the run with the oldest last wait is sent to make room); sent alone only
 * without a place, with the map or the ring full, or once the recording's
 * end is read. 0: every wait from offcpu_min_ns on is sent alone. */
const volatile __u64 fold_same_max_ns = 0;
/* A wait's run delay from this long on is drawn apart (userspace's
 * RUN_DELAY_APART_MIN_NS): a place run sums those apart. */
const volatile __u64 run_delay_apart_ns = 100000;
const volatile __u64 wakeup_bytes = 64 * 1024;
/* Set by userspace on kernels >= 5.18, where sched_switch passes prev_state. */
const volatile bool has_prev_state_arg = false;
/* on_block_start is attached to block_io_start (6.5+), which fires once per
 * request, rather than block_rq_insert, which fires again on a requeue. */
const volatile bool start_fires_once = false;
/* Dwarf mode: bytes of user stack copied with each stack (0: frame pointers). */
const volatile __u32 stack_copy = 0;
/* Unwind user stacks in the kernel; the tables are the sampler's (the
 * loader hands this object the sampler's unwind_rows and unwind_processes). */
const volatile __u32 kernel_unwind = 0;

/* Stacks whose top is known are copied by copy_stack_to_top. */
#define USTACK_NO_EXTENT
#include "ustack.bpf.h"
#include "unwind.bpf.h"
#include "runtimes/python.bpf.h"
#include "walk.bpf.h"

#include "drops.bpf.h"
#include "sched/state.bpf.h"
#include "sched/stacks.bpf.h"
#include "sched/places.bpf.h"
#include "sched/offcpu.bpf.h"
#include "sched/wakeups.bpf.h"
#include "sched/block.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";
