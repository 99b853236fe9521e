// mma.cu — tensor-core FlashAttention-2-class forward kernel (mma.sync m16n8k16, ldmatrix, cp.async).
//
// Bird's-eye view
//   One thread block computes a BLOCK_M x HEAD_DIM tile of O for one (batch, head). Its NUM_WARPS
//   warps form NUM_WARPS / KV_SPLIT row groups of WARP_M query rows (one or two 16-row mma blocks
//   per warp); the KV_SPLIT warps of a row group share its rows and split every key/value tile
//   between them, BLOCK_N keys each. Each warp runs its own online softmax, FA2-style. Per tile:
//     S = Q·Kᵀ        mma.sync m16n8k16; Q as A fragments (registers), K via ldmatrix.x4 (B, "col");
//                     with WARP_M 32 every K fragment feeds two mma (half the shared-memory reads)
//     P = exp2(S·scale·log2e − m) as one FFMA + EX2 per score; m and l updated in registers
//                     (quad shuffles for row reductions)
//     O = O·α + P·V   the S accumulator fragments re-packed in registers as A fragments of P;
//                     V via ldmatrix.x4.trans (V is [S_kv, D] row-major, the K×N B operand)
//   K/V tiles of KV_SPLIT · BLOCK_N rows stream through a STAGES-deep cp.async ring in shared
//   memory; Q is loaded once. With KV_SPLIT > 1 the warps of a row group merge their (m, l, O)
//   through shared memory at the end (small grids: more blocks, shorter serial chains per warp).
//   Each row group's first warp then stages its output rows in its slice of the Q buffer and writes
//   them with 16-byte coalesced stores, never touching rows >= S_q.
//
// Variants (README.md, "Variants"): all of them.
//   GQA/MQA and varlen: attn::head_view gives the (sequence, head)'s row-0 offsets, row strides and
//     lengths; from there on S_q and S_kv are the sequence's own. A block whose first row is past its
//     sequence's S_q returns before any barrier. Loads zero-fill rows >= the sequence's S_q / S_kv
//     without reading them (in varlen they belong to the next sequence); the store skips rows >= S_q.
//     K/V rows D apart (dense, or varlen with H_kv = 1) take the copy with immediate per-chunk
//     offsets (unchanged from before the variants); other strides (varlen, H_kv > 1) a second
//     instantiation of the block (attn_block<0>) with one mad.wide per 16-byte chunk.
//   Sliding window (window_left, window_right; causal is window_right 0): the block visits the key
//     tiles from its first row's row_kv_lo to its last row's row_kv_hi; a warp skips sub-tiles
//     entirely left of its first row's window or right of its last row's; the right-side element
//     mask (causal, window, ragged S_kv) runs only on sub-tiles that cross some row's row_kv_hi, as
//     the causal mask did, and the left-side one (per lane) only where a row's row_kv_lo falls
//     inside the sub-tile. Dense problems without a window add a few integer ops per tile.
//
// Knobs (compile-time defines, defaults below)
//   HEAD_DIM  ∈ {64, 128}          (required, from attn_common.cuh)
//   NUM_WARPS ∈ {1, 2, 4, 8}       default 4
//   WARP_M    ∈ {16, 32}           query rows per warp; default 32
//   KV_SPLIT  ∈ {1, 2, 4}          warps sharing a row group (divides NUM_WARPS); default 1
//   BLOCK_M   = WARP_M · NUM_WARPS / KV_SPLIT (the only allowed value; defaulted)
//   BLOCK_N   ∈ {32, 48, 64, 96, 128}  keys per warp per tile; default 96 for HEAD_DIM 64, 48 for 128
//                                  (KV_SPLIT · BLOCK_N · HEAD_DIM / 8 must be a multiple of the threads)
//   STAGES    ∈ {1, 2, 3, 4}       default 2 for HEAD_DIM 64, 3 for 128
//   Q_IN_REGS ∈ {0, 1}             1: Q's A fragments loaded once into registers; 0: re-read from
//                                  shared memory per tile. Default 1 when WARP_M is 16 and BLOCK_N
//                                  < 128, else 0 (the accumulators leave no room)
//   MIN_BLOCKS ≥ 1                 default 1: the min-blocks-per-SM hint of __launch_bounds__
//                                  (only emitted when > 1)
//   Defaults (no spills, stack frame 0 under ptxas sm_90; see `cargo xtask kernels --ptxas`):
//     HEAD_DIM 64:  NUM_WARPS 4, WARP_M 32 (BLOCK_M 128), BLOCK_N 96,  STAGES 2, Q_IN_REGS 0 (255 regs)
//     HEAD_DIM 128: NUM_WARPS 4, WARP_M 32 (BLOCK_M 128), BLOCK_N 48,  STAGES 3, Q_IN_REGS 0 (255 regs)
//   (BLOCK_N 64 at HEAD_DIM 128, and 128 at HEAD_DIM 64 for sm_80, spill: TUNING.md, `mma-tiles`.)
//   The host's registry overrides them per shape (small grids get KV_SPLIT > 1, see its `tuned`).
//
// Launch geometry
//   grid  = (ceil(S_q / BLOCK_M), H, B),  block = NUM_WARPS · 32 threads
//   dynamic shared memory = BLOCK_M · HEAD_DIM · 2
//                         + max(2 · STAGES · KV_SPLIT · BLOCK_N · HEAD_DIM · 2,
//                               (KV_SPLIT − 1) · BLOCK_M · (4 · HEAD_DIM + 32))   bytes
//     (the Q tile, then STAGES × (K tile + V tile) of 2-byte elements, whose space the KV_SPLIT
//     merge reuses for the f32 partial O, m and l of every warp but a row group's first; the O
//     staging reuses the Q tile). Above 48 KB the host raises the limit with cuFuncSetAttribute;
//     configs above the device's opt-in limit (232448 bytes on sm_90) are rejected by the host.
//
// Shared-memory layout and swizzle
//   Each tile is row-major with rows of HEAD_DIM elements = CHUNKS 16-byte chunks. Logical chunk c of
//   row r is stored at physical chunk c ^ (r & 7). ldmatrix reads 8 rows × 16 bytes per phase and
//   those 8 rows have distinct (r & 7), so the 8 chunks land in 8 distinct bank groups; the cp.async
//   stores write 8 consecutive chunks of one row per phase, which the XOR only permutes. Both are
//   therefore bank-conflict free, as are the 4-byte O staging stores (see store_output) and the
//   lane-indexed 16-byte stores of the merge. (ncu still counts a few conflicts in the 32-row
//   defaults, none in 16-row configs: not traced yet; TUNING.md, `mma-swizzle`.)
//
// Fragment layouts of mma.sync.m16n8k16 (PTX ISA), with g = lane / 4 and t = lane % 4:
//   A (16×16, row-major, 4 × b32): a0 = A[g][2t..2t+1]   a1 = A[g+8][2t..2t+1]
//                                  a2 = A[g][2t+8..2t+9] a3 = A[g+8][2t+8..2t+9]
//   B (16×8,  "col",      2 × b32): b0 = B[2t..2t+1][g]   b1 = B[2t+8..2t+9][g]
//   C (16×8,  f32,        4 × f32): c0,c1 = C[g][2t..2t+1] c2,c3 = C[g+8][2t..2t+1]
//   (the lower column index sits in the lower 16 bits of each b32).
//   ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8×8 matrix i; register i of every lane then
//   holds row g, columns 2t..2t+1 of matrix i (with .trans: rows 2t..2t+1, column g).

