//! User-space RWC for kernels without sched_ext: the tasks of configured
//! cgroups are kept off the vCPUs RWC hides (vsched-model's `rwc`: the
//! stragglers and all but one vCPU of each stacked group) by writing the
//! cgroups' cpusets, as vSched's own scripts do, but made safe:
//!
//! - a change is made only once two reports in a row ask for it
//!   (`rwc::Steady`), so one odd report moves no task;
//! - what each cpuset held (and where the cpuset controller had to be
//!   enabled) is saved to a state file *before* the first write, and put
//!   back on exit, Ctrl-C, SIGTERM and drop; after a SIGKILL the daemon's
//!   watchdog process, `vsched daemon --restore` (the systemd unit's
//!   ExecStopPost) or the next start put it back from that file;
//! - a cgroup is never left without a CPU, and `dry_run` only says what
//!   it would write.

use crate::cpuset::{self, Cgroup, CpusetError, Hierarchy, Restored};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use vsched_model::cpulist::parse_cpu_list;
use vsched_model::report::ProbeReport;
use vsched_model::rwc::Steady;

/// Where the state file goes unless told otherwise (/run: cleared at boot,
/// so a state file never outlives the configuration it describes).
pub const DEFAULT_STATE_FILE: &str = "/run/vsched/rwc-state.json";
const STATE_SCHEMA: &str = "vsched.rwc-state/v1";

#[derive(Debug, thiserror::Error)]
pub enum RwcError {
    #[error("cgroup {path}")]
    Cpuset {
        path: PathBuf,
        #[source]
        source: CpusetError,
    },
    #[error("state file {path}")]
    State {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {path} is not vsched's ({detail}); move it away if it is not needed")]
    BadState { path: PathBuf, detail: String },
    #[error(
        "another vsched daemon (pid {pid}) manages cpusets with state file {path}; \
         stop it first, or give this one another --rwc-state"
    )]
    AlreadyManaged { pid: u32, path: PathBuf },
    #[error(
        "{0} holds this daemon: its cpuset would confine the daemon's own probers, \
         which could then never measure a vCPU RWC hides again; run the daemon \
         outside it (the systemd drop-in vsched-rwc.conf puts it in vsched.slice; \
         by hand: systemd-run --scope --slice=vsched.slice vsched daemon ...)"
    )]
    HoldsTheDaemon(PathBuf),
}

/// What a cgroup held before the daemon's first write.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedGroup {
    path: PathBuf,
    hierarchy: Hierarchy,
    /// Its `cpuset.cpus` (v2: "" means "the parent's").
    original_cpus: String,
    /// v2 ancestors where the daemon enabled the cpuset controller.
    controller_enabled_in: Vec<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedState {
    schema: String,
    pid: u32,
    groups: Vec<SavedGroup>,
}

/// One cgroup's change, as a change is reported (and, dry, only printed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupChange {
    pub path: PathBuf,
    pub from: String,
    pub to: String,
}

/// A change of the hidden set and what it did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub hidden: Vec<u32>,
    pub groups: Vec<GroupChange>,
    /// Groups that could not be written (e.g. cgroup v1 refuses to take
    /// CPUs from a group whose child cpusets use them), one line each.
    pub failures: Vec<String>,
    pub dry_run: bool,
}

/// The daemon's RWC: the managed cgroups and what it has changed.
pub struct CpusetRwc {
    groups: Vec<Cgroup>,
    /// Per group: the size of its active set while consolidation
    /// (crate::consolidate) narrows it, None while it may use every
    /// vCPU RWC leaves it.
    active: Vec<Option<usize>>,
    /// The kernel's preferred CPUs (vsched_consolidate::preferred): they
    /// join an active set first.
    preferred: Option<Vec<u32>>,
    state_file: PathBuf,
    dry_run: bool,
    steady: Steady,
    hidden: Vec<u32>,
    /// Set once the first write is about to happen (and the state file
    /// exists); None while nothing was changed.
    saved: Option<Vec<SavedGroup>>,
    changes: u64,
}

