/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vsched's sched_ext scheduler.
 *
 * Base policy: weighted virtual time over one queue of normal tasks per
 * vCPU (a vCPU with an empty queue takes from the longest other one) and
 * one shared queue for SCHED_IDLE tasks; a waking task goes straight to an
 * idle vCPU when there is one (its previous vCPU first: cross-vCPU
 * wake-ups are the expensive thing in a VM), else it queues on its vCPU
 * (or a less loaded one) and an idle vCPU is kicked.
 *
 * On top, what vsched's probers measured (struct vcpu_model, written by the
 * loader after every probe report):
 *   - capacity: among idle vCPUs, the strongest is chosen;
 *   - RWC: hidden vCPUs (stragglers, all but one of each stacked group) take
 *     no normal task; they still run SCHED_IDLE tasks (the probers' light
 *     threads among them, so that recovery is seen) and tasks bound to them.
 *
 * And what it sees itself (struct vcpu_live: a heartbeat from the tick and
 * a per-vCPU timer on vCPUs that lose time):
 *   - BVS: a latency-sensitive task wakes onto a low-latency vCPU that is
 *     idle, or that runs only SCHED_IDLE work and became active recently;
 *   - IVH: a CPU-bound task on a vCPU that loses time moves at the tick to
 *     an idle vCPU that has rested (the model's rhythm), or, predicted
 *     about to be switched off at a heartbeat, to an idle vCPU that has
 *     rested or answered a pre-wake (both active).
 *
 * The decisions themselves are in policy.h, tested on the host. This file
 * holds the sched_ext callbacks; each mechanism's state and helpers are
 * in its own part: state.bpf.h (tunables, maps, vCPU queries), idle.bpf.h
 * (SCHED_IDLE work), capacity.bpf.h (capacity and RWC placement),
 * channel.bpf.h (what vsched's runtime tells it: virtual blocking),
 * queue.bpf.h (the normal tasks' queues), spinners.bpf.h (spinners the
 * spin detector marked), consolidate.bpf.h (Gleaner's
 * consolidation and local wake-ups), bvs.bpf.h, ivh.bpf.h and
 * heartbeat.bpf.h.
 */
#include <scx/common.bpf.h>
#include "intf.h"
#include "policy.h"

char _license[] SEC("license") = "GPL";

/*
 * scx's headers turn these constants into read-only variables that a loader
 * must fill from the kernel's BTF. Ours are relocated by libbpf instead
 * (CO-RE): the values of the running kernel's enums, with nothing to fill.
 */
#undef SCX_DSQ_LOCAL
#undef SCX_DSQ_LOCAL_ON
#undef SCX_KICK_IDLE
#undef SCX_ENQ_WAKEUP
#undef SCX_ENQ_PREEMPT
#undef SCX_KICK_PREEMPT
#define VS_DSQ_LOCAL bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL)
#define VS_DSQ_LOCAL_ON bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL_ON)
#define VS_ENQ_WAKEUP bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_WAKEUP)
#define VS_WAKE_SYNC bpf_core_enum_value(enum scx_wake_flags, SCX_WAKE_SYNC)
#define VS_KICK_IDLE bpf_core_enum_value(enum scx_kick_flags, SCX_KICK_IDLE)
#define VS_KICK_PREEMPT bpf_core_enum_value(enum scx_kick_flags, SCX_KICK_PREEMPT)
#define VS_ENQ_PREEMPT bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_PREEMPT)
#undef SCX_ENQ_LAST
#define VS_ENQ_LAST bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_LAST)

/* uapi values vmlinux.h does not carry (macros). */
#define VS_CLOCK_MONOTONIC 1
/* include/linux/sched.h: a task's __state while it runs or may run. */
#define VS_TASK_RUNNING 0
#define VS_TIMER_CPU_PIN (1ULL << 1)

/*
 * The parts, each included once, in dependency order: the scheduler stays
 * one translation unit, so each part's helpers inline where the verifier
 * checks them, and the object is the one the kernels were tried with.
 */
#include "state.bpf.h"
#include "idle.bpf.h"
#include "capacity.bpf.h"
#include "channel.bpf.h"
#include "queue.bpf.h"
#include "spinners.bpf.h"
#include "consolidate.bpf.h"
#include "bvs.bpf.h"
#include "ivh.bpf.h"
#include "heartbeat.bpf.h"

s32 BPF_STRUCT_OPS(vsched_select_cpu, struct task_struct *p, s32 prev_cpu,
		   u64 wake_flags)
{
	bool prev_ok = bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr);
	s32 cpu;

	/* SCHED_IDLE work may run anywhere, hidden vCPUs included. */
	if (reference_fifo || is_idle_task(p)) {
		bool is_idle = false;

		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
		if (is_idle)
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
		return cpu;
	}
	cpu = bvs_select_cpu(p, prev_cpu, wake_flags);
	if (cpu >= 0)
		return cpu;
	cpu = local_wake_cpu(p, prev_cpu, wake_flags);
	if (cpu >= 0) {
		count(VS_STAT_WAKE_SYNC);
		scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
		return cpu;
	}
	if (prev_ok && visible(prev_cpu) && is_idle_now(prev_cpu)) {
		u32 prev_score = score(prev_cpu);

		/* Leave an idle prev only for a clearly stronger idle vCPU. */
		cpu = capacity_enabled ? find_best_idle(p, prev_score + 1) : -1;
		if (cpu >= 0 && !vs_keep_prev(prev_score, score(cpu)) &&
		    scx_bpf_test_and_clear_cpu_idle(cpu)) {
			count(VS_STAT_WAKE_BEST);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
			return cpu;
		}
		if (scx_bpf_test_and_clear_cpu_idle(prev_cpu)) {
			if (cpu >= 0)
				count(VS_STAT_WAKE_PREV_OVER_STRONGER);
			count(VS_STAT_WAKE_PREV);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
			return prev_cpu;
		}
	}
	cpu = find_best_idle(p, 0);
	if (cpu >= 0 && scx_bpf_test_and_clear_cpu_idle(cpu)) {
		count(VS_STAT_WAKE_BEST);
		scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
		return cpu;
	}
	return prev_ok ? prev_cpu : scx_bpf_task_cpu(p);
}

static void enqueue_task(struct task_struct *p, u64 enq_flags);

/*
 * SCX_ENQ_LAST (the ops flag SCX_OPS_ENQ_LAST, below): the task's slice
 * ended or it yielded with nothing else to run on its vCPU, which the
 * kernel is switching to idle; it asks the scheduler for a follow-up
 * scheduling event. Without this kick the vCPU went idle with the task
 * queued until some other event woke it: a lone CPU-bound thread beside
 * an idle vCPU took 3.9x (6.18.15) and 4.1x (6.16.12) its time under the
 * default scheduler, and in the FIFO reference mode, which queues it in
 * the shared queue, 4.0-6.1x on each kernel tried (6.16.12, 6.18.15,
 * 7.2.13); with the kick 1.15-1.2x (crates/cli/tests/sched.rs,
 * a_lone_cpu_bound_thread_runs_at_full_speed_beside_idle_vcpus).
 */
void BPF_STRUCT_OPS(vsched_enqueue, struct task_struct *p, u64 enq_flags)
{
	enqueue_task(p, enq_flags);
	if (enq_flags & VS_ENQ_LAST)
		scx_bpf_kick_cpu(scx_bpf_task_cpu(p), 0);
}

static void enqueue_task(struct task_struct *p, u64 enq_flags)
{
	s32 cpu;

	if (reference_fifo) {
		scx_bpf_dsq_insert(p, VS_DSQ_NORMAL, slice_ns, enq_flags);
		return;
	}
	if (is_idle_task(p)) {
		enqueue_idle_policy(p, enq_flags);
		return;
	}
	if ((enq_flags & VS_ENQ_WAKEUP) && bvs_enqueue(p, enq_flags))
		return;
	if (enqueue_bound(p, enq_flags))
		return;
	/*
	 * At a slice end (or queued on a vCPU RWC now hides): IVH's move
	 * first, then a clearly stronger idle vCPU, then the vCPU it ran on
	 * if it is owed it. Nothing else would move such a task, since its
	 * own vCPU consumes the queue first.
	 */
	if (!(enq_flags & VS_ENQ_WAKEUP)) {
		s32 cur = scx_bpf_task_cpu(p);

		if (ivh_enqueue(p, cur, enq_flags) ||
		    move_to_stronger(p, cur, enq_flags) ||
		    keep_running(p, cur, enq_flags))
			return;
	}
	/*
	 * Queued: a wake-up no idle vCPU took, or a slice end where another
	 * task is owed the vCPU (or the vCPU is hidden). An idle vCPU, if
	 * any, is kicked to take one of the waiting tasks; without this kick
	 * a vCPU that was idle when the queue grew stayed idle beside three
	 * CPU-bound threads sharing two vCPUs (found by RWC's control run).
	 */
	count(VS_STAT_QUEUED_NORMAL);
	consolidate_before_queueing(p, enq_flags);
	queue_normal(p, enq_flags);
	cpu = find_best_idle(p, 0);
	if (cpu >= 0) {
		count(VS_STAT_KICKS);
		scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
		return;
	}
	/*
	 * Else a vCPU running only SCHED_IDLE work takes it, at once: for a
	 * wake-up as for a task a slice end left waiting. Kicked for
	 * wake-ups only, two CPU-bound threads beside two SCHED_IDLE
	 * spinners on two vCPUs left the spinners 12-20% of the vCPUs (the
	 * kernel's default: 2-4%): a thread displaced at a slice end waited
	 * out a spinner's whole slice.
	 */
	cpu = find_idle_policy_cpu(p, scx_bpf_task_cpu(p));
	if (cpu >= 0) {
		count(VS_STAT_PREEMPTED_IDLE_POLICY);
		scx_bpf_kick_cpu(cpu, VS_KICK_PREEMPT);
	}
}

void BPF_STRUCT_OPS(vsched_dispatch, s32 cpu, struct task_struct *prev)
{
	if (reference_fifo) {
		scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL, 0);
		return;
	}
	ivh_answer(cpu);
	/* The starvation guard: SCHED_IDLE work that waited too long first. */
	if (idle_starving_on(cpu) &&
	    (scx_bpf_dsq_move_to_local(VS_DSQ_IDLE_PINNED + cpu, 0) ||
	     scx_bpf_dsq_move_to_local(VS_DSQ_IDLE, 0))) {
		count(VS_STAT_IDLE_STARVED);
		return;
	}
	if (visible(cpu)) {
		if (dispatch_normal(cpu))
			return;
	} else if (dispatch_stranded(cpu)) {
		return;
	} else if (scx_bpf_dsq_nr_queued(normal_dsq(cpu))) {
		count(VS_STAT_HIDDEN_SKIPS);
	}
	if (scx_bpf_dsq_move_to_local(VS_DSQ_IDLE_PINNED + cpu, 0))
		return;
	scx_bpf_dsq_move_to_local(VS_DSQ_IDLE, 0);
}

