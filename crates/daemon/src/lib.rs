//! vsched's always-on service, as a library: what `vsched daemon` keeps
//! and serves while the probers run. The binary runs the probers' loop
//! (vsched-probe's `watch`) and hands each report here.
//!
//! - `metrics`: the vCPU model as Prometheus metrics (names, units and
//!   help text declared once, as data), updated from each probe report;
//! - `serve`: the loopback HTTP endpoint that answers `GET /metrics`;
//! - `status`: the root-only Unix socket `vsched status` reads;
//! - `history`: the last minutes of the model, for `vsched status --plot`;
//! - `rwc` and `cpuset`: user-space RWC, the configured cgroups' cpusets
//!   kept off hidden vCPUs and put back as they were;
//! - `consolidate`: Gleaner's consolidation of those cgroups, their
//!   cpusets narrowed to the fewest vCPUs their threads need;
//! - `watchdog`: the process that puts them back if the daemon dies;
//! - `own_cost`: the daemon's own CPU and memory, for its metrics;
//! - `state`: the running daemon, each report handed to the metrics, RWC
//!   and the scheduler (`--sched`, vsched-sched's session), and the status
//!   schema `vsched status` reads.

pub mod consolidate;
pub mod cpuset;
pub mod history;
pub mod metrics;
pub mod own_cost;
pub mod rwc;
pub mod serve;
pub mod state;
pub mod status;
pub mod watchdog;

/// An error and its causes on one line ("a: b: c"), for messages the
/// daemon prints where no anyhow context is at hand (a drop).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub use metrics::Metrics;
pub use serve::{serve, ServeError};
