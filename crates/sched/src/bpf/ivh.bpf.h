/* SPDX-License-Identifier: GPL-2.0 */
/*
 * IVH: a CPU-bound task leaves a vCPU about to be switched off for an
 * idle vCPU that is active (it answered a pre-wake, or it rested).
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/* Tunables (`--no-ivh`, `--ivh-unaware`, `--ivh-beats-only`):
 * IVH at all; whether it pre-wakes the target and waits for its answer
 * (activity-aware, the paper's design) or moves the task at once; and
 * whether it also moves a task to a rested target at the kernel's tick,
 * from the probers' model (ivh_at_tick_consider), leaving the heartbeat's
 * prediction for targets that have not rested. */
const volatile bool ivh_enabled = true;
const volatile bool ivh_activity_aware = true;
const volatile bool ivh_at_tick = true;

/*
 * IVH moves only a task that has run this long on its vCPU: the paper's
 * 2 ms, which also bounds how often one task can be moved (a moved task
 * starts counting again), so two vCPUs cannot bat it back and forth
 * faster than every 2 ms of its own progress.
 */
#define VS_IVH_MIN_RUN_NS 2000000ULL
/* ivh_target's answer when every visible vCPU has a normal task of its
 * own (policy.h vs_ivh_vcpu_to_spare), apart from "no target" (-1). */
#define VS_IVH_NO_SPARE (-2)

/*
 * Heartbeats a target may take to answer IVH's pre-wake (4: 4 ms by
 * default). Waking a halted vCPU takes tens of µs on a host with room,
 * but up to a few ms when its host CPU is busy; the source judges
 * whether the answer still helps, so the target answers late ones too,
 * up to this bound, beyond which the predicted switch-off is long past.
 */
#define VS_IVH_ANSWER_BEATS 4

/* Whether the vCPU loses time (the probe saw it available under 95%), so
 * that its heartbeat is worth a timer. */
static bool loses_time(s32 cpu)
{
	const struct vcpu_model *m = model_of(cpu);

	return m && m->available_permille && m->available_permille < 950;
}

/* The vCPUs other than `except` that run a normal task now, as a bit set. */
static u64 running_normal_except(s32 except)
{
	u64 busy = 0;
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (cpu != except && running_normal(cpu))
			busy |= 1ULL << cpu;
	}
	return busy;
}

/* Whether `cpu` shares its host CPU with one of the vCPUs in `busy`
 * (the probers' stacking). */
static bool host_shared_with(s32 cpu, u64 busy)
{
	const struct vcpu_model *m = model_of(cpu);

	return m && ((((u64)m->stack_mates_hi << 32) | m->stack_mates_lo) & busy);
}

/*
 * IVH's target for a task leaving `src`, none while every visible vCPU
 * has a normal task of its own (VS_IVH_NO_SPARE; policy.h
 * vs_ivh_vcpu_to_spare): a visible vCPU other than `src`, not switched
 * off by the host (KVM) nor clearly weaker than `src` (policy.h
 * vs_ivh_target_ok), that is idle, the one idle longest; if none is,
 * one that runs only SCHED_IDLE work. Among idle ones, a vCPU whose host
 * CPU runs no other normal task comes first: a stacked mate running one would halve what the task gets (with
 * two threads on two host CPUs of capped pairs, each thread should
 * alternate within its own pair; sending both to one host CPU left the
 * other idle).
 * Long idleness is what the paper's heuristic asks for: such a vCPU has
 * likely used none of its time lately, so it runs the task for a full
 * active stretch (one idle for a moment may have used its quota and be
 * switched off within a millisecond; seen in the IVH layout). Not
 * claimed: the pre-wake or the move wakes it.
 * SCHED_IDLE work does not hold a vCPU against normal work (the kernel's
 * default scheduler counts such a CPU as idle when it places a task):
 * the probers' light windows run SCHED_IDLE on every vCPU at once, about
 * a tenth of the time, and without this fallback IVH had no target then.
 * (Under TCG a CPU-bound thread in the IVH layout still slows to a
 * quarter of its speed through each window, with or without it: that is
 * mostly the probers' emulated cost; docs/benchmarks.md.) Such a target
 * has not rested (`idle_since_ns` is 0 while it is busy), so only the
 * heartbeat's rule moves a task there (by hand-shake, or at once with
 * `--ivh-unaware`), never the tick rule.
 *
 * Static, inlined at each call site, unlike ivh_tick_may_move: as a
 * global function (verified once instead) it halved IVH's share of the
 * verifier's work, but Debian's 6.18.15 verifier then refused the object
 * ("verifier bug: backtracking call unexpected regs 2c2", EFAULT), so
 * vsched did not load there. Inlined, the verifier goes through 62,000
 * instructions on 7.2.13 and 7.3.4, 87,000 on 6.16.12 and 145,000 on
 * 6.18.15 (`vsched sched -v`, QEMU 10 TCG guests: loads of 1.4-3.0 s).
 */
