//! The hybrids (cuBLAS for one GEMM, a kernel of ours for the rest): their shared knobs, defaults,
//! constraints and launch geometry.

use attn_oracle::Shape;

use crate::config::names::{BLOCK_M, BLOCK_N, NUM_WARPS};
use crate::config::{Config, ConfigError, Knob};

use super::{knob, row_tiles, Geometry};

/// The knobs of both hybrid kernels (`kernels/softmax_pv.cu`, `kernels/qk_softmax.cu`).
pub(super) static HYBRID_KNOBS: [Knob; 3] = [
    Knob {
        name: BLOCK_M,
        domain: &[16, 32, 64, 128],
        doc: "query rows per block",
    },
    Knob {
        name: BLOCK_N,
        domain: &[32, 64, 128],
        doc: "keys per tile",
    },
    Knob {
        name: NUM_WARPS,
        domain: &[2, 4, 8],
        doc: "warps per block (each owns a fixed set of 16x16 WMMA tiles and BLOCK_M / NUM_WARPS rows)",
    },
];

/// The hybrids' defaults: 64 query rows, 64-key tiles, 4 warps.
pub(super) fn hybrid_defaults(_head_dim: usize) -> Config {
    Config::from_pairs(&[(BLOCK_M, 64), (BLOCK_N, 64), (NUM_WARPS, 4)])
}

/// The WMMA tiles a hybrid kernel's warps split: the 16x16 tiles of O (`softmax_pv`, BLOCK_M x D)
/// or of S (`qk_softmax`, BLOCK_M x BLOCK_N); each warp takes the same number.
pub(super) fn hybrid_constraints(
    cfg: &Config,
    tile_cols: u32,
) -> std::result::Result<(), ConfigError> {
    let (m, w) = (knob(cfg, BLOCK_M), knob(cfg, NUM_WARPS));
    let tiles = (m / 16) * (tile_cols / 16);
    if tiles % w != 0 {
        return Err(ConfigError::Rule(format!(
            "the {tiles} 16x16 tiles of a {m}x{tile_cols} block do not split evenly over NUM_WARPS={w}"
        )));
    }
    Ok(())
}

/// A hybrid kernel's launch: grid (row tiles, B·H), NUM_WARPS warps, `shared` bytes.
pub(super) fn hybrid_geometry(cfg: &Config, shape: &Shape, shared: u32) -> Geometry {
    let (m, w) = (knob(cfg, BLOCK_M), knob(cfg, NUM_WARPS));
    Geometry {
        grid: (
            row_tiles(shape.seq_q, m),
            (shape.batch * shape.heads) as u32,
            1,
        ),
        block: w * 32,
        shared_bytes: shared,
        persistent: false,
        workspace_per_block: 0,
        heads_together: 1,
    }
}

/// `softmax_pv`'s dynamic shared memory (its header states the formula).
pub(super) fn softmax_pv_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n) = (knob(cfg, BLOCK_M), knob(cfg, BLOCK_N));
    let tiles = n * (head_dim + 8) * 2 + m * (n + 8) * 2;
    let stage = m * (head_dim + 4) * 4;
    tiles.max(stage) + 8 * m
}

/// `qk_softmax`'s dynamic shared memory (its header states the formula).
pub(super) fn qk_softmax_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n) = (knob(cfg, BLOCK_M), knob(cfg, BLOCK_N));
    (m + n) * (head_dim + 8) * 2 + m * (n + 4) * 4 + 8 * m
}
