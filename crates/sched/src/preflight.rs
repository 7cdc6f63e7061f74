//! Checks before loading: does the kernel have sched_ext, may we load, and
//! is another scheduler already loaded? Each refusal says what to do.

use crate::error::SchedError;
use std::path::{Path, PathBuf};

/// sched_ext's state file (absent: the kernel has no sched_ext).
pub const STATE_PATH: &str = "/sys/kernel/sched_ext/state";
/// The name of the loaded scheduler's ops, when one is loaded.
pub const ROOT_OPS_PATH: &str = "/sys/kernel/sched_ext/root/ops";

/// What sched_ext says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Available, nothing loaded.
    Disabled,
    /// A scheduler is loaded (or being loaded or unloaded), with its name.
    Busy { state: String, ops: String },
}

/// Reads sched_ext's state under `sysfs_root` (normally "/").
pub fn state(sysfs_root: &Path) -> Result<State, SchedError> {
    let state_path = sysfs_root.join(STATE_PATH.trim_start_matches('/'));
    let state = match std::fs::read_to_string(&state_path) {
        Ok(s) => s.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SchedError::NoSchedExt(PathBuf::from(STATE_PATH)))
        }
        Err(source) => {
            return Err(SchedError::Read {
                path: state_path,
                source,
            })
        }
    };
    if state == "disabled" {
        return Ok(State::Disabled);
    }
    let ops = std::fs::read_to_string(sysfs_root.join(ROOT_OPS_PATH.trim_start_matches('/')))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Ok(State::Busy { state, ops })
}

/// The oldest kernel the BPF side can load on: sched_ext was merged in
/// 6.12, and the kfuncs renamed or added since are reached through the
/// scx headers' compatibility wrappers. The lab tests it on Debian's
/// 6.16.12 to 7.3.4 (docs/lab.md, "Kernels").
pub const MIN_KERNEL: (u32, u32) = (6, 12);

/// (major, minor) of a kernel release ("6.16.12+deb13-cloud-amd64").
pub fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Refuses a kernel older than [`MIN_KERNEL`] (one with a sched_ext
/// backported from before it was merged, say), naming the minimum.
pub fn check_release(release: &str) -> Result<(), SchedError> {
    match release_version(release) {
        Some(v) if v < MIN_KERNEL => Err(SchedError::KernelTooOld {
            release: release.trim().to_string(),
            min: "6.12",
        }),
        _ => Ok(()),
    }
}

/// Everything that must hold before a load is tried, in the order a user
/// would fix them: kernel support, privileges, a free slot.
pub fn check() -> Result<(), SchedError> {
    let st = state(Path::new("/"))?;
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        check_release(&release)?;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(SchedError::NotRoot);
    }
    match st {
        State::Disabled => Ok(()),
        State::Busy { state, ops } => Err(SchedError::AnotherScheduler(format!(
            "{ops}, state {state}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(state: Option<&str>, ops: Option<&str>) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        let base = dir.path().join("sys/kernel/sched_ext");
        if let Some(s) = state {
            std::fs::create_dir_all(base.join("root")).unwrap();
            std::fs::write(base.join("state"), format!("{s}\n")).unwrap();
            if let Some(o) = ops {
                std::fs::write(base.join("root/ops"), format!("{o}\n")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn kernel_without_sched_ext_is_named_with_its_config_option() {
        let dir = fake_sysfs(None, None);
        let err = state(dir.path()).unwrap_err();
        assert!(matches!(err, SchedError::NoSchedExt(_)));
        let text = err.to_string();
        assert!(text.contains("CONFIG_SCHED_CLASS_EXT") && text.contains("vsched probe"));
    }

    #[test]
    fn a_kernel_older_than_sched_ext_upstream_is_refused_by_its_minimum() {
        assert_eq!(release_version("6.16.12+deb13-cloud-amd64"), Some((6, 16)));
        assert_eq!(release_version("7.3.4+deb13-cloud-amd64\n"), Some((7, 3)));
        assert!(check_release("6.12.0").is_ok());
        assert!(check_release("7.2.13+deb14-cloud-amd64").is_ok());
        let err = check_release("6.6.30-backport").unwrap_err().to_string();
        assert!(
            err.contains("6.6.30-backport") && err.contains("6.12"),
            "{err}"
        );
        // An unreadable release is not a reason to refuse.
        assert!(check_release("weird").is_ok());
    }

    #[test]
    fn available_and_busy_states() {
        let dir = fake_sysfs(Some("disabled"), None);
        assert_eq!(state(dir.path()).unwrap(), State::Disabled);
        let dir = fake_sysfs(Some("enabled"), Some("bpfland_1.1"));
        assert_eq!(
            state(dir.path()).unwrap(),
            State::Busy {
                state: "enabled".into(),
                ops: "bpfland_1.1".into()
            }
        );
    }

    /// A directory removed when dropped (std has no temp-dir helper, and one
    /// test module does not justify a crate).
    mod tempdir {
        use std::path::{Path, PathBuf};
        pub struct Dir(PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir()
                    .join(format!("vsched-sched-test-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
