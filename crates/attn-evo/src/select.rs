//! Rank-based parent selection, as in EvoEngineer's population management.
//!
//! The population is sorted best first; the parent at rank `r` (0-based) is drawn with
//! probability `p(r) ∝ 1 / (r + N)`, `N` the population size. The pressure is mild: with `N = 8`
//! the best is picked 1.6 times as often as the worst, so a lucky early candidate cannot take over.

use rand::Rng;

/// The selection probabilities of ranks `0..n` (they sum to 1; empty for `n = 0`).
///
/// ```
/// let p = attn_evo::rank_probabilities(2);
/// // 1/2 and 1/3, normalised.
/// assert!((p[0] - 0.6).abs() < 1e-12 && (p[1] - 0.4).abs() < 1e-12);
/// ```
pub fn rank_probabilities(n: usize) -> Vec<f64> {
    let weights: Vec<f64> = (0..n).map(|r| 1.0 / (r + n) as f64).collect();
    let total: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / total).collect()
}

/// Draws a rank with the probabilities of [`rank_probabilities`]`(n)`; `n` must be at least 1.
pub fn pick_rank(n: usize, rng: &mut impl Rng) -> usize {
    let probabilities = rank_probabilities(n);
    let mut u: f64 = rng.random();
    for (rank, p) in probabilities.iter().enumerate() {
        if u < *p {
            return rank;
        }
        u -= p;
    }
    n.saturating_sub(1)
}
