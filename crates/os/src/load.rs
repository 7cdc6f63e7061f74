//! How many threads want a vCPU right now, and when that is too many.
//!
//! The kernel's instantaneous count of runnable tasks is the fourth field
//! of /proc/loadavg ("0.12 0.34 0.56 3/789 1234": 3 runnable, 789 in all),
//! machine-wide. It is read with a raw pread on a descriptor kept open,
//! into a stack buffer: no allocation and no cancellation point, because
//! vsched-sync reads it from inside a program's mutex and spinlock waits.

/// The one oversubscription rule: a machine is oversubscribed when more
/// threads want a vCPU than it has vCPUs, beyond `slack` extra threads.
///
/// Callers differ only in how they count and in the slack they can afford,
/// and say why at the call site:
/// - the preload runtime counts the runnable tasks as the kernel does
///   (including the waiter asking) with [`RUNTIME_SLACK`];
/// - the spin detector leaves itself out, adds the threads it keeps
///   stopped (they want a vCPU although the kernel does not count them),
///   and uses [`DETECTOR_SLACK`].
pub fn oversubscribed(wanting_a_vcpu: u64, vcpus: u64, slack: u64) -> bool {
    wanting_a_vcpu > vcpus + slack
}

/// The preload runtime yields instead of spinning as soon as one thread
/// more than the vCPUs is runnable: a spinning waiter then holds a vCPU
/// that a runnable thread (perhaps the lock holder) needs.
pub const RUNTIME_SLACK: u64 = 0;

/// The spin detector tolerates one runnable task more than the vCPUs: a
/// passing kernel worker or shell command must not switch a program with
/// one thread per vCPU into demotions and fast sampling (measured: an
/// OpenMP program at 1x ran 3x slower without this slack).
pub const DETECTOR_SLACK: u64 = 1;

/// The preload runtime's second rule, for yielding: a waiter yields only
/// when this process itself has more threads awake than vCPUs, and the
/// other programs' runnable threads alone would not fill the vCPUs.
/// Yielding keeps the waiter runnable so that its hand-off needs no
/// wake-up, and hands the vCPU to whoever else is runnable; that helps
/// when whoever it is is likely the program's own lock holder or late
/// barrier thread. When other programs' threads are many, a yield gives
/// one of them the vCPU for a time slice and delays the waiter's own
/// hand-off by as much, while a futex sleep is ended at once by the
/// wake-up. Measured: the pthread stress program (8 threads, 2 vCPUs)
/// beside 4 CPU-bound loops took 9.2 s with the first condition alone,
/// where glibc took 2.2 s: its waiters yielded 19,000 times, mostly to the
/// loops.
///
/// `runnable` is the machine's runnable count (/proc/loadavg);
/// `own_threads_awake` may count threads blocked outside the runtime
/// (in `pthread_join`, `read`, `epoll_wait`: they cannot be seen cheaply),
/// so the others' share is underestimated and the rule errs towards
/// yielding, as it did before the second condition; [`OWN_SLACK`] allows
/// for the commonest such thread.
pub fn yield_may_help(own_threads_awake: u64, runnable: u64, vcpus: u64) -> bool {
    let others_runnable = runnable.saturating_sub(own_threads_awake);
    own_threads_awake > vcpus + OWN_SLACK && others_runnable < vcpus
}

/// One thread: the main thread waiting in `pthread_join` for its workers,
/// the shape of most parallel programs (measured: a mutex program with one
/// worker per vCPU still yielded without it).
pub const OWN_SLACK: u64 = 1;

/// Online vCPUs of the machine (the runnable count is machine-wide, so it
/// is compared with all of them, not with one process's affinity mask).
pub fn online_vcpus() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u64
}

/// A /proc file kept open and re-read from offset 0: the kernel
/// regenerates such files on every read at offset 0, so one descriptor
/// serves for the life of the process. Read with a raw pread into the
/// caller's stack buffer: no allocation, and no cancellation point
/// (glibc's pread is one; vsched-sync reads these inside mutex waits).
#[derive(Debug, Clone, Copy)]
struct ProcFile {
    fd: libc::c_int,
}

impl ProcFile {
    fn open(path: &core::ffi::CStr) -> std::io::Result<ProcFile> {
        // SAFETY: a NUL-terminated path; flags are plain integers.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ProcFile { fd })
    }

    /// The file's current text, as much as fits in `buf`; None if the
    /// read failed.
    fn read<'b>(&self, buf: &'b mut [u8]) -> Option<&'b [u8]> {
        // SAFETY: `buf` is writable for the length passed; a stale or bad
        // fd only makes the call fail.
        let n = unsafe {
            libc::syscall(
                libc::SYS_pread64,
                self.fd,
                buf.as_mut_ptr(),
                buf.len(),
                0i64,
            )
        };
        (n > 0).then(|| &buf[..n as usize])
    }
}

/// An open /proc/loadavg (kept across fork: it is machine-wide).
#[derive(Debug, Clone, Copy)]
pub struct Loadavg(ProcFile);

