//! The gate's own backward kernels on the GPU (`kernels/backward_reference.cu`): the forward with
//! its row LSE, which makes a backward's inputs O and LSE, and the whole gradient in f32, which
//! checks every element of a candidate's dQ, dK and dV.

use attn_oracle::{DType, Params, Shape, Tolerance, ELEMENT_SPREAD};
use cudarc::driver::{CudaFunction, DevicePtr, LaunchConfig, PushKernelArg};

use crate::compile::CompileRequest;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu, VarlenOffsets};
use crate::reference::Counters;

use super::batch::{check_backward, BackwardArgs, BackwardDims, F32Tensor};

const SOURCE: &str = include_str!("../../../../kernels/backward_reference.cu");
/// Rows (warps) per block of both kernels (`ROWS_PER_BLOCK` in the source).
const ROWS_PER_BLOCK: usize = 4;

/// The reference's gradients, f32, in the layouts of Q, K and V, and each element's rounding
/// scale (the square root of the sum of its terms squared, as attn-oracle's
/// `backward_with_scales` computes it in f64): the per-element floor of a gradient's bound.
#[derive(Debug)]
pub struct ReferenceGradients {
    /// dQ, like Q.
    pub dq: F32Tensor,
    /// dK, like K.
    pub dk: F32Tensor,
    /// dV, like V.
    pub dv: F32Tensor,
    /// dQ's rounding scales, like Q.
    pub dq_scale: F32Tensor,
    /// dK's rounding scales, like K.
    pub dk_scale: F32Tensor,
    /// dV's rounding scales, like V.
    pub dv_scale: F32Tensor,
}

/// `backward_reference.cu` compiled for one dtype and head dim.
#[derive(Debug)]
pub struct GpuBackwardReference {
    dtype: DType,
    head_dim: usize,
    forward: CudaFunction,
    backward: CudaFunction,
    count: CudaFunction,
}

