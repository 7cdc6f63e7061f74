//! User-space RWC (`vsched daemon --rwc-cgroup`) in a lab guest with a
//! straggler and a stacked pair (lab/daemon/rwc.toml, cgroup v2 mounted in
//! the guest): the cgroup's tasks are kept off the hidden vCPUs, and the
//! cpuset and the root's controllers are back as before after SIGTERM,
//! after SIGKILL (the watchdog), after SIGKILL of daemon and watchdog
//! (`--restore`, and the next start); the same for a cgroup v1 cpuset.
//! Bad input is refused on the host.
//! Needs what the lab needs (root, QEMU 10 or newer, busybox-static).

mod common;

use common::lab::run_in_guest;
use serde_json::Value;

/// The guest script: each step prints one "@step key=value ..." line.
const SCRIPT: &str = r#"
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir $G
cpus() { cat $G/cpuset.cpus 2>/dev/null; }
state() { echo "cpus=[$(cpus)] ctl=[$(cat /sys/fs/cgroup/cgroup.subtree_control)] files=[$(ls /run/vsched 2>/dev/null | grep -v sock)]"; }
wait_hidden() { for i in $(seq 300); do [ -n "$(cpus)" ] && return 0; sleep 0.1; done; return 1; }
wait_back() { for i in $(seq 100); do [ -z "$(cpus)" ] && return 0; sleep 0.1; done; return 1; }
# Until the straggler (vCPU 3) is hidden too: the first reports may not
# have judged it yet (two in a row must agree).
wait_settled() { for i in $(seq 300); do cpus | grep -q 3 || return 0; sleep 0.1; done; return 1; }
echo "@before $(state)"

vsched daemon --rwc-cgroup work 2>/tmp/d1.log & D=$!
wait_hidden; wait_settled
echo "@during $(state)"
sh -c "echo \$\$ > $G/cgroup.procs && exec sleep 60" & W=$!
sleep 0.3
echo "@workload allowed=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
echo "@status $(vsched status --json | tr -d '\n')"
kill -TERM $D; wait $D; E=$?
echo "@term exit=$E $(state) workload=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
kill $W

vsched daemon --rwc-cgroup work 2>/tmp/d2.log & D=$!
wait_hidden; kill -KILL $D; wait_back
echo "@kill $(state)"

vsched daemon --rwc-cgroup work 2>/tmp/d3.log & D=$!
wait_hidden; kill -KILL $(pidof vsched); sleep 0.5
echo "@kill-both $(state)"
vsched daemon --restore 2>/tmp/r.log; E=$?
echo "@restore exit=$E $(state)"

vsched daemon --rwc-cgroup work 2>/tmp/d4.log & D=$!
wait_hidden; kill -KILL $(pidof vsched); sleep 0.5
vsched daemon --rwc-cgroup work 2>/tmp/d5.log & D=$!
for i in $(seq 50); do grep -q 'put back' /tmp/d5.log && break; sleep 0.1; done
echo "@next-start put_back=$(grep -c 'put back' /tmp/d5.log)"
kill -TERM $D; wait $D
echo "@next-stop $(state)"

vsched daemon --rwc-cgroup work --dry-run 2>/tmp/d6.log & D=$!
for i in $(seq 300); do grep -q 'would write' /tmp/d6.log && break; sleep 0.1; done
echo "@dry would_write=$(grep -c 'would write' /tmp/d6.log) $(state)"
kill -TERM $D; wait $D
echo "@logs"; cat /tmp/d1.log /tmp/r.log /tmp/d5.log /tmp/d6.log
"#;

/// The "key=value" fields of the line "@`step` ..." (values in [..] may
/// hold spaces).
fn step(out: &str, name: &str) -> std::collections::BTreeMap<String, String> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("@{name} ")))
        .unwrap_or_else(|| panic!("no @{name} line in:\n{out}"));
    let mut fields = std::collections::BTreeMap::new();
    let mut rest = line;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().to_string();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(inner) = after.strip_prefix('[') {
            let end = inner.find(']').unwrap_or(inner.len());
            (&inner[..end], inner.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        fields.insert(key, value.trim().to_string());
        rest = next;
    }
    fields
}

fn cpus(list: &str) -> Vec<u32> {
    vsched_model::cpulist::parse_cpu_list(list).unwrap_or_else(|e| panic!("{list:?}: {e}"))
}

