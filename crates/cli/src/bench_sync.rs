//! `vsched bench sync`: pthread synchronisation micro-benchmarks (mutex,
//! barrier, condvar rings, rwlock, spinlock ring) at 1x and 4x as many
//! threads as vCPUs, each run directly (glibc) and under `vsched exec`
//! (the preloaded sync library), interleaved, medians per operation.
//!
//! JSON output (`--json`), schema "vsched.bench-sync" version 1: `vcpus`,
//! `runs`, `rows` (one per case and oversubscription: `glibc` and `vsched`
//! medians per operation, `speedup` = glibc / vsched ns per op, `vsched_vs_1x`
//! = vsched ns per unit of work at this oversubscription / at 1x, where a
//! barrier round counts one unit per thread) and `goals` (the
//! issue's targets with the measured value and whether each was met).

use crate::bench_cmd::median;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The benchmark program; compiled with `cc -O2 -pthread` at run time.
const SYNCBENCH_SOURCE: &str = include_str!("../../../bench/sync/syncbench.c");

/// Timed runs last about this long; the pilot runs that size them, at least PILOT_S.
const TARGET_S: f64 = 1.0;
const PILOT_S: f64 = 0.1;
/// Operation counts never grow past this (a safety net against a broken timer).
const MAX_OPS: u64 = 1 << 32;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    Mutex,
    Barrier,
    CondBroadcast,
    CondSignal,
    Rwlock,
    SpinRing,
    Spinlock,
}

impl Case {
    const ALL: [Case; 7] = [
        Case::Mutex,
        Case::Barrier,
        Case::CondBroadcast,
        Case::CondSignal,
        Case::Rwlock,
        Case::SpinRing,
        Case::Spinlock,
    ];

    /// The name the C program and the output use.
    fn name(self) -> &'static str {
        match self {
            Case::Mutex => "mutex",
            Case::Barrier => "barrier",
            Case::CondBroadcast => "cond-broadcast",
            Case::CondSignal => "cond-signal",
            Case::Rwlock => "rwlock",
            Case::SpinRing => "spin-ring",
            Case::Spinlock => "spinlock",
        }
    }
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT RUNS
  A small C program (compiled with `cc -O2 -pthread` into a temporary
  directory) with one case per argument, each at 1x and 4x as many threads
  as vCPUs, once directly (glibc) and once under `vsched exec` (the preloaded
  sync library), alternating, --runs times; medians are reported per op.
    mutex           lock, increment a shared counter, unlock, ~0.15 us of work
    barrier         rounds of ~1 us of work then pthread_barrier_wait (op = round)
    cond-broadcast  token ring on one mutex and one condvar: wait until
                    turn == me, ~1 us of work, pass the turn, broadcast
    cond-signal     the same ring with one condvar per thread, signalled
    rwlock          95% rdlock / 5% wrlock over a 64-entry table
    spin-ring       token ring of pthread spinlocks: wait on my own lock,
                    ~1 us of work, unlock the next thread's (op = hand-off)
    spinlock        one pthread spinlock around a ~0.3 us critical section
  Op counts are sized by a pilot run so each timed run lasts about 1 s; the
  glibc spin ring at 4x spins away whole time slices, so it runs few
  hand-offs. Columns: speedup = glibc / vsched time per op; 4x/1x = vsched's
  time per unit of work at 4x over its own at 1x (a barrier round is one
  unit per thread, as 4x the threads do 4x the work per round); cs/op = voluntary + involuntary
  context switches per op; mig/op = migrations per op (summed over the
  worker threads). The issue's goals are printed with met/missed.

  Needs a C compiler (apt-get install gcc) and the sync library next to the
  vsched binary (cargo build --release).

EXAMPLES
  vsched bench sync                              every case, 3 runs, table
  vsched bench sync --only barrier --only cond-broadcast --runs 5
  vsched bench sync --json > sync.json")]
pub struct SyncBenchArgs {
    /// Run only this case (repeatable)
    #[arg(long, value_enum)]
    only: Vec<Case>,

