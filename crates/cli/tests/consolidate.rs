//! `vsched run --consolidate` (vsched-consolidate) in lab guests whose
//! kernel has no sched_ext: the program's threads narrow onto fewer vCPUs
//! under a blocking load, so the vCPUs wake each other far less; CPU-bound
//! work widens the set again; every thread gets its CPUs back when vsched
//! is killed. Needs what tests/lab.rs needs.

mod common;

use common::lab::{
    blocking_program, fake_preferred_mask, ipis_halved, layout_with_schedbench,
    marked_value as value, run_counting_ipis as run, run_in_guest,
};
use common::summary_after;
use serde_json::Value;
use vsched_model::stats::median;

fn count(report: &Value, name: &str) -> u64 {
    report["counts"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {name}: {report:#}"))
}

/// The blocking program (common::lab::blocking_program, 8 s) ran 3.8-4.5x
/// faster on one vCPU than on two in this guest: consolidated, it runs on
/// fewer vCPUs and its vCPUs wake each other at most half as often as
/// under the default placement in the same guest, in total and per round
/// (common::lab::ipis_halved says why both). (4
/// threads with ~10 us of work were only 1.1-1.2x faster on one vCPU on a
/// slow day, about what the user-level form's own readings take from the
/// one vCPU it keeps under the emulator, docs/sched.md: whether a
/// narrowing held was the host's luck.) The control is the same command
/// without `--consolidate` (`vsched run` alone), which must fail that
/// check. Then a program whose blocking phase (the same program, 4 s)
/// narrows the set and whose CPU-bound phase (a thread per vCPU) must
/// widen it again, and run that phase no slower than 1.25x the default's
/// (medians of PHASES_RUNS alternated runs).
#[test]
fn consolidation_narrows_for_a_blocking_program_and_widens_for_cpu_bound_work() {
    let _guard = common::serial();
    // The blocking program's seconds: a fixed time whatever the host's speed.
    const BLOCKING_S: u32 = 8;
    let barrier = blocking_program(BLOCKING_S);
    // 1.5-5 s under the default, by the host's load.
    let cpu_bound = "schedbench cpu 2 1000000000";
    let consolidated = "vsched run --consolidate --consolidate-json /tmp/consolidated.json --";
    let blocking = run("", &barrier, "default")
        + &run(consolidated, &barrier, "consolidated")
        + "echo @consolidated; cat /tmp/consolidated.json; "
        + &run("vsched run --", &barrier, "control");
    let phases: String = (0..PHASES_RUNS)
        .map(|i| {
            run("", cpu_bound, &format!("default-cpu-{i}"))
                + &run(
                    &format!("vsched run --consolidate --consolidate-json /tmp/phases-{i}.json --"),
                    &format!("sh -c '{} >/dev/null; {cpu_bound}'", blocking_program(4)),
                    &format!("phases-{i}"),
                )
                + &format!("echo @phases-{i}; cat /tmp/phases-{i}.json; ")
        })
        .collect();
    let guest = layout_with_schedbench("layouts/two-free");
    let out = run_in_guest(&guest, &[&blocking, &phases]);

    let text = &out[0].1;
    let (with, with_total, with_per_round) =
        ipis_halved(text, "consolidated", "default", BLOCKING_S);
    let (without, without_total, without_per_round) =
        ipis_halved(text, "control", "default", BLOCKING_S);
    let report = summary_after(text, "@consolidated");
    let mean_active = report["mean_active"].as_f64().unwrap_or(f64::NAN);
    let rounds_per_s = |marker: &str| 1.0 / value(text, &format!("{marker} s_per_round"));
    println!(
        "IPIs as shares of the default's, in total and per round: consolidated \
         {with_total:.2}, {with_per_round:.2}; control {without_total:.2}, {without_per_round:.2}; \
         mean active vCPUs {mean_active:.2}; rounds/s: default {:.0}, consolidated {:.0}, control {:.0}",
        rounds_per_s("default"),
        rounds_per_s("consolidated"),
        rounds_per_s("control"),
    );
    assert!(
        count(&report, "trials_narrowed") >= 1 && mean_active < 1.75,
        "the blocking program ran on fewer vCPUs: {report:#}"
    );
    // The two barrier threads and the main thread (sampling the rounds).
    assert!(
        report["placement"]["threads_placed"].as_u64() >= Some(3),
        "every thread was placed: {report:#}"
    );
    assert!(
        with,
        "consolidated, the vCPUs woke each other at most half as often: {text}"
    );
    assert!(
        !without,
        "the control (consolidation off) must fail the same check: {text}"
    );

    let text = &out[1].1;
    let mut default_s = Vec::new();
    let mut took = Vec::new();
    let mut narrowed_runs = 0;
    for i in 0..PHASES_RUNS {
        let report = summary_after(text, &format!("@phases-{i}"));
        let active: Vec<u64> = report["active_over_time"]
            .as_array()
            .map(|points| points.iter().filter_map(|p| p["active"].as_u64()).collect())
            .unwrap_or_default();
        // Widened after it had narrowed (it may narrow again once the
        // CPU-bound threads are done, before the program exits).
        let first_narrow = active.iter().position(|&a| a == 1);
        let widened_again = first_narrow.is_some_and(|first| active[first..].contains(&2));
        default_s.push(value(text, &format!("default-cpu-{i} elapsed_s")));
        took.push(value(text, &format!("phases-{i} elapsed_s")));
        println!(
            "CPU-bound phase {i}: {:.2} s, default {:.2} s; vsched's CPU {} s over {} s; \
             active over time {active:?}",
            took[i], default_s[i], report["vsched_cpu_s"], report["duration_s"]
        );
        // Widened wherever it had narrowed.
        if first_narrow.is_some() {
            narrowed_runs += 1;
            assert!(
                widened_again,
                "the CPU-bound phase widened it again: {report:#}"
            );
        }
    }
    assert!(
        narrowed_runs * 2 > PHASES_RUNS,
        "the barrier phase narrowed the set in most runs ({narrowed_runs}): {text}"
    );
    let (took, default_s) = (median(&mut took), median(&mut default_s));
    assert!(
        took <= 1.25 * default_s,
        "the CPU-bound phase took a median {took:.2} s against {default_s:.2} s: {text}"
    );
}

/// Alternated runs of the default and of the two-phase program in the
/// consolidation test: single runs took 1.15x the default on a quiet
/// host, and the scheduler's form of the test saw one run at 1.28x in
/// CI with nothing amiss but the host. An odd number, for a plain median.
const PHASES_RUNS: usize = 3;

/// Shell: $P, the schedbench process among the children of vsched ($V),
/// polled for up to 10 s (the watchdog is a child too, and on a slow host
/// a guest took more than 0.2 s to start the program).
const FIND_PROGRAM: &str = "for i in $(seq 100); do for c in $(cat /proc/$V/task/*/children); do \
                            grep -qs schedbench /proc/$c/comm && P=$c; done; [ -n \"$P\" ] && break; sleep 0.1; done;";

/// SIGKILL of vsched while the program runs narrowed: the watchdog gives
/// every thread of the program its CPUs back (the program goes on). The
/// program is the 2-thread barrier of the test above (as rounds: 400,000,
/// long enough whatever the host's speed), which one vCPU runs about 4x
/// faster than two, so that it narrows on a slow host too. It is
/// found among vsched's children by name (the watchdog is one too), polled
/// for (FIND_PROGRAM).
#[test]
fn sigkill_of_vsched_gives_the_programs_threads_their_cpus_back() {
    let _guard = common::serial();
    let allowed = "grep -h Cpus_allowed_list /proc/$P/task/*/status | awk '{print $2}' | sort | uniq -c | tr -s ' \\n' ' '";
    let script = format!(
        "vsched run --consolidate -- schedbench barrier 2 400000 200 > /dev/null & V=$!; \
         {FIND_PROGRAM} \
         for i in $(seq 100); do grep -qE 'Cpus_allowed_list:[[:space:]]+[0-9]+$' /proc/$P/task/*/status && break; sleep 0.1; done; \
         echo \"narrowed: $({allowed})\"; \
         kill -9 $V; \
         for i in $(seq 50); do grep -qE 'Cpus_allowed_list:[[:space:]]+[0-9]+$' /proc/$P/task/*/status || break; sleep 0.1; done; \
         echo \"after: $({allowed})\"; kill $P; wait"
    );
    let guest = layout_with_schedbench("layouts/two-free");
    let out = run_in_guest(&guest, &[&script]);
    let text = &out[0].1;
    println!("{text}");
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} {text}"))
            .to_string()
    };
    let narrowed = line("narrowed: ");
    let after = line("after: ");
    // uniq -c's pairs: "5 0-1" is five threads on both vCPUs, "4 0 1 0-1"
    // four on vCPU 0 and one on both.
    let lists = |counted: &str| -> Vec<String> {
        counted
            .split_whitespace()
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect()
    };
    assert!(
        lists(&narrowed).iter().any(|l| l == "0" || l == "1"),
        "the program ran narrowed before the kill: {text}"
    );
    assert_eq!(
        lists(&after),
        ["0-1"],
        "every thread got both vCPUs back: {text}"
    );
}

