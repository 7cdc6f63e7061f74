#!/usr/bin/env python3
"""How soon each form of vsched's consolidation spreads demand that
doubles (issue goal: within 10 ms), beside the kernel's default scheduler,
in one lab guest.

The program: the 2-thread barrier (schedbench's timeline, about 1 us of
work per round, which every form narrows to one vCPU within a second or
two), and after 5 s two CPU-bound threads started together (schedbench
spread 2): the time from their start until both run at the same moment
on different vCPUs. Each form runs it once per round, the order rotated
round by round:

  default   the kernel's scheduler
  sched     vsched sched --consolidate (sched_ext)
  run       vsched run --consolidate (affinity)
  daemon    vsched daemon --rwc-cgroup work --consolidate-cgroups (cpuset)

Whether the set was narrowed when the threads started is read from
/proc/stat: the least busy vCPU's busy share over the second before
(near 0 narrowed; the probers' light windows keep a parked vCPU about 10%
busy under vsched's scheduler). Prints JSON (schema
vsched.consolidate-reaction/v1): every run, and per form the median
spread time over the rounds whose set was narrowed.

  python3 bench/consolidate_reaction.py target/release/vsched --kernel-version 7.2.13 \\
      --schedbench target/tmp/schedbench --rounds 5
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

FORMS = ["default", "sched", "run", "daemon"]
# A set counts as narrowed when its least busy vCPU was busy at most this
# share of the second before the burst: a parked vCPU under vsched's
# scheduler still runs the probers' light windows (100 ms a second), and
# one the barrier shares under the default is busy most of the time.
NARROWED_BUSY_SHARE = 0.25
# How long the spread may take before schedbench gives up, in ms.
SPREAD_LIMIT_MS = 3000

GUEST_SCRIPT = r"""#!/bin/sh
ROUNDS=$1
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir -p $G
cat > /tmp/wl.sh <<EOF
schedbench timeline 2 30 250 200 >/dev/null & B=\$!
sleep 5
awk '/^cpu[0-9]/ {print \$1, \$2+\$3+\$4+\$7+\$8, \$2+\$3+\$4+\$5+\$6+\$7+\$8}' /proc/stat > /tmp/st0
sleep 1
awk '/^cpu[0-9]/ {print \$1, \$2+\$3+\$4+\$7+\$8, \$2+\$3+\$4+\$5+\$6+\$7+\$8}' /proc/stat > /tmp/st1
schedbench spread 2 %(limit_ms)d > /tmp/spread.out
kill \$B; wait \$B
true
EOF
finish() {
  echo "@@spread $FORM $R $(cat /tmp/spread.out)"
  echo "@@least_busy $FORM $R $(paste -d' ' /tmp/st0 /tmp/st1 | awk '{b = $5 - $2; t = $6 - $3; s = t ? b / t : 1; if (min == "" || s < min) min = s} END {print min}')"
}
for R in $(seq 0 $((ROUNDS - 1))); do
  for k in 0 1 2 3; do
    rm -f /tmp/spread.out /tmp/st0 /tmp/st1
    case $(( (k + R) %% 4 )) in
    0) FORM=default; sh /tmp/wl.sh; finish ;;
    1) FORM=sched
       vsched sched --consolidate --quiet -- sh /tmp/wl.sh 2>/tmp/s.log || { echo "@@failed sched"; cat /tmp/s.log; }
       finish ;;
    2) FORM=run
       vsched run --consolidate -- sh /tmp/wl.sh 2>/tmp/r.log || { echo "@@failed run"; cat /tmp/r.log; }
       finish ;;
    3) FORM=daemon
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
    return sorted(runs.values(), key=lambda r: (r["form"], r["round"]))


def summary(runs):
    out = {}
    for form in FORMS:
        mine = [r for r in runs if r["form"] == form]
        narrowed = [r for r in mine if r.get("least_busy_share", 1) <= NARROWED_BUSY_SHARE]
        times = [r["spread_ms"] for r in narrowed if r.get("spread_ms") is not None]
        out[form] = {
            "rounds": len(mine),
            "narrowed_rounds": len(narrowed),
            "not_spread_within_limit": sum(1 for r in narrowed if r.get("spread_ms") is None),
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
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "consolidate-reaction")
        with open(script, "w") as f:
            f.write(GUEST_SCRIPT % {"limit_ms": SPREAD_LIMIT_MS})
        os.chmod(script, 0o755)
        extra = [os.path.abspath(a.schedbench), script]
        with open(a.layout) as f:
            layout = f.read()
        listed = ", ".join(json.dumps(p) for p in extra)
        layout_path = os.path.join(tmp, "layout.toml")
        with open(layout_path, "w") as f:
            # Each form's run takes about 10-20 s under TCG.
            timeout = 120 + 4 * 30 * a.rounds
            f.write(f"extra_binaries = [{listed}]\nrun_timeout_s = {timeout}\n" + layout)
        cmd = [a.vsched, "lab", "run", "--json", "--cmd", f"consolidate-reaction {a.rounds} 2>&1"]
        if a.kernel_version:
            cmd += ["--kernel-version", a.kernel_version]
        out = subprocess.run(cmd + [layout_path], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"lab run failed ({out.returncode}):\n"
                             f"{out.stderr[-3000:]}\n{out.stdout[-3000:]}")
    result = json.loads(out.stdout)
    runs = parse(result["commands"][0]["output"])
    print(json.dumps({"schema": "vsched.consolidate-reaction/v1",
                      "rounds": a.rounds,
                      "kernel": a.kernel_version or "the layout's",
                      "accel": result.get("accel"),
                      "narrowed_busy_share": NARROWED_BUSY_SHARE,
                      "summary": summary(runs),
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
