// starter: a small, correct attention kernel to copy and make your own (the ABI: ../README.md).
//
// With no GPU, check that it compiles and what it uses (registers, shared memory, spills):
//     cargo xtask kernels --ptxas --src kernels/examples/starter.cu
// On a GPU, prove it (every edge shape against the reference, then timed against PyTorch SDPA):
//     cargo xtask gate --src kernels/examples/starter.cu
//
// The design is tiled.cu's scalar FlashAttention, stripped to its core. A block owns BLOCK_M query
// rows of one (batch, head); each of its NUM_WARPS warps owns BLOCK_M / NUM_WARPS of those rows.
// Keys and values stream through shared memory in tiles of 32, one key per lane. For each row and
// tile, lane j scores key j, the warp combines the tile's max and sum with shuffles to update the
// row's online softmax (running max m, running sum l), and each lane accumulates its HEAD_DIM / 32
// output columns over the tile's keys. At the end a row's output is acc / l.
//
// What you change, and how:
// - The inner loops are yours: tensor cores (mma.cu), cp.async double buffering (tiled.cu), ...
//   The result must stay O = softmax(scale · Q·Kᵀ + mask) · V, every row of O written.
// - BLOCK_M and NUM_WARPS are read by the host too: it launches grid (ceil(S_q / BLOCK_M), H, B)
//   and NUM_WARPS · 32 threads per block. Change them on the command line
//   (`--define BLOCK_M=32 --define NUM_WARPS=2`), never only here: the defaults below must stay the
//   host's (64 and 4).
// - Shared memory here is static (`__shared__` arrays, at most 48 KB per block). A kernel that
//   needs more declares `extern __shared__` and asks for it with `--define SHARED_BYTES=N`.
// - Variants: this kernel declares the ten dense parameters only, so the host gives it dense
//   multi-head problems and refuses GQA/MQA, sliding windows and varlen batches with one line. To
//   take them, declare the five variant parameters after `causal` (../README.md, "Variants"), find
//   a head's rows with attn::head_view and a row's keys with attn::row_kv_lo / attn::row_kv_hi
//   (attn_common.cuh; tiled.cu uses all three), and say so with `--define VARIANTS=1`.
#include "attn_common.cuh"

// The host's defaults for a --src kernel's geometry: keep them in step.
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif

#define TILE_KEYS 32                     // keys per K/V tile: one per lane
#define ROWS_PER_WARP (BLOCK_M / NUM_WARPS)
#define COLS_PER_LANE (HEAD_DIM / 32)    // lane owns output columns lane, lane + 32, ...
// K and V rows in shared memory are padded by one 4-byte word: the 32 lanes then read one column
// of 32 different key rows from 32 different banks (unpadded, every row starts in the same bank).
#define KV_STRIDE (HEAD_DIM + 2)
#define FULL_MASK 0xffffffffu

