//! What a probe measures, decided and checked before anything runs: which
//! vCPUs, how long its windows are, whether an earlier topology can be
//! validated, and under `--watch` when the next heavy window and topology
//! check are due. The messages name `vsched probe`'s options, since that
//! is whom they answer.

use crate::sys;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vsched_model::cpulist::{format_cpu_list, parse_cpu_list, CpuListError};
use vsched_model::report::{ProbeReport, TopologyReport};

/// What one step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepPlan {
    pub light: bool,
    pub heavy: bool,
    pub topology: TopologyStep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyStep {
    Skip,
    Full,
    /// Re-check the known topology; fall back to a full probe if it changed.
    Validate,
}

/// Why a probe cannot run as asked.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("reading /sys/devices/system/cpu/online")]
    Online(#[source] io::Error),
    #[error("reading this process's CPU affinity")]
    Affinity(#[source] io::Error),
    #[error(transparent)]
    CpuList(#[from] CpuListError),
    #[error("--cpus {0:?} names no vCPU")]
    NoCpuNamed(String),
    #[error("vCPU {cpu} is not online (online vCPUs: {online}); pick from those with --cpus")]
    Offline { cpu: u32, online: String },
    #[error(
        "vCPU {cpu} is outside this process's allowed CPUs ({allowed}), e.g. a container's cpuset or taskset; \
         leave it out of --cpus or run vsched with access to it"
    )]
    NotAllowed { cpu: u32, allowed: String },
    #[error("no online vCPU is in this process's affinity mask")]
    NoneUsable,
    #[error("--heavy may be at most 900ms")]
    HeavyTooLong,
    #[error("--duration may be at most 1h")]
    LightTooLong,
    #[error(
        "--duration ({}) must be shorter than --interval ({})",
        humantime::format_duration(*light),
        humantime::format_duration(*interval)
    )]
    LightNotShorterThanInterval { light: Duration, interval: Duration },
    #[error("{} has no topology to validate (was it made with --only?)", .0.display())]
    NoTopology(PathBuf),
    #[error("{}: topology matrices are not {n}x{n} for {n} vCPUs; is the file intact?", path.display())]
    NotSquare { path: PathBuf, n: usize },
    #[error(
        "{} covers vCPUs {theirs}, this probe {ours}: they must match to validate",
        path.display()
    )]
    OtherCpus {
        path: PathBuf,
        theirs: String,
        ours: String,
    },
}

/// The vCPUs to probe, and what the user should know about the choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSelection {
    pub cpus: Vec<u32>,
    pub warnings: Vec<String>,
}

/// The vCPUs `requested` names (kernel list syntax), or every online vCPU
/// this process may run on; checked against this machine.
pub fn select_cpus(requested: Option<&str>) -> Result<CpuSelection, PlanError> {
    let online = sys::online_cpus().map_err(PlanError::Online)?;
    let allowed = vsched_os::affinity::thread_affinity(0).map_err(PlanError::Affinity)?;
    select_cpus_from(requested, &online, &allowed)
}

/// `select_cpus` given the online vCPUs and this process's affinity mask.
pub fn select_cpus_from(
    requested: Option<&str>,
    online: &[u32],
    allowed: &[u32],
) -> Result<CpuSelection, PlanError> {
    match requested {
        Some(list) => {
            let cpus = parse_cpu_list(list)?;
            if cpus.is_empty() {
                return Err(PlanError::NoCpuNamed(list.to_string()));
            }
            for &cpu in &cpus {
                if !online.contains(&cpu) {
                    let online = format_cpu_list(online);
                    return Err(PlanError::Offline { cpu, online });
                }
                if !allowed.contains(&cpu) {
                    let allowed = format_cpu_list(allowed);
                    return Err(PlanError::NotAllowed { cpu, allowed });
                }
            }
            Ok(CpuSelection {
                cpus,
                warnings: vec![],
            })
        }
        None => {
            let (usable, hidden): (Vec<u32>, Vec<u32>) =
                online.iter().partition(|c| allowed.contains(c));
            let mut warnings = vec![];
            if !hidden.is_empty() {
                warnings.push(format!(
                    "vCPUs {} are online but outside this process's allowed CPUs: not probed",
                    format_cpu_list(&hidden)
                ));
            }
            if usable.is_empty() {
                return Err(PlanError::NoneUsable);
            }
            Ok(CpuSelection {
                cpus: usable,
                warnings,
            })
        }
    }
}

