//! What the kernel counts for each thread, read from /proc: the run time
//! and the time spent runnable but waiting for a CPU (`schedstat`, in
//! nanoseconds, kept whenever the kernel has CONFIG_SCHED_INFO, which
//! distribution kernels enable), the times it was given a CPU, and the
//! times it blocked (`status`' voluntary_ctxt_switches: each is a wait for
//! something, and the wake-up that ends it is the program's progress).

use crate::tree::Task;

/// A thread's scheduling counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Schedstat {
    pub run_ns: u64,
    pub wait_ns: u64,
    /// Times the thread was given a CPU (wake-ups and preemptions alike).
    pub slices: u64,
}

/// `task`'s schedstat; None if the thread is gone or the kernel keeps none.
pub fn schedstat(task: Task) -> Option<Schedstat> {
    let text =
        std::fs::read_to_string(format!("/proc/{}/task/{}/schedstat", task.pid, task.tid)).ok()?;
    parse_schedstat(&text)
}

fn parse_schedstat(text: &str) -> Option<Schedstat> {
    let mut n = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(Schedstat {
        run_ns: n.next()??,
        wait_ns: n.next()??,
        slices: n.next()??,
    })
}

/// How many times `task` blocked; None if it is gone.
pub fn blocks(task: Task) -> Option<u64> {
    let text =
        std::fs::read_to_string(format!("/proc/{}/task/{}/status", task.pid, task.tid)).ok()?;
    parse_blocks(&text)
}

fn parse_blocks(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_formats() {
        assert_eq!(
            parse_schedstat("1234 56 7\n"),
            Some(Schedstat {
                run_ns: 1234,
                wait_ns: 56,
                slices: 7
            })
        );
        assert_eq!(parse_schedstat("1234 56\n"), None);
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_blocks(status), Some(42));
        assert_eq!(parse_blocks("Name:\tx\n"), None);
    }

    #[test]
    fn this_thread_counters_grow_as_it_runs_and_blocks() {
        let me = Task {
            pid: std::process::id() as i32,
            tid: vsched_os::sched::gettid(),
        };
        let (s0, b0) = (
            schedstat(me).expect("schedstat"),
            blocks(me).expect("status"),
        );
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (s1, b1) = (schedstat(me).unwrap(), blocks(me).unwrap());
        assert!(s1.run_ns > s0.run_ns, "{s0:?} {s1:?}");
        assert!(s1.slices > s0.slices, "{s0:?} {s1:?}");
        assert!(b1 > b0, "{b0} {b1}");
    }
}
