//! Guest kernel and busybox: found on the host or fetched from Debian's
//! packages, cached under the user's cache directory.

use crate::error::{LabError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `$XDG_CACHE_HOME/vsched/lab` or `~/.cache/vsched/lab`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("vsched").join("lab")
}

fn run(cmd: &mut Command, what: &'static str) -> Result<String> {
    let out = cmd.output().map_err(|source| LabError::StartTool {
        what,
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::ToolFailed {
            what,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How to provide a guest kernel when fetching one failed.
const KERNEL_HINT: &str =
    "the lab needs a guest kernel: allow `apt-get download linux-image-cloud-amd64` \
    (Debian/Ubuntu with package lists: run `apt-get update`), or pass --kernel PATH to a bzImage";

fn need_kernel(source: LabError) -> LabError {
    LabError::GuestKernel {
        hint: KERNEL_HINT,
        source: Box::new(source),
    }
}

/// The guest kernel: `explicit` if given, else the cached Debian cloud
/// kernel, downloading it (`apt-get download`) the first time.
pub fn guest_kernel(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            return Err(LabError::NoKernelFile {
                path: p.to_path_buf(),
            });
        }
        return Ok(p.to_path_buf());
    }
    let dir = cache_dir();
    let cached = dir.join("vmlinuz");
    if cached.is_file() {
        return Ok(cached);
    }
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating", &dir))?;
    // The meta-package names the current versioned image package.
    let depends = run(
        Command::new("apt-cache").args(["depends", "linux-image-cloud-amd64"]),
        "apt-cache depends",
    )
    .map_err(need_kernel)?;
    let image = depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            need_kernel(LabError::KernelPackage(
                "linux-image-cloud-amd64 names no image package".into(),
            ))
        })?
        .to_string();
    let work = dir.join("download");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(LabError::io("creating", &work))?;
    run(
        Command::new("apt-get")
            .arg("download")
            .arg(&image)
            .current_dir(&work),
        "apt-get download",
    )
    .map_err(need_kernel)?;
    let deb = files_in(&work)?
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| LabError::KernelPackage("apt-get download produced no .deb".into()))?;
    let extracted = work.join("x");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted),
        "dpkg-deb -x",
    )?;
    let vmlinuz = files_in(&extracted.join("boot"))?
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz"))
        })
        .ok_or_else(|| {
            LabError::KernelPackage("the kernel package holds no /boot/vmlinuz*".into())
        })?;
    let tmp = dir.join("vmlinuz.tmp");
    std::fs::copy(&vmlinuz, &tmp).map_err(LabError::io("writing", &tmp))?;
    std::fs::rename(&tmp, &cached).map_err(LabError::io("writing", &cached))?;
    let package = dir.join("vmlinuz.package");
    std::fs::write(&package, &image).map_err(LabError::io("writing", &package))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(cached)
}

/// The entries of a directory.
fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(LabError::io("reading directory", dir))?;
    Ok(entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
}

/// A statically linked busybox (Debian package busybox-static).
pub fn busybox() -> Result<PathBuf> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let path = Path::new(p);
        if path.is_file() {
            return Ok(path.to_path_buf());
        }
    }
    Err(LabError::MissingTool {
        tool: "busybox",
        install: "apt-get install busybox-static",
    })
}

/// The QEMU system emulator for x86-64.
pub fn qemu() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("qemu-system-x86_64");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(LabError::MissingTool {
        tool: "QEMU",
        install: "apt-get install qemu-system-x86",
    })
}
