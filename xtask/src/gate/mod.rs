//! `cargo xtask gate`: is a candidate kernel correct, and statistically faster than the baseline
//! (PyTorch SDPA by default) on this GPU?
//!
//! Per shape: correctness first, on `--checks` fresh random inputs against the f64 oracle (and
//! against SDPA's own output when PyTorch is there), with poisoned outputs and a stale-output check;
//! a failing candidate is not timed. Then candidate and baseline are timed with the same protocol,
//! and attn-stats decides: candidate median ≤ threshold × baseline median AND the whole bootstrap CI
//! of (candidate − baseline) medians below zero. Exit codes: 0 passed, 1 failed, 2 could not run.

pub mod sdpa;
pub mod suites;

use std::path::PathBuf;

use anyhow::{bail, Context};
use attn_evidence::{CorrectnessCheck, GateCase, GateRun, ShapeSpec};
use attn_kernels::{planted::SideStreamWork, Candidate, Config, Gpu, TimingMode, TimingOptions};
use attn_oracle::{compare, npy, tolerance, Distribution};
use attn_report::{format, table::Table};
use attn_stats::{BootstrapOptions, CompareOptions, Sample};

use crate::measure::{self, Baseline, PreparedCache};

/// Arguments of `cargo xtask gate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Registered implementation to gate (default: IMPL, then the best registered one).
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Knob overrides for --impl, `K=V,K=V`.
    #[arg(long, default_value = "")]
    pub config: String,
    /// Your own kernel file following kernels/README.md's ABI (instead of --impl).
    #[arg(long, conflicts_with = "implementation")]
    pub src: Option<PathBuf>,
    /// Entry point of --src.
    #[arg(long, requires = "src")]
    pub entry: Option<String>,
    /// Defines for --src, `K=V` (repeatable); BLOCK_M, NUM_WARPS, SHARED_BYTES set its geometry.
    #[arg(long = "define", requires = "src")]
    pub defines: Vec<String>,
    /// A shape `B,H,S,D` or `B,H,SQ,SKV,D` (repeatable).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Causal mask for --shape.
    #[arg(long)]
    pub causal: bool,
    /// fp16 or bf16.
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    /// A named suite: seed, large, sweep (default: seed, when no --shape).
    #[arg(long)]
    pub suite: Option<String>,
    /// What to beat: sdpa (falls back to cublas without PyTorch), cublas, or a registered implementation.
    #[arg(long, default_value = "sdpa")]
    pub baseline: String,
    /// SDPA backend: default, flash, efficient, cudnn, math.
    #[arg(long, default_value = "default", value_parser = ["default", "flash", "efficient", "cudnn", "math"])]
    pub sdpa_backend: String,
    /// Fresh random inputs per shape that must all pass before timing.
    #[arg(long, default_value_t = 5)]
    pub checks: usize,
    /// Base seed (default: a new one each run, recorded in the evidence).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Timed samples per side.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Untimed launches first.
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Timing mode, the same for both sides: graph (L2 flushed, each launch replayed from a CUDA
    /// graph so that host launch overhead stays out), flushed (plain launches), or batch.
    #[arg(long, default_value = "graph", value_parser = ["graph", "flushed", "batch"])]
    pub mode: String,
    /// Gate: candidate median ≤ THRESHOLD × baseline median.
    #[arg(long, default_value_t = 0.95)]
    pub threshold: f64,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    /// Also write the result as markdown (PR comment / job summary) to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Evidence folder (the run goes to <DIR>/gate/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Write no evidence file.
    #[arg(long)]
    pub no_evidence: bool,
    /// Recompute the decision from a stored evidence file (no GPU needed).
    #[arg(long, conflicts_with_all = ["implementation", "src", "shapes", "suite"])]
    pub replay: Option<PathBuf>,
    /// Plant a fault to test the guards: `side-stream` (hidden work on another stream).
    #[arg(long, hide = true)]
    pub plant: Option<String>,
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(path) = &args.replay {
        return replay(path);
    }
    if !(0.0..=1.0).contains(&args.threshold) || args.threshold == 0.0 {
        bail!("--threshold must be in (0, 1], got {}", args.threshold);
    }
    if args.checks == 0 || args.samples < 2 {
        bail!("--checks must be at least 1 and --samples at least 2");
    }
    let shapes = shapes(&args)?;
    let candidate = match &args.src {
        Some(path) => {
            Candidate::from_file(path, args.entry.as_deref(), parse_defines(&args.defines)?)?
        }
        None => {
            let implementation = attn_kernels::registry::select(args.implementation.as_deref())?;
            Candidate::Registered {
                implementation,
                overrides: args.config.parse().map_err(anyhow::Error::msg)?,
            }
        }
    };
    let mut side = match args.plant.as_deref() {
        None => None,
        Some("side-stream") => Some(()),
        Some(other) => bail!("unknown --plant {other} (known: side-stream)"),
    };
    let gpu = Gpu::open(0)?;
    let baseline = measure::baseline(&args.baseline, &args.sdpa_backend)?;
    let mut side_work = match side.take() {
        Some(()) => Some(SideStreamWork::new(&gpu)?),
        None => None,
    };
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let options = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: args.resamples,
            seed,
            ..BootstrapOptions::default()
        },
        gate_threshold: args.threshold,
        ..CompareOptions::default()
    };
    options.validate()?;
    let timing = TimingOptions {
        warmup: args.warmup,
        samples: args.samples,
        mode: match args.mode.as_str() {
            "batch" => TimingMode::Batch,
            "flushed" => TimingMode::Flushed,
            _ => TimingMode::Graph,
        },
        ..TimingOptions::default()
    };
    println!(
        "gate: {} vs {} on {} ({} shape(s), seed {seed}, {} samples {} mode; clocks left as found)",
        candidate.label(),
        baseline.implementation().label(),
        gpu.info().name,
        shapes.len(),
        timing.samples,
        args.mode
    );

    let mut cache = PreparedCache::default();
    let mut cases = Vec::new();
    let clocks_before = attn_kernels::telemetry::read_clocks(0);
    for (i, spec) in shapes.iter().enumerate() {
        let case_seed = seed.wrapping_add(1_000_003 * i as u64);
        let case = gate_case(
            &gpu,
            &candidate,
            &baseline,
            &mut cache,
            spec,
            &timing,
            &options,
            case_seed,
            args.checks,
            side_work.as_mut(),
        );
        let case = match case {
            Ok(case) => case,
            Err(err) => {
                // A fault (illegal address, launch failure) poisons the CUDA context: stop here.
                let reason = crate::one_line(&err);
                println!("  {spec}: could not run: {reason}");
                let mut failed = empty_case(spec.clone());
                failed.reason = format!("could not run: {reason}");
                cases.push(failed);
                break;
            }
        };
        println!("  {}: {}", case.shape, case.reason);
        cases.push(case);
    }
    let clocks_after = attn_kernels::telemetry::read_clocks(0);

    // The run's config: the defaults (plus overrides) resolved for the first shape, without
    // compiling anything more; each case records the config it actually ran.
    let resolved = match &candidate {
        Candidate::Registered {
            implementation,
            overrides,
        } => implementation
            .resolve(overrides, shapes[0].head_dim, &gpu.limits())
            .ok(),
        Candidate::Source { .. } => None,
    };
    let torch = match &baseline {
        Baseline::Sdpa { sdpa, .. } => Some(sdpa.info.clone()),
        Baseline::Registered(_) => None,
    };
    let passed = !cases.is_empty() && cases.iter().all(|c| c.passed) && cases.len() == shapes.len();
    let run = GateRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: "gate".into(),
        provenance: crate::provenance::collect(&gpu, torch.as_ref(), clocks_before, clocks_after),
        candidate: measure::candidate_implementation(&candidate, resolved.as_ref()),
        baseline: baseline.implementation(),
        suite: if args.shapes.is_empty() {
            Some(args.suite.clone().unwrap_or_else(|| "seed".into()))
        } else {
            None
        },
        options,
        cases,
        passed,
    };
    finish(
        &run,
        args.markdown.as_deref(),
        (!args.no_evidence).then_some(args.evidence.as_path()),
    )
}

