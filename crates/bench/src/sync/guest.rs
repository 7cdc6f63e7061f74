//! `vsched bench sync --guest`: the sync cases in a 2-vCPU sched_ext lab
//! guest, under the kernel's default scheduler and under `vsched sched`,
//! each run directly (glibc) and under `vsched exec` (under `vsched
//! sched` also `vsched exec --channel`: the runtime marking its waiters
//! in the scheduler's channel, virtual blocking). It answers whether
//! vsched's two halves together are at least as fast as its runtime alone
//! (`together` = runtime with the scheduler / runtime with the default
//! scheduler, goal at most 1), at 1x and 4x as many threads as vCPUs.
//!
//! One guest per round. In each, both schedulers take their turn (the
//! order rotated every round), and under each every case runs at 1x and
//! 4x, glibc and the runtime alternating which goes first. The report
//! (schema "vsched.bench-sync-sched/v1") keeps every run beside the
//! medians.

use super::program::{Sample, SOURCE};
use super::Case;
use crate::cprogram::CProgram;
use crate::BenchError;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use vsched_lab::{LabError, LabOptions, Layout};
use vsched_model::stats::median;

/// Two free vCPUs, each alone on a host CPU: what the measured goals name
/// ("8 threads on 2 vCPUs"), without the probers finding anything to
/// hide, so that what differs is how the two halves work together.
const LAYOUT: &str = "\
description = \"sync cases under the default scheduler and under vsched sched\"\n\
vcpus = 2\n\
kernel = \"sched_ext\"\n\
commands = []\n\
[[vcpu]]\nid = 0\nhost_cpu = 0\n\
[[vcpu]]\nid = 1\nhost_cpu = 1\n";

/// The guest's vCPUs: 1x is 2 threads, 4x is 8.
const GUEST_VCPUS: usize = 2;
const FACTORS: [usize; 2] = [1, 4];

/// Marker of a run's result line: "@@sync ROUND SCHEDULER RUNTIME CASE
/// THREADS OPS STATE" (STATE: sched_ext's, just before the run), then the
/// program's JSON line.
const RUN: &str = "@@sync";
/// Marker of a scheduler that did not get ready in a round.
const UNREADY: &str = "@@unready";
/// Marker of the guest kernel's release.
const KERNEL: &str = "@@kernel";

/// The schedulers compared, in the guest's terms.
pub const SCHEDULERS: [&str; 2] = ["default", "vsched"];
/// The runtimes compared: glibc directly, and `vsched exec`.
pub const RUNTIMES: [&str; 2] = ["glibc", "vsched"];
/// `vsched exec --channel`, run under vsched's scheduler only (under the
/// default one there is no channel: it would be "vsched" again).
pub const CHANNEL: &str = "vsched-channel";

/// The runtimes run under `scheduler`, in their order.
fn runtimes_under(scheduler: &str) -> Vec<&'static str> {
    let mut r = RUNTIMES.to_vec();
    if scheduler == "vsched" {
        r.push(CHANNEL);
    }
    r
}

/// Whether `runtime` preloads vsched's runtime.
fn is_vsched_runtime(runtime: &str) -> bool {
    runtime == "vsched" || runtime == CHANNEL
}

/// Operations per run of `case` at `threads`: sized for about 0.2-1 s per
/// run in a TCG guest on this class of machine (2026-11-28, QEMU 10), with
/// the slowest cell (the glibc spin ring at 4x, which spins away whole
/// time slices: 20,000 hand-offs took 65 s) kept to a few seconds.
pub fn ops(case: Case, threads: usize) -> u64 {
    match case {
        Case::Mutex => 100_000,
        Case::Barrier => 5_000,
        Case::CondBroadcast | Case::CondSignal => 10_000,
        Case::Rwlock => 50_000,
        Case::SpinRing if threads > GUEST_VCPUS => 500,
        Case::SpinRing => 5_000,
        Case::Spinlock => 100_000,
    }
}

