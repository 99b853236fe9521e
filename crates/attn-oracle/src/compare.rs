//! Judging an output against the reference: error metrics, the one tolerance table, the verdict.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{DType, Distribution, HostTensor, Reference, RowId};

/// Bounds an output must meet against the f64 reference. Get them from [`tolerance`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// Largest allowed `|output − reference|` of an element whose reference is at most the
    /// table's magnitude `M` (see [`tolerance`]); a larger reference `r` allows `rel_l2·|r|`.
    pub max_abs: f64,
    /// Largest allowed `‖output − reference‖₂ / ‖reference‖₂` over the compared elements.
    pub rel_l2: f64,
}

impl Tolerance {
    /// How far an element whose reference is `reference` may be off: `max_abs`, or `rel_l2` of a
    /// reference above the table's magnitude (see [`tolerance`]).
    pub fn element_bound(&self, reference: f64) -> f64 {
        self.max_abs.max(self.rel_l2 * reference.abs())
    }
}

/// Relative error of f32 accumulation over up to 16384 terms: rounding errors of a long sum grow
/// like `√n·2⁻²⁴` in practice, and `√16384·2⁻²⁴ = 2⁻¹⁷ ≈ 7.6e-6`. Every kernel accumulates in f32.
pub(crate) const F32_ACCUMULATION: f64 = 1.0 / 131_072.0;

/// Relative error allowance of the softmax weights when logits are ≈ 150 (LargeMagnitude): a
/// logit accumulated in f32 over D products carries an error of about `√D·2⁻²⁴·150 ≈ 1e-4` for
/// D = 128 (1.4e-4 for D = 256); an error δ in a logit scales its weight by `e^δ ≈ 1 + δ`.
/// 4e-4 leaves a margin of about 3.
pub(crate) const LARGE_LOGIT_ERROR: f64 = 4e-4;

/// The one tolerance table, keyed by the output dtype and the input distribution.
///
/// With `u` the unit roundoff of `dtype` (fp16 2⁻¹¹ ≈ 4.9e-4, half its ulp of 9.8e-4 at 1;
/// bf16 2⁻⁸ ≈ 3.9e-3, half of 7.8e-3; f32 2⁻²⁴), an output element `o = Σ p_j·v_j / l` of a
/// kernel that accumulates in f32 differs from the exact value by at most
///
/// * rounding `o` to `dtype`: `u·2^e` for `|o|` in `[2^e, 2^(e+1))`, so `≤ u·M` while `|o| < 2M`;
/// * rounding each `p_j` to `dtype` before `P·V`: `≤ u·Σ p_j|v_j| / l`, a weighted mean of `|v|`,
///   `≤ u·M` while that mean is `≤ M`;
/// * f32 accumulation, `a = 2⁻¹⁷` relative (see above), and for large logits an error `δ` of
///   each weight.
///
/// So `max_abs = M·(2u + a + δ)` and `rel_l2 = 2u + a + δ` (the root-mean-square relative error of
/// two roundings is below `2u`), where
///
/// * `M = 2` for Normal, Uniform, ConstantRows and Distinct: |v| ≤ 2 for Distinct and Uniform,
///   and for N(0,1) values a softmax-weighted average is below 2 except in rows that see few keys
///   (a window of 1 or 2, tiny `S_kv`), where it is nearly one value and can reach 4 to 5.6.
///   fp16 gives `2·(2·2⁻¹¹ + 2⁻¹⁷) = 1.97e-3`, within the seeds' bar of 2e-3.
/// * `M = 4` for Peaky and LargeMagnitude: the output is (nearly) one value `v_j ~ N(0,1)`, which
///   can reach 4 to 5.6 in large tensors; rounding in `[4, 8)` costs `4u`.
/// * `δ = 4e-4` for LargeMagnitude (logits ≈ 150, see `LARGE_LOGIT_ERROR`), else 0.
///
/// An element whose reference `r` is larger than `M` breaks the first premise; the same sum with
/// `|r|` for `M` bounds it: [`compare`] allows each element [`Tolerance::element_bound`],
/// `max(max_abs, rel_l2·|r|)` (rounding
/// to fp16 at 4.14 alone costs `4u = 1.95e-3`, the whole of fp16's Normal `max_abs`).
///
/// f32 outputs have `u = 2⁻²⁴`, so their bound is accumulation-dominated (1.6e-5 for Normal).
/// The bounds follow from the arithmetic; they were not tuned to make any kernel pass.
///
/// ```
/// use attn_oracle::{tolerance, DType, Distribution};
/// assert!(tolerance(DType::F16, Distribution::Normal).max_abs <= 2e-3);
/// assert!(tolerance(DType::Bf16, Distribution::Normal).max_abs > 7.8e-3);
/// ```
pub fn tolerance(dtype: DType, distribution: Distribution) -> Tolerance {
    let u = dtype.unit_roundoff();
    let (magnitude, logit_error) = match distribution {
        Distribution::Normal
        | Distribution::Uniform
        | Distribution::ConstantRows
        | Distribution::Distinct => (2.0, 0.0),
        Distribution::SmallVariance => (2.0 * Distribution::SmallVariance.value_scale(), 0.0),
        Distribution::Peaky => (4.0, 0.0),
        Distribution::LargeMagnitude => (4.0, LARGE_LOGIT_ERROR),
    };
    let relative = 2.0 * u + F32_ACCUMULATION + logit_error;
    Tolerance {
        max_abs: magnitude * relative,
        rel_l2: relative,
    }
}

