//! The detector at work on one process: samplers for all of its threads
//! (including ones created later), a detector per thread, and, when asked,
//! descheduling of spinners with a guaranteed restoration.

use crate::bpf::{StopProgram, TRAP_SIGNAL};
use crate::code::PauseSites;
use crate::detector::{DetectorParams, ThreadDetector, Transition};
use crate::freeze::Freezer;
use crate::perf::{OpenError, ThreadSampler};
use crate::replay::{ProcessMemory, Replay, Replayer, Snapshot, Word};
use crate::sample::now_ns;
use crate::sample::Sample;
use crate::sched::demoted;
use vsched_os::load::{self as loadavg, Loadavg};
use vsched_os::sched::{self, SchedAttr};
use crate::threads;
use crate::watchdog::Watchdog;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// What to do with a thread found spinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Count only.
    Observe,
    /// Demote it to SCHED_IDLE until it leaves its loop or its lease runs out.
    Deschedule,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Sampling period, ns of the thread's CPU time.
    pub period_ns: u64,
    /// Sampling period while the machine has not been oversubscribed for a
    /// while (nothing would be done about a spin then; each sample is a
    /// timer interrupt, costly in a VM). Not above `period_ns`: off.
    pub idle_period_ns: u64,
    /// Sampling period of threads that spun recently: catches them again
    /// quickly and sees them leave their loop sooner.
    pub suspect_period_ns: u64,
    /// How long a thread stays a suspect after its last spinning sample.
    pub suspect_ns: u64,
    pub params: DetectorParams,
    pub action: Action,
    /// Time slice requested for a demoted thread (kernels >= 6.12 honour it).
    pub slice_ns: u64,
    /// Longest a thread stays demoted without a sample proving it still spins.
    pub max_demotion_ns: u64,
    /// Force demoted threads that still spin off their vCPU.
    pub kick: bool,
    /// Replay demoted spinners' wait loops against memory and restore a
    /// thread the moment its wait is over (see `replay`).
    pub replay: bool,
    /// Stop (ptrace) rather than demote a spinner whose wait loop replays:
    /// a stopped thread costs its vCPU nothing and runs at once when resumed.
    pub stop: bool,
    /// How often the wait loops of demoted threads are replayed.
    pub watch_period_ns: u64,
    /// Longest demotion of a thread whose loop replays (a safety net: the
    /// replay restores it when its wait ends).
    pub watched_lease_ns: u64,
    /// Put a hardware breakpoint on the wait loop of each stopped thread, so
    /// that the next time it enters that loop it is stopped before it spins
    /// instead of after a sampling period (see `EntryTrap`).
    pub entry_traps: bool,
    /// Let an entry trap stop its thread itself (a BPF program on the
    /// breakpoint signals it; see `bpf`), so that it never spins while the
    /// detector reacts. Needs root; falls back to waking the detector.
    pub trap_stops: bool,
    /// Keep every sample (for recording test data and offline scoring).
    #[serde(skip)]
    pub record_samples: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period_ns: 500_000,
            idle_period_ns: 10_000_000,
            suspect_period_ns: 50_000,
            suspect_ns: 50_000_000,
            params: DetectorParams::default(),
            action: Action::Deschedule,
            slice_ns: 100_000,
            max_demotion_ns: 500_000,
            kick: true,
            replay: true,
            stop: true,
            watch_period_ns: 40_000,
            watched_lease_ns: 20_000_000,
            entry_traps: true,
            trap_stops: true,
            record_samples: false,
        }
    }
}

