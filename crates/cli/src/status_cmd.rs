//! `vsched status`: the running daemon's model, from its status socket.

use anyhow::{Context, Result};
use std::path::PathBuf;
use vsched_daemon::history::HistoryAnswer;
use vsched_daemon::status::{fetch, DEFAULT_SOCKET};

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Reads the model `vsched daemon` keeps (its last probe report) from the
daemon's root-only socket and prints it as a table, or as JSON with --json
(schema vsched.daemon-status/v1: pid, start time, metrics URL, number of
model updates, the report as `vsched probe --json` prints it, and what
user-space RWC hides). Says so and exits 2 when no daemon runs.

With --plot FILE.svg it draws the daemon's recent past instead (the last
10 minutes unless the daemon was started with another --history): per
vCPU, its available share and its inactive episodes (mean and p95) over
time, and the stretches user-space RWC kept it hidden. --json --history
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
    let status: serde_json::Value =
        serde_json::from_str(&text).context("the daemon's answer is not JSON")?;
    print_table(&status);
    Ok(true)
}

fn print_table(s: &serde_json::Value) {
    println!(
        "vsched daemon pid {}, {} model updates, metrics at {}",
        s["pid"],
        s["model_updates"],
        s["metrics_url"].as_str().unwrap_or("?")
    );
    if let Some(rwc) = s["rwc"].as_object() {
        let cgroups: Vec<&str> = rwc["cgroups"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
            .unwrap_or_default();
        let hidden: Vec<u32> = rwc["hidden"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.as_u64())
                    .map(|c| c as u32)
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "  user-space RWC{}: hides vCPUs [{}] from {} ({} changes)",
            if rwc["dry_run"] == true {
                " (dry run)"
            } else {
                ""
            },
            vsched_model::cpulist::format_cpu_list(&hidden),
            cgroups.join(", "),
            rwc["changes"]
        );
    }
    let Some(vcpus) = s["report"]["vcpus"].as_array() else {
        println!("  no model yet (the first probe report is on its way)");
        return;
    };
    println!(
        "\n  {:>4} {:>8} {:>10} {:>7} {:>13} {:>12}  flags",
        "vcpu", "capacity", "available", "steal", "episode mean", "episode p95"
    );
    let num = |v: &serde_json::Value, digits: usize| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{x:.digits$}"))
    };
    for v in vcpus {
        let mut flags = vec![];
        if v["stacked"] == true {
            flags.push(format!("stacked with {}", v["stacked_with"]));
        }
        if v["straggler"] == true {
            flags.push("straggler".to_string());
        }
        let ms = |field: &str| {
            v["episodes"][field]
                .as_f64()
                .map_or("-".to_string(), |us| format!("{:.2} ms", us / 1e3))
        };
        println!(
            "  {:>4} {:>8} {:>9}% {:>6}% {:>13} {:>12}  {}",
            v["cpu"].to_string(),
            num(&v["capacity"], 0),
            num(&v["available_pct"], 1),
            num(&v["steal_pct"], 1),
            ms("mean_us"),
            ms("p95_us"),
            flags.join(", ")
        );
    }
}
