//! What the daemon itself costs the VM it serves, read from the kernel at
//! every scrape: its CPU time (all threads, those that ended included),
//! its resident memory, and the CPU time of each of its long-lived threads
//! by name, so that a reader can tell the probers' share from the
//! consolidation's (`consolidate-N`, one per `--consolidate-cgroups`
//! cgroup) and the metrics server's. A soak reads the same series to see
//! that nothing grows.

use std::path::Path;

/// The daemon's cost so far.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnCost {
    /// User plus system CPU time of the whole process, in seconds.
    pub cpu_s: f64,
    /// Resident memory (RSS) in bytes; None if /proc/self/statm is unreadable.
    pub resident_bytes: Option<u64>,
    /// (thread name, CPU seconds) of every live thread, summed by name
    /// (the probers' short-lived per-vCPU window threads count in `cpu_s`
    /// only once they end).
    pub threads: Vec<(String, f64)>,
}

/// Reads the calling process's cost.
pub fn read() -> OwnCost {
    OwnCost {
        cpu_s: vsched_os::clock::process_cpu_ns() as f64 / 1e9,
        resident_bytes: std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|t| resident_pages(&t))
            .map(|pages| pages * page_size()),
        threads: threads_cpu(Path::new("/proc/self/task")),
    }
}

/// The resident page count: statm's second field ("size resident shared
/// text lib data dt", in pages).
fn resident_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant and has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // 4 KiB if the kernel will not say: x86-64's page, which it always is here.
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// Every thread under `tasks` (a /proc/PID/task directory): its name
/// (`comm`) and CPU time (`schedstat`'s first field, in ns: exact, where
/// `stat`'s utime and stime count 10 ms ticks), summed by name and sorted.
/// A thread that ends while being read is left out.
fn threads_cpu(tasks: &Path) -> Vec<(String, f64)> {
    let mut by_name = std::collections::BTreeMap::<String, f64>::new();
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let name = std::fs::read_to_string(dir.join("comm"));
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok());
        if let (Ok(name), Some(ns)) = (name, ns) {
            *by_name.entry(name.trim().to_string()).or_default() += ns as f64 / 1e9;
        }
    }
    by_name.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_gives_the_resident_pages() {
        assert_eq!(resident_pages("2386 518 448 182 0 190 0\n"), Some(518));
        assert_eq!(resident_pages("2386"), None);
        assert_eq!(resident_pages(""), None);
    }

    /// A thread that burns CPU under a name of its own shows up by that
    /// name, with at least the CPU it measured itself using; the process
    /// total covers it.
    #[test]
    fn a_busy_named_thread_is_listed_with_its_cpu() {
        let used = std::thread::Builder::new()
            .name("own-cost-test".into())
            .spawn(|| {
                let start = vsched_os::clock::thread_cpu_ns();
                while vsched_os::clock::thread_cpu_ns() - start < 30_000_000 {
                    std::hint::spin_loop();
                }
                let cost = read();
                let mine = cost
                    .threads
                    .iter()
                    .find(|(n, _)| n == "own-cost-test")
                    .map(|&(_, s)| s);
                (vsched_os::clock::thread_cpu_ns() as f64 / 1e9, mine, cost)
            })
            .unwrap()
            .join()
            .unwrap();
        let (own_s, listed_s, cost) = used;
        let listed_s = listed_s.expect("the thread is listed by its name");
        // schedstat and the thread's CPU clock are the same account, read
        // a moment apart: the later read is not smaller.
        assert!(listed_s >= 0.03 && listed_s <= own_s, "{listed_s} {own_s}");
        assert!(cost.cpu_s >= listed_s, "{cost:?}");
        assert!(cost.resident_bytes.is_some_and(|b| b > 0), "{cost:?}");
    }

    #[test]
    fn an_unreadable_task_directory_lists_no_threads() {
        assert!(threads_cpu(Path::new("/nonexistent/task")).is_empty());
    }
}
