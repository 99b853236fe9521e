//! The decode implementations by name, their knobs, defaults and constraints, and the launch plan
//! each makes of a [`DecodeSpec`] (grid, block, shared memory, splits, workspace).
//!
//! Separate from the prefill [`crate::registry`]: a decode kernel follows the decode ABI of
//! kernels/README.md ("Decode entry point"), not `attn_fwd`'s.

use attn_oracle::DecodeSpec;

use crate::config::names::{
    BLOCK_M, BLOCK_N, NUM_WARPS, PAGE_AHEAD, ROWS_PER_BLOCK, ROW_WARPS, SPLITS, STAGES,
};
use crate::config::{Config, ConfigError, Knob};
use crate::error::{KernelError, Result};
use crate::registry::{DeviceLimits, Gpus};

/// The most splits of a sequence's keys the host chooses or takes (`SPLITS`' largest value).
pub const MAX_SPLITS: usize = 64;

/// How a decode implementation's launch is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeKernel {
    /// `decode_naive.cu`: a warp per packed (token, head) row, the keys never split.
    Naive,
    /// `decode.cu`: a block per (row tile, K/V head, sequence, split), then
    /// `attn_decode_combine` when there is more than one split.
    Split,
    /// `decode_hopper.cu`: as `Split`, one warpgroup per block on a 64-row tile (wgmma, sm_90a).
    Wgmma,
}

impl DecodeKernel {
    /// Whether its splits are merged by `attn_decode_combine`.
    pub fn combines(self) -> bool {
        self != DecodeKernel::Naive
    }
}

/// Rows of `decode_hopper.cu`'s tile: one warpgroup's wgmma M.
const WGMMA_TILE_ROWS: usize = 64;

/// A registered decode implementation.
#[derive(Debug)]
pub struct DecodeImplementation {
    /// Its name.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// File name under `kernels/`.
    pub file: &'static str,
    /// Its source, embedded at build time.
    pub source: &'static str,
    /// Its knobs and their domains.
    pub knobs: &'static [Knob],
    /// Supported head dims; `None` for any multiple of 32 up to 256.
    pub head_dims: Option<&'static [usize]>,
    /// The GPUs it runs on.
    pub gpus: Gpus,
    /// How its launch is shaped.
    pub kernel: DecodeKernel,
    defaults: fn(head_dim: usize) -> Config,
}

static NAIVE_KNOBS: [Knob; 1] = [Knob {
    name: ROWS_PER_BLOCK,
    domain: &[1, 2, 4, 8],
    doc: "packed (token, head) rows (warps) per block",
}];

static DECODE_KNOBS: [Knob; 7] = [
    Knob {
        name: BLOCK_N,
        domain: &[16, 32, 64],
        doc: "keys per warp per K/V tile (a tile is NUM_WARPS x BLOCK_N keys)",
    },
    Knob {
        name: NUM_WARPS,
        domain: &[1, 2, 4, 8],
        doc: "warps per block, each taking BLOCK_N keys of every tile (merged at the end)",
    },
    Knob {
        name: STAGES,
        domain: &[1, 2, 3, 4],
        doc: "cp.async K/V ring depth",
    },
    Knob {
        name: BLOCK_M,
        domain: &[16, 32],
        doc: "rows (query heads of a K/V head x new tokens) per warp",
    },
    Knob {
        name: ROW_WARPS,
        domain: &[1, 2, 4, 8],
        doc: "the most warps of a block that take distinct rows, so that a K/V tile serves up to ROW_WARPS x BLOCK_M rows (at most NUM_WARPS; default 4, or NUM_WARPS where that is fewer; 1: every warp takes the same BLOCK_M rows)",
    },
    Knob {
        name: PAGE_AHEAD,
        domain: &[0, 1],
        doc: "1: each thread reads the block-table entries of the next tile's rows while the current one is computed, so that a gather waits for no table read (paged caches)",
    },
    Knob {
        name: SPLITS,
        domain: &[0, 1, 2, 4, 8, 16, 32, 64],
        doc:
            "splits of each sequence's keys (0 = auto: the fewest that fill the GPU in whole waves)",
    },
];

