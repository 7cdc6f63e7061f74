//! Holding a spinner off its vCPU and letting it go: a thread whose wait loop
//! replays is stopped (ptrace) and watched; any other is demoted to
//! SCHED_IDLE under a lease, journaled to the watchdog first. Every hold ends
//! in [`Engine::restore`].

use super::Engine;
use crate::channel::MarkOutcome;
use crate::config::Config;
use crate::detector::Transition;
use crate::replay::{Replay, Word};
use crate::sample::NREGS;
use crate::sched::demoted;
use crate::threads;
use vsched_os::clock::monotonic_ns;
use vsched_os::sched::{self, SchedAttr};

/// A thread held off its vCPU.
pub(super) struct Held {
    pub(super) since_ns: u64,
    pub(super) hold: Hold,
    /// The sampled state and waiting path of a loop that replays.
    pub(super) watch: Option<Watch>,
    /// Stopped by its entry trap (the trap is judged by how long such
    /// holds last).
    pub(super) by_trap: bool,
}

/// How a spinner is kept off its vCPU.
pub(super) enum Hold {
    /// SCHED_IDLE; restored to this.
    Demoted(SchedAttr),
    /// Stopped with ptrace.
    Stopped,
}

/// A held thread's wait loop, replayed to find out when its wait is over.
pub(super) struct Watch {
    pub(super) ip: u64,
    pub(super) regs: [u64; NREGS],
    /// The loop's waiting path (sorted instruction addresses).
    pub(super) path: Vec<u64>,
    /// Where an entry trap on this loop goes.
    pub(super) trap_at: u64,
    /// The words the loop read, with the values it kept waiting on: while
    /// none changes, the replay's answer cannot change either.
    pub(super) words: Vec<Word>,
}

impl Held {
    /// When the hold ends at the latest: a watched loop is let go by its
    /// replay, so its lease is only a safety net and longer.
    pub(super) fn lease_end(&self, cfg: &Config) -> u64 {
        let lease = if self.watch.is_some() {
            cfg.watched_lease_ns
        } else {
            cfg.max_demotion_ns
        };
        self.since_ns + lease
    }

    /// The waiting path of a stopped thread whose loop replays: where it
    /// must have stopped if it is still waiting.
    fn stopped_path(&self) -> Option<&[u64]> {
        match (&self.hold, &self.watch) {
            (Hold::Stopped, Some(w)) => Some(&w.path),
            _ => None,
        }
    }
}

/// Whether a thread that stopped at `ip` is off its loop's waiting `path`
/// (sorted): the sample that decided the stop was stale, and the thread has
/// moved on. Registers unreadable (None) are no evidence that it did.
fn off_path(path: &[u64], ip: Option<u64>) -> bool {
    ip.is_some_and(|ip| path.binary_search(&ip).is_err())
}

/// The scheduling change that makes the kernel reschedule a running demoted
/// thread now: one nice level up from the demoted state (and back after).
fn kick_step(demoted: SchedAttr) -> SchedAttr {
    SchedAttr {
        nice: demoted.nice - 1,
        ..demoted
    }
}

impl Engine {
    /// Holds spinner `tid`, sampled at `now_ns`: stops it if its loop
    /// replays as a wait (and traps the loop's entry), demotes it if the
    /// loop cannot be replayed, and leaves it alone if the replay shows its
    /// wait over or the loop computing (withdrawing the detection).
    pub(super) fn demote(&mut self, tid: i32, now_ns: u64) {
        if self.hand_to_scheduler(tid, now_ns) {
            return;
        }
        let (replay, words) = self.replay_newest(tid).unzip();
        let watch = match replay {
            // Its wait ended since the sample was taken: leave it alone.
            Some(Replay::Leaves) => {
                self.stats.released_before_demotion += 1;
                return;
            }
            // The detector's verdict was wrong: this loop computes.
            Some(Replay::Progressing) => {
                self.stats.refuted_by_replay += 1;
                let params = self.cfg.params;
                if let Some(t) = self.threads.get_mut(&tid) {
                    let ip = t.last_sample.map_or(0, |s| s.ip);
                    if t.detector.refute(ip, &params) == Transition::Ended {
                        self.stats.spin_episodes_refuted += 1;
                        t.episode_samples = 0;
                    }
                }
                return;
            }
            Some(Replay::Waiting { path, trap_at }) => self.threads.get(&tid).and_then(|t| {
                let s = t.last_sample?;
                Some(Watch {
                    ip: s.ip,
                    regs: s.regs,
                    path,
                    trap_at,
                    words: words.unwrap_or_default(),
                })
            }),
            _ => None,
        };
        // A loop that replays can tell when its wait is over without running:
        // stop the thread outright.
        let watch = match watch {
            Some(w) if self.stop(tid) => {
                self.hold_stopped(tid, now_ns, w);
                self.arm_entry_trap(tid);
                return;
            }
            other => other,
        };
        let Ok(original) = sched::get(tid) else {
            self.stats.sched_failures += 1;
            return;
        };
        if original.policy == sched::SCHED_IDLE {
            return; // already as low as it goes
        }
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        // Journal first: if vsched dies right after the change, the watchdog knows.
        if watchdog.demoting(self.pid, tid, &original).is_err() {
            self.stats.sched_failures += 1;
            return;
        }
        match sched::set_or_plain(tid, &demoted(self.cfg.slice_ns)) {
            Ok(()) => {
                self.stats.demotions += 1;
                self.stats.watched_demotions += watch.is_some() as u64;
                self.hold(tid, now_ns, Hold::Demoted(original), watch);
            }
            Err(_) => {
                self.stats.sched_failures += 1;
                let _ = watchdog.restored(tid);
            }
        }
    }

