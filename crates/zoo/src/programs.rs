//! Programs built from the zoo: spin episodes with known timing (accuracy),
//! compute runs (specificity, slowdown), and the spin token ring and pipeline
//! (the effect of descheduling).
//! The ring and queues wait in plain loops without a spin hint on purpose.
#![allow(clippy::missing_spin_loop)]

use crate::compute::Kernel;
use crate::locks;
use crate::queue::SpinQueue;
pub use crate::truth::{Episode, Truth};
use crate::work::{Rng, Work};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Barrier};
use std::time::Instant;
use vsched_os::clock::monotonic_ns;
use vsched_os::sched::gettid;

/// One holder and one waiter: the holder takes the lock and computes for a
/// random 1-4 ms while the waiter spins in `lock()`; then both compute for a
/// random 0.5-2 ms. Every wait is an episode.
pub fn spin_episodes(lock_name: &str, episodes: usize) -> Option<Truth> {
    let lock: Arc<dyn locks::SpinLock> = Arc::from(locks::make(lock_name)?);
    let work = Arc::new(Work::calibrate());
    let held = Arc::new(Barrier::new(2));
    let done = Arc::new(Barrier::new(2));
    let start = Instant::now();
    let holder = {
        let (lock, work, held, done) = (lock.clone(), work.clone(), held.clone(), done.clone());
        std::thread::spawn(move || {
            // Fixed seeds: the same timings every run.
            let mut rng = Rng(0x9e37_79b9);
            for _ in 0..episodes {
                let t = lock.lock();
                held.wait();
                work.run(rng.between(1000.0, 4000.0));
                lock.unlock(t);
                work.run(rng.between(500.0, 2000.0));
                done.wait();
            }
            gettid()
        })
    };
    let mut rng = Rng(0x51ed_2701);
    let mut eps = Vec::with_capacity(episodes);
    let me = gettid();
    for _ in 0..episodes {
        held.wait();
        let s = monotonic_ns();
        let t = lock.lock();
        let e = monotonic_ns();
        lock.unlock(t);
        eps.push(Episode {
            tid: me,
            start_ns: s,
            end_ns: e,
        });
        work.run(rng.between(500.0, 2000.0));
        done.wait();
    }
    let _holder_tid = holder.join().ok()?;
    Some(Truth {
        program: format!("spin:{lock_name}"),
        compute_tids: vec![],
        episodes: eps,
        elapsed_s: start.elapsed().as_secs_f64(),
        units: episodes as u64,
        ..Default::default()
    })
}

/// `threads` threads each running `passes` passes of a compute kernel.
pub fn compute(kernel: &str, threads: usize, passes: u64) -> Option<Truth> {
    Kernel::new(kernel, 1)?;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let name = kernel.to_string();
            std::thread::spawn(move || {
                let mut k = Kernel::new(&name, 7 + i as u64).expect("checked");
                let mut acc = 0u64;
                for _ in 0..passes {
                    acc = acc.wrapping_add(k.pass());
                }
                std::hint::black_box(acc);
                gettid()
            })
        })
        .collect();
    let tids: Vec<i32> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    Some(Truth {
        program: format!("compute:{kernel}"),
        compute_tids: tids,
        episodes: vec![],
        elapsed_s: start.elapsed().as_secs_f64(),
        units: passes * threads as u64,
        ..Default::default()
    })
}

/// The spin token ring: thread i waits in a plain flag loop (no PAUSE) until
/// the token is i, works `work_us`, passes the token on.
pub fn ring(threads: usize, handoffs: u64, work_us: f64) -> Truth {
    let turn = Arc::new(AtomicU64::new(0));
    let work = Arc::new(Work::calibrate());
    let start = Instant::now();
    let handles: Vec<_> = (0..threads as u64)
        .map(|me| {
            let (turn, work) = (turn.clone(), work.clone());
            std::thread::spawn(move || {
                let n = threads as u64;
                loop {
                    let mut t = turn.load(Acquire);
                    while t % n != me {
                        t = turn.load(Acquire);
                    }
                    if t >= handoffs {
                        // Wake the next thread so it sees the end too.
                        turn.store(t + 1, Release);
                        return;
                    }
                    work.run(work_us);
                    turn.store(t + 1, Release);
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    Truth {
        program: format!("ring:{threads}"),
        elapsed_s: start.elapsed().as_secs_f64(),
        units: handoffs,
        ..Default::default()
    }
}

/// A pipeline of `stages` threads joined by spinning queues; each stage works
/// `work_us` per item. With `pin`, stage k runs only on CPU k modulo the
/// CPUs (a test's way to leave one stage spinning alone on its vCPU).
pub fn pipeline(stages: usize, items: u64, work_us: f64, pin: bool) -> Truth {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Eight slots: stages run ahead of each other a little, then wait.
    let queues: Arc<Vec<SpinQueue>> =
        Arc::new((0..stages - 1).map(|_| SpinQueue::new(8)).collect());
    let work = Arc::new(Work::calibrate());
    let checksum = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..stages)
        .map(|k| {
            let (queues, work, checksum) = (queues.clone(), work.clone(), checksum.clone());
            std::thread::spawn(move || {
                if pin {
                    vsched_os::affinity::pin_current_thread((k % cpus) as u32)
                        .expect("pinning a stage to its CPU");
                }
                for i in 0..items {
                    let v = if k == 0 { i } else { queues[k - 1].pop() };
                    work.run(work_us);
                    if k + 1 < stages {
                        queues[k].push(v + 1);
                    } else {
                        checksum.fetch_add(v, Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    // Each item passed stages-1 increments: the sum is fixed, or items were lost.
    let expect = (0..items).map(|i| i + stages as u64 - 1).sum::<u64>();
    assert_eq!(
        checksum.load(Relaxed),
        expect,
        "pipeline lost or duplicated items"
    );
    Truth {
        program: format!("pipeline:{stages}"),
        elapsed_s: start.elapsed().as_secs_f64(),
        units: items,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_and_pipeline_complete_at_1x() {
        let r = ring(2, 200, 5.0);
        assert_eq!(r.units, 200);
        let p = pipeline(2, 200, 5.0, false);
        assert_eq!(p.units, 200);
    }

    #[test]
    fn spin_episodes_are_recorded() {
        let t = spin_episodes("ticket", 3).unwrap();
        assert_eq!(t.episodes.len(), 3);
        for e in &t.episodes {
            assert!(e.end_ns > e.start_ns);
        }
        assert!(spin_episodes("nope", 1).is_none());
    }
}
