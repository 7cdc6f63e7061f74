//! `vsched sched` in lab guests that have sched_ext (Debian's newest cloud
//! kernel, fetched by the lab): it loads and unloads, passes the program's
//! exit status through, refuses clearly where it cannot load, leaves the
//! default scheduler and every task running when killed outright, RWC
//! keeps normal tasks off the vCPU it hides, BVS serves a request server
//! from the low-latency vCPU, and IVH moves a CPU-bound thread between
//! capped vCPUs only when they are active (rested or answering). Needs
//! what the lab needs (root, QEMU 10 or newer, busybox-static) and network
//! access to Debian's archive the first time (the kernel is cached
//! afterwards).

mod common;

use common::lab::{
    blocking_program, fake_preferred_mask, hidden_vcpus, ipis_halved, json_on_line, layout_with,
    layout_with_schedbench, marked_value, run_counting_ipis, run_in_guest, run_in_guest_with_steal,
    timeline_rates, wait_state, with_run_timeout,
};
use common::{summary_after, vsched};
use serde_json::Value;
use vsched_model::stats::median;

/// Shell that loads `vsched sched -q {flags}` in the background (its pid in
/// `$s`, its summary to /tmp/`marker`.json, its messages to
/// /tmp/`marker`.err) and waits for its first model, then 2 s more for the
/// heartbeat to learn the vCPUs' rhythms. The same signal as the
/// benchmark's `wait_ready` (`--ready-file`, crates/bench/src/sched/script.rs),
/// over loading too: at most 30 s, the benchmark's wait for sched_ext to be
/// enabled (which has taken 13 s under TCG). A guest that gets no model
/// says so, with the loader's last messages. (A fixed 6 s wait, about 4 s
/// to the first model here, once ran a clean-clone suite's IVH test with
/// no model at all: no IVH move, the cause unseen.)
fn load_and_wait_for_model(flags: &str, marker: &str) -> String {
    format!(
        "rm -f /tmp/{marker}.ready; vsched sched -q {flags} --stats-json /tmp/{marker}.json \
         --ready-file /tmp/{marker}.ready 2>/tmp/{marker}.err & s=$!; \
         for i in $(seq 300); do [ -s /tmp/{marker}.ready ] && break; sleep 0.1; done; \
         [ -s /tmp/{marker}.ready ] || {{ echo '{marker}: no model after 30 s'; \
           tail -5 /tmp/{marker}.err; }}; sleep 2; "
    )
}

/// Checks that the probers reached the scheduler (what RWC, BVS and IVH
/// decide by); `text` is the guest command's output, shown if not.
fn assert_model_came(summary: &Value, text: &str) {
    assert!(
        summary["model_updates"].as_u64().unwrap_or(0) >= 1,
        "the probers gave the scheduler a model: {text}"
    );
}

fn counter(summary: &Value, name: &str) -> u64 {
    summary["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {summary:#}"))
}

/// Also: the program starts once the first model is in (the ready file
/// exists when it starts), and with `--start-at-once` before it (the
/// control: a first probe takes 0.3 s or more, so that run's program finds
/// no ready file).
#[test]
fn loads_for_a_program_passes_its_exit_status_and_unloads() {
    let _guard = common::serial();
    let cmd = "vsched sched -q -v --ready-file /tmp/r.json -- sh -c '[ -s /tmp/r.json ] && echo @model-in-at-start; \
               cat /sys/kernel/sched_ext/state /sys/kernel/sched_ext/root/ops; \
               for i in $(seq 300); do [ -s /tmp/r.json ] && break; sleep 0.1; done; echo \"@ready $(cat /tmp/r.json)\"; exit 7'; \
               echo \"status $?\"; [ -e /tmp/r.json ] && echo '@ready file left' ; cat /sys/kernel/sched_ext/state";
    let at_once = "vsched sched -q --start-at-once --ready-file /tmp/r2.json --stats-json /tmp/s2.json \
                   -- sh -c '[ -s /tmp/r2.json ] || echo @at-once-before-model'; echo @at-once; cat /tmp/s2.json";
    let intervals = "vsched sched -q --interval 200ms --interval-json /tmp/i.jsonl \
                     --stats-json /tmp/s3.json -- sleep 1.5; echo @intervals; cat /tmp/i.jsonl; \
                     echo @summary; cat /tmp/s3.json";
    // A path that cannot be written is refused before the scheduler loads.
    let bad_path = "vsched sched -q --interval-json /nonexistent/i.jsonl -- true; \
                    echo \"@bad-path $? $(cat /sys/kernel/sched_ext/state)\"";
    // A write that fails (/dev/full: no space) stops the lines, not the
    // scheduler or its program.
    let full = "vsched sched -q --interval 200ms --interval-json /dev/full -- sleep 1; \
                echo \"@full $?\"";
    let out = run_in_guest("sched/two-free", &[cmd, at_once, intervals, bad_path, full]);
    check_interval_lines(&out[2].1);
    let bad = &out[3].1;
    assert!(
        bad.contains("--interval-json") && bad.contains("@bad-path 2 disabled"),
        "refused before loading, exit status 2: {bad}"
    );
    let full = &out[4].1;
    assert!(
        full.matches("no more interval lines").count() == 1 && full.contains("@full 0"),
        "one warning, and the program's exit status: {full}"
    );
    let (_, text) = &out[0];
    assert!(
        text.contains("@model-in-at-start"),
        "the program started once the first model was in: {text}"
    );
    let (_, control) = &out[1];
    assert!(
        control.contains("@at-once-before-model"),
        "with --start-at-once it started before: {control}"
    );
    assert_eq!(
        summary_after(control, "@at-once")["program_started_before_model"],
        true,
        "{control}"
    );
    assert!(
        text.contains("enabled\nvsched\n"),
        "the program ran under vsched's scheduler: {text}"
    );
    assert!(
        text.contains("status 7"),
        "exit status passed through: {text}"
    );
    assert!(
        text.trim_end().ends_with("disabled"),
        "unloaded afterwards: {text}"
    );
    assert!(text.contains("unloaded after"), "a summary at exit: {text}");
    let ready: Value = serde_json::from_str(
        text.lines()
            .find_map(|l| l.strip_prefix("@ready {").map(|rest| format!("{{{rest}")))
            .unwrap_or_else(|| panic!("--ready-file was written: {text}"))
            .as_str(),
    )
    .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(ready["schema"], "vsched.sched-ready/v1", "{ready}");
    assert!(
        ready["model_updates"].as_u64() >= Some(1),
        "ready once a model came: {ready}"
    );
    assert!(
        !text.contains("@ready file left"),
        "removed at exit: {text}"
    );
    // -v reports the verifier's work: the programs hold thousands of
    // instructions, so a count under that is a query that missed them.
    let verified: u64 = text
        .lines()
        .find_map(|l| l.split("verifier went through ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("-v says what the verifier went through: {text}"));
    assert!(verified > 5_000, "verified instructions {verified}: {text}");
}

/// `--interval-json`: a line per interval while the program ran, each the
/// counts over its own interval, so that they add up to no more than the
/// summary's totals (lines of running totals would add up to more).
fn check_interval_lines(text: &str) {
    let lines: Vec<Value> = text
        .split("@intervals")
        .nth(1)
        .and_then(|rest| rest.split("@summary").next())
        .unwrap_or_else(|| panic!("no interval lines: {text}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}: {text}")))
        .collect();
    // 1.5 s of program at 200-300 ms a line (the loop wakes every 100 ms).
    assert!(lines.len() >= 4, "{} interval lines: {text}", lines.len());
    let summary = summary_after(text, "@summary");
    let totals = summary["counters"].as_object().unwrap();
    let mut sums = std::collections::BTreeMap::<&str, u64>::new();
    for line in &lines {
        assert_eq!(line["schema"], "vsched.sched-interval/v1", "{line}");
        let interval = line["interval_s"].as_f64().unwrap_or(0.0);
        assert!(
            (0.2..1.0).contains(&interval),
            "interval {interval}: {line}"
        );
        let counters = line["counters"].as_object().unwrap();
        assert_eq!(
            counters.keys().collect::<Vec<_>>(),
            totals.keys().collect::<Vec<_>>(),
            "the summary's counters: {line}"
        );
        for (name, v) in counters {
            *sums.entry(name).or_default() += v.as_u64().unwrap();
        }
    }
    let elapsed: Vec<f64> = lines
        .iter()
        .filter_map(|l| l["elapsed_s"].as_f64())
        .collect();
    assert!(elapsed.windows(2).all(|w| w[0] < w[1]), "{elapsed:?}");
    for (name, sum) in &sums {
        assert!(
            *sum <= totals[*name].as_u64().unwrap(),
            "{name}: the lines add up to {sum}, more than the total: {text}"
        );
    }
    assert!(
        sums.values().any(|&n| n > 0),
        "the probers' SCHED_IDLE threads alone queue tasks: {text}"
    );
}

/// `vsched daemon --sched`: the daemon loads the scheduler, feeds it the
/// model (the status shows it loaded with counters moving and models
/// written), and SIGTERM unloads it (the kernel's own scheduler is back).
/// With `--consolidate` too, in the same guest: the idle guest's set
/// narrows, and the status, its table and the metrics name the parked
/// vCPU; without it (the first run) nothing is parked.
#[test]
fn daemon_feeds_its_scheduler_and_unloads_it_on_sigterm() {
    let _guard = common::serial();
    let cmd = format!(
        "vsched daemon --sched 2>/tmp/d.log & D=$!; {}; echo \"@state $(cat /sys/kernel/sched_ext/state) $(cat /sys/kernel/sched_ext/root/ops)\"; \
         for i in $(seq 100); do vsched status --json > /tmp/s.json 2>/dev/null && grep -q '\"model_updates\":[2-9]' /tmp/s.json && break; sleep 0.2; done; \
         echo \"@status $(tr -d '\\n' < /tmp/s.json)\"; \
         kill -TERM $D; wait $D; echo \"@exit $?\"; {}; echo \"@after $(cat /sys/kernel/sched_ext/state)\"; cat /tmp/d.log",
        wait_state("enabled"),
        wait_state("disabled")
    );
    // The status, its table and the metrics are read together, after 5 s
    // of an otherwise idle guest each time, until each has named a parked
    // vCPU: each `vsched status` is a process that runs long under the
    // emulator, and one that waits on the single active vCPU widens the
    // set at once (`unparked`, then a doubled wait before the next
    // trial). Read every 0.2 s, the reads kept the set wide: one of 68
    // reports had a vCPU parked, against 52 of 53 and 49 of 54 in the
    // same guest left alone for 60 s before and after (7.3.4, `vsched
    // status --json --history` read once at the end), and a clean-clone
    // suite's run spent its 300 s without the table naming one. A report between two
    // of the reads can widen the set again (each report sets all three
    // from one reading, state.rs `take`), so each is kept from the first
    // read that named a vCPU. The busybox guest's loopback starts down:
    // up, for the metrics.
    let consolidated = format!(
        "ip link set lo up; vsched daemon --sched --consolidate 2>/tmp/c.log & D=$!; {}; \
         for try in $(seq 12); do sleep 5; \
           vsched status --json > /tmp/c.json 2>/dev/null; vsched status > /tmp/t.txt 2>/dev/null; \
           wget -qO- http://127.0.0.1:9488/metrics | grep '^vsched_vcpu_parked' > /tmp/m.txt; \
           [ -s /tmp/c.seen ] || ! grep -q '\"parked\":\\[[0-9]' /tmp/c.json || cp /tmp/c.json /tmp/c.seen; \
           [ -s /tmp/t.seen ] || ! grep -q 'consolidation parks vCPUs \\[' /tmp/t.txt || cp /tmp/t.txt /tmp/t.seen; \
           [ -s /tmp/m.seen ] || ! grep -q ' 1$' /tmp/m.txt || cp /tmp/m.txt /tmp/m.seen; \
           [ -s /tmp/c.seen ] && [ -s /tmp/t.seen ] && [ -s /tmp/m.seen ] && break; done; \
         [ -s /tmp/c.seen ] || cp /tmp/c.json /tmp/c.seen; [ -s /tmp/t.seen ] || cp /tmp/t.txt /tmp/t.seen; \
         [ -s /tmp/m.seen ] || cp /tmp/m.txt /tmp/m.seen; \
         echo \"@status $(tr -d '\\n' < /tmp/c.seen)\"; sed 's/^/@table /' /tmp/t.seen; sed 's/^/@metric /' /tmp/m.seen; \
         kill -TERM $D; wait $D; echo \"@exit $?\"",
        wait_state("enabled")
    );
    // Their own waits allow up to about 200 s (30 s for each state, 20 s
    // for the first status, twelve rounds of 5 s and three reads): the
    // lab's default of 120 s for the guest's commands ended a run on a
    // loaded host without the status that says why (6.16.12, a local
    // suite).
    let guest = with_run_timeout(&layout_with("sched/two-free", &[]), 300);
    let out = run_in_guest(&guest, &[&cmd, &consolidated]);
    let (_, text) = &out[0];
    assert!(text.contains("@state enabled vsched"), "loaded: {text}");
    let status: Value = serde_json::from_str(
        text.lines()
            .find_map(|l| l.strip_prefix("@status "))
            .unwrap_or_else(|| panic!("{text}")),
    )
    .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(status["sched"]["loaded"], true, "{status:#}");
    assert!(
        status["model_updates"].as_u64().unwrap_or(0) >= 2,
        "{status:#}"
    );
    let decisions: u64 = status["sched"]["counters"]
        .as_object()
        .unwrap_or_else(|| panic!("{status:#}"))
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert!(decisions > 0, "the scheduler made decisions: {status:#}");
    assert_eq!(
        status["sched"]["parked"],
        serde_json::json!([]),
        "nothing parked without --consolidate: {status:#}"
    );
    assert!(text.contains("@exit 0"), "{text}");
    assert!(text.contains("@after disabled"), "unloaded: {text}");

    let (_, text) = &out[1];
    let status: Value = serde_json::from_str(
        text.lines()
            .find_map(|l| l.strip_prefix("@status "))
            .unwrap_or_else(|| panic!("{text}")),
    )
    .unwrap_or_else(|e| panic!("{e}: {text}"));
    let parked = status["sched"]["parked"]
        .as_array()
        .unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(
        parked.len(),
        1,
        "the idle guest narrowed to one vCPU: {status:#}"
    );
    assert!(
        text.contains("@table   scheduler: loaded; consolidation parks vCPUs ["),
        "{text}"
    );
    let parked_metric: f64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("@metric "))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    assert_eq!(parked_metric, 1.0, "vsched_vcpu_parked: {text}");
    assert!(text.contains("@exit 0"), "{text}");
}

