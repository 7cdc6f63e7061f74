//! Host-side control of vCPU threads: pinning (stacking) and CPU bandwidth
//! through the cgroup cpu controller, v1 (`/sys/fs/cgroup/cpu`, as on the
//! development machines) or v2 (threaded cgroups, as on ordinary cloud VMs).
//! Every cgroup created is named `vsched-lab-<pid>` so that one left by a
//! killed run can be recognised and removed by the next.
//!
//! Cgroup file operations go through [`CgroupFs`] so that the logic (which
//! files, which values, in which order, and their removal) can be tested
//! against a directory tree standing in for a cgroup file system, and the
//! mount table is text ([`detect_in`]) for the same reason.

use crate::error::{LabError, Result};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Pins a host thread to `cpus`.
pub fn set_thread_affinity(tid: i32, cpus: &[u32]) -> Result<()> {
    vsched_os::affinity::set_thread_affinity(tid, cpus)
        .with_context(|| format!("pinning thread {tid} to CPUs {cpus:?}"))
}

/// Lets `set_thread_affinity` (kept as it is: it is being replaced
/// elsewhere) report its error as a [`LabError`] with its message.
trait WithContext<T> {
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> WithContext<T> for std::result::Result<T, io::Error> {
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| LabError::Os {
            what: what(),
            source,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    /// cgroup v1 cpu controller mounted at this path.
    V1(PathBuf),
    /// cgroup v2 hierarchy mounted at this path, with the cpu controller available.
    V2(PathBuf),
}

impl Flavor {
    /// Where the hierarchy is mounted: the lab's cgroups go right below it.
    pub fn root(&self) -> &Path {
        match self {
            Flavor::V1(r) | Flavor::V2(r) => r,
        }
    }
}

/// The file operations the lab does on cgroup file systems. [`SysFs`] does
/// them on the real ones; tests use a directory tree that records them.
pub trait CgroupFs: Send + Sync {
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Removes a cgroup (on a cgroup file system its interface files go with it).
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
}

/// The cgroup file systems the kernel mounts.
pub struct SysFs;

impl CgroupFs for SysFs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        std::fs::write(path, value)
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(std::fs::read_dir(path)?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect())
    }
}

/// Finds a usable cpu controller on this host (see [`detect_in`]).
pub fn detect() -> Option<Flavor> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    detect_in(&mounts, &SysFs)
}

/// Finds a usable cpu controller from a mount table (/proc/self/mounts
/// text): a cgroup v1 hierarchy holding the cpu controller with bandwidth
/// control (cpu.cfs_quota_us) first, since while v1 holds it v2 cannot have
/// it; else a cgroup2 mount whose cgroup.controllers lists "cpu" (at
/// /sys/fs/cgroup on unified systems, e.g. /sys/fs/cgroup/unified on hybrid
/// ones). Nothing is mounted or moved: a controller that is busy elsewhere
/// is not usable.
pub fn detect_in(mounts: &str, fs: &dyn CgroupFs) -> Option<Flavor> {
    let entries = mount_entries(mounts);
    let v1 = entries
        .iter()
        .filter(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "cpu"))
        .find(|m| fs.read(&m.dir.join("cpu.cfs_quota_us")).is_ok());
    if let Some(m) = v1 {
        return Some(Flavor::V1(m.dir.clone()));
    }
    entries
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .find(|m| controllers_include_cpu(fs, &m.dir))
        .map(|m| Flavor::V2(m.dir.clone()))
}

/// Why cgroup v2 bandwidth control is not available here, for a test that
/// needs it to say why it skipped: `None` when it is.
pub fn why_no_cgroup_v2(mounts: &str, fs: &dyn CgroupFs) -> Option<String> {
    if let Some(Flavor::V2(_)) = detect_in(mounts, fs) {
        return None;
    }
    let entries = mount_entries(mounts);
    let v2: Vec<String> = entries
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .map(|m| {
            let controllers = fs
                .read(&m.dir.join("cgroup.controllers"))
                .unwrap_or_default();
            format!(
                "{} (cgroup.controllers: {:?})",
                m.dir.display(),
                controllers.trim()
            )
        })
        .collect();
    let v1 = entries
        .iter()
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "cpu"));
    Some(match (v1, v2.is_empty()) {
        (_, true) => "no cgroup2 file system is mounted".to_string(),
        (Some(v1), false) => format!(
            "the cpu controller is held by the cgroup v1 hierarchy at {}, so no cgroup2 mount has it free: {}",
            v1.dir.display(),
            v2.join(", ")
        ),
        (None, false) => format!(
            "no cgroup2 mount has the cpu controller free: {}",
            v2.join(", ")
        ),
    })
}

