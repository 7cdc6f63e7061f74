//! Lab layout files (TOML): the guest's vCPUs, where each runs on the host,
//! how much CPU bandwidth it gets, phases that change that over time, and
//! the commands to run inside. See docs/lab.md and lab/layouts/.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// Shown in reports; defaults to the file name.
    pub name: Option<String>,
    pub description: Option<String>,
    pub vcpus: u32,
    #[serde(default = "default_memory")]
    pub memory_mib: u32,
    /// From QEMU start to the guest's first command.
    #[serde(default = "default_boot_timeout")]
    pub boot_timeout_s: f64,
    /// For all commands together.
    #[serde(default = "default_run_timeout")]
    pub run_timeout_s: f64,
    /// Host-side placement of vCPUs at start; vCPUs not listed float freely.
    #[serde(default, rename = "vcpu")]
    pub placements: Vec<Placement>,
    /// Changes applied at given times after the first command starts.
    #[serde(default, rename = "phase")]
    pub phases: Vec<PhaseSpec>,
    /// Shell commands run in the guest, in order (busybox sh; vsched is on PATH).
    #[serde(default)]
    pub commands: Vec<String>,
    /// Extra host binaries copied into the guest's /bin (with their libraries).
    #[serde(default)]
    pub extra_binaries: Vec<PathBuf>,
    /// What `vsched lab check` runs and how it scores.
    #[serde(default)]
    pub check: CheckSpec,
}

/// Where one vCPU runs on the host and how much of it it may use.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub id: u32,
    /// Pin the vCPU's host thread here; two vCPUs on one host CPU are stacked.
    pub host_cpu: Option<u32>,
    /// CPU bandwidth: at most `quota_us` of every `period_us` (cgroup cpu controller).
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    pub at_s: f64,
    #[serde(rename = "vcpu")]
    pub placements: Vec<Placement>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Command producing probe JSON (one object, or one per line with --watch).
    #[serde(default = "default_check_command")]
    pub command: String,
}

impl Default for CheckSpec {
    fn default() -> Self {
        CheckSpec {
            command: default_check_command(),
        }
    }
}

fn default_memory() -> u32 {
    256
}
fn default_boot_timeout() -> f64 {
    30.0
}
fn default_run_timeout() -> f64 {
    120.0
}
fn default_check_command() -> String {
    // Longer windows than the default probe: the lab's host is a small,
    // shared machine, and one probe is scored on its own.
    "vsched probe --json --duration 1s --heavy 200ms".to_string()
}

/// Linux's CFS bandwidth limits (cpu.cfs_period_us, cpu.cfs_quota_us).
const MIN_PERIOD_US: u64 = 1_000;
const MAX_PERIOD_US: u64 = 1_000_000;
const MIN_QUOTA_US: u64 = 1_000;

/// Effective state of one vCPU during a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VcpuState {
    pub host_cpu: Option<u32>,
    /// (quota, period) in µs.
    pub bandwidth: Option<(u64, u64)>,
}

impl Layout {
    pub fn load(path: &Path, host_cpus: &[u32]) -> Result<Layout> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading layout {}", path.display()))?;
        let mut layout: Layout = toml::from_str(&text)
            .with_context(|| format!("layout {} is not valid", path.display()))?;
        if layout.name.is_none() {
            layout.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        layout
            .validate(host_cpus)
            .with_context(|| format!("layout {}", path.display()))?;
        Ok(layout)
    }

    pub fn parse(text: &str, host_cpus: &[u32]) -> Result<Layout> {
        let layout: Layout = toml::from_str(text)?;
        layout.validate(host_cpus)?;
        Ok(layout)
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("layout")
    }

