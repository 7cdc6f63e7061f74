//! vsched's sched_ext scheduler: a BPF scheduler (src/bpf/main.bpf.c) that
//! the kernel runs in place of its default one while `vsched sched` keeps
//! it loaded, and the Rust side that loads it, feeds it the vCPU model the
//! probers measure, and reads its statistics.
//!
//! Nothing here needs restoring: sched_ext falls back to the kernel's
//! default scheduler by itself when the loader exits, crashes or is killed,
//! or when the BPF side misbehaves (a stall or an error ejects it).
//!
//! * [`preflight`]: can this kernel and user load a scheduler at all?
//! * [`model`]: a probe report turned into the per-vCPU entries the BPF side
//!   reads (capacity, and what RWC hides).
//! * [`tunables`]: the knobs fixed at load time, each a flag of `vsched
//!   sched` declared here.
//! * [`loader`]: open, load, attach, update, detach.
//! * [`session`]: a scheduler kept loaded: fed every probe report, loaded
//!   again after the kernel's hot-plug ejections, counters over every load.
//! * [`stats`]: the BPF side's counters, declared as data.
//! * [`policy`]: the BPF side's consolidation decisions, compiled for the
//!   host, for consolidation without sched_ext.
//! * [`preferred`]: the kernel's preferred-CPU mask, which both forms of
//!   consolidation respect.

pub mod channel;
pub mod error;
pub mod loader;
pub mod model;
pub mod policy;
pub mod preferred;
pub mod preflight;
pub mod session;
pub mod stats;
pub mod stats_table;
pub mod tunables;

mod bpf_intf;
mod bpf_skel;

pub use error::SchedError;
pub use loader::{ExitInfo, Scheduler, MAX_HOTPLUG_RELOADS};
pub use model::{VcpuModel, Visibility};
pub use session::{Ending, Event, Session};
pub use stats::Stats;
pub use tunables::Tunables;
