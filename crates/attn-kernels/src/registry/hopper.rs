//! hopper: the warp-specialised sm_90a kernel (TMA, wgmma): its knobs, defaults, tuning policy,
//! constraints and launch geometry.

use attn_oracle::{Params, Shape};

use crate::config::names::{
    BLOCK_M, BLOCK_N, CHAIN, CLUSTER, CLUSTER_HEADS, LAZY_RESCALE, NUM_WARPS, OVERLAP, PINGPONG,
    PV_N, Q_REGS, Q_RELEASE, Q_STAGES, SCHEDULE, STAGES, STREAM_K,
};
use crate::config::{Config, ConfigError, Knob};

use super::{elem_bytes, grid_blocks, knob, row_tiles, DeviceLimits, Geometry};

pub(super) static HOPPER_KNOBS: [Knob; 16] = [
    Knob {
        name: BLOCK_M,
        domain: &[64, 128, 192],
        doc: "query rows per block (= 16 x NUM_WARPS: 64 per consumer warpgroup)",
    },
    Knob {
        name: BLOCK_N,
        domain: &[64, 128, 160, 176],
        doc: "keys per K/V tile (the N of the S = Q·Kᵀ wgmma, the rows of a K/V TMA box); 176 (FlashAttention-3's D=128 tile; opt-in) and 160 (the widest whose 2-stage ring fits beside two Q tiles at D=128; tuned there from 2048 keys a row) need NUM_WARPS <= 8 and, at D=128, STAGES=2",
    },
    Knob {
        name: NUM_WARPS,
        domain: &[4, 8, 12],
        doc: "consumer warps: 1, 2 or 3 consumer warpgroups (a producer warpgroup comes on top; 12 only at D=64)",
    },
    Knob {
        name: STAGES,
        domain: &[2, 3, 4],
        doc: "K/V ring depth (TMA loads completing on mbarriers)",
    },
    Knob {
        name: OVERLAP,
        domain: &[0, 1],
        doc: "issue S(j+1) before P(j)·V(j) so softmax overlaps wgmma",
    },
    Knob {
        name: PINGPONG,
        domain: &[0, 1],
        doc: "the consumer warpgroups take turns issuing wgmma (one's softmax overlaps another's GEMMs; needs NUM_WARPS >= 8, OVERLAP=1)",
    },
    Knob {
        name: SCHEDULE,
        domain: &[0, 1],
        doc: "work order: 0 = grid (one block per row block, bottom-up when causal), 1 = persistent (a block per SM looping over (batch, head, row block) items: strided when all are equal, else heaviest first from a device counter); --config SCHEDULE=grid|persistent",
    },
    Knob {
        name: Q_REGS,
        domain: &[0, 1],
        doc: "Q·Kᵀ's A operand: 0 = Q from shared memory (a descriptor per k-step), 1 = Q held in registers for the item (the wgmma reads only K from shared memory; BLOCK_N 64 or 128, NUM_WARPS <= 8, OVERLAP=1); the default at D=128, where it yields to 0 when other knobs rule it out",
    },
    Knob {
        name: PV_N,
        domain: &[64, 128],
        doc: "N of the P·V wgmma: 64 = one per 64-column panel of O, 128 = one for both panels at D=128 (FlashAttention-3's shape: P's registers read once, half the instructions; the default at D=128)",
    },
    Knob {
        name: LAZY_RESCALE,
        domain: &[0, 1],
        doc: "1 = a row keeps its running max while a key tile raises it by at most 8 (log2 domain) and a warp whose rows all kept theirs skips O's rescale (FlashAttention-4's conditional rescaling: fewer instructions per tile, so less power at the same work: the tuning from 4096 keys), 0 = the exact running max",
    },
    Knob {
        name: Q_STAGES,
        domain: &[1, 2],
        doc: "Q tiles of the persistent loop with Q in shared memory: 2 = items alternate between two, so the next item's Q is copied during this one (needs SCHEDULE=1, Q_REGS=0; at D=128 STAGES=2; with it, unless CHAIN=1, a copy warp stores each item's O with TMA; the tuning of full grids but, at D=128, windows both ways with few keys a row), 1 = one, refilled after each item's epilogue; yields to 1 where other knobs rule it out",
    },
    Knob {
        name: CLUSTER,
        domain: &[1, 2],
        doc: "blocks per thread-block cluster: 2 = two blocks of adjacent row blocks visit the same key tiles and each copies half of every K/V tile into both (TMA multicast), halving the K/V traffic from L2 (FlashAttention-3's cluster of two; with SCHEDULE=1, and then Q_STAGES=2 or Q_RELEASE=1, the pair is the work item, one ticket per cluster; the tuning of every full grid), 1 = each block copies its own; yields to 1 where other knobs rule it out",
    },
    Knob {
        name: Q_RELEASE,
        domain: &[0, 1],
        doc: "when the persistent loop's one Q tile goes back to the producer: 1 = after the item's last Q·Kᵀ, O then stored from registers, so the next item's Q is copied during the item's last tile and epilogue (the overlap two Q tiles give, where a second tile does not fit: the 176-key tile; needs SCHEDULE=1, Q_REGS=0, Q_STAGES=1), 0 = after the epilogue, which stages O in the Q tile for 16-byte stores; yields to 0 where other knobs rule it out",
    },
    Knob {
        name: CLUSTER_HEADS,
        domain: &[0, 1],
        doc: "what a persistent cluster's two blocks take together: 1 = one row block of two query heads of one K/V head (the same key tiles for both, the causal diagonal's too; needs CLUSTER=2, SCHEDULE=1 and an even number of query heads per K/V head, which the launch checks; the tuning of persistent clusters where that number is even), 0 = two adjacent row blocks of one head; yields to 0 where other knobs rule it out",
    },
    Knob {
        name: STREAM_K,
        domain: &[0, 1],
        doc: "1 = a static persistent schedule (no mask, dense batch) shares its last items' key tiles out evenly over the clusters (stream-K: an item cut between two runs merges the two partial results), so the grid ends with no thin last wave (the tuning of unmasked full grids from 4096 keys at D=128, 2048 at D=64); needs SCHEDULE=1 and Q_STAGES=2; 0 = whole items to the end",
    },
    Knob {
        name: CHAIN,
        domain: &[0, 1],
        doc: "1 = in an unmasked dense batch a persistent block chains its items (stream-K segments too, at D=64; at D=128 CHAIN=1 with STREAM_K=1 spills): an item's last turn issues the next item's first Q·Kᵀ beside its own last P·V and runs that softmax while the P·V completes, then stores (no turn with a Q·Kᵀ or a P·V alone at an item's start and end); needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1; the consumers store O themselves (no copy warp: with it some D=128 configs spilled); opt-in (kernels/TUNING.md, `chain`); 0 = each item begins after the previous one's last P·V",
    },
];

