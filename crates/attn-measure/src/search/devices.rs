//! The GPUs a search runs on, and a generation's compiles on CPU threads while they measure.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use attn_evidence::SearchSpec;
use attn_kernels::compile::compile;
use attn_kernels::{Candidate, Gpu};

use super::target::{candidate, implementation_and_config};
use crate::Result;

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
