//! The text form of one problem ([`ShapeSpec`]): what evidence records and what `--shape` reads.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::mask::parse_window;
use crate::shape::{heads_text, parse_dims};
use crate::varlen::parse_lengths;
use crate::{DType, Params, ProblemError, ProblemKind, Shape, Varlen, Window};

/// One attention problem: `O = softmax(Q·Kᵀ·scale + mask)·V` with Q `[batch, heads, seq_q, head_dim]`
/// and K, V `[batch, kv_heads, seq_kv, head_dim]`, or a packed variable-length batch
/// ([`Varlen`]) whose `batch`, `seq_q` and `seq_kv` are its bounding dense shape (the number
/// of sequences, the longest lengths).
///
/// Displays as `"B,H,S,D"` when `seq_q == seq_kv`, else `"B,H,SQ,SKV,D"` (`H` as `HQ/HKV` for
/// grouped-query attention), a varlen batch as `"varlen=L1,L2,... H=H D=D"`, followed by
/// `" causal"`, `" window=L,R"` and the dtype when it is not fp16; [`FromStr`] reads the same
/// text back. Its JSON is the evidence files' `"shape"`: flat fields, `kv_heads`, `window`,
/// `varlen` and `kind` left out when absent or the default.
///
/// ```
/// use attn_problem::{DType, ShapeSpec};
/// let shape: ShapeSpec = "4,16,1024,64 causal".parse()?;
/// assert_eq!(shape.to_string(), "4,16,1024,64 causal");
/// assert_eq!(shape.flops(), 4.0 * 4.0 * 16.0 * 1024.0 * 1024.0 * 64.0 / 2.0);
/// let cross = ShapeSpec { seq_kv: 4096, causal: false, dtype: DType::Bf16, ..shape };
/// assert_eq!(cross.to_string(), "4,16,1024,4096,64 bf16");
/// let local: ShapeSpec = "2,32/8,16384,128 causal window=4096,0".parse()?;
/// assert_eq!((local.heads, local.kv_heads(), local.to_string().as_str()),
///            (32, 8, "2,32/8,16384,128 causal window=4096,0"));
/// let packed: ShapeSpec = "varlen=512,0,100:300 H=16/4 D=128 causal".parse()?;
/// assert_eq!((packed.batch, packed.seq_q, packed.seq_kv, packed.tokens()), (3, 512, 512, 612));
/// assert_eq!(packed.to_string(), "varlen=512,0,100:300 H=16/4 D=128 causal");
/// # Ok::<(), attn_problem::ProblemError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShapeSpec {
    /// Batch size B (a varlen batch: its number of sequences).
    pub batch: usize,
    /// Number of (query) heads H.
    pub heads: usize,
    /// Key/value heads when fewer than `heads` (grouped-query or multi-query attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<usize>,
    /// Query sequence length (a varlen batch: its longest, at least 1).
    pub seq_q: usize,
    /// Key/value sequence length (a varlen batch: its longest, at least 1).
    pub seq_kv: usize,
    /// Head dimension D.
    pub head_dim: usize,
    /// Causal mask, aligned bottom-right (within each sequence of a varlen batch).
    pub causal: bool,
    /// A sliding window on top of the mask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// A packed variable-length batch: the sequences' lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen: Option<Varlen>,
    /// Element type of Q, K, V and O: fp16 or bf16 ([`DType::INPUTS`]).
    #[serde(default, deserialize_with = "crate::dtype::deserialize_input")]
    pub dtype: DType,
    /// What the call computes: always the prefill forward pass (a decode batch is a
    /// [`crate::DecodeSpec`], and JSON naming another kind is refused).
    #[serde(
        default,
        skip_serializing_if = "ProblemKind::is_prefill_forward",
        deserialize_with = "deserialize_prefill"
    )]
    pub kind: ProblemKind,
}

impl ShapeSpec {
    /// The dense problem of `shape`, with no mask, fp16.
    pub fn dense(shape: &Shape) -> ShapeSpec {
        ShapeSpec {
            batch: shape.batch,
            heads: shape.heads,
            kv_heads: (shape.kv_heads != shape.heads).then_some(shape.kv_heads),
            seq_q: shape.seq_q,
            seq_kv: shape.seq_kv,
            head_dim: shape.head_dim,
            causal: false,
            window: None,
            varlen: None,
            dtype: DType::F16,
            kind: ProblemKind::PrefillForward,
        }
    }

