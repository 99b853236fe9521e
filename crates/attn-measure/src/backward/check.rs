//! A backward case's correctness checks: fresh seeded Q, K, V and dO per check, O and the LSE
//! from the gate's own reference forward, and every element of dQ, dK and dV judged against the
//! GPU reference and against the f64 oracle.
//!
//! Q, K, V, O and dO sit between NaN guards, dQ, dK and dV between finite canaries, poisoned
//! before each launch; the workspace is NaN-filled before each launch and has a NaN tail past the
//! size the plan asks for, read back after; the inputs (the LSE too) are checksummed or read back
//! after. Each element's bound takes its rounding scale (attn-oracle's `compare_gradient`), from
//! the oracle where it computes every element and from the GPU reference where the problem is too
//! large for it, the oracle then checking sampled rows. The launch runs twice on the same inputs:
//! a deterministic implementation must give the same bits, any other must pass both times.

use attn_evidence::{CheckFailure, CorrectnessCheck, LaunchGuards};
use attn_kernels::backward::{BackwardArgs, F32Tensor, GpuBackwardReference, PreparedBackward};
use attn_kernels::guard::GUARD_BYTES;
use attn_kernels::{DeviceTensor, Gpu, HarnessKernels};
use attn_oracle::{
    backward_rows, backward_tolerance, backward_varlen_with_scales, backward_with_scales,
    compare_gradient, BackwardTolerance, Distribution, Gradient, Gradients, HostData, HostTensor,
    RowId, RowSelection, Verdict,
};

use super::sets::{BackwardInputs, BackwardOutputs, INPUT_NAMES};
use crate::check::{check_scale, failed, Watched};
use crate::guards::Guards;
use crate::problem::Problem;
use crate::Result;

/// Query-key pairs × D up to which the f64 oracle computes every element (a few seconds on a
/// CPU); beyond, it computes sampled rows and the GPU reference's scales bound the rest.
pub const FULL_ORACLE_WORK: f64 = 2e9;

/// Query rows (and keys) per head the oracle computes beyond [`FULL_ORACLE_WORK`].
pub const SAMPLED_ROWS_PER_HEAD: usize = 8;

/// The (distribution, scale) of each of a case's `checks` checks seeded `seed`: the distributions
/// cycle through [`Distribution::CHECKS`], the scale is [`check_scale`]'s (check 0 never at
/// 1/√D), as a forward check draws them.
pub fn backward_check_plan(
    problem: &Problem,
    seed: u64,
    checks: usize,
) -> Vec<(Distribution, f64)> {
    (0..checks.max(1))
        .map(|i| {
            let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
            (distribution, check_scale(problem, seed, i, distribution))
        })
        .collect()
}

/// Whether the f64 oracle computes every gradient element of `problem` (else sampled rows).
pub fn oracle_is_full(problem: &Problem) -> bool {
    // Sampled rows are dense only (`backward_rows`): a varlen batch takes the whole oracle.
    let s = problem.shape;
    problem.varlen.is_some()
        || (s.batch * s.seq_q * s.seq_kv * s.heads * s.head_dim) as f64 <= FULL_ORACLE_WORK
}

/// Runs every check of [`backward_check_plan`]; `seed` the first check's seed.
pub fn run_backward_checks(
    gpu: &Gpu,
    prepared: &PreparedBackward,
    problem: &Problem,
    seed: u64,
    checks: usize,
    watched: Watched<'_>,
) -> Result<Vec<CorrectnessCheck>> {
    let harness = HarnessKernels::new(gpu)?;
    let reference = GpuBackwardReference::new(gpu, problem.dtype, problem.shape.head_dim)?;
    let mut previous: Option<Vec<u8>> = None;
    let mut out = Vec::new();
    for (i, (distribution, scale)) in backward_check_plan(problem, seed, checks)
        .into_iter()
        .enumerate()
    {
        let check_seed = seed.wrapping_add(i as u64 * 0x9e37);
        let ctx = CheckInputs {
            problem,
            distribution,
            seed: check_seed,
            scale,
        };
        let (check, bytes) = check_one(gpu, prepared, &reference, &harness, &ctx, watched)?;
        let stale = previous.as_ref().is_some_and(|p| *p == bytes);
        previous = Some(bytes);
        out.push(if stale && check.passed {
            failed(
                check,
                CheckFailure::Stale,
                "the gradients are byte-identical to the previous check's on new inputs".into(),
            )
        } else {
            check
        });
    }
    Ok(out)
}

