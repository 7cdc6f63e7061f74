//! A timeline scenario's analysis (vSched Fig. 16): throughput interval by
//! interval for each variant (the median over rounds), cut at the layout's
//! phase changes; per phase each variant's level and how long vsched took
//! to reach its own level after the change.

use serde::Serialize;
use vsched_model::stats::median;

/// A phase's level is the median rate over its second half: by then any
/// scheduler that adapts has adapted, and a quarter of the phase is past
/// the change's own disturbance.
const LEVEL_FROM_SHARE: f64 = 0.5;

/// Recovered means at this share of the phase's level. The intervals of a
/// steady phase scatter by 10-15% under TCG (a guest's clock reads and
/// QEMU's locks), so a stricter share would call noise a slow recovery.
const RECOVERED_SHARE: f64 = 0.8;

/// Recovered means staying there this many intervals in a row (2: half a
/// second at the benchmark's 250 ms), so that one lucky interval in the
/// middle of a slump does not count.
const RECOVERED_FOR: usize = 2;

/// One variant's throughput over time.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub variant: String,
    /// Rounds per second, interval by interval (median over rounds).
    pub rates: Vec<f64>,
}

/// One phase of the walk.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub name: String,
    /// Seconds since the workload's start.
    pub start_s: f64,
    pub end_s: f64,
    /// (variant, level in rounds per second), in the series' order.
    pub levels: Vec<(String, f64)>,
    /// vsched's level over default's.
    pub vsched_over_default: f64,
    /// Seconds from the change to vsched's recovery (None: not within the
    /// phase). The first phase has no change: 0 if it starts at its level.
    pub vsched_recovery_s: Option<f64>,
}

/// The timeline of a scenario.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineResult {
    pub interval_s: f64,
    pub series: Vec<Series>,
    pub phases: Vec<PhaseResult>,
}

impl TimelineResult {
    /// The longest of vsched's recoveries (None: one phase never recovered).
    pub fn slowest_recovery_s(&self) -> Option<f64> {
        self.phases
            .iter()
            .map(|p| p.vsched_recovery_s)
            .try_fold(0.0f64, |worst, r| r.map(|r| worst.max(r)))
    }
}

/// Builds the timeline from each variant's interval medians (`t0`, `t1`,
/// ... in `other_medians`), phases named `names` starting at `starts_s`
/// (seconds since the workload's start, the first 0).
pub fn analyse(
    variants: &[(String, Vec<(String, f64)>)],
    interval_s: f64,
    names: &[&str],
    starts_s: &[f64],
) -> Option<TimelineResult> {
    let series: Vec<Series> = variants
        .iter()
        .map(|(variant, medians)| Series {
            variant: variant.clone(),
            rates: interval_rates(medians),
        })
        .collect();
    let len = series.iter().map(|s| s.rates.len()).min()?;
    if len == 0 || names.len() != starts_s.len() || interval_s <= 0.0 {
        return None;
    }
    let total_s = len as f64 * interval_s;
    let index = |t: f64| ((t / interval_s).round() as usize).min(len);
    let level_of = |rates: &[f64], from: usize, to: usize| {
        let cut = from + ((to - from) as f64 * LEVEL_FROM_SHARE) as usize;
        let mut tail = rates[cut..to].to_vec();
        (!tail.is_empty()).then(|| median(&mut tail))
    };
    let mut phases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let start_s = starts_s[i];
        let end_s = starts_s.get(i + 1).copied().unwrap_or(total_s).min(total_s);
        let (from, to) = (index(start_s), index(end_s));
        if from >= to {
            continue;
        }
        let levels: Vec<(String, f64)> = series
            .iter()
            .filter_map(|s| Some((s.variant.clone(), level_of(&s.rates, from, to)?)))
            .collect();
        let level = |v: &str| levels.iter().find(|(n, _)| n == v).map(|&(_, l)| l);
        let vsched = series.iter().find(|s| s.variant == "vsched")?;
        let vsched_level = level("vsched")?;
        phases.push(PhaseResult {
            name: name.to_string(),
            start_s,
            end_s,
            vsched_over_default: vsched_level / level("default")?,
            vsched_recovery_s: recovery(&vsched.rates[from..to], vsched_level)
                .map(|k| k as f64 * interval_s),
            levels,
        });
    }
    Some(TimelineResult {
        interval_s,
        series,
        phases,
    })
}

