//! The guest's initramfs: busybox, vsched and any extra binaries with the
//! shared libraries they need, and an /init that runs the layout's commands
//! between markers on the serial console. Written as a newc cpio archive
//! (the format the kernel unpacks), uncompressed: it is built fresh for
//! each run and never leaves the machine.

use crate::error::{LabError, Result};
use crate::kernel::KernelConfig;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Marker lines the guest's /init prints; the host parses them.
pub const MARK: &str = "@@VSCHED-LAB";

/// A newc ("070701") cpio archive under construction.
#[derive(Default)]
pub struct Cpio {
    data: Vec<u8>,
    next_inode: u32,
    dirs: BTreeSet<String>,
}

/// Owner and device numbers of an archive entry (newc keeps both).
#[derive(Clone, Copy, Default)]
struct Meta {
    uid: u32,
    gid: u32,
    /// (major, minor) of a character or block device.
    rdev: (u32, u32),
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, body: &[u8]) {
        self.entry_with(name, mode, Meta::default(), body)
    }

    fn entry_with(&mut self, name: &str, mode: u32, meta: Meta, body: &[u8]) {
        // newc's size field has 8 hex digits; `tree` refuses larger files
        // with an error, and the lab's own files are far smaller.
        let size = u32::try_from(body.len()).expect("a cpio newc entry holds under 4 GiB");
        self.next_inode += 1;
        let fields = [
            self.next_inode,
            mode,
            meta.uid,
            meta.gid,
            1,
            0,
            size,
            0,
            0,
            meta.rdev.0,
            meta.rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.data.extend_from_slice(b"070701");
        for f in fields {
            self.data.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(body);
        self.pad();
    }

    fn pad(&mut self) {
        while self.data.len() % 4 != 0 {
            self.data.push(0);
        }
    }

    /// Adds a directory and its parents (once each). A path through a
    /// symbolic link to a directory ([`Cpio::tree`]'s `/bin -> usr/bin`)
    /// adds nothing for the link: the kernel follows it when unpacking,
    /// where a directory entry would replace the link.
    pub fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if self.dirs.insert(prefix.clone()) {
                let p = prefix.clone();
                self.entry(&p, 0o040755, &[]);
            }
        }
    }

    /// Adds a regular file at `path` (absolute in the guest), creating parents.
    pub fn file(&mut self, path: &str, mode: u32, body: &[u8]) {
        let path = path.trim_start_matches('/');
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | (mode & 0o7777), body);
    }

    /// Adds the host's file `src` as a regular file at `path`.
    pub fn copy(&mut self, path: &str, mode: u32, src: &Path) -> Result<()> {
        let body = std::fs::read(src).map_err(LabError::io("reading", src))?;
        self.file(path, mode, &body);
        Ok(())
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        let path = path.trim_start_matches('/');
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o120777, target.as_bytes());
    }

    /// Adds the tree under `root` as the archive's root: directories,
    /// regular files, symbolic links and device nodes with their modes and
    /// owners (hard links become copies; sockets and FIFOs are left out,
    /// nothing creates them ahead of boot). Sorted, so parents come first
    /// and the same tree gives the same archive.
    pub fn tree(&mut self, root: &Path) -> Result<()> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .map_err(LabError::io("reading", &dir))?
                .collect::<std::io::Result<_>>()
                .map_err(LabError::io("reading", &dir))?;
            entries.sort_by_key(|e| e.file_name());
            let mut subdirs = Vec::new();
            for e in entries {
                let path = e.path();
                let md =
                    std::fs::symlink_metadata(&path).map_err(LabError::io("reading", &path))?;
                let name = path
                    .strip_prefix(root)
                    .expect("walked from root")
                    .to_str()
                    .ok_or_else(|| LabError::Archive {
                        path: path.clone(),
                        why: "its name is not UTF-8".into(),
                    })?
                    .to_string();
                if md.len() > u64::from(u32::MAX) {
                    return Err(LabError::Archive {
                        path,
                        why: "a cpio archive holds files under 4 GiB".into(),
                    });
                }
                let meta = Meta {
                    uid: md.uid(),
                    gid: md.gid(),
                    rdev: (libc::major(md.rdev()), libc::minor(md.rdev())),
                };
                let kind = md.file_type();
                if kind.is_dir() {
                    self.dirs.insert(name.clone());
                    self.entry_with(&name, md.mode(), meta, &[]);
                    subdirs.push(path);
                } else if kind.is_symlink() {
                    let target =
                        std::fs::read_link(&path).map_err(LabError::io("reading", &path))?;
                    self.entry_with(
                        &name,
                        md.mode(),
                        meta,
                        target.as_os_str().as_encoded_bytes(),
                    );
                    // Resolved inside the tree, not on the host.
                    let resolved = match target.strip_prefix("/") {
                        Ok(inside) => root.join(inside),
                        Err(_) => dir.join(&target),
                    };
                    if resolved.is_dir() {
                        self.dirs.insert(name);
                    }
                } else if kind.is_file() {
                    let body = std::fs::read(&path).map_err(LabError::io("reading", &path))?;
                    self.entry_with(&name, md.mode(), meta, &body);
                } else if kind.is_char_device() || kind.is_block_device() {
                    self.entry_with(&name, md.mode(), meta, &[]);
                }
            }
            // Depth-first in name order: a directory's entry always
            // precedes what is in it.
            pending.extend(subdirs.into_iter().rev());
        }
        Ok(())
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.data
    }
}

