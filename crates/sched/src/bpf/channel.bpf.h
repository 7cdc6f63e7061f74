/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The channel from vsched's runtime (intf.h, struct vs_channel): what the
 * program's threads tell the scheduler with plain stores, read here.
 *
 * Virtual blocking (../shared/seeds/oversubscription-hpdc21.txt §3.1):
 * a thread of `vsched exec` that waits for another thread of its program
 * marks its slot `waiting` and yields; its waker clears the mark. Dispatch
 * passes over marked tasks at the head of a vCPU's queue for the first
 * unmarked one, so that the vCPU goes to a thread that can make progress
 * instead of to each waiter in turn (each a context switch, about 8 us
 * under TCG). Without the channel, a yielding waiter is run again as soon
 * as its virtual time comes up, only to yield again.
 *
 * What is read is a hint with bounds: a slot counts only for the task
 * whose pid it names; a marked task is passed over only in favour of
 * another task of the same queue, and for at most VS_MARK_SKIP_NS since it
 * last ran (policy.h vs_passes_over_marked), so a mark set for ever costs
 * its task priority, never its turn.
 *
 * Included once by main.bpf.c, after queue.bpf.h.
 */

/* Tunable (`--no-channel`, the baseline "the scheduler without the
 * channel"): marks are not read and the channel says it is not live. */
const volatile bool channel_enabled = true;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct vs_channel);
} channel SEC(".maps");

static struct vs_channel *channel_get(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&channel, &zero);
}

/* `p`'s slot, if `p` holds it. */
static struct vs_channel_slot *slot_of(struct vs_channel *ch,
				       const struct task_struct *p)
{
	struct vs_channel_slot *s = &ch->slots[(u32)p->pid & (VS_CHANNEL_SLOTS - 1)];

	return READ_ONCE(s->tid) == (u32)p->pid ? s : NULL;
}

/* Whether `p` marked itself waiting, and dispatch may pass over it now. */
static bool passed_over(struct vs_channel *ch, struct task_struct *p, u64 now)
{
	struct vs_channel_slot *s = slot_of(ch, p);
	struct task_ctx *tc;

	if (!s || !READ_ONCE(s->waiting) || !(tc = ctx_of(p)))
		return false;
	return vs_passes_over_marked(1, tc->stopped_ns, now);
}

/* Whether `p` marked itself waiting (its slice end does not keep it). */
static bool marked_waiting(const struct task_struct *p)
{
	struct vs_channel *ch;
	struct vs_channel_slot *s;

	if (!channel_enabled || !(ch = channel_get()) ||
	    !READ_ONCE(ch->header.marked))
		return false;
	s = slot_of(ch, p);
	return s && READ_ONCE(s->waiting);
}

/*
 * Runs on `cpu` the first task of queue `dsq` that dispatch need not pass
 * over, when the queue's head is marked waiting; whether it moved one.
 * While no thread of the VM is marked (and without the channel) it does
 * nothing but read the count; with an unmarked head, nothing but a peek:
 * the caller takes the head as before.
 */
static bool dispatch_unmarked(u64 dsq, s32 cpu)
{
	struct vs_channel *ch;
	struct task_struct *p;
	u32 looked = 0, passed = 0;
	u64 now;

	if (!channel_enabled || !(ch = channel_get()) ||
	    !READ_ONCE(ch->header.marked))
		return false;
	p = __COMPAT_scx_bpf_dsq_peek(dsq);
	now = bpf_ktime_get_ns();
	if (!p || !passed_over(ch, p, now))
		return false;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++looked > VS_MARK_SCAN)
			break;
		/* One that may not run here would be sent elsewhere, leaving
		 * this vCPU nothing (the shared queue holds such tasks). */
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return false;
		if (passed_over(ch, p, now)) {
			passed++;
			continue;
		}
		if (!scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, VS_DSQ_LOCAL, 0))
			return false;
		/* None passed over: the head's mark was cleared meanwhile. */
		if (passed) {
			count_n(VS_STAT_MARKED_PASSED_OVER, passed);
			count(VS_STAT_MARKED_DISPATCHES);
		}
		return true;
	}
	/* Every task looked at was marked: the head runs (and yields). */
	count(VS_STAT_MARKED_ALL_WAITING);
	return false;
}

/* `p` exits: its slot, if it holds one, is free for the next thread. */
static void channel_forget(struct task_struct *p)
{
	struct vs_channel *ch = channel_get();
	struct vs_channel_slot *s;

	if (!ch || !(s = slot_of(ch, p)))
		return;
	if (__sync_lock_test_and_set(&s->waiting, 0))
		__sync_fetch_and_sub(&ch->header.marked, 1);
	if (__sync_val_compare_and_swap(&s->tid, (u32)p->pid, 0) == (u32)p->pid)
		count(VS_STAT_CHANNEL_SLOTS_FREED);
}

/* The scheduler is enabled: the header says what the runtime finds. */
static void channel_open(void)
{
	struct vs_channel *ch = channel_get();

	if (!ch)
		return;
	ch->header.magic = VS_CHANNEL_MAGIC;
	ch->header.version = VS_CHANNEL_VERSION;
	ch->header.slots = VS_CHANNEL_SLOTS;
	WRITE_ONCE(ch->header.live, channel_enabled ? 1 : 0);
}

/* The scheduler is disabled: a runtime still mapping the channel stops
 * marking (nobody reads the marks now). */
static void channel_close(void)
{
	struct vs_channel *ch = channel_get();

	if (ch)
		WRITE_ONCE(ch->header.live, 0);
}
