#!/usr/bin/env python3
"""What host steal does to a `vsched lab check`: emulated steal, scored items.

The lab voids (DISTURBED) a check whose host CPUs lost more than
`vsched_lab::disturb::STEAL_LIMIT` of the span to this machine's own
hypervisor. That limit must sit below the steal at which a good probe
starts to fail its scored items. Steal cannot be made on demand, so this
emulates it: on every host CPU the layout uses, a SCHED_FIFO thread takes
the CPU for BURST_MS at a time, LEVEL of the time, as a hypervisor taking
the physical CPU from under a vCPU thread does (the thread stops wherever
it is, holding whatever TCG lock it holds). The host's scheduler sees the
emulation (as the vCPU threads' run delay), which real steal is not, so the
scored items are read whatever the verdict.

Levels are interleaved within each round (0% first), so that a slow spell
of the host hits every level alike. Prints one JSON document: every run's
scored items and host evidence, and per layout and level the share of runs
whose scored items all passed.

  python3 bench/host_steal_effect.py target/release/vsched \
      --layouts becomes-stacked capped-30pct --levels 0 3 5 8 12 --rounds 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def inject(host_cpu, level, burst_ms, stop_at):
    """Child process body: take `host_cpu` for `burst_ms` at a time, `level`
    of the time, until `stop_at` (monotonic seconds)."""
    os.sched_setaffinity(0, {host_cpu})
    # Priority 1: above every CFS task (the vCPU threads, QEMU's main loop),
    # below the kernel's own RT threads; RT throttling (95%) still bounds it.
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    on_s = burst_ms / 1000.0
    off_s = on_s * (1.0 - level) / level
    while time.monotonic() < stop_at:
        end = time.monotonic() + on_s
        while time.monotonic() < end:
            pass
        time.sleep(off_s)
    os._exit(0)


def host_cpus(layout_path):
    """Host CPUs a layout pins vCPUs to, in any phase (tomllib: Python 3.11+)."""
    import tomllib

    with open(layout_path, "rb") as f:
        layout = tomllib.load(f)
    cpus = {v["host_cpu"] for v in layout.get("vcpu", []) if "host_cpu" in v}
    for phase in layout.get("phase", []):
        cpus |= {v["host_cpu"] for v in phase.get("vcpu", []) if "host_cpu" in v}
    return sorted(cpus)


def scored_failures(check):
    return [
        f"{item['what']}: expected {item['expected']}, measured {item['measured']}"
        for s in check["scored"]
        for item in s["items"]
        if item["scored"] and not item["pass"]
    ]


def max_real_steal(run):
    return max((e["measured_pct"] for e in run["host_evidence"] if e["kind"] == "host_steal"),
               default=0.0)


def one_check(vsched, layout_path, level, burst_ms, cpus, timeout_s):
    children = []
    if level > 0:
        stop_at = time.monotonic() + timeout_s
        for cpu in cpus:
            pid = os.fork()
            if pid == 0:
                inject(cpu, level, burst_ms, stop_at)
            children.append(pid)
    try:
        out = subprocess.run(
            [vsched, "lab", "check", "--json", layout_path],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    finally:
        for pid in children:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    if out.returncode not in (0, 1, 3):
        raise RuntimeError(f"lab check failed ({out.returncode}): {out.stderr[-2000:]}")
    check = json.loads(out.stdout)
    return {
        "level_pct": level * 100,
        "verdict": check["verdict"],
        "scored_failures": scored_failures(check),
        "scored_pass": not scored_failures(check),
        "host_evidence": [
            {k: e[k] for k in ("kind", "host_cpu", "vcpu", "from_s", "to_s", "measured_pct")}
            for e in check["host_evidence"]
        ],
        "items": [
            {k: item[k] for k in ("what", "expected", "measured", "pass", "scored")}
            for s in check["scored"]
            for item in s["items"]
        ],
    }


def summarise(runs):
    """Per layout and emulated level, and per level and bucket of real steal:
    how many runs' scored items all passed."""
    layouts = list(dict.fromkeys(r["layout"] for r in runs))
    levels = sorted({r["level_pct"] for r in runs})
    summary = []
    for name in layouts:
        for lvl in levels:
            these = [r for r in runs if r["layout"] == name and r["level_pct"] == lvl]
            def evidence(kind):
                return [e["measured_pct"] for r in these for e in r["host_evidence"]
                        if e["kind"] == kind]
            waited, stolen = evidence("waited_for_cpu"), evidence("host_steal")
            summary.append({
                "layout": name,
                "level_pct": lvl,
                "runs": len(these),
                "scored_pass": sum(r["scored_pass"] for r in these),
                "median_vcpu_waited_pct": statistics.median(waited) if waited else None,
                # Real steal, by this machine's hypervisor, on top of the emulated.
                "median_real_host_steal_pct": statistics.median(stolen) if stolen else None,
                "max_real_host_steal_pct": max(stolen) if stolen else None,
            })
    # Real steal varies by itself from run to run: each run by the most any
    # of its host CPUs lost, whatever the emulated level.
    buckets = [(0, 2), (2, 5), (5, 10), (10, 100)]
    by_real_steal = []
    for lvl in levels:
        for lo, hi in buckets:
            these = [r for r in runs if r["level_pct"] == lvl and lo <= max_real_steal(r) < hi]
            by_real_steal.append({
                "level_pct": lvl, "real_steal_from_pct": lo, "real_steal_below_pct": hi,
                "runs": len(these), "scored_pass": sum(r["scored_pass"] for r in these),
            })
    return summary, by_real_steal


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vsched", help="the vsched binary")
    ap.add_argument("--layouts", nargs="+", default=["becomes-stacked", "capped-30pct"],
                    help="layouts under lab/layouts/ (default: %(default)s)")
    ap.add_argument("--levels", nargs="+", type=float, default=[0, 3, 5, 8, 12],
                    help="emulated steal, percent of each host CPU (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=4, help="runs per layout and level")
    ap.add_argument("--burst-ms", type=float, default=2.0,
                    help="length of one emulated steal (default: %(default)s ms)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per check")
    ap.add_argument("--reanalyse", nargs="+", metavar="JSON",
                    help="summarise the runs of earlier outputs (merged) instead of running")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.reanalyse:
        docs = [json.load(open(f)) for f in args.reanalyse]
        runs = [r for d in docs for r in d["runs"]]
        summary, by_real_steal = summarise(runs)
        json.dump({**docs[0], "merged_from": args.reanalyse, "summary": summary,
                   "by_real_steal": by_real_steal, "runs": runs}, sys.stdout, indent=1)
        print()
        return
    if os.geteuid() != 0:
        sys.exit("needs root: the lab pins vCPUs, and the emulated steal is SCHED_FIFO")
    if any(not 0 <= lvl < 50 for lvl in args.levels):
        sys.exit("--levels are percentages in [0, 50)")

    runs = []
    for rnd in range(args.rounds):
        for name in args.layouts:
            path = os.path.join(root, "lab", "layouts", f"{name}.toml")
            cpus = host_cpus(path)
            for lvl in args.levels:
                r = one_check(args.vsched, path, lvl / 100, args.burst_ms, cpus, args.timeout)
                r.update(layout=name, round=rnd)
                runs.append(r)
                print(f"round {rnd} {name} {lvl:g}%: {r['verdict']}, scored "
                      f"{'pass' if r['scored_pass'] else r['scored_failures']}",
                      file=sys.stderr, flush=True)

    summary, by_real_steal = summarise(runs)
    json.dump({
        "schema": "vsched.bench.host-steal-effect/v1",
        "date": time.strftime("%Y-%m-%d"),
        "commit": subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip(),
        "burst_ms": args.burst_ms,
        "summary": summary,
        "by_real_steal": by_real_steal,
        "runs": runs,
    }, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