#[test]
fn rwc_keeps_a_cgroup_off_hidden_vcpus_and_puts_its_cpuset_back() {
    let _guard = common::serial();
    let out = run_in_guest("daemon/rwc", &[SCRIPT]);
    let (code, out) = &out[0];
    // Shown with --nocapture (and by the harness on failure).
    println!("{out}");
    assert_eq!(*code, Some(0), "{out}");

    let before = step(out, "before");
    assert_eq!(before["cpus"], "", "a fresh cgroup has no cpuset: {out}");

    // The straggler (vCPU 3, capped at 10%) and one of the stacked pair
    // (1 and 2 share a host CPU) are hidden; vCPU 0 stays.
    let during = step(out, "during");
    let kept = cpus(&during["cpus"]);
    assert!(kept.contains(&0) && !kept.contains(&3), "{out}");
    assert_eq!(
        kept.iter().filter(|c| [1, 2].contains(c)).count(),
        1,
        "one of the stacked pair is kept: {out}"
    );
    assert_eq!(during["ctl"], "cpuset", "the controller was enabled: {out}");
    assert_eq!(during["files"], "rwc-state.json", "{out}");
    assert_eq!(cpus(&step(out, "workload")["allowed"]), kept, "{out}");
    let status_line = out
        .lines()
        .find_map(|l| l.strip_prefix("@status "))
        .unwrap();
    let status: Value = serde_json::from_str(status_line).unwrap_or_else(|e| panic!("{e}: {out}"));
    let hidden: Vec<u32> = status["rwc"]["hidden"]
        .as_array()
        .unwrap_or_else(|| panic!("{status:#}"))
        .iter()
        .map(|c| c.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        (0..4).filter(|c| !hidden.contains(c)).collect::<Vec<_>>(),
        kept,
        "status names the hidden vCPUs: {status:#}"
    );

    // Back as before, however the daemon ended.
    let term = step(out, "term");
    assert_eq!(term["exit"], "0", "{out}");
    for name in ["term", "kill", "restore", "next-stop"] {
        let s = step(out, name);
        assert_eq!(
            (s["cpus"].as_str(), s["ctl"].as_str(), s["files"].as_str()),
            ("", "", ""),
            "after {name}: cpuset, root's controllers and state file as before: {out}"
        );
    }
    assert_eq!(cpus(&term["workload"]), vec![0, 1, 2, 3], "{out}");
    // With daemon and watchdog killed, the cpuset stays changed until
    // --restore or the next start puts it back.
    let both = step(out, "kill-both");
    assert_ne!(both["cpus"], "", "{out}");
    assert_eq!(both["files"], "rwc-state.json", "{out}");
    assert_eq!(step(out, "restore")["exit"], "0", "{out}");
    assert_eq!(step(out, "next-start")["put_back"], "1", "{out}");

    // A dry run says what it would write and writes nothing.
    let dry = step(out, "dry");
    assert_ne!(dry["would_write"], "0", "{out}");
    assert_eq!(
        (dry["cpus"].as_str(), dry["files"].as_str()),
        ("", ""),
        "{out}"
    );
}

/// The same on cgroup v1: a cpuset hierarchy mounted in the guest, a
/// child cpuset holding every CPU; the daemon narrows it and SIGTERM puts
/// the list back. The script waits (up to 30 s) for the list RWC settles
/// on, vCPU 0 and one of the stacked pair: once, in a clean-clone suite
/// run, a busy host made the pair's kept vCPU read as a straggler in the
/// first model (RWC hid vCPUs 1-3), and the test took that first list.
const SCRIPT_V1: &str = r#"
mount -t tmpfs none /sys/fs/cgroup && mkdir /sys/fs/cgroup/cpuset
mount -t cgroup -o cpuset cpuset /sys/fs/cgroup/cpuset
G=/sys/fs/cgroup/cpuset/work
mkdir $G && cat /sys/fs/cgroup/cpuset/cpuset.cpus > $G/cpuset.cpus && cat /sys/fs/cgroup/cpuset/cpuset.mems > $G/cpuset.mems
ALL=$(cat $G/cpuset.cpus)
echo "@v1-before cpus=[$ALL]"
vsched daemon --rwc-cgroup $G 2>/tmp/v1.log & D=$!
for i in $(seq 300); do c=$(cat $G/cpuset.cpus); [ "$c" = 0-1 ] || [ "$c" = 0,2 ] && break; sleep 0.1; done
sh -c "echo \$\$ > $G/tasks && exec sleep 60" & W=$!
sleep 0.3
echo "@v1-during cpus=[$(cat $G/cpuset.cpus)] allowed=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
kill -TERM $D; wait $D; E=$?
echo "@v1-after exit=$E cpus=[$(cat $G/cpuset.cpus)] files=[$(ls /run/vsched 2>/dev/null | grep -v sock)]"
kill $W
cat /tmp/v1.log
"#;

