//! What the machine and this process look like to a waiter, cheaply:
//! - is the machine oversubscribed (more runnable threads than vCPUs)? The
//!   rule and the /proc/loadavg reader are vsched-os's;
//! - may a yield reach this process's own threads? Its thread count
//!   (/proc/self/stat) less the threads asleep in the runtime, against
//!   the vCPUs and the other programs' runnable threads;
//! - did a waiter of this process lose time to the host (or the guest)
//!   a moment ago?
//!
//! The counts are re-read at most once a millisecond, by whichever waiter
//! finds them stale, so a waiter pays an atomic load, not a system call.

use crate::clock::mono_ns;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use vsched_os::load::{self, Loadavg, SelfStat};

static LOADAVG_FD: AtomicI32 = AtomicI32::new(-1);
static SELF_STAT_FD: AtomicI32 = AtomicI32::new(-1);
static ONLINE_VCPUS: AtomicU64 = AtomicU64::new(1);
static CHECKED_AT_NS: AtomicU64 = AtomicU64::new(0);
static REFRESHING: AtomicBool = AtomicBool::new(false);
static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);
/// The machine's runnable count at the last refresh.
static RUNNABLE: AtomicU64 = AtomicU64::new(0);
/// The process's threads at the last refresh (1 until read: the yield
/// rule then never holds, which is glibc's behaviour).
static THREADS: AtomicU64 = AtomicU64::new(1);
/// Threads of this process inside a futex wait of the runtime now: exact,
/// each counts itself in and out.
static SLEEPING: AtomicU64 = AtomicU64::new(0);
/// Of those, how many a waker has woken but have not run yet (`woken`):
/// an estimate the sleepers' own count bounds, reset whenever no thread
/// sleeps, so that a wake-up counted wrongly (one that raced a
/// cancellation, or a stray wake of a word reused after its primitive
/// was destroyed) is forgotten soon.
static WOKEN: AtomicU64 = AtomicU64::new(0);
/// When a spinning waiter last saw its own clock jump (0: never).
static LOST_TIME_AT_NS: AtomicU64 = AtomicU64::new(0);

/// 1 ms: the runnable count changes at scheduling events; re-reading it
/// more often costs a system call per waiter for little news.
const REFRESH_NS: u64 = 1_000_000;

/// After a waiter saw its vCPU lose time, no waiter of the process spins
/// for this long: 20 ms, a few host time slices. A host that switched a
/// vCPU off once is likely to do it again soon (vSched measures inactive
/// episodes of milliseconds that recur every few); spinning meanwhile
/// would burn the little time the vCPUs get, and a lock holder's vCPU is
/// as likely to be off as the spinner's.
pub const LOST_TIME_MEMORY_NS: u64 = 20_000_000;

/// Opens /proc/loadavg and /proc/self/stat once (constructor). Where they
/// cannot be opened the machine is taken as never oversubscribed (plain
/// spin-then-sleep waiting, as glibc does).
pub fn init() {
    ONLINE_VCPUS.store(load::online_vcpus(), Relaxed);
    let fd = Loadavg::open().map_or(-1, |l| l.as_raw_fd());
    LOADAVG_FD.store(fd, Relaxed);
    let fd = SelfStat::open().map_or(-1, |s| s.as_raw_fd());
    SELF_STAT_FD.store(fd, Relaxed);
}

/// True when more threads are runnable than the machine has vCPUs (the
/// runnable count includes the waiter asking: see `load::RUNTIME_SLACK`).
pub fn oversubscribed() -> bool {
    refresh_if_stale();
    OVERSUBSCRIBED.load(Relaxed)
}

/// True when a yield may hand the vCPU to this program's own threads: more
/// of them are awake (not asleep in the runtime) than vCPUs, and other
/// programs' runnable threads would not fill the vCPUs alone (see
/// `load::yield_may_help`). The counts are the ones `oversubscribed` just
/// refreshed: callers ask it first (the two are only meaningful together),
/// so this reads no clock.
pub fn yield_may_help() -> bool {
    let awake = THREADS.load(Relaxed).saturating_sub(sleeping_now());
    load::yield_may_help(
        awake,
        RUNNABLE.load(Relaxed),
        crate::config::VCPUS.load(Relaxed) as u64,
    )
}

/// A futex sleep of the runtime begins (the thread no longer competes for
/// a vCPU)...
pub fn sleeping_begin() {
    SLEEPING.fetch_add(1, Relaxed);
}

