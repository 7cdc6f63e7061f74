//! `vsched daemon`: the probers run continuously and the vCPU model is
//! served as Prometheus metrics on loopback, until Ctrl-C or SIGTERM.
//! What it keeps and serves is vsched-daemon's (crates/daemon).

use crate::probe_cmd::parse_duration;
use crate::signals;
use anyhow::{Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use vsched_daemon::Metrics;

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

  This is the first part of the daemon: user-space RWC, `vsched status`,
  plots and packaging are not built yet (docs/daemon.md).

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
}

pub fn run(args: DaemonArgs) -> Result<bool> {
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "vsched daemon: warning: serving metrics on {}, beyond this machine; they are not authenticated",
            args.listen
        );
    }
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
    let (reports_tx, reports) = mpsc::channel();
    let interval = args.interval;
    std::thread::Builder::new()
        .name("probers".into())
        .spawn(move || vsched_probe::watch::feed_reports(interval, reports_tx))
        .context("starting the probers")?;
    eprintln!("vsched daemon: metrics at http://{bound}/metrics (Ctrl-C or SIGTERM to stop)");
    while !signals::stopped() {
        match reports.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => metrics.update(&r.vcpus, r.overhead.as_ref(), r.unix_time_ms),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("the probers stopped")
            }
        }
    }
    eprintln!("vsched daemon: stopped");
    Ok(true)
}
