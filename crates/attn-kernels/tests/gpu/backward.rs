//! Backward kernels (`backward-naive`, `backward-mma` under several configs, and both files through
//! the `--src` path) against the f64 oracle's `backward` from the same rounded O and LSE, and
//! against the GPU reference (`backward_reference.cu`), itself checked against the oracle: a
//! matrix of dense, grouped, causal, windowed, ragged and varlen problems, both dtypes, D 64 and
//! 128. Every launch's outputs are poisoned and its workspace filled with NaNs first (so every
//! element must be written and nothing of the workspace read before it is initialised), and a
//! deterministic implementation must give the same bits twice.

use std::collections::HashMap;
use std::path::PathBuf;

use attn_kernels::backward::{
    BackwardBatch, BackwardInputs, GpuBackwardReference, PreparedBackward,
};
use attn_kernels::{Config, Gpu, KernelError};
use attn_oracle::{
    backward_tolerance, backward_varlen_with_scales, backward_with_scales, compare_gradient,
    compare_lse, forward_varlen, forward_with_lse, generate, generate_varlen, CaseSpec, DType,
    Distribution, Gradient, Gradients, HostTensor, Params, Shape, Varlen,
};

use crate::oracle::base_seed;

/// The implementations and configs run: the yardstick, the defaults, and the mma kernel's other
/// tile shapes (8 warps, 32-row tiles, one stage, 32 keys per warp at D=64).
const RUNS: [(&str, &str); 8] = [
    ("backward-naive", ""),
    ("backward-mma", ""),
    ("backward-mma", "NUM_WARPS=8"),
    ("backward-mma", "BLOCK_M=32,NUM_WARPS=2"),
    ("backward-mma", "STAGES=1"),
    ("backward-mma", "BLOCK_N=128"),
    // Ordered dQ adds: declared deterministic, so its two launches must be the same bits.
    ("backward-mma", "DETERMINISTIC=1"),
    ("backward-mma", "DETERMINISTIC=1,BLOCK_M=32,NUM_WARPS=2"),
];

/// One problem of the matrix.
#[derive(Debug, Clone)]
struct Case {
    /// `B,H[/H_kv],S_q[,S_kv],D` with `{d}` for the head dim; a varlen case's heads and D only.
    shape: &'static str,
    /// A varlen batch's query and key lengths.
    varlen: Option<(Vec<usize>, Vec<usize>)>,
    causal: bool,
    /// `L,R`, `-1` unbounded.
    window: &'static str,
    /// The softmax scale over 1/√D (the gate varies it).
    scale_factor: f64,
}

fn case(shape: &'static str, causal: bool, window: &'static str) -> Case {
    Case {
        shape,
        varlen: None,
        causal,
        window,
        scale_factor: 1.0,
    }
}

/// Dense MHA, GQA 8/2 and a group of 3, MQA, causal with S_q < S_kv and S_q > S_kv (rows that
/// see no key), windows on either side and both, ragged lengths against every tile, S_q = 1, a
/// scale other than 1/√D, and varlen batches with empty sequences on either side.
fn matrix() -> Vec<Case> {
    let mut cases = vec![
        case("2,4,200,{d}", false, "-1,-1"),
        case("1,4,100,300,{d}", true, "-1,-1"),
        case("1,4,300,100,{d}", true, "-1,-1"),
        case("1,8/2,129,257,{d}", true, "-1,-1"),
        case("2,6/2,77,{d}", false, "20,5"),
        case("1,4/1,150,{d}", false, "30,-1"),
        case("1,4/1,150,{d}", true, "40,-1"),
        case("1,2,100,{d}", false, "-1,10"),
        case("1,3,65,33,{d}", false, "-1,-1"),
        // One query row over 5 keys (with one key P = 1, and dQ and dK are exactly 0: no
        // relative bound holds for them).
        case("2,2,1,5,{d}", true, "-1,-1"),
        case("1,2,1000,{d}", true, "-1,-1"),
        Case {
            scale_factor: 2.5,
            ..case("1,4/2,97,130,{d}", true, "-1,-1")
        },
    ];
    for (q, kv, heads, causal, window) in [
        (
            vec![100, 0, 37, 1],
            vec![80, 50, 0, 200],
            "4/2",
            true,
            "-1,-1",
        ),
        (
            vec![300, 1, 0, 64, 129],
            vec![300, 1, 0, 64, 129],
            "3",
            false,
            "8,8",
        ),
        (vec![5, 77, 260], vec![9, 40, 260], "6/2", true, "50,-1"),
    ] {
        cases.push(Case {
            shape: heads,
            varlen: Some((q, kv)),
            causal,
            window,
            scale_factor: 1.0,
        });
    }
    cases
}

