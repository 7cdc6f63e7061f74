#!/usr/bin/env python3
"""Accuracy of `vsched probe` against a SCHED_FIFO neighbour it does not know of.

For each (on, period) the script starts a child process pinned to the last
vCPU at SCHED_FIFO 50 that spins `on` ms of every `period` ms, runs
`vsched probe --json --only capacity,activity` N times, and reports median
measured available share and episode mean against the truth. Needs root.

Usage: bench/neighbour_accuracy.py [--runs N] [--json FILE]
Prints a Markdown table; --json FILE also writes every probe's figures.
"""
import argparse, json, multiprocessing, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.environ.get("VSCHED", os.path.join(ROOT, "target", "release", "vsched"))


def commit():
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def neighbour(cpu, on_ms, period_ms, life_s):
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    on, period = on_ms * 1_000_000, period_ms * 1_000_000
    end = time.monotonic_ns() + int(life_s * 1e9)
    nxt = time.monotonic_ns()
    while time.monotonic_ns() < end:
        busy = nxt + on
        while time.monotonic_ns() < busy:
            pass
        nxt += period
        delay = (nxt - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", metavar="FILE", help="also write the raw figures here")
    a = ap.parse_args()
    rows = []
    cpu = max(os.sched_getaffinity(0))
    print("| neighbour on vCPU %d | truth avail%% | measured avail%% (median) | truth episode ms | measured mean ms (median) | other vCPUs avail%% (min) |" % cpu)
    print("|---|---|---|---|---|---|")
    for on, period in [(1, 10), (2, 10), (5, 10), (7, 10), (1, 4), (10, 40)]:
        p = multiprocessing.Process(target=neighbour, args=(cpu, on, period, 3 + a.runs * 0.6), daemon=True)
        p.start()
        time.sleep(0.2)
        avail, mean, others = [], [], []
        try:
            for _ in range(a.runs):
                out = subprocess.run([VSCHED, "probe", "--json", "--only", "capacity,activity"], check=True, capture_output=True, text=True)
                r = json.loads(out.stdout)
                for v in r["vcpus"]:
                    if v["cpu"] == cpu:
                        avail.append(v["available_pct"])
                        mean.append(v["episodes"]["mean_us"] / 1000)
                    else:
                        others.append(v["available_pct"])
        finally:
            p.terminate()
            p.join()
        print(f"| {on} of {period} ms | {100 * (1 - on / period):.0f} | {statistics.median(avail):.1f} | {on} | {statistics.median(mean):.2f} | {min(others):.1f} |")
        rows.append({"neighbour_cpu": cpu, "on_ms": on, "period_ms": period,
                     "truth_available_pct": 100 * (1 - on / period),
                     "available_pct": avail, "episode_mean_ms": mean, "others_available_pct": others})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "vsched-bench-neighbour-v1", "runs": a.runs,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "checkout_head": commit(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("needs root (SCHED_FIFO neighbour)")
    main()
