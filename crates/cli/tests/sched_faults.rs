//! `vsched sched` (and `vsched daemon --sched`) under the faults a cloud
//! VM sees, in lab guests with sched_ext: vCPUs going offline and online
//! (a resize), a vCPU stopped
//! outright for seconds (a live migration's stop, a long steal), a BPF
//! runtime error, and a storm of forks, cgroups, real-time and pinned
//! tasks beside it. Each ends with every workload finished and the
//! scheduler either still loaded or ejected with its reason. (The loader
//! killed with SIGKILL is in sched.rs.) Needs what the lab needs.

mod common;

use common::lab::{
    bench_program, blocking_program, hidden_vcpus, json_on_line, layout_with,
    layout_with_schedbench, run_in_guest, timeline_rates, wait_state,
};

/// The lines of `text` that start with `prefix`.
fn lines_with<'a>(text: &'a str, prefix: &'a str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// A shell loop busy for `seconds` by the guest's clock, printing "NAME done N".
fn busy(name: &str, seconds: u32) -> String {
    format!(
        "sh -c 'read u _ < /proc/uptime; end=$(( ${{u%.*}} + {seconds} )); n=0; \
         while read u _ < /proc/uptime; [ ${{u%.*}} -lt $end ]; do n=$((n+1)); done; echo \"{name} done $n\"'"
    )
}

