//! The active set applied to the program's threads by CPU affinity, and
//! put back. A thread is taken over only while its affinity is vsched's:
//! the mask the program started with, or one vsched set (a thread inherits
//! its creator's). A thread whose affinity is anything else was placed by
//! the program itself, and is left alone from then on.

use crate::tree::Task;
use crate::watchdog::Journal;
use std::collections::HashMap;
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

/// The program's threads and the set they run on.
pub struct Placement {
    /// The affinity the program started with, in vsched's order of
    /// preference: the active set is always a prefix of it.
    start: Vec<u32>,
    threads: HashMap<Task, Owner>,
    journal: Option<Journal>,
    pub counts: PlacementCounts,
}

impl Placement {
    /// `start`: the mask the program starts with, most preferred vCPU first.
    /// `journal`: the watchdog that puts threads back if vsched is killed.
    pub fn new(start: Vec<u32>, mut journal: Option<Journal>) -> Placement {
        if let Some(j) = journal.as_mut() {
            j.start(&start);
        }
        Placement {
            start,
            threads: HashMap::new(),
            journal,
            counts: PlacementCounts::default(),
        }
    }

    /// The vCPUs an active set of `n` is (the first `n` of the start mask).
    pub fn set_of(&self, n: usize) -> Vec<u32> {
        let mut set = self.start[..n.clamp(1, self.start.len())].to_vec();
        set.sort_unstable();
        set
    }

    pub fn max(&self) -> usize {
        self.start.len()
    }

    /// Gives every thread of `tasks` (in order, as crate::tree::tasks
    /// gives them) that vsched places the set of `n`; `check` reads each
    /// known thread's affinity first, to find those the program placed
    /// since (a system call per thread: not every tick). A thread that
    /// left the tree (a daemon the program started, re-parented when its
    /// parent exited) gets the start mask back at once.
    pub fn apply(&mut self, tasks: &[Task], n: usize, check: bool) {
        let want = self.set_of(n);
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
            if given.is_some() && !check && given.as_ref() == Some(&want) {
                continue;
            }
            if given.is_none() || check {
                let Ok(now) = affinity::thread_affinity(task.tid) else {
                    continue;
                };
                let ours = match &given {
                    Some(g) => now == *g,
                    None => self.is_vscheds(&now),
                };
                if !ours {
                    self.left_to_the_program(task);
                    continue;
                }
                if given.is_none() {
                    self.counts.threads_placed += 1;
                    if let Some(j) = self.journal.as_mut() {
                        j.taken(task);
                    }
                }
                if now == want {
                    self.threads.insert(task, Owner::Vsched(want.clone()));
                    continue;
                }
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

    /// Whether `mask` (sorted) is one vsched gives: the start mask or an
    /// active set's.
    fn is_vscheds(&self, mask: &[u32]) -> bool {
        (1..=self.max()).any(|k| mask == self.set_of(k).as_slice())
    }

    fn left_to_the_program(&mut self, task: Task) {
        if self.threads.insert(task, Owner::Program) != Some(Owner::Program) {
            self.counts.threads_left_to_the_program += 1;
            if let Some(j) = self.journal.as_mut() {
                j.released(task);
            }
        }
    }

    /// Gives every thread vsched placed, still alive, the start mask back.
    pub fn restore(&mut self) {
        let tasks: Vec<Task> = self.threads.keys().copied().collect();
        for task in tasks {
            self.give_back(task);
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
        let full = self.set_of(self.max());
        // The thread id may have been reused elsewhere once the thread
        // exited: only a thread still in its process is put back.
        let alive = crate::watchdog::still_in_its_process(task);
        if alive && affinity::thread_affinity(task.tid).is_ok_and(|now| now == given) {
            match affinity::set_thread_affinity(task.tid, &full) {
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
