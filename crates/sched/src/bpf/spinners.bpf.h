/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Spinner descheduling (../shared/seeds/oversubscription-hpdc21.txt
 * §3.2): a thread that `vsched run --spin-detect` found busy-waiting is
 * taken off its vCPU and passed over until the vCPU's other runnable
 * threads had their turn, since its wait cannot end while they do not
 * run.
 *
 * The detector marks the thread's channel slot `spinning` (intf.h) and
 * changes the thread's nice level and back, which the kernel reports as
 * two set_weight calls: the first one that finds the thread running and
 * marked ends its slice at once (a kick). The tick does the same for a
 * mark whose kick was missed (the thread was between vCPUs). Dispatch
 * passes over the marked thread as over a waiting one (channel.bpf.h
 * dispatch_unmarked, bounded by VS_MARK_SKIP_NS since it last ran), and
 * its mark is cleared when it next runs after another task ran on that
 * vCPU: one skip per detection. A spinner that spins on is found again
 * within a sampling period and marked again.
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

/* The kernel changed `p`'s weight (the detector's nudge after a mark,
 * among others): a marked spinner running with work waiting is kicked. */
static void spinner_weight_changed(struct task_struct *p)
{
	s32 cpu;

	if (reference_fifo || !scx_bpf_task_running(p))
		return;
	cpu = scx_bpf_task_cpu(p);
	if (!spinner_to_preempt(p, cpu))
		return;
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
 * wanted the vCPU) and is cleared. The same task again is no switch: the
 * detector's nudge itself stops and restarts the running thread. */
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
