use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, StandardNormal};

use super::*;
use crate::{
    backward_tolerance, compare_gradient, compare_lse, generate_varlen, reference_varlen, CaseSpec,
    DType, Distribution, Packed, Varlen, VarlenTensors, Window,
};

/// An f64 tensor of N(0, 1) values drawn from `seed`.
fn random(dims: [usize; 4], seed: u64) -> HostTensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let values = (0..dims.iter().product())
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    HostTensor {
        dims,
        data: HostData::F64(values),
    }
}

/// Random Q, K, V and dO of a shape.
fn inputs(shape: &Shape, seed: u64) -> [HostTensor; 4] {
    [
        random(shape.q_dims(), seed),
        random(shape.kv_dims(), seed + 1),
        random(shape.kv_dims(), seed + 2),
        random(shape.q_dims(), seed + 3),
    ]
}

fn shape(b: usize, h: usize, h_kv: usize, sq: usize, skv: usize, d: usize) -> Shape {
    Shape::new(b, h, sq, skv, d)
        .and_then(|s| s.with_kv_heads(h_kv))
        .unwrap()
}

fn values(t: &HostTensor) -> Vec<f64> {
    t.to_f64()
}

/// `L = Σ dO ∘ O(Q, K, V)` in f64.
fn loss(q: &HostTensor, k: &HostTensor, v: &HostTensor, d_o: &[f64], params: &Params) -> f64 {
    let out = reference(q, k, v, params, &RowSelection::All).unwrap().out;
    out.iter().zip(d_o).map(|(o, g)| o * g).sum()
}

/// The gradient of [`loss`] in input `which` (0 Q, 1 K, 2 V) by central differences.
fn finite_difference(tensors: &[HostTensor; 4], which: usize, params: &Params) -> Vec<f64> {
    let step = 1e-5;
    let d_o = values(&tensors[3]);
    let base = values(&tensors[which]);
    (0..base.len())
        .map(|i| {
            let at = |delta: f64| {
                let mut moved = tensors.clone();
                let mut x = base.clone();
                x[i] += delta;
                moved[which].data = HostData::F64(x);
                loss(&moved[0], &moved[1], &moved[2], &d_o, params)
            };
            (at(step) - at(-step)) / (2.0 * step)
        })
        .collect()
}

