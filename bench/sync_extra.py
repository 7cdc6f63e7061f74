#!/usr/bin/env python3
"""Two supporting measurements of the synchronisation runtime (`vsched exec`).

beside   the pthread stress program (crates/sync/tests/c/stress.c: 8 threads,
         300,000 operations, seed 1) with glibc and under `vsched exec`,
         alone and beside 2 and 4 CPU-bound loops (other programs' runnable
         threads: a waiter should sleep, not yield, when they fill the vCPUs).
admission  `syncbench spinlock 8 300000` (0.3 us critical section) with
         glibc, under `vsched exec` and under `vsched exec --admission`
         (I-Spinlock's predictor), with the runtime's statistics: how many
         holds had their holder switched out.

Variants alternate within each round; medians are printed, every run kept.

Usage: python3 bench/sync_extra.py [--runs N] [--only beside|admission] [--json FILE]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.environ.get("VSCHED", os.path.join(ROOT, "target", "release", "vsched"))
STRESS_OPS = 300_000
SPIN_OPS = 300_000


def compile_c(src, out, *flags):
    subprocess.run(["cc", "-O2", "-pthread", "-o", out, src, *flags], check=True)


def timed(cmd):
    t0 = time.monotonic()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.monotonic() - t0, done.stdout


def hogs(n):
    """n CPU-bound loops that stand for other programs."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def beside(tmp, runs):
    stress = os.path.join(tmp, "stress")
    compile_c(os.path.join(ROOT, "crates/sync/tests/c/stress.c"), stress, "-ldl")
    args = [stress, "-o", str(STRESS_OPS), "-t", "8", "-s", "1"]
    rows = []
    for loops in (0, 2, 4):
        times = {"glibc": [], "vsched": []}
        for _ in range(runs):
            started = hogs(loops)
            try:
                for variant in ("glibc", "vsched"):
                    cmd = args if variant == "glibc" else [VSCHED, "exec", "--", *args]
                    times[variant].append(timed(cmd)[0])
            finally:
                for p in started:
                    p.kill()
                    p.wait()
        rows.append({"cpu_bound_loops": loops, "elapsed_s": times})
        print(f"| stress beside {loops} loops | glibc {statistics.median(times['glibc']):.2f} s "
              f"| vsched {statistics.median(times['vsched']):.2f} s |")
    return rows


def admission(tmp, runs):
    bench = os.path.join(tmp, "syncbench")
    compile_c(os.path.join(ROOT, "crates/bench/c/syncbench.c"), bench, "-ldl")
    args = [bench, "spinlock", "8", str(SPIN_OPS)]
    runs_out = []
    for _ in range(runs):
        for variant, extra in (("glibc", None), ("vsched", []), ("vsched-admission", ["--admission"])):
            stats = os.path.join(tmp, f"stats-{variant}.json")
            if extra is None:
                cmd = args
            else:
                cmd = [VSCHED, "exec", *extra, "--stats-json", stats, "--", *args]
            _, out = timed(cmd)
            sample = json.loads(out.strip().splitlines()[-1])
            entry = {"variant": variant, "ns_per_op": sample["ns_per_op"]}
            if extra is not None:
                with open(stats) as f:
                    entry["runtime_stats"] = json.load(f)
                os.unlink(stats)
            runs_out.append(entry)
    for variant in ("glibc", "vsched", "vsched-admission"):
        ns = [r["ns_per_op"] for r in runs_out if r["variant"] == variant]
        print(f"| spinlock, {variant} | {statistics.median(ns):.0f} ns/acquisition |")
    return runs_out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["beside", "admission"])
    ap.add_argument("--json", metavar="FILE", help="also write every run here")
    a = ap.parse_args()
    if not os.path.exists(VSCHED):
        sys.exit(f"{VSCHED} not found: run `cargo build --release` first")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    report = {"schema": "vsched-bench-sync-extra-v1", "runs": a.runs, "checkout_head": rev.stdout.strip() or None,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "vcpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="vsched-sync-extra-") as tmp:
        if a.only in (None, "beside"):
            report["beside"] = beside(tmp, a.runs)
        if a.only in (None, "admission"):
            report["admission"] = admission(tmp, a.runs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
