//! Running a prepared kernel against the f64 oracle.

use std::time::{SystemTime, UNIX_EPOCH};

use attn_kernels::{Gpu, Prepared};
use attn_oracle::{
    compare, generate, reference, tolerance, CaseSpec, DType, Distribution, Params, RowSelection,
    Shape, Verdict,
};

/// A fresh seed per run (printed, so a failure can be replayed with ATTN_TEST_SEED).
pub(crate) fn base_seed() -> u64 {
    std::env::var("ATTN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// What one run against the oracle found.
pub(crate) struct Outcome {
    pub(crate) verdict: Verdict,
    /// Two runs on the same inputs gave the same bits.
    pub(crate) repeatable: bool,
}

/// Runs `prepared` twice on fresh inputs of `shape` (seeded) and compares the first output with
/// the f64 oracle: every row, or `rows_per_head` sampled rows per head.
pub(crate) fn run_against_oracle(
    gpu: &Gpu,
    prepared: &Prepared,
    shape: Shape,
    dtype: DType,
    causal: bool,
    seed: u64,
    rows_per_head: Option<usize>,
) -> Result<Outcome, String> {
    let params = Params::new(shape.head_dim, causal);
    let normal = Distribution::Normal;
    run_with_params(
        gpu,
        prepared,
        shape,
        dtype,
        &params,
        normal,
        seed,
        rows_per_head,
    )
}

/// [`run_against_oracle`] with any parameters (windows, scale) and inputs drawn from any
/// distribution.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_with_params(
    gpu: &Gpu,
    prepared: &Prepared,
    shape: Shape,
    dtype: DType,
    params: &Params,
    distribution: Distribution,
    seed: u64,
    rows_per_head: Option<usize>,
) -> Result<Outcome, String> {
    let params = *params;
    let inputs = generate(&CaseSpec {
        shape,
        dtype,
        distribution,
        seed,
    });
    let run = || {
        prepared
            .run(gpu, &inputs.q, &inputs.k, &inputs.v, &params)
            .map_err(|e| e.to_string())
    };
    let first = run()?;
    let second = run()?;
    let rows = match rows_per_head {
        Some(rows_per_head) => RowSelection::Sampled {
            rows_per_head,
            seed,
        },
        None => RowSelection::All,
    };
    let reference =
        reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows).map_err(|e| e.to_string())?;
    Ok(Outcome {
        verdict: compare(&first, &reference, &tolerance(dtype, distribution)),
        repeatable: first.as_bytes() == second.as_bytes(),
    })
}

/// One run's outcome as a one-line failure naming `label` (an error, two runs that differ, a
/// failed comparison), or the max abs error.
pub(crate) fn judged(label: &str, outcome: Result<Outcome, String>) -> Result<f64, String> {
    let outcome = outcome.map_err(|e| format!("{label}: {e}"))?;
    if !outcome.repeatable {
        return Err(format!(
            "{label}: two runs on the same inputs differ (a race?)"
        ));
    }
    if !outcome.verdict.passed {
        return Err(format!(
            "{label}: {}",
            outcome.verdict.reason.unwrap_or_else(|| "failed".into())
        ));
    }
    Ok(outcome.verdict.max_abs)
}
