//! The active set applied to the program's threads by CPU affinity, and
//! put back. A thread is taken over only while its affinity is vsched's:
//! the mask the program started with, or the active set vsched gives now
//! or gave last (a thread inherits its creator's). A thread whose affinity
//! is anything else was placed by the program itself, and is left alone
//! from then on. Ambiguous, and taken for vsched's: a thread the program
//! pins to exactly the active set (`taskset -c 0` while the set is vCPU 0).

use crate::tree::Task;
use crate::watchdog::{self, Journal};
use std::collections::{HashMap, HashSet};
use vsched_os::affinity;

/// What vsched does with a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// vsched places it; the set it last gave it.
    Vsched(Vec<u32>),
    /// The program placed it itself.
    Program,
}

/// Counts for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlacementCounts {
    /// Threads vsched placed.
    pub threads_placed: u64,
    /// Threads left alone because the program had placed them.
    pub threads_left_to_the_program: u64,
    /// Affinity changes that failed for a reason other than the thread's
    /// exit (permission: a thread that changed its credentials).
    pub failures: u64,
}

/// Sweeps of the program's processes at the end: a thread created between
/// two walks has the narrowed set without vsched knowing it, and one
/// created while the sweep runs may need another; three, because each
/// sweep's window is microseconds and a program cannot keep creating
/// threads inside every one.
const RESTORE_SWEEPS: usize = 3;

/// The program's threads and the set they run on.
pub struct Placement {
    /// The affinity the program started with, in numeric order.
    start: Vec<u32>,
    /// Its vCPUs in the order they join the active set (crate::preferred):
    /// the set of n is the first n.
    join_order: Vec<u32>,
    /// The set given now, and the one before it (a thread created while
    /// the set changed inherits either).
    current: Vec<u32>,
    previous: Vec<u32>,
    threads: HashMap<Task, Owner>,
    /// Every process a placed thread belonged to: swept at the end.
    processes: HashSet<i32>,
    journal: Option<Journal>,
    pub counts: PlacementCounts,
}

impl Placement {
    /// `start`: the mask the program starts with. `preferred`: the
    /// kernel's preferred CPUs, if it says (crate::preferred), which join
    /// the set first. `journal`: the watchdog that puts threads back if
    /// vsched is killed.
    pub fn new(
        mut start: Vec<u32>,
        preferred: Option<&[u32]>,
        mut journal: Option<Journal>,
    ) -> Placement {
        start.sort_unstable();
        let join_order = crate::preferred::join_order(&start, preferred);
        if let Some(j) = journal.as_mut() {
            j.start(&start);
        }
        Placement {
            current: start.clone(),
            previous: start.clone(),
            start,
            join_order,
            threads: HashMap::new(),
            processes: HashSet::new(),
            journal,
            counts: PlacementCounts::default(),
        }
    }

    /// Orders the vCPUs by a new preference of the kernel's
    /// (crate::preferred); whether the order changed. The next
    /// [`Placement::apply`] gives the threads the set of the new order.
    pub fn prefer(&mut self, preferred: Option<&[u32]>) -> bool {
        let order = crate::preferred::join_order(&self.start, preferred);
        if order == self.join_order {
            return false;
        }
        self.join_order = order;
        true
    }

    /// The vCPUs an active set of `n` is (the first `n` to join).
    pub fn set_of(&self, n: usize) -> Vec<u32> {
        let mut set = self.join_order[..n.clamp(1, self.join_order.len())].to_vec();
        // In numeric order, as the kernel reports an affinity: a thread's
        // mask is compared with the sets vsched gave.
        set.sort_unstable();
        set
    }

    pub fn max(&self) -> usize {
        self.start.len()
    }

    /// Of `tasks`, those vsched places or will (not those the program
    /// placed): the threads whose demand the set is sized for.
    pub fn placed(&self, tasks: &[Task]) -> Vec<Task> {
        tasks
            .iter()
            .filter(|t| self.threads.get(t) != Some(&Owner::Program))
            .copied()
            .collect()
    }

