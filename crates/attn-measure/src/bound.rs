//! The bound every output is judged by against the GPU reference, in the checks and in the timed
//! outputs' verification alike: the tolerance less the reference's own error against the f64
//! oracle, so that passing it bounds the error against exact arithmetic.

use attn_kernels::ElementBound;
use attn_oracle::{Reference, Tolerance};

use crate::{MeasureError, Problem, Result};

/// The GPU reference may use at most this share of a tolerance: beyond it, it cannot judge.
const REFERENCE_SHARE: f64 = 0.25;

/// The bound of a whole-output comparison against the GPU reference: each element's bound of the
/// tolerance (`max_abs`, or `rel_l2` of an element above the table's magnitude, as
/// `attn_oracle::compare` judges) less the reference's own measured error against the f64 oracle
/// (`reference_vs_f64`), so that passing it bounds the error against exact arithmetic. A
/// reference off by more than [`REFERENCE_SHARE`] of the tolerance cannot judge: an error naming
/// `case()`.
pub(crate) fn whole_output_bound(
    reference_vs_f64: f64,
    tol: &Tolerance,
    case: impl FnOnce() -> String,
) -> Result<ElementBound> {
    // NaN counts as too large (`is_some_and` on the ordering is false for NaN).
    let within =
        (reference_vs_f64.partial_cmp(&(REFERENCE_SHARE * tol.max_abs))).is_some_and(|o| o.is_le());
    if !within {
        return Err(MeasureError::Invalid(format!(
            "the GPU reference is off by {reference_vs_f64:.3e} against the f64 oracle on {}, over {:.0}% of the tolerance {:.3e}: it cannot judge this case",
            case(),
            REFERENCE_SHARE * 100.0,
            tol.max_abs
        )));
    }
    Ok(ElementBound {
        abs: tol.max_abs,
        rel: tol.rel_l2,
        slack: reference_vs_f64,
    })
}

/// The largest |gpu reference − f64| over the f64 oracle's rows (found in the output's layout).
pub(crate) fn reference_error(gpu_ref: &[f32], exact: &Reference, problem: &Problem) -> f64 {
    let d = problem.shape.head_dim;
    let mut worst = 0.0f64;
    for (i, id) in exact.rows.iter().enumerate() {
        let Some(row) = problem.output_row(id) else {
            return f64::INFINITY; // a row the output does not have: nothing can be judged
        };
        for (a, b) in gpu_ref[row * d..(row + 1) * d].iter().zip(exact.out_row(i)) {
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
