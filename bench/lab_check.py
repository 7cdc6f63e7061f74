#!/usr/bin/env python3
"""Pass rates of `vsched lab check` per layout and per item.

Runs each shipped layout's check N times and reports, per scored item, how
often it passed and the spread of measured against expected values.

Usage: sudo bench/lab_check.py [--runs N] [LAYOUT ...]
"""
import argparse, collections, json, os, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.environ.get("VSCHED", os.path.join(ROOT, "target", "release", "vsched"))
DEFAULT = ["two-free", "stacked-pair", "capped-30pct", "becomes-stacked"]

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--runs", type=int, default=10)
ap.add_argument("layouts", nargs="*", default=DEFAULT)
a = ap.parse_args()
print("| layout | whole check passed | item | item passed | measured (expected) in failing runs |")
print("|---|---|---|---|---|")
for name in a.layouts:
    path = name if name.endswith(".toml") else os.path.join(ROOT, "lab", "layouts", name + ".toml")
    passes, items = 0, collections.OrderedDict()
    for _ in range(a.runs):
        out = subprocess.run([VSCHED, "lab", "check", "--json", path], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            raise SystemExit(f"lab check {name} could not run: {out.stderr}")
        r = json.loads(out.stdout)
        passes += r["pass"]
        for s in r["scored"]:
            for i in s["items"]:
                if not i["scored"]:
                    continue
                key = f"{s['when']}: {i['what']}"
                ok, bad = items.setdefault(key, [0, []])
                items[key][0] += i["pass"]
                if not i["pass"]:
                    bad.append(f"{i['measured']} ({i['expected'].split(' (')[0]})")
    first = True
    for key, (ok, bad) in items.items():
        if ok == a.runs and not first:
            continue
        print(f"| {os.path.basename(name) if first else ''} | {f'{passes}/{a.runs}' if first else ''} | {key} | {ok}/{a.runs} | {', '.join(bad)} |")
        first = False
