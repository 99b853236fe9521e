//! Judging a backward kernel's outputs: the gradients' provisional tolerances, and comparisons of
//! a gradient or an LSE with the f64 oracle's.

use serde::{Deserialize, Serialize};

use crate::compare::{compare_in, OutputLayout, F32_ACCUMULATION, LARGE_LOGIT_ERROR};
use crate::{DType, Distribution, HostTensor, Params, Reference, RowId, Shape, Tolerance, Verdict};

/// One of a backward's three outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gradient {
    /// dQ, shaped like Q.
    Dq,
    /// dK, shaped like K.
    Dk,
    /// dV, shaped like V.
    Dv,
}

/// How far a backward kernel's outputs may be from the f64 oracle's ([`backward_tolerance`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackwardTolerance {
    /// The relative error allowed in dQ (see [`BackwardTolerance::for_gradient`]).
    pub dq: f64,
    /// The relative error allowed in dK.
    pub dk: f64,
    /// The relative error allowed in dV.
    pub dv: f64,
    /// The bound on the forward's LSE, natural log, for [`compare_lse`].
    pub lse: Tolerance,
}

/// A gradient element may be off by this many times its tensor's relative bound times the
/// tensor's RMS: the tail of an error spread over many elements.
pub const ELEMENT_SPREAD: f64 = 4.0;

impl BackwardTolerance {
    /// The relative error allowed in `gradient`.
    pub fn relative(&self, gradient: Gradient) -> f64 {
        match gradient {
            Gradient::Dq => self.dq,
            Gradient::Dk => self.dk,
            Gradient::Dv => self.dv,
        }
    }

    /// The bounds for one gradient tensor whose exact value is `exact`: `rel_l2` is the relative
    /// bound `r`, `max_abs` is `4·r·RMS(exact)`.
    ///
    /// Relative to the tensor's RMS rather than to each element: an element of dK is a sum over
    /// query rows of terms the size of the tensor's typical element, rounded each, so an element
    /// near 0 carries errors of its neighbours' size.
    pub fn for_gradient(&self, gradient: Gradient, exact: &HostTensor) -> Tolerance {
        let values = exact.to_f64();
        let rms = (values.iter().map(|x| x * x).sum::<f64>() / values.len().max(1) as f64).sqrt();
        let relative = self.relative(gradient);
        Tolerance {
            max_abs: ELEMENT_SPREAD * relative * rms.max(f64::MIN_POSITIVE),
            rel_l2: relative,
        }
    }
}

/// The backward's tolerance table, keyed by the dtype and the input distribution.
///
/// Derived from the arithmetic below, and checked against PyTorch's own backward (cuDNN,
/// FlashAttention-2, efficient) on the device: judged with the rounding scales
/// ([`crate::backward_with_scales`]) from its own rounded O, as a kernel is judged, it stays well
/// inside every bound (evidence/calibration holds the run and its margins).
///
/// With `u` the unit roundoff of `dtype`, `a = 2⁻¹⁷` the f32 accumulation error of the forward's
/// table ([`crate::tolerance`]) and `δ` its logit error (LargeMagnitude only), a kernel that
/// computes in f32 and rounds its matmuls' operands to `dtype` errs by
///
/// * dV `= Pᵀ·dO`: P rounded to `dtype`, dV rounded, f32 accumulation, the weights' error:
///   `2u + a + δ`, the forward's own bound;
/// * dQ `= scale·dS·K`, dK `= scale·dSᵀ·Q`: dS rounded, the result rounded, f32 accumulation,
///   the weights' error, and one `u` more for `D_i = rowsum(dO ∘ O)` read from the rounded O,
///   whose error `dS = P ∘ (dP − D)` can amplify where `dP − D` cancels: `3u + a + δ`;
/// * the LSE, in f32 from logits accumulated in f32: `2a` relative, `2a + δ` absolute for
///   `|LSE| ≤ 1`.
///
/// ```
/// use attn_oracle::{backward_tolerance, tolerance, DType, Distribution};
/// let table = backward_tolerance(DType::F16, Distribution::Normal);
/// assert_eq!(table.dv, tolerance(DType::F16, Distribution::Normal).rel_l2);
/// assert!(table.dq > table.dv && table.dk == table.dq);
/// ```
pub fn backward_tolerance(dtype: DType, distribution: Distribution) -> BackwardTolerance {
    let u = dtype.unit_roundoff();
    let logit_error = match distribution {
        Distribution::LargeMagnitude => LARGE_LOGIT_ERROR,
        _ => 0.0,
    };
    let through_p = 2.0 * u + F32_ACCUMULATION + logit_error;
    BackwardTolerance {
        dq: through_p + u,
        dk: through_p + u,
        dv: through_p,
        lse: Tolerance {
            max_abs: 2.0 * F32_ACCUMULATION + logit_error,
            rel_l2: 2.0 * F32_ACCUMULATION,
        },
    }
}

