//! Replaying held threads' wait loops against the program's memory: whether
//! a spinner's wait is over, whether two samples sit in the same wait, and
//! the watch that resumes stopped threads the moment the words they poll
//! say so.

use super::holds::Hold;
use super::Engine;
use crate::replay::{ProcessMemory, Replay, Snapshot, Word};
use crate::sample::Sample;
use std::collections::HashSet;
use vsched_os::clock::monotonic_ns;

/// How long after the first failed open of the program's memory it is
/// tried again (100 µs). The first failure is usually a program caught
/// mid-exec (see [`ProgramMemory`]), over within microseconds; a failed
/// open costs one small /proc read, so trying soon is cheap. Every spinner
/// caught before the memory opens is demoted blind instead of watched, and
/// a ring at 4x oversubscription makes several of those a millisecond.
const MEMORY_FIRST_RETRY_NS: u64 = 100_000;

/// The longest wait between two tries (50 ms): each failure doubles the
/// wait up to this, so a process whose memory really is closed to us (a
/// setuid program) costs one /proc read per 50 ms after about ten tries.
const MEMORY_RETRY_CEILING_NS: u64 = 50_000_000;

/// The program's memory, opened again after a failure. `spawn` returns as
/// soon as the new program's address space is installed, which is before
/// the kernel writes its auxiliary vector (the open probes the entry point
/// found there); an engine attached in that window once found the memory
/// unreadable and replayed nothing for the whole run.
pub(super) struct ProgramMemory<M = ProcessMemory> {
    pid: i32,
    opener: fn(i32) -> Option<M>,
    memory: Option<M>,
    next_try_ns: u64,
    retry_ns: u64,
}

impl ProgramMemory {
    pub(super) fn open(pid: i32) -> ProgramMemory {
        ProgramMemory::with_opener(pid, ProcessMemory::open, monotonic_ns())
    }
}

impl<M> ProgramMemory<M> {
    fn with_opener(pid: i32, opener: fn(i32) -> Option<M>, now_ns: u64) -> ProgramMemory<M> {
        ProgramMemory {
            pid,
            opener,
            memory: opener(pid),
            next_try_ns: now_ns + MEMORY_FIRST_RETRY_NS,
            retry_ns: MEMORY_FIRST_RETRY_NS,
        }
    }

    /// The memory, if it is readable (opened again when the wait after the
    /// last failure is over at `now_ns`; each failure doubles that wait,
    /// from [`MEMORY_FIRST_RETRY_NS`] up to [`MEMORY_RETRY_CEILING_NS`]).
    pub(super) fn get(&mut self, now_ns: u64) -> Option<&mut M> {
        if self.memory.is_none() && now_ns >= self.next_try_ns {
            self.memory = (self.opener)(self.pid);
            self.retry_ns = (self.retry_ns * 2).min(MEMORY_RETRY_CEILING_NS);
            self.next_try_ns = now_ns + self.retry_ns;
        }
        self.memory.as_mut()
    }
}

/// Addresses remembered as not waits before the set is cleared (4096):
/// far more loops than a program waits in, and cleared rather than aged so
/// that code replaced at the same address (JIT) is looked at again.
const NOT_WAITS_LIMIT: usize = 4096;

/// Loop addresses whose replay showed computation, not a wait (see
/// `Engine::same_wait`): not replayed again.
#[derive(Default)]
pub(super) struct NotWaits(HashSet<u64>);

impl NotWaits {
    fn contains(&self, ip: u64) -> bool {
        self.0.contains(&ip)
    }

    fn insert(&mut self, ip: u64) {
        if self.0.len() >= NOT_WAITS_LIMIT {
            self.0.clear();
        }
        self.0.insert(ip);
    }
}

/// Whether a watched loop's words all still hold the values it kept waiting
/// on, in a batch read `current` of every watched word (empty: the batch
/// failed, and nothing is known to be unchanged).
fn words_unchanged(words: &[Word], current: &[Word]) -> bool {
    !current.is_empty() && words.iter().all(|old| current.contains(old))
}

impl Engine {
    /// Whether two consecutive samples of a thread the detector does not
    /// call spinning sit in the same wait anyway: a wait on a counter that
    /// moves on while others take their turns (a shared ring token, a
    /// ticket) never repeats its registers, yet replayed from both samples
    /// the loop ends its iteration in the same state. Addresses found not
    /// to be waits are not replayed again.
    pub(super) fn same_wait(&mut self, previous: &Sample, s: &Sample) -> bool {
        if previous.ip != s.ip || previous.regs == s.regs || !self.cfg.replay {
            return false;
        }
        if self.not_waits.contains(s.ip) {
            return false;
        }
        let Some(memory) = self.memory.get(s.time_ns) else {
            return false;
        };
        let mut mem = Snapshot::new(memory);
        match self
            .replayer
            .same_wait(&mut mem, s.ip, &previous.regs, &s.regs)
        {
            Some(same) => {
                if !same {
                    self.not_waits.insert(s.ip);
                }
                same
            }
            None => false,
        }
    }

    /// Replays `tid`'s loop from its newest sample, and says which words it
    /// read (None: replay is off or memory is unreadable).
    pub(super) fn replay_newest(&mut self, tid: i32) -> Option<(Replay, Vec<Word>)> {
        let s = self.threads.get(&tid)?.last_sample?;
        self.replay_from(&s, None)
    }

    /// Replays a loop from sample `s`, along a waiting path learnt before
    /// (None: learn it), and says which words it read.
    pub(super) fn replay_from(
        &mut self,
        s: &Sample,
        known_path: Option<&[u64]>,
    ) -> Option<(Replay, Vec<Word>)> {
        if !self.cfg.replay {
            return None;
        }
        let mut mem = Snapshot::new(self.memory.get(s.time_ns)?);
        let replay = self.replayer.replay(&mut mem, s.ip, &s.regs, known_path);
        Some((replay, mem.take_touched()))
    }

