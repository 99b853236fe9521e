//! `cargo xtask report`: render `evidence/` into `reports/` (HTML, markdown, SVG charts), or with
//! `--check` verify that the committed report matches the evidence.

use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `cargo xtask report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory of evidence to read (missing or empty: refused, and nothing is written).
    #[arg(long, default_value = "evidence")]
    evidence: PathBuf,
    /// Directory to write index.html, report.md, pr-comment.md and charts/*.svg into.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// The GPU's dense fp16 matmul rate in TFLOP/s, drawn on the throughput charts (e.g. 891 for
    /// cuBLAS 8192³ on an H100). Default: the measured value for a GPU the report knows, else no line.
    #[arg(long, alias = "ceiling-tflops")]
    matmul_tflops: Option<f64>,
    /// Write nothing; exit 1 if the report in --out is stale with respect to the evidence.
    #[arg(long)]
    check: bool,
    /// Also draw every gate verdict's speedup bars and bootstrap histogram (two charts per gate
    /// run, not part of the committed report: use with e.g. `--out target/report`).
    #[arg(long)]
    gate_charts: bool,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(rate) = args.matmul_tflops {
        anyhow::ensure!(
            rate.is_finite() && rate > 0.0,
            "--matmul-tflops must be a positive number, got {rate}"
        );
    }
    let options = attn_report::ReportOptions {
        matmul_tflops: args.matmul_tflops,
        gate_charts: args.gate_charts,
    };
    let report = match attn_report::Report::build(&args.evidence, &options) {
        // Names the directory itself: no context to add.
        Err(refused @ attn_report::ReportError::NoEvidence { .. }) => return Err(refused.into()),
        built => built
            .with_context(|| format!("building the report from {}", args.evidence.display()))?,
    };
    if args.check {
        let stale = report.stale_files(&args.out)?;
        if stale.is_empty() {
            println!(
                "{} is up to date with {}",
                args.out.display(),
                args.evidence.display()
            );
            return Ok(0);
        }
        for item in &stale {
            println!("stale: {}/{item}", args.out.display());
        }
        println!("run `cargo xtask report` and commit {}", args.out.display());
        return Ok(crate::EXIT_FAILED);
    }
    report.write(&args.out)?;
    println!(
        "wrote {} files to {} (open {}/index.html)",
        report.files().len(),
        args.out.display(),
        args.out.display()
    );
    Ok(0)
}
