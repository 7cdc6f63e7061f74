#!/usr/bin/env python3
"""Guest boot time of the VM lab: QEMU start to the guest's first command.

Usage: sudo bench/lab_boot.py [--runs N] [--json FILE] [LAYOUT ...]
Prints the median and range per layout (default: the shipped 2- and 3-vCPU
layouts); --json FILE also writes every boot time and the QEMU version.
"""
import argparse, json, os, statistics, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.environ.get("VSCHED", os.path.join(ROOT, "target", "release", "vsched"))

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--runs", type=int, default=9)
ap.add_argument("--json", metavar="FILE", help="also write the raw figures here")
ap.add_argument("layouts", nargs="*", default=["lab/layouts/two-free.toml", "lab/layouts/stacked-pair.toml"])
a = ap.parse_args()
rows = []
print("| layout | boot to first command, median | min | max | accelerator |")
print("|---|---|---|---|---|")
for layout in a.layouts:
    times, accel = [], ""
    for _ in range(a.runs):
        out = subprocess.run([VSCHED, "lab", "run", "--json", os.path.join(ROOT, layout), "--cmd", "true"],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout)
        times.append(r["boot_ms"])
        accel = r["accel"]
    print(f"| {os.path.basename(layout)} | {statistics.median(times):.0f} ms | {min(times):.0f} ms | {max(times):.0f} ms | {accel} |")
    rows.append({"layout": layout, "accel": accel, "boot_ms": times})
if a.json:
    qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(a.json, "w") as f:
        json.dump({"schema": "vsched-bench-lab-boot-v1", "runs": a.runs, "checkout_head": rev or None,
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "qemu": qemu[0] if qemu else None, "rows": rows}, f, indent=1)
