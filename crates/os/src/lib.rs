//! The Linux interfaces that more than one vsched crate needs, each defined
//! once: clocks, CPU affinity, children that die with vsched, scheduling attributes, and the kernel's count
//! of runnable tasks with the rule that says when a machine is
//! oversubscribed; and `exec_env`, the contract between `vsched exec` and
//! the runtime it preloads (variable names, defaults, the spin-budget cache
//! file, where the library is and which programs it can be preloaded into).
//!
//! Apart from that contract, everything here is a thin, safe wrapper of one
//! system interface; policy (which CPUs, which class, when to act) belongs
//! to the crates that use it.
//! The crate depends only on libc and allocates nothing on the paths that
//! vsched-sync calls from inside a preloaded program's lock waits.

pub mod affinity;
pub mod channel;
pub mod child;
pub mod clock;
pub mod exec_env;
pub mod load;
pub mod sched;

/// Parses plain decimal digits (no sign, no spaces) without allocating, as
/// needed where the runtime reads files and the environment from inside a
/// preloaded program. None for empty input, any other byte, or more than
/// 19 digits (which could overflow a u64).
pub fn parse_decimal_u64(bytes: &[u8]) -> Option<u64> {
    const MAX_DIGITS: usize = 19;
    if bytes.is_empty() || bytes.len() > MAX_DIGITS || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        bytes
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')),
    )
}