/// Where the kernel publishes a preferred-CPU mask (steal-time CPU
/// folding), consolidation parks only the vCPU it leaves out, whatever the
/// probers measured: `vsched daemon --sched --consolidate` runs the
/// consolidation tests' blocking program for 15 s, once with vCPU 1
/// preferred and once with vCPU 0, and its history (the parked vCPUs at
/// each report, read once at the end: a process started to look while the
/// program runs, such as `vsched status`, runs long enough under the
/// emulator to widen the set) must show a vCPU parked at three reports or
/// more, and never the preferred one. The program starts once the first
/// model is in: the mask reaches the scheduler with it, and a set narrowed
/// before then is swapped at the period after the first report, whose
/// sample is therefore not judged (the next test measures a change of
/// the mask). Each arm is the
/// other's control: without the rule the weaker by a capacity reading is
/// parked, and on two free vCPUs whose readings lie within ±15% of each
/// other that is the same vCPU in both arms, or either (measured
/// 2026-12-06 with the mask read and dropped in `Session::feed`: vCPU 0
/// in both arms, in both of two runs).
/// No lab kernel has the file, so the guest writes one on a tmpfs over
/// /sys/devices/system/cpu before vsched starts, as the user-level form's
/// test does (tests/consolidate.rs), with what vsched and its libraries
/// read there for the CPU count (`online`, `possible`, a `cpuN` per vCPU).
#[test]
fn consolidation_parks_only_the_vcpu_the_kernel_does_not_prefer() {
    let _guard = common::serial();
    let arm = |preferred: u32| {
        format!(
            "{} {} > /dev/null; echo \"@history{preferred} $(vsched status --json --history | tr -d '\\n')\"; \
             {}",
            consolidating_daemon_with_preferred(preferred),
            blocking_program(15),
            STOP_CONSOLIDATING_DAEMON
        )
    };
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[&(arm(1) + &arm(0))]);
    let text = &out[0].1;
    for (preferred, other) in [(1u64, 0u64), (0, 1)] {
        let history = json_on_line(text, &format!("@history{preferred} "));
        // From the second report: the first carries the mask, and its
        // sample is read right after it is fed, before the next period's
        // swap, so it shows a set the idle guest narrowed before the mask
        // was known (seen: vCPU 1 parked at the first report with vCPU 1
        // preferred, vCPU 0 from the second on).
        let parked: Vec<String> = parked_at_each_report(&history)
            .into_iter()
            .skip(1)
            .map(|(_, parked)| parked)
            .collect();
        println!("vCPU {preferred} preferred, parked at each report after the first: {parked:?}");
        let parked_at = parked.iter().filter(|p| !p.is_empty()).count();
        assert!(
            parked_at >= 3,
            "the blocking program narrowed the set (vCPU {preferred} preferred): {parked:?}"
        );
        assert!(
            parked
                .iter()
                .all(|p| p.is_empty() || *p == other.to_string()),
            "with vCPU {preferred} preferred, only vCPU {other} is ever parked: {parked:?}"
        );
    }
    assert_eq!(text.matches("@exit 0").count(), 2, "{text}");
}

/// Shell: a faked preferred-CPU mask listing `preferred`
/// (common::lab::fake_preferred_mask, $S); then `vsched daemon --sched
/// --consolidate --no-bvs` started ($D), loaded, and its first model in
/// (the mask comes with it).
fn consolidating_daemon_with_preferred(preferred: u32) -> String {
    format!(
        "{} vsched daemon --sched --consolidate --no-bvs 2>/tmp/daemon.log & D=$!; {}; \
         for i in $(seq 100); do vsched status --json 2>/dev/null | grep -q '\"model_updates\":[1-9]' && break; sleep 0.2; done; ",
        fake_preferred_mask(preferred),
        wait_state("enabled")
    )
}

/// Shell: stops the daemon of consolidating_daemon_with_preferred ("@exit
/// STATUS"), and unmounts its tmpfs.
const STOP_CONSOLIDATING_DAEMON: &str =
    "kill -TERM $D; wait $D; echo \"@exit $?\"; umount $S; tail -3 /tmp/daemon.log; ";

/// Of a `vsched status --json --history` answer: each report's time
/// (unix ms) and the vCPUs parked then, as "1" or "0,1" ("" none).
fn parked_at_each_report(history: &Value) -> Vec<(u64, String)> {
    history["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no samples: {history:#}"))
        .iter()
        .map(|sample| {
            let vcpus = sample["vcpus"].as_array().cloned().unwrap_or_default();
            let on: Vec<String> = vcpus
                .iter()
                .filter(|v| v["parked"] == true)
                .filter_map(|v| v["cpu"].as_u64().map(|c| c.to_string()))
                .collect();
            (sample["unix_ms"].as_u64().unwrap_or(0), on.join(","))
        })
        .collect()
}

