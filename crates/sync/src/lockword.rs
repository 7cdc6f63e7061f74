//! The lock-word protocol shared by mutexes and spinlocks: 0 free, 1 held,
//! 2 held and maybe sleepers (the unlocker then makes a wake-up call).
//! Waiting goes through the shared backoff policy before it sleeps.

use crate::backoff::{Backoff, Next};
use crate::clock::{BadDeadline, Deadline};
use crate::futex::WaitResult;
use crate::shim::{futex_wait, futex_wake, AtomicU32};
use crate::stats::{bump, Counter};
use core::sync::atomic::Ordering::*;

pub const UNLOCKED: u32 = 0;
pub const LOCKED: u32 = 1;
pub const CONTENDED: u32 = 2;

/// A timed lock's deadline, checked only if the lock has to wait (as glibc).
pub type Timeout = Option<Result<Deadline, BadDeadline>>;

#[inline]
pub fn try_acquire(word: &AtomicU32) -> bool {
    word.compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
        .is_ok()
}

/// Acquires `word`, or fails with ETIMEDOUT/EINVAL for a timed lock.
/// The uncontended case is inlined into the exported function (an
/// uncontended lock and unlock cost 25 ns through two calls against
/// glibc's 12 ns); the waiting is not.
#[inline]
pub fn acquire(word: &AtomicU32, timeout: Timeout, shared: bool) -> Result<(), i32> {
    if try_acquire(word) {
        return Ok(());
    }
    acquire_contended(word, timeout, shared)
}

#[cold]
#[inline(never)]
fn acquire_contended(word: &AtomicU32, timeout: Timeout, shared: bool) -> Result<(), i32> {
    let deadline = match timeout {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(BadDeadline::Invalid)) => return Err(libc::EINVAL),
        Some(Err(BadDeadline::Passed)) => return Err(libc::ETIMEDOUT),
    };
    let mut backoff = Backoff::new(deadline.as_ref());
    loop {
        match backoff.pause() {
            Next::Retry => {
                if word.load(Relaxed) == UNLOCKED && try_acquire(word) {
                    backoff.done();
                    return Ok(());
                }
            }
            Next::TimedOut => return Err(libc::ETIMEDOUT),
            Next::Sleep => break,
        }
    }
    // Sleeping: announce it in the word (CONTENDED) so the unlocker wakes us.
    loop {
        if word.swap(CONTENDED, Acquire) == UNLOCKED {
            return Ok(());
        }
        bump(Counter::sleeps);
        if futex_wait(word, CONTENDED, deadline.as_ref(), shared) == WaitResult::TimedOut {
            bump(Counter::timeouts);
            return Err(libc::ETIMEDOUT);
        }
    }
}

#[inline]
pub fn release(word: &AtomicU32, shared: bool) {
    if word.swap(UNLOCKED, Release) == CONTENDED {
        wake_one(word, shared);
    }
}

#[cold]
#[inline(never)]
fn wake_one(word: &AtomicU32, shared: bool) {
    bump(Counter::wakes);
    futex_wake(word, 1, shared);
}
