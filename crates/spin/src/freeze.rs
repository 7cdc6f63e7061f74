//! Stopping and resuming single threads of another process with ptrace.
//!
//! A thread demoted to SCHED_IDLE still runs whenever its vCPU has nothing
//! better to do, and under EEVDF the idle-weight time it gets is lag it
//! carries back when restored: a restored spinner may wait milliseconds for
//! its vCPU (measured: 30-50% of restorations took 1-7 ms on Linux 6.18). A
//! stopped thread takes no CPU time and owes the scheduler nothing; woken,
//! it is placed like any thread waking from sleep and runs at once. Stopping
//! is only worth it where the replay (see `replay`) can tell when the wait is
//! over, since a stopped thread cannot find out by itself.
//!
//! Threads are seized (PTRACE_SEIZE: no signal, nothing visible to the
//! program) only when first stopped. If vsched dies, even by SIGKILL, the
//! kernel detaches every tracee and restarts stopped ones: nothing is left
//! stopped. Signals sent to a seized thread pass through vsched, which
//! re-injects them at once; job-control stops (Ctrl-Z) are kept
//! (PTRACE_LISTEN).

use crate::threads;
use std::collections::HashMap;
use std::io;
use vsched_os::clock::monotonic_ns;

/// How long `release_all` waits for threads to reach a stop it can detach
/// them from (2 s): a thread stuck in the kernel may never get there, and
/// the kernel detaches it anyway when vsched exits.
const RELEASE_PATIENCE_NS: u64 = 2_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Seized and running.
    Running,
    /// PTRACE_INTERRUPT sent, stop not yet reported; resume once it is.
    Stopping { resume: bool },
    /// Stopped by us.
    Stopped,
    /// In a job-control stop of the whole process (left to SIGCONT).
    GroupStopped,
}

pub struct Freezer {
    /// The process (thread-group leader): its exit belongs to its parent and
    /// is never reaped here.
    leader: i32,
    threads: HashMap<i32, State>,
    /// Readable when a tracee changed state (SIGCHLD).
    sigchld: libc::c_int,
    /// ptrace refused (permissions, YAMA): stop nothing from then on.
    refused: bool,
    /// Stops reported since the engine last looked.
    newly_stopped: Vec<i32>,
    /// Some thread was ever seized (until then there is nothing to reap).
    seized_any: bool,
    /// A signal whose deliveries are handed to the engine instead of passed
    /// on: entry traps stop their thread with it (see `bpf`).
    intercepted: Option<i32>,
    /// Threads stopped by that signal since the engine last looked.
    signal_stopped: Vec<i32>,
}

