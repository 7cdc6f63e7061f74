//! vcap: from timelines to capacity (0..1024, strongest vCPU = 1024),
//! availability and straggler flags.
//!
//! capacity = core speed x available share, where
//! * core speed is work per unit of running time in the heavy phase;
//! * available share = 1 - hypervisor share (light phase: steal, reported or
//!   hidden) - share taken by what pre-empts even a high-priority task
//!   (heavy phase: real-time tasks, interrupt storms).
//!
//! Time used by ordinary guest tasks is *not* unavailability: that is the
//! workload vsched places, and a busy vCPU is not a weak one.

use crate::ema::Ema;
use crate::timeline::{EpisodeFilter, EpisodeStats, Phase, Timeline};

/// Strongest vCPU's capacity, as on Linux's scale.
pub const CAPACITY_SCALE: u32 = 1024;

/// One vCPU's measurement from (at most) one light and one heavy window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VcpuSample {
    pub cpu: u32,
    pub available_frac: f64,
    pub hypervisor_frac: f64,
    pub hidden_frac: f64,
    pub reported_steal_frac: f64,
    /// The light window's prober waited behind guest tasks for so much of
    /// it (more than `BLIND_GUEST_SHARE`) that it could not see what the
    /// hypervisor took: `hypervisor_frac` and `hidden_frac` mean nothing.
    pub hypervisor_blind: bool,
    /// Share taken by guest work that outranks normal tasks (heavy phase
    /// only: `None` without one).
    pub preempted_frac: Option<f64>,
    /// Work units per µs of running time (heavy phase only).
    pub speed: Option<f64>,
    /// Inactive-episode lengths seen in either window.
    pub episodes_ns: Vec<u64>,
}

/// A light window whose prober waited behind guest tasks for more than this
/// share of it is blind to the hypervisor. The prober tells "the vCPU was
/// off" from "a guest task ran" by its own run delay, and while it waits
/// behind a task it waits through the vCPU's off periods too, which then
/// read as guest time. Found with a CPU-bound task on a vCPU capped at 50%
/// (10 ms period): the vCPU read 80% available. A quarter of a 100 ms
/// window is still several periods of a typical cap to time.
pub const BLIND_GUEST_SHARE: f64 = 0.75;

impl VcpuSample {
    /// Combines the windows measured on one vCPU. Either may be missing.
    pub fn from_timelines(
        cpu: u32,
        light: Option<&Timeline>,
        heavy: Option<&Timeline>,
        filter: &EpisodeFilter,
    ) -> VcpuSample {
        // The light window is the better steal reading (longer, and it does
        // not distort the vCPU); the heavy one stands in when it is all we
        // have, or when the light one is blind: its prober outranks guest
        // tasks, so it sees the vCPU's off periods through any load (a
        // straggler appearing under a CPU-bound workload went unseen until
        // the load ended).
        let light_blind = light.is_some_and(|t| t.guest_frac() > BLIND_GUEST_SHARE);
        let steal_source = if light_blind {
            heavy.or(light)
        } else {
            light.or(heavy)
        };
        // A light window the guest's tasks shared is read over the part the
        // prober watched (Timeline::hypervisor_frac_watched); a heavy one
        // is pre-empted only briefly, and its pre-emption is counted apart.
        let (hypervisor_frac, hidden_frac) = steal_source.map_or((0.0, 0.0), |t| match t.phase {
            Phase::Light => (t.hypervisor_frac_watched(), t.hidden_frac_watched()),
            Phase::Heavy => (t.hypervisor_frac(), t.hidden_frac()),
        });
        let hypervisor_blind = light_blind && heavy.is_none();
        let preempted_frac = heavy.map(Timeline::guest_frac);
        let mut episodes_ns = Vec::new();
        for t in light.into_iter().chain(heavy) {
            episodes_ns.extend(t.episodes(filter));
        }
        VcpuSample {
            cpu,
            available_frac: (1.0 - hypervisor_frac - preempted_frac.unwrap_or(0.0)).clamp(0.0, 1.0),
            hypervisor_frac,
            hypervisor_blind,
            hidden_frac,
            reported_steal_frac: steal_source.map_or(0.0, Timeline::reported_steal_frac),
            preempted_frac,
            speed: heavy.and_then(Timeline::speed),
            episodes_ns,
        }
    }
}

