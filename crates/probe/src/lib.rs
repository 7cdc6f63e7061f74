//! vCPU probers: measure each vCPU's capacity and activity (vcap/vact) and
//! the topology between vCPUs (vtop) from inside an ordinary guest, and
//! what waking a thread on an idle vCPU costs (wake, the spin budget of
//! `vsched exec`'s runtime).
//!
//! The probers change nothing outside their own threads (affinity and
//! scheduling class of threads they create and then end; `wake` also pins
//! the calling thread and gives it its vCPUs back), so there is nothing to
//! restore when the process exits, however it exits.

pub mod hurry;
pub mod plan;
pub mod session;
pub mod sys;
pub mod vcap;
pub mod vtop;
pub mod wake;
pub mod watch;
