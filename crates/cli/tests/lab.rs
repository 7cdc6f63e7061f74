//! The VM lab end to end: each shipped layout boots a real guest under QEMU
//! and its probe must pass the layout's check; the lab removes what it
//! created when interrupted, and a run killed outright is cleaned up by the
//! next one. Needs root, QEMU 10 or newer and busybox-static (scripts/test.sh
//! installs them) and the Debian cloud kernel (fetched and cached).

mod common;

use common::vsched;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vsched_lab::host::{self, Flavor};

/// A shipped layout's file, or (a path) any other.
fn layout(name: &str) -> String {
    if name.ends_with(".toml") {
        return name.to_string();
    }
    format!(
        "{}/../../lab/layouts/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs `lab check --json`: exit 0 (pass), 1 (fail) or 3 (disturbed), the
/// exit status following the JSON's verdict.
fn check(name: &str) -> Value {
    let out = vsched(&["lab", "check", "--json", &layout(name)]);
    let text = String::from_utf8_lossy(&out.stdout);
    let verdict = match out.status.code() {
        Some(0) => "pass",
        Some(1) => "fail",
        Some(3) => "disturbed",
        code => panic!(
            "lab check {name} could not run (exit {code:?}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        r["verdict"], verdict,
        "exit status follows the verdict: {r:#}"
    );
    assert_eq!(r["pass"] == true, verdict == "pass", "{r:#}");
    assert_eq!(
        r["disturbances"].as_array().unwrap().is_empty(),
        verdict != "disturbed",
        "disturbed exactly when there is evidence: {r:#}"
    );
    r
}

/// Runs a check at most this often to get one that something outside the
/// lab did not disturb (a compile on a shared CI machine lasts minutes).
const ATTEMPTS: usize = 4;
/// Pause between attempts, for a passing disturbance to pass.
const PAUSE_BETWEEN_ATTEMPTS: Duration = Duration::from_secs(5);

/// The first undisturbed `lab check` of `name`, whatever its verdict. A
/// disturbed run says nothing about the probe, so it is repeated; if every
/// attempt is disturbed the test fails saying so: the contract could not
/// be checked on this machine now.
fn undisturbed_check(name: &str) -> Value {
    let mut reasons = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let r = check(name);
        if r["verdict"] != "disturbed" {
            return r;
        }
        let why: Vec<&str> = r["disturbances"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["description"].as_str())
            .collect();
        // What the scored items said anyway: no verdict, but a log that
        // shows whether such disturbances move them is the evidence any
        // change of the limits needs.
        let failed = failed_items(&r);
        eprintln!(
            "{name}: attempt {attempt} of {ATTEMPTS} DISTURBED: {}; scored items {}",
            why.join("; "),
            if failed.is_empty() {
                "all within tolerance".to_string()
            } else {
                format!("outside tolerance: {failed:?}")
            }
        );
        reasons.push(format!("attempt {attempt}: {}", why.join("; ")));
        if attempt < ATTEMPTS {
            std::thread::sleep(PAUSE_BETWEEN_ATTEMPTS);
        }
    }
    panic!(
        "{name}: all {ATTEMPTS} runs were DISTURBED by something outside the lab, so its \
         check could not be judged on this machine now:\n{}",
        reasons.join("\n")
    );
}

/// A layout's check is judged by the best of this many undisturbed runs.
/// capped-30pct's capped vCPU read 0.24-0.26 available against 0.30 ±15%
/// in about one run of three on some days (issue 14 saw 6 passes of 9; a
/// clean-checkout suite run on 2026-11-26 read 0.24): under TCG the probe
/// reads switched-out vCPUs low, which the check now allows for
/// (`vsched_lab::truth::EMULATED_SWITCHED_LOW_TOLERANCE`). Three runs
/// keep the contract testable (all three failing is the probe's fault, and
/// fails the test) without failing CI on one such day in three; every
/// failed run is noted in the suite's summary, so the flake stays visible.
const CHECK_TRIES: usize = 3;

/// The first passing undisturbed check of `name`, or the last failing one.
fn best_of_checks(name: &str) -> Value {
    let mut last = Value::Null;
    for attempt in 1..=CHECK_TRIES {
        let r = undisturbed_check(name);
        if r["pass"] == true {
            return r;
        }
        let failed: Vec<String> = failed_items(&r);
        common::note(
            "shipped_layouts_pass_their_full_checks",
            &format!("{name}: run {attempt} of {CHECK_TRIES} failed {failed:?}"),
        );
        last = r;
    }
    last
}

fn failed_items(r: &Value) -> Vec<String> {
    r["scored"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["items"].as_array().unwrap())
        .filter(|i| i["scored"] == true && i["pass"] != true)
        .map(|i| {
            format!(
                "{}: {} (expected {})",
                i["what"], i["measured"], i["expected"]
            )
        })
        .collect()
}

fn item<'a>(r: &'a Value, when: usize, what: &str) -> &'a Value {
    r["scored"][when]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["what"] == what)
        .unwrap_or_else(|| panic!("no item {what:?} in {r:#}"))
}

