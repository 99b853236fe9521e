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

/// A sliding attention window (FlashAttention's `window_size`): query row `i`, with
/// `diag = i + S_kv − S_q`, sees keys `diag − left ≤ j ≤ diag + right`; `None` is unbounded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct WindowSpec {
    /// Keys before the diagonal.
    pub left: Option<usize>,
    /// Keys after the diagonal.
    pub right: Option<usize>,
}

impl fmt::Display for WindowSpec {
    /// `L,R` with `-1` for an unbounded side.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |s: Option<usize>| s.map_or("-1".to_string(), |n| n.to_string());
        write!(f, "{},{}", side(self.left), side(self.right))
    }
}

/// One attention problem: `O = softmax(Q·Kᵀ·scale + mask)·V` with Q `[batch, heads, seq_q, head_dim]`
/// and K, V `[batch, kv_heads, seq_kv, head_dim]`.
///
/// Displays as `"B,H,S,D"` when `seq_q == seq_kv`, else `"B,H,SQ,SKV,D"` (`H` as `HQ/HKV` for
/// grouped-query attention), followed by `" causal"`, `" window=L,R"` and the dtype when it is not
/// fp16; [`FromStr`] reads the same text back.
///
/// ```
/// use attn_evidence::ShapeSpec;
/// let shape: ShapeSpec = "4,16,1024,64 causal".parse()?;
/// assert_eq!(shape.to_string(), "4,16,1024,64 causal");
/// assert_eq!(shape.flops(), 4.0 * 4.0 * 16.0 * 1024.0 * 1024.0 * 64.0 / 2.0);
/// let cross = ShapeSpec { seq_kv: 4096, causal: false, dtype: attn_evidence::Dtype::Bf16, ..shape };
/// assert_eq!(cross.to_string(), "4,16,1024,4096,64 bf16");
/// let local: ShapeSpec = "2,32/8,16384,128 causal window=4096,0".parse()?;
/// assert_eq!((local.heads, local.kv_heads(), local.to_string().as_str()),
///            (32, 8, "2,32/8,16384,128 causal window=4096,0"));
/// # Ok::<(), attn_evidence::EvidenceError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShapeSpec {
    /// Batch size B.
    pub batch: usize,
    /// Number of (query) heads H.
    pub heads: usize,
    /// Key/value heads when fewer than `heads` (grouped-query or multi-query attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<usize>,
    /// Query sequence length.
    pub seq_q: usize,
    /// Key/value sequence length.
    pub seq_kv: usize,
    /// Head dimension D.
    pub head_dim: usize,
    /// Causal mask, aligned bottom-right.
    pub causal: bool,
    /// A sliding window on top of the mask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// Element type.
    #[serde(default)]
    pub dtype: Dtype,
}

impl ShapeSpec {
    /// Key/value heads: `kv_heads`, or `heads` for multi-head attention.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// Floating-point operations of the two matmuls: `4·B·H·Sq·Skv·D`, halved when causal (the masked
    /// half is skipped); with a window, `4·B·H·D` × the (query, key) pairs the mask lets through,
    /// counted exactly, so that TFLOP/s measure the work a window leaves. Softmax is not
    /// counted, as is customary for attention TFLOP/s.
    pub fn flops(&self) -> f64 {
        let per_pair = 4.0 * self.batch as f64 * self.heads as f64 * self.head_dim as f64;
        if let Some(window) = self.window {
            return per_pair * self.visible_pairs(window) as f64;
        }
        let full = per_pair * self.seq_q as f64 * self.seq_kv as f64;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    /// The (query, key) pairs of one head that `window` and the causal mask let through.
    fn visible_pairs(&self, window: WindowSpec) -> u64 {
        let (sq, skv) = (self.seq_q as i64, self.seq_kv as i64);
        let right = if self.causal { Some(0) } else { window.right };
        (0..sq)
            .map(|row| {
                let diag = row + skv - sq;
                let lo = window.left.map_or(0, |l| (diag - l as i64).clamp(0, skv));
                let hi = right.map_or(skv, |r| (diag + 1 + r as i64).clamp(0, skv));
                (hi - lo).max(0) as u64
            })
            .sum()
    }

    /// Throughput in TFLOP/s when one call takes `time_us` microseconds.
    pub fn tflops(&self, time_us: f64) -> f64 {
        self.flops() / (time_us * 1e-6) / 1e12
    }
}

impl fmt::Display for ShapeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.batch, self.heads)?;
        if let Some(kv) = self.kv_heads.filter(|&kv| kv != self.heads) {
            write!(f, "/{kv}")?;
        }
        write!(f, ",{}", self.seq_q)?;
        if self.seq_kv != self.seq_q {
            write!(f, ",{}", self.seq_kv)?;
        }
        write!(f, ",{}", self.head_dim)?;
        if self.causal {
            f.write_str(" causal")?;
        }
        if let Some(window) = self.window {
            write!(f, " window={window}")?;
        }
        if self.dtype != Dtype::Fp16 {
            write!(f, " {}", self.dtype)?;
        }
        Ok(())
    }
}

