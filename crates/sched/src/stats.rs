//! The BPF side's counters, declared once as data: their index in the
//! per-CPU `stats` map (intf.h's `vs_stat`), a name for JSON and a line of
//! explanation for people.

use crate::bpf_intf as s;
use serde::Serialize;

/// One counter: where it lives and what it means.
pub struct StatDef {
    pub index: u32,
    pub name: &'static str,
    pub help: &'static str,
}

/// Every counter, in the order they are shown.
pub const STATS: &[StatDef] = &[
    StatDef {
        index: s::vs_stat_VS_STAT_WAKE_PREV,
        name: "wake_prev",
        help: "wake-ups placed on their previous vCPU, idle",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_WAKE_BEST,
        name: "wake_best",
        help: "wake-ups placed on the strongest idle visible vCPU",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_WAKE_PREV_OVER_STRONGER,
        name: "wake_prev_over_stronger",
        help: "of wake_prev: a stronger vCPU was idle but not by enough to move",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_WAKE_SYNC,
        name: "wake_sync",
        help: "synchronous wake-ups placed on the waker's vCPU (it is about to wait)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_MOVED_STRONGER,
        name: "moved_stronger",
        help: "slice-end moves to a clearly stronger idle vCPU (or off a hidden one)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_KEPT_RUNNING,
        name: "kept_running",
        help: "slice ends where no waiting task was owed the vCPU: the task stays",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_SLICE_RENEWED,
        name: "slice_renewed",
        help: "slices renewed at the tick instead of ending (no normal task waited, SCHED_IDLE work that does not starve aside, and no visible vCPU the task may use was idle): it runs on without being queued again",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_QUEUED_NORMAL,
        name: "queued_normal",
        help: "normal tasks queued (no visible vCPU idle at once)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_MIGRATED,
        name: "migrated",
        help: "normal tasks that started running on another vCPU than last time",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_QUEUED_IDLE,
        name: "queued_idle",
        help: "SCHED_IDLE tasks queued",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_PINNED,
        name: "pinned",
        help: "tasks bound to one vCPU, run there directly",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_KICKS,
        name: "kicks",
        help: "idle vCPUs woken for a queued task",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_HIDDEN_SKIPS,
        name: "hidden_skips",
        help: "times a vCPU hidden by RWC left normal tasks waiting",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_PREEMPTED_IDLE_POLICY,
        name: "preempted_idle_policy",
        help: "queued normal tasks (waking, or left waiting at a slice end) that pre-empted a vCPU running only SCHED_IDLE work",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BVS_IDLE,
        name: "bvs_idle",
        help: "BVS: latency-sensitive wake-ups placed on an idle low-latency vCPU",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BVS_IDLE_POLICY,
        name: "bvs_idle_policy",
        help: "BVS: ... on a vCPU running only SCHED_IDLE work (pre-empted)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BVS_BEHIND_SHORT,
        name: "bvs_behind_short",
        help: "BVS: ... queued behind a short latency-sensitive task on a low-latency vCPU",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BVS_NONE,
        name: "bvs_none",
        help: "BVS: latency-sensitive wake-ups no low-latency vCPU could take",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BVS_BEHIND_DECLINED,
        name: "bvs_behind_declined",
        help: "BVS: waits behind a short task declined (another vCPU idle, the short task not the waker); placed the usual way",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_ATTEMPTED,
        name: "ivh_attempted",
        help: "IVH: moves started (at a heartbeat off a vCPU about to be switched off, or at the tick to a rested vCPU)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_DONE,
        name: "ivh_done",
        help: "IVH: tasks moved to another vCPU (that had answered, or had rested)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_ABANDONED_TARGET,
        name: "ivh_abandoned_target",
        help: "IVH: abandoned, the target answered too late (was switched off)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_ABANDONED_SOURCE,
        name: "ivh_abandoned_source",
        help: "IVH: abandoned, the source was switched off before letting go",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_RESTED,
        name: "ivh_rested",
        help: "IVH: moves started at once at a heartbeat, the target having rested a whole rhythm",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_AT_TICK,
        name: "ivh_at_tick",
        help: "IVH: moves started at the tick, the target having rested one of the source's rhythms by the model",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_OVER_IDLE_POLICY,
        name: "ivh_over_idle_policy",
        help: "IVH: of ivh_done, onto a vCPU running only SCHED_IDLE work at the move (pre-empted): a target taken for lack of an idle one, or an idle one that took up the probers' work while answering",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IVH_NO_SPARE,
        name: "ivh_no_spare",
        help: "IVH: decisions (a heartbeat predicting a switch-off, or a tick on a vCPU losing time) that sought no move, every visible vCPU having a normal task of its own (running or queued); a rate, not a count of tasks",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_BEAT_GAPS,
        name: "beat_gaps",
        help: "inactive episodes the scheduler's heartbeat saw (all vCPUs)",
    },
    StatDef {
        index: s::vs_stat_VS_STAT_IDLE_STARVED,
        name: "idle_starved",
        help: "SCHED_IDLE tasks run ahead of normal work after waiting 1 s (starvation guard)",
    },
];

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
