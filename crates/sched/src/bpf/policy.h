/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vsched's placement decisions as pure functions of the vCPU model: no BPF
 * helper, no kernel state. main.bpf.c calls them; tests/c/policy_test.c
 * compiles this same file for the host and checks them, so the decisions
 * are tested without a kernel.
 */
#ifndef VSCHED_POLICY_H
#define VSCHED_POLICY_H

#include "intf.h"

/* Capacity of a vCPU nothing has been measured on: as strong as any. */
#define VS_CAPACITY_UNKNOWN 1024u

/*
 * A wake-up stays on its previous vCPU (warm caches, and under emulation a
 * cross-vCPU wake-up costs tens of µs) unless an idle vCPU is more than a
 * third stronger. A smaller margin would move tasks on measurement noise:
 * the probe's capacity readings scatter by up to ±15% (docs/lab.md).
 */
#define VS_KEEP_PREV_NUM 3u
#define VS_KEEP_PREV_DEN 4u

/* Whether normal tasks may be placed on this vCPU. */
static inline int vs_visible(const struct vcpu_model *m, int rwc)
{
	return !rwc || m->hidden == 0;
}

/* Placement score of a vCPU: its capacity when capacity-aware. */
static inline u32 vs_score(const struct vcpu_model *m, int capacity_aware)
{
	if (!capacity_aware || m->capacity == 0)
		return VS_CAPACITY_UNKNOWN;
	return m->capacity;
}

/* Whether to stay on the previous vCPU rather than move to the best one. */
static inline int vs_keep_prev(u32 prev_score, u32 best_score)
{
	return (u64)prev_score * VS_KEEP_PREV_DEN >=
	       (u64)best_score * VS_KEEP_PREV_NUM;
}

/*
 * Whether IVH may move a task from a vCPU of `src_score` to one of
 * `target_score`: not to a clearly weaker one (the same margin as
 * vs_keep_prev). Escaping a switch-off onto a vCPU of half the capacity
 * loses more than it saves: a single CPU-bound thread went back and forth
 * between a strong vCPU and an idle one capped at 50%, 29% slower than
 * staying (capacity benchmark, 0.42 s against the oracle's 0.32 s).
 */
static inline int vs_ivh_target_ok(u32 src_score, u32 target_score)
{
	return vs_keep_prev(target_score, src_score);
}

/* Virtual time a task pays for running `used_ns` at `weight` (100 = nice 0). */
static inline u64 vs_vtime_charge(u64 used_ns, u32 weight)
{
	if (weight == 0)
		weight = 1;
	return used_ns * 100 / weight;
}

/*
 * Virtual time a waking task queues with: its own, but no further behind
 * the queue's clock than one slice, so that a long sleeper gets ahead by
 * one slice at most instead of monopolising the vCPUs.
 */
static inline u64 vs_queue_vtime(u64 task_vtime, u64 clock, u64 slice_ns)
{
	if (clock > slice_ns && task_vtime < clock - slice_ns)
		return clock - slice_ns;
	return task_vtime;
}

/*
 * Whether a task whose slice ended keeps its vCPU rather than queue behind
 * the first waiting task: when it is not behind that task in virtual time.
 * It pays for every slice it runs, so it falls behind and yields in turn.
 */
static inline int vs_keeps_vcpu(u64 task_vtime, u64 head_vtime)
{
	return task_vtime <= head_vtime;
}

/*
 * Whether a task about to wait leaves the queue of its vCPU (`here_load`
 * normal tasks to share it with, itself not counted) for another vCPU's
 * (`there_load`): only when fewer share that one, so that waiting tasks
 * even out over the vCPUs; at equal loads it stays where its cache is
 * warm and where its waker or its last run put it.
 */
static inline int vs_queue_moves(u32 here_load, u32 there_load)
{
	return there_load < here_load;
}

