//! `cargo xtask ncu`: summarise Nsight Compute CSV captured elsewhere (no GPU needed).
//!
//! Profiling one of our kernels (`--impl NAME --shape ...`) is wired separately; this module keeps
//! the `--from-csv` path, which reads either ncu page (`details` or `raw`) and prints each kernel's
//! launches and metrics in base units.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `cargo xtask ncu`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// An `ncu --csv` capture (`--page details` or `--page raw`); messy output is fine.
    #[arg(long, value_name = "FILE")]
    pub from_csv: Option<PathBuf>,
    /// Keep only kernels whose name contains PATTERN (or matches it, as `regex:PATTERN`).
    #[arg(long, value_name = "PATTERN")]
    pub kernel: Option<String>,
    /// Print JSON (one object per kernel, full names, medians and ranges) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Some(path) = args.from_csv else {
        anyhow::bail!(
            "nothing to do: pass --from-csv FILE (profiling with --impl is not wired yet)"
        );
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let launches = attn_ncu::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
    let filter = args
        .kernel
        .as_deref()
        .map(attn_ncu::KernelFilter::parse)
        .transpose()?;
    let kernels = attn_ncu::group(&launches, filter.as_ref());
    if kernels.is_empty() {
        let names: std::collections::BTreeSet<String> = launches
            .iter()
            .map(|l| attn_ncu::group::short_name(&l.kernel, 60))
            .collect();
        anyhow::bail!(
            "no kernel in {} matches {:?}; kernels there: {}",
            path.display(),
            args.kernel.unwrap_or_default(),
            names.into_iter().collect::<Vec<_>>().join(" | ")
        );
    }
    let text = if args.json {
        serde_json::to_string_pretty(&kernels)? + "\n"
    } else {
        attn_ncu::render_text(&kernels)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `| head` closing the pipe early is the reader's choice, not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(0),
    }
}
