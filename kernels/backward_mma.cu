// backward_mma.cu — FlashAttention-2-style backward on the tensor cores (mma.sync m16n8k16, ldmatrix,
// cp.async), dQ through f32 atomics: not deterministic, unless DETERMINISTIC=1 orders the adds.
//
// README.md's "Backward entry point", in three stages (workspace: backward_common.cuh's layout):
//   attn_bwd_pre   D_i = Σ dO∘O of every query row, and the f32 dQ accumulator zeroed.
//   attn_bwd       one block per (key tile of BLOCK_N keys, K/V head, sequence): dK and dV of its keys.
//   attn_bwd_post  dQ = scale · the accumulator, converted to elem_t.
//
// Bird's-eye view of attn_bwd
//   The block's K and V tiles are loaded once. Its NUM_WARPS warps each own WARP_KEYS = BLOCK_N /
//   NUM_WARPS keys (KB = WARP_KEYS / 16 mma row blocks) and keep their dK and dV in registers. The
//   block visits, for each query head of the K/V head's group in head order, the query tiles of
//   BLOCK_M rows that see some key of the tile (key_q_lo of its first key .. key_q_hi of its last;
//   the tiles wholly masked by causal or a window are skipped). Each tile's Q and dO rows (and its
//   rows' LSE and D_i) stream through a STAGES-deep cp.async ring. Per tile and warp, 16 query rows at
//   a time (a chunk's scores and dP are all that live beside dK and dV), with the keys as the mma rows:
//     Sᵀ  = K_w·Qᵀ              K_w via ldmatrix (A), Q via ldmatrix (B, "col")
//     Pᵀ  = exp2(Sᵀ·scale·log2e − LSE·log2e), element-masked only where the tile is not wholly
//           visible to the warp's keys; rows whose LSE is −∞ see no key and are masked, their LSE
//           never used
//     dV += Pᵀ·dO               Pᵀ re-packed in registers as A fragments, dO via ldmatrix.trans
//     dPᵀ = V_w·dOᵀ             V_w via ldmatrix (A), dO via ldmatrix (B)
//     dSᵀ = Pᵀ∘(dPᵀ − D_i)      in f32, then rounded to elem_t
//     dK += dSᵀ·Q               dSᵀ re-packed as A fragments, Q via ldmatrix.trans
//   and dSᵀ goes to shared memory, from which, after a block barrier, the warps compute the tile's
//   dQ = dS·K (dS via ldmatrix.trans of the stored dSᵀ, K via ldmatrix.trans) and add it to the f32
//   accumulator with atomicAdd (the adds of different key tiles land in any order: the result may
//   differ in its last bits from launch to launch; with DETERMINISTIC=1 the key tiles that visit a
//   query tile add in key order, below). A warp none of whose keys the tile's rows see
//   writes zeros for its dSᵀ and computes nothing else. At the end the warps stage dK·scale and dV
//   in the K and V tiles and write their valid rows with 16-byte stores.
//
// Variants (README.md, "Variants"): all of them. attn::head_view gives each (sequence, head)'s
//   offsets, strides and lengths. Keys past the sequence's S_kv and query rows past its S_q are
//   zero-filled in shared memory (never read: in varlen they are the next sequence's), masked, and
//   never written; a block whose first key is past S_kv returns before any barrier; a key no row
//   sees gets dK = dV = 0.
//
// Knobs (compile-time defines, defaults below)
//   HEAD_DIM  ∈ {64, 128}          (required)
//   NUM_WARPS ∈ {2, 4, 8}          default 4
//   BLOCK_N   = 16·NUM_WARPS or 32·NUM_WARPS: keys per block (WARP_KEYS 16 or 32); default 16·NUM_WARPS
//   BLOCK_M   ∈ {16, 32, 64}       query rows per tile; default 64
//   STAGES    ∈ {1, 2}             Q/dO ring depth; default 2
//   DETERMINISTIC ∈ {0, 1}         1: ordered dQ adds; default 0
//   (the host's registry refuses 32 keys per warp at D=128, whose dK and dV alone fill the registers,
//   and a dQ split of fewer than 16 columns per warp: see its rules.)
//
// Launch geometry
//   attn_bwd_pre, attn_bwd_post: grid = (ceil(S_q / BLOCK_M), H, B), block NUM_WARPS · 32, no shared memory.
//   attn_bwd: grid = (ceil(S_kv / BLOCK_N), H_kv, B), block NUM_WARPS · 32,
//     dynamic shared memory = 2 · BLOCK_N · D · 2                (K and V tiles)
//                           + 2 · STAGES · BLOCK_M · D · 2       (the Q and dO rings)
//                           + BLOCK_N · (BLOCK_M + 8) · 2        (dSᵀ, rows padded by 8 elements)
//                           + 2 · STAGES · BLOCK_M · 4  bytes    (the rows' LSE·log2e and D_i)
//
// Deterministic dQ (DETERMINISTIC=1). The workspace holds one i32 ticket per query row after the
//   D_i (the host sizes it so), zeroed by attn_bwd_pre; a query tile's is its first row's. The key
//   tiles that visit a query tile qt are contiguous, [a, b] (both ends of a key tile's query rows,
//   key_q_lo and key_q_hi, grow with the key): a key tile kt adds its dQ of qt once the ticket reads
//   kt - a (a by binary search over the tiles before kt), then moves it on. Blocks of one (K/V head,
//   sequence) are dispatched in key-tile order, so the tile waited for is running or done.
//
// Shared-memory layout. The K, V, Q and dO tiles have rows of HEAD_DIM elements, swizzled as mma.cu's
// (chunk c of row r at chunk c ^ (r & 7)), and are read with mma_ptx.cuh's lane addressing: as mma.cu
// reads Q (A-style) and K (B-style) for the A operands K_w, V_w and the B operands Qᵀ, dOᵀ, and as it
// reads V (A-style, .trans) for the B operands dO, Q and K of dV, dK and dQ. dSᵀ is [BLOCK_N keys]
// [BLOCK_M + 8 queries]: a row stride of 4 words mod 32 over 8 rows (or 20, 12 for BLOCK_M 32, 16)
// keeps both its 4-byte fragment stores and its ldmatrix reads conflict free. Fragment layouts: mma.cu's
// header.

