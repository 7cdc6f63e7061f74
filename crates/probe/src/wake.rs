//! How long it takes to wake a thread whose vCPU is idle: the time from a
//! futex wake on one vCPU until the woken thread runs on another that had
//! nothing to do. In a VM an idle vCPU has halted, so this includes the
//! hypervisor's wake-up path; it is the spin budget of vsched's runtime
//! (a waiter spinning for less than this is cheaper than sleeping), which
//! `vsched exec` measures before it starts a program.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use vsched_model::stats::upper_median;
use vsched_os::affinity::{pin_current_thread, set_thread_affinity, thread_affinity};
use vsched_os::clock::monotonic_ns;

/// Wake-ups measured; odd, so the median is one of them. 101 at about
/// 0.3 ms each keep the measurement near 30 ms, short before a program start.
const SAMPLES: usize = 101;
/// Long enough for the sleeper's vCPU to go idle (halt) between samples.
const IDLE_GAP: Duration = Duration::from_micros(300);

/// Why the wake-up cost could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    #[error("reading this thread's CPU affinity")]
    ReadAffinity(#[source] io::Error),
    #[error("pinning a measuring thread to vCPU {cpu}")]
    Pin {
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("giving the calling thread its vCPUs back")]
    Restore(#[source] io::Error),
    #[error("the measuring thread panicked")]
    Panicked,
}

/// The futex word the waker sets and the sleeper clears, and when the
/// sleeper ran.
struct Shared {
    word: AtomicU32,
    woke_at_ns: AtomicU64,
}

/// Median idle wake-up latency in nanoseconds; 0 on a single vCPU (there
/// is no other vCPU whose hand-off spinning could catch). The calling
/// thread is pinned while it measures and then gets every vCPU it had back,
/// so that a program exec'd from it inherits its affinity unchanged.
pub fn idle_wake_ns() -> Result<u64, WakeError> {
    let allowed = thread_affinity(0).map_err(WakeError::ReadAffinity)?;
    let Some((waker_cpu, sleeper_cpu)) = measuring_pair(&allowed) else {
        return Ok(0);
    };
    pin_current_thread(waker_cpu).map_err(|source| WakeError::Pin {
        cpu: waker_cpu,
        source,
    })?;
    let shared = Arc::new(Shared {
        word: AtomicU32::new(0),
        woke_at_ns: AtomicU64::new(0),
    });
    let sleeper = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            // Serve every sample even unpinned, so the waker never waits
            // for ever; the error is reported after.
            let pinned = pin_current_thread(sleeper_cpu);
            for _ in 0..SAMPLES {
                while shared.word.load(SeqCst) == 0 {
                    futex_wait(&shared.word, 0);
                }
                shared.woke_at_ns.store(monotonic_ns(), SeqCst);
                shared.word.store(0, SeqCst);
            }
            pinned
        })
    };
    let mut latencies = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        std::thread::sleep(IDLE_GAP);
        let woken_at = monotonic_ns();
        shared.woke_at_ns.store(0, SeqCst);
        shared.word.store(1, SeqCst);
        futex_wake(&shared.word);
        while shared.word.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        latencies.push(shared.woke_at_ns.load(SeqCst).saturating_sub(woken_at));
    }
    set_thread_affinity(0, &allowed).map_err(WakeError::Restore)?;
    match sleeper.join() {
        Err(_) => Err(WakeError::Panicked),
        Ok(Err(source)) => Err(WakeError::Pin {
            cpu: sleeper_cpu,
            source,
        }),
        Ok(Ok(())) => Ok(median_latency(latencies)),
    }
}

/// The waker's and the sleeper's vCPU: the first two this thread may use;
/// None with fewer than two.
fn measuring_pair(allowed: &[u32]) -> Option<(u32, u32)> {
    match allowed {
        [waker, sleeper, ..] => Some((*waker, *sleeper)),
        _ => None,
    }
}

/// The median of the measured latencies (0 if there are none).
fn median_latency(mut latencies: Vec<u64>) -> u64 {
    latencies.sort_unstable();
    upper_median(&latencies).unwrap_or(0)
}

/// Sleeps while `word` holds `expected` (or until a spurious wake-up).
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: the futex address is an AtomicU32 that `word` borrows, so it
    // is aligned and stays valid for the call; FUTEX_WAIT only reads it,
    // and a null timeout means no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes one thread sleeping on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: the futex address is an AtomicU32 that `word` borrows, so it
    // is aligned and valid for the call; FUTEX_WAKE does not access memory
    // through it, it only names the wait queue.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_on_the_first_two_vcpus_only() {
        assert_eq!(measuring_pair(&[]), None);
        assert_eq!(measuring_pair(&[3]), None);
        assert_eq!(measuring_pair(&[2, 5, 7]), Some((2, 5)));
    }

    #[test]
    fn reports_the_median_wake_up() {
        assert_eq!(median_latency(vec![900, 10, 30, 20, 5_000]), 30);
        assert_eq!(median_latency(vec![]), 0);
    }

    #[test]
    fn measures_and_gives_the_vcpus_back() {
        std::thread::spawn(|| {
            let before = thread_affinity(0).unwrap();
            let ns = idle_wake_ns().unwrap();
            assert_eq!(thread_affinity(0).unwrap(), before);
            // One vCPU measures nothing; otherwise a wake-up takes time.
            assert_eq!(ns == 0, before.len() < 2, "{ns} ns on {before:?}");
        })
        .join()
        .unwrap();
    }
}
