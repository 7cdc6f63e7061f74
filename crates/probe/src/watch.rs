//! The probers' continuous loop as the long-running commands use it
//! (`vsched sched`, `vsched daemon`): `vsched probe --watch`'s default
//! windows and rhythm, one report per interval sent to a consumer.

use crate::plan::{self, WatchSchedule, Windows};
use crate::session::{ProbeOptions, Session};
use crate::vcap::SampleConfig;
use crate::vtop::VtopConfig;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vsched_model::report::ProbeReport;
use vsched_model::EpisodeFilter;

/// How a long-running command probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    /// One step (a light window, and heavy windows and topology checks
    /// when due) per interval.
    pub interval: Duration,
    pub windows: Windows,
    /// Known-stacked vCPUs get a topology check every 2 s: true where
    /// RWC may hide stacked vCPUs or IVH reads the stacking ([`WatchSchedule::recheck_stacked`]).
    pub recheck_stacked: bool,
}

impl WatchConfig {
    /// `--watch`'s windows ([`Windows::WATCH`], whatever the interval) for
    /// a step every `interval`, stacked vCPUs checked often.
    pub fn new(interval: Duration) -> WatchConfig {
        WatchConfig {
            interval,
            windows: Windows::WATCH,
            recheck_stacked: true,
        }
    }
}

/// Probes every online vCPU as `config` says, each report sent to
/// `reports`, with the session's overhead attached; returns when the
/// receiver is gone. Meant for a thread of its own.
pub fn feed_reports(config: WatchConfig, reports: mpsc::Sender<ProbeReport>) {
    let WatchConfig {
        interval,
        windows,
        recheck_stacked,
    } = config;
    let cpus = crate::sys::online_cpus().unwrap_or_else(|_| vec![0]);
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let mut session = Session::new(ProbeOptions {
        cpus,
        capacity: true,
        activity: true,
        topology: true,
        sample: SampleConfig {
            light_ns: ns(windows.light),
            heavy_ns: ns(windows.heavy),
            ..SampleConfig::default()
        },
        filter: EpisodeFilter::default(),
        vtop: VtopConfig::default(),
        straggler_ratio: plan::STRAGGLER_RATIO,
        ema_half_life_s: plan::EMA_HALF_LIFE.as_secs_f64(),
    });
    let mut schedule = WatchSchedule::new(
        plan::WATCH_HEAVY_EVERY,
        plan::WATCH_TOPOLOGY_EVERY,
        Instant::now(),
    )
    .recheck_stacked(recheck_stacked);
    let mut step = plan::first_step(false);
    loop {
        let began = Instant::now();
        let mut report = session.step(step, None);
        report.overhead = Some(session.overhead());
        if reports.send(report).is_err() {
            return;
        }
        std::thread::sleep(interval.saturating_sub(began.elapsed()));
        step = schedule.next(Instant::now(), session.signals());
    }
}