/// Smoothed state of one vCPU across sampling windows (`--watch`).
#[derive(Debug, Clone, PartialEq)]
pub struct VcpuEstimate {
    pub cpu: u32,
    /// Samples folded in so far; nothing is reported before the first.
    pub updates: u64,
    hypervisor: Ema,
    hidden: Ema,
    reported_steal: Ema,
    preempted: Ema,
    speed: Ema,
    /// Most recent episodes, newest last, at most `EPISODE_HISTORY`.
    recent_episodes_ns: Vec<u64>,
    /// The last sample could not read the hypervisor (a blind light
    /// window and no heavy one): the estimate kept its old reading.
    last_blind: bool,
}

/// A share of the vCPU's time (a quarter) by which two readings in a row
/// must differ from the smoothed one for the estimate to restart at the new
/// level (`Ema::with_step`). Quiet windows scatter by a few percent and a
/// noisy host's bursts by 10-20%; a cap set or lifted, or a neighbour
/// arriving, moves the share by 30-90%. With the 3 s half-life alone, a
/// vCPU capped to 10% took over 15 s to read as a straggler.
pub const STEP_SHARE: f64 = 0.25;

/// A factor by which the vCPU's available share (1 - the hypervisor's)
/// must change, two readings in a row, for the estimate to restart at the
/// new level even when the absolute change is under [`STEP_SHARE`]
/// (`Ema::with_share_step`): a vCPU at 33% that falls to 10% is a
/// straggler now. Twice: halving a vCPU's time is a change of regime,
/// while readings of a steady vCPU at 50% scatter by a few points. Near
/// zero the factor is easily passed (a vCPU capped at 10% read 2-9% in
/// the lab), and each far reading brings a heavy window forward, so the
/// ratio counts only where the larger share is at least
/// `Ema::RATIO_MIN_REST` (10%).
pub const STEP_AVAILABLE_RATIO: f64 = 2.0;

/// Episodes kept per vCPU for the mean/p95 ("vCPU latency").
pub const EPISODE_HISTORY: usize = 256;

impl VcpuEstimate {
    pub fn new(cpu: u32, half_life_s: f64) -> Self {
        VcpuEstimate {
            cpu,
            updates: 0,
            hypervisor: Ema::with_share_step(half_life_s, STEP_SHARE, STEP_AVAILABLE_RATIO),
            hidden: Ema::with_step(half_life_s, STEP_SHARE),
            reported_steal: Ema::with_step(half_life_s, STEP_SHARE),
            preempted: Ema::with_step(half_life_s, STEP_SHARE),
            speed: Ema::new(half_life_s),
            recent_episodes_ns: Vec::new(),
            last_blind: false,
        }
    }

    /// Folds in a sample taken at `now_s`. Quantities only a heavy window
    /// measures (speed, pre-emption) are left alone by light-only samples,
    /// and the hypervisor's share by a window blind to it (the estimate
    /// keeps its last reading until the prober runs again).
    pub fn update(&mut self, s: &VcpuSample, now_s: f64) {
        self.updates += 1;
        self.last_blind = s.hypervisor_blind;
        if !s.hypervisor_blind {
            self.hypervisor.update_at(s.hypervisor_frac, now_s);
            self.hidden.update_at(s.hidden_frac, now_s);
        }
        self.reported_steal.update_at(s.reported_steal_frac, now_s);
        if let Some(p) = s.preempted_frac {
            self.preempted.update_at(p, now_s);
        }
        if let Some(speed) = s.speed {
            self.speed.update_at(speed, now_s);
        }
        self.recent_episodes_ns.extend_from_slice(&s.episodes_ns);
        let excess = self
            .recent_episodes_ns
            .len()
            .saturating_sub(EPISODE_HISTORY);
        self.recent_episodes_ns.drain(..excess);
    }

    /// Whether the last sample read the hypervisor's share far from the
    /// estimate ([`STEP_SHARE`], or the available share halved or doubled:
    /// [`STEP_AVAILABLE_RATIO`]): the vCPU's lot may just have changed (a
    /// cap, a neighbour, a re-placement), which the next sample confirms.
    /// Never after a blind sample, which left the estimate as it was.
    pub fn shifting(&self) -> bool {
        !self.last_blind && self.hypervisor.step_pending()
    }

