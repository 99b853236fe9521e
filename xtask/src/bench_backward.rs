//! `cargo xtask bench --pass backward`: backward implementations and backward baselines (SDPA's
//! own backends through autograd, FlashAttention-3's in batch mode) timed per problem, each
//! entry's µs and TFLOP/s over the backward's FLOPs printed and written as bench evidence
//! (`BenchEntry.backward`).

use anyhow::bail;
use attn_evidence::BenchRun;
use attn_kernels::backward::find_backward;
use attn_kernels::{Candidate, Config, Gpu};
use attn_measure::backward::BackwardCandidate;
use attn_measure::bench::{run_backward_bench, BackwardBenchRequest, Event, TrainingStep};
use attn_measure::sdpa::Backend;

use crate::bench::Args;
use crate::gate_backward::DEFAULT_SUITE;
use crate::progress::Progress;

/// The request the arguments make of the backward pass, every name and problem checked before
/// any GPU probe: `--impl` backward implementations (default `backward-mma`), `--sdpa-backends`
/// SDPA's own and `fa3` (batch mode).
pub fn request(args: &Args) -> anyhow::Result<BackwardBenchRequest> {
    if args.problems.decode_problems()?.is_some() {
        bail!("--pass backward takes prefill shapes or suites: a decode batch has no backward pass here");
    }
    if !args.triton.is_empty() || !args.py.is_empty() || !args.defines.is_empty() {
        bail!("--triton kernels and --py callables are timed on the forward pass: give --impl backward implementations");
    }
    let problems = args.problems.problems(DEFAULT_SUITE)?;
    let overrides = args.overrides()?;
    let names = args.names_or("backward-mma");
    for name in &names {
        if find_backward(name).is_err() && attn_kernels::registry::find(name).is_ok() {
            bail!("--impl {name} is a forward implementation: the backward pass takes backward-mma or backward-naive");
        }
        let candidate = BackwardCandidate::registered(name, overrides.clone())?;
        for problem in &problems {
            candidate.check_supports(problem)?;
        }
    }
    let mut backends = Vec::new();
    for text in args.sdpa_backends.iter().filter(|b| !b.is_empty()) {
        let backend: Backend = text.parse()?;
        if !(backend.is_sdpa() || backend == Backend::Fa3) {
            bail!("--sdpa-backends {backend} times no backward pass: give SDPA's own (default, flash, efficient, cudnn, math) or fa3");
        }
        backend.check_mode(args.mode)?;
        if backend == Backend::Fa3 {
            Backend::fa3_library()?;
        }
        backends.push(backend);
    }
    if args.samples < 2 {
        bail!("--samples must be at least 2");
    }
    let mut step_forwards = Vec::new();
    for name in args.step.iter().filter(|n| !n.is_empty()) {
        if find_backward(name).is_ok() {
            bail!("--step {name} is a backward implementation: --step names the forward implementations of the step (hopper, mma, ...)");
        }
        let candidate = Candidate::registered(name, Config::default())?;
        crate::args::validate(&candidate, &problems, &attn_kernels::Limits::H100)?;
        step_forwards.push(candidate);
    }
    Ok(BackwardBenchRequest {
        problems,
        implementations: names.into_iter().map(|n| (n, overrides.clone())).collect(),
        backends,
        step_forwards,
        timing: args.timing(),
        seed: args.seed,
        suite: args.problems.suite_name(DEFAULT_SUITE),
        git: crate::provenance::git_revision(),
    })
}

/// Runs the backward bench; returns the process exit code.
pub fn run(args: &Args) -> anyhow::Result<u8> {
    let request = request(args)?;
    let mut budget = crate::budget::TimeBudget::new(args.time_budget)?;
    let gpu = Gpu::open(0)?;
    let mut bar: Option<Progress> = None;
    let mut show = |event: Event| crate::bench::show(&mut bar, event);
    let mut admit = || budget.admit().err();
    let run = run_backward_bench(&gpu, &request, &mut show, &mut admit)?;
    println!("{}", table(&run).to_markdown());
    let steps = attn_measure::bench::training_steps(&run);
    if !steps.is_empty() {
        println!("{}", step_table(&steps).to_markdown());
    }
    crate::bench::write_run(args, &run)?;
    Ok(0)
}

/// One row an entry: µs at the median and its spread, TFLOP/s over the backward's FLOPs.
fn table(run: &BenchRun) -> attn_report::table::Table {
    let mut table = attn_report::table::Table::new(&[
        "implementation",
        "shape",
        "median µs",
        "p10–p90 µs",
        "TFLOP/s (backward)",
        "SM MHz",
    ])
    .numeric(&[2, 4, 5]);
    for e in run.entries.iter().filter(|e| e.backward.is_some()) {
        table.push(vec![
            e.implementation.label(),
            e.shape.to_string(),
            attn_report::format::micros(e.summary.median),
            attn_report::format::micros_range(e.summary.p10, e.summary.p90),
            attn_report::format::tflops(e.tflops),
            e.sm_mhz.map_or("–".into(), |mhz| format!("{mhz:.0}")),
        ]);
    }
    table
}

/// One row a training step: its forward and backward medians, their sum and its TFLOP/s over
/// both passes' FLOPs.
fn step_table(steps: &[TrainingStep]) -> attn_report::table::Table {
    let mut table = attn_report::table::Table::new(&[
        "training step (forward + backward)",
        "shape",
        "forward µs",
        "backward µs",
        "step µs",
        "TFLOP/s (step)",
    ])
    .numeric(&[2, 3, 4, 5]);
    for s in steps {
        let (forward, backward) = s.median_us;
        table.push(vec![
            s.label.clone(),
            s.shape.to_string(),
            attn_report::format::micros(forward),
            attn_report::format::micros(backward),
            attn_report::format::micros(forward + backward),
            attn_report::format::tflops(s.tflops),
        ]);
    }
    table
}
