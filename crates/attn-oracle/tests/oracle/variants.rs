//! Grouped-query heads and sliding windows: the oracle against a direct implementation that
//! applies the mask's definition key by key, on small cases with every edge.

use attn_oracle::{reference, tiled_f32, DType, Distribution, Params, RowSelection, Shape, Window};

use crate::case;

/// Attention by definition: for each query, every key tested against FlashAttention's window
/// predicate `diag − left ≤ j ≤ diag + right` (`right` 0 when causal), K/V head `h / group`.
fn direct(shape: &Shape, params: &Params, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    let (sq, skv, d) = (shape.seq_q, shape.seq_kv, shape.head_dim);
    let mut out = vec![0.0; shape.q_len()];
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let kv_head = h / (shape.heads / shape.kv_heads);
            let kv_base = (b * shape.kv_heads + kv_head) * skv * d;
            for i in 0..sq {
                let q_row = &q[((b * shape.heads + h) * sq + i) * d..][..d];
                let diag = i as i64 + skv as i64 - sq as i64;
                let visible = |j: i64| {
                    params.window.left.is_none_or(|l| j >= diag - l as i64)
                        && params.window.right.is_none_or(|r| j <= diag + r as i64)
                        && (!params.causal || j <= diag)
                };
                let logits: Vec<(usize, f64)> = (0..skv)
                    .filter(|&j| visible(j as i64))
                    .map(|j| {
                        let key = &k[kv_base + j * d..][..d];
                        (
                            j,
                            params.scale * q_row.iter().zip(key).map(|(a, b)| a * b).sum::<f64>(),
                        )
                    })
                    .collect();
                let max = logits.iter().map(|l| l.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = logits.iter().map(|l| (l.1 - max).exp()).sum();
                let o = &mut out[((b * shape.heads + h) * sq + i) * d..][..d];
                for &(j, logit) in &logits {
                    let weight = (logit - max).exp() / sum;
                    for (x, val) in o.iter_mut().zip(&v[kv_base + j * d..][..d]) {
                        *x += weight * val;
                    }
                }
            }
        }
    }
    out
}

/// One case: the oracle (all rows) and the tiled f32 algorithm against the direct definition.
fn check(shape: &str, causal: bool, window: &str) {
    let inputs = case(shape, DType::F16, Distribution::Normal, 11);
    let shape: Shape = shape.parse().unwrap();
    let window: Window = window.parse().unwrap();
    let params = Params::new(shape.head_dim, causal).with_window(window);
    let (q, k, v) = (inputs.q.to_f64(), inputs.k.to_f64(), inputs.v.to_f64());
    let want = direct(&shape, &params, &q, &k, &v);
    let got = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
    let label = format!("{shape} causal={causal} window={window}");
    assert_eq!(got.out.len(), want.len(), "{label}");
    for (i, (g, w)) in got.out.iter().zip(&want).enumerate() {
        assert!((g - w).abs() < 1e-12, "{label}: oracle out[{i}] {g} vs {w}");
    }
    for (r, id) in got.rows.iter().enumerate() {
        let range = params.kv_range(id.row, shape.seq_q, shape.seq_kv);
        assert_eq!(
            range.is_empty(),
            got.lse[r] == f64::NEG_INFINITY,
            "{label}: row {id:?}"
        );
    }
    let (tiled, _) = tiled_f32(&inputs.q, &inputs.k, &inputs.v, &params, 16, 8).unwrap();
    for (i, (g, w)) in tiled.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() < 1e-4,
            "{label}: tiled out[{i}] {g} vs {w}"
        );
    }
}

#[test]
fn grouped_query_and_multi_query_heads_read_their_group_s_kv_head() {
    for shape in ["2,4/2,9,8", "1,6/3,5,13,8", "2,4/1,7,8", "1,3/1,12,5,8"] {
        check(shape, false, "-1,-1");
        check(shape, true, "-1,-1");
    }
}

