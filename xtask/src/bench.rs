//! `cargo xtask bench`: times implementations and SDPA backends over a suite's shapes and writes
//! `evidence/bench/<date>-<gpu>-<rev>.json` and a same-name `.csv`. A varlen batch is also timed
//! as the dense batch at its mean length, with the same implementation: its time per token over
//! the dense one's is varlen's target (at most 1.1). Decode batches go to `bench_decode`.

use std::path::PathBuf;

use attn_evidence::{BenchRun, DenseAtMean};
use attn_kernels::{registry, Candidate, Config, Gpu, Limits, TimingOptions};
use attn_measure::bench::{BenchRequest, BenchSession, Event};
use attn_measure::sdpa::Backend;
use attn_measure::Problem;

use crate::args::ProblemArgs;
use crate::progress::Progress;

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("suite", |a| a.help("A named suite: seed, large, sweep, gqa, mqa, window, varlen, train [default: large]")))]
pub struct Args {
    /// Implementations to time, comma-separated (`cargo xtask kernels` lists them); default: IMPL,
    /// then the best registered one for the device.
    #[arg(long = "impl", value_delimiter = ',')]
    pub implementations: Vec<String>,
    /// Knob overrides for every --impl, `K=V,K=V` (e.g. `SCHEDULE=persistent`); the rest take
    /// their defaults and per-shape tuning.
    #[arg(long, default_value = "")]
    pub config: String,
    /// Your Triton kernels of the ABI to time too, `FILE.py:KERNEL` (repeatable); with no --impl,
    /// only they (and the SDPA backends) are timed.
    #[arg(long)]
    pub triton: Vec<String>,
    /// Your Python callables to time too, `FILE.py:FUNCTION`, `fn(q, k, v, scale=, causal=) -> O`
    /// (repeatable), each in a helper process of its own, every timed output checked; with no
    /// --impl, only they (and the SDPA backends) are timed.
    #[arg(long)]
    pub py: Vec<String>,
    /// Defines of every --triton kernel, `K=V` (repeatable): BLOCK_M, NUM_WARPS, STAGES and its
    /// constexprs.
    #[arg(long = "define")]
    pub defines: Vec<String>,
    /// SDPA backends to time alongside, comma-separated (empty for none); `fa3` is
    /// FlashAttention-3 through JAX (its library in ATTN_FA3_LIB; batch mode only), `varlen`
    /// PyTorch's varlen_attn (varlen batches and windows), `flex` FlexAttention (windows),
    /// `flashinfer` FlashInfer's paged decode (decode batches only).
    #[arg(long, default_value = "default,flash", value_delimiter = ',')]
    pub sdpa_backends: Vec<String>,
    #[command(flatten)]
    pub problems: ProblemArgs,
    /// Timed samples per implementation and shape.
    #[arg(long, default_value_t = 50)]
    pub samples: usize,
    /// Untimed launches first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Evidence folder (the run goes to <DIR>/bench/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// Base seed of the timing inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Timing mode: graph (L2 flushed, CUDA graph replays), flushed (plain launches) or batch
    /// (back-to-back launches, inputs resident: the protocol of the FlashAttention-3 anchor).
    #[arg(long, default_value = "graph")]
    pub mode: attn_kernels::TimingMode,
    /// Start no shape that would not finish within this many seconds of the run's start (judged
    /// by the longest shape so far): the evidence of the shapes timed is written.
    #[arg(long, value_name = "SECONDS", value_parser = crate::args::seconds)]
    pub time_budget: Option<f64>,
    /// Batch mode: launches per sample at most, each on its own input set; fewer where fewer
    /// make 10 TFLOP of work (large problems: fewer sets to generate).
    #[arg(long, default_value_t = TimingOptions::default().batch_launches)]
    pub batch_launches: usize,
    /// Which pass to time: forward, or backward (dQ, dK and dV: backward implementations, default
    /// backward-mma, beside --sdpa-backends' SDPA backwards through autograd or fa3's in batch
    /// mode; default suite train).
    #[arg(long, value_enum, default_value_t = crate::gate::Pass::Forward)]
    pub pass: crate::gate::Pass,
    /// With --pass backward: a training step's figure, forward + backward: these forward
    /// implementations timed on each problem too (paired with each backward implementation), and
    /// each --sdpa-backends baseline's forward beside its backward.
    #[arg(long, value_delimiter = ',', value_name = "IMPL[,IMPL]")]
    pub step: Vec<String>,
    /// --on ray: the run as a matrix on a Ray cluster.
    #[command(flatten)]
    pub matrix: crate::matrix::MatrixArgs,
    /// Test mode without a GPU: made-up times for each --impl, a provenance naming no GPU.
    #[arg(long, hide = true)]
    pub synthetic: bool,
}

