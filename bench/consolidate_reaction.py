#!/usr/bin/env python3
"""How soon each form of vsched's consolidation spreads demand that
doubles (issue goal: within 10 ms), beside the kernel's default scheduler,
in one lab guest.

The program: for 8 s, a pair of threads passing a byte back and forth
through pipes (`--before pingpong`, the default: one of them runs at a
time, which every form narrows to one vCPU and keeps there, its hand-offs
faster on one) or the 2-thread barrier (`--before barrier`,
schedbench's timeline, about 1 us of work per round: narrowed within a
second or two, but whether it still is at 8 s varies from run to run);
then, as soon as it has ended, two CPU-bound threads
started together (schedbench spread 2): the time from their start until
they have run on two different vCPUs between them. The set the barrier
left narrowed must widen for that; under the default scheduler the
second thread is placed on the idle vCPU at once. Each form runs it once per round, the order rotated
round by round:

  default   the kernel's scheduler
  sched     vsched sched --consolidate (sched_ext)
  run       vsched run --consolidate (affinity)
  daemon    vsched daemon --rwc-cgroup work --consolidate-cgroups (cpuset)

With `--compare OLD_VSCHED`, the user-space forms run with that binary too
(forms run-old and daemon-old, as `vsched-old` in the guest), in the same
rotation: a change's effect side by side.

Whether the set was narrowed when the threads started is each form's
own account: the scheduler's last --interval-json line before (mean
active vCPUs over 250 ms), the daemon's cgroup's cpuset read just before,
and `vsched run --consolidate`'s report (its last change of the set
before the burst, placed by its began_boottime_s). The /proc/stat busy share
of the least busy vCPU over the second before is recorded beside, for
reference only. The default scheduler's runs are the baseline: how soon
the kernel alone spreads the same demand. Prints JSON (schema
vsched.consolidate-reaction/v1): every run, and per form the median
spread time over the rounds whose set was narrowed.

  python3 bench/consolidate_reaction.py target/release/vsched --kernel-version 7.2.13 \\
      --schedbench target/tmp/schedbench --rounds 5 [--compare OLD_VSCHED]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from labround import run_guest_script

FORMS = ["default", "sched", "run", "daemon"]
# The forms run with the compared binary.
OLD_FORMS = ["run-old", "daemon-old"]
# The program before the burst, per --before.
BEFORE = {
    "pingpong": "schedbench pingpong 1 1000000000",
    "barrier": "schedbench timeline 2 30 250 200",
}
# The scheduler's set counts as narrowed at this mean of active vCPUs or
# fewer over its last 250 ms interval.
NARROWED_MEAN_ACTIVE = 1.5
# How long the spread may take before schedbench gives up, in ms.
SPREAD_LIMIT_MS = 3000

GUEST_SCRIPT = r"""#!/bin/sh
ROUNDS=$1
FORMS="$2"
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir -p $G
# The program under each form: only the workload, so that the sampling
# (processes of its own, which a narrowed set would count as demand) runs
# outside the consolidated tree and cgroup, in the sampler; the two meet
# at FIFOs, with shell builtins on the program's side.
cat > /tmp/wl.sh <<EOF
%(before)s >/dev/null & B=\$!
echo > /tmp/started
read go < /tmp/go
kill \$B; wait \$B
schedbench spread 2 %(limit_ms)d > /tmp/spread.out
true
EOF
sampler() {
  read x < /tmp/started
  sleep 7
  awk '/^cpu[0-9]/ {print $1, $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat > /tmp/st0
  sleep 1
  awk '/^cpu[0-9]/ {print $1, $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat > /tmp/st1
  $HINT > /tmp/hint 2>/dev/null
  cut -d' ' -f1 /proc/uptime > /tmp/burst_at
  echo > /tmp/go
}
finish() {
  kill $S 2>/dev/null; wait $S 2>/dev/null
  echo "@@spread $FORM $R $(cat /tmp/spread.out)"
  echo "@@hint $FORM $R $(cat /tmp/hint)"
  echo "@@least_busy $FORM $R $(paste -d' ' /tmp/st0 /tmp/st1 | awk '{b = $5 - $2; t = $6 - $3; s = t ? b / t : 1; if (min == "" || s < min) min = s} END {print min}')"
}
set -- $FORMS
N=$#
for R in $(seq 0 $((ROUNDS - 1))); do
  for k in $(seq 0 $((N - 1))); do
    rm -f /tmp/spread.out /tmp/st0 /tmp/st1 /tmp/hint /tmp/iv.jsonl /tmp/burst_at /tmp/r.json /tmp/started /tmp/go
    mkfifo /tmp/started /tmp/go
    FORM=$(echo $FORMS | cut -d' ' -f$(( (k + R) %% N + 1 )))
    case $FORM in *-old) V_BIN=vsched-old;; *) V_BIN=vsched;; esac
    case $FORM in
      sched) HINT="tail -n 1 /tmp/iv.jsonl" ;;
      daemon*) HINT="cat $G/cpuset.cpus.effective" ;;
      *) HINT=true ;;
    esac
    case $FORM in daemon*) ;; *) sampler & S=$! ;; esac
    case $FORM in
    default) sh /tmp/wl.sh; finish ;;
    sched)
       vsched sched --consolidate --quiet --interval 250ms --interval-json /tmp/iv.jsonl -- sh /tmp/wl.sh 2>/tmp/s.log || { echo "@@failed sched"; cat /tmp/s.log; }
       finish ;;
    run*)
       $V_BIN run --consolidate --consolidate-json /tmp/r.json -- sh /tmp/wl.sh 2>/tmp/r.log || { echo "@@failed $FORM"; cat /tmp/r.log; }
       finish
       echo "@@run_report $FORM $R $(cat /tmp/burst_at) $(tr -d '\n' < /tmp/r.json)" ;;
    daemon*)
       $V_BIN daemon --rwc-cgroup work --consolidate-cgroups 2>/tmp/d.log & D=$!
       for i in $(seq 40); do n=$($V_BIN status --json 2>/dev/null | sed -n 's/.*"model_updates":\([0-9]*\).*/\1/p'); [ "${n:-0}" -ge 2 ] && break; sleep 0.5; done
       sampler & S=$!
       sh -c "echo \$\$ > $G/cgroup.procs && exec sh /tmp/wl.sh"
       finish
       kill -TERM $D; wait $D || { echo "@@failed $FORM"; cat /tmp/d.log; } ;;
    esac
  done
