//! Packaging of `vsched daemon` (docs/daemon.md, "Packaging"): the Debian
//! package scripts/build-deb.sh makes from this test's own binary and
//! runtime library, looked at with dpkg-deb, unpacked into temporary
//! directories and installed and purged with dpkg into a private root
//! (never this machine's); then installed, run, upgraded and purged as
//! users do, with apt and systemd in a Debian lab guest; and the
//! Kubernetes DaemonSet, parsed, checked for the privileges it grants and
//! against `vsched daemon --help`. The package itself never touches the
//! host: the maintainer scripts run only with $DPKG_ROOT set to a
//! temporary root and a stand-in `systemctl` first on PATH that records
//! any call, or inside the guest. The guest needs what the lab needs (root,
//! QEMU 10, mmdebstrap; docs/lab.md), which pins and caps QEMU's threads
//! with cgroups of its own and removes them after.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use yaml_rust2::{Yaml, YamlLoader};

const VSCHED: &str = env!("CARGO_BIN_EXE_vsched");
/// The workspace version ([workspace.package]), which the package carries.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn deb_arch() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "amd64"
    } else if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        panic!("no Debian architecture name known for this target")
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

/// This test process's scratch directory under target/tmp; directories of
/// earlier runs whose process is gone are removed first.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packaging");
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let pid = e.file_name().to_string_lossy().to_string();
                if !Path::new("/proc").join(&pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// A fresh directory for one test.
fn test_dir(name: &str) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The package built once per test process, unpacked.
struct Package {
    deb: PathBuf,
    /// `dpkg-deb -x`: the files as they would be installed.
    tree: PathBuf,
    /// `dpkg-deb -e`: control, conffiles, md5sums, maintainer scripts.
    control: PathBuf,
}

/// The package, or None (recorded as a skip for `test`) when this machine
/// lacks the tools the build needs.
fn package(test: &str) -> Option<&'static Package> {
    for (tool, debian) in [
        ("dpkg-deb", "dpkg"),
        ("dpkg-shlibdeps", "dpkg-dev"),
        ("strip", "binutils"),
    ] {
        if !have(tool) {
            common::skip(
                test,
                &format!("{tool} is missing (apt-get install {debian})"),
            );
            return None;
        }
    }
    static PACKAGE: OnceLock<Package> = OnceLock::new();
    Some(PACKAGE.get_or_init(build_package))
}

fn build_package() -> Package {
    let dir = scratch().join("package");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let script = repo().join("scripts/build-deb.sh");
    let printed = stdout(
        Command::new("bash")
            .arg(&script)
            .args(["--bin", VSCHED, "--lib"])
            .arg(common::sync_library())
            .arg("--out")
            .arg(&out_dir)
            .env_remove("VSCHED_BIN")
            .env_remove("VSCHED_SYNC_LIB")
            .env_remove("VSCHED_DEB_DIR"),
    );
    let deb = PathBuf::from(printed.lines().last().expect("the script prints the .deb"));
    assert_eq!(
        deb,
        out_dir.join(format!("vsched_{VERSION}_{}.deb", deb_arch())),
        "{printed}"
    );
    assert!(deb.is_file());
    let tree = dir.join("tree");
    let control = dir.join("control");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree));
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    Package { deb, tree, control }
}

/// Fields of a deb822 paragraph; continuation lines joined with '\n'.
fn fields(paragraph: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in paragraph.lines() {
        if line.starts_with([' ', '\t']) {
            let key = last
                .as_ref()
                .expect("a continuation line opens a paragraph");
            let value: &mut String = map.get_mut(key).unwrap();
            value.push('\n');
            value.push_str(line.trim());
        } else if let Some((k, v)) = line.split_once(':') {
            assert!(
                map.insert(k.to_string(), v.trim().to_string()).is_none(),
                "field {k} twice in:\n{paragraph}"
            );
            last = Some(k.to_string());
        } else {
            panic!("not a deb822 line: {line:?}");
        }
    }
    map
}

/// The files the package must hold (path, `ls -l` mode).
const FILES: &[(&str, &str)] = &[
    ("usr/bin/vsched", "-rwxr-xr-x"),
    ("usr/lib/vsched/libvsched_sync.so", "-rw-r--r--"),
    ("usr/lib/systemd/system/vsched.service", "-rw-r--r--"),
    ("etc/default/vsched", "-rw-r--r--"),
    ("usr/share/vsched/vsched-alerts.yml", "-rw-r--r--"),
    ("usr/share/vsched/vsched-dashboard.json", "-rw-r--r--"),
    ("usr/share/vsched/vsched-rwc.conf", "-rw-r--r--"),
    ("usr/share/doc/vsched/copyright", "-rw-r--r--"),
    ("usr/share/doc/vsched/changelog.gz", "-rw-r--r--"),
    ("usr/share/doc/vsched/third-party-licenses.gz", "-rw-r--r--"),
    ("usr/share/doc/vsched/README.md", "-rw-r--r--"),
    ("usr/share/doc/vsched/daemon.md", "-rw-r--r--"),
    ("usr/share/doc/vsched/usage.md", "-rw-r--r--"),
    ("usr/share/doc/vsched/sync.md", "-rw-r--r--"),
    ("usr/share/doc/vsched/sched.md", "-rw-r--r--"),
    ("usr/share/man/man1/vsched.1.gz", "-rw-r--r--"),
];

