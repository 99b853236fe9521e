//! The problem vocabulary: what one attention call computes, named once for every crate.
//!
//! attn-oracle computes with these types and attn-evidence records them; both re-export them, so
//! `attn_oracle::Shape` and `attn_evidence::ShapeSpec` are the types defined here.
//!
//! * [`DType`] — element types: fp16 and bf16 for a problem's tensors ([`DType::INPUTS`]), f32 for
//!   host-side outputs.
//! * [`Shape`] — the dims: Q `[B, H, S_q, D]`, K and V `[B, H_kv, S_kv, D]`, `H_kv` dividing `H`
//!   (grouped-query heads); [`RowId`] names one output row.
//! * [`Window`], [`Params`] — the mask: scale, causal (bottom-right aligned: query `i` sees keys
//!   `j ≤ i + S_kv − S_q`), a sliding window.
//! * [`Varlen`] — a packed variable-length batch: lengths per sequence, checked to fit the
//!   kernels' int32 offsets, and where each sequence's rows lie ([`Packed`]).
//! * [`ShapeSpec`] — the whole problem in one value, with a text form (`"2,32/8,4096,128 causal
//!   bf16"`, `"varlen=512,0,3000 H=16/4 D=128"`) and the JSON form of evidence files;
//!   [`ProblemKind`] says what it computes (the prefill forward pass or decode; backward is to
//!   arrive as a kind); [`ShapeSpec::backward_flops`] and [`ShapeSpec::backward_bytes`] give a
//!   backward pass's work and memory floors.
//! * [`DecodeSpec`] — a decode batch: 1 to 16 new tokens per sequence at the end of a KV cache,
//!   contiguous or paged ([`KvLayout`], [`PagePolicy`], [`BlockTable`]), its text form (`"decode
//!   B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16"`), the bytes and FLOPs a launch must move and do
//!   ([`DecodeBytes`]); [`DECODE_SUITES`] and [`decode_battery`] are its shapes.
//! * [`ProblemError`] — the one error type.
//!
//! ```
//! use attn_problem::{DType, ShapeSpec, Varlen};
//! let spec: ShapeSpec = "varlen=512,0,100:300 H=16/4 D=128 causal bf16".parse()?;
//! assert_eq!((spec.dtype, spec.kv_heads(), spec.params().causal), (DType::Bf16, 4, true));
//! assert_eq!(spec.varlen, Some(Varlen::new(vec![512, 0, 100], vec![512, 0, 300])?));
//! assert!("2,16,1024,64 causal window=128,128".parse::<ShapeSpec>().is_err());
//! # Ok::<(), attn_problem::ProblemError>(())
//! ```

#![warn(missing_docs)]

mod backward;
mod decode;
mod decode_suites;
mod decode_text;
mod dtype;
mod error;
mod kind;
mod mask;
mod shape;
mod spec;
mod varlen;

pub use decode::{BlockTable, DecodeBytes, DecodeSpec, KvLayout, PagePolicy};
pub use decode_suites::{decode_battery, DecodeSuite, DECODE_SUITES};
pub use dtype::DType;
pub use error::ProblemError;
pub use kind::ProblemKind;
pub use mask::{Params, Window};
pub use shape::{RowId, Shape};
pub use spec::ShapeSpec;
pub use varlen::{Packed, Varlen};