/// The largest `|a − b|` over the largest `|b|` (at least 1).
fn relative_gap(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

#[test]
fn finite_differences_match_every_gradient() {
    let window = |left, right| Window {
        left: Some(left),
        right: Some(right),
    };
    let cases = [
        (shape(1, 2, 2, 5, 5, 4), Params::new(4, false)),
        (shape(2, 2, 1, 7, 4, 8), Params::new(8, true)),
        (shape(1, 2, 1, 3, 9, 6), Params::new(6, true)),
        (
            shape(1, 2, 2, 9, 9, 5),
            Params::new(5, false).with_window(window(2, 1)),
        ),
        (shape(2, 2, 1, 1, 1, 4), Params::new(4, false)),
        (
            shape(1, 2, 2, 6, 3, 4),
            Params::new(4, true).with_window(window(1, 0)),
        ),
        (
            shape(2, 2, 1, 4, 7, 8),
            Params::new(8, false).with_scale(0.7),
        ),
    ];
    for (seed, (shape, params)) in cases.into_iter().enumerate() {
        let tensors = inputs(&shape, 10 * seed as u64);
        let [q, k, v, d_o] = &tensors;
        let exact = backward_exact(q, k, v, d_o, &params).unwrap();
        let forward = forward_with_lse(q, k, v, &params).unwrap();
        let given = backward(q, k, v, &forward.out, d_o, &forward.lse, &params).unwrap();
        assert_eq!(exact, given, "{shape}");
        for (which, grad) in [(0, &exact.dq), (1, &exact.dk), (2, &exact.dv)] {
            let numeric = finite_difference(&tensors, which, &params);
            let gap = relative_gap(&numeric, &values(grad));
            assert!(
                gap < 1e-7,
                "{shape} {params:?} input {which}: gap {gap:.2e}"
            );
        }
    }
}

#[test]
fn one_key_gives_dv_equal_to_do_and_no_dq_or_dk() {
    let shape = shape(1, 2, 1, 1, 1, 4);
    let [q, k, v, d_o] = inputs(&shape, 3);
    let grads = backward_exact(&q, &k, &v, &d_o, &Params::new(4, false)).unwrap();
    // dV sums both query heads' dO (one K/V head); P = 1, so dS = dO·v − dO·v = 0.
    let d_o = values(&d_o);
    let summed: Vec<f64> = (0..4).map(|i| d_o[i] + d_o[4 + i]).collect();
    assert!(relative_gap(&values(&grads.dv), &summed) < 1e-15);
    assert!(values(&grads.dq).iter().all(|g| g.abs() < 1e-15));
    assert!(values(&grads.dk).iter().all(|g| g.abs() < 1e-15));
}

#[test]
fn two_keys_match_the_formula_by_hand() {
    // Logits 0 and ln 3 (q = 1, scale 1): P = [1/4, 3/4]; v = [2, 6], O = 5; dO = 1.
    // dS = P ∘ (v − O) = [−3/4, 3/4]; dQ = Σ dS·k = 3/4·ln 3; dK = dS·q; dV = P·dO.
    let t = |dims, x: &[f64]| HostTensor::from_f64(dims, DType::F32, x);
    let q = t([1, 1, 1, 1], &[1.0]);
    let k = HostTensor {
        dims: [1, 1, 2, 1],
        data: HostData::F64(vec![0.0, 3f64.ln()]),
    };
    let v = t([1, 1, 2, 1], &[2.0, 6.0]);
    let d_o = t([1, 1, 1, 1], &[1.0]);
    let grads = backward_exact(&q, &k, &v, &d_o, &Params::new(1, false)).unwrap();
    let close = |got: Vec<f64>, want: &[f64]| relative_gap(&got, want) < 1e-14;
    assert!(close(values(&grads.dq), &[0.75 * 3f64.ln()]));
    assert!(close(values(&grads.dk), &[-0.75, 0.75]));
    assert!(close(values(&grads.dv), &[0.25, 0.75]));
}

#[test]
fn rows_that_see_no_key_give_zero_dq_and_add_nothing() {
    // Causal, 6 queries over 3 keys: rows 0 to 2 see no key (row i sees keys j ≤ i − 3).
    let shape = shape(1, 2, 1, 6, 3, 4);
    let params = Params::new(4, true);
    let [q, k, v, d_o] = inputs(&shape, 21);
    let forward = forward_with_lse(&q, &k, &v, &params).unwrap();
    let grads = backward(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params).unwrap();
    let masked = |flat: usize| flat / 4 % 6 < 3;
    let dq = values(&grads.dq);
    assert!(dq.iter().enumerate().all(|(i, g)| !masked(i) || *g == 0.0));
    assert!(dq.iter().enumerate().any(|(i, g)| !masked(i) && *g != 0.0));
    // Garbage in the masked rows' Q, O, dO and LSE changes nothing.
    let garbage = |t: &HostTensor, seed| {
        let noise = values(&random(t.dims, seed));
        let x = values(t).into_iter().zip(noise).enumerate();
        let x = x.map(|(i, (x, n))| if masked(i) { 1e3 * n } else { x });
        HostTensor {
            dims: t.dims,
            data: HostData::F64(x.collect()),
        }
    };
    let mut lse = values(&forward.lse);
    lse[..3].copy_from_slice(&[f64::INFINITY, f64::NAN, 0.0]);
    let lse = HostTensor {
        dims: forward.lse.dims,
        data: HostData::F64(lse),
    };
    let (q2, o2, d_o2) = (garbage(&q, 1), garbage(&forward.out, 2), garbage(&d_o, 3));
    let again = backward(&q2, &k, &v, &o2, &d_o2, &lse, &params).unwrap();
    assert_eq!(again, grads);
    // A row that sees a key needs a finite LSE: row 3 of head 1.
    let mut bad = values(&forward.lse);
    bad[6 + 3] = f64::NEG_INFINITY;
    let bad = HostTensor {
        dims: forward.lse.dims,
        data: HostData::F64(bad),
    };
    let error = backward(&q, &k, &v, &forward.out, &d_o, &bad, &params).unwrap_err();
    assert!(matches!(error, OracleError::InvalidLse { .. }), "{error}");
    assert!(error.to_string().contains("head 1, row 3"), "{error}");
}

#[test]
fn grouped_gradients_are_sums_of_multi_head_gradients_with_kv_repeated() {
    for (kv_heads, params) in [(1, Params::new(4, true)), (2, Params::new(4, false))] {
        let gqa = shape(2, 4, kv_heads, 5, 7, 4);
        let [q, k, v, d_o] = inputs(&gqa, 31);
        let group = gqa.group();
        // K/V head `h / group` repeated for every query head h.
        let repeat = |t: &HostTensor| {
            let x = values(t);
            let slab = 7 * 4;
            let mut out = Vec::with_capacity(2 * 4 * slab);
            for b in 0..2 {
                for h in 0..4 {
                    let from = (b * kv_heads + h / group) * slab;
                    out.extend_from_slice(&x[from..from + slab]);
                }
            }
            HostTensor {
                dims: [2, 4, 7, 4],
                data: HostData::F64(out),
            }
        };
        let grouped = backward_exact(&q, &k, &v, &d_o, &params).unwrap();
        let mha = backward_exact(&q, &repeat(&k), &repeat(&v), &d_o, &params).unwrap();
        assert!(relative_gap(&values(&grouped.dq), &values(&mha.dq)) < 1e-14);
        for (summed, per_head) in [(&grouped.dk, &mha.dk), (&grouped.dv, &mha.dv)] {
            let per_head = values(per_head);
            let slab = 7 * 4;
            let mut want = vec![0.0; 2 * kv_heads * slab];
            for (i, x) in per_head.iter().enumerate() {
                let (b, h, at) = (i / (4 * slab), i / slab % 4, i % slab);
                want[(b * kv_heads + h / group) * slab + at] += x;
            }
            assert_eq!(summed.dims, [2, kv_heads, 7, 4]);
            assert!(
                relative_gap(&values(summed), &want) < 1e-14,
                "H_kv {kv_heads}"
            );
        }
    }
}

#[test]
fn varlen_with_empty_sequences_is_each_sequence_dense() {
    let varlen = Varlen::new(vec![3, 0, 4, 2, 0, 5], vec![3, 4, 0, 5, 0, 2]).unwrap();
    let per_head = shape(1, 2, 1, 1, 1, 4);
    let spec = CaseSpec {
        shape: per_head,
        dtype: DType::F32,
        distribution: Distribution::Normal,
        seed: 5,
    };
    let packed = generate_varlen(&spec, &varlen);
    let (q, k, v) = (&packed.q, &packed.k, &packed.v);
    let d_o = random(q.dims, 77);
    let params = Params::new(4, true).with_window(Window {
        left: Some(2),
        right: None,
    });
    let forward = forward_varlen(q, k, v, &params, &varlen).unwrap();
    let exact_out = reference_varlen(q, k, v, &params, &varlen).unwrap();
    assert_eq!(values(&forward.out), values(&exact_out));
    let grads = backward_varlen(q, k, v, &forward.out, &d_o, &forward.lse, &params, &varlen);
    let grads = grads.unwrap();
    assert_eq!(
        (grads.dq.dims, grads.dk.dims),
        ([1, 14, 2, 4], [1, 14, 1, 4])
    );
    for b in 0..varlen.sequences() {
        let queries = |t: &HostTensor| varlen.unpack(t, Packed::Queries, b);
        let keys = |t: &HostTensor| varlen.unpack(t, Packed::Keys, b);
        match (queries(q), keys(k)) {
            (Some(qb), Some(kb)) => {
                let vb = keys(v).unwrap();
                let dense = backward_exact(&qb, &kb, &vb, &queries(&d_o).unwrap(), &params);
                let dense = dense.unwrap();
                assert_eq!(queries(&grads.dq).unwrap(), dense.dq, "sequence {b}");
                assert_eq!(keys(&grads.dk).unwrap(), dense.dk, "sequence {b}");
                assert_eq!(keys(&grads.dv).unwrap(), dense.dv, "sequence {b}");
            }
            (Some(_), None) => {
                assert!(values(&queries(&grads.dq).unwrap())
                    .iter()
                    .all(|&g| g == 0.0));
                let lse = values(&queries(&forward.lse).unwrap());
                assert!(lse.iter().all(|&l| l == f64::NEG_INFINITY), "sequence {b}");
            }
            (None, Some(_)) => {
                assert!(values(&keys(&grads.dk).unwrap()).iter().all(|&g| g == 0.0));
                assert!(values(&keys(&grads.dv).unwrap()).iter().all(|&g| g == 0.0));
            }
            (None, None) => {}
        }
    }
}

#[test]
fn lse_is_the_naive_log_sum_exp_and_minus_infinity_for_empty_rows() {
    // Causal, 5 queries over 3 keys: rows 0 and 1 see nothing; small values keep exp exact.
    let shape = shape(1, 1, 1, 5, 3, 2);
    let params = Params::new(2, true).with_window(Window {
        left: Some(1),
        right: None,
    });
    let [q, k, v, _] = inputs(&shape, 41);
    let lse = values(&forward_with_lse(&q, &k, &v, &params).unwrap().lse);
    let (q, k) = (values(&q), values(&k));
    for (row, &got) in lse.iter().enumerate() {
        let sum: f64 = params
            .kv_range(row, 5, 3)
            .map(|j| (params.scale * (q[2 * row] * k[2 * j] + q[2 * row + 1] * k[2 * j + 1])).exp())
            .sum();
        if row < 2 {
            assert_eq!(got.to_bits(), f64::NEG_INFINITY.to_bits(), "row {row}");
        } else {
            assert!(
                (got - sum.ln()).abs() < 1e-14,
                "row {row}: {got} vs {}",
                sum.ln()
            );
        }
    }
}

#[test]
fn sampled_rows_and_keys_equal_the_complete_backward() {
    let shape = shape(2, 4, 2, 9, 11, 4);
    let params = Params::new(4, true);
    let [q, k, v, d_o] = inputs(&shape, 51);
    let forward = forward_with_lse(&q, &k, &v, &params).unwrap();
    let full = backward(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params).unwrap();
    let selection = RowSelection::Sampled {
        rows_per_head: 4,
        seed: 9,
    };
    let sampled = backward_rows(
        &q,
        &k,
        &v,
        &forward.out,
        &d_o,
        &forward.lse,
        &params,
        &selection,
    );
    let sampled = sampled.unwrap();
    assert_eq!(sampled.query_rows.len(), 2 * 4 * 4);
    assert_eq!(sampled.key_rows.len(), 2 * 2 * 4);
    let row = |t: &HostTensor, heads: usize, seq: usize, id: &RowId| {
        values(t)[((id.batch * heads + id.head) * seq + id.row) * 4..][..4].to_vec()
    };
    for (i, id) in sampled.query_rows.iter().enumerate() {
        let want = row(&full.dq, 4, 9, id);
        assert!(
            relative_gap(&sampled.dq[i * 4..][..4], &want) < 1e-13,
            "{id:?}"
        );
    }
    for (i, id) in sampled.key_rows.iter().enumerate() {
        for (got, all) in [(&sampled.dk, &full.dk), (&sampled.dv, &full.dv)] {
            assert!(
                relative_gap(&got[i * 4..][..4], &row(all, 2, 11, id)) < 1e-13,
                "{id:?}"
            );
        }
    }
    assert!(sampled.key_rows.iter().any(|id| id.row == 10));
    let too_few = RowSelection::Sampled {
        rows_per_head: 1,
        seed: 0,
    };
    assert!(backward_rows(
        &q,
        &k,
        &v,
        &forward.out,
        &d_o,
        &forward.lse,
        &params,
        &too_few
    )
    .is_err());
}

#[test]
fn inputs_of_the_wrong_dims_are_refused_in_one_line() {
    let shape = shape(1, 2, 1, 3, 4, 4);
    let params = Params::new(4, false);
    let [q, k, v, d_o] = inputs(&shape, 61);
    let forward = forward_with_lse(&q, &k, &v, &params).unwrap();
    let flat_lse = random([1, 2, 3, 4], 1);
    let error = backward(&q, &k, &v, &forward.out, &d_o, &flat_lse, &params).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("tensor lse has dims [1, 2, 3, 4]"),
        "{error}"
    );
    let error = backward(&q, &k, &v, &k, &d_o, &forward.lse, &params).unwrap_err();
    assert!(
        error.to_string().starts_with("tensor o has dims"),
        "{error}"
    );
    assert!(!error.to_string().contains('\n'));
}

