//! RWC, vSched's "restricted vCPU candidates": which vCPUs normal work
//! should stay off, from a probe report. One rule for both places that
//! act on it: the sched_ext scheduler (vsched-sched) and the daemon's
//! cpusets (vsched-daemon).
//!
//! RWC hides a straggler (a vCPU far weaker than the mean, as the probe
//! judges it) and every vCPU of a stacked group but one: the group shares
//! one physical CPU, so spreading a parallel program over it only adds
//! waiting. The vCPU kept is the group's lowest-numbered: stacked vCPUs
//! share one host CPU, so their capacities differ only by measurement
//! noise, and choosing by capacity made the kept vCPU flip from report to
//! report, moving every task with it (seen in the lab: RWC's test failed).
//! A stacked group is a straggler only when every member reads as one:
//! its members' readings are of the same host CPU, so one low reading
//! beside a normal one is noise, and judging members alone hid the kept
//! vCPU as a straggler and its mate as stacked, leaving the whole host
//! CPU unused (seen in CI: capacities 62 and 454 for one stacked pair).
//! At least one vCPU always stays visible: if every vCPU would be hidden,
//! the strongest is shown again, since a VM that runs nothing is worse
//! than any straggler.

use crate::report::ProbeReport;
use serde::Serialize;

/// Why a vCPU is hidden (both false: visible).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Visibility {
    pub straggler: bool,
    /// Hidden because another vCPU of its stacked group stays in use.
    pub stacked: bool,
}

impl Visibility {
    pub fn hidden(&self) -> bool {
        self.straggler || self.stacked
    }
}

/// RWC's choice for every vCPU of `report`, in the report's order.
pub fn choose(report: &ProbeReport) -> Vec<Visibility> {
    let reads_as_straggler = |cpu: u32| {
        report
            .vcpus
            .iter()
            .find(|v| v.cpu == cpu)
            .is_none_or(|v| v.straggler)
    };
    let mut chosen: Vec<Visibility> = report
        .vcpus
        .iter()
        .map(|v| {
            let group = || v.stacked_with.iter().copied().chain(std::iter::once(v.cpu));
            let keeper = group().min().unwrap_or(v.cpu);
            Visibility {
                straggler: group().all(reads_as_straggler),
                stacked: keeper != v.cpu,
            }
        })
        .collect();
    if !chosen.is_empty() && chosen.iter().all(Visibility::hidden) {
        let strongest = report
            .vcpus
            .iter()
            .enumerate()
            .max_by_key(|(_, v)| (v.capacity.unwrap_or(0), std::cmp::Reverse(v.cpu)))
            .map(|(i, _)| i)
            .expect("not empty");
        chosen[strongest] = Visibility::default();
    }
    chosen
}

/// Reports in a row that must agree before a vCPU's visibility changes,
/// where changing it is costly: the daemon's cpusets move every task of a
/// slice at each change. Two: one odd report (a heavy window disturbed by
/// a burst, a topology check that caught a noisy pair) changes nothing,
/// and a real change is followed within two probe intervals.
pub const CONFIRMING_REPORTS: u32 = 2;

/// RWC's choice made steady: a vCPU changes visibility only after
/// [`CONFIRMING_REPORTS`] reports in a row asked for it. Where the change
/// is of its straggler verdict, the reports must also rest on different
/// heavy windows (`overhead.heavy_steps`): a vCPU's speed, half of its
/// capacity, is measured only there (every 5 s under `--watch`, and in the
/// step after a far reading), and the light-only reports in between repeat
/// it, so they confirm nothing. (In a lab guest, one heavy window disturbed
/// by the emulator read three of four vCPUs 2-200x slow; the two light-only
/// reports after it "confirmed" it, and the daemon hid every vCPU but the
/// slowest-reading one.) A report without `overhead` (not `--watch`) counts
/// as fresh.
#[derive(Debug, Clone, Default)]
pub struct Steady {
    /// Per vCPU number: the visibility in force, and the one asked for
    /// with the reports in a row that asked for it.
    vcpus: std::collections::BTreeMap<u32, SteadyVcpu>,
}

#[derive(Debug, Clone, Copy, Default)]
struct SteadyVcpu {
    current: Visibility,
    asked: Visibility,
    asked_times: u32,
    /// The heavy windows behind the last report counted for `asked`.
    asked_heavy_steps: Option<u64>,
}