/// One check's problem, inputs and scale.
#[derive(Debug, Clone, Copy)]
pub struct CheckInputs<'a> {
    /// The problem (its own scale is replaced by `scale`).
    pub problem: &'a Problem,
    /// Q, K, V and dO's distribution.
    pub distribution: Distribution,
    /// Their seed.
    pub seed: u64,
    /// The softmax scale the launches pass.
    pub scale: f64,
}

/// One check (see the module); returns it and the first launch's gradients' bytes.
pub fn check_one(
    gpu: &Gpu,
    prepared: &PreparedBackward,
    reference: &GpuBackwardReference,
    harness: &HarnessKernels,
    ctx: &CheckInputs<'_>,
    watched: Watched<'_>,
) -> Result<(CorrectnessCheck, Vec<u8>)> {
    let CheckInputs {
        problem,
        distribution,
        seed,
        scale,
    } = *ctx;
    let params = problem.params.with_scale(scale);
    let inputs = problem.generate(distribution, seed);
    let d_o = problem.generate(distribution, seed ^ 0x5eed_d0d0).q;
    let (g, o_host) = BackwardInputs::upload(
        gpu,
        problem,
        &params,
        reference,
        [&inputs.q, &inputs.k, &inputs.v, &d_o],
        (seed, Guards::Reads),
    )?;
    let lse_host = g.lse.download(gpu)?;
    let args = g.args(problem, params);
    let exact_gpu = reference.gradients(gpu, &args)?;
    let download = |t: &F32Tensor| t.download(gpu);
    let gpu_grads = Gradients {
        dq: download(&exact_gpu.dq)?,
        dk: download(&exact_gpu.dk)?,
        dv: download(&exact_gpu.dv)?,
    };
    let gpu_scales = Gradients {
        dq: download(&exact_gpu.dq_scale)?,
        dk: download(&exact_gpu.dk_scale)?,
        dv: download(&exact_gpu.dv_scale)?,
    };
    let before = g.checksums(gpu, harness, seed)?;

    let dtype = problem.dtype;
    let plan = prepared.plan(&problem.shape, problem.varlen.as_ref())?;
    let mut out = BackwardOutputs::alloc(gpu, problem, &plan, seed)?;
    let first = launch(gpu, prepared, &args, &mut out, watched)?;
    let second = launch(gpu, prepared, &args, &mut out, watched)?;
    let after = g.checksums(gpu, harness, seed)?;

    let mut outside = g.outside(gpu)?;
    outside.extend(out.outside(gpu)?);
    let mut inputs_written: Vec<String> = INPUT_NAMES
        .into_iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| b != a)
        .map(|(name, _)| name.to_string())
        .collect();
    if g.lse.download(gpu)?.as_bytes() != lse_host.as_bytes() {
        inputs_written.push("LSE".into());
    }
    let identical = [
        (&first.dq, &second.dq),
        (&first.dk, &second.dk),
        (&first.dv, &second.dv),
    ]
    .iter()
    .all(|(a, b)| a.as_bytes() == b.as_bytes());

    // Against the GPU reference, every element, bounded with its scales.
    let table = backward_tolerance(dtype, distribution);
    let judge = |found: &Gradients, truth: &Gradients, scales: &Gradients| {
        judge_gradients(&table, found, truth, scales)
    };
    let against_gpu = judge(&first, &gpu_grads, &gpu_scales);
    // Against the f64 oracle: every element where it is cheap, else sampled rows.
    let oracle_inputs = (&inputs.q, &inputs.k, &inputs.v, &o_host, &d_o, &lse_host);
    let (against_oracle, rows) = against_the_oracle(
        problem,
        &params,
        seed,
        oracle_inputs,
        &first,
        &gpu_scales,
        &table,
    )?;
    // A non-deterministic implementation's second launch must be right too.
    let second_ok = judge(&second, &gpu_grads, &gpu_scales);

    let worst = |verdicts: &[(Gradient, Verdict)]| {
        verdicts
            .iter()
            .find(|(_, v)| !v.passed)
            .map(|(gradient, v)| (*gradient, v.clone()))
    };
    let all: Vec<&Verdict> = against_oracle
        .iter()
        .chain(&against_gpu)
        .map(|(_, v)| v)
        .collect();
    let max_abs = all.iter().map(|v| v.max_abs).fold(0.0, f64::max);
    let rel_l2 = all.iter().map(|v| v.rel_l2).fold(0.0, f64::max);
    let poison = all.iter().map(|v| v.poison_count).max().unwrap_or(0);
    let non_finite = all
        .iter()
        .map(|v| v.nan_count + v.inf_count)
        .max()
        .unwrap_or(0);
    let wrong = worst(&against_oracle)
        .map(|(g, v)| (g, v, "the f64 oracle"))
        .or_else(|| worst(&against_gpu).map(|(g, v)| (g, v, "the GPU reference")));
    let guards = LaunchGuards {
        guard_bytes: GUARD_BYTES as u64,
        input_guards_after: g
            .tensors()
            .iter()
            .map(|t| t.guard_bytes()[1] as u64)
            .collect(),
        read_probe_launches: 0,
        read_outside: vec![],
        outside: outside.clone(),
        inputs_written: inputs_written.clone(),
        launches: 2,
        identical,
    };
    let mut check = CorrectnessCheck {
        seed,
        distribution: distribution.to_string(),
        passed: wrong.is_none(),
        max_abs,
        rel_l2,
        nan_count: non_finite,
        poison_count: poison,
        reason: wrong.as_ref().map(|(gradient, v, against)| {
            format!(
                "{} {}against {against}",
                gradient_name(*gradient),
                v.reason
                    .as_deref()
                    .map(|r| format!("{r} "))
                    .unwrap_or_default()
            )
        }),
        sdpa_max_abs: None,
        closer_to: None,
        failure: wrong.as_ref().map(|_| CheckFailure::Incorrect),
        rows: Some(format!(
            "every element against the GPU reference; {rows} against the f64 oracle"
        )),
        // The whole-tensor comparison is the GPU reference's (every element), named in `rows`.
        full: None,
        scale: Some(scale),
        shape: Some(problem.spec.to_string()),
        guards: Some(guards),
    };
    if !check.passed && poison > 0 {
        check.failure = Some(CheckFailure::Unwritten);
    } else if !check.passed && non_finite > 0 {
        check.failure = Some(CheckFailure::NonFinite);
    }
    let check = if !outside.is_empty() {
        failed(
            check,
            CheckFailure::WroteOutside,
            format!("wrote outside its outputs ({})", outside.join("; ")),
        )
    } else if !inputs_written.is_empty() {
        failed(
            check,
            CheckFailure::WroteInputs,
            format!("wrote into its inputs ({})", inputs_written.join(", ")),
        )
    } else if check.passed && prepared.deterministic() && !identical {
        failed(
            check,
            CheckFailure::NonDeterministic,
            "declared deterministic, but two launches on the same inputs differ".into(),
        )
    } else if let Some((gradient, v)) = worst(&second_ok).filter(|_| check.passed) {
        failed(
            check,
            CheckFailure::NonDeterministic,
            format!(
                "the second launch on the same inputs is wrong: {} {}",
                gradient_name(gradient),
                v.reason.unwrap_or_default()
            ),
        )
    } else {
        check
    };
    let check = CorrectnessCheck {
        reason: check.reason.map(|r| {
            format!(
                "{r} [{} {distribution} inputs, seed {seed}, scale {scale:.4}]",
                problem.spec
            )
        }),
        ..check
    };
    let mut bytes = first.dq.as_bytes().to_vec();
    bytes.extend_from_slice(first.dk.as_bytes());
    bytes.extend_from_slice(first.dv.as_bytes());
    Ok((check, bytes))
}

