//! The threads of a program and of every process it started, as /proc
//! shows them now: each thread's `children` file lists the processes it
//! forked, so the walk needs no scan of every process on the system.

/// One thread: its process (thread group) and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    pub pid: i32,
    pub tid: i32,
}

/// Processes the walk follows at most: a bound against a fork bomb
/// making each tick's walk unbounded; far above the programs consolidation
/// is for (a build's compiler processes come and go by the dozen).
const MAX_PROCESSES: usize = 4096;

/// Every thread of `root` and of its descendants; empty when `root` is
/// gone. Processes that exit during the walk are skipped.
pub fn tasks(root: i32) -> Vec<Task> {
    let mut out = Vec::new();
    let mut pending = vec![root];
    let mut seen = 0;
    while let Some(pid) = pending.pop() {
        seen += 1;
        if seen > MAX_PROCESSES {
            break;
        }
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            out.push(Task { pid, tid });
            if let Ok(children) =
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
            {
                pending.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_a_child_process_and_this_process_threads() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(vsched_os::sched::gettid()).unwrap();
            let _ = done_rx.recv();
        });
        let worker_tid = tid_rx.recv().unwrap();
        let found = tasks(me);
        drop(done_tx);
        worker.join().unwrap();
        let child_pid = child.id() as i32;
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&Task { pid: me, tid: me }), "{found:?}");
        assert!(
            found.contains(&Task {
                pid: me,
                tid: worker_tid
            }),
            "{found:?}"
        );
        assert!(found.iter().any(|t| t.pid == child_pid), "{found:?}");
        assert!(tasks(i32::MAX).is_empty());
    }
}
