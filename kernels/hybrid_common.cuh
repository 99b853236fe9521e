// Shared pieces of the hybrid implementations' kernels (`softmax_pv.cu`, `qk_softmax.cu`): WMMA
// 16x16x16 tiles from padded shared memory, 16-byte tile copies with zero fill, warp reductions.
#pragma once

#include "attn_common.cuh"
#include <mma.h>

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif

#define THREADS (NUM_WARPS * 32)
#define ROWS_PER_WARP (BLOCK_M / NUM_WARPS)
// Row pitch (elements) of a [rows x HEAD_DIM] tile in shared memory: 16 bytes of padding spread
// the rows over the banks, and keep every 16-row fragment 32-byte aligned as WMMA requires.
#define D_PITCH (HEAD_DIM + 8)

namespace hybrid {

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, elem_t, nvcuda::wmma::row_major> FragA;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, elem_t, nvcuda::wmma::row_major> FragBRow;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, elem_t, nvcuda::wmma::col_major> FragBCol;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> FragAcc;

// Copies rows [first, first + rows) of a [seq x HEAD_DIM] head into `tile` (pitch D_PITCH), 16
// bytes per thread per step; rows past `seq` become zeros (never the next head's data).
__device__ __forceinline__ void load_rows(elem_t* tile, const elem_t* __restrict__ head, int first, int rows, int seq) {
    constexpr int CHUNKS = HEAD_DIM / 8;
    for (int c = threadIdx.x; c < rows * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (first + r < seq) value = *reinterpret_cast<const uint4*>(head + (size_t)(first + r) * HEAD_DIM + col);
        *reinterpret_cast<uint4*>(tile + r * D_PITCH + col) = value;
    }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// The key limit of the block's last valid row: no row of the block sees a key at or past it.
__device__ __forceinline__ int block_kv_stop(int row0, int seq_q, int seq_kv, int causal) {
    const int last = min(seq_q, row0 + BLOCK_M) - 1;
    return max(0, attn::row_kv_limit(last, seq_q, seq_kv, causal));
}

}  // namespace hybrid
