//! The loop: every tick, the target's threads and their demand; every
//! period, a step of the trials (vsched_sched::policy::Trials); the set
//! applied to the threads; at the end, everything put back and a report.
//! What the threads are and how they get their set is the target's
//! (crate::target).

use crate::demand::Demand;
use crate::placement::PlacementCounts;
use crate::target::Target;
use crate::tree;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vsched_sched::policy::{self, TrialStep, Trials};

/// How often the threads' counters are read while the set can widen:
/// 10 ms, so that CPU-bound threads that must wait widen the set within a
/// tick or two (the scheduler's form reacts at two slice ends, 6-8 ms).
/// At the widest set nothing can widen at once, and new threads inherit
/// the widest set: the threads are walked and read once a period only, as
/// the trials need, and CPU-bound work that needs every vCPU shares them
/// with a tenth of the readings.
pub const TICK: Duration = Duration::from_millis(10);

/// Ticks between walks of the process tree and checks of every thread's
/// affinity (new threads inherit the set of the thread that made them, so
/// a late walk costs nothing but a late count): 50 ms.
const TICKS_PER_WALK: u32 = 5;

/// Periods between walks while the set is settled at its widest
/// (`Consolidator::settled_wide`): half a second, within which a new
/// thread, which inherits the widest set, is only not yet counted.
const SETTLED_PERIODS_PER_WALK: u32 = 5;

/// A long runner's waiting, as a share of the time since the last
/// reading, that widens the set at once: half (5 ms of a 10 ms tick), as a
/// thread queued at two slice ends in a row in the scheduler's form.
const WIDEN_WAIT_PER_TICK_DIVISOR: u64 = 2;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Where the kernel publishes its preferred CPUs
    /// (crate::preferred::KERNEL_FILE), read at the start and every
    /// period: the preferred ones join the set first. None: no preference.
    pub preferred_file: Option<PathBuf>,
}

/// Counts of what the consolidation did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    /// Readings of the threads' counters (each tick while the set can
    /// widen, each period at the widest).
    pub ticks: u64,
    pub periods: u64,
    /// Sum over periods of the active set's size (over `periods`: the mean).
    pub active_vcpu_periods: u64,
    pub trials_narrowed: u64,
    pub trials_widened: u64,
    pub trials_undone: u64,
    /// Widenings at once for long runners that waited.
    pub widened_at_once: u64,
    /// Periods settled at the widest set (a long runner per vCPU): only
    /// run times read.
    pub settled_periods: u64,
    /// Changes of the kernel's preferred CPUs that moved the active set
    /// (a narrowed set moved onto the newly preferred vCPUs at once).
    pub preference_changes: u64,
}

/// A change of the active set, for a plot over time.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    /// Seconds since the consolidation began.
    pub t_s: f64,
    pub active: usize,
}

/// What `vsched run --consolidate` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub cpus: Vec<u32>,
    /// The kernel's preferred CPUs at the end, which joined the set
    /// first; null where the kernel publishes no preference.
    pub preferred_cpus: Option<Vec<u32>>,
    pub duration_s: f64,
    /// Mean active vCPUs over the periods.
    pub mean_active: f64,
    pub counts: Counts,
    pub placement: PlacementCounts,
    /// CPU time of the consolidation's own thread.
    pub own_cpu_s: f64,
    /// CPU time of every thread of vsched's process (the consolidation's,
    /// the one that waits for the program, any other `vsched run` runs):
    /// what the program's vCPUs gave up to vsched.
    pub vsched_cpu_s: f64,
    pub active_over_time: Vec<Point>,
}

impl Report {
    /// The active set and the trials in words, for the one-line summaries
    /// of `vsched run --consolidate` and the daemon.
    pub fn trials_summary(&self) -> String {
        let c = &self.counts;
        format!(
            "{:.2} of {} vCPUs active on average over {:.1} s; trials: {} narrowed, {} widened, {} undone; {} widened at once",
            self.mean_active,
            self.cpus.len(),
            self.duration_s,
            c.trials_narrowed,
            c.trials_widened,
            c.trials_undone,
            c.widened_at_once
        )
    }
}

pub struct Consolidator<T: Target> {
    preferred_file: Option<PathBuf>,
    /// The preferred CPUs last read from `preferred_file`.
    preferred: Option<Vec<u32>>,
    target: T,
    demand: Demand,
    trials: Trials,
    active: usize,
    counts: Counts,
    timeline: Vec<Point>,
    began: Instant,
    /// When the threads' counters were last read.
    last_reading: Instant,
    /// The target's widest set at the last walk (`follow_max`).
    last_max: usize,
    /// Long runners at the last period (crate::demand::Period).
    long_runners: u32,
    /// Periods since the last walk, while settled at the widest set.
    settled_periods: u32,
}