/// A case's problem at `head_dim`: its (bounding) shape, params and varlen lengths.
fn problem(case: &Case, head_dim: usize) -> (Shape, Params, Option<Varlen>) {
    let d = head_dim.to_string();
    let params = Params::new(head_dim, case.causal).with_window(case.window.parse().unwrap());
    let params = params.with_scale(params.scale * case.scale_factor);
    match &case.varlen {
        None => (case.shape.replace("{d}", &d).parse().unwrap(), params, None),
        Some((q, kv)) => {
            let varlen = Varlen::new(q.clone(), kv.clone()).unwrap();
            let per_head: Shape = format!("1,{},1,{d}", case.shape).parse().unwrap();
            (
                varlen.bounding_shape(&per_head).unwrap(),
                params,
                Some(varlen),
            )
        }
    }
}

/// Fresh seeded Q, K, V and dO of the problem (dO drawn like Q from another seed).
fn draw(shape: Shape, varlen: Option<&Varlen>, dtype: DType, seed: u64) -> [HostTensor; 4] {
    let spec = |seed| CaseSpec {
        shape: match varlen {
            None => shape,
            // generate_varlen takes the heads and head dim from the shape.
            Some(_) => Shape {
                batch: 1,
                seq_q: 1,
                seq_kv: 1,
                ..shape
            },
        },
        dtype,
        distribution: Distribution::Normal,
        seed,
    };
    let make = |seed| match varlen {
        None => generate(&spec(seed)),
        Some(varlen) => generate_varlen(&spec(seed), varlen),
    };
    let (inputs, grad) = (make(seed), make(seed ^ 0x5eed_d0d0));
    [inputs.q, inputs.k, inputs.v, grad.q]
}

/// The f64 oracle's gradients from the given (rounded) O and LSE, and their rounding scales.
fn oracle(
    inputs: &BackwardInputs,
    params: &Params,
    varlen: Option<&Varlen>,
) -> Result<(Gradients, Gradients), String> {
    let BackwardInputs {
        q,
        k,
        v,
        o,
        d_o,
        lse,
    } = inputs;
    match varlen {
        None => backward_with_scales(q, k, v, o, d_o, lse, params),
        Some(varlen) => backward_varlen_with_scales(q, k, v, o, d_o, lse, params, varlen),
    }
    .map_err(|e| e.to_string())
}

/// Every gradient of `found` against `exact` under the backward tolerance with the oracle's
/// rounding `scales` (poison, NaN and Inf fail it); the failures, labelled, and the worst
/// relative L2 error.
fn judge(
    label: &str,
    found: &Gradients,
    (exact, scales): (&Gradients, &Gradients),
    dtype: DType,
) -> (Vec<String>, f64) {
    let table = backward_tolerance(dtype, Distribution::Normal);
    let (mut failures, mut worst) = (Vec::new(), 0.0f64);
    for (gradient, name, out, truth, scale) in [
        (Gradient::Dq, "dQ", &found.dq, &exact.dq, &scales.dq),
        (Gradient::Dk, "dK", &found.dk, &exact.dk, &scales.dk),
        (Gradient::Dv, "dV", &found.dv, &exact.dv, &scales.dv),
    ] {
        let tolerance = table.for_gradient(gradient, truth);
        let verdict = compare_gradient(out, truth, Some(scale), &tolerance);
        worst = worst.max(verdict.rel_l2);
        if !verdict.passed || verdict.poison_count > 0 {
            failures.push(format!("{label} {name}: {verdict}"));
        }
    }
    (failures, worst)
}