#include "attn_common.cuh"
// The PTX wrappers, the swizzle and the ldmatrix lane addressing, one copy shared with decode.cu.
#include "mma_ptx.cuh"

#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef WARP_M
#define WARP_M 32
#endif
#ifndef KV_SPLIT
#define KV_SPLIT 1
#endif
#ifndef BLOCK_M
#define BLOCK_M (WARP_M * NUM_WARPS / KV_SPLIT)
#endif
#ifndef BLOCK_N
#if HEAD_DIM == 128
#define BLOCK_N 48
#else
#define BLOCK_N 96
#endif
#endif
#ifndef STAGES
#if HEAD_DIM == 128
#define STAGES 3
#else
#define STAGES 2
#endif
#endif
#ifndef Q_IN_REGS
// Q resident costs WARP_M · HEAD_DIM / 32 registers; next to 32-row or 128-key accumulators
// ptxas spills.
#if WARP_M == 16 && BLOCK_N < 128
#define Q_IN_REGS 1
#else
#define Q_IN_REGS 0
#endif
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "mma.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 1 || NUM_WARPS == 2 || NUM_WARPS == 4 || NUM_WARPS == 8,
              "mma.cu: NUM_WARPS must be 1, 2, 4 or 8");
static_assert(WARP_M == 16 || WARP_M == 32, "mma.cu: WARP_M must be 16 or 32");
static_assert((KV_SPLIT == 1 || KV_SPLIT == 2 || KV_SPLIT == 4) && NUM_WARPS % KV_SPLIT == 0,
              "mma.cu: KV_SPLIT must be 1, 2 or 4 and divide NUM_WARPS");
