//! The loop: every tick, the target's threads and their demand; every
//! period, a step of the trials (vsched_sched::policy::Trials); the set
//! applied to the threads; at the end, everything put back and a report.
//! What the threads are and how they get their set is the target's
//! (crate::target).

use crate::demand::{Blocks, Demand, Period};
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

/// Ticks between full walks, every thread's affinity checked too (new
/// threads inherit the set of the thread that made them): 50 ms. A
/// narrowed set also walks at every tick at which the target may have new
/// threads (`Target::may_have_new_threads`): CPU-bound threads that start
/// there wait until it widens (a burst of two waited 60-130 ms for the
/// set to widen with walks every 50 ms alone, 5-28 ms with both,
/// bench/consolidate_reaction.py, 2026-12-08).
const TICKS_PER_WALK: u32 = 5;

/// How often a quiet set (`Consolidator::quiet`) is read and walked:
/// at the walks' pace while ticking (50 ms), so that threads that start
/// in it are found no later than in a set that ticks. (Each period would
/// cost less, 3.5% of an emulated vCPU against 5.8% for four sleeping
/// processes, and in five bursts each no slower widening was measured:
/// bench/consolidate_reaction.py, 2026-12-07; but a thread could then be
/// found up to 50 ms later.)
const QUIET_EVERY: Duration = TICK.saturating_mul(TICKS_PER_WALK);

/// Periods between walks while the set is settled at its widest
/// (`Consolidator::settled_wide`): half a second, within which a new
/// thread, which inherits the widest set, is only not yet counted.
const SETTLED_PERIODS_PER_WALK: u32 = 5;

/// How often a target with no threads at all (a managed cgroup that is
/// empty) is walked, at its widest set: a program that starts there runs
/// on every vCPU the target allows, as it would without vsched, so a late
/// walk only narrows it later; and the daemon's shutdown waits at most
/// this long for the loop. Under the emulator each wake-up of the loop
/// costs its vCPU about 0.9 ms (a guest on 7.2.13, 2026-12-07: an empty
/// cgroup's loop at 100 wake-ups a second took 8.6% of a vCPU), so an
/// empty group is walked four times a second rather than every tick.
const EMPTY_WALK_EVERY: Duration = Duration::from_millis(250);

/// A saturated set is tried one vCPU wider only while its threads' waits
/// to run add up to at least this share of the period: half (one thread
/// waiting half the time). A set kept exactly busy by threads that hand
/// the vCPU to each other has nothing to gain: a 2-thread barrier alone
/// on a narrowed cgroup read saturated, was tried wider every second or
/// two and undone each time, and each failure doubled the wait before
/// the next narrowing (the daemon's form narrowed again 0.9-7.7 s after
/// a burst of CPU-bound work, bench/gleaner_trace.py, 2026-12-07). Its
/// hand-offs wait microseconds each; threads that need another vCPU
/// wait whole slices.
const WIDEN_TRIAL_WAIT_DIVISOR: u64 = 2;

