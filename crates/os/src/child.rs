//! Child processes that must not outlive the vsched process that started
//! them, even when it is killed with SIGKILL and runs no clean-up.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the kernel send `signal` to the child started from `cmd` when its
/// parent dies (PR_SET_PDEATHSIG, set in the child between fork and exec;
/// it survives the exec of an ordinary program). The parent is the
/// *thread* that spawns it: spawn from a thread that lives as long as the
/// child should.
pub fn die_with_parent(cmd: &mut Command, signal: libc::c_int) {
    // SAFETY: the closure runs in the forked child before exec and calls
    // only prctl, which is async-signal-safe; it touches no memory of ours.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, signal);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The kernel counts the *thread* that forked as the parent: a thread
    /// that spawns the child and ends stands for a killed vsched.
    #[test]
    fn the_child_dies_when_its_parent_does() {
        let mut child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd, libc::SIGKILL);
            cmd.spawn().unwrap()
        })
        .join()
        .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }
}
