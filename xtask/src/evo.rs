//! `cargo xtask evo`: an evolutionary search over a kernel's knobs that survives bad candidates.
//!
//! The arguments become an `attn_measure::search::SearchRequest`; `SearchSession` runs it (the
//! search itself is `attn-evo`, each candidate measured in its own worker process, `xtask
//! evo-worker`, hidden, with a timeout, one per visible GPU of the first one's model: a fault, a
//! hang or a crash kills only that worker; the candidate is logged `invalid: ...` and the search
//! goes on); this module prints what it reports, with a progress bar.
//!
//! Output: `<evidence>/evo/<run>/log.csv` (a row appended and flushed per candidate; `--resume`
//! continues from it), `search.json` (what was searched, to resume with) and `best.json` (the
//! winner, its evidence and the `cargo xtask gate` command that confirms it). With `--fitness
//! composite` the fastest finalists are then profiled with ncu, each in its own process group
//! with a timeout, ranked by attn-evo's composite (`finalists.json`), and the composite winner is
//! `best.json`'s.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};
use attn_evo::KnobDomain;
use attn_kernels::Config;
use attn_measure::decode::DecodeBaseline;
use attn_measure::sdpa::Backend;
use attn_measure::search::{
    Event, Fitness, NewSearch, RayTarget, RunRequest, SearchRequest, SearchSession, Target,
    WorkerOptions,
};
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `cargo xtask evo`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("shape", |a| a.required(false).default_value("2,8,1024,64")))]
pub struct Args {
    /// Registered implementation to tune (default, unless --src: IMPL, then the best registered
    /// one for the device; for a decode batch, `decode`); several, comma-separated (`hopper,cublas,mma`), make the
    /// implementation a knob of the search, each one's knobs beneath it.
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Your own kernel file (kernels/README.md's ABI); declare its knobs with --knob.
    #[arg(long, conflicts_with = "implementation")]
    pub src: Option<PathBuf>,
    /// Entry point of --src.
    #[arg(long, requires = "src")]
    pub entry: Option<String>,
    /// Your own Triton kernel of the same ABI, `FILE.py:KERNEL` (KERNEL default `attn_fwd`),
    /// compiled by Triton for the GPU; declare its knobs (its constexprs, BLOCK_M, NUM_WARPS,
    /// STAGES) with --knob.
    #[arg(long, conflicts_with_all = ["implementation", "src"])]
    pub triton: Option<String>,
    /// Fixed defines for --src or --triton, `K=V` (repeatable).
    #[arg(long = "define")]
    pub defines: Vec<String>,
    /// A knob and its values, `NAME=v1,v2,...` (repeatable): declares the knobs of --src, or
    /// narrows the domains of the registered implementations that have it.
    #[arg(long = "knob")]
    pub knobs: Vec<String>,
    /// The problem to tune for.
    #[command(flatten)]
    pub problem: crate::args::ShapeArgs,
    /// What speedups are measured against: sdpa (falls back to cublas without PyTorch), cublas, or
    /// a registered implementation with its default config (e.g. the one being tuned); for a
    /// decode batch sdpa (with --sdpa-backend flashinfer: FlashInfer) or a decode implementation.
    #[arg(long, default_value = "sdpa")]
    pub baseline: String,
    /// SDPA backend: default, flash, efficient, cudnn, math; or varlen (PyTorch's varlen_attn:
    /// varlen batches and windows) or flex (FlexAttention: windows).
    #[arg(long, default_value = "default")]
    pub sdpa_backend: Backend,
    /// Survivors per generation, and children bred per generation.
    #[arg(long, default_value_t = 8)]
    pub population: usize,
    /// Generations at most.
    #[arg(long, default_value_t = 8)]
    pub generations: u32,
    /// Candidates measured at most (a resumed run's earlier ones included).
    #[arg(long, default_value_t = 48)]
    pub budget: usize,
    /// Seed of the search and of the inputs (default: a new one, recorded; a resume reuses the
    /// run's own).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds a candidate's worker may take (compile, checks and timing) before it is killed
    /// (default 10; 120 for a decode batch, whose checks run the f64 oracle over long caches).
    #[arg(long, value_name = "SECONDS", value_parser = crate::args::seconds)]
    pub timeout: Option<f64>,
    /// Timed samples per candidate.
    #[arg(long, default_value_t = 50)]
    pub samples: usize,
    /// Untimed launches first.
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Fresh random inputs a candidate must pass before it is timed.
    #[arg(long, default_value_t = 3)]
    pub checks: usize,
    /// Bootstrap resamples for each candidate's speedup CI.
    #[arg(long, default_value_t = 2000)]
    pub resamples: usize,
    /// Start from the ranking of `<evidence>/micro/<target>/log.csv` (hopper's for hopper, else
    /// cp-async's; knobs matched by name, the others completed validly), and at the end say how
    /// well it predicted this search.
    #[arg(long)]
    pub seed_from_micro: bool,
    /// Start from the best configs of earlier searches of the same target in `<evidence>/evo/`.
    #[arg(long)]
    pub seed_from_evo: bool,
    /// Continue the search logged in this folder (`<evidence>/evo/<run>`).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Name of the run's folder (default: date, target and shape).
    #[arg(long)]
    pub run: Option<String>,
    /// Evidence folder (the run goes to <DIR>/evo/<run>/).
    #[arg(long, default_value = "evidence")]
    pub evidence: PathBuf,
    /// What picks the winner: `speedup`, or `composite`: the --finalists fastest are profiled
    /// with Nsight Compute and ranked by 1000·speedup + 2·tensor% + SM busy% − penalties (syncs
    /// per tile, registers over 168, spills); every term goes to finalists.json.
    #[arg(long, default_value = "speedup")]
    pub fitness: Fitness,
    /// Finalists profiled by --fitness composite.
    #[arg(long, default_value_t = 8)]
    pub finalists: usize,
    /// Barriers per K/V tile in the kernel's main loop (from its source), an input of the
    /// composite fitness, as `xtask ncu` takes it.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::non_negative)]
    pub syncs_per_tile: f64,
    /// The ncu executable (--fitness composite).
    #[arg(long, default_value = "ncu")]
    pub ncu: PathBuf,
    /// Where candidates are measured: this machine's GPUs (default), or `ray[=ADDRESS]`, the GPUs
    /// of a Ray cluster (ADDRESS default `auto`: the local one), one actor per GPU of one model,
    /// each running this program's worker (the bundle, at the same path on every node); the
    /// search, its log, --resume and the evidence stay here.
    #[arg(long, value_name = "ray[=ADDRESS]")]
    pub on: Option<String>,
    /// With --on ray: the GPU model to measure on (Ray's accelerator_type, e.g. H100; default the
    /// model with the most GPUs).
    #[arg(long, requires = "on")]
    pub ray_model: Option<String>,
    /// Test mode without a GPU: workers report a synthetic time computed from the knobs
    /// (MODE=1 crashes like an illegal address, MODE=2 hangs).
    #[arg(long, hide = true)]
    pub synthetic: bool,
}

/// Runs `cargo xtask evo`; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.samples < 2 || args.checks == 0 || args.budget == 0 {
        bail!("--samples must be at least 2, --checks and --budget at least 1");
    }
    let request = request(&args)?;
    let bar = OnceLock::new();
    let show = |event: Event<'_>| show(&bar, event);
    match SearchSession::open(&request, &show)?.run()? {
        Some(_) => Ok(0),
        None => Ok(crate::EXIT_FAILED),
    }
}

