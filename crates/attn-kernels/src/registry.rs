//! The registry of implementations: name, source, knobs, defaults, constraints, launch geometry.

use attn_oracle::{Params, Shape};

use crate::config::{Config, Knob};
use crate::error::{KernelError, Result};

/// How an implementation computes attention.
#[derive(Debug, Clone, Copy)]
pub enum Engine {
    /// One CUDA kernel following the ABI of `kernels/README.md`.
    Kernel {
        /// File name under `kernels/`.
        file: &'static str,
        /// Its source, embedded at build time.
        source: &'static str,
    },
    /// cuBLAS for one or both GEMMs and one kernel of ours for the rest, as `plan` says; the
    /// kernel's ABI is its own (stated in its file), not the one of `kernels/README.md`.
    Library {
        /// Which GEMMs cuBLAS does.
        plan: LibraryPlan,
        /// File name under `kernels/`.
        file: &'static str,
        /// Its source, embedded at build time.
        source: &'static str,
        /// The kernel's entry point.
        entry: &'static str,
    },
}

impl Engine {
    /// The kernel file under `kernels/` and its source.
    pub fn kernel_file(&self) -> (&'static str, &'static str) {
        match *self {
            Engine::Kernel { file, source } | Engine::Library { file, source, .. } => {
                (file, source)
            }
        }
    }
}

/// How a library-backed implementation splits attention between cuBLAS and our kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryPlan {
    /// cuBLAS S = Q·Kᵀ (f32), our scale + mask + softmax kernel writing P, cuBLAS O = P·V.
    Math,
    /// cuBLAS S = Q·Kᵀ (f32), our fused softmax·V kernel writing O.
    HybridQk,
    /// Our fused Q·Kᵀ + softmax kernel writing P, cuBLAS O = P·V.
    HybridPv,
}

impl LibraryPlan {
    /// cuBLAS computes S = Q·Kᵀ into an f32 scratch buffer.
    pub fn cublas_scores(self) -> bool {
        matches!(self, LibraryPlan::Math | LibraryPlan::HybridQk)
    }

    /// cuBLAS computes O = P·V from a probabilities scratch buffer.
    pub fn cublas_output(self) -> bool {
        matches!(self, LibraryPlan::Math | LibraryPlan::HybridPv)
    }
}

/// The kernel ABI of an implementation (`kernels/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// The ten plain parameters (pointers, sizes, scale, causal).
    Plain,
    /// The plain parameters, then `__grid_constant__` TMA tensor maps of Q, K and V: 3-D maps over
    /// `[B·H, S, D]`, 128-byte swizzle, boxes of 64 columns × `BLOCK_M` (Q) or `BLOCK_N` (K, V)
    /// rows × 1; and O's map (Q's boxes) last of all parameters, for a kernel that stores with TMA.
    TensorMaps,
}

/// The problems beyond dense multi-head attention an implementation handles, through the five
/// trailing parameters of kernels/README.md ("Variants"). The host refuses the others before
/// compiling, with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variants {
    /// Fewer K/V heads than query heads (grouped-query, multi-query).
    pub grouped_heads: bool,
    /// Sliding windows.
    pub window: bool,
    /// Packed variable-length batches.
    pub varlen: bool,
}

impl Variants {
    /// Dense multi-head attention only.
    pub const NONE: Variants = Variants {
        grouped_heads: false,
        window: false,
        varlen: false,
    };
    /// Grouped heads and windows on dense batches.
    pub const DENSE: Variants = Variants {
        grouped_heads: true,
        window: true,
        varlen: false,
    };
    /// Everything the ABI describes.
    pub const ALL: Variants = Variants {
        grouped_heads: true,
        window: true,
        varlen: true,
    };

    /// What of `shape`, `params` and a varlen batch (`varlen`) is outside these variants, as a
    /// phrase; `None` when supported.
    pub fn missing(&self, shape: &Shape, params: &Params, varlen: bool) -> Option<&'static str> {
        if varlen && !self.varlen {
            Some("packed variable-length (varlen) batches")
        } else if shape.kv_heads != shape.heads && !self.grouped_heads {
            Some("grouped-query / multi-query heads")
        } else if params.window.is_bounded() && !self.window {
            Some("sliding windows")
        } else {
            None
        }
    }

    /// `gqa, window, varlen` or `none`: for `cargo xtask kernels`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = [
            (self.grouped_heads, "gqa"),
            (self.window, "window"),
            (self.varlen, "varlen"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Grid dimensions (x, y, z): one block per work item (for a persistent kernel, the items its
    /// blocks loop over).
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// A persistent kernel: launched as `(min(items, SMs × resident blocks per SM), 1, 1)` blocks
    /// that loop over the `grid.0 · grid.1 · grid.2` items, with one more parameter after the ABI's:
    /// a pointer to two zeroed `u32` words the kernel owns (its work counter; it leaves them zero).
    pub persistent: bool,
    /// Query heads one work item (a cluster's blocks) takes together, sharing their K/V head: a
    /// launch refuses a problem whose query heads per K/V head are not a multiple (1: any).
    pub heads_together: u32,
    /// Bytes of workspace per block a persistent kernel takes after its two counter words (in the
    /// same zeroed allocation; 0: none).
    pub workspace_per_block: u32,
}

/// What the device allows; configs beyond it are rejected before compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Threads per block.
    pub max_threads_per_block: u32,
    /// Dynamic shared memory per block after opting in, bytes.
    pub max_shared_per_block: u32,
}

impl Limits {
    /// An H100 (sm_90): 1024 threads, 227 KiB of shared memory per block.
    pub const H100: Limits = Limits {
        max_threads_per_block: 1024,
        max_shared_per_block: 232_448,
    };
}

/// A registered implementation.
#[derive(Debug)]
pub struct Implementation {
    /// Its name, as given to `--impl` or `IMPL`.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// How it runs.
    pub engine: Engine,
    /// The parameters its kernel takes.
    pub abi: Abi,
    /// Its knobs and their domains.
    pub knobs: &'static [Knob],
    /// Supported head dims; `None` for any.
    pub head_dims: Option<&'static [usize]>,
    /// The only architecture it compiles for, e.g. `compute_90a` for Hopper's wgmma; `None` for
    /// any (sm_80 and newer).
    pub arch: Option<&'static str>,
    /// The problems beyond dense multi-head attention it handles.
    pub variants: Variants,
    /// Knobs added after the kernel's first version, each with the value that behaves as a kernel
    /// which predates it: a git revision's text that never names the knob is compiled and launched
    /// with that value (`gate --baseline rev:REF`).
    pub introduced: &'static [(&'static str, i64)],
    /// Knobs whose default gives way to the other knobs: when the defaults under the overrides
    /// break a constraint and the overrides do not name such a knob, it takes this value instead
    /// (hopper's Q_REGS: 1 at D=128 where the tile, overlap and schedule leave it registers, 0
    /// where a tuning or the user picks one that does not; its Q_STAGES: 2 where tuned, 1 where
    /// the user's knobs rule out the persistent loop's two Q tiles). The resolved config says which.
    pub yielding: &'static [(&'static str, i64)],
    defaults: fn(head_dim: usize) -> Config,
    /// Knobs tuned for a problem, its shape and mask (e.g. smaller tiles when the grid would not
    /// fill the GPU, another work order under a causal mask); they override the defaults, and the
    /// user's overrides override them.
    tuned: fn(&Shape, &Params) -> Config,
    constraints: fn(&Config, head_dim: usize) -> std::result::Result<(), String>,
    geometry: fn(&Config, &Shape) -> Geometry,
}

fn elem_bytes() -> u32 {
    2 // fp16 and bf16 alike
}

fn knob(cfg: &Config, name: &str) -> u32 {
    // resolve() guarantees every knob is present and within its (small, positive) domain.
    cfg.get(name).map_or(0, |v| v as u32)
}

fn row_tiles(seq_q: usize, block_m: u32) -> u32 {
    seq_q.div_ceil(block_m.max(1) as usize) as u32
}

static NAIVE_KNOBS: [Knob; 1] = [Knob {
    name: "ROWS_PER_BLOCK",
    domain: &[1, 2, 4, 8],
    doc: "query rows (warps) per block",
}];

static TILED_KNOBS: [Knob; 4] = [
    Knob {
        name: "BLOCK_M",
        domain: &[16, 32, 64, 128],
        doc: "query rows per block",
    },
    Knob {
        name: "BLOCK_N",
        domain: &[32, 64],
        doc: "keys per K/V tile",
    },
    Knob {
        name: "NUM_WARPS",
        domain: &[2, 4, 8],
        doc: "warps per block",
    },
    Knob {
        name: "STAGES",
        domain: &[1, 2],
        doc: "K/V buffers (2: cp.async double buffering, one barrier per tile)",
    },
];

static MMA_KNOBS: [Knob; 8] = [
    Knob {
        name: "BLOCK_M",
        domain: &[16, 32, 64, 128, 256],
        doc: "query rows per block (= WARP_M x NUM_WARPS / KV_SPLIT)",
    },
    Knob {
        name: "BLOCK_N",
        domain: &[32, 48, 64, 96, 128],
        doc: "keys per warp per K/V tile",
    },
    Knob {
        name: "NUM_WARPS",
        domain: &[1, 2, 4, 8],
        doc: "warps per block",
    },
    Knob {
        name: "WARP_M",
        domain: &[16, 32],
        doc: "query rows per warp (32: each K/V fragment feeds two mma)",
    },
    Knob {
        name: "KV_SPLIT",
        domain: &[1, 2, 4],
        doc:
            "warps sharing a row group, each taking BLOCK_N keys of every tile (merged at the end)",
    },
    Knob {
        name: "STAGES",
        domain: &[1, 2, 3, 4],
        doc: "cp.async K/V pipeline depth",
    },
    Knob {
        name: "Q_IN_REGS",
        domain: &[0, 1],
        doc: "keep Q's A fragments in registers (0: re-read from shared)",
    },
    Knob {
        name: "MIN_BLOCKS",
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
        ("BLOCK_M", warp_m * warps / split),
        ("BLOCK_N", block_n),
        ("NUM_WARPS", warps),
        ("WARP_M", warp_m),
        ("KV_SPLIT", split),
        ("STAGES", stages),
        ("Q_IN_REGS", q_in_regs),
        ("MIN_BLOCKS", min_blocks),
    ])
}

/// mma's large-tile defaults: 4 warps of 32 rows (every K and V fragment feeds two mma, halving
/// shared-memory reads per FLOP), with the widest key tile that fits 255 registers unspilled:
/// 48 keys and 3 stages at D=128, 96 keys and 2 stages at D=64 (128 keys spill on sm_80). Measured
/// on the H100 (graph replay, L2 flushed), against FlashAttention-2 in brackets: 2,16,8192,128
/// 359-373 TFLOP/s (351), 4,16,2048,128 363 (348), causal 343 (316); 2,16,8192,64 335 (306).
fn mma_defaults(head_dim: usize) -> Config {
    if head_dim > 64 {
        mma_config(4, 32, 1, 48, 3, 0, 1)
    } else {
        mma_config(4, 32, 1, 96, 2, 0, 1)
    }
}

/// SMs of the H100 the per-shape rules were measured on (a grid smaller is under one wave).
const H100_SMS: usize = 132;

/// Shared memory of an H100 SM, and what the driver reserves of it for each resident block.
const H100_SHARED_PER_SM: u32 = 233_472;
const H100_SHARED_RESERVED_PER_BLOCK: u32 = 1024;

/// Blocks of `rows_per_block` query rows that a shape launches.
fn grid_blocks(shape: &Shape, rows_per_block: usize) -> usize {
    shape.batch * shape.heads * shape.seq_q.div_ceil(rows_per_block)
}

/// Small grids at D=64 (the defaults would leave most of the 132 SMs of an H100 idle): 16-row
/// blocks whose 4 warps split the keys when that still fits in one wave (2 blocks/SM by shared
/// memory), else 32-row blocks with a 2-way split (3 blocks/SM). Measured with the gate's graph
/// protocol: (1,8,512,64) 11.2 -> 9.0 µs, (2,8,512,64) 12.5 -> 11.9 µs.
fn mma_tuned(shape: &Shape, _params: &Params) -> Config {
    const ONE_WAVE_BLOCK16: usize = 2 * H100_SMS;
    const ONE_WAVE_BLOCK32: usize = 3 * H100_SMS;
    if shape.head_dim != 64 || grid_blocks(shape, 128) >= H100_SMS {
        Config::default()
    } else if grid_blocks(shape, 16) <= ONE_WAVE_BLOCK16 {
        mma_config(4, 16, 4, 32, 3, 1, 1)
    } else if grid_blocks(shape, 32) <= ONE_WAVE_BLOCK32 {
        mma_config(4, 16, 2, 64, 2, 1, 1)
    } else {
        Config::default()
    }
}

