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
 * And what it sees itself (struct vcpu_live: a heartbeat from the tick and
 * a per-vCPU timer on vCPUs that lose time):
 *   - BVS: a latency-sensitive task wakes onto a low-latency vCPU that is
 *     idle, or that runs only SCHED_IDLE work and became active recently;
 *   - IVH: a CPU-bound task on a vCPU that loses time moves at the tick to
 *     an idle vCPU that has rested (the model's rhythm), or, predicted
 *     about to be switched off at a heartbeat, to an idle vCPU that has
 *     rested or answered a pre-wake (both active).
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
#undef SCX_ENQ_PREEMPT
#undef SCX_KICK_PREEMPT
#define VS_DSQ_LOCAL bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL)
#define VS_DSQ_LOCAL_ON bpf_core_enum_value(enum scx_dsq_id_flags, SCX_DSQ_LOCAL_ON)
#define VS_ENQ_WAKEUP bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_WAKEUP)
#define VS_WAKE_SYNC bpf_core_enum_value(enum scx_wake_flags, SCX_WAKE_SYNC)
#define VS_KICK_IDLE bpf_core_enum_value(enum scx_kick_flags, SCX_KICK_IDLE)
#define VS_KICK_PREEMPT bpf_core_enum_value(enum scx_kick_flags, SCX_KICK_PREEMPT)
#define VS_ENQ_PREEMPT bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_PREEMPT)

/* uapi values vmlinux.h does not carry (macros). */
#define VS_CLOCK_MONOTONIC 1
#define VS_TIMER_CPU_PIN (1ULL << 1)

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
/* BVS, and whether it checks a vCPU's state (the paper's ablation). */
const volatile bool bvs_enabled = true;
const volatile bool bvs_state_check = true;
/* IVH, and whether it pre-wakes the target and waits for its answer
 * (activity-aware, the paper's design) or moves the task at once. */
const volatile bool ivh_enabled = true;
const volatile bool ivh_activity_aware = true;
/* IVH moves a task to a rested target at the kernel's tick, from the
 * probers' model (ivh_at_tick_consider); the heartbeat's prediction is
 * left for targets that have not rested. */
const volatile bool ivh_at_tick = true;
/*
 * Heartbeat period on a busy vCPU that loses time, and the gap that counts
 * as an inactive episode (twice the period: timer interrupts arrive late
 * by a fraction of a period on a slow vCPU without it being switched off).
 */
const volatile u64 beat_ns = 1000000;
/* Command names the user declared latency-sensitive (--latency-sensitive). */
const volatile u32 nr_latency_comms = 0;
/*
 * Fault injection for the tests (`vsched sched --inject-error-after`,
 * hidden): a BPF runtime error this long after loading (0: never), to show
 * that an ejection is reported with its reason and loses no task.
 */
const volatile u64 inject_error_after_ns = 0;
/* When vsched_init ran: the injected error's clock. */
static u64 loaded_at_ns;

UEI_DEFINE(uei);

/* The model, one entry per vCPU, written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct vcpu_model);
} vcpu_models SEC(".maps");

/* What each vCPU sees of itself as it happens (see intf.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct vcpu_live);
} vcpu_lives SEC(".maps");

/* One heartbeat timer per vCPU, pinned to it. */
struct beat_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct beat_timer);
} beat_timers SEC(".maps");

/* How a task behaves, for BVS. */
struct task_ctx {
	/* Run time since its last wake-up, its moving average per wake-up
	 * (BVS's state check asks for that much time left), and the moving
	 * share of wake-ups that ran briefly (vs_short_share). */
	u64 run_this_wake_ns;
	u64 avg_run_ns;
	u32 short_share;
	u32 wakes;
	/* Named by --latency-sensitive. */
	u32 declared;
	/* BVS chose a busy vCPU: its number + 1 (0: none), for enqueue to
	 * put the task there; pre-empting (SCHED_IDLE work) or behind (a
	 * short task). */
	u32 bvs_target_plus1;
	u32 bvs_preempt;
	/* SCHED_IDLE tasks: when it was last queued (the starvation guard). */
	u64 idle_queued_ns;
	/* The vCPU it last ran on, + 1 (0: not yet): counter `migrated`. */
	u32 last_cpu_plus1;
	/* That vCPU's inactive_seen_ns when the task started running there:
	 * its run's inactive part is what that grew by until it stopped. */
	u64 inactive_mark_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

/* Command names (comm, 16 bytes) declared latency-sensitive. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, char[16]);
	__type(value, u8);
} latency_comms SEC(".maps");

/*
 * KVM's per-vCPU steal-time page: `preempted` is set by the host while the
 * vCPU is switched off. Weak: absent on kernels not built as KVM guests,
 * and all zero where the hypervisor does not fill it (TCG, the lab).
 */
extern struct kvm_steal_time steal_time __ksym __weak;

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

static struct vcpu_live *live_of(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&vcpu_lives, &key);
}