static_assert(BLOCK_M == WARP_M * NUM_WARPS / KV_SPLIT, "mma.cu: BLOCK_M must equal WARP_M * NUM_WARPS / KV_SPLIT");
static_assert(BLOCK_N == 32 || BLOCK_N == 48 || BLOCK_N == 64 || BLOCK_N == 96 || BLOCK_N == 128,
              "mma.cu: BLOCK_N must be 32, 48, 64, 96 or 128");
static_assert(STAGES >= 1 && STAGES <= 4, "mma.cu: STAGES must be 1, 2, 3 or 4");
static_assert(Q_IN_REGS == 0 || Q_IN_REGS == 1, "mma.cu: Q_IN_REGS must be 0 or 1");
static_assert(MIN_BLOCKS >= 1, "mma.cu: MIN_BLOCKS must be >= 1");
static_assert(sizeof(elem_t) == 2, "mma.cu: 16-bit elements expected");

namespace mma_attn {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::row_kv_hi;
using attn::row_kv_lo;
using attn::smem_addr;
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
constexpr int RB = WARP_M / 16;               // 16-row mma blocks per warp
constexpr int CHUNKS = D / 8;                 // 16-byte chunks per row
constexpr int ROW_BYTES = D * 2;
constexpr int TILE_ROWS = KV_SPLIT * BLOCK_N; // K/V rows per pipeline tile
constexpr int Q_TILE_BYTES = BLOCK_M * ROW_BYTES;
constexpr int KV_TILE_BYTES = TILE_ROWS * ROW_BYTES;
constexpr int QK_K_STEPS = D / 16;            // k-steps of Q·Kᵀ (over head dim)
constexpr int S_N_TILES = BLOCK_N / 8;        // n-tiles of S (over keys)
constexpr int PV_K_STEPS = BLOCK_N / 16;      // k-steps of P·V (over keys)
constexpr int O_N_TILES = D / 8;              // n-tiles of O (over head dim)
constexpr int KV_CHUNKS_PER_THREAD = TILE_ROWS * CHUNKS / THREADS;
constexpr int Q_CHUNKS_PER_THREAD = BLOCK_M * CHUNKS / THREADS;
constexpr int OUT_CHUNKS_PER_LANE = WARP_M * CHUNKS / 32;

static_assert(TILE_ROWS * CHUNKS % THREADS == 0, "K/V tile chunks must split evenly over the block");
static_assert(BLOCK_M * CHUNKS % THREADS == 0, "Q tile chunks must split evenly over the block");

// NVRTC has no <math.h>, hence no INFINITY macro: -inf by its bit pattern.
#define MMA_NEG_INF __int_as_float(0xff800000u)

// ---- tile loads ----------------------------------------------------------------------------------

// The address of element `col` of row `row` of `head`, rows `stride` elements apart, as one
// mad.wide.s32 that the compiler cannot see into. Written in C++, (row0 + r) · stride becomes
// row0 · stride + r · stride, and ptxas keeps every pass's 64-bit r · stride live across the main
// loop (tens of registers; spills in the defaults).
__device__ __forceinline__ const elem_t* row_address(const elem_t* head, int row, int stride, int col) {
    const elem_t* base = head + col;
    const elem_t* p;
    asm("mad.wide.s32 %0, %1, %2, %3;\n" : "=l"(p) : "r"(row), "r"(stride * 2), "l"(base));
    return p;
}

// `rows` rows of a head (rows row0.. of `head`) into the swizzled tile `dst`, cooperatively by the
// block, `PerThread` 16-byte chunks per thread. Rows are Stride elements apart when Stride != 0
// (compile time: D, for dense K/V), else `stride` (run time: D, H·D or H_kv·D). Rows >= limit (the
// sequence's length) are zero-filled without a global read (their source address is the valid head
// base, never dereferenced since src-size is 0): in varlen they belong to the next sequence, or lie
// past the buffer.
template <int PerThread, int Stride>
__device__ __forceinline__ void load_rows(u32 dst, const elem_t* __restrict__ head, int row0, int limit,
                                          int stride, int tid) {
    // Thread tid copies chunk (tid % CHUNKS) of rows tid / CHUNKS + i·ROWS_PER_PASS. When a pass
    // spans a multiple of 8 rows the swizzle key (row & 7) is the same in every pass, so one source
    // pointer and one destination offset serve all passes, stepped by constants: no per-pass
    // address registers live across the main loop.
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
    const int chunk = tid % CHUNKS;
    const int first_row = tid / CHUNKS;
    if constexpr (THREADS % CHUNKS == 0 && ROWS_PER_PASS % 8 == 0) {
        const u32 dst0 = dst + swizzled(first_row, chunk);
        if constexpr (Stride != 0) {
            const elem_t* src0 = head + static_cast<size_t>(row0 + first_row) * Stride + chunk * 8;
#pragma unroll
            for (int i = 0; i < PerThread; ++i) {
                const bool in_range = row0 + first_row + i * ROWS_PER_PASS < limit;
                cp_async_16(dst0 + i * ROWS_PER_PASS * ROW_BYTES, in_range ? src0 + i * ROWS_PER_PASS * Stride : head,
                            in_range);
            }
        } else {
#pragma unroll
            for (int i = 0; i < PerThread; ++i) {
                const int row = row0 + first_row + i * ROWS_PER_PASS;
                const bool in_range = row < limit;
                cp_async_16(dst0 + i * ROWS_PER_PASS * ROW_BYTES,
                            in_range ? row_address(head, row, stride, chunk * 8) : head, in_range);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < PerThread; ++i) {
            const int idx = tid + i * THREADS;
            const int row = idx / CHUNKS;
            const int c = idx % CHUNKS;
            const bool in_range = row0 + row < limit;
            const elem_t* src;
            if constexpr (Stride != 0)
                src = in_range ? head + static_cast<size_t>(row0 + row) * Stride + c * 8 : head;
            else
                src = in_range ? row_address(head, row0 + row, stride, c * 8) : head;
            cp_async_16(dst + swizzled(row, c), src, in_range);
        }
    }
}

// One K/V tile: rows row0.. of K and V into `k_dst` and `v_dst`, rows Stride elements apart (D:
// dense K/V, the per-pass offsets are immediates), or with Stride 0 `stride` apart (varlen).
template <int Stride>
__device__ __forceinline__ void load_kv_tile(u32 k_dst, u32 v_dst, const elem_t* __restrict__ k_head,
                                             const elem_t* __restrict__ v_head, int row0, int limit, int stride,
                                             int tid) {
    load_rows<KV_CHUNKS_PER_THREAD, Stride>(k_dst, k_head, row0, limit, stride, tid);
    load_rows<KV_CHUNKS_PER_THREAD, Stride>(v_dst, v_head, row0, limit, stride, tid);
}

// ---- output --------------------------------------------------------------------------------------

// Normalises the warp's O accumulator, stages it in the warp's WARP_M rows of the Q buffer and writes
// the valid rows to global memory with 16-byte stores. The 4-byte staging stores are conflict free:
// in one store the 32 lanes cover rows g = 0..7 at chunk n ^ g and word t, i.e. 32 distinct banks.
__device__ __forceinline__ void store_output(unsigned char* smem, const float (&o_acc)[RB][O_N_TILES][4],
                                             const float (&inv_l)[RB][2], elem_t* __restrict__ o_head,
                                             int m0, int warp_row0, int seq_q, int stride, int lane) {
    const int g = lane >> 2;
    const int t = lane & 3;
    __syncwarp();  // every lane is done reading its Q rows (when Q_IN_REGS == 0) before they are overwritten
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int n = 0; n < O_N_TILES; ++n) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = warp_row0 + 16 * r + g + 8 * half;
                const u32 offset = swizzled(row, n) + 4 * t;
                *reinterpret_cast<elem2_t*>(smem + offset) = from_float2(o_acc[r][n][2 * half] * inv_l[r][half],
                                                                         o_acc[r][n][2 * half + 1] * inv_l[r][half]);
            }
        }
    }
    __syncwarp();  // the staged rows are visible to every lane of the warp
