//! vsched's benchmarks, as a library: what `vsched bench spin`, `sync`,
//! `sched`, `soak` and `real` run, measure and conclude. The `vsched`
//! binary only parses their options and renders the reports these
//! functions return.
//!
//! - `spin`: the spin detector's accuracy (sensitivity over timed waits,
//!   specificity over decision windows of compute code, slowdown) and its
//!   effect (spin ring, pipeline, OpenMP busy waits at 1x and 4x, without
//!   and with `vsched run --spin-detect`).
//! - `sync`: pthread micro-benchmarks under glibc and under `vsched exec`,
//!   sized by calibration, with the project's goals.
//! - `sched`: the kernel's default scheduler against `vsched sched` (its
//!   ablations, an oracle placement, a FIFO reference) in lab guests,
//!   scenario by scenario.
//! - `soak`: lab guests loading and unloading a scheduler around a mixed
//!   workload, counting guest kernel panics per variant (the control, an
//!   independent sched_ext scheduler, vsched and its ablations).
//! - `real`: unmodified programs (xz, zstd, pigz, pbzip2, sqlite3,
//!   memcached, OpenMP, a mutex program) at 1x and 4x, glibc against
//!   `vsched exec`, in alternating pairs.
//! - `compare`: alternating baseline and vsched runs (the machine's speed
//!   drifts, so only alternating pairs compare fairly).
//! - `cprogram`: the C programs (in `c/` beside this crate), compiled at
//!   run time into a temporary directory.
//! - `zoo`: every use of the spin zoo (its programs, names and ground
//!   truth) goes through this one module.
//!
//! The benchmarks run programs through the `vsched` binary (`exec`, `run
//! --spin-detect`) and the `vsched-zoo` executable beside it, named by the caller in a `Harness`. Medians
//! come from vsched-model's `stats`.

pub mod compare;
pub mod cprogram;
mod error;
mod harness;
pub mod real;
pub mod sched;
pub mod soak;
pub mod spin;
pub mod sync;
pub mod zoo;

pub use error::BenchError;
pub use harness::{Harness, Interrupt};

/// Tests: a check that cannot run here says so on stderr and in the file
/// scripts/test.sh names in `VSCHED_SKIP_LOG` (listed at the suite's end).
#[cfg(test)]
pub(crate) fn skip(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os("VSCHED_SKIP_LOG") {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{test}: {why}"));
    }
}
