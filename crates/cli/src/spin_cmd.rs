//! `vsched spin-detect --pid PID` and `vsched run --spin-detect -- PROGRAM`:
//! find threads that busy-wait and deschedule them.

use crate::args::parse_duration;
use crate::signals;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use vsched_os::clock::{monotonic_ns, process_cpu_ns};
use vsched_spin::config::{self, ns, FlagDuration};
use vsched_spin::detector;
use vsched_spin::summary::{EndedBy, Summary};
use vsched_spin::watchdog::Watchdog;
use vsched_spin::{Action, AttachError, Config, DetectorParams, Engine};

const HOW_IT_WORKS: &str = "\
HOW IT WORKS
  Every thread of the program is sampled by a software cpu-clock perf event
  (no hardware counters needed): every --period of its CPU time the kernel
  records its instruction pointer and registers. A thread whose register
  state repeats (a loop that re-reads a flag changes nothing), or which sits on
  a PAUSE spin-wait hint, is spinning. Code that computes always moves some
  register and never executes PAUSE.
  While the machine is oversubscribed, a spinning thread's wait loop is
  replayed from its sample by a small x86 interpreter reading the program's
  memory. If the loop replays, the thread is stopped (ptrace) and resumed the
  moment the words it polls say its wait is over (checked every
  --watch-period). A hardware breakpoint then watches that loop's entry: the
  next time the thread comes back to wait there, a BPF program on the
  breakpoint stops it with SIGURG (never delivered) before it spins (root
  only; otherwise the breakpoint wakes the detector, which stops it).
  Otherwise it is demoted to SCHED_IDLE and restored as soon
  as a sample shows it out of its loop, or after --lease. A replay that shows
  a computing loop withdraws the detection.
  Nothing is left behind: the kernel restarts stopped threads if vsched dies,
  even by SIGKILL, and every demotion is journaled first to a watchdog process
  that restores the thread.
  Needs perf_event_open on the target (kernel.perf_event_paranoid <= 2 and the
  same user, or root/CAP_PERFMON); to stop threads, ptrace access (the
  program is vsched's child, or CAP_SYS_PTRACE); to demote, permission to
  change its threads' scheduling (same user; root to restore RT policies).
  Without ptrace access spinners are demoted instead.";

/// A duration flag's value. It prints as it parses ("500us"), so clap can
/// show the library's default (vsched_spin::config), which is the only place
/// defaults are stated.
fn duration_flag(s: &str) -> Result<FlagDuration, String> {
    parse_duration(s).map(FlagDuration)
}

/// Options shared by `spin-detect` and `run --spin-detect`.
#[derive(Args, Debug, Clone)]
pub struct DetectArgs {
    /// Only detect and count; never change any thread's scheduling
    #[arg(long)]
    observe: bool,

    /// Sampling period, in each thread's CPU time
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::PERIOD), value_parser = duration_flag, allow_hyphen_values = true)]
    period: FlagDuration,

    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::IDLE_PERIOD), value_parser = duration_flag, allow_hyphen_values = true, help = idle_period_help())]
    idle_period: FlagDuration,

    /// Samples in the detector's decision window
    #[arg(long, value_name = "N", default_value_t = detector::WINDOW)]
    window: usize,

    /// Samples of the window that must repeat an earlier register state
    #[arg(long, value_name = "N", default_value_t = detector::REPEATS)]
    repeats: usize,

    /// Samples of the window that must sit on a PAUSE instruction
    #[arg(long, value_name = "N", default_value_t = detector::PAUSES)]
    pauses: usize,

    /// Longest demotion without a new sample showing the thread still spins
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::LEASE), value_parser = duration_flag, allow_hyphen_values = true)]
    lease: FlagDuration,

    /// Sampling period of threads that spun recently (catches them again quickly)
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::SUSPECT_PERIOD), value_parser = duration_flag, allow_hyphen_values = true)]
    suspect_period: FlagDuration,

    /// Time slice asked for a demoted thread (honoured by Linux >= 6.12)
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::SLICE), value_parser = duration_flag, allow_hyphen_values = true)]
    slice: FlagDuration,

    /// Longest time between two reads of the samples (threads that spun
    /// recently wake the detector with every sample; leases when they end)
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::TICK), value_parser = duration_flag, allow_hyphen_values = true)]
    tick: FlagDuration,

    /// Do not force demoted threads that still spin off their vCPU
    #[arg(long)]
    no_kick: bool,

    /// Do not replay demoted threads' wait loops to restore them the moment
    /// their wait ends (rely on leases alone)
    #[arg(long)]
    no_replay: bool,

    /// Demote spinners to SCHED_IDLE even where their wait loop replays,
    /// instead of stopping them with ptrace
    #[arg(long)]
    no_stop: bool,

    /// Do not put a hardware breakpoint on the wait loop of a stopped thread
    /// (which stops it the moment it re-enters that loop, instead of after
    /// it spun until its next sample)
    #[arg(long)]
    no_entry_traps: bool,

    /// Let entry traps only wake the detector, instead of stopping their
    /// thread themselves (a BPF program on the breakpoint signals the thread,
    /// which then never spins while the detector reacts; needs root)
    #[arg(long)]
    no_trap_stops: bool,

    /// Do not hand spinners to vsched's scheduler while it runs (`vsched
    /// sched`): by default a spinner is marked in the scheduler's channel,
    /// which passes over it until another task of its vCPU ran (no ptrace
    /// stop, no change of its policy); without that scheduler, or with this
    /// flag, spinners are stopped or demoted here
    #[arg(long)]
    no_channel: bool,

    /// How often the words polled by stopped threads are checked
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::WATCH_PERIOD), value_parser = duration_flag, allow_hyphen_values = true)]
    watch_period: FlagDuration,

    /// Longest hold of a thread whose wait loop replays (a safety net: the
    /// replay resumes it when its wait ends)
    #[arg(long, value_name = "DURATION", default_value_t = FlagDuration(config::WATCHED_LEASE), value_parser = duration_flag, allow_hyphen_values = true)]
    watched_lease: FlagDuration,

    /// Print the summary as JSON
    #[arg(long)]
    json: bool,

    /// Also write the JSON summary to FILE
    #[arg(long, value_name = "FILE")]
    summary_out: Option<PathBuf>,

    /// Print live counts to stderr every DURATION (default: every 1s on a terminal)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    live: Option<Duration>,

    /// Write every sample (with PAUSE flags) to FILE as JSON, e.g. for test data
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

