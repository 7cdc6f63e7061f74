#!/usr/bin/env python3
"""memcached at 4x thread oversubscription, with and without `vsched exec`.

memcached runs with 4 worker threads per vCPU (`-t 4*vCPUs`) on loopback and
is loaded by bench/memcached/loadgen.c (compiled with cc into a temporary
directory on each invocation): an open-loop client that sends requests at
Poisson-distributed times at a fixed total rate (90% get / 10% set, 10,000
keys of 100 bytes, stored before the timed part) over pipelined connections,
whether or not earlier ones were answered, and takes latency from each
request's scheduled send time to the end of its response, so a server stall
is charged to every request it delays (no coordinated omission). The first
second of each run is warm-up and not counted; memcached's CPU use is
sampled over the measured window only.

Each run starts a fresh memcached; for every rate of --rates, runs alternate
between glibc (memcached alone) and vsched (`vsched exec -- memcached ...`),
and medians over --runs are reported (the p99 column also shows the min-max
over runs, as a measure of the noise).

The client shares the vCPUs with memcached. Its lateness against the schedule
is reported as "send lag": if the lag p99 approaches the latency p99, the
client (or a noisy neighbour) rather than memcached sets the tail. "other
CPU" is what the rest of the machine used meanwhile (100% = one vCPU); on a
shared machine, runs with much of it are noise.

Usage: python3 bench/memcached_sync.py [--runs N] [--rates R1,R2,...] [--seconds S]
                                       [--conns N] [--client-threads N]
                                       [--vsched PATH] [--baseline-only] [--json]
Needs: apt-get install memcached; a C compiler (cc); `cargo build --release`
for target/release/vsched.
"""
import argparse, atexit, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADGEN_SRC = os.path.join(ROOT, "bench", "memcached", "loadgen.c")
# Measured on the 2-vCPU development VM: memcached -t 8 with this client keeps up
# to about 140k req/s (p99 a few ms; memcached and the client then use about one
# vCPU each, so both are busy); from about 150k req/s queues grow without bound
# and latencies reach seconds. The default sweep runs from light load to 140k.
DEFAULT_RATES = "20000,60000,100000,140000"
WARMUP_S = 1.0  # requests scheduled in the first second are not counted
GRACE_S = 2.0  # how long the client waits for answers after the last scheduled request

running = []  # Popen objects of memcached (or vsched exec) still alive


def kill_all():
    """Ends every process group this script started (memcached may run under vsched exec)."""
    while running:
        proc = running.pop()
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the group's leader left behind
        except ProcessLookupError:
            pass


def exit_on_signal(signum, _frame):
    sys.exit(128 + signum)  # unwinds through `finally` and atexit, which kill memcached


