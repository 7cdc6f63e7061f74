//! The scenarios: a layout (lab/sched/bench-*.toml), a workload, the
//! variants beside default and vsched, and the goal from the issue, each
//! with the paper's experiment it reproduces in miniature.

use serde::Serialize;

/// What vsched must achieve in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goal {
    /// Default's median time over vsched's, at least.
    pub min_speedup: f64,
    /// vsched's speed as a share of the oracle's, at least (if there is one).
    pub min_of_oracle: Option<f64>,
    /// Timelines: vsched back at its phase's level within this many seconds
    /// of every phase change.
    pub max_recovery_s: Option<f64>,
}

impl Goal {
    /// Whether measured results meet the goal; `slowest_recovery_s` is the
    /// longest of a timeline's recoveries (None: some phase never recovered).
    pub fn verdict(
        &self,
        speedup: f64,
        of_oracle: Option<f64>,
        slowest_recovery_s: Option<f64>,
    ) -> Option<bool> {
        let oracle_ok = match (self.min_of_oracle, of_oracle) {
            (Some(min), Some(got)) => got >= min,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let recovery_ok = match self.max_recovery_s {
            Some(max) => slowest_recovery_s.is_some_and(|r| r <= max),
            None => true,
        };
        Some(speedup >= self.min_speedup && oracle_ok && recovery_ok)
    }
}

/// A scenario measured as throughput over time, across the phases of its
/// layout (vSched Fig. 16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeline {
    /// Seconds from the guest's command start to the workload's: a vsched
    /// run loads and gets its first model meanwhile. The layout's phase
    /// times count from the command start too.
    pub lead_s: f64,
    /// Names of the phases, the layout's initial placement first.
    pub phases: &'static [&'static str],
}

#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    /// What it reproduces, for the report.
    pub what: &'static str,
    pub layout_file: &'static str,
    /// The layout's TOML.
    pub layout: &'static str,
    /// schedbench's arguments.
    pub workload: &'static [&'static str],
    /// What is compared, lower being better: "elapsed_s" (wall time of a
    /// fixed amount of work) or "p95_us" (the request server's tail).
    pub metric: &'static str,
    /// What a scheduler that knew the layout would do, if it can be
    /// written down.
    pub oracle: Oracle,
    /// Flags every vsched variant of the scenario runs with (the
    /// ablations add theirs): what the scenario holds fixed.
    pub vsched_flags: &'static str,
    /// Ablations: extra `vsched sched` flags, each its own column.
    pub ablations: &'static [&'static str],
    /// Also run the minimal FIFO sched_ext scheduler ("fifo-reference"):
    /// what sched_ext itself costs, apart from vsched's policy.
    pub fifo_reference: bool,
    /// vsched is `vsched daemon --rwc-cgroup` (user-space RWC on a
    /// cgroup's cpuset, no sched_ext) instead of `vsched sched`; every
    /// variant's workload then runs in that cgroup.
    pub daemon: bool,
    /// Also run the workload under `vsched run --consolidate` (Gleaner's
    /// consolidation by affinity, no sched_ext scheduler): its own column.
    pub run_consolidate: bool,
    /// Also run the workload in a cgroup under `vsched daemon --rwc-cgroup
    /// --consolidate-cgroups` (the same consolidation by the cgroup's
    /// cpuset, and the daemon's user-space RWC): its own column.
    pub daemon_consolidate: bool,
    /// Run as a timeline: one guest per run, the layout's phases walked
    /// during the workload (None: one number per run, rounds share guests).
    pub timeline: Option<Timeline>,
    pub goal: Goal,
}

