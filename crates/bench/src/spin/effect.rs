//! The detector's effect: programs that busy-wait (spin token ring,
//! spinning pipeline, OpenMP with OMP_WAIT_POLICY=active) at 1x and 4x as
//! many threads as vCPUs, each alone and under `vsched run --spin-detect`,
//! alternating; medians per unit of work (hand-off, item, region).

use super::openmp::OpenMp;
use super::{run_zoo, Timed};
use crate::compare::{alternate, Variant};
use crate::{zoo, BenchError, Harness};
use serde::Serialize;
use vsched_model::stats::median;

/// Oversubscriptions measured: one thread per vCPU, and four.
const FACTORS: [usize; 2] = [1, 4];

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct EffectRow {
    pub program: String,
    pub threads: usize,
    pub oversubscription: usize,
    /// Median time per unit (hand-off, item, region), µs.
    pub baseline_us: f64,
    pub detected_us: f64,
    /// baseline / detected.
    pub speedup: f64,
    /// detected at this oversubscription / detected at 1x.
    pub vs_1x: f64,
}

/// One zoo program of the effect part.
struct ZooCase {
    program: &'static str,
    args: fn(threads: usize, units: u64) -> Vec<String>,
    /// Units per run at 1x, and under the detector at any oversubscription.
    units: u64,
    /// Units per baseline run at 4x: spinning away whole time slices makes
    /// it slow by nature, so it runs fewer and is compared per unit.
    units_baseline_4x: u64,
}

const ZOO_CASES: [ZooCase; 2] = [
    ZooCase {
        program: "ring",
        args: zoo::ring_args,
        units: 5000,
        units_baseline_4x: 300,
    },
    ZooCase {
        program: "pipeline",
        args: zoo::pipeline_args,
        units: 1000,
        units_baseline_4x: 100,
    },
];

/// OpenMP regions per run, and per baseline run at 4x (see ZooCase).
const OPENMP_REGIONS: u64 = 2000;
const OPENMP_REGIONS_BASELINE_4X: u64 = 100;

/// Units one run does: fewer for the baseline at 4x.
fn units_for(variant: Variant, factor: usize, units: u64, units_baseline_4x: u64) -> u64 {
    if variant == Variant::Vsched || factor == 1 {
        units
    } else {
        units_baseline_4x
    }
}

pub(super) fn measure(
    h: &Harness,
    runs: usize,
    skipped: &mut Vec<String>,
) -> Result<Vec<EffectRow>, BenchError> {
    let mut rows = vec![];
    for case in &ZOO_CASES {
        rows.extend(rows_for(
            case.program,
            h,
            runs,
            |threads, factor, variant| {
                let units = units_for(variant, factor, case.units, case.units_baseline_4x);
                run_zoo(h, variant, &(case.args)(threads, units))
            },
        )?);
    }
    match OpenMp::build() {
        Ok(omp) => rows.extend(rows_for(
            "openmp-active",
            h,
            runs,
            |threads, factor, variant| {
                let regions =
                    units_for(variant, factor, OPENMP_REGIONS, OPENMP_REGIONS_BASELINE_4X);
                omp.run(&h.vsched, variant, threads, regions)
            },
        )?),
        Err(why) => skipped.push(why),
    }
    Ok(rows)
}

/// One program at 1x and 4x: `run(threads, factor, variant)` runs it once;
/// baseline and detected alternate per repetition; medians per unit.
fn rows_for(
    program: &str,
    h: &Harness,
    runs: usize,
    mut run: impl FnMut(usize, usize, Variant) -> Result<Timed, BenchError>,
) -> Result<Vec<EffectRow>, BenchError> {
    let mut rows: Vec<EffectRow> = vec![];
    for factor in FACTORS {
        let threads = h.threads(factor);
        let times = alternate(runs, h.interrupt, |variant| {
            run(threads, factor, variant).map(Timed::us_per_unit)
        })?;
        let (mut base, mut det) = (times.baseline, times.vsched);
        let (b, d) = (median(&mut base), median(&mut det));
        let per_unit_1x = rows.first().map_or(d, |r| r.detected_us);
        rows.push(EffectRow {
            program: program.to_string(),
            threads,
            oversubscription: factor,
            baseline_us: b,
            detected_us: d,
            speedup: b / d,
            vs_1x: d / per_unit_1x,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Interrupt;
    use std::path::PathBuf;
    use std::sync::atomic::AtomicBool;

    fn harness(vcpus: usize) -> Harness {
        static FLAG: AtomicBool = AtomicBool::new(false);
        Harness {
            vsched: PathBuf::from("/nonexistent/vsched"),
            vcpus,
            interrupt: Interrupt::new(&FLAG),
        }
    }

    #[test]
    fn rows_compare_medians_per_unit_and_against_1x() {
        // Baseline: 10 us per unit at 1x, 400 at 4x; detected: 8 at 1x, 16 at 4x.
        let rows = rows_for("fake", &harness(2), 3, |threads, factor, variant| {
            let us = match (variant, factor) {
                (Variant::Baseline, 1) => 10.0,
                (Variant::Baseline, _) => 400.0,
                (Variant::Vsched, 1) => 8.0,
                (Variant::Vsched, _) => 16.0,
            };
            assert_eq!(threads, 2 * factor);
            Ok(Timed {
                elapsed_s: us * 100.0 / 1e6,
                units: 100,
            })
        })
        .unwrap();
        assert_eq!(rows.len(), 2);
        let (r1, r4) = (&rows[0], &rows[1]);
        assert_eq!((r1.threads, r1.oversubscription), (2, 1));
        assert!((r1.speedup - 1.25).abs() < 1e-9);
        assert!((r1.vs_1x - 1.0).abs() < 1e-9);
        assert!((r4.speedup - 25.0).abs() < 1e-9);
        assert!((r4.vs_1x - 2.0).abs() < 1e-9);
    }

    #[test]
    fn only_the_4x_baseline_runs_fewer_units() {
        assert_eq!(units_for(Variant::Baseline, 1, 5000, 300), 5000);
        assert_eq!(units_for(Variant::Baseline, 4, 5000, 300), 300);
        assert_eq!(units_for(Variant::Vsched, 4, 5000, 300), 5000);
    }
}
