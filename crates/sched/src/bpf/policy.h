/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vsched's placement decisions as pure functions of the vCPU model: no BPF
 * helper, no kernel state. main.bpf.c calls them; tests/c/policy_test.c
 * compiles this same file for the host and checks them, so the decisions
 * are tested without a kernel.
 */
#ifndef VSCHED_POLICY_H
#define VSCHED_POLICY_H

#include "intf.h"

/* Capacity of a vCPU nothing has been measured on: as strong as any. */
#define VS_CAPACITY_UNKNOWN 1024u

/*
 * A wake-up stays on its previous vCPU (warm caches, and under emulation a
 * cross-vCPU wake-up costs tens of µs) unless an idle vCPU is more than a
 * third stronger. A smaller margin would move tasks on measurement noise:
 * the probe's capacity readings scatter by up to ±15% (docs/lab.md).
 */
#define VS_KEEP_PREV_NUM 3u
#define VS_KEEP_PREV_DEN 4u

/* Whether normal tasks may be placed on this vCPU. */
static inline int vs_visible(const struct vcpu_model *m, int rwc)
{
	return !rwc || m->hidden == 0;
}

/* Placement score of a vCPU: its capacity when capacity-aware. */
static inline u32 vs_score(const struct vcpu_model *m, int capacity_aware)
{
	if (!capacity_aware || m->capacity == 0)
		return VS_CAPACITY_UNKNOWN;
	return m->capacity;
}

/* Whether to stay on the previous vCPU rather than move to the best one. */
static inline int vs_keep_prev(u32 prev_score, u32 best_score)
{
	return (u64)prev_score * VS_KEEP_PREV_DEN >=
	       (u64)best_score * VS_KEEP_PREV_NUM;
}

/* Virtual time a task pays for running `used_ns` at `weight` (100 = nice 0). */
static inline u64 vs_vtime_charge(u64 used_ns, u32 weight)
{
	if (weight == 0)
		weight = 1;
	return used_ns * 100 / weight;
}

/*
 * Virtual time a waking task queues with: its own, but no further behind
 * the queue's clock than one slice, so that a long sleeper gets ahead by
 * one slice at most instead of monopolising the vCPUs.
 */
static inline u64 vs_queue_vtime(u64 task_vtime, u64 clock, u64 slice_ns)
{
	if (clock > slice_ns && task_vtime < clock - slice_ns)
		return clock - slice_ns;
	return task_vtime;
}

/*
 * Whether a task whose slice ended keeps its vCPU rather than queue behind
 * the first waiting task: when it is not behind that task in virtual time.
 * It pays for every slice it runs, so it falls behind and yields in turn.
 */
static inline int vs_keeps_vcpu(u64 task_vtime, u64 head_vtime)
{
	return task_vtime <= head_vtime;
}

#endif /* VSCHED_POLICY_H */
