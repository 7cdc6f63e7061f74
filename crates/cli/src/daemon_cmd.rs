//! `vsched daemon`: the probers run continuously and the vCPU model is
//! served as Prometheus metrics on loopback, until Ctrl-C or SIGTERM;
//! with `--rwc-cgroup`, user-space RWC keeps those cgroups off hidden
//! vCPUs. What it keeps, serves and changes is vsched-daemon's
//! (crates/daemon); this module wires it to the probers, the signals and
//! the restore watchdog.

use crate::probe_cmd::parse_duration;
use crate::sched_cmd::possible_cpus;
use crate::signals;
use anyhow::{Context, Result};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vsched_daemon::history::History;
use vsched_daemon::rwc::{self, CpusetRwc, DEFAULT_STATE_FILE};
use vsched_daemon::status::{StatusSocket, DEFAULT_SOCKET};
use vsched_daemon::Metrics;
use vsched_model::report::ProbeReport;
use vsched_probe::watch::WatchConfig;
use vsched_sched::{preflight, Scheduler, Stats, Tunables};

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
  controller in the ancestors where needed, or a v1 cpuset hierarchy):
  a change is made once two probe reports in a row ask for it, and a
  cgroup always keeps a CPU. Everything it changes is saved first (the
  --rwc-state file) and put back on exit, Ctrl-C and SIGTERM; after a
  SIGKILL its watchdog process puts it back, and so do the next start and
  `vsched daemon --restore` (the systemd unit's ExecStopPost). With
  --dry-run it only prints what it would write.

THE SCHEDULER (--sched, for kernels with sched_ext)
  With --sched the daemon loads vsched's sched_ext scheduler (what `vsched
  sched` loads, with its defaults) and hands it every model update; RWC,
  capacity placement, BVS and IVH then happen in the kernel, for every
  task. The kernel falls back to its own scheduler when the daemon stops,
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

    /// Put back the cpusets a daemon that was killed left changed (from --rwc-state), and exit
    #[arg(long, conflicts_with_all = ["rwc_cgroups", "dry_run"])]
    restore: bool,

    /// Also load vsched's sched_ext scheduler and feed it the model (RWC, capacity, BVS, IVH as `vsched sched` does; Linux 6.12+ with sched_ext)
    #[arg(long, conflicts_with_all = ["rwc_cgroups", "restore"])]
    sched: bool,

    /// (watchdog) With --restore: wait until standard input closes first
    #[arg(long, requires = "restore", hide = true)]
    after_stdin_closes: bool,
}

/// What `vsched status` gets: the daemon's identity, its last report and
/// what user-space RWC does.
#[derive(serde::Serialize)]
struct Status<'a> {
    schema: &'static str,
    pid: u32,
    started_unix_s: u64,
    metrics_url: String,
    model_updates: u64,
    report: Option<&'a ProbeReport>,
    rwc: Option<&'a RwcStatus>,
    sched: Option<&'a SchedStatus>,
}

/// The daemon's scheduler as `vsched status` shows it.
#[derive(serde::Serialize, Clone, Default)]
struct SchedStatus {
    loaded: bool,
    /// Why the kernel ejected it, if it did.
    ejected: Option<vsched_sched::ExitInfo>,
    counters: serde_json::Map<String, serde_json::Value>,
}

/// User-space RWC as `vsched status` shows it.
#[derive(serde::Serialize, Clone, Default)]
struct RwcStatus {
    cgroups: Vec<PathBuf>,
    dry_run: bool,
    hidden: Vec<u32>,
    changes: u64,
}

/// What the main loop shares with the status socket's thread.
struct Latest {
    model_updates: u64,
    report: Option<ProbeReport>,
    rwc: Option<RwcStatus>,
    sched: Option<SchedStatus>,
    history: History,
}

/// Where a relative --rwc-cgroup is looked for.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

pub fn run(args: DaemonArgs) -> Result<bool> {
    if args.restore {
        return restore(&args.rwc_state, args.after_stdin_closes);
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
    let listener = TcpListener::bind(args.listen).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (is another vsched daemon running? choose another address with --listen)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot listen on {}: {e}{hint}", args.listen)
    })?;
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
    let rwc = start_rwc(&groups, &args)?;
    if rwc.is_some() && !args.dry_run {
        // Holds the watchdog's standard input open while this process lives.
        _watchdog = Some(Watchdog::spawn(&args.rwc_state)?);
    }
    signals::catch();
    let metrics = Arc::new(Metrics::new());
    {
        let metrics = Arc::clone(&metrics);
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || vsched_daemon::serve(&listener, &|| metrics.render()))
            .context("starting the metrics server")?;
    }
    let latest = Arc::new(Mutex::new(Latest {
        model_updates: 0,
        report: None,
        rwc: rwc.as_ref().map(|_| RwcStatus {
            cgroups: groups.clone(),
            dry_run: args.dry_run,
            ..RwcStatus::default()
        }),
        sched: None,
        history: History::new(u64::try_from(args.history.as_millis()).unwrap_or(u64::MAX)),
    }));
    serve_status(
        status_socket,
        Arc::clone(&latest),
        format!("http://{bound}/metrics"),
    )?;
    let sched = if args.sched {
        preflight::check()?;
        let s = attach_scheduler()?;
        eprintln!("vsched daemon: vsched's sched_ext scheduler loaded");
        Some(s)
    } else {
        None
    };
    let mut daemon = Running {
        metrics,
        latest,
        rwc,
        sched,
        counted: Stats::default(),
        reloads: 0,
    };
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
    eprintln!("vsched daemon: metrics at http://{bound}/metrics (Ctrl-C or SIGTERM to stop)");
    while !signals::stopped() {
        daemon.notice_ejection();
        match reports.recv_timeout(Duration::from_millis(100)) {
            Ok(report) => daemon.take(report)?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("the probers stopped")
            }
        }
    }
    // The socket file goes with the last reference (the status thread's
    // stays blocked in accept until the process exits): remove it now.
    let _ = std::fs::remove_file(&args.socket);
    let clean = daemon.stop();
    eprintln!("vsched daemon: stopped");
    Ok(clean)
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

/// Answers the status socket from `latest` on a thread of its own.
fn serve_status(
    socket: Arc<StatusSocket>,
    latest: Arc<Mutex<Latest>>,
    metrics_url: String,
) -> Result<()> {
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || {
            socket.serve(&|request| {
                let guard = latest.lock().unwrap_or_else(|e| e.into_inner());
                if request == "history" {
                    return serde_json::to_string(&guard.history.answer()).unwrap_or_default();
                }
                let status = Status {
                    schema: "vsched.daemon-status/v1",
                    pid: std::process::id(),
                    started_unix_s,
                    metrics_url: metrics_url.clone(),
                    model_updates: guard.model_updates,
                    report: guard.report.as_ref(),
                    rwc: guard.rwc.as_ref(),
                    sched: guard.sched.as_ref(),
                };
                serde_json::to_string(&status).unwrap_or_default()
            })
        })
        .context("starting the status socket")?;
    Ok(())
}

/// What the main loop acts on: each probe report goes to the metrics, to
/// user-space RWC, to the scheduler and to what the status socket shows.
struct Running {
    metrics: Arc<Metrics>,
    latest: Arc<Mutex<Latest>>,
    rwc: Option<CpusetRwc>,
    sched: Option<Scheduler<'static>>,
    /// The scheduler's counters as last put into the metrics.
    counted: Stats,
    /// Reloads after the kernel's hotplug ejections.
    reloads: u32,
}

/// Loads the scheduler. Its BPF object's storage lives as long as the
/// daemon (a reload after a hotplug ejection needs a fresh one while the
/// daemon's state borrows the loaded one): one small allocation per load,
/// at most `MAX_HOTPLUG_RELOADS` + 1 of them.
fn attach_scheduler() -> Result<Scheduler<'static>> {
    let object = Box::leak(Box::new(MaybeUninit::uninit()));
    Ok(Scheduler::attach(
        object,
        Tunables::default(),
        possible_cpus(),
        &[],
    )?)
}

impl Running {
    fn take(&mut self, r: ProbeReport) -> Result<()> {
        self.metrics
            .update(&r.vcpus, r.overhead.as_ref(), r.unix_time_ms);
        self.metrics.update_topology(r.topology.as_ref());
        if let Some(rwc) = self.rwc.as_mut() {
            let change = rwc
                .update(&r)
                .context("user-space RWC could not save the cpusets; nothing was changed")?;
            if let Some(c) = &change {
                print_change(c);
            }
            self.metrics
                .update_rwc(&r.vcpus, rwc.hidden(), change.is_some());
        }
        let mut guard = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        guard.model_updates += 1;
        if let (Some(status), Some(rwc)) = (guard.rwc.as_mut(), self.rwc.as_ref()) {
            status.hidden = rwc.hidden().to_vec();
            status.changes = rwc.changes();
        }
        if let Some(s) = &self.sched {
            s.update_model(&vsched_sched::model::from_report(&r, true))?;
            let now = s.stats()?;
            self.metrics
                .update_sched(true, &now.since(&self.counted).values);
            guard.sched = Some(SchedStatus {
                loaded: true,
                ejected: None,
                counters: now.to_json_map(),
            });
            self.counted = now;
        }
        let hidden = self.rwc.as_ref().map_or(&[][..], |rwc| rwc.hidden());
        guard.history.push(r.unix_time_ms, &r.vcpus, hidden);
        guard.report = Some(r);
        Ok(())
    }

    /// If the kernel ejected the scheduler: load it again if the kernel
    /// asks (a vCPU went offline or came online), else say why and go on
    /// without it.
    fn notice_ejection(&mut self) {
        let Some(info) = self.sched.as_ref().and_then(|s| s.exit_info()) else {
            return;
        };
        if info.asks_restart() && self.reloads < vsched_sched::MAX_HOTPLUG_RELOADS {
            if let Some(s) = self.sched.take() {
                s.detach();
            }
            self.reloads += 1;
            eprintln!(
                "vsched daemon: the kernel unloaded the scheduler ({}); loading it again (restart {})",
                info.message, self.reloads
            );
            match attach_scheduler() {
                Ok(s) => {
                    // The new instance's counters start from zero.
                    self.counted = Stats::default();
                    let guard = self.latest.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(r) = &guard.report {
                        let _ = s.update_model(&vsched_sched::model::from_report(r, true));
                    }
                    drop(guard);
                    self.sched = Some(s);
                    return;
                }
                Err(e) => eprintln!("vsched daemon: loading the scheduler again failed: {e:#}"),
            }
        }
        eprintln!(
            "vsched daemon: the kernel ejected the scheduler: {} ({}) {}; going on without it",
            info.reason, info.kind, info.message
        );
        if let Some(s) = self.sched.take() {
            s.detach();
        }
        self.metrics.update_sched(false, &[]);
        let mut guard = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(status) = guard.sched.as_mut() {
            status.loaded = false;
            status.ejected = Some(info);
        }
    }

    /// Unloads the scheduler and puts the cpusets back; false when
    /// something could not be put back.
    fn stop(&mut self) -> bool {
        if let Some(s) = self.sched.take() {
            s.detach();
            eprintln!("vsched daemon: scheduler unloaded (the kernel's own is back)");
        }
        self.rwc
            .as_mut()
            .is_none_or(|rwc| report_outcome(&rwc.restore()))
    }
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
        Watchdog::wait_for_daemon();
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

/// A second process that puts the cpusets back if the daemon dies without
/// doing so (SIGKILL, a crash, a restore that failed): it blocks reading a
/// pipe whose only writer is the daemon, so the read ends when the daemon
/// does, however it ends; a daemon that stopped cleanly has removed the
/// state file by then. Never waited for: the daemon's exit is what it
/// waits for (it is re-parented and reaped by init).
struct Watchdog {
    _child: std::process::Child,
}

impl Watchdog {
    fn spawn(state_file: &std::path::Path) -> Result<Watchdog> {
        let child = std::process::Command::new("/proc/self/exe")
            .arg("daemon")
            .arg("--restore")
            .arg("--after-stdin-closes")
            .arg("--rwc-state")
            .arg(state_file)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting the restore watchdog")?;
        Ok(Watchdog { _child: child })
    }

    /// In the watchdog: ignore the signals that stop the daemon (Ctrl-C
    /// reaches the whole process group, systemd signals the whole unit),
    /// then wait for the daemon's end.
    fn wait_for_daemon() {
        // SAFETY: setting a disposition to SIG_IGN runs no code in the
        // handler context.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
        }
        // SAFETY: getppid has no preconditions.
        let daemon = unsafe { libc::getppid() };
        let mut sink = [0u8; 64];
        use std::io::Read;
        let mut stdin = std::io::stdin();
        while !matches!(stdin.read(&mut sink), Ok(0) | Err(_)) {}
        // The pipe closes as the daemon exits; until it has (this process
        // is re-parented then), its state file names a live daemon.
        // SAFETY: as above.
        while unsafe { libc::getppid() } == daemon {
            // The daemon is exiting: milliseconds; a few checks suffice.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
