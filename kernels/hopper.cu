// hopper.cu — FlashAttention-3-style forward kernel on Hopper: TMA, mbarriers, warp specialisation,
// warpgroup tensor cores (wgmma, sm_90a).
//
// Bird's-eye view
//   One thread block computes a BLOCK_M × HEAD_DIM tile of O for one (batch or sequence, head): a
//   work item. Its warps are NUM_WARPS consumer warps (NUM_WARPS / 4 consumer warpgroups of 64 query
//   rows each; warp w of a warpgroup owns rows 16w..16w+15 of them), then one producer warpgroup.
//   - Producer warp (TMA): one thread issues every load as a TMA copy (cp.async.bulk.tensor)
//     through the ABI's tensor maps: Q once per item, then tile j of K and of V (BLOCK_N rows) into
//     slot j % STAGES of a ring, each completing on its own "full" mbarrier (arrive.expect_tx);
//     before refilling a slot's K (V) it waits on the slot's k_empty (v_empty) mbarrier. With
//     SCHEDULE 1 the same warp is the persistent scheduler (hopper_schedule.cuh). With two or three
//     consumer warpgroups setmaxnreg moves registers from the producer warpgroup (24) to the
//     consumers (240 with two, 160 with three).
//   - Consumer warpgroups, per key tile, with no block-wide barrier in the loop (hopper_consume.cuh):
//     S = Q·Kᵀ       wgmma m64n{BLOCK_N}k16; A = Q (shared memory, or registers with Q_REGS 1),
//                    B = K, both through 128-byte-swizzled K-major descriptors (HEAD_DIM / 16 k-steps)
//     P = exp2(S·scale·log2e − m), online softmax FA2-style in registers (quad shuffles)
//     O = O·α + P·V  wgmma m64n{PV_N}k16 per 16 keys: A = P re-packed in registers (the S accumulator
//                    layout is the A-fragment layout), B = V through a 128-byte-swizzled MN-major
//                    descriptor (trans-b: V stays [keys, D] row-major)
//     Every consumer thread arrives on the slot's k_empty once its Q·Kᵀ has completed and on its
//     v_empty once its P·V has, so K and V of a slot are refilled apart. OVERLAP 1 (FA3's
//     intra-warpgroup overlap) issues S_{j+1} beside P_j·V_j and runs tile j + 1's softmax while
//     P_j·V_j is on the tensor cores; PINGPONG 1 (FA3's inter-warpgroup ping-pong) has the
//     warpgroups issue their batches of wgmma in turns (named barriers), so that one's softmax runs
//     while another's GEMMs hold the tensor cores.
//   - Epilogue (hopper_epilogue.cuh): O normalised by the row sums and stored straight from the
//     accumulators, or staged in the warpgroup's own rows of the Q tile (stmatrix) and written with
//     16-byte stores, or (two Q tiles, O_TMA_STORE) handed to the copy warp, the producer
//     warpgroup's second warp, which stores it with TMA while the consumers go on to their next item.
//   - Persistent scheduler (SCHEDULE 1, hopper_schedule.cuh): one block per SM slot loops over the
//     work items, which the producer warp picks (statically, or heaviest first from a device
//     counter) and publishes with their Q; with STREAM_K the last wave's items are cut into equal
//     runs of key tiles.
//   The headers: hopper_common.cuh (PTX wrappers, included first), hopper_pipeline.cuh (barriers,
//   loads, wgmma and softmax steps shared with micro_hopper.cu), then this kernel's own
//   hopper_schedule.cuh, hopper_epilogue.cuh and hopper_consume.cuh (with the fragment layouts):
//   the last four are parts of this file, included inside namespace hopper_attn after the geometry
//   below, in that order (moving code into them left the PTX as it was: kernels/tools/
//   ptx_identity.py). GQA/MQA, sliding windows (causal included) and varlen are run-time parameters
//   of one compiled kernel (kernels/README.md, "Variants"); rows that see no key write zeros.
//
// Knobs (compile-time defines; the default is this file's fallback, the registry's default in
// brackets where it differs; the registry's tuning picks them per shape: kernels/TUNING.md says why)
//   knob          values             what it does                                                    default
//   HEAD_DIM      64, 128            head dim (attn_common.cuh)                                      required
//   NUM_WARPS     4, 8, 12           consumer warps: 1, 2 or 3 warpgroups (12 at D 64 only)          8 [12 at D 64]
//   BLOCK_M       16 · NUM_WARPS     query rows per block (the only allowed value)                   derived
//   BLOCK_N       64, 128, 160, 176  keys per tile, the rows of a K/V TMA box; 160 and 176 need      128
//                                    NUM_WARPS ≤ 8, and at D 128 STAGES 2
//   STAGES        2, 3, 4            K/V ring depth                                                  3
//   OVERLAP       0, 1               S_{j+1} issued beside P_j·V_j (intra-warpgroup overlap)         1
//   PINGPONG      0, 1               warpgroups issue wgmma in turns (NUM_WARPS ≥ 8, OVERLAP 1)      1
//   PV_N          64, 128            N of the P·V wgmma: 128 (D 128 only) covers both of O's         128 at D 128,
//                                    64-column panels in one m64n128k16 (FA3's P·V shape)            64 at D 64
//   Q_REGS        0, 1               Q·Kᵀ's A operand from registers (4 · D / 16 per thread, read    0 [1 at D 128]
//                                    once per item) instead of shared memory; BLOCK_N ≤ 128,
//                                    NUM_WARPS ≤ 8, OVERLAP 1
//   LAZY_RESCALE  0, 1               conditional rescaling (FA4's): a row keeps its max while a      0
//                                    tile raises it by ≤ LAZY_RESCALE_SLACK (8, log2), and a warp
//                                    whose rows all kept theirs skips O's rescale; windows narrower
//                                    than LAZY_RESCALE_MIN_WINDOW (256) keep the exact max
//   SCHEDULE      0, 1               work order: 0 grid (a block per row block), 1 persistent        0
//   Q_STAGES      1, 2               Q tiles of the persistent loop with Q in shared memory          1
//                                    (SCHEDULE 1, Q_REGS 0): the next item's Q lands during this
//                                    item's key loop; at D 128 only with STAGES 2
//   CLUSTER       1, 2               blocks per cluster sharing every K/V tile (TMA multicast,       1
//                                    "Clusters" below); with SCHEDULE 1 needs Q_STAGES 2 or
//                                    Q_RELEASE 1
//   Q_RELEASE     0, 1               the one Q tile (SCHEDULE 1, Q_REGS 0, Q_STAGES 1) goes back     0
//                                    after the item's last Q·Kᵀ, O stored from registers
//   CLUSTER_HEADS 0, 1               a cluster (CLUSTER 2, SCHEDULE 1) takes one row block of two    0
//                                    query heads of one K/V head, not two row blocks
//   STREAM_K      0, 1               a static persistent order cuts its last items into equal runs   0
//                                    of key tiles, one per cluster, and merges each cut item's two
//                                    partials; needs Q_STAGES 2
//   CHAIN         0, 1               an unmasked dense item's last turn issues the next item's       0
//                                    first Q·Kᵀ beside its last P·V (SCHEDULE 1, Q_STAGES 2,
//                                    OVERLAP 1; the registry refuses it with STREAM_K at D 128)
//   Derived: HOPPER_NARROW_TAIL (the narrow tail, "Variants and tile skipping") and O_TMA_STORE
//   (the copy warp: Q_STAGES 2 without CHAIN), below the static_asserts. TUNING.md's entries:
//   `wide-key-tiles` (BLOCK_N 160, 176), `pv-n128`, `q-regs`, `lazy-rescale`, `q-stages-2`, `clusters`,
//   `q-release`, `cluster-heads`, `stream-k`, `chain`, `narrow-tail`, `copy-warp`.
//   Constraint: SHARED_BYTES ≤ 232448 (the sm_90 opt-in limit, static barriers included); only D 128
//   with BLOCK_N 128 and STAGES 4, or BLOCK_N 176 and STAGES 3 or 4, exceed it. Every valid
//   combination compiles with no spill, no stack frame and no wgmma serialisation (kernels/tools/
//   hopper_check.py), CHAIN 1 beside STREAM_K 1 at D 128 excepted (a cut item's chained turn keeps
//   its max and sums for the merge): the registry refuses that pair.
//
// Launch geometry and ABI (kernels/README.md: the TensorMaps ABI, its maps and "Variants")
//   grid = (ceil(S_q / BLOCK_M), H, B) (block x computes row block x, or gridDim.x − 1 − x when the
//   last rows see the most keys: see below), block = (NUM_WARPS + 4) · 32 threads, dynamic shared
//   memory
//     SHARED_BYTES = 1024 + Q_STAGES · BLOCK_M · HEAD_DIM · 2 + STAGES · 2 · BLOCK_N · HEAD_DIM · 2
//   bytes (1024 bytes of slack to align the tiles to the 1024-byte swizzle atom, the Q tile(s), then
//   STAGES K tiles, then STAGES V tiles; no padding: BLOCK_M and BLOCK_N are multiples of 8, so each
//   tile's 64-column panels are whole 1024-byte atoms, e.g. 176 rows × 128 bytes = 22 atoms), plus
//   8 · (Q_STAGES + 4 · STAGES) bytes of static shared memory for the mbarriers (with SCHEDULE 1,
//   20 · Q_STAGES more for q_empty and the item words, with Q_STAGES 2 and CHAIN 0 12 · Q_STAGES
//   more for the copy warp's o_full and o_whole, rounded up to 8: 24 or 64).
//   Defaults: D 64 → 123904, D 128 → 230400; D 128, BLOCK_N 176, STAGES 2 → 214016.
//   Parameters: the ten plain ones, three `const __grid_constant__` CUtensorMaps (Q, K, V), then
//   the five of the variants: kv_heads, window_left, window_right, cu_seqlens_q, cu_seqlens_kv.
//   SCHEDULE 1 (persistent): grid = (min(items, SMs × resident blocks per SM), 1, 1), where the items
//   are the ceil(S_q / BLOCK_M) · H · B row blocks of the grid above, and one more parameter last:
//   `unsigned int* sched_counter`, two words that are zero at launch and that the kernel leaves zero
//   (the host allocates them zeroed, once per prepared kernel, and launches on one stream). With
//   STREAM_K 1 the words are followed by the workspace (a flag word per block and consumer warp,
//   zero at launch and left zero, then one partial per block: hopper_schedule.cuh), which the host
//   allocates with them (Geometry::workspace_per_block). With Q_STAGES 2 and CHAIN 0 (O_TMA_STORE)
//   a last parameter after them: O's map (Q's boxes), the copy warp's.
//   CLUSTER 2: grid x = ceil(S_q / BLOCK_M) rounded up to even, clusters of (2, 1, 1) blocks (compiled
//   in), and K/V boxes of BLOCK_N / 2 rows (each block copies half of a tile). With SCHEDULE 1 the
//   items counted above are those even counts of row blocks (so the grid is even too), and the
//   kernel's own work items are their pairs. CLUSTER_HEADS 1: the row blocks are not rounded, the
//   query heads per K/V head must be even (H is then even, and so are the items), and the kernel's
//   work items are pairs of heads.
//   Maps: 16-bit elements as compiled, 128-byte swizzle, 3-D, box = 64 columns × BLOCK_M (Q) or
//   BLOCK_N (K, V) rows: one 64-column panel of a tile (a D = 128 row takes two boxes). Box
//   coordinates: dense (column, row, b·H + h) for Q, (column, row, b·H_kv + h / (H / H_kv)) for K
//   and V; varlen (column, head, cu_seqlens[b] + row), the box's middle extent of 1 making the
//   shared-memory image the same as dense ([rows][64 columns], 128-byte rows, swizzled). `batch` is
//   then the number of sequences (blockIdx.z), seq_q the longest query sequence (sizes the grid);
//   the kernel reads the lengths and offsets from cu_seqlens, so seq_kv is not read.
//
// Variants and tile skipping
//   - GQA/MQA: only the K/V box coordinate changes (head h reads K/V head h / (H / H_kv); no
//     division when H_kv = H). Q and O keep head h.
//   - Sliding window, causal (window_right 0): query row i sees keys [row_kv_lo(i), row_kv_hi(i))
//     (attn_common.cuh), both monotone in i, so a block's keys lie in [lo(first row), hi(last real
//     row)). The block (producer and consumers alike) visits tiles first_tile = lo(first row) /
//     BLOCK_N up to ceil(hi(last real row) / BLOCK_N), num_tiles = max(0, end − first) of them: work
//     proportional to (window + BLOCK_M) / BLOCK_N, not to S_kv; no tile at all and the block only
//     loads Q and writes zeros. Block tile j (slot j % STAGES) holds keys (first_tile + j) · BLOCK_N
//     onward. Each consumer warpgroup computes the tiles [wg_first, wg_end) its own rows see
//     (from its first row's lo, to its last row's hi) and skips (releases once landed) a prefix and
//     a suffix of the block's tiles. A computed tile is masked per element only where needed: keys
//     ≥ the row's hi when the tile ends past the warpgroup's first row's hi, keys < the row's lo
//     when it starts before the warpgroup's last row's lo (two separate passes, so a dense causal
//     problem runs exactly its old diagonal mask). The narrow tail (HOPPER_NARROW_TAIL: OVERLAP 1,
//     BLOCK_N 160 or 176, not with CHAIN 1, nor at D 128 with PV_N 64): where no row of the
//     warpgroup sees a key past the first 128 of its last tile (a ragged S_kv, a causal diagonal),
//     that tile's softmax scores those 128 keys only and masks them only where a row's limit falls
//     among them (TUNING.md, `narrow-tail`).
//     Block order: bottom-up (heaviest first) only when the last rows see the most keys: no left
//     window and a right bound (causal or window_right ≥ 0). With a left window the interior blocks
//     are all equal (with a left window only, the first rows are the heaviest: top-down already).
//   - Varlen: sequence b's lengths come from cu_seqlens (head_view); a block whose first row lies
//     past its sequence's end returns, whole, before the barriers are initialised. The masks align
//     bottom-right within the sequence. A box may run past the sequence's end into the next
//     sequence's rows (in bounds, not zero-filled): those keys are masked by the per-sequence
//     hi (≤ seq_kv; their V rows are multiplied by P = 0, so the inputs must be finite), those query
//     rows are computed but never stored. Rows past total_q / total_kv arrive as zeros.
//   Dense batches: rows past S_q and keys past S_kv arrive as zeros from the TMA (the maps' bounds).
//
// Shared-memory layout (what the TMA writes and the descriptors describe)
//   A tile of R rows × HEAD_DIM is stored as HEAD_DIM / 64 panels of 64 columns; panel p holds rows
//   of 128 bytes (columns 64p..64p+63), row r at byte r·128, and logical 16-byte chunk c of row r at
//   physical chunk c ^ (r & 7): the 128-byte swizzle (CUTLASS's Swizzle<3,4,3>, the TMA's
//   SWIZZLE_128B) on a 1024-byte aligned base. Eight rows form one 1024-byte swizzle atom; every
//   panel starts 1024-byte aligned.
//   - Q, K as K-major operands (K = head dim contiguous): stride byte offset (between 8-row groups)
//     1024; leading byte offset unused by the 128-byte swizzle (set to 16). k-step kk (16 columns =
//     32 bytes) starts at panel kk / 4 plus 32·(kk % 4) bytes; the hardware applies the XOR to the
//     final address, which is why the atoms must be 1024-byte aligned.
//   - V as the MN-major B operand of P·V (N = head dim contiguous, K = keys in rows): one swizzle
//     atom is 8 keys × 64 head-dim columns; 8-key groups are 1024 bytes apart. Each wgmma covers one
//     64-column panel (N = 64), so only that 8-key stride matters; both offset fields are set to
//     1024 (with PV_N 128 the leading byte offset is the panel stride). k-step kk (keys
//     16kk..16kk+15) starts at byte 2048·kk of the panel.
//
// Clusters (CLUSTER 2)
//   The cluster's blocks x = 2i, 2i + 1 take row blocks 2k and 2k + 1 (bottom-up too) and visit the
//   tiles of both row blocks' keys (block_tiles over the pair's 2 · BLOCK_M rows); a block skips
//   those its own rows do not see as a warpgroup does, and a block whose rows all lie past the
//   sequence's end (the padding block of an odd count, or varlen) stays to copy and stores nothing.
//   Every block's producer copies its half of each K or V tile (keys rank · BLOCK_N / 2 on) into the
//   same slot of both blocks with one multicast TMA per panel; each block's full barrier expects
//   the whole tile. A slot's empty barriers count this block's consumer threads and one arrival
//   per consumer warp of the other block (release_kv: lane 0's remote mbarrier arrive, predicated
//   rather than branched), so a producer overwrites a slot only once both blocks are done with it.
//   One cluster barrier after the barriers' initialisation (no copy or remote arrival before the
//   other block's barriers exist); none at the end: the producer thread waits for the last STAGES
//   tiles' releases (await_last_releases), after which no copy into the other block and no
//   arrival on this one is outstanding. Persistent clusters: hopper_schedule.cuh.
//
// Ordering
//   Barriers: q_full (1 arrival + Q's bytes), k_full[s] and v_full[s] (1 arrival + a tile's bytes),
//   k_empty[s] and v_empty[s] (one arrival per consumer thread). Block tile j uses slot j % STAGES,
//   and the phase of its slot's barriers with parity (j / STAGES) & 1; the producer waits for
//   k_empty[s]'s (v_empty[s]'s) phase of round j / STAGES − 1 before loading tile j's K (V) (j ≥
//   STAGES). The TMA writes and wgmma reads are both in the async proxy: completion of the full
//   barrier's phase makes the tile visible to the waiting consumers. A consumer arrives on
//   k_empty[s] (v_empty[s]) only after a wgmma.wait_group that covers every wgmma reading the
//   slot's K (V): wait_group 1 after S_{j+1} and P_j·V_j leaves only P_j·V_j pending. A warpgroup
//   that skips a tile (prefix or suffix) waits for it to land before releasing it, so that its
//   arrivals never count towards the slot's next round. Before the epilogue a named barrier (ids
//   1..3, one per consumer warpgroup) makes sure all four warps are past their last wgmma, which
//   read all 64 Q rows, before the rows are overwritten with O. The Q tile's release (q_empty,
//   persistent loop) follows a fence.proxy.async, which orders the consumers' generic-proxy
//   accesses of the tile before the next Q's TMA write (hopper_schedule.cuh has the protocol).
//   Ping-pong turns: warpgroup w bar.syncs on barrier 4 + w (256 = its 128 threads + the previous
//   warpgroup's 128 arrivals) before a batch and bar.arrives on the next warpgroup's barrier after
//   it. The last warpgroup arrives once on warpgroup 0's barrier before the block's first item;
//   every warpgroup takes exactly 1 + num_tiles turns per item (num_tiles for an item chained in,
//   whose first turn was the previous item's last: CHAIN; an empty one per skipped tile of
//   its prefix, the prologue's S of its first tile, one per computed tile, an empty one per skipped
//   tile of its suffix; none for an item without tiles), so the counts match item by item, the
//   turns run on from one item to the next, and warpgroup 0 consumes the block's last hand-over
//   with one more bar.sync before it exits. Turn k of any warpgroup waits for at most tile k, and
//   before it the warpgroup has released every K up to tile k − 1 and every V up to k − 2, so the
//   producer (STAGES ≥ 2) is never blocked by a turn that waits for it.
//   A warpgroup waits on its full barriers before its turn, never inside it. With CHAIN the
//   chained turn also waits for the next item's q_full (its words and Q) and for its first K tile,
//   the ring's next as any tile j + 1: the producer publishes that item once it has copied this
//   item's last tile, for which it needs only releases of tiles two before, made before that turn.
//   Accumulators are fenced (an empty asm on each register) around the async section so that the
//   compiler does not move their reads or writes across it; wgmma.fence precedes each batch of
//   wgmma. ptxas serialises wgmma (notes C7513/C7520) when a register a pending wgmma reads or
//   writes is redefined before the wait, or a batch straddles divergent code: hence the softmax only
//   touches S (complete) while P·V is pending, P is packed after the wait, the barrier waits come
//   before each batch, each OVERLAP branch is one straight pipeline, and the warp index goes through
//   a shuffle (warp-uniform for the compiler).

