//! `vsched bench spin`: the spin detector's accuracy (sensitivity over spin
//! episodes, specificity over decision windows of compute code, slowdown of
//! compute code) and its effect (spin token ring, pipeline, OpenMP busy
//! waits at 1x and 4x, with and without detection, side by side).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use vsched_spin::zoo::programs::Truth;
use vsched_spin::zoo::{compute, locks};
use vsched_spin::{Action, Config, DetectorParams, Engine, Sample, ThreadDetector};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Busy-waiting detection: accuracy (the paper's Tables 2 and 3) and effect
    Spin(SpinBenchArgs),
    /// pthread synchronisation at 1x and 4x oversubscription: glibc vs `vsched exec`
    Sync(crate::bench_sync::SyncBenchArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Accuracy,
    Effect,
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT RUNS
  accuracy: every spin-zoo lock with timed waits (sensitivity: share of waits
            of at least 1 ms that were detected), every compute kernel on all
            vCPUs (specificity: share of decision windows not called spinning),
            and each kernel with and without the detector (slowdown, medians).
  effect:   spin token ring (20 us of work per hand-off), spinning pipeline,
            and an OpenMP program with OMP_WAIT_POLICY=active (if a C compiler
            with OpenMP is installed), at 1x and 4x as many threads as vCPUs,
            each without and with `vsched run --spin-detect`, side by side.
  Baselines at 4x are slow by nature; they run fewer hand-offs and are compared
  per hand-off.

EXAMPLES
  vsched bench spin                     everything, 3 runs, table
  vsched bench spin --only effect --runs 5 --json > effect.json")]
pub struct SpinBenchArgs {
    /// Run only one part
    #[arg(long, value_enum)]
    only: Option<Part>,

    /// Repetitions of each timed measurement (medians are reported)
    #[arg(long, default_value_t = 3)]
    runs: usize,

    /// Timed waits per lock in the accuracy part
    #[arg(long, default_value_t = 60)]
    episodes: usize,

    /// Print JSON instead of tables
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<bool> {
    match cmd {
        BenchCommand::Spin(args) => spin(args),
        BenchCommand::Sync(args) => crate::bench_sync::run(args),
    }
}

#[derive(Serialize, Default)]
struct SpinBench {
    schema: &'static str,
    version: u32,
    vcpus: usize,
    accuracy: Option<Accuracy>,
    effect: Vec<EffectRow>,
}

#[derive(Serialize, Default)]
struct Accuracy {
    locks: Vec<LockRow>,
    kernels: Vec<KernelRow>,
    sensitivity: f64,
    specificity: f64,
    median_slowdown: f64,
}

#[derive(Serialize)]
struct LockRow {
    lock: String,
    episodes: usize,
    detected: usize,
    /// Median time from the start of a wait to its detection, µs.
    median_detection_us: f64,
}

#[derive(Serialize)]
struct KernelRow {
    kernel: String,
    windows: u64,
    false_positives: u64,
    baseline_s: f64,
    detected_s: f64,
    slowdown: f64,
}

#[derive(Serialize)]
struct EffectRow {
    program: String,
    threads: usize,
    oversubscription: usize,
    /// Median time per unit (hand-off, item, region), µs.
    baseline_us: f64,
    detected_us: f64,
    /// baseline / detected.
    speedup: f64,
    /// detected at this oversubscription / detected at 1x.
    vs_1x: f64,
}

fn spin(args: SpinBenchArgs) -> Result<bool> {
    if args.runs == 0 || args.episodes == 0 {
        bail!("--runs and --episodes must be at least 1");
    }
    crate::signals::catch();
    let vcpus = vsched_os::affinity::thread_affinity(0)?.len();
    let exe = std::env::current_exe()?;
    let mut out = SpinBench {
        schema: "vsched.bench-spin",
        version: 1,
        vcpus,
        ..Default::default()
    };
    if args.only != Some(Part::Effect) {
        out.accuracy = Some(accuracy(&exe, &args, vcpus)?);
    }
    if args.only != Some(Part::Accuracy) {
        out.effect = effect(&exe, &args, vcpus)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_tables(&out);
    }
    Ok(true)
}

fn stopped() -> Result<()> {
    if crate::signals::stopped() {
        bail!("interrupted");
    }
    Ok(())
}

/// Runs a zoo program under an observing engine; returns its truth and all samples.
fn observed(exe: &Path, zoo_args: &[&str]) -> Result<(Truth, Vec<Sample>)> {
    let mut child = Command::new(exe)
        .arg("spin-zoo")
        .arg("--wait-go")
        .args(zoo_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let cfg = Config {
        action: Action::Observe,
        record_samples: true,
        ..Default::default()
    };
    let mut engine = Engine::attach(child.id() as i32, cfg, None)
        .map_err(|e| anyhow::anyhow!("cannot sample the zoo: {e}"))?;
    child.stdin.take().expect("piped").write_all(b"go\n")?;
    while child.try_wait()?.is_none() {
        stopped()?;
        let _ = engine.step(1_000_000);
    }
    let report = engine.finish();
    let truth = read_truth(&mut child)?;
    Ok((truth, report.samples))
}

fn read_truth(child: &mut std::process::Child) -> Result<Truth> {
    let mut text = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut text)?;
    serde_json::from_str(text.trim()).context("the zoo program printed no result")
}

/// Per thread, in time order: (sample time, detector says spinning, full window).
fn replay(samples: &[Sample]) -> HashMap<i32, Vec<(u64, bool, bool)>> {
    let params = DetectorParams::default();
    let mut by_tid: HashMap<i32, Vec<&Sample>> = HashMap::new();
    for s in samples {
        by_tid.entry(s.tid).or_default().push(s);
    }
    by_tid
        .into_iter()
        .map(|(tid, mut list)| {
            list.sort_by_key(|s| s.time_ns);
            let mut d = ThreadDetector::new();
            let decisions = list
                .iter()
                .map(|s| {
                    d.observe(s, &params);
                    (s.time_ns, d.spinning(), d.window_full(&params))
                })
                .collect();
            (tid, decisions)
        })
        .collect()
}

fn accuracy(exe: &Path, args: &SpinBenchArgs, vcpus: usize) -> Result<Accuracy> {
    let mut acc = Accuracy::default();
    let (mut eps_total, mut eps_detected) = (0usize, 0usize);
    for lock in locks::NAMES {
        stopped()?;
        let (truth, samples) = observed(
            exe,
            &[
                "spin",
                "--lock",
                lock,
                "--episodes",
                &args.episodes.to_string(),
            ],
        )?;
        let decisions = replay(&samples);
        let mut delays = vec![];
        let mut counted = 0;
        let mut detected = 0;
        for e in truth
            .episodes
            .iter()
            .filter(|e| e.end_ns - e.start_ns >= 1_000_000)
        {
            counted += 1;
            let hit = decisions.get(&e.tid).and_then(|d| {
                d.iter()
                    .find(|(t, spinning, _)| *t >= e.start_ns && *t <= e.end_ns && *spinning)
            });
            if let Some((t, _, _)) = hit {
                detected += 1;
                delays.push((t - e.start_ns) as f64 / 1e3);
            }
        }
        eps_total += counted;
        eps_detected += detected;
        acc.locks.push(LockRow {
            lock: lock.to_string(),
            episodes: counted,
            detected,
            median_detection_us: median(&mut delays),
        });
    }
    acc.sensitivity = eps_detected as f64 / eps_total.max(1) as f64;

    let (mut windows_total, mut fp_total) = (0u64, 0u64);
    let threads = vcpus.to_string();
    for kernel in compute::NAMES {
        stopped()?;
        let passes = calibrated_passes(exe, kernel, &threads)?.to_string();
        let zoo = [
            "compute",
            "--kernel",
            kernel,
            "--threads",
            &threads,
            "--passes",
            &passes,
        ];
        let (truth, samples) = observed(exe, &zoo)?;
        let decisions = replay(&samples);
        let (mut windows, mut fps) = (0u64, 0u64);
        for tid in &truth.compute_tids {
            for &(_, spinning, full) in decisions.get(tid).map(|v| v.as_slice()).unwrap_or(&[]) {
                if full {
                    windows += 1;
                    fps += spinning as u64;
                }
            }
        }
        // Slowdown: the program alone vs under `vsched run --spin-detect`, alternating.
        let (mut base, mut det) = (vec![], vec![]);
        for _ in 0..args.runs {
            stopped()?;
            base.push(zoo_run(exe, false, &zoo)?.elapsed_s);
            det.push(zoo_run(exe, true, &zoo)?.elapsed_s);
        }
        let (b, d) = (median(&mut base), median(&mut det));
        windows_total += windows;
        fp_total += fps;
        acc.kernels.push(KernelRow {
            kernel: kernel.to_string(),
            windows,
            false_positives: fps,
            baseline_s: b,
            detected_s: d,
            slowdown: d / b - 1.0,
        });
    }
    acc.specificity = 1.0 - fp_total as f64 / windows_total.max(1) as f64;
    let mut slowdowns: Vec<f64> = acc.kernels.iter().map(|k| k.slowdown).collect();
    acc.median_slowdown = median(&mut slowdowns);
    Ok(acc)
}

/// Compute runs last about this long: long enough that starting the
/// detector is not what gets measured.
const COMPUTE_RUN_S: f64 = 1.5;

/// Passes of `kernel` that take about COMPUTE_RUN_S here.
fn calibrated_passes(exe: &Path, kernel: &str, threads: &str) -> Result<u64> {
    let probe = 200u64;
    let t = zoo_run(
        exe,
        false,
        &[
            "compute",
            "--kernel",
            kernel,
            "--threads",
            threads,
            "--passes",
            &probe.to_string(),
        ],
    )?;
    Ok(((probe as f64 * COMPUTE_RUN_S / t.elapsed_s.max(1e-4)) as u64).max(probe))
}

/// Runs `vsched [run --spin-detect --] vsched spin-zoo ...` and returns the zoo's truth.
fn zoo_run(exe: &Path, detect: bool, zoo_args: &[&str]) -> Result<Truth> {
    let mut cmd = Command::new(exe);
    if detect {
        cmd.args(["run", "--spin-detect", "--"]).arg(exe);
    }
    let out = cmd
        .arg("spin-zoo")
        .args(zoo_args)
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!("benchmark program failed: {:?}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).with_context(|| format!("unexpected program output {text:?}"))
}

struct EffectCase {
    program: &'static str,
    build: fn(threads: usize, units: u64) -> Vec<String>,
    units_detected: u64,
    units_baseline_4x: u64,
}

fn effect(exe: &Path, args: &SpinBenchArgs, vcpus: usize) -> Result<Vec<EffectRow>> {
    let cases = [
        EffectCase {
            program: "ring",
            build: |t, u| {
                vec![
                    "ring".into(),
                    "--threads".into(),
                    t.to_string(),
                    "--handoffs".into(),
                    u.to_string(),
                ]
            },
            units_detected: 5000,
            units_baseline_4x: 300,
        },
        EffectCase {
            program: "pipeline",
            build: |t, u| {
                vec![
                    "pipeline".into(),
                    "--stages".into(),
                    t.to_string(),
                    "--items".into(),
                    u.to_string(),
                ]
            },
            units_detected: 1000,
            units_baseline_4x: 100,
        },
    ];
    let mut rows = vec![];
    for case in &cases {
        rows.extend(effect_rows(
            case.program,
            vcpus,
            args.runs,
            |threads, factor, detect| {
                let units = if detect || factor == 1 {
                    case.units_detected
                } else {
                    case.units_baseline_4x
                };
                let a = (case.build)(threads, units);
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                zoo_run(exe, detect, &a)
            },
        )?);
    }
    if let Some(omp) = build_openmp()? {
        let prog = omp.to_str().expect("utf-8 temp path");
        let result = effect_rows(
            "openmp-active",
            vcpus,
            args.runs,
            |threads, factor, detect| {
                let regions = if detect || factor == 1 { "2000" } else { "100" };
                omp_run(exe, detect, prog, threads, regions)
            },
        );
        let _ = std::fs::remove_dir_all(omp.parent().expect("in a temp dir"));
        rows.extend(result?);
    }
    Ok(rows)
}

/// One program at 1x and 4x: `run(threads, factor, detect)` runs it once
/// without and once with detection per repetition, alternating; medians per unit.
fn effect_rows(
    program: &str,
    vcpus: usize,
    runs: usize,
    mut run: impl FnMut(usize, usize, bool) -> Result<Truth>,
) -> Result<Vec<EffectRow>> {
    let mut rows: Vec<EffectRow> = vec![];
    for factor in [1usize, 4] {
        let threads = (vcpus * factor).max(2);
        let (mut base, mut det) = (vec![], vec![]);
        for _ in 0..runs {
            stopped()?;
            for (detect, times) in [(false, &mut base), (true, &mut det)] {
                let t = run(threads, factor, detect)?;
                times.push(t.elapsed_s * 1e6 / t.units as f64);
            }
        }
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

fn omp_run(exe: &Path, detect: bool, prog: &str, threads: usize, regions: &str) -> Result<Truth> {
    let mut cmd = Command::new(exe);
    if detect {
        cmd.args(["run", "--spin-detect", "--", prog]);
    } else {
        cmd = Command::new(prog);
    }
    let out = cmd
        .arg(regions)
        .env("OMP_NUM_THREADS", threads.to_string())
        .env("OMP_WAIT_POLICY", "active")
        .env("OMP_PROC_BIND", "false")
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!("the OpenMP program failed: {:?}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).with_context(|| format!("unexpected OpenMP output {text:?}"))
}

/// An lu-style OpenMP kernel: many short parallel loops, each ending in a
/// barrier that libgomp busy-waits on under OMP_WAIT_POLICY=active.
const OPENMP_SOURCE: &str = r#"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int regions = argc > 1 ? atoi(argv[1]) : 1000;
    enum { N = 4096 };
    static double a[N], b[N];
    for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }
    double start = now();
    for (int r = 0; r < regions; r++) {
        #pragma omp parallel for schedule(static)
        for (int i = 1; i < N - 1; i++) {
            double x = a[i];
            for (int k = 0; k < 8; k++) x = 0.5 * x + 0.25 * (a[i - 1] + a[i + 1]);
            b[i] = x;
        }
        #pragma omp parallel for schedule(static)
        for (int i = 1; i < N - 1; i++) a[i] = b[i];
    }
    printf("{\"program\":\"openmp\",\"elapsed_s\":%f,\"units\":%d,\"checksum\":%f}\n", now() - start, regions, a[N / 2]);
    return 0;
}
"#;

/// Compiles the OpenMP program; None (with a note) without a suitable compiler.
fn build_openmp() -> Result<Option<PathBuf>> {
    let dir = std::env::temp_dir().join(format!("vsched-bench-omp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let src = dir.join("omp.c");
    std::fs::write(&src, OPENMP_SOURCE)?;
    let bin = dir.join("omp");
    let ok = Command::new("cc")
        .args(["-O2", "-fopenmp", "-o"])
        .arg(&bin)
        .arg(&src)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("vsched bench: note: no C compiler with OpenMP (apt-get install gcc); OpenMP case skipped");
        return Ok(None);
    }
    Ok(Some(bin))
}

/// Median (NaN when empty); sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn print_tables(b: &SpinBench) {
    println!("vsched bench spin ({} vCPUs)", b.vcpus);
    if let Some(a) = &b.accuracy {
        println!("\nSENSITIVITY (waits of at least 1 ms)");
        println!(
            "  {:<20} {:>8} {:>8} {:>10} {:>14}",
            "lock", "waits", "found", "rate", "median delay"
        );
        for l in &a.locks {
            println!(
                "  {:<20} {:>8} {:>8} {:>9.2}% {:>11.0} us",
                l.lock,
                l.episodes,
                l.detected,
                100.0 * l.detected as f64 / l.episodes.max(1) as f64,
                l.median_detection_us
            );
        }
        println!("\nSPECIFICITY AND SLOWDOWN (compute kernels on every vCPU)");
        println!(
            "  {:<16} {:>9} {:>6} {:>12} {:>10} {:>10} {:>9}",
            "kernel", "windows", "false", "specificity", "alone", "detected", "slowdown"
        );
        for k in &a.kernels {
            println!(
                "  {:<16} {:>9} {:>6} {:>11.3}% {:>9.3}s {:>9.3}s {:>8.2}%",
                k.kernel,
                k.windows,
                k.false_positives,
                100.0 * (1.0 - k.false_positives as f64 / k.windows.max(1) as f64),
                k.baseline_s,
                k.detected_s,
                100.0 * k.slowdown
            );
        }
        println!(
            "\n  sensitivity {:.2}% (goal >= 99.5%)   specificity {:.3}% (goal >= 99.5%)   median slowdown {:.2}% (goal <= 1%)",
            100.0 * a.sensitivity,
            100.0 * a.specificity,
            100.0 * a.median_slowdown
        );
    }
    if !b.effect.is_empty() {
        println!("\nEFFECT (median time per hand-off / item / region)");
        println!(
            "  {:<15} {:>7} {:>5} {:>13} {:>13} {:>9} {:>9}",
            "program", "threads", "x", "without", "with", "speedup", "vs 1x"
        );
        for r in &b.effect {
            println!(
                "  {:<15} {:>7} {:>5} {:>10.1} us {:>10.1} us {:>8.1}x {:>8.2}x",
                r.program,
                r.threads,
                r.oversubscription,
                r.baseline_us,
                r.detected_us,
                r.speedup,
                r.vs_1x
            );
        }
        println!("  goals at 4x: speedup >= 20x, within 5x of the 1x time");
    }
}
