//! Packed variable-length batches against each sequence's oracle, and the gate's GPU reference
//! on them.

use attn_kernels::{Candidate, Gpu, Prepared};
use attn_oracle::{tolerance, CaseSpec, DType, Distribution, Params, Shape};

use crate::oracle::base_seed;
use crate::runs::{check_every_schedule, labelled, must_refuse, refused, Run};

/// One varlen case: query lengths, key lengths, heads (`"HQ/HKV"`), causal, window (`"L,R"`).
type VarlenCase = (Vec<usize>, Vec<usize>, &'static str, bool, &'static str);

/// Packed varlen batches: empty sequences on either side, single rows, lengths around the tiles,
/// S_q ≠ S_kv, grouped heads, with and without causal and windows. `ragged` (a [`Run`]'s lengths)
/// adds a batch of them, and one with the key lengths reversed.
fn varlen_matrix(ragged: &[usize]) -> Vec<VarlenCase> {
    let mixed = vec![300, 1, 0, 64, 129, 1000, 17];
    let mut batches = vec![
        (mixed.clone(), mixed.clone()),
        (vec![5, 77, 0, 260], vec![9, 0, 40, 260]),
        (vec![2048, 512, 1536], vec![2048, 512, 1536]),
    ];
    if !ragged.is_empty() {
        let reversed: Vec<usize> = ragged.iter().rev().copied().collect();
        batches.push((ragged.to_vec(), ragged.to_vec()));
        batches.push((ragged.to_vec(), reversed));
    }
    let mut cases = Vec::new();
    for (q, kv) in batches {
        for heads in ["4/2", "3"] {
            for (causal, window) in [
                (false, "-1,-1"),
                (true, "-1,-1"),
                (true, "50,-1"),
                (false, "8,8"),
            ] {
                cases.push((q.clone(), kv.clone(), heads, causal, window));
            }
        }
    }
    cases
}