#include "attn_common.cuh"
#include "hopper_common.cuh"

#ifndef NUM_WARPS
#define NUM_WARPS 8
#endif
#ifndef BLOCK_M
#define BLOCK_M (16 * NUM_WARPS)
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef OVERLAP
#define OVERLAP 1
#endif
#ifndef PINGPONG
#define PINGPONG 1
#endif
#ifndef SCHEDULE
#define SCHEDULE 0
#endif
#ifndef Q_REGS
#define Q_REGS 0
#endif
#ifndef LAZY_RESCALE
#define LAZY_RESCALE 0
#endif
#ifndef Q_STAGES
#define Q_STAGES 1
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#ifndef Q_RELEASE
#define Q_RELEASE 0
#endif
#ifndef CLUSTER_HEADS
#define CLUSTER_HEADS 0
#endif
#ifndef STREAM_K
#define STREAM_K 0
#endif
#ifndef CHAIN
#define CHAIN 0
#endif
// Words of a published work item (Barriers::item): (b, h, m0), and with STREAM_K its key segment.
#define ITEM_WORDS (3 + STREAM_K)
// The query rows a cluster's blocks take together (one row block each, of one head; with
// CLUSTER_HEADS one row block of two heads): the rows whose keys they visit, and with SCHEDULE 1 a
// work item's; and the query heads of a work item. Macros: a namespace constant adds a PTX symbol.
#if CLUSTER_HEADS
#define ITEM_ROWS BLOCK_M
#define ITEM_HEADS CLUSTER
#else
#define ITEM_ROWS (CLUSTER * BLOCK_M)
#define ITEM_HEADS 1
#endif
#define LAZY_RESCALE_SLACK 8.f
#define LAZY_RESCALE_MIN_WINDOW 256
#ifndef PV_N
#if HEAD_DIM == 128
#define PV_N 128
#else
#define PV_N 64
#endif
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "hopper.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 4 || NUM_WARPS == 8 || NUM_WARPS == 12, "hopper.cu: NUM_WARPS (consumer warps) must be 4, 8 or 12");
static_assert(NUM_WARPS != 12 || HEAD_DIM == 64, "hopper.cu: NUM_WARPS 12 (160 registers per consumer thread) needs HEAD_DIM 64");
static_assert(BLOCK_M == 16 * NUM_WARPS, "hopper.cu: BLOCK_M must equal 64 * (NUM_WARPS / 4)");
static_assert(BLOCK_N == 64 || BLOCK_N == 128 || BLOCK_N == 160 || BLOCK_N == 176,
              "hopper.cu: BLOCK_N must be 64, 128, 160 or 176");
