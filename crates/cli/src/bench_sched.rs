//! `vsched bench sched`: its command line and its table. The scenarios,
//! the guest script, medians and goals are vsched-bench's `sched` module.

use anyhow::{bail, Context, Result};
use clap::Args;
use vsched_bench::sched::{self, ScenarioResult, SCENARIOS};

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT RUNS
  Each scenario boots one lab guest with a sched_ext kernel (Debian's newest
  cloud kernel, fetched by the lab; rwc-cpuset: the host release's) and runs a workload (crates/bench/c/
  schedbench.c, compiled with cc and carried into the guest) under every
  variant once per round, rotating the order each round:
    default   the kernel's own scheduler
    vsched    `vsched sched` loaded, probers warmed up for 3 s first
    vsched F  the same with a technique switched off (ablation)
    oracle    the workload pinned with taskset to the vCPUs a scheduler
              that knew the layout would use: the limit (IVH: each thread
              moving itself over the vCPUs every 4 ms, `schedbench rotate`)
    fifo-reference  (overhead scenarios) a minimal FIFO sched_ext scheduler,
              no probers: what sched_ext itself costs under this guest
              (rwc-cpuset: vsched is `vsched daemon --rwc-cgroup` keeping
              the workload's cgroup off hidden vCPUs, no sched_ext)
  Scenarios:
    rwc                barrier kernel, 4 threads, 4 vCPUs: a straggler (10%
                       cap) and a stacked pair (vSched Fig. 4); goal: 1.5x the
                       default and 80% of the oracle
    rwc-cpuset         the same layout and kernel workload without sched_ext,
                       every variant in one cgroup, vsched = user-space RWC
                       on its cpuset; goal as rwc
    capacity           one CPU-bound thread, 2 vCPUs, one capped at 50%
                       (vSched 5.3); goal: 1.3x and 80% of the oracle
    bvs                a request server on 2 vCPUs of equal capacity whose
                       inactive episodes differ 3x (host loads); p95 latency
                       (vSched Table 3); goal: p95 halved (2x)
    bvs-best-effort    the same beside SCHED_IDLE best-effort threads, with
                       BVS's state check as a column; goal: p95 halved
    ivh-1, ivh-2, ivh-4  1, 2, 4 CPU-bound threads on 4 vCPUs capped at 50%,
                       two per host CPU, RWC off (vSched Fig. 15); goals:
                       1.8x, 1.3x, no loss
    overhead-cpu       2 CPU-bound threads on 2 dedicated vCPUs; goal: within 3%
    overhead-pingpong  a pipe ping-pong pair on 2 dedicated vCPUs; goal: within 3%
    overhead-messaging a hackbench-like messaging kernel (16 threads, Unix
                       sockets) on 2 dedicated vCPUs; goal: within 3%
    overhead-barrier   2 threads meeting at a barrier every ~0.4 ms on 2
                       dedicated vCPUs (adaptability's dedicated phase);
                       goal: within 3%
    overhead-yield     one thread calling sched_yield() with nothing else to
                       run, 2 dedicated vCPUs; goal: within 3%
    overhead-yield-4   4 threads yielding to each other on 2 dedicated vCPUs;
                       goal: within 3%
    gleaner-wakeup, gleaner-barrier, gleaner-pipeline, gleaner-pipeline-heavy,
    gleaner-cpu        Gleaner's Table 1 and Fig. 4 in miniature on 2 vCPUs,
                       consolidation (--consolidate), vsched run --consolidate
                       and (but for gleaner-wakeup) vsched daemon
                       --consolidate-cgroups as columns; goal: within 1.3x of
                       the program on one vCPU, no loss against the default
    gleaner-barrier-4, gleaner-pipeline-4
                       the barrier and the pipeline on 4 vCPUs, two to a
                       host CPU; the same columns and goal
    adaptability       a 2-thread barrier kernel's throughput every 250 ms while
                       its 2 vCPUs walk through dedicated, capped 50%,
                       asymmetric 2:1, straggler, stacked, dedicated (12 s
                       each; vSched Fig. 16); one guest per run; goal: no loss
                       overall, and vsched back at its level within 2 s (two
                       probe intervals) of every change
  speedup = default's median / the variant's, of the scenario's metric (wall
  time, or p95 latency; lower is better for both). Under TCG emulation every
  scheduler callback and context switch is emulated too (docs/sched.md).

  Needs what the lab needs (root, QEMU 10 or newer, busybox-static) and a C
  compiler.

EXAMPLES
  vsched bench sched                        every scenario, 5 rounds
  vsched bench sched --only rwc --rounds 9
  vsched bench sched --json > sched.json
  vsched bench sched --only adaptability --rounds 3 --plot docs/img")]
pub struct SchedBenchArgs {
    /// Run only this scenario (repeatable)
    #[arg(
        long,
        value_name = "NAME",
        value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS.iter().map(|s| s.name))
    )]
    only: Vec<String>,

    /// Rounds per scenario (every variant runs once per round; medians are reported)
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,

    /// Write plots into this directory (created if missing): the
    /// adaptability timeline as sched-adaptability.svg
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,

    #[command(flatten)]
    guest: crate::lab_args::GuestArgs,
}

