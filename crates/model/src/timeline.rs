//! What one prober thread saw during one sampling window, and what that
//! says about its vCPU: gaps in its timeline, inactive episodes, the share
//! of time the vCPU was available, and its speed.
//!
//! A prober spins on a vCPU reading the clock; any jump between two reads
//! longer than the detection threshold is a *gap*: the prober did not run.
//! At each gap the prober also reads its own run delay (time spent waiting
//! in the guest's run queue: another guest task ran) and its own CPU time
//! (which the guest keeps advancing while the hypervisor has silently
//! descheduled the vCPU, but not while it reports the time as steal). That
//! splits every gap into three parts:
//!
//! * `guest_ns`: a task of the guest ran instead (run delay grew);
//! * `hidden_ns`: the hypervisor took the vCPU and did not report steal;
//! * the rest: reported steal (or interrupt time).

use crate::stats::percentile;
use serde::{Deserialize, Serialize};

/// The two kinds of sampling window (vSched's vcap phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// SCHED_IDLE: uses only idle cycles; guest tasks pre-empt it freely, so
    /// only the hypervisor's part of each gap means "vCPU unavailable".
    Light,
    /// High priority: nothing a normal task can do pre-empts it, so every gap
    /// is time the vCPU could not give to normal-priority work.
    Heavy,
}

/// One interruption of a prober's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Start, relative to the window's start.
    pub start_ns: u64,
    pub len_ns: u64,
    /// Part of the gap during which another guest task ran.
    pub guest_ns: u64,
    /// Part during which the guest believed the prober ran but it did not.
    pub hidden_ns: u64,
}

impl Gap {
    /// Part of the gap attributable to the hypervisor (reported or hidden).
    pub fn hypervisor_ns(&self) -> u64 {
        self.len_ns.saturating_sub(self.guest_ns)
    }

    /// Builds a gap from raw deltas, clamping them to the gap's length.
    /// `run_delay_delta_ns` and `cpu_delta_ns` are measured since the end of
    /// the previous gap; `ran_ns` is how long the prober ran in between,
    /// which the CPU-time delta also contains.
    pub fn from_deltas(
        start_ns: u64,
        len_ns: u64,
        run_delay_delta_ns: u64,
        cpu_delta_ns: u64,
        ran_ns: u64,
    ) -> Gap {
        let guest_ns = run_delay_delta_ns.min(len_ns);
        let hidden_ns = cpu_delta_ns.saturating_sub(ran_ns).min(len_ns - guest_ns);
        Gap {
            start_ns,
            len_ns,
            guest_ns,
            hidden_ns,
        }
    }
}

/// Everything one prober recorded in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub cpu: u32,
    pub phase: Phase,
    pub window_ns: u64,
    /// Work loop iterations completed (a unit of CPU work, same on every vCPU).
    pub work_units: u64,
    /// Steal the kernel reported for this vCPU over the window (/proc/stat).
    pub reported_steal_ns: u64,
    pub gaps: Vec<Gap>,
    /// Median work rate (units per µs) over stretches of uninterrupted
    /// running (`SPEED_CHUNK_NS` each); absent in older traces.
    #[serde(default)]
    pub median_chunk_speed: Option<f64>,
}

/// Hypervisor parts of gaps from this long are off periods that the
/// watched part of a light window stands for (`hypervisor_frac_watched`):
/// a host's scheduler switches a vCPU off for milliseconds (a cap's
/// throttling, a stacked sibling's slice). Shorter parts come with each
/// of the guest's task switches (its kernel's switch path, the emulator's
/// work) and would be scaled up with them: a free vCPU under a barrier
/// load, its prober pre-empted 2,500 times a second, read 92% available
/// scaled from 0 µs, 95% from 200 µs and 97.5% (as unscaled) from 500 µs,
/// while a vCPU capped at 10% read 7% at every threshold.
pub const WATCHED_MIN_GAP_NS: u64 = 500_000;

/// Length of the uninterrupted stretches the chunk speed is measured over.
pub const SPEED_CHUNK_NS: u64 = 1_000_000;

