//! The timing harness every command uses.
//!
//! - `Flushed`: one launch per sample between two CUDA events, with the L2 cache overwritten just
//!   before (a memset of twice its size, which also keeps the GPU busy while the host enqueues the
//!   launch, so the events time the kernel and not the launch latency).
//! - `Graph`: as `Flushed`, but each launch is replayed from a CUDA graph captured once per input
//!   set, so host launch overhead stays out of the numbers for any launcher (the same mode is used
//!   for PyTorch SDPA, whose Python dispatch would otherwise be timed).
//! - `Batch`: many back-to-back launches between two events, total / count: for launch-bound shapes.
//!
//! Inputs rotate among `sets` (the caller's launch closure receives the set index). Every sample is
//! kept. A separate guard pass times a few plain launches twice, by events on the timed stream and
//! by the host clock up to a device-wide synchronisation, and measures how long the device keeps
//! working after the timed stream's end event: work that escapes the timed stream (another stream,
//! a child launch) shows up in the last two and not in the first.

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
    /// Per-launch time of each sample by CUDA events, µs.
    pub samples_us: Vec<f64>,
    /// Guard pass: per-launch host time from enqueue to device-wide synchronisation, µs.
    pub wall_us: Vec<f64>,
    /// Guard pass: the same launches timed by events on the timed stream, µs.
    pub guard_event_us: Vec<f64>,
    /// Guard pass: how long the device kept working after the timed stream's end event had
    /// completed (host time from that event to a device-wide synchronisation), µs. Near zero
    /// unless work runs on another stream.
    #[serde(default)]
    pub guard_residual_us: Vec<f64>,
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
        let per_sample = match opts.mode {
            TimingMode::Flushed | TimingMode::Graph => 1,
            TimingMode::Batch => opts.batch_launches.max(1),
        };
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
        let mut next_set = || {
            counter += 1;
            counter % sets
        };
        let run_one = |set: usize, launch: &mut dyn FnMut(usize) -> Result<()>| -> Result<()> {
            match graphs.get(set) {
                Some(graph) => graph.launch().during("cuGraphLaunch"),
                None => launch(set),
            }
        };
        for _ in 0..opts.warmup {
            run_one(next_set(), launch)?;
        }
        self.gpu.synchronize()?;

        let mut samples_us = Vec::with_capacity(opts.samples);
        let mut sample_sets = Vec::with_capacity(per_sample);
        for i in 0..opts.samples {
            sample_sets.clear();
            sample_sets.extend((0..per_sample).map(|_| next_set()));
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
        for i in 0..opts.guard_launches {
            let t0 = Instant::now();
            start.record(&stream).during("cuEventRecord")?;
            launch(i % sets)?;
            end.record(&stream).during("cuEventRecord")?;
            end.synchronize().during("cuEventSynchronize")?;
            let timed_stream_done = Instant::now();
            self.gpu.synchronize()?;
            guard_residual_us.push(timed_stream_done.elapsed().as_secs_f64() * 1e6);
            wall_us.push(t0.elapsed().as_secs_f64() * 1e6);
            guard_event_us
                .push(f64::from(start.elapsed_ms(&end).during("cuEventElapsedTime")?) * 1000.0);
        }
        Ok(Timings {
            mode: opts.mode,
            warmup: opts.warmup,
            launches_per_sample: per_sample,
            samples_us,
            wall_us,
            guard_event_us,
            guard_residual_us,
        })
    }
}
