// hopper_pipeline.cuh — the per-tile steps of hopper's K/V pipeline, shared by `hopper.cu` and the
// micro-benchmark of that pipeline, `micro_hopper.cu`, so that the micro times exactly the code the
// kernel runs: the barriers and their initialisation, the producer's Q and K/V copies into the
// mbarrier ring, the ring's slot advance, and the consumers' accumulators, S = Q·Kᵀ wgmma, online
// softmax, P packing, O rescale and P·V wgmma, and the whole unoverlapped key tile made of them
// (hopper's OVERLAP 0 loop body, the micro's loop body). The loops that chain them (hopper's
// OVERLAP, PINGPONG and skipping, the micro's plain loop) stay in the kernels. hopper.cu's header
// explains the layouts, descriptors and barrier protocol these steps implement, hopper_consume.cuh's
// the fragment layouts.
//
// How to include: after `attn_common.cuh` and `hopper_common.cuh`, INSIDE the kernel's namespace
// (`namespace hopper_attn { ... #include "hopper_pipeline.cuh" ... }`), once the kernel has defined
// its geometry there: CONSUMER_THREADS, PANELS, Q_TILE_BYTES, KV_TILE_BYTES, QK_K_STEPS,
// PV_K_STEPS, S_REGS and S_CHUNKS (from NUM_WARPS, HEAD_DIM, BLOCK_M, BLOCK_N), with BLOCK_M,
// BLOCK_N and STAGES defined, and
// `using namespace hopper_ptx` and the `attn::` helpers (exp2_ftz, pack_elem2, smem_addr) in scope.
// Why inside: NVRTC emits every namespace-scope constant as a PTX symbol named after its namespace,
// in declaration order; leaving the geometry where each kernel always declared it keeps both
// kernels' PTX byte-identical to what they were before this header existed
// (kernels/tools/ptx_identity.py). Everything here is __forceinline__, so it adds no PTX symbol.
// For the same reason the functions stop at the granularity the kernels always called: NVVM
// simplifies each callee before inlining it, so wrapping a whole tile (or the slot advance, in the
// micro's loops) in one more function reorders or hoists instructions. The one whole tile both
// kernels run, the unoverlapped one, is therefore a macro (HOPPER_CONSUME_TILE, at the end).
// `SCHEDULE` (hopper.cu's persistent scheduler; undefined, i.e. 0, in the micro) adds the
// persistent schedule's barrier and item words to `Barriers`; `Q_STAGES` (hopper.cu's Q buffers,
// 1 unless the kernel defines it) sizes the Q barriers and item words.
#pragma once

#ifndef Q_STAGES
#define Q_STAGES 1
#endif
// hopper.cu's CLUSTER (1 unless the kernel defines it): blocks of a cluster share each K/V tile,
// every block's producer copying its share to all of them (multicast), so that a slot is free only
// once the consumers of every block of the cluster have released it.
#ifndef CLUSTER
#define CLUSTER 1
#endif
// hopper.cu's O_TMA_STORE (0 unless the kernel defines it): a copy warp stores each persistent
// item's O from its Q tile (o_full, o_whole below), and releases the tile alone.
#ifndef O_TMA_STORE
#define O_TMA_STORE 0
#endif

#define HOPPER_NEG_INF __int_as_float(0xff800000u)
// hopper.cu's PV_N 128 (the micro, which does not define PV_N, keeps N = 64 per panel): one
// m64n128k16 P·V wgmma per 16 keys over both of O's panels. Every wgmma descriptor is its tile's
// base descriptor plus the k-step's byte offset / 16, added to the low word alone (`desc_plus`),
// rather than encoded anew (an add, shift, mask and moves on the uniform datapath per operand).
// Together they shorten the steady key tile of the D 128 defaults (SASS; TUNING.md, `pv-n128`).
#if defined(PV_N) && PV_N == 128
#define HOPPER_PV_N128 1
#else
#define HOPPER_PV_N128 0
#endif

// ---- the producer ---------------------------------------------------------------------------------

