//! Start-up (a constructor run when the library is loaded), fork, and the
//! statistics report at exit.

use core::sync::atomic::{AtomicI32, Ordering::Relaxed};

static STARTED_IN_PID: AtomicI32 = AtomicI32::new(0);
/// A copy of stderr for the report: programs such as coreutils close
/// stderr in their own exit handlers, which run before ours.
static REPORT_FD: AtomicI32 = AtomicI32::new(2);

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = start;

extern "C" fn start() {
    crate::config::load_from_env();
    crate::tid::init();
    crate::load::init();
    crate::real::resolve_all();
    // SAFETY: registering plain functions; called once at load time.
    unsafe {
        STARTED_IN_PID.store(libc::getpid(), Relaxed);
        libc::pthread_atfork(None, None, Some(child_after_fork));
        if crate::config::stats_on() {
            // Far above the descriptors a program uses, closed on exec.
            let fd = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 900);
            if fd >= 0 {
                REPORT_FD.store(fd, Relaxed);
            }
            libc::atexit(report_at_exit);
        }
    }
}

extern "C" fn child_after_fork() {
    crate::tid::forget();
    crate::load::after_fork();
    crate::channel::after_fork();
}

/// VSCHED_SYNC_STATS: a table on stderr ("json": JSON on stderr).
/// VSCHED_SYNC_STATS_JSON=PATH: JSON into PATH ("%p" becomes the pid).
/// A forked child reports only if the path names its pid.
extern "C" fn report_at_exit() {
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    let forked_child = pid != STARTED_IN_PID.load(Relaxed);
    if let Some(mode) = crate::config::env(vsched_os::exec_env::STATS.c_name()) {
        if !forked_child {
            let text = if mode == b"json" {
                crate::stats::to_json(pid)
            } else {
                crate::stats::to_text(pid)
            };
            write_all(REPORT_FD.load(Relaxed), text.as_bytes());
        }
    }
    if let Some(path) = crate::config::env(vsched_os::exec_env::STATS_JSON.c_name()) {
        let path = String::from_utf8_lossy(path);
        if forked_child && !path.contains("%p") {
            return;
        }
        let path = path.replace("%p", &pid.to_string());
        if let Err(e) = std::fs::write(&path, crate::stats::to_json(pid)) {
            let msg = format!("vsched-sync: cannot write statistics to {path}: {e}\n");
            write_all(REPORT_FD.load(Relaxed), msg.as_bytes());
        }
    }
}

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}