done
"""


def parse(output):
    runs = {}
    for line in output.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("@@"):
            continue
        if parts[0] == "@@failed":
            raise SystemExit(f"the {parts[1]} form failed in the guest:\n{output}")
        entry = runs.setdefault((parts[1], int(parts[2])), {"form": parts[1], "round": int(parts[2])})
        if parts[0] == "@@spread" and len(parts) == 5:
            ms = float(parts[4])
            entry["spread_ms"] = ms if ms >= 0 else None
        elif parts[0] == "@@least_busy" and len(parts) == 4:
            entry["least_busy_share"] = float(parts[3])
        elif parts[0] == "@@run_report" and len(parts) > 4:
            # The report's changes are timed from the consolidation's
            # start, which it gives on /proc/uptime's clock (a report
            # without it, from an older vsched, says nothing: the uptime
            # before vsched started is hundreds of ms early under TCG, and
            # the widening after the burst would count as before it).
            burst_at = float(parts[3])
            report = json.loads(line.split(None, 4)[4])
            started = report.get("began_boottime_s")
            if started is None:
                continue
            burst_s = burst_at - started
            before = [p["active"] for p in report["active_over_time"] if p["t_s"] <= burst_s]
            if before:
                entry["active_at_burst"] = before[-1]
            # How soon after the sampler let the burst go the set widened:
            # the emulated shell's kill, fork and exec before the threads
            # start are in it, so it is no part of spread_ms.
            after = [p["t_s"] for p in report["active_over_time"]
                     if p["t_s"] > burst_s and p["active"] > 1]
            if after:
                entry["widened_after_ms"] = round((after[0] - burst_s) * 1e3, 3)
        elif parts[0] == "@@hint":
            hint = line.split(None, 3)[3] if len(parts) > 3 else ""
            if parts[1] == "sched" and hint.startswith("{"):
                c = json.loads(hint)["counters"]
                if c.get("consolidate_periods"):
                    entry["mean_active"] = c["active_vcpu_periods"] / c["consolidate_periods"]
            elif parts[1].startswith("daemon") and hint:
                entry["cpuset"] = hint
    for entry in runs.values():
        entry["narrowed"] = narrowed(entry)
    return sorted(runs.values(), key=lambda r: (r["form"], r["round"]))


def narrowed(entry):
    """Whether the run's set was narrowed when the burst started, by its
    form's own account (the docstring); None where it gave none."""
    form = entry["form"].removesuffix("-old")
    if form == "default":
        return False
    if form == "run":
        active = entry.get("active_at_burst")
        return None if active is None else active == 1
    if form == "sched":
        mean = entry.get("mean_active")
        return None if mean is None else mean <= NARROWED_MEAN_ACTIVE
    cpuset = entry.get("cpuset")
    return None if cpuset is None else ("," not in cpuset and "-" not in cpuset)


