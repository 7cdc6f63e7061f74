//! The scheduling attributes a demoted spinner gets. Reading and setting
//! them is vsched-os's (`vsched_os::sched`).

use vsched_os::sched::{SchedAttr, SCHED_IDLE};

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

#[cfg(test)]
mod tests {
    use super::*;
    use vsched_os::sched;

    #[test]
    fn demote_and_restore_own_thread() {
        std::thread::spawn(|| {
            let tid = sched::gettid();
            let before = sched::get(tid).unwrap();
            sched::set_or_plain(tid, &demoted(100_000)).unwrap();
            assert_eq!(sched::get(tid).unwrap().policy, SCHED_IDLE);
            sched::set(tid, &before).unwrap();
            assert_eq!(sched::get(tid).unwrap(), before);
        })
        .join()
        .unwrap();
    }
}
