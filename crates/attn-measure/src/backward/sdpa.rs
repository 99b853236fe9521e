//! PyTorch SDPA's backward as a baseline of the backward gate (`--baseline sdpa`, `sdpa:cudnn`,
//! `sdpa:flash`, `sdpa:efficient`, `sdpa:math`, or `sdpa` with `--sdpa-backend`), through the
//! same helper process as the forward's SDPA baseline ([`crate::sdpa`]); and FlashAttention-3's
//! (`--baseline fa3`, through JAX in the same helper, batch mode only: each set's forward once,
//! a timed call FA3's backward alone).
//!
//! What is timed: given Q, K, V and dO, each input set's forward runs once outside the timed
//! region, with requires_grad under the chosen `sdpa_kernel` backend and its graph kept; a timed
//! launch is `torch.autograd.grad(out, (q, k, v), grad_outputs=do, retain_graph=True)`: the
//! backward kernels autograd launches for that backend (PyTorch's dO·O row-sum preprocessing
//! included, as our backward side's `attn_bwd_pre` is, and any dQ accumulator zero-fill or
//! conversion, as our `attn_bwd_pre` and `attn_bwd_post` are) plus autograd's dispatch, which a
//! CUDA graph's replay (graph and batch modes, as the forward's SDPA side) takes off the device's
//! timeline and flushed mode leaves in (see evidence/METHOD.md, `sdpa-backward-autograd`).
//! Grouped heads go through SDPA's own GQA path (`enable_gqa`), as in the forward; windows and
//! varlen batches are refused ([`backward_refusal`]) before any helper or GPU probe.
//!
//! Before it is timed, SDPA's gradients on the gate's own inputs (Q, K, V and dO drawn as the
//! backward checks draw them, sent as `.npy` files as the forward's second reference sends its
//! inputs) are judged against the f64 oracle ([`check_sdpa_gradients`]): a yardstick that
//! computes something else is an error, not a baseline.

use attn_kernels::backward::{BackwardArgs, GpuBackwardReference};
use attn_kernels::{Gpu, TimingOptions, Timings};
use attn_oracle::{backward_tolerance, npy, Distribution, Gradients};

use super::check::{against_the_oracle, gradient_name};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::{flush_bytes, TimedSide};
use crate::{MeasureError, Problem, Result};

/// Why SDPA's backward with `backend` is no baseline for `problem`, one line naming the
/// alternative; `None` when it is one.
pub fn backward_refusal(problem: &Problem, backend: Backend) -> Option<String> {
    if backend == Backend::Fa3 {
        // FA3's backward takes windows; its packed entry point is not wired as a baseline.
        return problem.varlen.is_some().then(|| format!(
            "{problem}: FlashAttention-3's backward baseline takes dense batches; gate a packed varlen batch against a backward implementation (--baseline backward-naive)"
        ));
    }
    if !backend.is_sdpa() {
        return Some(format!(
            "{problem}: {backend} times no backward pass here: SDPA's own backends (default, flash, efficient, cudnn, math), fa3 or a backward implementation (--baseline backward-naive)"
        ));
    }
    if problem.varlen.is_some() {
        return Some(format!(
            "{problem}: PyTorch SDPA's backward takes dense batches, so it is no baseline for a packed varlen batch (a padded batch is other work); gate against a backward implementation (--baseline backward-naive)"
        ));
    }
    problem.params.window.is_bounded().then(|| format!(
        "{problem}: PyTorch SDPA has no sliding-window kernel (a boolean mask runs its dense masked paths), so its backward is no baseline for a window; gate against a backward implementation (--baseline backward-naive)"
    ))
}

/// The SDPA backend `--baseline NAME` names for a backward gate, `backend` being
/// `--sdpa-backend`: `sdpa` takes it, `sdpa:BACKEND` names its own (the forward's evidence label,
/// `sdpa:cudnn`); `None` when NAME is not SDPA. An unknown backend, one that is not SDPA's own,
/// or `sdpa:X` beside a different `--sdpa-backend` is refused in one line.
pub fn sdpa_backend_of(name: &str, backend: Backend) -> Option<Result<Backend>> {
    let named = match name.strip_prefix("sdpa:") {
        Some(text) => match text.parse::<Backend>() {
            Ok(named) if backend != Backend::Default && backend != named => {
                return Some(Err(MeasureError::Invalid(format!(
                    "--baseline {name} and --sdpa-backend {backend} name two SDPA backends: give one"
                ))))
            }
            Ok(named) => named,
            Err(e) => return Some(Err(e)),
        },
        None if name == "sdpa" => backend,
        None if name == "fa3" => Backend::Fa3,
        None => return None,
    };
    Some(if named.is_sdpa() || named == Backend::Fa3 {
        Ok(named)
    } else {
        Err(MeasureError::Invalid(format!(
            "--baseline {name} (backend {named}) cannot time a backward pass: SDPA's own backends (sdpa, sdpa:flash, sdpa:efficient, sdpa:cudnn, sdpa:math), fa3 or a backward implementation (backward-naive)"
        )))
    })
}

