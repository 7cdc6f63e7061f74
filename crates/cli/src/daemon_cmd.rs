//! `vsched daemon`: the probers run continuously and the vCPU model is
//! served as Prometheus metrics on loopback, until Ctrl-C or SIGTERM.
//! What it keeps and serves is vsched-daemon's (crates/daemon).

use crate::probe_cmd::parse_duration;
use crate::signals;
use anyhow::{Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vsched_daemon::status::{StatusSocket, DEFAULT_SOCKET};
use vsched_daemon::Metrics;
use vsched_model::report::ProbeReport;

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

  This is the first part of the daemon: user-space RWC, plots and
  packaging are not built yet (docs/daemon.md).

METRICS (per vCPU, label vcpu=\"N\")
  vsched_vcpu_capacity                      1024 = the strongest vCPU
  vsched_vcpu_available_ratio               share of time it can run, 0-1
  vsched_vcpu_steal_ratio                   steal the hypervisor reported
  vsched_vcpu_hidden_steal_ratio            time lost but not reported
  vsched_vcpu_inactive_episode_mean_seconds, ..._p95_seconds
  vsched_vcpu_stacked, vsched_vcpu_straggler  0 or 1
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

    /// The status socket `vsched status` reads (root only; one daemon per socket)
    #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
    socket: PathBuf,
}

/// What `vsched status` gets: the daemon's identity and its last report.
#[derive(serde::Serialize)]
struct Status<'a> {
    schema: &'static str,
    pid: u32,
    started_unix_s: u64,
    metrics_url: String,
    model_updates: u64,
    report: Option<&'a ProbeReport>,
}

pub fn run(args: DaemonArgs) -> Result<bool> {
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
    signals::catch();
    let metrics = Arc::new(Metrics::new());
    {
        let metrics = Arc::clone(&metrics);
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || vsched_daemon::serve(&listener, &|| metrics.render()))
            .context("starting the metrics server")?;
    }
    let latest: Arc<Mutex<(u64, Option<ProbeReport>)>> = Arc::new(Mutex::new((0, None)));
    {
        let (latest, socket) = (Arc::clone(&latest), Arc::clone(&status_socket));
        let started_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let metrics_url = format!("http://{bound}/metrics");
        std::thread::Builder::new()
            .name("status".into())
            .spawn(move || {
                socket.serve(&|| {
                    let guard = latest.lock().unwrap_or_else(|e| e.into_inner());
                    let status = Status {
                        schema: "vsched.daemon-status/v1",
                        pid: std::process::id(),
                        started_unix_s,
                        metrics_url: metrics_url.clone(),
                        model_updates: guard.0,
                        report: guard.1.as_ref(),
                    };
                    serde_json::to_string(&status).unwrap_or_default()
                })
            })
            .context("starting the status socket")?;
    }
    let (reports_tx, reports) = mpsc::channel();
    let interval = args.interval;
    std::thread::Builder::new()
        .name("probers".into())
        .spawn(move || vsched_probe::watch::feed_reports(interval, reports_tx))
        .context("starting the probers")?;
    eprintln!("vsched daemon: metrics at http://{bound}/metrics (Ctrl-C or SIGTERM to stop)");
    while !signals::stopped() {
        match reports.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => {
                metrics.update(&r.vcpus, r.overhead.as_ref(), r.unix_time_ms);
                let mut guard = latest.lock().unwrap_or_else(|e| e.into_inner());
                guard.0 += 1;
                guard.1 = Some(r);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("the probers stopped")
            }
        }
    }
    // The socket file goes with the last reference (the status thread's
    // stays blocked in accept until the process exits): remove it now.
    let _ = std::fs::remove_file(&args.socket);
    eprintln!("vsched daemon: stopped");
    Ok(true)
}
