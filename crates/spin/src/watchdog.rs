//! A separate process that puts demoted threads back if vsched dies.
//!
//! vsched writes a journal line to the watchdog's stdin *before* each
//! demotion and after each restoration. When the pipe closes (vsched exited,
//! crashed, or was SIGKILLed, since the kernel closes the descriptors of a
//! dead process), the watchdog restores every thread the journal still lists
//! as demoted, then exits. It runs in its own process group so a terminal's
//! Ctrl-C does not kill it before it has done that.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::process::{Child, ChildStdin, Command};
use vsched_os::sched::{self, SchedAttr};

/// The vsched side: a child process and the pipe to it.
pub struct Watchdog {
    child: Child,
    journal: ChildStdin,
}

impl Watchdog {
    /// Starts `command` (which must end up in [`serve`]) as the watchdog.
    pub fn spawn(command: Command) -> io::Result<Watchdog> {
        let (child, journal) = vsched_os::child::spawn_watchdog(command)?;
        Ok(Watchdog { child, journal })
    }

    pub fn demoting(&mut self, tgid: i32, tid: i32, original: &SchedAttr) -> io::Result<()> {
        let line = format!(
            "D {tgid} {tid} {} {} {} {} {} {} {}\n",
            original.policy,
            original.nice,
            original.priority,
            original.flags,
            original.runtime,
            original.deadline,
            original.period
        );
        // One write of less than PIPE_BUF bytes: atomic, never half a line.
        self.journal.write_all(line.as_bytes())
    }

    pub fn restored(&mut self, tid: i32) -> io::Result<()> {
        self.journal.write_all(format!("R {tid}\n").as_bytes())
    }

    /// Closes the journal and waits for the watchdog to finish.
    pub fn close(self) {
        let Watchdog { mut child, journal } = self;
        drop(journal);
        let _ = child.wait();
    }
}

/// One journal entry.
#[derive(Debug, PartialEq)]
enum Entry {
    Demoted {
        tgid: i32,
        tid: i32,
        original: SchedAttr,
    },
    Restored {
        tid: i32,
    },
}

fn parse(line: &str) -> Option<Entry> {
    let mut words = line.split_whitespace();
    match words.next()? {
        "D" => {
            let mut n = || -> Option<i64> { words.next()?.parse().ok() };
            let (tgid, tid) = (n()? as i32, n()? as i32);
            let original = SchedAttr {
                policy: n()? as u32,
                nice: n()? as i32,
                priority: n()? as u32,
                flags: n()? as u64,
                runtime: n()? as u64,
                deadline: n()? as u64,
                period: n()? as u64,
            };
            Some(Entry::Demoted {
                tgid,
                tid,
                original,
            })
        }
        "R" => Some(Entry::Restored {
            tid: words.next()?.parse().ok()?,
        }),
        _ => None,
    }
}

/// The watchdog process: follows the journal on stdin, restores on EOF.
/// Returns the number of threads it had to restore.
pub fn serve(input: impl BufRead) -> usize {
    // SAFETY: ignoring terminal signals; vsched's exit is our signal.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let mut demoted: HashMap<i32, (i32, SchedAttr)> = HashMap::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        match parse(&line) {
            Some(Entry::Demoted {
                tgid,
                tid,
                original,
            }) => {
                demoted.insert(tid, (tgid, original));
            }
            Some(Entry::Restored { tid }) => {
                demoted.remove(&tid);
            }
            None => {}
        }
    }
    restore_leftovers(&demoted)
}

fn restore_leftovers(demoted: &HashMap<i32, (i32, SchedAttr)>) -> usize {
    let mut restored = 0;
    for (&tid, (tgid, original)) in demoted {
        // The thread must still be the one we demoted: same process, and still
        // in the state we put it in (the program may have changed it since).
        if !std::path::Path::new(&format!("/proc/{tgid}/task/{tid}")).exists() {
            continue;
        }
        match sched::get(tid) {
            Ok(now) if now.policy == sched::SCHED_IDLE && sched::set(tid, original).is_ok() => {
                restored += 1;
            }
            _ => {}
        }
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_lines_round_trip() {
        let a = SchedAttr {
            policy: 1,
            nice: -5,
            priority: 3,
            flags: 1,
            runtime: 0,
            deadline: 0,
            period: 0,
        };
        assert_eq!(
            parse("D 10 11 1 -5 3 1 0 0 0"),
            Some(Entry::Demoted {
                tgid: 10,
                tid: 11,
                original: a
            })
        );
        assert_eq!(parse("R 11"), Some(Entry::Restored { tid: 11 }));
        assert_eq!(parse("D 10"), None);
        assert_eq!(parse("garbage"), None);
    }
}
