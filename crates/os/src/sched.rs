//! Scheduling class, priority and nice of single threads.
//!
//! sched_getattr/sched_setattr carry everything (class, nice, custom slice,
//! flags) and work on any thread; glibc has no wrappers for them. The
//! classic calls are kept for the calling thread's simple cases.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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

/// sched_getattr of thread `tid`, whole.
fn get_raw(tid: i32) -> io::Result<RawAttr> {
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
    Ok(raw)
}

/// sched_setattr of thread `tid`.
fn set_raw(tid: i32, raw: &mut RawAttr) -> io::Result<()> {
    raw.size = std::mem::size_of::<RawAttr>() as u32;
    // SAFETY: raw is a fully initialised sched_attr of the size it states.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, raw as *mut RawAttr, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// sched_setattr flags (uapi linux/sched.h): keep the policy and its
/// parameters; set the utilisation clamps.
const SCHED_FLAG_KEEP_ALL: u64 = 0x08 | 0x10;
const SCHED_FLAG_UTIL_CLAMP: u64 = 0x20 | 0x40;
/// A clamp of -1 puts the system default back (Linux 5.11+), which a
/// thread that never set its clamps has.
const UCLAMP_DEFAULT: u32 = u32::MAX;
/// The clamps of a thread that never set them: 0 and SCHED_CAPACITY_SCALE.
const UCLAMP_UNSET: (u32, u32) = (0, 1024);

/// Makes the kernel take running thread `tid` off its CPU and put it back
/// at once, changing nothing: its utilisation clamps set to what they are
/// (a change sched_setattr always acts on), and a thread that never set
/// them given the defaults back, still not set. A sched_ext scheduler
/// sees the thread stop and restart in place. Needs CONFIG_UCLAMP_TASK
/// (EOPNOTSUPP without) and the privilege to change the thread.
pub fn restart_in_place(tid: i32) -> io::Result<()> {
    let mut raw = get_raw(tid)?;
    if (raw.util_min, raw.util_max) == UCLAMP_UNSET {
        (raw.util_min, raw.util_max) = (UCLAMP_DEFAULT, UCLAMP_DEFAULT);
    }
    raw.flags = SCHED_FLAG_KEEP_ALL | SCHED_FLAG_UTIL_CLAMP;
    set_raw(tid, &mut raw)
}

/// Thread `tid`'s scheduling attributes (0: the caller).
pub fn get(tid: i32) -> io::Result<SchedAttr> {
    let raw = get_raw(tid)?;
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

/// Sets thread `tid`'s scheduling attributes (0: the caller).
pub fn set(tid: i32, a: &SchedAttr) -> io::Result<()> {
    let mut raw = RawAttr {
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
    set_raw(tid, &mut raw)
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

/// Sets the calling thread's class and real-time priority (sched_setscheduler).
pub fn set_scheduler(policy: libc::c_int, priority: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's nice value.
pub fn set_nice(nice: libc::c_int) -> io::Result<()> {
    set_thread_nice(gettid(), nice)
}

/// Sets thread `tid`'s nice value, and nothing else of its scheduling
/// (sched_setattr would also fix its slice as a custom one). On Linux,
/// PRIO_PROCESS with a thread id changes that one thread, not the whole
/// process.
pub fn set_thread_nice(tid: i32, nice: libc::c_int) -> io::Result<()> {
    // SAFETY: setpriority only reads its integer arguments.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_in_place_changes_nothing() {
        std::thread::spawn(|| {
            let tid = gettid();
            let before = get_raw(tid).unwrap();
            match restart_in_place(tid) {
                Ok(()) => {}
                // A kernel without CONFIG_UCLAMP_TASK: nothing was changed.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                Err(e) => panic!("restart_in_place: {e}"),
            }
            let after = get_raw(tid).unwrap();
            assert_eq!(
                (after.policy, after.nice, after.priority, after.runtime),
                (before.policy, before.nice, before.priority, before.runtime)
            );
            assert_eq!(
                (after.util_min, after.util_max),
                (before.util_min, before.util_max)
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn set_and_restore_own_thread() {
        std::thread::spawn(|| {
            let tid = gettid();
            let before = get(tid).unwrap();
            let idle = SchedAttr {
                policy: SCHED_IDLE,
                nice: 19,
                runtime: 100_000,
                ..before
            };
            set_or_plain(tid, &idle).unwrap();
            assert_eq!(get(tid).unwrap().policy, SCHED_IDLE);
            set(tid, &before).unwrap();
            assert_eq!(get(tid).unwrap(), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn classic_calls_change_the_calling_thread() {
        std::thread::spawn(|| {
            set_nice(5).unwrap();
            assert_eq!(get(0).unwrap().nice, 5);
            set_scheduler(libc::SCHED_IDLE, 0).unwrap();
            assert_eq!(get(0).unwrap().policy, SCHED_IDLE);
        })
        .join()
        .unwrap();
    }
}
