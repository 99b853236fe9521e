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

/// The shared memory a resident hopper block of `cfg` takes of an H100 SM: the tiles, the
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