/// Whether a period whose trials step asks for a wider set has threads
/// waiting to run enough to try it (WIDEN_TRIAL_WAIT_DIVISOR).
fn waits_enough_to_widen(p: &Period, period_ns: u64) -> bool {
    p.wait_ns >= period_ns / WIDEN_TRIAL_WAIT_DIVISOR
}

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
    /// Readings each period instead of each tick while the set could
    /// widen, because none of the threads had run since the last reading
    /// (`Consolidator::quiet`).
    pub quiet_readings: u64,
    /// Walks that found the target without a thread (a managed cgroup
    /// that is empty): the set at its widest, nothing read.
    pub empty_walks: u64,
    /// Times the target, after it had threads, was found without any:
    /// each gave the set its widest at once (`empty_walks` also counts
    /// the walks of a target empty from the start).
    pub emptied: u64,
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
    /// CLOCK_BOOTTIME when the consolidation began, in seconds (what the
    /// first field of /proc/uptime reads): `active_over_time` on the
    /// machine's own clock, to line it up with events outside vsched.
    pub began_boottime_s: f64,
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
            "{:.2} of {} vCPUs active on average over {:.1} s; trials: {} narrowed, {} widened, {} undone; {} widened at once; {} time(s) empty",
            self.mean_active,
            self.cpus.len(),
            self.duration_s,
            c.trials_narrowed,
            c.trials_widened,
            c.trials_undone,
            c.widened_at_once,
            c.emptied
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
    /// `began` on CLOCK_BOOTTIME.
    began_boottime_ns: u64,
    /// When the threads' counters were last read.
    last_reading: Instant,
    /// The target's widest set at the last walk (`follow_max`).
    last_max: usize,
    /// Long runners at the last period (crate::demand::Period).
    long_runners: u32,
    /// Periods since the last walk, while settled at the widest set.
    settled_periods: u32,
    /// The last reading found that none of the threads, each read before,
    /// had run since (`quiet`).
    nothing_ran: bool,
    /// Some thread ran, or was read for the first time, since the last
    /// period: only then can its blocks have changed.
    ran_since_period: bool,
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
            began_boottime_ns: vsched_os::clock::clock_ns(libc::CLOCK_BOOTTIME),
            last_reading: Instant::now(),
            last_max: active,
            long_runners: 0,
            settled_periods: 0,
            nothing_ran: false,
            ran_since_period: false,
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
        // The last walk found no thread: only walks, EMPTY_WALK_EVERY.
        let mut empty = false;
        let mut had_threads = false;
        while !stop() {
            // `check`: a full walk, every thread's set checked too.
            let check = if empty || self.quiet() {
                true
            } else if self.can_widen() {
                tick_no % u64::from(TICKS_PER_WALK) == 0
            } else {
                !self.settled_wide() || self.settled_periods % SETTLED_PERIODS_PER_WALK == 0
            };
            // A narrowed set looks for new threads each tick: a CPU-bound
            // thread that starts there waits for it.
            let walk = check || (self.can_widen() && self.target.may_have_new_threads());
            if walk {
                let Some(now) = self.target.tasks() else {
                    break;
                };
                tasks = now;
                self.follow_max();
                if tasks.is_empty() {
                    if !empty && had_threads {
                        self.counts.emptied += 1;
                    }
                    self.rest_while_empty(!empty);
                    empty = true;
                    std::thread::sleep(EMPTY_WALK_EVERY);
                    continue;
                }
                had_threads = true;
                if empty {
                    // Threads came: their first reading is now, and a
                    // period's demand counts from it.
                    empty = false;
                    next_tick = Instant::now();
                    next_period = next_tick + period;
                }
            }
            self.tick(&tasks, check);
            let now = Instant::now();
            if now >= next_period {
                self.period(&tasks, now);
                next_period += period;
                if next_period < now {
                    next_period = now + period;
                }
            }
            if self.quiet() {
                self.counts.quiet_readings += 1;
                next_tick = Instant::now() + QUIET_EVERY;
            } else if self.can_widen() {
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

    /// A narrowed set whose threads did not run at all since the last
    /// reading, no trial under way: nothing to widen for until one runs,
    /// so the threads are read (and walked) every QUIET_EVERY instead of
    /// each tick. Under the emulator each reading's wake-up costs the vCPU
    /// about 0.9 ms (EMPTY_WALK_EVERY), and a cgroup of sleeping services
    /// read every tick took 11-13% of a vCPU (4 sleeping processes, a
    /// guest on 7.2.13, 2026-12-07). The price: a thread that wakes in a
    /// quiet set and runs long is seen up to QUIET_EVERY later.
    fn quiet(&self) -> bool {
        self.nothing_ran && self.can_widen() && !self.trials.on_trial()
    }

    /// The target has no thread (a managed cgroup is empty): the set goes
    /// back to its widest, where a program that starts there runs as it
    /// would without vsched, and the trials start again from steady
    /// periods once threads come. `entering`: the first such walk.
    fn rest_while_empty(&mut self, entering: bool) {
        self.counts.empty_walks += 1;
        if !entering {
            return;
        }
        // Forgets the threads that left, closing their files.
        self.demand.tick(&[]);
        self.trials.upset();
        self.nothing_ran = false;
        if self.active != self.last_max {
            self.active = self.last_max;
            self.moved();
        }
        self.apply(&[], false);
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
        self.nothing_ran = t.run_ns == 0 && t.first_readings == 0 && t.newborn == 0;
        self.ran_since_period |= !self.nothing_ran;
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
        let blocks = if settled {
            Blocks::Forget
        } else if std::mem::take(&mut self.ran_since_period) {
            Blocks::Read
        } else {
            // A quiet set's periods read nothing more than its ticks did.
            Blocks::Unchanged
        };
        let p = self.demand.period(policy::period_ns(), blocks);
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
            TrialStep::Widen if can_widen && waits_enough_to_widen(&p, policy::period_ns()) => {
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
            began_boottime_s: self.began_boottime_ns as f64 / 1e9,
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
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    /// A fake target: fixed threads, a widest set the test may change (as
    /// RWC changes a cgroup's usable vCPUs), and a count of its walks.
    struct Fake {
        tasks: Rc<RefCell<Vec<Task>>>,
        max: Rc<Cell<usize>>,
        walks: Rc<Cell<u32>>,
    }

    impl Fake {
        fn new(tasks: Vec<Task>, max: usize) -> Fake {
            Fake {
                tasks: Rc::new(RefCell::new(tasks)),
                max: Rc::new(Cell::new(max)),
                walks: Rc::new(Cell::new(0)),
            }
        }
    }

    impl Target for Fake {
        fn tasks(&mut self) -> Option<Vec<Task>> {
            self.walks.set(self.walks.get() + 1);
            Some(self.tasks.borrow().clone())
        }
        fn may_have_new_threads(&mut self) -> bool {
            true
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
        let target = Fake::new(Vec::new(), 4);
        let max = target.max.clone();
        let mut c = Consolidator::new(target, Options::default());
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

    /// Runs a consolidation of `tasks`, narrowed to one of two vCPUs, for
    /// `ms` milliseconds; its report and how many walks it made.
    fn run_narrowed(tasks: Vec<Task>, ms: u64) -> (Report, u32) {
        let target = Fake::new(tasks, 2);
        let walks = target.walks.clone();
        let mut c = Consolidator::new(target, Options::default());
        c.active = 1;
        let end = Instant::now() + Duration::from_millis(ms);
        let report = c.run(|| Instant::now() >= end);
        (report, walks.get())
    }

    /// Regression: an empty cgroup under the daemon's consolidation was
    /// narrowed and then read every 10 ms, about 9% of an emulated vCPU
    /// for nothing to place. Empty, the set goes back to its widest and is
    /// only walked, every EMPTY_WALK_EVERY.
    #[test]
    fn an_empty_target_is_only_walked_and_given_its_widest_set() {
        let (report, walks) = run_narrowed(Vec::new(), 600);
        assert_eq!(report.counts.ticks, 0, "nothing read: {report:?}");
        assert_eq!(u64::from(walks), report.counts.empty_walks);
        assert_eq!(report.counts.emptied, 0, "never had threads: {report:?}");
        // 600 ms at one walk per 250 ms: 3, one more for a slow sleep; at
        // the tick's pace it would be 12.
        assert!((2..=4).contains(&walks), "{walks} walks");
        let last = report.active_over_time.last().unwrap();
        assert_eq!(last.active, 2, "back to the widest set: {report:?}");
    }

    /// A target whose only thread leaves: counted as emptied once (what
    /// tells a test's race, a cgroup left empty for a moment, from a
    /// widening the test waits for), and back at its widest set.
    #[test]
    fn a_target_whose_threads_leave_is_counted_as_emptied_once() {
        let me = Task {
            pid: std::process::id() as i32,
            tid: vsched_os::sched::gettid(),
        };
        let target = Fake::new(vec![me], 2);
        let tasks = target.tasks.clone();
        let mut c = Consolidator::new(target, Options::default());
        c.active = 1;
        let start = Instant::now();
        let report = c.run(|| {
            if start.elapsed() >= Duration::from_millis(200) {
                tasks.borrow_mut().clear();
            }
            start.elapsed() >= Duration::from_millis(700)
        });
        assert_eq!(report.counts.emptied, 1, "{:?}", report.counts);
        assert!(report.counts.empty_walks >= 1, "{:?}", report.counts);
        let last = report.active_over_time.last().unwrap();
        assert_eq!(last.active, 2, "back to the widest set: {report:?}");
    }

    /// A thread that sleeps throughout: after its first two readings the
    /// narrowed set is read every QUIET_EVERY, not each tick; a thread that
    /// runs throughout keeps the readings at the tick's pace (it may also
    /// widen the set, where readings are per period anyway).
    #[test]
    fn a_narrowed_set_whose_threads_do_not_run_is_read_less_often() {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sleeper = std::thread::spawn(move || {
            tx.send(vsched_os::sched::gettid()).unwrap();
            std::thread::sleep(Duration::from_millis(900));
        });
        let spin_stop = stop.clone();
        let (tx2, rx2) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            tx2.send(vsched_os::sched::gettid()).unwrap();
            while !spin_stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let pid = std::process::id() as i32;
        let task = |tid| Task { pid, tid };
        let (quiet, _) = run_narrowed(vec![task(rx.recv().unwrap())], 600);
        let (busy, _) = run_narrowed(vec![task(rx2.recv().unwrap())], 600);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sleeper.join().unwrap();
        spinner.join().unwrap();
        let q = quiet.counts;
        assert!(q.quiet_readings >= 1, "{q:?}");
        // Two readings before it is known not to run, then only quiet ones.
        assert!(q.ticks <= q.quiet_readings + 2, "{q:?}");
        // The spinner may miss a tick or two where the other tests keep
        // the CPUs busy (each miss a quiet reading), never most.
        let b = busy.counts;
        assert!(b.quiet_readings * 4 <= b.ticks, "{b:?}");
        assert!(b.ticks > 2 * q.ticks, "{b:?} against {q:?}");
    }

    /// Regression: a barrier alone on its narrowed set (saturated, its
    /// hand-offs waiting microseconds) was tried wider again and again;
    /// threads that wait whole slices still try a wider set.
    #[test]
    fn a_saturated_set_is_tried_wider_only_when_its_threads_wait() {
        let period = 100_000_000;
        let saturated = |wait_ns| Period {
            busy_ns: period,
            wait_ns,
            progress: 1000,
            long_runners: 0,
        };
        assert!(!waits_enough_to_widen(&saturated(5_000_000), period));
        assert!(waits_enough_to_widen(&saturated(period), period));
    }
}