/*
 * Whether a task whose slice ran out at the tick runs on with a new slice
 * instead of going through the slice end (stopping, enqueue, running):
 * only when that end could only keep it, as no normal task waits for its
 * vCPU (in its own queues, or left by a hidden vCPU), no visible vCPU it
 * may use is idle and no IVH move of it is pending, and the task may stay
 * (`may_stay`: its vCPU is visible, or it may run on no visible vCPU, as
 * a hidden vCPU's own kernel threads; else the slice end moves it off).
 * A task bound to a hidden vCPU had its slice end every 3 ms, and at
 * each end dispatch handed the vCPU to SCHED_IDLE work waiting there:
 * a CPU-bound loop bound to the hidden vCPU of the stacked pair got 0.5
 * of it and a SCHED_IDLE spinner beside it the other 0.5 (7.2.13). SCHED_IDLE work waiting does
 * not end the slice unless it starves: it gets idle cycles only, as under
 * the kernel's default (weight 3 against 1024), plus the starvation
 * guard's slice. Measured before this rule with the probers and IVH off,
 * four CPU-bound threads on four capped vCPUs (3 ms slices ending at
 * every 4 ms tick under TCG): each thread's CPU time was 0.95 of its wall
 * time, against 0.99 under the kernel's default and with 20 ms slices.
 * Measured before SCHED_IDLE work stopped ending slices: at each slice
 * end dispatch handed the vCPU to the waiting SCHED_IDLE thread for a
 * slice, and four such threads spinning 100 ms a second (the probers'
 * light windows) got 1.25-1.3 s of CPU beside four CPU-bound threads in
 * 8 s, against 0.36-0.43 s under the default; the threads took 5-8%
 * longer.
 */
static inline int vs_renews_slice(u64 slice_left, int normal_task, int may_stay,
				  u64 normal_waiting, int idle_starving,
				  int idle_vcpu, int ivh_pending)
{
	return slice_left == 0 && normal_task && may_stay && normal_waiting == 0 &&
	       !idle_starving && !idle_vcpu && !ivh_pending;
}

/*
 * Whether a task's sched_yield() returns at once, the task keeping its
 * slice and its vCPU, instead of ending the slice: only when the end
 * could only keep it, as for vs_renews_slice, but an idle vCPU elsewhere
 * does not count: a yield hands the vCPU to waiting work, and moving the
 * yielder to another vCPU is no part of it. sched_ext ends a yielder's
 * slice unless the scheduler says otherwise, and with nothing else to run
 * that end went through stopping, enqueue (the last task: a kick of its
 * own vCPU) and running again: 85-94 us per sched_yield() of a lone
 * thread in a 2-vCPU guest under TCG, against 4-5 us under the kernel's
 * default, which returns at once there (schedbench yield 1 50000,
 * 7.2.13). A spin-wait that yields while its vCPU has room is common
 * (runtimes' spin-then-yield loops, vsched's own runtime when its load
 * reading is stale).
 */
static inline int vs_yield_keeps_slice(int normal_task, int may_stay,
				       u64 normal_waiting, int idle_starving,
				       int ivh_pending)
{
	return normal_task && may_stay && normal_waiting == 0 && !idle_starving &&
	       !ivh_pending;
}

/*
 * Moving average with weight 1/8 for the new sample: a vCPU's rhythm
 * (active stretch, episode) shows within a handful of its periods, and
 * one odd stretch moves the average by an eighth only. Starts at the
 * first sample.
 */
static inline u64 vs_ewma(u64 avg, u64 sample)
{
	if (avg == 0)
		return sample;
	return avg - (avg >> 3) + (sample >> 3);
}

/*
 * A low-water mark: follows a shorter sample at once and a longer one by
 * an eighth. IVH predicts a switch-off from it rather than from the mean:
 * a capped vCPU's stretches vary (from its quota to two quotas when the
 * period renews mid-stretch), and moving a little early costs one move
 * while moving late costs a whole episode.
 */
static inline u64 vs_low_water(u64 low, u64 sample)
{
	if (low == 0 || sample < low)
		return sample;
	return low + ((sample - low) >> 3);
}

/*
 * BVS's own recognition of a latency-sensitive task: most of its recent
 * wake-ups ran at most VS_BVS_SHORT_RUN_NS each (a request handler, an
 * event loop), once VS_BVS_MIN_WAKES wake-ups have been seen. Half a
 * millisecond is a quarter of the shortest inactive episodes BVS steers
 * around (2 ms in the lab's layouts), so such a task finishes within an
 * active stretch it starts in.
 *
 * A share of short runs, not an average run: a run that the host's
 * switch-off interrupts is counted in wall time (the guest cannot take
 * the gap out under TCG, nor on a hypervisor without steal time) and is
 * milliseconds long. In an average, one such run added an eighth of
 * itself, and a 250 us request handler, interrupted on about one wake-up
 * in four, read as long half of the time: measured in the lab's BVS
 * layout, BVS's share of requests served on the low-latency vCPU fell
 * from 79% (100 us requests) to 52% (250 us), the control's 48%. In a
 * share, such a run is one "long" vote among eight.
 */
