// decode_common.cuh — what the split-KV decode kernels (decode.cu, decode_hopper.cu) share: where a
// sequence's keys live in the cache (paged through the block table, or a contiguous slab), and the
// combine kernel that merges the splits' partial O through their log-sum-exp (the workspace layout
// of decode.cu's header). Include after attn_common.cuh, once HEAD_DIM is defined.
#pragma once

#define DECODE_NEG_INF __int_as_float(0xff800000u)

namespace decode_common {

// ---- the cache's layout --------------------------------------------------------------------------

// Division of non-negative ints below 2^31 by a divisor fixed for the whole launch (the page size),
// as a multiply-high, an add and a shift (the round-up method of Granlund and Montgomery): the
// gather splits every row's token into page and row within it, and a hardware-less integer
// division there costs a score of instructions per row.
struct FastDiv {
    unsigned int mul;
    unsigned int shift;
    int divisor;
};

__device__ __forceinline__ FastDiv make_fast_div(int divisor) {
    FastDiv f;
    f.divisor = divisor;
    unsigned int shift = 0;
    while ((1u << shift) < static_cast<unsigned int>(divisor)) ++shift;  // ceil(log2 divisor)
    f.shift = shift;
    // mul = floor(2^32 · (2^shift − d) / d) + 1 (< 2^32 for d ≥ 1).
    const unsigned long long d = static_cast<unsigned long long>(divisor);
    f.mul = static_cast<unsigned int>((((1ull << shift) - d) << 32) / d + 1);
    return f;
}

// n / divisor for 0 <= n < 2^31: umulhi(mul, n) < n, so the sum stays below 2^32.
__device__ __forceinline__ int fast_div(const FastDiv& f, int n) {
    const unsigned int u = static_cast<unsigned int>(n);
    return static_cast<int>((__umulhi(f.mul, u) + u) >> f.shift);
}

// Where one sequence's keys of one K/V head live.
struct KvView {
    const int* __restrict__ table;  // this sequence's row of the block table (paged), else unused
    long long slab;                 // contiguous: element offset of the (sequence, K/V head) slab
    long long head;                 // paged: element offset of the K/V head within a token's row
    int page_size;                  // 0: contiguous
    int kv_row;                     // paged: elements between consecutive tokens (H_kv · D)
    FastDiv page;                   // paged: division by page_size
};

// The view of sequence b's keys of K/V head kv_head, from the decode ABI's arguments.
__device__ __forceinline__ KvView make_view(const int* __restrict__ block_table, int max_pages_per_seq,
                                            int page_size, int s_max, int kv_heads, int b, int kv_head) {
    KvView view;
    view.table = block_table + static_cast<long long>(b) * max_pages_per_seq;
    view.slab = (static_cast<long long>(b) * kv_heads + kv_head) * s_max * HEAD_DIM;
    view.head = static_cast<long long>(kv_head) * HEAD_DIM;
    view.page_size = page_size;
    view.kv_row = kv_heads * HEAD_DIM;
    view.page = make_fast_div(page_size > 0 ? page_size : 1);
    return view;
}

// The block-table entry of token t (0 where t >= limit, or the cache is contiguous): the read that
// the gather of t's row waits for.
__device__ __forceinline__ int page_of(const KvView& view, int t, int limit) {
    return view.page_size > 0 && t < limit ? __ldg(view.table + fast_div(view.page, t)) : 0;
}

// Element offset of token t's row (of the view's K/V head) in K and V alike, t's page given
// (page_of's).
__device__ __forceinline__ long long offset_in_page(const KvView& view, int page, int t) {
    if (view.page_size > 0) {
        const int in_page = t - fast_div(view.page, t) * view.page_size;
        return (static_cast<long long>(page) * view.page_size + in_page) * view.kv_row + view.head;
    }
    return view.slab + static_cast<long long>(t) * HEAD_DIM;
}

// Element offset of token t's row, its page read now (one division gives the page and the row
// within it).
__device__ __forceinline__ long long token_offset(const KvView& view, int t) {
    if (view.page_size > 0) {
        const int index = fast_div(view.page, t);
        const int page = __ldg(view.table + index);
        return (static_cast<long long>(page) * view.page_size + (t - index * view.page_size)) * view.kv_row +
               view.head;
    }
    return view.slab + static_cast<long long>(t) * HEAD_DIM;
}

// The pages of the PASSES rows one thread gathers of the tile at row0 (rows first_row +
// i · ROWS_PER_PASS), read ahead of the gather (the PAGE_AHEAD knob): the loads are in flight
// while the current tile is computed, and the next gather issues its copies without waiting.
template <int PASSES, int ROWS_PER_PASS>
__device__ __forceinline__ void read_pages(int (&pages)[PASSES], const KvView& view, int row0, int limit,
                                           int first_row) {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) pages[i] = page_of(view, row0 + first_row + i * ROWS_PER_PASS, limit);
}

}  // namespace decode_common

// Merges the splits of every packed row (token, head): O = Σ_s 2^(lse_s − M) · O_s / Σ_s 2^(lse_s − M)
// with M = max_s lse_s; a split whose LSE is −inf is skipped (its O is not read); a row with no
// finite LSE writes zeros. One warp per row, each lane D / 32 consecutive elements.
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine(const float* __restrict__ workspace, elem_t* __restrict__ o, int total_rows, int num_splits) {
    constexpr int PER_LANE = HEAD_DIM / 32;
    const int lane = threadIdx.x & 31;
    const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
    if (row >= total_rows) return;
    const float* lse = workspace + static_cast<long long>(num_splits) * total_rows * HEAD_DIM;
    float m = DECODE_NEG_INF;
    for (int s = 0; s < num_splits; ++s) m = fmaxf(m, lse[s * static_cast<long long>(total_rows) + row]);
    float acc[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) acc[e] = 0.f;
    float weights = 0.f;
    if (m != DECODE_NEG_INF) {
        for (int s = 0; s < num_splits; ++s) {
            const long long at = s * static_cast<long long>(total_rows) + row;
            const float l = lse[at];
            if (l == DECODE_NEG_INF) continue;
            const float w = exp2f(l - m);
            weights += w;
            const float* part = workspace + at * HEAD_DIM + lane * PER_LANE;
#pragma unroll
            for (int e = 0; e < PER_LANE; ++e) acc[e] += w * part[e];
        }
    }
    const float inv = weights > 0.f ? 1.f / weights : 0.f;
    elem_t* o_row = o + row * HEAD_DIM + lane * PER_LANE;
#pragma unroll
    for (int e = 0; e < PER_LANE; e += 2)
        *reinterpret_cast<elem2_t*>(o_row + e) = from_float2(acc[e] * inv, acc[e + 1] * inv);
}
