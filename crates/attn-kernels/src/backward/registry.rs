//! The backward implementations by name, their knobs, defaults and rules, and the launch plan each
//! makes of a problem: every stage's grid, block and shared memory, and the workspace.
//!
//! Separate from the prefill [`crate::registry`]: a backward kernel follows kernels/README.md's
//! "Backward entry point" (`attn_bwd` with optional `attn_bwd_pre` and `attn_bwd_post`), not
//! `attn_fwd`'s ABI.

use attn_oracle::{Params, Shape, Varlen};

use crate::config::names::{BLOCK_M, BLOCK_N, DETERMINISTIC, NUM_WARPS, ROWS_PER_BLOCK, STAGES};
use crate::config::{Config, ConfigError, Knob, KnobName};
use crate::error::{KernelError, Result};
use crate::registry::{DeviceLimits, Gpus, Variants};

/// The entry points of a backward implementation, in launch order: the optional pre stage, the
/// kernel, the optional post stage.
pub const STAGE_ENTRIES: [&str; 3] = ["attn_bwd_pre", "attn_bwd", "attn_bwd_post"];

/// How a backward implementation's launch is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackwardKernel {
    /// `backward_naive.cu`: a warp per row in every stage.
    Naive,
    /// `backward_mma.cu`: a block per key tile for dK and dV, dQ through an f32 accumulator.
    Mma,
}

/// A registered backward implementation.
#[derive(Debug)]
pub struct BackwardImplementation {
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
    /// The problems beyond dense multi-head attention it handles.
    pub variants: Variants,
    /// Whether its gradients are the same bits on every launch with the same inputs, whatever its
    /// config (backward-mma is so with `DETERMINISTIC=1` alone: `PreparedBackward::deterministic`).
    pub deterministic: bool,
    /// How its launch is shaped.
    pub kernel: BackwardKernel,
    defaults: fn(head_dim: usize) -> Config,
}

static NAIVE_KNOBS: [Knob; 1] = [Knob {
    name: ROWS_PER_BLOCK,
    domain: &[1, 2, 4, 8],
    doc: "rows (warps) per block in every stage",
}];

static MMA_KNOBS: [Knob; 5] = [
    Knob {
        name: NUM_WARPS,
        domain: &[2, 4, 8],
        doc: "warps per block, each owning BLOCK_N / NUM_WARPS keys",
    },
    Knob {
        name: BLOCK_N,
        domain: &[32, 64, 128, 256],
        doc: "keys per block: 16 or 32 per warp (default 16 x NUM_WARPS)",
    },
    Knob {
        name: BLOCK_M,
        domain: &[16, 32, 64],
        doc: "query rows per tile of the key tile's loop (and per pre/post block)",
    },
    Knob {
        name: STAGES,
        domain: &[1, 2],
        doc: "cp.async Q/dO ring depth",
    },
    Knob {
        name: DETERMINISTIC,
        domain: &[0, 1],
        doc: "1: each query tile's dQ is added by its key tiles in order (a ticket per query row in the workspace), so the gradients are the same bits on every launch",
    },
];

static BACKWARD_REGISTRY: [BackwardImplementation; 2] = [
    BackwardImplementation {
        name: "backward-naive",
        summary: "a warp per row: dK/dV per key over the rows that see it, dQ per row over its keys; f32, expf, deterministic: the yardstick",
        file: "backward_naive.cu",
        source: include_str!("../../../../kernels/backward_naive.cu"),
        knobs: &NAIVE_KNOBS,
        head_dims: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::ALL,
        deterministic: true,
        kernel: BackwardKernel::Naive,
        defaults: |_| Config::from_pairs(&[(ROWS_PER_BLOCK, 4)]),
    },
    BackwardImplementation {
        name: "backward-mma",
        summary: "FlashAttention-2-style: dK, dV of a key tile in registers over the visible query tiles, mma.sync, dQ through f32 atomics",
        file: "backward_mma.cu",
        source: include_str!("../../../../kernels/backward_mma.cu"),
        knobs: &MMA_KNOBS,
        head_dims: Some(&[64, 128]),
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::ALL,
        deterministic: false,
        kernel: BackwardKernel::Mma,
        defaults: |_| {
            Config::from_pairs(&[
                (NUM_WARPS, 4),
                (BLOCK_N, 64),
                (BLOCK_M, 64),
                (STAGES, 2),
                (DETERMINISTIC, 0),
            ])
        },
    },
];

/// Every registered backward implementation.
pub fn backward_registry() -> &'static [BackwardImplementation] {
    &BACKWARD_REGISTRY
}