#[test]
fn windows_at_the_sequence_edges_match_the_definition() {
    // Windows wider than S, narrower than a tile, one-sided, zero-width, with S_q ≠ S_kv both ways
    // (rows whose window lies wholly before key 0 or after the last key see nothing).
    for shape in ["1,2,23,8", "1,2/1,9,31,8", "2,2,31,9,8", "1,1,1,8"] {
        for window in [
            "4,-1", "-1,3", "2,2", "0,0", "100,100", "7,0", "0,5", "30,-1",
        ] {
            check(shape, false, window);
            check(shape, true, window);
        }
    }
}

#[test]
fn kv_range_is_the_window_clipped_to_the_keys() {
    let p = Params::new(8, false).with_window("2,1".parse().unwrap());
    // S_q = S_kv = 10: row 5 sees 3..=6.
    assert_eq!(p.kv_range(5, 10, 10), 3..7);
    assert_eq!(p.kv_range(0, 10, 10), 0..2);
    assert_eq!(p.kv_range(9, 10, 10), 7..10);
    // S_q > S_kv: early rows' windows end before key 0.
    assert_eq!(p.kv_range(0, 10, 4), 0..0);
    assert_eq!(p.visible_pairs(10, 10), 2 + 3 + 4 * 7 + 3);
    let causal = Params::new(8, true).with_window("3,-1".parse().unwrap());
    assert_eq!(causal.kv_range(5, 10, 10), 2..6);
    assert_eq!(Params::new(8, true).visible_pairs(4, 4), 10);
}

#[test]
fn shapes_and_windows_parse_print_and_refuse() {
    let gqa: Shape = "2,32/8,4096,128".parse().unwrap();
    assert_eq!((gqa.heads, gqa.kv_heads, gqa.group()), (32, 8, 4));
    assert_eq!(gqa.to_string(), "2,32/8,4096,128");
    assert_eq!(
        "1,8/8,16,8".parse::<Shape>().unwrap().to_string(),
        "1,8,16,8"
    );
    assert!("2,32/5,64,8"
        .parse::<Shape>()
        .unwrap_err()
        .to_string()
        .contains("divide"));
    assert!("2,32/0,64,8".parse::<Shape>().is_err());
    let w: Window = "4096,-1".parse().unwrap();
    assert_eq!((w.left, w.right), (Some(4096), None));
    assert_eq!(w.to_string(), "4096,-1");
    assert_eq!("inf,0".parse::<Window>().unwrap().abi(), (-1, 0));
    assert!("4096".parse::<Window>().is_err());
    assert!("-2,0".parse::<Window>().is_err());
}

