//! `vsched bench soak`: its command line and its table. The guests, the
//! workload and the counting are vsched-bench's `soak` module.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use vsched_bench::soak::{self, GuestOutcome, GuestResult, SoakConfig, SoakReport};

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT RUNS
  Lab guests (2 vCPUs, free on the host, Debian's sched_ext cloud kernel),
  each running a mixed workload the whole time: threads messaging over Unix
  sockets, a 4-thread barrier program, a fork/exec storm, a CPU-bound task
  hopping between vCPUs with taskset. In each guest the variant's scheduler
  is loaded, held for --hold and unloaded (SIGINT), --cycles times; sched_ext
  moving every task between scheduling classes is the moment that crashed
  guests. Variants (--variant, repeatable; default: all):
    default             the kernel's own scheduler only (the control)
    scx_bpfland         an independent sched_ext scheduler (crates.io's
                        scx_bpfland; --scx-bpfland PATH, or built once with
                        `bash scripts/install-scx.sh`)
    vsched-fifo         vsched's minimal FIFO reference mode, no probers
    vsched              `vsched sched -q --interval 60s --interval-json F`
                        (a long hold reports its counters, from F, with its
                        memory and CPU each minute)
    vsched-no-rwc, -no-capacity, -no-bvs, -no-ivh, -no-probe
                        vsched with one mechanism off
  Guests of the variants alternate. A guest kernel panic ends that guest and
  is counted with its reason and the cycle it interrupted; the soak goes on.
  Rates are per cycle begun and per guest, with 95% Wilson intervals.
  Cycles that did not load or unload, loader failures, workload failures
  and kernel complaints in dmesg (BUG, WARNING, stalls) are listed too.

  Needs what the lab needs (root, QEMU 10 or newer, busybox-static) and a C
  compiler. --qemu and --allow-old-qemu run an older emulator on purpose
  (docs/lab.md, \"The emulator\").

EXIT STATUS
  0 no guest panicked and nothing went wrong, 1 a panic or a problem, 2 the
  soak could not run.

EXAMPLES
  vsched bench soak --variant vsched --variant default --guests 4 --cycles 6
  vsched bench soak --guests 10 --cycles 30 --hold 10s --json > soak.json")]
pub struct SoakBenchArgs {
    /// A variant to run (repeatable; default: all)
    #[arg(long = "variant", value_name = "NAME")]
    variants: Vec<String>,

    /// Guests per variant
    #[arg(long, default_value_t = 2)]
    guests: usize,

    /// Load/unload cycles per guest
    #[arg(long, default_value_t = 6)]
    cycles: usize,

    /// How long each cycle keeps the scheduler loaded
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = humantime::parse_duration)]
    hold: std::time::Duration,

    /// The scx_bpfland binary (default: the one scripts/install-scx.sh built)
    #[arg(long, value_name = "PATH")]
    scx_bpfland: Option<PathBuf>,

    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    guest: crate::lab_args::GuestArgs,
}

/// Where scripts/install-scx.sh puts scx_bpfland.
fn default_scx_bpfland() -> PathBuf {
    vsched_lab::kernel::cache_dir().join("scx/bin/scx_bpfland")
}

pub fn run(args: SoakBenchArgs) -> Result<bool> {
    if args.guests == 0 || args.cycles == 0 {
        bail!("--guests and --cycles must be at least 1");
    }
    if args.hold.is_zero() {
        bail!("--hold must be longer than 0");
    }
    let known = soak::known_variants();
    let variants = if args.variants.is_empty() {
        known.clone()
    } else {
        let mut chosen = Vec::new();
        for name in &args.variants {
            let v = known.iter().find(|v| &v.name == name).with_context(|| {
                let names: Vec<&str> = known.iter().map(|v| v.name.as_str()).collect();
                format!("no variant {name:?}; there are: {}", names.join(", "))
            })?;
            chosen.push(v.clone());
        }
        chosen
    };
    let scx_bpfland = if variants.iter().any(|v| v.name == "scx_bpfland") {
        let path = args.scx_bpfland.clone().unwrap_or_else(default_scx_bpfland);
        if !path.is_file() {
            bail!(
                "the scx_bpfland variant needs scx_bpfland at {}: build it with \
                 `bash scripts/install-scx.sh` (cargo install from crates.io), pass \
                 --scx-bpfland PATH, or leave the variant out (--variant NAME ...)",
                path.display()
            );
        }
        Some(path)
    } else {
        None
    };
    crate::signals::catch();
    let opts = args.guest.lab_options(None)?;
    let config = SoakConfig {
        variants,
        guests_per_variant: args.guests,
        cycles_per_guest: args.cycles,
        hold_s: args.hold.as_secs_f64(),
        scx_bpfland,
    };
    eprintln!(
        "== soak: {} variant(s) x {} guest(s) x {} cycle(s) of {} loaded",
        config.variants.len(),
        config.guests_per_variant,
        config.cycles_per_guest,
        humantime::format_duration(args.hold)
    );
    let report = soak::run(&config, &opts, &crate::signals::STOP, print_progress)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    let clean = report
        .summaries
        .iter()
        .all(|s| s.panics == 0 && s.failed_guests == 0 && s.problems.is_empty());
    Ok(clean)
}

