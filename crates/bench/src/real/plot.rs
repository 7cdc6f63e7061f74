//! The picture of `vsched bench real`: every pair's speed ratio per row,
//! with the row's median and goal, as SVG (plotters). A reader sees at once
//! which programs vsched speeds up, which it leaves alone and how far the
//! pairs spread.

use super::Row;
use crate::BenchError;
use plotters::prelude::*;
use std::path::Path;

/// Wide enough for 18 rows' labels (9 workloads at two thread counts).
const SIZE: (u32, u32) = (1100, 440);
const PAIR: RGBColor = RGBColor(31, 119, 180);
const MEDIAN: RGBColor = RGBColor(0, 0, 0);
const GOAL: RGBColor = RGBColor(214, 39, 40);

/// Writes the rows' ratios to `path` (SVG).
pub fn ratios_svg(rows: &[Row], title: &str, path: &Path) -> Result<(), BenchError> {
    draw(rows, title, path).map_err(|e| BenchError::Plot(format!("{}: {e}", path.display())))
}

fn label(r: &Row) -> String {
    format!("{} {}x", r.workload.name(), r.oversubscription)
}

fn draw(rows: &[Row], title: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let finite = rows
        .iter()
        .flat_map(|r| r.ratios.iter().copied())
        .filter(|r| r.is_finite());
    let (lo, hi) = finite.fold((0.9f64, 1.1f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let (lo, hi) = (lo - 0.05, hi + 0.05);
    let n = rows.len().max(1);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let labels: Vec<String> = rows.iter().map(label).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), lo..hi)?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("vsched speed / glibc speed (per pair)")
        .disable_x_mesh()
        .draw()?;
    // Parity: above the line vsched was faster.
    chart.draw_series(LineSeries::new(
        [(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
        BLACK.mix(0.5),
    ))?;
    for (i, r) in rows.iter().enumerate() {
        let x = i as f64;
        // Pairs spread sideways a little so that equal ratios stay visible.
        let k = r.ratios.len().max(1) as f64;
        chart.draw_series(
            r.ratios
                .iter()
                .enumerate()
                .map(|(j, &y)| Circle::new((x - 0.2 + 0.4 * j as f64 / k, y), 3, PAIR.filled())),
        )?;
        chart.draw_series(LineSeries::new(
            [(x - 0.3, r.median_ratio), (x + 0.3, r.median_ratio)],
            MEDIAN.stroke_width(2),
        ))?;
        chart.draw_series(LineSeries::new(
            [(x - 0.3, r.goal), (x + 0.3, r.goal)],
            GOAL.mix(0.8),
        ))?;
    }
    // A legend by hand: plotters' legend needs one series per entry.
    for (k, (text, colour)) in [("pair", PAIR), ("median", MEDIAN), ("goal", GOAL)]
        .into_iter()
        .enumerate()
    {
        let y = hi - (hi - lo) * (0.05 + 0.06 * k as f64);
        chart.draw_series(std::iter::once(Circle::new((-0.35, y), 3, colour.filled())))?;
        chart.draw_series(std::iter::once(Text::new(
            text,
            (-0.28, y),
            ("sans-serif", 12),
        )))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real::Workload;

    fn row(w: Workload, factor: usize, ratios: Vec<f64>) -> Row {
        Row {
            workload: w,
            oversubscription: factor,
            threads: 2 * factor,
            unit: "s",
            size: 0,
            glibc: vec![],
            vsched: vec![],
            median_ratio: ratios[ratios.len() / 2],
            median_ratio_interval: None,
            min_ratio: 0.0,
            max_ratio: 0.0,
            glibc_cpu_s: vec![],
            vsched_cpu_s: vec![],
            cpu_ratios: vec![],
            median_cpu_ratio: f64::NAN,
            ratios,
            identical_output: true,
            goal: 0.98,
            met: true,
        }
    }

    #[test]
    fn the_plot_has_a_point_per_pair_and_a_label_per_row() {
        let rows = vec![
            row(Workload::Xz, 1, vec![0.97, 1.0, 1.02]),
            row(Workload::Mutex, 4, vec![1.5, 1.7]),
        ];
        let dir = std::env::temp_dir().join(format!("vsched-real-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.svg");
        ratios_svg(&rows, "pairs", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for text in ["xz 1x", "mutex 4x", "pairs", "median", "goal"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // 5 pairs and 3 legend dots.
        assert_eq!(svg.matches("<circle").count(), 8, "{svg}");
    }
}
