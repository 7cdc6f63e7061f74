//! What every benchmark needs from its caller.

use crate::BenchError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// The caller's stop request (its Ctrl-C/SIGTERM flag), checked between runs.
#[derive(Debug, Clone, Copy)]
pub struct Interrupt(&'static AtomicBool);

impl Interrupt {
    pub fn new(flag: &'static AtomicBool) -> Interrupt {
        Interrupt(flag)
    }

    /// Err(Interrupted) once the flag is set.
    pub fn check(self) -> Result<(), BenchError> {
        if self.0.load(Ordering::SeqCst) {
            return Err(BenchError::Interrupted);
        }
        Ok(())
    }
}

/// The machine and the tools a benchmark runs with.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The `vsched` binary: programs run under its `exec` and
    /// `run --spin-detect`, and the zoo through it.
    pub vsched: PathBuf,
    /// vCPUs this process may use: 1x oversubscription is one thread each.
    pub vcpus: usize,
    pub interrupt: Interrupt,
}

impl Harness {
    /// Threads for `factor` x oversubscription; at least 2, so that
    /// something waits for something even on one vCPU.
    pub fn threads(&self, factor: usize) -> usize {
        (self.vcpus * factor).max(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_is_seen_once_set() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let interrupt = Interrupt::new(&FLAG);
        assert!(interrupt.check().is_ok());
        FLAG.store(true, Ordering::SeqCst);
        assert!(matches!(interrupt.check(), Err(BenchError::Interrupted)));
    }

    #[test]
    fn oversubscription_counts_threads_per_vcpu() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let h = |vcpus| Harness {
            vsched: PathBuf::new(),
            vcpus,
            interrupt: Interrupt::new(&FLAG),
        };
        assert_eq!(h(2).threads(4), 8);
        assert_eq!(h(1).threads(1), 2);
    }
}
