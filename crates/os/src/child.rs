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

/// Sleeps until a process exits, without waking to poll: a pidfd
/// (pidfd_open, Linux 5.3) becomes readable when the process has ended.
/// Waking every few milliseconds to ask instead cost vsched 3.5% of a vCPU
/// in an emulated guest, taken from the program it runs.
pub struct ExitWatch {
    /// None where the kernel has no pidfd_open: then `wait` sleeps briefly.
    pidfd: Option<std::os::fd::OwnedFd>,
}

/// Where there is no pidfd, how long `ExitWatch::wait` sleeps at most: the
/// delay in noticing an exit (5 ms, a fraction of any program's run).
const POLL_WITHOUT_PIDFD: Duration = Duration::from_millis(5);

impl ExitWatch {
    /// Watches process `pid` (a child not yet reaped, so that the id
    /// cannot name another process).
    pub fn new(pid: i32) -> ExitWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes two integers and returns a new
        // descriptor or -1; nothing of ours is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        ExitWatch {
            // SAFETY: a non-negative return is a descriptor this process
            // now owns and nothing else holds.
            pidfd: (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }),
        }
    }

    /// Returns once the process has exited, a signal handler ran on this
    /// thread, or `timeout` passed, whichever is first: the caller checks
    /// which.
    pub fn wait(&self, timeout: Duration) {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.pidfd else {
            std::thread::sleep(timeout.min(POLL_WITHOUT_PIDFD));
            return;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd, whose count is passed; EINTR (a
        // signal) and the timeout both just return.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
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
    fn an_exit_watch_returns_when_the_child_exits_not_at_the_timeout() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let watch = ExitWatch::new(child.id() as i32);
        assert!(watch.pidfd.is_some(), "this kernel has pidfd_open");
        let t = std::time::Instant::now();
        watch.wait(Duration::from_secs(30));
        let waited = t.elapsed();
        assert!(
            child.try_wait().unwrap().is_some(),
            "returned before the exit"
        );
        assert!(waited < Duration::from_secs(20), "{waited:?}");
        let still = Command::new("sleep").arg("30").spawn().unwrap();
        let watch = ExitWatch::new(still.id() as i32);
        let t = std::time::Instant::now();
        watch.wait(Duration::from_millis(50));
        assert!(t.elapsed() >= Duration::from_millis(50));
        let mut still = still;
        let _ = still.kill();
        let _ = still.wait();
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