/// The search the arguments ask for.
fn request(args: &Args) -> anyhow::Result<SearchRequest> {
    let run = match &args.resume {
        Some(dir) => RunRequest::Resume(dir.clone()),
        None => RunRequest::New(Box::new(new_search(args)?)),
    };
    Ok(SearchRequest {
        run,
        evidence: args.evidence.clone(),
        budget: args.budget,
        workers: WorkerOptions {
            samples: args.samples,
            warmup: args.warmup,
            checks: args.checks,
            sdpa_backend: args.sdpa_backend,
            timeout: Duration::from_secs_f64(args.timeout.unwrap_or(
                if crate::args::is_decode_text(&args.problem.shape) {
                    120.0
                } else {
                    10.0
                },
            )),
            synthetic: args.synthetic,
        },
        resamples: args.resamples,
        seed_from_micro: args.seed_from_micro,
        seed_from_evo: args.seed_from_evo,
        fitness: args.fitness,
        finalists: args.finalists,
        syncs_per_tile: args.syncs_per_tile,
        ncu: args.ncu.clone(),
        program: std::env::current_exe().context("finding this executable")?,
        git: crate::provenance::git_revision(),
        ray: args
            .on
            .as_deref()
            .map(|on| ray_target(on, args.ray_model.clone()))
            .transpose()?,
    })
}

/// Serves the hidden `evo-gpu`: what GPU 0 is (or a synthetic one), as one JSON line.
pub fn print_gpu(synthetic: bool) -> anyhow::Result<u8> {
    use attn_measure::search::ray::GpuFacts;
    let facts = if synthetic {
        let (git_rev, git_dirty) = crate::provenance::git_revision();
        GpuFacts::synthetic(attn_measure::provenance::synthetic(git_rev, git_dirty))
    } else {
        let gpu = attn_kernels::Gpu::open(0)?;
        let provenance = crate::provenance::collect(&gpu, None, None, None);
        GpuFacts::of(&gpu, provenance)
    };
    println!("{}", serde_json::to_string(&facts)?);
    Ok(0)
}

/// `--on ray[=ADDRESS]`, read.
fn ray_target(on: &str, model: Option<String>) -> anyhow::Result<RayTarget> {
    Ok(RayTarget {
        address: crate::args::ray_address(on)?,
        model,
    })
}