impl Timeline {
    /// Time the prober actually ran.
    pub fn run_ns(&self) -> u64 {
        let gap_total: u64 = self.gaps.iter().map(|g| g.len_ns).sum();
        self.window_ns.saturating_sub(gap_total)
    }

    /// The part of a gap that counts as the vCPU being unavailable in this phase.
    pub fn unavailable_part(&self, gap: &Gap) -> u64 {
        match self.phase {
            Phase::Heavy => gap.len_ns,
            Phase::Light => gap.hypervisor_ns(),
        }
    }

    fn fraction(&self, ns: u64) -> f64 {
        if self.window_ns == 0 {
            0.0
        } else {
            (ns as f64 / self.window_ns as f64).clamp(0.0, 1.0)
        }
    }

    /// Share of the window the hypervisor held the vCPU: the larger of what
    /// the prober saw and what the kernel reported (reported steal also
    /// covers time when a guest task, not the prober, was running).
    pub fn hypervisor_frac(&self) -> f64 {
        let seen: u64 = self.gaps.iter().map(|g| g.hypervisor_ns()).sum();
        self.fraction(seen.max(self.reported_steal_ns))
    }

    /// Share of the window the hypervisor held the vCPU without reporting it.
    pub fn hidden_frac(&self) -> f64 {
        self.fraction(self.gaps.iter().map(|g| g.hidden_ns).sum())
    }

    /// Share of the window guest tasks pre-empted the prober.
    pub fn guest_frac(&self) -> f64 {
        self.fraction(self.gaps.iter().map(|g| g.guest_ns).sum())
    }

    /// [`Self::hypervisor_frac`] with the long off periods read over the
    /// part of the window the prober watched: the window less the time
    /// guest tasks held the vCPU. While the prober waits behind a guest
    /// task it waits through the vCPU's off periods too, and they read as
    /// guest time; the host switches a vCPU off whichever guest task runs
    /// on it, so the share of long off periods seen while watching stands
    /// for the whole window. Short hypervisor parts of gaps (under
    /// [`WATCHED_MIN_GAP_NS`]) come with the guest's own task switches and
    /// are taken over the whole window. Measured in the lab: a vCPU capped
    /// at 10% under a 2-thread barrier load read 30% available over the
    /// whole window (guest 25%, hypervisor 70%) and 7% this way, where the
    /// same vCPU idle read 6%; a free vCPU under the same load reads 97.5%
    /// either way. Reported steal is the kernel's over the whole window and
    /// is taken as it is.
    pub fn hypervisor_frac_watched(&self) -> f64 {
        self.watched(Gap::hypervisor_ns)
            .max(self.reported_steal_frac())
    }

    /// [`Self::hidden_frac`] read as [`Self::hypervisor_frac_watched`]
    /// (the hidden part of a gap whose hypervisor part is long is scaled).
    pub fn hidden_frac_watched(&self) -> f64 {
        self.watched(|g| g.hidden_ns)
    }

    /// The `part` of every gap as a share of the window, where the gap's
    /// hypervisor part is long (from [`WATCHED_MIN_GAP_NS`]) as a share of
    /// the watched part (the window less the guest's time; the whole
    /// window when the guest held all of it).
    fn watched(&self, part: impl Fn(&Gap) -> u64) -> f64 {
        let guest: u64 = self.gaps.iter().map(|g| g.guest_ns).sum();
        let (mut short, mut long) = (0u64, 0u64);
        for g in &self.gaps {
            let p = part(g);
            if g.hypervisor_ns() >= WATCHED_MIN_GAP_NS {
                long += p;
            } else {
                short += p;
            }
        }
        let watched = self.window_ns.saturating_sub(guest);
        if watched == 0 {
            return self.fraction(short + long);
        }
        (self.fraction(short) + long as f64 / watched as f64).clamp(0.0, 1.0)
    }

    pub fn reported_steal_frac(&self) -> f64 {
        self.fraction(self.reported_steal_ns)
    }

    /// Work per microsecond of running time: the speed of the core under
    /// the vCPU. The median over uninterrupted stretches when there were
    /// any (robust to the slow restart after each interruption: cold caches,
    /// an emulator's code cache), else the whole window's average. `None`
    /// when the prober never ran.
    pub fn speed(&self) -> Option<f64> {
        if self.median_chunk_speed.is_some() {
            return self.median_chunk_speed;
        }
        let run = self.run_ns();
        (run > 0 && self.work_units > 0).then(|| self.work_units as f64 / (run as f64 / 1_000.0))
    }