static struct task_ctx *ctx_of(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

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

/* Whether the host has the vCPU switched off right now (KVM only). */
static bool host_preempted(s32 cpu)
{
	struct kvm_steal_time *st;

	if (!bpf_ksym_exists(&steal_time))
		return false;
	st = bpf_per_cpu_ptr(&steal_time, cpu);
	return st && (st->preempted & 1);
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

/*
 * Whether `p` counts as latency-sensitive for BVS: declared so by name, or
 * running briefly per wake-up (policy.h).
 */
static bool latency_sensitive(struct task_ctx *tc)
{
	return tc->declared || vs_latency_sensitive(tc->short_share, tc->wakes);
}

/* Whether the task `cpu` runs now is SCHED_IDLE work. */
static bool running_idle_policy(s32 cpu)
{
	struct vcpu_live *l = live_of(cpu);

	return l && l->curr_pid && l->curr_idle_policy;
}

/* Whether `cpu` runs a normal (not SCHED_IDLE) task now. */
static bool running_normal(s32 cpu)
{
	struct vcpu_live *l = live_of(cpu);

	return l && l->curr_pid && !l->curr_idle_policy;
}

/* Whether `cpu` runs only SCHED_IDLE work now, with nothing queued for it. */
static bool runs_idle_policy(s32 cpu)
{
	return running_idle_policy(cpu) &&
	       !scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu);
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
 * about their runs, a fraction of a millisecond each). */
static bool runs_short_task(s32 cpu)
{
	struct vcpu_live *l = live_of(cpu);

	return l && l->curr_pid && l->curr_short &&
	       scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu) < VS_BVS_MAX_BEHIND;
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
				   runs_short_task(cpu), bvs_state_check);
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

/* Whether `cpu` is idle now (without claiming it). */
static bool is_idle_now(s32 cpu)
{
	const struct cpumask *idle = scx_bpf_get_idle_cpumask();
	bool yes = bpf_cpumask_test_cpu(cpu, idle);

	scx_bpf_put_idle_cpumask(idle);
	return yes;
}


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
 * A global function (not static, not hidden: libbpf makes hidden ones
 * static), like ivh_tick_may_move: the verifier checks it once per
 * program instead of at each of its call sites, which took IVH's share of
 * the verifier's work from 45,000 to 19,000 instructions, and a load in
 * an idle TCG guest from 3.0 s to 2.0 s (`vsched sched -v` says both).
 */
__noinline s32 ivh_target(s32 src)
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
	u32 wanting = scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL), nr_visible = 0;
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
 * vCPUs have time to spare (policy.h vs_ivh_surplus).
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
 * Whether `cpu`'s heartbeat is worth its timer now. Each beat is a timer
 * interrupt (under TCG about a tenth of a millisecond of emulation: a
 * 2 kHz heartbeat on every busy vCPU made four CPU-bound threads 30%
 * slower), so only where a decision reads it: the vCPU loses time (the
 * probe saw it available under 95%) and either IVH could move its task
 * (a normal task that may run anywhere, and a vCPU to take it: an idle
 * one, or one running only SCHED_IDLE work, as during the probers' light
 * windows, which arms the beats through each window) or
 * BVS's state check may choose it (it runs SCHED_IDLE work).
 */
static bool beats_wanted(s32 cpu, struct vcpu_live *l)
{
	s32 target;

	if (!l->curr_pid || !loses_time(cpu))
		return false;
	if (bvs_enabled && l->curr_idle_policy)
		return true;
	if (!ivh_enabled || l->curr_idle_policy || !l->curr_movable)
		return false;
	target = ivh_target(cpu);
	/* At the tick, a rested target takes the task without a heartbeat. */
	return target >= 0 && !(ivh_at_tick && ivh_tick_may_move(cpu, target));
}