impl<T: Target> Consolidator<T> {
    /// Consolidates `target`'s threads, starting on every vCPU it may use.
    pub fn new(mut target: T, opts: Options) -> Consolidator<T> {
        let preferred = opts
            .preferred_file
            .as_deref()
            .and_then(crate::preferred::read);
        target.prefer(preferred.as_deref());
        let active = target.max();
        Consolidator {
            target,
            preferred_file: opts.preferred_file,
            preferred,
            demand: Demand::default(),
            trials: Trials::new(),
            active,
            counts: Counts::default(),
            timeline: vec![Point { t_s: 0.0, active }],
            began: Instant::now(),
            last_reading: Instant::now(),
            last_max: active,
            long_runners: 0,
            settled_periods: 0,
        }
    }

    /// Runs until `stop` says so or the target has no threads left, then
    /// gives every thread back and reports.
    pub fn run(mut self, stop: impl Fn() -> bool) -> Report {
        let cpu0 = vsched_os::clock::thread_cpu_ns();
        let period = Duration::from_nanos(policy::period_ns());
        let mut next_tick = Instant::now();
        let mut next_period = next_tick + period;
        let mut tasks = Vec::new();
        // Ticks of TICK while the set can widen; a walk every TICKS_PER_WALK.
        let mut tick_no: u64 = 0;
        while !stop() {
            let walk = if self.can_widen() {
                tick_no % u64::from(TICKS_PER_WALK) == 0
            } else {
                !self.settled_wide() || self.settled_periods % SETTLED_PERIODS_PER_WALK == 0
            };
            if walk {
                let Some(now) = self.target.tasks() else {
                    break;
                };
                tasks = now;
                self.follow_max();
            }
            self.tick(&tasks, walk);
            let now = Instant::now();
            if now >= next_period {
                self.period(&tasks, now);
                next_period += period;
                if next_period < now {
                    next_period = now + period;
                }
            }
            if self.can_widen() {
                tick_no += 1;
                next_tick += TICK;
            } else {
                // At the widest set, a walk and a reading each period:
                // what the trials need.
                next_tick = next_period;
            }
            match next_tick.checked_duration_since(Instant::now()) {
                Some(d) => std::thread::sleep(d),
                // Late (the machine is loaded): no burst of catching up.
                None => next_tick = Instant::now(),
            }
        }
        self.target.restore();
        let own = vsched_os::clock::thread_cpu_ns().saturating_sub(cpu0);
        self.report(own)
    }

    fn can_widen(&self) -> bool {
        self.active < self.last_max
    }

    /// Keeps the set within what the target allows now (a cgroup's
    /// usable vCPUs change as RWC hides and gives back vCPUs): a set
    /// wider than that shrinks, and a set at its widest grows with it.
    /// Either change voids any trial's comparison.
    fn follow_max(&mut self) {
        let max = self.target.max().max(1);
        let was_widest = self.active == self.last_max;
        self.last_max = max;
        if self.active > max || (was_widest && self.active < max) {
            self.active = max;
            self.trials.upset();
            self.moved();
        }
    }

    /// At the widest set with a long runner for every vCPU and no trial
    /// under way, nothing can move: no wider set exists, and no narrowing
    /// may start below the long runners. Each period then reads only the
    /// run times (whether that still holds), walks every
    /// SETTLED_PERIODS_PER_WALK periods, and reads no blocks: CPU-bound
    /// work that needs every vCPU gives vsched the least.
    fn settled_wide(&self) -> bool {
        !self.can_widen() && !self.trials.on_trial() && self.long_runners as usize >= self.active
    }

    fn tick(&mut self, tasks: &[tree::Task], walked: bool) {
        self.counts.ticks += 1;
        let t = self.demand.tick(&self.target.counted(tasks));
        // The first reading after a narrowing covers up to a walk's time.
        let since_ns = std::mem::replace(&mut self.last_reading, Instant::now())
            .elapsed()
            .as_nanos() as u64;
        let since_ns = since_ns.max(TICK.as_nanos() as u64);
        if t.long_runner_wait_ns >= since_ns / WIDEN_WAIT_PER_TICK_DIVISOR && self.can_widen() {
            self.active += 1;
            self.counts.widened_at_once += 1;
            let now_ns = self.began.elapsed().as_nanos() as u64;
            self.trials.overruled(now_ns, policy::period_ns());
            self.moved();
        }
        self.apply(tasks, walked);
    }

    /// Gives the threads the active set.
    fn apply(&mut self, tasks: &[tree::Task], check: bool) {
        self.target.apply(tasks, self.active, check);
    }

