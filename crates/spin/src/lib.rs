//! Busy-waiting detection without hardware counters.
//!
//! Software cpu-clock samples (instruction pointer and registers of a running
//! thread, see [`perf`]) are classified by [`detector`]; [`engine`] follows a
//! whole process and, optionally, deschedules threads caught spinning so the
//! threads they wait for can run. [`watchdog`] guarantees that a demoted
//! thread gets its scheduling policy back even if vsched is killed. [`replay`]
//! tells, from a demoted spinner's last sample, when its wait is over.

pub mod bpf;
pub mod code;
pub mod detector;
pub mod engine;
pub mod freeze;
pub mod perf;
pub mod replay;
pub mod sample;
pub mod sched;
pub mod threads;
pub mod watchdog;

pub use detector::{DetectorParams, ThreadDetector, Transition};
pub use engine::{Action, Config, Engine, Report, Stats};
pub use sample::Sample;
pub mod zoo;
