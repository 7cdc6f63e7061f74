//! `vsched bench real`: unmodified programs from Debian (xz, zstd, pigz,
//! pbzip2, sqlite3, memcached), an OpenMP kernel on the machine's libgomp
//! and a mutex-heavy program, each at 1x and 4x as many threads as vCPUs,
//! directly (glibc) and under `vsched exec`.
//!
//! The machine's speed drifts within minutes, so the benchmark runs in
//! rounds: each round runs one pair (glibc and vsched back to back, the
//! order swapped every round) of every row, and the rounds spread each
//! row's pairs over the whole run, calm minutes and busy ones. Each pair
//! gives a speed ratio (glibc time / vsched time, or vsched rate / glibc
//! rate); a row is judged by the median of its pairs' ratios. Outputs are
//! compared byte for byte between every run of a row.

mod input;
mod plot;
mod run;
mod workload;

pub use input::write_text;
pub use plot::ratios_svg;
pub use workload::Workload;

use crate::compare::Variant;
use crate::{BenchError, Harness};
use run::{same_output, Fingerprint, Setup};
use serde::Serialize;
use vsched_lab::host_load::{HostLoad, HostLoads};
use vsched_model::stats::{median, median_interval};

/// The busy host of `mutex-busy`: each vCPU is taken 2 ms of every 8 (a
/// quarter of its time, in episodes as long as a host time slice), by
/// turns, so that one vCPU at a time is off, as when a neighbour's vCPU
/// shares the core.
const BUSY_ON_US: u64 = 2_000;
const BUSY_PERIOD_US: u64 = 8_000;

/// Confidence of the interval given for each row's median ratio: 90%, so
/// that "the interval lies below the goal" is a one-sided 95% statement.
pub const MEDIAN_INTERVAL_LEVEL: f64 = 0.90;

/// What the caller asks for.
#[derive(Debug, Clone)]
pub struct RealConfig {
    pub workloads: Vec<Workload>,
    /// Oversubscription factors (1 and 4 by default).
    pub factors: Vec<usize>,
    /// Pairs per row; each round runs one pair of every row.
    pub rounds: usize,
    /// Size of the compressors' input.
    pub input_mib: u64,
    /// A/A control: glibc on both sides of every pair, so that the ratios
    /// show how far pairs spread when nothing differs (the noise floor).
    pub control: bool,
}

/// One row's pairs and verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: Workload,
    pub oversubscription: usize,
    pub threads: usize,
    /// "s" (lower is better) or "requests/s" (higher is better).
    pub unit: &'static str,
    /// Calibrated work per run (OpenMP regions, sqlite rows, mutex
    /// operations); 0 where the input file sets it.
    pub size: u64,
    pub glibc: Vec<f64>,
    pub vsched: Vec<f64>,
    /// Per pair: vsched's speed over glibc's (above 1: vsched faster).
    pub ratios: Vec<f64>,
    pub median_ratio: f64,
    /// Where the median ratio of all such pairs lies with
    /// MEDIAN_INTERVAL_LEVEL confidence (vsched_model::stats::
    /// median_interval); None with fewer than 5 pairs. A goal is missed
    /// measurably only where the interval lies wholly below it.
    pub median_ratio_interval: Option<[f64; 2]>,
    pub min_ratio: f64,
    pub max_ratio: f64,
    /// CPU seconds (user + system) of each run's processes.
    pub glibc_cpu_s: Vec<f64>,
    pub vsched_cpu_s: Vec<f64>,
    /// Per pair: glibc's CPU time per unit of work over vsched's (above 1:
    /// vsched used less). A machine that runs slower for a while (shared
    /// cores, other tenants) moves it as it moves the speed ratio; where
    /// it reads below the speed ratio, vsched's waits burned CPU time
    /// (spinning, yielding) that glibc's left idle.
    pub cpu_ratios: Vec<f64>,
    pub median_cpu_ratio: f64,
    /// Every run's output matched the first glibc run's.
    pub identical_output: bool,
    pub goal: f64,
    pub met: bool,
}

/// A workload that could not run here, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub workload: Workload,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RealBench {
    pub schema: &'static str,
    pub vcpus: usize,
    pub rounds: usize,
    pub input_mib: u64,
    /// Both sides ran glibc (RealConfig::control).
    pub control: bool,
    pub rows: Vec<Row>,
    pub skipped: Vec<Skipped>,
    /// Every row met its goal with identical output.
    pub all_met: bool,
}

/// A row while it runs.
struct Pending {
    workload: Workload,
    oversubscription: usize,
    threads: usize,
    size: u64,
    glibc: Vec<f64>,
    vsched: Vec<f64>,
    glibc_cpu_s: Vec<f64>,
    vsched_cpu_s: Vec<f64>,
    reference: Option<Fingerprint>,
    identical: bool,
}