    /// Gives every thread of `tasks` (in order, as crate::tree::tasks
    /// gives them) that vsched places the set of `n`. Before each change
    /// the thread's affinity is read, so that one the program placed since
    /// is left alone; `check` reads every known thread's, changed or not,
    /// to find those (a system call per thread: not every tick). A thread
    /// that left the tree (a daemon the program started, re-parented when
    /// its parent exited) gets the start mask back at once.
    pub fn apply(&mut self, tasks: &[Task], n: usize, check: bool) {
        let want = self.set_of(n);
        if want != self.current {
            self.previous = std::mem::replace(&mut self.current, want.clone());
        }
        let gone: Vec<Task> = self
            .threads
            .keys()
            .filter(|t| tasks.binary_search(t).is_err())
            .copied()
            .collect();
        for task in gone {
            self.give_back(task);
        }
        for &task in tasks {
            let given = match self.threads.get(&task) {
                Some(Owner::Program) => continue,
                Some(Owner::Vsched(given)) => Some(given.clone()),
                None => None,
            };
            if !check && given.as_ref() == Some(&want) {
                continue;
            }
            let Ok(now) = affinity::thread_affinity(task.tid) else {
                continue;
            };
            let ours = match &given {
                Some(g) => now == *g,
                None => now == self.start || now == self.current || now == self.previous,
            };
            if !ours {
                self.left_to_the_program(task);
                continue;
            }
            if given.is_none() {
                self.counts.threads_placed += 1;
                if self.processes.insert(task.pid) {
                    if let Some(j) = self.journal.as_mut() {
                        j.process(task.pid);
                    }
                }
                if let Some(j) = self.journal.as_mut() {
                    j.taken(task);
                }
            }
            if now == want {
                self.threads.insert(task, Owner::Vsched(want.clone()));
                continue;
            }
            match affinity::set_thread_affinity(task.tid, &want) {
                Ok(()) => {
                    self.threads.insert(task, Owner::Vsched(want.clone()));
                }
                // Exited meanwhile: forgotten at the next walk.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(_) => {
                    self.counts.failures += 1;
                    self.left_to_the_program(task);
                }
            }
        }
    }

    fn left_to_the_program(&mut self, task: Task) {
        if self.threads.insert(task, Owner::Program) != Some(Owner::Program) {
            self.counts.threads_left_to_the_program += 1;
            if let Some(j) = self.journal.as_mut() {
                j.released(task);
            }
        }
    }

    /// Gives every thread vsched placed, still alive, the start mask back;
    /// then sweeps every process it placed threads of, for threads created
    /// since the last walk that inherited a narrowed set.
    pub fn restore(&mut self) {
        let tasks: Vec<Task> = self.threads.keys().copied().collect();
        for task in tasks {
            self.give_back(task);
        }
        let left: HashSet<i32> = self
            .threads
            .iter()
            .filter(|(_, o)| **o == Owner::Program)
            .map(|(t, _)| t.tid)
            .collect();
        for _ in 0..RESTORE_SWEEPS {
            let swept = watchdog::widen_narrowed(&self.start, &self.processes, &left);
            self.counts.failures += swept.failed as u64;
            if swept.widened == 0 {
                break;
            }
        }
    }

    /// Ends the journal once everything is given back: the watchdog has
    /// nothing left to do and exits.
    pub fn close_journal(&mut self) {
        if let Some(j) = self.journal.take() {
            j.close();
        }
    }

    /// Gives `task` the start mask back if vsched placed it and it still
    /// has vsched's set (it may have placed itself since the last check),
    /// and forgets it.
    fn give_back(&mut self, task: Task) {
        let Some(Owner::Vsched(given)) = self.threads.remove(&task) else {
            return;
        };
        // The thread id may have been reused elsewhere once the thread
        // exited: only a thread still in its process is put back.
        let alive = watchdog::still_in_its_process(task);
        if alive && affinity::thread_affinity(task.tid).is_ok_and(|now| now == given) {
            match affinity::set_thread_affinity(task.tid, &self.start) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(_) => self.counts.failures += 1,
            }
        }
        if let Some(j) = self.journal.as_mut() {
            j.released(task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_kernels_preferred_vcpus_make_the_narrow_sets() {
        let p = Placement::new(vec![3, 1, 0, 2], Some(&[2, 3]), None);
        assert_eq!(p.set_of(1), [2]);
        assert_eq!(p.set_of(2), [2, 3]);
        assert_eq!(p.set_of(3), [0, 2, 3], "then the lowest-numbered");
        assert_eq!(p.set_of(4), [0, 1, 2, 3]);
        assert_eq!(Placement::new(vec![1, 0], None, None).set_of(1), [0]);
    }

    #[test]
    fn a_new_preference_reorders_the_sets_and_says_whether_it_did() {
        let mut p = Placement::new(vec![0, 1], Some(&[1]), None);
        assert_eq!(p.set_of(1), [1]);
        assert!(p.prefer(Some(&[0])));
        assert_eq!(p.set_of(1), [0]);
        assert!(!p.prefer(Some(&[0])), "the same preference again");
        // Both preferred orders as none does: no change.
        assert!(!p.prefer(Some(&[0, 1])));
        assert!(!p.prefer(None));
        assert_eq!(p.set_of(2), [0, 1]);
    }

    /// Regression: a thread created by a narrowed thread between two walks
    /// inherits the narrowed set without vsched knowing it; the end's sweep
    /// must give it back too.
    #[test]
    fn a_thread_vsched_never_walked_gets_the_start_mask_back() {
        let cpus = affinity::thread_affinity(0).unwrap();
        if cpus.len() < 2 {
            eprintln!("skipped: needs 2 CPUs");
            return;
        }
        let pid = std::process::id() as i32;
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
        let parent = std::thread::spawn({
            let done_rx = done_rx.clone();
            move || {
                tid_tx.send(vsched_os::sched::gettid()).unwrap();
                // Narrowed by the placement below, then it starts a child.
                go_rx.recv().unwrap();
                let (child_tx, child_rx) = mpsc::channel();
                let done = done_rx.clone();
                let child = std::thread::spawn(move || {
                    child_tx.send(vsched_os::sched::gettid()).unwrap();
                    let _ = done.lock().unwrap().recv();
                    affinity::thread_affinity(0).unwrap()
                });
                let child_tid: i32 = child_rx.recv().unwrap();
                (child, child_tid)
            }
        });
        let parent_tid = tid_rx.recv().unwrap();
        let mut p = Placement::new(cpus.clone(), None, None);
        p.apply(
            &[Task {
                pid,
                tid: parent_tid,
            }],
            1,
            true,
        );
        assert_eq!(affinity::thread_affinity(parent_tid).unwrap(), p.set_of(1));
        go_tx.send(()).unwrap();
        let (child, child_tid) = parent.join().unwrap();
        assert_eq!(affinity::thread_affinity(child_tid).unwrap(), p.set_of(1));
        p.restore();
        drop(done_tx);
        assert_eq!(
            child.join().unwrap(),
            cpus,
            "the unwalked thread was given back"
        );
    }
}
