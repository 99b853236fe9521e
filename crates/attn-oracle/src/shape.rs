//! Problem geometry ([`Shape`]), element types ([`DType`]) and attention parameters ([`Params`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::OracleError;

/// The geometry of one attention problem: Q is `[B, H, S_q, D]`, K and V are `[B, H_kv, S_kv, D]`
/// (`H_kv = H`: multi-head attention; `H_kv` a divisor of `H`: grouped-query, query head `h`
/// reading K/V head `h / (H / H_kv)`; `H_kv = 1`: multi-query).
///
/// Construct with [`Shape::new`] (and [`Shape::with_kv_heads`]) or parse from `"B,H,S,D"` /
/// `"B,H,SQ,SKV,D"`, `H` written `HQ/HKV` for grouped-query attention:
///
/// ```
/// use attn_oracle::Shape;
/// let shape: Shape = "2,16,1024,64".parse()?;
/// assert_eq!(shape, Shape::new(2, 16, 1024, 1024, 64)?);
/// assert_eq!(shape.to_string(), "2,16,1024,64");
/// assert_eq!(shape.flops(false), 4.0 * 2.0 * 16.0 * 1024.0 * 1024.0 * 64.0);
/// let gqa: Shape = "2,32/8,4096,128".parse()?;
/// assert_eq!((gqa.heads, gqa.kv_heads, gqa.group()), (32, 8, 4));
/// assert_eq!(gqa.kv_dims(), [2, 8, 4096, 128]);
/// assert_eq!(gqa.to_string(), "2,32/8,4096,128");
/// # Ok::<(), attn_oracle::OracleError>(())
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
            kv_heads: heads,
            seq_q,
            seq_kv,
            head_dim,
        })
    }

    /// The same shape with `kv_heads` key/value heads, which must divide the query heads.
    pub fn with_kv_heads(self, kv_heads: usize) -> Result<Shape, OracleError> {
        if kv_heads == 0 || self.heads % kv_heads != 0 {
            return Err(OracleError::InvalidShape {
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

    /// The shape described by Q's and K's dims, which must agree on B and D, K's heads dividing Q's.
    pub fn from_q_kv_dims(q: [usize; 4], kv: [usize; 4]) -> Result<Shape, OracleError> {
        if q[0] != kv[0] || q[3] != kv[3] || kv[1] == 0 || q[1] % kv[1] != 0 {
            return Err(OracleError::DimsMismatch {
                tensor: "k",
                expected: format!(
                    "[{}, H_kv, S_kv, {}] with H_kv dividing {} to match q",
                    q[0], q[3], q[1]
                ),
                found: kv,
            });
        }
        Shape::new(q[0], q[1], q[2], kv[2], q[3])?.with_kv_heads(kv[1])
    }

    /// The query heads as written in shape strings: `H`, or `HQ/HKV` for grouped-query attention.
    fn heads_text(&self) -> String {
        if self.kv_heads == self.heads {
            self.heads.to_string()
        } else {
            format!("{}/{}", self.heads, self.kv_heads)
        }
    }
}

/// Formats as `"B,H,S,D"` when `S_q == S_kv`, else `"B,H,SQ,SKV,D"` (`H` as `HQ/HKV` for
/// grouped-query attention); parses back with `FromStr`.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let heads = self.heads_text();
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
    type Err = OracleError;

    /// Accepts `"B,H,S,D"` (`S_q = S_kv = S`) or `"B,H,SQ,SKV,D"`, `H` as `HQ/HKV` for
    /// grouped-query attention; spaces around numbers are allowed.
    fn from_str(input: &str) -> Result<Shape, OracleError> {
        let parse_error = |reason: String| OracleError::ParseShape {
            input: input.to_owned(),
            reason,
        };
        let mut kv_heads = None;
        let numbers = input
            .split(',')
            .enumerate()
            .map(|(index, field)| {
                let field = match field.split_once('/') {
                    Some((heads, kv)) if index == 1 => {
                        let kv = kv.trim();
                        kv_heads = Some(kv.parse::<usize>().map_err(|_| {
                            parse_error(format!("{kv:?} is not a non-negative integer"))
                        })?);
                        heads
                    }
                    _ => field,
                };
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
        let shape = match (shape, kv_heads) {
            (Ok(shape), Some(kv)) => shape.with_kv_heads(kv),
            (shape, _) => shape,
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

/// A sliding (local) attention window, FlashAttention's definition: with `diag = i + S_kv − S_q`,
/// query row `i` sees keys `diag − left ≤ j ≤ diag + right`; `None` is unbounded on that side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    /// Keys before the diagonal a row may see.
    pub left: Option<usize>,
    /// Keys after the diagonal a row may see.
    pub right: Option<usize>,
}

impl Window {
    /// No window: every key (up to the causal mask).
    pub const NONE: Window = Window {
        left: None,
        right: None,
    };

    /// Whether either side is bounded.
    pub fn is_bounded(&self) -> bool {
        self.left.is_some() || self.right.is_some()
    }

    /// The ABI's pair `(window_left, window_right)`, `-1` for an unbounded side (kernels/README.md).
    pub fn abi(&self) -> (i32, i32) {
        let side = |s: Option<usize>| s.map_or(-1, |n| n.min(i32::MAX as usize) as i32);
        (side(self.left), side(self.right))
    }
}

/// `"L,R"`, `-1` for an unbounded side (FlashAttention's `window_size`).
impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (left, right) = self.abi();
        write!(f, "{left},{right}")
    }
}

impl FromStr for Window {
    type Err = OracleError;

    /// Parses `"L,R"` with `-1` (or `inf`) for an unbounded side.
    fn from_str(input: &str) -> Result<Window, OracleError> {
        let fail = |reason: String| OracleError::ParseWindow {
            input: input.to_owned(),
            reason,
        };
        let side = |text: &str| match text.trim() {
            "-1" | "inf" => Ok(None),
            t => t
                .parse::<usize>()
                .map(Some)
                .map_err(|_| fail(format!("{t:?} is not a non-negative integer, -1 or inf"))),
        };
        match input.split(',').collect::<Vec<_>>()[..] {
            [left, right] => Ok(Window {
                left: side(left)?,
                right: side(right)?,
            }),
            _ => Err(fail("expected L,R (-1 for an unbounded side)".into())),
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
    /// A sliding window on top of the causal mask (causal is `right = 0`).
    #[serde(default)]
    pub window: Window,
}

impl Params {
    /// The default scale `1/√D`, no window.
    pub fn new(head_dim: usize, causal: bool) -> Params {
        Params {
            scale: 1.0 / (head_dim as f64).sqrt(),
            causal,
            window: Window::NONE,
        }
    }

    /// The same parameters with another scale.
    pub fn with_scale(self, scale: f64) -> Params {
        Params { scale, ..self }
    }

    /// The same parameters with a sliding window.
    pub fn with_window(self, window: Window) -> Params {
        Params { window, ..self }
    }

    /// The ABI's `(window_left, window_right)` for sequences of at most `seq_q` queries and
    /// `seq_kv` keys: `-1` for an unbounded side, causal as `window_right = 0`, and each bound
    /// clipped to `seq_q + seq_kv` (a wider window sees the same keys) so that kernels' int32
    /// arithmetic on it cannot overflow.
    pub fn abi_window(&self, seq_q: usize, seq_kv: usize) -> (i32, i32) {
        let limit = (seq_q + seq_kv).min(i32::MAX as usize / 2);
        let side = |s: Option<usize>| s.map_or(-1, |n| n.min(limit) as i32);
        (side(self.window.left), side(self.right_bound()))
    }

    /// The right bound the mask applies: `Some(0)` when causal, else the window's.
    pub fn right_bound(&self) -> Option<usize> {
        if self.causal {
            Some(0)
        } else {
            self.window.right
        }
    }

    /// The keys query `row` may see, `lo..hi` within `0..S_kv` (empty for a fully masked row):
    /// with `diag = row + S_kv − S_q`, `diag − left ≤ j ≤ diag + right`, `right` 0 when causal.
    pub fn kv_range(&self, row: usize, seq_q: usize, seq_kv: usize) -> std::ops::Range<usize> {
        // diag may be negative: work in i128, where nothing here can overflow.
        let diag = row as i128 + seq_kv as i128 - seq_q as i128;
        let clip = |x: i128| x.clamp(0, seq_kv as i128) as usize;
        let lo = self.window.left.map_or(0, |l| clip(diag - l as i128));
        let hi = self
            .right_bound()
            .map_or(seq_kv, |r| clip(diag + 1 + r as i128));
        lo..hi.max(lo)
    }

    /// The exclusive end of the keys query `row` may see (see [`Params::kv_range`]).
    pub fn kv_end(&self, row: usize, seq_q: usize, seq_kv: usize) -> usize {
        self.kv_range(row, seq_q, seq_kv).end
    }

    /// The (query, key) pairs the mask lets through in one (batch, head): the exact count of the
    /// work a kernel that skips masked tiles must do.
    pub fn visible_pairs(&self, seq_q: usize, seq_kv: usize) -> u64 {
        (0..seq_q)
            .map(|row| self.kv_range(row, seq_q, seq_kv).len() as u64)
            .sum()
    }
}
