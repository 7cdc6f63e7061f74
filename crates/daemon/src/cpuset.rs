//! One cgroup's cpuset, read and written through cgroupfs: the only place
//! the daemon changes the system. cgroup v2 (the unified hierarchy, where
//! the cpuset controller may first have to be enabled in the ancestors'
//! `cgroup.subtree_control`) and v1 (a cpuset hierarchy) are told apart by
//! `cgroup.controllers`, which only v2 has.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use vsched_model::cpulist::{format_cpu_list, parse_cpu_list};

#[derive(Debug, thiserror::Error)]
pub enum CpusetError {
    #[error("{0} is not a cgroup directory (no cgroup.procs in it)")]
    NotACgroup(PathBuf),
    #[error(
        "{0} is in a cgroup v1 hierarchy without the cpuset controller; \
         name a directory under the cpuset hierarchy (e.g. /sys/fs/cgroup/cpuset/...)"
    )]
    NoCpusetV1(PathBuf),
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {value:?} to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no cpuset file in {0} or above it: the kernel has no cpuset controller")]
    NoController(PathBuf),
    #[error("{path} holds {text:?}, not a CPU list")]
    Parse { path: PathBuf, text: String },
}

/// Cgroups read at most by one walk of a managed cgroup and those below
/// it (`Cgroup::read_below`): a bound on each walk, far above the slices
/// and services a VM has.
pub const MAX_CGROUPS_WALKED: usize = 1024;

/// The directories in `dir` (a cgroup's children).
fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Which cgroup hierarchy a directory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hierarchy {
    V1,
    V2,
}

/// A cgroup whose cpuset the daemon manages.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    pub hierarchy: Hierarchy,
}

impl Cgroup {
    /// Checks that `path` is a cgroup directory and which hierarchy it is
    /// in. Reads only.
    pub fn open(path: &Path) -> Result<Cgroup, CpusetError> {
        if !path.join("cgroup.procs").exists() {
            return Err(CpusetError::NotACgroup(path.to_path_buf()));
        }
        let hierarchy = if path.join("cgroup.controllers").exists() {
            Hierarchy::V2
        } else if path.join("cpuset.cpus").exists() {
            Hierarchy::V1
        } else {
            return Err(CpusetError::NoCpusetV1(path.to_path_buf()));
        };
        Ok(Cgroup {
            path: path.to_path_buf(),
            hierarchy,
        })
    }

    /// `file` of this cgroup and of every cgroup below it (at most
    /// MAX_CGROUPS_WALKED directories), one after the other; None when
    /// the cgroup is gone. A cgroup removed during the walk adds nothing.
    pub fn read_below(&self, file: &str) -> Option<String> {
        let mut text = std::fs::read_to_string(self.path.join(file)).ok()?;
        let mut pending = subdirectories(&self.path);
        let mut walked = 1;
        while let Some(dir) = pending.pop() {
            walked += 1;
            if walked > MAX_CGROUPS_WALKED {
                break;
            }
            if let Ok(more) = std::fs::read_to_string(dir.join(file)) {
                text.push('\n');
                text.push_str(&more);
            }
            pending.extend(subdirectories(&dir));
        }
        Some(text)
    }

    /// Whether process `pid` is in this cgroup or in one below it: its
    /// cpuset confines that process too.
    pub fn holds_process(&self, pid: u32) -> bool {
        let pid = pid.to_string();
        self.read_below("cgroup.procs")
            .is_some_and(|text| text.lines().any(|l| l.trim() == pid))
    }

    /// The cgroup's own `cpuset.cpus` as written (v2: empty means "the
    /// parent's"); None when v2's cpuset controller is not enabled here.
    pub fn configured_cpus(&self) -> Result<Option<String>, CpusetError> {
        let file = self.path.join("cpuset.cpus");
        match std::fs::read_to_string(&file) {
            Ok(text) => Ok(Some(text.trim().to_string())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CpusetError::Read { path: file, source }),
        }
    }

    /// The CPUs the cgroup's tasks may use now, before the daemon's change:
    /// v2's `cpuset.cpus.effective` where the controller is on, else the
    /// nearest ancestor's (the root cgroup has the file wherever the
    /// kernel has the cpuset controller); v1's `cpuset.cpus`.
    pub fn usable_cpus(&self) -> Result<Vec<u32>, CpusetError> {
        let name = match self.hierarchy {
            Hierarchy::V1 => "cpuset.cpus",
            Hierarchy::V2 => "cpuset.cpus.effective",
        };
        let mut dir = Some(self.path.as_path());
        while let Some(d) = dir {
            let file = d.join(name);
            match std::fs::read_to_string(&file) {
                Ok(text) => {
                    return parse_cpu_list(text.trim())
                        .map_err(|_| CpusetError::Parse { path: file, text })
                }
                Err(e) if e.kind() == ErrorKind::NotFound => dir = d.parent(),
                Err(source) => return Err(CpusetError::Read { path: file, source }),
            }
        }
        Err(CpusetError::NoController(self.path.clone()))
    }

    /// The CPUs the cgroup has with an empty (v2) cpuset: its parent's
    /// usable CPUs. v1 has no such inheritance: its own.
    pub fn inherited_cpus(&self) -> Result<Vec<u32>, CpusetError> {
        match (self.hierarchy, self.path.parent()) {
            (Hierarchy::V2, Some(parent)) => Cgroup {
                path: parent.to_path_buf(),
                hierarchy: Hierarchy::V2,
            }
            .usable_cpus(),
            _ => self.usable_cpus(),
        }
    }

    /// Writes `cpus` (a CPU list; v2 also takes "" for "the parent's").
    pub fn write_cpus(&self, cpus: &str) -> Result<(), CpusetError> {
        write(&self.path.join("cpuset.cpus"), cpus)
    }

