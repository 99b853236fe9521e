// backward_naive.cu — the backward yardstick: a warp per output row, f32 throughout, deterministic.
//
// README.md's "Backward entry point", in its three stages:
//   attn_bwd_pre   D_i = Σ dO∘O of every query row into the workspace (backward_common.cuh's layout;
//                  this kernel leaves the dQ accumulator's part unused).
//   attn_bwd       dK and dV: a warp per key j of K/V head g. Lane l holds elements l, l + 32, ... of
//                  k_j and v_j; for each query head of the group in head order, for each query row
//                  that sees the key (key_q_lo(j) .. key_q_hi(j), the rows whose range holds j), it
//                  recomputes s = q·k_j and dP = dO·v_j by shuffle reductions,
//                  P = expf(scale·s - LSE_i), dS = P·(dP - D_i), and adds dS·q to dK and P·dO to dV.
//   attn_bwd_post  dQ: a warp per query row, over the keys it sees (row_kv_lo .. row_kv_hi):
//                  dQ += dS·k_j. A row that sees no key writes zeros and never reads its LSE.
// Every sum runs in a fixed order and nothing is shared between warps: the gradients are the same
// bits on every launch. Slow by design (every score is computed twice, per key and per row): it is
// what the tensor-core kernel is checked against.
//
// Knobs: ROWS_PER_BLOCK ∈ {1, 2, 4, 8} warps (rows) per block, default 4.
// HEAD_DIM: any multiple of 32 up to 256.
// Launch: block = ROWS_PER_BLOCK · 32, no shared memory;
//   attn_bwd_pre, attn_bwd_post: grid = (ceil(S_q / ROWS_PER_BLOCK), H, B);
//   attn_bwd: grid = (ceil(S_kv / ROWS_PER_BLOCK), H_kv, B).
// Workspace: backward_common.cuh's layout, at least 4 · q_rows · (D + 1) bytes (it traps on less).

#include "attn_common.cuh"
#include "backward_common.cuh"

#ifndef ROWS_PER_BLOCK
#define ROWS_PER_BLOCK 4
#endif

static_assert(HEAD_DIM % 32 == 0 && HEAD_DIM <= 256, "backward_naive.cu: HEAD_DIM must be a multiple of 32, at most 256");
static_assert(ROWS_PER_BLOCK == 1 || ROWS_PER_BLOCK == 2 || ROWS_PER_BLOCK == 4 || ROWS_PER_BLOCK == 8,
              "backward_naive.cu: ROWS_PER_BLOCK must be 1, 2, 4 or 8");

namespace backward_naive {

constexpr int PER_LANE = HEAD_DIM / 32;

__device__ __forceinline__ void load_row(float (&x)[PER_LANE], const elem_t* __restrict__ row, int lane) {
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) x[e] = to_float(row[lane + 32 * e]);
}

__device__ __forceinline__ float dot_row(const float (&x)[PER_LANE], const elem_t* __restrict__ y, int lane) {
    float partial = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) partial += x[e] * to_float(y[lane + 32 * e]);
    return bwd_common::warp_sum(partial);
}

__device__ __forceinline__ void store_row(elem_t* __restrict__ row, const float (&x)[PER_LANE], float factor,
                                          int lane) {
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) row[lane + 32 * e] = from_float(x[e] * factor);
}

}  // namespace backward_naive

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32) attn_bwd_pre(BWD_PARAMS) {
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    float* delta = workspace + q_rows * HEAD_DIM;
    bwd_common::for_block_rows(ROWS_PER_BLOCK, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv,
                             [&](const attn::HeadView& view, int i, int lane) {
                                 const long long at = view.q + (long long)i * view.q_stride;
                                 const float d = bwd_common::row_delta(o + at, d_o + at, lane);
                                 if (lane == 0) delta[bwd_common::row_index(view, i)] = d;
                             });
}