#[test]
fn compare_lse_requires_minus_infinity_exactly_where_a_row_sees_no_key() {
    let exact = HostTensor {
        dims: [1, 1, 3, 1],
        data: HostData::F64(vec![f64::NEG_INFINITY, 1.5, 150.25]),
    };
    let tolerance = backward_tolerance(DType::F16, Distribution::Normal).lse;
    let as_f32 = |x: &[f64]| HostTensor::from_f64([1, 1, 3, 1], DType::F32, x);
    let verdict = compare_lse(&as_f32(&values(&exact)), &exact, &tolerance);
    assert!(verdict.passed, "{verdict}");
    let plus_inf = compare_lse(&as_f32(&[f64::INFINITY, 1.5, 150.25]), &exact, &tolerance);
    assert!(
        !plus_inf.passed && plus_inf.worst == [0, 0, 0, 0],
        "{plus_inf}"
    );
    assert!(plus_inf.reason.unwrap().contains("-inf"));
    let finite = compare_lse(&as_f32(&[-80.0, 1.5, 150.25]), &exact, &tolerance);
    assert!(!finite.passed, "{finite}");
    let late = compare_lse(
        &as_f32(&[f64::NEG_INFINITY, f64::NEG_INFINITY, 150.25]),
        &exact,
        &tolerance,
    );
    assert!(!late.passed && late.worst == [0, 0, 1, 0], "{late}");
    let off = compare_lse(
        &as_f32(&[f64::NEG_INFINITY, 1.51, 150.25]),
        &exact,
        &tolerance,
    );
    assert!(!off.passed && off.worst == [0, 0, 1, 0], "{off}");
}

