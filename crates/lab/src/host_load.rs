//! Host loads: a thread of the lab's own on a host CPU that takes it for
//! `on_us` of every `period_us`, at real-time priority, so that every vCPU
//! placed there is switched off for `on_us` at a time whatever the guest
//! does. That is a neighbouring VM's vCPU sharing the core (vSched §5.4:
//! "half of the vCPUs have 2x lower latency"), which a bandwidth cap cannot
//! reproduce: a cap switches a vCPU off only once it has used its quota,
//! so a lightly loaded vCPU never is.
//!
//! The threads belong to the lab process: they stop when the run ends
//! (the guard's drop) and die with the process, so nothing outlives it.
//! `vsched lab check` does not model them (the truth is the layout's caps
//! and stacking); they are for benchmarks.

use crate::error::LabError;
use serde::Deserialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vsched_os::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// One `[[host_load]]` of a layout.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLoad {
    pub host_cpu: u32,
    pub on_us: u64,
    pub period_us: u64,
    /// When its first on-period starts, after a start shared by all the
    /// layout's loads: loads of equal periods keep these offsets, so two
    /// of 5 ms in 10 with phases 0 and 5000 take their CPUs by turns.
    #[serde(default)]
    pub phase_us: u64,
}

/// The host's real-time throttling lets SCHED_FIFO threads take 95% of a
/// CPU per second by default; above this share a load would be throttled
/// itself and no longer keep its rhythm.
pub const MAX_ON_SHARE: f64 = 0.9;

/// Priority of the load threads: the lowest real-time one, above every
/// normal thread (the vCPU threads) and below the host's own RT threads.
const LOAD_RT_PRIORITY: i32 = 1;

/// Running host loads; dropping it stops them.
pub struct HostLoads {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl HostLoads {
    /// Starts every load; fails (stopping those started) if a thread cannot
    /// be pinned or made real-time (that needs root or CAP_SYS_NICE).
    pub fn start(loads: &[HostLoad]) -> Result<HostLoads, LabError> {
        let mut running = HostLoads {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        // The shared start: late enough for every thread to be set up
        // (a thread and two system calls each; 50 ms is plenty).
        let epoch = monotonic_ns() + 50_000_000;
        for load in loads.iter().cloned() {
            let host_cpu = load.host_cpu;
            let stop = Arc::clone(&running.stop);
            let (ready_tx, ready) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("lab-load-{host_cpu}"))
                .spawn(move || {
                    let setup =
                        vsched_os::affinity::pin_current_thread(load.host_cpu).and_then(|_| {
                            vsched_os::sched::set_scheduler(libc::SCHED_FIFO, LOAD_RT_PRIORITY)
                        });
                    let ok = setup.is_ok();
                    let _ = ready_tx.send(setup);
                    if ok {
                        spin_in_rhythm(&load, epoch + load.phase_us * 1_000, &stop);
                    }
                })
                .map_err(|e| LabError::HostLoad(format!("starting a thread: {e}")))?;
            running.threads.push(thread);
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(LabError::HostLoad(format!(
                    "host CPU {host_cpu}: {e} (pinning and SCHED_FIFO need root or CAP_SYS_NICE)"
                )))
                }
                Err(_) => return Err(LabError::HostLoad("a load thread died".into())),
            }
        }
        Ok(running)
    }
}

/// From `first_ns` on, spins `on_us` from each period's start (or from a
/// late wake-up, so that every episode is as long as asked), sleeps to
/// the next period.
fn spin_in_rhythm(load: &HostLoad, first_ns: u64, stop: &AtomicBool) {
    let (on, period) = (load.on_us * 1_000, load.period_us * 1_000);
    let mut next = first_ns;
    sleep_until_monotonic_ns(next);
    while !stop.load(Ordering::Relaxed) {
        let until = monotonic_ns() + on;
        while monotonic_ns() < until {
            std::hint::spin_loop();
        }
        next += period;
        // After a long stall, resume the rhythm from now rather than
        // spinning through the missed periods back to back.
        let now = monotonic_ns();
        if next < now {
            next = now + (period - on);
        }
        sleep_until_monotonic_ns(next);
    }
}

impl Drop for HostLoads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Checks the loads of a layout against the host's CPUs.
pub fn validate(loads: &[HostLoad], host_cpus: &[u32]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for l in loads {
        if !host_cpus.contains(&l.host_cpu) {
            return Err(format!(
                "[[host_load]]: host CPU {} is not one this process may use ({host_cpus:?})",
                l.host_cpu
            ));
        }
        if !seen.insert(l.host_cpu) {
            return Err(format!(
                "[[host_load]]: host CPU {} has two loads",
                l.host_cpu
            ));
        }
        if l.on_us < 100 || l.period_us <= l.on_us {
            return Err(format!(
                "[[host_load]] on host CPU {}: need 100 <= on_us < period_us (got {} of {})",
                l.host_cpu, l.on_us, l.period_us
            ));
        }
        if l.phase_us >= l.period_us {
            return Err(format!(
                "[[host_load]] on host CPU {}: phase_us must be below period_us",
                l.host_cpu
            ));
        }
        if l.on_us as f64 > MAX_ON_SHARE * l.period_us as f64 {
            return Err(format!(
                "[[host_load]] on host CPU {}: on_us may be at most {:.0}% of period_us \
                 (real-time throttling would break the rhythm)",
                l.host_cpu,
                MAX_ON_SHARE * 100.0
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(host_cpu: u32, on_us: u64, period_us: u64) -> HostLoad {
        HostLoad {
            host_cpu,
            on_us,
            period_us,
            phase_us: 0,
        }
    }

    #[test]
    fn bad_loads_are_refused_with_the_reason() {
        let cpus = [0, 1];
        assert!(validate(&[load(0, 1000, 2000), load(1, 3000, 6000)], &cpus).is_ok());
        for (bad, why) in [
            (vec![load(2, 1000, 2000)], "not one this process may use"),
            (vec![load(0, 1000, 2000), load(0, 500, 2000)], "two loads"),
            (vec![load(0, 2000, 2000)], "on_us < period_us"),
            (vec![load(0, 50, 2000)], "100 <= on_us"),
            (vec![load(0, 1900, 2000)], "at most 90%"),
            (
                vec![HostLoad {
                    phase_us: 2000,
                    ..load(0, 1000, 2000)
                }],
                "phase_us must be below",
            ),
        ] {
            let e = validate(&bad, &cpus).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
