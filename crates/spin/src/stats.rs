//! What an engine counts over its life ([`Stats`]), the spin episodes it saw
//! ([`Event`]), and what it hands back when it finishes ([`Report`]).

use crate::sample::Sample;
use serde::{Deserialize, Serialize};

/// Counters over the engine's life.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub threads_seen: u64,
    pub samples: u64,
    pub lost_samples: u64,
    /// Samples taken while the thread was judged spinning.
    pub spin_samples: u64,
    pub spin_episodes: u64,
    pub demotions: u64,
    /// Restored because a sample showed the thread out of its loop.
    pub restored_on_progress: u64,
    /// Restored because the demotion lease ran out.
    pub restored_on_lease: u64,
    /// Demotions whose wait loop could be replayed (and so was watched).
    pub watched_demotions: u64,
    /// Of those, threads stopped with ptrace instead of demoted.
    pub stops: u64,
    /// Whether ptrace was refused (permissions): spinners were demoted instead.
    pub stop_refused: bool,
    /// Restored because a replay of its wait loop showed the wait was over.
    pub restored_on_release: u64,
    /// Spinning samples not acted on because, replayed against memory by the
    /// time they were read, the wait was already over.
    pub released_before_demotion: u64,
    /// Spinning samples not acted on because the replay showed a loop that
    /// makes progress (a false detection caught before it cost anything).
    pub refuted_by_replay: u64,
    /// Spin episodes withdrawn because a replay refuted them.
    pub spin_episodes_refuted: u64,
    /// Stopped threads resumed at once because they stopped outside their
    /// loop's waiting path (the sample that decided the stop was stale).
    pub resumed_off_path: u64,
    /// Spinners found by replaying two consecutive samples at one address
    /// (a wait whose polled counter moved between them; see `same_wait`).
    pub replay_detections: u64,
    /// Entry traps set (hardware breakpoints on the wait loops of stopped threads).
    pub entry_traps: u64,
    /// Entry traps the kernel refused (no free debug register, permissions).
    pub entry_trap_failures: u64,
    /// Threads stopped the moment they re-entered a wait loop (an entry trap
    /// fired and the replay said the wait was not over).
    pub entry_stops: u64,
    /// Entry trap hits where the wait was already over (the thread went on).
    pub entry_passes: u64,
    /// Entry-trap stops that lasted less than 100 µs (not worth a stop).
    pub entry_stops_short: u64,
    /// Entry traps that stop their thread themselves (BPF program attached).
    pub trap_stops: u64,
    /// Entry traps removed: the machine was no longer oversubscribed, the
    /// loop mostly passed straight through, or its replay changed verdict.
    pub entry_traps_removed: u64,
    /// Entry traps moved to the loop their thread kept being caught in.
    pub entry_traps_moved: u64,
    /// Time threads spent demoted or stopped, summed over all holds (ns).
    pub held_ns: u64,
    /// Switches between the sampling period and the idle period.
    pub period_switches: u64,
    /// Spinning samples not acted on because no vCPU was oversubscribed.
    pub spins_left_alone: u64,
    /// Reschedules forced on demoted threads found running and still spinning.
    pub kicks: u64,
    /// Spinners handed to vsched's scheduler: marked in its channel (the
    /// scheduler deschedules them and clears the mark when it runs them).
    pub channel_marks: u64,
    /// Spinning samples of a thread whose mark the scheduler had not yet
    /// served (nothing else waited for its vCPU): nothing more to do.
    pub channel_marks_pending: u64,
    /// Spinners held by the detector itself because another thread held
    /// their channel slot (thread ids equal modulo the slot count).
    pub channel_slot_taken: u64,
    /// Marked spinners the kernel was made to stop and restart in place,
    /// which the scheduler sees and acts on at once (engine `nudge`).
    pub nudges: u64,
    /// Demotion or restoration refused by the kernel (thread gone, permissions).
    pub sched_failures: u64,
    /// Episodes that ended at the very next sample: an upper bound on false
    /// detections (a real wait that ends right away looks the same).
    pub false_positive_bound: u64,
    /// Whether PAUSE sites could be read from the program's memory.
    pub code_readable: bool,
}

/// A thread started (`started`) or ended a spin episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub time_ns: u64,
    pub tid: i32,
    pub started: bool,
}

impl Stats {
    /// Share of the sampled CPU time that was spinning, %.
    pub fn spin_pct(&self) -> f64 {
        100.0 * self.spin_samples as f64 / self.samples.max(1) as f64
    }

    /// Holds that demoted their thread (SCHED_IDLE) rather than stopped it.
    pub fn demoted(&self) -> u64 {
        self.demotions.saturating_sub(self.stops)
    }
}

/// What an engine leaves behind.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub stats: Stats,
    pub events: Vec<Event>,
    pub samples: Vec<Sample>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_share_and_demotions_follow_from_the_counts() {
        let none = Stats::default();
        // No samples: no share, not a division by zero.
        assert_eq!(none.spin_pct(), 0.0);
        assert_eq!(none.demoted(), 0);
        let some = Stats {
            samples: 200,
            spin_samples: 9,
            demotions: 10,
            stops: 7,
            ..Stats::default()
        };
        assert_eq!(some.spin_pct(), 4.5);
        assert_eq!(some.demoted(), 3);
    }
}
