//! Condition variables.
//!
//! A sequence number is the futex word: signal and broadcast bump it, and a
//! waiter waits for it to move from the value it read while still holding
//! the mutex, so no wake-up between the unlock and the wait is lost. Every
//! waiter that sees the bump returns (POSIX allows spurious wake-ups).
//! Sleepers are woken one (signal) or all with one call (broadcast); on an
//! oversubscribed machine waiters yield instead of sleeping, and a
//! broadcast wakes nobody through the kernel at all.
//!
//! A broadcast does not requeue sleepers onto the mutex (FUTEX_CMP_REQUEUE):
//! requeued waiters could strand a plain locker, and they keep using the
//! condvar after the broadcaster returns, which makes destroying it right
//! away unsafe (both found in review).
//!
//! `waiters` counts threads inside wait; its decrement is a waiter's last
//! access to the condvar, and pthread_cond_destroy waits for it to reach 0,
//! so a condvar may be destroyed (and freed) as soon as no thread is
//! blocked on it, as POSIX allows.
//!
//! The object is ours alone (48 zero bytes are PTHREAD_COND_INITIALIZER).

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::cancel::Cancel;
use crate::clock::Deadline;
use crate::futex::WaitResult;
use crate::shim::{fence, yield_now, AtomicU32};
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
    /// Threads inside wait: signal and broadcast skip all work without any,
    /// and destroy waits for them to leave.
    pub waiters: AtomicU32,
}

/// The mutex a waiter releases and re-acquires.
pub trait CondMutex {
    /// Releases for waiting: Ok(true) if the lock was released, Ok(false)
    /// if it stays held (a recursive mutex held more than once, as glibc),
    /// or the error pthread_cond_wait returns (EPERM).
    fn release_for_wait(&self) -> Result<bool, i32>;
    /// Re-acquires after the wait: 0, or the error pthread_cond_wait
    /// returns (EOWNERDEAD for a robust mutex whose owner died).
    fn reacquire(&self, released: bool) -> i32;
}

/// How a wait ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Signalled,
    TimedOut,
}

impl RawCond {
    #[cfg(any(test, loom))]
    pub fn new(flags: u32) -> Self {
        RawCond {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            flags: AtomicU32::new(flags),
            waiters: AtomicU32::new(0),
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
        let released = match mutex.release_for_wait() {
            Ok(released) => released,
            Err(e) => {
                self.waiters.fetch_sub(1, SeqCst);
                return e;
            }
        };
        let state = Waiting {
            cond: self,
            mutex,
            seq,
            released,
        };
        let cancel = Cancel::new(cancelled, &state as *const Waiting as *mut c_void);
        let outcome = self.wait_for_bump(seq, deadline, &cancel);
        // The last access to the condvar (see the module comment).
        self.waiters.fetch_sub(1, SeqCst);
        let err = mutex.reacquire(released);
        if err != 0 {
            return err;
        }
        match outcome {
            Outcome::Signalled => 0,
            Outcome::TimedOut => libc::ETIMEDOUT,
        }
    }

    /// Waits for `seq` to move (or a wake-up, or the deadline).
    fn wait_for_bump(&self, seq: u32, deadline: Option<&Deadline>, cancel: &Cancel) -> Outcome {
        let mut backoff = Backoff::on(deadline, &self.seq, self.shared());
        loop {
            if self.seq.load(Acquire) != seq {
                backoff.done();
                return Outcome::Signalled;
            }
            match backoff.pause() {
                Next::Retry => {
                    if backoff.yielding() {
                        cancel.test();
                    }
                }
                Next::TimedOut => return Outcome::TimedOut,
                Next::Sleep => {
                    let r = sleep_while(
                        &self.seq,
                        seq,
                        &self.sleepers,
                        deadline,
                        self.shared(),
                        Some(cancel),
                    );
                    let moved = self.seq.load(Acquire) != seq;
                    match r {
                        WaitResult::TimedOut if !moved => {
                            bump(Counter::timeouts);
                            return Outcome::TimedOut;
                        }
                        // Woken although the sequence did not move: the
                        // wake-up was meant for a waiter that slept before
                        // this one (the kernel picks sleepers by priority,
                        // not by age). Hand it on, then return: a spurious
                        // wake-up is allowed, a lost signal is not.
                        WaitResult::Woken if !moved => {
                            wake(&self.seq, &self.sleepers, 1, self.shared());
                            return Outcome::Signalled;
                        }
                        _ => {}
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
        self.seq.fetch_add(1, SeqCst);
        wake(&self.seq, &self.sleepers, i32::MAX, self.shared());
    }

    /// pthread_cond_destroy: returns once every thread that was inside a
    /// wait has left it (woken threads are on their way out; a thread still
    /// blocked would be a program error, as in glibc, and keeps us here).
    pub fn destroy(&self) {
        fence(SeqCst);
        while self.waiters.load(SeqCst) != 0 {
            yield_now();
        }
    }
}

/// What a cancellation of a waiter must undo.
struct Waiting<'a> {
    cond: &'a RawCond,
    mutex: &'a dyn CondMutex,
    /// The sequence number the waiter waited to move.
    seq: u32,
    released: bool,
}

/// Cleanup of a waiter cancelled inside wait: leave and re-acquire the
/// mutex, as POSIX requires before the program's cleanup handlers run. If a
/// signal arrived meanwhile, its futex wake-up may have gone to this
/// thread: wake another sleeper so the signal is not lost with it.
unsafe extern "C" fn cancelled(arg: *mut c_void) {
    // SAFETY: arg is the &Waiting of the cancelled wait, still on its stack.
    let state = unsafe { &*(arg as *const Waiting) };
    let cond = state.cond;
    if cond.seq.load(SeqCst) != state.seq {
        wake(&cond.seq, &cond.sleepers, 1, cond.shared());
    }
    cond.waiters.fetch_sub(1, SeqCst);
    state.mutex.reacquire(state.released);
}