/// hopper's defaults: two consumer warpgroups at D=128 and three at D=64, with ping-pong, and at
/// D=128 one N = 128 P·V wgmma and Q in registers (Q_REGS yields to 0 where the tile or overlap leave
/// it no registers), the fastest measured (see kernels/TUNING.md, `hopper-defaults`).
pub(super) fn hopper_defaults(head_dim: usize) -> Config {
    let warps = if head_dim <= 64 { 12 } else { 8 };
    Config::from_pairs(&[
        (BLOCK_M, 16 * warps),
        (BLOCK_N, 128),
        (NUM_WARPS, warps),
        (STAGES, 3),
        (OVERLAP, 1),
        (PINGPONG, 1),
        (SCHEDULE, 0),
        (PV_N, if head_dim == 128 { 128 } else { 64 }),
        (Q_REGS, if head_dim == 128 { 1 } else { 0 }),
        (LAZY_RESCALE, 0),
        (Q_STAGES, 1),
        (CLUSTER, 1),
        (Q_RELEASE, 0),
        (CLUSTER_HEADS, 0),
        (STREAM_K, 0),
        (CHAIN, 0),
    ])
}

/// Keys per row from which hopper rescales lazily (LAZY_RESCALE=1), at either head dim: such long
/// rows run power-limited, and a skipped rescale of O is power saved (see kernels/TUNING.md,
/// `lazy-rescale`).
const HOPPER_LAZY_RESCALE_MIN_KEYS: usize = 4096;

/// Whether hopper's two Q tiles take the stream-K tail (STREAM_K=1): the static order of an unmasked
/// problem cuts its last items into equal runs of key tiles, one per cluster, so that no thin last
/// wave leaves clusters idle (causal and windowed problems take whole items heaviest first from a
/// counter); from [`HOPPER_STREAM_K_MIN_KEYS`] keys (see kernels/TUNING.md, `stream-k-tail`).
fn hopper_cuts_the_tail(shape: &Shape, params: &Params) -> bool {
    let (d64, d128) = HOPPER_STREAM_K_MIN_KEYS;
    let min_keys = if shape.head_dim == 64 { d64 } else { d128 };
    !params.causal && !params.window.is_bounded() && shape.seq_kv >= min_keys
}

