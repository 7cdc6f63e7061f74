//! Reading and setting another thread's scheduling attributes
//! (sched_getattr/sched_setattr; glibc has no wrappers for them).

use serde::{Deserialize, Serialize};
use std::io;

/// `struct sched_attr` from the kernel uapi (version 1, 56 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// What a demotion overwrites and a restoration puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedAttr {
    pub policy: u32,
    pub nice: i32,
    pub priority: u32,
    /// SCHED_FLAG_RESET_ON_FORK and friends.
    pub flags: u64,
    /// Custom time slice of a fair task (0: the default) or a deadline task's runtime.
    pub runtime: u64,
    pub deadline: u64,
    pub period: u64,
}

pub const SCHED_IDLE: u32 = libc::SCHED_IDLE as u32;
pub const SCHED_OTHER: u32 = libc::SCHED_OTHER as u32;

/// Only these flags can be handed back to sched_setattr unchanged.
const SETTABLE_FLAGS: u64 = 0x01 /* RESET_ON_FORK */;

pub fn get(tid: i32) -> io::Result<SchedAttr> {
    let mut raw = RawAttr::default();
    // SAFETY: raw is a valid sched_attr buffer of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut raw as *mut RawAttr,
            std::mem::size_of::<RawAttr>() as u32,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SchedAttr {
        policy: raw.policy,
        nice: raw.nice,
        priority: raw.priority,
        flags: raw.flags & SETTABLE_FLAGS,
        runtime: raw.runtime,
        deadline: raw.deadline,
        period: raw.period,
    })
}

pub fn set(tid: i32, a: &SchedAttr) -> io::Result<()> {
    let mut raw = RawAttr {
        size: std::mem::size_of::<RawAttr>() as u32,
        policy: a.policy,
        flags: a.flags,
        nice: a.nice,
        priority: a.priority,
        runtime: a.runtime,
        deadline: a.deadline,
        period: a.period,
        ..Default::default()
    };
    // Only fair and deadline tasks take a runtime; clear it for RT classes.
    if a.policy == libc::SCHED_FIFO as u32 || a.policy == libc::SCHED_RR as u32 {
        raw.runtime = 0;
        raw.deadline = 0;
        raw.period = 0;
    }
    // SAFETY: raw is a fully initialised sched_attr.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &mut raw as *mut RawAttr, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The demoted state: SCHED_IDLE runs only when nothing else on the CPU can,
/// and a short slice (where the kernel supports custom slices) makes demoted
/// spinners hand the CPU around quickly among themselves.
pub fn demoted(slice_ns: u64) -> SchedAttr {
    SchedAttr {
        policy: SCHED_IDLE,
        // Nice 19 raises the task's priority number, which makes the kernel
        // reschedule a running thread at once instead of at its next tick.
        nice: 19,
        priority: 0,
        flags: 0,
        runtime: slice_ns,
        deadline: 0,
        period: 0,
    }
}

/// Sets `attr`, and if the kernel rejects the custom slice (before 6.12), without it.
pub fn set_or_plain(tid: i32, attr: &SchedAttr) -> io::Result<()> {
    match set(tid, attr) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && attr.runtime != 0 => set(
            tid,
            &SchedAttr {
                runtime: 0,
                ..*attr
            },
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demote_and_restore_own_thread() {
        let h = std::thread::spawn(|| {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let before = get(tid).unwrap();
            set_or_plain(tid, &demoted(100_000)).unwrap();
            assert_eq!(get(tid).unwrap().policy, SCHED_IDLE);
            set(tid, &before).unwrap();
            assert_eq!(get(tid).unwrap(), before);
        });
        h.join().unwrap();
    }
}