/// When the kernel's preferred-CPU mask changes under a narrowed set, the
/// parked vCPU follows it at once (vs_swap_for_preference), not at the
/// next trial, which a steady narrowed set never holds: the daemon's
/// scheduler runs the blocking program for 24 s with vCPU 1 preferred
/// (so vCPU 0 parked), and 10 s in, the guest writes 0 to the mask. Before
/// the change, from the first report with vCPU 0 parked on, reports must
/// show vCPU 0 parked at two or more and never vCPU 1; after it, vCPU 1 parked within SWAP_WITHIN_MS, and from then on
/// never vCPU 0, at three reports or more.
/// The control, the same build with the swap switched off (2026-12-06),
/// kept vCPU 0 parked at every report after the change in 3 of 3 runs
/// with this procedure (0 swaps).
#[test]
fn consolidation_follows_the_kernels_preferred_mask_when_it_changes() {
    let _guard = common::serial();
    let script = format!(
        "{} {} > /dev/null & B=$!; T=$(date +%s); sleep 10; echo 0 > $S/preferred; wait $B; \
         echo \"@changed $((T + 10))\"; \
         echo \"@history $(vsched status --json --history | tr -d '\\n')\"; \
         echo \"@status $(vsched status --json | tr -d '\\n')\"; {}",
        consolidating_daemon_with_preferred(1),
        blocking_program(24),
        STOP_CONSOLIDATING_DAEMON
    );
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[&script]);
    let text = &out[0].1;
    let changed_ms = marked_value(text, "@changed") as u64 * 1000;
    let parked = parked_at_each_report(&json_on_line(text, "@history "));
    let sched = &json_on_line(text, "@status ")["sched"];
    let swaps = counter(sched, "preference_swaps");
    println!(
        "mask changed at {changed_ms} ms; preference swaps {swaps}, parked {}, unparked {}, \
         trials widened {}, undone {}; parked at each report: {parked:?}",
        counter(sched, "parked"),
        counter(sched, "unparked"),
        counter(sched, "trials_widened"),
        counter(sched, "trials_undone"),
    );
    // The change is stamped as the second before the 10 s sleep, plus 10:
    // up to a second early, so "before" ends early. Nothing is forked at
    // the change itself (`echo` and the redirection are the shell's
    // own): a `$(date)` there, a fork and exec of several ms under the
    // emulator, ran long enough to widen the set at once in 2 of 6 runs,
    // and then the next narrowing parked the newly left-out vCPU without
    // a swap, in the control too.
    // Before the first model the preference is not known, and an idle
    // guest may already be narrowed the other way: "before" starts at
    // the first report with vCPU 0 parked. A set that parked vCPU 1
    // until the probers' first model came swapped at the next period
    // (seen once on 6.16.12: vCPU 1 parked at the program's start, vCPU
    // 0 1.8 s later, two swaps in all).
    let before: Vec<&str> = parked
        .iter()
        .filter(|(ms, _)| *ms < changed_ms)
        .map(|(_, p)| p.as_str())
        .skip_while(|p| *p != "0")
        .collect();
    assert!(
        before.iter().filter(|p| **p == "0").count() >= 2 && !before.contains(&"1"),
        "vCPU 1 preferred, the narrowed set parked vCPU 0: {parked:?}"
    );
    let swapped_at = parked
        .iter()
        .position(|(ms, p)| *ms >= changed_ms && p == "1")
        .unwrap_or_else(|| panic!("vCPU 1 was never parked after the change: {parked:?}"));
    let since: Vec<&str> = parked[swapped_at..]
        .iter()
        .map(|(_, p)| p.as_str())
        .collect();
    assert!(
        parked[swapped_at].0 <= changed_ms + SWAP_WITHIN_MS,
        "vCPU 1 parked within {SWAP_WITHIN_MS} ms of the change: {parked:?}"
    );
    assert!(
        since.iter().filter(|p| **p == "1").count() >= 3
            && since.iter().all(|p| p.is_empty() || *p == "1"),
        "vCPU 0 preferred from then on, vCPU 1 parked instead: {parked:?}"
    );
    // Not asserted: `preference_swaps` >= 1. Where the set happens to
    // widen as the mask arrives (a trial, or a long runner), the next
    // narrowing parks the newly left-out vCPU by vs_park_first, no swap
    // needed.
    assert!(text.contains("@exit 0"), "{text}");
}

/// How soon after the guest's stamp of a mask change (to the second: up
/// to 1 s early) a report must show the swap: the mask reaches the
/// scheduler with the next report, 2 s away when a heavy or topology
/// step falls between (gaps of 2.0 s seen on a quiet host; a loaded one
/// stretches them); the swap comes at the next 100 ms period; the report
/// after it shows it, another such gap. Seen: 2.1-4.2 s. The control
/// never swaps (it waits for a trial), so the bound may be generous.
const SWAP_WITHIN_MS: u64 = 8000;

/// A slice that runs out where its end could only keep the task is renewed
/// at the tick (policy.h `vs_renews_slice`): with a CPU-bound thread on
/// each vCPU nothing else waits and no vCPU is idle; with one thread the
/// other vCPU is idle, so the slice ends as before (the task is kept).
#[test]
fn slices_are_renewed_at_the_tick_only_where_no_vcpu_is_idle() {
    let _guard = common::serial();
    // About 0.6 s per thread under TCG, ~150 ticks at HZ=250. No probers:
    // their light windows would wait for the vCPUs and end slices.
    let run = |threads: u32, marker: &str| {
        format!(
            "vsched sched -q --no-probe --stats-json /tmp/{marker}.json --              schedbench cpu {threads} 400000000; echo {marker}; cat /tmp/{marker}.json"
        )
    };
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[&run(2, "two-threads"), &run(1, "one-thread")]);
    let two = summary_after(&out[0].1, "two-threads");
    let one = summary_after(&out[1].1, "one-thread");
    let renewed_two = counter(&two, "slice_renewed");
    // About 300 expected (two threads, ~150 ticks each); 50 leaves room
    // for a slow or disturbed guest.
    assert!(
        renewed_two >= 50,
        "two threads on two vCPUs run on at the tick: {two:#}"
    );
    // Beside an idle vCPU a renewal needs that vCPU busy at the tick (the
    // loader's brief wake-ups): a few, far below two busy vCPUs' count.
    assert!(
        counter(&one, "slice_renewed") * 5 < renewed_two,
        "one thread beside an idle vCPU is not renewed: {one:#}"
    );
    // ~150 slice ends in its run; 20 leaves room for a slow guest.
    assert!(
        counter(&one, "kept_running") >= 20,
        "its slices end and it is kept: {one:#}"
    );
}

/// A sched_yield() with nothing else to run on its vCPU returns at once,
/// the task keeping its slice (`vsched_yield`, policy.h
/// `vs_yield_keeps_slice`): nearly every yield of a lone thread is
/// counted `yields_kept`; none with `--no-yield-in-place`, the control;
/// and few when two threads bound to one vCPU yield to each other (each
/// yield finds the other waiting: only the last one's tail is alone). The
/// times are printed, not judged: `vsched bench sched --only
/// overhead-yield` compares them (docs/sched.md, "Yields").
#[test]
fn a_yield_keeps_its_slice_only_with_nothing_else_to_run() {
    let _guard = common::serial();
    let run = |flag: &str, workload: &str, marker: &str| {
        format!(
            "vsched sched -q --no-probe {flag} --stats-json /tmp/{marker}.json -- {workload}; \
             echo {marker}; cat /tmp/{marker}.json"
        )
    };
    let guest = layout_with_schedbench("sched/two-free");
    let lone = "schedbench yield 1 20000";
    let out = run_in_guest(
        &guest,
        &[
            &run("", lone, "kept"),
            &run("--no-yield-in-place", lone, "ended"),
            &run("", "taskset -c 1 schedbench yield 2 5000", "shared"),
        ],
    );
    for (_, text) in &out {
        println!("{}", text.lines().next().unwrap_or(""));
    }
    let kept = counter(&summary_after(&out[0].1, "kept"), "yields_kept");
    let ended = counter(&summary_after(&out[1].1, "ended"), "yields_kept");
    let shared = counter(&summary_after(&out[2].1, "shared"), "yields_kept");
    println!("yields_kept: lone {kept}, control {ended}, two on one vCPU {shared}");
    // 20,000 yields; a yield that finds a kernel thread or the loader
    // queued on its vCPU ends its slice, so 90%.
    assert!(
        kept >= 18_000,
        "a lone thread's yields keep the slice: {kept}"
    );
    assert_eq!(ended, 0, "the control: every yield ends the slice");
    // 10,000 yields, alternating: a rule that kept every yield would
    // count about all of them.
    assert!(
        shared < 1_000,
        "a yield with another thread waiting ends the slice: {shared} of 10,000 kept"
    );
}

/// Regression: a task whose slice ended with nothing else to run on its
/// vCPU was queued (SCX_ENQ_LAST) while the kernel switched the vCPU to
/// idle, and nothing woke the vCPU to run it: a lone CPU-bound thread
/// beside an idle vCPU took 3.9x and 4.1x the default's time on 6.18.15
/// and 6.16.12 (32 s instead of about 1 s on the IVH layout's capped
/// vCPUs, which is why the IVH test's control was that slow there), and
/// 4.0-6.1x in the FIFO reference mode on 6.16.12, 6.18.15 and 7.2.13
/// (the build before the fix, in this test's guest). Fixed: 1.15-1.2x.
///
/// Each variant runs LONE_THREAD_RUNS times in one guest and its fastest
/// run is judged: the bug slows every run, a host disturbance one (CI
/// once read 0.64 s for FIFO mode on 6.16.12 where four guests then read
/// 0.31-0.33 s). The control, the build before the fix (3d92e07) through
/// the same procedure (2026-11-28): on 6.16.12 fastest runs of 2.3x
/// (vsched) and 6.8x (FIFO mode); on 7.2.13 1.1x and 4.0x. FIFO mode's
/// bound fails it on both.
#[test]
fn a_lone_cpu_bound_thread_runs_at_full_speed_beside_idle_vcpus() {
    let _guard = common::serial();
    // About 0.3-0.6 s under TCG at the default's speed.
    let work = 200_000_000;
    let round = format!(
        "schedbench cpu 1 {work} | sed 's/^/default /'; \
         vsched sched -q -- schedbench cpu 1 {work} | sed 's/^/vsched /'; \
         vsched sched -q --reference-fifo -- schedbench cpu 1 {work} | sed 's/^/fifo /'; "
    );
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[&round.repeat(LONE_THREAD_RUNS)]);
    let (_, text) = &out[0];
    let fastest = |marker: &str| -> f64 {
        let runs: Vec<f64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{marker} elapsed_s ")))
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        assert_eq!(runs.len(), LONE_THREAD_RUNS, "{marker} runs: {text}");
        runs.into_iter().fold(f64::INFINITY, f64::min)
    };
    let default = fastest("default");
    for marker in ["vsched", "fifo"] {
        let took = fastest(marker);
        println!("{marker}: {took:.2} s, default {default:.2} s (fastest runs)");
        assert!(
            took <= LONE_THREAD_MAX_SLOWDOWN * default,
            "{marker}: the thread took {took:.2} s at best against {default:.2} s under the \
             default: {text}"
        );
    }
}

