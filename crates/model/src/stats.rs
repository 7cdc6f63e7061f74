//! Order statistics the probers and the benchmarks report: medians,
//! percentiles and the median's confidence interval. One home, so that
//! "median" means the same everywhere.

/// Median of `values` (the mean of the two middle values for an even
/// count); NaN when empty. Sorts `values` in place, NaN last.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The middle element of already sorted data, the upper one of the two for
/// an even count; None when empty. Always one of the measured values, which
/// is what a latency level or a work rate should report.
pub fn upper_median<T: Copy>(sorted: &[T]) -> Option<T> {
    sorted.get(sorted.len() / 2).copied()
}

/// Nearest-rank percentile of sorted data (`q` in 0..=1); 0 when empty.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A distribution-free confidence interval for the median of the
/// population `values` were drawn from: the k-th smallest and the k-th
/// largest value, with k the largest rank whose interval still covers the
/// median with probability `level` or more (each value lies below the
/// median with probability one half, so the count below is binomial; the
/// sign test's interval). Makes no assumption about the distribution,
/// which for benchmark ratios on a drifting machine is not normal. None
/// when there are too few values for `level` (5 for 90%, 6 for 95%).
pub fn median_interval(values: &[f64], level: f64) -> Option<(f64, f64)> {
    let n = values.len();
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // P(count below the median < k) = P(Bin(n, 1/2) <= k-1); the interval
    // [x(k), x(n-k+1)] misses the median with twice that probability.
    // In logarithms, so that 0.5^n cannot underflow for large n.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0; // P(Bin(n, 1/2) <= i)
    let mut k = 0;
    for i in 0..n / 2 {
        tail += (ln_choose + ln_half_n).exp();
        if 1.0 - 2.0 * tail < level {
            break;
        }
        k = i + 1;
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (k > 0).then(|| (sorted[k - 1], sorted[n - k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn median_sorts_its_input() {
        let mut v = [5.0, -1.0, 2.0];
        median(&mut v);
        assert_eq!(v, [-1.0, 2.0, 5.0]);
    }

    #[test]
    fn upper_median_is_a_measured_value() {
        assert_eq!(upper_median(&[1, 2, 3, 4]), Some(3));
        assert_eq!(upper_median(&[7]), Some(7));
        assert_eq!(upper_median::<u64>(&[]), None);
    }

    #[test]
    fn nearest_rank_percentile() {
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 0.95), 95);
        assert_eq!(percentile(&sorted, 0.0), 1);
        assert_eq!(percentile(&sorted, 1.0), 100);
        assert_eq!(percentile(&[7], 0.95), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn median_interval_uses_the_binomial_ranks() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        // n = 20: [x(6), x(15)] covers the median with 95.9%, [x(7),
        // x(14)] only 88.5% (binomial tables), so 90% gives the former.
        assert_eq!(median_interval(&v, 0.90), Some((6.0, 15.0)));
        assert_eq!(median_interval(&v, 0.80), Some((7.0, 14.0)));
        // The input's order does not matter.
        let mut r = v.clone();
        r.reverse();
        assert_eq!(median_interval(&r, 0.90), Some((6.0, 15.0)));
    }

    #[test]
    fn median_interval_needs_enough_values() {
        // Five values: the extremes cover the median with 1 - 2/32 = 93.75%.
        assert_eq!(
            median_interval(&[3.0, 1.0, 2.0, 5.0, 4.0], 0.90),
            Some((1.0, 5.0))
        );
        assert_eq!(median_interval(&[1.0, 2.0, 3.0, 4.0], 0.90), None);
        assert_eq!(median_interval(&[], 0.90), None);
        // Hundreds of values do not underflow.
        let v: Vec<f64> = (0..2000).map(f64::from).collect();
        let (lo, hi) = median_interval(&v, 0.90).unwrap();
        assert!(lo < 1000.0 && hi > 1000.0 && hi - lo < 100.0, "{lo} {hi}");
    }
}
