//! Measuring a search's candidates. The parent's side: [`Workers`] runs `xtask evo-worker JOB`
//! (hidden; `JOB` a [`WorkerJob`] as JSON) per candidate or baseline, supervised by
//! [`crate::supervise`] (own process group, timeout, killed with its group), as attn-evo's
//! `Measurer` while [`Precompile`] compiles the generation. The worker's side: [`serve`]
//! installs the kernels compiled for it elsewhere, measures the job with [`Worker`] (compile or
//! cache hit, correctness on fresh inputs,
//! graph-mode timing) and prints one [`Measurement`] as a JSON line. Any failure becomes an
//! invalid measurement.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use attn_evidence::{DecodeSpec, ImplConfig, SearchSpec, ShapeSpec};
use attn_evo::Measurement;
use attn_kernels::compile::{Arch, CacheEntry};
use attn_kernels::registry::Limits;
use attn_kernels::{Candidate, Config, Gpu, GpuReference, Prepared, TimingMode, TimingOptions};
use serde::{Deserialize, Serialize};

use super::decode::DecodeWorker;
use super::precompile::Precompile;
use super::target::{candidate, candidate_config};
use super::{Event, Report, WorkerOptions};
use crate::sdpa::Backend;
use crate::supervise::{classify_failure, exit_with_parent, run_json_worker};
use crate::timing::{KernelSide, SdpaSide, TimedSide};
use crate::{check, Baseline, Problem, Result};

/// What a worker is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Job {
    /// The search's baseline.
    Baseline,
    /// A config of the search, resolved.
    Candidate(ImplConfig),
}

/// Everything the workers of a search share: this program (which runs `evo-worker`), the search
/// and how candidates are measured.
#[derive(Debug)]
pub struct Workers<'a> {
    /// The program whose hidden `evo-worker` command serves a [`WorkerJob`].
    pub program: &'a Path,
    /// The search.
    pub spec: &'a SearchSpec,
    /// How candidates are measured.
    pub options: &'a WorkerOptions,
    /// The Ray cluster's GPUs the jobs run on, when the search is on Ray (`device` is a slot).
    pub pool: Option<&'a Arc<super::ray::RayPool>>,
}

impl Workers<'_> {
    /// Runs one worker on GPU `device` within `timeout`, with the compiled kernels `ptx` it
    /// installs first (a search on Ray's): its measurement, or why there is none.
    pub fn run(
        &self,
        job: &Job,
        device: usize,
        seed: u64,
        timeout: Duration,
        ptx: Vec<CacheEntry>,
    ) -> Measurement {
        let (spec, options) = (self.spec, self.options);
        let task = match job {
            Job::Baseline => Task::Baseline {
                name: spec.baseline.clone(),
            },
            Job::Candidate(resolved) => {
                let config = candidate_config(spec, resolved);
                let src = resolved.implementation.is_none();
                Task::Candidate {
                    implementation: resolved.implementation.clone(),
                    src: src.then(|| spec.src.clone()).flatten(),
                    entry: spec.entry.clone(),
                    config: config.to_string(),
                }
            }
        };
        // The backend the search recorded wins over this run's (a resumed search keeps its own).
        let sdpa_backend = (spec.sdpa_backend.as_deref())
            .and_then(|b| b.parse().ok())
            .unwrap_or(options.sdpa_backend);
        let job = WorkerJob {
            shape: spec.shape.clone(),
            decode: spec.decode.clone(),
            device,
            seed,
            samples: options.samples,
            warmup: options.warmup,
            checks: options.checks,
            sdpa_backend,
            synthetic: options.synthetic,
            task,
            ptx,
        };
        if let Some(pool) = self.pool {
            return pool.run(&job, device, timeout);
        }
        self.supervise(&job, timeout)
            .unwrap_or_else(|err| Measurement::invalid(err.to_string()))
    }

    /// Runs `program evo-worker JOB` supervised: its measurement, or how it died as an invalid
    /// one.
    fn supervise(&self, job: &WorkerJob, timeout: Duration) -> Result<Measurement> {
        let mut command = Command::new(self.program);
        let json =
            serde_json::to_string(job).map_err(|e| crate::MeasureError::Invalid(e.to_string()))?;
        command.args(["evo-worker", &json]);
        Ok(run_json_worker(command, timeout)?.unwrap_or_else(Measurement::invalid))
    }
}