/// The result of [`compare`]: metrics over the compared elements, counts of bad values, and
/// whether the output passes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// True when nothing is NaN, Inf or poison, every element is within its bound, and the
    /// relative L2 bound holds.
    pub passed: bool,
    /// Largest `|output − reference|` over compared elements with a finite output.
    pub max_abs: f64,
    /// Largest `|output − reference| / |reference|` over compared finite elements with a non-zero
    /// reference. Diagnostic only: near-zero references make it large for correct outputs.
    pub max_rel: f64,
    /// `‖output − reference‖₂ / ‖reference‖₂` over compared finite elements (the denominator is
    /// floored at the smallest positive f64, so this stays finite).
    pub rel_l2: f64,
    /// `[b, h, s, d]` of the worst element: the first poisoned element if any, else the first
    /// NaN/Inf among compared elements, else the element with the largest error relative to its
    /// own bound (the table's `max_abs`, or `rel_l2` of a larger reference element).
    pub worst: [usize; 4],
    /// Compared elements that are NaN but not the poison pattern.
    pub nan_count: usize,
    /// Compared elements that are ±Inf.
    pub inf_count: usize,
    /// Elements of the whole output (compared or not) still holding the poison bit pattern.
    pub poison_count: usize,
    /// Number of elements compared (`rows × D` of the reference).
    pub compared: usize,
    /// The bounds applied.
    pub tolerance: Tolerance,
    /// Why it failed, in one line; `None` when it passed.
    pub reason: Option<String>,
}

impl Verdict {
    /// A verdict before any element is compared: failing, every count zero.
    pub(crate) fn unjudged(tolerance: &Tolerance) -> Verdict {
        Verdict {
            passed: false,
            max_abs: 0.0,
            max_rel: 0.0,
            rel_l2: 0.0,
            worst: [0; 4],
            nan_count: 0,
            inf_count: 0,
            poison_count: 0,
            compared: 0,
            tolerance: *tolerance,
            reason: None,
        }
    }
}

/// `PASS`/`FAIL`, the metrics, the counts and the reason, on one line.
impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} max_abs={:.3e} (≤ {:.3e}) rel_l2={:.3e} (≤ {:.3e}) max_rel={:.3e} worst={:?} \
             nan={} inf={} poison={} compared={}",
            if self.passed { "PASS" } else { "FAIL" },
            self.max_abs,
            self.tolerance.max_abs,
            self.rel_l2,
            self.tolerance.rel_l2,
            self.max_rel,
            self.worst,
            self.nan_count,
            self.inf_count,
            self.poison_count,
            self.compared,
        )?;
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

/// Compares every element the reference computed; counts poison over ALL elements of `output`.
///
/// `output` must be `[B, H, S_q, D]` of the reference's shape, in any element type (f64 too, which
/// has no poison pattern). A shape or length mismatch is a failed verdict, not an error, so that
/// a gate can report it like any other failure.
///
/// ```
/// use attn_oracle::*;
/// let spec = CaseSpec { shape: "1,1,8,4".parse()?, dtype: DType::F16,
///                       distribution: Distribution::Normal, seed: 1 };
/// let inputs = generate(&spec);
/// let params = Params::new(4, false);
/// let exact = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All)?;
/// let tol = tolerance(DType::F16, Distribution::Normal);
///
/// let good = HostTensor::from_f64([1, 1, 8, 4], DType::F16, &exact.out);
/// assert!(compare(&good, &exact, &tol).passed);
///
/// let mut unwritten = good.clone();
/// if let HostData::F16(values) = &mut unwritten.data {
///     values[5] = half::f16::from_bits(POISON_F16_BITS);
/// }
/// let verdict = compare(&unwritten, &exact, &tol);
/// assert!(!verdict.passed);
/// assert_eq!((verdict.poison_count, verdict.worst), (1, [0, 0, 1, 1]));
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn compare(output: &HostTensor, reference: &Reference, tolerance: &Tolerance) -> Verdict {
    let shape = reference.shape;
    let [_, h, s, d] = shape.q_dims();
    compare_in(
        output,
        reference,
        tolerance,
        &OutputLayout {
            dims: shape.q_dims(),
            row_start: &|id| {
                (id.batch < shape.batch && id.head < h && id.row < s)
                    .then(|| ((id.batch * h + id.head) * s + id.row) * d)
            },
            index_of: &|flat| {
                [
                    flat / (h * s * d),
                    flat / (s * d) % h,
                    flat / d % s,
                    flat % d,
                ]
            },
            floor: None,
            size: None,
        },
    )
}

