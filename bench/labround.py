"""One round of a lab benchmark: boot a guest with `vsched lab run ARGS`,
parse what it printed, and stop the benchmark with the guest's output
when nothing could be parsed (a guest that failed to boot, a command
that did not run). Shared by the scripts that rotate variants over
rounds of guests (sync_oracle.py, ispinlock.py)."""
import subprocess
import sys


def run_round(args, parse, rnd, rounds):
    """`args`: the whole `vsched lab run` command line; `parse`: its
    stdout to a list of runs. Returns the runs; exits when there are none."""
    out = subprocess.run(args, capture_output=True, text=True)
    got = parse(out.stdout)
    if not got:
        sys.exit(f"round {rnd}: no result\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    print(f"round {rnd + 1} of {rounds}: {len(got)} runs", file=sys.stderr)
    return got