/// Candidates measured by worker processes while the generation compiles (on this machine's
/// CPU threads, or on a Ray cluster's CPU workers).
pub(super) struct Measure<'a> {
    /// The workers.
    pub workers: &'a Workers<'a>,
    /// What the precompile compiles for: GPU 0's architecture and limits, or the Ray cluster's
    /// GPUs'; `None` where nothing is compiled (a synthetic target).
    pub compile_for: Option<(Arch, Limits)>,
    /// Where the generation's start goes.
    pub report: Report<'a>,
    /// Compiled kernels of candidates ready to be measured, for their workers to install.
    pub shipped: Mutex<HashMap<ImplConfig, Vec<CacheEntry>>>,
}

impl attn_evo::Measurer for Measure<'_> {
    type Generation = Option<(Precompile, Vec<ImplConfig>)>;

    fn begin(&self, number: u32, configs: &[ImplConfig]) -> Self::Generation {
        (self.report)(Event::Generation(number));
        let spec = &self.workers.spec;
        let target = self.compile_for.clone()?;
        let precompile = match self.workers.pool {
            // A few compile tasks per GPU in flight: the cluster's CPUs are Ray's to place.
            Some(pool) => {
                let threads = 2 * pool.slots.len().max(1);
                Precompile::start_on_ray(Arc::clone(pool), spec, target, configs, threads)
            }
            None => {
                let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
                Precompile::start(spec, target, configs, threads)
            }
        };
        Some((precompile, configs.to_vec()))
    }

    fn ready(&self, generation: &Self::Generation, index: usize) -> Option<f64> {
        let (precompile, configs) = generation.as_ref()?;
        let (seconds, entries) = precompile.wait(index);
        if !entries.is_empty() {
            let mut shipped = self.shipped.lock().unwrap_or_else(|e| e.into_inner());
            shipped.insert(configs[index].clone(), entries);
        }
        seconds
    }

    fn measure(&self, config: &ImplConfig, seed: u64, device: usize) -> Measurement {
        // Inputs seeded by the config, not its position (the driver's `seed`): a resumed run
        // measures the same candidate on the same inputs.
        let timeout = self.workers.options.timeout;
        let job = Job::Candidate(config.clone());
        let shipped = self
            .shipped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(config);
        self.workers
            .run(&job, device, seed, timeout, shipped.unwrap_or_default())
    }

    fn end(&self, generation: Self::Generation) {
        let Some((precompile, _)) = generation else {
            return;
        };
        let (compiled, of) = precompile.join();
        if self.workers.pool.is_some() {
            (self.report)(Event::Line(format!(
                "ray: {compiled} of {of} candidate(s) compiled on the cluster's CPU workers"
            )));
        }
    }
}

/// Serves the hidden `evo-worker JOB`: prints one JSON line, exits without tearing down CUDA (a
/// context hit by a fault may not survive its destructors).
pub fn serve(job: &str) -> Result<()> {
    exit_with_parent();
    let measured = read_job(job)
        .and_then(|job| {
            serde_json::from_str::<WorkerJob>(&job)
                .map_err(|e| crate::MeasureError::Invalid(format!("the worker's job: {e}")))
        })
        .and_then(|job| job.evaluate())
        .unwrap_or_else(|err| Measurement::invalid(classify_failure(&err.to_string(), "error")));
    let line = serde_json::to_string(&measured)
        .map_err(|e| crate::MeasureError::Invalid(e.to_string()))?;
    let mut stdout = std::io::stdout().lock();
    let io = |source| crate::MeasureError::Io {
        what: "writing the measurement".into(),
        source,
    };
    writeln!(stdout, "{line}").map_err(io)?;
    stdout.flush().map_err(io)?;
    std::process::exit(0);
}

/// A job's JSON as a hidden command takes it: inline, or `@PATH`, the file that holds it (a job
/// with compiled kernels outgrows one command-line argument).
pub fn read_job(job: &str) -> Result<String> {
    match job.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|source| crate::MeasureError::Io {
            what: format!("reading the job {path}"),
            source,
        }),
        None => Ok(job.to_string()),
    }
}