/* Charges `p` for `used` ns of running, in weighted virtual time: at a
 * slice end (stopping) and where the tick renews the slice instead. */
static void charge_vtime(struct task_struct *p, u64 used)
{
	scx_bpf_task_set_dsq_vtime(p, p->scx.dsq_vtime +
					 vs_vtime_charge(used, p->scx.weight));
}

void BPF_STRUCT_OPS(vsched_running, struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);
	struct task_ctx *tc;
	struct vcpu_live *l;
	u64 now;

	if (!is_idle_task(p) && p->scx.dsq_vtime > vtime_now)
		vtime_now = p->scx.dsq_vtime;
	if (reference_fifo || !(l = live_of(cpu)))
		return;
	now = bpf_ktime_get_ns();
	spinner_running(p, l);
	/* The same task kept on its vCPU keeps its run time (IVH's 2 ms). */
	if (l->curr_pid != p->pid)
		l->curr_since_ns = now;
	l->curr_pid = p->pid;
	l->curr_idle_policy = is_idle_task(p);
	l->curr_movable = p->nr_cpus_allowed == nr_cpus;
	tc = ctx_of(p);
	if (tc && !l->curr_idle_policy) {
		if (tc->last_cpu_plus1 && tc->last_cpu_plus1 != cpu + 1)
			count(VS_STAT_MIGRATED);
		tc->last_cpu_plus1 = cpu + 1;
	}
	if (tc)
		tc->inactive_mark_ns = l->inactive_seen_ns;
	if (!l->curr_idle_policy)
		consolidate_running(l, now);
	l->curr_short = bvs_enabled && tc && latency_sensitive(tc);
	l->curr_channel = channel_running(p, cpu, now);
	start_beating(cpu, l);
}