// The pipeline's barriers (static shared memory, beside the dynamic tiles).
struct Barriers {
    u64 q_full[Q_STAGES];   // Q buffer i has landed (transactions: the Q tile); SCHEDULE 1: and
                            // item[i] is set
    u64 k_full[STAGES];     // K of the slot's tile has landed
    u64 v_full[STAGES];     // V of the slot's tile has landed
    u64 k_empty[STAGES];    // every consumer thread is done with the slot's K tile (its Q·Kᵀ has
                            // completed; CONSUMER_THREADS arrivals, and with CLUSTER 2 one more
                            // per consumer warp of the other block: EMPTY_ARRIVALS)
    u64 v_empty[STAGES];    // every consumer thread is done with the slot's V tile (its P·V has
                            // completed; EMPTY_ARRIVALS as k_empty)
#if SCHEDULE
    u64 q_empty[Q_STAGES];  // every consumer thread is done with Q buffer i's item: past its last
                            // wgmma and its O rows staged there and stored (CONSUMER_THREADS
                            // arrivals); with Q_REGS 1, once it has read its Q fragments; with
                            // O_TMA_STORE the copy warp's one arrival, once its copy of O has read
                            // the buffer
#if O_TMA_STORE
    u64 o_full[Q_STAGES];   // every consumer thread has staged its O rows in Q buffer i (and, for
                            // an item the copy warp does not store, stored them: CONSUMER_THREADS
                            // arrivals)
    int o_whole[Q_STAGES];  // with o_full's phase: 1 = the copy warp stores buffer i's tile (every
                            // row in the sequence, the item whole), 0 = the consumers stored it
#endif
#if CLUSTER > 1
    u64 ticket_full;        // rank 1: the cluster's next ticket has landed in `ticket` (4 bytes of
                            // transactions, st.async from rank 0's producer)
    u64 ticket_empty;       // rank 0: rank 1 has read the last ticket sent (1 remote arrival)
#endif
    int item[Q_STAGES][ITEM_WORDS];  // the item q_full[i]'s phase brings: (b, h, m0), with STREAM_K
                                     // its key segment (split_word); m0 < 0: no item left
#if CLUSTER > 1
    unsigned int ticket;    // rank 1: the ticket of the device counter that rank 0 drew for both
#endif
#endif
};

// A slot's k_empty and v_empty arrivals: this block's consumer threads, and one per consumer warp of
// every other block of the cluster (release_kv).
#define EMPTY_ARRIVALS (CONSUMER_THREADS + (CLUSTER - 1) * (CONSUMER_THREADS / 32))

// One thread of the block (before the block-wide barrier that publishes them): prefetches the
// tensor maps and initialises every barrier, then makes them visible to the copy engine.
__device__ __forceinline__ void init_pipeline(Barriers& bars, const HopperTensorMap* map_q,
                                              const HopperTensorMap* map_k, const HopperTensorMap* map_v) {
    prefetch_tensor_map(map_q);
    prefetch_tensor_map(map_k);
    prefetch_tensor_map(map_v);
#pragma unroll
    for (int i = 0; i < Q_STAGES; ++i) mbar_init(smem_addr(&bars.q_full[i]), 1);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(smem_addr(&bars.k_full[s]), 1);
        mbar_init(smem_addr(&bars.v_full[s]), 1);
        mbar_init(smem_addr(&bars.k_empty[s]), EMPTY_ARRIVALS);
        mbar_init(smem_addr(&bars.v_empty[s]), EMPTY_ARRIVALS);
    }
#if SCHEDULE
#pragma unroll
    for (int i = 0; i < Q_STAGES; ++i) {
        mbar_init(smem_addr(&bars.q_empty[i]), O_TMA_STORE ? 1 : CONSUMER_THREADS);
#if O_TMA_STORE
        mbar_init(smem_addr(&bars.o_full[i]), CONSUMER_THREADS);
#endif
    }
#if CLUSTER > 1
    mbar_init(smem_addr(&bars.ticket_full), 1);
    mbar_init(smem_addr(&bars.ticket_empty), 1);
#endif
#endif
    fence_barrier_init();
}