#include "attn_common.cuh"
// The PTX wrappers, the swizzle and the ldmatrix lane addressing that mma.cu and decode.cu use.
#include "mma_ptx.cuh"
#include "backward_common.cuh"

#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N (16 * NUM_WARPS)
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef DETERMINISTIC
#define DETERMINISTIC 0
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "backward_mma.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 2 || NUM_WARPS == 4 || NUM_WARPS == 8, "backward_mma.cu: NUM_WARPS must be 2, 4 or 8");
static_assert(BLOCK_N == 16 * NUM_WARPS || BLOCK_N == 32 * NUM_WARPS,
              "backward_mma.cu: BLOCK_N must be 16 or 32 keys per warp");
static_assert(BLOCK_M == 16 || BLOCK_M == 32 || BLOCK_M == 64, "backward_mma.cu: BLOCK_M must be 16, 32 or 64");
static_assert(STAGES == 1 || STAGES == 2, "backward_mma.cu: STAGES must be 1 or 2");
static_assert(DETERMINISTIC == 0 || DETERMINISTIC == 1, "backward_mma.cu: DETERMINISTIC must be 0 or 1");
static_assert(sizeof(elem_t) == 2, "backward_mma.cu: 16-bit elements expected");

namespace backward_mma {
using attn::exp2_ftz;
using attn::pack_elem2;
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
constexpr int WARP_KEYS = BLOCK_N / NUM_WARPS;
constexpr int KB = WARP_KEYS / 16;          // 16-key mma row blocks per warp
constexpr int CHUNKS = D / 8;               // 16-byte chunks per row
constexpr int ROW_BYTES = D * 2;
constexpr int KV_TILE_BYTES = BLOCK_N * ROW_BYTES;
constexpr int Q_TILE_BYTES = BLOCK_M * ROW_BYTES;
constexpr int DS_STRIDE = BLOCK_M + 8;      // elements per dSᵀ row (one key)
constexpr int DS_BYTES = BLOCK_N * DS_STRIDE * 2;
constexpr int D_STEPS = D / 16;             // k-steps over the head dim
constexpr int D_TILES = D / 8;              // n-tiles over the head dim
constexpr int M_STEPS = BLOCK_M / 16;       // k-steps (or row blocks) over a tile's query rows
constexpr int M_TILES = BLOCK_M / 8;        // n-tiles over them
constexpr int N_STEPS = BLOCK_N / 16;       // k-steps over the block's keys
// dQ = dS·K of a tile: its BLOCK_M / 16 row blocks × D columns split over the warps, then each
// warp's share computed in passes of at most 64 columns (its accumulators live only for a pass).
constexpr int DQ_ROW_BLOCKS = M_STEPS >= NUM_WARPS ? M_STEPS / NUM_WARPS : 1;
constexpr int DQ_WARPS_PER_ROW_BLOCK = M_STEPS >= NUM_WARPS ? 1 : NUM_WARPS / M_STEPS;
constexpr int DQ_COLS = D / DQ_WARPS_PER_ROW_BLOCK;
constexpr int DQ_PASS_COLS = DQ_COLS < 64 ? DQ_COLS : 64;
constexpr int OFFSET_V = KV_TILE_BYTES;
constexpr int OFFSET_Q = 2 * KV_TILE_BYTES;
constexpr int OFFSET_DO = OFFSET_Q + STAGES * Q_TILE_BYTES;
constexpr int OFFSET_DS = OFFSET_DO + STAGES * Q_TILE_BYTES;
constexpr int OFFSET_ROWS = OFFSET_DS + DS_BYTES;  // LSE·log2e [STAGES][BLOCK_M], then D_i likewise

static_assert(DQ_COLS % 16 == 0 && DQ_COLS % DQ_PASS_COLS == 0, "backward_mma.cu: dQ columns per warp must be a multiple of 16");
static_assert(DS_BYTES % 16 == 0, "backward_mma.cu: the dSᵀ tile must keep the row arrays aligned");

// `rows` rows of a head (rows row0.. of `head`, `stride` elements apart) into the swizzled tile
// `dst`, cooperatively by the block. Rows >= limit (the sequence's length) are zero-filled without
// a global read: their source is the valid head base with src-size 0.
template <int Rows>
__device__ __forceinline__ void load_tile(u32 dst, const elem_t* __restrict__ head, int row0, int limit, int stride,
                                          int tid) {
    constexpr int TOTAL = Rows * CHUNKS;
    constexpr int PER_THREAD = (TOTAL + THREADS - 1) / THREADS;
#pragma unroll
    for (int p = 0; p < PER_THREAD; ++p) {
        const int idx = tid + p * THREADS;
        if (TOTAL % THREADS == 0 || idx < TOTAL) {
            const int row = idx / CHUNKS;
            const int chunk = idx % CHUNKS;
            const bool in_range = row0 + row < limit;
            const elem_t* src = in_range ? head + static_cast<long long>(row0 + row) * stride + chunk * 8 : head;
            cp_async_16(dst + swizzled(row, chunk), src, in_range);
        }
    }
}

// What a block needs of the problem, fixed for its whole loop.
struct Block {
    attn::HeadView view;        // the group's first query head (its K/V head's offsets)
    long long q_head_step;      // elements between consecutive query heads' row 0 in Q, O and dO
    int n0;                     // the block's first key
    int tile_first;             // its first query tile
    int tiles;                  // query tiles per head
};

// One query tile (head `hh` of the group, rows m0..) into ring slot `stage`: Q and dO by cp.async,
// the rows' LSE·log2e and D_i by plain stores (0 for rows past S_q or whose LSE is −∞: every
// element of such a row is masked).
__device__ __forceinline__ void load_query_tile(unsigned char* smem, int stage, const Block& blk, int hh, int m0,
                                                const elem_t* __restrict__ q, const elem_t* __restrict__ d_o,
                                                const float* __restrict__ lse, const float* __restrict__ delta,
                                                int tid) {
    const attn::HeadView& view = blk.view;
    const long long head = view.q + hh * blk.q_head_step;
    const u32 base = smem_addr(smem);
    load_tile<BLOCK_M>(base + OFFSET_Q + stage * Q_TILE_BYTES, q + head, m0, view.seq_q, view.q_stride, tid);
    load_tile<BLOCK_M>(base + OFFSET_DO + stage * Q_TILE_BYTES, d_o + head, m0, view.seq_q, view.q_stride, tid);
    float* lse_s = reinterpret_cast<float*>(smem + OFFSET_ROWS) + stage * BLOCK_M;
    float* delta_s = lse_s + STAGES * BLOCK_M;
    for (int r = tid; r < BLOCK_M; r += THREADS) {
        const int i = m0 + r;
        float l2 = 0.f, di = 0.f;
        if (i < view.seq_q) {
            const long long at = (head + static_cast<long long>(i) * view.q_stride) / D;
            const float l = lse[at];
            l2 = l > -INFINITY ? l * ATTN_LOG2E : 0.f;
            di = delta[at];
        }
        lse_s[r] = l2;
        delta_s[r] = di;
    }
}

// The dSᵀ fragment `frag` of key block kb (rows g and g + 8) and query k-step kk into the dSᵀ tile.
__device__ __forceinline__ void store_ds(unsigned char* ds_lane, int kb, int kk, const u32 (&frag)[4]) {
    // frag: a0 = rows g / cols 2t.., a1 = rows g + 8, a2 = cols 2t + 8.., a3 = both.
#pragma unroll
    for (int f = 0; f < 4; ++f) {
        const int row = 16 * kb + 8 * (f & 1);
        const int col = 16 * kk + 8 * (f >> 1);
        *reinterpret_cast<u32*>(ds_lane + (row * DS_STRIDE + col) * 2) = frag[f];
    }
}

// dK·scale or dV of this warp's keys: staged in `tile` (its own rows of the K or V tile, swizzled)
// and written with 16-byte stores, rows past S_kv skipped.
__device__ __forceinline__ void store_keys(unsigned char* tile, const float (&acc)[KB][D_TILES][4], float factor,
                                           elem_t* __restrict__ out, const attn::HeadView& view, int n0, int warp,
                                           int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int n = 0; n < D_TILES; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = warp * WARP_KEYS + 16 * kb + g + 8 * h;
                *reinterpret_cast<elem2_t*>(tile + swizzled(row, n) + 4 * t) =
                    from_float2(acc[kb][n][2 * h] * factor, acc[kb][n][2 * h + 1] * factor);
            }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < WARP_KEYS * CHUNKS / 32; ++i) {
        const int idx = lane + 32 * i;
        const int row = warp * WARP_KEYS + idx / CHUNKS;
        const int chunk = idx % CHUNKS;
        if (n0 + row < view.seq_kv)
            *reinterpret_cast<uint4*>(out + view.kv + static_cast<long long>(n0 + row) * view.kv_stride + chunk * 8) =
                *reinterpret_cast<const uint4*>(tile + swizzled(row, chunk));
    }
}

