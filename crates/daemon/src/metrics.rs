//! The vCPU model as Prometheus metrics. Every family is declared once in
//! `VCPU_GAUGES` (name, help, how to read it from a vCPU's report), so the
//! names, units and help text live in one place; docs/daemon.md lists
//! them. Names follow Prometheus' conventions: a `vsched_` prefix, base
//! units (`_seconds`, `_ratio` for 0-1 shares), `_total` for counters.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use vsched_model::report::{Overhead, TopologyReport, VcpuReport};

/// A float gauge (the default Gauge holds i64).
type FloatGauge = Gauge<f64, AtomicU64>;
/// A float counter, for seconds.
type FloatCounter = Counter<f64, AtomicU64>;
/// One label, the vCPU's number.
type VcpuLabel = Vec<(&'static str, String)>;

/// A per-vCPU gauge: its name (without the `vsched_` prefix the registry
/// adds), help text, and its value in a report (None: not measured, the
/// series is left out rather than reported as 0).
struct VcpuGauge {
    name: &'static str,
    help: &'static str,
    read: fn(&VcpuReport) -> Option<f64>,
}

const PCT: f64 = 100.0;
const US_PER_S: f64 = 1e6;

const VCPU_GAUGES: &[VcpuGauge] = &[
    VcpuGauge {
        name: "vcpu_capacity",
        help: "Measured capacity of the vCPU, 1024 = the strongest vCPU of the VM",
        read: |v| v.capacity.map(f64::from),
    },
    VcpuGauge {
        name: "vcpu_available_ratio",
        help: "Share of time the vCPU can run (not switched off by the host), 0-1",
        read: |v| v.available_pct.map(|p| p / PCT),
    },
    VcpuGauge {
        name: "vcpu_steal_ratio",
        help: "Share of time the hypervisor reported as stolen (/proc/stat steal), 0-1",
        read: |v| v.steal_pct.map(|p| p / PCT),
    },
    VcpuGauge {
        name: "vcpu_hidden_steal_ratio",
        help: "Share of time lost to the host that steal accounting did not report, 0-1",
        read: |v| v.hidden_steal_pct.map(|p| p / PCT),
    },
    VcpuGauge {
        name: "vcpu_inactive_episode_mean_seconds",
        help: "Mean length of the vCPU's inactive episodes (switched off by the host)",
        read: |v| v.episodes.as_ref().map(|e| e.mean_us / US_PER_S),
    },
    VcpuGauge {
        name: "vcpu_inactive_episode_p95_seconds",
        help: "95th percentile of the vCPU's inactive-episode lengths",
        read: |v| v.episodes.as_ref().map(|e| e.p95_us / US_PER_S),
    },
    VcpuGauge {
        name: "vcpu_stacked",
        help: "1 if the vCPU shares a physical CPU with another vCPU of this VM",
        read: |v| Some(f64::from(u8::from(v.stacked))),
    },
    VcpuGauge {
        name: "vcpu_straggler",
        help: "1 if the vCPU is far weaker than the others (a straggler)",
        read: |v| Some(f64::from(u8::from(v.straggler))),
    },
];

/// The metrics, updated from every report, and their registry.
pub struct Metrics {
    registry: Registry,
    vcpu: Vec<Family<VcpuLabel, FloatGauge>>,
    updates: Counter,
    probe_cpu: FloatGauge,
    probe_idle_cpu: FloatGauge,
    last_update: FloatGauge,
    rwc_hidden: Family<VcpuLabel, Gauge>,
    rwc_changes: Counter,
    sched_loaded: Gauge,
    sched_events: Family<EventLabel, Counter>,
    vcpu_parked: Family<VcpuLabel, Gauge>,
    pair_latency: Family<PairLabel, FloatGauge>,
    own_cpu: FloatCounter,
    own_resident: Gauge,
    thread_cpu: Family<ThreadLabel, FloatGauge>,
}

/// One label, a thread's name.
type ThreadLabel = Vec<(&'static str, String)>;

/// Two vCPUs (the lower-numbered first) and how they relate.
type PairLabel = Vec<(&'static str, String)>;

/// One label, the scheduler counter's name.
type EventLabel = Vec<(&'static str, &'static str)>;

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("vsched");
        let vcpu = VCPU_GAUGES
            .iter()
            .map(|g| {
                let family = Family::<VcpuLabel, FloatGauge>::default();
                registry.register(g.name, g.help, family.clone());
                family
            })
            .collect();
        let updates = Counter::default();
        registry.register(
            "model_updates",
            "Probe reports the daemon has taken into its model",
            updates.clone(),
        );
        let probe_cpu = FloatGauge::default();
        registry.register(
            "probe_cpu_ratio",
            "CPU the probers took from programs (heavy windows, bookkeeping), as a share of one vCPU",
            probe_cpu.clone(),
        );
        let probe_idle_cpu = FloatGauge::default();
        registry.register(
            "probe_idle_cpu_ratio",
            "CPU the light probers spun on otherwise idle cycles (SCHED_IDLE, yielding to any program), as a share of one vCPU",
            probe_idle_cpu.clone(),
        );
        let last_update = FloatGauge::default();
        registry.register(
            "model_update_timestamp_seconds",
            "Unix time of the last probe report",
            last_update.clone(),
        );
        let rwc_hidden = Family::<VcpuLabel, Gauge>::default();
        registry.register(
            "rwc_vcpu_hidden",
            "1 if user-space RWC keeps the managed cgroups off the vCPU now (only with --rwc-cgroup)",
            rwc_hidden.clone(),
        );
        let rwc_changes = Counter::default();
        registry.register(
            "rwc_changes",
            "Changes of the set of vCPUs user-space RWC hides (each rewrites the managed cpusets)",
            rwc_changes.clone(),
        );
        let pair_latency = Family::<PairLabel, FloatGauge>::default();
        registry.register(
            "vcpu_pair_latency_seconds",
            "One-way cache-line transfer latency between two vCPUs (label relation: smt, llc, cross_llc, cross_socket; stacked pairs have none), from the last topology probe",
            pair_latency.clone(),
        );
        let sched_loaded = Gauge::default();
        registry.register(
            "sched_loaded",
            "1 while the daemon's sched_ext scheduler is loaded (only with --sched)",
            sched_loaded.clone(),
        );
        let vcpu_parked = Family::<VcpuLabel, Gauge>::default();
        registry.register(
            "vcpu_parked",
            "1 if consolidation keeps work off the vCPU now: the scheduler's normal tasks (--sched --consolidate) or every managed cgroup (--consolidate-cgroups)",
            vcpu_parked.clone(),
        );
        let sched_events = Family::<EventLabel, Counter>::default();
        registry.register(
            "sched_events",
            "The sched_ext scheduler's decisions by kind (docs/sched.md lists them; only with --sched)",
            sched_events.clone(),
        );
        let own_cpu = FloatCounter::default();
        registry.register(
            "process_cpu_seconds",
            "CPU time the daemon has used, all its threads (probers, consolidation, serving)",
            own_cpu.clone(),
        );
        let own_resident = Gauge::default();
        registry.register(
            "process_resident_memory_bytes",
            "The daemon's resident memory",
            own_resident.clone(),
        );
        let thread_cpu = Family::<ThreadLabel, FloatGauge>::default();
        registry.register(
            "thread_cpu_seconds",
            "CPU time of the daemon's live threads so far, by name (probers; consolidate-N, one per --consolidate-cgroups cgroup; metrics; status)",
            thread_cpu.clone(),
        );
        Metrics {
            registry,
            vcpu,
            updates,
            probe_cpu,
            probe_idle_cpu,
            last_update,
            rwc_hidden,
            rwc_changes,
            sched_loaded,
            sched_events,
            vcpu_parked,
            pair_latency,
            own_cpu,
            own_resident,
            thread_cpu,
        }
    }

    /// Takes in one probe report's per-vCPU rows and the probers' cost.
    pub fn update(&self, vcpus: &[VcpuReport], overhead: Option<&Overhead>, unix_time_ms: u64) {
        for (family, gauge) in self.vcpu.iter().zip(VCPU_GAUGES) {
            for v in vcpus {
                let label = vec![("vcpu", v.cpu.to_string())];
                match (gauge.read)(v) {
                    Some(value) => {
                        family.get_or_create(&label).set(value);
                    }
                    None => {
                        family.remove(&label);
                    }
                }
            }
        }
        if let Some(o) = overhead {
            self.probe_cpu
                .set(o.heavy_and_bookkeeping_pct_of_one_vcpu / PCT);
            self.probe_idle_cpu.set(o.light_pct_of_one_vcpu / PCT);
        }
        self.last_update.set(unix_time_ms as f64 / 1e3);
        self.updates.inc();
    }

    /// The topology probe's pair latencies (a report without a topology
    /// leaves the last ones; a pair no longer measured disappears).
    pub fn update_topology(&self, topology: Option<&TopologyReport>) {
        let Some(t) = topology else { return };
        self.pair_latency.clear();
        for (i, &a) in t.cpus.iter().enumerate() {
            for (j, &b) in t.cpus.iter().enumerate().skip(i + 1) {
                let latency = t
                    .latency_ns
                    .get(i)
                    .and_then(|row| row.get(j))
                    .copied()
                    .flatten();
                let relation = t
                    .relation
                    .get(i)
                    .and_then(|row| row.get(j))
                    .copied()
                    .flatten();
                if let (Some(ns), Some(rel)) = (latency, relation) {
                    let rel = serde_json::to_value(rel)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let label = vec![
                        ("vcpu_a", a.to_string()),
                        ("vcpu_b", b.to_string()),
                        ("relation", rel),
                    ];
                    self.pair_latency.get_or_create(&label).set(ns / 1e9);
                }
            }
        }
    }

    /// User-space RWC's state after a report: `vcpus` are the report's,
    /// `hidden` those kept off now; `changed` when the set just changed.
    pub fn update_rwc(&self, vcpus: &[VcpuReport], hidden: &[u32], changed: bool) {
        for v in vcpus {
            let label = vec![("vcpu", v.cpu.to_string())];
            self.rwc_hidden
                .get_or_create(&label)
                .set(i64::from(hidden.contains(&v.cpu)));
        }
        if changed {
            self.rwc_changes.inc();
        }
    }

    /// The scheduler's state: loaded or not, and its counters' increase
    /// since the last call, by name.
    pub fn update_sched(&self, loaded: bool, increase: &[(&'static str, u64)]) {
        self.sched_loaded.set(i64::from(loaded));
        for &(name, by) in increase {
            self.sched_events
                .get_or_create(&vec![("event", name)])
                .inc_by(by);
        }
    }

    /// Which of the report's `vcpus` consolidation parks now.
    pub fn update_parked(&self, vcpus: &[VcpuReport], parked: &[u32]) {
        for v in vcpus {
            let label = vec![("vcpu", v.cpu.to_string())];
            self.vcpu_parked
                .get_or_create(&label)
                .set(i64::from(parked.contains(&v.cpu)));
        }
    }

    /// The daemon's own cost, read now.
    fn update_own_cost(&self, cost: &crate::own_cost::OwnCost) {
        // The counter keeps the total it was last given: add what is new
        // (the process's CPU time never goes back).
        let new = cost.cpu_s - self.own_cpu.get();
        if new > 0.0 {
            self.own_cpu.inc_by(new);
        }
        if let Some(bytes) = cost.resident_bytes {
            self.own_resident
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        // Ended threads go; only live ones have a time to report.
        self.thread_cpu.clear();
        for (name, s) in &cost.threads {
            self.thread_cpu
                .get_or_create(&vec![("thread", name.clone())])
                .set(*s);
        }
    }

    /// The metrics in the OpenMetrics text format, the daemon's own cost
    /// read at this moment.
    pub fn render(&self) -> String {
        self.update_own_cost(&crate::own_cost::read());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vsched_model::timeline::EpisodeStats;

    fn vcpu(cpu: u32, capacity: Option<u32>, available: f64, straggler: bool) -> VcpuReport {
        VcpuReport {
            cpu,
            capacity,
            available_pct: Some(available),
            steal_pct: Some(1.0),
            hidden_steal_pct: Some(2.0),
            preempted_pct: None,
            speed_units_per_us: None,
            episodes: Some(EpisodeStats {
                count: 10,
                mean_us: 1500.0,
                p50_us: 1400.0,
                p95_us: 3000.0,
                max_us: 4000.0,
            }),
            stacked_with: vec![],
            smt_siblings: vec![],
            llc_group: None,
            socket_group: None,
            straggler,
            stacked: false,
        }
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn every_vcpu_gets_its_series_in_base_units() {
        let m = Metrics::new();
        m.update(
            &[
                vcpu(0, Some(1024), 97.0, false),
                vcpu(1, Some(100), 12.5, true),
            ],
            Some(&Overhead {
                elapsed_s: 10.0,
                light_pct_of_one_vcpu: 0.5,
                heavy_and_bookkeeping_pct_of_one_vcpu: 0.25,
                ..Overhead::default()
            }),
            1_700_000_000_000,
        );
        let text = m.render();
        assert_eq!(
            value(&text, "vsched_vcpu_capacity{vcpu=\"1\"}"),
            Some(100.0)
        );
        assert_eq!(
            value(&text, "vsched_vcpu_available_ratio{vcpu=\"1\"}"),
            Some(0.125)
        );
        assert_eq!(value(&text, "vsched_vcpu_straggler{vcpu=\"1\"}"), Some(1.0));
        assert_eq!(value(&text, "vsched_vcpu_straggler{vcpu=\"0\"}"), Some(0.0));
        assert_eq!(
            value(
                &text,
                "vsched_vcpu_inactive_episode_mean_seconds{vcpu=\"0\"}"
            ),
            Some(0.0015)
        );
        assert_eq!(value(&text, "vsched_probe_cpu_ratio"), Some(0.0025));
        assert_eq!(value(&text, "vsched_probe_idle_cpu_ratio"), Some(0.005));
        assert_eq!(value(&text, "vsched_model_updates_total"), Some(1.0));
        // The daemon's own cost, read at the scrape: this test process's.
        assert!(value(&text, "vsched_process_cpu_seconds_total").is_some_and(|s| s > 0.0));
        assert!(value(&text, "vsched_process_resident_memory_bytes").is_some_and(|b| b > 0.0));
        assert!(
            text.contains("vsched_thread_cpu_seconds{thread=\""),
            "{text}"
        );
        for g in VCPU_GAUGES {
            assert!(
                text.contains(&format!("# HELP vsched_{} ", g.name)),
                "{}",
                g.name
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    /// Every `vsched_*` name in `text` (metric names: lower case, digits, _).
    fn names_in(text: &str) -> std::collections::BTreeSet<String> {
        text.match_indices("vsched_")
            .map(|(i, _)| {
                text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect()
            })
            .collect()
    }

    /// The Grafana dashboard and the alerting rules in deploy/ name only
    /// series the daemon serves (a renamed metric would leave an empty
    /// panel or an alert that never fires, silently).
    #[test]
    fn the_dashboard_and_the_alerts_use_only_served_series() {
        let m = Metrics::new();
        m.update(
            &[vcpu(0, Some(1024), 97.0, false)],
            Some(&Overhead::default()),
            0,
        );
        // What --rwc-cgroup, --sched and a topology probe add.
        m.update_rwc(&[vcpu(0, Some(1024), 97.0, false)], &[], true);
        m.update_sched(true, &[("wake_prev", 1)]);
        m.update_topology(Some(
            &serde_json::from_value(serde_json::json!({
                "mode": "full", "valid": null, "cpus": [0, 1],
                "latency_ns": [[null, 75.0], [75.0, null]],
                "relation": [[null, "llc"], ["llc", null]],
                "levels": [], "pairs_probed": 1, "pairs_inferred": 0, "probes": []
            }))
            .unwrap(),
        ));
        let served: std::collections::BTreeSet<String> = m
            .render()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next().map(str::to_string))
            .collect();
        for (file, text) in [
            (
                "deploy/grafana/vsched-dashboard.json",
                include_str!("../../../deploy/grafana/vsched-dashboard.json"),
            ),
            (
                "deploy/prometheus/vsched-alerts.yml",
                include_str!("../../../deploy/prometheus/vsched-alerts.yml"),
            ),
        ] {
            let used = names_in(text);
            assert!(!used.is_empty(), "{file} names no series");
            for name in used {
                assert!(
                    served.contains(&name),
                    "{file}: {name} is not served: {served:?}"
                );
            }
        }
    }

    #[test]
    fn rwc_state_is_served_per_vcpu_with_its_changes() {
        let m = Metrics::new();
        let vcpus = [
            vcpu(0, Some(1024), 97.0, false),
            vcpu(1, Some(100), 12.5, true),
        ];
        m.update_rwc(&vcpus, &[1], true);
        m.update_rwc(&vcpus, &[1], false);
        let text = m.render();
        assert_eq!(
            value(&text, "vsched_rwc_vcpu_hidden{vcpu=\"1\"}"),
            Some(1.0)
        );
        assert_eq!(
            value(&text, "vsched_rwc_vcpu_hidden{vcpu=\"0\"}"),
            Some(0.0)
        );
        assert_eq!(value(&text, "vsched_rwc_changes_total"), Some(1.0));
    }

    #[test]
    fn pair_latencies_are_served_once_per_pair_with_their_relation() {
        let t: TopologyReport = serde_json::from_value(serde_json::json!({
            "mode": "full", "valid": null, "cpus": [0, 1, 2],
            "latency_ns": [[null, 75.0, null], [75.0, null, 90.0], [null, 90.0, null]],
            "relation": [[null, "llc", "stacked"], ["llc", null, "cross_llc"], ["stacked", "cross_llc", null]],
            "levels": [], "pairs_probed": 3, "pairs_inferred": 0, "probes": []
        }))
        .unwrap();
        let m = Metrics::new();
        m.update_topology(Some(&t));
        m.update_topology(None);
        let text = m.render();
        assert_eq!(
            value(
                &text,
                "vsched_vcpu_pair_latency_seconds{vcpu_a=\"0\",vcpu_b=\"1\",relation=\"llc\"}"
            ),
            Some(75e-9)
        );
        assert!(text.contains("relation=\"cross_llc\""));
        // Stacked pairs have no latency; no pair twice.
        assert!(!text.contains("relation=\"stacked\""));
        assert!(!text.contains("vcpu_a=\"1\",vcpu_b=\"0\""));
    }

    #[test]
    fn scheduler_counters_add_up_by_event() {
        let m = Metrics::new();
        m.update_sched(true, &[("bvs_idle", 3), ("wake_prev", 0)]);
        m.update_sched(true, &[("bvs_idle", 2)]);
        let text = m.render();
        assert_eq!(value(&text, "vsched_sched_loaded"), Some(1.0));
        assert_eq!(
            value(&text, "vsched_sched_events_total{event=\"bvs_idle\"}"),
            Some(5.0)
        );
        m.update_sched(false, &[]);
        assert_eq!(value(&m.render(), "vsched_sched_loaded"), Some(0.0));
    }

    #[test]
    fn a_value_no_longer_measured_disappears_rather_than_reading_zero() {
        let m = Metrics::new();
        m.update(&[vcpu(0, Some(1024), 97.0, false)], None, 0);
        m.update(&[vcpu(0, None, 97.0, false)], None, 0);
        assert_eq!(value(&m.render(), "vsched_vcpu_capacity{vcpu=\"0\"}"), None);
    }
}
