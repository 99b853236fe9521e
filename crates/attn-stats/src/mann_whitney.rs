//! The Mann–Whitney U test (Wilcoxon rank-sum), two-sided, by the normal approximation.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::Sample;

/// The result of [`mann_whitney`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MannWhitney {
    /// `U` of the baseline: the number of (baseline, candidate) pairs with the baseline value
    /// larger, ties counting one half. Ranges over `0..=n_b·n_c`; `n_b·n_c / 2` means no shift.
    pub u: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// The two-sided Mann–Whitney U test of `baseline` against `candidate`: SciPy's
/// `mannwhitneyu(baseline, candidate, method="asymptotic", use_continuity=True)`.
///
/// Ranks are averaged over ties; `U` of the baseline is its rank sum minus `n_b(n_b + 1)/2`. The
/// p-value is `2·P(Z > (max(U, n_b·n_c − U) − n_b·n_c/2 − ½) / σ)`, capped at 1, with the
/// tie-corrected `σ² = n_b·n_c/12 · ((N + 1) − Σ(t³ − t) / (N(N − 1)))` over tie groups of size
/// `t`. When every value is tied (`σ = 0`) the p-value is 1.
///
/// ```
/// use attn_stats::{mann_whitney, Sample};
/// let slow = Sample::new(vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0])?;
/// let fast = Sample::new(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let test = mann_whitney(&slow, &fast);
/// assert_eq!(test.u, 36.0); // every baseline value is larger
/// assert!(test.p < 0.01);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn mann_whitney(baseline: &Sample, candidate: &Sample) -> MannWhitney {
    let (b, c) = (baseline.sorted(), candidate.sorted());
    let (n_b, n_c) = (b.len() as f64, c.len() as f64);
    let total = n_b + n_c;

    // Merge the two sorted samples, walking one tie group (all copies of one value) at a time.
    let (mut i, mut j) = (0, 0);
    let mut next_rank = 1.0;
    let mut baseline_rank_sum = 0.0;
    let mut tie_term = 0.0;
    while i < b.len() || j < c.len() {
        let value = match (b.get(i), c.get(j)) {
            (Some(&x), Some(&y)) => x.min(y),
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (None, None) => break,
        };
        let in_baseline = b[i..].iter().take_while(|&&x| x == value).count();
        let in_candidate = c[j..].iter().take_while(|&&y| y == value).count();
        let size = (in_baseline + in_candidate) as f64;
        let mean_rank = next_rank + (size - 1.0) / 2.0;
        baseline_rank_sum += mean_rank * in_baseline as f64;
        tie_term += size * size * size - size;
        next_rank += size;
        i += in_baseline;
        j += in_candidate;
    }

    let u = baseline_rank_sum - n_b * (n_b + 1.0) / 2.0;
    let mean = n_b * n_c / 2.0;
    let sigma = (n_b * n_c / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)))).sqrt();
    let p = if sigma > 0.0 {
        let z = (u.max(n_b * n_c - u) - mean - 0.5) / sigma;
        (2.0 * Normal::standard().sf(z)).min(1.0)
    } else {
        1.0
    };
    MannWhitney { u, p }
}