/// Shared libraries (and the loader) a dynamically linked binary needs, per ldd.
fn libraries_of(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|source| LabError::StartTool {
            what: "finding a binary's libraries with ldd (Debian package libc-bin)",
            program: "ldd".into(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = line
            .split("=>")
            .last()
            .and_then(|s| s.split_whitespace().next())
            .filter(|s| s.starts_with('/'));
        if let Some(p) = path {
            libs.push(PathBuf::from(p));
        }
        if line.contains("not found") {
            return Err(LabError::MissingLibrary {
                binary: binary.to_path_buf(),
                line: line.trim().to_string(),
            });
        }
    }
    Ok(libs)
}

/// Where the guest's shell functions that put extra binaries before
/// busybox's applets of the same name live (see [`shadow_functions`]).
const SHADOWS: &str = "/etc/vsched-lab-binaries.sh";

/// Debian's busybox-static runs its own applet for a command name before
/// looking at PATH (its shell is built "standalone"), so an extra binary
/// named `xz` would be busybox's xz in every command. A shell function
/// wins over an applet: one per such name, sourced by each command's
/// shell, makes the extra binary the one that runs. (A shell the command
/// starts itself does not source it: there, call the binary by path.)
pub fn shadow_functions(extra_names: &[String], applets: &[String]) -> Result<String> {
    let mut s = String::new();
    for name in extra_names.iter().filter(|n| applets.contains(n)) {
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(LabError::ShadowedBinary { name: name.clone() });
        }
        s.push_str(&format!("{name}() {{ /bin/{name} \"$@\"; }}\n"));
    }
    Ok(s)
}

/// The applets `busybox` provides (`busybox --list`).
fn applets_of(busybox: &Path) -> Result<Vec<String>> {
    let out = Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|source| LabError::StartTool {
            what: "listing busybox's applets",
            program: busybox.display().to_string(),
            source,
        })?;
    if !out.status.success() {
        // Without the list, extra binaries would silently lose to applets.
        return Err(LabError::ToolFailed {
            what: "busybox --list",
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The /init script: mounts, then each command between BEGIN/END markers.
pub fn init_script(commands: &[String]) -> String {
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/bin TERM=dumb\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev 2>/dev/null\n\
         mount -t bpf bpf /sys/fs/bpf 2>/dev/null\n\
         mkdir -p /tmp\n",
    );
    s.push_str(&marked_commands(commands, &format!(". {SHADOWS}; ")));
    s.push_str("poweroff -f\n");
    s
}

/// The BOOTED marker, each command in its own shell between BEGIN and END
/// (with its exit status), and DONE; `prefix` goes before each command in
/// its shell.
fn marked_commands(commands: &[String], prefix: &str) -> String {
    let mut s = format!("echo \"{MARK} BOOTED $(cat /proc/uptime)\"\n");
    for (i, cmd) in commands.iter().enumerate() {
        // Each command runs in its own shell so a failing one cannot end /init.
        let quoted = format!("{prefix}{cmd}").replace('\'', r"'\''");
        s.push_str(&format!(
            "echo \"{MARK} BEGIN {i}\"\nsh -c '{quoted}'\necho \"{MARK} END {i} $?\"\n"
        ));
    }
    s.push_str(&format!("echo \"{MARK} DONE\"\n"));
    s
}

/// The Debian guest's runner ([`crate::debian_root::runner_unit`] starts
/// it once systemd is up): the commands as in [`init_script`], with the
/// layout's extra files on PATH after the system's own directories, then
/// an immediate power-off.
pub fn debian_runner(commands: &[String]) -> String {
    let lab = crate::debian_root::LAB_DIR;
    let mut s = format!(
        "#!/bin/sh\n\
         export TERM=dumb PATH=\"$PATH:{lab}/bin\"\n\
         cd /root\n"
    );
    s.push_str(&marked_commands(commands, ""));
    // Forced twice: no unit is stopped, as with the busybox guest's
    // `poweroff -f`; the host has what it needs.
    s.push_str("systemctl poweroff --force --force\n");
    s
}

/// What every guest gets, whatever its root.
pub struct GuestFiles<'a> {
    /// The lab's own vsched binary.
    pub vsched: &'a Path,
    /// The layout's extra binaries.
    pub extra: &'a [PathBuf],
    /// The guest kernel's config, as /boot/config-RELEASE where known
    /// (libbpf reads it for the Kconfig values BPF programs use).
    pub kernel_config: Option<&'a KernelConfig>,
    /// The commands to run, in order.
    pub commands: &'a [String],
}

impl GuestFiles<'_> {
    fn add_kernel_config(&self, cpio: &mut Cpio) -> Result<()> {
        match self.kernel_config {
            Some(c) => cpio.copy(&format!("/boot/config-{}", c.release), 0o644, &c.path),
            None => Ok(()),
        }
    }
}

