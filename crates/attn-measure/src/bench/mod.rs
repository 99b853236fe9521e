//! `bench` as a library: [`BenchSession`] runs a [`BenchRequest`] and reports [`Event`]s for its
//! caller to show; below it the measurements: an implementation or an SDPA backend timed on one
//! problem (a block of samples in the gate's timing harness), the evidence entry made of the
//! timings, and for a varlen batch the dense batch at its mean length it is compared with. Decode
//! batches run through [`run_decode_bench`] ([`decode`]), the backward pass through
//! [`run_backward_bench`] ([`backward`]).

pub mod backward;
pub mod decode;
mod session;

pub use backward::{run_backward_bench, training_steps, BackwardBenchRequest, TrainingStep};
pub use decode::{run_decode_bench, DecodeBenchRequest};
pub use session::{BenchRequest, BenchSession, Event, Report};

use attn_evidence::{BenchEntry, Implementation};
use attn_kernels::{Candidate, Gpu, TimingOptions, Timings};
use attn_stats::Sample;

use crate::baseline::{candidate_implementation, sdpa_implementation, timing_evidence};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::{clocked_block, KernelSide, PreparedCache, SdpaSide};
use crate::{Problem, Result};

/// One implementation timed on one problem: what ran, its timings, and the SM clock over them.
#[derive(Debug)]
pub struct Timed {
    /// What ran (a kernel with its resolved config, or an SDPA backend).
    pub implementation: Implementation,
    /// Its block of samples.
    pub timings: Timings,
    /// The SM clock over the block, MHz ([`clocked_block`]).
    pub sm_mhz: Option<f64>,
}

/// `candidate` (already specialised for `problem`'s shape) timed on `problem`, compiled once per
/// config through `cache`.
pub fn time_candidate(
    gpu: &Gpu,
    cache: &mut PreparedCache,
    candidate: &Candidate,
    problem: &Problem,
    opts: &TimingOptions,
    seed: u64,
) -> Result<Timed> {
    let (dtype, head_dim) = (problem.dtype, problem.shape.head_dim);
    let prepared = cache.get(gpu, candidate, dtype, head_dim)?;
    let mut side = KernelSide::new(gpu, &prepared, problem, seed)?;
    let (timings, sm_mhz) = clocked_block(gpu, &mut side, opts)?;
    Ok(Timed {
        implementation: candidate_implementation(candidate, Some(prepared.config())),
        timings,
        sm_mhz,
    })
}

/// PyTorch SDPA's `backend` (or FlashAttention-3) timed on `problem`, in the helper's process.
pub fn time_sdpa(
    gpu: &Gpu,
    sdpa: &Sdpa,
    backend: Backend,
    problem: &Problem,
    opts: &TimingOptions,
    seed: u64,
) -> Result<Timed> {
    let mut side = SdpaSide::new(gpu, sdpa, backend, problem, seed);
    let (timings, sm_mhz) = clocked_block(gpu, &mut side, opts)?;
    Ok(Timed {
        implementation: sdpa_implementation(backend),
        timings,
        sm_mhz,
    })
}

/// The evidence entry of `timed` on `problem`: summary, TFLOP/s at the median, raw timings, the
/// SM clock.
pub fn entry(timed: Timed, problem: &Problem) -> Result<BenchEntry> {
    let summary = Sample::new(timed.timings.samples_us.clone())?.summary();
    Ok(BenchEntry {
        implementation: timed.implementation,
        shape: problem.spec.clone(),
        decode: None,
        timing: timing_evidence(&timed.timings),
        tflops: problem.spec.tflops(summary.median),
        summary,
        dense_at_mean: None,
        backward: None,
        sm_mhz: timed.sm_mhz,
    })
}

/// The PyTorch helper when `wanted` (some SDPA backend is to be timed); where it cannot start,
/// one line says so and the run times `ours` only.
fn detect_sdpa(wanted: bool, report: Report<'_>, ours: &str) -> Option<Sdpa> {
    if !wanted {
        return None;
    }
    Sdpa::detect()
        .map_err(|err| {
            report(Event::Line(format!(
                "PyTorch SDPA is unavailable ({err}): timing {ours} only"
            )))
        })
        .ok()
}

/// Keeps a timed entry, or says why `label` was skipped on `problem`; a step done either way.
fn push(
    entries: &mut Vec<BenchEntry>,
    report: Report<'_>,
    timed: Result<BenchEntry>,
    label: &str,
    problem: &dyn std::fmt::Display,
) {
    match timed {
        Ok(entry) => entries.push(entry),
        Err(err) => report(Event::Line(format!(
            "  skipped {label} on {problem}: {err}"
        ))),
    }
    report(Event::Done(1));
}

