//! The BPF side's counters, declared once as data (stats_table.rs, from
//! which build.rs also writes the C enum): their index in the per-CPU
//! `stats` map, a name for JSON and a line of explanation for people.

use crate::bpf_intf as s;
use crate::stats_table::STAT_TABLE;
use serde::Serialize;

/// One counter: where it lives and what it means.
#[derive(Debug, Clone, Copy)]
pub struct StatDef {
    pub index: u32,
    pub name: &'static str,
    pub help: &'static str,
}

/// Every counter, in the order they are shown (their index order).
pub const STATS: &[StatDef] = &{
    let mut defs = [StatDef {
        index: 0,
        name: "",
        help: "",
    }; STAT_TABLE.len()];
    let mut i = 0;
    while i < defs.len() {
        defs[i] = StatDef {
            index: i as u32,
            name: STAT_TABLE[i].0,
            help: STAT_TABLE[i].1,
        };
        i += 1;
    }
    defs
};

/// The counters as the Markdown table docs/sched.md shows ("The
/// counters"), a test keeps the two the same.
pub fn markdown_table() -> String {
    let mut t = String::from("| name | counts |\n|---|---|\n");
    for d in STATS {
        t.push_str(&format!("| `{}` | {} |\n", d.name, d.help));
    }
    t
}

/// Number of counters the BPF side keeps.
pub const NR_STATS: u32 = s::vs_stat_VS_NR_STATS;

/// Counter values, summed over CPUs, in [`STATS`] order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub values: Vec<(&'static str, u64)>,
}

/// Every counter at zero (not no counters: sums start from it).
impl Default for Stats {
    fn default() -> Self {
        Stats::from_totals(&[])
    }
}

impl Stats {
    /// From one total per counter index.
    pub fn from_totals(totals: &[u64]) -> Stats {
        Stats {
            values: STATS
                .iter()
                .map(|d| (d.name, totals.get(d.index as usize).copied().unwrap_or(0)))
                .collect(),
        }
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            values: self
                .values
                .iter()
                .map(|&(name, v)| {
                    let before = earlier
                        .values
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map_or(0, |&(_, b)| b);
                    (name, v.saturating_sub(before))
                })
                .collect(),
        }
    }

    /// These counts and `other`'s, added (one run's totals across
    /// the scheduler's restarts).
    pub fn plus(&self, other: &Stats) -> Stats {
        Stats {
            values: self
                .values
                .iter()
                .map(|&(name, v)| (name, v.saturating_add(other.get(name))))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> u64 {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |&(_, v)| v)
    }

    /// As a JSON object (name -> count).
    pub fn to_json_map(&self) -> serde_json::Map<String, serde_json::Value> {
        self.values
            .iter()
            .map(|&(n, v)| (n.to_string(), v.into()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/sched.md describes each counter with the words of STATS, the
    /// one source: a counter added, renamed or explained anew here shows
    /// up there, or this fails with the table to paste.
    #[test]
    fn the_docs_counter_table_is_the_declared_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sched.md");
        let doc = std::fs::read_to_string(path).expect("docs/sched.md");
        let section = doc
            .split("## The counters")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/sched.md has a section \"## The counters\"");
        let table: String = section
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            table == markdown_table(),
            "docs/sched.md's counter table differs from stats.rs; it should read:\n{}",
            markdown_table()
        );
    }

    /// A session's totals start from the default and add each load's
    /// counters: a default without counters summed to nothing.
    #[test]
    fn sums_from_the_default_keep_every_counter() {
        let first = Stats::from_totals(&[3; NR_STATS as usize]);
        let sum = Stats::default().plus(&first);
        assert_eq!(sum, first);
        assert_eq!(sum.values.len(), STATS.len());
    }

    #[test]
    fn every_counter_is_declared_once() {
        let mut idx: Vec<u32> = STATS.iter().map(|d| d.index).collect();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx, (0..NR_STATS).collect::<Vec<_>>());
    }

    #[test]
    fn deltas_between_snapshots() {
        // Totals by counter index, as the BPF side keeps them.
        let totals = |wake_prev: u64, wake_best: u64, queued: u64| {
            let mut t = vec![0; NR_STATS as usize];
            t[s::vs_stat_VS_STAT_WAKE_PREV as usize] = wake_prev;
            t[s::vs_stat_VS_STAT_WAKE_BEST as usize] = wake_best;
            t[s::vs_stat_VS_STAT_QUEUED_NORMAL as usize] = queued;
            t
        };
        let a = Stats::from_totals(&totals(1, 2, 5));
        let b = Stats::from_totals(&totals(4, 2, 9));
        let d = b.since(&a);
        assert_eq!((d.get("wake_prev"), d.get("queued_normal")), (3, 4));
    }
}