/// Where a reference's rows sit in an output: dense `[B, H, S_q, D]`, or packed (varlen).
pub(crate) struct OutputLayout<'a> {
    /// The output's dims.
    pub dims: [usize; 4],
    /// The element offset of a reference row in the output; `None` for a row outside it.
    pub row_start: &'a dyn Fn(&RowId) -> Option<usize>,
    /// The index a verdict reports for an element offset (`worst`).
    pub index_of: &'a dyn Fn(usize) -> [usize; 4],
    /// An element's own least bound by its offset, above [`Tolerance::element_bound`] where
    /// larger (a gradient's rounding scale); `None` for none.
    pub floor: Option<&'a dyn Fn(usize) -> f64>,
    /// An element's size for the relative L2 error where it exceeds the element itself (a
    /// gradient's rounding scale: where the exact gradient cancels to ~0 its rounding does not);
    /// `None` for the element.
    pub size: Option<&'a dyn Fn(usize) -> f64>,
}

/// [`compare`] with the reference's rows placed in `output` by `layout`.
pub(crate) fn compare_in(
    output: &HostTensor,
    reference: &Reference,
    tolerance: &Tolerance,
    layout: &OutputLayout<'_>,
) -> Verdict {
    let mut verdict = Verdict::unjudged(tolerance);
    let shape = reference.shape;
    let dims = layout.dims;
    if output.dims != dims {
        verdict.reason = Some(format!(
            "output dims {:?} differ from the reference's {dims:?}",
            output.dims
        ));
        return verdict;
    }
    if let Err(error) = output.check_len() {
        verdict.reason = Some(error.to_string());
        return verdict;
    }
    let starts: Option<Vec<usize>> = reference.rows.iter().map(layout.row_start).collect();
    let Some(starts) =
        starts.filter(|_| reference.out.len() == reference.rows.len() * shape.head_dim)
    else {
        verdict.reason = Some("malformed reference: rows and out do not fit its shape".to_owned());
        return verdict;
    };
    let index_of = layout.index_of;

    let first_poison = (0..output.len()).find(|&i| output.data.is_poison(i));
    if let Some(first) = first_poison {
        verdict.poison_count = (first..output.len())
            .filter(|&i| output.data.is_poison(i))
            .count();
    }

    let mut first_non_finite = None;
    let mut worst_error = None;
    let (mut error_sq, mut reference_sq) = (0.0, 0.0);
    for (index, &row_start) in starts.iter().enumerate() {
        for (col, &expected) in reference.out_row(index).iter().enumerate() {
            let flat = row_start + col;
            verdict.compared += 1;
            if output.data.is_poison(flat) {
                continue; // counted above
            }
            let actual = output.data.get_f64(flat);
            if !actual.is_finite() {
                if actual.is_nan() {
                    verdict.nan_count += 1;
                } else {
                    verdict.inf_count += 1;
                }
                first_non_finite.get_or_insert(flat);
                continue;
            }
            let error = (actual - expected).abs();
            verdict.max_abs = verdict.max_abs.max(error);
            let bound = tolerance.element_bound(expected);
            let bound = layout.floor.map_or(bound, |floor| bound.max(floor(flat)));
            let excess = error / bound;
            if worst_error.is_none_or(|(_, _, worst)| excess > worst) {
                worst_error = Some((flat, error, excess));
            }
            if expected != 0.0 {
                verdict.max_rel = verdict.max_rel.max(error / expected.abs());
            }
            error_sq += error * error;
            let size = layout
                .size
                .map_or(expected.abs(), |size| expected.abs().max(size(flat)));
            reference_sq += size * size;
        }
    }
    verdict.rel_l2 = error_sq.sqrt() / reference_sq.sqrt().max(f64::MIN_POSITIVE);
    let worst_flat = worst_error.map(|(flat, ..)| flat);
    if let Some(flat) = first_poison.or(first_non_finite).or(worst_flat) {
        verdict.worst = index_of(flat);
    }

    let at = |v: &Verdict| format!("{:?}", v.worst);
    verdict.reason = if verdict.poison_count > 0 {
        Some(format!(
            "{} element(s) never written (still poison), first at {}",
            verdict.poison_count,
            at(&verdict)
        ))
    } else if verdict.nan_count + verdict.inf_count > 0 {
        Some(format!(
            "{} NaN and {} Inf element(s), first at {}",
            verdict.nan_count,
            verdict.inf_count,
            at(&verdict)
        ))
    } else if verdict.compared == 0 {
        Some("the reference has no rows to compare".to_owned())
    } else if let Some((_, error, excess)) = worst_error.filter(|(.., excess)| *excess > 1.0) {
        Some(format!(
            "max abs error {error:.3e} at {} exceeds {:.3e} (its bound)",
            at(&verdict),
            error / excess
        ))
    } else if verdict.rel_l2 > tolerance.rel_l2 {
        Some(format!(
            "relative L2 error {:.3e} exceeds {:.3e}",
            verdict.rel_l2, tolerance.rel_l2
        ))
    } else {
        None
    };
    verdict.passed = verdict.reason.is_none();
    verdict
}