fn controllers_include_cpu(fs: &dyn CgroupFs, dir: &Path) -> bool {
    fs.read(&dir.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
}

/// One line of a mount table.
struct MountEntry {
    dir: PathBuf,
    fstype: String,
    options: String,
}

fn mount_entries(mounts: &str) -> Vec<MountEntry> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype, options) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some(MountEntry {
                dir: PathBuf::from(dir),
                fstype: fstype.to_string(),
                options: options.to_string(),
            })
        })
        .collect()
}

fn write(fs: &dyn CgroupFs, path: &Path, value: &str) -> Result<()> {
    fs.write(path, value).map_err(|source| LabError::Cgroup {
        what: format!("writing {value:?} to"),
        path: path.to_path_buf(),
        source,
    })
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence; errno is this thread's.
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
    let roots: Vec<PathBuf> = detect().iter().map(|f| f.root().to_path_buf()).collect();
    sweep_stale_in(&std::env::temp_dir(), &roots, &SysFs, pid_alive)
}

/// [`sweep_stale`] over work directories in `tmp` and cgroups right below
/// `roots`, with `alive` telling whether an owner pid still runs.
pub fn sweep_stale_in(
    tmp: &Path,
    roots: &[PathBuf],
    fs: &dyn CgroupFs,
    alive: impl Fn(i32) -> bool,
) -> Vec<PathBuf> {
    let stale = |path: &Path| {
        path.file_name()
            .and_then(|n| owner_pid(&n.to_string_lossy()))
            .is_some_and(|pid| !alive(pid))
    };
    let mut removed = Vec::new();
    if let Ok(entries) = std::fs::read_dir(tmp) {
        for path in entries.flatten().map(|e| e.path()) {
            if stale(&path) && std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    for root in roots {
        for dir in fs.child_dirs(root).unwrap_or_default() {
            if stale(&dir) && remove_tree(fs, &dir).is_ok() {
                removed.push(dir);
            }
        }
    }
    removed
}

/// Removes a cgroup directory tree, children first (a cgroup can only be
/// removed once it has no threads and no children).
fn remove_tree(fs: &dyn CgroupFs, dir: &Path) -> Result<()> {
    for child in fs.child_dirs(dir).unwrap_or_default() {
        remove_tree(fs, &child)?;
    }
    fs.remove_dir(dir).map_err(|source| LabError::Cgroup {
        what: "removing cgroup".into(),
        path: dir.to_path_buf(),
        source,
    })
}

/// Per-vCPU bandwidth cgroups of one lab run; removed on drop.
pub struct Bandwidth {
    flavor: Flavor,
    fs: Arc<dyn CgroupFs>,
    top: PathBuf,
    vcpus: BTreeMap<u32, PathBuf>,
    /// Under v2: this run enabled cpu in the root's subtree_control (it was
    /// not there), so removal disables it again.
    enabled_cpu_at_root: bool,
}

impl Bandwidth {
    /// Creates the run's top cgroup on the real cgroup file system; under v2
    /// the QEMU process `pid` moves in.
    pub fn create(flavor: Flavor, pid: i32) -> Result<Bandwidth> {
        Bandwidth::create_with(flavor, pid, Arc::new(SysFs), std::process::id())
    }

    /// [`Bandwidth::create`] through `fs`, naming the cgroup after `owner`.
    pub fn create_with(
        flavor: Flavor,
        qemu_pid: i32,
        fs: Arc<dyn CgroupFs>,
        owner: u32,
    ) -> Result<Bandwidth> {
        let top = flavor.root().join(format!("vsched-lab-{owner}"));
        fs.create_dir(&top).map_err(|source| LabError::Cgroup {
            what: "creating cgroup (needs root)".into(),
            path: top.clone(),
            source,
        })?;
        let mut bw = Bandwidth {
            flavor,
            fs,
            top,
            vcpus: BTreeMap::new(),
            enabled_cpu_at_root: false,
        };
        if let Flavor::V2(root) = bw.flavor.clone() {
            // The cpu controller must be enabled from the root down to the
            // vCPU cgroups; threads can only be split across cgroups inside
            // a threaded subtree, whose domain (the top) holds the process.
            let control = root.join("cgroup.subtree_control");
            let enabled = bw.fs.read(&control).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                write(&*bw.fs, &control, "+cpu")?;
                bw.enabled_cpu_at_root = true;
            }
            write(&*bw.fs, &bw.top.join("cgroup.procs"), &qemu_pid.to_string())?;
            write(&*bw.fs, &bw.top.join("cgroup.subtree_control"), "+cpu")?;
        }
        Ok(bw)
    }

    /// Moves vCPU thread `tid` into its own cgroup limited to `quota/period`
    /// (µs), or unlimited with `None`.
    pub fn set(&mut self, vcpu: u32, tid: i32, limit: Option<(u64, u64)>) -> Result<()> {
        let fs = &*self.fs;
        let dir = self.top.join(format!("vcpu{vcpu}"));
        if !self.vcpus.contains_key(&vcpu) {
            fs.create_dir(&dir).map_err(|source| LabError::Cgroup {
                what: "creating cgroup".into(),
                path: dir.clone(),
                source,
            })?;
            if let Flavor::V2(_) = self.flavor {
                write(fs, &dir.join("cgroup.type"), "threaded")?;
            }
            self.vcpus.insert(vcpu, dir.clone());
        }
        match &self.flavor {
            Flavor::V1(_) => {
                let (quota, period) = match limit {
                    Some((q, p)) => (q as i64, p),
                    // Unlimited; the period is then irrelevant (the kernel's default).
                    None => (-1, 100_000),
                };
                // Lower the quota first when the period shrinks, or the kernel refuses.
                write(fs, &dir.join("cpu.cfs_quota_us"), "-1")?;
                write(fs, &dir.join("cpu.cfs_period_us"), &period.to_string())?;
                write(fs, &dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                write(fs, &dir.join("tasks"), &tid.to_string())?;
            }
            Flavor::V2(_) => {
                let value = match limit {
                    Some((q, p)) => format!("{q} {p}"),
                    // Unlimited, with the kernel's default period.
                    None => "max 100000".to_string(),
                };
                write(fs, &dir.join("cpu.max"), &value)?;
                write(fs, &dir.join("cgroup.threads"), &tid.to_string())?;
            }
        }
        Ok(())
    }

    /// How often and for how long vCPU `vcpu`'s cgroup has been throttled:
    /// (count, ns). Each throttling is one inactive episode of that vCPU.
    pub fn throttle_stats(&self, vcpu: u32) -> Option<(u64, u64)> {
        let text = self
            .fs
            .read(&self.vcpus.get(&vcpu)?.join("cpu.stat"))
            .ok()?;
        parse_throttle_stats(&text)
    }

    /// Removes the cgroups; call after the QEMU process has exited. Under v2
    /// the root's cpu controller is disabled again if this run enabled it.
    pub fn remove(&mut self) -> Result<()> {
        if self.top.exists() {
            remove_tree(&*self.fs, &self.top)?;
        }
        self.vcpus.clear();
        if self.enabled_cpu_at_root {
            // Refused (and then left as it is) if another cgroup uses it meanwhile.
            write(
                &*self.fs,
                &self.flavor.root().join("cgroup.subtree_control"),
                "-cpu",
            )?;
            self.enabled_cpu_at_root = false;
        }
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
    detect().ok_or(LabError::NoCpuController)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A throw-away directory tree standing in for a cgroup file system:
    /// writes append to the file (so each file keeps every value written to
    /// it) and every operation is logged in order, paths relative to the tree.
    /// Like the kernel, it refuses to remove a cgroup with children or with
    /// members (non-empty cgroup.procs, cgroup.threads or tasks).
    struct RecordingFs {
        base: PathBuf,
        log: Mutex<Vec<String>>,
    }

    impl RecordingFs {
        fn new(test: &str) -> Arc<RecordingFs> {
            let base =
                std::env::temp_dir().join(format!("vsched-labfs-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(&base).unwrap();
            Arc::new(RecordingFs {
                base,
                log: Mutex::new(Vec::new()),
            })
        }

        fn rel(&self, path: &Path) -> String {
            path.strip_prefix(&self.base)
                .unwrap_or(path)
                .display()
                .to_string()
        }

        fn note(&self, entry: String) {
            self.log.lock().unwrap().push(entry);
        }

        fn take_log(&self) -> Vec<String> {
            std::mem::take(&mut *self.log.lock().unwrap())
        }

        /// A directory of the tree with the given files (relative path, content).
        fn mkdir_with(&self, rel: &str, files: &[(&str, &str)]) -> PathBuf {
            let dir = self.base.join(rel);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in files {
                std::fs::write(dir.join(name), text).unwrap();
            }
            dir
        }

        /// What the processes leaving a cgroup tree (QEMU exiting) do to it.
        fn empty_members(&self, dir: &Path) {
            for f in ["cgroup.procs", "cgroup.threads", "tasks"] {
                if dir.join(f).exists() {
                    std::fs::write(dir.join(f), "").unwrap();
                }
            }
            for child in self.child_dirs(dir).unwrap() {
                self.empty_members(&child);
            }
        }
    }

    impl Drop for RecordingFs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    impl CgroupFs for RecordingFs {
        fn create_dir(&self, path: &Path) -> io::Result<()> {
            self.note(format!("mkdir {}", self.rel(path)));
            std::fs::create_dir(path)
        }
        fn write(&self, path: &Path, value: &str) -> io::Result<()> {
            self.note(format!("write {} {value}", self.rel(path)));
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?
                .write_all(format!("{value}\n").as_bytes())
        }
        fn read(&self, path: &Path) -> io::Result<String> {
            std::fs::read_to_string(path)
        }
        fn remove_dir(&self, path: &Path) -> io::Result<()> {
            if !self.child_dirs(path)?.is_empty() {
                return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
            }
            for f in ["cgroup.procs", "cgroup.threads", "tasks"] {
                if std::fs::read_to_string(path.join(f)).is_ok_and(|m| !m.trim().is_empty()) {
                    return Err(io::Error::from_raw_os_error(libc::EBUSY));
                }
            }
            self.note(format!("rmdir {}", self.rel(path)));
            // The interface files go with the cgroup.
            std::fs::remove_dir_all(path)
        }
        fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
            let mut dirs = SysFs.child_dirs(path)?;
            dirs.sort();
            Ok(dirs)
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    #[test]
    fn cgroup_v2_bandwidth_writes_removal_and_nothing_left() {
        let fs = RecordingFs::new("v2");
        let root = fs.mkdir_with(
            "unified",
            &[
                ("cgroup.controllers", "cpu io memory\n"),
                ("cgroup.subtree_control", ""),
            ],
        );
        let mut bw =
            Bandwidth::create_with(Flavor::V2(root.clone()), 4242, fs.clone(), 77).unwrap();
        bw.set(1, 501, Some((3000, 10000))).unwrap();
        bw.set(0, 500, None).unwrap();
        // A phase changes vCPU 1's cap: same cgroup, new limit.
        bw.set(1, 501, Some((2000, 10000))).unwrap();
        assert_eq!(
            fs.take_log(),
            [
                "mkdir unified/vsched-lab-77",
                "write unified/cgroup.subtree_control +cpu",
                "write unified/vsched-lab-77/cgroup.procs 4242",
                "write unified/vsched-lab-77/cgroup.subtree_control +cpu",
                "mkdir unified/vsched-lab-77/vcpu1",
                "write unified/vsched-lab-77/vcpu1/cgroup.type threaded",
                "write unified/vsched-lab-77/vcpu1/cpu.max 3000 10000",
                "write unified/vsched-lab-77/vcpu1/cgroup.threads 501",
                "mkdir unified/vsched-lab-77/vcpu0",
                "write unified/vsched-lab-77/vcpu0/cgroup.type threaded",
                "write unified/vsched-lab-77/vcpu0/cpu.max max 100000",
                "write unified/vsched-lab-77/vcpu0/cgroup.threads 500",
                "write unified/vsched-lab-77/vcpu1/cpu.max 2000 10000",
                "write unified/vsched-lab-77/vcpu1/cgroup.threads 501",
            ]
        );
        std::fs::write(
            root.join("vsched-lab-77/vcpu1/cpu.stat"),
            "usage_usec 9\nnr_periods 120\nnr_throttled 84\nthrottled_usec 588000\n",
        )
        .unwrap();
        assert_eq!(bw.throttle_stats(1), Some((84, 588_000_000)));
        assert_eq!(bw.throttle_stats(5), None, "no cgroup for vCPU 5");

        // While QEMU is still in it, the cgroup cannot go: the error names it.
        let err = bw.remove().unwrap_err();
        assert!(
            err.to_string().contains("removing cgroup")
                && err.to_string().contains("vsched-lab-77"),
            "{err}"
        );
        fs.take_log();
        fs.empty_members(&root.join("vsched-lab-77"));
        bw.remove().unwrap();
        assert_eq!(
            fs.take_log(),
            [
                "rmdir unified/vsched-lab-77/vcpu0",
                "rmdir unified/vsched-lab-77/vcpu1",
                "rmdir unified/vsched-lab-77",
                "write unified/cgroup.subtree_control -cpu",
            ]
        );
        assert!(
            fs.child_dirs(&root).unwrap().is_empty(),
            "cgroups left behind"
        );
        assert_eq!(read(&root.join("cgroup.subtree_control")), "+cpu\n-cpu\n");
        drop(bw);
        assert!(
            fs.take_log().is_empty(),
            "dropping after removal does nothing"
        );
    }

    #[test]
    fn cgroup_v2_leaves_a_root_cpu_controller_it_found_enabled() {
        let fs = RecordingFs::new("v2-enabled");
        let root = fs.mkdir_with(
            "cg",
            &[
                ("cgroup.controllers", "cpu memory"),
                ("cgroup.subtree_control", "cpu memory\n"),
            ],
        );
        let mut bw = Bandwidth::create_with(Flavor::V2(root.clone()), 9, fs.clone(), 3).unwrap();
        bw.set(0, 10, Some((1000, 5000))).unwrap();
        fs.empty_members(&root.join("vsched-lab-3"));
        bw.remove().unwrap();
        let log = fs.take_log();
        assert!(
            !log.iter()
                .any(|l| l.starts_with("write cg/cgroup.subtree_control")),
            "{log:?}"
        );
        assert_eq!(read(&root.join("cgroup.subtree_control")), "cpu memory\n");
        assert!(fs.child_dirs(&root).unwrap().is_empty());
    }

    #[test]
    fn cgroup_v1_bandwidth_lowers_the_quota_before_the_period() {
        let fs = RecordingFs::new("v1");
        let root = fs.mkdir_with("cpu", &[("cpu.cfs_quota_us", "-1")]);
        let mut bw = Bandwidth::create_with(Flavor::V1(root.clone()), 4242, fs.clone(), 5).unwrap();
        bw.set(1, 501, Some((3000, 10000))).unwrap();
        bw.set(1, 501, None).unwrap();
        assert_eq!(
            fs.take_log(),
            [
                "mkdir cpu/vsched-lab-5",
                "mkdir cpu/vsched-lab-5/vcpu1",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_quota_us -1",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_period_us 10000",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_quota_us 3000",
                "write cpu/vsched-lab-5/vcpu1/tasks 501",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_quota_us -1",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_period_us 100000",
                "write cpu/vsched-lab-5/vcpu1/cpu.cfs_quota_us -1",
                "write cpu/vsched-lab-5/vcpu1/tasks 501",
            ],
            "v1 moves no process into the top cgroup"
        );
        fs.empty_members(&root.join("vsched-lab-5"));
        drop(bw);
        assert_eq!(
            fs.take_log(),
            ["rmdir cpu/vsched-lab-5/vcpu1", "rmdir cpu/vsched-lab-5"],
            "dropping removes the cgroups"
        );
    }

    /// A mount table naming directories of the recording tree.
    fn mounts(fs: &RecordingFs, lines: &[(&str, &str, &str)]) -> String {
        lines
            .iter()
            .map(|(dir, fstype, opts)| {
                format!(
                    "{fstype} {} {fstype} {opts} 0 0\n",
                    fs.base.join(dir).display()
                )
            })
            .collect()
    }

    #[test]
    fn detects_the_controller_from_the_mount_table() {
        let fs = RecordingFs::new("detect");
        let v1 = fs.mkdir_with("cpu", &[("cpu.cfs_quota_us", "-1")]);
        let unified = fs.mkdir_with("unified", &[("cgroup.controllers", "")]);
        let full = fs.mkdir_with("v2", &[("cgroup.controllers", "cpuset cpu io memory\n")]);
        // This machine: cpu on v1, an empty v2 hierarchy beside it.
        let hybrid = mounts(
            &fs,
            &[
                ("cpu", "cgroup", "rw,relatime,cpu"),
                ("unified", "cgroup2", "rw"),
            ],
        );
        assert_eq!(detect_in(&hybrid, &*fs), Some(Flavor::V1(v1.clone())));
        let why = why_no_cgroup_v2(&hybrid, &*fs).unwrap();
        assert!(why.contains("held by the cgroup v1 hierarchy"), "{why}");
        assert!(why.contains("cgroup.controllers: \"\""), "{why}");
        // cpu and cpuacct co-mounted, as on older distributions.
        let comounted = mounts(&fs, &[("cpu", "cgroup", "rw,cpu,cpuacct")]);
        assert_eq!(detect_in(&comounted, &*fs), Some(Flavor::V1(v1)));
        // A v1 mount that merely mentions cpuacct is not the cpu controller.
        let cpuacct_only = mounts(
            &fs,
            &[
                ("cpu", "cgroup", "rw,cpuacct"),
                ("unified", "cgroup2", "rw"),
            ],
        );
        assert_eq!(detect_in(&cpuacct_only, &*fs), None);
        // An ordinary cloud VM: unified hierarchy with cpu available.
        let cloud = mounts(
            &fs,
            &[
                ("unified", "cgroup2", "rw"),
                ("v2", "cgroup2", "rw,nsdelegate"),
            ],
        );
        assert_eq!(detect_in(&cloud, &*fs), Some(Flavor::V2(full)));
        assert_eq!(why_no_cgroup_v2(&cloud, &*fs), None);
        // Nothing usable: said as such, nothing mounted or moved.
        let bare = mounts(&fs, &[("unified", "cgroup2", "rw")]);
        assert_eq!(detect_in(&bare, &*fs), None);
        assert!(why_no_cgroup_v2(&bare, &*fs)
            .unwrap()
            .contains("no cgroup2 mount has the cpu controller free"));
        assert!(why_no_cgroup_v2("", &*fs)
            .unwrap()
            .contains("no cgroup2 file system"));
        assert!(fs.take_log().is_empty(), "detection writes nothing");
        let _ = unified;
    }

    #[test]
    fn sweep_removes_what_dead_runs_left_and_only_that() {
        let fs = RecordingFs::new("sweep");
        let tmp = fs.mkdir_with("tmp", &[]);
        fs.mkdir_with("tmp/vsched-lab-100-0", &[("initrd.cpio", "x")]);
        fs.mkdir_with("tmp/vsched-lab-200-3", &[]);
        fs.mkdir_with("tmp/unrelated", &[]);
        let root = fs.mkdir_with("unified", &[]);
        fs.mkdir_with("unified/vsched-lab-100", &[("cgroup.procs", "")]);
        fs.mkdir_with("unified/vsched-lab-100/vcpu1", &[("cgroup.threads", "")]);
        fs.mkdir_with("unified/vsched-lab-200", &[("cgroup.procs", "12\n")]);
        fs.mkdir_with("unified/system.slice", &[]);
        let alive = |pid: i32| pid == 200;
        let mut removed = sweep_stale_in(&tmp, std::slice::from_ref(&root), &*fs, alive);
        removed.sort();
        assert_eq!(
            removed,
            [tmp.join("vsched-lab-100-0"), root.join("vsched-lab-100")]
        );
        assert_eq!(
            fs.take_log(),
            [
                "rmdir unified/vsched-lab-100/vcpu1",
                "rmdir unified/vsched-lab-100"
            ]
        );
        assert!(tmp.join("vsched-lab-200-3").exists() && tmp.join("unrelated").exists());
        assert!(root.join("vsched-lab-200").exists() && root.join("system.slice").exists());
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
}
