//! `vsched probe`: argument checking, the one-shot and `--watch` loops, output.

use crate::args::parse_duration;
use crate::progress::Progress;
use crate::render;
use crate::signals;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vsched_model::report::ProbeReport;
use vsched_model::report::TopologyReport;
use vsched_model::EpisodeFilter;
use vsched_probe::plan::{self, CpuSelection, StepPlan, WatchSchedule, Windows};
use vsched_probe::session::{ProbeOptions, Session};
use vsched_probe::vcap::SampleConfig;
use vsched_probe::vtop::VtopConfig;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Measure {
    /// Relative capacity (speed x available share), stragglers
    Capacity,
    /// Available share, steal, inactive episodes ("vCPU latency")
    Activity,
    /// Pairwise cache-line latency, stacked vCPUs, SMT/LLC groups
    Topology,
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
HOW IT WORKS
  One prober thread per vCPU spins in a high-priority (heavy) window, then in a
  SCHED_IDLE (light) window, all vCPUs at once, recording every gap in its own
  timeline. Gaps split into hypervisor time (steal, reported or hidden) and
  guest pre-emption. capacity = core speed x available share, 1024 = strongest.
  Topology: pairs of vCPUs ping-pong a cache line; stacked vCPUs (sharing one
  physical CPU) never overlap and complete almost no fast transfers.
  Nothing on the system is changed: only the probe's own threads are pinned.

EXAMPLES
  vsched probe                         one probe of every online vCPU (< 1 s)
  vsched probe --json > now.json       the same, as versioned JSON
  vsched probe --watch --interval 2s   keep probing; EMA-smoothed updates
  vsched probe --only topology --validate now.json
                                       cheap re-check of an earlier topology
  vsched probe --cpus 0-3 --duration 1s --heavy 200ms
  vsched probe --plot vcpus.svg       the table, and the report as a picture

See docs/probers.md for the method and its limits, docs/schema.md for the JSON.")]
pub struct ProbeArgs {
    /// Print versioned JSON (one object per line under --watch) instead of tables
    #[arg(long)]
    json: bool,

    /// Keep probing and print an update after every interval
    #[arg(long)]
    watch: bool,

    /// Time between updates under --watch
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    interval: Duration,

    /// Stop --watch after this many updates (default: until Ctrl-C)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,

    /// Measure only these (comma-separated)
    #[arg(long, value_enum, value_delimiter = ',', value_name = "WHAT")]
    only: Vec<Measure>,

    /// vCPUs to probe, kernel list syntax (e.g. 0-3,6); default: all online ones
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,

    /// Light-phase (SCHED_IDLE) window per sample [default: 200ms; under --watch 100ms, or half the interval if that is shorter]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Option<Duration>,

    /// Heavy-phase (high-priority) window [default: 100ms, 10ms under --watch]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    heavy: Option<Duration>,

    /// Under --watch, run a heavy phase this often (also in the step after a
    /// vCPU's share read far from its estimate, by a quarter or 2x)
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    heavy_every: Duration,

    /// Under --watch, validate the topology this often (full re-probe if it
    /// changed; also in the step after a vCPU's share moved by a quarter or
    /// 2x two readings in a row, at most every 2s; at least every 2s while
    /// some vCPUs are stacked, since only a check sees them placed apart
    /// again)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    topology_every: Duration,

    /// Shortest gap counted as an inactive episode (shorter: interrupts, kernel threads)
    #[arg(long, value_name = "DURATION", default_value = "200us", value_parser = parse_duration, allow_hyphen_values = true)]
    min_episode: Duration,

    /// A vCPU is a straggler below this fraction of the mean capacity
    #[arg(long, value_name = "RATIO", default_value_t = plan::STRAGGLER_RATIO, value_parser = parse_ratio)]
    straggler_ratio: f64,

    /// Half-life of the EMA smoothing under --watch
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration, allow_hyphen_values = true)]
    half_life: Duration,

    /// Validate the topology of an earlier `vsched probe --json` report instead of probing it in full
    #[arg(long, value_name = "FILE")]
    validate: Option<PathBuf>,

    /// Write the raw per-vCPU timelines (gaps, work) of the latest sample to FILE as JSON
    #[arg(long, value_name = "FILE")]
    trace_out: Option<PathBuf>,

    /// Also draw the report as SVG: capacity and availability bars, the pair-latency heatmap (under --watch: redrawn at every update)
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v > 0.0 && v < 1.0) {
        return Err(format!("{v} must be between 0 and 1 (exclusive)"));
    }
    Ok(v)
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let CpuSelection { cpus, warnings } = plan::select_cpus(args.cpus.as_deref())?;
    check_flags(&args)?;
    let previous = read_previous(&args, &cpus)?;
    let (opts, windows) = probe_options(&args, cpus)?;
    let mut session = Session::new(opts);
    if let Some(prev) = &previous {
        session.set_known_topology(prev);
    }
    let first = plan::first_step(previous.is_some());
    if args.watch {
        watch(&args, session, first, &warnings)
    } else {
        probe_once(&args, session, first, windows, warnings)
    }
}