// The tickets of the deterministic dQ (one per query row, after the D_i), or null without them;
// traps on a workspace too small for them.
__device__ __forceinline__ int* tickets(float* workspace, long long workspace_bytes, long long q_rows) {
#if DETERMINISTIC
    if (workspace_bytes < q_rows * (D + 2) * 4) __trap();
    return reinterpret_cast<int*>(workspace + q_rows * (D + 1));
#else
    (void)workspace;
    (void)workspace_bytes;
    (void)q_rows;
    return nullptr;
#endif
}

// The first key tile (of BLOCK_N keys) that visits query tile qt (of BLOCK_M rows): the least tile
// whose last key some row of qt or later sees. Key tile kt visits qt, so the answer is at most kt.
__device__ __forceinline__ int first_visitor(int qt, int kt, int sq, int skv, int window_left) {
    int lo = 0, hi = kt;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        const int last = min(mid * BLOCK_N + BLOCK_N, skv) - 1;
        const int end = (bwd_common::key_q_hi(last, sq, skv, window_left) + BLOCK_M - 1) / BLOCK_M;
        if (end > qt) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

// Thread 0 waits until `ticket` reads `turn` (acquire), then the block goes on; a wait of seconds
// is a fault, not a hang.
__device__ __forceinline__ void wait_turn(const int* ticket, int turn, int tid) {
    if (tid == 0) {
        long long spins = 0;
        int seen;
        do {
            asm volatile("ld.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(ticket) : "memory");
            if (seen == turn) break;
            __nanosleep(64);
        } while (++spins < (1ll << 26));
        if (seen != turn) __trap();
    }
    __syncthreads();
}

// Every thread's dQ adds are visible before thread 0 moves `ticket` on (release).
__device__ __forceinline__ void pass_turn(int* ticket, int tid) {
    __threadfence();
    __syncthreads();
    if (tid == 0) atomicAdd(ticket, 1);
}

}  // namespace backward_mma

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32) attn_bwd_pre(BWD_PARAMS) {
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    float* delta = workspace + q_rows * HEAD_DIM;
    int* ticket = backward_mma::tickets(workspace, workspace_bytes, q_rows);
    bwd_common::for_block_rows(BLOCK_M, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv,
                               [&](const attn::HeadView& view, int i, int lane) {
                                   const long long at = view.q + (long long)i * view.q_stride;
                                   const float d = bwd_common::row_delta(o + at, d_o + at, lane);
                                   for (int c = lane; c < HEAD_DIM; c += 32) workspace[at + c] = 0.f;
                                   if (lane == 0) {
                                       const long long row = bwd_common::row_index(view, i);
                                       delta[row] = d;
                                       if (ticket != nullptr) ticket[row] = 0;
                                   }
                               });
}

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32) attn_bwd_post(BWD_PARAMS) {
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    bwd_common::for_block_rows(BLOCK_M, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv,
                               [&](const attn::HeadView& view, int i, int lane) {
                                   const long long at = view.q + (long long)i * view.q_stride;
                                   for (int c = lane; c < HEAD_DIM; c += 32)
                                       dq[at + c] = from_float(workspace[at + c] * scale);
                               });
}

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32) attn_bwd(BWD_PARAMS) {
    using namespace backward_mma;
    (void)o;
    (void)dq;
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    float* __restrict__ dq_acc = workspace;
    const float* __restrict__ delta = workspace + q_rows * D;
    int* ticket = tickets(workspace, workspace_bytes, q_rows);
    const int group = heads / kv_heads;

    Block blk;
    blk.view = attn::head_view(blockIdx.z, blockIdx.y * group, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q,
                               cu_seqlens_kv);
    blk.n0 = blockIdx.x * BLOCK_N;
    // Varlen: the grid is sized by the longest sequence; a block past its own keys leaves here, every
    // thread of it, before any barrier.
    if (blk.n0 >= blk.view.seq_kv) return;
    const int sq = blk.view.seq_q, skv = blk.view.seq_kv;
    blk.q_head_step = cu_seqlens_q == nullptr ? static_cast<long long>(sq) * D : D;
    // The query rows that see some key of the tile: both bounds grow with the key.
    const int last_key = min(blk.n0 + BLOCK_N, skv) - 1;
    const int q_begin = bwd_common::key_q_lo(blk.n0, sq, skv, causal, window_right);
    const int q_end = bwd_common::key_q_hi(last_key, sq, skv, window_left);
    blk.tile_first = q_begin / BLOCK_M;
    blk.tiles = q_end > q_begin ? (q_end + BLOCK_M - 1) / BLOCK_M - blk.tile_first : 0;
    const int items = blk.tiles * group;

    extern __shared__ __align__(128) unsigned char smem[];
    const u32 k_tile = smem_addr(smem);
    const u32 v_tile = k_tile + OFFSET_V;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const float scale_log2 = scale * ATTN_LOG2E;
    const LaneAddressing addr(lane);

    // This lane's keys (g and g + 8 of each key block): the query rows that see each, empty past S_kv.
    const int warp_key0 = blk.n0 + warp * WARP_KEYS;
    int key_lo[KB][2], key_hi[KB][2];
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int j = warp_key0 + 16 * kb + g + 8 * h;
            key_lo[kb][h] = j < skv ? bwd_common::key_q_lo(j, sq, skv, causal, window_right) : 0;
            key_hi[kb][h] = j < skv ? bwd_common::key_q_hi(j, sq, skv, window_left) : 0;
        }
    // Warp-uniform: the rows some key of the warp's sees (any) and those all of them see (all).
    const bool warp_has_keys = warp_key0 < skv;
    const int warp_last = min(warp_key0 + WARP_KEYS, skv) - 1;
    const int any_lo = bwd_common::key_q_lo(warp_key0, sq, skv, causal, window_right);
    const int any_hi = warp_has_keys ? bwd_common::key_q_hi(warp_last, sq, skv, window_left) : 0;
    const bool all_keys = warp_key0 + WARP_KEYS <= skv;
    const int all_lo = bwd_common::key_q_lo(warp_last, sq, skv, causal, window_right);
    const int all_hi = all_keys ? bwd_common::key_q_hi(warp_key0, sq, skv, window_left) : 0;

    // dSᵀ addressing: this lane's fragment stores (rows g.., cols 2t..) and its ldmatrix.trans rows
    // (key (l & 7) + 8·(l >> 4), queries 8·((l >> 3) & 1): the four 8×8 matrices of an A fragment of dS).
    unsigned char* ds_store = smem + OFFSET_DS + ((warp * WARP_KEYS + g) * DS_STRIDE + 2 * t) * 2;
    const u32 ds_read = smem_addr(smem) + OFFSET_DS +
                        (((lane & 7) + 8 * (lane >> 4)) * DS_STRIDE + 8 * ((lane >> 3) & 1)) * 2;

    // ---- prologue: K and V (one commit group with the first query tile when double-buffered) ----------
    load_tile<BLOCK_N>(k_tile, k + blk.view.kv, blk.n0, skv, blk.view.kv_stride, tid);
    load_tile<BLOCK_N>(v_tile, v + blk.view.kv, blk.n0, skv, blk.view.kv_stride, tid);