/// A bench run without a GPU (`bench --synthetic`, test mode): each of `names` on each problem, a
/// made-up time of about 100 µs from `seed`, under a provenance that names no GPU
/// ([`crate::provenance::synthetic`]): what a suite matrix's plumbing is tested with, never evidence
/// of a kernel.
pub fn synthetic_run(
    problems: &[Problem],
    names: &[String],
    samples: usize,
    seed: u64,
    git: (String, bool),
) -> Result<attn_evidence::BenchRun> {
    let mut entries = Vec::new();
    for (p, problem) in problems.iter().enumerate() {
        for (n, name) in names.iter().enumerate() {
            let at = |i: usize| {
                let mixed = seed ^ ((p * 31 + n * 7 + i) as u64).wrapping_mul(0x9e37_79b9);
                100.0 + (mixed % 1000) as f64 / 1000.0
            };
            let samples_us: Vec<f64> = (0..samples.max(2)).map(at).collect();
            let timings = attn_kernels::Timings {
                mode: attn_kernels::TimingMode::Graph,
                warmup: 0,
                launches_per_sample: 1,
                input_sets: 1,
                samples_us,
                wall_us: vec![],
                guard_event_us: vec![],
                guard_residual_us: vec![],
                guard_stream_residual_us: vec![],
            };
            let timed = Timed {
                implementation: Implementation::named(name.clone()),
                timings,
                sm_mhz: None,
            };
            entries.push(entry(timed, problem)?);
        }
    }
    Ok(attn_evidence::BenchRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: attn_evidence::EvidenceKind::Bench,
        provenance: crate::provenance::synthetic(git.0, git.1),
        suite: None,
        entries,
    })
}

/// The dense batch a varlen problem is measured against ([`attn_evidence::DenseAtMean`]): `B` its
/// non-empty sequences, `S_q` and `S_kv` their mean lengths (rounded, at least 1), with its heads,
/// head dim, mask, window and dtype; `None` for a dense problem.
pub fn dense_at_mean(problem: &Problem) -> Result<Option<Problem>> {
    let Some(varlen) = &problem.spec.varlen else {
        return Ok(None);
    };
    let sequences = varlen.non_empty().max(1);
    let mean = |total: usize| ((total as f64 / sequences as f64).round() as usize).max(1);
    Problem::new(attn_evidence::ShapeSpec {
        batch: sequences,
        seq_q: mean(varlen.total_q()),
        seq_kv: mean(varlen.total_kv()),
        varlen: None,
        ..problem.spec.clone()
    })
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_varlen_batch_is_compared_with_its_non_empty_sequences_at_their_mean_length() {
        let varlen = Problem::parse("varlen=512,0,3000,1024 H=32/8 D=128 causal bf16").unwrap();
        let dense = dense_at_mean(&varlen).unwrap().unwrap();
        assert_eq!(dense.to_string(), "3,32/8,1512,128 causal bf16");
        assert_eq!(dense.spec.tokens(), varlen.spec.tokens());
        let cross = Problem::parse("varlen=100:300,0:50,7 H=8 D=64").unwrap();
        let dense = dense_at_mean(&cross).unwrap().unwrap();
        assert_eq!(
            (dense.shape.batch, dense.shape.seq_q, dense.shape.seq_kv),
            (2, 54, 179)
        );
        assert!(dense_at_mean(&Problem::parse("2,8,512,64").unwrap())
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_mixed_batch_is_judged_per_token_and_per_unit_of_work() {
        // Lengths 1000 and 3000 do 1000² + 3000² = 10M pairs where 2 × 2000² = 8M: at the same
        // throughput, 1.25× the time per token and 1× per unit of work.
        let timed = |us: f64| Timed {
            implementation: Implementation::named("mma"),
            timings: attn_kernels::Timings {
                mode: attn_kernels::TimingMode::Graph,
                warmup: 0,
                launches_per_sample: 1,
                input_sets: 0,
                samples_us: vec![us; 5],
                wall_us: vec![],
                guard_event_us: vec![],
                guard_residual_us: vec![],
                guard_stream_residual_us: vec![],
            },
            sm_mhz: Some(1700.0),
        };
        let varlen = Problem::parse("varlen=1000,3000 H=8 D=64").unwrap();
        let dense = dense_at_mean(&varlen).unwrap().unwrap();
        let v = entry(timed(125.0), &varlen).unwrap();
        let d = entry(timed(100.0), &dense).unwrap();
        assert_eq!(v.sm_mhz, Some(1700.0));
        let compared = attn_evidence::DenseAtMean::of(&v, &d);
        assert!((compared.per_token_ratio - 1.25).abs() < 1e-9);
        assert!((compared.work_ratio(&v) - 1.25).abs() < 1e-9);
        assert!((compared.per_work_ratio(&v) - 1.0).abs() < 1e-9);
        assert!(!compared.meets_target());
    }
}