/// The narrowed set of a blocking program (the first test's) under
/// `vsched run --consolidate`, read from its threads while it runs, with
/// the report after `marker`; `before` runs first in the same shell.
fn narrowed_set_script(before: &str, marker: &str) -> String {
    format!(
        "{before} vsched run --consolidate --consolidate-json /tmp/{marker}.json -- \
         {} > /dev/null & V=$!; P=; \
         {FIND_PROGRAM} \
         for i in $(seq 100); do N=$(grep -hE 'Cpus_allowed_list:[[:space:]]+[0-9]+$' /proc/$P/task/*/status | head -1 | awk '{{print $2}}'); [ -n \"$N\" ] && break; sleep 0.1; done; \
         echo \"{marker} narrowed to $N\"; wait $V; echo @{marker}; cat /tmp/{marker}.json; ",
        blocking_program(8)
    )
}

/// Where the kernel publishes its preferred CPUs
/// (/sys/devices/system/cpu/preferred, steal-time CPU folding), a
/// narrowed set is made of them: with a preference for vCPU 1, the
/// blocking program narrows onto vCPU 1, and without one (the control,
/// the same guest) onto vCPU 0. No lab kernel has the file, so the guest
/// writes one on a tmpfs over /sys/devices/system/cpu for that run.
#[test]
fn a_narrowed_set_is_made_of_the_kernels_preferred_vcpus() {
    let _guard = common::serial();
    let preferred = narrowed_set_script(&fake_preferred_mask(1), "preferred") + "umount $S; ";
    let control = narrowed_set_script("", "control");
    let guest = layout_with_schedbench("layouts/two-free");
    let out = run_in_guest(&guest, &[&preferred, &control]);
    let (with, without) = (&out[0].1, &out[1].1);
    println!("{with}\n{without}");
    let report = summary_after(with, "@preferred");
    assert_eq!(
        report["preferred_cpus"],
        serde_json::json!([1]),
        "{report:#}"
    );
    assert!(
        with.contains("preferred narrowed to 1\n"),
        "narrowed onto the preferred vCPU: {with}"
    );
    let report = summary_after(without, "@control");
    assert_eq!(report["preferred_cpus"], Value::Null, "{report:#}");
    assert!(
        without.contains("control narrowed to 0\n"),
        "without a preference, onto the lowest-numbered: {without}"
    );
}

