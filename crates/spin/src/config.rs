//! What the detector is asked to do and how: the [`Config`] of an engine,
//! its defaults (the one place they are stated: the command line's flags
//! and docs/spin.md take them from here; a test holds the docs to them) and
//! its validation.

use crate::detector::{DetectorParams, ParamsError};
use crate::perf::MIN_PERIOD_NS;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Sampling period, of each thread's CPU time: a new wait loop costs at most
/// a window of samples (2 ms at this period) of spinning before it is found,
/// and each sample is a timer interrupt, which costs more in a VM.
pub const PERIOD: Duration = Duration::from_micros(500);
/// Sampling period while the machine has not been oversubscribed for a
/// while: nothing would be done about a spin then, so one sample per
/// [`TICK`] keeps the loops known at a twentieth of the interrupts.
pub const IDLE_PERIOD: Duration = Duration::from_millis(10);
/// Sampling period of threads that spun recently: a known spinner is caught
/// again within tens of microseconds (one period, then one sample suffices).
pub const SUSPECT_PERIOD: Duration = Duration::from_micros(50);
/// How long a thread stays a suspect after its last spinning sample: waits
/// that recur (a ring stage, a consumer, a barrier) come back within tens of
/// milliseconds.
pub const SUSPECT_FOR: Duration = Duration::from_millis(50);
/// Time slice asked for a demoted thread: the kernel's shortest custom slice,
/// so that demoted spinners hand their vCPU round among themselves quickly.
pub const SLICE: Duration = SLICE_RANGE.0;
/// Longest demotion without a sample showing the thread still spins: one
/// sampling [`PERIOD`], after which a still-spinning thread has been sampled
/// (and demoted) again.
pub const LEASE: Duration = PERIOD;
/// How often the words stopped threads poll are read: a stopped thread runs
/// at most this long after its wait ended, and programs hand off every
/// 20-100 µs; each check is one process_vm_readv of the detector's time.
pub const WATCH_PERIOD: Duration = Duration::from_micros(40);
/// Longest hold of a thread whose wait loop replays, a safety net in case the
/// replay is wrong: the replay, not this, ends real waits, and a wrongly
/// stopped thread loses five 4 ms scheduler ticks (HZ 250) at most.
pub const WATCHED_LEASE: Duration = Duration::from_millis(20);
/// Time without oversubscription before sampling relaxes to [`IDLE_PERIOD`]:
/// long enough that a program between two busy phases keeps its full-rate
/// sampling, short enough that an idle machine soon stops paying for timer
/// interrupts nothing would come of.
pub const RELAX_AFTER: Duration = Duration::from_millis(100);
/// Longest time between two reads of the samples (`Engine::step`'s wait):
/// new threads, the load and ended leases are noticed within it, and a ring
/// buffer holds over 100 ms of samples at the default period, so none is lost.
pub const TICK: Duration = Duration::from_millis(10);

/// The shortest sampling period: the kernel's limit for cpu-clock.
pub const MIN_PERIOD: Duration = Duration::from_nanos(MIN_PERIOD_NS);
/// The kernel's range for custom slices (sched_attr.sched_runtime of a fair
/// task, Linux 6.12 and later).
pub const SLICE_RANGE: (Duration, Duration) =
    (Duration::from_micros(100), Duration::from_millis(100));

/// A duration spelt as the command line takes it ("500us", "10ms", "2s"):
/// in the largest unit that states it exactly. Error messages and the
/// command line's defaults print durations this way, so a value can be
/// copied back into a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlagDuration(pub Duration);

impl std::fmt::Display for FlagDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0.as_nanos();
        let units = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
        match units.iter().find(|&&(per, _)| ns >= per && ns % per == 0) {
            Some(&(per, unit)) => write!(f, "{}{unit}", ns / per),
            None => write!(f, "{ns}ns"),
        }
    }
}

/// What to do with a thread found spinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Count only.
    Observe,
    /// Hold it (stop or demote) until its wait ends or its lease runs out.
    Deschedule,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Sampling period, ns of the thread's CPU time.
    pub period_ns: u64,
    /// Sampling period while the machine has not been oversubscribed for a
    /// while (nothing would be done about a spin then; each sample is a
    /// timer interrupt, costly in a VM). Not above `period_ns`: off.
    pub idle_period_ns: u64,
    /// Sampling period of threads that spun recently: catches them again
    /// quickly and sees them leave their loop sooner.
    pub suspect_period_ns: u64,
    /// How long a thread stays a suspect after its last spinning sample.
    pub suspect_ns: u64,
    pub params: DetectorParams,
    pub action: Action,
    /// Time slice requested for a demoted thread (kernels >= 6.12 honour it).
    pub slice_ns: u64,
    /// Longest a thread stays demoted without a sample proving it still spins.
    pub max_demotion_ns: u64,
    /// Force demoted threads that still spin off their vCPU.
    pub kick: bool,
    /// Replay demoted spinners' wait loops against memory and restore a
    /// thread the moment its wait is over (see `replay`).
    pub replay: bool,
    /// Stop (ptrace) rather than demote a spinner whose wait loop replays:
    /// a stopped thread costs its vCPU nothing and runs at once when resumed.
    pub stop: bool,
    /// How often the wait loops of demoted threads are replayed.
    pub watch_period_ns: u64,
    /// Longest demotion of a thread whose loop replays (a safety net: the
    /// replay restores it when its wait ends).
    pub watched_lease_ns: u64,
    /// Put a hardware breakpoint on the wait loop of each stopped thread, so
    /// that the next time it enters that loop it is stopped before it spins
    /// instead of after a sampling period (see `engine::traps`).
    pub entry_traps: bool,
    /// Let an entry trap stop its thread itself (a BPF program on the
    /// breakpoint signals it; see `bpf`), so that it never spins while the
    /// detector reacts. Needs root; falls back to waking the detector.
    pub trap_stops: bool,
    /// Hand spinners to vsched's scheduler when one runs (`vsched sched`):
    /// mark them in its channel, which deschedules them itself, instead of
    /// stopping or demoting them (see `channel`). Without a scheduler
    /// reading the channel, the holds above act as before.
    pub channel: bool,
    /// Keep every sample (for recording test data and offline scoring).
    #[serde(skip)]
    pub record_samples: bool,
}