#define VS_BVS_SHORT_RUN_NS 500000ull
#define VS_BVS_MIN_WAKES 8u
/* The share's unit (all recent wake-ups short), and its threshold: more
 * than half. */
#define VS_SHORT_SHARE_ONE 256u

/*
 * The moving share of short runs after one more wake-up's run `run_ns`:
 * weight 1/8 per wake-up, as vs_ewma; starts at the first sample.
 */
static inline u32 vs_short_share(u32 share, u32 wakes, u64 run_ns)
{
	u32 vote = run_ns <= VS_BVS_SHORT_RUN_NS ? VS_SHORT_SHARE_ONE : 0;

	if (wakes == 0)
		return vote;
	return share - (share >> 3) + (vote >> 3);
}

/*
 * The part of a task's run of `wall_ns` (what the kernel charged: wall
 * time on the vCPU) that was not an inactive episode, given how much
 * inactive time the vCPU's heartbeat saw over that run. Without it, one
 * run across a host switch-off reads as milliseconds long: in the lab's
 * BVS layout (vCPU 0 off 1 ms of every 2), BVS put a median 77.6% of a
 * request server's 100 us requests on vCPU 0, and 87.1% with it.
 */
static inline u64 vs_active_run(u64 wall_ns, u64 inactive_seen_ns)
{
	return wall_ns > inactive_seen_ns ? wall_ns - inactive_seen_ns : 0;
}

static inline int vs_latency_sensitive(u32 short_share, u32 wakes)
{
	return wakes >= VS_BVS_MIN_WAKES && short_share > VS_SHORT_SHARE_ONE / 2;
}

/*
 * Tasks BVS lets wait behind a short task on a low-latency vCPU: two, a
 * wait of at most about 1 ms (two short runs), against a high-latency
 * vCPU's episodes of several ms (measured in the lab's BVS layout, 3 ms
 * against 1 ms: with one, a burst of wake-ups overflowed to the
 * high-latency vCPU, and 40% of the requests were served there).
 */
#define VS_BVS_MAX_BEHIND 2


/*
 * A heartbeat at `now` on a busy vCPU. A gap since the last beat longer
 * than `gap_ns` (twice the beat period) means the vCPU was switched off
 * in between (its beats come every beat period while it runs): that ends
 * an active stretch and was an inactive episode. Returns whether it saw
 * one. The episode surely lasted from the missed beat's due time (one
 * period after the last) to now; that much is added to inactive_seen_ns
 * (the vCPU may have run a little past its last beat, so the whole gap
 * would take active time out too).
 */
static inline int vs_beat(struct vcpu_live *l, u64 now, u64 gap_ns)
{
	int episode = 0;

	if (l->last_beat_ns && now > l->last_beat_ns + gap_ns) {
		if (l->last_beat_ns > l->active_since_ns) {
			u64 stretch = l->last_beat_ns - l->active_since_ns;

			l->active_mean_ns = vs_ewma(l->active_mean_ns, stretch);
			l->active_low_ns = vs_low_water(l->active_low_ns, stretch);
			if (l->stretch_whole)
				l->whole_low_ns =
					vs_low_water(l->whole_low_ns, stretch);
		}
		l->inactive_mean_ns = vs_ewma(l->inactive_mean_ns,
					      now - l->last_beat_ns);
		l->gaps++;
		l->inactive_seen_ns += now - l->last_beat_ns - gap_ns / 2;
		l->active_since_ns = now;
		l->stretch_whole = 1;
		episode = 1;
	} else if (l->last_beat_ns == 0) {
		l->active_since_ns = now;
		l->stretch_whole = 0;
	}
	l->last_beat_ns = now;
	return episode;
}

/*
 * Whether a vCPU is active now with time left for a task that runs
 * `need_ns`: its last beat is fresh and its typical active stretch has
 * at least that much to go, so the task starts at once and likely
 * finishes before the next switch-off (BVS's state check: the paper's
 * "became active recently"). A vCPU with no rhythm seen yet counts as
 * fresh while its beats are.
 */
static inline int vs_fresh_active(const struct vcpu_live *l, u64 now,
				  u64 gap_ns, u64 need_ns)
{
	u64 so_far;

	if (l->last_beat_ns == 0 || now > l->last_beat_ns + gap_ns ||
	    now < l->active_since_ns)
		return 0;
	if (l->active_mean_ns == 0)
		return 1;
	so_far = now - l->active_since_ns;
	return so_far + need_ns <= l->active_mean_ns;
}