/// Counters over the engine's life.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub threads_seen: u64,
    pub samples: u64,
    pub lost_samples: u64,
    /// Samples taken while the thread was judged spinning.
    pub spin_samples: u64,
    pub spin_episodes: u64,
    pub demotions: u64,
    /// Restored because a sample showed the thread out of its loop.
    pub restored_on_progress: u64,
    /// Restored because the demotion lease ran out.
    pub restored_on_lease: u64,
    /// Demotions whose wait loop could be replayed (and so was watched).
    pub watched_demotions: u64,
    /// Of those, threads stopped with ptrace instead of demoted.
    pub stops: u64,
    /// Whether ptrace was refused (permissions): spinners were demoted instead.
    pub stop_refused: bool,
    /// Restored because a replay of its wait loop showed the wait was over.
    pub restored_on_release: u64,
    /// Spinning samples not acted on because, replayed against memory by the
    /// time they were read, the wait was already over.
    pub released_before_demotion: u64,
    /// Spinning samples not acted on because the replay showed a loop that
    /// makes progress (a false detection caught before it cost anything).
    pub refuted_by_replay: u64,
    /// Spin episodes withdrawn because a replay refuted them.
    pub spin_episodes_refuted: u64,
    /// Stopped threads resumed at once because they stopped outside their
    /// loop's waiting path (the sample that decided the stop was stale).
    pub resumed_off_path: u64,
    /// Spinners found by replaying two consecutive samples at one address
    /// (a wait whose polled counter moved between them; see `same_wait`).
    pub replay_detections: u64,
    /// Entry traps set (hardware breakpoints on the wait loops of stopped threads).
    pub entry_traps: u64,
    /// Entry traps the kernel refused (no free debug register, permissions).
    pub entry_trap_failures: u64,
    /// Threads stopped the moment they re-entered a wait loop (an entry trap
    /// fired and the replay said the wait was not over).
    pub entry_stops: u64,
    /// Entry trap hits where the wait was already over (the thread went on).
    pub entry_passes: u64,
    /// Entry-trap stops that lasted less than 100 µs (not worth a stop).
    pub entry_stops_short: u64,
    /// Entry traps that stop their thread themselves (BPF program attached).
    pub trap_stops: u64,
    /// Entry traps removed: the machine was no longer oversubscribed, the
    /// loop mostly passed straight through, or its replay changed verdict.
    pub entry_traps_removed: u64,
    /// Entry traps moved to the loop their thread kept being caught in.
    pub entry_traps_moved: u64,
    /// Time threads spent demoted or stopped, summed over all holds (ns).
    pub held_ns: u64,
    /// Switches between the sampling period and the idle period.
    pub period_switches: u64,
    /// Spinning samples not acted on because no vCPU was oversubscribed.
    pub spins_left_alone: u64,
    /// Reschedules forced on demoted threads found running and still spinning.
    pub kicks: u64,
    /// Demotion or restoration refused by the kernel (thread gone, permissions).
    pub sched_failures: u64,
    /// Episodes that ended at the very next sample: an upper bound on false
    /// detections (a real wait that ends right away looks the same).
    pub false_positive_bound: u64,
    /// Whether PAUSE sites could be read from the program's memory.
    pub code_readable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub time_ns: u64,
    pub tid: i32,
    pub started: bool,
}

struct Demotion {
    since_ns: u64,
    hold: Hold,
    /// The sampled state and waiting path of a loop that replays.
    watch: Option<Watch>,
    /// Stopped by its entry trap (the trap is judged by how long such
    /// holds last).
    by_trap: bool,
}

/// How a spinner is kept off its vCPU.
enum Hold {
    /// SCHED_IDLE; restored to this.
    Demoted(SchedAttr),
    /// Stopped with ptrace.
    Stopped,
}

struct Watch {
    ip: u64,
    regs: [u64; crate::sample::NREGS],
    path: Vec<u64>,
    /// Where an entry trap on this loop goes.
    trap_at: u64,
    /// The words the loop read, with the values it kept waiting on: while
    /// none changes, the replay's answer cannot change either.
    words: Vec<Word>,
}

impl Demotion {
    fn lease_end(&self, cfg: &Config) -> u64 {
        let lease = if self.watch.is_some() {
            cfg.watched_lease_ns
        } else {
            cfg.max_demotion_ns
        };
        self.since_ns + lease
    }
}

/// A hardware execute breakpoint on the wait loop a thread was last stopped
/// in. A thread handed its turn usually comes back to the same loop a little
/// later (a ring stage, a consumer, a barrier); with a trap on the loop, its
/// registers arrive the instant it re-enters, the replay decides, and a
/// thread that must wait is stopped after one iteration rather than after
/// spinning until its next sample. A trap costs the thread a debug exception
/// per hit, so one that keeps firing without leading to a stop is removed.
struct EntryTrap {
    ip: u64,
    /// Sampled stops in other loops since the last stop in this one.
    misses: u32,
    /// Stops that ended sooner than `ENTRY_MIN_HOLD_NS` (not worth a stop).
    short: u64,
    /// The loop's waiting path (sorted), as learnt when the trap was set.
    path: Vec<u64>,
    sampler: ThreadSampler,
    stops: u64,
    passes: u64,
    /// A hit stops the thread itself (see `bpf`); its samples are read when
    /// the stop is reported, not polled.
    stops_itself: bool,
}

impl EntryTrap {
    fn wasted(&self) -> bool {
        trap_wasted(self.passes, self.short, self.stops)
    }
}

/// Whether an entry trap should go: hits that passed straight through plus
/// stops that ended too soon to pay off clearly outnumber worthwhile stops
/// (2 to 1, after a grace of 8).
fn trap_wasted(passes: u64, short_stops: u64, stops: u64) -> bool {
    let waste = passes + short_stops;
    waste > 8 + 2 * stops.saturating_sub(short_stops)
}

/// A stop by an entry trap that ends sooner than this did not pay for
/// itself: the stop, the resume and the two wake-ups it takes cost tens of
/// microseconds of the detector's and the thread's time.
const ENTRY_MIN_HOLD_NS: u64 = 100_000;

/// Sampled stops elsewhere, in a row, after which a thread's entry trap
/// moves to the loop it was last caught in.
const ENTRY_MOVE_AFTER: u32 = 3;

