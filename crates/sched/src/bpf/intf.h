/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Definitions shared by the BPF scheduler and its Rust loader (bindgen turns
 * this file into bpf_intf.rs): sizes, queue ids, the per-vCPU model that user
 * space writes, and the statistics the BPF side counts.
 */
#ifndef VSCHED_INTF_H
#define VSCHED_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
#endif

enum vs_consts {
	/*
	 * vCPUs the scheduler handles. Placement scans every vCPU on each
	 * wake-up, which is cheap for the small and medium VMs vsched is for
	 * and bounds the verifier's loops; the loader refuses larger VMs.
	 */
	VS_MAX_CPUS = 64,
	/* Dispatch queue of normal tasks (weighted virtual time). */
	VS_DSQ_NORMAL = 0,
	/* Dispatch queue of SCHED_IDLE tasks: consumed only when no normal
	 * task waits, and the only queue a hidden vCPU consumes. */
	VS_DSQ_IDLE = 1,
	/* SCHED_IDLE tasks bound to one vCPU (the probers' light threads)
	 * wait in that vCPU's own queue, id VS_DSQ_IDLE_PINNED + cpu: in the
	 * shared one they sat behind another vCPU's pinned task while their
	 * own vCPU went idle (measured: the light prober ran 15% of its
	 * window on an idle vCPU). */
	VS_DSQ_IDLE_PINNED = 16,
	/* Each vCPU's queue of normal tasks, id VS_DSQ_NORMAL_ON + cpu
	 * (queue.bpf.h; VS_DSQ_NORMAL serves the FIFO reference and the
	 * --shared-queue ablation). */
	VS_DSQ_NORMAL_ON = VS_DSQ_IDLE_PINNED + VS_MAX_CPUS,
};

/* What the model says about a vCPU besides its numbers (vcpu_model.flags). */
enum vs_vcpu_flags {
	/* Among the VM's shortest inactive episodes (or none): BVS places
	 * latency-sensitive tasks here first. */
	VS_VCPU_LOW_LATENCY = 1 << 0,
	/* Listed in the kernel's preferred-CPU mask (steal-time CPU
	 * folding; preferred.rs), where the kernel has one: consolidation
	 * parks the vCPUs left out of it first. No vCPU has the bit on a
	 * kernel without the mask, which makes them all equal. */
	VS_VCPU_PREFERRED = 1 << 1,
};

/* Why RWC hides a vCPU from normal tasks (bits of vcpu_model.hidden). */
enum vs_hidden_why {
	VS_HIDDEN_STRAGGLER = 1 << 0,
	VS_HIDDEN_STACKED = 1 << 1,
};

/*
 * What vsched's probers last measured about one vCPU. Written by user space
 * (one map entry per vCPU) after every probe report; read by placement.
 * Zero everywhere means "not measured yet": every vCPU is then equal.
 */
struct vcpu_model {
	/* Capacity relative to the strongest vCPU, 1..1024 (0: unknown). */
	u32 capacity;
	/* Non-zero (vs_hidden_why bits): RWC keeps normal tasks off it. */
	u32 hidden;
	/* Mean inactive-episode length in µs (0: none seen). */
	u32 episode_mean_us;
	/* Share of time the vCPU was available, in permille (0: unknown). */
	u32 available_permille;
	/* vs_vcpu_flags bits. */
	u32 flags;
	/* Bit n set: vCPU n shares a host CPU with this one (the probers'
	 * stacking; VS_MAX_CPUS is 64). Two halves, so that the struct has
	 * no padding for the loader to reproduce. */
	u32 stack_mates_lo;
	u32 stack_mates_hi;
};

/*
 * What the scheduler sees of one vCPU as it happens, kept by that vCPU's
 * own callbacks (tick, heartbeat timer, idle transitions) and read by the
 * others. A gap between two heartbeats of a busy vCPU longer than the gap
 * threshold is an inactive episode: the host ran something else.
 */