#[test]
fn a_varlen_batch_is_each_sequence_s_own_dense_problem() {
    use attn_oracle::{
        compare_varlen, generate_varlen, reference_varlen, CaseSpec, Packed, Varlen, VarlenTensors,
    };
    // Empty sequences on either side, a single row, S_q ≠ S_kv, grouped heads.
    let varlen = Varlen::new(vec![5, 0, 1, 9, 3], vec![7, 4, 1, 9, 0]).unwrap();
    assert_eq!(varlen.cu_seqlens_q(), vec![0, 5, 5, 6, 15, 18]);
    assert_eq!(varlen.cu_seqlens_kv(), vec![0, 7, 11, 12, 21, 21]);
    let spec = CaseSpec {
        shape: "1,4/2,1,8".parse().unwrap(),
        dtype: DType::Bf16,
        distribution: Distribution::Normal,
        seed: 3,
    };
    let bounding = varlen.bounding_shape(&spec.shape).unwrap();
    assert_eq!((bounding.batch, bounding.seq_q, bounding.seq_kv), (5, 9, 9));
    let inputs = generate_varlen(&spec, &varlen);
    assert_eq!(inputs.q.dims, [1, 18, 4, 8]);
    assert_eq!(inputs.k.dims, [1, 21, 2, 8]);
    for (causal, window) in [(false, "-1,-1"), (true, "-1,-1"), (true, "2,-1")] {
        let params = Params::new(8, causal).with_window(window.parse().unwrap());
        let packed = reference_varlen(&inputs.q, &inputs.k, &inputs.v, &params, &varlen).unwrap();
        let all = packed.to_f64();
        // Sequence by sequence, against the direct definition on its own unpacked tensors.
        for b in 0..varlen.sequences() {
            let Some(qb) = varlen.unpack(&inputs.q, Packed::Queries, b) else {
                continue;
            };
            let ob = varlen.unpack(&packed, Packed::Queries, b).unwrap().to_f64();
            let want = match (
                varlen.unpack(&inputs.k, Packed::Keys, b),
                varlen.unpack(&inputs.v, Packed::Keys, b),
            ) {
                (Some(kb), Some(vb)) => {
                    let shape = attn_oracle::shape_from_dims(qb.dims, kb.dims).unwrap();
                    direct(&shape, &params, &qb.to_f64(), &kb.to_f64(), &vb.to_f64())
                }
                _ => vec![0.0; qb.len()],
            };
            for (i, (g, w)) in ob.iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 1e-12, "sequence {b} out[{i}] {g} vs {w}");
            }
        }
        // The exact answer passes; a wrong row in sequence 3 fails, named.
        let tol = attn_oracle::tolerance(DType::Bf16, Distribution::Normal);
        let exact = packed.to_dtype(DType::Bf16);
        let v = compare_varlen(
            &exact, &inputs.q, &inputs.k, &inputs.v, &params, &varlen, &tol,
        )
        .unwrap();
        assert!(v.passed, "{v}");
        let mut wrong = all.clone();
        wrong[(7 * 4 + 1) * 8] += 1.0; // token 7 = sequence 3, row 1; head 1
        let wrong = attn_oracle::HostTensor::from_f64(packed.dims, DType::Bf16, &wrong);
        let v = compare_varlen(
            &wrong, &inputs.q, &inputs.k, &inputs.v, &params, &varlen, &tol,
        )
        .unwrap();
        assert!(!v.passed && v.worst[0] == 3, "{v}");
        assert!(v.reason.unwrap().starts_with("sequence 3"));
    }
    assert!(Varlen::new(vec![1, 2], vec![1]).is_err());
    assert!(Varlen::new(vec![0, 0], vec![3, 3]).is_err());
}

#[test]
fn packing_keeps_the_element_type_and_inverts_unpacking() {
    use attn_oracle::{generate_varlen, CaseSpec, HostData, Packed, Varlen, VarlenTensors};
    // Empty sequences on both sides, grouped heads.
    let varlen = Varlen::new(vec![5, 0, 1, 9, 3], vec![7, 4, 1, 9, 0]).unwrap();
    let spec = CaseSpec {
        shape: "1,4/2,1,8".parse().unwrap(),
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed: 5,
    };
    let inputs = generate_varlen(&spec, &varlen);
    for (packed, side, heads) in [
        (&inputs.q, Packed::Queries, 4),
        (&inputs.k, Packed::Keys, 2),
    ] {
        assert_eq!(packed.dtype().unwrap(), DType::F16);
        let parts: Vec<_> = (0..varlen.sequences())
            .map(|b| varlen.unpack(packed, side, b))
            .collect();
        assert!(parts
            .iter()
            .flatten()
            .all(|p| p.dtype().unwrap() == DType::F16));
        let again = varlen.pack(&parts, side, heads, 8);
        assert_eq!(again.dims, packed.dims);
        assert_eq!(again.as_bytes(), packed.as_bytes());
        // Parts of different element types pack exactly, as f64.
        let mut mixed = parts.clone();
        mixed[0] = mixed[0].take().map(|p| p.to_dtype(DType::F32));
        let wide = varlen.pack(&mixed, side, heads, 8);
        assert!(matches!(wide.data, HostData::F64(_)));
        assert_eq!(wide.to_f64(), packed.to_f64());
    }
}