impl Freezer {
    /// A freezer for the threads of process `leader`. SIGCHLD is blocked in
    /// the calling thread (and read from a signalfd), which must be the
    /// thread that later calls every method.
    pub fn new(leader: i32) -> io::Result<Freezer> {
        // SAFETY: plain signal-mask and signalfd calls on local sets.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Freezer {
            leader,
            threads: HashMap::new(),
            sigchld: fd,
            refused: false,
            newly_stopped: Vec::new(),
            seized_any: false,
            intercepted: None,
            signal_stopped: Vec::new(),
        })
    }

    /// Descriptor to poll for tracee events.
    pub fn fd(&self) -> libc::c_int {
        self.sigchld
    }

    /// Whether ptrace was refused (threads are demoted instead).
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// Holds deliveries of `sig` as stops for the engine to judge (see
    /// `take_signal_stopped`) instead of passing them on.
    pub fn intercept(&mut self, sig: i32) {
        self.intercepted = Some(sig);
    }

    /// Running threads that stopped on the intercepted signal since the last
    /// call. Each stays stopped until `resume` (signal suppressed) or
    /// `pass_signal`.
    pub fn take_signal_stopped(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.signal_stopped)
    }

    /// Lets `tid`, stopped on the intercepted signal, go on with the signal
    /// delivered (it was not ours).
    pub fn pass_signal(&mut self, tid: i32, sig: i32) {
        if self.threads.get(&tid) == Some(&State::Stopped) {
            ptrace_plain(libc::PTRACE_CONT, tid, sig as libc::c_long);
            self.threads.insert(tid, State::Running);
        }
    }

    /// Whether `sig`, which `tid` is stopped on, is an entry trap's: the
    /// intercepted signal, sent by the kernel.
    fn trap_signal(&self, tid: i32, sig: i32) -> bool {
        Some(sig) == self.intercepted && self.signal_from_kernel(tid)
    }

    /// Whether the signal `tid` is stopped on was sent by the kernel (as an
    /// entry trap's is), not by a process (kill, tgkill, sigqueue).
    pub fn signal_from_kernel(&self, tid: i32) -> bool {
        // SAFETY: siginfo_t is plain data, for which all zeroes is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETSIGINFO writes one siginfo_t through `data`,
        // which points to `info`; a tracee not in a signal stop only makes
        // it fail.
        let rc = unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0, &mut info as *mut _) };
        rc == 0 && info.si_code == libc::SI_KERNEL
    }

    /// Asks `tid` to stop. False if it cannot be stopped (not permitted, gone).
    pub fn stop(&mut self, tid: i32) -> bool {
        if self.refused {
            return false;
        }
        match self.threads.get(&tid) {
            // (A job-control stop may have ended since the last reap; if it
            // has not, the interrupt re-reports it and it is kept.)
            Some(State::Running | State::GroupStopped) => {}
            Some(State::Stopping { .. }) => {
                self.threads.insert(tid, State::Stopping { resume: false });
                return true;
            }
            Some(State::Stopped) => return true,
            None => {
                let options = libc::PTRACE_O_TRACEEXIT as libc::c_long;
                let rc = ptrace_plain(libc::PTRACE_SEIZE, tid, options);
                if rc != 0 {
                    if io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
                        self.refused = true;
                    }
                    return false;
                }
                self.threads.insert(tid, State::Running);
                self.seized_any = true;
            }
        }
        if ptrace_plain(libc::PTRACE_INTERRUPT, tid, 0) != 0 {
            return false;
        }
        self.threads.insert(tid, State::Stopping { resume: false });
        true
    }

    /// Lets `tid` run again (now, or as soon as its pending stop is reported).
    pub fn resume(&mut self, tid: i32) {
        match self.threads.get(&tid) {
            Some(State::Stopped) => {
                ptrace_plain(libc::PTRACE_CONT, tid, 0);
                self.threads.insert(tid, State::Running);
            }
            Some(State::Stopping { .. }) => {
                self.threads.insert(tid, State::Stopping { resume: true });
            }
            _ => {}
        }
    }

    /// Handles every reported tracee event: our stops, signals to pass on,
    /// job-control stops, exits.
    pub fn reap(&mut self) {
        // Room for four signalfd_siginfo records (128 bytes each) per read:
        // the records only wake us; draining them is all that matters.
        let mut buf = [0u8; 128 * 4];
        // SAFETY: read writes at most buf.len() bytes into `buf`, which we
        // own; the descriptor is our signalfd.
        while unsafe { libc::read(self.sigchld, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        // Not "no thread in the table": a tracee can be missing from it (one
        // that called execve) and its stops must still be serviced.
        if !self.seized_any {
            return;
        }
        loop {
            // Stops only: exits are not ours to reap (a tracee is detached at
            // its exit stop, PTRACE_O_TRACEEXIT, and the process's own exit
            // belongs to whoever waits for it).
            let flags = libc::WSTOPPED | libc::WNOHANG | libc::__WALL;
            let Some(info) = wait_id(libc::P_ALL, 0, flags) else {
                return;
            };
            let (pid, code) = pid_and_status(&info);
            if pid == 0 {
                return;
            }
            // CLD_STOPPED is a job-control stop reported to us as the parent,
            // not a ptrace stop (that one comes as CLD_TRAPPED); any other
            // child's stop has no other waiter to miss it. Every CLD_TRAPPED
            // is one of our tracees, even one not in the table (a seized
            // thread that called execve now has the leader's id): it must
            // be serviced, or it stays stopped.
            if info.si_code == libc::CLD_TRAPPED {
                self.threads.entry(pid).or_insert(State::Running);
                // For ptrace stops si_status holds the stop signal and the
                // event above it; rebuild waitpid's encoding.
                self.stopped(pid, (code << 8) | 0x7f);
            }
        }
    }

    fn stopped(&mut self, tid: i32, status: i32) {
        let sig = libc::WSTOPSIG(status);
        // waitpid's encoding of a ptrace event stop: the event in bits 16-23.
        let event = (status >> 16) & 0xff;
        let state = self.threads.get(&tid).copied().unwrap_or(State::Running);
        if event == libc::PTRACE_EVENT_EXIT {
            // Let it finish exiting untraced, reaped by its own process.
            ptrace_plain(libc::PTRACE_DETACH, tid, 0);
            self.threads.remove(&tid);
        } else if event == libc::PTRACE_EVENT_STOP {
            if matches!(
                sig,
                libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
            ) {
                // Job control stopped the whole process: keep it stopped
                // until SIGCONT, as it would be without us.
                ptrace_plain(libc::PTRACE_LISTEN, tid, 0);
                self.threads.insert(tid, State::GroupStopped);
                return;
            }
            match state {
                State::Stopping { resume: false } => {
                    self.threads.insert(tid, State::Stopped);
                    self.newly_stopped.push(tid);
                }
                State::Stopped => {}
                _ => {
                    // Resumed before the stop landed, or a job-control stop
                    // ended (SIGCONT): a trap with SIGTRAP rather than the
                    // stop signal means the group is no longer stopped.
                    ptrace_plain(libc::PTRACE_CONT, tid, 0);
                    self.threads.insert(tid, State::Running);
                }
            }
        } else if event == 0 && Some(sig) == self.intercepted && state == State::Running {
            // Maybe an entry trap's: held for the engine to judge.
            self.threads.insert(tid, State::Stopped);
            self.signal_stopped.push(tid);
        } else if event == 0
            && state == (State::Stopping { resume: false })
            && self.trap_signal(tid, sig)
        {
            // A trap's signal raced our interrupt: this is the stop asked
            // for (the interrupt is reported after the next resume, and
            // then resumed, as Running).
            self.threads.insert(tid, State::Stopped);
            self.newly_stopped.push(tid);
        } else if event == 0 && self.trap_signal(tid, sig) {
            // A trap's signal while we are stopping or holding the thread
            // anyway: suppressed.
            ptrace_plain(libc::PTRACE_CONT, tid, 0);
        } else if event == 0 {
            // A signal on its way to the thread: deliver it. A pending stop
            // request is reported again afterwards.
            ptrace_plain(libc::PTRACE_CONT, tid, sig as libc::c_long);
        } else {
            ptrace_plain(libc::PTRACE_CONT, tid, 0);
        }
    }

    /// Whether `tid` is stopped, or about to be, by us.
    pub fn holds(&self, tid: i32) -> bool {
        matches!(
            self.threads.get(&tid),
            Some(State::Stopped | State::Stopping { resume: false })
        )
    }

    /// The thread is gone (or going): reaps it if it died traced.
    pub fn forget(&mut self, tid: i32) {
        if self.threads.remove(&tid).is_some() && tid != self.leader {
            reap_exit(tid);
        }
    }

    /// Reaps seized threads that exited without an exit stop. A thread killed
    /// by its process's exit_group (or seized while already exiting) skips
    /// PTRACE_EVENT_EXIT and stays a zombie until its tracer reaps it, and
    /// the process's own exit waits for that.
    pub fn reap_exited(&mut self) {
        let leader = self.leader;
        let dead: Vec<i32> = self
            .threads
            .keys()
            .copied()
            .filter(|&tid| tid != leader && !threads::running(leader, tid))
            .collect();
        for tid in dead {
            self.threads.remove(&tid);
            reap_exit(tid);
        }
    }

    /// Detaches every thread (a detach resumes a stopped thread; one in a
    /// job-control stop stays stopped), reaping those that died traced.
    /// Gives up after 2 s on threads that never reach a stop (stuck in the
    /// kernel); the kernel detaches them when vsched exits.
    pub fn release_all(&mut self) {
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            match self.threads[&tid] {
                State::Stopped => {
                    ptrace_plain(libc::PTRACE_DETACH, tid, 0);
                    self.threads.remove(&tid);
                }
                // PTRACE_DETACH needs a ptrace stop; a listening (job-control
                // stopped) tracee is re-trapped first, like a running one.
                State::Running | State::GroupStopped => {
                    ptrace_plain(libc::PTRACE_INTERRUPT, tid, 0);
                    self.threads.insert(tid, State::Stopping { resume: true });
                }
                State::Stopping { .. } => {
                    self.threads.insert(tid, State::Stopping { resume: true });
                }
            }
        }
        let deadline = monotonic_ns() + RELEASE_PATIENCE_NS;
        while !self.threads.is_empty() && monotonic_ns() < deadline {
            let pending: Vec<i32> = self.threads.keys().copied().collect();
            for tid in pending {
                // Stops, and exits of threads other than the process itself
                // (its exit is its parent's to collect).
                let mut flags = libc::WSTOPPED | libc::WNOHANG | libc::__WALL;
                if tid != self.leader {
                    flags |= libc::WEXITED;
                }
                let Some(info) = wait_id(libc::P_PID, tid as libc::id_t, flags) else {
                    self.threads.remove(&tid); // gone
                    continue;
                };
                let (pid, code) = pid_and_status(&info);
                if pid == tid && info.si_code == libc::CLD_TRAPPED {
                    // si_status of a ptrace stop: the signal in bits 0-7,
                    // the event in bits 8-15.
                    let event = (code >> 8) & 0xff;
                    // A signal caught on the way out is delivered with the
                    // detach, unless an entry trap sent it.
                    let sig = code & 0xff;
                    let pass = if event == 0 && !self.trap_signal(tid, sig) {
                        sig
                    } else {
                        0
                    };
                    ptrace_plain(libc::PTRACE_DETACH, tid, pass as libc::c_long);
                    self.threads.remove(&tid);
                } else if pid == tid {
                    self.threads.remove(&tid); // exited, reaped
                } else if tid == self.leader && !threads::running(tid, tid) {
                    self.threads.remove(&tid); // exiting: the parent reaps it
                }
            }
            // Stops land within microseconds; a short nap keeps this from
            // spinning on the vCPU the tracees need.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        self.threads.clear();
    }

    /// Threads whose stop was reported since the last call (to check where
    /// they stopped).
    pub fn take_newly_stopped(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.newly_stopped)
    }

    /// The instruction pointer of a stopped thread.
    pub fn ip(&self, tid: i32) -> Option<u64> {
        if self.threads.get(&tid) != Some(&State::Stopped) {
            return None;
        }
        // SAFETY: user_regs_struct is plain data, for which all zeroes is valid.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS writes one user_regs_struct through
        // `data`, which points to `regs`; a tracee that is not stopped only
        // makes it fail.
        let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs as *mut _) };
        (rc == 0).then_some(regs.rip)
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.release_all();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(self.sigchld) };
    }
}

