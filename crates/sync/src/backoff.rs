//! The waiting policy every primitive shares.
//!
//! A thread that cannot go on at once moves through three phases:
//! 1. spin, only when the machine is not oversubscribed, and only while it
//!    can pay off: for at most what waking an idle vCPU would cost
//!    (config::SPIN_NS, scaled down while spins keep failing: see
//!    `Share`), and never after the spinner saw its own clock jump (its
//!    vCPU was switched off: the host is busy, and a lock holder's vCPU is
//!    as likely to be off; load::LOST_TIME_MEMORY_NS);
//! 2. yield, only when the machine is oversubscribed by this program's own
//!    threads (and other programs' runnable threads would not fill it): the waiter stays runnable, so whoever releases it pays no
//!    wake-up, but it hands its vCPU to threads that can make progress (the
//!    user-space form of virtual blocking); bounded by config::YIELD_NS
//!    (scaled down while yields keep failing: `Share`) so idle threads do
//!    not stay runnable for ever. When the excess threads
//!    are other programs', a yield would give them the vCPU for a time
//!    slice: the waiter sleeps instead (vsched-os's yield_may_help);
//!    With a vsched scheduler running, a yielding waiter on a known word
//!    also marks itself waiting in the scheduler's channel (channel.rs),
//!    which then runs its vCPU's other threads first, until the waker
//!    clears the mark (virtual blocking, done by the scheduler);
//! 3. sleep on a futex, with the primitive counting its sleepers so that
//!    releasers only make a wake-up system call when someone sleeps.
//!
//! Every signal is read without a system call: the clock is the vDSO's,
//! the load figures are refreshed at most once a millisecond (load.rs).

use crate::clock::{mono_ns, Deadline};
use crate::futex::WaitResult;
use crate::shim::{fence, futex_wait, yield_now, AtomicU32};
use crate::stats::{bump, Counter};
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

/// What the caller should do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again now (the backoff already spun or yielded).
    Retry,
    /// Go to sleep on the primitive's futex.
    Sleep,
    /// The deadline passed.
    TimedOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    /// `looked_ns`: the previous look at the primitive.
    Spin {
        since_ns: u64,
        looked_ns: u64,
    },
    Yield {
        since_ns: u64,
        yields: u32,
    },
    Sleep,
}

/// PAUSE instructions between two looks at the primitive while spinning.
const SPIN_BATCH: u32 = 8;
/// Yields between two looks at whether the machine is still oversubscribed.
const YIELDS_PER_LOAD_CHECK: u32 = 16;
/// A spinner whose consecutive looks are this far apart did not run in
/// between. A look is SPIN_BATCH PAUSEs (at most ~140 cycles each on recent
/// x86: about 0.5 us for the batch) and a vDSO clock read, so looks of a
/// running thread are at most a few microseconds apart; a guest interrupt
/// takes tens of microseconds at most, while a host that switches a vCPU
/// off takes it for hundreds of microseconds or milliseconds.
const SPIN_GAP_NS: u64 = 50_000;

/// How much of its budget (config::SPIN_NS, config::YIELD_NS) a phase may
/// use, in sixteenths, shared by the whole process: halved whenever a
/// waiter uses the whole budget in vain, raised by a sixteenth whenever the
/// phase wins (additive increase, multiplicative decrease, as in TCP: a few
/// failures quickly make the phase cheap, and it recovers as soon as
/// hand-offs are caught again). Never below one sixteenth, so that wins
/// can still be seen and the share grow back. A process-wide figure, not
/// per lock: glibc's pthread_mutex_t keeps a per-lock estimate, but
/// spinlocks, barriers and condition variables have no room for one.
///
/// For spinning, a failure is a lock held past the budget or taken again
/// at once by its holder; for yielding, a wait that outlasted the yield
/// budget: the threads it yielded to were not the ones it waited for (a
/// server's workers blocked in epoll count as awake, so the own-threads
/// rule may be wrong; this catches it).
struct Share(&'static core::sync::atomic::AtomicU32);

static SPIN_SHARE: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(Share::FULL);
static YIELD_SHARE: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(Share::FULL);

impl Share {
    const FULL: u32 = 16;
    const MIN: u32 = 1;

    fn of(&self, budget_ns: u64) -> u64 {
        budget_ns * self.0.load(Relaxed) as u64 / Self::FULL as u64
    }

    /// Plain loads and stores, not read-modify-writes: waiters of many
    /// threads update it, and a lost update only shifts the share by one
    /// step, which the next wait corrects.
    fn won(&self) {
        self.0.store(Self::after_win(self.0.load(Relaxed)), Relaxed);
    }

    fn failed(&self) {
        self.0
            .store(Self::after_failure(self.0.load(Relaxed)), Relaxed);
    }

    fn after_win(sixteenths: u32) -> u32 {
        (sixteenths + 1).min(Self::FULL)
    }

    fn after_failure(sixteenths: u32) -> u32 {
        (sixteenths / 2).max(Self::MIN)
    }
}

fn spin_share() -> Share {
    Share(&SPIN_SHARE)
}

fn yield_share() -> Share {
    Share(&YIELD_SHARE)
}

pub struct Backoff<'d> {
    deadline: Option<&'d Deadline>,
    phase: Phase,
    /// The address of the word whose change ends the wait (0: unknown),
    /// under which a yielding waiter is marked in the channel.
    word: usize,
    #[cfg(not(loom))]
    mark: Option<crate::channel::Mark>,
}