fn print_progress(g: &GuestResult) {
    let what = match &g.outcome {
        GuestOutcome::Completed => "completed".to_string(),
        GuestOutcome::Panicked {
            cause,
            in_cycle,
            console_tail,
            ..
        } => {
            let mut s = format!(
                "PANICKED in cycle {}: {cause}",
                in_cycle.map_or("-".into(), |c| c.to_string())
            );
            for l in console_tail.lines() {
                s.push_str(&format!("\n    | {l}"));
            }
            s
        }
        GuestOutcome::Failed { error } => format!("FAILED: {error}"),
    };
    eprintln!(
        "{} guest {}: {} cycles, {:.0} s loaded; {what}",
        g.variant, g.index, g.cycles_done, g.loaded_s
    );
    if let Some(line) = usage_line(&g.usage) {
        eprintln!("    {line}");
    }
    for p in &g.problems {
        eprintln!("    problem: {p}");
    }
}

/// The loader's footprint over the guest's last hold: resident memory first
/// and last, and its CPU time as a share of one vCPU in the first and the
/// last interval between reports (growth shows as the two drifting apart).
fn usage_line(all: &[soak::Usage]) -> Option<String> {
    let last_cycle = all.last()?.cycle;
    let usage: Vec<&soak::Usage> = all.iter().filter(|u| u.cycle == last_cycle).collect();
    let (first, last) = (usage.first()?, usage.last()?);
    if usage.len() < 3 {
        return None;
    }
    // utime + stime are in USER_HZ ticks, 100 a second on Linux.
    let share = |a: &soak::Usage, b: &soak::Usage| {
        let ms = b.at_ms.saturating_sub(a.at_ms).max(1) as f64;
        100.0 * b.cpu_ticks.saturating_sub(a.cpu_ticks) as f64 * 10.0 / ms
    };
    let n = usage.len();
    Some(format!(
        "loader: RSS {} kB -> {} kB; CPU {:.1}% of a vCPU in the first interval, {:.1}% in the last",
        first.rss_kb,
        last.rss_kb,
        share(usage[0], usage[1]),
        share(usage[n - 2], usage[n - 1])
    ))
}

fn print_table(r: &SoakReport) {
    println!(
        "soak: QEMU {}, {}, kernel {}, {} cycles of {:.0} s per guest",
        r.qemu, r.accel, r.kernel, r.cycles_per_guest, r.hold_s
    );
    println!(
        "  {:<20} {:>6} {:>7} {:>9} {:>7} {:>22} {:>9}",
        "variant", "guests", "cycles", "loaded s", "panics", "per cycle (95%)", "problems"
    );
    for s in &r.summaries {
        let rate = s.panic_rate_per_cycle;
        println!(
            "  {:<20} {:>6} {:>7} {:>9.0} {:>7} {:>8.2}% [{:.2}-{:.2}%] {:>9}",
            s.variant,
            s.guests,
            s.cycles_done,
            s.loaded_s,
            s.panics,
            100.0 * rate.events as f64 / rate.trials.max(1) as f64,
            100.0 * rate.low,
            100.0 * rate.high,
            s.problems.len() + s.failed_guests
        );
    }
    for s in &r.summaries {
        for c in &s.panic_causes {
            println!("  {} panic: {c}", s.variant);
        }
        for p in &s.problems {
            println!("  {} problem: {p}", s.variant);
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// Every vsched variant's command line is one `vsched sched` accepts:
    /// a renamed flag fails here, not hours into a soak.
    #[test]
    fn every_vsched_variant_parses_as_a_vsched_command() {
        for v in vsched_bench::soak::known_variants() {
            let Some(cmd) = v.command.filter(|c| c.starts_with("vsched ")) else {
                continue;
            };
            let words: Vec<&str> = cmd.split_whitespace().collect();
            if let Err(e) = crate::Cli::try_parse_from(&words) {
                panic!("{}: {cmd}: {e}", v.name);
            }
        }
    }
}