/// `dpkg-deb -c` lists every file above with its mode, owned by root; no
/// other file is executable, nothing is writable by others, set-id or
/// outside /usr and /etc/default (nothing in the aliased /lib, /bin).
#[test]
fn the_package_holds_every_file_with_sane_modes() {
    let Some(pkg) = package("the_package_holds_every_file_with_sane_modes") else {
        return;
    };
    let listing = stdout(Command::new("dpkg-deb").arg("-c").arg(&pkg.deb));
    let mut entries = BTreeMap::new();
    for line in listing.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() == 6, "an unexpected entry (a link?): {line}");
        let (mode, owner, path) = (cols[0], cols[1], cols[5]);
        assert_eq!(owner, "root/root", "{line}");
        let path = path.trim_start_matches("./").trim_end_matches('/');
        match mode.chars().next() {
            Some('d') => assert_eq!(mode, "drwxr-xr-x", "{line}"),
            Some('-') => assert!(
                mode == "-rw-r--r--" || (mode == "-rwxr-xr-x" && path.starts_with("usr/bin/")),
                "{line}"
            ),
            _ => panic!("neither a file nor a directory: {line}"),
        }
        assert!(
            path.is_empty()
                || ["usr", "etc", "etc/default"].contains(&path)
                || path.starts_with("usr/")
                || path.starts_with("etc/default/"),
            "outside /usr and /etc/default: {line}"
        );
        entries.insert(path.to_string(), mode.to_string());
    }
    for (path, mode) in FILES {
        assert_eq!(
            entries.get(*path).map(String::as_str),
            Some(*mode),
            "{path} missing or with another mode:\n{listing}"
        );
    }
}

/// The highest GLIBC_x.y symbol version the file uses, and the libraries it needs.
fn elf_needs(file: &Path) -> (Vec<u32>, BTreeSet<String>) {
    let syms = stdout(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(file));
    let newest = syms
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let parts: Option<Vec<u32>> = v.split('.').map(|p| p.parse().ok()).collect();
            parts
        })
        .max()
        .expect("a glibc symbol version");
    let dynamic = stdout(Command::new("readelf").arg("-d").arg(file));
    let needed = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .map(str::to_string)
        .collect();
    (newest, needed)
}

/// The control file names the package, the workspace's version, this
/// architecture and a description; Depends names exactly the packages of
/// the libraries the two ELF files need, libc6 at least at the newest
/// glibc symbol version they use; /etc/default/vsched is a conffile; the
/// md5sums match the files.
#[test]
fn the_control_file_is_honest() {
    let Some(pkg) = package("the_control_file_is_honest") else {
        return;
    };
    let control = fields(&stdout(Command::new("dpkg-deb").arg("-f").arg(&pkg.deb)));
    assert_eq!(control["Package"], "vsched");
    assert_eq!(control["Version"], VERSION);
    assert_eq!(control["Architecture"], deb_arch());
    assert!(control["Maintainer"].contains('<') && control["Maintainer"].ends_with('>'));
    let description = &control["Description"];
    assert!(
        description.lines().count() > 3 && description.contains("vsched daemon"),
        "{description}"
    );

    let mut newest = vec![0];
    let mut needed = BTreeSet::new();
    for file in ["usr/bin/vsched", "usr/lib/vsched/libvsched_sync.so"] {
        let (v, n) = elf_needs(&pkg.tree.join(file));
        newest = newest.max(v);
        needed.extend(n);
    }
    let wanted: BTreeSet<&str> = needed
        .iter()
        .map(|lib| match lib.as_str() {
            "libc.so.6" | "libm.so.6" | "ld-linux-x86-64.so.2" | "ld-linux-aarch64.so.1" => "libc6",
            "libgcc_s.so.1" => "libgcc-s1",
            other => panic!("{other}: which Debian package has it? (teach this test)"),
        })
        .collect();
    let depends: BTreeMap<&str, &str> = control["Depends"]
        .split(',')
        .map(|d| {
            let d = d.trim();
            d.split_once(' ').unwrap_or((d, ""))
        })
        .collect();
    assert_eq!(
        depends.keys().copied().collect::<BTreeSet<_>>(),
        wanted,
        "Depends: {}",
        control["Depends"]
    );
    let libc = depends["libc6"]
        .strip_prefix("(>= ")
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or_else(|| panic!("libc6 without a minimum version: {}", control["Depends"]));
    let libc: Vec<u32> = libc.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(
        libc >= newest,
        "libc6 (>= {libc:?}) but the files use GLIBC_{newest:?}"
    );

    let installed_kib: u64 = control["Installed-Size"].parse().unwrap();
    let bytes: u64 = FILES
        .iter()
        .map(|(f, _)| std::fs::metadata(pkg.tree.join(f)).unwrap().len())
        .sum();
    assert!(
        installed_kib >= bytes / 1024 && installed_kib < bytes / 1024 * 2,
        "Installed-Size {installed_kib} KiB for {bytes} bytes of files"
    );

    let conffiles = std::fs::read_to_string(pkg.control.join("conffiles")).unwrap();
    assert_eq!(conffiles, "/etc/default/vsched\n");
    // md5sums: every packaged file but the conffile, each matching.
    let sums = std::fs::read_to_string(pkg.control.join("md5sums")).unwrap();
    for (file, _) in FILES {
        assert_eq!(
            sums.contains(&format!("  {file}\n")),
            !file.starts_with("etc/"),
            "{file} in md5sums:\n{sums}"
        );
    }
    run(Command::new("md5sum")
        .args(["--check", "--quiet", "--strict"])
        .arg(pkg.control.join("md5sums"))
        .current_dir(&pkg.tree));
}