/// Every scored item of a check within its tolerance (stacking and
/// stragglers exact, available share 15%, episode mean 25%), naming the
/// items that were not.
fn assert_passes(name: &str, r: &Value) {
    let failed = failed_items(r);
    assert!(failed.is_empty(), "{name} failed {failed:?}: {r:#}");
    assert_eq!(r["pass"], true, "{name}: {r:#}");
}

/// The control of the best-of-CHECK_TRIES judgment above: the same
/// procedure passes no probe whose topology check is switched off
/// (`--only capacity,activity`) on the stacked pair. Every run must fail,
/// on the stacking and nothing it measured still: three tries cannot make
/// a blind probe pass.
#[test]
fn best_of_checks_fails_a_probe_blind_to_stacking() {
    let _guard = common::serial();
    let shipped = std::fs::read_to_string(layout("stacked-pair")).unwrap();
    assert!(
        !shipped.contains("[check]"),
        "the control replaces the check"
    );
    let dir = common::TempDir::new("blind-probe");
    let blind = dir.0.join("stacked-pair-blind.toml");
    std::fs::write(
        &blind,
        format!(
            "{shipped}\n[check]\ncommand = \"vsched probe --json --duration 1s --heavy 200ms \
             --min-episode 2ms --only capacity,activity\"\n"
        ),
    )
    .unwrap();
    let name = blind.to_str().unwrap();
    let r = best_of_checks(name);
    assert_eq!(r["pass"], false, "a probe blind to stacking passed: {r:#}");
    let failed = failed_items(&r);
    assert!(
        failed.iter().any(|f| f.contains("stacking groups")),
        "it failed on the stacking: {failed:?}"
    );
}

/// Bandwidth caps through cgroup v2 (threaded cgroups, cpu.max), as on an
/// ordinary cloud VM, end to end: only where the cpu controller is free on
/// a cgroup2 mount. Nothing is unmounted or moved to get it (on a hybrid
/// host such as the development machines v1 holds it and the test skips,
/// saying so); the v2 logic itself (files, values, order, removal, sweep,
/// detection) is unit-tested in vsched-lab against a stand-in tree.
#[test]
fn caps_work_under_cgroup_v2() {
    let _guard = common::serial();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let detected = host::detect_in(&mounts, &host::SysFs);
    if let Some(why) = host::why_no_cgroup_v2(&mounts, &host::SysFs) {
        // What can be checked here: the lab's choice agrees with the reason.
        assert!(!matches!(detected, Some(Flavor::V2(_))), "{why}");
        if let Some(Flavor::V1(v1)) = &detected {
            assert!(why.contains(&v1.display().to_string()), "{why}");
        }
        common::skip(
            "caps_work_under_cgroup_v2",
            &format!("{why}; nothing is unmounted to free it (the cgroup v2 logic is unit-tested in vsched-lab)"),
        );
        return;
    }
    let Some(Flavor::V2(root)) = detected else {
        unreachable!("why_no_cgroup_v2 found cgroup v2 usable")
    };
    let r = undisturbed_check("capped-30pct");
    assert_passes("capped-30pct under cgroup v2", &r);
    // Nothing left in the v2 hierarchy either.
    let left: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("vsched-lab-"))
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}

/// The lab's contract, end to end: every shipped layout's check passes in
/// full (best of CHECK_TRIES runs), and the phase change is followed (becomes-stacked scores the
/// initial placement unstacked and the final one stacked). A run that
/// something outside the lab disturbed is repeated (`undisturbed_check`).
#[test]
fn shipped_layouts_pass_their_full_checks() {
    let _guard = common::serial();
    for name in ["two-free", "stacked-pair", "capped-30pct"] {
        let r = best_of_checks(name);
        assert!(r["boot_ms"].as_f64().unwrap() > 0.0);
        assert_passes(name, &r);
    }
    let r = best_of_checks("becomes-stacked");
    assert_passes("becomes-stacked", &r);
    assert_eq!(
        r["scored"].as_array().unwrap().len(),
        2,
        "initial and final placements are both scored"
    );
    assert_eq!(item(&r, 0, "stacking groups")["measured"], "none", "{r:#}");
    assert_eq!(
        item(&r, 1, "stacking groups")["measured"],
        "[0, 1]",
        "{r:#}"
    );
}

