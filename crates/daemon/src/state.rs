//! The running daemon: what each probe report changes (the metrics,
//! user-space RWC, the scheduler it feeds) and what the status socket
//! shows, in the typed schema `vsched status` reads back.

use crate::consolidate::{self, Consolidations, SharedRwc};
use crate::history::History;
use crate::metrics::Metrics;
use crate::rwc::{self, RwcError};
use crate::status::StatusSocket;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use vsched_model::report::ProbeReport;
use vsched_sched::{Ending, Event, ExitInfo, SchedError, Session, Stats};

/// The status schema's name and version.
pub const STATUS_SCHEMA: &str = "vsched.daemon-status/v1";

/// What `vsched status` gets: the daemon's identity, its last report,
/// what user-space RWC does and how its scheduler fares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub schema: String,
    pub pid: u32,
    pub started_unix_s: u64,
    pub metrics_url: String,
    pub model_updates: u64,
    pub report: Option<ProbeReport>,
    pub rwc: Option<RwcStatus>,
    pub sched: Option<SchedStatus>,
}

impl DaemonStatus {
    /// The status of this process before its first report.
    pub fn initial(metrics_url: String, rwc: Option<RwcStatus>) -> DaemonStatus {
        DaemonStatus {
            schema: STATUS_SCHEMA.to_string(),
            pid: std::process::id(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            metrics_url,
            model_updates: 0,
            report: None,
            rwc,
            sched: None,
        }
    }
}

/// The daemon's scheduler (`--sched`) as `vsched status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedStatus {
    pub loaded: bool,
    /// Why the kernel ejected it, if it did.
    pub ejected: Option<ExitInfo>,
    /// Its counters over every load (name: count).
    pub counters: serde_json::Map<String, serde_json::Value>,
    /// The vCPUs its consolidation parks now (`--consolidate`; absent
    /// from the status of daemons before it: none).
    #[serde(default)]
    pub parked: Vec<u32>,
}

/// User-space RWC (`--rwc-cgroup`) as `vsched status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RwcStatus {
    pub cgroups: Vec<PathBuf>,
    pub dry_run: bool,
    /// The vCPUs kept out of the cgroups' cpusets now.
    pub hidden: Vec<u32>,
    /// cpuset rewrites so far.
    pub changes: u64,
    /// With `--consolidate-cgroups`: each cgroup's active set now, in the
    /// order of `cgroups` (absent without it, and from the status of
    /// daemons before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<Vec<Vec<u32>>>,
    /// With `--consolidate-cgroups`: the vCPUs in no cgroup's active set
    /// that some cgroup could use (`CpusetRwc::parked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<Vec<u32>>,
}

/// What the main loop shares with the status socket's thread.
pub struct Latest {
    pub status: DaemonStatus,
    pub history: History,
}

/// Locks `latest`, even if a thread panicked holding it: the status is
/// plain data, complete after every update.
pub fn lock(latest: &Mutex<Latest>) -> MutexGuard<'_, Latest> {
    latest.lock().unwrap_or_else(|e| e.into_inner())
}

/// Answers the status socket from `latest` on a thread of its own: the
/// status, or with the request "history" the recent reports.
pub fn serve_status(
    socket: Arc<StatusSocket>,
    latest: Arc<Mutex<Latest>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || {
            socket.serve(&|request| {
                let guard = lock(&latest);
                if request == "history" {
                    return serde_json::to_string(&guard.history.answer()).unwrap_or_default();
                }
                serde_json::to_string(&guard.status).unwrap_or_default()
            })
        })
}