/// The backward implementation called `name`.
pub fn find_backward(name: &str) -> Result<&'static BackwardImplementation> {
    crate::registry::find_named(backward_registry(), name, |i| i.name)
}

fn knob(cfg: &Config, name: KnobName) -> usize {
    // resolve() guarantees every knob is present and within its small, positive domain.
    cfg.get(name).map_or(0, |v| v as usize)
}

/// One stage's launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagePlan {
    /// Its grid.
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory, bytes.
    pub shared_bytes: u32,
}

/// A backward launch on one problem: its stages in order, and the workspace they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardPlan {
    /// `attn_bwd_pre`, when the implementation has it.
    pub pre: Option<StagePlan>,
    /// `attn_bwd`.
    pub main: StagePlan,
    /// `attn_bwd_post`, when the implementation has it.
    pub post: Option<StagePlan>,
    /// The workspace the stages need, bytes: kernels/README.md's minimum, `4 · rows · H · (D + 1)`.
    pub workspace_bytes: u64,
}

/// What a backward kernel's launch geometry depends on: query rows per pre/post block, keys per
/// `attn_bwd` block, threads per block and dynamic shared memory. A registered implementation's
/// comes from its resolved config; a `--src` kernel's from its defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardGeometry {
    /// Query rows per block of the pre and post stages.
    pub rows_per_block: u32,
    /// Keys per block of `attn_bwd`.
    pub keys_per_block: u32,
    /// Threads per block, every stage.
    pub block: u32,
    /// `attn_bwd`'s dynamic shared memory, bytes.
    pub main_shared: u32,
    /// The pre and post stages' dynamic shared memory, bytes.
    pub side_shared: u32,
    /// Whether the workspace holds one i32 ticket per query row after D_i: a deterministic
    /// kernel's order of dQ adds (kernels/README.md).
    pub tickets: bool,
}

/// The workspace a problem needs, bytes: `4 · rows · H · (D + 1)`, `rows = B · S_q` (varlen:
/// `total_q`), room for an f32 dQ accumulator and one f32 per query row (kernels/README.md).
pub fn workspace_bytes(shape: &Shape, varlen: Option<&Varlen>) -> u64 {
    let rows = varlen.map_or(shape.batch * shape.seq_q, Varlen::total_q) as u64;
    4 * rows * shape.heads as u64 * (shape.head_dim as u64 + 1)
}

impl BackwardGeometry {
    /// The tickets' bytes beyond [`workspace_bytes`]: `4 · rows · H` with tickets, else none.
    fn ticket_bytes(&self, shape: &Shape, varlen: Option<&Varlen>) -> u64 {
        let rows = varlen.map_or(shape.batch * shape.seq_q, Varlen::total_q) as u64;
        if self.tickets {
            4 * rows * shape.heads as u64
        } else {
            0
        }
    }

    /// The launch of `shape` (a varlen batch's bounding shape, `varlen` its lengths) with the
    /// stages `has_pre`, `has_post` beside `attn_bwd`; a grid CUDA cannot launch is one line.
    pub fn plan(
        &self,
        shape: &Shape,
        varlen: Option<&Varlen>,
        has_pre: bool,
        has_post: bool,
    ) -> Result<BackwardPlan> {
        if shape.heads > 65_535 || shape.batch > 65_535 {
            return Err(KernelError::Shape(format!(
                "{} heads and {} sequences: the backward grids hold at most 65535 of each (their y and z)",
                shape.heads, shape.batch
            )));
        }
        let tiles = |len: usize, per: u32| len.div_ceil(per.max(1) as usize) as u32;
        let side = StagePlan {
            grid: (
                tiles(shape.seq_q, self.rows_per_block),
                shape.heads as u32,
                shape.batch as u32,
            ),
            block: self.block,
            shared_bytes: self.side_shared,
        };
        Ok(BackwardPlan {
            pre: has_pre.then_some(side),
            main: StagePlan {
                grid: (
                    tiles(shape.seq_kv, self.keys_per_block),
                    shape.kv_heads as u32,
                    shape.batch as u32,
                ),
                block: self.block,
                shared_bytes: self.main_shared,
            },
            post: has_post.then_some(side),
            workspace_bytes: workspace_bytes(shape, varlen) + self.ticket_bytes(shape, varlen),
        })
    }
}

impl BackwardImplementation {
    /// The default config for a head dim.
    pub fn default_config(&self, head_dim: usize) -> Config {
        (self.defaults)(head_dim)
    }

