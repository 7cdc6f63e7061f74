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

/// Which guest kernel a layout boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelChoice {
    /// Debian's cloud kernel of the host's own release (6.1 on Debian 12):
    /// what the probe layouts were verified with.
    #[default]
    Default,
    /// A Debian cloud kernel with sched_ext (CONFIG_SCHED_CLASS_EXT=y) and
    /// BTF, for `vsched sched`: DEFAULT_SCHED_EXT_VERSION of the pinned
    /// matrix unless `--kernel-version` picks another.
    SchedExt,
}

/// A guest kernel and, where known, its release and configuration (libbpf
/// reads /boot/config-RELEASE in the guest for the Kconfig values BPF
/// programs use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestKernel {
    pub image: PathBuf,
    pub config: Option<KernelConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelConfig {
    /// `uname -r` in the guest.
    pub release: String,
    pub path: PathBuf,
}

/// The guest kernel: `explicit` if given, else (for a sched_ext layout)
/// the pinned kernel of `version` if given, else the cached Debian cloud kernel of the kind
/// asked for, downloading it the first time.
pub fn guest_kernel(
    explicit: Option<&Path>,
    version: Option<&str>,
    choice: KernelChoice,
) -> Result<GuestKernel> {
    if let Some(p) = explicit {
        if !p.is_file() {
            return Err(LabError::NoKernelFile {
                path: p.to_path_buf(),
            });
        }
        return Ok(GuestKernel {
            image: p.to_path_buf(),
            config: None,
        });
    }
    if let Some(v) = version {
        // The matrix is of sched_ext kernels; the probe layouts are
        // verified with the host release's own kernel.
        if choice != KernelChoice::SchedExt {
            return Err(LabError::KernelVersionNeedsSchedExt {
                version: v.to_string(),
            });
        }
        return pinned_kernel(pinned(v)?);
    }
    match choice {
        KernelChoice::Default => Ok(GuestKernel {
            image: default_kernel()?,
            config: None,
        }),
        KernelChoice::SchedExt => pinned_kernel(pinned(DEFAULT_SCHED_EXT_VERSION)?),
    }
}

/// The host release's cloud kernel (`apt-get download`, the host's sources).
fn default_kernel() -> Result<PathBuf> {
    let dir = cache_dir();
    let cached = dir.join("vmlinuz");
    if cached.is_file() {
        return Ok(cached);
    }
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating", &dir))?;
    let apt = Apt::host();
    let image = apt.image_package().map_err(need_kernel)?;
    let work = dir.join("download");
    let extracted = apt
        .download_and_extract(std::slice::from_ref(&image), &work)
        .map_err(need_kernel)?;
    let vmlinuz = find_kernel_file(&extracted, "vmlinuz")?
        .ok_or_else(|| LabError::KernelPackage("the kernel package holds no vmlinuz".into()))?;
    install_file(&vmlinuz, &cached)?;
    let package = dir.join("vmlinuz.package");
    std::fs::write(&package, &image).map_err(LabError::io("writing", &package))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(cached)
}

/// The option the kernel must have been built with.
const SCHED_EXT_OPTION: &str = "CONFIG_SCHED_CLASS_EXT=y";

/// The kernel a layout with `kernel = "sched_ext"` boots without
/// `--kernel-version`: pinned like the rest of the matrix, so a lab result
/// names the kernel it ran on, and changed on purpose in a commit (the
/// scheduler's benchmark figures in docs/benchmarks.md were measured on
/// it). Debian's unstable suite keeps only its newest kernel; when it
/// drops this one, the fetch fails with PINNED_HINT and the default moves
/// to another version of the matrix.
pub const DEFAULT_SCHED_EXT_VERSION: &str = "7.2.13";

