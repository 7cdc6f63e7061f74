//! `vsched daemon`: the probers run continuously and the vCPU model is
//! served as Prometheus metrics on loopback, until Ctrl-C or SIGTERM;
//! with `--rwc-cgroup`, user-space RWC keeps those cgroups off hidden
//! vCPUs. What it keeps, serves and changes is vsched-daemon's
//! (crates/daemon); this module wires it to the probers, the signals and
//! the restore watchdog.

use crate::args::parse_duration;
use crate::signals;
use anyhow::{Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use vsched_daemon::consolidate::{Consolidations, SharedRwc};
use vsched_daemon::history::History;
use vsched_daemon::rwc::{self, CpusetRwc, DEFAULT_STATE_FILE};
use vsched_daemon::state::{self, DaemonStatus, Latest, Running, RwcStatus};
use vsched_daemon::status::{StatusSocket, DEFAULT_SOCKET};
use vsched_daemon::watchdog::{self, Watchdog};
use vsched_daemon::Metrics;
use vsched_model::report::ProbeReport;
use vsched_probe::watch::WatchConfig;
use vsched_sched::{preflight, Event, Session, Tunables};

/// The port: unassigned by IANA and not in Prometheus' exporter list's
/// common range of 9100-9400, so it does not collide with node_exporter
/// (9100) or the usual exporters.
const DEFAULT_LISTEN: &str = "127.0.0.1:9488";

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
WHAT IT DOES
  Runs the probers without end (as `vsched probe --watch` does: light
  windows every interval, a heavy window every 5 s, topology every 10 s)
  and serves the model at http://LISTEN/metrics in the OpenMetrics text
  format, for Prometheus to scrape. It changes nothing on the system: the
  probers pin and prioritise only their own threads, so there is nothing
  to restore when it stops.

  `vsched status` reads the current model from the daemon's root-only
  socket (--socket). One daemon per socket: a second is refused; a socket
  left by a killed daemon is replaced.

USER-SPACE RWC (--rwc-cgroup, for kernels without sched_ext)
  vSched's RWC keeps work off stragglers (vCPUs far weaker than the
  others) and off all but one vCPU of each stacked group (vCPUs sharing a
  physical CPU). With --rwc-cgroup the daemon does it for the named
  cgroups by writing their cpuset.cpus (cgroup v2, enabling the cpuset
  controller in the ancestors where needed, or a v1 cpuset hierarchy;
  never a cgroup that holds the daemon, whose probers must reach every
  vCPU: the systemd drop-in runs it in vsched.slice):
  a change is made once two probe reports in a row ask for it, and a
  cgroup always keeps a CPU. Everything it changes is saved first (the
  --rwc-state file) and put back on exit, Ctrl-C and SIGTERM; after a
  SIGKILL its watchdog process puts it back, and so do the next start and
  `vsched daemon --restore` (the systemd unit's ExecStopPost). With
  --dry-run it only prints what it would write.

  With --consolidate-cgroups the daemon also narrows each of those
  cgroups to the fewest of the vCPUs RWC leaves it that carry its threads'
  work (Gleaner's consolidation, as `vsched run --consolidate` does for a
  program): every 100 ms it compares the threads' progress before and
  after a trial move, and widens the cpuset at once when threads that run
  long must wait. vCPUs join in the kernel's preferred order where it has
  one, then lowest-numbered first. It helps programs whose threads block
  and wake often (pipelines, barriers) on VMs where waking an idle vCPU is
  dear; CPU-bound work keeps every vCPU. The cpusets are saved and put back
  as RWC's are. vCPUs no managed cgroup's active set includes show as parked in
  `vsched status`, its plot and vsched_vcpu_parked.

THE SCHEDULER (--sched, for kernels with sched_ext)
  With --sched the daemon loads vsched's sched_ext scheduler (what `vsched
  sched` loads, with the same flags: --consolidate, --no-ivh, ...) and
  hands it every model update; RWC, capacity placement, BVS and IVH then
  happen in the kernel, for every task; with --consolidate the vCPUs it
  parks are in `vsched status`, its plot and vsched_vcpu_parked. The kernel falls back to its own scheduler when the daemon stops,
  however it stops. If the kernel ejects the scheduler (its reason is
  printed), the daemon goes on serving metrics without it. Not together
  with --rwc-cgroup (the scheduler does RWC for every task already).
  Opt-in: it replaces the scheduler of the whole VM.

METRICS (per vCPU, label vcpu=\"N\")
  vsched_vcpu_capacity                      1024 = the strongest vCPU
  vsched_vcpu_available_ratio               share of time it can run, 0-1
  vsched_vcpu_steal_ratio                   steal the hypervisor reported
  vsched_vcpu_hidden_steal_ratio            time lost but not reported
  vsched_vcpu_inactive_episode_mean_seconds, ..._p95_seconds
  vsched_vcpu_stacked, vsched_vcpu_straggler  0 or 1
  vsched_vcpu_parked                        0 or 1 (--sched --consolidate, --consolidate-cgroups)
  vsched_vcpu_pair_latency_seconds{vcpu_a,vcpu_b,relation}  per vCPU pair
  and vsched_model_updates_total, vsched_probe_cpu_ratio (what the
  probers take from programs, share of one vCPU), vsched_probe_idle_cpu_ratio
  (light-phase spinning on idle cycles), vsched_model_update_timestamp_seconds.

EXAMPLES
  sudo vsched daemon
  sudo vsched daemon --listen 127.0.0.1:9500 --interval 2s
  curl -s http://127.0.0.1:9488/metrics")]
pub struct DaemonArgs {
    /// Address to serve metrics on (keep it on loopback: the metrics are not authenticated)
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "ADDR:PORT")]
    listen: SocketAddr,

    /// Time between model updates
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,

    /// How much of the recent past `vsched status --plot` can draw (kept in memory: about 30 bytes per vCPU and report)
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    history: Duration,

    /// The status socket `vsched status` reads (root only; one daemon per socket)
    #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
    socket: PathBuf,

    /// Keep this cgroup's tasks off the vCPUs RWC hides, by its cpuset (repeatable; a path relative to /sys/fs/cgroup, or absolute)
    #[arg(long = "rwc-cgroup", value_name = "CGROUP")]
    rwc_cgroups: Vec<PathBuf>,

    /// Where RWC saves what it changed, for putting it back (after a crash too)
    #[arg(long, default_value = DEFAULT_STATE_FILE, value_name = "FILE")]
    rwc_state: PathBuf,

    /// Print the cpuset changes RWC would make instead of making them
    #[arg(long, requires = "rwc_cgroups")]
    dry_run: bool,

    /// Also narrow each --rwc-cgroup to the fewest vCPUs its threads (and its child cgroups') need (Gleaner's consolidation by cpuset, for kernels without sched_ext)
    #[arg(long, requires = "rwc_cgroups")]
    consolidate_cgroups: bool,

    /// Put back the cpusets a daemon that was killed left changed (from --rwc-state), and exit
    #[arg(long, conflicts_with_all = ["rwc_cgroups", "dry_run"])]
    restore: bool,

    /// Also load vsched's sched_ext scheduler and feed it the model (RWC, capacity, BVS, IVH as `vsched sched` does; Linux 6.12+ with sched_ext)
    #[arg(long, conflicts_with_all = ["rwc_cgroups", "restore"])]
    sched: bool,

    /// The scheduler's own flags, as `vsched sched` takes them (only with --sched)
    #[command(flatten, next_help_heading = "The scheduler (with --sched)")]
    sched_tunables: Tunables,

    /// (watchdog) With --restore: wait until standard input closes first
    #[arg(long, requires = "restore", hide = true)]
    after_stdin_closes: bool,
}

/// Where a relative --rwc-cgroup is looked for.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

pub fn run(args: DaemonArgs) -> Result<bool> {
    if args.restore {
        return restore(&args.rwc_state, args.after_stdin_closes);
    }
    if !args.sched && args.sched_tunables != Tunables::default() {
        let hint = if args.sched_tunables.consolidate && !args.rwc_cgroups.is_empty() {
            " (to consolidate the --rwc-cgroup cgroups without the scheduler: --consolidate-cgroups)"
        } else {
            ""
        };
        anyhow::bail!(
            "the scheduler's flags (--no-rwc, --consolidate, --slice, ...) take effect only with --sched{hint}"
        );
    }
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "vsched daemon: warning: serving metrics on {}, beyond this machine; they are not authenticated",
            args.listen
        );
    }
    let status_socket = Arc::new(
        StatusSocket::bind(&args.socket).context("setting up the status socket (see --socket)")?,
    );
    let listener = bind_metrics(args.listen)?;
    let bound = listener.local_addr().context("reading the bound address")?;
    let groups: Vec<PathBuf> = args
        .rwc_cgroups
        .iter()
        .map(|p| std::path::Path::new(CGROUP_ROOT).join(p))
        .collect();
    // Declared before the RWC state (inside `daemon`) so that it is dropped
    // after it: the watchdog must not wake while this daemon's own restore
    // may still be due.
    let mut _watchdog = None;
    let rwc: Option<SharedRwc> = start_rwc(&groups, &args)?.map(|r| Arc::new(Mutex::new(r)));
    if rwc.is_some() && !args.dry_run {
        // Holds the watchdog's standard input open while this process lives.
        _watchdog = Some(spawn_watchdog(&args.rwc_state)?);
    }
    signals::catch();
    let metrics = serve_metrics(listener)?;
    let rwc_status = rwc.as_ref().map(|_| RwcStatus {
        cgroups: groups.clone(),
        dry_run: args.dry_run,
        ..RwcStatus::default()
    });
    let latest = Arc::new(Mutex::new(Latest {
        status: DaemonStatus::initial(format!("http://{bound}/metrics"), rwc_status),
        history: History::new(u64::try_from(args.history.as_millis()).unwrap_or(u64::MAX)),
    }));
    state::serve_status(status_socket, Arc::clone(&latest))
        .context("starting the status socket")?;
    let sched = start_sched(&args)?;
    let consolidations = match rwc.as_ref().filter(|_| args.consolidate_cgroups) {
        Some(rwc) => Some(
            Consolidations::start(rwc, Some(vsched_consolidate::preferred::KERNEL_FILE.into()))
                .context("starting the cgroups' consolidation")?,
        ),
        None => None,
    };
    let mut daemon = Running::new(metrics, latest, rwc, consolidations, sched);
    let reports = start_probers(&args)?;
    eprintln!("vsched daemon: metrics at http://{bound}/metrics (Ctrl-C or SIGTERM to stop)");
    serve_until_stopped(&mut daemon, &reports)?;
    // The socket file goes with the last reference (the status thread's
    // stays blocked in accept until the process exits): remove it now.
    let _ = std::fs::remove_file(&args.socket);
    let stopped = daemon.stop();
    // After an ejection the kernel's own was back long ago (said then).
    if stopped.sched.as_ref().is_some_and(|e| e.ejected.is_none()) {
        eprintln!("vsched daemon: scheduler unloaded (the kernel's own is back)");
    }
    for (group, report) in groups.iter().zip(&stopped.consolidations) {
        match report {
            Some(r) => eprintln!("{}", consolidation_summary(group, r)),
            None => eprintln!(
                "vsched daemon: consolidation of {}: its thread failed",
                group.display()
            ),
        }
    }
    let clean = stopped.rwc.as_ref().is_none_or(report_outcome);
    eprintln!("vsched daemon: stopped");
    Ok(clean)
}

/// `--sched`: vsched's scheduler, loaded with the scheduler's flags.
fn start_sched(args: &DaemonArgs) -> Result<Option<Session>> {
    if !args.sched {
        return Ok(None);
    }
    preflight::check()?;
    let s = Session::start(args.sched_tunables.resolved(), &[])?;
    eprintln!(
        "vsched daemon: vsched's sched_ext scheduler loaded{}",
        if args.sched_tunables.consolidate {
            " (consolidation on)"
        } else {
            ""
        }
    );
    Ok(Some(s))
}

/// The probers, on a thread of their own, sending each report.
fn start_probers(args: &DaemonArgs) -> Result<mpsc::Receiver<ProbeReport>> {
    let (reports_tx, reports) = mpsc::channel();
    let watch = WatchConfig {
        // The topology checks that give a stacked vCPU back serve RWC:
        // user-space RWC, or the scheduler's (on in the daemon's).
        recheck_stacked: !args.rwc_cgroups.is_empty() || args.sched,
        ..WatchConfig::new(args.interval)
    };
    std::thread::Builder::new()
        .name("probers".into())
        .spawn(move || vsched_probe::watch::feed_reports(watch, reports_tx))
        .context("starting the probers")?;
    Ok(reports)
}

/// Hands every report to the daemon and watches its scheduler until
/// Ctrl-C or SIGTERM.
fn serve_until_stopped(daemon: &mut Running, reports: &mpsc::Receiver<ProbeReport>) -> Result<()> {
    let mut stacking = StackingLog::default();
    while !signals::stopped() {
        if let Some(event) = daemon.check_scheduler() {
            print_sched_event(&event);
        }
        match reports.recv_timeout(Duration::from_millis(100)) {
            Ok(report) => {
                stacking.note(&report);
                if let Some(c) = daemon.take(report)? {
                    print_change(&c);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("the probers stopped")
            }
        }
    }
    Ok(())
}

/// Says when the stacked groups the topology checks find change (the
/// first check included): RWC's hiding follows them two reports later,
/// and a log that shows both tells a slow check from a slow reaction.
#[derive(Default)]
struct StackingLog {
    last: Option<Vec<Vec<u32>>>,
}

impl StackingLog {
    fn note(&mut self, report: &ProbeReport) {
        let Some(topology) = &report.topology else {
            return;
        };
        let groups = report.stacked_groups();
        if self.last.as_ref() == Some(&groups) {
            return;
        }
        let found = if groups.is_empty() {
            "no vCPUs stacked".to_string()
        } else {
            let lists: Vec<String> = groups
                .iter()
                .map(|g| vsched_model::cpulist::format_cpu_list(g))
                .collect();
            format!("stacked vCPUs {}", lists.join(" "))
        };
        eprintln!(
            "vsched daemon: topology: {found} (report {}, {} check in {:.0} ms)",
            report.sequence, topology.mode, report.timing.topology_ms
        );
        self.last = Some(groups);
    }
}

/// What the kernel did to the daemon's scheduler.
fn print_sched_event(event: &Event) {
    match event {
        Event::Reloaded { exit, restart } => eprintln!(
            "vsched daemon: the kernel unloaded the scheduler ({}); loaded it again (restart {restart})",
            exit.message
        ),
        Event::ReloadFailed { exit, error } => eprintln!(
            "vsched daemon: the kernel unloaded the scheduler ({}); loading it again failed: {error:#}; going on without it",
            exit.message
        ),
        Event::Ejected(exit) => {
            eprintln!(
                "vsched daemon: the kernel ejected the scheduler: {} ({}) {}; going on without it",
                exit.reason, exit.kind, exit.message
            );
            if let Some(dump) = exit.dump_report() {
                eprintln!("vsched daemon: {dump}");
            }
        }
    }
}

/// The metrics' listening socket, with a hint when the address is taken.
fn bind_metrics(listen: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(listen).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (is another vsched daemon running? choose another address with --listen)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot listen on {listen}: {e}{hint}")
    })
}

/// Serves `GET /metrics` on its own thread from the metrics returned.
fn serve_metrics(listener: TcpListener) -> Result<Arc<Metrics>> {
    let metrics = Arc::new(Metrics::new());
    let served = Arc::clone(&metrics);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || vsched_daemon::serve(&listener, &|| served.render()))
        .context("starting the metrics server")?;
    Ok(metrics)
}

/// User-space RWC for `--rwc-cgroup` (None without it), after putting back
/// what a daemon that died left changed.
fn start_rwc(groups: &[PathBuf], args: &DaemonArgs) -> Result<Option<CpusetRwc>> {
    if groups.is_empty() {
        return Ok(None);
    }
    let (rwc, recovered) = CpusetRwc::start(groups, &args.rwc_state, args.dry_run)
        .context("setting up user-space RWC (see --rwc-cgroup, --rwc-state)")?;
    if let Some(r) = recovered {
        report_recovered(&r);
    }
    Ok(Some(rwc))
}

/// One line per consolidated cgroup, at the end.
fn consolidation_summary(group: &std::path::Path, r: &vsched_consolidate::Report) -> String {
    format!(
        "vsched daemon: consolidation of {}: {}; {} write(s) failed; own CPU {:.3} s",
        group.display(),
        r.trials_summary(),
        r.placement.failures,
        r.own_cpu_s
    )
}

fn print_change(c: &rwc::Change) {
    let verb = if c.dry_run { "would write" } else { "wrote" };
    eprintln!(
        "vsched daemon: RWC hides vCPUs [{}]",
        vsched_model::cpulist::format_cpu_list(&c.hidden)
    );
    for g in &c.groups {
        eprintln!(
            "vsched daemon:   {verb} {}/cpuset.cpus: {:?} -> {:?}",
            g.path.display(),
            g.from,
            g.to
        );
    }
    for f in &c.failures {
        eprintln!("vsched daemon:   could not write: {f}");
    }
}

fn report_recovered(r: &rwc::Recovered) {
    eprintln!(
        "vsched daemon: put back the cpusets of {} cgroup(s) that daemon {} left changed",
        r.groups, r.pid
    );
    report_outcome(&r.outcome);
}

/// Prints what could not be put back and what is back but reads
/// differently; true when nothing failed.
fn report_outcome(o: &rwc::Outcome) -> bool {
    for e in &o.failures {
        eprintln!(
            "vsched daemon: could not restore: {}",
            vsched_daemon::error_chain(e)
        );
    }
    for n in &o.notes {
        eprintln!("vsched daemon: note: {n}");
    }
    o.failures.is_empty()
}

/// `--restore`: put back what the state file records (nothing to do
/// without one); the watchdog first waits for its daemon to end.
fn restore(state_file: &std::path::Path, after_stdin_closes: bool) -> Result<bool> {
    if after_stdin_closes {
        watchdog::wait_for_daemon();
    }
    match rwc::restore_file(state_file)
        .with_context(|| format!("restoring the cpusets recorded in {}", state_file.display()))?
    {
        Some(r) => {
            report_recovered(&r);
            Ok(r.outcome.failures.is_empty())
        }
        None => {
            if !after_stdin_closes {
                eprintln!(
                    "vsched daemon: nothing to restore ({} does not exist)",
                    state_file.display()
                );
            }
            Ok(true)
        }
    }
}

/// The watchdog (vsched_daemon::watchdog): this binary's restore mode,
/// which waits for this daemon's end and puts back what the state file
/// records.
fn spawn_watchdog(state_file: &std::path::Path) -> Result<Watchdog> {
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg("daemon")
        .arg("--restore")
        .arg("--after-stdin-closes")
        .arg("--rwc-state")
        .arg(state_file);
    Watchdog::spawn(command).context("starting the restore watchdog")
}
