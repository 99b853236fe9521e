//! Shape and argument checks before a launch: tensors that fit together and match what the kernel
//! was compiled for.

use attn_oracle::{DType, Shape};

use crate::error::{KernelError, Result};
use crate::gpu::DeviceTensor;

/// Checks that the tensors' head dim `d` and dtypes are what the kernel was compiled for.
fn check_compiled_for(
    tensors: [&DeviceTensor; 4],
    d: usize,
    dtype: DType,
    head_dim: usize,
) -> Result<()> {
    if d != head_dim {
        return Err(KernelError::Shape(format!(
            "head dim {d}, but the kernel was compiled for {head_dim}"
        )));
    }
    match tensors.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(KernelError::Shape(format!(
            "a tensor is {} but the kernel was compiled for {dtype}",
            t.dtype
        ))),
        None => Ok(()),
    }
}

/// Checks that packed q, k, v and o (`[1, total, heads, D]`) hold `varlen`'s rows and match the
/// compiled dtype and head dim; returns the batch's bounding shape (the grid's).
pub fn check_packed(
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    o: &DeviceTensor,
    dtype: DType,
    head_dim: usize,
    varlen: &attn_oracle::Varlen,
) -> Result<Shape> {
    let [_, total_q, heads, d] = q.dims;
    let [_, total_kv, kv_heads, _] = k.dims;
    let expected_q = [1, varlen.total_q(), heads, d];
    let expected_kv = [1, varlen.total_kv(), kv_heads, d];
    if q.dims != expected_q
        || o.dims != expected_q
        || k.dims != expected_kv
        || v.dims != expected_kv
    {
        return Err(KernelError::Shape(format!(
            "a varlen batch of {} queries and {} keys needs Q and O {expected_q:?} and K, V {expected_kv:?}; got Q {:?}, K {:?}, V {:?}, O {:?} (totals {total_q}, {total_kv})",
            varlen.total_q(),
            varlen.total_kv(),
            q.dims,
            k.dims,
            v.dims,
            o.dims
        )));
    }
    let per_head = Shape::new(1, heads, 1, 1, d)
        .and_then(|s| s.with_kv_heads(kv_heads))
        .map_err(|e| KernelError::Shape(e.to_string()))?;
    check_compiled_for([q, k, v, o], d, dtype, head_dim)?;
    varlen
        .bounding_shape(&per_head)
        .map_err(|e| KernelError::Shape(e.to_string()))
}

/// Checks that q, k, v and o fit together (K/V heads dividing Q's) and match the compiled dtype
/// and head dim.
pub fn check_shapes(
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    o: &DeviceTensor,
    dtype: DType,
    head_dim: usize,
) -> Result<Shape> {
    let [b, h, sq, d] = q.dims;
    let [kb, kh, skv, kd] = k.dims;
    if k.dims != v.dims {
        return Err(KernelError::Shape(format!(
            "K is {:?} but V is {:?}",
            k.dims, v.dims
        )));
    }
    if (kb, kd) != (b, d) || kh == 0 || h % kh != 0 {
        return Err(KernelError::Shape(format!(
            "Q is {:?} but K/V are {:?}: B and D must agree and K/V's heads divide Q's",
            q.dims, k.dims
        )));
    }
    if o.dims != q.dims {
        return Err(KernelError::Shape(format!(
            "O is {:?} but Q is {:?}",
            o.dims, q.dims
        )));
    }
    check_compiled_for([q, k, v, o], d, dtype, head_dim)?;
    if [b, h, sq, skv, d].contains(&0) {
        return Err(KernelError::Shape(format!(
            "empty tensor: Q {:?}, K {:?}",
            q.dims, k.dims
        )));
    }
    Ok(Shape {
        batch: b,
        heads: h,
        kv_heads: kh,
        seq_q: sq,
        seq_kv: skv,
        head_dim: d,
    })
}
