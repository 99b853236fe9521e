// qk_softmax: our half of `hybrid-pv`. This kernel computes S = Q·Kᵀ with WMMA, applies scale, mask
// and softmax, and writes the probabilities P ([B·H, S_q, S_kv], elem_t, masked keys zero); cuBLAS
// then computes O = P·V.
//
// One block per BLOCK_M query rows of one (b, h): grid (ceil(S_q / BLOCK_M), B·H), NUM_WARPS warps.
// The Q tile stays in shared memory. Pass 1, per tile of BLOCK_N keys: K tile to shared (zero past
// S_kv), S tile = Q·Kᵀ (each warp a fixed set of 16x16 tiles) to shared f32, then each warp folds its
// rows' tile maximum and sum into running statistics. Pass 2 recomputes the same S tiles (the same
// WMMA on the same data: the same bits) and writes P = 2^(s·scale·log2e − m) / l. Writing final
// probabilities is what lets cuBLAS do P·V with no rescaling, at the price of Q·Kᵀ twice. Keys past
// the block's causal limit are written as zeros without being computed.
// Dynamic shared memory: (BLOCK_M + BLOCK_N)·(D+8)·2 + BLOCK_M·(BLOCK_N+4)·4 + 8·BLOCK_M.
#include "hybrid_common.cuh"

#define S_PITCH (BLOCK_N + 4)
#define S_TILES ((BLOCK_M / 16) * (BLOCK_N / 16))
#define S_TILES_PER_WARP (S_TILES / NUM_WARPS)

#if S_TILES % NUM_WARPS != 0
#error "the (BLOCK_M/16) x (BLOCK_N/16) score tiles must split evenly over NUM_WARPS warps"
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
qk_softmax(const elem_t* __restrict__ q, const elem_t* __restrict__ k, elem_t* __restrict__ p, int seq_q,
           int seq_kv, float scale, int causal) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    elem_t* q_tile = reinterpret_cast<elem_t*>(smem);                   // BLOCK_M x D_PITCH
    elem_t* k_tile = q_tile + BLOCK_M * D_PITCH;                         // BLOCK_N x D_PITCH
    float* s_tile = reinterpret_cast<float*>(k_tile + BLOCK_N * D_PITCH);  // BLOCK_M x S_PITCH
    float* row_max = s_tile + BLOCK_M * S_PITCH;
    float* row_sum = row_max + BLOCK_M;

    const int bh = blockIdx.y, row0 = blockIdx.x * BLOCK_M;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale_log2 = scale * ATTN_LOG2E;
    const elem_t* k_head = k + (size_t)bh * seq_kv * HEAD_DIM;
    elem_t* p_head = p + (size_t)bh * seq_q * seq_kv;

    hybrid::load_rows(q_tile, q + (size_t)bh * seq_q * HEAD_DIM, row0, BLOCK_M, seq_q);
    for (int r = threadIdx.x; r < BLOCK_M; r += THREADS) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
    }
    const int kv_stop = hybrid::block_kv_stop(row0, seq_q, seq_kv, causal);

    // Unrolled: one copy per pass (rolled, ptxas spilled a few registers of the fp16 variants).
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
        for (int kv0 = 0; kv0 < kv_stop; kv0 += BLOCK_N) {
            __syncthreads();  // the previous S and K tiles are consumed
            hybrid::load_rows(k_tile, k_head, kv0, BLOCK_N, seq_kv);
            __syncthreads();
#pragma unroll
            for (int t = 0; t < S_TILES_PER_WARP; ++t) {
                const int tile = warp * S_TILES_PER_WARP + t;
                const int ti = tile / (BLOCK_N / 16), tj = tile % (BLOCK_N / 16);
                hybrid::FragAcc acc;
                wmma::fill_fragment(acc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                    hybrid::FragA a;
                    hybrid::FragBCol b;  // Kᵀ: column n of the B operand is row n of the K tile
                    wmma::load_matrix_sync(a, q_tile + ti * 16 * D_PITCH + kk * 16, D_PITCH);
                    wmma::load_matrix_sync(b, k_tile + tj * 16 * D_PITCH + kk * 16, D_PITCH);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(s_tile + ti * 16 * S_PITCH + tj * 16, acc, S_PITCH, wmma::mem_row_major);
            }
            __syncthreads();
            if (pass == 0) {
                // Each warp folds the tile into its rows' running maximum and sum.
                for (int r = warp * ROWS_PER_WARP; r < (warp + 1) * ROWS_PER_WARP; ++r) {
                    const int row = row0 + r;
                    const int end = row < seq_q ? attn::row_kv_limit(row, seq_q, seq_kv, causal) : 0;
                    float tile_max = -INFINITY;
                    for (int c = lane; c < BLOCK_N; c += 32)
                        if (kv0 + c < end) tile_max = fmaxf(tile_max, s_tile[r * S_PITCH + c] * scale_log2);
                    tile_max = hybrid::warp_max(tile_max);
                    const float m_old = row_max[r];
                    const float m_new = fmaxf(m_old, tile_max);
                    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
                    float sum = 0.0f;
                    for (int c = lane; c < BLOCK_N; c += 32)
                        if (kv0 + c < end) sum += exp2f(s_tile[r * S_PITCH + c] * scale_log2 - m_new);
                    sum = hybrid::warp_sum(sum);
                    __syncwarp();  // every lane has read row_max[r] before lane 0 replaces it
                    if (lane == 0) {
                        row_sum[r] = row_sum[r] * exp2f(m_old - m_new) + sum;
                        row_max[r] = m_new;
                    }
                }
            } else {
                for (int i = threadIdx.x; i < BLOCK_M * BLOCK_N; i += THREADS) {
                    const int r = i / BLOCK_N, c = i % BLOCK_N;
                    const int row = row0 + r, key = kv0 + c;
                    if (row >= seq_q || key >= seq_kv) continue;
                    const float inv = row_sum[r];  // 1/l by now (0 for a row that sees no key)
                    const float prob = key < attn::row_kv_limit(row, seq_q, seq_kv, causal) && inv > 0.0f
                                           ? exp2f(s_tile[r * S_PITCH + c] * scale_log2 - row_max[r]) * inv
                                           : 0.0f;
                    p_head[(size_t)row * seq_kv + key] = from_float(prob);
                }
            }
        }
        __syncthreads();  // the statistics are complete
        if (pass == 0) {
            for (int r = threadIdx.x; r < BLOCK_M; r += THREADS) row_sum[r] = row_sum[r] > 0.0f ? __fdividef(1.0f, row_sum[r]) : 0.0f;  // l <= S_kv: well within range
            __syncthreads();  // pass 2 reads the inverses
        }
    }
    // Keys past the last tile, which no row of the block may see: zeros, so that cuBLAS's P·V adds
    // nothing for them.
    const int written = min(seq_kv, (kv_stop + BLOCK_N - 1) / BLOCK_N * BLOCK_N);
    const int width = seq_kv - written;
    for (int i = threadIdx.x; i < BLOCK_M * width; i += THREADS) {
        const int r = i / width, key = written + i % width;
        if (row0 + r < seq_q) p_head[(size_t)(row0 + r) * seq_kv + key] = from_float(0.0f);
    }
}