pub struct GuestSyncConfig {
    /// The runtime library to carry into the guest.
    pub library: PathBuf,
    pub rounds: usize,
    pub cases: Vec<Case>,
    /// Extra `vsched sched` flags (an ablation), joined by spaces.
    pub sched_flags: String,
}

/// One run, as measured.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct GuestRun {
    pub round: usize,
    pub scheduler: String,
    pub runtime: String,
    pub case: String,
    pub threads: usize,
    /// What the program printed; its `loaded` must be 1 exactly in the
    /// "vsched" runtime's runs (`parse` reports any other run).
    #[serde(flatten)]
    pub sample: Sample,
}

/// One case at one oversubscription: median ns per op of each pairing.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct GuestRow {
    pub case: Case,
    pub oversubscription: usize,
    pub threads: usize,
    pub default_glibc_ns: Option<f64>,
    pub default_vsched_ns: Option<f64>,
    pub sched_glibc_ns: Option<f64>,
    pub sched_vsched_ns: Option<f64>,
    /// `vsched exec --channel` under vsched's scheduler.
    pub sched_channel_ns: Option<f64>,
    /// The runtime under vsched's scheduler without the channel over with
    /// it (above 1: the channel makes it faster): the median over guests
    /// of each guest's own ratio, the two having run side by side there
    /// (guests differ by more than the channel does).
    pub channel_speedup: Option<f64>,
    /// The runtime under vsched's scheduler over the runtime under the
    /// default scheduler (at most 1: together never slower than apart).
    pub together: Option<f64>,
    /// The runtime under vsched's scheduler, time per unit of work at
    /// this oversubscription over its own at 1x (a barrier round is one
    /// unit per thread).
    pub together_vs_1x: Option<f64>,
}

#[derive(Serialize, Debug)]
pub struct GuestSyncBench {
    pub schema: &'static str,
    pub qemu: String,
    pub accel: String,
    pub kernel: String,
    pub vcpus: usize,
    pub rounds: usize,
    /// The extra `vsched sched` flags the runs had.
    pub sched_flags: String,
    pub rows: Vec<GuestRow>,
    /// The goals for the two halves together, with the values.
    pub goals: Vec<super::Goal>,
    /// Cells not measured in a round, and why.
    pub problems: Vec<String>,
    pub runs: Vec<GuestRun>,
}

/// Runs `config.rounds` guests and summarises them.
pub fn run(
    config: &GuestSyncConfig,
    opts: &LabOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(usize, &[GuestRun]),
) -> Result<GuestSyncBench, BenchError> {
    let program = CProgram::compile(&SOURCE, "sync-sched")?;
    let mut layout = Layout::parse(LAYOUT, &crate::sched::host_cpus())
        .map_err(|e| BenchError::Lab(LabError::from(e)))?;
    layout.extra_binaries.push(program.path().to_path_buf());
    layout.extra_binaries.push(config.library.clone());
    let library_name = config
        .library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| BenchError::Scenario("the runtime library path names no file".into()))?;
    // Boot, two loads of the scheduler and every run, with room for a
    // slow host (a run is sized for about 1 s; loading takes 2-10 s).
    // 10 runs per case (2 thread counts x 2 runtimes under the default, 3
    // under vsched's).
    layout.run_timeout_s = 120.0 + (config.cases.len() * 10) as f64 * 5.0;
    let qemu = vsched_lab::qemu::find(opts.qemu.as_deref(), opts.allow_old_qemu)
        .map_err(BenchError::Lab)?;
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    let (mut accel, mut kernel) = (String::new(), String::new());
    for round in 0..config.rounds {
        let script = guest_script(&config.cases, round, &library_name, &config.sched_flags);
        let ran = vsched_lab::run::run(&layout, &[script], opts, stop).map_err(|e| match e {
            LabError::Interrupted => BenchError::Interrupted,
            e => BenchError::Lab(e),
        })?;
        accel.clone_from(&ran.accel);
        let output = ran
            .commands
            .first()
            .map(|c| c.output.as_str())
            .unwrap_or("");
        if let Some(k) = output.lines().find_map(|l| l.strip_prefix(KERNEL)) {
            kernel = k.trim().to_string();
        }
        let (got, missing) = parse(output, round, &config.cases);
        progress(round, &got);
        runs.extend(got);
        problems.extend(missing);
    }
    let rows = rows(&runs, &config.cases);
    Ok(GuestSyncBench {
        schema: "vsched.bench-sync-sched/v1",
        qemu: format!("{} ({})", qemu.version_string(), qemu.path.display()),
        accel,
        kernel,
        vcpus: GUEST_VCPUS,
        rounds: config.rounds,
        sched_flags: config.sched_flags.clone(),
        goals: goals(&rows),
        rows,
        problems,
        runs,
    })
}

