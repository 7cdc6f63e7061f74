#!/usr/bin/env python3
"""I-Spinlock's Fig. 7 in miniature: a spinlock with a long critical section
in a 2-vCPU guest whose vCPU 1 the host switches off 7 ms of every 10 (the
capped layout), with `vsched sched` loaded. Each round boots one guest and
runs, in an order rotated per round:

  glibc          the program alone (glibc's spinlock);
  vsched         `vsched exec` (the runtime's spinlock, admission off);
  admission      `vsched exec --admission` (admission by the scheduler's
                 channel: no lock taken just before a predicted switch-off).

Both runtime variants count, through the channel, the holds their vCPU was
switched off in (`holds_switched_off`, the paper's problematic spin
preemptions). Prints medians and admission's ratios over `vsched`;
--json FILE keeps every run.

    sudo python3 bench/ispinlock.py --rounds 5 --json out.json

Needs a release build (`cargo build --release -p vsched -p vsched-sync`)
and a C compiler.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from labround import build_syncbench, marked_samples, require, run_round

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ["glibc", "vsched", "admission"]
CASE = "spinlock-long"
MARK = "@@ispin"
# Until sched_ext reports the scheduler enabled (30 s), then let the
# probers' model and the heartbeat's rhythm settle.
WAIT_ENABLED = ('for i in $(seq 300); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] '
                '&& break; sleep 0.1; done; sleep 3')


def command(variant, threads, ops, rnd):
    """One guest command: the case under `variant`, its result line and,
    for the runtime, its statistics after the mark."""
    head = f'echo "{MARK} {rnd} {variant} {threads} $(cat /sys/kernel/sched_ext/state)"; '
    prog = f"syncbench {CASE} {threads} {ops}"
    if variant == "glibc":
        return head + prog
    flag = "--admission " if variant == "admission" else ""
    return (head + f"vsched exec {flag}--stats-json /tmp/s.json -- {prog}; "
            f'echo "{MARK}-stats $(cat /tmp/s.json)"')


def layout(binaries):
    """lab/sched/capped-30pct.toml, carrying `binaries` into the guest."""
    with open(os.path.join(ROOT, "lab/sched/capped-30pct.toml")) as f:
        text = f.read()
    # A top-level key, so it goes before the layout's [[vcpu]] tables.
    return "extra_binaries = [" + ", ".join(json.dumps(b) for b in binaries) + "]\n" + text


def parse(output):
    runs, lines = [], output.splitlines()
    for i, (rnd, variant, threads, state), sample in marked_samples(lines, MARK):
        counters = {}
        for later in lines[i + 2:i + 6]:
            if later.startswith(MARK + " "):
                break  # the next run's: this one printed no statistics
            if later.startswith(MARK + "-stats "):
                try:
                    counters = json.loads(later.split(" ", 1)[1])["counters"]
                except (json.JSONDecodeError, KeyError, IndexError):
                    pass
                break
        expected_loaded = 0 if variant == "glibc" else 1
        if state != "enabled" or sample.get("loaded") != expected_loaded:
            print(f"left out: round {rnd} {variant}: sched_ext {state}, "
                  f"runtime loaded {sample.get('loaded')}", file=sys.stderr)
            continue
        runs.append({"round": int(rnd), "variant": variant, "threads": int(threads),
                     "counters": counters, **sample})
    return runs


def median_of(runs, variant, threads, key):
    xs = [key(r) for r in runs if r["variant"] == variant and r["threads"] == threads]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def switched_off_share(r):
    c = r["counters"]
    observed = c.get("holds_observed", 0)
    return c.get("holds_switched_off", 0) / observed if observed else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--ops", type=int, default=4000,
                    help="critical sections per run (default 4000: a few seconds under TCG)")
    ap.add_argument("--kernel-version", default="7.2.13")
    ap.add_argument("--vsched", default=os.path.join(ROOT, "target/release/vsched"))
    ap.add_argument("--library", default=os.path.join(ROOT, "target/release/libvsched_sync.so"))
    ap.add_argument("--json", help="write every run and the medians here")
    a = ap.parse_args()
    require((a.vsched, a.library))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        syncbench = build_syncbench(tmp)
        lay = os.path.join(tmp, "ispinlock.toml")
        with open(lay, "w") as f:
            f.write(layout([a.library, syncbench]))
        for rnd in range(a.rounds):
            order = VARIANTS[rnd % 3:] + VARIANTS[:rnd % 3]
            # One shell for the round: the scheduler stays loaded across it.
            script = ["export VSCHED_SYNC_LIB=/bin/libvsched_sync.so",
                      "vsched sched -q >/dev/null 2>&1 & s=$!", WAIT_ENABLED]
            for threads in a.threads:
                for v in order:
                    script.append(command(v, threads, a.ops, rnd))
            script.append("kill $s; wait $s")
            args = [a.vsched, "lab", "run", lay, "--kernel-version", a.kernel_version,
                    "--cmd", "; ".join(script)]
            runs += run_round(args, parse, rnd, a.rounds)
    rows = []
    for threads in a.threads:
        row = {"case": CASE, "threads": threads}
        for v in VARIANTS:
            row[f"{v}_ns_per_op"] = median_of(runs, v, threads, lambda r: r["ns_per_op"])
        for v in ("vsched", "admission"):
            row[f"{v}_switched_off_share"] = median_of(runs, v, threads, switched_off_share)
            row[f"{v}_admission_waits"] = median_of(
                runs, v, threads, lambda r: r["counters"].get("admission_waits"))
        base, adm = row["vsched_ns_per_op"], row["admission_ns_per_op"]
        row["admission_throughput_over_vsched"] = base / adm if base and adm else None
        glibc = row["glibc_ns_per_op"]
        row["admission_throughput_over_glibc"] = glibc / adm if glibc and adm else None
        so_base, so_adm = row["vsched_switched_off_share"], row["admission_switched_off_share"]
        row["switched_off_holds_cut"] = (1 - so_adm / so_base
                                         if so_base and so_adm is not None else None)
        rows.append(row)
    print(f"{'threads':>8}{'glibc ns':>10}{'vsched ns':>11}{'adm. ns':>10}"
          f"{'adm/vsched':>11}{'adm/glibc':>10}{'off% vsched':>12}{'off% adm':>10}")
    for r in rows:
        def f(x, fmt):
            return format(x, fmt) if x is not None else "-"
        print(f"{r['threads']:>8}{f(r['glibc_ns_per_op'], '>10.0f')}"
              f"{f(r['vsched_ns_per_op'], '>11.0f')}{f(r['admission_ns_per_op'], '>10.0f')}"
              f"{f(r['admission_throughput_over_vsched'], '>11.2f')}"
              f"{f(r['admission_throughput_over_glibc'], '>10.2f')}"
              f"{f(r['vsched_switched_off_share'] and 100 * r['vsched_switched_off_share'], '>12.2f')}"
              f"{f(r['admission_switched_off_share'] and 100 * r['admission_switched_off_share'], '>10.2f')}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "vsched.bench-ispinlock/v1", "kernel_version": a.kernel_version,
                       "rounds": a.rounds, "ops": a.ops, "rows": rows, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
