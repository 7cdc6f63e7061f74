//! One run of one workload, directly (glibc) or under `vsched exec`: the
//! command, its timing, and what of its output must match between the two.

use super::input;
use super::workload::Workload;
use crate::compare::Variant;
use crate::cprogram::CProgram;
use crate::BenchError;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// memcaslap's run per measurement: long enough for thousands of requests
/// per connection, short enough for ten pairs at two thread counts.
const MEMCACHED_LOAD: &str = "5s";
/// memcaslap's threads and connections: two client threads (the machine
/// has few vCPUs; the server must get most of them) keeping 32 requests in
/// flight, so that every server thread has work at 4x too.
const MEMCACHED_CLIENT_THREADS: &str = "2";
const MEMCACHED_CONNECTIONS: &str = "32";
/// How long a starting memcached may take to accept connections.
const MEMCACHED_START_TIMEOUT: Duration = Duration::from_secs(10);

/// What a run measured and what of its output the other variant's runs
/// must reproduce.
#[derive(Debug)]
pub struct Outcome {
    /// Seconds, or requests per second for a rate (Workload::is_rate).
    pub value: f64,
    /// CPU seconds (user + system) that the run's processes used: the
    /// program, `vsched exec` and, for memcached, the load generator.
    pub cpu_s: f64,
    pub fingerprint: Fingerprint,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Fingerprint {
    /// The output is this file (compared byte for byte).
    File(PathBuf),
    /// The output's deterministic part (a checksum, a result table).
    Text(String),
}

/// Everything the runs share: the vsched binary, a scratch directory
/// (removed on drop), the generated input and the compiled C programs.
pub struct Setup {
    pub vsched: PathBuf,
    pub dir: PathBuf,
    pub input: PathBuf,
    pub omp: Option<CProgram>,
    pub syncbench: Option<CProgram>,
}

impl Setup {
    /// Creates the scratch directory and the input of `input_bytes`, and
    /// compiles what compiles (a program that does not is reported as
    /// skipped by the caller).
    pub fn new(vsched: &Path, input_bytes: u64) -> Result<Setup, BenchError> {
        let dir = std::env::temp_dir().join(format!("vsched-bench-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Write {
            what: "a temporary directory",
            source,
        })?;
        let mut setup = Setup {
            vsched: vsched.to_path_buf(),
            input: dir.join("input.txt"),
            dir,
            omp: None,
            syncbench: None,
        };
        input::write_text(&setup.input, input_bytes)?;
        setup.omp = CProgram::compile(&crate::spin::openmp::SOURCE, "real-omp").ok();
        setup.syncbench = CProgram::compile(&crate::sync::program::SOURCE, "real-sync").ok();
        Ok(setup)
    }

    /// `program` run directly or under `vsched exec`, reading nothing
    /// (a caller with input sets stdin again).
    fn command(&self, variant: Variant, program: &Path) -> Command {
        let mut c = match variant {
            Variant::Baseline => Command::new(program),
            Variant::Vsched => {
                let mut c = Command::new(&self.vsched);
                c.args(["exec", "--"]).arg(program);
                c
            }
        };
        c.stdin(Stdio::null());
        c
    }

    /// One run of `w` on `threads` threads; `size` is the calibrated
    /// amount of work for the workloads that take one (OpenMP regions,
    /// sqlite rows, mutex operations).
    pub fn run(
        &self,
        w: Workload,
        variant: Variant,
        threads: usize,
        size: u64,
    ) -> Result<Outcome, BenchError> {
        let n = threads.to_string();
        let compressor = |program: &str, args: &[&str]| -> Result<Outcome, BenchError> {
            let out = self
                .dir
                .join(format!("{}-{threads}-{variant:?}.out", w.name()));
            let file = std::fs::File::create(&out).map_err(|source| BenchError::Write {
                what: "a compressor's output",
                source,
            })?;
            let mut cmd = self.command(variant, Path::new(program));
            cmd.args(args).arg(&self.input).stdout(file);
            let (seconds, cpu_s, _) = timed(cmd, w.name())?;
            Ok(Outcome {
                value: seconds,
                cpu_s,
                fingerprint: Fingerprint::File(out),
            })
        };
        match w {
            // Blocks of 2 MiB, so that the default input gives every
            // thread of the 4x run a block (xz's default, three times the
            // dictionary, is 12 MiB at -3).
            Workload::Xz => compressor("xz", &["-T", &n, "-3", "--block-size=2MiB", "-c"]),
            // zstd and pbzip2 take their thread count attached to the flag.
            Workload::Zstd => compressor("zstd", &[&format!("-T{n}"), "-12", "-q", "-c"]),
            Workload::Pigz => compressor("pigz", &["-p", &n, "-6", "-c"]),
            Workload::Pbzip2 => compressor("pbzip2", &[&format!("-p{n}"), "-9", "-c"]),
            Workload::Openmp => self.openmp(variant, threads, size),
            Workload::Sqlite => self.sqlite(variant, threads, size),
            Workload::Memcached => self.memcached(variant, threads),
            Workload::Mutex | Workload::MutexBusy => self.mutex(variant, threads, size),
        }
    }