impl Steady {
    /// Feeds one report; returns the vCPUs hidden now, in ascending order.
    /// A vCPU seen for the first time starts visible. At least one vCPU
    /// of the report stays visible whatever the history.
    pub fn update(&mut self, report: &ProbeReport) -> Vec<u32> {
        let asked_now = choose(report);
        let heavy_steps = report.overhead.map(|o| o.heavy_steps);
        for (v, &asked) in report.vcpus.iter().zip(&asked_now) {
            let s = self.vcpus.entry(v.cpu).or_default();
            if asked != s.asked {
                s.asked = asked;
                s.asked_times = 1;
                s.asked_heavy_steps = heavy_steps;
            } else {
                let new_speed_needed = asked.straggler != s.current.straggler;
                let fresh = heavy_steps.is_none() || heavy_steps != s.asked_heavy_steps;
                if !new_speed_needed || fresh {
                    s.asked_times = s.asked_times.saturating_add(1);
                    s.asked_heavy_steps = heavy_steps;
                }
            }
            if s.asked_times >= CONFIRMING_REPORTS {
                s.current = s.asked;
            }
        }
        let in_report: Vec<u32> = report.vcpus.iter().map(|v| v.cpu).collect();
        let mut hidden: Vec<u32> = in_report
            .iter()
            .copied()
            .filter(|cpu| self.vcpus[cpu].current.hidden())
            .collect();
        if !in_report.is_empty() && hidden.len() == in_report.len() {
            // Steps of the history can hide them all even though no single
            // report does: show what the newest report shows.
            hidden = in_report
                .iter()
                .zip(&asked_now)
                .filter(|(_, v)| v.hidden())
                .map(|(&cpu, _)| cpu)
                .collect();
        }
        hidden
    }