fn idle_period_help() -> String {
    format!(
        "Sampling period while the machine has not been oversubscribed for {} (nothing is \
         done about spinning then); equal to --period: off",
        FlagDuration(config::RELAX_AFTER)
    )
}

impl DetectArgs {
    /// The engine's configuration; the library checks it.
    fn config(&self) -> Result<Config> {
        let cfg = Config {
            period_ns: ns(self.period.0),
            idle_period_ns: ns(self.idle_period.0),
            suspect_period_ns: ns(self.suspect_period.0),
            params: DetectorParams {
                window: self.window,
                repeats: self.repeats,
                pauses: self.pauses,
                ..DetectorParams::default()
            },
            action: self.action(),
            slice_ns: ns(self.slice.0),
            max_demotion_ns: ns(self.lease.0),
            record_samples: self.record.is_some(),
            kick: !self.no_kick,
            replay: !self.no_replay,
            stop: !self.no_stop,
            watch_period_ns: ns(self.watch_period.0),
            watched_lease_ns: ns(self.watched_lease.0),
            entry_traps: !self.no_entry_traps,
            trap_stops: !self.no_trap_stops,
            channel: !self.no_channel,
            ..Config::default()
        };
        cfg.validate().context("invalid detector settings")?;
        Ok(cfg)
    }

    fn action(&self) -> Action {
        if self.observe {
            Action::Observe
        } else {
            Action::Deschedule
        }
    }

    fn live_every(&self) -> Option<Duration> {
        self.live.or_else(|| {
            std::io::stderr()
                .is_terminal()
                .then_some(Duration::from_secs(1))
        })
    }
}

#[derive(Args, Debug)]
#[command(after_long_help = SPIN_DETECT_HELP)]
pub struct SpinDetectArgs {
    /// Process to watch: all its threads, including ones it creates later
    #[arg(long, value_name = "PID")]
    pid: i32,

