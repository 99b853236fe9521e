//! The second, independent implementation: FlashAttention's tiled online softmax in f32, the
//! algorithm the GPU kernels implement, written for reading rather than speed.
//!
//! For each (batch, head) and each tile of `block_m` query rows, every row keeps a running max
//! `m`, a running denominator `l` and an unnormalised output `acc` (all f32, starting at −∞, 0,
//! 0). Key/value tiles of `block_n` keys are visited left to right, stopping after the last key
//! any row of the query tile may see (causal tiles past it are skipped, as kernels do). Per tile:
//!
//! ```text
//! s_j   = scale · q·k_j             (f32 dot, masked keys get −∞)
//! m'    = max(m, max_j s_j)
//! c     = exp(m − m')               (rescales what was accumulated under the old max)
//! p_j   = exp(s_j − m')
//! l     = c·l + Σ_j p_j
//! acc   = c·acc + Σ_j p̃_j·v_j       (p̃ = p, or p rounded to fp16/bf16 as a kernel feeding
//!                                     its P·V matrix multiply does; see TiledConfig::p_rounding)
//! m     = m'
//! ```
//!
//! With [`TiledConfig::lazy_rescale_log2`] (FlashAttention-4's conditional rescaling, hopper's
//! `LAZY_RESCALE`) a row keeps its old max while `m' − m` is at most that many powers of two
//! (`c = 1`, nothing rescaled): its `p_j` are then below `2^slack`, and the result is the same
//! softmax, rounded differently.
//!
//! At the end `o = acc / l` and `lse = m + ln l`. A row that saw no key keeps `m = −∞` and gets
//! `o = 0`, `lse = −∞`, the reference's definition. Rows never see a `−∞ − (−∞)`: a tile in which
//! a row has no visible key leaves its state untouched.

use half::{bf16, f16};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::reference::check_inputs;
use crate::{DType, HostTensor, OracleError, Params};

/// Tiling and rounding choices for [`tiled_f32_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TiledConfig {
    /// Query rows per tile (≥ 1). Only affects which key tiles are skipped under a causal mask.
    pub block_m: usize,
    /// Keys per tile (≥ 1): where the running max is rescaled, so it shapes the rounding.
    pub block_n: usize,
    /// Round the probabilities `p` to this dtype before `P·V` (the denominator `l` keeps the f32
    /// values), reproducing kernels that feed `P` to an fp16/bf16 matrix multiply. `None` keeps f32.
    pub p_rounding: Option<DType>,
    /// Keep a row's running max while a tile raises it by at most this many powers of two (no
    /// rescale), as hopper's `LAZY_RESCALE` does with 8; `None` always takes the new max.
    pub lazy_rescale_log2: Option<u32>,
}

/// The tiled online-softmax algorithm in f32 with `p` kept in f32: returns `(out, lse)`, `out`
/// `[B, H, S_q, D]` and `lse` `[B, H, S_q]` (natural log), row-major.
///
/// ```
/// use attn_oracle::{generate, reference, tiled_f32, CaseSpec, DType, Distribution, Params, RowSelection};
/// let spec = CaseSpec { shape: "1,2,33,16".parse()?, dtype: DType::F16,
///                       distribution: Distribution::Normal, seed: 3 };
/// let inputs = generate(&spec);
/// let params = Params::new(16, true);
/// let (out, _lse) = tiled_f32(&inputs.q, &inputs.k, &inputs.v, &params, 16, 8)?;
/// let exact = reference(&inputs.q, &inputs.k, &inputs.v, &params, &RowSelection::All)?;
/// let worst = out.iter().zip(&exact.out).map(|(a, b)| (f64::from(*a) - b).abs()).fold(0.0, f64::max);
/// assert!(worst < 1e-5);
/// # Ok::<(), attn_oracle::OracleError>(())
/// ```
pub fn tiled_f32(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    block_m: usize,
    block_n: usize,
) -> Result<(Vec<f32>, Vec<f32>), OracleError> {
    let config = TiledConfig {
        block_m,
        block_n,
        p_rounding: None,
        lazy_rescale_log2: None,
    };
    tiled_f32_with(q, k, v, params, &config)
}