/// The light (SCHED_IDLE) and heavy (high-priority) window of each sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub light: Duration,
    pub heavy: Duration,
}

/// Longest heavy window: longer real-time windows run into the kernel's
/// RT throttling (950 ms per second), which would read as made-up pre-emption.
const MAX_HEAVY: Duration = Duration::from_millis(900);
/// Longest light window: an hour is already far beyond any use; longer ones
/// are typing mistakes.
const MAX_LIGHT: Duration = Duration::from_secs(3600);

impl Windows {
    /// One probe's windows.
    pub const SINGLE: Windows = Windows {
        light: Duration::from_millis(200),
        heavy: Duration::from_millis(100),
    };

    /// `--watch`'s windows: they repeat every interval and their cost adds
    /// up, so they are shorter than a single probe's.
    pub const WATCH: Windows = Windows {
        light: Duration::from_millis(100),
        heavy: Duration::from_millis(10),
    };

    /// The windows asked for, or the defaults: [`Windows::SINGLE`] for one
    /// probe; [`Windows::WATCH`] under `--watch` (given its
    /// `interval`), with the light window cut to half an interval shorter
    /// than 200 ms (but at least 1 ms), so that any interval from 2 ms on
    /// works without `--duration`.
    pub fn choose(
        light: Option<Duration>,
        heavy: Option<Duration>,
        watch_interval: Option<Duration>,
    ) -> Result<Windows, PlanError> {
        let light = light.unwrap_or(match watch_interval {
            // At least 1 ms: shorter windows hold no episode worth the
            // name, and an interval that leaves less is refused below.
            Some(interval) => Windows::WATCH
                .light
                .min(interval / 2)
                .max(Duration::from_millis(1)),
            None => Windows::SINGLE.light,
        });
        let heavy = heavy.unwrap_or(match watch_interval {
            Some(_) => Windows::WATCH.heavy,
            None => Windows::SINGLE.heavy,
        });
        if heavy > MAX_HEAVY {
            return Err(PlanError::HeavyTooLong);
        }
        if light > MAX_LIGHT {
            return Err(PlanError::LightTooLong);
        }
        if let Some(interval) = watch_interval.filter(|&i| light >= i) {
            return Err(PlanError::LightNotShorterThanInterval { light, interval });
        }
        Ok(Windows { light, heavy })
    }
}

/// The topology of an earlier `vsched probe --json` report (read from
/// `path`), if it can be validated by a probe of `cpus`.
pub fn previous_topology(
    path: &Path,
    report: ProbeReport,
    cpus: &[u32],
) -> Result<TopologyReport, PlanError> {
    let topo = report
        .topology
        .ok_or_else(|| PlanError::NoTopology(path.to_path_buf()))?;
    check_previous_topology(path, topo, cpus)
}

/// `topo` if its matrices are whole and it covers exactly `cpus`.
fn check_previous_topology(
    path: &Path,
    topo: TopologyReport,
    cpus: &[u32],
) -> Result<TopologyReport, PlanError> {
    let n = topo.cpus.len();
    let square = |widths: Vec<usize>| widths.len() == n && widths.iter().all(|&w| w == n);
    if !square(topo.relation.iter().map(Vec::len).collect())
        || !square(topo.latency_ns.iter().map(Vec::len).collect())
    {
        return Err(PlanError::NotSquare {
            path: path.to_path_buf(),
            n,
        });
    }
    if topo.cpus != cpus {
        return Err(PlanError::OtherCpus {
            path: path.to_path_buf(),
            theirs: format_cpu_list(&topo.cpus),
            ours: format_cpu_list(cpus),
        });
    }
    Ok(topo)
}

/// The first step: everything, with the topology validated against an
/// earlier one if there is one, else probed in full.
pub fn first_step(validating: bool) -> StepPlan {
    StepPlan {
        light: true,
        heavy: true,
        topology: if validating {
            TopologyStep::Validate
        } else {
            TopologyStep::Full
        },
    }
}

