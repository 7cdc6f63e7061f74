//! A thread's file under /proc, opened once and read again from offset 0:
//! the kernel renders it anew on every read from the start, and the path
//! walk through /proc costs more than the read (in an emulated guest,
//! reading a few threads' files by path every 10 ms took 15% of a vCPU).
//! A kept file also names its thread for good: once the thread exits the
//! file reads nothing, where the path could name a thread that reused the
//! id.

use crate::tree::Task;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// /proc/PID/task/TID/NAME, open or not yet.
#[derive(Debug, Default)]
pub struct KeptFile(Option<File>);

impl KeptFile {
    pub fn is_open(&self) -> bool {
        self.0.is_some()
    }

    /// Reads /proc/PID/task/TID/`name` of `task` from offset 0 into `buf`
    /// (opening it first if it is not open; leaving it open if `keep`):
    /// the bytes read (0 from a thread that is gone, for some files), None
    /// when it cannot be read (a thread gone: the kernel answers ESRCH).
    pub fn read(&mut self, task: Task, name: &str, keep: bool, buf: &mut [u8]) -> Option<usize> {
        let file = match self.0.take() {
            Some(f) => f,
            None => File::open(format!("/proc/{}/task/{}/{name}", task.pid, task.tid)).ok()?,
        };
        let n = file.read_at(buf, 0).ok()?;
        if keep {
            self.0 = Some(file);
        }
        Some(n)
    }
}
