//! Barriers.
//!
//! `state` packs the round number (high half) and the arrivals in it (low
//! half) into one word, so that arriving and noting the round are a single
//! atomic step: a thread can never count itself into one round while
//! believing it is in another, even when more than `count` threads use the
//! barrier at once. The thread that completes a round moves `state` to
//! the next round with no arrivals, in the same step, and then publishes
//! the round in `round`, the word waiters watch (through the shared
//! backoff policy: on an oversubscribed machine they yield rather than
//! sleep, so a round ends without a wake-up call per thread). Sleepers, if
//! any, are woken with one call.
//!
//! `inside` counts threads in wait; its decrement is a thread's last access,
//! and pthread_barrier_destroy waits for it, so a barrier may be destroyed
//! and re-initialised as soon as its last round completed.

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::shim::{yield_now, AtomicU32, AtomicU64};
use core::sync::atomic::Ordering::*;

pub const FLAG_SHARED: u32 = 1;

#[repr(C)]
pub struct RawBarrier {
    /// Round << 32 | arrivals in that round.
    pub state: AtomicU64,
    /// The latest completed round + 1, published after `state` moved on.
    pub round: AtomicU32,
    pub count: AtomicU32,
    pub sleepers: AtomicU32,
    pub flags: AtomicU32,
    pub inside: AtomicU32,
}

impl RawBarrier {
    #[cfg(any(test, loom))]
    pub fn new(count: u32) -> Self {
        RawBarrier {
            state: AtomicU64::new(0),
            round: AtomicU32::new(0),
            count: AtomicU32::new(count),
            sleepers: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            inside: AtomicU32::new(0),
        }
    }

    fn shared(&self) -> bool {
        self.flags.load(Relaxed) & FLAG_SHARED != 0
    }

    /// True for the one thread of each round that ends it
    /// (PTHREAD_BARRIER_SERIAL_THREAD).
    pub fn wait(&self) -> bool {
        self.inside.fetch_add(1, SeqCst);
        let count = u64::from(self.count.load(Relaxed));
        let mut state = self.state.load(Acquire);
        let (round, serial) = loop {
            let (round, arrived) = ((state >> 32) as u32, state & 0xffff_ffff);
            let (next, serial) = if arrived + 1 == count {
                ((u64::from(round.wrapping_add(1))) << 32, true)
            } else {
                (state + 1, false)
            };
            match self
                .state
                .compare_exchange_weak(state, next, AcqRel, Acquire)
            {
                Ok(_) => break (round, serial),
                Err(now) => state = now,
            }
        };
        let done = round.wrapping_add(1);
        if serial {
            // Rounds complete in order; publish ours once the previous one is.
            while self
                .round
                .compare_exchange(round, done, SeqCst, Relaxed)
                .is_err()
            {
                yield_now();
            }
            wake(&self.round, &self.sleepers, i32::MAX, self.shared());
        } else {
            self.wait_for_round(done);
        }
        // The last access (see the module comment).
        self.inside.fetch_sub(1, SeqCst);
        serial
    }

    /// Waits until `round` has reached `done` (wrapping, rounds are close).
    fn wait_for_round(&self, done: u32) {
        let mut backoff = Backoff::on(None, &self.round, self.shared());
        loop {
            let now = self.round.load(Acquire);
            if (now.wrapping_sub(done) as i32) >= 0 {
                backoff.done();
                return;
            }
            match backoff.pause() {
                Next::Retry => {}
                Next::TimedOut => unreachable!("no deadline"),
                Next::Sleep => {
                    sleep_while(&self.round, now, &self.sleepers, None, self.shared(), None);
                }
            }
        }
    }

    /// pthread_barrier_destroy: EBUSY while a round is under way; otherwise
    /// waits for the threads of the last round to leave.
    pub fn destroy(&self) -> i32 {
        if self.state.load(Acquire) & 0xffff_ffff != 0 {
            return libc::EBUSY;
        }
        while self.inside.load(SeqCst) != 0 {
            yield_now();
        }
        0
    }
}
