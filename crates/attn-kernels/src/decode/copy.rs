//! The device's copy bandwidth, measured: what a decode kernel, which streams its KV cache once,
//! is judged against.

use cudarc::driver::sys::CUevent_flags;

use crate::error::{DriverContext, Result};
use crate::gpu::Gpu;

/// The least bytes a copy measurement moves: 1 GiB, far past any L2, so it times DRAM.
pub const COPY_BYTES: usize = 1 << 30;

/// Times `repeats` device-to-device copies of `bytes` (at least [`COPY_BYTES`]) with events on
/// the GPU's stream, after one untimed copy; returns each copy's time in µs. Each copy reads and
/// writes every byte once.
pub fn time_copies(gpu: &Gpu, bytes: usize, repeats: usize) -> Result<Vec<f64>> {
    let bytes = bytes.max(COPY_BYTES);
    let stream = gpu.stream();
    let ctx = gpu.context();
    let src = stream
        .alloc_zeros::<u8>(bytes)
        .during("cuMemAlloc (copy bandwidth)")?;
    let mut dst = stream
        .alloc_zeros::<u8>(bytes)
        .during("cuMemAlloc (copy bandwidth)")?;
    let event = || {
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .during("cuEventCreate")
    };
    let (start, end) = (event()?, event()?);
    stream
        .memcpy_dtod(&src, &mut dst)
        .during("cuMemcpyDtoD (copy bandwidth)")?;
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        start.record(stream).during("cuEventRecord")?;
        stream
            .memcpy_dtod(&src, &mut dst)
            .during("cuMemcpyDtoD (copy bandwidth)")?;
        end.record(stream).during("cuEventRecord")?;
        let ms = start.elapsed_ms(&end).during("cuEventElapsedTime")?;
        times.push(f64::from(ms) * 1e3);
    }
    gpu.synchronize()?;
    Ok(times)
}
