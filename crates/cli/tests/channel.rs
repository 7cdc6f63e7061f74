//! The channel between vsched's runtime (`vsched exec`) and its scheduler
//! (`vsched sched`), in a 2-vCPU sched_ext lab guest: virtual blocking
//! acts (waiters marked by the runtime, cleared by their wakers, passed
//! over by the scheduler) only when both halves use the channel, and a
//! program under the runtime finds the scheduler loaded after it started
//! and finishes when the scheduler is unloaded under it; and the other
//! way, the switch-offs the scheduler publishes to spinlock holders. Needs what
//! tests/lab.rs needs; scripts/test.sh runs it on every kernel of the
//! sched_ext matrix.

mod common;

use common::lab::{bench_program, layout_with, run_in_guest, with_run_timeout};
use common::{summary_after, sync_library};
use serde_json::Value;

fn sched_counter(summary: &Value, name: &str) -> u64 {
    summary["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no scheduler counter {name}: {summary:#}"))
}

fn runtime_counter(stats: &Value, name: &str) -> u64 {
    stats["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no runtime counter {name}: {stats:#}"))
}

/// A condvar-broadcast token ring at 4x (8 threads on 2 vCPUs: each waiter
/// yields while the token goes round) under `vsched exec` and `vsched
/// sched`, with their statistics after markers `@NAME-sched` and
/// `@NAME-rt`.
fn ring(name: &str, sched_flags: &str, exec_flags: &str) -> String {
    format!(
        "vsched sched -q --no-probe {sched_flags} --stats-json /tmp/{name}-s.json -- \
         vsched exec {exec_flags} --stats-json /tmp/{name}-r.json -- syncbench cond-broadcast 8 4000 \
         > /dev/null; echo \"@{name}-status $?\"; \
         echo @{name}-sched; cat /tmp/{name}-s.json; echo; echo @{name}-rt; cat /tmp/{name}-r.json; echo"
    )
}

/// With both halves on, the runtime marks its yielding waiters and its
/// wakers clear the marks, and the scheduler runs other tasks of a queue
/// before marked ones. Controls, each of which must show none of it: the
/// runtime without `--channel` (its default: no marks, and the scheduler
/// passes over nothing), and the scheduler with `--no-channel` (no channel
/// is pinned: the runtime finds none and marks nothing). Then the channel's
/// lifecycle: a program started before the scheduler maps the channel
/// once it is loaded, and goes on to its end when the scheduler is
/// unloaded under it; the pin is gone after the scheduler exits.
#[test]
fn waiters_marked_by_the_runtime_are_passed_over_by_the_scheduler_only_with_both_halves() {
    let _guard = common::serial();
    // Its commands took 95-127 s under TCG: three rings, then a ring of a
    // million operations that must outlast a load and an unload of the
    // scheduler (each waited for, up to 30 s: wait_state).
    let guest = with_run_timeout(
        &layout_with(
            "sched/two-free",
            &[bench_program("syncbench"), sync_library()],
        ),
        300,
    );
    let lib = "export VSCHED_SYNC_LIB=/bin/libvsched_sync.so; ";
    let both = format!("{lib}{}", ring("both", "", "--channel"));
    let runtime_off = format!("{lib}{}", ring("rtoff", "", ""));
    let sched_off = format!("{lib}{}", ring("schedoff", "--no-channel", "--channel"));
    // 25 s or more of ring (at least 25 us an operation under TCG), the
    // scheduler loaded 1 s in (its load takes 2-16 s) and unloaded 1 s
    // after it is.
    let lifecycle = format!(
        "{lib}vsched exec --channel --stats-json /tmp/mid-r.json -- syncbench cond-broadcast 8 1000000 > /dev/null & P=$!; \
         sleep 1; vsched sched -q --no-probe & S=$!; \
         {}; sleep 1; ls /sys/fs/bpf/vsched/channel && echo @pinned; \
         kill -0 $P && echo @running-at-unload; kill $S; wait $S; {}; wait $P; echo \"@mid-status $?\"; \
         ls /sys/fs/bpf/vsched 2>/dev/null || echo @unpinned; \
         echo @mid-rt; cat /tmp/mid-r.json; echo",
        common::lab::wait_state("enabled"),
        common::lab::wait_state("disabled"),
    );
    let out = run_in_guest(&guest, &[&both, &runtime_off, &sched_off, &lifecycle]);

    let text = &out[0].1;
    assert!(text.contains("@both-status 0"), "{text}");
    let (sched, rt) = (
        summary_after(text, "@both-sched"),
        summary_after(text, "@both-rt"),
    );
    assert!(
        runtime_counter(&rt, "marks") > 0 && runtime_counter(&rt, "marks_cleared") > 0,
        "the runtime marked its waiters and its wakers cleared the marks: {rt:#}"
    );
    assert!(
        sched_counter(&sched, "marked_dispatches") > 0
            && sched_counter(&sched, "marked_passed_over")
                >= sched_counter(&sched, "marked_dispatches"),
        "the scheduler ran unmarked tasks before marked ones: {sched:#}"
    );

    let text = &out[1].1;
    assert!(text.contains("@rtoff-status 0"), "{text}");
    let (sched, rt) = (
        summary_after(text, "@rtoff-sched"),
        summary_after(text, "@rtoff-rt"),
    );
    assert_eq!(runtime_counter(&rt, "marks"), 0, "{rt:#}");
    assert_eq!(sched_counter(&sched, "marked_dispatches"), 0, "{sched:#}");
    assert!(
        runtime_counter(&rt, "yields") > 0,
        "its waiters still yielded: {rt:#}"
    );

    let text = &out[2].1;
    assert!(text.contains("@schedoff-status 0"), "{text}");
    let (sched, rt) = (
        summary_after(text, "@schedoff-sched"),
        summary_after(text, "@schedoff-rt"),
    );
    assert_eq!(runtime_counter(&rt, "channel_attached"), 0, "{rt:#}");
    assert_eq!(runtime_counter(&rt, "marks"), 0, "{rt:#}");
    assert_eq!(sched_counter(&sched, "marked_dispatches"), 0, "{sched:#}");

    let text = &out[3].1;
    assert!(
        text.contains("@pinned"),
        "the loaded scheduler pinned its channel: {text}"
    );
    assert!(text.contains("@unpinned"), "and removed it at exit: {text}");
    assert!(
        text.contains("@running-at-unload") && text.contains("@mid-status 0"),
        "the program ran on past the unload to its end: {text}"
    );
    let rt = summary_after(text, "@mid-rt");
    assert!(
        runtime_counter(&rt, "channel_attached") >= 1 && runtime_counter(&rt, "marks") > 0,
        "a program started before the scheduler used its channel: {rt:#}"
    );
}

