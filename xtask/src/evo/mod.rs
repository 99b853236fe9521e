//! `cargo xtask evo`: an evolutionary search over a kernel's knobs that survives bad candidates.
//!
//! The search itself (space, operators, selection, survival, resume) is `attn-evo`; this module
//! measures. Each candidate runs in its own worker process (`xtask evo-worker`, hidden) with a
//! timeout: compile (a disk-cache hit: the parent compiles the generation on CPU threads while the
//! GPU measures), correctness against the f64 oracle on fresh seeds, then graph-mode timing. A fault,
//! a hang or a crash kills only that worker; the candidate is logged `invalid: ...` and the search
//! goes on. The baseline is measured once per GPU by a worker too, and each candidate's speedup
//! and its CI come from `attn_stats::compare` against the baseline of the GPU it ran on. One
//! worker runs per visible GPU of the same model as the first (`CUDA_VISIBLE_DEVICES` respected).
//!
//! Output: `<evidence>/evo/<run>/log.csv` (a row appended and flushed per candidate; `--resume`
//! continues from it), `search.json` (what was searched, to resume with) and `best.json` (the
//! winner, its evidence and the `cargo xtask gate` command that confirms it).

mod spec;
mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use attn_evidence::CandidateStatus;
use attn_evo::{Knobs, Options, Search, SearchRun};
use attn_kernels::registry::Limits;
use attn_kernels::Gpu;
use attn_measure::search::{Device, Precompile};
use attn_stats::{BootstrapOptions, CompareOptions, Sample};

pub use worker::{worker, WorkerArgs};
use worker::{Job, Workers};

/// Arguments of `cargo xtask evo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Registered implementation to tune (default: tiled, unless --src).
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
    /// narrows a registered implementation's domains.
    #[arg(long = "knob")]
    pub knobs: Vec<String>,
    /// The shape to tune for, `B,H,S,D` or `B,H,SQ,SKV,D`.
    #[arg(long, default_value = "2,8,1024,64")]
    pub shape: String,
    /// Causal mask.
    #[arg(long)]
    pub causal: bool,
    /// fp16 or bf16.
    #[arg(long, default_value = "fp16")]
    pub dtype: attn_evidence::Dtype,
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
    /// Start from the top configs of `<evidence>/micro/log.csv` (knobs with matching names).
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
    /// Also score the finalists with Nsight Compute (needs `ncu` on PATH).
    #[arg(long)]
    pub ncu: bool,
    /// Test mode without a GPU: workers report a synthetic time computed from the knobs
    /// (MODE=1 crashes like an illegal address, MODE=2 hangs).
    #[arg(long, hide = true)]
    pub synthetic: bool,
}

/// Runs `cargo xtask evo`; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.timeout <= 0.0 || args.samples < 2 || args.checks == 0 {
        bail!("--timeout must be positive, --samples at least 2 and --checks at least 1");
    }
    let run = spec::open_run(&args)?;
    let spec = &run.spec;
    let (devices, gpu) = if args.synthetic {
        let synthetic = Device {
            ordinal: 0,
            name: "synthetic".into(),
        };
        (vec![synthetic], None)
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
    let options = Options {
        population: spec.population,
        generations: spec.generations,
        budget: args.budget,
        seed: spec.seed,
        ..Options::default()
    };
    let seeds = spec::seeds(&args, spec, &space)?;
    let (mut search, mut log, resumed) = run.start(Search::new(space, options, seeds)?)?;
    if let Some(rows) = resumed {
        let dir = run.dir.display();
        println!("evo: resuming {dir} ({rows} candidates already measured)");
    }
    let names: Vec<String> = devices
        .iter()
        .map(|d| format!("GPU {} {}", d.ordinal, d.name))
        .collect();
    println!(
        "evo: {} on {} vs {} | {} knob(s), {} configs before constraints | population {}, generations {}, budget {}, seed {} | {} worker(s): {}",
        spec.target,
        spec.shape,
        spec.baseline,
        spec.knobs.len(),
        search.space().size(),
        spec.population,
        spec.generations,
        args.budget,
        spec.seed,
        devices.len(),
        names.join(", ")
    );

    let workers = Workers {
        spec: spec.clone(),
        samples: args.samples,
        warmup: args.warmup,
        checks: args.checks,
        sdpa_backend: args.sdpa_backend.clone(),
        synthetic: args.synthetic,
    };
    let compare = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: args.resamples,
            seed: spec.seed,
            ..BootstrapOptions::default()
        },
        ..CompareOptions::default()
    };
    compare.validate()?;
    let baselines = baselines(&workers, &devices, args.timeout)?;

    let bar = indicatif::ProgressBar::new(args.budget.saturating_sub(search.evaluated()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} gen {prefix} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let compile_threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let ordinals: Vec<usize> = devices.iter().map(|d| d.ordinal).collect();
    while let Some(generation) = search.next_generation() {
        bar.set_prefix(generation.number.to_string());
        let compiler = gpu
            .as_ref()
            .map(|gpu| Precompile::start(spec, gpu, &generation.candidates, compile_threads));
        let timeout = Duration::from_secs_f64(args.timeout);
        let measured = |index: usize, knobs: &Knobs, device: usize| {
            // Inputs seeded by the config, not its position: a resumed run measures the same
            // candidate on the same inputs.
            let compile_s = compiler.as_ref().and_then(|c| c.wait(index));
            let started = Instant::now();
            let seed = attn_evo::config_seed(spec.seed, knobs);
            let measured = workers.run(&Job::Candidate(knobs.clone()), device, seed, timeout);
            let row = measured.log_row(
                generation.number,
                knobs,
                &baselines[&device],
                &compare,
                compile_s,
                started.elapsed().as_secs_f64(),
            );
            (knobs.clone(), row)
        };
        attn_evo::for_each_on_devices(
            &generation.candidates,
            &ordinals,
            measured,
            |(knobs, row)| {
                log.append(&row)?;
                search.record(generation.number, knobs, row.score);
                bar.inc(1);
                if let CandidateStatus::Invalid { .. } = &row.status {
                    let config = attn_evo::format_knobs(
                        &attn_evo::knobs_from_strings(&row.config).unwrap_or_default(),
                    );
                    bar.println(format!(
                        "  gen {} {config}: {}",
                        generation.number, row.status
                    ));
                }
                if let Some(best) = search.best() {
                    bar.set_message(format!(
                        "best {:.3}x {}",
                        best.fitness.unwrap_or(0.0),
                        attn_evo::format_knobs(&best.knobs)
                    ));
                }
                Ok::<(), anyhow::Error>(())
            },
        )?;
        if let Some(compiler) = compiler {
            compiler.join();
        }
    }
    bar.finish();
    finish(&args, &run, &devices, gpu.as_ref())
}