static HOPPER_KNOBS: [Knob; 16] = [
    Knob {
        name: "BLOCK_M",
        domain: &[64, 128, 192],
        doc: "query rows per block (= 16 x NUM_WARPS: 64 per consumer warpgroup)",
    },
    Knob {
        name: "BLOCK_N",
        domain: &[64, 128, 160, 176],
        doc: "keys per K/V tile (the N of the S = Q·Kᵀ wgmma, the rows of a K/V TMA box); 176 (FlashAttention-3's D=128 tile; opt-in) and 160 (the widest whose 2-stage ring fits beside two Q tiles at D=128; tuned there from 2048 keys a row) need NUM_WARPS <= 8 and, at D=128, STAGES=2",
    },
    Knob {
        name: "NUM_WARPS",
        domain: &[4, 8, 12],
        doc: "consumer warps: 1, 2 or 3 consumer warpgroups (a producer warpgroup comes on top; 12 only at D=64)",
    },
    Knob {
        name: "STAGES",
        domain: &[2, 3, 4],
        doc: "K/V ring depth (TMA loads completing on mbarriers)",
    },
    Knob {
        name: "OVERLAP",
        domain: &[0, 1],
        doc: "issue S(j+1) before P(j)·V(j) so softmax overlaps wgmma",
    },
    Knob {
        name: "PINGPONG",
        domain: &[0, 1],
        doc: "the consumer warpgroups take turns issuing wgmma (one's softmax overlaps another's GEMMs; needs NUM_WARPS >= 8, OVERLAP=1)",
    },
    Knob {
        name: "SCHEDULE",
        domain: &[0, 1],
        doc: "work order: 0 = grid (one block per row block, bottom-up when causal), 1 = persistent (a block per SM looping over (batch, head, row block) items: strided when all are equal, else heaviest first from a device counter); --config SCHEDULE=grid|persistent",
    },
    Knob {
        name: "Q_REGS",
        domain: &[0, 1],
        doc: "Q·Kᵀ's A operand: 0 = Q from shared memory (a descriptor per k-step), 1 = Q held in registers for the item (the wgmma reads only K from shared memory; BLOCK_N 64 or 128, NUM_WARPS <= 8, OVERLAP=1); the default at D=128, where it yields to 0 when other knobs rule it out",
    },
    Knob {
        name: "PV_N",
        domain: &[64, 128],
        doc: "N of the P·V wgmma: 64 = one per 64-column panel of O, 128 = one for both panels at D=128 (FlashAttention-3's shape: P's registers read once, half the instructions; the default at D=128)",
    },
    Knob {
        name: "LAZY_RESCALE",
        domain: &[0, 1],
        doc: "1 = a row keeps its running max while a key tile raises it by at most 8 (log2 domain) and a warp whose rows all kept theirs skips O's rescale (FlashAttention-4's conditional rescaling: fewer instructions per tile, so less power at the same work: the tuning from 4096 keys), 0 = the exact running max",
    },
    Knob {
        name: "Q_STAGES",
        domain: &[1, 2],
        doc: "Q tiles of the persistent loop with Q in shared memory: 2 = items alternate between two, so the next item's Q is copied during this one (needs SCHEDULE=1, Q_REGS=0; at D=128 STAGES=2; with it, unless CHAIN=1, a copy warp stores each item's O with TMA; the tuning of full grids but, at D=128, windows both ways with few keys a row), 1 = one, refilled after each item's epilogue; yields to 1 where other knobs rule it out",
    },
    Knob {
        name: "CLUSTER",
        domain: &[1, 2],
        doc: "blocks per thread-block cluster: 2 = two blocks of adjacent row blocks visit the same key tiles and each copies half of every K/V tile into both (TMA multicast), halving the K/V traffic from L2 (FlashAttention-3's cluster of two; with SCHEDULE=1, and then Q_STAGES=2 or Q_RELEASE=1, the pair is the work item, one ticket per cluster; the tuning of every full grid), 1 = each block copies its own; yields to 1 where other knobs rule it out",
    },
    Knob {
        name: "Q_RELEASE",
        domain: &[0, 1],
        doc: "when the persistent loop's one Q tile goes back to the producer: 1 = after the item's last Q·Kᵀ, O then stored from registers, so the next item's Q is copied during the item's last tile and epilogue (the overlap two Q tiles give, where a second tile does not fit: the 176-key tile; needs SCHEDULE=1, Q_REGS=0, Q_STAGES=1), 0 = after the epilogue, which stages O in the Q tile for 16-byte stores; yields to 0 where other knobs rule it out",
    },
    Knob {
        name: "CLUSTER_HEADS",
        domain: &[0, 1],
        doc: "what a persistent cluster's two blocks take together: 1 = one row block of two query heads of one K/V head (the same key tiles for both, the causal diagonal's too; needs CLUSTER=2, SCHEDULE=1 and an even number of query heads per K/V head, which the launch checks; the tuning of persistent clusters where that number is even), 0 = two adjacent row blocks of one head; yields to 0 where other knobs rule it out",
    },
    Knob {
        name: "STREAM_K",
        domain: &[0, 1],
        doc: "1 = a static persistent schedule (no mask, dense batch) shares its last items' key tiles out evenly over the clusters (stream-K: an item cut between two runs merges the two partial results), so the grid ends with no thin last wave (the tuning of unmasked full grids from 4096 keys at D=128, 2048 at D=64); needs SCHEDULE=1 and Q_STAGES=2; 0 = whole items to the end",
    },
    Knob {
        name: "CHAIN",
        domain: &[0, 1],
        doc: "1 = in an unmasked dense batch a persistent block chains its items (stream-K segments too, at D=64; at D=128 CHAIN=1 with STREAM_K=1 spills): an item's last turn issues the next item's first Q·Kᵀ beside its own last P·V and runs that softmax while the P·V completes, then stores (no turn with a Q·Kᵀ or a P·V alone at an item's start and end); needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1; the consumers store O themselves (no copy warp: with it some D=128 configs spilled); opt-in: ncu measured 228.3 µs with it against 225.9 µs at 2,32/8,2048,128; 0 = each item begins after the previous one's last P·V",
    },
];

/// hopper's defaults, measured on the H100 with the gate's graph protocol against SDPA (cuDNN):
/// D=128 two consumer warpgroups (2,16,8192,128: 655 TFLOP/s vs 655, causal 617 vs 596), D=64
/// three (2,16,8192,64: 521 vs 477 where two reach 428; causal 479 vs 441), all with ping-pong.
/// At D=128 one N = 128 P·V wgmma for both of O's panels: the gate (batch mode, against PV_N=64)
/// measured 1.02× at 2,32/8,8192,128 and 1.01× at 2,16,16384,128, both CIs above 1. And at
/// D=128 Q held in registers (Q_REGS=1; it yields to 0 where the tile or overlap leave it no
/// registers or ptxas no correct code: the one-warpgroup tuning, 176-key tiles): the gate (batch mode, against Q_REGS=0) measured 1.03× [1.01, 1.06] at 2,16,8192,128 and
/// 1.03× [1.01, 1.04] at 2,32/8,8192,128 (evidence/gate/2026-11-25T07-02-55Z; the 176-key
/// tile against the same: 0.96× and 0.97×, 07-06-12Z, before K and V were released apart: see
/// [`hopper_tuned`]).
fn hopper_defaults(head_dim: usize) -> Config {
    let warps = if head_dim <= 64 { 12 } else { 8 };
    Config::from_pairs(&[
        ("BLOCK_M", 16 * warps),
        ("BLOCK_N", 128),
        ("NUM_WARPS", warps),
        ("STAGES", 3),
        ("OVERLAP", 1),
        ("PINGPONG", 1),
        ("SCHEDULE", 0),
        ("PV_N", if head_dim == 128 { 128 } else { 64 }),
        ("Q_REGS", if head_dim == 128 { 1 } else { 0 }),
        ("LAZY_RESCALE", 0),
        ("Q_STAGES", 1),
        ("CLUSTER", 1),
        ("Q_RELEASE", 0),
        ("CLUSTER_HEADS", 0),
        ("STREAM_K", 0),
        ("CHAIN", 0),
    ])
}

/// Keys per row from which hopper rescales lazily (LAZY_RESCALE=1), at either head dim. At D=128
/// the gate (batch mode) measured lazy against the exact running max 1.02× [0.98, 1.05] at
/// 2,16,8192,128, 1.03× [1.01, 1.04] at 2,32/8,8192,128 and 1.08× [1.06, 1.09] at
/// 2,32/8,8192,128 causal (evidence/gate/2026-11-26T14-40-11Z): these long rows run
/// power-limited (SM clock ~1600 MHz), and a skipped rescale of O is power saved. From 4096 keys
/// too: 1.04× [1.00, 1.07] at 2,16,4096,128, 1.06× [1.05, 1.07] at 2,32/8,4096,128, 1.06× [1.01,
/// 1.08] at 2,16,4096,128 causal (15-03-16Z). Where the clock is not held down it loses: the exact
/// max measured 1.06× [1.03, 1.09] over lazy at 4,16,2048,128 and 1.00× at 2,16,2048,128 causal
/// (14-52-28Z). At D=64, under ten blocks a side: 1.06× [1.05, 1.08] at 2,16,8192,64, 1.05× [1.05,
/// 1.06] at 2,16/1,8192,64, 1.08× [1.06, 1.10] at 2,16,8192,64 causal (2026-11-27T10-52-57Z),
/// 1.07× [1.05, 1.08] at 2,16,4096,64 and 1.02× [1.00, 1.04] causal (11-06-51Z; on an H200 1.05×
/// and 1.02×, 10-58-03Z); the exact max against lazy at 2,16,8192,64 causal window=1024,-1:
/// 0.98× [0.97, 0.99] (H200, 10-57-33Z). (The figures of 14-52-28Z, taken on two blocks a side,
/// had found the exact max ahead at 2,16,8192,64: not established.)
const HOPPER_LAZY_RESCALE_MIN_KEYS: usize = 4096;

/// Whether hopper's two Q tiles (at D=128 without a mask: at every length) take the stream-K tail
/// (STREAM_K=1): the static order of an unmasked problem cuts its last items into equal runs of
/// key tiles, one per cluster, so that no thin last wave leaves clusters idle (causal and windowed
/// problems take items heaviest first from a counter: whole); from [`HOPPER_STREAM_K_MIN_KEYS`]
/// keys, where it was measured ahead. Before it, two Q tiles ended at 4096
/// keys without a mask at D=128: against the tuning they replaced 1.13× at 4,16,512, 1.08× [1.06,
/// 1.11] at 4,16,1024, 1.11× at 4,16,2048, 1.07× at 2,32/8,2048 and 1.06× [1.02, 1.09] at
/// 2,16,4096 (against the 176-key tile), while from 8192 keys the grid's 176-key tile (in clusters)
/// held: 1.00× [0.97, 1.04] at 2,16,8192 and 0.98× [0.96, 1.00] at 2,16,16384
/// (evidence/gate/2026-11-28T00-54-29Z). With the tail cut, on an H200 (batch mode, 30 samples a
/// side; 2026-11-29T05-18-42Z to 05-26-38Z) against the tuning before it: 1.03× [0.98, 1.06] at
/// 2,32/8,2048,128 and 1.06× [1.03, 1.09] at 2,32/8,4096,128; against the 176-key grid 1.04× [1.03,
/// 1.06] at 2,16,8192,128, 1.03× [1.01, 1.07] at 2,16,16384,128, 1.02× [1.00, 1.05] at
/// 2,32/8,8192,128 and 1.02× [1.00, 1.04] at 2,32/8,16384,128; at D=64 1.08× [1.07, 1.09] at
/// 2,16,8192,64, 1.16× [1.15, 1.19] at 2,16,4096,64, 1.04× [1.03, 1.06] at 4,16,2048,64. Against
/// cuDNN: 1.07× [1.04, 1.11] at 2,32/8,4096,128 (bf16 1.05× [1.03, 1.07]), 1.08× [1.05, 1.12] at
/// 2,32/8,8192,128, 1.07× [1.05, 1.10] at 2,32/1,4096,128, 0.96-1.05× at 2,32/8,2048,128.
fn hopper_cuts_the_tail(shape: &Shape, params: &Params) -> bool {
    let (d64, d128) = HOPPER_STREAM_K_MIN_KEYS;
    let min_keys = if shape.head_dim == 64 { d64 } else { d128 };
    !params.causal && !params.window.is_bounded() && shape.seq_kv >= min_keys
}