/// Runs the benchmark; `progress` hears one line per pair.
pub fn run(
    h: &Harness,
    config: &RealConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<RealBench, BenchError> {
    let setup = Setup::new(&h.vsched, config.input_mib << 20)?;
    let mut skipped = vec![];
    let mut rows = vec![];
    for &w in &config.workloads {
        if let Some(reason) = why_not(w, &setup) {
            skipped.push(Skipped {
                workload: w,
                reason,
            });
            continue;
        }
        for &factor in &config.factors {
            let threads = h.threads(factor);
            let size = size_for(&setup, h, w, threads)?;
            rows.push(Pending {
                workload: w,
                oversubscription: factor,
                threads,
                size,
                glibc: vec![],
                vsched: vec![],
                glibc_cpu_s: vec![],
                vsched_cpu_s: vec![],
                reference: None,
                identical: true,
            });
        }
    }
    for round in 0..config.rounds {
        for row in rows.iter_mut() {
            h.interrupt.check()?;
            run_pair(&setup, row, round, config.control)?;
            let (g, v) = (row.glibc[round], row.vsched[round]);
            let (gc, vc) = (row.glibc_cpu_s[round], row.vsched_cpu_s[round]);
            progress(&format!(
                "round {}/{}: {} {}x: glibc {g:.3}, vsched {v:.3} ({:.2}x; CPU {gc:.2} s, {vc:.2} s)",
                round + 1,
                config.rounds,
                row.workload.name(),
                row.oversubscription,
                speed_ratio(row.workload, g, v)
            ));
        }
    }
    let rows: Vec<Row> = rows.into_iter().map(finish).collect();
    Ok(RealBench {
        schema: "vsched.bench-real/v1",
        vcpus: h.vcpus,
        rounds: config.rounds,
        input_mib: config.input_mib,
        control: config.control,
        all_met: rows.iter().all(|r| r.met),
        rows,
        skipped,
    })
}

/// Why `w` cannot run on this machine, if it cannot.
fn why_not(w: Workload, setup: &Setup) -> Option<String> {
    if let Some(reason) = workload::missing(w) {
        return Some(reason);
    }
    match w {
        Workload::Openmp if setup.omp.is_none() => {
            Some("cc cannot build OpenMP programs (apt-get install gcc)".into())
        }
        Workload::Mutex | Workload::MutexBusy if setup.syncbench.is_none() => {
            Some("cc cannot build the mutex program (apt-get install gcc)".into())
        }
        // SAFETY: geteuid has no preconditions.
        Workload::MutexBusy if unsafe { libc::geteuid() } != 0 => {
            Some("the busy host's SCHED_FIFO loads need root".into())
        }
        _ => None,
    }
}

/// The work per run of the workloads sized by calibration (about a
/// second under glibc: sync bench's target), 0 for the others.
fn size_for(setup: &Setup, h: &Harness, w: Workload, threads: usize) -> Result<u64, BenchError> {
    match w {
        Workload::Openmp | Workload::Sqlite | Workload::Mutex | Workload::MutexBusy => {
            crate::sync::calibrate(|size| {
                h.interrupt.check()?;
                Ok(setup.run(w, Variant::Baseline, threads, size)?.value)
            })
        }
        _ => Ok(0),
    }
}

/// One pair of runs of `row`, glibc first in even rounds and vsched first
/// in odd ones (a drift within the pair then favours neither).
fn run_pair(
    setup: &Setup,
    row: &mut Pending,
    round: usize,
    control: bool,
) -> Result<(), BenchError> {
    let order = if round % 2 == 0 {
        [Variant::Baseline, Variant::Vsched]
    } else {
        [Variant::Vsched, Variant::Baseline]
    };
    let busy = busy_host(row.workload)?;
    for variant in order {
        let runs_as = if control { Variant::Baseline } else { variant };
        let outcome = setup.run(row.workload, runs_as, row.threads, row.size)?;
        match &row.reference {
            None => row.reference = Some(outcome.fingerprint),
            Some(reference) => {
                row.identical &= same_output(reference, &outcome.fingerprint)?;
            }
        }
        match variant {
            Variant::Baseline => {
                row.glibc.push(outcome.value);
                row.glibc_cpu_s.push(outcome.cpu_s);
            }
            Variant::Vsched => {
                row.vsched.push(outcome.value);
                row.vsched_cpu_s.push(outcome.cpu_s);
            }
        }
    }
    drop(busy);
    Ok(())
}

/// The host loads of `mutex-busy` over the harness's vCPUs, by turns.
fn busy_host(w: Workload) -> Result<Option<HostLoads>, BenchError> {
    if w != Workload::MutexBusy {
        return Ok(None);
    }
    let cpus = vsched_os::affinity::thread_affinity(0).map_err(|source| BenchError::Start {
        what: "reading this process's CPU affinity",
        source,
    })?;
    let n = cpus.len().max(1) as u64;
    let loads: Vec<HostLoad> = cpus
        .iter()
        .enumerate()
        .map(|(i, &cpu)| HostLoad {
            host_cpu: cpu,
            on_us: BUSY_ON_US,
            period_us: BUSY_PERIOD_US,
            phase_us: i as u64 * BUSY_PERIOD_US / n,
        })
        .collect();
    HostLoads::start(&loads).map(Some).map_err(BenchError::Lab)
}

/// vsched's speed over glibc's for one pair.
fn speed_ratio(w: Workload, glibc: f64, vsched: f64) -> f64 {
    if w.is_rate() {
        vsched / glibc
    } else {
        glibc / vsched
    }
}

/// glibc's CPU time per unit of work over vsched's for one pair: the
/// work is fixed for timed runs, and requests (rate x the fixed load
/// period) for rates.
fn cpu_ratio(w: Workload, (glibc, glibc_cpu): (f64, f64), (vsched, vsched_cpu): (f64, f64)) -> f64 {
    if w.is_rate() {
        (glibc_cpu / glibc) / (vsched_cpu / vsched)
    } else {
        glibc_cpu / vsched_cpu
    }
}

fn finish(p: Pending) -> Row {
    let ratios: Vec<f64> = p
        .glibc
        .iter()
        .zip(&p.vsched)
        .map(|(&g, &v)| speed_ratio(p.workload, g, v))
        .collect();
    let cpu_ratios: Vec<f64> = (0..ratios.len())
        .map(|i| {
            cpu_ratio(
                p.workload,
                (p.glibc[i], p.glibc_cpu_s[i]),
                (p.vsched[i], p.vsched_cpu_s[i]),
            )
        })
        .collect();
    // NaN without pairs (stats::median of nothing).
    let median_ratio = median(&mut ratios.clone());
    let goal = p.workload.goal(p.oversubscription);
    Row {
        workload: p.workload,
        oversubscription: p.oversubscription,
        threads: p.threads,
        unit: if p.workload.is_rate() {
            "requests/s"
        } else {
            "s"
        },
        size: p.size,
        min_ratio: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        max_ratio: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        met: p.identical && median_ratio >= goal,
        median_ratio,
        median_ratio_interval: median_interval(&ratios, MEDIAN_INTERVAL_LEVEL)
            .map(|(lo, hi)| [lo, hi]),
        median_cpu_ratio: median(&mut cpu_ratios.clone()),
        cpu_ratios,
        glibc_cpu_s: p.glibc_cpu_s,
        vsched_cpu_s: p.vsched_cpu_s,
        identical_output: p.identical,
        goal,
        glibc: p.glibc,
        vsched: p.vsched,
        ratios,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(w: Workload, glibc: Vec<f64>, vsched: Vec<f64>) -> Pending {
        Pending {
            workload: w,
            oversubscription: 1,
            threads: 2,
            size: 0,
            // CPU time as long as the wall time: a CPU ratio equal to the
            // speed ratio unless a test sets them apart.
            glibc_cpu_s: glibc.clone(),
            vsched_cpu_s: vsched.clone(),
            glibc,
            vsched,
            reference: None,
            identical: true,
        }
    }

    #[test]
    fn a_row_is_judged_by_the_median_of_its_pairs() {
        // Times: ratios 2/2.5 = 0.8, 2/2 = 1.0, 3/2.5 = 1.2.
        let r = finish(pending(
            Workload::Xz,
            vec![2.0, 2.0, 3.0],
            vec![2.5, 2.0, 2.5],
        ));
        assert_eq!(r.ratios, [0.8, 1.0, 1.2]);
        assert_eq!((r.median_ratio, r.min_ratio, r.max_ratio), (1.0, 0.8, 1.2));
        assert!(r.met, "1.0 >= 0.98 at 1x");
        assert_eq!(r.median_ratio_interval, None, "3 pairs are too few");
        let r = finish(pending(
            Workload::Xz,
            vec![1.0; 5],
            vec![1.0, 2.0, 0.5, 1.25, 0.8],
        ));
        assert_eq!(r.median_ratio_interval, Some([0.5, 2.0]));
    }

    #[test]
    fn rates_compare_the_other_way_round() {
        let r = finish(pending(Workload::Memcached, vec![100.0], vec![90.0]));
        assert_eq!(r.ratios, [0.9]);
        assert!(!r.met);
    }

    #[test]
    fn different_output_fails_the_row_whatever_its_speed() {
        let mut p = pending(Workload::Xz, vec![2.0], vec![1.0]);
        p.identical = false;
        assert!(!finish(p).met);
    }

    #[test]
    fn cpu_ratios_compare_cpu_per_unit_of_work() {
        // Timed: same wall time, vsched used 10% more CPU.
        let mut p = pending(Workload::Xz, vec![2.0], vec![2.0]);
        p.vsched_cpu_s = vec![4.4];
        p.glibc_cpu_s = vec![4.0];
        let r = finish(p);
        assert_eq!(r.ratios, [1.0]);
        assert!((r.median_cpu_ratio - 4.0 / 4.4).abs() < 1e-12);
        // Rate: vsched served twice the requests with the same CPU, so
        // half the CPU per request.
        let mut p = pending(Workload::Memcached, vec![100.0], vec![200.0]);
        p.glibc_cpu_s = vec![3.0];
        p.vsched_cpu_s = vec![3.0];
        assert_eq!(finish(p).cpu_ratios, [2.0]);
    }
}
