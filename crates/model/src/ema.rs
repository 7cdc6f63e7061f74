//! Exponential moving average with a half-life in seconds.
//!
//! A half-life (rather than a fixed per-sample weight) keeps the smoothing
//! the same whatever the sampling interval: after `half_life_s` seconds an
//! old value carries half the weight it had.
//!
//! Optionally it restarts at a new level ([`Ema::with_step`]): smoothing
//! that hides noise also hides a change of regime (a cap set on the host, a
//! neighbour arriving) for several half-lives, while the scheduler should
//! follow it within a probe interval or two.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ema {
    half_life_s: f64,
    value: Option<f64>,
    /// Time of the last sample (for `update_at`).
    last_s: Option<f64>,
    /// Restart threshold (see `with_step`); None: never.
    #[serde(default)]
    step: Option<f64>,
    /// The previous sample, if it was more than `step` away.
    #[serde(default)]
    away: Option<f64>,
    /// For a share of time in [0, 1] (`with_share_step`): a sample is also
    /// far when the rest of the time (1 - share) differs from the value's
    /// by more than this factor.
    #[serde(default)]
    rest_ratio: Option<f64>,
    /// The last sample restarted the value at a new level.
    #[serde(default)]
    jumped: bool,
}

impl Ema {
    /// `half_life_s <= 0` means no smoothing: the latest sample wins.
    pub fn new(half_life_s: f64) -> Self {
        Ema {
            half_life_s,
            value: None,
            last_s: None,
            step: None,
            away: None,
            rest_ratio: None,
            jumped: false,
        }
    }

    /// An EMA that jumps to a new level: when two samples in a row are
    /// more than `step` away from the value, on the same side, the value
    /// becomes the newer sample. One outlier still moves it only by its
    /// weight; a lasting change is followed after two samples.
    pub fn with_step(half_life_s: f64, step: f64) -> Self {
        Ema {
            step: Some(step),
            ..Ema::new(half_life_s)
        }
    }

    /// [`Ema::with_step`] for a share of time (0..=1) whose rest matters
    /// too: a sample is also far when `1 - sample` and `1 - value` differ
    /// by more than `rest_ratio` times. The hypervisor's share of a vCPU
    /// going from 0.67 to 0.90 is a step of 0.23 only, but the vCPU's
    /// available share falls from 33% to 10%, a third: the change from a
    /// weak vCPU to a straggler that RWC should follow at once.
    pub fn with_share_step(half_life_s: f64, step: f64, rest_ratio: f64) -> Self {
        Ema {
            rest_ratio: Some(rest_ratio),
            ..Ema::with_step(half_life_s, step)
        }
    }

    /// The rest (1 - share) below which `with_share_step`'s ratio does not
    /// count: a vCPU available 2-9% of the time scatters by 4x between
    /// readings (a 10% cap in the lab), and every far reading costs the
    /// probers a heavy window; below a tenth the vCPU is a straggler
    /// whichever way it reads.
    pub const RATIO_MIN_REST: f64 = 0.1;

    /// Whether `sample` is more than a step away from `value`.
    fn far(&self, value: f64, sample: f64) -> bool {
        let beyond_step = self.step.is_some_and(|step| (sample - value).abs() > step);
        let beyond_ratio = self.rest_ratio.is_some_and(|ratio| {
            let (a, b) = ((1.0 - value).max(0.0), (1.0 - sample).max(0.0));
            let (low, high) = if a < b { (a, b) } else { (b, a) };
            high >= Self::RATIO_MIN_REST && high > low * ratio
        });
        beyond_step || beyond_ratio
    }

    /// Weight the new sample gets after `dt_s` seconds.
    pub fn alpha(half_life_s: f64, dt_s: f64) -> f64 {
        if half_life_s <= 0.0 || dt_s <= 0.0 {
            return 1.0;
        }
        1.0 - 0.5f64.powf(dt_s / half_life_s)
    }

    /// Folds in a sample taken `dt_s` seconds after the previous one.
    pub fn update(&mut self, sample: f64, dt_s: f64) -> f64 {
        self.jumped = false;
        let next = match self.value {
            None => sample,
            Some(prev) => {
                let far = self.far(prev, sample);
                let same_side = self
                    .away
                    .is_some_and(|a| (a - prev).signum() == (sample - prev).signum());
                self.away = far.then_some(sample);
                if far && same_side {
                    self.away = None;
                    self.jumped = true;
                    sample
                } else {
                    prev + Self::alpha(self.half_life_s, dt_s) * (sample - prev)
                }
            }
        };
        self.value = Some(next);
        next
    }

    /// Folds in a sample taken at `now_s` (any fixed origin): the weight
    /// follows the time since this EMA's own previous sample, so quantities
    /// sampled at different rates each decay correctly.
    pub fn update_at(&mut self, sample: f64, now_s: f64) -> f64 {
        let dt = self.last_s.map_or(0.0, |last| now_s - last);
        self.last_s = Some(now_s);
        self.update(sample, dt)
    }

    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Whether the last sample was more than the step away from the value:
    /// a change of level the next sample may confirm (`with_step` only).
    pub fn step_pending(&self) -> bool {
        self.away.is_some()
    }

