//! Mutexes of the normal, errorcheck, recursive and adaptive kinds.
//!
//! The layout and lock-word protocol are glibc's (0 free, 1 locked, 2 locked
//! and maybe sleepers; owner tid and recursion count beside it), so a mutex
//! initialised by glibc or statically works, and glibc-internal users of the
//! same word would still interoperate. Only the waiting differs: see
//! backoff.rs. Robust, PI, PP and process-shared kinds never reach this
//! module (exports.rs forwards them to glibc).

use crate::lockword::{self, Timeout, UNLOCKED};
use crate::shim::{AtomicI32, AtomicU32};
use core::sync::atomic::Ordering::*;

/// glibc's `__kind`: the type in the low two bits, flags above.
pub const KIND_NORMAL: i32 = 0;
pub const KIND_RECURSIVE: i32 = 1;
pub const KIND_ERRORCHECK: i32 = 2;
const KIND_TYPE_MASK: i32 = 3;
/// Robust (16), priority inheritance (32), priority protect (64),
/// process-shared (128): handed to glibc. A destroyed mutex (-1) too.
pub const KIND_GLIBC_ONLY: i32 = 16 | 32 | 64 | 128;

/// The first 20 bytes of glibc's `struct __pthread_mutex_s`.
#[repr(C)]
pub struct RawMutex {
    pub lock: AtomicU32,
    pub count: AtomicU32,
    pub owner: AtomicI32,
    pub nusers: AtomicU32,
    pub kind: AtomicI32,
}

impl RawMutex {
    #[cfg(any(test, loom))]
    pub fn new(kind: i32) -> Self {
        RawMutex {
            lock: AtomicU32::new(0),
            count: AtomicU32::new(0),
            owner: AtomicI32::new(0),
            nusers: AtomicU32::new(0),
            kind: AtomicI32::new(kind),
        }
    }

    #[inline]
    pub fn handled_by_glibc(&self) -> bool {
        self.kind.load(Relaxed) & KIND_GLIBC_ONLY != 0
    }

    #[inline]
    fn kind_type(&self) -> i32 {
        self.kind.load(Relaxed) & KIND_TYPE_MASK
    }

    /// Recursive and errorcheck mutexes need their owner's thread id;
    /// normal and adaptive ones do not, and skip it: reading the cached
    /// thread id is a thread-local access, which in a preloaded library is
    /// a function call (glibc records the owner of every kind; a debugger
    /// sees 0 for these).
    #[inline]
    fn tracks_owner(&self) -> bool {
        matches!(self.kind_type(), KIND_RECURSIVE | KIND_ERRORCHECK)
    }

    #[inline]
    pub fn lock(&self, timeout: Timeout) -> i32 {
        if !self.tracks_owner() {
            return match lockword::acquire(&self.lock, timeout, false) {
                Ok(()) => {
                    self.count_user(1);
                    0
                }
                Err(e) => e,
            };
        }
        let me = crate::tid::current();
        if let Some(err) = self.relock_by_owner(me, libc::EDEADLK) {
            return err;
        }
        match lockword::acquire(&self.lock, timeout, false) {
            Ok(()) => {
                self.became_owner(me);
                0
            }
            Err(e) => e,
        }
    }

    #[inline]
    pub fn trylock(&self) -> i32 {
        if !self.tracks_owner() {
            if !lockword::try_acquire(&self.lock) {
                return libc::EBUSY;
            }
            self.count_user(1);
            return 0;
        }
        let me = crate::tid::current();
        if let Some(err) = self.relock_by_owner(me, libc::EBUSY) {
            return err;
        }
        if !lockword::try_acquire(&self.lock) {
            return libc::EBUSY;
        }
        self.became_owner(me);
        0
    }