#[test]
fn a_varlen_batch_checked_on_selected_rows_matches_the_full_oracle() {
    use attn_oracle::{
        compare_packed, generate_varlen, reference_varlen, reference_varlen_rows, CaseSpec, RowId,
        Varlen,
    };
    let varlen = Varlen::new(vec![40, 0, 1, 90, 3], vec![40, 4, 1, 60, 0]).unwrap();
    // Packed rows and their (sequence, head, row) agree both ways.
    for r in 0..varlen.total_q() * 4 {
        let id = varlen.row_id(r, 4).unwrap();
        assert_eq!(varlen.packed_row(&id, 4), Some(r));
    }
    assert_eq!(varlen.row_id(varlen.total_q() * 4, 4), None);
    let outside = RowId {
        batch: 1,
        head: 0,
        row: 0,
    };
    assert_eq!(
        varlen.packed_row(&outside, 4),
        None,
        "sequence 1 has no query"
    );
    let spec = CaseSpec {
        shape: "1,4/2,1,8".parse().unwrap(),
        dtype: DType::F16,
        distribution: Distribution::Normal,
        seed: 11,
    };
    let inputs = generate_varlen(&spec, &varlen);
    let params = Params::new(8, true);
    let full = reference_varlen(&inputs.q, &inputs.k, &inputs.v, &params, &varlen).unwrap();
    let exact = full.to_dtype(DType::F16);
    let tol = attn_oracle::tolerance(DType::F16, Distribution::Normal);
    // A few rows per (sequence, head), seeded per sequence: the rows it computed are the full
    // oracle's rows, and they sit where the packed layout says.
    let sampled = |_: &Shape, b: usize| RowSelection::Sampled {
        rows_per_head: 3,
        seed: 5 + b as u64,
    };
    let some =
        reference_varlen_rows(&inputs.q, &inputs.k, &inputs.v, &params, &varlen, &sampled).unwrap();
    assert_eq!(
        (some.shape.batch, some.shape.seq_q, some.shape.seq_kv),
        (5, 90, 60)
    );
    let all = full.to_f64();
    for (i, id) in some.rows.iter().enumerate() {
        let at = varlen.packed_row(id, 4).unwrap() * 8;
        assert_eq!(some.out_row(i), &all[at..at + 8], "{id:?}");
    }
    // Sequence 4 has no key: all its rows are computed, as zeros with logsumexp −∞.
    let keyless: Vec<usize> = (0..some.rows.len())
        .filter(|&i| some.rows[i].batch == 4)
        .collect();
    assert_eq!(keyless.len(), 3 * 4);
    assert!(keyless.iter().all(|&i| some.lse[i] == f64::NEG_INFINITY));
    let verdict = compare_packed(&exact, &some, &varlen, &tol);
    assert!(verdict.passed, "{verdict}");
    assert_eq!(verdict.compared, some.rows.len() * 8);
    // A wrong element on a checked row fails, named by sequence, head and row.
    let first_of_3 = some.rows.iter().position(|id| id.batch == 3).unwrap();
    let id = some.rows[first_of_3];
    let mut wrong = exact.to_f64();
    wrong[varlen.packed_row(&id, 4).unwrap() * 8 + 2] += 1.0;
    let wrong = attn_oracle::HostTensor::from_f64(exact.dims, DType::F16, &wrong);
    let verdict = compare_packed(&wrong, &some, &varlen, &tol);
    assert!(!verdict.passed);
    assert_eq!(verdict.worst, [3, id.head, id.row, 2]);
    // A dense-shaped output is refused as one, not misread.
    let dense = attn_oracle::HostTensor::from_f64([1, 4, 134, 8], DType::F16, &exact.to_f64());
    assert!(!compare_packed(&dense, &some, &varlen, &tol).passed);
}

#[test]
fn the_abi_window_is_clipped_and_causal_is_its_right_bound_zero() {
    let huge = Window {
        left: Some(usize::MAX),
        right: Some(1 << 40),
    };
    let p = Params::new(8, false).with_window(huge);
    assert_eq!(p.abi_window(100, 300), (400, 400));
    assert_eq!(Params::new(8, true).abi_window(10, 10), (-1, 0));
    assert_eq!(Params::new(8, false).abi_window(10, 10), (-1, -1));
    // Clipping changes nothing a row sees.
    let clipped = Params::new(8, false).with_window(Window {
        left: Some(400),
        right: Some(400),
    });
    for row in 0..100 {
        assert_eq!(p.kv_range(row, 100, 300), clipped.kv_range(row, 100, 300));
    }
}
