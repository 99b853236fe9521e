//! Deliberately bad behaviour, planted to prove that the gate's guards catch it.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use crate::error::{DriverContext, Result};
use crate::gpu::Gpu;

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
        let stream = gpu.context().new_stream().during("cuStreamCreate")?;
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
