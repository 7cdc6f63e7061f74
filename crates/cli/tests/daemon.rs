//! `vsched daemon` end to end: it serves every online vCPU's model as
//! Prometheus metrics on loopback, refuses a second daemon on the same
//! address and bad options, and stops cleanly on SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VSCHED: &str = env!("CARGO_BIN_EXE_vsched");
/// The first model needs a light and a heavy window and the topology
/// probe: seconds; this leaves room for a slow, busy machine.
const FIRST_MODEL_TIMEOUT: Duration = Duration::from_secs(60);

/// A status socket of the test's own (never the real daemon's /run path).
fn socket(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("vsched-daemon-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.sock")).display().to_string()
}

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn serves_every_vcpu_refuses_a_second_daemon_and_stops_on_sigterm() {
    let _guard = common::serial();
    let mut daemon = Command::new(VSCHED)
        .args(["daemon", "--listen", "127.0.0.1:0", "--interval", "500ms"])
        .args(["--socket", &socket("first")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(daemon.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();

    let cpus = vsched_probe::sys::online_cpus().unwrap();
    let started = Instant::now();
    let text = loop {
        let reply = scrape(&addr);
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        if cpus
            .iter()
            .all(|c| reply.contains(&format!("vsched_vcpu_capacity{{vcpu=\"{c}\"}}")))
        {
            break reply;
        }
        assert!(
            started.elapsed() < FIRST_MODEL_TIMEOUT,
            "no capacity for every vCPU {cpus:?} after {FIRST_MODEL_TIMEOUT:?}:\n{reply}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    for c in &cpus {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("vsched_vcpu_available_ratio{{vcpu=\"{c}\"}}")))
            .unwrap_or_else(|| panic!("no availability of vCPU {c}:\n{text}"));
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&v), "a ratio: {line}");
    }
    assert!(
        text.contains("# TYPE vsched_model_updates counter"),
        "{text}"
    );

    let second = Command::new(VSCHED)
        .args(["daemon", "--listen", &addr, "--socket", &socket("second")])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{second:?}");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another vsched daemon"),
        "{second:?}"
    );

    // SAFETY: kill with the pid of a child not yet reaped.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    assert!(rest.contains("stopped"), "{rest}");
    assert!(TcpStream::connect(&addr).is_err(), "the port is released");
}

#[test]
fn refuses_a_bad_address_and_interval() {
    for bad in [
        &["--listen", "nonsense"][..],
        &["--interval", "0s"],
        &["--interval", "-1s"],
    ] {
        let out = Command::new(VSCHED)
            .arg("daemon")
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{bad:?} says why");
    }
}

/// Prometheus's HTTP API (HTTP/1.0, so that the answer is not chunked):
/// the JSON body of `GET path`.
fn prometheus_api(addr: &str, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    serde_json::from_str(reply.split("\r\n\r\n").nth(1)?).ok()
}