/// `spinlock-long` (8 threads, a critical section of tens of
/// microseconds under TCG) under `vsched exec EXEC_FLAGS --stats-json`
/// with `vsched sched SCHED_FLAGS`, the program started once the probers'
/// model says which vCPU loses time; statistics after `@NAME-sched` and
/// `@NAME-rt`.
fn capped_spinlock(name: &str, sched_flags: &str, exec_flags: &str) -> String {
    format!(
        "vsched sched -q {sched_flags} --stats-json /tmp/{name}-s.json -- sh -c \
         'sleep 8; vsched exec {exec_flags} --stats-json /tmp/{name}-r.json -- syncbench spinlock-long 8 {SPINLOCK_OPS}' \
         > /dev/null; echo \"@{name}-status $?\"; \
         echo @{name}-sched; cat /tmp/{name}-s.json; echo; echo @{name}-rt; cat /tmp/{name}-r.json; echo"
    )
}

/// Critical sections per run: about a second of the program under TCG,
/// some hundred periods of the capped vCPU's switch-offs (the benchmark,
/// bench/ispinlock.py, saw holds cut by one in every run of 8,000).
const SPINLOCK_OPS: u64 = 8000;

/// The scheduler's half of spinlock admission: while a thread of `vsched
/// exec` asks the channel for its run (statistics or admission on), the
/// scheduler publishes it (slice end, its vCPU's predicted switch-off)
/// and counts the switch-offs it sat through; the runtime checks every
/// hold against that count, so holds cut by the host are seen, and with
/// `--admission` checks every acquisition against what was published.
/// Control: the scheduler with `--no-channel` publishes nothing, and no
/// hold is observed.
#[test]
fn switch_offs_of_a_capped_vcpu_reach_spinlock_holders_only_through_the_channel() {
    let _guard = common::serial();
    let guest = layout_with(
        "sched/capped-30pct",
        &[bench_program("syncbench"), sync_library()],
    );
    let lib = "export VSCHED_SYNC_LIB=/bin/libvsched_sync.so; ";
    let counted = format!("{lib}{}", capped_spinlock("counted", "", ""));
    let admitted = format!("{lib}{}", capped_spinlock("admitted", "", "--admission"));
    let without = format!("{lib}{}", capped_spinlock("without", "--no-channel", ""));
    let out = run_in_guest(&guest, &[&counted, &admitted, &without]);

    let text = &out[0].1;
    assert!(text.contains("@counted-status 0"), "{text}");
    let (sched, rt) = (
        summary_after(text, "@counted-sched"),
        summary_after(text, "@counted-rt"),
    );
    assert_eq!(
        runtime_counter(&rt, "holds_observed"),
        SPINLOCK_OPS,
        "every hold was checked against the published switch-off count: {rt:#}"
    );
    assert!(
        sched_counter(&sched, "channel_switch_offs_seen") > 0,
        "the heartbeat saw the capped vCPU's switch-offs under a thread that asked: {sched:#}"
    );
    assert!(
        runtime_counter(&rt, "holds_switched_off") > 0,
        "some holds sat through a switch-off, and the runtime saw it: {rt:#}"
    );

    let text = &out[1].1;
    assert!(text.contains("@admitted-status 0"), "{text}");
    let (sched, rt) = (
        summary_after(text, "@admitted-sched"),
        summary_after(text, "@admitted-rt"),
    );
    assert!(
        runtime_counter(&rt, "admission_checks") >= SPINLOCK_OPS
            && runtime_counter(&rt, "holds_observed") == SPINLOCK_OPS,
        "every acquisition went through admission by the published facts: {rt:#}"
    );
    assert!(
        runtime_counter(&rt, "admission_yields") > 0
            && sched_counter(&sched, "channel_switch_offs_seen") > 0,
        "admission acted on the published slice ends (a yield before one; the \
         benchmark's runs yielded 30-86 times) while the switch-offs were published: \
         {rt:#} {sched:#}"
    );

    let text = &out[2].1;
    assert!(text.contains("@without-status 0"), "{text}");
    let rt = summary_after(text, "@without-rt");
    assert_eq!(runtime_counter(&rt, "holds_observed"), 0, "{rt:#}");
}

