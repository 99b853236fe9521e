//! Rank correlation of paired observations: how well one ranking predicts another.
//!
//! [`average_ranks`] ranks with ties sharing the mean of their positions (SciPy's `rankdata`
//! default); [`spearman`] is Spearman's ρ with its p-value and a confidence interval; [`kendall`]
//! is Kendall's τ-b with its p-value. Both follow `scipy.stats` (`spearmanr`, `kendalltau` with
//! `method="auto"`), which the tests check them against.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::StatsError;

/// Ranks of `values` from 1, ties sharing the mean of the positions they span (SciPy's
/// `rankdata(method="average")`). NaN sorts last (callers validate first).
///
/// ```
/// use attn_stats::average_ranks;
/// assert_eq!(average_ranks(&[30.0, 10.0, 20.0, 10.0]), [4.0, 1.5, 3.0, 1.5]);
/// ```
pub fn average_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let value = values[order[start]];
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&i| values[i] == value)
                .count();
        // Positions start..end (0-based) are ranks start+1..=end: their mean.
        let mean = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = mean;
        }
        start = end;
    }
    ranks
}

/// Spearman's rank correlation of paired data ([`spearman`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spearman {
    /// ρ: the Pearson correlation of the average ranks, in `[-1, 1]`.
    pub rho: f64,
    /// Pairs.
    pub n: usize,
    /// Two-sided p-value of ρ = 0: Student's t with `n − 2` degrees of freedom on
    /// `t = ρ·√((n − 2) / (1 − ρ²))` (SciPy's `spearmanr`); 0 when |ρ| = 1.
    pub p_value: f64,
}

impl Spearman {
    /// The `confidence` interval of ρ through Fisher's z with the standard error `√(1.06 / (n − 3))`
    /// of Fieller, Hartley & Pearson (1957); `None` below 4 pairs or for a confidence outside
    /// (0, 1). A perfect ρ (±1) has the interval [ρ, ρ].
    ///
    /// ```
    /// use attn_stats::spearman;
    /// let s = spearman(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2.0, 1.0, 4.0, 3.0, 6.0, 5.0, 8.0, 7.0])?;
    /// let (lower, upper) = s.interval(0.95).unwrap();
    /// assert!(lower < s.rho && s.rho < upper && upper <= 1.0);
    /// # Ok::<(), attn_stats::StatsError>(())
    /// ```
    pub fn interval(&self, confidence: f64) -> Option<(f64, f64)> {
        if self.n < 4 || !(confidence > 0.0 && confidence < 1.0) {
            return None;
        }
        if self.rho.abs() >= 1.0 {
            return Some((self.rho, self.rho));
        }
        let z = self.rho.atanh();
        let se = (1.06 / (self.n as f64 - 3.0)).sqrt();
        let half = Normal::standard().inverse_cdf(0.5 + confidence / 2.0) * se;
        Some(((z - half).tanh(), (z + half).tanh()))
    }
}

/// Kendall's rank correlation of paired data ([`kendall`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Kendall {
    /// τ-b: (concordant − discordant pairs) / √((pairs − ties in x)(pairs − ties in y)).
    pub tau: f64,
    /// Pairs of observations.
    pub n: usize,
    /// Two-sided p-value of τ = 0.
    pub p_value: f64,
    /// Whether the p-value is exact (no ties, and n ≤ 33 or at most one discordant or concordant
    /// pair: the permutation distribution) rather than the tie-corrected normal approximation.
    pub exact: bool,
}

fn validate(x: &[f64], y: &[f64], min: usize) -> Result<(), StatsError> {
    if x.len() != y.len() {
        return Err(StatsError::Unpaired {
            x: x.len(),
            y: y.len(),
        });
    }
    if x.len() < min {
        return Err(StatsError::TooFewPairs { n: x.len(), min });
    }
    for (index, &value) in x.iter().chain(y).enumerate() {
        if !value.is_finite() {
            return Err(StatsError::NonFinite {
                index: index % x.len(),
                value,
            });
        }
    }
    for (which, values) in [("first", x), ("second", y)] {
        if values.iter().all(|v| *v == values[0]) {
            return Err(StatsError::Constant { which });
        }
    }
    Ok(())
}

/// Spearman's ρ of paired `x` and `y` (at least 3 pairs, finite, neither constant), ties by
/// average ranks: SciPy's `spearmanr(x, y)`.
///
/// ```
/// use attn_stats::spearman;
/// // Wikipedia's example: IQ against hours of TV a week; ρ = −29/165.
/// let iq = [106.0, 100.0, 86.0, 101.0, 99.0, 103.0, 97.0, 113.0, 112.0, 110.0];
/// let tv = [7.0, 27.0, 2.0, 50.0, 28.0, 29.0, 20.0, 12.0, 6.0, 17.0];
/// let s = spearman(&iq, &tv)?;
/// assert!((s.rho + 29.0 / 165.0).abs() < 1e-12);
/// assert!((s.p_value - 0.627188).abs() < 1e-6);
/// assert!(spearman(&[1.0, 2.0], &[2.0, 1.0]).is_err()); // too few pairs
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn spearman(x: &[f64], y: &[f64]) -> Result<Spearman, StatsError> {
    validate(x, y, 3)?;
    let (rx, ry) = (average_ranks(x), average_ranks(y));
    let n = x.len();
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        let (dx, dy) = (a - mean, b - mean);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    let rho = (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0);
    let dof = n as f64 - 2.0;
    let p_value = if rho.abs() >= 1.0 {
        0.0
    } else {
        let t = rho * (dof / ((1.0 + rho) * (1.0 - rho))).sqrt();
        let student =
            StudentsT::new(0.0, 1.0, dof).map_err(|_| StatsError::TooFewPairs { n, min: 3 })?;
        (2.0 * student.sf(t.abs())).min(1.0)
    };
    Ok(Spearman { rho, n, p_value })
}

