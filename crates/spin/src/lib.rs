//! Busy-waiting detection without hardware counters.
//!
//! Software cpu-clock samples (instruction pointer and registers of a running
//! thread, see [`perf`]) are classified by [`detector`]; [`engine`] follows a
//! whole process and, optionally, holds threads caught spinning so the
//! threads they wait for can run. [`config`] says what it does and holds the
//! defaults; [`stats`] and [`summary`] are what it reports. [`watchdog`]
//! guarantees that a demoted thread gets its scheduling policy back even if
//! vsched is killed. [`replay`] tells, from a spinner's last sample, when its
//! wait is over. [`channel`] hands spinners to vsched's scheduler when it
//! runs, which then deschedules them itself.

pub mod bpf;
pub mod channel;
pub mod code;
pub mod config;
pub mod detector;
pub mod engine;
pub mod freeze;
pub mod perf;
pub mod replay;
pub mod sample;
pub mod sched;
pub mod stats;
pub mod summary;
pub mod threads;
pub mod watchdog;

pub use config::{Action, Config, ConfigError};
pub use detector::{DetectorParams, ThreadDetector, Transition};
pub use engine::{AttachError, Engine};
pub use sample::Sample;
pub use stats::{Report, Stats};
