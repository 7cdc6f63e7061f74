//! The protocol of virtual blocking's marks (channel.rs), apart from where
//! the marks live, so that loom can check it over the same code: a waiter
//! registers under the word it waits on and sets its flag, then looks at
//! the word; a waker changes the word, then clears the flags of the
//! waiters registered on it. SeqCst fences on both sides (a
//! store-buffering pattern): either the waiter sees the new word, or the
//! waker sees the registration and clears the flag.

use crate::shim::{fence, AtomicU32, AtomicU64};
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

/// Waiters a process can have registered at once: the registry a waker
/// scans. 64 covers the 4x oversubscription the runtime is made for on
/// VMs of up to 16 vCPUs; a waiter that finds it full waits unmarked, as
/// without the scheduler. The scan (64 loads) runs only while some waiter
/// is registered.
pub const ENTRIES: usize = 64;

/// A waiter's flag in the channel (its slot's `waiting`) and the count of
/// set flags beside it (the header's `marked`). Waiter, waker and the
/// scheduler exchange the flag, so each change is counted once and the
/// count stays exact.
pub struct Flag<'a> {
    pub flag: &'a AtomicU32,
    pub marked: &'a AtomicU32,
}

impl Flag<'_> {
    pub fn set(&self) {
        if self.flag.swap(1, Relaxed) == 0 {
            self.marked.fetch_add(1, Relaxed);
        }
    }

    pub fn clear(&self) {
        if self.flag.swap(0, Relaxed) != 0 {
            self.marked.fetch_sub(1, Relaxed);
        }
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Relaxed) != 0
    }

    /// The waiter's side, after registering: set the flag, then the fence
    /// before it looks at its word again.
    pub fn set_then_look(&self) {
        self.set();
        fence(SeqCst);
    }
}

/// Who waits on which word: entries `word << 16 | slot + 1` (0: free).
pub struct Registry {
    waiters: [AtomicU64; ENTRIES],
    /// Entries in use: wakers skip the scan while it is 0.
    registered: AtomicU32,
}

impl Registry {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Registry {
            waiters: [const { AtomicU64::new(0) }; ENTRIES],
            registered: AtomicU32::new(0),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        Registry {
            waiters: core::array::from_fn(|_| AtomicU64::new(0)),
            registered: AtomicU32::new(0),
        }
    }

    /// Registers the waiter of `slot` (below 2^16 - 1) on `word` (a
    /// user-space address, below 2^48); its entry, or None if full.
    pub fn register(&self, word: usize, slot: usize) -> Option<usize> {
        if (word as u64) >> 48 != 0 || slot >= 0xffff {
            return None;
        }
        let v = (word as u64) << 16 | (slot as u64 + 1);
        let entry = self
            .waiters
            .iter()
            .position(|e| e.compare_exchange(0, v, SeqCst, Relaxed).is_ok())?;
        self.registered.fetch_add(1, SeqCst);
        Some(entry)
    }

    /// Frees every entry (a forked child's copy of its parent's).
    pub fn forget_all(&self) {
        for e in &self.waiters {
            e.store(0, Relaxed);
        }
        self.registered.store(0, Relaxed);
    }

    pub fn unregister(&self, entry: usize) {
        self.waiters[entry].store(0, Relaxed);
        self.registered.fetch_sub(1, Relaxed);
    }

    /// The waker's side, after changing `word`: calls `clear` with the slot
    /// of every waiter registered on it.
    pub fn each_on(&self, word: usize, mut clear: impl FnMut(usize)) {
        fence(SeqCst);
        if self.registered.load(Relaxed) == 0 {
            return;
        }
        for e in &self.waiters {
            let v = e.load(Relaxed);
            if v != 0 && v >> 16 == word as u64 {
                clear((v & 0xffff) as usize - 1);
            }
        }
    }
}

#[cfg(not(loom))]
impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}