/// Builds the archive: busybox, vsched, extra binaries, their libraries,
/// the kernel's config, /init.
pub fn build_busybox(busybox: &Path, files: &GuestFiles) -> Result<Vec<u8>> {
    let mut cpio = Cpio::default();
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc", "boot"] {
        cpio.dir(d);
    }
    files.add_kernel_config(&mut cpio)?;
    let mut libs = BTreeSet::new();
    let mut add_binary = |cpio: &mut Cpio, src: &Path, name: &str| -> Result<()> {
        cpio.copy(&format!("/bin/{name}"), 0o755, src)?;
        libs.extend(libraries_of(src)?);
        Ok(())
    };
    add_binary(&mut cpio, busybox, "busybox")?;
    add_binary(&mut cpio, files.vsched, "vsched")?;
    let mut extra_names = Vec::new();
    for b in files.extra {
        // Layout validation made sure it is a file, so it has a name.
        let name = b
            .file_name()
            .unwrap_or(b.as_os_str())
            .to_string_lossy()
            .into_owned();
        add_binary(&mut cpio, b, &name)?;
        extra_names.push(name);
    }
    let shadows = shadow_functions(&extra_names, &applets_of(busybox)?)?;
    cpio.file(SHADOWS, 0o644, shadows.as_bytes());
    for lib in &libs {
        cpio.copy(&lib.to_string_lossy(), 0o755, lib)?;
    }
    cpio.file("/init", 0o755, init_script(files.commands).as_bytes());
    Ok(cpio.finish())
}