/// `name` with `overrides` over [`varlen_matrix`]: the packed output, launched twice (bitwise
/// equal), against each sequence's f64 oracle; and the GPU reference (the gate's) against the same
/// oracle (the shared batches in the implementation's first run, a run's own ragged ones in that
/// run). Returns the failures.
fn check_varlen_with(name: &str, run: &Run) -> Vec<String> {
    use attn_oracle::{compare_varlen, generate_varlen, Varlen};
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    let implementation = attn_kernels::registry::find(name).unwrap();
    let overrides = &run.overrides;
    let name = &labelled(name, overrides);
    println!("{name} varlen: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let candidate = Candidate::registered(implementation.name, overrides.clone()).unwrap();
    let (mut failures, mut worst, mut count) = (Vec::new(), 0.0f64, 0);
    // varlen_matrix lists the batches every run shares first.
    let common_cases = varlen_matrix(&[]).len();
    for dtype in [DType::F16, DType::Bf16] {
        for &head_dim in &run.head_dims {
            let gpu_reference = attn_kernels::GpuReference::new(&gpu, dtype, head_dim).unwrap();
            for (i, (lens_q, lens_kv, heads, causal, window)) in
                varlen_matrix(run.ragged).into_iter().enumerate()
            {
                let varlen = Varlen::new(lens_q.clone(), lens_kv.clone()).unwrap();
                let per_head: Shape = format!("1,{heads},1,{head_dim}").parse().unwrap();
                let params = Params::new(head_dim, causal).with_window(window.parse().unwrap());
                let case_seed = seed.wrapping_add(i as u64);
                let label = format!("{name} varlen q={lens_q:?} kv={lens_kv:?} H={heads} D={head_dim} causal={causal} window={window} {dtype} seed={case_seed}");
                let inputs = generate_varlen(
                    &CaseSpec {
                        shape: per_head,
                        dtype,
                        distribution: Distribution::Normal,
                        seed: case_seed,
                    },
                    &varlen,
                );
                let bounding = varlen.bounding_shape(&per_head).unwrap();
                let prepared = Prepared::new(
                    &gpu,
                    &candidate.for_problem(&bounding, &params, &gpu.limits()),
                    dtype,
                    head_dim,
                )
                .unwrap_or_else(|e| panic!("{label}: {e}"));
                count += 1;
                let outcome = (|| -> Result<(attn_oracle::HostTensor, attn_oracle::HostTensor, Vec<f32>), String> {
                    let e = |e: attn_kernels::KernelError| e.to_string();
                    let (q, k, v) = (gpu.upload(&inputs.q).map_err(e)?, gpu.upload(&inputs.k).map_err(e)?, gpu.upload(&inputs.v).map_err(e)?);
                    let offsets = gpu.upload_offsets(&varlen).map_err(e)?;
                    let mut outs = Vec::new();
                    for _ in 0..2 {
                        let mut o = gpu.alloc_poisoned(q.dims, dtype).map_err(e)?;
                        prepared.launch_batch(&gpu, &q, &k, &v, &mut o, &params, Some(&offsets)).map_err(e)?;
                        gpu.synchronize().map_err(e)?;
                        outs.push(gpu.download(&o).map_err(e)?);
                    }
                    let reference = gpu_reference.compute(&gpu, &q, &k, &v, &params, Some(&offsets)).map_err(e)?;
                    let reference = reference.download(&gpu).map_err(e)?;
                    let second = outs.pop().unwrap();
                    Ok((outs.pop().unwrap(), second, reference))
                })();
                if must_refuse(run, per_head.heads, per_head.kv_heads) {
                    let outcome = outcome.map(|_| 0.0).map_err(|e| format!("{label}: {e}"));
                    if let Err(msg) = refused(&label, outcome) {
                        failures.push(msg);
                    }
                    continue;
                }
                let (first, second, gpu_ref) = match outcome {
                    Ok(x) => x,
                    Err(err) => {
                        failures.push(format!("{label}: {err}"));
                        continue;
                    }
                };
                if first.as_bytes() != second.as_bytes() {
                    failures.push(format!("{label}: two runs differ (a race?)"));
                }
                let tol = tolerance(dtype, Distribution::Normal);
                match compare_varlen(
                    &first, &inputs.q, &inputs.k, &inputs.v, &params, &varlen, &tol,
                ) {
                    Ok(v) if v.passed => worst = worst.max(v.max_abs),
                    Ok(v) => failures.push(format!("{label}: {v}")),
                    Err(err) => failures.push(format!("{label}: {err}")),
                }
                // The gate's f32 reference must itself be right on packed batches: on the common
                // batches once per implementation (the same inputs every run; its f64 oracle of
                // every row is most of a run's time), on a run's own ragged ones each time.
                if !run.first && i < common_cases {
                    continue;
                }
                let exact = attn_oracle::reference_varlen(
                    &inputs.q, &inputs.k, &inputs.v, &params, &varlen,
                )
                .unwrap()
                .to_f64();
                let ref_err = gpu_ref
                    .iter()
                    .zip(&exact)
                    .map(|(g, x)| (f64::from(*g) - x).abs())
                    .fold(0.0, f64::max);
                // NaN fails too (its ordering is None).
                if ref_err.partial_cmp(&1e-4) != Some(std::cmp::Ordering::Less) {
                    failures.push(format!(
                        "{label}: the GPU reference is off the oracle by {ref_err:.3e}"
                    ));
                }
            }
        }
    }
    println!(
        "{name} varlen: {count} cases, {} failed, worst max abs error {worst:.3e}",
        failures.len()
    );
    failures
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn naive_varlen_matches_the_oracle() {
    check_every_schedule("naive", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_varlen_matches_the_oracle() {
    check_every_schedule("tiled", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mma_varlen_matches_the_oracle() {
    check_every_schedule("mma", check_varlen_with);
}

#[test]
#[ignore = "needs a CUDA GPU (Hopper, sm_90)"]
fn hopper_varlen_matches_the_oracle() {
    check_every_schedule("hopper", check_varlen_with);
}
