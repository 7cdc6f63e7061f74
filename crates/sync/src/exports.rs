//! The C entry points that replace glibc's when the library is preloaded.
//! Each casts the caller's pthread object to the runtime's view of it and
//! translates between POSIX return conventions and the protocol modules.
//!
//! `extern "C-unwind"`: a cancellation (a forced unwind) may pass through
//! the cancellation points among them (see cancel.rs).
//!
//! # Safety contract
//! Every export has the contract of the POSIX function it replaces, and no
//! more: object pointers point to live objects of the named pthread/sem
//! type (initialised where POSIX requires it), attribute pointers are null
//! or point to initialised attributes, `abstime` points to a timespec. A
//! caller that breaks it has undefined behaviour under glibc too. The
//! runtime's view of each object is an `Overlay` of glibc's storage, whose
//! size and alignment are checked at compile time.

// The contract is POSIX's and stated once above rather than on each of the
// fifty exports.
#![allow(clippy::missing_safety_doc)]

use crate::barrier::RawBarrier;
use crate::clock::{clock_supported, BadDeadline, Deadline};
use crate::cond::{CondMutex, RawCond};
use crate::mutex::RawMutex;
use crate::real;
use crate::rwlock::RawRwLock;
use crate::sem::{RawSem, FUTEX_PRIVATE, FUTEX_SHARED, VALUE_MAX};
use crate::spin::RawSpin;
use core::ffi::{c_int, c_uint};
use core::sync::atomic::Ordering::Relaxed;
use libc::{
    clockid_t, pthread_barrier_t, pthread_barrierattr_t, pthread_cond_t, pthread_condattr_t,
    pthread_mutex_t, pthread_mutexattr_t, pthread_rwlock_t, pthread_rwlockattr_t,
    pthread_spinlock_t, sem_t, timespec,
};

/// A runtime type that lives inside the storage of glibc's object `C`.
///
/// # Safety
/// Implement only through `overlay!`, which checks that `Self` fits in `C`
/// and needs no stricter alignment; `Self` must consist of atomics only, so
/// that any bytes a program left in its object are a valid `Self` and
/// shared references from several threads may alias.
unsafe trait Overlay<C> {}

macro_rules! overlay {
    ($raw:ty, $c:ty) => {
        const _: () = {
            assert!(core::mem::size_of::<$raw>() <= core::mem::size_of::<$c>());
            assert!(core::mem::align_of::<$raw>() <= core::mem::align_of::<$c>());
        };
        // SAFETY: size and alignment are asserted just above; the type is
        // made of atomics (see its definition).
        unsafe impl Overlay<$c> for $raw {}
    };
}

overlay!(RawMutex, pthread_mutex_t);
overlay!(RawCond, pthread_cond_t);
overlay!(RawBarrier, pthread_barrier_t);
overlay!(RawRwLock, pthread_rwlock_t);
overlay!(RawSpin, pthread_spinlock_t);
overlay!(RawSem, sem_t);

/// The runtime's view of the caller's object.
///
/// # Safety
/// `p` must point to a live `C` for `'a` (the export's POSIX contract).
unsafe fn view<'a, T: Overlay<C>, C>(p: *mut C) -> &'a T {
    debug_assert!(p.is_aligned(), "misaligned pthread object {p:p}");
    // SAFETY: `p` points to a live `C` (caller); `T` fits in `C` in size and
    // alignment and is made of atomics (`Overlay`), so a shared reference
    // is valid whatever the object holds and whoever else views it.
    unsafe { &*p.cast::<T>() }
}

