//! The calling thread's kernel thread id, cached: owners of mutexes and
//! rwlocks are recorded by tid, as glibc does.

use core::cell::Cell;

#[cfg(not(loom))]
thread_local! {
    static TID: Cell<i32> = const { Cell::new(0) };
}

#[cfg(not(loom))]
pub fn current() -> i32 {
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
/// parent's (registered with pthread_atfork by the constructor).
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
