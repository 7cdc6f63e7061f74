#!/usr/bin/env python3
"""How soon each form of vsched's consolidation spreads demand that
doubles (issue goal: within 10 ms), beside the kernel's default scheduler,
in one lab guest.

The program: the 2-thread barrier (schedbench's timeline, about 1 us of
work per round, which every form narrows to one vCPU within a second or
two) for 8 s, then, as soon as it has ended, two CPU-bound threads
started together (schedbench spread 2): the time from their start until
they have run on two different vCPUs between them. The set the barrier
left narrowed must widen for that; under the default scheduler the
second thread is placed on the idle vCPU at once. Each form runs it once per round, the order rotated
round by round:

  default   the kernel's scheduler
  sched     vsched sched --consolidate (sched_ext)
  run       vsched run --consolidate (affinity)
  daemon    vsched daemon --rwc-cgroup work --consolidate-cgroups (cpuset)

Whether the set was narrowed when the threads started is each form's
own account: the scheduler's last --interval-json line before (mean
active vCPUs over 250 ms), the daemon's cgroup's cpuset read just before,
and `vsched run --consolidate`'s report (its last change of the set
before the burst, timed from vsched's start). The /proc/stat busy share
of the least busy vCPU over the second before is recorded beside, for
reference only. The default scheduler's runs are the baseline: how soon
the kernel alone spreads the same demand. Prints JSON (schema
vsched.consolidate-reaction/v1): every run, and per form the median
spread time over the rounds whose set was narrowed.

  python3 bench/consolidate_reaction.py target/release/vsched --kernel-version 7.2.13 \\
      --schedbench target/tmp/schedbench --rounds 5
"""
import argparse
import json
import statistics

from labround import run_guest_script

FORMS = ["default", "sched", "run", "daemon"]
# The scheduler's set counts as narrowed at this mean of active vCPUs or
# fewer over its last 250 ms interval.
NARROWED_MEAN_ACTIVE = 1.5
# How long the spread may take before schedbench gives up, in ms.
SPREAD_LIMIT_MS = 3000

GUEST_SCRIPT = r"""#!/bin/sh
ROUNDS=$1
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir -p $G
cat > /tmp/wl.sh <<EOF
schedbench timeline 2 30 250 200 >/dev/null & B=\$!
sleep 7
awk '/^cpu[0-9]/ {print \$1, \$2+\$3+\$4+\$7+\$8, \$2+\$3+\$4+\$5+\$6+\$7+\$8}' /proc/stat > /tmp/st0
sleep 1
awk '/^cpu[0-9]/ {print \$1, \$2+\$3+\$4+\$7+\$8, \$2+\$3+\$4+\$5+\$6+\$7+\$8}' /proc/stat > /tmp/st1
\$HINT > /tmp/hint 2>/dev/null
cut -d' ' -f1 /proc/uptime > /tmp/burst_at
kill \$B; wait \$B
schedbench spread 2 %(limit_ms)d > /tmp/spread.out
true
EOF
finish() {
  echo "@@spread $FORM $R $(cat /tmp/spread.out)"
  echo "@@hint $FORM $R $(cat /tmp/hint)"
  echo "@@least_busy $FORM $R $(paste -d' ' /tmp/st0 /tmp/st1 | awk '{b = $5 - $2; t = $6 - $3; s = t ? b / t : 1; if (min == "" || s < min) min = s} END {print min}')"
}
for R in $(seq 0 $((ROUNDS - 1))); do
  for k in 0 1 2 3; do
    rm -f /tmp/spread.out /tmp/st0 /tmp/st1 /tmp/hint /tmp/iv.jsonl /tmp/burst_at /tmp/r.json
    export HINT=true
    case $(( (k + R) %% 4 )) in
    0) FORM=default; sh /tmp/wl.sh; finish ;;
    1) FORM=sched; export HINT="tail -n 1 /tmp/iv.jsonl"
       vsched sched --consolidate --quiet --interval 250ms --interval-json /tmp/iv.jsonl -- sh /tmp/wl.sh 2>/tmp/s.log || { echo "@@failed sched"; cat /tmp/s.log; }
       finish ;;
    2) FORM=run; V=$(cut -d' ' -f1 /proc/uptime)
       vsched run --consolidate --consolidate-json /tmp/r.json -- sh /tmp/wl.sh 2>/tmp/r.log || { echo "@@failed run"; cat /tmp/r.log; }
       finish
       echo "@@run_report $FORM $R $V $(cat /tmp/burst_at) $(tr -d '\n' < /tmp/r.json)" ;;
    3) FORM=daemon; export HINT="cat $G/cpuset.cpus.effective"
       vsched daemon --rwc-cgroup work --consolidate-cgroups 2>/tmp/d.log & D=$!
       for i in $(seq 40); do n=$(vsched status --json 2>/dev/null | sed -n 's/.*"model_updates":\([0-9]*\).*/\1/p'); [ "${n:-0}" -ge 2 ] && break; sleep 0.5; done
       sh -c "echo \$\$ > $G/cgroup.procs && exec sh /tmp/wl.sh"
       finish
       kill -TERM $D; wait $D || { echo "@@failed daemon"; cat /tmp/d.log; } ;;
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
        elif parts[0] == "@@run_report" and len(parts) > 5:
            # The report's changes are timed from vsched's start, within
            # milliseconds of V: the last one before the burst is the set
            # it met.
            started, burst_at = float(parts[3]), float(parts[4])
            report = json.loads(line.split(None, 5)[5])
            before = [p["active"] for p in report["active_over_time"]
                      if p["t_s"] <= burst_at - started]
            if before:
                entry["active_at_burst"] = before[-1]
        elif parts[0] == "@@hint":
            hint = line.split(None, 3)[3] if len(parts) > 3 else ""
            if parts[1] == "sched" and hint.startswith("{"):
                c = json.loads(hint)["counters"]
                if c.get("consolidate_periods"):
                    entry["mean_active"] = c["active_vcpu_periods"] / c["consolidate_periods"]
            elif parts[1] == "daemon" and hint:
                entry["cpuset"] = hint
    for entry in runs.values():
        entry["narrowed"] = narrowed(entry)
    return sorted(runs.values(), key=lambda r: (r["form"], r["round"]))


def narrowed(entry):
    """Whether the run's set was narrowed when the burst started, by its
    form's own account (the docstring); None where it gave none."""
    form = entry["form"]
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


def summary(runs):
    out = {}
    for form in FORMS:
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
    a = ap.parse_args()
    # Each form's run takes about 10-25 s under TCG.
    result = run_guest_script(a.vsched, a.layout, GUEST_SCRIPT % {"limit_ms": SPREAD_LIMIT_MS},
                              str(a.rounds), [a.schedbench], timeout_s=120 + 4 * 40 * a.rounds,
                              kernel_version=a.kernel_version)
    runs = parse(result["commands"][0]["output"])
    print(json.dumps({"schema": "vsched.consolidate-reaction/v1",
                      "rounds": a.rounds,
                      "kernel": a.kernel_version or "the layout's",
                      "accel": result.get("accel"),
                      "narrowed_mean_active": NARROWED_MEAN_ACTIVE,
                      "summary": summary(runs),
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
