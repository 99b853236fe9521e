//! Measuring for a search (`cargo xtask evo`): one candidate or the baseline on one GPU, the way
//! a search worker process does it (compile or cache hit, correctness on fresh inputs, graph-mode
//! timing); a generation's compiles on CPU threads while the GPU measures; the GPUs a search
//! runs on; a finalist profiled with Nsight Compute (`--fitness composite`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use attn_evidence::{SearchSpec, ShapeSpec, IMPL_KNOB};
use attn_kernels::compile::compile;
use attn_kernels::registry::{self, Limits};
use attn_kernels::{Candidate, Config, Gpu, GpuReference, Prepared, TimingMode, TimingOptions};
use attn_ncu::metrics::Purpose;
use attn_ncu::KernelSummary;

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
                let prepared =
                    self.prepare(&candidate.for_problem(&problem.shape, &problem.params))?;
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

/// What a search config runs: the registered implementation (the spec's, or in a search over
/// several the one the config's [`IMPL_KNOB`] picks; `None` for a `--src` kernel) and its
/// defines (the spec's fixed ones and the config's knobs).
pub fn implementation_and_config<'s>(
    spec: &'s SearchSpec,
    knobs: &BTreeMap<String, i64>,
) -> (Option<&'s str>, Config) {
    let mut knobs = knobs.clone();
    let chosen = knobs.remove(IMPL_KNOB).and_then(|i| {
        let i = usize::try_from(i).ok()?;
        spec.implementations.get(i).map(|imp| imp.name.as_str())
    });
    let implementation = chosen.or(spec.implementation.as_deref());
    (
        implementation,
        Config(spec.defines.clone()).merged(&Config(knobs)),
    )
}

/// The knobs of registered implementation `name` at `head_dim`, with their domains: none for an
/// implementation without knobs (`cublas`).
pub fn implementation_knobs(
    name: &str,
    head_dim: usize,
) -> Result<Vec<(&'static str, &'static [i64])>> {
    let imp = registry::find(name)?;
    imp.check_head_dim(head_dim)?;
    Ok(imp.knobs.iter().map(|k| (k.name, k.domain)).collect())
}

/// The knobs of registered implementation `name` a search of it alone may tune at `head_dim`,
/// with their domains (one without knobs is an error: there is nothing to search).
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
    implementation_knobs(name, head_dim)
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
    let problem = Problem::new(shape.clone())?;
    let tuned = imp.tuned_for(&problem.shape, &problem.params);
    Ok(imp.default_config(shape.head_dim).merged(&tuned).0)
}

/// Launches of a search finalist that ncu profiles (after one warm-up launch).
pub const FINALIST_LAUNCHES: u32 = 3;

/// How long ncu may take on one finalist (its metric set replays each launch dozens of times)
/// before it and the target are killed and the finalist is left unscored.
pub const FINALIST_TIMEOUT: Duration = Duration::from_secs(300);

/// The metric set a search finalist is profiled with: everything the composite fitness reads.
const FINALIST_METRICS: Purpose = Purpose::All;

/// How a search's finalists are profiled, in a line (for `finalists.json`).
pub fn finalist_profiling() -> String {
    let opts = attn_ncu::ProfileOptions::new("attn_fwd", vec![]);
    format!(
        "ncu, metric set {}, {FINALIST_LAUNCHES} launches after a warm-up on GPU 0, filtered to the candidate's kernel (attn_fwd; every kernel of the cuBLAS path); {}; caches flushed before each pass",
        attn_ncu::metrics::hopper(FINALIST_METRICS).name,
        opts.clock_note()
    )
}

/// A search finalist profiled with Nsight Compute ([`crate::profile::ncu`], `ncu` and this
/// `program`, killed past `timeout`): `implementation` (or the spec's `--src` kernel) with
/// `knobs` (without the implementation's choice) on the spec's shape. Its kernels, each with the
/// metrics asked for (ncu's device attributes dropped), aggregated over the profiled launches.
pub fn profile_finalist(
    spec: &SearchSpec,
    implementation: Option<&str>,
    knobs: &BTreeMap<String, i64>,
    ncu: &Path,
    program: &Path,
    timeout: Duration,
) -> Result<Vec<KernelSummary>> {
    let (_, config) = implementation_and_config(spec, knobs);
    let made = candidate(
        implementation,
        spec.src.as_deref(),
        spec.entry.as_deref(),
        config,
    )?;
    let shape = spec.shape.clone();
    let launches = FINALIST_LAUNCHES;
    let profile = crate::profile::ncu(
        ncu,
        program,
        &made,
        shape,
        FINALIST_METRICS,
        launches,
        timeout,
    )?;
    let asked = attn_ncu::metrics::hopper(FINALIST_METRICS).to_strings();
    let mut kernels = attn_ncu::group(&profile.launches, None);
    for kernel in &mut kernels {
        kernel.metrics.retain(|name, _| asked.contains(name));
    }
    Ok(kernels)
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
    /// Starts compiling `candidates` (configs of `spec`) for `gpu` on `threads` threads.
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
                let (name, config) = implementation_and_config(spec, knobs);
                let made = candidate(name, spec.src.as_deref(), spec.entry.as_deref(), config);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_runs_the_implementation_it_picks() {
        let spec: SearchSpec = serde_json::from_value(serde_json::json!({
            "target": "cublas,mma", "implementation": null, "src": null, "entry": null,
            "implementations": [{"name": "cublas", "knobs": {}}, {"name": "mma", "knobs": {"STAGES": [1, 2]}}],
            "defines": {}, "knobs": {}, "shape": {"batch": 2, "heads": 8, "seq_q": 1024,
            "seq_kv": 1024, "head_dim": 64, "causal": false, "dtype": "fp16"},
            "baseline": "sdpa", "seed": 1, "population": 4, "generations": 2,
        }))
        .unwrap();
        let knobs = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let (name, config) =
            implementation_and_config(&spec, &knobs(&[(IMPL_KNOB, 1), ("STAGES", 2)]));
        assert_eq!(
            (name, config.to_string().as_str()),
            (Some("mma"), "STAGES=2")
        );
        let (name, config) = implementation_and_config(&spec, &knobs(&[(IMPL_KNOB, 0)]));
        assert_eq!((name, config), (Some("cublas"), Config::default()));
        assert!(candidate(name, None, None, Config::default()).is_ok());
        // One implementation's search: its own name, the knobs as they are.
        let single = SearchSpec {
            implementation: Some("mma".into()),
            implementations: vec![],
            ..spec
        };
        let (name, config) = implementation_and_config(&single, &knobs(&[("STAGES", 1)]));
        assert_eq!(
            (name, config.to_string().as_str()),
            (Some("mma"), "STAGES=1")
        );
        assert!(implementation_knobs("cublas", 64).unwrap().is_empty());
        assert!(searchable_knobs("cublas", 64).is_err());
        assert!(implementation_knobs("hopper", 96).is_err());
    }
}