// The next slot of the ring; a lap of all STAGES slots flips the parity of their barriers' phase.
__device__ __forceinline__ void advance_slot(int& slot, u32& phase) {
    if (++slot == STAGES) {
        slot = 0;
        phase ^= 1;
    }
}

// The producer thread's copy of the Q tile into Q buffer `buffer` of the Q tiles at `q_tiles` (box
// coordinates (row or head, head or row) after the column: hopper.cu's maps), completing on the
// buffer's q_full barrier.
__device__ __forceinline__ void load_q_tile(Barriers& bars, u32 q_tiles, const HopperTensorMap* map_q, int coord1,
                                            int coord2, int buffer = 0) {
    const u32 q_full = smem_addr(&bars.q_full[buffer]);
    const u32 q_tile = q_tiles + buffer * Q_TILE_BYTES;
    mbar_arrive_expect_tx(q_full, Q_TILE_BYTES);
#pragma unroll
    for (int p = 0; p < PANELS; ++p) tma_load_3d(q_tile + p * BLOCK_M * 128, map_q, 64 * p, coord1, coord2, q_full);
}

// The producer thread's copy of one K or V tile (`full` and `tiles`: k_full[slot] and the K tiles,
// or v_full[slot] and the V tiles) into ring slot `slot`, completing on `full`. The caller has
// waited for the slot's release of that tensor (k_empty or v_empty).
__device__ __forceinline__ void load_kv_tile(u32 full, int slot, u32 tiles, const HopperTensorMap* map, int coord1,
                                             int coord2) {
    const u32 dst = tiles + slot * KV_TILE_BYTES;
    mbar_arrive_expect_tx(full, KV_TILE_BYTES);
#pragma unroll
    for (int p = 0; p < PANELS; ++p) tma_load_3d(dst + p * BLOCK_N * 128, map, 64 * p, coord1, coord2, full);
}

// ---- the consumers: the steps of a key tile, per warpgroup ----------------------------------------

// A consumer thread's release of a slot's K or V (`empty`: its k_empty or v_empty barrier), once the
// wgmma that read it have completed. With CLUSTER 2 lane 0 of each warp also arrives on the other
// block's barrier (the warp's wait_group is warp-wide, so all its lanes are done): its producer
// multicasts into this block's slot too.
__device__ __forceinline__ void release_kv(u32 empty) {
    mbar_arrive(empty);
#if CLUSTER > 1
    mbar_arrive_remote(empty, cluster_rank() ^ 1u, (threadIdx.x & 31) == 0);
#endif
}

// O = 0.
__device__ __forceinline__ void clear_o(float (&o_acc)[PANELS][32]) {
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o_acc[p][i] = 0.f;
}

// The running max (scale·log2e domain) and this lane's partial sum of rows g and g + 8: -inf and 0.
// The sum stays partial over the quad until the end (every rescale factor is uniform in a quad).
__device__ __forceinline__ void clear_rows(float (&row_max)[2], float (&row_sum)[2]) {
    row_max[0] = HOPPER_NEG_INF;
    row_max[1] = HOPPER_NEG_INF;
    row_sum[0] = 0.f;
    row_sum[1] = 0.f;
}

// O, the running max and the sums of a row block's start.
__device__ __forceinline__ void clear_accumulators(float (&o_acc)[PANELS][32], float (&row_max)[2],
                                                   float (&row_sum)[2]) {
    clear_o(o_acc);
    clear_rows(row_max, row_sum);
}

// The bytes from a tile's start to k-step kk's 16 columns: a 64-column panel (rows × 128 bytes)
// per 4 k-steps, then 32 bytes along the 128-byte row per step.
__device__ __forceinline__ u32 qk_step_offset(int kk, int rows) { return (kk >> 2) * rows * 128 + (kk & 3) * 32; }

// K's descriptor for k-step kk of Q·Kᵀ (K-major, 128-byte swizzle).
__device__ __forceinline__ u64 qk_desc_k(u32 k_tile, int kk) {
    return desc_plus(make_desc(k_tile, 16, 1024), qk_step_offset(kk, BLOCK_N));
}

