//! The detector at work on one process: samplers for all of its threads
//! (including ones created later), a detector per thread, and, when asked,
//! descheduling of spinners with a guaranteed restoration.
//!
//! This module is the loop itself ([`Engine::step`]: wait, read samples,
//! act); its parts live beside it: `tracked` (per-thread state, following
//! the thread list), `sampling` (sampling periods), `load` (the
//! oversubscription check), `holds` (stopping, demoting, restoring),
//! `watch` (replays of held threads' loops) and `traps` (entry traps).

mod holds;
mod load;
mod sampling;
mod tracked;
mod traps;
mod watch;

use crate::bpf::{StopProgram, TRAP_SIGNAL};
use crate::channel::SpinMarks;
use crate::code::PauseSites;
use crate::config::{Action, Config, ConfigError};
use crate::detector::Transition;
use crate::freeze::Freezer;
use crate::perf::OpenError;
use crate::replay::Replayer;
use crate::sample::Sample;
use crate::stats::{Event, Report, Stats};
use crate::threads;
use crate::watchdog::Watchdog;
use holds::Hold;
use load::Load;
use std::collections::BTreeMap;
use tracked::Tracked;
use vsched_os::clock::monotonic_ns;
use watch::{NotWaits, ProgramMemory};

/// How often the thread list is re-read for threads created later (10 ms):
/// a new thread spins at most this long unwatched, and a scan reads /proc.
const SCAN_EVERY_NS: u64 = 10_000_000;

/// Samples drained from one thread's buffer at a time, preallocated: a ring
/// buffer holds about 300, so the vector rarely grows.
const DRAIN_CAPACITY: usize = 1024;

