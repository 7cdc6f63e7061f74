#!/usr/bin/env python3
"""Spinner descheduling through the scheduler's channel, in a 2-vCPU
sched_ext guest (lab/sched/two-free.toml): the zoo's spinning pipeline at
4x (8 stages on 2 vCPUs) and 1x (2 stages). Each round boots one guest and
runs, in an order rotated per round:

  default          the program alone, the kernel's default scheduler;
  detect           `vsched run --spin-detect`, the default scheduler (the
                   detector stops spinners with ptrace or demotes them);
  sched            the program alone under `vsched sched`;
  sched-holds      `vsched run --spin-detect --no-channel` under `vsched
                   sched` (the detector's own holds);
  sched-channel    `vsched run --spin-detect` under `vsched sched` (spinners
                   marked in the channel, descheduled by the scheduler);

and, at 1x, `default` and `sched-channel` again. Prints the median time per
item of each and the ratios; --json FILE keeps every run, with the
detector's summary.

    sudo python3 bench/spin_channel.py --rounds 5 --json out.json

Needs a release build with the zoo (`cargo build --release --workspace`).
"""
import argparse
import json
import os
import statistics
import sys

from labround import marked_samples, require, run_round

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCHED = os.path.join(ROOT, "target/release/vsched")
ZOO = os.path.join(ROOT, "target/release/vsched-zoo")
MARK = "@@spinch"
VARIANTS_4X = ["default", "detect", "sched", "sched-holds", "sched-channel"]
VARIANTS_1X = ["default", "sched-channel"]
# (stages, items): 4x and 1x on 2 vCPUs; about 0.3-3 s a run under TCG.
SHAPES = {"4x": (8, 300), "1x": (2, 1000)}


def command(variant, shape, rnd):
    """One guest command: a mark line, the program's JSON line, and for
    the detector's variants its summary after `MARK-det`."""
    stages, items = SHAPES[shape]
    prog = f"vsched-zoo pipeline --stages {stages} --items {items}"
    if variant in ("detect", "sched-channel", "sched-holds"):
        flag = "--no-channel " if variant == "sched-holds" else ""
        prog = (f"vsched run --spin-detect {flag}--summary-out /tmp/d.json -- {prog} 2>/dev/null; "
                f'echo "{MARK}-det $(cat /tmp/d.json)"')
    inner = f'echo "{MARK} {rnd} {variant} {shape} $(cat /sys/kernel/sched_ext/state)"; {prog}'
    if variant.startswith("sched"):
        return f"vsched sched -q --no-probe -- sh -c '{inner}'"
    return inner


def layout():
    """lab/sched/two-free.toml, carrying the zoo into the guest."""
    with open(os.path.join(ROOT, "lab/sched/two-free.toml")) as f:
        text = f.read()
    return f"extra_binaries = [{json.dumps(ZOO)}]\n" + text


def parse(output):
    runs, lines = [], output.splitlines()
    for i, (rnd, variant, shape, state), sample in marked_samples(lines, MARK):
        detector = {}
        for later in lines[i + 2:i + 4]:
            if later.startswith(MARK + "-det "):
                try:
                    detector = json.loads(later.split(" ", 1)[1])
                except json.JSONDecodeError:
                    pass
        expected = "enabled" if variant.startswith("sched") else "disabled"
        if state != expected:
            print(f"left out: round {rnd} {variant} {shape}: sched_ext {state}", file=sys.stderr)
            continue
        runs.append({"round": int(rnd), "variant": variant, "shape": shape,
                     "us_per_item": 1e6 * sample["elapsed_s"] / sample["units"],
                     "program": sample, "detector": detector})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write every run and the medians to this file")
    args = ap.parse_args()
    require([VSCHED, ZOO])
    path = "/tmp/spin-channel-layout.toml"
    with open(path, "w") as f:
        f.write(layout())
    runs = []
    for rnd in range(args.rounds):
        cmds = [(v, "4x") for v in VARIANTS_4X] + [(v, "1x") for v in VARIANTS_1X]
        k = rnd % len(cmds)
        cmds = cmds[k:] + cmds[:k]
        lab = [VSCHED, "lab", "run", path]
        for v, shape in cmds:
            lab += ["--cmd", command(v, shape, rnd)]
        runs += run_round(lab, parse, rnd, args.rounds)
    medians = {}
    for shape, variants in (("4x", VARIANTS_4X), ("1x", VARIANTS_1X)):
        for v in variants:
            got = [r["us_per_item"] for r in runs if r["variant"] == v and r["shape"] == shape]
            if got:
                medians[f"{v}@{shape}"] = statistics.median(got)
    ratios = {}
    m = medians.get
    if m("sched-holds@4x") and m("sched-channel@4x"):
        ratios["channel_vs_holds_4x"] = m("sched-holds@4x") / m("sched-channel@4x")
    if m("sched@4x") and m("sched-channel@4x"):
        ratios["channel_vs_undetected_4x"] = m("sched@4x") / m("sched-channel@4x")
    if m("default@4x") and m("detect@4x"):
        ratios["detect_vs_undetected_default_4x"] = m("default@4x") / m("detect@4x")
    if m("sched-channel@1x") and m("sched-channel@4x"):
        ratios["channel_4x_vs_its_1x"] = m("sched-channel@4x") / m("sched-channel@1x")
    print(f"{'variant':<22} {'us/item (median)':>16} {'runs':>5}")
    for key, value in medians.items():
        v, shape = key.split("@")
        n = sum(1 for r in runs if r["variant"] == v and r["shape"] == shape)
        print(f"{key:<22} {value:>16.1f} {n:>5}")
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "medians_us_per_item": medians, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