    /// Checks everything QEMU and the host would otherwise reject later.
    pub fn validate(&self, host_cpus: &[u32]) -> Result<()> {
        if self.vcpus == 0 || self.vcpus > 64 {
            bail!("vcpus = {}: must be between 1 and 64", self.vcpus);
        }
        if self.memory_mib < 128 {
            bail!(
                "memory_mib = {}: the guest needs at least 128",
                self.memory_mib
            );
        }
        for (what, v) in [
            ("boot_timeout_s", self.boot_timeout_s),
            ("run_timeout_s", self.run_timeout_s),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                bail!("{what} = {v}: must be a positive number of seconds");
            }
        }
        self.validate_placements("[[vcpu]]", &self.placements, host_cpus)?;
        let mut last = 0.0;
        for (i, p) in self.phases.iter().enumerate() {
            if p.at_s.is_nan() || p.at_s <= last {
                bail!(
                    "[[phase]] {}: at_s = {} must be after the previous phase ({last})",
                    i + 1,
                    p.at_s
                );
            }
            last = p.at_s;
            self.validate_placements(
                &format!("[[phase]] {} [[phase.vcpu]]", i + 1),
                &p.placements,
                host_cpus,
            )?;
        }
        for b in &self.extra_binaries {
            if !b.is_file() {
                bail!("extra binary {} does not exist", b.display());
            }
        }
        Ok(())
    }

    fn validate_placements(
        &self,
        ctx: &str,
        placements: &[Placement],
        host_cpus: &[u32],
    ) -> Result<()> {
        let mut seen = BTreeSet::new();
        for p in placements {
            if p.id >= self.vcpus {
                bail!(
                    "{ctx}: vCPU id {} does not exist (vcpus = {})",
                    p.id,
                    self.vcpus
                );
            }
            if !seen.insert(p.id) {
                bail!("{ctx}: vCPU {} is listed twice", p.id);
            }
            if let Some(h) = p.host_cpu {
                if !host_cpus.contains(&h) {
                    bail!(
                        "{ctx}: vCPU {} wants host CPU {h}, but this host offers only {}",
                        p.id,
                        vsched_model::cpulist::format_cpu_list(host_cpus)
                    );
                }
            }
            match (p.quota_us, p.period_us) {
                (None, None) => {}
                (Some(q), Some(per)) => {
                    if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&per) {
                        bail!("{ctx}: vCPU {}: period_us = {per} must be between {MIN_PERIOD_US} and {MAX_PERIOD_US}", p.id);
                    }
                    if q < MIN_QUOTA_US {
                        bail!(
                            "{ctx}: vCPU {}: quota_us = {q} must be at least {MIN_QUOTA_US}",
                            p.id
                        );
                    }
                    if q > per {
                        bail!("{ctx}: vCPU {}: quota_us = {q} exceeds period_us = {per} (a vCPU is one thread: at most 100%)", p.id);
                    }
                }
                _ => bail!(
                    "{ctx}: vCPU {}: give both quota_us and period_us, or neither",
                    p.id
                ),
            }
        }
        Ok(())
    }

    /// State of every vCPU after applying phases up to and including `phase`
    /// (0 = the initial placement, 1 = after the first [[phase]], ...).
    pub fn state_at(&self, phase: usize) -> Vec<VcpuState> {
        let mut state = vec![VcpuState::default(); self.vcpus as usize];
        let apply = |state: &mut Vec<VcpuState>, ps: &[Placement]| {
            for p in ps {
                state[p.id as usize] = VcpuState {
                    host_cpu: p.host_cpu,
                    bandwidth: p.quota_us.zip(p.period_us),
                };
            }
        };
        apply(&mut state, &self.placements);
        for ph in self.phases.iter().take(phase) {
            apply(&mut state, &ph.placements);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &[u32] = &[0, 1];

    #[test]
    fn parses_a_full_layout() {
        let l = Layout::parse(
            r#"
            vcpus = 3
            commands = ["vsched probe --json"]
            [[vcpu]]
            id = 0
            host_cpu = 0
            [[vcpu]]
            id = 1
            host_cpu = 1
            quota_us = 3000
            period_us = 10000
            [[phase]]
            at_s = 5
            [[phase.vcpu]]
            id = 2
            host_cpu = 0
            "#,
            HOST,
        )
        .unwrap();
        assert_eq!(l.memory_mib, 256);
        let s0 = l.state_at(0);
        assert_eq!(s0[1].bandwidth, Some((3000, 10000)));
        assert_eq!(s0[2].host_cpu, None);
        assert_eq!(l.state_at(1)[2].host_cpu, Some(0));
        assert!(l.check.command.starts_with("vsched probe --json"));
    }

    #[test]
    fn rejects_invalid_layouts_with_reasons() {
        let cases = [
            ("vcpus = 0", "between 1 and 64"),
            ("vcpus = 2\nbogus = 1", "unknown field"),
            ("vcpus = 2\n[[vcpu]]\nid = 2", "does not exist"),
            (
                "vcpus = 2\n[[vcpu]]\nid = 0\nhost_cpu = 7",
                "offers only 0-1",
            ),
            (
                "vcpus = 2\n[[vcpu]]\nid = 0\nquota_us = 20000\nperiod_us = 10000",
                "exceeds period_us",
            ),
            (
                "vcpus = 2\n[[vcpu]]\nid = 0\nquota_us = 2000",
                "both quota_us and period_us",
            ),
            (
                "vcpus = 2\n[[vcpu]]\nid = 0\n[[vcpu]]\nid = 0",
                "listed twice",
            ),
            ("vcpus = 2\n[[phase]]\nat_s = 0\nvcpu = []", "must be after"),
            ("vcpus = 2\nmemory_mib = 16", "at least 128"),
        ];
        for (text, needle) in cases {
            let e = format!("{:#}", Layout::parse(text, HOST).unwrap_err());
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
