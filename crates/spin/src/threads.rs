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
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| live_state(&stat))
}

/// Whether thread `tid` of `pid` still runs (exists and is not a zombie).
pub fn running(pid: i32, tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
        .is_ok_and(|stat| live_state(&stat))
}

/// Whether thread `tid` of `pid` is still listed in /proc, zombie or not: a
/// listing of the task directory taken while other threads exit can skip a
/// thread that is still there.
pub fn listed(pid: i32, tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// Whether a /proc stat line shows a task that has not exited: the state
/// letter follows the last ')' of the command name (which may contain one).
fn live_state(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
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
        let (tid, blocked, unblocked) = std::thread::spawn(move || {
            let tid = vsched_os::sched::gettid();
            let unblocked = super::blocks_signal(me, tid, libc::SIGURG);
            // SAFETY: the set is a local sigset_t initialised by
            // sigemptyset; the mask changed is this short-lived thread's.
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
    fn zombies_and_exited_tasks_are_not_live() {
        // The command name may hold ") " itself: the last ')' counts.
        assert!(super::live_state("42 (a) R (b) S 1 2 3"));
        assert!(!super::live_state("42 (sh) Z 1 2 3"));
        assert!(!super::live_state("42 (x) ) X 1"));
        assert!(!super::live_state("garbage"));
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
        assert!(super::running(me, me) && super::listed(me, me));
        assert!(super::list(i32::MAX).is_err());
        assert!(!super::alive(i32::MAX));
        assert!(!super::running(me, i32::MAX) && !super::listed(me, i32::MAX));
    }
}
