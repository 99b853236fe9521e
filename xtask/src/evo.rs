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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use attn_evidence::{EvoCandidate, EvoLogAppender, ShapeSpec};
use attn_evo::{KnobDomain, Knobs, Options, Search, Space};
use attn_kernels::compile::compile;
use attn_kernels::registry::{Engine, Limits};
use attn_kernels::{Candidate, Config, Gpu, Prepared, TimingMode, TimingOptions};
use attn_stats::{BootstrapOptions, CompareOptions, Sample};
use serde::{Deserialize, Serialize};

use attn_measure::supervise::{classify_failure, exit_with_parent, run_supervised, Supervised};
use attn_measure::timing::{KernelSide, TimedSide};

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

/// Arguments of the hidden `xtask evo-worker`: one candidate (or the baseline) on one shape.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[arg(long = "impl")]
    implementation: Option<String>,
    #[arg(long)]
    src: Option<PathBuf>,
    #[arg(long)]
    entry: Option<String>,
    /// The candidate's knobs (and fixed defines for --src), `K=V,K=V`.
    #[arg(long, default_value = "")]
    config: String,
    /// Time this baseline instead of a candidate.
    #[arg(long)]
    baseline: Option<String>,
    #[arg(long, default_value = "default")]
    sdpa_backend: String,
    #[arg(long)]
    shape: String,
    #[arg(long, default_value_t = 0)]
    device: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 50)]
    samples: usize,
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    #[arg(long, default_value_t = 3)]
    checks: usize,
    #[arg(long)]
    synthetic: bool,
}

/// What a worker prints as its last stdout line.
#[derive(Debug, Default, Serialize, Deserialize)]
struct WorkerReport {
    /// `ok` or `invalid: ...`.
    status: String,
    /// Timed samples, µs.
    samples_us: Vec<f64>,
    /// Seconds to prepare (compile or cache hit, load).
    prepare_s: Option<f64>,
}

/// What was searched: written when a run starts, read back by `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SearchSpec {
    target: String,
    implementation: Option<String>,
    src: Option<PathBuf>,
    entry: Option<String>,
    defines: BTreeMap<String, i64>,
    knobs: BTreeMap<String, Vec<i64>>,
    shape: ShapeSpec,
    baseline: String,
    seed: u64,
    population: usize,
    generations: u32,
}

/// `best.json`.
#[derive(Debug, Serialize)]
struct Best<'a> {
    kind: &'static str,
    run: String,
    target: &'a str,
    shape: &'a ShapeSpec,
    baseline: &'a str,
    seed: u64,
    config: BTreeMap<String, String>,
    fixed_defines: BTreeMap<String, i64>,
    generation: u32,
    median_us: Option<f64>,
    speedup: Option<f64>,
    speedup_lower: Option<f64>,
    speedup_upper: Option<f64>,
    score: Option<f64>,
    candidates: usize,
    invalid: usize,
    devices: Vec<String>,
    reproduce: String,
    ncu: String,
    provenance: Option<attn_evidence::Provenance>,
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

fn parse_config(text: &str, what: &str) -> anyhow::Result<Config> {
    text.parse()
        .map_err(|e: String| anyhow::anyhow!("{what}: {e}"))
}

