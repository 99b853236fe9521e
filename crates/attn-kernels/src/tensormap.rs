//! TMA tensor maps for kernels of the `TensorMaps` ABI (`kernels/README.md`): one 3-D map per
//! input and one for the output over `[B·H, S, D]`, encoded on the host and passed to the kernel
//! by value.

use attn_oracle::DType;
use cudarc::driver::sys;
use cudarc::driver::DeviceRepr;

use crate::error::{KernelError, Result};

/// Columns of a box: one 128-byte swizzle panel of 16-bit elements.
pub const BOX_COLUMNS: u32 = 64;

/// A driver `CUtensorMap` (128 opaque bytes, 64-byte aligned) as a kernel argument.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct TensorMap(sys::CUtensorMap);

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TensorMap(..)")
    }
}

// SAFETY: a plain-old-data struct of 128 bytes that the kernel receives by value as a
// `const __grid_constant__` parameter of the same size; its alignment (128) meets the kernel's (64).
unsafe impl DeviceRepr for TensorMap {}

/// The map of a `[B, H, S, D]` tensor at device address `ptr` viewed as 3-D `[B·H, S, D]`: boxes of
/// `BOX_COLUMNS` columns × `box_rows` rows × 1 head, 128-byte swizzled, rows past `S` read as zeros.
/// `tensor` names it in errors.
pub fn encode(
    tensor: &'static str,
    ptr: sys::CUdeviceptr,
    dtype: DType,
    dims: [usize; 4],
    box_rows: u32,
) -> Result<TensorMap> {
    let [b, h, s, d] = dims;
    let elem = 2u64;
    encode_3d(
        tensor,
        ptr,
        dtype,
        [d as u64, s as u64, (b * h) as u64],
        [d as u64 * elem, (s * d) as u64 * elem],
        [BOX_COLUMNS.min(d as u32), box_rows, 1],
    )
}

/// The map of a packed varlen tensor `[total, H, D]` (held as dims `[1, total, H, D]`) viewed as
/// 3-D with dimensions `D, H, total` innermost first: boxes of `BOX_COLUMNS` columns × 1 head ×
/// `box_rows` rows, whose shared-memory image is the dense map's (kernels/hopper.cu's contract).
/// Rows past a sequence's end are the next sequence's: kernels mask them.
pub fn encode_packed(
    tensor: &'static str,
    ptr: sys::CUdeviceptr,
    dtype: DType,
    dims: [usize; 4],
    box_rows: u32,
) -> Result<TensorMap> {
    let [_, total, h, d] = dims;
    let elem = 2u64;
    encode_3d(
        tensor,
        ptr,
        dtype,
        [d as u64, h as u64, total as u64],
        [d as u64 * elem, (h * d) as u64 * elem],
        [BOX_COLUMNS.min(d as u32), 1, box_rows],
    )
}

/// A 3-D tiled map: `global_dim` innermost first, byte strides of dimensions 1 and 2, `box_dim`.
fn encode_3d(
    tensor: &'static str,
    ptr: sys::CUdeviceptr,
    dtype: DType,
    global_dim: [u64; 3],
    global_strides: [u64; 2],
    box_dim: [u32; 3],
) -> Result<TensorMap> {
    let data_type = match dtype {
        DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        other => {
            return Err(KernelError::TensorMap {
                tensor,
                reason: format!("dtype {other} has no 16-bit tensor map"),
            })
        }
    };
    let element_strides: [u32; 3] = [1, 1, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every array holds `rank` (3) entries (strides: rank − 1), `map` is a writable
    // CUtensorMap, and `ptr` is the device address of a live buffer the dims and strides describe
    // (the callers' tensors).
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            3,
            ptr as *mut std::ffi::c_void,
            global_dim.as_ptr(),
            global_strides.as_ptr(),
            box_dim.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(KernelError::TensorMap {
            tensor,
            reason: format!(
                "cuTensorMapEncodeTiled returned {status:?} (dims {global_dim:?}, byte strides {global_strides:?}, box {box_dim:?})"
            ),
        });
    }
    // SAFETY: the driver wrote the whole map on success.
    Ok(TensorMap(unsafe { map.assume_init() }))
}
