//! mma: tensor cores through mma.sync, for any GPU of sm_80 and newer.

use attn_oracle::{Params, Shape};

use crate::config::names::{
    BLOCK_M, BLOCK_N, KV_SPLIT, MIN_BLOCKS, NUM_WARPS, Q_IN_REGS, STAGES, WARP_M,
};
use crate::config::{Config, ConfigError, Knob};

use super::{elem_bytes, grid_blocks, knob, row_tiles, DeviceLimits, Geometry};

pub(super) static MMA_KNOBS: [Knob; 8] = [
    Knob {
        name: BLOCK_M,
        domain: &[16, 32, 64, 128, 256],
        doc: "query rows per block (= WARP_M x NUM_WARPS / KV_SPLIT)",
    },
    Knob {
        name: BLOCK_N,
        domain: &[32, 48, 64, 96, 128],
        doc: "keys per warp per K/V tile",
    },
    Knob {
        name: NUM_WARPS,
        domain: &[1, 2, 4, 8],
        doc: "warps per block",
    },
    Knob {
        name: WARP_M,
        domain: &[16, 32],
        doc: "query rows per warp (32: each K/V fragment feeds two mma)",
    },
    Knob {
        name: KV_SPLIT,
        domain: &[1, 2, 4],
        doc:
            "warps sharing a row group, each taking BLOCK_N keys of every tile (merged at the end)",
    },
    Knob {
        name: STAGES,
        domain: &[1, 2, 3, 4],
        doc: "cp.async K/V pipeline depth",
    },
    Knob {
        name: Q_IN_REGS,
        domain: &[0, 1],
        doc: "keep Q's A fragments in registers (0: re-read from shared)",
    },
    Knob {
        name: MIN_BLOCKS,
        domain: &[1, 2, 3, 4],
        doc: "min blocks per SM hint of __launch_bounds__ (caps registers)",
    },
];

/// mma's config for a head dim, from (NUM_WARPS, WARP_M, KV_SPLIT, BLOCK_N, STAGES, Q_IN_REGS,
/// MIN_BLOCKS), with BLOCK_M derived.
fn mma_config(
    warps: i64,
    warp_m: i64,
    split: i64,
    block_n: i64,
    stages: i64,
    q_in_regs: i64,
    min_blocks: i64,
) -> Config {
    Config::from_pairs(&[
        (BLOCK_M, warp_m * warps / split),
        (BLOCK_N, block_n),
        (NUM_WARPS, warps),
        (WARP_M, warp_m),
        (KV_SPLIT, split),
        (STAGES, stages),
        (Q_IN_REGS, q_in_regs),
        (MIN_BLOCKS, min_blocks),
    ])
}

/// mma's large-tile defaults: 4 warps of 32 rows, so that every K and V fragment feeds two mma
/// (halving shared-memory reads per FLOP), with the widest key tile that fits 255 registers
/// unspilled: 48 keys and 3 stages at D=128, 96 keys and 2 stages at D=64, since 128 keys spill on
/// sm_80 (see kernels/TUNING.md, `mma-defaults`).
pub(super) fn mma_defaults(head_dim: usize) -> Config {
    if head_dim > 64 {
        mma_config(4, 32, 1, 48, 3, 0, 1)
    } else {
        mma_config(4, 32, 1, 96, 2, 0, 1)
    }
}

/// Small grids at D=64, which the defaults would leave most of `device`'s SMs idle on: 16-row
/// blocks whose 4 warps split the keys while that still fits in one wave (2 blocks/SM by shared
/// memory), else 32-row blocks with a 2-way split (3 blocks/SM) (see kernels/TUNING.md,
/// `mma-small-grid`).
pub(super) fn mma_tuned(shape: &Shape, _params: &Params, device: &DeviceLimits) -> Config {
    let sms = device.sms();
    if shape.head_dim != 64 || grid_blocks(shape, 128) >= sms {
        Config::default()
    } else if grid_blocks(shape, 16) <= 2 * sms {
        mma_config(4, 16, 4, 32, 3, 1, 1)
    } else if grid_blocks(shape, 32) <= 3 * sms {
        mma_config(4, 16, 2, 64, 2, 1, 1)
    } else {
        Config::default()
    }
}

/// mma's constraints on a config at `head_dim`.
pub(super) fn constraints(cfg: &Config, head_dim: usize) -> std::result::Result<(), ConfigError> {
    let (m, n, w, wm, split) = (
        knob(cfg, BLOCK_M),
        knob(cfg, BLOCK_N),
        knob(cfg, NUM_WARPS),
        knob(cfg, WARP_M),
        knob(cfg, KV_SPLIT),
    );
    if w % split != 0 {
        return Err(ConfigError::Rule(format!(
            "KV_SPLIT={split} does not divide NUM_WARPS={w}"
        )));
    }
    // Every thread copies the same number of 16-byte chunks of a K/V tile (kernels/mma.cu).
    let chunks = (head_dim / 8) as u32;
    if split * n * chunks % (w * 32) != 0 {
        return Err(ConfigError::Rule(format!(
            "a tile of KV_SPLIT x BLOCK_N = {} rows does not split evenly over {} threads at head dim {head_dim}",
            split * n,
            w * 32
        )));
    }
    if m != wm * w / split {
        return Err(ConfigError::Rule(format!(
            "BLOCK_M={m} must be WARP_M x NUM_WARPS / KV_SPLIT = {} (each warp owns WARP_M rows)",
            wm * w / split
        )));
    }
    Ok(())
}

/// mma's launch: a block per row tile of each (head, batch), the Q tile and the K/V ring in shared memory.
pub(super) fn geometry(cfg: &Config, shape: &Shape) -> Geometry {
    let (m, n, w, stages, split) = (
        knob(cfg, BLOCK_M),
        knob(cfg, BLOCK_N),
        knob(cfg, NUM_WARPS),
        knob(cfg, STAGES),
        knob(cfg, KV_SPLIT),
    );
    let d = shape.head_dim as u32;
    // Q tile, then the K/V ring, whose space the KV_SPLIT merge reuses (kernels/mma.cu).
    let ring = 2 * stages * split * n * d * elem_bytes();
    let merge = split.saturating_sub(1) * m * (4 * d + 32);
    Geometry {
        grid: (
            row_tiles(shape.seq_q, m),
            shape.heads as u32,
            shape.batch as u32,
        ),
        block: w * 32,
        shared_bytes: m * d * elem_bytes() + ring.max(merge),
        persistent: false,
        workspace_per_block: 0,
        heads_together: 1,
    }
}
