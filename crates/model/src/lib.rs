//! The vCPU model shared by every part of vsched: what the probers measure
//! and how it is interpreted. Pure functions and plain data, no I/O, so that
//! policies can be tested and replayed without a VM.

pub mod capacity;
pub mod cpulist;
pub mod ema;
pub mod report;
pub mod rwc;
pub mod stats;
pub mod timeline;
pub mod topology;

pub use capacity::{VcpuEstimate, VcpuSample, CAPACITY_SCALE};
pub use report::{ProbeReport, SCHEMA_NAME, SCHEMA_VERSION};
pub use timeline::{EpisodeFilter, EpisodeStats, Gap, Phase, Timeline};
pub use topology::{PairProbe, Relation, Topology, TopologyParams};
