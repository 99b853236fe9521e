//! [`compare`]: is the candidate faster than the baseline, by how much, how sure?

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bootstrap::{check_len, engine, estimate};
use crate::sample::{lerp, median_in_place};
use crate::{mann_whitney, BootstrapOptions, Estimate, MannWhitney, Sample, StatsError, Summary};

/// Options of [`compare`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CompareOptions {
    /// The bootstrap behind both intervals.
    pub bootstrap: BootstrapOptions,
    /// Half-width of the band around a speedup of 1 that counts as no change. Default 0.01 (±1%).
    pub noise: f64,
    /// The hard gate's bound on candidate median / baseline median. Default 0.95.
    pub gate_threshold: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            bootstrap: BootstrapOptions::default(),
            noise: 0.01,
            gate_threshold: 0.95,
        }
    }
}

impl CompareOptions {
    /// Checks `noise` ∈ [0, 1), `gate_threshold` > 0 and finite, and the bootstrap options.
    pub fn validate(&self) -> Result<(), StatsError> {
        self.bootstrap.validate()?;
        if !(0.0..1.0).contains(&self.noise) {
            return Err(StatsError::InvalidOption {
                name: "noise",
                value: self.noise.to_string(),
                expected: "a fraction in [0, 1), e.g. 0.01 for ±1%",
            });
        }
        if !(self.gate_threshold > 0.0 && self.gate_threshold.is_finite()) {
            return Err(StatsError::InvalidOption {
                name: "threshold",
                value: self.gate_threshold.to_string(),
                expected: "a positive ratio, e.g. 0.95",
            });
        }
        Ok(())
    }
}

/// What the speedup interval says, given the noise band `±noise` around 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The whole speedup interval lies above `1 + noise`.
    Faster,
    /// The whole speedup interval lies below `1 − noise`.
    Slower,
    /// Neither: the interval reaches into the noise band (or straddles it).
    NoChange,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoChange => "no-change",
        })
    }
}

/// The hard gate: `candidate median ≤ threshold × baseline median` and the whole interval of
/// `candidate median − baseline median` below zero.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// The threshold applied.
    pub threshold: f64,
    /// Whether both conditions held.
    pub passed: bool,
}

/// Everything [`compare`] found; serializes to the JSON of `cargo xtask stats compare --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The bootstrap seed.
    pub seed: u64,
    /// The number of bootstrap resamples.
    pub resamples: usize,
    /// Observations per resampled block ([`compare_in_blocks`]); 1 for the plain bootstrap
    /// (and in comparisons written before blocks were recorded).
    #[serde(default = "one")]
    pub block: usize,
    /// The intervals' nominal coverage.
    pub confidence: f64,
    /// Summary of the baseline.
    pub baseline: Summary,
    /// Summary of the candidate.
    pub candidate: Summary,
    /// Baseline median / candidate median: above 1 means the candidate is faster.
    pub speedup: Estimate,
    /// Candidate median − baseline median: below 0 means the candidate is faster.
    pub diff_median: Estimate,
    /// The rank test, `U` for the baseline.
    pub mann_whitney: MannWhitney,
    /// Faster, slower or no change, from the speedup interval.
    pub verdict: Verdict,
    /// The hard gate.
    pub gate: GateResult,
}

impl Comparison {
    /// The gate rule as a predicate on this comparison's numbers, for any `threshold`:
    /// `candidate.median ≤ threshold × baseline.median && diff_median.upper < 0`.
    pub fn passes_gate(&self, threshold: f64) -> bool {
        self.candidate.median <= threshold * self.baseline.median && self.diff_median.upper < 0.0
    }
}

/// The verdict rule: the speedup interval entirely above `1 + noise` is [`Verdict::Faster`],
/// entirely below `1 − noise` is [`Verdict::Slower`], anything else [`Verdict::NoChange`].
pub fn verdict(speedup: &Estimate, noise: f64) -> Verdict {
    if speedup.lower > 1.0 + noise {
        Verdict::Faster
    } else if speedup.upper < 1.0 - noise {
        Verdict::Slower
    } else {
        Verdict::NoChange
    }
}