/// The unpacked binary runs, is the workspace's version, carries no debug
/// info (the script strips it), and `vsched exec` finds the runtime where
/// the package puts it (/usr/lib/vsched/, as ../lib/vsched/ from the
/// binary) and really preloads it: the program sees it in LD_PRELOAD and
/// the runtime prints its statistics at exit.
#[test]
fn the_unpacked_binary_runs_and_preloads_the_packaged_runtime() {
    let Some(pkg) = package("the_unpacked_binary_runs_and_preloads_the_packaged_runtime") else {
        return;
    };
    let bin = pkg.tree.join("usr/bin/vsched");
    let version = stdout(Command::new(&bin).arg("--version"));
    assert_eq!(version.trim(), format!("vsched {VERSION}"));
    let sections = stdout(Command::new("readelf").args(["-S", "-W"]).arg(&bin));
    assert!(sections.contains(".text") && !sections.contains(".debug_info"));

    // --spin-ns: no measurement, so no spin-budget cache written in $HOME.
    // env(1) prints what it was given and leaves through exit(), where the
    // runtime reports (a shell's _exit would skip that).
    let out = run(Command::new(&bin)
        .args(["exec", "--spin-ns", "1000", "--stats", "--", "env"])
        .env_remove("VSCHED_SYNC_LIB")
        .env_remove("LD_PRELOAD"));
    let env = String::from_utf8(out.stdout).unwrap();
    let preloaded = env
        .lines()
        .find_map(|l| l.strip_prefix("LD_PRELOAD="))
        .unwrap_or_else(|| panic!("no LD_PRELOAD in the program's environment:\n{env}"));
    let preloaded = PathBuf::from(preloaded);
    let packaged = pkg.tree.join("usr/lib/vsched/libvsched_sync.so");
    assert_eq!(
        preloaded.canonicalize().unwrap(),
        packaged.canonicalize().unwrap(),
        "preloaded {}",
        preloaded.display()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("vsched-sync: statistics"), "{stderr}");
}

/// The unit and /etc/default/vsched are deploy/systemd's files as they
/// are; what the unit names (ExecStart's binary, the EnvironmentFile, the
/// Documentation) is in the package; the packaged unit passes
/// `systemd-analyze verify` silently (ExecStart pointed at the unpacked
/// binary); the alerting rules and the dashboard are deploy/'s.
#[test]
fn the_unit_and_its_files_are_in_the_package() {
    let test = "the_unit_and_its_files_are_in_the_package";
    let Some(pkg) = package(test) else {
        return;
    };
    for (packaged, source) in [
        (
            "usr/lib/systemd/system/vsched.service",
            "deploy/systemd/vsched.service",
        ),
        ("etc/default/vsched", "deploy/systemd/vsched.default"),
        (
            "usr/share/vsched/vsched-alerts.yml",
            "deploy/prometheus/vsched-alerts.yml",
        ),
        (
            "usr/share/vsched/vsched-dashboard.json",
            "deploy/grafana/vsched-dashboard.json",
        ),
        (
            "usr/share/vsched/vsched-rwc.conf",
            "deploy/systemd/vsched-rwc.conf",
        ),
        ("usr/share/doc/vsched/daemon.md", "docs/daemon.md"),
    ] {
        assert!(
            std::fs::read(pkg.tree.join(packaged)).unwrap()
                == std::fs::read(repo().join(source)).unwrap(),
            "{packaged} differs from {source}"
        );
    }
    let unit =
        std::fs::read_to_string(pkg.tree.join("usr/lib/systemd/system/vsched.service")).unwrap();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in the unit"))
            .to_string()
    };
    let exec = value("ExecStart");
    let binary = exec.split_whitespace().next().unwrap();
    let env_file = value("EnvironmentFile");
    let doc = value("Documentation");
    for (what, path) in [
        ("ExecStart", binary),
        ("EnvironmentFile", env_file.trim_start_matches('-')),
        ("Documentation", doc.trim_start_matches("file:")),
    ] {
        let inside = pkg.tree.join(path.trim_start_matches('/'));
        assert!(inside.is_file(), "{what} names {path}, not in the package");
    }
    let mode = std::fs::metadata(pkg.tree.join(binary.trim_start_matches('/')))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "ExecStart's binary is not executable");
    // The options file sets the variable ExecStart expands.
    let defaults = std::fs::read_to_string(pkg.tree.join("etc/default/vsched")).unwrap();
    assert!(exec.contains("$VSCHED_DAEMON_OPTS") && defaults.contains("VSCHED_DAEMON_OPTS="));

    if !have("systemd-analyze") {
        common::skip(
            test,
            "systemd-analyze is not installed (apt-get install systemd)",
        );
        return;
    }
    let dir = test_dir("unit");
    let copy = dir.join("vsched.service");
    let unpacked = pkg.tree.join("usr/bin/vsched");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/vsched", unpacked.to_str().unwrap()),
    )
    .unwrap();
    common::assert_unit_verifies(&copy);
}

/// What an enabled, running service leaves under `root`: its socket in
/// /run/vsched and the enable link (purge must remove both).
/// Returns the enable link's path.
fn leave_service_traces(root: &Path) -> PathBuf {
    std::fs::create_dir_all(root.join("run/vsched")).unwrap();
    std::fs::write(root.join("run/vsched/daemon.sock"), "").unwrap();
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(
        "/usr/lib/systemd/system/vsched.service",
        wants.join("vsched.service"),
    )
    .unwrap();
    wants.join("vsched.service")
}

/// Paragraphs of a deb822 file.
fn paragraphs(text: &str) -> Vec<BTreeMap<String, String>> {
    text.split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .map(|p| fields(p.trim_matches('\n')))
        .collect()
}