static_assert(BLOCK_N <= 128 || NUM_WARPS <= 8, "hopper.cu: BLOCK_N 160 and 176 need NUM_WARPS 4 or 8 (160 registers spill)");
// Every 64-column panel of a K/V tile (BLOCK_N rows of 128 bytes) must be whole 1024-byte swizzle
// atoms, so that every panel and slot stays 1024-byte aligned: 176 rows = 22 atoms, no padding.
static_assert(BLOCK_N % 8 == 0, "hopper.cu: BLOCK_N must be a multiple of 8 (whole swizzle atoms)");
static_assert(STAGES >= 2 && STAGES <= 4, "hopper.cu: STAGES must be 2, 3 or 4");
static_assert(OVERLAP == 0 || OVERLAP == 1, "hopper.cu: OVERLAP must be 0 or 1");
static_assert(PINGPONG == 0 || (PINGPONG == 1 && NUM_WARPS >= 8 && OVERLAP == 1),
              "hopper.cu: PINGPONG must be 0, or 1 with NUM_WARPS 8 or 12 and OVERLAP 1");
static_assert(SCHEDULE == 0 || SCHEDULE == 1, "hopper.cu: SCHEDULE must be 0 (grid) or 1 (persistent)");
static_assert(PV_N == 64 || (PV_N == 128 && HEAD_DIM == 128), "hopper.cu: PV_N must be 64, or 128 at HEAD_DIM 128");
static_assert(Q_REGS == 0 || (Q_REGS == 1 && BLOCK_N <= 128 && NUM_WARPS <= 8 && OVERLAP == 1), "hopper.cu: Q_REGS must be 0, or 1 with BLOCK_N 64 or 128, NUM_WARPS <= 8 and OVERLAP 1");
static_assert(LAZY_RESCALE == 0 || LAZY_RESCALE == 1, "hopper.cu: LAZY_RESCALE must be 0 or 1");
static_assert(Q_STAGES == 1 || (Q_STAGES == 2 && SCHEDULE == 1 && Q_REGS == 0),
              "hopper.cu: Q_STAGES must be 1, or 2 with SCHEDULE 1 and Q_REGS 0");
