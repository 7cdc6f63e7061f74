//! `vsched bench`: the command lines of `bench spin` and `bench sync`, and
//! the tables of `bench spin`. What runs and what it concludes is
//! vsched-bench's (crates/bench).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use vsched_bench::spin::{SpinBench, SpinBenchConfig};
use vsched_bench::{Harness, Interrupt};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Busy-waiting detection: accuracy (the paper's Tables 2 and 3) and effect
    Spin(SpinBenchArgs),
    /// pthread synchronisation at 1x and 4x oversubscription: glibc vs `vsched exec`
    Sync(crate::bench_sync::SyncBenchArgs),
    /// The kernel's default scheduler vs `vsched sched` in lab guests (RWC, capacity, overhead)
    Sched(crate::bench_sched::SchedBenchArgs),
    /// Does a sched_ext scheduler crash the guest? Load/unload cycles in lab guests, panics counted per variant
    Soak(crate::bench_soak::SoakBenchArgs),
    /// Real programs (xz, zstd, pigz, pbzip2, OpenMP, sqlite3, memcached, a mutex program): glibc vs `vsched exec`
    Real(crate::bench_real::RealBenchArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Accuracy,
    Effect,
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT RUNS
  accuracy: every spin-zoo lock with timed waits (sensitivity: share of waits
            of at least 1 ms that were detected), every compute kernel on all
            vCPUs (specificity: share of decision windows not called spinning),
            and each kernel with and without the detector (slowdown, medians).
  effect:   spin token ring (20 us of work per hand-off), spinning pipeline,
            and an OpenMP program with OMP_WAIT_POLICY=active (if a C compiler
            with OpenMP is installed), at 1x and 4x as many threads as vCPUs,
            each without and with `vsched run --spin-detect`, side by side.
  Baselines at 4x are slow by nature; they run fewer hand-offs and are compared
  per hand-off.

EXAMPLES
  vsched bench spin                     everything, 3 runs, table
  vsched bench spin --only effect --runs 5 --json > effect.json")]
pub struct SpinBenchArgs {
    /// Run only one part
    #[arg(long, value_enum)]
    only: Option<Part>,

    /// Repetitions of each timed measurement (medians are reported)
    #[arg(long, default_value_t = 3)]
    runs: usize,

    /// Timed waits per lock in the accuracy part
    #[arg(long, default_value_t = 60)]
    episodes: usize,

    /// Print JSON instead of tables
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<bool> {
    match cmd {
        BenchCommand::Spin(args) => {
            args.check()?;
            spin(args, &harness()?)
        }
        BenchCommand::Sync(args) => {
            args.check()?;
            if args.guest {
                crate::bench_sync::run_guest(args)
            } else {
                crate::bench_sync::run(args, &harness()?)
            }
        }
        BenchCommand::Sched(args) => crate::bench_sched::run(args),
        BenchCommand::Soak(args) => crate::bench_soak::run(args),
        BenchCommand::Real(args) => {
            args.check()?;
            crate::bench_real::run(args, &harness()?)
        }
    }
}

/// What every benchmark runs with: this vsched binary, this process's
/// vCPUs, and Ctrl-C/SIGTERM as the interrupt.
fn harness() -> Result<Harness> {
    crate::signals::catch();
    let vcpus = vsched_os::affinity::thread_affinity(0)
        .context("reading this process's CPU affinity")?
        .len();
    let vsched = std::env::current_exe().context("locating the vsched binary")?;
    Ok(Harness {
        vsched,
        vcpus,
        interrupt: Interrupt::new(&crate::signals::STOP),
    })
}

impl SpinBenchArgs {
    fn check(&self) -> Result<()> {
        if self.runs == 0 || self.episodes == 0 {
            bail!("--runs and --episodes must be at least 1");
        }
        Ok(())
    }
}

fn spin(args: SpinBenchArgs, harness: &Harness) -> Result<bool> {
    let config = SpinBenchConfig {
        accuracy: args.only != Some(Part::Effect),
        effect: args.only != Some(Part::Accuracy),
        runs: args.runs,
        episodes: args.episodes,
    };
    let out = vsched_bench::spin::run(harness, &config)?;
    for why in &out.skipped {
        eprintln!("vsched bench: note: {why}");
    }
    crate::render::json_or_table(args.json, &out, print_tables)?;
    Ok(true)
}

fn print_tables(b: &SpinBench) {
    println!("vsched bench spin ({} vCPUs)", b.vcpus);
    if let Some(a) = &b.accuracy {
        println!("\nSENSITIVITY (waits of at least 1 ms)");
        println!(
            "  {:<20} {:>8} {:>8} {:>10} {:>14}",
            "lock", "waits", "found", "rate", "median delay"
        );
        for l in &a.locks {
            println!(
                "  {:<20} {:>8} {:>8} {:>9.2}% {:>11.0} us",
                l.lock,
                l.episodes,
                l.detected,
                100.0 * l.detection_rate(),
                l.median_detection_us
            );
        }
        println!("\nSPECIFICITY AND SLOWDOWN (compute kernels on every vCPU)");
        println!(
            "  {:<16} {:>9} {:>6} {:>12} {:>10} {:>10} {:>9}",
            "kernel", "windows", "false", "specificity", "alone", "detected", "slowdown"
        );
        for k in &a.kernels {
            println!(
                "  {:<16} {:>9} {:>6} {:>11.3}% {:>9.3}s {:>9.3}s {:>8.2}%",
                k.kernel,
                k.windows,
                k.false_positives,
                100.0 * k.specificity(),
                k.baseline_s,
                k.detected_s,
                100.0 * k.slowdown
            );
        }
        println!(
            "\n  sensitivity {:.2}% (goal >= 99.5%)   specificity {:.3}% (goal >= 99.5%)   median slowdown {:.2}% (goal <= 1%)",
            100.0 * a.sensitivity,
            100.0 * a.specificity,
            100.0 * a.median_slowdown
        );
    }
    if !b.effect.is_empty() {
        println!("\nEFFECT (median time per hand-off / item / region)");
        println!(
            "  {:<15} {:>7} {:>5} {:>13} {:>13} {:>9} {:>9}",
            "program", "threads", "x", "without", "with", "speedup", "vs 1x"
        );
        for r in &b.effect {
            println!(
                "  {:<15} {:>7} {:>5} {:>10.1} us {:>10.1} us {:>8.1}x {:>8.2}x",
                r.program,
                r.threads,
                r.oversubscription,
                r.baseline_us,
                r.detected_us,
                r.speedup,
                r.vs_1x
            );
        }
        println!("  goals at 4x: speedup >= 20x, within 5x of the 1x time");
    }
}