    /// Repetitions of each measurement (medians are reported)
    #[arg(long, default_value_t = 3)]
    runs: usize,

    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// One line of the C program's output.
#[derive(Deserialize, Debug)]
struct Sample {
    ops: u64,
    elapsed_s: f64,
    ns_per_op: f64,
    voluntary_ctxt_switches: u64,
    involuntary_ctxt_switches: u64,
    migrations: u64,
    loaded: u8,
}

#[derive(Serialize)]
struct SyncBench {
    schema: &'static str,
    version: u32,
    vcpus: usize,
    runs: usize,
    rows: Vec<Row>,
    goals: Vec<Goal>,
}

#[derive(Serialize, Clone)]
struct Row {
    case: Case,
    oversubscription: usize,
    threads: usize,
    glibc: Side,
    vsched: Side,
    /// glibc / vsched time per op.
    speedup: f64,
    /// vsched time per op at this oversubscription / at 1x.
    vsched_vs_1x: f64,
}

/// vsched's time per unit of work, comparable between 1x and 4x: a
/// barrier round holds one unit of work per thread, so 4x as many threads
/// do 4x the work per round; the other cases do the same work per op
/// whatever the thread count.
fn comparable_ns(row: &Row) -> f64 {
    match row.case {
        Case::Barrier => row.vsched.ns_per_op / row.threads as f64,
        _ => row.vsched.ns_per_op,
    }
}

/// Medians over the runs of one variant (each metric on its own).
#[derive(Serialize, Clone, Default)]
struct Side {
    ops: u64,
    ns_per_op: f64,
    voluntary_per_op: f64,
    involuntary_per_op: f64,
    migrations_per_op: f64,
}

#[derive(Serialize, Debug, PartialEq)]
struct Goal {
    goal: String,
    value: f64,
    met: bool,
}

pub fn run(args: SyncBenchArgs) -> Result<bool> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    crate::signals::catch();
    let vcpus = vsched_os::affinity::thread_affinity(0)?.len();
    let vsched = std::env::current_exe()?;
    let program = Program::build()?;
    let cases: Vec<Case> = Case::ALL
        .into_iter()
        .filter(|c| args.only.is_empty() || args.only.contains(c))
        .collect();
    let mut rows = vec![];
    for case in cases {
        for factor in [1, 4] {
            let threads = (vcpus * factor).max(2);
            let row = measure(&program, &vsched, case, threads, args.runs)?;
            let own_1x = rows
                .iter()
                .find(|r: &&Row| r.case == case && r.oversubscription == 1)
                .map_or(comparable_ns(&row), comparable_ns);
            rows.push(Row {
                oversubscription: factor,
                vsched_vs_1x: comparable_ns(&row) / own_1x,
                ..row
            });
        }
    }
    let out = SyncBench {
        schema: "vsched.bench-sync",
        version: 1,
        vcpus,
        runs: args.runs,
        goals: goals(&rows),
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&out);
    }
    Ok(true)
}

/// The compiled C program in a temporary directory, removed on drop.
struct Program {
    dir: PathBuf,
    bin: PathBuf,
}

impl Program {
    fn build() -> Result<Program> {
        let dir = std::env::temp_dir().join(format!("vsched-bench-sync-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let program = Program {
            bin: dir.join("syncbench"),
            dir,
        };
        let src = program.dir.join("syncbench.c");
        std::fs::write(&src, SYNCBENCH_SOURCE)?;
        let out = Command::new("cc")
            .args(["-O2", "-pthread", "-o"])
            .arg(&program.bin)
            .arg(&src)
            .output();
        match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("no C compiler (cc) found; install one: apt-get install gcc")
            }
            Err(e) => bail!("cannot run cc: {e}"),
            Ok(o) if !o.status.success() => bail!(
                "cc could not compile the benchmark program:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => Ok(program),
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which way the program runs: directly, or under `vsched exec`.
#[derive(Copy, Clone, PartialEq)]
enum Variant {
    Glibc,
    Vsched,
}

/// Runs one case at one thread count: sizes each variant, then alternates them.
fn measure(
    program: &Program,
    vsched: &Path,
    case: Case,
    threads: usize,
    runs: usize,
) -> Result<Row> {
    let run = |variant, ops| run_once(program, vsched, variant, case, threads, ops);
    let glibc_ops = calibrate(|ops| run(Variant::Glibc, ops))?;
    let vsched_ops = calibrate(|ops| run(Variant::Vsched, ops))?;
    let (mut glibc, mut with) = (vec![], vec![]);
    for _ in 0..runs {
        glibc.push(run(Variant::Glibc, glibc_ops)?);
        with.push(run(Variant::Vsched, vsched_ops)?);
    }
    let (glibc, vsched) = (side(&glibc), side(&with));
    Ok(Row {
        case,
        oversubscription: 1,
        threads,
        speedup: glibc.ns_per_op / vsched.ns_per_op,
        vsched_vs_1x: 1.0,
        glibc,
        vsched,
    })
}

/// Op count that makes a run last about TARGET_S, from pilot runs that grow
/// until one lasts at least PILOT_S (slow cases need only one short pilot).
fn calibrate(mut run: impl FnMut(u64) -> Result<Sample>) -> Result<u64> {
    let mut ops = 16u64;
    loop {
        let elapsed = run(ops)?.elapsed_s.max(1e-6);
        if elapsed >= PILOT_S || ops >= MAX_OPS {
            return Ok(((ops as f64 * TARGET_S / elapsed) as u64).clamp(16, MAX_OPS));
        }
        let growth = (2.0 * PILOT_S / elapsed).clamp(2.0, 100.0);
        ops = ((ops as f64 * growth) as u64).min(MAX_OPS);
    }
}

fn run_once(
    program: &Program,
    vsched: &Path,
    variant: Variant,
    case: Case,
    threads: usize,
    ops: u64,
) -> Result<Sample> {
    stopped()?;
    let mut cmd = match variant {
        Variant::Glibc => Command::new(&program.bin),
        Variant::Vsched => {
            let mut c = Command::new(vsched);
            c.args(["exec", "--"]).arg(&program.bin);
            c
        }
    };
    let out = cmd
        .args([case.name(), &threads.to_string(), &ops.to_string()])
        .stdin(Stdio::null())
        .output()
        .context("cannot start the benchmark program")?;
    stopped()?;
    let sample = parse_sample(&out)
        .with_context(|| format!("{} with {threads} threads, {ops} ops", case.name()))?;
    check_loaded(variant, &sample)?;
    Ok(sample)
}

fn stopped() -> Result<()> {
    if crate::signals::stopped() {
        bail!("interrupted");
    }
    Ok(())
}

fn parse_sample(out: &Output) -> Result<Sample> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "the benchmark program failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            stdout.trim()
        );
    }
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).with_context(|| format!("unexpected program output {stdout:?}"))
}

