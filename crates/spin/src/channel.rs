//! The detector's half of the channel to vsched's scheduler (layout:
//! crates/sched/src/bpf/intf.h, mirrored in vsched_os::channel): spinner
//! descheduling in the scheduler (../shared/seeds/oversubscription-hpdc21.txt
//! §3.2). A thread found spinning gets its slot's `spinning` mark; the
//! scheduler then passes over it until another task of its vCPU ran, and
//! clears the mark itself (crates/sched/src/bpf/spinners.bpf.h). No ptrace
//! stop, no change of the thread's policy: one store, and a nudge
//! ([`crate::engine`]) that makes a running spinner's vCPU reschedule.
//!
//! The detector claims the slot for the thread when nobody holds it (as the
//! thread's own runtime would, under `vsched exec`); the scheduler frees it
//! when the thread exits. A slot another thread holds (a collision of thread
//! ids modulo the slot count) cannot be marked: the engine falls back to
//! its own holds.

use core::ptr::NonNull;
use core::sync::atomic::Ordering::SeqCst;
use vsched_os::channel::{self as layout, Channel};

/// Shortest time between two attempts to find the channel while there is
/// none (or its scheduler stopped): an attempt is two system calls, and a
/// scheduler loaded later is found within a second.
const RETRY_NS: u64 = 1_000_000_000;

/// What marking a thread came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkOutcome {
    /// Marked now: its vCPU should be nudged.
    Marked,
    /// Still marked from before: the scheduler has not run it since another
    /// task ran on its vCPU (none waits there, or it is about to).
    Pending,
    /// Another thread holds its slot.
    SlotTaken,
    /// No scheduler reads the channel (none loaded, or `--no-channel`).
    NoScheduler,
}

/// The mapped channel, found again when its scheduler is replaced.
pub struct SpinMarks {
    mapping: Option<NonNull<Channel>>,
    /// The mapping is this object's (false only for tests' channels in
    /// ordinary memory, which are never looked for again).
    owns_mapping: bool,
    next_attempt_ns: u64,
    /// Marks set and not yet seen cleared (for `clear_all`).
    marked: Vec<u32>,
    /// Slots this detector claimed for their threads: released when the
    /// thread is gone (`forget`), in case it exited before the claim, when
    /// the scheduler's own release at its exit had already run.
    claimed: Vec<u32>,
}

impl Default for SpinMarks {
    fn default() -> Self {
        Self::new()
    }
}

impl SpinMarks {
    /// Looks for the channel at once (and later, at most every RETRY_NS).
    pub fn new() -> SpinMarks {
        let mut marks = SpinMarks {
            mapping: None,
            owns_mapping: true,
            next_attempt_ns: 0,
            marked: Vec::new(),
            claimed: Vec::new(),
        };
        marks.live(0);
        marks
    }

    /// The channel's mapping, if a scheduler reads it now.
    fn live(&mut self, now_ns: u64) -> Option<NonNull<Channel>> {
        let is_live = |p: NonNull<Channel>| {
            // SAFETY: a mapping of layout::SIZE bytes, kept until drop.
            let ch = unsafe { p.as_ref() };
            ch.header.live.load(SeqCst) != 0
        };
        if self.mapping.is_some_and(|p| !is_live(p)) && now_ns >= self.next_attempt_ns {
            self.unmap();
        }
        if self.mapping.is_none() && self.owns_mapping && now_ns >= self.next_attempt_ns {
            self.next_attempt_ns = now_ns + RETRY_NS;
            self.mapping = layout::map_pinned();
        }
        self.mapping.filter(|&p| is_live(p))
    }

    /// Marks thread `tid` spinning, claiming its slot if free.
    pub fn mark(&mut self, tid: i32, now_ns: u64) -> MarkOutcome {
        let Some(p) = self.live(now_ns) else {
            return MarkOutcome::NoScheduler;
        };
        // SAFETY: a mapping of layout::SIZE bytes, kept until `self` unmaps
        // it, which this call does not do.
        let ch = unsafe { &*p.as_ptr() };
        let tid = tid as u32;
        let slot = &ch.slots[layout::slot_of(tid)];
        match slot.tid.compare_exchange(0, tid, SeqCst, SeqCst) {
            Ok(_) => self.claimed.push(tid),
            Err(owner) if owner == tid => {}
            Err(_) => return MarkOutcome::SlotTaken,
        }
        if slot.spinning.swap(1, SeqCst) != 0 {
            return MarkOutcome::Pending;
        }
        // The thread may have exited since its sample, and the scheduler
        // freed its slot in between (and a new thread taken it): a mark
        // left there would count for nobody.
        if slot.tid.load(SeqCst) != tid {
            slot.spinning.store(0, SeqCst);
            return MarkOutcome::SlotTaken;
        }
        // The mark counts once: dispatch looks for marked tasks only while
        // the header's count is not 0.
        ch.header.marked.fetch_add(1, SeqCst);
        self.marked.push(tid);
        if self.marked.len() > layout::SLOTS {
            self.forget_served();
        }
        MarkOutcome::Marked
    }

    /// Drops from the list the marks the scheduler cleared.
    fn forget_served(&mut self) {
        let Some(p) = self.mapping else {
            self.marked.clear();
            return;
        };
        // SAFETY: as in `live`.
        let ch = unsafe { p.as_ref() };
        self.marked.retain(|&tid| {
            let slot = &ch.slots[layout::slot_of(tid)];
            slot.tid.load(SeqCst) == tid && slot.spinning.load(SeqCst) != 0
        });
        self.marked.sort_unstable();
        self.marked.dedup();
    }