/// The probing rhythm's defaults, shared by `vsched probe --watch` (its
/// flags' defaults, checked equal by a test in the CLI) and the probers
/// inside `vsched sched`: a heavy window every 5 s (it takes each vCPU at
/// high priority, so rarely), a topology validation every 10 s (stacking
/// changes only when the host re-places vCPUs), stragglers below 0.2 x the
/// mean capacity and an EMA half-life of 3 s (docs/probers.md).
pub const WATCH_HEAVY_EVERY: Duration = Duration::from_secs(5);
pub const WATCH_TOPOLOGY_EVERY: Duration = Duration::from_secs(10);
pub const STRAGGLER_RATIO: f64 = 0.2;
pub const EMA_HALF_LIFE: Duration = Duration::from_secs(3);

/// What the last step saw that calls for a heavy window or a topology
/// check before they are due (`Session::signals`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepSignals {
    /// Some vCPU's hypervisor share read far from its estimate: a change
    /// (a cap, a neighbour, a re-placement) that one more reading confirms.
    pub shifting: bool,
    /// Some vCPU's estimate restarted at a new level (a change confirmed):
    /// a re-placement may have stacked or unstacked it.
    pub shifted: bool,
    /// The known topology has stacked vCPUs. Only a topology check sees
    /// the host place them apart again: RWC keeps all but one of each
    /// stacked group idle, and an idle vCPU's light window reads it as
    /// free whether it is stacked or not (the host favours a thread that
    /// mostly sleeps when it wakes), so no shift is signalled.
    pub stacked: bool,
}

/// Topology checks brought forward by a confirmed shift at most this
/// often: a host whose noise moves a share from one window to the next
/// would otherwise get one every other step (a check pairs the vCPUs up
/// at high priority). Two seconds still follow a change within a step or
/// two (measured before this rule: a stacked pair was hidden 5-6 s after
/// the host stacked it, waiting for the 10 s topology rhythm).
///
/// Tried and removed: a heavy window every 2 s while a light window is
/// blind (every vCPU busy), to see a straggler under a CPU-bound load
/// sooner. Each heavy window pre-empts every thread, and the lab's IVH
/// test saw its control thread (IVH off) spread over the vCPUs as much
/// as IVH spreads it (its main vCPU 42% of its time, 60-70% before),
/// with no measured gain to set against it.
pub const SIGNAL_CHECK_SPACING: Duration = Duration::from_secs(2);

/// While some vCPUs are known stacked, the topology is checked at least
/// this often (instead of every `topology_every`, 10 s by default, unless
/// that is shorter): giving a stacked vCPU back waits for a check
/// ([`StepSignals::stacked`]). Measured in the adaptability benchmark
/// before this rule: the hidden vCPU of a pair the host had placed apart
/// again came back 1-6 s later (3.5 s in the run just before). A
/// validation takes the vCPUs of the pairs it checks at high priority,
/// one 10 ms window per known-stacked pair (15-24 ms in all under TCG on
/// a stacked pair), so on a VM that stays stacked this costs about 1% of
/// those vCPUs (no loss measured: a barrier on a stacked pair, 2026-11-26,
/// recorded in 3e0572b); two seconds is
/// the adaptability goal's bound.
pub const STACKED_TOPOLOGY_EVERY: Duration = Duration::from_secs(2);

/// Under `--watch`: a light window every step, a heavy window and a
/// topology validation as often as asked, and sooner when the last step
/// calls for them ([`StepSignals`]): a far reading gets a heavy window in
/// the next step (it re-measures speed and pre-emption, half of capacity,
/// and where the light window is blind it is the reading that confirms
/// the change or not; a shift is pending for one reading only, so this
/// costs one window per far reading); a confirmed change gets a topology
/// check, at most every [`SIGNAL_CHECK_SPACING`]. Topology waits
/// for the confirmation because a check takes every vCPU at high
/// priority for tens of milliseconds: on four vCPUs capped at 50% whose
/// 10 ms heavy readings scatter widely, checking on every far reading
/// made four CPU-bound threads 0.71x the default's speed (ivh-4; 0.91x
/// without IVH, 1.0x without probers).
#[derive(Debug, Clone)]
pub struct WatchSchedule {
    heavy_every: Duration,
    topology_every: Duration,
    recheck_stacked: bool,
    last_heavy: Instant,
    last_topology: Instant,
    last_shift_topology: Option<Instant>,
}