/// The interval rates `t0`, `t1`, ... from a variant's medians, in order
/// (up to the first one missing).
fn interval_rates(medians: &[(String, f64)]) -> Vec<f64> {
    let get = |k: usize| {
        let key = format!("t{k}");
        medians.iter().find(|(n, _)| *n == key).map(|&(_, v)| v)
    };
    (0..).map_while(get).collect()
}

/// Intervals from a phase's start until its rate reaches `level` (by
/// RECOVERED_SHARE) and stays there RECOVERED_FOR intervals: the time the
/// change cost, counted in whole intervals.
fn recovery(rates: &[f64], level: f64) -> Option<usize> {
    let ok: Vec<bool> = rates
        .iter()
        .map(|&r| r >= RECOVERED_SHARE * level)
        .collect();
    (0..rates.len()).find(|&k| {
        let run = &ok[k..(k + RECOVERED_FOR).min(ok.len())];
        run.len() == RECOVERED_FOR && run.iter().all(|&o| o)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians(rates: &[f64]) -> Vec<(String, f64)> {
        let mut m: Vec<(String, f64)> = rates
            .iter()
            .enumerate()
            .map(|(k, &r)| (format!("t{k}"), r))
            .collect();
        m.push(("interval_ms".into(), 250.0));
        m
    }

    #[test]
    fn a_phase_is_judged_by_its_second_half_and_recovery_by_a_steady_return() {
        // Two phases of 8 intervals (2 s each at 250 ms). Default drops to
        // 40 in phase 2; vsched dips, blips up once, then recovers to 90
        // from its 4th interval (1 s after the change).
        let default = [100.0; 8]
            .iter()
            .chain(&[40.0; 8])
            .copied()
            .collect::<Vec<_>>();
        let vsched = [100.0; 8]
            .iter()
            .chain(&[30.0, 95.0, 30.0, 30.0, 90.0, 92.0, 88.0, 90.0])
            .copied()
            .collect::<Vec<_>>();
        let t = analyse(
            &[
                ("default".into(), medians(&default)),
                ("vsched".into(), medians(&vsched)),
            ],
            0.25,
            &["before", "after"],
            &[0.0, 2.0],
        )
        .unwrap();
        assert_eq!(t.phases.len(), 2);
        let after = &t.phases[1];
        assert_eq!(
            after.levels,
            vec![("default".into(), 40.0), ("vsched".into(), 90.0)]
        );
        assert!((after.vsched_over_default - 2.25).abs() < 1e-9);
        // The lone 95 is not a recovery: two intervals in a row are.
        assert_eq!(after.vsched_recovery_s, Some(1.0));
        assert_eq!(t.phases[0].vsched_recovery_s, Some(0.0));
        assert_eq!(t.slowest_recovery_s(), Some(1.0));
    }

    #[test]
    fn a_phase_that_never_recovers_fails_the_whole_timeline() {
        let flat = [50.0; 8];
        let late = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 60.0];
        let t = analyse(
            &[
                ("default".into(), medians(&flat)),
                ("vsched".into(), medians(&late)),
            ],
            0.25,
            &["only"],
            &[0.0],
        )
        .unwrap();
        // Level 10 (the second half's median): reached at once.
        assert_eq!(t.phases[0].vsched_recovery_s, Some(0.0));
        let never = [10.0, 10.0, 10.0, 10.0, 50.0, 10.0, 50.0, 10.0];
        let t = analyse(
            &[
                ("default".into(), medians(&flat)),
                ("vsched".into(), medians(&never)),
            ],
            0.25,
            &["only"],
            &[0.0],
        )
        .unwrap();
        // Level 30: never two intervals in a row above 24.
        assert_eq!(t.phases[0].vsched_recovery_s, None);
        assert_eq!(t.slowest_recovery_s(), None);
    }
}
