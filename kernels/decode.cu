// decode.cu — split-KV decode on the tensor cores (mma.sync m16n8k16, ldmatrix, cp.async gathers).
//
// The decode ABI (README.md, "Decode entry point"): Q and O packed [total_q, H, D]; K and V read
// through the block table (paged) or from their [B, H_kv, S_max, D] slabs (contiguous).
//
// Bird's-eye view
//   One block takes one (row tile, K/V head, sequence, split): grid = (row_tiles · H_kv, B,
//   num_splits). The rows of a K/V head are its query heads × the sequence's new tokens, packed as
//   row r = token · group + head-in-group (group = H / H_kv; up to 16 · group rows), so the K/V tiles
//   a block streams serve every query head of the group at once; a row tile holds up to
//   ROW_WARPS · BLOCK_M of them (row_tiles = ceil(longest q · group / (ROW_WARPS · BLOCK_M)), the
//   host's; tiles past the sequence's rows return), so that a few new tokens read each K/V tile once.
//   Each block splits its warps between its rows and the keys: row_warps (the fewest power of two
//   warps of BLOCK_M rows that hold the tile's rows, at most ROW_WARPS) groups of
//   key_warps = NUM_WARPS / row_warps warps; a group's warps take the same BLOCK_M rows.
//   The keys the block's rows see (lo of its first token .. hi of its last) are cut into tiles of
//   TILE_N = NUM_WARPS · BLOCK_N keys (NUM_WARPS chunks of BLOCK_N), and the tiles into num_splits
//   contiguous runs, one per split.
//   Each tile is gathered row by row through the block table with 16-byte cp.async (a page size
//   that is no multiple of the tile, down to 1, costs a table read per row, nothing else), into a
//   STAGES-deep ring of swizzled K and V tiles. Warp kw of a row group takes chunks
//   kw, kw + key_warps, … (row_warps of them) of every tile for its group's rows: S = Q·Kᵀ with
//   Q's A fragments in registers, the per-row causal/window mask, online softmax in f32 (exp2 with
//   the scale folded in), O += P·V with P re-packed in registers. The warps of each row group then
//   merge their (m, l, O) through shared memory (as mma.cu's KV_SPLIT merge). With num_splits = 1
//   each group's first warp writes O; else it writes the split's normalised O (f32) and its
//   log2-sum-exp into the workspace, and attn_decode_combine merges the splits.
//
// Workspace (num_splits > 1): f32, partial O [num_splits, total_q · H, D] then LSE
//   [num_splits, total_q · H] (log2 domain, scale·log2e folded in: lse = m + log2 l; −inf for a row
//   that saw no key in the split). Every split writes the LSE of each of its rows, and its O where
//   its range is not empty; the combine reads O only where the LSE is finite. A workspace smaller
//   than num_splits · total_q · H · (D + 1) · 4 bytes traps (the host sizes it; this is a defence).
//
// Knobs (compile-time defines, defaults below)
//   HEAD_DIM  ∈ {64, 128}      (required)
//   NUM_WARPS ∈ {1, 2, 4, 8}   warps per block, each taking BLOCK_N keys of every tile; default 4
//   BLOCK_M   ∈ {16, 32}       rows (query heads × tokens) per warp; default 16
//   ROW_WARPS ∈ {1, 2, 4, 8}   the most warps of a block that take distinct rows (<= NUM_WARPS);
//                              default 4, or NUM_WARPS if fewer (1: every warp takes the
//                              same BLOCK_M rows)
//   BLOCK_N   ∈ {16, 32, 64}   keys per warp per tile; default 32 at D=64, 16 at D=128
//   STAGES    ∈ {1, 2, 3, 4}   cp.async ring depth; default 3
//   PAGE_AHEAD ∈ {0, 1}        1: a thread reads the table entries of the next tile's rows right
//                              after gathering a tile (decode_common.cuh's read_pages); default 0
//   num_splits is a launch parameter (the host's SPLITS knob: auto or a count), not a define.
//
// Launch geometry
//   grid = (row_tiles · H_kv, B, num_splits), block = NUM_WARPS · 32 threads,
//   dynamic shared memory = ROW_WARPS · BLOCK_M · D · 2 + max(2 · STAGES · NUM_WARPS · BLOCK_N · D · 2,
//                                                 (NUM_WARPS − 1) · BLOCK_M · (4 · D + 32))  bytes
//   (the Q tile, then the K/V ring, whose space the warps' merge reuses).
//   attn_decode_combine: grid = ceil(total_q · H / 4), block = 128 (a warp per (token, head)).
//
// Shared-memory swizzle, fragment layouts, PTX wrappers and lane addressing are mma.cu's (see its
// header), shared through mma_ptx.cuh.