/// debian/copyright is machine-readable (DEP-5): the format line, every
/// Files paragraph with a Copyright and a License whose text is given in
/// a stand-alone License paragraph; the third-party list names the crates
/// linked in, with their license texts.
#[test]
fn the_copyright_file_is_machine_readable() {
    let Some(pkg) = package("the_copyright_file_is_machine_readable") else {
        return;
    };
    let text = std::fs::read_to_string(pkg.tree.join("usr/share/doc/vsched/copyright")).unwrap();
    let paras = paragraphs(&text);
    assert_eq!(
        paras[0].get("Format").map(String::as_str),
        Some("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
    );
    assert_eq!(paras[0]["Upstream-Name"], "vsched");
    let files: Vec<_> = paras.iter().filter(|p| p.contains_key("Files")).collect();
    assert!(
        files.iter().any(|p| p["Files"] == "*"),
        "no Files: * paragraph"
    );
    let texts: BTreeMap<&str, &str> = paras
        .iter()
        .filter(|p| !p.contains_key("Files") && p.contains_key("License"))
        .map(|p| p["License"].split_once('\n').expect("a license text"))
        .collect();
    for p in &files {
        assert!(p.contains_key("Copyright"), "{p:?}");
        let name = &p["License"];
        assert!(
            !name.contains('\n') && texts.contains_key(name.as_str()),
            "no License paragraph for {name}"
        );
    }
    assert!(texts["Apache-2.0"].contains("/usr/share/common-licenses/Apache-2.0"));

    let list = stdout(
        Command::new("gzip").arg("-dc").arg(
            pkg.tree
                .join("usr/share/doc/vsched/third-party-licenses.gz"),
        ),
    );
    for krate in [
        "clap",
        "libc",
        "libbpf-rs",
        "prometheus-client",
        "serde_json",
    ] {
        assert!(
            list.contains(&format!("\n==== {krate} ")),
            "{krate} is not in third-party-licenses"
        );
    }
    assert!(list.contains("Permission is hereby granted"), "no MIT text");
    assert!(
        !list.contains("==== vsched"),
        "vsched's own crates are not third-party"
    );
}

/// A gzip file made with -n: no file name, no time stamp (reproducible).
fn assert_gzip_n(file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(
        &bytes[..3],
        &[0x1f, 0x8b, 8],
        "{} is not gzip",
        file.display()
    );
    assert_eq!(bytes[3] & 0x08, 0, "{} records a file name", file.display());
    assert_eq!(
        &bytes[4..8],
        &[0, 0, 0, 0],
        "{} records a time",
        file.display()
    );
}

/// vsched(1) is gzip -9n, renders without a single groff warning, and has
/// a section for every command `vsched --help` lists (nested ones too)
/// and the daemon's options.
#[test]
fn the_man_page_is_valid_roff_and_covers_every_command() {
    let test = "the_man_page_is_valid_roff_and_covers_every_command";
    let Some(pkg) = package(test) else {
        return;
    };
    let gz = pkg.tree.join("usr/share/man/man1/vsched.1.gz");
    for file in [
        &gz,
        &pkg.tree.join("usr/share/doc/vsched/changelog.gz"),
        &pkg.tree
            .join("usr/share/doc/vsched/third-party-licenses.gz"),
    ] {
        assert_gzip_n(file);
    }
    let roff = stdout(Command::new("gzip").arg("-dc").arg(&gz));
    assert!(roff.contains(".TH VSCHED 1 "), "{roff}");
    assert!(roff.contains(&format!("\"vsched {VERSION}\"")));
    let top = stdout(Command::new(VSCHED).arg("--help"));
    let commands: Vec<&str> = top
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(
        commands.contains(&"daemon") && commands.len() >= 8,
        "{commands:?}"
    );
    for c in &commands {
        let name = c.replace('-', "\\-");
        assert!(
            roff.contains(&format!(".SS \"vsched {name}\"")),
            "no section for {c}"
        );
    }
    for nested in ["lab run", "bench sched"] {
        assert!(
            roff.contains(&format!(".SS \"vsched {nested}\"")),
            "no {nested}"
        );
    }
    for flag in ["\\-\\-listen", "\\-\\-interval", "\\-\\-socket"] {
        assert!(
            roff.contains(flag),
            "the daemon's {flag} is not in the page"
        );
    }

    if !have("groff") {
        common::skip(test, "groff is not installed (apt-get install groff-base)");
        return;
    }
    let dir = test_dir("man");
    let page = dir.join("vsched.1");
    std::fs::write(&page, &roff).unwrap();
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-z", "-ww"])
        .arg(&page)
        .output()
        .unwrap();
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warnings.trim().is_empty(),
        "{warnings}"
    );
    let out = run(Command::new("groff")
        .args(["-man", "-Tutf8", "-P-c"])
        .arg(&page)
        .env("MANWIDTH", "80"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vsched daemon") && text.contains("--listen"),
        "{text}"
    );
}

/// A directory whose `systemctl` records its arguments in `log`, so that
/// a maintainer script that reached for the real one would be seen.
fn fake_systemctl(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("systemctl.log");
    let script = bin.join("systemctl");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\nexit 0\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, log)
}

fn path_with(bin: &Path) -> String {
    format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display())
}

