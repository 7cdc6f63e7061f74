//! `vsched status --plot FILE.svg`: the daemon's recent past as a picture
//! (plotters SVG): per vCPU over the last minutes, the share of time it
//! was available, and its inactive episodes (mean, and p95 dashed); the
//! stretches RWC kept a vCPU hidden are drawn thick in the availability
//! panel, and those consolidation (the scheduler's, or the daemon's for
//! its cgroups) parked it dashed.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;
use vsched_daemon::history::{HistoryAnswer, Sample, VcpuPoint};

/// Two panels of 320 px, wide enough for 10 minutes at one point a second
/// to read as a line rather than as dots.
const SIZE: (u32, u32) = (1100, 640);

pub fn write_svg(history: &HistoryAnswer, path: &Path) -> Result<()> {
    if history.samples.is_empty() {
        return Err(anyhow!(
            "the daemon has no history yet (its first probe report is on its way)"
        ));
    }
    draw(history, path).map_err(|e| anyhow!("writing the plot {}: {e}", path.display()))
}

/// Every vCPU number that appears, ascending.
fn vcpus(samples: &[Sample]) -> Vec<u32> {
    let mut cpus: Vec<u32> = samples
        .iter()
        .flat_map(|s| s.vcpus.iter().map(|v| v.cpu))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// One vCPU's series: (seconds before the newest sample, value), in order.
fn series(
    samples: &[Sample],
    cpu: u32,
    value: impl Fn(&VcpuPoint) -> Option<f32>,
) -> Vec<(f64, f64)> {
    let newest = samples.last().map_or(0, |s| s.unix_ms);
    samples
        .iter()
        .filter_map(|s| {
            let v = s.vcpus.iter().find(|v| v.cpu == cpu)?;
            Some((x_of(newest, s), f64::from(value(v)?)))
        })
        .collect()
}

/// A sample's place on the time axis: seconds before the newest (<= 0).
fn x_of(newest_ms: u64, s: &Sample) -> f64 {
    -(newest_ms.saturating_sub(s.unix_ms) as f64 / 1e3)
}

fn draw(h: &HistoryAnswer, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let samples = &h.samples;
    // At least a second wide: one sample makes no range.
    let oldest_s = -(h.span_ms() as f64 / 1e3).max(1.0);
    let cpus = vcpus(samples);

    let mut avail = ChartBuilder::on(&top)
        .caption(
            "available share per vCPU (thick: hidden by user-space RWC; dashed: parked by consolidation)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(oldest_s..0.0, 0.0..1.05)?;
    avail
        .configure_mesh()
        .x_desc("seconds before now")
        .y_desc("available")
        .draw()?;
    for (i, &cpu) in cpus.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        avail
            .draw_series(LineSeries::new(
                series(samples, cpu, |v| v.available),
                color.stroke_width(2),
            ))?
            .label(format!("vCPU {cpu}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        // Hidden stretches: the same line, thick; parked ones dashed
        // above it.
        for stretch in stretches(samples, cpu, |v| v.hidden) {
            avail.draw_series(LineSeries::new(stretch, color.stroke_width(6)))?;
        }
        for stretch in stretches(samples, cpu, |v| v.parked) {
            let lifted: Vec<(f64, f64)> = stretch.iter().map(|&(x, y)| (x, y + 0.02)).collect();
            avail.draw_series(DashedLineSeries::new(lifted, 6, 4, color.stroke_width(3)))?;
        }
    }
    avail
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()?;

    let longest_ms = samples
        .iter()
        .flat_map(|s| &s.vcpus)
        .filter_map(|v| v.episode_p95_ms.or(v.episode_mean_ms))
        .fold(1.0f32, f32::max);
    let mut episodes = ChartBuilder::on(&bottom)
        .caption(
            "inactive episodes per vCPU: mean (solid), p95 (dashed)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(oldest_s..0.0, 0.0..f64::from(longest_ms) * 1.1)?;
    episodes
        .configure_mesh()
        .x_desc("seconds before now")
        .y_desc("ms")
        .draw()?;
    for (i, &cpu) in cpus.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        episodes.draw_series(LineSeries::new(
            series(samples, cpu, |v| v.episode_mean_ms),
            color.stroke_width(2),
        ))?;
        episodes.draw_series(DashedLineSeries::new(
            series(samples, cpu, |v| v.episode_p95_ms),
            4,
            4,
            color.stroke_width(1),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// The runs of consecutive samples in which `cpu` was `marked` (hidden,
/// parked), as availability series.
fn stretches(
    samples: &[Sample],
    cpu: u32,
    marked: impl Fn(&VcpuPoint) -> bool,
) -> Vec<Vec<(f64, f64)>> {
    let newest = samples.last().map_or(0, |s| s.unix_ms);
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut open = false;
    for s in samples {
        let point = s.vcpus.iter().find(|v| v.cpu == cpu);
        match point {
            Some(v) if marked(v) => {
                if !open {
                    out.push(Vec::new());
                    open = true;
                }
                if let (Some(a), Some(last)) = (v.available, out.last_mut()) {
                    last.push((x_of(newest, s), f64::from(a)));
                }
            }
            _ => open = false,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(cpu: u32, hidden: bool) -> VcpuPoint {
        VcpuPoint {
            cpu,
            available: Some(0.5),
            episode_mean_ms: Some(1.0),
            episode_p95_ms: Some(2.0),
            capacity: Some(1024),
            hidden,
            parked: !hidden,
        }
    }

    #[test]
    fn stretches_split_where_the_vcpu_came_back() {
        let samples: Vec<Sample> = [true, true, false, true]
            .iter()
            .enumerate()
            .map(|(i, &h)| Sample {
                unix_ms: i as u64 * 1000,
                vcpus: vec![point(0, false), point(1, h)],
            })
            .collect();
        let hidden = stretches(&samples, 1, |v| v.hidden);
        assert_eq!(hidden.len(), 2);
        assert_eq!(hidden[0], vec![(-3.0, 0.5), (-2.0, 0.5)]);
        assert!(stretches(&samples, 0, |v| v.hidden).is_empty());
        assert_eq!(
            stretches(&samples, 1, |v| v.parked).len(),
            1,
            "parked where not hidden"
        );
        assert_eq!(vcpus(&samples), vec![0, 1]);
    }
}