    fn openmp(
        &self,
        variant: Variant,
        threads: usize,
        regions: u64,
    ) -> Result<Outcome, BenchError> {
        let program = self.omp.as_ref().ok_or(BenchError::NoCompiler)?;
        let mut cmd = self.command(variant, program.path());
        cmd.arg(regions.to_string())
            .env("OMP_NUM_THREADS", threads.to_string());
        let (seconds, cpu_s, out) = timed(cmd, "the OpenMP program")?;
        let checksum = json_field(&out, "checksum", "the OpenMP program")?;
        Ok(Outcome {
            value: seconds,
            cpu_s,
            fingerprint: Fingerprint::Text(checksum),
        })
    }

    fn sqlite(&self, variant: Variant, threads: usize, rows: u64) -> Result<Outcome, BenchError> {
        let script = self.dir.join(format!("sqlite-{rows}.sql"));
        std::fs::write(&script, sqlite_script(threads, rows)).map_err(|source| {
            BenchError::Write {
                what: "the sqlite script",
                source,
            }
        })?;
        let stdin = std::fs::File::open(&script).map_err(|source| BenchError::Write {
            what: "the sqlite script",
            source,
        })?;
        let mut cmd = self.command(variant, Path::new("sqlite3"));
        cmd.arg(":memory:").stdin(stdin);
        let (seconds, cpu_s, out) = timed(cmd, "sqlite3")?;
        Ok(Outcome {
            value: seconds,
            cpu_s,
            fingerprint: Fingerprint::Text(String::from_utf8_lossy(&out.stdout).into_owned()),
        })
    }

    fn mutex(&self, variant: Variant, threads: usize, ops: u64) -> Result<Outcome, BenchError> {
        let program = self.syncbench.as_ref().ok_or(BenchError::NoCompiler)?;
        let mut cmd = self.command(variant, program.path());
        cmd.args(["mutex", &threads.to_string(), &ops.to_string()]);
        let (seconds, cpu_s, out) = timed(cmd, "the mutex program")?;
        let done = json_field(&out, "ops", "the mutex program")?;
        Ok(Outcome {
            value: seconds,
            cpu_s,
            fingerprint: Fingerprint::Text(done),
        })
    }