def summary(runs, forms):
    out = {}
    for form in forms:
        mine = [r for r in runs if r["form"] == form]
        narrowed = [r for r in mine if r["narrowed"] or form == "default"]
        times = [r["spread_ms"] for r in narrowed if r.get("spread_ms") is not None]
        out[form] = {
            "rounds": len(mine),
            "narrowed_rounds": len(narrowed),
            "not_spread_within_limit": sum(1 for r in narrowed if r.get("spread_ms") is None),
            # The default's: every round (it never narrows).
            "spread_ms_median_narrowed": statistics.median(times) if times else None,
            "spread_ms_all": [r.get("spread_ms") for r in mine],
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vsched", help="vsched binary under test (boots the guest)")
    ap.add_argument("--schedbench", default="target/tmp/schedbench")
    ap.add_argument("--layout", default="lab/sched/two-free.toml")
    ap.add_argument("--kernel-version", help="a sched_ext kernel of the lab's matrix")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", choices=sorted(BEFORE), default="pingpong",
                    help="the program the set narrows for before the burst")
    ap.add_argument("--compare", help="another vsched binary: its user-space forms too")
    a = ap.parse_args()
    forms = FORMS + (OLD_FORMS if a.compare else [])
    script = GUEST_SCRIPT % {"limit_ms": SPREAD_LIMIT_MS, "before": BEFORE[a.before]}
    with tempfile.TemporaryDirectory() as tmp:
        extra = [a.schedbench]
        if a.compare:
            old = os.path.join(tmp, "vsched-old")
            subprocess.run(["strip", "-o", old, a.compare], check=True)
            extra.append(old)
        # Each form's run takes about 10-25 s under TCG.
        result = run_guest_script(a.vsched, a.layout, script, f"{a.rounds} '{' '.join(forms)}'",
                                  extra, timeout_s=120 + len(forms) * 40 * a.rounds,
                                  kernel_version=a.kernel_version)
    runs = parse(result["commands"][0]["output"])
    print(json.dumps({"schema": "vsched.consolidate-reaction/v1",
                      "rounds": a.rounds,
                      "before": a.before,
                      "compared": a.compare,
                      "kernel": a.kernel_version or "the layout's",
                      "accel": result.get("accel"),
                      "narrowed_mean_active": NARROWED_MEAN_ACTIVE,
                      "summary": summary(runs, forms),
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