#[test]
fn compare_gradient_passes_rounding_and_catches_one_wrong_element() {
    // fp16 inputs; O rounded to fp16 and the LSE to f32 as a kernel writes them, the result
    // rounded to fp16: the provisional table must pass it against the exact gradients.
    let spec = CaseSpec {
        shape: shape(1, 4, 2, 64, 64, 32),
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed: 71,
    };
    let case = crate::generate(&spec);
    let (q, k, v) = (&case.q, &case.k, &case.v);
    let d_o = random(q.dims, 72).to_dtype(DType::F16);
    let params = Params::new(32, true);
    let exact = backward_exact(q, k, v, &d_o, &params).unwrap();
    let forward = forward_with_lse(q, k, v, &params).unwrap();
    let (o, lse) = (
        forward.out.to_dtype(DType::F16),
        forward.lse.to_dtype(DType::F32),
    );
    let kernel = backward(q, k, v, &o, &d_o, &lse, &params).unwrap();
    let table = backward_tolerance(DType::F16, Distribution::Normal);
    for (gradient, got, want) in [
        (Gradient::Dq, &kernel.dq, &exact.dq),
        (Gradient::Dk, &kernel.dk, &exact.dk),
        (Gradient::Dv, &kernel.dv, &exact.dv),
    ] {
        let tolerance = table.for_gradient(gradient, want);
        let rounded = got.to_dtype(DType::F16);
        let verdict = compare_gradient(&rounded, want, None, &tolerance);
        assert!(verdict.passed, "{gradient:?}: {verdict}");
        assert_eq!(verdict.compared, want.len());
        let mut wrong = values(&rounded);
        wrong[37] += 10.0 * tolerance.element_bound(wrong[37]);
        let wrong = HostTensor::from_f64(want.dims, DType::F16, &wrong);
        let verdict = compare_gradient(&wrong, want, None, &tolerance);
        assert!(
            !verdict.passed && verdict.worst == [0, 0, 1, 5],
            "{gradient:?}: {verdict}"
        );
    }
    let verdict = compare_gradient(
        &exact.dq,
        &exact.dk,
        None,
        &table.for_gradient(Gradient::Dk, &exact.dk),
    );
    assert!(!verdict.passed && verdict.reason.unwrap().contains("dims"));
    let verdict = compare_gradient(
        &exact.dk,
        &exact.dk,
        Some(&exact.dq),
        &table.for_gradient(Gradient::Dk, &exact.dk),
    );
    assert!(!verdict.passed && verdict.reason.unwrap().contains("scales dims"));
}

