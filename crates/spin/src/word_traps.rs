//! Hardware write breakpoints on the words stopped threads wait on.
//!
//! A stopped thread's wait ends when some other thread writes a word its
//! loop polls. Reading those words every few microseconds (the watch
//! period) costs the detector a `process_vm_readv` per check, most of it
//! pinning the target's pages, and still adds up to a period of latency to
//! every hand-off. A write breakpoint on the word in every thread of the
//! process instead wakes the detector the moment it is written: the writer
//! pays one debug exception per write, and the words are checked only then
//! (plus a slow fallback poll for writes a breakpoint cannot see: the
//! kernel's, or another process's through shared memory).
//!
//! x86 has four debug registers per thread, one of which an entry trap may
//! hold, so at most [`MAX_WORDS`] words are trapped: the ones most stopped
//! threads wait on. Breakpoints are perf events owned by vsched: they vanish
//! with its descriptors, whatever way it exits.

use crate::perf::ThreadSampler;
use std::collections::BTreeMap;

/// Words trapped at once (debug registers left beside an entry trap).
pub const MAX_WORDS: usize = 3;
/// How long a word nobody waits on any more keeps its traps (holds on the
/// same word come and go; reopening an event per thread each time costs).
const GRACE_NS: u64 = 5_000_000;

struct TrappedWord {
    addr: u64,
    len: usize,
    /// One breakpoint per thread of the process.
    events: BTreeMap<i32, ThreadSampler>,
    /// Threads whose breakpoint the kernel refused: the word is not covered.
    refused: bool,
    /// Since when no stopped thread waits on it.
    unwanted_since: Option<u64>,
}

#[derive(Default)]
pub struct WordTraps {
    words: Vec<TrappedWord>,
    /// Breakpoints the kernel refused (no debug register free, permissions).
    pub failures: u64,
    /// Breakpoints opened.
    pub opened: u64,
}

/// Whether a word can be watched by a debug register (x86: length 1, 2, 4
/// or 8, aligned to it).
fn trappable(addr: u64, len: usize) -> bool {
    matches!(len, 1 | 2 | 4 | 8) && addr % len as u64 == 0
}

impl WordTraps {
    /// Traps the most wanted of `wanted` ((address, length, waiters)) in
    /// every thread of `tids` (sorted), and lets go of words unwanted for a
    /// while and of threads that are gone. True if a breakpoint was added:
    /// a write may have slipped in before it, so the caller checks the words
    /// once more.
    pub fn sync(&mut self, wanted: &[(u64, usize, usize)], tids: &[i32], now_ns: u64) -> bool {
        let mut best: Vec<(u64, usize, usize)> = wanted
            .iter()
            .copied()
            .filter(|&(addr, len, _)| trappable(addr, len))
            .collect();
        best.sort_unstable_by(|a, b| b.2.cmp(&a.2));
        best.truncate(MAX_WORDS);
        for w in &mut self.words {
            if best.iter().any(|&(a, l, _)| a == w.addr && l == w.len) {
                w.unwanted_since = None;
            } else {
                w.unwanted_since.get_or_insert(now_ns);
            }
        }
        self.words.retain(|w| {
            w.unwanted_since
                .is_none_or(|since| now_ns.saturating_sub(since) < GRACE_NS)
        });
        for &(addr, len, _) in &best {
            let known = self.words.iter().any(|w| w.addr == addr && w.len == len);
            if !known && self.words.len() < MAX_WORDS {
                self.words.push(TrappedWord {
                    addr,
                    len,
                    events: BTreeMap::new(),
                    refused: false,
                    unwanted_since: None,
                });
            }
        }
        let mut added = false;
        for w in &mut self.words {
            w.events.retain(|tid, _| tids.binary_search(tid).is_ok());
            if w.refused {
                continue;
            }
            for &tid in tids {
                if w.events.contains_key(&tid) {
                    continue;
                }
                match ThreadSampler::open_write_trap(tid, w.addr, w.len) {
                    Ok(e) => {
                        w.events.insert(tid, e);
                        self.opened += 1;
                        added = true;
                    }
                    Err(_) => {
                        // A thread that just ended is not a hole in the
                        // cover; any other refusal is.
                        if crate::threads::alive(tid) {
                            w.refused = true;
                            self.failures += 1;
                        }
                    }
                }
            }
        }
        added
    }

    /// Whether every write to this word by the process's threads wakes the
    /// detector.
    pub fn covers(&self, addr: u64, len: usize) -> bool {
        self.words
            .iter()
            .any(|w| w.addr == addr && w.len == len && !w.refused)
    }

    /// Descriptors to poll.
    pub fn fds(&self) -> impl Iterator<Item = libc::c_int> + '_ {
        self.words
            .iter()
            .flat_map(|w| w.events.values().map(|e| e.fd()))
    }

    /// Whether any trapped word was written since the last call.
    pub fn take_hits(&mut self) -> bool {
        let mut hit = false;
        for w in &mut self.words {
            for e in w.events.values_mut() {
                hit |= e.skip_all();
            }
        }
        hit
    }

    /// Removes every breakpoint.
    pub fn clear(&mut self) {
        self.words.clear();
    }
}
