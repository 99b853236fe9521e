//! The f64 reference against hand-computed values, numpy fixtures and itself (sampled vs full).

use std::path::Path;

use attn_oracle::{
    npy, reference, DType, Distribution, HostTensor, OracleError, Params, RowId, RowSelection,
};

use crate::case;

fn f64_tensor(dims: [usize; 4], values: &[f64]) -> HostTensor {
    HostTensor {
        dims,
        data: attn_oracle::HostData::F64(values.to_vec()),
    }
}

/// One hand-computed problem: inputs, parameters, expected outputs and logsumexps.
struct HandCase {
    q: HostTensor,
    k: HostTensor,
    v: HostTensor,
    params: Params,
    out: Vec<f64>,
    lse: Vec<f64>,
}

fn check_hand(case: HandCase) {
    let r = reference(&case.q, &case.k, &case.v, &case.params, &RowSelection::All).unwrap();
    assert_eq!(r.out.len(), case.out.len());
    for (got, want) in r.out.iter().zip(&case.out) {
        assert!((got - want).abs() < 1e-15, "out {got} != {want}");
    }
    for (got, want) in r.lse.iter().zip(&case.lse) {
        assert!(
            got == want || (got - want).abs() < 1e-15,
            "lse {got} != {want}"
        );
    }
}

#[test]
fn matches_hand_computed_cases() {
    let ln3 = 3f64.ln();
    // Logits 0 and ln 3: weights 1/4, 3/4; out = 2/4 + 18/4 = 5; lse = ln 4.
    check_hand(HandCase {
        q: f64_tensor([1, 1, 1, 1], &[1.0]),
        k: f64_tensor([1, 1, 2, 1], &[0.0, ln3]),
        v: f64_tensor([1, 1, 2, 1], &[2.0, 6.0]),
        params: Params::new(1, false),
        out: vec![5.0],
        lse: vec![4f64.ln()],
    });
    // Causal, S_q = 3 > S_kv = 2, bottom-right: row 0 sees nothing, row 1 key 0, row 2 both.
    check_hand(HandCase {
        q: f64_tensor([1, 1, 3, 1], &[1.0, 1.0, 1.0]),
        k: f64_tensor([1, 1, 2, 1], &[0.0, ln3]),
        v: f64_tensor([1, 1, 2, 1], &[2.0, 6.0]),
        params: Params::new(1, true),
        out: vec![0.0, 2.0, 5.0],
        lse: vec![f64::NEG_INFINITY, 0.0, 4f64.ln()],
    });
    // D = 2 with scale 0.5: logits 0.5 and 1; V = I, so out = the weights.
    check_hand(HandCase {
        q: f64_tensor([1, 1, 1, 2], &[1.0, 2.0]),
        k: f64_tensor([1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]),
        v: f64_tensor([1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]),
        params: Params::new(2, false).with_scale(0.5),
        out: vec![0.3775406687981454, 0.6224593312018546],
        lse: vec![1.4740769841801067],
    });
}

#[derive(serde::Deserialize)]
struct Manifest {
    seed: u64,
    cases: Vec<FixtureCase>,
}

#[derive(serde::Deserialize)]
struct FixtureCase {
    name: String,
    dtype: String,
    causal: bool,
    scale: f64,
}

#[test]
fn matches_independent_numpy_fixtures() {
    let dir = Path::new(".").join("tests/fixtures/numpy");
    let manifest: Manifest =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    assert_eq!(manifest.seed, 20260522, "fixtures record their seed");
    assert_eq!(manifest.cases.len(), 4);
    for case in manifest.cases {
        let load = |which: &str| npy::read(dir.join(format!("{}_{which}.npy", case.name))).unwrap();
        let (q, k, v) = (load("q"), load("k"), load("v"));
        assert_eq!(
            q.dtype().unwrap(),
            case.dtype.parse::<DType>().unwrap(),
            "{}",
            case.name
        );
        let params = Params::new(1, case.causal).with_scale(case.scale);
        let r = reference(&q, &k, &v, &params, &RowSelection::All).unwrap();
        let want_out = load("out").to_f64();
        let want_lse = load("lse").to_f64();
        assert_eq!(r.out.len(), want_out.len(), "{}", case.name);
        for (i, (got, want)) in r.out.iter().zip(&want_out).enumerate() {
            assert!(
                (got - want).abs() <= 1e-12,
                "{} out[{i}]: {got} vs numpy {want}",
                case.name
            );
        }
        for (i, (got, want)) in r.lse.iter().zip(&want_lse).enumerate() {
            assert!(
                got == want || (got - want).abs() <= 1e-12,
                "{} lse[{i}]: {got} vs numpy {want}",
                case.name
            );
        }
    }
}