static s32 ivh_target(s32 src)
{
	const struct cpumask *idle;
	/* Found only once an idle candidate needs it (a second pass). */
	u64 busy = 0;
	bool busy_known = false;
	s32 best = -1, shared = -1, idle_policy = -1;
	u64 best_since = 0, shared_since = 0;
	/* Normal tasks wanting a vCPU, and vCPUs to give (policy.h
	 * vs_ivh_vcpu_to_spare); queued tasks may be SCHED_IDLE work on its
	 * way to run, which errs towards not moving. */
	u32 wanting = per_vcpu_queues ? 0 : scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL),
	    nr_visible = 0;
	bool vis;
	s32 cpu;

	idle = scx_bpf_get_idle_cpumask();
	bpf_for(cpu, 0, nr_cpus) {
		struct vcpu_live *l;

		if (cpu >= VS_MAX_CPUS)
			break;
		vis = visible(cpu);
		if (running_normal(cpu))
			wanting++;
		wanting += scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu);
		if (per_vcpu_queues)
			wanting += scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL_ON + cpu);
		if (vis)
			nr_visible++;
		if (cpu == src || !vis || host_preempted(cpu) ||
		    !vs_ivh_target_ok(score(src), score(cpu)))
			continue;
		if (!bpf_cpumask_test_cpu(cpu, idle)) {
			if (idle_policy < 0 && runs_idle_policy(cpu))
				idle_policy = cpu;
			continue;
		}
		if (!(l = live_of(cpu)) || !l->idle_since_ns /* leaving idle now */)
			continue;
		if (!busy_known) {
			busy = running_normal_except(src);
			busy_known = true;
		}
		if (host_shared_with(cpu, busy)) {
			if (shared < 0 || l->idle_since_ns < shared_since) {
				shared = cpu;
				shared_since = l->idle_since_ns;
			}
		} else if (best < 0 || l->idle_since_ns < best_since) {
			best = cpu;
			best_since = l->idle_since_ns;
		}
	}
	scx_bpf_put_idle_cpumask(idle);
	if (!vs_ivh_vcpu_to_spare(wanting, nr_visible))
		return VS_IVH_NO_SPARE;
	if (best >= 0)
		return best;
	return shared >= 0 ? shared : idle_policy;
}

/*
 * IVH's first step, on the source vCPU at a heartbeat: its task is
 * CPU-bound (has run VS_IVH_MIN_RUN_NS here), may run anywhere, and the
 * vCPU is about to be switched off (its rhythm, policy.h). Activity-aware:
 * ask an idle target to answer (pre-wake), unless it has rested a whole
 * rhythm and is known to run as soon as woken (policy.h
 * vs_ivh_target_rested): then, as unaware IVH always does, move at once.
 */