#[test]
fn rwc_narrows_a_cgroup_v1_cpuset_and_puts_it_back() {
    let _guard = common::serial();
    let out = run_in_guest("daemon/rwc", &[SCRIPT_V1]);
    let (code, out) = &out[0];
    println!("{out}");
    assert_eq!(*code, Some(0), "{out}");
    assert_eq!(step(out, "v1-before")["cpus"], "0-3", "{out}");
    let during = step(out, "v1-during");
    let kept = cpus(&during["cpus"]);
    assert!(kept.contains(&0) && !kept.contains(&3), "{out}");
    assert_eq!(
        kept.iter().filter(|c| [1, 2].contains(c)).count(),
        1,
        "{out}"
    );
    assert_eq!(cpus(&during["allowed"]), kept, "{out}");
    let after = step(out, "v1-after");
    assert_eq!(
        (
            after["exit"].as_str(),
            after["cpus"].as_str(),
            after["files"].as_str()
        ),
        ("0", "0-3", ""),
        "{out}"
    );
}

/// A straggler that recovers is given back (lab/daemon/rwc-recovers.toml:
/// vCPU 1 at 5% for 25 s, then free), in a cgroup v2 cpuset that has a
/// task in it, which the kernel will not set back to empty.
const SCRIPT_RECOVERS: &str = r#"
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir $G
sh -c "echo \$\$ > $G/cgroup.procs && exec sleep 120" & W=$!
vsched daemon --rwc-cgroup work 2>/tmp/d.log & D=$!
# Polled gently: a busy shell loop on vCPU 0 would starve the light
# prober there (SCHED_IDLE), and with both vCPUs reading slow vCPU 1 is
# no longer a straggler against their mean.
for i in $(seq 48); do [ "$(cat $G/cpuset.cpus 2>/dev/null)" = "0" ] && break; sleep 0.5; done
echo "@hidden cpus=[$(cat $G/cpuset.cpus)] allowed=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
for i in $(seq 80); do [ "$(cat $G/cpuset.cpus)" = "0-1" ] && break; sleep 0.5; done
echo "@recovered cpus=[$(cat $G/cpuset.cpus)] allowed=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
kill -TERM $D; wait $D; E=$?
echo "@stopped exit=$E ctl=[$(cat /sys/fs/cgroup/cgroup.subtree_control)] allowed=[$(grep Cpus_allowed_list /proc/$W/status | cut -f2)]"
kill $W
cat /tmp/d.log
"#;

#[test]
fn a_recovered_straggler_is_given_back_to_a_populated_cgroup() {
    let _guard = common::serial();
    let out = run_in_guest("daemon/rwc-recovers", &[SCRIPT_RECOVERS]);
    let (code, out) = &out[0];
    println!("{out}");
    assert_eq!(*code, Some(0), "{out}");
    let hidden = step(out, "hidden");
    assert_eq!(
        (hidden["cpus"].as_str(), hidden["allowed"].as_str()),
        ("0", "0"),
        "{out}"
    );
    let back = step(out, "recovered");
    assert_eq!(
        (back["cpus"].as_str(), back["allowed"].as_str()),
        ("0-1", "0-1"),
        "{out}"
    );
    let stopped = step(out, "stopped");
    assert_eq!(
        (
            stopped["exit"].as_str(),
            stopped["ctl"].as_str(),
            stopped["allowed"].as_str()
        ),
        ("0", "", "0-1"),
        "{out}"
    );
}

/// A stacked pair that the host places apart is given back soon
/// (lab/daemon/rwc-unstacks.toml: vCPUs 0 and 1 on one host CPU for 24 s,
/// then apart). A CPU-bound loop in the cgroup keeps the kept vCPU busy,
/// as a program would: its light window is then blind and signals no
/// shift when the pair is placed apart (idle, it would, and a check
/// would follow within 2 s whatever the rhythm). The daemon's log lines
/// are stamped with seconds since T0, to show when the check saw the pair
/// apart and when RWC gave it back.
const SCRIPT_UNSTACKS: &str = r#"
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir $G
T0=$(cut -d' ' -f1 /proc/uptime)
since() { awk -v t0=$T0 '{printf "%.2f", $1 - t0}' /proc/uptime; }
sh -c "echo \$\$ > $G/cgroup.procs && exec sh -c 'while :; do :; done'" & W=$!
mkfifo /tmp/d.fifo
while IFS= read -r l; do echo "$(since) $l"; done </tmp/d.fifo >/tmp/d.log & S=$!
vsched daemon --rwc-cgroup work 2>/tmp/d.fifo & D=$!
for i in $(seq 88); do [ "$(cat $G/cpuset.cpus 2>/dev/null)" = "0" ] && break; sleep 0.25; done
echo "@hidden cpus=[$(cat $G/cpuset.cpus)] at=$(since)"
for i in $(seq 120); do [ "$(cat $G/cpuset.cpus)" = "0-1" ] && break; sleep 0.25; done
echo "@given_back cpus=[$(cat $G/cpuset.cpus)] at=$(since)"
kill -TERM $D; wait $D
kill $W
wait $S
cat /tmp/d.log
"#;

