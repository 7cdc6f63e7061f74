//! `vsched bench sync`: pthread synchronisation micro-benchmarks (mutex,
//! barrier, condvar rings, rwlock, spinlock ring) at 1x and 4x as many
//! threads as vCPUs, each run directly (glibc) and under `vsched exec`
//! (the preloaded sync library), interleaved, medians per operation.
//!
//! The report (schema "vsched.bench-sync" version 1): `vcpus`, `runs`,
//! `rows` (one per case and oversubscription: `glibc` and `vsched` medians
//! per operation, `speedup` = glibc / vsched ns per op, `vsched_vs_1x` =
//! vsched ns per unit of work at this oversubscription / at 1x, where a
//! barrier round counts one unit per thread) and `goals` (the issue's
//! targets with the measured value and whether each was met).

mod calibrate;
mod case;
mod goals;
pub mod guest;
pub(crate) mod program;

pub use calibrate::calibrate;
pub use case::Case;
pub use goals::{goals, Goal};
pub use program::{Sample, SyncProgram};

use crate::compare::{alternate, Variant};
use crate::{BenchError, Harness};
use serde::Serialize;
use vsched_model::stats::median;

/// Oversubscriptions measured: one thread per vCPU, and four.
const FACTORS: [usize; 2] = [1, 4];

#[derive(Serialize, Debug)]
pub struct SyncBench {
    pub schema: &'static str,
    pub version: u32,
    pub vcpus: usize,
    pub runs: usize,
    pub rows: Vec<Row>,
    pub goals: Vec<Goal>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Row {
    pub case: Case,
    pub oversubscription: usize,
    pub threads: usize,
    pub glibc: Side,
    pub vsched: Side,
    /// glibc / vsched time per op.
    pub speedup: f64,
    /// vsched time per op at this oversubscription / at 1x.
    pub vsched_vs_1x: f64,
}

/// Medians over the runs of one variant (each metric on its own).
#[derive(Serialize, Clone, Default, Debug, PartialEq)]
pub struct Side {
    pub ops: u64,
    pub ns_per_op: f64,
    pub voluntary_per_op: f64,
    pub involuntary_per_op: f64,
    pub migrations_per_op: f64,
}

/// Compiles the program and runs `cases` at 1x and 4x, `runs` times each.
pub fn run(h: &Harness, cases: &[Case], runs: usize) -> Result<SyncBench, BenchError> {
    let program = SyncProgram::build()?;
    let mut rows: Vec<Row> = vec![];
    for &case in cases {
        for factor in FACTORS {
            let row = measure(&program, h, case, h.threads(factor), runs)?;
            let own_1x = rows
                .iter()
                .find(|r| r.case == case && r.oversubscription == 1)
                .map_or(comparable_ns(&row), comparable_ns);
            rows.push(Row {
                oversubscription: factor,
                vsched_vs_1x: comparable_ns(&row) / own_1x,
                ..row
            });
        }
    }
    Ok(SyncBench {
        schema: "vsched.bench-sync",
        version: 1,
        vcpus: h.vcpus,
        runs,
        goals: goals(&rows),
        rows,
    })
}

/// vsched's time per unit of work, comparable between 1x and 4x: a
/// barrier round holds one unit of work per thread, so 4x as many threads
/// do 4x the work per round; the other cases do the same work per op
/// whatever the thread count.
pub fn comparable_ns(row: &Row) -> f64 {
    match row.case {
        Case::Barrier => row.vsched.ns_per_op / row.threads as f64,
        _ => row.vsched.ns_per_op,
    }
}

/// Runs one case at one thread count: sizes each variant, then alternates them.
fn measure(
    program: &SyncProgram,
    h: &Harness,
    case: Case,
    threads: usize,
    runs: usize,
) -> Result<Row, BenchError> {
    let run = |variant, ops| program.run(h, variant, case, threads, ops);
    let glibc_ops = calibrate(|ops| run(Variant::Baseline, ops).map(|s| s.elapsed_s))?;
    let vsched_ops = calibrate(|ops| run(Variant::Vsched, ops).map(|s| s.elapsed_s))?;
    let samples = alternate(runs, h.interrupt, |variant| {
        let ops = match variant {
            Variant::Baseline => glibc_ops,
            Variant::Vsched => vsched_ops,
        };
        run(variant, ops)
    })?;
    let (glibc, vsched) = (side(&samples.baseline), side(&samples.vsched));
    Ok(Row {
        case,
        oversubscription: 1,
        threads,
        speedup: glibc.ns_per_op / vsched.ns_per_op,
        vsched_vs_1x: 1.0,
        glibc,
        vsched,
    })
}

/// Medians per op of one variant's runs, each metric on its own.
pub fn side(samples: &[Sample]) -> Side {
    let per_op = |f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(|s| f(s) / s.ops as f64).collect();
        median(&mut v)
    };
    let mut ns: Vec<f64> = samples.iter().map(|s| s.ns_per_op).collect();
    Side {
        ops: samples.first().map_or(0, |s| s.ops),
        ns_per_op: median(&mut ns),
        voluntary_per_op: per_op(|s| s.voluntary_ctxt_switches as f64),
        involuntary_per_op: per_op(|s| s.involuntary_ctxt_switches as f64),
        migrations_per_op: per_op(|s| s.migrations as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::program::fake_sample;
    use super::*;

    #[test]
    fn a_side_holds_medians_per_op() {
        let mut samples = vec![
            fake_sample(100, 1e-3),
            fake_sample(100, 3e-3),
            fake_sample(100, 2e-3),
        ];
        samples[0].voluntary_ctxt_switches = 50;
        samples[1].voluntary_ctxt_switches = 10;
        samples[2].voluntary_ctxt_switches = 30;
        let s = side(&samples);
        assert_eq!(s.ops, 100);
        assert!((s.ns_per_op - 20_000.0).abs() < 1e-6);
        assert!((s.voluntary_per_op - 0.3).abs() < 1e-12);
        assert_eq!(s.migrations_per_op, 0.0);
    }

    #[test]
    fn a_barrier_round_counts_one_unit_per_thread() {
        let row = |case, threads| Row {
            case,
            oversubscription: 1,
            threads,
            glibc: Side::default(),
            vsched: Side {
                ns_per_op: 8000.0,
                ..Side::default()
            },
            speedup: 1.0,
            vsched_vs_1x: 1.0,
        };
        assert_eq!(comparable_ns(&row(Case::Barrier, 8)), 1000.0);
        assert_eq!(comparable_ns(&row(Case::Mutex, 8)), 8000.0);
    }
}
