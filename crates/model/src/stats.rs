//! Order statistics the probers and the benchmarks report: medians and
//! percentiles. One home, so that "median" means the same everywhere.

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
}
