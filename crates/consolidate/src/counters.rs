//! What the kernel counts for each thread, read from /proc: the run time
//! and the time spent runnable but waiting for a CPU (`schedstat`, in
//! nanoseconds, kept whenever the kernel has CONFIG_SCHED_INFO, which
//! distribution kernels enable), the times it was given a CPU, and the
//! times it blocked (`status`' voluntary_ctxt_switches: each is a wait for
//! something, and the wake-up that ends it is the program's progress).
//! Both files are kept open (crate::procfile).

use crate::procfile::KeptFile;
use crate::tree::Task;

/// A thread's scheduling counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Schedstat {
    pub run_ns: u64,
    pub wait_ns: u64,
    /// Times the thread was given a CPU (wake-ups and preemptions alike).
    pub slices: u64,
}

/// Bytes read of `status`: its voluntary_ctxt_switches line sits near the
/// end of about 1.5 KB on 6.x kernels; its CPU masks grow with the CPUs
/// (about 2.3 KB each for 8192), so 16 KB holds it on any machine.
const STATUS_BYTES: usize = 16 * 1024;

/// Bytes read of `schedstat`: three decimal u64s and their separators.
const SCHEDSTAT_BYTES: usize = 64;

/// One thread's counter files, opened at the first reading.
#[derive(Debug, Default)]
pub struct ThreadFiles {
    schedstat: KeptFile,
    status: KeptFile,
}

impl ThreadFiles {
    /// Files this holds open (for the caller's bound on descriptors).
    pub fn open_count(&self) -> usize {
        usize::from(self.schedstat.is_open()) + usize::from(self.status.is_open())
    }

    /// `task`'s schedstat; None if the thread is gone or the kernel keeps
    /// none. `keep`: whether the file may stay open for the next reading.
    pub fn schedstat(&mut self, task: Task, keep: bool) -> Option<Schedstat> {
        let mut buf = [0u8; SCHEDSTAT_BYTES];
        let n = self.schedstat.read(task, "schedstat", keep, &mut buf)?;
        parse_schedstat(std::str::from_utf8(&buf[..n]).ok()?)
    }

    /// How many times `task` blocked; None if it is gone.
    pub fn blocks(&mut self, task: Task, keep: bool) -> Option<u64> {
        let mut buf = vec![0u8; STATUS_BYTES];
        let n = self.status.read(task, "status", keep, &mut buf)?;
        parse_blocks(&String::from_utf8_lossy(&buf[..n]))
    }
}

fn parse_schedstat(text: &str) -> Option<Schedstat> {
    let mut n = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(Schedstat {
        run_ns: n.next()??,
        wait_ns: n.next()??,
        slices: n.next()??,
    })
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
        let mut files = ThreadFiles::default();
        let (s0, b0) = (
            files.schedstat(me, true).expect("schedstat"),
            files.blocks(me, true).expect("status"),
        );
        assert_eq!(files.open_count(), 2);
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        // Read again through the kept files, from offset 0.
        let (s1, b1) = (
            files.schedstat(me, true).unwrap(),
            files.blocks(me, true).unwrap(),
        );
        assert!(s1.run_ns > s0.run_ns, "{s0:?} {s1:?}");
        assert!(s1.slices > s0.slices, "{s0:?} {s1:?}");
        assert!(b1 > b0, "{b0} {b1}");
        let mut unkept = ThreadFiles::default();
        assert!(unkept.schedstat(me, false).is_some());
        assert_eq!(unkept.open_count(), 0);
    }

    /// A kept file names its thread, not the id: once the thread is gone
    /// it reads nothing (a new thread with the same id is another file).
    #[test]
    fn a_kept_file_reads_nothing_once_its_thread_exited() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(vsched_os::sched::gettid()).unwrap();
            let _ = go_rx.recv();
        });
        let task = Task {
            pid: std::process::id() as i32,
            tid: rx.recv().unwrap(),
        };
        let mut files = ThreadFiles::default();
        assert!(files.schedstat(task, true).is_some());
        assert!(files.blocks(task, true).is_some());
        drop(go_tx);
        worker.join().unwrap();
        // join returns when the thread cleared its tid, a moment before
        // the kernel releases it: wait for that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while files.schedstat(task, true).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "still read after exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(files.blocks(task, true), None);
    }
}
