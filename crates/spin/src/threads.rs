//! The threads of a process, as /proc lists them right now.

use std::io;

/// Thread ids of process `pid`; an error if the process is gone.
pub fn list(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether `pid` names a live process (zombies count as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the last ')' of the command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether thread `tid` of `pid` blocks signal `sig` (its SigBlk mask in
/// /proc). Unknown (thread gone) reads as blocked.
pub fn blocks_signal(pid: i32, tid: i32, sig: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_none_or(|mask| mask & (1 << (sig - 1)) != 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_blocked_signals() {
        let me = std::process::id() as i32;
        // SAFETY: a signal mask change on a thread of our own, undone below.
        let (tid, blocked, unblocked) = std::thread::spawn(move || {
            let tid = unsafe { libc::gettid() };
            let unblocked = super::blocks_signal(me, tid, libc::SIGURG);
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGURG);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            (tid, super::blocks_signal(me, tid, libc::SIGURG), unblocked)
        })
        .join()
        .unwrap();
        assert!(blocked && !unblocked);
        // Gone (joined): unknown, read as blocked.
        assert!(super::blocks_signal(me, tid, libc::SIGURG));
    }

    #[test]
    fn lists_own_threads() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || rx.recv().ok());
        let tids = super::list(me).unwrap();
        assert!(tids.len() >= 2 && tids.contains(&me));
        assert!(super::alive(me));
        tx.send(()).unwrap();
        h.join().unwrap();
        assert!(super::list(i32::MAX).is_err());
        assert!(!super::alive(i32::MAX));
    }
}
