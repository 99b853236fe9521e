//! A backward pass's buffers: f32 device tensors (the LSE, the reference's gradients), the inputs
//! on the host and on the device ([`BackwardInputs`], [`BackwardBatch`]), a launch's buffers by
//! reference ([`BackwardArgs`]), and the checks of every buffer's dims against the problem before
//! any launch ([`check_backward`]).

use attn_oracle::{DType, HostData, HostTensor, Params, Shape, Varlen};
use cudarc::driver::{CudaSlice, DevicePtrMut};

use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu, VarlenOffsets};

use super::registry::BackwardPlan;

/// An f32 device tensor: the forward's LSE, the GPU reference's gradients.
#[derive(Debug)]
pub struct F32Tensor {
    /// Its dims.
    pub dims: [usize; 4],
    /// The elements.
    pub buf: CudaSlice<f32>,
}

impl F32Tensor {
    /// `tensor` (any element type) as f32 on the device: exact for f16, bf16 and f32, rounded for
    /// f64 (an oracle's LSE), with −∞ kept.
    pub fn upload(gpu: &Gpu, tensor: &HostTensor) -> Result<F32Tensor> {
        if tensor.len() != tensor.dims.iter().product::<usize>() {
            return Err(KernelError::Shape(format!(
                "a tensor of dims {:?} holds {} elements",
                tensor.dims,
                tensor.len()
            )));
        }
        let values: Vec<f32> = tensor.to_f64().iter().map(|&x| x as f32).collect();
        Ok(F32Tensor {
            dims: tensor.dims,
            buf: gpu
                .stream()
                .clone_htod(&values)
                .during("cuMemcpyHtoD (f32 tensor)")?,
        })
    }

    /// `dims` of f32 on the device, every element left for a kernel to write.
    ///
    /// # Safety
    /// Nothing may read the elements before a kernel writes every one of them.
    pub(crate) unsafe fn alloc_unwritten(gpu: &Gpu, dims: [usize; 4]) -> Result<F32Tensor> {
        let len = dims.iter().product();
        // SAFETY: the caller guarantees every element is written before it is read.
        let buf = unsafe { gpu.stream().alloc::<f32>(len) }.during("cuMemAlloc (f32 tensor)")?;
        Ok(F32Tensor { dims, buf })
    }

    /// Copies it back (synchronises).
    pub fn download(&self, gpu: &Gpu) -> Result<HostTensor> {
        let values = gpu
            .stream()
            .clone_dtoh(&self.buf)
            .during("cuMemcpyDtoH (f32 tensor)")?;
        gpu.synchronize()?;
        Ok(HostTensor {
            dims: self.dims,
            data: HostData::F32(values),
        })
    }
}

/// A backward pass's inputs on the host: Q, K, V, the forward's O, the loss's gradient dO (all of
/// the kernel's dtype) and the forward's LSE (any element type; f32 on the device).
#[derive(Debug, Clone)]
pub struct BackwardInputs {
    /// Queries, `[B, H, S_q, D]` (varlen: `[1, total_q, H, D]`).
    pub q: HostTensor,
    /// Keys, `[B, H_kv, S_kv, D]` (varlen: `[1, total_kv, H_kv, D]`).
    pub k: HostTensor,
    /// Values, as K.
    pub v: HostTensor,
    /// The forward's output, as Q.
    pub o: HostTensor,
    /// The loss's gradient in O, as Q.
    pub d_o: HostTensor,
    /// The forward's row LSE, `[B, H, S_q, 1]` (varlen: `[1, total_q, H, 1]`).
    pub lse: HostTensor,
}

/// A backward pass's inputs on the device, with the problem they are of.
#[derive(Debug)]
pub struct BackwardBatch {
    /// The problem's dense shape, or a varlen batch's bounding shape.
    pub shape: Shape,
    /// Its scale and mask.
    pub params: Params,
    /// Q.
    pub q: DeviceTensor,
    /// K.
    pub k: DeviceTensor,
    /// V.
    pub v: DeviceTensor,
    /// The forward's O.
    pub o: DeviceTensor,
    /// dO.
    pub d_o: DeviceTensor,
    /// The forward's LSE, f32.
    pub lse: F32Tensor,
    /// A varlen batch's offsets.
    pub offsets: Option<VarlenOffsets>,
}

impl BackwardBatch {
    /// Uploads `inputs` of `shape` (a varlen batch: its bounding shape, with `varlen`'s offsets).
    pub fn upload(
        gpu: &Gpu,
        shape: Shape,
        params: Params,
        varlen: Option<&Varlen>,
        inputs: &BackwardInputs,
    ) -> Result<BackwardBatch> {
        Ok(BackwardBatch {
            shape,
            params,
            q: gpu.upload(&inputs.q)?,
            k: gpu.upload(&inputs.k)?,
            v: gpu.upload(&inputs.v)?,
            o: gpu.upload(&inputs.o)?,
            d_o: gpu.upload(&inputs.d_o)?,
            lse: F32Tensor::upload(gpu, &inputs.lse)?,
            offsets: varlen.map(|v| gpu.upload_offsets(v)).transpose()?,
        })
    }

