/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The heartbeat: a per-vCPU timer on busy vCPUs that lose time, whose
 * missed beats are inactive episodes (IVH's rhythm, BVS's state check).
 *
 * Included once by main.bpf.c, which says in what order and why.
 */

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
	/* A thread that asked the channel for its run reads the predicted
	 * switch-off. */
	if (l->curr_channel)
		return true;
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
	bool episode;

	if (!l)
		return;
	if (!l->beating) {
		l->last_beat_ns = 0;
		return;
	}
	episode = vs_beat(l, now, 2 * beat_ns);
	if (episode)
		count(VS_STAT_BEAT_GAPS);
	channel_beat(l, episode, now);
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
