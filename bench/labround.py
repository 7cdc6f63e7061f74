"""One round of a lab benchmark: boot a guest with `vsched lab run ARGS`,
parse what it printed, and stop the benchmark with the guest's output
when nothing could be parsed (a guest that failed to boot, a command
that did not run). Shared by the scripts that rotate variants over
rounds of guests (sync_oracle.py, ispinlock.py)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_round(args, parse, rnd, rounds):
    """`args`: the whole `vsched lab run` command line; `parse`: its
    stdout to a list of runs. Returns the runs; exits when there are none."""
    out = subprocess.run(args, capture_output=True, text=True)
    got = parse(out.stdout)
    if not got:
        sys.exit(f"round {rnd}: no result\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    print(f"round {rnd + 1} of {rounds}: {len(got)} runs", file=sys.stderr)
    return got


def marked_samples(lines, mark):
    """Each result a guest printed as a line `MARK FIELD...` followed by
    the program's JSON line: (index of the mark line, its fields after
    the mark, the parsed JSON). A mark whose next line is not JSON (the
    program failed) yields nothing."""
    for i, line in enumerate(lines):
        if not line.startswith(mark + " ") or i + 1 >= len(lines):
            continue
        try:
            sample = json.loads(lines[i + 1])
        except json.JSONDecodeError:
            continue
        yield i, line.split()[1:], sample


def require(paths):
    """Stops the benchmark naming the first of `paths` that is missing."""
    for path in paths:
        if not os.path.exists(path):
            sys.exit(f"missing {path} (see this script's docstring)")


def build_syncbench(directory):
    """crates/bench/c/syncbench.c compiled into `directory`; its path."""
    exe = os.path.join(directory, "syncbench")
    subprocess.run(["cc", "-O2", "-pthread", "-o", exe,
                    os.path.join(ROOT, "crates/bench/c/syncbench.c")], check=True)
    return exe


def run_guest_script(vsched, layout, script, args, extra=(), timeout_s=None,
                     kernel_version=None):
    """Boots one guest of `layout` with `vsched lab run --json`, carrying
    `extra` (paths) and `script` (its text, run as `guest-script ARGS`,
    stderr with stdout) into its /bin; `timeout_s`: the guest commands'
    limit. Returns `lab run`'s JSON; stops the benchmark with the lab's
    output when the run failed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "guest-script")
        with open(path, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        listed = ", ".join(json.dumps(os.path.abspath(p)) for p in [*extra, path])
        with open(layout) as f:
            text = f.read()
        head = f"extra_binaries = [{listed}]\n"
        if timeout_s:
            head += f"run_timeout_s = {timeout_s}\n"
        layout_path = os.path.join(tmp, "layout.toml")
        with open(layout_path, "w") as f:
            f.write(head + text)
        cmd = [vsched, "lab", "run", "--json", "--cmd", f"guest-script {args} 2>&1"]
        if kernel_version:
            cmd += ["--kernel-version", kernel_version]
        out = subprocess.run(cmd + [layout_path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"lab run failed ({out.returncode}):\n{out.stderr[-3000:]}\n{out.stdout[-3000:]}")
    return json.loads(out.stdout)
