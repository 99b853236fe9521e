// tiled: the scalar FlashAttention design (no tensor cores), done right.
//
// A block owns BLOCK_M query rows; each of its NUM_WARPS warps owns BLOCK_M / NUM_WARPS of them. The
// Q tile sits in shared memory as f32 (read as broadcasts); K/V tiles of BLOCK_N keys stream through
// shared memory with cp.async (STAGES = 2: double-buffered, the next tile loads while this one is
// used). Per row and tile: lane j scores key j (and j + 32), a warp-shuffle max/sum updates the online
// softmax, then every lane accumulates its HEAD_DIM / 32 contiguous output dims over the tile's keys.
//
// Sync policy: with STAGES = 2, one barrier per tile (the "light" policy): after it, tile t has landed
// for every thread and every warp is done with tile t-1, so tile t+1 may overwrite t-1's buffer.
// With STAGES = 1, a second barrier guards the single buffer before the next load.
//
// Rows of K/V past S_kv are zero-filled by cp.async (src-size 0: nothing read from global memory)
// and masked to -inf; rows of Q past S_q are computed on zeros and never stored.
//
// Variants (README.md, "Variants"): all of them. GQA/MQA (kv_heads) and varlen (cu_seqlens_q/kv:
// packed rows H·D or H_kv·D apart, S_q/S_kv per sequence, blocks past their sequence's end return
// before any barrier) through attn::head_view; sliding windows (window_left, window_right; causal is
// window_right 0): a block visits only the key tiles between its first row's row_kv_lo and its
// last row's row_kv_hi, and masks each score outside its row's [row_kv_lo, row_kv_hi).
//
// Knobs: BLOCK_M ∈ {16,32,64,128}, BLOCK_N ∈ {32,64}, NUM_WARPS ∈ {2,4,8}, STAGES ∈ {1,2};
// BLOCK_M % NUM_WARPS == 0, BLOCK_M / NUM_WARPS ≤ 16. HEAD_DIM ∈ {64,128}.
// Dynamic shared memory: BLOCK_M·HEAD_DIM·4 + STAGES·2·BLOCK_N·(HEAD_DIM+8)·sizeof(elem_t) bytes.
// K/V rows are padded by 8 elements (16 bytes): a quarter-warp's 16-byte reads of 8 different rows
// then land in 8 different bank groups.
#include "attn_common.cuh"

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef STAGES
#define STAGES 2
#endif

#define ROWS_PER_WARP (BLOCK_M / NUM_WARPS)
#define KEYS_PER_LANE (BLOCK_N / 32)
#define DIMS_PER_LANE (HEAD_DIM / 32)
#define KV_STRIDE (HEAD_DIM + 8)
#define CHUNK 8  // elements per 16-byte chunk