#pragma unroll
    for (int i = 0; i < OUT_CHUNKS_PER_LANE; ++i) {
        const int idx = lane + i * 32;
        const int row = warp_row0 + idx / CHUNKS;
        const int chunk = idx % CHUNKS;
        if (m0 + row < seq_q) {
            const uint4 value = *reinterpret_cast<const uint4*>(smem + swizzled(row, chunk));
            *reinterpret_cast<uint4*>(o_head + static_cast<size_t>(m0 + row) * stride + chunk * 8) = value;
        }
    }
}

// exp2(a - b) for running maxima, where b = -inf (a row that has seen no key) gives 0, not NaN.
__device__ __forceinline__ float rescale_factor(float a, float b_used) { return exp2_ftz(a - b_used); }

}  // namespace mma_attn

namespace mma_attn {

// One block's BLOCK_M rows of O for one (sequence, query head): q_head/o_head point at the head's
// row 0 in Q/O (rows q_stride elements apart), k_head/v_head at its K/V head's row 0 (rows
// kv_stride apart); seq_q, seq_kv are the sequence's lengths and m0 < seq_q. KvStride: the K/V row
// stride when known at compile time (D), else 0 (kv_stride read at run time).
template <int KvStride>
__device__ __forceinline__ void attn_block(const elem_t* __restrict__ q_head, const elem_t* __restrict__ k_head,
                                           const elem_t* __restrict__ v_head, elem_t* __restrict__ o_head,
                                           int q_stride, int kv_stride_rt, int seq_q, int seq_kv, int m0,
                                           float scale, int causal, int window_left, int window_right) {
    const int kv_stride = KvStride != 0 ? KvStride : kv_stride_rt;
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 q_tile = smem_addr(smem);
    const u32 k_tiles = q_tile + Q_TILE_BYTES;
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int split = warp % KV_SPLIT;            // which BLOCK_N keys of each tile this warp takes
    const int g = lane >> 2;                      // fragment row group
    const int t = lane & 3;                       // thread in quad
    const int warp_row0 = (warp / KV_SPLIT) * WARP_M;  // first row of this warp inside the block tile

    // Key tiles this block visits: from the first key its first row may see (sliding window) to
    // the last key its last real row may see (causal, window, or seq_kv): row_kv_lo and row_kv_hi
    // grow with the row, so every tile outside is invisible to all rows and skipped. Tiles are
    // numbered absolutely (tile j holds keys j·TILE_ROWS..) and tile j sits in ring slot j % STAGES.
    const int last_row = min(m0 + BLOCK_M, seq_q) - 1;
    const int block_kv_lo = row_kv_lo(m0, seq_q, seq_kv, window_left);
    const int block_kv_hi = row_kv_hi(last_row, seq_q, seq_kv, causal, window_right);
    const int first_tile = block_kv_lo / TILE_ROWS;
    const int end_tile = block_kv_hi > block_kv_lo ? (block_kv_hi + TILE_ROWS - 1) / TILE_ROWS : first_tile;

    // Per-warp bounds on the right (causal/window/seq_kv) side. Sub-tiles ending at or before
    // `warp_hi_min` are visible to every row of the warp on that side (no element mask); those
    // starting at or after `warp_hi_max` are invisible to all of them (skipped). A warp whose rows
    // all lie past seq_q computes nothing.
    const bool warp_has_rows = m0 + warp_row0 < seq_q;
    const int warp_hi_min = row_kv_hi(m0 + warp_row0, seq_q, seq_kv, causal, window_right);
    const int warp_hi_max =
        warp_has_rows ? row_kv_hi(m0 + warp_row0 + WARP_M - 1, seq_q, seq_kv, causal, window_right) : 0;
    // This lane's rows (g and g + 8 of each 16-row block): their key limits for the element mask.
    int lane_hi[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            lane_hi[r][h] = row_kv_hi(m0 + warp_row0 + 16 * r + g + 8 * h, seq_q, seq_kv, causal, window_right);
    // The left (sliding window) side, in one register: the first key of this lane's row g
    // (row_kv_lo unclipped: a key below 0 or a clip at seq_kv changes no comparison below, since
    // keys >= row_kv_hi <= seq_kv are masked anyway). Row g + 8h + 16r starts 8h + 16r keys later.
    // Without a left bound, a sentinel that no key index comes near.
    const int lane_lo =
        window_left < 0 ? -(1 << 30) : m0 + warp_row0 + g + seq_kv - seq_q - window_left;

    const float scale_log2 = scale * ATTN_LOG2E;
    const LaneAddressing addr(lane);

    // ---- prologue: Q (own commit group), then the first STAGES - 1 K/V tiles -----------------------
    load_rows<Q_CHUNKS_PER_THREAD, 0>(q_tile, q_head, m0, seq_q, q_stride, tid);
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int tile = first_tile + s;
        if (tile < end_tile) {
            const int slot = static_cast<unsigned>(tile) % STAGES;
            load_kv_tile<KvStride>(k_tiles + slot * KV_TILE_BYTES, v_tiles + slot * KV_TILE_BYTES, k_head, v_head,
                         tile * TILE_ROWS, seq_kv, kv_stride, tid);
        }
        cp_async_commit();  // committed even when empty, so group counting stays uniform
    }

    // Q: wait for its group only (the STAGES - 1 newer groups may still fly); the block loaded it
    // together, so a block barrier makes it visible.
    cp_async_wait<STAGES - 1>();
    __syncthreads();
#if Q_IN_REGS
    u32 q_frag[RB][QK_K_STEPS][4];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int kk = 0; kk < QK_K_STEPS; ++kk) ldmatrix_x4(q_frag[r][kk], addr.a(q_tile, warp_row0 + 16 * r, kk));
#endif

