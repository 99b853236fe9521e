//! Problem geometry ([`Shape`]) and the index of one output row ([`RowId`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ProblemError;

/// The geometry of one attention problem: Q is `[B, H, S_q, D]`, K and V are `[B, H_kv, S_kv, D]`
/// (`H_kv = H`: multi-head attention; `H_kv` a divisor of `H`: grouped-query, query head `h`
/// reading K/V head `h / (H / H_kv)`; `H_kv = 1`: multi-query).
///
/// Construct with [`Shape::new`] (and [`Shape::with_kv_heads`]) or parse from `"B,H,S,D"` /
/// `"B,H,SQ,SKV,D"`, `H` written `HQ/HKV` for grouped-query attention:
///
/// ```
/// use attn_problem::Shape;
/// let shape: Shape = "2,16,1024,64".parse()?;
/// assert_eq!(shape, Shape::new(2, 16, 1024, 1024, 64)?);
/// assert_eq!(shape.to_string(), "2,16,1024,64");
/// assert_eq!(shape.flops(false), 4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 64.0);
/// let gqa: Shape = "2,32/8,4096,128".parse()?;
/// assert_eq!((gqa.heads, gqa.kv_heads, gqa.group()), (32, 8, 4));
/// assert_eq!(gqa.kv_dims(), [2, 8, 4096, 128]);
/// assert_eq!(gqa.to_string(), "2,32/8,4096,128");
/// # Ok::<(), attn_problem::ProblemError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Batch size `B`.
    pub batch: usize,
    /// Number of query heads `H`.
    pub heads: usize,
    /// Number of key/value heads `H_kv`, a divisor of `H`.
    pub kv_heads: usize,
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
            kv_heads: 1,
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
    ) -> Result<Shape, ProblemError> {
        let invalid = |reason| ProblemError::InvalidShape {
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
            kv_heads: heads,
            seq_q,
            seq_kv,
            head_dim,
        })
    }

    /// The same shape with `kv_heads` key/value heads, which must divide the query heads.
    pub fn with_kv_heads(self, kv_heads: usize) -> Result<Shape, ProblemError> {
        if kv_heads == 0 || self.heads % kv_heads != 0 {
            return Err(ProblemError::InvalidShape {
                batch: self.batch,
                heads: self.heads,
                seq_q: self.seq_q,
                seq_kv: self.seq_kv,
                head_dim: self.head_dim,
                reason: "the key/value heads must divide the query heads",
            });
        }
        Ok(Shape { kv_heads, ..self })
    }

    /// Query heads per key/value head: 1 for multi-head attention (and for a hand-built shape
    /// with no key/value heads, which the checks refuse elsewhere, rather than a division by 0).
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// The dims of Q and of the output: `[B, H, S_q, D]`.
    pub fn q_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq_q, self.head_dim]
    }

    /// The dims of K and V: `[B, H_kv, S_kv, D]`.
    pub fn kv_dims(&self) -> [usize; 4] {
        [self.batch, self.kv_heads, self.seq_kv, self.head_dim]
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
}

/// Formats as `"B,H,S,D"` when `S_q == S_kv`, else `"B,H,SQ,SKV,D"` (`H` as `HQ/HKV` for
/// grouped-query attention); parses back with `FromStr`.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let heads = heads_text(self.heads, self.kv_heads);
        if self.seq_q == self.seq_kv {
            write!(f, "{},{heads},{},{}", self.batch, self.seq_q, self.head_dim)
        } else {
            write!(
                f,
                "{},{heads},{},{},{}",
                self.batch, self.seq_q, self.seq_kv, self.head_dim
            )
        }
    }
}

impl FromStr for Shape {
    type Err = ProblemError;

    /// Accepts `"B,H,S,D"` (`S_q = S_kv = S`) or `"B,H,SQ,SKV,D"`, `H` as `HQ/HKV` for
    /// grouped-query attention; spaces around numbers are allowed.
    fn from_str(input: &str) -> Result<Shape, ProblemError> {
        parse_dims(input).map_err(|reason| ProblemError::ParseShape {
            input: input.to_owned(),
            reason,
        })
    }
}

/// The dims word `B,H,S,D` or `B,H,SQ,SKV,D` (`H` as `HQ/HKV`), validated by [`Shape::new`] and
/// [`Shape::with_kv_heads`]; `Err` says in one line what is wrong. The one grammar of the dims,
/// for [`Shape`] and for the dense [`crate::ShapeSpec`].
pub(crate) fn parse_dims(input: &str) -> Result<Shape, String> {
    let number = |field: &str| {
        let field = field.trim();
        field
            .parse::<usize>()
            .map_err(|_| format!("{field:?} is not a non-negative integer"))
    };
    let mut kv_heads = None;
    let numbers = input
        .split(',')
        .enumerate()
        .map(|(index, field)| match field.split_once('/') {
            Some((heads, kv)) if index == 1 => {
                kv_heads = Some(number(kv)?);
                number(heads)
            }
            _ => number(field),
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let shape = match numbers[..] {
        [b, h, s, d] => Shape::new(b, h, s, s, d),
        [b, h, sq, skv, d] => Shape::new(b, h, sq, skv, d),
        _ => {
            return Err(format!(
                "{} comma-separated fields, need 4 or 5",
                numbers.len()
            ))
        }
    };
    let shape = match (shape, kv_heads) {
        (Ok(shape), Some(kv)) => shape.with_kv_heads(kv),
        (shape, _) => shape,
    };
    shape.map_err(|error| error.to_string())
}

/// `H` as written in shape text: `H`, or `HQ/HKV` for grouped-query attention.
pub(crate) fn heads_text(heads: usize, kv_heads: usize) -> String {
    if kv_heads == heads {
        heads.to_string()
    } else {
        format!("{heads}/{kv_heads}")
    }
}

/// One query row of a problem's output: (batch or sequence, head, row within it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RowId {
    /// Batch index (a varlen batch: the sequence).
    pub batch: usize,
    /// Head index.
    pub head: usize,
    /// Query row index within the head.
    pub row: usize,
}
