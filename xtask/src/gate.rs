//! `cargo xtask gate`: is a candidate kernel correct, and statistically faster than the baseline
//! (PyTorch SDPA by default) on this GPU?
//!
//! The pipeline is attn-measure's (`GateSession`): per shape, correctness on `--checks` fresh
//! inputs of several distributions (every element against the GPU reference, selected rows
//! against the f64 oracle, SDPA's output as a second reference), then candidate and baseline
//! timed in alternating blocks with every timed output verified and throttled blocks re-taken,
//! then one decision: candidate median ≤ threshold × baseline median AND the whole bootstrap CI of
//! (candidate − baseline) medians below zero, for a plausible result (a ratchet, `--baseline
//! rev:REF`: no regression instead). This module parses, prints and writes evidence. Exit codes:
//! 0 passed, 1 failed (a hang too), 2 could not run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use attn_evidence::{CaseStatus, GateRule, GateRun};
use attn_kernels::TimingOptions;
use attn_measure::gate::{ended_case, GatePlan, GateSession};
use attn_measure::provenance::fresh_seed;
use attn_measure::sanitize;
use attn_measure::sdpa::Backend;
use attn_measure::supervise::Watchdog;
use attn_measure::timing::{default_block, Interleave};
use attn_measure::Baseline;
use attn_stats::{BootstrapOptions, CompareOptions};

use crate::args::{CandidateArgs, ProblemArgs};

