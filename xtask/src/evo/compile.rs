//! Compiles of a generation on CPU threads while the GPU measures: workers then only load from
//! NVRTC's disk cache.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use attn_evidence::SearchSpec;
use attn_evo::Knobs;
use attn_kernels::compile::compile;
use attn_kernels::{Candidate, Gpu};

/// Which compiles of a generation are done, and how long each took.
#[derive(Default)]
pub struct CompileBoard {
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
    pub fn wait(&self, index: usize) -> Option<f64> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(seconds) = done.get(&index) {
                return *seconds;
            }
            done = self.changed.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Compiles every candidate of a generation on `threads` CPU threads, in proposal order.
pub fn spawn_compiles(
    spec: &SearchSpec,
    gpu: &Gpu,
    candidates: &[Knobs],
    board: Arc<CompileBoard>,
    threads: usize,
) -> JoinHandle<()> {
    let dtype = attn_measure::oracle_dtype(spec.shape.dtype);
    let (arch, limits) = (gpu.arch(), gpu.limits());
    let head_dim = spec.shape.head_dim;
    // The candidates exactly as the workers build them, so that their compiles hit the same cache
    // entries (`Candidate::variant` is the one place a config becomes defines).
    let jobs: VecDeque<(usize, Option<Candidate>)> = candidates
        .iter()
        .enumerate()
        .map(|(i, knobs)| {
            let candidate = super::worker::candidate(
                spec.implementation.as_deref(),
                spec.src.as_deref(),
                spec.entry.as_deref(),
                super::worker::config(spec, knobs),
            );
            (i, candidate.ok())
        })
        .collect();
    std::thread::spawn(move || {
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
                    board.finish(index, ok.then(|| started.elapsed().as_secs_f64()));
                });
            }
        });
    })
}