impl<'d> Backoff<'d> {
    pub fn new(deadline: Option<&'d Deadline>) -> Self {
        Backoff {
            deadline,
            phase: Phase::Start,
            word: 0,
            #[cfg(not(loom))]
            mark: None,
        }
    }

    /// A backoff whose waiter waits for `word` to change, and whose
    /// wakers call [`wake`] on it after changing it: while yielding, it
    /// marks itself waiting in the scheduler's channel. Not for a
    /// process-shared word: its wakers in other processes could not find
    /// the mark (the registry is per process).
    pub fn on(deadline: Option<&'d Deadline>, word: &AtomicU32, shared: bool) -> Self {
        Backoff {
            word: if shared {
                0
            } else {
                word as *const AtomicU32 as usize
            },
            ..Backoff::new(deadline)
        }
    }

    /// Before a yield: whether to look at the word first instead, because
    /// the thread was just marked (or marked again after a waker cleared
    /// the mark) and the word may have changed before that (channel.rs).
    #[cfg(not(loom))]
    fn marked_anew(&mut self) -> bool {
        if self.word == 0 {
            return false;
        }
        match &self.mark {
            Some(m) if m.is_set() => false,
            Some(m) => {
                m.rearm();
                true
            }
            None => {
                self.mark = crate::channel::mark(self.word);
                // Without a channel, never again in this wait.
                if self.mark.is_none() {
                    self.word = 0;
                }
                self.mark.is_some()
            }
        }
    }

    #[cfg(loom)]
    fn marked_anew(&mut self) -> bool {
        false
    }

    #[cfg(not(loom))]
    fn unmark(&mut self) {
        if let Some(m) = self.mark.take() {
            m.release();
        }
    }

    #[cfg(loom)]
    fn unmark(&mut self) {}

    /// Called after each failed attempt; spins or yields, or says to sleep.
    pub fn pause(&mut self) -> Next {
        if self.deadline.is_some_and(Deadline::passed) {
            bump(Counter::timeouts);
            self.unmark();
            return Next::TimedOut;
        }
        loop {
            match self.phase {
                Phase::Start => {
                    bump(Counter::waits);
                    self.phase = first_phase(self.deadline);
                }
                Phase::Spin {
                    since_ns,
                    looked_ns,
                } => {
                    let now = mono_ns();
                    if now.saturating_sub(looked_ns) > SPIN_GAP_NS {
                        // This thread did not run: its vCPU was switched
                        // off (or the guest preempted it). Spinning on
                        // would spend the vCPU's scarce time.
                        bump(Counter::spin_lost_time);
                        crate::load::lost_time_at(now);
                        self.phase = after_spinning(self.deadline);
                        continue;
                    }
                    if now.saturating_sub(since_ns) < spin_share().of(crate::config::spin_ns()) {
                        for _ in 0..SPIN_BATCH {
                            core::hint::spin_loop();
                        }
                        self.phase = Phase::Spin {
                            since_ns,
                            looked_ns: now,
                        };
                        return Next::Retry;
                    }
                    bump(Counter::spin_budget_exhausted);
                    spin_share().failed();
                    self.phase = after_spinning(self.deadline);
                }
                Phase::Yield { since_ns, yields } => {
                    if keep_yielding(since_ns, yields) {
                        if self.marked_anew() {
                            return Next::Retry;
                        }
                        bump(Counter::yields);
                        yield_now();
                        self.phase = Phase::Yield {
                            since_ns,
                            yields: yields + 1,
                        };
                        return Next::Retry;
                    }
                    yield_share().failed();
                    self.unmark();
                    self.phase = Phase::Sleep;
                }
                Phase::Sleep => return Next::Sleep,
            }
        }
    }

    /// Called once the wait is over, to count where it ended.
    pub fn done(&mut self) {
        self.unmark();
        match self.phase {
            Phase::Spin { .. } => {
                bump(Counter::spin_wins);
                spin_share().won();
            }
            Phase::Yield { .. } => {
                bump(Counter::yield_wins);
                yield_share().won();
            }
            Phase::Start | Phase::Sleep => {}
        }
    }

    pub fn yielding(&self) -> bool {
        matches!(self.phase, Phase::Yield { .. })
    }
}

/// What a waiter does on an oversubscribed machine: yield if the excess
/// threads may be this program's own (and its timed wait does not end
/// before the yield budget would: it would spend its whole wait
/// yielding), else sleep. Never spin: a spinner would hold a vCPU that a
/// runnable thread, perhaps the lock holder, needs. None when the machine
/// is not oversubscribed.
#[cfg(not(loom))]
fn when_oversubscribed(deadline: Option<&Deadline>) -> Option<Phase> {
    if !crate::load::oversubscribed() {
        return None;
    }
    if !crate::load::yield_may_help() {
        bump(Counter::yields_declined);
        return Some(Phase::Sleep);
    }
    if deadline.is_some_and(|d| d.remaining_ns() <= crate::config::yield_ns()) {
        return Some(Phase::Sleep);
    }
    Some(Phase::Yield {
        since_ns: mono_ns(),
        yields: 0,
    })
}