    /// Hands spinner `tid` to vsched's scheduler, if one reads the channel:
    /// marked, and its vCPU nudged when the mark is new. False: the engine
    /// holds it itself.
    fn hand_to_scheduler(&mut self, tid: i32, now_ns: u64) -> bool {
        let Some(marks) = &mut self.marks else {
            return false;
        };
        match marks.mark(tid, now_ns) {
            MarkOutcome::Marked => {
                self.stats.channel_marks += 1;
                self.nudge(tid);
                true
            }
            MarkOutcome::Pending => {
                self.stats.channel_marks_pending += 1;
                true
            }
            MarkOutcome::SlotTaken => {
                self.stats.channel_slot_taken += 1;
                false
            }
            MarkOutcome::NoScheduler => false,
        }
    }

    /// Makes the kernel tell the scheduler about `tid` now, so that a
    /// running spinner leaves its vCPU at once rather than at the next
    /// tick (4 ms at HZ=250): the kernel stops and restarts it in place,
    /// which the scheduler sees (spinners.bpf.h). Done by setting the
    /// thread's utilisation clamps to what they are, which changes
    /// nothing; on a kernel without utilisation clamps, by its nice level
    /// one step and back (setpriority: sched_setattr would also fix its
    /// slice as a custom one), journaled to the watchdog like a demotion
    /// so that a vsched killed between the two steps leaves no thread a
    /// step off.
    fn nudge(&mut self, tid: i32) {
        if !self.nudge_by_nice {
            match sched::restart_in_place(tid) {
                Ok(()) => {
                    self.stats.nudges += 1;
                    return;
                }
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => self.nudge_by_nice = true,
                Err(_) => {
                    self.stats.sched_failures += 1;
                    return;
                }
            }
        }
        let Ok(original) = sched::get(tid) else {
            self.stats.sched_failures += 1;
            return;
        };
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        if watchdog.demoting(self.pid, tid, &original).is_err() {
            self.stats.sched_failures += 1;
            return;
        }
        // Weaker by one step, except at nice 19, the weakest.
        let step = if original.nice < 19 {
            original.nice + 1
        } else {
            original.nice - 1
        };
        let stepped = sched::set_thread_nice(tid, step).is_ok();
        if sched::set_thread_nice(tid, original.nice).is_ok() || !threads::listed(self.pid, tid) {
            let _ = watchdog.restored(tid);
        } else {
            // Left journaled: the watchdog puts it back when vsched exits.
            self.stats.sched_failures += 1;
        }
        if stepped {
            self.stats.nudges += 1;
        }
    }

    /// Stops `tid` with ptrace; false if it cannot be stopped (no freezer,
    /// ptrace refused, thread gone).
    pub(super) fn stop(&mut self, tid: i32) -> bool {
        let Some(f) = &mut self.freezer else {
            return false;
        };
        let stopped = f.stop(tid);
        self.stats.stop_refused |= f.refused();
        stopped
    }

    /// Records the stop of a thread waiting in a loop that replays.
    pub(super) fn hold_stopped(&mut self, tid: i32, now_ns: u64, watch: Watch) {
        self.stats.demotions += 1;
        self.stats.watched_demotions += 1;
        self.stats.stops += 1;
        self.hold(tid, now_ns, Hold::Stopped, Some(watch));
    }

    fn hold(&mut self, tid: i32, now_ns: u64, hold: Hold, watch: Option<Watch>) {
        self.load.held += matches!(hold, Hold::Stopped) as usize;
        if let Some(t) = self.threads.get_mut(&tid) {
            t.held = Some(Held {
                since_ns: now_ns,
                hold,
                watch,
                by_trap: false,
            });
        }
    }

