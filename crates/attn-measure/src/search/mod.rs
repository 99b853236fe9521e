//! A search (`cargo xtask evo`) as a library session, read top to bottom by [`SearchSession`]:
//! the caller's typed [`SearchRequest`] becomes a run ([`target`]: a new search's spec from the
//! registry, or the one resumed), the GPUs of the first one's model ([`same_model_devices`]), the
//! run's space with the registry's constraints and generation 0's seeds ([`target::start`]); the
//! baseline once per GPU and every candidate measured by a worker process each ([`worker`]: both
//! sides of the protocol, a timeout per candidate, any failure an invalid candidate) while
//! [`Precompile`] compiles the generation, driven by attn-evo (a decode batch's candidates by
//! [`decode::DecodeWorker`]); then the summary, with
//! [`Fitness::Composite`] the finalists profiled with Nsight Compute ([`finalists`]), and
//! `best.json`. What the caller shows comes back as [`Event`]s.

pub mod decode;
pub mod finalists;
pub mod precompile;
pub mod ray;
pub mod target;
pub mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use attn_evidence::{DecodeSpec, EvoBest, EvoCandidate, ShapeSpec};
use attn_evo::{Search, SearchRun};
use attn_kernels::registry::Limits;
use attn_kernels::Gpu;
use serde::{Deserialize, Serialize};

pub use precompile::Precompile;
pub use target::{
    candidate, candidate_config, default_knobs, implementation_knobs, is_decode_implementation,
    registry_constraint, searchable_knobs,
};
pub use worker::{Measured, Worker, WorkerJob};

use crate::sdpa::Backend;
use crate::{MeasureError, Result};

/// What picks a search's winner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fitness {
    /// The fastest valid candidate.
    Speedup,
    /// The fastest finalists profiled with Nsight Compute, ranked by attn-ncu's composite.
    Composite,
}

impl std::str::FromStr for Fitness {
    type Err = MeasureError;

    fn from_str(text: &str) -> Result<Fitness> {
        match text {
            "speedup" => Ok(Fitness::Speedup),
            "composite" => Ok(Fitness::Composite),
            _ => Err(MeasureError::Invalid(format!(
                "unknown fitness `{text}` (known: speedup, composite)"
            ))),
        }
    }
}

/// What a new search tunes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Registered implementations: one, or several (the implementation a knob of the search).
    Implementations(Vec<String>),
    /// A user's kernel file, its entry point and fixed defines; its knobs all declared.
    Source {
        /// The file.
        src: PathBuf,
        /// Its entry point.
        entry: Option<String>,
        /// Fixed defines.
        defines: BTreeMap<String, i64>,
    },
    /// Test mode without a GPU: the declared knobs, a synthetic time.
    Synthetic,
}

/// A new search: what becomes its `search.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSearch {
    /// What is tuned.
    pub target: Target,
    /// Knobs declared (`--knob`): a source's, or narrowing the implementations' domains.
    pub knobs: BTreeMap<String, Vec<i64>>,
    /// The problem (a decode search's: [`attn_evidence::decode_shape`] of its batch).
    pub shape: ShapeSpec,
    /// The decode batch, when decode implementations are tuned.
    pub decode: Option<DecodeSpec>,
    /// What speedups are measured against.
    pub baseline: String,
    /// The SDPA backend of an `sdpa` baseline, recorded with the search.
    pub sdpa_backend: Backend,
    /// Seed of the search and the inputs (`None`: a fresh one, recorded).
    pub seed: Option<u64>,
    /// Survivors and children per generation.
    pub population: usize,
    /// Generations at most.
    pub generations: u32,
    /// The run's folder name (default: date, target and shape).
    pub name: Option<String>,
}

/// A new search, or the one logged in a folder to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum RunRequest {
    /// Start this search.
    New(Box<NewSearch>),
    /// Continue the search logged in this folder.
    Resume(PathBuf),
}

