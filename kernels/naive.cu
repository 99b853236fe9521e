// naive: the simplest correct kernel, for any shape and any head dimension.
//
// One warp per query row. For each key, the warp computes the score with a shuffle reduction and
// updates an online softmax; lane `l` owns output dims l, l+32, l+64, ... It is slow on purpose:
// it is the GPU kernel whose correctness is easiest to see.
//
// Knobs: ROWS_PER_BLOCK (warps, i.e. query rows, per block). No shared memory.
// Grid: (ceil(S_q / ROWS_PER_BLOCK), H, B); block: ROWS_PER_BLOCK * 32.
#include "attn_common.cuh"

#ifndef ROWS_PER_BLOCK
#define ROWS_PER_BLOCK 4
#endif
#define DIMS_PER_LANE ((HEAD_DIM + 31) / 32)

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + warp;
    if (row >= seq_q) return;  // whole warp leaves together: no shuffle below misses a lane

    const size_t bh = (size_t)blockIdx.z * heads + blockIdx.y;
    const elem_t* q_row = q + (bh * seq_q + row) * HEAD_DIM;
    const elem_t* k_head = k + bh * seq_kv * HEAD_DIM;
    const elem_t* v_head = v + bh * seq_kv * HEAD_DIM;

    float q_reg[DIMS_PER_LANE];
    float acc[DIMS_PER_LANE];
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        q_reg[i] = d < HEAD_DIM ? to_float(q_row[d]) : 0.0f;
        acc[i] = 0.0f;
    }

    const int kv_end = causal ? min(seq_kv, causal_kv_end(row, seq_q, seq_kv)) : seq_kv;
    float m = -INFINITY;
    float l = 0.0f;
    for (int j = 0; j < kv_end; ++j) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_head[(size_t)j * HEAD_DIM + d]);
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
        const float s = partial * scale;
        const float m_new = fmaxf(m, s);
        const float correction = expf(m - m_new);  // m = -inf on the first key: exp(-inf) = 0
        const float p = expf(s - m_new);
        l = l * correction + p;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            const float vd = d < HEAD_DIM ? to_float(v_head[(size_t)j * HEAD_DIM + d]) : 0.0f;
            acc[i] = acc[i] * correction + p * vd;
        }
        m = m_new;
    }

    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key writes zeros
    elem_t* o_row = o + (bh * seq_q + row) * HEAD_DIM;
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        if (d < HEAD_DIM) o_row[d] = from_float(acc[i] * inv_l);
    }
}
