//! Statistics for timing data: "is B faster than A, by how much, how sure?"
//!
//! Give it two files of timings (or two `Vec<f64>`) and [`compare`] answers with summaries, a
//! bootstrap confidence interval of the speedup, a rank test and a verdict. Nothing here knows
//! about GPUs or attention; it is plain, conventional statistics, with every convention named.
//!
//! # Bird's-eye view
//!
//! - [`Sample`] (`sample`): validated observations (at least two, all finite) and the type-7
//!   [`quantile`] (linear interpolation between order statistics, numpy's default).
//! - [`Summary`] (`summary`): n, min, max, mean, median, p10/p25/p75/p90/p99, standard deviation
//!   (`n − 1`), MAD (unscaled), IQR, and Tukey-fence [`Outliers`] (criterion's convention), which
//!   are counted and never dropped.
//! - [`bootstrap()`] / [`bootstrap_two`] (`bootstrap`): percentile and BCa intervals for any
//!   statistics of one sample, or of two samples resampled independently, several statistics per
//!   pass. The interval formulas live in [`interval`] and follow `scipy.stats.bootstrap`.
//! - [`mann_whitney`]: the two-sided U test by the normal approximation with tie and continuity
//!   corrections (SciPy's `method="asymptotic"`).
//! - [`spearman`] / [`kendall`] (`rank`): rank correlation of paired data (how well one ranking
//!   predicts another), ties by [`average_ranks`], p-values as SciPy's `spearmanr` / `kendalltau`.
//! - [`compare`] (`compare`): all of the above for a baseline and a candidate, a [`Verdict`], and
//!   the hard gate; [`Comparison`] serializes to the JSON of `cargo xtask stats compare --json`
//!   and displays as a table.
//! - [`parse_sample`] / [`read_sample`] (`read`): numbers one a line, or a named CSV column.
//!
//! # Reproducibility
//!
//! Every bootstrap takes an explicit seed (default [`DEFAULT_SEED`]), recorded in its result. The
//! resamples are split into fixed chunks of 128; chunk `c` draws from ChaCha8 seeded with the seed
//! on stream `c`; rayon runs the chunks in parallel and writes each replicate to its own slot. So
//! the same data, options and seed give the same replicates, hence intervals, bit for bit, on any
//! number of threads.
//!
//! # Example
//!
//! ```
//! use attn_stats::{compare, CompareOptions, Sample, Verdict};
//! let baseline = Sample::new(vec![1.30, 1.32, 1.29, 1.35, 1.31, 1.33, 1.30, 1.90, 1.31, 1.32])?;
//! let candidate = Sample::new(vec![1.01, 1.03, 1.00, 1.02, 1.05, 1.01, 1.02, 1.00, 1.04, 1.02])?;
//! let result = compare(&baseline, &candidate, &CompareOptions::default())?;
//! assert_eq!(result.verdict, Verdict::Faster);
//! assert!(result.speedup.lower > 1.2);
//! assert_eq!(result.baseline.outliers.high_severe, 1); // the 1.90, reported, not dropped
//! println!("{result}"); // the table; serde_json::to_string(&result) gives the JSON
//! # Ok::<(), attn_stats::StatsError>(())
//! ```
//!
//! # Speed
//!
//! See the crate's README.md for measured timings of [`compare`] against sample size and number
//! of resamples.

#![warn(missing_docs)]

mod bootstrap;
mod compare;
mod error;
mod mann_whitney;
mod rank;
mod read;
mod report;
mod sample;
mod summary;

pub use bootstrap::{
    bootstrap, bootstrap_two, interval, jackknife, BootstrapOptions, CiMethod, Estimate,
    DEFAULT_SEED,
};
pub use compare::{
    compare, compare_in_blocks, compare_with_progress, speedup_replicates, verdict, CompareOptions,
    Comparison, GateResult, Verdict,
};
pub use error::StatsError;
pub use mann_whitney::{mann_whitney, MannWhitney};
pub use rank::{average_ranks, kendall, spearman, Kendall, Spearman};
pub use read::{parse_sample, parse_timings, read_sample, read_timings};
pub use sample::{quantile, statistic, Sample};
pub use summary::{Outliers, Summary};
