/* SPDX-License-Identifier: GPL-2.0 */
/*
 * SCHED_IDLE work: the starvation guard (no such task waits more than
 * VS_IDLE_MAX_WAIT_NS behind normal work) and the vCPU whose SCHED_IDLE
 * work a waking normal task pre-empts.
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/*
 * The longest a SCHED_IDLE task waits behind normal work (1 s). The
 * kernel's default scheduler gives such a task a weight of 3 against a
 * normal task's 1024: slow, never stopped. Without a bound here, a vCPU
 * that normal work kept busy (RWC had hidden its stacked sibling) left the
 * probers' SCHED_IDLE thread waiting until sched_ext's watchdog ejected
 * the scheduler (`timeout_ms`, then 5 s); one slice per second costs the
 * normal work 0.3%, the same share the default gives.
 */
#define VS_IDLE_MAX_WAIT_NS 1000000000ULL

/* Whether the first SCHED_IDLE task in `dsq` has waited too long. */
static bool idle_starving_in(u64 dsq, u64 now)
{
	struct task_struct *head = __COMPAT_scx_bpf_dsq_peek(dsq);
	struct task_ctx *tc;

	if (!head || !(tc = ctx_of(head)))
		return false;
	return tc->idle_queued_ns && now - tc->idle_queued_ns > VS_IDLE_MAX_WAIT_NS;
}

/* Whether a SCHED_IDLE task that `cpu` may run has waited too long. */
static bool idle_starving_on(s32 cpu)
{
	u64 now = bpf_ktime_get_ns();

	return idle_starving_in(VS_DSQ_IDLE_PINNED + cpu, now) ||
	       idle_starving_in(VS_DSQ_IDLE, now);
}

/*
 * A visible vCPU `p` may use that runs only SCHED_IDLE work, its own one
 * first: the kernel's default scheduler pre-empts such work at once for a
 * waking normal task, and so must we (else the task waits a whole slice).
 */
static s32 find_idle_policy_cpu(const struct task_struct *p, s32 first)
{
	s32 cpu;

	if (first >= 0 && first < VS_MAX_CPUS &&
	    bpf_cpumask_test_cpu(first, p->cpus_ptr) && visible(first) &&
	    runs_idle_policy(first))
		return first;
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr) && visible(cpu) &&
		    runs_idle_policy(cpu))
			return cpu;
	}
	return -1;
}

/*
 * SCHED_IDLE work, pinned or not, waits in its own queue: a vCPU takes
 * from it only when no normal task waits (the probers' light threads
 * measure exactly that leftover time).
 */
static __always_inline void enqueue_idle_policy(struct task_struct *p,
						u64 enq_flags)
{
	struct task_ctx *tc = ctx_of(p);
	s32 cpu;

	if (tc)
		tc->idle_queued_ns = bpf_ktime_get_ns();
	count(VS_STAT_QUEUED_IDLE);
	if (p->nr_cpus_allowed == 1) {
		cpu = scx_bpf_task_cpu(p);
		scx_bpf_dsq_insert_vtime(p, VS_DSQ_IDLE_PINNED + cpu, slice_ns,
					 p->scx.dsq_vtime, enq_flags);
		scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
		return;
	}
	scx_bpf_dsq_insert_vtime(p, VS_DSQ_IDLE, slice_ns, p->scx.dsq_vtime,
				 enq_flags);
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0)
		scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
}