/// Compares two samples of timings (lower is better): summaries, bootstrap intervals of the
/// speedup (baseline median / candidate median) and of the difference of medians (candidate −
/// baseline) from one pass over the resamples, the Mann–Whitney test, the [`verdict`] and the gate
/// (see [`Comparison::passes_gate`]).
///
/// Errors on invalid options and on any timing that is not positive.
///
/// ```
/// use attn_stats::{compare, CompareOptions, Sample, Verdict};
/// let baseline = Sample::new((0..200).map(|i| 10.0 + f64::from(i % 7) * 0.1).collect())?;
/// let candidate = Sample::new((0..200).map(|i| 8.0 + f64::from(i % 5) * 0.1).collect())?;
/// let opts = CompareOptions::default();
/// let result = compare(&baseline, &candidate, &opts)?;
/// assert_eq!(result.verdict, Verdict::Faster);
/// assert!(result.gate.passed && result.speedup.lower > 1.2);
/// assert_eq!(result.seed, opts.bootstrap.seed);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn compare(
    baseline: &Sample,
    candidate: &Sample,
    opts: &CompareOptions,
) -> Result<Comparison, StatsError> {
    compare_with_progress(baseline, candidate, 1, opts, &|_| {})
}

/// [`compare`] for samples taken in blocks of `block` consecutive observations that share a state
/// (the gate's timing blocks, each under its own clock and temperature): the intervals come from
/// resampling whole blocks, and the BCa jackknife leaves out a block at a time, so the spread
/// between blocks widens them as it should. Resampling such observations one by one takes a
/// sample of 2 blocks of 10 for 20 independent observations, and calls a kernel faster than
/// itself (evidence/METHOD.md, `min-blocks-a-side`).
/// The last block may be shorter. `block` 1 is [`compare`], bit for bit.
///
/// Errors as [`compare`] does, and where `block` is 0 or leaves a sample fewer than 2 blocks.
///
/// ```
/// use attn_stats::{compare, compare_in_blocks, CompareOptions, Sample};
/// // Five blocks of 25 a side: the level moves from block to block (a clock), the candidate is 1
/// // under the baseline's block for block. One by one, 125 observations look like a sure 1%;
/// // block by block, 5 levels say little.
/// let side = |levels: [f64; 5]| -> Vec<f64> {
///     levels.iter().flat_map(|l| (0..25).map(move |i| l + 0.02 * f64::from(i))).collect()
/// };
/// let baseline = Sample::new(side([110.0, 100.0, 108.0, 102.0, 106.0]))?;
/// let candidate = Sample::new(side([109.0, 99.0, 107.0, 101.0, 105.0]))?;
/// let opts = CompareOptions::default();
/// let plain = compare(&baseline, &candidate, &opts)?.speedup;
/// let blocked = compare_in_blocks(&baseline, &candidate, 25, &opts)?;
/// assert!(plain.lower > 1.0 && blocked.speedup.lower < 0.95 && blocked.block == 25);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn compare_in_blocks(
    baseline: &Sample,
    candidate: &Sample,
    block: usize,
    opts: &CompareOptions,
) -> Result<Comparison, StatsError> {
    compare_with_progress(baseline, candidate, block, opts, &|_| {})
}