/// Collects the exit of traced thread `tid` if it has one (never blocks).
fn reap_exit(tid: i32) {
    // Exits of this one thread only.
    let _ = wait_id(
        libc::P_PID,
        tid as libc::id_t,
        libc::WEXITED | libc::WNOHANG | libc::__WALL,
    );
}

/// A ptrace request that passes no pointer: `addr` unused, `data` an
/// integer (a signal, options) or unused. CONT, DETACH, LISTEN, INTERRUPT
/// and SEIZE are such requests.
fn ptrace_plain(request: libc::c_uint, tid: i32, data: libc::c_long) -> libc::c_long {
    // SAFETY: with no pointer among its arguments the kernel reads and
    // writes none of our memory; a wrong thread or state only fails.
    unsafe { libc::ptrace(request, tid, 0 as libc::c_long, data) }
}

/// waitid(2): the siginfo it filled (si_pid 0 when nothing was reported),
/// or None if it failed (no such child).
fn wait_id(idtype: libc::idtype_t, id: libc::id_t, flags: libc::c_int) -> Option<libc::siginfo_t> {
    // SAFETY: siginfo_t is plain data, for which all zeroes is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only `info`, a valid siginfo_t we own.
    let rc = unsafe { libc::waitid(idtype, id, &mut info, flags) };
    (rc == 0).then_some(info)
}

/// The child's id and status (or stop signal and event) in a siginfo that
/// waitid filled.
fn pid_and_status(info: &libc::siginfo_t) -> (i32, i32) {
    // SAFETY: waitid fills siginfo as for SIGCHLD (or leaves it zeroed),
    // whose valid union members are si_pid and si_status.
    unsafe { (info.si_pid(), info.si_status()) }
}