fn parse_defines(defines: &[String]) -> anyhow::Result<Config> {
    defines
        .join(",")
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--define: {e}"))
}

fn shapes(args: &Args) -> anyhow::Result<Vec<ShapeSpec>> {
    if !args.shapes.is_empty() {
        if args.suite.is_some() {
            bail!("give --shape or --suite, not both");
        }
        return args
            .shapes
            .iter()
            .map(|s| {
                let mut spec: ShapeSpec = s.parse().with_context(|| format!("--shape {s}"))?;
                spec.causal |= args.causal;
                spec.dtype = args.dtype.clone();
                measure::problem(&spec)?;
                Ok(spec)
            })
            .collect();
    }
    let specs = suites::suite(args.suite.as_deref().unwrap_or("seed"), &args.dtype)?;
    for spec in &specs {
        measure::problem(spec)?;
    }
    Ok(specs)
}

fn empty_case(shape: ShapeSpec) -> GateCase {
    GateCase {
        shape,
        config: Default::default(),
        correctness: vec![],
        candidate: None,
        baseline: None,
        comparison: None,
        candidate_tflops: None,
        baseline_tflops: None,
        flags: vec![],
        passed: false,
        reason: String::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn gate_case(
    gpu: &Gpu,
    candidate: &Candidate,
    baseline: &Baseline,
    cache: &mut PreparedCache,
    spec: &ShapeSpec,
    timing: &TimingOptions,
    options: &CompareOptions,
    seed: u64,
    checks: usize,
    side: Option<&mut SideStreamWork>,
) -> anyhow::Result<GateCase> {
    let (shape, dtype, _) = measure::problem(spec)?;
    let mut case = empty_case(spec.clone());
    let candidate = &candidate.for_shape(&shape);
    let prepared = cache.get(gpu, "candidate", candidate, dtype, shape.head_dim)?;
    case.config = prepared.config().to_strings();
    case.correctness = correctness(gpu, prepared, baseline, spec, seed, checks)?;
    if let Some(bad) = case.correctness.iter().find(|c| !c.passed) {
        case.reason = format!(
            "incorrect (seed {}): {}",
            bad.seed,
            bad.reason.clone().unwrap_or_default()
        );
        return Ok(case);
    }
    let prepared = cache.get(gpu, "candidate", candidate, dtype, shape.head_dim)?;
    let (cand, before, after) =
        measure::time_prepared(gpu, prepared, spec, timing, seed ^ 0x5eed, side)?;
    let base = baseline.time(gpu, cache, spec, timing, seed ^ 0xba5e)?;
    let comparison = attn_stats::compare(
        &Sample::new(base.samples_us.clone())?,
        &Sample::new(cand.samples_us.clone())?,
        options,
    )?;
    case.candidate_tflops = Some(spec.tflops(comparison.candidate.median));
    case.baseline_tflops = Some(spec.tflops(comparison.baseline.median));
    case.flags.extend(crate::provenance::clock_flag(
        before,
        after,
        gpu.info().max_sm_mhz,
    ));
    if comparison.speedup.point > 10.0 {
        case.flags.push(format!(
            "speedup {:.1}x is above 10x: look again before believing it",
            comparison.speedup.point
        ));
    }
    println!(
        "    guard pass: {} µs per launch by the timed stream's events, {} µs device-synchronised",
        format::micros(measure::median(&cand.guard_event_us)),
        format::micros(measure::median(&cand.wall_us))
    );
    let escaped = escaped_work(&cand.guard_event_us, &cand.wall_us);
    let gate_passed = comparison.gate.passed;
    let speed = format!(
        "{} vs {} µs, speedup {}, {}",
        format::micros(comparison.candidate.median),
        format::micros(comparison.baseline.median),
        format::speedup_ci(
            comparison.speedup.point,
            comparison.speedup.lower,
            comparison.speedup.upper
        ),
        comparison.verdict
    );
    case.reason = match &escaped {
        Some(why) => format!("rejected: {why}"),
        None if gate_passed => format!("passed: {speed}"),
        None => format!("not faster enough: {speed} (gate: ≤ {:.2}× baseline median, CI of the difference below 0)", options.gate_threshold),
    };
    case.passed = gate_passed && escaped.is_none();
    case.flags.extend(escaped);
    case.candidate = Some(measure::timing_evidence(&cand));
    case.baseline = Some(measure::timing_evidence(&base));
    case.comparison = Some(comparison);
    Ok(case)
}

/// Work that escaped the timed stream: in the guard pass, the device-synchronised host time per
/// launch exceeds the same launches' event time by more than launch and synchronisation overhead
/// can explain.
fn escaped_work(event_us: &[f64], wall_us: &[f64]) -> Option<String> {
    let (event, wall) = (measure::median(event_us), measure::median(wall_us));
    (wall.is_finite() && event.is_finite() && wall - event > (0.5 * event).max(50.0)).then(|| {
        format!(
            "device-synchronised wall time {} µs per launch vs {} µs by the timed stream's events: work escapes the timed stream (another stream?)",
            format::micros(wall),
            format::micros(event)
        )
    })
}

/// The correctness checks of one shape ([`measure::run_checks`]), with SDPA's own output on the same
/// inputs as a second reference when PyTorch is the baseline.
fn correctness(
    gpu: &Gpu,
    prepared: &attn_kernels::Prepared,
    baseline: &Baseline,
    spec: &ShapeSpec,
    seed: u64,
    checks: usize,
) -> anyhow::Result<Vec<CorrectnessCheck>> {
    let (_, dtype, params) = measure::problem(spec)?;
    let mut runs = measure::run_checks(gpu, prepared, spec, seed, checks)?;
    let Baseline::Sdpa { sdpa, .. } = baseline else {
        return Ok(runs.into_iter().map(|r| r.check).collect());
    };
    let mut jobs = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let path = |name: &str| sdpa.scratch(&format!("{name}{i}.npy"));
        let (q, k, v, o) = (path("q"), path("k"), path("v"), path("o"));
        npy::write(&q, &run.inputs.q)?;
        npy::write(&k, &run.inputs.k)?;
        npy::write(&v, &run.inputs.v)?;
        jobs.push(sdpa::run_job(
            [&q, &k, &v],
            &o,
            spec,
            params.scale,
            "default",
        ));
    }
    let results = sdpa.run_jobs(&jobs)?;
    for (i, (result, run)) in results.iter().zip(runs.iter_mut()).enumerate() {
        if sdpa::job_error(result).is_some() {
            continue; // SDPA cannot run this shape: the f64 oracle alone decides
        }
        let sdpa_out = npy::read_as(sdpa.scratch(&format!("o{i}.npy")), dtype)?;
        let sdpa_err = compare(
            &sdpa_out,
            &run.reference,
            &tolerance(dtype, Distribution::Normal),
        )
        .max_abs;
        let diff = run
            .output
            .to_f64()
            .iter()
            .zip(sdpa_out.to_f64())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let check = &mut run.check;
        check.sdpa_max_abs = Some(diff);
        check.closer_to = Some(if check.max_abs <= sdpa_err {
            format!(
                "candidate is as close or closer to the f64 oracle than SDPA ({:.2e} vs {:.2e})",
                check.max_abs, sdpa_err
            )
        } else {
            format!(
                "SDPA is closer to the f64 oracle ({:.2e} vs candidate {:.2e})",
                sdpa_err, check.max_abs
            )
        });
    }
    Ok(runs.into_iter().map(|r| r.check).collect())
}

fn replay(path: &std::path::Path) -> anyhow::Result<u8> {
    let run = match attn_evidence::read(path)? {
        attn_evidence::Evidence::Gate(run) => run,
        _ => bail!("{} is not a gate evidence file", path.display()),
    };
    let mut recomputed = run.clone();
    for case in &mut recomputed.cases {
        if let (Some(c), Some(b)) = (&case.candidate, &case.baseline) {
            let comparison = attn_stats::compare(
                &Sample::new(b.samples.clone())?,
                &Sample::new(c.samples.clone())?,
                &run.options,
            )?;
            let escaped = case
                .flags
                .iter()
                .any(|f| f.contains("escapes the timed stream"));
            case.passed =
                comparison.gate.passed && !escaped && case.correctness.iter().all(|c| c.passed);
            case.comparison = Some(comparison);
        }
    }
    recomputed.passed = !recomputed.cases.is_empty() && recomputed.cases.iter().all(|c| c.passed);
    let same = recomputed.passed == run.passed
        && recomputed
            .cases
            .iter()
            .zip(&run.cases)
            .all(|(a, b)| a.passed == b.passed && a.comparison == b.comparison);
    println!(
        "replaying {} ({} on {}, {})",
        path.display(),
        run.candidate.label(),
        run.provenance.gpu,
        run.provenance.date
    );
    print!("{}", markdown(&recomputed));
    println!(
        "{}",
        if same {
            "replay reproduces the stored decision exactly"
        } else {
            "REPLAY DIFFERS from the stored decision"
        }
    );
    if !same {
        return Ok(crate::EXIT_CANNOT_RUN);
    }
    Ok(if recomputed.passed {
        0
    } else {
        crate::EXIT_FAILED
    })
}

/// The result table (markdown, also readable in a terminal).
pub fn markdown(run: &GateRun) -> String {
    let mut table = Table::new(&[
        "shape",
        "candidate µs",
        "baseline µs",
        "speedup [95% CI]",
        "TFLOP/s cand / base",
        "verdict",
        "gate",
    ])
    .numeric(&[1, 2, 4]);
    for case in &run.cases {
        let (cand, base, speed, tf, verdict) = match &case.comparison {
            Some(c) => (
                format::micros(c.candidate.median),
                format::micros(c.baseline.median),
                format::speedup_ci(c.speedup.point, c.speedup.lower, c.speedup.upper),
                format!(
                    "{} / {}",
                    format::tflops(case.candidate_tflops.unwrap_or(f64::NAN)),
                    format::tflops(case.baseline_tflops.unwrap_or(f64::NAN))
                ),
                c.verdict.to_string(),
            ),
            None => (
                "–".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                "not timed".into(),
            ),
        };
        table.push(vec![
            case.shape.to_string(),
            cand,
            base,
            speed,
            tf,
            verdict,
            if case.passed {
                "pass".into()
            } else {
                "FAIL".into()
            },
        ]);
    }
    let mut out = format!(
        "**attn gate: {}** — `{}` vs `{}` on {} ({})\n\n",
        if run.passed { "PASSED" } else { "FAILED" },
        run.candidate.label(),
        run.baseline.label(),
        run.provenance.gpu,
        format::short_rev(&run.provenance.git_rev)
    );
    out.push_str(&table.to_markdown());
    out.push_str(&format!(
        "\nGate rule: candidate median ≤ {:.2} × baseline median AND the {:.0}% bootstrap CI ({} resamples, BCa, seed {}) of the median difference entirely below zero.\n",
        run.options.gate_threshold,
        run.options.bootstrap.confidence * 100.0,
        run.options.bootstrap.resamples,
        run.options.bootstrap.seed
    ));
    for case in &run.cases {
        if !case.passed || !case.flags.is_empty() {
            out.push_str(&format!("\n- `{}`: {}", case.shape, case.reason));
            for flag in &case.flags {
                out.push_str(&format!("\n  - flag: {flag}"));
            }
        }
    }
    out.push('\n');
    out
}

fn finish(
    run: &GateRun,
    markdown_path: Option<&std::path::Path>,
    evidence: Option<&std::path::Path>,
) -> anyhow::Result<u8> {
    let text = markdown(run);
    println!("\n{text}");
    if let Some(path) = markdown_path {
        attn_evidence::write_bytes_atomic(path, text.as_bytes())?;
    }
    if let Some(root) = evidence {
        let p = &run.provenance;
        let path = attn_evidence::evidence_path(root, "gate", &p.date, &p.gpu, &p.git_rev);
        attn_evidence::write_json_atomic(&path, run)?;
        println!("evidence: {}", path.display());
    }
    Ok(if run.passed { 0 } else { crate::EXIT_FAILED })
}

#[cfg(test)]
mod tests {
    use super::escaped_work;

    #[test]
    fn work_escaping_the_timed_stream_is_flagged_and_overheads_are_not() {
        // A legitimate 10 µs kernel: launch + synchronisation overhead on top of the events.
        assert!(escaped_work(&[10.0, 11.0, 10.5], &[30.0, 35.0, 28.0]).is_none());
        // A long kernel: overhead is small relative to it.
        assert!(escaped_work(&[3000.0; 5], &[3030.0; 5]).is_none());
        // The events see 11 µs, the device-synchronised clock 340 µs: work ran elsewhere.
        let flag = escaped_work(&[11.0; 5], &[340.0; 5]).unwrap();
        assert!(flag.contains("escapes the timed stream"), "{flag}");
    }
}
