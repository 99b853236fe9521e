//! `cargo xtask gate --py FILE.py:FUNCTION`: a Python callable as the candidate, judged by
//! attn-measure's `PyGate` in a helper process of its own against the usual baselines, with the
//! prefill gate's plan, decision and evidence.

use anyhow::bail;
use attn_measure::baseline::PyCallable;
use attn_measure::gate::ended_case;
use attn_measure::py_gate::PyGate;
use attn_measure::sdpa::Sdpa;
use attn_measure::supervise::Watchdog;
use attn_measure::Baseline;
use attn_stats::CompareOptions;

use crate::gate::Args;

/// Everything about `--py SPEC` that needs no GPU and no Python, in one line: the callable's
/// form and file, and the options it cannot take.
pub fn check(args: &Args, spec: &str) -> anyhow::Result<PyCallable> {
    let callable = PyCallable::parse_as("--py ", spec)?;
    if !args.candidate.defines.is_empty() || !args.candidate.config.is_empty() {
        bail!(
            "--py {spec}: a Python callable takes no --define or --config (its knobs are its own)"
        );
    }
    if args.baseline.starts_with("rev:") {
        bail!("--py {spec}: --baseline rev:REF compares a kernel with its own history; give sdpa, fa3, cublas, a registered implementation or py:FILE.py:FUNCTION");
    }
    if args.sanitize.is_some() || args.plant.is_some() {
        bail!("--py {spec}: --sanitize and --plant run kernels of this process; a callable runs in the helper's");
    }
    Ok(callable)
}

/// Runs the gate on prefill problems with the callable as the candidate; `block` and `compare`
/// as validated by the caller.
pub fn run(
    args: &Args,
    callable: PyCallable,
    block: usize,
    compare: CompareOptions,
    seed: u64,
    mut budget: crate::budget::TimeBudget,
) -> anyhow::Result<u8> {
    let problems = args.problems.problems("seed")?;
    // The candidate's refusals first: a window is the callable's to refuse before any baseline's.
    for problem in &problems {
        if let Some(why) = attn_measure::sdpa::refusal(problem, attn_measure::sdpa::Backend::Py) {
            bail!("--py: {why}");
        }
    }
    let (name, backend) = (&args.baseline, args.sdpa_backend);
    crate::args::check_baseline(name, backend, &problems, Some(args.mode))?;
    // The callable's own helper: its module never shares a process with the baseline's timing.
    let helper = Sdpa::detect().map_err(|e| anyhow::anyhow!("--py needs PyTorch: {e}"))?;
    helper.load_callable(&callable.file, &callable.function)?;
    let (baseline, note) = Baseline::from_name(name, backend)?;
    for problem in &problems {
        baseline.check_supports(problem)?;
    }
    baseline.check_mode(args.mode)?;
    if let Some(note) = note {
        println!("{note}");
    }
    let gpu = attn_kernels::Gpu::open(0)?;
    let info = gpu.info();
    let plan = crate::gate::plan(args, &gpu, attn_evidence::GateMode::Faster, block, compare);
    let candidate = callable.implementation();
    println!(
        "gate: {} vs {} on {} ({} shape(s), seed {seed}, {} samples a side in blocks of {block}, {} mode; clocks left as found; the callable in a helper process of its own)",
        candidate.label(),
        baseline.implementation().label(),
        info.name,
        problems.len(),
        plan.interleave.timing.samples,
        args.mode
    );
    let watchdog = Watchdog::start(Box::new(move |what, bound| {
        println!(
            "  py: hang: {what} did not finish within {:.1} s",
            bound.as_secs_f64()
        );
        println!("\n**attn gate: FAILED** (hang; no evidence written)");
    }));
    let mut session = PyGate::new(&gpu, &helper, &baseline, &plan, Some(&watchdog));
    let clocks_before = attn_kernels::telemetry::read_clocks(0);
    let cases = crate::gate::judge_each(
        &problems,
        seed,
        &mut budget,
        || false,
        ended_case,
        |problem, seed| session.case(problem, seed),
    );
    let clocks_after = attn_kernels::telemetry::read_clocks(0);
    let versions = helper.versions();
    let provenance = crate::provenance::collect(&gpu, Some(&versions), clocks_before, clocks_after);
    let suite = args.problems.suite_name("seed");
    let run = crate::gate::gate_run(
        provenance,
        candidate,
        baseline.implementation(),
        suite,
        &plan,
        cases,
    );
    let evidence = (!args.no_evidence).then_some(args.evidence.as_path());
    crate::gate::finish(
        &run,
        args.markdown.as_deref(),
        evidence,
        args.matrix.print_run,
    )
}