    /// Inactive episodes (lengths in ns) under the given filter.
    pub fn episodes(&self, filter: &EpisodeFilter) -> Vec<u64> {
        filter.episodes(self)
    }
}

/// How raw gaps become inactive episodes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpisodeFilter {
    /// Gaps shorter than this are interrupts, kernel threads or host
    /// housekeeping, not a vCPU being switched off.
    pub min_episode_ns: u64,
    /// Two gaps separated by less running time than this are one episode
    /// (e.g. an interrupt handled right as the vCPU comes back).
    pub merge_ns: u64,
}

impl Default for EpisodeFilter {
    fn default() -> Self {
        EpisodeFilter {
            min_episode_ns: 200_000,
            merge_ns: 20_000,
        }
    }
}

impl EpisodeFilter {
    pub fn episodes(&self, t: &Timeline) -> Vec<u64> {
        let mut out = Vec::new();
        // (end of the current merged episode, its accumulated unavailable length)
        let mut current: Option<(u64, u64)> = None;
        for gap in &t.gaps {
            let part = t.unavailable_part(gap);
            if part == 0 {
                // A gap that was the guest's own doing ends any open episode.
                if let Some((_, len)) = current.take() {
                    out.push(len);
                }
                continue;
            }
            current = match current {
                Some((end, len)) if gap.start_ns.saturating_sub(end) < self.merge_ns => {
                    Some((gap.start_ns + gap.len_ns, len + part))
                }
                Some((_, len)) => {
                    out.push(len);
                    Some((gap.start_ns + gap.len_ns, part))
                }
                None => Some((gap.start_ns + gap.len_ns, part)),
            };
        }
        if let Some((_, len)) = current {
            out.push(len);
        }
        out.retain(|&len| len >= self.min_episode_ns);
        out
    }
}

/// Count, mean, median and tail of inactive-episode lengths ("vCPU latency").
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EpisodeStats {
    pub count: u64,
    pub mean_us: f64,
    /// The typical episode: unlike the mean, not pulled down by the host's
    /// own short interruptions (0.2-0.3 ms, a few per 100 ms on a busy
    /// host) nor up by the odd long one. Reports written before it existed
    /// read as 0.
    #[serde(default)]
    pub p50_us: f64,
    pub p95_us: f64,
    pub max_us: f64,
}