/// Keys per row from which hopper cuts the tail ([`hopper_cuts_the_tail`]), at D=64 and D=128. At D=128
/// short rows lose what the cut gains: each cut adds an item's start and end and a merge, and at
/// 2,32/8,2048,128 (13 key tiles an item) the gate measured 1.03× [0.98, 1.06] over whole items
/// (evidence/gate/2026-11-29T05-18-42Z) while ncu, one launch at a time with L2 flushed, timed the
/// cut 123.4 against 117.3 µs at 1,32/8,2048, 228.6 against 224.9 at 2,32/8, 441.8 against 440.9 at
/// 4,32/8 and 865.2 against 870.2 at 8,32/8 (evidence/ncu/captures/2026-11-29-gqa-2048): not taken
/// there. At D=64 the gate measured 1.04× [1.03, 1.06] at 4,16,2048,64 (05-25-45Z).
const HOPPER_STREAM_K_MIN_KEYS: (usize, usize) = (2048, 4096);

/// Keys a row sees on average under the mask (the varlen batches' longest sequence), from which
/// hopper's two Q tiles at D=128 take 160-key tiles (230,400 bytes of shared memory with the
/// 2-stage ring; 176 keys do not fit beside two Q tiles), and from which a window both ways takes
/// two Q tiles at all. Against the tuning it replaced (two Q tiles of 128 keys, or past them the
/// grid) the gate (batch mode, ten blocks a side; evidence/gate/2026-11-27T18-4*Z and 18-57-39Z)
/// measured 1.07× [1.01, 1.11] at 4,16,2048, 1.05× [1.00, 1.13] at 2,32/8,2048, 1.08× [1.05,
/// 1.10] at 2,16,4096 and 1.05× [1.02, 1.07] at 2,32/8,4096 without a mask; causal 1.04× [0.99,
/// 1.11] at 2,16,4096, 1.10× at 2,32/8,4096, 1.05× [1.02, 1.08] at 2,16,8192, 1.08× at
/// 2,32/8,8192, 1.04× [1.02, 1.06] at 2,32/1,8192; causal windows of 4096 at 16384 rows 1.10× and
/// 1.03× [1.00, 1.07]; the window of 2048 both ways at 16384 (against the grid) 1.04× [1.02, 1.07];
/// the varlen suite's causal D=128 batches 1.08×, 1.09× and 1.11×. Under it they lose: 0.95×
/// [0.94, 0.97] at 2,16,2048 causal (1024 keys a row), 1.00× at 2,32/8,2048 causal. Past the two
/// Q tiles' lengths, against the grid's 176-key tile: 1.03× [0.99, 1.05] at 2,16,8192 without a
/// mask, 0.97× at 2,16,16384, 0.98× at 2,16,16384 and 1,32/8,16384 causal: not taken.
const HOPPER_160_KEY_TILES_MIN_KEYS: usize = 2048;

/// Blocks per cluster of hopper's full grids persistent with two Q tiles (and, until the copy warp, the
/// grid of 176-key tiles at D=128 past two Q tiles' lengths): two (CLUSTER=2). Adjacent row blocks of one
/// head visit the same key tiles and each block copies half of every K/V tile into both (TMA
/// multicast), halving the K/V traffic from L2 (ncu at 2,16,8192,128: L2 throughput 54% -> 32% of
/// peak) and with it power: the blocks run at a higher clock for about 3% more cycles. Against the same tuning without clusters the gate
/// (batch mode, ten blocks a side; evidence/gate/2026-11-27T22-08-08Z) measured 1.02× [0.98, 1.04]
/// at 2,16,16384,128, 1.08× [1.01, 1.13] at 2,32/8,8192,128, 1.04× [1.01, 1.08] at 2,16,8192,128,
/// and causal 1.04× [1.02, 1.06] at 2,16,16384,128 and 1.02× [0.99, 1.06] at 1,32/8,16384,128
/// (a first run, 21-59-46Z: 1.01×, 1.02×, 1.02×, 0.99×, 1.01×). Before the remote releases
/// dropped their cluster-scope fence (a MEMBAR.ALL.GPU each), clusters were 0.79-0.88× (21-47-52Z).
/// In the persistent loop with two Q tiles, where a work item is the cluster's pair of row blocks
/// and rank 0 draws one ticket for both (23-04-48Z): 1.06× [1.00, 1.09] at 2,16,8192,128 causal,
/// 1.05× [1.02, 1.09] at 2,32/8,8192,128 causal, 1.04× at 2,32/1,8192,128 causal, 1.08× [1.03,
/// 1.11] and 1.06× [1.00, 1.10] under causal windows of 4096 at 2,16 and 2,32/8,16384,128, 1.03×
/// at 2,16,4096,128, 4,16,2048,128 and 2,32/8,4096,128, 1.01-1.02× at 4,16,1024,128 causal and
/// at D=64 2,16,8192 with either mask. (Taking the items in a static order instead, both blocks
/// alike without a ticket, lost on causal problems of 16 heads: 0.89× at 2,16,8192,128, 0.93×
/// under the window, 0.96× at D=64, 22-53-29Z.)
const HOPPER_CLUSTER: i64 = 2;

/// Whether hopper's persistent clusters (two Q tiles) take one row block of two query heads that
/// share a K/V head (CLUSTER_HEADS=1) rather than two row blocks of one head: where the query heads
/// per K/V head are even (grouped-query and multi-query problems; multi-head ones have no pair).
/// Both blocks then visit the same key tiles, the causal diagonal's and a window's edges too, so
/// neither waits on a multicast tile only the other's rows need. Against the tuning before it the
/// gate (batch mode, ten blocks a side, on an H200: evidence/gate/2026-11-28T12-30-31Z) measured
/// causal 1.07× [1.02, 1.11] at 2,32/8,4096,128, 1.02× [0.99, 1.05] at 2,32/8,8192,128, 1.03×
/// [1.00, 1.05] at 2,32/1,8192,128, 1.07× [1.06, 1.09] at 2,16/1,8192,64 and 1.06× [1.04, 1.08]
/// on a causal varlen batch of 32/8 heads; the persistent loop with it stays behind the grid's
/// 176-key tile past the two Q tiles' lengths: 1.00× [0.98, 1.02] at 1,32/8,16384,128 causal,
/// 1.01× [0.99, 1.02] at 2,32/8,8192,128 (12-33-25Z).
fn hopper_clusters_over_heads(shape: &Shape) -> bool {
    shape.group() % 2 == 0
}

/// hopper's knobs per problem. A grid of at least one block per SM at the default rows takes two Q
/// tiles in the persistent loop where they were measured ahead ([`hopper_takes_two_q_tiles`]);
/// elsewhere (D=128: windows both ways with few keys a row) the defaults' grid; and from
/// [`HOPPER_LAZY_RESCALE_MIN_KEYS`] keys conditional rescaling. Until the copy warp (see
/// [`hopper_takes_two_q_tiles`]) D=128 past two Q tiles' lengths took the grid with
/// FlashAttention-3's 128×176 tile in a 2-stage ring (Q then from shared memory: a 176-key tile
/// leaves no registers for it), in clusters of two blocks sharing each K/V tile
/// ([`HOPPER_CLUSTER`]), now opt-in. Since K and V of a ring slot are
/// released apart (d1d660b), the gate (batch mode, ten blocks a side) measured the 176-key tile
/// against the 128-key one 1.07× [1.04, 1.10] at 2,16,8192,128, 1.07× [1.05, 1.12] at
/// 2,32/8,8192,128, 1.05× [1.02, 1.07] at 2,16,16384,128 (evidence/gate/2026-11-27T09-50-56Z;
/// before the split it had lost, 0.96× and 0.97×, 2026-11-25T07-06-12Z); causal, on the grid
/// with Q in registers, 1.05× [1.03, 1.07] at 2,16,16384,128 and 1.05× [1.04, 1.09] at
/// 1,32/8,16384,128 (10-00-13Z). Windows keep 128 keys: not measured with it.
///
/// Grids under one wave at the default rows per block (the seed suite's shapes): one consumer
/// warpgroup of 64 rows, so that more blocks share the SMs, with 128-key tiles in 2 stages and
/// neither overlap nor ping-pong (nothing to overlap with in 4 to 8 tiles). Measured on the H100
/// with the gate's graph protocol: (1,8,512,64) 12.4 -> 9.06 µs, (2,8,512,64) 13.2 -> 9.78 µs.
/// But not where the 64-row grid would need a second wave: at D=128 such a block takes 145 KiB of
/// shared memory (one per SM), and at (2,16,512,128) the defaults' one wave of 128 blocks measured
/// 1.32× [1.32, 1.32] the small-grid tuning's two waves of 256, 1.25× under the causal mask (the
/// gate, batch mode, in blocks of 3 samples: evidence/gate/2026-11-27T09-20-43Z).
///
/// Before two Q tiles, larger causal problems (a causal window too) took the persistent scheduler,
/// heaviest row blocks first: measured on the H100 (bench --mode batch, fp16, grid -> persistent,
/// FlashAttention-3 in brackets; evidence/bench/2026-11-24T21-56-*) (2,16,8192,128) causal 990 ->
/// 939 µs (929), (2,16,8192,64) causal 590 -> 544 (591), (2,16,2048,128) causal 84.7 -> 77.6
/// (79.1), (2,32/8,8192,128) causal 1909 -> 1913 (1706: a tie; FA3's figures from benches before
/// b681d13, which timed it on 2 to 8 resident input sets against hopper's 50, in its favour by up
/// to 18% at short sequences and 4% at 8192). Without a mask every row block does the same work and
/// the grid stays: (2,16,8192,128) 1857 -> 1889, (4,16,2048,128) 231 -> 233.
///
/// Except at D=128 from 8192 rows on (until the copy warp: see [`hopper_takes_two_q_tiles`]), where the
/// grid kept Q in registers (which the persistent loop has no registers for) and gained more than
/// the persistent order with one Q tile: the gate (batch mode) measured the grid with Q_REGS=1
/// 1.07× [1.06, 1.09] at (2,16,8192,128) causal and 1.05× [1.03, 1.06] at (2,32/8,8192,128) causal
/// against the persistent schedule with Q in shared memory (evidence/gate/2026-11-25T07-49-27Z),
/// and against FlashAttention-3 1.04×, 0.97×, 0.97× at (1,32/8,16384,128) causal (the persistent
/// one 1.02×, 0.96×, 0.93×; 07-54-05Z, 07-28-48Z).
///
/// The persistent loop's 176-key tile with its one Q tile released early (Q_RELEASE=1, clusters
/// of two) is opt-in: against this tuning the gate (batch mode, ten blocks a side) measured it
/// 1.03× [1.00, 1.05] at 2,16,8192,128, 1.03× [1.00, 1.06] at 2,32/8,8192,128, 1.05× [1.03, 1.07]
/// at 2,16,8192,128 causal and 1.04× [1.00, 1.06] under a window of 2048 both ways at 16384 rows,
/// but 0.98× [0.97, 1.01] at 2,16,16384,128 and 0.99-1.00× causal at 16384
/// (evidence/gate/2026-11-28T04-21-59Z); taken from 4096 to 8192 keys, this tuning measured ahead
/// of it 1.04× [1.00, 1.07] at 2,32/8,8192,128 causal, 1.10× and 1.09× on the varlen suite's causal
/// batches with an 8192-token sequence and 1.03× [1.01, 1.05] on its non-causal one (04-33-34Z,
/// 04-34-02Z; the tuning sees a varlen batch as its padded dense shape). Where it gains, the
/// margins are within the gate's no-change verdict; where it loses, it loses more.
///
/// Gate figures before 2026-11-27T09-30Z were taken in blocks of 10 samples, two a side at
/// `--samples 20`, where hopper measured against itself read up to 1.11× (the gate's
/// `MIN_BLOCKS_A_SIDE`): a difference under about 10% among them is not established.
fn hopper_tuned(shape: &Shape, params: &Params) -> Config {
    let defaults = hopper_defaults(shape.head_dim);
    let rows = knob(&defaults, "BLOCK_M") as usize;
    if grid_blocks(shape, rows) >= H100_SMS {
        let mut knobs = Vec::new();
        if shape.seq_kv >= HOPPER_LAZY_RESCALE_MIN_KEYS {
            knobs.push(("LAZY_RESCALE", 1));
        }
        if hopper_takes_two_q_tiles(shape, params) {
            knobs.extend([("SCHEDULE", 1), ("Q_REGS", 0), ("Q_STAGES", 2)]);
            if hopper_cuts_the_tail(shape, params) {
                knobs.push(("STREAM_K", 1));
            }
            if hopper_d64_takes_128_rows(shape) {
                // Two consumer warpgroups, each block alone (no cluster, so no head pairs).
                knobs.extend([("NUM_WARPS", 8), ("BLOCK_M", 128)]);
            } else {
                knobs.push(("CLUSTER", HOPPER_CLUSTER));
                if hopper_clusters_over_heads(shape) {
                    knobs.push(("CLUSTER_HEADS", 1));
                }
            }
            if shape.head_dim == 128 {
                knobs.push(("STAGES", 2));
                if hopper_takes_160_key_tiles(shape, params) {
                    knobs.push(("BLOCK_N", 160));
                }
            }
        }
        // Else (D=128 under a window both ways with few keys a row) the defaults' grid.
        return Config::from_pairs(&knobs);
    }
    let small = Config::from_pairs(&[
        ("BLOCK_M", 64),
        ("BLOCK_N", 128),
        ("NUM_WARPS", 4),
        ("STAGES", 2),
        ("OVERLAP", 0),
        ("PINGPONG", 0),
    ]);
    // Only where the 64-row blocks still run in one wave: at D=128 one takes 145 KiB, one per SM.
    let resident =
        (H100_SHARED_PER_SM / hopper_shared_on_sm(&small, shape.head_dim as u32)) as usize;
    if grid_blocks(shape, 64) > resident * H100_SMS {
        return Config::default();
    }
    small
}

