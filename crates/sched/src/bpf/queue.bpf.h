/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The normal tasks' queues: one per vCPU, in weighted virtual time. A task
 * that must wait waits on the vCPU it last ran on (or was woken on), and
 * runs there next; a vCPU with nothing of its own takes the head of the
 * longest other queue. A shared queue handed each waiting task to
 * whichever vCPU asked first, so threads that block and wake often
 * crossed vCPUs at almost every wake-up (30,000 migrations per 20,000
 * condvar operations at 8 threads on 2 vCPUs, against 15 under the
 * kernel's default), each a cold cache and, under emulation, a cross-vCPU
 * wake-up.
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/* Tunable (`--shared-queue`, the ablation): one queue for all vCPUs. */
const volatile bool per_vcpu_queues = true;

/* The normal queue `cpu` runs first. */
static u64 normal_dsq(s32 cpu)
{
	return per_vcpu_queues ? VS_DSQ_NORMAL_ON + cpu : VS_DSQ_NORMAL;
}

/* Normal tasks `p` would share `cpu` with if it waited there: those
 * queued for it and the one it runs now, unless that is `p` (at its slice
 * end the vCPU still names it). */
static u32 normal_load(s32 cpu, const struct task_struct *p)
{
	struct vcpu_live *l = live_of(cpu);
	bool runs_other = l && l->curr_pid && !l->curr_idle_policy &&
			  l->curr_pid != p->pid;

	return scx_bpf_dsq_nr_queued(normal_dsq(cpu)) +
	       scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu) + runs_other;
}

/*
 * The vCPU whose queue `p` waits in: `cur` (where it ran, or where the
 * wake-up put it) unless another visible vCPU it may use has fewer normal
 * tasks to share (policy.h vs_queue_moves), the strongest of the least
 * loaded; off a hidden `cur`, always the least loaded visible one.
 */
static s32 queue_home(struct task_struct *p, s32 cur)
{
	bool cur_visible = visible(cur);
	u32 cur_load = cur_visible ? normal_load(cur, p) : (u32)-1;
	u32 best_load = cur_load, best_score = 0;
	s32 best = cur, cpu;

	bpf_for(cpu, 0, nr_cpus) {
		u32 load, s;

		if (cpu >= VS_MAX_CPUS)
			break;
		if (cpu == cur || !visible(cpu) ||
		    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		load = normal_load(cpu, p);
		s = score(cpu);
		/* Off `cur` only for fewer tasks to share; among the
		 * others, the least loaded and then the strongest. */
		if (vs_queue_moves(best_load, load) ||
		    (load == best_load && best != cur && s > best_score)) {
			best = cpu;
			best_load = load;
			best_score = s;
		}
	}
	return best;
}

/* Whether some visible vCPU may run `p`. */
static bool may_run_visible(const struct task_struct *p)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (visible(cpu) && bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return true;
	}
	return false;
}

/*
 * A task queued that only hidden vCPUs may run (one bound to a vCPU RWC
 * hides, such as that vCPU's cpuhp or kworker thread, or a prober that
 * just pinned itself there): its vCPU must be told, since find_best_idle
 * looks at visible vCPUs only, and must run it (dispatch_stranded).
 * SCHED_IDLE work running there is pre-empted, as enqueue_bound does.
 */
static void kick_if_stranded(struct task_struct *p, s32 home)
{
	s32 cpu = per_vcpu_queues ? home : scx_bpf_task_cpu(p);

	if (visible(cpu) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) ||
	    may_run_visible(p))
		return;
	count(VS_STAT_QUEUED_STRANDED);
	scx_bpf_kick_cpu(cpu, running_idle_policy(cpu) ? VS_KICK_PREEMPT :
							 VS_KICK_IDLE);
}

/* Queues `p` to wait for a vCPU (see the file's comment). */
static void queue_normal(struct task_struct *p, u64 enq_flags)
{
	s32 home = per_vcpu_queues ? queue_home(p, scx_bpf_task_cpu(p)) : 0;

	if (per_vcpu_queues && home != scx_bpf_task_cpu(p))
		count(VS_STAT_QUEUED_ELSEWHERE);
	scx_bpf_dsq_insert_vtime(p, normal_dsq(home), slice_ns,
				 vs_queue_vtime(p->scx.dsq_vtime, vtime_now, slice_ns),
				 enq_flags);
	kick_if_stranded(p, home);
}

/* How many tasks of a hidden vCPU's queue dispatch_stranded looks at:
 * its own queue holds only tasks with nowhere visible to go and orphans,
 * which the visible vCPUs take first; the shared queue moves on as the
 * visible vCPUs take its head. */
#define VS_STRANDED_SCAN 8