/// Consolidation with BVS on (both as users get them with `vsched sched
/// --consolidate`), on the vCPUs RWC leaves: in the stacked-pair guest RWC
/// hides one vCPU of the pair and consolidation parks another, so one
/// vCPU serves every normal task. The blocking program's two threads
/// wake each other there, and every wake-up BVS or the local wake-up puts
/// straight into that vCPU's local queue overtakes the tasks waiting in
/// its vtime-ordered queues (queue.bpf.h `normal_tasks_wait_for`).
/// Regression: before that check, the pair kept the local queue full, the
/// program's own sampling thread, the probers and a kworker waited 29 s,
/// and sched_ext's watchdog ejected the scheduler ("runnable task stall");
/// the program's timeline read zero from its second second on (2 runs of
/// 2 with this procedure on 7.2.13, and 1 of 1 with vCPUs going offline
/// during it). The suite's other consolidation tests turn BVS off.
/// Every second of the program must show progress, the set must have
/// narrowed, and the scheduler must still be loaded at the end.
#[test]
fn consolidation_and_bvs_leave_no_task_waiting_behind_a_wake_up_pair() {
    let _guard = common::serial();
    let layout = layout_with_schedbench("sched/stacked-pair");
    let cmd = format!(
        "vsched sched -q --consolidate --stats-json /tmp/c.json 2>/tmp/s.log & S=$!; {enabled}; \
         {program} > /tmp/t.out; echo \"@program exit $?\"; echo \"@timeline $(cat /tmp/t.out)\"; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; \
         cat /tmp/s.log; echo \"@summary $(tr -d '\\n' < /tmp/c.json)\"",
        enabled = wait_state("enabled"),
        program = blocking_program(PAIR_PROGRAM_SECONDS),
    );
    let out = run_in_guest(&layout, &[&cmd]);
    let text = &out[0].1;
    assert!(text.contains("@program exit 0"), "{text}");
    let rates = timeline_rates(text);
    let summary = json_on_line(text, "@summary ");
    println!(
        "rounds per second: {rates:?}; parked {}, unparked {}, trials undone {}, bvs behind short {}, local wake-ups {}",
        counter(&summary, "parked"),
        counter(&summary, "unparked"),
        counter(&summary, "trials_undone"),
        counter(&summary, "bvs_behind_short"),
        counter(&summary, "wake_sync"),
    );
    assert_eq!(
        rates.len(),
        PAIR_PROGRAM_SECONDS as usize,
        "a rate for each second: {text}"
    );
    assert!(
        rates.iter().all(|&r| r > 0.0),
        "the program made progress in every second: {rates:?} {text}"
    );
    // The condition itself, or the run proves nothing: a vCPU hidden and
    // one parked, so that one vCPU served every normal task, and the
    // pair's wake-ups taking BVS's wait behind the waker there.
    assert!(
        !hidden_vcpus(&summary).is_empty() && counter(&summary, "parked") >= 1,
        "RWC hid a vCPU and consolidation parked another: {summary:#}"
    );
    assert!(
        counter(&summary, "bvs_behind_short") > 0,
        "BVS queued wake-ups behind their wakers: {summary:#}"
    );
    assert!(text.contains("@state enabled"), "still loaded: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
}

/// How long the wake-up pair's program runs: the stall came within its
/// first two seconds, and the set narrows within about 3 s.
const PAIR_PROGRAM_SECONDS: u32 = 16;

/// Two threads bound to one vCPU that wake each other (a pipe ping-pong
/// under `taskset -c 0`, as benchmarks are often run) beside a CPU-bound
/// thread, on two free vCPUs: a shell's 1 s sleeps must each end within
/// BOUND_PAIR_MAX_GAP_S. A bound task's wake-up ran straight from the
/// vCPU's local queue (queue.bpf.h `enqueue_bound`), so the pair never let
/// that queue empty and dispatch never ran: tasks queued for vCPU 0 waited
/// until the other vCPU's thread gave way. Regression: before the check
/// for waiting normal tasks, the shell's sleeps took up to 12.2 s and
/// 25.4 s in two runs (a mean of 3.5 s), against at most 1.09 s under the
/// kernel's default and 1.06 s with the check (7.2.13).
#[test]
fn bound_wake_up_pair_leaves_no_task_waiting_behind_it() {
    let _guard = common::serial();
    let layout = layout_with_schedbench("sched/two-free");
    let cmd = format!(
        "vsched sched -q --stats-json /tmp/b.json 2>/tmp/s.log & S=$!; {enabled}; sleep 1; \
         sh -c 'while :; do :; done' & H=$!; \
         taskset -c 0 schedbench pingpong 1 1000000000 > /dev/null & P=$!; \
         for i in $(seq {BOUND_PAIR_TICKS}); do sleep 1; echo \"@tick $(cut -d' ' -f1 /proc/uptime)\"; done; \
         kill $H $P; echo \"@state $(cat /sys/kernel/sched_ext/state)\"; \
         kill -INT $S; wait $S; echo \"@loader exit $?\"; cat /tmp/s.log; \
         echo \"@summary $(tr -d '\\n' < /tmp/b.json)\"",
        enabled = wait_state("enabled"),
    );
    let out = run_in_guest(&layout, &[&cmd]);
    let text = &out[0].1;
    let ticks: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("@tick "))
        .map(|t| t.trim().parse().unwrap())
        .collect();
    assert_eq!(ticks.len(), BOUND_PAIR_TICKS as usize, "{text}");
    let longest = ticks.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    let summary = json_on_line(text, "@summary ");
    println!(
        "longest 1 s sleep {longest:.2} s; bound tasks queued {}, run directly {}",
        counter(&summary, "pinned_queued"),
        counter(&summary, "pinned")
    );
    assert!(
        longest <= BOUND_PAIR_MAX_GAP_S,
        "a 1 s sleep took {longest:.2} s beside the bound pair: {text}"
    );
    // The condition itself: the pair's wake-ups found tasks waiting.
    assert!(counter(&summary, "pinned_queued") > 0, "{summary:#}");
    assert!(text.contains("@state enabled"), "still loaded: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
}

/// The shell's 1 s sleeps in bound_wake_up_pair_leaves_no_task_waiting_
/// behind_it: the first one starts once the pair runs.
const BOUND_PAIR_TICKS: u32 = 12;
/// The longest a 1 s sleep may take there: twice the kernel's default
/// (1.07-1.09 s seen), far below the 12-25 s of the starved shell.
const BOUND_PAIR_MAX_GAP_S: f64 = 2.0;

/// Consolidation (consolidate.bpf.h) narrows the active vCPUs under a
/// blocking program whose threads run briefly between barriers, and the
/// vCPUs then wake each other far less: the guest's rescheduling and
/// call-function IPIs (/proc/interrupts RES and CAL) over the run at most
/// half the default scheduler's in the same guest, both in total and per
/// round of the program (common::lab::blocking_program, 8 s;
/// common::lab::ipis_halved says why both). The control, the same
/// scheduler without `--consolidate` (BVS off in both, below), runs in the
/// same guest and must fail that check (measured 2026-12-03 on 7.2.13
/// with a 60,000-round program, twelve runs of each: 0.06-0.17 of the
/// default's IPIs with consolidation, 0.75-0.90 without; 2026-12-06, this
/// program: 0.05 and 0.80 in total; 2026-12-07 on 7.3.4, 0.16 and 0.88
/// per round, 0.14 and 0.28 in total). Beside it, a CPU-bound thread per
/// vCPU started after the idle guest's set narrowed widens it (at once,
/// `unparked`, or by undoing a narrowing trial its start fell into: a
/// clean-clone suite saw that path) and runs no slower than 1.25x the
/// default: the medians of CONSOLIDATION_CPU_RUNS alternated runs, since
/// one run on a busy CI host took 1.28x (2.44 s against 1.90 s) with the
/// set narrowed for exactly the periods of the good runs (25 of 54-58,
/// the idle wait before the threads, in that run and in the good runs on
/// a quiet host, 0.99-1.17x in 14): the host's noise hit one run, not the
/// mechanism. Kept on one vCPU the threads take about 2x.
#[test]
fn consolidation_narrows_for_a_blocking_program_and_widens_for_cpu_bound_work() {
    let _guard = common::serial();
    // Two threads with ~1 us of work per round, so nearly every round is
    // a wake-up across vCPUs: under the default scheduler one vCPU ran it
    // 1.9x faster than two in this guest (0.59 s against 1.11-1.14 s for
    // 30000 rounds, 7.2.13). A 4-thread barrier with ~10 us of work was
    // 1.7x faster on a quiet day but only 1.1-1.2x on a busy one, when the
    // trials rightly found narrowing no better: whether the set narrowed
    // was the host's luck.
    // The blocking program's seconds: a fixed time whatever the host's speed.
    const BLOCKING_S: u32 = 8;
    let barrier = blocking_program(BLOCKING_S);
    // About 1.5 s under the default on a quiet host, 4.5-4.7 s on a slow
    // one (2026-12-07, here and in CI: the benchmarks' guests ran 2-3x
    // slower that day).
    let cpu_bound = "schedbench cpu 2 1000000000";
    let run = run_counting_ipis;
    let sched = |flags: &str, marker: &str| {
        format!("vsched sched -q {flags} --stats-json /tmp/{marker}.json --")
    };
    let show = |marker: &str| format!("echo @{marker}; cat /tmp/{marker}.json; ");
    // BVS off in both arms: its rule that queues a latency-sensitive
    // wakee behind the short task that woke it (bvs_behind_short) keeps
    // this pair on one vCPU by itself at times, so a control with BVS on
    // cut the IPIs as well as consolidation in 3 of 7 runs (667-13131
    // against ~58000) and could not tell the two apart.
    let blocking = run("", &barrier, "default")
        + &run(
            &sched("--no-bvs --consolidate", "consolidated"),
            &barrier,
            "consolidated",
        )
        + &show("consolidated")
        + &run(&sched("--no-bvs", "control"), &barrier, "control")
        + &show("control");
    // Under vsched the threads start after 3 s of an idle guest, in
    // which the active set narrows: they must widen it. (After 1.5 s it
    // had not narrowed in 1 of 4 runs: a trial waits for two periods of
    // steady wake-ups, and the probers' start-up is not steady.)
    let cpu: String = (0..CONSOLIDATION_CPU_RUNS)
        .map(|i| {
            run("", cpu_bound, &format!("default-cpu-{i}"))
                + &run(
                    &sched("--consolidate", &format!("cpu-{i}")),
                    &format!("sh -c 'sleep 3; {cpu_bound}'"),
                    &format!("cpu-{i}"),
                )
                + &show(&format!("cpu-{i}"))
        })
        .collect();
    // Five loads of the scheduler and nine runs: about 110 s of guest
    // commands here on a slow day (6.16.12), and over the lab's 120 s
    // default in CI the same day, the commands ending normally.
    let guest = with_run_timeout(&layout_with_schedbench("sched/two-free"), 300);
    let out = run_in_guest(&guest, &[&blocking, &cpu]);
    let value = marked_value;
    let mean_active = |summary: &Value| {
        counter(summary, "active_vcpu_periods") as f64
            / counter(summary, "consolidate_periods").max(1) as f64
    };

    let text = &out[0].1;
    let (with, with_total, with_per_round) =
        ipis_halved(text, "consolidated", "default", BLOCKING_S);
    let (without, without_total, without_per_round) =
        ipis_halved(text, "control", "default", BLOCKING_S);
    let summary = summary_after(text, "@consolidated");
    println!(
        "IPIs as shares of the default's, in total and per round: consolidated \
         {with_total:.2}, {with_per_round:.2}; control {without_total:.2}, {without_per_round:.2}; \
         mean active vCPUs {:.2}",
        mean_active(&summary)
    );
    assert!(
        counter(&summary, "parked") >= 1 && mean_active(&summary) < 1.75,
        "the blocking program ran on fewer vCPUs: {summary:#}"
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
    for i in 0..CONSOLIDATION_CPU_RUNS {
        default_s.push(value(text, &format!("default-cpu-{i} elapsed_s")));
        took.push(value(text, &format!("cpu-{i} elapsed_s")));
        let summary = summary_after(text, &format!("@cpu-{i}"));
        // The set widens at once (`unparked`), or by undoing the
        // narrowing trial the threads' start fell into (`trials_undone`);
        // either way the times below show whether they got both vCPUs.
        let widened = counter(&summary, "unparked") + counter(&summary, "trials_undone");
        println!(
            "CPU-bound run {i}: {:.2} s against {:.2} s; parked {}, widened {widened}; \
             mean active vCPUs {:.2}",
            took[i],
            default_s[i],
            counter(&summary, "parked"),
            mean_active(&summary)
        );
        // Widened wherever it had narrowed: a run whose idle wait did not
        // narrow the set still times the threads on every vCPU.
        if counter(&summary, "parked") >= 1 {
            narrowed_runs += 1;
            assert!(
                widened >= 1,
                "the CPU-bound threads widened the narrowed set: {summary:#}"
            );
        }
    }
    assert!(
        narrowed_runs * 2 > CONSOLIDATION_CPU_RUNS,
        "the idle guest's set narrowed in most runs ({narrowed_runs}): {text}"
    );
    let (took, default_s) = (median(&mut took), median(&mut default_s));
    assert!(
        took <= 1.25 * default_s,
        "a thread per vCPU gets every vCPU: median {took:.2} s against {default_s:.2} s: {text}"
    );
}

/// Alternated runs of the default and of `--consolidate` under CPU-bound
/// work in the consolidation test: an odd number, for a plain median.
const CONSOLIDATION_CPU_RUNS: usize = 3;

/// Runs of each variant in the lone-thread test's guest (see there).
const LONE_THREAD_RUNS: usize = 3;

/// How much longer a lone CPU-bound thread may take under vsched than under
/// the default: with the bug 3.9x or more (above); fixed, 1.15-1.2x.
const LONE_THREAD_MAX_SLOWDOWN: f64 = 2.0;

/// Regression: a vCPU kept busy by normal work (here two CPU-bound threads
/// bound to it; in the adaptability benchmark, everything after RWC hid
/// its stacked sibling) never ran the SCHED_IDLE task waiting for it, and
/// after 5 s sched_ext's watchdog ejected the scheduler ("vcap-0 failed to
/// run for 5.248s"). SCHED_IDLE work must be slow, never stopped.
#[test]
fn sched_idle_work_bound_to_a_busy_vcpu_is_not_starved_into_an_ejection() {
    let _guard = common::serial();
    // About 11 s of work for two threads sharing vCPU 0 under TCG: well
    // past the watchdog's 5 s. No probers: the test's own SCHED_IDLE
    // thread is the one that must run.
    let cmd = "vsched sched -q --no-probe --stats-json /tmp/st.json -- sh -c \
               'taskset -c 0 schedbench idle 1 30 & i=$!; \
                taskset -c 0 schedbench cpu 2 3000000000; kill $i'; \
               echo \"status $?\"; cat /tmp/st.json";
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[cmd]);
    let (_, text) = &out[0];
    assert!(
        !text.contains("the kernel ejected"),
        "the scheduler stayed loaded: {text}"
    );
    assert!(text.contains("status 0"), "the program's status: {text}");
    let summary = summary_after(text, "status 0");
    assert!(summary["ejected"].is_null(), "{summary:#}");
    // Without probers the summary says so: no rhythm, no light window.
    assert_eq!(summary["tunables"]["probe_interval_ns"], 0, "{summary:#}");
    assert_eq!(summary["tunables"]["light_window_ns"], 0, "{summary:#}");
    let elapsed = summary["seconds"].as_f64().unwrap();
    assert!(
        elapsed > 5.0,
        "the load outlasted the watchdog's 5 s: {text}"
    );
    // One guarded slice per second of waiting.
    assert!(
        counter(&summary, "idle_starved") >= 3,
        "the SCHED_IDLE thread ran now and then: {summary:#}"
    );
}

/// The most of the vCPUs' time SCHED_IDLE spinners may get beside as many
/// CPU-bound threads as vCPUs. Measured in this test's guest: 2-4% under
/// the kernel's default (weight 3 against 1024, plus the moments a thread
/// is not runnable); 6-12% under vsched, a remaining gap
/// (docs/sched.md, known weaknesses); 40-44% before the fix below.
const IDLE_POLICY_MAX_SHARE: f64 = 0.25;

/// Regression: at every slice end the vCPU went to the SCHED_IDLE work
/// waiting for it, for a whole slice, while the expired CPU-bound thread
/// waited (the tick renewed no slice while such work waited, and dispatch
/// handed it over), and a thread left waiting at a slice end did not
/// pre-empt a vCPU running SCHED_IDLE work. Two spinners took 40-44% of
/// two vCPUs from two CPU-bound threads, which ran 0.56x the default's
/// speed; the probers' light windows got 3.5x the CPU the default gives
/// them, most of what the probers cost a full VM.
#[test]
fn sched_idle_work_gets_only_idle_cycles_beside_cpu_bound_threads() {
    let _guard = common::serial();
    // Two SCHED_IDLE spinners and two CPU-bound threads on two free
    // vCPUs; the spinners' CPU time (utime + stime, in ticks of 10 ms)
    // read before they are stopped.
    let run = |marker: &str| {
        format!(
            "sh -c 'schedbench idle 2 600 & i=$!; sleep 0.5; \
             t0=$(cut -d\" \" -f14,15 /proc/$i/stat); w=$(schedbench cpu 2 400000000); \
             t1=$(cut -d\" \" -f14,15 /proc/$i/stat); kill $i; \
             echo \"{marker} $w idle_ticks $t0 $t1\"'"
        )
    };
    let cmd = format!(
        "{default}; vsched sched -q --no-probe --stats-json /tmp/st.json -- {vsched}; \
         echo summary; cat /tmp/st.json",
        default = run("default"),
        vsched = run("vsched"),
    );
    let guest = layout_with_schedbench("sched/two-free");
    let out = run_in_guest(&guest, &[&cmd]);
    let (_, text) = &out[0];
    let share = |marker: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{marker} elapsed_s")))
            .unwrap_or_else(|| panic!("no {marker} line: {text}"));
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        // elapsed_s E idle_ticks U0 S0 U1 S1
        let [elapsed, u0, s0, u1, s1] = f[..] else {
            panic!("{line}: {text}")
        };
        assert!(elapsed > 0.5, "the threads ran: {line}");
        (u1 + s1 - u0 - s0) / 100.0 / (2.0 * elapsed)
    };
    let (default, vsched) = (share("default"), share("vsched"));
    let summary = summary_after(text, "summary");
    assert!(
        vsched < IDLE_POLICY_MAX_SHARE,
        "SCHED_IDLE spinners got {:.1}% of the vCPUs under vsched ({:.1}% under the default): {summary:#}",
        vsched * 100.0,
        default * 100.0
    );
    assert!(
        counter(&summary, "slice_renewed") > 0,
        "the tick kept the threads on over the waiting spinners: {summary:#}"
    );
}