    /// Its buffers, as a launch takes them.
    pub fn args(&self) -> BackwardArgs<'_> {
        BackwardArgs {
            shape: self.shape,
            params: self.params,
            q: &self.q,
            k: &self.k,
            v: &self.v,
            o: &self.o,
            d_o: &self.d_o,
            lse: &self.lse,
            offsets: self.offsets.as_ref(),
        }
    }
}

/// A backward launch's inputs by reference, wherever they live: a [`BackwardBatch`]'s own buffers,
/// or the interiors of guarded buffers that a check watches.
#[derive(Debug, Clone, Copy)]
pub struct BackwardArgs<'a> {
    /// The problem's dense shape, or a varlen batch's bounding shape (the grids').
    pub shape: Shape,
    /// Its scale (any finite value the launch passes) and mask.
    pub params: Params,
    /// Q.
    pub q: &'a DeviceTensor,
    /// K.
    pub k: &'a DeviceTensor,
    /// V.
    pub v: &'a DeviceTensor,
    /// The forward's O.
    pub o: &'a DeviceTensor,
    /// dO.
    pub d_o: &'a DeviceTensor,
    /// The forward's LSE, f32.
    pub lse: &'a F32Tensor,
    /// A varlen batch's offsets (`None`: dense).
    pub offsets: Option<&'a VarlenOffsets>,
}

impl BackwardArgs<'_> {
    /// The varlen batch's lengths, if it is one.
    pub fn varlen(&self) -> Option<&Varlen> {
        self.offsets.map(|o| &o.varlen)
    }

    /// Every input's dtype is `dtype`: the one the kernel was compiled for.
    pub fn check_dtype(&self, dtype: DType) -> Result<()> {
        for (name, t) in [
            ("Q", self.q),
            ("K", self.k),
            ("V", self.v),
            ("O", self.o),
            ("dO", self.d_o),
        ] {
            if t.dtype != dtype {
                return Err(KernelError::Shape(format!(
                    "backward {name} is {}, the kernel was compiled for {dtype}",
                    t.dtype
                )));
            }
        }
        Ok(())
    }

    /// The dims of its buffers, with those of the outputs given.
    pub fn dims(&self, outputs: [&DeviceTensor; 3]) -> BackwardDims {
        let [dq, dk, dv] = outputs.map(|t| t.dims);
        BackwardDims {
            q: self.q.dims,
            k: self.k.dims,
            v: self.v.dims,
            o: self.o.dims,
            d_o: self.d_o.dims,
            lse: self.lse.dims,
            dq,
            dk,
            dv,
            offsets: self.offsets.map(|o| (o.cu_q.len(), o.cu_kv.len())),
        }
    }
}

/// The dims of a backward launch's buffers, as [`check_backward`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardDims {
    /// Q's dims.
    pub q: [usize; 4],
    /// K's.
    pub k: [usize; 4],
    /// V's.
    pub v: [usize; 4],
    /// O's.
    pub o: [usize; 4],
    /// dO's.
    pub d_o: [usize; 4],
    /// The LSE's.
    pub lse: [usize; 4],
    /// dQ's.
    pub dq: [usize; 4],
    /// dK's.
    pub dk: [usize; 4],
    /// dV's.
    pub dv: [usize; 4],
    /// Entries of `cu_seqlens_q` and `cu_seqlens_kv`, for a varlen batch.
    pub offsets: Option<(usize, usize)>,
}

