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
 * The other way, for I-Spinlock's admission (../shared/seeds/
 * i-spinlock-eurosys17.txt: a ticket only if the remaining time covers
 * the wait and the critical section): the scheduler writes into a
 * running thread's slot where it runs, when its slice ends, and when its
 * vCPU's next switch-off is predicted (from the heartbeat, which runs
 * on a vCPU that loses time while such a thread runs there), and counts
 * the switch-offs the thread sat through. Only threads that ask for it
 * (their slot's `wants_run`) pay for it: for others, a read of the
 * slot's owner per switch.
 *
 * Spinner descheduling (§3.2) reads the same marks: `vsched run
 * --spin-detect` marks a thread it found spinning (its slot's
 * `spinning`), dispatch passes over it like a waiter, and the scheduler
 * clears the mark when it next runs the thread (spinners.bpf.h).
 *
 * Included once by main.bpf.c, before queue.bpf.h and heartbeat.bpf.h.
 */

/* Tunable (`--no-channel`, the baseline "the scheduler without the
 * channel"): marks are not read and the channel says it is not live. */
const volatile bool channel_enabled = true;

/* The longest slice published as a deadline: a second, far above any
 * slice vsched gives (slice_ns, milliseconds). */
#define VS_CHANNEL_SLICE_MAX_NS 1000000000ULL

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

/* The slot of thread `pid`, if it holds one (pid 0 holds none: a slot's
 * tid 0 means free). */
static struct vs_channel_slot *slot_of_pid(struct vs_channel *ch, u32 pid)
{
	struct vs_channel_slot *s = &ch->slots[pid & (VS_CHANNEL_SLOTS - 1)];

	return pid && READ_ONCE(s->tid) == pid ? s : NULL;
}

/* `p`'s slot, if `p` holds it. */
static struct vs_channel_slot *slot_of(struct vs_channel *ch,
				       const struct task_struct *p)
{
	return slot_of_pid(ch, (u32)p->pid);
}

/* What a task's slot says about it: marked waiting by itself (virtual
 * blocking), or marked spinning by the spin detector. */
enum vs_mark {
	VS_UNMARKED = 0,
	VS_MARKED_WAITING = 1,
	VS_MARKED_SPINNING = 2,
};

static enum vs_mark mark_in(struct vs_channel_slot *s)
{
	if (!s)
		return VS_UNMARKED;
	if (READ_ONCE(s->waiting))
		return VS_MARKED_WAITING;
	return READ_ONCE(s->spinning) ? VS_MARKED_SPINNING : VS_UNMARKED;
}

/* `p`'s mark, if dispatch may pass over it now (VS_UNMARKED if not). */
static enum vs_mark passed_over(struct vs_channel *ch, struct task_struct *p,
				u64 now)
{
	enum vs_mark mark = mark_in(slot_of(ch, p));
	struct task_ctx *tc;

	if (mark == VS_UNMARKED || !(tc = ctx_of(p)) ||
	    !vs_passes_over_marked(1, tc->stopped_ns, now))
		return VS_UNMARKED;
	return mark;
}

/* `p`'s mark in a channel with marks set, if the channel is read (its
 * slice end does not keep a marked task). */
static enum vs_mark mark_of(const struct task_struct *p)
{
	struct vs_channel *ch;

	if (!channel_enabled || !(ch = channel_get()) ||
	    !READ_ONCE(ch->header.marked))
		return VS_UNMARKED;
	return mark_in(slot_of(ch, p));
}

/*
 * Runs on `cpu` the first task of queue `dsq` that dispatch need not pass
 * over, when the queue's head is marked (waiting or spinning); whether it
 * moved one.
 * While no thread of the VM is marked (and without the channel) it does
 * nothing but read the count; with an unmarked head, nothing but a peek:
 * the caller takes the head as before.
 */
static bool dispatch_unmarked(u64 dsq, s32 cpu)
{
	struct vs_channel *ch;
	struct task_struct *p;
	u32 looked = 0, passed = 0, spinners = 0;
	enum vs_mark mark;
	u64 now;

	if (!channel_enabled || !(ch = channel_get()) ||
	    !READ_ONCE(ch->header.marked))
		return false;
	p = __COMPAT_scx_bpf_dsq_peek(dsq);
	now = bpf_ktime_get_ns();
	if (!p || passed_over(ch, p, now) == VS_UNMARKED)
		return false;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++looked > VS_MARK_SCAN)
			break;
		/* One that may not run here would be sent elsewhere, leaving
		 * this vCPU nothing (the shared queue holds such tasks). */
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return false;
		mark = passed_over(ch, p, now);
		if (mark != VS_UNMARKED) {
			passed++;
			spinners += mark == VS_MARKED_SPINNING;
			continue;
		}
		if (!scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, VS_DSQ_LOCAL, 0))
			return false;
		/* None passed over: the head's mark was cleared meanwhile. */
		if (passed) {
			count_n(VS_STAT_MARKED_PASSED_OVER, passed - spinners);
			count_n(VS_STAT_SPINNERS_PASSED_OVER, spinners);
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
	if (__sync_lock_test_and_set(&s->spinning, 0))
		__sync_fetch_and_sub(&ch->header.marked, 1);
	WRITE_ONCE(s->wants_run, 0);
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

/* When `p`'s slice ends, if it runs now; 0 for a slice too long to be a
 * deadline (SCX_SLICE_INF, which a task may carry from sched_ext's own
 * paths: now + it would wrap to a time in the past). */
static u64 slice_end_of(const struct task_struct *p, u64 now)
{
	u64 slice = p->scx.slice;

	return slice <= VS_CHANNEL_SLICE_MAX_NS ? now + slice : 0;
}

/*
 * `p` starts running on `cpu`: its slot, if it holds one and asks for its
 * run (`wants_run`), says so, with its slice's end (a switch-off is
 * predicted only at the next beat). Returns whether it was written, for
 * the vCPU's `curr_channel`.
 */
static bool channel_running(struct task_struct *p, s32 cpu, u64 now)
{
	struct vs_channel *ch;
	struct vs_channel_slot *s;

	if (!channel_enabled || !(ch = channel_get()) || !(s = slot_of(ch, p)) ||
	    !READ_ONCE(s->wants_run))
		return false;
	WRITE_ONCE(s->switch_off_ns, 0);
	WRITE_ONCE(s->slice_end_ns, slice_end_of(p, now));
	WRITE_ONCE(s->on_cpu, cpu + 1);
	return true;
}

/* The slot `l`'s vCPU publishes to: its current task's, while that
 * asked for its run (`curr_channel`). */
static struct vs_channel_slot *curr_slot(struct vcpu_live *l)
{
	struct vs_channel *ch;

	if (!l->curr_channel || !channel_enabled || !(ch = channel_get()))
		return NULL;
	return slot_of_pid(ch, l->curr_pid);
}

/* `l`'s current task stops running: nothing of its run is left to
 * predict, and the vCPU publishes to no one until the next asks. */
static void channel_stopping(struct vcpu_live *l)
{
	struct vs_channel_slot *s = curr_slot(l);

	l->curr_channel = 0;
	if (!s)
		return;
	WRITE_ONCE(s->on_cpu, 0);
	WRITE_ONCE(s->slice_end_ns, 0);
	WRITE_ONCE(s->switch_off_ns, 0);
}

/*
 * A heartbeat of `l`'s vCPU while a thread that asked for its run runs
 * there: the predicted switch-off, and a switch-off the beat just saw
 * (`episode`).
 */
static void channel_beat(struct vcpu_live *l, bool episode, u64 now)
{
	struct vs_channel_slot *s = curr_slot(l);

	if (!s)
		return;
	if (episode) {
		/* Only the vCPU running the thread writes it. */
		WRITE_ONCE(s->switch_offs, s->switch_offs + 1);
		count(VS_STAT_CHANNEL_SWITCH_OFFS_SEEN);
	}
	WRITE_ONCE(s->switch_off_ns,
		   vs_predicted_switch_off(l, now, 2 * beat_ns));
}

/* The tick, after it may have renewed `curr`'s slice in place (no
 * running or stopping tells of that): the slice's end again. */
static void channel_tick(struct vcpu_live *l, struct task_struct *curr)
{
	struct vs_channel_slot *s = curr_slot(l);

	if (s && (u32)curr->pid == l->curr_pid)
		WRITE_ONCE(s->slice_end_ns,
			   slice_end_of(curr, bpf_ktime_get_ns()));
}