/*
 * BVS's preference among the vCPUs a latency-sensitive task may wake on,
 * lower first (VS_BVS_NONE: not a BVS choice). Low-latency vCPUs come
 * first: idle; running only SCHED_IDLE work and active with time left
 * (fresh); then a high-latency vCPU in that fresh state (active now, the
 * task will likely finish before its longer switch-off); then waiting
 * behind a short latency-sensitive task on a low-latency vCPU (a wait of
 * about its run, under half a millisecond); last, SCHED_IDLE work on a
 * low-latency vCPU that is not fresh (a wait of one short episode at
 * most). Without the state check every vCPU running SCHED_IDLE work
 * counts as fresh, and high-latency ones are never chosen.
 */
enum vs_bvs_rank {
	VS_BVS_IDLE = 1,
	VS_BVS_IDLE_POLICY_FRESH,
	VS_BVS_FAR_FRESH,
	VS_BVS_BEHIND_SHORT,
	VS_BVS_IDLE_POLICY_STALE,
	VS_BVS_NONE,
};

static inline int vs_bvs_rank(int low_latency, int idle, int idle_policy,
			      int fresh, int behind_short, int state_check)
{
	if (!state_check)
		fresh = 1;
	if (low_latency) {
		if (idle)
			return VS_BVS_IDLE;
		if (idle_policy && fresh)
			return VS_BVS_IDLE_POLICY_FRESH;
		if (behind_short)
			return VS_BVS_BEHIND_SHORT;
		if (idle_policy)
			return VS_BVS_IDLE_POLICY_STALE;
		return VS_BVS_NONE;
	}
	if (idle_policy && fresh && state_check)
		return VS_BVS_FAR_FRESH;
	return VS_BVS_NONE;
}

/*
 * Whether BVS keeps its choice of waiting behind a short task on a
 * low-latency vCPU. While some vCPU the task may use is idle, only when
 * that short task is the waker itself, on its own vCPU (`waker_is_it`):
 * the waker is about to sleep or finish, so the wait is short and sure,
 * whereas behind another task it is a guess. Measured in the lab's BVS
 * layout at the benchmark's load, eight guests: p95 1.15x --no-bvs's
 * (median) against 1.065x with every such wait kept, ahead in 6 of 8;
 * the light-load share on the low-latency vCPU unchanged (88%). Never
 * waiting while a vCPU is idle undid BVS at light load (42% against 80%).
 */
static inline int vs_bvs_keep_behind_short(int idle_elsewhere, int waker_is_it)
{
	return !idle_elsewhere || waker_is_it;
}

/*
 * Whether a busy vCPU is about to be switched off (IVH's trigger): it has
 * shown a rhythm (at least two episodes) and its current active stretch
 * is within `margin_ns` of its short ones' length (the low-water mark).
 */
static inline int vs_about_to_stall(const struct vcpu_live *l, u64 now,
				    u64 margin_ns)
{
	if (l->gaps < 2 || l->active_low_ns == 0 || now < l->active_since_ns)
		return 0;
	return now - l->active_since_ns + margin_ns >= l->active_low_ns;
}

/*
 * When a busy vCPU's next switch-off is predicted (the channel's
 * `switch_off_ns`, I-Spinlock's end of quantum): its current active
 * stretch reaching the shortest whole stretch seen (the low-water mark,
 * so the prediction errs early: a lock not taken costs a wait, a lock
 * held across a switch-off costs every waiter the whole episode). Whole
 * stretches only, and only in one: a stretch counted from when the beats
 * (re)started, after the vCPU idled or ran a task that asked for none,
 * began at an unknown point of the host's period, and would drag the
 * mark down and the predictions early. 0 when nothing is predicted: no
 * whole stretch measured yet, the current one not whole, or no fresh beat.
 */
static inline u64 vs_predicted_switch_off(const struct vcpu_live *l, u64 now,
					  u64 gap_ns)
{
	if (!l->stretch_whole || l->whole_low_ns == 0 || l->last_beat_ns == 0 ||
	    now > l->last_beat_ns + gap_ns || now < l->active_since_ns)
		return 0;
	return l->active_since_ns + l->whole_low_ns;
}

