//! Lab layout files (TOML): the guest's vCPUs, where each runs on the host,
//! how much CPU bandwidth it gets, phases that change that over time, and
//! the commands to run inside. See docs/lab.md and lab/layouts/.

use crate::error::{LabError, LayoutError};
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
    /// From QEMU start to the guest's first command (default by root:
    /// [`Layout::boot_timeout_s`]).
    #[serde(default, rename = "boot_timeout_s")]
    boot_timeout: Option<f64>,
    /// For all commands together.
    #[serde(default = "default_run_timeout")]
    pub run_timeout_s: f64,
    /// Host-side placement of vCPUs at start; vCPUs not listed float freely.
    #[serde(default, rename = "vcpu")]
    pub placements: Vec<Placement>,
    /// Changes applied at given times after the first command starts.
    #[serde(default, rename = "phase")]
    pub phases: Vec<PhaseSpec>,
    /// Host threads that take a host CPU in a rhythm (see host_load.rs).
    #[serde(default, rename = "host_load")]
    pub host_loads: Vec<crate::host_load::HostLoad>,
    /// Guest kernel: "default" (Debian's cloud kernel of the host's release)
    /// or "sched_ext" (Debian's newest, which has sched_ext).
    #[serde(default)]
    pub kernel: crate::kernel::KernelChoice,
    /// The guest's root file system: "busybox" (a shell and vsched, the
    /// fastest to boot) or "debian" (Debian 13 with systemd as init, for
    /// what runs under systemd; docs/lab.md, "A Debian guest").
    #[serde(default)]
    pub root: GuestRoot,
    /// Debian packages installed in a "debian" root beyond its base.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Shell commands run in the guest, in order (busybox sh with vsched on
    /// PATH; in a "debian" root /bin/sh, run by a systemd unit as root).
    #[serde(default)]
    pub commands: Vec<String>,
    /// Extra host files copied into the guest: busybox root, /bin with
    /// their libraries; "debian" root, /opt/vsched-lab/bin, at the end of
    /// PATH, as they are.
    #[serde(default)]
    pub extra_binaries: Vec<PathBuf>,
    /// What `vsched lab check` runs and how it scores.
    #[serde(default)]
    pub check: CheckSpec,
}

/// What a guest boots into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuestRoot {
    #[default]
    Busybox,
    Debian,
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
    /// Stop the vCPU's host thread outright (a live migration's stop, a
    /// long steal) until a later phase lets it run (`freeze`).
    #[serde(default)]
    pub frozen: bool,
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
/// A busybox guest boots in 2-10 s under TCG; a Debian guest, whose
/// systemd starts its units before the commands, in 15-25 s on a quiet
/// host. Both defaults leave room for a busy one.
fn default_boot_timeout(root: GuestRoot) -> f64 {
    match root {
        GuestRoot::Busybox => 30.0,
        GuestRoot::Debian => 120.0,
    }
}
fn default_run_timeout() -> f64 {
    120.0
}
fn default_check_command() -> String {
    // Longer windows than the default probe: the lab's host is a small,
    // shared machine, and one probe is scored on its own. Episodes from
    // 2 ms on: the host's 1 ms timeline (the truth) is certain to see an
    // off period only from there, while the guest also counts 0.2-0.5 ms
    // stalls of the emulator that the host cannot see (docs/lab.md).
    "vsched probe --json --duration 1s --heavy 200ms --min-episode 2ms".to_string()
}

/// QEMU's x86 machines take more, but the lab's hosts have a few CPUs and
/// every vCPU is a host thread: beyond this a guest is only stacking.
const MAX_VCPUS: u32 = 64;
/// The guest's kernel plus its initramfs (unpacked into RAM, with vsched
/// and its libraries) need about this much.
const MIN_MEMORY_MIB: u32 = 128;

/// A Debian root is unpacked into RAM whole (about 170 MB) with room left
/// for systemd, apt and what a check installs.
const MIN_DEBIAN_MEMORY_MIB: u32 = 1024;

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
    /// The host thread is stopped.
    pub frozen: bool,
}

