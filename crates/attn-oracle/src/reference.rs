//! The primary reference: exact attention in f64, for all query rows or a seeded sample of them.
//!
//! Per row: logits `s_j = scale · q·k_j` for the keys the row may see, `m = max s_j`,
//! `o = Σ exp(s_j − m)·v_j / Σ exp(s_j − m)`, `lse = m + ln Σ exp(s_j − m)`. Inputs of every
//! element type widen to f64 exactly, so the only error is f64 rounding, about `(D + S_kv)·2⁻⁵³`
//! relative: some 10⁻¹², a thousand times below the tightest tolerance here.
//!
//! A row that sees no key (causal with `S_q > S_kv`) has, by definition, output 0 and
//! logsumexp −∞.

use rand::seq::index;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{HostData, HostTensor, OracleError, Params, RowId, Shape};

/// Which query rows [`reference()`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowSelection {
    /// Every row: exact everywhere, `O(B·H·S_q·S_kv·D)`.
    All,
    /// In each (batch, head), the first and last rows plus `rows_per_head − 2` others drawn
    /// without replacement (seeded, a fresh draw per (batch, head)). All rows when
    /// `rows_per_head ≥ S_q`. Needs `rows_per_head ≥ 2`.
    Sampled {
        /// Rows per (batch, head), at least 2.
        rows_per_head: usize,
        /// The seed of the draw; record it with the result.
        seed: u64,
    },
    /// The correctness checks' rows ([`RowSelection::for_check`]): in each (batch, head), the
    /// first and last rows, every row of a ragged last tile (past the largest multiple of any
    /// of [`TILE_HEIGHTS`] at or under S_q, where tiled kernels take their edge paths), and
    /// `sampled` other rows drawn without replacement (seeded, a fresh draw per (batch, head)).
    Checked {
        /// Interior rows drawn per (batch, head), besides the first, last and tail rows.
        sampled: usize,
        /// The seed of the draw; record it with the result.
        seed: u64,
    },
}

/// Row-tile heights of tiled kernels: a ragged last tile of any of them is checked row by row.
pub const TILE_HEIGHTS: [usize; 4] = [64, 128, 176, 192];

/// Above this many query elements (B·H·S_q·D), the checks compute selected rows in f64 rather
/// than all of them (the whole output is still compared with the GPU reference).
pub const ALL_ROWS_LIMIT: usize = 1 << 21;

impl RowSelection {
    /// The one row policy of correctness checks: every row up to [`ALL_ROWS_LIMIT`] query
    /// elements, else [`RowSelection::Checked`] with 64 sampled rows per (batch, head).
    pub fn for_check(shape: &Shape, seed: u64) -> RowSelection {
        if shape.q_len() <= ALL_ROWS_LIMIT {
            RowSelection::All
        } else {
            RowSelection::Checked { sampled: 64, seed }
        }
    }

    /// One line for evidence: `"every row"` or what was drawn.
    pub fn describe(&self) -> String {
        match self {
            RowSelection::All => "every row".into(),
            RowSelection::Sampled {
                rows_per_head,
                seed,
            } => format!("{rows_per_head} rows per (batch, head), first and last included, seed {seed}"),
            RowSelection::Checked { sampled, seed } => format!(
                "per (batch, head): first and last rows, the ragged tail of {TILE_HEIGHTS:?}-row tiles, {sampled} sampled rows (seed {seed})"
            ),
        }
    }
}

/// The output of [`reference()`]: f64 output rows and logsumexps for the selected query rows.
#[derive(Clone, PartialEq)]
pub struct Reference {
    /// The problem's shape.
    pub shape: Shape,
    /// The parameters used.
    pub params: Params,
    /// The computed rows, ordered by (batch, head, row). With [`RowSelection::All`] this is every
    /// row, so `out` is the dense `[B, H, S_q, D]` output.
    pub rows: Vec<RowId>,
    /// `rows.len() × D` values: row `i` of `rows` is `out[i·D..(i+1)·D]`.
    pub out: Vec<f64>,
    /// One natural-log logsumexp of the scaled, masked logits per entry of `rows`; −∞ for a
    /// fully masked row.
    pub lse: Vec<f64>,
}

