//! Is the machine oversubscribed? Nothing is held unless it is: with a vCPU
//! free for every runnable thread, spinning costs nobody anything.

use vsched_os::load::{self as loadavg, Loadavg};

/// How often /proc/loadavg is re-read at most (1 ms): the engine asks for
/// every spinning sample, and the count changes as fast as threads run.
const RECHECK_NS: u64 = 1_000_000;

/// Whether the system has more runnable threads than vCPUs, from
/// /proc/loadavg's count of runnable tasks, re-read at most every 1 ms.
pub(super) struct Load {
    loadavg: Option<Loadavg>,
    vcpus: u64,
    checked_ns: u64,
    over: bool,
    /// Threads we stopped: not runnable for the kernel, yet each wants a vCPU.
    pub(super) held: usize,
}

impl Load {
    pub(super) fn new() -> Load {
        Load {
            loadavg: Loadavg::open().ok(),
            vcpus: loadavg::online_vcpus(),
            checked_ns: 0,
            // Until the first reading, act as if it were: the safe side for
            // a program that starts out spinning.
            over: true,
            held: 0,
        }
    }

    pub(super) fn oversubscribed(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.checked_ns) >= RECHECK_NS {
            self.checked_ns = now_ns;
            if let Some(runnable) = self.loadavg.and_then(|l| l.runnable()) {
                self.over = oversubscribed(runnable, self.held, self.vcpus);
            }
        }
        self.over
    }
}

/// The rule on one reading: `runnable` tasks counted by the kernel, `held`
/// threads stopped by the detector, on `vcpus`.
fn oversubscribed(runnable: u64, held: usize, vcpus: u64) -> bool {
    // The detector itself is running while it reads: leave it out. Held
    // threads want a vCPU the kernel does not count.
    let wanting = runnable.saturating_sub(1) + held as u64;
    loadavg::oversubscribed(wanting, vcpus, loadavg::DETECTOR_SLACK)
}

#[cfg(test)]
mod tests {
    use super::oversubscribed;

    #[test]
    fn the_detector_is_left_out_and_held_threads_counted() {
        let slack = vsched_os::load::DETECTOR_SLACK;
        // 2 vCPUs: up to 2 + slack threads wanting one are not too many.
        let limit = 2 + slack;
        // The reading includes the detector: one more than the threads.
        assert!(!oversubscribed(limit + 1, 0, 2));
        assert!(oversubscribed(limit + 2, 0, 2));
        // Stopped threads are not runnable to the kernel but still count.
        assert!(oversubscribed(limit + 1, 1, 2));
        // An empty reading (only the detector, or nothing) is not.
        assert!(!oversubscribed(0, 0, 2));
    }
}
