//! pthread spinlocks that stop burning a vCPU when spinning cannot help:
//! the shared lock-word protocol (spin only within the budget, yield when
//! oversubscribed, then sleep), plus admission in the spirit of I-Spinlock
//! (admission.rs): a thread whose time slice is about to end does not take
//! the lock now, so it is not preempted while holding it.
//!
//! A spinlock has no owner (glibc lets any thread unlock it), and may be
//! process-shared without saying so in its 4 bytes, so its futex calls are
//! always the shared kind.

use crate::lockword;
use crate::shim::AtomicU32;

#[repr(C)]
pub struct RawSpin {
    pub word: AtomicU32,
}

const SHARED: bool = true;

impl RawSpin {
    #[cfg(any(test, loom))]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RawSpin {
            word: AtomicU32::new(0),
        }
    }

    pub fn lock(&self) {
        // Admission and its measurements cost a clock read and thread-local
        // accesses: only when asked for.
        if !crate::admission::active() {
            // Without a deadline the lock cannot fail.
            let _ = lockword::acquire(&self.word, None, SHARED);
            return;
        }
        crate::admission::before_acquire(&self.word);
        let _ = lockword::acquire(&self.word, None, SHARED);
        crate::admission::acquired();
    }

    pub fn trylock(&self) -> bool {
        if !lockword::try_acquire(&self.word) {
            return false;
        }
        if crate::admission::active() {
            crate::admission::acquired();
        }
        true
    }

    pub fn unlock(&self) {
        if crate::admission::active() {
            crate::admission::releasing();
        }
        lockword::release(&self.word, SHARED);
    }
}