/*
 * A heartbeat of the busy vCPU `cpu` (its timer, or its tick while the
 * timer runs). Without the timer the ticks alone (4 ms apart at HZ=250)
 * would read as episodes: they only keep the state unknown.
 */
static void beat(s32 cpu)
{
	struct vcpu_live *l = live_of(cpu);
	u64 now = bpf_ktime_get_ns();

	if (!l)
		return;
	if (!l->beating) {
		l->last_beat_ns = 0;
		return;
	}
	if (vs_beat(l, now, 2 * beat_ns))
		count(VS_STAT_BEAT_GAPS);
	ivh_consider(cpu, l, now);
}

static int beat_timer_fired(void *map, int *key, struct beat_timer *bt)
{
	s32 cpu = bpf_get_smp_processor_id();
	struct vcpu_live *l = live_of(cpu);

	if (!l)
		return 0;
	if (!beats_wanted(cpu, l)) {
		l->beating = 0;
		l->last_beat_ns = 0;
		return 0;
	}
	beat(cpu);
	bpf_timer_start(&bt->timer, beat_ns, VS_TIMER_CPU_PIN);
	return 0;
}

/* Arms `cpu`'s heartbeat timer if its beats are wanted and it is not armed. */
static void start_beating(s32 cpu, struct vcpu_live *l)
{
	struct beat_timer *bt;
	u32 key = cpu;

	if (l->beating || !beats_wanted(cpu, l))
		return;
	bt = bpf_map_lookup_elem(&beat_timers, &key);
	if (bt && !bpf_timer_start(&bt->timer, beat_ns, VS_TIMER_CPU_PIN)) {
		l->beating = 1;
		/* Active from here: the first beat starts the stretch. */
		l->last_beat_ns = 0;
		vs_beat(l, bpf_ktime_get_ns(), 2 * beat_ns);
	}
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
	 * BVS for latency-sensitive tasks. A synchronous wake-up onto the
	 * waker's vCPU (below) is kept when that vCPU is a low-latency one:
	 * it is active by definition.
	 */
	if (bvs_enabled) {
		struct task_ctx *tc = ctx_of(p);

		if (tc && latency_sensitive(tc) &&
		    !((wake_flags & VS_WAKE_SYNC) &&
		      is_low_latency(bpf_get_smp_processor_id()))) {
			cpu = bvs_pick(p, tc, prev_cpu);
			if (cpu >= 0)
				return cpu;
		}
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
		struct task_ctx *tc = ctx_of(p);

		if (tc)
			tc->idle_queued_ns = bpf_ktime_get_ns();
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
	/* BVS chose a busy vCPU: take over its SCHED_IDLE work now, or
	 * queue behind its short task. */
	if (enq_flags & VS_ENQ_WAKEUP) {
		struct task_ctx *tc = ctx_of(p);

		if (tc && tc->bvs_target_plus1) {
			s32 target = tc->bvs_target_plus1 - 1;

			tc->bvs_target_plus1 = 0;
			if (target == scx_bpf_task_cpu(p)) {
				scx_bpf_dsq_insert(p, VS_DSQ_LOCAL, slice_ns,
						   enq_flags | (tc->bvs_preempt ? VS_ENQ_PREEMPT : 0));
				return;
			}
		}
	}
	/* Bound to one vCPU (per-CPU kthreads, the heavy probers): run it
	 * there, unless that would pass over starving SCHED_IDLE work again
	 * (a task inserted locally is run without a dispatch); queued, it
	 * waits one dispatch. */
	if (p->nr_cpus_allowed == 1 && !idle_starving_on(scx_bpf_task_cpu(p))) {
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

		cpu = ivh_destination(p, cur);
		if (cpu >= 0) {
			/* SCHED_IDLE work running there is pre-empted
			 * (ivh_target), whatever waits in its local queue. */
			bool over_idle_policy = running_idle_policy(cpu);

			if (over_idle_policy)
				count(VS_STAT_IVH_OVER_IDLE_POLICY);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL_ON | cpu, slice_ns,
					   enq_flags);
			scx_bpf_kick_cpu(cpu, over_idle_policy ? VS_KICK_PREEMPT :
								 VS_KICK_IDLE);
			return;
		}

		cpu = find_best_idle(p, cur_score + 1);
		if (cpu >= 0 && !vs_keep_prev(cur_score, score(cpu)) &&
		    scx_bpf_test_and_clear_cpu_idle(cpu)) {
			count(VS_STAT_MOVED_STRONGER);
			scx_bpf_dsq_insert(p, VS_DSQ_LOCAL_ON | cpu, slice_ns,
					   enq_flags);
			scx_bpf_kick_cpu(cpu, VS_KICK_IDLE);
			return;
		}
		/*
		 * Kept only when nothing waits in this vCPU's own queue
		 * either: tasks there are invisible to idle vCPUs, and
		 * keeping each in turn at its slice end held three CPU-bound
		 * threads on one vCPU for seconds while three vCPUs idled
		 * (seen in the IVH layout: 4.0 s against 1.4 s).
		 */
		if (cur_visible && !scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cur) &&
		    keeps_its_vcpu(p) && !idle_starving_on(cur)) {
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
		if (scx_bpf_dsq_move_to_local(VS_DSQ_NORMAL, 0))
			return;
	} else if (scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL)) {
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
	l->curr_short = bvs_enabled && tc && latency_sensitive(tc);
	start_beating(cpu, l);
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

void BPF_STRUCT_OPS(vsched_stopping, struct task_struct *p, bool runnable)
{
	u64 used = slice_ns > p->scx.slice ? slice_ns - p->scx.slice : 0;
	struct task_ctx *tc;
	struct vcpu_live *l;

	charge_vtime(p, used);
	if (reference_fifo)
		return;
	l = live_of(scx_bpf_task_cpu(p));
	if (!runnable && l)
		l->curr_pid = 0;
	tc = ctx_of(p);
	if (!tc)
		return;
	add_run(tc, l, used);
	if (!runnable) {
		/* Going to sleep: one wake-up's worth of running, for BVS. */
		tc->avg_run_ns = vs_ewma(tc->avg_run_ns, tc->run_this_wake_ns);
		tc->short_share = vs_short_share(tc->short_share, tc->wakes,
						 tc->run_this_wake_ns);
		tc->run_this_wake_ns = 0;
		if (tc->wakes < VS_BVS_MIN_WAKES)
			tc->wakes++;
	}
}

/* A task becomes runnable: whether its name was declared latency-sensitive. */
void BPF_STRUCT_OPS(vsched_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tc;
	char comm[16] = {};

	if (!nr_latency_comms || reference_fifo || !(tc = ctx_of(p)))
		return;
	/* Checked at every wake-up: a task is renamed by exec after it
	 * first became known. */
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), p->comm) > 0)
		tc->declared = bpf_map_lookup_elem(&latency_comms, comm) != NULL;
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

	if (p->scx.slice || is_idle_task(p) || !visible(cpu))
		return;
	/* SCHED_IDLE work waiting does not end the slice unless it
	 * starves (policy.h): at the end, dispatch would hand it the vCPU
	 * before the expired task is queued again. */
	normal_waiting = scx_bpf_dsq_nr_queued(VS_DSQ_NORMAL) +
			 scx_bpf_dsq_nr_queued(VS_DSQ_LOCAL_ON | cpu);
	/* A normal task on a visible vCPU, as checked above. */
	if (!vs_renews_slice(p->scx.slice, 1, 1, normal_waiting,
			     idle_starving_on(cpu),
			     find_best_idle(p, 0) >= 0,
			     l->ivh_go_ns && l->ivh_go_pid == p->pid))
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
	/* A vCPU may have gone idle since the task started: IVH has a target. */
	start_beating(cpu, l);
	beat(cpu);
	if (ivh_at_tick)
		ivh_at_tick_consider(cpu, l, bpf_ktime_get_ns());
	renew_slice_if_kept(p, cpu, l);
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

s32 BPF_STRUCT_OPS_SLEEPABLE(vsched_init)
{
	s32 err;

	s32 cpu;

	loaded_at_ns = bpf_ktime_get_ns();
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
	       .runnable	= (void *)vsched_runnable,
	       .running		= (void *)vsched_running,
	       .stopping	= (void *)vsched_stopping,
	       .tick		= (void *)vsched_tick,
	       .update_idle	= (void *)vsched_update_idle,
	       .enable		= (void *)vsched_enable,
	       .init		= (void *)vsched_init,
	       .exit		= (void *)vsched_exit,
	       /*
	        * ENQ_LAST: a task whose slice ends with nothing else to run is
	        * enqueued again rather than silently kept running, so that
	        * enqueue can move it to a stronger vCPU or off a hidden one.
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
