//! What a zoo program reports about itself: the ground truth tests and
//! benchmarks score the detector against.

use serde::{Deserialize, Serialize};

/// A wait whose start and end the program itself recorded.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Episode {
    pub tid: i32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What a zoo program reports about itself (ground truth for scoring).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Truth {
    pub program: String,
    /// Threads that only computed (every sample of theirs is non-spinning).
    pub compute_tids: Vec<i32>,
    /// Spin episodes of the waiting threads.
    pub episodes: Vec<Episode>,
    pub elapsed_s: f64,
    /// Units of work done (passes, hand-offs, items).
    pub units: u64,
    /// SIGURG signals the program received: exactly those sent to it, since
    /// entry traps stop threads with SIGURG and must never let one through.
    pub sigurg: u64,
}