/// How each candidate's worker measures it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// Timed samples per candidate.
    pub samples: usize,
    /// Untimed launches first.
    pub warmup: usize,
    /// Fresh inputs a candidate must pass before it is timed.
    pub checks: usize,
    /// SDPA backend of an `sdpa` baseline (a search's recorded one wins: [`SearchSpec::sdpa_backend`]).
    pub sdpa_backend: Backend,
    /// How long a candidate's worker may take before it is killed.
    pub timeout: Duration,
    /// Test mode without a GPU: workers report a synthetic time computed from the knobs.
    pub synthetic: bool,
}

/// Everything `cargo xtask evo` asks for, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// The run.
    pub run: RunRequest,
    /// The evidence folder (the run goes to `<evidence>/evo/<run>/`).
    pub evidence: PathBuf,
    /// Candidates measured at most (a resumed run's earlier ones included).
    pub budget: usize,
    /// How workers measure.
    pub workers: WorkerOptions,
    /// Bootstrap resamples for each candidate's speedup CI.
    pub resamples: usize,
    /// Seed generation 0 from micro's ranking, and say at the end how well it predicted.
    pub seed_from_micro: bool,
    /// Seed generation 0 from earlier searches' bests.
    pub seed_from_evo: bool,
    /// What picks the winner.
    pub fitness: Fitness,
    /// Finalists profiled by [`Fitness::Composite`].
    pub finalists: usize,
    /// Barriers per K/V tile in the kernel's main loop, an input of the composite fitness.
    pub syncs_per_tile: f64,
    /// The ncu executable ([`Fitness::Composite`]).
    pub ncu: PathBuf,
    /// The program that serves `evo-worker` jobs and target-mode launches (the caller's own).
    pub program: PathBuf,
    /// The git revision and dirty flag of the code that runs, for provenance.
    pub git: (String, bool),
    /// Measure on a Ray cluster's GPUs instead of this machine's ([`ray`]).
    pub ray: Option<RayTarget>,
}

/// The Ray cluster a search measures on (`evo --on ray[=ADDRESS]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RayTarget {
    /// The cluster's address (`auto`: the local one).
    pub address: String,
    /// The GPU model to measure on (default: the model with the most GPUs).
    pub model: Option<String>,
}

/// What a search tells its caller to show, in order.
#[derive(Debug)]
pub enum Event<'e> {
    /// A line to print.
    Line(String),
    /// Candidates are about to be measured: this many at most.
    Start(u64),
    /// Generation `n` is being measured.
    Generation(u32),
    /// A candidate is measured and logged; the search's best so far, its fitness and knobs.
    Row(&'e EvoCandidate, Option<(f64, String)>),
    /// Every candidate is measured.
    Measured,
}

