//! `vsched bench sched`: the kernel's default scheduler against vsched's
//! sched_ext scheduler, in the same lab guest, run after run, alternating;
//! and where a placement that knows the layout exists (the "oracle": the
//! workload pinned with taskset to the vCPUs a perfect scheduler would
//! use, or for IVH its threads moving themselves over the vCPUs on a
//! fixed rhythm), that too, as the limit to compare with.
//!
//! Each scenario boots one guest (lab/sched/bench-*.toml, embedded here)
//! and runs every variant once per round, in an order that rotates from
//! round to round, so that no variant always runs first or after the same
//! neighbour. A run of vsched loads the scheduler, waits for the probers'
//! first model to reach it (and `SETTLE_S` more), runs the workload and
//! unloads; the probers' cost is part of what it measures.

mod plot;
mod scenario;
pub(crate) mod script;
mod timeline;

pub use plot::timeline_svg;
pub use scenario::{Goal, Scenario, Timeline, VariantKind, SCENARIOS};
pub use script::{guest_script, parse_results, timeline_script, RunLine, IPIS};
pub use timeline::{PhaseResult, Series, TimelineResult};

use crate::cprogram::{CProgram, CSource};
use crate::BenchError;
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use vsched_lab::run::LabOptions;
use vsched_lab::Layout;
use vsched_model::stats::median;

/// The workloads (cpu, barrier, pingpong), run inside the guests.
pub const SCHEDBENCH: CSource = CSource {
    name: "schedbench",
    what: "the scheduler benchmark's workload program",
    text: include_str!("../../c/schedbench.c"),
    flags: &["-pthread", "-Wall"],
};

/// One variant's runs in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub variant: String,
    /// The scenario's metric, run by run (lower is better).
    pub values: Vec<f64>,
    pub median: f64,
    /// Default's median over this one's: above 1 is better than default.
    pub speedup_vs_default: f64,
    /// The median, over the rounds both ran, of default's value over this
    /// one's in the same round (the variants of a round run one after
    /// another in one guest): what the goal is judged by, since a host
    /// that slows down for minutes moves both sides of a round together
    /// but the two medians apart. None: no round ran both.
    pub paired_speedup_vs_default: Option<f64>,
    /// Medians of what else the workload printed (queue and service time).
    pub other_medians: Vec<(String, f64)>,
}

/// What one scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub name: &'static str,
    pub what: &'static str,
    pub workload: String,
    /// What `values` and `median` measure (lower is better).
    pub metric: &'static str,
    pub rounds: usize,
    pub variants: Vec<VariantResult>,
    /// vsched's speed as a share of the oracle's (1 = as fast): the
    /// median of the rounds' ratios, as `paired_speedup_vs_default`, or
    /// of the medians where no round ran both.
    pub vsched_of_oracle: Option<f64>,
    pub goal: Goal,
    /// Whether the goal was met (None: the scenario has no goal).
    pub goal_met: Option<bool>,
    /// The model vsched's last run ended with (its summary JSON).
    pub last_vsched_summary: Option<serde_json::Value>,
    pub accel: String,
    /// Timeline scenarios: throughput over time and per phase.
    pub timeline: Option<TimelineResult>,
}

/// Runs `scenario` for `rounds` rounds in lab guests, `vsched` being the
/// binary carried into them.
pub fn run_scenario(
    scenario: &Scenario,
    rounds: usize,
    opts: &LabOptions,
    stop: &AtomicBool,
) -> Result<ScenarioResult, BenchError> {
    let program = CProgram::compile(&SCHEDBENCH, "sched")?;
    let mut layout = Layout::parse(scenario.layout, &host_cpus())
        .map_err(|e| BenchError::Lab(vsched_lab::LabError::from(e)))?;
    layout.extra_binaries.push(program.path().to_path_buf());
    let mut guests = Guests {
        scenario,
        layout,
        opts,
        stop,
        lines: Vec::new(),
        summary: None,
        accel: String::new(),
    };
    match scenario.timeline {
        // One guest per run: the layout's phases run on the guest's clock.
        Some(t) => {
            let workload_s: f64 = scenario
                .workload
                .get(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0.0);
            guests.layout.run_timeout_s = t.lead_s + workload_s + RUN_BUDGET_S;
            let n = scenario.variants().len();
            for round in 0..rounds {
                for k in 0..n {
                    let k = (k + round) % n;
                    let script = timeline_script(scenario, t.lead_s, round, k);
                    guests.run(
                        &script,
                        &format!("round {round}, {}", scenario.variants()[k].0),
                    )?;
                }
            }
        }
        None => {
            // Every run takes a few seconds (a vsched run waits for its
            // model first): give each, with its load and unload, up to
            // RUN_BUDGET_S.
            let runs = ROUNDS_PER_GUEST * scenario.variants().len();
            guests.layout.run_timeout_s = guests
                .layout
                .run_timeout_s
                .max(30.0 + runs as f64 * RUN_BUDGET_S);
            let mut first = 0;
            while first < rounds {
                let chunk = first..(first + ROUNDS_PER_GUEST).min(rounds);
                let script = guest_script(scenario, chunk.clone());
                guests.run(
                    &script,
                    &format!("rounds {}-{}", chunk.start, chunk.end - 1),
                )?;
                first = chunk.end;
            }
        }
    }
    let phase_starts_s = phase_starts_s(scenario, &guests.layout);
    let result = summarize(
        scenario,
        rounds,
        &guests.lines,
        guests.summary,
        guests.accel,
        &phase_starts_s,
    )
    .ok_or_else(|| BenchError::Scenario("no run gave a result".into()))?;
    Ok(result)
}

