//! How long it takes to wake a thread whose vCPU is idle: the time from a
//! futex wake on one vCPU until the woken thread runs on another that had
//! nothing to do. In a VM an idle vCPU has halted, so this includes the
//! hypervisor's wake-up path; it is the spin budget of vsched's runtime
//! (a waiter spinning for less than this is cheaper than sleeping).

use anyhow::{bail, Result};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 101;
/// Long enough for the sleeper's vCPU to go idle between samples.
const IDLE_GAP: Duration = Duration::from_micros(300);

struct Shared {
    word: AtomicU32,
    woke_at_ns: AtomicU64,
}

/// Median idle wake-up latency in nanoseconds; 0 on a single vCPU (there
/// is no other vCPU whose hand-off spinning could catch).
pub fn idle_wake_ns() -> Result<u64> {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        return Ok(0);
    }
    let start = Instant::now();
    let shared = Arc::new(Shared {
        word: AtomicU32::new(0),
        woke_at_ns: AtomicU64::new(0),
    });
    let sleeper = {
        let shared = shared.clone();
        let cpu = cpus[1];
        std::thread::spawn(move || {
            pin_to(cpu);
            for _ in 0..SAMPLES {
                while shared.word.load(SeqCst) == 0 {
                    futex_wait(&shared.word, 0);
                }
                shared.woke_at_ns.store(ns_since(start), SeqCst);
                shared.word.store(0, SeqCst);
            }
        })
    };
    pin_to(cpus[0]);
    let mut latencies = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        std::thread::sleep(IDLE_GAP);
        let woken_at = ns_since(start);
        shared.woke_at_ns.store(0, SeqCst);
        shared.word.store(1, SeqCst);
        futex_wake(&shared.word);
        while shared.word.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        latencies.push(shared.woke_at_ns.load(SeqCst).saturating_sub(woken_at));
    }
    unpin(&cpus);
    if sleeper.join().is_err() {
        bail!("the measuring thread panicked");
    }
    latencies.sort_unstable();
    Ok(latencies[latencies.len() / 2])
}

fn ns_since(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: set is a valid cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

fn set_affinity(cpus: &[usize]) {
    // SAFETY: set is a valid cpu_set_t; pid 0 = the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn pin_to(cpu: usize) {
    set_affinity(&[cpu]);
}

/// Gives the calling thread back every vCPU it had: the program that vsched
/// exec starts inherits this thread's affinity.
fn unpin(cpus: &[usize]) {
    set_affinity(cpus);
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: a valid futex word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            0usize,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: a valid futex word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}
