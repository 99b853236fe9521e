//! [`Summary`]: the descriptive statistics of one sample, and its Tukey-fence [`Outliers`].

use serde::{Deserialize, Serialize};

use crate::sample::{median_in_place, quantile};
use crate::Sample;

/// Descriptive statistics of a [`Sample`]. All quantiles (including the median and the quartiles
/// behind `iqr` and the outlier fences) are type 7, see [`quantile`](crate::quantile).
///
/// ```
/// use attn_stats::Sample;
/// let summary = Sample::new(vec![1.0, 2.0, 3.0, 4.0, 100.0])?.summary();
/// assert_eq!((summary.n, summary.median, summary.iqr), (5, 3.0, 2.0));
/// assert_eq!(summary.outliers.high_severe, 1); // 100 > p75 + 3·IQR = 10
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of observations.
    pub n: usize,
    /// Smallest observation.
    pub min: f64,
    /// Largest observation.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (type-7 quantile at 0.5).
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 25th percentile (first quartile).
    pub p25: f64,
    /// 75th percentile (third quartile).
    pub p75: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Sample standard deviation, with the `n − 1` (Bessel) denominator.
    pub std: f64,
    /// Median absolute deviation from the median, unscaled (no 1.4826 factor).
    pub mad: f64,
    /// Interquartile range, `p75 − p25`.
    pub iqr: f64,
    /// Observations outside the Tukey fences; counted, never removed.
    pub outliers: Outliers,
}

/// Counts of observations outside Tukey's fences, criterion's convention: with `q1 = p25`,
/// `q3 = p75` and `iqr = q3 − q1`, an observation is
/// *low severe* below `q1 − 3·iqr`, *low mild* in `[q1 − 3·iqr, q1 − 1.5·iqr)`,
/// *high mild* in `(q3 + 1.5·iqr, q3 + 3·iqr]` and *high severe* above `q3 + 3·iqr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outliers {
    /// Below `q1 − 3·iqr`.
    pub low_severe: usize,
    /// In `[q1 − 3·iqr, q1 − 1.5·iqr)`.
    pub low_mild: usize,
    /// In `(q3 + 1.5·iqr, q3 + 3·iqr]`.
    pub high_mild: usize,
    /// Above `q3 + 3·iqr`.
    pub high_severe: usize,
}

impl Outliers {
    /// All outliers, mild and severe.
    pub fn total(&self) -> usize {
        self.low_severe + self.low_mild + self.high_mild + self.high_severe
    }

    /// Classifies `values` against the fences of the quartiles `q1` and `q3`.
    pub fn classify(values: &[f64], q1: f64, q3: f64) -> Outliers {
        let iqr = q3 - q1;
        let (low_severe, low_mild) = (q1 - 3.0 * iqr, q1 - 1.5 * iqr);
        let (high_mild, high_severe) = (q3 + 1.5 * iqr, q3 + 3.0 * iqr);
        let mut counts = Outliers::default();
        for &x in values {
            if x < low_severe {
                counts.low_severe += 1;
            } else if x < low_mild {
                counts.low_mild += 1;
            } else if x > high_severe {
                counts.high_severe += 1;
            } else if x > high_mild {
                counts.high_mild += 1;
            }
        }
        counts
    }
}

impl Sample {
    /// The descriptive statistics of this sample.
    pub fn summary(&self) -> Summary {
        let sorted = self.sorted();
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        // Two passes (mean, then squared deviations) for accuracy; `n ≥ 2` so `n − 1 > 0`.
        let variance = sorted.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
        let median = self.median();
        let mut deviations: Vec<f64> = sorted.iter().map(|x| (x - median).abs()).collect();
        let (p25, p75) = (quantile(sorted, 0.25), quantile(sorted, 0.75));
        Summary {
            n,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            median,
            p10: quantile(sorted, 0.10),
            p25,
            p75,
            p90: quantile(sorted, 0.90),
            p99: quantile(sorted, 0.99),
            std: variance.sqrt(),
            mad: median_in_place(&mut deviations),
            iqr: p75 - p25,
            outliers: Outliers::classify(sorted, p25, p75),
        }
    }
}
