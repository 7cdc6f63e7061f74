#!/usr/bin/env python3
"""memcached at 4x thread oversubscription, with and without `vsched exec`.

memcached runs with 4 worker threads per vCPU (`-t 4*vCPUs`) on loopback and
is loaded at a fixed request rate (90% get / 10% set, 10,000 keys, 2 KiB
values, preloaded) by an open-loop client built into this script: requests
go out at scheduled times on several pipelined connections whether or not
earlier ones were answered, and latency runs from the scheduled send time to
the end of the response, so a stall is charged to every request it delays
(no coordinated omission). Each run starts a fresh memcached; runs alternate
between glibc (memcached alone) and vsched (`vsched exec -- memcached ...`),
and medians over --runs are reported.

Debian 12's libmemcached-tools ships memcaslap (memaslap), but its --tps
option did not limit the rate here (it ran closed-loop at ~70k req/s) and it
reports no percentiles, hence the built-in client.

The default rate (5,000 req/s) was picked on the 2-vCPU development VM:
memcached alone serves it with a p99 well under a millisecond and the client
keeps to its schedule (its own lateness is reported as "send lag"; if its p99
reaches the latency p99, the client is the bottleneck: lower --rate).

Usage: python3 bench/memcached_sync.py [--runs N] [--rate R] [--seconds S]
                                       [--vsched PATH] [--baseline-only] [--json]
Needs: apt-get install memcached; `cargo build --release` for target/release/vsched.
"""
import argparse, atexit, collections, ctypes, json, os, random, select, shutil, signal
import socket, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = 10_000
VALUE_SIZE = 2048
WARMUP_S = 1.0  # responses to requests scheduled in the first second are not counted
GRACE_S = 2.0  # how long to wait for answers after the last scheduled request

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


def cpu_seconds(pid):
    """User + system CPU time of a whole process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_preload(pid, want):
    """Fails loudly unless libvsched_sync is mapped into memcached exactly when wanted."""
    with open(f"/proc/{pid}/maps") as f:
        loaded = "libvsched_sync" in f.read()
    if loaded != want:
        state = "is" if loaded else "is not"
        die(f"libvsched_sync {state} loaded in memcached (pid {pid}) for the "
            f"{'vsched' if want else 'glibc'} run; check LD_PRELOAD and `vsched exec`")


def request(rng, key_count, value):
    """One request (90% get, 10% set) as bytes, and whether it is a get."""
    key = f"key:{rng.randrange(key_count)}".encode()
    if rng.random() < 0.9:
        return b"get " + key + b"\r\n", True
    return b"set " + key + b" 0 0 %d\r\n" % len(value) + value + b"\r\n", False


def take_response(buf, start, is_get):
    """End of the response that begins at buf[start] (-1 if incomplete); raises on errors."""
    if is_get:
        end = buf.find(b"END\r\n", start)  # values are b"x" * n, so END\r\n only ends a response
        return end if end < 0 else end + 5
    end = buf.find(b"\r\n", start)
    if end < 0:
        return end
    if buf[start:end] != b"STORED":
        raise RuntimeError(f"set failed: {bytes(buf[start:end])!r}")
    return end + 2


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.out = bytearray()
        self.inbuf = bytearray()
        self.pending = collections.deque()  # (scheduled time, is_get) in send order

    def fileno(self):  # lets select() take Conn objects
        return self.sock.fileno()

    def flush(self):
        try:
            sent = self.sock.send(self.out)
            del self.out[:sent]
        except BlockingIOError:
            pass

    def receive(self, now, latencies, count_from):
        """Reads what arrived; records the latency of each completed request."""
        try:
            data = self.sock.recv(1 << 18)
        except BlockingIOError:
            return
        if not data:
            raise RuntimeError("memcached closed a connection")
        self.inbuf += data
        pos = 0
        while self.pending:
            end = take_response(self.inbuf, pos, self.pending[0][1])
            if end < 0:
                break
            pos = end
            sched, _ = self.pending.popleft()
            if sched >= count_from:
                latencies.append(now - sched)
        del self.inbuf[:pos]


def preload(port, value):
    """Stores every key once, so gets hit."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(0, KEYS, 200):
            batch = range(start, min(start + 200, KEYS))
            s.sendall(b"".join(b"set key:%d 0 0 %d\r\n%s\r\n" % (k, len(value), value) for k in batch))
            got = b""
            while got.count(b"STORED\r\n") < len(batch):
                got += s.recv(1 << 16)


