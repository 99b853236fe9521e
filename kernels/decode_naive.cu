// decode_naive.cu — the decode yardstick: one warp per (query row, head), f32 throughout.
//
// The decode ABI (README.md, "Decode entry point"): Q and O packed [total_q, H, D]; K and V read
// through the block table (paged) or from their [B, H_kv, S_max, D] slabs (contiguous). It never
// splits the keys: the host passes num_splits = 1 and no workspace, which it ignores.
//
// Each warp owns one packed row (token, head): lane l holds elements l, l + 32, ... of q (D / 32 of
// them, f32). Per visible key the warp reduces the dot product with shuffles, then runs the online
// softmax with expf (no exp2 folding, no approximations beyond f32), so that every lane keeps the
// same running max, sum and its slice of O. Slow by design: it is what the fast kernel is checked
// against on every GPU, and the path of the gate's checks.
//
// Knobs: ROWS_PER_BLOCK ∈ {1, 2, 4, 8} warps (rows) per block, default 4.
// Launch: grid = (ceil(total_q · H / ROWS_PER_BLOCK)), block = ROWS_PER_BLOCK · 32, no shared memory.

#include "attn_common.cuh"

#ifndef ROWS_PER_BLOCK
#define ROWS_PER_BLOCK 4
#endif

static_assert(HEAD_DIM % 32 == 0 && HEAD_DIM <= 256, "decode_naive.cu: HEAD_DIM must be a multiple of 32, at most 256");

namespace decode_naive {

constexpr int PER_LANE = HEAD_DIM / 32;

// The sequence holding packed token `token`: the last b with cu[b] <= token (an empty sequence b
// has cu[b] == cu[b + 1], so the search passes over it to the one that holds the token).
__device__ __forceinline__ int sequence_of(const int* __restrict__ cu, int batch, int token) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= token)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

}  // namespace decode_naive

// No __launch_bounds__: with it ptxas squeezes the D=128 variant into 32 registers and a stack frame.
extern "C" __global__ void
    attn_decode(const elem_t* __restrict__ q, const elem_t* __restrict__ k_cache, const elem_t* __restrict__ v_cache,
                elem_t* __restrict__ o, const int* __restrict__ cu_seqlens_q, const int* __restrict__ seqlens_kv,
                const int* __restrict__ block_table, int max_pages_per_seq, int page_size, int s_max, int batch,
                int heads, int kv_heads, float scale, int window_left, float* __restrict__ workspace,
                long long workspace_bytes, int num_splits) {
    using namespace decode_naive;
    (void)workspace;
    (void)workspace_bytes;
    (void)num_splits;
    const int lane = threadIdx.x & 31;
    // int32 rows: the host refuses batches of more than 2^29 (token, head) rows.
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= cu_seqlens_q[batch] * heads) return;
    const int token = row / heads;
    const int h = row % heads;
    const int b = sequence_of(cu_seqlens_q, batch, token);
    const int sq = cu_seqlens_q[b + 1] - cu_seqlens_q[b];
    const int skv = seqlens_kv[b];
    const int i = token - cu_seqlens_q[b];
    const int kv_head = h / (heads / kv_heads);
    // Row i of the sequence's new tokens sees keys lo .. hi - 1 (causal, bottom-right aligned).
    const int lo = attn::row_kv_lo(i, sq, skv, window_left);
    const int hi = attn::row_kv_hi(i, sq, skv, 1, 0);

    float qv[PER_LANE], acc[PER_LANE];
    const elem_t* q_row = q + static_cast<long long>(row) * HEAD_DIM;
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) {
        qv[e] = to_float(q_row[lane + 32 * e]);
        acc[e] = 0.f;
    }
    float running_max = -INFINITY, running_sum = 0.f;
    const long long kv_row = static_cast<long long>(kv_heads) * HEAD_DIM;
    for (int t = lo; t < hi; ++t) {
        // Element offset of token t's row of this K/V head, through the layout.
        long long at;
        if (page_size > 0) {
            const int page = block_table[static_cast<long long>(b) * max_pages_per_seq + t / page_size];
            at = (static_cast<long long>(page) * page_size + t % page_size) * kv_row + kv_head * HEAD_DIM;
        } else {
            at = ((static_cast<long long>(b) * kv_heads + kv_head) * s_max + t) * HEAD_DIM;
        }
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e) dot += qv[e] * to_float(k_cache[at + lane + 32 * e]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        const float s = dot * scale;
        const float m = fmaxf(running_max, s);
        const float rescale = expf(running_max - m);  // 0 on the first key (running_max is -inf)
        const float p = expf(s - m);
        running_sum = running_sum * rescale + p;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e) acc[e] = acc[e] * rescale + p * to_float(v_cache[at + lane + 32 * e]);
        running_max = m;
    }
    // A row that sees no key writes zeros.
    const float inv = running_sum > 0.f ? 1.f / running_sum : 0.f;
    elem_t* o_row = o + static_cast<long long>(row) * HEAD_DIM;
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) o_row[lane + 32 * e] = from_float(acc[e] * inv);
}
