//! Packed variable-length batches (FlashAttention's "varlen" or THD layout): the lengths of a
//! batch's sequences ([`Varlen`]) and where each row lies in the packed tensors.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{ProblemError, RowId, Shape};

/// A packed variable-length batch: sequence `b` has `seqlens_q[b]` queries over `seqlens_kv[b]`
/// keys, the sequences packed one after another into Q, O `[total_q, H, D]` and K, V
/// `[total_kv, H_kv, D]` (held as `[1, total, H, D]`, cumulative int32 offsets `cu_seqlens`). A
/// sequence may be empty; every mask aligns bottom-right within its own sequence.
///
/// Written `L1,L2,...` (self-attention: as many keys as queries) with `Q:KV` for a sequence whose
/// lengths differ, e.g. `512,100:300,0`; serialized `{"seqlens_q": [...], "seqlens_kv": [...]}`.
///
/// ```
/// use attn_problem::Varlen;
/// let varlen: Varlen = "512,100:300,0".parse()?;
/// assert_eq!((varlen.sequences(), varlen.total_q(), varlen.total_kv()), (3, 612, 812));
/// assert_eq!(varlen.cu_seqlens_kv(), vec![0, 512, 812, 812]);
/// assert_eq!(varlen.to_string(), "512,100:300,0");
/// # Ok::<(), attn_problem::ProblemError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Varlen {
    /// Queries per sequence.
    pub seqlens_q: Vec<usize>,
    /// Keys per sequence.
    pub seqlens_kv: Vec<usize>,
}

/// Which side of the problem a packed tensor belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packed {
    /// Q or O: `[total_q, H, D]`.
    Queries,
    /// K or V: `[total_kv, H_kv, D]`.
    Keys,
}

impl Varlen {
    /// The most tokens a side may hold: the kernels' offsets (`cu_seqlens`) are int32.
    pub const MAX_TOKENS: usize = i32::MAX as usize;

    /// A batch of at least one sequence, not all empty, whose totals fit [`Varlen::MAX_TOKENS`].
    pub fn new(seqlens_q: Vec<usize>, seqlens_kv: Vec<usize>) -> Result<Varlen, ProblemError> {
        check_lengths(&seqlens_q, &seqlens_kv)
            .map_err(|reason| ProblemError::InvalidVarlen { reason })?;
        Ok(Varlen {
            seqlens_q,
            seqlens_kv,
        })
    }

