//! Thin wrappers over the kernel interfaces the probers use: CPU lists,
//! affinity, scheduling policy, clocks, per-thread schedstat and per-CPU steal.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use vsched_model::cpulist::parse_cpu_list;

/// CLOCK_MONOTONIC in ns (vDSO: no system call on x86 with a TSC clocksource).
#[inline]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread, as the guest kernel accounts it.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the whole process (all threads, living and ended).
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Online CPUs according to sysfs.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// CPUs this process may run on (its affinity mask: cpusets, containers, taskset).
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as u32)
            .filter(|&c| libc::CPU_ISSET(c as usize, &set))
            .collect())
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: u32) -> io::Result<()> {
    set_current_thread_affinity(&[cpu])
}

/// Sets the calling thread's affinity mask.
pub fn set_current_thread_affinity(cpus: &[u32]) -> io::Result<()> {
    // SAFETY: as above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c as usize, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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
                set_nice(19);
                "nice:19 (SCHED_IDLE refused)".to_string()
            }
        }
        Policy::High => {
            if set_scheduler(libc::SCHED_FIFO, 1).is_ok() {
                "SCHED_FIFO:1".to_string()
            } else if set_scheduler(libc::SCHED_OTHER, 0).is_ok() && set_nice(-20) {
                "nice:-20".to_string()
            } else {
                "normal (no privilege for SCHED_FIFO or negative nice)".to_string()
            }
        }
    }
}

fn set_scheduler(policy: libc::c_int, priority: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 = calling thread; param is valid.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_nice(nice: libc::c_int) -> bool {
    // SAFETY: on Linux, PRIO_PROCESS with the thread id sets one thread's nice.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0
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
        assert!(!allowed_cpus().unwrap().is_empty());
        assert!(steal_ns(online[0]).is_some());
        let mut s = SchedStat::open_current_thread().unwrap();
        let _ = s.run_delay_ns();
        let a = now_ns();
        assert!(now_ns() >= a);
        assert!(thread_cpu_ns() > 0);
    }
}