impl Args {
    /// `--config`, read: the knob overrides of every --impl.
    pub(crate) fn overrides(&self) -> anyhow::Result<Config> {
        (self.config.parse())
            .map_err(|e: attn_kernels::ConfigError| anyhow::anyhow!("--config: {e}"))
    }

    /// The --impl names given, or `default` where none is.
    pub(crate) fn names_or(&self, default: &str) -> Vec<String> {
        let named: Vec<String> = (self.implementations.iter())
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        if named.is_empty() {
            vec![default.to_string()]
        } else {
            named
        }
    }

    /// The timing options every bench entry is taken with.
    pub(crate) fn timing(&self) -> TimingOptions {
        TimingOptions {
            warmup: self.warmup,
            samples: self.samples,
            mode: self.mode,
            batch_launches: self.batch_launches.max(1),
            ..TimingOptions::default()
        }
    }
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.matrix.on.is_some() {
        if args.time_budget.is_some() {
            anyhow::bail!("--time-budget bounds a run on one machine: on Ray each task is bounded by --task-timeout");
        }
        let (matrix, problems) = (&args.matrix, &args.problems);
        let suite = match args.pass {
            crate::gate::Pass::Backward => crate::gate_backward::DEFAULT_SUITE,
            crate::gate::Pass::Forward => "large",
        };
        return crate::matrix::run("bench", matrix, problems, suite, &args.evidence);
    }
    if args.pass == crate::gate::Pass::Backward {
        return crate::bench_backward::run(&args);
    }
    if !args.step.is_empty() {
        anyhow::bail!("--step names a training step's forward: give it with --pass backward");
    }
    if let Some(specs) = args.problems.decode_problems()? {
        return crate::bench_decode::run(&args, specs);
    }
    let problems = args.problems.problems("large")?;
    if args.synthetic {
        let names = args.implementations.clone();
        if names.is_empty() {
            anyhow::bail!("--synthetic times made-up --impl names: give --impl");
        }
        let (samples, seed, git) = (args.samples, args.seed, crate::provenance::git_revision());
        let run = attn_measure::bench::synthetic_run(&problems, &names, samples, seed, git)?;
        return write_run(&args, &run).map(|()| 0);
    }
    let mut budget = crate::budget::TimeBudget::new(args.time_budget)?;
    let overrides = args.overrides()?;
    let (mut request, named) = request(&args, problems, &overrides)?;
    // The request is whole: now the GPU, and on it the device's best unless one was named.
    let gpu = Gpu::open(0)?;
    if !named {
        let info = gpu.info();
        let selection = registry::best_for(info.capability, &info.name)?;
        println!("{}", selection.reason);
        request.candidates = registered(&[selection.implementation.name], &overrides)?;
        validate(&request.candidates, &request.problems, &gpu.limits())?;
    }
    let mut bar = None;
    let mut show = |event: Event| show(&mut bar, event);
    let mut admit = || budget.admit().err();
    let run = BenchSession::open(gpu, &request, &mut show)?.run(&mut admit)?;
    println!("{}", table(&run, &args.config, &overrides).to_markdown());
    for e in &run.entries {
        if let Some(dense) = &e.dense_at_mean {
            println!("{}", dense_at_mean_line(e, dense));
        }
    }
    write_run(&args, &run)?;
    Ok(0)
}