/// ...and ends (woken, timed out, interrupted, the word had changed,
/// cancelled). `woken_by_waker`: the wait returned because a waker of a
/// private word woke it, which counted it in WOKEN (`woken`).
pub fn sleeping_end(woken_by_waker: bool) {
    if woken_by_waker {
        let _ = WOKEN.fetch_update(Relaxed, Relaxed, |w| Some(w.saturating_sub(1)));
    }
    if SLEEPING.fetch_sub(1, Relaxed) == 1 {
        WOKEN.store(0, Relaxed);
    }
}

/// A waker of a private word woke `n` sleepers: they count as awake from
/// now on, although each runs only when the scheduler gets to it. Counted
/// asleep until then, a whole condvar broadcast's worth of woken threads
/// looked like other programs' runnable threads, so the woken waiters,
/// finding their wait not over, slept again instead of yielding (a
/// condvar-broadcast ring at 8 threads on 2 vCPUs under a sched_ext
/// scheduler, whose wake-ups take longer to run: 99% of waits slept,
/// 5x slower than under the kernel's default scheduler).
pub fn woken(n: u64) {
    WOKEN.fetch_add(n, Relaxed);
}

/// Threads of this process asleep in the runtime and not yet woken.
pub fn sleeping_now() -> u64 {
    let sleeping = SLEEPING.load(Relaxed);
    sleeping - WOKEN.load(Relaxed).min(sleeping)
}

/// The two counts behind `sleeping_now`, for tests: (inside a wait,
/// woken but not yet run).
pub fn sleeping_counts() -> (u64, u64) {
    (SLEEPING.load(Relaxed), WOKEN.load(Relaxed))
}

/// A spinning waiter's clock jumped: its vCPU was switched off or the
/// thread preempted while it spun.
pub fn lost_time_at(now_ns: u64) {
    LOST_TIME_AT_NS.store(now_ns, Relaxed);
}

/// A waiter of this process lost time less than LOST_TIME_MEMORY_NS ago.
pub fn lost_time_recently(now_ns: u64) -> bool {
    within_memory(LOST_TIME_AT_NS.load(Relaxed), now_ns)
}

/// A loss at `at_ns` (0: none yet) is still remembered at `now_ns`.
fn within_memory(at_ns: u64, now_ns: u64) -> bool {
    at_ns != 0 && now_ns.saturating_sub(at_ns) < LOST_TIME_MEMORY_NS
}

fn refresh_if_stale() {
    let now = mono_ns();
    if now.saturating_sub(CHECKED_AT_NS.load(Relaxed)) >= REFRESH_NS
        && !REFRESHING.swap(true, Acquire)
    {
        if let Some(runnable) = read_runnable() {
            RUNNABLE.store(runnable, Relaxed);
            OVERSUBSCRIBED.store(
                load::oversubscribed(runnable, ONLINE_VCPUS.load(Relaxed), load::RUNTIME_SLACK),
                Relaxed,
            );
        }
        if let Some(threads) = read_threads() {
            THREADS.store(threads, Relaxed);
        }
        CHECKED_AT_NS.store(now, Relaxed);
        REFRESHING.store(false, Release);
    }
}

/// In a child after fork(): a refresh the parent had under way when it
/// forked would otherwise never end; the child has one thread, none
/// asleep, and its own /proc/self/stat (the inherited descriptor names the
/// parent).
pub fn after_fork() {
    REFRESHING.store(false, Relaxed);
    SLEEPING.store(0, Relaxed);
    WOKEN.store(0, Relaxed);
    THREADS.store(1, Relaxed);
    CHECKED_AT_NS.store(0, Relaxed);
    let old = SELF_STAT_FD.swap(-1, Relaxed);
    if old >= 0 {
        // SAFETY: closing the descriptor this module opened; nobody else
        // uses it (the swap took it out of circulation).
        unsafe { libc::close(old) };
    }
    let fd = SelfStat::open().map_or(-1, |s| s.as_raw_fd());
    SELF_STAT_FD.store(fd, Relaxed);
}

fn read_runnable() -> Option<u64> {
    let fd = LOADAVG_FD.load(Relaxed);
    (fd >= 0).then(|| Loadavg::from_raw_fd(fd).runnable())?
}

fn read_threads() -> Option<u64> {
    let fd = SELF_STAT_FD.load(Relaxed);
    (fd >= 0).then(|| SelfStat::from_raw_fd(fd).threads())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine_and_process() {
        init();
        // This test thread itself is running.
        assert!(read_runnable().unwrap() >= 1);
        assert!(read_threads().unwrap() >= 1);
    }

    #[test]
    fn lost_time_is_remembered_for_a_while() {
        assert!(!within_memory(0, 5));
        assert!(within_memory(1_000, 1_000 + LOST_TIME_MEMORY_NS - 1));
        assert!(!within_memory(1_000, 1_000 + LOST_TIME_MEMORY_NS));
    }
}
