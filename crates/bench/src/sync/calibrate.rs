//! Sizing a run: how many operations make a timed run last about TARGET_S
//! on this machine, whatever the case costs per operation.

use crate::BenchError;

/// Timed runs last about this long: long enough to average over many time
/// slices (4 ms at HZ 250), short enough for 3 alternating runs of 14 cases.
pub const TARGET_S: f64 = 1.0;
/// A pilot run this long sizes the timed runs (timer and start-up noise are
/// small against it).
pub const PILOT_S: f64 = 0.1;
/// Operation counts never grow past this (a safety net against a broken timer).
pub const MAX_OPS: u64 = 1 << 32;
/// The first pilot's operations: few enough for the slowest case (the glibc
/// spin ring at 4x spins away whole time slices per hand-off).
const FIRST_PILOT_OPS: u64 = 16;
/// Pilots grow by at least this factor, so that calibration ends quickly...
const MIN_GROWTH: f64 = 2.0;
/// ...and at most this one, so that a pilot never overshoots by much.
const MAX_GROWTH: f64 = 100.0;

/// Op count that makes a run last about TARGET_S, from pilot runs that grow
/// until one lasts at least PILOT_S (slow cases need only one short pilot).
/// `run(ops)` returns the seconds `ops` operations took.
pub fn calibrate(mut run: impl FnMut(u64) -> Result<f64, BenchError>) -> Result<u64, BenchError> {
    let mut ops = FIRST_PILOT_OPS;
    loop {
        // Below a microsecond the timer says nothing: do not divide by it.
        let elapsed = run(ops)?.max(1e-6);
        if elapsed >= PILOT_S || ops >= MAX_OPS {
            return Ok(((ops as f64 * TARGET_S / elapsed) as u64).clamp(FIRST_PILOT_OPS, MAX_OPS));
        }
        let growth = (2.0 * PILOT_S / elapsed).clamp(MIN_GROWTH, MAX_GROWTH);
        ops = ((ops as f64 * growth) as u64).min(MAX_OPS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_scales_to_the_target_duration() {
        // A fake case costing 1 ms per op: pilots grow until one lasts >= PILOT_S.
        let mut pilots = vec![];
        let ops = calibrate(|ops| {
            pilots.push(ops);
            Ok(ops as f64 * 1e-3)
        })
        .unwrap();
        assert!(pilots.len() > 1);
        let want = TARGET_S / 1e-3;
        assert!((ops as f64 - want).abs() <= want * 0.01, "{ops} ops");
    }

    #[test]
    fn a_slow_case_needs_one_pilot() {
        let mut pilots = 0;
        let ops = calibrate(|ops| {
            pilots += 1;
            Ok(ops as f64 * 0.05)
        })
        .unwrap();
        assert_eq!(pilots, 1);
        // 16 ops took 0.8 s: 20 take the target second.
        assert_eq!(ops, 20);
    }

    #[test]
    fn a_broken_timer_cannot_grow_the_count_for_ever() {
        assert_eq!(calibrate(|_| Ok(0.0)).unwrap(), MAX_OPS);
    }
}
