//! `vsched sched -- PROGRAM`: the program the scheduler is loaded for.
//! It starts once the scheduler has the probers' first model, so that
//! its first threads are already placed by capacity and RWC (or at once,
//! with `--start-at-once` or `--no-probe`), and its exit status becomes
//! vsched's.

use crate::signals;
use anyhow::{Context, Result};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long the program waits for the first model before it starts
/// anyway: a first probe takes about 0.3 s on a cloud VM and up to a few
/// seconds in an emulated guest (the benchmark allows 20 s); a prober
/// that fails must not keep the user's program from running at all.
pub const WAIT_FOR_MODEL_AT_MOST: Duration = Duration::from_secs(10);

/// The program, not started yet, running, or ended.
pub struct Program<'a> {
    argv: &'a [String],
    wait_for_model: bool,
    /// When it began to wait (the scheduler loaded, the probers started).
    since: Instant,
    child: Option<Child>,
    started_before_model: bool,
    /// Its exit code once known (the program's, or the stop's if it
    /// never started).
    ended: Option<i32>,
}

impl<'a> Program<'a> {
    /// `argv` empty: no program. Made once the scheduler runs and the
    /// probers started: the wait for their model counts from here (the
    /// load itself took up to 13 s under emulation).
    pub fn new(argv: &'a [String], wait_for_model: bool) -> Program<'a> {
        Program {
            argv,
            wait_for_model,
            since: Instant::now(),
            child: None,
            started_before_model: false,
            ended: None,
        }
    }

    /// Whether there is a program at all.
    pub fn given(&self) -> bool {
        !self.argv.is_empty()
    }

    /// Whether it was started.
    pub fn started(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the program if it is due: the model is in, it need not
    /// wait for one, or it waited `WAIT_FOR_MODEL_AT_MOST`.
    pub fn start_if_due(&mut self, model_in: bool) -> Result<()> {
        self.start_if_due_after(model_in, self.since.elapsed())
    }

    fn start_if_due_after(&mut self, model_in: bool, waited: Duration) -> Result<()> {
        // Never after a stop was asked for: it would be stopped at once.
        if self.argv.is_empty() || self.child.is_some() || signals::stopped() {
            return Ok(());
        }
        if self.wait_for_model && !model_in {
            if waited < WAIT_FOR_MODEL_AT_MOST {
                return Ok(());
            }
            eprintln!(
                "vsched sched: no model from the probers after {} s; starting the program anyway",
                WAIT_FOR_MODEL_AT_MOST.as_secs()
            );
        }
        self.start(model_in)
    }

    fn start(&mut self, model_in: bool) -> Result<()> {
        self.started_before_model = !model_in;
        let Some((name, args)) = self.argv.split_first() else {
            return Ok(());
        };
        let child = Command::new(name)
            .args(args)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the program started before the first model (the summary
    /// says so: its first placements did not know the vCPUs).
    pub fn started_before_model(&self) -> bool {
        self.started_before_model
    }

    /// The program's exit code if it has exited, without waiting.
    pub fn exited(&mut self) -> Result<Option<i32>> {
        if self.ended.is_some() {
            return Ok(self.ended);
        }
        if let Some(c) = self.child.as_mut() {
            self.ended = c
                .try_wait()
                .context("waiting for the program")?
                .map(exit_code);
        }
        Ok(self.ended)
    }

    /// Runs the program to its end, forwarding a stop request (SIGTERM)
    /// once, and returns its exit code; a program the scheduler's end
    /// found not started yet starts now (under the kernel's default
    /// scheduler; `model_in`: whether a model came meanwhile), unless
    /// vsched was asked to stop: then the code is the shell's for that
    /// signal (128 + its number), as if the program had been stopped by
    /// it. None: no program. Called again, it returns the same.
    pub fn finish(&mut self, model_in: bool) -> Result<Option<i32>> {
        if self.argv.is_empty() {
            return Ok(None);
        }
        if let Some(code) = self.ended {
            return Ok(Some(code));
        }
        if self.child.is_none() {
            if signals::stopped() {
                eprintln!("vsched sched: stopped before the program started");
                self.ended = Some(128 + signals::last());
                return Ok(self.ended);
            }
            self.start(model_in)?;
        }
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        self.ended = Some(exit_code(wait_forwarding_stop(child)?));
        Ok(self.ended)
    }
}

fn wait_forwarding_stop(child: &mut Child) -> Result<ExitStatus> {
    let mut forwarded = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the program")? {
            return Ok(status);
        }
        if signals::stopped() && !forwarded {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The shell's convention: the exit code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_program_waits_for_the_model_then_starts_once() {
        let words = argv(&["true"]);
        let mut p = Program::new(&words, true);
        p.start_if_due_after(false, Duration::from_secs(1)).unwrap();
        assert!(p.child.is_none(), "no model yet: not started");
        p.start_if_due_after(true, Duration::from_secs(1)).unwrap();
        assert!(p.child.is_some() && !p.started_before_model());
        let pid = p.child.as_ref().unwrap().id();
        p.start_if_due_after(true, Duration::from_secs(2)).unwrap();
        assert_eq!(p.child.as_ref().unwrap().id(), pid, "started once");
        assert_eq!(p.finish(true).unwrap(), Some(0));
    }

    #[test]
    fn a_model_that_never_comes_delays_the_program_only_so_long() {
        let words = argv(&["sh", "-c", "exit 3"]);
        let mut p = Program::new(&words, true);
        p.start_if_due_after(false, WAIT_FOR_MODEL_AT_MOST).unwrap();
        assert!(p.child.is_some() && p.started_before_model());
        assert_eq!(p.finish(true).unwrap(), Some(3));
    }

    #[test]
    fn start_at_once_does_not_wait() {
        let words = argv(&["sh", "-c", "kill -9 $$"]);
        let mut p = Program::new(&words, false);
        p.start_if_due_after(false, Duration::ZERO).unwrap();
        assert!(p.child.is_some());
        assert_eq!(p.finish(true).unwrap(), Some(128 + 9));
    }

    #[test]
    fn a_program_started_at_the_end_says_whether_a_model_came() {
        let words = argv(&["true"]);
        let mut p = Program::new(&words, true);
        assert!(!p.started());
        assert_eq!(p.finish(false).unwrap(), Some(0));
        assert!(p.started() && p.started_before_model());
        assert_eq!(p.finish(false).unwrap(), Some(0), "the same again");
    }

    #[test]
    fn no_program_is_nothing_to_run() {
        let mut p = Program::new(&[], true);
        p.start_if_due_after(true, Duration::ZERO).unwrap();
        assert_eq!(p.exited().unwrap(), None);
        assert_eq!(p.finish(true).unwrap(), None);
    }
}
