//! `vsched sched` (and `vsched daemon --sched`) under the faults a cloud
//! VM sees, in lab guests with sched_ext: vCPUs going offline and online
//! (a resize), a vCPU stopped
//! outright for seconds (a live migration's stop, a long steal), a BPF
//! runtime error, and a storm of forks, cgroups, real-time and pinned
//! tasks beside it. Each ends with every workload finished and the
//! scheduler either still loaded or ejected with its reason. (The loader
//! killed with SIGKILL is in sched.rs.) Needs what the lab needs.

mod common;

use common::lab::{layout_with_schedbench, run_in_guest, wait_state};

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

/// `vsched daemon --sched` reloads its scheduler the same way.
#[test]
fn the_daemon_reloads_its_scheduler_after_a_vcpu_goes_offline() {
    let _guard = common::serial();
    let cmd = format!(
        "vsched daemon --sched 2>/tmp/d.log & D=$!; {enabled}; sleep 2; \
         echo 0 > /sys/devices/system/cpu/cpu2/online; sleep 1; echo 1 > /sys/devices/system/cpu/cpu2/online; \
         for i in $(seq 300); do grep -q 'restart' /tmp/d.log && grep -qx enabled /sys/kernel/sched_ext/state && break; sleep 0.1; done; \
         echo \"@state $(cat /sys/kernel/sched_ext/state)\"; \
         kill -TERM $D; wait $D; echo \"@exit $?\"; cat /tmp/d.log",
        enabled = wait_state("enabled"),
    );
    let out = run_in_guest("sched/stacked-pair", &[&cmd]);
    let (_, text) = &out[0];
    assert!(text.contains("loaded it again"), "reloaded: {text}");
    assert!(text.contains("@state enabled"), "loaded again: {text}");
    assert!(text.contains("@exit 0"), "{text}");
}

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
