//! `vsched lab check`: run the probe inside a guest and score it against
//! the ground truth the layout implies. With phases, the first report is
//! scored against the initial placement and the last against the final one
//! (the check command should then be a `vsched probe --watch`).

use crate::disturb::{self, Evidence};
use crate::error::{CheckError, Result};
use crate::layout::Layout;
use crate::run::{self, CommandResult, LabOptions, RunResult};
use crate::truth::{self, Item, Truth};
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use vsched_model::report::ProbeReport;

#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    /// "initial" or "final".
    pub when: String,
    pub report_sequence: u64,
    pub truth: Truth,
    pub items: Vec<Item>,
    /// The guest's probe report these items scored, for a look behind a
    /// failed item (each vCPU's absolute available share, for instance).
    pub report: ProbeReport,
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every scored item within its tolerance on an undisturbed host.
    Pass,
    /// Some scored item out of tolerance on an undisturbed host.
    Fail,
    /// The host's accounting shows the run was disturbed from outside the
    /// lab (see `disturb`): its items say nothing either way.
    Disturbed,
}

impl Verdict {
    /// Disturbance decides first: on a disturbed host a pass is as much
    /// luck as a failure. Without it, any scored item out of tolerance fails.
    pub fn of<'a>(items: impl IntoIterator<Item = &'a Item>, disturbances: &[Evidence]) -> Verdict {
        if !disturbances.is_empty() {
            Verdict::Disturbed
        } else if items.into_iter().all(|i| i.pass || !i.scored) {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }
}

/// Version of the check's JSON: 2 added `verdict`, `host_evidence` and
/// `disturbances` (and `pass` became false for a disturbed run).
pub const SCHEMA: &str = "vsched.lab-check/v2";

#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub schema: String,
    pub layout: String,
    pub accel: String,
    pub boot_ms: f64,
    pub reports: usize,
    pub scored: Vec<Scored>,
    pub verdict: Verdict,
    /// True exactly when the verdict is pass.
    pub pass: bool,
    /// Host steal of each host CPU the vCPUs use and unexplained waiting of
    /// each vCPU, against their limits (see `disturb`).
    pub host_evidence: Vec<Evidence>,
    /// The evidence beyond its limit (empty: the run was not disturbed).
    pub disturbances: Vec<Evidence>,
}

/// Probe reports in a command's output: one pretty object, or one per line.
pub fn parse_reports(output: &str) -> Result<Vec<ProbeReport>, CheckError> {
    let start = output.find('{').ok_or(CheckError::NoJson)?;
    let reports = serde_json::Deserializer::from_str(&output[start..])
        .into_iter::<ProbeReport>()
        .collect::<Result<Vec<ProbeReport>, _>>()
        .map_err(CheckError::BadJson)?;
    if reports.is_empty() {
        return Err(CheckError::NoReport);
    }
    Ok(reports)
}

/// The report that best shows the initial placement: the first, or with
/// phases the last one made at least 1.5 s before the first phase (by then
/// `--watch` has smoothed several samples, and the change is still ahead).
fn initial_report<'a>(layout: &Layout, reports: &'a [ProbeReport]) -> &'a ProbeReport {
    let Some(phase) = layout.phases.first() else {
        return &reports[0];
    };
    let t0 = reports[0].unix_time_ms;
    reports
        .iter()
        .take_while(|r| (r.unix_time_ms.saturating_sub(t0)) as f64 / 1e3 <= phase.at_s - 1.5)
        .last()
        .unwrap_or(&reports[0])
}

/// Host times (seconds since the first command) at which each report of a
/// check command's output began to arrive: lines that open a top-level JSON
/// object (a pretty report's first line, or a `--watch` report's only one).
pub fn report_arrivals(cmd: &CommandResult) -> Vec<f64> {
    cmd.output
        .lines()
        .zip(&cmd.line_at_s)
        .filter(|(line, _)| line.starts_with('{'))
        .map(|(_, &at)| at)
        .collect()
}

/// Trimmed from a located light window's start: the window's end is
/// placed to within the time the report takes to reach the host (a few
/// ms), and where the window starts is a thread start-up less certain.
const LOCATED_START_MARGIN_S: f64 = 0.1;
/// Trimmed from its end.
const LOCATED_END_MARGIN_S: f64 = 0.05;