/// FlashAttention-2's arithmetic on the oracle's own terms: P and `scale·dS` rounded to `dtype`
/// (the matmuls' operands), every sum in f32, the results rounded to `dtype`.
fn rounding_kernel(problem: &Problem, dtype: DType) -> Gradients {
    let round = |x: f64| match dtype {
        DType::F16 => f64::from(half::f16::from_f64(x)),
        DType::Bf16 => f64::from(half::bf16::from_f64(x)),
        DType::F32 => x,
    };
    let Shape {
        seq_q,
        seq_kv,
        head_dim: d,
        ..
    } = problem.shape;
    let slabs = problem.shape.batch * problem.shape.heads;
    let mut parts = Vec::new();
    for slab in 0..slabs {
        let kv_slab = problem.kv_slab(slab);
        let mut part = SlabGradients {
            dq: vec![0.0; seq_q * d],
            dk: vec![0.0; seq_kv * d],
            dv: vec![0.0; seq_kv * d],
        };
        for row in 0..seq_q {
            for key in problem.params.kv_range(row, seq_q, seq_kv) {
                let (p, ds, _) = problem.pair(slab, row, key);
                let terms = Terms {
                    row,
                    key,
                    p: round(p),
                    query: problem.row(&problem.q, slab, seq_q, row),
                    grad: problem.row(&problem.d_o, slab, seq_q, row),
                    key_vec: problem.row(&problem.k, kv_slab, seq_kv, key),
                };
                // Each product and sum in f32.
                let scaled_ds = round(problem.params.scale * ds);
                terms.add_to(&mut part, scaled_ds, |t| f64::from(t as f32));
                let (dq, dk, dv) = (
                    &mut part.dq[row * d..][..d],
                    &mut part.dk[key * d..][..d],
                    &mut part.dv[key * d..][..d],
                );
                for x in dq.iter_mut().chain(dk.iter_mut()).chain(dv.iter_mut()) {
                    *x = f64::from(*x as f32);
                }
            }
        }
        parts.push(part);
    }
    let grads = problem.assemble(parts.iter(), |x| x);
    Gradients {
        dq: grads.dq.to_dtype(dtype),
        dk: grads.dk.to_dtype(dtype),
        dv: grads.dv.to_dtype(dtype),
    }
}

