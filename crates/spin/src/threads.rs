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

#[cfg(test)]
mod tests {
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
