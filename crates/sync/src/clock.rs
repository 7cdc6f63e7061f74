//! Clocks and absolute deadlines, as the POSIX timed waits take them.

/// An absolute time on CLOCK_REALTIME or CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub clock: libc::clockid_t,
    pub at: libc::timespec,
}

/// Why a caller's deadline cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadDeadline {
    /// Unsupported clock or tv_nsec outside [0, 1e9): EINVAL.
    Invalid,
    /// Already in the past (including negative seconds): ETIMEDOUT.
    Passed,
}

pub fn clock_supported(clock: libc::clockid_t) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC
}

impl Deadline {
    /// Checks a caller's deadline the way glibc does before blocking.
    pub fn checked(clock: libc::clockid_t, at: &libc::timespec) -> Result<Deadline, BadDeadline> {
        if !clock_supported(clock) || at.tv_nsec < 0 || at.tv_nsec >= 1_000_000_000 {
            return Err(BadDeadline::Invalid);
        }
        if at.tv_sec < 0 {
            return Err(BadDeadline::Passed);
        }
        Ok(Deadline { clock, at: *at })
    }

    /// Nanoseconds until the deadline (0 once passed).
    pub fn remaining_ns(&self) -> u64 {
        let now = now(self.clock);
        let at = self.at.tv_sec as i128 * 1_000_000_000 + self.at.tv_nsec as i128;
        let now = now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128;
        (at - now).clamp(0, u64::MAX as i128) as u64
    }

    pub fn passed(&self) -> bool {
        let now = now(self.clock);
        (now.tv_sec, now.tv_nsec) >= (self.at.tv_sec, self.at.tv_nsec)
    }
}

pub fn now(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the vDSO serves this without a syscall.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    ts
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let ts = now(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