#if STAGES == 2
    if (items > 0) load_query_tile(smem, 0, blk, 0, blk.tile_first * BLOCK_M, q, d_o, lse, delta, tid);
#endif
    cp_async_commit();

    float dk_acc[KB][D_TILES][4], dv_acc[KB][D_TILES][4];
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int n = 0; n < D_TILES; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk_acc[kb][n][e] = dv_acc[kb][n][e] = 0.f;

    for (int it = 0; it < items; ++it) {
        const int hh = it / blk.tiles;
        const int m0 = (blk.tile_first + it % blk.tiles) * BLOCK_M;
        // ---- pipeline: make tile `it` resident (and start the next one's copy) ------------------------
#if STAGES == 2
        const int stage = it & 1;
        if (it + 1 < items) {
            // Its slot held tile it - 1, which every warp finished before the last dQ barrier.
            const int next = it + 1;
            load_query_tile(smem, stage ^ 1, blk, next / blk.tiles, (blk.tile_first + next % blk.tiles) * BLOCK_M, q,
                            d_o, lse, delta, tid);
        }
        cp_async_commit();
        cp_async_wait<1>();
#else
        const int stage = 0;
        load_query_tile(smem, 0, blk, hh, m0, q, d_o, lse, delta, tid);
        cp_async_commit();
        cp_async_wait<0>();
#endif
        // Tile `it` (and its rows' LSE and D_i) is visible to every thread, and every warp has read
        // the last tile's dSᵀ before it is overwritten below.
        __syncthreads();
        const u32 q_tile = smem_addr(smem) + OFFSET_Q + stage * Q_TILE_BYTES;
        const u32 do_tile = smem_addr(smem) + OFFSET_DO + stage * Q_TILE_BYTES;
        const float* lse_s = reinterpret_cast<const float*>(smem + OFFSET_ROWS) + stage * BLOCK_M;
        const float* delta_s = lse_s + STAGES * BLOCK_M;

        if (!warp_has_keys || m0 >= any_hi || m0 + BLOCK_M <= any_lo) {
            // No row of the tile sees a key of this warp's: its dSᵀ rows are zero.
            const u32 zero[4] = {0u, 0u, 0u, 0u};
#pragma unroll
            for (int kb = 0; kb < KB; ++kb)
#pragma unroll
                for (int kk = 0; kk < M_STEPS; ++kk) store_ds(ds_store, kb, kk, zero);
        } else {
            // A chunk of 16 query rows at a time (k-step kk of the tile), so that only its scores and
            // dP live in registers beside dK and dV; not unrolled, since ptxas, given every chunk at
            // once, hoists their shared-memory loads and spills at D=128.
            const bool whole = all_keys && all_lo <= m0 && m0 + BLOCK_M <= all_hi;
#pragma unroll 1
            for (int kk = 0; kk < M_STEPS; ++kk) {
                // ---- Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ of the chunk's 16 rows (n-tiles 0, 1) ------------
                float p[KB][2][4], dp[KB][2][4];
#pragma unroll
                for (int kb = 0; kb < KB; ++kb)
#pragma unroll
                    for (int n = 0; n < 2; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) p[kb][n][e] = dp[kb][n][e] = 0.f;
#pragma unroll
                for (int d = 0; d < D_STEPS; ++d) {
                    u32 b[4];
                    ldmatrix_x4(b, addr.b(q_tile, 16 * kk, d));
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) {
                        u32 a[4];
                        ldmatrix_x4(a, addr.a(k_tile, warp * WARP_KEYS + 16 * kb, d));
                        mma_16816(p[kb][0], a, b[0], b[1]);
                        mma_16816(p[kb][1], a, b[2], b[3]);
                    }
                }
#pragma unroll
                for (int d = 0; d < D_STEPS; ++d) {
                    u32 b[4];
                    ldmatrix_x4(b, addr.b(do_tile, 16 * kk, d));
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) {
                        u32 a[4];
                        ldmatrix_x4(a, addr.a(v_tile, warp * WARP_KEYS + 16 * kb, d));
                        mma_16816(dp[kb][0], a, b[0], b[1]);
                        mma_16816(dp[kb][1], a, b[2], b[3]);
                    }
                }
                // ---- Pᵀ (masked only where some (key, row) pair of the warp's is invisible), then
                // dSᵀ = Pᵀ∘(dPᵀ − D_i); both re-packed as A fragments (rows = keys, k = the rows) -------
                u32 pa[KB][4], da[KB][4];
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const int col = 16 * kk + 8 * n + 2 * t;
                    const float2 l2 = *reinterpret_cast<const float2*>(lse_s + col);
                    const float2 di = *reinterpret_cast<const float2*>(delta_s + col);
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) {
                        float x[4], y[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int i = m0 + col + (e & 1);
                            const float e2 = exp2_ftz(fmaf(p[kb][n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
                            const bool seen = whole || (key_lo[kb][e >> 1] <= i && i < key_hi[kb][e >> 1]);
                            x[e] = seen ? e2 : 0.f;
                            y[e] = x[e] * (dp[kb][n][e] - ((e & 1) ? di.y : di.x));
                        }
                        // a0/a1: rows g/g + 8 of the chunk's first 8 columns (n-tile 0); a2/a3: n-tile 1.
                        pa[kb][2 * n] = pack_elem2(x[0], x[1]);
                        pa[kb][2 * n + 1] = pack_elem2(x[2], x[3]);
                        da[kb][2 * n] = pack_elem2(y[0], y[1]);
                        da[kb][2 * n + 1] = pack_elem2(y[2], y[3]);
                    }
                }
                // The A fragment's order is a0 = (g, n-tile 0), a1 = (g + 8, n-tile 0), a2 = (g, n-tile
                // 1), a3 = (g + 8, n-tile 1): the packing above wrote 0, 1 = n-tile 0 and 2, 3 = n-tile 1.
#pragma unroll
                for (int kb = 0; kb < KB; ++kb) store_ds(ds_store, kb, kk, da[kb]);
                // ---- dV += Pᵀ·dO and dK += dSᵀ·Q over the chunk's rows ----------------------------------
#pragma unroll
                for (int s = 0; s < D_STEPS; ++s) {
                    u32 b[4];
                    ldmatrix_x4_trans(b, addr.a(do_tile, 16 * kk, s));
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) {
                        mma_16816(dv_acc[kb][2 * s], pa[kb], b[0], b[1]);
                        mma_16816(dv_acc[kb][2 * s + 1], pa[kb], b[2], b[3]);
                    }
                }
#pragma unroll
                for (int s = 0; s < D_STEPS; ++s) {
                    u32 b[4];
                    ldmatrix_x4_trans(b, addr.a(q_tile, 16 * kk, s));
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) {
                        mma_16816(dk_acc[kb][2 * s], da[kb], b[0], b[1]);
                        mma_16816(dk_acc[kb][2 * s + 1], da[kb], b[2], b[3]);
                    }
                }
            }
        }
        // Every warp's dSᵀ rows are in shared memory.
        __syncthreads();

        // ---- dQ of the tile = dS·K, added to the f32 accumulator ------------------------------------------
        {
            const long long head = blk.view.q + hh * blk.q_head_step;
            // Deterministic: this key tile's turn among those that visit the query tile (the
            // ticket's address is recomputed after the adds: no register holds it across them).
            if (ticket != nullptr) {
                const int kt = blk.n0 / BLOCK_N;
                const int turn = kt - first_visitor(m0 / BLOCK_M, kt, sq, skv, window_left);
                wait_turn(ticket + (head + static_cast<long long>(m0) * blk.view.q_stride) / D, turn, tid);
            }
            const int rb0 = (warp / DQ_WARPS_PER_ROW_BLOCK) * DQ_ROW_BLOCKS;  // first row block of this warp
            const int c0 = (warp % DQ_WARPS_PER_ROW_BLOCK) * DQ_COLS;         // first column
#pragma unroll
            for (int pass = 0; pass < DQ_COLS / DQ_PASS_COLS; ++pass) {
                const int col0 = c0 + pass * DQ_PASS_COLS;
                float acc[DQ_ROW_BLOCKS][DQ_PASS_COLS / 8][4];
#pragma unroll
                for (int r = 0; r < DQ_ROW_BLOCKS; ++r)
#pragma unroll
                    for (int n = 0; n < DQ_PASS_COLS / 8; ++n) acc[r][n][0] = acc[r][n][1] = acc[r][n][2] = acc[r][n][3] = 0.f;
#pragma unroll
                for (int kk = 0; kk < N_STEPS; ++kk) {
                    u32 a[DQ_ROW_BLOCKS][4];
#pragma unroll
                    for (int r = 0; r < DQ_ROW_BLOCKS; ++r)
                        ldmatrix_x4_trans(a[r], ds_read + (16 * kk * DS_STRIDE + 16 * (rb0 + r)) * 2);
#pragma unroll
                    for (int s = 0; s < DQ_PASS_COLS / 16; ++s) {
                        u32 b[4];
                        ldmatrix_x4_trans(b, addr.a(k_tile, 16 * kk, col0 / 16 + s));
#pragma unroll
                        for (int r = 0; r < DQ_ROW_BLOCKS; ++r) {
                            mma_16816(acc[r][2 * s], a[r], b[0], b[1]);
                            mma_16816(acc[r][2 * s + 1], a[r], b[2], b[3]);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < DQ_ROW_BLOCKS; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int i = m0 + 16 * (rb0 + r) + g + 8 * h;
                        if (i < sq) {
                            float* row = dq_acc + head + static_cast<long long>(i) * blk.view.q_stride + col0 + 2 * t;
#pragma unroll
                            for (int n = 0; n < DQ_PASS_COLS / 8; ++n) {
                                atomicAdd(row + 8 * n, acc[r][n][2 * h]);
                                atomicAdd(row + 8 * n + 1, acc[r][n][2 * h + 1]);
                            }
                        }
                    }
            }
            if (ticket != nullptr)
                pass_turn(ticket + (head + static_cast<long long>(m0) * blk.view.q_stride) / D, tid);
        }
    }

    // ---- epilogue: dK·scale and dV through the K and V tiles, 16-byte stores --------------------------------
    cp_async_wait<0>();  // only empty groups may remain, but no copy may land in the tiles below
    __syncthreads();     // every warp is done reading K and V
    store_keys(smem, dk_acc, scale, dk, blk.view, blk.n0, warp, lane);
    store_keys(smem + OFFSET_V, dv_acc, 1.f, dv, blk.view, blk.n0, warp, lane);
}