#include "attn_common.cuh"
// mma.cu's PTX wrappers, swizzle and ldmatrix lane addressing, one copy for both kernels.
#include "mma_ptx.cuh"
// The cache's layout (KvView, token_offset, read_pages) and the split combine, shared with decode_hopper.cu.
#include "decode_common.cuh"

#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef BLOCK_M
#define BLOCK_M 16
#endif
#ifndef BLOCK_N
#if HEAD_DIM == 128
#define BLOCK_N 16
#else
#define BLOCK_N 32
#endif
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef ROW_WARPS
#define ROW_WARPS (NUM_WARPS < 4 ? NUM_WARPS : 4)
#endif
#ifndef PAGE_AHEAD
#define PAGE_AHEAD 0
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "decode.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 1 || NUM_WARPS == 2 || NUM_WARPS == 4 || NUM_WARPS == 8,
              "decode.cu: NUM_WARPS must be 1, 2, 4 or 8");
static_assert(BLOCK_M == 16 || BLOCK_M == 32, "decode.cu: BLOCK_M must be 16 or 32");
static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64, "decode.cu: BLOCK_N must be 16, 32 or 64");
static_assert(STAGES >= 1 && STAGES <= 4, "decode.cu: STAGES must be 1 to 4");
static_assert((ROW_WARPS == 1 || ROW_WARPS == 2 || ROW_WARPS == 4 || ROW_WARPS == 8) && ROW_WARPS <= NUM_WARPS,
              "decode.cu: ROW_WARPS must be 1, 2, 4 or 8, at most NUM_WARPS");
static_assert(sizeof(elem_t) == 2, "decode.cu: 16-bit elements expected");