    float o_acc[RB][O_N_TILES][4];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int n = 0; n < O_N_TILES; ++n) o_acc[r][n][0] = o_acc[r][n][1] = o_acc[r][n][2] = o_acc[r][n][3] = 0.f;
    // Running max (in the scale·log2e domain) and this lane's partial row sum for rows g and g + 8 of
    // each row block. The sum stays partial over the quad until the end: every rescale factor is
    // uniform in a quad.
    float row_max[RB][2];
    float row_sum[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        row_max[r][0] = row_max[r][1] = MMA_NEG_INF;
        row_sum[r][0] = row_sum[r][1] = 0.f;
    }

    for (int j = first_tile; j < end_tile; ++j) {
        // ---- pipeline: make tile j resident, refill the slot freed by tile j - 1 --------------------
#if STAGES == 1
        load_kv_tile<KvStride>(k_tiles, v_tiles, k_head, v_head, j * TILE_ROWS, seq_kv, kv_stride, tid);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
#else
        // Groups newer than tile j's: tiles j+1 .. j+STAGES-2, so this leaves tile j complete.
        cp_async_wait<STAGES - 2>();
        // Tile j is visible to all threads, and every warp has finished tile j - 1, whose slot
        // ((j + STAGES - 1) % STAGES) is refilled right below.
        __syncthreads();
        {
            const int next = j + STAGES - 1;
            if (next < end_tile) {
                const int slot = static_cast<unsigned>(next) % STAGES;  // tile indices are >= 0
                load_kv_tile<KvStride>(k_tiles + slot * KV_TILE_BYTES, v_tiles + slot * KV_TILE_BYTES, k_head, v_head,
                             next * TILE_ROWS, seq_kv, kv_stride, tid);
            }
            cp_async_commit();
        }
#endif
        const int kv0 = j * TILE_ROWS + split * BLOCK_N;  // this warp's first key of the tile
        const int slot = static_cast<unsigned>(j) % STAGES;
        const u32 k_tile = k_tiles + slot * KV_TILE_BYTES + split * BLOCK_N * ROW_BYTES;
        const u32 v_tile = v_tiles + slot * KV_TILE_BYTES + split * BLOCK_N * ROW_BYTES;

        // Key kv0 + 2t + c (c = 8n + (e & 1), this lane's columns) lies left of the window of this
        // lane's row g + 8h + 16r iff lo_gap + c < 16r + 8h.
        const int lo_gap = kv0 + 2 * t - lane_lo;
        // Warp-uniform (lane_lo - g is the warp's first row's left bound): some row of this warp may
        // see a key of this sub-tile, i.e. its last row's right bound is past kv0 and its first row's
        // left bound is before the sub-tile's end.
        if (kv0 < warp_hi_max && kv0 + BLOCK_N > lane_lo - g) {
            // ---- S = Q·Kᵀ (WARP_M × BLOCK_N per warp); one K fragment serves every row block -----
            float s_acc[RB][S_N_TILES][4];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int n = 0; n < S_N_TILES; ++n) s_acc[r][n][0] = s_acc[r][n][1] = s_acc[r][n][2] = s_acc[r][n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < QK_K_STEPS; ++kk) {
#if Q_IN_REGS
                const u32(&a)[RB][QK_K_STEPS][4] = q_frag;
#define MMA_Q_FRAG(r) a[r][kk]
#else
                u32 a[RB][4];
#pragma unroll
                for (int r = 0; r < RB; ++r) ldmatrix_x4(a[r], addr.a(q_tile, warp_row0 + 16 * r, kk));
#define MMA_Q_FRAG(r) a[r]
#endif
#pragma unroll
                for (int p = 0; p < S_N_TILES / 2; ++p) {
                    u32 b[4];
                    ldmatrix_x4(b, addr.b(k_tile, 16 * p, kk));
#pragma unroll
                    for (int r = 0; r < RB; ++r) {
                        mma_16816(s_acc[r][2 * p], MMA_Q_FRAG(r), b[0], b[1]);
                        mma_16816(s_acc[r][2 * p + 1], MMA_Q_FRAG(r), b[2], b[3]);
                    }
                }
#undef MMA_Q_FRAG
            }

            // ---- mask only sub-tiles that cross a row's key bounds (S stays unscaled: the scale
            // is folded into the exponent below, one FFMA per score) ------------------------------
            // Right side (causal, window, ragged seq_kv): some row's limit ends inside the sub-tile.
            const bool needs_mask = kv0 + BLOCK_N > warp_hi_min;
            if (needs_mask) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
#pragma unroll
                    for (int n = 0; n < S_N_TILES; ++n) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            // c0,c1: row g; c2,c3: row g + 8; column 8n + 2t + (e & 1)
                            const int col = kv0 + 8 * n + 2 * t + (e & 1);
                            if (col >= lane_hi[r][e >> 1]) s_acc[r][n][e] = MMA_NEG_INF;
                        }
                    }
                }
            }
            // Left side (sliding window): some row of this lane starts after the sub-tile's first
            // key, i.e. lo_gap < 16·(RB - 1) + 8 for the lane's last row. Per lane (no warp
            // operation inside), never taken without a left bound (lo_gap is then about 2^30).
            if (lo_gap < 16 * (RB - 1) + 8) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
