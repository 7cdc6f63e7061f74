//! A second process that gives the program's threads their affinity back
//! if vsched dies while the program runs (SIGKILL, a crash).
//!
//! vsched writes a journal line to the watchdog's standard input before it
//! first places a thread (and the first time it places one of a process),
//! and when it lets one go. When the pipe closes (vsched exited, however:
//! the kernel closes a dead process's descriptors), the watchdog gives
//! every thread the journal still lists, and that still has a set within
//! the start mask, the start mask; then it sweeps the journal's processes
//! for threads created since vsched last looked, which inherited a
//! narrowed set; then it exits. It runs in its own process group, so a
//! terminal's Ctrl-C does not end it before it has done so.

use crate::tree::Task;
use std::collections::HashSet;
use std::io::{self, BufRead, Write};
use std::process::{Child, ChildStdin, Command};
use vsched_model::cpulist::{format_cpu_list, parse_cpu_list};
use vsched_os::affinity;

/// vsched's end: the watchdog process and the pipe to it.
pub struct Journal {
    child: Child,
    pipe: ChildStdin,
}

impl Journal {
    /// Starts `command` (which must end up in [`serve`]) as the watchdog.
    pub fn spawn(command: Command) -> io::Result<Journal> {
        let (child, pipe) = vsched_os::child::spawn_watchdog(command)?;
        Ok(Journal { child, pipe })
    }

    /// The mask threads get back.
    pub fn start(&mut self, start: &[u32]) {
        let mut sorted = start.to_vec();
        sorted.sort_unstable();
        self.write(&format!("S {}\n", format_cpu_list(&sorted)));
    }

    /// A process whose threads vsched places: swept at the end.
    pub fn process(&mut self, pid: i32) {
        self.write(&format!("P {pid}\n"));
    }

    pub fn taken(&mut self, task: Task) {
        self.write(&format!("T {} {}\n", task.pid, task.tid));
    }

    pub fn released(&mut self, task: Task) {
        self.write(&format!("R {} {}\n", task.pid, task.tid));
    }

    /// Each line is one write of less than PIPE_BUF bytes: atomic, never
    /// half a line. A watchdog that died cannot be helped here; the
    /// journal goes on for nothing.
    fn write(&mut self, line: &str) {
        let _ = self.pipe.write_all(line.as_bytes());
    }

    /// Closes the journal (nothing left to put back) and waits for the
    /// watchdog to finish.
    pub fn close(self) {
        let Journal { mut child, pipe } = self;
        drop(pipe);
        let _ = child.wait();
    }
}

/// Whether `task`'s thread id still names a thread of its process.
pub fn still_in_its_process(task: Task) -> bool {
    std::path::Path::new(&format!("/proc/{}/task/{}", task.pid, task.tid)).exists()
}

/// The watchdog process: follows the journal on `input` and, at its end,
/// gives the threads still listed the start mask. Returns how many it
/// gave back.
pub fn serve(input: impl BufRead) -> usize {
    // SAFETY: setting dispositions to SIG_IGN runs no code in a handler;
    // vsched's exit, not a terminal's signal, is what ends this process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    follow(input)
}

/// [`serve`]'s work, apart from its signals. A thread listed whose mask is
/// no longer within the start mask was placed elsewhere by someone else,
/// and is left so; one the program placed inside it since vsched's last
/// check cannot be told from vsched's and gets the start mask too.
fn follow(input: impl BufRead) -> usize {
    let mut start = Vec::new();
    let mut taken = HashSet::new();
    let mut processes = HashSet::new();
    // Threads let go: given back, or left to the program.
    let mut released = HashSet::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        let kind = words.next();
        if kind == Some("S") {
            start = words
                .next()
                .and_then(|l| parse_cpu_list(l).ok())
                .unwrap_or_default();
            continue;
        }
        let mut n = || words.next()?.parse::<i32>().ok();
        let Some(pid) = n() else {
            continue;
        };
        if kind == Some("P") {
            processes.insert(pid);
            continue;
        }
        let Some(tid) = n() else {
            continue;
        };
        let task = Task { pid, tid };
        match kind {
            Some("T") => {
                released.remove(&tid);
                taken.insert(task);
            }
            Some("R") => {
                taken.remove(&task);
                released.insert(tid);
            }
            _ => {}
        }
    }
    if start.is_empty() {
        return 0;
    }
    let within_start = |mask: &[u32]| mask.iter().all(|c| start.contains(c));
    let listed = taken
        .into_iter()
        .filter(|&t| still_in_its_process(t))
        .filter(|t| affinity::thread_affinity(t.tid).is_ok_and(|m| within_start(&m)))
        .filter(|t| affinity::set_thread_affinity(t.tid, &start).is_ok())
        .count();
    listed + widen_narrowed(&start, &processes, &released).widened
}

/// What a sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub widened: usize,
    pub failed: usize,
}

/// Gives every thread of `processes` whose affinity is a narrowed set of
/// vsched's (the first k vCPUs of `start`, sorted, k below all of them)
/// the whole of `start`, except the threads in `left` (let go to the
/// program, whose own mask may look like one).
pub fn widen_narrowed(start: &[u32], processes: &HashSet<i32>, left: &HashSet<i32>) -> Swept {
    let mut swept = Swept::default();
    let narrowed = |mask: &[u32]| mask.len() < start.len() && start.starts_with(mask);
    for &pid in processes {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for entry in dir.flatten() {
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if left.contains(&tid)
                || !affinity::thread_affinity(tid).is_ok_and(|m| !m.is_empty() && narrowed(&m))
            {
                continue;
            }
            match affinity::set_thread_affinity(tid, start) {
                Ok(()) => swept.widened += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(_) => swept.failed += 1,
            }
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_end_gives_a_narrowed_thread_the_start_mask_back() {
        let cpus = affinity::thread_affinity(0).unwrap();
        if cpus.len() < 2 {
            eprintln!("skipped: needs 2 CPUs");
            return;
        }
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let narrowed = cpus[..1].to_vec();
        let n = narrowed.clone();
        let worker = std::thread::spawn(move || {
            affinity::set_thread_affinity(0, &n).unwrap();
            tid_tx.send(vsched_os::sched::gettid()).unwrap();
            let _ = done_rx.recv();
            affinity::thread_affinity(0).unwrap()
        });
        let tid = tid_rx.recv().unwrap();
        let pid = std::process::id() as i32;
        let journal = format!(
            "S {}\nT {pid} {tid}\nT {pid} 999999999\nT {pid} {pid}\nR {pid} {pid}\n",
            format_cpu_list(&cpus)
        );
        // The worker is given back; the released thread (this one) and
        // the one that does not exist are not touched. (No P line: a sweep
        // of this process would also meet other tests' threads; the sweep
        // is tested in placement.rs.)
        assert_eq!(follow(io::Cursor::new(journal)), 1);
        drop(done_tx);
        assert_eq!(worker.join().unwrap(), cpus);
    }
}