/// What `start` found left by a daemon that did not stop cleanly.
#[derive(Debug)]
pub struct Recovered {
    pub pid: u32,
    pub groups: usize,
    pub outcome: Outcome,
}

impl CpusetRwc {
    /// Checks every cgroup (reads only), and first puts back what a daemon
    /// that died left changed (its state file); refuses while the daemon
    /// that wrote the state file still runs.
    pub fn start(
        paths: &[PathBuf],
        state_file: &Path,
        dry_run: bool,
    ) -> Result<(CpusetRwc, Option<Recovered>), RwcError> {
        let groups = paths
            .iter()
            .map(|p| {
                Cgroup::open(p).map_err(|source| RwcError::Cpuset {
                    path: p.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !dry_run {
            if let Some(g) = groups.iter().find(|g| g.holds_process(std::process::id())) {
                return Err(RwcError::HoldsTheDaemon(g.path.clone()));
            }
        }
        let recovered = if dry_run {
            None
        } else {
            restore_file(state_file)?
        };
        Ok((
            CpusetRwc {
                active: vec![None; groups.len()],
                preferred: None,
                groups,
                state_file: state_file.to_path_buf(),
                dry_run,
                steady: Steady::default(),
                hidden: Vec::new(),
                saved: None,
                changes: 0,
            },
            recovered,
        ))
    }

    /// Feeds one probe report; writes the cpusets when the (steady)
    /// hidden set changed and returns what changed. Errs only when the
    /// state file cannot be written (then nothing was changed).
    pub fn update(&mut self, report: &ProbeReport) -> Result<Option<Change>, RwcError> {
        let hidden = self.steady.update(report);
        if hidden == self.hidden {
            return Ok(None);
        }
        if !self.dry_run && self.saved.is_none() {
            self.save()?;
        }
        let mut groups = Vec::new();
        let mut failures = Vec::new();
        self.hidden = hidden.clone();
        for i in 0..self.groups.len() {
            match self.change_group(i) {
                Ok(Some(change)) => groups.push(change),
                Ok(None) => {}
                Err(source) => failures.push(crate::error_chain(&RwcError::Cpuset {
                    path: self.groups[i].path.clone(),
                    source,
                })),
            }
        }
        self.changes += 1;
        Ok(Some(Change {
            hidden,
            groups,
            failures,
            dry_run: self.dry_run,
        }))
    }

    /// What group `i` held before the daemon's first write.
    fn original(&self, i: usize) -> String {
        match &self.saved {
            Some(saved) => saved[i].original_cpus.clone(),
            None => self.groups[i]
                .configured_cpus()
                .ok()
                .flatten()
                .unwrap_or_default(),
        }
    }

    /// The vCPUs group `i` may use while the hidden ones are hidden, in
    /// the order they join an active set (the kernel's preferred first).
    fn usable(&self, i: usize) -> Result<Vec<u32>, CpusetError> {
        let base = base_cpus(&self.groups[i], &self.original(i))?;
        let usable: Vec<u32> = base
            .iter()
            .copied()
            .filter(|c| !self.hidden.contains(c))
            .collect();
        let usable = if usable.is_empty() { base } else { usable };
        Ok(vsched_consolidate::preferred::join_order(
            &usable,
            self.preferred.as_deref(),
        ))
    }

    /// Writes (unless dry) group `i`'s cpuset for the hidden vCPUs (see
    /// `target_cpus`) and, while consolidated, its active set.
    fn change_group(&self, i: usize) -> Result<Option<GroupChange>, CpusetError> {
        let group = &self.groups[i];
        let original = self.original(i);
        let from = group.configured_cpus()?.unwrap_or_default();
        let to = match self.active[i] {
            Some(n) => vsched_model::cpulist::format_cpu_list(&self.first_usable(i, n)?),
            None => target_cpus(&base_cpus(group, &original)?, &self.hidden, &original),
        };
        if from == to {
            return Ok(None);
        }
        if !self.dry_run {
            group.write_cpus(&to)?;
        }
        Ok(Some(GroupChange {
            path: group.path.clone(),
            from,
            to,
        }))
    }

    /// The vCPUs hidden now.
    pub fn hidden(&self) -> &[u32] {
        &self.hidden
    }

    /// Changes of the hidden set so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether changes are only printed (`--dry-run`).
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The cgroups managed, in the order given.
    pub fn groups(&self) -> &[Cgroup] {
        &self.groups
    }

    /// Each group's active set now: its consolidation's, or every vCPU
    /// it may use.
    pub fn active_sets(&self) -> Vec<Vec<u32>> {
        (0..self.groups.len())
            .map(|i| self.active_set(i, self.active[i].unwrap_or(usize::MAX)))
            .collect()
    }

    /// The vCPUs consolidation keeps every group off now: usable by some
    /// group (not hidden, within its cpuset), in no group's active set.
    /// A vCPU one group is narrowed off but another still uses is not
    /// parked: it does not idle for the consolidation. In a dry run, those
    /// it would park (as `hidden` is what RWC would hide).
    pub fn parked(&self) -> Vec<u32> {
        let mut usable = BTreeSet::new();
        let mut active = BTreeSet::new();
        for i in 0..self.groups.len() {
            // One reading of the group's cpuset for both: its active set
            // is the first n of its usable vCPUs (`first_usable`).
            let Ok(all) = self.usable(i) else { continue };
            let n = self.active[i].unwrap_or(usize::MAX).max(1);
            active.extend(all.iter().take(n).copied());
            usable.extend(all);
        }
        // A group whose every vCPU is hidden keeps them all (`usable`):
        // those are hidden, not parked.
        usable
            .difference(&active)
            .copied()
            .filter(|cpu| !self.hidden.contains(cpu))
            .collect()
    }

    /// How many vCPUs group `i` may use now (at least 1): its CPUs
    /// without the hidden ones.
    pub fn usable_count(&self, i: usize) -> usize {
        self.usable(i).map_or(1, |u| u.len().max(1))
    }

    /// The vCPUs an active set of `n` is for group `i`, in numeric order.
    pub fn active_set(&self, i: usize, n: usize) -> Vec<u32> {
        self.first_usable(i, n).unwrap_or_default()
    }

    /// The first `n` (at least one) of group `i`'s usable vCPUs in joining
    /// order, in numeric order.
    fn first_usable(&self, i: usize, n: usize) -> Result<Vec<u32>, CpusetError> {
        let mut set = self.usable(i)?;
        set.truncate(n.max(1));
        set.sort_unstable();
        Ok(set)
    }

    /// A new preference of the kernel's (the order vCPUs join an active
    /// set); whether it changed. Every narrowed group's cpuset is
    /// rewritten for it at once (each consolidation thread would see the
    /// change only once, whichever reads the file first).
    pub fn prefer(&mut self, preferred: Option<&[u32]>) -> bool {
        if self.preferred.as_deref() == preferred {
            return false;
        }
        self.preferred = preferred.map(<[u32]>::to_vec);
        for i in 0..self.groups.len() {
            if self.active[i].is_some() {
                // A failure shows at the group's next write.
                let _ = self.change_group(i);
            }
        }
        true
    }

    /// Consolidation's active set for group `i`: its first `n` usable
    /// vCPUs (None: all of them), written at once (unless dry), the state
    /// saved first as for any change. What was written, if anything; a
    /// write that failed is tried again at the next call.
    pub fn set_active(
        &mut self,
        i: usize,
        n: Option<usize>,
    ) -> Result<Option<GroupChange>, RwcError> {
        let n = n.filter(|&n| n < self.usable_count(i));
        let previous = self.active[i];
        // Dry, nothing was written: each change is said once. With nothing
        // saved yet, nothing was written either, by RWC or by this.
        if previous == n && (self.dry_run || self.saved.is_none()) {
            return Ok(None);
        }
        if !self.dry_run && self.saved.is_none() {
            self.save()?;
        }
        self.active[i] = n;
        // Written only where the file differs (change_group compares).
        self.change_group(i).map_err(|source| {
            self.active[i] = previous;
            RwcError::Cpuset {
                path: self.groups[i].path.clone(),
                source,
            }
        })
    }

    /// Puts every cpuset back and removes the state file, unless
    /// something could not be put back (the state file then stays, for
    /// the watchdog, `--restore` or the next start).
    pub fn restore(&mut self) -> Outcome {
        let Some(saved) = self.saved.take() else {
            return Outcome::default();
        };
        let outcome = put_back(&saved);
        if outcome.failures.is_empty() {
            let _ = std::fs::remove_file(&self.state_file);
        }
        self.hidden.clear();
        outcome
    }

    /// Records every group's cpuset and enables the controller where v2
    /// needs it, then writes the state file: before any cpuset changes.
    fn save(&mut self) -> Result<(), RwcError> {
        let mut saved = Vec::new();
        for group in &self.groups {
            let enabled = group
                .enable_controller()
                .map_err(|source| RwcError::Cpuset {
                    path: group.path.clone(),
                    source,
                });
            let enabled = match enabled {
                Ok(e) => e,
                Err(e) => {
                    let _ = put_back(&saved);
                    return Err(e);
                }
            };
            let original = group.configured_cpus();
            saved.push(SavedGroup {
                path: group.path.clone(),
                hierarchy: group.hierarchy,
                original_cpus: original.ok().flatten().unwrap_or_default(),
                controller_enabled_in: enabled,
            });
        }
        let state = SavedState {
            schema: STATE_SCHEMA.into(),
            pid: std::process::id(),
            groups: saved.clone(),
        };
        if let Err(e) = write_state(&self.state_file, &state) {
            let _ = put_back(&saved);
            return Err(e);
        }
        self.saved = Some(saved);
        Ok(())
    }
}

impl Drop for CpusetRwc {
    fn drop(&mut self) {
        let outcome = self.restore();
        for e in &outcome.failures {
            eprintln!(
                "vsched daemon: could not restore: {}",
                crate::error_chain(e)
            );
        }
        for n in &outcome.notes {
            eprintln!("vsched daemon: {n}");
        }
    }
}

/// What a managed group's `cpuset.cpus` should say while `hidden` are
/// hidden: its usable CPUs (`base`) without them, or all of `base` when
/// nothing is hidden, written out even where the original was v2's ""
/// (the parent's): the kernel refuses to set a cgroup that has tasks back
/// to empty (ENOSPC), so a vCPU that recovers would stay hidden. Only the
/// restore at exit tries "" again. The original as it was if nothing
/// would be left.
fn target_cpus(base: &[u32], hidden: &[u32], original: &str) -> String {
    cpuset::without(base, hidden).unwrap_or_else(|| original.to_string())
}

/// The CPUs a group may use when nothing is hidden: its original list, or
/// (v2, "" = the parent's) what it inherits.
fn base_cpus(group: &Cgroup, original: &str) -> Result<Vec<u32>, CpusetError> {
    if !original.is_empty() {
        return parse_cpu_list(original).map_err(|_| CpusetError::Parse {
            path: group.path.join("cpuset.cpus"),
            text: original.to_string(),
        });
    }
    group.inherited_cpus()
}

/// What putting the cpusets back did: what failed (the state file then
/// stays), and what is back but not byte for byte (`Restored::Explicit`).
#[derive(Debug, Default)]
pub struct Outcome {
    pub failures: Vec<RwcError>,
    pub notes: Vec<String>,
}

fn put_back(saved: &[SavedGroup]) -> Outcome {
    let mut outcome = Outcome::default();
    for g in saved {
        let group = Cgroup {
            path: g.path.clone(),
            hierarchy: g.hierarchy,
        };
        // A group removed meanwhile has nothing to put back.
        if !g.path.exists() {
            continue;
        }
        match group.restore_cpus(&g.original_cpus) {
            // Disabling the controller below removes the file anyway.
            Ok(Restored::Explicit(list)) if g.controller_enabled_in.is_empty() => {
                outcome.notes.push(format!(
                    "{}/cpuset.cpus was empty (the parent's CPUs) and now names them, {list}: \
                     the kernel does not let a cgroup with tasks go back to empty",
                    g.path.display()
                ))
            }
            Ok(_) => {}
            Err(source) => outcome.failures.push(RwcError::Cpuset {
                path: g.path.clone(),
                source,
            }),
        }
        for source in cpuset::disable_controller(&g.controller_enabled_in) {
            outcome.failures.push(RwcError::Cpuset {
                path: g.path.clone(),
                source,
            });
        }
    }
    outcome
}

/// Puts back what the state file records when the daemon that wrote it is
/// gone (SIGKILL, a crash); Ok(None) when there is no state file. Refuses
/// while that daemon still runs.
pub fn restore_file(state_file: &Path) -> Result<Option<Recovered>, RwcError> {
    let text = match std::fs::read_to_string(state_file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RwcError::State {
                path: state_file.to_path_buf(),
                source,
            })
        }
    };
    let state: SavedState = serde_json::from_str(&text).map_err(|e| RwcError::BadState {
        path: state_file.to_path_buf(),
        detail: e.to_string(),
    })?;
    if state.schema != STATE_SCHEMA {
        return Err(RwcError::BadState {
            path: state_file.to_path_buf(),
            detail: format!("schema {:?}", state.schema),
        });
    }
    if state.pid != std::process::id() && daemon_alive(state.pid) {
        return Err(RwcError::AlreadyManaged {
            pid: state.pid,
            path: state_file.to_path_buf(),
        });
    }
    let outcome = put_back(&state.groups);
    if outcome.failures.is_empty() {
        std::fs::remove_file(state_file).map_err(|source| RwcError::State {
            path: state_file.to_path_buf(),
            source,
        })?;
    }
    Ok(Some(Recovered {
        pid: state.pid,
        groups: state.groups.len(),
        outcome,
    }))
}

/// Whether `pid` is a running vsched (its command name), not a process
/// that reused the number, nor a killed daemon its parent has not reaped
/// yet (a zombie keeps its name: seen in the lab, where the watchdog took
/// the SIGKILLed daemon for a live one and left the cpusets changed).
fn daemon_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| running_vsched(&stat))
}