/// Writes `run` as `<evidence>/bench/<date>-<gpu>-<rev>.json` and its `.csv`; with --print-run
/// prints it as one JSON line instead (a matrix task's answer, written by the driver).
pub(crate) fn write_run(args: &Args, run: &BenchRun) -> anyhow::Result<()> {
    if args.matrix.print_run {
        println!("{}", serde_json::to_string(run)?);
        return Ok(());
    }
    let p = &run.provenance;
    let path = attn_evidence::evidence_path(&args.evidence, "bench", &p.date, &p.gpu, &p.git_rev);
    write_bench_files(&path, run)
}

/// `run` as JSON at `path` and as CSV beside it, each written atomically.
pub(crate) fn write_bench_files(path: &std::path::Path, run: &BenchRun) -> anyhow::Result<()> {
    attn_evidence::write_json_atomic(path, run)?;
    attn_evidence::write_bytes_atomic(&path.with_extension("csv"), run.to_csv()?.as_bytes())?;
    println!("evidence: {} (+ .csv)", path.display());
    Ok(())
}

/// The run the arguments ask for, validated before the GPU is opened: each named implementation
/// on the problems it supports, the backends in the timing mode; and whether an implementation
/// was named (`--impl` or `IMPL`), else the caller picks the device's best once the GPU is open.
fn request(
    args: &Args,
    problems: Vec<Problem>,
    overrides: &Config,
) -> anyhow::Result<(BenchRequest, bool)> {
    let names: Vec<&str> = (args.implementations.iter())
        .map(String::as_str)
        .filter(|n| !n.is_empty())
        .collect();
    if args.triton.is_empty() && !args.defines.is_empty() {
        anyhow::bail!("--define sets --triton kernels' defines; an --impl takes --config K=V,K=V");
    }
    let tritons = (args.triton.iter())
        .map(|spec| crate::args::triton_candidate(spec, &args.defines))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let named = if names.is_empty() && !(tritons.is_empty() && args.py.is_empty()) {
        let named: Vec<String> = (args.triton.iter().map(|t| format!("--triton {t}")))
            .chain(args.py.iter().map(|p| format!("--py {p}")))
            .collect();
        Some((Vec::new(), format!("timing {}", named.join(", "))))
    } else if names.is_empty() {
        registry::named(None)?
            .map(|selection| (vec![selection.implementation.name], selection.reason))
    } else {
        let line = format!("implementations {}: named by --impl", names.join(", "));
        Some((names, line))
    };
    let candidates = match &named {
        Some((names, line)) => {
            let mut candidates = registered(names, overrides)?;
            candidates.extend(tritons);
            println!("{line}");
            validate(&candidates, &problems, &Limits::H100)?;
            candidates
        }
        None => Vec::new(),
    };
    let backends: Vec<Backend> = args
        .sdpa_backends
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| b.parse())
        .collect::<Result<_, _>>()?;
    for backend in &backends {
        if *backend == Backend::Flashinfer {
            anyhow::bail!("--sdpa-backends flashinfer times decode batches only: give a decode shape (--shape \"decode ...\") or suite (--suite decode-llama3-8b)");
        }
        backend.check_mode(args.mode)?;
        if *backend == Backend::Fa3 {
            Backend::fa3_library()?;
        }
    }
    if args.samples < 2 {
        anyhow::bail!("--samples must be at least 2");
    }
    let callables = (args.py.iter())
        .map(|spec| attn_measure::baseline::PyCallable::parse_as("--py ", spec))
        .collect::<Result<Vec<_>, _>>()?;
    let request = BenchRequest {
        problems,
        candidates,
        backends,
        callables,
        timing: args.timing(),
        seed: args.seed,
        suite: args.problems.suite_name("large"),
        git: crate::provenance::git_revision(),
    };
    Ok((request, named.is_some()))
}

