//! The OpenMP case of the effect part: `c/openmp_wait.c`, whose barriers
//! libgomp busy-waits on under OMP_WAIT_POLICY=active. It needs a C
//! compiler with OpenMP; without one the case is skipped, not failed.

use super::{run_json, under_detector, Timed};
use crate::compare::Variant;
use crate::cprogram::{CProgram, CSource};
use crate::BenchError;
use std::ffi::OsString;
use std::path::Path;

pub(crate) const SOURCE: CSource = CSource {
    name: "omp",
    what: "the OpenMP program",
    text: include_str!("../../c/openmp_wait.c"),
    flags: &["-fopenmp"],
};

pub(super) struct OpenMp(CProgram);

impl OpenMp {
    /// The compiled program, or why the case is skipped.
    pub(super) fn build() -> Result<OpenMp, String> {
        CProgram::compile(&SOURCE, "omp").map(OpenMp).map_err(|_| {
            "no C compiler with OpenMP (apt-get install gcc); OpenMP case skipped".to_string()
        })
    }

    /// One run of `regions` parallel regions on `threads` threads.
    pub(super) fn run(
        &self,
        vsched: &Path,
        variant: Variant,
        threads: usize,
        regions: u64,
    ) -> Result<Timed, BenchError> {
        let mut cmd = under_detector(
            vsched,
            variant,
            self.0.path(),
            &[OsString::from(regions.to_string())],
        );
        cmd.env("OMP_NUM_THREADS", threads.to_string())
            .env("OMP_WAIT_POLICY", "active")
            .env("OMP_PROC_BIND", "false");
        run_json(cmd, "the OpenMP program")
    }
}
