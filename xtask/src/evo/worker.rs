//! The worker protocol: the parent runs `xtask evo-worker` (hidden) per candidate, supervised
//! by `attn_measure::supervise`; the worker measures one candidate (or the baseline) and prints
//! one [`Measurement`] as a JSON line. Any failure becomes an invalid measurement.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use attn_evidence::{SearchSpec, ShapeSpec};
use attn_evo::{Knobs, Measurement};
use attn_kernels::{Candidate, Config, Gpu, Prepared, TimingMode, TimingOptions};
use attn_measure::supervise::{classify_failure, exit_with_parent, run_supervised, Supervised};
use attn_measure::timing::{KernelSide, TimedSide};
use attn_measure::{Baseline, Problem};

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

/// What a worker is asked to do.
pub enum Job {
    Baseline,
    Candidate(Knobs),
}

/// Everything the workers of a run share.
pub struct Workers {
    pub spec: SearchSpec,
    pub samples: usize,
    pub warmup: usize,
    pub checks: usize,
    pub sdpa_backend: String,
    pub synthetic: bool,
}

impl Workers {
    /// Runs one worker on GPU `device` within `timeout`: its measurement, or why there is none.
    pub fn run(&self, job: &Job, device: usize, seed: u64, timeout: Duration) -> Measurement {
        let spec = &self.spec;
        let mut args: Vec<String> = vec![
            "evo-worker".into(),
            "--shape".into(),
            spec.shape.to_string(),
        ];
        for (flag, value) in [
            ("--device", device.to_string()),
            ("--seed", seed.to_string()),
            ("--samples", self.samples.to_string()),
            ("--warmup", self.warmup.to_string()),
            ("--checks", self.checks.to_string()),
            ("--sdpa-backend", self.sdpa_backend.clone()),
        ] {
            args.extend([flag.into(), value]);
        }
        if self.synthetic {
            args.push("--synthetic".into());
        }
        match job {
            Job::Baseline => args.extend(["--baseline".into(), spec.baseline.clone()]),
            Job::Candidate(knobs) => {
                match (&spec.implementation, &spec.src) {
                    (Some(name), _) => args.extend(["--impl".into(), name.clone()]),
                    (None, Some(src)) => args.extend(["--src".into(), src.display().to_string()]),
                    (None, None) => {}
                }
                if let Some(entry) = &spec.entry {
                    args.extend(["--entry".into(), entry.clone()]);
                }
                args.extend(["--config".into(), config(spec, knobs).to_string()]);
            }
        }
        supervise(&args, timeout).unwrap_or_else(|err| Measurement::invalid(crate::one_line(&err)))
    }
}

/// A candidate's defines: the spec's fixed ones and its knobs.
pub fn config(spec: &SearchSpec, knobs: &Knobs) -> Config {
    Config(spec.defines.clone()).merged(&Config(knobs.clone()))
}

/// Runs `xtask <args>` supervised and turns what it printed, or how it died, into a measurement.
fn supervise(args: &[String], timeout: Duration) -> anyhow::Result<Measurement> {
    let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
    command.args(args);
    let (status, out, err) = match run_supervised(command, timeout)? {
        Supervised::TimedOut => {
            return Ok(Measurement::invalid(format!(
                "timeout after {} s",
                timeout.as_secs_f64()
            )))
        }
        Supervised::Finished {
            status,
            stdout,
            stderr,
        } => (status, stdout, stderr),
    };
    if let Some(measured) = Measurement::from_output(&out) {
        return Ok(measured);
    }
    let why = match status.code() {
        Some(code) => format!("exit code {code}"),
        None => format!("killed by a signal ({status})"),
    };
    Ok(Measurement::invalid(classify_failure(
        &format!("{out}\n{err}"),
        &why,
    )))
}

/// Runs the hidden `xtask evo-worker`: prints one JSON line, exits without tearing down CUDA
/// (a context hit by a fault may not survive its destructors).
pub fn worker(args: WorkerArgs) -> anyhow::Result<u8> {
    exit_with_parent();
    let measured = evaluate(&args).unwrap_or_else(|err| {
        Measurement::invalid(classify_failure(&crate::one_line(&err), "error"))
    });
    let line = serde_json::to_string(&measured)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    std::process::exit(0);
}

fn evaluate(args: &WorkerArgs) -> anyhow::Result<Measurement> {
    let spec: ShapeSpec = args.shape.parse()?;
    if args.synthetic {
        return Ok(synthetic(args));
    }
    let problem = Problem::new(spec)?;
    let timing = TimingOptions {
        warmup: args.warmup,
        samples: args.samples,
        mode: TimingMode::Graph,
        ..TimingOptions::default()
    };
    let gpu = Gpu::open(args.device)?;
    let prepare = |candidate: &Candidate| {
        Prepared::new(&gpu, candidate, problem.dtype, problem.shape.head_dim)
    };
    if let Some(name) = &args.baseline {
        let (baseline, _) = Baseline::from_name(name, args.sdpa_backend.parse()?)?;
        let timings = match &baseline {
            Baseline::Sdpa { sdpa, backend } => {
                attn_measure::timing::SdpaSide::new(&gpu, sdpa, *backend, &problem, args.seed)
                    .block(&timing)?
            }
            Baseline::Registered(candidate) => {
                let prepared = prepare(&candidate.for_shape(&problem.shape))?;
                KernelSide::new(&gpu, &prepared, &problem, args.seed)?.block(&timing)?
            }
        };
        return Ok(Measurement::ok(timings.samples_us, None));
    }
    let config = args
        .config
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--config: {e}"))?;
    let candidate = candidate(
        args.implementation.as_deref(),
        args.src.as_deref(),
        args.entry.as_deref(),
        config,
    )?;
    let started = Instant::now();
    let prepared = prepare(&candidate)?;
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
        return Ok(Measurement {
            prepare_s,
            ..Measurement::invalid(format!("wrong result ({reason})"))
        });
    }
    let mut side = KernelSide::new(&gpu, &prepared, &problem, args.seed ^ 0x5eed)?;
    Ok(Measurement::ok(side.block(&timing)?.samples_us, prepare_s))
}

/// The candidate a worker measures (and the precompile compiles): `--impl` or `--src` with `config`.
pub fn candidate(
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

/// The synthetic worker (tests without a GPU; times from `attn_evo::synthetic_samples`). `MODE=1` dies the way a faulting kernel's worker
/// does, `MODE=2` hangs; `ATTN_EVO_SYNTHETIC_DELAY_MS` slows every candidate down (to kill a run
/// mid-way in tests).
fn synthetic(args: &WorkerArgs) -> Measurement {
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
    let samples_us =
        attn_evo::synthetic_samples(&knobs.0, args.baseline.is_some(), args.seed, args.samples);
    Measurement::ok(samples_us, None)
}
