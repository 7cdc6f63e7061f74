//! How often each thread is sampled: the configured period, the idle period
//! while the machine has not been oversubscribed for a while, and the
//! suspect period for threads that spun recently.

use super::Engine;
use crate::config::{self, Action};
use crate::perf::ThreadSampler;

/// Time without oversubscription before sampling relaxes (see
/// [`config::RELAX_AFTER`]).
const RELAX_AFTER_NS: u64 = config::ns(config::RELAX_AFTER);

/// Whether sampling relaxes at `now_ns`, the machine last seen oversubscribed
/// at `last_over_ns`.
fn relaxes(now_ns: u64, last_over_ns: u64) -> bool {
    now_ns.saturating_sub(last_over_ns) > RELAX_AFTER_NS
}

/// Whether a suspect goes back to normal sampling: not spinning now, and no
/// spinning sample for longer than `suspect_ns`.
fn no_longer_suspect(spinning: bool, now_ns: u64, last_spin_ns: u64, suspect_ns: u64) -> bool {
    !spinning && now_ns.saturating_sub(last_spin_ns) > suspect_ns
}

impl Engine {
    /// The period of threads that are not suspects.
    pub(super) fn base_period(&self) -> u64 {
        if self.relaxed {
            self.cfg.idle_period_ns
        } else {
            self.cfg.period_ns
        }
    }

    /// Samples at the idle period after `RELAX_AFTER` without oversubscription,
    /// at the full period as soon as the machine is oversubscribed again.
    pub(super) fn adapt_sampling(&mut self, now_ns: u64) {
        if self.cfg.idle_period_ns <= self.cfg.period_ns {
            return;
        }
        let over = self.cfg.action == Action::Observe || self.load.oversubscribed(now_ns);
        let relax = if over {
            self.last_over_ns = now_ns;
            false
        } else {
            relaxes(now_ns, self.last_over_ns)
        };
        if relax == self.relaxed {
            return;
        }
        self.relaxed = relax;
        self.stats.period_switches += 1;
        let period = self.base_period();
        for t in self.threads.values_mut() {
            if t.suspect_since.is_none() {
                t.sampler.set_period(period);
            }
            // Nothing is stopped while relaxed: a trap would only cost hits.
            if relax && t.take_entry_trap(now_ns).is_some() {
                self.stats.entry_traps_removed += 1;
            }
        }
    }

    /// `tid` was just sampled spinning at `time_ns`: sample it at the suspect
    /// period, each sample waking the detector, if that serves anything.
    pub(super) fn make_suspect(&mut self, tid: i32, time_ns: u64) {
        // Fast sampling serves demotion (catching a spinner again soon,
        // restoring it as soon as it leaves): with a vCPU free for every
        // runnable thread nothing is demoted, and the extra timer
        // interrupts would only slow the program.
        let worth_watching =
            self.cfg.action == Action::Observe || self.load.oversubscribed(time_ns);
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        if t.suspect_since.is_none() && worth_watching {
            if let Ok(fast) = ThreadSampler::open(tid, self.cfg.suspect_period_ns, true) {
                // Samples still in the old buffer are older than this one: dropped.
                t.sampler = fast;
                t.suspect_since = Some(time_ns);
            }
        }
    }

    /// Puts threads that stopped spinning a while ago back on the base period.
    pub(super) fn clear_suspects(&mut self, now_ns: u64) {
        let slow = self.base_period();
        for (&tid, t) in self.threads.iter_mut() {
            let done = no_longer_suspect(
                t.detector.spinning(),
                now_ns,
                t.last_spin_ns,
                self.cfg.suspect_ns,
            );
            if t.suspect_since.is_some() && done {
                if let Ok(sampler) = ThreadSampler::open(tid, slow, false) {
                    t.sampler = sampler;
                    t.suspect_since = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_relaxes_only_after_a_quiet_spell() {
        let over_at = 5_000_000_000;
        assert!(!relaxes(over_at, over_at));
        assert!(!relaxes(over_at + RELAX_AFTER_NS, over_at));
        assert!(relaxes(over_at + RELAX_AFTER_NS + 1, over_at));
        // A clock reading older than the last sighting is not a quiet spell.
        assert!(!relaxes(over_at - 1, over_at));
    }

    #[test]
    fn a_suspect_stays_one_while_it_spins_or_spun_lately() {
        let suspect_ns = 50_000_000;
        let last_spin = 1_000_000_000;
        let later = last_spin + suspect_ns + 1;
        assert!(no_longer_suspect(false, later, last_spin, suspect_ns));
        assert!(!no_longer_suspect(true, later, last_spin, suspect_ns));
        assert!(!no_longer_suspect(
            false,
            last_spin + suspect_ns,
            last_spin,
            suspect_ns
        ));
    }
}