pub fn run(args: SchedBenchArgs) -> Result<bool> {
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the plot directory {}", dir.display()))?;
    }
    crate::signals::catch();
    let opts = args.guest.lab_options(None)?;
    let mut results = Vec::new();
    for s in SCENARIOS
        .iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| o == s.name))
    {
        eprintln!("== {} ({} rounds): {}", s.name, args.rounds, s.what);
        let r = sched::run_scenario(s, args.rounds, &opts, &crate::signals::STOP)
            .with_context(|| format!("scenario {}", s.name))?;
        if !args.json {
            print_table(&r);
        }
        if let (Some(dir), Some(t)) = (&args.plot, &r.timeline) {
            let path = dir.join(format!("sched-{}.svg", r.name));
            let title = format!("{}: {} rounds, median per 250 ms", r.name, r.rounds);
            sched::timeline_svg(t, &title, &path)?;
            eprintln!("plot: {}", path.display());
        }
        results.push(r);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    Ok(true)
}

/// A measured value with the digits that matter: latencies in whole µs,
/// seconds to the ms, seconds per round (under a ms) to the ns.
fn value(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 0.1 {
        format!("{x:.3}")
    } else {
        format!("{x:.6}")
    }
}

fn print_table(r: &ScenarioResult) {
    println!(
        "{} ({}, {} rounds; workload: schedbench {})",
        r.name, r.accel, r.rounds, r.workload
    );
    println!(
        "  {:<26} {:>12} {:>8} {:>8}  runs",
        "variant",
        format!("median {}", r.metric),
        "speedup",
        "paired"
    );
    for v in &r.variants {
        let runs: Vec<String> = v.values.iter().map(|&x| value(x)).collect();
        let others: Vec<String> = v
            .other_medians
            .iter()
            .map(|(k, x)| format!("{k} {x:.0}"))
            .collect();
        let paired = v
            .paired_speedup_vs_default
            .map_or("-".to_string(), |p| format!("{p:.2}x"));
        println!(
            "  {:<26} {:>12} {:>7.2}x {:>8}  {}{}",
            v.variant,
            value(v.median),
            v.speedup_vs_default,
            paired,
            runs.join(" "),
            if others.is_empty() {
                String::new()
            } else {
                format!("  (medians: {})", others.join(", "))
            }
        );
    }
    if let Some(t) = &r.timeline {
        println!(
            "  {:<18} {:>7} {:>12} {:>12} {:>8} {:>10}",
            "phase", "from s", "default r/s", "vsched r/s", "ratio", "recovery"
        );
        for p in &t.phases {
            let level = |v: &str| {
                p.levels
                    .iter()
                    .find(|(n, _)| n == v)
                    .map_or(f64::NAN, |&(_, l)| l)
            };
            let recovery = p
                .vsched_recovery_s
                .map_or("never".to_string(), |s| format!("{s:.2} s"));
            println!(
                "  {:<18} {:>7.1} {:>12.1} {:>12.1} {:>7.2}x {:>10}",
                p.name,
                p.start_s,
                level("default"),
                level("vsched"),
                p.vsched_over_default,
                recovery
            );
        }
    }
    if let Some(o) = r.vsched_of_oracle {
        println!("  vsched reaches {:.0}% of the oracle's speed", o * 100.0);
    }
    let goal = match r.goal.min_of_oracle {
        Some(min) => format!(
            "speedup >= {:.2}x and >= {:.0}% of the oracle",
            r.goal.min_speedup,
            min * 100.0
        ),
        None => format!("speedup >= {:.2}x", r.goal.min_speedup),
    };
    let goal = match r.goal.max_recovery_s {
        Some(max) => format!("{goal} and back at its level within {max:.1} s of every change"),
        None => goal,
    };
    let verdict = match r.goal_met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "-",
    };
    println!("  goal: {goal}: {verdict}");
    println!();
}