struct vcpu_live {
	/* Last heartbeat while busy (0: idle, so no beats are expected). */
	u64 last_beat_ns;
	/* Start of the current active stretch (after an episode or a wake-up). */
	u64 active_since_ns;
	/* Moving averages of completed active stretches and of episodes, and
	 * the stretches' low-water mark (policy.h's vs_low_water). */
	u64 active_mean_ns;
	u64 inactive_mean_ns;
	u64 active_low_ns;
	/* The low-water mark of whole stretches only: those that began with
	 * an episode (the vCPU coming back), not with the beats starting,
	 * whose start is only when the heartbeat began to look. The
	 * channel's switch-off prediction reads it (policy.h
	 * vs_predicted_switch_off); `stretch_whole`: the current stretch
	 * began with an episode. */
	u64 whole_low_ns;
	/* Episodes the heartbeat saw, and the inactive time they surely
	 * took (policy.h's vs_beat): a task's wall-clock run on this vCPU
	 * less what this grew by meanwhile is the time it really ran. */
	u64 gaps;
	u64 inactive_seen_ns;
	/* The task running now: pid (0: none), since when, and what it is. */
	u64 curr_since_ns;
	u32 curr_pid;
	u32 curr_idle_policy;
	u32 curr_movable;
	/* The task running now is latency-sensitive (BVS's view). */
	u32 curr_short;
	/* The heartbeat timer is armed. */
	u32 beating;
	/* IVH, on the target: a source asked it to take its task (pre-wake). */
	u64 ivh_req_ns;
	u32 ivh_req_from;
	u32 ivh_req_pid;
	/* IVH, on the source: move now to this target (it answered the
	 * pre-wake, or had rested: no answer needed). */
	u64 ivh_go_ns;
	u32 ivh_go_to;
	u32 ivh_go_pid;
	/* IVH, on the source: no new attempt before this time, and its
	 * episode count when it asked (an episode since: the task stalled). */
	u64 ivh_quiet_until_ns;
	u64 ivh_asked_gaps;
	/* When the vCPU last went idle (0: busy). */
	u64 idle_since_ns;
	/* Consolidation's demand: normal tasks' run time here not yet
	 * counted by its period timer, and when the normal task running now
	 * started or was last counted (0: none runs). */
	u64 normal_busy_ns;
	u64 normal_run_start_ns;
	/* Consolidation parked this vCPU: no normal task is placed here. */
	u32 parked;
	/* The current stretch began with an episode (see whole_low_ns). */
	u32 stretch_whole;
	/* The task running now asked the channel for its run (its slot's
	 * `wants_run`, channel.bpf.h): its vCPU's heartbeat publishes the
	 * predicted switch-off to it. */
	u32 curr_channel;
};

/*
 * Consolidation's trials (policy.h, vs_trials_period): their state, kept
 * by the scheduler's timer in a map and by `vsched run --consolidate` in
 * user space, and what a period asks of its caller.
 */
enum vs_trial_consts {
	/* Periods of progress a trial compares before and after its move. */
	VS_TRIAL_PERIODS = 2,
};

struct vs_trials {
	/* A move is on trial, and which way. */
	u32 on_trial;
	u32 narrowed;
	/* Periods since the move. */
	u32 age;
	/* Periods seen since the last trial or upset (vs_trials_upset). */
	u32 steady;
	/* Progress over the periods before the move, and so far after it. */
	u64 before;
	u64 after;
	/* The last periods' progress, oldest first. */
	u64 recent[VS_TRIAL_PERIODS];
	u64 not_before_ns;
	u64 backoff_ns;
};

enum vs_trial_step {
	VS_TRIAL_NOTHING = 0,
	/* Try a set one vCPU narrower, or wider; then vs_trials_started. */
	VS_TRIAL_NARROW = 1,
	VS_TRIAL_WIDEN = 2,
	/* The trial's move stays. */
	VS_TRIAL_KEPT = 3,
	/* The trial's move is to be undone. */
	VS_TRIAL_UNDO = 4,
};

/*
 * The channel between vsched's runtime (`vsched exec`) and the scheduler:
 * one memory-mapped array map (BPF_F_MMAPABLE, one entry: struct
 * vs_channel), pinned by the loader at /sys/fs/bpf/vsched/channel
 * (crates/sched/src/channel.rs) and mapped by the runtime
 * (crates/sync/src/channel.rs). No system call on either side after the
 * mapping: plain loads and stores. The Rust mirror of these structs
 * (crates/os/src/channel.rs) is checked against the bindings of this
 * file (crates/sched/src/channel.rs, its test).
 *
 * Layout version 3 (version 1 had no fields written by the scheduler
 * in the slots, version 2 no `spinning`). A change of any field's
 * meaning or offset raises VS_CHANNEL_VERSION; the runtime and the spin
 * detector use only the version they know.
 */
enum vs_channel_consts {
	/* "vsch": a mapping that does not start with it is not a channel. */
	VS_CHANNEL_MAGIC = 0x68637376,
	VS_CHANNEL_VERSION = 3,
	/*
	 * Slots: a thread uses slot tid % VS_CHANNEL_SLOTS, if no live
	 * thread holds it. 4096 slots of 64 bytes: 256 KiB, one cache line
	 * per thread (no false sharing between neighbours' stores), and
	 * collisions rare for the few hundred threads a VM's programs run
	 * (a colliding thread goes without the channel, as without the
	 * scheduler). A power of two: the index is a mask, which the
	 * verifier bounds.
	 */
	VS_CHANNEL_SLOTS = 4096,
};