/// Runs `cargo xtask evo`; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.timeout <= 0.0 || args.samples < 2 || args.checks == 0 {
        bail!("--timeout must be positive, --samples at least 2 and --checks at least 1");
    }
    let resumed: Option<SearchSpec> = match &args.resume {
        Some(dir) => {
            let path = dir.join("search.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("--resume: reading {}", path.display()))?;
            Some(serde_json::from_str(&text).with_context(|| path.display().to_string())?)
        }
        None => None,
    };
    let spec = match &resumed {
        Some(r) => r.clone(),
        None => search_spec(&args)?,
    };
    let run_dir = match &args.resume {
        Some(dir) => dir.clone(),
        None => {
            let name = args.run.clone().unwrap_or_else(|| {
                format!(
                    "{}-{}-{}",
                    attn_evidence::utc_now_rfc3339().replace(':', "-"),
                    attn_evidence::slug(&spec.target),
                    attn_evidence::slug(&spec.shape.to_string())
                )
            });
            args.evidence.join("evo").join(name)
        }
    };

    let devices = if args.synthetic {
        vec![Device {
            ordinal: 0,
            name: "synthetic".into(),
        }]
    } else {
        devices()?
    };
    let gpu = if args.synthetic {
        None
    } else {
        Some(Gpu::open(0)?)
    };
    let limits = gpu.as_ref().map_or(Limits::H100, Gpu::limits);
    let space = space(&spec, limits)?;
    let options = Options {
        population: spec.population,
        generations: spec.generations,
        budget: args.budget,
        seed: spec.seed,
        ..Options::default()
    };
    let seeds = seeds(&args, &spec, &space)?;
    let mut search = Search::new(space, options, seeds)?;
    let log_path = run_dir.join("log.csv");
    if args.resume.is_some() {
        let rows = if log_path.is_file() {
            attn_evidence::read_evo_log(&log_path)?
        } else {
            vec![]
        };
        search = search.resume(attn_evo::evaluations_from_log(&rows)?)?;
        println!(
            "evo: resuming {} ({} candidates already measured)",
            run_dir.display(),
            rows.len()
        );
    } else {
        if log_path.exists() {
            bail!(
                "{} exists: continue it with --resume {}",
                log_path.display(),
                run_dir.display()
            );
        }
        attn_evidence::write_json_atomic(&run_dir.join("search.json"), &spec)?;
    }
    let knob_names: Vec<String> = spec.knobs.keys().cloned().collect();
    let mut log = EvoLogAppender::open(&log_path, &knob_names)?;

    println!(
        "evo: {} on {} vs {} | {} knob(s), {} configs before constraints | population {}, generations {}, budget {}, seed {} | {} worker(s): {}",
        spec.target,
        spec.shape,
        spec.baseline,
        knob_names.len(),
        search.space().size(),
        spec.population,
        spec.generations,
        args.budget,
        spec.seed,
        devices.len(),
        devices.iter().map(|d| format!("GPU {} {}", d.ordinal, d.name)).collect::<Vec<_>>().join(", ")
    );

    let ctx = WorkerContext {
        spec: spec.clone(),
        args_timeout: Duration::from_secs_f64(args.timeout),
        samples: args.samples,
        warmup: args.warmup,
        checks: args.checks,
        sdpa_backend: args.sdpa_backend.clone(),
        synthetic: args.synthetic,
    };
    let compare_options = CompareOptions {
        bootstrap: BootstrapOptions {
            resamples: args.resamples,
            seed: spec.seed,
            ..BootstrapOptions::default()
        },
        ..CompareOptions::default()
    };
    compare_options.validate()?;

    // The baseline, once per GPU, by a worker like any candidate (sdpa's helper may take a while).
    let mut baselines = HashMap::new();
    for device in &devices {
        let report = ctx.run(
            &WorkerJob::Baseline,
            device.ordinal,
            spec.seed ^ 0xba5e,
            Duration::from_secs_f64(args.timeout.max(120.0)),
        );
        if report.status != "ok" {
            bail!(
                "the baseline {} failed on GPU {}: {}",
                spec.baseline,
                device.ordinal,
                report.status
            );
        }
        let sample = Sample::new(report.samples_us)?;
        println!(
            "baseline {} on GPU {}: median {:.2} µs",
            spec.baseline,
            device.ordinal,
            sample.median()
        );
        baselines.insert(device.ordinal, sample);
    }

    let already = search.evaluated();
    let bar = indicatif::ProgressBar::new(args.budget.saturating_sub(already) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} gen {prefix} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let compile_threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    while let Some(generation) = search.next_generation() {
        bar.set_prefix(generation.number.to_string());
        let compiled = Arc::new(CompileBoard::default());
        let compiler = match (&gpu, args.synthetic) {
            (Some(gpu), false) => Some(spawn_compiles(
                &spec,
                gpu,
                &generation.candidates,
                compiled.clone(),
                compile_threads,
            )?),
            _ => None,
        };
        let queue = Mutex::new(
            generation
                .candidates
                .iter()
                .cloned()
                .enumerate()
                .collect::<VecDeque<_>>(),
        );
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            for device in &devices {
                let (tx, queue, ctx, compiled) = (tx.clone(), &queue, &ctx, &compiled);
                let synthetic = args.synthetic;
                scope.spawn(move || loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((index, knobs)) = next else { break };
                    // Inputs seeded by the config, not its position: a resumed run measures the
                    // same candidate on the same inputs.
                    let compile_s = if synthetic {
                        None
                    } else {
                        compiled.wait(index)
                    };
                    let started = Instant::now();
                    let report = ctx.run(
                        &WorkerJob::Candidate(knobs.clone()),
                        device.ordinal,
                        config_seed(spec.seed, &knobs),
                        ctx.args_timeout,
                    );
                    let run_s = started.elapsed().as_secs_f64();
                    if tx
                        .send((knobs, device.ordinal, report, compile_s, run_s))
                        .is_err()
                    {
                        break;
                    }
                });
            }
            drop(tx);
            for (knobs, ordinal, report, compile_s, run_s) in rx {
                let row = candidate_row(
                    generation.number,
                    &knobs,
                    &report,
                    &baselines[&ordinal],
                    &compare_options,
                    compile_s.or(report.prepare_s),
                    run_s,
                );
                log.append(&row)?;
                search.record(generation.number, knobs, row.score);
                bar.inc(1);
                if row.status != "ok" {
                    bar.println(format!(
                        "  gen {} {}: {}",
                        generation.number,
                        Config(row_knobs(&row)),
                        row.status
                    ));
                }
                if let Some(best) = search.best() {
                    bar.set_message(format!(
                        "best {:.3}x {}",
                        best.fitness.unwrap_or(0.0),
                        Config(best.knobs.clone())
                    ));
                }
            }
            Ok(())
        })?;
        if let Some(handle) = compiler {
            let _ = handle.join();
        }
    }
    bar.finish();

    let rows = attn_evidence::read_evo_log(&log_path)?;
    let invalid = rows.iter().filter(|r| r.status != "ok").count();
    println!(
        "evo: {} candidates, {} valid, {} invalid; log {}",
        rows.len(),
        rows.len() - invalid,
        invalid,
        log_path.display()
    );
    let best_row = rows
        .iter()
        .filter(|r| r.status == "ok" && r.score.is_some())
        .max_by(|a, b| a.score.unwrap_or(0.0).total_cmp(&b.score.unwrap_or(0.0)));
    let Some(best_row) = best_row else {
        println!("evo: no valid candidate; no best.json");
        return Ok(crate::EXIT_FAILED);
    };
    let ncu = ncu_note(args.ncu);
    if !ncu.is_empty() {
        println!("{ncu}");
    }
    let best = Best {
        kind: "evo-best",
        run: run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        target: &spec.target,
        shape: &spec.shape,
        baseline: &spec.baseline,
        seed: spec.seed,
        config: best_row.config.clone(),
        fixed_defines: spec.defines.clone(),
        generation: best_row.generation,
        median_us: best_row.median_us,
        speedup: best_row.speedup,
        speedup_lower: best_row.speedup_lower,
        speedup_upper: best_row.speedup_upper,
        score: best_row.score,
        candidates: rows.len(),
        invalid,
        devices: devices
            .iter()
            .map(|d| format!("{} {}", d.ordinal, d.name))
            .collect(),
        reproduce: reproduce(&spec, &row_knobs(best_row)),
        ncu,
        provenance: gpu
            .as_ref()
            .map(|g| crate::provenance::collect(g, None, None, None)),
    };
    attn_evidence::write_json_atomic(&run_dir.join("best.json"), &best)?;
    println!(
        "best: {} (generation {}): {:.2} µs, speedup {:.3}x [{:.3}, {:.3}] vs {}\nconfirm it: {}\nevidence: {}",
        Config(row_knobs(best_row)),
        best_row.generation,
        best_row.median_us.unwrap_or(f64::NAN),
        best_row.speedup.unwrap_or(f64::NAN),
        best_row.speedup_lower.unwrap_or(f64::NAN),
        best_row.speedup_upper.unwrap_or(f64::NAN),
        spec.baseline,
        best.reproduce,
        run_dir.join("best.json").display()
    );
    Ok(0)
}

