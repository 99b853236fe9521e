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

/// A packed variable-length batch (FlashAttention's varlen layout): sequence `b` has
/// `seqlens_q[b]` queries over `seqlens_kv[b]` keys, the sequences packed one after another into
/// Q, O `[total_q, H, D]` and K, V `[total_kv, H_kv, D]`. A sequence may be empty.
///
/// Written `L1,L2,...` (self-attention: as many keys as queries) with `Q:KV` for a sequence whose
/// lengths differ, e.g. `512,100:300,0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarlenSpec {
    /// Queries per sequence.
    pub seqlens_q: Vec<usize>,
    /// Keys per sequence.
    pub seqlens_kv: Vec<usize>,
}

impl VarlenSpec {
    /// The most tokens a side may hold: the kernels' offsets (`cu_seqlens`) are int32.
    pub const MAX_TOKENS: usize = i32::MAX as usize;

    /// A batch of at least one sequence, not all empty, whose totals fit [`VarlenSpec::MAX_TOKENS`];
    /// `Err` says in one line what is wrong.
    pub fn new(seqlens_q: Vec<usize>, seqlens_kv: Vec<usize>) -> Result<VarlenSpec, String> {
        if seqlens_q.is_empty() || seqlens_q.len() != seqlens_kv.len() {
            return Err(format!(
                "{} query and {} key lengths: a varlen batch needs one of each per sequence, at least one sequence",
                seqlens_q.len(),
                seqlens_kv.len()
            ));
        }
        for (side, lens) in [("query", &seqlens_q), ("key", &seqlens_kv)] {
            // Checked: a sum of lengths near usize::MAX must be refused, not wrap.
            let total = lens.iter().try_fold(0usize, |sum, &n| sum.checked_add(n));
            if total.is_none_or(|t| t > VarlenSpec::MAX_TOKENS) {
                return Err(format!(
                    "too many {side} tokens: the kernels' int32 offsets hold at most {} in a batch",
                    VarlenSpec::MAX_TOKENS
                ));
            }
        }
        if seqlens_q.iter().all(|&n| n == 0) {
            return Err("every sequence is empty".into());
        }
        Ok(VarlenSpec {
            seqlens_q,
            seqlens_kv,
        })
    }

    /// Number of sequences (the kernels' `batch`).
    pub fn sequences(&self) -> usize {
        self.seqlens_q.len()
    }

    /// Queries of all sequences.
    pub fn total_q(&self) -> usize {
        self.seqlens_q.iter().sum()
    }

    /// Keys of all sequences.
    pub fn total_kv(&self) -> usize {
        self.seqlens_kv.iter().sum()
    }

    /// The longest sequence's queries and keys, each at least 1: the bounding dense shape's
    /// `S_q` and `S_kv` (the kernels' grid).
    pub fn longest(&self) -> (usize, usize) {
        let longest = |lens: &[usize]| lens.iter().copied().max().unwrap_or(0).max(1);
        (longest(&self.seqlens_q), longest(&self.seqlens_kv))
    }

    /// Sequences with at least one query.
    pub fn non_empty(&self) -> usize {
        self.seqlens_q.iter().filter(|&&n| n > 0).count()
    }
}

impl fmt::Display for VarlenSpec {
    /// `L1,L2,...`, a sequence whose lengths differ as `Q:KV`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (q, kv)) in self.seqlens_q.iter().zip(&self.seqlens_kv).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if q == kv {
                write!(f, "{q}")?;
            } else {
                write!(f, "{q}:{kv}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for VarlenSpec {
    type Err = String;

    /// `L1,L2,...` with `Q:KV` for a sequence of differing lengths; `Err` is one line.
    fn from_str(text: &str) -> Result<VarlenSpec, String> {
        if text.trim().is_empty() {
            return Err(
                "varlen= lists no sequence lengths; expected varlen=L1,L2,... (Q:KV where they differ)"
                    .into(),
            );
        }
        let length = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("sequence length {t:?} is not a non-negative integer"))
        };
        let (mut seqlens_q, mut seqlens_kv) = (vec![], vec![]);
        for item in text.split(',') {
            let (q, kv) = match item.split_once(':') {
                Some((q, kv)) => (length(q)?, length(kv)?),
                None => {
                    let n = length(item)?;
                    (n, n)
                }
            };
            seqlens_q.push(q);
            seqlens_kv.push(kv);
        }
        VarlenSpec::new(seqlens_q, seqlens_kv)
    }
}

/// One attention problem: `O = softmax(Q·Kᵀ·scale + mask)·V` with Q `[batch, heads, seq_q, head_dim]`
/// and K, V `[batch, kv_heads, seq_kv, head_dim]`, or a packed variable-length batch
/// ([`VarlenSpec`]) whose `batch`, `seq_q` and `seq_kv` are its bounding dense shape (the number
/// of sequences, the longest lengths).
///
/// Displays as `"B,H,S,D"` when `seq_q == seq_kv`, else `"B,H,SQ,SKV,D"` (`H` as `HQ/HKV` for
/// grouped-query attention), a varlen batch as `"varlen=L1,L2,... H=H D=D"`, followed by
/// `" causal"`, `" window=L,R"` and the dtype when it is not fp16; [`FromStr`] reads the same
/// text back.
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
/// let packed: ShapeSpec = "varlen=512,0,100:300 H=16/4 D=128 causal".parse()?;
/// assert_eq!((packed.batch, packed.seq_q, packed.seq_kv, packed.tokens()), (3, 512, 512, 612));
/// assert_eq!(packed.to_string(), "varlen=512,0,100:300 H=16/4 D=128 causal");
/// # Ok::<(), attn_evidence::EvidenceError>(())
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
    pub window: Option<WindowSpec>,
    /// A packed variable-length batch: the sequences' lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen: Option<VarlenSpec>,
    /// Element type.
    #[serde(default)]
    pub dtype: Dtype,
}