    /// Stop after DURATION (default: until the process ends or Ctrl-C)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Option<Duration>,

    #[command(flatten)]
    detect: DetectArgs,
}

const SPIN_DETECT_HELP: &str = "\
HOW IT WORKS
  See `vsched run --help`; spin-detect does the same to a running process.

EXAMPLES
  vsched spin-detect --pid 1234               deschedule spinners until 1234 exits
  vsched spin-detect --pid 1234 --observe --duration 10s --json
                                              count spinning only, then JSON
  sudo vsched spin-detect --pid $(pidof memcached) --live 2s

Ctrl-C or SIGTERM stop detection and restore every demoted thread; after a
SIGKILL the watchdog process restores them. See docs/spin.md.";

#[derive(Args, Debug)]
#[command(after_long_help = format!("{HOW_IT_WORKS}\n\nEXAMPLES\n  \
vsched run --spin-detect -- ./my-program --threads 64\n  \
vsched run --spin-detect --observe --json -- ./my-program   count only\n  \
vsched run --spin-detect -- vsched exec -- ./my-program      with the sync runtime\n\n\
The program's exit status becomes vsched's. The summary goes to stderr (the\n\
program owns stdout). See docs/spin.md."))]
pub struct RunArgs {
    /// Detect busy-waiting in the program and deschedule spinning threads
    #[arg(long)]
    spin_detect: bool,

    /// Run the program's threads on as few of vsched's vCPUs as their work
    /// needs (Gleaner's consolidation, by CPU affinity: for kernels without
    /// sched_ext; `vsched sched --consolidate` is the scheduler's form).
    /// The vCPUs the kernel prefers (/sys/devices/system/cpu/preferred,
    /// where it folds CPUs by steal time) are used first. Threads the
    /// program places itself are left alone; every thread gets its CPUs
    /// back on exit, Ctrl-C, and from a watchdog after SIGKILL
    #[arg(long)]
    consolidate: bool,

    /// With --consolidate: write its report (schema vsched.consolidate/v1:
    /// counts, the active set over time) to this file
    #[arg(long, value_name = "FILE", requires = "consolidate")]
    consolidate_json: Option<PathBuf>,

    #[command(flatten)]
    detect: DetectArgs,

    /// The program and its arguments (after --)
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

pub fn spin_detect(args: SpinDetectArgs) -> Result<bool> {
    if args.pid <= 0 {
        bail!("--pid must be a positive process id, got {}", args.pid);
    }
    let cfg = args.detect.config()?;
    signals::catch();
    let pid = args.pid;
    let engine = match attach(pid, cfg) {
        Ok(engine) => engine,
        Err(e) if gone(&e) => bail!("no process with pid {pid} (it may have exited)"),
        Err(e) => return Err(e.context(format!("cannot watch pid {pid}"))),
    };
    let deadline = args.duration.map(|d| Instant::now() + d);
    let (engine, ended_by, elapsed) = detect_loop(engine, &args.detect, || {
        if !vsched_spin::threads::alive(pid) {
            Some(EndedBy::Exited)
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            Some(EndedBy::Duration)
        } else {
            None
        }
    });
    finish(engine, &args.detect, ended_by, elapsed, false)?;
    Ok(true)
}

/// Runs the program (with detection if asked); returns its exit status.
pub fn run(args: RunArgs) -> Result<u8> {
    let cfg = args.detect.config()?;
    signals::catch();
    let mut child = Command::new(&args.program[0])
        .args(&args.program[1..])
        .spawn()
        .with_context(|| format!("cannot run {:?}", args.program[0]))?;
    // spawn() returns once the exec succeeded: the code we read is the program's.
    let pid = child.id() as i32;
    let consolidation = if args.consolidate {
        match crate::consolidate_run::start(pid) {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context("cannot consolidate the program"));
            }
        }
    } else {
        None
    };
    let mut status = None;
    // SIGTERM to vsched goes to the program once, whichever loop sees it.
    let mut forwarded = false;
    if args.spin_detect {
        let engine = match attach(pid, cfg) {
            Ok(e) => Some(e),
            // Finished before detection could start: nothing to detect.
            Err(e) if gone(&e) => None,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context("cannot watch the program"));
            }
        };
        if let Some(engine) = engine {
            let (engine, ended_by, elapsed) = detect_loop(engine, &args.detect, || {
                forward_sigterm(pid, &mut forwarded);
                // Peek without reaping: while threads are traced, a plain
                // wait would also return (and consume) their ptrace stops.
                if has_exited(pid) {
                    status = child.wait().ok();
                    Some(EndedBy::Exited)
                } else {
                    None
                }
            });
            finish(engine, &args.detect, ended_by, elapsed, true)?;
        }
    }
    let status = match status {
        Some(s) => s,
        None => {
            // Without detection (or after Ctrl-C stopped it) just wait; the
            // program got the terminal's SIGINT itself, SIGTERM is forwarded.
            // (A thread may still be traced for a moment: peek, as above.)
            let watch = vsched_os::child::ExitWatch::new(pid);
            loop {
                if has_exited(pid) {
                    break child.wait()?;
                }
                forward_sigterm(pid, &mut forwarded);
                // A signal handled on this thread ends the wait at once;
                // one handled on another thread is seen within this.
                watch.wait(Duration::from_millis(100));
            }
        }
    };
    if let Some(c) = consolidation {
        c.finish(args.consolidate_json.as_deref())?;
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128 + sig as u8,
        _ => 1,
    })
}

