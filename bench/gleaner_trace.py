#!/usr/bin/env python3
"""Gleaner's Fig. 5 in miniature: the number of active vCPUs over time
beside the program's progress, for each form of vsched's consolidation
and the kernel's default scheduler, in one lab guest.

The program: a 2-thread barrier (schedbench's timeline, about 1 us of work
per round: one vCPU runs it faster than two) for 30 s, with two CPU-bound
threads beside it from 8 s on, a fixed amount of work each (demand that
needs both vCPUs; --burst-iters), whose time is its progress. Every
form runs it once per round, the order rotated round by round:

  default   the kernel's scheduler (every vCPU may be used: 2 active)
  sched     vsched sched --consolidate (sched_ext); active vCPUs from its
            --interval-json counters (active_vcpu_periods over
            consolidate_periods, every 250 ms)
  run       vsched run --consolidate (affinity); active vCPUs from its
            report's active_over_time (--consolidate-json: every change)
  daemon    vsched daemon --rwc-cgroup work --consolidate-cgroups (the
            cgroup's cpuset); active vCPUs read from cpuset.cpus.effective
            every 250 ms by a reader outside the cgroup

Only the daemon form has a reader of its own, outside what it reads (the
scheduler's consolidation counts every normal task, and would count one).
Every form's active vCPUs become a step function read on the barrier's
250 ms grid, so that a phase's mean is a time average. Prints JSON (schema
vsched.gleaner-trace/v1): every run's barrier rounds per second and
active-vCPU samples, the CPU-bound threads' time, and per form and phase
(before, burst, after; the burst ends when its threads do) the medians
over rounds; with --svg, the plot of the round whose whole-run
rate is each form's median.

  python3 bench/gleaner_trace.py target/release/vsched --kernel-version 7.2.13 \\
      --schedbench target/tmp/schedbench --rounds 3 --svg docs/img/gleaner-trace.svg

schedbench is crates/bench/c/schedbench.c compiled (the lab tests leave it
in target/tmp).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

SECONDS = 30
INTERVAL_MS = 250
# schedbench's work per barrier round: about 1 us, where one vCPU runs the
# barrier 3.8-4.5x faster than two in the lab (docs/sched.md).
ITERS = 200
# When the CPU-bound threads start, in seconds.
BURST_AT = 8
# Their work: about 2 s for two threads alone on two free lab vCPUs on a
# quiet host (the gleaner-cpu scenario), 7-11 s beside the barrier (twice
# that took 14-22 s on 2026-12-07), so that the burst ends well inside
# the barrier's 30 s.
BURST_ITERS = 1_000_000_000
FORMS = ["default", "sched", "run", "daemon"]
PHASE_NAMES = ["before", "burst", "after"]

GUEST_SCRIPT = r"""#!/bin/sh
ROUNDS=$1
S=%(seconds)d; I=%(interval_ms)d; ITERS=%(iters)d
G=/sys/fs/cgroup/work
mount -t cgroup2 none /sys/fs/cgroup && mkdir -p $G
# The lab's busybox guest starts with loopback down: up, for the daemon's metrics.
ip link set lo up
now() { cut -d' ' -f1 /proc/uptime; }
ipis() { awk '/RES:|CAL:/ {for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) t += $i} END {print t + 0}' /proc/interrupts; }
# The program: the barrier, and two CPU-bound threads from %(burst_at)d s on.
cat > /tmp/wl.sh <<EOF
cut -d' ' -f1 /proc/uptime > /tmp/tl.t0
schedbench timeline 2 $S $I $ITERS > /tmp/tl.out & echo \$! > /tmp/tl.pid
sleep %(burst_at)d; schedbench cpu 2 %(burst_iters)d > /tmp/burst.out
wait
EOF
# Samples the daemon's cgroup's cpuset every 250 ms while the barrier
# runs, as "@@active FORM ROUND UPTIME CPULIST" (counted on the host).
# Shell builtins only, but for the sleep: under the emulator each process
# the reader started cost the guest milliseconds beside the program, which
# only this form has (see the docstring).
sampler() {
  while [ ! -s /tmp/tl.pid ]; do sleep 0.05; done
  read p < /tmp/tl.pid
  while kill -0 $p 2>/dev/null; do
    read u _ < /proc/uptime; read c < $G/cpuset.cpus.effective
    echo "@@active $FORM $R $u $c"; sleep 0.25
  done
}
finish() {
  echo "@@rates $FORM $R $(cat /tmp/tl.t0) $(cat /tmp/tl.out)"
  echo "@@burst $FORM $R $(cat /tmp/burst.out)"
  echo "@@ipis $FORM $R $(($(ipis) - A))"
}
for R in $(seq 0 $((ROUNDS - 1))); do
  for k in 0 1 2 3; do
    rm -f /tmp/tl.pid /tmp/tl.t0 /tmp/tl.out /tmp/iv.jsonl /tmp/burst.out
    case $(( (k + R) %% 4 )) in
    0) FORM=default; A=$(ipis); sh /tmp/wl.sh; finish ;;
    1) FORM=sched; A=$(ipis); V=$(now)
       vsched sched --consolidate --quiet --interval 250ms --interval-json /tmp/iv.jsonl -- sh /tmp/wl.sh 2>/tmp/s.log || { echo "@@failed sched"; cat /tmp/s.log; }
       finish; echo "@@sched-start $FORM $R $V"; sed "s/^/@@interval $FORM $R /" /tmp/iv.jsonl ;;
    2) FORM=run; A=$(ipis); V=$(now)
       vsched run --consolidate --consolidate-json /tmp/r.json -- sh /tmp/wl.sh 2>/tmp/r.log || { echo "@@failed run"; cat /tmp/r.log; }
       finish; echo "@@run-start $FORM $R $V"; echo "@@report $FORM $R $(tr -d '\n' < /tmp/r.json)" ;;
    3) FORM=daemon
       vsched daemon --rwc-cgroup work --consolidate-cgroups 2>/tmp/d.log & D=$!
       for i in $(seq 40); do n=$(vsched status --json 2>/dev/null | sed -n 's/.*"model_updates":\([0-9]*\).*/\1/p'); [ "${n:-0}" -ge 2 ] && break; sleep 0.5; done
       A=$(ipis); sampler & W=$!
       sh -c "echo \$\$ > $G/cgroup.procs && exec sh /tmp/wl.sh"
       wait $W; finish
       wget -qO- http://127.0.0.1:9488/metrics | grep -E '^vsched_(process_cpu_seconds_total|thread_cpu_seconds\{thread="consolidate-0"\}) ' | sed "s/^/@@cost $FORM $R /"
       kill -TERM $D; wait $D || { echo "@@failed daemon"; cat /tmp/d.log; } ;;
    esac
  done