// No __launch_bounds__: with it ptxas gives this entry a stack frame (and spills) on sm_80 at ~40 registers.
extern "C" __global__ void attn_bwd(BWD_PARAMS) {
    using namespace backward_naive;
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    const float* delta = workspace + q_rows * HEAD_DIM;
    const int lane = threadIdx.x % 32;
    const int group = heads / kv_heads;
    const int b = blockIdx.z, g = blockIdx.y;
    const int j = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const attn::HeadView first =
        attn::head_view(b, g * group, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
    if (j >= first.seq_kv) return;  // past the sequence's keys (varlen: the next sequence's)
    const long long key_at = first.kv + (long long)j * first.kv_stride;
    float k_reg[PER_LANE], v_reg[PER_LANE], dk_acc[PER_LANE], dv_acc[PER_LANE];
    load_row(k_reg, k + key_at, lane);
    load_row(v_reg, v + key_at, lane);
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) dk_acc[e] = dv_acc[e] = 0.0f;
    const int row_lo = bwd_common::key_q_lo(j, first.seq_q, first.seq_kv, causal, window_right);
    const int row_hi = bwd_common::key_q_hi(j, first.seq_q, first.seq_kv, window_left);
    for (int hh = 0; hh < group; ++hh) {
        const attn::HeadView view =
            attn::head_view(b, g * group + hh, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
        for (int i = row_lo; i < row_hi; ++i) {
            const long long at = view.q + (long long)i * view.q_stride;
            const long long r = bwd_common::row_index(view, i);
            const float p = expf(dot_row(k_reg, q + at, lane) * scale - lse[r]);
            const float ds = p * (dot_row(v_reg, d_o + at, lane) - delta[r]);
#pragma unroll
            for (int e = 0; e < PER_LANE; ++e) {
                dk_acc[e] += ds * to_float(q[at + lane + 32 * e]);
                dv_acc[e] += p * to_float(d_o[at + lane + 32 * e]);
            }
        }
    }
    store_row(dk + key_at, dk_acc, scale, lane);
    store_row(dv + key_at, dv_acc, 1.0f, lane);
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32) attn_bwd_post(BWD_PARAMS) {
    using namespace backward_naive;
    const long long q_rows = bwd_common::query_rows(batch, heads, seq_q, cu_seqlens_q);
    bwd_common::check_workspace(workspace_bytes, q_rows);
    const float* delta = workspace + q_rows * HEAD_DIM;
    bwd_common::for_block_rows(
        ROWS_PER_BLOCK, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv,
        [&](const attn::HeadView& view, int i, int lane) {
            const long long at = view.q + (long long)i * view.q_stride;
            const int lo = attn::row_kv_lo(i, view.seq_q, view.seq_kv, window_left);
            const int hi = attn::row_kv_hi(i, view.seq_q, view.seq_kv, causal, window_right);
            float acc[PER_LANE];
#pragma unroll
            for (int e = 0; e < PER_LANE; ++e) acc[e] = 0.0f;
            if (lo < hi) {  // a row that sees no key: zeros, its LSE unread
                float q_reg[PER_LANE], do_reg[PER_LANE];
                load_row(q_reg, q + at, lane);
                load_row(do_reg, d_o + at, lane);
                const long long r = bwd_common::row_index(view, i);
                const float row_lse = lse[r], row_delta = delta[r];
                for (int j = lo; j < hi; ++j) {
                    const elem_t* k_row = k + view.kv + (long long)j * view.kv_stride;
                    const float p = expf(dot_row(q_reg, k_row, lane) * scale - row_lse);
                    const float ds = p * (dot_row(do_reg, v + view.kv + (long long)j * view.kv_stride, lane) - row_delta);
#pragma unroll
                    for (int e = 0; e < PER_LANE; ++e) acc[e] += ds * to_float(k_row[lane + 32 * e]);
                }
            }
            store_row(dq + at, acc, scale, lane);
        });
}
