//! A probing session: runs the probers in steps and turns their results
//! into reports. A one-shot probe is one step; `--watch` is a series of
//! steps sharing smoothed state (EMA) and the last known topology.

use crate::plan::{StepPlan, StepSignals, TopologyStep};
use crate::vcap::{self, SampleConfig};
use crate::vtop::{self, VtopConfig};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use vsched_model::capacity::{VcpuEstimate, VcpuSample};
use vsched_model::report::{self, Overhead, ProbeReport, Settings, Timing, TopologyReport};
use vsched_model::{EpisodeFilter, Timeline, Topology};
use vsched_os::clock;

/// What to measure and how.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub cpus: Vec<u32>,
    pub capacity: bool,
    pub activity: bool,
    pub topology: bool,
    pub sample: SampleConfig,
    pub filter: EpisodeFilter,
    pub vtop: VtopConfig,
    pub straggler_ratio: f64,
    pub ema_half_life_s: f64,
}

/// A progress callback: what is being measured, and the fraction done.
pub type ProgressFn<'a> = &'a dyn Fn(&str, f64);

/// Raw per-window data of the last step, for `--trace-out`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RawStep {
    pub light: Vec<Timeline>,
    pub heavy: Vec<Timeline>,
}

pub struct Session {
    opts: ProbeOptions,
    estimates: Vec<VcpuEstimate>,
    topology: Option<(Topology, TopologyReport)>,
    started: Instant,
    last_sample: Option<Instant>,
    sequence: u64,
    light_policy: String,
    heavy_policy: String,
    light_cpu_ns: u64,
    /// CPU of the capacity rounds beyond their light spinning (the heavy
    /// windows and each round's set-up) and of the topology probes, and
    /// how many steps ran each, for [`Session::overhead`]'s split.
    heavy_cpu_ns: u64,
    topology_cpu_ns: u64,
    heavy_steps: u64,
    topology_steps: u64,
    /// The process's CPU when the session began: what a command did
    /// before (loading a BPF scheduler, whose verifier runs in this
    /// process) is not the probers' cost.
    cpu_at_start: u64,
    pub last_raw: RawStep,
}

impl Session {
    pub fn new(opts: ProbeOptions) -> Session {
        let estimates = opts
            .cpus
            .iter()
            .map(|&c| VcpuEstimate::new(c, opts.ema_half_life_s))
            .collect();
        Session {
            opts,
            estimates,
            topology: None,
            started: Instant::now(),
            last_sample: None,
            sequence: 0,
            light_policy: String::new(),
            heavy_policy: String::new(),
            light_cpu_ns: 0,
            heavy_cpu_ns: 0,
            topology_cpu_ns: 0,
            heavy_steps: 0,
            topology_steps: 0,
            cpu_at_start: clock::process_cpu_ns(),
            last_raw: RawStep::default(),
        }
    }

    /// Seeds the topology to validate against (from an earlier report).
    pub fn set_known_topology(&mut self, previous: &TopologyReport) {
        self.topology = Some((previous.to_topology(), previous.clone()));
    }

    /// What the last step says about the next one's windows
    /// (`WatchSchedule::next`).
    pub fn signals(&self) -> StepSignals {
        StepSignals {
            shifting: self.estimates.iter().any(VcpuEstimate::shifting),
            shifted: self.estimates.iter().any(VcpuEstimate::shifted),
            stacked: self.opts.topology
                && self.topology.as_ref().is_some_and(|(t, _)| t.has_stacked()),
        }
    }

    pub fn measures_vcpus(&self) -> bool {
        self.opts.capacity || self.opts.activity
    }

    /// Runs one step and reports the state after it.
    /// `progress` (for a terminal) is called while the step runs; pass
    /// `None` otherwise, so that no extra thread disturbs the probers.
    pub fn step(&mut self, plan: StepPlan, progress: Option<ProgressFn>) -> ProbeReport {
        let step_start = Instant::now();
        let mut warnings = Vec::new();
        let mut timing = Timing::default();

        if self.measures_vcpus() && (plan.light || plan.heavy) {
            let cfg = SampleConfig {
                light_ns: if plan.light {
                    self.opts.sample.light_ns
                } else {
                    0
                },
                heavy_ns: if plan.heavy {
                    self.opts.sample.heavy_ns
                } else {
                    0
                },
                ..self.opts.sample
            };
            let t = Instant::now();
            let cpu_before = clock::process_cpu_ns();
            let vcap_progress = progress.map(|p| move |f| p("capacity/activity", f));
            let round = vcap::sample(
                &self.opts.cpus,
                &cfg,
                vcap_progress.as_ref().map(|p| p as &dyn Fn(f64)),
            );
            timing.capacity_ms = ms(t);
            self.fold_in(&round);
            if !round.light_policy.is_empty() {
                self.light_policy = round.light_policy.clone();
            }
            if !round.heavy_policy.is_empty() {
                self.heavy_policy = round.heavy_policy.clone();
            }
            self.light_cpu_ns += round.light_cpu_ns;
            // The round's CPU beyond its light window is the heavy one's
            // (the light spinning is counted by the probers themselves).
            let round_cpu = clock::process_cpu_ns().saturating_sub(cpu_before);
            self.heavy_cpu_ns += round_cpu.saturating_sub(round.light_cpu_ns);
            self.heavy_steps += u64::from(plan.heavy);
            warnings.extend(round.warnings.iter().cloned());
            self.last_raw = RawStep {
                light: round.light,
                heavy: round.heavy,
            };
        }

        if self.opts.topology && plan.topology != TopologyStep::Skip {
            let t = Instant::now();
            let cpu_before = clock::process_cpu_ns();
            self.probe_topology(plan.topology, &|what, f| {
                if let Some(p) = progress {
                    p(what, f)
                }
            });
            timing.topology_ms = ms(t);
            self.topology_cpu_ns += clock::process_cpu_ns().saturating_sub(cpu_before);
            self.topology_steps += 1;
        }

        self.sequence += 1;
        timing.total_ms = ms(step_start);
        self.report(timing, warnings)
    }

