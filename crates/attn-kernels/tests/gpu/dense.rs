//! Every implementation over the matrix of shapes (both dtypes, causal on and off), other head
//! dims and unequal lengths, and a kernel that writes nothing caught by the poison.

use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::{DType, Distribution, Params, Shape};

use crate::oracle::{base_seed, judged, run_against_oracle, run_with_params};
use crate::runs::{check_every_schedule, labelled, must_refuse, refused, Run};

struct Case {
    batch: usize,
    heads: usize,
    seq: usize,
    head_dim: usize,
    causal: bool,
    dtype: DType,
}

/// The shapes every implementation runs, plus `ragged` (a [`Run`]'s lengths ragged at its tile).
fn matrix(head_dims: &[usize], ragged: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in head_dims {
            for causal in [false, true] {
                for &seq in [1, 17, 64, 100, 512, 1000, 2048].iter().chain(ragged) {
                    for (batch, heads) in [(1, 1), (1, 5), (3, 1), (3, 5)] {
                        cases.push(Case {
                            batch,
                            heads,
                            seq,
                            head_dim,
                            causal,
                            dtype,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// Runs one case; returns a one-line failure, or the max abs error.
fn check(gpu: &Gpu, prepared: &Prepared, case: &Case, seed: u64) -> Result<f64, String> {
    let shape = Shape::new(case.batch, case.heads, case.seq, case.seq, case.head_dim)
        .map_err(|e| e.to_string())?;
    let label = format!(
        "{} {shape:?} causal={} {} seed={seed}",
        prepared.label(),
        case.causal,
        case.dtype
    );
    let sampled = (case.seq >= 512).then_some(48);
    judged(
        &label,
        run_against_oracle(gpu, prepared, shape, case.dtype, case.causal, seed, sampled),
    )
}

/// The matrix of shapes for `name` in `run`; returns the failures (printing the count).
fn check_implementation_with(name: &str, run: &Run) -> Vec<String> {
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let overrides = &run.overrides;
    let label = labelled(name, overrides);
    println!("{label}: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    let mut count = 0;
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            let candidate = Candidate::registered(name, overrides.clone()).unwrap();
            for (i, case) in matrix(&[head_dim], run.ragged)
                .iter()
                .filter(|c| c.dtype == dtype)
                .enumerate()
            {
                // The config the implementation tunes for this shape (compiles are cached).
                let shape =
                    Shape::new(case.batch, case.heads, case.seq, case.seq, head_dim).unwrap();
                let params = Params::new(head_dim, case.causal);
                // Multi-head only: a run that must refuse it does so at launch (the short rows
                // suffice).
                let refuses = must_refuse(run, case.heads, case.heads);
                if refuses && case.seq > 100 {
                    continue;
                }
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&shape, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                count += 1;
                let outcome = check(&gpu, &prepared, case, seed.wrapping_add(i as u64));
                let outcome = if refuses {
                    refused(prepared.label(), outcome)
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
        "{label}: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("naive", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("tiled", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("mma", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hopper", check_implementation_with);
}

/// hopper with conditional rescaling (LAZY_RESCALE=1: a row keeps its max while a key tile raises
/// it by at most 8 in the log2 domain, and a warp whose rows all kept theirs skips O's rescale) on
/// inputs whose row maxima jump after the first tile, so that both its paths run where normal
/// inputs almost only skip: peaky rows (one key at logit 20, anywhere in the row) and large logits
/// (≈ 150 ± 5), ragged lengths, both schedules (and at D=128 the two Q tiles of 160-key tiles),
/// both masks, dtypes and head dims.
#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_lazy_rescale_matches_the_oracle_when_row_maxima_jump() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    let mut count = 0u64;
    // The full grids' two Q tiles of 160-key tiles (tuned from 2048 keys a row at D=128) too,
    // their 128-row blocks named: these small grids would be tuned to 64-row ones.
    let two_q_160 = "LAZY_RESCALE=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,\
                     BLOCK_M=128,NUM_WARPS=8,OVERLAP=1,PINGPONG=1";
    for (overrides, head_dims) in [
        ("LAZY_RESCALE=1,SCHEDULE=0", [64, 128].as_slice()),
        ("LAZY_RESCALE=1,SCHEDULE=1", &[64, 128]),
        (two_q_160, &[128]),
    ] {
        let candidate = Candidate::registered("hopper", overrides.parse().unwrap()).unwrap();
        for dtype in [DType::F16, DType::Bf16] {
            for &head_dim in head_dims {
                for causal in [false, true] {
                    for (batch, heads, seq) in [(1, 3, 1000), (2, 2, 4099)] {
                        for distribution in [Distribution::Peaky, Distribution::LargeMagnitude] {
                            let shape = Shape::new(batch, heads, seq, seq, head_dim).unwrap();
                            let params = Params::new(head_dim, causal);
                            let candidate = candidate.for_problem(&shape, &params, &gpu.limits());
                            let prepared = Prepared::new(&gpu, &candidate, dtype, head_dim)
                                .unwrap_or_else(|e| panic!("{e}"));
                            count += 1;
                            let case_seed = seed.wrapping_add(count);
                            let label = format!(
                                "{} {shape:?} causal={causal} {dtype} {distribution:?} seed={case_seed}",
                                prepared.label()
                            );
                            let outcome = run_with_params(
                                &gpu,
                                &prepared,
                                shape,
                                dtype,
                                &params,
                                distribution,
                                case_seed,
                                Some(48),
                            );
                            if let Err(msg) = judged(&label, outcome) {
                                failures.push(msg);
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "hopper LAZY_RESCALE=1: {count} cases, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cublas_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("cublas", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hybrid_qk_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hybrid-qk", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hybrid_pv_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    check_every_schedule("hybrid-pv", check_implementation_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_handles_other_head_dims_and_unequal_lengths() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    for (head_dim, seq_q, seq_kv, causal) in [
        (96, 33, 70, true),
        (32, 70, 33, true),
        (200, 5, 9, false),
        (64, 100, 37, true),
    ] {
        let prepared = Prepared::new(
            &gpu,
            &Candidate::registered("naive", Config::default()).unwrap(),
            DType::F16,
            head_dim,
        )
        .unwrap();
        let shape = Shape::new(2, 3, seq_q, seq_kv, head_dim).unwrap();
        let verdict = run_against_oracle(&gpu, &prepared, shape, DType::F16, causal, seed, None)
            .unwrap()
            .verdict;
        assert!(
            verdict.passed,
            "naive D={head_dim} Sq={seq_q} Skv={seq_kv} causal={causal} seed={seed}: {:?}",
            verdict.reason
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_that_writes_nothing_is_caught_by_the_poison() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let dir = tempfile_dir();
    let path = dir.join("lazy.cu");
    std::fs::write(&path, "#include \"attn_common.cuh\"\nextern \"C\" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int b, int h, int sq, int skv, float s, int c) {}\n").unwrap();
    let candidate = Candidate::from_file(&path, None, Config::default()).unwrap();
    let prepared = Prepared::new(&gpu, &candidate, DType::F16, 64).unwrap();
    let shape = Shape::new(1, 2, 64, 64, 64).unwrap();
    let verdict = run_against_oracle(&gpu, &prepared, shape, DType::F16, false, base_seed(), None)
        .unwrap()
        .verdict;
    assert!(!verdict.passed);
    assert_eq!(
        verdict.poison_count,
        shape.q_len(),
        "every element still holds the poison"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-gpu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The starter Triton kernel (kernels/examples/starter_triton.py), built by the device's Triton
/// for its architecture, over the same matrix of shapes: the Triton front end's build, PTX load,
/// grid, block, shared memory and null scratch pointers, checked as any kernel is.
#[test]
#[ignore = "needs a CUDA GPU and Triton"]
fn the_starter_triton_kernel_matches_the_oracle() {
    // One GPU test at a time on the device (tests of other executables too).
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let starter = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../kernels/examples/starter_triton.py");
    let defines: Config = "BLOCK_M=64,BLOCK_N=64".parse().unwrap();
    let candidate = Candidate::from_triton(&starter, "attn_fwd", defines).unwrap();
    println!("starter_triton: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let (mut failures, mut worst, mut count) = (Vec::new(), 0.0f64, 0);
    for (i, case) in matrix(&[64, 128], &[]).iter().enumerate() {
        let prepared = Prepared::new(&gpu, &candidate, case.dtype, case.head_dim)
            .unwrap_or_else(|e| panic!("{e}"));
        count += 1;
        match check(&gpu, &prepared, case, seed.wrapping_add(i as u64)) {
            Ok(max_abs) => worst = worst.max(max_abs),
            Err(msg) => failures.push(msg),
        }
    }
    println!(
        "starter_triton: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