/// Where a one-shot probe's light window lay on the host's timeline. The
/// probe prints its report as soon as the step ends, and the step ran the
/// heavy window, then the light one, then the topology probe, so the light
/// window ended `topology_ms` before the report arrived. Without an arrival
/// time it is assumed to start right after the command did, which is late
/// by however long the guest took to start the probe (0-0.7 s measured:
/// the host's shares then include idle time of the vCPUs, docs/lab.md).
pub fn light_window(report: &ProbeReport, arrived_s: Option<f64>, end_s: f64) -> (f64, f64) {
    window_before(
        ProbeWindows {
            heavy_s: report.settings.heavy_ms / 1e3,
            light_s: report.settings.light_ms / 1e3,
            topology_s: report.timing.topology_ms / 1e3,
        },
        arrived_s,
        end_s,
    )
}

/// How long a one-shot probe's phases took, in the order it ran them.
#[derive(Debug, Clone, Copy)]
struct ProbeWindows {
    heavy_s: f64,
    light_s: f64,
    topology_s: f64,
}

/// [`light_window`] from the probe's phase lengths.
fn window_before(p: ProbeWindows, arrived_s: Option<f64>, end_s: f64) -> (f64, f64) {
    let located = arrived_s.map(|at| {
        let light_end = at - p.topology_s;
        (
            light_end - p.light_s + LOCATED_START_MARGIN_S,
            light_end - LOCATED_END_MARGIN_S,
        )
    });
    match located {
        Some((from, to)) if from >= 0.0 && to > from => (from, to.min(end_s)),
        // The old assumption, with margins for the start-up.
        _ => (p.heavy_s + 0.25, (p.heavy_s + p.light_s - 0.05).min(end_s)),
    }
}

/// The light windows of a `--watch` command's reports, on the host's
/// timeline, that lie inside `span`: where every vCPU was busy with the
/// probe. Empty if the reports cannot be matched to their arrival times.
fn light_windows_within(
    reports: &[ProbeReport],
    arrivals: &[f64],
    span: (f64, f64),
    end_s: f64,
) -> Vec<(f64, f64)> {
    if reports.len() != arrivals.len() {
        return Vec::new();
    }
    reports
        .iter()
        .zip(arrivals)
        .map(|(r, &at)| light_window(r, Some(at), end_s))
        .filter(|&(from, to)| from >= span.0 && to <= span.1)
        .collect()
}

/// Host shares for a placement held over `span`: over `windows` (the
/// probe's light windows in it) from the millisecond timeline where there
/// are any, else over the whole span from the host samples.
fn placement_shares(ran: &RunResult, windows: &[(f64, f64)], span: (f64, f64)) -> Option<Vec<f64>> {
    truth::shares_in_windows(&ran.timeline, windows)
        .or_else(|| truth::host_shares(&ran.host_samples, span.0, span.1))
}

/// The layout's truth for placement `phase`, with shares (and capacity) as
/// the host measured them, where it did, and episode means from the vCPU
/// threads' run-time timeline (else the throttling statistics) over
/// `episodes_span` where available.
fn measured_truth(
    layout: &Layout,
    phase: usize,
    ran: &RunResult,
    shares: Option<Vec<f64>>,
    episodes_span: (f64, f64),
    ratio: f64,
    min_episode_us: f64,
) -> Truth {
    let mut t = truth::truth(&layout.state_at(phase), ratio);
    if let Some(shares) = shares {
        t = t.with_measured_shares(shares, ratio);
    }
    // The timeline, where there is one, saw every way a vCPU was off; the
    // throttling statistics only the bandwidth limit.
    let off = truth::off_episode_means_us(
        &ran.timeline,
        episodes_span.0,
        episodes_span.1,
        min_episode_us,
    );
    if off.iter().any(Option::is_some) {
        t = t.with_measured_episodes(off);
    } else if let Some(means) =
        truth::throttle_means_us(&ran.host_samples, episodes_span.0, episodes_span.1)
    {
        t = t.with_measured_episodes(means);
    }
    t
}