static void ivh_consider(s32 src, struct vcpu_live *l, u64 now)
{
	struct vcpu_live *t;
	s32 target;

	if (!ivh_enabled || !l->curr_pid || l->curr_idle_policy ||
	    !l->curr_movable || now < l->curr_since_ns + VS_IVH_MIN_RUN_NS ||
	    now < l->ivh_quiet_until_ns ||
	    !vs_about_to_stall(l, now, 2 * beat_ns))
		return;
	target = ivh_target(src);
	if (target == VS_IVH_NO_SPARE)
		count(VS_STAT_IVH_NO_SPARE);
	if (target < 0 || !(t = live_of(target)))
		return;
	count(VS_STAT_IVH_ATTEMPTED);
	/* One attempt per hand-shake window. */
	l->ivh_quiet_until_ns = now + 2 * beat_ns;
	l->ivh_asked_gaps = l->gaps;
	if (ivh_activity_aware &&
	    !vs_ivh_target_rested(t->idle_since_ns, now,
				  l->active_mean_ns + l->inactive_mean_ns)) {
		t->ivh_req_from = src;
		t->ivh_req_pid = l->curr_pid;
		t->ivh_req_ns = now;
		/* A target busy with SCHED_IDLE work answers once pre-empted. */
		scx_bpf_kick_cpu(target, runs_idle_policy(target) ?
						 VS_KICK_PREEMPT : VS_KICK_IDLE);
	} else {
		if (ivh_activity_aware)
			count(VS_STAT_IVH_RESTED);
		l->ivh_go_to = target;
		l->ivh_go_pid = l->curr_pid;
		l->ivh_go_ns = now;
		scx_bpf_kick_cpu(src, VS_KICK_PREEMPT);
	}
}

/*
 * Whether IVH's tick rule may move a task from `src` to `target` now: the
 * target rested one of the source's rhythms, and the VM's idle visible
 * vCPUs have time to spare (policy.h vs_ivh_surplus). A global function
 * (not static, not hidden: libbpf makes hidden ones static): the verifier
 * checks it once, not at each call site; every kernel of the lab's matrix
 * accepts it (unlike ivh_target).
 */
__noinline bool ivh_tick_may_move(s32 src, s32 target)
{
	const struct vcpu_model *m = model_of(src);
	struct vcpu_live *t = live_of(target);
	const struct cpumask *idle;
	u32 nr_idle = 0, nr_busy = 0;
	s32 cpu;

	if (!m || !t ||
	    !vs_ivh_target_rested(t->idle_since_ns, bpf_ktime_get_ns(),
				  vs_model_rhythm_ns(m->episode_mean_us,
						     m->available_permille)))
		return false;
	idle = scx_bpf_get_idle_cpumask();
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (!visible(cpu))
			continue;
		if (bpf_cpumask_test_cpu(cpu, idle))
			nr_idle++;
		else
			nr_busy++;
	}
	scx_bpf_put_idle_cpumask(idle);
	return vs_ivh_surplus(nr_idle, nr_busy, m->available_permille);
}

/*
 * IVH at the tick (`ivh_at_tick`), on a vCPU the probers saw lose time: a
 * CPU-bound task that may run anywhere and has run VS_IVH_MIN_RUN_NS here
 * moves at once to an idle vCPU that has rested one of this vCPU's
 * rhythms as the model gives it (policy.h vs_model_rhythm_ns). No switch-
 * off is predicted: the task keeps moving while such targets exist, each
 * vCPU running it from 2 ms to the next tick (2-6 ms at HZ=250), about a
 * capped vCPU's quota or less.
 * What it saves is the heartbeat where a rested target exists (under TCG
 * each beat costs about a tenth of a millisecond of the running vCPU's
 * time); where none has rested, beats_wanted arms the heartbeat and
 * ivh_consider predicts the switch-off as before.
 */
