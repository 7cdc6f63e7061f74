//! Host-side control of vCPU threads: pinning (stacking) and CPU bandwidth
//! through the cgroup cpu controller, v1 (`/sys/fs/cgroup/cpu`, as on the
//! development machines) or v2 (threaded cgroups, as on ordinary cloud VMs).
//! Every cgroup created is named `vsched-lab-<pid>` so that one left by a
//! killed run can be recognised and removed by the next.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Pins a host thread to `cpus`.
pub fn set_thread_affinity(tid: i32, cpus: &[u32]) -> Result<()> {
    vsched_os::affinity::set_thread_affinity(tid, cpus)
        .with_context(|| format!("pinning thread {tid} to CPUs {cpus:?}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    /// cgroup v1 cpu controller mounted at this path.
    V1(PathBuf),
    /// cgroup v2 unified hierarchy with the cpu controller available.
    V2(PathBuf),
}

/// Finds a usable cpu controller, v1 first (where it is mounted, v2 cannot have it).
pub fn detect() -> Option<Flavor> {
    for p in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        if Path::new(p).join("cpu.cfs_quota_us").exists() {
            return Some(Flavor::V1(PathBuf::from(p)));
        }
    }
    // cgroup v2: at /sys/fs/cgroup on unified systems, elsewhere (e.g.
    // /sys/fs/cgroup/unified) on hybrid ones; whichever has the cpu controller.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    cgroup2_mounts(&mounts)
        .into_iter()
        .find(|root| {
            std::fs::read_to_string(root.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
        })
        .map(Flavor::V2)
}

/// Mount points of cgroup2 file systems in /proc/self/mounts text.
fn cgroup2_mounts(mounts: &str) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(dir))
        })
        .collect()
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

/// The pid in a `vsched-lab-<pid>[-<n>]` name.
fn owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix("vsched-lab-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Removes `vsched-lab-<pid>` cgroups and work directories whose process is
/// gone (a run killed with SIGKILL cannot clean up after itself; its QEMU
/// dies with it through the parent-death signal). Returns what was removed.
pub fn sweep_stale() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner_pid(&name).is_some_and(|pid| !pid_alive(pid))
                && std::fs::remove_dir_all(e.path()).is_ok()
            {
                removed.push(e.path());
            }
        }
    }
    let roots = match detect() {
        Some(Flavor::V1(r)) | Some(Flavor::V2(r)) => vec![r],
        None => return removed,
    };
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("vsched-lab-")
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            if !pid_alive(pid) && remove_tree(&e.path()).is_ok() {
                removed.push(e.path());
            }
        }
    }
    removed
}

/// Removes a cgroup directory tree, children first (a cgroup can only be
/// removed once it has no threads and no children).
fn remove_tree(dir: &Path) -> Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path())?;
            }
        }
    }
    std::fs::remove_dir(dir).with_context(|| format!("removing cgroup {}", dir.display()))
}

/// Per-vCPU bandwidth cgroups of one lab run; removed on drop.
pub struct Bandwidth {
    flavor: Flavor,
    top: PathBuf,
    vcpus: BTreeMap<u32, PathBuf>,
}

impl Bandwidth {
    /// Creates the run's top cgroup; under v2 the QEMU process `pid` moves in.
    pub fn create(flavor: Flavor, pid: i32) -> Result<Bandwidth> {
        let root = match &flavor {
            Flavor::V1(r) | Flavor::V2(r) => r.clone(),
        };
        let top = root.join(format!("vsched-lab-{}", std::process::id()));
        std::fs::create_dir(&top)
            .with_context(|| format!("creating cgroup {} (needs root)", top.display()))?;
        let bw = Bandwidth {
            flavor,
            top,
            vcpus: BTreeMap::new(),
        };
        if let Flavor::V2(root) = &bw.flavor {
            // Threads can only be split across cgroups inside a threaded subtree.
            let _ = write(&root.join("cgroup.subtree_control"), "+cpu");
            write(&bw.top.join("cgroup.procs"), &pid.to_string())?;
            write(&bw.top.join("cgroup.subtree_control"), "+cpu")?;
        }
        Ok(bw)
    }

    /// Moves vCPU thread `tid` into its own cgroup limited to `quota/period`
    /// (µs), or unlimited with `None`.
    pub fn set(&mut self, vcpu: u32, tid: i32, limit: Option<(u64, u64)>) -> Result<()> {
        let dir = self.top.join(format!("vcpu{vcpu}"));
        if !self.vcpus.contains_key(&vcpu) {
            std::fs::create_dir(&dir)
                .with_context(|| format!("creating cgroup {}", dir.display()))?;
            if let Flavor::V2(_) = self.flavor {
                write(&dir.join("cgroup.type"), "threaded")?;
            }
            self.vcpus.insert(vcpu, dir.clone());
        }
        match &self.flavor {
            Flavor::V1(_) => {
                let (quota, period) = match limit {
                    Some((q, p)) => (q as i64, p),
                    None => (-1, 100_000),
                };
                // Lower the quota first when the period shrinks, or the kernel refuses.
                write(&dir.join("cpu.cfs_quota_us"), "-1")?;
                write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                write(&dir.join("tasks"), &tid.to_string())?;
            }
            Flavor::V2(_) => {
                let value = match limit {
                    Some((q, p)) => format!("{q} {p}"),
                    None => "max 100000".to_string(),
                };
                write(&dir.join("cpu.max"), &value)?;
                write(&dir.join("cgroup.threads"), &tid.to_string())?;
            }
        }
        Ok(())
    }