static_assert(BLOCK_M % NUM_WARPS == 0, "BLOCK_M must be a multiple of NUM_WARPS");
static_assert(HEAD_DIM % 32 == 0, "HEAD_DIM must be a multiple of 32");
// Q and one K/V tile are static shared memory, 48 KB at most (BLOCK_M 128 at HEAD_DIM 128 is over).
static_assert(sizeof(elem_t) * (BLOCK_M * HEAD_DIM + 2 * TILE_KEYS * KV_STRIDE) <= 48 * 1024,
              "Q and a K/V tile exceed 48 KB of static shared memory: lower BLOCK_M");

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32)
attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal) {
    __shared__ __align__(16) elem_t q_s[BLOCK_M][HEAD_DIM];
    __shared__ __align__(16) elem_t k_s[TILE_KEYS][KV_STRIDE];
    __shared__ __align__(16) elem_t v_s[TILE_KEYS][KV_STRIDE];

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int m0 = blockIdx.x * BLOCK_M;  // this block's first query row
    (void)batch;                          // blockIdx.z is the batch index

    // This (batch, head)'s rows: Q and O are [B, H, S_q, D], K and V [B, H, S_kv, D], contiguous.
    const size_t head = (size_t)blockIdx.z * heads + blockIdx.y;
    const elem_t* q_head = q + head * seq_q * HEAD_DIM;
    const elem_t* k_head = k + head * seq_kv * HEAD_DIM;
    const elem_t* v_head = v + head * seq_kv * HEAD_DIM;
    elem_t* o_head = o + head * seq_q * HEAD_DIM;
    // exp(x) = exp2(x · log2 e): fold log2 e into the scale once.
    const float scale_log2 = scale * ATTN_LOG2E;

    // Stage the block's Q rows (rows past S_q as zeros: they are skipped below, never stored).
    for (int i = threadIdx.x; i < BLOCK_M * HEAD_DIM; i += NUM_WARPS * 32) {
        const int r = i / HEAD_DIM, c = i % HEAD_DIM;
        q_s[r][c] = m0 + r < seq_q ? q_head[(size_t)(m0 + r) * HEAD_DIM + c] : from_float(0.0f);
    }

    // The keys this block needs: all of them, or under the causal mask (aligned bottom-right:
    // row i sees keys j <= i + S_kv - S_q) those its last row sees.
    const int last_row = min(m0 + BLOCK_M, seq_q) - 1;
    const int block_keys = attn::row_kv_limit(last_row, seq_q, seq_kv, causal);
    const int num_tiles = block_keys > 0 ? (block_keys + TILE_KEYS - 1) / TILE_KEYS : 0;

    // Each warp's rows: running max (log2 domain), running sum, and the lane's output columns.
    float m_run[ROWS_PER_WARP], l_run[ROWS_PER_WARP], acc[ROWS_PER_WARP][COLS_PER_LANE];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < COLS_PER_LANE; ++i) acc[r][i] = 0.0f;
    }

    for (int t = 0; t < num_tiles; ++t) {
        const int key0 = t * TILE_KEYS;
        // Every warp is done with the previous tile (and, the first time, Q is staged).
        __syncthreads();
        // Load the tile; keys past S_kv as zeros (they are masked below).
        for (int i = threadIdx.x; i < TILE_KEYS * HEAD_DIM; i += NUM_WARPS * 32) {
            const int j = i / HEAD_DIM, c = i % HEAD_DIM;
            const bool valid = key0 + j < seq_kv;
            const size_t at = (size_t)(key0 + j) * HEAD_DIM + c;
            k_s[j][c] = valid ? k_head[at] : from_float(0.0f);
            v_s[j][c] = valid ? v_head[at] : from_float(0.0f);
        }
        // The tile has landed for every warp.
        __syncthreads();

#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            const int row_local = warp * ROWS_PER_WARP + r;
            const int row = m0 + row_local;
            if (row >= seq_q) continue;  // warp-uniform: the whole warp skips the row

            // Lane j scores key key0 + j: q · k, two elements at a time, in f32.
            const int key = key0 + lane;
            float dot = 0.0f;
#pragma unroll 8
            for (int c = 0; c < HEAD_DIM; c += 2) {
                const elem2_t qp = *reinterpret_cast<const elem2_t*>(&q_s[row_local][c]);
                const elem2_t kp = *reinterpret_cast<const elem2_t*>(&k_s[lane][c]);
                dot += to_float(qp.x) * to_float(kp.x) + to_float(qp.y) * to_float(kp.y);
            }
            // Keys the row may not see (past S_kv, or past the causal bound) score -inf.
            const bool visible = key < attn::row_kv_limit(row, seq_q, seq_kv, causal);
            const float s = visible ? dot * scale_log2 : -INFINITY;

            // Online softmax: a new max rescales what the row has accumulated so far.
            const float m_new = fmaxf(m_run[r], warp_max(s));
            if (m_new == -INFINITY) continue;  // warp-uniform: the row sees no key yet
            const float correction = exp2f(m_run[r] - m_new);  // 0 for the row's first keys
            const float p = exp2f(s - m_new);                   // 0 for a masked key
            l_run[r] = l_run[r] * correction + warp_sum(p);
            m_run[r] = m_new;

            // acc = acc · correction + Σ_j p_j · V[j]: lane j's p broadcast to the warp in turn.
#pragma unroll
            for (int i = 0; i < COLS_PER_LANE; ++i) acc[r][i] *= correction;
#pragma unroll 8
            for (int j = 0; j < TILE_KEYS; ++j) {
                const float pj = __shfl_sync(FULL_MASK, p, j);
#pragma unroll
                for (int i = 0; i < COLS_PER_LANE; ++i) acc[r][i] += pj * to_float(v_s[j][lane + 32 * i]);
            }
        }
    }

    // O = acc / l; a row that saw no key (l = 0) writes zeros.
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const int row = m0 + warp * ROWS_PER_WARP + r;
        if (row >= seq_q) continue;
        const float inv_l = l_run[r] > 0.0f ? 1.0f / l_run[r] : 0.0f;
        elem_t* o_row = o_head + (size_t)row * HEAD_DIM;
#pragma unroll
        for (int i = 0; i < COLS_PER_LANE; ++i) o_row[lane + 32 * i] = from_float(acc[r][i] * inv_l);
    }
}
