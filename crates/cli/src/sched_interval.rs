//! `vsched sched --interval-json FILE`: the counters of each `--interval`
//! as JSON Lines, for scripts that follow a long run (the soak benchmark
//! reads the last line while the scheduler is loaded) without parsing the
//! human statistics line.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use vsched_sched::Stats;

/// The line's schema name: bump the version when a field changes meaning.
pub const SCHEMA: &str = "vsched.sched-interval/v1";

/// One line: the counts over the interval that ended `elapsed_s` after
/// vsched started (not totals: a line alone says the interval's rates).
#[derive(serde::Serialize)]
struct IntervalLine<'a> {
    schema: &'static str,
    elapsed_s: f64,
    interval_s: f64,
    model_updates: u64,
    counters: &'a serde_json::Map<String, serde_json::Value>,
}

/// The open file, truncated at start (a line of an earlier run must not
/// read as this one's) and kept after exit, as `--stats-json` is.
pub struct IntervalLog {
    path: PathBuf,
    out: BufWriter<File>,
}

impl IntervalLog {
    pub fn create(path: &Path) -> Result<IntervalLog> {
        let file = File::create(path)
            .with_context(|| format!("creating {} (--interval-json)", path.display()))?;
        Ok(IntervalLog {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// Appends one interval's line and flushes it, so that a reader sees
    /// whole lines only and sees them at once.
    pub fn write(
        &mut self,
        delta: &Stats,
        elapsed: Duration,
        interval: Duration,
        model_updates: u64,
    ) -> Result<()> {
        let line = IntervalLine {
            schema: SCHEMA,
            elapsed_s: elapsed.as_secs_f64(),
            interval_s: interval.as_secs_f64(),
            model_updates,
            counters: &delta.to_json_map(),
        };
        serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush())
            .with_context(|| format!("writing {} (--interval-json)", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_is_one_json_line_of_its_own_counts() {
        let path =
            std::env::temp_dir().join(format!("vsched-interval-{}.jsonl", std::process::id()));
        std::fs::write(&path, "a line of an earlier run\n").unwrap();
        let mut log = IntervalLog::create(&path).unwrap();
        let earlier = Stats::from_totals(&[5, 1]);
        let now = Stats::from_totals(&[7, 4]);
        // The counter whose total is the first of `from_totals`.
        let first = vsched_sched::stats::STATS
            .iter()
            .find(|d| d.index == 0)
            .unwrap()
            .name;
        log.write(
            &now.since(&earlier),
            Duration::from_secs(2),
            Duration::from_secs(1),
            3,
        )
        .unwrap();
        log.write(&now, Duration::from_secs(3), Duration::from_secs(1), 4)
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["schema"], SCHEMA);
        assert_eq!(lines[0]["elapsed_s"], 2.0);
        assert_eq!(lines[0]["model_updates"], 3);
        assert_eq!(lines[0]["counters"][first], 2);
        assert_eq!(lines[1]["counters"][first], 7);
    }

    #[test]
    fn an_unwritable_path_is_an_error_that_names_the_flag() {
        let err = IntervalLog::create(Path::new("/nonexistent/dir/i.jsonl"))
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("--interval-json"), "{err:#}");
    }
}
