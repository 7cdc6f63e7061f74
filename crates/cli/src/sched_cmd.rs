//! `vsched sched`: load vsched's sched_ext scheduler, keep the probers
//! feeding it the vCPU model, print its counters, and unload it on Ctrl-C,
//! SIGTERM or when the program it was started for exits.

use crate::args::parse_duration;
use crate::sched_interval::IntervalLog;
use crate::sched_program::Program;
use crate::signals;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vsched_probe::plan::Windows;
use vsched_probe::watch::WatchConfig;
use vsched_sched::{preflight, Event, Session, Stats, Tunables};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  vsched sched                       load until Ctrl-C, statistics every second
  vsched sched -- make -j8           load for the lifetime of one program
  vsched sched --no-rwc -- ./bench   the ablation without RWC
  vsched sched --latency-sensitive nginx --latency-sensitive redis-server
                                     BVS for these commands from their first wake-up

The scheduler replaces the kernel's default one for every normal task while
it is loaded (sched_ext, Linux 6.12+ with CONFIG_SCHED_CLASS_EXT). When vsched
exits, crashes or is killed, the kernel switches back to its default
scheduler by itself: nothing is left to restore. See docs/sched.md.

Exit status: the program's own with `-- PROGRAM`; otherwise 0, 1 if the
kernel ejected the scheduler (its reason is printed), 2 if it could not load.")]
pub struct SchedArgs {
    /// What the scheduler is loaded with (vsched_sched::Tunables: each
    /// mechanism's switch, the slice and heartbeat, and the benchmark's
    /// hidden ablations).
    #[command(flatten)]
    loaded: Tunables,

    /// Do not run the probers: every vCPU counts as equal (the base policy alone)
    #[arg(long)]
    no_probe: bool,

    /// Treat tasks with this command name (as in `ps -o comm`, 15 characters
    /// at most) as latency-sensitive for BVS from their first wake-up;
    /// repeatable. Other tasks qualify by their own behaviour: most of
    /// their recent wake-ups ran 0.5 ms or less (once 8 were seen).
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    latency_sensitive: Vec<String>,

    /// How often the probers update the model
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    probe_interval: Duration,

    /// The probers' light window in each interval: every vCPU runs a
    /// SCHED_IDLE prober for this long, all at once. Longer reads the
    /// available shares more precisely; shorter leaves idle vCPUs to the
    /// scheduler more of the time (IVH's targets; see docs/sched.md)
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_light_window)]
    light_window: Duration,

    /// Print the counters this often (0 statistics lines with --quiet)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    interval: Duration,

    /// Write each --interval's counters to FILE as a JSON line (also with
    /// --quiet): the counts over that interval, for scripts that follow a
    /// long run. FILE is truncated at start and kept at exit
    #[arg(long, value_name = "FILE")]
    interval_json: Option<PathBuf>,

    /// No live statistics, only the summary at exit
    #[arg(long, short)]
    quiet: bool,

    /// A line for every model update (capacity, available share, what RWC
    /// hides), not only when what RWC hides changes
    #[arg(long, short)]
    verbose: bool,

    /// Write the summary at exit as JSON to FILE
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,

    /// Once the scheduler runs with its first model (at once with --no-probe), write a JSON line to FILE (removed at exit): for scripts that must wait until vsched is in charge
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,

    /// Start PROGRAM as soon as the scheduler loads, not once the
    /// probers' first model is in (by default it waits for the model, at
    /// most 10 s, so that its first threads are placed by capacity and
    /// RWC too)
    #[arg(long)]
    start_at_once: bool,

    /// Program (and its arguments) to run under the scheduler
    #[arg(last = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// What the summary says about one run.
#[derive(serde::Serialize)]
struct Summary {
    schema: &'static str,
    seconds: f64,
    tunables: TunablesJson,
    counters: serde_json::Map<String, serde_json::Value>,
    model_updates: u64,
    /// The last model written (per vCPU), if the probers ran.
    model: Vec<vsched_sched::VcpuModel>,
    /// What the probers cost so far (CPU as a share of one vCPU), from
    /// their last report: what a busy VM gave up to them.
    probe_overhead: Option<vsched_model::report::Overhead>,
    /// Why the kernel ejected the scheduler, if it did (for good: a
    /// hotplug ejection is followed by a reload, counted in `restarts`).
    ejected: Option<vsched_sched::ExitInfo>,
    /// Reloads after the kernel unloaded the scheduler for a vCPU going
    /// offline or coming online.
    restarts: u32,
    program_exit_code: Option<i32>,
    /// The program started before the first model (`--start-at-once`,
    /// or no model within 10 s).
    program_started_before_model: bool,
}