/// When each phase of a timeline scenario begins, in seconds since its
/// workload's start: the layout's initial placement at 0, then its
/// `[[phase]]` times less the lead (empty for other scenarios).
pub fn phase_starts_s(scenario: &Scenario, layout: &Layout) -> Vec<f64> {
    let Some(t) = scenario.timeline else {
        return Vec::new();
    };
    std::iter::once(0.0)
        .chain(layout.phases.iter().map(|p| p.at_s - t.lead_s))
        .collect()
}

/// The guests of one scenario and what their runs gave.
struct Guests<'a> {
    scenario: &'a Scenario,
    layout: Layout,
    opts: &'a LabOptions,
    stop: &'a AtomicBool,
    lines: Vec<RunLine>,
    /// The last vsched run's summary.
    summary: Option<serde_json::Value>,
    accel: String,
}

impl Guests<'_> {
    /// Boots a guest for `script` and collects its results. A guest
    /// kernel panic while the runs went on fails the scenario, its reason
    /// and console tail in the error (`what` names the runs it cost). One
    /// that is the emulator's (LabError::is_emulators_panic: while booting,
    /// before any of vsched's code ran, or at a stale breakpoint; docs/lab.md,
    /// "The emulator") boots the guest again, at most EMULATOR_PANIC_RETRIES
    /// times, each reported.
    fn run(&mut self, script: &str, what: &str) -> Result<(), BenchError> {
        let mut emulator_panics = 0;
        let ran = loop {
            let run =
                vsched_lab::run::run(&self.layout, &[script.to_string()], self.opts, self.stop);
            match run {
                Ok(ran) => break ran,
                Err(e) if e.is_emulators_panic() && emulator_panics < EMULATOR_PANIC_RETRIES => {
                    emulator_panics += 1;
                    eprintln!("{}, {what}: {e}\nbooting again", self.scenario.name);
                }
                Err(e) => {
                    return Err(match e.guest_panic_cause() {
                        Some(cause) => BenchError::Scenario(format!(
                            "{}, {what}: the guest kernel panicked ({cause}): {e}",
                            self.scenario.name
                        )),
                        None => BenchError::Lab(e),
                    })
                }
            }
        };
        let cmd = ran
            .commands
            .first()
            .ok_or_else(|| BenchError::Scenario("the guest ran no command".into()))?;
        let (lines, summary) = parse_results(&cmd.output);
        print_unmeasured(self.scenario.name, &cmd.output);
        if lines.is_empty() {
            return Err(BenchError::Scenario(format!(
                "the guest's runs gave no result:\n{}",
                cmd.output
            )));
        }
        self.lines.extend(lines);
        self.summary = summary.or(self.summary.take());
        self.accel = ran.accel.clone();
        Ok(())
    }
}

/// Relays why a run was not measured, so that a missing value is
/// explained where the user looks.
fn print_unmeasured(scenario: &str, output: &str) {
    for line in unmeasured_report(output) {
        eprintln!("{scenario}: {line}");
    }
}

