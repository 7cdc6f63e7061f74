//! vsched's always-on service, as a library: what `vsched daemon` keeps
//! and serves while the probers run. The binary runs the probers' loop
//! (vsched-probe's `watch`) and hands each report here.
//!
//! - `metrics`: the vCPU model as Prometheus metrics (names, units and
//!   help text declared once, as data), updated from each probe report;
//! - `serve`: the loopback HTTP endpoint that answers `GET /metrics`;
//! - `status`: the root-only Unix socket `vsched status` reads.
//!
//! First part of issue 17: metrics and status. User-space RWC, packaging
//! and plots are not built yet (docs/daemon.md).

pub mod metrics;
pub mod serve;
pub mod status;

pub use metrics::Metrics;
pub use serve::{serve, ServeError};
