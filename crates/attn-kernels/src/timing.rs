//! The timing harness every command uses.
//!
//! - `Flushed`: one launch per sample between two CUDA events, with the L2 cache overwritten just
//!   before (a memset of twice its size, which also keeps the GPU busy while the host enqueues the
//!   launch, so the events time the kernel and not the launch latency).
//! - `Graph`: as `Flushed`, but each launch is replayed from a CUDA graph captured once per input
//!   set, so host launch overhead stays out of the numbers for any launcher (the same mode is used
//!   for PyTorch SDPA, whose Python dispatch would otherwise be timed).
//! - `Batch`: many back-to-back launches between two events, total / count, each on its own input
//!   set, L2 not flushed: for launch-bound shapes. PyTorch SDPA replays them from per-set CUDA
//!   graphs (its Python dispatch between small kernels would otherwise be what is timed).
//!   Each launch of a sample runs on its own input set ([`launches_per_sample`]).
//!
//! Inputs rotate among `sets` (the caller's launch closure receives the set index). Every sample is
//! kept. A separate guard pass times a few plain launches by events on the timed stream, records an
//! event on every other stream of ours ([`Gpu::new_side_stream`]) right after each launch, and
//! measures on the device how long those streams kept working after the timed stream's end event:
//! work that escapes the timed stream shows there and not in the events. (The host's own wall time
//! to a device-wide synchronisation is recorded too, for information only: other processes' use of
//! the GPU stretches it.)

use std::time::Instant;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, DevicePtrMut};

use crate::error::{DriverContext, Result};
use crate::gpu::Gpu;

/// How samples are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimingMode {
    /// One launch per sample, L2 flushed before each.
    Flushed,
    /// As `Flushed`, each launch replayed from a captured CUDA graph.
    Graph,
    /// `launches_per_sample` back-to-back launches per sample; time per launch.
    Batch,
}

impl TimingMode {
    /// Every mode, in the order a command line lists them.
    pub const ALL: [TimingMode; 3] = [TimingMode::Graph, TimingMode::Flushed, TimingMode::Batch];

    /// As written on command lines and in evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMode::Flushed => "flushed",
            TimingMode::Graph => "graph",
            TimingMode::Batch => "batch",
        }
    }
}

impl std::fmt::Display for TimingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TimingMode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<TimingMode, String> {
        TimingMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown timing mode `{s}` (known: graph, flushed, batch)"))
    }
}

/// Knobs of the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed launches first (module load, caches, clocks).
    pub warmup: usize,
    /// Timed samples kept.
    pub samples: usize,
    /// Flushed or batch.
    pub mode: TimingMode,
    /// Launches per sample in batch mode.
    pub batch_launches: usize,
    /// Launches of the wall-clock guard pass.
    pub guard_launches: usize,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 10,
            samples: 100,
            mode: TimingMode::Graph,
            batch_launches: 50,
            guard_launches: 10,
        }
    }
}

/// Raw results of one timing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timings {
    /// How they were taken.
    pub mode: TimingMode,
    /// Warm-up launches (or batches) before the first sample.
    pub warmup: usize,
    /// Launches per sample.
    pub launches_per_sample: usize,
    /// Input sets the launches rotated over (0 where not recorded): both sides of a comparison
    /// must rotate over as many, since a side on fewer sets finds more of its inputs in L2.
    #[serde(default)]
    pub input_sets: usize,
    /// Per-launch time of each sample by CUDA events, µs.
    pub samples_us: Vec<f64>,
    /// Guard pass: per-launch host time from enqueue to device-wide synchronisation, µs.
    pub wall_us: Vec<f64>,
    /// Guard pass: the same launches timed by events on the timed stream, µs.
    pub guard_event_us: Vec<f64>,
    /// Guard pass: how long the device kept working after the timed stream's end event had
    /// completed (host time from that event to a device-wide synchronisation), µs. Information
    /// only: host time.
    #[serde(default)]
    pub guard_residual_us: Vec<f64>,
    /// Guard pass: how long after the timed stream's end event our other streams' work finished,
    /// by device events recorded on every one of them right after the launch (0 when none ran
    /// past it, or there are none), µs. What escaped work is judged by.
    #[serde(default)]
    pub guard_stream_residual_us: Vec<f64>,
}

