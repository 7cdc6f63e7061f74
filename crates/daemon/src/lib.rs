//! vsched's always-on service, as a library: what `vsched daemon` keeps
//! and serves while the probers run. The binary runs the probers' loop
//! (vsched-probe's `watch`) and hands each report here.
//!
//! - `metrics`: the vCPU model as Prometheus metrics (names, units and
//!   help text declared once, as data), updated from each probe report;
//! - `serve`: the loopback HTTP endpoint that answers `GET /metrics`.
//!
//! First slice of issue 17: metrics only. User-space RWC, `vsched status`,
//! packaging and plots are not built yet (docs/daemon.md).

pub mod metrics;
pub mod serve;

pub use metrics::Metrics;
pub use serve::{serve, ServeError};