/// A seed for a candidate's inputs from the run's seed and its config (FNV-1a of `K=V,...`).
fn config_seed(seed: u64, knobs: &Knobs) -> u64 {
    Config(knobs.clone())
        .to_string()
        .bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

fn row_knobs(row: &EvoCandidate) -> Knobs {
    attn_evo::knobs_from_strings(&row.config).unwrap_or_default()
}

/// The log row of one finished worker.
fn candidate_row(
    generation: u32,
    knobs: &Knobs,
    report: &WorkerReport,
    baseline: &Sample,
    options: &CompareOptions,
    compile_s: Option<f64>,
    run_s: f64,
) -> EvoCandidate {
    let mut row = EvoCandidate {
        generation,
        config: attn_evo::knobs_to_strings(knobs),
        status: report.status.clone(),
        median_us: None,
        speedup: None,
        speedup_lower: None,
        speedup_upper: None,
        score: None,
        compile_s,
        run_s: Some(run_s),
    };
    if report.status != "ok" {
        return row;
    }
    let compared = Sample::new(report.samples_us.clone())
        .map_err(anyhow::Error::from)
        .and_then(|c| Ok(attn_stats::compare(baseline, &c, options)?));
    match compared {
        Ok(c) => {
            row.median_us = Some(c.candidate.median);
            row.speedup = Some(c.speedup.point);
            row.speedup_lower = Some(c.speedup.lower);
            row.speedup_upper = Some(c.speedup.upper);
            row.score = Some(c.speedup.point);
        }
        Err(err) => row.status = format!("invalid: {}", crate::one_line(&err)),
    }
    row
}

/// The `cargo xtask gate` command that confirms a config independently.
fn reproduce(spec: &SearchSpec, knobs: &Knobs) -> String {
    let s = &spec.shape;
    let mut shape = format!("{},{},{}", s.batch, s.heads, s.seq_q);
    if s.seq_kv != s.seq_q {
        shape.push_str(&format!(",{}", s.seq_kv));
    }
    shape.push_str(&format!(",{}", s.head_dim));
    let mut cmd = String::from("cargo xtask gate ");
    match (&spec.implementation, &spec.src) {
        (Some(name), _) => {
            cmd.push_str(&format!("--impl {name} --config {}", Config(knobs.clone())))
        }
        (None, Some(src)) => {
            cmd.push_str(&format!("--src {}", src.display()));
            if let Some(entry) = &spec.entry {
                cmd.push_str(&format!(" --entry {entry}"));
            }
            for (k, v) in spec.defines.iter().chain(knobs.iter()) {
                cmd.push_str(&format!(" --define {k}={v}"));
            }
        }
        (None, None) => cmd.push_str("(synthetic search: nothing to gate)"),
    }
    cmd.push_str(&format!(" --shape {shape}"));
    if s.causal {
        cmd.push_str(" --causal");
    }
    cmd.push_str(&format!(
        " --dtype {} --baseline {}",
        s.dtype, spec.baseline
    ));
    cmd
}

fn ncu_note(asked: bool) -> String {
    if !asked {
        return String::new();
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("ncu").is_file()))
        .unwrap_or(false);
    if found {
        "--ncu: finalists are ranked by speedup; profile the best with `cargo xtask ncu` (ncu scoring inside evo is not wired yet)".into()
    } else {
        "--ncu: Nsight Compute (ncu) is not on PATH: finalists are ranked by speedup alone".into()
    }
}

