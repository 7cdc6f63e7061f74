//! Lab guests for the integration tests: layouts from lab/, the
//! scheduler benchmark's workload program carried into a guest, and the
//! output of guest commands (a guest kernel panic during them fails the
//! test).

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
    layout_with(name, &[bench_program("schedbench")])
}

/// crates/bench/c/`program`.c, compiled here; its path.
pub fn bench_program(program: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(program);
    let source = format!("{}/../bench/c/{program}.c", env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-O2", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(built.success(), "{program}.c did not compile");
    exe
}

/// A copy of lab/`name`.toml that also carries `files` into the guest
/// (its /bin).
pub fn layout_with(name: &str, files: &[std::path::PathBuf]) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("\"{}\"", f.display()))
        .collect();
    // A top-level key, so it goes before the layout's [[vcpu]] tables.
    let text = std::fs::read_to_string(layout(name)).unwrap();
    let with = format!("extra_binaries = [{}]\n{text}", list.join(", "));
    let stem: Vec<String> = files
        .iter()
        .filter_map(|f| Some(f.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    let path = dir.join(format!(
        "{}-{}.toml",
        name.replace('/', "-"),
        stem.join("-")
    ));
    std::fs::write(&path, with).unwrap();
    path.display().to_string()
}

/// The layout copy at `layout_path` (from `layout_with`), given `seconds`
/// for its guest's commands instead of the lab's default of 120 s (a
/// guard against a hung guest, not a measure of anything).
pub fn with_run_timeout(layout_path: &str, seconds: u32) -> String {
    let text = std::fs::read_to_string(layout_path).unwrap();
    // A top-level key, so it goes before the layout's [[vcpu]] tables.
    std::fs::write(layout_path, format!("run_timeout_s = {seconds}\n{text}")).unwrap();
    layout_path.to_string()
}

/// Boots again after the emulator's guest kernel panics, per
/// `run_in_guest`: seen about once in 80 QEMU 10 boots and once in some
/// 1,800 sched_ext load cycles (docs/lab.md, "The emulator"), so two in a
/// row would be news.
pub const EMULATOR_PANIC_RETRIES: usize = 2;

/// Output of each guest command, in order, from `lab run --json` of
/// `layout` with `commands` in place of the layout's.
pub fn run_in_guest(layout_path: &str, commands: &[&str]) -> Vec<(Option<i64>, String)> {
    run_in_guest_with_steal(layout_path, commands).0
}

/// `run_in_guest`, with the most host steal any host CPU showed while the
/// commands ran, in percent of that time (this machine's hypervisor
/// taking CPUs from the lab; vsched_lab::disturb): for a statistical lab
/// test to print beside each guest's result, so that a miss can be set
/// against the host's state. None where the run has no host samples.
pub fn run_in_guest_with_steal(
    layout_path: &str,
    commands: &[&str],
) -> (Vec<(Option<i64>, String)>, Option<f64>) {
    let mut args = vec!["lab", "run", "--json"];
    for c in commands {
        args.extend(["--cmd", c]);
    }
    // scripts/test.sh runs the scheduler's tests on chosen kernels of the
    // sched_ext matrix (docs/lab.md, "Kernels"); the layouts of other
    // kernels (the probe's, a kernel without sched_ext) stay as they are.
    let l = layout(layout_path);
    let version = std::env::var("VSCHED_TEST_KERNEL_VERSION").ok();
    let sched_ext = std::fs::read_to_string(&l).is_ok_and(|t| t.contains("kernel = \"sched_ext\""));
    if let Some(v) = version.as_deref().filter(|_| sched_ext) {
        args.extend(["--kernel-version", v]);
    }
    args.push(&l);
    let (out, _) = boot_past_emulator_panics(layout_path, &args);
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
    note_a_near_run_timeout(layout_path, &r);
    let outputs: Vec<(Option<i64>, String)> = r["commands"]
        .as_array()
        .unwrap_or_else(|| panic!("no commands in {r:#}"))
        .iter()
        .map(|c| {
            (
                c["exit_code"].as_i64(),
                c["output"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (_, text) in &outputs {
        assert!(
            !text.contains(WAIT_STATE_GAVE_UP),
            "lab run {layout_path}: a wait for a sched_ext state gave up after {} s \
             (the rest of the command ran on in the wrong state):\n{text}",
            WAIT_STATE_LIMIT_TENTHS / 10
        );
    }
    (outputs, most_host_steal_pct(&r))
}

/// The most steal any host CPU showed between a run's first and last
/// host samples (`lab run --json`'s `host_samples`), in percent.
fn most_host_steal_pct(run: &Value) -> Option<f64> {
    let samples = run["host_samples"].as_array()?;
    let (first, last) = (samples.first()?, samples.last()?);
    let span_ns = (last["at_s"].as_f64()? - first["at_s"].as_f64()?) * 1e9;
    let steal = |s: &Value| -> Option<Vec<u64>> {
        s["host_steal_ns"]
            .as_array()?
            .iter()
            .map(Value::as_u64)
            .collect()
    };
    let (a, b) = (steal(first)?, steal(last)?);
    let most = a.iter().zip(&b).map(|(a, b)| b.saturating_sub(*a)).max()?;
    (span_ns > 0.0).then(|| most as f64 / span_ns * 100.0)
}

/// Share of a layout's `run_timeout_s` past which a test's guest commands
/// are noted: a test whose commands took 110 s of 120 on a quiet host
/// failed on a CI host a few percent slower, so a test this close should
/// be given more time (`with_run_timeout`) before it fails.
const NEAR_RUN_TIMEOUT: f64 = 0.75;

/// The running test's name (libtest names each test's thread after it)
/// and the layout: many tests share a layout copy.
fn test_and_layout(layout_path: &str) -> String {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    format!("{test} ({layout_path})")
}

/// Notes (`super::note`) a run whose guest commands took more than
/// NEAR_RUN_TIMEOUT of their limit.
fn note_a_near_run_timeout(layout_path: &str, run: &Value) {
    let took = run["command_ends_s"]
        .as_array()
        .and_then(|ends| ends.last())
        .and_then(Value::as_f64);
    let limit = run["run_timeout_s"].as_f64();
    if let (Some(took), Some(limit)) = (took, limit) {
        if took > NEAR_RUN_TIMEOUT * limit {
            super::note(
                &test_and_layout(layout_path),
                &format!("the guest's commands took {took:.0} s of their {limit:.0} s limit"),
            );
        }
    }
}

/// Runs `vsched args` (a `lab run`), again while its guest kernel panics
/// in the emulator's known ways, at most EMULATOR_PANIC_RETRIES times,
/// each noted: while booting, before any command (so before any of
/// vsched's code ran in the guest), or at a breakpoint the guest's memory
/// no longer holds (vsched_lab::guest_panic::stale_breakpoint). Any other
/// panic is the caller's to fail on, with its console. Returns the last
/// run's output and how many runs went before it.
pub fn boot_past_emulator_panics(
    layout_path: &str,
    args: &[&str],
) -> (std::process::Output, usize) {
    let mut out = vsched(args);
    for retry in 0..EMULATOR_PANIC_RETRIES {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let emulators = stderr.contains("guest kernel panicked while booting")
            || stderr.contains(vsched_lab::error::STALE_BREAKPOINT);
        if !emulators {
            return (out, retry);
        }
        let rip = stderr
            .lines()
            .find(|l| l.contains("RIP:"))
            .unwrap_or_default();
        let first = stderr.lines().next().unwrap_or_default();
        super::note(
            &test_and_layout(layout_path),
            &format!("{first} ({rip}); booted again"),
        );
        out = vsched(args);
    }
    (out, EMULATOR_PANIC_RETRIES)
}

/// How long `wait_state` waits, in tenths of a second: 30 s. A load of
/// `vsched sched` in a TCG guest took 2-16 s (the verifier and the first
/// probe report, emulated), and sched_ext's own watchdog gives up at 30 s.
pub const WAIT_STATE_LIMIT_TENTHS: u32 = 300;

/// What `wait_state` prints when it gives up; `run_in_guest` fails the
/// test on it, so that a command never goes on silently in the wrong
/// state.
pub const WAIT_STATE_GAVE_UP: &str = "@wait-state-gave-up";

/// Waits (in the guest) until sched_ext's state reads `state`, at most
/// WAIT_STATE_LIMIT_TENTHS; past that it prints WAIT_STATE_GAVE_UP with
/// the state it saw, and the command goes on.
pub fn wait_state(state: &str) -> String {
    format!(
        "ws=; for i in $(seq {WAIT_STATE_LIMIT_TENTHS}); do grep -qx {state} /sys/kernel/sched_ext/state && ws=1 && break; sleep 0.1; done; \
         [ -n \"$ws\" ] || echo \"{WAIT_STATE_GAVE_UP} {state}: $(cat /sys/kernel/sched_ext/state)\""
    )
}

/// Shell that prints every IPI the guest's vCPUs received so far (the
/// benchmark's own count).
pub use vsched_bench::sched::IPIS;

/// Shell that runs `program` under `prefix`, its output lines marked
/// `marker`, then prints the IPIs it cost as "`marker` ipis N".
pub fn run_counting_ipis(prefix: &str, program: &str, marker: &str) -> String {
    format!(
        "a=$({IPIS}); {prefix} {program} | sed 's/^/{marker} /'; b=$({IPIS}); \
         echo \"{marker} ipis $((b - a))\"; "
    )
}

/// The number after "`key` " on a line of a guest command's output (the
/// first, where more follow).
pub fn marked_value(text: &str, key: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key}: {text}"))
}

/// The IPI check of the consolidation tests: `marker`'s IPIs over the
/// `seconds` of the blocking program (its "MARKER ipis" line, from
/// run_counting_ipis) as shares of `baseline`'s, in total (over the same
/// time) and per round (for the same work, from the timeline's
/// "MARKER s_per_round"); it passes if both are at most half. The program
/// runs for a fixed time, so a speed change moves the two shares in
/// opposite directions: the total follows the rounds done. Each alone was
/// fooled by the control's speed (the scheduler without consolidation):
/// on 2026-12-07 it ran the barrier 3x slower than the default on 7.3.4
/// (263 µs a round against 86, its vCPUs 61-63% available; a clean-clone
/// suite at 363c060) and sent 0.28 of the default's IPIs in total but
/// 0.88 per round, and 1.75x faster on 6.16.12, 0.93 in total and 0.53
/// per round. With consolidation, 0.14 and 0.16, and 0.10 and 0.04.
/// Returns (passed, total share, per-round share).
pub fn ipis_halved(text: &str, marker: &str, baseline: &str, seconds: u32) -> (bool, f64, f64) {
    let ipis = |m: &str| marked_value(text, &format!("{m} ipis"));
    let rounds = |m: &str| f64::from(seconds) / marked_value(text, &format!("{m} s_per_round"));
    let total = ipis(marker) / ipis(baseline);
    let per_round = (ipis(marker) / rounds(marker)) / (ipis(baseline) / rounds(baseline));
    (total <= 0.5 && per_round <= 0.5, total, per_round)
}

/// The consolidation tests' blocking program: 2 threads meeting at a
/// barrier after ~1 µs of work each, so nearly every round is a wake-up
/// across vCPUs (Gleaner's Table 1 cost), for `seconds` whatever the
/// host's speed, printing "s_per_round S ..." (schedbench's timeline). One
/// vCPU ran such a barrier 1.9-4.5x faster than two in a 2-vCPU guest
/// (2026-12-03). A fixed number of rounds (60,000) took 5-9 s under the
/// default scheduler on 2026-12-03 and 2.8 s on 2026-12-06's host, where
/// `vsched run --consolidate` ran it in 1.8 s and first narrowed 1.5 s in:
/// narrowed for the last 0.3 s only, 1.88 vCPUs active on average. How
/// long the program ran, not whether consolidation worked, decided the
/// tests.
pub fn blocking_program(seconds: u32) -> String {
    format!("schedbench timeline 2 {seconds} 1000 200")
}

/// The JSON on the line that starts with `prefix`.
pub fn json_on_line(text: &str, prefix: &str) -> Value {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix}line: {text}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The rounds per second in each second of a `schedbench timeline` run,
/// from its "@timeline" line ("s_per_round S interval_ms 1000 t0 R t1 R
/// ...").
pub fn timeline_rates(text: &str) -> Vec<f64> {
    let words: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("@timeline "))
        .unwrap_or_else(|| panic!("no timeline: {text}"))
        .split_whitespace()
        .collect();
    words
        .chunks(2)
        .filter(|kv| kv.len() == 2 && kv[0].starts_with('t') && kv[0][1..].parse::<u32>().is_ok())
        .filter_map(|kv| kv[1].parse().ok())
        .collect()
}

/// The vCPUs a `vsched sched` summary's model hides (stacked or straggler:
/// RWC's reasons), in order.
pub fn hidden_vcpus(summary: &Value) -> Vec<usize> {
    summary["model"]
        .as_array()
        .unwrap_or_else(|| panic!("no model: {summary:#}"))
        .iter()
        .filter(|m| m["visibility"]["stacked"] == true || m["visibility"]["straggler"] == true)
        .filter_map(|m| m["cpu"].as_u64().map(|c| c as usize))
        .collect()
}

/// Shell: a tmpfs over /sys/devices/system/cpu (as $S; `umount $S` ends
/// it) holding a preferred-CPU mask that lists `preferred`, and what
/// vsched and its libraries read there for a 2-vCPU guest's CPU count
/// (`online`, `possible`, `cpu0`, `cpu1`). No lab kernel writes the mask
/// (none of Debian's sets CONFIG_PREFERRED_CPU).
pub fn fake_preferred_mask(preferred: u32) -> String {
    format!(
        "S=/sys/devices/system/cpu; mount -t tmpfs none $S && mkdir $S/cpu0 $S/cpu1 && echo 0-1 > $S/online \
         && echo 0-1 > $S/possible && echo {preferred} > $S/preferred; "
    )
}
