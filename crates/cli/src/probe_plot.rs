//! `vsched probe --plot FILE.svg`: the report as a picture (plotters SVG):
//! per vCPU, capacity (of 1024) and availability side by side; and the
//! topology probe's pair latencies as a heatmap, where stacked vCPUs and
//! SMT siblings stand out as the cells far from the rest.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;
use vsched_model::report::ProbeReport;

/// Wide enough for 16 vCPUs' bars beside a 16x16 heatmap.
const SIZE: (u32, u32) = (1100, 460);
const CAPACITY: RGBColor = RGBColor(31, 119, 180);
const AVAILABLE: RGBColor = RGBColor(44, 160, 44);
/// Heatmap from short (light) to long (dark) latencies.
const COOL: (f64, f64, f64) = (247.0, 251.0, 255.0);
const HOT: (f64, f64, f64) = (8.0, 48.0, 107.0);

pub fn write_svg(report: &ProbeReport, path: &Path) -> Result<()> {
    draw(report, path).map_err(|e| anyhow!("writing the plot {}: {e}", path.display()))
}

fn draw(report: &ProbeReport, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(SIZE.0 * 55 / 100);
    bars(report, &left)?;
    heatmap(report, &right)?;
    root.present()?;
    Ok(())
}

/// Capacity / 1024 and availability per vCPU, as two bars each (0-1).
fn bars(
    report: &ProbeReport,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = report.vcpus.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "capacity (of 1024) and availability per vCPU",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..1.1)?;
    let cpus: Vec<u32> = report.vcpus.iter().map(|v| v.cpu).collect();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                cpus.get(i as usize)
                    .map_or(String::new(), |c| format!("vCPU {c}"))
            } else {
                String::new()
            }
        })
        .disable_x_mesh()
        .draw()?;
    for (i, v) in report.vcpus.iter().enumerate() {
        let x = i as f64;
        if let Some(c) = v.capacity {
            let top = f64::from(c) / 1024.0;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.35, 0.0), (x - 0.02, top)],
                CAPACITY.filled(),
            )))?;
        }
        if let Some(a) = v.available_pct {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.02, 0.0), (x + 0.35, a / 100.0)],
                AVAILABLE.filled(),
            )))?;
        }
        let mut flags = vec![];
        if v.stacked {
            flags.push("stacked");
        }
        if v.straggler {
            flags.push("straggler");
        }
        if !flags.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                flags.join(", "),
                (x - 0.35, 1.05),
                ("sans-serif", 12),
            )))?;
        }
    }
    for (k, (label, colour)) in [("capacity", CAPACITY), ("available", AVAILABLE)]
        .into_iter()
        .enumerate()
    {
        let y = 1.05 - 0.06 * (k as f64 + 1.0);
        let x = n as f64 - 1.2;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x, y), (x + 0.08, y + 0.03)],
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label,
            (x + 0.12, y + 0.035),
            ("sans-serif", 12),
        )))?;
    }
    Ok(())
}

/// The pair latencies of the topology probe, one cell per pair, labelled
/// in nanoseconds with the pair's relation (smt, llc, stacked, ...); "no
/// topology" when it was not measured.
fn heatmap(
    report: &ProbeReport,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(t) = report.topology.as_ref() else {
        area.draw(&Text::new(
            "no topology in this report",
            (20, 40),
            ("sans-serif", 16),
        ))?;
        return Ok(());
    };
    let n = t.cpus.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "pair latency (ns) and relation: stacked and SMT pairs stand out",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0.0..n as f64, 0.0..n as f64)?;
    let cpus = t.cpus.clone();
    let label = move |x: &f64| {
        let i = (x - 0.5).round();
        if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
            cpus.get(i as usize)
                .map_or(String::new(), |c| c.to_string())
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(2 * n + 1)
        .y_labels(2 * n + 1)
        .x_label_formatter(&label)
        .y_label_formatter(&label)
        .draw()?;
    let values: Vec<f64> = t.latency_ns.iter().flatten().flatten().copied().collect();
    let (lo, hi) = values.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
        (lo.min(v), hi.max(v))
    });
    for (i, row) in t.latency_ns.iter().enumerate() {
        for (j, cell) in row.iter().enumerate() {
            let Some(ns) = cell else { continue };
            let share = if hi > lo { (ns - lo) / (hi - lo) } else { 0.0 };
            let mix = |a: f64, b: f64| (a + (b - a) * share) as u8;
            let colour = RGBColor(mix(COOL.0, HOT.0), mix(COOL.1, HOT.1), mix(COOL.2, HOT.2));
            let (x, y) = (j as f64, i as f64);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, y), (x + 1.0, y + 1.0)],
                colour.filled(),
            )))?;
            let text_colour = if share > 0.5 { WHITE } else { BLACK };
            let relation = t
                .relation
                .get(i)
                .and_then(|r| r.get(j))
                .and_then(|r| r.as_ref())
                .and_then(|r| serde_json::to_value(r).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            for (k, line) in [format!("{ns:.0}"), relation].into_iter().enumerate() {
                chart.draw_series(std::iter::once(Text::new(
                    line,
                    (x + 0.3, y + 0.62 - 0.15 * k as f64),
                    ("sans-serif", 12).into_font().color(&text_colour),
                )))?;
            }
        }
    }
    Ok(())
}