/// Whether a full grid of `shape` takes two Q tiles in the persistent loop (Q_STAGES=2, with
/// SCHEDULE=1, Q_REGS=0 and at D=128 a 2-stage ring): the next item's Q arrives during this one's
/// key loop instead of after its epilogue, and a copy warp stores each item's O (a12fe1a). At D=64
/// everywhere; at D=128 without a mask (with the stream-K tail from 4096 keys:
/// [`hopper_cuts_the_tail`]), under a causal mask or a causal window, and under a window both ways
/// where the 160-key tile comes with them (measured so).
///
/// Up to 8192 rows under a causal mask first (before the copy warp), against the tuning it
/// replaced the gate (batch mode, ten blocks a side; evidence/gate/2026-11-27T16-0*Z to 16-20-19Z)
/// measured at D=128 causal 1.15× at 4,16,512, 1.09× [1.08, 1.10] at 4,16,1024, 1.14× at
/// 2,32/8,1024, 1.07× at 2,16,2048, 1.09× at 2,16,4096, 1.12× at 2,32/8,4096, 1.05× [1.01,
/// 1.06] at 2,16,8192, 1.05× at 2,32/8,8192 and 2,32/1,8192, but 0.96× [0.95, 0.97] at
/// 2,16,16384 and 1,32/8,16384 (where the grid's 176-key tile stayed); causal
/// windows of 4096 at 16384 rows 1.07× and 1.05×; causal varlen batches 1.10×. At D=64 1.09×
/// and 1.17× (causal) at 4,16,1024, 1.06× at 2,16,4096, 1.03× at 2,16,8192 and 2,16/1,8192,
/// 1.07× at 2,16,8192 causal, 1.02× [0.97, 1.04] at 2,16,16384 causal, 1.12× under a causal
/// window of 1024, 1.05× and 1.11× on the varlen suite's D=64 batches. Against cuDNN in the
/// same call (16-01-51Z to 16-03-32Z): 1.12× at 4,16,1024,128 causal (the tuning before: 1.03×),
/// 1.23× at 2,32/8,1024,128 causal, 1.04× [1.03, 1.05] at 4,16,1024,128 (before: 0.93-0.95×).
///
/// With the copy warp, causal at every length: against the grid's 176-key tile the gate (batch
/// mode, 30 samples a side, on an H200) measured 1.06× [1.05, 1.07] at 1,32/8,16384,128 causal and
/// 1.05× [1.04, 1.06] at 2,16,16384,128 causal, and against FlashAttention-3 1.02× [0.99, 1.04] at
/// 1,32/8,16384,128 causal, where the grid had measured 0.98× [0.95, 1.00] an hour before
/// (evidence/gate/2026-11-29T14-39-05Z to 14-40-04Z, 14-37-41Z). The copy warp itself against the
/// kernel before it (919ffc8, same calls): 1.04× [1.00, 1.09] at 2,32/8,2048,128, 1.04× [1.01,
/// 1.07] at 2,32/8,4096,128, 1.02× [0.99, 1.06] at 2,16,4096,64 (14-28-45Z to 14-29-32Z), 1.05×
/// on the window suite's three D=128 shapes, 1.02× at 2,16,8192,64 under a causal window of 1024
/// (14-41-58Z) and 1.01-1.08× on the varlen suite's first five batches (14-44-55Z).
fn hopper_takes_two_q_tiles(shape: &Shape, params: &Params) -> bool {
    if shape.head_dim != 128 {
        return true;
    }
    // A window both ways: only where the 160-key tile comes with them (measured so). Without a
    // mask with the stream-K tail from 4096 keys (hopper_cuts_the_tail).
    params.causal || !params.window.is_bounded() || hopper_takes_160_key_tiles(shape, params)
}

/// Cost of one query row in hopper's 192-row blocks (D=64's default: three consumer warpgroups)
/// against one in 128-row blocks, as 17/20: the gate (batch mode, on an H200, grid schedule)
/// measured 87.8 µs for 2,16,2048,64 in 192-row blocks (3 waves of 192 rows) against 92.3 µs in
/// 128-row ones (4 waves of 128; evidence/gate/2026-11-29T03-50-49Z and 03-50-21Z).
const HOPPER_D64_WIDE_ROW_COST: (usize, usize) = (17, 20);

/// Whether a full grid at D=64 takes 128-row blocks (NUM_WARPS=8, each block alone: CLUSTER=1)
/// rather than the default 192: where the 192-row blocks' waves, counted in rows and weighed by
/// [`HOPPER_D64_WIDE_ROW_COST`], come to more than the 128-row blocks' (short rows whose last
/// 192-row block is mostly empty and whose grid ends in a thin wave). At 2,16,1024,64 (six 192-row
/// blocks a head, the last of 64 rows; 1.45 waves) the gate against cuDNN measured the 192-row
/// tuning 0.83× [0.81, 0.84] (bf16 0.81×; evidence/gate/2026-11-29T03-45-30Z, 03-47-13Z) and
/// 128-row blocks 0.99-1.01× in four runs (03-49-53Z, 03-56-10Z, 03-56-36Z, 03-57-01Z); causal
/// 1.05× before, 1.14× [1.13, 1.16] with CLUSTER=1 (1.06-1.09× in clusters of two). Where the
/// rows fill their blocks the 192-row blocks stay: 2,16,2048,64 and 4,16,1024,64 (0.94-0.96× against
/// cuDNN either way).
fn hopper_d64_takes_128_rows(shape: &Shape) -> bool {
    let rows_in_waves = |rows: usize| grid_blocks(shape, rows).div_ceil(H100_SMS) * rows;
    let (cost, of) = HOPPER_D64_WIDE_ROW_COST;
    shape.head_dim == 64 && rows_in_waves(128) * of < rows_in_waves(192) * cost
}

/// Whether hopper's two Q tiles at D=128 take 160-key tiles: where a row sees at least
/// [`HOPPER_160_KEY_TILES_MIN_KEYS`] keys on average under the mask.
fn hopper_takes_160_key_tiles(shape: &Shape, params: &Params) -> bool {
    if shape.head_dim != 128 {
        return false;
    }
    let keys_per_row = params.visible_pairs(shape.seq_q, shape.seq_kv) / shape.seq_q.max(1) as u64;
    keys_per_row >= HOPPER_160_KEY_TILES_MIN_KEYS as u64
}

/// The shared memory a resident hopper block of `cfg` takes of an H100 SM: the tiles, the
/// barriers and the driver's reserve per block.
fn hopper_shared_on_sm(cfg: &Config, head_dim: u32) -> u32 {
    hopper_dynamic_shared(cfg, head_dim)
        + hopper_static_shared(cfg)
        + H100_SHARED_RESERVED_PER_BLOCK
}

/// hopper's dynamic shared memory: 1 KiB of slack to align the tiles to the 1024-byte swizzle atom,
/// the Q tile (Q_STAGES of them), then STAGES × (K tile + V tile). Every tile and every 64-column
/// panel of one is a whole number of 1024-byte swizzle atoms (8 rows of 128 bytes; BLOCK_M and
/// BLOCK_N are multiples of 8: a 176-key panel is 22 atoms), so no padding. hopper's constraints
/// add the kernel's static shared memory ([`hopper_static_shared`]) against sm_90's 232448-byte
/// limit. Public for the micro-benchmark of hopper's pipeline (attn-measure's `micro`), which has
/// the same layout. Reads `BLOCK_M`, `BLOCK_N`, `STAGES` and `Q_STAGES` of `cfg`.
pub fn hopper_dynamic_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n, stages) = (
        knob(cfg, "BLOCK_M"),
        knob(cfg, "BLOCK_N"),
        knob(cfg, "STAGES"),
    );
    1024 + q_stages(cfg) * m * head_dim * elem_bytes() + stages * 2 * n * head_dim * elem_bytes()
}

/// hopper's Q tiles: `Q_STAGES`, 1 where a config has none (the micro-benchmark's).
fn q_stages(cfg: &Config) -> u32 {
    knob(cfg, "Q_STAGES").max(1)
}

/// hopper's static shared memory, its `Barriers` (hopper_pipeline.cuh): Q_STAGES q_full and STAGES
/// × (k_full, v_full, k_empty, v_empty), 8 bytes each, and with SCHEDULE=1 per Q tile a q_empty and
/// the item's three words (four with STREAM_K=1; 24 or 40 bytes with the struct's 8-byte alignment, 24 or 48 with four), with two Q tiles
/// (Q_STAGES=2) without CHAIN=1 (the copy warp's) per Q tile an o_full barrier and an o_whole word, with CLUSTER=2 also
/// the ticket's two barriers and word (20 bytes more, before the rounding). Public for the
/// micro-benchmark, whose kernel declares the same barriers (no SCHEDULE knob there: none of the
/// persistent ones).
pub fn hopper_static_shared(cfg: &Config) -> u32 {
    let q = q_stages(cfg);
    let ticket = if knob(cfg, "CLUSTER") == 2 { 20 } else { 0 };
    let persistent = if knob(cfg, "SCHEDULE") == 1 {
        // Per Q tile its q_empty and the item's words (a fourth with STREAM_K=1: its key segment).
        let item_words = 3 + knob(cfg, "STREAM_K");
        let copy_warp = if q == 2 && knob(cfg, "CHAIN") != 1 {
            8 + 4
        } else {
            0
        };
        ((8 + copy_warp + 4 * item_words) * q + ticket).next_multiple_of(8)
    } else {
        0
    };
    8 * (q + 4 * knob(cfg, "STAGES")) + persistent
}

/// The workspace each block of hopper's persistent loop takes with STREAM_K=1 (kernels/hopper.cu,
/// "the stream-K tail"): a flag word per consumer warp and one partial result (per consumer thread
/// O's D/2 accumulators, two row maxima and two sums, f32), plus 256 bytes for the partials'
/// alignment; none otherwise.
fn hopper_stream_k_workspace(cfg: &Config, head_dim: u32) -> u32 {
    if knob(cfg, "STREAM_K") != 1 {
        return 0;
    }
    let warps = knob(cfg, "NUM_WARPS");
    4 * (warps + 32 * warps * (head_dim / 2 + 4)) + 256
}

