//! The sync benchmark program (`c/syncbench.c`): one case per run, directly
//! (glibc) or under `vsched exec`; it prints one JSON line per run.

use super::Case;
use crate::compare::Variant;
use crate::cprogram::{CProgram, CSource};
use crate::{BenchError, Harness};
use serde::{Deserialize, Serialize};
use std::process::{Command, Output, Stdio};

pub(crate) const SOURCE: CSource = CSource {
    name: "syncbench",
    what: "the benchmark program",
    text: include_str!("../../c/syncbench.c"),
    flags: &["-pthread"],
};

/// What one run of the program printed.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq)]
pub struct Sample {
    pub ops: u64,
    pub elapsed_s: f64,
    pub ns_per_op: f64,
    pub voluntary_ctxt_switches: u64,
    pub involuntary_ctxt_switches: u64,
    pub migrations: u64,
    /// 1 if the sync library was loaded in the program.
    pub loaded: u8,
}

/// The compiled program.
pub struct SyncProgram(CProgram);

impl SyncProgram {
    /// Compiles the program with `cc -O2 -pthread` into a temporary directory.
    pub fn build() -> Result<SyncProgram, BenchError> {
        CProgram::compile(&SOURCE, "sync").map(SyncProgram)
    }

    /// One run of `case` on `threads` threads for `ops` operations.
    pub fn run(
        &self,
        h: &Harness,
        variant: Variant,
        case: Case,
        threads: usize,
        ops: u64,
    ) -> Result<Sample, BenchError> {
        h.interrupt.check()?;
        let mut cmd = match variant {
            Variant::Baseline => Command::new(self.0.path()),
            Variant::Vsched => {
                let mut c = Command::new(&h.vsched);
                c.args(["exec", "--"]).arg(self.0.path());
                c
            }
        };
        let out = cmd
            .args([case.name(), &threads.to_string(), &ops.to_string()])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| BenchError::Start {
                what: SOURCE.what,
                source,
            })?;
        h.interrupt.check()?;
        let sample = parse_sample(&out).map_err(|e| BenchError::Case {
            case: case.name(),
            threads,
            ops,
            source: Box::new(e),
        })?;
        check_loaded(variant, &sample)?;
        Ok(sample)
    }
}

/// The run's JSON line (the last line of its output), if it succeeded.
pub fn parse_sample(out: &Output) -> Result<Sample, BenchError> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::Failed {
            what: SOURCE.what,
            status: out.status,
            detail: format!(
                ": {}{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                stdout.trim()
            ),
        });
    }
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|source| BenchError::Output {
        what: SOURCE.what,
        output: stdout.to_string(),
        source,
    })
}

/// A comparison is only meaningful if the library was (not) preloaded as intended.
pub fn check_loaded(variant: Variant, s: &Sample) -> Result<(), BenchError> {
    match (variant, s.loaded != 0) {
        (Variant::Baseline, true) => Err(BenchError::LoadedInBaseline),
        (Variant::Vsched, false) => Err(BenchError::NotLoaded),
        _ => Ok(()),
    }
}

#[cfg(test)]
pub(super) fn fake_sample(ops: u64, elapsed_s: f64) -> Sample {
    Sample {
        ops,
        elapsed_s,
        ns_per_op: elapsed_s * 1e9 / ops as f64,
        voluntary_ctxt_switches: 0,
        involuntary_ctxt_switches: 0,
        migrations: 0,
        loaded: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_flag_must_match_the_variant() {
        let mut s = fake_sample(10, 0.1);
        assert!(check_loaded(Variant::Baseline, &s).is_ok());
        assert!(matches!(
            check_loaded(Variant::Vsched, &s),
            Err(BenchError::NotLoaded)
        ));
        s.loaded = 1;
        assert!(check_loaded(Variant::Vsched, &s).is_ok());
        assert!(matches!(
            check_loaded(Variant::Baseline, &s),
            Err(BenchError::LoadedInBaseline)
        ));
    }

    #[test]
    fn every_case_runs_and_reports_json() {
        let program = match SyncProgram::build() {
            Ok(p) => p,
            Err(e) => {
                crate::skip("every_case_runs_and_reports_json", &e.to_string());
                return;
            }
        };
        for case in Case::ALL {
            let out = Command::new(program.0.path())
                .args([case.name(), "3", "40"])
                .output()
                .unwrap();
            let s = parse_sample(&out).unwrap();
            assert_eq!((s.ops, s.loaded), (40, 0), "{}", case.name());
        }
    }

    #[test]
    fn a_failed_run_says_what_it_printed() {
        let out = Command::new("sh")
            .args(["-c", "echo oops >&2; exit 3"])
            .output()
            .unwrap();
        let e = parse_sample(&out).unwrap_err().to_string();
        assert!(
            e.contains("the benchmark program failed") && e.contains("oops"),
            "{e}"
        );
    }
}
