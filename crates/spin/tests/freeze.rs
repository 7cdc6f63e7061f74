//! The ptrace freezer on a real process: a stopped thread stops, signals sent
//! to it while it is seized still arrive, job control still works, and
//! releasing leaves no tracer behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vsched_spin::freeze::Freezer;

/// A shell that spins and reports SIGUSR1 on stdout.
struct Spinner {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Spinner {
    fn start() -> Spinner {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "trap 'echo usr1' USR1; echo ready; while :; do :; done",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Spinner { child, out }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn state(pid: i32) -> (char, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let st = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (st.chars().next().unwrap(), tracer)
}

/// Reaps tracee events until `cond` holds (or fails after 5 s).
fn until(f: &mut Freezer, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out: {what}"
        );
        f.reap();
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn stop_resume_signals_and_job_control() {
    let mut sh = Spinner::start();
    let pid = sh.pid();
    let mut f = Freezer::new().expect("freezer");

    assert!(f.stop(pid), "ptrace refused (this test runs as the parent)");
    until(&mut f, "the stop", || state(pid).0 == 't');
    assert!(f.holds(pid));

    // A signal sent while stopped is delivered once the thread runs again.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    f.resume(pid);
    until(&mut f, "running again", || state(pid).0 == 'R');
    let mut line = String::new();
    sh.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "usr1", "the trapped signal was not delivered");

    // Job control: SIGSTOP stops it as it would without a tracer, SIGCONT resumes.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    until(&mut f, "the job-control stop", || {
        state(pid).0 == 't' || state(pid).0 == 'T'
    });
    std::thread::sleep(Duration::from_millis(50));
    f.reap();
    assert_ne!(state(pid).0, 'R', "a job-control stop was undone");
    unsafe { libc::kill(pid, libc::SIGCONT) };
    until(&mut f, "continued", || state(pid).0 == 'R');

    // Releasing detaches: no tracer left, the shell spins on.
    assert!(f.stop(pid));
    until(&mut f, "the second stop", || state(pid).0 == 't');
    f.release_all();
    let start = Instant::now();
    while state(pid) != ('R', 0) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still held: {:?}",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
