// softmax_pv: our half of `hybrid-qk`. cuBLAS first computes S = Q·Kᵀ in f32 ([B·H, S_q, S_kv],
// unscaled); this kernel applies scale, mask and softmax and multiplies by V, writing O.
//
// One block per BLOCK_M query rows of one (b, h): grid (ceil(S_q / BLOCK_M), B·H), NUM_WARPS warps.
// Pass 1: each warp reads its rows of S once and keeps a running max and sum per lane (merged by
// shuffles): exact row statistics, so pass 2 writes final probabilities and no accumulator is ever
// rescaled. Pass 2, per tile of BLOCK_N keys: V tile to shared (zero past S_kv), P = 2^(s·scale·log2e
// − m) / l to shared in elem_t, O += P·V with WMMA (f32 accumulators, each warp a fixed set of
// 16x16 output tiles). Key tiles past the block's causal limit are skipped.
// Dynamic shared memory: max(BLOCK_N·(D+8)·2 + BLOCK_M·(BLOCK_N+8)·2, BLOCK_M·(D+4)·4) + 8·BLOCK_M
// (the O staging tile reuses the V and P tiles; row statistics after it).
#include "hybrid_common.cuh"

#define P_PITCH (BLOCK_N + 8)
#define O_PITCH (HEAD_DIM + 4)
#define O_TILES ((BLOCK_M / 16) * (HEAD_DIM / 16))
#define O_TILES_PER_WARP (O_TILES / NUM_WARPS)
#define TILE_BYTES (BLOCK_N * D_PITCH * 2 + BLOCK_M * P_PITCH * 2)
#define STAGE_BYTES (BLOCK_M * O_PITCH * 4)
#define WORK_BYTES (TILE_BYTES > STAGE_BYTES ? TILE_BYTES : STAGE_BYTES)  // both multiples of 16

#if O_TILES % NUM_WARPS != 0
#error "the (BLOCK_M/16) x (HEAD_DIM/16) output tiles must split evenly over NUM_WARPS warps"
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_pv(const float* __restrict__ s, const elem_t* __restrict__ v, elem_t* __restrict__ o, int seq_q, int seq_kv,
           float scale, int causal) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    elem_t* v_tile = reinterpret_cast<elem_t*>(smem);  // BLOCK_N x D_PITCH
    elem_t* p_tile = v_tile + BLOCK_N * D_PITCH;         // BLOCK_M x P_PITCH
    float* o_stage = reinterpret_cast<float*>(smem);     // BLOCK_M x O_PITCH, after the key loop
    float* row_max = reinterpret_cast<float*>(smem + WORK_BYTES);
    float* row_inv = row_max + BLOCK_M;

    const int bh = blockIdx.y, row0 = blockIdx.x * BLOCK_M;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale_log2 = scale * ATTN_LOG2E;
    const float* s_head = s + (size_t)bh * seq_q * seq_kv;
    const elem_t* v_head = v + (size_t)bh * seq_kv * HEAD_DIM;

    // Pass 1: exact max and sum of every row.
    for (int r = warp * ROWS_PER_WARP; r < (warp + 1) * ROWS_PER_WARP; ++r) {
        const int row = row0 + r;
        float m = -INFINITY, l = 0.0f;
        if (row < seq_q) {
            const int end = attn::row_kv_limit(row, seq_q, seq_kv, causal);
            const float* s_row = s_head + (size_t)row * seq_kv;
            for (int j = lane; j < end; j += 32) {
                const float x = s_row[j] * scale_log2;
                const float m_new = fmaxf(m, x);
                l = l * exp2f(m - m_new) + exp2f(x - m_new);
                m = m_new;
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
            const float m_other = __shfl_xor_sync(0xffffffffu, m, offset);
            const float l_other = __shfl_xor_sync(0xffffffffu, l, offset);
            const float m_new = fmaxf(m, m_other);
            if (m_new != -INFINITY) l = l * exp2f(m - m_new) + l_other * exp2f(m_other - m_new);
            m = m_new;
        }
        if (lane == 0) {
            row_max[r] = m;
            row_inv[r] = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key writes zeros
        }
    }

    // Pass 2: O = P·V over the keys any row of the block may see.
    hybrid::FragAcc acc[O_TILES_PER_WARP];
#pragma unroll
    for (int t = 0; t < O_TILES_PER_WARP; ++t) wmma::fill_fragment(acc[t], 0.0f);
    const int kv_stop = hybrid::block_kv_stop(row0, seq_q, seq_kv, causal);
    for (int kv0 = 0; kv0 < kv_stop; kv0 += BLOCK_N) {
        __syncthreads();  // the previous tile is consumed (and the statistics are written)
        hybrid::load_rows(v_tile, v_head, kv0, BLOCK_N, seq_kv);
        for (int i = threadIdx.x; i < BLOCK_M * BLOCK_N; i += THREADS) {
            const int r = i / BLOCK_N, c = i % BLOCK_N;
            const int row = row0 + r, key = kv0 + c;
            float p = 0.0f;
            if (row < seq_q && key < attn::row_kv_limit(row, seq_q, seq_kv, causal))
                p = exp2f(s_head[(size_t)row * seq_kv + key] * scale_log2 - row_max[r]) * row_inv[r];
            p_tile[r * P_PITCH + c] = from_float(p);
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < O_TILES_PER_WARP; ++t) {
            const int tile = warp * O_TILES_PER_WARP + t;
            const int ti = tile / (HEAD_DIM / 16), tj = tile % (HEAD_DIM / 16);
#pragma unroll
            for (int k = 0; k < BLOCK_N / 16; ++k) {
                hybrid::FragA a;
                hybrid::FragBRow b;
                wmma::load_matrix_sync(a, p_tile + ti * 16 * P_PITCH + k * 16, P_PITCH);
                wmma::load_matrix_sync(b, v_tile + k * 16 * D_PITCH + tj * 16, D_PITCH);
                wmma::mma_sync(acc[t], a, b, acc[t]);
            }
        }
    }

    // Epilogue: accumulators through shared memory (it aliases the tiles) to O in elem_t.
    __syncthreads();
#pragma unroll
    for (int t = 0; t < O_TILES_PER_WARP; ++t) {
        const int tile = warp * O_TILES_PER_WARP + t;
        const int ti = tile / (HEAD_DIM / 16), tj = tile % (HEAD_DIM / 16);
        wmma::store_matrix_sync(o_stage + ti * 16 * O_PITCH + tj * 16, acc[t], O_PITCH, wmma::mem_row_major);
    }
    __syncthreads();
    elem_t* o_head = o + (size_t)bh * seq_q * HEAD_DIM;
    for (int i = threadIdx.x; i < BLOCK_M * HEAD_DIM / 2; i += THREADS) {
        const int r = i / (HEAD_DIM / 2), c = (i % (HEAD_DIM / 2)) * 2;
        if (row0 + r < seq_q) {
            const unsigned int pair = attn::pack_elem2(o_stage[r * O_PITCH + c], o_stage[r * O_PITCH + c + 1]);
            *reinterpret_cast<unsigned int*>(o_head + (size_t)(row0 + r) * HEAD_DIM + c) = pair;
        }
    }
}
