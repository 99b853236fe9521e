//! `cargo xtask bench` on decode batches: decode implementations and SDPA backends timed per
//! batch, each entry's µs, GB/s and share of the copy bandwidth measured in the same run printed
//! and written as bench evidence (`BenchEntry.decode`).

use anyhow::bail;
use attn_evidence::BenchRun;
use attn_kernels::decode::find_decode;
use attn_kernels::Gpu;
use attn_measure::bench::{run_decode_bench, DecodeBenchRequest, Event};
use attn_measure::sdpa::Backend;
use attn_oracle::DecodeSpec;

use crate::bench::Args;
use crate::progress::Progress;

/// The request the arguments make of decode batches `specs`, every name checked before any GPU
/// probe: `--impl` decode implementations (default `decode`), `--sdpa-backends` SDPA's own and
/// `flashinfer`.
pub fn request(args: &Args, specs: Vec<DecodeSpec>) -> anyhow::Result<DecodeBenchRequest> {
    if !args.triton.is_empty() || !args.defines.is_empty() {
        bail!("--triton kernels follow the forward ABI: they take prefill problems, not decode batches");
    }
    if !args.py.is_empty() {
        bail!("--py callables are called as fn(q, k, v, scale=, causal=) on prefill problems, not decode batches");
    }
    let overrides = args.overrides()?;
    let names = args.names_or("decode");
    for name in &names {
        if find_decode(name).is_err() && attn_kernels::registry::find(name).is_ok() {
            bail!("--impl {name} is a prefill implementation: a decode batch takes decode or decode-naive");
        }
        find_decode(name)?;
    }
    let mut backends = Vec::new();
    for text in args.sdpa_backends.iter().filter(|b| !b.is_empty()) {
        let backend: Backend = text.parse()?;
        if backend == Backend::Fa3 {
            bail!("--sdpa-backends fa3: {}", attn_measure::sdpa::FA3_NO_DECODE);
        }
        if !backend.times_decode() {
            bail!("--sdpa-backends {backend} does not time decode batches: give SDPA's own (default, flash, efficient, cudnn, math) or flashinfer");
        }
        backends.push(backend);
    }
    if args.samples < 2 {
        bail!("--samples must be at least 2");
    }
    Ok(DecodeBenchRequest {
        specs,
        implementations: names.into_iter().map(|n| (n, overrides.clone())).collect(),
        backends,
        timing: args.timing(),
        seed: args.seed,
        suite: args.problems.suite_name("large"),
        git: crate::provenance::git_revision(),
    })
}

/// Runs the decode bench; returns the process exit code.
pub fn run(args: &Args, specs: Vec<DecodeSpec>) -> anyhow::Result<u8> {
    let request = request(args, specs)?;
    let mut budget = crate::budget::TimeBudget::new(args.time_budget)?;
    let gpu = Gpu::open(0)?;
    let mut bar: Option<Progress> = None;
    let mut show = |event: Event| crate::bench::show(&mut bar, event);
    let mut admit = || budget.admit().err();
    let run = run_decode_bench(&gpu, &request, &mut show, &mut admit)?;
    println!("{}", table(&run).to_markdown());
    crate::bench::write_run(args, &run)?;
    Ok(0)
}

/// One row an entry: µs at the median, GB/s over `DecodeBytes::total()`, % of the copy bandwidth.
fn table(run: &BenchRun) -> attn_report::table::Table {
    let mut table = attn_report::table::Table::new(&[
        "implementation",
        "batch",
        "median µs",
        "p10–p90 µs",
        "GB/s",
        "% of copy",
        "SM MHz",
    ])
    .numeric(&[2, 4, 5, 6]);
    for e in &run.entries {
        let Some(record) = &e.decode else { continue };
        table.push(vec![
            e.implementation.label(),
            record.text.clone(),
            attn_report::format::micros(e.summary.median),
            attn_report::format::micros_range(e.summary.p10, e.summary.p90),
            record
                .candidate_gbs
                .map_or("–".into(), |g| format!("{g:.0}")),
            record
                .candidate_fraction()
                .map_or("–".into(), |f| format!("{:.0}%", 100.0 * f)),
            e.sm_mhz.map_or("–".into(), |mhz| format!("{mhz:.0}")),
        ]);
    }
    table
}
