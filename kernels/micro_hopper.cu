// micro_hopper.cu — the `hopper` target of `cargo xtask micro`: hopper.cu's K/V pipeline alone,
// timed with clock64(), so that tile configs (BLOCK_M, BLOCK_N, NUM_WARPS, STAGES: hopper's knobs,
// same names, same meaning) can be ranked in seconds and seed a hopper search.
//
// What runs (one block; hopper.cu's header explains every piece, this file keeps them in step):
//   - one producer warpgroup (its first thread issues every TMA copy; the other warps leave): the
//     Q tile once (BLOCK_M rows), then TILES tiles of K and of V (BLOCK_N rows × HEAD_DIM each)
//     into a STAGES-deep ring, each completing on its slot's full mbarrier; before refilling a slot
//     it waits on the slot's empty mbarrier. 128-byte swizzle, 64-column boxes, as hopper's maps.
//   - NUM_WARPS / 4 consumer warpgroups (64 query rows each), per tile: wait for K, S = Q·Kᵀ
//     (wgmma m64n{BLOCK_N}k16 from shared memory), hopper's online softmax in registers (row max
//     with quad shuffles, one FFMA and one MUFU.EX2 per score, row sums, O rescaled), P packed into
//     A fragments, wait for V, O += P·V (wgmma m64n64k16, P from registers, V MN-major), wait, and
//     release the slot (every consumer thread arrives on its empty barrier). setmaxnreg moves
//     registers to the consumers as hopper does.
//   That is hopper's OVERLAP 0, PINGPONG 0 loop without masking or epilogue: STAGES = 1 (a ring of
//   one, load and compute in turn) is allowed here as the unpipelined reference.
//   Tile t of block b reads keys ((b · 7 + t) mod (S_kv / BLOCK_N)) · BLOCK_N onward of head 0, so
//   that every block streams the same L2-resident K and V from different places, as the row
//   blocks of one head do in attention.
// What it reports: consumer thread 0 reads clock64() after the barriers are initialised and again
//   once every consumer warp is past its last tile (a named barrier); block b writes those cycles
//   as the b-th 64-bit word of O. Nothing else of O is meaningful.
// What it leaves out (micro's scope, stated in its evidence): causal masking and skipping,
//   FA3's intra-warpgroup overlap (OVERLAP) and ping-pong (PINGPONG), the output epilogue, grids
//   of many heads and waves.
//
// Launch (a `--src` kernel with the TensorMaps ABI, kernels/README.md): defines TENSOR_MAPS=1 (the
// host appends the maps of Q, K, V with boxes of BLOCK_M / BLOCK_N rows), PRODUCER_WARPS=4 (block
// = (NUM_WARPS + 4) · 32 threads), SHARED_BYTES = 1024 + BLOCK_M · HEAD_DIM · 2 + STAGES · 2 ·
// BLOCK_N · HEAD_DIM · 2 (hopper's formula) and TILES; grid = S_q / BLOCK_M blocks, S_kv a multiple
// of BLOCK_N. Compiled for compute_90a only (wgmma, TMA, setmaxnreg).

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
#ifndef TILES
#define TILES 64
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "micro_hopper.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 4 || NUM_WARPS == 8 || NUM_WARPS == 12, "micro_hopper.cu: NUM_WARPS (consumer warps) must be 4, 8 or 12");
static_assert(NUM_WARPS != 12 || HEAD_DIM == 64, "micro_hopper.cu: NUM_WARPS 12 needs HEAD_DIM 64");
static_assert(BLOCK_M == 16 * NUM_WARPS, "micro_hopper.cu: BLOCK_M must equal 64 * (NUM_WARPS / 4)");
static_assert(BLOCK_N == 64 || BLOCK_N == 128, "micro_hopper.cu: BLOCK_N must be 64 or 128");
static_assert(STAGES >= 1 && STAGES <= 4, "micro_hopper.cu: STAGES must be 1 to 4");
static_assert(TILES >= 1, "micro_hopper.cu: TILES must be positive");
static_assert(sizeof(elem_t) == 2, "micro_hopper.cu: 16-bit elements expected");