/// SDPA's backward as a timed side: the helper's own input sets, as many as the candidate's.
#[derive(Debug)]
pub struct SdpaBackwardSide<'a> {
    gpu: &'a Gpu,
    sdpa: &'a Sdpa,
    backend: Backend,
    problem: &'a Problem,
    sets: usize,
    seed: u64,
    flush_bytes: usize,
}

impl<'a> SdpaBackwardSide<'a> {
    /// SDPA's backward with `backend` on `sets` input sets of `problem` drawn from `seed` (as many
    /// as the candidate rotates over: evidence/METHOD.md, `equal-input-sets`).
    pub fn new(
        gpu: &'a Gpu,
        sdpa: &'a Sdpa,
        backend: Backend,
        problem: &'a Problem,
        sets: usize,
        seed: u64,
    ) -> SdpaBackwardSide<'a> {
        SdpaBackwardSide {
            gpu,
            sdpa,
            backend,
            problem,
            sets,
            seed,
            flush_bytes: flush_bytes(gpu),
        }
    }
}

impl TimedSide for SdpaBackwardSide<'_> {
    fn block(&mut self, opts: &TimingOptions) -> Result<Timings> {
        // Nothing of this process may run on the device while the helper times (see
        // evidence/METHOD.md, `sdpa-idle-device`).
        self.gpu.synchronize()?;
        self.sdpa.time_backward(
            self.problem,
            self.backend,
            opts,
            self.sets,
            self.seed,
            self.flush_bytes,
        )
    }
}

