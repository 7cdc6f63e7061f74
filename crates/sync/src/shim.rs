//! The atomics and futex operations the wait/wake protocols are written
//! against. Normally the real ones; under `--cfg loom` the loom model
//! checker's atomics and an emulated futex, so that loom can explore every
//! interleaving of the same protocol code.

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64};

#[cfg(not(loom))]
pub use crate::futex::{wait as futex_wait, wake as futex_wake, yield_now};

#[cfg(loom)]
pub use loom_futex::{wait as futex_wait, wake as futex_wake, yield_now};

/// An emulated futex for loom: one global wait queue. A wake wakes every
/// sleeper (futex allows spurious wake-ups), so a protocol that forgets to
/// wake shows up as a deadlock, which loom reports.
#[cfg(loom)]
mod loom_futex {
    use super::AtomicU32;
    use crate::clock::Deadline;
    use crate::futex::WaitResult;
    use core::sync::atomic::Ordering::SeqCst;
    use loom::sync::{Condvar, Mutex};

    loom::lazy_static! {
        static ref QUEUE: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());
    }

    pub fn wait(
        word: &AtomicU32,
        expected: u32,
        _deadline: Option<&Deadline>,
        _shared: bool,
    ) -> WaitResult {
        let (lock, cv) = &*QUEUE;
        let guard = lock.lock().unwrap();
        if word.load(SeqCst) != expected {
            return WaitResult::Changed;
        }
        drop(cv.wait(guard).unwrap());
        WaitResult::Woken
    }

    pub fn wake(_word: &AtomicU32, _n: i32, _shared: bool) {
        let (lock, cv) = &*QUEUE;
        let mut generation = lock.lock().unwrap();
        *generation += 1;
        cv.notify_all();
    }

    pub fn yield_now() {
        loom::thread::yield_now();
    }
}
