//! `vsched status`: the running daemon's model, from its status socket.

use anyhow::{Context, Result};
use std::path::PathBuf;
use vsched_daemon::history::HistoryAnswer;
use vsched_daemon::state::DaemonStatus;
use vsched_daemon::status::{fetch, DEFAULT_SOCKET};

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Reads the model `vsched daemon` keeps (its last probe report) from the
daemon's root-only socket and prints it as a table, or as JSON with --json
(schema vsched.daemon-status/v1: pid, start time, metrics URL, number of
model updates, the report as `vsched probe --json` prints it, what
user-space RWC hides and, with consolidation, the active sets and the
vCPUs parked). Says so and exits 2 when no daemon runs.

With --plot FILE.svg it draws the daemon's recent past instead (the last
10 minutes unless the daemon was started with another --history): per
vCPU, its available share and its inactive episodes (mean and p95) over
time, the stretches user-space RWC kept it hidden and those
consolidation parked it. --json --history
prints that history (schema vsched.daemon-history/v1).

EXAMPLES
  sudo vsched status
  sudo vsched status --json | jq '.report.vcpus[] | {cpu, available_pct}'
  sudo vsched status --plot vcpus.svg")]
pub struct StatusArgs {
    /// The daemon's status socket
    #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
    socket: PathBuf,

    /// Print the daemon's JSON instead of a table
    #[arg(long)]
    json: bool,

    /// With --json: print the recent past (what --plot draws) instead of the status
    #[arg(long, requires = "json")]
    history: bool,

    /// Draw the recent past (availability and inactive episodes per vCPU over time) as SVG
    #[arg(long, value_name = "FILE.svg", conflicts_with = "json")]
    plot: Option<PathBuf>,
}

pub fn run(args: StatusArgs) -> Result<bool> {
    if let Some(path) = &args.plot {
        let text = fetch(&args.socket, "history")?;
        let history: HistoryAnswer = serde_json::from_str(&text)
            .context("the daemon's history is not what this vsched reads")?;
        crate::status_plot::write_svg(&history, path)?;
        eprintln!(
            "vsched status: drew the last {} s ({} reports) into {}",
            history.span_ms() / 1000,
            history.samples.len(),
            path.display()
        );
        return Ok(true);
    }
    let text = fetch(
        &args.socket,
        if args.history { "history" } else { "status" },
    )?;
    if args.json {
        println!("{text}");
        return Ok(true);
    }
    let status: DaemonStatus = serde_json::from_str(&text).context(
        "the daemon's status is not what this vsched reads (a daemon of another version?)",
    )?;
    print_table(&status);
    Ok(true)
}

fn print_table(s: &DaemonStatus) {
    println!(
        "vsched daemon pid {}, {} model updates, metrics at {}",
        s.pid, s.model_updates, s.metrics_url
    );
    if let Some(rwc) = &s.rwc {
        let cgroups: Vec<String> = rwc
            .cgroups
            .iter()
            .map(|c| c.display().to_string())
            .collect();
        println!(
            "  user-space RWC{}: hides vCPUs [{}] from {} ({} changes)",
            if rwc.dry_run { " (dry run)" } else { "" },
            vsched_model::cpulist::format_cpu_list(&rwc.hidden),
            cgroups.join(", "),
            rwc.changes
        );
        if let Some(active) = &rwc.active {
            let sets: Vec<String> = active
                .iter()
                .map(|set| format!("[{}]", vsched_model::cpulist::format_cpu_list(set)))
                .collect();
            println!("  consolidation: active sets {}", sets.join(", "));
        }
    }
    if let Some(sched) = &s.sched {
        match &sched.ejected {
            Some(e) => println!(
                "  scheduler: ejected by the kernel: {} ({})",
                e.reason, e.message
            ),
            None if sched.loaded && !sched.parked.is_empty() => println!(
                "  scheduler: loaded; consolidation parks vCPUs [{}]",
                vsched_model::cpulist::format_cpu_list(&sched.parked)
            ),
            None if sched.loaded => println!("  scheduler: loaded"),
            None => println!("  scheduler: not loaded"),
        }
    }
    let Some(report) = &s.report else {
        println!("  no model yet (the first probe report is on its way)");
        return;
    };
    println!(
        "\n  {:>4} {:>8} {:>10} {:>7} {:>13} {:>12}  flags",
        "vcpu", "capacity", "available", "steal", "episode mean", "episode p95"
    );
    let num =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |x| format!("{x:.digits$}"));
    let ms = |us: Option<f64>| us.map_or("-".to_string(), |us| format!("{:.2} ms", us / 1e3));
    for v in &report.vcpus {
        let mut flags = vec![];
        if v.stacked {
            flags.push(format!(
                "stacked with [{}]",
                vsched_model::cpulist::format_cpu_list(&v.stacked_with)
            ));
        }
        if v.straggler {
            flags.push("straggler".to_string());
        }
        let parked_by_sched = s
            .sched
            .as_ref()
            .is_some_and(|sc| sc.parked.contains(&v.cpu));
        let parked_by_cgroups = s
            .rwc
            .as_ref()
            .and_then(|r| r.parked.as_ref())
            .is_some_and(|p| p.contains(&v.cpu));
        if parked_by_sched || parked_by_cgroups {
            flags.push("parked".to_string());
        }
        println!(
            "  {:>4} {:>8} {:>9}% {:>6}% {:>13} {:>12}  {}",
            v.cpu,
            num(v.capacity.map(f64::from), 0),
            num(v.available_pct, 1),
            num(v.steal_pct, 1),
            ms(v.episodes.as_ref().map(|e| e.mean_us)),
            ms(v.episodes.as_ref().map(|e| e.p95_us)),
            flags.join(", ")
        );
    }
}