/// Summarises instead of printing every value.
impl std::fmt::Debug for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reference")
            .field("shape", &self.shape)
            .field("params", &self.params)
            .field("rows", &self.rows.len())
            .finish()
    }
}

impl Reference {
    /// Whether every query row was computed (then `out` is dense `[B, H, S_q, D]`).
    pub fn is_complete(&self) -> bool {
        self.rows.len() == self.shape.batch * self.shape.heads * self.shape.seq_q
    }

    /// The output row for entry `index` of [`Reference::rows`].
    pub fn out_row(&self, index: usize) -> &[f64] {
        let d = self.shape.head_dim;
        &self.out[index * d..(index + 1) * d]
    }

    /// The dense output as an f64 tensor, when every row was computed.
    pub fn to_tensor(&self) -> Option<HostTensor> {
        self.is_complete().then(|| HostTensor {
            dims: self.shape.q_dims(),
            data: HostData::F64(self.out.clone()),
        })
    }
}

/// Computes attention in f64 for the rows `rows` selects, in parallel (rayon) over heads and rows.
///
/// Q is `[B, H, S_q, D]`, K and V `[B, H_kv, S_kv, D]` (query head `h` reads K/V head
/// `h / (H / H_kv)`), of any element types (they may differ).
///
/// ```
/// use attn_oracle::{reference, DType, HostTensor, Params, RowSelection};
/// // One query, two keys with logits 0 and ln 3: weights 1/4 and 3/4.
/// let q = HostTensor::from_f64([1, 1, 1, 1], DType::F32, &[1.0]);
/// let k = HostTensor::from_f64([1, 1, 2, 1], DType::F32, &[0.0, 3f64.ln()]);
/// let v = HostTensor::from_f64([1, 1, 2, 1], DType::F32, &[2.0, 6.0]);
/// let params = Params::new(1, false); // scale 1/√1
/// let r = reference(&q, &k, &v, &params, &RowSelection::All)?;
/// assert!((r.out[0] - 5.0).abs() < 1e-6);
/// assert!((r.lse[0] - 4f64.ln()).abs() < 1e-6);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn reference(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    rows: &RowSelection,
) -> Result<Reference, OracleError> {
    let shape = check_inputs(q, k, v, params)?;
    let Shape {
        heads,
        seq_q,
        seq_kv,
        head_dim: d,
        ..
    } = shape;
    if let RowSelection::Sampled { rows_per_head, .. } = *rows {
        if rows_per_head < 2 {
            return Err(OracleError::InvalidRowSelection {
                rows_per_head,
                reason: "need at least 2 rows per head (the first and the last)",
            });
        }
    }
    let slabs = shape.batch * heads;
    let per_slab: Vec<(Vec<RowId>, Vec<f64>, Vec<f64>)> = (0..slabs)
        .into_par_iter()
        .map(|slab| {
            // The K/V head of query head `slab % heads`: batch-major, then heads in groups.
            let kv_slab = slab / heads * shape.kv_heads + slab % heads / shape.group();
            let keys = k.data.slice_f64(kv_slab * seq_kv * d, seq_kv * d);
            let values = v.data.slice_f64(kv_slab * seq_kv * d, seq_kv * d);
            let selected = select_rows(rows, seq_q, slab);
            let results: Vec<(Vec<f64>, f64)> = selected
                .par_iter()
                .map(|&row| {
                    let query = q.data.slice_f64((slab * seq_q + row) * d, d);
                    let visible = params.kv_range(row, seq_q, seq_kv);
                    attend_row(&query, &keys, &values, visible, params.scale)
                })
                .collect();
            let ids = selected
                .iter()
                .map(|&row| RowId {
                    batch: slab / heads,
                    head: slab % heads,
                    row,
                })
                .collect();
            let mut out = Vec::with_capacity(results.len() * d);
            let mut lse = Vec::with_capacity(results.len());
            for (row_out, row_lse) in results {
                out.extend(row_out);
                lse.push(row_lse);
            }
            (ids, out, lse)
        })
        .collect();
    let mut reference = Reference {
        shape,
        params: *params,
        rows: Vec::new(),
        out: Vec::new(),
        lse: Vec::new(),
    };
    for (ids, out, lse) in per_slab {
        reference.rows.extend(ids);
        reference.out.extend(out);
        reference.lse.extend(lse);
    }
    Ok(reference)
}

