//! What a problem computes ([`ProblemKind`]).

use serde::{Deserialize, Serialize};

/// What one attention call computes over its [`crate::ShapeSpec`]'s tensors: the axis along which
/// new kinds of problem arrive, so that each is one more variant here, read and written by the
/// same gate, bench and evidence pipeline, never a second pipeline.
///
/// Today there are the forward pass over whole sequences (prefill, a [`crate::ShapeSpec`]) and
/// decode (a [`crate::DecodeSpec`]: 1 to 16 new queries per sequence over a contiguous or paged
/// KV cache, which the measuring pipeline does not run yet). Planned, not implemented:
/// - backward: the forward pass that also writes the logsumexp, and the gradient pass that
///   reads it, each a variant of its own.
///
/// Serialized in snake case (`"prefill_forward"`); a [`crate::ShapeSpec`] leaves the default out,
/// so evidence written before kinds existed reads, and writes back, unchanged.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProblemKind {
    /// `O = softmax(scale · Q·Kᵀ + mask) · V` for every query of every sequence at once.
    #[default]
    PrefillForward,
    /// The same attention for a few new tokens per sequence at the end of a KV cache: a
    /// [`crate::DecodeSpec`], never a [`crate::ShapeSpec`].
    Decode,
}

impl ProblemKind {
    /// Whether this is the default kind, which problem text and JSON leave unsaid.
    pub fn is_prefill_forward(&self) -> bool {
        *self == ProblemKind::PrefillForward
    }
}