#pragma unroll
                    for (int n = 0; n < S_N_TILES; ++n) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            if (lo_gap + 8 * n + (e & 1) < 16 * r + 8 * (e >> 1)) s_acc[r][n][e] = MMA_NEG_INF;
                        }
                    }
                }
            }

            // ---- online softmax ------------------------------------------------------------------
            float max_used[RB][2];
            float rescale[RB][2];
            bool max_moved = false;
#pragma unroll
            for (int r = 0; r < RB; ++r) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float tile_max = MMA_NEG_INF;
#pragma unroll
                    for (int n = 0; n < S_N_TILES; ++n)
                        tile_max = fmaxf(tile_max, fmaxf(s_acc[r][n][2 * h], s_acc[r][n][2 * h + 1]));
                    // A row's BLOCK_N scores are spread over the 4 lanes of its quad.
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
                    // The running max lives in the scale·log2e domain (scale > 0 keeps the order).
                    const float m = fmaxf(row_max[r][h], tile_max * scale_log2);
                    // A row that has seen no key yet keeps max -inf; subtracting 0 instead keeps
                    // exp2(-inf - (-inf)) = NaN out (its p and the rescale factor are then both 0).
                    max_used[r][h] = m == MMA_NEG_INF ? 0.f : m;
                    rescale[r][h] = rescale_factor(row_max[r][h], max_used[r][h]);
                    max_moved |= rescale[r][h] != 1.f;
                    row_max[r][h] = m;
                    row_sum[r][h] *= rescale[r][h];
                }
            }
            // Rescaling O costs WARP_M·HEAD_DIM/32 multiplies per lane; once the running maxima
            // settle (most tiles of a long row) every factor is exactly 1 and the warp skips them.
            if (__any_sync(0xffffffffu, max_moved)) {
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int n = 0; n < O_N_TILES; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) o_acc[r][n][e] *= rescale[r][e >> 1];
            }

            // ---- P = exp2(S - m), re-packed in registers as A fragments, and O += P·V --------------
            // P k-step kk covers keys 16kk..16kk+15 = S n-tiles 2kk (cols 2t..2t+1 of the step) and
            // 2kk+1 (cols 2t+8..2t+9): a0 = S[2kk].c0c1 (row g), a1 = S[2kk].c2c3 (row g+8),
            // a2 = S[2kk+1].c0c1, a3 = S[2kk+1].c2c3 — the C layout of m16n8 matches A's halves.
