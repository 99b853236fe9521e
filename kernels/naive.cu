// naive: the simplest correct kernel, for any shape and any head dimension.
//
// One warp per query row. For each key, the warp computes the score with a shuffle reduction and
// updates an online softmax; lane `l` owns output dims l, l+32, l+64, ... It is slow on purpose:
// it is the GPU kernel whose correctness is easiest to see.
//
// Variants (README.md, "Variants"): all of them. GQA/MQA (kv_heads), sliding windows (window_left,
// window_right; causal is window_right 0) and varlen (cu_seqlens_q/kv): addresses come from
// attn::head_view, and row i loops over its keys [row_kv_lo, row_kv_hi) only.
//
// Knobs: ROWS_PER_BLOCK (warps, i.e. query rows, per block). No shared memory.
// Grid: (ceil(S_q / ROWS_PER_BLOCK), H, B); block: ROWS_PER_BLOCK * 32 (varlen: S_q is the longest
// sequence's, B the number of sequences).
#include "attn_common.cuh"

#ifndef ROWS_PER_BLOCK
#define ROWS_PER_BLOCK 4
#endif
#define DIMS_PER_LANE ((HEAD_DIM + 31) / 32)

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
         int kv_heads, int window_left, int window_right, const int* __restrict__ cu_seqlens_q,
         const int* __restrict__ cu_seqlens_kv) {
    (void)batch;  // the sequence index comes from blockIdx.z
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q, seq_kv,
                                                cu_seqlens_q, cu_seqlens_kv);
    const int row = blockIdx.x * ROWS_PER_BLOCK + warp;
    if (row >= view.seq_q) return;  // whole warp leaves together: no shuffle below misses a lane

    const elem_t* q_row = q + view.q + (size_t)row * view.q_stride;
    const elem_t* k_head = k + view.kv;
    const elem_t* v_head = v + view.kv;

    float q_reg[DIMS_PER_LANE];
    float acc[DIMS_PER_LANE];
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        q_reg[i] = d < HEAD_DIM ? to_float(q_row[d]) : 0.0f;
        acc[i] = 0.0f;
    }

    // The keys this row sees: [kv_lo, kv_hi), empty (zeros written) when kv_lo >= kv_hi.
    const int kv_lo = attn::row_kv_lo(row, view.seq_q, view.seq_kv, window_left);
    const int kv_hi = attn::row_kv_hi(row, view.seq_q, view.seq_kv, causal, window_right);
    float m = -INFINITY;
    float l = 0.0f;
    for (int j = kv_lo; j < kv_hi; ++j) {
        const size_t kv_row = (size_t)j * view.kv_stride;
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_head[kv_row + d]);
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
            const float vd = d < HEAD_DIM ? to_float(v_head[kv_row + d]) : 0.0f;
            acc[i] = acc[i] * correction + p * vd;
        }
        m = m_new;
    }

    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key writes zeros
    elem_t* o_row = o + view.q + (size_t)row * view.q_stride;
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        if (d < HEAD_DIM) o_row[d] = from_float(acc[i] * inv_l);
    }
}