/// A Debian cloud kernel with sched_ext that vsched is tested on, pinned
/// by its image's checksum: `--kernel-version` picks one, and the same
/// version always boots the same kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedKernel {
    /// The upstream version (`--kernel-version`).
    pub version: &'static str,
    /// Debian's suite that has it.
    pub suite: &'static str,
    /// Its image package (newer kernels pull the image proper from the
    /// linux-binary-* and linux-base-* packages it depends on).
    pub package: &'static str,
    /// SHA-256 of its vmlinuz.
    pub vmlinuz_sha256: &'static str,
}

/// The sched_ext kernels of the test matrix (docs/lab.md, "Kernels"),
/// oldest first. Debian 13's backports keep several versions of a kernel;
/// unstable keeps only its newest, so its entry lasts until the next one.
pub const SCHED_EXT_KERNELS: &[PinnedKernel] = &[
    PinnedKernel {
        version: "6.16.12",
        suite: "trixie-backports",
        package: "linux-image-6.16.12+deb13-cloud-amd64",
        vmlinuz_sha256: "3d4feeefd179bc5f1a5996aaba11b9ad5aa47187dc3406f78d15db1e1b7af764",
    },
    PinnedKernel {
        version: "6.18.15",
        suite: "trixie-backports",
        package: "linux-image-6.18.15+deb13-cloud-amd64",
        vmlinuz_sha256: "fb44deb1b865c78a7157fc6da7e9da7be5e253e056d229b54ba90d13d6df525f",
    },
    PinnedKernel {
        version: "7.2.13",
        suite: "unstable",
        package: "linux-image-7.2.13+deb14-cloud-amd64",
        vmlinuz_sha256: "a1423b5059ed5c2ea8b0391f4cce75572382016d4d431454d92de37b86fe8e72",
    },
    PinnedKernel {
        version: "7.3.4",
        suite: "trixie-backports",
        package: "linux-image-7.3.4+deb13-cloud-amd64",
        vmlinuz_sha256: "7435b9178e91998f4f70774510c4ffad6764a08c64b17f7ef9c4252ea5948932",
    },
];

