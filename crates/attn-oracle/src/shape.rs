//! Problem geometry ([`Shape`]), element types ([`DType`]) and attention parameters ([`Params`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::OracleError;

/// The geometry of one attention problem: Q is `[B, H, S_q, D]`, K and V are `[B, H, S_kv, D]`.
///
/// Construct with [`Shape::new`] or parse from `"B,H,S,D"` / `"B,H,SQ,SKV,D"`:
///
/// ```
/// use attn_oracle::Shape;
/// let shape: Shape = "2,16,1024,64".parse()?;
/// assert_eq!(shape, Shape::new(2, 16, 1024, 1024, 64)?);
/// assert_eq!(shape.to_string(), "2,16,1024,64");
/// assert_eq!(shape.flops(false), 4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 64.0);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Batch size `B`.
    pub batch: usize,
    /// Number of heads `H`.
    pub heads: usize,
    /// Query sequence length `S_q`.
    pub seq_q: usize,
    /// Key/value sequence length `S_kv`.
    pub seq_kv: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
}

impl Shape {
    /// One query row and one key of head dim `head_dim`: the smallest problem, for what depends
    /// on the head dim alone (a kernel's shared memory, its compile).
    pub fn single(head_dim: usize) -> Shape {
        Shape {
            batch: 1,
            heads: 1,
            seq_q: 1,
            seq_kv: 1,
            head_dim,
        }
    }

    /// A shape whose extents are all at least 1 and whose element counts fit in `usize`.
    pub fn new(
        batch: usize,
        heads: usize,
        seq_q: usize,
        seq_kv: usize,
        head_dim: usize,
    ) -> Result<Shape, OracleError> {
        let invalid = |reason| OracleError::InvalidShape {
            batch,
            heads,
            seq_q,
            seq_kv,
            head_dim,
            reason,
        };
        if [batch, heads, seq_q, seq_kv, head_dim].contains(&0) {
            return Err(invalid("every extent must be >= 1"));
        }
        let count = |seq: usize| {
            batch
                .checked_mul(heads)
                .and_then(|n| n.checked_mul(seq))
                .and_then(|n| n.checked_mul(head_dim))
                // Byte counts of f32 buffers must fit too.
                .and_then(|n| n.checked_mul(8))
        };
        if count(seq_q).is_none() || count(seq_kv).is_none() {
            return Err(invalid("element count overflows usize"));
        }
        Ok(Shape {
            batch,
            heads,
            seq_q,
            seq_kv,
            head_dim,
        })
    }

    /// The dims of Q and of the output: `[B, H, S_q, D]`.
    pub fn q_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq_q, self.head_dim]
    }

    /// The dims of K and V: `[B, H, S_kv, D]`.
    pub fn kv_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq_kv, self.head_dim]
    }

    /// Element count of Q (and of the output).
    pub fn q_len(&self) -> usize {
        self.q_dims().iter().product()
    }

    /// Element count of K (and of V).
    pub fn kv_len(&self) -> usize {
        self.kv_dims().iter().product()
    }

    /// FlashAttention's convention: `4·B·H·S_q·S_kv·D` (two matmuls, 2 flops per multiply-add),
    /// halved when causal. For `S_q ≠ S_kv` the causal halving is the same convention, not an
    /// exact count of unmasked pairs.
    pub fn flops(&self, causal: bool) -> f64 {
        let full = 4.0
            * self.batch as f64
            * self.heads as f64
            * self.seq_q as f64
            * self.seq_kv as f64
            * self.head_dim as f64;
        if causal {
            full / 2.0
        } else {
            full
        }
    }

    /// The shape described by Q's and K's dims, which must agree on B, H and D.
    pub(crate) fn from_q_kv_dims(q: [usize; 4], kv: [usize; 4]) -> Result<Shape, OracleError> {
        if q[0] != kv[0] || q[1] != kv[1] || q[3] != kv[3] {
            return Err(OracleError::DimsMismatch {
                tensor: "k",
                expected: format!("[{}, {}, S_kv, {}] to match q", q[0], q[1], q[3]),
                found: kv,
            });
        }
        Shape::new(q[0], q[1], q[2], kv[2], q[3])
    }
}