/*
 * Whether IVH may move a task to the idle vCPU it chose at once, without
 * the pre-wake hand-shake: the target has been idle (halted) for at least
 * one of the source's rhythms (`rhythm_ns`: its mean active stretch plus
 * its mean episode). Whatever share of its host CPU the target gets per
 * rhythm is then unused, so it runs the task as soon as it is woken: its
 * activity is known without asking. A target idle only for a moment may
 * have used its time already and be switched off within a millisecond;
 * for it the hand-shake stays. Never without a rhythm (0).
 * Measured in the lab's IVH layout (runs of 2026-11-24 and 26, recorded
 * in 834feea): the hand-shake
 * itself, two vCPU wake-ups and a pre-emption under TCG, made one thread
 * 1.06-1.25x faster where moving at once made it 1.44-1.52x.
 */
static inline int vs_ivh_target_rested(u64 idle_since_ns, u64 now,
				       u64 rhythm_ns)
{
	return rhythm_ns != 0 && idle_since_ns != 0 && now >= idle_since_ns &&
	       now - idle_since_ns >= rhythm_ns;
}

/*
 * A vCPU's rhythm (one active stretch and one inactive episode) as the
 * probers' model gives it: the mean episode over the share of time the
 * vCPU is not available (a vCPU capped at 50% with 5 ms episodes: 10 ms).
 * 0 when the model knows no episode or no loss.
 */
static inline u64 vs_model_rhythm_ns(u32 episode_mean_us, u32 available_permille)
{
	if (episode_mean_us == 0 || available_permille == 0 ||
	    available_permille >= 1000)
		return 0;
	return (u64)episode_mean_us * 1000 * 1000 / (1000 - available_permille);
}

/*
 * Whether the VM's idle vCPUs offer more time than its busy ones lose
 * (each vCPU available `available_permille` of the time, as the source
 * is): IVH's tick rule then moves a task early, before its vCPU's
 * switch-off, leaving part of that vCPU's time unused, and there is time
 * to spare. Without a surplus (two CPU-bound threads on four vCPUs capped
 * at 50%: the idle two offer exactly what the busy two lose) every unused
 * quantum is lost, and the heartbeat's prediction, which moves a task
 * only at the end of its vCPU's stretch, wastes none (in the IVH layout
 * one run of three read 1.12x the default against 1.04x with the tick
 * rule; the other two about the same). Every vCPU is taken as available
 * as the source: a VM whose vCPUs differ is approximated.
 */
static inline int vs_ivh_surplus(u32 idle, u32 busy, u32 available_permille)
{
	if (available_permille >= 1000)
		return 0;
	return (u64)idle * available_permille >
	       (u64)busy * (1000 - available_permille);
}

/*
 * Whether the VM has a vCPU to spare for IVH: fewer normal tasks want a
 * vCPU (running or queued) than there are visible vCPUs. IVH harvests
 * vCPUs nothing else needs; with a task for every vCPU, a vCPU idle for a
 * moment is one a move or a short wait has just emptied, and moving into
 * it only hands the stall to the task that comes back (four CPU-bound
 * threads on the IVH layout's four capped vCPUs: 56-67 moves per run,
 * 0.88-0.96x the default against 0.97-1.04x without IVH).
 */
static inline int vs_ivh_vcpu_to_spare(u32 wanting, u32 visible)
{
	return wanting < visible;
}

/*
 * Whether a step of IVH's hand-shake stamped at `stamp_ns` is still
 * fresh at `now`: within `limit_ns` (one gap threshold). Later, one side
 * was switched off in between and the move would no longer help.
 */
static inline int vs_handshake_fresh(u64 stamp_ns, u64 now, u64 limit_ns)
{
	return stamp_ns != 0 && now >= stamp_ns && now - stamp_ns <= limit_ns;
}

/*
 * Consolidation (Gleaner, consolidate.bpf.h). A task that runs less than
 * this per wake-up gains less from a vCPU of its own than waking an idle
 * vCPU costs: about three idle-vCPU wake-ups in the lab (81-91 us under
 * TCG, measured as Gleaner's Table 1) and seven on a KVM host (37 us,
 * Gleaner's Table 1). Measured in a 2-vCPU lab guest, a 4-thread barrier
 * whose threads ran about 10 us per round finished in 0.13 s on one vCPU
 * against 0.21 s on two; at about 95 us per round two vCPUs won, 0.60 s
 * against 0.77 s.
 */