/// The knobs of both hybrid kernels (`kernels/softmax_pv.cu`, `kernels/qk_softmax.cu`).
static HYBRID_KNOBS: [Knob; 3] = [
    Knob {
        name: "BLOCK_M",
        domain: &[16, 32, 64, 128],
        doc: "query rows per block",
    },
    Knob {
        name: "BLOCK_N",
        domain: &[32, 64, 128],
        doc: "keys per tile",
    },
    Knob {
        name: "NUM_WARPS",
        domain: &[2, 4, 8],
        doc: "warps per block (each owns a fixed set of 16x16 WMMA tiles and BLOCK_M / NUM_WARPS rows)",
    },
];

/// The hybrids' defaults: 64 query rows, 64-key tiles, 4 warps.
fn hybrid_defaults(_head_dim: usize) -> Config {
    Config::from_pairs(&[("BLOCK_M", 64), ("BLOCK_N", 64), ("NUM_WARPS", 4)])
}

/// The WMMA tiles a hybrid kernel's warps split: the 16x16 tiles of O (`softmax_pv`, BLOCK_M x D)
/// or of S (`qk_softmax`, BLOCK_M x BLOCK_N); each warp takes the same number.
fn hybrid_constraints(cfg: &Config, tile_cols: u32) -> std::result::Result<(), String> {
    let (m, w) = (knob(cfg, "BLOCK_M"), knob(cfg, "NUM_WARPS"));
    let tiles = (m / 16) * (tile_cols / 16);
    if tiles % w != 0 {
        return Err(format!(
            "the {tiles} 16x16 tiles of a {m}x{tile_cols} block do not split evenly over NUM_WARPS={w}"
        ));
    }
    Ok(())
}

/// A hybrid kernel's launch: grid (row tiles, B·H), NUM_WARPS warps, `shared` bytes.
fn hybrid_geometry(cfg: &Config, shape: &Shape, shared: u32) -> Geometry {
    let (m, w) = (knob(cfg, "BLOCK_M"), knob(cfg, "NUM_WARPS"));
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
fn softmax_pv_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n) = (knob(cfg, "BLOCK_M"), knob(cfg, "BLOCK_N"));
    let tiles = n * (head_dim + 8) * 2 + m * (n + 8) * 2;
    let stage = m * (head_dim + 4) * 4;
    tiles.max(stage) + 8 * m
}

/// `qk_softmax`'s dynamic shared memory (its header states the formula).
fn qk_softmax_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n) = (knob(cfg, "BLOCK_M"), knob(cfg, "BLOCK_N"));
    (m + n) * (head_dim + 8) * 2 + m * (n + 4) * 4 + 8 * m
}

static REGISTRY: [Implementation; 7] = [
    Implementation {
        name: "naive",
        summary: "one warp per query row, online softmax in registers; any shape, any head dim",
        engine: Engine::Kernel { file: "naive.cu", source: include_str!("../../../kernels/naive.cu") },
        abi: Abi::Plain,
        knobs: &NAIVE_KNOBS,
        head_dims: None,
        arch: None,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: |_| Config::from_pairs(&[("ROWS_PER_BLOCK", 4)]),
        tuned: |_, _| Config::default(),
        constraints: |_, head_dim| {
            if head_dim > 256 {
                Err(format!("head dim {head_dim} > 256 would need more than 8 registers per lane"))
            } else {
                Ok(())
            }
        },
        geometry: |cfg, shape| {
            let rows = knob(cfg, "ROWS_PER_BLOCK");
            Geometry {
                grid: (row_tiles(shape.seq_q, rows), shape.heads as u32, shape.batch as u32),
                block: rows * 32,
                shared_bytes: 0,
                persistent: false,
                workspace_per_block: 0,
                heads_together: 1,
            }
        },
    },
    Implementation {
        name: "tiled",
        summary: "scalar FlashAttention: Q tile in shared f32, cp.async K/V tiles, online softmax, warp shuffles",
        engine: Engine::Kernel { file: "tiled.cu", source: include_str!("../../../kernels/tiled.cu") },
        abi: Abi::Plain,
        knobs: &TILED_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: |head_dim| {
            let block_m = if head_dim > 64 { 32 } else { 64 };
            Config::from_pairs(&[("BLOCK_M", block_m), ("BLOCK_N", 64), ("NUM_WARPS", 4), ("STAGES", 2)])
        },
        tuned: |_, _| Config::default(),
        constraints: |cfg, _| {
            let (m, w) = (knob(cfg, "BLOCK_M"), knob(cfg, "NUM_WARPS"));
            if m % w != 0 {
                return Err(format!("BLOCK_M={m} is not a multiple of NUM_WARPS={w}"));
            }
            if m / w > 16 {
                return Err(format!("BLOCK_M/NUM_WARPS = {} rows per warp; at most 16 fit in registers", m / w));
            }
            Ok(())
        },
        geometry: |cfg, shape| {
            let (m, n, w, stages) =
                (knob(cfg, "BLOCK_M"), knob(cfg, "BLOCK_N"), knob(cfg, "NUM_WARPS"), knob(cfg, "STAGES"));
            let d = shape.head_dim as u32;
            Geometry {
                grid: (row_tiles(shape.seq_q, m), shape.heads as u32, shape.batch as u32),
                block: w * 32,
                shared_bytes: m * d * 4 + stages * 2 * n * (d + 8) * elem_bytes(),
                persistent: false,
                workspace_per_block: 0,
                heads_together: 1,
            }
        },
    },
    Implementation {
        name: "mma",
        summary: "tensor cores: mma.sync m16n8k16 + ldmatrix from swizzled shared memory, P in registers, cp.async pipeline, split-KV warps for small grids",
        engine: Engine::Kernel { file: "mma.cu", source: include_str!("../../../kernels/mma.cu") },
        abi: Abi::Plain,
        knobs: &MMA_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: mma_defaults,
        tuned: mma_tuned,
        constraints: |cfg, head_dim| {
            let (m, n, w, wm, split) = (
                knob(cfg, "BLOCK_M"),
                knob(cfg, "BLOCK_N"),
                knob(cfg, "NUM_WARPS"),
                knob(cfg, "WARP_M"),
                knob(cfg, "KV_SPLIT"),
            );
            if w % split != 0 {
                return Err(format!("KV_SPLIT={split} does not divide NUM_WARPS={w}"));
            }
            // Every thread copies the same number of 16-byte chunks of a K/V tile (kernels/mma.cu).
            let chunks = (head_dim / 8) as u32;
            if split * n * chunks % (w * 32) != 0 {
                return Err(format!(
                    "a tile of KV_SPLIT x BLOCK_N = {} rows does not split evenly over {} threads at head dim {head_dim}",
                    split * n,
                    w * 32
                ));
            }
            if m != wm * w / split {
                return Err(format!(
                    "BLOCK_M={m} must be WARP_M x NUM_WARPS / KV_SPLIT = {} (each warp owns WARP_M rows)",
                    wm * w / split
                ));
            }
            Ok(())
        },
        geometry: |cfg, shape| {
            let (m, n, w, stages, split) = (
                knob(cfg, "BLOCK_M"),
                knob(cfg, "BLOCK_N"),
                knob(cfg, "NUM_WARPS"),
                knob(cfg, "STAGES"),
                knob(cfg, "KV_SPLIT"),
            );
            let d = shape.head_dim as u32;
            // Q tile, then the K/V ring, whose space the KV_SPLIT merge reuses (kernels/mma.cu).
            let ring = 2 * stages * split * n * d * elem_bytes();
            let merge = split.saturating_sub(1) * m * (4 * d + 32);
            Geometry {
                grid: (row_tiles(shape.seq_q, m), shape.heads as u32, shape.batch as u32),
                block: w * 32,
                shared_bytes: m * d * elem_bytes() + ring.max(merge),
                persistent: false,
                workspace_per_block: 0,
                heads_together: 1,
            }
        },
    },
    Implementation {
        name: "hopper",
        summary: "Hopper (sm_90a): warp-specialised: TMA producer warp + mbarrier K/V ring, 2-3 wgmma consumer warpgroups (Q·Kᵀ and P·V, P from registers), FA3 intra-warpgroup overlap + ping-pong",
        engine: Engine::Kernel { file: "hopper.cu", source: include_str!("../../../kernels/hopper.cu") },
        abi: Abi::TensorMaps,
        knobs: &HOPPER_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: Some("compute_90a"),
        variants: Variants::ALL,
        introduced: &[
            ("SCHEDULE", 0),
            ("PV_N", 64),
            ("Q_REGS", 0),
            ("LAZY_RESCALE", 0),
            ("Q_STAGES", 1),
            ("CLUSTER", 1),
            ("Q_RELEASE", 0),
            ("CLUSTER_HEADS", 0),
            ("STREAM_K", 0),
            ("CHAIN", 0),
        ],
        yielding: &[
            ("Q_REGS", 0),
            ("Q_STAGES", 1),
            ("CLUSTER", 1),
            ("Q_RELEASE", 0),
            ("CLUSTER_HEADS", 0),
            ("STREAM_K", 0),
            ("CHAIN", 0),
        ],
        defaults: hopper_defaults,
        tuned: hopper_tuned,
        constraints: |cfg, head_dim| {
            let (m, w) = (knob(cfg, "BLOCK_M"), knob(cfg, "NUM_WARPS"));
            if w == 12 && head_dim != 64 {
                return Err(format!(
                    "NUM_WARPS=12 needs head dim 64 (3 consumer warpgroups get 160 registers per thread; D={head_dim} needs more)"
                ));
            }
            if m != 16 * w {
                return Err(format!("BLOCK_M={m} must be 16 x NUM_WARPS = {} (64 rows per consumer warpgroup)", 16 * w));
            }
            if knob(cfg, "PINGPONG") == 1 && (w < 8 || knob(cfg, "OVERLAP") != 1) {
                return Err("PINGPONG=1 needs NUM_WARPS >= 8 and OVERLAP=1 (consumer warpgroups taking turns); add PINGPONG=0".into());
            }
            if knob(cfg, "PV_N") == 128 && head_dim != 128 {
                return Err(format!("PV_N=128 needs head dim 128 (O's two 64-column panels); D={head_dim} has one"));
            }
            let n = knob(cfg, "BLOCK_N");
            if knob(cfg, "Q_REGS") == 1 && (n > 128 || w == 12) {
                return Err(format!("Q_REGS=1 needs BLOCK_N 64 or 128 and NUM_WARPS <= 8 (Q's fragments beside the S, P and O of BLOCK_N={n} with {w} consumer warps spill); add Q_REGS=0"));
            }
            // ptxas 13.0 hands Q's fragment registers to P inside the unoverlapped key loop (found by
            // kernels/tools/sass_blocks.py --q-regs-live; every overlapped variant keeps them).
            if knob(cfg, "Q_REGS") == 1 && knob(cfg, "OVERLAP") == 0 {
                return Err("Q_REGS=1 needs OVERLAP=1 (in the unoverlapped loop ptxas 13.0 reuses Q's registers for P: wrong results); add Q_REGS=0".into());
            }
            if knob(cfg, "Q_STAGES") == 2 && (knob(cfg, "SCHEDULE") != 1 || knob(cfg, "Q_REGS") != 0) {
                return Err("Q_STAGES=2 needs SCHEDULE=1 and Q_REGS=0 (a second Q tile serves the persistent loop with Q in shared memory); add SCHEDULE=1,Q_REGS=0".into());
            }
            if knob(cfg, "Q_RELEASE") == 1
                && (knob(cfg, "SCHEDULE") != 1 || knob(cfg, "Q_REGS") != 0 || q_stages(cfg) != 1)
            {
                return Err("Q_RELEASE=1 needs SCHEDULE=1, Q_REGS=0 and Q_STAGES=1 (it releases the persistent loop's one Q tile early); add SCHEDULE=1,Q_REGS=0".into());
            }
            if knob(cfg, "CLUSTER") == 2
                && knob(cfg, "SCHEDULE") == 1
                && q_stages(cfg) != 2
                && knob(cfg, "Q_RELEASE") != 1
            {
                return Err("CLUSTER=2 in the persistent loop needs Q_STAGES=2 or Q_RELEASE=1 (with one Q tile released after the epilogue its producer's 24 registers spill); add Q_STAGES=2,Q_REGS=0, Q_RELEASE=1,Q_REGS=0 or SCHEDULE=0".into());
            }
            if knob(cfg, "CLUSTER_HEADS") == 1
                && (knob(cfg, "CLUSTER") != 2 || knob(cfg, "SCHEDULE") != 1)
            {
                return Err("CLUSTER_HEADS=1 needs CLUSTER=2 and SCHEDULE=1 (a persistent cluster's blocks take two heads' row block); add CLUSTER=2,SCHEDULE=1 and what those need (Q_STAGES=2,Q_REGS=0 or Q_RELEASE=1,Q_REGS=0)".into());
            }
            if knob(cfg, "STREAM_K") == 1 && (knob(cfg, "SCHEDULE") != 1 || q_stages(cfg) != 2) {
                return Err("STREAM_K=1 needs SCHEDULE=1 and Q_STAGES=2 (the persistent loop shares its last items' key tiles out; with one Q tile its producer's 24 registers spill); add SCHEDULE=1,Q_STAGES=2,Q_REGS=0 (at D=128 STAGES=2)".into());
            }
            if knob(cfg, "CHAIN") == 1
                && (knob(cfg, "SCHEDULE") != 1 || q_stages(cfg) != 2 || knob(cfg, "OVERLAP") != 1)
            {
                return Err("CHAIN=1 needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1 (an item's last turn begins the next item, whose Q is in the other Q tile); add SCHEDULE=1,Q_STAGES=2,Q_REGS=0 (at D=128 STAGES=2)".into());
            }
            // Found by kernels/tools/hopper_check.py: at D=128 the chained turn of a cut item keeps
            // its max and sums across the next item's softmax (the merge reads them), and ptxas
            // 13.0 spills 4-8 bytes in a fifth of those configs.
            if knob(cfg, "CHAIN") == 1 && knob(cfg, "STREAM_K") == 1 && head_dim == 128 {
                return Err("CHAIN=1 with STREAM_K=1 spills registers at head dim 128 (a cut item's chained turn keeps its max and sums across the next item's softmax); use one of them".into());
            }
            if n > 128 && w == 12 {
                return Err(format!("BLOCK_N={n} needs NUM_WARPS <= 8: with 3 consumer warpgroups (160 registers per thread) its {} S and {} P registers per thread spill; use NUM_WARPS=8", n / 2, n / 4));
            }
            let shared = hopper_dynamic_shared(cfg, head_dim as u32) + hopper_static_shared(cfg);
            if shared > Limits::H100.max_shared_per_block {
                return Err(format!(
                    "BLOCK_N={n} x STAGES={} K/V ring and {} Q tile(s) at head dim {head_dim}: {shared} bytes of shared memory (mbarriers included) > sm_90's {}; use fewer STAGES (BLOCK_N 160 or 176, or Q_STAGES=2, at D=128: STAGES=2; BLOCK_N=176 with Q_STAGES=2 does not fit)",
                    knob(cfg, "STAGES"),
                    q_stages(cfg),
                    Limits::H100.max_shared_per_block
                ));
            }
            Ok(())
        },
        geometry: |cfg, shape| {
            let (m, w) = (knob(cfg, "BLOCK_M"), knob(cfg, "NUM_WARPS"));
            // CLUSTER=2: an even count of row blocks per head (a cluster's two blocks, or a
            // persistent pair item; one past the rows stores nothing); with CLUSTER_HEADS=1 the
            // pairs are of heads.
            let heads_together = knob(cfg, "CLUSTER_HEADS") == 1;
            let pair_rows = if heads_together { 1 } else { knob(cfg, "CLUSTER").max(1) };
            let rows = row_tiles(shape.seq_q, m).next_multiple_of(pair_rows);
            Geometry {
                grid: (rows, shape.heads as u32, shape.batch as u32),
                heads_together: if heads_together { 2 } else { 1 },
                // The consumer warps, then one producer warpgroup.
                block: (w + 4) * 32,
                shared_bytes: hopper_dynamic_shared(cfg, shape.head_dim as u32),
                // SCHEDULE=1: the row blocks of every (batch, head) are the work items.
                persistent: knob(cfg, "SCHEDULE") == 1,
                workspace_per_block: hopper_stream_k_workspace(cfg, shape.head_dim as u32),
            }
        },
    },
    Implementation {
        name: "cublas",
        summary: "math path: cuBLAS GEMM S=Q·Kᵀ (f32), fused scale+mask+softmax kernel, cuBLAS GEMM O=P·V",
        engine: Engine::Library {
            plan: LibraryPlan::Math,
            file: "softmax.cu",
            source: include_str!("../../../kernels/softmax.cu"),
            entry: "softmax_rows",
        },
        abi: Abi::Plain,
        knobs: &[],
        head_dims: None,
        arch: None,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: |_| Config::default(),
        tuned: |_, _| Config::default(),
        constraints: |_, _| Ok(()),
        geometry: |_, shape| Geometry {
            grid: (shape.seq_q as u32, (shape.batch * shape.heads) as u32, 1),
            block: 256,
            shared_bytes: 0,
            persistent: false,
            workspace_per_block: 0,
            heads_together: 1,
        },
    },
    Implementation {
        name: "hybrid-qk",
        summary: "library + custom: cuBLAS GEMM S=Q·Kᵀ (f32), our fused scale+mask+softmax·V kernel (exact row statistics, WMMA P·V) writing O",
        engine: Engine::Library {
            plan: LibraryPlan::HybridQk,
            file: "softmax_pv.cu",
            source: include_str!("../../../kernels/softmax_pv.cu"),
            entry: "softmax_pv",
        },
        abi: Abi::Plain,
        knobs: &HYBRID_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: hybrid_defaults,
        tuned: |_, _| Config::default(),
        constraints: |cfg, head_dim| hybrid_constraints(cfg, head_dim as u32),
        geometry: |cfg, shape| {
            hybrid_geometry(cfg, shape, softmax_pv_shared(cfg, shape.head_dim as u32))
        },
    },
    Implementation {
        name: "hybrid-pv",
        summary: "custom + library: our fused Q·Kᵀ+scale+mask+softmax kernel (WMMA, two passes) writing P, cuBLAS GEMM O=P·V",
        engine: Engine::Library {
            plan: LibraryPlan::HybridPv,
            file: "qk_softmax.cu",
            source: include_str!("../../../kernels/qk_softmax.cu"),
            entry: "qk_softmax",
        },
        abi: Abi::Plain,
        knobs: &HYBRID_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: hybrid_defaults,
        tuned: |_, _| Config::default(),
        constraints: |cfg, _| hybrid_constraints(cfg, knob(cfg, "BLOCK_N")),
        geometry: |cfg, shape| {
            hybrid_geometry(cfg, shape, qk_softmax_shared(cfg, shape.head_dim as u32))
        },
    },
];