/// [`compare_in_blocks`] (block 1: [`compare`]), calling `progress(n)` (from any thread) each
/// time `n` more of the `opts.bootstrap.resamples` bootstrap resamples are done: a
/// million-observation sample takes minutes. The result is the same, bit for bit.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use attn_stats::{compare, compare_with_progress, CompareOptions, Sample};
/// let a = Sample::new(vec![10.0, 12.0, 11.0, 13.0])?;
/// let b = Sample::new(vec![9.0, 9.5, 10.0, 8.0])?;
/// let opts = CompareOptions::default();
/// let done = AtomicUsize::new(0);
/// let with = compare_with_progress(&a, &b, 1, &opts, &|n| {
///     done.fetch_add(n, Ordering::Relaxed);
/// })?;
/// assert_eq!(done.into_inner(), opts.bootstrap.resamples);
/// assert_eq!(with, compare(&a, &b, &opts)?);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn compare_with_progress(
    baseline: &Sample,
    candidate: &Sample,
    block: usize,
    opts: &CompareOptions,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Comparison, StatsError> {
    opts.validate()?;
    check_positive(baseline, "baseline")?;
    check_positive(candidate, "candidate")?;
    check_len(baseline)?;
    check_len(candidate)?;
    check_blocks(baseline, candidate, block)?;
    let boot = &opts.bootstrap;

    let rows = median_replicates(baseline, candidate, block, boot, progress);
    let (baseline_median, candidate_median) = (baseline.median(), candidate.median());
    let (baseline_loo, candidate_loo) = (
        leave_one_block_out_medians(baseline, block),
        leave_one_block_out_medians(candidate, block),
    );

    let speedup = estimate(
        &engine::column(&rows, 2, SPEEDUP),
        baseline_median / candidate_median,
        || {
            vec![
                baseline_loo.iter().map(|m| m / candidate_median).collect(),
                candidate_loo.iter().map(|m| baseline_median / m).collect(),
            ]
        },
        boot,
    );
    let diff_median = estimate(
        &engine::column(&rows, 2, DIFF),
        candidate_median - baseline_median,
        || {
            vec![
                baseline_loo.iter().map(|m| candidate_median - m).collect(),
                candidate_loo.iter().map(|m| m - baseline_median).collect(),
            ]
        },
        boot,
    );

    let mut comparison = Comparison {
        seed: boot.seed,
        resamples: boot.resamples,
        block,
        confidence: boot.confidence,
        baseline: baseline.summary(),
        candidate: candidate.summary(),
        speedup,
        diff_median,
        mann_whitney: mann_whitney(baseline, candidate),
        verdict: verdict(&speedup, opts.noise),
        gate: GateResult {
            threshold: opts.gate_threshold,
            passed: false,
        },
    };
    comparison.gate.passed = comparison.passes_gate(opts.gate_threshold);
    Ok(comparison)
}

/// The bootstrap replicates of the speedup (baseline median / candidate median), in resample
/// order, for histograms: the same replicates [`compare`] used for the same seed and resamples.
///
/// Empty when `opts.resamples` is 0 or a sample is too large to bootstrap; `confidence` and
/// `method` do not matter here.
///
/// ```
/// use attn_stats::{compare, speedup_replicates, CompareOptions, Sample};
/// let a = Sample::new(vec![10.0, 12.0, 11.0, 13.0])?;
/// let b = Sample::new(vec![9.0, 9.5, 10.0, 8.0])?;
/// let opts = CompareOptions::default();
/// let replicates = speedup_replicates(&a, &b, &opts.bootstrap);
/// assert_eq!(replicates.len(), 10_000);
/// let sd = attn_stats::interval::standard_error(&replicates);
/// assert_eq!(sd, compare(&a, &b, &opts)?.speedup.standard_error);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn speedup_replicates(
    baseline: &Sample,
    candidate: &Sample,
    opts: &BootstrapOptions,
) -> Vec<f64> {
    if check_len(baseline).is_err() || check_len(candidate).is_err() {
        return Vec::new();
    }
    engine::column(
        &median_replicates(baseline, candidate, 1, opts, &|_| {}),
        2,
        SPEEDUP,
    )
}

const SPEEDUP: usize = 0;
const DIFF: usize = 1;