static HOPPER_KNOBS: [Knob; 4] = [
    Knob {
        name: BLOCK_N,
        domain: &[64, 128],
        doc: "keys per K/V tile (the N of the Q·Kᵀ wgmma)",
    },
    Knob {
        name: STAGES,
        domain: &[2, 3, 4],
        doc: "cp.async K/V ring depth",
    },
    Knob {
        name: PAGE_AHEAD,
        domain: &[0, 1],
        doc: "1: each thread reads the block-table entries of the next tile's rows while the current one is computed, so that a gather waits for no table read (paged caches)",
    },
    Knob {
        name: SPLITS,
        domain: &[0, 1, 2, 4, 8, 16, 32, 64],
        doc:
            "splits of each sequence's keys (0 = auto: the fewest that fill the GPU in whole waves)",
    },
];

static DECODE_REGISTRY: [DecodeImplementation; 3] = [
    DecodeImplementation {
        name: "decode-naive",
        summary: "one warp per (query row, head), f32 dot products and expf, read through the block table: the yardstick",
        file: "decode_naive.cu",
        source: include_str!("../../../../kernels/decode_naive.cu"),
        knobs: &NAIVE_KNOBS,
        head_dims: None,
        gpus: Gpus::SM80_AND_NEWER,
        kernel: DecodeKernel::Naive,
        defaults: |_| Config::from_pairs(&[(ROWS_PER_BLOCK, 4)]),
    },
    DecodeImplementation {
        name: "decode",
        summary: "split-KV decode: a K/V head's query heads x new tokens in one tile, pages gathered by cp.async, mma.sync Q·Kᵀ and P·V, LSE combine",
        file: "decode.cu",
        source: include_str!("../../../../kernels/decode.cu"),
        knobs: &DECODE_KNOBS,
        head_dims: Some(&[64, 128]),
        gpus: Gpus::SM80_AND_NEWER,
        kernel: DecodeKernel::Split,
        defaults: |head_dim| {
            let block_n = if head_dim > 64 { 16 } else { 32 };
            Config::from_pairs(&[
                (BLOCK_N, block_n),
                (NUM_WARPS, 4),
                (STAGES, 3),
                (BLOCK_M, 16),
                (ROW_WARPS, 4),
                (PAGE_AHEAD, 0),
                (SPLITS, 0),
            ])
        },
    },
    DecodeImplementation {
        name: "decode-hopper",
        summary: "split-KV decode on Hopper: 64 rows (query heads x new tokens) of a K/V head per warpgroup, pages gathered by cp.async into swizzled tiles, wgmma Q·Kᵀ and P·V, LSE combine",
        file: "decode_hopper.cu",
        source: include_str!("../../../../kernels/decode_hopper.cu"),
        knobs: &HOPPER_KNOBS,
        head_dims: Some(&[64, 128]),
        gpus: Gpus::Only((9, 0)),
        kernel: DecodeKernel::Wgmma,
        defaults: |_| {
            Config::from_pairs(&[(BLOCK_N, 64), (STAGES, 3), (PAGE_AHEAD, 0), (SPLITS, 0)])
        },
    },
];

/// Every registered decode implementation.
pub fn decode_registry() -> &'static [DecodeImplementation] {
    &DECODE_REGISTRY
}

/// The decode implementation called `name`.
pub fn find_decode(name: &str) -> Result<&'static DecodeImplementation> {
    crate::registry::find_named(decode_registry(), name, |i| i.name)
}

fn knob(cfg: &Config, name: crate::config::KnobName) -> usize {
    // resolve() guarantees every knob is present and within its small, non-negative domain.
    cfg.get(name).map_or(0, |v| v as usize)
}

/// One decode launch, as the host computes it from a resolved config and a [`DecodeSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodePlan {
    /// The decode kernel's grid.
    pub grid: (u32, u32, u32),
    /// Its threads per block.
    pub block: u32,
    /// Its dynamic shared memory, bytes.
    pub shared_bytes: u32,
    /// Splits of each sequence's keys (1: O written directly, no combine).
    pub splits: u32,
    /// Bytes of f32 workspace the splits need (0 with one split).
    pub workspace_bytes: u64,
    /// The combine kernel's grid (blocks of 128 threads), with more than one split.
    pub combine_grid: Option<u32>,
}

impl DecodeImplementation {
    /// The default config for a head dim.
    pub fn default_config(&self, head_dim: usize) -> Config {
        (self.defaults)(head_dim)
    }

