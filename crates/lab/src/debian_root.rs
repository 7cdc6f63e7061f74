//! A Debian root file system for guests that boot like a real system
//! (`root = "debian"` in a layout): Debian 13's packages installed by
//! mmdebstrap, systemd as init, so that what vsched ships for systemd (the
//! .deb, its unit, the RWC drop-in) runs as users run it. Built once per
//! package list and cached; the guest gets it as its initramfs, so it
//! needs no disk and no kernel modules.

use crate::error::{LabError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian 13: the release whose backports carry the sched_ext kernels the
/// lab boots, and the one a new cloud VM runs today.
const SUITE: &str = "trixie";

/// Always installed beyond mmdebstrap's minbase (which has apt and dpkg):
/// systemd as init, and what a check reads a service with (curl for a
/// metrics endpoint, procps for pgrep/ps).
const BASE_PACKAGES: &[&str] = &["systemd-sysv", "curl", "procps"];

const MIRROR: &str = "http://deb.debian.org/debian";
/// Debian's archive keys (debian-archive-keyring, on every Debian host;
/// Debian 12's package carries Debian 13's keys too, as
/// debian-archive-trixie-*.gpg, and trixie's Release files are signed
/// with them).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// How to get mmdebstrap where it is missing.
const MMDEBSTRAP_HINT: &str =
    "`apt-get install mmdebstrap` (scripts/install-lab.sh does it), to build the Debian root of layouts with root = \"debian\"";

/// Whether `name` can be a Debian package name (policy 5.6.1): refused
/// before it reaches mmdebstrap's command line.
pub fn valid_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// Every package of a root with `extra` added: the base, then `extra`,
/// sorted and without repeats (the cache key).
fn package_list(extra: &[String]) -> Vec<String> {
    let mut all: Vec<String> = BASE_PACKAGES.iter().map(|p| p.to_string()).collect();
    all.extend(extra.iter().cloned());
    all.sort();
    all.dedup();
    all
}

/// What else shapes a root beyond its package list; changed whenever the
/// way [`ensure`] builds changes, so that no stale root is reused.
const BUILD_RECIPE: &str = "mmdebstrap --variant=minbase, v1";

/// The cache directory of a root with these packages: one per suite,
/// recipe and package list, so a layout that asks for another package gets
/// its own.
fn cache_path(packages: &[String]) -> PathBuf {
    // FNV-1a over the list: a name, not a defence (the list is ours).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("{BUILD_RECIPE}: {}", packages.join(",")).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    crate::kernel::cache_dir()
        .join("debian-root")
        .join(format!("{SUITE}-{hash:016x}"))
}

/// The root file system with `extra` packages installed, built the first
/// time (about 20 s and 60 MB of downloads) and then reused. The tree is
/// owned by root, as mmdebstrap's root mode leaves it.
pub fn ensure(extra: &[String]) -> Result<PathBuf> {
    let packages = package_list(extra);
    let dir = cache_path(&packages);
    let root = dir.join("root");
    let stamp = dir.join("complete");
    let ready = || stamp.is_file() && has_systemd(&root);
    if ready() {
        return Ok(root);
    }
    if Command::new("mmdebstrap")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err(LabError::MissingTool {
            tool: "mmdebstrap",
            install: MMDEBSTRAP_HINT,
        });
    }
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating", &dir))?;
    // One build at a time per root: a second lab run waits for the first
    // one's tree instead of building into it.
    let _lock = lock(&dir.join("lock"))?;
    if ready() {
        return Ok(root);
    }
    // What an interrupted build or a tampered cache left.
    for stale in [&root, &dir.join("building")] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(|source| LabError::Io {
                what: "removing what an earlier build left (unmount anything under it first)",
                path: stale.to_path_buf(),
                source,
            })?;
        }
    }
    let building = dir.join("building");
    let out = Command::new("mmdebstrap")
        .args(["--variant=minbase", "--mode=root", "--quiet"])
        .arg(format!("--include={}", packages.join(",")))
        .arg(format!("--keyring={KEYRING}"))
        .arg(SUITE)
        .arg(&building)
        .arg(format!("deb {MIRROR} {SUITE} main"))
        .output()
        .map_err(|source| LabError::StartTool {
            what: "building the Debian root with mmdebstrap",
            program: "mmdebstrap".into(),
            source,
        })?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&building);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.trim().lines().collect();
        return Err(LabError::ToolFailed {
            what: "building the Debian root with mmdebstrap (as root, from deb.debian.org)",
            stderr: lines[lines.len().saturating_sub(15)..].join("\n"),
        });
    }
    std::fs::rename(&building, &root).map_err(LabError::io("renaming", &building))?;
    std::fs::write(&stamp, packages.join("\n")).map_err(LabError::io("writing", &stamp))?;
    Ok(root)
}

/// An exclusive lock on `path` (created if missing), held until the file
/// is dropped; the kernel releases it if the process dies.
fn lock(path: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(LabError::io("opening", path))?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(LabError::io("locking", path)(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(file)
}

/// Files of the lab in a Debian guest: its command runner and the extra
/// files of the layout, away from the system's own paths (so the package
/// under test is the only vsched on PATH).
pub const LAB_DIR: &str = "/opt/vsched-lab";

/// The unit that runs the layout's commands once the system is up, its
/// output on the serial console where the host reads the markers.
/// `Type=exec`, so that the boot completes while the commands run (a
/// command may wait for `systemctl is-system-running --wait`).
pub fn runner_unit() -> String {
    format!(
        "[Unit]\n\
         Description=vsched lab: the layout's commands\n\
         After=multi-user.target\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={LAB_DIR}/run\n\
         StandardOutput=tty\n\
         StandardError=tty\n\
         TTYPath=/dev/ttyS0\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    )
}

/// Links that shape the guest's systemd: the runner started at boot,
/// nothing else writing to the serial console (its login prompt would
/// interleave with the commands' output), and no module loading (the root
/// has no modules of the lab's kernels, and everything a guest needs is
/// built in: the unit would only fail and mark the system degraded).
/// (link, target)
pub fn systemd_links() -> Vec<(String, String)> {
    vec![
        (
            "/etc/systemd/system/multi-user.target.wants/vsched-lab.service".into(),
            "/etc/systemd/system/vsched-lab.service".into(),
        ),
        (
            "/etc/systemd/system/serial-getty@ttyS0.service".into(),
            "/dev/null".into(),
        ),
        (
            "/etc/systemd/system/getty.target".into(),
            "/dev/null".into(),
        ),
        (
            "/etc/systemd/system/systemd-modules-load.service".into(),
            "/dev/null".into(),
        ),
        // The kernel runs /init from an initramfs.
        ("/init".into(), "/usr/lib/systemd/systemd".into()),
    ]
}

/// Whether `root` looks like a tree [`ensure`] built (a cache emptied by
/// hand is built again).
fn has_systemd(root: &Path) -> bool {
    root.join("usr/lib/systemd/systemd").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_follow_debian_policy() {
        for ok in ["curl", "libc6", "g++", "stress-ng", "python3.13"] {
            assert!(valid_package_name(ok), "{ok}");
        }
        for bad in ["", "a", "Curl", "-x", "curl;rm", "a b", "../x"] {
            assert!(!valid_package_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_cache_key_is_the_sorted_package_list() {
        let a = package_list(&["stress-ng".into(), "curl".into()]);
        let b = package_list(&["stress-ng".into()]);
        assert_eq!(a, b, "curl is in the base already");
        assert_eq!(cache_path(&a), cache_path(&b));
        assert_ne!(cache_path(&a), cache_path(&package_list(&[])));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
    }
}
