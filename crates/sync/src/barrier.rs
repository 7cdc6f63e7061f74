//! Barriers. The last thread of a round resets the arrival count and bumps
//! the round number, which waiters watch through the shared backoff policy:
//! on an oversubscribed machine they yield rather than sleep, so a round
//! ends without a wake-up call per thread. Sleepers, if any, are woken with
//! one call.

use crate::backoff::{sleep_while, wake, Backoff, Next};
use crate::shim::AtomicU32;
use core::sync::atomic::Ordering::*;

pub const FLAG_SHARED: u32 = 1;

#[repr(C)]
pub struct RawBarrier {
    pub count: AtomicU32,
    pub arrived: AtomicU32,
    pub round: AtomicU32,
    pub sleepers: AtomicU32,
    pub flags: AtomicU32,
}

impl RawBarrier {
    #[cfg(any(test, loom))]
    pub fn new(count: u32) -> Self {
        RawBarrier {
            count: AtomicU32::new(count),
            arrived: AtomicU32::new(0),
            round: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            flags: AtomicU32::new(0),
        }
    }

    fn shared(&self) -> bool {
        self.flags.load(Relaxed) & FLAG_SHARED != 0
    }

    /// True for the one thread of each round that ends it
    /// (PTHREAD_BARRIER_SERIAL_THREAD).
    pub fn wait(&self) -> bool {
        let round = self.round.load(Acquire);
        let arrived = self.arrived.fetch_add(1, AcqRel) + 1;
        if arrived == self.count.load(Relaxed) {
            self.arrived.store(0, Relaxed);
            self.round.fetch_add(1, SeqCst);
            wake(&self.round, &self.sleepers, i32::MAX, self.shared());
            return true;
        }
        let mut backoff = Backoff::new(None);
        while self.round.load(Acquire) == round {
            match backoff.pause() {
                Next::Retry => {}
                Next::TimedOut => unreachable!("no deadline"),
                Next::Sleep => {
                    sleep_while(
                        &self.round,
                        round,
                        &self.sleepers,
                        None,
                        self.shared(),
                        None,
                    );
                }
            }
        }
        backoff.done();
        false
    }

    /// Threads have arrived in the current round and not all have left.
    pub fn busy(&self) -> bool {
        self.arrived.load(Acquire) != 0
    }
}
