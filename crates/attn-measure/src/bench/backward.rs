//! `bench --pass backward`: each backward implementation and backward baseline (SDPA's own
//! backends through autograd, FlashAttention-3's through JAX) timed on every problem as the
//! backward gate times them (the gate's backward sides, one block of samples each), one entry
//! each with the backward's FLOPs and bytes ([`BackwardRecord`]). A baseline's gradients are
//! judged against the f64 oracle before it is timed, as the gate judges them: a yardstick that
//! computes something else is skipped, in one line.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use attn_evidence::{BackwardRecord, BenchEntry, BenchRun, Implementation};
use attn_kernels::backward::PreparedBackward;
use attn_kernels::{Config, Gpu, TimingOptions, Timings};
use attn_oracle::DType;
use attn_stats::Sample;

use super::{push, Event, Report};
use crate::backward::sdpa::{backward_refusal, check_sdpa_gradients, SdpaBackwardSide};
use crate::backward::{backward_set_count, BackwardSide};
use crate::baseline::{sdpa_implementation, timing_evidence};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::{clocked_block, TimedSide};
use crate::{Problem, Result};

/// Everything `cargo xtask bench --pass backward` asks, typed and validated.
#[derive(Debug, Clone)]
pub struct BackwardBenchRequest {
    /// The problems, in order.
    pub problems: Vec<Problem>,
    /// The backward implementations timed, each with its overrides.
    pub implementations: Vec<(String, Config)>,
    /// The backward baselines timed alongside: SDPA's own backends, FA3 (none: PyTorch is not
    /// looked for).
    pub backends: Vec<Backend>,
    /// The harness options of every entry.
    pub timing: TimingOptions,
    /// Base seed of the timing inputs.
    pub seed: u64,
    /// The suite's name, for the record.
    pub suite: Option<String>,
    /// The git revision and dirty flag of the code that runs, for provenance.
    pub git: (String, bool),
}

/// The entry of one side's `timings` on `problem`'s backward: µs summary, TFLOP/s over the
/// backward's FLOPs at the median, the SM clock.
pub fn backward_entry(
    implementation: Implementation,
    problem: &Problem,
    deterministic: bool,
    (timings, sm_mhz): (Timings, Option<f64>),
) -> Result<BenchEntry> {
    let summary = Sample::new(timings.samples_us.clone())?.summary();
    let record = BackwardRecord::new(&problem.spec, deterministic, false);
    Ok(BenchEntry {
        implementation,
        shape: problem.spec.clone(),
        decode: None,
        backward: Some(record),
        timing: timing_evidence(&timings),
        tflops: problem.spec.backward_flops() / (summary.median * 1e-6) / 1e12,
        summary,
        dense_at_mean: None,
        sm_mhz,
    })
}

/// Runs `request` on `gpu`: a thrown-away warm-up, then every problem `admit` lets start (it
/// answers why not), implementations then baselines; the run's record.
pub fn run_backward_bench(
    gpu: &Gpu,
    request: &BackwardBenchRequest,
    report: Report<'_>,
    admit: &mut dyn FnMut() -> Option<String>,
) -> Result<BenchRun> {
    let sdpa = if request.backends.is_empty() {
        None
    } else {
        Sdpa::detect()
            .map_err(|err| {
                report(Event::Line(format!(
                    "PyTorch SDPA is unavailable ({err}): timing our backward implementations only"
                )))
            })
            .ok()
    };
    let per_problem =
        request.implementations.len() + sdpa.as_ref().map_or(0, |_| request.backends.len());
    report(Event::Start((per_problem * request.problems.len()) as u64));
    let (opts, seed) = (&request.timing, request.seed);
    let info = gpu.info();
    let mut prepared: HashMap<(usize, DType, usize), PreparedBackward> = HashMap::new();
    let mut entries = Vec::new();
    let before = attn_kernels::telemetry::read_clocks(0);
    for (n, problem) in request.problems.iter().enumerate() {
        if let Some(why) = admit() {
            report(Event::Line(format!("  {problem}: {why}")));
            report(Event::Done(per_problem as u64));
            continue;
        }
        let sets = backward_set_count(problem, info.l2_bytes as usize, info.total_memory);
        for (i, (name, config)) in request.implementations.iter().enumerate() {
            report(Event::Step(format!("{name} {problem}")));
            let (dtype, d) = (problem.dtype, problem.shape.head_dim);
            let timed = (|| -> Result<BenchEntry> {
                let p = match prepared.entry((i, dtype, d)) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        e.insert(PreparedBackward::new(gpu, name, config, dtype, d)?)
                    }
                };
                let mut side = BackwardSide::new(gpu, p, problem, sets, seed, false)?;
                if n == 0 && i == 0 {
                    // The GPU starts cool and would favour what runs first (evidence/METHOD.md,
                    // `bench-warm-up`): one block thrown away.
                    clocked_block(gpu, &mut side, opts)?;
                }
                let mut implementation = Implementation::named(name.clone());
                implementation.config = p.config().0.clone();
                let deterministic = p.deterministic();
                backward_entry(
                    implementation,
                    problem,
                    deterministic,
                    clocked_block(gpu, &mut side, opts)?,
                )
            })();
            push(&mut entries, report, timed, name, problem);
        }
        let Some(sdpa) = &sdpa else { continue };
        for &backend in &request.backends {
            if let Some(why) = backward_refusal(problem, backend) {
                report(Event::Line(format!("  sdpa:{backend} skipped: {why}")));
                report(Event::Done(1));
                continue;
            }
            report(Event::Step(format!("sdpa:{backend} {problem}")));
            let timed = check_sdpa_gradients(gpu, sdpa, backend, problem, seed ^ 0xc4ec)
                .and_then(|()| {
                    let mut side = SdpaBackwardSide::new(gpu, sdpa, backend, problem, sets, seed);
                    let side: &mut dyn TimedSide = &mut side;
                    clocked_block(gpu, side, opts)
                })
                .and_then(|t| backward_entry(sdpa_implementation(backend), problem, false, t));
            push(
                &mut entries,
                report,
                timed,
                &format!("sdpa:{backend}"),
                problem,
            );
        }
    }
    report(Event::Finished);
    let after = attn_kernels::telemetry::read_clocks(0);
    let versions = sdpa.as_ref().map(Sdpa::versions);
    let (git_rev, git_dirty) = request.git.clone();
    Ok(BenchRun {
        schema: attn_evidence::SCHEMA_VERSION,
        kind: attn_evidence::EvidenceKind::Bench,
        provenance: crate::provenance::collect(
            gpu,
            versions.as_ref(),
            before,
            after,
            git_rev,
            git_dirty,
        ),
        suite: request.suite.clone(),
        entries,
    })
}