#pragma unroll
            for (int kk = 0; kk < PV_K_STEPS; ++kk) {
                u32 p_frag[RB][4];
#pragma unroll
                for (int r = 0; r < RB; ++r) {
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
                }
#pragma unroll
                for (int p = 0; p < O_N_TILES / 2; ++p) {
                    u32 b[4];
                    ldmatrix_x4_trans(b, addr.a(v_tile, 16 * kk, p));
#pragma unroll
                    for (int r = 0; r < RB; ++r) {
                        mma_16816(o_acc[r][2 * p], p_frag[r], b[0], b[1]);
                        mma_16816(o_acc[r][2 * p + 1], p_frag[r], b[2], b[3]);
                    }
                }
            }
        }
#if STAGES == 1
        __syncthreads();  // the single slot is refilled at the top of the next iteration
#endif
    }

#if KV_SPLIT > 1
    // ---- merge the row group's KV_SPLIT partial states into its first warp ------------------------
    // Every warp but a row group's first parks its (m, l, O) in the K/V space, each lane its own
    // registers as consecutive float4s (lane-indexed: conflict free); the first warp merges them.
    {
        constexpr int PARKED_WARPS = NUM_WARPS / KV_SPLIT * (KV_SPLIT - 1);
        float4* parked_o = reinterpret_cast<float4*>(smem + Q_TILE_BYTES);
        float4* parked_ml = parked_o + PARKED_WARPS * RB * O_N_TILES * 32;
        const int group = warp / KV_SPLIT;
        cp_async_wait<0>();  // no copy may still land in the K/V space (only empty groups remain)
        __syncthreads();     // every warp is done reading K/V tiles
        if (split != 0) {
            const int parked = group * (KV_SPLIT - 1) + split - 1;
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
        if (split != 0) return;  // no block barrier follows
#pragma unroll
        for (int other = 0; other < KV_SPLIT - 1; ++other) {
            const int parked = group * (KV_SPLIT - 1) + other;
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float4 ml = parked_ml[(parked * RB + r) * 32 + lane];
                const float other_max[2] = {ml.x, ml.y};
                const float other_sum[2] = {ml.z, ml.w};
                float mine_f[2], other_f[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float m = fmaxf(row_max[r][h], other_max[h]);
                    const float m_used = m == MMA_NEG_INF ? 0.f : m;
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

    // ---- epilogue: full row sums, guarded 1/l, coalesced store --------------------------------------
    float inv_l[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[r][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            inv_l[r][h] = l > 0.f ? 1.f / l : 0.f;  // a row that saw no key writes zeros
        }
    }
    store_output(smem, o_acc, inv_l, o_head, m0, warp_row0, seq_q, q_stride, lane);
}

}  // namespace mma_attn

#if MIN_BLOCKS > 1
#define MMA_LAUNCH_BOUNDS __launch_bounds__(NUM_WARPS * 32, MIN_BLOCKS)
#else
#define MMA_LAUNCH_BOUNDS __launch_bounds__(NUM_WARPS * 32)
#endif

extern "C" __global__ void MMA_LAUNCH_BOUNDS attn_fwd(const elem_t* __restrict__ q,
                                                      const elem_t* __restrict__ k,
                                                      const elem_t* __restrict__ v,
                                                      elem_t* __restrict__ o, int batch, int heads,
                                                      int seq_q, int seq_kv, float scale, int causal,
                                                      int kv_heads, int window_left, int window_right,
                                                      const int* __restrict__ cu_seqlens_q,
                                                      const int* __restrict__ cu_seqlens_kv) {
    using namespace mma_attn;
    (void)batch;  // the batch (sequence) index comes from blockIdx.z
    const int m0 = blockIdx.x * BLOCK_M;
    // This (sequence, head)'s rows; seq_q and seq_kv below are this sequence's lengths.
    const attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q, seq_kv,
                                                cu_seqlens_q, cu_seqlens_kv);
    // Varlen: the grid is sized by the longest sequence; a block past its own sequence's end leaves
    // here, every thread of it, before any barrier.
    if (m0 >= view.seq_q) return;
    // K/V rows D elements apart (dense, or varlen with one K/V head) get the copy whose per-pass
    // offsets are immediates, as before the variants; other strides (varlen with H_kv > 1) read it
    // from a register. Uniform over the block: each block runs one of the two.
    if (view.kv_stride == D)
        attn_block<D>(q + view.q, k + view.kv, v + view.kv, o + view.q, view.q_stride, D, view.seq_q,
                      view.seq_kv, m0, scale, causal, window_left, window_right);
    else
        attn_block<0>(q + view.q, k + view.kv, v + view.kv, o + view.q, view.q_stride, view.kv_stride,
                      view.seq_q, view.seq_kv, m0, scale, causal, window_left, window_right);
}
