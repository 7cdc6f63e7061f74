//! Ctrl-C and SIGTERM as a flag: long-running commands (`probe --watch`,
//! `lab`) check it and end cleanly, undoing what they set up.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once SIGINT or SIGTERM arrived (after `catch`).
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to `STOP` instead of ending the process.
pub fn catch() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
