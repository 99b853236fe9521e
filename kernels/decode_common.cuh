// decode_common.cuh — what the split-KV decode kernels (decode.cu, decode_hopper.cu) share: where a
// sequence's keys live in the cache (paged through the block table, or a contiguous slab), the
// gather of a K/V tile's rows through it, and the combine kernel that merges the splits' partial O
// through their log-sum-exp (the workspace layout of decode.cu's header). Include after
// attn_common.cuh and mma_ptx.cuh (cp.async), once HEAD_DIM is defined.
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
};

__device__ __forceinline__ FastDiv make_fast_div(int divisor) {
    FastDiv f;
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
    long long page_elems;           // paged: elements of one page (page_size · H_kv · D)
    int head;                       // paged: element offset of the K/V head within a token's row
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
    view.kv_row = kv_heads * HEAD_DIM;
    view.page_elems = static_cast<long long>(page_size) * view.kv_row;
    view.head = kv_head * HEAD_DIM;
    view.page_size = page_size;
    view.page = make_fast_div(page_size > 0 ? page_size : 1);
    return view;
}

// The token whose row the gather addresses for row t of a sequence of `limit` keys: t itself, or
// for a row past the end (which its copy zero-fills without reading) the last key, so that every
// address is one the table gives and no row takes a branch of its own.
__device__ __forceinline__ int readable(int t, int limit) { return max(min(t, limit - 1), 0); }

// The block-table entry of token t (a readable() one): the read that the gather of t's row
// waits for.
__device__ __forceinline__ int page_of(const KvView& view, int t) {
    return __ldg(view.table + fast_div(view.page, t));
}

// Element offset of token t's row (of the view's K/V head) in K and V alike, t's page given
// (page_of's; unused for a contiguous cache): one wide multiply for the page, the rest within it
// in 32 bits. PAGED is the view's page_size > 0, decided once per tile rather than per row.
template <bool PAGED>
__device__ __forceinline__ long long offset_in_page(const KvView& view, int page, int t) {
    if constexpr (PAGED) {
        const int in_page = t - fast_div(view.page, t) * view.page_size;
        return static_cast<long long>(page) * view.page_elems + (in_page * view.kv_row + view.head);
    } else {
        return view.slab + static_cast<long long>(t) * HEAD_DIM;
    }
}

// Element offset of token t's row, its page read now (one division gives the page and the row
// within it).
template <bool PAGED>
__device__ __forceinline__ long long token_offset(const KvView& view, int t) {
    if constexpr (PAGED) {
        const int index = fast_div(view.page, t);
        const int page = __ldg(view.table + index);
        return static_cast<long long>(page) * view.page_elems + ((t - index * view.page_size) * view.kv_row + view.head);
    } else {
        return view.slab + static_cast<long long>(t) * HEAD_DIM;
    }
}

// The pages of the PASSES rows one thread gathers of the tile at row0 (rows first_row +
// i · ROWS_PER_PASS), read ahead of the gather (the PAGE_AHEAD knob): the loads are in flight
// while the current tile is computed, and the next gather issues its copies without waiting. A
// contiguous cache has no pages to read.
template <int PASSES, int ROWS_PER_PASS>
__device__ __forceinline__ void read_pages(int (&pages)[PASSES], const KvView& view, int row0, int limit,
                                           int first_row) {
    if (view.page_size == 0) return;
#pragma unroll
    for (int i = 0; i < PASSES; ++i)
        pages[i] = page_of(view, readable(row0 + first_row + i * ROWS_PER_PASS, limit));
}

// Rows row0 + first_row + i · ROWS_PER_PASS (i < PASSES) of a K/V tile, chunk `chunk` of each,
// copied by cp.async into K's and V's tiles at swizzle(row, chunk); rows >= limit zero-filled
// without a read. One table read (or, AHEAD, the page read before into `pages`) per row serves K
// and V.
template <bool PAGED, bool AHEAD, int PASSES, int ROWS_PER_PASS, typename Swizzle>
__device__ __forceinline__ void gather_rows(unsigned int k_dst, unsigned int v_dst, const elem_t* __restrict__ k,
                                            const elem_t* __restrict__ v, const KvView& view, int row0,
                                            int limit, int first_row, int chunk, const int (&pages)[PASSES],
                                            Swizzle swizzle) {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int row = first_row + i * ROWS_PER_PASS;
        const int t = row0 + row;
        const int tr = readable(t, limit);  // a row past the end is zero-filled from a valid address
        const long long at =
            (AHEAD ? offset_in_page<PAGED>(view, pages[i], tr) : token_offset<PAGED>(view, tr)) + chunk * 8;
        const unsigned int offset = swizzle(row, chunk);
        mma_ptx::cp_async_16(k_dst + offset, k + at, t < limit);
        mma_ptx::cp_async_16(v_dst + offset, v + at, t < limit);
    }
}

// A K/V tile of ROWS_PER_PASS · PASSES rows from row0, gathered by a block whose thread tid copies
// chunk tid % CHUNKS of rows tid / CHUNKS + i · ROWS_PER_PASS: paged or contiguous decided once
// for the tile; under AHEAD the rows' pages come from `pages` (read_pages of this tile) and the
// next tile's are read into it.
template <bool AHEAD, int PASSES, int ROWS_PER_PASS, int CHUNKS, typename Swizzle>
__device__ __forceinline__ void gather_tile(unsigned int k_dst, unsigned int v_dst, const elem_t* __restrict__ k,
                                            const elem_t* __restrict__ v, const KvView& view, int row0,
                                            int limit, int tid, int (&pages)[PASSES], Swizzle swizzle) {
    const int first_row = tid / CHUNKS, chunk = tid % CHUNKS;
    if (view.page_size > 0)
        gather_rows<true, AHEAD, PASSES, ROWS_PER_PASS>(k_dst, v_dst, k, v, view, row0, limit, first_row, chunk,
                                                       pages, swizzle);
    else
        gather_rows<false, AHEAD, PASSES, ROWS_PER_PASS>(k_dst, v_dst, k, v, view, row0, limit, first_row, chunk,
                                                        pages, swizzle);
    if (AHEAD) read_pages<PASSES, ROWS_PER_PASS>(pages, view, row0 + PASSES * ROWS_PER_PASS, limit, first_row);
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