/*
 * Runs on hidden `cpu` the first task of its normal queue that no visible
 * vCPU may run; whether it moved one. RWC hides a vCPU from tasks that
 * have somewhere else to go: a task bound to the hidden vCPU has not.
 * Without this, such a task queued there (enqueue_bound queues it when
 * SCHED_IDLE work starves on its vCPU) waited until the scheduler was
 * unloaded or sched_ext's watchdog ejected it: "vcap-2 failed to run for
 * 43 s" while that vCPU was being taken offline; a reader woken for the
 * hidden vCPU during a 6 s stop ran 10-12 s later, at the unload
 * (crates/cli/tests/sched_faults.rs,
 * a_task_woken_for_the_hidden_vcpu_during_a_long_steal_runs_after_it).
 */
static bool dispatch_stranded(s32 cpu)
{
	u64 dsq = normal_dsq(cpu);
	struct task_struct *p;
	u32 looked = 0;

	if (!scx_bpf_dsq_nr_queued(dsq))
		return false;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++looked > VS_STRANDED_SCAN)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || may_run_visible(p))
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, VS_DSQ_LOCAL, 0)) {
			count(VS_STAT_STRANDED_DISPATCHES);
			return true;
		}
	}
	return false;
}

/*
 * A hidden vCPU whose queue still holds normal tasks (queued there before
 * RWC hid it), or -1. A hidden vCPU runs no normal task, so every visible
 * one takes such orphans before its own: left to stealing alone, they
 * waited while the visible vCPUs kept their own tasks, up to sched_ext's
 * watchdog.
 */
static s32 orphans_on(void)
{
	s32 cpu;

	if (!per_vcpu_queues)
		return -1;
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (!visible(cpu) && scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL_ON + cpu))
			return cpu;
	}
	return -1;
}

/*
 * Whether any hidden or parked vCPU holds orphans (orphans_on), scanned at
 * most once per decision: `*cached` is -1 until the first call, then 0 or
 * 1. The scan reads every vCPU's queue, so a decision that weighs several
 * vCPUs (bvs_pick) does it once, and only if a cheaper test did not
 * settle it first.
 */
static bool orphans_waiting(int *cached)
{
	if (*cached < 0)
		*cached = orphans_on() >= 0;
	return *cached;
}

/*
 * Whether normal tasks wait for visible `cpu` in the vtime-ordered
 * queues: its own, or a hidden or parked vCPU's orphans, which it takes
 * first. A wake-up inserted straight into `cpu`'s local queue (BVS's wait
 * behind a short task, the local wake-up, a task bound to `cpu`:
 * enqueue_bound) overtakes them, and two threads
 * that keep handing the vCPU to each other that way never leave its local
 * queue empty: dispatch never runs, and every task waiting for the vCPU
 * starves until sched_ext's watchdog ejects the scheduler. Seen with a
 * 2-thread barrier on the only vCPU that RWC and consolidation left
 * visible (3-vCPU guest with a stacked pair; the program's own sampling
 * thread, the probers and a kworker waited 29 s; crates/cli/tests/sched.rs,
 * consolidation_and_bvs_leave_no_task_waiting_behind_a_wake_up_pair).
 * `orphans`: orphans_waiting's cache, -1 before its first scan.
 */
static bool normal_tasks_wait_for(s32 cpu, int *orphans)
{
	return scx_bpf_dsq_nr_queued(normal_dsq(cpu)) || orphans_waiting(orphans);
}

/*
 * Runs the next normal task on visible `cpu`: a hidden vCPU's orphan,
 * else its own queue's head, else the head of the longest other queue.
 */
static bool dispatch_normal(s32 cpu)
{
	s32 from = orphans_on(), other;
	u32 most = 0;

	if (from >= 0 && scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL_ON + from, 0)) {
		count(VS_STAT_STOLEN);
		return true;
	}
	if (dispatch_unmarked(normal_dsq(cpu), cpu) ||
	    scx_bpf_dsq_move_to_local(normal_dsq(cpu), 0))
		return true;
	if (!per_vcpu_queues)
		return false;
	from = -1;
	bpf_for(other, 0, nr_cpus) {
		u32 n;

		if (other >= VS_MAX_CPUS)
			break;
		if (other == cpu)
			continue;
		n = scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL_ON + other);
		if (n > most) {
			most = n;
			from = other;
		}
	}
	if (from >= 0 && scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL_ON + from, 0)) {
		count(VS_STAT_STOLEN);
		return true;
	}
	/* The longest queue may hold only tasks this vCPU may not run (a
	 * task bound to its own vCPU queues there while others wait:
	 * enqueue_bound); another queue's task rather than idling beside
	 * it. */
	bpf_for(other, 0, nr_cpus) {
		if (other >= VS_MAX_CPUS)
			break;
		if (other == cpu || other == from ||
		    !scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL_ON + other))
			continue;
		if (scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL_ON + other, 0)) {
			count(VS_STAT_STOLEN);
			return true;
		}
	}
	return false;
}

