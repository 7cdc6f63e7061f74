//! `vsched bench spin`: the spin detector's accuracy (the paper's Tables 2
//! and 3: sensitivity over spin episodes, specificity over decision windows
//! of compute code, slowdown of compute code) and its effect (spin token
//! ring, pipeline, OpenMP busy waits at 1x and 4x, without and with
//! detection, side by side).

pub mod accuracy;
pub mod effect;
pub(crate) mod openmp;

use crate::compare::Variant;
use crate::{BenchError, Harness};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

pub use accuracy::{Accuracy, KernelRow, LockRow};
pub use effect::EffectRow;

/// What to run.
#[derive(Debug, Clone)]
pub struct SpinBenchConfig {
    pub accuracy: bool,
    pub effect: bool,
    /// Repetitions of each timed measurement (medians are reported).
    pub runs: usize,
    /// Timed waits per lock in the accuracy part.
    pub episodes: usize,
}

/// The report (`--json`: schema "vsched.bench-spin" version 1).
#[derive(Serialize, Default, Debug)]
pub struct SpinBench {
    pub schema: &'static str,
    pub version: u32,
    pub vcpus: usize,
    pub accuracy: Option<Accuracy>,
    pub effect: Vec<EffectRow>,
    /// Cases left out and why (e.g. no OpenMP compiler); not in the JSON.
    #[serde(skip)]
    pub skipped: Vec<String>,
}

/// Runs the parts `config` asks for.
pub fn run(h: &Harness, config: &SpinBenchConfig) -> Result<SpinBench, BenchError> {
    let mut out = SpinBench {
        schema: "vsched.bench-spin",
        version: 1,
        vcpus: h.vcpus,
        ..Default::default()
    };
    if config.accuracy {
        out.accuracy = Some(accuracy::measure(h, config)?);
    }
    if config.effect {
        out.effect = effect::measure(h, config.runs, &mut out.skipped)?;
    }
    Ok(out)
}

/// `program lead...` as it is, or under `vsched run --spin-detect --`.
fn under_detector(vsched: &Path, variant: Variant, program: &Path, lead: &[OsString]) -> Command {
    let mut cmd = match variant {
        Variant::Baseline => Command::new(program),
        Variant::Vsched => {
            let mut c = Command::new(vsched);
            c.args(["run", "--spin-detect", "--"]).arg(program);
            c
        }
    };
    cmd.args(lead);
    cmd
}

/// Runs the zoo with `args`, alone or under the detector, to its end.
fn run_zoo<T: serde::de::DeserializeOwned>(
    h: &Harness,
    variant: Variant,
    args: &[String],
) -> Result<T, BenchError> {
    let (exe, mut lead) = crate::zoo::program(&h.vsched)?;
    lead.extend(args.iter().map(OsString::from));
    run_json(
        under_detector(&h.vsched, variant, &exe, &lead),
        "the benchmark program",
    )
}

/// Runs `cmd` to its end (its stderr discarded) and parses the JSON it
/// printed; `what` names it in errors.
fn run_json<T: serde::de::DeserializeOwned>(
    mut cmd: Command,
    what: &'static str,
) -> Result<T, BenchError> {
    let out = cmd
        .stderr(Stdio::null())
        .output()
        .map_err(|source| BenchError::Start { what, source })?;
    if !out.status.success() {
        return Err(BenchError::Failed {
            what,
            status: out.status,
            detail: String::new(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|source| BenchError::Output {
        what,
        output: text.into_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_wraps_the_program_in_vsched_run() {
        let vsched = Path::new("/bin/vsched");
        let lead = [OsString::from("ring")];
        let plain = under_detector(vsched, Variant::Baseline, Path::new("/bin/p"), &lead);
        assert_eq!(plain.get_program(), "/bin/p");
        assert_eq!(plain.get_args().collect::<Vec<_>>(), ["ring"]);
        let detected = under_detector(vsched, Variant::Vsched, Path::new("/bin/p"), &lead);
        assert_eq!(detected.get_program(), "/bin/vsched");
        assert_eq!(
            detected.get_args().collect::<Vec<_>>(),
            ["run", "--spin-detect", "--", "/bin/p", "ring"]
        );
    }

    #[test]
    fn a_failing_program_is_an_error_with_its_status() {
        let r: Result<serde_json::Value, _> = run_json(Command::new("false"), "the test program");
        assert!(matches!(
            r,
            Err(BenchError::Failed {
                what: "the test program",
                ..
            })
        ));
        let mut echo = Command::new("echo");
        echo.arg("{\"a\":1}");
        let v: serde_json::Value = run_json(echo, "echo").unwrap();
        assert_eq!(v["a"], 1);
    }
}

/// What a benchmark program reports: how long its work took, and how many
/// units of work that was.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub elapsed_s: f64,
    pub units: u64,
}

impl Timed {
    pub(super) fn us_per_unit(self) -> f64 {
        self.elapsed_s * 1e6 / self.units as f64
    }
}