/// Regression: a stacked vCPU was given back only at the next 10 s
/// topology check (3.5-5.75 s after the host placed the pair apart in the
/// adaptability benchmark, up to 11 s here), since the hidden vCPU's own
/// light window reads it as free whether it is stacked or not; now the
/// topology is checked every 2 s while vCPUs are stacked.
/// When lab/daemon/rwc-unstacks.toml places the pair apart (its phase's
/// `at_s`, seconds after the commands start); long enough for a slow
/// emulator to probe the topology and hide one of the pair first.
const UNSTACKED_AT_S: f64 = 24.0;

#[test]
fn a_stacked_pair_placed_apart_is_given_back_within_seconds() {
    let _guard = common::serial();
    let out = run_in_guest("daemon/rwc-unstacks", &[SCRIPT_UNSTACKS]);
    let (code, out) = &out[0];
    println!("{out}");
    assert_eq!(*code, Some(0), "{out}");
    let hidden = step(out, "hidden");
    assert_eq!(
        hidden["cpus"].as_str(),
        "0",
        "the stacked pair was not hidden\n{out}"
    );
    let hidden_at: f64 = hidden["at"].parse().unwrap();
    assert!(
        hidden_at < UNSTACKED_AT_S,
        "hidden only after the pair was placed apart\n{out}"
    );
    let back = step(out, "given_back");
    assert_eq!(back["cpus"].as_str(), "0-1", "{out}");
    // The script's T0 is taken a few milliseconds after the phase clock
    // starts (after mount and mkdir). A check within 2 s, a full probe
    // when the pair disagrees, and the daemon's two reports in a row took
    // 1.7-1.9 s here, on a host loaded by `stress-ng --cpu 4` as well.
    // Two slower cases bracket the bound. First, while the light window
    // on the busy vCPU stretched each daemon step to 1-3 s
    // (crates/probe/src/hurry.rs), it took 2.2-2.9 s here and 7.3 s on a
    // slower host. Second, with a 10 s topology rhythm the delay depends
    // on where the daemon's checks fall, 10 s apart from its first step
    // (1.5-2.5 s in): 7.17 s after a change at 24 s, 10.65 s after one at
    // 14 s; a daemon whose first step took 4 s or more would have passed
    // with it. 6 s leaves both sides about 1 s or more.
    let back_after_s = back["at"].parse::<f64>().unwrap() - UNSTACKED_AT_S;
    assert!(
        back_after_s <= 6.0,
        "given back {back_after_s:.2} s after the pair was placed apart\n{out}"
    );
}

/// Refused before anything changes: a path that is not a cgroup, --dry-run
/// without a cgroup, --restore with a cgroup, a state file that is not
/// vsched's.
#[test]
fn rwc_refuses_bad_input() {
    let dir = std::env::temp_dir().join(format!("vsched-rwc-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("d.sock").display().to_string();
    let base = ["daemon", "--listen", "127.0.0.1:0", "--socket", &sock];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = common::vsched(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Exit status 2: an error (as clap's usage errors); 1 would mean
    // "ran, but could not put everything back".
    let (code, err) = run(&["--rwc-cgroup", "/proc/no-such-cgroup"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not a cgroup directory"), "{err}");
    let (code, err) = run(&["--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--rwc-cgroup"), "{err}");
    let (code, err) = run(&["--restore", "--rwc-cgroup", "user.slice"]);
    assert_eq!(code, Some(2), "{err}");
    let state = dir.join("state.json");
    std::fs::write(&state, "not json").unwrap();
    let (code, err) = run(&["--restore", "--rwc-state", state.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not vsched's"), "{err}");
    let (code, err) = run(&[
        "--restore",
        "--rwc-state",
        dir.join("none.json").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "nothing to restore is not an error: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
