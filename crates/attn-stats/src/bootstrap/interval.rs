//! Confidence intervals from bootstrap replicates: percentile and BCa, as `scipy.stats.bootstrap`
//! computes them (Efron & Tibshirani 1993, §14.3 and eq. 15.36 for several samples).
//!
//! These are the building blocks of [`bootstrap`](crate::bootstrap()) and
//! [`compare`](crate::compare()), public for callers with replicates of their own.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::quantile;

/// The percentile interval: the type-7 quantiles of `replicates` at `α` and `1 − α`, with
/// `α = (1 − confidence) / 2`. NaN for no replicates.
///
/// ```
/// use attn_stats::interval::percentile_interval;
/// let replicates: Vec<f64> = (0..=100).map(f64::from).collect();
/// assert_eq!(percentile_interval(&replicates, 0.5), (25.0, 75.0));
/// ```
pub fn percentile_interval(replicates: &[f64], confidence: f64) -> (f64, f64) {
    let alpha = (1.0 - confidence) / 2.0;
    let sorted = sorted(replicates);
    (quantile(&sorted, alpha), quantile(&sorted, 1.0 - alpha))
}

/// The BCa (bias-corrected and accelerated) interval of `replicates` around the estimate `point`,
/// given the `acceleration` (see [`acceleration`]).
///
/// The bias correction is `z₀ = Φ⁻¹(p)` where `p` is the fraction of replicates below `point`,
/// ties counting half (SciPy's `percentileofscore(kind="mean")`). The interval is the type-7
/// quantiles of the replicates at `Φ(z₀ + (z₀ ± z_α) / (1 − a·(z₀ ± z_α)))`.
///
/// One deliberate difference from SciPy: when every replicate lies on one side of `point`
/// (`p` = 0 or 1, where SciPy returns NaN) `p` is clamped to `[1/(2B), 1 − 1/(2B)]` so the interval
/// stays finite. NaN for no replicates.
///
/// ```
/// use attn_stats::interval::{bca_interval, percentile_interval};
/// let replicates: Vec<f64> = (0..=100).map(f64::from).collect();
/// // With no bias (the point is the replicates' median) and no acceleration, BCa is the
/// // percentile interval.
/// let (lower, upper) = bca_interval(&replicates, 50.0, 0.0, 0.9);
/// let (p_lower, p_upper) = percentile_interval(&replicates, 0.9);
/// assert!((lower - p_lower).abs() < 1e-9 && (upper - p_upper).abs() < 1e-9);
/// ```
pub fn bca_interval(
    replicates: &[f64],
    point: f64,
    acceleration: f64,
    confidence: f64,
) -> (f64, f64) {
    if replicates.is_empty() || !(0.0..1.0).contains(&confidence) || point.is_nan() {
        return (f64::NAN, f64::NAN);
    }
    let count = replicates.len() as f64;
    let below = replicates.iter().filter(|&&x| x < point).count() as f64;
    let at_or_below = replicates.iter().filter(|&&x| x <= point).count() as f64;
    let half_step = 1.0 / (2.0 * count);
    let fraction_below = ((below + at_or_below) / (2.0 * count)).clamp(half_step, 1.0 - half_step);

    let normal = Normal::standard();
    let z0 = normal.inverse_cdf(fraction_below);
    let z_alpha = normal.inverse_cdf((1.0 - confidence) / 2.0);
    let adjusted = |z: f64| normal.cdf(z0 + (z0 + z) / (1.0 - acceleration * (z0 + z)));
    let sorted = sorted(replicates);
    (
        quantile(&sorted, adjusted(z_alpha)),
        quantile(&sorted, adjusted(-z_alpha)),
    )
}

/// The BCa acceleration `a` from jackknife values: `jackknife[j]` holds the statistic with each
/// observation of sample `j` left out in turn (the other samples whole), as
/// [`jackknife`](crate::jackknife) computes for one sample.
///
/// With `U_ji = (n_j − 1)(θ̄_j − θ_ji)`:
/// `a = Σ_j (Σ_i U_ji³ / n_j³) / (6 · (Σ_j Σ_i U_ji² / n_j²)^{3/2})` — for one sample the classic
/// `Σ d³ / (6 (Σ d²)^{3/2})`. Zero when the jackknife values do not vary (where SciPy gives NaN).
///
/// ```
/// // Symmetric jackknife values: no skew, no acceleration.
/// assert_eq!(attn_stats::interval::acceleration(&[&[1.0, 2.0, 3.0]]), 0.0);
/// ```
pub fn acceleration(jackknife: &[&[f64]]) -> f64 {
    let mut numerator = 0.0;
    let mut denominator = 0.0;
    for values in jackknife.iter().filter(|v| !v.is_empty()) {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let (mut cubes, mut squares) = (0.0, 0.0);
        for &value in values.iter() {
            let u = (n - 1.0) * (mean - value);
            squares += u * u;
            cubes += u * u * u;
        }
        numerator += cubes / (n * n * n);
        denominator += squares / (n * n);
    }
    if denominator > 0.0 {
        numerator / (6.0 * denominator.powf(1.5))
    } else {
        0.0
    }
}

/// The standard deviation of `replicates` with the `n − 1` denominator (SciPy's
/// `standard_error`). NaN for fewer than two.
pub fn standard_error(replicates: &[f64]) -> f64 {
    let n = replicates.len() as f64;
    let mean = replicates.iter().sum::<f64>() / n;
    (replicates
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum::<f64>()
        / (n - 1.0))
        .sqrt()
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    sorted
}