#[test]
fn sampled_rows_agree_with_full_and_are_seeded() {
    for causal in [false, true] {
        let inputs = case("2,3,50,40,8", DType::F16, Distribution::Normal, 11);
        let params = Params::new(8, causal);
        let full = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
        assert!(full.is_complete());
        let sampled_with = |seed| {
            let rows = RowSelection::Sampled {
                rows_per_head: 7,
                seed,
            };
            reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows).unwrap()
        };
        let sampled = sampled_with(5);
        assert_eq!(sampled.rows.len(), 2 * 3 * 7);
        assert!(!sampled.is_complete());
        for batch in 0..2 {
            for head in 0..3 {
                let rows: Vec<usize> = sampled
                    .rows
                    .iter()
                    .filter(|id| (id.batch, id.head) == (batch, head))
                    .map(|id| id.row)
                    .collect();
                assert_eq!(rows.len(), 7);
                assert_eq!(
                    (rows[0], rows[6]),
                    (0, 49),
                    "first and last always included"
                );
                assert!(rows.windows(2).all(|w| w[0] < w[1]), "distinct and sorted");
            }
        }
        for (i, id) in sampled.rows.iter().enumerate() {
            let flat = (id.batch * 3 + id.head) * 50 + id.row;
            assert_eq!(sampled.out_row(i), full.out_row(flat), "{id:?}");
            assert_eq!(sampled.lse[i].to_bits(), full.lse[flat].to_bits());
        }
        assert_eq!(sampled_with(5), sampled, "same seed, same rows");
        assert_ne!(
            sampled_with(6).rows,
            sampled.rows,
            "another seed, other rows"
        );
        let heads_differ = sampled.rows[..7]
            .iter()
            .zip(&sampled.rows[7..14])
            .any(|(a, b)| a.row != b.row);
        assert!(heads_differ, "each (batch, head) draws its own rows");
    }
}

#[test]
fn sampling_at_least_every_row_is_complete_and_fewer_than_two_is_an_error() {
    let inputs = case("1,2,5,6,4", DType::Bf16, Distribution::Uniform, 2);
    let params = Params::new(4, true);
    let full = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All).unwrap();
    let all = RowSelection::Sampled {
        rows_per_head: 5,
        seed: 1,
    };
    assert_eq!(
        reference(&inputs.q, &inputs.k, &inputs.v, &params, &all).unwrap(),
        full
    );
    assert_eq!(
        full.rows[6],
        RowId {
            batch: 0,
            head: 1,
            row: 1
        },
        "rows are ordered by (batch, head, row)"
    );
    let one = RowSelection::Sampled {
        rows_per_head: 1,
        seed: 1,
    };
    let error = reference(&inputs.q, &inputs.k, &inputs.v, &params, &one).unwrap_err();
    assert!(matches!(
        error,
        OracleError::InvalidRowSelection {
            rows_per_head: 1,
            ..
        }
    ));
}

#[test]
fn rejects_inconsistent_inputs_with_context() {
    let inputs = case("1,2,5,6,4", DType::F16, Distribution::Normal, 2);
    let params = Params::new(4, false);
    let all = RowSelection::All;
    let wrong_k = case("1,2,5,6,8", DType::F16, Distribution::Normal, 2).k;
    let error = reference(&inputs.q, &wrong_k, &inputs.v, &params, &all).unwrap_err();
    assert!(matches!(
        error,
        OracleError::DimsMismatch {
            tensor: "k",
            found: [1, 2, 6, 8],
            ..
        }
    ));
    let error = reference(&inputs.q, &inputs.k, &inputs.q, &params, &all).unwrap_err();
    assert!(
        error.to_string().contains("tensor v has dims [1, 2, 5, 4]"),
        "{error}"
    );
    let mut short = inputs.q.clone();
    short.dims[2] = 6;
    let error = reference(&short, &inputs.k, &inputs.v, &params, &all).unwrap_err();
    assert!(matches!(
        error,
        OracleError::DataLength {
            expected: 48,
            found: 40,
            ..
        }
    ));
    let nan_scale = params.with_scale(f64::NAN);
    let error = reference(&inputs.q, &inputs.k, &inputs.v, &nan_scale, &all).unwrap_err();
    assert!(matches!(error, OracleError::InvalidScale { .. }));
}

#[test]
#[ignore = "big shape: run in release, `cargo test -p attn-oracle --release -- --ignored`"]
fn sampled_reference_on_the_largest_test_shape_takes_seconds() {
    let start = std::time::Instant::now();
    let inputs = case("2,16,8192,128", DType::F16, Distribution::Normal, 1);
    let generated = start.elapsed();
    let params = Params::new(128, true);
    let rows = RowSelection::Sampled {
        rows_per_head: 64,
        seed: 1,
    };
    let r = reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows).unwrap();
    assert_eq!(r.rows.len(), 2 * 16 * 64);
    let total = start.elapsed();
    eprintln!("generate {generated:?}, generate + sampled reference {total:?}");
    assert!(total.as_secs() < 60, "took {total:?}");
}