done
"""


def guest_script(burst_iters):
    return GUEST_SCRIPT % {"seconds": SECONDS, "interval_ms": INTERVAL_MS, "iters": ITERS,
                           "burst_at": BURST_AT, "burst_iters": burst_iters}


def parse(output, vcpus):
    """Runs by (form, round): rates, active samples (t since the barrier
    started, active vCPUs), ipis."""
    runs = {}
    starts = {}

    def run(form, r):
        return runs.setdefault((form, int(r)), {"form": form, "round": int(r), "active": []})

    for line in output.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("@@"):
            continue
        tag = parts[0]
        if tag == "@@rates" and len(parts) > 4:
            entry = run(parts[1], parts[2])
            entry["t0"] = float(parts[3])
            kv = dict(zip(parts[4::2], parts[5::2]))
            rates = []
            while f"t{len(rates)}" in kv:
                rates.append(float(kv[f"t{len(rates)}"]))
            entry["rates"] = rates
        elif tag == "@@burst" and len(parts) == 5 and parts[3] == "elapsed_s":
            run(parts[1], parts[2])["burst_s"] = float(parts[4])
        elif tag == "@@ipis":
            run(parts[1], parts[2])["ipis"] = int(parts[3])
        elif tag == "@@active" and len(parts) == 5:
            # (A sample whose cpuset read found nothing has no fifth field.)
            run(parts[1], parts[2]).setdefault("raw_active", []).append(
                (float(parts[3]), count_cpus(parts[4])))
        elif tag in ("@@sched-start", "@@run-start"):
            starts[(parts[1], int(parts[2]))] = float(parts[3])
        elif tag == "@@report":
            report = json.loads(line.split(None, 3)[3])
            entry = run(parts[1], parts[2])
            entry["raw_changes"] = [(p["t_s"], p["active"]) for p in report["active_over_time"]]
            entry["consolidation_cpu_s"] = report.get("own_cpu_s")
        elif tag == "@@interval":
            line_json = json.loads(line.split(None, 3)[3])
            c = line_json["counters"]
            periods = c.get("consolidate_periods", 0)
            if periods:
                run(parts[1], parts[2]).setdefault("raw_intervals", []).append(
                    (line_json["elapsed_s"], c.get("active_vcpu_periods", 0) / periods))
        elif tag == "@@cost" and len(parts) == 5:
            # The daemon's own CPU over its life (first models, the run).
            key = "consolidation_cpu_s" if "consolidate-0" in parts[3] else "daemon_cpu_s"
            run(parts[1], parts[2])[key] = float(parts[4])
        elif tag == "@@failed":
            raise SystemExit(f"the {parts[1]} form failed in the guest:\n{output}")
    for (form, r), entry in runs.items():
        t0 = entry.get("t0")
        if t0 is None:
            continue
        # (seconds since the barrier started, active vCPUs from then on)
        if form == "default":
            # Nothing narrows: every online vCPU may run the program.
            changes = [(0.0, vcpus)]
        elif form == "sched":
            # An interval line's mean holds over the interval before its
            # elapsed_s, counted from vsched's own start (a few ms after
            # the script's stamp: close at 250 ms).
            start = starts.get((form, r), t0)
            changes = [(start + e - INTERVAL_MS / 1e3 - t0, a)
                       for e, a in entry.pop("raw_intervals", [])]
        elif form == "run":
            start = starts.get((form, r), t0)
            changes = [(start + t - t0, n) for t, n in entry.pop("raw_changes", [])]
        else:
            changes = [(t - t0, n) for t, n in entry.pop("raw_active", [])]
        entry["active"] = on_grid(changes, len(entry.get("rates", [])))
    return runs


def count_cpus(cpulist):
    """The number of CPUs in a cpulist ("0-1", "1", "0,2-3")."""
    cpus = set()
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return len(cpus)


def on_grid(changes, intervals):
    """The step function `changes` read at the end of every interval of
    the barrier's grid: [(t, active)], t = (k + 1) * interval; None
    before its first change."""
    step = INTERVAL_MS / 1e3
    out = []
    for k in range(intervals):
        t = (k + 1) * step
        known = [n for c, n in changes if c <= t + 1e-9]
        if known:
            out.append((t, known[-1]))
    return out


def phases(entry):
    """(name, start, end) of a run's phases, seconds since the barrier
    started: the burst ends when its threads do (the barrier's end if
    they did not say)."""
    end = min(BURST_AT + entry.get("burst_s", SECONDS), SECONDS)
    return list(zip(PHASE_NAMES, [0, BURST_AT, end], [BURST_AT, end, SECONDS]))


def phase_summary(entry):
    out = {}
    step = INTERVAL_MS / 1e3
    for name, a, b in phases(entry):
        # An interval's rate is known at its end: (k + 1) * step.
        rates = [r for k, r in enumerate(entry.get("rates", [])) if a < (k + 1) * step <= b]
        active = [n for t, n in entry["active"] if a < t <= b]
        out[name] = {"rounds_per_s": statistics.median(rates) if rates else None,
                     "mean_active_vcpus": statistics.mean(active) if active else None}
    return out


def reactions(entry, vcpus):
    """Seconds from the burst's start until the active set is wide (within
    half a vCPU of every vCPU), and from its end until it is narrow again
    (within half a vCPU of one), read on the 250 ms grid (so a reaction
    reads at least one interval's worth); None if it never was."""
    _, start, end = phases(entry)[1]
    wide = next((t for t, n in entry["active"] if t > start and n >= vcpus - 0.5), None)
    narrow = next((t for t, n in entry["active"] if t > end and n <= 1.5), None)
    return (None if wide is None else wide - start, None if narrow is None else narrow - end)


def summary(runs, vcpus):
    out = {}
    for form in FORMS:
        entries = [e for (f, _), e in sorted(runs.items()) if f == form and e.get("rates")]
        if not entries:
            continue
        per = [phase_summary(e) for e in entries]
        form_out = {"rounds": len(entries),
                    "ipis_median": statistics.median(e.get("ipis", 0) for e in entries)}
        for e in entries:
            if form != "default":  # nothing to react: every vCPU, always
                e["widened_after_s"], e["narrowed_after_s"] = reactions(e, vcpus)
        for key in ("burst_s", "consolidation_cpu_s", "daemon_cpu_s",
                    "widened_after_s", "narrowed_after_s"):
            got = [e[key] for e in entries if e.get(key) is not None]
            if got:
                form_out[key + "_median"] = statistics.median(got)
        for name in PHASE_NAMES:
            rates = [p[name]["rounds_per_s"] for p in per if p[name]["rounds_per_s"] is not None]
            active = [p[name]["mean_active_vcpus"] for p in per if p[name]["mean_active_vcpus"] is not None]
            form_out[name] = {"rounds_per_s_median": statistics.median(rates) if rates else None,
                              "mean_active_vcpus_median": statistics.median(active) if active else None}
        out[form] = form_out
    base = out.get("default")
    for form, f in out.items():
        if base and form != "default":
            for name in PHASE_NAMES:
                mine, theirs = f[name]["rounds_per_s_median"], base[name]["rounds_per_s_median"]
                f[name]["rate_over_default"] = mine / theirs if mine and theirs else None
            f["ipis_over_default"] = f["ipis_median"] / base["ipis_median"] if base["ipis_median"] else None
            if f.get("burst_s_median") and base.get("burst_s_median"):
                # The CPU-bound threads' speed: the default's time over this one's.
                f["burst_speed_over_default"] = base["burst_s_median"] / f["burst_s_median"]
    return out


def median_round(runs, form):
    entries = [e for (f, _), e in sorted(runs.items()) if f == form and e.get("rates")]
    if not entries:
        return None
    entries.sort(key=lambda e: statistics.mean(e["rates"]))
    return entries[len(entries) // 2]


COLOURS = {"default": "#787878", "sched": "#1f77b4", "run": "#d62728", "daemon": "#2ca02c"}
LABELS = {"default": "default scheduler", "sched": "vsched sched --consolidate",
          "run": "vsched run --consolidate", "daemon": "vsched daemon --consolidate-cgroups"}


def svg(runs, vcpus, title):
    """Two panels sharing the time axis: barrier rounds per second (top)
    and active vCPUs (bottom), the default's burst shaded and each form's
    burst end marked in its colour; one round per form."""
    w, left, right = 1000, 70, 300
    top_h, bottom_h, gap, top_y = 260, 150, 50, 40
    pw = w - left - right
    chosen = {f: median_round(runs, f) for f in FORMS}
    peak = max((max(e["rates"]) for e in chosen.values() if e), default=1) * 1.1
    x = lambda t: left + pw * t / SECONDS
    y_top = lambda v: top_y + top_h * (1 - v / peak)
    b_y = top_y + top_h + gap
    y_bot = lambda n: b_y + bottom_h * (1 - n / (vcpus + 0.5))
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{b_y + bottom_h + 50}" '
          f'font-family="sans-serif" font-size="12">',
          f'<rect width="100%" height="100%" fill="white"/>',
          f'<text x="{left}" y="22" font-size="16">{title}</text>']
    shaded = phases(chosen["default"]) if chosen.get("default") else [(None, 0, 0)] * 3
    _, b0, b1 = shaded[1]
    for y0, h in ((top_y, top_h), (b_y, bottom_h)):
        el.append(f'<rect x="{x(b0):.1f}" y="{y0}" width="{x(b1) - x(b0):.1f}" '
                  f'height="{h}" fill="#f2e6c9"/>')
        el.append(f'<rect x="{left}" y="{y0}" width="{pw}" height="{h}" fill="none" stroke="#999"/>')
    el.append(f'<text x="{x(b0) + 4:.1f}" y="{top_y + 14}">2 CPU-bound threads join</text>')
    el.append(f'<text x="{w - right + 12}" y="{top_y + 120}">shaded: their run under the default;</text>')
    el.append(f'<text x="{w - right + 12}" y="{top_y + 136}">dashed: where they ended under each form</text>')
    for k in range(5):
        v = peak / 1.1 * k / 4
        el.append(f'<text x="{left - 6}" y="{y_top(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for n in range(vcpus + 1):
        el.append(f'<text x="{left - 6}" y="{y_bot(n) + 4:.1f}" text-anchor="end">{n}</text>')
    for t in range(0, SECONDS + 1, 5):
        el.append(f'<text x="{x(t):.1f}" y="{b_y + bottom_h + 18}" text-anchor="middle">{t}</text>')
    el.append(f'<text x="{left + pw / 2}" y="{b_y + bottom_h + 38}" text-anchor="middle">'
              f'seconds since the program started</text>')
    el.append(f'<text transform="translate(16,{top_y + top_h / 2}) rotate(-90)" text-anchor="middle">'
              f'barrier rounds per second</text>')
    el.append(f'<text transform="translate(16,{b_y + bottom_h / 2}) rotate(-90)" text-anchor="middle">'
              f'active vCPUs</text>')
    for i, form in enumerate(FORMS):
        e = chosen[form]
        if not e:
            continue
        step = INTERVAL_MS / 1e3
        pts = " ".join(f"{x((k + 1) * step):.1f},{y_top(r):.1f}" for k, r in enumerate(e["rates"]))
        el.append(f'<polyline points="{pts}" fill="none" stroke="{COLOURS[form]}" stroke-width="1.6"/>')
        _, _, end = phases(e)[1]
        el.append(f'<line x1="{x(end):.1f}" y1="{top_y}" x2="{x(end):.1f}" y2="{b_y + bottom_h}" '
                  f'stroke="{COLOURS[form]}" stroke-dasharray="4 3"/>')
        # Active vCPUs as steps, each sample held until the next; offset a
        # little per form so that equal lines stay visible.
        off = (i - 1.5) * 2
        steps, last = [], None
        for t, n in e["active"]:
            if 0 <= t <= SECONDS:
                if last is not None:
                    steps.append(f"{x(t):.1f},{y_bot(last) + off:.1f}")
                steps.append(f"{x(t):.1f},{y_bot(n) + off:.1f}")
                last = n
        if steps:
            el.append(f'<polyline points="{" ".join(steps)}" fill="none" stroke="{COLOURS[form]}" stroke-width="1.6"/>')
        ly = top_y + 20 + i * 22
        el.append(f'<line x1="{w - right + 12}" y1="{ly}" x2="{w - right + 34}" y2="{ly}" '
                  f'stroke="{COLOURS[form]}" stroke-width="2"/>')
        el.append(f'<text x="{w - right + 40}" y="{ly + 4}">{LABELS[form]}</text>')
    el.append("</svg>")
    return "\n".join(el) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vsched", help="vsched binary (boots the guest and runs in it)")
    ap.add_argument("--schedbench", default="target/tmp/schedbench")
    ap.add_argument("--layout", default="lab/sched/two-free.toml",
                    help="a layout with kernel = \"sched_ext\" (the sched form needs one)")
    ap.add_argument("--kernel-version", default="7.2.13",
                    help="a sched_ext kernel of the lab's matrix (the sched form needs one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burst-iters", type=int, default=BURST_ITERS,
                    help="work of each CPU-bound thread (schedbench cpu 2 N)")
    ap.add_argument("--svg", help="write the plot here")
    ap.add_argument("--reanalyse", metavar="JSON",
                    help="no guest: take the runs of an earlier output and analyse and plot them again")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.reanalyse:
        with open(a.reanalyse) as f:
            doc = json.load(f)
        runs = {}
        for r in doc["runs"]:
            r["active"] = [tuple(p) for p in r["active"]]
            runs[(r["form"], r["round"])] = r
        finish(doc, runs, doc["vcpus"], a.svg)
        return
    with open(a.layout) as f:
        layout = f.read()
    vcpus = layout.count("[[vcpu]]")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "gleaner-trace")
        with open(script, "w") as f:
            f.write(guest_script(a.burst_iters))
        os.chmod(script, 0o755)
        extra = [os.path.abspath(a.schedbench), script]
        listed = ", ".join(json.dumps(p) for p in extra)
        layout_path = os.path.join(tmp, "layout.toml")
        # Four forms of about 35 s each per round (the barrier's 30 s, a
        # model first), and the daemon's first models: 60 s each is ample.
        budget = a.rounds * 4 * 60 + 60
        with open(layout_path, "w") as f:
            f.write(f"extra_binaries = [{listed}]\nrun_timeout_s = {budget}\n" + layout)
        cmd = [a.vsched, "lab", "run", "--json", "--kernel-version", a.kernel_version,
               "--cmd", f"gleaner-trace {a.rounds} 2>&1", layout_path]
        out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"vsched lab run failed ({out.returncode}):\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout)
    output = result["commands"][0]["output"]
    runs = parse(output, vcpus)
    doc = {"schema": "vsched.gleaner-trace/v1",
           "kernel": a.kernel_version,
           "accel": result.get("accel"),
           "vcpus": vcpus,
           "rounds": a.rounds,
           "program": {"barrier": f"schedbench timeline 2 {SECONDS} {INTERVAL_MS} {ITERS}",
                       "burst": f"schedbench cpu 2 {a.burst_iters}, from {BURST_AT} s on"}}
    finish(doc, runs, vcpus, a.svg)


def finish(doc, runs, vcpus, svg_path):
    """Adds the summary and the runs to `doc`, prints it, and plots."""
    doc["summary"] = summary(runs, vcpus)
    doc["runs"] = [runs[k] for k in sorted(runs)]
    if svg_path:
        with open(svg_path, "w") as f:
            f.write(svg(runs, vcpus, f"Active vCPUs beside progress: a 2-thread barrier on "
                                     f"{vcpus} vCPUs (Linux {doc['kernel']}, lab guest)"))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