/*
 * Whether `p`, stopping with `runnable` false, stops only to be restarted
 * in place: a change of its scheduling while it runs (the spin detector's
 * nudge, its nice level, its policy, its CPUs) takes it off and puts it
 * back around the change, which sched_ext reports as stopping with
 * runnable false, runnable and running, though the task never left its
 * vCPU and its slice is not refilled. Such a task is still TASK_RUNNING;
 * one that goes to sleep (or exits) set another state first. Taken for a
 * sleep, a nudge would clear the spin mark it is meant to act on
 * (spinners.bpf.h), charge the slice's use a second time and count as a
 * short wake-up for BVS.
 */
static bool restarts_in_place(const struct task_struct *p, bool runnable)
{
	return !runnable && READ_ONCE(p->__state) == VS_TASK_RUNNING;
}

void BPF_STRUCT_OPS(vsched_stopping, struct task_struct *p, bool runnable)
{
	u64 used = slice_ns > p->scx.slice ? slice_ns - p->scx.slice : 0;
	bool restart = restarts_in_place(p, runnable);
	struct task_ctx *tc;
	struct vcpu_live *l;

	/* A restart's use of the slice is charged at the real stop: the
	 * slice goes on unrefilled. */
	if (!restart)
		charge_vtime(p, used);
	if (reference_fifo)
		return;
	l = live_of(scx_bpf_task_cpu(p));
	/* Paired with the running that follows, a restart's included. */
	if (l && !is_idle_task(p))
		consolidate_stopping(l, bpf_ktime_get_ns());
	if (l)
		channel_stopping(l);
	if (restart) {
		count(VS_STAT_RESTARTS_IN_PLACE);
		spinner_restarting(p);
		return;
	}
	if (!runnable && l)
		l->curr_pid = 0;
	tc = ctx_of(p);
	if (!tc)
		return;
	tc->stopped_ns = bpf_ktime_get_ns();
	bvs_stopping(tc, l, used, runnable);
	if (!runnable)
		consolidate_sleeping(tc);
}

