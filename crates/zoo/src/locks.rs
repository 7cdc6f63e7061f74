//! The spin zoo: waiting implementations as programs really write them.
//! Each is a lock whose `lock()` busy-waits while another thread holds it.
//! Some loops have no spin hint on purpose: programs write them that way.
#![allow(clippy::missing_spin_loop)]

use std::cell::UnsafeCell;
use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

pub trait SpinLock: Sync + Send {
    /// Returns a token to hand back to `unlock` (queue locks need their node).
    fn lock(&self) -> usize;
    fn unlock(&self, token: usize);
}

pub const NAMES: &[&str] = &[
    "flag",
    "flag-pause",
    "flag-call",
    "tas",
    "ttas",
    "ttas-backoff",
    "ticket",
    "partitioned-ticket",
    "anderson",
    "mcs",
    "clh",
    "pthread-spin",
    "counted-pause",
];

pub fn make(name: &str) -> Option<Box<dyn SpinLock>> {
    Some(match name {
        "flag" => Box::new(FlagLock::<0>::default()),
        "flag-pause" => Box::new(FlagLock::<1>::default()),
        "flag-call" => Box::new(FlagLock::<2>::default()),
        "tas" => Box::new(Tas::default()),
        "ttas" => Box::new(Ttas::<false>::default()),
        "ttas-backoff" => Box::new(Ttas::<true>::default()),
        "ticket" => Box::new(Ticket::default()),
        "partitioned-ticket" => Box::new(PartitionedTicket::default()),
        "anderson" => Box::new(Anderson::new()),
        "mcs" => Box::new(Mcs::new()),
        "clh" => Box::new(Clh::new()),
        "pthread-spin" => Box::new(PthreadSpin::new()),
        "counted-pause" => Box::new(CountedPause::default()),
        _ => return None,
    })
}

/// A boolean flag awaited in a loop. MODE 0: empty loop; 1: PAUSE; 2: a call
/// to an out-of-line function per iteration.
#[derive(Default)]
pub struct FlagLock<const MODE: u8> {
    busy: AtomicBool,
}

/// Takes a free flag lock (after a wait saw it free); false if another
/// thread took it first.
fn take(busy: &AtomicBool) -> bool {
    busy.compare_exchange(false, true, Acquire, Relaxed).is_ok()
}

#[inline(never)]
fn still_set(flag: &AtomicBool) -> bool {
    flag.load(Acquire)
}

impl<const MODE: u8> SpinLock for FlagLock<MODE> {
    fn lock(&self) -> usize {
        loop {
            match MODE {
                0 => while self.busy.load(Relaxed) {},
                1 => {
                    while self.busy.load(Relaxed) {
                        spin_loop()
                    }
                }
                _ => while still_set(&self.busy) {},
            }
            if take(&self.busy) {
                return 0;
            }
        }
    }
    fn unlock(&self, _: usize) {
        self.busy.store(false, Release);
    }
}

/// Test-and-set: an atomic swap in a tight loop.
#[derive(Default)]
pub struct Tas {
    busy: AtomicBool,
}
impl SpinLock for Tas {
    fn lock(&self) -> usize {
        while self.busy.swap(true, Acquire) {}
        0
    }
    fn unlock(&self, _: usize) {
        self.busy.store(false, Release);
    }
}

/// Test-and-test-and-set, optionally with exponential back-off (a counter
/// register that changes every iteration).
#[derive(Default)]
pub struct Ttas<const BACKOFF: bool> {
    busy: AtomicBool,
}
impl<const BACKOFF: bool> SpinLock for Ttas<BACKOFF> {
    fn lock(&self) -> usize {
        let mut delay = 1u32;
        loop {
            while self.busy.load(Relaxed) {
                if BACKOFF {
                    for _ in 0..delay {
                        spin_loop();
                    }
                    // Capped at 1024 PAUSEs (tens of microseconds), as
                    // back-off locks usually are.
                    delay = (delay * 2).min(1024);
                } else {
                    spin_loop();
                }
            }
            if !self.busy.swap(true, Acquire) {
                return 0;
            }
        }
    }
    fn unlock(&self, _: usize) {
        self.busy.store(false, Release);
    }
}