/// Reads of the narrowed set, 0.1 s apart, that must agree before the
/// preference changes: a trial can narrow and be undone within 10 ms
/// ("widened_at_once"), and a change made while the set was wide again is
/// no change of a narrowed set (the next narrowing simply starts on the
/// new preference, and nothing is counted).
const STEADY_READS: u32 = 5;

/// When the kernel's preferred-CPU mask changes while the set is narrow,
/// the set moves onto the newly preferred vCPU at once (re-read every
/// period), not at the next trial, which a steady narrowed set never
/// holds: narrowed onto vCPU 1 while it is preferred, the blocking
/// program's threads must be on vCPU 0 within 5 s of the guest writing 0
/// to the mask. The control, the same build reading the mask at the start
/// only (2026-12-06), stayed on vCPU 1 ("after: 1", no change counted).
#[test]
fn a_narrowed_set_follows_the_kernels_preferred_vcpus_when_they_change() {
    let _guard = common::serial();
    let single_cpu = "grep -hE 'Cpus_allowed_list:[[:space:]]+[0-9]+$' /proc/$P/task/*/status | head -1 | awk '{print $2}'";
    let script = format!(
        "{} vsched run --consolidate --consolidate-json /tmp/moved.json -- {} > /dev/null & V=$!; P=; \
         {FIND_PROGRAM} \
         L=; k=0; for i in $(seq 150); do N=$({single_cpu}); \
         if [ -n \"$N\" ] && [ \"$N\" = \"$L\" ]; then k=$((k+1)); else k=0; fi; L=$N; \
         [ $k -ge {STEADY_READS} ] && break; sleep 0.1; done; \
         echo \"before: $N\"; echo 0 > $S/preferred; \
         for i in $(seq 50); do N=$({single_cpu}); [ \"$N\" = 0 ] && break; sleep 0.1; done; \
         echo \"after: $N\"; wait $V; echo @moved; cat /tmp/moved.json; umount $S; ",
        fake_preferred_mask(1),
        blocking_program(12)
    );
    let guest = layout_with_schedbench("layouts/two-free");
    let out = run_in_guest(&guest, &[&script]);
    let text = &out[0].1;
    println!("{text}");
    let report = summary_after(text, "@moved");
    assert!(
        text.contains("before: 1\n"),
        "narrowed onto vCPU 1 while it was preferred: {text}"
    );
    assert!(
        text.contains("after: 0\n"),
        "onto vCPU 0 once it was: {text}"
    );
    assert_eq!(
        report["preferred_cpus"],
        serde_json::json!([0]),
        "{report:#}"
    );
    assert!(
        count(&report, "preference_changes") >= 1,
        "the change was counted: {report:#}"
    );
}

