//! Human-readable tables of a probe report, and the choice between a
//! report's table and its JSON.

use std::fmt::Write;
use vsched_model::cpulist::format_cpu_list;
use vsched_model::report::ProbeReport;
use vsched_model::Relation;

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn opt_f(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

fn list(v: &[u32]) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        format_cpu_list(v)
    }
}

/// Lays out rows with columns padded to their widest cell.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s:<w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn short(rel: Relation) -> &'static str {
    match rel {
        Relation::Stacked => "STACKED",
        Relation::Smt => "smt",
        Relation::Llc => "llc",
        Relation::CrossLlc => "x-llc",
        Relation::CrossSocket => "x-socket",
    }
}

pub fn report(r: &ProbeReport) -> String {
    let mut out = String::new();
    let mut rows = vec![[
        "vCPU",
        "capacity",
        "avail%",
        "steal%",
        "hidden%",
        "preempt%",
        "episodes",
        "mean_ms",
        "p95_ms",
        "stacked_with",
        "smt",
        "llc",
        "flags",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for v in &r.vcpus {
        let ep = v.episodes;
        let mut flags = Vec::new();
        if v.straggler {
            flags.push("straggler");
        }
        if v.stacked {
            flags.push("stacked");
        }
        rows.push(vec![
            v.cpu.to_string(),
            opt(v.capacity),
            opt_f(v.available_pct, 1),
            opt_f(v.steal_pct, 1),
            opt_f(v.hidden_steal_pct, 1),
            opt_f(v.preempted_pct, 1),
            opt(ep.map(|e| e.count)),
            opt_f(ep.filter(|e| e.count > 0).map(|e| e.mean_us / 1e3), 2),
            opt_f(ep.filter(|e| e.count > 0).map(|e| e.p95_us / 1e3), 2),
            list(&v.stacked_with),
            list(&v.smt_siblings),
            opt(v.llc_group),
            if flags.is_empty() {
                "-".into()
            } else {
                flags.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows));

    if let Some(t) = &r.topology {
        let _ = writeln!(
            out,
            "\ncache-line transfer latency, ns ({}; {} pairs probed, {} inferred{})",
            t.mode,
            t.pairs_probed,
            t.pairs_inferred,
            match t.valid {
                Some(true) => "; earlier topology still holds",
                Some(false) => "; earlier topology changed",
                None => "",
            }
        );
        let mut rows = vec![std::iter::once(String::new())
            .chain(t.cpus.iter().map(|c| c.to_string()))
            .collect()];
        for (i, &a) in t.cpus.iter().enumerate() {
            let mut row = vec![a.to_string()];
            for j in 0..t.cpus.len() {
                row.push(if i == j {
                    "-".to_string()
                } else {
                    match (t.relation[i][j], t.latency_ns[i][j]) {
                        (Some(Relation::Stacked), _) => "STACKED".to_string(),
                        (Some(rel), Some(l)) => format!("{l:.0} {}", short(rel)),
                        (_, Some(l)) => format!("{l:.0}"),
                        _ => "?".to_string(),
                    }
                });
            }
            rows.push(row);
        }
        out.push_str(&table(&rows));
    }

    out.push('\n');
    if r.verdicts.is_empty() {
        out.push_str("verdict: no anomaly found\n");
    }
    for v in &r.verdicts {
        let _ = writeln!(out, "verdict: {v}");
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let _ = write!(
        out,
        "took {:.0} ms (capacity/activity {:.0} ms, topology {:.0} ms)",
        r.timing.total_ms, r.timing.capacity_ms, r.timing.topology_ms
    );
    if let Some(o) = r.overhead {
        let _ = write!(out, "; probing cost so far: {}", o.describe());
    }
    out.push('\n');
    out
}

/// Prints `report` as pretty JSON when `json` is set, else as `table` lays it out.
pub fn json_or_table<T: serde::Serialize>(
    json: bool,
    report: &T,
    table: impl FnOnce(&T),
) -> serde_json::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        table(report);
    }
    Ok(())
}