/// The loader's tunables as loaded, and the flags that are the CLI's own.
#[derive(serde::Serialize)]
struct TunablesJson {
    #[serde(flatten)]
    loaded: Tunables,
    latency_sensitive: Vec<String>,
    probe: bool,
    /// The probers' rhythm and light window (0 with `--no-probe`).
    probe_interval_ns: u64,
    light_window_ns: u64,
}

/// The scheduler's tunables as the flags set them.
fn tunables(args: &SchedArgs) -> Tunables {
    args.loaded.resolved()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn run(args: SchedArgs) -> Result<u8> {
    check_windows(&args)?;
    preflight::check()?;
    let tunables = tunables(&args);
    signals::catch();
    let started = Instant::now();
    // Before loading: a file an earlier run left must not say ready now.
    let mut ready = ReadyFile::new(args.ready_file.clone());
    // Before loading too: a path that cannot be written fails here.
    let mut interval_log = args
        .interval_json
        .as_deref()
        .map(IntervalLog::create)
        .transpose()?;
    let mut session = Session::start(tunables, &args.latency_sensitive)?;
    announce(&args, &session, &tunables);
    // The probers and the program start once the scheduler runs; the
    // program once it has a model too, unless told otherwise.
    let (reports_tx, reports) = mpsc::channel();
    let prober = start_probers(&args, tunables, reports_tx)?;
    let mut program = Program::new(&args.program, !args.start_at_once && !args.no_probe);
    let fed = feed_until_done(
        &args,
        &mut session,
        &reports,
        &mut program,
        &mut ready,
        &mut interval_log,
        started,
    )?;
    // Not in charge from here on.
    drop(ready);
    let (model_updates, model) = (session.model_updates(), session.model().to_vec());
    let ending = session.stop();
    let program_exit_code = match fed.program_exit_code {
        Some(code) => Some(code),
        None => {
            if let (Some(e), true) = (&ending.ejected, program.given()) {
                // The program goes on (or starts) under the kernel's own
                // scheduler; its exit status is still this command's.
                let verb = if program.started() {
                    "goes on"
                } else {
                    "starts"
                };
                eprintln!(
                    "vsched sched: the kernel ejected the scheduler ({}: {}); the program {verb} under the kernel's default scheduler",
                    e.reason, e.message
                );
            }
            program.finish(model_updates > 0)?
        }
    };
    drop(reports);
    if let Some(p) = prober {
        // The probers notice the closed channel after their current step.
        let _ = p.join();
    }
    let summary = Summary {
        schema: "vsched.sched-summary/v2",
        seconds: started.elapsed().as_secs_f64(),
        tunables: tunables_json(&args, tunables),
        counters: ending.totals.to_json_map(),
        model_updates,
        model,
        probe_overhead: fed.probe_overhead,
        ejected: ending.ejected.clone(),
        restarts: ending.restarts,
        program_exit_code,
        program_started_before_model: program.started_before_model(),
    };
    report(&args, &summary, &ending)?;
    Ok(match (program_exit_code, &ending.ejected) {
        (Some(code), _) => code as u8,
        (None, Some(_)) => 1,
        (None, None) => 0,
    })
}

/// The probers need idle time between their light windows.
fn check_windows(args: &SchedArgs) -> Result<()> {
    if !args.no_probe && args.light_window >= args.probe_interval {
        anyhow::bail!(
            "--light-window ({}) must be shorter than --probe-interval ({}): \
             the probers would leave no idle time between windows",
            humantime::format_duration(args.light_window),
            humantime::format_duration(args.probe_interval)
        );
    }
    Ok(())
}

fn tunables_json(args: &SchedArgs, loaded: Tunables) -> TunablesJson {
    let probe_ns = |d: Duration| if args.no_probe { 0 } else { nanos(d) };
    TunablesJson {
        loaded,
        latency_sensitive: args.latency_sensitive.clone(),
        probe: !args.no_probe,
        probe_interval_ns: probe_ns(args.probe_interval),
        light_window_ns: probe_ns(args.light_window),
    }
}

/// The summary at exit: the table, `--stats-json`, and why the kernel
/// ejected the scheduler if it did.
fn report(args: &SchedArgs, summary: &Summary, ending: &vsched_sched::Ending) -> Result<()> {
    print_summary(summary, &ending.totals);
    if ending.counters_incomplete {
        eprintln!("vsched sched: warning: a load's counters could not be read at its unload; the totals miss them");
    }
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(summary)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(e) = &ending.ejected {
        eprintln!(
            "vsched sched: the kernel ejected the scheduler: {} ({}) {}",
            e.reason, e.kind, e.message
        );
        if let Some(dump) = e.dump_report() {
            eprintln!("vsched sched: {dump}");
        }
    }
    Ok(())
}

/// The line that tells a person the scheduler runs (programs read
/// `--ready-file` instead), and with -v what loading it cost.
fn announce(args: &SchedArgs, session: &Session, t: &Tunables) {
    eprintln!(
        "vsched sched: loaded on {} vCPUs (RWC {}, capacity {}, BVS {}, IVH {}, consolidation {}, \
         probers {})",
        session.nr_cpus(),
        on_off(t.rwc),
        on_off(t.capacity),
        on_off(t.bvs),
        on_off(t.ivh),
        on_off(t.consolidate),
        on_off(!args.no_probe)
    );
    match session.channel() {
        Ok(path) => eprintln!("vsched sched: the runtime's channel is at {path}"),
        Err(why) if t.channel => {
            eprintln!("vsched sched: warning: no channel for the runtime: {why}")
        }
        Err(_) => {}
    }
    if args.verbose {
        if let Some(insns) = session.verified_instructions() {
            eprintln!(
                "vsched sched: the kernel's verifier went through {insns} instructions; loading took {:.1} s",
                session.load_time().as_secs_f64()
            );
        }
    }
}

/// `--ready-file`: one JSON line once the scheduler runs with its first
/// model, written whole (a reader that sees the file sees all of it). The
/// file says vsched is in charge, so it exists only while that is true: a
/// file left by an earlier run is removed at the start, and this one on
/// every way out (Drop: errors and panics too).
struct ReadyFile {
    path: Option<PathBuf>,
    written: bool,
}

impl ReadyFile {
    fn new(path: Option<PathBuf>) -> ReadyFile {
        if let Some(p) = &path {
            let _ = std::fs::remove_file(p);
        }
        ReadyFile {
            path,
            written: false,
        }
    }

    fn write(&mut self, session: &Session) -> Result<()> {
        self.written = true;
        let Some(path) = &self.path else {
            return Ok(());
        };
        let line = serde_json::json!({
            "schema": "vsched.sched-ready/v1",
            "pid": std::process::id(),
            "nr_cpus": session.nr_cpus(),
            "model_updates": session.model_updates(),
        });
        let mut tmp = path.clone().into_os_string();
        tmp.push(format!(".tmp.{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let written =
            std::fs::write(&tmp, format!("{line}\n")).and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.with_context(|| format!("writing {} (--ready-file)", path.display()))
    }
}

impl Drop for ReadyFile {
    fn drop(&mut self) {
        if let (Some(path), true) = (&self.path, self.written) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What the feed loop learnt besides the session's own state.
struct Fed {
    program_exit_code: Option<i32>,
    probe_overhead: Option<vsched_model::report::Overhead>,
}

/// Feeds the probers' reports to the scheduler and prints its counters
/// until the program exits, vsched is asked to stop, or the kernel ejects
/// the scheduler for good (reloading it after hot-plug ejections); starts
/// the program when it is due.
fn feed_until_done(
    args: &SchedArgs,
    session: &mut Session,
    reports: &mpsc::Receiver<vsched_model::report::ProbeReport>,
    program: &mut Program,
    ready: &mut ReadyFile,
    interval_log: &mut Option<IntervalLog>,
    started: Instant,
) -> Result<Fed> {
    let mut fed = Fed {
        program_exit_code: None,
        probe_overhead: None,
    };
    let mut last_print = Instant::now();
    let mut printed = session.totals()?;
    loop {
        match session.check() {
            // Loaded as of now: ready once the first model came (the
            // drain below), or at once without probers.
            None if !ready.written && (args.no_probe || session.model_updates() > 0) => {
                ready.write(session)?
            }
            None => {}
            Some(Event::Reloaded { exit, restart }) => eprintln!(
                "vsched sched: the kernel unloaded the scheduler ({}); loaded it again (restart {restart})",
                exit.message
            ),
            // A reload that fails leaves the kernel's scheduler in charge,
            // as an ejection does: the program, if any, runs on.
            Some(Event::ReloadFailed { exit, error }) => {
                eprintln!(
                    "vsched sched: the kernel unloaded the scheduler ({}); loading it again failed: {error:#}",
                    exit.message
                );
                return Ok(fed);
            }
            Some(Event::Ejected(_)) => return Ok(fed),
        }
        while let Ok(report) = reports.try_recv() {
            fed.probe_overhead = report.overhead;
            if session.feed(&report)? || args.verbose {
                eprintln!(
                    "vsched sched: model {}: {}",
                    session.model_updates(),
                    describe(session.model())
                );
            }
        }

        program.start_if_due(ready.written)?;
        if let Some(code) = program.exited()? {
            fed.program_exit_code = Some(code);
            return Ok(fed);
        }
        if signals::stopped() {
            fed.program_exit_code = program.finish(ready.written)?;
            return Ok(fed);
        }
        if (!args.quiet || interval_log.is_some()) && last_print.elapsed() >= args.interval {
            let now = session.totals()?;
            let delta = now.since(&printed);
            if !args.quiet {
                print_line(&delta, started.elapsed(), session.model_updates());
            }
            if let Some(log) = interval_log {
                let written = log.write(
                    &delta,
                    started.elapsed(),
                    last_print.elapsed(),
                    session.model_updates(),
                );
                // A full disk must not end the scheduler (and whatever
                // program runs under it): the lines stop, with a word.
                if let Err(e) = written {
                    eprintln!("vsched sched: {e:#}; no more interval lines");
                    *interval_log = None;
                }
            }
            printed = now;
            last_print = Instant::now();
        }
        // Every wake-up of this loop is a task the scheduler must fit in
        // beside the user's: 10 per second is prompt enough for Ctrl-C,
        // a program's exit and new models.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the probers' thread (unless `--no-probe`), sending its reports
/// to `reports_tx`.
fn start_probers(
    args: &SchedArgs,
    tunables: Tunables,
    reports_tx: mpsc::Sender<vsched_model::report::ProbeReport>,
) -> Result<Option<std::thread::JoinHandle<()>>> {
    (!args.no_probe)
        .then(|| {
            let defaults = WatchConfig::new(args.probe_interval);
            let watch = WatchConfig {
                windows: Windows {
                    light: args.light_window,
                    ..defaults.windows
                },
                // RWC hides stacked vCPUs (only a topology check gives
                // one back) and IVH prefers targets on a free host CPU:
                // both read the stacking.
                recheck_stacked: tunables.rwc || tunables.ivh,
                ..defaults
            };
            std::thread::Builder::new()
                .name("vsched-probe".into())
                .spawn(move || vsched_probe::watch::feed_reports(watch, reports_tx))
        })
        .transpose()
        .context("starting the probers")
}

/// "vCPU 0 1024, vCPU 1 512 hidden (stacked)".
fn describe(models: &[vsched_sched::VcpuModel]) -> String {
    models
        .iter()
        .map(|m| {
            let cap = if m.capacity == 0 {
                "?".to_string()
            } else {
                m.capacity.to_string()
            };
            let why = match (m.visibility.straggler, m.visibility.stacked) {
                (true, _) => " hidden (straggler)",
                (_, true) => " hidden (stacked)",
                _ => "",
            };
            let avail = if m.available_permille == 0 {
                String::new()
            } else {
                format!(" ({:.0}% available)", m.available_permille as f64 / 10.0)
            };
            format!("vCPU {} {cap}{avail}{why}", m.cpu)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A command name as the kernel keeps it: 1-15 bytes, no '/'.
fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 15 || s.contains('/') {
        return Err(format!(
            "{s:?}: a command name is 1-15 bytes without '/' (the kernel's comm; see `ps -o comm`)"
        ));
    }
    Ok(s.to_string())
}

/// At least 10 ms: a shorter window holds less than one off period of a
/// vCPU capped on a 10 ms period or a few host scheduler slices, so it
/// cannot tell the vCPU's share.
fn parse_light_window(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("{s}: the light window must be at least 10ms"));
    }
    Ok(d)
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Waits for `child`, passing SIGTERM on once vsched is asked to stop (the
/// terminal's Ctrl-C reaches the program by itself; SIGTERM does not).
fn print_line(delta: &Stats, since_start: Duration, model_updates: u64) {
    let mut line = format!("{:>7.1}s", since_start.as_secs_f64());
    for (name, v) in &delta.values {
        line.push_str(&format!(" {name}={v}"));
    }
    line.push_str(&format!(" model_updates={model_updates}"));
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn print_summary(s: &Summary, totals: &Stats) {
    eprintln!("vsched sched: unloaded after {:.1} s", s.seconds);
    for def in vsched_sched::stats::STATS {
        eprintln!(
            "  {:>10}  {:<24} {}",
            totals.get(def.name),
            def.name,
            def.help
        );
    }
    eprintln!("  {:>10}  model updates", s.model_updates);
    if let Some(o) = &s.probe_overhead {
        eprintln!("  probers: {}", o.describe());
    }
    for m in &s.model {
        let why = match (m.visibility.straggler, m.visibility.stacked) {
            (true, _) => "hidden (straggler)",
            (_, true) => "hidden (stacked)",
            _ => "in use",
        };
        eprintln!(
            "  vCPU {:<3} capacity {:>4}  {why}",
            m.cpu,
            if m.capacity == 0 {
                "?".to_string()
            } else {
                m.capacity.to_string()
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_sensitive_names_are_checked_as_the_kernel_keeps_them() {
        assert_eq!(parse_comm("redis-server").unwrap(), "redis-server");
        for bad in ["", "sixteen-bytes-xx", "bin/sh"] {
            let e = parse_comm(bad).unwrap_err();
            assert!(e.contains("1-15 bytes"), "{bad}: {e}");
        }
    }

    /// The flags' defaults are written as text for `--help`; they must be
    /// the loader's, which the daemon's `--sched` uses.
    #[test]
    fn the_flags_default_to_the_loaders_tunables() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sched: SchedArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["vsched"]).unwrap();
        assert_eq!(tunables(&cli.sched), Tunables::default());
    }

    /// docs/sched.md's flag table has a row for every flag `vsched sched`
    /// shows in its help, and no row for a flag it does not take.
    #[test]
    fn the_docs_flag_table_lists_every_visible_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sched: SchedArgs,
        }
        let cmd = <Cli as clap::CommandFactory>::command();
        let visible: std::collections::BTreeSet<String> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sched.md");
        let doc = std::fs::read_to_string(path).expect("docs/sched.md");
        let table = doc
            .split("| flag | default | what |")
            .nth(1)
            .expect("docs/sched.md has the flag table")
            .split("\n\n")
            .next()
            .unwrap();
        // The first cell's flags: "| `--x NAME`" or "| `-v`, `--verbose`".
        let documented: std::collections::BTreeSet<String> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(" |").next())
            .flat_map(|cell| cell.split('`'))
            .filter_map(|w| w.strip_prefix("--"))
            .map(|w| format!("--{}", w.split_whitespace().next().unwrap_or("")))
            .collect();
        assert_eq!(
            documented, visible,
            "docs/sched.md's flag table against `vsched sched --help`"
        );
    }

    /// `vsched bench sched` names `vsched sched` flags as text: each must
    /// be one this command accepts, or a benchmark run fails in its guest
    /// (the soak's variants: bench_soak.rs).
    #[test]
    fn every_flag_the_benchmarks_pass_is_a_sched_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sched: SchedArgs,
        }
        let mut flag_sets: Vec<String> = Vec::new();
        for s in vsched_bench::sched::SCENARIOS {
            for (_, kind) in s.variants() {
                if let vsched_bench::sched::VariantKind::Vsched(extra) = kind {
                    flag_sets.push(format!("{} {extra}", s.vsched_flags));
                }
            }
        }
        assert!(flag_sets.len() > 10, "the benchmark's variants were found");
        for flags in &flag_sets {
            let argv = std::iter::once("vsched").chain(flags.split_whitespace());
            if let Err(e) = <Cli as clap::Parser>::try_parse_from(argv) {
                panic!("`vsched sched {flags}`: {e}");
            }
        }
    }
}