    fn period(&mut self, tasks: &[tree::Task], now: Instant) {
        if self.follow_preference() {
            // The set's vCPUs changed under any trial: its comparison is
            // void.
            self.trials.upset();
            self.apply(tasks, false);
        }
        let settled = self.settled_wide();
        let p = self.demand.period(policy::period_ns(), !settled);
        self.long_runners = p.long_runners;
        self.counts.periods += 1;
        self.counts.active_vcpu_periods += self.active as u64;
        if settled {
            self.counts.settled_periods += 1;
            self.settled_periods += 1;
            // No progress was read: the trials start again from steady
            // periods once it is.
            self.trials.upset();
            return;
        }
        self.settled_periods = 0;
        let now_ns = now.duration_since(self.began).as_nanos() as u64;
        let can_widen = self.can_widen();
        let step = self.trials.period(
            p.progress,
            p.busy_ns,
            self.active as u32,
            can_widen,
            now_ns,
            policy::period_ns(),
        );
        match step {
            // Never below the threads that each keep a vCPU busy: narrowed,
            // two CPU-bound threads on two vCPUs (which the emulator's
            // overhead makes read 80-90% busy, "idling") waited on one,
            // were widened at once, and took 1.2x their time.
            TrialStep::Narrow if self.active as u32 > p.long_runners.max(1) => {
                self.active -= 1;
                self.trials.started(true);
                self.counts.trials_narrowed += 1;
            }
            TrialStep::Widen if can_widen => {
                self.active += 1;
                self.trials.started(false);
                self.counts.trials_widened += 1;
            }
            TrialStep::Undo => {
                if self.trials.narrowed() {
                    self.active += 1;
                } else {
                    self.active -= 1;
                }
                self.active = self.active.clamp(1, self.last_max);
                self.counts.trials_undone += 1;
            }
            _ => return,
        }
        self.moved();
        // At once, not at the next reading (at the widest set, a walk away).
        self.apply(tasks, false);
    }

    /// Re-reads the kernel's preferred CPUs; whether the change moves the
    /// active set (a new order of joining that leaves the set as it is,
    /// at the widest for one, moves nothing). As the scheduler's
    /// vs_swap_for_preference, a narrowed set then moves at once, not at
    /// the next trial, which a steady set never holds.
    fn follow_preference(&mut self) -> bool {
        let Some(file) = &self.preferred_file else {
            return false;
        };
        let now = crate::preferred::read(file);
        if now == self.preferred {
            return false;
        }
        self.preferred = now;
        let before = self.target.set_of(self.active);
        if !self.target.prefer(self.preferred.as_deref())
            || self.target.set_of(self.active) == before
        {
            return false;
        }
        self.counts.preference_changes += 1;
        true
    }

    fn moved(&mut self) {
        self.timeline.push(Point {
            t_s: self.began.elapsed().as_secs_f64(),
            active: self.active,
        });
    }

    fn report(&self, own_cpu_ns: u64) -> Report {
        Report {
            schema: "vsched.consolidate/v1",
            cpus: self.target.set_of(self.target.max()),
            preferred_cpus: self.preferred.clone(),
            duration_s: self.began.elapsed().as_secs_f64(),
            mean_active: if self.counts.periods == 0 {
                self.active as f64
            } else {
                self.counts.active_vcpu_periods as f64 / self.counts.periods as f64
            },
            counts: self.counts,
            placement: self.target.counts(),
            own_cpu_s: own_cpu_ns as f64 / 1e9,
            vsched_cpu_s: vsched_os::clock::process_cpu_ns() as f64 / 1e9,
            active_over_time: self.timeline.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Task;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A target whose widest set the test changes, as RWC changes a
    /// cgroup's usable vCPUs.
    struct Shrinking {
        max: Rc<Cell<usize>>,
    }

    impl Target for Shrinking {
        fn tasks(&mut self) -> Option<Vec<Task>> {
            Some(Vec::new())
        }
        fn counted(&self, tasks: &[Task]) -> Vec<Task> {
            tasks.to_vec()
        }
        fn max(&self) -> usize {
            self.max.get()
        }
        fn set_of(&self, n: usize) -> Vec<u32> {
            (0..n.min(self.max.get()) as u32).collect()
        }
        fn prefer(&mut self, _preferred: Option<&[u32]>) -> bool {
            false
        }
        fn apply(&mut self, _tasks: &[Task], _n: usize, _check: bool) {}
        fn restore(&mut self) {}
        fn counts(&self) -> PlacementCounts {
            PlacementCounts::default()
        }
    }

    /// A set wider than the target allows shrinks; a set at its widest
    /// follows the target back up; a narrowed one stays narrowed.
    #[test]
    fn the_set_follows_the_targets_widest_set() {
        let max = Rc::new(Cell::new(4));
        let mut c = Consolidator::new(Shrinking { max: max.clone() }, Options::default());
        assert_eq!(c.active, 4);
        max.set(3);
        c.follow_max();
        assert_eq!(c.active, 3, "shrunk with the target");
        max.set(4);
        c.follow_max();
        assert_eq!(c.active, 4, "at its widest, it grows back");
        c.active = 2;
        max.set(3);
        c.follow_max();
        max.set(4);
        c.follow_max();
        assert_eq!(c.active, 2, "a narrowed set is the trials' to widen");
        assert!(c.can_widen());
    }
}