/// A comparison is only meaningful if the library was (not) preloaded as intended.
fn check_loaded(variant: Variant, s: &Sample) -> Result<()> {
    match (variant, s.loaded != 0) {
        (Variant::Glibc, true) => bail!(
            "the sync library is loaded in the baseline run (is LD_PRELOAD set in this shell?); \
             unset LD_PRELOAD and run again"
        ),
        (Variant::Vsched, false) => bail!(
            "the program ran under `vsched exec` but the sync library was not loaded \
             (vsched_sync_version not found); build it with `cargo build --release` and \
             run target/release/vsched"
        ),
        _ => Ok(()),
    }
}

fn side(samples: &[Sample]) -> Side {
    let per_op = |f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(|s| f(s) / s.ops as f64).collect();
        median(&mut v)
    };
    let mut ns: Vec<f64> = samples.iter().map(|s| s.ns_per_op).collect();
    Side {
        ops: samples.first().map_or(0, |s| s.ops),
        ns_per_op: median(&mut ns),
        voluntary_per_op: per_op(|s| s.voluntary_ctxt_switches as f64),
        involuntary_per_op: per_op(|s| s.involuntary_ctxt_switches as f64),
        migrations_per_op: per_op(|s| s.migrations as f64),
    }
}

/// The goals for the cases that ran: (case, oversubscription, what, bound).
fn goals(rows: &[Row]) -> Vec<Goal> {
    enum Bound {
        SpeedupAtLeast(f64),
        VsOwn1xAtMost(f64),
    }
    use Bound::*;
    let targets = [
        (Case::Barrier, 4, SpeedupAtLeast(1.5)),
        (Case::CondBroadcast, 4, SpeedupAtLeast(2.0)),
        (Case::Mutex, 1, SpeedupAtLeast(0.95)),
        (Case::Mutex, 4, SpeedupAtLeast(0.95)),
        (Case::Barrier, 4, VsOwn1xAtMost(1.25)),
        (Case::CondBroadcast, 4, VsOwn1xAtMost(1.25)),
        (Case::CondSignal, 4, VsOwn1xAtMost(1.25)),
        (Case::SpinRing, 4, SpeedupAtLeast(20.0)),
    ];
    let mut out = vec![];
    for (case, factor, bound) in targets {
        let Some(r) = rows
            .iter()
            .find(|r| r.case == case && r.oversubscription == factor)
        else {
            continue;
        };
        let name = case.name();
        out.push(match bound {
            SpeedupAtLeast(min) => Goal {
                goal: format!("{name} at {factor}x: speedup over glibc >= {min}x"),
                value: r.speedup,
                met: r.speedup >= min,
            },
            VsOwn1xAtMost(max) => Goal {
                goal: format!("{name} at {factor}x: time per op within {max}x of its own 1x"),
                value: r.vsched_vs_1x,
                met: r.vsched_vs_1x <= max,
            },
        });
    }
    out
}