namespace micro_hopper {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::smem_addr;

using namespace hopper_ptx;

constexpr int D = HEAD_DIM;
constexpr int WARPGROUPS = NUM_WARPS / 4;
constexpr int CONSUMER_THREADS = NUM_WARPS * 32;
constexpr int THREADS = CONSUMER_THREADS + 128;
constexpr int PANELS = D / 64;
constexpr int Q_TILE_BYTES = BLOCK_M * D * 2;
constexpr int KV_TILE_BYTES = BLOCK_N * D * 2;
constexpr int QK_K_STEPS = D / 16;
constexpr int PV_K_STEPS = BLOCK_N / 16;
constexpr int S_REGS = BLOCK_N / 2;
constexpr int S_CHUNKS = BLOCK_N / 8;
#if NUM_WARPS == 8
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
#elif NUM_WARPS == 12
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 160;
#endif

#define MICRO_NEG_INF __int_as_float(0xff800000u)

// ---- hopper.cu's per-tile steps, without masking (keep in step; PTX wrappers: hopper_common.cuh) --

// Issues S = Q·Kᵀ for the warpgroup's 64 rows (HEAD_DIM / 16 wgmma, one commit group). The caller
// waits for the group before reading s_acc.
__device__ __forceinline__ void issue_qk(float (&s_acc)[S_REGS], u32 q_rows, u32 k_tile) {
    fence_regs(s_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_K_STEPS; ++kk) {
        const u32 in_panel = (kk & 3) * 32;  // 16 columns = 32 bytes along the 128-byte row
        const u64 desc_q = make_desc(q_rows + (kk >> 2) * BLOCK_M * 128 + in_panel, 16, 1024);
        const u64 desc_k = make_desc(k_tile + (kk >> 2) * BLOCK_N * 128 + in_panel, 16, 1024);
#if BLOCK_N == 128
        wgmma_ss_n128(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#else
        wgmma_ss_n64(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#endif
    }
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
// BLOCK_N rows further.
__device__ __forceinline__ void pv_descs(u32 v_tile, u64 (&desc_v)[PV_K_STEPS][PANELS]) {
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) desc_v[kk][p] = make_desc(v_tile + p * BLOCK_N * 128 + kk * 2048, 1024, 1024);
}

__device__ __forceinline__ void issue_pv(float (&o_acc)[PANELS][32], u32 (&p_frag)[PV_K_STEPS][4],
                                         const u64 (&desc_v)[PV_K_STEPS][PANELS]) {
    fence_pv_operands(o_acc, p_frag);
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) wgmma_rs_n64_tb(o_acc[p], p_frag[kk], desc_v[kk][p], 1);
    wgmma_commit();
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

__device__ __forceinline__ void rescale_o(float (&o_acc)[PANELS][32], const float (&rescale)[2]) {
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

// hopper.cu's online softmax of one S tile, without its causal mask: running max (scale·log2e
// domain, quad shuffles), exp2 of every score, running sums, and O's rescale factor.
__device__ __forceinline__ void softmax_scores(float (&s_acc)[S_REGS], float scale_log2, float (&row_max)[2],
                                               float (&row_sum)[2], float (&rescale)[2]) {
    fence_regs(s_acc);
    float neg_max[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m = MICRO_NEG_INF;
#pragma unroll
        for (int n = 0; n < S_CHUNKS; ++n) m = fmaxf(m, fmaxf(s_acc[4 * n + 2 * h], s_acc[4 * n + 2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        m = fmaxf(row_max[h], m * scale_log2);
        const float max_used = m == MICRO_NEG_INF ? 0.f : m;
        rescale[h] = exp2_ftz(row_max[h] - max_used);
        row_max[h] = m;
        neg_max[h] = -max_used;
    }
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int n = 0; n < S_CHUNKS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float& s = s_acc[4 * n + e];
            s = exp2_ftz(fmaf(s, scale_log2, neg_max[e >> 1]));
            sum[e >> 1][e & 1] += s;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * rescale[h] + (sum[h][0] + sum[h][1]);
}

struct Barriers {
    u64 q_full;
    u64 k_full[STAGES];
    u64 v_full[STAGES];
    u64 empty[STAGES];
};

// The producer thread: Q, then tile t of K and V into slot t % STAGES once the consumers have
// released the slot's previous round (hopper.cu's produce, with the micro's tile addresses).
__device__ __forceinline__ void produce(Barriers& bars, u32 q_tile, u32 k_tiles, u32 v_tiles,
                                        const HopperTensorMap* map_q, const HopperTensorMap* map_k,
                                        const HopperTensorMap* map_v, int m0, int first_tile, int kv_tiles) {
    const u32 q_full = smem_addr(&bars.q_full);
    mbar_arrive_expect_tx(q_full, Q_TILE_BYTES);
#pragma unroll
    for (int p = 0; p < PANELS; ++p) tma_load_3d(q_tile + p * BLOCK_M * 128, map_q, 64 * p, m0, 0, q_full);
    int slot = 0;
    u32 phase = 0;
    for (int t = 0; t < TILES; ++t) {
        if (t >= STAGES) mbar_wait(smem_addr(&bars.empty[slot]), phase ^ 1);
        const int row = ((first_tile + t) % kv_tiles) * BLOCK_N;
        const u32 k_full = smem_addr(&bars.k_full[slot]);
        const u32 v_full = smem_addr(&bars.v_full[slot]);
        const u32 k_dst = k_tiles + slot * KV_TILE_BYTES;
        const u32 v_dst = v_tiles + slot * KV_TILE_BYTES;
        mbar_arrive_expect_tx(k_full, KV_TILE_BYTES);
#pragma unroll
        for (int p = 0; p < PANELS; ++p) tma_load_3d(k_dst + p * BLOCK_N * 128, map_k, 64 * p, row, 0, k_full);
        mbar_arrive_expect_tx(v_full, KV_TILE_BYTES);
#pragma unroll
        for (int p = 0; p < PANELS; ++p) tma_load_3d(v_dst + p * BLOCK_N * 128, map_v, 64 * p, row, 0, v_full);
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
        }
    }
}

}  // namespace micro_hopper

extern "C" __global__ void __launch_bounds__(micro_hopper::THREADS, 1)
    attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
             elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
             const __grid_constant__ HopperTensorMap map_q, const __grid_constant__ HopperTensorMap map_k,
             const __grid_constant__ HopperTensorMap map_v) {
    using namespace micro_hopper;
    (void)q;  // read through the maps
    (void)k;
    (void)v;
    (void)batch;
    (void)heads;
    (void)seq_q;
    (void)causal;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ Barriers bars;
    const u32 raw_addr = smem_addr(smem_raw);
    const u32 base = (raw_addr + 1023u) & ~1023u;
    const u32 q_tile = base;
    const u32 k_tiles = q_tile + Q_TILE_BYTES;
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int m0 = blockIdx.x * BLOCK_M;
    const int kv_tiles = max(seq_kv / BLOCK_N, 1);

    if (tid == CONSUMER_THREADS) {
        prefetch_tensor_map(&map_q);
        prefetch_tensor_map(&map_k);
        prefetch_tensor_map(&map_v);
        mbar_init(smem_addr(&bars.q_full), 1);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_addr(&bars.k_full[s]), 1);
            mbar_init(smem_addr(&bars.v_full[s]), 1);
            mbar_init(smem_addr(&bars.empty[s]), CONSUMER_THREADS);
        }
        fence_barrier_init();
    }
    __syncthreads();
    const long long start = clock64();

    if (warp >= NUM_WARPS) {
#if NUM_WARPS >= 8
        setmaxnreg_dec<PRODUCER_REGS>();
#endif
        if (warp == NUM_WARPS && lane == 0)
            produce(bars, q_tile, k_tiles, v_tiles, &map_q, &map_k, &map_v, m0, blockIdx.x * 7, kv_tiles);
        return;
    }

#if NUM_WARPS >= 8
    setmaxnreg_inc<CONSUMER_REGS>();
#endif
    const int wg = warp >> 2;
    const float scale_log2 = scale * ATTN_LOG2E;
    const u32 q_rows = q_tile + wg * 64 * 128;  // this warpgroup's 64 rows of every Q panel

    float o_acc[PANELS][32];
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o_acc[p][i] = 0.f;
    float row_max[2] = {MICRO_NEG_INF, MICRO_NEG_INF};
    float row_sum[2] = {0.f, 0.f};
    u32 p_frag[PV_K_STEPS][4];
    float rescale[2];

    mbar_wait(smem_addr(&bars.q_full), 0);
    int slot = 0;
    u32 phase = 0;
    for (int t = 0; t < TILES; ++t) {
        const u32 k_tile = k_tiles + slot * KV_TILE_BYTES;
        const u32 v_tile = v_tiles + slot * KV_TILE_BYTES;
        float s_acc[S_REGS];
        mbar_wait(smem_addr(&bars.k_full[slot]), phase);
        issue_qk(s_acc, q_rows, k_tile);
        wgmma_wait<0>();
        softmax_scores(s_acc, scale_log2, row_max, row_sum, rescale);
        pack_p(s_acc, p_frag);
        rescale_o(o_acc, rescale);
        u64 desc_v[PV_K_STEPS][PANELS];
        pv_descs(v_tile, desc_v);
        mbar_wait(smem_addr(&bars.v_full[slot]), phase);
        issue_pv(o_acc, p_frag, desc_v);
        wgmma_wait<0>();
#pragma unroll
        for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
        mbar_arrive(smem_addr(&bars.empty[slot]));
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
        }
    }
    named_barrier_sync(1, CONSUMER_THREADS);  // every consumer warp is past its last tile
    if (tid == 0) reinterpret_cast<long long*>(o)[blockIdx.x] = clock64() - start;
    // Keeps the softmax sums alive: a store the compiler cannot prove never happens (past the
    // cycle words).
    if (o_acc[0][0] + row_sum[0] + row_sum[1] == 1234.5678f) o[4 * gridDim.x + blockIdx.x] = from_float(o_acc[0][1]);
}
