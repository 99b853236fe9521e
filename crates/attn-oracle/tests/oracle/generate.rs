//! Seeded generators: deterministic, and each distribution has the property it promises.

use attn_oracle::{
    generate, reference, CaseSpec, DType, Distribution, HostTensor, Params, RowSelection,
};

use crate::case;

#[test]
fn every_case_is_deterministic_in_its_spec_and_seed_sensitive() {
    for dtype in DType::ALL {
        for distribution in Distribution::ALL {
            let spec = CaseSpec {
                shape: "2,2,9,7,8".parse().unwrap(),
                dtype,
                distribution,
                seed: 3,
            };
            let (a, b) = (generate(&spec), generate(&spec));
            assert_eq!((&a.q, &a.k, &a.v), (&b.q, &b.k, &b.v), "{spec}");
            let other = generate(&CaseSpec { seed: 4, ..spec });
            assert_ne!(a.q, other.q, "{spec}: the seed changes Q");
            assert_ne!(a.v, other.v, "{spec}: the seed changes V");
            assert_eq!(a.q.dtype().unwrap(), dtype);
            assert_eq!(
                (a.q.dims, a.k.dims, a.v.dims),
                ([2, 2, 9, 8], [2, 2, 7, 8], [2, 2, 7, 8])
            );
            let values = a.q.to_f64();
            assert!(values.iter().all(|x| x.is_finite()), "{spec}");
            assert!(values[..72] != values[72..144], "{spec}: heads differ");
        }
    }
}

#[test]
fn spec_display_names_everything_needed_to_reproduce() {
    let spec = CaseSpec {
        shape: "2,16,100,200,64".parse().unwrap(),
        dtype: DType::Bf16,
        distribution: Distribution::LargeMagnitude,
        seed: 99,
    };
    assert_eq!(
        spec.to_string(),
        "large-magnitude bf16 2,16,100,200,64 seed=99"
    );
}

#[test]
fn normal_and_uniform_have_their_moments() {
    let normal = case("1,4,64,64", DType::F32, Distribution::Normal, 1)
        .v
        .to_f64();
    let n = normal.len() as f64;
    let mean = normal.iter().sum::<f64>() / n;
    let var = normal.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    assert!(
        mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
        "mean {mean} var {var}"
    );
    let uniform = case("1,4,64,64", DType::F16, Distribution::Uniform, 1)
        .k
        .to_f64();
    assert!(uniform.iter().all(|x| (-1.0..=1.0).contains(x)));
    let var = uniform.iter().map(|x| x * x).sum::<f64>() / uniform.len() as f64;
    assert!((var - 1.0 / 3.0).abs() < 0.02, "var {var}");
}

/// The scaled logits of every (head, row), under the default scale.
fn logits(q: &HostTensor, k: &HostTensor) -> Vec<Vec<f64>> {
    let [b, h, sq, d] = q.dims;
    let skv = k.dims[2];
    let (q, k) = (q.to_f64(), k.to_f64());
    let scale = 1.0 / (d as f64).sqrt();
    let mut rows = Vec::new();
    for slab in 0..b * h {
        for i in 0..sq {
            let qi = &q[(slab * sq + i) * d..][..d];
            rows.push(
                (0..skv)
                    .map(|j| {
                        scale
                            * qi.iter()
                                .zip(&k[(slab * skv + j) * d..][..d])
                                .map(|(a, b)| a * b)
                                .sum::<f64>()
                    })
                    .collect(),
            );
        }
    }
    rows
}

#[test]
fn large_magnitude_logits_overflow_a_naive_exp() {
    for d in [16, 64, 128] {
        let inputs = case(
            &format!("1,2,16,32,{d}"),
            DType::F16,
            Distribution::LargeMagnitude,
            5,
        );
        for row in logits(&inputs.q, &inputs.k) {
            let max = row.iter().copied().fold(f64::MIN, f64::max);
            assert!(
                max > 88.8,
                "D={d}: max logit {max} would not overflow f32 exp"
            );
            let min = row.iter().copied().fold(f64::MAX, f64::min);
            assert!(max - min > 1.0, "D={d}: logits spread");
        }
    }
}

#[test]
fn peaky_rows_have_one_dominant_key_even_under_a_causal_mask() {
    let inputs = case("1,2,64,200,64", DType::Bf16, Distribution::Peaky, 6);
    for causal in [false, true] {
        let params = Params::new(64, causal);
        let r = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
        let rows = logits(&inputs.q, &inputs.k);
        for (i, id) in r.rows.iter().enumerate() {
            let end = params.kv_end(id.row, 64, 200);
            let row = &rows[i][..end];
            let max = row.iter().copied().fold(f64::MIN, f64::max);
            let top_weight = 1.0 / row.iter().map(|l| (l - max).exp()).sum::<f64>();
            assert!(
                top_weight > 0.99,
                "causal={causal} {id:?}: top weight {top_weight}"
            );
        }
    }
}

#[test]
fn constant_rows_make_the_output_the_mean_of_v() {
    let inputs = case("1,1,5,20,8", DType::F16, Distribution::ConstantRows, 7);
    for row in logits(&inputs.q, &inputs.k) {
        assert!(
            row.iter().all(|&l| l == row[0]),
            "all logits of a row are equal"
        );
    }
    let r = reference(
        &inputs.q,
        &inputs.k,
        &inputs.v,
        &Params::new(8, false),
        &RowSelection::All,
    )
    .unwrap();
    let v = inputs.v.to_f64();
    for col in 0..8 {
        let mean = (0..20).map(|j| v[j * 8 + col]).sum::<f64>() / 20.0;
        assert!((r.out[col] - mean).abs() < 1e-12);
    }
}

#[test]
fn distinct_values_are_distinct_and_never_zero() {
    // The pools hold 6144 (fp16), 768 (bf16) and 49152 (f32) values.
    for (dtype, shape) in [
        (DType::F16, "1,3,64,32"),
        (DType::Bf16, "1,2,24,16"),
        (DType::F32, "2,4,64,64"),
    ] {
        let inputs = case(shape, dtype, Distribution::Distinct, 8);
        for tensor in [&inputs.q, &inputs.k, &inputs.v] {
            let mut bits: Vec<u64> = tensor.to_f64().iter().map(|x| x.to_bits()).collect();
            assert!(
                tensor
                    .to_f64()
                    .iter()
                    .all(|x| (0.25..2.0).contains(&x.abs())),
                "{dtype}"
            );
            let n = bits.len();
            bits.sort_unstable();
            bits.dedup();
            assert_eq!(bits.len(), n, "{dtype} {shape}: all distinct");
        }
    }
    let big = case("2,2,128,64", DType::Bf16, Distribution::Distinct, 8);
    assert!(big.q.to_f64().iter().all(|&x| x != 0.0));
}