/// How long after a trap that stops its thread was removed a stop by its
/// signal is still taken for the trap's (sent just before the removal).
const TRAP_SIGNAL_GRACE_NS: u64 = 10_000_000;

/// Loops whose entry trap was removed for passing too often, per thread.
const UNTRAPPED_MEMORY: usize = 8;

struct Tracked {
    sampler: ThreadSampler,
    entry: Option<EntryTrap>,
    /// Loop addresses not to trap again (they mostly passed straight through).
    untrapped: Vec<u64>,
    /// The kernel refused an entry trap for this thread: do not ask again.
    entry_refused: bool,
    /// When a trap that stops its thread was last removed: a stop it sent
    /// just before may still arrive.
    trap_removed_ns: u64,
    detector: ThreadDetector,
    demotion: Option<Demotion>,
    /// Samples in the current episode.
    episode_samples: u64,
    /// Sampled at the suspect period since (ns), if it is.
    suspect_since: Option<u64>,
    last_spin_ns: u64,
    /// The newest sample (the state a demotion's replay starts from).
    last_sample: Option<Sample>,
}

impl Tracked {
    /// Removes the thread's entry trap (closing its breakpoint), noting when
    /// if a stop it signalled may still be on its way.
    fn take_entry_trap(&mut self, now_ns: u64) -> Option<EntryTrap> {
        let e = self.entry.take()?;
        if e.stops_itself {
            self.trap_removed_ns = now_ns;
        }
        Some(e)
    }
}

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
    memory: Option<ProcessMemory>,
    replayer: Replayer,
    next_watch_ns: u64,
    freezer: Option<Freezer>,
    /// Makes entry traps stop their threads (None: not permitted or off).
    stop_program: Option<StopProgram>,
    /// The freezer's descriptor was readable at the last wait.
    tracee_events: bool,
    /// Loop addresses whose replay showed computation, not a wait (see
    /// `same_wait`).
    not_waits: HashSet<u64>,
    /// Threads are sampled at the idle period (not oversubscribed lately).
    relaxed: bool,
    /// When the machine was last seen oversubscribed.
    last_over_ns: u64,
}

/// Whether the system has more runnable threads than vCPUs, from
/// /proc/loadavg's count of runnable tasks, re-read at most every 1 ms.
struct Load {
    loadavg: Option<Loadavg>,
    vcpus: u64,
    checked_ns: u64,
    over: bool,
    /// Threads we stopped: not runnable for the kernel, yet each wants a vCPU.
    held: usize,
}

impl Load {
    fn new() -> Load {
        Load {
            loadavg: Loadavg::open().ok(),
            vcpus: loadavg::online_vcpus(),
            checked_ns: 0,
            over: true,
            held: 0,
        }
    }

    fn oversubscribed(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.checked_ns) >= 1_000_000 {
            self.checked_ns = now_ns;
            if let Some(running) = self.loadavg.and_then(|l| l.runnable()) {
                // The detector itself is running while it reads: leave it
                // out. Held threads want a vCPU the kernel does not count.
                let wanting = running.saturating_sub(1) + self.held as u64;
                self.over = loadavg::oversubscribed(wanting, self.vcpus, loadavg::DETECTOR_SLACK);
            }
        }
        self.over
    }
}

/// Addresses remembered as not waits before the set is cleared.
const NOT_WAITS_LIMIT: usize = 4096;
/// How often the thread list is re-read (threads created later).
const SCAN_EVERY_NS: u64 = 10_000_000;
/// Time without oversubscription before sampling relaxes to the idle period.
const RELAX_AFTER_NS: u64 = 100_000_000;

