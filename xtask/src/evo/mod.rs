//! `cargo xtask evo`: an evolutionary search over a kernel's knobs that survives bad candidates.
//!
//! The search itself (space, operators, selection, survival, resume, driving the generations) is
//! `attn-evo`; measuring one candidate is `attn_measure::search`. This module runs each candidate in
//! its own worker process (`xtask evo-worker`, hidden) with a timeout, one per visible GPU of the
//! first one's model: a fault, a hang or a crash kills only that worker; the candidate is logged
//! `invalid: ...` and the search goes on.
//!
//! Output: `<evidence>/evo/<run>/log.csv` (a row appended and flushed per candidate; `--resume`
//! continues from it), `search.json` (what was searched, to resume with) and `best.json` (the
//! winner, its evidence and the `cargo xtask gate` command that confirms it). With `--fitness
//! composite` the fastest finalists are then profiled with ncu, each in its own process group
//! with a timeout (`attn_measure::search::profile_finalist`), ranked by attn-evo's composite
//! (`finalists.json`), and the composite winner is `best.json`'s.

mod spec;
mod worker;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use attn_evo::{Knobs, Measurement, Options, Search, SearchRun, IMPL_KNOB};
use attn_kernels::registry::Limits;
use attn_kernels::Gpu;
use attn_measure::search::{Device, Precompile};

pub use worker::{worker, WorkerArgs};
use worker::{Job, Workers};