/// Each gradient of `found` against `truth`, every element bounded with its `scales`.
fn judge_gradients(
    table: &BackwardTolerance,
    found: &Gradients,
    truth: &Gradients,
    scales: &Gradients,
) -> Vec<(Gradient, Verdict)> {
    [
        (Gradient::Dq, &found.dq, &truth.dq, &scales.dq),
        (Gradient::Dk, &found.dk, &truth.dk, &scales.dk),
        (Gradient::Dv, &found.dv, &truth.dv, &scales.dv),
    ]
    .into_iter()
    .map(|(gradient, out, want, scale)| {
        let tolerance = table.for_gradient(gradient, want);
        (
            gradient,
            compare_gradient(out, want, Some(scale), &tolerance),
        )
    })
    .collect()
}

/// Q, K, V, O, dO and the LSE on the host, as the f64 oracle takes them.
pub(crate) type OracleInputs<'t> = (
    &'t HostTensor,
    &'t HostTensor,
    &'t HostTensor,
    &'t HostTensor,
    &'t HostTensor,
    &'t HostTensor,
);

/// `found` judged against the f64 oracle on `inputs`: every element where [`oracle_is_full`],
/// else [`SAMPLED_ROWS_PER_HEAD`] sampled query rows and keys per head drawn from `seed`, bounded
/// with `gpu_scales` (the GPU reference's); the verdicts and which elements they cover.
pub(crate) fn against_the_oracle(
    problem: &Problem,
    params: &attn_oracle::Params,
    seed: u64,
    inputs: OracleInputs<'_>,
    found: &Gradients,
    gpu_scales: &Gradients,
    table: &BackwardTolerance,
) -> Result<(Vec<(Gradient, Verdict)>, String)> {
    if oracle_is_full(problem) {
        let (exact, scales) = full_oracle(problem, params, inputs)?;
        return Ok((
            judge_gradients(table, found, &exact, &scales),
            "every element".to_string(),
        ));
    }
    let selection = RowSelection::Sampled {
        rows_per_head: SAMPLED_ROWS_PER_HEAD,
        seed,
    };
    let (q, k, v, o, d_o, lse) = inputs;
    let sampled = backward_rows(q, k, v, o, d_o, lse, params, &selection)?;
    let shape = problem.shape;
    let at_rows = |t: &HostTensor, ids: &[RowId], heads: usize, seq: usize| {
        gather_rows(t, ids, heads, seq, shape.head_dim)
    };
    let (h, hk, sq, skv) = (shape.heads, shape.kv_heads, shape.seq_q, shape.seq_kv);
    let rows_of = |grads: &Gradients| Gradients {
        dq: at_rows(&grads.dq, &sampled.query_rows, h, sq),
        dk: at_rows(&grads.dk, &sampled.key_rows, hk, skv),
        dv: at_rows(&grads.dv, &sampled.key_rows, hk, skv),
    };
    let d = shape.head_dim;
    let f64_rows = |values: &[f64]| HostTensor {
        dims: [1, 1, values.len() / d, d],
        data: HostData::F64(values.to_vec()),
    };
    let exact = Gradients {
        dq: f64_rows(&sampled.dq),
        dk: f64_rows(&sampled.dk),
        dv: f64_rows(&sampled.dv),
    };
    let label = format!("{SAMPLED_ROWS_PER_HEAD} sampled query rows and keys per head");
    Ok((
        judge_gradients(table, &rows_of(found), &exact, &rows_of(gpu_scales)),
        label,
    ))
}

