//! The waiting policy every primitive shares.
//!
//! A thread that cannot go on at once moves through three phases:
//! 1. spin, only when the machine is not oversubscribed, and only for as long
//!    as waking an idle vCPU would cost (config::SPIN_NS): a hand-off that
//!    arrives sooner is cheaper to catch spinning than to sleep for;
//! 2. yield, only when the machine is oversubscribed: the waiter stays
//!    runnable, so whoever releases it pays no wake-up, but it hands its vCPU
//!    to threads that can make progress (the user-space form of virtual
//!    blocking); bounded by config::YIELD_NS so idle threads do not stay
//!    runnable for ever;
//! 3. sleep on a futex, with the primitive counting its sleepers so that
//!    releasers only make a wake-up system call when someone sleeps.

use crate::clock::{mono_ns, Deadline};
use crate::futex::WaitResult;
use crate::shim::{fence, futex_wait, yield_now, AtomicU32};
use crate::stats::{bump, Counter};
use core::sync::atomic::Ordering::SeqCst;

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
    Spin { since_ns: u64 },
    Yield { since_ns: u64, yields: u32 },
    Sleep,
}

/// PAUSE instructions between two looks at the primitive while spinning.
const SPIN_BATCH: u32 = 8;
/// Yields between two looks at whether the machine is still oversubscribed.
const YIELDS_PER_LOAD_CHECK: u32 = 16;

pub struct Backoff<'d> {
    deadline: Option<&'d Deadline>,
    phase: Phase,
}

impl<'d> Backoff<'d> {
    pub fn new(deadline: Option<&'d Deadline>) -> Self {
        Backoff {
            deadline,
            phase: Phase::Start,
        }
    }

    /// Called after each failed attempt; spins or yields, or says to sleep.
    pub fn pause(&mut self) -> Next {
        if self.deadline.is_some_and(Deadline::passed) {
            bump(Counter::timeouts);
            return Next::TimedOut;
        }
        loop {
            match self.phase {
                Phase::Start => {
                    bump(Counter::waits);
                    self.phase = first_phase(self.deadline);
                }
                Phase::Spin { since_ns } => {
                    if mono_ns().saturating_sub(since_ns) < crate::config::spin_ns() {
                        for _ in 0..SPIN_BATCH {
                            core::hint::spin_loop();
                        }
                        return Next::Retry;
                    }
                    bump(Counter::spin_budget_exhausted);
                    self.phase = after_spinning(self.deadline);
                }
                Phase::Yield { since_ns, yields } => {
                    if keep_yielding(since_ns, yields) {
                        bump(Counter::yields);
                        yield_now();
                        self.phase = Phase::Yield {
                            since_ns,
                            yields: yields + 1,
                        };
                        return Next::Retry;
                    }
                    self.phase = Phase::Sleep;
                }
                Phase::Sleep => return Next::Sleep,
            }
        }
    }

    /// Called once the wait is over, to count where it ended.
    pub fn done(&self) {
        match self.phase {
            Phase::Spin { .. } => bump(Counter::spin_wins),
            Phase::Yield { .. } => bump(Counter::yield_wins),
            Phase::Start | Phase::Sleep => {}
        }
    }

    pub fn yielding(&self) -> bool {
        matches!(self.phase, Phase::Yield { .. })
    }
}

/// Yield only on an oversubscribed machine, and not in a timed wait that
/// ends before the yield budget would: such a thread would spend its whole
/// wait yielding instead of sleeping.
#[cfg(not(loom))]
fn should_yield(deadline: Option<&Deadline>) -> bool {
    crate::load::oversubscribed()
        && deadline.is_none_or(|d| d.remaining_ns() > crate::config::yield_ns())
}

#[cfg(not(loom))]
fn first_phase(deadline: Option<&Deadline>) -> Phase {
    let now = mono_ns();
    if should_yield(deadline) {
        Phase::Yield {
            since_ns: now,
            yields: 0,
        }
    } else if crate::config::spin_ns() > 0 {
        Phase::Spin { since_ns: now }
    } else {
        Phase::Sleep
    }
}

/// Yield again: still oversubscribed (looked up every few yields) and
/// within the yield budget.
#[cfg(not(loom))]
fn keep_yielding(since_ns: u64, yields: u32) -> bool {
    let still_oversubscribed = yields % YIELDS_PER_LOAD_CHECK != YIELDS_PER_LOAD_CHECK - 1
        || crate::load::oversubscribed();
    still_oversubscribed && mono_ns().saturating_sub(since_ns) < crate::config::yield_ns()
}

#[cfg(not(loom))]
fn after_spinning(deadline: Option<&Deadline>) -> Phase {
    if should_yield(deadline) {
        Phase::Yield {
            since_ns: mono_ns(),
            yields: 0,
        }
    } else {
        Phase::Sleep
    }
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
    fence(SeqCst);
    if sleepers.load(SeqCst) > 0 {
        bump(Counter::wakes);
        crate::shim::futex_wake(word, n, shared);
    }
}
