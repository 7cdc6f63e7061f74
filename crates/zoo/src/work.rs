//! Busy work of a chosen length (never a spin), and the pseudo-random
//! numbers the programs draw their timings and data from.

use std::time::Instant;

/// Busy work of a given length, as a loop that makes progress (never a spin).
pub struct Work {
    iters_per_us: f64,
}

impl Work {
    /// Times a run of the work loop to know how many iterations a
    /// microsecond takes on this machine now.
    pub fn calibrate() -> Work {
        // About a millisecond of work: long enough to time, short enough
        // not to matter at start-up.
        let n = 2_000_000u64;
        let t = Instant::now();
        black_box_work(n);
        let us = t.elapsed().as_secs_f64() * 1e6;
        Work {
            iters_per_us: n as f64 / us.max(1.0),
        }
    }
    /// About `us` microseconds of work.
    pub fn run(&self, us: f64) -> u64 {
        black_box_work((self.iters_per_us * us) as u64)
    }
}

/// `iters` steps of a linear congruential generator (Knuth's MMIX
/// multiplier): every step moves a register, so samples never repeat.
#[inline(never)]
fn black_box_work(iters: u64) -> u64 {
    let mut x = 0x1234_5678u64;
    for i in 0..iters {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// Marsaglia's xorshift64 (shifts 13, 7, 17): cheap, deterministic
/// pseudo-random numbers for timings and data. The seed must not be zero.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number between `lo` and `hi`, in 10,000 steps (fine enough for
    /// the microsecond timings it draws).
    pub(crate) fn between(&mut self, lo: f64, hi: f64) -> f64 {
        const STEPS: u64 = 10_000;
        lo + (hi - lo) * (self.next() % STEPS) as f64 / STEPS as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_stays_in_range() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let first: Vec<u64> = (0..4).map(|_| a.next()).collect();
        assert_eq!(first, (0..4).map(|_| b.next()).collect::<Vec<_>>());
        assert!(first.iter().all(|&x| x != 0));
        for _ in 0..1000 {
            let x = a.between(500.0, 2000.0);
            assert!((500.0..2000.0).contains(&x), "{x}");
        }
    }

    #[test]
    fn more_work_takes_more_iterations() {
        let w = Work::calibrate();
        assert!(w.iters_per_us > 0.0);
        // The result depends on the length, so it is really computed.
        assert_ne!(w.run(1.0), w.run(2.0));
    }
}