/// The guest's script for `round`, the runtime library being the file
/// `library` (its name) among the guest's extra files, `vsched sched`
/// loaded with `sched_flags`.
pub fn guest_script(cases: &[Case], round: usize, library: &str, sched_flags: &str) -> String {
    let ready = crate::sched::script::READY_FILE;
    let mut out = crate::sched::script::common_prelude();
    out.push_str(&format!("echo \"{KERNEL} $(uname -r)\"\n"));
    // The lab copies extra files into /bin (busybox guests).
    out.push_str(&format!("export VSCHED_SYNC_LIB=/bin/{library}\n"));
    for k in 0..SCHEDULERS.len() {
        let scheduler = SCHEDULERS[(k + round) % SCHEDULERS.len()];
        let loaded = scheduler == "vsched";
        if loaded {
            out.push_str(&format!(
                "rm -f {ready}; vsched sched -q {sched_flags} --ready-file {ready} 2>/tmp/sched.log & S=$!\n\
                 if wait_state enabled && wait_ready; then sleep {}\n",
                crate::sched::script::SETTLE_S
            ));
        }
        for &case in cases {
            for factor in FACTORS {
                let threads = GUEST_VCPUS * factor;
                let ops = ops(case, threads);
                let runtimes = runtimes_under(scheduler);
                for j in 0..runtimes.len() {
                    // Each runtime first in turn, round by round.
                    let runtime = runtimes[(j + round) % runtimes.len()];
                    let exec = match runtime {
                        "vsched" => "vsched exec -- ",
                        CHANNEL => "vsched exec --channel -- ",
                        _ => "",
                    };
                    out.push_str(&format!(
                        "echo \"{RUN} {round} {scheduler} {runtime} {} {threads} {ops} \
                         $(cat /sys/kernel/sched_ext/state)\"; \
                         {exec}syncbench {} {threads} {ops}\n",
                        case.name(),
                        case.name()
                    ));
                }
            }
        }
        if loaded {
            out.push_str(&format!(
                "else echo \"{UNREADY} {round}\"; tail -5 /tmp/sched.log; fi\n\
                 kill $S; wait $S; wait_state disabled\n"
            ));
        }
    }
    out
}

/// The runs a guest's output holds, and the cells of `round` it lacks.
pub fn parse(output: &str, round: usize, cases: &[Case]) -> (Vec<GuestRun>, Vec<String>) {
    let mut runs = Vec::new();
    let mut mislabelled = Vec::new();
    let mut lines = output.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(RUN) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let [r, scheduler, runtime, case, threads, ops, state] = f[..] else {
            continue;
        };
        let Some(sample) = lines
            .peek()
            .and_then(|l| serde_json::from_str::<Sample>(l).ok())
        else {
            continue;
        };
        lines.next();
        let (Ok(r), Ok(threads), Ok(ops)) = (r.parse(), threads.parse(), ops.parse::<u64>()) else {
            continue;
        };
        if sample.ops != ops {
            continue;
        }
        let run = GuestRun {
            round: r,
            scheduler: scheduler.into(),
            runtime: runtime.into(),
            case: case.into(),
            threads,
            sample,
        };
        // A run not under the scheduler or the runtime its label says is
        // reported and left out of the medians.
        let loaded = run.sample.loaded != 0;
        let expected_state = if scheduler == "vsched" {
            "enabled"
        } else {
            "disabled"
        };
        let wrong = if loaded != is_vsched_runtime(runtime) {
            Some(format!(
                "the runtime was {}loaded",
                if loaded { "" } else { "not " }
            ))
        } else if state != expected_state {
            Some(format!("sched_ext was {state}, not {expected_state}"))
        } else {
            None
        };
        match wrong {
            Some(why) => mislabelled.push(format!(
                "round {r}: {case} at {threads} threads, {scheduler} scheduler, {runtime}: {why}; \
                 left out"
            )),
            None => runs.push(run),
        }
    }
    let mut missing = mislabelled;
    if output.contains(UNREADY) {
        missing.push(format!(
            "round {round}: vsched sched did not get ready; its runs were not measured"
        ));
    }
    for &case in cases {
        for factor in FACTORS {
            let threads = GUEST_VCPUS * factor;
            for scheduler in SCHEDULERS {
                for runtime in runtimes_under(scheduler) {
                    let found = runs
                        .iter()
                        .any(|r| in_cell(r, case, threads, scheduler, runtime));
                    if !found {
                        missing.push(format!(
                            "round {round}: {} at {threads} threads, {scheduler} scheduler, \
                             {runtime}: no result",
                            case.name()
                        ));
                    }
                }
            }
        }
    }
    (runs, missing)
}

