//! Condition variables.
//!
//! A sequence number is the futex word: signal and broadcast bump it, and a
//! waiter waits for it to move from the value it read while still holding
//! the mutex, so no wake-up between the unlock and the wait is lost. Every
//! waiter that sees the bump returns (POSIX allows spurious wake-ups);
//! sleepers are woken one (signal) or, for a broadcast, one woken and the
//! rest moved onto the mutex's futex (FUTEX_CMP_REQUEUE), so they are
//! released one by one as the mutex frees up instead of all stampeding for
//! it. A waiter that was sleeping re-acquires the mutex as CONTENDED so
//! that the chain of requeued sleepers goes on.
//!
//! The object is ours alone (48 zero bytes are PTHREAD_COND_INITIALIZER).

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::cancel::Cancel;
use crate::clock::Deadline;
use crate::futex::WaitResult;
use crate::shim::{fence, AtomicU32, AtomicU64};
use crate::stats::{bump, Counter};
use core::ffi::c_void;
use core::sync::atomic::Ordering::*;

pub const FLAG_MONOTONIC: u32 = 1;
pub const FLAG_SHARED: u32 = 2;

#[repr(C)]
pub struct RawCond {
    pub seq: AtomicU32,
    pub sleepers: AtomicU32,
    pub flags: AtomicU32,
    /// Threads inside wait: signal and broadcast skip all work without any.
    pub waiters: AtomicU32,
    /// The waiters' mutex lock word, when a broadcast may requeue onto it.
    pub requeue_to: AtomicU64,
}

/// The mutex a waiter releases and re-acquires.
pub trait CondMutex {
    /// Releases for waiting: 0, or the error pthread_cond_wait returns (EPERM).
    fn release_for_wait(&self) -> i32;
    /// Re-acquires; `after_sleep`: the waiter slept and may have been requeued.
    fn reacquire(&self, after_sleep: bool);
    /// The lock word a broadcast may requeue sleepers onto, if any.
    fn requeue_word(&self) -> Option<&AtomicU32>;
}

impl RawCond {
    #[cfg(any(test, loom))]
    pub fn new(flags: u32) -> Self {
        RawCond {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            flags: AtomicU32::new(flags),
            waiters: AtomicU32::new(0),
            requeue_to: AtomicU64::new(0),
        }
    }

    pub fn clock(&self) -> libc::clockid_t {
        if self.flags.load(Relaxed) & FLAG_MONOTONIC != 0 {
            libc::CLOCK_MONOTONIC
        } else {
            libc::CLOCK_REALTIME
        }
    }

    fn shared(&self) -> bool {
        self.flags.load(Relaxed) & FLAG_SHARED != 0
    }

    /// pthread_cond_wait and its timed forms: 0, ETIMEDOUT, or the mutex's error.
    pub fn wait(&self, mutex: &dyn CondMutex, deadline: Option<&Deadline>) -> i32 {
        self.waiters.fetch_add(1, SeqCst);
        let seq = self.seq.load(SeqCst);
        let requeue_to = match mutex.requeue_word() {
            Some(word) if !self.shared() && cfg!(not(loom)) => word as *const AtomicU32 as u64,
            _ => 0,
        };
        if self.requeue_to.load(Relaxed) != requeue_to {
            self.requeue_to.store(requeue_to, Relaxed);
        }
        let err = mutex.release_for_wait();
        if err != 0 {
            self.waiters.fetch_sub(1, SeqCst);
            return err;
        }
        let state = Waiting {
            cond: self,
            mutex,
            seq,
            slept: core::cell::Cell::new(false),
        };
        let cancel = Cancel::new(cancelled, &state as *const Waiting as *mut c_void);
        let timed_out = self.wait_for_bump(seq, deadline, &state, &cancel);
        self.waiters.fetch_sub(1, SeqCst);
        mutex.reacquire(state.slept.get());
        if timed_out {
            libc::ETIMEDOUT
        } else {
            0
        }
    }

    /// Waits for `seq` to move; true if the deadline passed first.
    fn wait_for_bump(
        &self,
        seq: u32,
        deadline: Option<&Deadline>,
        state: &Waiting,
        cancel: &Cancel,
    ) -> bool {
        let mut backoff = Backoff::new(deadline);
        loop {
            if self.seq.load(Acquire) != seq {
                backoff.done();
                return false;
            }
            match backoff.pause() {
                Next::Retry => {
                    if backoff.yielding() {
                        cancel.test();
                    }
                }
                Next::TimedOut => return true,
                Next::Sleep => {
                    state.slept.set(true);
                    let r = sleep_while(
                        &self.seq,
                        seq,
                        &self.sleepers,
                        deadline,
                        self.shared(),
                        Some(cancel),
                    );
                    if r == WaitResult::TimedOut && self.seq.load(Acquire) == seq {
                        bump(Counter::timeouts);
                        return true;
                    }
                }
            }
        }
    }

    pub fn signal(&self) {
        if self.waiters.load(SeqCst) == 0 {
            return;
        }
        self.seq.fetch_add(1, SeqCst);
        wake(&self.seq, &self.sleepers, 1, self.shared());
    }

    pub fn broadcast(&self) {
        if self.waiters.load(SeqCst) == 0 {
            return;
        }
        let seq = self.seq.fetch_add(1, SeqCst).wrapping_add(1);
        // Pairs with the fence in sleep_while (see there).
        fence(SeqCst);
        if self.sleepers.load(SeqCst) == 0 {
            return;
        }
        #[cfg(not(loom))]
        {
            let target = self.requeue_to.load(Relaxed) as *const AtomicU32;
            // SAFETY: a waiter stored its mutex's lock word, which POSIX
            // requires to stay valid while threads wait on this condvar.
            if !target.is_null()
                && crate::futex::wake_one_requeue_rest(&self.seq, seq, unsafe { &*target })
            {
                bump(Counter::requeues);
                return;
            }
        }
        let _ = seq;
        bump(Counter::wakes);
        crate::shim::futex_wake(&self.seq, i32::MAX, self.shared());
    }
}

/// What a cancellation of a waiter must undo.
struct Waiting<'a> {
    cond: &'a RawCond,
    mutex: &'a dyn CondMutex,
    /// The sequence number the waiter waited to move.
    seq: u32,
    slept: core::cell::Cell<bool>,
}

/// Cleanup of a waiter cancelled inside wait: leave and re-acquire the
/// mutex, as POSIX requires before the program's cleanup handlers run. If a
/// signal arrived meanwhile, its futex wake-up may have gone to this
/// thread: wake another sleeper so the signal is not lost with it.
unsafe extern "C" fn cancelled(arg: *mut c_void) {
    // SAFETY: arg is the &Waiting of the cancelled wait, still on its stack.
    let state = unsafe { &*(arg as *const Waiting) };
    let cond = state.cond;
    cond.waiters.fetch_sub(1, SeqCst);
    if cond.seq.load(SeqCst) != state.seq {
        wake(&cond.seq, &cond.sleepers, 1, cond.shared());
    }
    state.mutex.reacquire(state.slept.get());
}