/// What was asked for, resolved: target, knobs and their domains, shape, seed.
fn search_spec(args: &Args) -> anyhow::Result<SearchSpec> {
    let mut shape: ShapeSpec = args
        .shape
        .parse()
        .with_context(|| format!("--shape {}", args.shape))?;
    shape.causal |= args.causal;
    shape.dtype = args.dtype;
    attn_measure::Problem::new(shape.clone())?;
    let declared = args
        .knobs
        .iter()
        .map(|k| KnobDomain::parse(k).map(|d| (d.name, d.values)))
        .collect::<Result<BTreeMap<_, _>, _>>()
        .context("--knob")?;
    let mut spec = SearchSpec {
        target: String::new(),
        implementation: None,
        src: None,
        entry: args.entry.clone(),
        defines: BTreeMap::new(),
        knobs: declared.clone(),
        shape,
        baseline: args.baseline.clone(),
        seed: args.seed.unwrap_or_else(fresh_seed),
        population: args.population,
        generations: args.generations,
    };
    if args.synthetic {
        spec.target = "synthetic".into();
        if declared.is_empty() {
            bail!("--synthetic needs --knob declarations");
        }
    } else if let Some(src) = &args.src {
        if declared.is_empty() {
            bail!("--src needs its knobs declared with --knob NAME=v1,v2,...");
        }
        spec.src = Some(src.clone());
        spec.target = format!(
            "src:{}",
            src.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        spec.defines = parse_config(&args.defines.join(","), "--define")?.0;
    } else {
        let name = args
            .implementation
            .clone()
            .unwrap_or_else(|| "tiled".into());
        let imp = attn_kernels::registry::find(&name)?;
        if !matches!(imp.engine, Engine::Kernel { .. }) || imp.knobs.is_empty() {
            bail!("`{name}` has no knobs to search");
        }
        imp.check_head_dim(spec.shape.head_dim)?;
        let mut knobs = BTreeMap::new();
        for knob in imp.knobs {
            let values = match declared.get(knob.name) {
                Some(values) => {
                    if let Some(v) = values.iter().find(|v| !knob.domain.contains(v)) {
                        bail!(
                            "--knob {}: {v} is outside its domain {:?}",
                            knob.name,
                            knob.domain
                        );
                    }
                    values.clone()
                }
                None => knob.domain.to_vec(),
            };
            knobs.insert(knob.name.to_string(), values);
        }
        if let Some(unknown) = declared.keys().find(|k| !knobs.contains_key(*k)) {
            bail!("--knob {unknown}: `{name}` has no such knob");
        }
        spec.knobs = knobs;
        spec.target = name.clone();
        spec.implementation = Some(name);
    }
    Ok(spec)
}

/// The search space of a spec: its knobs, validated like the registry (or the `--src` geometry).
fn space(spec: &SearchSpec, limits: Limits) -> anyhow::Result<Space> {
    let knobs = spec
        .knobs
        .iter()
        .map(|(name, values)| KnobDomain::new(name.clone(), values.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let head_dim = spec.shape.head_dim;
    Ok(match &spec.implementation {
        Some(name) => {
            let imp = attn_kernels::registry::find(name)?;
            Space::new(knobs, move |k| {
                imp.resolve(&Config(k.clone()), head_dim, &limits)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })?
        }
        None => {
            let defines = spec.defines.clone();
            Space::new(knobs, move |k| {
                let all = Config(defines.clone()).merged(&Config(k.clone()));
                let get = |name: &str, default: i64| all.get(name).unwrap_or(default);
                let (block_m, warps, shared) = (
                    get("BLOCK_M", 64),
                    get("NUM_WARPS", 4),
                    get("SHARED_BYTES", 0),
                );
                if block_m < 1
                    || warps < 1
                    || warps * 32 > i64::from(limits.max_threads_per_block)
                    || !(0..=i64::from(limits.max_shared_per_block)).contains(&shared)
                {
                    Err(format!("BLOCK_M={block_m}, NUM_WARPS={warps}, SHARED_BYTES={shared} do not fit the device"))
                } else {
                    Ok(())
                }
            })?
        }
    })
}

/// Generation 0's seeds: the registered default, then micro's top configs and earlier bests.
fn seeds(args: &Args, spec: &SearchSpec, space: &Space) -> anyhow::Result<Vec<Knobs>> {
    let fill: Knobs = match &spec.implementation {
        Some(name) => {
            let imp = attn_kernels::registry::find(name)?;
            let tuned = imp.tuned_for(&attn_measure::Problem::new(spec.shape.clone())?.shape);
            imp.default_config(spec.shape.head_dim).merged(&tuned).0
        }
        None => space
            .knobs()
            .iter()
            .map(|k| (k.name.clone(), k.values[0]))
            .collect(),
    };
    let mut seeds = vec![fill.clone()];
    if args.seed_from_micro {
        let path = args.evidence.join("micro").join("log.csv");
        let mut rows = attn_evidence::read_evo_log(&path)
            .with_context(|| "--seed-from-micro: run `cargo xtask micro` first".to_string())?;
        rows.retain(|r| r.status == "ok" && r.score.is_some());
        rows.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)));
        let before = seeds.len();
        for row in &rows {
            if let Some(k) = space.project(&row_knobs(row), &fill) {
                if !seeds.contains(&k) {
                    seeds.push(k);
                }
            }
        }
        println!(
            "seeded from micro: {} distinct valid config(s) from {} ranked tile configs (knobs matched by name: {})",
            seeds.len() - before,
            rows.len(),
            space.knobs().iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    if args.seed_from_evo {
        let dir = args.evidence.join("evo");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path().join("best.json")) else {
                continue;
            };
            let Ok(best) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if best["target"] != spec.target.as_str() {
                continue;
            }
            let config: BTreeMap<String, String> =
                serde_json::from_value(best["config"].clone()).unwrap_or_default();
            if let Some(k) = attn_evo::knobs_from_strings(&config)
                .ok()
                .and_then(|k| space.project(&k, &fill))
            {
                if !seeds.contains(&k) {
                    seeds.push(k);
                }
            }
        }
    }
    Ok(seeds)
}