    /// memcached with `threads` worker threads on a free loopback port,
    /// loaded by memcaslap; its requests per second.
    fn memcached(&self, variant: Variant, threads: usize) -> Result<Outcome, BenchError> {
        let port = free_port()?;
        let cpu_before = vsched_os::child::reaped_cpu();
        let mut cmd = self.command(variant, Path::new("memcached"));
        cmd.args(["-t", &threads.to_string(), "-l", "127.0.0.1", "-U", "0"])
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Gone with the benchmark even if it is killed outright.
        vsched_os::child::die_with_parent(&mut cmd, libc::SIGTERM);
        // memcached refuses to run as root without a user to switch to.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "nobody"]);
        }
        let server = Server(cmd.spawn().map_err(|source| BenchError::Start {
            what: "memcached",
            source,
        })?);
        server.wait_for(port)?;
        let out = Command::new("memcaslap")
            .args(["-s", &format!("127.0.0.1:{port}")])
            .args(["-T", MEMCACHED_CLIENT_THREADS, "-c", MEMCACHED_CONNECTIONS])
            .args(["-t", MEMCACHED_LOAD])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| BenchError::Start {
                what: "memcaslap",
                source,
            })?;
        drop(server);
        let cpu_s = (vsched_os::child::reaped_cpu() - cpu_before).as_secs_f64();
        let text = String::from_utf8_lossy(&out.stdout);
        let tps = (out.status.success())
            .then(|| parse_tps(&text))
            .flatten()
            .ok_or_else(|| BenchError::Failed {
                what: "memcaslap",
                status: out.status,
                detail: format!(": {}", text.trim()),
            })?;
        Ok(Outcome {
            value: tps,
            cpu_s,
            // Requests are random: nothing to compare but that they succeeded.
            fingerprint: Fingerprint::Text("served".into()),
        })
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A memcached server, stopped (SIGTERM, then reaped) on drop.
struct Server(Child);

impl Server {
    fn wait_for(&self, port: u16) -> Result<(), BenchError> {
        let start = Instant::now();
        while start.elapsed() < MEMCACHED_START_TIMEOUT {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(BenchError::Scenario(format!(
            "memcached did not accept connections on port {port} within {MEMCACHED_START_TIMEOUT:?}"
        )))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill with a pid we spawned and have not reaped yet.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A loopback port free now (the kernel picks it; released for memcached).
fn free_port() -> Result<u16, BenchError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| BenchError::Start {
            what: "a loopback listener",
            source,
        })
}

/// Runs `cmd` to its end; wall-clock seconds (start-up of `vsched exec`
/// included: a user pays it too), CPU seconds and its output, if it
/// succeeded.
fn timed(mut cmd: Command, what: &'static str) -> Result<(f64, f64, Output), BenchError> {
    let cpu_before = vsched_os::child::reaped_cpu();
    let start = Instant::now();
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Start { what, source })?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_s = (vsched_os::child::reaped_cpu() - cpu_before).as_secs_f64();
    if !out.status.success() {
        return Err(BenchError::Failed {
            what,
            status: out.status,
            detail: format!(": {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok((seconds, cpu_s, out))
}

/// A field of the JSON line a C program printed last, as text.
fn json_field(out: &Output, field: &str, what: &'static str) -> Result<String, BenchError> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|source| BenchError::Output {
            what,
            output: stdout.to_string(),
            source,
        })?;
    Ok(value[field].to_string())
}

/// memcaslap's summary: "Run time: 5.0s Ops: 341337 TPS: 68253 Net_rate: ...".
fn parse_tps(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| l.contains("TPS:"))?;
    let after = line.split("TPS:").nth(1)?;
    after.split_whitespace().next()?.parse().ok()
}

/// An in-memory table of `rows` rows, two indexes built with `threads`
/// sorter threads, and queries whose results are the fingerprint.
fn sqlite_script(threads: usize, rows: u64) -> String {
    format!(
        "PRAGMA threads = {threads};
CREATE TABLE t(k INTEGER, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
  INSERT INTO t SELECT (x * 7919) % 1000003, printf('%08d-%s', x, hex(x * x)) FROM c;
CREATE INDEX t_v ON t(v);
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(k), min(v), max(v) FROM t;
SELECT k % 97 AS bucket, count(*) FROM t GROUP BY bucket ORDER BY 2 DESC, 1 LIMIT 3;
SELECT count(*) FROM t WHERE v BETWEEN '00001000' AND '00002000';
"
    )
}

/// True if two outputs are the same (files byte for byte).
pub fn same_output(a: &Fingerprint, b: &Fingerprint) -> Result<bool, BenchError> {
    match (a, b) {
        (Fingerprint::File(a), Fingerprint::File(b)) => {
            let read = |p: &Path| {
                std::fs::read(p).map_err(|source| BenchError::Pipe {
                    what: "a compressor's output",
                    source,
                })
            };
            Ok(read(a)? == read(b)?)
        }
        (a, b) => Ok(a == b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcaslap_summary_gives_its_rate() {
        let text = "cmd_get: 184670\n\nRun time: 3.0s Ops: 205196 TPS: 68388 Net_rate: 76.5M/s\n";
        assert_eq!(parse_tps(text), Some(68388.0));
        assert_eq!(parse_tps("no summary"), None);
    }

    #[test]
    fn sqlite_script_names_its_threads_and_rows() {
        let s = sqlite_script(8, 1000);
        assert!(s.starts_with("PRAGMA threads = 8;"));
        assert!(s.contains("x < 1000)"));
    }
}