fn grid(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.div_ceil(ROWS_PER_BLOCK) as u32, 1, 1),
        block_dim: ((ROWS_PER_BLOCK * 32) as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl GpuBackwardReference {
    /// Compiles (through the caches) and loads both kernels.
    pub fn new(gpu: &Gpu, dtype: DType, head_dim: usize) -> Result<GpuBackwardReference> {
        let request = CompileRequest {
            name: "backward_reference.cu".into(),
            source: SOURCE,
            include_dir: None,
            defines: CompileRequest::abi_defines(dtype, head_dim)?,
            arch: gpu.arch(),
        };
        Ok(GpuBackwardReference {
            dtype,
            head_dim,
            forward: gpu.load(&request, "reference_fwd_lse", 0)?,
            backward: gpu.load(&request, "reference_bwd", 0)?,
            count: gpu.load(&request, "count_bad_gradient", 0)?,
        })
    }

    /// Adds to `counters[slot]` the number of elements of the gradient `out` (the compiled dtype)
    /// that are poison, NaN/Inf or off `reference` by more than max(`bound.max_abs`,
    /// `bound.rel_l2`·|ref|, [`ELEMENT_SPREAD`]·`bound.rel_l2`·scale), `scale` the element's
    /// rounding scale ([`ReferenceGradients`]): attn-oracle's `compare_gradient` per element,
    /// asynchronously, with no host wait.
    pub fn count_bad_async(
        &self,
        gpu: &Gpu,
        out: &DeviceTensor,
        (reference, scale): (&F32Tensor, &F32Tensor),
        bound: &Tolerance,
        counters: &mut Counters,
        slot: usize,
    ) -> Result<()> {
        if out.dims != reference.dims
            || scale.dims != reference.dims
            || out.dtype != self.dtype
            || slot >= counters.len()
        {
            return Err(KernelError::Shape(format!(
                "gradient {:?} {}, its scales {:?} or counter slot {slot} do not match the reference {:?} {}",
                out.dims, out.dtype, scale.dims, reference.dims, self.dtype
            )));
        }
        let n = out.buf.len() as i64;
        let poison: u16 = match self.dtype {
            DType::Bf16 => attn_oracle::POISON_BF16_BITS,
            _ => attn_oracle::POISON_F16_BITS,
        };
        let [atol, rtol, spread] = [bound.max_abs, bound.rel_l2, ELEMENT_SPREAD].map(|x| x as f32);
        let slot_arg = slot as i32;
        let blocks = (n as usize).div_ceil(256).min(4096) as u32;
        let mut launch = gpu.stream().launch_builder(&self.count);
        launch
            .arg(&out.buf)
            .arg(&reference.buf)
            .arg(&scale.buf)
            .arg(&atol)
            .arg(&rtol)
            .arg(&spread)
            .arg(&poison)
            .arg(&n)
            .arg(counters.slots_mut())
            .arg(&slot_arg);
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: count_bad_gradient(const elem_t* out, const float* ref, const float* scale,
        // float atol, float rtol, float spread, u16 poison, long long n, unsigned* bad, int slot):
        // out, ref and scale hold n elements each (same dims, checked above), out of the compiled
        // dtype, and slot is inside `counters`; a grid-stride loop covers every element.
        unsafe { launch.launch(cfg) }.during("cuLaunchKernel (count_bad_gradient)")?;
        Ok(())
    }

    /// The forward of `q, k, v` under `params` (asynchronously, on the GPU's stream): O in the
    /// compiled dtype, shaped like Q, and the LSE, f32 `[B, H, S_q, 1]` (packed: `[1, total_q, H,
    /// 1]`), −∞ for a row that sees no key; of a dense batch (`offsets` `None`) or a packed one.
    pub fn forward_lse(
        &self,
        gpu: &Gpu,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        params: &Params,
        offsets: Option<&VarlenOffsets>,
    ) -> Result<(DeviceTensor, F32Tensor)> {
        // O has Q's dims: Q stands in for it in the shape check.
        let (shape, rows, lse_dims): (Shape, usize, [usize; 4]) = match offsets {
            None => {
                let shape = crate::attention::check_shapes(q, k, v, q, self.dtype, self.head_dim)?;
                let [b, h, s, _] = shape.q_dims();
                (shape, b * h * s, [b, h, s, 1])
            }
            Some(o) => {
                let shape = crate::attention::check_packed(
                    q,
                    k,
                    v,
                    q,
                    self.dtype,
                    self.head_dim,
                    &o.varlen,
                )?;
                let total = o.varlen.total_q();
                (shape, total * shape.heads, [1, total, shape.heads, 1])
            }
        };
        let mut out = gpu.alloc_poisoned(q.dims, self.dtype)?;
        // SAFETY: the kernel below writes one LSE per row, every row.
        let mut lse = unsafe { F32Tensor::alloc_unwritten(gpu, lse_dims) }?;
        let (batch, heads, kv_heads) = (
            shape.batch as i32,
            shape.heads as i32,
            shape.kv_heads as i32,
        );
        let (seq_q, seq_kv) = (shape.seq_q as i32, shape.seq_kv as i32);
        let (scale, causal, rows_arg) =
            (params.scale as f32, i32::from(params.causal), rows as i64);
        let (window_left, window_right) = params.abi_window(shape.seq_q, shape.seq_kv);
        let stream = gpu.stream();
        let (cu_q, _gq) = offsets.map(|o| o.cu_q.device_ptr(stream)).unzip();
        let (cu_kv, _gkv) = offsets.map(|o| o.cu_kv.device_ptr(stream)).unzip();
        let (cu_q, cu_kv): (u64, u64) = (cu_q.unwrap_or(0), cu_kv.unwrap_or(0));
        let mut launch = gpu.stream().launch_builder(&self.forward);
        launch
            .arg(&q.buf)
            .arg(&k.buf)
            .arg(&v.buf)
            .arg(&mut out.buf)
            .arg(&mut lse.buf)
            .arg(&batch)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&seq_q)
            .arg(&seq_kv)
            .arg(&scale)
            .arg(&causal)
            .arg(&window_left)
            .arg(&window_right)
            .arg(&cu_q)
            .arg(&cu_kv)
            .arg(&rows_arg);
        // SAFETY: reference_fwd_lse(q, k, v, elem_t* o, float* lse, batch, heads, kv_heads, seq_q,
        // seq_kv, scale, causal, window_left, window_right, cu_seqlens_q, cu_seqlens_kv, rows)
        // over checked tensors of the compiled dtype and head dim, dense with null offsets or
        // packed with live offsets matching them; O has Q's rows × D elements and the LSE one f32
        // per row; a warp per row, the grid covering every row.
        unsafe { launch.launch(grid(rows)) }.during("cuLaunchKernel (reference_fwd_lse)")?;
        Ok((out, lse))
    }

    /// The f32 gradients dQ, dK, dV of `args` and their rounding scales (asynchronously, on the
    /// GPU's stream), from its O, dO and LSE as given, after checking every buffer against its
    /// problem.
    pub fn gradients(&self, gpu: &Gpu, args: &BackwardArgs<'_>) -> Result<ReferenceGradients> {
        args.check_dtype(self.dtype)?;
        let dims = BackwardDims {
            dq: args.q.dims,
            dk: args.k.dims,
            dv: args.k.dims,
            ..args.dims([args.q, args.k, args.v])
        };
        check_backward(&args.shape, args.varlen(), &dims, self.head_dim)?;
        let d = self.head_dim;
        let q_rows = args.q.buf.len() / d;
        let kv_rows = args.k.buf.len() / d;
        // SAFETY: reference_bwd writes every row of each, a warp per row.
        let alloc = |dims| unsafe { F32Tensor::alloc_unwritten(gpu, dims) };
        let (mut dq, mut dk, mut dv) = (
            alloc(args.q.dims)?,
            alloc(args.k.dims)?,
            alloc(args.k.dims)?,
        );
        let (mut dq_scale, mut dk_scale, mut dv_scale) = (
            alloc(args.q.dims)?,
            alloc(args.k.dims)?,
            alloc(args.k.dims)?,
        );
        let shape = args.shape;
        let (batch, heads, kv_heads) = (
            shape.batch as i32,
            shape.heads as i32,
            shape.kv_heads as i32,
        );
        let (seq_q, seq_kv) = (shape.seq_q as i32, shape.seq_kv as i32);
        let (scale, causal) = (args.params.scale as f32, i32::from(args.params.causal));
        let (window_left, window_right) = args.params.abi_window(shape.seq_q, shape.seq_kv);
        let stream = gpu.stream();
        let (cu_q, _gq) = args.offsets.map(|o| o.cu_q.device_ptr(stream)).unzip();
        let (cu_kv, _gkv) = args.offsets.map(|o| o.cu_kv.device_ptr(stream)).unzip();
        let (cu_q, cu_kv): (u64, u64) = (cu_q.unwrap_or(0), cu_kv.unwrap_or(0));
        let (q_rows_arg, kv_rows_arg) = (q_rows as i64, kv_rows as i64);
        let mut launch = gpu.stream().launch_builder(&self.backward);
        launch
            .arg(&args.q.buf)
            .arg(&args.k.buf)
            .arg(&args.v.buf)
            .arg(&args.o.buf)
            .arg(&args.d_o.buf)
            .arg(&args.lse.buf)
            .arg(&mut dq.buf)
            .arg(&mut dk.buf)
            .arg(&mut dv.buf)
            .arg(&mut dq_scale.buf)
            .arg(&mut dk_scale.buf)
            .arg(&mut dv_scale.buf)
            .arg(&batch)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&seq_q)
            .arg(&seq_kv)
            .arg(&scale)
            .arg(&causal)
            .arg(&window_left)
            .arg(&window_right)
            .arg(&cu_q)
            .arg(&cu_kv)
            .arg(&q_rows_arg)
            .arg(&kv_rows_arg);
        // SAFETY: reference_bwd(q, k, v, o, d_o, const float* lse, float* dq, float* dk, float* dv,
        // float* dq_scale, float* dk_scale, float* dv_scale, batch, heads, kv_heads, seq_q,
        // seq_kv, scale, causal, window_left, window_right, cu_seqlens_q, cu_seqlens_kv, q_rows,
        // kv_rows) over buffers checked against the problem (Q, O, dO, dQ and its scales q_rows × D
        // elements, K, V, dK, dV and theirs kv_rows × D, the LSE one f32 per query
        // row; null offsets for a dense batch, else live ones matching the packed tensors); a warp
        // per row, the grid covering q_rows + kv_rows rows.
        unsafe { launch.launch(grid(q_rows + kv_rows)) }
            .during("cuLaunchKernel (reference_bwd)")?;
        Ok(ReferenceGradients {
            dq,
            dk,
            dv,
            dq_scale,
            dk_scale,
            dv_scale,
        })
    }
}