/// Builds the archive of a Debian guest: the root file system `root`
/// ([`crate::debian_root::ensure`]), the lab's runner unit and script, the
/// kernel's config, vsched at LAB_DIR/vsched (off PATH: a package under
/// test must be the only vsched there) and the extra files in LAB_DIR/bin,
/// as they are (the root has its own libraries).
pub fn build_debian(root: &Path, files: &GuestFiles) -> Result<Vec<u8>> {
    use crate::debian_root::{runner_unit, systemd_links, LAB_DIR};
    let mut cpio = Cpio::default();
    cpio.tree(root)?;
    files.add_kernel_config(&mut cpio)?;
    cpio.copy(&format!("{LAB_DIR}/vsched"), 0o755, files.vsched)?;
    cpio.dir(&format!("{LAB_DIR}/bin"));
    for b in files.extra {
        let name = b.file_name().unwrap_or(b.as_os_str()).to_string_lossy();
        cpio.copy(&format!("{LAB_DIR}/bin/{name}"), 0o755, b)?;
    }
    cpio.file(
        &format!("{LAB_DIR}/run"),
        0o755,
        debian_runner(files.commands).as_bytes(),
    );
    cpio.file(
        "/etc/systemd/system/vsched-lab.service",
        0o644,
        runner_unit().as_bytes(),
    );
    for (link, target) in systemd_links() {
        cpio.symlink(&link, &target);
    }
    Ok(cpio.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_records_are_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.file("/bin/x", 0o755, b"abc");
        let data = c.finish();
        assert!(data.starts_with(b"070701"));
        assert_eq!(data.len() % 4, 0);
        let text = String::from_utf8_lossy(&data);
        // Parent directory first, then the file, then the trailer.
        let (d, f, t) = (
            text.find("bin\0").unwrap(),
            text.find("bin/x\0").unwrap(),
            text.find("TRAILER!!!").unwrap(),
        );
        assert!(d < f && f < t);
        // File size field (7th) of the file entry is 3.
        let hdr = &text[f - 110..f];
        assert_eq!(&hdr[6 + 6 * 8..6 + 7 * 8], "00000003");
    }

    /// (name, mode, uid, body) of each entry of a newc archive.
    fn entries(data: &[u8]) -> Vec<(String, u32, u32, Vec<u8>)> {
        let field = |at: usize, i: usize| {
            let hex = std::str::from_utf8(&data[at + 6 + 8 * i..at + 14 + 8 * i]).unwrap();
            u32::from_str_radix(hex, 16).unwrap() as usize
        };
        let align = |n: usize| n.div_ceil(4) * 4;
        let (mut at, mut out) = (0, Vec::new());
        loop {
            let (mode, uid, size, name_len) =
                (field(at, 1), field(at, 2), field(at, 6), field(at, 11));
            let name_at = at + 110;
            let name = String::from_utf8(data[name_at..name_at + name_len - 1].to_vec()).unwrap();
            let body_at = align(name_at + name_len);
            if name == "TRAILER!!!" {
                return out;
            }
            out.push((
                name,
                mode as u32,
                uid as u32,
                data[body_at..body_at + size].to_vec(),
            ));
            at = align(body_at + size);
        }
    }

    #[test]
    fn a_tree_keeps_modes_links_and_order() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("vsched-cpio-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::set_permissions(dir.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::write(dir.join("usr/bin/tool"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            dir.join("usr/bin/tool"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        std::os::unix::fs::symlink("usr/bin", dir.join("bin")).unwrap();
        let mut c = Cpio::default();
        c.tree(&dir).unwrap();
        // Written into the tree's existing directory, not a new "usr" entry;
        // and through the link, which must stay a link (a "bin" directory
        // entry would replace it, and /bin/sh with it).
        c.file("/usr/bin/extra", 0o755, b"x");
        c.file("/bin/through-link", 0o755, b"y");
        let got = entries(&c.finish());
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "tmp",
                "usr",
                "usr/bin",
                "usr/bin/tool",
                "usr/bin/extra",
                "bin/through-link"
            ]
        );
        let by = |n: &str| got.iter().find(|e| e.0 == n).unwrap();
        assert_eq!(by("bin").1, 0o120777);
        assert_eq!(by("bin").3, b"usr/bin");
        assert_eq!(by("tmp").1, 0o041777, "sticky, world-writable /tmp kept");
        assert_eq!(by("usr/bin/tool").1, 0o104755, "set-uid kept");
        assert_eq!(by("usr/bin/tool").3, b"#!/bin/sh\n");
        // SAFETY: getuid has no preconditions.
        assert_eq!(by("usr/bin/tool").2, unsafe { libc::getuid() });
    }

    #[test]
    fn the_debian_runner_keeps_extra_files_after_the_systems_path() {
        let s = debian_runner(&["vsched --version".to_string()]);
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(s.contains("PATH=\"$PATH:/opt/vsched-lab/bin\""), "{s}");
        assert!(s.contains("sh -c 'vsched --version'"), "{s}");
        assert!(s.ends_with("systemctl poweroff --force --force\n"), "{s}");
    }

    #[test]
    fn init_quotes_commands_and_marks_them() {
        let s = init_script(&["echo 'hi'".to_string()]);
        assert!(
            s.contains(
                "@@VSCHED-LAB BEGIN 0\"\nsh -c '. /etc/vsched-lab-binaries.sh; echo '\\''hi'\\'''\n"
            ),
            "{s}"
        );
        assert!(s.contains("@@VSCHED-LAB END 0 $?"));
        assert!(s.ends_with("poweroff -f\n"));
    }

    /// Regression: a layout that shipped Debian's xz ran busybox's xz
    /// applet in the guest, because busybox's shell prefers its applets.
    #[test]
    fn an_extra_binary_named_like_an_applet_wins_over_busybox() {
        let applets: Vec<String> = ["xz", "sh", "run-parts"].map(String::from).to_vec();
        let names: Vec<String> = ["xz", "schedbench"].map(String::from).to_vec();
        assert_eq!(
            shadow_functions(&names, &applets).unwrap(),
            "xz() { /bin/xz \"$@\"; }\n"
        );
        // A name no shell function can have is refused, not silently lost.
        let err = shadow_functions(&["run-parts".to_string()], &applets)
            .unwrap_err()
            .to_string();
        assert!(err.contains("run-parts"), "{err}");
    }
}