#[derive(Default)]
pub struct Ticket {
    next: AtomicU32,
    serving: AtomicU32,
}
impl SpinLock for Ticket {
    fn lock(&self) -> usize {
        let me = self.next.fetch_add(1, Relaxed);
        while self.serving.load(Acquire) != me {
            spin_loop();
        }
        0
    }
    fn unlock(&self, _: usize) {
        self.serving.fetch_add(1, Release);
    }
}

/// Slots of a partitioned ticket lock: consecutive tickets wait on
/// different cache lines.
const PARTITIONS: usize = 4;

/// Ticket lock whose waiters spin on one of several slots (less line bouncing).
pub struct PartitionedTicket {
    next: AtomicU64,
    slots: [Padded<AtomicU64>; PARTITIONS],
    owner_ticket: AtomicU64,
}
impl Default for PartitionedTicket {
    fn default() -> Self {
        let p = PartitionedTicket {
            next: AtomicU64::new(0),
            slots: Default::default(),
            owner_ticket: AtomicU64::new(0),
        };
        p.slots[0].0.store(0, Relaxed);
        p
    }
}
impl SpinLock for PartitionedTicket {
    fn lock(&self) -> usize {
        let me = self.next.fetch_add(1, Relaxed);
        let slot = &self.slots[(me % PARTITIONS as u64) as usize].0;
        while slot.load(Acquire) != me {}
        self.owner_ticket.store(me, Relaxed);
        0
    }
    fn unlock(&self, _: usize) {
        let next = self.owner_ticket.load(Relaxed) + 1;
        self.slots[(next % PARTITIONS as u64) as usize]
            .0
            .store(next, Release);
    }
}

/// A value alone on its 64-byte cache line (x86-64's line size), so that
/// waiters on neighbouring slots do not share a line.
#[derive(Default)]
#[repr(align(64))]
pub struct Padded<T>(pub T);

/// Queue slots of the array and queue locks: more than the threads any zoo
/// program runs (at most 4 per vCPU), since slots are reused round-robin.
const SLOTS: usize = 64;

/// Anderson's array lock: each waiter spins on its own slot.
pub struct Anderson {
    next: AtomicUsize,
    slots: Box<[Padded<AtomicBool>]>,
}
impl Anderson {
    fn new() -> Self {
        let slots: Box<[Padded<AtomicBool>]> = (0..SLOTS)
            .map(|i| Padded(AtomicBool::new(i == 0)))
            .collect();
        Anderson {
            next: AtomicUsize::new(0),
            slots,
        }
    }
}
impl SpinLock for Anderson {
    fn lock(&self) -> usize {
        let me = self.next.fetch_add(1, Relaxed) % SLOTS;
        while !self.slots[me].0.load(Acquire) {
            spin_loop();
        }
        self.slots[me].0.store(false, Relaxed);
        me
    }
    fn unlock(&self, token: usize) {
        self.slots[(token + 1) % SLOTS].0.store(true, Release);
    }
}

/// MCS queue lock: waiters spin on a flag in their own queue node.
pub struct Mcs {
    tail: AtomicUsize,
    nodes: Box<[Padded<McsNode>]>,
    free: AtomicUsize,
}
#[derive(Default)]
pub struct McsNode {
    locked: AtomicBool,
    next: AtomicUsize,
}
impl Mcs {
    fn new() -> Self {
        Mcs {
            tail: AtomicUsize::new(0),
            nodes: (0..SLOTS).map(|_| Padded(McsNode::default())).collect(),
            free: AtomicUsize::new(0),
        }
    }
}
impl SpinLock for Mcs {
    fn lock(&self) -> usize {
        // Node index + 1 (0 means "none"); nodes are recycled round-robin.
        let me = self.free.fetch_add(1, Relaxed) % SLOTS + 1;
        let node = &self.nodes[me - 1].0;
        node.next.store(0, Relaxed);
        node.locked.store(true, Relaxed);
        let prev = self.tail.swap(me, AcqRel);
        if prev != 0 {
            self.nodes[prev - 1].0.next.store(me, Release);
            while node.locked.load(Acquire) {
                spin_loop();
            }
        }
        me
    }
    fn unlock(&self, me: usize) {
        let node = &self.nodes[me - 1].0;
        if node.next.load(Acquire) == 0 {
            if self.tail.compare_exchange(me, 0, Release, Relaxed).is_ok() {
                return;
            }
            while node.next.load(Acquire) == 0 {
                spin_loop();
            }
        }
        self.nodes[node.next.load(Acquire) - 1]
            .0
            .locked
            .store(false, Release);
    }
}

