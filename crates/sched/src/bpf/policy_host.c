// SPDX-License-Identifier: GPL-2.0
/*
 * policy.h's consolidation decisions compiled for the host, for the parts
 * of vsched that make them outside the kernel (`vsched run --consolidate`
 * through crates/sched/src/policy.rs): one source for each rule, whichever
 * side acts on it. policy.h's functions are static inline; these are
 * their linkable names.
 */
#include <stdint.h>

#include "policy.h"

/* The constants the host side needs, from their one definition. */
const u64 vsched_consolidate_period_ns = VS_CONSOLIDATE_PERIOD_NS;
const u64 vsched_spread_run_ns = VS_SPREAD_RUN_NS;

int vsched_trials_period(struct vs_trials *t, u64 progress, u64 busy_ns,
			 u32 active, int can_widen, u64 now, u64 period_ns)
{
	return vs_trials_period(t, progress, busy_ns, active, can_widen, now,
				period_ns);
}

void vsched_trials_started(struct vs_trials *t, int narrowed)
{
	vs_trials_started(t, narrowed);
}

void vsched_trials_upset(struct vs_trials *t)
{
	vs_trials_upset(t);
}

void vsched_trials_overruled(struct vs_trials *t, u64 now, u64 period_ns)
{
	vs_trials_overruled(t, now, period_ns);
}

int vsched_long_runner(u64 avg_run_ns, u64 run_this_wake_ns, u32 wakes)
{
	return vs_long_runner(avg_run_ns, run_this_wake_ns, wakes);
}