#[test]
fn sigkill_of_the_loader_leaves_the_default_scheduler_and_every_task() {
    let _guard = common::serial();
    // Three tasks of our own (a CPU-bound loop, two sleepers) live through
    // the SIGKILL of the loader, and the loop keeps getting CPU time under
    // the kernel's scheduler afterwards (utime, field 14 of its stat).
    let cmd = format!(
        "sh -c 'while :; do :; done' & w=$!; sleep 600 & z1=$!; sleep 600 & z2=$!; \
         vsched sched -q & s=$!; {enabled}; cat /sys/kernel/sched_ext/state; \
         kill -9 $s; wait $s; {disabled}; \
         echo \"state $(cat /sys/kernel/sched_ext/state)\"; \
         for p in $w $z1 $z2; do kill -0 $p && echo \"alive $p\"; done; \
         t0=$(cut -d' ' -f14 /proc/$w/stat); sleep 1; t1=$(cut -d' ' -f14 /proc/$w/stat); \
         echo \"worker ticks $t0 $t1\"; kill $w $z1 $z2",
        enabled = wait_state("enabled"),
        disabled = wait_state("disabled"),
    );
    let out = run_in_guest("sched/two-free", &[&cmd]);
    let (_, text) = &out[0];
    assert!(
        text.lines().any(|l| l == "enabled"),
        "it was loaded first: {text}"
    );
    assert!(
        text.contains("state disabled"),
        "the kernel's own scheduler is back: {text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("alive ")).count(),
        3,
        "every task of ours survived: {text}"
    );
    let ticks: Vec<i64> = text
        .lines()
        .find_map(|l| l.strip_prefix("worker ticks "))
        .unwrap_or_else(|| panic!("no worker ticks: {text}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        ticks[1] - ticks[0] >= 20,
        "the CPU-bound task kept running (ticks {ticks:?} over 1 s): {text}"
    );
}

#[test]
fn refuses_a_second_scheduler_and_a_kernel_without_sched_ext() {
    let _guard = common::serial();
    let second = format!(
        "vsched sched -q & s=$!; {enabled}; vsched sched; echo \"status $?\"; kill $s; wait $s",
        enabled = wait_state("enabled")
    );
    let out = run_in_guest("sched/two-free", &[&second]);
    let (_, text) = &out[0];
    assert!(
        text.contains("another sched_ext scheduler (vsched") && text.contains("status 2"),
        "{text}"
    );
    // The probe layouts boot Debian 12's 6.1 kernel, which has no sched_ext.
    let out = run_in_guest("layouts/two-free", &["vsched sched; echo \"status $?\""]);
    let (_, text) = &out[0];
    assert!(
        text.contains("CONFIG_SCHED_CLASS_EXT")
            && text.contains("vsched probe")
            && text.contains("status 2"),
        "{text}"
    );
}

/// Flags are checked before the kernel is (so on any host): a light window
/// too short to read a share, or one that fills the probe interval, and a
/// zero interval.
#[test]
fn refuses_light_windows_that_cannot_work() {
    for (args, needle) in [
        (&["sched", "--light-window", "5ms"][..], "at least 10ms"),
        (
            &["sched", "--light-window", "1s"][..],
            "must be shorter than --probe-interval (1s)",
        ),
        (&["sched", "--interval", "0s"][..], "greater than zero"),
    ] {
        let out = vsched(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in: {err}"
        );
    }
}

/// Ticks of niced (normal-class, nice > 0) user time per vCPU between two
/// `grep cpu /proc/stat` dumps printed after `marker`.
fn nice_ticks(text: &str, marker: &str) -> Vec<i64> {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker}: {text}"))..];
    let rows: Vec<Vec<i64>> = after
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    let n = rows.len() / 2;
    (0..n).map(|i| rows[n + i][1] - rows[i][1]).collect()
}