pub fn check(
    layout: &Layout,
    opts: &LabOptions,
    stop: &AtomicBool,
) -> Result<(CheckResult, RunResult)> {
    // Scored against the host's accounting of a guest that runs only the
    // probe; a Debian guest runs systemd's units beside it, with vsched
    // off PATH.
    if layout.root == crate::layout::GuestRoot::Debian {
        return Err(crate::error::LabError::CheckNeedsBusybox {
            layout: layout.name().to_string(),
        });
    }
    let ran = run::run(
        layout,
        std::slice::from_ref(&layout.check.command),
        opts,
        stop,
    )?;
    let cmd = ran.commands.first().ok_or(CheckError::NotRun)?;
    if cmd.exit_code != Some(0) {
        return Err(CheckError::CommandFailed {
            command: cmd.command.clone(),
            exit_code: cmd.exit_code,
            output: cmd.output.clone(),
        }
        .into());
    }
    let reports = parse_reports(&cmd.output)?;
    let mut scored = Vec::new();
    let first = initial_report(layout, &reports);
    let ratio = first.settings.straggler_ratio;
    let end = ran.command_ends_s.first().copied().unwrap_or(f64::MAX);
    let emulated = ran.accel.starts_with("tcg");
    // One probe: its light window, located on the host's timeline from
    // when its report arrived. With phases: each placement's span, 1.5-2 s
    // clear of the change so the EMA has followed, and within it the light
    // windows of the `--watch` reports.
    // Episodes are timed over the same light window the probe timed them in.
    let arrivals = report_arrivals(cmd);
    let (shares_span, episodes_span, windows) = match layout.phases.first() {
        Some(p) => {
            let span = (0.0, p.at_s - 1.5);
            let windows = light_windows_within(&reports, &arrivals, span, end);
            (span, (0.0, p.at_s), windows)
        }
        None => {
            let light = light_window(first, arrivals.first().copied(), end);
            (light, light, vec![light])
        }
    };
    let min_episode_us = first.settings.min_episode_us;
    let initial = measured_truth(
        layout,
        0,
        &ran,
        placement_shares(&ran, &windows, shares_span),
        episodes_span,
        ratio,
        min_episode_us,
    );
    scored.push(Scored {
        when: "initial".into(),
        report_sequence: first.sequence,
        items: truth::score(&initial, first, emulated),
        truth: initial,
        report: first.clone(),
    });
    if !layout.phases.is_empty() {
        if reports.len() < 2 {
            return Err(CheckError::PhasesNeedWatch.into());
        }
        let last = &reports[reports.len() - 1];
        let changed = ran.phases_applied_s.last().copied().unwrap_or(0.0);
        let final_span = (changed + 2.0, end);
        let windows = light_windows_within(&reports, &arrivals, final_span, end);
        let fin = measured_truth(
            layout,
            layout.phases.len(),
            &ran,
            placement_shares(&ran, &windows, final_span),
            (changed, end),
            ratio,
            min_episode_us,
        );
        scored.push(Scored {
            when: "final".into(),
            report_sequence: last.sequence,
            items: truth::score(&fin, last, emulated),
            truth: fin,
            report: last.clone(),
        });
    }
    let host_evidence = host_evidence(layout, &ran, end);
    let disturbances = disturb::disturbances(&host_evidence);
    let verdict = Verdict::of(scored.iter().flat_map(|s| &s.items), &disturbances);
    Ok((
        CheckResult {
            schema: SCHEMA.into(),
            layout: layout.name().to_string(),
            accel: ran.accel.clone(),
            boot_ms: ran.boot_ms,
            reports: reports.len(),
            scored,
            verdict,
            pass: verdict == Verdict::Pass,
            host_evidence,
            disturbances,
        },
        ran,
    ))
}

