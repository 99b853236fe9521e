//! The crate's one error type.

/// A problem that is not one: bad text, a zero or overflowing extent, lengths that cannot be run.
/// Every variant prints as one line naming what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProblemError {
    /// A shape with a zero extent, or one whose element count overflows `usize`.
    #[error("invalid shape B={batch} H={heads} S_q={seq_q} S_kv={seq_kv} D={head_dim}: {reason}")]
    InvalidShape {
        /// Batch size as given.
        batch: usize,
        /// Head count as given.
        heads: usize,
        /// Query sequence length as given.
        seq_q: usize,
        /// Key/value sequence length as given.
        seq_kv: usize,
        /// Head dimension as given.
        head_dim: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Text that is not a dims word `B,H,S,D`.
    #[error("cannot parse shape {input:?}: {reason} (expected \"B,H,S,D\" or \"B,H,SQ,SKV,D\")")]
    ParseShape {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Problem text such as `"4,16,1024,64 causal"` that could not be parsed.
    #[error("bad shape {text:?}: {reason}")]
    Shape {
        /// The text given.
        text: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A varlen batch that cannot be run.
    #[error("invalid varlen batch: {reason}")]
    InvalidVarlen {
        /// Why.
        reason: String,
    },
    /// A decode batch that cannot be run (see `DecodeSpec`'s invariants).
    #[error("invalid decode batch: {reason}")]
    InvalidDecode {
        /// Why.
        reason: String,
    },
    /// A block table that cannot serve its cache or its batch.
    #[error("invalid block table: {reason}")]
    InvalidBlockTable {
        /// Why.
        reason: String,
    },
    /// Text that is not a sliding window.
    #[error("cannot parse window {input:?}: {reason}")]
    ParseWindow {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Text that is not a dtype.
    #[error("unknown dtype {input:?} (expected fp16|f16|half, bf16, f32|fp32)")]
    ParseDType {
        /// The text given.
        input: String,
    },
    /// A dtype a problem's Q, K and V cannot have (the kernels take fp16 or bf16).
    #[error("unsupported dtype {0:?} (fp16 or bf16)")]
    InputDType(String),
}