#[derive(Debug, thiserror::Error)]
pub enum RunningError {
    #[error("user-space RWC could not save the cpusets; nothing was changed")]
    Rwc(#[source] RwcError),
    #[error("feeding the scheduler")]
    Sched(#[source] SchedError),
}

/// The daemon's parts a probe report goes to.
pub struct Running {
    metrics: Arc<Metrics>,
    latest: Arc<Mutex<Latest>>,
    rwc: Option<SharedRwc>,
    /// `--consolidate-cgroups`: a consolidation per managed cgroup.
    consolidations: Option<Consolidations>,
    sched: Option<Session>,
    /// The scheduler's counters as last put into the metrics.
    counted: Stats,
}

/// How the daemon's stop went.
pub struct Stopped {
    /// The scheduler's session, if it had one.
    pub sched: Option<Ending>,
    /// Putting the cpusets back, if RWC ran.
    pub rwc: Option<rwc::Outcome>,
    /// What each cgroup's consolidation did, if they ran (None for one
    /// whose thread panicked), in the cgroups' order.
    pub consolidations: Vec<Option<vsched_consolidate::Report>>,
}

impl Running {
    pub fn new(
        metrics: Arc<Metrics>,
        latest: Arc<Mutex<Latest>>,
        rwc: Option<SharedRwc>,
        consolidations: Option<Consolidations>,
        sched: Option<Session>,
    ) -> Running {
        Running {
            metrics,
            latest,
            rwc,
            consolidations,
            sched,
            counted: Stats::default(),
        }
    }

    /// Hands a report to the metrics, RWC, the scheduler and the status;
    /// what RWC changed, if it did.
    pub fn take(&mut self, r: ProbeReport) -> Result<Option<rwc::Change>, RunningError> {
        self.metrics
            .update(&r.vcpus, r.overhead.as_ref(), r.unix_time_ms);
        self.metrics.update_topology(r.topology.as_ref());
        let mut change = None;
        let mut hidden = Vec::new();
        let mut active = None;
        let mut cgroups_parked = None;
        let mut rwc_changes = 0;
        if let Some(shared) = self.rwc.as_ref() {
            let mut rwc = consolidate::lock(shared);
            change = rwc.update(&r).map_err(RunningError::Rwc)?;
            hidden = rwc.hidden().to_vec();
            rwc_changes = rwc.changes();
            self.metrics.update_rwc(&r.vcpus, &hidden, change.is_some());
            if self.consolidations.is_some() {
                active = Some(rwc.active_sets());
                cgroups_parked = Some(rwc.parked());
            }
        }
        // vCPUs consolidation keeps off: the cgroups' and the scheduler's.
        let mut parked = cgroups_parked.clone().unwrap_or_default();
        let mut sched_status = None;
        if let Some(s) = self.sched.as_mut() {
            s.feed(&r).map_err(RunningError::Sched)?;
            let now = s.totals().map_err(RunningError::Sched)?;
            let sched_parked = s.parked().map_err(RunningError::Sched)?;
            self.metrics
                .update_sched(s.is_loaded(), &now.since(&self.counted).values);
            parked.extend(&sched_parked);
            sched_status = Some(SchedStatus {
                loaded: s.is_loaded(),
                ejected: None,
                counters: now.to_json_map(),
                parked: sched_parked,
            });
            self.counted = now;
        }
        parked.sort_unstable();
        parked.dedup();
        if self.sched.is_some() || self.consolidations.is_some() {
            self.metrics.update_parked(&r.vcpus, &parked);
        }
        let mut guard = lock(&self.latest);
        let status = &mut guard.status;
        status.model_updates += 1;
        if let Some(shown) = status.rwc.as_mut() {
            shown.hidden = hidden.clone();
            shown.changes = rwc_changes;
            shown.active = active;
            shown.parked = cgroups_parked;
        }
        if let Some(mut s) = sched_status {
            s.ejected = status.sched.as_ref().and_then(|old| old.ejected.clone());
            status.sched = Some(s);
        }
        guard
            .history
            .push(r.unix_time_ms, &r.vcpus, &hidden, &parked);
        guard.status.report = Some(r);
        Ok(change)
    }

    /// Whether the kernel unloaded the scheduler since the last call: the
    /// session loads it again when the kernel asks (a vCPU hot-plug);
    /// after an ejection for good the daemon goes on without it.
    pub fn check_scheduler(&mut self) -> Option<Event> {
        let event = self.sched.as_mut()?.check()?;
        if let Event::Ejected(exit) | Event::ReloadFailed { exit, .. } = &event {
            self.metrics.update_sched(false, &[]);
            let mut guard = lock(&self.latest);
            let status = guard.status.sched.get_or_insert_with(SchedStatus::default);
            status.loaded = false;
            status.ejected = Some(exit.clone());
        }
        Some(event)
    }

    /// Unloads the scheduler (the kernel's own is back), stops the
    /// consolidations and puts the cpusets back.
    pub fn stop(mut self) -> Stopped {
        let consolidations = self
            .consolidations
            .take()
            .map(Consolidations::stop)
            .unwrap_or_default();
        Stopped {
            sched: self.sched.take().map(Session::stop),
            rwc: self
                .rwc
                .as_ref()
                .map(|rwc| consolidate::lock(rwc).restore()),
            consolidations,
        }
    }
}