impl Loadavg {
    pub fn open() -> std::io::Result<Loadavg> {
        ProcFile::open(c"/proc/loadavg").map(Loadavg)
    }

    /// Wraps a descriptor opened by [`Loadavg::open`] and kept elsewhere
    /// (e.g. in an atomic); a bad descriptor only makes reads fail.
    pub fn from_raw_fd(fd: libc::c_int) -> Loadavg {
        Loadavg(ProcFile { fd })
    }

    pub fn as_raw_fd(&self) -> libc::c_int {
        self.0.fd
    }

    /// The number of runnable tasks now, or None if the read failed.
    pub fn runnable(&self) -> Option<u64> {
        // 128 bytes: the file is five short fields (about 30-60 bytes).
        let mut buf = [0u8; 128];
        parse_runnable(self.0.read(&mut buf)?)
    }
}

/// This process's /proc/self/stat, kept open like [`Loadavg`] (and reopened
/// by the caller after fork: the descriptor names the pid it was opened for).
#[derive(Debug, Clone, Copy)]
pub struct SelfStat(ProcFile);

impl SelfStat {
    pub fn open() -> std::io::Result<SelfStat> {
        ProcFile::open(c"/proc/self/stat").map(SelfStat)
    }

    pub fn from_raw_fd(fd: libc::c_int) -> SelfStat {
        SelfStat(ProcFile { fd })
    }

    pub fn as_raw_fd(&self) -> libc::c_int {
        self.0.fd
    }

    /// The process's thread count now, or None if the read failed.
    pub fn threads(&self) -> Option<u64> {
        // 1 KiB: the file is 52 numeric fields after a command name of at
        // most 16 bytes (about 300-400 bytes).
        let mut buf = [0u8; 1024];
        parse_num_threads(self.0.read(&mut buf)?)
    }
}

/// /proc/PID/stat's num_threads: field 20, counted from the pid; the
/// command name (field 2) is in parentheses and may hold spaces and ')',
/// so fields are counted after the last ')'.
pub fn parse_num_threads(text: &[u8]) -> Option<u64> {
    let close = text.iter().rposition(|b| *b == b')')?;
    // After ") ": field 3 (state) is the first; num_threads is the 18th.
    let field = text[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty())
        .nth(17)?;
    crate::parse_decimal_u64(field)
}

/// "0.12 0.34 0.56 3/789 1234" → 3.
pub fn parse_runnable(text: &[u8]) -> Option<u64> {
    let field = text.split(|b| *b == b' ').nth(3)?;
    crate::parse_decimal_u64(field.split(|b| *b == b'/').next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_running_count() {
        assert_eq!(parse_runnable(b"0.12 0.34 0.56 3/789 1234\n"), Some(3));
        assert_eq!(parse_runnable(b"0.12 0.34 0.56 17/789 1234\n"), Some(17));
        assert_eq!(parse_runnable(b"garbage"), None);
        assert_eq!(parse_runnable(b"1 2 3 x/4 5"), None);
        assert_eq!(parse_runnable(b"1 2 3 /4 5"), None);
        assert_eq!(parse_runnable(b"1 2 3 99999999999999999999/4 5"), None);
    }

    #[test]
    fn parses_the_thread_count_after_any_command_name() {
        let stat =
            b"4242 (my prog) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 7 0 123 456 789";
        assert_eq!(parse_num_threads(stat), Some(7));
        assert_eq!(parse_num_threads(b"4242 (short) S 1"), None);
        assert_eq!(parse_num_threads(b"no parenthesis"), None);
    }

    #[test]
    fn counts_this_process_threads() {
        let before = SelfStat::open().unwrap().threads().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let during = SelfStat::open().unwrap().threads().unwrap();
        tx.send(()).unwrap();
        t.join().unwrap().unwrap();
        // Other tests' threads come and go: only "one more than before at least".
        assert!(during >= 2 && before >= 1, "{before} then {during}");
    }

    #[test]
    fn reads_this_machine() {
        let l = Loadavg::open().unwrap();
        // This test thread itself is running.
        assert!(l.runnable().unwrap() >= 1);
        assert!(online_vcpus() >= 1);
    }

    #[test]
    fn yielding_needs_our_own_threads_in_excess_and_few_others() {
        // 2 vCPUs: 3 own threads awake are within OWN_SLACK...
        assert!(!yield_may_help(3, 3, 2));
        assert!(yield_may_help(4, 4, 2));
        // ...and with 2 other runnable threads (enough to fill the
        // vCPUs), a yield would go to them.
        assert!(yield_may_help(8, 9, 2));
        assert!(!yield_may_help(8, 10, 2));
        // Own threads blocked outside the runtime make `runnable` the
        // smaller: no underflow, others count as none.
        assert!(yield_may_help(8, 3, 2));
    }

    #[test]
    fn the_rule_and_its_slack() {
        assert!(!oversubscribed(2, 2, RUNTIME_SLACK));
        assert!(oversubscribed(3, 2, RUNTIME_SLACK));
        assert!(!oversubscribed(3, 2, DETECTOR_SLACK));
        assert!(oversubscribed(4, 2, DETECTOR_SLACK));
    }
}