fn print_table(b: &SyncBench) {
    let runs = match b.runs {
        1 => "1 run".to_string(),
        n => format!("medians of {n} runs"),
    };
    println!("vsched bench sync ({} vCPUs, per op, {runs})", b.vcpus);
    println!(
        "\n  {:<15} {:>2} {:>7} {:>11} {:>11} {:>8} {:>6} {:>15} {:>15}",
        "case",
        "x",
        "threads",
        "glibc ns",
        "vsched ns",
        "speedup",
        "4x/1x",
        "cs/op g | v",
        "mig/op g | v"
    );
    for r in &b.rows {
        let vs_1x = if r.oversubscription == 1 {
            String::new()
        } else {
            format!("{:.2}", r.vsched_vs_1x)
        };
        println!(
            "  {:<15} {:>2} {:>7} {:>11.0} {:>11.0} {:>7.2}x {:>6} {:>7.2} | {:<5.2} {:>7.3} | {:<5.3}",
            r.case.name(),
            r.oversubscription,
            r.threads,
            r.glibc.ns_per_op,
            r.vsched.ns_per_op,
            r.speedup,
            vs_1x,
            r.glibc.voluntary_per_op + r.glibc.involuntary_per_op,
            r.vsched.voluntary_per_op + r.vsched.involuntary_per_op,
            r.glibc.migrations_per_op,
            r.vsched.migrations_per_op,
        );
    }
    if !b.goals.is_empty() {
        println!("\nGOALS");
        for g in &b.goals {
            let verdict = if g.met { "met" } else { "MISSED" };
            println!("  {:<62} {:>8.3}  {verdict}", g.goal, g.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: Case, oversubscription: usize, speedup: f64, vsched_vs_1x: f64) -> Row {
        Row {
            case,
            oversubscription,
            threads: 2 * oversubscription,
            glibc: Side::default(),
            vsched: Side::default(),
            speedup,
            vsched_vs_1x,
        }
    }

    #[test]
    fn goals_cover_only_the_cases_that_ran() {
        let rows = [
            row(Case::Barrier, 1, 1.0, 1.0),
            row(Case::Barrier, 4, 1.6, 1.3),
        ];
        let g = goals(&rows);
        assert_eq!(g.len(), 2);
        assert!(g[0].met, "speedup 1.6 meets >= 1.5");
        assert!(!g[1].met, "4x/1x 1.3 misses <= 1.25");
        assert_eq!(g[1].value, 1.3);
    }

    #[test]
    fn mutex_goal_allows_five_percent_and_applies_at_both_factors() {
        let rows = [
            row(Case::Mutex, 1, 0.96, 1.0),
            row(Case::Mutex, 4, 0.9, 1.0),
        ];
        let met: Vec<bool> = goals(&rows).iter().map(|g| g.met).collect();
        assert_eq!(met, [true, false]);
    }

    #[test]
    fn calibration_scales_to_the_target_duration() {
        // A fake case costing 1 ms per op: pilots grow until one lasts >= PILOT_S.
        let mut pilots = vec![];
        let ops = calibrate(|ops| {
            pilots.push(ops);
            Ok(fake_sample(ops, ops as f64 * 1e-3))
        })
        .unwrap();
        assert!(pilots.len() > 1);
        let want = TARGET_S / 1e-3;
        assert!((ops as f64 - want).abs() <= want * 0.01, "{ops} ops");
    }

    #[test]
    fn loaded_flag_must_match_the_variant() {
        let mut s = fake_sample(10, 0.1);
        assert!(check_loaded(Variant::Glibc, &s).is_ok());
        assert!(check_loaded(Variant::Vsched, &s).is_err());
        s.loaded = 1;
        assert!(check_loaded(Variant::Vsched, &s).is_ok());
        assert!(check_loaded(Variant::Glibc, &s).is_err());
    }

    #[test]
    fn every_case_runs_and_reports_json() {
        let program = match Program::build() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("skipped: {e:#}");
                return;
            }
        };
        for case in Case::ALL {
            let out = Command::new(&program.bin)
                .args([case.name(), "3", "40"])
                .output()
                .unwrap();
            let s = parse_sample(&out).unwrap();
            assert_eq!((s.ops, s.loaded), (40, 0), "{}", case.name());
        }
    }

    fn fake_sample(ops: u64, elapsed_s: f64) -> Sample {
        Sample {
            ops,
            elapsed_s,
            ns_per_op: elapsed_s * 1e9 / ops as f64,
            voluntary_ctxt_switches: 0,
            involuntary_ctxt_switches: 0,
            migrations: 0,
            loaded: 0,
        }
    }
}
