//! The worker protocol: the parent runs `xtask evo-worker` (hidden) per candidate, supervised
//! by `attn_measure::supervise`; the worker measures one candidate (or the baseline) with
//! `attn_measure::search` and prints one [`Measurement`] as a JSON line. Any failure becomes an
//! invalid measurement.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use attn_evidence::{SearchSpec, ShapeSpec};
use attn_evo::{Knobs, Measurement};
use attn_kernels::Config;
use attn_measure::search::Worker;
use attn_measure::supervise::{classify_failure, exit_with_parent, run_json_worker};

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

/// Everything the workers of a run share: the search and the arguments of `evo`.
pub struct Workers<'a> {
    pub spec: &'a SearchSpec,
    pub args: &'a super::Args,
}

impl Workers<'_> {
    /// Runs one worker on GPU `device` within `timeout`: its measurement, or why there is none.
    pub fn run(&self, job: &Job, device: usize, seed: u64, timeout: Duration) -> Measurement {
        let (spec, run) = (self.spec, self.args);
        let mut args: Vec<String> = vec![
            "evo-worker".into(),
            "--shape".into(),
            spec.shape.to_string(),
        ];
        for (flag, value) in [
            ("--device", device.to_string()),
            ("--seed", seed.to_string()),
            ("--samples", run.samples.to_string()),
            ("--warmup", run.warmup.to_string()),
            ("--checks", run.checks.to_string()),
            ("--sdpa-backend", run.sdpa_backend.clone()),
        ] {
            args.extend([flag.into(), value]);
        }
        if run.synthetic {
            args.push("--synthetic".into());
        }
        match job {
            Job::Baseline => args.extend(["--baseline".into(), spec.baseline.clone()]),
            Job::Candidate(knobs) => {
                let (name, config) = attn_measure::search::implementation_and_config(spec, knobs);
                match (name, &spec.src) {
                    (Some(name), _) => args.extend(["--impl".into(), name.into()]),
                    (None, Some(src)) => args.extend(["--src".into(), src.display().to_string()]),
                    (None, None) => {}
                }
                if let Some(entry) = &spec.entry {
                    args.extend(["--entry".into(), entry.clone()]);
                }
                args.extend(["--config".into(), config.to_string()]);
            }
        }
        supervise(&args, timeout).unwrap_or_else(|err| Measurement::invalid(crate::one_line(&err)))
    }
}

/// Runs `xtask <args>` supervised: its measurement, or how it died as an invalid one.
fn supervise(args: &[String], timeout: Duration) -> anyhow::Result<Measurement> {
    let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
    command.args(args);
    Ok(run_json_worker(command, timeout)?.unwrap_or_else(Measurement::invalid))
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
        let knobs: Config = args.config.parse().unwrap_or_default();
        let (baseline, seed) = (args.baseline.is_some(), args.seed);
        let samples = args.samples;
        let measured = attn_evo::synthetic_measurement(&knobs.0, baseline, seed, samples);
        return Ok(measured);
    }
    let worker = Worker::open(spec, args.device, args.warmup, args.samples)?;
    if let Some(name) = &args.baseline {
        let samples_us = worker.baseline(name, &args.sdpa_backend, args.seed)?;
        return Ok(Measurement::ok(samples_us, None));
    }
    let bad = |e: String| anyhow::anyhow!("--config: {e}");
    let config = args.config.parse().map_err(bad)?;
    let (name, entry) = (args.implementation.as_deref(), args.entry.as_deref());
    let candidate = attn_measure::search::candidate(name, args.src.as_deref(), entry, config)?;
    let m = worker.candidate(&candidate, args.seed, args.checks)?;
    Ok(Measurement::from_result(m.samples_us, m.prepare_s))
}