/* The first 64 bytes: what the scheduler says about the channel. */
struct vs_channel_header {
	/* VS_CHANNEL_MAGIC and VS_CHANNEL_VERSION, written by the scheduler
	 * when it is enabled. */
	u32 magic;
	u32 version;
	/* VS_CHANNEL_SLOTS. */
	u32 slots;
	/* Non-zero while the scheduler that reads this channel runs: it is
	 * cleared when sched_ext disables it, so that a runtime holding an
	 * old mapping stops marking. */
	u32 live;
	/* Slots marked `waiting` or `spinning` now (each mark counts once),
	 * kept by whoever sets or clears a mark (an exchange tells which
	 * store changed it): dispatch looks for marked tasks only while it
	 * is not 0. */
	u32 marked;
	u32 reserved[11];
};

/*
 * One thread's state: `tid`, `waiting` and `wants_run` written by the
 * thread itself (except where said), `spinning` by the spin detector, the
 * rest by the scheduler for the thread to read.
 */
struct vs_channel_slot {
	/* The owner's thread id in the initial pid namespace (0: free).
	 * Claimed by the thread with a compare-and-swap; freed by it, or by
	 * the scheduler when the thread exits. The scheduler reads the rest
	 * of the slot only for the task whose pid this is. */
	u32 tid;
	/* Virtual blocking: non-zero while the thread waits for another
	 * thread of its program and would rather not run. Set by the
	 * waiter, cleared by its waker (or by the waiter when its wait
	 * ends). A hint: the scheduler runs a marked task when nothing
	 * unmarked waits on its vCPU, and never leaves it unrun for more
	 * than VS_MARK_SKIP_NS (policy.h). */
	u32 waiting;
	/* Written by the scheduler while the thread holds the slot. The CPU
	 * it runs on plus one, 0 while it does not run. */
	u32 on_cpu;
	/* Switch-offs of its vCPU the heartbeat saw while the thread ran
	 * (a count; it moves at the first beat after the vCPU is back): a
	 * thread that reads it before and after a critical section knows
	 * whether the host stopped it inside. */
	u32 switch_offs;
	/* Monotonic time (CLOCK_MONOTONIC, ns) at which the thread's slice
	 * ends unless renewed (the tick may renew a slice in place, and then
	 * publishes the new end); 0 while it does not run, or when its slice
	 * has no end. */
	u64 slice_end_ns;
	/* Monotonic time at which its vCPU's next switch-off is predicted
	 * (the vCPU's active stretch so far against the shortest whole
	 * stretch seen, policy.h vs_predicted_switch_off); 0: none predicted (the
	 * vCPU is not seen to lose time, or its rhythm is not known yet).
	 * Refreshed at each heartbeat while the thread runs. I-Spinlock's
	 * "remaining time slice" is the earlier of the two. */
	u64 switch_off_ns;
	/* Written by the thread: non-zero if it reads the four fields above
	 * (spinlock admission, or statistics counting its holds). Only then
	 * does the scheduler write them, and keep the vCPU's heartbeat
	 * running for the prediction: a thread that only marks (virtual
	 * blocking) costs no timer interrupts. */
	u32 wants_run;
	/* Busy-waiting detection (../shared/seeds/oversubscription-hpdc21.txt
	 * §3.2): non-zero from when `vsched run --spin-detect` found the
	 * thread spinning until the scheduler next runs it. The detector
	 * claims the slot for the thread if it holds none (the scheduler
	 * frees it when the thread exits), sets the mark, and makes the
	 * thread's vCPU reschedule; dispatch passes over the marked thread as
	 * over a waiting one, and the scheduler clears the mark when it runs
	 * the thread again: one skip per detection, the paper's rule of
	 * letting every other runnable thread of the vCPU run once first. */
	u32 spinning;
	u32 reserved[6];
};

struct vs_channel {
	struct vs_channel_header header;
	struct vs_channel_slot slots[VS_CHANNEL_SLOTS];
};

/*
 * Counters the BPF side keeps per CPU (the loader sums them): enum
 * vs_stat, VS_STAT_<NAME> for each row of src/stats_table.rs and
 * VS_NR_STATS, written by build.rs into the build's output directory.
 */
#include "vs_stats.h"

#endif /* VSCHED_INTF_H */