/* The first normal task waiting in the queue `cpu` runs first (NULL:
 * none). */
static struct task_struct *normal_head(s32 cpu)
{
	return __COMPAT_scx_bpf_dsq_peek(normal_dsq(cpu));
}

/* Normal tasks waiting for visible `cpu`: in its own queues, and any
 * orphan of a hidden vCPU (dispatch_normal takes those first). */
static u32 normal_waiting_for(s32 cpu)
{
	return scx_bpf_dsq_nr_queued(normal_dsq(cpu)) +
	       scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu) +
	       (orphans_on() >= 0);
}

/* Whether `p`, at the end of its slice, is owed its vCPU before every
 * normal task waiting for it. */
static bool keeps_its_vcpu(struct task_struct *p)
{
	struct task_struct *head = normal_head(scx_bpf_task_cpu(p));

	if (orphans_on() >= 0)
		return false;
	return !head || vs_keeps_vcpu(p->scx.dsq_vtime, head->scx.dsq_vtime);
}

/*
 * At `p`'s slice end on `cur`: it stays, straight back onto its vCPU
 * with no idle vCPU kicked, unless a waiting task is owed the vCPU first
 * (lower virtual time); whether it stayed. Kicking one made the two race
 * for the task, which then changed vCPUs at every slice end; under TCG
 * that cost a CPU-bound thread 40% of its speed (measured: 0.50 s
 * against 0.37 s for `schedbench cpu 1 200000000` on two free vCPUs).
 * Yielding to any waiting task, owed or not, swapped two CPU-bound
 * threads between vCPUs whenever a third task woke. Kept only when
 * nothing waits in this vCPU's own queue either: tasks there are
 * invisible to idle vCPUs, and keeping each in turn at its slice end held
 * three CPU-bound threads on one vCPU for seconds while three vCPUs idled
 * (seen in the IVH layout: 4.0 s against 1.4 s). A task that marked
 * itself waiting, or that the spin detector marked spinning
 * (channel.bpf.h), yields its vCPU to any waiting task.
 */
static __always_inline bool keep_running(struct task_struct *p, s32 cur,
					 u64 enq_flags)
{
	if (!visible(cur) || scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cur) ||
	    !keeps_its_vcpu(p) || idle_starving_on(cur) ||
	    (mark_of(p) != VS_UNMARKED && normal_waiting_for(cur)))
		return false;
	count(VS_STAT_KEPT_RUNNING);
	scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, enq_flags);
	return true;
}

/*
 * A task bound to one vCPU (per-CPU kthreads, the heavy probers) runs
 * there, unless that would pass over starving SCHED_IDLE work again (a
 * task inserted locally is run without a dispatch) or normal tasks wait
 * for that vCPU (normal_tasks_wait_for); queued, it waits its turn by
 * virtual time. SCHED_IDLE work running there is pre-empted at once, as
 * the kernel's default does: without it, a thread bound to a vCPU that a
 * SCHED_IDLE spinner kept busy waited out the spinner's slice at every
 * wake-up (1.7 ms against the default's 64 us; `schedbench wakeup`,
 * busy_us). Run directly while normal tasks waited, two bound threads
 * that woke each other (`taskset -c 0 schedbench pingpong`) never let the
 * local queue empty: a shell's 1 s sleeps on that 2-vCPU guest took up to
 * 25 s, against 1.09 s under the kernel's default (crates/cli/tests/
 * sched.rs, bound_wake_up_pair_leaves_no_task_waiting_behind_it).
 * Whether `p` was placed so.
 */
static __always_inline bool enqueue_bound(struct task_struct *p, u64 enq_flags)
{
	s32 cpu = scx_bpf_task_cpu(p);
	int orphans = -1;
	bool over_idle_work;

	if (p->nr_cpus_allowed != 1 || idle_starving_on(cpu))
		return false;
	/* A hidden (or parked) vCPU runs no normal task, so none waits for
	 * it: the direct run there is safe. */
	if (visible(cpu) && normal_tasks_wait_for(cpu, &orphans)) {
		count(VS_STAT_PINNED_QUEUED);
		return false;
	}
	over_idle_work = running_idle_policy(cpu);
	count(VS_STAT_PINNED);
	if (over_idle_work)
		count(VS_STAT_PINNED_OVER_IDLE_POLICY);
	scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns,
			   enq_flags | (over_idle_work ? VS_ENQ_PREEMPT : 0));
	return true;
}
