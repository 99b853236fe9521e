// decode_hopper.cu — split-KV decode on Hopper's warpgroup tensor cores (wgmma, sm_90a), for
// batches whose K/V heads serve many rows: several new tokens under GQA.
//
// The decode ABI (README.md, "Decode entry point") and the split workspace are decode.cu's; the
// cache's layout and the combine kernel come from decode_common.cuh.
//
// Bird's-eye view
//   One block (one warpgroup, 128 threads) takes one (row tile, K/V head, sequence, split):
//   grid = (row_tiles · H_kv, B, num_splits), a row tile being 64 packed rows r = token · group +
//   head-in-group of one K/V head (row_tiles = ceil(longest q · group / 64), the host's). The keys
//   its rows see are cut into tiles of BLOCK_N keys and the tiles into num_splits runs.
//   Every thread gathers its share of each K/V tile row by row through the block table with 16-byte
//   cp.async into a STAGES-deep ring, laid out as a TMA would write it (64-column panels of 128-byte
//   rows, 128-byte swizzle), so that wgmma reads it through the descriptors of hopper.cu:
//   S = Q·Kᵀ as HEAD_DIM / 16 wgmma m64n{BLOCK_N}k16 (Q and K from shared memory), the per-row
//   causal/window mask and online softmax in f32 (hopper_pipeline.cuh's steps), O += P·V as wgmma
//   with P from registers. cp.async writes through the generic proxy and wgmma reads through the
//   async one: each thread fences the proxies after its copies land, before the block barrier.
//   With num_splits = 1 the block writes O; else the split's normalised O (f32) and log2-sum-exp,
//   which attn_decode_combine merges.
//
// Knobs (compile-time defines)
//   HEAD_DIM ∈ {64, 128}   (required)
//   BLOCK_N  ∈ {64, 128}   keys per tile; default 64
//   STAGES   ∈ {2, 3, 4}   cp.async ring depth; default 3
//   PAGE_AHEAD ∈ {0, 1}    1: a thread reads the table entries of the next tile's rows right after
//                          gathering a tile (decode_common.cuh's read_pages); default 0
//   num_splits is a launch parameter (the host's SPLITS knob), as for decode.cu.
//
// Launch geometry
//   grid = (row_tiles · H_kv, B, num_splits), block = 128 threads,
//   dynamic shared memory = 1024 + 64 · D · 2 + 2 · STAGES · BLOCK_N · D · 2 bytes
//   (1024 bytes of slack align the tiles to the swizzle atom; the Q tile, then the K and V rings).

#include "attn_common.cuh"
#include "hopper_common.cuh"
#include "mma_ptx.cuh"
#include "decode_common.cuh"