    /// Whether it handles `head_dim`.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<()> {
        crate::registry::check_row_head_dim(self.name, self.head_dims, head_dim)
    }

    /// Refuses, with one line, a problem outside its variants (`varlen`: a packed batch).
    pub fn check_supports(&self, shape: &Shape, params: &Params, varlen: bool) -> Result<()> {
        match self.variants.missing(shape, params, varlen) {
            None => Ok(()),
            Some(what) => Err(KernelError::Unsupported {
                implementation: self.name.into(),
                what: what.into(),
            }),
        }
    }

    /// The defaults with `overrides` applied, each knob checked against its domain, the
    /// implementation's rules and `limits`; the reason in one line otherwise. An mma config that
    /// names NUM_WARPS but not BLOCK_N gets 16 keys per warp.
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
        if self.kernel == BackwardKernel::Mma {
            if overrides.get(BLOCK_N).is_none() {
                cfg.0
                    .insert(BLOCK_N.to_string(), 16 * cfg.get(NUM_WARPS).unwrap_or(4));
            }
            mma_rules(&cfg, head_dim).map_err(|rule| invalid(ConfigError::Rule(rule)))?;
        }
        let geometry = self.geometry(&cfg, head_dim);
        if geometry.block > limits.max_threads_per_block {
            return Err(invalid(ConfigError::TooManyThreads {
                threads: geometry.block,
                limit: limits.max_threads_per_block,
            }));
        }
        if geometry.main_shared > limits.max_shared_per_block {
            return Err(invalid(ConfigError::TooMuchSharedMemory {
                bytes: geometry.main_shared,
                limit: limits.max_shared_per_block,
            }));
        }
        Ok(cfg)
    }

    /// The `-D` defines of a resolved config.
    pub fn defines(&self, cfg: &Config) -> Vec<String> {
        cfg.0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// The geometry of a resolved config: each file's header formula.
    pub fn geometry(&self, cfg: &Config, head_dim: usize) -> BackwardGeometry {
        match self.kernel {
            BackwardKernel::Naive => {
                let rows = knob(cfg, ROWS_PER_BLOCK) as u32;
                BackwardGeometry {
                    rows_per_block: rows,
                    keys_per_block: rows,
                    block: rows * 32,
                    main_shared: 0,
                    side_shared: 0,
                    tickets: false,
                }
            }
            BackwardKernel::Mma => {
                let (warps, n, m, stages) = (
                    knob(cfg, NUM_WARPS),
                    knob(cfg, BLOCK_N),
                    knob(cfg, BLOCK_M),
                    knob(cfg, STAGES),
                );
                let d = head_dim;
                let shared =
                    2 * n * d * 2 + 2 * stages * m * d * 2 + n * (m + 8) * 2 + 2 * stages * m * 4;
                BackwardGeometry {
                    rows_per_block: m as u32,
                    keys_per_block: n as u32,
                    block: (warps * 32) as u32,
                    main_shared: shared as u32,
                    side_shared: 0,
                    tickets: knob(cfg, DETERMINISTIC) == 1,
                }
            }
        }
    }

    /// The launch of a resolved config on `shape` (a varlen batch's bounding shape, `varlen` its
    /// lengths): both registered implementations have all three stages.
    pub fn plan(
        &self,
        cfg: &Config,
        shape: &Shape,
        varlen: Option<&Varlen>,
    ) -> Result<BackwardPlan> {
        self.geometry(cfg, shape.head_dim)
            .plan(shape, varlen, true, true)
    }
}

/// backward_mma.cu's combinations beyond the knobs' domains, each refusal saying what to change.
fn mma_rules(cfg: &Config, head_dim: usize) -> std::result::Result<(), String> {
    let (warps, n, m) = (knob(cfg, NUM_WARPS), knob(cfg, BLOCK_N), knob(cfg, BLOCK_M));
    if n != 16 * warps && n != 32 * warps {
        return Err(format!(
            "BLOCK_N={n} must be 16 or 32 keys per warp: {} or {} with NUM_WARPS={warps}",
            16 * warps,
            32 * warps
        ));
    }
    if n == 32 * warps && head_dim > 64 {
        return Err(format!(
            "BLOCK_N={n} (32 keys per warp) at head dim {head_dim} needs more than 255 registers (dK and dV alone fill them): BLOCK_N={}",
            16 * warps
        ));
    }
    // dQ = dS·K splits a tile's m / 16 row blocks over the warps, then their columns.
    let row_blocks = m / 16;
    if row_blocks < warps && head_dim * row_blocks / warps % 16 != 0 {
        return Err(format!(
            "NUM_WARPS={warps} over BLOCK_M={m} leaves {} dQ columns per warp at head dim {head_dim}, and the mma needs a multiple of 16: a larger BLOCK_M or fewer warps",
            head_dim * row_blocks / warps
        ));
    }
    Ok(())
}
