/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vsched's sched_ext scheduler.
 *
 * Base policy: weighted virtual time over one shared queue for normal tasks
 * and one for SCHED_IDLE tasks; a waking task goes straight to an idle vCPU
 * when there is one (its previous vCPU first: cross-vCPU wake-ups are the
 * expensive thing in a VM), else it queues and an idle vCPU is kicked.
 *
 * On top, what vsched's probers measured (struct vcpu_model, written by the
 * loader after every probe report):
 *   - capacity: among idle vCPUs, the strongest is chosen;
 *   - RWC: hidden vCPUs (stragglers, all but one of each stacked group) take
 *     no normal task; they still run SCHED_IDLE tasks (the probers' light
 *     threads among them, so that recovery is seen) and tasks bound to them.
 *
 * The decisions themselves are in policy.h, tested on the host.
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
#define VS_DSQ_LOCAL bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL)
#define VS_DSQ_LOCAL_ON bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL_ON)
#define VS_ENQ_WAKEUP bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_WAKEUP)
#define VS_WAKE_SYNC bpf_core_enum_value(enum scx_wake_flags, SCX_WAKE_SYNC)
#define VS_KICK_IDLE bpf_core_enum_value(enum scx_kick_flags, SCX_KICK_IDLE)

/* Tunables, set by the loader before load (see the `vsched sched` flags). */
const volatile u64 slice_ns = 3000000;
const volatile u32 nr_cpus = 1;
const volatile bool rwc_enabled = true;
const volatile bool capacity_enabled = true;
/*
 * The benchmark's reference (`vsched sched --reference-fifo`): the least a
 * sched_ext scheduler can do, to tell what sched_ext itself costs from
 * what vsched's policy costs. One FIFO queue, a waking task straight to an
 * idle vCPU (the kernel's default choice), no model, no kicks.
 */
const volatile bool reference_fifo = false;

UEI_DEFINE(uei);

/* The model, one entry per vCPU, written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct vcpu_model);
} vcpu_models SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VS_NR_STATS);
	__type(key, u32);
	__type(value, u64);
} stats SEC(".maps");

/* The normal queue's clock: the largest virtual time that started running. */
static u64 vtime_now;

static void count(enum vs_stat which)
{
	u32 key = which;
	u64 *n = bpf_map_lookup_elem(&stats, &key);

	if (n)
		(*n)++;
}

static const struct vcpu_model *model_of(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&vcpu_models, &key);
}

static bool visible(s32 cpu)
{
	const struct vcpu_model *m = model_of(cpu);

	return !m || vs_visible(m, rwc_enabled);
}

static u32 score(s32 cpu)
{
	const struct vcpu_model *m = model_of(cpu);

	return m ? vs_score(m, capacity_enabled) : VS_CAPACITY_UNKNOWN;
}

/* The uapi's SCHED_IDLE: a macro, so vmlinux.h's BTF does not carry it. */
#define VS_SCHED_IDLE 5

static bool is_idle_task(const struct task_struct *p)
{
	return p->policy == VS_SCHED_IDLE;
}

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
	/*
	 * A synchronous wake-up (the waker is about to wait, as in a pipe
	 * ping-pong): the wakee takes the waker's vCPU when nothing else is
	 * queued there, rather than waking a halted vCPU (about 40 µs under
	 * TCG, an IPI and a host wake-up on any hypervisor). Measured: a pipe
	 * ping-pong pair ran 3x faster this way than by waking prev.
	 */
	if (wake_flags & VS_WAKE_SYNC) {
		s32 waker = bpf_get_smp_processor_id();

		/* Also when the waker runs on the wakee's own prev: the pair
		 * then stays together instead of crossing vCPUs every other
		 * hop. */
		if (bpf_cpumask_test_cpu(waker, p->cpus_ptr) && visible(waker) &&
		    (waker == prev_cpu ||
		     vs_keep_prev(score(waker), score(prev_cpu))) &&
		    !scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | waker)) {
			count(VS_STAT_WAKE_SYNC);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, 0);
			return waker;
		}
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

/* Whether `p`, at the end of its slice, is owed its vCPU before every
 * waiting normal task. */
static bool keeps_its_vcpu(struct task_struct *p)
{
	struct task_struct *head = __COMPAT_scx_bpf_dsq_peek(VS_DSQ_NORMAL);

	return !head || vs_keeps_vcpu(p->scx.dsq_vtime, head->scx.dsq_vtime);
}