/// Checks every buffer of a launch against the problem and the kernel's head dim, in one line:
/// dense Q, O, dO and dQ `[B, H, S_q, D]`, K, V, dK, dV `[B, H_kv, S_kv, D]`, the LSE
/// `[B, H, S_q, 1]`; varlen (`varlen` its lengths, `shape` its bounding shape) the same packed,
/// `[1, total, heads, D]` and `[1, total_q, H, 1]`, with `B + 1` offsets on each side.
pub fn check_backward(
    shape: &Shape,
    varlen: Option<&Varlen>,
    dims: &BackwardDims,
    head_dim: usize,
) -> Result<()> {
    let shape_error = |what: String| Err(KernelError::Shape(what));
    if shape.head_dim != head_dim {
        return shape_error(format!(
            "the problem has head dim {}, the kernel was compiled for {head_dim}",
            shape.head_dim
        ));
    }
    if shape.kv_heads == 0 || shape.heads % shape.kv_heads != 0 {
        return shape_error(format!(
            "{} query heads over {} K/V heads: the K/V heads must divide the query heads",
            shape.heads, shape.kv_heads
        ));
    }
    let (queries, keys, lse) = match varlen {
        None => {
            if [shape.batch, shape.heads, shape.seq_q, shape.seq_kv].contains(&0) {
                return shape_error(format!("an empty problem: {shape}"));
            }
            let [b, h, s, _] = shape.q_dims();
            (shape.q_dims(), shape.kv_dims(), [b, h, s, 1])
        }
        Some(varlen) => {
            let bounding = varlen
                .bounding_shape(shape)
                .map_err(|e| KernelError::Shape(e.to_string()))?;
            if bounding != *shape {
                return shape_error(format!(
                    "a varlen batch of {} sequences (longest {} queries, {} keys) is the shape {bounding}, not {shape}",
                    varlen.sequences(),
                    bounding.seq_q,
                    bounding.seq_kv
                ));
            }
            let sequences = varlen.sequences();
            if dims.offsets != Some((sequences + 1, sequences + 1)) {
                return shape_error(format!(
                    "{:?} cu_seqlens entries (q, kv) for {sequences} sequences: {} each",
                    dims.offsets,
                    sequences + 1
                ));
            }
            let (tq, tkv) = (varlen.total_q(), varlen.total_kv());
            (
                [1, tq, shape.heads, head_dim],
                [1, tkv, shape.kv_heads, head_dim],
                [1, tq, shape.heads, 1],
            )
        }
    };
    if varlen.is_none() && dims.offsets.is_some() {
        return shape_error("a dense problem takes no cu_seqlens".into());
    }
    let layout = if varlen.is_some() { "packed" } else { "dense" };
    for (name, found, expected) in [
        ("Q", dims.q, queries),
        ("O", dims.o, queries),
        ("dO", dims.d_o, queries),
        ("dQ", dims.dq, queries),
        ("K", dims.k, keys),
        ("V", dims.v, keys),
        ("dK", dims.dk, keys),
        ("dV", dims.dv, keys),
        ("LSE", dims.lse, lse),
    ] {
        if found != expected {
            return shape_error(format!(
                "backward {name} is {found:?}, the {layout} problem {shape} needs {expected:?}"
            ));
        }
    }
    Ok(())
}

/// Fills `workspace` with NaNs (asynchronously, on the GPU's stream), as the gate does before the
/// launches it checks: a kernel must initialise whatever of it it reads.
pub fn poison_workspace(gpu: &Gpu, workspace: &mut CudaSlice<f32>) -> Result<()> {
    let len = workspace.len();
    let stream = gpu.stream();
    let (ptr, _guard) = workspace.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses `len` f32 words owned by `workspace`, on our stream.
    unsafe {
        cudarc::driver::sys::cuMemsetD32Async(ptr, f32::NAN.to_bits(), len, stream.cu_stream())
    }
    .result()
    .during("cuMemsetD32Async (workspace)")
}

/// A backward's workspace as a gate gives it: the words its plan asks for, then a tail of NaN
/// words past them, read back after a launch (a write there is a write outside the workspace).
#[derive(Debug)]
pub struct BackwardWorkspace {
    buf: CudaSlice<f32>,
    needed: usize,
}

impl BackwardWorkspace {
    /// `plan`'s workspace and `tail` words more (at least one word in all), NaN-filled.
    pub fn alloc(gpu: &Gpu, plan: &BackwardPlan, tail: usize) -> Result<BackwardWorkspace> {
        let needed = plan.workspace_bytes.div_ceil(4) as usize;
        let buf = gpu
            .stream()
            .alloc_zeros::<f32>((needed + tail).max(1))
            .during("cuMemAlloc (backward workspace)")?;
        let mut workspace = BackwardWorkspace { buf, needed };
        workspace.poison(gpu)?;
        Ok(workspace)
    }

    /// Every word NaN again (asynchronously, on the GPU's stream), as before each checked launch.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        poison_workspace(gpu, &mut self.buf)
    }

    /// The whole buffer, as [`crate::backward::PreparedBackward::launch_args`] takes it.
    pub fn buffer(&mut self) -> &mut CudaSlice<f32> {
        &mut self.buf
    }

    /// The byte offset past the plan's workspace of the first tail word that is no longer NaN's
    /// bits (after everything enqueued on the GPU's stream), if any.
    pub fn tail_written(&self, gpu: &Gpu) -> Result<Option<usize>> {
        let tail = self.buf.slice(self.needed..);
        if tail.is_empty() {
            return Ok(None);
        }
        let words = gpu
            .stream()
            .clone_dtoh(&tail)
            .during("cuMemcpyDtoH (workspace tail)")?;
        gpu.synchronize()?;
        let nan = f32::NAN.to_bits();
        Ok(words
            .iter()
            .position(|w| w.to_bits() != nan)
            .map(|at| 4 * at))
    }
}