    /// A varlen batch of `heads` query heads over `kv_heads` K/V heads (`None`: as many) of
    /// dimension `head_dim`, with no mask, fp16: `batch`, `seq_q` and `seq_kv` are its bounding
    /// shape.
    pub fn packed(
        varlen: Varlen,
        heads: usize,
        kv_heads: Option<usize>,
        head_dim: usize,
    ) -> ShapeSpec {
        let (seq_q, seq_kv) = varlen.longest();
        ShapeSpec {
            batch: varlen.sequences(),
            heads,
            kv_heads: kv_heads.filter(|&kv| kv != heads),
            seq_q,
            seq_kv,
            head_dim,
            causal: false,
            window: None,
            varlen: Some(varlen),
            dtype: DType::F16,
            kind: ProblemKind::PrefillForward,
        }
    }

    /// Key/value heads: `kv_heads`, or `heads` for multi-head attention.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// The scale `1/√D` and the mask: causal, and the window (none when absent).
    pub fn params(&self) -> Params {
        Params::new(self.head_dim, self.causal).with_window(self.window.unwrap_or_default())
    }

    /// Query tokens: `B·S_q`, or a varlen batch's total.
    pub fn tokens(&self) -> usize {
        match &self.varlen {
            Some(varlen) => varlen.total_q(),
            None => self.batch * self.seq_q,
        }
    }

    /// Floating-point operations of the two matmuls: `4·B·H·Sq·Skv·D`, halved when causal (the masked
    /// half is skipped); with a window, or for a varlen batch, `4·H·D` × the (query, key) pairs
    /// the masks let through, counted exactly (per sequence) by [`Params::visible_pairs`], so
    /// that TFLOP/s measure the work a window or a batch of mixed lengths leaves. Softmax is not
    /// counted, as is customary for attention TFLOP/s.
    pub fn flops(&self) -> f64 {
        let per_pair = 4.0 * self.heads as f64 * self.head_dim as f64;
        let params = self.params();
        if let Some(varlen) = &self.varlen {
            let pairs: u64 = varlen
                .seqlens_q
                .iter()
                .zip(&varlen.seqlens_kv)
                .map(|(&sq, &skv)| params.visible_pairs(sq, skv))
                .sum();
            return per_pair * pairs as f64;
        }
        let per_pair = per_pair * self.batch as f64;
        if self.window.is_some() {
            return per_pair * params.visible_pairs(self.seq_q, self.seq_kv) as f64;
        }
        let full = per_pair * self.seq_q as f64 * self.seq_kv as f64;
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
        let heads = heads_text(self.heads, self.kv_heads());
        match &self.varlen {
            Some(varlen) => write!(f, "varlen={varlen} H={heads} D={}", self.head_dim)?,
            None => {
                write!(f, "{},{heads},{}", self.batch, self.seq_q)?;
                if self.seq_kv != self.seq_q {
                    write!(f, ",{}", self.seq_kv)?;
                }
                write!(f, ",{}", self.head_dim)?;
            }
        }
        if self.causal {
            f.write_str(" causal")?;
        }
        if let Some(window) = self.window {
            write!(f, " window={window}")?;
        }
        if self.dtype != DType::F16 {
            write!(f, " {}", self.dtype)?;
        }
        Ok(())
    }
}

impl FromStr for ShapeSpec {
    type Err = ProblemError;

