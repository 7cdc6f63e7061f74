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
//!
//! With vsched's scheduler running, the channel (channel.rs) replaces the
//! prediction with the scheduler's facts, read with plain loads: the end
//! of the thread's slice, and its vCPU's predicted switch-off (the host
//! stopping the vCPU, which preempts a holder whether or not the program
//! is oversubscribed, so this path runs on any machine). A thread whose
//! slice ends before `need` yields first; one whose vCPU is predicted to
//! go off first is I-Spinlock's "incapable" thread: it waits, spinning
//! without the lock, for the switch-off to come and go (its published
//! switch-off count moves), bounded (`admit_by_channel`). Each hold is
//! checked against that count (holds_observed, holds_switched_off: the
//! paper's problematic preemptions), and a hold that sat through a
//! switch-off does not feed the average critical section. Statistics
//! alone (`--stats`, admission off) take the channel's slot too, to count
//! those holds: a baseline for admission.

#[cfg(not(loom))]
mod imp {
    use crate::channel::Published;
    use crate::clock::mono_ns;
    use crate::shim::AtomicU32;
    use crate::stats::{bump, Counter};
    use core::cell::Cell;
    use core::sync::atomic::Ordering::Relaxed;

    /// Longest an incapable thread waits past the predicted switch-off:
    /// one heartbeat period (1 ms, state.bpf.h beat_ns), the prediction's
    /// own resolution. Waiting longer would cost more than most holds a
    /// switch-off could cut.
    const MAX_WAIT_NS: u64 = 1_000_000;
    /// PAUSE instructions between two looks at the published state while
    /// waiting: a look is a few loads; this keeps the loop off the
    /// shared cache line without overshooting the switch-off's return by
    /// more than a microsecond or so.
    const WAIT_PAUSES: u32 = 64;

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
        /// It went by the scheduler's channel, whose switch-off count
        /// read `switch_offs_at_acquire` when the lock was taken.
        via_channel: bool,
        switch_offs_at_acquire: u32,
        /// A wait for the switch-off predicted at this time ended without
        /// it: the prediction is wrong (the time names the stretch: its
        /// start plus the shortest whole stretch), and is not waited for
        /// again.
        mispredicted_off: Option<u64>,
    }

    thread_local! {
        static STATE: Cell<Predictor> = const { Cell::new(Predictor {
            burst_start_ns: 0, last_seen_ns: 0, switches: 0, involuntary: 0,
            burst_ns: 0, hold_ns: 0, acquired_ns: 0, switches_at_acquire: 0, admitted: false,
            via_channel: false, switch_offs_at_acquire: 0, mispredicted_off: None,
        }) };
    }

    /// Admission by the scheduler's facts (the module comment): returns
    /// when the thread may take the lock.
    ///
    /// Only a switch-off predicted between now and the hold's end makes
    /// a thread incapable: one predicted in the past means the stretch
    /// outran the shortest one seen, and nothing is known of its end.
    /// An incapable thread waits until the switch-off has come (its count
    /// moved), its run changed (another vCPU, a fresh run: a new
    /// prediction), or `need` (at most MAX_WAIT_NS) past the prediction;
    /// a wait that ran out marks that prediction wrong. A slice that ends
    /// before the hold would is left by yielding first.
    fn admit_by_channel(p: &mut Predictor, word: &AtomicU32, seen: Published) {
        bump(Counter::admission_checks);
        if p.hold_ns == 0 || seen.on_cpu == 0 {
            return;
        }
        let held = word.load(Relaxed) != 0;
        let need = p.hold_ns * if held { 2 } else { 1 };
        let now = mono_ns();
        let off = seen.switch_off_ns;
        // A slice end already past was renewed in place and not yet
        // published again (the tick publishes it): nothing is known.
        let slice_end = if seen.slice_end_ns > now {
            seen.slice_end_ns
        } else {
            0
        };
        let off_first = off != 0 && (slice_end == 0 || off <= slice_end);
        if off_first && now < off && now + need > off && p.mispredicted_off != Some(off) {
            bump(Counter::admission_waits);
            let deadline = off + need.min(MAX_WAIT_NS);
            loop {
                for _ in 0..WAIT_PAUSES {
                    core::hint::spin_loop();
                }
                let Some(now_seen) = crate::channel::published() else {
                    return; // the scheduler went away
                };
                // A fresh stretch or run: what was read before the
                // wait (the slice's end too) is about the old one.
                if now_seen.switch_offs != seen.switch_offs
                    || now_seen.on_cpu != seen.on_cpu
                    || now_seen.switch_off_ns != off
                {
                    return;
                }
                if mono_ns() > deadline {
                    bump(Counter::admission_wait_timeouts);
                    p.mispredicted_off = Some(off);
                    return;
                }
            }
        }
        if slice_end != 0 && now + need > slice_end {
            bump(Counter::admission_yields);
            crate::shim::yield_now();
        }
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
        if let Some(seen) = crate::channel::published() {
            STATE.with(|cell| {
                let mut p = cell.get();
                if crate::config::ADMISSION.load(Relaxed) {
                    admit_by_channel(&mut p, word, seen);
                }
                p.admitted = true;
                p.via_channel = true;
                cell.set(p);
            });
            return;
        }
        if !crate::load::oversubscribed() {
            return;
        }
        if !crate::config::ADMISSION.load(Relaxed) {
            // Admission off: still measure the holds, for comparison.
            if crate::config::stats_on() {
                STATE.with(|cell| {
                    cell.set(Predictor {
                        admitted: true,
                        via_channel: false,
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
            p.via_channel = false;
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
            if p.via_channel {
                match crate::channel::published() {
                    Some(seen) => p.switch_offs_at_acquire = seen.switch_offs,
                    None => p.via_channel = false,
                }
            }
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
            // A hold the host's switch-off stretched is not the critical
            // section's length: averaged in, one 7 ms episode would make
            // every later acquisition look incapable.
            let switched_off = p.via_channel
                && crate::channel::published()
                    .is_some_and(|seen| seen.switch_offs != p.switch_offs_at_acquire);
            if p.via_channel {
                bump(Counter::holds_observed);
                if switched_off {
                    bump(Counter::holds_switched_off);
                }
            }
            if !switched_off {
                p.hold_ns = average(p.hold_ns, now.saturating_sub(p.acquired_ns).max(1));
            }
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