/// A resize takes vCPUs offline and brings them back; the kernel ejects a
/// scheduler at each such event and asks for it again. vsched loads itself
/// again, the task pinned to the vCPU that left and the free one finish,
/// and vsched is loaded at the end. The vCPUs offlined are the stacked
/// pair's, one of them hidden by RWC.
#[test]
fn reloads_itself_while_vcpus_go_offline_and_come_back() {
    let _guard = common::serial();
    let cmd = format!(
        "vsched sched -q 2>/tmp/s.log & S=$!; {enabled}; sleep 3; \
         taskset -c 1 {pinned} & P=$!; {free} & F=$!; \
         for c in 2 1; do echo 0 > /sys/devices/system/cpu/cpu$c/online && echo \"@offline $c\"; sleep 1; done; \
         for c in 1 2; do echo 1 > /sys/devices/system/cpu/cpu$c/online && echo \"@online $c\"; sleep 1; done; \
         wait $P; echo \"@pinned exit $?\"; wait $F; echo \"@free exit $?\"; \
         for i in $(seq 300); do grep -qx enabled /sys/kernel/sched_ext/state && break; sleep 0.1; done; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; cat /tmp/s.log",
        enabled = wait_state("enabled"),
        pinned = busy("pinned", 8),
        free = busy("free", 8),
    );
    let out = run_in_guest("sched/stacked-pair", &[&cmd]);
    let (_, text) = &out[0];
    assert_eq!(
        lines_with(text, "@offline ").len() + lines_with(text, "@online ").len(),
        4,
        "both vCPUs went offline and came back: {text}"
    );
    assert!(
        text.contains("pinned done") && text.contains("@pinned exit 0"),
        "the task pinned to the vCPU that left finished: {text}"
    );
    assert!(
        text.contains("free done") && text.contains("@free exit 0"),
        "{text}"
    );
    assert!(
        text.contains("loaded it again"),
        "the kernel's hotplug ejection was followed by a reload: {text}"
    );
    assert!(text.contains("@state enabled"), "loaded at the end: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
}

/// A resize while consolidation has narrowed the set (`--consolidate`):
/// the blocking program (common::lab::blocking_program: two threads that
/// meet at a barrier after a little work, 24 s) runs on the vCPUs
/// consolidation leaves it while the stacked pair's vCPUs go offline one
/// at a time and come back. Each hot-plug event ejects the scheduler and
/// vsched loads itself again, so instances load with a vCPU offline and
/// consolidate around it. The program must make progress in every second
/// (none stranded on a vCPU that is gone or parked), consolidation must
/// have parked a vCPU, and vsched must be loaded at the end. Before
/// queue.bpf.h's normal_tasks_wait_for, BVS stalled this program at once
/// (1 run of 1); with it but without consolidation's check that a vCPU is
/// online, one guest of 8 hung after the second vCPU went offline; with
/// both, 10 of 10 passed (7.2.13).
#[test]
fn consolidation_survives_vcpus_going_offline_and_coming_back() {
    let _guard = common::serial();
    let layout = layout_with_schedbench("sched/stacked-pair");
    let cmd = format!(
        "vsched sched -q --consolidate --stats-json /tmp/c.json 2>/tmp/s.log & S=$!; {enabled}; \
         {program} > /tmp/t.out & B=$!; sleep 6; \
         for c in 2 1; do echo 0 > /sys/devices/system/cpu/cpu$c/online && echo \"@offline $c\"; sleep 3; done; \
         for c in 1 2; do echo 1 > /sys/devices/system/cpu/cpu$c/online && echo \"@online $c\"; sleep 3; done; \
         wait $B; echo \"@program exit $?\"; echo \"@timeline $(cat /tmp/t.out)\"; \
         for i in $(seq 300); do grep -qx enabled /sys/kernel/sched_ext/state && break; sleep 0.1; done; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; \
         echo \"@summary $(tr -d '\\n' < /tmp/c.json)\"; cat /tmp/s.log",
        enabled = wait_state("enabled"),
        program = blocking_program(24),
    );
    let out = run_in_guest(&layout, &[&cmd]);
    let (_, text) = &out[0];
    assert_eq!(
        lines_with(text, "@offline ").len() + lines_with(text, "@online ").len(),
        4,
        "both vCPUs went offline and came back: {text}"
    );
    assert!(text.contains("@program exit 0"), "{text}");
    // None may be zero: a program stranded on vCPUs that are gone or
    // parked.
    let rates = timeline_rates(text);
    println!("rounds per second: {rates:?}");
    assert_eq!(rates.len(), 24, "a rate for each second: {text}");
    assert!(
        rates.iter().all(|&r| r > 0.0),
        "the program made progress in every second: {rates:?} {text}"
    );
    assert!(
        text.contains("loaded it again"),
        "the kernel's hotplug ejection was followed by a reload: {text}"
    );
    let summary = json_on_line(text, "@summary ");
    let count = |name: &str| summary["counters"][name].as_u64().unwrap_or(0);
    println!(
        "restarts {}, parked {}, unparked {}, trials undone {}, bvs behind short {}, local wake-ups {}",
        summary["restarts"],
        count("parked"),
        count("unparked"),
        count("trials_undone"),
        count("bvs_behind_short"),
        count("wake_sync")
    );
    let parked = count("parked");
    assert!(parked >= 1, "consolidation narrowed the set: {summary:#}");
    assert!(text.contains("@state enabled"), "loaded at the end: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
}

/// The probers go on measuring pairs of vCPUs that went offline: the
/// scheduler's probe session keeps the vCPUs it started with, and `probe
/// --watch` validates its last topology. Both threads of such a pair are
/// refused their pins and run at SCHED_FIFO 1 wherever they are, here on
/// vCPU 0, the only one left. A responder that got vCPU 0 first waited
/// for its initiator for ever, and FIFO never let the initiator run: the
/// guest hung, and even unloading the scheduler waited (its
/// bpf_struct_ops_map_free waits for an RCU-tasks grace period, which
/// waits for the spinner's voluntary switch). With vCPUs 1 and 2 offline
/// for 4 s under topology checks every 100 ms, 5 of 5 guests hung before
/// the fix (the layout's kernel, Debian 12's 6.1; CI saw the same spinner
/// hang a 7.2.13 guest under `vsched sched`). Now a void pair does not
/// spin, and a responder gives up after its initiator's window (vtop.rs).
#[test]
fn probing_pairs_of_vcpus_gone_offline_does_not_hang_the_guest() {
    let _guard = common::serial();
    let cmd = "vsched probe --watch --only topology --interval 200ms --topology-every 100ms --json \
               > /tmp/p.json 2>/tmp/p.log & P=$!; sleep 4; \
               echo 0 > /sys/devices/system/cpu/cpu2/online; echo 0 > /sys/devices/system/cpu/cpu1/online; \
               echo @offline; sleep 4; kill -INT $P; wait $P; echo \"@exit $?\"; \
               echo \"@reports $(wc -l < /tmp/p.json)\"; cat /tmp/p.log";
    let out = run_in_guest("layouts/stacked-pair", &[cmd]);
    let (_, text) = &out[0];
    assert!(text.contains("@offline"), "{text}");
    assert!(
        text.contains("@exit 0"),
        "the probe ended on Ctrl-C: {text}"
    );
    let reports: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("@reports "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    // A report per 200 ms for 8 s is 40 (as many came in the lab); a
    // probe stuck behind its own spinner stops at the offlining, after
    // some 20. 30 tells the two apart with room for a slow emulator.
    assert!(
        reports >= 30,
        "reports went on while vCPUs were offline: {text}"
    );
}

/// `vsched daemon --sched` reloads its scheduler the same way.
#[test]
fn the_daemon_reloads_its_scheduler_after_a_vcpu_goes_offline() {
    let _guard = common::serial();
    // Loaded before the hot-plug, or the test is void: a scheduler loaded
    // after it is never ejected by it (seen once on 6.16.12, where the
    // 10 s wait for "enabled" ran out first).
    let cmd = format!(
        "vsched daemon --sched 2>/tmp/d.log & D=$!; \
         for i in $(seq {DAEMON_LOAD_WAIT_TENTHS}); do grep -q 'scheduler loaded' /tmp/d.log && grep -qx enabled /sys/kernel/sched_ext/state && break; sleep 0.1; done; \
         grep -q 'scheduler loaded' /tmp/d.log && echo @loaded-before-hotplug; sleep 2; \
         echo 0 > /sys/devices/system/cpu/cpu2/online; sleep 1; echo 1 > /sys/devices/system/cpu/cpu2/online; \
         for i in $(seq 300); do grep -q 'restart' /tmp/d.log && grep -qx enabled /sys/kernel/sched_ext/state && break; sleep 0.1; done; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; \
         kill -TERM $D; wait $D; echo \"@exit $?\"; cat /tmp/d.log",
    );
    let out = run_in_guest("sched/stacked-pair", &[&cmd]);
    let (_, text) = &out[0];
    assert!(
        text.contains("@loaded-before-hotplug"),
        "the daemon loaded its scheduler before the vCPU went offline: {text}"
    );
    assert!(text.contains("loaded it again"), "reloaded: {text}");
    assert!(text.contains("@state enabled"), "loaded again: {text}");
    assert!(text.contains("@exit 0"), "{text}");
}

/// How long, in tenths of a second, the daemon's test waits for its
/// scheduler to load: a load under the emulator takes 2-19 s (docs/
/// sched.md, the verifier), and a busy suite's guests are slower.
const DAEMON_LOAD_WAIT_TENTHS: u32 = 600;

/// Regression: a vCPU offline when the scheduler loads (a VM resized down
/// before vsched started, or an instance loaded again after a vCPU left).
/// A task's allowed CPUs keep offline ones, and the scheduler took every
/// vCPU it was not told to hide as visible: a waking task could be queued
/// for the offline vCPU, which never dispatches, while the online one kept
/// renewing its running task's slice, since nothing waited in its own
/// queue. `SHARERS` CPU-bound tasks on the one online vCPU of a 2-vCPU
/// guest, all counting until the same moment, must share it.
#[test]
fn no_task_waits_for_a_vcpu_offline_when_the_scheduler_loaded() {
    let _guard = common::serial();
    let workers: Vec<String> = (0..SHARERS)
        .map(|i| {
            format!(
                "sh -c 'n=0; while read u _ < /proc/uptime; [ ${{u%.*}} -lt $end ]; do n=$((n+1)); done; echo \"task{i} counted $n\"' & P=\"$P $!\";"
            )
        })
        .collect();
    let cmd = format!(
        "echo 0 > /sys/devices/system/cpu/cpu1/online && echo @offline; \
         vsched sched -q 2>/tmp/s.log & S=$!; {enabled}; \
         read u _ < /proc/uptime; export end=$(( ${{u%.*}} + {SHARE_S} )); \
         {workers} wait $P; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; cat /tmp/s.log",
        enabled = wait_state("enabled"),
        workers = workers.join(" "),
    );
    let out = run_in_guest("sched/two-free", &[&cmd]);
    let (_, text) = &out[0];
    assert!(text.contains("@offline"), "vCPU 1 went offline: {text}");
    let counts: Vec<u64> = (0..SHARERS)
        .map(|i| {
            let prefix = format!("task{i} counted ");
            lines_with(text, &prefix)
                .first()
                .and_then(|l| l[prefix.len()..].trim().parse().ok())
                .unwrap_or_else(|| panic!("no count of task {i}: {text}"))
        })
        .collect();
    println!("the tasks counted {counts:?}");
    assert!(text.contains("@state enabled"), "still loaded: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
    // Sharing one vCPU, each gets about its share; a task queued for the
    // offline vCPU ran only once the others had stopped, and counted
    // nothing.
    let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(
        least * 4 >= *most,
        "every task ran on the online vCPU (counts {counts:?}): {text}"
    );
}

/// Tasks sharing the online vCPU.
const SHARERS: usize = 4;

/// How long the tasks share the online vCPU: many slices (3 ms each),
/// short beside sched_ext's 30 s watchdog, which a task queued for the
/// offline vCPU would otherwise also trip.
const SHARE_S: u32 = 8;

/// lab/sched/frozen-vcpu.toml stops vCPU 1's host thread for 8 s, 14 s
/// into the run. Four CPU-bound tasks run through it and finish, a task
/// pinned to vCPU 1 sees the gap (the freeze happened), and the scheduler
/// stays loaded: sched_ext's watchdog ejects a scheduler that leaves a
/// task runnable longer than its timeout, and tasks bound to a stopped
/// vCPU wait whatever the policy does (with a 5 s timeout, this layout
/// ejected vsched: "vcap-1 failed to run for 6.0 s").
#[test]
fn stays_loaded_while_a_vcpu_is_stopped_for_seconds() {
    let _guard = common::serial();
    let workers: String = (1..=4)
        .map(|k| format!("{} & W=\"$W $!\"; ", busy(&format!("worker-{k}"), 24)))
        .collect();
    let cmd = format!(
        "vsched sched -q 2>/tmp/s.log & S=$!; {enabled}; W=''; {workers}\
         taskset -c 1 awk 'BEGIN {{ while (1) {{ getline l < \"/proc/uptime\"; close(\"/proc/uptime\"); split(l, a, \" \"); \
         t = a[1] + 0; if (p && t - p > gap) gap = t - p; p = t; if (!s) s = t; if (t - s > 24) break }}; \
         printf \"@gap on vCPU 1: %.1f s\\n\", gap }}' & G=$!; \
         for p in $W $G; do wait $p; done; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; cat /tmp/s.log",
        enabled = wait_state("enabled"),
    );
    let out = run_in_guest("sched/frozen-vcpu", &[&cmd]);
    let (_, text) = &out[0];
    let gap: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("@gap on vCPU 1: "))
        .and_then(|g| g.trim_end_matches(" s").parse().ok())
        .unwrap_or_else(|| panic!("no gap line: {text}"));
    assert!(
        gap >= 6.0,
        "vCPU 1 was stopped (longest gap {gap} s): {text}"
    );
    assert_eq!(
        lines_with(text, "worker-").len(),
        4,
        "every worker finished: {text}"
    );
    assert!(
        text.contains("@state enabled"),
        "the scheduler outlived the stop: {text}"
    );
    assert!(text.contains("@loader exit 0"), "{text}");
}

/// Regression: a long steal stops both vCPUs of the stacked pair
/// (lab/sched/stacked-pair-frozen.toml: 6 s), three SCHED_IDLE spinners
/// bound to each, so that one waits in the vCPU's queue whatever runs
/// and whatever was moved to run next (with two, 1 of 3 runs had none
/// waiting), starving after 1 s. A reader
/// bound to each vCPU is woken from vCPU 0 meanwhile (or, in runs where
/// the emulator holds the whole guest with the pair, at the thaw: the
/// SCHED_IDLE work still starves then; wake-during-stop.sh says which it
/// saw); enqueue_bound
/// queues it rather than run it over the starving work, and the one on
/// the vCPU RWC hides sat in that vCPU's normal queue, which a hidden vCPU
/// never took from and no other vCPU could: it ran only once vsched was
/// unloaded, 10-12 s after the wake-up (7.2.13; hidden_skips 990-1,327),
/// where its mate on the visible vCPU ran at the thaw, 3.5 s after it.
/// The unfixed scheduler failed this test's timing in 3 of 5 runs (in the
/// others the reader was not the task stranded); the fixed one passes,
/// and its counter shows the case was made. In CI
/// the prober bound to a vCPU being taken offline stalled so until
/// sched_ext's watchdog ejected the scheduler ("vcap-2 failed to run for
/// 43.244s"). Both readers must run once their vCPUs are back.
#[test]
fn a_task_woken_for_the_hidden_vcpu_during_a_long_steal_runs_after_it() {
    let _guard = common::serial();
    // The guest sees the stop and wakes the readers with
    // tests/guest/wake-during-stop.sh, a process of its own on vCPU 0.
    // One model, the first: RWC hides the same vCPU throughout (with a
    // model a second, one taken after the thaw may show the pair
    // unstacked and let the other vCPU take the reader: 1 of 2 runs of
    // the unfixed scheduler passed so).
    let cmd = format!(
        "read t0 _ < /proc/uptime; \
         vsched sched -q --probe-interval 60s --stats-json /tmp/m.json --ready-file /tmp/m.ready 2>/tmp/m.err & s=$!; \
         for i in $(seq 300); do [ -s /tmp/m.ready ] && break; sleep 0.1; done; \
         taskset -p -c 0 $$ >/dev/null; read t _ < /proc/uptime; echo \"@ready $t0 $t\"; \
         for c in 1 2; do taskset -c $c schedbench idle 3 90 & done; \
         for c in 1 2; do mkfifo /tmp/f$c; taskset -c $c sh -c \"read x < /tmp/f$c; read u _ < /proc/uptime; \
           echo @woke$c \\$u; while :; do :; done\" & done; \
         taskset -c 0 sh /bin/wake-during-stop.sh $t0 {STOP_AT_S}; sleep 10; echo \"@state $(cat /sys/kernel/sched_ext/state)\"; \
         kill $s; wait $s; echo summary; cat /tmp/m.json"
    );
    let layout_text = std::fs::read_to_string(common::lab::layout("sched/stacked-pair-frozen"))
        .expect("the layout");
    assert!(
        layout_text.contains(&format!("at_s = {STOP_AT_S}\n")),
        "STOP_AT_S is the layout's stop"
    );
    let watcher =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/wake-during-stop.sh");
    let guest = layout_with(
        "sched/stacked-pair-frozen",
        &[bench_program("schedbench"), watcher],
    );
    let out = run_in_guest(&guest, &[&cmd]);
    let (_, text) = &out[0];
    let times = |prefix: &str| -> Vec<f64> {
        let line = lines_with(text, prefix)
            .first()
            .copied()
            .unwrap_or_else(|| panic!("no {prefix} line: {text}"));
        line[prefix.len()..]
            .split_whitespace()
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{line}")))
            .collect()
    };
    let ready = times("@ready ");
    assert!(
        ready[1] - ready[0] < READY_BEFORE_STOP_S,
        "the scheduler was ready {:.1} s after the start, too late for the stop at 24 s: {text}",
        ready[1] - ready[0]
    );
    assert!(!text.contains("@no stop seen"), "the vCPUs stopped: {text}");
    // How the stop was seen, for a run with --nocapture.
    for line in lines_with(text, "@seen") {
        eprintln!("{line}");
    }
    let write = times("@write ")[0];
    for cpu in [1, 2] {
        let woke = times(&format!("@woke{cpu} "))[0];
        assert!(
            woke - write <= WOKEN_WITHIN_S,
            "the reader bound to vCPU {cpu} ran {:.1} s after its wake-up: {text}",
            woke - write
        );
    }
    assert!(
        text.contains("@state enabled"),
        "the scheduler stayed loaded: {text}"
    );
    let summary = common::summary_after(text, "summary");
    let hidden = hidden_vcpus(&summary);
    // The case this test makes: a vCPU of the pair hidden, so that its
    // reader waits there. vCPU 0 may be hidden beside it: a slow host
    // made the first model read it as a straggler once (6.18.15, a
    // clean-clone suite: hidden [0, 2], both readers ran 3.5 s after the
    // wake-up).
    assert!(
        hidden.contains(&1) || hidden.contains(&2),
        "RWC hid a vCPU of the pair (the case this test makes): {hidden:?}\n{text}"
    );
    assert!(
        summary["counters"]["stranded_dispatches"].as_u64().unwrap_or(0) > 0,
        "a reader was queued on the hidden vCPU and run there (else this run did not make the case): {summary:#}"
    );
}

/// When lab/sched/stacked-pair-frozen.toml stops the pair: its phase's
/// `at_s`, in seconds after the commands start.
const STOP_AT_S: u32 = 24;

/// The stop begins STOP_AT_S after the commands start; the heartbeats'
/// 2.5 s lag and a margin for the emulator's pace before it.
const READY_BEFORE_STOP_S: f64 = 18.0;

/// The wake-up comes 2.5 s or more into the 6 s stop, so the thaw is at
/// most 3.5 s later; 2.5 s more for the emulator's pace after a thaw.
/// With the bug: 10-12 s, when the scheduler was unloaded.
const WOKEN_WITHIN_S: f64 = 6.0;

/// A BPF runtime error (injected through a hidden flag): the kernel ejects
/// the scheduler, vsched says why, and the program it was started for
/// finishes under the kernel's scheduler with its own exit status.
#[test]
fn an_injected_bpf_error_ejects_with_its_reason_and_the_program_finishes() {
    let _guard = common::serial();
    // About 10 s of shell arithmetic under TCG: still running 2 s after
    // the scheduler loaded.
    let cmd = "vsched sched -q --inject-error-after 2s -- \
               sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo program done; exit 5'; \
               echo \"@status $?\"; echo \"@state $(cat /sys/kernel/sched_ext/state)\"";
    let out = run_in_guest("sched/two-free", &[cmd]);
    let (_, text) = &out[0];
    assert!(
        text.contains("program done"),
        "the program finished: {text}"
    );
    assert!(text.contains("@status 5"), "with its exit status: {text}");
    assert!(
        text.contains("injected error (vsched sched --inject-error-after)"),
        "the ejection's reason is printed: {text}"
    );
    // And the kernel's state at that moment, for the next stall's cause:
    // what each CPU ran and held queued.
    let dump = text
        .find("the kernel's scheduling state at the ejection:")
        .map(|i| &text[i..])
        .unwrap_or_else(|| panic!("no kernel dump: {text}"));
    assert!(
        dump.lines().any(|l| l.contains("  | CPU")),
        "the dump shows the CPUs: {text}"
    );
    assert!(text.contains("@state disabled"), "{text}");
}

/// Thousands of short processes, cgroups made and removed with a process
/// in each, SCHED_FIFO threads and tasks pinned to each vCPU, all beside
/// the scheduler for about 15 s: everything finishes and the scheduler is
/// still loaded.
#[test]
fn forks_cgroups_real_time_and_pinned_tasks_run_beside_it() {
    let _guard = common::serial();
    let layout = layout_with_schedbench("sched/two-free");
    let cmd = format!(
        "mount -t cgroup2 none /sys/fs/cgroup; \
         vsched sched -q 2>/tmp/s.log & S=$!; {enabled}; \
         sh -c 'i=0; while [ $i -lt 2000 ]; do /bin/true || exit 1; i=$((i+1)); done; echo \"@forks $i\"' & A=$!; \
         sh -c 'i=0; while [ $i -lt 200 ]; do d=/sys/fs/cgroup/churn$i; mkdir $d || exit 1; \
                sh -c \"echo \\$\\$ > $d/cgroup.procs && exec /bin/true\" || exit 1; rmdir $d || exit 1; i=$((i+1)); done; echo \"@cgroups $i\"' & B=$!; \
         schedbench rt 2 12 > /tmp/rt.out & C=$!; \
         taskset -c 0 {pin0} & D=$!; taskset -c 1 {pin1} & E=$!; \
         for p in $A $B $C $D $E; do wait $p || echo \"@failed $p\"; done; \
         echo \"@rt $(cat /tmp/rt.out)\"; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; kill -INT $S; wait $S; echo \"@loader exit $?\"; cat /tmp/s.log",
        enabled = wait_state("enabled"),
        pin0 = busy("pinned-0", 12),
        pin1 = busy("pinned-1", 12),
    );
    let out = run_in_guest(&layout, &[&cmd]);
    let (_, text) = &out[0];
    assert!(
        !text.contains("@failed"),
        "every workload succeeded: {text}"
    );
    assert!(text.contains("@forks 2000"), "{text}");
    assert!(text.contains("@cgroups 200"), "{text}");
    assert!(
        text.contains("@rt elapsed_s"),
        "the real-time threads ran: {text}"
    );
    assert!(
        text.contains("pinned-0 done") && text.contains("pinned-1 done"),
        "{text}"
    );
    assert!(text.contains("@state enabled"), "still loaded: {text}");
    assert!(text.contains("@loader exit 0"), "{text}");
}