/// Disturbance evidence over the whole check command (up to `end` s): its
/// topology probe decides the stacking item, its capacity windows the rest.
/// With phases, each placement is assessed over its own part.
fn host_evidence(layout: &Layout, ran: &RunResult, end: f64) -> Vec<Evidence> {
    let tick_ns = run::ns_per_user_tick();
    let mut bounds = vec![0.0];
    bounds.extend(ran.phases_applied_s.iter().copied());
    bounds.push(end);
    bounds
        .windows(2)
        .enumerate()
        .flat_map(|(phase, w)| {
            disturb::assess(
                &layout.state_at(phase),
                &ran.host_samples,
                w[0],
                w[1],
                tick_ns,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::VcpuState;
    use crate::run::HostSample;

    fn item(what: &str, pass: bool, scored: bool) -> Item {
        Item {
            what: what.into(),
            expected: String::new(),
            measured: String::new(),
            pass,
            scored,
        }
    }

    /// One second of host samples: each vCPU thread ran and waited the given
    /// shares, no throttling, no steal.
    fn host(run: &[f64], wait: &[f64]) -> Vec<HostSample> {
        (0..=10)
            .map(|k| {
                let f = k as f64 / 10.0;
                HostSample {
                    at_s: f,
                    cpu_ns: run.iter().map(|r| (r * f * 1e9) as u64).collect(),
                    wait_ns: wait.iter().map(|w| (w * f * 1e9) as u64).collect(),
                    throttled: vec![None; run.len()],
                    host_steal_ns: vec![0; 2],
                    lab_threads_ns: 0,
                }
            })
            .collect()
    }

    const TICK: u64 = 10_000_000;

    #[test]
    fn the_light_window_is_placed_from_the_reports_arrival() {
        let p = ProbeWindows {
            heavy_s: 0.2,
            light_s: 1.0,
            topology_s: 0.4,
        };
        // The guest took 0.7 s to start the probe: heavy 0.7-0.9, light
        // 0.9-1.9, topology 1.9-2.3, report at 2.3 s.
        let (from, to) = window_before(p, Some(2.3), 2.5);
        assert!(
            (from - 1.0).abs() < 1e-9 && (to - 1.85).abs() < 1e-9,
            "{from} {to}"
        );
        // No arrival time, or one that cannot be right: the old assumption.
        assert_eq!(window_before(p, None, 2.5), (0.45, 1.15));
        assert_eq!(window_before(p, Some(0.5), 2.5), (0.45, 1.15));
    }

    #[test]
    fn reports_arrive_with_their_first_line() {
        let pretty = CommandResult {
            command: "vsched probe --json".into(),
            exit_code: Some(0),
            output: "note\n{\n  \"vcpus\": [\n    {\n    }\n  ]\n}".into(),
            line_at_s: vec![0.1, 2.30, 2.31, 2.31, 2.32, 2.32, 2.33],
        };
        assert_eq!(report_arrivals(&pretty), vec![2.30]);
        let watch = CommandResult {
            output: "{\"sequence\":1}\n{\"sequence\":2}".into(),
            line_at_s: vec![1.5, 2.5],
            ..pretty
        };
        assert_eq!(report_arrivals(&watch), vec![1.5, 2.5]);
    }

    /// vCPUs pinned to these host CPUs, uncapped.
    fn pinned(host_cpus: &[u32]) -> Vec<VcpuState> {
        host_cpus
            .iter()
            .map(|&c| VcpuState {
                host_cpu: Some(c),
                ..VcpuState::default()
            })
            .collect()
    }

    #[test]
    fn probe_errors_on_a_quiet_host_still_fail() {
        // stacked-pair placement, the host quiet: the pair waits only for each other.
        let states = pinned(&[0, 1, 1]);
        let quiet = disturb::disturbances(&disturb::assess(
            &states,
            &host(&[0.98, 0.49, 0.49], &[0.01, 0.5, 0.5]),
            0.0,
            1.0,
            TICK,
        ));
        assert!(quiet.is_empty(), "{quiet:?}");
        let wrong_group = [
            item("stacking groups", false, true),
            item("vCPU 0 straggler", true, true),
        ];
        assert_eq!(Verdict::of(&wrong_group, &quiet), Verdict::Fail);
        let share_far_off = [
            item("stacking groups", true, true),
            item("vCPU 1 relative available share", false, true),
        ];
        assert_eq!(Verdict::of(&share_far_off, &quiet), Verdict::Fail);
        // Items shown for information only do not decide.
        let info_off = [
            item("stacking groups", true, true),
            item("vCPU 1 relative capacity", false, false),
        ];
        assert_eq!(Verdict::of(&info_off, &quiet), Verdict::Pass);
    }

    #[test]
    fn a_disturbed_host_makes_any_result_disturbed() {
        let states = pinned(&[0, 1]);
        // A hog beside vCPU 0 took half of host CPU 0.
        let hog = disturb::disturbances(&disturb::assess(
            &states,
            &host(&[0.5, 0.98], &[0.49, 0.01]),
            0.0,
            1.0,
            TICK,
        ));
        assert_eq!(hog.len(), 1, "{hog:?}");
        let all_pass = [item("stacking groups", true, true)];
        assert_eq!(Verdict::of(&all_pass, &hog), Verdict::Disturbed);
        let failed = [item("stacking groups", false, true)];
        assert_eq!(Verdict::of(&failed, &hog), Verdict::Disturbed);
    }
}
