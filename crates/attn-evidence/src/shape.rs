//! The problem size of one attention call.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::EvidenceError;

/// The element type of Q, K, V and O: what the GPU kernels support.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE half precision.
    #[default]
    Fp16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Both, in order.
    pub const ALL: [Dtype; 2] = [Dtype::Fp16, Dtype::Bf16];

    /// `"fp16"` or `"bf16"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dtype {
    type Err = EvidenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "fp16" | "f16" | "float16" => Ok(Dtype::Fp16),
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            other => Err(EvidenceError::Dtype(other.to_owned())),
        }
    }
}

/// One attention problem: `O = softmax(Q·Kᵀ·scale + mask)·V` with Q `[batch, heads, seq_q, head_dim]`
/// and K, V `[batch, heads, seq_kv, head_dim]`.
///
/// Displays as `"B,H,S,D"` when `seq_q == seq_kv`, else `"B,H,SQ,SKV,D"`, followed by `" causal"`
/// and the dtype when it is not fp16; [`FromStr`] reads the same text back.
///
/// ```
/// use attn_evidence::ShapeSpec;
/// let shape: ShapeSpec = "4,16,1024,64 causal".parse()?;
/// assert_eq!(shape.to_string(), "4,16,1024,64 causal");
/// assert_eq!(shape.flops(), 4.0 * 4.0 * 16.0 * 1024.0 * 1024.0 * 64.0 / 2.0);
/// let cross = ShapeSpec { seq_kv: 4096, causal: false, dtype: attn_evidence::Dtype::Bf16, ..shape };
/// assert_eq!(cross.to_string(), "4,16,1024,4096,64 bf16");
/// # Ok::<(), attn_evidence::EvidenceError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShapeSpec {
    /// Batch size B.
    pub batch: usize,
    /// Number of heads H.
    pub heads: usize,
    /// Query sequence length.
    pub seq_q: usize,
    /// Key/value sequence length.
    pub seq_kv: usize,
    /// Head dimension D.
    pub head_dim: usize,
    /// Causal mask, aligned bottom-right.
    pub causal: bool,
    /// Element type.
    #[serde(default)]
    pub dtype: Dtype,
}

impl ShapeSpec {
    /// Floating-point operations of the two matmuls: `4·B·H·Sq·Skv·D`, halved when causal (the masked
    /// half is skipped). Softmax is not counted, as is customary for attention TFLOP/s.
    pub fn flops(&self) -> f64 {
        let full = 4.0
            * self.batch as f64
            * self.heads as f64
            * self.seq_q as f64
            * self.seq_kv as f64
            * self.head_dim as f64;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    /// Throughput in TFLOP/s when one call takes `time_us` microseconds.
    pub fn tflops(&self, time_us: f64) -> f64 {
        self.flops() / (time_us * 1e-6) / 1e12
    }
}

impl fmt::Display for ShapeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.batch, self.heads, self.seq_q)?;
        if self.seq_kv != self.seq_q {
            write!(f, ",{}", self.seq_kv)?;
        }
        write!(f, ",{}", self.head_dim)?;
        if self.causal {
            f.write_str(" causal")?;
        }
        if self.dtype != Dtype::Fp16 {
            write!(f, " {}", self.dtype)?;
        }
        Ok(())
    }
}

impl FromStr for ShapeSpec {
    type Err = EvidenceError;

    /// Parses `"B,H,S,D"` or `"B,H,SQ,SKV,D"`, then optional words `causal`, `fp16`, `bf16`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| EvidenceError::Shape {
            text: text.to_owned(),
            reason,
        };
        let mut words = text.split_whitespace();
        let dims_text = words
            .next()
            .ok_or_else(|| fail("empty; expected B,H,S,D".into()))?;
        let dims = dims_text
            .split(',')
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| fail(format!("{d:?} is not a positive integer")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (batch, heads, seq_q, seq_kv, head_dim) = match dims[..] {
            [b, h, s, d] => (b, h, s, s, d),
            [b, h, sq, skv, d] => (b, h, sq, skv, d),
            _ => {
                return Err(fail(format!(
                    "{} numbers; expected B,H,S,D or B,H,SQ,SKV,D",
                    dims.len()
                )))
            }
        };
        let mut shape = ShapeSpec {
            batch,
            heads,
            seq_q,
            seq_kv,
            head_dim,
            causal: false,
            dtype: Dtype::Fp16,
        };
        for word in words {
            match word {
                "causal" => shape.causal = true,
                "fp16" => shape.dtype = Dtype::Fp16,
                "bf16" => shape.dtype = Dtype::Bf16,
                other => {
                    return Err(fail(format!(
                        "unknown word {other:?}; expected causal, fp16 or bf16"
                    )))
                }
            }
        }
        Ok(shape)
    }
}