/// The spin zoo's test programs (the `vsched-zoo` executable) beside the
/// vsched under test, for a guest's extra binaries.
fn zoo() -> std::path::PathBuf {
    vsched_zoo::exe::beside(std::path::Path::new(env!("CARGO_BIN_EXE_vsched")))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The one-line JSON on the line after `marker`.
fn json_line_after(text: &str, marker: &str) -> Value {
    let line = text
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .unwrap_or_else(|| panic!("{marker}: {text}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}: {text}"))
}

fn detector_counter(summary: &Value, name: &str) -> u64 {
    summary[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no detector counter {name}: {summary:#}"))
}

/// Items the spinning pipeline passes through its 8 stages (4x on 2
/// vCPUs): about 2 s under `vsched run --spin-detect` in a TCG guest.
const PIPELINE_ITEMS: u64 = 300;

/// A spinning pipeline at 4x under `vsched run --spin-detect DETECT_FLAGS`
/// and `vsched sched SCHED_FLAGS`: the program's own line after
/// `@NAME-out`, the scheduler's statistics after `@NAME-sched`, the
/// detector's summary after `@NAME-detector`.
fn spinning_pipeline(name: &str, sched_flags: &str, detect_flags: &str) -> String {
    format!(
        "vsched sched -q --no-probe {sched_flags} --stats-json /tmp/{name}-s.json -- \
         vsched run --spin-detect {detect_flags} --summary-out /tmp/{name}-d.json -- \
         vsched-zoo pipeline --stages 8 --items {PIPELINE_ITEMS} > /tmp/{name}-out; \
         echo \"@{name}-status $?\"; echo @{name}-out; cat /tmp/{name}-out; \
         echo @{name}-sched; cat /tmp/{name}-s.json; echo; \
         echo @{name}-detector; cat /tmp/{name}-d.json; echo"
    )
}

/// Spinner descheduling in the scheduler: with `vsched sched` loaded, the
/// detector hands every spinner it finds to the scheduler (marks it in the
/// channel and nudges it: a restart in place) instead of stopping or
/// demoting it; the
/// scheduler ends the marked spinner's slice, passes over it for the other
/// tasks of its queue, and clears the mark when it runs it again. The
/// pipeline passes all its items. Controls, each of which must show none
/// of it and the detector holding spinners itself: the detector with
/// `--no-channel`, and the scheduler with `--no-channel` (nothing pinned:
/// the detector finds no channel). Then the scheduler unloaded under a
/// running detector: the detector falls back to its own holds, and the
/// program goes on to its end.
#[test]
fn spinners_found_by_the_detector_are_descheduled_by_the_scheduler_through_the_channel() {
    let _guard = common::serial();
    let guest = layout_with("sched/two-free", &[zoo()]);
    let both = spinning_pipeline("both", "", "");
    let detector_off = spinning_pipeline("detoff", "", "--no-channel");
    let sched_off = spinning_pipeline("schedoff", "--no-channel", "");
    // About 20 s of pipeline; the scheduler unloaded 4 s after it starts.
    let unload = format!(
        "vsched sched -q --no-probe & S=$!; {}; \
         vsched run --spin-detect --summary-out /tmp/mid-d.json -- \
         vsched-zoo pipeline --stages 8 --items 3000 > /tmp/mid-out & P=$!; \
         sleep 4; kill -0 $P && echo @running-at-unload; kill $S; wait $S; {}; \
         wait $P; echo \"@mid-status $?\"; echo @mid-out; cat /tmp/mid-out; \
         echo @mid-detector; cat /tmp/mid-d.json; echo",
        common::lab::wait_state("enabled"),
        common::lab::wait_state("disabled"),
    );
    let out = run_in_guest(&guest, &[&both, &detector_off, &sched_off, &unload]);

    let text = &out[0].1;
    assert!(text.contains("@both-status 0"), "{text}");
    let program = json_line_after(text, "@both-out");
    assert_eq!(program["units"], PIPELINE_ITEMS, "{program}");
    let (sched, detector) = (
        summary_after(text, "@both-sched"),
        json_line_after(text, "@both-detector"),
    );
    let marks = detector_counter(&detector, "channel_marks");
    assert!(
        marks > 0 && detector_counter(&detector, "nudges") > 0,
        "the detector handed spinners to the scheduler: {detector:#}"
    );
    assert_eq!(
        detector_counter(&detector, "demotions"),
        0,
        "and held none itself: {detector:#}"
    );
    assert!(
        sched_counter(&sched, "spinners_kicked") > 0
            && sched_counter(&sched, "spinners_passed_over") > 0,
        "the scheduler took marked spinners off their vCPUs and ran other tasks first: {sched:#}"
    );
    assert!(
        sched_counter(&sched, "restarts_in_place") > 0,
        "the nudges stopped and restarted running spinners in place, and the \
         scheduler did not take that for a sleep: {sched:#}"
    );
    let served = sched_counter(&sched, "spin_marks_served");
    assert!(
        served > 0 && served <= marks,
        "and cleared marks itself when it ran their threads again ({served} of {marks}): {sched:#}"
    );

    for name in ["detoff", "schedoff"] {
        let text = &out[if name == "detoff" { 1 } else { 2 }].1;
        assert!(text.contains(&format!("@{name}-status 0")), "{text}");
        let program = json_line_after(text, &format!("@{name}-out"));
        assert_eq!(program["units"], PIPELINE_ITEMS, "{program}");
        let (sched, detector) = (
            summary_after(text, &format!("@{name}-sched")),
            json_line_after(text, &format!("@{name}-detector")),
        );
        assert_eq!(
            detector_counter(&detector, "channel_marks"),
            0,
            "{detector:#}"
        );
        assert!(
            detector_counter(&detector, "demotions") > 0,
            "{name}: the detector held spinners itself: {detector:#}"
        );
        for counter in [
            "spinners_kicked",
            "spinners_passed_over",
            "spin_marks_served",
        ] {
            assert_eq!(sched_counter(&sched, counter), 0, "{name}: {sched:#}");
        }
    }

    let text = &out[3].1;
    assert!(
        text.contains("@running-at-unload") && text.contains("@mid-status 0"),
        "the program ran on past the unload to its end: {text}"
    );
    let program = json_line_after(text, "@mid-out");
    assert_eq!(program["units"], 3000, "{program}");
    let detector = json_line_after(text, "@mid-detector");
    assert!(
        detector_counter(&detector, "channel_marks") > 0
            && detector_counter(&detector, "demotions") > 0,
        "spinners went to the scheduler while it ran, and were held by the detector after: {detector:#}"
    );
}