fn set_errno(e: c_int) -> c_int {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// A deadline a timed wait will use; a deadline in the past becomes one at
/// the epoch, so the wait times out after its first attempt, as glibc's does.
fn timed(clock: clockid_t, at: *const timespec) -> Result<Deadline, BadDeadline> {
    // SAFETY: POSIX requires a valid abstime pointer.
    match Deadline::checked(clock, unsafe { &*at }) {
        Err(BadDeadline::Passed) => Ok(Deadline {
            clock,
            at: timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        }),
        other => other,
    }
}

// ---------------------------------------------------------------- mutexes

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
) -> c_int {
    // glibc validates the attributes and writes the kind; the rest is zero.
    // SAFETY: forwarded unchanged to glibc under the same contract.
    unsafe { real::mutex_init(m, a) }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded unchanged to glibc under the same contract.
    unsafe { real::mutex_destroy(m) }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller passes a live mutex (the export's contract).
    let raw: &RawMutex = unsafe { view(m) };
    if raw.handled_by_glibc() {
        // SAFETY: forwarded unchanged to glibc under the same contract.
        return unsafe { real::mutex_lock(m) };
    }
    raw.lock(None)
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller passes a live mutex (the export's contract).
    let raw: &RawMutex = unsafe { view(m) };
    if raw.handled_by_glibc() {
        // SAFETY: forwarded unchanged to glibc under the same contract.
        return unsafe { real::mutex_trylock(m) };
    }
    raw.trylock()
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: the caller passes a live mutex (the export's contract).
    let raw: &RawMutex = unsafe { view(m) };
    if raw.handled_by_glibc() {
        // SAFETY: forwarded unchanged to glibc under the same contract.
        return unsafe { real::mutex_timedlock(m, at) };
    }
    raw.lock(Some(timed(libc::CLOCK_REALTIME, at)))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: the caller passes a live mutex (the export's contract).
    let raw: &RawMutex = unsafe { view(m) };
    if raw.handled_by_glibc() {
        // SAFETY: forwarded unchanged to glibc under the same contract.
        return unsafe { real::mutex_clocklock(m, clock, at) };
    }
    if !clock_supported(clock) {
        return libc::EINVAL;
    }
    raw.lock(Some(timed(clock, at)))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: the caller passes a live mutex (the export's contract).
    let raw: &RawMutex = unsafe { view(m) };
    if raw.handled_by_glibc() {
        // SAFETY: forwarded unchanged to glibc under the same contract.
        return unsafe { real::mutex_unlock(m) };
    }
    raw.unlock()
}

// ------------------------------------------------------- condition variables

/// The mutex of a condition wait, whichever of glibc or the runtime owns it.
struct WaitMutex(*mut pthread_mutex_t);

impl WaitMutex {
    fn raw(&self) -> &RawMutex {
        // SAFETY: WaitMutex is only made from the mutex a caller of
        // pthread_cond_*wait passes, live for the whole wait.
        unsafe { view(self.0) }
    }
}

impl CondMutex for WaitMutex {
    fn release_for_wait(&self) -> Result<bool, i32> {
        if self.raw().handled_by_glibc() {
            // SAFETY: a live mutex.
            return match unsafe { real::mutex_unlock(self.0) } {
                0 => Ok(true),
                e => Err(e),
            };
        }
        self.raw().release_for_cond()
    }

    fn reacquire(&self, released: bool) -> i32 {
        if self.raw().handled_by_glibc() {
            // SAFETY: a live mutex. EOWNERDEAD is passed on to the caller.
            return unsafe { real::mutex_lock(self.0) };
        }
        self.raw().reacquire_for_cond(released);
        0
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_init(
    c: *mut pthread_cond_t,
    a: *const pthread_condattr_t,
) -> c_int {
    let mut flags = 0;
    if !a.is_null() {
        let (mut clock, mut pshared): (clockid_t, c_int) = (libc::CLOCK_REALTIME, 0);
        // SAFETY: a non-null attribute object the caller initialised, and locals to write to.
        unsafe {
            libc::pthread_condattr_getclock(a, &mut clock);
            libc::pthread_condattr_getpshared(a, &mut pshared);
        }
        if clock == libc::CLOCK_MONOTONIC {
            flags |= crate::cond::FLAG_MONOTONIC;
        }
        if pshared == libc::PTHREAD_PROCESS_SHARED {
            flags |= crate::cond::FLAG_SHARED;
        }
    }
    // SAFETY: init may overwrite the whole object, which the caller passes writable.
    unsafe { core::ptr::write_bytes(c, 0, 1) };
    // SAFETY: the object was zeroed just above, a valid (unlocked, empty) state.
    let raw: &RawCond = unsafe { view(c) };
    raw.flags.store(flags, Relaxed);
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    unsafe { view::<RawCond, _>(c) }.destroy();
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    let raw: &RawCond = unsafe { view(c) };
    raw.wait(&WaitMutex(m), None)
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    let raw: &RawCond = unsafe { view(c) };
    match timed(raw.clock(), at) {
        Ok(d) => raw.wait(&WaitMutex(m), Some(&d)),
        Err(_) => libc::EINVAL,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    let raw: &RawCond = unsafe { view(c) };
    match timed(clock, at) {
        Ok(d) => raw.wait(&WaitMutex(m), Some(&d)),
        Err(_) => libc::EINVAL,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    unsafe { view::<RawCond, _>(c) }.signal();
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: the caller passes a live condition variable (the export's contract).
    unsafe { view::<RawCond, _>(c) }.broadcast();
    0
}

// ---------------------------------------------------------------- barriers

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_barrier_init(
    b: *mut pthread_barrier_t,
    a: *const pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    // glibc's limit: counts from INT_MAX up are refused.
    if count == 0 || count >= i32::MAX as c_uint {
        return libc::EINVAL;
    }
    let mut pshared: c_int = 0;
    if !a.is_null() {
        // SAFETY: a non-null attribute object the caller initialised.
        unsafe { libc::pthread_barrierattr_getpshared(a, &mut pshared) };
    }
    // SAFETY: init may overwrite the whole object, which the caller passes writable.
    unsafe { core::ptr::write_bytes(b, 0, 1) };
    // SAFETY: the object was zeroed just above, a valid (unlocked, empty) state.
    let raw: &RawBarrier = unsafe { view(b) };
    raw.count.store(count, Relaxed);
    if pshared == libc::PTHREAD_PROCESS_SHARED {
        raw.flags.store(crate::barrier::FLAG_SHARED, Relaxed);
    }
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_barrier_destroy(b: *mut pthread_barrier_t) -> c_int {
    // SAFETY: the caller passes a live barrier (the export's contract).
    unsafe { view::<RawBarrier, _>(b) }.destroy()
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int {
    // SAFETY: the caller passes a live barrier (the export's contract).
    if unsafe { view::<RawBarrier, _>(b) }.wait() {
        libc::PTHREAD_BARRIER_SERIAL_THREAD
    } else {
        0
    }
}

// -------------------------------------------------------------- spinlocks

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_spin_init(
    s: *mut pthread_spinlock_t,
    _pshared: c_int,
) -> c_int {
    // SAFETY: init may overwrite the whole object, which the caller passes writable.
    unsafe { core::ptr::write_bytes(s, 0, 1) };
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_spin_destroy(_s: *mut pthread_spinlock_t) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_spin_lock(s: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: the caller passes a live spinlock (the export's contract).
    unsafe { view::<RawSpin, _>(s) }.lock();
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_spin_trylock(s: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: the caller passes a live spinlock (the export's contract).
    if unsafe { view::<RawSpin, _>(s) }.trylock() {
        0
    } else {
        libc::EBUSY
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_spin_unlock(s: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: the caller passes a live spinlock (the export's contract).
    unsafe { view::<RawSpin, _>(s) }.unlock();
    0
}

// ------------------------------------------------------------------ rwlocks

extern "C" {
    fn pthread_rwlockattr_getkind_np(a: *const pthread_rwlockattr_t, kind: *mut c_int) -> c_int;
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_init(
    rw: *mut pthread_rwlock_t,
    a: *const pthread_rwlockattr_t,
) -> c_int {
    let (mut kind, mut pshared): (c_int, c_int) = (0, 0);
    if !a.is_null() {
        // SAFETY: a non-null attribute object the caller initialised, and locals to write to.
        unsafe {
            pthread_rwlockattr_getkind_np(a, &mut kind);
            libc::pthread_rwlockattr_getpshared(a, &mut pshared);
        }
    }
    // SAFETY: init may overwrite the whole object, which the caller passes writable.
    unsafe { core::ptr::write_bytes(rw, 0, 1) };
    // SAFETY: the object was zeroed just above, a valid (unlocked, empty) state.
    let raw: &RawRwLock = unsafe { view(rw) };
    raw.kind.store(kind as u32, Relaxed);
    raw.shared
        .store(u32::from(pshared == libc::PTHREAD_PROCESS_SHARED), Relaxed);
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_destroy(_rw: *mut pthread_rwlock_t) -> c_int {
    0
}

/// glibc checks a timed rwlock's clock and abstime before trying.
fn rw_timed(clock: clockid_t, at: *const timespec) -> Result<Deadline, c_int> {
    timed(clock, at).map_err(|_| libc::EINVAL)
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_rdlock(rw: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller passes a live rwlock (the export's contract).
    unsafe { view::<RawRwLock, _>(rw) }.rdlock(None)
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_tryrdlock(rw: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller passes a live rwlock (the export's contract).
    unsafe { view::<RawRwLock, _>(rw) }.tryrdlock()
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_timedrdlock(
    rw: *mut pthread_rwlock_t,
    at: *const timespec,
) -> c_int {
    match rw_timed(libc::CLOCK_REALTIME, at) {
        // SAFETY: the caller passes a live rwlock (the export's contract).
        Ok(d) => unsafe { view::<RawRwLock, _>(rw) }.rdlock(Some(Ok(d))),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_clockrdlock(
    rw: *mut pthread_rwlock_t,
    clock: clockid_t,
    at: *const timespec,
) -> c_int {
    match rw_timed(clock, at) {
        // SAFETY: the caller passes a live rwlock (the export's contract).
        Ok(d) => unsafe { view::<RawRwLock, _>(rw) }.rdlock(Some(Ok(d))),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_wrlock(rw: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller passes a live rwlock (the export's contract).
    unsafe { view::<RawRwLock, _>(rw) }.wrlock(None)
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_trywrlock(rw: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller passes a live rwlock (the export's contract).
    unsafe { view::<RawRwLock, _>(rw) }.trywrlock()
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_timedwrlock(
    rw: *mut pthread_rwlock_t,
    at: *const timespec,
) -> c_int {
    match rw_timed(libc::CLOCK_REALTIME, at) {
        // SAFETY: the caller passes a live rwlock (the export's contract).
        Ok(d) => unsafe { view::<RawRwLock, _>(rw) }.wrlock(Some(Ok(d))),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_clockwrlock(
    rw: *mut pthread_rwlock_t,
    clock: clockid_t,
    at: *const timespec,
) -> c_int {
    match rw_timed(clock, at) {
        // SAFETY: the caller passes a live rwlock (the export's contract).
        Ok(d) => unsafe { view::<RawRwLock, _>(rw) }.wrlock(Some(Ok(d))),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_unlock(rw: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller passes a live rwlock (the export's contract).
    unsafe { view::<RawRwLock, _>(rw) }.unlock()
}

// -------------------------------------------------------------- semaphores

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_init(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int {
    if value > VALUE_MAX {
        return set_errno(libc::EINVAL);
    }
    // SAFETY: init may overwrite the whole object, which the caller passes writable.
    unsafe { core::ptr::write_bytes(s, 0, 1) };
    // SAFETY: the object was zeroed just above, a valid (unlocked, empty) state.
    let raw: &RawSem = unsafe { view(s) };
    raw.value.store(value, Relaxed);
    raw.private.store(
        if pshared != 0 {
            FUTEX_SHARED
        } else {
            FUTEX_PRIVATE
        },
        Relaxed,
    );
    0
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_destroy(s: *mut sem_t) -> c_int {
    // SAFETY: the caller passes a live semaphore (the export's contract).
    unsafe { view::<RawSem, _>(s) }.destroy();
    0
}

fn sem_result(e: c_int) -> c_int {
    if e == 0 {
        0
    } else {
        set_errno(e)
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_wait(s: *mut sem_t) -> c_int {
    // SAFETY: the caller passes a live semaphore (the export's contract).
    sem_result(unsafe { view::<RawSem, _>(s) }.wait(None))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_trywait(s: *mut sem_t) -> c_int {
    // SAFETY: the caller passes a live semaphore (the export's contract).
    if unsafe { view::<RawSem, _>(s) }.try_wait() {
        0
    } else {
        set_errno(libc::EAGAIN)
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_timedwait(s: *mut sem_t, at: *const timespec) -> c_int {
    match timed(libc::CLOCK_REALTIME, at) {
        // SAFETY: the caller passes a live semaphore (the export's contract).
        Ok(d) => sem_result(unsafe { view::<RawSem, _>(s) }.wait(Some(&d))),
        Err(_) => set_errno(libc::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_clockwait(
    s: *mut sem_t,
    clock: clockid_t,
    at: *const timespec,
) -> c_int {
    match timed(clock, at) {
        // SAFETY: the caller passes a live semaphore (the export's contract).
        Ok(d) => sem_result(unsafe { view::<RawSem, _>(s) }.wait(Some(&d))),
        Err(_) => set_errno(libc::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_post(s: *mut sem_t) -> c_int {
    // SAFETY: the caller passes a live semaphore (the export's contract).
    sem_result(unsafe { view::<RawSem, _>(s) }.post())
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_getvalue(s: *mut sem_t, value: *mut c_int) -> c_int {
    // SAFETY: a live semaphore and a writable int, as sem_getvalue requires.
    unsafe { *value = view::<RawSem, _>(s).value.load(Relaxed) as c_int };
    0
}
