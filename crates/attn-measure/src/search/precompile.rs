//! A generation's candidates compiled while the GPUs measure, in proposal order, so that each
//! worker finds its kernel compiled: on this machine's CPU threads into NVRTC's disk cache
//! ([`Precompile::start`]), or, for a search on Ray, as compile tasks on the cluster's CPU workers
//! ([`Precompile::start_on_ray`]: the hidden `evo-compile JOB` of a [`CompileJob`], which prints
//! the compile's [`CacheEntry`]), whose entries travel with the candidate's worker job and are
//! installed in that GPU node's cache before it loads the kernel. A compile that fails is only
//! time: the worker compiles again and reports the error.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use attn_evidence::{ImplConfig, SearchSpec};
use attn_kernels::compile::{compile_entry, Arch, CacheEntry};
use attn_kernels::decode::find_decode;
use attn_kernels::registry::Limits;
use attn_kernels::{Candidate, Config};
use attn_oracle::DType;
use serde::{Deserialize, Serialize};

use super::ray::{Place, RayPool};
use super::target::{candidate, candidate_config};
use crate::{MeasureError, Result};

/// How long one compile task may take on a CPU worker.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// One candidate to compile: a prefill candidate (`None`: it could not be built, which its
/// worker reports), or a decode implementation's config.
enum Compile {
    Prefill(Option<Candidate>),
    Decode(String, Config),
}

impl Compile {
    /// Candidate `resolved` of `spec`, exactly as its worker builds it, so that both compiles
    /// are one cache entry (`Candidate::variant` and `DecodeImplementation::compile_request` are
    /// the places a config becomes defines).
    fn of(spec: &SearchSpec, resolved: &ImplConfig) -> Compile {
        let config = candidate_config(spec, resolved);
        let name = resolved.implementation.as_deref();
        match (&spec.decode, name) {
            (Some(_), Some(name)) => Compile::Decode(name.to_string(), config),
            _ => Compile::Prefill(
                candidate(name, spec.src.as_deref(), spec.entry.as_deref(), config).ok(),
            ),
        }
    }

    /// Compiles it (through this machine's cache) for `arch` at `dtype` and `head_dim`.
    fn entry(
        &self,
        dtype: DType,
        head_dim: usize,
        arch: &Arch,
        limits: &Limits,
    ) -> Result<CacheEntry> {
        Ok(match self {
            Compile::Prefill(None) => {
                return Err(MeasureError::Invalid(
                    "the candidate could not be built".into(),
                ))
            }
            Compile::Prefill(Some(c)) => {
                compile_entry(&c.variant(dtype, head_dim, arch, limits)?.request)?
            }
            Compile::Decode(name, config) => {
                let imp = find_decode(name)?;
                let resolved = imp.resolve(config, head_dim, limits)?;
                compile_entry(&imp.compile_request(&resolved, dtype, head_dim, arch.clone())?)?
            }
        })
    }
}

/// A compile task of a search on Ray, handed to `evo-compile` as JSON: one candidate of the
/// search for the cluster's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileJob {
    /// The search (its target, defines and problem).
    pub spec: SearchSpec,
    /// The candidate, resolved.
    pub config: ImplConfig,
    /// The GPUs' architecture (`compute_90a`).
    pub arch: String,
    /// The GPUs' limits.
    pub limits: Limits,
}