#define VS_SPREAD_RUN_NS 250000ull
/* Whether a task that must wait asks for another vCPU: it runs long per
 * wake-up (or has not woken often enough to tell, as BVS counts: a
 * CPU-bound thread never does). */
static inline int vs_long_runner(u64 avg_run_ns, u64 run_this_wake_ns, u32 wakes)
{
	return wakes < VS_BVS_MIN_WAKES || avg_run_ns >= VS_SPREAD_RUN_NS ||
	       run_this_wake_ns >= VS_SPREAD_RUN_NS;
}

/*
 * Which way the active set may try to move, by its utilisation over a
 * period (the normal tasks' run time over the active vCPUs' time).
 * Narrower, while it idles more than 10%: the idle time is what
 * consolidation would gather. Wider, only when it is saturated (95%).
 * Run time alone does not say that fewer vCPUs would do: under
 * emulation a 4-thread barrier read 52% busy on two vCPUs and still ran
 * 1.8x faster on one (the wake-ups across vCPUs are run time too), so a
 * move is a trial that the program's progress confirms (vs_trial_keeps).
 */
#define VS_NARROW_BELOW_PERCENT 90u
#define VS_SATURATED_PERCENT 95u
static inline int vs_may_narrow(u64 busy_ns, u32 active, u64 period_ns)
{
	return active > 1 &&
	       busy_ns * 100 < (u64)active * period_ns * VS_NARROW_BELOW_PERCENT;
}

static inline int vs_saturated(u64 busy_ns, u32 active, u64 period_ns)
{
	return active > 0 &&
	       busy_ns * 100 >= (u64)active * period_ns * VS_SATURATED_PERCENT;
}

/*
 * Whether a trial move of the active set is kept, by the normal tasks'
 * wake-ups over equal windows before and after it (a blocking program's
 * rounds, items or requests: its progress; a CPU-bound program widens by
 * vs_long_runner instead). A narrower set is kept unless progress fell
 * by more than 5%: it frees a vCPU for the host; a wider one only if it
 * gained 5%, or if no task woke at all before it (saturated by work that
 * never blocks, which a wider set serves). A proxy, and an imperfect one:
 * a pipeline stage may hand on more items per wake-up on more vCPUs, so
 * that the rate understates what a narrower set loses (docs/sched.md);
 * a mean wait to run, tried instead, undid every narrowing of the
 * barrier above, which ran 1.6x faster on one vCPU. The 5% margin is above the window-to-window scatter of a
 * steady barrier program in the lab (2-3%).
 */
#define VS_TRIAL_MARGIN_PERCENT 5u

/*
 * Whether two periods' progress agree within that margin: a trial starts
 * only from a steady rate. From a program's start-up, whose rate was
 * still climbing, a 4-stage pipeline that needs both vCPUs read as no
 * slower on one, and ran 1.57-1.60 s against 1.17-1.27 s without
 * consolidation; from steady rates, 1.24 s against 1.15 s.
 */
static inline int vs_rates_steady(u64 a, u64 b)
{
	return a * 100 <= b * (100 + VS_TRIAL_MARGIN_PERCENT) &&
	       b * 100 <= a * (100 + VS_TRIAL_MARGIN_PERCENT);
}

static inline int vs_trial_keeps(u64 before, u64 after, int narrowed)
{
	if (narrowed)
		return after * 100 >= before * (100 - VS_TRIAL_MARGIN_PERCENT);
	return after * 100 >= before * (100 + VS_TRIAL_MARGIN_PERCENT);
}

/*
 * The trials' course, period by period: the same for the scheduler's
 * timer (consolidate.bpf.h) and for consolidation without sched_ext
 * (`vsched run --consolidate`, crates/consolidate), which each measure a
 * period's progress and busy time their own way and move their own set.
 *
 * A trial compares VS_TRIAL_PERIODS (intf.h) periods of progress before the move
 * with as many after it, the period of the move itself left out (its
 * tasks are still settling): a set too wide is narrowed within about
 * half a second at 100 ms periods.
 */
/* How often consolidation reads its demand: 100 ms (Gleaner's daemon's
 * scale; no other period was tried). */
#define VS_CONSOLIDATE_PERIOD_NS 100000000ULL
/* Waits between trials: after a success, VS_TRIAL_PERIODS periods;
 * doubled at each failure, up to 10 s (a failed trial costs at most its
 * two periods in 10 s: 2%). */