// One k-step of S (+)= Q·Kᵀ, Q from shared memory: the warpgroup's rows of every Q panel.
__device__ __forceinline__ void qk_wgmma(float (&s_acc)[S_REGS], u32 q_rows, int kk, u32 k_tile) {
    const u64 desc_q = desc_plus(make_desc(q_rows, 16, 1024), qk_step_offset(kk, BLOCK_M));
    const u64 desc_k = qk_desc_k(k_tile, kk);
#if BLOCK_N == 176
    wgmma_ss_n176(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#elif BLOCK_N == 160
    wgmma_ss_n160(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#elif BLOCK_N == 128
    wgmma_ss_n128(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#else
    wgmma_ss_n64(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#endif
}

#if BLOCK_N <= 128
// One k-step of S (+)= Q·Kᵀ, Q's A operand from registers: this thread's fragments of Q (hopper's
// Q_REGS; the N = 128 accumulator as its two N = 64 halves).
__device__ __forceinline__ void qk_wgmma(float (&s_acc)[S_REGS], const u32 (&q_frag)[QK_K_STEPS][4], int kk,
                                         u32 k_tile) {
    const u64 desc_k = qk_desc_k(k_tile, kk);
#if BLOCK_N == 128
    wgmma_rs_n128<0>(*reinterpret_cast<float(*)[32]>(&s_acc[0]), *reinterpret_cast<float(*)[32]>(&s_acc[32]),
                     q_frag[kk], desc_k, kk > 0 ? 1 : 0);
#else
    wgmma_rs_n64<0>(s_acc, q_frag[kk], desc_k, kk > 0 ? 1 : 0);
#endif
}
#endif

// Issues S = Q·Kᵀ for the warpgroup's 64 rows (HEAD_DIM / 16 wgmma, one commit group), Q as a
// qk_wgmma takes it. The caller waits for the group before reading s_acc.
template <typename QOperand>
__device__ __forceinline__ void issue_qk(float (&s_acc)[S_REGS], const QOperand& q, u32 k_tile) {
    fence_regs(s_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_K_STEPS; ++kk) qk_wgmma(s_acc, q, kk, k_tile);
    wgmma_commit();
}

// Pins O and P and orders their last register writes before the wgmma that follow.
__device__ __forceinline__ void fence_pv_operands(float (&o_acc)[PANELS][32], u32 (&p_frag)[PV_K_STEPS][4]) {
#pragma unroll
    for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk) fence_regs(p_frag[kk]);
    wgmma_fence();
}

// The P·V descriptors of a V tile: k-step kk starts 16 keys (2048 bytes) further, panel p
// BLOCK_N rows further. The leading byte offset of an MN-major operand is the stride between its
// 64-column swizzle-atom columns: with PV_N 128 the panel stride, so that one N = 128 wgmma reads
// both panels from panel 0's descriptor; an N = 64 wgmma reads one atom column and does not use it.
__device__ __forceinline__ void pv_descs(u32 v_tile, u64 (&desc_v)[PV_K_STEPS][PANELS]) {
    const u64 v_base = make_desc(v_tile, HOPPER_PV_N128 ? BLOCK_N * 128 : 1024, 1024);
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) desc_v[kk][p] = desc_plus(v_base, p * BLOCK_N * 128 + kk * 2048);
}

// Issues O += P·V (one commit group); the caller has rescaled O.
__device__ __forceinline__ void issue_pv(float (&o_acc)[PANELS][32], u32 (&p_frag)[PV_K_STEPS][4],
                                         const u64 (&desc_v)[PV_K_STEPS][PANELS]) {
    fence_pv_operands(o_acc, p_frag);
#if HOPPER_PV_N128
    // One N = 128 wgmma per k-step rather than one N = 64 per panel: P's A fragment is read once,
    // and half the instructions are issued (FlashAttention-3's P·V shape).
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk) wgmma_rs_n128<1>(o_acc[0], o_acc[1], p_frag[kk], desc_v[kk][0], 1);
#else
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) wgmma_rs_n64<1>(o_acc[p], p_frag[kk], desc_v[kk][p], 1);
#endif
    wgmma_commit();
}