    /// Whether the last sample confirmed a step: the value restarted at it.
    pub fn jumped(&self) -> bool {
        self.jumped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_step_is_followed_after_two_samples_and_an_outlier_is_not() {
        let mut e = Ema::with_step(3.0, 0.25);
        e.update(0.0, 0.0);
        // One outlier: smoothed as usual, and forgotten.
        let v = e.update(0.9, 1.0);
        assert!((v - 0.9 * Ema::alpha(3.0, 1.0)).abs() < 1e-9, "{v}");
        let v = e.update(0.0, 1.0);
        assert!(v < 0.2, "{v}");
        // A lasting change: at its level on its second sample.
        e.update(0.9, 1.0);
        assert_eq!(e.update(0.9, 1.0), 0.9);
        // Each far sample leaves a step pending until one confirms it.
        assert!(!e.step_pending());
        e.update(0.1, 1.0);
        assert!(e.step_pending() && !e.jumped());
        e.update(0.1, 1.0);
        assert!(!e.step_pending() && e.jumped());
        e.update(0.1, 1.0);
        assert!(!e.jumped());
        // Two far samples on opposite sides are not a step.
        let mut e = Ema::with_step(3.0, 0.25);
        e.update(0.5, 0.0);
        e.update(1.0, 1.0);
        let v = e.update(0.0, 1.0);
        assert!(v > 0.1 && v < 0.9, "{v}");
        // Small changes never jump.
        let mut e = Ema::with_step(3.0, 0.25);
        e.update(0.0, 0.0);
        e.update(0.2, 1.0);
        assert!(e.update(0.2, 1.0) < 0.2);
    }

    /// Regression (adaptability benchmark): a vCPU going from a third
    /// available to a tenth moved the hypervisor's share by 0.23 only,
    /// under the step, and took 5-8 s of smoothing to read as a straggler.
    #[test]
    fn a_share_whose_rest_falls_by_more_than_the_ratio_jumps() {
        let mut e = Ema::with_share_step(3.0, 0.25, 2.0);
        e.update(0.67, 0.0);
        e.update(0.90, 1.0);
        assert!(e.step_pending());
        assert_eq!(e.update(0.91, 1.0), 0.91);
        // Back up again: 9% to 33% available.
        e.update(0.67, 1.0);
        assert_eq!(e.update(0.67, 1.0), 0.67);
        // Noise near a low share is not a step: 8% against 5% available,
        // nor 9% against 2% (under a tenth).
        let mut e = Ema::with_share_step(3.0, 0.25, 2.0);
        e.update(0.95, 0.0);
        e.update(0.92, 1.0);
        assert!(!e.step_pending());
        assert!(e.update(0.92, 1.0) > 0.92);
        let mut e = Ema::with_share_step(3.0, 0.25, 2.0);
        e.update(0.98, 0.0);
        e.update(0.91, 1.0);
        assert!(!e.step_pending());
        // The plain step rule does not see the first change.
        let mut e = Ema::with_step(3.0, 0.25);
        e.update(0.67, 0.0);
        e.update(0.90, 1.0);
        assert!(e.update(0.90, 1.0) < 0.85);
    }

    #[test]
    fn first_sample_is_taken_as_is() {
        let mut e = Ema::new(2.0);
        assert_eq!(e.value(), None);
        assert_eq!(e.update(10.0, 1.0), 10.0);
    }

    #[test]
    fn half_life_halves_the_old_weight() {
        let mut e = Ema::new(2.0);
        e.update(0.0, 0.0);
        // After exactly one half-life the value is halfway to the step.
        let v = e.update(100.0, 2.0);
        assert!((v - 50.0).abs() < 1e-9, "{v}");
        // Two one-second steps equal one two-second step.
        let mut a = Ema::new(2.0);
        a.update(0.0, 0.0);
        a.update(100.0, 1.0);
        let v2 = a.update(100.0, 1.0);
        assert!((v2 - 50.0).abs() < 1e-9, "{v2}");
    }

    #[test]
    fn update_at_uses_time_since_own_last_sample() {
        let mut e = Ema::new(2.0);
        e.update_at(0.0, 10.0);
        assert!((e.update_at(100.0, 12.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn zero_half_life_disables_smoothing() {
        let mut e = Ema::new(0.0);
        e.update(3.0, 1.0);
        assert_eq!(e.update(7.0, 1.0), 7.0);
    }

    #[test]
    fn converges_to_a_constant_input() {
        let mut e = Ema::new(1.0);
        e.update(0.0, 0.0);
        for _ in 0..50 {
            e.update(1024.0, 0.5);
        }
        assert!((e.value().unwrap() - 1024.0).abs() < 1e-3);
    }
}