    /// Whether it handles `head_dim`.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<()> {
        crate::registry::check_row_head_dim(self.name, self.head_dims, head_dim)
    }

    /// What NVRTC compiles for a resolved `config` ([`DecodeImplementation::resolve`]) at `dtype`
    /// and `head_dim` for `arch`: the one place a decode config becomes defines, so that a
    /// search's precompile and the worker that loads the kernel hit the same cache entry.
    pub fn compile_request(
        &'static self,
        config: &Config,
        dtype: attn_oracle::DType,
        head_dim: usize,
        arch: crate::compile::Arch,
    ) -> Result<crate::compile::CompileRequest<'static>> {
        let mut defines = crate::compile::CompileRequest::abi_defines(dtype, head_dim)?;
        defines.extend(self.defines(config));
        Ok(crate::compile::CompileRequest {
            name: self.name.into(),
            source: self.source,
            include_dir: None,
            defines,
            arch,
        })
    }

    /// The defaults with `overrides` applied, each knob checked against its domain and the shared
    /// memory against `limits`; the reason in one line otherwise.
    pub fn resolve(
        &self,
        overrides: &Config,
        head_dim: usize,
        limits: &DeviceLimits,
    ) -> Result<Config> {
        self.check_head_dim(head_dim)?;
        let invalid = |reason: ConfigError| KernelError::InvalidConfig {
            implementation: self.name.into(),
            reason,
        };
        overrides.check_domains(self.knobs).map_err(invalid)?;
        let mut cfg = self.default_config(head_dim).merged(overrides);
        if self.kernel == DecodeKernel::Split && overrides.get(ROW_WARPS).is_none() {
            // The default row split is the most the block's warps allow (see kernels/TUNING.md,
            // `decode-row-warps`); a named ROW_WARPS is taken as it is, or refused.
            let fits = knob(&cfg, ROW_WARPS).min(knob(&cfg, NUM_WARPS)) as i64;
            cfg = cfg.merged(&Config::from_pairs(&[(ROW_WARPS, fits)]));
        }
        if self.kernel == DecodeKernel::Split {
            let (row_warps, warps) = (knob(&cfg, ROW_WARPS), knob(&cfg, NUM_WARPS));
            if row_warps > warps {
                return Err(invalid(ConfigError::Rule(format!(
                    "ROW_WARPS={row_warps} needs NUM_WARPS >= {row_warps} (a block's warps split between its rows and its keys); use ROW_WARPS <= {warps}"
                ))));
            }
        }
        if self.kernel == DecodeKernel::Split && knob(&cfg, BLOCK_M) > 16 && head_dim > 64 {
            // Two row blocks of D=128 accumulators, Q fragments and the gather's addresses spill.
            return Err(invalid(ConfigError::Rule(format!(
                "BLOCK_M={} at head dim {head_dim} needs more than 255 registers: BLOCK_M=32 is for head dim 64",
                knob(&cfg, BLOCK_M)
            ))));
        }
        let shared = self.shared_bytes(&cfg, head_dim);
        if shared > limits.max_shared_per_block {
            return Err(invalid(ConfigError::TooMuchSharedMemory {
                bytes: shared,
                limit: limits.max_shared_per_block,
            }));
        }
        Ok(cfg)
    }

    /// The `-D` defines of a resolved config (SPLITS is a launch parameter, not a define).
    pub fn defines(&self, cfg: &Config) -> Vec<String> {
        cfg.0
            .iter()
            .filter(|(name, _)| SPLITS != **name)
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// Threads per block of a resolved config.
    pub fn block_threads(&self, cfg: &Config) -> u32 {
        let warps = match self.kernel {
            DecodeKernel::Naive => knob(cfg, ROWS_PER_BLOCK),
            DecodeKernel::Split => knob(cfg, NUM_WARPS),
            DecodeKernel::Wgmma => 4,
        };
        (warps * 32) as u32
    }

    /// Rows of a split decode block's row tile (decode.cu: ROW_WARPS x BLOCK_M) and keys of its
    /// K/V tile (decode.cu: NUM_WARPS x BLOCK_N).
    fn tile(&self, cfg: &Config) -> (usize, usize) {
        match self.kernel {
            DecodeKernel::Wgmma => (WGMMA_TILE_ROWS, knob(cfg, BLOCK_N)),
            _ => (
                knob(cfg, ROW_WARPS).max(1) * knob(cfg, BLOCK_M),
                knob(cfg, NUM_WARPS) * knob(cfg, BLOCK_N),
            ),
        }
    }

    /// Dynamic shared memory of a resolved config: decode.cu's header formula (0 for the naive).
    pub fn shared_bytes(&self, cfg: &Config, head_dim: usize) -> u32 {
        match self.kernel {
            DecodeKernel::Naive => 0,
            DecodeKernel::Split => {
                let (m, n, w, stages) = (
                    knob(cfg, BLOCK_M),
                    knob(cfg, BLOCK_N),
                    knob(cfg, NUM_WARPS),
                    knob(cfg, STAGES),
                );
                let d = head_dim;
                let ring = 2 * stages * w * n * d * 2;
                let merge = w.saturating_sub(1) * m * (4 * d + 32);
                (self.tile(cfg).0 * d * 2 + ring.max(merge)) as u32
            }
            // decode_hopper.cu's header: alignment slack, the Q tile, the K and V rings.
            DecodeKernel::Wgmma => {
                let (n, stages) = (knob(cfg, BLOCK_N), knob(cfg, STAGES));
                (1024 + WGMMA_TILE_ROWS * head_dim * 2 + 2 * stages * n * head_dim * 2) as u32
            }
        }
    }

    /// The launch of a resolved config on `spec` for a GPU that holds `slots` of its blocks at
    /// once (SMs × resident blocks per SM, the driver's occupancy); a batch the grid cannot hold
    /// is one line.
    pub fn plan(&self, cfg: &Config, spec: &DecodeSpec, slots: usize) -> Result<DecodePlan> {
        let (heads, kv_heads, d) = (spec.heads(), spec.kv_heads(), spec.head_dim());
        let rows = spec.varlen().total_q() * heads;
        if rows > i32::MAX as usize / 4 {
            return Err(KernelError::Shape(format!(
                "{rows} packed (token, head) rows: the decode kernels index them with int32"
            )));
        }
        if spec.sequences() > 65_535 {
            return Err(KernelError::Shape(format!(
                "{} sequences: the decode grid holds at most 65535 (its y)",
                spec.sequences()
            )));
        }
        match self.kernel {
            DecodeKernel::Naive => {
                let per_block = knob(cfg, ROWS_PER_BLOCK);
                Ok(DecodePlan {
                    grid: (rows.div_ceil(per_block) as u32, 1, 1),
                    block: self.block_threads(cfg),
                    shared_bytes: 0,
                    splits: 1,
                    workspace_bytes: 0,
                    combine_grid: None,
                })
            }
            DecodeKernel::Split | DecodeKernel::Wgmma => {
                let (block_m, tile) = self.tile(cfg);
                let group = heads / kv_heads;
                let longest_q = spec.seqlens_q().iter().copied().max().unwrap_or(0);
                let row_tiles = (longest_q * group).div_ceil(block_m).max(1);
                let splits = match knob(cfg, SPLITS) {
                    0 => auto_splits(spec, row_tiles, tile, slots),
                    n => n,
                };
                let workspace_bytes = if splits > 1 {
                    (splits * rows * (d + 1) * 4) as u64
                } else {
                    0
                };
                Ok(DecodePlan {
                    grid: (
                        (row_tiles * kv_heads) as u32,
                        spec.sequences() as u32,
                        splits as u32,
                    ),
                    block: self.block_threads(cfg),
                    shared_bytes: self.shared_bytes(cfg, d),
                    splits: splits as u32,
                    workspace_bytes,
                    combine_grid: (splits > 1).then(|| rows.div_ceil(4) as u32),
                })
            }
        }
    }
}

