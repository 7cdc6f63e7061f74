//! Spinlock admission in the spirit of I-Spinlock (EuroSys'17): a thread
//! should take a spinlock only if it will not be preempted before it has
//! waited for the lock and run its critical section; otherwise the lock
//! holder is preempted and every waiter spins for nothing.
//!
//! I-Spinlock reads the remaining time slice from the hypervisor; user space
//! has to predict it. The predictor, per thread:
//! - run bursts are observed through the thread's context-switch counts
//!   (getrusage(RUSAGE_THREAD)): when the count moved since the last look,
//!   a burst ended in between; an involuntary switch means the burst ran to
//!   the end of its slice, and its length (from the burst's start to the
//!   last time the thread saw itself running) feeds an average;
//! - the remaining slice is that average minus the time since the current
//!   burst started; the need is the critical section's average length,
//!   plus one more if the lock is held now;
//! - if remaining < need, the thread yields first and so starts a fresh
//!   slice before it takes the lock.
//!
//! All of this runs only when the machine is oversubscribed (otherwise a
//! thread is rarely preempted) and costs one system call per acquisition.
//! With statistics on, each admitted hold is checked for a switch-out
//! (holds_measured, holds_preempted): how often the prediction was right.

#[cfg(not(loom))]
mod imp {
    use crate::clock::mono_ns;
    use crate::shim::AtomicU32;
    use crate::stats::{bump, Counter};
    use core::cell::Cell;
    use core::sync::atomic::Ordering::Relaxed;

    #[derive(Clone, Copy)]
    struct Predictor {
        burst_start_ns: u64,
        last_seen_ns: u64,
        switches: u64,
        involuntary: u64,
        /// Average length of a burst that ended in preemption; 0: none seen yet.
        burst_ns: u64,
        /// Average critical section.
        hold_ns: u64,
        acquired_ns: u64,
        switches_at_acquire: u64,
        /// This acquisition went through admission (so its hold is measured).
        admitted: bool,
    }

    thread_local! {
        static STATE: Cell<Predictor> = const { Cell::new(Predictor {
            burst_start_ns: 0, last_seen_ns: 0, switches: 0, involuntary: 0,
            burst_ns: 0, hold_ns: 0, acquired_ns: 0, switches_at_acquire: 0, admitted: false,
        }) };
    }

    /// (all switches, involuntary switches) of the calling thread.
    fn switch_counts() -> (u64, u64) {
        // SAFETY: ru is a valid out-pointer.
        unsafe {
            let mut ru: libc::rusage = core::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ((ru.ru_nvcsw + ru.ru_nivcsw) as u64, ru.ru_nivcsw as u64)
        }
    }

    fn average(old: u64, sample: u64) -> u64 {
        if old == 0 {
            sample
        } else {
            (old * 7 + sample) / 8
        }
    }

    pub fn before_acquire(word: &AtomicU32) {
        if !crate::load::oversubscribed() {
            return;
        }
        if !crate::config::ADMISSION.load(Relaxed) {
            // Admission off: still measure the holds, for comparison.
            if crate::config::stats_on() {
                STATE.with(|cell| {
                    cell.set(Predictor {
                        admitted: true,
                        ..cell.get()
                    })
                });
            }
            return;
        }
        STATE.with(|cell| {
            let mut p = cell.get();
            let now = mono_ns();
            let (switches, involuntary) = switch_counts();
            if switches != p.switches {
                if involuntary != p.involuntary && p.burst_start_ns != 0 {
                    p.burst_ns =
                        average(p.burst_ns, p.last_seen_ns.saturating_sub(p.burst_start_ns));
                }
                p.burst_start_ns = now;
                p.switches = switches;
                p.involuntary = involuntary;
            }
            p.last_seen_ns = now;
            bump(Counter::admission_checks);
            let held = word.load(Relaxed) != 0;
            let need = p.hold_ns * if held { 2 } else { 1 };
            let ran = now - p.burst_start_ns;
            if p.burst_ns != 0 && p.burst_ns.saturating_sub(ran) < need {
                bump(Counter::admission_yields);
                crate::shim::yield_now();
                let (switches, involuntary) = switch_counts();
                p.switches = switches;
                p.involuntary = involuntary;
                p.burst_start_ns = mono_ns();
                p.last_seen_ns = p.burst_start_ns;
            }
            p.admitted = true;
            cell.set(p);
        });
    }

    pub fn acquired() {
        STATE.with(|cell| {
            let mut p = cell.get();
            if !p.admitted {
                return;
            }
            p.acquired_ns = mono_ns();
            if crate::config::stats_on() {
                p.switches_at_acquire = switch_counts().0;
            }
            cell.set(p);
        });
    }

    pub fn releasing() {
        STATE.with(|cell| {
            let mut p = cell.get();
            if !p.admitted {
                return;
            }
            let now = mono_ns();
            p.hold_ns = average(p.hold_ns, now.saturating_sub(p.acquired_ns).max(1));
            p.last_seen_ns = now;
            if crate::config::stats_on() {
                bump(Counter::holds_measured);
                if switch_counts().0 != p.switches_at_acquire {
                    bump(Counter::holds_preempted);
                }
            }
            p.admitted = false;
            cell.set(p);
        });
    }
}

#[cfg(loom)]
mod imp {
    pub fn before_acquire(_word: &crate::shim::AtomicU32) {}
    pub fn acquired() {}
    pub fn releasing() {}
}

pub use imp::{acquired, before_acquire, releasing};

/// Admission, or the statistics that measure holds, is on: the spinlock
/// then calls the functions above; otherwise it skips them entirely.
#[inline]
pub fn active() -> bool {
    use core::sync::atomic::Ordering::Relaxed;
    crate::config::ADMISSION.load(Relaxed) || crate::config::stats_on()
}
