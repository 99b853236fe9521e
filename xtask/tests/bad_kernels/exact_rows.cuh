// Shared by the bad kernels: one thread computes one whole output row, exactly enough to pass the
// oracle, so that each bad kernel fails the gate only for the fault it plants.
#pragma once
#include "attn_common.cuh"

__device__ void exact_row(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, size_t bh, int row,
                          int seq_q, int seq_kv, float scale, int causal) {
    const elem_t* q_row = q + (bh * seq_q + row) * HEAD_DIM;
    const int kv_end = causal ? min(seq_kv, causal_kv_end(row, seq_q, seq_kv)) : seq_kv;
    float m = -INFINITY, l = 0.0f, acc[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) acc[d] = 0.0f;
    for (int j = 0; j < kv_end; ++j) {
        const elem_t* k_row = k + (bh * seq_kv + j) * HEAD_DIM;
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s += to_float(q_row[d]) * to_float(k_row[d]);
        s *= scale;
        const float m_new = fmaxf(m, s), c = expf(m - m_new), p = expf(s - m_new);
        l = l * c + p;
        const elem_t* v_row = v + (bh * seq_kv + j) * HEAD_DIM;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * c + p * to_float(v_row[d]);
        m = m_new;
    }
    elem_t* o_row = o + (bh * seq_q + row) * HEAD_DIM;
    for (int d = 0; d < HEAD_DIM; ++d) o_row[d] = from_float(l > 0.0f ? acc[d] / l : 0.0f);
}

// The ABI's geometry with the defaults BLOCK_M = 64, NUM_WARPS = 4: threads 0..63 own the rows.
#define ROW_OF_THREAD (blockIdx.x * 64 + threadIdx.x)
#define BH_OF_BLOCK ((size_t)blockIdx.z * heads + blockIdx.y)
