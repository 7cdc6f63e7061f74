//! Making a wait a POSIX cancellation point (pthread_cond_wait, sem_wait).
//!
//! When a thread is cancelled inside such a wait, the primitive's state must
//! be put back (a condition variable's waiter re-acquires its mutex, for
//! instance) before the cancellation unwinds into the program's cleanup
//! handlers. The C helpers in csrc/cancel.c register `Cancel::cleanup` with
//! pthread_cleanup_push around the blocking call.
//!
//! The unwind passes through the Rust frames between the exported function
//! and the helper; those frames own nothing with a destructor.

use crate::futex::WaitResult;
use crate::shim::AtomicU32;
use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::Ordering::SeqCst;

pub type CleanupFn = unsafe extern "C" fn(*mut c_void);

pub struct Cancel {
    /// Restores the primitive's state; gets `arg`.
    cleanup: CleanupFn,
    arg: *mut c_void,
    /// The sleeper count to decrement first, while sleeping.
    sleepers: Cell<*const AtomicU32>,
}

#[cfg(not(loom))]
extern "C-unwind" {
    fn vsched_futex_wait_cancelable(
        word: *mut u32,
        op: i32,
        val: u32,
        ts: *const libc::timespec,
        bitset: u32,
        cleanup: CleanupFn,
        arg: *mut c_void,
    ) -> libc::c_long;
    fn vsched_testcancel(cleanup: CleanupFn, arg: *mut c_void);
}

/// Runs first when a cancellation unwinds out of a wait.
unsafe extern "C" fn trampoline(arg: *mut c_void) {
    // SAFETY: arg is the &Cancel passed to the C helper, alive on the
    // waiting thread's stack while the handler runs.
    let cancel = unsafe { &*(arg as *const Cancel) };
    let sleepers = cancel.sleepers.get();
    if !sleepers.is_null() {
        // SAFETY: set by futex_wait below to a live sleeper count.
        unsafe { &*sleepers }.fetch_sub(1, SeqCst);
        // The sleep ends here, not after the call it unwinds out of.
        #[cfg(not(loom))]
        crate::load::sleeping_end(false);
    }
    // SAFETY: the primitive's own cleanup with its own argument.
    unsafe { (cancel.cleanup)(cancel.arg) };
}

impl Cancel {
    pub fn new(cleanup: CleanupFn, arg: *mut c_void) -> Self {
        Cancel {
            cleanup,
            arg,
            sleepers: Cell::new(core::ptr::null()),
        }
    }

    /// pthread_testcancel, with the cleanup registered.
    pub fn test(&self) {
        #[cfg(not(loom))]
        // SAFETY: self outlives the call; trampoline matches CleanupFn.
        unsafe {
            vsched_testcancel(trampoline, self as *const Cancel as *mut c_void)
        };
    }

    /// A futex wait that a cancellation can interrupt. `sleepers` was
    /// incremented by the caller and is decremented again if cancelled.
    pub fn futex_wait(
        &self,
        word: &AtomicU32,
        expected: u32,
        sleepers: &AtomicU32,
        deadline: Option<&crate::clock::Deadline>,
        shared: bool,
    ) -> WaitResult {
        #[cfg(loom)]
        {
            let _ = sleepers;
            crate::shim::futex_wait(word, expected, deadline, shared)
        }
        #[cfg(not(loom))]
        {
            let (op, ts) = crate::futex::wait_op(deadline, shared);
            self.sleepers.set(sleepers);
            crate::load::sleeping_begin();
            // SAFETY: word and ts are valid for the call; self outlives it.
            let rc = unsafe {
                vsched_futex_wait_cancelable(
                    word.as_ptr(),
                    op,
                    expected,
                    ts,
                    crate::futex::BITSET_MATCH_ANY,
                    trampoline,
                    self as *const Cancel as *mut c_void,
                )
            };
            self.sleepers.set(core::ptr::null());
            // A private word's waker counted the thread it woke: see
            // load::woken.
            crate::load::sleeping_end(rc == 0 && !shared);
            if rc == 0 {
                WaitResult::Woken
            } else {
                crate::futex::result_of_errno(-rc as i32)
            }
        }
    }
}