/// Arguments of `cargo xtask gate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub candidate: CandidateArgs,
    #[command(flatten)]
    pub problems: ProblemArgs,
    /// What to beat: sdpa (falls back to cublas without PyTorch), fa3 (FlashAttention-3 through
    /// JAX, its library in ATTN_FA3_LIB; --mode batch), cublas, a registered implementation,
    /// py:FILE.py:FUNCTION (your Python callable, fn(q, k, v, scale=, causal=) -> O, timed with
    /// fresh inputs and every output checked), or rev:REF, the candidate as committed at git
    /// revision REF (a ratchet: fails only on a regression). With --pass backward: a backward implementation, or sdpa (or sdpa:cudnn,
    /// sdpa:flash, sdpa:efficient, sdpa:math), PyTorch SDPA's backward through autograd, no
    /// fallback, or fa3, FlashAttention-3's backward (--mode batch).
    #[arg(long, default_value = "sdpa")]
    pub baseline: String,
    /// SDPA backend: default, flash, efficient, cudnn, math; or PyTorch's kernels for what SDPA
    /// has none for (no cublas fallback): varlen, varlen_attn (FlashAttention-2 with offsets and a
    /// window: varlen batches and windows), flex, FlexAttention compiled with a block mask
    /// (windows, dense batches); or flashinfer, FlashInfer's paged decode (decode batches only).
    #[arg(long, default_value = "default")]
    pub sdpa_backend: Backend,
    /// Fresh random inputs per shape that must all pass before timing; they cycle through normal,
    /// large-logit, peaky, constant-row and small-variance inputs.
    #[arg(long, default_value_t = 5)]
    pub checks: usize,
    /// Base seed (default: a new one each run, recorded in the evidence).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Clean timed samples per side.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Samples per block: after a warm-up block of each, baseline and candidate blocks alternate,
    /// each side first in every other round (B A, A B, ...), and the intervals resample whole
    /// blocks. Default: a tenth of --samples (at least 1), so ten blocks a side; at least 4.
    #[arg(long)]
    pub block: Option<usize>,
    /// Untimed launches first.
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Timing mode, the same for both sides: graph (L2 flushed, each launch replayed from a CUDA
    /// graph so that host launch overhead stays out), flushed (plain launches), or batch.
    #[arg(long, default_value = "graph")]
    pub mode: attn_kernels::TimingMode,
    /// Gate: candidate median ≤ THRESHOLD × baseline median.
    #[arg(long, default_value_t = 0.95)]
    pub threshold: f64,
    /// Ratchet (--baseline rev:REF): a regression is a median above (1 + this) × the baseline's.
    #[arg(long, default_value_t = 0.02)]
    pub regression_tolerance: f64,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    /// A candidate launch running longer than max(this many seconds, 100× the baseline's median)
    /// is a hang: the gate reports it and ends (exit 1).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = crate::args::seconds)]
    pub hang_bound: f64,
    /// Start no shape that would not finish within this many seconds of the run's start (judged
    /// by the longest shape so far): the rest are "could not run", and the evidence of the shapes
    /// run is written, where a run killed from outside writes none.
    #[arg(long, value_name = "SECONDS", value_parser = crate::args::seconds)]
    pub time_budget: Option<f64>,
    /// Let a result faster than the device's peak, or over 10× the baseline, pass: a person has
    /// looked at it.
    #[arg(long)]
    pub allow_implausible: bool,
    /// Also write the result as markdown (PR comment / job summary) to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Evidence folder (the run goes to <DIR>/gate/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Write no evidence file.
    #[arg(long)]
    pub no_evidence: bool,
    /// First compute-sanitizer's memcheck and racecheck at small shapes (PATH: the program): a
    /// finding fails the run before any timing.
    #[arg(long, num_args = 0..=1, default_missing_value = "compute-sanitizer", value_name = "PATH")]
    pub sanitize: Option<PathBuf>,
    /// A Python callable as the candidate, `FILE.py:FUNCTION`: `fn(q, k, v, scale=, causal=) -> O`
    /// on [B, H, S, D] tensors, called in a helper process of its own on the gate's inputs,
    /// every check and timed output verified (instead of --impl, --src or --triton; prefill
    /// shapes without a window).
    #[arg(long, conflicts_with_all = ["implementation", "src", "triton", "replay"])]
    pub py: Option<String>,
    /// Recompute the decision from a stored evidence file (no GPU needed).
    #[arg(long, conflicts_with_all = ["implementation", "src", "shapes", "suite"])]
    pub replay: Option<PathBuf>,
    /// Which pass to judge: forward, or backward (dQ, dK and dV of a backward implementation or
    /// `--src` backward kernel, default backward-mma, against --baseline backward-naive, another
    /// backward implementation or sdpa[:BACKEND], PyTorch SDPA's backward; default suite train).
    #[arg(long, value_enum, default_value_t = Pass::Forward)]
    pub pass: Pass,
    /// --on ray: the run as a matrix on a Ray cluster.
    #[command(flatten)]
    pub matrix: crate::matrix::MatrixArgs,
    /// Plant a fault to test the guards: `side-stream` (hidden work on another stream).
    #[arg(long, hide = true)]
    pub plant: Option<String>,
}

/// The pass a gate run judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pass {
    /// The attention forward (prefill, or decode batches).
    Forward,
    /// The training backward: dQ, dK, dV from Q, K, V, O, dO and the LSE.
    Backward,
}

