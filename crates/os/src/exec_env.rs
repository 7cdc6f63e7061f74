//! The contract between `vsched exec` and the runtime it preloads
//! (vsched-sync's `libvsched_sync.so`): the names of the environment
//! variables that carry the settings, their defaults, the file in which
//! `vsched exec` leaves its spin-budget measurement for programs preloaded
//! by hand, where the library is found, and which programs it can be
//! preloaded into.
//!
//! Both sides use this module and nothing else to agree. The `vsched`
//! binary cannot link vsched-sync (its rlib exports pthread_* symbols that
//! would interpose in vsched itself), so the contract lives here, in a crate
//! both depend on. The names are C strings so that the runtime can read them
//! with getenv from its constructor without allocating.

pub mod environment;
pub mod library;
pub mod program;
pub mod spin_cache;

use std::ffi::CStr;

/// An environment variable of the contract: a name both sides spell from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar(&'static CStr);

impl EnvVar {
    /// The name as a C string, for getenv (no allocation).
    pub const fn c_name(self) -> &'static CStr {
        self.0
    }

    /// The name as Rust text, for setting the variable.
    pub fn name(self) -> &'static str {
        self.0
            .to_str()
            .expect("the contract's variable names are ASCII")
    }
}

/// Spin budget, ns, of a waiter on a machine that is not oversubscribed.
pub const SPIN_NS: EnvVar = EnvVar(c"VSCHED_SYNC_SPIN_NS");
/// How long, ns, a waiter on an oversubscribed machine yields before it sleeps.
pub const YIELD_NS: EnvVar = EnvVar(c"VSCHED_SYNC_YIELD_NS");
/// Statistics at exit on stderr: `1` a table, `json` JSON.
pub const STATS: EnvVar = EnvVar(c"VSCHED_SYNC_STATS");
/// Statistics at exit as JSON to this path (`%p` becomes the pid).
pub const STATS_JSON: EnvVar = EnvVar(c"VSCHED_SYNC_STATS_JSON");
/// `1` turns spinlock admission (I-Spinlock) on.
pub const ADMISSION: EnvVar = EnvVar(c"VSCHED_SYNC_ADMISSION");
/// `1` lets the runtime mark its waiters in a running `vsched sched`'s
/// channel (virtual blocking by the scheduler; off by default: measured,
/// it costs broadcast-heavy programs more than it saves, docs/sync.md).
pub const CHANNEL: EnvVar = EnvVar(c"VSCHED_SYNC_CHANNEL");
/// Where `vsched exec` finds the runtime library when `--library` is not given.
pub const LIBRARY: EnvVar = EnvVar(c"VSCHED_SYNC_LIB");
/// The dynamic loader's list of libraries to load first.
pub const LD_PRELOAD: EnvVar = EnvVar(c"LD_PRELOAD");

/// The value that switches a flag variable (`STATS`, `ADMISSION`, `CHANNEL`) on.
pub const ON: &str = "1";

/// Default of `YIELD_NS`: 2 ms. Bounded so that a thread that waits for
/// long (an idle pool worker) sleeps after all instead of staying runnable
/// (docs/sync.md); long enough to span a few of the kernel's base time
/// slices (0.75 ms under EEVDF), so the threads it yields to can run.
pub const DEFAULT_YIELD_NS: u64 = 2_000_000;

/// The runtime library's file name.
pub const LIBRARY_NAME: &str = "libvsched_sync.so";

/// A nanosecond count as the variables and the cache file carry it: plain
/// decimal digits. None for anything else, or for more than 19 digits (the
/// most that always fits a u64). Allocation-free: the runtime calls it from
/// its constructor.
pub fn parse_ns(bytes: &[u8]) -> Option<u64> {
    crate::parse_decimal_u64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_the_same_both_ways() {
        for var in [
            SPIN_NS, YIELD_NS, STATS, STATS_JSON, ADMISSION, CHANNEL, LIBRARY, LD_PRELOAD,
        ] {
            assert_eq!(var.name().as_bytes(), var.c_name().to_bytes());
        }
        assert_eq!(SPIN_NS.name(), "VSCHED_SYNC_SPIN_NS");
    }

    #[test]
    fn parses_only_plain_decimal_nanoseconds() {
        assert_eq!(parse_ns(b"30000"), Some(30_000));
        assert_eq!(
            parse_ns(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"-1",
            b"1e6",
            b" 5",
            b"12ms",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_ns(bad), None, "{bad:?}");
        }
    }
}
