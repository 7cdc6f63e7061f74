//! The real `vsched probe` on this machine: invariants of its output, the
//! JSON schema, error handling, --watch and --validate.

mod common;

use common::{online_cpus, vsched};
use serde_json::Value;

fn schema() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/schema/probe-v1.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn assert_valid(report: &Value) {
    let validator = jsonschema::validator_for(&schema()).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match docs/schema/probe-v1.json: {errors:#?}"
    );
}

fn probe_json(args: &[&str]) -> Value {
    let mut all = vec!["probe", "--json"];
    all.extend_from_slice(args);
    let out = vsched(&all);
    assert!(
        out.status.success(),
        "vsched {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// One whole-number field of every vCPU of a report, in report order.
fn vcpu_column(report: &Value, field: &str) -> Vec<u64> {
    report["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[field].as_u64().unwrap())
        .collect()
}

#[test]
fn full_probe_upholds_its_invariants() {
    let _guard = common::serial();
    let r = probe_json(&[]);
    assert_valid(&r);
    assert_eq!(r["schema"], "vsched.probe");
    let cpus = vcpu_column(&r, "cpu");
    let online: Vec<u64> = online_cpus().into_iter().map(u64::from).collect();
    assert_eq!(cpus, online, "every online vCPU must be present");
    let caps = vcpu_column(&r, "capacity");
    assert!(caps.iter().all(|&c| (1..=1024).contains(&c)), "{caps:?}");
    assert_eq!(*caps.iter().max().unwrap(), 1024, "strongest vCPU is 1024");
    for v in r["vcpus"].as_array().unwrap() {
        let cpu = v["cpu"].as_u64().unwrap();
        assert!(!v["stacked_with"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_u64() == Some(cpu)));
        let avail = v["available_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&avail));
    }
    let t = &r["topology"];
    let n = cpus.len();
    let lat = t["latency_ns"].as_array().unwrap();
    let rel = t["relation"].as_array().unwrap();
    assert_eq!(lat.len(), n);
    for i in 0..n {
        assert!(
            lat[i][i].is_null() && rel[i][i].is_null(),
            "diagonal must be empty"
        );
        for j in 0..n {
            assert_eq!(lat[i][j], lat[j][i], "latency matrix symmetric");
            assert_eq!(rel[i][j], rel[j][i], "relation matrix symmetric");
            if i != j {
                assert!(!rel[i][j].is_null(), "pair {i},{j} unclassified");
            }
        }
    }
    // The default probe's budget is one second; allow slack for a loaded CI machine.
    assert!(r["timing"]["total_ms"].as_f64().unwrap() < 5000.0);
}

#[test]
fn only_and_cpus_restrict_the_probe() {
    let _guard = common::serial();
    let r = probe_json(&["--only", "topology"]);
    assert_valid(&r);
    assert!(r["vcpus"][0]["capacity"].is_null());
    assert!(r["vcpus"][0]["episodes"].is_null());
    assert!(!r["topology"].is_null());

    let r = probe_json(&[
        "--only",
        "capacity,activity",
        "--cpus",
        "0",
        "--duration",
        "50ms",
        "--heavy",
        "20ms",
    ]);
    assert_valid(&r);
    assert!(r["topology"].is_null());
    assert_eq!(r["vcpus"].as_array().unwrap().len(), 1);
    assert_eq!(r["vcpus"][0]["capacity"], 1024);
}

fn assert_fails(args: &[&str], needle: &str) {
    let out = vsched(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in: {err}"
    );
    assert!(out.stdout.is_empty(), "no output on error");
}

#[test]
fn bad_input_is_refused_clearly() {
    let _guard = common::serial();
    assert_fails(&["probe", "--cpus", "0-x"], "malformed CPU list");
    assert_fails(&["probe", "--cpus", "3-1"], "runs backwards");
    assert_fails(&["probe", "--cpus", "4000"], "is not online");
    assert_fails(&["probe", "--duration", "0s"], "greater than zero");
    assert_fails(&["probe", "--duration", "-1s"], "cannot be negative");
    assert_fails(&["probe", "--duration", "soon"], "not a duration");
    assert_fails(
        &["probe", "--interval", "0ms", "--watch"],
        "greater than zero",
    );
    assert_fails(&["probe", "--only", "speed"], "invalid value");
    assert_fails(&["probe", "--straggler-ratio", "2"], "between 0 and 1");
    assert_fails(
        &[
            "probe",
            "--watch",
            "--interval",
            "100ms",
            "--duration",
            "200ms",
        ],
        "shorter than --interval",
    );
    assert_fails(
        &["probe", "--validate", "/nonexistent/x.json"],
        "reading /nonexistent/x.json",
    );
    assert_fails(
        &["probe", "--only", "capacity", "--validate", "/dev/null"],
        "leaves topology out",
    );
    assert_fails(&["probe", "--heavy", "2s"], "at most 900ms");
}

#[test]
fn watch_emits_one_json_line_per_update() {
    let _guard = common::serial();
    let out = vsched(&[
        "probe",
        "--watch",
        "--json",
        "--count",
        "3",
        "--interval",
        "300ms",
        "--duration",
        "50ms",
        "--heavy-every",
        "500ms",
        "--topology-every",
        "500ms",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON report"))
        .collect();
    assert_eq!(lines.len(), 3);
    for (i, r) in lines.iter().enumerate() {
        assert_valid(r);
        assert_eq!(r["sequence"], (i + 1) as u64);
        assert!(r["overhead"]["elapsed_s"].as_f64().unwrap() > 0.0);
    }
    // Later updates validate the topology rather than re-probing it in full.
    assert_eq!(lines[2]["topology"]["mode"], "validate");
}

#[test]
fn validate_confirms_an_unchanged_topology() {
    let _guard = common::serial();
    let dir = std::env::temp_dir().join(format!("vsched-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("probe.json");
    let out = vsched(&["probe", "--json", "--only", "topology"]);
    assert!(out.status.success());
    std::fs::write(&path, &out.stdout).unwrap();
    let r = probe_json(&["--only", "topology", "--validate", path.to_str().unwrap()]);
    // A damaged file is refused, not trusted.
    let mut broken: Value = serde_json::from_slice(&out.stdout).unwrap();
    broken["topology"]["relation"] = serde_json::json!([[null]]);
    let broken_path = dir.join("broken.json");
    std::fs::write(&broken_path, broken.to_string()).unwrap();
    assert_fails(
        &[
            "probe",
            "--only",
            "topology",
            "--validate",
            broken_path.to_str().unwrap(),
        ],
        "not 2x2",
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_valid(&r);
    assert_eq!(r["topology"]["mode"], "validate");
    assert_eq!(r["topology"]["valid"], true, "{r:#}");
}

#[test]
fn human_output_has_table_matrix_and_verdicts() {
    let _guard = common::serial();
    let out = vsched(&["probe", "--duration", "50ms", "--heavy", "20ms"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("vCPU  capacity"), "{text}");
    assert!(text.contains("cache-line transfer latency"), "{text}");
    assert!(text.contains("verdict: "), "{text}");
}

/// `--plot FILE.svg` draws the report: a bar pair per vCPU and a heatmap
/// cell per pair, with their labels; a plot into a missing directory is
/// refused before anything is probed.
#[test]
fn plot_draws_every_vcpu_and_pair() {
    let _guard = common::serial();
    let dir = std::env::temp_dir().join(format!("vsched-probe-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vcpus.svg");
    let out = vsched(&[
        "probe",
        "--only",
        "capacity,topology",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let cpus = online_cpus();
    assert!(svg.starts_with("<svg"), "{svg}");
    for c in &cpus {
        assert!(svg.contains(&format!("vCPU {c}")), "vCPU {c} labelled");
    }
    assert!(svg.contains("pair latency"), "heatmap drawn");
    // Background, a capacity bar per vCPU, a cell per ordered pair, legend.
    let rects = svg.matches("<rect").count();
    let n = cpus.len();
    assert!(rects > n + n * (n - 1), "{rects} rectangles for {n} vCPUs");
    assert_fails(
        &["probe", "--plot", "/nonexistent/dir/x.svg"],
        "does not exist",
    );
}

/// Regression: a light window's SCHED_IDLE prober on a vCPU that a
/// CPU-bound task keeps busy gets a turn about every 1.4 s, and the
/// round waited for it, so `--watch` steps of 100 ms windows took up to
/// 3.2 s and a daemon asked for a report a second got one every 1-3 s
/// (it gave a stacked vCPU back 7.3 s after the host placed it apart).
/// Now a prober still in its window 10 ms after it ended is raised and
/// returns at once (crates/probe/src/hurry.rs). In a guest of two free
/// vCPUs, with a CPU-bound loop pinned to vCPU 0, every step must end
/// within its 1 s interval.
#[test]
fn a_busy_vcpu_does_not_stretch_the_watch_rhythm() {
    let _guard = common::serial();
    const STEPS: usize = 15;
    let script = format!(
        "taskset -c 0 sh -c 'while :; do :; done' & L=$!\n\
         vsched probe --watch --json --count {STEPS} > /tmp/w.json\n\
         kill $L\n\
         cat /tmp/w.json"
    );
    let out = common::lab::run_in_guest("layouts/two-free", &[&script]);
    let (code, out) = &out[0];
    assert_eq!(*code, Some(0), "{out}");
    let reports: Vec<Value> = out
        .lines()
        .filter(|l| l.starts_with("{\"schema\""))
        .map(|l| serde_json::from_str(l).expect("each line is one JSON report"))
        .collect();
    assert_eq!(reports.len(), STEPS, "{out}");
    let step_ms: Vec<f64> = reports
        .iter()
        .map(|r| r["timing"]["total_ms"].as_f64().unwrap())
        .collect();
    println!("step durations (ms): {step_ms:.0?}");
    assert!(
        step_ms.iter().all(|&ms| ms < 1000.0),
        "a step outlasted the 1 s interval: {step_ms:.0?}"
    );
}
