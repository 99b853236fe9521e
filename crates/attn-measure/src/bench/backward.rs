//! `bench --pass backward`: each backward implementation and backward baseline (SDPA's own
//! backends through autograd, FlashAttention-3's through JAX) timed on every problem as the
//! backward gate times them (the gate's backward sides, one block of samples each), one entry
//! each with the backward's FLOPs and bytes ([`BackwardRecord`]). A baseline's gradients are
//! judged against the f64 oracle before it is timed, as the gate judges them: a yardstick that
//! computes something else is skipped, in one line. For a training step's figure the forwards are
//! timed on each problem too (`step_forwards`, and each backend's forward beside its backward):
//! [`training_steps`] pairs them.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use attn_evidence::{BackwardRecord, BenchEntry, BenchRun, Implementation};
use attn_kernels::backward::PreparedBackward;
use attn_kernels::{Candidate, Config, Gpu, TimingOptions, Timings};
use attn_oracle::DType;
use attn_stats::Sample;

use super::{detect_sdpa, push, time_candidate, time_sdpa, Event, Report};
use crate::backward::sdpa::{backward_refusal, check_sdpa_gradients, SdpaBackwardSide};
use crate::backward::{backward_set_count, BackwardSide};
use crate::baseline::{sdpa_implementation, timing_evidence};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::{clocked_block, PreparedCache, TimedSide};
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
    /// For a training step's figure (forward + backward): the forward implementations timed on
    /// each problem too, and then the backends' forwards beside their backwards (empty: the
    /// backward alone).
    pub step_forwards: Vec<Candidate>,
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
    let wanted = !request.backends.is_empty();
    let sdpa = detect_sdpa(wanted, report, "our backward implementations");
    let backends = sdpa.as_ref().map_or(0, |_| request.backends.len());
    let step = !request.step_forwards.is_empty();
    let per_problem = request.implementations.len()
        + backends
        + if step {
            request.step_forwards.len() + backends
        } else {
            0
        };
    let mut cache = PreparedCache::default();
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
        if !step {
            continue;
        }
        // A training step's forward, on the same problem, as bench times a forward.
        for candidate in &request.step_forwards {
            let specialised = candidate.for_problem(&problem.shape, &problem.params, &gpu.limits());
            report(Event::Step(format!(
                "{} {problem} (forward)",
                candidate.label()
            )));
            let timed = time_candidate(gpu, &mut cache, &specialised, problem, opts, seed)
                .and_then(|t| super::entry(t, problem));
            push(&mut entries, report, timed, &candidate.label(), problem);
        }
        for &backend in &request.backends {
            report(Event::Step(format!("sdpa:{backend} {problem} (forward)")));
            let timed = time_sdpa(gpu, sdpa, backend, problem, opts, seed)
                .and_then(|t| super::entry(t, problem));
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

/// A training step of one problem: a forward entry and a backward entry of the same run, and
/// their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingStep {
    /// The forward's label and the backward's (`hopper + backward-mma`, `sdpa:cudnn + sdpa:cudnn`).
    pub label: String,
    /// The problem.
    pub shape: attn_evidence::ShapeSpec,
    /// The forward's median and the backward's, µs.
    pub median_us: (f64, f64),
    /// The step's TFLOP/s: both passes' FLOPs over both medians.
    pub tflops: f64,
}

/// Whether `imp` is a baseline's (SDPA's backends, FlashAttention-3) rather than ours.
fn is_baseline(imp: &Implementation) -> bool {
    imp.backend.is_some() || imp.name == "fa3"
}

/// The training steps of a backward bench run: on each problem, each of our forward entries with
/// each of our backward entries, and each baseline's forward with its own backward.
pub fn training_steps(run: &BenchRun) -> Vec<TrainingStep> {
    let flops = |e: &BenchEntry| e.tflops * 1e12 * e.summary.median * 1e-6;
    let mut steps = Vec::new();
    for f in run.entries.iter().filter(|e| e.backward.is_none()) {
        let backwards = (run.entries.iter()).filter(|b| b.backward.is_some() && b.shape == f.shape);
        for b in backwards {
            let paired = match is_baseline(&f.implementation) {
                true => f.implementation.label() == b.implementation.label(),
                false => !is_baseline(&b.implementation),
            };
            if !paired {
                continue;
            }
            let time = f.summary.median + b.summary.median;
            steps.push(TrainingStep {
                label: format!(
                    "{} + {}",
                    f.implementation.label(),
                    b.implementation.label()
                ),
                shape: f.shape.clone(),
                median_us: (f.summary.median, b.summary.median),
                tflops: (flops(f) + flops(b)) / (time * 1e-6) / 1e12,
            });
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_pairs_each_forward_with_the_backwards_of_its_kind() {
        let problem = Problem::parse("2,8,1024,64 causal").unwrap();
        let timings = |us: f64| Timings {
            mode: attn_kernels::TimingMode::Graph,
            warmup: 0,
            launches_per_sample: 1,
            input_sets: 1,
            samples_us: vec![us; 3],
            wall_us: vec![],
            guard_event_us: vec![],
            guard_residual_us: vec![],
            guard_stream_residual_us: vec![],
        };
        let forward = |implementation: Implementation, us| {
            let timed = super::super::Timed {
                implementation,
                timings: timings(us),
                sm_mhz: None,
            };
            super::super::entry(timed, &problem).unwrap()
        };
        let backward = |imp, us| backward_entry(imp, &problem, false, (timings(us), None)).unwrap();
        let cudnn = sdpa_implementation(Backend::Cudnn);
        let run = BenchRun {
            schema: attn_evidence::SCHEMA_VERSION,
            kind: attn_evidence::EvidenceKind::Bench,
            provenance: crate::provenance::synthetic("test".into(), false),
            suite: None,
            entries: vec![
                backward(Implementation::named("backward-mma"), 300.0),
                backward(cudnn.clone(), 250.0),
                forward(Implementation::named("hopper"), 100.0),
                forward(cudnn, 110.0),
            ],
        };
        let steps = training_steps(&run);
        let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["hopper + backward-mma", "sdpa:cudnn + sdpa:cudnn"]);
        assert_eq!(steps[0].median_us, (100.0, 300.0));
        // 3.5 forwards' FLOPs (the backward's 2.5) over 400 µs.
        let expected = 3.5 * problem.spec.flops() / 400e-6 / 1e12;
        assert!(
            (steps[0].tflops - expected).abs() < 1e-9 * expected,
            "{steps:?}"
        );
    }
}