impl Scenario {
    /// (label, how it runs) of every variant, default first. "how" is the
    /// oracle's CPU list, or the vsched flags ("" for plain vsched).
    pub fn variants(&self) -> Vec<(String, VariantKind)> {
        let vsched = if self.daemon {
            // Still "vsched": the scenario's verdict compares it.
            ("vsched".to_string(), VariantKind::Daemon)
        } else {
            ("vsched".to_string(), VariantKind::Vsched(""))
        };
        let mut v = vec![("default".to_string(), VariantKind::Default), vsched];
        for a in self.ablations {
            v.push((format!("vsched {a}"), VariantKind::Vsched(a)));
        }
        if self.fifo_reference {
            v.push((
                "fifo-reference".to_string(),
                VariantKind::Vsched("--reference-fifo --no-probe"),
            ));
        }
        if self.run_consolidate {
            v.push((
                "vsched run --consolidate".to_string(),
                VariantKind::RunConsolidate,
            ));
        }
        if self.daemon_consolidate {
            v.push((
                "vsched daemon --consolidate-cgroups".to_string(),
                VariantKind::DaemonConsolidate,
            ));
        }
        if self.oracle != Oracle::None {
            v.push(("oracle".to_string(), VariantKind::Oracle(self.oracle)));
        }
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariantKind {
    Default,
    /// vsched sched with these extra flags.
    Vsched(&'static str),
    /// vsched daemon with user-space RWC on the workload's cgroup.
    Daemon,
    /// `vsched run --consolidate` around the workload, no scheduler.
    RunConsolidate,
    /// The workload in a cgroup `vsched daemon --consolidate-cgroups`
    /// manages, no scheduler.
    DaemonConsolidate,
    /// The scenario's oracle.
    Oracle(Oracle),
}

/// A scenario's limit: the workload placed by hand, knowing the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oracle {
    /// None is known (the overhead scenarios: the default is the limit).
    None,
    /// Pinned with taskset to these vCPUs (a static placement).
    Pinned(&'static str),
    /// The cpu workload's threads moving themselves along this vCPU list
    /// every `every_us` (`schedbench rotate`): where vCPUs take turns
    /// being switched off, no static placement is best.
    Rotating { every_us: u32, cpus: &'static str },
}

/// IVH's limit in its layout: each thread moves itself on every 4 ms
/// along the vCPUs (two threads half the list apart, so on different host
/// CPUs). Four ms: most of a capped vCPU's 5 ms quota, so a vCPU is rarely
/// switched off under it, in few moves; measured in the layout (3 rounds,
/// one thread, the default scheduler): moving on every 1 ms 0.76 s, 2 ms
/// 0.64-0.70 s, 4 ms 0.61-0.66 s, staying put 1.17-1.27 s
/// (docs/benchmarks.md).
const IVH_ORACLE: Oracle = Oracle::Rotating {
    every_us: 4000,
    cpus: "0,1,2,3",
};

/// Where vsched has nothing to gain (dedicated vCPUs, or no idle vCPU for
/// IVH): the "within 3%" of the default.
const NO_LOSS: Goal = Goal {
    min_speedup: 0.97,
    min_of_oracle: None,
    max_recovery_s: None,
};

/// Gleaner's goal (issue 33): no placement slower than 1.3x the fastest,
/// here the oracle (one vCPU where that is best), and no loss against the
/// default.
const GLEANER_GOAL: Goal = Goal {
    min_speedup: 0.97,
    min_of_oracle: Some(1.0 / 1.3),
    max_recovery_s: None,
};

/// An overhead scenario: `workload` on two dedicated vCPUs, where vsched
/// has nothing to gain and must lose at most 3% to the default; its
/// ablation leaves the probers out, and the minimal FIFO sched_ext
/// scheduler shows what sched_ext itself costs.
const fn overhead(
    name: &'static str,
    what: &'static str,
    workload: &'static [&'static str],
) -> Scenario {
    Scenario {
        name,
        what,
        layout_file: "lab/sched/two-free.toml",
        layout: include_str!("../../../../lab/sched/two-free.toml"),
        workload,
        metric: "elapsed_s",
        oracle: Oracle::None,
        vsched_flags: "",
        ablations: &["--no-probe"],
        fifo_reference: true,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: NO_LOSS,
    }
}

/// A Gleaner scenario: `workload` on two dedicated vCPUs, with
/// consolidation (`--consolidate`, off by default) as its own column.
const fn gleaner(
    name: &'static str,
    what: &'static str,
    workload: &'static [&'static str],
    metric: &'static str,
    oracle: Oracle,
    goal: Goal,
) -> Scenario {
    Scenario {
        metric,
        oracle,
        ablations: &["--consolidate"],
        fifo_reference: false,
        run_consolidate: true,
        daemon_consolidate: true,
        goal,
        ..overhead(name, what, workload)
    }
}

/// A Gleaner scenario in a 4-vCPU guest (lab/sched/bench-gleaner-4.toml:
/// two vCPUs on each host CPU, as this machine's two CPUs allow), where
/// the default scheduler spreads a blocking program over all four and one
/// vCPU is the fastest placement; RWC, on in every `vsched sched`
/// variant, hides the stacked mates (`vsched run --consolidate` has no
/// RWC). Under the default scheduler on 2026-12-06 the barrier took about
/// 1.0 s and the pipeline 0.3 s.
const fn gleaner_4(
    name: &'static str,
    what: &'static str,
    workload: &'static [&'static str],
) -> Scenario {
    Scenario {
        layout_file: "lab/sched/bench-gleaner-4.toml",
        layout: include_str!("../../../../lab/sched/bench-gleaner-4.toml"),
        ..gleaner(
            name,
            what,
            workload,
            "elapsed_s",
            Oracle::Pinned("0"),
            GLEANER_GOAL,
        )
    }
}

/// vSched Fig. 4's kernel: 4 barrier threads, 100 rounds of 400,000
/// iterations (about 0.2 s on the two good vCPUs under TCG).
const RWC_WORKLOAD: &[&str] = &["barrier", "4", "100", "400000"];
/// Both RWC scenarios (scheduler and cpuset) aim at the same: 1.5x the
/// default, 80% of pinning to the good vCPUs.
const RWC_GOAL: Goal = Goal {
    min_speedup: 1.5,
    min_of_oracle: Some(0.8),
    max_recovery_s: None,
};

/// Every scenario, in the order they run.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "rwc",
        what: "vSched Fig. 4: a barrier-synchronised kernel, 4 threads on 4 vCPUs of which one \
               is a straggler (10% cap) and two are stacked on one host CPU",
        layout_file: "lab/sched/bench-rwc.toml",
        layout: include_str!("../../../../lab/sched/bench-rwc.toml"),
        workload: RWC_WORKLOAD,
        metric: "elapsed_s",
        oracle: Oracle::Pinned("0,1"),
        vsched_flags: "",
        ablations: &["--no-rwc"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: RWC_GOAL,
    },
    Scenario {
        name: "rwc-cpuset",
        what: "vSched Fig. 4 without sched_ext: the rwc scenario's barrier kernel and vCPUs on \
               the host's release kernel, in a cgroup whose cpuset `vsched daemon --rwc-cgroup` \
               keeps off the straggler and the stacked vCPU (every variant runs in the cgroup)",
        layout_file: "lab/daemon/rwc.toml",
        layout: include_str!("../../../../lab/daemon/rwc.toml"),
        workload: RWC_WORKLOAD,
        metric: "elapsed_s",
        oracle: Oracle::Pinned("0,1"),
        vsched_flags: "",
        ablations: &[],
        fifo_reference: false,
        daemon: true,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: RWC_GOAL,
    },
    Scenario {
        name: "capacity",
        what: "vSched §5.3 in miniature: one CPU-bound thread on 2 vCPUs, one of them capped \
               at 50% (the other twice as strong)",
        layout_file: "lab/sched/bench-capacity.toml",
        layout: include_str!("../../../../lab/sched/bench-capacity.toml"),
        workload: &["cpu", "1", "200000000"],
        metric: "elapsed_s",
        oracle: Oracle::Pinned("0"),
        vsched_flags: "",
        ablations: &["--no-capacity"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: Goal {
            min_speedup: 1.3,
            min_of_oracle: Some(0.8),
            max_recovery_s: None,
        },
    },
    Scenario {
        name: "bvs",
        what: "vSched Fig. 14 / Table 3 in miniature: a request server (4 workers, 200 us \
               requests, one every 1 ms on average) on 2 vCPUs of equal capacity, one \
               switched off 1 ms at a time, the other 3 ms (host loads); p95 latency",
        layout_file: "lab/sched/bench-bvs.toml",
        layout: include_str!("../../../../lab/sched/bench-bvs.toml"),
        workload: &["server", "4", "2000", "200", "1000"],
        metric: "p95_us",
        oracle: Oracle::Pinned("0"),
        vsched_flags: "",
        ablations: &["--no-bvs"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: Goal {
            min_speedup: 2.0,
            min_of_oracle: None,
            max_recovery_s: None,
        },
    },
    Scenario {
        name: "bvs-best-effort",
        what: "the same with 2 SCHED_IDLE best-effort threads harvesting both vCPUs \
               (Table 3's right half, with BVS's state check as its own column)",
        layout_file: "lab/sched/bench-bvs.toml",
        layout: include_str!("../../../../lab/sched/bench-bvs.toml"),
        workload: &["server", "4", "2000", "200", "1000", "2"],
        metric: "p95_us",
        oracle: Oracle::Pinned("0"),
        vsched_flags: "",
        ablations: &["--no-bvs", "--bvs-no-state-check"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: Goal {
            min_speedup: 2.0,
            min_of_oracle: None,
            max_recovery_s: None,
        },
    },
    Scenario {
        name: "ivh-1",
        what: "vSched Fig. 15 / Table 4 in miniature: 1 CPU-bound thread on 4 vCPUs, two per \
               host CPU, each capped at 50% (5 of every 10 ms); RWC off (see docs/sched.md)",
        layout_file: "lab/sched/bench-ivh.toml",
        layout: include_str!("../../../../lab/sched/bench-ivh.toml"),
        workload: &["cpu", "1", "400000000"],
        metric: "elapsed_s",
        oracle: IVH_ORACLE,
        // Two capped vCPUs on one host CPU look stacked to the probe (they
        // never run at once while both are busy), and RWC would hide one,
        // losing its half of the host CPU: this layout measures IVH alone.
        vsched_flags: "--no-rwc",
        ablations: &["--no-ivh", "--ivh-unaware", "--ivh-beats-only"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: Goal {
            min_speedup: 1.8,
            min_of_oracle: None,
            max_recovery_s: None,
        },
    },
    Scenario {
        name: "ivh-2",
        what: "the same with 2 threads (vCPUs/2)",
        layout_file: "lab/sched/bench-ivh.toml",
        layout: include_str!("../../../../lab/sched/bench-ivh.toml"),
        workload: &["cpu", "2", "400000000"],
        metric: "elapsed_s",
        oracle: IVH_ORACLE,
        vsched_flags: "--no-rwc",
        ablations: &["--no-ivh", "--ivh-unaware", "--ivh-beats-only"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: Goal {
            min_speedup: 1.3,
            min_of_oracle: None,
            max_recovery_s: None,
        },
    },
    Scenario {
        name: "ivh-4",
        what: "the same with 4 threads (one per vCPU): nothing to harvest, no loss allowed",
        layout_file: "lab/sched/bench-ivh.toml",
        layout: include_str!("../../../../lab/sched/bench-ivh.toml"),
        workload: &["cpu", "4", "400000000"],
        metric: "elapsed_s",
        oracle: Oracle::None,
        vsched_flags: "--no-rwc",
        // `--no-probe`: no probers and so no model, beats or moves: what
        // the probers cost where IVH has nothing to harvest.
        ablations: &["--no-ivh", "--no-probe", "--ivh-beats-only"],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: None,
        goal: NO_LOSS,
    },
    // Apart in each: the scheduler's own cost and the probers'.
    overhead(
        "overhead-cpu",
        "overhead: 2 CPU-bound threads on 2 dedicated vCPUs (nothing to gain)",
        &["cpu", "2", "200000000"],
    ),
    overhead(
        "overhead-pingpong",
        "overhead: one pair of threads passing a byte through pipes on 2 dedicated vCPUs \
         (context-switch bound)",
        &["pingpong", "1", "20000"],
    ),
    overhead(
        "overhead-messaging",
        "overhead: a hackbench-like messaging kernel (2 groups of 4 senders and 4 \
         receivers, 100-byte messages over Unix sockets) on 2 dedicated vCPUs",
        &["messaging", "2", "4", "1000"],
    ),
    // sched_yield(): alone (each yield finds nothing else to run, so it
    // should return at once) and with twice as many yielders as vCPUs
    // (each yield hands the vCPU on); the ablation ends the slice at
    // every yield, as sched_ext does for a scheduler without a yield
    // callback.
    Scenario {
        ablations: &["--no-yield-in-place"],
        ..overhead(
            "overhead-yield",
            "overhead: one thread calling sched_yield() 20,000 times on 2 dedicated vCPUs \
             (nothing else to run: a spin-wait's yield on a machine with room)",
            &["yield", "1", "20000"],
        )
    },
    Scenario {
        ablations: &["--no-yield-in-place"],
        ..overhead(
            "overhead-yield-4",
            "overhead: 4 threads calling sched_yield() 10,000 times each on 2 dedicated \
             vCPUs (each yield hands the vCPU to a waiting thread)",
            &["yield", "4", "10000"],
        )
    },
    // The adaptability benchmark's dedicated phase alone: about 2,500
    // barrier rounds a second under TCG, so 2,000 rounds take ~0.8 s.
    overhead(
        "overhead-barrier",
        "overhead: 2 threads meeting at a barrier every ~0.4 ms on 2 dedicated vCPUs \
         (the adaptability benchmark's dedicated phase)",
        &["barrier", "2", "2000", "200000"],
    ),
    // Gleaner (../shared/seeds/gleaner-idleness-consolidation.txt) in
    // miniature, on 2 dedicated vCPUs: consolidation is `--consolidate`
    // (off by default), its own column; the oracle is the program bound
    // to one vCPU.
    // No cgroup column: the program binds its wakee to each vCPU in turn,
    // which a narrowed cpuset forbids.
    Scenario {
        daemon_consolidate: false,
        ..gleaner(
            "gleaner-wakeup",
            "Gleaner's Table 1: median wake-up latency of a futex wake from vCPU 0 with the \
         wakee free to run anywhere (free_us: where the scheduler puts it), and bound to \
         vCPU 0 (same_us), to vCPU 1 kept busy by SCHED_IDLE work (busy_us) or idle \
         (idle_us)",
            &["wakeup", "300"],
            "free_us",
            Oracle::None,
            NO_LOSS,
        )
    },
    gleaner(
        "gleaner-barrier",
        "Gleaner's Fig. 4 in miniature: 4 barrier threads with about 10 us of work per \
         round each, on 2 vCPUs (faster on one: the wake-ups of halted vCPUs cost more \
         than the second vCPU gives)",
        &["barrier", "4", "30000", "2000"],
        "elapsed_s",
        Oracle::Pinned("0"),
        GLEANER_GOAL,
    ),
    gleaner(
        "gleaner-pipeline",
        "the same with a dedup-like pipeline: 4 stages handing 20,000 items through \
         bounded blocking queues, about 10 us of work per item and stage",
        &["pipeline", "4", "20000", "2000"],
        "elapsed_s",
        Oracle::Pinned("0"),
        GLEANER_GOAL,
    ),
    gleaner(
        "gleaner-pipeline-heavy",
        "the pipeline with about 95 us of work per item and stage, which needs both \
         vCPUs: consolidation must not lose it",
        &["pipeline", "4", "5000", "50000"],
        "elapsed_s",
        Oracle::Pinned("0"),
        GLEANER_GOAL,
    ),
    // The same two programs in a 4-vCPU guest (Gleaner's Fig. 4 across VM
    // sizes: 1 vCPU is the oracle, 2 the scenarios above, 4 these), a
    // third of the work: a wake-up onto a stacked vCPU waits for the host
    // to switch to it.
    gleaner_4(
        "gleaner-barrier-4",
        "gleaner-barrier's program (10,000 rounds) on 4 vCPUs, two to a host CPU",
        &["barrier", "4", "10000", "2000"],
    ),
    gleaner_4(
        "gleaner-pipeline-4",
        "gleaner-pipeline's program (7,000 items) on 4 vCPUs, two to a host CPU",
        &["pipeline", "4", "7000", "2000"],
    ),
    gleaner(
        "gleaner-cpu",
        "a CPU-bound thread per vCPU (2 on 2 dedicated vCPUs, about 2 s): every vCPU is \
         needed, and consolidation, its readings included, must not lose it",
        &["cpu", "2", "1000000000"],
        "elapsed_s",
        Oracle::None,
        NO_LOSS,
    ),
    Scenario {
        name: "adaptability",
        what: "vSched Fig. 16 in miniature: a 2-thread barrier kernel's throughput while its \
               2 vCPUs walk through dedicated, both capped at 50%, asymmetric 2:1, a \
               straggler, stacked, and dedicated again (12 s each)",
        layout_file: "lab/sched/bench-phases.toml",
        layout: include_str!("../../../../lab/sched/bench-phases.toml"),
        // 72 s: the six phases of 12 s (the layout's times, after the lead);
        // 250 ms intervals: four throughput points per probe interval.
        workload: &["timeline", "2", "72", "250", "200000"],
        metric: "s_per_round",
        oracle: Oracle::None,
        vsched_flags: "",
        ablations: &[],
        fifo_reference: false,
        daemon: false,
        run_consolidate: false,
        daemon_consolidate: false,
        timeline: Some(Timeline {
            lead_s: 8.0,
            phases: &[
                "dedicated",
                "capped 50%",
                "asymmetric 2:1",
                "straggler",
                "stacked",
                "dedicated again",
            ],
        }),
        goal: Goal {
            min_speedup: 1.0,
            min_of_oracle: None,
            // Two probe intervals of `vsched sched` (1 s each).
            max_recovery_s: Some(2.0),
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_layout_parses_and_names_no_extra_binary() {
        for s in SCENARIOS {
            let l = vsched_lab::Layout::parse(s.layout, &[0, 1])
                .unwrap_or_else(|e| panic!("{}: {e}", s.layout_file));
            assert!(
                l.extra_binaries.is_empty(),
                "{}: the bench adds the workload",
                s.name
            );
            // The daemon's scenarios are for kernels without sched_ext.
            let wanted = if s.daemon {
                vsched_lab::kernel::KernelChoice::Default
            } else {
                vsched_lab::kernel::KernelChoice::SchedExt
            };
            assert_eq!(l.kernel, wanted, "{}", s.name);
        }
    }

    #[test]
    fn goals_need_both_speedup_and_oracle_share() {
        let g = Goal {
            min_speedup: 1.5,
            min_of_oracle: Some(0.8),
            max_recovery_s: None,
        };
        assert_eq!(g.verdict(2.0, Some(0.9), None), Some(true));
        assert_eq!(g.verdict(2.0, Some(0.7), None), Some(false));
        assert_eq!(g.verdict(1.4, Some(0.9), None), Some(false));
        assert_eq!(g.verdict(2.0, None, None), Some(false));
    }

    #[test]
    fn a_timeline_goal_needs_every_phase_recovered_in_time() {
        let g = Goal {
            min_speedup: 1.0,
            min_of_oracle: None,
            max_recovery_s: Some(2.0),
        };
        assert_eq!(g.verdict(1.2, None, Some(1.5)), Some(true));
        assert_eq!(g.verdict(1.2, None, Some(2.5)), Some(false));
        assert_eq!(g.verdict(1.2, None, None), Some(false));
        assert_eq!(g.verdict(0.9, None, Some(0.5)), Some(false));
    }

    #[test]
    fn a_timeline_names_every_phase_of_its_layout_and_runs_through_them() {
        for s in SCENARIOS {
            let Some(t) = s.timeline else { continue };
            let l = vsched_lab::Layout::parse(s.layout, &[0, 1]).unwrap();
            assert_eq!(t.phases.len(), l.phases.len() + 1, "{}", s.name);
            let seconds: f64 = s.workload[2].parse().unwrap();
            let last = l.phases.last().map_or(0.0, |p| p.at_s);
            assert!(
                last - t.lead_s < seconds,
                "{}: the last phase starts after the workload",
                s.name
            );
            assert!(t.lead_s > 0.0, "{}", s.name);
        }
    }
}