/// Shows one of the run's events: lines printed (above the progress bar once it is drawn),
/// steps on the bar.
pub(crate) fn show(bar: &mut Option<Progress>, event: Event) {
    match (event, bar.as_ref()) {
        (Event::Start(steps), _) => *bar = Some(Progress::logged(steps, "bench")),
        (Event::Line(line), Some(bar)) => bar.println(line),
        (Event::Line(line), None) => println!("{line}"),
        (Event::Step(step), Some(bar)) => bar.step(step),
        (Event::Done(steps), Some(bar)) => bar.inc(steps),
        (Event::Finished, Some(bar)) => bar.finish_and_clear(),
        (Event::Step(_) | Event::Done(_) | Event::Finished, None) => {}
    }
}

/// The run's entries, one row each; an implementation's label carries `--config` when given.
fn table(run: &BenchRun, config: &str, overrides: &Config) -> attn_report::table::Table {
    // Every figure names how it was timed: the run's mode (or modes) in the time columns.
    let mut modes: Vec<&str> = Vec::new();
    for e in &run.entries {
        if !modes.contains(&e.timing.mode.as_str()) {
            modes.push(e.timing.mode.as_str());
        }
    }
    let mode = modes.join(" and ");
    let mut table = attn_report::table::Table::new(&[
        "implementation",
        "shape",
        &format!("median µs ({mode})"),
        &format!("p10–p90 µs ({mode})"),
        &format!("TFLOP/s ({mode})"),
        "ns/token",
        "SM MHz",
    ])
    .numeric(&[2, 4, 5, 6]);
    for e in &run.entries {
        let label = match (e.implementation.backend.is_none(), config.is_empty()) {
            (true, false) => format!("{} [{overrides}]", e.implementation.label()),
            _ => e.implementation.label(),
        };
        table.push(vec![
            label,
            e.shape.to_string(),
            attn_report::format::micros(e.summary.median),
            attn_report::format::micros_range(e.summary.p10, e.summary.p90),
            attn_report::format::tflops(e.tflops),
            format!("{:.2}", e.per_token_us() * 1e3),
            e.sm_mhz.map_or("–".into(), |mhz| format!("{mhz:.0}")),
        ]);
    }
    table
}

/// One line: a varlen entry's time per token against the dense batch at its mean length, and
/// whether it meets varlen's target; then the same per unit of attention work.
fn dense_at_mean_line(entry: &attn_evidence::BenchEntry, dense: &DenseAtMean) -> String {
    let meets = |yes: bool| if yes { "meets" } else { "misses" };
    let ratio = dense.per_work_ratio(entry);
    let per_work = format!(
        "; the batch does {:.2}× the dense one's work, so per unit of work {ratio:.3}×: {} the target",
        dense.work_ratio(entry),
        meets(ratio <= DenseAtMean::TARGET)
    );
    format!(
        "varlen vs dense at the mean length: {} on {}: {:.3}× the time per token of {} ({:.2} vs {:.2} ns/token): {} the target (≤ {:.2}×){per_work}",
        entry.implementation.label(),
        entry.shape,
        dense.per_token_ratio,
        dense.shape,
        entry.per_token_us() * 1e3,
        dense.per_token_us() * 1e3,
        meets(dense.meets_target()),
        DenseAtMean::TARGET
    )
}

/// The registered implementations `names`, each with `overrides`.
fn registered(names: &[&str], overrides: &Config) -> anyhow::Result<Vec<Candidate>> {
    Ok(names
        .iter()
        .map(|n| Candidate::registered(n, overrides.clone()))
        .collect::<Result<_, _>>()?)
}

/// Checks each implementation on the problems it supports (the others are said when benched, not
/// errors: a suite may mix variants).
fn validate(candidates: &[Candidate], problems: &[Problem], limits: &Limits) -> anyhow::Result<()> {
    for candidate in candidates {
        let supported: Vec<Problem> = problems
            .iter()
            .filter(|p| p.check_supported_by(candidate).is_ok())
            .cloned()
            .collect();
        crate::args::validate(candidate, &supported, limits)?;
    }
    Ok(())
}
