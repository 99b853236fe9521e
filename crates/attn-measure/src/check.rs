//! Correctness checks of a prepared candidate on one problem.
//!
//! Each check draws fresh inputs from the next distribution of [`Distribution::CHECKS`] (normal,
//! large logits, peaky rows, constant rows, small variance) and poisons the output before the
//! launch. The whole output is compared with the GPU reference (`kernels/reference.cu`), and the
//! rows of [`RowSelection::for_check`] with the f64 oracle; the reference's own error on those
//! rows is measured each time and subtracted from the tolerance of the whole-output comparison,
//! so that passing it bounds the candidate's error against exact arithmetic everywhere. An
//! output byte-identical to the previous check's, on new inputs, is stale.

use std::time::Duration;

use attn_evidence::{CheckFailure, CorrectnessCheck, FullCheck};
use attn_kernels::{Gpu, GpuReference, Prepared, RowErrors};
use attn_oracle::{
    compare, generate, reference, tolerance, CaseSpec, Distribution, HostTensor, Inputs, Reference,
    RowSelection, Tolerance,
};

use crate::supervise::Watchdog;
use crate::{MeasureError, Problem, Result};

/// The GPU reference may use at most this share of a tolerance: beyond it, it cannot judge.
const REFERENCE_SHARE: f64 = 0.25;

/// One correctness check: its record, and what it was computed from (for a second reference).
#[derive(Debug)]
pub struct CheckRun {
    /// As recorded in evidence.
    pub check: CorrectnessCheck,
    /// The inputs.
    pub inputs: Inputs,
    /// The candidate's output.
    pub output: HostTensor,
    /// The f64 oracle on the checked rows.
    pub reference: Reference,
}

/// The watchdog every candidate launch runs under, with its bound.
pub type Watched<'a> = Option<(&'a Watchdog, Duration)>;

/// `checks` checks of `prepared` on `problem`, seeds `seed`, `seed + 1`, …
pub fn run_checks(
    gpu: &Gpu,
    prepared: &Prepared,
    gpu_reference: &GpuReference,
    problem: &Problem,
    seed: u64,
    checks: usize,
    watched: Watched<'_>,
) -> Result<Vec<CheckRun>> {
    let mut runs: Vec<CheckRun> = Vec::with_capacity(checks);
    for i in 0..checks {
        let case_seed = seed.wrapping_add(i as u64);
        let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
        let previous = runs.last().map(|r| &r.output);
        let run = check_one(
            gpu,
            prepared,
            gpu_reference,
            problem,
            case_seed,
            distribution,
            previous,
            watched,
        )?;
        runs.push(run);
    }
    Ok(runs)
}

#[allow(clippy::too_many_arguments)]
fn check_one(
    gpu: &Gpu,
    prepared: &Prepared,
    gpu_reference: &GpuReference,
    problem: &Problem,
    seed: u64,
    distribution: Distribution,
    previous: Option<&HostTensor>,
    watched: Watched<'_>,
) -> Result<CheckRun> {
    let inputs = generate(&CaseSpec {
        shape: problem.shape,
        dtype: problem.dtype,
        distribution,
        seed,
    });
    let (q, k, v) = (
        gpu.upload(&inputs.q)?,
        gpu.upload(&inputs.k)?,
        gpu.upload(&inputs.v)?,
    );
    let mut o = gpu.alloc_poisoned(q.dims, problem.dtype)?;
    let mut launch = || -> attn_kernels::Result<()> {
        prepared.launch(gpu, &q, &k, &v, &mut o, &problem.params)?;
        gpu.synchronize()
    };
    match watched {
        Some((watchdog, bound)) => watchdog.guard(bound, "a checked launch", launch)?,
        None => launch()?,
    }
    let output = gpu.download(&o)?;
    let tol = tolerance(problem.dtype, distribution);
    let rows = RowSelection::for_check(&problem.shape, seed);
    let exact = reference(&inputs.q, &inputs.k, &inputs.v, &problem.params, &rows)?;
    let verdict = compare(&output, &exact, &tol);

    // The GPU reference: its own error on the f64 rows first, then every element of the output.
    let gpu_ref = gpu_reference.compute(gpu, &q, &k, &v, &problem.params)?;
    let reference_vs_f64 = reference_error(&gpu_ref.download(gpu)?, &exact);
    // NaN counts as too large (`is_some_and` on the ordering is false for NaN).
    let within =
        (reference_vs_f64.partial_cmp(&(REFERENCE_SHARE * tol.max_abs))).is_some_and(|o| o.is_le());
    if !within {
        return Err(MeasureError::Invalid(format!(
            "the GPU reference is off by {reference_vs_f64:.3e} against the f64 oracle on {problem} ({distribution}, seed {seed}), over {:.0}% of the tolerance {:.3e}: it cannot judge this case",
            REFERENCE_SHARE * 100.0,
            tol.max_abs
        )));
    }
    let atol = tol.max_abs - reference_vs_f64;
    let errors = gpu_reference.compare(gpu, &o, &gpu_ref, atol)?;
    let full = full_check(&errors, problem, atol, reference_vs_f64);

    let stale = previous.is_some_and(|p| p.as_bytes() == output.as_bytes());
    let failure = failure_of(&verdict, &full, &tol, stale);
    let reason = failure.map(|f| failure_reason(f, &verdict, &full, &tol));
    let check = CorrectnessCheck {
        seed,
        distribution: distribution.to_string(),
        passed: failure.is_none(),
        max_abs: verdict.max_abs,
        rel_l2: verdict.rel_l2,
        nan_count: verdict.nan_count + verdict.inf_count,
        poison_count: verdict.poison_count,
        reason,
        sdpa_max_abs: None,
        closer_to: None,
        failure,
        rows: Some(rows.describe()),
        full: Some(full),
    };
    Ok(CheckRun {
        check,
        inputs,
        output,
        reference: exact,
    })
}