/// The pinned kernel of `version`, or an error listing those there are.
pub fn pinned(version: &str) -> Result<&'static PinnedKernel> {
    SCHED_EXT_KERNELS
        .iter()
        .find(|k| k.version == version)
        .ok_or_else(|| LabError::UnknownKernelVersion {
            version: version.to_string(),
            known: SCHED_EXT_KERNELS
                .iter()
                .map(|k| k.version)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The pinned kernel `k`, cached under `cache_dir()/kernels/VERSION`,
/// fetched the first time through a private apt configuration for its suite.
pub fn pinned_kernel(k: &PinnedKernel) -> Result<GuestKernel> {
    let dir = pinned_dir(k);
    if let Some(cached) = cached_kernel(&dir) {
        return Ok(cached);
    }
    let need = |source: LabError| LabError::GuestKernel {
        hint: PINNED_HINT,
        source: Box::new(source),
    };
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating", &dir))?;
    let apt = Apt::private(&dir.join("apt"), k.suite).map_err(need)?;
    apt.update().map_err(need)?;
    fetch_sched_ext_kernel(&apt, k.package, &dir, k.vmlinuz_sha256).map_err(need)
}

/// Where the pinned kernel `k` is cached.
fn pinned_dir(k: &PinnedKernel) -> PathBuf {
    cache_dir().join("kernels").join(k.version)
}

/// The image of the pinned kernel `k` if it was fetched before (then the
/// lab boots it without the network).
pub fn cached_pinned(k: &PinnedKernel) -> Option<PathBuf> {
    cached_kernel(&pinned_dir(k)).map(|g| g.image)
}

const PINNED_HINT: &str = "the kernel matrix fetches Debian's cloud kernels through a private \
     apt configuration (the host's sources stay as they are): allow vsched to reach \
     deb.debian.org; a version Debian no longer carries must leave the matrix \
     (crates/lab/src/kernel.rs, SCHED_EXT_KERNELS)";

/// A kernel fetched before into `dir`: vmlinuz, config and release.
fn cached_kernel(dir: &Path) -> Option<GuestKernel> {
    let image = dir.join("vmlinuz");
    let config = dir.join("config");
    let release = std::fs::read_to_string(dir.join("release")).ok()?;
    (image.is_file() && config.is_file()).then(|| GuestKernel {
        image,
        config: Some(KernelConfig {
            release: release.trim().to_string(),
            path: config,
        }),
    })
}

/// Downloads `image_pkg` (and the linux-binary-*/linux-base-* packages
/// newer kernels split it into), checks that its vmlinuz is the one pinned
/// (`sha256`) and that it has sched_ext, and caches vmlinuz,
/// config and release in `dir`.
fn fetch_sched_ext_kernel(
    apt: &Apt,
    image_pkg: &str,
    dir: &Path,
    sha256: &str,
) -> Result<GuestKernel> {
    let mut packages = vec![image_pkg.to_string()];
    packages.extend(
        apt.depends(image_pkg)?
            .into_iter()
            .filter(|p| p.starts_with("linux-binary-") || p.starts_with("linux-base-")),
    );
    let work = dir.join("download");
    let extracted = apt.download_and_extract(&packages, &work)?;
    let vmlinuz = find_kernel_file(&extracted, "vmlinuz")?
        .ok_or_else(|| LabError::KernelPackage(format!("{packages:?} hold no vmlinuz")))?;
    let got = sha256_of(&vmlinuz)?;
    if got != sha256 {
        return Err(LabError::KernelPackage(format!(
            "{image_pkg}'s vmlinuz has SHA-256 {got}, not the pinned {sha256}: \
             Debian rebuilt the package; check it and pin the new checksum"
        )));
    }
    let (release, found_config) = find_config(&extracted)?
        .ok_or_else(|| LabError::KernelPackage(format!("{packages:?} hold no kernel config")))?;
    let text =
        std::fs::read_to_string(&found_config).map_err(LabError::io("reading", &found_config))?;
    if !text.lines().any(|l| l.trim() == SCHED_EXT_OPTION) {
        return Err(LabError::KernelPackage(format!(
            "{image_pkg} was built without {SCHED_EXT_OPTION}"
        )));
    }
    let (image, config) = (dir.join("vmlinuz"), dir.join("config"));
    install_file(&found_config, &config)?;
    install_file(&vmlinuz, &image)?;
    let release_file = dir.join("release");
    std::fs::write(&release_file, &release).map_err(LabError::io("writing", &release_file))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(GuestKernel {
        image,
        config: Some(KernelConfig {
            release,
            path: config,
        }),
    })
}

/// SHA-256 of a file, by coreutils' sha256sum (one call per fetched
/// kernel does not justify a hashing crate).
fn sha256_of(path: &Path) -> Result<String> {
    let out = run(
        Command::new("sha256sum").arg(path),
        "sha256sum (Debian package coreutils)",
    )?;
    Ok(out
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// apt-get and apt-cache, with the host's configuration or a private one.
struct Apt {
    options: Vec<String>,
}

impl Apt {
    fn host() -> Apt {
        Apt {
            options: Vec::new(),
        }
    }

    /// An apt configuration of its own under `dir` for Debian's `suite`:
    /// its own source list, package lists and cache; the host's stay as
    /// they are. Signatures are checked with the host's Debian keyring.
    fn private(dir: &Path, suite: &str) -> Result<Apt> {
        for sub in ["lists/partial", "cache/archives/partial"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(LabError::io("creating", &d))?;
        }
        let list = dir.join("sources.list");
        let line = format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian {suite} main\n"
        );
        std::fs::write(&list, line).map_err(LabError::io("writing", &list))?;
        let opt = |k: &str, v: &Path| format!("-o{k}={}", v.display());
        Ok(Apt {
            options: vec![
                opt("Dir::Etc::SourceList", &list),
                opt("Dir::Etc::SourceParts", &dir.join("no-parts")),
                opt("Dir::State::Lists", &dir.join("lists")),
                opt("Dir::Cache", &dir.join("cache")),
                // Our own lists need no lock on the host's.
                "-oDebug::NoLocking=1".into(),
            ],
        })
    }

    fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.args(&self.options);
        c
    }

    fn update(&self) -> Result<()> {
        run(
            self.command("apt-get").args(["-q", "update"]),
            "apt-get update",
        )
        .map(|_| ())
    }

    /// Packages `package` depends on.
    fn depends(&self, package: &str) -> Result<Vec<String>> {
        let out = run(
            self.command("apt-cache").args(["depends", package]),
            "apt-cache depends",
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            // "<name>" is a virtual package: nothing to download by that name.
            .filter(|p| !p.starts_with('<'))
            .map(str::to_string)
            .collect())
    }

    /// The versioned image package the cloud meta-package names.
    fn image_package(&self) -> Result<String> {
        self.depends("linux-image-cloud-amd64")?
            .into_iter()
            .find(|p| p.starts_with("linux-image-"))
            .ok_or_else(|| {
                LabError::KernelPackage("linux-image-cloud-amd64 names no image package".into())
            })
    }

    /// Downloads `packages` into `work` and unpacks them all into `work/x`.
    fn download_and_extract(&self, packages: &[String], work: &Path) -> Result<PathBuf> {
        let _ = std::fs::remove_dir_all(work);
        std::fs::create_dir_all(work).map_err(LabError::io("creating", work))?;
        run(
            self.command("apt-get")
                .arg("download")
                .args(packages)
                .current_dir(work),
            "apt-get download",
        )?;
        let extracted = work.join("x");
        for deb in files_in(work)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        {
            run(
                Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted),
                "dpkg-deb -x",
            )?;
        }
        Ok(extracted)
    }
}

/// A kernel file in an unpacked package: `boot/NAME-RELEASE` (older
/// layout) or `usr/lib/modules/RELEASE/NAME` (newer).
fn find_kernel_file(root: &Path, name: &str) -> Result<Option<PathBuf>> {
    let boot = root.join("boot");
    if boot.is_dir() {
        if let Some(p) = files_in(&boot)?.into_iter().find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(name))
        }) {
            return Ok(Some(p));
        }
    }
    let modules = root.join("usr/lib/modules");
    if modules.is_dir() {
        for release in files_in(&modules)? {
            let p = release.join(name);
            if p.is_file() {
                return Ok(Some(p));
            }
        }
    }
    Ok(None)
}

