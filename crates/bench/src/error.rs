//! What can go wrong in a benchmark run.

use std::io;
use std::process::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A plot could not be drawn or written.
    #[error("cannot write the plot {0}")]
    Plot(String),
    /// The caller's interrupt flag was set (Ctrl-C, SIGTERM).
    #[error("interrupted")]
    Interrupted,
    #[error("cannot start {what}")]
    Start {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// Waiting for a program or reading what it printed failed.
    #[error("cannot talk to {what}")]
    Pipe {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The program ran but exited with a failure.
    #[error("{what} failed ({status}){detail}")]
    Failed {
        what: &'static str,
        status: ExitStatus,
        /// ": " and what it printed, or empty.
        detail: String,
    },
    #[error("unexpected output from {what}: {output:?}")]
    Output {
        what: &'static str,
        output: String,
        #[source]
        source: serde_json::Error,
    },
    /// The spin detector could not sample the program it should observe.
    #[error(transparent)]
    ZooNotBuilt(#[from] vsched_zoo::exe::NotBuilt),
    #[error("cannot sample the zoo")]
    Sample(#[source] vsched_spin::AttachError),
    #[error("no C compiler (cc) found; install one: apt-get install gcc")]
    NoCompiler,
    #[error("cannot run cc")]
    Compiler(#[source] io::Error),
    #[error("cc could not compile {what}:\n{stderr}")]
    Compile { what: &'static str, stderr: String },
    #[error("cannot write {what}")]
    Write {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "the sync library is loaded in the baseline run (is LD_PRELOAD set in this shell?); \
         unset LD_PRELOAD and run again"
    )]
    LoadedInBaseline,
    #[error(
        "the program ran under `vsched exec` but the sync library was not loaded \
         (vsched_sync_version not found); build it with `cargo build --release` and \
         run target/release/vsched"
    )]
    NotLoaded,
    /// The lab could not run a scenario's guest.
    #[error("the lab could not run the guest")]
    Lab(#[source] vsched_lab::LabError),
    /// The guest ran but a scenario's results are missing.
    #[error("{0}")]
    Scenario(String),
    /// A run of one sync case failed; which one.
    #[error("{case} with {threads} threads, {ops} ops")]
    Case {
        case: &'static str,
        threads: usize,
        ops: u64,
        #[source]
        source: Box<BenchError>,
    },
}