/// Sizes of the tie groups (runs of equal values) of `values`, groups of one left out.
fn tie_groups(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut groups = Vec::new();
    let mut start = 0;
    while start < sorted.len() {
        let len = sorted[start..]
            .iter()
            .take_while(|&&v| v == sorted[start])
            .count();
        if len > 1 {
            groups.push(len as f64);
        }
        start += len;
    }
    groups
}

/// Kendall's τ-b of paired `x` and `y` (at least 3 pairs, finite, neither constant): SciPy's
/// `kendalltau(x, y)` (variant b, `method="auto"`). The p-value is exact from the permutation
/// distribution when there are no ties and n ≤ 33 (or at most one discordant or concordant pair),
/// else from the normal approximation with the tie-corrected variance
/// `(m(2n + 5) − Σt(t−1)(2t+5) − Σu(u−1)(2u+5)) / 18 + 2·T·U / m + Σt(t−1)(t−2)·Σu(u−1)(u−2) / (9m(n−2))`,
/// `m = n(n − 1)`, over tie groups `t` of x and `u` of y, with `T`, `U` their tied pairs.
///
/// ```
/// use attn_stats::kendall;
/// // One swapped pair out of 6: τ = (5 − 1) / 6.
/// let k = kendall(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0])?;
/// assert!((k.tau - 2.0 / 3.0).abs() < 1e-12);
/// assert!(k.exact && (k.p_value - 1.0 / 3.0).abs() < 1e-12);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn kendall(x: &[f64], y: &[f64]) -> Result<Kendall, StatsError> {
    validate(x, y, 3)?;
    let n = x.len();
    // O(n²): the rankings compared here have tens of entries.
    let (mut concordant, mut discordant) = (0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            // Pairs tied in x or in y are neither.
            if x[i] != x[j] && y[i] != y[j] {
                if (x[i] < x[j]) == (y[i] < y[j]) {
                    concordant += 1;
                } else {
                    discordant += 1;
                }
            }
        }
    }
    let (tx, ty) = (tie_groups(x), tie_groups(y));
    let pairs_tied = |groups: &[f64]| groups.iter().map(|t| t * (t - 1.0) / 2.0).sum::<f64>();
    let total = (n * (n - 1) / 2) as f64;
    let (x_ties, y_ties) = (pairs_tied(&tx), pairs_tied(&ty));
    let difference = concordant as f64 - discordant as f64;
    let tau = (difference / ((total - x_ties).sqrt() * (total - y_ties).sqrt())).clamp(-1.0, 1.0);

    let untied = tx.is_empty() && ty.is_empty();
    let fewest = concordant.min(discordant);
    let exact = untied && (n <= 33 || fewest <= 1) && n < 171;
    let p_value = if exact {
        kendall_exact_p(n, fewest)
    } else {
        let m = (n * (n - 1)) as f64;
        let nf = n as f64;
        let sum = |groups: &[f64], f: fn(f64) -> f64| groups.iter().map(|&t| f(t)).sum::<f64>();
        let v2 = |t: f64| t * (t - 1.0) * (2.0 * t + 5.0);
        let v1 = |t: f64| t * (t - 1.0) * (t - 2.0);
        let variance = (m * (2.0 * nf + 5.0) - sum(&tx, v2) - sum(&ty, v2)) / 18.0
            + 2.0 * x_ties * y_ties / m
            + sum(&tx, v1) * sum(&ty, v1) / (9.0 * m * (nf - 2.0));
        let z = difference / variance.sqrt();
        (2.0 * Normal::standard().sf(z.abs())).min(1.0)
    };
    Ok(Kendall {
        tau,
        n,
        p_value,
        exact,
    })
}

/// The exact two-sided p-value of Kendall's statistic for `n` untied pairs whose smaller count of
/// concordant or discordant pairs is `fewest`: twice the probability that a random permutation of
/// `n` has at most `fewest` inversions (capped at 1), by the recurrence of the Mahonian numbers.
fn kendall_exact_p(n: usize, fewest: u64) -> f64 {
    let c = fewest as usize;
    // counts[k]: permutations of the first j items with k inversions, for k ≤ c.
    let mut counts = vec![0.0f64; c + 1];
    counts[0] = 1.0;
    let mut permutations = 1.0f64;
    for j in 2..=n {
        // Item j adds 0..j−1 inversions: a sliding window sum of width j.
        let mut next = vec![0.0; c + 1];
        let mut window = 0.0;
        for k in 0..=c {
            window += counts[k];
            if k >= j {
                window -= counts[k - j];
            }
            next[k] = window;
        }
        counts = next;
        permutations *= j as f64;
    }
    (2.0 * counts.iter().sum::<f64>() / permutations).min(1.0)
}