/// Serves the hidden `evo-compile JOB`: compiles the job's candidate and prints its cache entry
/// as one JSON line.
pub fn serve_compile(job: &str) -> Result<()> {
    let job: CompileJob = serde_json::from_str(&super::worker::read_job(job)?)
        .map_err(|e| MeasureError::Invalid(format!("the compile job: {e}")))?;
    let dtype = crate::oracle_dtype(job.spec.shape.dtype);
    let compile = Compile::of(&job.spec, &job.config);
    let arch = Arch(job.arch.clone());
    let entry = compile.entry(dtype, job.spec.shape.head_dim, &arch, &job.limits)?;
    let line = serde_json::to_string(&entry).map_err(|e| MeasureError::Invalid(e.to_string()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|source| MeasureError::Io {
            what: "writing the compile's entry".into(),
            source,
        })
}

/// A compile that ended: its seconds (`None`: it failed) and the entries its worker installs.
type Done = (Option<f64>, Vec<CacheEntry>);

/// Which compiles of a generation are done.
#[derive(Debug, Default)]
struct Board {
    done: Mutex<HashMap<usize, Done>>,
    changed: Condvar,
}

impl Board {
    fn record(&self, index: usize, done: Done) {
        let mut board = self.done.lock().unwrap_or_else(|e| e.into_inner());
        board.insert(index, done);
        self.changed.notify_all();
    }
}

/// A generation's candidates being compiled, in proposal order.
#[derive(Debug)]
pub struct Precompile {
    board: Arc<Board>,
    handle: JoinHandle<()>,
}

impl Precompile {
    /// Starts compiling `candidates` (resolved configs of `spec`) for `arch` and `limits` on
    /// `threads` of this machine's threads, into its cache.
    pub fn start(
        spec: &SearchSpec,
        (arch, limits): (Arch, Limits),
        candidates: &[ImplConfig],
        threads: usize,
    ) -> Precompile {
        let dtype = crate::oracle_dtype(spec.shape.dtype);
        let head_dim = spec.shape.head_dim;
        let jobs: Vec<Compile> = candidates.iter().map(|c| Compile::of(spec, c)).collect();
        Precompile::spawn(jobs, threads, move |job| {
            // The workers load from this machine's cache: nothing to ship.
            job.entry(dtype, head_dim, &arch, &limits).map(|_| vec![])
        })
    }

    /// Starts compiling `candidates` as compile tasks on `pool`'s CPU workers for its GPUs'
    /// `arch` and `limits`, `threads` at a time; each entry is kept for the candidate's worker.
    pub fn start_on_ray(
        pool: Arc<RayPool>,
        spec: &SearchSpec,
        (arch, limits): (Arch, Limits),
        candidates: &[ImplConfig],
        threads: usize,
    ) -> Precompile {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let jobs: Vec<CompileJob> = (candidates.iter())
            .map(|config| CompileJob {
                spec: spec.clone(),
                config: config.clone(),
                arch: arch.0.clone(),
                limits,
            })
            .collect();
        Precompile::spawn(jobs, threads, move |job| {
            let json =
                serde_json::to_string(&job).map_err(|e| MeasureError::Invalid(e.to_string()))?;
            let args = ["evo-compile".to_string(), json];
            let line = (pool.run_program(&args, &cwd, Place::Cpu, COMPILE_TIMEOUT))
                .map_err(MeasureError::Invalid)?;
            let entry: CacheEntry = serde_json::from_str(&line)
                .map_err(|e| MeasureError::Invalid(format!("a compile task's entry: {e}")))?;
            Ok(vec![entry])
        })
    }

    /// `compile` of every job on `threads` threads, each outcome on the board.
    fn spawn<J: Send + 'static>(
        jobs: Vec<J>,
        threads: usize,
        compile: impl Fn(J) -> Result<Vec<CacheEntry>> + Send + Sync + 'static,
    ) -> Precompile {
        let board = Arc::new(Board::default());
        let shared = Arc::clone(&board);
        let handle = std::thread::spawn(move || {
            let queue = Mutex::new(jobs.into_iter().enumerate().collect::<VecDeque<_>>());
            std::thread::scope(|scope| {
                for _ in 0..threads.max(1) {
                    scope.spawn(|| loop {
                        let job = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                        let Some((index, job)) = job else { break };
                        let started = Instant::now();
                        let done = match compile(job) {
                            Ok(entries) => (Some(started.elapsed().as_secs_f64()), entries),
                            Err(_) => (None, vec![]),
                        };
                        shared.record(index, done);
                    });
                }
            });
        });
        Precompile { board, handle }
    }

    /// Waits for candidate `index`'s compile: its seconds (`None` when it failed: the worker
    /// then reports the error) and the entries its worker installs (a search on Ray's).
    pub fn wait(&self, index: usize) -> Done {
        let mut done = self.board.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(d) = done.get_mut(&index) {
                return (d.0, std::mem::take(&mut d.1));
            }
            done = self
                .board
                .changed
                .wait(done)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits for every compile to end: how many of how many compiled.
    pub fn join(self) -> (usize, usize) {
        let _ = self.handle.join();
        let done = self.board.done.lock().unwrap_or_else(|e| e.into_inner());
        (done.values().filter(|d| d.0.is_some()).count(), done.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_candidate_compiles_for_its_gpu_without_one_and_a_bad_config_does_not() {
        let (arch, limits) = (Arch("compute_90a".into()), Limits::H100);
        let decode =
            |name: &str, config: &str| Compile::Decode(name.into(), config.parse().unwrap());
        let entry = decode("decode-hopper", "SPLITS=4,STAGES=2")
            .entry(DType::Bf16, 128, &arch, &limits)
            .unwrap();
        assert!(
            entry.key.len() == 64 && entry.ptx.contains(".entry attn_decode"),
            "{}",
            entry.key
        );
        assert!(decode("decode", "")
            .entry(DType::F16, 64, &arch, &limits)
            .is_ok());
        // More row warps than warps, an unknown implementation, a head dim it lacks, a
        // candidate that could not be built.
        for (compile, d) in [
            (decode("decode", "NUM_WARPS=2,ROW_WARPS=4"), 64),
            (decode("mma", ""), 64),
            (decode("decode-hopper", "SPLITS=4"), 96),
            (Compile::Prefill(None), 64),
        ] {
            assert!(compile.entry(DType::F16, d, &arch, &limits).is_err());
        }
    }
}