namespace decode_attn {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::smem_addr;
using decode_common::KvView;
using decode_common::make_view;
using decode_common::read_pages;
using mma_ptx::cp_async_16;
using mma_ptx::cp_async_commit;
using mma_ptx::cp_async_wait;
using mma_ptx::LaneAddressing;
using mma_ptx::ldmatrix_x4;
using mma_ptx::ldmatrix_x4_trans;
using mma_ptx::mma_16816;
using mma_ptx::swizzled;
using mma_ptx::u32;

constexpr int D = HEAD_DIM;
constexpr int THREADS = NUM_WARPS * 32;
constexpr int RB = BLOCK_M / 16;         // 16-row mma blocks (a warp holds all of its group's)
constexpr int BLOCK_ROWS = ROW_WARPS * BLOCK_M;  // rows of a row tile
constexpr int CHUNKS = D / 8;            // 16-byte chunks per row
constexpr int ROW_BYTES = D * 2;
constexpr int TILE_N = NUM_WARPS * BLOCK_N;
constexpr int Q_TILE_BYTES = BLOCK_ROWS * ROW_BYTES;
constexpr int KV_TILE_BYTES = TILE_N * ROW_BYTES;
constexpr int QK_K_STEPS = D / 16;
constexpr int S_N_TILES = BLOCK_N / 8;
constexpr int PV_K_STEPS = BLOCK_N / 16;
constexpr int O_N_TILES = D / 8;
constexpr int ROWS_PER_PASS = THREADS / CHUNKS;  // tile rows one pass of the block copies
constexpr int KV_PASSES = TILE_N / ROWS_PER_PASS;
constexpr int Q_PASSES = (BLOCK_ROWS * CHUNKS + THREADS - 1) / THREADS;

static_assert(THREADS % CHUNKS == 0, "a thread copies one fixed chunk of its rows");
static_assert(TILE_N % ROWS_PER_PASS == 0, "K/V tile rows must split evenly over the passes");

// Tile rows row0 .. row0 + TILE_N − 1 of K and V into the swizzled tiles (decode_common.cuh's
// gather_tile; under PAGE_AHEAD the next tile's pages are read into `pages`).
__device__ __forceinline__ void load_kv_tile(u32 k_dst, u32 v_dst, const elem_t* __restrict__ k,
                                             const elem_t* __restrict__ v, const KvView& view, int row0,
                                             int limit, int tid, int (&pages)[KV_PASSES]) {
    decode_common::gather_tile<PAGE_AHEAD != 0, KV_PASSES, ROWS_PER_PASS, CHUNKS>(
        k_dst, v_dst, k, v, view, row0, limit, tid, pages, [](int row, int chunk) { return swizzled(row, chunk); });
}

// exp2(a − b) of running maxima, with b = 0 standing in for −inf (a row that saw no key yet).
__device__ __forceinline__ float rescale_factor(float a, float b_used) { return exp2_ftz(a - b_used); }

}  // namespace decode_attn

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32, 1)
    attn_decode(const elem_t* __restrict__ q, const elem_t* __restrict__ k_cache, const elem_t* __restrict__ v_cache,
                elem_t* __restrict__ o, const int* __restrict__ cu_seqlens_q, const int* __restrict__ seqlens_kv,
                const int* __restrict__ block_table, int max_pages_per_seq, int page_size, int s_max, int batch,
                int heads, int kv_heads, float scale, int window_left, float* __restrict__ workspace,
                long long workspace_bytes, int num_splits) {
    using namespace decode_attn;
    const int kv_head = blockIdx.x % kv_heads;
    const int m0 = (blockIdx.x / kv_heads) * BLOCK_ROWS;
    const int b = blockIdx.y;
    const int split = blockIdx.z;
    const int q0 = cu_seqlens_q[b];
    const int sq = cu_seqlens_q[b + 1] - q0;
    const int skv = seqlens_kv[b];
    const int group = heads / kv_heads;
    const int rows = sq * group;  // this K/V head's rows in this sequence
    // Row tiles past the sequence's rows (and every tile of an empty sequence) leave at once.
    if (m0 >= rows) return;
    const long long total_rows = static_cast<long long>(cu_seqlens_q[batch]) * heads;
    if (num_splits > 1 && static_cast<long long>(num_splits) * total_rows * (D + 1) * 4 > workspace_bytes) __trap();
    float* ws_o = workspace;
    float* ws_lse = workspace + static_cast<long long>(num_splits) * total_rows * D;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t4 = lane & 3;

    // The block's key range (row_kv_lo/hi grow with the token), its tiles, and this split's run.
    const int last = min(m0 + BLOCK_ROWS, rows) - 1;
    const int block_lo = attn::row_kv_lo(m0 / group, sq, skv, window_left);
    const int block_hi = attn::row_kv_hi(last / group, sq, skv, 1, 0);
    const int first_tile = block_lo / TILE_N;
    const int all_end = block_hi > block_lo ? (block_hi + TILE_N - 1) / TILE_N : first_tile;
    const int per_split = (all_end - first_tile + num_splits - 1) / num_splits;
    const int tile_begin = min(all_end, first_tile + split * per_split);
    const int tile_end = min(all_end, tile_begin + per_split);

    // The packed row `r` of the tile (r < rows): its element offset in Q and O.
    auto row_offset = [&](int r) -> long long {
        const int token = q0 + r / group;
        const int head = kv_head * group + r % group;
        return (static_cast<long long>(token) * heads + head) * D;
    };
    // Its row in the workspace.
    auto ws_row = [&](int r) -> long long { return row_offset(r) / D; };

    if (tile_begin >= tile_end) {
        // An empty run (more splits than tiles): its rows saw no key here.
        if (num_splits > 1)
            for (int r = tid; r < BLOCK_ROWS; r += THREADS)
                if (m0 + r < rows) ws_lse[split * total_rows + ws_row(m0 + r)] = DECODE_NEG_INF;
        if (num_splits == 1) {
            // Only when no row of the tile sees a key (not with decode's own keys, kept for the ABI):
            // zeros.
            for (int idx = tid; idx < BLOCK_ROWS * CHUNKS; idx += THREADS) {
                const int r = idx / CHUNKS;
                if (m0 + r < rows)
                    *reinterpret_cast<uint4*>(o + row_offset(m0 + r) + (idx % CHUNKS) * 8) = make_uint4(0, 0, 0, 0);
            }
        }
        return;
    }

    const KvView view = make_view(block_table, max_pages_per_seq, page_size, s_max, kv_heads, b, kv_head);

    extern __shared__ __align__(128) unsigned char smem[];
    const u32 q_tile = smem_addr(smem);
    const u32 k_tiles = q_tile + Q_TILE_BYTES;
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    // The warps' split between rows and keys (block-uniform): the fewest power-of-two row groups of
    // BLOCK_M rows that hold this tile's rows, each of key_warps warps.
    const int tile_rows = last - m0 + 1;
    int row_warps = 1;
    while (row_warps < ROW_WARPS && row_warps * BLOCK_M < tile_rows) row_warps *= 2;
    const int key_warps = NUM_WARPS / row_warps;
    const int row_group = warp / key_warps;
    const int key_warp = warp % key_warps;
    const int mw = m0 + row_group * BLOCK_M;  // this warp's first row
    // The keys some row of this warp's group sees (none for a group past the sequence's rows).
    const int warp_lo = mw < rows ? attn::row_kv_lo(mw / group, sq, skv, window_left) : 0;
    const int warp_hi = mw < rows ? attn::row_kv_hi((min(mw + BLOCK_M, rows) - 1) / group, sq, skv, 1, 0) : 0;

    // This lane's rows (g and g + 8 of each row block): the keys lo .. hi − 1 they see; a padding
    // row past `rows` sees none (hi = 0).
    int lane_lo[RB][2], lane_hi[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = mw + 16 * r + g + 8 * h;
            const int token = row / group;
            lane_lo[r][h] = row < rows ? attn::row_kv_lo(token, sq, skv, window_left) : 0;
            lane_hi[r][h] = row < rows ? attn::row_kv_hi(token, sq, skv, 1, 0) : 0;
        }

    // ---- prologue: Q (its own commit group), then the first STAGES − 1 K/V tiles ------------------
#pragma unroll
    for (int i = 0; i < Q_PASSES; ++i) {
        const int idx = tid + i * THREADS;
        if (idx < BLOCK_ROWS * CHUNKS) {
            const int r = idx / CHUNKS, c = idx % CHUNKS;
            const bool in_range = m0 + r < rows;
            cp_async_16(q_tile + swizzled(r, c), in_range ? q + row_offset(m0 + r) + c * 8 : q, in_range);
        }
    }
    cp_async_commit();
    // PAGE_AHEAD: the table entries of the next tile to gather (tiles are gathered in order).
    int pages[KV_PASSES];
    if (PAGE_AHEAD) read_pages<KV_PASSES, ROWS_PER_PASS>(pages, view, tile_begin * TILE_N, skv, tid / CHUNKS);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int tile = tile_begin + s;
        if (tile < tile_end) {
            const int slot = tile % STAGES;
            load_kv_tile(k_tiles + slot * KV_TILE_BYTES, v_tiles + slot * KV_TILE_BYTES, k_cache, v_cache, view,
                         tile * TILE_N, skv, tid, pages);
        }
        cp_async_commit();  // committed even when empty, so that the group count stays uniform
    }
    cp_async_wait<STAGES - 1>();
    __syncthreads();
    const LaneAddressing addr(lane);
    u32 q_frag[RB][QK_K_STEPS][4];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int kk = 0; kk < QK_K_STEPS; ++kk)
            ldmatrix_x4(q_frag[r][kk], addr.a(q_tile, row_group * BLOCK_M + 16 * r, kk));

    const float scale_log2 = scale * ATTN_LOG2E;
    float o_acc[RB][O_N_TILES][4];
    float row_max[RB][2], row_sum[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int n = 0; n < O_N_TILES; ++n) o_acc[r][n][0] = o_acc[r][n][1] = o_acc[r][n][2] = o_acc[r][n][3] = 0.f;
        row_max[r][0] = row_max[r][1] = DECODE_NEG_INF;
        row_sum[r][0] = row_sum[r][1] = 0.f;
    }

    for (int j = tile_begin; j < tile_end; ++j) {
#if STAGES == 1
        load_kv_tile(k_tiles, v_tiles, k_cache, v_cache, view, j * TILE_N, skv, tid, pages);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
#else
        // Tile j complete (newer groups: tiles j+1 .. j+STAGES−2), visible to all, and every warp
        // is done with tile j − 1, whose slot is refilled below.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int next = j + STAGES - 1;
            if (next < tile_end) {
                const int slot = next % STAGES;
                load_kv_tile(k_tiles + slot * KV_TILE_BYTES, v_tiles + slot * KV_TILE_BYTES, k_cache, v_cache,
                             view, next * TILE_N, skv, tid, pages);
            }
            cp_async_commit();
        }