impl EpisodeStats {
    pub fn from_lengths_ns(lengths: &[u64]) -> EpisodeStats {
        if lengths.is_empty() {
            return EpisodeStats::default();
        }
        let mut sorted = lengths.to_vec();
        sorted.sort_unstable();
        let sum: u64 = sorted.iter().sum();
        EpisodeStats {
            count: sorted.len() as u64,
            mean_us: sum as f64 / sorted.len() as f64 / 1_000.0,
            p50_us: percentile(&sorted, 0.5) as f64 / 1_000.0,
            p95_us: percentile(&sorted, 0.95) as f64 / 1_000.0,
            max_us: *sorted.last().unwrap() as f64 / 1_000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(start_ms: f64, len_ms: f64, guest_ms: f64, hidden_ms: f64) -> Gap {
        let ns = |ms: f64| (ms * 1e6) as u64;
        Gap {
            start_ns: ns(start_ms),
            len_ns: ns(len_ms),
            guest_ns: ns(guest_ms),
            hidden_ns: ns(hidden_ms),
        }
    }

    fn timeline(phase: Phase, gaps: Vec<Gap>) -> Timeline {
        Timeline {
            cpu: 0,
            phase,
            window_ns: 100_000_000,
            work_units: 1_000_000,
            reported_steal_ns: 0,
            gaps,
            median_chunk_speed: None,
        }
    }

    #[test]
    fn gap_split_clamps_deltas() {
        // 5 ms gap, prober ran 1 ms before it; CPU time advanced 4 ms: 3 ms hidden.
        let g = Gap::from_deltas(0, 5_000_000, 0, 4_000_000, 1_000_000);
        assert_eq!(g.hidden_ns, 3_000_000);
        assert_eq!(g.hypervisor_ns(), 5_000_000);
        // Run delay larger than the gap (small gaps below threshold) is clamped.
        let g = Gap::from_deltas(0, 1_000_000, 2_000_000, 9_000_000, 0);
        assert_eq!((g.guest_ns, g.hidden_ns), (1_000_000, 0));
    }

    #[test]
    fn heavy_phase_counts_every_gap() {
        // A 5-of-10 ms neighbour: ten 5 ms gaps in 100 ms, all guest pre-emption.
        let gaps = (0..10)
            .map(|i| gap(i as f64 * 10.0, 5.0, 5.0, 0.0))
            .collect();
        let heavy = timeline(Phase::Heavy, gaps);
        let eps = heavy.episodes(&EpisodeFilter::default());
        assert_eq!(eps.len(), 10);
        let stats = EpisodeStats::from_lengths_ns(&eps);
        assert!((stats.mean_us - 5000.0).abs() < 1e-6);
        assert!((heavy.guest_frac() - 0.5).abs() < 1e-9);
        assert_eq!(heavy.hypervisor_frac(), 0.0);
        assert_eq!(heavy.run_ns(), 50_000_000);
    }

    #[test]
    fn light_phase_ignores_guest_preemption() {
        let gaps = vec![
            gap(0.0, 5.0, 5.0, 0.0),  // a guest task ran
            gap(20.0, 3.0, 0.0, 3.0), // hidden steal
            gap(40.0, 2.0, 0.0, 0.0), // reported steal
        ];
        let light = timeline(Phase::Light, gaps);
        let eps = light.episodes(&EpisodeFilter::default());
        assert_eq!(eps, vec![3_000_000, 2_000_000]);
        assert!((light.hypervisor_frac() - 0.05).abs() < 1e-9);
        assert!((light.hidden_frac() - 0.03).abs() < 1e-9);
    }

    #[test]
    fn short_gaps_are_filtered_and_close_ones_merged() {
        let gaps = vec![
            gap(0.0, 0.05, 0.0, 0.0),  // 50 us interrupt: filtered
            gap(10.0, 1.0, 0.0, 0.0),  // 1 ms ...
            gap(11.01, 0.5, 0.0, 0.0), // ... 10 us later another 0.5 ms: merged
            gap(30.0, 0.3, 0.0, 0.0),  // separate 0.3 ms episode
        ];
        let t = timeline(Phase::Heavy, gaps);
        assert_eq!(
            t.episodes(&EpisodeFilter::default()),
            vec![1_500_000, 300_000]
        );
    }

    #[test]
    fn reported_steal_covers_what_the_prober_could_not_see() {
        let mut t = timeline(Phase::Light, vec![gap(0.0, 1.0, 0.0, 0.0)]);
        t.reported_steal_ns = 30_000_000;
        assert!((t.hypervisor_frac() - 0.30).abs() < 1e-9);
        assert!((t.reported_steal_frac() - 0.30).abs() < 1e-9);
    }

    #[test]
    fn episode_stats() {
        let lens: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        let s = EpisodeStats::from_lengths_ns(&lens);
        assert_eq!(s.count, 100);
        assert!((s.mean_us - 50.5).abs() < 1e-9);
        assert_eq!(s.p50_us, 50.0);
        assert_eq!(s.p95_us, 95.0);
        assert_eq!(s.max_us, 100.0);
        assert_eq!(EpisodeStats::from_lengths_ns(&[]), EpisodeStats::default());
    }

    #[test]
    fn speed_is_work_per_running_time() {
        let mut t = timeline(Phase::Heavy, vec![]);
        assert!((t.speed().unwrap() - 10.0).abs() < 1e-9); // 1e6 units / 1e5 us
        t.gaps.push(gap(0.0, 50.0, 50.0, 0.0));
        assert!((t.speed().unwrap() - 20.0).abs() < 1e-9);
        t.gaps.push(gap(50.0, 50.0, 50.0, 0.0));
        assert_eq!(t.speed(), None);
    }
}
