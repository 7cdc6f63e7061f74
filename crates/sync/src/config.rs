//! The runtime's tunables, read once from the environment.
//!
//! `vsched exec` measures the machine and sets these; a user preloading the
//! library by hand can set them too (`vsched exec --print-env` shows them).

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use vsched_os::exec_env::{self, spin_cache};

/// Spin budget of a waiter whose vCPU has nothing else to run: about what
/// waking an idle vCPU costs (VSCHED_SYNC_SPIN_NS, measured by `vsched exec`;
/// else what `vsched exec` measured last, from the user's cache directory).
pub static SPIN_NS: AtomicU64 = AtomicU64::new(DEFAULT_SPIN_NS);
/// How long a waiter on an oversubscribed machine keeps yielding before it
/// sleeps after all (VSCHED_SYNC_YIELD_NS).
pub static YIELD_NS: AtomicU64 = AtomicU64::new(DEFAULT_YIELD_NS);
/// vCPUs this process may run on.
pub static VCPUS: AtomicUsize = AtomicUsize::new(1);
/// Count what the runtime does (VSCHED_SYNC_STATS or VSCHED_SYNC_STATS_JSON set).
pub static STATS: AtomicBool = AtomicBool::new(false);
/// Spinlock admission (I-Spinlock), VSCHED_SYNC_ADMISSION=1. Off by
/// default: measured, its system call per acquisition cost more than the
/// preemptions it avoided (docs/benchmarks.md).
pub static ADMISSION: AtomicBool = AtomicBool::new(false);
/// Mark waiters in a running scheduler's channel, VSCHED_SYNC_CHANNEL=1.
/// Off by default: measured, it costs broadcast-heavy programs more than
/// it saves (docs/sync.md).
pub static CHANNEL: AtomicBool = AtomicBool::new(false);

/// Used only when nobody measured the machine: the wake-up latency of an
/// idle vCPU that `vsched exec` typically measures on cloud VMs.
pub const DEFAULT_SPIN_NS: u64 = 30_000;
pub const DEFAULT_YIELD_NS: u64 = exec_env::DEFAULT_YIELD_NS;

pub fn spin_ns() -> u64 {
    SPIN_NS.load(Relaxed)
}

pub fn yield_ns() -> u64 {
    YIELD_NS.load(Relaxed)
}

pub fn stats_on() -> bool {
    STATS.load(Relaxed)
}

/// Reads the environment; called from the library constructor.
pub fn load_from_env() {
    if let Some(v) = env_u64(exec_env::SPIN_NS.c_name()).or_else(cached_spin_ns) {
        SPIN_NS.store(v, Relaxed);
    }
    if let Some(v) = env_u64(exec_env::YIELD_NS.c_name()) {
        YIELD_NS.store(v, Relaxed);
    }
    if env(exec_env::STATS.c_name()).is_some() || env(exec_env::STATS_JSON.c_name()).is_some() {
        STATS.store(true, Relaxed);
    }
    if env(exec_env::ADMISSION.c_name()).is_some_and(|v| v == exec_env::ON.as_bytes()) {
        ADMISSION.store(true, Relaxed);
    }
    if env(exec_env::CHANNEL.c_name()).is_some_and(|v| v == exec_env::ON.as_bytes()) {
        CHANNEL.store(true, Relaxed);
    }
    VCPUS.store(allowed_vcpus(), Relaxed);
}

/// An environment variable's bytes, without allocating.
pub fn env(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv returns null or a NUL-terminated string that lives as
    // long as the environment is not modified (true at start-up).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a valid C string.
    Some(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
}

fn env_u64(name: &core::ffi::CStr) -> Option<u64> {
    exec_env::parse_ns(env(name)?)
}

/// The spin budget `vsched exec` measured last on this machine, for
/// programs preloaded by hand (allocates: start-up only).
fn cached_spin_ns() -> Option<u64> {
    spin_cache::read_spin_ns(&spin_cache::spin_cache_file()?)
}

fn allowed_vcpus() -> usize {
    // SAFETY: set is a valid cpu_set_t; pid 0 = this thread.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return (libc::CPU_COUNT(&set) as usize).max(1);
        }
        (libc::sysconf(libc::_SC_NPROCESSORS_ONLN) as usize).max(1)
    }
}
