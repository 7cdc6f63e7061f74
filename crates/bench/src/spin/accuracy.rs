//! The detector's accuracy: every zoo lock with timed waits (sensitivity:
//! share of waits of at least 1 ms that were detected), every compute
//! kernel on all vCPUs (specificity: share of decision windows not called
//! spinning), and each kernel alone and under `vsched run --spin-detect`
//! (slowdown, medians). The samples are recorded by an observing engine and
//! replayed through the detector afterwards, so scoring sees exactly what
//! the detector saw.

use super::run_zoo;
use crate::compare::{alternate, Variant};
use crate::zoo::{self, Truth};
use crate::{BenchError, Harness};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::Stdio;
use vsched_model::stats::median;
use vsched_spin::{Action, Config, DetectorParams, Engine, Sample, ThreadDetector};

/// Shortest wait that counts for sensitivity: 1 ms, the length the goal is
/// stated for (docs/benchmarks.md); shorter waits end within a few of the
/// detector's sampling periods.
const MIN_WAIT_NS: u64 = 1_000_000;
/// Compute runs last about this long: long enough that starting the
/// detector is not what gets measured.
const COMPUTE_RUN_S: f64 = 1.5;
/// Passes of the pilot run that sizes a compute run (and the fewest run).
const PILOT_PASSES: u64 = 200;
/// Longest wait for samples before the observer checks whether the program ended.
const OBSERVE_STEP_NS: u64 = 1_000_000;

#[derive(Serialize, Default, Debug)]
pub struct Accuracy {
    pub locks: Vec<LockRow>,
    pub kernels: Vec<KernelRow>,
    pub sensitivity: f64,
    pub specificity: f64,
    pub median_slowdown: f64,
}

#[derive(Serialize, Debug)]
pub struct LockRow {
    pub lock: String,
    pub episodes: usize,
    pub detected: usize,
    /// Median time from the start of a wait to its detection, µs.
    pub median_detection_us: f64,
}

impl LockRow {
    /// Share of the counted waits that were detected.
    pub fn detection_rate(&self) -> f64 {
        share(self.detected as u64, self.episodes as u64)
    }
}

#[derive(Serialize, Debug)]
pub struct KernelRow {
    pub kernel: String,
    pub windows: u64,
    pub false_positives: u64,
    pub baseline_s: f64,
    pub detected_s: f64,
    pub slowdown: f64,
}

impl KernelRow {
    /// Share of the full decision windows not called spinning.
    pub fn specificity(&self) -> f64 {
        1.0 - share(self.false_positives, self.windows)
    }
}

/// What the detector said after one sample of a thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub time_ns: u64,
    pub spinning: bool,
    /// The decision window was full: the verdict counts for specificity.
    pub window_full: bool,
}

pub(super) fn measure(
    h: &Harness,
    config: &super::SpinBenchConfig,
) -> Result<Accuracy, BenchError> {
    let mut acc = Accuracy::default();
    let (mut waits_total, mut waits_detected) = (0usize, 0usize);
    for lock in zoo::lock_names() {
        h.interrupt.check()?;
        let (truth, samples) = observed(h, &zoo::spin_args(lock, config.episodes))?;
        let mut score = score_waits(&truth, &replay(&samples));
        waits_total += score.counted;
        waits_detected += score.detected;
        acc.locks.push(LockRow {
            lock: lock.to_string(),
            episodes: score.counted,
            detected: score.detected,
            median_detection_us: median(&mut score.delays_us),
        });
    }
    acc.sensitivity = share(waits_detected as u64, waits_total as u64);

    let (mut windows_total, mut fp_total) = (0u64, 0u64);
    let threads = h.vcpus;
    for kernel in zoo::kernel_names() {
        h.interrupt.check()?;
        let pilot: Truth = run_zoo(
            h,
            Variant::Baseline,
            &zoo::compute_args(kernel, threads, PILOT_PASSES),
        )?;
        let args = zoo::compute_args(kernel, threads, passes_for(PILOT_PASSES, pilot.elapsed_s));
        let (truth, samples) = observed(h, &args)?;
        let (windows, fps) = count_windows(&truth.compute_tids, &replay(&samples));
        // Slowdown: the program alone vs under `vsched run --spin-detect`.
        let times = alternate(config.runs, h.interrupt, |variant| {
            run_zoo::<Truth>(h, variant, &args).map(|t| t.elapsed_s)
        })?;
        let (mut base, mut det) = (times.baseline, times.vsched);
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
    acc.specificity = 1.0 - share(fp_total, windows_total);
    let mut slowdowns: Vec<f64> = acc.kernels.iter().map(|k| k.slowdown).collect();
    acc.median_slowdown = median(&mut slowdowns);
    Ok(acc)
}

/// `part / whole`, 0 when nothing was counted.
fn share(part: u64, whole: u64) -> f64 {
    part as f64 / whole.max(1) as f64
}

/// Runs a zoo program under an observing engine; returns its truth and all samples.
fn observed(h: &Harness, zoo_args: &[String]) -> Result<(Truth, Vec<Sample>), BenchError> {
    let what = "the zoo program";
    let mut args = vec![zoo::WAIT_GO.to_string()];
    args.extend_from_slice(zoo_args);
    let mut child = zoo::command(&h.vsched, &args)?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|source| BenchError::Start { what, source })?;
    let cfg = Config {
        action: Action::Observe,
        record_samples: true,
        ..Default::default()
    };
    let pipe = |source| BenchError::Pipe { what, source };
    let observing = (|| {
        let mut engine =
            Engine::attach(child.id() as i32, cfg, None).map_err(BenchError::Sample)?;
        // The zoo waits for this line, so the engine sees it from its start.
        let go = child.stdin.take().expect("piped").write_all(b"go\n");
        go.map_err(pipe)?;
        while child.try_wait().map_err(pipe)?.is_none() {
            h.interrupt.check()?;
            // A step that finds no samples, or a thread gone, is not an error here.
            let _ = engine.step(OBSERVE_STEP_NS);
        }
        Ok(engine.finish())
    })();
    let report = match observing {
        Ok(report) => report,
        Err(e) => {
            // Leave no zoo program spinning behind.
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let mut text = String::new();
    let read = child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut text);
    read.map_err(pipe)?;
    Ok((zoo::parse_truth(&text)?, report.samples))
}

/// Replays the samples through the detector: per thread, in time order,
/// what it decided after each sample.
pub fn replay(samples: &[Sample]) -> HashMap<i32, Vec<Decision>> {
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
                    Decision {
                        time_ns: s.time_ns,
                        spinning: d.spinning(),
                        window_full: d.window_full(&params),
                    }
                })
                .collect();
            (tid, decisions)
        })
        .collect()
}