#endif
        const int slot = j % STAGES;
        // This warp's chunks of the tile: key_warp, key_warp + key_warps, … (row_warps of them).
        for (int chunk = key_warp; chunk < NUM_WARPS; chunk += key_warps) {
            const int kv0 = j * TILE_N + chunk * BLOCK_N;  // the chunk's first key
            const u32 k_tile = k_tiles + slot * KV_TILE_BYTES + chunk * BLOCK_N * ROW_BYTES;
            const u32 v_tile = v_tiles + slot * KV_TILE_BYTES + chunk * BLOCK_N * ROW_BYTES;
            // Warp-uniform: some row of the warp's group may see some of these keys.
            if (kv0 < warp_hi && kv0 + BLOCK_N > warp_lo) {
                float s_acc[RB][S_N_TILES][4];
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int n = 0; n < S_N_TILES; ++n) s_acc[r][n][0] = s_acc[r][n][1] = s_acc[r][n][2] = s_acc[r][n][3] = 0.f;
#pragma unroll
                for (int kk = 0; kk < QK_K_STEPS; ++kk) {
#pragma unroll
                    for (int p = 0; p < S_N_TILES / 2; ++p) {
                        u32 kb[4];
                        ldmatrix_x4(kb, addr.b(k_tile, 16 * p, kk));
#pragma unroll
                        for (int r = 0; r < RB; ++r) {
                            mma_16816(s_acc[r][2 * p], q_frag[r][kk], kb[0], kb[1]);
                            mma_16816(s_acc[r][2 * p + 1], q_frag[r][kk], kb[2], kb[3]);
                        }
                    }
                }
                // The mask of every element: causal (and the sequence's end), the window, padding rows.
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int n = 0; n < S_N_TILES; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int col = kv0 + 8 * n + 2 * t4 + (e & 1);
                            if (col >= lane_hi[r][e >> 1] || col < lane_lo[r][e >> 1]) s_acc[r][n][e] = DECODE_NEG_INF;
                        }
                // ---- online softmax (mma.cu's) ----------------------------------------------------
                float max_used[RB][2], rescale[RB][2];
                bool max_moved = false;
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float tile_max = DECODE_NEG_INF;
#pragma unroll
                        for (int n = 0; n < S_N_TILES; ++n)
                            tile_max = fmaxf(tile_max, fmaxf(s_acc[r][n][2 * h], s_acc[r][n][2 * h + 1]));
                        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
                        const float m = fmaxf(row_max[r][h], tile_max * scale_log2);
                        max_used[r][h] = m == DECODE_NEG_INF ? 0.f : m;
                        rescale[r][h] = rescale_factor(row_max[r][h], max_used[r][h]);
                        max_moved |= rescale[r][h] != 1.f;
                        row_max[r][h] = m;
                        row_sum[r][h] *= rescale[r][h];
                    }
                if (__any_sync(0xffffffffu, max_moved)) {
#pragma unroll
                    for (int r = 0; r < RB; ++r)
#pragma unroll
                        for (int n = 0; n < O_N_TILES; ++n)
#pragma unroll
                            for (int e = 0; e < 4; ++e) o_acc[r][n][e] *= rescale[r][e >> 1];
                }
                // ---- P = exp2(S·scale·log2e − m) as A fragments; O += P·V ------------------------------
