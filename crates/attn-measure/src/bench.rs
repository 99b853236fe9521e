//! `bench`'s measurements: an implementation or an SDPA backend timed on one problem (a block of
//! samples in the gate's timing harness, every timed output verified), and the evidence entry
//! made of the timings.

use attn_evidence::{BenchEntry, Implementation};
use attn_kernels::{Candidate, Gpu, TimingOptions, Timings};
use attn_stats::Sample;

use crate::baseline::{candidate_implementation, sdpa_implementation, timing_evidence};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::{KernelSide, PreparedCache, SdpaSide, TimedSide};
use crate::{Problem, Result};

/// `candidate` (already specialised for `problem`'s shape) timed on `problem`, compiled once per
/// config through `cache`: what ran (with its resolved config) and its timings.
pub fn time_candidate(
    gpu: &Gpu,
    cache: &mut PreparedCache,
    candidate: &Candidate,
    problem: &Problem,
    opts: &TimingOptions,
    seed: u64,
) -> Result<(Implementation, Timings)> {
    let (dtype, head_dim) = (problem.dtype, problem.shape.head_dim);
    let prepared = cache.get(gpu, candidate, dtype, head_dim)?;
    let timings = KernelSide::new(gpu, prepared, problem, seed)?.block(opts)?;
    let implementation = candidate_implementation(candidate, Some(prepared.config()));
    Ok((implementation, timings))
}

/// PyTorch SDPA's `backend` timed on `problem`.
pub fn time_sdpa(
    gpu: &Gpu,
    sdpa: &Sdpa,
    backend: Backend,
    problem: &Problem,
    opts: &TimingOptions,
    seed: u64,
) -> Result<(Implementation, Timings)> {
    let timings = SdpaSide::new(gpu, sdpa, backend, problem, seed).block(opts)?;
    Ok((sdpa_implementation(backend), timings))
}

/// The evidence entry of `implementation`'s `timings` on `problem`: summary, TFLOP/s at the
/// median, raw timings.
pub fn entry(
    implementation: Implementation,
    problem: &Problem,
    timings: &Timings,
) -> Result<BenchEntry> {
    let summary = Sample::new(timings.samples_us.clone())?.summary();
    Ok(BenchEntry {
        implementation,
        shape: problem.spec.clone(),
        timing: timing_evidence(timings),
        tflops: problem.spec.tflops(summary.median),
        summary,
    })
}
