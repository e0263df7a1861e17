/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * drops.bpf.h: the per-CPU `drops` array every program counts its losses in
 * (indexes DROP_* of sysprof.h), read and summed by userspace at the end.
 * Each object that includes it gets its own array.
 */
#ifndef __DROPS_BPF_H
#define __DROPS_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline void count_drop(__u32 reason)
{
	__u64 *slot = bpf_map_lookup_elem(&drops, &reason);

	if (slot)
		*slot += 1; /* per-CPU slot: no atomic needed */
}

#endif /* __DROPS_BPF_H */
