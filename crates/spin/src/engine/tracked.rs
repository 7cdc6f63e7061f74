//! The threads an engine follows: what it keeps per thread ([`Tracked`]),
//! and following the process's thread list as threads start and end.

use super::holds::Held;
use super::traps::EntryTrap;
use super::Engine;
use crate::detector::ThreadDetector;
use crate::perf::{OpenError, ThreadSampler};
use crate::sample::Sample;
use crate::threads;

/// One thread of the process, as the engine follows it.
pub(super) struct Tracked {
    pub(super) sampler: ThreadSampler,
    pub(super) entry: Option<EntryTrap>,
    /// Loop addresses not to trap again (they mostly passed straight through).
    pub(super) untrapped: Vec<u64>,
    /// The kernel refused an entry trap for this thread: do not ask again.
    pub(super) entry_refused: bool,
    /// When a trap that stops its thread was last removed: a stop it sent
    /// just before may still arrive.
    pub(super) trap_removed_ns: u64,
    pub(super) detector: ThreadDetector,
    /// How the thread is held, if it is (stopped or demoted).
    pub(super) held: Option<Held>,
    /// Samples in the current episode.
    pub(super) episode_samples: u64,
    /// Sampled at the suspect period since (ns), if it is.
    pub(super) suspect_since: Option<u64>,
    pub(super) last_spin_ns: u64,
    /// The newest sample (the state a hold's replay starts from).
    pub(super) last_sample: Option<Sample>,
}

impl Tracked {
    fn new(sampler: ThreadSampler) -> Tracked {
        Tracked {
            sampler,
            entry: None,
            untrapped: Vec::new(),
            entry_refused: false,
            trap_removed_ns: 0,
            detector: ThreadDetector::new(),
            held: None,
            episode_samples: 0,
            suspect_since: None,
            last_spin_ns: 0,
            last_sample: None,
        }
    }

    /// Removes the thread's entry trap (closing its breakpoint), noting when
    /// if a stop it signalled may still be on its way.
    pub(super) fn take_entry_trap(&mut self, now_ns: u64) -> Option<EntryTrap> {
        let e = self.entry.take()?;
        if e.stops_itself {
            self.trap_removed_ns = now_ns;
        }
        Some(e)
    }
}

impl Engine {
    /// Follows the process's thread list: samples new threads, forgets ended ones.
    /// Fails only when perf refuses (permissions); a thread that ends while
    /// being attached is skipped.
    pub fn scan(&mut self) -> Result<(), OpenError> {
        let Ok(tids) = threads::list(self.pid) else {
            self.forget_all();
            return Ok(());
        };
        // A listing taken while other threads exit can skip a live one:
        // only a thread whose own entry is gone has ended.
        let gone: Vec<i32> = self
            .threads
            .keys()
            .copied()
            .filter(|&t| tids.binary_search(&t).is_err() && !threads::listed(self.pid, t))
            .collect();
        for tid in gone {
            self.forget(tid);
        }
        for tid in tids {
            if self.threads.contains_key(&tid) {
                continue;
            }
            match ThreadSampler::open(tid, self.base_period(), false) {
                Ok(sampler) => {
                    self.stats.threads_seen += 1;
                    self.threads.insert(tid, Tracked::new(sampler));
                }
                Err(OpenError::Gone) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Stops following `tid` (it ended), releasing it first if it is held.
    fn forget(&mut self, tid: i32) {
        if self.threads.get(&tid).is_some_and(|t| t.held.is_some()) {
            self.restore(tid);
        }
        self.threads.remove(&tid);
        if let Some(f) = &mut self.freezer {
            f.forget(tid);
        }
        if let Some(m) = &mut self.marks {
            m.forget(tid);
        }
    }

    /// The process is gone: forgets every thread.
    fn forget_all(&mut self) {
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            self.forget(tid);
        }
    }
}
