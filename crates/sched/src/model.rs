//! What the BPF side is told about each vCPU, derived from a probe report:
//! its capacity, whether RWC (vSched's "restricted vCPU candidates")
//! keeps normal tasks off it (the rule is vsched-model's `rwc`, shared
//! with the daemon's cpusets), and whether BVS prefers it.
//!
//! BVS prefers low-latency vCPUs: those whose typical (median) inactive
//! episode is within [`LOW_LATENCY_RATIO`] of the shortest among the
//! visible vCPUs, or shorter than [`SHORT_EPISODE_US`] anyway.
//!
//! Consolidation parks first the vCPUs the kernel leaves out of its
//! preferred-CPU mask, where it has one ([`mark_preferred`]).

use serde::Serialize;
use vsched_model::report::ProbeReport;
pub use vsched_model::rwc::Visibility;

/// The bits the BPF side reads for a vCPU's visibility (intf.h's
/// `vs_hidden_why`).
pub fn hidden_bits(v: &Visibility) -> u32 {
    use crate::bpf_intf as why;
    let mut b = 0;
    if v.straggler {
        b |= why::vs_hidden_why_VS_HIDDEN_STRAGGLER;
    }
    if v.stacked {
        b |= why::vs_hidden_why_VS_HIDDEN_STACKED;
    }
    b
}

/// One vCPU as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VcpuModel {
    pub cpu: u32,
    /// 1..=1024 relative to the strongest vCPU; 0 when not measured.
    pub capacity: u32,
    pub visibility: Visibility,
    /// Mean inactive-episode length (0: none seen).
    pub episode_mean_us: u32,
    /// Share of time available, in permille (0: not measured).
    pub available_permille: u32,
    /// Among the VM's shortest inactive episodes: BVS's first choice.
    pub low_latency: bool,
    /// Listed in the kernel's preferred-CPU mask (crate::preferred);
    /// false for every vCPU where the kernel has no mask.
    pub preferred: bool,
    /// Bit n set: vCPU n shares a host CPU with this one (IVH prefers a
    /// target whose host CPU runs no other normal task). vCPUs from 64 on, beyond
    /// the BPF side's VS_MAX_CPUS, are left out. In JSON: the list of
    /// those vCPUs.
    #[serde(serialize_with = "cpus_of_mask")]
    pub stack_mates: u64,
}

/// A vCPU bit mask as the list of its vCPUs, as the probe's JSON lists
/// `stacked_with`.
fn cpus_of_mask<S: serde::Serializer>(mask: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq((0..64u32).filter(|n| mask & (1 << n) != 0))
}

impl VcpuModel {
    /// intf.h's `vs_vcpu_flags` bits.
    pub fn flag_bits(&self) -> u32 {
        use crate::bpf_intf as flag;
        let mut bits = 0;
        if self.low_latency {
            bits |= flag::vs_vcpu_flags_VS_VCPU_LOW_LATENCY;
        }
        if self.preferred {
            bits |= flag::vs_vcpu_flags_VS_VCPU_PREFERRED;
        }
        bits
    }
}

/// A vCPU whose typical episode is at most this many times the VM's
/// shortest is low-latency: the paper's asymmetric VMs differ by 2x, and
/// the probe's episode readings scatter by ±20% (docs/lab.md), so 1.5
/// separates a 2x difference from noise.
pub const LOW_LATENCY_RATIO: f64 = 1.5;

/// Typical episodes shorter than this make a vCPU low-latency whatever the
/// others show: a latency-sensitive task (BVS: at most 0.5 ms per wake-up)
/// waits no longer than it runs.
pub const SHORT_EPISODE_US: f64 = 500.0;

/// The model of every vCPU in `report`, with RWC's choice applied when
/// `rwc` is on (otherwise nothing is hidden).
pub fn from_report(report: &ProbeReport, rwc: bool) -> Vec<VcpuModel> {
    let visibility = if rwc {
        vsched_model::rwc::choose(report)
    } else {
        vec![Visibility::default(); report.vcpus.len()]
    };
    let mut models: Vec<VcpuModel> = report
        .vcpus
        .iter()
        .zip(visibility)
        .map(|(v, visibility)| {
            let episodes = v.episodes.unwrap_or_default();
            VcpuModel {
                cpu: v.cpu,
                capacity: v.capacity.unwrap_or(0),
                visibility,
                episode_mean_us: episodes.mean_us.round() as u32,
                available_permille: v
                    .available_pct
                    .map_or(0, |pct| (pct * 10.0).round().clamp(1.0, 1000.0) as u32),
                low_latency: false,
                preferred: false,
                stack_mates: v
                    .stacked_with
                    .iter()
                    .filter(|&&c| c < u64::BITS)
                    .fold(0, |bits, &c| bits | 1 << c),
            }
        })
        .collect();
    mark_low_latency(report, &mut models);
    models
}

/// Marks the vCPUs the kernel's preferred-CPU mask lists (None: the
/// kernel has none, and no vCPU is marked).
pub fn mark_preferred(models: &mut [VcpuModel], preferred: Option<&[u32]>) {
    for m in models {
        m.preferred = preferred.is_some_and(|p| p.contains(&m.cpu));
    }
}

/// A vCPU's typical inactive episode in µs: the median (the mean in reports
/// written before the median existed), 0 with no episodes.
fn typical_episode_us(v: &vsched_model::report::VcpuReport) -> f64 {
    match v.episodes {
        Some(e) if e.count > 0 => {
            if e.p50_us > 0.0 {
                e.p50_us
            } else {
                e.mean_us
            }
        }
        _ => 0.0,
    }
}

