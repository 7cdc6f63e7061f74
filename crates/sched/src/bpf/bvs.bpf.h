/* SPDX-License-Identifier: GPL-2.0 */
/*
 * BVS: latency-sensitive tasks (declared, or running briefly per wake-up)
 * onto low-latency vCPUs that are idle, or active with time left.
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/* Tunables (`--no-bvs`, `--bvs-no-state-check`): BVS at all, and
 * whether it checks a vCPU's state (the paper's ablation). */
const volatile bool bvs_enabled = true;
const volatile bool bvs_state_check = true;

/*
 * Whether `p` counts as latency-sensitive for BVS: declared so by name, or
 * running briefly per wake-up (policy.h).
 */
static bool latency_sensitive(struct task_ctx *tc)
{
	return tc->declared || vs_latency_sensitive(tc->short_share, tc->wakes);
}

/*
 * BVS's state check: the vCPU is active now with time left for a task that
 * runs `need_ns` (its heartbeat, policy.h), and the host has not switched
 * it off (KVM).
 */
static bool fresh_active(s32 cpu, u64 now, u64 need_ns)
{
	struct vcpu_live *l = live_of(cpu);

	return l && vs_fresh_active(l, now, 2 * beat_ns, need_ns) &&
	       !host_preempted(cpu);
}

/* Whether `cpu` runs a short latency-sensitive task with fewer than
 * VS_BVS_MAX_BEHIND tasks queued behind it (a waking one would wait
 * about their runs, a fraction of a millisecond each), and no normal
 * task waits for it in the queues the wait would overtake
 * (normal_tasks_wait_for, `orphans` as there). */
static bool runs_short_task(s32 cpu, int *orphans)
{
	struct vcpu_live *l = live_of(cpu);

	return l && l->curr_pid && l->curr_short &&
	       scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu) < VS_BVS_MAX_BEHIND &&
	       !normal_tasks_wait_for(cpu, orphans);
}

static bool is_low_latency(s32 cpu)
{
	const struct vcpu_model *m = model_of(cpu);

	/* Not measured yet: every vCPU is as good as any. */
	return !m || m->capacity == 0 || (m->flags & VS_VCPU_LOW_LATENCY);
}

/* Whether `cpu` is the vCPU running this code and the task on it is the
 * current one (the waker, in select_cpu). A wake-up from an interrupt
 * reads the interrupted task as the waker: BVS then keeps the wait, as
 * it did before vs_bvs_keep_behind_short. */
static bool runs_waker(s32 cpu)
{
	const struct vcpu_live *l;

	if (cpu != (s32)bpf_get_smp_processor_id())
		return false;
	l = live_of(cpu);
	return l && l->curr_pid == (u32)bpf_get_current_pid_tgid();
}

/*
 * BVS: a vCPU for a waking latency-sensitive task, by vs_bvs_rank
 * (policy.h) over the visible vCPUs it may use, first fit from its
 * previous vCPU (the first of the best rank found wins; the best rank
 * ends the search at once). An idle vCPU is claimed and the task
 * inserted; otherwise the task is marked for enqueue to put it there,
 * pre-empting SCHED_IDLE work or queued behind the short task. -1 when
 * no vCPU ranks, or when the best is a wait behind a short task that
 * vs_bvs_keep_behind_short declines: the usual path decides.
 */