/// Arguments of `cargo xtask evo`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("shape", |a| a.required(false).default_value("2,8,1024,64")))]
pub struct Args {
    /// Registered implementation to tune (default: tiled, unless --src); several, comma-separated
    /// (`hopper,cublas,mma`), make the implementation a knob of the search, each one's knobs
    /// beneath it.
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Your own kernel file (kernels/README.md's ABI); declare its knobs with --knob.
    #[arg(long, conflicts_with = "implementation")]
    pub src: Option<PathBuf>,
    /// Entry point of --src.
    #[arg(long, requires = "src")]
    pub entry: Option<String>,
    /// Fixed defines for --src, `K=V` (repeatable).
    #[arg(long = "define", requires = "src")]
    pub defines: Vec<String>,
    /// A knob and its values, `NAME=v1,v2,...` (repeatable): declares the knobs of --src, or
    /// narrows the domains of the registered implementations that have it.
    #[arg(long = "knob")]
    pub knobs: Vec<String>,
    /// The problem to tune for.
    #[command(flatten)]
    pub problem: crate::args::ShapeArgs,
    /// What speedups are measured against: sdpa (falls back to cublas without PyTorch), cublas, or
    /// a registered implementation with its default config (e.g. the one being tuned).
    #[arg(long, default_value = "sdpa")]
    pub baseline: String,
    /// SDPA backend.
    #[arg(long, default_value = "default", value_parser = ["default", "flash", "efficient", "cudnn", "math"])]
    pub sdpa_backend: String,
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
    /// Seconds a candidate's worker may take (compile, checks and timing) before it is killed.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
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
    #[arg(long, default_value = "speedup", value_parser = ["speedup", "composite"])]
    pub fitness: String,
    /// Finalists profiled by --fitness composite.
    #[arg(long, default_value_t = 8)]
    pub finalists: usize,
    /// Barriers per K/V tile in the kernel's main loop (from its source), an input of the
    /// composite fitness, as `xtask ncu` takes it.
    #[arg(long, default_value_t = 1.0)]
    pub syncs_per_tile: f64,
    /// The ncu executable (--fitness composite).
    #[arg(long, default_value = "ncu")]
    pub ncu: PathBuf,
    /// Test mode without a GPU: workers report a synthetic time computed from the knobs
    /// (MODE=1 crashes like an illegal address, MODE=2 hangs).
    #[arg(long, hide = true)]
    pub synthetic: bool,
}

/// Runs `cargo xtask evo`; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.timeout <= 0.0 || args.samples < 2 || args.checks == 0 || args.budget == 0 {
        bail!("--timeout must be positive, --samples at least 2, --checks and --budget at least 1");
    }
    // Before anything is measured: not after an hour of searching.
    let ncu = (args.fitness == "composite")
        .then(|| attn_measure::profile::find_ncu(&args.ncu))
        .transpose()?;
    let run = spec::open_run(&args)?;
    let spec = &run.spec;
    let (devices, gpu) = if args.synthetic {
        (vec![Device::synthetic()], None)
    } else {
        let (devices, other) = attn_measure::search::same_model_devices()?;
        for d in other {
            let (ordinal, name, model) = (d.ordinal, d.name, &devices[0].name);
            println!(
                "GPU {ordinal} ({name}) is not a {model}: not used, its timings would not compare"
            );
        }
        (devices, Some(Gpu::open(0)?))
    };
    let space = spec::space(spec, gpu.as_ref().map_or(Limits::H100, Gpu::limits))?;
    let options = Options::for_spec(spec, args.budget);
    let seeds = spec::seeds(&args, spec, &space)?;
    let (mut search, mut log, resumed) = run.start(Search::new(space, options, seeds)?)?;
    if let Some(rows) = resumed {
        let dir = run.dir.display();
        println!("evo: resuming {dir} ({rows} candidates already measured)");
    }
    let names: Vec<String> = devices.iter().map(|d| format!("GPU {d}")).collect();
    let header = attn_evo::search_line(spec, search.space().size(), args.budget, &names);
    println!("{header}");

    let workers = Workers { spec, args: &args };
    let compare = attn_evo::compare_options(args.resamples, spec.seed)?;
    let ordinals: Vec<usize> = devices.iter().map(|d| d.ordinal).collect();
    // Once per GPU, by a worker like any candidate (sdpa's helper may take a while).
    let timeout = Duration::from_secs_f64(args.timeout.max(120.0));
    let baselines = attn_evo::measure_baselines(&ordinals, &spec.baseline, |device| {
        workers.run(&Job::Baseline, device, spec.seed ^ 0xba5e, timeout)
    })?;
    for (device, sample) in &baselines {
        let (name, median) = (&spec.baseline, sample.median());
        println!("baseline {name} on GPU {device}: median {median:.2} µs");
    }

    let bar = indicatif::ProgressBar::new(args.budget.saturating_sub(search.evaluated()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} gen {prefix} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let measure = Measure {
        workers: &workers,
        gpu: gpu.as_ref(),
        bar: &bar,
    };
    attn_evo::drive(
        &mut search,
        &measure,
        &ordinals,
        &baselines,
        &compare,
        |search, row| {
            log.append(row)?;
            bar.inc(1);
            if !row.status.is_ok() {
                bar.println(attn_evo::row_line(row));
            }
            if let Some(best) = search.best() {
                let knobs = search.space().describe(&best.knobs);
                bar.set_message(format!("best {:.3}x {knobs}", best.fitness.unwrap_or(0.0)));
            }
            Ok::<(), anyhow::Error>(())
        },
    )?;
    bar.finish();
    let code = finish(&args, &run, &devices, gpu.as_ref(), ncu)?;
    if args.seed_from_micro {
        // The search measured micro's seeds: how well did micro rank them?
        match attn_evo::correlate_with_search(&args.evidence, &run.dir, None) {
            Ok((c, path)) => {
                attn_evo::correlation_lines(&c)
                    .iter()
                    .for_each(|l| println!("{l}"));
                println!("evidence: {}", path.display());
            }
            Err(e) => println!("micro vs this search: {e}"),
        }
    }
    Ok(code)
}

/// Candidates measured by worker processes while the generation compiles on CPU threads.
struct Measure<'a> {
    workers: &'a Workers<'a>,
    gpu: Option<&'a Gpu>,
    bar: &'a indicatif::ProgressBar,
}