#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef PAGE_AHEAD
#define PAGE_AHEAD 0
#endif
// hopper_pipeline.cuh's switches: one N = 128 P·V wgmma at D = 128, the exact running max.
#if HEAD_DIM == 128
#define PV_N 128
#endif
#define LAZY_RESCALE 0

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "decode_hopper.cu: HEAD_DIM must be 64 or 128");
static_assert(BLOCK_N == 64 || BLOCK_N == 128, "decode_hopper.cu: BLOCK_N must be 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 4, "decode_hopper.cu: STAGES must be 2 to 4");
static_assert(sizeof(elem_t) == 2, "decode_hopper.cu: 16-bit elements expected");

namespace decode_hopper {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::smem_addr;
using decode_common::KvView;
using decode_common::make_view;
using decode_common::read_pages;
using mma_ptx::cp_async_16;
using mma_ptx::cp_async_commit;
using mma_ptx::cp_async_wait;
using namespace hopper_ptx;

// The geometry hopper_pipeline.cuh's steps are written for: one consumer warpgroup of 64 rows.
constexpr int D = HEAD_DIM;
constexpr int BLOCK_M = 64;
constexpr int CONSUMER_THREADS = 128;
constexpr int PANELS = D / 64;
constexpr int CHUNKS = D / 8;  // 16-byte chunks of a row
constexpr int Q_TILE_BYTES = BLOCK_M * D * 2;
constexpr int KV_TILE_BYTES = BLOCK_N * D * 2;
constexpr int QK_K_STEPS = D / 16;
constexpr int PV_K_STEPS = BLOCK_N / 16;
constexpr int S_REGS = BLOCK_N / 2;
constexpr int S_CHUNKS = BLOCK_N / 8;
constexpr int ROWS_PER_PASS = CONSUMER_THREADS / CHUNKS;
constexpr int KV_PASSES = BLOCK_N / ROWS_PER_PASS;
constexpr int Q_PASSES = BLOCK_M / ROWS_PER_PASS;

#include "hopper_pipeline.cuh"

// Byte offset of 16-byte chunk c of row r in a tile of `rows` rows: panel c / 8, then the row's
// 128 bytes with chunk c % 8 swizzled by the row (the TMA's SWIZZLE_128B on a 1024-byte base).
__device__ __forceinline__ u32 swizzled(int rows, int r, int c) {
    return (c >> 3) * rows * 128 + r * 128 + ((((c & 7) ^ (r & 7))) << 4);
}

// K/V tile rows row0 .. row0 + BLOCK_N − 1 into the slot's tiles (decode_common.cuh's
// gather_tile, in the TMA's swizzled layout; under PAGE_AHEAD the next tile's pages are read into
// `pages`).
__device__ __forceinline__ void load_kv(u32 k_dst, u32 v_dst, const elem_t* __restrict__ k,
                                        const elem_t* __restrict__ v, const KvView& view, int row0, int limit,
                                        int tid, int (&pages)[KV_PASSES]) {
    decode_common::gather_tile<PAGE_AHEAD != 0, KV_PASSES, ROWS_PER_PASS, CHUNKS>(
        k_dst, v_dst, k, v, view, row0, limit, tid, pages,
        [](int row, int chunk) { return swizzled(BLOCK_N, row, chunk); });
}

}  // namespace decode_hopper

extern "C" __global__ void __launch_bounds__(128, 1)
    attn_decode(const elem_t* __restrict__ q, const elem_t* __restrict__ k_cache, const elem_t* __restrict__ v_cache,
                elem_t* __restrict__ o, const int* __restrict__ cu_seqlens_q, const int* __restrict__ seqlens_kv,
                const int* __restrict__ block_table, int max_pages_per_seq, int page_size, int s_max, int batch,
                int heads, int kv_heads, float scale, int window_left, float* __restrict__ workspace,
                long long workspace_bytes, int num_splits) {
    using namespace decode_hopper;
    const int kv_head = blockIdx.x % kv_heads;
    const int m0 = (blockIdx.x / kv_heads) * BLOCK_M;
    const int b = blockIdx.y;
    const int split = blockIdx.z;
    const int q0 = cu_seqlens_q[b];
    const int sq = cu_seqlens_q[b + 1] - q0;
    const int skv = seqlens_kv[b];
    const int group = heads / kv_heads;
    const int rows = sq * group;
    if (m0 >= rows) return;  // a row tile past the sequence's rows, or an empty sequence
    const long long total_rows = static_cast<long long>(cu_seqlens_q[batch]) * heads;
    if (num_splits > 1 && static_cast<long long>(num_splits) * total_rows * (D + 1) * 4 > workspace_bytes) __trap();
    float* ws_o = workspace;
    float* ws_lse = workspace + static_cast<long long>(num_splits) * total_rows * D;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t4 = lane & 3;

    // The block's key range, its tiles and this split's run (decode.cu's).
    const int last = min(m0 + BLOCK_M, rows) - 1;
    const int block_lo = attn::row_kv_lo(m0 / group, sq, skv, window_left);
    const int block_hi = attn::row_kv_hi(last / group, sq, skv, 1, 0);
    // Every real row of the tile sees keys [mask_lo_below, mask_hi_from) at least: a key tile
    // inside that range needs no mask (padding rows past `rows` are never written).
    const int mask_hi_from = attn::row_kv_hi(m0 / group, sq, skv, 1, 0);
    const int mask_lo_below = attn::row_kv_lo(last / group, sq, skv, window_left);
    const int first_tile = block_lo / BLOCK_N;
    const int all_end = block_hi > block_lo ? (block_hi + BLOCK_N - 1) / BLOCK_N : first_tile;
    const int per_split = (all_end - first_tile + num_splits - 1) / num_splits;
    const int tile_begin = min(all_end, first_tile + split * per_split);
    const int tile_end = min(all_end, tile_begin + per_split);

    auto row_offset = [&](int r) -> long long {
        const int token = q0 + r / group;
        const int head = kv_head * group + r % group;
        return (static_cast<long long>(token) * heads + head) * D;
    };
    auto ws_row = [&](int r) -> long long { return row_offset(r) / D; };

    if (tile_begin >= tile_end) {
        if (num_splits > 1)
            for (int r = tid; r < BLOCK_M; r += CONSUMER_THREADS)
                if (m0 + r < rows) ws_lse[split * total_rows + ws_row(m0 + r)] = DECODE_NEG_INF;
        if (num_splits == 1)
            for (int idx = tid; idx < BLOCK_M * CHUNKS; idx += CONSUMER_THREADS) {
                const int r = idx / CHUNKS;
                if (m0 + r < rows)
                    *reinterpret_cast<uint4*>(o + row_offset(m0 + r) + (idx % CHUNKS) * 8) = make_uint4(0, 0, 0, 0);
            }
        return;
    }

    const KvView view = make_view(block_table, max_pages_per_seq, page_size, s_max, kv_heads, b, kv_head);

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 q_tile = base;
    const u32 k_tiles = q_tile + Q_TILE_BYTES;
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    // This thread's rows of the wgmma accumulators: 16 · warp + g and + 8.
    int lane_lo[2], lane_hi[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + 16 * warp + g + 8 * h;
        const int token = row / group;
        lane_lo[h] = row < rows ? attn::row_kv_lo(token, sq, skv, window_left) : 0;
        lane_hi[h] = row < rows ? attn::row_kv_hi(token, sq, skv, 1, 0) : 0;
    }

    // ---- prologue: Q, then the first STAGES − 1 K/V tiles (a commit group each) ---------------------
#pragma unroll
    for (int i = 0; i < Q_PASSES; ++i) {
        const int r = tid / CHUNKS + i * ROWS_PER_PASS, c = tid % CHUNKS;
        const bool in_range = m0 + r < rows;
        cp_async_16(q_tile + swizzled(BLOCK_M, r, c), in_range ? q + row_offset(m0 + r) + c * 8 : q, in_range);
    }
    cp_async_commit();
    // PAGE_AHEAD: the table entries of the next tile to gather (tiles are gathered in order).
    int pages[KV_PASSES];
    if (PAGE_AHEAD) read_pages<KV_PASSES, ROWS_PER_PASS>(pages, view, tile_begin * BLOCK_N, skv, tid / CHUNKS);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int tile = tile_begin + s;
        if (tile < tile_end)
            load_kv(k_tiles + (tile % STAGES) * KV_TILE_BYTES, v_tiles + (tile % STAGES) * KV_TILE_BYTES, k_cache,
                    v_cache, view, tile * BLOCK_N, skv, tid, pages);
        cp_async_commit();  // committed even when empty: the group count stays uniform
    }

    const float scale_log2 = scale * ATTN_LOG2E;
    float o_acc[PANELS][32];
    float row_max[2], row_sum[2], rescale[2];
    clear_accumulators(o_acc, row_max, row_sum);
    float s_acc[S_REGS];
    u32 p_frag[PV_K_STEPS][4];

    for (int j = tile_begin; j < tile_end; ++j) {
        // Tile j (and Q) landed for this thread; made visible to wgmma's async proxy, then to the
        // block; every thread is past tile j − 1's wgmma, whose slot is refilled below.
        cp_async_wait<STAGES - 2>();
        fence_proxy_async_shared();
        __syncthreads();
        {
            const int next = j + STAGES - 1;
            if (next < tile_end)
                load_kv(k_tiles + (next % STAGES) * KV_TILE_BYTES, v_tiles + (next % STAGES) * KV_TILE_BYTES,
                        k_cache, v_cache, view, next * BLOCK_N, skv, tid, pages);
            cp_async_commit();
        }
        const int slot = j % STAGES;
        const int kv0 = j * BLOCK_N;
        issue_qk(s_acc, q_tile, k_tiles + slot * KV_TILE_BYTES);
        wgmma_wait<0>();
        const bool mask_hi = kv0 + BLOCK_N > mask_hi_from, mask_lo = kv0 < mask_lo_below;
        softmax_scores(s_acc, kv0, mask_hi, mask_lo, lane_lo, lane_hi, t4, scale_log2, 0.f, row_max, row_sum,
                       rescale);
        pack_p(s_acc, p_frag);
        rescale_o(o_acc, rescale);
        u64 desc_v[PV_K_STEPS][PANELS];
        pv_descs(v_tiles + slot * KV_TILE_BYTES, desc_v);
        issue_pv(o_acc, p_frag, desc_v);
        wgmma_wait<0>();
#pragma unroll
        for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
    }
    cp_async_wait<0>();  // only empty groups remain; none may land after the block has exited

    // ---- epilogue: full row sums; O, or the split's normalised O and LSE ----------------------------
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = m0 + 16 * warp + g + 8 * h;
        if (row >= rows) continue;
        const float inv_l = l > 0.f ? 1.f / l : 0.f;  // a row that saw no key: zeros
        if (num_splits == 1) {
            elem_t* o_row = o + row_offset(row);
#pragma unroll
            for (int p = 0; p < PANELS; ++p)
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    *reinterpret_cast<elem2_t*>(o_row + 64 * p + 8 * i + 2 * t4) =
                        from_float2(o_acc[p][4 * i + 2 * h] * inv_l, o_acc[p][4 * i + 2 * h + 1] * inv_l);
        } else {
            const long long at = split * total_rows + ws_row(row);
            float* o_row = ws_o + at * D;
#pragma unroll
            for (int p = 0; p < PANELS; ++p)
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    *reinterpret_cast<float2*>(o_row + 64 * p + 8 * i + 2 * t4) =
                        make_float2(o_acc[p][4 * i + 2 * h] * inv_l, o_acc[p][4 * i + 2 * h + 1] * inv_l);
            if (t4 == 0) ws_lse[at] = l > 0.f ? row_max[h] + __log2f(l) : DECODE_NEG_INF;
        }
    }
}
