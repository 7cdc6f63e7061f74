#!/usr/bin/env python3
"""Detector overhead, A/B: a compute kernel alone, under one vsched binary's
`run --spin-detect`, and under another's, alternating, medians.

The program always comes from the first binary, so only the detector
differs between the two measured columns.

  python3 bench/spin_overhead_ab.py NEW_VSCHED OLD_VSCHED \
      --kernels stencil,hash --reps 9 --passes 30000
"""
import argparse
import json
import statistics
import subprocess


def elapsed(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["elapsed_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", help="vsched binary under test (also runs the program)")
    ap.add_argument("old", help="vsched binary to compare with")
    ap.add_argument("--kernels", default="stencil,hash")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--passes", default="30000", help="kernel passes (about 1 s for 30000 stencil)")
    ap.add_argument("--threads", default="2", help="program threads (default: 2, one per vCPU here)")
    a = ap.parse_args()
    for kernel in a.kernels.split(","):
        prog = [a.new, "spin-zoo", "compute", "--kernel", kernel,
                "--threads", a.threads, "--passes", a.passes]
        times = {"alone": [], "old": [], "new": []}
        for _ in range(a.reps):
            times["alone"].append(elapsed(prog))
            times["old"].append(elapsed([a.old, "run", "--spin-detect", "--"] + prog))
            times["new"].append(elapsed([a.new, "run", "--spin-detect", "--"] + prog))
        alone = statistics.median(times["alone"])
        pct = {k: 100 * (statistics.median(v) / alone - 1) for k, v in times.items() if k != "alone"}
        print(f"{kernel}: alone {alone:.3f} s, old detector {pct['old']:+.2f}%, "
              f"new detector {pct['new']:+.2f}% (medians of {a.reps})")


if __name__ == "__main__":
    main()
