//! The daemon's recent past: per probe report, the figures a person
//! watches over time (availability, inactive episodes, capacity, what RWC
//! hides), kept for a fixed window so that `vsched status --plot` can draw
//! the last minutes without Prometheus.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use vsched_model::report::VcpuReport;

/// One vCPU in one report. f32 and ms: plenty for a plot, and half the
/// bytes of the report's f64 µs over a long window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VcpuPoint {
    pub cpu: u32,
    /// Share of time available, 0-1 (None: not measured).
    pub available: Option<f32>,
    pub episode_mean_ms: Option<f32>,
    pub episode_p95_ms: Option<f32>,
    pub capacity: Option<u32>,
    /// Kept off by user-space RWC at this report.
    pub hidden: bool,
    /// Parked by consolidation (the scheduler's, or the daemon's for its
    /// cgroups) at this report (absent from histories of daemons before
    /// it: false).
    #[serde(default)]
    pub parked: bool,
}

/// One report's points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub unix_ms: u64,
    pub vcpus: Vec<VcpuPoint>,
}

/// What `vsched status --plot` asks the socket for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryAnswer {
    pub schema: String,
    /// The window kept, in seconds.
    pub window_s: u64,
    pub samples: Vec<Sample>,
}

pub const HISTORY_SCHEMA: &str = "vsched.daemon-history/v1";

impl HistoryAnswer {
    /// Time from the oldest sample to the newest (0 with fewer than two).
    pub fn span_ms(&self) -> u64 {
        match (self.samples.first(), self.samples.last()) {
            (Some(first), Some(last)) => last.unix_ms.saturating_sub(first.unix_ms),
            _ => 0,
        }
    }
}

/// The last `window_ms` of samples, oldest first.
#[derive(Debug, Clone)]
pub struct History {
    window_ms: u64,
    samples: VecDeque<Sample>,
}

impl History {
    pub fn new(window_ms: u64) -> History {
        History {
            window_ms,
            samples: VecDeque::new(),
        }
    }

    /// Adds a report's rows (at `unix_ms`), with the vCPUs RWC hides and
    /// those consolidation parks, and forgets what fell out of the window.
    pub fn push(&mut self, unix_ms: u64, vcpus: &[VcpuReport], hidden: &[u32], parked: &[u32]) {
        let ms = |us: f64| (us / 1e3) as f32;
        self.samples.push_back(Sample {
            unix_ms,
            vcpus: vcpus
                .iter()
                .map(|v| VcpuPoint {
                    cpu: v.cpu,
                    available: v.available_pct.map(|p| (p / 100.0) as f32),
                    episode_mean_ms: v.episodes.as_ref().map(|e| ms(e.mean_us)),
                    episode_p95_ms: v.episodes.as_ref().map(|e| ms(e.p95_us)),
                    capacity: v.capacity,
                    hidden: hidden.contains(&v.cpu),
                    parked: parked.contains(&v.cpu),
                })
                .collect(),
        });
        while self
            .samples
            .front()
            .is_some_and(|s| unix_ms.saturating_sub(s.unix_ms) > self.window_ms)
        {
            self.samples.pop_front();
        }
    }

    pub fn answer(&self) -> HistoryAnswer {
        HistoryAnswer {
            schema: HISTORY_SCHEMA.into(),
            window_s: self.window_ms / 1000,
            samples: self.samples.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cpu: u32, available_pct: f64) -> VcpuReport {
        serde_json::from_value(serde_json::json!({
            "cpu": cpu, "capacity": 1000, "available_pct": available_pct, "steal_pct": null,
            "hidden_steal_pct": null, "preempted_pct": null, "speed_units_per_us": null,
            "episodes": {"count": 3, "mean_us": 1500.0, "p95_us": 3000.0, "max_us": 4000.0},
            "stacked_with": [], "smt_siblings": [], "llc_group": null, "socket_group": null,
            "straggler": false, "stacked": false
        }))
        .unwrap()
    }

    #[test]
    fn keeps_the_window_in_plot_units_and_marks_hidden_vcpus() {
        let mut h = History::new(10_000);
        for t in 0..30u64 {
            h.push(t * 1000, &[row(0, 50.0), row(1, 100.0)], &[1], &[0]);
        }
        let a = h.answer();
        // 19 s..29 s: samples at most 10 s older than the newest.
        assert_eq!(a.samples.len(), 11);
        assert_eq!(a.samples[0].unix_ms, 19_000);
        let p = &a.samples[0].vcpus[0];
        assert_eq!(
            (p.available, p.episode_mean_ms, p.hidden, p.parked),
            (Some(0.5), Some(1.5), false, true)
        );
        assert!(a.samples[0].vcpus[1].hidden && !a.samples[0].vcpus[1].parked);
    }
}