/* A task becomes runnable: whether its name was declared latency-sensitive. */
void BPF_STRUCT_OPS(vsched_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tc;
	char comm[16] = {};

	/* A restart in place (vsched_stopping) is no wake-up. */
	if (!is_idle_task(p) && !scx_bpf_task_running(p))
		consolidate_wakeup();
	if (!nr_latency_comms || reference_fifo || !(tc = ctx_of(p)))
		return;
	/* Checked at every wake-up: a task is renamed by exec after it
	 * first became known. */
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), p->comm) > 0)
		tc->declared = bpf_map_lookup_elem(&latency_comms, comm) != NULL;
}

/* Whether `p` may stay on `cpu` at a slice end: it is visible, or `p`
 * has nowhere visible to go (a hidden vCPU's own kernel threads). */
static bool may_stay_on(const struct task_struct *p, s32 cpu)
{
	return visible(cpu) || !may_run_visible(p);
}

/* Whether IVH has chosen to move `p` off the vCPU whose state is `l`. */
static bool ivh_pending_for(const struct task_struct *p,
			    const struct vcpu_live *l)
{
	return l->ivh_go_ns && l->ivh_go_pid == p->pid;
}

/*
 * At the tick, a slice that ran out where its end could only keep the task
 * (policy.h vs_renews_slice) is renewed here, charged as the slice end
 * would have charged it. The kernel checks the slice right after ops.tick.
 * The cheap tests first: this runs at every tick.
 */
