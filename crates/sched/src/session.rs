//! The scheduler kept loaded for as long as its user wants it: loaded
//! once, fed every probe report, loaded again when the kernel unloads it
//! for a vCPU going offline or coming online, its counters summed over
//! the loads. `vsched sched` and `vsched daemon --sched` both run one; they
//! differ only in what they do with the events.

use crate::error::SchedError;
use crate::loader::{ExitInfo, Scheduler, MAX_HOTPLUG_RELOADS};
use crate::model::{self, VcpuModel};
use crate::stats::Stats;
use crate::tunables::Tunables;
use libbpf_rs::OpenObject;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::time::{Duration, Instant};
use vsched_model::report::ProbeReport;

/// What changed since the last [`Session::check`].
#[derive(Debug)]
pub enum Event {
    /// The kernel unloaded the scheduler and asked for it again (a vCPU
    /// hot-plug, e.g. a resize); it is loaded again, with the last model.
    Reloaded { exit: ExitInfo, restart: u32 },
    /// The kernel unloaded it and loading it again failed: the kernel's
    /// own scheduler runs everything from now on.
    ReloadFailed { exit: ExitInfo, error: SchedError },
    /// The kernel ejected it for good (an error, a stall, too many
    /// hot-plug reloads): the kernel's own scheduler runs everything.
    Ejected(ExitInfo),
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct Ending {
    /// The counters over every load.
    pub totals: Stats,
    /// Why the kernel ejected it, if it did (for good).
    pub ejected: Option<ExitInfo>,
    /// Reloads after hot-plug ejections.
    pub restarts: u32,
    /// A load's counters could not be read as it was unloaded: `totals`
    /// miss them.
    pub counters_incomplete: bool,
}

/// A loaded scheduler and what it was fed.
pub struct Session {
    /// The scheduler now loaded (None once ejected). Borrows the storage
    /// behind `object`, so it is always dropped first (Drop below).
    current: Option<Scheduler<'static>>,
    /// libbpf's object storage, reused by every reload as scx's own
    /// schedulers do. A raw allocation rather than a Box field: a Box
    /// asserts unique ownership when the session moves, which a borrow
    /// held by `current` would contradict.
    object: NonNull<MaybeUninit<OpenObject>>,
    tunables: Tunables,
    latency_comms: Vec<String>,
    nr_cpus: usize,
    /// Counters of the loads before the current one (each load's BPF
    /// counters start from zero).
    earlier: Stats,
    restarts: u32,
    /// A load's counters could not be read at its unload.
    counters_incomplete: bool,
    /// Why the kernel ejected it, once it has for good.
    ejected: Option<ExitInfo>,
    model: Vec<VcpuModel>,
    model_updates: u64,
    load_time: Duration,
}

impl Session {
    /// Loads and attaches the scheduler on every vCPU the kernel may bring
    /// online. Run [`crate::preflight::check`] first for clear refusals.
    pub fn start(tunables: Tunables, latency_comms: &[String]) -> Result<Session, SchedError> {
        let object = NonNull::from(Box::leak(Box::new(MaybeUninit::uninit())));
        let mut session = Session {
            current: None,
            object,
            tunables,
            latency_comms: latency_comms.to_vec(),
            nr_cpus: configured_cpus(),
            earlier: Stats::default(),
            restarts: 0,
            counters_incomplete: false,
            ejected: None,
            model: Vec::new(),
            model_updates: 0,
            load_time: Duration::ZERO,
        };
        let started = Instant::now();
        session.current = Some(session.attach()?);
        session.load_time = started.elapsed();
        Ok(session)
    }

    fn attach(&mut self) -> Result<Scheduler<'static>, SchedError> {
        // What makes the borrow below sound; cheap enough to check always.
        assert!(self.current.is_none(), "one scheduler per storage");
        // SAFETY: `object` points to an allocation this session owns until
        // its Drop, which drops `current` (the only borrow of it) first;
        // `current` is None here, so no other borrow is alive. The
        // allocation never moves, so the 'static borrow stays valid for as
        // long as the Scheduler that holds it.
        let storage = unsafe { &mut *self.object.as_ptr() };
        Scheduler::attach(storage, self.tunables, self.nr_cpus, &self.latency_comms)
    }

    /// vCPUs the scheduler handles: every one the kernel may bring online
    /// (a vCPU coming online later must find its place in the BPF maps).
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// How long the first load took (mostly the kernel's verifier).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// What the kernel's verifier went through for the loaded scheduler.
    pub fn verified_instructions(&self) -> Option<u64> {
        self.current.as_ref()?.verified_instructions()
    }

