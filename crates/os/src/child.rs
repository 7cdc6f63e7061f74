//! Child processes that must not outlive the vsched process that started
//! them, even when it is killed with SIGKILL and runs no clean-up; and the
//! CPU time the ones already reaped used.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

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

/// Starts `cmd` as a watchdog: a process that reads a journal on its
/// standard input (the returned pipe, whose only writer is this process)
/// and acts when it ends, that is when this process exits however it
/// exits (the kernel closes a dead process's descriptors). It gets its own
/// process group, so that a terminal's Ctrl-C, sent to vsched's group,
/// does not end it before it has acted.
pub fn spawn_watchdog(
    mut cmd: Command,
) -> std::io::Result<(std::process::Child, std::process::ChildStdin)> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()?;
    let journal = child.stdin.take().expect("stdin was piped");
    Ok((child, journal))
}

/// User plus system CPU time of every child (and, through them, every
/// descendant) that this process has waited for so far
/// (getrusage(RUSAGE_CHILDREN)). The difference across a run that spawns
/// and reaps its processes is what they used: beside the wall time, it
/// tells work done from time spent waiting. Process-wide: a child that
/// another thread reaps meanwhile is added too, and a descendant orphaned
/// (reaped by init, not by its parent) is missed; callers run one child
/// at a time.
pub fn reaped_cpu() -> Duration {
    // SAFETY: rusage is plain data; getrusage only writes into it, and
    // RUSAGE_CHILDREN is always valid (it cannot fail with these arguments).
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
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

    #[test]
    fn reaped_cpu_counts_a_busy_child_once_it_is_waited_for() {
        let before = reaped_cpu();
        // A shell loop that burns CPU for a while (no sleeping).
        let status = Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let used = reaped_cpu() - before;
        // 200,000 shell iterations take tens of ms on any machine; the
        // clock's tick (getrusage is tick-accurate at worst) is 4-10 ms.
        assert!(used >= Duration::from_millis(10), "{used:?}");
    }
}
