//! The ptrace freezer on a real process: a stopped thread stops, signals sent
//! to it while it is seized still arrive, job control still works, and
//! releasing leaves no tracer behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vsched_spin::freeze::Freezer;

/// A freezer reaps every tracee event of its process: tests that trace run
/// one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends `sig` to `pid`, a child this test started and has not reaped.
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill takes no pointers; the child is not reaped yet, so its id
    // cannot name another process.
    unsafe { libc::kill(pid, sig) };
}

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
                "trap 'echo usr1' USR1; trap 'echo urg' URG; echo ready; while :; do :; done",
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

/// A spinning shell, seized and stopped by a freezer of its own.
fn stopped_spinner() -> (Spinner, i32, Freezer) {
    let sh = Spinner::start();
    let pid = sh.pid();
    let mut f = Freezer::new(pid).expect("freezer");
    assert!(f.stop(pid), "ptrace refused (this test runs as the parent)");
    until(&mut f, "the stop", || state(pid).0 == 't');
    (sh, pid, f)
}

#[test]
fn stop_resume_signals_and_job_control() {
    let _guard = serial();
    let (mut sh, pid, mut f) = stopped_spinner();
    assert!(f.holds(pid));

    // A signal sent while stopped is delivered once the thread runs again.
    signal(pid, libc::SIGUSR1);
    f.resume(pid);
    until(&mut f, "running again", || state(pid).0 == 'R');
    let mut line = String::new();
    sh.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "usr1", "the trapped signal was not delivered");

    // Job control: SIGSTOP stops it as it would without a tracer, SIGCONT resumes.
    signal(pid, libc::SIGSTOP);
    until(&mut f, "the job-control stop", || {
        state(pid).0 == 't' || state(pid).0 == 'T'
    });
    // The stop signal passes through vsched (a signal-delivery stop, then
    // the group stop): keep handling events for a while, then look.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        f.reap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_ne!(state(pid).0, 'R', "a job-control stop was undone");
    signal(pid, libc::SIGCONT);
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

/// The signal entry traps stop threads with is intercepted: its stop is held
/// until the engine decides; resumed, the signal is suppressed; passed on, it
/// is delivered. A kill() says it came from a process, not the kernel.
#[test]
fn intercepted_signal_stops_are_held_suppressed_or_passed() {
    let _guard = serial();
    // Seized (a stop and a resume).
    let (mut sh, pid, mut f) = stopped_spinner();
    f.resume(pid);
    until(&mut f, "running again", || state(pid).0 == 'R');
    f.intercept(libc::SIGURG);

    let signal_stop = |f: &mut Freezer| {
        signal(pid, libc::SIGURG);
        let start = Instant::now();
        let stopped = loop {
            f.reap();
            let stopped = f.take_signal_stopped();
            if !stopped.is_empty() {
                break stopped;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no signal stop");
            std::thread::sleep(Duration::from_millis(2));
        };
        assert_eq!(stopped, [pid]);
        assert_eq!(state(pid).0, 't');
        assert!(!f.signal_from_kernel(pid), "kill() is a process's signal");
    };

    // Suppressed: the shell never reports it (SIGUSR1, sent next, is the
    // next line).
    signal_stop(&mut f);
    f.resume(pid);
    until(&mut f, "running again", || state(pid).0 == 'R');
    signal(pid, libc::SIGUSR1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        f.reap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut line = String::new();
    sh.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "usr1", "a suppressed signal was delivered");

    // Passed on: delivered.
    signal_stop(&mut f);
    f.pass_signal(pid, libc::SIGURG);
    until(&mut f, "running again", || state(pid).0 == 'R');
    line.clear();
    sh.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "urg", "a passed signal was not delivered");

    // A process's SIGURG that is already waiting to be reported when vsched
    // asks for a stop is delivered, and the stop still happens.
    signal(pid, libc::SIGURG);
    let start = Instant::now();
    while state(pid).0 != 't' {
        assert!(start.elapsed() < Duration::from_secs(5), "no signal stop");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(f.stop(pid));
    let start = Instant::now();
    loop {
        f.reap();
        if state(pid).0 == 't' && f.holds(pid) && !f.take_newly_stopped().is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the stop asked for"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(f.take_signal_stopped().is_empty());
    // The shell reports the signal when it runs again.
    f.resume(pid);
    line.clear();
    sh.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "urg", "a signal racing a stop was swallowed");
    f.release_all();
}

/// Run as a child by `exit_while_a_thread_is_stopped`: one thread spins, the
/// main thread exits the process while it is stopped.
#[test]
fn child_spinner_that_exits() {
    if std::env::var_os("VSCHED_FREEZE_CHILD").is_none() {
        return; // only as that child
    }
    std::thread::spawn(|| loop {
        std::hint::black_box(0u64);
    });
    println!("ready");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: ending the process at once, as exit_group does.
    unsafe { libc::_exit(0) };
}

/// A process that exits while one of its threads is stopped must still be
/// reapable: the stopped thread dies without an exit stop and stays a traced
/// zombie until the freezer reaps it (the process's exit waits for that).
#[test]
fn exit_while_a_thread_is_stopped() {
    let _guard = serial();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_spinner_that_exits",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("VSCHED_FREEZE_CHILD", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    let spinner = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&t| t != pid)
        .max()
        .expect("the spinning thread");
    let mut f = Freezer::new(pid).expect("freezer");
    assert!(f.stop(spinner));
    let start = Instant::now();
    let status = loop {
        f.reap();
        f.reap_exited();
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the process never became reapable"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(status.success(), "{status:?}");
}