/// The guest script's "not measured" lines, each with the wait that failed
/// just before it and the loader's last lines after it (the script prints
/// five), indented.
fn unmeasured_report(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut report = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains(": not measured, ") {
            continue;
        }
        report.push(line.to_string());
        let before = i.checked_sub(1).map(|j| lines[j]);
        let why =
            before.filter(|l| l.starts_with("sched_ext did not") || l.starts_with("no model"));
        // The loader's lines end where the script's own markers resume.
        let loader = lines[i + 1..]
            .iter()
            .take(5)
            .take_while(|l| !l.starts_with("@@"));
        for l in why.into_iter().chain(loader.copied()) {
            report.push(format!("    | {l}"));
        }
    }
    report
}

/// Seconds allowed per run in a scenario's guest: the longest workload
/// here takes about 5 s under the default scheduler on a slow day, a
/// vsched run adds up to 3 s for its first model and 1 s to settle.
const RUN_BUDGET_S: f64 = 20.0;

/// Boots again after the emulator's guest kernel panics, per guest: seen
/// about once in 80 QEMU 10 boots and once in some 1,800 sched_ext load
/// cycles (docs/lab.md, "The emulator"), so two in a row would be news.
const EMULATOR_PANIC_RETRIES: usize = 2;

/// Rounds run in one guest: a few, so that a guest's run stays within
/// about [`RUN_BUDGET_S`] times its runs and a failing guest (a timeout,
/// a panic) says which rounds it held.
const ROUNDS_PER_GUEST: usize = 3;

/// Medians, ratios and the goal's verdict from the guest's result lines.
pub fn summarize(
    scenario: &Scenario,
    rounds: usize,
    lines: &[RunLine],
    last_vsched_summary: Option<serde_json::Value>,
    accel: String,
    phase_starts_s: &[f64],
) -> Option<ScenarioResult> {
    let mut variants: Vec<VariantResult> = scenario
        .variants()
        .into_iter()
        .map(|(label, _)| {
            let runs: Vec<&RunLine> = lines.iter().filter(|l| l.variant == label).collect();
            let medians = |metric: &str| -> (Vec<f64>, f64) {
                let v: Vec<f64> = runs.iter().filter_map(|l| l.get(metric)).collect();
                let m = if v.is_empty() {
                    f64::NAN
                } else {
                    median(&mut v.clone())
                };
                (v, m)
            };
            let (values, m) = medians(scenario.metric);
            let mut others: Vec<&str> = Vec::new();
            for (k, _) in runs.iter().flat_map(|l| &l.values) {
                if k != scenario.metric && !others.contains(&k.as_str()) {
                    others.push(k);
                }
            }
            let other_medians = others
                .into_iter()
                .map(|k| (k.to_string(), medians(k).1))
                .collect();
            VariantResult {
                variant: label,
                values,
                median: m,
                speedup_vs_default: f64::NAN,
                paired_speedup_vs_default: None,
                other_medians,
            }
        })
        .collect();
    let default = variants.iter().find(|v| v.variant == "default")?.median;
    if !default.is_finite() {
        return None;
    }
    let by_round = |variant: &str| -> Vec<(usize, f64)> {
        lines
            .iter()
            .filter(|l| l.variant == variant)
            .filter_map(|l| Some((l.round, l.get(scenario.metric)?)))
            .collect()
    };
    let default_rounds = by_round("default");
    for v in &mut variants {
        v.speedup_vs_default = default / v.median;
        v.paired_speedup_vs_default = paired_ratio(&default_rounds, &by_round(&v.variant));
    }
    let find = |name: &str| variants.iter().find(|v| v.variant == name);
    let vsched_variant = find("vsched")?;
    let vsched = vsched_variant.median;
    let speedup = vsched_variant
        .paired_speedup_vs_default
        .unwrap_or(default / vsched);
    let vsched_of_oracle = find("oracle").map(|o| {
        paired_ratio(&by_round("oracle"), &by_round("vsched")).unwrap_or(o.median / vsched)
    });
    let timeline = scenario.timeline.and_then(|t| {
        let interval_ms = variants
            .iter()
            .flat_map(|v| &v.other_medians)
            .find(|(k, _)| k == "interval_ms")?
            .1;
        let input: Vec<(String, Vec<(String, f64)>)> = variants
            .iter()
            .map(|v| (v.variant.clone(), v.other_medians.clone()))
            .collect();
        timeline::analyse(&input, interval_ms / 1e3, t.phases, phase_starts_s)
    });
    if timeline.is_some() {
        // The series hold them now.
        for v in &mut variants {
            v.other_medians.retain(|(k, _)| !is_interval_key(k));
        }
    }
    let slowest_recovery_s = timeline.as_ref().and_then(|t| t.slowest_recovery_s());
    let goal_met = scenario
        .goal
        .verdict(speedup, vsched_of_oracle, slowest_recovery_s);
    Some(ScenarioResult {
        name: scenario.name,
        what: scenario.what,
        workload: scenario.workload.join(" "),
        metric: scenario.metric,
        rounds,
        variants,
        vsched_of_oracle,
        goal: scenario.goal,
        goal_met,
        last_vsched_summary,
        accel,
        timeline,
    })
}