impl Engine {
    /// Starts sampling every thread of `pid`. A `watchdog` is required to
    /// deschedule (so that demotions survive nothing, not even SIGKILL).
    pub fn attach(pid: i32, cfg: Config, watchdog: Option<Watchdog>) -> Result<Engine, OpenError> {
        cfg.params.validate().map_err(|e| {
            OpenError::Other(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
        })?;
        assert!(
            cfg.action == Action::Observe || watchdog.is_some(),
            "descheduling needs a watchdog"
        );
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
            scratch: Vec::with_capacity(1024),
            pollfds: Vec::new(),
            next_scan_ns: 0,
            load: Load::new(),
            memory: ProcessMemory::open(pid),
            replayer: Replayer::new(),
            next_watch_ns: 0,
            freezer: None,
            stop_program: None,
            tracee_events: false,
            not_waits: HashSet::new(),
            relaxed: false,
            last_over_ns: now_ns(),
        };
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
            return Err(OpenError::Gone);
        }
        engine.scan()?;
        if engine.threads.is_empty() {
            return Err(OpenError::Gone);
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

    /// Threads demoted right now.
    pub fn demoted_now(&self) -> usize {
        self.threads
            .values()
            .filter(|t| t.demotion.is_some())
            .count()
    }

    /// Follows the process's thread list: samples new threads, forgets ended ones.
    /// Fails only when perf refuses (permissions); a thread that ends while
    /// being attached is skipped.
    pub fn scan(&mut self) -> Result<(), OpenError> {
        let Ok(tids) = threads::list(self.pid) else {
            self.forget_all();
            return Ok(());
        };
        // A listing taken while other threads exit can skip a live one:
        // only a thread whose own entry is gone has ended.
        let gone: Vec<i32> = self
            .threads
            .keys()
            .copied()
            .filter(|&t| tids.binary_search(&t).is_err() && !threads_alive(self.pid, t))
            .collect();
        for tid in gone {
            self.forget(tid);
        }
        for tid in tids {
            if self.threads.contains_key(&tid) {
                continue;
            }
            match ThreadSampler::open(tid, self.base_period(), false) {
                Ok(sampler) => {
                    self.stats.threads_seen += 1;
                    self.threads.insert(
                        tid,
                        Tracked {
                            sampler,
                            entry: None,
                            untrapped: Vec::new(),
                            entry_refused: false,
                            trap_removed_ns: 0,
                            detector: ThreadDetector::new(),
                            demotion: None,
                            episode_samples: 0,
                            suspect_since: None,
                            last_spin_ns: 0,
                            last_sample: None,
                        },
                    );
                }
                Err(OpenError::Gone) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
        self.wait(now_ns(), max_wait_ns);
        let now = now_ns();
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

    /// The period of threads that are not suspects.
    fn base_period(&self) -> u64 {
        if self.relaxed {
            self.cfg.idle_period_ns
        } else {
            self.cfg.period_ns
        }
    }

    /// Samples at the idle period after 100 ms without oversubscription,
    /// at the full period as soon as the machine is oversubscribed again.
    fn adapt_sampling(&mut self, now_ns: u64) {
        if self.cfg.idle_period_ns <= self.cfg.period_ns {
            return;
        }
        let over = self.cfg.action == Action::Observe || self.load.oversubscribed(now_ns);
        let relax = if over {
            self.last_over_ns = now_ns;
            false
        } else {
            now_ns.saturating_sub(self.last_over_ns) > RELAX_AFTER_NS
        };
        if relax == self.relaxed {
            return;
        }
        self.relaxed = relax;
        self.stats.period_switches += 1;
        let period = self.base_period();
        for t in self.threads.values_mut() {
            if t.suspect_since.is_none() {
                t.sampler.set_period(period);
            }
            // Nothing is stopped while relaxed: a trap would only cost hits.
            if relax && t.take_entry_trap(now_ns).is_some() {
                self.stats.entry_traps_removed += 1;
            }
        }
    }

    /// Sleeps until a suspect thread has a new sample, the next demotion
    /// lease ends, or `max_ns` passed, whichever comes first.
    pub fn wait(&mut self, now_ns: u64, max_ns: u64) {
        let mut timeout_ns = max_ns;
        for t in self.threads.values() {
            if let Some(d) = &t.demotion {
                timeout_ns = timeout_ns.min(d.lease_end(&self.cfg).saturating_sub(now_ns));
                if d.watch.is_some() {
                    timeout_ns = timeout_ns.min(self.next_watch_ns.saturating_sub(now_ns));
                }
            }
        }
        self.pollfds.clear();
        let suspects = self.threads.values().filter(|t| t.suspect_since.is_some());
        let traps = self
            .threads
            .values()
            .filter_map(|t| t.entry.as_ref())
            .filter(|e| !e.stops_itself);
        self.pollfds.extend(
            suspects
                .map(|t| t.sampler.fd())
                .chain(traps.map(|e| e.sampler.fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
        );
        if let Some(f) = &self.freezer {
            self.pollfds.push(libc::pollfd {
                fd: f.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
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

    fn clear_suspects(&mut self, now_ns: u64) {
        let slow = self.base_period();
        for (&tid, t) in self.threads.iter_mut() {
            if t.suspect_since.is_some()
                && !t.detector.spinning()
                && now_ns.saturating_sub(t.last_spin_ns) > self.cfg.suspect_ns
            {
                if let Ok(sampler) = ThreadSampler::open(tid, slow, false) {
                    t.sampler = sampler;
                    t.suspect_since = None;
                }
            }
        }
    }

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
            // Fast sampling serves demotion (catching a spinner again soon,
            // restoring it as soon as it leaves): with a vCPU free for every
            // runnable thread nothing is demoted, and the extra timer
            // interrupts would only slow the program.
            let worth_watching =
                self.cfg.action == Action::Observe || self.load.oversubscribed(s.time_ns);
            if t.suspect_since.is_none() && worth_watching {
                if let Ok(fast) = ThreadSampler::open(tid, self.cfg.suspect_period_ns, true) {
                    // Samples still in the old buffer are older than this one: dropped.
                    t.sampler = fast;
                    t.suspect_since = Some(s.time_ns);
                }
            }
        }
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
                if self.threads[&tid].demotion.is_some() {
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
            if t.demotion.is_none()
                && self.load.oversubscribed(s.time_ns)
                && previous.is_some_and(|p| self.same_wait(&p, s))
            {
                self.stats.replay_detections += 1;
                self.demote(tid, s.time_ns);
            }
            return;
        }
        match &t.demotion {
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
            Some(d)
                if self.cfg.kick
                    && matches!(d.hold, Hold::Demoted(_))
                    && s.time_ns > d.since_ns =>
            {
                self.kick(tid)
            }
            Some(_) => {}
        }
    }

    fn demote(&mut self, tid: i32, now_ns: u64) {
        let (replay, words) = self.replay_newest(tid).unzip();
        let watch = match replay {
            // Its wait ended since the sample was taken: leave it alone.
            Some(Replay::Leaves) => {
                self.stats.released_before_demotion += 1;
                return;
            }
            // The detector's verdict was wrong: this loop computes.
            Some(Replay::Progressing) => {
                self.stats.refuted_by_replay += 1;
                let params = self.cfg.params;
                if let Some(t) = self.threads.get_mut(&tid) {
                    let ip = t.last_sample.map_or(0, |s| s.ip);
                    if t.detector.refute(ip, &params) == Transition::Ended {
                        self.stats.spin_episodes_refuted += 1;
                        t.episode_samples = 0;
                    }
                }
                return;
            }
            Some(Replay::Waiting { path, trap_at }) => self.threads.get(&tid).and_then(|t| {
                let s = t.last_sample?;
                Some(Watch {
                    ip: s.ip,
                    regs: s.regs,
                    path,
                    trap_at,
                    words: words.unwrap_or_default(),
                })
            }),
            _ => None,
        };
        // A loop that replays can tell when its wait is over without running:
        // stop the thread outright.
        let watch = match watch {
            Some(w) if self.stop(tid) => {
                self.hold_stopped(tid, now_ns, w);
                self.arm_entry_trap(tid);
                return;
            }
            other => other,
        };
        let Ok(original) = sched::get(tid) else {
            self.stats.sched_failures += 1;
            return;
        };
        if original.policy == sched::SCHED_IDLE {
            return; // already as low as it goes
        }
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        // Journal first: if vsched dies right after the change, the watchdog knows.
        if watchdog.demoting(self.pid, tid, &original).is_err() {
            self.stats.sched_failures += 1;
            return;
        }
        match sched::set_or_plain(tid, &demoted(self.cfg.slice_ns)) {
            Ok(()) => {
                self.stats.demotions += 1;
                self.stats.watched_demotions += watch.is_some() as u64;
                self.hold(tid, now_ns, Hold::Demoted(original), watch);
            }
            Err(_) => {
                self.stats.sched_failures += 1;
                let _ = watchdog.restored(tid);
            }
        }
    }

    /// Stops `tid` with ptrace; false if it cannot be stopped (no freezer,
    /// ptrace refused, thread gone).
    fn stop(&mut self, tid: i32) -> bool {
        let Some(f) = &mut self.freezer else {
            return false;
        };
        let stopped = f.stop(tid);
        self.stats.stop_refused |= f.refused();
        stopped
    }

    /// Records the stop of a thread waiting in a loop that replays.
    fn hold_stopped(&mut self, tid: i32, now_ns: u64, watch: Watch) {
        self.stats.demotions += 1;
        self.stats.watched_demotions += 1;
        self.stats.stops += 1;
        self.hold(tid, now_ns, Hold::Stopped, Some(watch));
    }

    /// Sets an entry trap on the loop `tid` was just stopped in, unless it
    /// has one or that loop passed through too often.
    fn arm_entry_trap(&mut self, tid: i32) {
        if !self.cfg.entry_traps {
            return;
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some((ip, path)) = t
            .demotion
            .as_ref()
            .and_then(|d| d.watch.as_ref())
            .map(|w| (w.trap_at, w.path.clone()))
        else {
            return;
        };
        if t.entry_refused || t.untrapped.contains(&ip) {
            return;
        }
        // One trap per thread. It moves to another loop only after the
        // thread was caught there by sampling several times in a row: its
        // first stop may have been in a loop it never returns to (a start-up
        // wait), while a thread that waits in several loops (libgomp's
        // barriers) must not have its trap moved, at a perf_event_open
        // each, at every other stop.
        if let Some(e) = &mut t.entry {
            if e.ip == ip {
                e.misses = 0;
                return;
            }
            e.misses += 1;
            if e.misses < ENTRY_MOVE_AFTER {
                return;
            }
            t.take_entry_trap(now_ns()); // frees its debug register first
            self.stats.entry_traps_moved += 1;
        }
        match ThreadSampler::open_entry_trap(tid, ip) {
            Ok(sampler) => {
                self.stats.entry_traps += 1;
                // A thread that blocks the trap's signal would never take
                // it (no stop): its trap only wakes the detector.
                let stops_itself = self.stop_program.as_ref().is_some_and(|p| {
                    !threads::blocks_signal(self.pid, tid, TRAP_SIGNAL)
                        && p.attach(sampler.fd()).is_ok()
                });
                self.stats.trap_stops += stops_itself as u64;
                t.entry = Some(EntryTrap {
                    ip,
                    misses: 0,
                    short: 0,
                    path,
                    sampler,
                    stops: 0,
                    passes: 0,
                    stops_itself,
                });
            }
            Err(_) => {
                self.stats.entry_trap_failures += 1;
                t.entry_refused = true;
            }
        }
    }

    /// Acts on the newest hit of every entry trap that fired.
    fn poll_entry_traps(&mut self) {
        let mut hits = vec![];
        for (&tid, t) in self.threads.iter_mut() {
            if let Some(e) = t.entry.as_mut().filter(|e| !e.stops_itself) {
                let mut newest = None;
                e.sampler.drain(|s| newest = Some(s));
                if let Some(s) = newest {
                    hits.push((tid, s));
                }
            }
        }
        for (tid, s) in hits {
            self.entry_hit(tid, s, false);
        }
    }

    /// Threads stopped by SIGURG, maybe their entry trap's (see `bpf`):
    /// keeps those whose wait is not over, lets the others go. The trap's
    /// signal comes from the kernel with a new trap sample (or just after
    /// the trap was removed); any other SIGURG (kill(), tgkill()) is passed
    /// on.
    fn check_trap_stops(&mut self) {
        let Some(f) = &mut self.freezer else { return };
        let stopped = f.take_signal_stopped();
        for tid in stopped {
            let from_kernel = self
                .freezer
                .as_ref()
                .is_some_and(|f| f.signal_from_kernel(tid));
            let mut newest = None;
            let mut recent_trap = false;
            if let Some(t) = self.threads.get_mut(&tid) {
                if let Some(e) = t.entry.as_mut().filter(|e| e.stops_itself) {
                    // Older samples, if any, are of hits whose signal was
                    // taken elsewhere (see `Freezer::stopped`): stale.
                    e.sampler.drain(|s| newest = Some(s));
                }
                recent_trap = now_ns().saturating_sub(t.trap_removed_ns) < TRAP_SIGNAL_GRACE_NS;
            }
            let held = match newest {
                Some(s) if from_kernel => self.entry_hit(tid, s, true),
                _ => false,
            };
            if held {
                continue;
            }
            let Some(f) = &mut self.freezer else { return };
            if from_kernel && (newest.is_some() || recent_trap) {
                f.resume(tid);
            } else {
                f.pass_signal(tid, TRAP_SIGNAL);
            }
        }
    }

    /// `tid` entered the loop its trap is on: stop it if its wait is not
    /// over (`stopped`: the trap stopped it already). Older hits of the same
    /// trap are stale and were dropped. True if the thread is now held
    /// stopped.
    fn entry_hit(&mut self, tid: i32, mut s: Sample, stopped: bool) -> bool {
        let Some(t) = self.threads.get_mut(&tid) else {
            return false;
        };
        // Held already: the hit came before the stop took effect. (Or the
        // thread is demoted, not stopped: a stop by its trap then only cost
        // it a stop and a resume, like a pass.)
        if t.demotion.is_some() {
            if let Some(e) = t.entry.as_mut().filter(|_| stopped) {
                e.passes += 1;
                if e.wasted() {
                    self.remove_entry_trap(tid, true);
                }
            }
            return false;
        }
        s.tid = tid;
        if !self.load.oversubscribed(s.time_ns) {
            // Nothing would be stopped: each iteration would only cost a trap.
            self.remove_entry_trap(tid, false);
            return false;
        }
        t.last_sample = Some(s);
        // Replayed along the path learnt when the trap was set: from the
        // loop's head, a branch inside the loop can look like its exit.
        let Some(path) = t.entry.as_ref().map(|e| e.path.clone()) else {
            return false;
        };
        match self.replay_from(&s, Some(&path)) {
            Some((Replay::Waiting { .. }, words)) => {
                let watch = Watch {
                    ip: s.ip,
                    regs: s.regs,
                    path,
                    trap_at: s.ip,
                    words,
                };
                if !stopped && !self.stop(tid) {
                    self.remove_entry_trap(tid, false);
                    return false;
                }
                self.hold_stopped(tid, now_ns(), watch);
                self.stats.entry_stops += 1;
                let t = self.threads.get_mut(&tid).expect("listed");
                if let Some(d) = &mut t.demotion {
                    d.by_trap = true;
                }
                if let Some(e) = &mut t.entry {
                    e.stops += 1;
                    e.misses = 0;
                }
                true
            }
            Some((Replay::Leaves, _)) => {
                self.stats.entry_passes += 1;
                let t = self.threads.get_mut(&tid).expect("listed");
                if let Some(e) = &mut t.entry {
                    e.passes += 1;
                    if e.wasted() {
                        self.remove_entry_trap(tid, true);
                    }
                }
                false
            }
            // The loop no longer replays as a wait from its entry.
            _ => {
                self.remove_entry_trap(tid, true);
                false
            }
        }
    }

    /// Removes `tid`'s entry trap; `for_good`: never trap that loop again.
    fn remove_entry_trap(&mut self, tid: i32, for_good: bool) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(e) = t.take_entry_trap(now_ns()) else {
            return;
        };
        self.stats.entry_traps_removed += 1;
        if for_good {
            if t.untrapped.len() == UNTRAPPED_MEMORY {
                t.untrapped.remove(0);
            }
            t.untrapped.push(e.ip);
        }
    }

    fn hold(&mut self, tid: i32, now_ns: u64, hold: Hold, watch: Option<Watch>) {
        self.load.held += matches!(hold, Hold::Stopped) as usize;
        if let Some(t) = self.threads.get_mut(&tid) {
            t.demotion = Some(Demotion {
                since_ns: now_ns,
                hold,
                watch,
                by_trap: false,
            });
        }
    }

    /// A thread is stopped some microseconds after the sample that decided
    /// it, and that sample may be old: where it actually stopped must be on
    /// the loop's waiting path, or it has moved on (it got the lock, and may
    /// be waiting somewhere else now, or holding something) and is resumed.
    fn check_stop_sites(&mut self) {
        let Some(f) = &mut self.freezer else { return };
        let mut moved_on = vec![];
        for tid in f.take_newly_stopped() {
            let Some(w) = self
                .threads
                .get(&tid)
                .and_then(|t| t.demotion.as_ref())
                .filter(|d| matches!(d.hold, Hold::Stopped))
                .and_then(|d| d.watch.as_ref())
            else {
                continue;
            };
            if f.ip(tid)
                .is_some_and(|ip| w.path.binary_search(&ip).is_err())
            {
                moved_on.push(tid);
            }
        }
        for tid in moved_on {
            self.stats.resumed_off_path += 1;
            self.restore(tid);
        }
    }

    /// Whether two consecutive samples of a thread the detector does not
    /// call spinning sit in the same wait anyway: a wait on a counter that
    /// moves on while others take their turns (a shared ring token, a
    /// ticket) never repeats its registers, yet replayed from both samples
    /// the loop ends its iteration in the same state. Addresses found not
    /// to be waits are not replayed again.
    fn same_wait(&mut self, previous: &Sample, s: &Sample) -> bool {
        if previous.ip != s.ip || previous.regs == s.regs || !self.cfg.replay {
            return false;
        }
        if self.not_waits.contains(&s.ip) {
            return false;
        }
        let Some(memory) = self.memory.as_mut() else {
            return false;
        };
        let mut mem = Snapshot::new(memory);
        match self
            .replayer
            .same_wait(&mut mem, s.ip, &previous.regs, &s.regs)
        {
            Some(same) => {
                if !same {
                    if self.not_waits.len() >= NOT_WAITS_LIMIT {
                        self.not_waits.clear();
                    }
                    self.not_waits.insert(s.ip);
                }
                same
            }
            None => false,
        }
    }

    /// Replays `tid`'s loop from its newest sample, and says which words it
    /// read (None: replay is off or memory is unreadable).
    fn replay_newest(&mut self, tid: i32) -> Option<(Replay, Vec<Word>)> {
        let s = self.threads.get(&tid)?.last_sample?;
        self.replay_from(&s, None)
    }

    /// Replays a loop from sample `s`, along a waiting path learnt before
    /// (None: learn it), and says which words it read.
    fn replay_from(
        &mut self,
        s: &Sample,
        known_path: Option<&[u64]>,
    ) -> Option<(Replay, Vec<Word>)> {
        if !self.cfg.replay {
            return None;
        }
        let mut mem = Snapshot::new(self.memory.as_mut()?);
        let replay = self.replayer.replay(&mut mem, s.ip, &s.regs, known_path);
        Some((replay, mem.take_touched()))
    }

    /// Checks the words stopped threads wait on every watch period.
    fn check_watched_when_due(&mut self, now_ns: u64) {
        if now_ns >= self.next_watch_ns {
            self.next_watch_ns = now_ns + self.cfg.watch_period_ns;
            self.check_watched();
        }
    }

    /// Checks every watched thread's wait: reads all the words they poll
    /// with one system call, and replays only loops whose words changed;
    /// restores those whose wait is over.
    fn check_watched(&mut self) {
        let Some(mem) = self.memory.as_mut() else {
            return;
        };
        let mut wanted: Vec<(u64, usize)> = self
            .threads
            .values()
            .filter_map(|t| t.demotion.as_ref()?.watch.as_ref())
            .flat_map(|w| w.words.iter().map(|w| (w.addr, w.len)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        wanted.sort_unstable();
        wanted.dedup();
        // One unreadable word (memory unmapped) makes the batch fail: the
        // replays then read word by word and find out which.
        let current = mem.read_words(&wanted).unwrap_or_default();
        let mut snapshot = Snapshot::new(mem);
        snapshot.prefill(current.iter().copied());
        // Longest-held first: in a ring, a pipeline or a fair lock, the
        // thread whose turn comes next is usually the one that has waited
        // longest. A stopped thread whose wait is over is resumed at once,
        // before the other replays.
        let mut order: Vec<(u64, i32)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| {
                let d = t.demotion.as_ref()?;
                d.watch.as_ref().map(|_| (d.since_ns, tid))
            })
            .collect();
        order.sort_unstable();
        let mut released = vec![];
        for (_, tid) in order {
            let Some(d) = self.threads.get_mut(&tid).and_then(|t| t.demotion.as_mut()) else {
                continue;
            };
            let Some(w) = d.watch.as_mut() else { continue };
            let unchanged = !current.is_empty() && w.words.iter().all(|old| current.contains(old));
            if unchanged {
                continue;
            }
            snapshot.take_touched();
            match self
                .replayer
                .replay(&mut snapshot, w.ip, &w.regs, Some(&w.path))
            {
                // Still waiting, on new values (a turn counter moved on).
                Replay::Waiting { .. } => w.words = snapshot.take_touched(),
                _ => {
                    if let (Hold::Stopped, Some(f)) = (&d.hold, self.freezer.as_mut()) {
                        f.resume(tid);
                    }
                    released.push(tid);
                }
            }
        }
        for tid in released {
            self.stats.restored_on_release += 1;
            self.restore(tid);
        }
    }

    /// Forces a reschedule of a running demoted thread: raising the current
    /// task's priority number is a change the kernel acts on immediately.
    fn kick(&mut self, tid: i32) {
        let demoted = demoted(self.cfg.slice_ns);
        let step = SchedAttr {
            nice: demoted.nice - 1,
            ..demoted
        };
        if sched::set_or_plain(tid, &step).is_ok() && sched::set_or_plain(tid, &demoted).is_ok() {
            self.stats.kicks += 1;
        }
    }

    fn restore(&mut self, tid: i32) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(d) = t.demotion.take() else { return };
        let held_ns = now_ns().saturating_sub(d.since_ns);
        self.stats.held_ns += held_ns;
        if d.by_trap && held_ns < ENTRY_MIN_HOLD_NS {
            self.stats.entry_stops_short += 1;
            if let Some(e) = &mut t.entry {
                e.short += 1;
                if e.wasted() {
                    self.remove_entry_trap(tid, true);
                }
            }
        }
        match d.hold {
            Hold::Stopped => {
                self.load.held -= 1;
                if let Some(f) = &mut self.freezer {
                    f.resume(tid);
                }
            }
            Hold::Demoted(original) => {
                if sched::set(tid, &original).is_err() && threads_alive(self.pid, tid) {
                    self.stats.sched_failures += 1;
                }
                if let Some(w) = &mut self.watchdog {
                    let _ = w.restored(tid);
                }
            }
        }
    }

    fn expire_leases(&mut self, now_ns: u64) {
        let expired: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, t)| {
                t.demotion
                    .as_ref()
                    .is_some_and(|d| now_ns >= d.lease_end(&self.cfg))
            })
            .map(|(&tid, _)| tid)
            .collect();
        for tid in expired {
            self.stats.restored_on_lease += 1;
            self.restore(tid);
        }
    }

    fn forget(&mut self, tid: i32) {
        if self.threads.get(&tid).is_some_and(|t| t.demotion.is_some()) {
            self.restore(tid);
        }
        self.threads.remove(&tid);
        if let Some(f) = &mut self.freezer {
            f.forget(tid);
        }
    }

    fn forget_all(&mut self) {
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            self.forget(tid);
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

    fn shutdown(&mut self) {
        // Demoted threads are restored here; stopped ones are detached by
        // the freezer below (a detach resumes them: no stop-and-go).
        for t in self.threads.values_mut() {
            if t.demotion
                .as_ref()
                .is_some_and(|d| matches!(d.hold, Hold::Stopped))
            {
                t.demotion = None;
                self.load.held -= 1;
            }
        }
        let demoted: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.demotion.is_some())
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

/// What an engine leaves behind.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub stats: Stats,
    pub events: Vec<Event>,
    pub samples: Vec<Sample>,
}

fn threads_alive(pid: i32, tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// One descriptor per thread: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit on a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn entry_traps_go_when_they_do_not_pay() {
        use super::trap_wasted;
        // A ring: every hit stops the thread for a long time.
        assert!(!trap_wasted(8, 1, 5000));
        // A grace of 8 wasted hits before anything is judged.
        assert!(!trap_wasted(8, 0, 0));
        assert!(trap_wasted(9, 0, 0));
        // A pipeline stage whose waits end at once: passes and short stops.
        assert!(trap_wasted(300, 12, 88));
        // Short stops count against the trap, not for it.
        assert!(trap_wasted(0, 40, 40));
        assert!(!trap_wasted(0, 10, 40));
    }
}