/// The maintainer scripts are POSIX sh with `set -e` (sh -n, dash -n and,
/// where installed, shellcheck -s sh); they remove only paths under
/// $DPKG_ROOT; and run twice in a row in every role, with $DPKG_ROOT set
/// to a private root, they succeed, call no systemctl (not the host's
/// systemd), and purge removes /etc/default/vsched, /run/vsched and the
/// `systemctl enable` link, but not an administrator's drop-in.
#[test]
fn the_maintainer_scripts_are_posix_idempotent_and_keep_to_dpkg_root() {
    let test = "the_maintainer_scripts_are_posix_idempotent_and_keep_to_dpkg_root";
    let Some(pkg) = package(test) else {
        return;
    };
    let scripts = ["postinst", "prerm", "postrm"];
    for name in scripts {
        let path = pkg.control.join(name);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("#!/bin/sh\n"), "{name}: not POSIX sh");
        assert!(
            text.lines().any(|l| l.trim() == "set -e"),
            "{name}: no set -e"
        );
        assert!(text.contains("DPKG_ROOT"), "{name} ignores DPKG_ROOT");
        // Before running anything: no rm of a literal absolute path (it
        // would be the host's even under DPKG_ROOT).
        for line in text.lines().filter(|l| l.trim_start().starts_with("rm ")) {
            for word in line
                .split_whitespace()
                .skip(1)
                .filter(|w| !w.starts_with('-'))
            {
                assert!(
                    !word.trim_start_matches('"').starts_with('/'),
                    "{name} removes a host path: {line}"
                );
            }
        }
        run(Command::new("sh").arg("-n").arg(&path));
        if have("dash") {
            run(Command::new("dash").arg("-n").arg(&path));
        }
    }
    if have("shellcheck") {
        run(Command::new("shellcheck")
            .args(["-s", "sh"])
            .args(scripts.map(|s| pkg.control.join(s))));
    } else {
        common::skip(
            test,
            "shellcheck is not installed (apt-get install shellcheck)",
        );
    }

    let dir = test_dir("scripts");
    let root = dir.join("root");
    let (fakebin, log) = fake_systemctl(&dir);
    std::fs::create_dir_all(root.join("etc/default")).unwrap();
    std::fs::copy(
        pkg.tree.join("etc/default/vsched"),
        root.join("etc/default/vsched"),
    )
    .unwrap();
    let enable_link = leave_service_traces(&root);
    let dropin = root.join("etc/systemd/system/vsched.service.d/local.conf");
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    std::fs::write(&dropin, "[Service]\n").unwrap();

    let script = |name: &str, args: &[&str]| {
        for _ in 0..2 {
            run(Command::new("sh")
                .arg(pkg.control.join(name))
                .args(args)
                .env("DPKG_ROOT", &root)
                .env("PATH", path_with(&fakebin)));
        }
    };
    script("postinst", &["configure", ""]);
    script("postinst", &["configure", "0.0.1"]);
    script("prerm", &["upgrade", VERSION]);
    script("prerm", &["remove"]);
    script("postrm", &["remove"]);
    assert!(
        root.join("etc/default/vsched").exists(),
        "remove kept no configuration"
    );
    script("postrm", &["purge"]);
    assert!(!root.join("etc/default/vsched").exists());
    assert!(!root.join("run/vsched").exists());
    assert!(std::fs::symlink_metadata(&enable_link).is_err());
    assert!(dropin.exists(), "purge removed the administrator's drop-in");
    assert!(
        !log.exists(),
        "systemctl called under DPKG_ROOT: {:?}",
        std::fs::read_to_string(&log)
    );
}

fn dpkg(root: &Path, fakebin: &Path, args: &[&str]) -> Output {
    let admin = root.join("var/lib/dpkg");
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg(format!("--admindir={}", admin.display()))
        .arg(format!("--log={}", root.with_extension("log").display()))
        .args([
            "--force-not-root",
            "--force-script-chrootless",
            "--force-depends",
            // A host's dpkg.cfg.d may leave out docs (Docker images do).
            "--path-include=*",
        ])
        .args(args)
        .env("PATH", path_with(fakebin)))
}

/// A real install, reinstall, remove and purge with dpkg, into a private
/// root with its own database (--root, --admindir, scripts run chrootless
/// with $DPKG_ROOT; dependencies forced, as that root has no libc6): the
/// files arrive, the conffile is registered and an edited one survives a
/// reinstall and a remove; purge leaves nothing of the package, nor
/// /run/vsched or the enable link; no systemctl is called.
#[test]
fn installs_and_purges_cleanly_in_a_private_root() {
    let test = "installs_and_purges_cleanly_in_a_private_root";
    let Some(pkg) = package(test) else {
        return;
    };
    if !have("dpkg") {
        common::skip(test, "dpkg is missing");
        return;
    }
    let dir = test_dir("dpkg");
    let root = dir.join("root");
    let (fakebin, log) = fake_systemctl(&dir);
    for sub in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(root.join("var/lib/dpkg").join(sub)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let deb = pkg.deb.to_str().unwrap();
    let status = |root: &Path| std::fs::read_to_string(root.join("var/lib/dpkg/status")).unwrap();

    dpkg(&root, &fakebin, &["--install", deb]);
    for (file, _) in FILES {
        assert!(root.join(file).is_file(), "{file} not installed");
    }
    let installed = status(&root);
    assert!(
        installed.contains("Status: install ok installed"),
        "{installed}"
    );
    assert!(
        installed.contains("Conffiles:\n /etc/default/vsched "),
        "{installed}"
    );
    let version = run(Command::new(root.join("usr/bin/vsched")).arg("--version"));
    assert!(String::from_utf8_lossy(&version.stdout).contains(VERSION));

    let conf = root.join("etc/default/vsched");
    let edited = format!(
        "{}VSCHED_DAEMON_OPTS=\"--interval 2s\"\n",
        std::fs::read_to_string(&conf).unwrap()
    );
    std::fs::write(&conf, &edited).unwrap();
    dpkg(&root, &fakebin, &["--install", deb]);
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        edited,
        "reinstall replaced an edited conffile"
    );

    dpkg(&root, &fakebin, &["--remove", "vsched"]);
    assert!(!root.join("usr/bin/vsched").exists());
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        edited,
        "remove took the configuration"
    );
    assert!(status(&root).contains("Status: deinstall ok config-files"));

    // What a running service would have left.
    let enable_link = leave_service_traces(&root);

    dpkg(&root, &fakebin, &["--purge", "vsched"]);
    assert!(
        !status(&root).contains("Package: vsched"),
        "{}",
        status(&root)
    );
    assert!(!conf.exists() && !root.join("run/vsched").exists());
    assert!(std::fs::symlink_metadata(&enable_link).is_err());
    let left: Vec<_> = walk(&root)
        .into_iter()
        .filter(|p| !p.starts_with(root.join("var/lib/dpkg")) && p.is_file())
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    assert!(!log.exists(), "systemctl called under DPKG_ROOT");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            all.extend(walk(&p));
        }
        all.push(p);
    }
    all
}