/// The baseline, once per GPU, by a worker like any candidate (sdpa's helper may take a while).
fn baselines(
    workers: &Workers,
    devices: &[Device],
    timeout: f64,
) -> anyhow::Result<HashMap<usize, Sample>> {
    let mut baselines = HashMap::new();
    for device in devices {
        let seed = workers.spec.seed ^ 0xba5e;
        let timeout = Duration::from_secs_f64(timeout.max(120.0));
        let measured = workers.run(&Job::Baseline, device.ordinal, seed, timeout);
        if let CandidateStatus::Invalid { .. } = &measured.status {
            bail!(
                "the baseline {} failed on GPU {}: {}",
                workers.spec.baseline,
                device.ordinal,
                measured.status
            );
        }
        let sample = Sample::new(measured.samples_us)?;
        println!(
            "baseline {} on GPU {}: median {:.2} µs",
            workers.spec.baseline,
            device.ordinal,
            sample.median()
        );
        baselines.insert(device.ordinal, sample);
    }
    Ok(baselines)
}

/// The summary and `best.json` of a finished search.
fn finish(
    args: &Args,
    run: &SearchRun,
    devices: &[Device],
    gpu: Option<&Gpu>,
) -> anyhow::Result<u8> {
    let spec = &run.spec;
    let log_path = run.log_path();
    let rows = attn_evidence::read_evo_log(&log_path)?;
    let invalid = rows.iter().filter(|r| !r.status.is_ok()).count();
    println!(
        "evo: {} candidates, {} valid, {} invalid; log {}",
        rows.len(),
        rows.len() - invalid,
        invalid,
        log_path.display()
    );
    let ncu = attn_evo::ncu_note(args.ncu);
    let run_name = run
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let devices = devices
        .iter()
        .map(|d| format!("{} {}", d.ordinal, d.name))
        .collect();
    let provenance = gpu.map(|g| crate::provenance::collect(g, None, None, None));
    let name = run_name.unwrap_or_default();
    let Some(best) = attn_evo::evo_best(spec, &name, &rows, devices, ncu, provenance) else {
        println!("evo: no valid candidate; no best.json");
        return Ok(crate::EXIT_FAILED);
    };
    if !best.ncu.is_empty() {
        println!("{}", best.ncu);
    }
    let path = run.dir.join("best.json");
    best.write(&path)?;
    let config = attn_evo::knobs_from_strings(&best.config).unwrap_or_default();
    println!(
        "best: {} (generation {}): {:.2} µs, speedup {:.3}x [{:.3}, {:.3}] vs {}\nconfirm it: {}\nevidence: {}",
        attn_evo::format_knobs(&config),
        best.generation,
        best.median_us.unwrap_or(f64::NAN),
        best.speedup.unwrap_or(f64::NAN),
        best.speedup_lower.unwrap_or(f64::NAN),
        best.speedup_upper.unwrap_or(f64::NAN),
        spec.baseline,
        best.reproduce,
        path.display()
    );
    Ok(0)
}