// With one Q tile the persistent producer (24 registers) spills with clusters.
static_assert(CLUSTER == 1 || (CLUSTER == 2 && (SCHEDULE == 0 || Q_STAGES == 2 || Q_RELEASE == 1)),
              "hopper.cu: CLUSTER must be 1, or 2 with SCHEDULE 0, Q_STAGES 2 or Q_RELEASE 1");
static_assert(Q_RELEASE == 0 || (Q_RELEASE == 1 && SCHEDULE == 1 && Q_REGS == 0 && Q_STAGES == 1),
              "hopper.cu: Q_RELEASE must be 0, or 1 with SCHEDULE 1, Q_REGS 0 and Q_STAGES 1");
static_assert(CLUSTER_HEADS == 0 || (CLUSTER_HEADS == 1 && CLUSTER == 2 && SCHEDULE == 1),
              "hopper.cu: CLUSTER_HEADS must be 0, or 1 with CLUSTER 2 and SCHEDULE 1");
// With one Q tile the persistent producer (24 registers) spills the tail's arithmetic.
static_assert(STREAM_K == 0 || (STREAM_K == 1 && SCHEDULE == 1 && Q_STAGES == 2),
              "hopper.cu: STREAM_K must be 0, or 1 with SCHEDULE 1 and Q_STAGES 2");