/// What one worker process is asked to do: one candidate (or the baseline) on one shape and GPU,
/// handed over as JSON on its command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerJob {
    /// The problem.
    pub shape: ShapeSpec,
    /// The decode batch, in a decode search (the task's implementation a decode one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeSpec>,
    /// The GPU's CUDA ordinal.
    pub device: usize,
    /// Seed of the inputs.
    pub seed: u64,
    /// Timed samples.
    pub samples: usize,
    /// Untimed launches first.
    pub warmup: usize,
    /// Fresh inputs the candidate must pass before it is timed.
    pub checks: usize,
    /// SDPA backend of an `sdpa` baseline.
    pub sdpa_backend: Backend,
    /// Test mode without a GPU: a synthetic time computed from the knobs.
    pub synthetic: bool,
    /// The baseline or the candidate.
    pub task: Task,
    /// Kernels compiled elsewhere (a search on Ray's compile tasks), installed in this
    /// machine's cache before anything is prepared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ptx: Vec<CacheEntry>,
}

impl WorkerJob {
    /// Measures the job in this process.
    fn evaluate(&self) -> Result<Measurement> {
        for entry in &self.ptx {
            // One that cannot be installed only costs the compile.
            let _ = attn_kernels::compile::install(entry);
        }
        if self.synthetic {
            let (baseline, config) = match &self.task {
                Task::Baseline { .. } => (true, ""),
                Task::Candidate { config, .. } => (false, config.as_str()),
            };
            let knobs: Config = config.parse().unwrap_or_default();
            let (seed, samples) = (self.seed, self.samples);
            return Ok(attn_evo::synthetic_measurement(
                &knobs.0, baseline, seed, samples,
            ));
        }
        if let Some(spec) = &self.decode {
            return self.evaluate_decode(spec);
        }
        let worker = Worker::open(self.shape.clone(), self.device, self.warmup, self.samples)?;
        match &self.task {
            Task::Baseline { name } => {
                let samples_us = worker.baseline(name, self.sdpa_backend, self.seed)?;
                Ok(Measurement::ok(samples_us, None))
            }
            Task::Candidate {
                implementation,
                src,
                entry,
                config,
            } => {
                let bad = |e| crate::MeasureError::Invalid(format!("--config: {e}"));
                let config = config.parse().map_err(bad)?;
                let (name, entry) = (implementation.as_deref(), entry.as_deref());
                let candidate = candidate(name, src.as_deref(), entry, config)?;
                let m = worker.candidate(&candidate, self.seed, self.checks)?;
                Ok(Measurement::from_result(m.samples_us, m.prepare_s))
            }
        }
    }
}

impl WorkerJob {
    /// Measures a decode search's job in this process.
    fn evaluate_decode(&self, spec: &DecodeSpec) -> Result<Measurement> {
        let worker = DecodeWorker::open(spec.clone(), self.device, self.warmup, self.samples)?;
        match &self.task {
            Task::Baseline { name } => {
                let samples_us = worker.baseline(name, self.sdpa_backend, self.seed)?;
                Ok(Measurement::ok(samples_us, None))
            }
            Task::Candidate {
                implementation: Some(name),
                config,
                ..
            } => {
                let bad = |e| crate::MeasureError::Invalid(format!("--config: {e}"));
                let config: Config = config.parse().map_err(bad)?;
                let m = worker.candidate(name, &config, self.seed, self.checks)?;
                Ok(Measurement::from_result(m.samples_us, m.prepare_s))
            }
            Task::Candidate { .. } => Err(crate::MeasureError::Invalid(
                "a decode search measures registered decode implementations only".into(),
            )),
        }
    }
}

/// The side a worker measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Task {
    /// Time this baseline (sdpa, cublas, or a registered implementation).
    Baseline {
        /// Its name.
        name: String,
    },
    /// Check and time a candidate: a registered implementation or a source file.
    Candidate {
        /// The registered implementation.
        implementation: Option<String>,
        /// Or a kernel file and its entry point.
        src: Option<PathBuf>,
        /// The entry point of `src`.
        entry: Option<String>,
        /// The knobs (and fixed defines of a source file), `K=V,K=V`.
        config: String,
    },
}

/// How a search times a side: graph mode, `warmup` launches, then `samples`.
pub fn search_timing(warmup: usize, samples: usize) -> TimingOptions {
    TimingOptions {
        warmup,
        samples,
        mode: TimingMode::Graph,
        ..TimingOptions::default()
    }
}