fn mark_low_latency(report: &ProbeReport, models: &mut [VcpuModel]) {
    let typical: Vec<f64> = report.vcpus.iter().map(typical_episode_us).collect();
    let shortest = models
        .iter()
        .zip(&typical)
        .filter(|(m, _)| !m.visibility.hidden())
        .map(|(_, &t)| t)
        .fold(f64::INFINITY, f64::min);
    let limit = (shortest * LOW_LATENCY_RATIO).max(SHORT_EPISODE_US);
    for (m, &t) in models.iter_mut().zip(&typical) {
        m.low_latency = t <= limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vsched_model::report::VcpuReport;

    fn vcpu(cpu: u32, capacity: u32, straggler: bool, stacked_with: &[u32]) -> VcpuReport {
        serde_json::from_value(serde_json::json!({
            "cpu": cpu, "capacity": capacity, "available_pct": null, "steal_pct": null,
            "hidden_steal_pct": null, "preempted_pct": null, "speed_units_per_us": null,
            "episodes": {"count": 10, "mean_us": 2500.0, "p95_us": 3000.0, "max_us": 4000.0},
            "stacked_with": stacked_with, "smt_siblings": [], "llc_group": null,
            "socket_group": null, "straggler": straggler, "stacked": !stacked_with.is_empty()
        }))
        .unwrap()
    }

    fn report(vcpus: Vec<VcpuReport>) -> ProbeReport {
        let mut r: ProbeReport =
            serde_json::from_str(include_str!("../../model/tests/data/report.json"))
                .expect("test report parses");
        r.vcpus = vcpus;
        r
    }

    fn hidden(models: &[VcpuModel]) -> Vec<u32> {
        models
            .iter()
            .filter(|m| m.visibility.hidden())
            .map(|m| m.cpu)
            .collect()
    }

    /// RWC's choice (vsched-model's rwc) and the episodes reach the model.
    #[test]
    fn rwc_choice_and_episodes_reach_the_model() {
        let r = report(vec![
            vcpu(0, 1024, false, &[]),
            vcpu(1, 520, false, &[2]),
            vcpu(2, 500, false, &[1]),
            vcpu(3, 100, true, &[]),
        ]);
        let m = from_report(&r, true);
        assert_eq!(hidden(&m), vec![2, 3]);
        assert!(m[2].visibility.stacked && m[3].visibility.straggler);
        assert_eq!(m[0].episode_mean_us, 2500);
        let mates: Vec<u64> = m.iter().map(|v| v.stack_mates).collect();
        assert_eq!(mates, [0, 1 << 2, 1 << 1, 0]);
        // The summary JSON lists the mates, as the probe lists stacked_with.
        let json = serde_json::to_value(m[1]).unwrap();
        assert_eq!(json["stack_mates"], serde_json::json!([2]));
    }

    #[test]
    fn without_rwc_nothing_is_hidden() {
        let r = report(vec![vcpu(0, 1024, false, &[1]), vcpu(1, 100, true, &[0])]);
        assert!(hidden(&from_report(&r, false)).is_empty());
    }

    /// The kernel's preferred vCPUs reach the BPF side as a flag, and a
    /// kernel without the mask marks none (all equal to consolidation).
    #[test]
    fn the_kernels_preferred_vcpus_are_flagged_and_none_without_a_mask() {
        let r = report(vec![vcpu(0, 1024, false, &[]), vcpu(1, 1024, false, &[])]);
        let mut m = from_report(&r, true);
        let preferred_bit = crate::bpf_intf::vs_vcpu_flags_VS_VCPU_PREFERRED;
        mark_preferred(&mut m, Some(&[1, 7]));
        assert_eq!(
            m.iter().map(|v| v.preferred).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(m[1].flag_bits() & preferred_bit, preferred_bit);
        assert_eq!(m[0].flag_bits() & preferred_bit, 0);
        mark_preferred(&mut m, None);
        assert!(m
            .iter()
            .all(|v| !v.preferred && v.flag_bits() & preferred_bit == 0));
    }

    fn with_episodes(mut v: VcpuReport, p50_us: f64) -> VcpuReport {
        let e = v.episodes.as_mut().unwrap();
        e.p50_us = p50_us;
        v
    }

    #[test]
    fn low_latency_vcpus_are_those_near_the_shortest_episodes() {
        let r = report(vec![
            with_episodes(vcpu(0, 1024, false, &[]), 2000.0),
            with_episodes(vcpu(1, 1024, false, &[]), 2600.0),
            with_episodes(vcpu(2, 1024, false, &[]), 6000.0),
            with_episodes(vcpu(3, 1024, false, &[]), 4100.0),
        ]);
        let low: Vec<bool> = from_report(&r, true)
            .iter()
            .map(|m| m.low_latency)
            .collect();
        assert_eq!(low, vec![true, true, false, false]);
    }

    #[test]
    fn short_episodes_are_low_latency_whatever_the_others() {
        let mut quiet = vcpu(1, 1024, false, &[]);
        quiet.episodes = None;
        let r = report(vec![with_episodes(vcpu(0, 1024, false, &[]), 400.0), quiet]);
        assert!(from_report(&r, true).iter().all(|m| m.low_latency));
    }

    #[test]
    fn a_hidden_vcpu_does_not_set_the_bar() {
        // vCPU 1 is a stacked sibling with short episodes; RWC hides it,
        // so vCPU 0's 2 ms episodes are the shortest that count.
        let r = report(vec![
            with_episodes(vcpu(0, 1024, false, &[1]), 2000.0),
            with_episodes(vcpu(1, 1024, false, &[0]), 600.0),
        ]);
        assert!(from_report(&r, true)[0].low_latency);
    }
}
