//! Baseline against vsched, side by side. The machine's speed drifts by up
//! to 2x within minutes (other tenants), so the two are run alternately,
//! and medians of the alternating runs are compared.

use crate::{BenchError, Interrupt};

/// Which way a program runs.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum Variant {
    /// As it is: glibc's synchronisation, no detector.
    Baseline,
    /// Under vsched (`vsched exec`, `vsched run --spin-detect`).
    Vsched,
}

/// The results of `runs` alternating runs, baseline first in each pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired<T> {
    pub baseline: Vec<T>,
    pub vsched: Vec<T>,
}

/// Runs `run(Baseline)` then `run(Vsched)`, `runs` times, checking
/// `interrupt` before each pair.
pub fn alternate<T>(
    runs: usize,
    interrupt: Interrupt,
    mut run: impl FnMut(Variant) -> Result<T, BenchError>,
) -> Result<Paired<T>, BenchError> {
    let mut paired = Paired {
        baseline: Vec::with_capacity(runs),
        vsched: Vec::with_capacity(runs),
    };
    for _ in 0..runs {
        interrupt.check()?;
        paired.baseline.push(run(Variant::Baseline)?);
        paired.vsched.push(run(Variant::Vsched)?);
    }
    Ok(paired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn alternates_baseline_first() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let mut order = vec![];
        let paired = alternate(2, Interrupt::new(&FLAG), |v| {
            order.push(v);
            Ok(order.len())
        })
        .unwrap();
        use Variant::*;
        assert_eq!(order, [Baseline, Vsched, Baseline, Vsched]);
        assert_eq!(paired.baseline, [1, 3]);
        assert_eq!(paired.vsched, [2, 4]);
    }

    #[test]
    fn stops_when_interrupted() {
        static FLAG: AtomicBool = AtomicBool::new(true);
        let r = alternate(3, Interrupt::new(&FLAG), |_| Ok(()));
        assert!(matches!(r, Err(BenchError::Interrupted)));
    }
}