/// A GPU workers run on.
#[derive(Debug, Clone)]
struct Device {
    ordinal: usize,
    name: String,
}

/// The visible GPUs of the same model as the first (timings are only compared within a model).
fn devices() -> anyhow::Result<Vec<Device>> {
    let first = Gpu::open(0)?;
    let model = first.info().name.clone();
    drop(first);
    let mut found = vec![Device {
        ordinal: 0,
        name: model.clone(),
    }];
    for ordinal in 1..64 {
        let Ok(gpu) = Gpu::open(ordinal) else { break };
        let name = gpu.info().name.clone();
        if name == model {
            found.push(Device { ordinal, name });
        } else {
            println!(
                "GPU {ordinal} ({name}) is not a {model}: not used, its timings would not compare"
            );
        }
    }
    Ok(found)
}

/// Parallel compiles of a generation: which are done, and how long each took.
#[derive(Default)]
struct CompileBoard {
    done: Mutex<HashMap<usize, Option<f64>>>,
    changed: Condvar,
}

impl CompileBoard {
    fn finish(&self, index: usize, seconds: Option<f64>) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index, seconds);
        self.changed.notify_all();
    }

    /// Waits for candidate `index`'s compile (a failed one too: the worker reports its error).
    fn wait(&self, index: usize) -> Option<f64> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(seconds) = done.get(&index) {
                return *seconds;
            }
            done = self.changed.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Compiles every candidate of a generation on CPU threads (warming NVRTC's disk cache, so that
/// workers only load), in proposal order, while the GPU measures the earlier ones.
fn spawn_compiles(
    spec: &SearchSpec,
    gpu: &Gpu,
    candidates: &[Knobs],
    board: Arc<CompileBoard>,
    threads: usize,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let dtype = attn_measure::oracle_dtype(spec.shape.dtype);
    let (arch, limits) = (gpu.arch(), gpu.limits());
    let head_dim = spec.shape.head_dim;
    // The candidates exactly as the workers build them, so that their compiles hit the same cache
    // entries (`Candidate::variant` is the one place a config becomes defines).
    let jobs: Vec<(usize, Option<Candidate>)> = candidates
        .iter()
        .enumerate()
        .map(|(i, knobs)| {
            let config = Config(spec.defines.clone()).merged(&Config(knobs.clone()));
            let candidate = worker_candidate(
                spec.implementation.as_deref(),
                spec.src.as_deref(),
                spec.entry.as_deref(),
                config,
            );
            (i, candidate.ok())
        })
        .collect();
    Ok(std::thread::spawn(move || {
        let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((index, candidate)) = job else { break };
                    let started = Instant::now();
                    let ok = candidate.is_some_and(|c| {
                        c.variant(dtype, head_dim, &arch, &limits)
                            .is_ok_and(|v| compile(&v.request).is_ok())
                    });
                    board.finish(index, ok.then(|| started.elapsed().as_secs_f64()));
                });
            }
        });
    }))
}

