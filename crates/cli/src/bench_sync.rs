//! `vsched bench sync`: its command line and its table. The benchmark
//! itself (the C program, calibration, medians, goals) is vsched-bench's
//! `sync` module (crates/bench/src/sync).

use anyhow::Context;
use anyhow::{bail, Result};
use clap::builder::PossibleValue;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use vsched_bench::sync::guest::{self, GuestSyncBench, GuestSyncConfig};
use vsched_bench::sync::{Case, SyncBench};
use vsched_bench::Harness;
use vsched_os::exec_env::library::find_library;

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

IN A GUEST (--guest)
  The same cases, with fixed op counts, in a lab guest of 2 free vCPUs with
  a sched_ext kernel: under the kernel's default scheduler and under
  `vsched sched`, each case at 2 and 8 threads, directly (glibc) and under
  `vsched exec`. One guest per run (--runs), the schedulers' order rotated
  and glibc and the runtime alternating. Columns: medians in ns per op for
  each scheduler and runtime; together = the runtime under vsched's
  scheduler over the runtime under the default one (goal: at most 1, the
  two halves together never slower than the runtime alone); 4x/1x = the
  runtime under vsched's scheduler at 8 threads over 2 (per unit of work).
  Goals: together at most 1 in every row; barrier and condvar rings at 4x
  within 1.25x of their own 1x. Every run is in the JSON (\"runs\").
  Needs what the lab needs (root, QEMU 10 or newer, busybox-static) and a
  C compiler.

EXAMPLES
  vsched bench sync                              every case, 3 runs, table
  vsched bench sync --only barrier --only cond-broadcast --runs 5
  vsched bench sync --json > sync.json
  vsched bench sync --guest --kernel-version 7.2.13 --json > sync-guest.json")]
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

    /// Run in a sched_ext lab guest, under the kernel's default scheduler
    /// and under `vsched sched` (see IN A GUEST)
    #[arg(long)]
    pub guest: bool,

    /// With --guest: the runtime library to carry into the guest (default:
    /// $VSCHED_SYNC_LIB, else libvsched_sync.so beside the vsched binary)
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,

    /// With --guest: an extra `vsched sched` flag, such as an ablation
    /// (repeatable; e.g. --sched-flag=--no-bvs)
    #[arg(long = "sched-flag", value_name = "FLAG", allow_hyphen_values = true)]
    sched_flags: Vec<String>,

    /// With --guest: the guest's emulator and kernel
    #[command(flatten)]
    lab: crate::lab_args::GuestArgs,
}

impl SyncBenchArgs {
    pub fn check(&self) -> Result<()> {
        if self.runs == 0 {
            bail!("--runs must be at least 1");
        }
        let lab_flag = self.library.is_some()
            || !self.sched_flags.is_empty()
            || self.lab.kernel_version.is_some()
            || self.lab.qemu.is_some()
            || self.lab.allow_old_qemu;
        if lab_flag && !self.guest {
            bail!("--library, --sched-flag, --kernel-version, --qemu and --allow-old-qemu need --guest");
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

/// `--guest`: the cases in lab guests, under both schedulers.
pub fn run_guest(args: SyncBenchArgs) -> Result<bool> {
    let only: Vec<Case> = args.only.iter().map(|c| c.0).collect();
    let library =
        find_library(args.library.as_deref()).context("the runtime library for the guest")?;
    crate::signals::catch();
    let opts = args.lab.lab_options(None)?;
    let config = GuestSyncConfig {
        library,
        rounds: args.runs,
        cases: Case::selected(&only),
        sched_flags: args.sched_flags.join(" "),
    };
    let report = guest::run(&config, &opts, &crate::signals::STOP, |round, runs| {
        eprintln!(
            "  guest {} of {}: {} runs",
            round + 1,
            config.rounds,
            runs.len()
        );
    })?;
    crate::render::json_or_table(args.json, &report, print_guest_table)?;
    Ok(report.problems.is_empty())
}

fn print_guest_table(b: &GuestSyncBench) {
    println!(
        "vsched bench sync --guest ({} vCPUs, {}, {}; ns per op, medians of {} guests)",
        b.vcpus, b.kernel, b.accel, b.rounds
    );
    println!(
        "\n  {:<15} {:>2} {:>7} | {:>11} {:>11} | {:>11} {:>11} {:>11} | {:>8} {:>6} {:>7}",
        "case",
        "x",
        "threads",
        "dflt glibc",
        "dflt vsched",
        "sched glibc",
        "sched vsched",
        "channel on",
        "together",
        "4x/1x",
        "channel"
    );
    let ns = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for r in &b.rows {
        let vs_1x = if r.oversubscription == 1 {
            String::new()
        } else {
            ratio(r.together_vs_1x)
        };
        println!(
            "  {:<15} {:>2} {:>7} | {:>11} {:>11} | {:>11} {:>11} {:>11} | {:>8} {:>6} {:>7}",
            r.case.name(),
            r.oversubscription,
            r.threads,
            ns(r.default_glibc_ns),
            ns(r.default_vsched_ns),
            ns(r.sched_glibc_ns),
            ns(r.sched_vsched_ns),
            ns(r.sched_channel_ns),
            ratio(r.together),
            vs_1x,
            ratio(r.channel_speedup),
        );
    }
    for p in &b.problems {
        println!("  ! {p}");
    }
    print_goals(&b.goals);
}

fn print_goals(goals: &[vsched_bench::sync::Goal]) {
    if goals.is_empty() {
        return;
    }
    println!("\nGOALS");
    for g in goals {
        let verdict = if g.met { "met" } else { "MISSED" };
        println!("  {:<62} {:>8.3}  {verdict}", g.goal, g.value);
    }
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
    print_goals(&b.goals);
}
