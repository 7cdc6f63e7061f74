//! CPU affinity of threads (sched_setaffinity / sched_getaffinity).
//!
//! A `tid` of 0 means the calling thread; any other value is a thread id
//! (as from gettid or /proc/PID/task), not a process id.

use std::io;

/// The kernel's fixed-size CPU mask: CPUs at or above `CPU_SETSIZE` (1024)
/// cannot be named, and are refused rather than silently dropped.
fn cpu_set(cpus: &[u32]) -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c as usize >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {c} is beyond the kernel's affinity mask size"),
            ));
        }
        // SAFETY: `c` was checked to lie inside the set's bit array.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    Ok(set)
}

/// Restricts thread `tid` (0: the caller) to `cpus`.
pub fn set_thread_affinity(tid: i32, cpus: &[u32]) -> io::Result<()> {
    let set = cpu_set(cpus)?;
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the kernel only reads it.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: u32) -> io::Result<()> {
    set_thread_affinity(0, &[cpu])
}

/// The CPUs thread `tid` (0: the caller) may run on: its affinity mask,
/// which cpusets, containers and taskset narrow.
pub fn thread_affinity(tid: i32) -> io::Result<Vec<u32>> {
    let mut set = cpu_set(&[])?;
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
        != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as u32)
        // SAFETY: every index below CPU_SETSIZE lies inside the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_a_thread_and_reads_it_back() {
        std::thread::spawn(|| {
            let allowed = thread_affinity(0).unwrap();
            assert!(!allowed.is_empty());
            pin_current_thread(allowed[0]).unwrap();
            assert_eq!(thread_affinity(0).unwrap(), vec![allowed[0]]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn refuses_cpus_it_cannot_name() {
        let e = set_thread_affinity(0, &[libc::CPU_SETSIZE as u32]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
