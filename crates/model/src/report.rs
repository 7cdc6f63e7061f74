//! The probe report: what `vsched probe --json` prints and what later parts
//! (policies, exporters, the lab's scorer) consume. Its JSON Schema is
//! `docs/schema/probe-v1.json`; bump `SCHEMA_VERSION` on any incompatible change.

use crate::capacity::{normalize_capacities, stragglers, VcpuEstimate};
use crate::timeline::EpisodeStats;
use crate::topology::{Level, PairProbe, Relation, Topology};
use serde::{Deserialize, Serialize};

pub const SCHEMA_NAME: &str = "vsched.probe";
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub schema: String,
    pub schema_version: u32,
    /// 1 for a one-shot probe; counts updates under `--watch`.
    pub sequence: u64,
    pub unix_time_ms: u64,
    pub settings: Settings,
    pub vcpus: Vec<VcpuReport>,
    pub topology: Option<TopologyReport>,
    /// One line per anomaly, for people.
    pub verdicts: Vec<String>,
    /// What could not be measured, or measured only approximately, and why.
    pub warnings: Vec<String>,
    pub timing: Timing,
    /// Under `--watch`: CPU the probing has cost so far.
    pub overhead: Option<Overhead>,
}

impl ProbeReport {
    /// The groups of vCPUs this report found stacked on one host CPU,
    /// each sorted, in order (empty when none are, or the topology was
    /// not probed).
    pub fn stacked_groups(&self) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = self
            .vcpus
            .iter()
            .filter(|v| !v.stacked_with.is_empty())
            .map(|v| {
                let mut g = v.stacked_with.clone();
                g.push(v.cpu);
                g.sort_unstable();
                g
            })
            .collect();
        groups.sort();
        groups.dedup();
        groups
    }
}

/// CPU spent by probing, as a share of one vCPU's time since probing began.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Overhead {
    pub elapsed_s: f64,
    /// Light-phase spinning: idle cycles only (SCHED_IDLE), given up to any task.
    pub light_pct_of_one_vcpu: f64,
    /// Everything else: heavy phases, topology checks, bookkeeping, output.
    pub heavy_and_bookkeeping_pct_of_one_vcpu: f64,
    /// Of that: the capacity rounds beyond their light spinning, which is
    /// mostly the heavy windows (every vCPU at high priority), plus each
    /// round's thread starts and set-up...
    #[serde(default)]
    pub heavy_pct_of_one_vcpu: f64,
    /// ...and the topology probes and checks (the vCPUs of each pair
    /// probed, at high priority). What is left is bookkeeping.
    #[serde(default)]
    pub topology_pct_of_one_vcpu: f64,
    /// Steps so far, and how many of them ran heavy windows and topology
    /// probes or checks.
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub heavy_steps: u64,
    #[serde(default)]
    pub topology_steps: u64,
}

