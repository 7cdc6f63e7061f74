//! Model checks of the runtime's wait/wake protocols with loom: every
//! interleaving (up to loom's preemption bound) of the very code the
//! preloaded library runs, with an emulated futex. A lost wake-up shows up
//! as a deadlock, two holders as a concurrent access to an UnsafeCell.
//!
//! Run: RUSTFLAGS="--cfg loom" cargo test --release -p vsched-sync --test loom
//! (scripts/test.sh does, with its own target directory).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32 as LoomU32;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;
use vsched_sync::barrier::RawBarrier;
use vsched_sync::cond::{CondMutex, RawCond};
use vsched_sync::mutex::{RawMutex, KIND_NORMAL};
use vsched_sync::rwlock::RawRwLock;
use vsched_sync::sem::RawSem;
use vsched_sync::spin::RawSpin;

/// A value whose accesses loom checks for races (so two lock holders at
/// once fail the model).
struct Checked(UnsafeCell<u32>);

// SAFETY: every test touches the value only under the primitive under test,
// and loom reports any access that is not ordered by it.
unsafe impl Sync for Checked {}

impl Checked {
    fn new() -> Arc<Self> {
        Arc::new(Checked(UnsafeCell::new(0)))
    }
    fn get(&self) -> u32 {
        self.0.with(|v| unsafe { *v })
    }
    fn set(&self, x: u32) {
        self.0.with_mut(|v| unsafe { *v = x })
    }
}

/// The runtime's mutex as a condition variable's mutex, as exports.rs does.
struct Mutex(RawMutex);

impl CondMutex for Mutex {
    fn release_for_wait(&self) -> Result<bool, i32> {
        self.0.release_for_cond()
    }
    fn reacquire(&self, released: bool) -> i32 {
        self.0.reacquire_for_cond(released);
        0
    }
}

fn mutex() -> Arc<Mutex> {
    Arc::new(Mutex(RawMutex::new(KIND_NORMAL)))
}

#[test]
fn mutex_admits_one_holder_and_loses_no_wake_up() {
    loom::model(|| {
        let (m, value) = (mutex(), Checked::new());
        let other = {
            let (m, value) = (m.clone(), value.clone());
            thread::spawn(move || {
                assert_eq!(m.0.lock(None), 0);
                value.set(value.get() + 1);
                assert_eq!(m.0.unlock(), 0);
            })
        };
        assert_eq!(m.0.lock(None), 0);
        value.set(value.get() + 1);
        assert_eq!(m.0.unlock(), 0);
        other.join().unwrap();
        assert_eq!(value.get(), 2);
    });
}

#[test]
fn cond_signal_is_never_lost() {
    loom::model(|| {
        let (m, flag, cond) = (mutex(), Checked::new(), Arc::new(RawCond::new(0)));
        let waiter = {
            let (m, flag, cond) = (m.clone(), flag.clone(), cond.clone());
            thread::spawn(move || {
                assert_eq!(m.0.lock(None), 0);
                while flag.get() == 0 {
                    assert_eq!(cond.wait(&*m, None), 0);
                }
                assert_eq!(m.0.unlock(), 0);
            })
        };
        assert_eq!(m.0.lock(None), 0);
        flag.set(1);
        assert_eq!(m.0.unlock(), 0);
        cond.signal();
        waiter.join().unwrap();
    });
}

#[test]
fn cond_broadcast_wakes_every_waiter() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let (m, flag, cond) = (mutex(), Checked::new(), Arc::new(RawCond::new(0)));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (m, flag, cond) = (m.clone(), flag.clone(), cond.clone());
                thread::spawn(move || {
                    assert_eq!(m.0.lock(None), 0);
                    while flag.get() == 0 {
                        assert_eq!(cond.wait(&*m, None), 0);
                    }
                    assert_eq!(m.0.unlock(), 0);
                })
            })
            .collect();
        assert_eq!(m.0.lock(None), 0);
        flag.set(1);
        cond.broadcast();
        assert_eq!(m.0.unlock(), 0);
        for w in waiters {
            w.join().unwrap();
        }
    });
}

