//! Freezing one vCPU: its host thread stopped outright for as long as a
//! layout's phase says, as a live migration's stop or a long steal does to
//! a cloud vCPU. A bandwidth cap cannot do it (the shortest share is 1 ms
//! a second); ptrace can stop one thread of QEMU and leave the others
//! running. The thread that froze a vCPU must be the one that thaws it
//! (ptrace's rule): the lab's run loop does both, and a frozen thread that
//! is never thawed resumes when this process exits (the kernel detaches
//! its tracees).

use crate::error::{LabError, Result};
use std::io;

/// A vCPU thread held stopped.
#[derive(Debug)]
pub struct Frozen {
    tid: i32,
    /// A signal that reached the thread before it stopped: delivered on
    /// thawing, so QEMU loses nothing.
    pending_signal: i32,
}

/// Stops thread `tid` (of a process this one may trace, as root its own
/// child QEMU) and returns once it has stopped.
pub fn freeze(tid: i32) -> Result<Frozen> {
    let os = |what: &str| LabError::Os {
        what: format!("{what} vCPU thread {tid}"),
        source: io::Error::last_os_error(),
    };
    // SAFETY: ptrace with PTRACE_SEIZE/INTERRUPT reads no memory of ours;
    // the null address and data are what these requests take.
    unsafe {
        if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
            return Err(os("attaching to"));
        }
        if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
            let err = os("stopping");
            libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0);
            return Err(err);
        }
    }
    let mut status = 0;
    // SAFETY: status is a valid out-pointer; __WALL waits for a thread.
    if unsafe { libc::waitpid(tid, &mut status, libc::__WALL) } != tid {
        let err = os("waiting for");
        // SAFETY: as above; never leave the thread seized.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) };
        return Err(err);
    }
    if !libc::WIFSTOPPED(status) {
        return Err(LabError::Os {
            what: format!("vCPU thread {tid} ended instead of stopping (status {status:#x})"),
            source: io::Error::from_raw_os_error(libc::ESRCH),
        });
    }
    // The interrupt's own stop is an event stop (PTRACE_EVENT_STOP in
    // bits 16-23, SIGTRAP); any other stop is a signal arriving first,
    // which is stopped just as well and is handed back when thawing.
    let event_stop = status >> 16 == libc::PTRACE_EVENT_STOP;
    Ok(Frozen {
        tid,
        pending_signal: if event_stop {
            0
        } else {
            libc::WSTOPSIG(status)
        },
    })
}

impl Frozen {
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// Lets the thread run again.
    pub fn thaw(self) -> Result<()> {
        let tid = self.tid;
        let sig = self.pending_signal as libc::c_long;
        std::mem::forget(self);
        // SAFETY: as in `freeze`; the data argument is the signal to deliver.
        if unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, sig) } != 0 {
            return Err(LabError::Os {
                what: format!("letting vCPU thread {tid} run again"),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as in `thaw`. A thread never left stopped by an error path.
        unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.tid,
                0,
                self.pending_signal as libc::c_long,
            )
        };
    }
}
