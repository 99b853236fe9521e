//! The table of registered implementations, in the order `cargo xtask kernels` lists them; the
//! small ones (naive, tiled, cublas) whole, the others through their modules.

use crate::config::names::{
    BLOCK_M, BLOCK_N, CHAIN, CLUSTER, CLUSTER_HEADS, LAZY_RESCALE, NUM_WARPS, PV_N, Q_REGS,
    Q_RELEASE, Q_STAGES, ROWS_PER_BLOCK, SCHEDULE, STAGES, STREAM_K,
};
use crate::config::{Config, ConfigError, Knob};

use super::hopper::{self, hopper_defaults, hopper_tuned, HOPPER_KNOBS};
use super::hybrid::{
    hybrid_constraints, hybrid_defaults, hybrid_geometry, qk_softmax_shared, softmax_pv_shared,
    HYBRID_KNOBS,
};
use super::mma::{self, mma_defaults, mma_tuned, MMA_KNOBS};
use super::{
    elem_bytes, knob, row_tiles, Abi, Engine, Geometry, Gpus, Implementation, LibraryPlan, Variants,
};

static NAIVE_KNOBS: [Knob; 1] = [Knob {
    name: ROWS_PER_BLOCK,
    domain: &[1, 2, 4, 8],
    doc: "query rows (warps) per block",
}];

static TILED_KNOBS: [Knob; 4] = [
    Knob {
        name: BLOCK_M,
        domain: &[16, 32, 64, 128],
        doc: "query rows per block",
    },
    Knob {
        name: BLOCK_N,
        domain: &[32, 64],
        doc: "keys per K/V tile",
    },
    Knob {
        name: NUM_WARPS,
        domain: &[2, 4, 8],
        doc: "warps per block",
    },
    Knob {
        name: STAGES,
        domain: &[1, 2],
        doc: "K/V buffers (2: cp.async double buffering, one barrier per tile)",
    },
];