    /// Checks the words stopped threads wait on every watch period.
    pub(super) fn check_watched_when_due(&mut self, now_ns: u64) {
        if now_ns >= self.next_watch_ns {
            self.next_watch_ns = now_ns + self.cfg.watch_period_ns;
            self.check_watched();
        }
    }

    /// Checks every watched thread's wait: reads all the words they poll
    /// with one system call, and replays only loops whose words changed;
    /// restores those whose wait is over.
    fn check_watched(&mut self) {
        let Some(mem) = self.memory.get(monotonic_ns()) else {
            return;
        };
        let mut wanted: Vec<(u64, usize)> = self
            .threads
            .values()
            .filter_map(|t| t.held.as_ref()?.watch.as_ref())
            .flat_map(|w| w.words.iter().map(|w| (w.addr, w.len)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        wanted.sort_unstable();
        wanted.dedup();
        // One unreadable word (memory unmapped) makes the batch fail: the
        // replays then read word by word and find out which.
        let current = mem.read_words(&wanted).unwrap_or_default();
        let mut snapshot = Snapshot::new(mem);
        snapshot.prefill(current.iter().copied());
        // Longest-held first: in a ring, a pipeline or a fair lock, the
        // thread whose turn comes next is usually the one that has waited
        // longest. A stopped thread whose wait is over is resumed at once,
        // before the other replays.
        let mut order: Vec<(u64, i32)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| {
                let h = t.held.as_ref()?;
                h.watch.as_ref().map(|_| (h.since_ns, tid))
            })
            .collect();
        order.sort_unstable();
        let mut released = vec![];
        for (_, tid) in order {
            let Some(h) = self.threads.get_mut(&tid).and_then(|t| t.held.as_mut()) else {
                continue;
            };
            let Some(w) = h.watch.as_mut() else { continue };
            if words_unchanged(&w.words, &current) {
                continue;
            }
            snapshot.take_touched();
            match self
                .replayer
                .replay(&mut snapshot, w.ip, &w.regs, Some(&w.path))
            {
                // Still waiting, on new values (a turn counter moved on).
                Replay::Waiting { .. } => w.words = snapshot.take_touched(),
                _ => {
                    if let (Hold::Stopped, Some(f)) = (&h.hold, self.freezer.as_mut()) {
                        f.resume(tid);
                    }
                    released.push(tid);
                }
            }
        }
        for tid in released {
            self.stats.restored_on_release += 1;
            self.restore(tid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn word(addr: u64, value: u8) -> Word {
        Word {
            addr,
            len: 4,
            value: [value, 0, 0, 0, 0, 0, 0, 0],
        }
    }

    #[test]
    fn a_loop_is_replayed_only_when_one_of_its_words_changed() {
        let current = [word(0x10, 1), word(0x20, 7), word(0x30, 0)];
        assert!(words_unchanged(&[word(0x20, 7)], &current));
        assert!(words_unchanged(&[word(0x10, 1), word(0x30, 0)], &current));
        assert!(!words_unchanged(&[word(0x20, 8)], &current));
        // A failed batch read (empty) says nothing: replay.
        assert!(!words_unchanged(&[word(0x20, 7)], &[]));
    }

    #[test]
    fn not_waits_are_remembered_until_the_limit_clears_them() {
        let mut not_waits = NotWaits::default();
        for ip in 0..NOT_WAITS_LIMIT as u64 {
            not_waits.insert(ip);
        }
        assert!(not_waits.contains(0) && not_waits.contains(NOT_WAITS_LIMIT as u64 - 1));
        // One more: cleared, then the new one kept.
        not_waits.insert(0x9999);
        assert!(!not_waits.contains(0));
        assert!(not_waits.contains(0x9999));
    }

    /// Opens fail for the first two tries (a program caught mid-exec).
    fn readable_from_third_try(_pid: i32) -> Option<u32> {
        static TRIES: AtomicU32 = AtomicU32::new(0);
        let n = TRIES.fetch_add(1, Ordering::Relaxed) + 1;
        (n >= 3).then_some(n)
    }

    #[test]
    fn memory_unreadable_at_attach_is_opened_again_within_a_millisecond() {
        // Regression: CI's replayable_waits test once saw 167 of 1133
        // demotions made blind, because the first retry came 50 ms after a
        // program caught mid-exec.
        let mut memory = ProgramMemory::with_opener(1, readable_from_third_try, 0);
        // Not retried before the first wait is over.
        assert!(memory.get(MEMORY_FIRST_RETRY_NS - 1).is_none());
        // Second try fails, the wait doubles.
        assert!(memory.get(MEMORY_FIRST_RETRY_NS).is_none());
        assert!(memory.get(3 * MEMORY_FIRST_RETRY_NS - 1).is_none());
        // Readable once the exec finished; kept from then on.
        assert_eq!(memory.get(3 * MEMORY_FIRST_RETRY_NS), Some(&mut 3));
        assert_eq!(memory.get(MEMORY_RETRY_CEILING_NS), Some(&mut 3));
    }

    fn never_readable(_pid: i32) -> Option<u32> {
        None
    }

    #[test]
    fn memory_closed_to_us_is_tried_at_most_every_ceiling() {
        let mut memory = ProgramMemory::with_opener(1, never_readable, 0);
        let mut now = 0;
        for _ in 0..20 {
            now = memory.next_try_ns;
            assert!(memory.get(now).is_none());
        }
        assert_eq!(memory.next_try_ns - now, MEMORY_RETRY_CEILING_NS);
    }
}