pub(crate) fn gradient_name(gradient: Gradient) -> &'static str {
    match gradient {
        Gradient::Dq => "dQ",
        Gradient::Dk => "dK",
        Gradient::Dv => "dV",
    }
}

/// The oracle's every element and its scales, dense or packed.
fn full_oracle(
    problem: &Problem,
    params: &attn_oracle::Params,
    (q, k, v, o, d_o, lse): OracleInputs<'_>,
) -> Result<(Gradients, Gradients)> {
    Ok(match &problem.varlen {
        None => backward_with_scales(q, k, v, o, d_o, lse, params)?,
        Some(varlen) => backward_varlen_with_scales(q, k, v, o, d_o, lse, params, varlen)?,
    })
}

/// The rows `ids` of a dense `[B, heads, seq, d]` tensor, as `[1, 1, ids.len(), d]` (f64).
pub fn gather_rows(
    t: &HostTensor,
    ids: &[RowId],
    heads: usize,
    seq: usize,
    d: usize,
) -> HostTensor {
    let values = t.to_f64();
    let mut out = Vec::with_capacity(ids.len() * d);
    for id in ids {
        let at = ((id.batch * heads + id.head) * seq + id.row) * d;
        out.extend_from_slice(&values[at..at + d]);
    }
    HostTensor {
        dims: [1, 1, ids.len(), d],
        data: HostData::F64(out),
    }
}