/// Every registered implementation, in the order `cargo xtask kernels` lists them.
pub fn registry() -> &'static [Implementation] {
    &REGISTRY
}

/// The implementation called `name`.
pub fn find(name: &str) -> Result<&'static Implementation> {
    registry()
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| KernelError::UnknownImpl {
            name: name.to_string(),
            known: registry()
                .iter()
                .map(|i| i.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The implementation to use: `--impl` if given, else the `IMPL` environment variable, else the
/// best registered one.
pub fn select(cli: Option<&str>) -> Result<&'static Implementation> {
    match cli
        .map(str::to_string)
        .or_else(|| std::env::var("IMPL").ok().filter(|s| !s.is_empty()))
    {
        Some(name) => find(&name),
        None => Ok(best()),
    }
}

/// The fastest correct implementation we have: what `cargo xtask gate` runs by default.
pub fn best() -> &'static Implementation {
    find("mma").expect("mma is registered")
}

impl Implementation {
    /// The default config for a head dim.
    pub fn default_config(&self, head_dim: usize) -> Config {
        (self.defaults)(head_dim)
    }

    /// The knobs tuned for `shape` under `params`' mask (empty when the defaults are best).
    pub fn tuned_for(&self, shape: &Shape, params: &Params) -> Config {
        (self.tuned)(shape, params)
    }

    /// The knobs for `shape` under `params`' mask with the user's `overrides` on top of its
    /// tuning. Where the overrides rule out part of the tuning (SCHEDULE=0 where the tuning takes
    /// the persistent loop's two Q tiles) the tuned values of the [`Implementation::yielding`]
    /// knobs give way, so that [`Implementation::resolve`] yields them as it yields defaults; where
    /// the rest of the tuning still rules them out (Q_REGS=1 beside a tuned 160-key tile), the
    /// whole tuning does.
    pub fn tuned_under(&self, shape: &Shape, params: &Params, overrides: &Config) -> Config {
        let tuned = self.tuned_for(shape, params);
        let valid = |cfg: &Config| self.constrained(cfg, shape.head_dim).is_ok();
        let merged = tuned.merged(overrides);
        if valid(&merged) {
            return merged;
        }
        let yields = |name: &String| self.yielding.iter().any(|(knob, _)| knob == name);
        let kept = Config(
            tuned
                .0
                .into_iter()
                .filter(|(name, _)| !yields(name))
                .collect(),
        )
        .merged(overrides);
        if valid(&kept) {
            return kept;
        }
        // The tuning's tile itself rules the user's knobs out (Q_REGS=1 beside a 160-key tile):
        // the user's knobs over the defaults, whose error, if any, is the user's own.
        overrides.clone()
    }