impl Overhead {
    /// One line for people: the part that competes with the guest's work,
    /// split, then the idle-cycle spinning.
    pub fn describe(&self) -> String {
        format!(
            "{:.2}% of one vCPU outside the light windows (heavy windows and set-up {:.2}%, \
             topology {:.2}%), {:.1}% in SCHED_IDLE light windows",
            self.heavy_and_bookkeeping_pct_of_one_vcpu,
            self.heavy_pct_of_one_vcpu,
            self.topology_pct_of_one_vcpu,
            self.light_pct_of_one_vcpu
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub capacity: bool,
    pub activity: bool,
    pub topology: bool,
    pub light_ms: f64,
    pub heavy_ms: f64,
    pub min_episode_us: f64,
    pub merge_us: f64,
    pub straggler_ratio: f64,
    pub ema_half_life_s: f64,
    /// Scheduling class the probers got: e.g. "SCHED_IDLE", "SCHED_FIFO:1", "nice:-20".
    pub light_policy: String,
    pub heavy_policy: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VcpuReport {
    pub cpu: u32,
    /// 1..=1024, the strongest vCPU being 1024; null if not measured.
    pub capacity: Option<u32>,
    /// Share of time the vCPU could run normal-priority work.
    pub available_pct: Option<f64>,
    /// Steal the kernel reported (/proc/stat).
    pub steal_pct: Option<f64>,
    /// Time the hypervisor took without reporting it as steal.
    pub hidden_steal_pct: Option<f64>,
    /// Time taken by guest work that outranks normal tasks (real-time tasks, interrupts).
    pub preempted_pct: Option<f64>,
    /// Work units per microsecond of running time (core speed; relative).
    pub speed_units_per_us: Option<f64>,
    /// Inactive episodes ("vCPU latency"); null if activity was not measured.
    pub episodes: Option<EpisodeStats>,
    pub stacked_with: Vec<u32>,
    pub smt_siblings: Vec<u32>,
    pub llc_group: Option<u32>,
    pub socket_group: Option<u32>,
    pub straggler: bool,
    pub stacked: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyReport {
    /// "full" or "validate".
    pub mode: String,
    /// For "validate": whether the earlier topology still holds.
    pub valid: Option<bool>,
    /// Row/column order of the matrices.
    pub cpus: Vec<u32>,
    /// One-way cache-line transfer latency; null on the diagonal, for stacked
    /// pairs (no transfer to time) and for pairs not probed.
    pub latency_ns: Vec<Vec<Option<f64>>>,
    pub relation: Vec<Vec<Option<Relation>>>,
    pub levels: Vec<Level>,
    pub pairs_probed: usize,
    pub pairs_inferred: usize,
    /// Raw results of the pairs actually probed.
    pub probes: Vec<PairProbe>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Timing {
    pub capacity_ms: f64,
    pub topology_ms: f64,
    pub total_ms: f64,
}

fn pct(frac: f64) -> f64 {
    (frac * 1000.0).round() / 10.0
}

/// Per-vCPU rows from the capacity/activity estimates and the topology.
pub fn vcpu_reports(
    cpus: &[u32],
    estimates: Option<&[VcpuEstimate]>,
    capacity: bool,
    activity: bool,
    topology: Option<&Topology>,
    straggler_ratio: f64,
) -> Vec<VcpuReport> {
    let raw: Vec<Option<f64>> = cpus
        .iter()
        .map(|&c| {
            estimates
                .filter(|_| capacity)
                .and_then(|es| es.iter().find(|e| e.cpu == c && e.updates > 0))
                .and_then(VcpuEstimate::raw_capacity)
        })
        .collect();
    let caps = normalize_capacities(&raw);
    let slow = stragglers(&caps, straggler_ratio);
    cpus.iter()
        .enumerate()
        .map(|(i, &cpu)| {
            // A vCPU whose prober never ran reports nothing rather than defaults.
            let est = estimates.and_then(|es| es.iter().find(|e| e.cpu == cpu && e.updates > 0));
            let measured = |f: fn(&VcpuEstimate) -> f64| est.map(|e| pct(f(e)));
            let stacked_with = topology.map_or_else(Vec::new, |t| t.peers(cpu, Relation::Stacked));
            VcpuReport {
                cpu,
                capacity: caps[i],
                available_pct: measured(VcpuEstimate::available_frac),
                steal_pct: measured(VcpuEstimate::reported_steal_frac),
                hidden_steal_pct: measured(VcpuEstimate::hidden_frac),
                preempted_pct: measured(VcpuEstimate::preempted_frac),
                speed_units_per_us: est
                    .filter(|_| capacity)
                    .and_then(VcpuEstimate::speed)
                    .map(|s| (s * 1000.0).round() / 1000.0),
                episodes: est.filter(|_| activity).map(VcpuEstimate::episodes),
                stacked: !stacked_with.is_empty(),
                smt_siblings: topology.map_or_else(Vec::new, |t| {
                    t.peers(cpu, Relation::Smt)
                        .into_iter()
                        .filter(|c| !stacked_with.contains(c))
                        .collect()
                }),
                stacked_with,
                llc_group: topology.and_then(|t| t.group_index(cpu, Relation::Llc)),
                socket_group: topology.and_then(|t| t.group_index(cpu, Relation::CrossLlc)),
                straggler: slow[i],
            }
        })
        .collect()
}

/// Matrices of the topology report in `cpus` order.
pub fn topology_report(
    t: &Topology,
    mode: &str,
    valid: Option<bool>,
    probes: Vec<PairProbe>,
    pairs_inferred: usize,
) -> TopologyReport {
    let key = |a: u32, b: u32| (a.min(b), a.max(b));
    TopologyReport {
        mode: mode.to_string(),
        valid,
        cpus: t.cpus.clone(),
        latency_ns: matrix(&t.cpus, |a, b| {
            t.latency_ns
                .get(&key(a, b))
                .copied()
                .flatten()
                .map(|l| (l * 10.0).round() / 10.0)
        }),
        relation: matrix(&t.cpus, |a, b| t.relation(a, b)),
        levels: t.levels.clone(),
        pairs_probed: probes.len(),
        pairs_inferred,
        probes,
    }
}

impl TopologyReport {
    /// Rebuilds the classified topology (e.g. from an earlier `--json` output)
    /// so it can be validated.
    pub fn to_topology(&self) -> Topology {
        let mut relations = std::collections::BTreeMap::new();
        let mut latency_ns = std::collections::BTreeMap::new();
        for (i, &a) in self.cpus.iter().enumerate() {
            for (j, &b) in self.cpus.iter().enumerate().skip(i + 1) {
                if let Some(rel) = self.relation[i][j] {
                    relations.insert((a.min(b), a.max(b)), rel);
                    latency_ns.insert((a.min(b), a.max(b)), self.latency_ns[i][j]);
                }
            }
        }
        Topology {
            cpus: self.cpus.clone(),
            relations,
            latency_ns,
            levels: self.levels.clone(),
        }
    }
}

/// A square matrix over `cpus` with `None` on the diagonal.
fn matrix<T>(cpus: &[u32], f: impl Fn(u32, u32) -> Option<T>) -> Vec<Vec<Option<T>>> {
    cpus.iter()
        .map(|&a| {
            cpus.iter()
                .map(|&b| if a == b { None } else { f(a, b) })
                .collect()
        })
        .collect()
}

/// One sentence per anomaly, most important first.
pub fn verdicts(vcpus: &[VcpuReport], topology: Option<&TopologyReport>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = topology {
        for (i, &a) in t.cpus.iter().enumerate() {
            for (j, &b) in t.cpus.iter().enumerate().skip(i + 1) {
                if t.relation[i][j] == Some(Relation::Stacked) {
                    let fast = t
                        .probes
                        .iter()
                        .find(|p| (p.a, p.b) == (a.min(b), a.max(b)))
                        .map(|p| {
                            format!(
                                " ({} overlapping transfers in {:.0} ms)",
                                p.fast_transfers,
                                p.window_ns as f64 / 1e6
                            )
                        })
                        .unwrap_or_default();
                    out.push(format!(
                        "vCPU {a} is stacked with vCPU {b}: they never run at the same time{fast}"
                    ));
                }
            }
        }
        if t.valid == Some(false) {
            out.push("topology changed since the previous probe: re-probed in full".to_string());
        }
    }
    let mean_cap = {
        let caps: Vec<f64> = vcpus
            .iter()
            .filter_map(|v| v.capacity)
            .map(f64::from)
            .collect();
        (!caps.is_empty()).then(|| caps.iter().sum::<f64>() / caps.len() as f64)
    };
    for v in vcpus {
        if v.straggler {
            out.push(format!(
                "vCPU {} is a straggler: capacity {} against a mean of {:.0}",
                v.cpu,
                v.capacity.unwrap_or(0),
                mean_cap.unwrap_or(0.0)
            ));
        }
        if let Some(avail) = v.available_pct {
            if avail < 90.0 {
                let mut causes = Vec::new();
                let hyp = v
                    .steal_pct
                    .unwrap_or(0.0)
                    .max(v.hidden_steal_pct.unwrap_or(0.0));
                if hyp >= 1.0 {
                    causes.push(format!("{hyp:.0}% to the hypervisor"));
                }
                if v.preempted_pct.unwrap_or(0.0) >= 1.0 {
                    causes.push(format!(
                        "{:.0}% to higher-priority guest work",
                        v.preempted_pct.unwrap_or(0.0)
                    ));
                }
                let eps = v
                    .episodes
                    .filter(|e| e.count > 0)
                    .map(|e| {
                        format!(
                            "; switched off for {:.1} ms at a time (p95 {:.1} ms)",
                            e.mean_us / 1e3,
                            e.p95_us / 1e3
                        )
                    })
                    .unwrap_or_default();
                out.push(format!(
                    "vCPU {} is available only {:.0}% of the time ({}){eps}",
                    v.cpu,
                    avail,
                    if causes.is_empty() {
                        "cause unclear".to_string()
                    } else {
                        causes.join(", ")
                    }
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::VcpuSample;
    use crate::topology::{classify, TopologyParams};

    fn est(cpu: u32, avail: f64, speed: f64) -> VcpuEstimate {
        let mut e = VcpuEstimate::new(cpu, 0.0);
        e.update(
            &VcpuSample {
                cpu,
                hypervisor_frac: 1.0 - avail,
                speed: Some(speed),
                episodes_ns: vec![5_000_000; 4],
                ..Default::default()
            },
            0.0,
        );
        e
    }

    #[test]
    fn rows_verdicts_and_json_round_trip() {
        let probes = vec![
            PairProbe {
                a: 0,
                b: 1,
                transfers: 3,
                fast_transfers: 0,
                window_ns: 80_000_000,
                latency_ns: None,
                attempts: 3,
            },
            PairProbe {
                a: 0,
                b: 2,
                transfers: 90_000,
                fast_transfers: 90_000,
                window_ns: 20_000_000,
                latency_ns: Some(50.0),
                attempts: 1,
            },
            PairProbe {
                a: 1,
                b: 2,
                transfers: 90_000,
                fast_transfers: 90_000,
                window_ns: 20_000_000,
                latency_ns: Some(52.0),
                attempts: 1,
            },
        ];
        let topo = classify(&[0, 1, 2], &probes, &TopologyParams::default());
        let ests = vec![est(0, 0.5, 10.0), est(1, 0.5, 10.0), est(2, 1.0, 10.0)];
        let rows = vcpu_reports(&[0, 1, 2], Some(&ests), true, true, Some(&topo), 0.2);
        assert_eq!(rows[2].capacity, Some(1024));
        assert_eq!(rows[0].capacity, Some(512));
        assert_eq!(rows[0].stacked_with, vec![1]);
        assert!(rows[0].stacked && !rows[2].stacked);
        assert_eq!(rows[0].llc_group, rows[2].llc_group);
        let tr = topology_report(&topo, "full", None, probes, 0);
        assert_eq!(tr.to_topology(), topo);
        assert_eq!(tr.relation[0][1], Some(Relation::Stacked));
        assert_eq!(tr.latency_ns[0][2], Some(50.0));
        assert_eq!(tr.latency_ns[1][1], None);
        let v = verdicts(&rows, Some(&tr));
        assert!(v[0].starts_with("vCPU 0 is stacked with vCPU 1"), "{v:?}");
        assert!(
            v.iter()
                .any(|s| s.starts_with("vCPU 0 is available only 50%")),
            "{v:?}"
        );
        let report = ProbeReport {
            schema: SCHEMA_NAME.into(),
            schema_version: SCHEMA_VERSION,
            sequence: 1,
            unix_time_ms: 0,
            settings: Settings {
                capacity: true,
                activity: true,
                topology: true,
                light_ms: 200.0,
                heavy_ms: 100.0,
                min_episode_us: 200.0,
                merge_us: 20.0,
                straggler_ratio: 0.2,
                ema_half_life_s: 2.0,
                light_policy: "SCHED_IDLE".into(),
                heavy_policy: "SCHED_FIFO:1".into(),
            },
            vcpus: rows,
            topology: Some(tr),
            verdicts: v,
            warnings: vec![],
            timing: Timing::default(),
            overhead: None,
        };
        let json = serde_json::to_string(&report).unwrap();
        let back: ProbeReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn unmeasured_fields_are_null() {
        let rows = vcpu_reports(&[0], None, false, false, None, 0.2);
        assert_eq!(rows[0].capacity, None);
        let never = [VcpuEstimate::new(0, 1.0)];
        let rows = vcpu_reports(&[0], Some(&never), true, true, None, 0.2);
        assert_eq!((rows[0].capacity, rows[0].available_pct), (None, None));
        assert_eq!(rows[0].episodes, None);
        assert_eq!(rows[0].llc_group, None);
    }
}