    /// Whether the last sample confirmed such a change: the estimate
    /// restarted at the new level.
    pub fn shifted(&self) -> bool {
        !self.last_blind && self.hypervisor.jumped()
    }

    /// Derived, not smoothed on its own: each part keeps its own rate.
    pub fn available_frac(&self) -> f64 {
        (1.0 - self.hypervisor_frac() - self.preempted_frac()).clamp(0.0, 1.0)
    }
    pub fn hypervisor_frac(&self) -> f64 {
        self.hypervisor.value().unwrap_or(0.0)
    }
    pub fn hidden_frac(&self) -> f64 {
        self.hidden.value().unwrap_or(0.0)
    }
    pub fn reported_steal_frac(&self) -> f64 {
        self.reported_steal.value().unwrap_or(0.0)
    }
    pub fn preempted_frac(&self) -> f64 {
        self.preempted.value().unwrap_or(0.0)
    }
    pub fn speed(&self) -> Option<f64> {
        self.speed.value()
    }
    pub fn episodes(&self) -> EpisodeStats {
        EpisodeStats::from_lengths_ns(&self.recent_episodes_ns)
    }

    /// Unnormalised capacity: work per µs of wall time the vCPU can deliver.
    pub fn raw_capacity(&self) -> Option<f64> {
        self.speed().map(|s| s * self.available_frac())
    }
}

/// Scales raw capacities so the strongest is 1024. A vCPU that could not be
/// measured gets `None`; one that was measured but did no work gets 1 (the
/// scale has no zero: an existing vCPU always has *some* capacity).
pub fn normalize_capacities(raw: &[Option<f64>]) -> Vec<Option<u32>> {
    let max = raw.iter().flatten().cloned().fold(0.0f64, f64::max);
    raw.iter()
        .map(|r| {
            r.map(|v| {
                if max <= 0.0 {
                    1
                } else {
                    ((v / max * CAPACITY_SCALE as f64).round() as u32).clamp(1, CAPACITY_SCALE)
                }
            })
        })
        .collect()
}

