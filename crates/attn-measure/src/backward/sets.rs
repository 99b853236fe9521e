//! A backward problem's buffers on the device, as a check and a timed side both hold them: the
//! five inputs between guards, with O and the LSE from the gate's reference forward as a training
//! step's forward hands them over ([`BackwardInputs`]), and the gradients between guards with the
//! plan's workspace and its NaN tail ([`BackwardOutputs`]). What a launch wrote outside them, or
//! into its inputs, is read back from them.

use attn_kernels::backward::{
    BackwardArgs, BackwardPlan, BackwardWorkspace, F32Tensor, GpuBackwardReference,
};
use attn_kernels::{Gpu, GuardedTensor, HarnessKernels, VarlenOffsets};
use attn_oracle::{HostTensor, Params};

use crate::guards::Guards;
use crate::problem::Problem;
use crate::Result;

/// f32 words of NaN past the workspace a plan asks for: a write there is a write outside it.
pub const WORKSPACE_TAIL: usize = 256;

/// The names of the five guarded inputs, in [`BackwardInputs::tensors`]' order.
pub const INPUT_NAMES: [&str; 5] = ["Q", "K", "V", "O", "dO"];

/// Q, K, V, O and dO between guards, the LSE, and a varlen batch's offsets.
pub struct BackwardInputs {
    /// Queries.
    pub q: GuardedTensor,
    /// Keys.
    pub k: GuardedTensor,
    /// Values.
    pub v: GuardedTensor,
    /// The forward's output (the reference's).
    pub o: GuardedTensor,
    /// The output's gradient.
    pub d_o: GuardedTensor,
    /// The forward's row log-sum-exp (the reference's).
    pub lse: F32Tensor,
    /// A varlen batch's offsets.
    pub offsets: Option<VarlenOffsets>,
}

impl BackwardInputs {
    /// Q, K, V and dO (`host`, in that order) between `guards` seeded from `seed` (then
    /// `seed ^ 1` to `^ 4` for K, V, O and dO), and O and the LSE of `reference`'s forward under
    /// `params`; with O's host copy.
    pub fn upload(
        gpu: &Gpu,
        problem: &Problem,
        params: &Params,
        reference: &GpuBackwardReference,
        host: [&HostTensor; 4],
        (seed, guards): (u64, Guards),
    ) -> Result<(BackwardInputs, HostTensor)> {
        let [q, k, v, d_o] = host;
        let (q, k, v) = (
            guards.upload(gpu, "Q", q, seed)?,
            guards.upload(gpu, "K", k, seed ^ 1)?,
            guards.upload(gpu, "V", v, seed ^ 2)?,
        );
        let offsets = problem
            .varlen
            .as_ref()
            .map(|v| gpu.upload_offsets(v))
            .transpose()?;
        let (o, lse) = reference.forward_lse(gpu, &q, &k, &v, params, offsets.as_ref())?;
        let o_host = gpu.download(&o)?;
        let inputs = BackwardInputs {
            o: guards.upload(gpu, "O", &o_host, seed ^ 3)?,
            d_o: guards.upload(gpu, "dO", d_o, seed ^ 4)?,
            q,
            k,
            v,
            lse,
            offsets,
        };
        Ok((inputs, o_host))
    }

    /// The arguments of a launch on these inputs.
    pub fn args<'a>(&'a self, problem: &Problem, params: Params) -> BackwardArgs<'a> {
        BackwardArgs {
            shape: problem.shape,
            params,
            q: &self.q,
            k: &self.k,
            v: &self.v,
            o: &self.o,
            d_o: &self.d_o,
            lse: &self.lse,
            offsets: self.offsets.as_ref(),
        }
    }

    /// The five guarded inputs, named by [`INPUT_NAMES`].
    pub fn tensors(&self) -> [&GuardedTensor; 5] {
        [&self.q, &self.k, &self.v, &self.o, &self.d_o]
    }

    /// Checksums of the five inputs (seeded `seed`).
    pub fn checksums(&self, gpu: &Gpu, harness: &HarnessKernels, seed: u64) -> Result<Vec<u64>> {
        self.tensors()
            .iter()
            .map(|t| Ok(harness.checksum(gpu, t, false, seed)?))
            .collect()
    }

    /// What a launch wrote around the five inputs, a line each.
    pub fn outside(&self, gpu: &Gpu) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for t in self.tensors() {
            lines.extend(t.check(gpu)?.map(|violation| violation.to_string()));
        }
        Ok(lines)
    }
}

/// dQ, dK and dV between guards, and the workspace with its NaN tail.
pub struct BackwardOutputs {
    /// The queries' gradient.
    pub dq: GuardedTensor,
    /// The keys' gradient.
    pub dk: GuardedTensor,
    /// The values' gradient.
    pub dv: GuardedTensor,
    /// The workspace `plan` asks for, then [`WORKSPACE_TAIL`] words of NaN.
    pub workspace: BackwardWorkspace,
}

impl BackwardOutputs {
    /// The gradients of `problem`, poisoned between guards seeded `seed ^ 5` to `seed ^ 7`, and
    /// `plan`'s workspace.
    pub fn alloc(
        gpu: &Gpu,
        problem: &Problem,
        plan: &BackwardPlan,
        seed: u64,
    ) -> Result<BackwardOutputs> {
        let (dtype, q_dims, kv_dims) = (problem.dtype, problem.q_dims(), problem.kv_dims());
        Ok(BackwardOutputs {
            dq: GuardedTensor::alloc_poisoned(gpu, "dQ", q_dims, dtype, seed ^ 5)?,
            dk: GuardedTensor::alloc_poisoned(gpu, "dK", kv_dims, dtype, seed ^ 6)?,
            dv: GuardedTensor::alloc_poisoned(gpu, "dV", kv_dims, dtype, seed ^ 7)?,
            workspace: BackwardWorkspace::alloc(gpu, plan, WORKSPACE_TAIL)?,
        })
    }

    /// What a launch wrote around the gradients or past the workspace, a line each.
    pub fn outside(&self, gpu: &Gpu) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for t in [&self.dq, &self.dk, &self.dv] {
            lines.extend(t.check(gpu)?.map(|violation| violation.to_string()));
        }
        if let Some(at) = self.workspace.tail_written(gpu)? {
            lines.push(format!("{at} bytes past the workspace its plan asks for"));
        }
        Ok(lines)
    }
}