/// Where the GPU reference's f32 rounding scales differ from the oracle's f64 ones by more than
/// f32 sums allow (1e-4 relative, a floor for scales near 0): the first such element.
fn scale_mismatch(found: &HostTensor, want: &HostTensor) -> Option<String> {
    if found.dims != want.dims {
        return Some(format!("dims {:?}, not {:?}", found.dims, want.dims));
    }
    let (found, want) = (found.to_f64(), want.to_f64());
    let peak = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    found
        .iter()
        .zip(&want)
        // Written so that a NaN on either side is a mismatch.
        .position(|(f, w)| (f - w).abs().is_nan() || (f - w).abs() > 1e-4 * w.abs() + 1e-6 * peak)
        .map(|at| {
            format!(
                "at element {at}: {:.6e}, the oracle's {:.6e}",
                found[at], want[at]
            )
        })
}

/// A compiled run by (run index, dtype, head dim); `None` where the config does not take the head
/// dim (BLOCK_N=128 at D=128).
type Compiled = HashMap<(usize, DType, usize), Option<PreparedBackward>>;

fn prepared<'a>(
    gpu: &Gpu,
    cache: &'a mut Compiled,
    run: usize,
    dtype: DType,
    head_dim: usize,
) -> Option<&'a PreparedBackward> {
    cache
        .entry((run, dtype, head_dim))
        .or_insert_with(|| {
            let (name, overrides) = RUNS[run];
            match PreparedBackward::new(gpu, name, &overrides.parse().unwrap(), dtype, head_dim) {
                Ok(p) => Some(p),
                Err(KernelError::InvalidConfig { .. }) => None,
                Err(e) => panic!("{name} [{overrides}] {dtype} D={head_dim}: {e}"),
            }
        })
        .as_ref()
}

