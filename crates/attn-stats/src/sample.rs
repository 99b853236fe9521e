//! [`Sample`], the validated input of everything else, and the type-7 [`quantile`].

use crate::StatsError;

/// A validated set of observations: at least two, all finite.
///
/// The values are kept in input order (for resampling and reporting) and sorted (for quantiles).
///
/// ```
/// use attn_stats::Sample;
/// let sample = Sample::new(vec![3.0, 1.0, 2.0, 10.0])?;
/// assert_eq!(sample.len(), 4);
/// assert_eq!(sample.median(), 2.5);
/// assert!(Sample::new(vec![1.0]).is_err());
/// assert!(Sample::new(vec![1.0, f64::NAN]).is_err());
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    values: Vec<f64>,
    sorted: Vec<f64>,
}

impl Sample {
    /// Validates `values`: errors if there are fewer than two or any is NaN or infinite.
    pub fn new(values: Vec<f64>) -> Result<Sample, StatsError> {
        if values.len() < 2 {
            return Err(StatsError::TooFewObservations { len: values.len() });
        }
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(StatsError::NonFinite { index, value });
        }
        let mut sorted = values.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        Ok(Sample { values, sorted })
    }

    /// The observations, in input order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The observations, ascending.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// The number of observations (at least 2).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false: a sample has at least two observations. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The median (type-7 quantile at 0.5: the mean of the two middle values when `len` is even).
    pub fn median(&self) -> f64 {
        quantile(&self.sorted, 0.5)
    }

    /// The type-7 quantile at `p` (see [`quantile`]).
    pub fn quantile(&self, p: f64) -> f64 {
        quantile(&self.sorted, p)
    }
}

/// The quantile at `p` of ascending `sorted` data by linear interpolation between order statistics:
/// Hyndman & Fan's type 7, the default of numpy (`method="linear"`), R and criterion.
///
/// With `n` values the quantile sits at zero-based position `h = (n − 1)·p`, between
/// `sorted[⌊h⌋]` and `sorted[⌊h⌋ + 1]`. `p` is clamped to `[0, 1]`; empty data (or a NaN `p`) give
/// NaN. The interpolation is numpy's (it interpolates from the nearer end), so results agree with
/// `numpy.quantile` to the last bit or two.
///
/// ```
/// use attn_stats::quantile;
/// let sorted = [1.0, 2.0, 3.0, 4.0];
/// assert_eq!(quantile(&sorted, 0.5), 2.5);
/// assert_eq!(quantile(&sorted, 0.25), 1.75);
/// assert_eq!(quantile(&sorted, 1.0), 4.0);
/// ```
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() || p.is_nan() {
        return f64::NAN;
    }
    let last = sorted.len() - 1;
    let position = (last as f64) * p.clamp(0.0, 1.0);
    // `position` is in [0, last], so the cast cannot wrap; `min` guards the rounding at p = 1.
    let below = (position.floor() as usize).min(last);
    let above = (below + 1).min(last);
    lerp(sorted[below], sorted[above], position - below as f64)
}

/// `a + (b − a)·t`, computed from the nearer end as numpy does, so that `t = 1` gives `b` exactly.
pub(crate) fn lerp(a: f64, b: f64, t: f64) -> f64 {
    if t >= 0.5 {
        b - (b - a) * (1.0 - t)
    } else {
        a + (b - a) * t
    }
}

/// The type-7 median of `values`, reordering them in place: `O(n)` by `select_nth_unstable`,
/// no full sort. NaN if `values` is empty.
pub(crate) fn median_in_place(values: &mut [f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    let upper_index = n / 2;
    let (below, &mut upper, _) = values.select_nth_unstable_by(upper_index, f64::total_cmp);
    if n % 2 == 1 {
        return upper;
    }
    // Even n: the lower middle value is the largest of the partition below the upper one.
    let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lerp(lower, upper, 0.5)
}

/// Ready-made statistics for [`bootstrap`](crate::bootstrap()) and [`jackknife`](crate::jackknife):
/// each takes the observations as a scratch slice it may reorder.
pub mod statistic {
    /// The type-7 median, by `select_nth_unstable` (no full sort). NaN for no values.
    ///
    /// ```
    /// assert_eq!(attn_stats::statistic::median(&mut [5.0, 1.0, 3.0, 2.0]), 2.5);
    /// ```
    pub fn median(values: &mut [f64]) -> f64 {
        super::median_in_place(values)
    }

    /// The arithmetic mean. NaN for no values.
    ///
    /// ```
    /// assert_eq!(attn_stats::statistic::mean(&mut [1.0, 2.0, 6.0]), 3.0);
    /// ```
    pub fn mean(values: &mut [f64]) -> f64 {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_in_place_matches_the_sorted_quantile() {
        let cases: &[&[f64]] = &[
            &[1.0],
            &[2.0, 1.0],
            &[3.0, 1.0, 2.0],
            &[4.0, 4.0, 1.0, 9.0, 2.0, 2.0],
        ];
        for &case in cases {
            let mut sorted = case.to_vec();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(
                median_in_place(&mut case.to_vec()),
                quantile(&sorted, 0.5),
                "{case:?}"
            );
        }
    }

    #[test]
    fn quantile_clamps_p_and_handles_empty_data() {
        assert_eq!(quantile(&[1.0, 2.0], -3.0), 1.0);
        assert_eq!(quantile(&[1.0, 2.0], 7.0), 2.0);
        assert!(quantile(&[], 0.5).is_nan());
        assert!(quantile(&[1.0], f64::NAN).is_nan());
    }

    #[test]
    fn sample_rejects_bad_input_with_its_position() {
        assert_eq!(
            Sample::new(vec![]),
            Err(StatsError::TooFewObservations { len: 0 })
        );
        let err = Sample::new(vec![1.0, 2.0, f64::INFINITY]).unwrap_err();
        assert_eq!(
            err,
            StatsError::NonFinite {
                index: 2,
                value: f64::INFINITY
            }
        );
    }
}
