//! The runtime's half of the channel to vsched's scheduler (layout:
//! crates/sched/src/bpf/intf.h, mirrored in vsched_os::channel): virtual
//! blocking. A waiter that yields marks its thread's slot `waiting`; the
//! scheduler then runs the other threads of its vCPU first. Whoever
//! changes the word the waiter watches clears the marks of the waiters
//! registered on that word (`clear_marks`, from `backoff::wake`), so the
//! woken thread is the next to run.
//!
//! The protocol against a lost clear is marks.rs's (model-checked by
//! tests/loom.rs): the waiter registers and marks, then looks at its word
//! once more before it yields; the waker changes the word, then looks at
//! the registry. A clear that comes anyway, after the waiter
//! saw the old value, is noticed by the waiter at its next pause, which
//! marks again and looks at the word before yielding (`Mark::rearm`). A
//! mark left set is only a hint: the scheduler passes over a marked task
//! for at most 20 ms since it last ran (policy.h VS_MARK_SKIP_NS).
//!
//! The other way: what the scheduler publishes about a thread's run
//! (`published`), for spinlock admission (admission.rs).
//!
//! Found without configuration: the pin vsched_os::channel::PIN, mapped
//! at the first marked wait, or the first spinlock acquisition under
//! admission or statistics (one bpf(2) and one mmap(2)); tried again at
//! most every ATTACH_RETRY_NS while absent, so a program started before
//! the scheduler uses it once it runs. A mapping whose scheduler stopped
//! (its header's `live` cleared) is left mapped (threads may still hold
//! its slots) and a new one is looked for.

use crate::clock::mono_ns;
use crate::futex::{errno, set_errno};
use crate::marks::{Flag, Registry};
use crate::stats::{bump, Counter};
use core::cell::Cell;
use core::sync::atomic::{
    AtomicPtr, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use vsched_os::channel::{self as layout, Channel};

/// Shortest time between two attempts to find the channel: a failed
/// attempt is one bpf(2) call (a few microseconds), made from a wait that
/// is yielding anyway or from a spinlock acquisition that asked for
/// admission or statistics; once a second costs nothing measurable and
/// finds a scheduler loaded after the program started within a second.
const ATTACH_RETRY_NS: u64 = 1_000_000_000;

/// The mapped channel (null: none yet).
static CHANNEL: AtomicPtr<Channel> = AtomicPtr::new(core::ptr::null_mut());
/// When the last attempt to map it was made (ns, monotonic; 0: never).
static LAST_ATTEMPT_NS: AtomicU64 = AtomicU64::new(0);
/// The process's marked waiters, by the word they wait on.
static REGISTRY: Registry = Registry::new();

#[cfg(not(loom))]
thread_local! {
    /// This thread's claim: (tid, mapping, slot + 1), so that a forked
    /// child (a new tid) or a new mapping claims anew.
    static CLAIM: Cell<(i32, usize, usize)> = const { Cell::new((0, 0, 0)) };
}

/// A waiter's mark, registered under the word it waits on; `release`
/// (the wait ended, or goes on to sleep) clears and unregisters it. No
/// Drop: a cancelled wait unwinds through frames that hold one, and a
/// forced unwind through a frame with a destructor is undefined. A wait
/// cancelled while marked leaves its entry registered (one of 64) and its
/// flag set until the scheduler sees the thread exit.
pub struct Mark {
    flag: Flag<'static>,
    entry: usize,
}

impl Mark {
    /// Whether the mark is still set (a waker has not cleared it).
    pub fn is_set(&self) -> bool {
        self.flag.is_set()
    }

    /// Sets it again; the caller looks at its word before yielding.
    pub fn rearm(&self) {
        bump(Counter::marks_rearmed);
        self.flag.set_then_look();
    }
}

impl Mark {
    pub fn release(self) {
        self.flag.clear();
        REGISTRY.unregister(self.entry);
    }
}

/// A forked child: the parent's other threads' entries are not its own
/// (their waits go on in the parent), and their slots are the parent's.
pub fn after_fork() {
    REGISTRY.forget_all();
}

/// Marks the calling thread waiting on `word` (its address), if a vsched
/// scheduler with a channel runs, this thread holds a slot and the
/// registry has room. The caller must look at its word again before it
/// yields (the module's protocol).
pub fn mark(word: usize) -> Option<Mark> {
    if !crate::config::CHANNEL.load(Relaxed) {
        return None;
    }
    let ch = live_channel()?;
    let index = claimed_slot(ch)?;
    let entry = REGISTRY.register(word, index)?;
    let flag = flag_of(ch, index);
    flag.set_then_look();
    bump(Counter::marks);
    Some(Mark { flag, entry })
}

/// Clears the marks of the waiters registered on `word`. Call after
/// changing `word`.
pub fn clear_marks(word: usize) {
    // Without --channel no waiter marks: a release pays one relaxed load,
    // not the registry's fence.
    if !crate::config::CHANNEL.load(Relaxed) {
        return;
    }
    REGISTRY.each_on(word, |index| {
        if let Some(ch) = mapped() {
            flag_of(ch, index % layout::SLOTS).clear();
            bump(Counter::marks_cleared);
        }
    });
}

/// What the scheduler last wrote into the calling thread's slot about its
/// run (intf.h `struct vs_channel_slot`, the scheduler's fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The CPU the thread runs on plus one (the scheduler's `on_cpu`; 0:
    /// nothing published yet for this run): the rest is about this run.
    pub on_cpu: u32,
    /// Switch-offs of its vCPU the scheduler saw while it ran.
    pub switch_offs: u32,
    /// When its slice ends (ns, monotonic; 0: not known).
    pub slice_end_ns: u64,
    /// When its vCPU's next switch-off is predicted (0: none is).
    pub switch_off_ns: u64,
}