def die(msg):
    sys.exit(f"memcached_sync: error: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_memcached(memcached, vsched, threads, port):
    cmd = [memcached, "-t", str(threads), "-p", str(port), "-U", "0", "-l", "127.0.0.1",
           "-m", "256", "-c", "4096"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]  # memcached refuses to run as root otherwise
    if vsched:
        cmd = [vsched, "exec", "--"] + cmd
    # Own session: Ctrl-C in the terminal reaches only this script, which then kills the group.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    running.append(proc)
    wait_ready(proc, port)
    return proc


def wait_ready(proc, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            die(f"memcached exited ({proc.returncode}): {proc.stderr.read().decode().strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"version\r\n")
                if s.recv(100).startswith(b"VERSION"):
                    return
        except OSError:
            time.sleep(0.05)
    die(f"memcached did not answer on port {port} within {timeout:.0f} s")


def memcached_pid(session):
    """The memcached process in the session started by Popen (it may be vsched's child)."""
    for _ in range(50):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            sid = int(stat[stat.rindex(")") + 2:].split()[3])
            if sid == session and comm == "memcached":
                return int(entry)
        time.sleep(0.1)
    die("cannot find the memcached process")


def check_preload(pid, want):
    """Fails loudly unless libvsched_sync is mapped into memcached exactly when wanted."""
    with open(f"/proc/{pid}/maps") as f:
        loaded = "libvsched_sync" in f.read()
    if loaded != want:
        state = "is" if loaded else "is not"
        die(f"libvsched_sync {state} loaded in memcached (pid {pid}) for the "
            f"{'vsched' if want else 'glibc'} run; check LD_PRELOAD and `vsched exec`")


def build_loadgen(tmpdir):
    cc = shutil.which("cc") or die("no C compiler (cc) found; install gcc or clang")
    exe = os.path.join(tmpdir, "loadgen")
    built = subprocess.run([cc, "-O2", "-pthread", "-o", exe, LOADGEN_SRC, "-lm"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        die(f"compiling {LOADGEN_SRC} failed:\n{built.stderr.strip()}")
    return exe


def run_loadgen(args, loadgen, port, pid, rate):
    """One timed load on memcached at `port` (process `pid`); returns loadgen's JSON result."""
    cmd = [loadgen, "-p", str(port), "-r", str(rate), "-d", str(args.seconds), "-w", str(WARMUP_S),
           "-G", str(GRACE_S), "-c", str(args.conns), "-t", str(args.client_threads), "-P", str(pid),
           "-s", "1"]  # the same request stream in every run
    try:
        # run() kills loadgen on any exception: the timeout, Ctrl-C, SIGTERM's SystemExit.
        done = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=args.seconds + WARMUP_S + GRACE_S + 60)
    except subprocess.TimeoutExpired:
        die(f"loadgen did not finish in time: {' '.join(cmd)}")
    if done.returncode != 0:
        die(f"loadgen failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def one_run(args, loadgen, memcached, vsched, threads, rate):
    port = free_port()
    proc = start_memcached(memcached, vsched, threads, port)
    try:
        pid = memcached_pid(proc.pid)
        check_preload(pid, want=bool(vsched))
        r = run_loadgen(args, loadgen, port, pid, rate)
    finally:
        kill_all()
    if r["server_cpu_pct"] < 0:
        die(f"loadgen could not read memcached's CPU time from /proc/{pid}/stat")
    if r["errors"] or r["misses"]:
        print(f"memcached_sync: warning: {r['errors']} errors, {r['misses']} misses at {rate} req/s "
              f"({'vsched' if vsched else 'glibc'})", file=sys.stderr)
    return {"p50_us": r["p50_us"], "p90_us": r["p90_us"], "p99_us": r["p99_us"],
            "p999_us": r["p999_us"], "max_us": r["max_us"], "throughput_rps": r["throughput"],
            "send_lag_p99_us": r["lag_p99_us"], "memcached_cpu_pct": r["server_cpu_pct"],
            "client_cpu_pct": r["client_cpu_pct"],
            # Everything else the machine ran meanwhile (neighbours, hypervisor steal): noise.
            "other_cpu_pct": max(0.0, r["machine_cpu_pct"] - r["server_cpu_pct"] - r["client_cpu_pct"]),
            "errors": r["errors"] + r["misses"],
            "unanswered": r["unfinished"]}


def medians(samples):
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def vsched_exec_works(vsched):
    try:
        return subprocess.run([vsched, "exec", "--help"], capture_output=True).returncode == 0
    except OSError:
        return False


def parse_rates(text):
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return rates


def print_table(result):
    print(f"memcached -t {result['threads']} on {result['vcpus']} vCPUs, {result['seconds']:g} s per run, "
          f"{result['conns']} connections, {result['client_threads']} client thread(s), "
          f"medians of {result['runs']} runs (p99: median [min-max])")
    print("| rate | variant | p50 | p99 | p99.9 | throughput | memcached CPU | client CPU | other CPU "
          "| send lag p99 | errors / unanswered |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for entry in result["rates"]:
        for name, m in entry["variants"].items():
            p99s = [s["p99_us"] for s in entry["samples"][name]]
            print(f"| {entry['rate_rps']} | {name} | {m['p50_us']:.0f} us "
                  f"| {m['p99_us']:.0f} us [{min(p99s):.0f}-{max(p99s):.0f}] | {m['p999_us']:.0f} us "
                  f"| {m['throughput_rps']:.0f} req/s | {m['memcached_cpu_pct']:.0f}% "
                  f"| {m['client_cpu_pct']:.0f}% | {m['other_cpu_pct']:.0f}% | {m['send_lag_p99_us']:.0f} us "
                  f"| {m['errors']:.0f} / {m['unanswered']:.0f} |")
    ratios = []
    for entry in result["rates"]:
        g, v = entry["variants"].get("glibc"), entry["variants"].get("vsched")
        if g and v:
            ratios.append(f"{entry['rate_rps']} req/s: p50 {v['p50_us'] / g['p50_us']:.2f}x, "
                          f"p99 {v['p99_us'] / g['p99_us']:.2f}x, p99.9 {v['p999_us'] / g['p999_us']:.2f}x, "
                          f"throughput {v['throughput_rps'] / g['throughput_rps']:.3f}x, "
                          f"memcached CPU {v['memcached_cpu_pct'] / g['memcached_cpu_pct']:.2f}x")
    if ratios:
        print("\nvsched / glibc (below 1: vsched is faster or uses less CPU):")
        print("\n".join(ratios))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per variant and rate (default 3)")
    rate = ap.add_mutually_exclusive_group()
    rate.add_argument("--rates", type=parse_rates, default=parse_rates(DEFAULT_RATES),
                      help=f"requests per second to sweep, comma-separated (default {DEFAULT_RATES})")
    rate.add_argument("--rate", type=int, help="a single rate, as --rates R")
    ap.add_argument("--seconds", type=float, default=10, help="measured seconds per run (default 10)")
    ap.add_argument("--conns", type=int, default=0, help="client connections (default: memcached's threads)")
    ap.add_argument("--client-threads", type=int, default=1,
                    help="load generator threads (default 1: it shares the vCPUs with memcached)")
    ap.add_argument("--vsched", default=os.path.join(ROOT, "target", "release", "vsched"),
                    help="vsched binary (default target/release/vsched)")
    ap.add_argument("--baseline-only", action="store_true", help="run memcached alone only")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    rates = [args.rate] if args.rate is not None else args.rates
    if args.runs < 1 or args.seconds <= 0 or args.client_threads < 1 or args.conns < 0 or min(rates) <= 0:
        ap.error("--runs, --seconds, --client-threads and rates must be positive")

    memcached = shutil.which("memcached")
    if not memcached:
        die("memcached not found; install it: apt-get install memcached")
    if not args.baseline_only and not vsched_exec_works(args.vsched):
        die(f"`{args.vsched} exec --help` failed; build vsched (cargo build --release), "
            "pass --vsched PATH, or use --baseline-only")
    vcpus = len(os.sched_getaffinity(0))
    threads = 4 * vcpus
    # memcached hands connections to its threads in turn; each client thread needs one.
    args.conns = max(args.conns or threads, args.client_threads)
    variants = {"glibc": None} if args.baseline_only else {"glibc": None, "vsched": args.vsched}
    samples = {rate: {name: [] for name in variants} for rate in rates}
    tmpdir = tempfile.mkdtemp(prefix="memcached_sync.")
    try:
        loadgen = build_loadgen(tmpdir)
        # Every round visits all rates and variants, so slow drifts of a noisy machine
        # spread over all of them instead of favouring one.
        for _ in range(args.runs):
            for rate in rates:
                for name, vsched in variants.items():
                    samples[rate][name].append(one_run(args, loadgen, memcached, vsched, threads, rate))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    result = {"schema": "vsched.bench-memcached-sync", "version": 2, "vcpus": vcpus, "threads": threads,
              "seconds": args.seconds, "conns": args.conns, "client_threads": args.client_threads,
              "runs": args.runs, "arrivals": "poisson",
              "rates": [{"rate_rps": rate, "variants": {n: medians(s) for n, s in samples[rate].items()},
                         "samples": samples[rate]} for rate in rates]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    atexit.register(kill_all)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