#pragma unroll
                for (int kk = 0; kk < PV_K_STEPS; ++kk) {
                    u32 p_frag[RB][4];
#pragma unroll
                    for (int r = 0; r < RB; ++r)
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            float(&s)[4] = s_acc[r][2 * kk + half];
                            const float p0 = exp2_ftz(fmaf(s[0], scale_log2, -max_used[r][0]));
                            const float p1 = exp2_ftz(fmaf(s[1], scale_log2, -max_used[r][0]));
                            const float p2 = exp2_ftz(fmaf(s[2], scale_log2, -max_used[r][1]));
                            const float p3 = exp2_ftz(fmaf(s[3], scale_log2, -max_used[r][1]));
                            row_sum[r][0] += p0 + p1;
                            row_sum[r][1] += p2 + p3;
                            p_frag[r][2 * half] = pack_elem2(p0, p1);
                            p_frag[r][2 * half + 1] = pack_elem2(p2, p3);
                        }
#pragma unroll
                    for (int p = 0; p < O_N_TILES / 2; ++p) {
                        u32 vb[4];
                        ldmatrix_x4_trans(vb, addr.a(v_tile, 16 * kk, p));
#pragma unroll
                        for (int r = 0; r < RB; ++r) {
                            mma_16816(o_acc[r][2 * p], p_frag[r], vb[0], vb[1]);
                            mma_16816(o_acc[r][2 * p + 1], p_frag[r], vb[2], vb[3]);
                        }
                    }
                }
            }
        }  // chunks