/// What a worker is asked to do.
enum WorkerJob {
    Baseline,
    Candidate(Knobs),
}

/// Everything workers of this run share.
struct WorkerContext {
    spec: SearchSpec,
    args_timeout: Duration,
    samples: usize,
    warmup: usize,
    checks: usize,
    sdpa_backend: String,
    synthetic: bool,
}

impl WorkerContext {
    /// Runs one worker process on GPU `device` with a timeout; any failure becomes an
    /// `invalid: ...` status, never an error of the search.
    fn run(&self, job: &WorkerJob, device: usize, seed: u64, timeout: Duration) -> WorkerReport {
        let spec = &self.spec;
        let mut args: Vec<String> = vec![
            "evo-worker".into(),
            "--shape".into(),
            spec.shape.to_string(),
            "--device".into(),
            device.to_string(),
            "--seed".into(),
            seed.to_string(),
            "--samples".into(),
            self.samples.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--checks".into(),
            self.checks.to_string(),
            "--sdpa-backend".into(),
            self.sdpa_backend.clone(),
        ];
        if self.synthetic {
            args.push("--synthetic".into());
        }
        match job {
            WorkerJob::Baseline => args.extend(["--baseline".into(), spec.baseline.clone()]),
            WorkerJob::Candidate(knobs) => {
                match (&spec.implementation, &spec.src) {
                    (Some(name), _) => args.extend(["--impl".into(), name.clone()]),
                    (None, Some(src)) => args.extend(["--src".into(), src.display().to_string()]),
                    (None, None) => {}
                }
                if let Some(entry) = &spec.entry {
                    args.extend(["--entry".into(), entry.clone()]);
                }
                let config = Config(spec.defines.clone()).merged(&Config(knobs.clone()));
                args.extend(["--config".into(), config.to_string()]);
            }
        }
        match run_with_timeout(&args, timeout) {
            Ok(report) => report,
            Err(err) => WorkerReport {
                status: format!("invalid: {}", crate::one_line(&err)),
                ..WorkerReport::default()
            },
        }
    }
}