impl ShapeSpec {
    /// A varlen batch of `heads` query heads over `kv_heads` K/V heads (`None`: as many) of
    /// dimension `head_dim`, with no mask, fp16: `batch`, `seq_q` and `seq_kv` are its bounding
    /// shape.
    pub fn packed(
        varlen: VarlenSpec,
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
            dtype: Dtype::Fp16,
        }
    }

    /// Key/value heads: `kv_heads`, or `heads` for multi-head attention.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
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
    /// the masks let through, counted exactly (per sequence), so that TFLOP/s measure the work a
    /// window or a batch of mixed lengths leaves. Softmax is not counted, as is customary for
    /// attention TFLOP/s.
    pub fn flops(&self) -> f64 {
        let per_pair = 4.0 * self.heads as f64 * self.head_dim as f64;
        if let Some(varlen) = &self.varlen {
            let pairs: u64 = varlen
                .seqlens_q
                .iter()
                .zip(&varlen.seqlens_kv)
                .map(|(&sq, &skv)| self.visible_pairs(sq, skv))
                .sum();
            return per_pair * pairs as f64;
        }
        let per_pair = per_pair * self.batch as f64;
        if self.window.is_some() {
            return per_pair * self.visible_pairs(self.seq_q, self.seq_kv) as f64;
        }
        let full = per_pair * self.seq_q as f64 * self.seq_kv as f64;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    /// The (query, key) pairs of one head of `sq` queries over `skv` keys that the window and the
    /// causal mask let through (the oracle's `Params::visible_pairs`, which attn-measure's tests
    /// hold this to).
    fn visible_pairs(&self, sq: usize, skv: usize) -> u64 {
        let window = self.window.unwrap_or_default();
        let (sq, skv) = (sq as i64, skv as i64);
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

    /// `H` as written in shape text: `H`, or `HQ/HKV` for grouped heads.
    fn heads_text(&self) -> String {
        match self.kv_heads.filter(|&kv| kv != self.heads) {
            Some(kv) => format!("{}/{kv}", self.heads),
            None => self.heads.to_string(),
        }
    }
}

impl fmt::Display for ShapeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.varlen {
            Some(varlen) => write!(
                f,
                "varlen={varlen} H={} D={}",
                self.heads_text(),
                self.head_dim
            )?,
            None => {
                write!(f, "{},{},{}", self.batch, self.heads_text(), self.seq_q)?;
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
        if self.dtype != Dtype::Fp16 {
            write!(f, " {}", self.dtype)?;
        }
        Ok(())
    }
}

impl FromStr for ShapeSpec {
    type Err = EvidenceError;

    /// Parses `"B,H,S,D"` or `"B,H,SQ,SKV,D"` (`H` may be `HQ/HKV`), or a varlen batch
    /// `"varlen=L1,L2,... H=H D=D"` (lengths `Q:KV` where they differ; the three words in any
    /// order), then optional words `causal`, `window=L,R` (`-1` unbounded), `fp16`, `bf16`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| EvidenceError::Shape {
            text: text.to_owned(),
            reason,
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return Err(fail(
                "empty; expected B,H,S,D or varlen=L1,L2,... H=H D=D".into(),
            ));
        }
        let (mut shape, rest) = if words.iter().any(|w| w.starts_with("varlen=")) {
            parse_packed(&words).map_err(fail)?
        } else {
            (parse_dense(words[0]).map_err(fail)?, words[1..].to_vec())
        };
        for word in rest {
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

/// A positive integer, or one line saying what `text` is not.
fn positive(text: &str, what: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a positive {what}"))
}

/// `H` or `HQ/HKV`: the query heads and, when given, the K/V heads (dividing them).
fn parse_heads(text: &str) -> Result<(usize, Option<usize>), String> {
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

/// The dense dims word `B,H,S,D` or `B,H,SQ,SKV,D`, with no mask, fp16.
fn parse_dense(dims_text: &str) -> Result<ShapeSpec, String> {
    let fields: Vec<&str> = dims_text.split(',').collect();
    if !(4..=5).contains(&fields.len()) {
        return Err(format!(
            "{} numbers; expected B,H,S,D or B,H,SQ,SKV,D",
            fields.len()
        ));
    }
    let (heads, kv_heads) = parse_heads(fields[1])?;
    let number = |i: usize| positive(fields[i], "integer");
    let (batch, seq_q, head_dim) = (number(0)?, number(2)?, number(fields.len() - 1)?);
    let seq_kv = if fields.len() == 5 { number(3)? } else { seq_q };
    Ok(ShapeSpec {
        batch,
        heads,
        kv_heads,
        seq_q,
        seq_kv,
        head_dim,
        causal: false,
        window: None,
        varlen: None,
        dtype: Dtype::Fp16,
    })
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
    let varlen: VarlenSpec = lengths.parse()?;
    let (heads, kv_heads) = parse_heads(heads)?;
    let head_dim = positive(head_dim, "head dim")?;
    Ok((ShapeSpec::packed(varlen, heads, kv_heads, head_dim), rest))
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