/// CLH queue lock: each waiter spins on its predecessor's node.
pub struct Clh {
    tail: AtomicUsize,
    nodes: Box<[Padded<AtomicBool>]>,
    free: AtomicUsize,
}
impl Clh {
    fn new() -> Self {
        let nodes: Box<[Padded<AtomicBool>]> =
            (0..SLOTS).map(|_| Padded(AtomicBool::new(false))).collect();
        Clh {
            tail: AtomicUsize::new(0),
            nodes,
            free: AtomicUsize::new(1),
        }
    }
}
impl SpinLock for Clh {
    fn lock(&self) -> usize {
        let me = self.free.fetch_add(1, Relaxed) % SLOTS;
        self.nodes[me].0.store(true, Relaxed);
        let pred = self.tail.swap(me, AcqRel);
        while self.nodes[pred].0.load(Acquire) {
            spin_loop();
        }
        me
    }
    fn unlock(&self, me: usize) {
        self.nodes[me].0.store(false, Release);
    }
}

/// glibc's pthread_spin_lock.
pub struct PthreadSpin {
    lock: UnsafeCell<libc::pthread_spinlock_t>,
}
// SAFETY: a pthread spinlock is made to be shared between threads: every
// access goes through pthread_spin_lock/unlock, which synchronise.
unsafe impl Sync for PthreadSpin {}
// SAFETY: the lock is initialised process-private and holds no
// thread-specific state, so it may move to another thread.
unsafe impl Send for PthreadSpin {}
impl PthreadSpin {
    fn new() -> Self {
        let s = PthreadSpin {
            lock: UnsafeCell::new(0),
        };
        // SAFETY: the pointer is to the spinlock this value owns, not yet
        // shared with any thread.
        unsafe { libc::pthread_spin_init(s.lock.get(), libc::PTHREAD_PROCESS_PRIVATE) };
        s
    }
}
impl SpinLock for PthreadSpin {
    fn lock(&self) -> usize {
        // SAFETY: initialised in new(), never moved while shared.
        unsafe { libc::pthread_spin_lock(self.lock.get()) };
        0
    }
    fn unlock(&self, _: usize) {
        // SAFETY: initialised in new(); the caller holds the lock (the
        // SpinLock contract: unlock follows its own lock).
        unsafe { libc::pthread_spin_unlock(self.lock.get()) };
    }
}

/// A libgomp-style wait: count iterations with PAUSE, then try again.
#[derive(Default)]
pub struct CountedPause {
    busy: AtomicBool,
}
impl SpinLock for CountedPause {
    fn lock(&self) -> usize {
        loop {
            let mut i = 0u64;
            // A count that never runs out within a wait here (libgomp's
            // active-policy spin count is billions): the thread keeps
            // counting, which is what makes its registers change.
            while self.busy.load(Relaxed) && i < 300_000_000 {
                spin_loop();
                i += 1;
            }
            std::hint::black_box(i);
            if take(&self.busy) {
                return 0;
            }
        }
    }
    fn unlock(&self, _: usize) {
        self.busy.store(false, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_lock_excludes() {
        for name in NAMES {
            let lock: Arc<dyn SpinLock> = Arc::from(make(name).unwrap());
            let counter = Arc::new(AtomicU64::new(0));
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let (lock, counter) = (lock.clone(), counter.clone());
                    std::thread::spawn(move || {
                        for _ in 0..2000 {
                            let t = lock.lock();
                            // Non-atomic read-modify-write: lost updates if two get in.
                            let v = counter.load(Relaxed);
                            counter.store(v + 1, Relaxed);
                            lock.unlock(t);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(counter.load(Relaxed), 6000, "{name}");
        }
    }
}
