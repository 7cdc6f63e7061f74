//! A second process that puts the cpusets back if the daemon dies without
//! doing so (SIGKILL, a crash, a restore that failed). It blocks reading a
//! pipe whose only writer is the daemon, so the read ends when the daemon
//! does, however it ends; a daemon that stopped cleanly has removed the
//! state file by then. Never waited for: the daemon's exit is what it
//! waits for (it is re-parented and reaped by init).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The daemon's end of the watchdog: dropping it (the daemon's exit)
/// wakes the watchdog.
pub struct Watchdog {
    _child: Child,
}

impl Watchdog {
    /// Starts `command` (the binary's own restore mode, which calls
    /// [`wait_for_daemon`] first) with its standard input a pipe from this
    /// process.
    pub fn spawn(mut command: Command) -> std::io::Result<Watchdog> {
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Watchdog { _child: child })
    }
}

/// In the watchdog: ignores the signals that stop the daemon (Ctrl-C
/// reaches the whole process group, systemd signals the whole unit), then
/// waits for the daemon's end.
pub fn wait_for_daemon() {
    // SAFETY: setting a disposition to SIG_IGN runs no code in the handler
    // context.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    // SAFETY: getppid has no preconditions.
    let daemon = unsafe { libc::getppid() };
    let mut sink = [0u8; 64];
    use std::io::Read;
    let mut stdin = std::io::stdin();
    while !matches!(stdin.read(&mut sink), Ok(0) | Err(_)) {}
    // The pipe closes as the daemon exits; until it has (this process is
    // re-parented then), its state file names a live daemon.
    // SAFETY: as above.
    while unsafe { libc::getppid() } == daemon {
        // The daemon is exiting: milliseconds; a few checks suffice.
        std::thread::sleep(Duration::from_millis(10));
    }
}
