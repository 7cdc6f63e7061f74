//! The program's demand, from its threads' counters (crate::counters):
//! per tick, how long threads that run long per wake-up waited to run (the
//! set must widen at once); per period, the run time and the blocks (the
//! progress the trials compare).

use crate::counters::{Schedstat, ThreadFiles};
use crate::tree::Task;
use std::collections::HashMap;
use std::time::Instant;
use vsched_sched::policy;

/// Counter files kept open at most, two per thread: far below the usual
/// 1024 descriptors vsched may hold (a program with more threads than
/// this has the rest read by path, each reading).
const MAX_KEPT_FILES: usize = 512;

/// Reads a thread's counter through `files` with `read(files, keep)`,
/// keeping the file open while fewer than MAX_KEPT_FILES are, and keeps
/// `kept` (the files open over every thread) counting.
fn read_kept<T>(
    kept: &mut usize,
    files: &mut ThreadFiles,
    read: impl FnOnce(&mut ThreadFiles, bool) -> Option<T>,
) -> Option<T> {
    let before = files.open_count();
    let value = read(files, *kept < MAX_KEPT_FILES);
    *kept = *kept + files.open_count() - before;
    value
}

/// One thread's last counters and how it runs.
#[derive(Debug, Default)]
struct Thread {
    files: ThreadFiles,
    /// The last reading; None until the first (which only sets it).
    last: Option<Schedstat>,
    /// Blocks at the last period (None until the first period saw it).
    blocks: Option<u64>,
    /// Mean run per slice, smoothed over ticks (1/4 new: a few ticks'
    /// memory, as the scheduler's per-task average).
    avg_run_ns: u64,
    /// Run since it was last given a CPU anew.
    run_this_slice_ns: u64,
    slices_seen: u64,
    /// Run since the last period.
    period_run_ns: u64,
}

/// A tick's demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tick {
    pub run_ns: u64,
    pub wait_ns: u64,
    /// Waiting of the threads that run long per wake-up
    /// (vsched_sched::policy::long_runner): CPU-bound work that wants a
    /// vCPU of its own.
    pub long_runner_wait_ns: u64,
    /// Threads read for the first time: their run time counts from the
    /// next reading.
    pub first_readings: u32,
    /// Threads read for the first time whose whole time on a CPU or
    /// waiting for one fits in the time since the last reading (born
    /// since, or as good as new): counted from zero, at once.
    pub newborn: u32,
}

/// A period's demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Period {
    pub busy_ns: u64,
    /// The threads' waiting to run, summed (each thread's run delay).
    pub wait_ns: u64,
    /// The threads' blocks: each ends in a wake-up, the program's progress.
    pub progress: u64,
    /// Threads that run long per slice (policy::long_runner) and ran at
    /// least half the period: each gains from a vCPU of its own.
    pub long_runners: u32,
}

/// What a period does with the threads' blocks (`Demand::period`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// Read them: the progress since the last period.
    Read,
    /// None of the threads ran since the last period, so none blocked:
    /// no progress, nothing read, the baselines kept.
    Unchanged,
    /// Not wanted: nothing read, and every baseline forgotten (the next
    /// period that reads them reads 0, the one after a whole period's).
    Forget,
}

/// The demand of a changing set of threads.
#[derive(Debug, Default)]
pub struct Demand {
    threads: HashMap<Task, Thread>,
    busy_ns: u64,
    wait_ns: u64,
    /// Counter files the threads hold open.
    kept_files: usize,
    /// When the last tick read the counters (None before the first, whose
    /// threads are all only baselines).
    last_tick: Option<Instant>,
}

impl Demand {
    /// Reads the counters of `tasks` (every thread the program has now, in
    /// order, as crate::tree::tasks gives them)
    /// and returns what changed since the last tick. A thread seen for the
    /// first time only sets its baseline, unless it is newborn (`Tick`);
    /// one gone is forgotten.
    pub fn tick(&mut self, tasks: &[Task]) -> Tick {
        let mut tick = Tick::default();
        let since_ns = self
            .last_tick
            .replace(Instant::now())
            .map(|t| t.elapsed().as_nanos() as u64);
        let kept = &mut self.kept_files;
        self.threads.retain(|t, th| {
            let alive = tasks.binary_search(t).is_ok();
            if !alive {
                *kept -= th.files.open_count();
            }
            alive
        });
        for &task in tasks {
            let th = self.threads.entry(task).or_default();
            let read = read_kept(&mut self.kept_files, &mut th.files, |f, keep| {
                f.schedstat(task, keep)
            });
            let Some(now) = read else {
                continue;
            };
            let last = match th.last.replace(now) {
                Some(last) => last,
                // Born since the last reading: all it ran and waited is
                // new, and a CPU-bound thread that starts where the set
                // is too narrow is seen waiting at once, not a reading
                // later.
                None if since_ns.is_some_and(|s| now.run_ns + now.wait_ns <= s) => {
                    tick.newborn += 1;
                    Schedstat::default()
                }
                None => {
                    tick.first_readings += 1;
                    continue;
                }
            };
            let run = now.run_ns.saturating_sub(last.run_ns);
            let wait = now.wait_ns.saturating_sub(last.wait_ns);
            let slices = now.slices.saturating_sub(last.slices);
            if let Some(per_slice) = run.checked_div(slices) {
                th.avg_run_ns = (th.avg_run_ns * 3 + per_slice) / 4;
                th.run_this_slice_ns = per_slice;
                th.slices_seen += slices;
            } else {
                th.run_this_slice_ns += run;
            }
            th.period_run_ns += run;
            tick.run_ns += run;
            tick.wait_ns += wait;
            let wakes = u32::try_from(th.slices_seen).unwrap_or(u32::MAX);
            if wait > 0 && policy::long_runner(th.avg_run_ns, th.run_this_slice_ns, wakes) {
                tick.long_runner_wait_ns += wait;
            }
        }
        self.busy_ns += tick.run_ns;
        self.wait_ns += tick.wait_ns;
        tick
    }