    /// The visibility in force for `cpu` (visible when never reported).
    pub fn visibility(&self, cpu: u32) -> Visibility {
        self.vcpus.get(&cpu).map(|s| s.current).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::VcpuReport;

    fn vcpu(cpu: u32, capacity: u32, straggler: bool, stacked_with: &[u32]) -> VcpuReport {
        serde_json::from_value(serde_json::json!({
            "cpu": cpu, "capacity": capacity, "available_pct": null, "steal_pct": null,
            "hidden_steal_pct": null, "preempted_pct": null, "speed_units_per_us": null,
            "episodes": null, "stacked_with": stacked_with, "smt_siblings": [],
            "llc_group": null, "socket_group": null, "straggler": straggler,
            "stacked": !stacked_with.is_empty()
        }))
        .unwrap()
    }

    pub(crate) fn report(vcpus: Vec<VcpuReport>) -> ProbeReport {
        let mut r: ProbeReport =
            serde_json::from_str(include_str!("../tests/data/report.json")).expect("parses");
        r.vcpus = vcpus;
        r
    }

    fn hidden(r: &ProbeReport) -> Vec<u32> {
        r.vcpus
            .iter()
            .zip(choose(r))
            .filter(|(_, v)| v.hidden())
            .map(|(v, _)| v.cpu)
            .collect()
    }

    #[test]
    fn straggler_and_all_but_the_lowest_of_a_stack_are_hidden() {
        let r = report(vec![
            vcpu(0, 1024, false, &[]),
            vcpu(1, 520, false, &[2]),
            vcpu(2, 500, false, &[1]),
            vcpu(3, 100, true, &[]),
        ]);
        assert_eq!(hidden(&r), vec![2, 3]);
        let v = choose(&r);
        assert!(v[2].stacked && v[3].straggler);
    }

    /// Regression: the kept vCPU followed capacity noise and flipped
    /// between reports, moving every task with it.
    #[test]
    fn the_kept_vcpu_of_a_stack_does_not_follow_capacity_noise() {
        for (c1, c2) in [(500, 520), (520, 500)] {
            let r = report(vec![vcpu(1, c1, false, &[2]), vcpu(2, c2, false, &[1])]);
            assert_eq!(hidden(&r), vec![2]);
        }
    }

    /// Regression: one low capacity reading in a stacked pair hid the
    /// kept vCPU as a straggler and its mate as stacked, so the pair's
    /// host CPU ran nothing (CI, capacities 62 and 454).
    #[test]
    fn one_low_reading_does_not_hide_a_whole_stacked_pair() {
        let r = report(vec![
            vcpu(0, 1024, false, &[]),
            vcpu(1, 62, true, &[2]),
            vcpu(2, 454, false, &[1]),
        ]);
        assert_eq!(hidden(&r), vec![2]);
        assert!(!choose(&r)[1].straggler);
        // A pair whose every member reads low is a straggling host CPU.
        let both_low = report(vec![
            vcpu(0, 1024, false, &[]),
            vcpu(1, 60, true, &[2]),
            vcpu(2, 70, true, &[1]),
        ]);
        assert_eq!(hidden(&both_low), vec![1, 2]);
    }

    #[test]
    fn never_every_vcpu_hidden() {
        let r = report(vec![vcpu(0, 300, true, &[]), vcpu(1, 400, true, &[])]);
        assert_eq!(hidden(&r), vec![0]);
    }

    #[test]
    fn a_change_takes_effect_only_when_confirmed() {
        let calm = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 1000, false, &[])]);
        let slow = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 100, true, &[])]);
        let mut steady = Steady::default();
        assert!(steady.update(&calm).is_empty());
        // One odd report changes nothing...
        assert!(steady.update(&slow).is_empty());
        assert!(steady.update(&calm).is_empty());
        // ...two in a row hide the straggler...
        assert!(steady.update(&slow).is_empty());
        assert_eq!(steady.update(&slow), vec![1]);
        assert!(steady.visibility(1).straggler);
        // ...and it comes back the same way.
        assert_eq!(steady.update(&calm), vec![1]);
        assert!(steady.update(&calm).is_empty());
    }

    /// `report` as the `heavy_steps`-th heavy window of `--watch` left it.
    fn after_heavy(mut r: ProbeReport, heavy_steps: u64) -> ProbeReport {
        r.overhead = Some(crate::report::Overhead {
            heavy_steps,
            ..Default::default()
        });
        r
    }

    /// Regression (daemon_rwc in CI): one disturbed heavy window read
    /// vCPUs slow, the light-only reports after it repeated that speed,
    /// and their "agreement" hid the vCPUs. A straggler verdict now waits
    /// for a second heavy window.
    #[test]
    fn a_straggler_read_in_one_heavy_window_waits_for_the_next_one() {
        let calm = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 1000, false, &[])]);
        let slow = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 100, true, &[])]);
        let mut steady = Steady::default();
        assert!(steady.update(&after_heavy(calm.clone(), 1)).is_empty());
        // The disturbed window, then light-only reports that repeat it.
        for _ in 0..4 {
            assert!(steady.update(&after_heavy(slow.clone(), 2)).is_empty());
        }
        // The next heavy window reads the vCPU well again: nothing moved.
        assert!(steady.update(&after_heavy(calm.clone(), 3)).is_empty());
        // A real straggler is confirmed by the next heavy window...
        assert!(steady.update(&after_heavy(slow.clone(), 4)).is_empty());
        assert_eq!(steady.update(&after_heavy(slow.clone(), 5)), vec![1]);
        // ...and given back the same way.
        assert_eq!(steady.update(&after_heavy(calm.clone(), 5)), vec![1]);
        assert_eq!(steady.update(&after_heavy(calm.clone(), 5)), vec![1]);
        assert!(steady.update(&after_heavy(calm, 6)).is_empty());
    }

    /// Stacking is not read in heavy windows: two reports in a row still
    /// confirm it, whatever their heavy windows.
    #[test]
    fn stacking_is_confirmed_by_two_reports_without_a_heavy_window() {
        let apart = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 1000, false, &[])]);
        let stacked = report(vec![vcpu(0, 1024, false, &[1]), vcpu(1, 1000, false, &[0])]);
        let mut steady = Steady::default();
        assert!(steady.update(&after_heavy(apart, 1)).is_empty());
        assert!(steady.update(&after_heavy(stacked.clone(), 1)).is_empty());
        assert_eq!(steady.update(&after_heavy(stacked, 1)), vec![1]);
    }

    #[test]
    fn history_never_hides_every_vcpu() {
        let r = |stragglers: [bool; 3]| {
            report(
                (0..3)
                    .map(|cpu| vcpu(cpu, 1024 - cpu, stragglers[cpu as usize], &[]))
                    .collect(),
            )
        };
        let mut steady = Steady::default();
        steady.update(&r([true, false, true]));
        assert_eq!(steady.update(&r([true, false, true])), vec![0, 2]);
        assert_eq!(steady.update(&r([false, true, true])), vec![0, 2]);
        // vCPU 1 is now confirmed hidden while 0 and 2 are not yet
        // confirmed visible: the history alone would hide all three.
        assert_eq!(steady.update(&r([true, true, false])), vec![0, 1]);
    }
}