impl FromStr for ShapeSpec {
    type Err = EvidenceError;

    /// Parses `"B,H,S,D"` or `"B,H,SQ,SKV,D"` (`H` may be `HQ/HKV`), then optional words
    /// `causal`, `window=L,R` (`-1` unbounded), `fp16`, `bf16`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| EvidenceError::Shape {
            text: text.to_owned(),
            reason,
        };
        let mut words = text.split_whitespace();
        let dims_text = words
            .next()
            .ok_or_else(|| fail("empty; expected B,H,S,D".into()))?;
        let mut kv_heads = None;
        let dims = dims_text
            .split(',')
            .enumerate()
            .map(|(index, d)| {
                let d = match d.split_once('/') {
                    Some((heads, kv)) if index == 1 => {
                        kv_heads = Some(
                            kv.trim()
                                .parse::<usize>()
                                .ok()
                                .filter(|&n| n > 0)
                                .ok_or_else(|| {
                                    fail(format!(
                                        "{kv:?} is not a positive number of key/value heads"
                                    ))
                                })?,
                        );
                        heads
                    }
                    _ => d,
                };
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
        if let Some(kv) = kv_heads {
            if heads % kv != 0 {
                return Err(fail(format!(
                    "{kv} key/value heads do not divide {heads} query heads"
                )));
            }
        }
        let mut shape = ShapeSpec {
            batch,
            heads,
            kv_heads: kv_heads.filter(|&kv| kv != heads),
            seq_q,
            seq_kv,
            head_dim,
            causal: false,
            window: None,
            dtype: Dtype::Fp16,
        };
        for word in words {
            match word {
                "causal" => shape.causal = true,
                "fp16" => shape.dtype = Dtype::Fp16,
                "bf16" => shape.dtype = Dtype::Bf16,
                w if w.starts_with("window=") => {
                    shape.window = Some(parse_window(&w["window=".len()..]).map_err(fail)?)
                }
                other => {
                    return Err(fail(format!(
                        "unknown word {other:?}; expected causal, window=L,R, fp16 or bf16"
                    )))
                }
            }
        }
        Ok(shape)
    }
}

/// `L,R`, each a non-negative integer or `-1` (unbounded).
fn parse_window(text: &str) -> Result<WindowSpec, String> {
    let side = |t: &str| match t.trim() {
        "-1" | "inf" => Ok(None),
        t => t
            .parse::<usize>()
            .map(Some)
            .map_err(|_| format!("window side {t:?} is not a non-negative integer or -1")),
    };
    match text.split(',').collect::<Vec<_>>()[..] {
        [left, right] => Ok(WindowSpec {
            left: side(left)?,
            right: side(right)?,
        }),
        _ => Err(format!(
            "window={text}: expected window=L,R (-1 for an unbounded side)"
        )),
    }
}