    #[inline]
    pub fn unlock(&self) -> i32 {
        let kind = self.kind_type();
        if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
            if self.owner.load(Relaxed) != crate::tid::current()
                || self.lock.load(Relaxed) == UNLOCKED
            {
                return libc::EPERM;
            }
            if kind == KIND_RECURSIVE {
                let depth = self.count.load(Relaxed) - 1;
                self.count.store(depth, Relaxed);
                if depth > 0 {
                    return 0;
                }
            }
            self.owner.store(0, Relaxed);
        }
        self.count_user(-1);
        lockword::release(&self.lock, false);
        0
    }

    /// pthread_cond_wait's release: as unlock, but the mutex stays "in
    /// use" (pthread_mutex_destroy refuses it, as glibc), and a recursive
    /// mutex held more than once keeps its lock, as in glibc: Ok(false).
    pub fn release_for_cond(&self) -> Result<bool, i32> {
        let kind = self.kind_type();
        if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
            if self.owner.load(Relaxed) != crate::tid::current()
                || self.lock.load(Relaxed) == UNLOCKED
            {
                return Err(libc::EPERM);
            }
            if kind == KIND_RECURSIVE {
                let depth = self.count.load(Relaxed) - 1;
                self.count.store(depth, Relaxed);
                if depth > 0 {
                    return Ok(false);
                }
            }
            self.owner.store(0, Relaxed);
        }
        lockword::release(&self.lock, false);
        Ok(true)
    }

    /// Takes the mutex back after a condition wait (see release_for_cond).
    pub fn reacquire_for_cond(&self, released: bool) {
        if !released {
            // A recursive mutex that was never let go: restore its level.
            self.count.store(self.count.load(Relaxed) + 1, Relaxed);
            return;
        }
        // Without a deadline the lock cannot fail.
        let _ = lockword::acquire(&self.lock, None, false);
        if self.tracks_owner() {
            self.owner.store(crate::tid::current(), Relaxed);
            if self.kind_type() == KIND_RECURSIVE {
                self.count.store(1, Relaxed);
            }
        }
    }

    /// What a lock or trylock by the current owner returns, if anything.
    fn relock_by_owner(&self, me: i32, errorcheck_result: i32) -> Option<i32> {
        if self.owner.load(Relaxed) != me {
            return None;
        }
        match self.kind_type() {
            KIND_RECURSIVE => {
                let depth = self.count.load(Relaxed);
                if depth == u32::MAX {
                    return Some(libc::EAGAIN);
                }
                self.count.store(depth + 1, Relaxed);
                Some(0)
            }
            KIND_ERRORCHECK => Some(errorcheck_result),
            _ => None,
        }
    }

    fn became_owner(&self, me: i32) {
        self.owner.store(me, Relaxed);
        self.count_user(1);
        if self.kind_type() == KIND_RECURSIVE {
            self.count.store(1, Relaxed);
        }
    }

    /// glibc's `__nusers` (pthread_mutex_destroy refuses a mutex in use),
    /// updated by the holder only.
    #[inline]
    fn count_user(&self, delta: i32) {
        let users = self.nusers.load(Relaxed);
        self.nusers.store(users.wrapping_add_signed(delta), Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::{BadDeadline, Deadline};
    use crate::lockword::LOCKED;

    #[test]
    fn recursive_counts_and_errorcheck_refuses() {
        let m = RawMutex::new(KIND_RECURSIVE);
        assert_eq!(m.lock(None), 0);
        assert_eq!(m.lock(None), 0);
        assert_eq!(m.trylock(), 0);
        assert_eq!(m.unlock(), 0);
        assert_eq!(m.unlock(), 0);
        assert_eq!(m.lock.load(Relaxed), LOCKED);
        assert_eq!(m.unlock(), 0);
        assert_eq!(m.lock.load(Relaxed), UNLOCKED);
        assert_eq!(m.unlock(), libc::EPERM);

        let e = RawMutex::new(KIND_ERRORCHECK);
        assert_eq!(e.unlock(), libc::EPERM);
        assert_eq!(e.lock(None), 0);
        assert_eq!(e.lock(None), libc::EDEADLK);
        assert_eq!(e.trylock(), libc::EBUSY);
        assert_eq!(e.unlock(), 0);
    }

    #[test]
    fn timed_lock_checks_its_deadline_only_when_it_must_wait() {
        let m = RawMutex::new(KIND_NORMAL);
        assert_eq!(m.lock(Some(Err(BadDeadline::Invalid))), 0);
        assert_eq!(m.lock(Some(Err(BadDeadline::Invalid))), libc::EINVAL);
        assert_eq!(m.lock(Some(Err(BadDeadline::Passed))), libc::ETIMEDOUT);
        let soon = crate::clock::now(libc::CLOCK_MONOTONIC);
        let d = Deadline {
            clock: libc::CLOCK_MONOTONIC,
            at: libc::timespec {
                tv_sec: soon.tv_sec,
                tv_nsec: soon.tv_nsec,
            },
        };
        assert_eq!(m.lock(Some(Ok(d))), libc::ETIMEDOUT);
    }

    #[test]
    fn excludes_under_contention() {
        use std::sync::Arc;
        let m = Arc::new(RawMutex::new(KIND_NORMAL));
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (m, counter) = (m.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        assert_eq!(m.lock(None), 0);
                        // A non-atomic read-modify-write, protected by the mutex.
                        let v = counter.load(Relaxed);
                        counter.store(v + 1, Relaxed);
                        assert_eq!(m.unlock(), 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(counter.load(Relaxed), 160_000);
    }
}
