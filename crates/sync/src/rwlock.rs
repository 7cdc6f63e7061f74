//! Read-write locks, reader-preferring by default as glibc's (a reader may
//! re-enter while a writer waits); writer-preferring for the
//! PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP kind.
//!
//! One word, `state`, holds the reader count, a writer bit and a sleepers
//! bit, and is also the futex word. A release is a single atomic operation
//! on it (clearing the sleepers bit when it frees the lock), followed at
//! most by a futex wake, which touches no memory: so the lock can be
//! destroyed and freed by the next holder as soon as it is released.
//! Waiters go through the shared backoff policy; only sleepers set the
//! sleepers bit, so releases wake nobody while waiters merely yield.
//!
//! Offsets 24 (writer's tid), 28 (process-shared) and 48 (kind) are
//! glibc's, so the static initialisers keep their meaning.

use crate::backoff::{Backoff, Next};
use crate::clock::{BadDeadline, Deadline};
use crate::futex::WaitResult;
use crate::shim::{futex_wait, futex_wake, AtomicI32, AtomicU32};
use crate::stats::{bump, Counter};
use core::sync::atomic::Ordering::*;

const WRITER: u32 = 1 << 31;
const SLEEPERS: u32 = 1 << 30;
const READERS: u32 = SLEEPERS - 1;
/// glibc's PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP.
pub const KIND_PREFER_WRITER: u32 = 2;

#[repr(C)]
pub struct RawRwLock {
    pub state: AtomicU32,
    /// Writers inside a waiting wrlock (writer-preferring locks hold
    /// readers back while there are any).
    pub writers_waiting: AtomicU32,
    _pad: [AtomicU32; 4],
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
        let zero = || AtomicU32::new(0);
        RawRwLock {
            state: zero(),
            writers_waiting: zero(),
            _pad: [zero(), zero(), zero(), zero()],
            writer: AtomicI32::new(0),
            shared: zero(),
            _pad2: [zero(), zero(), zero(), zero()],
            kind: AtomicU32::new(kind),
        }
    }

    fn is_shared(&self) -> bool {
        self.shared.load(Relaxed) != 0
    }

    fn prefers_writers(&self) -> bool {
        self.kind.load(Relaxed) == KIND_PREFER_WRITER
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
            if state & READERS == READERS {
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
        let mut state = self.state.load(Relaxed);
        loop {
            if state & (WRITER | READERS) != 0 {
                if state & WRITER != 0 && self.writer.load(Relaxed) == crate::tid::current() {
                    return Err(libc::EDEADLK);
                }
                return Ok(false);
            }
            match self
                .state
                .compare_exchange_weak(state, state | WRITER, Acquire, Relaxed)
            {
                Ok(_) => {
                    self.writer.store(crate::tid::current(), Relaxed);
                    return Ok(true);
                }
                Err(now) => state = now,
            }
        }
    }

    fn try_mode(&self, mode: Mode) -> Result<bool, i32> {
        match mode {
            Mode::Read => self.try_read(self.prefers_writers()),
            Mode::Write => self.try_write(),
        }
    }

    pub fn tryrdlock(&self) -> i32 {
        // As glibc: a writer-preferring lock refuses readers while a writer
        // waits, and a try never reports EDEADLK.
        match self.try_read(self.prefers_writers()) {
            Ok(true) => 0,
            Ok(false) | Err(libc::EDEADLK) => libc::EBUSY,
            Err(e) => e,
        }
    }

    pub fn trywrlock(&self) -> i32 {
        match self.try_write() {
            Ok(true) => 0,
            Ok(false) | Err(libc::EDEADLK) => libc::EBUSY,
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
        if mode == Mode::Write {
            self.writers_waiting.fetch_add(1, SeqCst);
        }
        let result = self.wait_for(mode, deadline.as_ref());
        if mode == Mode::Write && self.writers_waiting.fetch_sub(1, SeqCst) == 1 && result != 0 {
            // Readers held back by this writer, some maybe asleep: let them
            // look again.
            wake_all(&self.state, self.is_shared());
        }
        result
    }

    fn wait_for(&self, mode: Mode, deadline: Option<&Deadline>) -> i32 {
        let mut backoff = Backoff::new(deadline);
        loop {
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
                    if self.sleep(deadline) == WaitResult::TimedOut {
                        return match self.try_mode(mode) {
                            Ok(true) => 0,
                            Ok(false) => {
                                bump(Counter::timeouts);
                                libc::ETIMEDOUT
                            }
                            Err(e) => e,
                        };
                    }
                }
            }
        }
    }

    /// Sleeps until the state changes, having set the sleepers bit so the
    /// release that frees the lock wakes us.
    fn sleep(&self, deadline: Option<&Deadline>) -> WaitResult {
        let state = self.state.load(Relaxed);
        if state & (WRITER | READERS) == 0 {
            return WaitResult::Changed; // free now: try again
        }
        let announced = state | SLEEPERS;
        if state & SLEEPERS == 0
            && self
                .state
                .compare_exchange(state, announced, Relaxed, Relaxed)
                .is_err()
        {
            return WaitResult::Changed;
        }
        bump(Counter::sleeps);
        futex_wait(&self.state, announced, deadline, self.is_shared())
    }

    pub fn unlock(&self) -> i32 {
        // Read before the release: afterwards the lock may be gone.
        let shared = self.is_shared();
        let mut state = self.state.load(Relaxed);
        if state & WRITER != 0 {
            self.writer.store(0, Relaxed);
            let before = self.state.swap(0, Release);
            if before & SLEEPERS != 0 {
                wake_all(&self.state, shared);
            }
            return 0;
        }
        loop {
            let readers = state & READERS;
            if readers == 0 {
                return libc::EPERM;
            }
            // The last reader frees the lock and takes the sleepers bit with it.
            let next = if readers == 1 { 0 } else { state - 1 };
            match self
                .state
                .compare_exchange_weak(state, next, Release, Relaxed)
            {
                Ok(_) => {
                    if readers == 1 && state & SLEEPERS != 0 {
                        wake_all(&self.state, shared);
                    }
                    return 0;
                }
                Err(now) => state = now,
            }
        }
    }
}

/// Wakes every sleeper on `state`: a freed lock may let all readers in at
/// once. Only the address is used, so this is safe after the release even
/// if the lock has been destroyed meanwhile.
fn wake_all(state: &AtomicU32, shared: bool) {
    bump(Counter::wakes);
    futex_wake(state, i32::MAX, shared);
}