// Online softmax of one S tile (already waited for), in place: masks keys at or past the row's
// limit (lane_hi) if the tile crosses a row's limit, keys before the row's first key (lane_lo) if
// it crosses a row's first key, updates the running max (kept in the scale·log2e domain; the max of
// the raw scores times scale is the max of the scaled ones, scale > 0) and sum, and leaves the f32
// probabilities exp2(s·scale·log2e − m) in s_acc (one FFMA and one MUFU.EX2 per score); returns in
// `rescale` the factor O must be multiplied by before this tile's P·V is added (rows g and g + 8).
// kv0: the tile's first key; t: lane % 4. Writes no register that a pending P·V reads.
// KEYS < BLOCK_N (hopper.cu's narrow tail): every row's limit lies within the tile's first KEYS
// keys, so only those are scored (and masked where a row's limit says so); the others' probabilities
// are 0.
template <int KEYS = BLOCK_N>
__device__ __forceinline__ void softmax_scores(float (&s_acc)[S_REGS], int kv0, bool mask_hi, bool mask_lo,
                                               const int (&lane_lo)[2], const int (&lane_hi)[2], int t,
                                               float scale_log2, float lazy_slack, float (&row_max)[2],
                                               float (&row_sum)[2], float (&rescale)[2]) {
    constexpr int LIVE = KEYS / 8;  // chunks computed
    fence_regs(s_acc);
    // Two separate passes: a dense problem only ever takes the first (the causal diagonal, ragged
    // S_kv), exactly as before windows existed; a window's left edge takes the second.
    if (mask_hi) {
#pragma unroll
        for (int n = 0; n < LIVE; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = kv0 + 8 * n + 2 * t + (e & 1);
                if (col >= lane_hi[e >> 1]) s_acc[4 * n + e] = HOPPER_NEG_INF;
            }
        }
    }
    if (mask_lo) {
#pragma unroll
        for (int n = 0; n < LIVE; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = kv0 + 8 * n + 2 * t + (e & 1);
                if (col < lane_lo[e >> 1]) s_acc[4 * n + e] = HOPPER_NEG_INF;
            }
        }
    }
    float neg_max[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m = HOPPER_NEG_INF;
#pragma unroll
        for (int n = 0; n < LIVE; ++n) m = fmaxf(m, fmaxf(s_acc[4 * n + 2 * h], s_acc[4 * n + 2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        m = fmaxf(row_max[h], m * scale_log2);
#if LAZY_RESCALE
        // Conditional rescaling (FlashAttention-4's): the row keeps its running max while the tile
        // raised it by at most LAZY_RESCALE_SLACK (log2 domain), so that O and the sum need no
        // rescale (factor exactly 1, and rescale_o skips a warp whose rows all keep theirs). Its
        // probabilities are then below 2^slack, which fp16 and bf16 hold with their usual relative
        // precision and f32 sums with room to spare. Any max is exact for the softmax: O and the
        // sum share it. A row with no key yet (-inf - -inf = NaN) takes the new max, and so does
        // every row when lazy_slack is negative (a narrow window: see consume_item).
        if (m - row_max[h] <= lazy_slack) {
            rescale[h] = 1.f;
            neg_max[h] = -row_max[h];
            continue;
        }
#endif
        // A row that has seen no key keeps max -inf; subtracting 0 instead keeps NaN out.
        const float max_used = m == HOPPER_NEG_INF ? 0.f : m;
        rescale[h] = exp2_ftz(row_max[h] - max_used);
        row_max[h] = m;
        neg_max[h] = -max_used;
    }
    // Four partial sums per row: short dependency chains.
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int n = 0; n < LIVE; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float& s = s_acc[4 * n + e];
            s = exp2_ftz(fmaf(s, scale_log2, neg_max[e >> 1]));
            sum[e >> 1][e & 1] += s;
        }
    }
#pragma unroll
    for (int n = LIVE; n < S_CHUNKS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[4 * n + e] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * rescale[h] + (sum[h][0] + sum[h][1]);
}

// The probabilities as A fragments of P·V: k-step kk is S chunks 2kk (a0 row g, a1 row g + 8) and
// 2kk + 1 (a2, a3).
__device__ __forceinline__ void pack_p(const float (&s_acc)[S_REGS], u32 (&p_frag)[PV_K_STEPS][4]) {
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float* s = &s_acc[4 * (2 * kk + half)];
            p_frag[kk][2 * half] = pack_elem2(s[0], s[1]);
            p_frag[kk][2 * half + 1] = pack_elem2(s[2], s[3]);
        }
    }
}