#if STAGES == 1
        __syncthreads();  // the one slot is refilled at the top of the next tile
#endif
    }

#if NUM_WARPS > 1
    // ---- each row group's partial states merged into its first warp (each lane parks its own
    // registers; a group's parked slots are rows-group · (key_warps − 1) onwards) ---------------------
    {
        float4* parked_o = reinterpret_cast<float4*>(smem + Q_TILE_BYTES);
        float4* parked_ml = parked_o + (NUM_WARPS - 1) * RB * O_N_TILES * 32;
        cp_async_wait<0>();  // only empty groups remain, but no copy may land in the ring after this
        __syncthreads();     // every warp is done reading K/V tiles
        if (key_warp != 0) {
            const int parked = row_group * (key_warps - 1) + key_warp - 1;
#pragma unroll
            for (int r = 0; r < RB; ++r) {
#pragma unroll
                for (int n = 0; n < O_N_TILES; ++n)
                    parked_o[((parked * RB + r) * O_N_TILES + n) * 32 + lane] =
                        make_float4(o_acc[r][n][0], o_acc[r][n][1], o_acc[r][n][2], o_acc[r][n][3]);
                parked_ml[(parked * RB + r) * 32 + lane] =
                    make_float4(row_max[r][0], row_max[r][1], row_sum[r][0], row_sum[r][1]);
            }
        }
        __syncthreads();
        if (key_warp != 0) return;  // no block barrier follows
        for (int parked = row_group * (key_warps - 1); parked < (row_group + 1) * (key_warps - 1); ++parked) {
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float4 ml = parked_ml[(parked * RB + r) * 32 + lane];
                const float other_max[2] = {ml.x, ml.y};
                const float other_sum[2] = {ml.z, ml.w};
                float mine_f[2], other_f[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float m = fmaxf(row_max[r][h], other_max[h]);
                    const float m_used = m == DECODE_NEG_INF ? 0.f : m;
                    mine_f[h] = rescale_factor(row_max[r][h], m_used);
                    other_f[h] = rescale_factor(other_max[h], m_used);
                    row_max[r][h] = m;
                    row_sum[r][h] = row_sum[r][h] * mine_f[h] + other_sum[h] * other_f[h];
                }
#pragma unroll
                for (int n = 0; n < O_N_TILES; ++n) {
                    const float4 po = parked_o[((parked * RB + r) * O_N_TILES + n) * 32 + lane];
                    o_acc[r][n][0] = o_acc[r][n][0] * mine_f[0] + po.x * other_f[0];
                    o_acc[r][n][1] = o_acc[r][n][1] * mine_f[0] + po.y * other_f[0];
                    o_acc[r][n][2] = o_acc[r][n][2] * mine_f[1] + po.z * other_f[1];
                    o_acc[r][n][3] = o_acc[r][n][3] * mine_f[1] + po.w * other_f[1];
                }
            }
        }
    }
#endif

    // ---- epilogue (each group's first warp): full row sums; O, or the split's normalised O and LSE -
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[r][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = mw + 16 * r + g + 8 * h;
            if (row >= rows) continue;
            const float inv_l = l > 0.f ? 1.f / l : 0.f;  // a row that saw no key: zeros
            if (num_splits == 1) {
                elem_t* o_row = o + row_offset(row);
#pragma unroll
                for (int n = 0; n < O_N_TILES; ++n)
                    *reinterpret_cast<elem2_t*>(o_row + 8 * n + 2 * t4) =
                        from_float2(o_acc[r][n][2 * h] * inv_l, o_acc[r][n][2 * h + 1] * inv_l);
            } else {
                const long long at = split * total_rows + ws_row(row);
                float* o_row = ws_o + at * D;
#pragma unroll
                for (int n = 0; n < O_N_TILES; ++n)
                    *reinterpret_cast<float2*>(o_row + 8 * n + 2 * t4) =
                        make_float2(o_acc[r][n][2 * h] * inv_l, o_acc[r][n][2 * h + 1] * inv_l);
                if (t4 == 0) ws_lse[at] = l > 0.f ? row_max[r][h] + __log2f(l) : DECODE_NEG_INF;
            }
        }
}
