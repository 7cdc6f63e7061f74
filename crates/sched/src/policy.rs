//! The scheduler's consolidation decisions (src/bpf/policy.h) for code that
//! makes them outside the kernel: `vsched run --consolidate`, Gleaner's
//! consolidation for kernels without sched_ext (crates/consolidate). The C
//! functions are compiled for the host by build.rs (src/bpf/policy_host.c),
//! so each rule has one source, whichever side acts on it.

use crate::bpf_intf::vs_trials;

/// How often the scheduler's consolidation reads its demand
/// (policy.h, VS_CONSOLIDATE_PERIOD_NS).
pub fn period_ns() -> u64 {
    // SAFETY: a constant the C side defines and never writes.
    unsafe { ffi::vsched_consolidate_period_ns }
}

/// A task that runs less than this per wake-up gains less from a vCPU of
/// its own than waking an idle vCPU costs (policy.h, VS_SPREAD_RUN_NS,
/// says how it was measured).
pub fn spread_run_ns() -> u64 {
    // SAFETY: as above.
    unsafe { ffi::vsched_spread_run_ns }
}

mod ffi {
    use crate::bpf_intf::vs_trials;

    extern "C" {
        pub static vsched_consolidate_period_ns: u64;
        pub static vsched_spread_run_ns: u64;
        pub fn vsched_trials_period(
            t: *mut vs_trials,
            progress: u64,
            busy_ns: u64,
            active: u32,
            can_widen: i32,
            now: u64,
            period_ns: u64,
        ) -> i32;
        pub fn vsched_trials_started(t: *mut vs_trials, narrowed: i32);
        pub fn vsched_trials_upset(t: *mut vs_trials);
        pub fn vsched_trials_overruled(t: *mut vs_trials, now: u64, period_ns: u64);
        pub fn vsched_long_runner(avg_run_ns: u64, run_this_wake_ns: u64, wakes: u32) -> i32;
    }
}

/// What a period asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialStep {
    Nothing,
    /// Try a set one vCPU narrower; then [`Trials::started`].
    Narrow,
    /// Try a set one vCPU wider; then [`Trials::started`].
    Widen,
    /// The trial's move stays.
    Kept,
    /// The trial's move is to be undone.
    Undo,
}

/// The course of consolidation's trials: a move of the active set is
/// tried from steady progress and kept only if the progress of the
/// periods after it allows (policy.h, vs_trials_period).
#[derive(Debug, Clone, Copy)]
pub struct Trials(vs_trials);

impl Default for Trials {
    fn default() -> Trials {
        Trials::new()
    }
}

impl Trials {
    /// No trial yet, nothing seen: the state the scheduler's map starts in.
    pub fn new() -> Trials {
        // SAFETY: vs_trials is integers and an array of integers; all
        // zeroes is its initial state (policy.h's functions start from a
        // zeroed map value).
        Trials(unsafe { std::mem::zeroed() })
    }

    /// One period's step: its progress (the program's wake-ups), the run
    /// time of the program on the `active` vCPUs, whether a vCPU is left
    /// to give back, and the period's end on a monotonic clock.
    pub fn period(
        &mut self,
        progress: u64,
        busy_ns: u64,
        active: u32,
        can_widen: bool,
        now_ns: u64,
        period_ns: u64,
    ) -> TrialStep {
        // SAFETY: the pointer is to this struct, which the C function only
        // reads and writes for the call; it keeps no reference.
        let step = unsafe {
            ffi::vsched_trials_period(
                &mut self.0,
                progress,
                busy_ns,
                active,
                i32::from(can_widen),
                now_ns,
                period_ns,
            )
        };
        match step as u32 {
            crate::bpf_intf::vs_trial_step_VS_TRIAL_NARROW => TrialStep::Narrow,
            crate::bpf_intf::vs_trial_step_VS_TRIAL_WIDEN => TrialStep::Widen,
            crate::bpf_intf::vs_trial_step_VS_TRIAL_KEPT => TrialStep::Kept,
            crate::bpf_intf::vs_trial_step_VS_TRIAL_UNDO => TrialStep::Undo,
            _ => TrialStep::Nothing,
        }
    }

    /// The move [`Trials::period`] asked for was made: its trial begins.
    pub fn started(&mut self, narrowed: bool) {
        // SAFETY: as in `period`.
        unsafe { ffi::vsched_trials_started(&mut self.0, i32::from(narrowed)) }
    }

    /// The set changed outside the trials: a trial under way is void, and
    /// the next waits for steady periods.
    pub fn upset(&mut self) {
        // SAFETY: as in `period`.
        unsafe { ffi::vsched_trials_upset(&mut self.0) }
    }

    /// The set was widened at once for long runners that waited: a trial
    /// under way is void and the wait before the next doubles, as after
    /// a failed trial (policy.h, vs_trials_overruled).
    pub fn overruled(&mut self, now_ns: u64, period_ns: u64) {
        // SAFETY: as in `period`.
        unsafe { ffi::vsched_trials_overruled(&mut self.0, now_ns, period_ns) }
    }

    /// Whether the move on trial (if any) narrowed the set.
    pub fn narrowed(&self) -> bool {
        self.0.narrowed != 0
    }

    /// Whether a move is on trial (its periods' progress is being compared).
    pub fn on_trial(&self) -> bool {
        self.0.on_trial != 0
    }
}

/// Whether a thread that must wait asks for another vCPU: it runs long
/// per wake-up, or has not woken often enough to tell (policy.h,
/// vs_long_runner).
pub fn long_runner(avg_run_ns: u64, run_this_wake_ns: u64, wakes: u32) -> bool {
    // SAFETY: a pure function of its arguments.
    unsafe { ffi::vsched_long_runner(avg_run_ns, run_this_wake_ns, wakes) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    // The course itself is checked case by case by tests/c/policy_test.c;
    // this checks that the Rust side reaches the same C functions.
    #[test]
    fn a_steady_idle_set_narrows_and_a_loss_of_progress_undoes_it() {
        let mut t = Trials::new();
        let mut now = 0;
        let mut step = |t: &mut Trials, progress, busy, active| {
            now += period_ns();
            t.period(progress, busy, active, active < 2, now, period_ns())
        };
        assert_eq!(step(&mut t, 1000, 100 * MS, 2), TrialStep::Nothing);
        assert_eq!(step(&mut t, 1000, 100 * MS, 2), TrialStep::Nothing);
        assert_eq!(step(&mut t, 1000, 100 * MS, 2), TrialStep::Narrow);
        t.started(true);
        assert!(t.narrowed());
        assert_eq!(step(&mut t, 0, 90 * MS, 1), TrialStep::Nothing);
        assert_eq!(step(&mut t, 800, 90 * MS, 1), TrialStep::Nothing);
        assert_eq!(step(&mut t, 800, 90 * MS, 1), TrialStep::Undo);
    }

    #[test]
    fn long_runs_per_wake_up_ask_for_a_vcpu_and_short_ones_do_not() {
        assert_eq!(period_ns(), 100 * MS);
        assert!(long_runner(spread_run_ns(), 0, 100));
        assert!(!long_runner(10_000, 10_000, 100));
        // Too few wake-ups to tell: a CPU-bound thread.
        assert!(long_runner(0, 0, 1));
    }
}