/// The comparison's options from the arguments and the run's seed, validated.
fn compare_options(args: &Args, seed: u64) -> anyhow::Result<CompareOptions> {
    let compare = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: args.resamples,
            seed,
            ..BootstrapOptions::default()
        },
        gate_threshold: args.threshold,
        ..CompareOptions::default()
    };
    compare.validate()?;
    Ok(compare)
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(path) = &args.replay {
        return replay(path);
    }
    if args.matrix.on.is_some() {
        if args.time_budget.is_some() || args.markdown.is_some() {
            bail!("--time-budget and --markdown are a run's on one machine: on Ray each task is bounded by --task-timeout and recorded in the matrix");
        }
        let suite = match args.pass {
            Pass::Backward => crate::gate_backward::DEFAULT_SUITE,
            Pass::Forward => "seed",
        };
        let (matrix, problems) = (&args.matrix, &args.problems);
        return crate::matrix::run("gate", matrix, problems, suite, &args.evidence);
    }
    // Everything that needs no GPU is checked first.
    if !(0.0..=1.0).contains(&args.threshold) || args.threshold == 0.0 {
        bail!("--threshold must be in (0, 1], got {}", args.threshold);
    }
    if args.checks == 0 || args.samples < 2 || args.block == Some(0) {
        bail!("--checks and --block must be at least 1 and --samples at least 2");
    }
    let block = args.block.unwrap_or_else(|| default_block(args.samples));
    if attn_evidence::too_few_blocks(block, args.samples.div_ceil(block)) {
        bail!(
            "--block {block} leaves {} block(s) of --samples {} a side; the gate needs at least {} (blocks share a clock: with 2 a side, hopper against itself read 1.09× faster)",
            args.samples.div_ceil(block),
            args.samples,
            attn_evidence::MIN_BLOCKS_A_SIDE
        );
    }
    let mut budget = crate::budget::TimeBudget::new(args.time_budget)?;
    let side_stream = match args.plant.as_deref() {
        None => false,
        Some("side-stream") => true,
        Some(other) => bail!("unknown --plant {other} (known: side-stream)"),
    };
    let decode = args.problems.decode_problems()?;
    if let Some(spec) = &args.py {
        if args.pass == Pass::Backward || decode.is_some() {
            bail!("--py {spec}: a callable is gated on the forward of prefill shapes");
        }
        let callable = crate::gate_py::check(&args, spec)?;
        let seed = args.seed.unwrap_or_else(fresh_seed);
        let compare = compare_options(&args, seed)?;
        return crate::gate_py::run(&args, callable, block, compare, seed, budget);
    }
    if args.pass == Pass::Backward {
        if decode.is_some() {
            bail!("--pass backward takes prefill shapes or suites: a decode batch has no backward pass here");
        }
        let seed = args.seed.unwrap_or_else(fresh_seed);
        let compare = compare_options(&args, seed)?;
        return crate::gate_backward::run(&args, block, compare, seed, budget);
    }
    if let Some(specs) = decode {
        let seed = args.seed.unwrap_or_else(fresh_seed);
        let compare = compare_options(&args, seed)?;
        return crate::gate_decode::run(&args, specs, block, compare, seed, budget);
    }
    let problems = args.problems.problems("seed")?;
    let chosen = args.candidate.checked(&problems)?;
    let (name, backend) = (&args.baseline, args.sdpa_backend);
    crate::args::check_baseline(name, backend, &problems, Some(args.mode))?;
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let compare = compare_options(&args, seed)?;
    // A named candidate is checked before any probe; the device's best once the GPU is open.
    let (candidate, gpu) = chosen.resolve(&problems)?;
    // The request is whole: now the tools.
    let sanitizer = args.sanitize.as_deref().map(sanitize::find).transpose()?;

    let evidence = (!args.no_evidence).then_some(args.evidence.as_path());
    if let Some(sanitizer) = &sanitizer {
        let small = sanitize::small_shapes(problems.iter().map(|p| &p.spec));
        let target = attn_measure::profile::Target::new(&candidate, small, 0)?;
        let implementation = attn_measure::baseline::candidate_implementation(&candidate, None);
        if !crate::sanitize::before_timing(sanitizer, &target, implementation, evidence)? {
            return Ok(crate::EXIT_FAILED);
        }
    }
    let (baseline, note) = Baseline::for_candidate(&args.baseline, args.sdpa_backend, &candidate)?;
    // A problem the baseline cannot run (SDPA on a window or a varlen batch, an implementation
    // outside its variants) is refused here, in one line, before the GPU is opened.
    for problem in &problems {
        baseline.check_supports(problem)?;
    }
    baseline.check_mode(args.mode)?;
    let mode = baseline.gate_mode(args.regression_tolerance)?;
    if let Some(note) = note {
        println!("{note}");
    }
    let gpu = crate::args::opened(gpu)?;
    let info = gpu.info();
    let plan = plan(&args, &gpu, mode, block, compare);
    let timing = plan.interleave.timing;
    println!(
        "gate: {} vs {} on {} ({} shape(s), seed {seed}, {} samples a side in blocks of {}, {} mode; clocks left as found)",
        candidate.label(),
        baseline.implementation().label(),
        info.name,
        problems.len(),
        timing.samples,
        block,
        args.mode
    );
    let current = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shown = std::sync::Arc::clone(&current);
    let watchdog = Watchdog::start(Box::new(move |what, bound| {
        let shape = shown.lock().map(|s| s.clone()).unwrap_or_default();
        println!(
            "  {shape}: hang: {what} did not finish within {:.1} s",
            bound.as_secs_f64()
        );
        println!("\n**attn gate: FAILED** (hang on {shape}; no evidence written)");
    }));
    let mut session = GateSession::new(&gpu, &candidate, &baseline, &plan, Some(&watchdog));
    if side_stream {
        session.plant_side_stream_work()?;
    }
    let clocks_before = attn_kernels::telemetry::read_clocks(0);
    let mut cases = Vec::new();
    let bar = crate::progress::Progress::logged(problems.len() as u64, "gate");
    for (i, problem) in problems.iter().enumerate() {
        if session.lost {
            cases.push(ended_case(
                problem,
                CaseStatus::CouldNotRun,
                "not run: an earlier fault lost the CUDA context".into(),
            ));
            continue;
        }
        if let Err(why) = budget.admit() {
            bar.println(format!("  {problem}: {why}"));
            bar.inc(1);
            cases.push(ended_case(problem, CaseStatus::CouldNotRun, why));
            continue;
        }
        *current.lock().unwrap_or_else(|e| e.into_inner()) = problem.to_string();
        bar.step(problem.to_string());
        let case = session.case(problem, seed.wrapping_add(1_000_003 * i as u64));
        let defences = attn_evidence::defences_line(&case.defences)
            .map_or_else(String::new, |line| format!("; {line}"));
        bar.println(format!("  {}: {}{defences}", case.shape, case.reason));
        bar.inc(1);
        cases.push(case);
    }
    bar.finish_and_clear();
    let clocks_after = attn_kernels::telemetry::read_clocks(0);

    let torch = baseline.sdpa().map(|s| s.info.clone());
    let provenance = crate::provenance::collect(&gpu, torch.as_ref(), clocks_before, clocks_after);
    let run = session.record(
        &problems,
        cases,
        provenance,
        args.problems.suite_name("seed"),
    );
    finish(
        &run,
        args.markdown.as_deref(),
        evidence,
        args.matrix.print_run,
    )
}

