//! The calling thread's kernel thread id, cached: owners of mutexes and
//! rwlocks are recorded by tid, as glibc does.

use core::cell::Cell;

#[cfg(not(loom))]
thread_local! {
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// Where glibc keeps the thread's kernel tid: in its thread descriptor
/// (`struct pthread`), at this offset from the thread pointer (%fs) on
/// x86-64, since glibc 2.26 (glibc's own mutexes read `%fs:0x2d0`; checked
/// on Debian 12's 2.36). Reading it is one load; a thread-local variable
/// of a preloaded library is a call to __tls_get_addr, which made a
/// recursive mutex's lock and unlock 2-3x glibc's cost.
#[cfg(all(not(loom), target_arch = "x86_64"))]
const GLIBC_TID_OFFSET: usize = 0x2d0;

/// The descriptor holds this thread's tid where expected (checked once,
/// at start-up, against gettid); otherwise the thread-local cache serves.
#[cfg(not(loom))]
static TID_IN_DESCRIPTOR: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// Checks where glibc keeps the tid (library constructor).
#[cfg(not(loom))]
pub fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: gettid has no failure mode; descriptor_tid's contract
        // holds in a thread created by glibc (this one runs its constructors).
        let matches = unsafe { descriptor_tid() == libc::gettid() };
        TID_IN_DESCRIPTOR.store(matches, core::sync::atomic::Ordering::Relaxed);
    }
}

/// The tid field of the calling thread's glibc descriptor.
///
/// # Safety
/// The thread must have been created by glibc (its %fs points to a
/// `struct pthread`, which is larger than GLIBC_TID_OFFSET + 4).
#[cfg(all(not(loom), target_arch = "x86_64"))]
#[inline]
unsafe fn descriptor_tid() -> i32 {
    let tid: i32;
    // SAFETY: a 4-byte load from the thread's own descriptor (caller's
    // contract); it touches no other memory, no stack, no flags.
    unsafe {
        core::arch::asm!(
            "mov {tid:e}, dword ptr fs:[{off}]",
            tid = out(reg) tid,
            off = const GLIBC_TID_OFFSET,
            options(nostack, readonly, preserves_flags)
        );
    }
    tid
}

#[cfg(not(loom))]
#[inline]
pub fn current() -> i32 {
    #[cfg(target_arch = "x86_64")]
    if TID_IN_DESCRIPTOR.load(core::sync::atomic::Ordering::Relaxed) {
        // SAFETY: checked at start-up that glibc's descriptor holds the
        // tid there; every thread of the program is glibc's.
        return unsafe { descriptor_tid() };
    }
    cached()
}

#[cfg(not(loom))]
fn cached() -> i32 {
    TID.with(|cached| {
        let tid = cached.get();
        if tid != 0 {
            return tid;
        }
        // SAFETY: gettid has no failure mode.
        let tid = unsafe { libc::gettid() };
        cached.set(tid);
        tid
    })
}

/// The child of fork() has a new tid; its one thread must not keep the
/// parent's (registered with pthread_atfork by the constructor). glibc's
/// fork updates its own descriptor's tid.
#[cfg(not(loom))]
pub fn forget() {
    TID.with(|cached| cached.set(0));
}

#[cfg(loom)]
loom::thread_local! {
    static TID: Cell<i32> = Cell::new(0);
}

#[cfg(loom)]
pub fn current() -> i32 {
    use core::sync::atomic::{AtomicI32, Ordering::Relaxed};
    static NEXT: AtomicI32 = AtomicI32::new(1);
    TID.with(|cached| {
        if cached.get() == 0 {
            cached.set(NEXT.fetch_add(1, Relaxed));
        }
        cached.get()
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn both_ways_give_the_kernel_tid_in_every_thread() {
        init();
        let check = || {
            // SAFETY: gettid has no failure mode.
            let tid = unsafe { libc::gettid() };
            assert_eq!(current(), tid);
            assert_eq!(cached(), tid);
        };
        check();
        std::thread::spawn(check).join().unwrap();
        #[cfg(target_arch = "x86_64")]
        assert!(
            TID_IN_DESCRIPTOR.load(core::sync::atomic::Ordering::Relaxed),
            "glibc keeps the tid at %fs:{GLIBC_TID_OFFSET:#x} (a new glibc layout? then the cache serves, slower)"
        );
    }
}