/// Refuses, before any measuring, what cannot work: a plot into a
/// directory that does not exist, --validate without topology.
fn check_flags(args: &ProbeArgs) -> Result<()> {
    if let Some(path) = &args.plot {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            bail!("--plot {}: its directory does not exist", path.display());
        }
    }
    if args.validate.is_some() && !args.only.is_empty() && !args.only.contains(&Measure::Topology) {
        bail!("--validate checks a topology, but --only leaves topology out");
    }
    Ok(())
}

/// The topology of `--validate`'s earlier report, for the vCPUs probed.
fn read_previous(args: &ProbeArgs, cpus: &[u32]) -> Result<Option<TopologyReport>> {
    let Some(path) = &args.validate else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let report: ProbeReport = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a `vsched probe --json` report", path.display()))?;
    Ok(Some(plan::previous_topology(path, report, cpus)?))
}

/// What to measure and how, from the flags; and the windows chosen.
fn probe_options(args: &ProbeArgs, cpus: Vec<u32>) -> Result<(ProbeOptions, Windows)> {
    let only = |m| args.only.is_empty() || args.only.contains(&m);
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let windows = Windows::choose(
        args.duration,
        args.heavy,
        args.watch.then_some(args.interval),
    )?;
    let opts = ProbeOptions {
        cpus,
        capacity: only(Measure::Capacity),
        activity: only(Measure::Activity),
        topology: only(Measure::Topology),
        sample: SampleConfig {
            light_ns: ns(windows.light),
            heavy_ns: ns(windows.heavy),
            ..SampleConfig::default()
        },
        filter: EpisodeFilter {
            min_episode_ns: ns(args.min_episode),
            ..EpisodeFilter::default()
        },
        vtop: VtopConfig::default(),
        straggler_ratio: args.straggler_ratio,
        ema_half_life_s: args.half_life.as_secs_f64(),
    };
    Ok((opts, windows))
}

/// One probe, with a progress line on a terminal.
fn probe_once(
    args: &ProbeArgs,
    mut session: Session,
    first: StepPlan,
    windows: Windows,
    warnings: Vec<String>,
) -> Result<()> {
    let expected_s = if session.measures_vcpus() {
        (windows.light + windows.heavy).as_secs_f64()
    } else {
        0.1 // topology alone: a few pair ping-pongs, well under a second
    };
    let progress = Progress::new(expected_s);
    let update = |what: &str, f: f64| progress.update(what, f);
    let mut report = session.step(
        first,
        progress.enabled().then_some(&update as &dyn Fn(&str, f64)),
    );
    progress.finish();
    report.warnings.splice(0..0, warnings);
    write_trace(args, &session)?;
    emit(args, &report, false)
}

/// `--watch`: a report every interval until Ctrl-C, SIGTERM or --count.
fn watch(
    args: &ProbeArgs,
    mut session: Session,
    first: StepPlan,
    warnings: &[String],
) -> Result<()> {
    // Ctrl-C/SIGTERM end the loop after the current step so the last line
    // of output is whole.
    signals::catch();
    let mut schedule = WatchSchedule::new(args.heavy_every, args.topology_every, Instant::now());
    let mut step = first;
    let mut updates = 0u64;
    loop {
        let step_start = Instant::now();
        let mut report = session.step(step, None);
        report.warnings.splice(0..0, warnings.iter().cloned());
        report.overhead = Some(session.overhead());
        write_trace(args, &session)?;
        emit(args, &report, true)?;
        updates += 1;
        if args.count.is_some_and(|n| updates >= n) {
            return Ok(());
        }
        // Sleep out the interval in short naps so Ctrl-C is prompt.
        while step_start.elapsed() < args.interval {
            if signals::stopped() {
                return Ok(());
            }
            std::thread::sleep(
                args.interval
                    .saturating_sub(step_start.elapsed())
                    .min(Duration::from_millis(50)),
            );
        }
        if signals::stopped() {
            return Ok(());
        }
        step = schedule.next(Instant::now(), session.signals());
    }
}

fn write_trace(args: &ProbeArgs, session: &Session) -> Result<()> {
    if let Some(path) = &args.trace_out {
        let json = serde_json::to_string(&session.last_raw)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn emit(args: &ProbeArgs, report: &ProbeReport, watching: bool) -> Result<()> {
    if let Some(path) = &args.plot {
        crate::probe_plot::write_svg(report, path)?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let text = if args.json {
        if watching {
            serde_json::to_string(report)?
        } else {
            serde_json::to_string_pretty(report)?
        }
    } else {
        let table = render::report(report);
        if watching && std::io::stdout().is_terminal() {
            // Redraw in place.
            format!("\x1b[H\x1b[2J{table}")
        } else if watching {
            format!("--- update {}\n{table}", report.sequence)
        } else {
            table
        }
    };
    // A closed pipe (e.g. `| head`) ends the program quietly.
    match writeln!(out, "{text}").and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => r.context("writing output"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProbeArgs,
    }

    /// The flags' written defaults are the shared constants that
    /// `vsched sched`'s probers use too.
    #[test]
    fn watch_defaults_are_the_shared_ones() {
        let a = Wrapper::parse_from(["probe"]).args;
        assert_eq!(a.heavy_every, plan::WATCH_HEAVY_EVERY);
        assert_eq!(a.topology_every, plan::WATCH_TOPOLOGY_EVERY);
        assert_eq!(a.half_life, plan::EMA_HALF_LIFE);
        assert_eq!(a.straggler_ratio, plan::STRAGGLER_RATIO);
    }
}
