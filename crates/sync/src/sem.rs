//! Unnamed POSIX semaphores, in glibc's layout and protocol (value in the
//! low 32 bits of the first word, which is the futex word; the count of
//! sleepers in the high 32 bits; the futex's private flag after it), so
//! that semaphores glibc initialised, including named ones from sem_open,
//! work unchanged.

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::cancel::Cancel;
use crate::clock::Deadline;
use crate::futex::WaitResult;
use crate::shim::{AtomicI32, AtomicU32};
use core::ffi::c_void;
use core::sync::atomic::Ordering::*;

pub const VALUE_MAX: u32 = i32::MAX as u32;
/// glibc's values of the private field: 0 for a process-private semaphore,
/// 128 (FUTEX_PRIVATE_FLAG, which glibc XORs in) for a shared one, such as
/// those sem_open creates.
pub const FUTEX_PRIVATE: i32 = 0;
pub const FUTEX_SHARED: i32 = 128;

#[repr(C)]
pub struct RawSem {
    pub value: AtomicU32,
    pub sleepers: AtomicU32,
    pub private: AtomicI32,
    /// Posts between their increment and their wake-up: sem_destroy waits
    /// for them, so a waiter may destroy and free the semaphore as soon as
    /// its wait returns. (glibc's padding; glibc never touches it.)
    pub posting: AtomicU32,
}

impl RawSem {
    #[cfg(any(test, loom))]
    pub fn new(value: u32) -> Self {
        RawSem {
            value: AtomicU32::new(value),
            sleepers: AtomicU32::new(0),
            private: AtomicI32::new(FUTEX_PRIVATE),
            posting: AtomicU32::new(0),
        }
    }

    fn shared(&self) -> bool {
        self.private.load(Relaxed) == FUTEX_SHARED
    }

    pub fn try_wait(&self) -> bool {
        let mut value = self.value.load(Relaxed);
        while value > 0 {
            match self
                .value
                .compare_exchange_weak(value, value - 1, Acquire, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => value = now,
            }
        }
        false
    }

    /// sem_wait/sem_timedwait: 0, ETIMEDOUT, or EINTR (a signal handler
    /// interrupted the sleep, as glibc reports). A cancellation point.
    pub fn wait(&self, deadline: Option<&Deadline>) -> i32 {
        if self.try_wait() {
            return 0;
        }
        let cancel = Cancel::new(pass_on_a_post, self as *const RawSem as *mut c_void);
        cancel.test();
        let mut backoff = Backoff::on(deadline, &self.value, self.shared());
        loop {
            if self.try_wait() {
                backoff.done();
                return 0;
            }
            match backoff.pause() {
                Next::Retry => {
                    if backoff.yielding() {
                        cancel.test();
                    }
                }
                Next::TimedOut => return libc::ETIMEDOUT,
                Next::Sleep => {
                    match sleep_while(
                        &self.value,
                        0,
                        &self.sleepers,
                        deadline,
                        self.shared(),
                        Some(&cancel),
                    ) {
                        WaitResult::TimedOut if !self.try_wait() => return libc::ETIMEDOUT,
                        WaitResult::Interrupted if !self.try_wait() => return libc::EINTR,
                        WaitResult::TimedOut | WaitResult::Interrupted => return 0,
                        WaitResult::Woken | WaitResult::Changed => {}
                    }
                }
            }
        }
    }

    /// sem_post: 0 or EOVERFLOW.
    pub fn post(&self) -> i32 {
        self.posting.fetch_add(1, SeqCst);
        let mut value = self.value.load(Relaxed);
        loop {
            if value >= VALUE_MAX {
                self.posting.fetch_sub(1, SeqCst);
                return libc::EOVERFLOW;
            }
            match self
                .value
                .compare_exchange_weak(value, value + 1, SeqCst, Relaxed)
            {
                Ok(_) => break,
                Err(now) => value = now,
            }
        }
        wake(&self.value, &self.sleepers, 1, self.shared());
        // The last access (see `posting`).
        self.posting.fetch_sub(1, SeqCst);
        0
    }

    /// sem_destroy: returns once posts under way have finished with the
    /// semaphore.
    pub fn destroy(&self) {
        while self.posting.load(SeqCst) != 0 {
            crate::shim::yield_now();
        }
    }
}

/// A cancelled sem_wait has changed nothing but its sleeper count (which
/// the cancellation trampoline restores); but if a post woke it, that
/// wake-up must go to another sleeper instead of leaving with this thread.
unsafe extern "C" fn pass_on_a_post(arg: *mut c_void) {
    // SAFETY: arg is the semaphore being waited on, alive during the wait.
    let sem = unsafe { &*(arg as *const RawSem) };
    if sem.value.load(SeqCst) > 0 {
        wake(&sem.value, &sem.sleepers, 1, sem.shared());
    }
}
