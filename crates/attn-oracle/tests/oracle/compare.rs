//! `compare` catches what it must (unwritten, NaN, Inf, transposed, wrong scale) and the tolerance
//! table has the documented bounds.

use attn_oracle::{
    compare, reference, tolerance, DType, Distribution, HostData, HostTensor, Params, Reference,
    RowSelection, Verdict, POISON_F16_BITS,
};
use half::f16;

use crate::case;

/// A reference and its output rounded to fp16: what a perfect fp16 kernel would write.
fn perfect_fp16(
    shape: &str,
    distribution: Distribution,
    params: impl Fn(usize) -> Params,
) -> (Reference, HostTensor) {
    let inputs = case(shape, DType::F16, distribution, 4);
    let params = params(inputs.spec.shape.head_dim);
    let exact = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
    let output = exact.to_tensor().unwrap().to_dtype(DType::F16);
    (exact, output)
}

fn fp16_values(tensor: &mut HostTensor) -> &mut Vec<f16> {
    match &mut tensor.data {
        HostData::F16(values) => values,
        _ => unreachable!("the test made an fp16 tensor"),
    }
}

fn judge(output: &HostTensor, exact: &Reference) -> Verdict {
    compare(output, exact, &tolerance(DType::F16, Distribution::Normal))
}

#[test]
fn a_perfect_output_passes() {
    let (exact, output) = perfect_fp16("2,2,33,17,16", Distribution::Normal, |d| {
        Params::new(d, true)
    });
    let verdict = judge(&output, &exact);
    assert!(verdict.passed, "{verdict}");
    assert_eq!(verdict.compared, 2 * 2 * 33 * 16);
    // Only the output rounding remains: half an fp16 ulp of the largest output at most.
    let largest = exact.out.iter().fold(0f64, |m, x| m.max(x.abs()));
    let half_ulp = 2f64.powi(-11) * 2f64.powf(largest.log2().floor());
    assert!(
        verdict.max_abs > 0.0 && verdict.max_abs <= half_ulp,
        "{verdict}"
    );
    assert_eq!(verdict.reason, None);
}

#[test]
fn an_unwritten_element_fails_even_where_the_reference_is_zero() {
    // S_q > S_kv under the causal mask: row 0 sees no key, so its reference output is 0.
    let (exact, mut output) =
        perfect_fp16("1,2,9,5,8", Distribution::Normal, |d| Params::new(d, true));
    assert_eq!(exact.out_row(0), &[0.0; 8]);
    fp16_values(&mut output)[8 * 9 + 3] = f16::from_bits(POISON_F16_BITS); // head 1, row 0, d 3
    let verdict = judge(&output, &exact);
    assert!(!verdict.passed);
    assert_eq!((verdict.poison_count, verdict.nan_count), (1, 0));
    assert_eq!(verdict.worst, [0, 1, 0, 3]);
    assert!(verdict.reason.unwrap().contains("never written"));

    let untouched = HostTensor::poisoned(output.dims, DType::F16);
    let verdict = judge(&untouched, &exact);
    assert_eq!(verdict.poison_count, 2 * 9 * 8);
    assert!(!verdict.passed);
}

#[test]
fn poison_outside_the_sampled_rows_still_fails() {
    let inputs = case("1,1,40,8", DType::F16, Distribution::Normal, 4);
    let params = Params::new(8, false);
    let rows = RowSelection::Sampled {
        rows_per_head: 3,
        seed: 0,
    };
    let sampled = reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows).unwrap();
    let full = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
    let mut output = full.to_tensor().unwrap().to_dtype(DType::F16);
    let unsampled = (0..40)
        .find(|r| sampled.rows.iter().all(|id| id.row != *r))
        .unwrap();
    fp16_values(&mut output)[unsampled * 8] = f16::from_bits(POISON_F16_BITS);
    let verdict = judge(&output, &sampled);
    assert_eq!(
        (verdict.passed, verdict.poison_count, verdict.compared),
        (false, 1, 3 * 8)
    );
    assert_eq!(verdict.worst, [0, 0, unsampled, 0]);
}

#[test]
fn nan_and_inf_fail() {
    let (exact, output) = perfect_fp16("1,1,16,8", Distribution::Normal, |d| Params::new(d, false));
    for (bad, nan, inf) in [
        (f16::NAN, 1, 0),
        (f16::INFINITY, 0, 1),
        (f16::NEG_INFINITY, 0, 1),
    ] {
        let mut broken = output.clone();
        fp16_values(&mut broken)[37] = bad;
        let verdict = judge(&broken, &exact);
        assert!(!verdict.passed, "{bad} passed");
        assert_eq!(
            (verdict.nan_count, verdict.inf_count, verdict.poison_count),
            (nan, inf, 0)
        );
        assert_eq!(verdict.worst, [0, 0, 4, 5]);
        assert!(verdict.max_abs.is_finite() && verdict.rel_l2.is_finite());
    }
}

#[test]
fn a_transposed_output_fails() {
    // S_q = D, so swapping the last two axes keeps the dims; Distinct inputs make every value differ.
    let (exact, output) = perfect_fp16("1,2,16,16", Distribution::Distinct, |d| {
        Params::new(d, false)
    });
    let values = output.to_f64();
    let mut transposed = values.clone();
    for h in 0..2 {
        for s in 0..16 {
            for d in 0..16 {
                transposed[(h * 16 + s) * 16 + d] = values[(h * 16 + d) * 16 + s];
            }
        }
    }
    let verdict = judge(
        &HostTensor::from_f64(output.dims, DType::F16, &transposed),
        &exact,
    );
    assert!(!verdict.passed, "{verdict}");
    assert!(verdict.reason.unwrap().contains("max abs error"));

    // Heads swapped: the dims match too.
    let mut heads_swapped = values[256..].to_vec();
    heads_swapped.extend_from_slice(&values[..256]);
    let verdict = judge(
        &HostTensor::from_f64(output.dims, DType::F16, &heads_swapped),
        &exact,
    );
    assert!(!verdict.passed, "{verdict}");
}