#[test]
fn a_kernel_that_rounds_p_and_ds_passes_within_the_rounding_scales() {
    // Causal over 1000 keys: dV of the first keys sums 1000 rows of large weights, dQ of the first
    // rows sums a few terms that cancel (Σ_j dS_ij = 0); the bound relative to the tensor's RMS
    // or to the element is not the error's scale there, the terms' is. Peaky fp16 rows: P ≈ 1e-9
    // off their one key is a subnormal, and the dK of a key no row picks is below fp16's normals.
    let mut rejected_without_scales = false;
    let cases = [
        (shape(1, 1, 1, 1000, 1000, 64), Distribution::Normal, true),
        (shape(1, 6, 2, 129, 257, 128), Distribution::Peaky, false),
    ];
    for ((shape, distribution, causal), dtype) in cases
        .into_iter()
        .flat_map(|case| [(case, DType::F16), (case, DType::Bf16)])
    {
        let spec = CaseSpec {
            shape,
            dtype,
            distribution,
            seed: 91,
        };
        let case = crate::generate(&spec);
        let (q, k, v) = (&case.q, &case.k, &case.v);
        let d_o = random(q.dims, 92).to_dtype(dtype);
        let params = Params::new(shape.head_dim, causal);
        let forward = forward_with_lse(q, k, v, &params).unwrap();
        let (o, lse) = (
            forward.out.to_dtype(dtype),
            forward.lse.to_dtype(DType::F32),
        );
        let (exact, scales) = backward_with_scales(q, k, v, &o, &d_o, &lse, &params).unwrap();
        let problem = Problem::new(q, k, v, &o, &d_o, &lse, &params).unwrap();
        let kernel = rounding_kernel(&problem, dtype);
        let table = backward_tolerance(dtype, distribution);
        for (gradient, got, want, scale) in [
            (Gradient::Dq, &kernel.dq, &exact.dq, &scales.dq),
            (Gradient::Dk, &kernel.dk, &exact.dk, &scales.dk),
            (Gradient::Dv, &kernel.dv, &exact.dv, &scales.dv),
        ] {
            let tolerance = table.for_gradient(gradient, want);
            let verdict = compare_gradient(got, want, Some(scale), &tolerance);
            assert!(verdict.passed, "{dtype} {gradient:?}: {verdict}");
            let unscaled = compare_gradient(got, want, None, &tolerance);
            println!("{dtype} {gradient:?} without scales: {unscaled}");
            rejected_without_scales |= !unscaled.passed;
            // One element off by ten times its own bound is still named.
            let flat = 3 * 64 + 7;
            let bound = tolerance
                .element_bound(want.to_f64()[flat])
                .max(4.0 * tolerance.rel_l2 * scale.to_f64()[flat]);
            let mut wrong = got.to_f64();
            wrong[flat] += 10.0 * bound;
            let wrong = HostTensor::from_f64(want.dims, DType::F32, &wrong);
            let verdict = compare_gradient(&wrong, want, Some(scale), &tolerance);
            assert!(
                !verdict.passed
                    && verdict.worst == [0, 0, flat / shape.head_dim, flat % shape.head_dim],
                "{dtype} {gradient:?}: {verdict}"
            );
        }
    }
    assert!(
        rejected_without_scales,
        "the case no longer needs the scales: it tests nothing"
    );
}

