//! Is this machine oversubscribed, that is, do the vCPUs have more runnable
//! threads than they can run? Read from the kernel's instantaneous count of
//! runnable tasks (/proc/loadavg's fourth field), at most once a millisecond
//! for the whole process, so a waiter pays an atomic load, not a syscall.

use crate::clock::mono_ns;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};

static LOADAVG_FD: AtomicI32 = AtomicI32::new(-1);
/// The machine's vCPUs: the runnable count is machine-wide, so it is
/// compared with all of them, not with this process's affinity mask.
static ONLINE_CPUS: AtomicU64 = AtomicU64::new(1);
static CHECKED_AT_NS: AtomicU64 = AtomicU64::new(0);
static REFRESHING: AtomicBool = AtomicBool::new(false);
static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);

const REFRESH_NS: u64 = 1_000_000;

/// Opens /proc/loadavg once (constructor). Kept open across fork: the
/// kernel regenerates it on every pread at offset 0.
pub fn init() {
    // SAFETY: sysconf has no memory-safety requirements.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    ONLINE_CPUS.store(online.max(1) as u64, Relaxed);
    // SAFETY: a constant NUL-terminated path.
    let fd = unsafe { libc::open(c"/proc/loadavg".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    LOADAVG_FD.store(fd, Relaxed);
}

/// True when more threads are runnable than the machine has vCPUs.
pub fn oversubscribed() -> bool {
    let now = mono_ns();
    if now.saturating_sub(CHECKED_AT_NS.load(Relaxed)) >= REFRESH_NS
        && !REFRESHING.swap(true, Acquire)
    {
        if let Some(runnable) = read_runnable() {
            OVERSUBSCRIBED.store(runnable > ONLINE_CPUS.load(Relaxed), Relaxed);
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
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 128];
    // A raw system call: glibc's pread is a cancellation point, and this
    // runs inside mutex and spinlock waits, which must not be.
    // SAFETY: buf is a valid buffer of the length passed.
    let n = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0i64) };
    if n <= 0 {
        return None;
    }
    parse_runnable(&buf[..n as usize])
}

/// "0.12 0.34 0.56 3/789 1234" → 3.
pub fn parse_runnable(text: &[u8]) -> Option<u64> {
    let field = text.split(|b| *b == b' ').nth(3)?;
    let running = field.split(|b| *b == b'/').next()?;
    if running.is_empty() || !running.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        running
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_running_count() {
        assert_eq!(parse_runnable(b"0.12 0.34 0.56 3/789 1234\n"), Some(3));
        assert_eq!(parse_runnable(b"0.12 0.34 0.56 17/789 1234\n"), Some(17));
        assert_eq!(parse_runnable(b"garbage"), None);
        assert_eq!(parse_runnable(b"1 2 3 x/4 5"), None);
    }

    #[test]
    fn reads_this_machine() {
        init();
        // This test thread itself is running.
        assert!(read_runnable().unwrap() >= 1);
    }
}