fn replay(path: &std::path::Path) -> anyhow::Result<u8> {
    let stored = match attn_evidence::read(path)? {
        attn_evidence::Evidence::Gate(run) => run,
        _ => bail!("{} is not a gate evidence file", path.display()),
    };
    let replayed = attn_measure::replay::replay(&stored)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    println!(
        "replaying {} ({} on {}, {})",
        path.display(),
        stored.candidate.label(),
        stored.provenance.gpu,
        stored.provenance.date
    );
    print!("{}", attn_report::gate::markdown(&replayed.run));
    if !replayed.same {
        println!("REPLAY DIFFERS from the stored decision");
        return Ok(crate::EXIT_FAILED);
    }
    println!("replay reproduces the stored decision exactly");
    Ok(if replayed.run.passed {
        0
    } else {
        crate::EXIT_FAILED
    })
}

/// Shows `run` and writes it: the markdown to `markdown_path`, the evidence under `evidence`; with
/// `print_run` (a matrix task) the run as one JSON line last instead of the evidence file.
pub(crate) fn finish(
    run: &GateRun,
    markdown_path: Option<&std::path::Path>,
    evidence: Option<&std::path::Path>,
    print_run: bool,
) -> anyhow::Result<u8> {
    let text = attn_report::gate::markdown(run);
    println!("\n{text}");
    if let Some(path) = markdown_path {
        attn_evidence::write_bytes_atomic(path, text.as_bytes())?;
    }
    if print_run {
        println!("{}", serde_json::to_string(run)?);
    } else if let Some(root) = evidence {
        let p = &run.provenance;
        let path = attn_evidence::evidence_path(root, "gate", &p.date, &p.gpu, &p.git_rev);
        attn_evidence::write_json_atomic(&path, run)?;
        println!("evidence: {}", path.display());
    }
    Ok(if run.passed { 0 } else { crate::EXIT_FAILED })
}