#[test]
fn scales_are_the_terms_root_sum_of_squares() {
    // Values as backward's, bit for bit; each scale from its terms, computed pair by pair here;
    // grouped heads (dK and dV sum two heads' terms), a window, varlen alike.
    let shape = shape(1, 4, 2, 9, 11, 8);
    let params = Params::new(8, true).with_window(Window {
        left: Some(3),
        right: Some(1),
    });
    let [q, k, v, d_o] = inputs(&shape, 101);
    let forward = forward_with_lse(&q, &k, &v, &params).unwrap();
    let (grads, scales) =
        backward_with_scales(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params).unwrap();
    let plain = backward(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params).unwrap();
    assert_eq!(grads, plain);
    let problem = Problem::new(&q, &k, &v, &forward.out, &d_o, &forward.lse, &params).unwrap();
    let (d, s_q, s_kv) = (8, 9, 11);
    let mut dv_sq = vec![0.0; 2 * s_kv * d];
    let mut dq_sq = vec![0.0; 4 * s_q * d];
    for slab in 0..4 {
        for row in 0..s_q {
            for key in params.kv_range(row, s_q, s_kv) {
                let (p, _, ds_size) = problem.pair(slab, row, key);
                let kv = problem.kv_slab(slab);
                for c in 0..d {
                    let g = problem.row(&problem.d_o, slab, s_q, row)[c];
                    dv_sq[(kv * s_kv + key) * d + c] += (p * g).powi(2);
                    let x = problem.row(&problem.k, kv, s_kv, key)[c];
                    dq_sq[(slab * s_q + row) * d + c] += (params.scale * ds_size * x).powi(2);
                }
            }
        }
    }
    let close = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y.sqrt()).abs() <= 1e-12 * (1.0 + x.abs()))
    };
    assert!(close(&scales.dv.to_f64(), &dv_sq));
    assert!(close(&scales.dq.to_f64(), &dq_sq));
    assert!(scales.dk.to_f64().iter().any(|&x| x > 0.0));
}