/// Keys per row from which hopper cuts the tail ([`hopper_cuts_the_tail`]), at D=64 and D=128:
/// shorter rows lose what the cut gains, each cut adding an item's start and end and a merge (see
/// kernels/TUNING.md, `stream-k-tail`).
const HOPPER_STREAM_K_MIN_KEYS: (usize, usize) = (2048, 4096);

/// Keys a row sees on average under the mask (the varlen batches' longest sequence) from which
/// hopper's two Q tiles at D=128 take 160-key tiles (230,400 bytes of shared memory with the 2-stage
/// ring; 176 keys do not fit beside two Q tiles), and from which a window both ways takes two Q tiles
/// at all: shorter rows lose with them (see kernels/TUNING.md, `160-key-tiles`).
const HOPPER_160_KEY_TILES_MIN_KEYS: usize = 2048;

/// Blocks per cluster of hopper's full grids persistent with two Q tiles (CLUSTER=2): adjacent row
/// blocks of one head visit the same key tiles, and each copying half of every K/V tile into both
/// (TMA multicast) halves the K/V traffic from L2 (see kernels/TUNING.md, `clusters-of-two`).
const HOPPER_CLUSTER: i64 = 2;

/// Whether hopper's persistent clusters (two Q tiles) take one row block of two query heads that
/// share a K/V head (CLUSTER_HEADS=1) rather than two row blocks of one head: where the query heads
/// per K/V head are even, so that both blocks visit the same key tiles, the causal diagonal's and a
/// window's edges too (see kernels/TUNING.md, `cluster-heads`).
fn hopper_clusters_over_heads(shape: &Shape) -> bool {
    shape.group() % 2 == 0
}

/// hopper's knobs per problem on `device`: a grid of at least one block per SM at the default rows
/// takes two Q tiles in the persistent loop where they were measured ahead
/// ([`hopper_takes_two_q_tiles`]; elsewhere the defaults' grid) and conditional rescaling from
/// [`HOPPER_LAZY_RESCALE_MIN_KEYS`] keys; a grid under one wave takes one 64-row consumer warpgroup,
/// so that more blocks share the SMs, where those blocks still run in one wave (see
/// kernels/TUNING.md, `small-grid`; the 176-key tile and Q_RELEASE=1 stay opt-in: `176-key-tile`,
/// `q-release-176`).
pub(super) fn hopper_tuned(shape: &Shape, params: &Params, device: &DeviceLimits) -> Config {
    let defaults = hopper_defaults(shape.head_dim);
    let rows = knob(&defaults, BLOCK_M) as usize;
    if grid_blocks(shape, rows) >= device.sms() {
        let mut knobs = Vec::new();
        if shape.seq_kv >= HOPPER_LAZY_RESCALE_MIN_KEYS {
            knobs.push((LAZY_RESCALE, 1));
        }
        if hopper_takes_two_q_tiles(shape, params) {
            knobs.extend([(SCHEDULE, 1), (Q_REGS, 0), (Q_STAGES, 2)]);
            if hopper_cuts_the_tail(shape, params) {
                knobs.push((STREAM_K, 1));
            }
            if hopper_d64_takes_128_rows(shape, device) {
                // Two consumer warpgroups, each block alone (no cluster, so no head pairs).
                knobs.extend([(NUM_WARPS, 8), (BLOCK_M, 128)]);
            } else {
                knobs.push((CLUSTER, HOPPER_CLUSTER));
                if hopper_clusters_over_heads(shape) {
                    knobs.push((CLUSTER_HEADS, 1));
                }
            }
            if shape.head_dim == 128 {
                knobs.push((STAGES, 2));
                if hopper_takes_160_key_tiles(shape, params) {
                    knobs.push((BLOCK_N, 160));
                }
            }
        }
        // Else (D=128 under a window both ways with few keys a row) the defaults' grid.
        return Config::from_pairs(&knobs);
    }
    let small = Config::from_pairs(&[
        (BLOCK_M, 64),
        (BLOCK_N, 128),
        (NUM_WARPS, 4),
        (STAGES, 2),
        (OVERLAP, 0),
        (PINGPONG, 0),
    ]);
    // Only where the 64-row blocks still run in one wave: at D=128 one takes 145 KiB, one per SM.
    let resident =
        device.shared_per_sm / hopper_shared_on_sm(&small, shape.head_dim as u32, device);
    if grid_blocks(shape, 64) > resident as usize * device.sms() {
        return Config::default();
    }
    small
}

