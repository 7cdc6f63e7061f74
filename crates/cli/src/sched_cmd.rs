//! `vsched sched`: load vsched's sched_ext scheduler, keep the probers
//! feeding it the vCPU model, print its counters, and unload it on Ctrl-C,
//! SIGTERM or when the program it was started for exits.

use crate::probe_cmd::parse_duration;
use crate::signals;
use anyhow::{Context, Result};
use std::io::Write;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vsched_probe::plan::Windows;
use vsched_probe::watch::WatchConfig;
use vsched_sched::{model, preflight, Scheduler, Stats, Tunables};

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
    /// Keep using stragglers and stacked vCPUs for normal tasks (RWC off)
    #[arg(long)]
    no_rwc: bool,

    /// Ignore measured capacity when choosing among idle vCPUs
    #[arg(long)]
    no_capacity: bool,

    /// Do not place latency-sensitive tasks by vCPU latency and state (BVS off)
    #[arg(long)]
    no_bvs: bool,

    /// Do not move CPU-bound tasks off vCPUs about to be switched off (IVH off)
    #[arg(long)]
    no_ivh: bool,

    /// Do not run the probers: every vCPU counts as equal (the base policy alone)
    #[arg(long)]
    no_probe: bool,

    /// Treat tasks with this command name (as in `ps -o comm`, 15 characters
    /// at most) as latency-sensitive for BVS from their first wake-up;
    /// repeatable. Other tasks qualify by their own behaviour: most of
    /// their recent wake-ups ran 0.5 ms or less (once 8 were seen).
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    latency_sensitive: Vec<String>,

    /// Heartbeat period on busy vCPUs that the probe saw lose more than 5%
    /// of their time: two missed beats are an inactive episode (IVH's
    /// rhythm, BVS's state check). Shorter sees shorter episodes and costs
    /// more timer interrupts.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = parse_beat)]
    heartbeat: Duration,

    /// Ablation: BVS pre-empts SCHED_IDLE work on any low-latency vCPU,
    /// active or not (the paper's "no state check")
    #[arg(long, hide = true)]
    bvs_no_state_check: bool,

    /// Ablation: IVH moves a task at once, without pre-waking its target
    /// (the paper's activity-unaware migration)
    #[arg(long, hide = true)]
    ivh_unaware: bool,

    /// Ablation: IVH moves a task only when the heartbeat predicts its
    /// vCPU's switch-off, never at the tick to a rested idle vCPU (IVH as
    /// it was before the tick rule; docs/sched.md)
    #[arg(long, hide = true)]
    ivh_beats_only: bool,

    /// Tests: make the BPF side fail with a runtime error this long after
    /// loading (the kernel ejects it; shows that nothing is lost)
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_duration)]
    inject_error_after: Option<Duration>,

    /// Benchmark reference: a minimal FIFO sched_ext scheduler instead of vsched's policy
    #[arg(long, hide = true)]
    reference_fifo: bool,

    /// Time slice of a task while others wait (ended at the guest's next tick)
    #[arg(long, value_name = "DURATION", default_value = "3ms", value_parser = parse_duration)]
    slice: Duration,

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
}

#[derive(serde::Serialize)]
struct TunablesJson {
    slice_ns: u64,
    rwc: bool,
    capacity: bool,
    reference_fifo: bool,
    bvs: bool,
    bvs_state_check: bool,
    ivh: bool,
    ivh_activity_aware: bool,
    ivh_at_tick: bool,
    heartbeat_ns: u64,
    latency_sensitive: Vec<String>,
    probe: bool,
    /// The probers' rhythm and light window (0 with `--no-probe`).
    probe_interval_ns: u64,
    light_window_ns: u64,
}

/// The scheduler's tunables as the flags set them.
fn tunables(args: &SchedArgs) -> Tunables {
    Tunables {
        slice_ns: u64::try_from(args.slice.as_nanos()).unwrap_or(u64::MAX),
        rwc: !args.no_rwc,
        capacity: !args.no_capacity,
        reference_fifo: args.reference_fifo,
        bvs: !args.no_bvs,
        bvs_state_check: !args.bvs_no_state_check,
        ivh: !args.no_ivh,
        ivh_activity_aware: !args.ivh_unaware,
        // The activity-unaware ablation is the heartbeat's moves without
        // the pre-wake; the tick rule's rested check is activity-aware.
        ivh_at_tick: !args.ivh_beats_only && !args.ivh_unaware,
        beat_ns: u64::try_from(args.heartbeat.as_nanos()).unwrap_or(u64::MAX),
        inject_error_after_ns: args.inject_error_after.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        }),
    }
}