impl Layout {
    pub fn load(path: &Path, host_cpus: &[u32]) -> Result<Layout, LabError> {
        let text = std::fs::read_to_string(path).map_err(|source| LabError::ReadLayout {
            path: path.to_path_buf(),
            source,
        })?;
        let in_file = |source| LabError::Layout {
            path: path.to_path_buf(),
            source,
        };
        let mut layout: Layout = toml::from_str(&text)
            .map_err(LayoutError::Syntax)
            .map_err(in_file)?;
        if layout.name.is_none() {
            layout.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        layout.validate(host_cpus).map_err(in_file)?;
        Ok(layout)
    }

    pub fn parse(text: &str, host_cpus: &[u32]) -> Result<Layout, LayoutError> {
        let layout: Layout = toml::from_str(text).map_err(LayoutError::Syntax)?;
        layout.validate(host_cpus)?;
        Ok(layout)
    }

    /// From QEMU start to the guest's first command: the layout's
    /// `boot_timeout_s`, else the default of its root.
    pub fn boot_timeout_s(&self) -> f64 {
        self.boot_timeout
            .unwrap_or_else(|| default_boot_timeout(self.root))
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("layout")
    }

    /// Checks everything QEMU and the host would otherwise reject later.
    pub fn validate(&self, host_cpus: &[u32]) -> Result<(), LayoutError> {
        if self.vcpus == 0 || self.vcpus > MAX_VCPUS {
            return Err(LayoutError::VcpuCount { vcpus: self.vcpus });
        }
        if self.memory_mib < MIN_MEMORY_MIB {
            return Err(LayoutError::Memory {
                memory_mib: self.memory_mib,
            });
        }
        for (key, value) in [
            ("boot_timeout_s", self.boot_timeout_s()),
            ("run_timeout_s", self.run_timeout_s),
        ] {
            if !(value > 0.0 && value.is_finite()) {
                return Err(LayoutError::Timeout { key, value });
            }
        }
        self.validate_placements("[[vcpu]]", &self.placements, host_cpus)?;
        let mut last = 0.0;
        for (i, p) in self.phases.iter().enumerate() {
            if p.at_s.is_nan() || p.at_s <= last {
                return Err(LayoutError::PhaseOrder {
                    phase: i + 1,
                    at_s: p.at_s,
                    previous: last,
                });
            }
            last = p.at_s;
            self.validate_placements(
                &format!("[[phase]] {} [[phase.vcpu]]", i + 1),
                &p.placements,
                host_cpus,
            )?;
        }
        crate::host_load::validate(&self.host_loads, host_cpus).map_err(LayoutError::HostLoad)?;
        match self.root {
            GuestRoot::Busybox if !self.packages.is_empty() => {
                return Err(LayoutError::PackagesNeedDebian)
            }
            GuestRoot::Debian if self.memory_mib < MIN_DEBIAN_MEMORY_MIB => {
                return Err(LayoutError::DebianMemory {
                    memory_mib: self.memory_mib,
                    min: MIN_DEBIAN_MEMORY_MIB,
                })
            }
            _ => {}
        }
        if let Some(bad) = self
            .packages
            .iter()
            .find(|p| !crate::debian_root::valid_package_name(p))
        {
            return Err(LayoutError::PackageName { name: bad.clone() });
        }
        let mut names = BTreeSet::new();
        for b in &self.extra_binaries {
            if !b.is_file() {
                return Err(LayoutError::ExtraBinary { path: b.clone() });
            }
            // Both land in one directory of the guest, by name.
            if !names.insert(b.file_name()) {
                return Err(LayoutError::ExtraBinaryName { path: b.clone() });
            }
        }
        Ok(())
    }

    fn validate_placements(
        &self,
        section: &str,
        placements: &[Placement],
        host_cpus: &[u32],
    ) -> Result<(), LayoutError> {
        let section = || section.to_string();
        let mut seen = BTreeSet::new();
        for p in placements {
            let id = p.id;
            if id >= self.vcpus {
                return Err(LayoutError::NoSuchVcpu {
                    section: section(),
                    id,
                    vcpus: self.vcpus,
                });
            }
            if !seen.insert(id) {
                return Err(LayoutError::VcpuTwice {
                    section: section(),
                    id,
                });
            }
            if let Some(host_cpu) = p.host_cpu.filter(|h| !host_cpus.contains(h)) {
                return Err(LayoutError::NoSuchHostCpu {
                    section: section(),
                    id,
                    host_cpu,
                    offered: vsched_model::cpulist::format_cpu_list(host_cpus),
                });
            }
            match (p.quota_us, p.period_us) {
                (None, None) => {}
                (Some(quota_us), Some(period_us)) => {
                    if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period_us) {
                        return Err(LayoutError::Period {
                            section: section(),
                            id,
                            period_us,
                            min: MIN_PERIOD_US,
                            max: MAX_PERIOD_US,
                        });
                    }
                    if quota_us < MIN_QUOTA_US {
                        return Err(LayoutError::QuotaTooSmall {
                            section: section(),
                            id,
                            quota_us,
                            min: MIN_QUOTA_US,
                        });
                    }
                    if quota_us > period_us {
                        return Err(LayoutError::QuotaAbovePeriod {
                            section: section(),
                            id,
                            quota_us,
                            period_us,
                        });
                    }
                }
                _ => {
                    return Err(LayoutError::HalfBandwidth {
                        section: section(),
                        id,
                    })
                }
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
                    frozen: p.frozen,
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
            (
                "vcpus = 2\npackages = [\"curl\"]",
                "only a root = \"debian\"",
            ),
            ("vcpus = 2\nroot = \"debian\"", "needs at least 1024"),
            (
                "vcpus = 2\nroot = \"debian\"\nmemory_mib = 1024\npackages = [\"curl;reboot\"]",
                "not a Debian package name",
            ),
            ("vcpus = 2\nroot = \"alpine\"", "unknown variant"),
        ];
        for (text, needle) in cases {
            let e = Layout::parse(text, HOST).unwrap_err();
            let e = match &e {
                // The TOML parser's own message is the source.
                LayoutError::Syntax(inner) => format!("{e}: {inner}"),
                _ => e.to_string(),
            };
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
