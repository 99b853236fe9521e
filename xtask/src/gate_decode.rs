//! `cargo xtask gate` on decode batches: the same arguments, plan and evidence as prefill, the
//! cases judged by attn-measure's `DecodeGate` (a decode implementation against a decode
//! implementation, PyTorch SDPA, which takes batches of equal lengths without a window, or
//! FlashInfer, which takes paged batches, ragged included).

use anyhow::bail;
use attn_evidence::GateMode;
use attn_kernels::decode::find_decode;
use attn_kernels::{Config, ConfigError};
use attn_measure::decode::{ended_decode_case, DecodeBaseline, DecodeGate};
use attn_measure::sdpa::Backend;
use attn_measure::supervise::Watchdog;
use attn_oracle::DecodeSpec;
use attn_stats::CompareOptions;

use crate::args::CandidateArgs;
use crate::gate::Args;

/// The decode implementation `--impl` names (default `decode`), checked before any GPU probe:
/// `--src` and a prefill implementation are refused in one line.
pub fn decode_candidate(args: &CandidateArgs) -> anyhow::Result<(String, Config)> {
    if let Some(src) = &args.src {
        bail!(
            "--src {}: a decode batch takes a registered decode implementation (--impl decode or decode-naive); --src decode kernels are not supported yet",
            src.display()
        );
    }
    let name = args
        .implementation
        .clone()
        .unwrap_or_else(|| "decode".into());
    if find_decode(&name).is_err() {
        if attn_kernels::registry::find(&name).is_ok() {
            bail!("--impl {name} is a prefill implementation: a decode batch takes decode or decode-naive");
        }
        find_decode(&name)?;
    }
    let overrides: Config = args
        .config
        .parse()
        .map_err(|e: ConfigError| anyhow::anyhow!("--config: {e}"))?;
    Ok((name, overrides))
}

/// Runs the gate on decode batches `specs`; `block` and `compare` as validated by the caller.
pub fn run(
    args: &Args,
    specs: Vec<DecodeSpec>,
    block: usize,
    compare: CompareOptions,
    seed: u64,
    mut budget: crate::budget::TimeBudget,
) -> anyhow::Result<u8> {
    let (candidate, overrides) = decode_candidate(&args.candidate)?;
    let baseline = DecodeBaseline::from_args(&args.baseline, args.sdpa_backend)?;
    for spec in &specs {
        baseline.check_supports(spec)?;
    }
    if args.sanitize.is_some() {
        bail!("--sanitize does not run decode kernels yet: gate decode without it");
    }
    if args.plant.is_some() {
        bail!("--plant does not apply to decode batches");
    }
    let gpu = attn_kernels::Gpu::open(0)?;
    // No fallback for decode: without PyTorch the sdpa baseline is refused, never replaced.
    let sdpa = match baseline {
        DecodeBaseline::Sdpa(_) => Some(attn_measure::sdpa::Sdpa::detect().map_err(|e| {
            anyhow::anyhow!("--baseline sdpa needs PyTorch ({e}): use --baseline decode-naive")
        })?),
        DecodeBaseline::Registered(_) => None,
    };
    if let (Some(sdpa), DecodeBaseline::Sdpa(Backend::Flashinfer)) = (&sdpa, &baseline) {
        // Imported before any case, so that a missing FlashInfer is one line, not every case's.
        let version = sdpa
            .probe_flashinfer()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("FlashInfer {version}");
    }
    let info = gpu.info();
    let plan = crate::gate::plan(args, &gpu, GateMode::Faster, block, compare);
    let timing = plan.interleave.timing;
    println!(
        "gate: {candidate} vs {} on {} ({} decode batch(es), seed {seed}, {} samples a side in blocks of {block}, {} mode; clocks left as found)",
        baseline.implementation().label(),
        info.name,
        specs.len(),
        timing.samples,
        args.mode
    );
    let watchdog = Watchdog::start(Box::new(move |what, bound| {
        println!(
            "  decode: hang: {what} did not finish within {:.1} s",
            bound.as_secs_f64()
        );
        println!("\n**attn gate: FAILED** (hang; no evidence written)");
    }));
    let mut session = DecodeGate::new(
        &gpu,
        &candidate,
        overrides,
        &baseline,
        &plan,
        Some(&watchdog),
    )?;
    if let Some(sdpa) = &sdpa {
        session = session.with_sdpa(sdpa);
    }
    let clocks_before = attn_kernels::telemetry::read_clocks(0);
    let lost = std::cell::Cell::new(false);
    let cases = crate::gate::judge_each(
        &specs,
        seed,
        &mut budget,
        || lost.get(),
        ended_decode_case,
        |spec, seed| {
            let case = session.case(spec, seed);
            lost.set(session.lost);
            case
        },
    );
    let clocks_after = attn_kernels::telemetry::read_clocks(0);
    let versions = sdpa.as_ref().map(attn_measure::sdpa::Sdpa::versions);
    let provenance =
        crate::provenance::collect(&gpu, versions.as_ref(), clocks_before, clocks_after);
    let (candidate, baseline) = (session.implementation(), baseline.implementation());
    let suite = args.problems.suite_name("seed");
    let run = crate::gate::gate_run(provenance, candidate, baseline, suite, &plan, cases);
    let evidence = (!args.no_evidence).then_some(args.evidence.as_path());
    crate::gate::finish(
        &run,
        args.markdown.as_deref(),
        evidence,
        args.matrix.print_run,
    )
}