/// [`tiled_f32`] with every choice of [`TiledConfig`], e.g. `p` rounded as a kernel rounds it.
pub fn tiled_f32_with(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    params: &Params,
    config: &TiledConfig,
) -> Result<(Vec<f32>, Vec<f32>), OracleError> {
    let shape = check_inputs(q, k, v, params)?;
    let TiledConfig {
        block_m, block_n, ..
    } = *config;
    if block_m == 0 || block_n == 0 {
        return Err(OracleError::InvalidBlocks { block_m, block_n });
    }
    let (seq_q, seq_kv, d) = (shape.seq_q, shape.seq_kv, shape.head_dim);
    let mut out = vec![0f32; shape.q_len()];
    let mut lse = vec![0f32; shape.batch * shape.heads * seq_q];
    out.par_chunks_mut(seq_q * d)
        .zip(lse.par_chunks_mut(seq_q))
        .enumerate()
        .for_each(|(slab, (out_slab, lse_slab))| {
            let kv_slab = slab / shape.heads * shape.kv_heads + slab % shape.heads / shape.group();
            let keys = k.data.slice_f32(kv_slab * seq_kv * d, seq_kv * d);
            let values = v.data.slice_f32(kv_slab * seq_kv * d, seq_kv * d);
            out_slab
                .par_chunks_mut(block_m * d)
                .zip(lse_slab.par_chunks_mut(block_m))
                .enumerate()
                .for_each(|(tile, (out_tile, lse_tile))| {
                    let first_row = tile * block_m;
                    let rows = lse_tile.len();
                    let queries = q.data.slice_f32((slab * seq_q + first_row) * d, rows * d);
                    let tile = QueryTile {
                        first_row,
                        queries: &queries,
                        keys: &keys,
                        values: &values,
                    };
                    tile.run(params, config, &shape, out_tile, lse_tile);
                });
        });
    Ok((out, lse))
}

/// One tile of query rows of one (batch, head), with that head's keys and values as f32.
struct QueryTile<'a> {
    first_row: usize,
    /// `rows × D`.
    queries: &'a [f32],
    /// `S_kv × D`.
    keys: &'a [f32],
    /// `S_kv × D`.
    values: &'a [f32],
}

impl QueryTile<'_> {
    fn run(
        &self,
        params: &Params,
        config: &TiledConfig,
        shape: &crate::Shape,
        out: &mut [f32],
        lse: &mut [f32],
    ) {
        let d = shape.head_dim;
        let rows = lse.len();
        let scale = params.scale as f32;
        let visible = |r: usize| params.kv_range(self.first_row + r, shape.seq_q, shape.seq_kv);
        // Both ends of the visible range grow with the row: the tile's first row starts lowest,
        // its last row ends highest. Key tiles outside that span are skipped, as kernels do.
        let (tile_kv_start, tile_kv_end) = (visible(0).start, visible(rows - 1).end);
        let mut max = vec![f32::NEG_INFINITY; rows];
        let mut denom = vec![0f32; rows];
        out.fill(0.0);
        let mut logits = vec![0f32; config.block_n];
        let first_tile = tile_kv_start / config.block_n * config.block_n;
        for kv_start in (first_tile..tile_kv_end).step_by(config.block_n) {
            let kv_stop = (kv_start + config.block_n).min(shape.seq_kv);
            for r in 0..rows {
                let row_range = visible(r);
                let (from, to) = (kv_start.max(row_range.start), kv_stop.min(row_range.end));
                if to <= from {
                    continue; // every key of this tile is masked for this row
                }
                let query = &self.queries[r * d..(r + 1) * d];
                let logits = &mut logits[..to - from];
                for (j, logit) in logits.iter_mut().enumerate() {
                    let key = &self.keys[(from + j) * d..(from + j + 1) * d];
                    *logit = scale * query.iter().zip(key).map(|(a, b)| a * b).sum::<f32>();
                }
                let tile_max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let grown = max[r].max(tile_max);
                // −∞ for a row's first tile: grown − (−∞) is +∞, so the first max is always taken.
                let keep = config
                    .lazy_rescale_log2
                    .is_some_and(|slack| grown - max[r] <= slack as f32 * std::f32::consts::LN_2);
                let new_max = if keep { max[r] } else { grown };
                let correction = (max[r] - new_max).exp();
                let acc = &mut out[r * d..(r + 1) * d];
                for a in acc.iter_mut() {
                    *a *= correction;
                }
                let mut tile_sum = 0f32;
                for (j, logit) in logits.iter().enumerate() {
                    let p = (logit - new_max).exp();
                    tile_sum += p;
                    let p_mma = round_to(p, config.p_rounding);
                    let value = &self.values[(from + j) * d..(from + j + 1) * d];
                    for (a, x) in acc.iter_mut().zip(value) {
                        *a += p_mma * x;
                    }
                }
                denom[r] = denom[r] * correction + tile_sum;
                max[r] = new_max;
            }
        }
        for r in 0..rows {
            let acc = &mut out[r * d..(r + 1) * d];
            if denom[r] > 0.0 {
                for a in acc.iter_mut() {
                    *a /= denom[r];
                }
                lse[r] = max[r] + denom[r].ln();
            } else {
                acc.fill(0.0);
                lse[r] = f32::NEG_INFINITY;
            }
        }
    }
}

/// `p` rounded to nearest in `dtype`, or unchanged.
fn round_to(p: f32, dtype: Option<DType>) -> f32 {
    match dtype {
        Some(DType::F16) => f16::from_f32(p).to_f32(),
        Some(DType::Bf16) => bf16::from_f32(p).to_f32(),
        Some(DType::F32) | None => p,
    }
}