/// Whether our child `pid` has exited (its status is left to be reaped).
fn has_exited(pid: i32) -> bool {
    // SAFETY: siginfo_t is plain data, valid when zeroed.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only `info`, a valid siginfo_t; WNOWAIT leaves
    // the child's status to be reaped by Child::wait.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed, pid 0),
    // for which si_pid is the valid member.
    rc == 0
        && unsafe { info.si_pid() } == pid
        && matches!(
            info.si_code,
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
        )
}

fn forward_sigterm(pid: i32, forwarded: &mut bool) {
    if !*forwarded && signals::last() == libc::SIGTERM {
        // SAFETY: kill has no memory-safety preconditions; `pid` is our own
        // child, not yet reaped, so the id cannot name another process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        *forwarded = true;
    }
}

/// Starts detection on `pid`, with a watchdog when it deschedules.
fn attach(pid: i32, cfg: Config) -> Result<Engine> {
    let watchdog = match cfg.action {
        Action::Deschedule => Some(spawn_watchdog()?),
        Action::Observe => None,
    };
    Ok(Engine::attach(pid, cfg, watchdog)?)
}

/// Whether `attach` failed because the process is gone.
fn gone(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<AttachError>(), Some(AttachError::Gone))
}

/// The watchdog that restores demoted threads if vsched dies: this same
/// executable, `vsched spin-watchdog`.
fn spawn_watchdog() -> Result<Watchdog> {
    let exe =
        std::env::current_exe().context("cannot find vsched's executable for the watchdog")?;
    let mut cmd = Command::new(exe);
    cmd.arg("spin-watchdog");
    Watchdog::spawn(cmd).context("cannot start the watchdog (vsched spin-watchdog)")
}

/// Polls the engine until `done` names a reason or a signal arrives.
fn detect_loop(
    mut engine: Engine,
    args: &DetectArgs,
    mut done: impl FnMut() -> Option<EndedBy>,
) -> (Engine, EndedBy, f64) {
    // The detector must run the moment it wakes, even on vCPUs full of
    // spinners (set after the program and watchdog started: they must not inherit it).
    vsched_probe::sys::apply_policy(vsched_probe::sys::Policy::High);
    let start = Instant::now();
    let live = args.live_every();
    let mut next_live = live.map(|d| start + d);
    let mut warned = false;
    let ended_by = loop {
        if signals::stopped() {
            break EndedBy::Signal;
        }
        if let Some(reason) = done() {
            break reason;
        }
        if let Err(e) = engine.step(ns(args.tick.0)) {
            if !warned {
                eprintln!("vsched: warning: a new thread cannot be sampled: {e}");
                warned = true;
            }
        }
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_live, live) {
            if now >= at {
                live_line(&engine, now - start);
                next_live = Some(now + every);
            }
        }
    };
    // Samples taken since the last tick still count.
    engine.poll(monotonic_ns());
    (engine, ended_by, start.elapsed().as_secs_f64())
}

