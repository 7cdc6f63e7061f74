//! Gleaner's consolidation for the cgroups the daemon manages
//! (`--consolidate-cgroups`; ../shared/seeds/gleaner-idleness-consolidation.txt):
//! each `--rwc-cgroup`'s threads get, by its cpuset, the fewest of the
//! vCPUs RWC leaves it that carry their work. The decisions are
//! vsched-consolidate's (the trials the scheduler's consolidation makes
//! too, and the widening at once for threads that run long and wait),
//! on a thread per cgroup; the writes go through the daemon's RWC
//! (crate::rwc), which saves every cpuset before its first change and puts
//! it back on every exit path, the watchdog's included.

use crate::cpuset::{Cgroup, Hierarchy};
use crate::rwc::CpusetRwc;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use vsched_consolidate::placement::PlacementCounts;
use vsched_consolidate::tree::Task;
use vsched_consolidate::{Consolidator, Options, Report, Target};

/// The daemon's RWC, shared by the report loop and the consolidations.
pub type SharedRwc = Arc<Mutex<CpusetRwc>>;

/// Locks the shared RWC; a consolidation thread that panicked holding it
/// leaves the cpusets as consistent as any write does.
pub fn lock(rwc: &SharedRwc) -> std::sync::MutexGuard<'_, CpusetRwc> {
    rwc.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One managed cgroup's threads, its descendants' included (a slice holds
/// its services' threads), placed by its cpuset.
pub struct CgroupThreads {
    rwc: SharedRwc,
    /// The group's index in the RWC's list.
    index: usize,
    group: Cgroup,
    /// The name of a cgroup's file of thread ids: `cgroup.threads` (v2)
    /// or `tasks` (v1).
    threads_file: &'static str,
    /// Writes that failed (the daemon's log says which).
    failures: u64,
    /// The set size last applied: a tick that asks for the same does not
    /// read the cgroup's files again (walks, `check`, do).
    applied: Option<usize>,
}

impl CgroupThreads {
    pub fn new(rwc: SharedRwc, index: usize) -> CgroupThreads {
        let group = lock(&rwc).groups()[index].clone();
        let file = match group.hierarchy {
            Hierarchy::V2 => "cgroup.threads",
            Hierarchy::V1 => "tasks",
        };
        CgroupThreads {
            group,
            threads_file: file,
            rwc,
            index,
            failures: 0,
            applied: None,
        }
    }
}

/// Thread ids, one per line, as a cgroup lists them; sorted, as the
/// consolidation's walks are. A thread's /proc directory is reachable by
/// its own id, so each is its own `pid` for the counters' paths.
fn parse_threads(text: &str) -> Vec<Task> {
    let mut tasks: Vec<Task> = text
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .map(|tid| Task { pid: tid, tid })
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    tasks
}

impl Target for CgroupThreads {
    fn tasks(&mut self) -> Option<Vec<Task>> {
        // A cgroup removed under the daemon has nothing left to place; an
        // empty one waits for work.
        self.group
            .read_below(self.threads_file)
            .map(|text| parse_threads(&text))
    }

    fn may_have_new_threads(&mut self) -> bool {
        // The walk is one read of `cgroup.threads` per cgroup: as cheap as
        // any way to tell.
        true
    }

    fn counted(&self, tasks: &[Task]) -> Vec<Task> {
        // The kernel keeps a thread inside its cpuset whatever affinity
        // it asks for: every thread is the set's to serve.
        tasks.to_vec()
    }

    fn max(&self) -> usize {
        lock(&self.rwc).usable_count(self.index)
    }

    fn set_of(&self, n: usize) -> Vec<u32> {
        lock(&self.rwc).active_set(self.index, n)
    }

    fn prefer(&mut self, preferred: Option<&[u32]>) -> bool {
        lock(&self.rwc).prefer(preferred)
    }

    fn apply(&mut self, _tasks: &[Task], n: usize, check: bool) {
        // One write covers every thread, those to come included; RWC's own
        // changes rewrite the set themselves.
        if !check && self.applied == Some(n) {
            return;
        }
        self.applied = Some(n);
        let mut rwc = lock(&self.rwc);
        // set_active takes a set of every usable vCPU for "all of them".
        match rwc.set_active(self.index, Some(n)) {
            Ok(Some(change)) => eprintln!(
                "vsched daemon: consolidation: {} {}/cpuset.cpus: {:?} -> {:?}",
                if rwc.dry_run() {
                    "would write"
                } else {
                    "wrote"
                },
                change.path.display(),
                change.from,
                change.to
            ),
            Ok(None) => {}
            Err(e) => {
                self.failures += 1;
                eprintln!("vsched daemon: consolidation: {}", crate::error_chain(&e));
            }
        }
    }

    fn restore(&mut self) {
        // Back to every vCPU RWC leaves it; the daemon's own restore at
        // exit puts the cpuset back as it was before.
        let _ = lock(&self.rwc).set_active(self.index, None);
    }

    fn counts(&self) -> PlacementCounts {
        PlacementCounts {
            failures: self.failures,
            ..PlacementCounts::default()
        }
    }
}

/// The consolidations under way, one thread per managed cgroup. Dropped
/// without `stop` (an error on the daemon's way out), they stop all the
/// same, each giving its cgroup every usable vCPU back, so that the
/// daemon's RWC can put the cpusets back as they were.
pub struct Consolidations {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Report>>,
}

impl Consolidations {
    /// Starts consolidating every cgroup `rwc` manages; `preferred_file`:
    /// where the kernel publishes its preferred CPUs, if it does.
    pub fn start(
        rwc: &SharedRwc,
        preferred_file: Option<PathBuf>,
    ) -> std::io::Result<Consolidations> {
        let count = lock(rwc).groups().len();
        // Built first, so that a failed start stops those already started.
        let mut running = Consolidations {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for index in 0..count {
            let target = CgroupThreads::new(Arc::clone(rwc), index);
            let options = Options {
                preferred_file: preferred_file.clone(),
            };
            let stop = Arc::clone(&running.stop);
            running.threads.push(
                std::thread::Builder::new()
                    .name(format!("consolidate-{index}"))
                    .spawn(move || {
                        Consolidator::new(target, options).run(|| stop.load(Ordering::SeqCst))
                    })?,
            );
        }
        Ok(running)
    }

    /// Stops every consolidation and returns their reports, in the
    /// cgroups' order (None for one whose thread panicked).
    pub fn stop(mut self) -> Vec<Option<Report>> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Vec<Option<Report>> {
        self.stop.store(true, Ordering::SeqCst);
        self.threads.drain(..).map(|t| t.join().ok()).collect()
    }
}

impl Drop for Consolidations {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroups_thread_list_becomes_sorted_tasks() {
        let tasks = parse_threads("42\n7\n\n42\nx\n 9 \n");
        let tids: Vec<i32> = tasks.iter().map(|t| t.tid).collect();
        assert_eq!(tids, [7, 9, 42]);
        assert!(tasks.iter().all(|t| t.pid == t.tid));
        assert!(parse_threads("").is_empty());
    }
}