#define VS_TRIAL_BACKOFF_MAX_NS 10000000000ULL

/*
 * One period's step: `progress` is the period's progress (the normal
 * tasks' wake-ups), `busy_ns` their run time on the `active` vCPUs,
 * `can_widen` whether a vCPU is left to give back, `now` the period's end.
 */
static inline int vs_trials_period(struct vs_trials *t, u64 progress,
				   u64 busy_ns, u32 active, int can_widen,
				   u64 now, u64 period_ns)
{
	int kept;

	if (!t->backoff_ns)
		t->backoff_ns = VS_TRIAL_PERIODS * period_ns;
	if (t->on_trial) {
		if (++t->age > 1)
			t->after += progress;
		if (t->age <= VS_TRIAL_PERIODS)
			return VS_TRIAL_NOTHING;
		kept = vs_trial_keeps(t->before, t->after, t->narrowed);
		if (kept)
			t->backoff_ns = VS_TRIAL_PERIODS * period_ns;
		else if (t->backoff_ns * 2 > VS_TRIAL_BACKOFF_MAX_NS)
			t->backoff_ns = VS_TRIAL_BACKOFF_MAX_NS;
		else
			t->backoff_ns *= 2;
		t->on_trial = 0;
		t->steady = 0;
		t->not_before_ns = now + t->backoff_ns;
		return kept ? VS_TRIAL_KEPT : VS_TRIAL_UNDO;
	}
	t->recent[0] = t->recent[1];
	t->recent[1] = progress;
	if (t->steady < VS_TRIAL_PERIODS) {
		t->steady++;
		return VS_TRIAL_NOTHING;
	}
	if (now < t->not_before_ns || !vs_rates_steady(t->recent[0], t->recent[1]))
		return VS_TRIAL_NOTHING;
	if (vs_may_narrow(busy_ns, active, period_ns))
		return VS_TRIAL_NARROW;
	if (can_widen && vs_saturated(busy_ns, active, period_ns))
		return VS_TRIAL_WIDEN;
	return VS_TRIAL_NOTHING;
}

/* The move vs_trials_period asked for was made: its trial begins. */
static inline void vs_trials_started(struct vs_trials *t, int narrowed)
{
	t->on_trial = 1;
	t->narrowed = narrowed;
	t->age = 0;
	t->after = 0;
	t->before = t->recent[0] + t->recent[1];
}

/* The set's demand changed outside the trials (a long runner widened
 * it): a trial's comparison is void, and the next waits for steady
 * periods. */
static inline void vs_trials_upset(struct vs_trials *t)
{
	t->on_trial = 0;
	t->steady = 0;
}

/*
 * The set was widened at once for threads that run long and had to wait
 * (either form: consolidate.bpf.h, crates/consolidate): the narrowing
 * that made them wait was wrong, so as after a failed trial the wait
 * before the next doubles. Upset alone let CPU-bound threads on two
 * vCPUs (read 80-90% busy under the emulator, so "idling") be narrowed
 * and widened again every 0.4 s in the lab.
 */
static inline void vs_trials_overruled(struct vs_trials *t, u64 now,
				       u64 period_ns)
{
	vs_trials_upset(t);
	if (!t->backoff_ns)
		t->backoff_ns = VS_TRIAL_PERIODS * period_ns;
	else if (t->backoff_ns * 2 > VS_TRIAL_BACKOFF_MAX_NS)
		t->backoff_ns = VS_TRIAL_BACKOFF_MAX_NS;
	else
		t->backoff_ns *= 2;
	t->not_before_ns = now + t->backoff_ns;
}

/*
 * Which of two vCPUs consolidation gives up first (parks), `a` against
 * the candidate `b` so far: the weaker by capacity; but between two whose
 * capacities are within the keep-prev margin of each other (readings of
 * equally fast vCPUs differ by that much), the one whose inactive
 * episodes are not among the VM's shortest. Every thread of a
 * consolidated program waits out each switch-off of the vCPUs it keeps,
 * so the set keeps those that come back soonest; capacity alone cannot
 * tell a vCPU switched off 1 ms in every 5 from one switched off 10 ms in
 * every 50. The margin is placement's own "clearly stronger" one, and a
 * narrowing onto the slower of two near equals is still a trial: kept
 * only if the program's progress holds (vs_trial_keeps). Equal on both:
 * `a` (the scan's later vCPU: vCPU 0 takes the kernel's boot-time work
 * and stays). `by_episodes` 0: capacity alone.
 */