/// What the caller does around each timed sample, outside the events: e.g. poison the outputs the
/// sample will write, then check what the timed launches produced.
pub trait SampleHooks {
    /// Before the sample's L2 flush and start event; `sets` are the input sets it launches on.
    fn before_sample(&mut self, sets: &[usize]) -> Result<()>;
    /// After the sample's end event completed.
    fn after_sample(&mut self, sets: &[usize]) -> Result<()>;
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl SampleHooks for NoHooks {
    fn before_sample(&mut self, _: &[usize]) -> Result<()> {
        Ok(())
    }
    fn after_sample(&mut self, _: &[usize]) -> Result<()> {
        Ok(())
    }
}

/// Launches per timed sample: one, or in batch mode `batch_launches` but never more than there
/// are input sets. Every launch of a sample runs on its own input set and output: a set launched
/// twice in one sample, after one poisoning, would find its output already written, and a kernel
/// that skips rows whose output is written would pass for fast.
pub fn launches_per_sample(opts: &TimingOptions, sets: usize) -> usize {
    match opts.mode {
        TimingMode::Flushed | TimingMode::Graph => 1,
        TimingMode::Batch => opts.batch_launches.max(1).min(sets.max(1)),
    }
}

/// The input sets of the next sample of `per_sample` launches, continuing the rotation from
/// `counter`: consecutive, so all distinct while `per_sample ≤ sets`.
pub fn next_sample_sets(counter: &mut usize, sets: usize, per_sample: usize) -> Vec<usize> {
    (0..per_sample)
        .map(|_| {
            *counter += 1;
            *counter % sets.max(1)
        })
        .collect()
}

/// Events and the L2 flush buffer, made once per GPU and reused.
#[derive(Debug)]
pub struct Harness<'g> {
    gpu: &'g Gpu,
    flush: CudaSlice<u8>,
}