/// Where a search's [`Event`]s go.
pub type Report<'r> = &'r (dyn Fn(Event<'_>) + Sync);

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

/// A search opened on its GPUs: the run, the search state and its log.
pub struct SearchSession<'r> {
    request: &'r SearchRequest,
    report: Report<'r>,
    run: SearchRun,
    devices: Vec<Device>,
    gpu: Option<Gpu>,
    search: Search,
    log: attn_evidence::EvoLogAppender,
    pool: Option<std::sync::Arc<ray::RayPool>>,
    /// What a search on Ray learnt of its GPUs (the driver has none): their provenance,
    /// architecture and limits.
    ray_gpu: Option<ray::GpuFacts>,
}

impl std::fmt::Debug for SearchSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchSession")
            .field("run", &self.run.dir)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl<'r> SearchSession<'r> {
    /// Opens the search `request` asks for: ncu found first with `--fitness composite` (not after
    /// an hour of searching), the run new or resumed, the GPUs of the first one's model, the space
    /// and generation 0's seeds.
    pub fn open(request: &'r SearchRequest, report: Report<'r>) -> Result<SearchSession<'r>> {
        if request.fitness == Fitness::Composite {
            crate::profile::find_ncu(&request.ncu)?;
        }
        let run = target::open_run(request)?;
        let pool = match &request.ray {
            Some(on) => Some(std::sync::Arc::new(ray::RayPool::start(
                &on.address,
                &request.program,
                on.model.as_deref(),
            )?)),
            None => None,
        };
        let (devices, gpu) = if let Some(pool) = &pool {
            for other in &pool.others {
                let (model, gpus) = (&other.model, other.gpus);
                report(Event::Line(format!(
                    "ray: {gpus} {model} GPU(s) not used: their timings would not compare"
                )));
            }
            for slot in &pool.slots {
                report(Event::Line(format!("ray: GPU {slot}")));
            }
            let devices = pool.slots.iter().map(|s| Device {
                ordinal: s.slot,
                name: s.model.clone(),
            });
            // The driver measures nothing itself: its own GPU, if any, stays out.
            (devices.collect(), None)
        } else if request.workers.synthetic {
            (vec![Device::synthetic()], None)
        } else {
            let (devices, other) = same_model_devices()?;
            for d in other {
                let (ordinal, name, model) = (d.ordinal, d.name, &devices[0].name);
                report(Event::Line(format!(
                    "GPU {ordinal} ({name}) is not a {model}: not used, its timings would not compare"
                )));
            }
            (devices, Some(Gpu::open(0)?))
        };
        // A search on Ray asks its first GPU (all are one model) where it measures, for the
        // evidence, and what its candidates are validated and compiled for.
        let ray_gpu = match &pool {
            Some(pool) => match pool.gpu_facts(request.workers.synthetic) {
                Ok(facts) => Some(facts),
                Err(why) => {
                    report(Event::Line(format!("ray: GPU 0 did not say what it is ({why}): H100 limits, no provenance, each worker compiles its own kernel")));
                    None
                }
            },
            None => None,
        };
        let limits = match (&gpu, &ray_gpu) {
            (Some(gpu), _) => gpu.limits(),
            (None, Some(facts)) => facts.limits,
            (None, None) => Limits::H100,
        };
        let (search, log, resumed) = target::start(request, &run, limits, report)?;
        if let Some(rows) = resumed {
            let dir = run.dir.display();
            report(Event::Line(format!(
                "evo: resuming {dir} ({rows} candidates already measured)"
            )));
        }
        Ok(SearchSession {
            request,
            report,
            run,
            devices,
            gpu,
            search,
            log,
            pool,
            ray_gpu,
        })
    }

    /// Measures the search to its end (the baseline once per GPU, then each generation's
    /// candidates, one worker each), then chooses the winner: `best.json`, or `None` when no
    /// candidate was valid.
    pub fn run(mut self) -> Result<Option<EvoBest>> {
        let (request, report) = (self.request, self.report);
        let spec = &self.run.spec;
        let names: Vec<String> = self.devices.iter().map(|d| format!("GPU {d}")).collect();
        let size = self.search.space().size();
        let header = attn_evo::search_line(spec, size, request.budget, &names);
        report(Event::Line(header));

        let workers = worker::Workers {
            program: &request.program,
            spec,
            options: &request.workers,
            pool: self.pool.as_ref(),
        };
        // Compiled for GPU 0, or for the Ray cluster's GPUs; a synthetic target has no kernel.
        let kernels =
            spec.implementation.is_some() || !spec.implementations.is_empty() || spec.src.is_some();
        let compile_for = match (&self.gpu, &self.ray_gpu) {
            (Some(gpu), _) => Some((gpu.arch(), gpu.limits())),
            (None, Some(facts)) => {
                let arch = attn_kernels::compile::Arch(facts.arch.clone());
                Some((arch, facts.limits))
            }
            (None, None) => None,
        }
        .filter(|_| kernels);
        let compare = attn_evo::compare_options(request.resamples, spec.seed)?;
        let ordinals: Vec<usize> = self.devices.iter().map(|d| d.ordinal).collect();
        // Once per GPU, by a worker like any candidate (sdpa's helper may take a while).
        let timeout = request.workers.timeout.max(Duration::from_secs(120));
        let baselines = attn_evo::measure_baselines(&ordinals, &spec.baseline, |device| {
            workers.run(
                &worker::Job::Baseline,
                device,
                spec.seed ^ 0xba5e,
                timeout,
                vec![],
            )
        })?;
        for (device, sample) in &baselines {
            let (name, median) = (&spec.baseline, sample.median());
            report(Event::Line(format!(
                "baseline {name} on GPU {device}: median {median:.2} µs"
            )));
        }

        let remaining = request.budget.saturating_sub(self.search.evaluated());
        report(Event::Start(remaining as u64));
        let measure = worker::Measure {
            workers: &workers,
            compile_for,
            report,
            shipped: std::sync::Mutex::default(),
        };
        let log = &mut self.log;
        attn_evo::drive(
            &self.run.spec,
            &mut self.search,
            &measure,
            &ordinals,
            &baselines,
            &compare,
            |search, row| {
                log.append(row)?;
                let best = search.best().map(|best| {
                    let knobs = search.space().describe(&best.knobs);
                    (best.fitness.unwrap_or(0.0), knobs)
                });
                report(Event::Row(row, best));
                Ok::<(), MeasureError>(())
            },
        )?;
        report(Event::Measured);
        let best = self.finish()?;
        if request.seed_from_micro {
            // The search measured micro's seeds: how well did micro rank them?
            match attn_evo::correlate_with_search(&request.evidence, &self.run.dir, None) {
                Ok((c, path)) => {
                    let lines = attn_evo::correlation_lines(&c);
                    lines.into_iter().for_each(|l| report(Event::Line(l)));
                    report(Event::Line(format!("evidence: {}", path.display())));
                }
                Err(e) => report(Event::Line(format!("micro vs this search: {e}"))),
            }
        }
        Ok(best)
    }

    /// The summary and `best.json` of a finished search; with `--fitness composite` its
    /// finalists profiled and ranked first.
    fn finish(&self) -> Result<Option<EvoBest>> {
        let (run, report) = (&self.run, self.report);
        let spec = &run.spec;
        let log_path = run.log_path();
        let rows = attn_evidence::read_evo_log(&log_path)?;
        report(Event::Line(attn_evo::counts_line(&rows, &log_path)));
        let devices = self.devices.iter().map(Device::to_string).collect();
        let (git_rev, git_dirty) = self.request.git.clone();
        let provenance = match &self.gpu {
            Some(g) => Some(crate::provenance::collect(
                g, None, None, None, git_rev, git_dirty,
            )),
            None => self.ray_gpu.as_ref().map(|facts| facts.provenance.clone()),
        };
        let chosen = match self.request.fitness {
            Fitness::Composite => {
                let ranked =
                    finalists::profile(self.request, run, &rows, provenance.clone(), report)?;
                attn_evo::composite_winner(spec, &ranked, &rows).map(|(r, f)| (r, Some(f)))
            }
            Fitness::Speedup => attn_evo::best_row(&rows).map(|r| (r, None)),
        };
        let Some((winner, fitness)) = chosen else {
            report(Event::Line("evo: no valid candidate; no best.json".into()));
            return Ok(None);
        };
        let mut best = attn_evo::evo_best(spec, &run.name(), &rows, winner, devices, provenance);
        best.ncu = fitness
            .as_ref()
            .map(attn_evo::composite_note)
            .unwrap_or_default();
        best.fitness = fitness;
        let path = run.dir.join("best.json");
        best.write(&path)?;
        report(Event::Line(attn_evo::best_lines(&best, &path)));
        Ok(Some(best))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitness_is_read_once_from_its_name() {
        assert_eq!("speedup".parse::<Fitness>().unwrap(), Fitness::Speedup);
        assert_eq!("composite".parse::<Fitness>().unwrap(), Fitness::Composite);
        let err = "fastest".parse::<Fitness>().unwrap_err().to_string();
        assert!(err.contains("speedup, composite"), "{err}");
        let json = serde_json::to_string(&Fitness::Composite).unwrap();
        assert_eq!(json, r#""composite""#);
    }
}