/// The shape described by Q's and K's dims, which must agree on B and D, K's heads dividing Q's.
pub fn shape_from_dims(q: [usize; 4], kv: [usize; 4]) -> Result<Shape, OracleError> {
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
    Ok(Shape::new(q[0], q[1], q[2], kv[2], q[3])?.with_kv_heads(kv[1])?)
}

/// Validates Q, K, V and the parameters; returns the problem's shape.
pub(crate) fn check_inputs(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
) -> Result<Shape, OracleError> {
    q.check_len()?;
    k.check_len()?;
    v.check_len()?;
    let shape = shape_from_dims(q.dims, k.dims)?;
    if v.dims != k.dims {
        return Err(OracleError::DimsMismatch {
            tensor: "v",
            expected: format!("{:?} like k", k.dims),
            found: v.dims,
        });
    }
    if !params.scale.is_finite() {
        return Err(OracleError::InvalidScale {
            scale: params.scale,
        });
    }
    Ok(shape)
}

/// The sorted query rows of (batch, head) slab `slab`.
pub(crate) fn select_rows(rows: &RowSelection, seq_q: usize, slab: usize) -> Vec<usize> {
    match *rows {
        RowSelection::Sampled {
            rows_per_head,
            seed,
        } if rows_per_head < seq_q => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(slab as u64);
            // Interior rows 1..seq_q-1, drawn without replacement.
            let mut picked: Vec<usize> = index::sample(&mut rng, seq_q - 2, rows_per_head - 2)
                .into_iter()
                .map(|i| i + 1)
                .collect();
            picked.push(0);
            picked.push(seq_q - 1);
            picked.sort_unstable();
            picked
        }
        RowSelection::Checked { sampled, seed } => {
            let tail_start = TILE_HEIGHTS
                .iter()
                .map(|t| seq_q / t * t)
                .min()
                .unwrap_or(seq_q);
            let mut picked: Vec<usize> = (tail_start..seq_q).collect();
            picked.extend([0, seq_q - 1]);
            if seq_q > 2 {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(slab as u64);
                let interior = index::sample(&mut rng, seq_q - 2, sampled.min(seq_q - 2));
                picked.extend(interior.into_iter().map(|i| i + 1));
            }
            picked.sort_unstable();
            picked.dedup();
            picked
        }
        _ => (0..seq_q).collect(),
    }
}

/// One output row and its logsumexp, in f64, over the keys `visible`. `keys` and `values` are
/// `[S_kv, D]`.
fn attend_row(
    query: &[f64],
    keys: &[f64],
    values: &[f64],
    visible: std::ops::Range<usize>,
    scale: f64,
) -> (Vec<f64>, f64) {
    let d = query.len();
    let mut out = vec![0.0; d];
    if visible.is_empty() {
        return (out, f64::NEG_INFINITY);
    }
    let (keys, values) = (
        &keys[visible.start * d..visible.end * d],
        &values[visible.start * d..visible.end * d],
    );
    let logits: Vec<f64> = keys
        .chunks_exact(d)
        .map(|key| scale * dot(query, key))
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for (logit, value) in logits.iter().zip(values.chunks_exact(d)) {
        let weight = (logit - max).exp();
        sum += weight;
        for (o, x) in out.iter_mut().zip(value) {
            *o += weight * x;
        }
    }
    for o in &mut out {
        *o /= sum;
    }
    (out, max + sum.ln())
}

/// Dot product with four partial sums, which lets the compiler vectorise it.
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut partial = [0.0; 4];
    let (a4, a_tail) = a.split_at(a.len() / 4 * 4);
    let (b4, b_tail) = b.split_at(a4.len());
    for (x, y) in a4.chunks_exact(4).zip(b4.chunks_exact(4)) {
        for lane in 0..4 {
            partial[lane] += x[lane] * y[lane];
        }
    }
    let tail: f64 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    (partial[0] + partial[1]) + (partial[2] + partial[3]) + tail
}