static s32 bvs_pick(struct task_struct *p, struct task_ctx *tc, s32 prev_cpu)
{
	const struct cpumask *idle = scx_bpf_get_idle_cpumask();
	u64 now = bpf_ktime_get_ns();
	u64 need = tc->avg_run_ns;
	s32 found = -1;
	int best = VS_BVS_NONE;
	bool idle_elsewhere = false;
	int orphans = -1;
	u32 i;

	bpf_for(i, 0, nr_cpus) {
		s32 cpu = (prev_cpu + i) % nr_cpus;
		bool is_idle;
		int rank;

		if (cpu < 0 || cpu >= VS_MAX_CPUS || i >= VS_MAX_CPUS)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !visible(cpu))
			continue;
		is_idle = bpf_cpumask_test_cpu(cpu, idle) && !host_preempted(cpu);
		idle_elsewhere |= is_idle;
		rank = vs_bvs_rank(is_low_latency(cpu), is_idle,
				   runs_idle_policy(cpu),
				   fresh_active(cpu, now, need),
				   runs_short_task(cpu, &orphans),
				   bvs_state_check);
		if (rank < best) {
			best = rank;
			found = cpu;
			if (rank == VS_BVS_IDLE)
				break;
		}
	}
	scx_bpf_put_idle_cpumask(idle);
	if (found < 0) {
		count(VS_STAT_BVS_NONE);
		return -1;
	}
	if (best == VS_BVS_BEHIND_SHORT &&
	    !vs_bvs_keep_behind_short(idle_elsewhere, runs_waker(found))) {
		count(VS_STAT_BVS_BEHIND_DECLINED);
		return -1;
	}
	if (best == VS_BVS_IDLE) {
		if (!scx_bpf_test_and_clear_cpu_idle(found))
			return -1;
		count(VS_STAT_BVS_IDLE);
		scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
		return found;
	}
	tc->bvs_target_plus1 = found + 1;
	tc->bvs_preempt = best != VS_BVS_BEHIND_SHORT;
	count(best == VS_BVS_BEHIND_SHORT ? VS_STAT_BVS_BEHIND_SHORT :
					     VS_STAT_BVS_IDLE_POLICY);
	return found;
}

/*
 * BVS's part of select_cpu: a vCPU for a waking latency-sensitive task,
 * or -1 for the usual path. A synchronous wake-up onto the waker's vCPU
 * (the usual path) is kept when that vCPU is a low-latency one: it is
 * active by definition.
 */
static __always_inline s32 bvs_select_cpu(struct task_struct *p, s32 prev_cpu,
					  u64 wake_flags)
{
	struct task_ctx *tc;

	if (!bvs_enabled)
		return -1;
	tc = ctx_of(p);
	if (!tc || !latency_sensitive(tc) ||
	    ((wake_flags & VS_WAKE_SYNC) &&
	     is_low_latency(bpf_get_smp_processor_id())))
		return -1;
	return bvs_pick(p, tc, prev_cpu);
}

/*
 * At a wake-up's enqueue: BVS chose a busy vCPU in select_cpu (its target
 * is still the task's vCPU): take over its SCHED_IDLE work now, or queue
 * behind its short task. Whether `p` was placed so.
 */
static __always_inline bool bvs_enqueue(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tc = ctx_of(p);
	s32 target;

	if (!tc || !tc->bvs_target_plus1)
		return false;
	target = tc->bvs_target_plus1 - 1;
	tc->bvs_target_plus1 = 0;
	if (target != scx_bpf_task_cpu(p))
		return false;
	scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns,
			   enq_flags | (tc->bvs_preempt ? VS_ENQ_PREEMPT : 0));
	return true;
}

/*
 * Adds a run of `wall_ns` on `l`'s vCPU to the task's run since its
 * wake-up, less the inactive time the vCPU's heartbeat saw since the
 * task's mark (BVS judges the time the task really ran, not its vCPU's
 * gaps), and moves the mark to now.
 */
static void add_run(struct task_ctx *tc, struct vcpu_live *l, u64 wall_ns)
{
	if (!l) {
		tc->run_this_wake_ns += wall_ns;
		return;
	}
	tc->run_this_wake_ns += vs_active_run(wall_ns, l->inactive_seen_ns -
							   tc->inactive_mark_ns);
	tc->inactive_mark_ns = l->inactive_seen_ns;
}

/* The task stops after running `used` ns on `l`'s vCPU; going to sleep
 * (!runnable), one wake-up's worth of running is what BVS learns from. */
static __always_inline void bvs_stopping(struct task_ctx *tc,
					 struct vcpu_live *l, u64 used,
					 bool runnable)
{
	add_run(tc, l, used);
	if (runnable)
		return;
	tc->avg_run_ns = vs_ewma(tc->avg_run_ns, tc->run_this_wake_ns);
	tc->short_share = vs_short_share(tc->short_share, tc->wakes,
					 tc->run_this_wake_ns);
	tc->run_this_wake_ns = 0;
	if (tc->wakes < VS_BVS_MIN_WAKES)
		tc->wakes++;
}