/// From a /proc/PID/stat line: the command is vsched and the process is
/// neither a zombie nor dead. The command (in parentheses) may hold
/// spaces and parentheses itself: the state follows the last ')'.
fn running_vsched(stat: &str) -> bool {
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let comm = &stat[open + 1..close];
    let state = stat[close + 1..].trim_start().chars().next();
    comm == "vsched" && !matches!(state, Some('Z' | 'X' | 'x') | None)
}

/// Written to a temporary file and renamed, so that a reader (the
/// watchdog, the next start) never sees half a state.
fn write_state(path: &Path, state: &SavedState) -> Result<(), RwcError> {
    let err = |source| RwcError::State {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(state).expect("plain data serializes");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (found reading the code): when the last hidden vCPU
    /// came back, the cpuset was set back to v2's "" and the kernel
    /// refuses that for a cgroup with tasks; the recovered vCPU stayed
    /// hidden.
    #[test]
    fn a_recovered_vcpu_is_given_back_by_name_not_by_emptying_the_cpuset() {
        assert_eq!(target_cpus(&[0, 1, 2, 3], &[2, 3], ""), "0-1");
        assert_eq!(target_cpus(&[0, 1, 2, 3], &[], ""), "0-3");
        assert_eq!(target_cpus(&[0, 1], &[], "0-1"), "0-1");
        // Never nothing: the original stays.
        assert_eq!(target_cpus(&[3], &[3], ""), "");
        assert_eq!(target_cpus(&[3], &[3], "3"), "3");
    }

    /// Regression: a SIGKILLed daemon not yet reaped (a zombie) counted
    /// as alive, and its watchdog refused to restore.
    #[test]
    fn a_zombie_daemon_is_not_alive() {
        assert!(running_vsched("123 (vsched) S 1 123 123 0 -1"));
        assert!(!running_vsched("123 (vsched) Z 1 123 123 0 -1"));
        assert!(!running_vsched("123 (vsched) X 1"));
        assert!(!running_vsched("123 (sh) S 1"));
        assert!(!running_vsched("123 (a) b) S 1"));
        assert!(!running_vsched("garbage"));
        // This test process is alive but not named vsched.
        assert!(!daemon_alive(std::process::id()));
    }

    /// A fake v1 cgroup `g` whose cpuset holds `cpus`, in a fresh
    /// directory named after `test`: (the directory, the cgroup, the
    /// state file's path).
    fn fake_cgroup(test: &str, cpus: &str) -> (PathBuf, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("vsched-{test}-{}", std::process::id()));
        let group = dir.join("g");
        std::fs::create_dir_all(&group).unwrap();
        std::fs::write(group.join("cgroup.procs"), "").unwrap();
        std::fs::write(group.join("cpuset.cpus"), cpus).unwrap();
        let state_file = dir.join("state.json");
        (dir, group, state_file)
    }

    /// A cgroup that holds the daemon (here: a child of it holds this test
    /// process) is refused, except for a dry run, which writes nothing.
    #[test]
    fn a_cgroup_that_holds_the_daemon_is_refused() {
        let (dir, group, state_file) = fake_cgroup("holds", "0-3");
        std::fs::create_dir_all(group.join("child")).unwrap();
        std::fs::write(
            group.join("child/cgroup.procs"),
            format!("7\n{}\n", std::process::id()),
        )
        .unwrap();
        let groups = std::slice::from_ref(&group);
        assert!(matches!(
            CpusetRwc::start(groups, &state_file, false),
            Err(RwcError::HoldsTheDaemon(p)) if p == group
        ));
        assert!(CpusetRwc::start(groups, &state_file, true).is_ok());
        std::fs::write(group.join("child/cgroup.procs"), "7\n").unwrap();
        assert!(CpusetRwc::start(groups, &state_file, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A report of vCPUs 0-3 in which `stragglers` read as stragglers.
    fn report_with_stragglers(stragglers: &[u32]) -> ProbeReport {
        let mut r: ProbeReport =
            serde_json::from_str(include_str!("../../model/tests/data/report.json")).unwrap();
        r.overhead = None;
        r.vcpus = (0..4)
            .map(|cpu: u32| {
                serde_json::from_value(serde_json::json!({
                    "cpu": cpu, "capacity": 1024, "available_pct": null, "steal_pct": null,
                    "hidden_steal_pct": null, "preempted_pct": null, "speed_units_per_us": null,
                    "episodes": null, "stacked_with": [], "smt_siblings": [],
                    "llc_group": null, "socket_group": null,
                    "straggler": stragglers.contains(&cpu), "stacked": false
                }))
                .unwrap()
            })
            .collect();
        r
    }

    /// Consolidation's active set is the first n of the vCPUs RWC leaves
    /// (the kernel's preferred first), saved before its first write like
    /// any change, and the original comes back at the end.
    #[test]
    fn an_active_set_narrows_within_what_rwc_leaves_and_is_put_back() {
        let (dir, group, state_file) = fake_cgroup("active", "0-3");
        let cpus = || std::fs::read_to_string(group.join("cpuset.cpus")).unwrap();
        let (mut rwc, _) =
            CpusetRwc::start(std::slice::from_ref(&group), &state_file, false).unwrap();
        assert_eq!(rwc.usable_count(0), 4);
        // The first write is consolidation's: the state is saved first.
        assert!(rwc.set_active(0, Some(2)).unwrap().is_some());
        assert!(state_file.exists());
        assert_eq!(cpus(), "0-1");
        assert_eq!(rwc.parked(), [2, 3]);
        assert!(
            rwc.set_active(0, Some(2)).unwrap().is_none(),
            "no change, no write"
        );
        // RWC hides vCPU 0: the set of two moves to what is left.
        for _ in 0..vsched_model::rwc::CONFIRMING_REPORTS {
            rwc.update(&report_with_stragglers(&[0])).unwrap();
        }
        assert_eq!(rwc.hidden(), [0]);
        assert_eq!(rwc.usable_count(0), 3);
        assert_eq!(cpus(), "1-2");
        assert_eq!(rwc.parked(), [3], "a hidden vCPU is not parked");
        // The kernel's preference orders who joins first.
        assert!(rwc.prefer(Some(&[3])));
        rwc.set_active(0, Some(1)).unwrap();
        assert_eq!(cpus(), "3");
        assert_eq!(rwc.active_sets(), [vec![3]]);
        // The widest set is RWC's own.
        rwc.set_active(0, Some(3)).unwrap();
        assert_eq!(cpus(), "1-3");
        assert_eq!(rwc.active_sets(), [vec![1, 2, 3]]);
        assert!(rwc.parked().is_empty());
        rwc.set_active(0, Some(1)).unwrap();
        assert!(rwc.restore().failures.is_empty());
        assert_eq!(cpus(), "0-3");
        assert!(!state_file.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A vCPU one group is narrowed off is parked only if no other group
    /// uses it.
    #[test]
    fn a_vcpu_another_group_still_uses_is_not_parked() {
        let (dir, narrowed, state_file) = fake_cgroup("parked", "0-3");
        let wide = dir.join("wide");
        std::fs::create_dir_all(&wide).unwrap();
        std::fs::write(wide.join("cgroup.procs"), "").unwrap();
        std::fs::write(wide.join("cpuset.cpus"), "2").unwrap();
        let (mut rwc, _) = CpusetRwc::start(&[narrowed, wide], &state_file, false).unwrap();
        assert!(rwc.parked().is_empty());
        rwc.set_active(0, Some(1)).unwrap();
        assert_eq!(rwc.active_sets(), [vec![0], vec![2]]);
        assert_eq!(rwc.parked(), [1, 3]);
        rwc.set_active(1, Some(1)).unwrap();
        assert_eq!(
            rwc.parked(),
            [1, 3],
            "one vCPU is every set of the wide group"
        );
        assert!(rwc.restore().failures.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_file_of_a_live_daemon_is_refused_and_a_dead_ones_is_put_back() {
        let (dir, group, state_file) = fake_cgroup("rwc", "0");
        let state = |pid| SavedState {
            schema: STATE_SCHEMA.into(),
            pid,
            groups: vec![SavedGroup {
                path: group.clone(),
                hierarchy: Hierarchy::V1,
                original_cpus: "0-3".into(),
                controller_enabled_in: vec![],
            }],
        };
        // pid 1 is alive but not vsched: its state is stale.
        write_state(&state_file, &state(1)).unwrap();
        let recovered = restore_file(&state_file).unwrap().unwrap();
        assert_eq!((recovered.pid, recovered.groups), (1, 1));
        assert!(recovered.outcome.failures.is_empty());
        assert_eq!(
            std::fs::read_to_string(group.join("cpuset.cpus")).unwrap(),
            "0-3"
        );
        assert!(!state_file.exists());
        assert!(restore_file(&state_file).unwrap().is_none());
        // Our own pid counts as ours (a restart that reused it).
        write_state(&state_file, &state(std::process::id())).unwrap();
        assert!(restore_file(&state_file).unwrap().is_some());
        std::fs::write(&state_file, "{}").unwrap();
        assert!(matches!(
            restore_file(&state_file),
            Err(RwcError::BadState { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