    /// A thread is stopped some microseconds after the sample that decided
    /// it, and that sample may be old: where it actually stopped must be on
    /// the loop's waiting path, or it has moved on (it got the lock, and may
    /// be waiting somewhere else now, or holding something) and is resumed.
    pub(super) fn check_stop_sites(&mut self) {
        let Some(f) = &mut self.freezer else { return };
        let mut moved_on = vec![];
        for tid in f.take_newly_stopped() {
            let Some(path) = self
                .threads
                .get(&tid)
                .and_then(|t| t.held.as_ref()?.stopped_path())
            else {
                continue;
            };
            if off_path(path, f.ip(tid)) {
                moved_on.push(tid);
            }
        }
        for tid in moved_on {
            self.stats.resumed_off_path += 1;
            self.restore(tid);
        }
    }

    /// Forces a reschedule of a running demoted thread: raising the current
    /// task's priority number is a change the kernel acts on immediately.
    pub(super) fn kick(&mut self, tid: i32) {
        let demoted = demoted(self.cfg.slice_ns);
        if sched::set_or_plain(tid, &kick_step(demoted)).is_ok()
            && sched::set_or_plain(tid, &demoted).is_ok()
        {
            self.stats.kicks += 1;
        }
    }

    /// Ends `tid`'s hold: resumes a stopped thread, gives a demoted one its
    /// scheduling back (and tells the watchdog).
    pub(super) fn restore(&mut self, tid: i32) {
        let Some(held) = self.threads.get_mut(&tid).and_then(|t| t.held.take()) else {
            return;
        };
        let held_ns = monotonic_ns().saturating_sub(held.since_ns);
        self.stats.held_ns += held_ns;
        if held.by_trap {
            self.judge_trap_stop(tid, held_ns);
        }
        match held.hold {
            Hold::Stopped => {
                self.load.held -= 1;
                if let Some(f) = &mut self.freezer {
                    f.resume(tid);
                }
            }
            Hold::Demoted(original) => {
                if sched::set(tid, &original).is_err() && threads::listed(self.pid, tid) {
                    self.stats.sched_failures += 1;
                }
                if let Some(w) = &mut self.watchdog {
                    let _ = w.restored(tid);
                }
            }
        }
    }

    /// Restores every thread whose lease ran out.
    pub(super) fn expire_leases(&mut self, now_ns: u64) {
        let expired: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, t)| {
                t.held
                    .as_ref()
                    .is_some_and(|h| now_ns >= h.lease_end(&self.cfg))
            })
            .map(|(&tid, _)| tid)
            .collect();
        for tid in expired {
            self.stats.restored_on_lease += 1;
            self.restore(tid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(hold: Hold, path: Option<Vec<u64>>) -> Held {
        Held {
            since_ns: 1_000,
            hold,
            watch: path.map(|path| Watch {
                ip: 0x1004,
                regs: [0; NREGS],
                path,
                trap_at: 0x1000,
                words: vec![],
            }),
            by_trap: false,
        }
    }

    #[test]
    fn a_watched_hold_gets_the_longer_lease() {
        let cfg = Config::default();
        let blind = held(Hold::Stopped, None);
        let watched = held(Hold::Stopped, Some(vec![0x1000]));
        assert_eq!(blind.lease_end(&cfg), 1_000 + cfg.max_demotion_ns);
        assert_eq!(watched.lease_end(&cfg), 1_000 + cfg.watched_lease_ns);
    }

    #[test]
    fn a_stop_off_the_waiting_path_means_the_thread_moved_on() {
        let path = vec![0x1000, 0x1002, 0x1004];
        assert!(!off_path(&path, Some(0x1002)));
        assert!(off_path(&path, Some(0x1006)));
        // Registers unreadable: no evidence it moved.
        assert!(!off_path(&path, None));
        // Only stopped threads with a known waiting path are checked:
        // demoted ones run on, and where they are says nothing.
        let stopped = held(Hold::Stopped, Some(path.clone()));
        assert_eq!(stopped.stopped_path(), Some(&path[..]));
        let demoted = held(Hold::Demoted(demoted(100_000)), Some(path));
        assert_eq!(demoted.stopped_path(), None);
        assert_eq!(held(Hold::Stopped, None).stopped_path(), None);
    }

    #[test]
    fn a_kick_steps_one_nice_level_up_and_keeps_the_rest() {
        let demoted = demoted(100_000);
        let step = kick_step(demoted);
        assert_eq!(step.nice, demoted.nice - 1);
        assert_eq!(
            SchedAttr {
                nice: demoted.nice,
                ..step
            },
            demoted
        );
    }
}
