//! Read-write locks, reader-preferring by default as glibc's (a reader may
//! re-enter while a writer waits); writer-preferring for the
//! PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP kind.
//!
//! `state` counts readers, with a writer bit. Waiters of both kinds watch
//! one sequence number that every release bumps when someone waits, through
//! the shared backoff policy; a release wakes all sleepers (a writer's
//! release may let every reader in).
//!
//! Offsets 24 (writer's tid), 28 (process-shared) and 48 (kind) are
//! glibc's, so the static initialisers keep their meaning.

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::clock::{BadDeadline, Deadline};
use crate::futex::WaitResult;
use crate::shim::{fence, AtomicI32, AtomicU32};
use core::sync::atomic::Ordering::*;

const WRITER: u32 = 1 << 31;
const MAX_READERS: u32 = WRITER - 1;
/// glibc's PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP.
pub const KIND_PREFER_WRITER: u32 = 2;

#[repr(C)]
pub struct RawRwLock {
    pub state: AtomicU32,
    pub seq: AtomicU32,
    pub sleepers: AtomicU32,
    /// Threads inside a waiting rdlock/wrlock (releases skip the bump without).
    pub waiting: AtomicU32,
    pub writers_waiting: AtomicU32,
    _pad: AtomicU32,
    pub writer: AtomicI32,
    pub shared: AtomicU32,
    _pad2: [AtomicU32; 4],
    pub kind: AtomicU32,
}

pub type Timeout = Option<Result<Deadline, BadDeadline>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

impl RawRwLock {
    #[cfg(any(test, loom))]
    pub fn new(kind: u32) -> Self {
        RawRwLock {
            state: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            writers_waiting: AtomicU32::new(0),
            _pad: AtomicU32::new(0),
            writer: AtomicI32::new(0),
            shared: AtomicU32::new(0),
            _pad2: [
                AtomicU32::new(0),
                AtomicU32::new(0),
                AtomicU32::new(0),
                AtomicU32::new(0),
            ],
            kind: AtomicU32::new(kind),
        }
    }

    fn is_shared(&self) -> bool {
        self.shared.load(Relaxed) != 0
    }

    /// One attempt: Ok(true) acquired, Ok(false) must wait, Err(errno).
    fn try_read(&self, writers_first: bool) -> Result<bool, i32> {
        let mut state = self.state.load(Relaxed);
        loop {
            if state & WRITER != 0 {
                if self.writer.load(Relaxed) == crate::tid::current() {
                    return Err(libc::EDEADLK);
                }
                return Ok(false);
            }
            if writers_first && self.writers_waiting.load(Relaxed) > 0 {
                return Ok(false);
            }
            if state == MAX_READERS {
                return Err(libc::EAGAIN);
            }
            match self
                .state
                .compare_exchange_weak(state, state + 1, Acquire, Relaxed)
            {
                Ok(_) => return Ok(true),
                Err(now) => state = now,
            }
        }
    }

    fn try_write(&self) -> Result<bool, i32> {
        if self
            .state
            .compare_exchange(0, WRITER, Acquire, Relaxed)
            .is_ok()
        {
            self.writer.store(crate::tid::current(), Relaxed);
            return Ok(true);
        }
        if self.state.load(Relaxed) & WRITER != 0
            && self.writer.load(Relaxed) == crate::tid::current()
        {
            return Err(libc::EDEADLK);
        }
        Ok(false)
    }

    fn try_mode(&self, mode: Mode) -> Result<bool, i32> {
        match mode {
            Mode::Read => self.try_read(self.kind.load(Relaxed) == KIND_PREFER_WRITER),
            Mode::Write => self.try_write(),
        }
    }

    pub fn tryrdlock(&self) -> i32 {
        // As glibc: a writer-preferring lock refuses readers while a writer
        // waits, and a try never reports EDEADLK.
        match self.try_read(self.kind.load(Relaxed) == KIND_PREFER_WRITER) {
            Ok(true) => 0,
            Ok(false) | Err(libc::EDEADLK) => libc::EBUSY,
            Err(e) => e,
        }
    }

    pub fn trywrlock(&self) -> i32 {
        match self.try_write() {
            Ok(true) => 0,
            Ok(false) => libc::EBUSY,
            Err(libc::EDEADLK) => libc::EBUSY,
            Err(e) => e,
        }
    }

    pub fn rdlock(&self, timeout: Timeout) -> i32 {
        self.lock(Mode::Read, timeout)
    }

    pub fn wrlock(&self, timeout: Timeout) -> i32 {
        self.lock(Mode::Write, timeout)
    }

    fn lock(&self, mode: Mode, timeout: Timeout) -> i32 {
        match self.try_mode(mode) {
            Ok(true) => return 0,
            Ok(false) => {}
            Err(e) => return e,
        }
        let deadline = match timeout {
            None => None,
            Some(Ok(d)) => Some(d),
            Some(Err(BadDeadline::Invalid)) => return libc::EINVAL,
            Some(Err(BadDeadline::Passed)) => return libc::ETIMEDOUT,
        };
        self.waiting.fetch_add(1, SeqCst);
        if mode == Mode::Write {
            self.writers_waiting.fetch_add(1, SeqCst);
        }
        // Pairs with the fence in unlock: the unlocker sees us waiting, or
        // we see its release.
        fence(SeqCst);
        let result = self.wait_for(mode, deadline.as_ref());
        if mode == Mode::Write {
            // A reader held back by this writer must re-check.
            if self.writers_waiting.fetch_sub(1, SeqCst) == 1 && result != 0 {
                self.bump_and_wake();
            }
        }
        self.waiting.fetch_sub(1, SeqCst);
        result
    }

    fn wait_for(&self, mode: Mode, deadline: Option<&Deadline>) -> i32 {
        let mut backoff = Backoff::new(deadline);
        loop {
            // Read the sequence before trying: a release after a failed try
            // bumps it, so the sleep below cannot miss that release.
            let seq = self.seq.load(SeqCst);
            match self.try_mode(mode) {
                Ok(true) => {
                    backoff.done();
                    return 0;
                }
                Ok(false) => {}
                Err(e) => return e,
            }
            match backoff.pause() {
                Next::Retry => {}
                Next::TimedOut => return libc::ETIMEDOUT,
                Next::Sleep => {
                    let r = sleep_while(
                        &self.seq,
                        seq,
                        &self.sleepers,
                        deadline,
                        self.is_shared(),
                        None,
                    );
                    if r == WaitResult::TimedOut && self.try_mode(mode) != Ok(true) {
                        return libc::ETIMEDOUT;
                    } else if r == WaitResult::TimedOut {
                        return 0;
                    }
                }
            }
        }
    }

    pub fn unlock(&self) -> i32 {
        let state = self.state.load(Relaxed);
        if state & WRITER != 0 {
            self.writer.store(0, Relaxed);
            self.state.store(0, SeqCst);
        } else if state == 0 {
            return libc::EPERM;
        } else {
            let before = self.state.fetch_sub(1, SeqCst);
            if before != 1 {
                // Other readers still hold it: nobody can get in yet.
                return 0;
            }
        }
        fence(SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            self.bump_and_wake();
        }
        0
    }

    fn bump_and_wake(&self) {
        self.seq.fetch_add(1, SeqCst);
        wake(&self.seq, &self.sleepers, i32::MAX, self.is_shared());
    }

    /// Held by anyone (pthread_rwlock_destroy returns EBUSY then... glibc does not check).
    pub fn held(&self) -> bool {
        self.state.load(Relaxed) != 0
    }
}
