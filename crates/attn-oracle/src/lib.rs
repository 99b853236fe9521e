//! The oracle: what a correct attention output is, and whether a kernel's output is close enough.
//!
//! The primary reference depends on nothing but arithmetic: attention in f64 on the CPU, never a
//! particular PyTorch release. Bird's-eye view:
//!
//! * [`Shape`], [`DType`], [`Params`], [`Varlen`] — the problem, attn-problem's types re-exported:
//!   `O = softmax(scale · Q·Kᵀ + mask) · V`, layout `[B, H, S, D]`, causal mask aligned
//!   bottom-right (query `i` sees keys `j ≤ i + S_kv − S_q`, as FlashAttention ≥ 2.1 and PyTorch
//!   document).
//! * [`HostTensor`] — host buffers in fp16/bf16/f32 (and f64 for references), raw bytes for device
//!   transfers, and [`HostTensor::poisoned`] outputs whose unwritten elements [`compare`] detects.
//! * [`generate`] — seeded inputs from a [`CaseSpec`] (shape, dtype, [`Distribution`], seed).
//! * [`reference()`] — exact f64 attention and logsumexp, for all rows or a seeded sample
//!   ([`RowSelection`]) so that a (2, 16, 8192, 128) check takes seconds; rayon-parallel.
//!   A fully masked row has output 0 and logsumexp −∞.
//! * [`tiled_f32`] — an independent second implementation: FlashAttention's tiled online softmax
//!   in f32, the algorithm the kernels implement, for reproducing their rounding on the CPU.
//! * [`compare`] and [`tolerance`] — the [`Verdict`] (errors, worst index, NaN/Inf/poison counts)
//!   and the one documented tolerance table.
//! * [`backward()`] — the exact f64 backward (dQ, dK, dV from Q, K, V, O, dO and the LSE), every
//!   element or sampled rows ([`backward_rows`]), packed batches ([`backward_varlen`]), and its
//!   provisional [`backward_tolerance`].
//! * [`generate_decode`], [`reference_decode`] — decode batches ([`DecodeSpec`]): Q packed, K
//!   and V contiguous or paged behind a [`BlockTable`] made by [`block_table`], sentinels in
//!   every unused slot, and the f64 oracle read through the table.
//! * [`npy`] — `.npy` exchange with numpy/PyTorch, and fixtures.
//!
//! ```
//! use attn_oracle::*;
//! let spec = CaseSpec { shape: "1,2,100,64".parse()?, dtype: DType::F16,
//!                       distribution: Distribution::Normal, seed: 42 };
//! let inputs = generate(&spec);
//! let params = Params::new(spec.shape.head_dim, true);
//! let rows = RowSelection::Sampled { rows_per_head: 16, seed: 42 };
//! let exact = reference(&inputs.q, &inputs.k, &inputs.v, &params, &rows)?;
//!
//! // Stand-in for a kernel: the tiled f32 algorithm, rounded to fp16 like a kernel's output.
//! let (out, _lse) = tiled_f32(&inputs.q, &inputs.k, &inputs.v, &params, 64, 32)?;
//! let out: Vec<f64> = out.iter().map(|&x| f64::from(x)).collect();
//! let output = HostTensor::from_f64(spec.shape.q_dims(), DType::F16, &out);
//!
//! let verdict = compare(&output, &exact, &tolerance(spec.dtype, spec.distribution));
//! assert!(verdict.passed, "{spec}: {verdict}");
//! # Ok::<(), OracleError>(())
//! ```

#![warn(missing_docs)]

#[cfg(target_endian = "big")]
compile_error!("attn-oracle assumes a little-endian host (HostTensor::as_bytes, .npy files)");

mod backward;
mod compare;
mod decode;
mod error;
mod generate;
pub mod npy;
mod reference;
mod tensor;
mod tiled;
mod varlen;

pub use attn_problem::{
    decode_battery, BlockTable, DecodeSpec, DecodeSuite, KvLayout, PagePolicy, DECODE_SUITES,
};
pub use attn_problem::{DType, Packed, Params, ProblemError, RowId, Shape, Varlen, Window};
pub use backward::{
    backward, backward_exact, backward_rows, backward_tolerance, backward_varlen,
    backward_varlen_with_scales, backward_with_scales, compare_gradient, compare_lse,
    forward_varlen, forward_with_lse, BackwardTolerance, Forward, Gradient, Gradients,
    SampledGradients, ELEMENT_SPREAD,
};
pub use compare::{compare, tolerance, Tolerance, Verdict};
pub use decode::{
    block_table, compare_decode, generate_decode, reference_decode, reference_decode_scaled,
    DecodeCase, DecodeInputs, KvCache, SENTINEL_PAGE, SENTINEL_SLOT,
};
pub use error::OracleError;
pub use generate::{generate, CaseSpec, Distribution, Inputs, SMALL_SIGMA};
pub use reference::{
    reference, shape_from_dims, Reference, RowSelection, ALL_ROWS_LIMIT, TILE_HEIGHTS,
};
pub use tensor::{HostData, HostTensor, POISON_BF16_BITS, POISON_F16_BITS, POISON_F32_BITS};
pub use tiled::{tiled_f32, tiled_f32_with, TiledConfig};
pub use varlen::{
    compare_packed, compare_varlen, generate_varlen, reference_varlen, reference_varlen_rows,
    VarlenTensors,
};