static_assert(BLOCK_M % NUM_WARPS == 0, "BLOCK_M must be a multiple of NUM_WARPS");
static_assert(BLOCK_N % 32 == 0, "BLOCK_N must be a multiple of 32");
static_assert(HEAD_DIM % 32 == 0, "HEAD_DIM must be a multiple of 32");
static_assert(STAGES == 1 || STAGES == 2, "STAGES must be 1 or 2");

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Issues the cp.async copies of key/value tile `tile` into stage buffers `ks`, `vs`.
// Rows are `stride` elements apart in global memory; keys >= seq_kv are zero-filled, never read.
__device__ __forceinline__ void load_kv_tile(elem_t* ks, elem_t* vs, const elem_t* k_head, const elem_t* v_head,
                                             int tile, int seq_kv, int stride) {
    const int chunks_per_row = HEAD_DIM / CHUNK;
    for (int c = threadIdx.x; c < BLOCK_N * chunks_per_row; c += NUM_WARPS * 32) {
        const int r = c / chunks_per_row;
        const int col = (c % chunks_per_row) * CHUNK;
        const int key = tile * BLOCK_N + r;
        const bool valid = key < seq_kv;
        const size_t src = (size_t)(valid ? key : 0) * stride + col;
        cp_async_16(ks + r * KV_STRIDE + col, k_head + src, valid);
        cp_async_16(vs + r * KV_STRIDE + col, v_head + src, valid);
    }
}

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32)
attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
         int kv_heads, int window_left, int window_right, const int* __restrict__ cu_seqlens_q,
         const int* __restrict__ cu_seqlens_kv) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* q_s = reinterpret_cast<float*>(smem_raw);                                  // [BLOCK_M][HEAD_DIM]
    elem_t* kv_s = reinterpret_cast<elem_t*>(smem_raw + BLOCK_M * HEAD_DIM * sizeof(float));
    // Stage s: K at kv_s + (2s)·BLOCK_N·KV_STRIDE, V at kv_s + (2s+1)·BLOCK_N·KV_STRIDE.

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int m0 = blockIdx.x * BLOCK_M;
    (void)batch;  // the sequence index comes from blockIdx.z
    // This (sequence, head)'s rows; seq_q and seq_kv are this sequence's lengths from here on.
    const attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q, seq_kv,
                                                cu_seqlens_q, cu_seqlens_kv);
    seq_q = view.seq_q;
    seq_kv = view.seq_kv;
    // Varlen: the grid is sized by the longest sequence. Uniform over the block, before any barrier.
    if (m0 >= seq_q) return;
    const elem_t* q_head = q + view.q;
    const elem_t* k_head = k + view.kv;
    const elem_t* v_head = v + view.kv;
    elem_t* o_head = o + view.q;
    const int q_stride = view.q_stride;
    const int kv_stride = view.kv_stride;
    const float scale_log2 = scale * ATTN_LOG2E;
    // The element mask: query row i sees key j iff j < seq_kv and lo_rel <= j - i < hi_rel, the
    // window's bounds relative to the row (row_kv_lo/row_kv_hi without their clipping, which the
    // j < seq_kv test and 0 <= j make redundant; sentinels far from any j - i for an unbounded side).
    // Relative bounds are the same for every row: nothing per row stays live across the tile loop.
    const int right = causal ? 0 : window_right;
    const int lo_rel = window_left < 0 ? -(1 << 30) : seq_kv - seq_q - window_left;
    const int hi_rel = right < 0 ? (1 << 30) : seq_kv - seq_q + 1 + right;

    // Keys this block may need: from the first key its first row sees (sliding window) to the last
    // its last row sees (causal or window); row_kv_lo and row_kv_hi grow with the row.
    const int last_row = min(m0 + BLOCK_M, seq_q) - 1;
    const int block_kv_lo = attn::row_kv_lo(m0, seq_q, seq_kv, window_left);
    const int block_kv_hi = attn::row_kv_hi(last_row, seq_q, seq_kv, causal, window_right);
    const int first_tile = block_kv_lo / BLOCK_N;
    const int num_tiles = block_kv_hi > block_kv_lo ? (block_kv_hi + BLOCK_N - 1) / BLOCK_N - first_tile : 0;

    if (num_tiles > 0) {
        load_kv_tile(kv_s, kv_s + BLOCK_N * KV_STRIDE, k_head, v_head, first_tile, seq_kv, kv_stride);
        cp_async_commit();
    }
    for (int i = threadIdx.x; i < BLOCK_M * HEAD_DIM; i += NUM_WARPS * 32) {
        const int r = i / HEAD_DIM;
        q_s[i] = m0 + r < seq_q ? to_float(q_head[(size_t)(m0 + r) * q_stride + i % HEAD_DIM]) : 0.0f;
    }

    float m_run[ROWS_PER_WARP], l_run[ROWS_PER_WARP], acc[ROWS_PER_WARP][DIMS_PER_LANE];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) acc[r][i] = 0.0f;
    }

    // it: position in this block's tiles (picks the stage); t: the key tile itself.
    for (int it = 0; it < num_tiles; ++it) {
        const int t = first_tile + it;
        cp_async_wait_all();
        __syncthreads();
        const int stage = STAGES == 2 ? (it & 1) : 0;
        if (STAGES == 2 && it + 1 < num_tiles) {
            elem_t* next = kv_s + (size_t)((it + 1) & 1) * 2 * BLOCK_N * KV_STRIDE;
            load_kv_tile(next, next + BLOCK_N * KV_STRIDE, k_head, v_head, t + 1, seq_kv, kv_stride);
            cp_async_commit();
        }
        const elem_t* k_s = kv_s + (size_t)stage * 2 * BLOCK_N * KV_STRIDE;
        const elem_t* v_s = k_s + BLOCK_N * KV_STRIDE;
        const int key0 = t * BLOCK_N + lane;                     // this lane's first key of the tile
        const int rel0 = key0 - (m0 + warp * ROWS_PER_WARP);     // key0 - (the warp's first row)

#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            const int row_local = warp * ROWS_PER_WARP + r;
            const float* q_row = q_s + row_local * HEAD_DIM;

            float s[KEYS_PER_LANE];
            float tile_max = -INFINITY;
#pragma unroll
            for (int kk = 0; kk < KEYS_PER_LANE; ++kk) {
                const int j = lane + 32 * kk;
                const elem_t* k_row = k_s + j * KV_STRIDE;
                float dot = 0.0f;
#pragma unroll 4
                for (int c = 0; c < HEAD_DIM; c += CHUNK) {
                    const uint4 raw = *reinterpret_cast<const uint4*>(k_row + c);
                    const elem2_t* pairs = reinterpret_cast<const elem2_t*>(&raw);
                    const float4 qa = *reinterpret_cast<const float4*>(q_row + c);
                    const float4 qb = *reinterpret_cast<const float4*>(q_row + c + 4);
                    dot += qa.x * to_float(pairs[0].x) + qa.y * to_float(pairs[0].y);
                    dot += qa.z * to_float(pairs[1].x) + qa.w * to_float(pairs[1].y);
                    dot += qb.x * to_float(pairs[2].x) + qb.y * to_float(pairs[2].y);
                    dot += qb.z * to_float(pairs[3].x) + qb.w * to_float(pairs[3].y);
                }
                // Key j of the tile against row r: visible iff inside [row_kv_lo, row_kv_hi) of the
                // row (rows past seq_q are computed too, never stored); keys >= seq_kv (zero-filled) never.
                const int key = key0 + 32 * kk;
                const int rel = rel0 + 32 * kk - r;  // key - row
                s[kk] = (key < seq_kv && rel >= lo_rel && rel < hi_rel) ? dot * scale_log2 : -INFINITY;
                tile_max = fmaxf(tile_max, s[kk]);
            }
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
            const float m_new = fmaxf(m_run[r], tile_max);
            if (m_new == -INFINITY) continue;  // warp-uniform: nothing visible yet for this row

            const float correction = exp2f(m_run[r] - m_new);
            float p[KEYS_PER_LANE];
            float p_sum = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KEYS_PER_LANE; ++kk) {
                p[kk] = exp2f(s[kk] - m_new);
                p_sum += p[kk];
            }
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, offset);
            l_run[r] = l_run[r] * correction + p_sum;
            m_run[r] = m_new;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) acc[r][i] *= correction;