#[cfg(not(loom))]
fn first_phase(deadline: Option<&Deadline>) -> Phase {
    if let Some(phase) = when_oversubscribed(deadline) {
        return phase;
    }
    let now = mono_ns();
    if crate::config::spin_ns() == 0 {
        Phase::Sleep
    } else if crate::load::lost_time_recently(now) {
        bump(Counter::spin_skipped);
        Phase::Sleep
    } else {
        Phase::Spin {
            since_ns: now,
            looked_ns: now,
        }
    }
}

/// Yield again: still oversubscribed by our own threads (looked up every
/// few yields) and within the yield budget.
#[cfg(not(loom))]
fn keep_yielding(since_ns: u64, yields: u32) -> bool {
    let still_oversubscribed = yields % YIELDS_PER_LOAD_CHECK != YIELDS_PER_LOAD_CHECK - 1
        || (crate::load::oversubscribed() && crate::load::yield_may_help());
    still_oversubscribed
        && mono_ns().saturating_sub(since_ns) < yield_share().of(crate::config::yield_ns())
}

#[cfg(not(loom))]
fn after_spinning(deadline: Option<&Deadline>) -> Phase {
    when_oversubscribed(deadline).unwrap_or(Phase::Sleep)
}

// Under loom: one yield, then sleep, so both the retry and the sleep paths
// are explored, deterministically (no clock, no machine state).
#[cfg(loom)]
fn first_phase(_deadline: Option<&Deadline>) -> Phase {
    Phase::Yield {
        since_ns: 0,
        yields: 0,
    }
}

#[cfg(loom)]
fn keep_yielding(_since_ns: u64, yields: u32) -> bool {
    yields < 1
}

#[cfg(loom)]
fn after_spinning(_deadline: Option<&Deadline>) -> Phase {
    Phase::Sleep
}

/// Sleeps while `*word == expected`, announcing itself in `sleepers` so a
/// waker that changes `word` and then finds no sleepers may skip the
/// wake-up call. Both sides put a SeqCst fence between their write and
/// their read (a store-buffering pattern): either the waker sees the
/// sleeper or the sleeper sees the new value (and the kernel re-checks it
/// too). The fences are what loom can verify; on x86 they cost little next
/// to the system calls around them.
pub fn sleep_while(
    word: &AtomicU32,
    expected: u32,
    sleepers: &AtomicU32,
    deadline: Option<&Deadline>,
    shared: bool,
    cancel: Option<&crate::cancel::Cancel>,
) -> WaitResult {
    sleepers.fetch_add(1, SeqCst);
    fence(SeqCst);
    let result = if word.load(SeqCst) != expected {
        WaitResult::Changed
    } else {
        bump(Counter::sleeps);
        match cancel {
            Some(c) => c.futex_wait(word, expected, sleepers, deadline, shared),
            None => futex_wait(word, expected, deadline, shared),
        }
    };
    sleepers.fetch_sub(1, SeqCst);
    result
}

/// Wakes up to `n` of `word`'s sleepers, if there are any. Call after
/// changing `word`.
pub fn wake(word: &AtomicU32, sleepers: &AtomicU32, n: i32, shared: bool) {
    #[cfg(not(loom))]
    crate::channel::clear_marks(word as *const AtomicU32 as usize);
    fence(SeqCst);
    if sleepers.load(SeqCst) > 0 {
        bump(Counter::wakes);
        crate::shim::futex_wake(word, n, shared);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_share_halves_on_failure_and_recovers_by_sixteenths() {
        let mut s = Share::FULL;
        for expect in [8, 4, 2, 1, 1] {
            s = Share::after_failure(s);
            assert_eq!(s, expect);
        }
        for _ in 0..20 {
            s = Share::after_win(s);
        }
        assert_eq!(s, Share::FULL);
    }

    /// Issue 16: a waiter spun for its whole budget while its vCPU (or the
    /// holder's) was switched off by a busy host.
    #[test]
    fn a_spinner_whose_clock_jumped_stops_spinning_and_the_process_remembers() {
        let now = mono_ns();
        let mut b = Backoff::new(None);
        b.phase = Phase::Spin {
            since_ns: now,
            looked_ns: now - 10 * SPIN_GAP_NS,
        };
        let next = b.pause();
        assert!(!matches!(b.phase, Phase::Spin { .. }), "{:?}", b.phase);
        assert!(next != Next::TimedOut);
        assert!(crate::load::lost_time_recently(mono_ns()));
        // A new wait does not spin while the loss is recent.
        let mut fresh = Backoff::new(None);
        fresh.pause();
        assert!(
            !matches!(fresh.phase, Phase::Spin { .. }),
            "{:?}",
            fresh.phase
        );
    }
}