/// Whether a full grid of `shape` takes two Q tiles in the persistent loop (Q_STAGES=2, with
/// SCHEDULE=1, Q_REGS=0 and at D=128 a 2-stage ring), so that the next item's Q arrives during this
/// one's key loop instead of after its epilogue and a copy warp stores each item's O: at D=64
/// everywhere; at D=128 without a mask (with the stream-K tail: [`hopper_cuts_the_tail`]), under a
/// causal mask or a causal window, and under a window both ways where the 160-key tile comes with
/// them (see kernels/TUNING.md, `two-q-tiles`).
fn hopper_takes_two_q_tiles(shape: &Shape, params: &Params) -> bool {
    if shape.head_dim != 128 {
        return true;
    }
    // A window both ways: only where the 160-key tile comes with them (measured so). Without a
    // mask with the stream-K tail from 4096 keys (hopper_cuts_the_tail).
    params.causal || !params.window.is_bounded() || hopper_takes_160_key_tiles(shape, params)
}

/// Cost of one query row in hopper's 192-row blocks (D=64's default: three consumer warpgroups)
/// against one in 128-row blocks, as 17/20 (see kernels/TUNING.md, `d64-128-row-blocks`).
const HOPPER_D64_WIDE_ROW_COST: (usize, usize) = (17, 20);

