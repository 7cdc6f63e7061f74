//! The summary of one detection run, as `vsched spin-detect` and
//! `vsched run --spin-detect` print it in JSON (`"schema":
//! "vsched.spin-detect"`, docs/spin.md, "Output"): the engine's counters
//! and what the run was.

use crate::config::Action;
use crate::stats::Stats;
use serde::Serialize;

/// The summary's schema name.
pub const SCHEMA: &str = "vsched.spin-detect";
/// The summary's schema version: raised when a field changes meaning or goes.
pub const VERSION: u32 = 1;

/// Why detection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndedBy {
    /// The program exited.
    Exited,
    /// vsched was told to stop (Ctrl-C, SIGTERM).
    Signal,
    /// The requested duration ran out.
    Duration,
}

impl EndedBy {
    /// The word the summary uses (also in its JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            EndedBy::Exited => "exited",
            EndedBy::Signal => "signal",
            EndedBy::Duration => "duration",
        }
    }
}

impl std::fmt::Display for EndedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run's summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub schema: &'static str,
    pub version: u32,
    pub pid: i32,
    pub action: Action,
    pub elapsed_s: f64,
    pub ended_by: EndedBy,
    /// CPU time the detector itself used (user + system), s.
    pub detector_cpu_s: f64,
    #[serde(flatten)]
    pub stats: Stats,
}

impl Summary {
    pub fn new(
        pid: i32,
        action: Action,
        elapsed_s: f64,
        ended_by: EndedBy,
        detector_cpu_s: f64,
        stats: Stats,
    ) -> Summary {
        Summary {
            schema: SCHEMA,
            version: VERSION,
            pid,
            action,
            elapsed_s,
            ended_by,
            detector_cpu_s,
            stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_names_the_schema_and_flattens_the_counters() {
        let stats = Stats {
            samples: 774,
            stops: 3,
            ..Stats::default()
        };
        let s = Summary::new(17696, Action::Deschedule, 0.4, EndedBy::Exited, 0.25, stats);
        let json: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(json["schema"], "vsched.spin-detect");
        assert_eq!(json["version"], 1);
        assert_eq!(json["action"], "deschedule");
        assert_eq!(json["ended_by"], "exited");
        // The counters sit at the top level, beside the run's fields.
        assert_eq!(json["samples"], 774);
        assert_eq!(json["stops"], 3);
        assert!(json.get("stats").is_none());
    }

    #[test]
    fn every_end_is_spelt_the_same_in_text_and_json() {
        for end in [EndedBy::Exited, EndedBy::Signal, EndedBy::Duration] {
            let json = serde_json::to_value(end).unwrap();
            assert_eq!(json, end.as_str());
            assert_eq!(end.to_string(), end.as_str());
        }
    }
}
