//! Helpers shared by the integration tests: running the real binary and
//! creating the conditions a test needs (a noisy neighbour on a vCPU).

#![allow(dead_code)]

pub mod lab;

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vsched_os::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// Probes measure the whole machine: two at once would disturb each other,
/// so every test that runs one holds this lock.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records that `test` could not run its real check on this machine and
/// why, so that a skip is visible: on stderr at once, and appended to the
/// file named by `VSCHED_SKIP_LOG`, which scripts/test.sh lists at the end.
/// A skipped test must still have checked whatever it could.
pub fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    append_line("VSCHED_SKIP_LOG", &format!("{test}: {why}\n"));
}

/// Records something outside vsched that a test worked around (a check
/// run again on a noisy host): on stderr at once, and in
/// the file named by `VSCHED_NOTE_LOG`, which scripts/test.sh lists at the
/// end, so that it is never hidden.
#[allow(dead_code)] // not every test binary that includes common uses it
pub fn note(test: &str, what: &str) {
    eprintln!("NOTE {test}: {what}");
    append_line("VSCHED_NOTE_LOG", &format!("{test}: {what}\n"));
}

fn append_line(variable: &str, line: &str) {
    if let Some(path) = std::env::var_os(variable) {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("could not record this in {path:?}: {e}");
        }
    }
}

pub fn vsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vsched"))
        .args(args)
        .output()
        .expect("running vsched")
}

/// The preload runtime built beside the binary under test.
pub fn sync_library() -> std::path::PathBuf {
    let lib =
        std::path::Path::new(env!("CARGO_BIN_EXE_vsched")).with_file_name("libvsched_sync.so");
    assert!(
        lib.is_file(),
        "{} is missing: build the workspace first (cargo build --release --workspace)",
        lib.display()
    );
    lib
}

/// Asserts that `systemd-analyze verify UNIT` exits 0 and prints nothing
/// (it exits 0 even for settings it ignores: silence is the check).
pub fn assert_unit_verifies(unit: &std::path::Path) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .expect("running systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "{}: {said}",
        unit.display()
    );
}

pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    vsched_model::cpulist::parse_cpu_list(&text).unwrap()
}

/// A SCHED_FIFO thread that occupies one vCPU for `on` of every `period`,
/// standing in for a hypervisor that switches the vCPU off. It stops when
/// dropped (also when the test panics) and in any case after `max_life`.
pub struct NoisyNeighbour {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<(), String>>>,
}

impl NoisyNeighbour {
    pub fn start(cpu: u32, on: Duration, period: Duration, max_life: Duration) -> NoisyNeighbour {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            if vsched_os::affinity::pin_current_thread(cpu).is_err() {
                return Err("cannot pin the neighbour".to_string());
            }
            if vsched_os::sched::set_scheduler(libc::SCHED_FIFO, 50).is_err() {
                return Err(
                    "SCHED_FIFO refused: the noisy-neighbour tests need root or CAP_SYS_NICE"
                        .to_string(),
                );
            }
            let deadline = Instant::now() + max_life;
            let (on, period) = (on.as_nanos() as u64, period.as_nanos() as u64);
            let mut next = monotonic_ns();
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                // `on` from when it actually woke: counted from the planned
                // start, a late wake-up shortened the on-period, and the
                // probe, rightly, measured 1.5 ms episodes for a "2 ms"
                // neighbour (a clean-clone run failed on that).
                let busy_until = monotonic_ns() + on;
                while monotonic_ns() < busy_until {
                    std::hint::spin_loop();
                }
                next += period;
                sleep_until_monotonic_ns(next);
            }
            Ok(())
        });
        NoisyNeighbour {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the neighbour and reports whether it could run as asked.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err("neighbour panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for NoisyNeighbour {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// A temporary directory removed when the test ends.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vsched-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pretty-printed JSON (a `vsched sched --stats-json` summary, a
/// `vsched run --consolidate-json` report) that `cat` printed after
/// `marker` in a guest command's output.
pub fn summary_after(text: &str, marker: &str) -> serde_json::Value {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker}: {text}"))..];
    let json = &after[after.find("\n{").unwrap_or_else(|| panic!("{text}"))..];
    let end = json.find("\n}").map_or(json.len(), |i| i + 2);
    serde_json::from_str(&json[..end]).unwrap_or_else(|e| panic!("{e}: {text}"))
}