pub fn run(args: SchedArgs) -> Result<u8> {
    if !args.no_probe && args.light_window >= args.probe_interval {
        anyhow::bail!(
            "--light-window ({}) must be shorter than --probe-interval ({}): \
             the probers would leave no idle time between windows",
            humantime::format_duration(args.light_window),
            humantime::format_duration(args.probe_interval)
        );
    }
    preflight::check()?;
    let nr_cpus = possible_cpus();
    let tunables = tunables(&args);
    signals::catch();
    let started = Instant::now();
    let (reports_tx, reports) = mpsc::channel();
    // Moved into the probers' thread once the scheduler first loaded.
    let mut reports_tx = Some(reports_tx);
    let mut prober = None;
    let mut child = None;

    let mut model_updates = 0u64;
    let mut last_model = Vec::new();
    let mut probe_overhead = None;
    let mut program_exit_code = None;
    // Counters of the attachments before the current one (a restart
    // starts the BPF side's counters from zero).
    let mut earlier_totals: Option<Stats> = None;
    let mut restarts = 0u32;
    // Why the kernel last unloaded it, while a reload is under way.
    let mut reloading_after: Option<vsched_sched::ExitInfo> = None;
    let (ejected, totals) = loop {
        let mut object = MaybeUninit::uninit();
        let attach_started = Instant::now();
        let sched = match Scheduler::attach(&mut object, tunables, nr_cpus, &args.latency_sensitive)
        {
            Ok(s) => s,
            // A reload that fails leaves the kernel's scheduler in charge,
            // as an ejection does: the program, if any, runs on.
            Err(e) if restarts > 0 => {
                eprintln!("vsched sched: loading the scheduler again failed: {e:#}");
                break (
                    reloading_after.take(),
                    earlier_totals.take().unwrap_or_default(),
                );
            }
            Err(e) => return Err(e.into()),
        };
        if restarts == 0 {
            eprintln!(
                "vsched sched: loaded on {nr_cpus} vCPUs (RWC {}, capacity {}, BVS {}, IVH {}, probers {})",
                on_off(tunables.rwc),
                on_off(tunables.capacity),
                on_off(tunables.bvs),
                on_off(tunables.ivh),
                on_off(!args.no_probe)
            );
            if args.verbose {
                if let Some(insns) = sched.verified_instructions() {
                    eprintln!(
                        "vsched sched: the kernel's verifier went through {insns} instructions; loading took {:.1} s",
                        attach_started.elapsed().as_secs_f64()
                    );
                }
            }
            // The probers and the program start once the scheduler runs.
            let tx = reports_tx
                .take()
                .expect("the first attachment starts the probers");
            prober = start_probers(&args, tunables, tx)?;
            child = spawn_program(&args.program)?;
        } else if !last_model.is_empty() {
            // The model the probers gave last, at once: the next report
            // may be a second away.
            sched.update_model(&last_model)?;
        }
        let mut last_print = Instant::now();
        let mut printed = sched.stats()?;
        let ejected = loop {
            if let Some(info) = sched.exit_info() {
                break Some(info);
            }
            while let Ok(report) = reports.try_recv() {
                probe_overhead = report.overhead;
                let new_model = model::from_report(&report, tunables.rwc);
                sched.update_model(&new_model)?;
                model_updates += 1;
                // A line whenever what RWC hides changes (and for the first
                // model): the event a user, or a benchmark waiting for the
                // model, looks for.
                let hidden = |m: &[vsched_sched::VcpuModel]| {
                    m.iter().map(|v| v.visibility).collect::<Vec<_>>()
                };
                if args.verbose || model_updates == 1 || hidden(&new_model) != hidden(&last_model) {
                    eprintln!(
                        "vsched sched: model {model_updates}: {}",
                        describe(&new_model)
                    );
                }
                last_model = new_model;
            }
            if let Some(c) = child.as_mut() {
                if let Some(status) = c.try_wait().context("waiting for the program")? {
                    program_exit_code = Some(exit_code(status));
                    break None;
                }
            }
            if signals::stopped() {
                if let Some(c) = child.as_mut() {
                    program_exit_code = Some(exit_code(wait_forwarding_stop(c)?));
                }
                break None;
            }
            if !args.quiet && last_print.elapsed() >= args.interval {
                let now = sched.stats()?;
                print_line(&now.since(&printed), started.elapsed(), model_updates);
                printed = now;
                last_print = Instant::now();
            }
            // Every wake-up of this loop is a task the scheduler must fit in
            // beside the user's: 10 per second is prompt enough for Ctrl-C,
            // a program's exit and new models.
            std::thread::sleep(Duration::from_millis(100));
        };
        let these = sched.stats()?;
        let totals = earlier_totals
            .as_ref()
            .map_or(these.clone(), |e| e.plus(&these));
        let exit_after = sched.detach();
        let ejected = ejected.or(exit_after.filter(|e| e.is_error()));
        match &ejected {
            // A vCPU went offline or came online (a resize): the kernel
            // ejects a scheduler that does not handle hotplug and asks for
            // it again. Reloading is what keeps vsched on a resized VM; a
            // kernel that kept asking would be a loop, hence the bound.
            Some(e) if e.asks_restart() && restarts < vsched_sched::MAX_HOTPLUG_RELOADS => {
                restarts += 1;
                eprintln!(
                    "vsched sched: the kernel unloaded the scheduler ({}); loading it again (restart {restarts})",
                    e.message
                );
                earlier_totals = Some(totals);
                reloading_after = ejected;
            }
            _ => break (ejected, totals),
        }
    };
    if let (Some(e), Some(c)) = (&ejected, child.as_mut()) {
        if program_exit_code.is_none() {
            // The program goes on under the kernel's own scheduler; its
            // exit status is still what this command returns.
            eprintln!(
                "vsched sched: the kernel ejected the scheduler ({}: {}); the program goes on under the kernel's default scheduler",
                e.reason, e.message
            );
            program_exit_code = Some(exit_code(wait_forwarding_stop(c)?));
        }
    }
    drop(reports);
    if let Some(p) = prober {
        // The probers notice the closed channel after their current step.
        let _ = p.join();
    }
    let probe_ns = |d: Duration| {
        if args.no_probe {
            0
        } else {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
        }
    };
    let summary = Summary {
        schema: "vsched.sched-summary/v2",
        seconds: started.elapsed().as_secs_f64(),
        tunables: TunablesJson {
            slice_ns: tunables.slice_ns,
            rwc: tunables.rwc,
            capacity: tunables.capacity,
            reference_fifo: tunables.reference_fifo,
            bvs: tunables.bvs,
            bvs_state_check: tunables.bvs_state_check,
            ivh: tunables.ivh,
            ivh_activity_aware: tunables.ivh_activity_aware,
            ivh_at_tick: tunables.ivh_at_tick,
            heartbeat_ns: tunables.beat_ns,
            latency_sensitive: args.latency_sensitive.clone(),
            probe: !args.no_probe,
            probe_interval_ns: probe_ns(args.probe_interval),
            light_window_ns: probe_ns(args.light_window),
        },
        counters: totals.to_json_map(),
        model_updates,
        model: last_model,
        probe_overhead,
        ejected: ejected.clone(),
        restarts,
        program_exit_code,
    };
    print_summary(&summary, &totals);
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(e) = &ejected {
        eprintln!(
            "vsched sched: the kernel ejected the scheduler: {} ({}) {}",
            e.reason, e.kind, e.message
        );
    }
    Ok(match (program_exit_code, &ejected) {
        (Some(code), _) => code as u8,
        (None, Some(_)) => 1,
        (None, None) => 0,
    })
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

/// The heartbeat period: 100 µs (a timer interrupt costs a few µs, under
/// emulation tens) to 10 ms (beyond, only episodes longer than 20 ms show).
fn parse_beat(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_micros(100) || d > Duration::from_millis(10) {
        return Err(format!("{s}: the heartbeat must be between 100us and 10ms"));
    }
    Ok(d)
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

/// CPU ids the kernel may ever use (the BPF maps are indexed by them).
pub(crate) fn possible_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    n.max(1) as usize
}

/// Waits for `child`, passing SIGTERM on once vsched is asked to stop (the
/// terminal's Ctrl-C reaches the program by itself; SIGTERM does not).
fn wait_forwarding_stop(child: &mut Child) -> Result<std::process::ExitStatus> {
    let mut forwarded = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the program")? {
            return Ok(status);
        }
        if signals::stopped() && !forwarded {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spawn_program(program: &[String]) -> Result<Option<Child>> {
    let Some((name, args)) = program.split_first() else {
        return Ok(None);
    };
    Command::new(name)
        .args(args)
        .spawn()
        .map(Some)
        .with_context(|| format!("starting {name}"))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

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

    #[test]
    fn the_heartbeat_is_bounded() {
        assert_eq!(parse_beat("500us").unwrap(), Duration::from_micros(500));
        assert!(parse_beat("50us").is_err());
        assert!(parse_beat("20ms").is_err());
    }
}
