// Shared definitions of the registered backward kernels (backward_naive.cu, backward_mma.cu):
// README.md's "Backward entry point", the workspace layout they share, the key-side view of the
// masks, and the D_i and dQ row helpers of their pre and post stages.
//
// Workspace (f32), as both registered kernels lay it out: the dQ accumulator [q_rows, D] in Q's
// element order (element e of Q is element e of it), then D_i = Σ dO∘O [q_rows] in Q's row order
// (the LSE's); q_rows = B·H·S_q dense, total_q·H varlen. That is README.md's minimum,
// 4 · q_rows · (D + 1) bytes, and a kernel traps on less.
#pragma once

#include "attn_common.cuh"

namespace bwd_common {

// Rows of Q (query rows × heads) of the batch: the workspace's row count.
__device__ __forceinline__ long long query_rows(int batch, int heads, int seq_q, const int* cu_seqlens_q) {
    return cu_seqlens_q == nullptr ? (long long)batch * heads * seq_q : (long long)cu_seqlens_q[batch] * heads;
}

// Traps on a workspace smaller than the layout above: the host sizes it, this is a defence.
__device__ __forceinline__ void check_workspace(long long workspace_bytes, long long q_rows) {
    if (workspace_bytes < q_rows * (HEAD_DIM + 1) * 4) __trap();
}

// Row i of a head view in Q's row order (the LSE's and D_i's index): its element offset over D.
__device__ __forceinline__ long long row_index(const attn::HeadView& view, int i) {
    return (view.q + (long long)i * view.q_stride) / HEAD_DIM;
}

// The first query row (inclusive) that sees key j (0 <= j < seq_kv): row_kv_hi(i) > j exactly
// when i >= j - (seq_kv - seq_q) - right, right = 0 when causal; 0 without a right bound. May
// exceed seq_q (no row sees the key).
__device__ __forceinline__ int key_q_lo(int j, int seq_q, int seq_kv, int causal, int window_right) {
    const int right = causal ? 0 : window_right;
    if (right < 0) return 0;
    const long long lo = (long long)j - seq_kv + seq_q - right;
    return (int)max(0ll, min(lo, (long long)seq_q));
}

// The last query row (exclusive) that sees key j: row_kv_lo(i) <= j exactly when
// i <= j - (seq_kv - seq_q) + window_left; seq_q without a left bound. Rows key_q_lo(j) ..
// key_q_hi(j) - 1 are exactly those that see key j; both grow with j.
__device__ __forceinline__ int key_q_hi(int j, int seq_q, int seq_kv, int window_left) {
    if (window_left < 0) return seq_q;
    const long long hi = (long long)j - seq_kv + seq_q + window_left + 1;
    return (int)max(0ll, min(hi, (long long)seq_q));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// D_i = Σ dO∘O of one row, by a warp (lane l takes elements l, l + 32, ...); every lane gets it.
__device__ __forceinline__ float row_delta(const elem_t* __restrict__ o_row, const elem_t* __restrict__ do_row,
                                           int lane) {
    float partial = 0.0f;
    for (int d = lane; d < HEAD_DIM; d += 32) partial += to_float(o_row[d]) * to_float(do_row[d]);
    return warp_sum(partial);
}

// The pre and post stages' rows: block (x, y, z) takes rows x·rows_per_block .. of query head y of
// sequence z, a warp per row; `each(view, i, lane)` runs for each row i the sequence has.
template <typename Each>
__device__ __forceinline__ void for_block_rows(int rows_per_block, int heads, int kv_heads, int seq_q, int seq_kv,
                                               const int* cu_seqlens_q, const int* cu_seqlens_kv, Each each) {
    const attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q, seq_kv,
                                                cu_seqlens_q, cu_seqlens_kv);
    const int warps = blockDim.x / 32;
    const int lane = threadIdx.x % 32;
    const int end = min(view.seq_q, (int)(blockIdx.x + 1) * rows_per_block);
    for (int i = blockIdx.x * rows_per_block + threadIdx.x / 32; i < end; i += warps) each(view, i, lane);
}

}  // namespace bwd_common

// The parameters of every backward stage, in the ABI's order (kernels/README.md, "Backward entry point").
#define BWD_PARAMS                                                                                               \
    const elem_t *__restrict__ q, const elem_t *__restrict__ k, const elem_t *__restrict__ v,                      \
        const elem_t *__restrict__ o, const elem_t *__restrict__ d_o, const float *__restrict__ lse,               \
        elem_t *__restrict__ dq, elem_t *__restrict__ dk, elem_t *__restrict__ dv, int batch, int heads, int seq_q, \
        int seq_kv, float scale, int causal, int kv_heads, int window_left, int window_right,                      \
        const int *__restrict__ cu_seqlens_q, const int *__restrict__ cu_seqlens_kv, float *__restrict__ workspace, \
        long long workspace_bytes
