//! Bootstrap confidence intervals: options, the [`Estimate`] they produce, and the generic
//! one- and two-sample entry points.
//!
//! Every result records its seed; the same data, options and seed give the same interval bit for
//! bit on any number of threads (see the crate docs for how resamples are split into chunks).

pub(crate) mod engine;
pub mod interval;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Sample, StatsError};

/// The seed used when none is given: fixed, so default runs are reproducible too.
pub const DEFAULT_SEED: u64 = 0x00A7_7E55_EED5;

/// How a bootstrap confidence interval is read off the replicates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CiMethod {
    /// Quantiles of the replicates at `α` and `1 − α`: simple, first-order accurate.
    Percentile,
    /// Bias-corrected and accelerated: second-order accurate, SciPy's default.
    #[default]
    Bca,
}

/// A point estimate with its bootstrap confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The statistic of the original data.
    pub point: f64,
    /// Lower end of the confidence interval.
    pub lower: f64,
    /// Upper end of the confidence interval.
    pub upper: f64,
    /// The interval's nominal coverage, e.g. 0.95.
    pub confidence: f64,
    /// Standard deviation of the bootstrap replicates (`n − 1` denominator).
    pub standard_error: f64,
    /// How the interval was computed.
    pub method: CiMethod,
}

impl Estimate {
    /// Whether `value` lies in `[lower, upper]`.
    pub fn contains(&self, value: f64) -> bool {
        self.lower <= value && value <= self.upper
    }
}

/// Options of every bootstrap in this crate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BootstrapOptions {
    /// Number of resamples (at least 2). Default 10,000.
    pub resamples: usize,
    /// Nominal coverage of the two-sided interval, in (0, 1). Default 0.95.
    pub confidence: f64,
    /// Seed of the random streams. Default [`DEFAULT_SEED`].
    pub seed: u64,
    /// Interval method. Default [`CiMethod::Bca`].
    pub method: CiMethod,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        BootstrapOptions {
            resamples: 10_000,
            confidence: 0.95,
            seed: DEFAULT_SEED,
            method: CiMethod::Bca,
        }
    }
}

impl BootstrapOptions {
    /// Checks the ranges documented on each field.
    pub fn validate(&self) -> Result<(), StatsError> {
        if self.resamples < 2 {
            return Err(StatsError::InvalidOption {
                name: "resamples",
                value: self.resamples.to_string(),
                expected: "at least 2",
            });
        }
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(StatsError::InvalidOption {
                name: "confidence",
                value: self.confidence.to_string(),
                expected: "strictly between 0 and 1, e.g. 0.95",
            });
        }
        Ok(())
    }
}

/// Bootstraps several statistics of one sample in one pass over the resamples.
///
/// Each statistic gets the resample (or, for the point estimate and jackknife, the data) as a
/// scratch copy it may reorder, e.g. with `select_nth_unstable`; it must not depend on the order of
/// the values. Returns one [`Estimate`] per statistic, in order. Statistics of different types
/// can be passed as `&[&(dyn Fn(&mut [f64]) -> f64 + Sync)]`.
///
/// BCa runs a jackknife: `n` extra evaluations of each statistic on `n − 1` values.
///
/// ```
/// use attn_stats::{bootstrap, statistic, BootstrapOptions, Sample};
/// let sample = Sample::new((1..=40).map(|i| f64::from(i).ln()).collect())?;
/// let opts = BootstrapOptions { resamples: 2_000, seed: 7, ..Default::default() };
/// let estimates = bootstrap(&sample, &[statistic::median, statistic::mean], &opts)?;
/// let median = estimates[0];
/// assert!(median.lower <= median.point && median.point <= median.upper);
/// // Same seed, same interval, bit for bit.
/// assert_eq!(bootstrap(&sample, &[statistic::median], &opts)?[0], median);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn bootstrap<F>(
    sample: &Sample,
    statistics: &[F],
    opts: &BootstrapOptions,
) -> Result<Vec<Estimate>, StatsError>
where
    F: Fn(&mut [f64]) -> f64 + Sync,
{
    opts.validate()?;
    check_len(sample)?;
    let outputs = statistics.len();
    let rows = engine::replicates(
        &[sample.values()],
        opts.resamples,
        opts.seed,
        outputs,
        |buffers, row| {
            let mut scratch = buffers[0].clone();
            for (statistic, slot) in statistics.iter().zip(row.iter_mut()) {
                scratch.copy_from_slice(&buffers[0]);
                *slot = statistic(&mut scratch);
            }
        },
    );
    Ok(statistics
        .iter()
        .enumerate()
        .map(|(k, statistic)| {
            let point = statistic(&mut sample.values().to_vec());
            let replicates = engine::column(&rows, outputs, k);
            let jackknife = || vec![jackknife(sample, statistic)];
            estimate(&replicates, point, jackknife, opts)
        })
        .collect())
}

