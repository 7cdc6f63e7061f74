#!/usr/bin/env python3
"""What `vsched daemon --consolidate-cgroups` costs while its cgroup has
nothing to do, and how soon it widens when work arrives: in one lab guest,
for each given vsched binary in turn, N rounds. Each round measures the
daemon's consolidation thread (`consolidate-0`, its /proc schedstat run
time over 10 s) with the managed cgroup empty, then with four sleeping
processes in it, then, three times, how long after a 2-thread CPU-bound
program joins the quiet narrowed cgroup its cpuset is widened again
(polled every 5 ms, read at /proc/uptime's 10 ms resolution). Prints JSON:
the raw readings and each binary's medians.

  python3 bench/consolidate_idle_cost.py target/release/vsched \\
      --compare OLD_VSCHED --schedbench target/tmp/schedbench --rounds 3

As in bench/consolidate_cost_ab.py, the first binary boots the guest and
is `vsched` in it, a compared one `vsched-old`; schedbench is
crates/bench/c/schedbench.c compiled (the lab tests leave it in
target/tmp).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from labround import run_guest_script

# The guest's cgroup v2 with one managed cgroup; `now` in ms (10 ms steps).
PRELUDE = r"""
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir $G
now() { read u _ < /proc/uptime; echo $(( ${u%.*}${u#*.} * 10 )); }
narrow() { c=$(cat $G/cpuset.cpus 2>/dev/null); [ "$c" = 0 ] || [ "$c" = 1 ]; }
# $1 binary, $2 label: the consolidation thread's CPU over 10 s, 3 s after start.
cost() {
  $1 daemon --rwc-cgroup work --consolidate-cgroups 2>/tmp/d.log & D=$!
  sleep 3
  T=$(grep -l consolidate /proc/$D/task/*/comm | cut -d/ -f5)
  a=$(cut -d' ' -f1 /proc/$D/task/$T/schedstat); t0=$(now)
  sleep 10
  b=$(cut -d' ' -f1 /proc/$D/task/$T/schedstat); t1=$(now)
  echo "@$1 $2 cpu_ms $(( (b - a) / 1000000 )) over_ms $(( t1 - t0 ))"
  kill $D; wait $D
}
# $1 binary: three bursts into the quiet, narrowed cgroup.
react() {
  $1 daemon --rwc-cgroup work --consolidate-cgroups 2>/tmp/d.log & D=$!
  for r in 1 2 3; do
    for i in $(seq 150); do narrow && break; sleep 0.1; done
    narrow || { echo "@$1 reaction not_narrowed"; continue; }
    sleep 1.5
    t0=$(now)
    sh -c "echo \$\$ > $G/cgroup.procs && exec schedbench cpu 2 4000000000" >/dev/null & C=$!
    while narrow; do sleep 0.005; done
    t1=$(now)
    echo "@$1 reaction widened_ms $(( t1 - t0 ))"
    kill $C; wait $C 2>/dev/null
  done
  kill $D; wait $D
}
"""


def guest_script(binaries, rounds):
    lines = ["#!/bin/sh", PRELUDE, f"for round in $(seq {rounds}); do"]
    for name in binaries:
        lines += [
            f"  cost {name} empty",
            "  S=''; for i in 1 2 3 4; do sleep 1000 & echo $! > $G/cgroup.procs; S=\"$S $!\"; done",
            f"  cost {name} sleeping",
            f"  react {name}",
            "  kill $S; wait $S 2>/dev/null",
        ]
    lines += ["done", "true"]
    return "\n".join(lines) + "\n"


def parse(output):
    runs = {}
    for line in output.splitlines():
        if not line.startswith("@"):
            continue
        f = line[1:].split()
        entry = runs.setdefault(f[0], {"empty_cpu_share": [], "sleeping_cpu_share": [],
                                       "widened_ms": [], "not_narrowed": 0})
        if f[1] in ("empty", "sleeping") and f[2] == "cpu_ms":
            entry[f"{f[1]}_cpu_share"].append(int(f[3]) / int(f[5]))
        elif f[1:3] == ["reaction", "widened_ms"]:
            entry["widened_ms"].append(int(f[3]))
        elif f[1:3] == ["reaction", "not_narrowed"]:
            entry["not_narrowed"] += 1
    return runs


def summary(runs):
    return {name: {f"{key}_median": statistics.median(values)
                   for key, values in r.items() if isinstance(values, list) and values}
            for name, r in runs.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vsched", help="vsched binary under test (boots the guest)")
    ap.add_argument("--compare", help="another vsched binary, run as vsched-old")
    ap.add_argument("--schedbench", default="target/tmp/schedbench")
    ap.add_argument("--layout", default="lab/layouts/two-free.toml")
    ap.add_argument("--kernel-version", help="a sched_ext kernel of the lab's matrix")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binaries = ["vsched"]
        extra = [a.schedbench]
        if a.compare:
            old = os.path.join(tmp, "vsched-old")
            subprocess.run(["strip", "-o", old, a.compare], check=True)
            extra.append(old)
            binaries.append("vsched-old")
        # Each binary-round takes about a minute under TCG.
        result = run_guest_script(a.vsched, a.layout, guest_script(binaries, a.rounds), "",
                                  extra, timeout_s=120 + 90 * a.rounds * len(binaries),
                                  kernel_version=a.kernel_version)
    runs = parse(result["commands"][0]["output"])
    print(json.dumps({"schema": "vsched.consolidate-idle-cost/v1",
                      "rounds": a.rounds,
                      "kernel": a.kernel_version or "the layout's",
                      "accel": result.get("accel"),
                      "summary": summary(runs),
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