/// Where the lab may create cgroups: the cgroup v1 cpu controller's mount
/// points and every cgroup2 mount (unified or hybrid layout).
fn cgroup_roots() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let is_cpu_v1 = f.get(2) == Some(&"cgroup")
                && f.get(3).is_some_and(|o| o.split(',').any(|o| o == "cpu"));
            (f.get(2) == Some(&"cgroup2") || is_cpu_v1).then(|| PathBuf::from(f[1]))
        })
        .collect()
}

fn lab_leftovers(pid: u32) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = cgroup_roots();
    dirs.push(PathBuf::from("/tmp"));
    for dir in dirs {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == format!("vsched-lab-{pid}")
                    || name.starts_with(&format!("vsched-lab-{pid}-"))
                {
                    found.push(e.path());
                }
            }
        }
    }
    found
}

/// QEMU processes whose parent is `pid`.
fn qemu_children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.contains("(qemu-system-x86")
                    && s.rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().nth(1))
                        == Some(&pid.to_string())
            })
        })
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a capped guest that sleeps, waits until its cgroups exist.
fn start_sleeping_guest() -> (std::process::Child, u32) {
    let child = Command::new(env!("CARGO_BIN_EXE_vsched"))
        .args(["lab", "run", &layout("capped-30pct"), "--cmd", "sleep 60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for("the guest's cgroup", Duration::from_secs(30), || {
        cgroup_roots()
            .iter()
            .any(|r| r.join(format!("vsched-lab-{pid}/vcpu1")).exists())
    });
    let qemu = qemu_children(pid);
    assert_eq!(qemu.len(), 1, "one QEMU child expected");
    (child, qemu[0])
}