/// One launch of the candidate on `args` into `out` (poisoned, workspace NaN-filled first),
/// under the watchdog; the gradients downloaded.
fn launch(
    gpu: &Gpu,
    prepared: &PreparedBackward,
    args: &BackwardArgs<'_>,
    out: &mut BackwardOutputs,
    watched: Watched<'_>,
) -> Result<Gradients> {
    for t in [&mut out.dq, &mut out.dk, &mut out.dv] {
        gpu.poison(t)?;
    }
    out.workspace.poison(gpu)?;
    let BackwardOutputs {
        dq,
        dk,
        dv,
        workspace,
    } = out;
    let (dq, dk, dv): (&mut DeviceTensor, &mut DeviceTensor, &mut DeviceTensor) = (dq, dk, dv);
    let mut run = || -> attn_kernels::Result<()> {
        prepared.launch_args(gpu, args, dq, dk, dv, workspace.buffer())?;
        gpu.synchronize()
    };
    match watched {
        Some((w, bound)) => w.guard(bound, "a backward check launch", run)?,
        None => run()?,
    }
    Ok(Gradients {
        dq: gpu.download(&out.dq)?,
        dk: gpu.download(&out.dk)?,
        dv: gpu.download(&out.dv)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_zero_never_runs_at_one_over_root_d_and_the_plan_is_seeded() {
        let problem = Problem::parse("2,8/2,300,64 causal bf16").unwrap();
        let base = problem.params.scale;
        for seed in 0..100u64 {
            let plan = backward_check_plan(&problem, seed, 5);
            assert_eq!(plan.len(), 5);
            assert!((plan[0].1 / base - 1.0).abs() > 1e-9, "seed {seed}");
            assert_eq!(plan, backward_check_plan(&problem, seed, 5));
        }
    }

    #[test]
    fn the_oracle_takes_every_element_of_small_problems_and_rows_of_large_ones() {
        assert!(oracle_is_full(
            &Problem::parse("2,8/2,300,64 causal").unwrap()
        ));
        assert!(!oracle_is_full(
            &Problem::parse("2,16,8192,128 causal").unwrap()
        ));
        let varlen = Problem::parse("varlen=3:100,1:0 H=4/2 D=64").unwrap();
        assert!(oracle_is_full(&varlen));
    }

    #[test]
    fn gathered_rows_are_the_rows_asked_for() {
        let values: Vec<f64> = (0..2 * 3 * 4 * 2).map(f64::from).collect();
        let t = HostTensor {
            dims: [2, 3, 4, 2],
            data: HostData::F64(values),
        };
        let ids = [
            RowId {
                batch: 1,
                head: 2,
                row: 3,
            },
            RowId {
                batch: 0,
                head: 0,
                row: 1,
            },
        ];
        let rows = gather_rows(&t, &ids, 3, 4, 2);
        assert_eq!(rows.dims, [1, 1, 2, 2]);
        assert_eq!(rows.to_f64(), [46.0, 47.0, 2.0, 3.0]);
    }
}
