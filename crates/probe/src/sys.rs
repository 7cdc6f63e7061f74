//! The kernel interfaces only the probers use: the online CPU list, the
//! scheduling class a prober asks for, per-thread schedstat and per-CPU
//! steal. Clocks, affinity and scheduling calls shared with other crates
//! are vsched-os's.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use vsched_model::cpulist::parse_cpu_list;
use vsched_os::sched::{set_nice, set_scheduler};

/// Online CPUs according to sysfs.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Scheduling class a prober asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Lowest possible: runs only on otherwise idle cycles.
    Idle,
    /// As high as permitted: SCHED_FIFO 1, else nice -20, else unchanged.
    High,
}

/// Applies `policy` to the calling thread and says what it got, e.g.
/// "SCHED_FIFO:1" or "nice:0 (no privilege for SCHED_FIFO or negative nice)".
pub fn apply_policy(policy: Policy) -> String {
    match policy {
        Policy::Idle => {
            if set_scheduler(libc::SCHED_IDLE, 0).is_ok() {
                "SCHED_IDLE".to_string()
            } else {
                // Not expected on Linux; nice 19 is the next best thing.
                let _ = set_nice(19);
                "nice:19 (SCHED_IDLE refused)".to_string()
            }
        }
        Policy::High => {
            if set_scheduler(libc::SCHED_FIFO, 1).is_ok() {
                "SCHED_FIFO:1".to_string()
            } else if set_scheduler(libc::SCHED_OTHER, 0).is_ok() && set_nice(-20).is_ok() {
                "nice:-20".to_string()
            } else {
                "normal (no privilege for SCHED_FIFO or negative nice)".to_string()
            }
        }
    }
}

/// The calling thread's /proc schedstat: run time and run-queue wait.
pub struct SchedStat {
    file: File,
    buf: [u8; 96],
}

impl SchedStat {
    /// Must be called on the thread to be observed (thread-self resolves at open).
    pub fn open_current_thread() -> io::Result<SchedStat> {
        Ok(SchedStat {
            file: File::open("/proc/thread-self/schedstat")?,
            buf: [0; 96],
        })
    }

    /// Nanoseconds this thread has waited on a run queue (run delay).
    pub fn run_delay_ns(&mut self) -> u64 {
        let n = self.file.read_at(&mut self.buf, 0).unwrap_or(0);
        std::str::from_utf8(&self.buf[..n])
            .ok()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// Steal time of one CPU from /proc/stat, in ns (USER_HZ resolution).
pub fn steal_ns(cpu: u32) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_steal_ns(&text, cpu, user_hz())
}

/// One USER_HZ tick in ns: the resolution of /proc/stat.
pub fn steal_tick_ns() -> u64 {
    1_000_000_000 / user_hz()
}

fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// Steal (8th value) of the `cpuN` line, converted from ticks to ns.
pub fn parse_steal_ns(proc_stat: &str, cpu: u32, hz: u64) -> Option<u64> {
    let tag = format!("cpu{cpu}");
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(tag.as_str()))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some((ticks as u128 * 1_000_000_000 / hz as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steal_of_the_right_cpu() {
        let text = "cpu  1 2 3 4 5 6 7 900 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3 4 5 6 7 250 0 0\ncpu10 0 0 0 0 0 0 0 5 0 0\n";
        assert_eq!(parse_steal_ns(text, 1, 100), Some(2_500_000_000));
        assert_eq!(parse_steal_ns(text, 0, 100), Some(80_000_000));
        assert_eq!(parse_steal_ns(text, 10, 100), Some(50_000_000));
        assert_eq!(parse_steal_ns(text, 2, 100), None);
    }

    #[test]
    fn real_system_interfaces_answer() {
        let online = online_cpus().unwrap();
        assert!(!online.is_empty());
        assert!(steal_ns(online[0]).is_some());
        let mut s = SchedStat::open_current_thread().unwrap();
        let _ = s.run_delay_ns();
    }
}