    /// Self-attention: each sequence's keys are its queries.
    pub fn same(lengths: Vec<usize>) -> Result<Varlen, ProblemError> {
        Varlen::new(lengths.clone(), lengths)
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

    /// The sequence lengths of one side.
    pub fn lengths(&self, side: Packed) -> &[usize] {
        match side {
            Packed::Queries => &self.seqlens_q,
            Packed::Keys => &self.seqlens_kv,
        }
    }

    /// One side's `cu_seqlens`: `sequences() + 1` offsets from 0 to that side's total.
    pub fn cu_seqlens(&self, side: Packed) -> Vec<i32> {
        let lens = self.lengths(side);
        let mut offsets = Vec::with_capacity(lens.len() + 1);
        let mut total = 0i32;
        offsets.push(0);
        for &n in lens {
            total += n as i32; // Varlen::new checked the totals fit
            offsets.push(total);
        }
        offsets
    }

    /// `cu_seqlens_q`: `sequences() + 1` offsets from 0 to `total_q()`.
    pub fn cu_seqlens_q(&self) -> Vec<i32> {
        self.cu_seqlens(Packed::Queries)
    }

    /// `cu_seqlens_kv`, likewise.
    pub fn cu_seqlens_kv(&self) -> Vec<i32> {
        self.cu_seqlens(Packed::Keys)
    }

    /// The dense shape that bounds the batch: `B` sequences of the longest lengths (at least 1):
    /// the kernels' grid, and the heads and head dim of `heads_and_dim`.
    pub fn bounding_shape(&self, heads_and_dim: &Shape) -> Result<Shape, ProblemError> {
        let (seq_q, seq_kv) = self.longest();
        Shape::new(
            self.sequences(),
            heads_and_dim.heads,
            seq_q,
            seq_kv,
            heads_and_dim.head_dim,
        )?
        .with_kv_heads(heads_and_dim.kv_heads)
    }

    /// Dims of a packed tensor: `[1, total, heads, D]` (`Queries` with the query heads, `Keys`
    /// with the K/V heads of `shape`).
    pub fn dims(&self, side: Packed, shape: &Shape) -> [usize; 4] {
        match side {
            Packed::Queries => [1, self.total_q(), shape.heads, shape.head_dim],
            Packed::Keys => [1, self.total_kv(), shape.kv_heads, shape.head_dim],
        }
    }

    /// The row of (sequence, head, query row) in a packed `[1, total_q, heads, D]` tensor viewed
    /// as `total_q · heads` rows of `D` (`t·heads + h`, `t` the query's token); `None` outside
    /// the batch.
    pub fn packed_row(&self, id: &RowId, heads: usize) -> Option<usize> {
        let len = *self.seqlens_q.get(id.batch)?;
        (id.head < heads && id.row < len).then(|| {
            let token = self.seqlens_q[..id.batch].iter().sum::<usize>() + id.row;
            token * heads + id.head
        })
    }

    /// The inverse of [`Varlen::packed_row`]: (sequence, head, row within the sequence) of a
    /// packed row; `None` past the batch.
    pub fn row_id(&self, packed_row: usize, heads: usize) -> Option<RowId> {
        let (mut token, head) = (packed_row / heads.max(1), packed_row % heads.max(1));
        for (sequence, &len) in self.seqlens_q.iter().enumerate() {
            if token < len {
                return Some(RowId {
                    batch: sequence,
                    head,
                    row: token,
                });
            }
            token -= len;
        }
        None
    }
}

/// Why lengths cannot make a batch, in one line: not one of each per sequence, none, all empty,
/// or more tokens than the int32 offsets hold.
fn check_lengths(seqlens_q: &[usize], seqlens_kv: &[usize]) -> Result<(), String> {
    if seqlens_q.is_empty() || seqlens_q.len() != seqlens_kv.len() {
        return Err(format!(
            "{} query and {} key lengths: a varlen batch needs one of each per sequence, at least one sequence",
            seqlens_q.len(),
            seqlens_kv.len()
        ));
    }
    for (side, lens) in [("query", seqlens_q), ("key", seqlens_kv)] {
        // Checked: a sum of lengths near usize::MAX must be refused, not wrap.
        let total = lens.iter().try_fold(0usize, |sum, &n| sum.checked_add(n));
        if total.is_none_or(|t| t > Varlen::MAX_TOKENS) {
            return Err(format!(
                "too many {side} tokens: the kernels' int32 offsets hold at most {} in a batch",
                Varlen::MAX_TOKENS
            ));
        }
    }
    if seqlens_q.iter().all(|&n| n == 0) {
        return Err("every sequence is empty".into());
    }
    Ok(())
}

impl fmt::Display for Varlen {
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

impl FromStr for Varlen {
    type Err = ProblemError;

    /// `L1,L2,...` with `Q:KV` for a sequence of differing lengths.
    fn from_str(text: &str) -> Result<Varlen, ProblemError> {
        parse_lengths(text).map_err(|reason| ProblemError::InvalidVarlen { reason })
    }
}

/// `L1,L2,...` (`Q:KV` where they differ) as a checked batch; `Err` is one line. The one grammar
/// of the lengths, for [`Varlen`] and the `varlen=` word of [`crate::ShapeSpec`].
pub(crate) fn parse_lengths(text: &str) -> Result<Varlen, String> {
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
    check_lengths(&seqlens_q, &seqlens_kv)?;
    Ok(Varlen {
        seqlens_q,
        seqlens_kv,
    })
}