// The next item's Q must be in its own tile during this item's last turn, and that turn overlaps.
static_assert(CHAIN == 0 || (CHAIN == 1 && SCHEDULE == 1 && Q_STAGES == 2 && OVERLAP == 1),
              "hopper.cu: CHAIN must be 0, or 1 with SCHEDULE 1, Q_STAGES 2 and OVERLAP 1");
static_assert(sizeof(elem_t) == 2, "hopper.cu: 16-bit elements expected");
// The narrow tail ("Variants and tile skipping"): its second copy of the steady key tile costs
// registers, and ptxas 13.0 spills with it where CHAIN is 1 or, at D 128, where PV_N is 64; those
// keep the one copy (no tuning takes them; TUNING.md, `narrow-tail`).
#define HOPPER_NARROW_TAIL (OVERLAP && BLOCK_N > 128 && !CHAIN && (HEAD_DIM == 64 || PV_N == 128))
// The persistent loop's two Q tiles (Q_STAGES 2) hand each item's staged O to a copy warp, which
// stores it with TMA (copy_o_tiles), rather than storing it themselves. Not with CHAIN (opt-in),
// some of whose D 128 configs then spilled (TUNING.md, `copy-warp`); they keep the consumers' stores.
#define O_TMA_STORE (SCHEDULE && Q_STAGES == 2 && !CHAIN)

namespace hopper_attn {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::row_kv_hi;
using attn::row_kv_lo;
using attn::smem_addr;


using namespace hopper_ptx;

constexpr int D = HEAD_DIM;
constexpr int WARPGROUPS = NUM_WARPS / 4;            // consumer warpgroups
constexpr int CONSUMER_THREADS = NUM_WARPS * 32;
static_assert(BLOCK_M == 64 * WARPGROUPS, "64 query rows per consumer warpgroup");
constexpr int THREADS = CONSUMER_THREADS + 128;      // + the producer warpgroup
constexpr int PANELS = D / 64;                 // 64-column (128-byte) panels per tile row
constexpr int Q_TILE_BYTES = BLOCK_M * D * 2;
constexpr int KV_TILE_BYTES = BLOCK_N * D * 2;
constexpr int QK_K_STEPS = D / 16;             // k-steps of Q·Kᵀ (over head dim)
constexpr int PV_K_STEPS = BLOCK_N / 16;       // k-steps of P·V (over keys)
constexpr int S_REGS = BLOCK_N / 2;            // f32 S accumulator registers per thread
constexpr int S_CHUNKS = BLOCK_N / 8;          // 8-column chunks of S
// Registers per thread after setmaxnreg (with one consumer warpgroup every thread already has the
// 255 of the entry cap): 128 · 24 + 256 · 240 = 64512 and 128 · 24 + 384 · 160 = 64512 ≤ 65536.
#if NUM_WARPS == 8
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
#elif NUM_WARPS == 12
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 160;
#endif

// The pipeline's steps, shared with micro_hopper.cu (included here, inside the namespace and after
// the geometry above: hopper_pipeline.cuh says why); PTX wrappers: hopper_common.cuh.
#include "hopper_pipeline.cuh"

// ---- Steps of the kernel beyond the shared pipeline ----------------------------------------------

// Inter-warpgroup ping-pong (PINGPONG 1): consumer warpgroup w issues a batch of wgmma only in its
// turn, bar.sync on barrier TURN_BARRIER + w (its 128 threads + 128 arrivals of the previous
// warpgroup), and hands the turn over right after issuing (bar.arrive on the next one's barrier),
// round-robin, so that one warpgroup's softmax runs while another's GEMMs use the tensor cores.
#if PINGPONG
constexpr u32 TURN_BARRIER = 4;  // 1..3: the epilogue's per-warpgroup barriers
#endif
__device__ __forceinline__ void turn_begin(int wg) {
#if PINGPONG
    named_barrier_sync(TURN_BARRIER + wg, 256);
#endif
}
__device__ __forceinline__ void turn_end(int wg) {
#if PINGPONG
    named_barrier_arrive(TURN_BARRIER + (wg + 1 == WARPGROUPS ? 0 : wg + 1), 256);
#endif
}

// The turns of PINGPONG run round-robin over the whole block, item after item: warpgroup 0's first
// turn of an item follows the last warpgroup's last turn of the previous one, so warpgroup 0 starts
// the next item (its Q·Kᵀ on the tensor cores) while the others finish this one (their last P·V,
// their epilogue), where a hand-back per item would drain the pipeline. Every warpgroup takes as
// many turns per item (skipped tiles take empty ones), so the hand-overs pending on warpgroup 0's
// barrier are one before its every turn and after the block's last: turns_open gives the first,
// turns_close consumes the last, so that none is left pending at exit.
__device__ __forceinline__ void turns_open(int wg) {
#if PINGPONG
    if (wg == WARPGROUPS - 1) named_barrier_arrive(TURN_BARRIER, 256);
#endif
    (void)wg;
}
__device__ __forceinline__ void turns_close(int wg) {
#if PINGPONG
    if (wg == 0) named_barrier_sync(TURN_BARRIER, 256);
#endif
    (void)wg;
}

// Byte offset of element column `col` (a multiple of 8 for whole chunks) of row `row` in a swizzled,
// panelled tile of `rows` rows (see the header: 128-byte panels, chunk ^ (row & 7)).
__device__ __forceinline__ u32 tile_offset(int rows, int row, int col) {
    const int panel = col >> 6;
    const int chunk = (col >> 3) & 7;
    return static_cast<u32>(panel * rows * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) + (col & 7) * 2);
}

#if Q_REGS
// This thread's wgmma A fragments of Q·Kᵀ, read once from the swizzled Q tile at `smem`: k-step kk
// holds row r's and row r + 8's columns 16kk + 2t, +1 (a0, a1) and 8 columns on (a2, a3), r the
// warp's first row plus g (the layout pack_p gives P).
__device__ __forceinline__ void load_q_frag(u32 (&q_frag)[QK_K_STEPS][4], const unsigned char* smem, int warp_row0,
                                            int g, int t) {
#pragma unroll
    for (int kk = 0; kk < QK_K_STEPS; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = warp_row0 + g + 8 * (i & 1);
            const int col = 16 * kk + 8 * (i >> 1) + 2 * t;
            q_frag[kk][i] = *reinterpret_cast<const u32*>(smem + tile_offset(BLOCK_M, row, col));
        }
}
#endif