#[test]
fn barrier_releases_everyone_with_one_serial_thread_per_round() {
    // Unbounded, two rounds take minutes: three preemptions cover the
    // arrival races that matter (a late arrival against the round change).
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let barrier = Arc::new(RawBarrier::new(2));
        let serials = Arc::new(LoomU32::new(0));
        let run = |barrier: &RawBarrier, serials: &LoomU32| {
            for _ in 0..2 {
                if barrier.wait() {
                    serials.fetch_add(1, Relaxed);
                }
            }
        };
        let other = {
            let (barrier, serials) = (barrier.clone(), serials.clone());
            thread::spawn(move || run(&barrier, &serials))
        };
        run(&barrier, &serials);
        other.join().unwrap();
        assert_eq!(serials.load(Relaxed), 2);
    });
}

#[test]
fn semaphore_post_wakes_a_waiter() {
    loom::model(|| {
        let sem = Arc::new(RawSem::new(0));
        let waiter = {
            let sem = sem.clone();
            thread::spawn(move || assert_eq!(sem.wait(None), 0))
        };
        assert_eq!(sem.post(), 0);
        waiter.join().unwrap();
        assert!(!sem.try_wait());
    });
}

#[test]
fn rwlock_writer_excludes_reader_and_wakes_it() {
    loom::model(|| {
        let (lock, data) = (Arc::new(RawRwLock::new(0)), Checked::new());
        let reader = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                assert_eq!(lock.rdlock(None), 0);
                assert!(matches!(data.get(), 0 | 2));
                assert_eq!(lock.unlock(), 0);
            })
        };
        assert_eq!(lock.wrlock(None), 0);
        data.set(1);
        data.set(2);
        assert_eq!(lock.unlock(), 0);
        reader.join().unwrap();
    });
}

#[test]
fn spinlock_hand_off_between_threads() {
    loom::model(|| {
        // Locked here, unlocked by the other thread (glibc allows it), and
        // the second lock below must then get through.
        let lock = Arc::new(RawSpin::new());
        lock.lock();
        let unlocker = {
            let lock = lock.clone();
            thread::spawn(move || lock.unlock())
        };
        lock.lock();
        lock.unlock();
        unlocker.join().unwrap();
    });
}

/// Virtual blocking's marks (marks.rs): a waiter that registers and marks
/// itself, then saw its word unchanged (and so would yield marked), is
/// never left marked once the waker has changed the word and cleared
/// the word's marks; and the count of marked flags matches the flag. Its
/// control: with marks.rs's two fences removed (and the registration
/// Relaxed), loom finds the interleaving that leaves the waiter marked
/// (tried 2026-12-02).
#[test]
fn a_waiter_that_yields_marked_is_unmarked_by_its_waker() {
    use vsched_sync::marks::{Flag, Registry};
    loom::model(|| {
        let word = Arc::new(LoomU32::new(0));
        let registry = Arc::new(Registry::new());
        // One thread's slot flag and the channel's count.
        let flag = Arc::new((LoomU32::new(0), LoomU32::new(0)));
        let key = 0x1000;
        let waiter = {
            let (word, registry, flag) = (word.clone(), registry.clone(), flag.clone());
            thread::spawn(move || {
                let f = Flag {
                    flag: &flag.0,
                    marked: &flag.1,
                };
                registry.register(key, 0).expect("room");
                f.set_then_look();
                // true: it saw the old value, so it yields marked.
                word.load(std::sync::atomic::Ordering::SeqCst) == 0
            })
        };
        word.store(1, std::sync::atomic::Ordering::SeqCst);
        registry.each_on(key, |slot| {
            assert_eq!(slot, 0);
            Flag {
                flag: &flag.0,
                marked: &flag.1,
            }
            .clear();
        });
        let yielded_marked = waiter.join().unwrap();
        let set = flag.0.load(Relaxed);
        assert!(
            !(yielded_marked && set != 0),
            "a marked waiter whose word changed stays marked"
        );
        assert_eq!(flag.1.load(Relaxed), set, "the count follows the flag");
    });
}
