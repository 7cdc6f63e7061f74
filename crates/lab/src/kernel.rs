//! Guest kernel and busybox: found on the host or fetched from Debian's
//! packages, cached under the user's cache directory.

use anyhow::{bail, Context, Result};
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

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: could not start {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The guest kernel: `explicit` if given, else the cached Debian cloud
/// kernel, downloading it (`apt-get download`) the first time.
pub fn guest_kernel(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("--kernel {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let dir = cache_dir();
    let cached = dir.join("vmlinuz");
    if cached.is_file() {
        return Ok(cached);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let hint = "the lab needs a guest kernel: allow `apt-get download linux-image-cloud-amd64` \
                (Debian/Ubuntu with package lists: run `apt-get update`), or pass --kernel PATH to a bzImage";
    // The meta-package names the current versioned image package.
    let depends = run(
        Command::new("apt-cache").args(["depends", "linux-image-cloud-amd64"]),
        "apt-cache depends",
    )
    .context(hint)?;
    let image = depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .with_context(|| format!("linux-image-cloud-amd64 names no image package; {hint}"))?
        .to_string();
    let work = dir.join("download");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    run(
        Command::new("apt-get")
            .arg("download")
            .arg(&image)
            .current_dir(&work),
        "apt-get download",
    )
    .context(hint)?;
    let deb = std::fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download produced no .deb")?;
    let extracted = work.join("x");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted),
        "dpkg-deb -x",
    )?;
    let vmlinuz = std::fs::read_dir(extracted.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz"))
        })
        .context("the kernel package holds no /boot/vmlinuz*")?;
    std::fs::copy(&vmlinuz, dir.join("vmlinuz.tmp"))?;
    std::fs::rename(dir.join("vmlinuz.tmp"), &cached)?;
    std::fs::write(dir.join("vmlinuz.package"), &image)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(cached)
}

/// A statically linked busybox (Debian package busybox-static).
pub fn busybox() -> Result<PathBuf> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let path = Path::new(p);
        if path.is_file() {
            return Ok(path.to_path_buf());
        }
    }
    bail!("busybox is missing: install it with `apt-get install busybox-static`")
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
    bail!("QEMU is missing: install it with `apt-get install qemu-system-x86`")
}