#pragma unroll
            for (int kk = 0; kk < KEYS_PER_LANE; ++kk) {
#pragma unroll 8
                for (int src = 0; src < 32; ++src) {
                    const float pj = __shfl_sync(0xffffffffu, p[kk], src);
                    const elem_t* v_row = v_s + (32 * kk + src) * KV_STRIDE + lane * DIMS_PER_LANE;
#pragma unroll
                    for (int i = 0; i < DIMS_PER_LANE; i += 2) {
                        const elem2_t pair = *reinterpret_cast<const elem2_t*>(v_row + i);
                        acc[r][i] += pj * to_float(pair.x);
                        acc[r][i + 1] += pj * to_float(pair.y);
                    }
                }
            }
        }
        if (STAGES == 1) {
            __syncthreads();  // every warp is done with the single buffer before the next load
            if (it + 1 < num_tiles) {
                load_kv_tile(kv_s, kv_s + BLOCK_N * KV_STRIDE, k_head, v_head, t + 1, seq_kv, kv_stride);
                cp_async_commit();
            }
        }
    }

#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const int row = m0 + warp * ROWS_PER_WARP + r;
        if (row >= seq_q) continue;
        const float inv_l = l_run[r] > 0.0f ? 1.0f / l_run[r] : 0.0f;  // a row that sees no key writes zeros
        elem_t* o_row = o_head + (size_t)row * q_stride + lane * DIMS_PER_LANE;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; i += 2)
            *reinterpret_cast<elem2_t*>(o_row + i) = from_float2(acc[r][i] * inv_l, acc[r][i + 1] * inv_l);
    }
}