/// One case at one dtype and head dim: the GPU reference's forward (O, LSE) checked against the
/// f64 forward, its gradients against the oracle's, then each of `kernels` twice (poisoned outputs,
/// NaN workspace) against both. Returns the failures and each kernel's worst relative L2 error.
fn check(
    gpu: &Gpu,
    reference: &GpuBackwardReference,
    kernels: &[(String, &PreparedBackward)],
    case: &Case,
    dtype: DType,
    head_dim: usize,
    seed: u64,
) -> (Vec<String>, Vec<f64>) {
    let (shape, params, varlen) = problem(case, head_dim);
    let label = format!(
        "{shape} varlen={:?} causal={} window={} scale={:.4} {dtype} seed={seed}",
        case.varlen, case.causal, case.window, params.scale
    );
    let fail = |what: String| (vec![what], vec![]);
    let [q, k, v, d_o] = draw(shape, varlen.as_ref(), dtype, seed);
    // O and the LSE from the gate's reference forward, as a backward's inputs would be.
    let forward = (|| -> Result<(HostTensor, HostTensor), KernelError> {
        let (qd, kd, vd) = (gpu.upload(&q)?, gpu.upload(&k)?, gpu.upload(&v)?);
        let offsets = varlen.as_ref().map(|v| gpu.upload_offsets(v)).transpose()?;
        let (o, lse) = reference.forward_lse(gpu, &qd, &kd, &vd, &params, offsets.as_ref())?;
        Ok((gpu.download(&o)?, lse.download(gpu)?))
    })();
    let (o, lse) = match forward {
        Ok(x) => x,
        Err(e) => return fail(format!("{label}: reference forward: {e}")),
    };
    let exact_forward = match &varlen {
        None => forward_with_lse(&q, &k, &v, &params),
        Some(varlen) => forward_varlen(&q, &k, &v, &params, varlen),
    }
    .unwrap();
    let forward_tolerance = backward_tolerance(dtype, Distribution::Normal).lse;
    let lse_verdict = compare_lse(&lse, &exact_forward.lse, &forward_tolerance);
    let mut failures = Vec::new();
    if !lse_verdict.passed {
        failures.push(format!("{label}: reference LSE: {lse_verdict}"));
    }
    let inputs = BackwardInputs {
        q,
        k,
        v,
        o,
        d_o,
        lse,
    };
    let (exact, scales) = match oracle(&inputs, &params, varlen.as_ref()) {
        Ok(x) => x,
        Err(e) => return fail(format!("{label}: oracle: {e}")),
    };
    // The GPU reference's gradients, f32, against the oracle: the whole-gradient check's own error;
    // and its rounding scales against the oracle's (a gate judges by them where the f64 oracle
    // covers only sampled rows).
    let gpu_reference = (|| -> Result<(Gradients, Gradients), KernelError> {
        let batch = BackwardBatch::upload(gpu, shape, params, varlen.as_ref(), &inputs)?;
        let grads = reference.gradients(gpu, &batch.args())?;
        Ok((
            Gradients {
                dq: grads.dq.download(gpu)?,
                dk: grads.dk.download(gpu)?,
                dv: grads.dv.download(gpu)?,
            },
            Gradients {
                dq: grads.dq_scale.download(gpu)?,
                dk: grads.dk_scale.download(gpu)?,
                dv: grads.dv_scale.download(gpu)?,
            },
        ))
    })();
    let (gpu_reference, gpu_scales) = match gpu_reference {
        Ok(x) => x,
        Err(e) => return fail(format!("{label}: reference gradients: {e}")),
    };
    let truth = (&exact, &scales);
    failures.extend(judge(&format!("reference {label}"), &gpu_reference, truth, dtype).0);
    for (name, found, want) in [
        ("dQ", &gpu_scales.dq, &scales.dq),
        ("dK", &gpu_scales.dk, &scales.dk),
        ("dV", &gpu_scales.dv, &scales.dv),
    ] {
        let off = scale_mismatch(found, want);
        if let Some(off) = off {
            failures.push(format!("reference {label}: {name} scales {off}"));
        }
    }
    let mut worst = Vec::new();
    for (name, kernel) in kernels {
        let label = format!("{name} {label}");
        let run = || kernel.run(gpu, shape, params, varlen.as_ref(), &inputs);
        let (first, second) = match (run(), run()) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                failures.push(format!("{label}: {e}"));
                worst.push(f64::INFINITY);
                continue;
            }
        };
        let (against_oracle, error) = judge(&label, &first, truth, dtype);
        let (again, _) = judge(&format!("{label} (second launch)"), &second, truth, dtype);
        // The GPU reference in the oracle's place, with the oracle's scales: both are exact to
        // f32, far below the bound.
        let (against_gpu, _) = judge(
            &format!("{label} vs the GPU reference"),
            &first,
            (&gpu_reference, &scales),
            dtype,
        );
        failures.extend(against_oracle.into_iter().chain(again).chain(against_gpu));
        let same = [
            (&first.dq, &second.dq),
            (&first.dk, &second.dk),
            (&first.dv, &second.dv),
        ]
        .iter()
        .all(|(a, b)| a.as_bytes() == b.as_bytes());
        if kernel.deterministic() && !same {
            failures.push(format!(
                "{label}: declared deterministic, two launches differ"
            ));
        }
        worst.push(error);
    }
    (failures, worst)
}

