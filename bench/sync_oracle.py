#!/usr/bin/env python3
"""The sync runtime (`vsched exec`) under three schedulers in one lab guest:
the kernel's default, scx_bpfland (an independent sched_ext scheduler, the
oracle for "what sched_ext itself costs here") and `vsched sched`. Every
round boots one 2-vCPU guest and runs each case under the three in turn,
the order rotated per round. Prints medians (ns per op) and each sched_ext
scheduler's time over the default's; --json FILE keeps every run.

    sudo python3 bench/sync_oracle.py --rounds 3 --json out.json

Needs a release build (`cargo build --release -p vsched -p vsched-sync`),
scx_bpfland (scripts/install-scx.sh) and a C compiler.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from labround import build_syncbench, marked_samples, require, run_round

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULERS = ["default", "scx_bpfland", "vsched"]
# 8 threads on the guest's 2 vCPUs (4x); ops as `vsched bench sync --guest`
# sizes them (crates/bench/src/sync/guest.rs `ops`).
CASES = {
    "barrier": 5000,
    "cond-broadcast": 10000,
    "cond-signal": 10000,
    "spin-ring": 500,
}
THREADS = 8
MARK = "@@oracle"
# Until sched_ext reports the scheduler enabled (30 s), then settle 1 s.
WAIT_ENABLED = ('for i in $(seq 300); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] '
                '&& break; sleep 0.1; done; sleep 1')
WAIT_DISABLED = ('for i in $(seq 300); do [ "$(cat /sys/kernel/sched_ext/state)" = disabled ] '
                 '&& break; sleep 0.1; done')


def command(scheduler, case, ops, rnd):
    """One guest command: load `scheduler`, run the case under the runtime,
    unload; the state sched_ext was in is printed beside the result."""
    run = (f'echo "{MARK} {rnd} {scheduler} {case} $(cat /sys/kernel/sched_ext/state)"; '
           f'vsched exec -- syncbench {case} {THREADS} {ops}')
    lib = "export VSCHED_SYNC_LIB=/bin/libvsched_sync.so; "
    if scheduler == "default":
        return lib + run
    if scheduler == "scx_bpfland":
        load = "scx_bpfland >/dev/null 2>&1 & s=$!; "
        unload = "; kill -INT $s; wait $s"
    else:
        load = "vsched sched -q >/dev/null 2>&1 & s=$!; "
        unload = "; kill $s; wait $s"
    return lib + load + WAIT_ENABLED + "; " + run + unload + "; " + WAIT_DISABLED


def layout(binaries):
    lines = [
        'description = "sync runtime under default, scx_bpfland and vsched sched"',
        "vcpus = 2",
        'kernel = "sched_ext"',
        # scx_bpfland is a 9 MB binary; the initramfs lives in guest RAM.
        "memory_mib = 1024",
        "extra_binaries = [" + ", ".join(json.dumps(b) for b in binaries) + "]",
        "[[vcpu]]", "id = 0", "host_cpu = 0",
        "[[vcpu]]", "id = 1", "host_cpu = 1",
    ]
    return "\n".join(lines) + "\n"


def parse(output):
    runs = []
    for _, (rnd, scheduler, case, state), sample in marked_samples(output.splitlines(), MARK):
        expected = "disabled" if scheduler == "default" else "enabled"
        if state != expected or sample.get("loaded") != 1:
            print(f"left out: round {rnd} {scheduler} {case}: sched_ext {state}, "
                  f"runtime loaded {sample.get('loaded')}", file=sys.stderr)
            continue
        runs.append({"round": int(rnd), "scheduler": scheduler, "case": case, **sample})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernel-version", default="7.2.13")
    ap.add_argument("--vsched", default=os.path.join(ROOT, "target/release/vsched"))
    ap.add_argument("--library", default=os.path.join(ROOT, "target/release/libvsched_sync.so"))
    ap.add_argument("--scx-bpfland",
                    default=os.path.expanduser("~/.cache/vsched/lab/scx/bin/scx_bpfland"))
    ap.add_argument("--json", help="write every run and the medians here")
    a = ap.parse_args()
    require((a.vsched, a.library, a.scx_bpfland))
    with tempfile.TemporaryDirectory() as tmp:
        syncbench = build_syncbench(tmp)
        lay = os.path.join(tmp, "oracle.toml")
        with open(lay, "w") as f:
            f.write(layout([a.library, syncbench, a.scx_bpfland]))
        runs = []
        for rnd in range(a.rounds):
            order = SCHEDULERS[rnd % 3:] + SCHEDULERS[:rnd % 3]
            args = [a.vsched, "lab", "run", lay, "--kernel-version", a.kernel_version]
            for case, ops in CASES.items():
                for s in order:
                    args += ["--cmd", command(s, case, ops, rnd)]
            runs += run_round(args, parse, rnd, a.rounds)
    rows = []
    for case in CASES:
        med = {}
        for s in SCHEDULERS:
            xs = [r["ns_per_op"] for r in runs if r["case"] == case and r["scheduler"] == s]
            med[s] = statistics.median(xs) if xs else None
        base = med["default"]
        rows.append({
            "case": case, "threads": THREADS,
            **{f"{s}_ns": med[s] for s in SCHEDULERS},
            "scx_bpfland_over_default": med["scx_bpfland"] / base if base and med["scx_bpfland"] else None,
            "vsched_over_default": med["vsched"] / base if base and med["vsched"] else None,
        })
    print(f"{'case':16}{'default':>10}{'bpfland':>10}{'vsched':>10}{'bpfland/def':>13}{'vsched/def':>12}")
    for r in rows:
        print(f"{r['case']:16}{r['default_ns']:>10.0f}{r['scx_bpfland_ns']:>10.0f}{r['vsched_ns']:>10.0f}"
              f"{r['scx_bpfland_over_default']:>13.2f}{r['vsched_over_default']:>12.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "vsched.bench-sync-oracle/v1", "kernel_version": a.kernel_version,
                       "rounds": a.rounds, "threads": THREADS, "rows": rows, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