    /// Parses `"B,H,S,D"` or `"B,H,SQ,SKV,D"` (`H` may be `HQ/HKV`), or a varlen batch
    /// `"varlen=L1,L2,... H=H D=D"` (lengths `Q:KV` where they differ; the three words in any
    /// order), then optional words `causal`, `window=L,R` (`-1` unbounded), `fp16`, `bf16`: one
    /// dtype and one window at most, and with `causal` a window whose right side is 0 or `-1`
    /// (causal is right = 0).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| ProblemError::Shape {
            text: text.to_owned(),
            reason,
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return Err(fail(
                "empty; expected B,H,S,D or varlen=L1,L2,... H=H D=D".into(),
            ));
        }
        if words[0] == "decode" {
            return Err(fail(
                "a decode batch is a DecodeSpec (decode q=Q kv=KV H=H D=D ...), not a prefill shape"
                    .into(),
            ));
        }
        let (mut shape, rest) = if words.iter().any(|w| w.starts_with("varlen=")) {
            parse_packed(&words).map_err(fail)?
        } else {
            let dims = parse_dims(words[0]).map_err(fail)?;
            (ShapeSpec::dense(&dims), words[1..].to_vec())
        };
        let (mut dtype_word, mut window_word) = (None::<&str>, None::<&str>);
        for word in rest {
            match word {
                "causal" => shape.causal = true,
                "fp16" | "bf16" => {
                    once(&mut dtype_word, word, "dtype").map_err(fail)?;
                    shape.dtype = if word == "fp16" {
                        DType::F16
                    } else {
                        DType::Bf16
                    };
                }
                w if w.starts_with("window=") => {
                    once(&mut window_word, word, "window").map_err(fail)?;
                    let value = &w["window=".len()..];
                    shape.window =
                        Some(parse_window(value).map_err(|reason| fail(format!("{w}: {reason}")))?);
                }
                other => {
                    return Err(fail(format!(
                        "unknown word {other:?}; expected causal, window=L,R, fp16 or bf16"
                    )))
                }
            }
        }
        if let (true, Some(window)) = (shape.causal, shape.window) {
            if let Some(right) = window.right.filter(|&r| r > 0) {
                return Err(fail(format!(
                    "causal means right = 0, but window={window} sees {right} keys past the diagonal; write window={},0 or drop causal",
                    window.left.map_or("-1".to_string(), |l| l.to_string())
                )));
            }
        }
        Ok(shape)
    }
}

/// Reads a prefill problem's kind, refusing the kinds a [`ShapeSpec`] cannot describe.
fn deserialize_prefill<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ProblemKind, D::Error> {
    match ProblemKind::deserialize(deserializer)? {
        ProblemKind::PrefillForward => Ok(ProblemKind::PrefillForward),
        other => Err(serde::de::Error::custom(format!(
            "a shape of kind {other:?} is not a prefill problem (a decode batch is a DecodeSpec)"
        ))),
    }
}

/// Records `word` as the one word of its `what` (a dtype, a window), refusing a second: the
/// last one winning would hide a typo.
pub(crate) fn once<'w>(
    seen: &mut Option<&'w str>,
    word: &'w str,
    what: &str,
) -> Result<(), String> {
    match seen.replace(word) {
        Some(first) => Err(format!("two {what}s, {first:?} and {word:?}: give one")),
        None => Ok(()),
    }
}

/// A positive integer, or one line saying what `text` is not.
pub(crate) fn positive(text: &str, what: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a positive {what}"))
}

/// `H` or `HQ/HKV` of a varlen batch's `H=` word: the query heads and, when given, the K/V heads
/// (dividing them).
pub(crate) fn parse_heads(text: &str) -> Result<(usize, Option<usize>), String> {
    let (heads, kv_heads) = match text.split_once('/') {
        Some((heads, kv)) => (
            positive(heads, "integer")?,
            Some(positive(kv, "number of key/value heads")?),
        ),
        None => (positive(text, "integer")?, None),
    };
    if let Some(kv) = kv_heads {
        if heads % kv != 0 {
            return Err(format!(
                "{kv} key/value heads do not divide {heads} query heads"
            ));
        }
    }
    Ok((heads, kv_heads.filter(|&kv| kv != heads)))
}

/// A varlen batch's words `varlen=...`, `H=...` and `D=...` (in any order) out of `words`; the
/// other words are returned for the caller.
fn parse_packed<'w>(words: &'w [&'w str]) -> Result<(ShapeSpec, Vec<&'w str>), String> {
    let (mut lengths, mut heads, mut head_dim) = (None, None, None);
    let mut rest = Vec::new();
    for &word in words {
        let slot = match word.split_once('=') {
            Some(("varlen", value)) => Some((&mut lengths, value)),
            Some(("H", value)) => Some((&mut heads, value)),
            Some(("D", value)) => Some((&mut head_dim, value)),
            _ => None,
        };
        match slot {
            Some((slot, _)) if slot.is_some() => {
                return Err(format!("{word:?} is given twice"));
            }
            Some((slot, value)) => *slot = Some(value),
            None => rest.push(word),
        }
    }
    let (Some(lengths), Some(heads), Some(head_dim)) = (lengths, heads, head_dim) else {
        return Err(
            "a varlen batch is written varlen=L1,L2,... H=H D=D (H as HQ/HKV for grouped heads)"
                .into(),
        );
    };
    let varlen = parse_lengths(lengths)?;
    let (heads, kv_heads) = parse_heads(heads)?;
    let head_dim = positive(head_dim, "head dim")?;
    Ok((ShapeSpec::packed(varlen, heads, kv_heads, head_dim), rest))
}
