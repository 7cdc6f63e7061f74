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
/// glibc's value of the private field for a process-private semaphore.
pub const FUTEX_PRIVATE: i32 = 128;

#[repr(C)]
pub struct RawSem {
    pub value: AtomicU32,
    pub sleepers: AtomicU32,
    pub private: AtomicI32,
}

impl RawSem {
    #[cfg(any(test, loom))]
    pub fn new(value: u32) -> Self {
        RawSem { value: AtomicU32::new(value), sleepers: AtomicU32::new(0), private: AtomicI32::new(FUTEX_PRIVATE) }
    }

    fn shared(&self) -> bool {
        self.private.load(Relaxed) != FUTEX_PRIVATE
    }

    pub fn try_wait(&self) -> bool {
        let mut value = self.value.load(Relaxed);
        while value > 0 {
            match self.value.compare_exchange_weak(value, value - 1, Acquire, Relaxed) {
                Ok(_) => return true,
                Err(now) => value = now,
            }
        }
        false
    }

    /// sem_wait/sem_timedwait: 0 or ETIMEDOUT. A cancellation point.
    pub fn wait(&self, deadline: Option<&Deadline>) -> i32 {
        if self.try_wait() {
            return 0;
        }
        let cancel = Cancel::new(nothing_to_undo, core::ptr::null_mut());
        cancel.test();
        let mut backoff = Backoff::new(deadline);
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
                    let r = sleep_while(&self.value, 0, &self.sleepers, deadline, self.shared(), Some(&cancel));
                    if r == WaitResult::TimedOut && !self.try_wait() {
                        return libc::ETIMEDOUT;
                    } else if r == WaitResult::TimedOut {
                        return 0;
                    }
                }
            }
        }
    }

    /// sem_post: 0 or EOVERFLOW.
    pub fn post(&self) -> i32 {
        let mut value = self.value.load(Relaxed);
        loop {
            if value >= VALUE_MAX {
                return libc::EOVERFLOW;
            }
            match self.value.compare_exchange_weak(value, value + 1, SeqCst, Relaxed) {
                Ok(_) => break,
                Err(now) => value = now,
            }
        }
        wake(&self.value, &self.sleepers, 1, self.shared());
        0
    }
}

/// A cancelled sem_wait has changed nothing but its sleeper count, which
/// the cancellation trampoline restores.
unsafe extern "C" fn nothing_to_undo(_: *mut c_void) {}