/// How the waits of one lock were detected.
#[derive(Debug, Default, PartialEq)]
pub struct WaitScore {
    /// Waits of at least MIN_WAIT_NS.
    pub counted: usize,
    pub detected: usize,
    /// From each detected wait's start to its first spinning verdict, µs.
    pub delays_us: Vec<f64>,
}

/// A wait counts as detected if its thread was called spinning during it.
pub fn score_waits(truth: &Truth, decisions: &HashMap<i32, Vec<Decision>>) -> WaitScore {
    let mut score = WaitScore::default();
    for e in truth
        .episodes
        .iter()
        .filter(|e| e.end_ns - e.start_ns >= MIN_WAIT_NS)
    {
        score.counted += 1;
        let hit = decisions.get(&e.tid).and_then(|d| {
            d.iter()
                .find(|d| d.time_ns >= e.start_ns && d.time_ns <= e.end_ns && d.spinning)
        });
        if let Some(d) = hit {
            score.detected += 1;
            score.delays_us.push((d.time_ns - e.start_ns) as f64 / 1e3);
        }
    }
    score
}

/// Full decision windows of the compute threads, and how many of them were
/// called spinning (false positives).
pub fn count_windows(compute_tids: &[i32], decisions: &HashMap<i32, Vec<Decision>>) -> (u64, u64) {
    let (mut windows, mut fps) = (0u64, 0u64);
    for tid in compute_tids {
        for d in decisions.get(tid).map(Vec::as_slice).unwrap_or(&[]) {
            if d.window_full {
                windows += 1;
                fps += u64::from(d.spinning);
            }
        }
    }
    (windows, fps)
}

/// Passes that take about COMPUTE_RUN_S, from a pilot of `pilot_passes`
/// that took `pilot_s`; never fewer than the pilot's.
pub fn passes_for(pilot_passes: u64, pilot_s: f64) -> u64 {
    // A pilot faster than 0.1 ms is timer noise: do not scale by it.
    let pilot_s = pilot_s.max(1e-4);
    ((pilot_passes as f64 * COMPUTE_RUN_S / pilot_s) as u64).max(pilot_passes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoo::Episode;

    fn decision(time_ns: u64, spinning: bool, window_full: bool) -> Decision {
        Decision {
            time_ns,
            spinning,
            window_full,
        }
    }

    #[test]
    fn a_wait_is_detected_by_a_spinning_verdict_inside_it() {
        let ms = 1_000_000;
        let truth = Truth {
            episodes: vec![
                Episode {
                    tid: 1,
                    start_ns: 0,
                    end_ns: 2 * ms,
                },
                Episode {
                    tid: 1,
                    start_ns: 10 * ms,
                    end_ns: 12 * ms,
                },
                // Too short to count.
                Episode {
                    tid: 1,
                    start_ns: 20 * ms,
                    end_ns: 20 * ms + 10,
                },
            ],
            ..Default::default()
        };
        let decisions = HashMap::from([(
            1,
            vec![
                decision(50_000, false, true),
                decision(150_000, true, true),
                decision(11 * ms, false, true),
            ],
        )]);
        let score = score_waits(&truth, &decisions);
        assert_eq!((score.counted, score.detected), (2, 1));
        assert_eq!(score.delays_us, [150.0]);
    }

    #[test]
    fn only_full_windows_of_compute_threads_count() {
        let decisions = HashMap::from([
            (
                1,
                vec![
                    decision(1, false, false),
                    decision(2, true, true),
                    decision(3, false, true),
                ],
            ),
            (2, vec![decision(1, true, true)]),
        ]);
        assert_eq!(count_windows(&[1], &decisions), (2, 1));
        assert_eq!(count_windows(&[1, 9], &decisions), (2, 1));
    }

    #[test]
    fn compute_runs_are_sized_from_the_pilot() {
        assert_eq!(passes_for(200, 0.1), 3000);
        // A slow machine still runs at least the pilot's passes.
        assert_eq!(passes_for(200, 10.0), 200);
        // A pilot below the timer's resolution does not explode the count.
        assert_eq!(passes_for(200, 0.0), 3_000_000);
    }

    #[test]
    fn shares_survive_empty_counts() {
        assert_eq!(share(0, 0), 0.0);
        assert_eq!(share(3, 4), 0.75);
        let lock = LockRow {
            lock: "flag".into(),
            episodes: 0,
            detected: 0,
            median_detection_us: f64::NAN,
        };
        assert_eq!(lock.detection_rate(), 0.0);
        let kernel = KernelRow {
            kernel: "stencil".into(),
            windows: 200,
            false_positives: 1,
            baseline_s: 1.0,
            detected_s: 1.0,
            slowdown: 0.0,
        };
        assert_eq!(kernel.specificity(), 0.995);
    }
}
