//! Entry traps: a hardware execute breakpoint on the wait loop a thread was
//! last stopped in, so that the next time it enters that loop it is stopped
//! at its first waiting iteration instead of after spinning until its next
//! sample (docs/spin.md, "Entry traps"). Here: setting, moving and removing
//! traps, acting on their hits, and telling the trap's SIGURG from anyone
//! else's.

use super::holds::Watch;
use super::Engine;
use crate::bpf::TRAP_SIGNAL;
use crate::perf::ThreadSampler;
use crate::replay::Replay;
use crate::sample::Sample;
use crate::threads;
use vsched_os::clock::monotonic_ns;

/// A stop by an entry trap that ends sooner than this did not pay for
/// itself: the stop, the resume and the two wake-ups it takes cost tens of
/// microseconds of the detector's and the thread's time.
pub(super) const ENTRY_MIN_HOLD_NS: u64 = 100_000;

/// Sampled stops elsewhere, in a row, after which a thread's entry trap
/// moves to the loop it was last caught in: its first stop may have been in
/// a start-up wait it never returns to, while a thread that alternates
/// between two loops (libgomp's barriers) must keep its trap.
const ENTRY_MOVE_AFTER: u32 = 3;

/// How long after a trap that stops its thread was removed a stop by its
/// signal is still taken for the trap's (sent just before the removal): one
/// detector tick covers a signal that was on its way.
const TRAP_SIGNAL_GRACE_NS: u64 = 10_000_000;

/// Loops whose entry trap was removed for passing too often, per thread: a
/// thread waits in a handful of loops; the oldest is forgotten first.
const UNTRAPPED_MEMORY: usize = 8;

/// Wasted hits forgiven before a trap is judged: the first hits of a new
/// trap often come while the program is still settling into its pattern.
const WASTE_GRACE: u64 = 8;

/// A hardware execute breakpoint on the wait loop a thread was last stopped
/// in. A thread handed its turn usually comes back to the same loop a little
/// later (a ring stage, a consumer, a barrier); with a trap on the loop, its
/// registers arrive the instant it re-enters, the replay decides, and a
/// thread that must wait is stopped after one iteration rather than after
/// spinning until its next sample. A trap costs the thread a debug exception
/// per hit, so one that keeps firing without leading to a stop is removed.
pub(super) struct EntryTrap {
    ip: u64,
    /// The loop's waiting path (sorted), as learnt when the trap was set.
    path: Vec<u64>,
    sampler: ThreadSampler,
    /// A hit stops the thread itself (see `bpf`); its samples are read when
    /// the stop is reported, not polled.
    pub(super) stops_itself: bool,
    tally: Tally,
}

/// How an entry trap has fared: what decides whether it stays, moves or goes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    /// Sampled stops in other loops since the last stop in this one.
    misses: u32,
    /// Stops that ended sooner than `ENTRY_MIN_HOLD_NS` (not worth a stop).
    short: u64,
    stops: u64,
    passes: u64,
}

impl Tally {
    /// Whether the trap should go: hits that passed straight through plus
    /// stops that ended too soon to pay off clearly outnumber worthwhile
    /// stops (2 to 1, after a grace of `WASTE_GRACE`).
    fn wasted(&self) -> bool {
        let waste = self.passes + self.short;
        waste > WASTE_GRACE + 2 * self.stops.saturating_sub(self.short)
    }

    /// The thread was stopped by sampling, in the trap's loop (`here`) or
    /// in another: whether the trap should move to that other loop now.
    fn caught(&mut self, here: bool) -> bool {
        if here {
            self.misses = 0;
            return false;
        }
        self.misses += 1;
        self.misses >= ENTRY_MOVE_AFTER
    }

    /// The trap stopped its thread on entering the loop.
    fn stopped(&mut self) {
        self.stops += 1;
        self.misses = 0;
    }
}

/// Remembers that loop `ip` is not to be trapped again, forgetting the
/// oldest such loop beyond `UNTRAPPED_MEMORY`.
fn remember_untrapped(untrapped: &mut Vec<u64>, ip: u64) {
    if untrapped.len() == UNTRAPPED_MEMORY {
        untrapped.remove(0);
    }
    untrapped.push(ip);
}

/// Whether a SIGURG stop that no replay kept is the trap's own signal, to be
/// suppressed: the kernel sent it (kill() and tgkill() say otherwise) and
/// the trap left a sample for it or was removed moments ago. Anyone else's
/// SIGURG is delivered.
fn traps_own_signal(from_kernel: bool, trap_sample: bool, trap_removed_lately: bool) -> bool {
    from_kernel && (trap_sample || trap_removed_lately)
}