void BPF_STRUCT_OPS(vsched_enqueue, struct task_struct *p, u64 enq_flags)
{
	s32 cpu;

	if (reference_fifo) {
		scx_bpf_dsq_insert(p, VS_DSQ_NORMAL, slice_ns, enq_flags);
		return;
	}
	/*
	 * SCHED_IDLE work, pinned or not, waits in its own queue: a vCPU takes
	 * from it only when no normal task waits (the probers' light threads
	 * measure exactly that leftover time).
	 */
	if (is_idle_task(p)) {
		count(VS_STAT_QUEUED_IDLE);
		if (p->nr_cpus_allowed == 1) {
			cpu = scx_bpf_task_cpu(p);
			scx_bpf_dsq_insert_vtime(p, VS_DSQ_IDLE_PINNED + cpu,
						 slice_ns, p->scx.dsq_vtime,
						 enq_flags);
			scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
			return;
		}
		scx_bpf_dsq_insert_vtime(p, VS_DSQ_IDLE, slice_ns,
					 p->scx.dsq_vtime, enq_flags);
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0)
			scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
		return;
	}
	/* Bound to one vCPU (per-CPU kthreads, the heavy probers): run it there. */
	if (p->nr_cpus_allowed == 1) {
		count(VS_STAT_PINNED);
		scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, enq_flags);
		return;
	}
	/*
	 * A task whose slice ended (or that was queued on a vCPU RWC now
	 * hides) moves to a clearly stronger idle vCPU directly: nothing else
	 * would move it, since its own vCPU consumes the queue first.
	 * Otherwise it stays where it ran, straight back onto its vCPU and
	 * with no idle vCPU kicked, unless a waiting task is owed the vCPU
	 * first (lower virtual time). Kicking one made the two race for the
	 * task, which then changed vCPUs at every slice end;
	 * under TCG that cost a CPU-bound thread 40% of its speed (measured:
	 * 0.50 s against 0.37 s for `schedbench cpu 1 200000000` on two free
	 * vCPUs). Yielding to any waiting task, owed or not, swapped two
	 * CPU-bound threads between vCPUs whenever a third task woke.
	 */
	if (!(enq_flags & VS_ENQ_WAKEUP)) {
		s32 cur = scx_bpf_task_cpu(p);
		bool cur_visible = visible(cur);
		u32 cur_score = cur_visible ? score(cur) : 0;

		cpu = find_best_idle(p, cur_score + 1);
		if (cpu >= 0 && !vs_keep_prev(cur_score, score(cpu)) &&
		    scx_bpf_test_and_clear_cpu_idle(cpu)) {
			count(VS_STAT_MOVED_STRONGER);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL_ON | cpu, slice_ns,
					   enq_flags);
			scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
			return;
		}
		if (cur_visible && keeps_its_vcpu(p)) {
			count(VS_STAT_KEPT_RUNNING);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns, enq_flags);
			return;
		}
	}
	/*
	 * Queued: a wake-up no idle vCPU took, or a slice end where another
	 * task is owed the vCPU (or the vCPU is hidden). An idle vCPU, if
	 * any, is kicked to take one of the waiting tasks; without this kick
	 * a vCPU that was idle when the queue grew stayed idle beside three
	 * CPU-bound threads sharing two vCPUs (found by RWC's control run).
	 */
	count(VS_STAT_QUEUED_NORMAL);
	scx_bpf_dsq_insert_vtime(p, VS_DSQ_NORMAL, slice_ns,
				 vs_queue_vtime(p->scx.dsq_vtime, vtime_now, slice_ns),
				 enq_flags);
	cpu = find_best_idle(p, 0);
	if (cpu >= 0) {
		count(VS_STAT_KICKS);
		scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
	}
}

void BPF_STRUCT_OPS(vsched_dispatch, s32 cpu, struct task_struct *prev)
{
	if (reference_fifo) {
		scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL, 0);
		return;
	}
	if (visible(cpu)) {
		if (scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL, 0))
			return;
	} else if (scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL)) {
		count(VS_STAT_HIDDEN_SKIPS);
	}
	if (scx_bpf_dsq_move_to_local(VS_DSQ_IDLE_PINNED + cpu, 0))
		return;
	scx_bpf_dsq_move_to_local(VS_DSQ_IDLE, 0);
}

void BPF_STRUCT_OPS(vsched_running, struct task_struct *p)
{
	if (!is_idle_task(p) && p->scx.dsq_vtime > vtime_now)
		vtime_now = p->scx.dsq_vtime;
}

void BPF_STRUCT_OPS(vsched_stopping, struct task_struct *p, bool runnable)
{
	u64 used = slice_ns > p->scx.slice ? slice_ns - p->scx.slice : 0;

	scx_bpf_task_set_dsq_vtime(p, p->scx.dsq_vtime +
					 vs_vtime_charge(used, p->scx.weight));
}

void BPF_STRUCT_OPS(vsched_enable, struct task_struct *p)
{
	scx_bpf_task_set_dsq_vtime(p, vtime_now);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(vsched_init)
{
	s32 err;

	s32 cpu;

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
	}
	return 0;
}

void BPF_STRUCT_OPS(vsched_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(vsched_ops,
	       .select_cpu	= (void *)vsched_select_cpu,
	       .enqueue		= (void *)vsched_enqueue,
	       .dispatch	= (void *)vsched_dispatch,
	       .running		= (void *)vsched_running,
	       .stopping	= (void *)vsched_stopping,
	       .enable		= (void *)vsched_enable,
	       .init		= (void *)vsched_init,
	       .exit		= (void *)vsched_exit,
	       /*
	        * ENQ_LAST: a task whose slice ends with nothing else to run is
	        * enqueued again rather than silently kept running, so that
	        * enqueue can move it to a stronger vCPU or off a hidden one.
	        */
	       .flags		= SCX_OPS_ENQ_LAST,
	       /* A runnable task not run within 5 s ejects the scheduler:
	        * sched_ext's watchdog, generous enough for TCG guests. */
	       .timeout_ms	= 5000,
	       .name		= "vsched");
