//! The threads of a program and of every process it started, as /proc
//! shows them now: each thread's `children` file lists the processes it
//! forked, so the walk needs no scan of every process on the system. The
//! `children` files are kept open between walks (crate::procfile).

use crate::procfile::KeptFile;
use std::collections::HashMap;

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

/// `children` files kept open at most: with the counters' 512
/// (crate::demand), well inside the usual 1024 descriptors.
const MAX_KEPT_CHILDREN_FILES: usize = 256;

/// Bytes read of a `children` file: a pid and a space each, so thousands
/// of children; a longer list is read whole by path.
const CHILDREN_BYTES: usize = 64 * 1024;

/// The walks of one program's tree, with the files they keep open.
#[derive(Debug, Default)]
pub struct Tree {
    children: HashMap<Task, KeptFile>,
    /// The newest id at the last walk.
    newest_at_walk: Option<i32>,
    newest: NewestId,
}

/// The id the kernel gave the newest process or thread (the last field
/// of /proc/loadavg; threads take their ids from the same counter), read
/// from a file kept open: where it has not changed since a walk, no thread
/// has started anywhere, and the tree needs no walk.
#[derive(Debug, Default)]
pub struct NewestId(Option<std::fs::File>);

impl NewestId {
    /// The newest id, None where /proc/loadavg cannot be read.
    pub fn read(&mut self) -> Option<i32> {
        use std::os::unix::fs::FileExt;
        if self.0.is_none() {
            self.0 = std::fs::File::open("/proc/loadavg").ok();
        }
        // "0.00 0.01 0.05 1/123 4567\n": under 64 bytes on any machine.
        let mut buf = [0u8; 128];
        let n = self.0.as_ref()?.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n])
            .ok()?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    }
}

impl Tree {
    /// Whether a thread may have started since the last walk: the kernel
    /// has given out an id since (or that cannot be told).
    pub fn may_have_grown(&mut self) -> bool {
        let newest = self.newest.read();
        newest.is_none() || newest != self.newest_at_walk
    }

    /// Every thread of `root` and of its descendants, in order; empty when
    /// `root` is gone. Processes that exit during the walk are skipped.
    pub fn tasks(&mut self, root: i32) -> Vec<Task> {
        // Read before the walk: a thread that starts during it changes
        // the id after, and the next look walks again.
        self.newest_at_walk = self.newest.read();
        let mut out = Vec::new();
        let mut pending = vec![root];
        let mut seen = 0;
        let mut buf = vec![0u8; CHILDREN_BYTES];
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
                let task = Task { pid, tid };
                out.push(task);
                pending.extend(self.children_of(task, &mut buf));
            }
        }
        out.sort_unstable();
        // The files of threads gone are closed.
        self.children.retain(|t, _| out.binary_search(t).is_ok());
        out
    }

    /// The processes `task` forked that still run.
    fn children_of(&mut self, task: Task, buf: &mut [u8]) -> Vec<i32> {
        let keep = self.children.len() < MAX_KEPT_CHILDREN_FILES;
        let file = self.children.entry(task).or_default();
        let text = match file.read(task, "children", keep, buf) {
            Some(n) if n < buf.len() => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Some(_) => {
                std::fs::read_to_string(format!("/proc/{}/task/{}/children", task.pid, task.tid))
                    .unwrap_or_default()
            }
            None => String::new(),
        };
        if !file.is_open() {
            self.children.remove(&task);
        }
        text.split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The second walk re-reads the kept `children` file of the thread
    /// that forked since the first.
    #[test]
    fn the_walk_finds_a_child_process_and_this_process_threads() {
        let me = std::process::id() as i32;
        let mut tree = Tree::default();
        let before = tree.tasks(me);
        assert!(!tree.children.is_empty(), "children files kept");
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
        let found = tree.tasks(me);
        drop(done_tx);
        worker.join().unwrap();
        let child_pid = child.id() as i32;
        let _ = child.kill();
        let _ = child.wait();
        assert!(!before.iter().any(|t| t.pid == child_pid), "{before:?}");
        assert!(found.contains(&Task { pid: me, tid: me }), "{found:?}");
        assert!(
            found.contains(&Task {
                pid: me,
                tid: worker_tid
            }),
            "{found:?}"
        );
        assert!(found.iter().any(|t| t.pid == child_pid), "{found:?}");
        assert!(Tree::default().tasks(i32::MAX).is_empty());
    }

    /// A walk is wanted again only once a thread has started (anywhere:
    /// other tests' threads may make it true sooner, never false).
    #[test]
    fn the_tree_may_have_grown_only_once_a_thread_started() {
        let me = std::process::id() as i32;
        let mut tree = Tree::default();
        assert!(tree.may_have_grown(), "never walked");
        tree.tasks(me);
        let before = tree.newest.read().expect("/proc/loadavg");
        std::thread::spawn(|| {}).join().unwrap();
        assert!(tree.newest.read().unwrap() != before, "a new thread's id");
        assert!(tree.may_have_grown());
        tree.tasks(me);
        let walked = tree.newest_at_walk;
        assert_eq!(tree.may_have_grown(), tree.newest.read() != walked);
    }
}