    fn fold_in(&mut self, round: &vcap::SampleRound) {
        self.last_sample = Some(Instant::now());
        let now_s = self.started.elapsed().as_secs_f64();
        for est in &mut self.estimates {
            let light = round.light.iter().find(|t| t.cpu == est.cpu);
            let heavy = round.heavy.iter().find(|t| t.cpu == est.cpu);
            if light.is_none() && heavy.is_none() {
                continue;
            }
            let sample = VcpuSample::from_timelines(est.cpu, light, heavy, &self.opts.filter);
            est.update(&sample, now_s);
        }
    }

    fn probe_topology(&mut self, step: TopologyStep, progress: &dyn Fn(&str, f64)) {
        if step == TopologyStep::Validate {
            if let Some((known, _)) = &self.topology {
                let (probes, valid) = vtop::validate(known, &self.opts.vtop);
                if valid {
                    let mut rep = report::topology_report(known, "validate", Some(true), probes, 0);
                    // Keep the full probe's matrix: validation re-measured only a few pairs.
                    if let Some((_, prev)) = &self.topology {
                        rep.latency_ns = prev.latency_ns.clone();
                    }
                    self.topology = Some((known.clone(), rep));
                    return;
                }
                let full = vtop::probe_full(&self.opts.cpus, &self.opts.vtop, &|f| {
                    progress("topology", f)
                });
                let rep = report::topology_report(
                    &full.topology,
                    "validate",
                    Some(false),
                    full.probes,
                    full.inferred,
                );
                self.topology = Some((full.topology, rep));
                return;
            }
        }
        let full = vtop::probe_full(&self.opts.cpus, &self.opts.vtop, &|f| {
            progress("topology", f)
        });
        let rep = report::topology_report(&full.topology, "full", None, full.probes, full.inferred);
        self.topology = Some((full.topology, rep));
    }

    fn report(&self, timing: Timing, warnings: Vec<String>) -> ProbeReport {
        let measured = self.last_sample.is_some();
        let estimates = measured.then_some(self.estimates.as_slice());
        let topology = self.topology.as_ref().filter(|_| self.opts.topology);
        let vcpus = report::vcpu_reports(
            &self.opts.cpus,
            estimates,
            self.opts.capacity,
            self.opts.activity,
            topology.map(|(t, _)| t),
            self.opts.straggler_ratio,
        );
        let topo_report = topology.map(|(_, r)| r.clone());
        let verdicts = report::verdicts(&vcpus, topo_report.as_ref());
        ProbeReport {
            schema: report::SCHEMA_NAME.to_string(),
            schema_version: report::SCHEMA_VERSION,
            sequence: self.sequence,
            unix_time_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            settings: Settings {
                capacity: self.opts.capacity,
                activity: self.opts.activity,
                topology: self.opts.topology,
                light_ms: self.opts.sample.light_ns as f64 / 1e6,
                heavy_ms: self.opts.sample.heavy_ns as f64 / 1e6,
                min_episode_us: self.opts.filter.min_episode_ns as f64 / 1e3,
                merge_us: self.opts.filter.merge_ns as f64 / 1e3,
                straggler_ratio: self.opts.straggler_ratio,
                ema_half_life_s: self.opts.ema_half_life_s,
                light_policy: self.light_policy.clone(),
                heavy_policy: self.heavy_policy.clone(),
            },
            vcpus,
            topology: topo_report,
            verdicts,
            warnings,
            timing,
            overhead: None,
        }
    }

    /// CPU spent since the session began, split into light-phase spinning and the rest.
    pub fn overhead(&self) -> Overhead {
        let elapsed_s = self.started.elapsed().as_secs_f64().max(1e-9);
        let total_ns = clock::process_cpu_ns().saturating_sub(self.cpu_at_start);
        let light = self.light_cpu_ns.min(total_ns);
        let pct = |ns: u64| (ns as f64 / 1e9 / elapsed_s * 100.0 * 1000.0).round() / 1000.0;
        Overhead {
            elapsed_s: (elapsed_s * 1000.0).round() / 1000.0,
            light_pct_of_one_vcpu: pct(light),
            heavy_and_bookkeeping_pct_of_one_vcpu: pct(total_ns - light),
            heavy_pct_of_one_vcpu: pct(self.heavy_cpu_ns),
            topology_pct_of_one_vcpu: pct(self.topology_cpu_ns),
            steps: self.sequence,
            heavy_steps: self.heavy_steps,
            topology_steps: self.topology_steps,
        }
    }
}

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1e6).round() / 1e3
}