static void renew_slice_if_kept(struct task_struct *p, s32 cpu,
				struct vcpu_live *l)
{
	struct task_ctx *tc;
	u64 normal_waiting;

	if (p->scx.slice || is_idle_task(p))
		return;
	if (!may_stay_on(p, cpu))
		return;
	/* SCHED_IDLE work waiting does not end the slice unless it
	 * starves (policy.h): at the end, dispatch would hand it the vCPU
	 * before the expired task is queued again. */
	normal_waiting = normal_waiting_for(cpu);
	/* A normal task that may stay, as checked above. */
	if (!vs_renews_slice(p->scx.slice, 1, 1, normal_waiting,
			     idle_starving_on(cpu),
			     find_best_idle(p, 0) >= 0, ivh_pending_for(p, l)))
		return;
	if (!scx_bpf_task_set_slice(p, slice_ns))
		return;
	charge_vtime(p, slice_ns);
	if (p->scx.dsq_vtime > vtime_now)
		vtime_now = p->scx.dsq_vtime;
	if ((tc = ctx_of(p)))
		add_run(tc, l, slice_ns);
	count(VS_STAT_SLICE_RENEWED);
}

void BPF_STRUCT_OPS(vsched_tick, struct task_struct *p)
{
	s32 cpu = bpf_get_smp_processor_id();
	struct vcpu_live *l;

	if (inject_error_after_ns &&
	    bpf_ktime_get_ns() - loaded_at_ns > inject_error_after_ns)
		scx_bpf_error("injected error (vsched sched --inject-error-after)");
	if (reference_fifo || !(l = live_of(cpu)))
		return;
	/* A thread that asked the channel for its run while running (it
	 * may run on with no switch-in: a slice renewed in place, a yield
	 * kept) is published from its next tick. */
	if (!l->curr_channel && !is_idle_task(p))
		l->curr_channel = channel_running(p, cpu, bpf_ktime_get_ns());
	/* A vCPU may have gone idle since the task started: IVH has a target. */
	start_beating(cpu, l);
	beat(cpu);
	if (ivh_at_tick)
		ivh_at_tick_consider(cpu, l, bpf_ktime_get_ns());
	renew_slice_if_kept(p, cpu, l);
	channel_tick(l, p);
	spinner_tick(p, cpu);
}

/* Tunable (`--no-yield-in-place`): every sched_yield() ends the slice. */
const volatile bool yield_in_place = true;

/*
 * sched_yield(): the slice ends, as sched_ext does for a scheduler
 * without this callback, unless nothing else could take the vCPU
 * (policy.h vs_yield_keeps_slice): then the task runs on at once, with no
 * slice end, queueing or kick. yield_to() (`to`: KVM's directed yield
 * inside a guest kernel, never user space) is declined.
 */
bool BPF_STRUCT_OPS(vsched_yield, struct task_struct *from,
		    struct task_struct *to)
{
	s32 cpu = scx_bpf_task_cpu(from);
	struct vcpu_live *l;

	if (to)
		return false;
	if (yield_in_place && !reference_fifo && (l = live_of(cpu)) &&
	    vs_yield_keeps_slice(!is_idle_task(from), may_stay_on(from, cpu),
				 normal_waiting_for(cpu), idle_starving_on(cpu),
				 ivh_pending_for(from, l))) {
		count(VS_STAT_YIELDS_KEPT);
		return false;
	}
	scx_bpf_task_set_slice(from, 0);
	return false;
}

