//! The library plans (`cublas`, `hybrid-qk`, `hybrid-pv`): cuBLAS for the GEMMs a plan names, a
//! kernel of ours for the rest, and the scratch buffers between them.

use attn_oracle::{DType, Shape};
use cudarc::cublas::sys as blas;
use cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};
use crate::registry::{Geometry, LibraryPlan};

/// A library plan's intermediates, grown on demand: S in f32 and P in the input dtype (each only
/// when cuBLAS reads or writes it).
#[derive(Default)]
pub(super) struct Scratch {
    scores: Option<CudaSlice<f32>>,
    probs: Option<CudaSlice<u16>>,
}

/// `buffer` with room for at least `elements` (reallocated, uninitialised, when smaller).
fn grown<'a, T: cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    buffer: &'a mut Option<CudaSlice<T>>,
    elements: usize,
    what: &'static str,
) -> Result<&'a mut CudaSlice<T>> {
    if buffer.as_ref().is_none_or(|b| b.len() < elements) {
        // Free the old one first: these are the largest buffers of a run.
        *buffer = None;
        // SAFETY: every plan writes the part of the buffer it reads (a GEMM or our kernel) before
        // reading it, in stream order.
        *buffer = Some(unsafe { stream.alloc::<T>(elements) }.during(what)?);
    }
    Ok(buffer.as_mut().expect("allocated above"))
}

/// One launch of a library plan: cuBLAS for the GEMMs the plan names, our kernel for the rest,
/// all on the GPU's stream.
pub(super) struct LibraryLaunch<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) shape: Shape,
    pub(super) dtype: DType,
    pub(super) function: &'a CudaFunction,
    pub(super) geometry: Geometry,
    pub(super) scale: f32,
    pub(super) causal: i32,
}

/// A strided-batched GEMM in cuBLAS's column-major terms (the row-major buffers read transposed):
/// `C (m×n) = op(A) · B`, one per (b, h).
struct Gemm {
    call: &'static str,
    transpose_a: bool,
    m: usize,
    n: usize,
    k: usize,
    a: (u64, usize, usize),
    b: (u64, usize, usize),
    c: (u64, usize, usize),
    c_f32: bool,
}

impl LibraryLaunch<'_> {
    pub(super) fn run(
        &self,
        plan: LibraryPlan,
        scratch: &mut Scratch,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        o: &mut DeviceTensor,
    ) -> Result<()> {
        let stream = self.gpu.stream();
        let Shape {
            seq_q: sq,
            seq_kv: skv,
            head_dim: d,
            ..
        } = self.shape;
        let elements = self.shape.batch * self.shape.heads * sq * skv;
        let (qp, _gq) = q.buf.device_ptr(stream);
        let (kp, _gk) = k.buf.device_ptr(stream);
        let (vp, _gv) = v.buf.device_ptr(stream);
        let (op, _go) = o.buf.device_ptr_mut(stream);
        let scores = if plan.cublas_scores() {
            let buffer = grown(stream, &mut scratch.scores, elements, "cuMemAlloc (scores)")?;
            let (sp, _gs) = buffer.device_ptr_mut(stream);
            // S[b,h] (row-major S_q×S_kv) = Q·Kᵀ, i.e. column-major S (S_kv×S_q) = op_T(K) · Q.
            self.gemm(Gemm {
                call: "GemmStridedBatchedEx (Q·Kᵀ)",
                transpose_a: true,
                m: skv,
                n: sq,
                k: d,
                a: (kp, d, skv * d),
                b: (qp, d, sq * d),
                c: (sp, skv, sq * skv),
                c_f32: true,
            })?;
            Some(sp)
        } else {
            None
        };
        let probs = if plan.cublas_output() {
            let buffer = grown(
                stream,
                &mut scratch.probs,
                elements,
                "cuMemAlloc (probabilities)",
            )?;
            Some(buffer.device_ptr_mut(stream).0)
        } else {
            None
        };
        let (sq_i, skv_i) = (sq as i32, skv as i32);
        let cfg = LaunchConfig {
            grid_dim: self.geometry.grid,
            block_dim: (self.geometry.block, 1, 1),
            shared_mem_bytes: self.geometry.shared_bytes,
        };
        let mut launch = stream.launch_builder(self.function);
        // Each plan's kernel takes (input, [second input,] output, seq_q, seq_kv, scale, causal):
        // softmax_rows(S, P), softmax_pv(S, V, O), qk_softmax(Q, K, P). It reads the scores when
        // cuBLAS made them, else Q; it writes the probabilities when cuBLAS reads them, else O.
        let first = scores.unwrap_or(qp);
        let out = probs.unwrap_or(op);
        let second = match plan {
            LibraryPlan::Math => None,
            LibraryPlan::HybridQk => Some(vp),
            LibraryPlan::HybridPv => Some(kp),
        };
        launch.arg(&first);
        if let Some(second) = &second {
            launch.arg(second);
        }
        launch
            .arg(&out)
            .arg(&sq_i)
            .arg(&skv_i)
            .arg(&self.scale)
            .arg(&self.causal);
        // SAFETY: the pointers are live buffers of [B·H, S_q, S_kv] (scores, probabilities) or
        // [B·H, S, D] (q, k, v, o) entries of the types the plan's kernel declares (listed above);
        // its grid covers every row of every (b, h).
        unsafe { launch.launch(cfg) }.during("cuLaunchKernel (library plan)")?;
        if let Some(pp) = probs {
            // O (row-major S_q×D; column-major D×S_q) = V (D×S_kv) · P (S_kv×S_q).
            self.gemm(Gemm {
                call: "GemmStridedBatchedEx (P·V)",
                transpose_a: false,
                m: d,
                n: sq,
                k: skv,
                a: (vp, d, skv * d),
                b: (pp, skv, sq * skv),
                c: (op, d, sq * d),
                c_f32: false,
            })?;
        }
        Ok(())
    }

    /// Runs `g` on the GPU's cuBLAS handle (f32 compute, inputs in the problem's dtype).
    fn gemm(&self, g: Gemm) -> Result<()> {
        let handle = *self.gpu.blas()?.handle();
        let elem = match self.dtype {
            DType::Bf16 => blas::cudaDataType::CUDA_R_16BF,
            _ => blas::cudaDataType::CUDA_R_16F,
        };
        let op = |t| {
            if t {
                blas::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let c_type = if g.c_f32 {
            blas::cudaDataType::CUDA_R_32F
        } else {
            elem
        };
        let (one, zero) = (1.0f32, 0.0f32);
        let batch = (self.shape.batch * self.shape.heads) as i32;
        // SAFETY: the pointers come from live buffers of the sizes the leading dimensions, strides
        // and batch count describe (Self::run), all on the handle's stream.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                handle,
                op(g.transpose_a),
                op(false),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                (&one as *const f32).cast(),
                g.a.0 as *const _,
                elem,
                g.a.1 as i32,
                g.a.2 as i64,
                g.b.0 as *const _,
                elem,
                g.b.1 as i32,
                g.b.2 as i64,
                (&zero as *const f32).cast(),
                g.c.0 as *mut _,
                c_type,
                g.c.1 as i32,
                g.c.2 as i64,
                batch,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| KernelError::Cublas {
            call: g.call,
            message: format!("{e:?}"),
        })
    }
}