static void ivh_at_tick_consider(s32 src, struct vcpu_live *l, u64 now)
{
	s32 target;

	if (!ivh_enabled || !loses_time(src) || !l->curr_pid ||
	    l->curr_idle_policy || !l->curr_movable ||
	    now < l->curr_since_ns + VS_IVH_MIN_RUN_NS ||
	    now < l->ivh_quiet_until_ns)
		return;
	target = ivh_target(src);
	if (target == VS_IVH_NO_SPARE)
		count(VS_STAT_IVH_NO_SPARE);
	if (target < 0 || !ivh_tick_may_move(src, target))
		return;
	count(VS_STAT_IVH_ATTEMPTED);
	count(VS_STAT_IVH_AT_TICK);
	l->ivh_quiet_until_ns = now + 2 * beat_ns;
	l->ivh_asked_gaps = l->gaps;
	l->ivh_go_to = target;
	l->ivh_go_pid = l->curr_pid;
	l->ivh_go_ns = now;
	scx_bpf_kick_cpu(src, VS_KICK_PREEMPT);
}

/*
 * IVH's second step, on the target as it looks for work: it is active now,
 * so the source is told to let its task go (pre-empted, the task reaches
 * enqueue there), which it does only if it is still active (last step).
 * A request older than VS_IVH_ANSWER_BEATS heartbeats is dropped unanswered:
 * the source's predicted switch-off is long past.
 */
static void ivh_answer(s32 cpu)
{
	struct vcpu_live *t = live_of(cpu), *src;
	u64 now = bpf_ktime_get_ns();

	if (!t || !t->ivh_req_ns)
		return;
	if (vs_handshake_fresh(t->ivh_req_ns, now, VS_IVH_ANSWER_BEATS * beat_ns) &&
	    (src = live_of(t->ivh_req_from)) && src->curr_pid == t->ivh_req_pid) {
		src->ivh_go_to = cpu;
		src->ivh_go_pid = t->ivh_req_pid;
		src->ivh_go_ns = now;
		scx_bpf_kick_cpu(t->ivh_req_from, VS_KICK_PREEMPT);
	} else {
		count(VS_STAT_IVH_ABANDONED_TARGET);
	}
	t->ivh_req_ns = 0;
}

/*
 * IVH's last step, on the source as its task is enqueued after the
 * pre-emption: the destination if the source has not been switched off
 * since it asked (its heartbeat saw no episode, and the answer is within
 * a gap threshold old), else -1: abandoned, as the paper's IVH abandons
 * a late pull. The task has stalled already and the source has fresh
 * time now; moving it would only cost.
 */
static s32 ivh_destination(struct task_struct *p, s32 src)
{
	struct vcpu_live *l = live_of(src);
	s32 to;

	if (!l || !l->ivh_go_ns || l->ivh_go_pid != p->pid)
		return -1;
	to = l->ivh_go_to;
	if (!vs_handshake_fresh(l->ivh_go_ns, bpf_ktime_get_ns(), 2 * beat_ns) ||
	    l->gaps != l->ivh_asked_gaps || to < 0 || to >= VS_MAX_CPUS || !bpf_cpumask_test_cpu(to, p->cpus_ptr)) {
		count(VS_STAT_IVH_ABANDONED_SOURCE);
		l->ivh_go_ns = 0;
		return -1;
	}
	l->ivh_go_ns = 0;
	count(VS_STAT_IVH_DONE);
	return to;
}


/*
 * IVH's part of enqueue, at a slice end on `cur`: the task goes where
 * IVH decided (ivh_destination), pre-empting SCHED_IDLE work running
 * there (ivh_target), whatever waits in its local queue. True when it
 * went.
 */
static __always_inline bool ivh_enqueue(struct task_struct *p, s32 cur,
					u64 enq_flags)
{
	s32 cpu = ivh_destination(p, cur);
	bool over_idle_policy;

	if (cpu < 0)
		return false;
	over_idle_policy = running_idle_policy(cpu);
	if (over_idle_policy)
		count(VS_STAT_IVH_OVER_IDLE_POLICY);
	scx_bpf_dsq_insert(p, VS_DSQ_LOCAL_ON | cpu, slice_ns, enq_flags);
	scx_bpf_kick_cpu(cpu, over_idle_policy ? VS_KICK_PREEMPT : VS_KICK_IDLE);
	return true;
}