static inline int vs_episodes_decide(u32 score_a, int short_a, u32 score_b,
				     int short_b, int by_episodes)
{
	return by_episodes && !short_a != !short_b &&
	       vs_keep_prev(score_a, score_b) && vs_keep_prev(score_b, score_a);
}

static inline int vs_park_rather(u32 score_a, int short_a, u32 score_b,
				 int short_b, int by_episodes)
{
	if (vs_episodes_decide(score_a, short_a, score_b, short_b, by_episodes))
		return !short_a;
	return score_a <= score_b;
}

/* The other way: which parked vCPU consolidation gives back first, `a`
 * against `b`: the stronger, or between near equals the one with short
 * episodes; equal on both, `b` (the scan's earlier vCPU). */
static inline int vs_unpark_rather(u32 score_a, int short_a, u32 score_b,
				   int short_b, int by_episodes)
{
	if (vs_episodes_decide(score_a, short_a, score_b, short_b, by_episodes))
		return !!short_a;
	return score_a > score_b;
}

/*
 * The kernel's word first: of two vCPUs of which its preferred-CPU mask
 * lists one only (steal-time CPU folding; a kernel without the mask lists
 * none, and this never decides), the other is parked first and given
 * back last, whatever the probers measured. The kernel writes the mask
 * from the host's steal time, which it reads at every tick; the probers
 * see the same vCPU slow only after a probe step, and under a folding
 * kernel its own normal class has already left it. `preferred_*`: the
 * vCPU is in the mask; the rest as vs_park_rather.
 */
static inline int vs_park_first(int preferred_a, u32 score_a, int short_a,
				int preferred_b, u32 score_b, int short_b,
				int by_episodes)
{
	if (!preferred_a != !preferred_b)
		return !preferred_a;
	return vs_park_rather(score_a, short_a, score_b, short_b, by_episodes);
}

/* The other way, as vs_unpark_rather: the preferred one is given back
 * first. */
static inline int vs_unpark_first(int preferred_a, u32 score_a, int short_a,
				  int preferred_b, u32 score_b, int short_b,
				  int by_episodes)
{
	if (!preferred_a != !preferred_b)
		return !!preferred_a;
	return vs_unpark_rather(score_a, short_a, score_b, short_b, by_episodes);
}

/*
 * The kernel's preferred-CPU mask changed under a narrowed set: the
 * active vCPU to park first is one the mask leaves out while the parked
 * vCPU to give back first is one it lists. The two are swapped at once,
 * not at the next trial: a set that stays narrow holds no trial (it is
 * steady, neither idling nor saturated), and after a failed one the wait
 * doubles up to seconds. `active_preferred`: the mask lists the active
 * vCPU vs_park_first chose; `parked_preferred`: it lists the parked one
 * vs_unpark_first chose. Without a mask neither is listed: never.
 */
static inline int vs_swap_for_preference(int active_preferred,
					 int parked_preferred)
{
	return !active_preferred && parked_preferred;
}

/*
 * Virtual blocking through the channel (channel.bpf.h): how long dispatch
 * may pass over a task that marked itself waiting (or that the spin
 * detector marked spinning, spinners.bpf.h), counted from when it last
 * stopped running. The bound makes a mark a hint: a mark left set
 * for ever (a bug, or a lie) costs its task priority, never its turn, so
 * it cannot starve and sched_ext's 30 s watchdog never sees it. 20 ms is
 * several slices (3 ms), and hundreds of hand-offs of a program that
 * waits for its own threads (a barrier round of the lab's sync benchmark
 * takes about 50 us under TCG).
 */
#define VS_MARK_SKIP_NS 20000000ULL
/*
 * Tasks dispatch looks at in a vCPU's queue for one that is not marked:
 * bounds a dispatch's work (each look is a step of a DSQ iterator) and
 * covers the 4x oversubscription the runtime is measured at (8 threads on
 * 2 vCPUs: four to a queue). Past it, the queue's head runs, marked or
 * not.
 */
#define VS_MARK_SCAN 8u

/* Whether dispatch passes over a task whose channel slot says it is
 * `marked` waiting and that last stopped running at `stopped_ns`. */
static inline int vs_passes_over_marked(int marked, u64 stopped_ns, u64 now_ns)
{
	return marked && now_ns - stopped_ns < VS_MARK_SKIP_NS;
}

#endif /* VSCHED_POLICY_H */
