/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Capacity and RWC placement: the strongest idle vCPU RWC leaves
 * visible.
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/*
 * The strongest idle vCPU `p` may use and RWC leaves visible, with a score
 * of at least `min_score`, or -1. Not claimed: the caller claims it with
 * scx_bpf_test_and_clear_cpu_idle(), which fails if another wake-up was
 * faster.
 */
static s32 find_best_idle(const struct task_struct *p, u32 min_score)
{
	const struct cpumask *idle = scx_bpf_get_idle_cpumask();
	s32 best = -1;
	u32 best_score = 0;
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		u32 s;

		if (cpu >= VS_MAX_CPUS)
			break;
		if (!bpf_cpumask_test_cpu(cpu, idle) ||
		    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !visible(cpu))
			continue;
		s = score(cpu);
		if (s >= min_score && (best < 0 || s > best_score)) {
			best = cpu;
			best_score = s;
		}
	}
	scx_bpf_put_idle_cpumask(idle);
	return best;
}

/* Whether `cpu` is idle now (without claiming it). */
static bool is_idle_now(s32 cpu)
{
	const struct cpumask *idle = scx_bpf_get_idle_cpumask();
	bool yes = bpf_cpumask_test_cpu(cpu, idle);

	scx_bpf_put_idle_cpumask(idle);
	return yes;
}

/*
 * At `p`'s slice end on `cur` (or queued on a vCPU RWC now hides): a
 * clearly stronger idle vCPU takes it directly (off a hidden `cur`, any
 * idle visible one); whether one did.
 */
static __always_inline bool move_to_stronger(struct task_struct *p, s32 cur,
					     u64 enq_flags)
{
	u32 cur_score = visible(cur) ? score(cur) : 0;
	s32 cpu = find_best_idle(p, cur_score + 1);

	if (cpu < 0 || vs_keep_prev(cur_score, score(cpu)) ||
	    !scx_bpf_test_and_clear_cpu_idle(cpu))
		return false;
	count(VS_STAT_MOVED_STRONGER);
	scx_bpf_dsq_insert(p, VS_DSQ_LOCAL_ON | cpu, slice_ns, enq_flags);
	scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
	return true;
}