/// A free loopback port (the kernel's pick, released for the child).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills and reaps a child on drop, so a failing assertion leaves no
/// Prometheus or daemon behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's Prometheus (scripts/test.sh installs it) scrapes the daemon on
/// loopback every second, and its query API returns vsched_vcpu_capacity
/// for every online vCPU: the metrics work with the real consumer, not
/// only with this test's parser.
#[test]
fn a_real_prometheus_scrapes_every_vcpu() {
    let _guard = common::serial();
    assert!(
        Command::new("prometheus")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "prometheus is not installed: scripts/test.sh installs it (apt-get install prometheus)"
    );
    let dir = std::env::temp_dir().join(format!("vsched-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let daemon_addr = format!("127.0.0.1:{}", free_port());
    let _daemon = Reaped(
        Command::new(VSCHED)
            .args(["daemon", "--listen", &daemon_addr, "--interval", "500ms"])
            .args(["--socket", &socket("prometheus")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: vsched\n    \
             static_configs:\n      - targets: ['{daemon_addr}']\n"
        ),
    )
    .unwrap();
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let _prometheus = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let cpus = vsched_probe::sys::online_cpus().unwrap();
    let started = Instant::now();
    let found = loop {
        let answer = prometheus_api(&prom_addr, "/api/v1/query?query=vsched_vcpu_capacity");
        let vcpus: Vec<u32> = answer
            .as_ref()
            .and_then(|a| a["data"]["result"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|r| r["metric"]["vcpu"].as_str()?.parse().ok())
            .collect();
        if cpus.iter().all(|c| vcpus.contains(c)) {
            break answer.unwrap();
        }
        assert!(
            started.elapsed() < FIRST_MODEL_TIMEOUT,
            "Prometheus has no capacity for every vCPU {cpus:?} after {FIRST_MODEL_TIMEOUT:?}: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    for r in found["data"]["result"].as_array().unwrap() {
        let v: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
        assert!(v > 0.0 && v <= 1024.0, "a capacity: {r}");
        assert_eq!(r["metric"]["job"], "vsched", "{r}");
    }
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of `series` in a scrape, if present.
fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A SCHED_FIFO neighbour takes the last vCPU 3 ms of every 10: the
/// daemon's scraped availability of that vCPU settles within the probe
/// tests' 20% of the truth (0.7), two scrapes in a row, while the others
/// stay clearly higher.
#[test]
fn scraped_availability_follows_a_noisy_neighbour() {
    let _guard = common::serial();
    const TRUTH: f64 = 0.7;
    const TOLERANCE: f64 = 0.2;
    /// The EMA needs a few updates after the first model: well under this.
    const SETTLE: Duration = Duration::from_secs(30);
    let cpus = common::online_cpus();
    assert!(cpus.len() >= 2, "needs two vCPUs");
    let busy = *cpus.last().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let _daemon = Reaped(
        Command::new(VSCHED)
            .args(["daemon", "--listen", &addr, "--interval", "500ms"])
            .args(["--socket", &socket("neighbour")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let neighbour = common::NoisyNeighbour::start(
        busy,
        Duration::from_millis(3),
        Duration::from_millis(10),
        SETTLE + Duration::from_secs(10),
    );
    let started = Instant::now();
    let mut in_a_row = 0;
    let mut last = String::new();
    while in_a_row < 2 {
        assert!(
            started.elapsed() < SETTLE,
            "vCPU {busy}'s scraped availability never settled within {TOLERANCE} of {TRUTH}:\n{last}"
        );
        std::thread::sleep(Duration::from_millis(500));
        last = match TcpStream::connect(&addr) {
            Ok(_) => scrape(&addr),
            Err(_) => continue,
        };
        let busy_avail = series_value(
            &last,
            &format!("vsched_vcpu_available_ratio{{vcpu=\"{busy}\"}}"),
        );
        in_a_row = match busy_avail {
            Some(a) if (a - TRUTH).abs() <= TOLERANCE * TRUTH => in_a_row + 1,
            _ => 0,
        };
    }
    neighbour
        .stop()
        .expect("the neighbour could not run as asked");
    let busy_avail = series_value(
        &last,
        &format!("vsched_vcpu_available_ratio{{vcpu=\"{busy}\"}}"),
    )
    .unwrap();
    for c in cpus.iter().filter(|&&c| c != busy) {
        let a = series_value(
            &last,
            &format!("vsched_vcpu_available_ratio{{vcpu=\"{c}\"}}"),
        )
        .unwrap_or_else(|| panic!("no availability of vCPU {c}:\n{last}"));
        assert!(
            a > busy_avail + 0.1,
            "vCPU {c} ({a}) reads clearly more available than the neighbour's ({busy_avail}):\n{last}"
        );
    }
}

/// The alerting rules shipped in deploy/prometheus are valid for
/// Prometheus and fire as their unit tests say (promtool, from Debian's
/// prometheus package).
#[test]
fn alerting_rules_pass_promtool() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    for args in [
        &["check", "rules", "vsched-alerts.yml"][..],
        &["test", "rules", "vsched-alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool is not installed: scripts/test.sh installs it (apt-get install prometheus)");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The shipped systemd unit, alone and with its RWC drop-in, passes
/// `systemd-analyze verify` without a single warning (it exits 0 even for
/// ignored bad settings, so silence is the check), with ExecStart pointed
/// at the binary under test.
#[test]
fn the_systemd_unit_verifies_cleanly() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        common::skip(
            "the_systemd_unit_verifies_cleanly",
            "systemd-analyze is not installed (apt-get install systemd)",
        );
        return;
    };
    assert!(version.status.success());
    let unit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/systemd/vsched.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/vsched daemon"), "{text}");
    // The RWC drop-in (deploy/systemd/vsched-rwc.conf) verified merged
    // into the unit, as systemd merges a drop-in's [Service] section.
    let drop_in = std::fs::read_to_string(unit.with_file_name("vsched-rwc.conf")).unwrap();
    assert!(drop_in.contains("ExecStopPost=/usr/bin/vsched daemon --restore"));
    let dir = std::env::temp_dir().join(format!("vsched-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("vsched.service", text.clone()),
        ("vsched-rwc.service", format!("{text}\n{drop_in}")),
    ] {
        let copy = dir.join(name);
        std::fs::write(&copy, text.replace("/usr/bin/vsched", VSCHED)).unwrap();
        common::assert_unit_verifies(&copy);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn status(sock: &str, json: bool) -> std::process::Output {
    let mut cmd = Command::new(VSCHED);
    cmd.args(["status", "--socket", sock]);
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

/// `vsched status --json --history` returns the reports kept so far, each
/// with every online vCPU, and `--plot` draws them (an SVG with both
/// panels and a legend entry per vCPU).
fn status_draws_the_recent_past(sock: &str, cpus: &[u32]) {
    // Two reports at least, so that the plot has a line to draw.
    let started = Instant::now();
    let history = loop {
        let out = Command::new(VSCHED)
            .args(["status", "--socket", sock, "--json", "--history"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if h["samples"].as_array().is_some_and(|s| s.len() >= 2) {
            break h;
        }
        assert!(started.elapsed() < FIRST_MODEL_TIMEOUT, "no history: {h}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(history["schema"], "vsched.daemon-history/v1");
    assert_eq!(history["window_s"], 600, "the default window: {history}");
    for sample in history["samples"].as_array().unwrap() {
        let seen: Vec<u64> = sample["vcpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["cpu"].as_u64().unwrap())
            .collect();
        assert_eq!(seen, cpus.iter().map(|&c| u64::from(c)).collect::<Vec<_>>());
    }
    let svg = std::path::Path::new(sock).with_file_name("status.svg");
    let out = Command::new(VSCHED)
        .args(["status", "--socket", sock, "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{text:.200}");
    for label in ["available share per vCPU", "inactive episodes per vCPU"] {
        assert!(text.contains(label), "{label} missing");
    }
    for c in cpus {
        assert!(
            text.contains(&format!("vCPU {c}")),
            "no legend for vCPU {c}"
        );
    }
    let bad = Command::new(VSCHED)
        .args(["status", "--socket", sock, "--history"])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "--history needs --json: {bad:?}"
    );
}

/// `vsched status` reads the daemon's model from its socket; with no
/// daemon it says so; a second daemon on the socket is refused; the
/// socket a SIGKILLed daemon leaves is replaced by the next one, and a
/// stopped daemon removes it.
#[test]
fn status_reads_the_model_and_the_socket_survives_a_kill() {
    let _guard = common::serial();
    let sock = socket("status");
    let none = status(&sock, false);
    assert_eq!(none.status.code(), Some(2), "{none:?}");
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no vsched daemon is running"),
        "{none:?}"
    );
    let start = || {
        Command::new(VSCHED)
            .args(["daemon", "--listen", "127.0.0.1:0", "--interval", "500ms"])
            .args(["--socket", &sock])
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let model = |sock: &str| -> serde_json::Value {
        let started = Instant::now();
        loop {
            let out = status(sock, true);
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                if v["model_updates"].as_u64().unwrap_or(0) > 0 {
                    return v;
                }
            }
            assert!(started.elapsed() < FIRST_MODEL_TIMEOUT, "no model: {out:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    let mut first = start();
    let v = model(&sock);
    assert_eq!(v["schema"], "vsched.daemon-status/v1");
    assert_eq!(v["pid"].as_u64(), Some(u64::from(first.id())));
    let cpus = common::online_cpus();
    assert_eq!(
        v["report"]["vcpus"].as_array().unwrap().len(),
        cpus.len(),
        "{v}"
    );
    let table = status(&sock, false);
    assert!(table.status.success());
    assert!(String::from_utf8_lossy(&table.stdout).contains("capacity"));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "root only");
    status_draws_the_recent_past(&sock, &cpus);

    let second = Command::new(VSCHED)
        .args(["daemon", "--listen", "127.0.0.1:0", "--socket", &sock])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{second:?}");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already running"),
        "{second:?}"
    );

    first.kill().unwrap(); // SIGKILL: no clean-up ran
    first.wait().unwrap();
    assert!(
        std::path::Path::new(&sock).exists(),
        "SIGKILL leaves the socket"
    );
    let mut next = start();
    let v = model(&sock);
    assert_eq!(v["pid"].as_u64(), Some(u64::from(next.id())));
    // SAFETY: kill with the pid of a child not yet reaped.
    unsafe { libc::kill(next.id() as i32, libc::SIGTERM) };
    assert!(next.wait().unwrap().success());
    assert!(
        !std::path::Path::new(&sock).exists(),
        "a stopped daemon removes its socket"
    );
}
