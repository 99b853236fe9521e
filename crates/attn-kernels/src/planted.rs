//! Deliberately bad behaviour, planted to prove that the gate's guards catch it.

use std::sync::Arc;

use attn_oracle::DType;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use crate::compile::CompileRequest;
use crate::error::{DriverContext, KernelError, Result};
use crate::gpu::{DeviceTensor, Gpu};
use crate::reference::ReferenceOutput;

/// Extra work on a second stream after each launch: a 1 GiB memset that the timed stream's events
/// never see, as a candidate that hides work on another stream would.
#[derive(Debug)]
pub struct SideStreamWork {
    stream: Arc<CudaStream>,
    buf: CudaSlice<u8>,
}

impl SideStreamWork {
    /// A second stream and its buffer.
    pub fn new(gpu: &Gpu) -> Result<SideStreamWork> {
        let stream = gpu.new_side_stream()?;
        // SAFETY: the buffer is only ever written (memset), never read.
        let buf = unsafe { stream.alloc::<u8>(1 << 30) }.during("cuMemAlloc")?;
        Ok(SideStreamWork { stream, buf })
    }

    /// Enqueues the hidden work.
    pub fn launch(&mut self) -> Result<()> {
        let stream = self.stream.clone();
        let len = self.buf.len();
        let (ptr, _guard) = self.buf.device_ptr_mut(&stream);
        // SAFETY: `ptr` addresses `len` bytes we own; the memset runs on the side stream.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 7, len, stream.cu_stream()) }
            .during("cuMemsetD8Async (side stream)")
    }
}

const COPY_SOURCE: &str = r#"
#include "attn_common.cuh"
// What a kernel that found the verifier's reference in device memory would do: read it as the f32
// output it should be, row-major, and write it out converted.
extern "C" __global__ void copy_reference(const float* __restrict__ ref, elem_t* __restrict__ o, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        o[i] = from_float(ref[i]);
}
"#;

/// A planted cheat: outputs overwritten with the verifier's reference exactly as it sits in device
/// memory (masked or not), as a candidate that found it would copy it.
#[derive(Debug)]
pub struct ReferenceCopier {
    function: CudaFunction,
    dtype: DType,
}

impl ReferenceCopier {
    /// Compiles the copy for `dtype` and `head_dim`.
    pub fn new(gpu: &Gpu, dtype: DType, head_dim: usize) -> Result<ReferenceCopier> {
        let request = CompileRequest {
            name: "planted copy_reference".into(),
            source: COPY_SOURCE,
            include_dir: None,
            defines: CompileRequest::abi_defines(dtype, head_dim)?,
            arch: gpu.arch(),
        };
        Ok(ReferenceCopier {
            function: gpu.load(&request, "copy_reference", 0)?,
            dtype,
        })
    }

    /// Enqueues the copy of `reference`'s device memory into `out` on the GPU's stream.
    pub fn copy(
        &self,
        gpu: &Gpu,
        reference: &ReferenceOutput,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        let n = out.buf.len();
        if reference.data.len() != n || out.dtype != self.dtype {
            return Err(KernelError::Shape(format!(
                "a reference of {} values copied into {n} {} elements",
                reference.data.len(),
                out.dtype
            )));
        }
        let n_arg = n as i64;
        let mut launch = gpu.stream().launch_builder(&self.function);
        launch.arg(&reference.data).arg(&mut out.buf).arg(&n_arg);
        // SAFETY: copy_reference(const float* ref, elem_t* o, long long n): both hold n elements
        // (checked above), of the compiled dtype; a grid-stride loop.
        unsafe {
            launch.launch(LaunchConfig {
                grid_dim: (n.div_ceil(256).clamp(1, 4096) as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .during("cuLaunchKernel (planted copy_reference)")?;
        Ok(())
    }
}
