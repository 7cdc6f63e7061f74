//! The QEMU the lab boots its guests with: found, and its version checked.
//!
//! Older QEMU crashes sched_ext guests: with Debian 12's QEMU 7.2, guests
//! that load and unload a sched_ext scheduler panic now and then (vsched
//! and its FIFO reference mode alike, on Debian's 6.18, 7.2 and 7.3
//! kernels), some while booting, at instructions the kernel patches while
//! it runs; with QEMU 10 the same soak has not panicked a guest
//! (docs/lab.md, "The emulator"; docs/benchmarks.md, "Soak"). So the lab
//! refuses a QEMU older than [`MIN_MAJOR`] unless asked to run one anyway
//! (the soak's evidence for this rule is measured that way).

use crate::error::{LabError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest QEMU major version the lab boots guests with.
pub const MIN_MAJOR: u32 = 10;

/// How to get a QEMU new enough, for the refusal's message.
pub const UPGRADE_HINT: &str =
    "to install it, on Debian 13 and later: `apt-get install qemu-system-x86`; \
     Debian 12: install it from bookworm-backports (`bash scripts/install-lab.sh` \
     in a vsched checkout does that through a private apt configuration, \
     leaving the host's sources as they are)";

/// A QEMU system emulator and the version it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qemu {
    pub path: PathBuf,
    /// (major, minor, micro) from `--version`.
    pub version: (u32, u32, u32),
}

impl Qemu {
    pub fn version_string(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b}.{c}")
    }
}

/// `explicit`, or qemu-system-x86_64 on PATH, with its version checked:
/// older than [`MIN_MAJOR`] is refused unless `allow_old`, which prints a
/// warning instead.
pub fn find(explicit: Option<&Path>, allow_old: bool) -> Result<Qemu> {
    let path = match explicit {
        Some(p) if p.is_file() => p.to_path_buf(),
        Some(p) => {
            return Err(LabError::NoQemuFile {
                path: p.to_path_buf(),
            })
        }
        None => on_path("qemu-system-x86_64").ok_or(LabError::MissingTool {
            tool: "QEMU 10 or newer",
            install: UPGRADE_HINT,
        })?,
    };
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .map_err(|source| LabError::StartQemu {
            qemu: path.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = parse_version(&text).ok_or_else(|| LabError::QemuVersion {
        qemu: path.clone(),
        said: text.lines().next().unwrap_or_default().to_string(),
    })?;
    let qemu = Qemu { path, version };
    if version.0 < MIN_MAJOR {
        if !allow_old {
            return Err(LabError::OldQemu {
                qemu: qemu.path.clone(),
                version: qemu.version_string(),
                min_major: MIN_MAJOR,
                hint: UPGRADE_HINT,
            });
        }
        eprintln!(
            "vsched lab: WARNING: {} is QEMU {}, older than {MIN_MAJOR}: its guests panic \
             with sched_ext schedulers loaded (docs/lab.md); running it only because it was asked for",
            qemu.path.display(),
            qemu.version_string()
        );
    }
    Ok(qemu)
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}

/// The version in `qemu-system-x86_64 --version`'s first line: "QEMU
/// emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)".
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let first = text.lines().next()?;
    let rest = first.split("version").nth(1)?.split_whitespace().next()?;
    let mut parts = rest.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
    });
    let major = parts.next()?.ok()?;
    let minor = parts.next().and_then(|p| p.ok()).unwrap_or(0);
    let micro = parts.next().and_then(|p| p.ok()).unwrap_or(0);
    Some((major, minor, micro))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_debian_and_upstream_builds() {
        assert_eq!(
            parse_version(
                "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\n\
                 Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n"
            ),
            Some((10, 0, 2))
        );
        assert_eq!(
            parse_version("QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n"),
            Some((7, 2, 19))
        );
        assert_eq!(
            parse_version("QEMU emulator version 9.2.50 (v9.2.0-1234-gabc)\n"),
            Some((9, 2, 50))
        );
        assert_eq!(
            parse_version("QEMU emulator version 11.0\n"),
            Some((11, 0, 0))
        );
        assert_eq!(parse_version("something else\n"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn an_old_qemu_is_refused_with_how_to_upgrade() {
        let dir = std::env::temp_dir().join(format!("vsched-qemu-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("qemu-system-x86_64");
        // Written under another name and renamed: a file still open for
        // writing when another test thread forks cannot be executed
        // (ETXTBSY).
        let partial = dir.join("partial");
        std::fs::write(
            &partial,
            "#!/bin/sh\necho 'QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18+b3)'\n",
        )
        .unwrap();
        std::fs::set_permissions(
            &partial,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::rename(&partial, &fake).unwrap();
        let err = find(Some(&fake), false).unwrap_err().to_string();
        assert!(
            err.contains("7.2.19") && err.contains("bookworm-backports"),
            "{err}"
        );
        // Asked for, it runs (with a warning on stderr).
        assert_eq!(find(Some(&fake), true).unwrap().version, (7, 2, 19));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