// A consumer's position in the K/V ring: the next tile's slot and the parity of that slot's current
// round. A block's tiles use the slots in turn across all of its work items.
struct Ring {
    int slot;
    u32 phase;
};

// The key tiles a row block [m0, m0 + BLOCK_M) visits, the same for the producer and every consumer:
// from the tile of the first key its first row may see (sliding window) to the tile of the last key
// its last real row may see (causal or right window). Row ranges move monotonically with the row,
// so the block's keys lie in [row_kv_lo(first row), row_kv_hi(last row)). No tile: the block writes
// zeros.
struct Tiles {
    int first;  // the block's tile 0 holds keys first · BLOCK_N onward
    int count;
};
// `rows`: the rows whose keys count, BLOCK_M, or with CLUSTER 2 the pair's 2 · BLOCK_M from its
// first row.
__device__ __forceinline__ Tiles block_tiles(int m0, int len_q, int len_kv, int causal, int window_left,
                                             int window_right, int rows = BLOCK_M) {
    const int last_row = min(m0 + rows, len_q) - 1;
    const int first = row_kv_lo(m0, len_q, len_kv, window_left) / BLOCK_N;
    const int end = (row_kv_hi(last_row, len_q, len_kv, causal, window_right) + BLOCK_N - 1) / BLOCK_N;
    Tiles tiles;
    tiles.first = first;
    tiles.count = max(end - first, 0);
    return tiles;
}

// The first row of the work item whose row block starts at m0: the cluster's pair of row blocks
// (ITEM_ROWS rows) with CLUSTER 2, the row block itself otherwise. Its key tiles are both blocks'.
__device__ __forceinline__ int item_first_row(int m0) {
#if CLUSTER > 1
    return static_cast<int>(static_cast<unsigned>(m0) / ITEM_ROWS * ITEM_ROWS);  // m0 ≥ 0
#else
    return m0;
#endif
}

// TMA box coordinates after the column (header: the maps). Dense: (row, batch·head) over [B·H, S, D],
// K/V head b·H_kv + h / (H / H_kv). Varlen: (head, packed row) over [total, H, D], the sequence's
// rows starting at cu_seqlens[b]. The K/V coordinates are those of the block's first tile; each
// further tile adds (step1, step2): (BLOCK_N, 0) dense (rows are coordinate 1), (0, BLOCK_N) varlen
// (rows are coordinate 2).
struct Coords {
    int q1, q2;
    int kv1, kv2;
    int step1, step2;
};
__device__ __forceinline__ Coords box_coords(int b, int h, int m0, int kv_first, int heads, int kv_heads,
                                             const int* cu_seqlens_q, const int* cu_seqlens_kv) {
    const int kv_head = kv_heads == heads ? h : h / (heads / kv_heads);  // no division for MHA
    const bool varlen = cu_seqlens_q != nullptr;
    const int q_row = varlen ? cu_seqlens_q[b] + m0 : m0;
    const int kv_row = varlen ? cu_seqlens_kv[b] + kv_first : kv_first;
    const int q_head = varlen ? h : b * heads + h;
    const int kv_head_c = varlen ? kv_head : b * kv_heads + kv_head;
    Coords c;
    c.q1 = varlen ? q_head : q_row;
    c.q2 = varlen ? q_row : q_head;
    c.kv1 = varlen ? kv_head_c : kv_row;
    c.kv2 = varlen ? kv_row : kv_head_c;
    c.step1 = varlen ? 0 : BLOCK_N;
    c.step2 = varlen ? BLOCK_N : 0;
    return c;
}

#if CLUSTER > 1
// With CLUSTER 2 the two blocks of a cluster visit the same key tiles (the pair's: see the kernel),
// and each block's producer copies its share of every K or V tile, KV_SHARE_ROWS keys (the rows of
// the K/V boxes: BLOCK_N / CLUSTER), to the same slot of both blocks (multicast): block r the keys
// r · KV_SHARE_ROWS on of the tile, into its rows r · KV_SHARE_ROWS on (whole swizzle atoms:
// BLOCK_N / 2 is a multiple of 8, so the 1024-byte alignment, and with it the swizzle, holds).
// Each block's full barrier expects the whole tile: both shares complete on it. The slot's empty
// barriers, which this producer waited on, count the consumers of both blocks (release_kv), so
// neither block's slot is overwritten while it is read. A share's bytes may reach the other block's
// barrier before that block's producer announces the tile: the transaction count runs negative
// within the phase, which cannot complete before that announcement (its one pending arrival).
#define KV_SHARE_ROWS (BLOCK_N / CLUSTER)

// The producer thread's last wait with CLUSTER 2, after its `copied` tiles: the release (k_empty,
// v_empty) of each tile no later copy waited for, the last STAGES. Those releases count the other
// block's consumers, who read the tiles' shares this block multicast and arrive remotely on this
// block's barriers, so that neither is still on its way when the block exits.
__device__ __forceinline__ void await_last_releases(Barriers& bars, int copied) {
    for (int n = max(copied - STAGES, 0); n < copied; ++n) {
        const int slot = n % STAGES;
        const u32 parity = (n / STAGES) & 1;
        mbar_wait(smem_addr(&bars.k_empty[slot]), parity);
        mbar_wait(smem_addr(&bars.v_empty[slot]), parity);
    }
}
__device__ __forceinline__ void load_kv_share(u32 full, int slot, u32 tiles, const HopperTensorMap* map,
                                              const Coords& c) {
    const int rank = static_cast<int>(cluster_rank());
    const u32 dst = tiles + slot * KV_TILE_BYTES + rank * KV_SHARE_ROWS * 128;
    const int coord1 = c.kv1 + rank * (c.step1 / CLUSTER);  // dense: rows are coordinate 1
    const int coord2 = c.kv2 + rank * (c.step2 / CLUSTER);  // varlen: coordinate 2
    mbar_arrive_expect_tx(full, KV_TILE_BYTES);
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
        tma_load_3d_multicast(dst + p * BLOCK_N * 128, map, 64 * p, coord1, coord2, full, (1u << CLUSTER) - 1u);
}
#endif