/// A duration in the nanoseconds the engine counts in.
pub const fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period_ns: ns(PERIOD),
            idle_period_ns: ns(IDLE_PERIOD),
            suspect_period_ns: ns(SUSPECT_PERIOD),
            suspect_ns: ns(SUSPECT_FOR),
            params: DetectorParams::default(),
            action: Action::Deschedule,
            slice_ns: ns(SLICE),
            max_demotion_ns: ns(LEASE),
            kick: true,
            replay: true,
            stop: true,
            watch_period_ns: ns(WATCH_PERIOD),
            watched_lease_ns: ns(WATCHED_LEASE),
            entry_traps: true,
            trap_stops: true,
            channel: true,
            record_samples: false,
        }
    }
}

/// A configuration the kernel or the detector cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Detector(#[from] ParamsError),
    #[error(
        "{setting} must be at least {min} (the kernel's limit for cpu-clock), got {got}",
        min = FlagDuration(MIN_PERIOD)
    )]
    PeriodTooShort {
        setting: &'static str,
        got: FlagDuration,
    },
    #[error(
        "slice must be between {lo} and {hi} (the kernel's range for custom slices), got {got}",
        lo = FlagDuration(SLICE_RANGE.0),
        hi = FlagDuration(SLICE_RANGE.1)
    )]
    Slice { got: FlagDuration },
}

impl Config {
    /// Checks every setting the kernel or the detector limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.params.validate()?;
        let periods = [
            ("period", self.period_ns),
            ("suspect period", self.suspect_period_ns),
        ];
        for (setting, period_ns) in periods {
            if period_ns < MIN_PERIOD_NS {
                let got = FlagDuration(Duration::from_nanos(period_ns));
                return Err(ConfigError::PeriodTooShort { setting, got });
            }
        }
        let slice = Duration::from_nanos(self.slice_ns);
        if !(SLICE_RANGE.0..=SLICE_RANGE.1).contains(&slice) {
            return Err(ConfigError::Slice {
                got: FlagDuration(slice),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_are_the_named_constants() {
        let cfg = Config::default();
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.period_ns, 500_000);
        assert_eq!(cfg.suspect_ns, 50_000_000);
        assert_eq!(cfg.slice_ns, 100_000);
        assert_eq!(cfg.max_demotion_ns, cfg.period_ns);
        assert_eq!(cfg.action, Action::Deschedule);
    }

    #[test]
    fn periods_below_the_kernel_limit_are_refused() {
        let short = Duration::from_micros(9);
        let cfg = Config {
            period_ns: ns(short),
            ..Config::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::PeriodTooShort {
                setting: "period",
                got: FlagDuration(short)
            })
        );
        let cfg = Config {
            suspect_period_ns: ns(short),
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::PeriodTooShort {
                setting: "suspect period",
                ..
            }
        ));
        assert!(err.to_string().contains("at least 10us"), "{err}");
        // The limit itself is fine.
        let cfg = Config {
            period_ns: MIN_PERIOD_NS,
            suspect_period_ns: MIN_PERIOD_NS,
            ..Config::default()
        };
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn slices_outside_the_kernel_range_are_refused() {
        for (slice, ok) in [
            (SLICE_RANGE.0, true),
            (SLICE_RANGE.1, true),
            (SLICE_RANGE.0 - Duration::from_nanos(1), false),
            (SLICE_RANGE.1 + Duration::from_nanos(1), false),
        ] {
            let cfg = Config {
                slice_ns: ns(slice),
                ..Config::default()
            };
            assert_eq!(cfg.validate().is_ok(), ok, "{slice:?}");
        }
        let cfg = Config {
            slice_ns: ns(Duration::from_secs(1)),
            ..Config::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "slice must be between 100us and 100ms (the kernel's range for custom slices), got 1s"
        );
    }

    #[test]
    fn durations_are_spelt_as_flags_take_them() {
        let spelt = |d: Duration| FlagDuration(d).to_string();
        assert_eq!(spelt(PERIOD), "500us");
        assert_eq!(spelt(TICK), "10ms");
        assert_eq!(spelt(Duration::from_secs(2)), "2s");
        assert_eq!(spelt(Duration::from_micros(1500)), "1500us");
        assert_eq!(spelt(Duration::from_nanos(1500)), "1500ns");
        assert_eq!(spelt(Duration::ZERO), "0ns");
    }

    #[test]
    fn detector_parameters_are_checked_too() {
        let cfg = Config {
            params: DetectorParams {
                window: 1,
                ..DetectorParams::default()
            },
            ..Config::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::Detector(ParamsError::Window { window: 1 }))
        );
    }
}
