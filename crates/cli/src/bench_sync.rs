//! `vsched bench sync`: its command line and its table. The benchmark
//! itself (the C program, calibration, medians, goals) is vsched-bench's
//! `sync` module (crates/bench/src/sync).

use anyhow::{bail, Result};
use clap::builder::PossibleValue;
use clap::{Args, ValueEnum};
use vsched_bench::sync::{Case, SyncBench};
use vsched_bench::Harness;

/// A case as a command-line value: the names are vsched-bench's.
#[derive(Copy, Clone, Debug)]
pub struct CaseArg(Case);

/// Every case as a value, in the order of `Case::ALL`.
static CASE_ARGS: [CaseArg; Case::ALL.len()] = {
    let mut args = [CaseArg(Case::Mutex); Case::ALL.len()];
    let mut i = 0;
    while i < args.len() {
        args[i] = CaseArg(Case::ALL[i]);
        i += 1;
    }
    args
};

impl ValueEnum for CaseArg {
    fn value_variants<'a>() -> &'a [Self] {
        &CASE_ARGS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()))
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
    only: Vec<CaseArg>,

    /// Repetitions of each measurement (medians are reported)
    #[arg(long, default_value_t = 3)]
    runs: usize,

    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

impl SyncBenchArgs {
    pub fn check(&self) -> Result<()> {
        if self.runs == 0 {
            bail!("--runs must be at least 1");
        }
        Ok(())
    }
}

pub fn run(args: SyncBenchArgs, harness: &Harness) -> Result<bool> {
    let only: Vec<Case> = args.only.iter().map(|c| c.0).collect();
    let out = vsched_bench::sync::run(harness, &Case::selected(&only), args.runs)?;
    crate::render::json_or_table(args.json, &out, print_table)?;
    Ok(true)
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
