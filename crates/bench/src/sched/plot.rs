//! Pictures of `vsched bench sched`'s results, as SVG (plotters): a
//! timeline scenario's throughput over time with its phases marked.

use super::TimelineResult;
use crate::BenchError;
use plotters::prelude::*;
use std::path::Path;

/// Plot size in pixels: wide enough for six phases' labels side by side.
const SIZE: (u32, u32) = (960, 420);

/// A line colour per variant, default first (plotters' palette, which
/// stays distinguishable in grey print).
fn colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 4] = [
        RGBColor(120, 120, 120),
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
    ];
    COLOURS[i % COLOURS.len()]
}

/// Writes the throughput timeline `t` to `path` (SVG), titled `title`.
pub fn timeline_svg(t: &TimelineResult, title: &str, path: &Path) -> Result<(), BenchError> {
    draw(t, title, path).map_err(|e| BenchError::Plot(format!("{}: {e}", path.display())))
}

fn draw(t: &TimelineResult, title: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let len = t.series.iter().map(|s| s.rates.len()).max().unwrap_or(0);
    let end_s = len as f64 * t.interval_s;
    let top = t
        .series
        .iter()
        .flat_map(|s| s.rates.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..end_s.max(1.0), 0.0..top.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the workload started")
        .y_desc("barrier rounds per second")
        .disable_x_mesh()
        .draw()?;
    // Phases: a thin line at each change, the name at the top.
    for p in &t.phases {
        if p.start_s > 0.0 {
            chart.draw_series(LineSeries::new(
                [(p.start_s, 0.0), (p.start_s, top)],
                BLACK.mix(0.3),
            ))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            p.name.clone(),
            (p.start_s + 0.3, top * 0.97),
            ("sans-serif", 12),
        )))?;
    }
    for (i, s) in t.series.iter().enumerate() {
        // Each rate is plotted at its interval's end (when it was known).
        let points = s
            .rates
            .iter()
            .enumerate()
            .map(|(k, &r)| ((k + 1) as f64 * t.interval_s, r));
        chart
            .draw_series(LineSeries::new(points, colour(i).stroke_width(2)))?
            .label(s.variant.clone())
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 18, y)], colour(i).stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{PhaseResult, Series};

    #[test]
    fn a_timeline_plot_has_every_series_and_phase() {
        let t = TimelineResult {
            interval_s: 0.25,
            series: vec![
                Series {
                    variant: "default".into(),
                    rates: vec![10.0, 12.0, 5.0, 4.0],
                },
                Series {
                    variant: "vsched".into(),
                    rates: vec![11.0, 12.0, 9.0, 10.0],
                },
            ],
            phases: vec![
                PhaseResult {
                    name: "dedicated".into(),
                    start_s: 0.0,
                    end_s: 0.5,
                    levels: vec![],
                    vsched_over_default: 1.0,
                    vsched_recovery_s: Some(0.0),
                },
                PhaseResult {
                    name: "straggler".into(),
                    start_s: 0.5,
                    end_s: 1.0,
                    levels: vec![],
                    vsched_over_default: 2.0,
                    vsched_recovery_s: Some(0.25),
                },
            ],
        };
        let dir = std::env::temp_dir().join(format!("vsched-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        timeline_svg(&t, "test", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["default", "vsched", "dedicated", "straggler", "test"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    }
}
