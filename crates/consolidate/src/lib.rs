//! Gleaner's idleness consolidation without sched_ext
//! (../shared/seeds/gleaner-idleness-consolidation.txt, §5): a program's
//! threads run on as few vCPUs as their work needs, by CPU affinity, for
//! kernels where vsched's scheduler cannot load. `vsched run --consolidate
//! -- PROGRAM` is its face for a program; `vsched daemon
//! --consolidate-cgroups` uses the same loop for the cgroups it manages,
//! by their cpusets (vsched-daemon's `consolidate`).
//!
//! Each block of a thread may halt its vCPU, and each wake-up of a thread
//! on a halted vCPU costs an IPI and the host's rescheduling of that vCPU;
//! a program whose threads run briefly between blocks finishes sooner on
//! fewer vCPUs kept busy. Which set is right is decided as the scheduler's
//! consolidation decides it, by the same code (vsched_sched::policy):
//! trials that narrow or widen the set from steady progress and keep a
//! move only if the program's progress allows; and, outside the trials,
//! threads that run long per wake-up and must wait widen the set at once.
//!
//! * [`tree`]: the program's threads, children's included.
//! * [`procfile`]: a thread's /proc file, kept open between readings.
//! * [`counters`]: what the kernel counts per thread (run time, time
//!   waiting to run, blocks).
//! * [`demand`]: those counters turned into a tick's and a period's demand.
//! * [`placement`]: the active set applied to every thread the program
//!   did not place itself, and put back.
//! * [`preferred`]: the kernel's preferred-CPU mask, where it has one:
//!   the order in which vCPUs join the set.
//! * [`watchdog`]: a second process that puts the threads back if vsched
//!   is killed.
//! * [`target`]: what a consolidation acts on (a process tree here, a
//!   cgroup in vsched-daemon) and how its threads get their set.
//! * [`consolidator`]: the loop that ties them together, and its report.

pub mod consolidator;
pub mod counters;
pub mod demand;
pub mod placement;
pub mod preferred;
pub mod procfile;
pub mod target;
pub mod tree;
pub mod watchdog;

pub use consolidator::{Consolidator, Options, Report};
pub use target::{ProcessTree, Target};
