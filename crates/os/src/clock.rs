//! Clock reads in nanoseconds. All are served by the vDSO on x86-64 with a
//! TSC clocksource: no system call.

/// Reads `clock` in nanoseconds. Inline across crates: the probers call
/// it between every two iterations of their spin loop, where an extra call
/// is part of what they measure.
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; an invalid clock id only
    // makes the call fail (leaving zero), it cannot write elsewhere.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC: the clock perf samples, the probers and tests share.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread, as the kernel accounts it.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (all threads, living and ended).
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Sleeps until CLOCK_MONOTONIC reads `t_ns` (returns at once if it has).
/// Absolute, so that a periodic loop does not drift by its own run time.
pub fn sleep_until_monotonic_ns(t_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (t_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (t_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null
    // with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance() {
        let a = monotonic_ns();
        sleep_until_monotonic_ns(a + 1_000_000);
        assert!(monotonic_ns() >= a + 1_000_000);
        let t = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() == t {
            x = std::hint::black_box(x + 1);
        }
        assert!(process_cpu_ns() >= thread_cpu_ns());
    }
}
