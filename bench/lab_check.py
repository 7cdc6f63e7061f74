#!/usr/bin/env python3
"""Verdicts of `vsched lab check` per layout: passes, fails, disturbed.

Runs each layout's check N times and reports, per layout, how many runs
passed, failed or were DISTURBED (exit 3: host steal or another task on the
vCPUs' host CPUs, see docs/lab.md), the longest run of consecutive passes
and whether every run passed; per scored item, how often it passed among
the undisturbed runs and what it measured when it failed; and what each
disturbed verdict said.

With --hog CPU a busy loop (a CPU-bound process at normal priority) runs
pinned to that host CPU for the whole benchmark, as a noisy tenant would;
it is stopped on every way out (also if this script is killed: it dies
with its parent).

Usage: sudo bench/lab_check.py [--runs N] [--hog CPU] [--json FILE] [LAYOUT ...]
"""
import argparse, collections, ctypes, json, os, signal, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.environ.get("VSCHED", os.path.join(ROOT, "target", "release", "vsched"))
DEFAULT = ["two-free", "stacked-pair", "capped-30pct", "becomes-stacked"]
EXIT_VERDICT = {0: "pass", 1: "fail", 3: "disturbed"}
PR_SET_PDEATHSIG = 1  # prctl option: signal the child when its parent dies


def start_hog(cpu):
    """A busy loop pinned to host CPU `cpu` that dies with this script."""
    libc = ctypes.CDLL(None, use_errno=True)

    def in_child():
        os.sched_setaffinity(0, {cpu})
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=in_child)


def check_once(path):
    out = subprocess.run([VSCHED, "lab", "check", "--json", path], capture_output=True, text=True)
    if out.returncode not in EXIT_VERDICT:
        raise SystemExit(f"lab check {path} could not run (exit {out.returncode}): {out.stderr}")
    r = json.loads(out.stdout)
    if r["verdict"] != EXIT_VERDICT[out.returncode]:
        raise SystemExit(f"exit {out.returncode} but verdict {r['verdict']}: {path}")
    return r


def longest_pass_streak(verdicts):
    best = cur = 0
    for v in verdicts:
        cur = cur + 1 if v == "pass" else 0
        best = max(best, cur)
    return best


def bench_layout(name, runs, log):
    path = name if name.endswith(".toml") else os.path.join(ROOT, "lab", "layouts", name + ".toml")
    verdicts, items, disturbed = [], collections.OrderedDict(), []
    for i in range(runs):
        r = check_once(path)
        log.append({"layout": name, "run": i + 1, "result": r})
        verdicts.append(r["verdict"])
        print(f"  {name} run {i + 1}/{runs}: {r['verdict']}", file=sys.stderr, flush=True)
        if r["verdict"] == "disturbed":
            disturbed.extend(d["description"] for d in r["disturbances"])
            continue
        for s in r["scored"]:
            for it in s["items"]:
                if not it["scored"]:
                    continue
                ok_bad = items.setdefault(f"{s['when']}: {it['what']}", [0, 0, []])
                ok_bad[1] += 1
                if it["pass"]:
                    ok_bad[0] += 1
                else:
                    ok_bad[2].append(f"{it['measured']} ({it['expected'].split(' (')[0]})")
    return verdicts, items, disturbed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--hog", type=int, metavar="CPU", help="run a busy loop pinned to this host CPU meanwhile")
    ap.add_argument("--json", metavar="FILE", help="also write every check's JSON here")
    ap.add_argument("layouts", nargs="*", default=DEFAULT)
    a = ap.parse_args()
    hog = start_hog(a.hog) if a.hog is not None else None
    # SIGTERM ends the script through the finally below, stopping the hog.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log, summary = [], []
    try:
        print(f"{a.runs} runs per layout" + (f", busy loop pinned to host CPU {a.hog}" if hog else ", no hog"))
        print()
        print("| layout | pass | fail | disturbed | longest run of consecutive passes | all passed |")
        print("|---|---|---|---|---|---|")
        details = []
        for name in a.layouts:
            verdicts, items, disturbed = bench_layout(name, a.runs, log)
            n = collections.Counter(verdicts)
            streak = longest_pass_streak(verdicts)
            all_passed = "yes" if streak == a.runs else "no"
            print(f"| {os.path.basename(name)} | {n['pass']} | {n['fail']} | {n['disturbed']} | {streak} of {a.runs} | {all_passed} |", flush=True)
            summary.append((name, verdicts))
            details.append((name, items, disturbed))
        print()
        print("Scored items in undisturbed runs (every item of a layout's first row; beyond it only items that failed):")
        print()
        print("| layout | item | passed | measured (expected) when it failed |")
        print("|---|---|---|---|")
        for name, items, _ in details:
            first = True
            for key, (ok, n, bad) in items.items():
                if ok == n and not first:
                    continue
                print(f"| {os.path.basename(name) if first else ''} | {key} | {ok}/{n} | {', '.join(bad)} |")
                first = False
        for name, _, disturbed in details:
            if disturbed:
                print(f"\n{os.path.basename(name)}, disturbed verdicts:")
                for d in disturbed:
                    print(f"- {d}")
        print()
        for name, verdicts in summary:
            print(f"{os.path.basename(name)}: {' '.join(v[0].upper() for v in verdicts)}  (P pass, F fail, D disturbed)")
    finally:
        if hog:
            hog.kill()
            hog.wait()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(log, f)


if __name__ == "__main__":
    main()