/// SPLITS=auto: the fewest splits whose blocks fill the GPU's `slots` (resident blocks, all SMs
/// together) in whole waves within 5% of the best fill any count reaches, so that no last wave
/// runs a few blocks on an idle GPU (FlashAttention-2's split heuristic, made stricter: a
/// memory-bound decode runs at the bandwidth its busy SMs draw); capped by the key tiles of the
/// longest attended range (a split has a tile at least) and by [`MAX_SPLITS`]. One split when
/// the blocks already fill four waves.
pub fn auto_splits(spec: &DecodeSpec, row_tiles: usize, tile: usize, slots: usize) -> usize {
    let active = spec.seqlens_q().iter().filter(|&&q| q > 0).count().max(1);
    let blocks = active * spec.kv_heads() * row_tiles;
    let slots = slots.max(1);
    if blocks >= 4 * slots {
        return 1;
    }
    let longest_tiles = (0..spec.sequences())
        .map(|b| spec.attended(b).len().div_ceil(tile.max(1)))
        .max()
        .unwrap_or(1);
    let most = longest_tiles.clamp(1, MAX_SPLITS);
    // The share of the slots a count keeps busy over its waves.
    let fill = |splits: usize| {
        let launched = blocks * splits;
        launched as f64 / (launched.div_ceil(slots) * slots) as f64
    };
    let best = (1..=most).map(fill).fold(0.0, f64::max);
    (1..=most)
        .find(|&splits| fill(splits) >= 0.95 * best)
        .unwrap_or(1)
}