// The producer thread's steps beyond the shared loads (hopper_pipeline.cuh): the next `count` K/V
// tiles of an item, from c's current tile on, each into the ring's next slot, its K once the
// consumers are done with the slot's previous K (after that tile's Q·Kᵀ), its V once they are done
// with the slot's previous V (after that tile's P·V): STAGES tiles earlier, maybe of an earlier item
// of the block. The consumers issue Q·K_{j+1}ᵀ with P_j·V_j, and release K_{j+1} half a tile before
// V_j: K_{j+1} and V_j become free to copy at about the same time, so the plain order K_j, V_j,
// K_{j+1} costs nothing over FA3's K_{j+1}, V_j (and needs no second cursor, which spilled in the
// persistent producer's 24 registers).
// `copied` counts the block's tiles copied so far (over all its items): tile n goes to slot n %
// STAGES, in round n / STAGES (one register where a Ring takes three: the persistent producer runs
// in 24 registers (setmaxnreg), and the second release wait spilled with a Ring there).
__device__ __forceinline__ void produce_kv(Barriers& bars, int& copied, u32 k_tiles, u32 v_tiles,
                                           const HopperTensorMap* map_k, const HopperTensorMap* map_v, Coords& c,
                                           int count) {
    for (int j = 0; j < count; ++j, ++copied) {
        const int slot = copied % STAGES;
        const u32 released = ((copied / STAGES) & 1) ^ 1;  // parity of the previous round
        // Round r of a slot waits for the consumers' release of round r − 1.
        if (copied >= STAGES) mbar_wait(smem_addr(&bars.k_empty[slot]), released);
#if CLUSTER > 1
        load_kv_share(smem_addr(&bars.k_full[slot]), slot, k_tiles, map_k, c);
#else
        load_kv_tile(smem_addr(&bars.k_full[slot]), slot, k_tiles, map_k, c.kv1, c.kv2);
#endif
        if (copied >= STAGES) mbar_wait(smem_addr(&bars.v_empty[slot]), released);
#if CLUSTER > 1
        load_kv_share(smem_addr(&bars.v_full[slot]), slot, v_tiles, map_v, c);
#else
        load_kv_tile(smem_addr(&bars.v_full[slot]), slot, v_tiles, map_v, c.kv1, c.kv2);
#endif
        c.kv1 += c.step1;
        c.kv2 += c.step2;
    }
}

#include "hopper_schedule.cuh"

// ---- one row block of one (sequence, head), as a consumer warpgroup computes it ------------------

// Everything about the item and this thread that the consumer steps need.
struct ConsumerItem {
    unsigned char* q_smem;  // the item's Q tile (where its O is staged), generic and shared addresses
    u32 q_tile;
    int m0;          // the item's first query row in its sequence
    int len_q;       // the sequence's query rows and keys
    int len_kv;
    Tiles tiles;     // the block's key tiles (with STREAM_K, of the item's segment)
    elem_t* o_head;  // row 0 of this (sequence, head) in O
    int o_stride;    // elements between rows of O
#if STREAM_K
    int split;              // SPLIT_WHOLE, SPLIT_HEAD or SPLIT_TAIL
    unsigned int* words;    // the persistent kernel's words (the workspace after the counter)
#endif
};

// A consumer thread's softmax state between its turns: P of the tile whose P·V comes next, the
// running max and sum of rows g and g + 8, and the factor O takes before that P·V. With CHAIN it
// carries over from an item's last turn to the next item (which that turn began).
struct RowState {
    u32 p_frag[PV_K_STEPS][4];
    float row_max[2];
    float row_sum[2];
    float rescale[2];
};


#include "hopper_epilogue.cuh"
#include "hopper_consume.cuh"

}  // namespace hopper_attn

// The cap at entry (min blocks 1) gives every thread 65536 / THREADS registers (168 with two consumer
// warpgroups), which setmaxnreg then moves from the producer to the consumers.
extern "C" __global__ void
#if CLUSTER > 1
    __cluster_dims__(CLUSTER, 1, 1)
#endif
    __launch_bounds__(hopper_attn::THREADS, 1)
    attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
             elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
             const __grid_constant__ HopperTensorMap map_q, const __grid_constant__ HopperTensorMap map_k,
             const __grid_constant__ HopperTensorMap map_v, int kv_heads, int window_left, int window_right,
             const int* cu_seqlens_q, const int* cu_seqlens_kv
#if SCHEDULE
             , unsigned int* sched_counter
#endif
#if O_TMA_STORE
             , const __grid_constant__ HopperTensorMap map_o
