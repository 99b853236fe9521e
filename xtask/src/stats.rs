//! `cargo xtask stats`: statistics on files of timings, via the `attn-stats` crate.
//!
//! `cargo xtask stats compare --baseline A --candidate B [--seed N] [--resamples N]
//! [--confidence C] [--noise F] [--threshold T] [--column NAME] [--method bca|percentile] [--json]`

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
        attn_stats::compare_with_progress(&baseline, &candidate, &opts, &|n| bar.inc(n as u64));
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
        // The table's gate line states the rule; say instead how these numbers met or missed it.
        let table = comparison.to_string();
        for line in table.lines() {
            if line.starts_with("gate ") {
                println!("{:<24}{}", "gate", gate_line(&comparison));
            } else {
                println!("{line}");
            }
        }
    }
    Ok(0)
}

/// The gate's outcome with the numbers that decided it: which of its two conditions failed, or
/// that both held.
fn gate_line(c: &attn_stats::Comparison) -> String {
    let threshold = c.gate.threshold;
    let bound = threshold * c.baseline.median;
    let median_ok = c.candidate.median <= bound;
    let median = format!(
        "candidate median {} {} {threshold} x baseline median {} = {}",
        number(c.candidate.median),
        if median_ok { "<=" } else { ">" },
        number(c.baseline.median),
        number(bound)
    );
    let ci_ok = c.diff_median.upper < 0.0;
    let ci = format!(
        "diff interval [{}, {}] {}",
        number(c.diff_median.lower),
        number(c.diff_median.upper),
        if ci_ok { "< 0" } else { "not entirely below 0" }
    );
    match (median_ok, ci_ok) {
        (true, true) => format!("passed: {median}, and {ci}"),
        (false, false) => format!("failed: {median}, and {ci}"),
        (false, true) => format!("failed: {median}"),
        (true, false) => format!("failed: {ci}"),
    }
}

/// Five significant digits, as the table shows numbers.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor();
    if !(-4.0..9.0).contains(&magnitude) {
        return format!("{x:.4e}");
    }
    format!("{x:.*}", (4.0 - magnitude).max(0.0) as usize)
}
