//! Measuring for a search (`cargo xtask evo`): one candidate or the baseline on one GPU, the way
//! a search worker process does it (compile or cache hit, correctness on fresh inputs, graph-mode
//! timing); a generation's compiles on CPU threads while the GPU measures; the GPUs a search
//! runs on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use attn_evidence::{SearchSpec, ShapeSpec};
use attn_kernels::compile::compile;
use attn_kernels::registry::{self, Limits};
use attn_kernels::{Candidate, Config, Gpu, GpuReference, Prepared, TimingMode, TimingOptions};

use crate::timing::{KernelSide, SdpaSide, TimedSide};
use crate::{check, Baseline, MeasureError, Problem, Result};

/// A candidate measured: its samples, or why it has none (a wrong result).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Timed samples, µs; `Err` says why the candidate was not timed.
    pub samples_us: std::result::Result<Vec<f64>, String>,
    /// Seconds to prepare (compile or cache hit, load).
    pub prepare_s: Option<f64>,
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
        let timing = TimingOptions {
            warmup,
            samples,
            mode: TimingMode::Graph,
            ..TimingOptions::default()
        };
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
    pub fn baseline(&self, name: &str, sdpa_backend: &str, seed: u64) -> Result<Vec<f64>> {
        let (baseline, _) = Baseline::from_name(name, sdpa_backend.parse()?)?;
        let (gpu, problem) = (&self.gpu, &self.problem);
        let timings = match &baseline {
            Baseline::Sdpa { sdpa, backend } => {
                SdpaSide::new(gpu, sdpa, *backend, problem, seed).block(&self.timing)?
            }
            Baseline::Registered(candidate) => {
                let prepared = self.prepare(&candidate.for_shape(&problem.shape))?;
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

/// The candidate a worker measures (and the precompile compiles): a registered implementation
/// or a source file, with `config`.
pub fn candidate(
    implementation: Option<&str>,
    src: Option<&Path>,
    entry: Option<&str>,
    config: Config,
) -> Result<Candidate> {
    Ok(match (implementation, src) {
        (Some(name), _) => Candidate::registered(name, config)?,
        (None, Some(src)) => Candidate::from_file(src, entry, config)?,
        (None, None) => {
            let why = "the worker needs --impl, --src or --baseline";
            return Err(MeasureError::Invalid(why.into()));
        }
    })
}

/// A search candidate's defines: the spec's fixed ones and its knobs.
pub fn config(spec: &SearchSpec, knobs: &BTreeMap<String, i64>) -> Config {
    Config(spec.defines.clone()).merged(&Config(knobs.clone()))
}

/// The knobs of registered implementation `name` a search may tune at `head_dim`, with their
/// domains.
pub fn searchable_knobs(
    name: &str,
    head_dim: usize,
) -> Result<Vec<(&'static str, &'static [i64])>> {
    let imp = registry::find(name)?;
    if imp.knobs.is_empty() {
        return Err(MeasureError::Invalid(format!(
            "`{name}` has no knobs to search"
        )));
    }
    imp.check_head_dim(head_dim)?;
    Ok(imp.knobs.iter().map(|k| (k.name, k.domain)).collect())
}

/// The registry's constraints on `name`'s knobs at `head_dim` within `limits`, as a search
/// space's validator.
pub fn registry_constraint(
    name: &str,
    head_dim: usize,
    limits: Limits,
) -> Result<impl Fn(&BTreeMap<String, i64>) -> std::result::Result<(), String> + Send + Sync> {
    let imp = registry::find(name)?;
    Ok(move |knobs: &BTreeMap<String, i64>| {
        imp.resolve(&Config(knobs.clone()), head_dim, &limits)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// `name`'s default config for `shape`, tuned values included: a search's first seed.
pub fn default_knobs(name: &str, shape: &ShapeSpec) -> Result<BTreeMap<String, i64>> {
    let imp = registry::find(name)?;
    let tuned = imp.tuned_for(&Problem::new(shape.clone())?.shape);
    Ok(imp.default_config(shape.head_dim).merged(&tuned).0)
}

/// A GPU a search measures on.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// Its CUDA ordinal.
    pub ordinal: usize,
    /// Its model.
    pub name: String,
}

impl std::fmt::Display for Device {
    /// `ordinal model`, e.g. `0 NVIDIA H100 80GB HBM3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.ordinal, self.name)
    }
}

impl Device {
    /// The stand-in of a synthetic search (tests without a GPU).
    pub fn synthetic() -> Device {
        let name = "synthetic".into();
        Device { ordinal: 0, name }
    }
}

/// The visible GPUs of the same model as the first (timings are only compared within a model),
/// and those left out for being another model.
pub fn same_model_devices() -> Result<(Vec<Device>, Vec<Device>)> {
    let model = Gpu::open(0)?.info().name.clone();
    let mut found = vec![Device {
        ordinal: 0,
        name: model.clone(),
    }];
    let mut other = vec![];
    for ordinal in 1..64 {
        let Ok(gpu) = Gpu::open(ordinal) else { break };
        let name = gpu.info().name.clone();
        let same = name == model;
        let device = Device { ordinal, name };
        if same {
            found.push(device);
        } else {
            other.push(device);
        }
    }
    Ok((found, other))
}

/// Which compiles of a generation are done, and how long each took.
#[derive(Debug, Default)]
struct Board {
    done: Mutex<HashMap<usize, Option<f64>>>,
    changed: Condvar,
}

/// A generation's candidates compiled on CPU threads, in proposal order, while the GPU measures:
/// the workers then only load from NVRTC's disk cache.
#[derive(Debug)]
pub struct Precompile {
    board: Arc<Board>,
    handle: JoinHandle<()>,
}

impl Precompile {
    /// Starts compiling `candidates` (knobs of `spec`'s target) for `gpu` on `threads` threads.
    pub fn start(
        spec: &SearchSpec,
        gpu: &Gpu,
        candidates: &[BTreeMap<String, i64>],
        threads: usize,
    ) -> Precompile {
        let dtype = crate::oracle_dtype(spec.shape.dtype);
        let (arch, limits) = (gpu.arch(), gpu.limits());
        let head_dim = spec.shape.head_dim;
        // The candidates exactly as the workers build them, so that their compiles hit the same
        // cache entries (`Candidate::variant` is the one place a config becomes defines).
        let jobs: VecDeque<(usize, Option<Candidate>)> = candidates
            .iter()
            .enumerate()
            .map(|(i, knobs)| {
                let (name, src) = (spec.implementation.as_deref(), spec.src.as_deref());
                let made = candidate(name, src, spec.entry.as_deref(), config(spec, knobs));
                (i, made.ok())
            })
            .collect();
        let board = Arc::new(Board::default());
        let shared = Arc::clone(&board);
        let handle = std::thread::spawn(move || {
            let queue = Mutex::new(jobs);
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
                        let seconds = ok.then(|| started.elapsed().as_secs_f64());
                        let mut done = shared.done.lock().unwrap_or_else(|e| e.into_inner());
                        done.insert(index, seconds);
                        shared.changed.notify_all();
                    });
                }
            });
        });
        Precompile { board, handle }
    }

    /// Waits for candidate `index`'s compile: its seconds, or `None` when it failed (the worker
    /// then reports the error).
    pub fn wait(&self, index: usize) -> Option<f64> {
        let mut done = self.board.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(seconds) = done.get(&index) {
                return *seconds;
            }
            done = self
                .board
                .changed
                .wait(done)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits for every compile to end.
    pub fn join(self) {
        let _ = self.handle.join();
    }
}
