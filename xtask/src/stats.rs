//! `cargo xtask stats`: statistics on files of timings, via the `attn-stats` crate.
//!
//! `cargo xtask stats compare --baseline A --candidate B [--seed N] [--resamples N]
//! [--confidence C] [--noise F] [--threshold T] [--column NAME] [--method bca|percentile]
//! [--block N] [--json]`

use std::path::PathBuf;

use anyhow::Context;
use attn_stats::{BootstrapOptions, CiMethod, CompareOptions, DEFAULT_SEED};

/// Arguments of `cargo xtask stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: StatsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StatsCommand {
    /// Is the candidate faster than the baseline, by how much, how sure? Exit code 0 whenever it
    /// ran, whatever the verdict.
    Compare(CompareArgs),
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// File of baseline timings: one number a line, or a CSV file with --column.
    #[arg(long)]
    baseline: PathBuf,
    /// File of candidate timings, in the same format and unit.
    #[arg(long)]
    candidate: PathBuf,
    /// Bootstrap seed; the same files and seed give the same intervals, bit for bit.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Number of bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    resamples: usize,
    /// Confidence level of the intervals.
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Half-width of the no-change band around a speedup of 1.
    #[arg(long, default_value_t = 0.01)]
    noise: f64,
    /// Gate: candidate median must be at most this times the baseline median.
    #[arg(long, default_value_t = 0.95)]
    threshold: f64,
    /// Read this named column of CSV files (with a header row).
    #[arg(long)]
    column: Option<String>,
    /// Bootstrap interval method.
    #[arg(long, value_enum, default_value_t = Method::Bca)]
    method: Method,
    /// Observations per block, where the timings were taken in blocks that share a state (a
    /// clock, a temperature): the intervals resample whole blocks of N consecutive lines.
    #[arg(long, default_value_t = 1)]
    block: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Method {
    Bca,
    Percentile,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        StatsCommand::Compare(args) => compare(args),
    }
}

fn compare(args: CompareArgs) -> anyhow::Result<u8> {
    let column = args.column.as_deref();
    let baseline = attn_stats::read_timings(&args.baseline, column).context("baseline")?;
    let candidate = attn_stats::read_timings(&args.candidate, column).context("candidate")?;
    let opts = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: args.resamples,
            confidence: args.confidence,
            seed: args.seed,
            method: match args.method {
                Method::Bca => CiMethod::Bca,
                Method::Percentile => CiMethod::Percentile,
            },
        },
        noise: args.noise,
        gate_threshold: args.threshold,
    };
    // A bar over the bootstrap resamples (hidden when stderr is not a terminal): a million
    // timings a side take minutes.
    let bar = crate::progress::bar(args.resamples as u64, "bootstrap");
    bar.set_message(format!(
        "{} + {} timings",
        baseline.values().len(),
        candidate.values().len()
    ));
    let comparison =
        attn_stats::compare_with_progress(&baseline, &candidate, args.block, &opts, &|n| {
            bar.inc(n as u64)
        });
    bar.finish_and_clear();
    let comparison = comparison?;
    if args.json {
        println!("{}", serde_json::to_string(&comparison)?);
    } else {
        println!(
            "baseline:  {}\ncandidate: {}\n",
            args.baseline.display(),
            args.candidate.display()
        );
        println!("{comparison}");
    }
    Ok(0)
}