/// Why an engine could not start on a process.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("invalid detector configuration: {0}")]
    Config(#[from] ConfigError),
    /// Descheduling was asked for without a watchdog to undo it if vsched dies.
    #[error("descheduling needs a watchdog (it restores demoted threads if vsched dies)")]
    NoWatchdog,
    /// The process does not exist, or exited before it could be watched.
    #[error("the process does not exist or has exited")]
    Gone,
    #[error(transparent)]
    Sampling(#[from] OpenError),
}

/// The detector on one process (see the module's documentation).
pub struct Engine {
    pid: i32,
    cfg: Config,
    threads: BTreeMap<i32, Tracked>,
    pause: PauseSites,
    watchdog: Option<Watchdog>,
    stats: Stats,
    events: Vec<Event>,
    recorded: Vec<Sample>,
    scratch: Vec<Sample>,
    pollfds: Vec<libc::pollfd>,
    next_scan_ns: u64,
    load: Load,
    memory: ProgramMemory,
    replayer: Replayer,
    next_watch_ns: u64,
    freezer: Option<Freezer>,
    /// Makes entry traps stop their threads (None: not permitted or off).
    stop_program: Option<StopProgram>,
    /// The freezer's descriptor was readable at the last wait.
    tracee_events: bool,
    /// Loop addresses whose replay showed computation, not a wait.
    not_waits: NotWaits,
    /// Threads are sampled at the idle period (not oversubscribed lately).
    relaxed: bool,
    /// When the machine was last seen oversubscribed.
    last_over_ns: u64,
    /// vsched's scheduler's channel, spinners are handed to while it runs
    /// (None: not descheduling, or `channel` off).
    marks: Option<SpinMarks>,
    /// The kernel has no utilisation clamps: spinners are nudged by their
    /// nice level (holds.rs `nudge`).
    nudge_by_nice: bool,
}

impl Engine {
    /// Starts sampling every thread of `pid`. Descheduling needs a
    /// `watchdog` (so that demotions survive anything, even a SIGKILL):
    /// without one it is refused ([`AttachError::NoWatchdog`]).
    pub fn attach(
        pid: i32,
        cfg: Config,
        watchdog: Option<Watchdog>,
    ) -> Result<Engine, AttachError> {
        cfg.validate()?;
        if cfg.action == Action::Deschedule && watchdog.is_none() {
            return Err(AttachError::NoWatchdog);
        }
        raise_fd_limit();
        let pause = PauseSites::open(pid);
        let mut engine = Engine {
            pid,
            cfg,
            threads: BTreeMap::new(),
            stats: Stats {
                code_readable: pause.readable(),
                ..Default::default()
            },
            pause,
            watchdog,
            events: Vec::new(),
            recorded: Vec::new(),
            scratch: Vec::with_capacity(DRAIN_CAPACITY),
            pollfds: Vec::new(),
            next_scan_ns: 0,
            load: Load::new(),
            memory: ProgramMemory::open(pid),
            replayer: Replayer::new(),
            next_watch_ns: 0,
            freezer: None,
            stop_program: None,
            tracee_events: false,
            not_waits: NotWaits::default(),
            relaxed: false,
            last_over_ns: monotonic_ns(),
            marks: None,
            nudge_by_nice: false,
        };
        if engine.cfg.action == Action::Deschedule && engine.cfg.channel {
            engine.marks = Some(SpinMarks::new());
        }
        if engine.cfg.action == Action::Deschedule && engine.cfg.replay && engine.cfg.stop {
            engine.freezer = Freezer::new(pid).ok();
        }
        if let Some(f) = &mut engine.freezer {
            if engine.cfg.entry_traps && engine.cfg.trap_stops {
                engine.stop_program = StopProgram::load().ok();
                if engine.stop_program.is_some() {
                    f.intercept(TRAP_SIGNAL);
                }
            }
        }
        if !threads::alive(pid) {
            return Err(AttachError::Gone);
        }
        engine.scan()?;
        if engine.threads.is_empty() {
            return Err(AttachError::Gone);
        }
        Ok(engine)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Threads held (stopped or demoted) right now.
    pub fn demoted_now(&self) -> usize {
        self.threads.values().filter(|t| t.held.is_some()).count()
    }

    /// Reads all new samples, updates the detectors and acts on what changed.
    pub fn poll(&mut self, now_ns: u64) {
        // Waits that ended first: a resumed thread is the one the others wait for.
        self.check_watched_when_due(now_ns);
        if let Some(f) = &mut self.freezer {
            if std::mem::take(&mut self.tracee_events) {
                f.reap();
            }
        }
        self.check_trap_stops();
        self.check_stop_sites();
        self.poll_entry_traps();
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let mut batch = std::mem::take(&mut self.scratch);
            batch.clear();
            let lost_before;
            {
                let t = self.threads.get_mut(&tid).expect("listed");
                lost_before = t.sampler.lost;
                t.sampler.drain(|s| batch.push(s));
                self.stats.lost_samples += t.sampler.lost - lost_before;
            }
            for mut s in batch.drain(..) {
                s.tid = tid;
                s.after_pause = self.pause.at_pause(s.ip);
                self.process(tid, &s);
                if self.cfg.record_samples {
                    self.recorded.push(s);
                }
            }
            self.scratch = batch;
        }
        self.expire_leases(now_ns);
        self.clear_suspects(now_ns);
    }

    /// One round of the detector: wait (at most `max_wait_ns`) for samples,
    /// act on them, and now and then follow the thread list. An error means a
    /// new thread could not be sampled; the others go on.
    pub fn step(&mut self, max_wait_ns: u64) -> Result<(), OpenError> {
        self.wait(monotonic_ns(), max_wait_ns);
        let now = monotonic_ns();
        self.poll(now);
        if now >= self.next_scan_ns {
            self.next_scan_ns = now + SCAN_EVERY_NS;
            // Reaping must not depend on the scan succeeding: a thread perf
            // keeps refusing would otherwise leave dead tracees unreaped
            // and the program's exit hanging.
            let scanned = self.scan();
            if let Some(f) = &mut self.freezer {
                f.reap_exited();
            }
            self.adapt_sampling(now);
            scanned?;
        }
        Ok(())
    }

    /// Sleeps until a suspect thread has a new sample, the next demotion
    /// lease ends, or `max_ns` passed, whichever comes first.
    pub fn wait(&mut self, now_ns: u64, max_ns: u64) {
        let mut timeout_ns = max_ns;
        for t in self.threads.values() {
            if let Some(h) = &t.held {
                timeout_ns = timeout_ns.min(h.lease_end(&self.cfg).saturating_sub(now_ns));
                if h.watch.is_some() {
                    timeout_ns = timeout_ns.min(self.next_watch_ns.saturating_sub(now_ns));
                }
            }
        }
        let mut pollfds = std::mem::take(&mut self.pollfds);
        pollfds.clear();
        let suspects = self
            .threads
            .values()
            .filter(|t| t.suspect_since.is_some())
            .map(|t| t.sampler.fd());
        let freezer = self.freezer.as_ref().map(|f| f.fd());
        // The freezer's descriptor goes last: see below.
        let fds = suspects.chain(self.waking_trap_fds()).chain(freezer);
        pollfds.extend(fds.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }));
        self.pollfds = pollfds;
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as i64,
            tv_nsec: (timeout_ns % 1_000_000_000) as i64,
        };
        // SAFETY: pollfds is a valid array of its length; ppoll with a timeout.
        unsafe {
            libc::ppoll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        // The freezer's descriptor is the last one: tracee events to handle.
        if self.freezer.is_some() {
            self.tracee_events |= self.pollfds.last().is_some_and(|p| p.revents != 0);
        }
    }

    /// Feeds one sample of `tid` to its detector and acts on the verdict:
    /// counts episodes, holds a spinner, lets go of a thread that left its loop.
    fn process(&mut self, tid: i32, s: &Sample) {
        self.stats.samples += 1;
        let params = self.cfg.params;
        let t = self.threads.get_mut(&tid).expect("listed");
        let previous = t.last_sample.replace(*s);
        let transition = t.detector.observe(s, &params);
        if t.detector.spinning() {
            self.stats.spin_samples += 1;
            t.episode_samples += 1;
            t.last_spin_ns = s.time_ns;
            self.make_suspect(tid, s.time_ns);
        }
        let t = self.threads.get_mut(&tid).expect("listed");
        match transition {
            Transition::None => {}
            Transition::Started => {
                self.stats.spin_episodes += 1;
                self.events.push(Event {
                    time_ns: s.time_ns,
                    tid,
                    started: true,
                });
            }
            Transition::Ended => {
                if t.episode_samples <= 1 {
                    self.stats.false_positive_bound += 1;
                }
                t.episode_samples = 0;
                self.events.push(Event {
                    time_ns: s.time_ns,
                    tid,
                    started: false,
                });
                if self.threads[&tid].held.is_some() {
                    self.stats.restored_on_progress += 1;
                    self.restore(tid);
                }
            }
        }
        // A spinning thread is demoted (again, if its lease ran out). A sample
        // taken while demoted shows it ran only because nothing else could.
        let Some(t) = self.threads.get(&tid) else {
            return;
        };
        if self.cfg.action != Action::Deschedule {
            return;
        }
        if !t.detector.spinning() {
            if t.held.is_none()
                && self.load.oversubscribed(s.time_ns)
                && previous.is_some_and(|p| self.same_wait(&p, s))
            {
                self.stats.replay_detections += 1;
                self.demote(tid, s.time_ns);
            }
            return;
        }
        match &t.held {
            // With a vCPU free for every runnable thread, spinning costs
            // nobody anything and demoting only adds work.
            None if !self.load.oversubscribed(s.time_ns) => self.stats.spins_left_alone += 1,
            None => self.demote(tid, s.time_ns),
            // Demoted, yet running and still spinning: only demoted threads
            // were left on its vCPU. Hand the vCPU to the next of them now
            // rather than at the scheduler's tick: it may be the one that
            // everybody waits for.
            // A stopped thread sampled after its demotion ran before the
            // stop landed: nothing to kick.
            Some(h)
                if self.cfg.kick
                    && matches!(h.hold, Hold::Demoted(_))
                    && s.time_ns > h.since_ns =>
            {
                self.kick(tid)
            }
            Some(_) => {}
        }
    }

    /// Restores every demoted thread, stops sampling and closes the watchdog.
    pub fn finish(mut self) -> Report {
        self.shutdown();
        Report {
            stats: self.stats.clone(),
            events: std::mem::take(&mut self.events),
            samples: std::mem::take(&mut self.recorded),
        }
    }

    /// Lets go of every thread and closes everything the engine opened.
    fn shutdown(&mut self) {
        if let Some(m) = &mut self.marks {
            m.clear_all();
        }
        // Demoted threads are restored here; stopped ones are detached by
        // the freezer below (a detach resumes them: no stop-and-go).
        for t in self.threads.values_mut() {
            if t.held
                .as_ref()
                .is_some_and(|h| matches!(h.hold, Hold::Stopped))
            {
                t.held = None;
                self.load.held -= 1;
            }
        }
        let demoted: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.held.is_some())
            .map(|(&tid, _)| tid)
            .collect();
        for tid in demoted {
            self.restore(tid);
        }
        self.threads.clear();
        if let Some(mut f) = self.freezer.take() {
            f.release_all();
        }
        if let Some(w) = self.watchdog.take() {
            w.close();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One descriptor per thread: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only `lim`, a valid,
    // initialised struct on our stack.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