/// On this machine, no guest: the program's exit status passes through,
/// the report is written, and the report's file needs `--consolidate`.
#[test]
fn the_exit_status_passes_through_and_the_report_is_written() {
    let dir = std::env::temp_dir().join(format!("vsched-consolidate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let json_arg = json.to_str().unwrap();
    let out = common::vsched(&[
        "run",
        "--consolidate",
        "--consolidate-json",
        json_arg,
        "--",
        "sh",
        "-c",
        "sleep 0.3; exit 3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("vsched: consolidation: "), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "vsched.consolidate/v1", "{report:#}");
    assert!(
        report["placement"]["threads_placed"].as_u64() >= Some(1),
        "{report:#}"
    );

    let out = common::vsched(&["run", "--consolidate-json", json_arg, "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--consolidate"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vsched daemon --rwc-cgroup work $FLAGS`, then the tests' blocking
/// program (common::lab::blocking_program: the 2-thread barrier, here for
/// 60 s, killed once seen, so that a fast host cannot end it first) in the
/// cgroup: with `--consolidate-cgroups` its cpuset narrows to one vCPU and
/// stays so for a second (ten readings 0.1 s apart) while the program
/// still runs; "cpus" is the tenth reading itself, never a later read,
/// since a widening trial may start the moment the loop ends; then `vsched status` flags one
/// vCPU parked (polled for 5 s: the status follows probe reports, and the
/// count the poll saw is printed). Prints one "@narrowed" line; $D is the
/// daemon, $P the program.
const DAEMON_NARROWING: &str = r#"
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir $G
cpus() { cat $G/cpuset.cpus 2>/dev/null; }
vsched_files() { ls /run/vsched 2>/dev/null | grep -v sock; }
left() { echo "cpus=[$(cpus)] ctl=[$(cat /sys/fs/cgroup/cgroup.subtree_control)] files=[$(vsched_files)]"; }
vsched daemon --rwc-cgroup work $FLAGS 2>/tmp/d.log & D=$!
sh -c "echo \$\$ > $G/cgroup.procs && exec schedbench timeline 2 60 1000 200 >/dev/null" & P=$!
held=0
for i in $(seq 300); do narrowed=$(cpus); case "$narrowed" in 0|1) held=$((held + 1));; *) held=0;; esac; [ $held -ge 10 ] && break; sleep 0.1; done
running=$(kill -0 $P 2>/dev/null && echo yes)
for i in $(seq 10); do parked=$(vsched status 2>/dev/null | grep -c ' parked$'); [ "$parked" -ge 1 ] && break; sleep 0.5; done
echo "@narrowed cpus=[$narrowed] held=[$held] running=[$running] parked=[$parked]"
"#;

/// After DAEMON_NARROWING: two CPU-bound threads in the cgroup widen it
/// again, and it is put back as it was (v2's empty "the parent's", the
/// controller off again) when the daemon stops on SIGTERM. Each step
/// prints one "@step" line. The CPU-bound program is in the cgroup
/// (polled for in cgroup.procs, up to 5 s) before the barrier leaves: an
/// empty cgroup gets its widest set back by itself (vsched_consolidate's
/// `rest_while_empty`), which would pass "@widened" without the widening
/// for CPU-bound work.
const DAEMON_WIDENING_AND_SIGTERM: &str = r#"
sh -c "echo \$\$ > $G/cgroup.procs && exec schedbench cpu 2 4000000000 >/dev/null" & C=$!
for i in $(seq 50); do grep -qx "$C" $G/cgroup.procs && break; sleep 0.1; done
kill $P; wait $P
for i in $(seq 100); do [ "$(cpus)" = "0-1" ] && break; sleep 0.1; done
echo "@widened cpus=[$(cpus)]"
kill $C; wait $C
kill -TERM $D; wait $D; E=$?
echo "@stopped exit=$E $(left)"
cat /tmp/d.log
"#;

/// After DAEMON_NARROWING: SIGKILL of the daemon while the cgroup is
/// narrowed (waited for, up to 5 s: a widening trial may be under way,
/// and `before` shows what the kill met); its watchdog puts the cpuset
/// back and then removes its state file (polled for 10 s, both) while the
/// program runs on.
const DAEMON_SIGKILL: &str = r#"
for i in $(seq 50); do case "$(cpus)" in 0|1) break;; esac; sleep 0.1; done
before=$(cpus); kill -KILL $D; wait $D; E=$?
for i in $(seq 100); do [ -z "$(cpus)" ] && [ -z "$(vsched_files)" ] && break; sleep 0.1; done
echo "@killed exit=$E before=[$before] $(left) running=[$(kill -0 $P 2>/dev/null && echo yes)]"
kill $P; wait $P
cat /tmp/d.log
"#;

/// Runs DAEMON_NARROWING with `--consolidate-cgroups`, then `ending`, in
/// a 2-vCPU guest on the host's kernel; asserts that the script ran
/// through and the cgroup narrowed; its output.
fn narrowed_daemon_then(ending: &str) -> String {
    let script = format!("FLAGS=--consolidate-cgroups\n{DAEMON_NARROWING}{ending}");
    let guest = layout_with_schedbench("layouts/two-free");
    let out = run_in_guest(&guest, &[&script]);
    let (code, text) = &out[0];
    println!("{text}");
    assert_eq!(*code, Some(0), "{text}");
    assert_narrowed_to_one_vcpu(text);
    text.clone()
}

/// Asserts the "@narrowed" line of DAEMON_NARROWING.
fn assert_narrowed_to_one_vcpu(text: &str) {
    let narrowed = bracketed(text, "narrowed", "cpus");
    assert!(
        (narrowed == "0" || narrowed == "1")
            && bracketed(text, "narrowed", "held") == "10"
            && bracketed(text, "narrowed", "running") == "yes",
        "the barrier's cgroup ran on one vCPU for a second while it ran: {text}"
    );
    assert_eq!(
        bracketed(text, "narrowed", "parked"),
        "1",
        "vsched status flags the vCPU left out parked: {text}"
    );
}

/// Asserts that the line "@`step`" finds the cgroup, the root's
/// controllers and /run/vsched as they were before the daemon.
fn assert_put_back(text: &str, step: &str) {
    for key in ["cpus", "ctl", "files"] {
        assert_eq!(
            bracketed(text, step, key),
            "",
            "{key} put back as it was: {text}"
        );
    }
}

/// The value of `key=[...]` on the line "@`step` ...".
fn bracketed<'a>(text: &'a str, step: &str, key: &str) -> &'a str {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("@{step} ")))
        .unwrap_or_else(|| panic!("no @{step} line in:\n{text}"));
    let start = line
        .find(&format!("{key}=["))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + key.len()
        + 2;
    let end = line[start..].find(']').map_or(line.len(), |e| start + e);
    &line[start..end]
}

/// The daemon's form of consolidation, for the cgroups it manages
/// (crates/daemon/src/consolidate.rs), on the host's kernel (no
/// sched_ext). Without `--consolidate-cgroups` (run by hand, 2026-12-07)
/// the cpuset is never written in this layout (no vCPU is hidden), so
/// "@narrowed" reads empty and the test fails.
#[test]
fn the_daemon_narrows_a_cgroup_for_blocking_work_and_widens_it_for_cpu_bound_work() {
    let _guard = common::serial();
    let text = &narrowed_daemon_then(DAEMON_WIDENING_AND_SIGTERM);
    assert_eq!(
        bracketed(text, "widened", "cpus"),
        "0-1",
        "the CPU-bound threads widened it again: {text}"
    );
    assert!(text.contains("@stopped exit=0 "), "{text}");
    assert_put_back(text, "stopped");
    assert!(
        summary_count(text, " narrowed, ") >= 1,
        "the summary counts the narrowing: {text}"
    );
    // The CPU-bound threads wait on the narrowed set: at once, not by a
    // trial (which the barrier's phase may have made) and not by the
    // empty cgroup's rest. Regression: the CPU-bound program was started
    // in the background and the barrier killed at once; where the shell
    // had not yet moved the program in, the cgroup was empty for a walk
    // and rested at its widest: 0 widened at once (CI, 2026-12-08). The
    // summary's "time(s) empty" cannot be asserted to be 0: the cgroup is
    // empty again between the program's end and SIGTERM, seen or not.
    assert!(
        summary_count(text, " widened at once") >= 1,
        "the set widened at once for the CPU-bound threads: {text}"
    );
}

/// The number before `label` in the daemon's consolidation summary.
fn summary_count(text: &str, label: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("vsched daemon: consolidation of /sys/fs/cgroup/work: "))
        .and_then(|l| l.split(label).next())
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no '{label}' in the summary: {text}"))
}

/// SIGKILL of the daemon while it keeps a cgroup narrowed: its watchdog
/// puts the cpuset, the root's controllers and /run/vsched back as they
/// were, and the cgroup's program runs on (on every vCPU again).
#[test]
fn sigkill_of_the_daemon_while_a_cgroup_is_narrowed_puts_its_cpuset_back() {
    let _guard = common::serial();
    let text = &narrowed_daemon_then(DAEMON_SIGKILL);
    // 137: 128 + SIGKILL's 9, so the kill, not an exit of its own, ended it.
    assert!(text.contains("@killed exit=137 "), "{text}");
    let before = bracketed(text, "killed", "before");
    assert!(
        before == "0" || before == "1",
        "the kill met the cgroup narrowed: {text}"
    );
    assert_put_back(text, "killed");
    assert_eq!(
        bracketed(text, "killed", "running"),
        "yes",
        "the program runs on: {text}"
    );
}