/// SDPA's dQ, dK and dV on normal inputs of `problem` drawn from `seed` as a backward check
/// draws them, judged against the f64 oracle as a check judges the candidate's (every element of
/// a small problem, sampled rows of a large one); a mismatch is one line.
pub fn check_sdpa_gradients(
    gpu: &Gpu,
    sdpa: &Sdpa,
    backend: Backend,
    problem: &Problem,
    seed: u64,
) -> Result<()> {
    if let Some(why) = backward_refusal(problem, backend) {
        return Err(MeasureError::Invalid(why));
    }
    let (dtype, params) = (problem.dtype, problem.params);
    let inputs = problem.generate(Distribution::Normal, seed);
    let d_o = problem.generate(Distribution::Normal, seed ^ 0x5eed_d0d0).q;
    // The LSE, and the GPU reference's rounding scales that bound sampled rows, as for a check.
    let reference = GpuBackwardReference::new(gpu, dtype, problem.shape.head_dim)?;
    let (q, k, v) = (
        gpu.upload(&inputs.q)?,
        gpu.upload(&inputs.k)?,
        gpu.upload(&inputs.v)?,
    );
    let (o, lse) = reference.forward_lse(gpu, &q, &k, &v, &params, None)?;
    let d_o_device = gpu.upload(&d_o)?;
    let args = BackwardArgs {
        shape: problem.shape,
        params,
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        d_o: &d_o_device,
        lse: &lse,
        offsets: None,
    };
    let exact = reference.gradients(gpu, &args)?;
    let gpu_scales = Gradients {
        dq: exact.dq_scale.download(gpu)?,
        dk: exact.dk_scale.download(gpu)?,
        dv: exact.dv_scale.download(gpu)?,
    };
    let lse_host = lse.download(gpu)?;
    gpu.synchronize()?;

    let label = crate::baseline::sdpa_implementation(backend).label();
    let io = |what: &'static str| {
        move |e: attn_oracle::OracleError| MeasureError::Sdpa(format!("{what}: {e}"))
    };
    let path = |name: &str| sdpa.scratch(&format!("backward-{name}.npy"));
    let [pq, pk, pv, pdo, pdq, pdk, pdv, po] =
        ["q", "k", "v", "do", "dq", "dk", "dv", "o"].map(path);
    for (p, t) in [
        (&pq, &inputs.q),
        (&pk, &inputs.k),
        (&pv, &inputs.v),
        (&pdo, &d_o),
    ] {
        npy::write(p, t).map_err(io("writing SDPA's backward inputs"))?;
    }
    sdpa.run_backward(
        [&pq, &pk, &pv, &pdo],
        [&pdq, &pdk, &pdv, &po],
        problem,
        backend,
    )
    .map_err(|e| MeasureError::Sdpa(format!("{label}'s backward on {problem}: {e}")))?;
    let read = |p: &std::path::Path| npy::read_as(p, dtype).map_err(io("reading SDPA's gradients"));
    let found = Gradients {
        dq: read(&pdq)?,
        dk: read(&pdk)?,
        dv: read(&pdv)?,
    };
    // The oracle is given SDPA's own O: autograd's backward reads its forward's O (in dO·O), not
    // the gate's reference forward's, so that a rounding difference in O is not held against it.
    let sdpa_o = read(&po)?;
    for p in [&pq, &pk, &pv, &pdo, &pdq, &pdk, &pdv, &po] {
        let _ = std::fs::remove_file(p);
    }
    let table = backward_tolerance(dtype, Distribution::Normal);
    let oracle_inputs = (&inputs.q, &inputs.k, &inputs.v, &sdpa_o, &d_o, &lse_host);
    let (verdicts, rows) = against_the_oracle(
        problem,
        &params,
        seed,
        oracle_inputs,
        &found,
        &gpu_scales,
        &table,
    )?;
    match verdicts.iter().find(|(_, v)| !v.passed) {
        None => Ok(()),
        Some((gradient, verdict)) => Err(MeasureError::Sdpa(format!(
            "{label}'s backward {} differs from the f64 oracle on {problem} ({rows}, normal inputs, seed {seed}): {}",
            gradient_name(*gradient),
            verdict.reason.as_deref().unwrap_or("outside its bound")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdpa_backward_refuses_windows_varlen_and_other_backends_in_one_line() {
        let window = Problem::parse("2,16,2048,128 causal window=256,-1").unwrap();
        let varlen = Problem::parse("varlen=512,300 H=8/2 D=64 causal").unwrap();
        let gqa = Problem::parse("2,16/4,2048,128 causal bf16").unwrap();
        let why = backward_refusal(&window, Backend::Cudnn).unwrap();
        assert!(
            why.contains("sliding-window") && why.contains("backward-naive"),
            "{why}"
        );
        let why = backward_refusal(&varlen, Backend::Default).unwrap();
        assert!(
            why.contains("packed varlen batch") && why.contains("backward-naive"),
            "{why}"
        );
        let why = backward_refusal(&gqa, Backend::Flex).unwrap();
        assert!(why.contains("flex times no backward"), "{why}");
        // FlashAttention-3's backward takes grouped heads and windows, not a packed batch.
        assert_eq!(backward_refusal(&gqa, Backend::Fa3), None);
        assert_eq!(backward_refusal(&window, Backend::Fa3), None);
        let why = backward_refusal(&varlen, Backend::Fa3).unwrap();
        assert!(
            why.contains("FlashAttention-3") && why.contains("dense"),
            "{why}"
        );
        for why in [
            backward_refusal(&window, Backend::Flash),
            backward_refusal(&varlen, Backend::Math),
            backward_refusal(&varlen, Backend::Fa3),
        ] {
            assert!(!why.unwrap().contains('\n'));
        }
        for backend in [
            Backend::Default,
            Backend::Flash,
            Backend::Efficient,
            Backend::Cudnn,
        ] {
            assert_eq!(backward_refusal(&gqa, backend), None, "{backend}");
        }
    }

    #[test]
    fn sdpa_baselines_are_named_as_the_forward_labels_them() {
        let of = |name: &str, backend| {
            sdpa_backend_of(name, backend).map(|r| r.map_err(|e| e.to_string()))
        };
        assert_eq!(of("sdpa", Backend::Default), Some(Ok(Backend::Default)));
        assert_eq!(of("sdpa", Backend::Cudnn), Some(Ok(Backend::Cudnn)));
        assert_eq!(of("sdpa:cudnn", Backend::Default), Some(Ok(Backend::Cudnn)));
        assert_eq!(of("sdpa:flash", Backend::Flash), Some(Ok(Backend::Flash)));
        assert_eq!(
            of("sdpa:efficient", Backend::Default),
            Some(Ok(Backend::Efficient))
        );
        assert_eq!(of("fa3", Backend::Default), Some(Ok(Backend::Fa3)));
        assert_eq!(of("sdpa", Backend::Fa3), Some(Ok(Backend::Fa3)));
        assert_eq!(of("backward-naive", Backend::Default), None);
        assert_eq!(of("sdpa-ish", Backend::Default), None);
        let err = of("sdpa:fast", Backend::Default).unwrap().unwrap_err();
        assert!(err.contains("unknown SDPA backend `fast`"), "{err}");
        let err = of("sdpa:cudnn", Backend::Flash).unwrap().unwrap_err();
        assert!(err.contains("two SDPA backends"), "{err}");
        for (name, backend) in [("sdpa:flex", Backend::Default), ("sdpa", Backend::Varlen)] {
            let err = of(name, backend).unwrap().unwrap_err();
            assert!(
                err.contains("cannot time a backward pass") && !err.contains('\n'),
                "{err}"
            );
        }
        assert_eq!(
            crate::baseline::sdpa_implementation(Backend::Cudnn).label(),
            "sdpa:cudnn"
        );
    }
}