#[test]
fn a_wrong_scale_fails() {
    let inputs = case("1,2,64,64", DType::F16, Distribution::Normal, 8);
    let params = Params::new(64, false);
    let exact = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
    // Kernels that forget the scale, use 1/D, or apply log2(e) twice.
    for wrong in [1.0, 1.0 / 64.0, params.scale * std::f64::consts::LOG2_E] {
        let kernel = reference(
            &inputs.q,
            &inputs.k,
            &inputs.v,
            &params.with_scale(wrong),
            &RowSelection::All,
        )
        .unwrap();
        let output = kernel.to_tensor().unwrap().to_dtype(DType::F16);
        let verdict = judge(&output, &exact);
        assert!(!verdict.passed, "scale {wrong}: {verdict}");
    }
}

#[test]
fn wrong_dims_fail_with_a_reason() {
    let (exact, output) = perfect_fp16("1,1,16,8", Distribution::Normal, |d| Params::new(d, false));
    let reshaped = HostTensor {
        dims: [1, 1, 8, 16],
        ..output.clone()
    };
    let verdict = judge(&reshaped, &exact);
    assert!(!verdict.passed);
    assert!(verdict.reason.unwrap().contains("[1, 1, 8, 16]"));
    let truncated = HostTensor {
        dims: output.dims,
        data: HostData::F16(vec![f16::ZERO; 3]),
    };
    assert!(!judge(&truncated, &exact).passed);
}

#[test]
fn verdicts_serialise_and_print_on_one_line() {
    let (exact, output) = perfect_fp16("1,1,16,8", Distribution::Normal, |d| Params::new(d, false));
    let verdict = judge(&HostTensor::poisoned(output.dims, DType::F16), &exact);
    let json = serde_json::to_string(&verdict).unwrap();
    let back: Verdict = serde_json::from_str(&json).unwrap();
    assert_eq!(back, verdict);
    let line = verdict.to_string();
    assert!(line.starts_with("FAIL") && line.contains("poison=128") && !line.contains('\n'));
}

#[test]
fn the_tolerance_table_has_the_documented_bounds() {
    let fp16 = tolerance(DType::F16, Distribution::Normal);
    assert!(
        fp16.max_abs <= 2e-3 && fp16.max_abs > 1.9e-3,
        "the seeds' bar: {fp16:?}"
    );
    for distribution in Distribution::ALL {
        let [f16_tol, bf16_tol, f32_tol] = DType::ALL.map(|dtype| tolerance(dtype, distribution));
        assert!(f32_tol.max_abs < f16_tol.max_abs && f16_tol.max_abs < bf16_tol.max_abs);
        for t in [f16_tol, bf16_tol, f32_tol] {
            assert!(t.max_abs > 0.0 && t.rel_l2 > 0.0 && t.max_abs.is_finite());
            // Bounds scale with the values' magnitude (small-variance inputs: σ = 1/16).
            assert!(
                t.max_abs >= fp16.max_abs * distribution.value_scale() || t == f32_tol,
                "{distribution}: {t:?}"
            );
        }
    }
    // bf16 pays its 8x coarser rounding; large logits pay their f32 logit error.
    let bf16 = tolerance(DType::Bf16, Distribution::Normal);
    assert!((bf16.max_abs / fp16.max_abs - 8.0).abs() < 0.1);
    assert!(
        tolerance(DType::F16, Distribution::LargeMagnitude).max_abs
            > tolerance(DType::F16, Distribution::Peaky).max_abs
    );
}

/// An element whose reference lies above the table's magnitude M (2 for Normal: a row that sees
/// one or two keys is nearly one value, up to 4 or 5) is allowed `rel_l2` of itself: rounding to
/// fp16 at 4.14 alone costs 4u = 1.95e-3, fp16's whole Normal `max_abs` of 1.968e-3. An element
/// below M keeps the table's bound, and one above it fails past its own.
#[test]
fn an_element_above_the_tables_magnitude_is_allowed_its_relative_error() {
    let (exact, output) = perfect_fp16("1,1,4,16", Distribution::Normal, |d| Params::new(d, false));
    let tol = tolerance(DType::F16, Distribution::Normal);
    let passes = |reference_value: f64, error: f64| {
        let mut exact = exact.clone();
        exact.out[5] = reference_value;
        let mut values = exact.out.clone();
        values[5] += error;
        let verdict = compare(
            &HostTensor::from_f64(output.dims, DType::F32, &values),
            &exact,
            &tol,
        );
        if !verdict.passed {
            let reason = verdict.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("max abs error"), "{reason}");
            assert_eq!(verdict.worst, [0, 0, 0, 5], "{verdict}");
        }
        verdict.passed
    };
    let rounding_at = |value: f64| value - f64::from(f16::from_f64(value));
    assert!(rounding_at(4.14).abs() < tol.max_abs);
    for (reference_value, error, expected) in [
        (4.14, 1.979e-3, true),
        (-4.482, -1.969e-3, true),
        (4.14, 1.05 * tol.rel_l2 * 4.14, false),
        (0.5, 1.979e-3, false),
        (1.9, 1.01 * tol.max_abs, false),
    ] {
        assert_eq!(
            passes(reference_value, error),
            expected,
            "reference {reference_value}, error {error:e}"
        );
    }
}