    /// The period's demand since the last call: the run time the ticks
    /// read, the blocks of every thread already known at the last period
    /// (a new one sets its baseline), and the long runners among them.
    /// `period_ns`: the period's length. `blocks`: whether to read them
    /// (the costliest file, `status`).
    pub fn period(&mut self, period_ns: u64, blocks: Blocks) -> Period {
        let mut progress = 0;
        let mut long_runners = 0;
        for (task, th) in self.threads.iter_mut() {
            let ran = std::mem::take(&mut th.period_run_ns);
            let wakes = u32::try_from(th.slices_seen).unwrap_or(u32::MAX);
            if ran >= period_ns / 2
                && policy::long_runner(th.avg_run_ns, th.run_this_slice_ns, wakes)
            {
                long_runners += 1;
            }
            match blocks {
                Blocks::Read => {}
                Blocks::Unchanged => continue,
                Blocks::Forget => {
                    th.blocks = None;
                    continue;
                }
            }
            let read = read_kept(&mut self.kept_files, &mut th.files, |f, keep| {
                f.blocks(*task, keep)
            });
            let Some(now) = read else {
                continue;
            };
            if let Some(before) = th.blocks {
                progress += now.saturating_sub(before);
            }
            th.blocks = Some(now);
        }
        Period {
            busy_ns: std::mem::take(&mut self.busy_ns),
            wait_ns: std::mem::take(&mut self.wait_ns),
            progress,
            long_runners,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_counted_from_its_second_reading_and_forgotten_when_gone() {
        let me = Task {
            pid: std::process::id() as i32,
            tid: vsched_os::sched::gettid(),
        };
        let mut d = Demand::default();
        let first = Tick {
            first_readings: 1,
            ..Tick::default()
        };
        assert_eq!(d.tick(&[me]), first, "a baseline only");
        assert_eq!(d.period(100_000_000, Blocks::Read).progress, 0);
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        let tick = d.tick(&[me]);
        assert!(tick.run_ns > 0, "{tick:?}");
        let p = d.period(100_000_000, Blocks::Read);
        assert_eq!(p.busy_ns, tick.run_ns);
        assert!(p.progress > 0, "{p:?}");
        // Without progress: no blocks read, and the baselines forgotten.
        std::thread::sleep(std::time::Duration::from_millis(1));
        d.tick(&[me]);
        assert_eq!(d.period(100_000_000, Blocks::Forget).progress, 0);
        std::thread::sleep(std::time::Duration::from_millis(1));
        d.tick(&[me]);
        assert_eq!(
            d.period(100_000_000, Blocks::Read).progress,
            0,
            "a new baseline"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
        d.tick(&[me]);
        assert!(d.period(100_000_000, Blocks::Read).progress > 0);
        // Unchanged: nothing read, the baseline kept for the next reading.
        std::thread::sleep(std::time::Duration::from_millis(1));
        d.tick(&[me]);
        assert_eq!(d.period(100_000_000, Blocks::Unchanged).progress, 0);
        std::thread::sleep(std::time::Duration::from_millis(1));
        d.tick(&[me]);
        assert!(
            d.period(100_000_000, Blocks::Read).progress >= 2,
            "both sleeps' blocks, from the kept baseline"
        );
        assert_eq!(d.kept_files, 2, "schedstat and status kept open");
        assert_eq!(d.tick(&[]), Tick::default());
        assert!(d.threads.is_empty());
        assert_eq!(d.kept_files, 0, "a forgotten thread's files are closed");
    }

    /// Runs this thread for `ms` of its own CPU time (other tests may
    /// share the CPUs).
    fn spin(ms: u64) {
        let start = vsched_os::clock::thread_cpu_ns();
        while vsched_os::clock::thread_cpu_ns() - start < ms * 1_000_000 {
            std::hint::spin_loop();
        }
    }

    /// A thread born since the last reading is counted from zero at its
    /// first (what it ran and waited is all new); one that ran longer
    /// than the time since is only a baseline, as at the first tick.
    #[test]
    fn a_thread_born_since_the_last_reading_counts_at_once() {
        let me = Task {
            pid: std::process::id() as i32,
            tid: vsched_os::sched::gettid(),
        };
        // This thread has now run 30 ms, more than the time to come
        // before the next reading (its newborn's 5 ms, unless the CPUs
        // are far busier than a test run makes them).
        spin(30);
        let mut d = Demand::default();
        d.tick(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        let (spun_tx, spun_rx) = std::sync::mpsc::channel();
        let born = std::thread::spawn(move || {
            tx.send(vsched_os::sched::gettid()).unwrap();
            spin(5);
            spun_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(100));
        });
        let newborn = Task {
            pid: me.pid,
            tid: rx.recv().unwrap(),
        };
        spun_rx.recv().unwrap();
        let mut both = vec![me, newborn];
        both.sort_unstable();
        let t = d.tick(&both);
        born.join().unwrap();
        assert_eq!((t.newborn, t.first_readings), (1, 1), "{t:?}");
        assert!(t.run_ns >= 5_000_000, "the newborn's 5 ms spin: {t:?}");
    }
}