impl Engine {
    /// Sets an entry trap on the loop `tid` was just stopped in, unless it
    /// has one or that loop passed through too often.
    pub(super) fn arm_entry_trap(&mut self, tid: i32) {
        if !self.cfg.entry_traps {
            return;
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some((ip, path)) = t
            .held
            .as_ref()
            .and_then(|h| h.watch.as_ref())
            .map(|w| (w.trap_at, w.path.clone()))
        else {
            return;
        };
        if t.entry_refused || t.untrapped.contains(&ip) {
            return;
        }
        // One trap per thread (a perf_event_open and a debug register each);
        // it moves only after several stops in a row elsewhere.
        if let Some(e) = &mut t.entry {
            if !e.tally.caught(e.ip == ip) {
                return;
            }
            t.take_entry_trap(monotonic_ns()); // frees its debug register first
            self.stats.entry_traps_moved += 1;
        }
        match ThreadSampler::open_entry_trap(tid, ip) {
            Ok(sampler) => {
                self.stats.entry_traps += 1;
                // A thread that blocks the trap's signal would never take
                // it (no stop): its trap only wakes the detector.
                let stops_itself = self.stop_program.as_ref().is_some_and(|p| {
                    !threads::blocks_signal(self.pid, tid, TRAP_SIGNAL)
                        && p.attach(sampler.fd()).is_ok()
                });
                self.stats.trap_stops += stops_itself as u64;
                t.entry = Some(EntryTrap {
                    ip,
                    path,
                    sampler,
                    stops_itself,
                    tally: Tally::default(),
                });
            }
            Err(_) => {
                self.stats.entry_trap_failures += 1;
                t.entry_refused = true;
            }
        }
    }

    /// The pollable descriptors of traps that only wake the detector.
    pub(super) fn waking_trap_fds(&self) -> impl Iterator<Item = libc::c_int> + '_ {
        self.threads
            .values()
            .filter_map(|t| t.entry.as_ref())
            .filter(|e| !e.stops_itself)
            .map(|e| e.sampler.fd())
    }

    /// Acts on the newest hit of every entry trap that fired.
    pub(super) fn poll_entry_traps(&mut self) {
        let mut hits = vec![];
        for (&tid, t) in self.threads.iter_mut() {
            if let Some(e) = t.entry.as_mut().filter(|e| !e.stops_itself) {
                let mut newest = None;
                e.sampler.drain(|s| newest = Some(s));
                if let Some(s) = newest {
                    hits.push((tid, s));
                }
            }
        }
        for (tid, s) in hits {
            self.entry_hit(tid, s, false);
        }
    }

    /// Threads stopped by SIGURG, maybe their entry trap's (see `bpf`):
    /// keeps those whose wait is not over, lets the others go. The trap's
    /// signal comes from the kernel with a new trap sample (or just after
    /// the trap was removed); any other SIGURG (kill(), tgkill()) is passed
    /// on.
    pub(super) fn check_trap_stops(&mut self) {
        let Some(f) = &mut self.freezer else { return };
        let stopped = f.take_signal_stopped();
        for tid in stopped {
            let from_kernel = self
                .freezer
                .as_ref()
                .is_some_and(|f| f.signal_from_kernel(tid));
            let mut newest = None;
            let mut removed_lately = false;
            if let Some(t) = self.threads.get_mut(&tid) {
                if let Some(e) = t.entry.as_mut().filter(|e| e.stops_itself) {
                    // Older samples, if any, are of hits whose signal was
                    // taken elsewhere (see `Freezer::stopped`): stale.
                    e.sampler.drain(|s| newest = Some(s));
                }
                removed_lately =
                    monotonic_ns().saturating_sub(t.trap_removed_ns) < TRAP_SIGNAL_GRACE_NS;
            }
            let held = match newest {
                Some(s) if from_kernel => self.entry_hit(tid, s, true),
                _ => false,
            };
            if held {
                continue;
            }
            let Some(f) = &mut self.freezer else { return };
            if traps_own_signal(from_kernel, newest.is_some(), removed_lately) {
                f.resume(tid);
            } else {
                f.pass_signal(tid, TRAP_SIGNAL);
            }
        }
    }

    /// `tid` entered the loop its trap is on: stop it if its wait is not
    /// over (`stopped`: the trap stopped it already). Older hits of the same
    /// trap are stale and were dropped. True if the thread is now held
    /// stopped.
    fn entry_hit(&mut self, tid: i32, mut s: Sample, stopped: bool) -> bool {
        let Some(t) = self.threads.get_mut(&tid) else {
            return false;
        };
        // Held already: the hit came before the stop took effect. (Or the
        // thread is demoted, not stopped: a stop by its trap then only cost
        // it a stop and a resume, like a pass.)
        if t.held.is_some() {
            if stopped {
                self.count_trap_pass(tid);
            }
            return false;
        }
        s.tid = tid;
        if !self.load.oversubscribed(s.time_ns) {
            // Nothing would be stopped: each iteration would only cost a trap.
            self.remove_entry_trap(tid, false);
            return false;
        }
        t.last_sample = Some(s);
        // Replayed along the path learnt when the trap was set: from the
        // loop's head, a branch inside the loop can look like its exit.
        let Some(path) = t.entry.as_ref().map(|e| e.path.clone()) else {
            return false;
        };
        match self.replay_from(&s, Some(&path)) {
            Some((Replay::Waiting { .. }, words)) => {
                let watch = Watch {
                    ip: s.ip,
                    regs: s.regs,
                    path,
                    trap_at: s.ip,
                    words,
                };
                if !stopped && !self.stop(tid) {
                    self.remove_entry_trap(tid, false);
                    return false;
                }
                self.hold_stopped(tid, monotonic_ns(), watch);
                self.stats.entry_stops += 1;
                let t = self.threads.get_mut(&tid).expect("listed");
                if let Some(h) = &mut t.held {
                    h.by_trap = true;
                }
                if let Some(e) = &mut t.entry {
                    e.tally.stopped();
                }
                true
            }
            Some((Replay::Leaves, _)) => {
                self.stats.entry_passes += 1;
                self.count_trap_pass(tid);
                false
            }
            // The loop no longer replays as a wait from its entry.
            _ => {
                self.remove_entry_trap(tid, true);
                false
            }
        }
    }

