/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Spinner descheduling (../shared/seeds/oversubscription-hpdc21.txt
 * §3.2): a thread that `vsched run --spin-detect` found busy-waiting is
 * taken off its vCPU and passed over until the vCPU's other runnable
 * threads had their turn, since its wait cannot end while they do not
 * run.
 *
 * The detector marks the thread's channel slot `spinning` (intf.h) and
 * nudges it: a change of its scheduling that changes nothing (its
 * utilisation clamps set to what they are), for which the kernel stops
 * and restarts the running thread in place (main.bpf.c
 * restarts_in_place). At that restart a marked spinner's slice ends
 * (a kick). The tick does the same for a mark whose nudge came while the
 * thread was not running. Dispatch passes over the marked thread as over
 * a waiting one (channel.bpf.h dispatch_unmarked, bounded by
 * VS_MARK_SKIP_NS since it last ran), and its mark is cleared when it
 * next runs after another task ran on that vCPU (a restart in place is
 * not one): one skip per detection. A spinner that spins on is found
 * again within a sampling period and marked again.
 *
 * A mark is a hint like any other in the channel: it costs its thread
 * priority, never its turn. Only a thread marked while other normal work
 * waits for its vCPU is kicked: a spinner alone on its vCPU spins on (the
 * kernel's default would run it too).
 *
 * Included once by main.bpf.c, after channel.bpf.h and queue.bpf.h.
 */

/* `p`, running on `cpu`, is marked spinning and other normal work waits
 * for `cpu`: its slice should end now. */
static bool spinner_to_preempt(struct task_struct *p, s32 cpu)
{
	return mark_of(p) == VS_MARKED_SPINNING && normal_waiting_for(cpu);
}

/* `p` stops to be restarted in place (the detector's nudge among other
 * changes of its scheduling): a marked spinner with work waiting for its
 * vCPU is kicked off it. */
static void spinner_restarting(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	/* A slice already ended: a kick on its way. */
	if (!p->scx.slice || !spinner_to_preempt(p, cpu))
		return;
	scx_bpf_task_set_slice(p, 0);
	count(VS_STAT_SPINNERS_KICKED);
	scx_bpf_kick_cpu(cpu, VS_KICK_PREEMPT);
}

/* At the tick of `cpu`, running `p`: a marked spinner's slice ends (the
 * kernel checks the slice right after ops.tick). */
static void spinner_tick(struct task_struct *p, s32 cpu)
{
	if (!p->scx.slice || !spinner_to_preempt(p, cpu))
		return;
	if (scx_bpf_task_set_slice(p, 0))
		count(VS_STAT_SPINNERS_KICKED);
}

/* `p` runs on `l`'s vCPU: if another task ran there since `p` last did,
 * its spin mark has been served (it was passed over, or nothing else
 * wanted the vCPU) and is cleared. */
static void spinner_running(struct task_struct *p, struct vcpu_live *l)
{
	struct vs_channel *ch;
	struct vs_channel_slot *s;

	if (l->curr_pid == p->pid || !channel_enabled ||
	    !(ch = channel_get()) || !READ_ONCE(ch->header.marked) ||
	    !(s = slot_of(ch, p)))
		return;
	if (READ_ONCE(s->spinning) && __sync_lock_test_and_set(&s->spinning, 0)) {
		__sync_fetch_and_sub(&ch->header.marked, 1);
		count(VS_STAT_SPIN_MARKS_SERVED);
	}
}