    /// Puts `original` back. v2's "" ("the parent's") cannot be written
    /// back while the cgroup has tasks: the kernel refuses to empty a
    /// populated cpuset (ENOSPC). So the parent's CPUs are written first,
    /// which gives the tasks every CPU back whatever follows, then "" is
    /// tried; where it is refused the list stays explicit (`Explicit`).
    pub fn restore_cpus(&self, original: &str) -> Result<Restored, CpusetError> {
        if !original.is_empty() || self.hierarchy == Hierarchy::V1 {
            self.write_cpus(original)?;
            return Ok(Restored::Exact);
        }
        let list = format_cpu_list(&self.inherited_cpus()?);
        self.write_cpus(&list)?;
        match self.write_cpus("") {
            Ok(()) => Ok(Restored::Exact),
            Err(CpusetError::Write { source, .. }) if source.kind() == ErrorKind::StorageFull => {
                Ok(Restored::Explicit(list))
            }
            Err(e) => Err(e),
        }
    }

    /// v2: enables the cpuset controller down to this cgroup, each
    /// ancestor's `cgroup.subtree_control` from the top; returns the
    /// directories where it was enabled (to disable again, deepest first),
    /// in the order enabled. Nothing for v1 or where it is already on.
    pub fn enable_controller(&self) -> Result<Vec<PathBuf>, CpusetError> {
        if self.hierarchy == Hierarchy::V1 || self.path.join("cpuset.cpus").exists() {
            return Ok(Vec::new());
        }
        let mut ancestors: Vec<&Path> = self
            .path
            .ancestors()
            .skip(1)
            .take_while(|d| d.join("cgroup.subtree_control").exists())
            .collect();
        ancestors.reverse();
        let mut enabled = Vec::new();
        for dir in ancestors {
            let control = dir.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&control).map_err(|source| CpusetError::Read {
                path: control.clone(),
                source,
            })?;
            if on.split_whitespace().any(|c| c == "cpuset") {
                continue;
            }
            if let Err(e) = write(&control, "+cpuset") {
                disable_controller(&enabled);
                return Err(e);
            }
            enabled.push(dir.to_path_buf());
        }
        Ok(enabled)
    }
}

/// How a cpuset was put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// As it was.
    Exact,
    /// v2: it was "" (the parent's) and the cgroup has tasks: it now
    /// names the parent's CPUs, this list, explicitly (the same CPUs, but
    /// it no longer follows the parent's changes).
    Explicit(String),
}

/// Disables the cpuset controller in `dirs` (as `enable_controller`
/// returned them), deepest first; best effort: returns what failed.
pub fn disable_controller(dirs: &[PathBuf]) -> Vec<CpusetError> {
    dirs.iter()
        .rev()
        .filter_map(|dir| write(&dir.join("cgroup.subtree_control"), "-cpuset").err())
        .collect()
}

/// `usable` without `hidden`, as a cpuset list; None when nothing would be
/// left (a cgroup is never left without a CPU).
pub fn without(usable: &[u32], hidden: &[u32]) -> Option<String> {
    let kept: Vec<u32> = usable
        .iter()
        .copied()
        .filter(|c| !hidden.contains(c))
        .collect();
    (!kept.is_empty()).then(|| format_cpu_list(&kept))
}

/// One write(2) of `value` (cgroupfs takes a whole value per write; an
/// empty value is one newline, which cgroupfs reads as empty).
fn write(path: &Path, value: &str) -> Result<(), CpusetError> {
    let data = if value.is_empty() { "\n" } else { value };
    std::fs::write(path, data).map_err(|source| CpusetError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_vcpus_are_taken_out_and_never_all() {
        assert_eq!(without(&[0, 1, 2, 3], &[1, 3]).as_deref(), Some("0,2"));
        assert_eq!(without(&[0, 1, 2, 3], &[]).as_deref(), Some("0-3"));
        assert_eq!(without(&[1], &[1]), None);
    }

    /// A fake v2 tree in a temporary directory: the controller is enabled
    /// top-down where it is off and disabled bottom-up.
    #[test]
    fn the_controller_is_enabled_only_where_off_and_disabled_in_reverse() {
        let root = std::env::temp_dir().join(format!("vsched-cpuset-{}", std::process::id()));
        let leaf = root.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        for d in [&root, &root.join("a"), &leaf] {
            std::fs::write(d.join("cgroup.procs"), "").unwrap();
            std::fs::write(d.join("cgroup.controllers"), "cpuset cpu").unwrap();
        }
        std::fs::write(root.join("cgroup.subtree_control"), "cpuset cpu").unwrap();
        std::fs::write(root.join("a/cgroup.subtree_control"), "cpu").unwrap();
        let cg = Cgroup::open(&leaf).unwrap();
        assert_eq!(cg.hierarchy, Hierarchy::V2);
        assert_eq!(cg.configured_cpus().unwrap(), None);
        let enabled = cg.enable_controller().unwrap();
        assert_eq!(enabled, vec![root.join("a")]);
        // A real cgroupfs would now show +cpuset among the controllers;
        // the fake file holds what was written.
        assert_eq!(
            std::fs::read_to_string(root.join("a/cgroup.subtree_control")).unwrap(),
            "+cpuset"
        );
        assert!(disable_controller(&enabled).is_empty());
        assert_eq!(
            std::fs::read_to_string(root.join("a/cgroup.subtree_control")).unwrap(),
            "-cpuset"
        );
        assert!(matches!(
            Cgroup::open(&root.join("nope")),
            Err(CpusetError::NotACgroup(_))
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