/// The median over the rounds in both `num` and `den` (round, value) of
/// num / den; None if no round is in both.
fn paired_ratio(num: &[(usize, f64)], den: &[(usize, f64)]) -> Option<f64> {
    let mut ratios: Vec<f64> = num
        .iter()
        .filter_map(|&(round, n)| {
            let &(_, d) = den.iter().find(|&&(r, _)| r == round)?;
            Some(n / d)
        })
        .filter(|r| r.is_finite())
        .collect();
    (!ratios.is_empty()).then(|| median(&mut ratios))
}

/// A timeline's per-interval key ("t0", "t1", ...).
fn is_interval_key(k: &str) -> bool {
    k.strip_prefix('t')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The host's online CPUs (the layouts pin vCPUs to them).
pub(crate) fn host_cpus() -> Vec<u32> {
    vsched_os::affinity::thread_affinity(0)
        .unwrap_or_else(|_| (0..vsched_os::load::online_vcpus() as u32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(variant: &str, round: usize, elapsed_s: f64) -> RunLine {
        RunLine {
            variant: variant.into(),
            round,
            values: vec![("elapsed_s".into(), elapsed_s)],
        }
    }

    /// A slow spell of the host that covers both sides of a round moves
    /// the medians apart but not that round's ratio: the goal is judged by
    /// the rounds' ratios.
    #[test]
    fn the_goal_is_judged_by_the_rounds_ratios_not_the_ratio_of_medians() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| {
                s.timeline.is_none() && s.goal.min_of_oracle.is_none() && s.metric == "elapsed_s"
            })
            .expect("a scenario without oracle or timeline");
        // vsched 0.98x of default in every round; round 1 ran slow for
        // both sides; round 3 ran vsched alone, slowly.
        let mut lines = vec![
            line("default", 0, 1.00),
            line("vsched", 0, 1.00 / 0.98),
            line("default", 1, 3.00),
            line("vsched", 1, 3.00 / 0.98),
            line("default", 2, 1.10),
            line("vsched", 2, 1.10 / 0.98),
            // A round only one side ran is not paired.
            line("vsched", 3, 9.0),
        ];
        for (label, _) in scenario.variants() {
            if label != "default" && label != "vsched" {
                lines.push(line(&label, 0, 1.0));
            }
        }
        let r = summarize(scenario, 4, &lines, None, String::new(), &[]).unwrap();
        let vsched = r.variants.iter().find(|v| v.variant == "vsched").unwrap();
        let paired = vsched.paired_speedup_vs_default.unwrap();
        assert!((paired - 0.98).abs() < 1e-9, "{paired}");
        // The medians: default's 1.10, vsched's 2.09 (of 1.02, 1.12, 3.06
        // and 9.0).
        assert!(
            vsched.speedup_vs_default < 0.6,
            "{}",
            vsched.speedup_vs_default
        );
        assert_eq!(
            r.goal_met,
            Some(0.98 >= scenario.goal.min_speedup),
            "judged by {paired}"
        );
    }

    #[test]
    fn paired_ratios_skip_rounds_one_side_lacks() {
        assert_eq!(paired_ratio(&[(0, 2.0)], &[(1, 1.0)]), None);
        assert_eq!(
            paired_ratio(&[(0, 2.0), (1, 3.0), (2, 8.0)], &[(2, 4.0), (0, 1.0)]),
            Some(2.0)
        );
    }

    #[test]
    fn a_run_not_measured_is_explained_with_the_failed_wait_and_the_loader_lines() {
        let output = "@@run default 0 elapsed_s 0.8\n\
                      sched_ext did not become enabled within 30 s (state: enabling)\n\
                      vsched 0: not measured, the scheduler was not ready; vsched sched said:\n\
                      loader line\n\
                      @@summary {}\n";
        assert_eq!(
            unmeasured_report(output),
            [
                "vsched 0: not measured, the scheduler was not ready; vsched sched said:",
                "    | sched_ext did not become enabled within 30 s (state: enabling)",
                "    | loader line",
            ]
        );
        assert!(unmeasured_report("@@run default 0 elapsed_s 0.8\n").is_empty());
    }
}