// ---- the package under systemd, in a Debian guest ----

/// The package again with a higher version (`VERSION+lab1`): what an
/// upgrade installs.
fn upgrade_package(pkg: &Package) -> PathBuf {
    let dir = test_dir("upgrade");
    let tree = dir.join("tree");
    run(Command::new("dpkg-deb").arg("-R").arg(&pkg.deb).arg(&tree));
    let control = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).unwrap();
    let bumped = text.replace(
        &format!("\nVersion: {VERSION}\n"),
        &format!("\nVersion: {VERSION}+lab1\n"),
    );
    assert_ne!(text, bumped, "no Version: {VERSION} line in\n{text}");
    std::fs::write(&control, bumped).unwrap();
    let deb = dir.join(format!("vsched_{VERSION}+lab1_{}.deb", deb_arch()));
    run(Command::new("dpkg-deb")
        .arg("--root-owner-group")
        .arg("--build")
        .arg(&tree)
        .arg(&deb));
    deb
}

/// The "@step key=value ..." lines of lab/package/systemd-check.sh.
fn steps(output: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix('@'))
        .filter(|l| !l.starts_with("status "))
        .map(|l| {
            let mut words = l.split_whitespace();
            let step = words.next().unwrap_or_default().to_string();
            let pairs = words
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (step, pairs)
        })
        .collect()
}

/// Installed with apt in a Debian 13 guest booted with systemd
/// (lab/package/debian-systemd.toml, two vCPUs stacked on one host CPU;
/// lab/package/systemd-check.sh does what an administrator does): not
/// started on install; enabled and started, it serves metrics on loopback
/// as a dynamic user and answers `vsched status`; with the RWC drop-in it
/// keeps a slice's tasks off the stacked vCPU it hides, and puts the
/// cpuset back when stopped and when everything in the service is killed
/// (ExecStopPost, before Restart= starts it again); reinstalled and
/// upgraded while running it restarts with the administrator's
/// configuration kept, and stays stopped when installed over while
/// stopped; purged while running with the slice narrowed, it stops, puts
/// the cpuset back and leaves nothing but the administrator's drop-in.
#[test]
fn installs_runs_upgrades_and_purges_under_systemd_in_a_debian_guest() {
    let test = "installs_runs_upgrades_and_purges_under_systemd_in_a_debian_guest";
    let Some(pkg) = package(test) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip(test, "the lab needs root (it pins and caps QEMU's threads)");
        return;
    }
    let _serial = common::serial();
    let upgrade = upgrade_package(pkg);
    let script = repo().join("lab/package/systemd-check.sh");
    let layout_text =
        std::fs::read_to_string(repo().join("lab/package/debian-systemd.toml")).unwrap();
    // A top-level key, so it goes before the layout's [[vcpu]] tables.
    let layout = test_dir("guest").join("debian-systemd.toml");
    std::fs::write(
        &layout,
        format!(
            "extra_binaries = [\"{}\", \"{}\", \"{}\"]\n{layout_text}",
            pkg.deb.display(),
            upgrade.display(),
            script.display()
        ),
    )
    .unwrap();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let command = format!(
        "sh /opt/vsched-lab/bin/systemd-check.sh {} {}",
        name(&pkg.deb),
        name(&upgrade)
    );
    let results = common::lab::run_in_guest(layout.to_str().unwrap(), &[&command]);
    let (exit, output) = &results[0];
    assert_eq!(*exit, Some(0), "{output}");
    let s = steps(output);
    let step = |name: &str| {
        s.get(name)
            .unwrap_or_else(|| panic!("no @{name} line in the guest's output:\n{output}"))
    };
    let expect = |name: &str, wanted: &[(&str, &str)]| {
        let got = step(name);
        for (key, value) in wanted {
            assert_eq!(
                got.get(*key).map(String::as_str),
                Some(*value),
                "@{name} {key}: {got:?}\n{output}"
            );
        }
    };
    let before = step("before").clone();
    let put_back = [
        ("cpus", "[]"),
        ("root_ctl", before["root_ctl"].as_str()),
        ("work_allowed", before["work_allowed"].as_str()),
    ];
    assert_eq!(before["work_allowed"], "[0-1]", "{output}");

    expect("boot", &[("state", "running")]);
    expect(
        "install",
        &[
            ("exit", "0"),
            ("version", VERSION),
            ("bin", "/usr/bin/vsched"),
            ("enabled", "disabled"),
            ("active", "inactive"),
        ],
    );
    expect(
        "start",
        &[
            ("exit", "0"),
            ("metrics_ok", "1"),
            ("active", "active"),
            ("enabled", "enabled"),
        ],
    );
    let start = step("start");
    assert!(
        start["uid"].parse::<u32>().is_ok_and(|uid| uid > 0),
        "DynamicUser=yes: a user of its own, not root: {start:?}\n{output}"
    );
    assert!(
        start["series"].parse::<u32>().unwrap_or(0) >= 2,
        "per-vCPU series: {start:?}\n{output}"
    );
    let status_line = output
        .lines()
        .find_map(|l| l.strip_prefix("@status "))
        .unwrap_or_else(|| panic!("no @status line:\n{output}"));
    let status: serde_json::Value = serde_json::from_str(status_line)
        .unwrap_or_else(|e| panic!("vsched status --json in the guest ({e}): {status_line}"));
    assert_eq!(
        status["report"]["vcpus"].as_array().map(Vec::len),
        Some(2),
        "the daemon's model of the guest's two vCPUs: {status_line}"
    );

    expect(
        "rwc",
        &[
            ("narrowed", "1"),
            ("cpus", "[0]"),
            ("work_allowed", "[0]"),
            ("hidden", "1"),
            ("uid", "0"),
        ],
    );
    expect("stop", &put_back);
    expect("stop", &[("active", "inactive")]);
    assert!(
        !step("stop")["state"].contains("rwc-state"),
        "the state file outlived a clean stop\n{output}"
    );
    // ExecStopPost's restore, not the next daemon's after Restart=. The
    // control: with the ExecStopPost= line taken out of vsched-rwc.conf,
    // the cpuset still came back within the 10 s, but only after the
    // restart ("restarted_before_restore=1"), and this failed.
    expect(
        "kill",
        &[
            ("narrowed_first", "1"),
            ("restored", "1"),
            ("restarted_before_restore", "0"),
        ],
    );
    expect("kill", &put_back);
    expect(
        "restarted",
        &[
            ("narrowed", "1"),
            ("active", "active"),
            ("new_pid", "yes"),
            ("restarts", "1"),
        ],
    );
    for name in ["reinstall", "upgrade"] {
        expect(
            name,
            &[
                ("exit", "0"),
                ("active", "active"),
                ("restarted", "yes"),
                ("conf_kept", "1"),
            ],
        );
    }
    let upgraded = format!("{VERSION}+lab1");
    expect("upgrade", &[("version", upgraded.as_str())]);
    expect(
        "reinstall_stopped",
        &[
            ("exit", "0"),
            ("active", "inactive"),
            ("enabled", "enabled"),
        ],
    );
    expect(
        "purge",
        &[
            ("exit", "0"),
            ("narrowed_first", "1"),
            ("left", "[]"),
            ("known", "no"),
            ("unit_files", "0"),
            ("processes", "0"),
            ("dropin", "[rwc.conf,]"),
        ],
    );
    expect("purge", &put_back);
}

