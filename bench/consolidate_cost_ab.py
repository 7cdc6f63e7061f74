#!/usr/bin/env python3
"""What `vsched run --consolidate` costs a program that needs every vCPU:
in one lab guest, two CPU-bound threads alone and under each given vsched
binary's consolidation, alternating, N rounds; then the same for a program
whose blocking phase narrows the set before its CPU-bound phase (the lab
test's `phases`). Prints JSON: the raw runs, each binary's paired ratio to
the program alone (median over rounds), and the CPU share of a vCPU that
its consolidation thread (`own_cpu_s`) and all of vsched (`vsched_cpu_s`,
where the binary reports it) took.

  python3 bench/consolidate_cost_ab.py target/release/vsched \\
      --compare OLD_VSCHED --schedbench target/tmp/schedbench --rounds 5

The first binary boots the guest and is `vsched` in it; a compared one is
`vsched-old` (stripped: the guest's initramfs has room for one binary with
debug information). schedbench is crates/bench/c/schedbench.c compiled
(the lab tests leave it in target/tmp).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from labround import run_guest_script

CPU = "schedbench cpu 2 1000000000"
PHASES = "sh -c 'schedbench barrier 4 20000 2000 >/dev/null; schedbench cpu 2 1000000000'"


def guest_script(binaries, rounds):
    lines = ["#!/bin/sh", f"for i in $(seq {rounds}); do",
             f"  {CPU} | sed 's/^/alone /'"]
    for name in binaries:
        for label, prog in (("cpu", CPU), ("phases", PHASES)):
            tag = f"{name}-{label}"
            lines.append(f"  {name} run --consolidate --consolidate-json /tmp/r.json -- {prog} "
                         f"2>/dev/null | sed 's/^/{tag} /'")
            lines.append(f"  echo \"{tag} report $(tr -d '\\n' < /tmp/r.json)\"")
    lines.append("done")
    return "\n".join(lines) + "\n"


def parse(output):
    runs = {}
    for line in output.splitlines():
        tag, _, rest = line.partition(" ")
        if rest.startswith("elapsed_s "):
            runs.setdefault(tag, {"elapsed_s": [], "reports": []})["elapsed_s"].append(
                float(rest.split()[1]))
        elif rest.startswith("report "):
            runs.setdefault(tag, {"elapsed_s": [], "reports": []})["reports"].append(
                json.loads(rest[len("report "):]))
    return runs


def summary(runs):
    alone = runs["alone"]["elapsed_s"]
    out = {}
    for tag, r in runs.items():
        if tag == "alone":
            continue
        ratios = [a / b for a, b in zip(r["elapsed_s"], alone)]
        entry = {"paired_ratio_to_alone_median": statistics.median(ratios),
                 "paired_ratios": ratios}
        for key in ("own_cpu_s", "vsched_cpu_s"):
            shares = [rep[key] / rep["duration_s"] for rep in r["reports"] if key in rep]
            if shares:
                entry[key.replace("_s", "_share_median")] = statistics.median(shares)
        out[tag] = entry
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vsched", help="vsched binary under test (boots the guest)")
    ap.add_argument("--compare", help="another vsched binary, run as vsched-old")
    ap.add_argument("--schedbench", default="target/tmp/schedbench")
    ap.add_argument("--layout", default="lab/layouts/two-free.toml")
    ap.add_argument("--kernel-version", help="a sched_ext kernel of the lab's matrix")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binaries = ["vsched"]
        extra = [a.schedbench]
        if a.compare:
            old = os.path.join(tmp, "vsched-old")
            subprocess.run(["strip", "-o", old, a.compare], check=True)
            extra.append(old)
            binaries.append("vsched-old")
        result = run_guest_script(a.vsched, a.layout, guest_script(binaries, a.rounds), "",
                                  extra, kernel_version=a.kernel_version)
    runs = parse(result["commands"][0]["output"])
    print(json.dumps({"schema": "vsched.consolidate-cost-ab/v1",
                      "rounds": a.rounds,
                      "kernel": a.kernel_version or "the layout's",
                      "accel": result.get("accel"),
                      "summary": summary(runs),
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