#[test]
fn rwc_keeps_normal_tasks_off_the_vcpu_it_hides() {
    let _guard = common::serial();
    // Three niced CPU-bound workers: their time is the "nice" column of
    // /proc/stat, apart from the probers' (not niced). First with RWC, then
    // without it as the control that shows the condition is real.
    let run = |flag: &str, marker: &str| {
        format!(
            "{}echo {marker}; grep cpu /proc/stat; \
             for i in 1 2 3; do sh -c 'renice -n 5 -p $$ >/dev/null; while :; do :; done' & done; \
             sleep 5; grep cpu /proc/stat; kill %2 %3 %4; kill $s; wait; cat /tmp/{marker}.json",
            load_and_wait_for_model(flag, marker)
        )
    };
    let out = run_in_guest(
        "sched/stacked-pair",
        &[&run("", "with-rwc"), &run("--no-rwc", "without-rwc")],
    );
    let (_, with) = &out[0];
    let json = &with[with.find("\n{").unwrap_or_else(|| panic!("{with}"))..];
    let summary: Value = serde_json::from_str(json).unwrap();
    assert_model_came(&summary, with);
    let hidden = hidden_vcpus(&summary);
    assert!(
        hidden == [1] || hidden == [2],
        "RWC hides one vCPU of the stacked pair 1-2, nothing else: {hidden:?}\n{with}"
    );
    // The stacking reaches the model as each vCPU's mates, listed; the
    // summary names the probers' default rhythm and light window.
    let mates: Vec<Value> = summary["model"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["stack_mates"].clone())
        .collect();
    assert_eq!(
        mates,
        [
            serde_json::json!([]),
            serde_json::json!([2]),
            serde_json::json!([1])
        ],
        "{with}"
    );
    assert_eq!(summary["tunables"]["probe_interval_ns"], 1_000_000_000u64);
    assert_eq!(summary["tunables"]["light_window_ns"], 100_000_000u64);
    let ticks = nice_ticks(with, "with-rwc");
    let hidden_cpu = hidden[0];
    let busiest = *ticks.iter().max().unwrap();
    assert!(
        busiest > 100,
        "the workers ran (ticks per vCPU {ticks:?}): {with}"
    );
    assert!(
        ticks[hidden_cpu] * 20 <= busiest,
        "vCPU {hidden_cpu} is hidden, yet normal tasks ran there: ticks {ticks:?}\n{with}"
    );
    let (_, without) = &out[1];
    let control = nice_ticks(without, "without-rwc");
    assert!(
        control[hidden_cpu] * 20 > *control.iter().max().unwrap(),
        "control: without RWC the workers do use vCPU {hidden_cpu}: ticks {control:?}\n{without}"
    );
}

/// Regression: a task bound to the vCPU RWC hides had its slice end every
/// 3 ms (the tick renewed slices on visible vCPUs only), and at each end
/// dispatch handed the vCPU to the SCHED_IDLE work waiting there: a
/// CPU-bound loop bound to the hidden vCPU got 0.50 of it and a
/// SCHED_IDLE spinner beside it the other half (7.2.13), where the
/// kernel's default gives such work a weight of 3 against 1024. A loop
/// and a spinner are bound to each vCPU of the stacked pair; the loop on
/// the hidden one must get most of its vCPU's time.
#[test]
fn a_task_bound_to_the_hidden_vcpu_is_not_sliced_for_sched_idle_work() {
    let _guard = common::serial();
    let cmd = format!(
        "{load}taskset -c 1 schedbench idle 1 40 & i1=$!; taskset -c 2 schedbench idle 1 40 & i2=$!; \
         taskset -c 1 sh -c 'while :; do :; done' & l1=$!; \
         taskset -c 2 sh -c 'while :; do :; done' & l2=$!; \
         sleep 2; read t0 _ < /proc/uptime; a1=$(cut -d' ' -f1 /proc/$l1/schedstat); a2=$(cut -d' ' -f1 /proc/$l2/schedstat); \
         sleep 5; read t1 _ < /proc/uptime; \
         echo \"@ran 1 $t0 $t1 $a1 $(cut -d' ' -f1 /proc/$l1/schedstat)\"; \
         echo \"@ran 2 $t0 $t1 $a2 $(cut -d' ' -f1 /proc/$l2/schedstat)\"; \
         kill $l1 $l2 $i1 $i2; kill $s; wait $s; echo summary; cat /tmp/sliced.json",
        load = load_and_wait_for_model("--probe-interval 60s", "sliced"),
    );
    let guest = layout_with_schedbench("sched/stacked-pair");
    let out = run_in_guest(&guest, &[&cmd]);
    let (_, text) = &out[0];
    let summary = summary_after(text, "summary");
    assert_model_came(&summary, text);
    let hidden = hidden_vcpus(&summary);
    assert!(
        hidden == [1] || hidden == [2],
        "RWC hides one vCPU of the stacked pair: {hidden:?}\n{text}"
    );
    // "@ran CPU T0 T1 NS0 NS1": the loop's run time over the window's
    // wall time, both by the guest's clock.
    let share = |cpu: usize| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("@ran {cpu} ")))
            .unwrap_or_else(|| panic!("no run time for vCPU {cpu}: {text}"));
        let f: Vec<f64> = line
            .split_whitespace()
            .skip(2)
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{line}")))
            .collect();
        let [t0, t1, ns0, ns1] = f[..] else {
            panic!("{line}")
        };
        (ns1 - ns0) / 1e9 / (t1 - t0)
    };
    let on_hidden = share(hidden[0]);
    assert!(
        on_hidden >= BOUND_TO_HIDDEN_MIN_SHARE,
        "the loop bound to hidden vCPU {} got {on_hidden:.2} of it (the other loop {:.2}): {text}",
        hidden[0],
        share(3 - hidden[0])
    );
}

/// The least share of its vCPU the loop bound to the hidden vCPU must get:
/// with the bug 0.50 (the spinner beside it took the rest); the spinner's
/// due is idle cycles and one starvation-guard slice a second.
const BOUND_TO_HIDDEN_MIN_SHARE: f64 = 0.8;