/// The cases of a decode, backward or py run: each of `items` judged by `judge` with its own
/// seed (from `seed` and its index) and its line printed, unless `lost` says an earlier fault
/// lost the CUDA context or the budget admits no more; those are `ended` as could not run.
pub(crate) fn judge_each<T: std::fmt::Display>(
    items: &[T],
    seed: u64,
    budget: &mut crate::budget::TimeBudget,
    mut lost: impl FnMut() -> bool,
    ended: impl Fn(&T, attn_evidence::CaseStatus, String) -> attn_evidence::GateCase,
    mut judge: impl FnMut(&T, u64) -> attn_evidence::GateCase,
) -> Vec<attn_evidence::GateCase> {
    let could_not = attn_evidence::CaseStatus::CouldNotRun;
    let mut cases = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if lost() {
            let why = "not run: an earlier fault lost the CUDA context".to_string();
            cases.push(ended(item, could_not, why));
            continue;
        }
        if let Err(why) = budget.admit() {
            println!("  {item}: {why}");
            cases.push(ended(item, could_not, why));
            continue;
        }
        let case = judge(item, seed.wrapping_add(1_000_003 * i as u64));
        let defences = attn_evidence::defences_line(&case.defences)
            .map_or_else(String::new, |line| format!("; {line}"));
        println!("  {item}: {}{defences}", case.reason);
        cases.push(case);
    }
    cases
}

/// A decode or backward run's record from its cases (passed when every case passed), judged by
/// `plan`; the prefill gate's is `GateSession::record`.
pub(crate) fn gate_run(
    provenance: attn_evidence::Provenance,
    candidate: attn_evidence::Implementation,
    baseline: attn_evidence::Implementation,
    suite: Option<String>,
    plan: &GatePlan,
    cases: Vec<attn_evidence::GateCase>,
) -> GateRun {
    let passed = !cases.is_empty() && cases.iter().all(|c| c.passed);
    GateRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: attn_evidence::EvidenceKind::Gate,
        provenance,
        candidate,
        baseline,
        suite,
        options: plan.compare,
        rule: plan.rule.clone(),
        cases,
        passed,
    }
}

/// How every case of a gate run is judged, from its arguments (`mode`: faster, or no regression;
/// `block` and `compare` as validated), on `gpu`: for prefill and decode alike.
pub(crate) fn plan(
    args: &Args,
    gpu: &attn_kernels::Gpu,
    mode: attn_evidence::GateMode,
    block: usize,
    compare: CompareOptions,
) -> GatePlan {
    let timing = TimingOptions {
        warmup: args.warmup,
        samples: args.samples,
        mode: args.mode,
        ..TimingOptions::default()
    };
    GatePlan {
        checks: args.checks,
        interleave: Interleave {
            block,
            ..Interleave::new(timing, gpu.info().max_sm_mhz)
        },
        compare,
        rule: GateRule {
            mode,
            allow_implausible: args.allow_implausible,
            hang_bound_s: Some(args.hang_bound),
            ..GateRule::default()
        },
        hang_floor: Duration::from_secs_f64(args.hang_bound),
        hang_factor: 100.0,
        peak_tflops: attn_measure::provenance::peak_tflops(gpu),
    }
}