// ---- the Kubernetes DaemonSet ----

fn manifest() -> Vec<Yaml> {
    let path = repo().join("deploy/kubernetes/vsched-daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn of_kind<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    let found: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} in the manifest");
    found[0]
}

fn strings(v: &Yaml) -> Vec<&str> {
    v.as_vec()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("not a string: {s:?}")))
        .collect()
}

/// A Kubernetes CPU quantity in millicores ("10m", "0.5", "2").
fn millicores(v: &Yaml) -> u64 {
    match v {
        Yaml::Integer(n) => *n as u64 * 1000,
        Yaml::Real(r) => (r.parse::<f64>().unwrap() * 1000.0).round() as u64,
        Yaml::String(s) => match s.strip_suffix('m') {
            Some(m) => m.parse().unwrap(),
            None => (s.parse::<f64>().unwrap() * 1000.0).round() as u64,
        },
        other => panic!("not a CPU quantity: {other:?}"),
    }
}

/// Every label and annotation value is a YAML string (the API refuses
/// `true` or 9488 unquoted there).
fn assert_string_map(v: &Yaml, what: &str) {
    if let Some(h) = v.as_hash() {
        for (k, val) in h {
            assert!(
                val.as_str().is_some(),
                "{what} {k:?} is not a string: {val:?}"
            );
        }
    }
}

/// The DaemonSet grants what `vsched daemon` needs and no more: not
/// privileged, no privilege escalation, every capability dropped but
/// SYS_NICE, read-only root, RuntimeDefault seccomp, none of the host's
/// namespaces, a service account without a token (and the namespace
/// binding nothing to it), a writable emptyDir only at /run/vsched; root
/// in the container by decision (see the manifest: Kubernetes has no
/// ambient capabilities). It runs on every node (tolerates every taint),
/// is Burstable (a non-integer CPU request, no CPU limit: never pinned to
/// exclusive CPUs by the static CPU manager, never throttled), has a
/// memory limit, and its labels and annotations are strings.
#[test]
fn the_daemonset_grants_only_what_the_daemon_needs() {
    let docs = manifest();
    let ns = of_kind(&docs, "Namespace");
    assert_eq!(ns["metadata"]["name"].as_str(), Some("vsched"));
    let sa = of_kind(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["namespace"].as_str(), Some("vsched"));
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(false));
    for kind in [
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "Secret",
    ] {
        assert!(
            docs.iter().all(|d| d["kind"].as_str() != Some(kind)),
            "the manifest grants API access through a {kind}"
        );
    }
    for d in &docs {
        assert!(
            d["apiVersion"].as_str().is_some() && d["kind"].as_str().is_some(),
            "{d:?}"
        );
        assert_string_map(&d["metadata"]["labels"], "label");
        if d["kind"].as_str() != Some("Namespace") {
            assert_eq!(d["metadata"]["namespace"].as_str(), Some("vsched"), "{d:?}");
        }
    }

    let ds = of_kind(&docs, "DaemonSet");
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    let template = &ds["spec"]["template"];
    let selector = ds["spec"]["selector"]["matchLabels"].as_hash().unwrap();
    for (k, v) in selector {
        assert_eq!(
            &template["metadata"]["labels"][k.as_str().unwrap()],
            v,
            "selector {k:?}"
        );
    }
    assert_string_map(&template["metadata"]["labels"], "label");
    assert_string_map(&template["metadata"]["annotations"], "annotation");
    let pod = &template["spec"];
    assert_eq!(pod["serviceAccountName"].as_str(), Some("vsched"));
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(
            pod[host].is_badvalue() || pod[host].as_bool() == Some(false),
            "{host} set"
        );
    }
    let tolerations = pod["tolerations"].as_vec().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"].as_str() == Some("Exists")
                && t["key"].is_badvalue()
                && t["effect"].is_badvalue()),
        "no toleration of every taint: {tolerations:?}"
    );
    assert!(pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .all(|v| v["hostPath"].is_badvalue()));

    let containers = pod["containers"].as_vec().unwrap();
    assert_eq!(containers.len(), 1);
    assert!(pod["initContainers"].is_badvalue());
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(strings(&sc["capabilities"]["add"]), ["SYS_NICE"]);
    assert_eq!(sc["runAsUser"].as_i64(), Some(0));
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(false));
    assert!(sc["procMount"].is_badvalue() && sc["seLinuxOptions"].is_badvalue());
    let seccomp = if sc["seccompProfile"].is_badvalue() {
        &pod["securityContext"]["seccompProfile"]
    } else {
        &sc["seccompProfile"]
    };
    assert_eq!(seccomp["type"].as_str(), Some("RuntimeDefault"));
    // Baseline refuses SYS_NICE: the namespace must admit it.
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str(),
        Some("privileged")
    );

    let res = &c["resources"];
    let cpu = millicores(&res["requests"]["cpu"]);
    assert!(
        cpu > 0 && cpu % 1000 != 0,
        "integer CPU request {cpu}m: pinnable"
    );
    assert!(
        res["limits"]["cpu"].is_badvalue(),
        "a CPU limit would throttle the probers"
    );
    assert!(
        res["limits"]["memory"].as_str().is_some(),
        "no memory limit"
    );
    assert!(
        res["requests"]["memory"].as_str().is_some(),
        "no memory request"
    );

    let mounts = c["volumeMounts"].as_vec().unwrap();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(mounts[0]["mountPath"].as_str(), Some("/run/vsched"));
    assert!(mounts[0]["readOnly"].as_bool() != Some(true));
    let volume = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mounts[0]["name"])
        .expect("the mount's volume");
    assert!(
        !volume["emptyDir"].is_badvalue(),
        "/run/vsched is not an emptyDir"
    );
}

