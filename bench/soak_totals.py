#!/usr/bin/env python3
"""Totals of several `vsched bench soak --json` runs, per kernel and variant.

A soak's volume goal (docs/benchmarks.md, "Soak") is per kernel: cycles and
loaded time summed over every run made on it. This adds the runs up and
gives each rate's 95% upper bound (Wilson, as the soak itself reports it),
as a Markdown table or, with --json, as JSON.

    python3 bench/soak_totals.py bench/results/*-soak-*.json
    python3 bench/soak_totals.py --json bench/results/2026-11-28-*-soak-*.json
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict

# 95% two-sided normal quantile, squared: the Wilson interval's z^2.
Z2 = 1.959964 ** 2


def wilson_high(events, trials):
    """Upper end of the Wilson 95% interval for events/trials."""
    if trials == 0:
        return 1.0
    p = events / trials
    centre = p + Z2 / (2 * trials)
    spread = Z2 ** 0.5 * ((p * (1 - p) + Z2 / (4 * trials)) / trials) ** 0.5
    return (centre + spread) / (1 + Z2 / trials)


def totals(paths):
    rows = defaultdict(lambda: {"runs": 0, "guests": 0, "cycles": 0, "failed": 0,
                                "panics": 0, "loaded_s": 0.0, "loads_s": []})
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        kernel = run["kernel"].split("+")[0]
        seen = set()
        for g in run["guests"]:
            row = rows[(kernel, g["variant"])]
            if g["variant"] not in seen:
                row["runs"] += 1
                seen.add(g["variant"])
            row["guests"] += 1
            row["cycles"] += g["cycles_done"]
            row["failed"] += g["cycles_failed"]
            row["loaded_s"] += g["loaded_s"]
            if g.get("median_load_s") is not None:
                row["loads_s"].append(g["median_load_s"])
        for s in run["summaries"]:
            rows[(kernel, s["variant"])]["panics"] += s["panics"] + s.get("panics_outside_cycles", 0)
    out = []
    for (kernel, variant), r in sorted(rows.items()):
        out.append({
            "kernel": kernel,
            "variant": variant,
            "runs": r["runs"],
            "guests": r["guests"],
            "cycles": r["cycles"],
            "cycles_failed": r["failed"],
            "panics": r["panics"],
            "panic_rate_high_95": wilson_high(r["panics"], r["cycles"]),
            "loaded_s": round(r["loaded_s"], 1),
            "median_load_s": round(statistics.median(r["loads_s"]), 2) if r["loads_s"] else None,
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="vsched bench soak --json outputs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    rows = totals(args.files)
    if args.json:
        json.dump({"schema": "vsched.soak-totals/v1", "files": args.files, "rows": rows},
                  sys.stdout, indent=1)
        print()
        return
    print("| kernel | variant | guests | cycles (failed) | panics | rate, 95% upper | loaded | median load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        load = "" if r["median_load_s"] is None else f"{r['median_load_s']:.1f} s"
        print(f"| {r['kernel']} | {r['variant']} | {r['guests']} | {r['cycles']} ({r['cycles_failed']}) "
              f"| {r['panics']} | {100 * r['panic_rate_high_95']:.1f}% | {r['loaded_s'] / 60:.0f} min | {load} |")


if __name__ == "__main__":
    main()