    /// Clears every mark this detector set that the scheduler has not (the
    /// detector stops): nobody would find those threads spinning again.
    pub fn clear_all(&mut self) {
        let Some(p) = self.mapping else {
            return;
        };
        // SAFETY: as in `live`.
        let ch = unsafe { p.as_ref() };
        for tid in self.marked.drain(..) {
            let slot = &ch.slots[layout::slot_of(tid)];
            if slot.tid.load(SeqCst) == tid && slot.spinning.swap(0, SeqCst) != 0 {
                ch.header.marked.fetch_sub(1, SeqCst);
            }
        }
    }

    /// Thread `tid` is gone: a slot this detector claimed for it is
    /// released, with its mark.
    pub fn forget(&mut self, tid: i32) {
        let tid = tid as u32;
        let Some(at) = self.claimed.iter().position(|&t| t == tid) else {
            return;
        };
        self.claimed.swap_remove(at);
        let Some(p) = self.mapping else {
            return;
        };
        // SAFETY: as in `live`.
        let ch = unsafe { p.as_ref() };
        let slot = &ch.slots[layout::slot_of(tid)];
        if slot.tid.load(SeqCst) != tid {
            return;
        }
        if slot.spinning.swap(0, SeqCst) != 0 {
            ch.header.marked.fetch_sub(1, SeqCst);
        }
        let _ = slot.tid.compare_exchange(tid, 0, SeqCst, SeqCst);
    }

    fn unmap(&mut self) {
        if !self.owns_mapping {
            return;
        }
        if let Some(p) = self.mapping.take() {
            // SAFETY: this object's own mapping of layout::SIZE bytes; no
            // reference into it outlives `&mut self`.
            unsafe { libc::munmap(p.as_ptr().cast(), layout::SIZE) };
        }
        self.marked.clear();
        self.claimed.clear();
    }
}

impl Drop for SpinMarks {
    fn drop(&mut self) {
        self.clear_all();
        self.unmap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel in ordinary memory, as a live scheduler leaves it.
    fn channel() -> Box<Channel> {
        // SAFETY: Channel is plain integers and atomics, for which all
        // zeroes is valid.
        let mut ch: Box<Channel> = unsafe { Box::new_zeroed().assume_init() };
        ch.header.magic = layout::MAGIC;
        ch.header.version = layout::VERSION;
        ch.header.slots = layout::SLOTS as u32;
        ch.header.live.store(1, SeqCst);
        ch
    }

    /// A detector over `ch`, which the test keeps reading and writing
    /// (through the atomics, as the scheduler would) while it runs.
    fn marks_over(ch: &Channel) -> SpinMarks {
        SpinMarks {
            mapping: Some(NonNull::from(ch)),
            owns_mapping: false,
            next_attempt_ns: u64::MAX,
            marked: Vec::new(),
            claimed: Vec::new(),
        }
    }

    /// A slot's owner and mark, and the header's count.
    fn seen(ch: &Channel, tid: u32) -> (u32, u32, u32) {
        let slot = &ch.slots[layout::slot_of(tid)];
        (
            slot.tid.load(SeqCst),
            slot.spinning.load(SeqCst),
            ch.header.marked.load(SeqCst),
        )
    }

    #[test]
    fn a_mark_claims_a_free_slot_and_counts_once() {
        let ch = channel();
        let mut marks = marks_over(&ch);
        assert_eq!(marks.mark(4100, 0), MarkOutcome::Marked);
        assert_eq!(seen(&ch, 4100), (4100, 1, 1));
        assert_eq!(marks.mark(4100, 0), MarkOutcome::Pending);
        assert_eq!(seen(&ch, 4100), (4100, 1, 1));
        drop(marks);
        // Cleared when the detector stops, the claim left to the scheduler.
        assert_eq!(seen(&ch, 4100), (4100, 0, 0));
    }

    #[test]
    fn a_mark_the_scheduler_served_is_set_again() {
        let ch = channel();
        let mut marks = marks_over(&ch);
        assert_eq!(marks.mark(7, 0), MarkOutcome::Marked);
        // The scheduler ran the thread: it clears the mark and the count.
        ch.slots[7].spinning.store(0, SeqCst);
        ch.header.marked.fetch_sub(1, SeqCst);
        assert_eq!(marks.mark(7, 0), MarkOutcome::Marked);
        assert_eq!(seen(&ch, 7), (7, 1, 1));
    }

    #[test]
    fn a_slot_claimed_for_a_thread_is_released_when_it_is_gone() {
        let ch = channel();
        let mut marks = marks_over(&ch);
        assert_eq!(marks.mark(11, 0), MarkOutcome::Marked);
        marks.forget(11);
        // A thread it did not claim for keeps its slot.
        ch.slots[12].tid.store(12, SeqCst);
        assert_eq!(marks.mark(12, 0), MarkOutcome::Marked);
        marks.forget(12);
        drop(marks);
        assert_eq!(seen(&ch, 11), (0, 0, 0));
        assert_eq!(seen(&ch, 12), (12, 0, 0));
    }

    #[test]
    fn a_slot_held_by_another_thread_is_not_marked() {
        let ch = channel();
        let other = 5 + layout::SLOTS as u32;
        ch.slots[layout::slot_of(5)].tid.store(other, SeqCst);
        let mut marks = marks_over(&ch);
        assert_eq!(marks.mark(5, 0), MarkOutcome::SlotTaken);
        drop(marks);
        assert_eq!(seen(&ch, 5), (other, 0, 0));
    }

    #[test]
    fn nothing_is_marked_once_the_scheduler_stopped() {
        let ch = channel();
        ch.header.live.store(0, SeqCst);
        let mut marks = marks_over(&ch);
        assert_eq!(marks.mark(9, 0), MarkOutcome::NoScheduler);
        drop(marks);
        assert_eq!(seen(&ch, 9), (0, 0, 0));
    }
}