impl WatchSchedule {
    /// A schedule whose first step (heavy, topology) ran at `start`.
    pub fn new(heavy_every: Duration, topology_every: Duration, start: Instant) -> WatchSchedule {
        WatchSchedule {
            heavy_every,
            topology_every,
            recheck_stacked: true,
            last_heavy: start,
            last_topology: start,
            last_shift_topology: None,
        }
    }

    /// Whether known-stacked vCPUs get a topology validation every
    /// [`STACKED_TOPOLOGY_EVERY`] (true unless set here). That check is
    /// what gives back a stacked vCPU RWC hides (and keeps fresh the
    /// stacking IVH's targets are chosen by), and serves nothing where
    /// neither reads it: there it only costs (each takes every vCPU at
    /// high priority, in the IVH layout, whose capped pairs share host
    /// CPUs, for 100-250 ms every 2 s under TCG; a CPU-bound thread there
    /// was no faster without them: 2026-11-26, recorded in b563260).
    pub fn recheck_stacked(mut self, yes: bool) -> WatchSchedule {
        self.recheck_stacked = yes;
        self
    }

    /// The plan of the step that starts at `now`, after a step that saw
    /// `signals`.
    pub fn next(&mut self, now: Instant, signals: StepSignals) -> StepPlan {
        let spaced = |last: Option<Instant>| {
            last.is_none_or(|last| now.duration_since(last) >= SIGNAL_CHECK_SPACING)
        };
        let shift_topology = signals.shifted && spaced(self.last_shift_topology);
        if shift_topology {
            self.last_shift_topology = Some(now);
        }
        let heavy = signals.shifting || now.duration_since(self.last_heavy) >= self.heavy_every;
        let topology_every = if signals.stacked && self.recheck_stacked {
            self.topology_every.min(STACKED_TOPOLOGY_EVERY)
        } else {
            self.topology_every
        };
        let topology = shift_topology || now.duration_since(self.last_topology) >= topology_every;
        if heavy {
            self.last_heavy = now;
        }
        if topology {
            self.last_topology = now;
        }
        StepPlan {
            light: true,
            heavy,
            topology: if topology {
                TopologyStep::Validate
            } else {
                TopologyStep::Skip
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vsched_model::Relation;

    #[test]
    fn takes_every_usable_vcpu_and_says_which_are_left_out() {
        let s = select_cpus_from(None, &[0, 1, 2, 3], &[0, 2, 3]).unwrap();
        assert_eq!(s.cpus, [0, 2, 3]);
        assert_eq!(s.warnings.len(), 1);
        assert!(
            s.warnings[0].starts_with("vCPUs 1 are online"),
            "{:?}",
            s.warnings
        );
        assert!(matches!(
            select_cpus_from(None, &[0, 1], &[4]),
            Err(PlanError::NoneUsable)
        ));
    }

    #[test]
    fn a_requested_list_must_be_online_and_allowed() {
        let s = select_cpus_from(Some("0,2"), &[0, 1, 2], &[0, 1, 2]).unwrap();
        assert_eq!((s.cpus, s.warnings.len()), (vec![0, 2], 0));
        let e = select_cpus_from(Some("5"), &[0, 1], &[0, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "vCPU 5 is not online (online vCPUs: 0-1); pick from those with --cpus"
        );
        let e = select_cpus_from(Some("1"), &[0, 1], &[0]).unwrap_err();
        assert!(matches!(e, PlanError::NotAllowed { cpu: 1, .. }), "{e}");
        let e = select_cpus_from(Some("3-1"), &[0], &[0]).unwrap_err();
        assert!(e.to_string().contains("malformed CPU list"), "{e}");
        assert!(matches!(
            select_cpus_from(Some(""), &[0], &[0]),
            Err(PlanError::NoCpuNamed(_))
        ));
    }

    #[test]
    fn windows_default_shorter_under_watch() {
        let ms = Duration::from_millis;
        assert_eq!(
            Windows::choose(None, None, None).unwrap(),
            Windows {
                light: ms(200),
                heavy: ms(100)
            }
        );
        assert_eq!(
            Windows::choose(None, None, Some(ms(1000))).unwrap(),
            Windows {
                light: ms(100),
                heavy: ms(10)
            }
        );
        assert_eq!(
            Windows::choose(Some(ms(50)), Some(ms(20)), None).unwrap(),
            Windows {
                light: ms(50),
                heavy: ms(20)
            }
        );
    }

    #[test]
    fn windows_stay_within_their_limits() {
        let ms = Duration::from_millis;
        assert!(matches!(
            Windows::choose(None, Some(ms(901)), None),
            Err(PlanError::HeavyTooLong)
        ));
        assert!(Windows::choose(None, Some(ms(900)), None).is_ok());
        assert!(matches!(
            Windows::choose(Some(Duration::from_secs(3601)), None, None),
            Err(PlanError::LightTooLong)
        ));
        // Only a light window asked for is refused; the default fits.
        assert_eq!(
            Windows::choose(None, None, Some(ms(100))).unwrap(),
            Windows {
                light: ms(50),
                heavy: ms(10)
            }
        );
        assert!(matches!(
            Windows::choose(None, None, Some(Duration::from_nanos(1))),
            Err(PlanError::LightNotShorterThanInterval { .. })
        ));
        let e = Windows::choose(Some(ms(200)), None, Some(ms(100))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--duration (200ms) must be shorter than --interval (100ms)"
        );
    }

    fn two_vcpus() -> TopologyReport {
        TopologyReport {
            mode: "full".into(),
            valid: None,
            cpus: vec![0, 1],
            latency_ns: vec![vec![None, Some(50.0)], vec![Some(50.0), None]],
            relation: vec![
                vec![None, Some(Relation::Llc)],
                vec![Some(Relation::Llc), None],
            ],
            levels: vec![],
            pairs_probed: 1,
            pairs_inferred: 0,
            probes: vec![],
        }
    }

    #[test]
    fn an_earlier_topology_must_be_whole_and_cover_these_vcpus() {
        let path = Path::new("earlier.json");
        assert_eq!(
            check_previous_topology(path, two_vcpus(), &[0, 1]).unwrap(),
            two_vcpus()
        );
        let e = check_previous_topology(path, two_vcpus(), &[0, 2]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "earlier.json covers vCPUs 0-1, this probe 0,2: they must match to validate"
        );
        let mut torn = two_vcpus();
        torn.latency_ns.pop();
        assert!(matches!(
            check_previous_topology(path, torn, &[0, 1]),
            Err(PlanError::NotSquare { n: 2, .. })
        ));
    }

    #[test]
    fn watch_plans_heavy_windows_and_topology_checks_when_due() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = WatchSchedule::new(s(5), s(10), t0);
        let quiet = StepSignals::default();
        let plan = w.next(t0 + s(1), quiet);
        assert_eq!(
            (plan.light, plan.heavy, plan.topology),
            (true, false, TopologyStep::Skip)
        );
        let plan = w.next(t0 + s(5), quiet);
        assert_eq!((plan.heavy, plan.topology), (true, TopologyStep::Skip));
        // The heavy window's clock restarted at 5 s; the topology's did not.
        let plan = w.next(t0 + s(10), quiet);
        assert_eq!((plan.heavy, plan.topology), (true, TopologyStep::Validate));
        let plan = w.next(t0 + s(12), quiet);
        assert_eq!((plan.heavy, plan.topology), (false, TopologyStep::Skip));
    }

    #[test]
    fn a_shift_brings_the_heavy_window_forward_and_a_confirmed_one_the_topology() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let quiet = StepSignals::default();
        let shifting = StepSignals {
            shifting: true,
            ..quiet
        };
        let shifted = StepSignals {
            shifted: true,
            ..quiet
        };
        let mut w = WatchSchedule::new(s(5), s(10), t0);
        // A far reading: a heavy window next, the reading that confirms.
        let plan = w.next(t0 + s(1), shifting);
        assert_eq!((plan.heavy, plan.topology), (true, TopologyStep::Skip));
        // Confirmed: the topology is checked, not again before 2 s.
        let plan = w.next(t0 + s(2), shifted);
        assert_eq!((plan.heavy, plan.topology), (false, TopologyStep::Validate));
        let plan = w.next(t0 + s(3), shifted);
        assert_eq!(plan.topology, TopologyStep::Skip);
        let plan = w.next(t0 + s(4), shifted);
        assert_eq!((plan.heavy, plan.topology), (false, TopologyStep::Validate));
        let mut w = WatchSchedule::new(s(5), s(10), t0);
        let plan = w.next(t0 + s(1), shifting);
        assert!(plan.heavy);
        let plan = w.next(t0 + s(2), shifting);
        assert_eq!((plan.heavy, plan.topology), (true, TopologyStep::Skip));
        let plan = w.next(t0 + s(3), shifted);
        assert_eq!((plan.heavy, plan.topology), (false, TopologyStep::Validate));
        // Both rhythms restarted with the checks (heavy at 2 s, topology
        // at 3 s).
        let plan = w.next(t0 + s(6), quiet);
        assert_eq!((plan.heavy, plan.topology), (false, TopologyStep::Skip));
        let plan = w.next(t0 + s(7), quiet);
        assert_eq!((plan.heavy, plan.topology), (true, TopologyStep::Skip));
        let plan = w.next(t0 + s(12), quiet);
        assert_eq!(plan.topology, TopologyStep::Skip);
    }

    /// A step's signals when the known topology has stacked vCPUs.
    fn stacked_signals() -> StepSignals {
        StepSignals {
            stacked: true,
            ..StepSignals::default()
        }
    }

    /// Regression: a stacked pair placed apart again was given back only
    /// at the next 10 s check (1-6 s late in the adaptability
    /// benchmark), since the hidden vCPU's light window sees no change.
    #[test]
    fn known_stacked_vcpus_are_checked_every_two_seconds() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let stacked = stacked_signals();
        let mut w = WatchSchedule::new(s(5), s(10), t0);
        assert_eq!(w.next(t0 + s(1), stacked).topology, TopologyStep::Skip);
        assert_eq!(w.next(t0 + s(2), stacked).topology, TopologyStep::Validate);
        assert_eq!(w.next(t0 + s(3), stacked).topology, TopologyStep::Skip);
        assert_eq!(w.next(t0 + s(4), stacked).topology, TopologyStep::Validate);
        // Unstacked: back to the usual rhythm, counted from the last check.
        let quiet = StepSignals::default();
        assert_eq!(w.next(t0 + s(6), quiet).topology, TopologyStep::Skip);
        assert_eq!(w.next(t0 + s(14), quiet).topology, TopologyStep::Validate);
        // A rhythm asked to be faster stays as fast.
        let mut w = WatchSchedule::new(s(5), Duration::from_millis(500), t0);
        let plan = w.next(t0 + Duration::from_millis(500), stacked);
        assert_eq!(plan.topology, TopologyStep::Validate);
    }

    /// Where nothing reads the stacking between checks (no RWC, no IVH),
    /// nothing needs the 2 s checks, which take every vCPU at high
    /// priority (every other step in the IVH layout).
    #[test]
    fn stacked_vcpus_keep_the_usual_rhythm_where_no_rwc_hides_them() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let stacked = stacked_signals();
        let mut w = WatchSchedule::new(s(5), s(10), t0).recheck_stacked(false);
        for k in 1..10 {
            assert_eq!(
                w.next(t0 + s(k), stacked).topology,
                TopologyStep::Skip,
                "{k} s"
            );
        }
        assert_eq!(w.next(t0 + s(10), stacked).topology, TopologyStep::Validate);
    }

    #[test]
    fn the_first_step_validates_only_with_an_earlier_topology() {
        assert_eq!(first_step(true).topology, TopologyStep::Validate);
        assert_eq!(first_step(false).topology, TopologyStep::Full);
        assert!(first_step(false).heavy && first_step(false).light);
    }
}
