//! The VM lab: real Linux guests under QEMU whose vCPUs the host side
//! controls (pinning for stacking, cgroup bandwidth for capacity and
//! inactive periods, phases that change both), used as ground truth for the
//! probers and, later, the policies. A library so that tests and benchmarks
//! can drive it from Rust; `vsched lab` is its command-line face.

pub mod check;
pub mod debian_root;
pub mod disturb;
pub mod error;
pub mod freeze;
pub mod guest_panic;
pub mod host;
pub mod host_load;
pub mod initramfs;
pub mod kernel;
pub mod layout;
pub mod qemu;
pub mod qmp;
pub mod run;
pub mod truth;

pub use error::{LabError, LayoutError};
pub use layout::Layout;
pub use run::{run, Accel, LabOptions, RunResult};
