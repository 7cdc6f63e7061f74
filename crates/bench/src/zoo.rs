//! The spin zoo as the benchmarks see it: its test programs (spin locks,
//! compute kernels, ring, pipeline), their names, how they are started and
//! the ground truth they print. The zoo is the dev-only crate vsched-zoo,
//! run as the `vsched-zoo` executable found next to `vsched`; every use of
//! it in this crate is here.

use crate::BenchError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a zoo program reports about itself (ground truth for scoring), and
/// one timed wait of its waiting threads.
pub use vsched_zoo::{Episode, Truth};

/// The zoo's waiting implementations (spin locks, flag loops, ...).
pub fn lock_names() -> &'static [&'static str] {
    vsched_zoo::locks::NAMES
}

/// The zoo's compute kernels (code that must never read as spinning).
pub fn kernel_names() -> &'static [&'static str] {
    vsched_zoo::compute::NAMES
}

/// The program and leading arguments that start the zoo: the `vsched-zoo`
/// executable beside `vsched` (an error says how to build it if missing).
pub fn program(vsched: &Path) -> Result<(PathBuf, Vec<OsString>), BenchError> {
    Ok((vsched_zoo::exe::beside(vsched)?, Vec::new()))
}

/// A command that runs the zoo with `args`.
pub fn command(vsched: &Path, args: &[String]) -> Result<Command, BenchError> {
    let (exe, lead) = program(vsched)?;
    let mut cmd = Command::new(exe);
    cmd.args(lead).args(args);
    Ok(cmd)
}

/// Timed waits of one waiting implementation.
pub fn spin_args(lock: &str, episodes: usize) -> Vec<String> {
    strings(&["spin", "--lock", lock, "--episodes", &episodes.to_string()])
}

/// A compute kernel on `threads` threads for `passes` passes.
pub fn compute_args(kernel: &str, threads: usize, passes: u64) -> Vec<String> {
    strings(&[
        "compute",
        "--kernel",
        kernel,
        "--threads",
        &threads.to_string(),
        "--passes",
        &passes.to_string(),
    ])
}

/// Spin token ring: `threads` threads, `handoffs` hand-offs.
pub fn ring_args(threads: usize, handoffs: u64) -> Vec<String> {
    strings(&[
        "ring",
        "--threads",
        &threads.to_string(),
        "--handoffs",
        &handoffs.to_string(),
    ])
}

/// Spinning pipeline: `stages` threads, `items` items.
pub fn pipeline_args(stages: usize, items: u64) -> Vec<String> {
    strings(&[
        "pipeline",
        "--stages",
        &stages.to_string(),
        "--items",
        &items.to_string(),
    ])
}

/// Asks the zoo to wait for a line on stdin before it starts, so that a
/// detector can attach first.
pub const WAIT_GO: &str = "--wait-go";

/// The zoo's report, from what it printed.
pub fn parse_truth(stdout: &str) -> Result<Truth, BenchError> {
    serde_json::from_str(stdout.trim()).map_err(|source| BenchError::Output {
        what: "the zoo program",
        output: stdout.to_string(),
        source,
    })
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_the_zoo_executable_beside_vsched() {
        let dir = std::env::temp_dir().join(format!("vsched-bench-zoo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vsched = dir.join("vsched");
        assert!(
            matches!(command(&vsched, &[]), Err(BenchError::ZooNotBuilt(_))),
            "no vsched-zoo there yet"
        );
        std::fs::write(dir.join(vsched_zoo::exe::EXECUTABLE), "").unwrap();
        let cmd = command(&vsched, &ring_args(8, 300)).unwrap();
        assert_eq!(cmd.get_program(), dir.join("vsched-zoo").as_os_str());
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["ring", "--threads", "8", "--handoffs", "300"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_truth_it_prints() {
        let t = parse_truth("{\"program\":\"ring\",\"elapsed_s\":0.5,\"units\":300}\n").unwrap();
        assert_eq!((t.program.as_str(), t.units), ("ring", 300));
        assert!(matches!(
            parse_truth("oops"),
            Err(BenchError::Output { .. })
        ));
    }

    #[test]
    fn names_every_lock_and_kernel() {
        assert!(!lock_names().is_empty());
        assert!(!kernel_names().is_empty());
    }
}
