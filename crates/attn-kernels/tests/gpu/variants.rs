//! The variants: grouped and multi-query heads, sliding windows, S_q != S_kv.

use attn_kernels::{Candidate, Gpu, Prepared};
use attn_oracle::{DType, Distribution, Params, Shape};

use crate::oracle::{base_seed, judged, run_with_params};
use crate::runs::{check_every_schedule, labelled, must_refuse, refused, Run};

/// The variants' matrix for `head_dim`: grouped and multi-query heads, sliding windows (one-sided,
/// two-sided, zero-width, wider than S, narrower than a tile, with and without causal), S_q ≠ S_kv
/// both ways, ragged lengths and S = 1. `(shape, causal, window)`.
/// `ragged` (a [`Run`]'s lengths) adds grouped-head shapes of each length, and S_q = 1000 under
/// each as S_kv.
fn variant_matrix(head_dim: usize, ragged: &[usize]) -> Vec<(String, bool, &'static str)> {
    let mut cases = Vec::new();
    let mut shapes: Vec<(&str, String)> = [
        ("4/2", "1"),
        ("4/2", "100"),
        ("6/1", "257"),
        ("8/4", "1000"),
        ("4/1", "2048"),
        ("2/1", "300,77"),
        ("4/2", "77,300"),
        ("5", "515"),
    ]
    .into_iter()
    .map(|(heads, seqs)| (heads, seqs.to_string()))
    .collect();
    for &seq in ragged {
        shapes.push(("8/2", seq.to_string()));
        shapes.push(("4/1", format!("1000,{seq}")));
    }
    for (heads, seqs) in shapes {
        let shape = format!("2,{heads},{seqs},{head_dim}");
        for (causal, window) in [
            (false, "-1,-1"),
            (true, "-1,-1"),
            (true, "64,-1"),
            (true, "1,-1"),
            (false, "100,100"),
            (false, "0,0"),
            (false, "300,17"),
            (false, "-1,5"),
            (true, "5000,-1"),
        ] {
            cases.push((shape.clone(), causal, window));
        }
    }
    cases
}

/// `name` in `run` over [`variant_matrix`] in both dtypes and the run's head dims; returns the
/// failures.
fn check_variants_with(name: &str, run: &Run) -> Vec<String> {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let implementation = attn_kernels::registry::find(name).unwrap();
    let overrides = &run.overrides;
    let name = &labelled(name, overrides);
    println!("{name} variants: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let candidate = Candidate::registered(implementation.name, overrides.clone()).unwrap();
    let (mut failures, mut worst, mut count) = (Vec::new(), 0.0f64, 0);
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            for (i, (shape, causal, window)) in
                variant_matrix(head_dim, run.ragged).into_iter().enumerate()
            {
                let shape: Shape = shape.parse().unwrap();
                let params = Params::new(head_dim, causal).with_window(window.parse().unwrap());
                let case_seed = seed.wrapping_add(i as u64);
                let label = format!(
                    "{name} {shape} causal={causal} window={window} {dtype} seed={case_seed}"
                );
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&shape, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{label}: {e}"));
                let sampled = (shape.seq_q >= 1000).then_some(48);
                count += 1;
                let normal = Distribution::Normal;
                let outcome = run_with_params(
                    &gpu, &prepared, shape, dtype, &params, normal, case_seed, sampled,
                );
                let outcome = judged(&label, outcome);
                let outcome = if must_refuse(run, shape.heads, shape.kv_heads) {
                    refused(&label, outcome)
                } else {
                    outcome
                };
                match outcome {
                    Ok(max_abs) => worst = worst.max(max_abs),
                    Err(msg) => failures.push(msg),
                }
            }
        }
    }
    println!(
        "{name} variants: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_variants_match_the_oracle() {
    check_every_schedule("naive", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_variants_match_the_oracle() {
    check_every_schedule("tiled", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_variants_match_the_oracle() {
    check_every_schedule("mma", check_variants_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_variants_match_the_oracle() {
    check_every_schedule("hopper", check_variants_with);
}
