//! Is this machine oversubscribed, that is, do the vCPUs have more runnable
//! threads than they can run? The rule and the /proc/loadavg reader are
//! vsched-os's; this module adds the process-wide cache: the count is
//! re-read at most once a millisecond, so a waiter pays an atomic load,
//! not a system call.

use crate::clock::mono_ns;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use vsched_os::load::{self, Loadavg};

static LOADAVG_FD: AtomicI32 = AtomicI32::new(-1);
static ONLINE_VCPUS: AtomicU64 = AtomicU64::new(1);
static CHECKED_AT_NS: AtomicU64 = AtomicU64::new(0);
static REFRESHING: AtomicBool = AtomicBool::new(false);
static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// 1 ms: the runnable count changes at scheduling events; re-reading it
/// more often costs a system call per waiter for little news.
const REFRESH_NS: u64 = 1_000_000;

/// Opens /proc/loadavg once (constructor). Kept open across fork. Where it
/// cannot be opened the machine is taken as never oversubscribed (plain
/// spin-then-sleep waiting, as glibc does).
pub fn init() {
    ONLINE_VCPUS.store(load::online_vcpus(), Relaxed);
    let fd = Loadavg::open().map_or(-1, |l| l.as_raw_fd());
    LOADAVG_FD.store(fd, Relaxed);
}

/// True when more threads are runnable than the machine has vCPUs (the
/// runnable count includes the waiter asking: see `load::RUNTIME_SLACK`).
pub fn oversubscribed() -> bool {
    let now = mono_ns();
    if now.saturating_sub(CHECKED_AT_NS.load(Relaxed)) >= REFRESH_NS
        && !REFRESHING.swap(true, Acquire)
    {
        if let Some(runnable) = read_runnable() {
            OVERSUBSCRIBED.store(
                load::oversubscribed(runnable, ONLINE_VCPUS.load(Relaxed), load::RUNTIME_SLACK),
                Relaxed,
            );
        }
        CHECKED_AT_NS.store(now, Relaxed);
        REFRESHING.store(false, Release);
    }
    OVERSUBSCRIBED.load(Relaxed)
}

/// In a child after fork(): a refresh the parent had under way when it
/// forked would otherwise never end.
pub fn after_fork() {
    REFRESHING.store(false, Relaxed);
}

fn read_runnable() -> Option<u64> {
    let fd = LOADAVG_FD.load(Relaxed);
    (fd >= 0).then(|| Loadavg::from_raw_fd(fd).runnable())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        init();
        // This test thread itself is running.
        assert!(read_runnable().unwrap() >= 1);
    }
}