/// Formats as `"B,H,S,D"` when `S_q == S_kv`, else `"B,H,SQ,SKV,D"`; parses back with `FromStr`.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.seq_q == self.seq_kv {
            write!(
                f,
                "{},{},{},{}",
                self.batch, self.heads, self.seq_q, self.head_dim
            )
        } else {
            write!(
                f,
                "{},{},{},{},{}",
                self.batch, self.heads, self.seq_q, self.seq_kv, self.head_dim
            )
        }
    }
}

impl FromStr for Shape {
    type Err = OracleError;

    /// Accepts `"B,H,S,D"` (`S_q = S_kv = S`) or `"B,H,SQ,SKV,D"`; spaces around numbers are allowed.
    fn from_str(input: &str) -> Result<Shape, OracleError> {
        let parse_error = |reason: String| OracleError::ParseShape {
            input: input.to_owned(),
            reason,
        };
        let numbers = input
            .split(',')
            .map(|field| {
                let field = field.trim();
                field
                    .parse::<usize>()
                    .map_err(|_| parse_error(format!("{field:?} is not a non-negative integer")))
            })
            .collect::<Result<Vec<usize>, OracleError>>()?;
        let shape = match numbers[..] {
            [b, h, s, d] => Shape::new(b, h, s, s, d),
            [b, h, sq, skv, d] => Shape::new(b, h, sq, skv, d),
            _ => {
                return Err(parse_error(format!(
                    "{} comma-separated fields, need 4 or 5",
                    numbers.len()
                )))
            }
        };
        shape.map_err(|error| parse_error(error.to_string()))
    }
}

/// The element type of a device buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary16 (`half::f16`, CUDA `__half`).
    F16,
    /// bfloat16 (`half::bf16`, CUDA `__nv_bfloat16`).
    Bf16,
    /// IEEE binary32.
    F32,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
        }
    }

    /// Unit roundoff `u`: the largest relative error of rounding to nearest, half an ulp at 1.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F16 => 2f64.powi(-11),
            DType::Bf16 => 2f64.powi(-8),
            DType::F32 => 2f64.powi(-24),
        }
    }
}

/// `"fp16"`, `"bf16"` or `"f32"`.
impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F16 => "fp16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
        })
    }
}

impl FromStr for DType {
    type Err = OracleError;

    /// Accepts `fp16|f16|half`, `bf16`, `f32|fp32`, case-insensitively.
    fn from_str(input: &str) -> Result<DType, OracleError> {
        match input.trim().to_ascii_lowercase().as_str() {
            "fp16" | "f16" | "half" => Ok(DType::F16),
            "bf16" => Ok(DType::Bf16),
            "f32" | "fp32" => Ok(DType::F32),
            _ => Err(OracleError::ParseDType {
                input: input.to_owned(),
            }),
        }
    }
}

/// The attention parameters besides the tensors: `O = softmax(scale · Q·Kᵀ + mask) · V`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Multiplies the logits before the softmax; any finite value.
    pub scale: f64,
    /// Bottom-right aligned causal mask: query `i` sees keys `j ≤ i + S_kv − S_q`.
    pub causal: bool,
}

impl Params {
    /// The default scale `1/√D`.
    pub fn new(head_dim: usize, causal: bool) -> Params {
        Params {
            scale: 1.0 / (head_dim as f64).sqrt(),
            causal,
        }
    }

    /// The same parameters with another scale.
    pub fn with_scale(self, scale: f64) -> Params {
        Params { scale, ..self }
    }

    /// The exclusive end of the keys query `row` may see: `S_kv` without a mask, else
    /// `row + 1 + S_kv − S_q` clamped to `[0, S_kv]` (0 means a fully masked row).
    pub fn kv_end(&self, row: usize, seq_q: usize, seq_kv: usize) -> usize {
        if !self.causal {
            return seq_kv;
        }
        // row < seq_q, so row + 1 + seq_kv - seq_q never underflows when computed in this order.
        (row + 1 + seq_kv).saturating_sub(seq_q).min(seq_kv)
    }
}