/// Whether a full grid at D=64 takes 128-row blocks (NUM_WARPS=8, each block alone: CLUSTER=1)
/// rather than the default 192: where the 192-row blocks' waves on `device`, counted in rows and
/// weighed by [`HOPPER_D64_WIDE_ROW_COST`], come to more than the 128-row blocks' (short rows whose
/// last 192-row block is mostly empty end in a thin wave; see kernels/TUNING.md,
/// `d64-128-row-blocks`).
fn hopper_d64_takes_128_rows(shape: &Shape, device: &DeviceLimits) -> bool {
    let rows_in_waves = |rows: usize| grid_blocks(shape, rows).div_ceil(device.sms()) * rows;
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

/// The shared memory a resident hopper block of `cfg` takes of one of `device`'s SMs: the tiles, the
/// barriers and the driver's reserve per block.
fn hopper_shared_on_sm(cfg: &Config, head_dim: u32, device: &DeviceLimits) -> u32 {
    hopper_dynamic_shared(cfg, head_dim)
        + hopper_static_shared(cfg)
        + device.reserved_shared_per_block
}

/// hopper's dynamic shared memory: 1 KiB of slack to align the tiles to the 1024-byte swizzle atom,
/// the Q tile (Q_STAGES of them), then STAGES × (K tile + V tile). Every tile and every 64-column
/// panel of one is a whole number of 1024-byte swizzle atoms (8 rows of 128 bytes; BLOCK_M and
/// BLOCK_N are multiples of 8: a 176-key panel is 22 atoms), so no padding. hopper's constraints
/// add the kernel's static shared memory ([`hopper_static_shared`]) against sm_90's 232448-byte
/// limit. Public for the micro-benchmark of hopper's pipeline (attn-measure's `micro`), which has
/// the same layout. Reads `BLOCK_M`, `BLOCK_N`, `STAGES` and `Q_STAGES` of `cfg`.
pub fn hopper_dynamic_shared(cfg: &Config, head_dim: u32) -> u32 {
    let (m, n, stages) = (knob(cfg, BLOCK_M), knob(cfg, BLOCK_N), knob(cfg, STAGES));
    1024 + q_stages(cfg) * m * head_dim * elem_bytes() + stages * 2 * n * head_dim * elem_bytes()
}

/// hopper's Q tiles: `Q_STAGES`, 1 where a config has none (the micro-benchmark's).
fn q_stages(cfg: &Config) -> u32 {
    knob(cfg, Q_STAGES).max(1)
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
    let ticket = if knob(cfg, CLUSTER) == 2 { 20 } else { 0 };
    let persistent = if knob(cfg, SCHEDULE) == 1 {
        // Per Q tile its q_empty and the item's words (a fourth with STREAM_K=1: its key segment).
        let item_words = 3 + knob(cfg, STREAM_K);
        let copy_warp = if q == 2 && knob(cfg, CHAIN) != 1 {
            8 + 4
        } else {
            0
        };
        ((8 + copy_warp + 4 * item_words) * q + ticket).next_multiple_of(8)
    } else {
        0
    };
    8 * (q + 4 * knob(cfg, STAGES)) + persistent
}

/// The workspace each block of hopper's persistent loop takes with STREAM_K=1 (kernels/hopper.cu,
/// "the stream-K tail"): a flag word per consumer warp and one partial result (per consumer thread
/// O's D/2 accumulators, two row maxima and two sums, f32), plus 256 bytes for the partials'
/// alignment; none otherwise.
fn hopper_stream_k_workspace(cfg: &Config, head_dim: u32) -> u32 {
    if knob(cfg, STREAM_K) != 1 {
        return 0;
    }
    let warps = knob(cfg, NUM_WARPS);
    4 * (warps + 32 * warps * (head_dim / 2 + 4)) + 256
}

/// hopper's constraints on a config at `head_dim`.
pub(super) fn constraints(cfg: &Config, head_dim: usize) -> std::result::Result<(), ConfigError> {
    let (m, w) = (knob(cfg, BLOCK_M), knob(cfg, NUM_WARPS));
    if w == 12 && head_dim != 64 {
        return Err(ConfigError::Rule(format!(
            "NUM_WARPS=12 needs head dim 64 (3 consumer warpgroups get 160 registers per thread; D={head_dim} needs more)"
        )));
    }
    if m != 16 * w {
        return Err(ConfigError::Rule(format!(
            "BLOCK_M={m} must be 16 x NUM_WARPS = {} (64 rows per consumer warpgroup)",
            16 * w
        )));
    }
    if knob(cfg, PINGPONG) == 1 && (w < 8 || knob(cfg, OVERLAP) != 1) {
        return Err(ConfigError::Rule("PINGPONG=1 needs NUM_WARPS >= 8 and OVERLAP=1 (consumer warpgroups taking turns); add PINGPONG=0".to_string()));
    }
    if knob(cfg, PV_N) == 128 && head_dim != 128 {
        return Err(ConfigError::Rule(format!(
            "PV_N=128 needs head dim 128 (O's two 64-column panels); D={head_dim} has one"
        )));
    }
    let n = knob(cfg, BLOCK_N);
    if knob(cfg, Q_REGS) == 1 && (n > 128 || w == 12) {
        return Err(ConfigError::Rule(format!("Q_REGS=1 needs BLOCK_N 64 or 128 and NUM_WARPS <= 8 (Q's fragments beside the S, P and O of BLOCK_N={n} with {w} consumer warps spill); add Q_REGS=0")));
    }
    // ptxas 13.0 hands Q's fragment registers to P inside the unoverlapped key loop (found by
    // kernels/tools/sass_blocks.py --q-regs-live; every overlapped variant keeps them).
    if knob(cfg, Q_REGS) == 1 && knob(cfg, OVERLAP) == 0 {
        return Err(ConfigError::Rule("Q_REGS=1 needs OVERLAP=1 (in the unoverlapped loop ptxas 13.0 reuses Q's registers for P: wrong results); add Q_REGS=0".to_string()));
    }
    if knob(cfg, Q_STAGES) == 2 && (knob(cfg, SCHEDULE) != 1 || knob(cfg, Q_REGS) != 0) {
        return Err(ConfigError::Rule("Q_STAGES=2 needs SCHEDULE=1 and Q_REGS=0 (a second Q tile serves the persistent loop with Q in shared memory); add SCHEDULE=1,Q_REGS=0".to_string()));
    }
    if knob(cfg, Q_RELEASE) == 1
        && (knob(cfg, SCHEDULE) != 1 || knob(cfg, Q_REGS) != 0 || q_stages(cfg) != 1)
    {
        return Err(ConfigError::Rule("Q_RELEASE=1 needs SCHEDULE=1, Q_REGS=0 and Q_STAGES=1 (it releases the persistent loop's one Q tile early); add SCHEDULE=1,Q_REGS=0".to_string()));
    }
    if knob(cfg, CLUSTER) == 2
        && knob(cfg, SCHEDULE) == 1
        && q_stages(cfg) != 2
        && knob(cfg, Q_RELEASE) != 1
    {
        return Err(ConfigError::Rule("CLUSTER=2 in the persistent loop needs Q_STAGES=2 or Q_RELEASE=1 (with one Q tile released after the epilogue its producer's 24 registers spill); add Q_STAGES=2,Q_REGS=0, Q_RELEASE=1,Q_REGS=0 or SCHEDULE=0".to_string()));
    }
    if knob(cfg, CLUSTER_HEADS) == 1 && (knob(cfg, CLUSTER) != 2 || knob(cfg, SCHEDULE) != 1) {
        return Err(ConfigError::Rule("CLUSTER_HEADS=1 needs CLUSTER=2 and SCHEDULE=1 (a persistent cluster's blocks take two heads' row block); add CLUSTER=2,SCHEDULE=1 and what those need (Q_STAGES=2,Q_REGS=0 or Q_RELEASE=1,Q_REGS=0)".to_string()));
    }
    if knob(cfg, STREAM_K) == 1 && (knob(cfg, SCHEDULE) != 1 || q_stages(cfg) != 2) {
        return Err(ConfigError::Rule("STREAM_K=1 needs SCHEDULE=1 and Q_STAGES=2 (the persistent loop shares its last items' key tiles out; with one Q tile its producer's 24 registers spill); add SCHEDULE=1,Q_STAGES=2,Q_REGS=0 (at D=128 STAGES=2)".to_string()));
    }
    if knob(cfg, CHAIN) == 1
        && (knob(cfg, SCHEDULE) != 1 || q_stages(cfg) != 2 || knob(cfg, OVERLAP) != 1)
    {
        return Err(ConfigError::Rule("CHAIN=1 needs SCHEDULE=1, Q_STAGES=2 and OVERLAP=1 (an item's last turn begins the next item, whose Q is in the other Q tile); add SCHEDULE=1,Q_STAGES=2,Q_REGS=0 (at D=128 STAGES=2)".to_string()));
    }
    // Found by kernels/tools/hopper_check.py: at D=128 the chained turn of a cut item keeps
    // its max and sums across the next item's softmax (the merge reads them), and ptxas
    // 13.0 spills 4-8 bytes in a fifth of those configs.
    if knob(cfg, CHAIN) == 1 && knob(cfg, STREAM_K) == 1 && head_dim == 128 {
        return Err(ConfigError::Rule("CHAIN=1 with STREAM_K=1 spills registers at head dim 128 (a cut item's chained turn keeps its max and sums across the next item's softmax); use one of them".to_string()));
    }
    if n > 128 && w == 12 {
        return Err(ConfigError::Rule(format!("BLOCK_N={n} needs NUM_WARPS <= 8: with 3 consumer warpgroups (160 registers per thread) its {} S and {} P registers per thread spill; use NUM_WARPS=8", n / 2, n / 4)));
    }
    let shared = hopper_dynamic_shared(cfg, head_dim as u32) + hopper_static_shared(cfg);
    if shared > DeviceLimits::H100.max_shared_per_block {
        return Err(ConfigError::Rule(format!(
            "BLOCK_N={n} x STAGES={} K/V ring and {} Q tile(s) at head dim {head_dim}: {shared} bytes of shared memory (mbarriers included) > sm_90's {}; use fewer STAGES (BLOCK_N 160 or 176, or Q_STAGES=2, at D=128: STAGES=2; BLOCK_N=176 with Q_STAGES=2 does not fit)",
            knob(cfg, STAGES),
            q_stages(cfg),
            DeviceLimits::H100.max_shared_per_block
        )));
    }
    Ok(())
}

/// hopper's launch: its row blocks (paired for clusters), the consumer warps and a producer warpgroup.
pub(super) fn geometry(cfg: &Config, shape: &Shape) -> Geometry {
    let (m, w) = (knob(cfg, BLOCK_M), knob(cfg, NUM_WARPS));
    // CLUSTER=2: an even count of row blocks per head (a cluster's two blocks, or a
    // persistent pair item; one past the rows stores nothing); with CLUSTER_HEADS=1 the
    // pairs are of heads.
    let heads_together = knob(cfg, CLUSTER_HEADS) == 1;
    let pair_rows = if heads_together {
        1
    } else {
        knob(cfg, CLUSTER).max(1)
    };
    let rows = row_tiles(shape.seq_q, m).next_multiple_of(pair_rows);
    Geometry {
        grid: (rows, shape.heads as u32, shape.batch as u32),
        heads_together: if heads_together { 2 } else { 1 },
        // The consumer warps, then one producer warpgroup.
        block: (w + 4) * 32,
        shared_bytes: hopper_dynamic_shared(cfg, shape.head_dim as u32),
        // SCHEDULE=1: the row blocks of every (batch, head) are the work items.
        persistent: knob(cfg, SCHEDULE) == 1,
        workspace_per_block: hopper_stream_k_workspace(cfg, shape.head_dim as u32),
    }
}