impl<'g> Harness<'g> {
    /// Allocates the flush buffer (twice the L2 size).
    pub fn new(gpu: &'g Gpu) -> Result<Harness<'g>> {
        let bytes = (gpu.info().l2_bytes as usize).max(1 << 20) * 2;
        // SAFETY: the buffer is only ever written (memset), never read.
        let flush =
            unsafe { gpu.stream().alloc::<u8>(bytes) }.during("cuMemAlloc (L2 flush buffer)")?;
        Ok(Harness { gpu, flush })
    }

    fn flush_l2(&mut self, value: u8) -> Result<()> {
        let stream = self.gpu.stream().clone();
        let len = self.flush.len();
        let (ptr, _guard) = self.flush.device_ptr_mut(&stream);
        // SAFETY: `ptr` addresses `len` bytes we own, on our stream.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, value, len, stream.cu_stream()) }
            .during("cuMemsetD8Async (L2 flush)")
    }

    /// Times `launch` (which enqueues one launch on the GPU's stream using input set `i`), with
    /// `hooks` called around every timed sample.
    pub fn time(
        &mut self,
        sets: usize,
        opts: &TimingOptions,
        launch: &mut dyn FnMut(usize) -> Result<()>,
        hooks: &mut dyn SampleHooks,
    ) -> Result<Timings> {
        let sets = sets.max(1);
        let ctx = self.gpu.context().clone();
        let stream = self.gpu.stream().clone();
        let start = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .during("cuEventCreate")?;
        let end = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .during("cuEventCreate")?;
        let per_sample = launches_per_sample(opts, sets);
        let mut graphs = Vec::new();
        if opts.mode == TimingMode::Graph {
            // One plain launch per set first: whatever a launcher allocates or initialises on
            // first use (the cuBLAS path's scratch buffers) must not happen inside a capture.
            for set in 0..sets {
                launch(set)?;
            }
            self.gpu.synchronize()?;
            for set in 0..sets {
                stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .during("cuStreamBeginCapture")?;
                let launched = launch(set);
                let graph = stream
                    .end_capture(CUgraphInstantiate_flags(0))
                    .during("cuStreamEndCapture")?;
                launched?;
                graphs.push(graph.ok_or(crate::KernelError::Shape(
                    "the launch captured no work".into(),
                ))?);
            }
        }
        let mut counter = 0usize;
        let run_one = |set: usize, launch: &mut dyn FnMut(usize) -> Result<()>| -> Result<()> {
            match graphs.get(set) {
                Some(graph) => graph.launch().during("cuGraphLaunch"),
                None => launch(set),
            }
        };
        for _ in 0..opts.warmup {
            run_one(next_sample_sets(&mut counter, sets, 1)[0], launch)?;
        }
        self.gpu.synchronize()?;

        let mut samples_us = Vec::with_capacity(opts.samples);
        for i in 0..opts.samples {
            let sample_sets = next_sample_sets(&mut counter, sets, per_sample);
            hooks.before_sample(&sample_sets)?;
            if opts.mode != TimingMode::Batch {
                self.flush_l2((i % 251) as u8)?;
            }
            start.record(&stream).during("cuEventRecord")?;
            for &set in &sample_sets {
                run_one(set, launch)?;
            }
            end.record(&stream).during("cuEventRecord")?;
            end.synchronize().during("cuEventSynchronize")?;
            let ms = start.elapsed_ms(&end).during("cuEventElapsedTime")?;
            samples_us.push(f64::from(ms) * 1000.0 / per_sample as f64);
            hooks.after_sample(&sample_sets)?;
        }
        self.gpu.synchronize()?;

        let mut wall_us = Vec::with_capacity(opts.guard_launches);
        let mut guard_event_us = Vec::with_capacity(opts.guard_launches);
        let mut guard_residual_us = Vec::with_capacity(opts.guard_launches);
        let mut guard_stream_residual_us = Vec::with_capacity(opts.guard_launches);
        let side_streams = self.gpu.side_streams();
        let side_events = side_streams
            .iter()
            .map(|_| {
                ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .during("cuEventCreate")
            })
            .collect::<Result<Vec<_>>>()?;
        for i in 0..opts.guard_launches {
            let t0 = Instant::now();
            start.record(&stream).during("cuEventRecord")?;
            launch(i % sets)?;
            end.record(&stream).during("cuEventRecord")?;
            for (event, side) in side_events.iter().zip(&side_streams) {
                event.record(side).during("cuEventRecord (side stream)")?;
            }
            end.synchronize().during("cuEventSynchronize")?;
            let timed_stream_done = Instant::now();
            self.gpu.synchronize()?;
            guard_residual_us.push(timed_stream_done.elapsed().as_secs_f64() * 1e6);
            wall_us.push(t0.elapsed().as_secs_f64() * 1e6);
            guard_event_us
                .push(f64::from(start.elapsed_ms(&end).during("cuEventElapsedTime")?) * 1000.0);
            let mut outlived = 0.0f64;
            for event in &side_events {
                let ms = end
                    .elapsed_ms(event)
                    .during("cuEventElapsedTime (side stream)")?;
                outlived = outlived.max(f64::from(ms) * 1000.0);
            }
            guard_stream_residual_us.push(outlived);
        }
        Ok(Timings {
            mode: opts.mode,
            warmup: opts.warmup,
            launches_per_sample: per_sample,
            input_sets: sets,
            samples_us,
            wall_us,
            guard_event_us,
            guard_residual_us,
            guard_stream_residual_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_modes_read_back_as_written() {
        for mode in TimingMode::ALL {
            assert_eq!(mode.as_str().parse::<TimingMode>().unwrap(), mode);
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{mode}\""));
        }
        assert!("fast"
            .parse::<TimingMode>()
            .unwrap_err()
            .contains("known: graph"));
    }

    #[test]
    fn no_sample_launches_a_set_twice() {
        let batch = TimingOptions {
            mode: TimingMode::Batch,
            batch_launches: 50,
            ..TimingOptions::default()
        };
        for sets in [1, 2, 7, 8, 50, 64] {
            let per_sample = launches_per_sample(&batch, sets);
            assert_eq!(per_sample, 50.min(sets));
            let mut counter = 0;
            let mut seen = vec![0usize; sets];
            for _ in 0..4 * sets {
                let mut sample = next_sample_sets(&mut counter, sets, per_sample);
                assert_eq!(sample.len(), per_sample);
                for &s in &sample {
                    seen[s] += 1;
                }
                sample.sort_unstable();
                sample.dedup();
                assert_eq!(
                    sample.len(),
                    per_sample,
                    "a set twice in one sample ({sets} sets)"
                );
            }
            // The rotation still visits every set evenly.
            assert!(seen.iter().all(|&n| n == seen[0]), "{seen:?}");
        }
        let graph = TimingOptions::default();
        assert_eq!(launches_per_sample(&graph, 8), 1);
    }
}