#[test]
fn gradients_are_bit_identical_on_one_thread_and_many() {
    let shape = shape(2, 4, 1, 13, 10, 8);
    let params = Params::new(8, true);
    let [q, k, v, d_o] = inputs(&shape, 81);
    let many = backward_exact(&q, &k, &v, &d_o, &params).unwrap();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = one_thread.install(|| backward_exact(&q, &k, &v, &d_o, &params).unwrap());
    let bits = |t: &HostTensor| values(t).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (a, b) in [
        (&one.dq, &many.dq),
        (&one.dk, &many.dk),
        (&one.dv, &many.dv),
    ] {
        assert_eq!(bits(a), bits(b));
    }
}

#[test]
fn a_gradient_that_cancels_to_zero_is_judged_at_its_rounding_size() {
    // A peaky row's dQ: exact ~0, its terms of size 1: a kernel's rounding of 1e-4 per element
    // is no error relative to the terms, and 1e-4 / 1e-300 relative to the exact gradient.
    let dims = [1, 1, 4, 8];
    let exact = HostTensor::from_f64(dims, DType::F32, &[1e-300; 32]);
    let scales = HostTensor::from_f64(dims, DType::F32, &[1.0; 32]);
    let rounded = HostTensor::from_f64(dims, DType::F32, &[1e-4; 32]);
    let tolerance = crate::Tolerance {
        max_abs: 1e-3,
        rel_l2: 1e-3,
    };
    let verdict = compare_gradient(&rounded, &exact, Some(&scales), &tolerance);
    assert!(verdict.passed, "{verdict}");
    assert!(verdict.rel_l2 < 2e-4, "{verdict}");
    // Without the scales the same rounding is a relative L2 error of ~1e296.
    let verdict = compare_gradient(&rounded, &exact, None, &tolerance);
    assert!(!verdict.passed && verdict.rel_l2 > 1e290, "{verdict}");
    // Errors at the terms' own size are still caught by the relative L2 bound with the scales.
    let wrong = HostTensor::from_f64(dims, DType::F32, &[3e-3; 32]);
    let verdict = compare_gradient(&wrong, &exact, Some(&scales), &tolerance);
    assert!(!verdict.passed, "{verdict}");
}