def load(port, rate, seconds, conns_n, seed):
    """Open-loop load at `rate` req/s; returns latency and send-lag samples (s) and throughput."""
    value = b"x" * VALUE_SIZE
    preload(port, value)
    conns = [Conn(port) for _ in range(conns_n)]
    rng = random.Random(seed)
    interval = 1.0 / rate
    total = int(rate * (WARMUP_S + seconds))
    latencies, lags = [], []
    t0 = time.perf_counter() + 0.05
    count_from = t0 + WARMUP_S
    sent = 0
    while True:
        now = time.perf_counter()
        while sent < total and t0 + sent * interval <= now:
            sched = t0 + sent * interval
            conn = conns[sent % conns_n]
            req, is_get = request(rng, KEYS, value)
            conn.out += req
            conn.pending.append((sched, is_get))
            if sched >= count_from:
                lags.append(now - sched)
            sent += 1
        for c in conns:
            if c.out:
                c.flush()
        outstanding = any(c.pending for c in conns)
        if sent >= total and not outstanding:
            break
        if sent >= total and now > t0 + total * interval + GRACE_S:
            break  # unanswered requests count against throughput
        timeout = max(0.0, t0 + sent * interval - time.perf_counter()) if sent < total else 0.01
        readable, writable, _ = select.select(conns, [c for c in conns if c.out], [], timeout)
        now = time.perf_counter()
        for c in readable:
            c.receive(now, latencies, count_from)
    for c in conns:
        c.sock.close()
    return latencies, lags, len(latencies) / seconds


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def one_run(args, memcached, vsched, threads):
    port = free_port()
    proc = start_memcached(memcached, vsched, threads, port)
    try:
        pid = memcached_pid(proc.pid)
        check_preload(pid, want=bool(vsched))
        server_cpu, client_cpu, wall = cpu_seconds(pid), time.process_time(), time.perf_counter()
        # The same request stream (seed) in every run.
        lat, lags, tput = load(port, args.rate, args.seconds, args.conns, seed=1)
        wall = time.perf_counter() - wall
        server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, time.process_time() - client_cpu
    finally:
        kill_all()
    lat.sort()
    lags.sort()
    return {"p50_us": percentile(lat, 50) * 1e6, "p99_us": percentile(lat, 99) * 1e6,
            "p999_us": percentile(lat, 99.9) * 1e6, "throughput_rps": tput,
            "send_lag_p99_us": percentile(lags, 99) * 1e6,
            "memcached_cpu_pct": 100 * server_cpu / wall, "client_cpu_pct": 100 * client_cpu / wall}


def medians(samples):
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def vsched_exec_works(vsched):
    try:
        return subprocess.run([vsched, "exec", "--help"], capture_output=True).returncode == 0
    except OSError:
        return False


def print_table(result):
    print(f"memcached -t {result['threads']} on {result['vcpus']} vCPUs, {result['rate_rps']} req/s "
          f"for {result['seconds']} s, {result['conns']} connections, medians of {result['runs']} runs")
    print("| variant | p50 | p99 | p99.9 | throughput | memcached CPU | client CPU | client send lag p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, m in result["variants"].items():
        print(f"| {name} | {m['p50_us']:.0f} us | {m['p99_us']:.0f} us | {m['p999_us']:.0f} us "
              f"| {m['throughput_rps']:.0f} req/s | {m['memcached_cpu_pct']:.0f}% | {m['client_cpu_pct']:.0f}% "
              f"| {m['send_lag_p99_us']:.0f} us |")
    g, v = result["variants"].get("glibc"), result["variants"].get("vsched")
    if g and v:
        print(f"\nvsched / glibc: p50 {v['p50_us'] / g['p50_us']:.2f}x, p99 {v['p99_us'] / g['p99_us']:.2f}x, "
              f"p99.9 {v['p999_us'] / g['p999_us']:.2f}x (below 1: vsched is faster), "
              f"throughput {v['throughput_rps'] / g['throughput_rps']:.3f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per variant, alternating (default 3)")
    ap.add_argument("--rate", type=int, default=5000, help="requests per second (default 5000)")
    ap.add_argument("--seconds", type=float, default=10, help="measured seconds per run (default 10)")
    ap.add_argument("--conns", type=int, default=0, help="client connections (default: memcached's threads)")
    ap.add_argument("--vsched", default=os.path.join(ROOT, "target", "release", "vsched"),
                    help="vsched binary (default target/release/vsched)")
    ap.add_argument("--baseline-only", action="store_true", help="run memcached alone only")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()

    memcached = shutil.which("memcached")
    if not memcached:
        die("memcached not found; install it: apt-get install memcached")
    if not args.baseline_only and not vsched_exec_works(args.vsched):
        die(f"`{args.vsched} exec --help` failed; build vsched (cargo build --release), "
            "pass --vsched PATH, or use --baseline-only")
    vcpus = len(os.sched_getaffinity(0))
    threads = 4 * vcpus
    args.conns = args.conns or threads  # memcached hands connections to its threads in turn
    # Precise wake-ups for the send schedule (the default 50 us timer slack would batch sends).
    ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    variants = {"glibc": None} if args.baseline_only else {"glibc": None, "vsched": args.vsched}
    samples = {name: [] for name in variants}
    for _ in range(args.runs):
        for name, vsched in variants.items():
            samples[name].append(one_run(args, memcached, vsched, threads))
    result = {"schema": "vsched.bench-memcached-sync", "version": 1, "vcpus": vcpus, "threads": threads,
              "rate_rps": args.rate, "seconds": args.seconds, "conns": args.conns, "runs": args.runs,
              "variants": {name: medians(s) for name, s in samples.items()}, "samples": samples}
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