    /// Where vsched's runtime finds the channel, or why it does not.
    pub fn channel(&self) -> Result<&'static str, String> {
        match &self.current {
            Some(s) => s.channel(),
            None => Err("no scheduler loaded".into()),
        }
    }

    pub fn is_loaded(&self) -> bool {
        self.current.is_some()
    }

    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The last model written, per vCPU.
    pub fn model(&self) -> &[VcpuModel] {
        &self.model
    }

    pub fn model_updates(&self) -> u64 {
        self.model_updates
    }

    /// The vCPUs consolidation has parked now (empty when it is off, or
    /// while no scheduler is loaded).
    pub fn parked(&self) -> Result<Vec<u32>, SchedError> {
        // Without consolidation nothing is ever parked: no map reads.
        if !self.tunables.consolidate {
            return Ok(Vec::new());
        }
        self.current.as_ref().map_or(Ok(Vec::new()), |s| s.parked())
    }

    /// Turns a probe report into the model (with RWC's choice if RWC is
    /// on, and the kernel's preferred-CPU mask as it is now) and writes it
    /// to the scheduler, if loaded. True when what RWC
    /// hides changed, or this is the first model: the event a user, or a
    /// benchmark waiting for the model, looks for.
    pub fn feed(&mut self, report: &ProbeReport) -> Result<bool, SchedError> {
        let mut new = model::from_report(report, self.tunables.rwc);
        // Read at every report: the kernel moves the mask as steal time
        // changes (a sysfs read, nothing beside a probe step).
        let preferred = crate::preferred::read_kernels();
        model::mark_preferred(&mut new, preferred.as_deref());
        if let Some(s) = &self.current {
            s.update_model(&new)?;
        }
        self.model_updates += 1;
        let hidden = |m: &[VcpuModel]| m.iter().map(|v| v.visibility).collect::<Vec<_>>();
        let changed = self.model_updates == 1 || hidden(&new) != hidden(&self.model);
        self.model = new;
        Ok(changed)
    }

    /// The counters over every load so far.
    pub fn totals(&self) -> Result<Stats, SchedError> {
        Ok(match &self.current {
            Some(s) => self.earlier.plus(&s.stats()?),
            None => self.earlier.clone(),
        })
    }

    /// Notices the kernel unloading the scheduler: loads it again when the
    /// kernel asks (at most MAX_HOTPLUG_RELOADS times), else records the
    /// ejection. None while it runs, and after an ejection already told.
    pub fn check(&mut self) -> Option<Event> {
        let exit = self.current.as_ref()?.exit_info()?;
        self.unload();
        if !(exit.asks_restart() && self.restarts < MAX_HOTPLUG_RELOADS) {
            self.ejected = Some(exit.clone());
            return Some(Event::Ejected(exit));
        }
        self.restarts += 1;
        match self.attach() {
            Ok(s) => {
                if !self.model.is_empty() {
                    // The last model at once: the next report may be a
                    // probe interval away. A failure shows at the next feed.
                    let _ = s.update_model(&self.model);
                }
                self.current = Some(s);
                Some(Event::Reloaded {
                    exit,
                    restart: self.restarts,
                })
            }
            Err(error) => {
                self.ejected = Some(exit.clone());
                Some(Event::ReloadFailed { exit, error })
            }
        }
    }

    /// Detaches the current scheduler, keeping its counters.
    fn unload(&mut self) -> Option<ExitInfo> {
        let s = self.current.take()?;
        match s.stats() {
            Ok(last) => self.earlier = self.earlier.plus(&last),
            Err(_) => self.counters_incomplete = true,
        }
        s.detach()
    }

    /// Unloads the scheduler (the kernel's own takes over) and says how
    /// the session went. An error exit the kernel recorded as it was
    /// unloaded counts as an ejection.
    pub fn stop(mut self) -> Ending {
        if let Some(exit) = self.unload().filter(ExitInfo::is_error) {
            self.ejected.get_or_insert(exit);
        }
        Ending {
            totals: self.earlier.clone(),
            ejected: self.ejected.clone(),
            restarts: self.restarts,
            counters_incomplete: self.counters_incomplete,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.current.take();
        // SAFETY: `object` came from Box::leak in `start` and is freed only
        // here, after the one Scheduler that borrowed it was dropped.
        drop(unsafe { Box::from_raw(self.object.as_ptr()) });
    }
}

/// CPUs the kernel configured (possible ones, online or not).
fn configured_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    n.max(1) as usize
}