    /// How often and for how long vCPU `vcpu`'s cgroup has been throttled:
    /// (count, ns). Each throttling is one inactive episode of that vCPU.
    pub fn throttle_stats(&self, vcpu: u32) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(self.vcpus.get(&vcpu)?.join("cpu.stat")).ok()?;
        parse_throttle_stats(&text)
    }

    /// Removes the cgroups; call after the QEMU process has exited.
    pub fn remove(&mut self) -> Result<()> {
        if self.top.exists() {
            remove_tree(&self.top)?;
        }
        self.vcpus.clear();
        Ok(())
    }
}

impl Drop for Bandwidth {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// (nr_throttled, throttled ns) from a cpu.stat file, v1 or v2.
pub fn parse_throttle_stats(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    let count = field("nr_throttled ")?;
    let ns = field("throttled_time ").or_else(|| field("throttled_usec ").map(|us| us * 1000))?;
    Some((count, ns))
}

/// Refuses bandwidth control early with a useful message.
pub fn require_bandwidth() -> Result<Flavor> {
    match detect() {
        Some(f) => Ok(f),
        None => bail!(
            "the layout caps vCPU bandwidth, but no cgroup cpu controller is available \
             (neither /sys/fs/cgroup/cpu nor cgroup v2 with \"cpu\" in cgroup.controllers)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_mounts_unified_or_hybrid() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mounts(hybrid),
            vec![PathBuf::from("/sys/fs/cgroup/unified")]
        );
        let unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(
            cgroup2_mounts(unified),
            vec![PathBuf::from("/sys/fs/cgroup")]
        );
    }

    #[test]
    fn throttle_stats_of_both_cgroup_versions() {
        let v1 = "nr_periods 120\nnr_throttled 84\nthrottled_time 588000000\n";
        assert_eq!(parse_throttle_stats(v1), Some((84, 588_000_000)));
        let v2 = "usage_usec 5\nnr_periods 120\nnr_throttled 84\nthrottled_usec 588000\n";
        assert_eq!(parse_throttle_stats(v2), Some((84, 588_000_000)));
        assert_eq!(parse_throttle_stats("usage_usec 5\n"), None);
    }

    #[test]
    fn owner_pid_reads_both_name_forms() {
        assert_eq!(owner_pid("vsched-lab-123"), Some(123));
        assert_eq!(owner_pid("vsched-lab-123-4"), Some(123));
        assert_eq!(owner_pid("vsched-labx-1"), None);
        assert_eq!(owner_pid("other"), None);
    }

    /// The v2 path on a throw-away directory tree standing in for a cgroup2
    /// mount: which files get which values. (A real cgroup2 mount is needed
    /// only for the kernel's side; the end-to-end test runs where one has
    /// the cpu controller.)
    #[test]
    fn v2_caps_write_threaded_cgroups_and_cpu_max() {
        let root = std::env::temp_dir().join(format!("vsched-v2-tree-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let mut bw = Bandwidth::create(Flavor::V2(root.clone()), 4242).unwrap();
        let top = root.join(format!("vsched-lab-{}", std::process::id()));
        assert_eq!(read(&root.join("cgroup.subtree_control")), "+cpu");
        assert_eq!(read(&top.join("cgroup.procs")), "4242", "QEMU moves into the run's cgroup");
        assert_eq!(read(&top.join("cgroup.subtree_control")), "+cpu");
        bw.set(1, 4300, Some((3000, 10_000))).unwrap();
        let vcpu1 = top.join("vcpu1");
        assert_eq!(read(&vcpu1.join("cgroup.type")), "threaded");
        assert_eq!(read(&vcpu1.join("cpu.max")), "3000 10000");
        assert_eq!(read(&vcpu1.join("cgroup.threads")), "4300");
        // Lifting the cap keeps the thread in its cgroup, unlimited.
        bw.set(1, 4300, None).unwrap();
        assert_eq!(read(&vcpu1.join("cpu.max")), "max 100000");
        std::fs::write(vcpu1.join("cpu.stat"), "nr_throttled 3\nthrottled_usec 21000\n").unwrap();
        assert_eq!(bw.throttle_stats(1), Some((3, 21_000_000)));
        assert_eq!(bw.throttle_stats(0), None, "vCPU 0 has no cgroup");
        // A real cgroup directory is removed with its pseudo-files in it;
        // here they are plain files, so clear them first.
        for dir in [&vcpu1, &top] {
            for f in std::fs::read_dir(dir).unwrap().flatten() {
                if f.file_type().unwrap().is_file() {
                    std::fs::remove_file(f.path()).unwrap();
                }
            }
        }
        bw.remove().unwrap();
        assert!(!top.exists(), "the run's cgroups are gone");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v1_caps_write_quota_and_period() {
        let root = std::env::temp_dir().join(format!("vsched-v1-tree-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let mut bw = Bandwidth::create(Flavor::V1(root.clone()), 4242).unwrap();
        bw.set(0, 4301, Some((3000, 10_000))).unwrap();
        let vcpu0 = root.join(format!("vsched-lab-{}", std::process::id())).join("vcpu0");
        assert_eq!(read(&vcpu0.join("cpu.cfs_period_us")), "10000");
        assert_eq!(read(&vcpu0.join("cpu.cfs_quota_us")), "3000");
        assert_eq!(read(&vcpu0.join("tasks")), "4301");
        assert!(!vcpu0.join("cgroup.type").exists(), "v1 has no threaded cgroups");
        bw.set(0, 4301, None).unwrap();
        assert_eq!(read(&vcpu0.join("cpu.cfs_quota_us")), "-1");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