/// Bootstraps several statistics of two samples, each resampled independently (SciPy's
/// `paired=False`), in one pass over the resamples.
///
/// Each statistic gets scratch copies of the two resamples, as in [`bootstrap`]. For BCa the
/// jackknife leaves out each observation of the first sample, then of the second.
///
/// ```
/// use attn_stats::{bootstrap_two, statistic, BootstrapOptions, Sample};
/// let a = Sample::new(vec![10.0, 11.0, 12.0, 10.5, 13.0, 11.5])?;
/// let b = Sample::new(vec![8.0, 9.0, 8.5, 9.5, 10.0, 8.2])?;
/// let ratio = |a: &mut [f64], b: &mut [f64]| statistic::median(a) / statistic::median(b);
/// let opts = BootstrapOptions { resamples: 1_000, ..Default::default() };
/// let speedup = bootstrap_two(&a, &b, &[ratio], &opts)?[0];
/// assert!(speedup.point > 1.0 && speedup.lower <= speedup.point);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn bootstrap_two<F>(
    first: &Sample,
    second: &Sample,
    statistics: &[F],
    opts: &BootstrapOptions,
) -> Result<Vec<Estimate>, StatsError>
where
    F: Fn(&mut [f64], &mut [f64]) -> f64 + Sync,
{
    opts.validate()?;
    check_len(first)?;
    check_len(second)?;
    let outputs = statistics.len();
    let samples = [first.values(), second.values()];
    let rows = engine::replicates(
        &samples,
        opts.resamples,
        opts.seed,
        outputs,
        |buffers, row| {
            let (mut a, mut b) = (buffers[0].clone(), buffers[1].clone());
            for (statistic, slot) in statistics.iter().zip(row.iter_mut()) {
                a.copy_from_slice(&buffers[0]);
                b.copy_from_slice(&buffers[1]);
                *slot = statistic(&mut a, &mut b);
            }
        },
    );
    Ok(statistics
        .iter()
        .enumerate()
        .map(|(k, statistic)| {
            let point = statistic(&mut first.values().to_vec(), &mut second.values().to_vec());
            let replicates = engine::column(&rows, outputs, k);
            let jackknife = || {
                let second_whole = second.values();
                let first_whole = first.values();
                vec![
                    jackknife_values(first_whole, |a| statistic(a, &mut second_whole.to_vec())),
                    jackknife_values(second_whole, |b| statistic(&mut first_whole.to_vec(), b)),
                ]
            };
            estimate(&replicates, point, jackknife, opts)
        })
        .collect())
}

/// The jackknife values of `statistic`: entry `i` is the statistic of the sample without
/// observation `i` (input order). Evaluated in parallel, deterministically.
///
/// ```
/// use attn_stats::{jackknife, statistic, Sample};
/// let sample = Sample::new(vec![1.0, 2.0, 6.0])?;
/// assert_eq!(jackknife(&sample, statistic::mean), vec![4.0, 3.5, 1.5]);
/// # Ok::<(), attn_stats::StatsError>(())
/// ```
pub fn jackknife<F>(sample: &Sample, statistic: F) -> Vec<f64>
where
    F: Fn(&mut [f64]) -> f64 + Sync,
{
    jackknife_values(sample.values(), statistic)
}

fn jackknife_values<F>(values: &[f64], statistic: F) -> Vec<f64>
where
    F: Fn(&mut [f64]) -> f64 + Sync,
{
    (0..values.len())
        .into_par_iter()
        .map(|left_out| {
            let mut rest: Vec<f64> = values[..left_out]
                .iter()
                .chain(&values[left_out + 1..])
                .copied()
                .collect();
            statistic(&mut rest)
        })
        .collect()
}

/// Errors if `sample` is too long for the index generator.
pub(crate) fn check_len(sample: &Sample) -> Result<(), StatsError> {
    if sample.len() > engine::MAX_LEN {
        return Err(StatsError::TooLarge {
            len: sample.len(),
            max: engine::MAX_LEN,
        });
    }
    Ok(())
}

/// The [`Estimate`] from replicates, by `opts.method`; `jackknife` (one vector per sample) is only
/// computed for BCa.
pub(crate) fn estimate(
    replicates: &[f64],
    point: f64,
    jackknife: impl FnOnce() -> Vec<Vec<f64>>,
    opts: &BootstrapOptions,
) -> Estimate {
    let (lower, upper) = match opts.method {
        CiMethod::Percentile => interval::percentile_interval(replicates, opts.confidence),
        CiMethod::Bca => {
            let values = jackknife();
            let slices: Vec<&[f64]> = values.iter().map(Vec::as_slice).collect();
            let acceleration = interval::acceleration(&slices);
            interval::bca_interval(replicates, point, acceleration, opts.confidence)
        }
    };
    Estimate {
        point,
        lower,
        upper,
        confidence: opts.confidence,
        standard_error: interval::standard_error(replicates),
        method: opts.method,
    }
}
