//! Lab guests for the integration tests: layouts from lab/, the
//! scheduler benchmark's workload program carried into a guest, and the
//! output of guest commands (a guest kernel panic fails the test).

use super::vsched;
use serde_json::Value;

/// A layout file: an absolute path as is, else lab/`path`.toml.
pub fn layout(path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    format!("{}/../../lab/{path}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// A copy of lab/`name`.toml that also carries the benchmark's workload
/// program (crates/bench/c/schedbench.c, compiled here) into the guest.
pub fn layout_with_schedbench(name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("schedbench");
    let source = format!("{}/../bench/c/schedbench.c", env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-O2", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(built.success(), "schedbench.c did not compile");
    // A top-level key, so it goes before the layout's [[vcpu]] tables.
    let text = std::fs::read_to_string(layout(name)).unwrap();
    let with = format!("extra_binaries = [\"{}\"]\n{text}", exe.display());
    let path = dir.join(format!("{}.toml", name.replace('/', "-")));
    std::fs::write(&path, with).unwrap();
    path.display().to_string()
}

/// Output of each guest command, in order, from `lab run --json` of
/// `layout` with `commands` in place of the layout's.
pub fn run_in_guest(layout_path: &str, commands: &[&str]) -> Vec<(Option<i64>, String)> {
    let mut args = vec!["lab", "run", "--json"];
    for c in commands {
        args.extend(["--cmd", c]);
    }
    // scripts/test.sh runs the scheduler's tests again on other kernels of
    // the sched_ext matrix (docs/lab.md, "Kernels"); the layouts of other
    // kernels (the probe's, a kernel without sched_ext) stay as they are.
    let l = layout(layout_path);
    let version = std::env::var("VSCHED_TEST_KERNEL_VERSION").ok();
    let sched_ext = std::fs::read_to_string(&l).is_ok_and(|t| t.contains("kernel = \"sched_ext\""));
    if let Some(v) = version.as_deref().filter(|_| sched_ext) {
        args.extend(["--kernel-version", v]);
    }
    args.push(&l);
    // On QEMU 10 the lab's guests do not panic (docs/lab.md, "The
    // emulator"): a guest kernel panic fails the test, with its console.
    let out = vsched(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("guest kernel panicked"),
        "lab run {layout_path}: the guest kernel panicked:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "lab run {layout_path} gave no JSON ({e}); exit {:?}\n{stdout}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    r["commands"]
        .as_array()
        .unwrap_or_else(|| panic!("no commands in {r:#}"))
        .iter()
        .map(|c| {
            (
                c["exit_code"].as_i64(),
                c["output"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Waits (in the guest) until sched_ext's state reads `state`, at most 10 s.
pub fn wait_state(state: &str) -> String {
    format!(
        "for i in $(seq 100); do grep -qx {state} /sys/kernel/sched_ext/state && break; sleep 0.1; done"
    )
}