/// vCPUs whose capacity is below `ratio` x the mean capacity.
pub fn stragglers(capacities: &[Option<u32>], ratio: f64) -> Vec<bool> {
    let known: Vec<f64> = capacities.iter().flatten().map(|&c| c as f64).collect();
    if known.is_empty() {
        return vec![false; capacities.len()];
    }
    let mean = known.iter().sum::<f64>() / known.len() as f64;
    capacities
        .iter()
        .map(|c| c.is_some_and(|c| (c as f64) < ratio * mean))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Gap, Phase};

    fn tl(phase: Phase, gaps: Vec<Gap>, work: u64, steal_ns: u64) -> Timeline {
        Timeline {
            cpu: 0,
            phase,
            window_ns: 100_000_000,
            work_units: work,
            reported_steal_ns: steal_ns,
            gaps,
            median_chunk_speed: None,
        }
    }

    fn rt_gaps(on_ms: u64, period_ms: u64) -> Vec<Gap> {
        (0..100 / period_ms)
            .map(|i| Gap {
                start_ns: i * period_ms * 1_000_000,
                len_ns: on_ms * 1_000_000,
                guest_ns: on_ms * 1_000_000,
                hidden_ns: 0,
            })
            .collect()
    }

    #[test]
    fn realtime_neighbour_counts_in_heavy_not_light() {
        let light = tl(Phase::Light, rt_gaps(5, 10), 0, 0);
        let heavy = tl(Phase::Heavy, rt_gaps(5, 10), 500_000, 0);
        let s =
            VcpuSample::from_timelines(0, Some(&light), Some(&heavy), &EpisodeFilter::default());
        assert!((s.available_frac - 0.5).abs() < 1e-9);
        assert_eq!(s.hypervisor_frac, 0.0);
        // Light gaps are guest pre-emption: only the heavy window's 10 episodes count.
        assert_eq!(s.episodes_ns.len(), 10);
        assert!((s.speed.unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn steal_reduces_availability() {
        let light = tl(Phase::Light, vec![], 0, 30_000_000);
        let heavy = tl(Phase::Heavy, vec![], 1_000_000, 0);
        let s =
            VcpuSample::from_timelines(0, Some(&light), Some(&heavy), &EpisodeFilter::default());
        assert!((s.available_frac - 0.7).abs() < 1e-9);
        assert!((s.reported_steal_frac - 0.3).abs() < 1e-9);
    }

    #[test]
    fn normalisation_and_stragglers() {
        let caps = normalize_capacities(&[Some(10.0), Some(5.0), Some(0.5), None, Some(0.0)]);
        assert_eq!(caps, vec![Some(1024), Some(512), Some(51), None, Some(1)]);
        // mean of known = (1024+512+51+1)/4 = 397; 0.2 x mean = 79.4
        assert_eq!(
            stragglers(&caps, 0.2),
            vec![false, false, true, false, true]
        );
        assert_eq!(normalize_capacities(&[Some(0.0)]), vec![Some(1)]);
    }

    #[test]
    fn estimate_smooths_and_bounds_history() {
        let mut e = VcpuEstimate::new(0, 1.0);
        let mut s = VcpuSample {
            hypervisor_frac: 0.0,
            speed: Some(10.0),
            episodes_ns: vec![1_000_000; 200],
            ..Default::default()
        };
        e.update(&s, 0.0);
        s.hypervisor_frac = 1.0;
        e.update(&s, 1.0);
        assert!((e.available_frac() - 0.5).abs() < 1e-9);
        assert_eq!(e.episodes().count as usize, EPISODE_HISTORY);
        assert!((e.raw_capacity().unwrap() - 5.0).abs() < 1e-9);
        assert_eq!(e.updates, 2);
    }

    /// Regression: a capped vCPU running a CPU-bound task read 80%
    /// available instead of 50%, its light prober waiting behind the task
    /// through the off periods.
    #[test]
    fn a_window_blind_to_the_hypervisor_keeps_the_last_reading() {
        let mut e = VcpuEstimate::new(0, 1.0);
        let seen = VcpuSample {
            hypervisor_frac: 0.5,
            ..Default::default()
        };
        e.update(&seen, 0.0);
        let blind = VcpuSample {
            hypervisor_frac: 0.1,
            hypervisor_blind: true,
            ..Default::default()
        };
        for t in 1..5 {
            e.update(&blind, t as f64);
        }
        assert!(
            (e.available_frac() - 0.5).abs() < 1e-9,
            "{}",
            e.available_frac()
        );
    }

    #[test]
    fn a_light_window_mostly_spent_behind_guest_tasks_is_blind() {
        let t = |guest_ms: u64| Timeline {
            cpu: 0,
            phase: crate::timeline::Phase::Light,
            window_ns: 100_000_000,
            work_units: 0,
            reported_steal_ns: 0,
            gaps: vec![crate::timeline::Gap {
                start_ns: 0,
                len_ns: 90_000_000,
                guest_ns: guest_ms * 1_000_000,
                hidden_ns: 0,
            }],
            median_chunk_speed: None,
        };
        let f = EpisodeFilter::default();
        assert!(VcpuSample::from_timelines(0, Some(&t(80)), None, &f).hypervisor_blind);
        assert!(!VcpuSample::from_timelines(0, Some(&t(50)), None, &f).hypervisor_blind);
    }

    /// Regression: a straggler appearing under a CPU-bound workload went
    /// unseen while the load lasted (every light window blind); the heavy
    /// window's prober outranks the load and reads the hypervisor instead.
    #[test]
    fn a_blind_light_window_takes_the_hypervisor_from_the_heavy_one() {
        let f = EpisodeFilter::default();
        let mut light = tl(Phase::Light, vec![], 0, 0);
        light.gaps = vec![crate::timeline::Gap {
            start_ns: 0,
            len_ns: 90_000_000,
            guest_ns: 90_000_000,
            hidden_ns: 0,
        }];
        let heavy = tl(Phase::Heavy, vec![], 1_000_000, 90_000_000);
        let s = VcpuSample::from_timelines(0, Some(&light), Some(&heavy), &f);
        assert!(!s.hypervisor_blind);
        assert!(s.hypervisor_frac > 0.5, "{s:?}");
    }

    /// Regression (adaptability benchmark, straggler phase): a vCPU capped
    /// at 10% under a barrier load read 30% available, so RWC never hid
    /// it. The light prober watched 75% of its window and saw the
    /// hypervisor hold 70% of the window, i.e. 93% of what it watched.
    #[test]
    fn a_light_window_shared_with_guest_tasks_reads_the_hypervisor_over_what_it_watched() {
        let f = EpisodeFilter::default();
        let mut light = tl(Phase::Light, vec![], 0, 0);
        let ms = 1_000_000;
        light.gaps = vec![
            Gap {
                start_ns: 0,
                len_ns: 25 * ms,
                guest_ns: 25 * ms,
                hidden_ns: 0,
            },
            Gap {
                start_ns: 30 * ms,
                len_ns: 70 * ms,
                guest_ns: 0,
                hidden_ns: 70 * ms,
            },
        ];
        let s = VcpuSample::from_timelines(0, Some(&light), None, &f);
        assert!(!s.hypervisor_blind);
        assert!((s.hypervisor_frac - 70.0 / 75.0).abs() < 1e-9, "{s:?}");
        assert!((s.hidden_frac - 70.0 / 75.0).abs() < 1e-9, "{s:?}");
        assert!((s.available_frac - 5.0 / 75.0).abs() < 1e-9, "{s:?}");
        // A fully available vCPU stays so whatever its guest load.
        light.gaps.truncate(1);
        let s = VcpuSample::from_timelines(0, Some(&light), None, &f);
        assert_eq!(s.available_frac, 1.0);
        // Short hypervisor parts (the guest's task switches) are not scaled:
        // 70% guest, 100 gaps with 30 µs of hidden time each = 3%.
        light.gaps = (0..100)
            .map(|i| Gap {
                start_ns: i * ms,
                len_ns: 730_000,
                guest_ns: 700_000,
                hidden_ns: 30_000,
            })
            .collect();
        let s = VcpuSample::from_timelines(0, Some(&light), None, &f);
        assert!((s.available_frac - 0.97).abs() < 1e-9, "{s:?}");
        // A heavy window is read over the whole window, as before.
        let mut heavy = tl(Phase::Heavy, vec![], 1_000_000, 0);
        heavy.gaps = vec![Gap {
            start_ns: 0,
            len_ns: 50 * ms,
            guest_ns: 0,
            hidden_ns: 50 * ms,
        }];
        let s = VcpuSample::from_timelines(0, None, Some(&heavy), &f);
        assert!((s.hypervisor_frac - 0.5).abs() < 1e-9, "{s:?}");
    }

    /// Review: a blind sample leaves the estimate as it was, so it must not
    /// repeat the step signals of the sample before it.
    #[test]
    fn a_blind_sample_signals_no_shift() {
        let mut e = VcpuEstimate::new(0, 3.0);
        let reading = |h: f64, blind: bool| VcpuSample {
            hypervisor_frac: h,
            hypervisor_blind: blind,
            ..Default::default()
        };
        e.update(&reading(0.0, false), 0.0);
        e.update(&reading(0.9, false), 1.0);
        assert!(e.shifting() && !e.shifted());
        e.update(&reading(0.0, true), 2.0);
        assert!(!e.shifting() && !e.shifted() && e.last_blind);
        e.update(&reading(0.9, false), 3.0);
        assert!(e.shifted());
        e.update(&reading(0.0, true), 4.0);
        assert!(!e.shifted());
    }

    #[test]
    fn light_only_samples_keep_heavy_only_quantities() {
        // Real-time work takes half the vCPU; light-only samples in between
        // must not pull the pre-empted share (or availability) back up.
        let mut e = VcpuEstimate::new(0, 3.0);
        let heavy = VcpuSample {
            preempted_frac: Some(0.5),
            speed: Some(10.0),
            ..Default::default()
        };
        let light = VcpuSample {
            preempted_frac: None,
            speed: None,
            ..Default::default()
        };
        e.update(&heavy, 0.0);
        for t in 1..5 {
            e.update(&light, t as f64);
        }
        assert!(
            (e.available_frac() - 0.5).abs() < 1e-9,
            "{}",
            e.available_frac()
        );
        assert!((e.speed().unwrap() - 10.0).abs() < 1e-9);
    }
}
