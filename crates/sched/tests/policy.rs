//! The BPF scheduler's decision functions (src/bpf/policy.h), compiled for
//! the host with the system C compiler and run: the same source the BPF
//! object is built from, tested without a kernel.

use std::path::Path;
use std::process::Command;

#[test]
fn policy_decisions_hold_on_the_host() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O1"])
        // intf.h includes the counters' enum build.rs generates.
        .arg(format!("-I{}", env!("VSCHED_BPF_GEN_DIR")))
        .arg("-o")
        .arg(&exe)
        .arg(dir.join("tests/c/policy_test.c"))
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(built.success(), "policy_test.c did not compile");
    let out = Command::new(&exe).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
