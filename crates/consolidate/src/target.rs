//! What a consolidation acts on: a set of threads, and the way they are
//! given an active set of vCPUs. [`ProcessTree`] is `vsched run
//! --consolidate`'s: a program's threads and its children's, placed by CPU
//! affinity (crate::placement), vsched's own threads with them. The daemon
//! has another, a cgroup placed by its cpuset (vsched-daemon's
//! `consolidate`). The loop that decides the set (crate::consolidator) is
//! the same for both.

use crate::placement::{Placement, PlacementCounts};
use crate::tree::{Task, Tree};
use crate::watchdog::Journal;

/// The threads a consolidation sizes its set for, and how they get it.
pub trait Target {
    /// The threads now, sorted; None once there is nothing left to
    /// consolidate (the program ended).
    fn tasks(&mut self) -> Option<Vec<Task>>;

    /// Whether threads may have started since the last walk, where that
    /// is cheap to tell (or the walk itself is cheap): a narrowed set
    /// then walks at once, not at the next of its walks every few ticks,
    /// since a CPU-bound thread that starts there waits for the set to
    /// widen.
    fn may_have_new_threads(&mut self) -> bool;

    /// Of `tasks`, those whose demand the set is sized for.
    fn counted(&self, tasks: &[Task]) -> Vec<Task>;

    /// The most vCPUs the set may hold now (at least 1).
    fn max(&self) -> usize;

    /// The vCPUs a set of `n` is, in numeric order.
    fn set_of(&self, n: usize) -> Vec<u32>;

    /// Orders the vCPUs by a new preference of the kernel's
    /// (crate::preferred); whether the order changed.
    fn prefer(&mut self, preferred: Option<&[u32]>) -> bool;

    /// Gives `tasks` the set of `n`; `check`: also look at the threads
    /// whose set seems unchanged (costlier; not every tick).
    fn apply(&mut self, tasks: &[Task], n: usize, check: bool);

    /// Puts back what the consolidation changed.
    fn restore(&mut self);

    /// What placing the threads did, for the report.
    fn counts(&self) -> PlacementCounts;
}

/// A program's threads and its descendants', placed by affinity; vsched's
/// own threads follow the set, so that their wake-ups do not wake a vCPU
/// the program has left.
pub struct ProcessTree {
    root: i32,
    tree: Tree,
    placement: Placement,
    /// The set vsched's own threads run on (`place_vsched`).
    own_set: Vec<u32>,
}

impl ProcessTree {
    /// Process `root` and its descendants over `cpus` (the kernel's
    /// preferred CPUs are the consolidation's to give, `Target::prefer`);
    /// `journal`: the watchdog that gives the threads back if vsched is
    /// killed.
    pub fn new(root: i32, cpus: Vec<u32>, journal: Option<Journal>) -> ProcessTree {
        ProcessTree {
            root,
            tree: Tree::default(),
            placement: Placement::new(cpus, None, journal),
            own_set: Vec::new(),
        }
    }

    /// Puts this thread and vsched's main thread (which waits for the
    /// program, polling) on `set`. Best effort: where it fails, they run
    /// anywhere.
    fn place_vsched(set: &[u32]) {
        let main = std::process::id() as i32;
        let _ = vsched_os::affinity::set_thread_affinity(0, set);
        let _ = vsched_os::affinity::set_thread_affinity(main, set);
    }
}

impl Target for ProcessTree {
    fn tasks(&mut self) -> Option<Vec<Task>> {
        let tasks = self.tree.tasks(self.root);
        (!tasks.is_empty()).then_some(tasks)
    }

    fn may_have_new_threads(&mut self) -> bool {
        // A walk reads every process's task directory and every thread's
        // `children` file: in an emulated guest, walking a 2-process tree
        // each tick doubled the consolidation's CPU (0.8 s to 1.5 s over
        // 8 s, pingpong, 2026-12-08); one read of /proc/loadavg instead.
        self.tree.may_have_grown()
    }

    fn counted(&self, tasks: &[Task]) -> Vec<Task> {
        // Threads the program placed itself are not the set's to serve.
        self.placement.placed(tasks)
    }

    fn max(&self) -> usize {
        self.placement.max()
    }

    fn set_of(&self, n: usize) -> Vec<u32> {
        self.placement.set_of(n)
    }

    fn prefer(&mut self, preferred: Option<&[u32]>) -> bool {
        self.placement.prefer(preferred)
    }

    fn apply(&mut self, tasks: &[Task], n: usize, check: bool) {
        self.placement.apply(tasks, n, check);
        let set = self.placement.set_of(n);
        if set != self.own_set {
            Self::place_vsched(&set);
            self.own_set = set;
        }
    }

    fn restore(&mut self) {
        self.placement.restore();
        self.placement.close_journal();
        Self::place_vsched(&self.placement.set_of(self.placement.max()));
    }

    fn counts(&self) -> PlacementCounts {
        self.placement.counts
    }
}