#[test]
fn interrupt_and_kill_leave_nothing_behind() {
    let _guard = common::serial();
    // Ctrl-C: the run stops and removes everything itself.
    let (mut child, qemu) = start_sleeping_guest();
    let pid = child.id();
    // SAFETY: kill only sends a signal, to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "an interrupted run is an error");
    assert!(
        !Path::new(&format!("/proc/{qemu}")).exists(),
        "QEMU left running"
    );
    assert!(
        lab_leftovers(pid).is_empty(),
        "left behind: {:?}",
        lab_leftovers(pid)
    );

    // SIGKILL: QEMU dies with vsched; the next run sweeps the rest.
    let (mut child, qemu) = start_sleeping_guest();
    let pid = child.id();
    // SAFETY: kill only sends a signal, to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    child.wait().unwrap();
    wait_for(
        "QEMU to die with its parent",
        Duration::from_secs(5),
        || !Path::new(&format!("/proc/{qemu}")).exists(),
    );
    assert!(
        !lab_leftovers(pid).is_empty(),
        "a killed run cannot clean up itself"
    );
    let out = vsched(&["lab", "run", &layout("two-free"), "--cmd", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lab_leftovers(pid).is_empty(),
        "not swept: {:?}",
        lab_leftovers(pid)
    );
}

/// The control of the tests' retry after the emulator's panics
/// (common::lab::boot_past_emulator_panics): a guest kernel that panics
/// for any other reason while the commands run (here told to, through
/// sysrq) fails at once, with the panic's reason, and is not booted again.
#[test]
fn a_guest_panic_of_the_commands_own_is_not_taken_for_the_emulators() {
    let _guard = common::serial();
    let two_free = layout("two-free");
    let (out, retries) = common::lab::boot_past_emulator_panics(
        "two-free",
        &[
            "lab",
            "run",
            &two_free,
            "--cmd",
            "echo c > /proc/sysrq-trigger",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the guest kernel panicked while the commands ran;"),
        "{stderr}"
    );
    assert!(stderr.contains("sysrq triggered crash"), "{stderr}");
    assert!(
        !stderr.contains(vsched_lab::error::STALE_BREAKPOINT),
        "{stderr}"
    );
    // Below the limit: a retry that took this panic for the emulator's
    // would have used them all (one or two boot panics before it are
    // allowed, as rare as they are).
    assert!(
        retries < common::lab::EMULATOR_PANIC_RETRIES,
        "booted again after a panic of its own"
    );
}

/// A guest whose commands outlive the layout's `run_timeout_s` is asked
/// where it is before the lab gives up: the error quotes QEMU's vCPUs and
/// the guest kernel's answer to SysRq (each CPU's backtrace, the blocked
/// tasks), so that a hang seen once in CI says whether the kernel still
/// ran. Control: booted without `sysrq_always_enabled` (the kernel's
/// default allows no dumps), the same test failed at the first backtrace
/// check, its report holding only the log level's lines.
#[test]
fn a_hung_guest_is_asked_where_its_vcpus_are_before_the_lab_gives_up() {
    let _guard = common::serial();
    let dir = common::TempDir::new("hung-guest");
    let hung = dir.0.join("hung.toml");
    let two_free = std::fs::read_to_string(layout("two-free")).unwrap();
    std::fs::write(&hung, format!("run_timeout_s = 10\n{two_free}")).unwrap();
    let out = vsched(&[
        "lab",
        "run",
        hung.to_str().unwrap(),
        "--cmd",
        "echo @hanging; sleep 600",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("did not finish within 10 s") && stderr.contains("@hanging"),
        "the timeout, with the console before the keys: {stderr}"
    );
    for cpu in 0..2 {
        assert!(
            stderr.contains(&format!("  vCPU {cpu}: RIP ffffffff")),
            "vCPU {cpu}'s instruction pointer: {stderr}"
        );
    }
    assert!(
        stderr.contains("the guest kernel's answer to SysRq 7wl"),
        "{stderr}"
    );
    for cpu in 0..2 {
        assert!(
            stderr.contains(&format!("NMI backtrace for cpu {cpu}")),
            "vCPU {cpu}'s backtrace: {stderr}"
        );
    }
    assert!(stderr.contains("sysrq: Show Blocked State"), "{stderr}");
}

#[test]
fn bad_layouts_and_paths_are_refused() {
    let _guard = common::serial();
    let dir = std::env::temp_dir().join(format!("vsched-labtest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "vcpus = 2\n[[vcpu]]\nid = 0\nhost_cpu = 4000\n",
            "offers only",
        ),
        (
            "vcpus = 2\n[[vcpu]]\nid = 1\nquota_us = 20000\nperiod_us = 10000\n",
            "exceeds period_us",
        ),
        ("vcpus = 2\ncolour = \"red\"\n", "unknown field"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = vsched(&["lab", "check", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(err.contains(needle), "{text}: {err}");
    }
    let out = vsched(&[
        "lab",
        "run",
        &layout("two-free"),
        "--kernel",
        "/nonexistent/bzImage",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
    let out = vsched(&["lab", "run", "/nonexistent/layout.toml"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading layout"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression: a layout that shipped Debian's xz ran busybox's xz applet in
/// the guest (busybox's shell runs its applets before PATH). An extra
/// binary named like an applet is the one a command runs.
#[test]
fn an_extra_binary_named_like_a_busybox_applet_is_the_one_that_runs() {
    let _guard = common::serial();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("applet-shadow");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("xz");
    std::fs::write(&fake, "#!/bin/sh\necho \"the extra xz, args $*\"\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let text = format!(
        "extra_binaries = [\"{}\"]\n{}",
        fake.display(),
        std::fs::read_to_string(layout("two-free")).unwrap()
    );
    let path = dir.join("two-free-xz.toml");
    std::fs::write(&path, text).unwrap();
    let out = vsched(&[
        "lab",
        "run",
        "--cmd",
        "xz -V; echo abc | xz -c",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("the extra xz, args -V") && stdout.contains("the extra xz, args -c"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `vsched lab kernels` lists the sched_ext matrix, which scripts/test.sh
/// walks: the three forms agree, the default is one of them, and two
/// forms at once are refused.
#[test]
fn lab_kernels_lists_the_matrix_in_every_form() {
    let text = |args: &[&str]| {
        let out = vsched(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let versions: Vec<String> = text(&["lab", "kernels", "--versions"])
        .lines()
        .map(String::from)
        .collect();
    assert!(versions.len() >= 2, "a matrix of kernels: {versions:?}");
    let default = text(&["lab", "kernels", "--default"]).trim().to_string();
    assert!(versions.contains(&default), "{default} in {versions:?}");
    let doc: serde_json::Value =
        serde_json::from_str(&text(&["lab", "kernels", "--json"])).unwrap();
    assert_eq!(doc["schema"], "vsched.lab-kernels/v1");
    assert_eq!(doc["default"], default.as_str());
    let listed: Vec<&str> = doc["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["version"].as_str().unwrap())
        .collect();
    assert_eq!(listed, versions);
    let table = text(&["lab", "kernels"]);
    for v in &versions {
        assert!(table.contains(v.as_str()), "{v} in the table: {table}");
    }
    let both = vsched(&["lab", "kernels", "--json", "--versions"]);
    assert_eq!(both.status.code(), Some(2));
}