fn live_line(engine: &Engine, elapsed: Duration) {
    let s = engine.stats();
    eprintln!(
        "spin-detect {:>6.1}s  threads {:>4}  spinning episodes {:>7}  demoted now {:>3}  demotions {:>7}  false-positive bound {:>4}  samples {}",
        elapsed.as_secs_f64(),
        engine.threads(),
        s.spin_episodes,
        engine.demoted_now(),
        s.demotions,
        s.false_positive_bound,
        s.samples
    );
}

fn finish(
    engine: Engine,
    args: &DetectArgs,
    ended_by: EndedBy,
    elapsed_s: f64,
    to_stderr: bool,
) -> Result<()> {
    let pid = engine.pid();
    let report = engine.finish();
    if let Some(path) = &args.record {
        let text = serde_json::to_string(&report.samples)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let detector_cpu_s = process_cpu_ns() as f64 / 1e9;
    let summary = Summary::new(
        pid,
        args.action(),
        elapsed_s,
        ended_by,
        detector_cpu_s,
        report.stats,
    );
    let json = serde_json::to_string(&summary)?;
    if let Some(path) = &args.summary_out {
        std::fs::write(path, &json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let text = if args.json {
        json
    } else {
        summary_text(&summary)
    };
    if to_stderr {
        let _ = writeln!(std::io::stderr(), "{text}");
    } else {
        println!("{text}");
    }
    Ok(())
}

fn summary_text(s: &Summary) -> String {
    let st = &s.stats;
    let mut out = format!(
        "vsched spin-detect: pid {} watched {:.1}s ({}), {} threads, {} samples ({} lost), detector CPU {:.2}s\n",
        s.pid, s.elapsed_s, s.ended_by, st.threads_seen, st.samples, st.lost_samples, s.detector_cpu_s
    );
    out += &format!(
        "  spinning: {} episodes, {:.1}% of sampled CPU time\n",
        st.spin_episodes,
        st.spin_pct()
    );
    match s.action {
        Action::Deschedule => {
            out += &format!(
                "  held: {} ({} stopped, resumed {} when their wait ended; {} demoted); restored {} on progress, {} at lease end; {} refused by the kernel\n",
                st.demotions,
                st.stops,
                st.restored_on_release,
                st.demoted(),
                st.restored_on_progress,
                st.restored_on_lease,
                st.sched_failures
            );
            out += &format!(
                "  replay: {} detections refuted, {} waits found on moving counters, {} already over when read, {} stopped threads had moved on\n",
                st.refuted_by_replay, st.replay_detections, st.released_before_demotion, st.resumed_off_path
            );
            out += &format!(
                "  entry traps: {} set ({} refused, {} moved, {} removed); {} threads stopped on re-entering their loop ({} for under 100 us), {} passed through\n",
                st.entry_traps,
                st.entry_trap_failures,
                st.entry_traps_moved,
                st.entry_traps_removed,
                st.entry_stops,
                st.entry_stops_short,
                st.entry_passes
            );
            if st.channel_marks + st.channel_marks_pending + st.channel_slot_taken > 0 {
                out += &format!(
                    "  scheduler: {} spinners handed to vsched's scheduler ({} vCPUs nudged), {} spinning samples while still marked, {} held here instead (slot taken)\n",
                    st.channel_marks, st.nudges, st.channel_marks_pending, st.channel_slot_taken
                );
            }
            if st.stop_refused {
                out += "  note: ptrace was refused (permissions, or already traced): spinners were demoted instead of stopped\n";
            }
        }
        Action::Observe => out += "  observe only: no thread was demoted\n",
    }
    out += &format!(
        "  false-positive bound: {} episodes ended at the next sample{}",
        st.false_positive_bound,
        if st.code_readable {
            ""
        } else {
            "\n  note: the program's code was unreadable; PAUSE-based detection was off"
        }
    );
    out
}

/// The hidden `spin-watchdog` subcommand.
pub fn watchdog() -> Result<bool> {
    let n = vsched_spin::watchdog::serve(std::io::stdin().lock());
    if n > 0 {
        eprintln!(
            "vsched spin-watchdog: vsched ended without restoring {n} thread(s); restored them"
        );
    }
    Ok(true)
}