/// What the scheduler publishes for the calling thread, if a vsched
/// scheduler with a channel runs and the thread holds (or now claims) a
/// slot. Not gated by `--channel`: the marks are, this is read by
/// spinlock admission (admission.rs). The first call maps the channel and
/// asks for the thread's run (`wants_run`): the scheduler fills the slot
/// from the thread's next switch in.
pub fn published() -> Option<Published> {
    let ch = live_channel()?;
    let slot = &ch.slots[claimed_slot(ch)?];
    let wants = &slot.wants_run;
    if wants.load(Relaxed) == 0 {
        wants.store(1, Relaxed);
    }
    Some(Published {
        on_cpu: slot.on_cpu.load(Relaxed),
        switch_offs: slot.switch_offs.load(Relaxed),
        slice_end_ns: slot.slice_end_ns.load(Relaxed),
        switch_off_ns: slot.switch_off_ns.load(Relaxed),
    })
}

/// Slot `index`'s `waiting` flag and the header's count, as atomics: the
/// scheduler reads them (READ_ONCE) and updates them (exchanges).
fn flag_of(ch: &'static Channel, index: usize) -> Flag<'static> {
    Flag {
        flag: &ch.slots[index].waiting,
        marked: &ch.header.marked,
    }
}

/// The mapped channel, whether live or not.
fn mapped() -> Option<&'static Channel> {
    let p = CHANNEL.load(Relaxed);
    // SAFETY: a non-null CHANNEL points to a mapping of layout::SIZE bytes
    // that is never unmapped (see the module comment), aligned to a page.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The channel, if its scheduler runs; maps it when due.
fn live_channel() -> Option<&'static Channel> {
    if let Some(ch) = mapped() {
        if ch.header.live.load(Relaxed) != 0 {
            return Some(ch);
        }
    }
    let now = mono_ns();
    let last = LAST_ATTEMPT_NS.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < ATTACH_RETRY_NS {
        return None;
    }
    LAST_ATTEMPT_NS.store(now.max(1), Relaxed);
    let seen = CHANNEL.load(Relaxed);
    let fresh = attach()?;
    let ch = match CHANNEL.compare_exchange(seen, fresh, SeqCst, Relaxed) {
        Ok(_) => fresh,
        Err(_) => {
            // Another thread mapped it meanwhile: keep that one.
            // SAFETY: `fresh` is this call's own mapping, unused elsewhere.
            unsafe { libc::munmap(fresh.cast(), layout::SIZE) };
            CHANNEL.load(Relaxed)
        }
    };
    bump(Counter::channel_attached);
    // SAFETY: as in `mapped`.
    let ch = unsafe { &*ch };
    (ch.header.live.load(Relaxed) != 0).then_some(ch)
}

/// Maps the pinned channel (vsched_os::channel::map_pinned, which
/// refuses a process in a pid namespace of its own). errno is kept.
fn attach() -> Option<*mut Channel> {
    let saved = errno();
    let mapped = layout::map_pinned();
    set_errno(saved);
    mapped.map(core::ptr::NonNull::as_ptr)
}

/// This thread's slot in `ch`, claimed at its first marked wait or
/// published read.
#[cfg(not(loom))]
fn claimed_slot(ch: &'static Channel) -> Option<usize> {
    let tid = crate::tid::current();
    let at = ch as *const Channel as usize;
    let (t, m, s) = CLAIM.with(Cell::get);
    if t == tid && m == at && s != 0 {
        return Some(s - 1);
    }
    let index = layout::slot_of(tid as u32);
    let owner = &ch.slots[index].tid;
    let claimed = owner.compare_exchange(0, tid as u32, SeqCst, Relaxed);
    if claimed.is_err() && claimed != Err(tid as u32) {
        return None;
    }
    if claimed.is_ok() {
        // A fresh claim asks for nothing until `published` does.
        ch.slots[index].wants_run.store(0, Relaxed);
    }
    CLAIM.with(|c| c.set((tid, at, index + 1)));
    Some(index)
}

#[cfg(loom)]
fn claimed_slot(_ch: &'static Channel) -> Option<usize> {
    None
}