/// The kernel config and the release it belongs to, in either layout.
fn find_config(root: &Path) -> Result<Option<(String, PathBuf)>> {
    let boot = root.join("boot");
    if boot.is_dir() {
        for p in files_in(&boot)? {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if let Some(release) = name.strip_prefix("config-") {
                return Ok(Some((release.to_string(), p)));
            }
        }
    }
    let modules = root.join("usr/lib/modules");
    if modules.is_dir() {
        for dir in files_in(&modules)? {
            let p = dir.join("config");
            if p.is_file() {
                let release = dir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                return Ok(Some((release, p)));
            }
        }
    }
    Ok(None)
}

/// Copies `from` to `to` through a temporary name, so that an interrupted
/// copy never leaves a truncated file where the cache looks.
fn install_file(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).map_err(LabError::io("writing", &tmp))?;
    std::fs::rename(&tmp, to).map_err(LabError::io("writing", to))
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
        install:
            "install it with `apt-get install busybox-static` (or `bash scripts/install-lab.sh`)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_sched_ext_kernel_is_one_of_the_pinned_matrix() {
        assert!(pinned(DEFAULT_SCHED_EXT_VERSION).is_ok());
        assert!(
            pinned("6.1.0").is_err(),
            "a version outside the matrix is refused"
        );
    }
}