/// A new search: its target, declared knobs and problem.
fn new_search(args: &Args) -> anyhow::Result<NewSearch> {
    let decode = args.problem.decode_spec()?;
    let shape = match &decode {
        Some(batch) => attn_evidence::decode_shape(batch),
        None => args.problem.spec_for("evo")?,
    };
    if !args.synthetic {
        // (Synthetic workers fake the baseline too, whatever its name.)
        let (baseline, backend) = (&args.baseline, args.sdpa_backend);
        match &decode {
            Some(batch) => {
                let decoding = DecodeBaseline::from_args(baseline, backend)
                    .with_context(|| format!("--baseline {baseline}"))?;
                decoding.check_supports(batch)?;
            }
            None => {
                let problem = attn_measure::Problem::new(shape.clone())?;
                let problems = std::slice::from_ref(&problem);
                crate::args::check_baseline(baseline, backend, problems, None)?;
            }
        }
    }
    let knobs = args
        .knobs
        .iter()
        .map(|k| KnobDomain::parse(k).map(|d| (d.name, d.values)))
        .collect::<Result<_, _>>()
        .context("--knob")?;
    if args.src.is_none() && args.triton.is_none() && !args.defines.is_empty() {
        bail!("--define fixes a --src or --triton kernel's defines; --knob narrows a registered implementation's");
    }
    let target = match (&args.implementation, &args.src) {
        (None, None) if args.triton.is_some() => {
            let spec = args.triton.as_deref().unwrap_or_default();
            // Checked now (the file, the kernel's name, the defines); each worker builds it
            // again from the same file (a `.py` source is a Triton kernel, its entry the kernel).
            match crate::args::triton_candidate(spec, &args.defines)? {
                attn_kernels::Candidate::Triton {
                    path,
                    kernel,
                    defines,
                    ..
                } => Target::Source {
                    src: path,
                    entry: Some(kernel),
                    defines: defines.0,
                },
                other => bail!("--triton {spec}: not a Triton kernel ({})", other.label()),
            }
        }
        (None, _) if args.synthetic => Target::Synthetic,
        (_, Some(src)) => {
            let defines = (args.defines.join(",").parse::<Config>())
                .map_err(|e| anyhow::anyhow!("--define: {e}"))?;
            // The file is read and checked now; each worker reads it again.
            crate::args::source_candidate(src, args.entry.as_deref(), &args.defines)?;
            Target::Source {
                src: src.clone(),
                entry: args.entry.clone(),
                defines: defines.0,
            }
        }
        (Some(names), None) => {
            let names: Vec<String> = names.split(',').map(|n| n.trim().to_string()).collect();
            let plural = if names.len() > 1 { "s" } else { "" };
            println!(
                "implementation{plural} {}: named by --impl",
                names.join(", ")
            );
            Target::Implementations(names)
        }
        (None, None) if decode.is_some() => {
            // As gate's decode default.
            println!("implementation decode: the decode default (--impl decode-hopper or decode-naive for the others)");
            Target::Implementations(vec!["decode".into()])
        }
        (None, None) => {
            // IMPL, else the device's best: GPU 0's, which the search's workers time on.
            let selection = match attn_kernels::registry::named(None)? {
                Some(selection) => selection,
                None => {
                    let gpu = attn_kernels::Gpu::open(0)?;
                    let info = gpu.info();
                    attn_kernels::registry::best_for(info.capability, &info.name)?
                }
            };
            println!("{}", selection.reason);
            Target::Implementations(vec![selection.implementation.name.to_string()])
        }
    };
    Ok(NewSearch {
        target,
        knobs,
        shape,
        decode,
        baseline: args.baseline.clone(),
        sdpa_backend: args.sdpa_backend,
        seed: args.seed,
        population: args.population,
        generations: args.generations,
        name: args.run.clone(),
    })
}

/// Shows one of the search's events: lines printed, candidates on a progress bar.
fn show(bar: &OnceLock<ProgressBar>, event: Event<'_>) {
    match event {
        Event::Line(line) => println!("{line}"),
        Event::Start(remaining) => {
            let style = ProgressStyle::with_template("{bar:30} {pos}/{len} gen {prefix} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            let _ = bar.set(ProgressBar::new(remaining).with_style(style));
        }
        Event::Generation(number) => {
            if let Some(bar) = bar.get() {
                bar.set_prefix(number.to_string());
            }
        }
        Event::Row(row, best) => {
            let Some(bar) = bar.get() else { return };
            bar.inc(1);
            if !row.status.is_ok() {
                bar.println(attn_evo::row_line(row));
            }
            if let Some((fitness, knobs)) = best {
                bar.set_message(format!("best {fitness:.3}x {knobs}"));
            }
        }
        Event::Measured => {
            if let Some(bar) = bar.get() {
                bar.finish();
            }
        }
    }
}