    /// Checks that this implementation handles `head_dim`.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<()> {
        match self.head_dims {
            Some(dims) if !dims.contains(&head_dim) => Err(KernelError::Unsupported {
                implementation: self.name.into(),
                what: format!("head dim {head_dim} (supported: {dims:?})"),
            }),
            _ if head_dim == 0 => Err(KernelError::Shape("head dim must be at least 1".into())),
            _ => Ok(()),
        }
    }

    /// The defaults with `overrides` applied and checked against the constraints, the
    /// [`Implementation::yielding`] knobs the overrides leave unset giving way where they break one.
    fn constrained(
        &self,
        overrides: &Config,
        head_dim: usize,
    ) -> std::result::Result<Config, String> {
        let mut cfg = self.default_config(head_dim).merged(overrides);
        if (self.constraints)(&cfg, head_dim).is_err() {
            let yielded: Vec<(&str, i64)> = self
                .yielding
                .iter()
                .filter(|(name, _)| overrides.get(name).is_none())
                .copied()
                .collect();
            // With nothing to yield the reason stands as it is; else the reason that remains.
            cfg = cfg.merged(&Config::from_pairs(&yielded));
        }
        (self.constraints)(&cfg, head_dim).map(|()| cfg)
    }

    /// The defaults with `overrides` applied, validated against the knobs' domains, the
    /// implementation's constraints and the device limits; the reason in the error otherwise.
    pub fn resolve(&self, overrides: &Config, head_dim: usize, limits: &Limits) -> Result<Config> {
        self.check_head_dim(head_dim)?;
        let invalid = |reason: String| KernelError::InvalidConfig {
            implementation: self.name.into(),
            reason,
        };
        for (name, value) in &overrides.0 {
            let knob = self.knobs.iter().find(|k| k.name == name).ok_or_else(|| {
                let known: Vec<&str> = self.knobs.iter().map(|k| k.name).collect();
                invalid(format!(
                    "unknown knob {name} (knobs: {})",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ))
            })?;
            if !knob.domain.contains(value) {
                return Err(invalid(format!(
                    "{name}={value} is outside its domain {:?}",
                    knob.domain
                )));
            }
        }
        let cfg = self.constrained(overrides, head_dim).map_err(invalid)?;
        let probe = Shape::single(head_dim);
        let geometry = (self.geometry)(&cfg, &probe);
        if geometry.block > limits.max_threads_per_block {
            return Err(invalid(format!(
                "{} threads per block > the device's {}",
                geometry.block, limits.max_threads_per_block
            )));
        }
        if geometry.shared_bytes > limits.max_shared_per_block {
            return Err(invalid(format!(
                "{} bytes of shared memory per block > the device's {}",
                geometry.shared_bytes, limits.max_shared_per_block
            )));
        }
        Ok(cfg)
    }

    /// The launch geometry for a resolved config and a shape.
    pub fn geometry(&self, cfg: &Config, shape: &Shape) -> Result<Geometry> {
        let g = (self.geometry)(cfg, shape);
        if g.grid.1 > 65_535 || g.grid.2 > 65_535 {
            return Err(KernelError::Shape(format!(
                "grid {:?} exceeds CUDA's 65535 limit on y/z (heads, batch) for {shape:?}",
                g.grid
            )));
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-shape rules: the values a shape runs some knobs with, without a mask (tuned or the
    /// defaults; empty: no tuning at all), and that the result is a valid config for the H100.
    fn check(implementation: &str, shape: (usize, usize, usize, usize), expected: &[(&str, i64)]) {
        check_masked(implementation, shape, false, expected);
    }

    /// `implementation`'s tuned knobs for a square `(b, h, s, d)` problem, causal or not.
    fn tuned_at(
        implementation: &str,
        (b, h, s, d): (usize, usize, usize, usize),
        causal: bool,
    ) -> Config {
        find(implementation)
            .unwrap()
            .tuned_for(&Shape::new(b, h, s, s, d).unwrap(), &Params::new(d, causal))
    }

    /// [`check`] with or without the causal mask.
    fn check_masked(
        implementation: &str,
        (b, h, s, d): (usize, usize, usize, usize),
        causal: bool,
        expected: &[(&str, i64)],
    ) {
        let imp = find(implementation).unwrap();
        let tuned = tuned_at(implementation, (b, h, s, d), causal);
        // A knob's value as the shape runs it: tuned, else the default.
        let effective = imp.default_config(d).merged(&tuned);
        for (name, value) in expected {
            assert_eq!(
                effective.get(name),
                Some(*value),
                "{implementation} {b},{h},{s},{d} causal={causal}: {name} in {tuned:?}"
            );
        }
        if expected.is_empty() {
            assert_eq!(tuned, Config::default(), "{implementation} {b},{h},{s},{d}");
        }
        imp.resolve(&tuned, d, &Limits::H100)
            .unwrap_or_else(|e| panic!("{implementation} {b},{h},{s},{d}: {e}"));
    }

    #[test]
    fn variants_are_declared_and_the_rest_refused_by_name() {
        let gqa: Shape = "2,32/8,512,128".parse().unwrap();
        let plain = Params::new(128, true);
        let window = plain.with_window(attn_oracle::Window {
            left: Some(64),
            right: None,
        });
        for name in ["naive", "tiled", "mma", "hopper"] {
            let v = find(name).unwrap().variants;
            assert_eq!(v.missing(&gqa, &window, false), None, "{name}");
        }
        let cublas = find("cublas").unwrap().variants;
        assert_eq!(cublas.missing(&Shape::single(128), &plain, false), None);
        assert_eq!(
            cublas.missing(&gqa, &plain, false),
            Some("grouped-query / multi-query heads")
        );
        assert_eq!(
            cublas.missing(&Shape::single(128), &window, false),
            Some("sliding windows")
        );
        assert!(cublas
            .missing(&Shape::single(128), &plain, true)
            .unwrap()
            .contains("varlen"));
        assert_eq!(Variants::ALL.missing(&gqa, &window, true), None);
        assert_eq!(Variants::DENSE.describe(), "gqa, window");
        assert_eq!(Variants::NONE.describe(), "none");
    }

    #[test]
    fn small_grids_get_their_own_knobs_and_large_ones_the_defaults() {
        // mma: 16-row blocks with 4-way split keys while 2 blocks/SM still hold the grid, then
        // 32-row blocks with a 2-way split; D=128 and full grids keep the defaults.
        check("mma", (1, 8, 512, 64), &[("BLOCK_M", 16), ("KV_SPLIT", 4)]);
        check("mma", (2, 8, 512, 64), &[("BLOCK_M", 32), ("KV_SPLIT", 2)]);
        check("mma", (2, 16, 8192, 64), &[]);
        check("mma", (1, 8, 512, 128), &[]);
        // hopper: one 64-row warpgroup under one wave of default blocks, at either head dim.
        check(
            "hopper",
            (1, 8, 512, 64),
            &[("BLOCK_M", 64), ("NUM_WARPS", 4), ("PINGPONG", 0)],
        );
        check(
            "hopper",
            (2, 8, 512, 64),
            &[("BLOCK_M", 64), ("NUM_WARPS", 4)],
        );
        check(
            "hopper",
            (1, 8, 1024, 128),
            &[("BLOCK_M", 64), ("NUM_WARPS", 4)],
        );
        // At D=128 the 64-row grid of (2,16,512,128) needs two waves: the defaults' one wave.
        for causal in [false, true] {
            let tuned = tuned_at("hopper", (2, 16, 512, 128), causal);
            assert_eq!(tuned.get("BLOCK_M"), None, "{tuned:?}");
        }
        // Full grids: two Q tiles in the persistent loop (D=128: in a 2-stage ring) at D=64, and
        // at D=128 at every length, without a mask (the stream-K tail cut) and under a causal one;
        // conditional rescaling from 4096 keys.
        let two_q = [
            ("SCHEDULE", 1),
            ("Q_REGS", 0),
            ("Q_STAGES", 2),
            ("CLUSTER", 2),
        ];
        let two_q_128 = [two_q.as_slice(), &[("STAGES", 2)]].concat();
        let lazy = [("LAZY_RESCALE", 1)];
        // The stream-K tail: the static order of an unmasked problem only, from 2048 keys at D=64
        // and 4096 at D=128.
        let cut = |causal: bool| [("STREAM_K", i64::from(!causal))];
        let whole = [("STREAM_K", 0)];
        for causal in [false, true] {
            for (b, h, s) in [(2, 32, 1024), (2, 16, 2048), (2, 16, 8192), (2, 16, 16384)] {
                let lazy: &[_] = if s >= 4096 {
                    &lazy
                } else {
                    &[("LAZY_RESCALE", 0)]
                };
                let tail: &[_] = if s >= 2048 { &cut(causal) } else { &whole };
                check_masked(
                    "hopper",
                    (b, h, s, 64),
                    causal,
                    &[two_q.as_slice(), lazy, tail].concat(),
                );
            }
        }
        // From 2048 keys a row on average (causal: from 4096 rows) with 160-key tiles.
        let keys = |n| [("BLOCK_N", n)];
        for (s, causal, knobs) in [
            (
                1024,
                false,
                [two_q_128.as_slice(), &keys(128), &whole].concat(),
            ),
            (
                2048,
                false,
                [two_q_128.as_slice(), &keys(160), &whole].concat(),
            ),
            (
                4096,
                false,
                [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
            ),
            (
                8192,
                false,
                [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
            ),
            (
                16384,
                false,
                [two_q_128.as_slice(), &keys(160), &lazy, &cut(false)].concat(),
            ),
            (
                2048,
                true,
                [two_q_128.as_slice(), &keys(128), &cut(true)].concat(),
            ),
            (
                4096,
                true,
                [two_q_128.as_slice(), &keys(160), &lazy].concat(),
            ),
            (
                8192,
                true,
                [two_q_128.as_slice(), &keys(160), &lazy].concat(),
            ),
            (
                16384,
                true,
                [two_q_128.as_slice(), &keys(160), &lazy].concat(),
            ),
        ] {
            check_masked("hopper", (2, 16, s, 128), causal, &knobs);
        }
        // A causal window takes two Q tiles at any length, with 160-key tiles from 2048 keys a
        // row; a window both ways takes them only from there, else keeps the grid.
        let long = Shape::new(2, 16, 16384, 16384, 128).unwrap();
        let hopper = find("hopper").unwrap();
        let bounded = |(left, causal), right| {
            Params::new(128, causal).with_window(attn_oracle::Window {
                left: Some(left),
                right,
            })
        };
        let knobs_under = |left, right| {
            let cfg = hopper.tuned_for(&long, &bounded(left, right));
            (cfg.get("Q_STAGES"), cfg.get("BLOCK_N"))
        };
        assert_eq!(knobs_under((4096, true), None), (Some(2), Some(160)));
        assert_eq!(knobs_under((1024, true), None), (Some(2), None));
        assert_eq!(knobs_under((2048, false), Some(2048)), (Some(2), Some(160)));
        let narrow = hopper.tuned_for(&long, &bounded((512, false), Some(512)));
        assert_eq!(narrow, Config::from_pairs(&lazy), "{narrow:?}");
        check_masked(
            "hopper",
            (1, 8, 512, 64),
            true,
            &[("BLOCK_M", 64), ("NUM_WARPS", 4)],
        );
        let small = find("hopper").unwrap().tuned_for(
            &Shape::new(1, 8, 512, 512, 64).unwrap(),
            &Params::new(64, true),
        );
        assert_eq!(small.get("SCHEDULE"), None, "{small:?}");
        check_masked("mma", (2, 16, 8192, 64), true, &[]);
    }

    #[test]
    fn mma_rejects_tiles_that_do_not_split_over_the_threads() {
        let mma = find("mma").unwrap();
        // 8 warps, BLOCK_N 48 at D=64: 48 rows × 8 chunks = 384 chunks over 256 threads.
        let overrides = Config::from_pairs(&[
            ("NUM_WARPS", 8),
            ("WARP_M", 16),
            ("BLOCK_M", 128),
            ("BLOCK_N", 48),
        ]);
        let err = mma
            .resolve(&overrides, 64, &Limits::H100)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("does not split evenly over 256 threads"),
            "{err}"
        );
        // The same tile with 4 warps (128 threads) is fine.
        let ok = Config::from_pairs(&[
            ("NUM_WARPS", 4),
            ("WARP_M", 32),
            ("BLOCK_M", 128),
            ("BLOCK_N", 48),
        ]);
        mma.resolve(&ok, 64, &Limits::H100).unwrap();
    }

    /// hopper's config for `config` (`K=V,...`) at `head_dim`, or the reason it is invalid.
    fn resolve(config: &str, head_dim: usize) -> std::result::Result<Config, String> {
        find("hopper")
            .unwrap()
            .resolve(&config.parse().unwrap(), head_dim, &Limits::H100)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn q_in_registers_yields_where_other_knobs_rule_it_out_unless_asked_for() {
        let hopper = find("hopper").unwrap();
        let q_regs =
            |config: &str, head_dim: usize| resolve(config, head_dim).unwrap().get("Q_REGS");
        assert_eq!(q_regs("", 128), Some(1));
        assert_eq!(q_regs("", 64), Some(0));
        // The persistent schedule keeps Q in registers; 176-key tiles and the unoverlapped loop
        // take Q from shared memory.
        assert_eq!(q_regs("SCHEDULE=1", 128), Some(1));
        assert_eq!(q_regs("BLOCK_N=176,STAGES=2", 128), Some(0));
        assert_eq!(q_regs("OVERLAP=0,PINGPONG=0", 128), Some(0));
        let small = hopper.tuned_for(
            &Shape::new(1, 8, 512, 512, 128).unwrap(),
            &Params::new(128, false),
        );
        let small = hopper.resolve(&small, 128, &Limits::H100).unwrap();
        assert_eq!(
            (small.get("NUM_WARPS"), small.get("Q_REGS")),
            (Some(4), Some(0))
        );
        // Named, it does not yield: the reason says what to change.
        let err = resolve("Q_REGS=1,OVERLAP=0,PINGPONG=0", 128).unwrap_err();
        assert!(
            err.contains("OVERLAP=1") && err.contains("Q_REGS=0"),
            "{err}"
        );
        // Causal tunings keep what was measured: the persistent loop, Q in shared memory.
        let causal = hopper.tuned_for(
            &Shape::new(2, 16, 2048, 2048, 128).unwrap(),
            &Params::new(128, true),
        );
        assert_eq!(
            (causal.get("SCHEDULE"), causal.get("Q_REGS")),
            (Some(1), Some(0))
        );
        // A reason that yielding does not remove is the one reported.
        let err = resolve("BLOCK_N=176", 128).unwrap_err();
        assert!(err.contains("shared memory"), "{err}");
    }

    #[test]
    fn hopper_clusters_over_heads_pair_heads_not_row_blocks() {
        let hopper = find("hopper").unwrap();
        let shape = Shape {
            kv_heads: 4,
            ..Shape::new(2, 8, 300, 300, 128).unwrap()
        };
        let geometry = |config: &str| {
            let cfg = resolve(config, 128).unwrap();
            hopper.geometry(&cfg, &shape).unwrap()
        };
        let two_q = "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
        // Row pairs: 3 row blocks of 128 rounded up to 4; head pairs: 3, two heads together.
        let rows = geometry(two_q);
        assert_eq!((rows.grid, rows.heads_together), ((4, 8, 2), 1));
        let heads = geometry(&format!("{two_q},CLUSTER_HEADS=1"));
        assert_eq!((heads.grid, heads.heads_together), ((3, 8, 2), 2));
        assert!(heads.persistent);
        // Only in the persistent loop's clusters.
        for config in ["CLUSTER_HEADS=1,CLUSTER=2", "CLUSTER_HEADS=1,SCHEDULE=1"] {
            let err = resolve(config, 128).unwrap_err();
            assert!(
                err.contains("CLUSTER_HEADS=1 needs CLUSTER=2 and SCHEDULE=1"),
                "{err}"
            );
        }
    }

    #[test]
    fn hopper_stream_k_takes_a_workspace_and_two_q_tiles() {
        let hopper = find("hopper").unwrap();
        let shape = Shape::new(2, 8, 300, 300, 128).unwrap();
        let workspace = |config: &str, head_dim: usize| {
            let cfg = resolve(config, head_dim).unwrap();
            let shape = Shape { head_dim, ..shape };
            hopper.geometry(&cfg, &shape).unwrap().workspace_per_block
        };
        let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
        assert_eq!(workspace(two_q, 128), 0);
        // Per block: a flag per consumer warp, a partial per consumer thread (D/2 accumulators,
        // two maxima, two sums), 256 bytes of alignment.
        assert_eq!(
            workspace(&format!("{two_q},STREAM_K=1"), 128),
            4 * (8 + 256 * 68) + 256
        );
        assert_eq!(
            workspace(&format!("{two_q},STREAM_K=1"), 64),
            4 * (12 + 384 * 36) + 256
        );
        for config in [
            "STREAM_K=1",
            "STREAM_K=1,SCHEDULE=1",
            "STREAM_K=1,SCHEDULE=1,Q_REGS=0",
        ] {
            let err = resolve(config, 128).unwrap_err();
            assert!(
                err.contains("STREAM_K=1 needs SCHEDULE=1 and Q_STAGES=2"),
                "{config}: {err}"
            );
        }
    }

    #[test]
    fn hopper_chains_items_only_with_two_q_tiles_and_overlap() {
        let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
        assert!(resolve(&format!("{two_q},CHAIN=1"), 128).is_ok());
        assert!(resolve(&format!("{two_q},CHAIN=1,STREAM_K=1,PINGPONG=0"), 64).is_ok());
        let err = resolve(&format!("{two_q},CHAIN=1,STREAM_K=1"), 128).unwrap_err();
        assert!(err.contains("CHAIN=1 with STREAM_K=1 spills"), "{err}");
        for config in [
            "CHAIN=1".to_string(),
            "CHAIN=1,SCHEDULE=1,Q_REGS=0".to_string(),
            format!("{two_q},CHAIN=1,OVERLAP=0,PINGPONG=0"),
        ] {
            let err = resolve(&config, 128).unwrap_err();
            assert!(
                err.contains("CHAIN=1 needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1"),
                "{config}: {err}"
            );
        }
    }

    #[test]
    fn hopper_tunes_head_pairs_where_the_query_heads_per_kv_head_are_even() {
        let hopper = find("hopper").unwrap();
        let causal = Params::new(128, true);
        let tuned = |heads: usize, kv_heads: usize, user: &str| {
            let shape = Shape {
                kv_heads,
                ..Shape::new(2, heads, 4096, 4096, 128).unwrap()
            };
            let merged = hopper.tuned_under(&shape, &causal, &user.parse().unwrap());
            let cfg = hopper.resolve(&merged, 128, &Limits::H100);
            let cfg = cfg.unwrap_or_else(|e| panic!("{heads}/{kv_heads} {user}: {e}"));
            (cfg.get("CLUSTER_HEADS"), cfg.get("CLUSTER"))
        };
        for (heads, kv_heads, pairs) in [(32, 8, 1), (32, 1, 1), (16, 16, 0), (24, 8, 0)] {
            assert_eq!(
                tuned(heads, kv_heads, ""),
                (Some(pairs), Some(2)),
                "{heads}/{kv_heads}"
            );
        }
        // A user's knobs that rule the pairs out (no clusters) take the rest of the tuning.
        assert_eq!(tuned(32, 8, "CLUSTER=1"), (Some(0), Some(1)));
    }

    #[test]
    fn hopper_takes_a_second_q_tile_only_in_the_persistent_loop_with_q_in_shared_memory() {
        // Q in registers yields to it; at D=128 its 32 KiB need the 2-stage ring.
        let two = resolve("SCHEDULE=1,Q_STAGES=2,STAGES=2", 128).unwrap();
        assert_eq!(two.get("Q_REGS"), Some(0));
        assert_eq!(
            hopper_dynamic_shared(&two, 128),
            1024 + 2 * 32_768 + 2 * 2 * 32_768
        );
        // q_full and q_empty per Q tile, the ring's four per stage, the item words per Q tile, the
        // copy warp's o_full and o_whole per Q tile.
        assert_eq!(hopper_static_shared(&two), 8 * (2 + 4 * 2) + 40 + 24);
        for (config, reason) in [
            ("Q_STAGES=2", "SCHEDULE=1"),
            ("SCHEDULE=1,Q_REGS=1,Q_STAGES=2,STAGES=2", "Q_REGS=0"),
            ("SCHEDULE=1,Q_STAGES=2", "shared memory"),
        ] {
            let err = resolve(config, 128).unwrap_err();
            assert!(err.contains(reason), "{config}: {err}");
        }
        // At D=64 the default ring fits beside two Q tiles.
        assert!(resolve("SCHEDULE=1,Q_STAGES=2", 64).is_ok());
    }

    #[test]
    fn a_users_knobs_that_rule_out_two_q_tiles_take_one_where_the_tuning_had_two() {
        let hopper = find("hopper").unwrap();
        let shape = Shape::new(4, 16, 2048, 2048, 128).unwrap();
        let params = Params::new(128, true);
        let tuned = |user: &str| {
            let merged = hopper.tuned_under(&shape, &params, &user.parse().unwrap());
            hopper.resolve(&merged, 128, &Limits::H100)
        };
        assert_eq!(tuned("").unwrap().get("Q_STAGES"), Some(2));
        for (user, knob, value) in [
            ("SCHEDULE=0", "SCHEDULE", 0),
            ("Q_REGS=1", "Q_REGS", 1),
            ("STAGES=3", "STAGES", 3),
            ("BLOCK_N=176", "Q_REGS", 0),
        ] {
            let cfg = tuned(user).unwrap_or_else(|e| panic!("{user}: {e}"));
            assert_eq!(
                (cfg.get("Q_STAGES"), cfg.get(knob)),
                (Some(1), Some(value)),
                "{user}"
            );
        }
        // Knobs that leave two Q tiles possible keep them; the user's own Q_STAGES=2 never yields.
        assert_eq!(tuned("LAZY_RESCALE=1").unwrap().get("Q_STAGES"), Some(2));
        let err = tuned("SCHEDULE=0,Q_STAGES=2").unwrap_err().to_string();
        assert!(err.contains("SCHEDULE=1"), "{err}");
        // Where the tuning's 160-key tile rules the user's knobs out, the whole tuning yields.
        let long = Shape::new(2, 16, 4096, 4096, 128).unwrap();
        let tuned_long = |user: &str| {
            let merged = hopper.tuned_under(&long, &params, &user.parse().unwrap());
            let cfg = hopper.resolve(&merged, 128, &Limits::H100);
            let cfg = cfg.unwrap_or_else(|e| panic!("{user}: {e}"));
            (cfg.get("BLOCK_N"), cfg.get("Q_STAGES"))
        };
        assert_eq!(tuned_long(""), (Some(160), Some(2)));
        assert_eq!(tuned_long("Q_REGS=1"), (Some(128), Some(1)));
        assert_eq!(tuned_long("STAGES=3"), (Some(128), Some(1)));
        assert_eq!(tuned_long("SCHEDULE=0"), (Some(160), Some(1)));
    }

    #[test]
    fn hopper_takes_wide_key_tiles_only_where_they_fit_and_where_measured() {
        let hopper = find("hopper").unwrap();
        // FlashAttention-3's D=128 tile: 128 x 176, 2 stages; 214016 bytes of dynamic shared memory.
        let fa3 = resolve("BLOCK_N=176,STAGES=2", 128).unwrap();
        assert_eq!(fa3.get("NUM_WARPS"), Some(8));
        // Q yields to shared memory: the 176-key tile leaves no registers for it.
        assert_eq!(fa3.get("Q_REGS"), Some(0));
        assert_eq!(hopper_dynamic_shared(&fa3, 128), 214_016);
        // The default 3 stages do not fit at D=128; the reason says what to do.
        let err = resolve("BLOCK_N=176", 128).unwrap_err();
        assert!(
            err.contains("shared memory") && err.contains("STAGES=2"),
            "{err}"
        );
        // 3 consumer warpgroups (D=64's default) have 160 registers per thread: refused.
        let err = resolve("BLOCK_N=176", 64).unwrap_err();
        assert!(err.contains("NUM_WARPS <= 8"), "{err}");
        resolve("BLOCK_N=176,NUM_WARPS=8,BLOCK_M=128", 64).unwrap();
        assert!(resolve("BLOCK_N=160", 64)
            .unwrap_err()
            .contains("NUM_WARPS <= 8"));
        // Two Q tiles leave room for a 2-stage ring of 160-key tiles at D=128, not of 176.
        let two_q = "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2";
        let n160 = resolve(&format!("{two_q},BLOCK_N=160"), 128).unwrap();
        assert_eq!(
            hopper_dynamic_shared(&n160, 128),
            1024 + 2 * 32_768 + 2 * 2 * 40_960
        );
        let err = resolve(&format!("{two_q},BLOCK_N=176"), 128).unwrap_err();
        assert!(err.contains("shared memory"), "{err}");
        // Neither the defaults nor any shape's tuning (since two Q tiles take every length at D=128):
        // opt-in.
        for d in [64, 128] {
            assert_eq!(hopper.default_config(d).get("BLOCK_N"), Some(128));
            for (shape, causal) in [
                ((1, 8, 512), false),
                ((2, 16, 8192), false),
                ((2, 16, 8192), true),
                ((2, 16, 16384), true),
            ] {
                let (b, h, s) = shape;
                let tuned = tuned_at("hopper", (b, h, s, d), causal);
                assert_ne!(tuned.get("BLOCK_N"), Some(176), "{shape:?} D={d} {causal}");
                // Clusters on every full grid; the seed suite's (1,8,512) is none.
                assert_eq!(
                    tuned.get("CLUSTER") == Some(2),
                    shape != (1, 8, 512),
                    "{shape:?} D={d} {causal}"
                );
            }
        }
    }

    #[test]
    fn hopper_takes_128_row_blocks_at_d64_only_where_192_row_blocks_end_in_a_thin_wave() {
        let hopper = find("hopper").unwrap();
        for ((b, h, s), rows) in [
            ((2, 16, 1024), 128),
            ((1, 32, 1024), 128),
            ((4, 16, 1024), 192),
            ((2, 16, 2048), 192),
            ((2, 16, 8192), 192),
        ] {
            for causal in [false, true] {
                let tuned = tuned_at("hopper", (b, h, s, 64), causal);
                let cfg = hopper.resolve(&tuned, 64, &Limits::H100).unwrap();
                let got = (cfg.get("BLOCK_M"), cfg.get("NUM_WARPS"), cfg.get("CLUSTER"));
                let want = if rows == 128 {
                    (128, 8, 1)
                } else {
                    (192, 12, 2)
                };
                let want = (Some(want.0), Some(want.1), Some(want.2));
                assert_eq!(got, want, "{b},{h},{s},64 causal={causal}");
            }
        }
        // Grouped heads too: blocks alone take no head pairs (CLUSTER_HEADS needs CLUSTER=2).
        let grouped = Shape {
            kv_heads: 8,
            ..Shape::new(1, 32, 1024, 1024, 64).unwrap()
        };
        let tuned = hopper.tuned_for(&grouped, &Params::new(64, false));
        let cfg = hopper.resolve(&tuned, 64, &Limits::H100).unwrap();
        let got = (
            cfg.get("BLOCK_M"),
            cfg.get("CLUSTER"),
            cfg.get("CLUSTER_HEADS"),
        );
        assert_eq!(got, (Some(128), Some(1), Some(0)));
        // A user's warps win over the tuning's rows (it yields rather than clash).
        let shape = Shape::new(2, 16, 1024, 1024, 64).unwrap();
        let params = Params::new(64, false);
        let user = hopper.tuned_under(&shape, &params, &"NUM_WARPS=12".parse().unwrap());
        let cfg = hopper.resolve(&user, 64, &Limits::H100).unwrap();
        assert_eq!(cfg.get("BLOCK_M"), Some(192));
        // Never at D=128, whose blocks have 128 rows anyway (in clusters).
        let d128 = tuned_at("hopper", (2, 16, 1024, 128), false);
        assert_eq!(d128.get("CLUSTER"), Some(2));
    }
}