/// Row-major replicates `[speedup, diff]` per resample: both medians found once per resample.
fn median_replicates(
    baseline: &Sample,
    candidate: &Sample,
    block: usize,
    opts: &BootstrapOptions,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<f64> {
    engine::replicates_in_blocks(
        &[baseline.values(), candidate.values()],
        block,
        opts.resamples,
        opts.seed,
        2,
        |buffers, row| {
            let baseline_median = median_in_place(&mut buffers[0]);
            let candidate_median = median_in_place(&mut buffers[1]);
            row[SPEEDUP] = baseline_median / candidate_median;
            row[DIFF] = candidate_median - baseline_median;
        },
        progress,
    )
}

/// The median with each observation left out in turn, in `O(1)` each from the sorted values
/// (entry `i` leaves out the `i`-th smallest; the jackknife only needs the multiset).
fn leave_one_out_medians(sample: &Sample) -> Vec<f64> {
    let sorted = sample.sorted();
    let remaining = sorted.len() - 1;
    (0..sorted.len())
        .map(|left_out| {
            // Position `k` among the remaining values, skipping the one left out.
            let at = |k: usize| {
                if k < left_out {
                    sorted[k]
                } else {
                    sorted[k + 1]
                }
            };
            if remaining % 2 == 1 {
                at(remaining / 2)
            } else {
                lerp(at(remaining / 2 - 1), at(remaining / 2), 0.5)
            }
        })
        .collect()
}

/// The median with each block of `block` consecutive observations left out in turn (the
/// jackknife of a block bootstrap); `block` 1 is [`leave_one_out_medians`].
fn leave_one_block_out_medians(sample: &Sample, block: usize) -> Vec<f64> {
    if block <= 1 {
        return leave_one_out_medians(sample);
    }
    let values = sample.values();
    (0..values.len().div_ceil(block))
        .map(|left_out| {
            let mut rest: Vec<f64> = values
                .chunks(block)
                .enumerate()
                .filter(|(i, _)| *i != left_out)
                .flat_map(|(_, run)| run.iter().copied())
                .collect();
            median_in_place(&mut rest)
        })
        .collect()
}

/// `block` is at least 1 and, above 1, leaves each sample at least 2 blocks (with one, every
/// resample is that block and the interval has no width).
fn check_blocks(baseline: &Sample, candidate: &Sample, block: usize) -> Result<(), StatsError> {
    let fewest = baseline.len().min(candidate.len()).div_ceil(block.max(1));
    if block == 0 || (block > 1 && fewest < 2) {
        return Err(StatsError::InvalidOption {
            name: "block",
            value: block.to_string(),
            expected: "at least 1, and short enough to leave each sample at least 2 blocks",
        });
    }
    Ok(())
}

fn one() -> usize {
    1
}

fn check_positive(sample: &Sample, role: &'static str) -> Result<(), StatsError> {
    match sample.values().iter().enumerate().find(|(_, &v)| v <= 0.0) {
        Some((index, &value)) => Err(StatsError::NotPositive { role, index, value }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{jackknife, statistic};

    #[test]
    fn leave_one_out_medians_match_the_generic_jackknife() {
        for values in [
            vec![3.0, 1.0, 2.0],
            vec![5.0, 1.0, 1.0, 4.0, 2.0, 9.0],
            vec![2.0, 2.0, 7.0, 1.0, 0.5],
        ] {
            let sample = Sample::new(values).unwrap();
            let mut fast = leave_one_out_medians(&sample);
            let mut generic = jackknife(&sample, statistic::median);
            fast.sort_by(f64::total_cmp);
            generic.sort_by(f64::total_cmp);
            assert_eq!(fast, generic, "{:?}", sample.values());
        }
    }

    #[test]
    fn verdict_follows_the_noise_band() {
        let interval = |lower, upper| Estimate {
            point: (lower + upper) / 2.0,
            lower,
            upper,
            confidence: 0.95,
            standard_error: 0.0,
            method: crate::CiMethod::Bca,
        };
        let cases = [
            (1.02, 1.05, Verdict::Faster),
            (1.005, 1.05, Verdict::NoChange),
            (0.95, 0.98, Verdict::Slower),
            (0.95, 0.995, Verdict::NoChange),
            (0.9, 1.1, Verdict::NoChange),
        ];
        for (lower, upper, expected) in cases {
            assert_eq!(
                verdict(&interval(lower, upper), 0.01),
                expected,
                "[{lower}, {upper}]"
            );
        }
    }
}