/// Medians of each cell, and the ratios between them.
/// Whether `r` is a run of `case` at `threads` under `scheduler` and `runtime`.
fn in_cell(r: &GuestRun, case: Case, threads: usize, scheduler: &str, runtime: &str) -> bool {
    r.case == case.name()
        && r.threads == threads
        && r.scheduler == scheduler
        && r.runtime == runtime
}

pub fn rows(runs: &[GuestRun], cases: &[Case]) -> Vec<GuestRow> {
    let cell = |case: Case, threads: usize, scheduler: &str, runtime: &str| {
        let mut v: Vec<f64> = runs
            .iter()
            .filter(|r| in_cell(r, case, threads, scheduler, runtime))
            .map(|r| r.sample.ns_per_op)
            .collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    // A barrier round holds one unit of work per thread (super::comparable_ns).
    let per_unit = |case: Case, ns: Option<f64>, threads: usize| match case {
        Case::Barrier => ns.map(|n| n / threads as f64),
        _ => ns,
    };
    // The median of each round's own ratio of two cells.
    let paired = |case: Case, threads: usize, a: (&str, &str), b: (&str, &str)| {
        let ns = |round: usize, (scheduler, runtime): (&str, &str)| {
            runs.iter()
                .find(|r| r.round == round && in_cell(r, case, threads, scheduler, runtime))
                .map(|r| r.sample.ns_per_op)
        };
        let mut rounds: Vec<usize> = runs.iter().map(|r| r.round).collect();
        rounds.sort_unstable();
        rounds.dedup();
        let mut v: Vec<f64> = rounds
            .into_iter()
            .filter_map(|round| ratio(ns(round, a), ns(round, b)))
            .collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    let mut out = Vec::new();
    for &case in cases {
        let together_1x = per_unit(
            case,
            cell(case, GUEST_VCPUS, "vsched", "vsched"),
            GUEST_VCPUS,
        );
        for factor in FACTORS {
            let threads = GUEST_VCPUS * factor;
            let default_vsched_ns = cell(case, threads, "default", "vsched");
            let sched_vsched_ns = cell(case, threads, "vsched", "vsched");
            let sched_channel_ns = cell(case, threads, "vsched", CHANNEL);
            out.push(GuestRow {
                case,
                oversubscription: factor,
                threads,
                default_glibc_ns: cell(case, threads, "default", "glibc"),
                default_vsched_ns,
                sched_glibc_ns: cell(case, threads, "vsched", "glibc"),
                sched_vsched_ns,
                sched_channel_ns,
                channel_speedup: paired(case, threads, ("vsched", "vsched"), ("vsched", CHANNEL)),
                together: ratio(sched_vsched_ns, default_vsched_ns),
                together_vs_1x: ratio(per_unit(case, sched_vsched_ns, threads), together_1x),
            });
        }
    }
    out
}

/// "No slower", with 5% for the guests' noise (the host benchmark's mutex
/// goal allows as much).
const TOGETHER_AT_MOST: f64 = 1.05;
/// Most the runtime under vsched's scheduler may take, at 4x, per unit of
/// work against its own 1x, for the cases the issue names (barrier and
/// the condvar rings).
const TOGETHER_VS_1X_AT_MOST: f64 = 1.25;

/// The goals: in every row the runtime is no slower with vsched's
/// scheduler than with the default one (`together` at most 1.05), and the
/// barrier and condvar rings at 4x stay within 1.25x of their own 1x.
pub fn goals(rows: &[GuestRow]) -> Vec<super::Goal> {
    let mut out = Vec::new();
    for r in rows {
        if let Some(t) = r.together {
            out.push(super::Goal {
                goal: format!(
                    "{} at {}x: no slower with vsched sched (together)",
                    r.case.name(),
                    r.oversubscription
                ),
                value: t,
                met: t <= TOGETHER_AT_MOST,
            });
        }
    }
    for r in rows {
        if let Some(s) = r.channel_speedup {
            out.push(super::Goal {
                goal: format!(
                    "{} at {}x: no slower with the channel than without",
                    r.case.name(),
                    r.oversubscription
                ),
                value: s,
                met: s >= 1.0 / TOGETHER_AT_MOST,
            });
        }
    }
    for r in rows {
        let named = matches!(
            r.case,
            Case::Barrier | Case::CondBroadcast | Case::CondSignal
        );
        if let (true, 4, Some(v)) = (named, r.oversubscription, r.together_vs_1x) {
            out.push(super::Goal {
                goal: format!(
                    "{} at 4x within {TOGETHER_VS_1X_AT_MOST}x of own 1x, vsched sched",
                    r.case.name()
                ),
                value: v,
                met: v <= TOGETHER_VS_1X_AT_MOST,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_every_cell_under_both_schedulers_in_rotated_order() {
        let s = guest_script(&[Case::Mutex], 0, "libvsched_sync.so", "");
        let first = s.find("@@sync 0 default").unwrap();
        let second = s.find("@@sync 0 vsched").unwrap();
        assert!(first < second, "round 0: the default scheduler first");
        let s1 = guest_script(&[Case::Mutex], 1, "libvsched_sync.so", "--no-bvs");
        assert!(s1.find("@@sync 1 vsched").unwrap() < s1.find("@@sync 1 default").unwrap());
        // 2 factors x (2 runtimes under the default + 3 under vsched's).
        assert_eq!(s.matches("echo \"@@sync").count(), 10);
        assert!(s.contains("vsched exec --channel -- syncbench mutex 8 100000"));
        assert_eq!(s.matches("@@sync 0 default vsched-channel").count(), 0);
        assert!(s.contains("$(cat /sys/kernel/sched_ext/state)"));
        assert!(s.contains("vsched exec -- syncbench mutex 8 100000"));
        assert!(s.contains("vsched sched -q  --ready-file"));
        assert!(s1.contains("vsched sched -q --no-bvs --ready-file"));
        assert!(s.contains("export VSCHED_SYNC_LIB=/bin/libvsched_sync.so\n"));
        // A scheduler that never got ready is reported, not timed.
        assert!(s.contains("else echo \"@@unready 0\""));
    }

    fn json(ns: f64) -> String {
        format!(
            "{{\"case\":\"mutex\",\"threads\":2,\"ops\":10,\"elapsed_s\":{},\"ns_per_op\":{ns},\
             \"voluntary_ctxt_switches\":1,\"involuntary_ctxt_switches\":2,\"migrations\":3,\"loaded\":1}}",
            ns * 1e-8
        )
    }

    #[test]
    fn results_are_parsed_and_missing_cells_named() {
        let out = format!(
            "noise\n@@sync 0 default vsched mutex 2 10 disabled\n{}\n@@sync 0 vsched vsched mutex 2 10 enabled\n{}\n\
             @@sync 0 vsched glibc mutex 2 10 enabled\nsyncbench: crashed\n",
            json(100.0),
            json(150.0)
        );
        let (runs, missing) = parse(&out, 0, &[Case::Mutex]);
        assert_eq!(runs.len(), 2);
        assert!(runs.iter().all(|r| r.sample.loaded == 1));
        assert_eq!(runs[1].scheduler, "vsched");
        assert_eq!(runs[1].sample.ns_per_op, 150.0);
        assert_eq!(runs[0].sample.migrations, 3);
        // 10 cells (the channel runtime under vsched's only), 2 measured.
        assert_eq!(missing.len(), 8, "{missing:?}");
        assert!(missing
            .iter()
            .any(|m| m.contains("vsched scheduler, vsched-channel")));
        assert!(!missing
            .iter()
            .any(|m| m.contains("default scheduler, vsched-channel")));
        assert!(missing
            .iter()
            .any(|m| m.contains("mutex at 2 threads, vsched scheduler, glibc")));
        let rows = rows(&runs, &[Case::Mutex]);
        assert_eq!(rows[0].together, Some(1.5));
        assert_eq!(rows[1].together, None, "nothing at 4x");
        let goals = goals(&rows);
        assert_eq!(goals.len(), 1, "one row measured, mutex has no 4x/1x goal");
        assert!(!goals[0].met && goals[0].value == 1.5, "{goals:?}");
    }

    #[test]
    fn a_run_with_the_runtime_where_it_should_not_be_is_reported() {
        let out = format!(
            "@@sync 0 default glibc mutex 2 10 disabled\n{}\n@@sync 0 vsched vsched mutex 2 10 disabled\n{}\n",
            json(100.0),
            json(100.0)
        );
        let (runs, missing) = parse(&out, 0, &[Case::Mutex]);
        assert!(runs.is_empty(), "both left out of the medians: {runs:?}");
        assert!(
            missing
                .iter()
                .any(|m| m.contains("glibc: the runtime was loaded")),
            "{missing:?}"
        );
        assert!(
            missing
                .iter()
                .any(|m| m.contains("sched_ext was disabled, not enabled")),
            "{missing:?}"
        );
    }

    /// A run under vsched's scheduler taking `ns` per operation.
    fn sched_run(round: usize, runtime: &str, case: &str, threads: usize, ns: f64) -> GuestRun {
        GuestRun {
            round,
            scheduler: "vsched".into(),
            runtime: runtime.into(),
            case: case.into(),
            threads,
            sample: Sample {
                ops: 1,
                elapsed_s: 1.0,
                ns_per_op: ns,
                voluntary_ctxt_switches: 0,
                involuntary_ctxt_switches: 0,
                migrations: 0,
                loaded: 1,
            },
        }
    }

    #[test]
    fn a_barrier_round_counts_one_unit_per_thread_against_1x() {
        let run = |threads, ns| sched_run(0, "vsched", "barrier", threads, ns);
        let rows = rows(&[run(2, 1000.0), run(8, 8000.0)], &[Case::Barrier]);
        // 8000 / 8 threads against 1000 / 2 threads.
        assert_eq!(rows[1].together_vs_1x, Some(2.0));
    }

    /// Guests differ by more than the channel does: its speed-up is each
    /// guest's own ratio, not a ratio of medians taken across guests.
    #[test]
    fn the_channels_speedup_is_the_median_of_each_guests_own_ratio() {
        let run = |round, runtime, ns| sched_run(round, runtime, "mutex", 8, ns);
        // A slow guest (round 1) and two fast ones; in each, the channel
        // takes 0.8 of the time without it.
        let runs = [
            run(0, "vsched", 100.0),
            run(0, CHANNEL, 80.0),
            run(1, "vsched", 1000.0),
            run(1, CHANNEL, 800.0),
            run(2, "vsched", 110.0),
            run(2, CHANNEL, 88.0),
        ];
        let rows = rows(&runs, &[Case::Mutex]);
        let s = rows[1].channel_speedup.unwrap();
        assert!((s - 1.25).abs() < 1e-9, "{s}");
    }
}
