//! Per-run statistics: global relaxed counters, touched only on slow paths
//! (a contended acquisition, a wait), never on an uncontended fast path, and
//! only when statistics were asked for.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// One counter per event the runtime reports.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Counter { $($name,)* }

        pub const NAMES: &[(&str, &str)] = &[$((stringify!($name), $doc),)*];
    };
}

counters! {
    waits: "acquisitions or waits that could not complete at once",
    spin_wins: "waits that ended while spinning",
    spin_budget_exhausted: "waits that spun their whole budget and went on to yield or sleep",
    spin_lost_time: "spins stopped because the spinner's clock jumped (its vCPU was switched off)",
    spin_skipped: "waits that did not spin: a waiter lost time to the host moments ago",
    yields: "sched_yield calls by waiters on an oversubscribed machine",
    yields_declined: "waits that slept instead of yielding: the excess runnable threads were not the program's",
    yield_wins: "waits that ended while yielding",
    sleeps: "futex sleeps",
    wakes: "futex wake calls",
    timeouts: "timed waits that timed out",
    admission_yields: "spinlock acquisitions deferred to a fresh time slice (admission)",
    admission_checks: "spinlock acquisitions whose remaining time slice was predicted",
    holds_preempted: "spinlock holds during which the holder was switched out",
    holds_measured: "spinlock holds checked for a switch-out",
    admission_waits: "spinlock acquisitions that waited, without the lock, for their vCPU's predicted switch-off to pass (admission with the scheduler's channel)",
    admission_wait_timeouts: "of those, waits that gave up: no switch-off came within a critical section's time of its prediction (not waited for again until the next switch-off)",
    holds_switched_off: "spinlock holds across a switch-off of the holder's vCPU, as the scheduler's channel saw it (I-Spinlock's problematic preemptions)",
    holds_observed: "spinlock holds checked against the scheduler's switch-off count",
    marks: "waits marked in the scheduler's channel (virtual blocking: the scheduler runs other threads first)",
    marks_rearmed: "marks set again after a waker cleared them and the wait went on",
    marks_cleared: "marks of waiters cleared by their wakers",
    channel_attached: "times the runtime mapped the scheduler's channel",
}

const N: usize = NAMES.len();
static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

#[inline]
pub fn bump(counter: Counter) {
    if crate::config::stats_on() {
        COUNTS[counter as usize].fetch_add(1, Relaxed);
    }
}

pub fn snapshot() -> [u64; N] {
    core::array::from_fn(|i| COUNTS[i].load(Relaxed))
}

/// The statistics as one JSON object (schema "vsched.sync-stats" v1).
pub fn to_json(pid: i32) -> String {
    let values = snapshot();
    let mut out = format!(
        "{{\"schema\":\"vsched.sync-stats\",\"version\":1,\"pid\":{pid},\"spin_ns\":{},\"yield_ns\":{},\"vcpus\":{},\"counters\":{{",
        crate::config::spin_ns(),
        crate::config::yield_ns(),
        crate::config::VCPUS.load(Relaxed)
    );
    for (i, ((name, _), value)) in NAMES.iter().zip(values).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("\"{name}\":{value}"));
    }
    out.push_str("}}\n");
    out
}

/// The statistics as lines for a person.
pub fn to_text(pid: i32) -> String {
    let mut out = format!("vsched-sync: statistics of pid {pid}\n");
    for ((name, doc), value) in NAMES.iter().zip(snapshot()) {
        out.push_str(&format!("  {name:<22} {value:>12}  {doc}\n"));
    }
    out
}
