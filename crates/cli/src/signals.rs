//! Ctrl-C and SIGTERM as a flag: long-running commands (`probe --watch`,
//! `lab`, `spin-detect`) check it and end cleanly, undoing what they set up.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set once SIGINT or SIGTERM arrived (after `catch`).
pub static STOP: AtomicBool = AtomicBool::new(false);
static LAST: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to `STOP` instead of ending the process.
pub fn catch() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to atomics, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Blocks SIGINT and SIGTERM on the calling thread, so that the kernel
/// hands them to a thread that waits for them (the main thread's wait for
/// the program ends at once on a handled signal). The flag is process-wide:
/// this thread still sees `stopped()`.
pub fn leave_to_other_threads() {
    // SAFETY: the set is initialised by sigemptyset before use; blocking
    // signals on this thread has no memory effects.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The signal that set `STOP` (0 if none).
pub fn last() -> i32 {
    LAST.load(Ordering::SeqCst)
}