/// `vsched bench sched` end to end, one round of one scenario: every
/// variant ran and gave a time. Times are not asserted here (a shared
/// machine makes single runs meaningless); docs/benchmarks.md has the
/// medians of full runs.
#[test]
fn bench_sched_runs_every_variant_of_a_scenario() {
    let _guard = common::serial();
    let out = vsched(&["bench", "sched", "--only", "rwc", "--rounds", "1", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    let variants: Vec<(&str, f64)> = r[0]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["variant"].as_str().unwrap(),
                v["median"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
    assert_eq!(
        names,
        ["default", "vsched", "vsched --no-rwc", "oracle"],
        "{stdout}"
    );
    assert!(
        variants.iter().all(|v| v.1.is_finite() && v.1 > 0.0),
        "every variant has a time: {stdout}\n{stderr}"
    );
    assert!(
        r[0]["last_vsched_summary"]["model"]
            .as_array()
            .is_some_and(|m| m.len() == 4),
        "the vsched runs reported their model: {stdout}"
    );
}

/// `vsched bench sync --guest` end to end, one guest, one case: every
/// scheduler and runtime pairing ran at 1x and 4x, the runtime was loaded
/// where it should be, and the lab flags are refused without --guest.
/// Times are not asserted (docs/benchmarks.md has the medians).
#[test]
fn bench_sync_in_a_guest_runs_each_pairing() {
    let _guard = common::serial();
    let out = vsched(&[
        "bench",
        "sync",
        "--guest",
        "--runs",
        "1",
        "--only",
        "cond-broadcast",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["schema"], "vsched.bench-sync-sched/v1", "{stdout}");
    assert_eq!(r["problems"].as_array().map(Vec::len), Some(0), "{stdout}");
    let runs = r["runs"].as_array().unwrap();
    let mut pairings: Vec<String> = runs
        .iter()
        .map(|run| format!("{} {} {}", run["scheduler"], run["runtime"], run["threads"]))
        .collect();
    pairings.sort();
    pairings.dedup();
    assert_eq!(
        pairings.len(),
        10,
        "2 thread counts x (2 runtimes under the default, 3 under vsched's): {pairings:?}"
    );
    assert!(
        runs.iter()
            .all(|run| run["ns_per_op"].as_f64().is_some_and(|v| v > 0.0)),
        "{stdout}"
    );
    let rows = r["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|row| row["together"].as_f64().is_some_and(|v| v > 0.0)),
        "{stdout}"
    );
    let refused = vsched(&["bench", "sync", "--kernel-version", "7.2.13"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("need --guest"),
        "{err}"
    );
}

/// Share of requests (%) whose service began on vCPU 0, from the request
/// server's line printed after `marker`.
fn on_cpu0_pct(text: &str, marker: &str) -> f64 {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker}: {text}"))..];
    after
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f.iter().position(|&k| k == "on_cpu0_pct")?;
            f.get(i + 1)?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no request server result after {marker}: {text}"))
}

/// BVS in the layout where vCPU 0's inactive episodes are 1 ms and vCPU
/// 1's 3 ms (host loads): the probe marks only vCPU 0 low-latency, and a
/// lightly loaded request server (one 100 us request every 3 ms on
/// average, so that vCPU 0 is usually free) is served there. The control
/// without BVS shows the condition is real: its workers stay where they
/// last ran, on either vCPU.
/// With BVS, at least this share of requests start on vCPU 0 (more than
/// half: BVS prefers it)...
///
/// Measured: before BVS judged tasks by their share of short runs
/// (policy.h, vs_short_share), 79% with BVS against 52% without on the
/// development machine, but 47-48% against 49-54% in CI, where a slower
/// host made the requests' average run read as long; after it, 93%
/// against 50% here, and 85.5% against 51% with requests 2.5x longer
/// (the slow host's case). CI later read 46-63% against 40-61% in three
/// guests, this machine 78-90% against 26-46%; since a run's inactive
/// part is taken out (policy.h, vs_active_run), 87% against 77.6% before
/// (medians of four guests here).
const BVS_MIN_SHARE_PCT: f64 = 65.0;
/// ...and this many points more than without it.
const BVS_MIN_CONTRAST_PCT: f64 = 15.0;
/// Wake-ups BVS must have placed: a quarter of the server's 1500 requests.
const BVS_MIN_PLACED: u64 = 1500 / 4;
/// Guests the effect, and the model it rests on, are judged over (the
/// best one counts). The model is not required in every guest: in one
/// (a clean-clone suite run on 2026-11-27, on a host noisy enough
/// that vCPU 0 read 20% available against its 50% cap) the probers'
/// final model marked vCPU 1 (3 ms episodes) low-latency and vCPU 0 not
/// (docs/sched.md, known weaknesses)...
const BVS_ATTEMPTS: usize = 3;
/// ...and of them, the guests that must show the effect: two. One did not
/// discriminate: without BVS a run's share of requests on vCPU 0 follows
/// where the few workers happened to settle, and in 12 runs without BVS
/// on 6.16.12 (2026-12-01) it read 22.9-70.2% (median 49%), one guest's
/// pair 70.2% against 49.3%, which passed the criterion: the control
/// passed the best of three (a clean-clone suite). Two guests of three
/// need that luck twice.
const BVS_GUESTS_SHOWING: usize = 2;

/// The request server under `vsched sched FLAG`, its summary after `marker`.
fn bvs_run(flag: &str, marker: &str) -> String {
    format!(
        "{}echo {marker}; schedbench server 4 1500 100 3000; kill $s; wait; \
         cat /tmp/{marker}.json",
        load_and_wait_for_model(flag, marker)
    )
}

/// Each vCPU's available share (permille) and typical inactive episode
/// (µs) in the summary's last model: what the layout made of the vCPUs.
fn availability(summary: &Value) -> Vec<(u64, u64)> {
    summary["model"]
        .as_array()
        .unwrap_or_else(|| panic!("a model in {summary:#}"))
        .iter()
        .map(|m| {
            (
                m["available_permille"].as_u64().unwrap_or(0),
                m["episode_mean_us"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Which vCPUs the summary's last model marks low-latency.
fn low_latency_vcpus(summary: &Value) -> Vec<bool> {
    summary["model"]
        .as_array()
        .unwrap_or_else(|| panic!("a model in {summary:#}"))
        .iter()
        .map(|m| m["low_latency"] == true)
        .collect()
}

/// What one guest must show for BVS's effect: the model marks only vCPU 0
/// low-latency, at least BVS_MIN_SHARE_PCT of requests start there, and
/// BVS_MIN_CONTRAST_PCT points more than in the control run.
fn bvs_effect_shown(low: &[bool], share: f64, control: f64) -> bool {
    low == [true, false] && share >= BVS_MIN_SHARE_PCT && control < share - BVS_MIN_CONTRAST_PCT
}

/// The host's steal while a guest ran, for the statistical tests' lines
/// (common::lab::run_in_guest_with_steal): a miss beside high steal reads
/// differently from one on a quiet host.
fn steal_text(steal: Option<f64>) -> String {
    match steal {
        Some(pct) => format!("host steal up to {pct:.1}% of a host CPU"),
        None => "host steal not sampled".to_string(),
    }
}

#[test]
fn bvs_serves_latency_sensitive_requests_from_the_low_latency_vcpu() {
    let _guard = common::serial();
    let guest = layout_with_schedbench("sched/bench-bvs");
    let mut showing = 0;
    for attempt in 1..=BVS_ATTEMPTS {
        let (out, steal) = run_in_guest_with_steal(
            &guest,
            &[
                &bvs_run("", "with-bvs"),
                &bvs_run("--no-bvs", "without-bvs"),
            ],
        );
        let steal = steal_text(steal);
        let (_, with) = &out[0];
        let (_, without) = &out[1];
        let summary = summary_after(with, "with-bvs");
        assert_model_came(&summary, with);
        // What must hold in every attempt: BVS deciding, and no BVS
        // decision without BVS.
        let placed = counter(&summary, "bvs_idle")
            + counter(&summary, "bvs_idle_policy")
            + counter(&summary, "bvs_behind_short");
        // A fresh machine's suite run read 437 (the other wake-ups found
        // vCPU 0 busy or switched off): the bound catches BVS deciding
        // nothing, not a host that is busier than usual.
        assert!(
            placed >= BVS_MIN_PLACED,
            "BVS placed at least a quarter of the workers' wake-ups: {summary:#}"
        );
        let off = summary_after(without, "without-bvs");
        assert_eq!(
            counter(&off, "bvs_idle") + counter(&off, "bvs_behind_short"),
            0
        );
        // The model and the effect, which host noise moves (see
        // BVS_MIN_SHARE_PCT and BVS_ATTEMPTS): judged over BVS_ATTEMPTS
        // guests, BVS_GUESTS_SHOWING of which must show it, every miss
        // noted.
        let low = low_latency_vcpus(&summary);
        let share = on_cpu0_pct(with, "with-bvs");
        let control = on_cpu0_pct(without, "without-bvs");
        // Visible with --nocapture: the contrast this guest showed.
        println!(
            "bvs attempt {attempt}: {share}% of requests on vCPU 0 with BVS, {control}% without; \
             low-latency at the end: {low:?}; (available permille, mean episode us): {:?}; \
             {steal}",
            availability(&summary)
        );
        if bvs_effect_shown(&low, share, control) {
            showing += 1;
            if showing == BVS_GUESTS_SHOWING {
                return;
            }
            continue;
        }
        let miss = format!(
            "attempt {attempt} of {BVS_ATTEMPTS}: {share}% of requests on vCPU 0 with BVS, \
             {control}% without; low-latency vCPUs at the end {low:?} (only vCPU 0, with \
             1 ms episodes, should be); {steal}"
        );
        common::note("bvs_serves_latency_sensitive_requests", &miss);
        // The guests left cannot make up the number: fail now.
        assert!(
            showing + (BVS_ATTEMPTS - attempt) >= BVS_GUESTS_SHOWING,
            "with BVS most requests are served on vCPU 0, and clearly more than without, \
             in {BVS_GUESTS_SHOWING} guests of {BVS_ATTEMPTS}: {miss}\n{with}\n{without}"
        );
    }
    unreachable!("the loop returns or fails");
}

/// The control of the test above: the same procedure (BVS_ATTEMPTS
/// guests, BVS_GUESTS_SHOWING of which must show the effect) with BVS off
/// in both runs must not pass, or its thresholds would not tell BVS from
/// noise.
#[test]
fn bvs_test_procedure_fails_with_bvs_off() {
    let _guard = common::serial();
    let guest = layout_with_schedbench("sched/bench-bvs");
    let mut showing = 0;
    for attempt in 1..=BVS_ATTEMPTS {
        let (out, steal) = run_in_guest_with_steal(
            &guest,
            &[&bvs_run("--no-bvs", "a"), &bvs_run("--no-bvs", "b")],
        );
        let steal = steal_text(steal);
        let (_, a) = &out[0];
        let (_, b) = &out[1];
        let summary = summary_after(a, "a");
        assert_model_came(&summary, a);
        let low = low_latency_vcpus(&summary);
        let (share, control) = (on_cpu0_pct(a, "a"), on_cpu0_pct(b, "b"));
        println!(
            "bvs control attempt {attempt}: {share}% and {control}% on vCPU 0, both without \
             BVS; {steal}"
        );
        if bvs_effect_shown(&low, share, control) {
            showing += 1;
        }
        assert!(
            showing < BVS_GUESTS_SHOWING,
            "without BVS the test's criterion passed in {showing} guests (attempt {attempt}: \
             {share}% against {control}%): it does not discriminate\n{a}\n{b}"
        );
        // Too few guests left to make up the number: the procedure has failed.
        if showing + (BVS_ATTEMPTS - attempt) < BVS_GUESTS_SHOWING {
            return;
        }
    }
}

/// Guests the IVH contrast is judged over (the best one counts).
const IVH_ATTEMPTS: usize = 3;

/// IVH in the layout where 4 vCPUs are each capped at 50%: one CPU-bound
/// thread (niced, so that its time is /proc/stat's nice column, apart from
/// the probers') is moved at the tick to an idle vCPU that has rested one
/// of the source's rhythms (or, where none has, off a vCPU about to be
/// throttled, to one that rested or answered the pre-wake), so its time
/// spreads over the vCPUs; no move is made or counted without IVH (the
/// control, where the thread stays on one vCPU), every move done or
/// abandoned was first attempted, and with the heartbeat's rule alone
/// (`--ivh-beats-only`) the thread still moves, none at the tick. While
/// the probers' light windows hold every other vCPU with SCHED_IDLE work,
/// the heartbeat's rule moves the thread onto those vCPUs (checked in the
/// third run, whose thread runs through at least two windows; the first
/// two keep a short thread: over seconds the control thread, pre-empted
/// by the probers, spreads too much for the contrast). RWC is off in all
/// three runs, as in the benchmark: two capped vCPUs on one host CPU look
/// stacked (docs/sched.md). The effect (`ivh_effect_shown`, and each
/// rule's moves, `ivh_moves_shown`) is judged by the best of IVH_ATTEMPTS
/// guests, every miss noted; the counters' consistency holds in every one.
#[test]
fn ivh_moves_a_cpu_bound_thread_only_to_active_idle_vcpus() {
    let _guard = common::serial();
    let run = ivh_run;
    let calibrate = ivh_calibration();
    let guest = layout_with_schedbench("sched/bench-ivh");
    for attempt in 1..=IVH_ATTEMPTS {
        let (out, steal) = run_in_guest_with_steal(
            &guest,
            &[
                &calibrate,
                &run("", "with-ivh", IVH_SHORT_THREAD_S),
                &run("--no-ivh", "without-ivh", IVH_SHORT_THREAD_S),
                // Long enough to pass through two light windows.
                &run("--ivh-beats-only", "beats-only", IVH_LONG_THREAD_S),
            ],
        );
        let out = &out[1..];
        check_ivh_counters_consistent(out);
        let (_, with) = &out[0];
        let (_, without) = &out[1];
        let (with_ivh, without_ivh) = (
            ThreadRun::parse(with, "with-ivh"),
            ThreadRun::parse(without, "without-ivh"),
        );
        // Visible with --nocapture: the contrast this guest showed.
        let contrast = format!(
            "{with_ivh} with IVH, {without_ivh} without; {}",
            steal_text(steal)
        );
        println!("ivh attempt {attempt}: {contrast}");
        let moves = ivh_moves_shown(out);
        if ivh_effect_shown(&with_ivh, &without_ivh) && moves.is_ok() {
            return;
        }
        let moves = moves.err().unwrap_or_default();
        let miss = format!("attempt {attempt} of {IVH_ATTEMPTS}: {contrast}; {moves}");
        common::note("ivh_moves_a_cpu_bound_thread", &miss);
        assert!(
            attempt < IVH_ATTEMPTS,
            "IVH runs the thread sooner and spreads its time: {miss}\n{with}\n{without}"
        );
    }
}

/// The niced CPU-bound thread under `vsched sched --no-rwc FLAG`, its work
/// for `seconds` at the speed the calibration saw, with /proc/stat before
/// and after and the summary after `marker`.
fn ivh_run(flag: &str, marker: &str, seconds: f64) -> String {
    format!(
        "work=$(awk -v s=$(cat /tmp/calibration_s) \
           'BEGIN {{ printf \"%d\", {IVH_CALIBRATION_WORK} * {seconds} / s }}'); \
         {}echo {marker} work $work; grep cpu /proc/stat; \
         sh -c \"renice -n 5 -p \\$\\$ >/dev/null; exec schedbench cpu 1 $work\"; \
         grep cpu /proc/stat; kill $s; wait; cat /tmp/{marker}.json",
        load_and_wait_for_model(&format!("--no-rwc {flag}"), marker)
    )
}

/// The calibration run: the thread's speed under the default scheduler.
fn ivh_calibration() -> String {
    format!(
        "schedbench cpu 1 {IVH_CALIBRATION_WORK} | awk '/^elapsed_s/ {{ print $2 }}' \
         > /tmp/calibration_s; echo calibration_s $(cat /tmp/calibration_s)"
    )
}

/// The niced CPU-bound thread of one `ivh_run`: how long it ran and how
/// its time spread over the vCPUs.
struct ThreadRun {
    elapsed_s: f64,
    /// The busiest vCPU's share of the thread's time (nice ticks).
    busiest_share: f64,
    ticks: Vec<i64>,
}

impl ThreadRun {
    fn parse(text: &str, marker: &str) -> ThreadRun {
        let ticks = nice_ticks(text, marker);
        let total: i64 = ticks.iter().sum();
        assert!(total > 50, "the thread ran (nice ticks {ticks:?}): {text}");
        let after_marker = &text[text.find(marker).unwrap()..];
        let elapsed_s = after_marker
            .lines()
            .find_map(|l| l.strip_prefix("elapsed_s "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{marker}: no elapsed_s line: {text}"));
        ThreadRun {
            elapsed_s,
            busiest_share: *ticks.iter().max().unwrap() as f64 / total as f64,
            ticks,
        }
    }
}

impl std::fmt::Display for ThreadRun {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{:.2} s, busiest vCPU {:.0}% ({:?})",
            self.elapsed_s,
            self.busiest_share * 100.0,
            self.ticks
        )
    }
}

/// The effect one guest must show: with IVH the thread escapes its
/// vCPU's throttled periods, so it finishes clearly sooner than without
/// (at most IVH_MAX_TIME_RATIO of that time) and its time is spread over
/// at least three vCPUs (busiest share at most IVH_MAX_BUSIEST_SHARE).
fn ivh_effect_shown(with_ivh: &ThreadRun, without_ivh: &ThreadRun) -> bool {
    with_ivh.elapsed_s <= IVH_MAX_TIME_RATIO * without_ivh.elapsed_s
        && with_ivh.busiest_share <= IVH_MAX_BUSIEST_SHARE
}

/// The control of the IVH test: its spread criterion, over IVH_ATTEMPTS
/// guests, with IVH off in both runs must not pass.
#[test]
fn ivh_test_procedure_fails_with_ivh_off() {
    let _guard = common::serial();
    let guest = layout_with_schedbench("sched/bench-ivh");
    for attempt in 1..=IVH_ATTEMPTS {
        let (out, steal) = run_in_guest_with_steal(
            &guest,
            &[
                &ivh_calibration(),
                &ivh_run("--no-ivh", "a", IVH_SHORT_THREAD_S),
                &ivh_run("--no-ivh", "b", IVH_SHORT_THREAD_S),
            ],
        );
        let (a, b) = (
            ThreadRun::parse(&out[1].1, "a"),
            ThreadRun::parse(&out[2].1, "b"),
        );
        println!(
            "ivh control attempt {attempt}: {a} and {b}, both without IVH; {}",
            steal_text(steal)
        );
        assert!(
            !ivh_effect_shown(&a, &b),
            "without IVH the test's criterion passed (attempt {attempt}: {a} against {b}): \
             it does not discriminate\n{}\n{}",
            out[1].1,
            out[2].1
        );
    }
}

/// Work of the calibration run, a thread under the default scheduler in the
/// same guest: the test threads' work is scaled to run a given time at its
/// speed. Under TCG the host's speed varied threefold between sessions, and
/// a fixed amount of work (400 million iterations) then ran 3.4 s instead of
/// about 1.2 s: long enough for the probers' heavy windows to displace the
/// control thread two to four times, spreading it as much as IVH did (its
/// busiest vCPU 37-49%).
const IVH_CALIBRATION_WORK: u64 = 100_000_000;
/// The short threads' length at the default's speed: about what 400
/// million iterations took when the contrast below was measured.
const IVH_SHORT_THREAD_S: f64 = 1.2;
/// The beats-only thread's length: through at least two light windows.
const IVH_LONG_THREAD_S: f64 = 3.6;

/// The longest the thread may take with IVH, as a share of its time
/// without: four vCPUs capped at 50% leave a thread that stays put half
/// of its vCPU, and IVH's moves to rested vCPUs ran it in 0.62-0.67 of
/// the time without (7.2.13 and 7.3.4, QEMU 10); two runs without IVH
/// in one guest differed by at most 4%.
const IVH_MAX_TIME_RATIO: f64 = 0.85;
/// The most of the thread's time its busiest vCPU may have with IVH:
/// spread over four vCPUs it is near a quarter (seen 26-37%); without
/// IVH the thread mostly stays on one or two (seen 38-99%), so this
/// bound alone would not discriminate: the time ratio above does.
const IVH_MAX_BUSIEST_SHARE: f64 = 0.45;

/// What must hold in every IVH attempt, however the guest ran: the
/// counters agree with each other, and nothing is attempted without IVH.
fn check_ivh_counters_consistent(out: &[(Option<i64>, String)]) {
    for (run, marker) in [(&out[0].1, "with-ivh"), (&out[2].1, "beats-only")] {
        let summary = summary_after(run, marker);
        assert_model_came(&summary, run);
        let done = counter(&summary, "ivh_done");
        let attempted = counter(&summary, "ivh_attempted");
        let abandoned =
            counter(&summary, "ivh_abandoned_target") + counter(&summary, "ivh_abandoned_source");
        assert!(
            counter(&summary, "migrated") >= done,
            "each move done starts the thread on another vCPU: {summary:#}"
        );
        assert!(
            done + abandoned <= attempted,
            "every move done or abandoned was attempted first: {summary:#}"
        );
        assert!(
            counter(&summary, "ivh_rested") + counter(&summary, "ivh_at_tick") <= attempted,
            "a move without the pre-wake is still an attempt: {summary:#}"
        );
    }
    let beats = summary_after(&out[2].1, "beats-only");
    assert_eq!(counter(&beats, "ivh_at_tick"), 0, "{beats:#}");
    let off = summary_after(&out[1].1, "without-ivh");
    assert_eq!(counter(&off, "ivh_attempted"), 0, "{off:#}");
}

/// Fewest moves each IVH rule must make for its run to count: in 12 of
/// 13 guests the short thread's IVH made 138-196 moves (100-160 at the
/// tick) and the beats-only thread 500-1000; the control (`--no-ivh`)
/// makes none by construction (checked above).
const IVH_MIN_MOVES: u64 = 10;

/// Whether this guest showed each IVH rule at work: the tick's moves
/// (three idle vCPUs rest while one runs the thread) mostly done, the
/// heartbeat's rule alone moving the thread, and moves onto vCPUs the
/// probers' light windows hold. Which rule reaches the thread first is a
/// race: one guest of 13 ran the tick's rule 0 times (the heartbeat's 348),
/// and a CI guest's IVH made 18 attempts in all, so a miss here is a miss
/// of the attempt, judged over IVH_ATTEMPTS guests like the contrast.
fn ivh_moves_shown(out: &[(Option<i64>, String)]) -> Result<(), String> {
    let summary = summary_after(&out[0].1, "with-ivh");
    let beats = summary_after(&out[2].1, "beats-only");
    let (done, at_tick) = (
        counter(&summary, "ivh_done"),
        counter(&summary, "ivh_at_tick"),
    );
    let beats_done = counter(&beats, "ivh_done");
    let over_idle = counter(&beats, "ivh_over_idle_policy");
    let seen = format!(
        "moves: {done} done, {at_tick} at the tick; beats only: {beats_done} done, \
         {over_idle} onto a prober's vCPU"
    );
    let shown = done >= IVH_MIN_MOVES
        && at_tick >= IVH_MIN_MOVES
        && done >= at_tick / 2
        && beats_done >= IVH_MIN_MOVES
        // Counted at the move: a target taken while the probers held every
        // other vCPU, or an idle one whose prober started while it answered.
        && over_idle >= 1;
    if shown {
        Ok(())
    } else {
        Err(seen)
    }
}