/// Compares every element of a gradient `output` with the oracle's `exact` (same dims, any
/// element types), as [`crate::compare`] does an output: poison, NaN and Inf counted, each
/// element within [`Tolerance::element_bound`] or, where larger, `4·rel_l2` times its rounding
/// scale in `scales` ([`crate::backward_with_scales`], same dims), the relative L2 bound; with
/// scales the relative L2 error is the error's norm over that of max(|exact|, scale) element by
/// element (a gradient that cancels to ~0, dQ of peaky rows, is still rounded at its terms' size).
/// `worst` indexes `output`'s own dims. A dims mismatch (of `scales` too) is a failed verdict.
pub fn compare_gradient(
    output: &HostTensor,
    exact: &HostTensor,
    scales: Option<&HostTensor>,
    tolerance: &Tolerance,
) -> Verdict {
    let [b, h, s, d] = exact.dims;
    if let Some(scales) = scales.filter(|t| t.dims != exact.dims || t.check_len().is_err()) {
        let mut verdict = Verdict::unjudged(tolerance);
        verdict.reason = Some(format!(
            "rounding scales dims {:?} differ from the reference's {:?}",
            scales.dims, exact.dims
        ));
        return verdict;
    }
    let scales = scales.map(HostTensor::to_f64);
    let floor = scales
        .as_ref()
        .map(|scales| move |flat: usize| ELEMENT_SPREAD * tolerance.rel_l2 * scales[flat]);
    let size = scales
        .as_ref()
        .map(|scales| move |flat: usize| scales[flat]);
    // A stand-in for the forward's reference: every row of `exact`, read as [B, H, S, D] rows.
    let reference = Reference {
        shape: Shape {
            batch: b,
            heads: h,
            kv_heads: h,
            seq_q: s,
            seq_kv: s,
            head_dim: d,
        },
        params: Params::new(d.max(1), false),
        rows: (0..b * h * s)
            .map(|r| RowId {
                batch: r / (h * s),
                head: r / s % h,
                row: r % s,
            })
            .collect(),
        out: exact.to_f64(),
        lse: vec![],
    };
    compare_in(
        output,
        &reference,
        tolerance,
        &OutputLayout {
            dims: exact.dims,
            row_start: &|id| Some(((id.batch * h + id.head) * s + id.row) * d),
            index_of: &|flat| {
                [
                    flat / (h * s * d),
                    flat / (s * d) % h,
                    flat / d % s,
                    flat % d,
                ]
            },
            floor: floor.as_ref().map(|f| f as &dyn Fn(usize) -> f64),
            size: size.as_ref().map(|f| f as &dyn Fn(usize) -> f64),
        },
    )
}

/// Compares a kernel's LSE with the oracle's (`[B, H, S_q, 1]` or packed, same dims): a row that
/// sees no key must be −∞ exactly (+∞ or a finite value fails), any other row finite and within
/// [`Tolerance::element_bound`] of the oracle's, and the relative L2 bound holds over them.
pub fn compare_lse(output: &HostTensor, exact: &HostTensor, tolerance: &Tolerance) -> Verdict {
    let mut verdict = Verdict::unjudged(tolerance);
    if output.dims != exact.dims || output.check_len().is_err() || exact.check_len().is_err() {
        verdict.reason = Some(format!(
            "LSE dims {:?} differ from the reference's {:?}",
            output.dims, exact.dims
        ));
        return verdict;
    }
    let [_, h, s, d] = exact.dims;
    let index_of = |flat: usize| {
        [
            flat / (h * s * d),
            flat / (s * d) % h,
            flat / d % s,
            flat % d,
        ]
    };
    let (mut first_bad, mut worst, mut misplaced) = (None, None::<(usize, f64, f64)>, 0);
    let (mut error_sq, mut reference_sq) = (0.0, 0.0);
    for (flat, expected) in exact.to_f64().into_iter().enumerate() {
        verdict.compared += 1;
        if output.data.is_poison(flat) {
            verdict.poison_count += 1;
            first_bad.get_or_insert(flat);
            continue;
        }
        let actual = output.data.get_f64(flat);
        if expected == f64::NEG_INFINITY || actual == f64::NEG_INFINITY {
            if actual != expected {
                misplaced += 1;
                first_bad.get_or_insert(flat);
            }
            continue;
        }
        if !actual.is_finite() {
            if actual.is_nan() {
                verdict.nan_count += 1;
            } else {
                verdict.inf_count += 1;
            }
            first_bad.get_or_insert(flat);
            continue;
        }
        let error = (actual - expected).abs();
        verdict.max_abs = verdict.max_abs.max(error);
        if expected != 0.0 {
            verdict.max_rel = verdict.max_rel.max(error / expected.abs());
        }
        let excess = error / tolerance.element_bound(expected);
        if worst.is_none_or(|(.., w)| excess > w) {
            worst = Some((flat, error, excess));
        }
        error_sq += error * error;
        reference_sq += expected * expected;
    }
    verdict.rel_l2 = error_sq.sqrt() / reference_sq.sqrt().max(f64::MIN_POSITIVE);
    if let Some(flat) = first_bad.or(worst.map(|(flat, ..)| flat)) {
        verdict.worst = index_of(flat);
    }
    let at = verdict.worst;
    verdict.reason = if verdict.poison_count > 0 {
        Some(format!(
            "{} LSE element(s) never written (still poison), first at {at:?}",
            verdict.poison_count
        ))
    } else if misplaced > 0 {
        Some(format!(
            "{misplaced} LSE element(s) where exactly one of kernel and reference is -inf (a row that sees no key is -inf, no other), first at {at:?}"
        ))
    } else if verdict.nan_count + verdict.inf_count > 0 {
        Some(format!(
            "{} NaN and {} Inf LSE element(s) in rows that see keys, first at {at:?}",
            verdict.nan_count, verdict.inf_count
        ))
    } else if let Some((_, error, excess)) = worst.filter(|(.., excess)| *excess > 1.0) {
        Some(format!(
            "LSE error {error:.3e} at {at:?} exceeds {:.3e} (its bound)",
            error / excess
        ))
    } else if verdict.rel_l2 > tolerance.rel_l2 {
        Some(format!(
            "LSE relative L2 error {:.3e} exceeds {:.3e}",
            verdict.rel_l2, tolerance.rel_l2
        ))
    } else {
        None
    };
    verdict.passed = verdict.reason.is_none();
    verdict
}