impl attn_evo::Measurer for Measure<'_> {
    type Generation = Option<Precompile>;

    fn begin(&self, generation: &attn_evo::Generation) -> Option<Precompile> {
        self.bar.set_prefix(generation.number.to_string());
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let (spec, candidates) = (&self.workers.spec, &generation.candidates);
        self.gpu
            .map(|gpu| Precompile::start(spec, gpu, candidates, threads))
    }

    fn ready(&self, precompile: &Option<Precompile>, index: usize) -> Option<f64> {
        precompile.as_ref().and_then(|p| p.wait(index))
    }

    fn measure(&self, knobs: &Knobs, device: usize) -> Measurement {
        // Inputs seeded by the config, not its position: a resumed run measures the same
        // candidate on the same inputs.
        let seed = attn_evo::config_seed(self.workers.spec.seed, knobs);
        let timeout = Duration::from_secs_f64(self.workers.args.timeout);
        self.workers
            .run(&Job::Candidate(knobs.clone()), device, seed, timeout)
    }

    fn end(&self, precompile: Option<Precompile>) {
        if let Some(precompile) = precompile {
            precompile.join();
        }
    }
}

/// The summary and `best.json` of a finished search; with `ncu` (`--fitness composite`) its
/// finalists profiled and ranked first.
fn finish(
    args: &Args,
    run: &SearchRun,
    devices: &[Device],
    gpu: Option<&Gpu>,
    ncu: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let spec = &run.spec;
    let log_path = run.log_path();
    let rows = attn_evidence::read_evo_log(&log_path)?;
    println!("{}", attn_evo::counts_line(&rows, &log_path));
    let devices = devices.iter().map(Device::to_string).collect();
    let provenance = gpu.map(|g| crate::provenance::collect(g, None, None, None));
    let chosen = match ncu {
        Some(ncu) => {
            let finalists = profile_finalists(args, run, &rows, &ncu, provenance.clone())?;
            attn_evo::composite_winner(spec, &finalists, &rows).map(|(r, f)| (r, Some(f)))
        }
        None => attn_evo::best_row(&rows).map(|r| (r, None)),
    };
    let Some((winner, fitness)) = chosen else {
        println!("evo: no valid candidate; no best.json");
        return Ok(crate::EXIT_FAILED);
    };
    let mut best = attn_evo::evo_best(spec, &run.name(), &rows, winner, devices, provenance);
    best.ncu = fitness
        .as_ref()
        .map(attn_evo::composite_note)
        .unwrap_or_default();
    best.fitness = fitness;
    let path = run.dir.join("best.json");
    best.write(&path)?;
    println!("{}", attn_evo::best_lines(&best, &path));
    Ok(0)
}

/// `--fitness composite`: the finalists profiled one by one (ncu in its own process group, killed
/// past its bound), ranked, written to `finalists.json` and shown.
fn profile_finalists(
    args: &Args,
    run: &SearchRun,
    rows: &[attn_evidence::EvoCandidate],
    ncu: &std::path::Path,
    provenance: Option<attn_evidence::Provenance>,
) -> anyhow::Result<attn_evidence::EvoFinalists> {
    let composite = attn_evo::Composite {
        finalists: args.finalists,
        syncs_per_tile: args.syncs_per_tile,
        weights: attn_ncu::FitnessWeights::default(),
    };
    let (spec, program) = (&run.spec, std::env::current_exe()?);
    let timeout = attn_measure::search::FINALIST_TIMEOUT;
    let count = attn_evo::finalists(rows, args.finalists).len();
    println!("profiling {count} finalists with {}", ncu.display());
    let mut done = 0;
    let profile = |implementation: Option<&str>, knobs: &Knobs| {
        done += 1;
        let mut config = attn_evo::knobs_to_strings(knobs);
        config.insert(
            IMPL_KNOB.into(),
            implementation.unwrap_or(&spec.target).into(),
        );
        println!("  {done}/{count} {}", attn_evo::describe_config(&config));
        attn_measure::search::profile_finalist(spec, implementation, knobs, ncu, &program, timeout)
            .map_err(|e| e.to_string())
    };
    let profiling = attn_measure::search::finalist_profiling();
    let ranked = attn_evo::rank_finalists(
        spec,
        &run.name(),
        rows,
        &composite,
        profiling,
        provenance,
        profile,
    );
    let path = run.dir.join("finalists.json");
    ranked.write(&path)?;
    print!("{}", attn_evo::finalists_table(&ranked));
    println!("finalists: {}", path.display());
    Ok(ranked)
}