/// Runs `xtask <args>` supervised (own process group, killed with its group on timeout) and turns
/// what it printed, or how it died, into a report.
fn run_with_timeout(args: &[String], timeout: Duration) -> anyhow::Result<WorkerReport> {
    let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
    command.args(args);
    let (status, out, err) = match run_supervised(command, timeout)? {
        Supervised::TimedOut => {
            return Ok(WorkerReport {
                status: format!("invalid: timeout after {} s", timeout.as_secs_f64()),
                ..WorkerReport::default()
            })
        }
        Supervised::Finished {
            status,
            stdout,
            stderr,
        } => (status, stdout, stderr),
    };
    if let Some(report) = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str::<WorkerReport>(l).ok())
    {
        return Ok(report);
    }
    let why = match status.code() {
        Some(code) => format!("exit code {code}"),
        None => format!("killed by a signal ({status})"),
    };
    Ok(WorkerReport {
        status: format!(
            "invalid: {}",
            classify_failure(&format!("{out}\n{err}"), &why)
        ),
        ..WorkerReport::default()
    })
}

/// Runs the hidden `xtask evo-worker`: prints one JSON line, exits without tearing down CUDA
/// (a context hit by a fault may not survive its destructors).
pub fn worker(args: WorkerArgs) -> anyhow::Result<u8> {
    exit_with_parent();
    let report = match evaluate(&args) {
        Ok(report) => report,
        Err(err) => WorkerReport {
            status: format!(
                "invalid: {}",
                classify_failure(&crate::one_line(&err), "error")
            ),
            ..WorkerReport::default()
        },
    };
    let line = serde_json::to_string(&report)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    std::process::exit(0);
}