    /// A hit of `tid`'s trap did not lead to a worthwhile stop.
    fn count_trap_pass(&mut self, tid: i32) {
        self.count_against_trap(tid, |tally| tally.passes += 1);
    }

    /// A stop by `tid`'s entry trap ended after `held_ns`: one too short to
    /// pay for itself counts against the trap.
    pub(super) fn judge_trap_stop(&mut self, tid: i32, held_ns: u64) {
        if held_ns < ENTRY_MIN_HOLD_NS {
            self.stats.entry_stops_short += 1;
            self.count_against_trap(tid, |tally| tally.short += 1);
        }
    }

    /// Counts something against `tid`'s trap; the trap goes for good once
    /// such things outweigh its stops.
    fn count_against_trap(&mut self, tid: i32, count: impl FnOnce(&mut Tally)) {
        let Some(e) = self.threads.get_mut(&tid).and_then(|t| t.entry.as_mut()) else {
            return;
        };
        count(&mut e.tally);
        if e.tally.wasted() {
            self.remove_entry_trap(tid, true);
        }
    }

    /// Removes `tid`'s entry trap; `for_good`: never trap that loop again.
    pub(super) fn remove_entry_trap(&mut self, tid: i32, for_good: bool) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(e) = t.take_entry_trap(monotonic_ns()) else {
            return;
        };
        self.stats.entry_traps_removed += 1;
        if for_good {
            remember_untrapped(&mut t.untrapped, e.ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(passes: u64, short: u64, stops: u64) -> Tally {
        Tally {
            passes,
            short,
            stops,
            misses: 0,
        }
    }

    #[test]
    fn entry_traps_go_when_they_do_not_pay() {
        // A ring: every hit stops the thread for a long time.
        assert!(!tally(8, 1, 5000).wasted());
        // A grace of 8 wasted hits before anything is judged.
        assert!(!tally(8, 0, 0).wasted());
        assert!(tally(9, 0, 0).wasted());
        // A pipeline stage whose waits end at once: passes and short stops.
        assert!(tally(300, 12, 88).wasted());
        // Short stops count against the trap, not for it.
        assert!(tally(0, 40, 40).wasted());
        assert!(!tally(0, 10, 40).wasted());
    }

    #[test]
    fn a_trap_moves_after_three_stops_in_a_row_elsewhere() {
        let mut t = Tally::default();
        assert!(!t.caught(false));
        assert!(!t.caught(false));
        // A stop in the trap's own loop starts the count again.
        assert!(!t.caught(true));
        assert_eq!(t.misses, 0);
        assert!(!t.caught(false));
        assert!(!t.caught(false));
        assert!(t.caught(false));
        // So does a stop by the trap itself.
        let mut t = tally(0, 0, 0);
        t.caught(false);
        t.caught(false);
        t.stopped();
        assert_eq!((t.stops, t.misses), (1, 0));
        assert!(!t.caught(false));
    }

    #[test]
    fn untrapped_loops_are_remembered_oldest_out() {
        let mut untrapped = vec![];
        for ip in 0..UNTRAPPED_MEMORY as u64 + 2 {
            remember_untrapped(&mut untrapped, 0x1000 + ip);
        }
        assert_eq!(untrapped.len(), UNTRAPPED_MEMORY);
        assert_eq!(untrapped.first(), Some(&0x1002));
        assert_eq!(
            untrapped.last(),
            Some(&(0x1000 + UNTRAPPED_MEMORY as u64 + 1))
        );
    }

    #[test]
    fn only_the_kernels_sigurg_after_a_trap_hit_is_suppressed() {
        // The trap fired: its sample is there and the kernel sent the signal.
        assert!(traps_own_signal(true, true, false));
        // The trap was removed just before its signal arrived.
        assert!(traps_own_signal(true, false, true));
        // A SIGURG from kill() or tgkill() is the program's, whatever the trap did.
        assert!(!traps_own_signal(false, true, true));
        // The kernel's own SIGURG (socket out-of-band data), no trap involved.
        assert!(!traps_own_signal(true, false, false));
    }
}
