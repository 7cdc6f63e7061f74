// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF scheduler's decisions (src/bpf/policy.h), compiled for the host
 * and checked against the cases below. Run by tests/policy.rs.
 */
#include <stdint.h>
#include <stdio.h>

/* intf.h declares u32/s32/u64 itself outside BPF (no vmlinux.h here). */
#include "../../src/bpf/policy.h"

static int failures;

#define CHECK(cond)                                                     \
	do {                                                            \
		if (!(cond)) {                                          \
			printf("FAILED line %d: %s\n", __LINE__, #cond); \
			failures++;                                     \
		}                                                       \
	} while (0)

#define MS 1000000ull

/*
 * A vCPU on for 3 ms, off for 2 ms, beating every 0.5 ms while on: the
 * heartbeat learns both lengths and counts one episode per off-period.
 */
static void beat_rhythm(void)
{
	struct vcpu_live l = { 0 };
	uint64_t t = 10 * MS;
	int episodes = 0;

	for (int period = 0; period < 40; period++) {
		for (int b = 0; b <= 6; b++)
			episodes += vs_beat(&l, t + b * MS / 2, 1 * MS);
		t += 5 * MS; /* 3 ms on, then 2 ms off */
	}
	CHECK(episodes == 39); /* the first beat has nothing before it */
	CHECK(l.gaps == 39);
	CHECK(l.active_mean_ns > 29 * MS / 10 && l.active_mean_ns <= 3 * MS);
	CHECK(l.inactive_mean_ns >= 2 * MS && l.inactive_mean_ns < 21 * MS / 10);
	CHECK(l.active_low_ns == 3 * MS);
	CHECK(l.whole_low_ns == 3 * MS && l.stretch_whole);
	/* Each 2 ms gap surely held 1.5 ms off: the vCPU may have run up to
	 * the missed beat's due time, half a millisecond after the last. */
	CHECK(l.inactive_seen_ns == 39 * 3 * MS / 2);

	/* Beats closer than the threshold are no episode. */
	struct vcpu_live steady = { 0 };
	for (int b = 0; b < 100; b++)
		CHECK(!vs_beat(&steady, 10 * MS + b * MS / 2, 1 * MS));
	CHECK(steady.active_since_ns == 10 * MS && steady.active_mean_ns == 0);
}

/* A run's time less the inactive time its vCPU's heartbeat saw. */
static void active_run(void)
{
	CHECK(vs_active_run(300000, 0) == 300000);
	/* 1.3 ms of wall time across a 1 ms episode: 0.3 ms ran, short. */
	CHECK(vs_active_run(1300000, 1 * MS) == 300000);
	CHECK(vs_latency_sensitive(vs_short_share(0, 0, vs_active_run(1300000, 1 * MS)),
				   VS_BVS_MIN_WAKES));
	/* Never below zero (the episode began before this task ran). */
	CHECK(vs_active_run(200000, 1 * MS) == 0);
}

static void fresh_and_stalling(void)
{
	/* Active for 1 ms of a typical 4 ms stretch: fresh, not stalling. */
	struct vcpu_live l = {
		.last_beat_ns = 11 * MS, .active_since_ns = 10 * MS,
		.active_mean_ns = 4 * MS, .active_low_ns = 4 * MS, .gaps = 5,
	};
	CHECK(vs_fresh_active(&l, 11 * MS, 1 * MS, MS / 5));
	CHECK(vs_fresh_active(&l, 11 * MS, 1 * MS, 3 * MS)); /* just fits */
	CHECK(!vs_fresh_active(&l, 11 * MS, 1 * MS, 3 * MS + 1));
	CHECK(!vs_about_to_stall(&l, 11 * MS, 1 * MS));
	/* 3.9 ms in: no time left for 0.2 ms, within 1 ms of the end. */
	l.last_beat_ns = 13900000;
	CHECK(!vs_fresh_active(&l, 13900000, 1 * MS, MS / 5));
	CHECK(vs_about_to_stall(&l, 13900000, 1 * MS));
	/* A stale beat: not active now, whatever the stretch. */
	l.active_since_ns = 12900000;
	CHECK(!vs_fresh_active(&l, 15 * MS, 1 * MS, 0));
	/* Idle (no beats expected): never fresh. */
	struct vcpu_live idle = { 0 };
	CHECK(!vs_fresh_active(&idle, 15 * MS, 1 * MS, 0));
	/* No rhythm yet (fewer than two episodes): no stall predicted. */
	l.gaps = 1;
	CHECK(!vs_about_to_stall(&l, 13 * MS, 1 * MS));
	/* No whole stretch measured (whole_low_ns 0): no switch-off. */
	CHECK(vs_predicted_switch_off(&l, 13 * MS, 1 * MS) == 0);
}

/* The channel's switch-off prediction: the stretch's start plus the
 * shortest whole stretch, only in a whole stretch with fresh beats. */
static void switch_off_predicted_from_the_shortest_stretch(void)
{
	struct vcpu_live l = { .last_beat_ns = 11 * MS, .active_since_ns = 10 * MS,
			       .active_mean_ns = 4 * MS, .active_low_ns = 1 * MS,
			       .whole_low_ns = 3 * MS, .stretch_whole = 1,
			       .gaps = 5 };

	CHECK(vs_predicted_switch_off(&l, 11 * MS, 2 * MS) == 13 * MS);
	/* Past the prediction and still beating: still that time (the
	 * caller sees it passed, and the next episode moves it). */
	l.last_beat_ns = 14 * MS;
	CHECK(vs_predicted_switch_off(&l, 14 * MS, 2 * MS) == 13 * MS);
	/* Beats stale (the vCPU went idle or is off): nothing predicted. */
	CHECK(vs_predicted_switch_off(&l, 17 * MS, 2 * MS) == 0);
	/* A stretch from a restart of the beats: its start is unknown. */
	l.stretch_whole = 0;
	CHECK(vs_predicted_switch_off(&l, 14 * MS, 2 * MS) == 0);
}

/*
 * Regression (the channel's predictions came early: every admission wait
 * for a switch-off ran out): stretches counted from a restart of the
 * beats, shorter than the host's, set the IVH low-water mark but not the
 * whole-stretch one the channel predicts from.
 */
static void a_restarted_heartbeat_does_not_cut_the_whole_stretch_mark(void)
{
	struct vcpu_live l = { 0 };
	uint64_t t = 10 * MS;

	/* Three 3 ms stretches (beats every 0.5 ms, 7 ms off): the first
	 * from the beats starting, the second whole and measured. */
	for (int period = 0; period < 3; period++) {
		for (int b = 0; b <= 6; b++)
			vs_beat(&l, t + b * MS / 2, 1 * MS);
		t += 10 * MS;
	}
	CHECK(l.whole_low_ns == 3 * MS);
	/* The beats stop (idle) and start 2.5 ms into a stretch. */
	l.last_beat_ns = 0;
	for (int b = 5; b <= 6; b++)
		vs_beat(&l, t + b * MS / 2, 1 * MS);
	CHECK(!l.stretch_whole);
	t += 10 * MS;
	vs_beat(&l, t, 1 * MS); /* back: that half stretch ends */
	CHECK(l.active_low_ns == MS / 2);
	CHECK(l.whole_low_ns == 3 * MS);
	CHECK(l.stretch_whole);
	CHECK(vs_predicted_switch_off(&l, t, 1 * MS) == t + 3 * MS);
}

/*
 * Regression (BVS's effect varied by machine): a 250 us request handler
 * whose every fourth run the host's 3 ms switch-off stretches stays
 * latency-sensitive; a task that mostly runs long does not become so.
 */
static void short_runs_interrupted_by_switch_offs(void)
{
	u32 share = 0, wakes = 0;
	u64 avg = 0;
	int i;

	for (i = 0; i < 64; i++, wakes++) {
		u64 run = i % 4 == 3 ? 3250000 : 250000;

		share = vs_short_share(share, wakes, run);
		avg = vs_ewma(avg, run);
		if (wakes + 1 >= VS_BVS_MIN_WAKES)
			CHECK(vs_latency_sensitive(share, wakes + 1));
	}
	/* What the average made of the same runs: "long". */
	CHECK(avg > VS_BVS_SHORT_RUN_NS);
	for (i = 0, share = 0, wakes = 0; i < 64; i++, wakes++)
		share = vs_short_share(share, wakes, i % 4 == 3 ? 250000 : 2000000);
	CHECK(!vs_latency_sensitive(share, wakes));
}

/*
 * The trials' course at 100 ms periods: two steady periods, then a
 * narrowing; its own period left out, two more periods judge it.
 */
static void trial_course(void)
{
	const u64 period = 100 * MS;
	struct vs_trials t = { 0 };
	u64 now = 0;

	/* Two periods to learn the rate: nothing yet, even half idle. */
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	/* Steady and idling: narrow. */
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NARROW);
	vs_trials_started(&t, 1);
	CHECK(t.before == 2000);
	/* The move's period is left out; two periods after it judge. */
	CHECK(vs_trials_period(&t, 10, 90 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 900, 90 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 900, 90 * MS, 1, 1, now += period, period) == VS_TRIAL_UNDO);
	/* -10%: undone, and the next trial waits twice as long (400 ms). */
	CHECK(t.backoff_ns == 4 * period);
	CHECK(t.not_before_ns == now + 4 * period);
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 1000, 100 * MS, 2, 0, now += period, period) == VS_TRIAL_NARROW);
	vs_trials_started(&t, 1);
	CHECK(vs_trials_period(&t, 990, 95 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 990, 95 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 990, 95 * MS, 1, 1, now += period, period) == VS_TRIAL_KEPT);
	/* Kept: the wait is back to two periods. */
	CHECK(t.backoff_ns == 2 * period);
	/* Saturated with a vCPU to give back: widen, once two periods
	 * have shown a steady rate again. */
	CHECK(vs_trials_period(&t, 990, 98 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 990, 98 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 990, 98 * MS, 1, 1, now += period, period) == VS_TRIAL_WIDEN);
	vs_trials_started(&t, 0);
	/* An upset (a long runner widened the set) voids the trial. */
	vs_trials_upset(&t);
	CHECK(!t.on_trial);
	CHECK(vs_trials_period(&t, 990, 98 * MS, 1, 1, now += period, period) == VS_TRIAL_NOTHING);
	/* Climbing rates never start a trial. */
	CHECK(vs_trials_period(&t, 1200, 10 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	CHECK(vs_trials_period(&t, 1500, 10 * MS, 2, 0, now += period, period) == VS_TRIAL_NOTHING);
	/* Overruled (widened at once): void, and the wait doubles as after
	 * a failure. */
	t.backoff_ns = 2 * period;
	t.on_trial = 1;
	vs_trials_overruled(&t, now, period);
	CHECK(!t.on_trial && t.steady == 0);
	CHECK(t.backoff_ns == 4 * period && t.not_before_ns == now + 4 * period);
	/* Failures double the wait up to 10 s. */
	t.backoff_ns = 8000 * MS;
	t.on_trial = 1;
	t.narrowed = 1;
	t.age = VS_TRIAL_PERIODS;
	t.before = 1000;
	t.after = 0;
	CHECK(vs_trials_period(&t, 0, 0, 1, 1, now += period, period) == VS_TRIAL_UNDO);
	CHECK(t.backoff_ns == VS_TRIAL_BACKOFF_MAX_NS);
}

int main(void)
{
	struct vcpu_model unknown = { 0 };
	struct vcpu_model weak = { .capacity = 400 };
	struct vcpu_model hidden = { .capacity = 1024, .hidden = VS_HIDDEN_STACKED };

	/* RWC hides only when on. */
	CHECK(vs_visible(&weak, 1));
	CHECK(!vs_visible(&hidden, 1));
	CHECK(vs_visible(&hidden, 0));

	/* Unmeasured vCPUs count as full strength; capacity-blind is flat. */
	CHECK(vs_score(&unknown, 1) == 1024);
	CHECK(vs_score(&weak, 1) == 400);
	CHECK(vs_score(&weak, 0) == 1024);

	/* Stay on prev unless the best is more than a third stronger. */
	CHECK(vs_keep_prev(768, 1024));
	CHECK(!vs_keep_prev(767, 1024));
	CHECK(vs_keep_prev(1024, 1024));
	CHECK(!vs_keep_prev(512, 1024));

	/* IVH escapes to an equal or stronger vCPU, never a clearly weaker one. */
	CHECK(vs_ivh_target_ok(1024, 1024));
	CHECK(vs_ivh_target_ok(461, 1024));
	CHECK(vs_ivh_target_ok(1024, 768));
	CHECK(!vs_ivh_target_ok(1024, 461));

	/* Virtual time: nice 0 (weight 100) pays wall time; heavier pays less. */
	CHECK(vs_vtime_charge(3000000, 100) == 3000000);
	CHECK(vs_vtime_charge(3000000, 200) == 1500000);
	CHECK(vs_vtime_charge(1000, 0) == 100000); /* weight 0 treated as 1 */

	/* A sleeper is at most one slice behind the queue's clock. */
	CHECK(vs_queue_vtime(0, 100000000, 3000000) == 97000000);
	CHECK(vs_queue_vtime(99000000, 100000000, 3000000) == 99000000);
	CHECK(vs_queue_vtime(5, 1000, 3000000) == 5); /* clock below a slice */

	/* At a slice end, keep the vCPU unless a waiting task is owed it. */
	CHECK(vs_keeps_vcpu(100, 100));
	CHECK(vs_keeps_vcpu(99, 100));
	CHECK(!vs_keeps_vcpu(101, 100));

	/* A waiting task leaves its vCPU's queue only for one fewer tasks
	 * share: at equal loads it stays where its cache is warm. */
	CHECK(vs_queue_moves(2, 1));
	CHECK(vs_queue_moves(1, 0));
	CHECK(!vs_queue_moves(1, 1));
	CHECK(!vs_queue_moves(0, 0));
	CHECK(!vs_queue_moves(1, 2));

	/* A slice is renewed at the tick only where its end could only keep
	 * the task. */
	CHECK(vs_renews_slice(0, 1, 1, 0, 0, 0, 0));
	CHECK(!vs_renews_slice(1, 1, 1, 0, 0, 0, 0)); /* slice left: no end */
	CHECK(!vs_renews_slice(0, 0, 1, 0, 0, 0, 0)); /* SCHED_IDLE work */
	CHECK(!vs_renews_slice(0, 1, 0, 0, 0, 0, 0)); /* hidden, may go elsewhere: must move */
	CHECK(!vs_renews_slice(0, 1, 1, 1, 0, 0, 0)); /* a normal task waits */
	/* SCHED_IDLE work that merely waits is not counted (its idle cycles
	 * only; lab: sched_idle_work_gets_only_idle_cycles...): */
	CHECK(!vs_renews_slice(0, 1, 1, 0, 1, 0, 0)); /* starving idle work */
	CHECK(!vs_renews_slice(0, 1, 1, 0, 0, 1, 0)); /* an idle vCPU */
	CHECK(!vs_renews_slice(0, 1, 1, 0, 0, 0, 1)); /* IVH move pending */

	/* A yield keeps the slice where nothing else could take the vCPU;
	 * an idle vCPU elsewhere does not matter to it. */
	CHECK(vs_yield_keeps_slice(1, 1, 0, 0, 0));
	CHECK(!vs_yield_keeps_slice(0, 1, 0, 0, 0)); /* SCHED_IDLE work */
	CHECK(!vs_yield_keeps_slice(1, 0, 0, 0, 0)); /* hidden, may go elsewhere */
	CHECK(!vs_yield_keeps_slice(1, 1, 1, 0, 0)); /* a normal task waits */
	CHECK(!vs_yield_keeps_slice(1, 1, 0, 1, 0)); /* starving idle work */
	CHECK(!vs_yield_keeps_slice(1, 1, 0, 0, 1)); /* IVH move pending */

	/* Moving average: starts at the first sample, then moves by 1/8. */
	CHECK(vs_ewma(0, 800) == 800);
	CHECK(vs_ewma(800, 1600) == 900);
	/* Low-water mark: down at once, up by an eighth. */
	CHECK(vs_low_water(0, 5000) == 5000);
	CHECK(vs_low_water(5000, 3000) == 3000);
	CHECK(vs_low_water(3000, 11000) == 4000);

	/* Latency-sensitive: mostly short runs per wake-up, once enough
	 * were seen. */
	CHECK(vs_latency_sensitive(VS_SHORT_SHARE_ONE, 8));
	CHECK(!vs_latency_sensitive(VS_SHORT_SHARE_ONE, 7));
	CHECK(!vs_latency_sensitive(VS_SHORT_SHARE_ONE / 2, 100));
	short_runs_interrupted_by_switch_offs();

	beat_rhythm();
	active_run();
	fresh_and_stalling();
	switch_off_predicted_from_the_shortest_stretch();
	a_restarted_heartbeat_does_not_cut_the_whole_stretch_mark();

	/* BVS ranks: low-latency first, then fresh far ones, then waits. */
	CHECK(vs_bvs_rank(1, 1, 0, 0, 0, 1) == VS_BVS_IDLE);
	CHECK(vs_bvs_rank(1, 0, 1, 1, 0, 1) == VS_BVS_IDLE_POLICY_FRESH);
	CHECK(vs_bvs_rank(0, 0, 1, 1, 0, 1) == VS_BVS_FAR_FRESH);
	CHECK(vs_bvs_rank(1, 0, 0, 0, 1, 1) == VS_BVS_BEHIND_SHORT);
	CHECK(vs_bvs_rank(1, 0, 1, 0, 0, 1) == VS_BVS_IDLE_POLICY_STALE);
	CHECK(vs_bvs_rank(0, 1, 0, 0, 0, 1) == VS_BVS_NONE); /* far and idle: not BVS's */
	CHECK(vs_bvs_rank(1, 0, 0, 0, 0, 1) == VS_BVS_NONE); /* busy with normal work */
	CHECK(VS_BVS_IDLE < VS_BVS_IDLE_POLICY_FRESH &&
	      VS_BVS_FAR_FRESH < VS_BVS_BEHIND_SHORT &&
	      VS_BVS_BEHIND_SHORT < VS_BVS_IDLE_POLICY_STALE);
	/* Without the state check: any SCHED_IDLE low-latency vCPU is taken
	 * as fresh, and far ones never. */
	CHECK(vs_bvs_rank(1, 0, 1, 0, 0, 0) == VS_BVS_IDLE_POLICY_FRESH);
	CHECK(vs_bvs_rank(0, 0, 1, 1, 0, 0) == VS_BVS_NONE);
	/* Waiting behind a short task: always when no vCPU is idle; with
	 * one idle, only behind the waker itself. */
	CHECK(vs_bvs_keep_behind_short(0, 0));
	CHECK(vs_bvs_keep_behind_short(0, 1));
	CHECK(vs_bvs_keep_behind_short(1, 1));
	CHECK(!vs_bvs_keep_behind_short(1, 0));

	/* IVH's hand-shake: fresh within the limit, never when unstamped. */
	CHECK(vs_handshake_fresh(1000, 1500, 500));
	CHECK(!vs_handshake_fresh(1000, 1501, 500));
	CHECK(!vs_handshake_fresh(0, 10, 500));
	CHECK(!vs_handshake_fresh(2000, 1000, 500)); /* stamped by a later clock read */

	/* IVH skips the hand-shake only for a target idle a whole rhythm. */
	CHECK(vs_ivh_target_rested(1000, 11000, 10000));
	CHECK(!vs_ivh_target_rested(1000, 10999, 10000)); /* idle a moment less */
	CHECK(!vs_ivh_target_rested(1000, 50000, 0)); /* no rhythm known */
	CHECK(!vs_ivh_target_rested(0, 50000, 10000)); /* never went idle */
	CHECK(!vs_ivh_target_rested(60000, 50000, 10000)); /* later clock read */

	/* IVH's tick rule needs idle time beyond what busy vCPUs lose. */
	CHECK(vs_ivh_surplus(3, 1, 500));   /* one thread on four 50% vCPUs */
	CHECK(!vs_ivh_surplus(2, 2, 500));  /* two: exactly even */
	CHECK(!vs_ivh_surplus(0, 4, 500));  /* four: nothing idle */
	CHECK(vs_ivh_surplus(2, 2, 600));   /* idle 1.2 against busy 0.8 */
	CHECK(!vs_ivh_surplus(3, 1, 1000)); /* nothing lost: nothing to do */

	/* IVH moves only where a vCPU is left to spare. */
	CHECK(vs_ivh_vcpu_to_spare(1, 4));  /* one thread on four vCPUs */
	CHECK(vs_ivh_vcpu_to_spare(3, 4));  /* one thread has ended */
	CHECK(!vs_ivh_vcpu_to_spare(4, 4)); /* a thread for every vCPU */
	CHECK(!vs_ivh_vcpu_to_spare(5, 4)); /* oversubscribed */
	CHECK(!vs_ivh_vcpu_to_spare(0, 0)); /* everything hidden */

	/* The model's rhythm: mean episode over the unavailable share. */
	CHECK(vs_model_rhythm_ns(5000, 500) == 10 * MS); /* capped at 50% */
	CHECK(vs_model_rhythm_ns(9000, 100) == 10 * MS); /* a 10% straggler */
	CHECK(vs_model_rhythm_ns(0, 500) == 0);   /* no episode seen */
	CHECK(vs_model_rhythm_ns(5000, 0) == 0);  /* not measured */
	CHECK(vs_model_rhythm_ns(5000, 1000) == 0); /* loses no time */

	/* Consolidation: only long runs ask for another vCPU... */
	CHECK(vs_long_runner(0, 0, 0));               /* not known yet */
	CHECK(vs_long_runner(0, 0, 7));
	CHECK(vs_long_runner(0, 3 * MS, 8));          /* CPU-bound now */
	CHECK(vs_long_runner(VS_SPREAD_RUN_NS, 0, 8));
	CHECK(!vs_long_runner(10000, 10000, 8));      /* a barrier's 10 us */
	/* ... the set tries to narrow while it idles, to widen when full... */
	CHECK(vs_may_narrow(100 * MS, 2, 100 * MS));  /* 50% busy */
	CHECK(!vs_may_narrow(190 * MS, 2, 100 * MS)); /* 95% */
	CHECK(!vs_may_narrow(0, 1, 100 * MS));        /* never below one */
	CHECK(vs_saturated(96 * MS, 1, 100 * MS));
	CHECK(!vs_saturated(90 * MS, 1, 100 * MS));
	CHECK(!vs_saturated(0, 0, 100 * MS));
	/* ... and a trial stays if progress allows. */
	CHECK(vs_trial_keeps(1000, 960, 1));          /* narrower, -4% */
	CHECK(!vs_trial_keeps(1000, 940, 1));         /* narrower, -6% */
	CHECK(vs_trial_keeps(1000, 1060, 0));         /* wider, +6% */
	CHECK(!vs_trial_keeps(1000, 1040, 0));        /* wider, +4% */
	CHECK(!vs_trial_keeps(1000, 1000, 0));        /* wider, no gain */
	/* No wake-ups at all: saturated by work that never blocks, which
	 * a wider set serves; a narrower one changed nothing measurable. */
	CHECK(vs_trial_keeps(0, 0, 0));
	CHECK(vs_trial_keeps(0, 0, 1));
	/* ... started only from a steady rate. */
	CHECK(vs_rates_steady(1000, 1040));
	CHECK(vs_rates_steady(1040, 1000));
	CHECK(!vs_rates_steady(1000, 1100));          /* still climbing */
	CHECK(!vs_rates_steady(1100, 1000));
	CHECK(vs_rates_steady(0, 0));                 /* nothing blocks */
	CHECK(!vs_rates_steady(0, 100));

	trial_course();

	/* Virtual blocking: a marked task is passed over, but only for
	 * VS_MARK_SKIP_NS after it last ran; an unmarked one never. */
	CHECK(vs_passes_over_marked(1, 100 * MS, 100 * MS + 1));
	CHECK(vs_passes_over_marked(1, 100 * MS, 100 * MS + VS_MARK_SKIP_NS - 1));
	CHECK(!vs_passes_over_marked(1, 100 * MS, 100 * MS + VS_MARK_SKIP_NS));
	CHECK(!vs_passes_over_marked(0, 100 * MS, 100 * MS + 1));

	/* Which vCPU the set gives up: the weaker by capacity... */
	CHECK(vs_park_rather(500, 1, 1024, 0, 1));
	CHECK(!vs_park_rather(1024, 0, 500, 1, 1));
	/* ... but of near equals the one switched off longer, ... */
	CHECK(vs_park_rather(1024, 0, 950, 1, 1));
	CHECK(!vs_park_rather(950, 1, 1024, 0, 1));
	CHECK(vs_episodes_decide(1024, 0, 950, 1, 1));
	/* ... unless told capacity alone (the ablation) ... */
	CHECK(!vs_park_rather(1024, 0, 950, 1, 0));
	CHECK(!vs_episodes_decide(1024, 0, 950, 1, 0));
	/* ... and equals on both: the later one scanned. */
	CHECK(vs_park_rather(1024, 1, 1024, 1, 1));
	CHECK(!vs_episodes_decide(1024, 1, 1024, 1, 1));
	/* Given back first: the stronger, of near equals the short-episode
	 * one, of equals the earlier one. */
	CHECK(vs_unpark_rather(1024, 0, 500, 1, 1));
	CHECK(vs_unpark_rather(950, 1, 1024, 0, 1));
	CHECK(!vs_unpark_rather(950, 1, 1024, 0, 0));
	CHECK(!vs_unpark_rather(1024, 1, 1024, 1, 1));
	/* The kernel's preferred-CPU mask decides first: the vCPU it leaves
	 * out is parked even when it is the stronger or has the short
	 * episodes, and given back last; ... */
	CHECK(vs_park_first(0, 1024, 1, 1, 500, 0, 1));
	CHECK(!vs_park_first(1, 500, 0, 0, 1024, 1, 1));
	CHECK(!vs_unpark_first(0, 1024, 1, 1, 500, 0, 1));
	CHECK(vs_unpark_first(1, 500, 0, 0, 1024, 1, 1));
	/* ... and between two it treats alike (both listed, or no mask),
	 * the measured rules as before. */
	CHECK(vs_park_first(1, 500, 1, 1, 1024, 0, 1));
	CHECK(vs_park_first(0, 500, 1, 0, 1024, 0, 1));
	CHECK(vs_park_first(0, 1024, 0, 0, 950, 1, 1));
	CHECK(vs_unpark_first(0, 1024, 0, 0, 500, 1, 1));
	CHECK(!vs_unpark_first(1, 500, 1, 1, 1024, 0, 1));
	/* A changed mask swaps a parked vCPU it lists for an active one it
	 * leaves out, and nothing else does: both listed, neither (no
	 * mask), or the active one listed and the parked one not. */
	CHECK(vs_swap_for_preference(0, 1));
	CHECK(!vs_swap_for_preference(1, 1));
	CHECK(!vs_swap_for_preference(0, 0));
	CHECK(!vs_swap_for_preference(1, 0));
	/* The margin's edge: 768 is within a quarter of 1024, 767 not. */
	CHECK(vs_episodes_decide(1024, 0, 768, 1, 1));
	CHECK(!vs_episodes_decide(1024, 0, 767, 1, 1));
	/* Beyond it, capacity decides even against short episodes. */
	CHECK(vs_park_rather(767, 1, 1024, 0, 1));
	/* Equal capacity, different episodes: the episodes decide. */
	CHECK(vs_park_rather(1024, 0, 1024, 1, 1));
	CHECK(!vs_park_rather(1024, 1, 1024, 0, 1));

	if (failures)
		return 1;
	printf("policy: all checks passed\n");
	return 0;
}