/// One problem on one GPU, timed as a search times (graph mode, `warmup` then `samples`).
pub struct Worker {
    gpu: Gpu,
    problem: Problem,
    timing: TimingOptions,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("problem", &self.problem)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Validates the problem and opens GPU `device`.
    pub fn open(shape: ShapeSpec, device: usize, warmup: usize, samples: usize) -> Result<Worker> {
        let problem = Problem::new(shape)?;
        let timing = search_timing(warmup, samples);
        let gpu = Gpu::open(device)?;
        Ok(Worker {
            gpu,
            problem,
            timing,
        })
    }

    fn prepare(&self, candidate: &Candidate) -> Result<Prepared> {
        let (dtype, head_dim) = (self.problem.dtype, self.problem.shape.head_dim);
        Ok(Prepared::new(&self.gpu, candidate, dtype, head_dim)?)
    }

    /// The baseline `name` (sdpa with `sdpa_backend`, cublas, or a registered implementation):
    /// its samples, µs.
    pub fn baseline(&self, name: &str, sdpa_backend: Backend, seed: u64) -> Result<Vec<f64>> {
        let (baseline, _) = Baseline::from_name(name, sdpa_backend)?;
        let (gpu, problem) = (&self.gpu, &self.problem);
        let timings = match &baseline {
            Baseline::Sdpa { sdpa, backend, .. } => {
                SdpaSide::new(gpu, sdpa, *backend, problem, seed).block(&self.timing)?
            }
            Baseline::Registered(candidate) => {
                let prepared = self.prepare(&candidate.for_problem(
                    &problem.shape,
                    &problem.params,
                    &gpu.limits(),
                ))?;
                KernelSide::new(gpu, &prepared, problem, seed)?.block(&self.timing)?
            }
        };
        Ok(timings.samples_us)
    }

    /// `candidate` checked on `checks` fresh inputs against the GPU reference, then timed; a
    /// wrong result is a measurement (`Err` samples), not an error.
    pub fn candidate(&self, candidate: &Candidate, seed: u64, checks: usize) -> Result<Measured> {
        let started = Instant::now();
        let prepared = self.prepare(candidate)?;
        let prepare_s = Some(started.elapsed().as_secs_f64());
        let (gpu, problem) = (&self.gpu, &self.problem);
        let reference = GpuReference::new(gpu, problem.dtype, problem.shape.head_dim)?;
        let runs = check::run_checks(gpu, &prepared, &reference, problem, seed, checks, None)?;
        if let Some(reason) = check::first_failure(&runs) {
            let samples_us = Err(format!("wrong result ({reason})"));
            return Ok(Measured {
                samples_us,
                prepare_s,
            });
        }
        let mut side = KernelSide::new(gpu, &prepared, problem, seed ^ 0x5eed)?;
        let samples_us = Ok(side.block(&self.timing)?.samples_us);
        Ok(Measured {
            samples_us,
            prepare_s,
        })
    }
}

/// A candidate measured: its samples, or why it has none (a wrong result).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Timed samples, µs; `Err` says why the candidate was not timed.
    pub samples_us: std::result::Result<Vec<f64>, String>,
    /// Seconds to prepare (compile or cache hit, load).
    pub prepare_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_crosses_to_the_worker_as_json_and_a_synthetic_one_measures_without_a_gpu() {
        let job = WorkerJob {
            shape: "2,8,1024,64".parse().unwrap(),
            decode: None,
            device: 1,
            seed: 7,
            samples: 5,
            warmup: 1,
            checks: 1,
            sdpa_backend: Backend::Flash,
            synthetic: true,
            task: Task::Candidate {
                implementation: None,
                src: None,
                entry: None,
                config: "A=2,B=4".into(),
            },
            ptx: vec![],
        };
        let json = serde_json::to_string(&job).unwrap();
        assert!(json.contains(r#""sdpa_backend":"flash""#), "{json}");
        assert!(json.contains(r#""kind":"candidate""#), "{json}");
        assert_eq!(serde_json::from_str::<WorkerJob>(&json).unwrap(), job);
        let knobs = [("A".to_string(), 2), ("B".to_string(), 4)].into();
        let expected = attn_evo::synthetic_measurement(&knobs, false, 7, 5);
        assert_eq!(job.evaluate().unwrap(), expected);
        let baseline = WorkerJob {
            task: Task::Baseline {
                name: "synthetic".into(),
            },
            ..job
        };
        let expected =
            attn_evo::synthetic_measurement(&std::collections::BTreeMap::new(), true, 7, 5);
        assert_eq!(baseline.evaluate().unwrap(), expected);
    }
}