// O of rows g and g + 8 times their rescale factors (before the next P·V is added). With
// LAZY_RESCALE a warp whose rows all kept their max (every factor exactly 1) skips it: a branch on a
// warp vote, outside any wgmma's operands.
__device__ __forceinline__ void rescale_o(float (&o_acc)[PANELS][32], const float (&rescale)[2]) {
#if LAZY_RESCALE
    if (__all_sync(0xffffffffu, rescale[0] == 1.f && rescale[1] == 1.f)) return;
#endif
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                o_acc[p][4 * i + 2 * h] *= rescale[h];
                o_acc[p][4 * i + 2 * h + 1] *= rescale[h];
            }
}

// ---- the consumers: one whole key tile, not overlapped -------------------------------------------

// The body of hopper.cu's OVERLAP 0 loop and of micro_hopper.cu's loop, one definition for both:
// wait for K, S = Q·Kᵀ, wait, release the slot's K, online softmax (masks as the caller says), pack
// P, rescale O, wait for V, O += P·V, wait, release the slot's V. The caller advances the slot
// afterwards.
// Q: Q·Kᵀ's A operand as an issue_qk takes it (the warpgroup's Q rows in shared memory, or hopper's
// Q_REGS fragments); K_TILE, V_TILE: the slot's K and V tiles; KV0, MASK_HI, MASK_LO, LANE_LO,
// LANE_HI, T: as softmax_scores takes them (the micro passes both masks off). It expands inside the
// loop and uses the loop's `bars`, `slot`, `phase`, `scale_log2`, `lazy_slack`, `o_acc`, `row_max`, `row_sum`,
// `p_frag` and `rescale` (both kernels' names).
// A macro, not a function: NVVM simplifies a callee before inlining it, and a __forceinline__
// function for the whole tile changed both kernels' PTX (the masks' bound checks and the slot's
// index widening came out differently; kernels/tools/ptx_identity.py), while the macro expands to
// exactly the statements each loop spelled out before. Where each kernel computes the tile
// addresses also shows in its PTX, hence K_TILE and V_TILE as arguments.
#define HOPPER_CONSUME_TILE(Q, K_TILE, V_TILE, KV0, MASK_HI, MASK_LO, LANE_LO, LANE_HI, T)                  \
    {                                                                                                     \
        float s_acc[S_REGS];                                                                              \
        mbar_wait(smem_addr(&bars.k_full[slot]), phase);                                                  \
        issue_qk(s_acc, Q, K_TILE);                                                                       \
        wgmma_wait<0>();                                                                                  \
        release_kv(smem_addr(&bars.k_empty[slot]));                                                       \
        softmax_scores(s_acc, KV0, MASK_HI, MASK_LO, LANE_LO, LANE_HI, T, scale_log2, lazy_slack, row_max, \
                       row_sum, rescale);                                                                 \
        pack_p(s_acc, p_frag);                                                                            \
        rescale_o(o_acc, rescale);                                                                        \
        u64 desc_v[PV_K_STEPS][PANELS];                                                                   \
        pv_descs(V_TILE, desc_v);                                                                         \
        mbar_wait(smem_addr(&bars.v_full[slot]), phase);                                                  \
        issue_pv(o_acc, p_frag, desc_v);                                                                  \
        wgmma_wait<0>();                                                                                  \
        _Pragma("unroll") for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);                          \
        release_kv(smem_addr(&bars.v_empty[slot]));                                                       \
    }