/// The container runs `vsched daemon --listen 0.0.0.0:9488` with flags
/// `vsched daemon --help` really has (and the liveness probe a real
/// `vsched status` flag), on the status socket's default path under the
/// writable mount; the port, the scrape annotations and the
/// NetworkPolicy (the only ingress: TCP 9488 from the prometheus
/// namespace; no egress) agree; the Dockerfile builds what the manifest runs.
#[test]
fn the_daemonset_runs_real_daemon_options_on_the_scraped_port() {
    let docs = manifest();
    let ds = of_kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(strings(&c["command"]), ["/usr/bin/vsched"]);
    let args = strings(&c["args"]);
    assert_eq!(args[0], "daemon");
    let listen = args
        .iter()
        .position(|a| *a == "--listen")
        .map(|i| args[i + 1])
        .expect("--listen");
    assert_eq!(listen, "0.0.0.0:9488");

    let help = stdout(Command::new(VSCHED).args(["daemon", "--help"]));
    let flags: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| a.starts_with('-'))
        .collect();
    assert!(!flags.is_empty());
    for flag in &flags {
        assert!(
            help.contains(&format!("  {flag} ")) || help.contains(&format!("  {flag}\n")),
            "`vsched daemon` has no {flag}:\n{help}"
        );
    }
    // The socket: the default (unless --socket is given) must be in the mount.
    let socket = match args.iter().position(|a| *a == "--socket") {
        Some(i) => args[i + 1].to_string(),
        None => help
            .split("--socket")
            .nth(1)
            .and_then(|rest| rest.split("[default: ").nth(1))
            .and_then(|rest| rest.split(']').next())
            .expect("the socket's default in --help")
            .to_string(),
    };
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert!(
        socket.starts_with(&format!("{mount}/")),
        "socket {socket} outside {mount}"
    );
    let probe = strings(&c["livenessProbe"]["exec"]["command"]);
    assert_eq!(probe[..2], ["/usr/bin/vsched", "status"]);
    let status_help = stdout(Command::new(VSCHED).args(["status", "--help"]));
    for flag in probe[2..].iter().filter(|a| a.starts_with('-')) {
        assert!(
            status_help.contains(&format!("  {flag}")),
            "`vsched status` has no {flag}"
        );
    }

    let port = listen.rsplit(':').next().unwrap();
    let ports = c["ports"].as_vec().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0]["containerPort"].as_i64(),
        Some(port.parse().unwrap())
    );
    assert!(
        ports[0]["hostPort"].is_badvalue(),
        "a hostPort exposes the node"
    );
    let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some(port));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));

    let np = of_kind(&docs, "NetworkPolicy");
    assert_eq!(np["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"],
        "the policy selects other pods"
    );
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress", "Egress"]);
    assert_eq!(
        np["spec"]["egress"].as_vec().map(Vec::len),
        Some(0),
        "egress allowed"
    );
    let ingress = np["spec"]["ingress"].as_vec().unwrap();
    assert_eq!(ingress.len(), 1);
    let from = ingress[0]["from"].as_vec().unwrap();
    assert_eq!(from.len(), 1);
    assert!(from[0]["podSelector"].is_badvalue() && from[0]["ipBlock"].is_badvalue());
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str(),
        Some("prometheus")
    );
    let np_ports = ingress[0]["ports"].as_vec().unwrap();
    assert_eq!(np_ports.len(), 1);
    assert_eq!(np_ports[0]["port"].as_i64(), Some(port.parse().unwrap()));
    assert_eq!(np_ports[0]["protocol"].as_str(), Some("TCP"));

    let dockerfile = std::fs::read_to_string(repo().join("deploy/container/Dockerfile")).unwrap();
    let lines: Vec<&str> = dockerfile.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(lines.contains(&"FROM debian:stable-slim"), "{dockerfile}");
    assert!(
        dockerfile.contains("apt-get install -y --no-install-recommends /tmp/vsched_*.deb"),
        "{dockerfile}"
    );
    assert!(
        lines.contains(&"ENTRYPOINT [\"/usr/bin/vsched\"]"),
        "{dockerfile}"
    );
}