/* A vCPU goes idle (halts) or leaves idle: its beats stop or start. */
void BPF_STRUCT_OPS(vsched_update_idle, s32 cpu, bool idle)
{
	struct vcpu_live *l = live_of(cpu);

	if (!l)
		return;
	if (idle) {
		l->last_beat_ns = 0;
		l->curr_pid = 0;
		l->idle_since_ns = bpf_ktime_get_ns();
	} else {
		/* Busy (intf.h): a target chosen from a stale idle mask must
		 * not count as rested. */
		l->idle_since_ns = 0;
		/* Awake now: active from here. */
		if (l->beating)
			vs_beat(l, bpf_ktime_get_ns(), 2 * beat_ns);
	}
}

void BPF_STRUCT_OPS(vsched_enable, struct task_struct *p)
{
	scx_bpf_task_set_dsq_vtime(p, vtime_now);
}

void BPF_STRUCT_OPS(vsched_exit_task, struct task_struct *p,
		    struct scx_exit_task_args *args)
{
	channel_forget(p);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(vsched_init)
{
	s32 err;

	s32 cpu;

	loaded_at_ns = bpf_ktime_get_ns();
	record_online();
	err = scx_bpf_create_dsq(VS_DSQ_NORMAL, -1);
	if (err)
		return err;
	err = scx_bpf_create_dsq(VS_DSQ_IDLE, -1);
	if (err)
		return err;
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		err = scx_bpf_create_dsq(VS_DSQ_IDLE_PINNED + cpu, -1);
		if (err)
			return err;
		err = scx_bpf_create_dsq(VS_DSQ_NORMAL_ON + cpu, -1);
		if (err)
			return err;
	}
	bpf_for(cpu, 0, nr_cpus) {
		struct beat_timer *bt;
		u32 key = cpu;

		if (cpu >= VS_MAX_CPUS)
			break;
		bt = bpf_map_lookup_elem(&beat_timers, &key);
		if (!bt)
			return -ENOENT;
		err = bpf_timer_init(&bt->timer, &beat_timers, VS_CLOCK_MONOTONIC);
		if (err)
			return err;
		err = bpf_timer_set_callback(&bt->timer, beat_timer_fired);
		if (err)
			return err;
	}
	channel_open();
	return consolidate_init();
}

void BPF_STRUCT_OPS(vsched_exit, struct scx_exit_info *ei)
{
	channel_close();
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(vsched_ops,
	       .select_cpu	= (void *)vsched_select_cpu,
	       .enqueue		= (void *)vsched_enqueue,
	       .dispatch	= (void *)vsched_dispatch,
	       .runnable	= (void *)vsched_runnable,
	       .running		= (void *)vsched_running,
	       .stopping	= (void *)vsched_stopping,
	       .tick		= (void *)vsched_tick,
	       .yield		= (void *)vsched_yield,
	       .update_idle	= (void *)vsched_update_idle,
	       .enable		= (void *)vsched_enable,
	       .exit_task	= (void *)vsched_exit_task,
	       .init		= (void *)vsched_init,
	       .exit		= (void *)vsched_exit,
	       /*
	        * ENQ_LAST: a task whose slice ends with nothing else to run is
	        * enqueued again rather than silently kept running, so that
	        * enqueue can move it to a stronger vCPU or off a hidden one
	        * (and then kicks its vCPU: vsched_enqueue).
	        * KEEP_BUILTIN_IDLE: update_idle only feeds the heartbeat; the
	        * kernel's idle tracking, which placement relies on, stays.
	        */
	       .flags		= SCX_OPS_ENQ_LAST | SCX_OPS_KEEP_BUILTIN_IDLE,
	       /*
	        * A runnable task not run within 30 s ejects the scheduler:
	        * sched_ext's watchdog, at the longest the kernel allows. A
	        * cloud vCPU can be switched off for seconds (a long steal, a
	        * live migration's stop), and the tasks bound to it (its
	        * kernel threads, the probers' threads) wait meanwhile whatever
	        * the policy does: with 5 s, an 8 s stop of one lab vCPU
	        * ejected the scheduler (lab/sched/frozen-vcpu.toml).
	        */
	       .timeout_ms	= 30000,
	       .name		= "vsched");
