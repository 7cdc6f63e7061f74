//! vsched's synchronisation runtime: glibc's pthread mutexes, condition
//! variables, barriers, spinlocks, read-write locks and semaphores,
//! re-implemented with a waiting policy made for oversubscribed vCPUs, and
//! preloaded into unmodified programs (`vsched exec`, or LD_PRELOAD).
//! See docs/sync.md.
//!
//! Rules for everything reachable from an exported function: no allocation,
//! no logging, no call to an interposed function; only atomics, the vDSO
//! clock and raw system calls.

// Under loom only the protocols are compiled in; the rest is unused.
#![cfg_attr(loom, allow(dead_code))]

pub mod admission;
pub mod backoff;
pub mod barrier;
pub mod cancel;
#[cfg(not(loom))]
pub mod channel;
pub mod clock;
pub mod cond;
pub mod config;
pub mod futex;
pub mod load;
pub mod lockword;
pub mod marks;
pub mod mutex;
pub mod rwlock;
pub mod sem;
pub mod shim;
pub mod spin;
pub mod stats;
pub mod tid;

#[cfg(not(loom))]
mod exports;
#[cfg(not(loom))]
mod lifecycle;
#[cfg(not(loom))]
mod real;

/// Tells a program (or a test) that the runtime is loaded.
#[cfg(not(loom))]
#[no_mangle]
pub extern "C" fn vsched_sync_version() -> *const core::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