fn kernels_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../kernels")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn backward_kernels_match_the_oracle_and_the_gpu_reference() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("backward: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut compiled = Compiled::new();
    let (mut failures, mut count) = (Vec::new(), 0usize);
    let mut worst = vec![0.0f64; RUNS.len()];
    let mut index = 0u64;
    for head_dim in [64usize, 128] {
        for dtype in [DType::F16, DType::Bf16] {
            let reference = GpuBackwardReference::new(&gpu, dtype, head_dim).unwrap();
            let runs: Vec<usize> = (0..RUNS.len())
                .filter(|&run| prepared(&gpu, &mut compiled, run, dtype, head_dim).is_some())
                .collect();
            let kernels: Vec<(String, &PreparedBackward)> = runs
                .iter()
                .map(|&run| {
                    let (name, overrides) = RUNS[run];
                    let kernel = compiled[&(run, dtype, head_dim)].as_ref().unwrap();
                    (format!("{name} [{overrides}]"), kernel)
                })
                .collect();
            for case in matrix() {
                index += 1;
                count += 1;
                let (found, errors) = check(
                    &gpu,
                    &reference,
                    &kernels,
                    &case,
                    dtype,
                    head_dim,
                    seed.wrapping_add(index),
                );
                failures.extend(found);
                for (&run, error) in runs.iter().zip(errors) {
                    worst[run] = worst[run].max(error);
                }
            }
        }
    }
    for (run, (name, overrides)) in RUNS.iter().enumerate() {
        println!(
            "{name} [{overrides}]: worst relative L2 error {:.3e}",
            worst[run]
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures over {count} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn backward_kernels_run_through_the_src_path() {
    let _device = attn_kernels::device_lock(0);
    let gpu = Gpu::open(0).expect("a CUDA GPU");
    let seed = base_seed();
    println!("backward --src: base seed {seed} (ATTN_TEST_SEED={seed} to replay)");
    let mut failures = Vec::new();
    for head_dim in [64usize, 128] {
        let dtype = DType::Bf16;
        let mma = attn_kernels::backward::find_backward("backward-mma").unwrap();
        let mma_shared = mma
            .geometry(&mma.default_config(head_dim), head_dim)
            .main_shared;
        // The registered geometries written as the README's --src defines.
        let sources = [
            (
                "backward_naive.cu",
                "ROWS_PER_BLOCK=4,BLOCK_M=4,BLOCK_N=4,NUM_WARPS=4,VARIANTS=1,DETERMINISTIC=1"
                    .to_string(),
            ),
            (
                "backward_mma.cu",
                format!("VARIANTS=1,SHARED_BYTES={mma_shared}"),
            ),
        ];
        let reference = GpuBackwardReference::new(&gpu, dtype, head_dim).unwrap();
        for (file, defines) in sources {
            let defines: Config = defines.parse().unwrap();
            let kernel = PreparedBackward::from_source(
                &gpu,
                &kernels_dir().join(file),
                &defines,
                dtype,
                head_dim,
            )
            .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(kernel.label(), format!("src:{file}"));
            let kernels = [(kernel.label().to_string(), &kernel)];
            for (i, case) in [
                case("1,8/2,129,257,{d}", true, "-1,-1"),
                Case {
                    shape: "4/2",
                    varlen: Some((vec![100, 0, 37], vec![80, 50, 0])),
                    causal: true,
                    window: "-1,-1",
                    scale_factor: 1.0,
                },
            ]
            .iter()
            .enumerate()
            {
                let (found, _) = check(
                    &gpu,
                    &reference,
                    &kernels,
                    case,
                    dtype,
                    head_dim,
                    seed.wrapping_add(i as u64),
                );
                failures.extend(found);
            }
        }
        // Without VARIANTS=1 a --src kernel runs dense multi-head problems only, refused in one line.
        let plain = PreparedBackward::from_source(
            &gpu,
            &kernels_dir().join("backward_naive.cu"),
            &"BLOCK_M=4,BLOCK_N=4".parse().unwrap(),
            dtype,
            head_dim,
        )
        .unwrap();
        let (shape, params, _) = problem(&case("1,8/2,64,{d}", false, "-1,-1"), head_dim);
        let [q, k, v, d_o] = draw(shape, None, dtype, seed);
        let lse = HostTensor::from_f64([1, 8, 64, 1], DType::F32, &[0.0; 512]);
        let inputs = BackwardInputs {
            o: q.clone(),
            q,
            k,
            v,
            d_o,
            lse,
        };
        match plain.run(&gpu, shape, params, None, &inputs) {
            Err(KernelError::Unsupported { what, .. }) => {
                assert!(what.contains("VARIANTS=1"), "{what}")
            }
            other => failures.push(format!(
                "a --src kernel without VARIANTS=1 ran GQA: {other:?}"
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