/// The largest |gpu reference − f64| over the f64 oracle's rows.
fn reference_error(gpu_ref: &[f32], exact: &Reference) -> f64 {
    let shape = exact.shape;
    let d = shape.head_dim;
    let mut worst = 0.0f64;
    for (i, id) in exact.rows.iter().enumerate() {
        let flat = ((id.batch * shape.heads + id.head) * shape.seq_q + id.row) * d;
        for (a, b) in gpu_ref[flat..flat + d].iter().zip(exact.out_row(i)) {
            let err = (f64::from(*a) - b).abs();
            worst = if err.is_nan() {
                f64::INFINITY
            } else {
                worst.max(err)
            };
        }
    }
    worst
}

fn full_check(
    errors: &RowErrors,
    problem: &Problem,
    atol: f64,
    reference_vs_f64: f64,
) -> FullCheck {
    let shape = problem.shape;
    let (worst, at) = errors.worst();
    let mut per_row: Vec<f64> = errors.max_abs.iter().map(|&e| f64::from(e)).collect();
    per_row.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if per_row.is_empty() {
            0.0
        } else {
            per_row[((per_row.len() - 1) as f64 * p).round() as usize]
        }
    };
    FullCheck {
        elements: (errors.rows() * shape.head_dim) as u64,
        max_abs: f64::from(worst),
        rel_l2: errors.rel_l2(),
        bad_elements: errors.bad_elements(),
        bad_rows: errors.bad_rows() as u64,
        worst_row: [
            at / (shape.heads * shape.seq_q),
            at / shape.seq_q % shape.heads,
            at % shape.seq_q,
        ],
        row_max_abs: [q(0.5), q(0.99), q(1.0)],
        tolerance: atol,
        reference_vs_f64,
    }
}

/// What failed, most telling first: unwritten, NaN/Inf, stale, then wrong values (by the f64
/// rows or by any element of the whole output).
fn failure_of(
    verdict: &attn_oracle::Verdict,
    full: &FullCheck,
    tol: &Tolerance,
    stale: bool,
) -> Option<CheckFailure> {
    let rel_l2_ok = full
        .rel_l2
        .partial_cmp(&tol.rel_l2)
        .is_some_and(|o| o.is_le());
    let bad_full = full.bad_elements > 0 || !rel_l2_ok;
    if verdict.poison_count > 0 {
        Some(CheckFailure::Unwritten)
    } else if verdict.nan_count + verdict.inf_count > 0 {
        Some(CheckFailure::NonFinite)
    } else if stale {
        Some(CheckFailure::Stale)
    } else if !verdict.passed || bad_full {
        Some(CheckFailure::Incorrect)
    } else {
        None
    }
}

fn failure_reason(
    failure: CheckFailure,
    verdict: &attn_oracle::Verdict,
    full: &FullCheck,
    tol: &Tolerance,
) -> String {
    let [b, h, s] = full.worst_row;
    match failure {
        CheckFailure::Unwritten => format!(
            "{} output elements never written (still poison), first at {:?}",
            verdict.poison_count, verdict.worst
        ),
        CheckFailure::NonFinite => format!(
            "{} NaN/Inf output elements, first at {:?}",
            verdict.nan_count + verdict.inf_count,
            verdict.worst
        ),
        CheckFailure::Stale => {
            "output identical to the previous call's on new inputs (stale output)".into()
        }
        CheckFailure::Incorrect if !verdict.passed => format!(
            "max abs error {:.3e} against the f64 oracle (tolerance {:.3e}), rel L2 {:.3e} (≤ {:.3e}), worst at {:?}",
            verdict.max_abs, tol.max_abs, verdict.rel_l2, tol.rel_l2, verdict.worst
        ),
        CheckFailure::Incorrect => format!(
            "{} elements in {} rows off the GPU reference by more than {:.3e} (max {:.3e} at b={b} h={h} row {s}), rel L2 {:.3e} (≤ {:.3e})",
            full.bad_elements, full.bad_rows, full.tolerance, full.max_abs, full.rel_l2, tol.rel_l2
        ),
    }
}

/// The first failed check, as one line (`None` when all pass).
pub fn first_failure(runs: &[CheckRun]) -> Option<String> {
    runs.iter().find(|r| !r.check.passed).map(|r| {
        format!(
            "{} inputs, seed {}: {}",
            r.check.distribution,
            r.check.seed,
            r.check.reason.as_deref().unwrap_or("wrong result")
        )
    })
}
