//! Raw futex(2) calls. glibc has no wrapper; these go straight to the kernel
//! so that nothing on a wait path calls back into interposed functions.

use crate::clock::Deadline;
use core::sync::atomic::AtomicU32;

const FUTEX_WAIT_BITSET: i32 = 9;
const FUTEX_WAKE: i32 = 1;
const FUTEX_PRIVATE_FLAG: i32 = 128;
const FUTEX_CLOCK_REALTIME: i32 = 256;
pub const BITSET_MATCH_ANY: u32 = u32::MAX;

/// Why a futex wait returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitResult {
    /// Woken by a wake, a signal, or spuriously.
    Woken,
    /// The word no longer held the expected value when the kernel looked.
    Changed,
    /// The deadline passed.
    TimedOut,
    /// A signal handler ran (only sem_wait reports this, as EINTR).
    Interrupted,
}

fn op(base: i32, shared: bool) -> i32 {
    if shared {
        base
    } else {
        base | FUTEX_PRIVATE_FLAG
    }
}

/// Sleeps while `*word == expected`, until woken or `deadline` (absolute, on
/// its own clock: FUTEX_WAIT_BITSET takes absolute times on either clock).
pub fn wait(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<&Deadline>,
    shared: bool,
) -> WaitResult {
    let (futex_op, ts_ptr) = wait_op(deadline, shared);
    let saved = errno();
    crate::load::sleeping_begin();
    // SAFETY: word is a valid, aligned u32 for the duration of the call;
    // ts_ptr is null or points to a live timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            futex_op,
            expected,
            ts_ptr,
            core::ptr::null::<u32>(),
            BITSET_MATCH_ANY,
        )
    };
    // A private word's waker counted the thread it woke: see load::woken.
    crate::load::sleeping_end(rc == 0 && !shared);
    if rc == 0 {
        return WaitResult::Woken;
    }
    let e = errno();
    // pthread and sem functions leave errno alone unless they fail.
    set_errno(saved);
    result_of_errno(e)
}

/// The futex operation and timeout pointer of a wait until `deadline`.
pub fn wait_op(deadline: Option<&Deadline>, shared: bool) -> (i32, *const libc::timespec) {
    let mut futex_op = op(FUTEX_WAIT_BITSET, shared);
    let ts_ptr = match deadline {
        Some(d) => {
            if d.clock == libc::CLOCK_REALTIME {
                futex_op |= FUTEX_CLOCK_REALTIME;
            }
            &d.at as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    (futex_op, ts_ptr)
}

pub fn result_of_errno(errno: i32) -> WaitResult {
    match errno {
        libc::EAGAIN => WaitResult::Changed,
        libc::ETIMEDOUT => WaitResult::TimedOut,
        libc::EINTR => WaitResult::Interrupted,
        _ => WaitResult::Woken,
    }
}

/// Wakes up to `n` sleepers on `word`. Those of a private word are the
/// runtime's own waits (`wait`, `Cancel::futex_wait`): they are counted
/// awake from here (load::woken) until they run. Returns how many it woke.
pub fn wake(word: &AtomicU32, n: i32, shared: bool) -> u32 {
    // SAFETY: plain futex wake on a valid address.
    let woken = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op(FUTEX_WAKE, shared), n) };
    if woken > 0 && !shared {
        crate::load::woken(woken as u64);
    }
    woken.max(0) as u32
}

pub fn yield_now() {
    // SAFETY: no arguments.
    unsafe {
        libc::sched_yield();
    }
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: glibc's thread-local errno location is always valid.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn errno() -> i32 {
    // SAFETY: glibc's thread-local errno location is always valid.
    unsafe { *libc::__errno_location() }
}