static REGISTRY: [Implementation; 7] = [
    Implementation {
        name: "naive",
        summary: "one warp per query row, online softmax in registers; any shape, any head dim",
        engine: Engine::Kernel { file: "naive.cu", source: include_str!("../../../../kernels/naive.cu") },
        abi: Abi::Plain,
        knobs: &NAIVE_KNOBS,
        head_dims: None,
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: |_| Config::from_pairs(&[(ROWS_PER_BLOCK, 4)]),
        tuned: |_, _, _| Config::default(),
        constraints: |_, head_dim| {
            if head_dim > 256 {
                Err(ConfigError::Rule(format!("head dim {head_dim} > 256 would need more than 8 registers per lane")))
            } else {
                Ok(())
            }
        },
        geometry: |cfg, shape| {
            let rows = knob(cfg, ROWS_PER_BLOCK);
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
        engine: Engine::Kernel { file: "tiled.cu", source: include_str!("../../../../kernels/tiled.cu") },
        abi: Abi::Plain,
        knobs: &TILED_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: |head_dim| {
            let block_m = if head_dim > 64 { 32 } else { 64 };
            Config::from_pairs(&[(BLOCK_M, block_m), (BLOCK_N, 64), (NUM_WARPS, 4), (STAGES, 2)])
        },
        tuned: |_, _, _| Config::default(),
        constraints: |cfg, _| {
            let (m, w) = (knob(cfg, BLOCK_M), knob(cfg, NUM_WARPS));
            if m % w != 0 {
                return Err(ConfigError::Rule(format!("BLOCK_M={m} is not a multiple of NUM_WARPS={w}")));
            }
            if m / w > 16 {
                return Err(ConfigError::Rule(format!("BLOCK_M/NUM_WARPS = {} rows per warp; at most 16 fit in registers", m / w)));
            }
            Ok(())
        },
        geometry: |cfg, shape| {
            let (m, n, w, stages) =
                (knob(cfg, BLOCK_M), knob(cfg, BLOCK_N), knob(cfg, NUM_WARPS), knob(cfg, STAGES));
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
        engine: Engine::Kernel { file: "mma.cu", source: include_str!("../../../../kernels/mma.cu") },
        abi: Abi::Plain,
        knobs: &MMA_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::ALL,
        introduced: &[],
        yielding: &[],
        defaults: mma_defaults,
        tuned: mma_tuned,
        constraints: mma::constraints,
        geometry: mma::geometry,
    },
    Implementation {
        name: "hopper",
        summary: "Hopper (sm_90a): warp-specialised: TMA producer warp + mbarrier K/V ring, 2-3 wgmma consumer warpgroups (Q·Kᵀ and P·V, P from registers), FA3 intra-warpgroup overlap + ping-pong",
        engine: Engine::Kernel { file: "hopper.cu", source: include_str!("../../../../kernels/hopper.cu") },
        abi: Abi::TensorMaps,
        knobs: &HOPPER_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: Some("compute_90a"),
        gpus: Gpus::Only((9, 0)),
        variants: Variants::ALL,
        introduced: &[
            (SCHEDULE, 0),
            (PV_N, 64),
            (Q_REGS, 0),
            (LAZY_RESCALE, 0),
            (Q_STAGES, 1),
            (CLUSTER, 1),
            (Q_RELEASE, 0),
            (CLUSTER_HEADS, 0),
            (STREAM_K, 0),
            (CHAIN, 0),
        ],
        yielding: &[
            (Q_REGS, 0),
            (Q_STAGES, 1),
            (CLUSTER, 1),
            (Q_RELEASE, 0),
            (CLUSTER_HEADS, 0),
            (STREAM_K, 0),
            (CHAIN, 0),
        ],
        defaults: hopper_defaults,
        tuned: hopper_tuned,
        constraints: hopper::constraints,
        geometry: hopper::geometry,
    },
    Implementation {
        name: "cublas",
        summary: "math path: cuBLAS GEMM S=Q·Kᵀ (f32), fused scale+mask+softmax kernel, cuBLAS GEMM O=P·V",
        engine: Engine::Library {
            plan: LibraryPlan::Math,
            file: "softmax.cu",
            source: include_str!("../../../../kernels/softmax.cu"),
            entry: "softmax_rows",
        },
        abi: Abi::Plain,
        knobs: &[],
        head_dims: None,
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: |_| Config::default(),
        tuned: |_, _, _| Config::default(),
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
            source: include_str!("../../../../kernels/softmax_pv.cu"),
            entry: "softmax_pv",
        },
        abi: Abi::Plain,
        knobs: &HYBRID_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: hybrid_defaults,
        tuned: |_, _, _| Config::default(),
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
            source: include_str!("../../../../kernels/qk_softmax.cu"),
            entry: "qk_softmax",
        },
        abi: Abi::Plain,
        knobs: &HYBRID_KNOBS,
        head_dims: Some(&[64, 128]),
        arch: None,
        gpus: Gpus::SM80_AND_NEWER,
        variants: Variants::NONE,
        introduced: &[],
        yielding: &[],
        defaults: hybrid_defaults,
        tuned: |_, _, _| Config::default(),
        constraints: |cfg, _| hybrid_constraints(cfg, knob(cfg, BLOCK_N)),
        geometry: |cfg, shape| {
            hybrid_geometry(cfg, shape, qk_softmax_shared(cfg, shape.head_dim as u32))
        },
    },
];

/// The implementations a device runs by default, best first, each with why it leads where it
/// runs: the first whose GPUs include the device is chosen ([`super::best_for`]).
pub(super) static PREFERENCE: [(&str, &str); 2] = [
    ("hopper", "sm_90a TMA + wgmma"),
    ("mma", "mma.sync tensor cores, sm_80 and newer"),
];

/// Every registered implementation, in the order `cargo xtask kernels` lists them.
pub fn registry() -> &'static [Implementation] {
    &REGISTRY
}
