//! `cargo xtask gate --pass backward`: the same arguments, plan and evidence as the forward, the
//! cases judged by attn-measure's `BackwardGate` (a backward implementation or `--src` backward
//! kernel against a registered backward implementation or PyTorch SDPA's backward).

use anyhow::bail;
use attn_evidence::GateMode;
use attn_kernels::{Config, ConfigError};
use attn_measure::backward::{
    ended_backward_case, BackwardBaseline, BackwardCandidate, BackwardGate,
};
use attn_measure::profile::Target;
use attn_measure::sanitize;
use attn_measure::supervise::Watchdog;
use attn_stats::CompareOptions;

use crate::args::CandidateArgs;
use crate::gate::Args;

/// The suite a backward gate runs without --shape or --suite.
pub const DEFAULT_SUITE: &str = "train";

/// The backward kernel `--impl` or `--src` names (default `backward-mma`), checked before any
/// GPU probe: a forward implementation and `--entry` are refused in one line.
pub fn backward_candidate(args: &CandidateArgs) -> anyhow::Result<BackwardCandidate> {
    if let Some(path) = &args.src {
        if args.entry.is_some() {
            bail!("--entry does not apply to a backward kernel: its entry points are attn_bwd_pre, attn_bwd and attn_bwd_post (kernels/README.md)");
        }
        if !path.is_file() {
            bail!("--src {}: no such file", path.display());
        }
        let defines: Config = args
            .defines
            .join(",")
            .parse()
            .map_err(|e: ConfigError| anyhow::anyhow!("--define: {e}"))?;
        return Ok(BackwardCandidate::Source {
            path: path.clone(),
            defines,
        });
    }
    let name = args
        .implementation
        .clone()
        .unwrap_or_else(|| "backward-mma".into());
    let overrides: Config = args
        .config
        .parse()
        .map_err(|e: ConfigError| anyhow::anyhow!("--config: {e}"))?;
    if attn_kernels::backward::find_backward(&name).is_err()
        && attn_kernels::registry::find(&name).is_ok()
    {
        bail!("--impl {name} is a forward implementation: --pass backward takes backward-mma, backward-naive or a --src backward kernel");
    }
    Ok(BackwardCandidate::registered(&name, overrides)?)
}

/// Runs the gate on the backward of `args`' problems; `block` and `compare` as validated by the
/// caller.
pub fn run(
    args: &Args,
    block: usize,
    compare: CompareOptions,
    seed: u64,
    mut budget: crate::budget::TimeBudget,
) -> anyhow::Result<u8> {
    let problems = args.problems.problems(DEFAULT_SUITE)?;
    let candidate = backward_candidate(&args.candidate)?;
    let baseline = BackwardBaseline::from_name(&args.baseline, args.sdpa_backend)?;
    baseline.check_mode(args.mode)?;
    for problem in &problems {
        candidate.check_supports(problem)?;
        baseline.check_supports(problem)?;
    }

    if args.plant.is_some() {
        bail!("--plant does not apply to the backward pass");
    }
    // The request is whole: now the tools and the helper (PyTorch was asked for, so there is no
    // fallback).
    let sanitizer = args.sanitize.as_deref().map(sanitize::find).transpose()?;
    let evidence = (!args.no_evidence).then_some(args.evidence.as_path());
    if let Some(sanitizer) = &sanitizer {
        let small = sanitize::small_shapes(problems.iter().map(|p| &p.spec));
        let target = Target::backward(&candidate, small, 0);
        if !crate::sanitize::before_timing(
            sanitizer,
            &target,
            candidate.implementation(),
            evidence,
        )? {
            return Ok(crate::EXIT_FAILED);
        }
    }
    let sdpa = baseline
        .sdpa_backend()
        .map(|_| attn_measure::sdpa::Sdpa::detect())
        .transpose()?;
    let gpu = attn_kernels::Gpu::open(0)?;
    let info = gpu.info();
    let plan = crate::gate::plan(args, &gpu, GateMode::Faster, block, compare);
    let timing = plan.interleave.timing;
    println!(
        "gate (backward): {} vs {} on {} ({} shape(s), seed {seed}, {} samples a side in blocks of {block}, {} mode; clocks left as found)",
        candidate.implementation().label(),
        baseline.implementation().label(),
        info.name,
        problems.len(),
        timing.samples,
        args.mode
    );
    let watchdog = Watchdog::start(Box::new(move |what, bound| {
        println!(
            "  backward: hang: {what} did not finish within {:.1} s",
            bound.as_secs_f64()
        );
        println!("\n**attn gate: FAILED** (hang; no evidence written)");
    }));
    let mut session = BackwardGate::new(&gpu, &candidate, &baseline, &plan, Some(&watchdog))
        .with_sdpa(sdpa.as_ref());
    let clocks_before = attn_kernels::telemetry::read_clocks(0);
    let lost = std::cell::Cell::new(false);
    let cases = crate::gate::judge_each(
        &problems,
        seed,
        &mut budget,
        || lost.get(),
        ended_backward_case,
        |problem, seed| {
            let case = session.case(problem, seed);
            lost.set(session.lost);
            case
        },
    );
    let clocks_after = attn_kernels::telemetry::read_clocks(0);
    let torch = sdpa.as_ref().map(|s| s.info.clone());
    let provenance = crate::provenance::collect(&gpu, torch.as_ref(), clocks_before, clocks_after);
    let (candidate, baseline) = (candidate.implementation(), baseline.implementation());
    let suite = args.problems.suite_name(DEFAULT_SUITE);
    let run = crate::gate::gate_run(provenance, candidate, baseline, suite, &plan, cases);
    crate::gate::finish(
        &run,
        args.markdown.as_deref(),
        evidence,
        args.matrix.print_run,
    )
}