fn evaluate(args: &WorkerArgs) -> anyhow::Result<WorkerReport> {
    let spec: ShapeSpec = args.shape.parse()?;
    if args.synthetic {
        return Ok(synthetic(args));
    }
    let problem = attn_measure::Problem::new(spec)?;
    let timing = TimingOptions {
        warmup: args.warmup,
        samples: args.samples,
        mode: TimingMode::Graph,
        ..TimingOptions::default()
    };
    let gpu = Gpu::open(args.device)?;
    if let Some(name) = &args.baseline {
        let backend: attn_measure::sdpa::Backend = args.sdpa_backend.parse()?;
        let (baseline, _) = attn_measure::Baseline::from_name(name, backend)?;
        let timings = match &baseline {
            attn_measure::Baseline::Sdpa { sdpa, backend } => {
                attn_measure::timing::SdpaSide::new(&gpu, sdpa, *backend, &problem, args.seed)
                    .block(&timing)?
            }
            attn_measure::Baseline::Registered(candidate) => {
                let candidate = candidate.for_shape(&problem.shape);
                let prepared =
                    Prepared::new(&gpu, &candidate, problem.dtype, problem.shape.head_dim)?;
                KernelSide::new(&gpu, &prepared, &problem, args.seed)?.block(&timing)?
            }
        };
        return Ok(WorkerReport {
            status: "ok".into(),
            samples_us: timings.samples_us,
            prepare_s: None,
        });
    }
    let config = parse_config(&args.config, "--config")?;
    let candidate = worker_candidate(
        args.implementation.as_deref(),
        args.src.as_deref(),
        args.entry.as_deref(),
        config,
    )?;
    let started = Instant::now();
    let prepared = Prepared::new(&gpu, &candidate, problem.dtype, problem.shape.head_dim)?;
    let prepare_s = Some(started.elapsed().as_secs_f64());
    let reference = attn_kernels::GpuReference::new(&gpu, problem.dtype, problem.shape.head_dim)?;
    let runs = attn_measure::check::run_checks(
        &gpu,
        &prepared,
        &reference,
        &problem,
        args.seed,
        args.checks,
        None,
    )?;
    if let Some(reason) = attn_measure::check::first_failure(&runs) {
        return Ok(WorkerReport {
            status: format!("invalid: wrong result ({reason})"),
            samples_us: vec![],
            prepare_s,
        });
    }
    let mut side = KernelSide::new(&gpu, &prepared, &problem, args.seed ^ 0x5eed)?;
    let timings = side.block(&timing)?;
    Ok(WorkerReport {
        status: "ok".into(),
        samples_us: timings.samples_us,
        prepare_s,
    })
}

/// The candidate a worker measures (and the precompile compiles): `--impl` or `--src` with `config`.
fn worker_candidate(
    implementation: Option<&str>,
    src: Option<&Path>,
    entry: Option<&str>,
    config: Config,
) -> anyhow::Result<Candidate> {
    Ok(match (implementation, src) {
        (Some(name), _) => Candidate::registered(name, config)?,
        (None, Some(src)) => Candidate::from_file(src, entry, config)?,
        (None, None) => bail!("the worker needs --impl, --src or --baseline"),
    })
}

/// The synthetic worker (tests without a GPU): 100 µs for the baseline; for a candidate, faster the
/// larger its knobs, with a little seeded noise. `MODE=1` dies the way a faulting kernel's worker
/// does, `MODE=2` hangs; `ATTN_EVO_SYNTHETIC_DELAY_MS` slows every candidate down (to kill a run
/// mid-way in tests).
fn synthetic(args: &WorkerArgs) -> WorkerReport {
    let knobs: Config = args.config.parse().unwrap_or_default();
    match knobs.get("MODE") {
        Some(1) => {
            eprintln!("error: CUDA cuStreamSynchronize failed: DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")");
            std::process::abort();
        }
        Some(2) => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        _ => {}
    }
    if let Some(ms) = std::env::var("ATTN_EVO_SYNTHETIC_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let base = if args.baseline.is_some() {
        100.0
    } else {
        let sum: i64 = knobs.0.values().sum();
        100.0 / (1.0 + 0.05 * sum as f64)
    };
    // A tiny deterministic wobble (a linear congruential sequence from the seed).
    let mut state = args.seed | 1;
    let samples_us = (0..args.samples)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            base * (1.0 + 1e-3 * ((state >> 33) as f64 / (1u64 << 31) as f64))
        })
        .collect();
    WorkerReport {
        status: "ok".into(),
        samples_us,
        prepare_s: None,
    }
}