#endif
    ) {
    using namespace hopper_attn;
    (void)q;  // Q, K and V are read through their tensor maps
    (void)k;
    (void)v;

#if !SCHEDULE
    // This (sequence, head)'s lengths and O rows: the kernel's own for a dense batch, cu_seqlens'
    // for varlen. The masks align bottom-right within the sequence.
    (void)batch;  // the batch (sequence) index comes from blockIdx.z
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const attn::HeadView view =
        attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
    // Heaviest blocks first when the blocks' key ranges differ by their position: with no left
    // window and a right bound (causal) the last rows see the most keys, so the grid runs bottom-up.
    // With a left window the interior blocks are equal (and with a left window only, the first rows
    // see the most keys: top-down already).
    const bool bottom_up = window_left < 0 && (causal || window_right >= 0);
    const int m0 = (bottom_up ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BLOCK_M;
    // With CLUSTER 2 the cluster's two blocks (x = 2i, 2i + 1; the grid is even) take row blocks 2k
    // and 2k + 1 either way (bottom-up too), and visit the key tiles of both: the same tiles, each
    // copied once for the pair (multicast); a block whose own rows see none of a tile skips it as a
    // warpgroup does. Varlen: the grid is sized by the longest sequence; a block (a pair) past this
    // one's end leaves, whole, before any barrier (never taken for a dense batch: the grid covers
    // seq_q); a block past the end beside one that is not stays (its producer copies the pair's
    // tiles) and stores nothing.
    const int first_row = item_first_row(m0);
    if (first_row >= view.seq_q) return;
    const Tiles tiles =
        block_tiles(first_row, view.seq_q, view.seq_kv, causal, window_left, window_right, ITEM_ROWS);
#endif

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ Barriers bars;
    // The swizzle is applied to absolute shared addresses: align the tiles to the 1024-byte atom.
    const u32 raw_addr = smem_addr(smem_raw);
    const u32 base = (raw_addr + 1023u) & ~1023u;
    unsigned char* smem = smem_raw + (base - raw_addr);
    const u32 q_tile = base;
    const u32 k_tiles = q_tile + Q_STAGES * Q_TILE_BYTES;  // after the Q buffers
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    // Warp-uniform for the compiler (a shuffle): roles and descriptors then branch uniformly.
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);

    if (tid == CONSUMER_THREADS) init_pipeline(bars, &map_q, &map_k, &map_v);
#if CLUSTER > 1
    cluster_sync();  // both blocks' barriers are initialised before either block's copies or releases
#else
    __syncthreads();  // the only block-wide barrier: the barriers are initialised
#endif

    if (warp >= NUM_WARPS) {
        // ---- producer warpgroup: one thread issues the copies, the other warps leave ---------------
#if NUM_WARPS >= 8
        setmaxnreg_dec<PRODUCER_REGS>();
#endif
#if SCHEDULE
        // Its first warp schedules (all 32 lanes: the varlen scan), lane 0 issues the copies.
        if (warp == NUM_WARPS)
            schedule_and_produce(bars, q_tile, k_tiles, v_tiles, &map_q, &map_k, &map_v, batch, heads, kv_heads,
                                 seq_q, seq_kv, causal, window_left, window_right, cu_seqlens_q, cu_seqlens_kv,
                                 sched_counter, lane);
#if O_TMA_STORE
        // Its second warp's lane 0 stores the items' O tiles.
        if (warp == NUM_WARPS + 1 && lane == 0)
            copy_o_tiles(bars, q_tile, &map_o, heads, kv_heads, cu_seqlens_q, cu_seqlens_kv);
#endif
#else
        if (warp == NUM_WARPS && lane == 0) {
            Coords c = box_coords(b, h, m0, tiles.first * BLOCK_N, heads, kv_heads, cu_seqlens_q, cu_seqlens_kv);
            int copied = 0;
            load_q_tile(bars, q_tile, &map_q, c.q1, c.q2);
            produce_kv(bars, copied, k_tiles, v_tiles, &map_k, &map_v, c, tiles.count);
#if CLUSTER > 1
            // The block stays until the other block's consumers have released the last tiles
            // (CUTLASS's producer tail): then every copy this block multicast has landed there, and
            // every arrival of theirs on this block's barriers has been counted.
            await_last_releases(bars, copied);
#endif
        }
#endif
        return;
    }

    // ---- consumer warpgroups ----------------------------------------------------------------------
#if NUM_WARPS >= 8
    setmaxnreg_inc<CONSUMER_REGS>();
#endif
    Ring ring = {0, 0u};
    RowState rows;
    turns_open(warp >> 2);
#if SCHEDULE
    // Item after item, as the producer announces them with their Q; each thread releases the Q tile
    // once the item is stored (with Q in registers, once it has read its fragments).
    // Item `it`'s words, once its Q has landed (q_full); false when none is left.
    auto read_item = [&](u32 it, ConsumerItem& item) {
        const int buffer = it % Q_STAGES;
        mbar_wait(smem_addr(&bars.q_full[buffer]), (it / Q_STAGES) & 1);
        // Uniform for the compiler (shuffles), like the warp index: the wgmma paths branch on them.
        const int m0 = __shfl_sync(0xffffffffu, bars.item[buffer][2], 0);
        if (m0 < 0) return false;
        const int b = __shfl_sync(0xffffffffu, bars.item[buffer][0], 0);
        const int h = __shfl_sync(0xffffffffu, bars.item[buffer][1], 0);
        const attn::HeadView view =
            attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
        item.q_smem = smem + buffer * Q_TILE_BYTES;
        item.q_tile = q_tile + buffer * Q_TILE_BYTES;
        item.m0 = m0;
        item.len_q = view.seq_q;
        item.len_kv = view.seq_kv;
        item.tiles = block_tiles(item_first_row(m0), view.seq_q, view.seq_kv, causal, window_left, window_right,
                                 ITEM_ROWS);
        item.o_head = o + view.q;
        item.o_stride = view.q_stride;
#if STREAM_K
        // The item's key segment (schedule_and_produce): x is the tail's first tile or the head's count.
        const int split = __shfl_sync(0xffffffffu, bars.item[buffer][3], 0);
        item.split = split & 3;
        item.words = sched_counter;
        cut_tiles(item.tiles, split);
#endif
        return true;
    };
    // Items that chain (CHAIN): those of an unmasked dense batch (whole, or a stream-K segment) whose
    // rows all lie in the sequence, so that every warpgroup computes every one of their tiles.
    const bool unmasked_dense = !causal && window_left < 0 && window_right < 0 && cu_seqlens_q == nullptr;
    auto chainable = [&](const ConsumerItem& item) {
        return unmasked_dense && item.tiles.count > 0 && item.m0 + BLOCK_M <= item.len_q;
    };
    ConsumerItem item;
    ConsumerItem next;
    int next_read = -1;  // whether the previous item read this one (CHAIN, its last turn): 1 found, 0 none
    bool chained_in = false;
    for (u32 it = 0;; ++it) {
        if (next_read < 0) {
            if (!read_item(it, item)) break;
        } else if (next_read == 0) {
            break;
        } else {
            item = next;
        }
        next_read = -1;
        auto chain_next = [&](u32& next_q_tile, int& next_kv0) {
            if (!chainable(item)) return false;
            next_read = read_item(it + 1, next) ? 1 : 0;
            next_q_tile = next.q_tile;
            next_kv0 = next.tiles.first * BLOCK_N;
            return next_read == 1 && chainable(next);
        };
        chained_in = consume_item(bars, k_tiles, v_tiles, ring, item, rows, chained_in, chain_next, causal,
                                  window_left, window_right, scale, warp, lane);
#if O_TMA_STORE
        // O staged (and, where the copy warp does not store it, stored): to the copy warp, which
        // releases the tile once its copy has read it.
        hand_o_tile(bars, it % Q_STAGES, o_tile_copied(item), warp == 0 && lane == 0);
#elif !Q_REGS && !Q_RELEASE
        // After the staged O's reads and writes (with Q in registers consume_item released the tile
        // once it had read Q, with Q_RELEASE after its last Q·Kᵀ).
        release_q_tile(bars, it % Q_STAGES);
#endif
    }
#else
    mbar_wait(smem_addr(&bars.q_full[0]), 0);
    ConsumerItem item;
    item.q_smem = smem;
    item.q_tile = q_tile;
    item.m0 = m0;
    item.len_q = view.seq_q;
    item.len_kv = view.seq_kv;
    item.tiles = tiles;
    item.o_head = o + view.q;
    item.o_stride = view.q_stride;
    consume_item(bars, k_tiles, v_tiles, ring, item, rows, false, [](u32&, int&) { return false; },
                 causal, window_left, window_right, scale, warp, lane);
#endif
    // With CLUSTER 2 no closing cluster barrier: the producer thread keeps the block (see
    // await_last_releases).
    turns_close(warp >> 2);
}
