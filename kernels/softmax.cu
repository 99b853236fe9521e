// softmax_rows: the fused scale + mask + softmax step of the `cublas` math path.
//
// S = Q·Kᵀ comes from a cuBLAS strided-batched GEMM in f32, [B·H, S_q, S_kv] row-major; this kernel
// turns each row into probabilities P (elem_t, the dtype cuBLAS then multiplies by V). One block per
// (row, b·h); three passes over the row (max, sum, write), which stays in L1/L2 for realistic S_kv.
// Grid: (S_q, B·H); block: SOFTMAX_THREADS.
#include "attn_common.cuh"

#ifndef SOFTMAX_THREADS
#define SOFTMAX_THREADS 256
#endif

// Block-wide reduction through one shared word per warp; every thread gets the result.
template <bool IS_MAX>
__device__ float block_reduce(float x, float* scratch) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, x, offset);
        x = IS_MAX ? fmaxf(x, other) : x + other;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // scratch may still be read by the previous reduction
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < SOFTMAX_THREADS / 32 ? scratch[lane] : (IS_MAX ? -INFINITY : 0.0f);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, x, offset);
        x = IS_MAX ? fmaxf(x, other) : x + other;
    }
    return x;
}

extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS)
softmax_rows(const float* __restrict__ s, elem_t* __restrict__ p, int seq_q, int seq_kv, float scale, int causal) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    const size_t offset = ((size_t)blockIdx.y * seq_q + row) * seq_kv;
    const float* s_row = s + offset;
    elem_t* p_row = p + offset;
    const int kv_end = causal ? max(0, min(seq_kv, causal_kv_end(row, seq_q, seq_kv))) : seq_kv;
    const float scale_log2 = scale * ATTN_LOG2E;

    float m = -INFINITY;
    for (int j = threadIdx.x; j < kv_end; j += SOFTMAX_THREADS) m = fmaxf(m, s_row[j] * scale_log2);
    m = block_reduce<true>(m, scratch);

    float sum = 0.0f;
    for (int j = threadIdx.x; j < kv_end; j += SOFTMAX_THREADS) sum += exp2f(s_row[j] * scale_log2 - m);
    sum = block_reduce<false>(sum, scratch);

    const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;  // a fully masked row gives zeros
    for (int j = threadIdx.x; j < seq_kv; j += SOFTMAX_THREADS) {
        const float prob = j < kv_end ? exp2f(s_row[j] * scale_log2 - m) * inv_sum : 0.0f;
        p_row[j] = from_float(prob);
    }
}
