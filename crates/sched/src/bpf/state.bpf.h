/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every part reads and writes: the tunables the loader sets, the maps
 * (the model, each vCPU's live state, task contexts, the counters), and
 * the questions about a vCPU that more than one policy asks (is it
 * visible to RWC, its score, what it runs now).
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

/*
 * Tunables, set by the loader before load (see the `vsched sched` flags).
 * Those more than one part reads are here; a mechanism's own switches
 * are declared at the top of its file (bvs.bpf.h, ivh.bpf.h), so that a
 * new rule's flag lives beside the rule.
 */
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
	/* Slice ends at which it was queued again, others waiting, since it
	 * last slept: consolidation widens for CPU-bound work (two). */
	u32 slice_end_waits;
	/* When it last stopped running (the channel's bound on passing
	 * over a marked task: policy.h vs_passes_over_marked). */
	u64 stopped_ns;
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

static void count_n(enum vs_stat which, u64 by)
{
	u32 key = which;
	u64 *n = bpf_map_lookup_elem(&stats, &key);

	if (n)
		*n += by;
}

static void count(enum vs_stat which)
{
	count_n(which, 1);
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

/* Whether the host has the vCPU switched off right now (KVM only). */
static bool host_preempted(s32 cpu)
{
	struct kvm_steal_time *st;

	if (!bpf_ksym_exists(&steal_time))
		return false;
	st = bpf_per_cpu_ptr(&steal_time, cpu);
	return st && (st->preempted & 1);
}

/* Whether RWC leaves `cpu` to normal tasks. */
static bool rwc_usable(s32 cpu)
{
	const struct vcpu_model *m = model_of(cpu);

	return !m || vs_visible(m, rwc_enabled);
}

/* vCPUs consolidation parked now (consolidate.bpf.h: vcpu_live.parked). */
static u32 nr_parked;

/* Whether consolidation parked `cpu` (RWC leaves it usable, but normal
 * tasks are kept off it for now). */
static bool is_parked(s32 cpu)
{
	struct vcpu_live *l;

	if (!nr_parked)
		return false;
	l = live_of(cpu);
	return l && l->parked;
}

/*
 * The vCPUs online when this instance was loaded (vsched_init). The kernel
 * ejects a scheduler without hotplug callbacks at every vCPU going offline
 * or coming online, and the loader loads it again, so the set holds for
 * the instance's life. A task's allowed CPUs include offline ones (the
 * kernel keeps affinity across hotplug): without this, a waking task
 * could be queued for an offline vCPU, which never dispatches, while the
 * online ones kept their own tasks running.
 */
static u64 online_at_load;
_Static_assert(VS_MAX_CPUS <= 64, "online_at_load has one bit per vCPU");

/* Records which vCPUs are online now (vsched_init). */
static void record_online(void)
{
	const struct cpumask *online = scx_bpf_get_online_cpumask();
	u64 mask = 0;
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= VS_MAX_CPUS)
			break;
		if (bpf_cpumask_test_cpu(cpu, online))
			mask |= 1ULL << cpu;
	}
	scx_bpf_put_cpumask(online);
	online_at_load = mask;
}

/* A bit test rather than an array: 6.16's verifier lost the bounds of an
 * index checked the same way ("math between map_value pointer and
 * register with unbounded min value"). */
static bool is_online(s32 cpu)
{
	u32 i = cpu;

	return i < VS_MAX_CPUS && (online_at_load >> i) & 1;
}

/* Whether normal tasks may be placed on `cpu`: it is online, RWC leaves
 * it usable and consolidation has not parked it. */
static bool visible(s32 cpu)
{
	return is_online(cpu) && !is_parked(cpu) && rwc_usable(cpu);
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
